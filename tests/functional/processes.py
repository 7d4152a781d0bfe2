"""Run pcisim processes, and scripts of the test suite, as separate OS processes.

``ConductorProcess`` starts the installed ``pcisim-conductor`` console script with a
configuration file, collects everything it logs, and stops it with SIGTERM as an
operator's service manager does. ``run_module`` runs a module of this test suite
(``python -m tests.functional.NAME``) to its end, ``run_python`` any Python code.

A child reads only the configuration file it is given: the environment passed on is
stripped of oslo.config's ``OS_<GROUP>__<OPTION>`` overrides, and it runs in the
directory it is given, so that nothing of the developer's machine decides which
database or broker it uses.
"""

import os
import pathlib
import re
import signal
import subprocess
import sys
import threading
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
START_TIMEOUT = 30
STOP_TIMEOUT = 10
RUN_TIMEOUT = 60
LISTENING = "pcisim-conductor listening on topic"
STOPPED = "pcisim-conductor stopped serving topic"


def console_script(name):
    """The console script installed next to this interpreter (``.venv/bin``)."""
    path = pathlib.Path(sys.executable).with_name(name)
    if not path.exists():
        raise RuntimeError(f"{name} is not installed; `make test` installs the project")
    return path


def environment(**extra):
    """This process's environment without ``OS_*`` overrides, plus ``extra``."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("OS_")}
    env.update(extra)
    return env


def write_config(path, sections):
    """Write ``{section: {option: value}}`` to the INI file ``path``; a list value is
    a multi-valued option, one line per item."""
    lines = []
    for section, options in sections.items():
        lines.append(f"[{section}]")
        for name, value in options.items():
            # NOTE: oslo.config substitutes $name in values; a password may contain a '$'.
            items = value if isinstance(value, list) else [value]
            lines += [f"{name} = {str(item).replace('$', '$$')}" for item in items]
        lines.append("")
    path = pathlib.Path(path)
    path.write_text("\n".join(lines))
    return path


def rabbit_config(path, transport_url, topic, connection=None):
    """A configuration file for a process of a control plane of its own on RabbitMQ.

    The conductor topic is the caller's, so that runs never share queues; the queues
    are deleted with their last consumer, and the exchange is the test suite's own.
    """
    sections = {
        "DEFAULT": {
            "state_path": pathlib.Path(path).parent,
            "transport_url": transport_url,
            "control_exchange": "pcisim_test",
        },
        "conductor": {"topic": topic},
        "oslo_messaging_rabbit": {"amqp_auto_delete": "true"},
    }
    if connection is not None:
        sections["database"] = {"connection": connection}
    return write_config(path, sections)


def run_python(*args, cwd, input=None, env=None, timeout=RUN_TIMEOUT):
    """Run this interpreter with ``args`` to its end, its output captured as text.

    The test suite is importable as ``tests`` in the child, wherever it runs.
    """
    env = dict(env or environment())
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, *map(str, args)],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


def run_module(module, *args, **kwargs):
    """Run ``python -m MODULE ARGS...`` (a script of this suite) to its end."""
    return run_python("-m", module, *args, **kwargs)


def run_conductor(config_file, timeout=RUN_TIMEOUT):
    """Run ``pcisim-conductor --config-file CONFIG`` to its end (a refusal to start)."""
    return subprocess.run(
        [str(console_script("pcisim-conductor")), "--config-file", str(config_file)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment(),
        cwd=pathlib.Path(config_file).parent,
    )


class ServiceProcess:
    """``SCRIPT --config-file CONFIG`` (a pcisim service) running in a child process.

    Its standard output and error are read into ``lines`` as they come, so the child
    never blocks on a full pipe and a failing test can show what it logged.
    """

    script = None
    listening = None

    def __init__(self, config_file, topic=None):
        self.config_file = pathlib.Path(config_file)
        self.topic = topic  # the topic the configuration file names, for clients
        self.process = None
        self.lines = []
        self._reader = None

    @property
    def output(self):
        return "".join(self.lines)

    def start(self, timeout=START_TIMEOUT):
        """Start the service and wait until it logs that it is listening."""
        self.process = subprocess.Popen(
            [str(console_script(self.script)), "--config-file", str(self.config_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=environment(),
            cwd=self.config_file.parent,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_for(self.listening, timeout)
        return self

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line)

    def wait_for(self, text, timeout):
        """Wait until the service has logged ``text``; fail if it exits first."""
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if self.process.poll() is not None:
                self._reader.join(timeout=5)
                if text in self.output:
                    return
                raise AssertionError(
                    f"{self.script} exited with {self.process.returncode} before "
                    f"logging {text!r}:\n{self.output}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} within {timeout} s:\n{self.output}")
            time.sleep(0.05)

    def terminate(self, timeout=STOP_TIMEOUT):
        """Send SIGTERM and return the exit code; ``TimeoutExpired`` if it lingers."""
        self.process.send_signal(signal.SIGTERM)
        returncode = self.process.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return returncode

    def kill(self):
        """Make sure the child is gone (after a failed test, too); harmless if it is."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT)
        self._reader.join(timeout=5)
        self.process.stdout.close()

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.kill()
            raise

    def __exit__(self, *exc_info):
        self.kill()


class ConductorProcess(ServiceProcess):
    script = "pcisim-conductor"
    listening = LISTENING


class ComputeProcess(ServiceProcess):
    script = "pcisim-compute"
    listening = "pcisim-compute listening on topic"


class ApiProcess(ServiceProcess):
    script = "pcisim-api"
    listening = "pcisim API listening on"

    @property
    def url(self):
        return re.search(r"pcisim API listening on (http://\S+)", self.output).group(1)
