"""PciDevTracker: hypervisor sync, claims, freeing, saving through the conductor."""

import uuid

import pytest
import sqlalchemy as sa

from pcisim import dbaccess, exception
from pcisim.db import engine, models
from pcisim.objects.fields import PciDeviceStatus as S
from pcisim.objects.instance_pci_requests import InstancePCIRequest, InstancePCIRequests
from pcisim.objects.pci_device import PciDeviceList
from pcisim.pci.devspec import DeviceSpecList
from pcisim.pci.manager import PciDevTracker
from tests import object_factories
from tests.unit.pci import inventory

SPECS = DeviceSpecList.from_config([inventory.DEVICE_SPEC])
VF_SPEC = {"vendor_id": "8086", "product_id": "1520"}
PF_SPEC = {"vendor_id": "8086", "product_id": "1521", "dev_type": "type-PF"}


@pytest.fixture
def node(conductor, ctxt):
    return object_factories.compute_node(ctxt)


@pytest.fixture
def tracker(node, ctxt):
    tracker = PciDevTracker(ctxt, node, SPECS)
    tracker.update_devices_from_hypervisor_resources(inventory.sriov_report(2, 4))
    tracker.save()
    return tracker


def _requests(spec=VF_SPEC, count=1):
    return InstancePCIRequests(
        requests=[
            InstancePCIRequest(
                count=count, spec=[spec], alias_name="a", request_id=str(uuid.uuid4())
            )
        ]
    )


def _stored(ctxt, node):
    return {d.address: d for d in PciDeviceList.get_by_compute_node(ctxt, node.id)}


def _round_trips(conductor, action):
    before = conductor.calls.total()
    action()
    return conductor.calls.total() - before


def test_first_sync_creates_every_assignable_device_in_one_round_trip(conductor, node, ctxt):
    tracker = PciDevTracker(ctxt, node, SPECS)
    tracker.update_devices_from_hypervisor_resources(inventory.sriov_report(2, 4))
    assert _round_trips(conductor, tracker.save) == 1
    stored = _stored(ctxt, node)
    assert len(stored) == 10
    assert {d.status for d in stored.values()} == {S.AVAILABLE}
    assert stored[inventory.vf_address(0, 0)].label == "label_8086_1520"


def test_devices_the_device_spec_does_not_allow_are_ignored(node, ctxt):
    tracker = PciDevTracker(ctxt, node, DeviceSpecList.from_config(['{"product_id": "1521"}']))
    tracker.update_devices_from_hypervisor_resources(inventory.sriov_report(2, 4))
    assert sorted(d.dev_type for d in tracker.devices) == ["type-PF", "type-PF"]


def test_an_empty_device_spec_makes_nothing_assignable(node, ctxt):
    tracker = PciDevTracker(ctxt, node, DeviceSpecList.from_config([]))
    tracker.update_devices_from_hypervisor_resources(inventory.sriov_report(1, 2))
    assert tracker.devices == []


def test_the_same_report_again_makes_no_round_trip(conductor, tracker):
    tracker.update_devices_from_hypervisor_resources(inventory.sriov_report(2, 4))
    assert _round_trips(conductor, tracker.save) == 0


def test_a_new_tracker_loads_the_saved_devices_and_their_holders(tracker, node, ctxt):
    tracker.claim_instance("i-1", _requests())
    tracker.save()
    reloaded = PciDevTracker(ctxt, node, SPECS)
    assert len(reloaded.devices) == 10
    assert [d.status for d in reloaded.devices_of("i-1")] == [S.CLAIMED]
    assert {d.address: d.status for d in reloaded.devices} == {
        d.address: d.status for d in tracker.devices
    }


@pytest.mark.parametrize(
    "entry",
    [
        {
            "address": "0000:99:00.9",
            "vendor_id": "8086",
            "product_id": "1520",
            "dev_type": "type-PCI",
        },
        {"address": "0000:99:00.1", "vendor_id": "8086", "dev_type": "type-PCI"},
        {"address": "0000:99:00.1", "vendor_id": "8086", "product_id": "1520", "dev_type": "gpu"},
        {
            "address": "0000:99:00.1",
            "vendor_id": "80x6",
            "product_id": "1520",
            "dev_type": "type-PCI",
        },
        {
            "address": "0000:99:00.1",
            "vendor_id": "8086",
            "product_id": "1520",
            "dev_type": "type-PCI",
            "numa_node": "zero",
        },
        "0000:99:00.1",
    ],
)
def test_a_malformed_entry_is_skipped_with_a_warning_and_the_rest_processed(
    node, ctxt, entry, caplog
):
    tracker = PciDevTracker(ctxt, node, SPECS)
    tracker.update_devices_from_hypervisor_resources([entry, *inventory.sriov_report(1, 1)])
    assert len(tracker.devices) == 2
    assert "skipping malformed PCI device report" in caplog.text


def test_a_changed_free_device_is_updated_and_moves_pool(conductor, tracker, node, ctxt):
    report = inventory.sriov_report(2, 4)
    report[1]["numa_node"] = 1
    tracker.update_devices_from_hypervisor_resources(report)
    assert _round_trips(conductor, tracker.save) == 1
    assert _stored(ctxt, node)[report[1]["address"]].numa_node == 1
    assert {(p.numa_node, p.count) for p in tracker.stats.pools() if p.parent_addr} == {
        (0, 3),
        (1, 1),
        (1, 4),
    }


def test_a_change_to_a_busy_device_waits_until_it_is_freed(tracker, node, ctxt):
    (device,) = tracker.claim_instance("i-1", _requests())
    report = [
        dict(e, label="renamed") if e["address"] == device.address else e
        for e in inventory.sriov_report(2, 4)
    ]
    tracker.update_devices_from_hypervisor_resources(report)
    assert device.label == "label_8086_1520"
    tracker.free_instance("i-1")
    tracker.save()
    assert _stored(ctxt, node)[device.address].label == "renamed"


def test_a_free_device_gone_from_the_report_is_removed(tracker, node, ctxt):
    report = inventory.sriov_report(2, 4)
    gone = report.pop(2)["address"]
    tracker.update_devices_from_hypervisor_resources(report)
    tracker.save()
    assert gone not in _stored(ctxt, node)
    assert gone not in {d.address for d in tracker.devices}
    assert len(tracker.stats) == 9  # 2 PFs and 7 VFs still free


def test_a_busy_device_gone_from_the_report_is_kept_then_removed_when_freed(
    tracker, node, ctxt, caplog
):
    (device,) = tracker.claim_instance("i-1", _requests())
    report = [e for e in inventory.sriov_report(2, 4) if e["address"] != device.address]
    tracker.update_devices_from_hypervisor_resources(report)
    tracker.save()
    assert "gone from the hypervisor while claimed" in caplog.text
    assert _stored(ctxt, node)[device.address].status == S.CLAIMED
    tracker.free_instance("i-1")
    tracker.save()
    assert device.address not in _stored(ctxt, node)
    assert device.address not in {p for pool in tracker.stats.pools() for p in pool.devices}


def test_the_idle_vfs_of_an_allocated_pf_leaving_the_report_are_removed_at_once(
    tracker, node, ctxt
):
    (pf,) = tracker.claim_instance("i-1", _requests(PF_SPEC))
    tracker.allocate_instance("i-1")
    idle_vf = pf.child_devices[0].address
    report = [e for e in inventory.sriov_report(2, 4) if e["address"] != idle_vf]
    tracker.update_devices_from_hypervisor_resources(report)
    tracker.save()
    assert idle_vf not in _stored(ctxt, node)
    tracker.free_instance("i-1")
    tracker.save()
    stored = _stored(ctxt, node)
    assert idle_vf not in stored
    assert {stored[vf.address].status for vf in pf.child_devices} == {S.AVAILABLE}


def test_the_idle_pf_of_an_allocated_vf_leaving_the_report_is_removed_at_once(tracker, node, ctxt):
    (vf,) = tracker.claim_instance("i-1", _requests())
    tracker.allocate_instance("i-1")
    report = [e for e in inventory.sriov_report(2, 4) if e["address"] != vf.parent_addr]
    tracker.update_devices_from_hypervisor_resources(report)
    tracker.save()
    assert vf.parent_addr not in _stored(ctxt, node)
    tracker.free_instance("i-1")
    tracker.save()
    assert _stored(ctxt, node)[vf.address].status == S.AVAILABLE
    assert vf.parent_addr not in {d.address for d in tracker.devices}


def test_a_device_reported_again_before_it_is_freed_is_not_removed(tracker, node, ctxt):
    (device,) = tracker.claim_instance("i-1", _requests())
    report = inventory.sriov_report(2, 4)
    tracker.update_devices_from_hypervisor_resources(
        [e for e in report if e["address"] != device.address]
    )
    tracker.update_devices_from_hypervisor_resources(report)
    tracker.free_instance("i-1")
    tracker.save()
    assert _stored(ctxt, node)[device.address].status == S.AVAILABLE


def test_claim_allocate_and_free_of_a_vf_with_its_pf(tracker, node, ctxt):
    (vf,) = tracker.claim_instance("i-1", _requests())
    tracker.allocate_instance("i-1")
    tracker.save()
    stored = _stored(ctxt, node)
    assert (stored[vf.address].status, stored[vf.parent_addr].status) == (
        S.ALLOCATED,
        S.UNAVAILABLE,
    )
    tracker.free_instance("i-1")
    tracker.save()
    stored = _stored(ctxt, node)
    assert (stored[vf.address].status, stored[vf.parent_addr].status) == (S.AVAILABLE, S.AVAILABLE)
    assert stored[vf.address].instance_uuid is None


def test_claiming_a_pf_saves_its_vfs_unclaimable(tracker, node, ctxt):
    (pf,) = tracker.claim_instance("i-1", _requests(PF_SPEC))
    tracker.save()
    stored = _stored(ctxt, node)
    vfs = [d for d in stored.values() if d.parent_addr == pf.address]
    assert len(vfs) == 4 and {d.status for d in vfs} == {S.UNCLAIMABLE}


def test_a_claim_that_does_not_fit_leaves_nothing_claimed(tracker):
    with pytest.raises(Exception, match="failed"):
        tracker.claim_instance("i-1", _requests(count=9))
    assert {d.status for d in tracker.devices} == {S.AVAILABLE}
    assert tracker.devices_of("i-1") == []


def test_clean_usage_frees_devices_of_instances_no_longer_here(tracker):
    tracker.claim_instance("i-1", _requests())
    tracker.claim_instance("i-2", _requests())
    freed = tracker.clean_usage({"i-2"})
    assert len(freed) == 1
    assert tracker.holders() == {"i-2"}


def test_five_hundred_changed_devices_are_saved_in_one_round_trip(conductor, node, ctxt):
    tracker = PciDevTracker(ctxt, node, SPECS)
    tracker.update_devices_from_hypervisor_resources(inventory.sriov_report(34, 15))
    tracker.save()
    for n in range(500):
        tracker.claim_instance(f"i-{n}", _requests())
    assert _round_trips(conductor, tracker.save) == 1
    assert sum(d.status == S.CLAIMED for d in _stored(ctxt, node).values()) == 500


def _delete_row(address):
    with dbaccess.granted(), engine.get_engine().begin() as connection:
        table = models.PciDevice.__table__
        connection.execute(sa.delete(table).where(table.c.address == address))


def test_a_device_whose_row_vanished_is_dropped_and_recreated_from_the_next_report(
    tracker, node, ctxt, caplog
):
    (device,) = tracker.claim_instance("i-1", _requests())
    tracker.save()
    _delete_row(device.address)
    tracker.free_instance("i-1")

    tracker.save()

    assert "is gone from the database" in caplog.text
    assert device.address not in {d.address for d in tracker.devices}
    tracker.update_devices_from_hypervisor_resources(inventory.sriov_report(2, 4))
    tracker.save()
    recreated = _stored(ctxt, node)[device.address]
    assert (recreated.status, recreated.instance_uuid) == (S.AVAILABLE, None)
    assert recreated.compute_node_id == node.id and recreated.vendor_id == "8086"


def test_the_other_changes_of_a_save_with_a_vanished_row_are_written(tracker, node, ctxt):
    (first,) = tracker.claim_instance("i-1", _requests())
    (second,) = tracker.claim_instance("i-2", _requests())
    tracker.save()
    _delete_row(first.address)
    tracker.free_instance("i-1")
    tracker.free_instance("i-2")
    tracker.save()
    assert _stored(ctxt, node)[second.address].status == S.AVAILABLE


def test_pools_are_published_on_the_compute_node(tracker):
    pools = tracker.stats.to_device_pools_obj()
    assert {(p.dev_type, p.numa_node, p.count) for p in pools} == {
        ("type-PF", 0, 1),
        ("type-PF", 1, 1),
        ("type-VF", 0, 4),
        ("type-VF", 1, 4),
    }
    assert all(p.tags == {"physical_network": "physnet1"} for p in pools)


def test_a_restarted_tracker_derives_each_pf_status_from_its_vfs(tracker, node, ctxt):
    (vf,) = tracker.claim_instance("i-1", _requests())
    tracker.save()
    _delete_row(vf.address)

    restarted = PciDevTracker(ctxt, node, SPECS)
    restarted.save()

    assert _stored(ctxt, node)[vf.parent_addr].status == S.AVAILABLE
    assert vf.parent_addr in {a for pool in restarted.stats.pools() for a in pool.devices}


# ------------------------------------------- two writers of one node (compare-and-swap)


@pytest.fixture
def stale(tracker, node, ctxt):
    """A second tracker of the same node, loaded now: a compute that was replaced but
    has not noticed."""
    return PciDevTracker(ctxt, node, SPECS)


def _claim_all_vfs(tracker, instance_uuid):
    return tracker.claim_instance(instance_uuid, _requests(count=8))


def test_a_device_another_writer_claimed_first_is_not_claimed_again(tracker, stale, node, ctxt):
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    _claim_all_vfs(tracker, first)
    tracker.save()

    _claim_all_vfs(stale, second)
    with pytest.raises(exception.PciDeviceConflict):
        stale.save()

    holders = {d.instance_uuid for d in _stored(ctxt, node).values() if d.dev_type == "type-VF"}
    assert holders == {first}


def test_after_a_conflict_the_tracker_holds_the_database_view(tracker, stale, node, ctxt):
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    _claim_all_vfs(tracker, first)
    tracker.save()
    _claim_all_vfs(stale, second)
    with pytest.raises(exception.PciDeviceConflict):
        stale.save()

    assert stale.holders() == {first}
    assert (
        stale.stats.to_device_pools_obj().to_json() == tracker.stats.to_device_pools_obj().to_json()
    )


def test_a_tracker_that_saved_last_keeps_saving_without_conflict(tracker, node, ctxt):
    instance_uuid = str(uuid.uuid4())
    tracker.claim_instance(instance_uuid, _requests())
    tracker.save()
    tracker.allocate_instance(instance_uuid)
    tracker.save()
    tracker.free_instance(instance_uuid)
    tracker.save()
    assert {d.status for d in _stored(ctxt, node).values() if d.dev_type == "type-VF"} == {
        S.AVAILABLE
    }


def test_an_address_reported_twice_leaves_the_tracked_device_as_it_was(tracker, node, ctxt):
    report = inventory.sriov_report(2, 4)
    vf = next(entry for entry in report if entry["address"] == inventory.vf_address(0, 0))
    report.append({**vf, "dev_type": "type-PCI", "parent_addr": None})
    before = _stored(ctxt, node)[vf["address"]]

    tracker.update_devices_from_hypervisor_resources(report)
    tracker.save()

    after = _stored(ctxt, node)[vf["address"]]
    assert (after.dev_type, after.parent_addr, after.status) == (
        before.dev_type,
        before.parent_addr,
        before.status,
    )


def test_a_new_address_reported_twice_is_not_created(node, ctxt):
    report = inventory.sriov_report(1, 2)
    tracker = PciDevTracker(ctxt, node, SPECS)
    tracker.update_devices_from_hypervisor_resources([*report, report[-1]])
    tracker.save()
    assert report[-1]["address"] not in _stored(ctxt, node)
    assert len(_stored(ctxt, node)) == len(report) - 1


def _set_status(address, status):
    with dbaccess.granted(), engine.get_engine().begin() as connection:
        table = models.PciDevice.__table__
        connection.execute(sa.update(table).where(table.c.address == address).values(status=status))


@pytest.mark.parametrize(
    "vf_statuses", [(S.UNAVAILABLE,), (S.UNAVAILABLE, S.AVAILABLE), (S.UNCLAIMABLE, S.AVAILABLE)]
)
def test_an_available_pf_with_unavailable_vfs_left_by_nova_bug_1969496_is_claimed_with_a_warning(
    conductor, node, ctxt, caplog, vf_statuses
):
    first = PciDevTracker(ctxt, node, SPECS)
    first.update_devices_from_hypervisor_resources(inventory.sriov_report(1, len(vf_statuses)))
    first.save()
    vfs = [inventory.vf_address(0, j) for j in range(len(vf_statuses))]
    for address, status in zip(vfs, vf_statuses, strict=True):
        _set_status(address, status)
    tracker = PciDevTracker(ctxt, node, SPECS)

    (pf,) = tracker.claim_instance("i-1", _requests(PF_SPEC))
    tracker.allocate_instance("i-1")
    tracker.save()
    assert "(Nova bug 1969496); claiming it anyway" in caplog.text
    stored = _stored(ctxt, node)
    assert stored[pf.address].status == S.ALLOCATED
    assert {stored[address].status for address in vfs} == {S.UNAVAILABLE}

    tracker.free_instance("i-1")
    tracker.save()
    stored = _stored(ctxt, node)
    assert {stored[address].status for address in [pf.address, *vfs]} == {S.AVAILABLE}


def _inventory_totals(tracker):
    return sorted((pool.dev_type, pool.group, pool.count) for pool in tracker.inventory())


def test_claims_and_frees_leave_the_inventory_the_same_object(tracker):
    before = tracker.inventory()

    tracker.claim_instance("i-1", _requests())
    tracker.allocate_instance("i-1")
    tracker.free_instance("i-1")
    tracker.claim_instance("i-2", _requests(PF_SPEC))

    assert tracker.inventory() is before


def test_a_device_gone_from_the_report_leaves_the_inventory(tracker):
    before = _inventory_totals(tracker)
    report = inventory.sriov_report(2, 4)
    gone = report.pop()

    tracker.update_devices_from_hypervisor_resources(report)

    after = _inventory_totals(tracker)
    assert after != before
    vfs = {group: count for kind, group, count in after if kind == "type-VF"}
    assert vfs[gone["parent_addr"]] == 3
    tracker.save()
    tracker.update_devices_from_hypervisor_resources(inventory.sriov_report(2, 4))
    assert _inventory_totals(tracker) == before


def test_the_inventory_of_a_reloaded_tracker_is_built_again(tracker, node, ctxt):
    before = _inventory_totals(tracker)

    reloaded = PciDevTracker(ctxt, node, SPECS)

    assert _inventory_totals(reloaded) == before
