"""Bad configuration values given to the real console scripts: one line, non-zero, nothing written.

Each case writes a configuration file whose ``state_path`` is a directory that does not
exist yet, runs the installed script on it, and expects the last line of stderr to be
one message from the script naming the bad value, no traceback, and the state
directory still absent: no SQLite file, no trace, nothing. ``test_compute_process.py``,
``test_conductor_process.py`` and ``test_manage_cli.py`` have the first cases (no
inventory, an unmigrated database, a missing or malformed file); this table extends
them.
"""

import json
import pathlib
import subprocess

import pytest

from tests.functional import processes

NODE = "n1=gpus=1"
UP = ("pcisim", "up", "--port", "0")


def _inventory_file(text, name="node.yaml"):
    """A value naming an inventory file with ``text``, written where the case runs."""

    def value(directory):
        path = directory / name
        path.write_text(text)
        return f"n1={path}"

    return value


# (case, command, {section: {option: value or function of the directory}}, exit code, says)
def _gpu_alias(**values):
    return json.dumps({"name": "g", "vendor_id": "10de", "product_id": "1eb8", **values})


CONFIG_CASES = [
    # pcisim-conductor: the broker and the database
    (
        "conductor: no such driver",
        ("pcisim-conductor",),
        {"DEFAULT": {"transport_url": "nonsense://h/"}},
        1,
        "transport_url: nonsense://h/: Failed to load transport driver",
    ),
    (
        "conductor: port not a number",
        ("pcisim-conductor",),
        {"DEFAULT": {"transport_url": "rabbit://h:port/"}},
        1,
        "transport_url: rabbit://h:port/: invalid literal",
    ),
    (
        "conductor: no scheme",
        ("pcisim-conductor",),
        {"DEFAULT": {"transport_url": "localhost"}},
        1,
        "transport_url: localhost: No scheme specified",
    ),
    (
        "conductor: URL unparsable",
        ("pcisim-conductor",),
        {"database": {"connection": "notaurl"}},
        1,
        "[database] connection: notaurl: Could not parse",
    ),
    (
        "conductor: no such dialect",
        ("pcisim-conductor",),
        {"database": {"connection": "nosuchdb://h/x"}},
        1,
        "nosuchdb://h/x: Can't load plugin",
    ),
    (
        "conductor: driver not installed",
        ("pcisim-conductor",),
        {"database": {"connection": "mysql://h/x"}},
        1,
        "mysql://h/x: No module named 'MySQLdb'",
    ),
    (
        "conductor: no such driver of MySQL",
        ("pcisim-conductor",),
        {"database": {"connection": "mysql+nosuch://h/x"}},
        1,
        "sqlalchemy.dialects:mysql.nosuch",
    ),
    (
        "conductor: database port not a number",
        ("pcisim-conductor",),
        {"database": {"connection": "postgresql://h:port/x"}},
        1,
        "postgresql://h:port/x: invalid literal",
    ),
    (
        "conductor: no SQLite file yet",
        ("pcisim-conductor",),
        {},
        1,
        "pcisim.sqlite does not exist; run: pcisim-manage db sync",
    ),
    (
        "conductor: report_interval 0",
        ("pcisim-conductor",),
        {"DEFAULT": {"report_interval": 0}},
        1,
        "[DEFAULT] report_interval in",
    ),
    (
        "conductor: max_retries a word",
        ("pcisim-conductor",),
        {"database": {"max_retries": "many"}},
        1,
        "[database] max_retries in",
    ),
    # pcisim-compute: its nodes, the device_spec, its host name
    (
        "compute: too many PFs",
        ("pcisim-compute",),
        {"compute": {"inventory": "n1=pfs=113"}},
        1,
        "key 'pfs': 113 is above 112",
    ),
    (
        "compute: an unknown key",
        ("pcisim-compute",),
        {"compute": {"inventory": "n1=cpus=4"}},
        1,
        "key 'cpus': unknown key",
    ),
    (
        "compute: a missing file",
        ("pcisim-compute",),
        {"compute": {"inventory": "n1=/nonexistent/n.yaml"}},
        1,
        "/nonexistent/n.yaml: cannot be read",
    ),
    (
        "compute: a file of bad YAML",
        ("pcisim-compute",),
        {"compute": {"inventory": _inventory_file("pci_devices: [")}},
        1,
        "is not valid YAML",
    ),
    (
        "compute: a file of bad JSON",
        ("pcisim-compute",),
        {"compute": {"inventory": _inventory_file("{", "n.json")}},
        1,
        "is not valid JSON",
    ),
    (
        "compute: a node twice",
        ("pcisim-compute",),
        {"compute": {"inventory": [NODE, "n1=pfs=1"]}},
        1,
        "node 'n1' is defined twice",
    ),
    (
        "compute: a node name with a space",
        ("pcisim-compute",),
        {"compute": {"inventory": "n 1=gpus=1"}},
        1,
        "'n 1' is not a node name",
    ),
    (
        "compute: device_spec not JSON",
        ("pcisim-compute",),
        {"compute": {"inventory": NODE}, "pci": {"device_spec": "vendor=8086"}},
        1,
        "device_spec entry vendor=8086: not valid JSON",
    ),
    (
        "compute: device_spec a number",
        ("pcisim-compute",),
        {"compute": {"inventory": NODE}, "pci": {"device_spec": "5"}},
        1,
        "device_spec entry 5",
    ),
    (
        "compute: device_spec bad address",
        ("pcisim-compute",),
        {"compute": {"inventory": NODE}, "pci": {"device_spec": '{"address": "*:0g:00.*"}'}},
        1,
        "bus",
    ),
    (
        "compute: no such driver",
        ("pcisim-compute",),
        {"compute": {"inventory": NODE}, "DEFAULT": {"transport_url": "kafka2://h/"}},
        1,
        "transport_url: kafka2://h/",
    ),
    (
        "compute: host not a host name",
        ("pcisim-compute",),
        {"compute": {"inventory": NODE}, "DEFAULT": {"host": "bad host!"}},
        1,
        "[DEFAULT] host in",
    ),
    (
        "compute: update interval 0",
        ("pcisim-compute",),
        {"compute": {"inventory": NODE, "update_resources_interval": 0}},
        1,
        "[compute] update_resources_interval in",
    ),
    # pcisim-api: aliases, the broker, where to listen
    (
        "api: alias not JSON",
        ("pcisim-api",),
        {"pci": {"alias": "gpu=10de"}},
        1,
        "alias entry gpu=10de: not valid JSON",
    ),
    (
        "api: alias without a name",
        ("pcisim-api",),
        {"pci": {"alias": '{"vendor_id": "10de"}'}},
        1,
        "the key 'name' is missing",
    ),
    (
        "api: alias of an unknown type",
        ("pcisim-api",),
        {"pci": {"alias": _gpu_alias(device_type="gpu")}},
        1,
        "device_type 'gpu'",
    ),
    (
        "api: alias of an unknown policy",
        ("pcisim-api",),
        {"pci": {"alias": _gpu_alias(numa_policy="any")}},
        1,
        "numa_policy 'any'",
    ),
    (
        "api: alias without a product_id",
        ("pcisim-api",),
        {"pci": {"alias": '{"name": "g", "vendor_id": "10de"}'}},
        1,
        "alias 'g' has no product_id",
    ),
    (
        "api: alias of vdpa devices",
        ("pcisim-api",),
        {"pci": {"alias": _gpu_alias(device_type="vdpa")}},
        1,
        "alias 'g' asks for vdpa devices",
    ),
    (
        "api: alias name with a colon",
        ("pcisim-api",),
        {"pci": {"alias": '{"name": "g:1"}'}},
        1,
        "contains ':' or ','",
    ),
    (
        "api: alias of bad ids",
        ("pcisim-api",),
        {"pci": {"alias": '{"name": "g", "vendor_id": "nvidia"}'}},
        1,
        "vendor_id 'nvidia' is not 4 hex digits",
    ),
    (
        "api: alias twice, disagreeing",
        ("pcisim-api",),
        {
            "pci": {
                "alias": [
                    _gpu_alias(device_type="type-PF"),
                    _gpu_alias(device_type="type-VF"),
                ]
            }
        },
        1,
        "alias entry",
    ),
    ("api: port past 65535", ("pcisim-api",), {"api": {"port": 99999}}, 1, "[api] port in"),
    (
        "api: listen not an address",
        ("pcisim-api",),
        {"api": {"listen": "bad host!"}},
        1,
        "[api] listen in",
    ),
    (
        "api: listen unresolvable",
        ("pcisim-api",),
        {"api": {"listen": "nosuch.invalid"}},
        1,
        "[api] listen: nosuch.invalid does not resolve",
    ),
    (
        "api: listen not here",
        ("pcisim-api",),
        {"api": {"listen": "192.0.2.10", "auth_token": "t"}},
        1,
        "cannot listen on 192.0.2.10:",
    ),
    (
        "api: no scheme",
        ("pcisim-api",),
        {"DEFAULT": {"transport_url": "rabbit"}},
        1,
        "transport_url: rabbit: No scheme specified",
    ),
    # pcisim-manage: exit 2 for a bad configuration
    (
        "manage: URL unparsable",
        ("pcisim-manage", "db", "sync"),
        {"database": {"connection": "notaurl"}},
        2,
        "[database] connection: notaurl",
    ),
    (
        "manage: no such dialect",
        ("pcisim-manage", "db", "version"),
        {"database": {"connection": "nosuchdb://h/x"}},
        2,
        "Can't load plugin",
    ),
    (
        "manage: SQLite where no directory can be",
        ("pcisim-manage", "db", "sync"),
        {"database": {"connection": "sqlite:////proc/pcisim/x.sqlite"}},
        2,
        "cannot create its directory",
    ),
    (
        "manage: retry_interval a word",
        ("pcisim-manage", "db", "sync"),
        {"database": {"retry_interval": "soon"}},
        2,
        "[database] retry_interval in",
    ),
    # pcisim up: everything checked before the database is created
    (
        "up: device_spec not JSON",
        UP,
        {"pci": {"device_spec": "all"}},
        1,
        "device_spec entry all: not valid JSON",
    ),
    ("up: alias without a name", UP, {"pci": {"alias": "{}"}}, 1, "the key 'name' is missing"),
    (
        "up: no such driver",
        UP,
        {"DEFAULT": {"transport_url": "nonsense://h/"}},
        1,
        "transport_url: nonsense://h/",
    ),
    (
        "up: URL unparsable",
        UP,
        {"database": {"connection": "notaurl"}},
        1,
        "[database] connection: notaurl",
    ),
    ("up: port past 65535", UP, {"api": {"port": 70000}}, 1, "[api] port in"),
    (
        "up: a missing inventory",
        (*UP, "--inventory", "/nonexistent/n.yaml"),
        {},
        1,
        "/nonexistent/n.yaml: cannot be read",
    ),
    ("up: no nodes", (*UP, "--nodes", "0"), {}, 1, "nodes"),
    # OpenTelemetry export (docs/operators.md)
    (
        "api: OTLP endpoint not HTTP",
        ("pcisim-api",),
        {"otel": {"otlp_endpoint": "ftp://collector:4318"}},
        1,
        "[otel] otlp_endpoint in",
    ),
    ("up: otel enabled a word", UP, {"otel": {"enabled": "maybe"}}, 1, "[otel] enabled in"),
]


def _config(directory, sections):
    sections = {
        name: {
            option: value(directory) if callable(value) else value
            for option, value in options.items()
        }
        for name, options in sections.items()
    }
    default = {"state_path": directory / "state", **sections.pop("DEFAULT", {})}
    return processes.write_config(directory / "pcisim.conf", {"DEFAULT": default, **sections})


def _run(command, config):
    script, *args = command
    # NOTE: pcisim-manage takes its options before the command, pcisim up after.
    where = [*args, "--config-file", str(config)]
    if script == "pcisim-manage":
        where = ["--config-file", str(config), *args]
    return subprocess.run(
        [str(processes.console_script(script)), *where],
        capture_output=True,
        text=True,
        timeout=60,
        env=processes.environment(),
        cwd=pathlib.Path(config).parent,
    )


@pytest.mark.parametrize(
    ("command", "sections", "exit_code", "says"),
    [case[1:] for case in CONFIG_CASES],
    ids=[case[0] for case in CONFIG_CASES],
)
def test_a_bad_value_is_one_line_naming_it_and_nothing_is_written(
    tmp_path, command, sections, exit_code, says
):
    result = _run(command, _config(tmp_path, sections))

    last_line = result.stderr.splitlines()[-1] if result.stderr else ""
    assert result.returncode == exit_code, result.stderr
    assert says in last_line, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "state").exists()


def test_the_cases_cover_every_console_script():
    assert {case[1][0] for case in CONFIG_CASES} == {
        "pcisim-conductor",
        "pcisim-compute",
        "pcisim-api",
        "pcisim-manage",
        "pcisim",
    }
