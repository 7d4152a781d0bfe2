"""Run pcisim processes, and scripts of the test suite, as separate OS processes.

``ConductorProcess`` starts the installed ``pcisim-conductor`` console script with a
configuration file, waits until it reports ready (``READY=1`` on ``$NOTIFY_SOCKET``, as
systemd asks), collects everything it logs, and stops it with SIGTERM as an
operator's service manager does (or with SIGKILL, as a crash does, and starts it
again). ``PausingComputeProcess`` is a compute that a test can hold at an injection
point (``Gate``). ``run_module`` runs a module of this test suite
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
import socket
import subprocess
import sys
import threading
import time
import uuid

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
START_TIMEOUT = 30
STOP_TIMEOUT = 10
RUN_TIMEOUT = 60
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


CLOUD_ALIASES = [
    '{"name": "gpu", "vendor_id": "10de", "product_id": "1eb8"}',
    '{"name": "vf", "vendor_id": "8086", "product_id": "1520", "device_type": "type-VF"}',
]
CLOUD_DEVICE_SPEC = ['{"vendor_id": "10de"}', '{"vendor_id": "8086"}']


def cloud_config(directory, name, transport_url, connection=None, **sections):
    """Write ``name.conf`` for one process of a test cloud living in ``directory`` on
    RabbitMQ: topics of the cloud's own, the test exchange, GPU and VF aliases.
    ``sections`` add to (or override) options section by section."""
    run = directory.name
    base = {
        "DEFAULT": {
            "state_path": directory,
            "transport_url": transport_url,
            "control_exchange": "pcisim_test",
        },
        "conductor": {"topic": f"conductor-{run}"},
        "compute": {"topic": f"compute-{run}"},
        "oslo_messaging_rabbit": {"amqp_auto_delete": "true"},
        "pci": {"device_spec": CLOUD_DEVICE_SPEC, "alias": CLOUD_ALIASES},
        "api": {"port": 0},
    }
    if connection:
        base["database"] = {"connection": connection}
    for section, options in sections.items():
        base.setdefault(section, {}).update(options)
    return write_config(directory / f"{name}.conf", base)


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

    def __init__(self, config_file, topic=None):
        self.config_file = pathlib.Path(config_file)
        self.topic = topic  # the topic the configuration file names, for clients
        self.process = None
        self.lines = []  # of every run, when it was started again
        self.run_began = 0  # the index in ``lines`` of this run's first line
        self._reader = None
        self._notify = None  # the socket this run reports readiness to

    @property
    def output(self):
        return "".join(self.lines)

    @property
    def run_output(self):
        """What the current (or last) run logged."""
        return "".join(self.lines[self.run_began :])

    def command(self):
        return [str(console_script(self.script)), "--config-file", str(self.config_file)]

    def environment(self):
        return environment()

    def start(self, timeout=START_TIMEOUT):
        """Start the service and wait until it says it is ready."""
        self.launch()
        self.wait_ready(timeout)
        return self

    def launch(self):
        """Start the service; ``wait_ready`` waits for it to be ready.

        It is told to report readiness as systemd asks a service to (``READY=1`` on the
        datagram socket ``$NOTIFY_SOCKET``), to a socket of this run's own.
        """
        self.run_began = len(self.lines)
        self._close_notify_socket()
        self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        name = f"@pcisim-test-{uuid.uuid4().hex}"
        self._notify.bind("\0" + name[1:])  # NOTE: '@' names an abstract socket
        self.process = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**self.environment(), "NOTIFY_SOCKET": name},
            cwd=self.config_file.parent,
        )
        self._reader = threading.Thread(target=self._read, args=(self.process,), daemon=True)
        self._reader.start()
        return self

    def wait_ready(self, timeout=START_TIMEOUT):
        """Wait until this run reports ``READY=1``; fail if it exits first."""
        deadline = time.monotonic() + timeout
        self._notify.settimeout(0.1)
        while True:
            try:
                if b"READY=1" in self._notify.recv(4096).split(b"\n"):
                    return self
            except TimeoutError:
                pass
            if self.process.poll() is not None:
                self._reader.join(timeout=5)
                raise AssertionError(
                    f"{self.script} exited with {self.process.returncode} before it was "
                    f"ready:\n{self.run_output}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.script} not ready within {timeout} s:\n{self.run_output}"
                )

    def _read(self, process):
        for line in process.stdout:
            self.lines.append(line)

    def _close_notify_socket(self):
        if self._notify is not None:
            self._notify.close()
            self._notify = None

    def mark(self):
        """A place in the output, for ``wait_for(..., since=mark)``."""
        return len(self.lines)

    def logged_since(self, mark):
        return "".join(self.lines[max(mark, self.run_began) :])

    def wait_for(self, text, timeout, since=None):
        """Wait until this run has logged ``text`` (after the ``mark()`` ``since``);
        fail if it exits first."""
        since = self.run_began if since is None else since
        deadline = time.monotonic() + timeout
        while text not in self.logged_since(since):
            if self.process.poll() is not None:
                self._reader.join(timeout=5)
                if text in self.logged_since(since):
                    return
                raise AssertionError(
                    f"{self.script} exited with {self.process.returncode} before "
                    f"logging {text!r}:\n{self.output}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} within {timeout} s:\n{self.run_output}")
            time.sleep(0.05)

    def running(self):
        return self.process is not None and self.process.poll() is None

    def terminate(self, timeout=STOP_TIMEOUT):
        """Send SIGTERM and return the exit code; ``TimeoutExpired`` if it lingers."""
        self.process.send_signal(signal.SIGTERM)
        returncode = self.process.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return returncode

    def kill(self):
        """Make sure the child is gone (after a failed test, too); harmless if it is.

        SIGKILL, as a crash or the OOM killer ends a process: nothing of it runs on.
        """
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT)
        if self._reader is not None:
            self._reader.join(timeout=5)
        self.process.stdout.close()
        self._close_notify_socket()

    def restart(self, timeout=START_TIMEOUT):
        """Kill the service if it runs, and start it again with the same configuration."""
        self.kill()
        return self.start(timeout)

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


class OldConductorProcess(ConductorProcess):
    """A conductor not yet upgraded (``python -m tests.functional.old_conductor``, the
    same ``main`` with the objects of the release before)."""

    def command(self):
        config = ["--config-file", str(self.config_file)]
        return [sys.executable, "-m", "tests.functional.old_conductor", *config]

    def environment(self):
        env = environment()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        return env


class ComputeProcess(ServiceProcess):
    script = "pcisim-compute"


class ApiProcess(ServiceProcess):
    script = "pcisim-api"

    @property
    def url(self):
        # NOTE: ready, it has logged its address, which the reader may not have read yet.
        self.wait_for("pcisim API listening on", START_TIMEOUT)
        return re.search(r"pcisim API listening on (http://\S+)", self.run_output).group(1)


class Gate:
    """Holds a flow of a ``PausingComputeProcess`` at an injection point.

    ``arm()`` closes the gate; the next flow of the compute to reach the point takes
    it, says so (``wait_reached`` returns its details: the instance's uuid, or the
    node), and waits there until ``release()``, or until the compute is killed. Files
    in a directory shared with the compute are the signals, so that a test sees the
    flow exactly at the point, whatever the timing.
    """

    def __init__(self, directory, point):
        self.directory = pathlib.Path(directory)
        self.point = point

    def _file(self, state):
        return self.directory / f"{state}-{self.point}"

    def arm(self):
        for state in ("taken", "reached", "release"):
            self._file(state).unlink(missing_ok=True)
        self._file("arm").touch()
        return self

    def wait_reached(self, timeout=START_TIMEOUT):
        """The details of the flow held at the point, once one is."""
        deadline = time.monotonic() + timeout
        while not self._file("reached").exists():
            if time.monotonic() > deadline:
                raise AssertionError(f"no flow reached {self.point} within {timeout} s")
            time.sleep(0.01)
        return self._file("reached").read_text()

    def release(self):
        self._file("release").touch()

    def disarm(self):
        self._file("arm").unlink(missing_ok=True)


class PausingComputeProcess(ComputeProcess):
    """``pcisim-compute`` whose flows a ``Gate`` can hold at an injection point
    (``python -m tests.functional.pausing_compute``, which runs the same ``main``)."""

    def __init__(self, config_file, gates):
        super().__init__(config_file)
        self.gates = pathlib.Path(gates)

    def command(self):
        return [
            sys.executable,
            "-m",
            "tests.functional.pausing_compute",
            "--config-file",
            str(self.config_file),
        ]

    def environment(self):
        env = environment(PCISIM_TEST_GATES=str(self.gates))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        return env

    def gate(self, point):
        return Gate(self.gates, point)
