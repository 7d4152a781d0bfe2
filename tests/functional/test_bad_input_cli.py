"""Bad arguments of the ``pcisim`` CLI: exit 2 for usage, 1 for the API's refusal, one line.

The installed console script runs against the HTTP API of a control plane on SQLite,
served for real in this process. A usage error stops before any request (argparse's
usage text, then one ``error:`` line naming the argument); an error of the API is one
line on stderr with its code. Never a traceback, never a row written.
``test_pcisim_up.py`` has the first cases (an unknown alias or server, an unreachable
API); this table extends them.
"""

import pathlib
import subprocess
import sys

import pytest

from tests.functional import api_server, processes

PCISIM = pathlib.Path(sys.executable).with_name("pcisim")
UUID = "00000000-0000-0000-0000-000000000000"
CREATE = ("server", "create", "vm")

# (case, arguments, environment, exit code, what the last line of stderr says)
CLI_CASES = [
    # usage: exit 2, nothing sent
    ("no command", (), {}, 2, "the following arguments are required: COMMAND"),
    ("an unknown command", ("servers", "list"), {}, 2, "invalid choice: 'servers'"),
    ("no action", ("server",), {}, 2, "required: ACTION"),
    ("no name", ("server", "create"), {}, 2, "required: name"),
    ("--pci empty", (*CREATE, "--pci", ""), {}, 2, "argument --pci: is empty"),
    ("--pci blank", (*CREATE, "--pci", "  "), {}, 2, "argument --pci: is empty"),
    ("--vcpus a word", (*CREATE, "--vcpus", "two"), {}, 2, "--vcpus: invalid int value: 'two'"),
    ("--vcpus a fraction", (*CREATE, "--vcpus", "1.5"), {}, 2, "invalid int value: '1.5'"),
    ("--memory empty", (*CREATE, "--memory", ""), {}, 2, "--memory: invalid int value: ''"),
    ("an unknown format", ("-f", "xml", "server", "list"), {}, 2, "invalid choice: 'xml'"),
    ("an unknown format after", ("server", "list", "-f", "yaml"), {}, 2, "invalid choice: 'yaml'"),
    (
        "--url not a URL",
        ("--url", "api", "server", "list"),
        {},
        2,
        "'api' is not an http:// or https:// URL",
    ),
    (
        "--url of another scheme",
        ("--url", "ftp://h/", "server", "list"),
        {},
        2,
        "'ftp://h/' is not an http",
    ),
    ("--url a broken IPv6", ("--url", "http://[::1", "server", "list"), {}, 2, "is not an http"),
    ("--url port a word", ("--url", "http://h:api/", "server", "list"), {}, 2, "is not an http"),
    ("--url after the command", ("server", "list", "--url", "h:1"), {}, 2, "'h:1' is not an http"),
    (
        "PCISIM_URL not a URL",
        ("server", "list"),
        {"PCISIM_URL": "localhost"},
        2,
        "'localhost' is not",
    ),
    # the API refuses: exit 1, one line with the code
    (
        "--pci without a count",
        (*CREATE, "--pci", "gpu"),
        {},
        1,
        "has no count; write 'gpu:1' for one device (pci.request_invalid",
    ),
    ("--pci count a word", (*CREATE, "--pci", "gpu:x"), {}, 1, "'x' of 'gpu' is not a positive"),
    (
        "--pci count past 64 bits",
        (*CREATE, "--pci", "gpu:99999999999999999999"),
        {},
        1,
        "is above 64",
    ),
    ("--pci a NUL", (*CREATE, "--pci", "gpu:1,\x01"), {}, 1, "pci.request_invalid"),
    ("--vcpus 0", (*CREATE, "--vcpus", "0"), {}, 1, "vcpus: 0 is less than the minimum of 1"),
    ("--memory negative", (*CREATE, "--memory", "-1"), {}, 1, "memory_mb: -1 is less than"),
    ("--disk past its maximum", (*CREATE, "--disk", "99999999999"), {}, 1, "root_gb: 99999999999"),
    ("an empty name", ("server", "create", ""), {}, 1, "name: '' should be non-empty"),
    ("a name with a newline", ("server", "create", "v\nm"), {}, 1, "holds a control character"),
    ("a name of 256 characters", ("server", "create", "v" * 256), {}, 1, "is too long"),
    # a server or hypervisor is named by id or by name: a name no one has is 404
    (
        "a server no one is named",
        ("server", "show", "vm"),
        {},
        1,
        "no server 'vm' (server.not_found",
    ),
    ("a server named as a path", ("server", "show", "../hypervisors"), {}, 1, "no server '../"),
    ("a server id with a query", ("server", "show", f"{UUID}?a=1"), {}, 1, "server.not_found"),
    ("delete of no server", ("server", "delete", "x", "--wait"), {}, 1, "no server 'x'"),
    ("--wait a word", ("server", "delete", "x", "--wait", "soon"), {}, 2, "'soon' is not a number"),
    ("--wait zero", (*CREATE, "--wait", "0"), {}, 2, "'0' is not a number of seconds"),
    ("--server no one is named", ("pci", "list", "--server", "vm"), {}, 1, "no server 'vm'"),
    ("a hypervisor no one is named", ("hypervisor", "show", "one"), {}, 1, "no hypervisor 'one'"),
    ("a hypervisor named -1", ("hypervisor", "show", "-1"), {}, 1, "no hypervisor '-1'"),
    ("a hypervisor id past 32 bits", ("hypervisor", "show", "2147483648"), {}, 1, "no hypervisor"),
    ("a hypervisor named in other digits", ("hypervisor", "show", "²"), {}, 1, "no hypervisor '²'"),
    ("delete of no such server", ("server", "delete", UUID), {}, 1, "server.not_found, HTTP 404"),
    (
        "no such hypervisor",
        ("hypervisor", "show", "999999"),
        {},
        1,
        "hypervisor.not_found, HTTP 404",
    ),
    ("--status unknown", ("pci", "list", "--status", "broken"), {}, 1, "'broken' is not one of"),
    ("--type unknown", ("pci", "list", "--type", "gpu"), {}, 1, "'gpu' is not one of"),
    ("--host of 256", ("pci", "list", "--host", "h" * 256), {}, 1, "is too long (request.invalid"),
    ("a tree of no host", ("pci", "tree", ""), {}, 1, "no hypervisor '' (hypervisor.not_found"),
    ("a trace file not there", ("trace", "--file", "/nonexistent/t.jsonl"), {}, 1, "no trace in"),
]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with api_server.sqlite_plane(tmp_path_factory) as plane:
        with api_server.serving(api_server.app(plane)) as served:
            yield served


def _cli(url, args, env):
    environment = processes.environment(**{"PCISIM_URL": url, **env})
    environment.pop("PCISIM_TOKEN", None)
    return subprocess.run(
        [str(PCISIM), *args], capture_output=True, text=True, timeout=60, env=environment
    )


@pytest.mark.parametrize(
    ("args", "env", "exit_code", "says"),
    [case[1:] for case in CLI_CASES],
    ids=[case[0] for case in CLI_CASES],
)
def test_a_bad_argument_exits_with_one_line_naming_it_and_writes_nothing(
    url, args, env, exit_code, says
):
    before = api_server.database_rows()

    result = _cli(url, args, env)

    lines = result.stderr.splitlines()
    assert result.returncode == exit_code, result.stderr
    assert lines and says in lines[-1], result.stderr
    assert lines[-1].startswith("pcisim")
    if exit_code == 1:
        assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert api_server.database_rows() == before
