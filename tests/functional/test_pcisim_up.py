"""`pcisim up` (what `make run` starts): the README's three commands work against it."""

import contextlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

PCISIM = pathlib.Path(sys.executable).with_name("pcisim")
OPENSTACK = pathlib.Path(sys.executable).with_name("openstack")


def _cli(url, *args, cwd=None):
    return subprocess.run(
        [str(PCISIM), "--url", url, *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def _request(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _wait(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while not (result := predicate()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s"
        time.sleep(0.1)
    return result


@contextlib.contextmanager
def _running_up(directory):
    """A running `pcisim up --trace` on a free port with its state in ``directory``."""
    config = directory / "pcisim.conf"
    config.write_text(f"[DEFAULT]\nstate_path = {directory / 'state'}\n")
    process = subprocess.Popen(
        [str(PCISIM), "up", "--trace", "--port", "0", "--config-file", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=directory,
    )
    output = []

    def banner():
        output.append(process.stdout.readline())
        assert process.poll() is None, "".join(output)
        return re.search(r"API at (http://\S+)", output[-1])

    try:
        yield _wait(banner, timeout=90).group(1), process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        process.stdout.close()


@pytest.fixture(scope="module")
def up_directory(tmp_path_factory):
    return tmp_path_factory.mktemp("up")


@pytest.fixture(scope="module")
def up(up_directory):
    """One `pcisim up` for the module's tests; yields (url, process)."""
    with _running_up(up_directory) as running:
        yield running


@pytest.fixture
def own_up(tmp_path):
    """A `pcisim up` of the test's own, which it may stop."""
    with _running_up(tmp_path) as running:
        yield running


def test_a_gpu_server_boots_shows_its_device_and_is_deleted(up):
    url, process = up
    status, created = _request(
        "POST", f"{url}/servers", {"server": {"name": "gpu-vm", "pci_requests": "gpu:1"}}
    )
    assert status == 202
    server_url = f"{url}/servers/{created['server']['id']}"
    server = _wait(
        lambda: (s := _request("GET", server_url)[1]["server"])["status"] != "BUILD" and s
    )
    assert server["status"] == "ACTIVE"
    assert [d["status"] for d in server["pci_devices"]] == ["allocated"]
    assert _request("DELETE", server_url)[0] == 204
    _wait(lambda: _request("GET", server_url)[0] == 404)


def test_ctrl_c_stops_it_cleanly(own_up):
    url, process = own_up
    assert _request("GET", f"{url}/hypervisors")[0] == 200
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=20) == 0
    assert "stopping gracefully" in process.stdout.read()


def test_the_readme_commands_boot_show_and_delete_a_gpu_server(up):
    url, _ = up
    created = _cli(url, "-f", "json", "server", "create", "gpu-vm", "--pci", "gpu:1", "--wait")
    assert created.returncode == 0, created.stderr
    server = json.loads(created.stdout)
    assert server["status"] == "ACTIVE"
    shown = _cli(url, "server", "show", server["id"])
    assert "allocated" in shown.stdout and "type-PCI" in shown.stdout
    assert _cli(url, "server", "delete", server["id"], "--wait").returncode == 0
    devices = json.loads(_cli(url, "pci", "list", "--status", "allocated", "-f", "json").stdout)
    assert devices == []


def _readme_clouds_yaml(url):
    """The README's clouds.yaml, pointed at ``url``."""
    readme = (pathlib.Path(__file__).parents[2] / "README.md").read_text()
    text = re.search(r"```yaml\n(clouds:.*?)```", readme, re.S).group(1)
    return text.replace("http://127.0.0.1:8774", url)


def test_the_readme_openstack_commands_boot_show_and_delete_a_gpu_server(up, tmp_path):
    url, _ = up
    config = tmp_path / ".config" / "openstack"
    config.mkdir(parents=True)
    (config / "clouds.yaml").write_text(_readme_clouds_yaml(url))
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}

    def openstack(*args):
        return subprocess.run(
            [str(OPENSTACK), "--os-cloud", "pcisim", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**environment, "HOME": str(tmp_path)},
        )

    create = ("server", "create", "--flavor", "gpu.small", "--image", "cirros-0.6.3")
    created = openstack(*create, "--nic", "none", "--wait", "os-gpu-vm", "-f", "json")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["status"] == "ACTIVE"
    shown = json.loads(openstack("server", "show", "os-gpu-vm", "-f", "json").stdout)
    assert "10de:1eb8 type-PCI allocated" in shown["properties"]["os-pci:pci_devices"]
    assert openstack("server", "delete", "--wait", "os-gpu-vm").returncode == 0
    devices = json.loads(_cli(url, "pci", "list", "--status", "allocated", "-f", "json").stdout)
    assert devices == []


def test_the_pci_tree_shows_vfs_under_their_pf(up):
    url, _ = up
    tree = _cli(url, "pci", "tree", "compute-2")
    assert tree.returncode == 0, tree.stderr
    lines = tree.stdout.splitlines()
    assert lines[1].strip().startswith("0000:10:00.0  type-PF")
    assert lines[2].startswith("    0000:10:10.0  type-VF")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("server", "create", "vm", "--pci", "fpga:1"), "fpga"),
        (("server", "show", "00000000-0000-0000-0000-000000000000"), "could not be found"),
        (("pci", "tree", "nowhere"), "nowhere"),
    ],
)
def test_errors_are_one_line_and_exit_1(up, args, says):
    url, _ = up
    result = _cli(url, *args)
    assert result.returncode == 1
    assert says in result.stderr and "Traceback" not in result.stderr


def test_an_unreachable_api_is_named():
    result = _cli("http://127.0.0.1:1", "server", "list")
    assert result.returncode == 1
    assert "cannot reach the pcisim API at http://127.0.0.1:1" in result.stderr


def test_a_server_no_host_can_take_exits_1_with_its_fault(up):
    url, _ = up
    result = _cli(url, "server", "create", "big", "--pci", "gpu:9", "--wait")
    assert result.returncode == 1
    assert "No valid host" in result.stdout


def test_pcisim_trace_shows_the_last_delete_from_the_api_to_the_compute(up, up_directory):
    url, _ = up
    created = _cli(url, "-f", "json", "server", "create", "traced", "--pci", "gpu:1", "--wait")
    server_id = json.loads(created.stdout)["id"]
    assert _cli(url, "server", "delete", server_id, "--wait").returncode == 0
    # run where `pcisim up` keeps its state, as a user does: ./state/trace.jsonl
    shown = _wait(
        lambda: (r := _cli(url, "trace", cwd=up_directory)) and "ComputeNode" in r.stdout and r
    )
    assert shown.stdout.startswith("flow req-")
    assert f"DELETE /servers/{server_id}" in shown.stdout.splitlines()[0]
    assert "terminate_instance" in shown.stdout
    assert "ComputeNode.save_with_devices" in shown.stdout


def test_pcisim_trace_draws_a_mermaid_sequence_diagram(up, up_directory):
    url, _ = up
    _cli(url, "server", "create", "drawn", "--pci", "gpu:1", "--wait")
    diagram = _cli(url, "trace", "--mermaid", cwd=up_directory).stdout.splitlines()
    assert diagram[:4] == [
        "sequenceDiagram",
        "    participant client",
        "    participant api",
        "    participant conductor",
    ]
    assert "    conductor-)compute_1: build_and_run_instance (rpc 1.0)" in diagram


def test_pcisim_trace_names_a_flow_it_does_not_have(up, up_directory):
    url, _ = up
    result = _cli(url, "trace", "req-nosuch", cwd=up_directory)
    assert result.returncode == 1
    assert "no flow req-nosuch" in result.stderr and "Traceback" not in result.stderr


def test_a_server_is_shown_and_deleted_by_its_name(up):
    url, _ = up
    created = _cli(url, "-f", "json", "server", "create", "by-name-vm", "--wait", "60")
    server_id = json.loads(created.stdout)["id"]
    shown = json.loads(_cli(url, "-f", "json", "server", "show", "by-name-vm").stdout)
    assert shown["id"] == server_id
    deleted = _cli(url, "server", "delete", "by-name-vm", "--wait")
    assert (deleted.returncode, deleted.stdout) == (0, f"Server {server_id} deleted.\n")


def test_a_name_two_servers_share_is_refused_with_their_ids(up):
    url, _ = up
    ids = [
        json.loads(_cli(url, "-f", "json", "server", "create", "twin", "--wait").stdout)["id"]
        for _ in range(2)
    ]
    shown = _cli(url, "server", "show", "twin")
    assert shown.returncode == 1
    assert "more than one server is named 'twin'" in shown.stderr
    assert all(server_id in shown.stderr for server_id in ids)
    for server_id in ids:
        _cli(url, "server", "delete", server_id, "--wait")


def test_a_delete_without_wait_says_it_has_begun(up):
    url, _ = up
    server_id = json.loads(_cli(url, "-f", "json", "server", "create", "quick").stdout)["id"]
    deleted = _cli(url, "server", "delete", server_id)
    assert deleted.stdout == f"Server {server_id} is being deleted.\n"


def test_a_hypervisor_is_shown_by_its_name(up):
    url, _ = up
    nodes = json.loads(_cli(url, "-f", "json", "hypervisor", "list").stdout)
    shown = json.loads(
        _cli(url, "-f", "json", "hypervisor", "show", nodes[0]["hypervisor_hostname"]).stdout
    )
    assert shown["id"] == nodes[0]["id"]


def test_the_pci_listing_names_each_device_host(up):
    url, _ = up
    header, *rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in _cli(url, "pci", "list").stdout.splitlines()
        if line.startswith("|")
    ]
    hosts = {row[header.index("host")] for row in rows}
    assert hosts == {"compute-1", "compute-2"}


def test_a_listing_whose_reader_has_gone_ends_quietly(up):
    url, _ = up
    process = subprocess.Popen(
        [str(PCISIM), "--url", url, "pci", "list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    process.stdout.close()  # as `| head` does once it has read enough
    assert process.wait(timeout=60) == 1
    assert process.stderr.read() == ""
    process.stderr.close()


def test_up_takes_the_global_options_before_it():
    shown = subprocess.run(
        [str(PCISIM), "-f", "json", "up", "--help"], capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert "--nodes" in shown.stdout
