"""Run the installed ``pcisim-manage`` console script in a subprocess, as an operator does.

A run reads only the configuration file it is given: the environment passed on is
stripped of oslo.config's ``OS_<GROUP>__<OPTION>`` overrides, and the working directory
is the file's own, so that nothing of the developer's machine decides which database
the command touches.
"""

import functools
import os
import pathlib
import shutil
import subprocess
import sys

TIMEOUT = 60
CONFIG_NAME = "pcisim.conf"


@functools.cache
def manage_script():
    """The console script installed next to this interpreter (``.venv/bin``)."""
    beside = pathlib.Path(sys.executable).with_name("pcisim-manage")
    if beside.exists():
        return beside
    found = shutil.which("pcisim-manage")
    if found is None:
        raise RuntimeError("pcisim-manage is not installed; `make test` installs the project")
    return pathlib.Path(found)


def write_config(directory, connection=None, text=None, **database):
    """Write ``pcisim.conf`` in ``directory``, whose ``state_path`` is ``directory``.

    ``connection`` and ``database`` fill the ``[database]`` section; ``text`` replaces
    the whole file, for files that are wrong on purpose.
    """
    path = pathlib.Path(directory) / CONFIG_NAME
    if text is None:
        lines = ["[DEFAULT]", f"state_path = {_escaped(directory)}", "", "[database]"]
        if connection is not None:
            lines.append(f"connection = {_escaped(connection)}")
        lines += [f"{name} = {_escaped(value)}" for name, value in database.items()]
        text = "\n".join(lines) + "\n"
    path.write_text(text)
    return path


def _escaped(value):
    # NOTE: oslo.config substitutes $name in values; a password may contain a '$'.
    return str(value).replace("$", "$$")


def command(config_file, *args):
    return [str(manage_script()), "--config-file", str(config_file), *map(str, args)]


def _environment():
    return {name: value for name, value in os.environ.items() if not name.startswith("OS_")}


def run(config_file, *args, timeout=TIMEOUT):
    """Run ``pcisim-manage --config-file CONFIG ARGS...`` to its end."""
    return subprocess.run(
        command(config_file, *args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_environment(),
        cwd=pathlib.Path(config_file).parent,
    )


def start(config_file, *args):
    """Start ``pcisim-manage`` without waiting, its output captured as text."""
    return subprocess.Popen(
        command(config_file, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(),
        cwd=pathlib.Path(config_file).parent,
    )


def parse_table(output):
    """The header and rows of the one prettytable in ``output``, as lists of cells."""
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in output.splitlines()
        if line.startswith("|")
    ]
    if not rows:
        raise AssertionError(f"no table in the output:\n{output}")
    return rows[0], rows[1:]


def archived_counts(output):
    """{table: rows archived} from the table ``archive_deleted_rows --verbose`` prints."""
    header, rows = parse_table(output)
    assert header == ["Table", "Number of Rows Archived"], output
    return {table: int(count) for table, count in rows}
