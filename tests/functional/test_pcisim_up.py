"""`pcisim up` (what `make run` starts): the README's three commands work against it."""

import json
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
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return result


@pytest.fixture
def up(tmp_path):
    """A running `pcisim up` on a free port with its state in tmp_path; yields its URL."""
    config = tmp_path / "pcisim.conf"
    config.write_text(f"[DEFAULT]\nstate_path = {tmp_path / 'state'}\n")
    process = subprocess.Popen(
        [str(PCISIM), "up", "--port", "0", "--config-file", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
    )
    try:
        url = _wait(lambda: re.search(r"API at (http://\S+)", process.stdout.readline() or ""))
        yield url.group(1), process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        process.stdout.close()


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


def test_ctrl_c_stops_it_cleanly(up):
    url, process = up
    assert _request("GET", f"{url}/hypervisors")[0] == 200
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=20) == 0
    assert "stopping gracefully" in process.stdout.read()
