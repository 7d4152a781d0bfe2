"""A compute's periodic run reads its host's instances once for all its nodes; a node
whose tracker claimed or freed after that read reads its own again, so a build or a
delete landing in the run is seen as it is, never as the host's read saw it."""

import pytest

from pcisim import faults, testing, trace_report
from pcisim.compute.driver import SimulatedDriver
from tests.functional import flows

HOST = "nic-host"
NODES = ("nic-0", "nic-1", "nic-2")


@pytest.fixture
def plane(db):
    driver = SimulatedDriver.from_config([f"{node}=pfs=1,vfs_per_pf=2" for node in NODES])
    with testing.ControlPlane({HOST: driver}, flows.SPECS, flows.ALIASES) as running:
        yield running


def _instance_reads(path, sender):
    records, _ = trace_report.read(path)
    return [
        r
        for r in records
        if r["from"] == sender and r.get("object_method") == "get_by_host_and_node"
    ]


def _once_at_first_node(action):
    """An action for ``before_periodic`` that runs ``action()`` at the first node only."""
    done = []

    def run(node):
        if not done:
            done.append(node)
            action()

    return run


def _node_of(plane, instance_uuid):
    (node_id,) = flows.allocations_of(plane, instance_uuid)
    return next(node for node in flows.nodes(plane) if node.id == node_id)


def test_a_periodic_run_reads_the_hosts_instances_once_for_all_its_nodes(plane, recording):
    before = len(_instance_reads(recording, HOST))
    plane.run_periodic(HOST)
    # one for the nodes' sync, one for the builds and deletes left unfinished
    assert len(_instance_reads(recording, HOST)) - before == 2


def test_a_build_claimed_after_the_hosts_read_keeps_its_devices(plane):
    booted = []
    boot = _once_at_first_node(lambda: booted.append(flows.boot(plane, "vf:1")))
    with faults.inject(faults.BEFORE_PERIODIC, boot):
        plane.run_periodic(HOST)
    ((instance_uuid, state),) = booted
    assert state == "active"
    assert [d["status"] for d in flows.devices(instance_uuid=instance_uuid)] == ["allocated"]
    assert _node_of(plane, instance_uuid).memory_mb_used > 0


def test_a_delete_freed_after_the_hosts_read_is_not_counted_again(plane):
    instance_uuid, _ = flows.boot(plane, "vf:1")
    node_id = _node_of(plane, instance_uuid).id
    delete = _once_at_first_node(lambda: flows.delete(plane, instance_uuid))
    with faults.inject(faults.BEFORE_PERIODIC, delete):
        plane.run_periodic(HOST)
    assert flows.allocations_of(plane, instance_uuid) == {}
    (node,) = [node for node in flows.nodes(plane) if node.id == node_id]
    assert (node.vcpus_used, node.memory_mb_used) == (0, 0)
