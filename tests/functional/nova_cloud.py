"""A cloud for the OpenStack clients: an in-process control plane on SQLite (one GPU, a
PF with two VFs), its HTTP API served on a free loopback port, and the way each client
is pointed at it (``--os-auth-type none --os-endpoint``)."""

import contextlib
import os
import pathlib
import subprocess
import sys

from tests.functional import api_server

OPENSTACK = pathlib.Path(sys.executable).with_name("openstack")
GPU_FLAVOR = {"name": "gpu.small", "id": "gpu.small", "ram": 512, "vcpus": 1, "disk": 1}


@contextlib.contextmanager
def cloud(tmp_path_factory, auth_token=None, users=()):
    """Yields ``(plane, url)``, with a flavor ``gpu.small`` that asks for a GPU."""
    with api_server.sqlite_plane(tmp_path_factory) as plane:
        app = api_server.app(plane, auth_token=auth_token, users=users)
        client = app.test_client()
        headers = {"X-Auth-Token": auth_token} if auth_token else {}
        client.post("/v2.1/flavors", json={"flavor": GPU_FLAVOR}, headers=headers)
        specs = {"extra_specs": {"pci_passthrough:alias": "gpu:1"}}
        client.post("/v2.1/flavors/gpu.small/os-extra_specs", json=specs, headers=headers)
        with api_server.serving(app) as url:
            yield plane, url


def cli_environment(home):
    """The environment of an ``openstack`` run: no OS_* variable nor clouds.yaml of
    the machine's."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    return {**environment, "HOME": str(home)}


def openstack(url, home, *args, auth=("--os-auth-type", "none")):
    """Run the ``openstack`` CLI against ``url``; the CompletedProcess."""
    return subprocess.run(
        [
            str(OPENSTACK),
            *auth,
            "--os-endpoint",
            f"{url}/v2.1",
            "--os-identity-api-version",
            "3",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_environment(home),
    )
