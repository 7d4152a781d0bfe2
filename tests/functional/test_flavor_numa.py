"""A flavor's ``hw:numa_nodes`` places the guest's NUMA cells on as many host NUMA
nodes, and its PCI devices by them, as Nova does: one node of two NUMA nodes with a GPU
on each."""

import pytest

from pcisim import context as pcisim_context
from pcisim.objects.instance import Instance
from tests.functional import api_server

SIZES = {
    "memory_mb": 512,
    "vcpus": 2,
    "root_gb": 1,
    "ephemeral_gb": 0,
    "swap": 0,
    "is_public": True,
    "disabled": False,
    "description": None,
}


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    with api_server.sqlite_plane(tmp_path_factory, "node1=gpus=2,numa_nodes=2") as running:
        yield running


def _boot(plane, name, extra_specs):
    context = pcisim_context.get_admin_context()
    flavor = plane.api.create_flavor(
        context, flavorid=name, name=name, extra_specs=extra_specs, **SIZES
    )
    instance = plane.api.create_from_flavor(context, "vm", flavor)
    state = plane.wait_for(instance.uuid)
    devices = Instance.get_by_uuid(context, instance.uuid, ["pci_devices"]).pci_devices
    numa_nodes = sorted(device.numa_node for device in devices)
    plane.delete(instance.uuid)
    return state, numa_nodes


REQUIRED = {"hw:pci_numa_affinity_policy": "required"}


@pytest.mark.parametrize(
    ("name", "extra_specs", "outcome"),
    [
        (
            "one-cell-one-gpu",
            {"hw:numa_nodes": "1", "pci_passthrough:alias": "gpu:1"},
            ("active", [0]),
        ),
        (
            "two-cells-two-gpus",
            {"hw:numa_nodes": "2", "pci_passthrough:alias": "gpu:2", **REQUIRED},
            ("active", [0, 1]),
        ),
        (
            "one-cell-two-gpus",
            {"hw:numa_nodes": "1", "pci_passthrough:alias": "gpu:2", **REQUIRED},
            ("error", []),
        ),
        (
            "no-topology-two-gpus",
            {"pci_passthrough:alias": "gpu:2", **REQUIRED},
            ("active", [0, 1]),
        ),
    ],
)
def test_the_guest_cells_decide_which_gpus_fit(plane, name, extra_specs, outcome):
    assert _boot(plane, name, extra_specs) == outcome


def test_a_guest_of_more_cells_than_the_host_has_fits_nowhere(plane):
    sizes = {**SIZES, "vcpus": 4}
    for name, cells, state in (("two-cells", "2", "active"), ("three-cells", "3", "error")):
        flavor = plane.api.create_flavor(
            plane.context, flavorid=name, name=name, extra_specs={"hw:numa_nodes": cells}, **sizes
        )
        instance = plane.api.create_from_flavor(plane.context, "vm", flavor)
        assert plane.wait_for(instance.uuid) == state
        plane.delete(instance.uuid)
