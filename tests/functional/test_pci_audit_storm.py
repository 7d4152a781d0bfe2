"""pcisim-manage pci audit --heal beside live computes: boots and deletes that land
while it heals, forced at its named point, and a storm of them.

The heal frees what instances without a live row still hold, node by node, with the
tracker's compare-and-swap; a compute that changed those devices meanwhile wins and
the heal leaves the node for a next run. It must never free a device that a live
instance holds, and once the flows stop, a second audit finds nothing.

The control plane runs in this process; the audit is called as ``pcisim-manage`` runs
it, with the database granted to this thread.
"""

import contextlib
import io
import threading

import pytest

from pcisim import dbaccess, faults, testing
from pcisim.cmd import pci_audit
from pcisim.objects.instance import Instance
from tests.functional import cli, flows

NIC_HOST, NIC_NODE = "nic-host", "nic-node"
NIC = f"{NIC_NODE}=pfs=1,vfs_per_pf=2,gpus=1"
NO_ROW = "which has no live instance row"
NOTHING_FOUND = "0 findings on 0 nodes; 0 healed, 0 left.\n"


def _audit(heal=False):
    """(exit code, output) of one audit run, as ``pcisim-manage pci audit`` does it."""
    out = io.StringIO()
    with dbaccess.granted(), contextlib.redirect_stdout(out):
        code = pci_audit.audit(host=None, heal=heal)
    return code, out.getvalue()


def _holders():
    """{address: (status, instance_uuid)} of every live device row."""
    return {row["address"]: (row["status"], row["instance_uuid"]) for row in flows.devices()}


@contextlib.contextmanager
def _delete_paused_before_its_free(plane, instance_uuid):
    """Delete the instance through the API and hold its compute between the
    soft-delete and the free of its devices (the window of Nova bug 1899541); yield
    the function that lets the compute go on. On leaving, the delete has ended."""
    reached, resume = threading.Event(), threading.Event()

    def pause(instance, **_):
        if instance.uuid == instance_uuid:
            reached.set()
            assert resume.wait(60), "the test never let the delete go on"

    with faults.inject(faults.AFTER_SOFT_DELETE, pause):
        plane.api.delete(plane.context, Instance.get_by_uuid(plane.context, instance_uuid))
        assert reached.wait(30), f"the delete of {instance_uuid} never reached its free"
        try:
            yield resume.set
        finally:
            resume.set()
    plane.wait_for(instance_uuid, done=("deleted",))
    testing.wait_until(
        lambda: not flows.devices(instance_uuid=instance_uuid), what="its devices freed"
    )


def _booted(plane, request):
    instance_uuid, state = plane.boot("newcomer", request)
    assert state == "active"
    return instance_uuid


def _pf_and_vfs():
    (pf,) = flows.devices(dev_type="type-PF")
    return pf["address"], sorted(vf["address"] for vf in flows.devices(dev_type="type-VF"))


def test_a_delete_and_a_boot_taking_the_device_between_the_heals_read_and_save_refuse_it(db, start):
    plane = start({NIC_HOST: NIC})
    gone = _booted(plane, "gpu:1")
    (gpu,) = flows.devices(instance_uuid=gone)
    newcomers = []

    def the_compute_frees_it_and_a_boot_takes_it(**_):
        resume_delete()
        testing.wait_until(lambda: not flows.devices(instance_uuid=gone), what="the free")
        newcomers.append(_booted(plane, "gpu:1"))

    with _delete_paused_before_its_free(plane, gone) as resume_delete:
        action = faults.once(the_compute_frees_it_and_a_boot_takes_it)
        with faults.inject(faults.BEFORE_AUDIT_HEAL_SAVE, action):
            code, healed = _audit(heal=True)
    (newcomer,) = newcomers

    # The GPU holds neither the holder the heal read nor the one it writes: its
    # compare-and-swap refuses the node's save, and the heal leaves it for a next run.
    assert code == 1
    assert f"  {gpu['address']} allocated by {gone}, {NO_ROW}: left" in healed.splitlines()
    assert _holders()[gpu["address"]] == ("allocated", newcomer)
    assert _audit() == (0, NOTHING_FOUND)


def _assert_the_newcomer_keeps_its_vf_under_an_unavailable_pf(newcomer, pf):
    assert [d["status"] for d in flows.devices(instance_uuid=newcomer)] == ["allocated"]
    assert _holders()[pf] == ("unavailable", None)
    assert _audit() == (0, NOTHING_FOUND)


def test_a_boot_of_a_sibling_vf_between_the_heals_read_and_save_leaves_the_pf_unavailable(
    db, start
):
    plane = start({NIC_HOST: NIC})
    gone = _booted(plane, "vf:1")
    pf, _ = _pf_and_vfs()
    newcomers = []

    def a_boot_takes_the_other_vf(**_):
        newcomers.append(_booted(plane, "vf:1"))

    with _delete_paused_before_its_free(plane, gone):
        with faults.inject(faults.BEFORE_AUDIT_HEAL_SAVE, faults.once(a_boot_takes_the_other_vf)):
            _audit(heal=True)
    (newcomer,) = newcomers

    _assert_the_newcomer_keeps_its_vf_under_an_unavailable_pf(newcomer, pf)


def test_a_delete_then_a_boot_of_a_sibling_vf_before_the_heals_save_leave_the_pf_unavailable(
    db, start
):
    plane = start({NIC_HOST: NIC})
    gone = _booted(plane, "vf:1")
    pf, _ = _pf_and_vfs()
    newcomers = []

    def the_compute_frees_it_and_a_boot_takes_the_other_vf(**_):
        # NOTE: the pool hands out the VF free the longest: the sibling, not the one
        # just freed, whose holder the heal's compare-and-swap would have caught.
        resume_delete()
        testing.wait_until(lambda: not flows.devices(instance_uuid=gone), what="the free")
        newcomers.append(_booted(plane, "vf:1"))

    with _delete_paused_before_its_free(plane, gone) as resume_delete:
        action = faults.once(the_compute_frees_it_and_a_boot_takes_the_other_vf)
        with faults.inject(faults.BEFORE_AUDIT_HEAL_SAVE, action):
            _audit(heal=True)
    (newcomer,) = newcomers

    _assert_the_newcomer_keeps_its_vf_under_an_unavailable_pf(newcomer, pf)


# ------------------------------------------------------------------------ the storm

HOSTS = {
    "storm-a": "storm-a-node=pfs=2,vfs_per_pf=2,gpus=2",
    "storm-b": "storm-b-node=pfs=2,vfs_per_pf=2,gpus=2",
}
HEALED_HOST = "storm-a"  # the node the heal mends; storm-b serves the storm throughout
STORM_REQUESTS = ("vf:1", "gpu:1", "pf:1", "gpu:1,vf:1")
WORKERS, ROUNDS = 3, 4
DEV_TYPES = {"vf": "type-VF", "pf": "type-PF", "gpu": "type-PCI"}


class Storm:
    """Threads that boot and delete servers through the API; each keeps a server
    alive while it boots the next, and checks that the devices a server got stay its
    own until it deletes it.

    ``live`` holds the servers the storm keeps alive: a worker takes its server out of
    it, under the lock, before deleting it, so a check holding the lock sees only
    servers no flow of the storm frees."""

    def __init__(self, plane):
        self.plane = plane
        self.lock = threading.Lock()
        self.live = {}  # uuid -> {address: holder} it got
        self.active = 0  # servers that came up
        self.errors = []
        self.threads = [
            threading.Thread(target=self._work, args=(worker,), name=f"storm-{worker}")
            for worker in range(WORKERS)
        ]

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc_info):
        for thread in self.threads:
            thread.join()
        if self.errors and exc_info[0] is None:
            raise self.errors[0]

    def running(self):
        return any(thread.is_alive() for thread in self.threads)

    def _work(self, worker):
        try:
            previous = None
            for round_ in range(ROUNDS):
                current = self._boot(STORM_REQUESTS[(worker + round_) % len(STORM_REQUESTS)])
                if previous is not None:
                    self._delete(previous)
                previous = current
            self._delete(previous)
        except Exception as error:  # noqa: BLE001 (raised again in the test's thread)
            self.errors.append(error)

    def _boot(self, request):
        instance_uuid, state = self.plane.boot("storm", request)
        if state == "active":
            got = _held_by(instance_uuid)
            assert _counts(got.values()) == _requested(request), (instance_uuid, got)
            with self.lock:
                self.live[instance_uuid] = got
                self.active += 1
        return instance_uuid

    def _delete(self, instance_uuid):
        with self.lock:
            got = self.live.pop(instance_uuid, None)
            if got is not None:
                assert _held_by(instance_uuid) == got, f"{instance_uuid} lost a device"
        self.plane.delete(instance_uuid, timeout=60)

    def check(self):
        """Every server the storm keeps alive holds what it got."""
        with self.lock:
            for instance_uuid, got in self.live.items():
                assert _held_by(instance_uuid) == got, f"{instance_uuid} lost a device"


def _held_by(instance_uuid):
    return {
        row["address"]: (row["compute_node_id"], row["dev_type"], row["status"])
        for row in flows.devices(instance_uuid=instance_uuid)
    }


def _counts(holders):
    counts = {}
    for _, dev_type, status in holders:
        assert status == "allocated"
        counts[dev_type] = counts.get(dev_type, 0) + 1
    return counts


def _requested(request):
    counts = {}
    for part in request.split(","):
        alias, count = part.split(":")
        counts[DEV_TYPES[alias]] = counts.get(DEV_TYPES[alias], 0) + int(count)
    return counts


def _boot_on(plane, host, requests):
    """Boot ``requests`` on ``host`` alone: the other computes are down meanwhile."""
    others = [other for other in plane.computes if other != host]
    for other in others:
        plane.stop_compute(other, forced_down=True)
    booted = {request: _booted(plane, request) for request in requests}
    for other in others:
        plane.restart_compute(other)
    return booted


def _every_held_device_is_held_as_requested(plane, requests):
    """Each device held is held by a live instance on its node, and each of the
    ``requests`` ({uuid: request}, every live instance) holds what it asked for."""
    names = {node.id: node.hypervisor_hostname for node in flows.nodes(plane)}
    held = {}
    with dbaccess.granted():
        for instance_uuid, where in flows.holders().items():
            instance = Instance.get_by_uuid(plane.context, instance_uuid)
            assert {names[node_id] for node_id, _ in where} == {instance.node}
            held[instance_uuid] = _held_by(instance_uuid)
    assert {uuid: _counts(got.values()) for uuid, got in held.items()} == {
        uuid: _requested(request) for uuid, request in requests.items()
    }


@pytest.mark.slow
def test_heal_mends_a_node_while_boots_and_deletes_storm_and_a_second_audit_finds_nothing(
    db, start, tmp_path
):
    plane = start(HOSTS)
    booted = _boot_on(plane, HEALED_HOST, ["vf:1", "vf:1,gpu:1", "pf:1"])
    kept = booted["vf:1"]
    kept_devices = _held_by(kept)
    plane.stop_compute(HEALED_HOST, forced_down=True)
    gone = {uuid: _held_by(uuid) for uuid in (booted["vf:1,gpu:1"], booted["pf:1"])}
    for instance_uuid in gone:
        plane.api.delete(plane.context, Instance.get_by_uuid(plane.context, instance_uuid))
    plane.archive()
    assert _audit()[0] == 1

    heals = []
    with Storm(plane) as storm:
        # Its compute down, the node is mended by the heal alone; then it serves the
        # storm too, while the heal runs on until the storm ends.
        heals.append(_audit(heal=True))
        plane.restart_compute(HEALED_HOST)
        while True:
            storm.check()
            assert _held_by(kept) == kept_devices
            heals.append(_audit(heal=True))
            if not storm.running():
                break
        storm.check()

    assert storm.active > 0
    first = heals[0][1].splitlines()
    for instance_uuid, devices in gone.items():
        for address in devices:
            assert f"  {address} allocated by {instance_uuid}, {NO_ROW}: freed" in first
    assert _held_by(kept) == kept_devices
    _every_held_device_is_held_as_requested(plane, {kept: "vf:1"})
    again = cli.run(cli.write_config(tmp_path, db.url), "pci", "audit")
    assert (again.returncode, again.stdout) == (0, NOTHING_FOUND), again.stderr
