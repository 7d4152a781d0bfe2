"""pcisim-manage pci audit as an operator runs it, on records real flows left behind.

The control plane runs in this process on the ``db`` fixture's database; the command
runs in a subprocess against the same database.
"""

import json
import uuid

import sqlalchemy as sa

from pcisim import dbaccess, faults, polling
from pcisim.cmd import pci_audit
from pcisim.db import allocations, engine, models, pci_batch
from pcisim.objects.instance import Instance
from tests.functional import cli, flows

HOST, NODE = "audit-host", "audit-node"
INVENTORY = f"{NODE}=pfs=1,vfs_per_pf=2,gpus=1"
UNREACHABLE_URL = "mysql+pymysql://root@127.0.0.1:1/nothing"


def _audit(config, *args):
    return cli.run(config, "pci", "audit", *args)


def _config(db, tmp_path):
    return cli.write_config(tmp_path, db.url)


def _deleted_while_its_compute_was_down_then_archived(plane):
    """An instance holding a VF and the GPU, deleted by the API while its compute was
    down (its devices stay allocated until the compute returns) and archived meanwhile:
    the local-delete path of Nova bug 1899541."""
    instance_uuid, state = flows.boot(plane, "vf:1,gpu:1")
    assert state == "active"
    plane.stop_compute(HOST, forced_down=True)
    plane.api.delete(plane.context, Instance.get_by_uuid(plane.context, instance_uuid))
    plane.archive()
    return instance_uuid


def _statuses(**where):
    return {row["address"]: row["status"] for row in flows.devices(**where)}


def test_devices_of_an_instance_archived_while_its_compute_was_down_are_found(db, start, tmp_path):
    plane = start({HOST: INVENTORY})
    kept, _ = flows.boot(plane, "vf:1")
    gone = _deleted_while_its_compute_was_down_then_archived(plane)
    held = _statuses(instance_uuid=gone)

    result = _audit(_config(db, tmp_path))

    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    # NOTE: its allocation stays with its devices, until they are freed.
    assert lines[0].endswith(f"({HOST}/{NODE}): 3 findings")
    assert sorted(lines[1:3]) == [
        f"  {address} allocated by {gone}, which has no live instance row: left"
        for address in sorted(held)
    ]
    assert lines[3].startswith(f"  allocation of {gone}, which no live instance")
    assert kept not in result.stdout
    assert _statuses(instance_uuid=gone) == held  # reported, not changed


def test_heal_frees_them_as_the_tracker_does_and_a_second_audit_finds_nothing(db, start, tmp_path):
    plane = start({HOST: INVENTORY})
    kept, _ = flows.boot(plane, "vf:1")
    kept_devices = _statuses(instance_uuid=kept)
    gone = _deleted_while_its_compute_was_down_then_archived(plane)
    held = _statuses(instance_uuid=gone)
    config = _config(db, tmp_path)

    healed = _audit(config, "--heal")

    assert healed.returncode == 1, healed.stderr
    assert healed.stdout.count(": freed") == 2
    assert f"  allocation of {gone}, which no live instance on this node holds: released\n" in (
        healed.stdout
    )
    assert healed.stdout.splitlines()[-1] == "3 findings on 1 node; 3 healed, 0 left."
    assert _statuses(instance_uuid=gone) == {}
    assert {_statuses()[address] for address in held} == {"available"}
    # The live instance keeps its VF, so the PF stays unavailable, as the tracker has it.
    assert _statuses(instance_uuid=kept) == kept_devices
    assert set(_statuses(dev_type="type-PF").values()) == {"unavailable"}
    again = _audit(config)
    assert (again.returncode, again.stdout) == (0, "0 findings on 0 nodes; 0 healed, 0 left.\n")


def test_heal_never_frees_a_device_a_new_instance_took_meanwhile(db, start, capsys):
    plane = start({HOST: INVENTORY})
    gone = _deleted_while_its_compute_was_down_then_archived(plane)
    held = _statuses(instance_uuid=gone)
    vf = next(address for address in held if address != _gpu_address())
    newcomer = str(uuid.uuid4())
    devices = models.PciDevice.__table__

    def the_compute_frees_the_vf_and_claims_it_for_a_new_instance(**details):
        taken = {"status": "claimed", "instance_uuid": newcomer}
        with engine.get_engine().begin() as connection:
            connection.execute(sa.update(devices).where(devices.c.address == vf).values(taken))

    action = the_compute_frees_the_vf_and_claims_it_for_a_new_instance
    with dbaccess.granted(), faults.inject(faults.BEFORE_AUDIT_HEAL_SAVE, action):
        assert pci_audit.audit(heal=True) == 1

    assert capsys.readouterr().out.count("which has no live instance row: left") == 2
    # The heal's compare-and-swap saved nothing: the GPU is still held, the VF is the
    # newcomer's; a next run frees the GPU.
    assert _statuses(instance_uuid=gone) == {_gpu_address(): "allocated"}
    assert _statuses(instance_uuid=newcomer) == {vf: "claimed"}


def _gpu_address():
    (gpu,) = flows.devices(dev_type="type-PCI")
    return gpu["address"]


def test_a_row_blanked_by_sql_is_found_and_left_by_heal(db, start, tmp_path):
    plane = start({HOST: INVENTORY})
    (gpu,) = flows.devices(dev_type="type-PCI")
    devices = models.PciDevice.__table__
    with dbaccess.granted(), engine.get_engine().begin() as connection:
        connection.execute(
            sa.update(devices).where(devices.c.id == gpu["id"]).values(vendor_id="", product_id="")
        )
    plane.stop_compute(HOST)  # NOTE: its periodic run would not mend it, but keep it still

    result = _audit(_config(db, tmp_path), "--heal")

    assert result.returncode == 1, result.stderr
    assert f"  {gpu['address']} missing vendor_id, product_id: left" in result.stdout
    assert flows.devices(id=gpu["id"])[0]["vendor_id"] == ""


def _set_status(address, status):
    devices = models.PciDevice.__table__
    with dbaccess.granted(), engine.get_engine().begin() as connection:
        connection.execute(
            sa.update(devices).where(devices.c.address == address).values(status=status)
        )


def _pf_and_vfs():
    (pf,) = flows.devices(dev_type="type-PF")
    return pf["address"], sorted(vf["address"] for vf in flows.devices(dev_type="type-VF"))


def test_a_vf_unavailable_under_an_available_pf_is_found_as_nova_bug_1969496(db, start, tmp_path):
    plane = start({HOST: INVENTORY})
    plane.stop_compute(HOST)
    pf, (vf, _) = _pf_and_vfs()
    _set_status(vf, "unavailable")

    result = _audit(_config(db, tmp_path), "--heal")

    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[1:] == [
        f"  {vf} unavailable under the available PF {pf} (Nova bug 1969496): left",
        # NOTE: the pools its compute published still count the VF free.
        "  free pool 8086:1520 type-VF on NUMA node 0 published with 2, its device rows say 1: "
        "recomputed",
        "2 findings on 1 node; 1 healed, 1 left.",
    ]


def test_a_pf_whose_status_its_vfs_contradict_is_found(db, start, tmp_path):
    plane = start({HOST: INVENTORY})
    plane.stop_compute(HOST)
    pf, vfs = _pf_and_vfs()
    _set_status(pf, "unavailable")

    result = _audit(_config(db, tmp_path))

    assert result.returncode == 1, result.stderr
    assert f"  {pf} PF unavailable, which its VFs make available: left" in result.stdout


def test_a_vf_left_available_under_an_allocated_pf_is_found(db, start, tmp_path):
    plane = start({HOST: INVENTORY})
    pf_holder, state = flows.boot(plane, "pf:1")
    assert state == "active"
    pf, (vf, _) = _pf_and_vfs()
    plane.stop_compute(HOST)
    _set_status(vf, "available")

    result = _audit(_config(db, tmp_path))

    assert result.returncode == 1, result.stderr
    expected = f"  {vf} available under the allocated PF {pf}, which makes its VFs unavailable"
    assert expected + ": left" in result.stdout


def test_an_allocation_no_instance_holds_is_found_and_released_by_heal(db, start, tmp_path):
    plane = start({HOST: INVENTORY})
    kept, _ = flows.boot(plane, "gpu:1")
    plane.stop_compute(HOST)
    # NOTE: the scheduler's own claim, for a build whose instance was never stored.
    never_stored = str(uuid.uuid4())
    with dbaccess.granted():
        (node,), _ = allocations.host_states(plane.context)
        allocations.claim(plane.context, node.id, node.generation, never_stored, {"VCPU": 1})

    config = _config(db, tmp_path)

    result = _audit(config, "--heal")

    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[1:] == [
        f"  allocation of {never_stored}, which no live instance on this node holds: released",
        "1 finding on 1 node; 1 healed, 0 left.",
    ]
    assert kept not in result.stdout
    with dbaccess.granted():
        assert allocations.get_by_consumer(plane.context, never_stored) == {}
        assert allocations.get_by_consumer(plane.context, kept) != {}
    assert _audit(config).returncode == 0


def test_another_hosts_audit_finds_nothing(db, start, tmp_path):
    plane = start({HOST: INVENTORY})
    _deleted_while_its_compute_was_down_then_archived(plane)

    result = _audit(_config(db, tmp_path), "--host", "elsewhere")

    assert (result.returncode, result.stdout) == (0, "0 findings on 0 nodes; 0 healed, 0 left.\n")


def test_an_unreachable_database_exits_3(tmp_path):
    result = _audit(cli.write_config(tmp_path, UNREACHABLE_URL, max_retries=0))

    assert result.returncode == 3
    assert "Cannot reach the database" in result.stderr


def test_dry_run_says_what_heal_would_do_and_changes_nothing(db, start, tmp_path):
    plane = start({HOST: INVENTORY})
    gone = _deleted_while_its_compute_was_down_then_archived(plane)
    held = _statuses(instance_uuid=gone)
    config = _config(db, tmp_path)

    planned = _audit(config, "--heal", "--dry-run")

    assert planned.returncode == 1, planned.stderr
    assert planned.stdout.count(": would be freed\n") == 2
    assert ": would be released\n" in planned.stdout
    assert planned.stdout.splitlines()[-1] == "3 findings on 1 node; 3 would be healed, 0 left."
    assert _statuses(instance_uuid=gone) == held
    with dbaccess.granted():
        assert allocations.get_by_consumer(plane.context, gone) != {}
    healed = _audit(config, "--heal")
    assert healed.stdout.splitlines()[-1] == "3 findings on 1 node; 3 healed, 0 left."


def test_json_output_lists_each_nodes_findings_with_their_rows(db, start, tmp_path):
    plane = start({HOST: INVENTORY})
    gone = _deleted_while_its_compute_was_down_then_archived(plane)
    held = _statuses(instance_uuid=gone)

    result = _audit(_config(db, tmp_path), "-f", "json")

    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert (report["findings"], report["healed"], report["left"]) == (3, 0, 3)
    (node,) = report["nodes"]
    assert (node["host"], node["hypervisor_hostname"]) == (HOST, NODE)
    devices = [f for f in node["findings"] if f["kind"] == "held"]
    assert {f["address"]: f["instance_uuid"] for f in devices} == dict.fromkeys(held, gone)
    assert all(f["outcome"] == "left" and f["device_id"] for f in devices)
    (allocation,) = [f for f in node["findings"] if f["kind"] == "allocation"]
    assert allocation["instance_uuid"] == gone


def test_verbose_shows_each_devices_row_and_the_nodes_without_findings(db, start, tmp_path):
    plane = start({HOST: INVENTORY, "clean-host": "clean-node=gpus=1"})
    gone = _deleted_while_its_compute_was_down_then_archived(plane)
    (gpu,) = flows.devices(instance_uuid=gone, dev_type="type-PCI")

    result = _audit(_config(db, tmp_path), "--verbose")

    assert result.returncode == 1, result.stderr
    row = f"    row {gpu['id']}: 10de:1eb8 type-PCI, status allocated, instance {gone}"
    assert row in result.stdout.splitlines()
    assert "(clean-host/clean-node): no findings" in result.stdout


def test_an_unknown_output_format_is_refused_by_name(tmp_path):
    result = _audit(cli.write_config(tmp_path, UNREACHABLE_URL), "-f", "yaml")

    assert result.returncode == 2
    assert "'yaml'" in result.stderr


def _take_for(instance_uuid, address, request_id=None):
    devices = models.PciDevice.__table__
    taken = {"status": "allocated", "instance_uuid": instance_uuid, "request_id": request_id}
    with dbaccess.granted(), engine.get_engine().begin() as connection:
        connection.execute(sa.update(devices).where(devices.c.address == address).values(taken))


def test_a_device_no_request_asked_for_is_unexplained_and_uncovered(db, start, tmp_path):
    plane = start({HOST: INVENTORY})
    kept, _ = flows.boot(plane, "vf:1")
    plane.stop_compute(HOST)
    _take_for(kept, _gpu_address())

    result = _audit(_config(db, tmp_path), "--heal")

    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    unexplained = (
        f"  {_gpu_address()} allocated by {kept}, which none of its PCI requests asked for"
    )
    assert unexplained + ": left" in lines
    uncovered = f"  allocation of {kept} covers 0 of the 1 PCI:type-PCI:10de:1eb8:0:- devices"
    assert uncovered + " it holds: left" in lines
    assert _statuses(instance_uuid=kept)[_gpu_address()] == "allocated"  # left as found


def test_a_device_beyond_its_requests_count_is_unexplained(db, start, tmp_path):
    plane = start({HOST: INVENTORY})
    kept, _ = flows.boot(plane, "vf:1")
    plane.stop_compute(HOST)
    (vf,) = flows.devices(instance_uuid=kept)
    other = next(row for row in flows.devices(dev_type="type-VF") if row["instance_uuid"] is None)
    _take_for(kept, other["address"], vf["request_id"])

    result = _audit(_config(db, tmp_path))

    expected = f"  {max(vf['address'], other['address'])} allocated by {kept}, beyond the 1 device"
    assert any(line.startswith(expected) for line in result.stdout.splitlines()), result.stdout


def test_a_device_held_by_a_live_instance_of_another_node_is_found_and_left(db, start, tmp_path):
    plane = start({HOST: INVENTORY, "other-host": "other-node=gpus=1"})
    plane.stop_compute(HOST, forced_down=True)
    elsewhere, state = flows.boot(plane, "gpu:1")
    assert state == "active"
    (free_gpu,) = flows.devices(dev_type="type-PCI", status="available")
    _take_for(elsewhere, free_gpu["address"])

    result = _audit(_config(db, tmp_path), "--heal")

    expected = f"allocated by {elsewhere}, which is on other-host/other-node: left"
    assert f"  {free_gpu['address']} {expected}" in result.stdout.splitlines()
    assert flows.devices(id=free_gpu["id"])[0]["instance_uuid"] == elsewhere


def _set_node(**values):
    nodes = models.ComputeNode.__table__
    with dbaccess.granted(), engine.get_engine().begin() as connection:
        connection.execute(sa.update(nodes).values(values))


def _node():
    nodes = models.ComputeNode.__table__
    with dbaccess.granted(), engine.get_engine().connect() as connection:
        return connection.execute(sa.select(nodes)).one()


def test_pools_disagreeing_with_the_rows_are_recomputed_as_its_compute_would(db, start, tmp_path):
    plane = start({HOST: INVENTORY})
    flows.boot(plane, "vf:1")
    plane.stop_compute(HOST)
    published = _node()
    free = json.loads(published.pci_stats)
    for pool in free["pools"]:
        pool["count"] += 5
    _set_node(pci_stats=json.dumps(free))
    config = _config(db, tmp_path)

    result = _audit(config, "--heal")

    assert result.returncode == 1, result.stderr
    assert (
        "  free pool 8086:1520 type-VF on NUMA node 0 published with 6, its device rows say 1"
        in (result.stdout)
    )
    healed = _node()
    assert json.loads(healed.pci_stats) == json.loads(published.pci_stats)
    assert healed.generation == published.generation + 1  # the scheduler reads it again
    assert _audit(config).returncode == 0


def test_pools_whose_tags_no_published_pool_says_are_left(db, start, tmp_path):
    plane = start({HOST: INVENTORY})
    plane.stop_compute(HOST)
    _set_node(pci_inventory=None)

    result = _audit(_config(db, tmp_path), "--heal")

    assert result.returncode == 1, result.stderr
    inventory = [line for line in result.stdout.splitlines() if "inventory pool" in line]
    # NOTE: the PF's VFs, the PF, the GPU; nothing says which device_spec tags they have.
    assert len(inventory) == 3
    assert all("published with 0" in line and line.endswith(": left") for line in inventory)
    assert _node().pci_inventory is None


def test_a_blank_row_without_an_address_is_deleted_with_its_place_in_the_pools(db, start, tmp_path):
    plane = start({HOST: INVENTORY})
    plane.stop_compute(HOST)
    address = _gpu_address()
    devices = models.PciDevice.__table__
    with dbaccess.granted(), engine.get_engine().begin() as connection:
        connection.execute(
            sa.update(devices).where(devices.c.address == address).values(address="")
        )
    config = _config(db, tmp_path)

    result = _audit(config, "--heal")

    assert result.returncode == 1, result.stderr
    assert "  (no address) missing address: deleted" in result.stdout.splitlines()
    assert result.stdout.splitlines()[1:] == [
        "  (no address) missing address: deleted",
        "1 finding on 1 node; 1 healed, 0 left.",
    ]
    # NOTE: the node's pools follow the rows the heal deleted, as a compute's would.
    assert "10de" not in _node().pci_inventory
    assert flows.devices(dev_type="type-PCI") == []
    assert _audit(config).returncode == 0


def test_pools_a_compute_publishes_while_healing_are_not_overwritten(db, start, capsys):
    plane = start({HOST: INVENTORY})
    plane.stop_compute(HOST)
    published = _node().pci_stats
    _set_node(pci_stats="[]")

    def the_compute_publishes_its_pools(heal, **details):
        if heal == "pools":
            _set_node(pci_stats=published)

    action = the_compute_publishes_its_pools
    with dbaccess.granted(), faults.inject(faults.BEFORE_AUDIT_HEAL_SAVE, action):
        assert pci_audit.audit(heal=True) == 1

    assert capsys.readouterr().out.endswith("; 0 healed, 3 left.\n")
    assert _node().pci_stats == published


def test_an_allocation_whose_instance_lands_while_healing_is_kept(db, start, capsys):
    plane = start({HOST: INVENTORY})
    plane.stop_compute(HOST)
    arriving = str(uuid.uuid4())
    with dbaccess.granted():
        (node,), _ = allocations.host_states(plane.context)
        allocations.claim(plane.context, node.id, node.generation, arriving, {"VCPU": 1})

    def its_instance_row_lands_on_the_node(heal, **details):
        instances = models.Instance.__table__
        row = {"uuid": arriving, "host": HOST, "node": NODE, "vm_state": "building", "deleted": 0}
        with engine.get_engine().begin() as connection:
            connection.execute(instances.insert().values(row))

    action = its_instance_row_lands_on_the_node
    with dbaccess.granted(), faults.inject(faults.BEFORE_AUDIT_HEAL_SAVE, action):
        assert pci_audit.audit(heal=True) == 1

    assert capsys.readouterr().out.endswith("1 finding on 1 node; 0 healed, 1 left.\n")
    with dbaccess.granted():
        assert allocations.get_by_consumer(plane.context, arriving) == {node.id: {"VCPU": 1}}


class ComputeDied(Exception):
    """The compute dying in its delete handler, after the soft delete."""


def test_devices_of_an_instance_whose_compute_died_deleting_it_are_healed_before_it_returns(
    db, start, tmp_path
):
    plane = start({HOST: INVENTORY})
    doomed, _ = flows.boot(plane, "vf:1,gpu:1")
    held = _statuses(instance_uuid=doomed)
    died = []

    def the_compute_dies(**details):
        died.append(details["instance"].uuid)
        raise ComputeDied(doomed)

    with faults.inject(faults.AFTER_SOFT_DELETE, the_compute_dies):
        plane.api.delete(plane.context, Instance.get_by_uuid(plane.context, doomed))
        polling.wait_until(lambda: died, what="the compute to die in its delete")
    plane.stop_compute(HOST, forced_down=True)
    config = _config(db, tmp_path)

    healed = _audit(config, "--heal")

    assert healed.returncode == 1, healed.stderr
    assert healed.stdout.count(f"allocated by {doomed}, which has no live instance row: freed") == 2
    assert {_statuses()[address] for address in held} == {"available"}
    plane.restart_compute(HOST)
    again, state = flows.boot(plane, "vf:1,gpu:1")
    assert state == "active"
    assert _gpu_address() in _statuses(instance_uuid=again)  # the node's one GPU, freed
    assert _audit(config).returncode == 0


def _take_device_rows_as_novas_archive_did(instance, **details):
    """Defence off: move the instance's live device rows to the shadow table."""
    live, shadow = flows.DEVICES, flows.SHADOW_DEVICES
    naming = (live.c.instance_uuid == instance.uuid) & (live.c.deleted == 0)
    with dbaccess.granted(), engine.get_engine().begin() as connection:
        connection.execute(
            sa.insert(shadow).from_select(live.c.keys(), sa.select(live).where(naming))
        )
        connection.execute(sa.delete(live).where(naming))


def _insert_what_is_missing_as_novas_update_did(monkeypatch):
    """Defence off: a write of a device without a live row inserts one, with only the
    values written (Nova's pci_device_update before the fix of bug 1899541)."""
    write_devices = pci_batch.write_devices

    def upserting(connection, writes):
        missing = set(write_devices(connection, writes))
        for write in writes:
            if write.address in missing:
                blank = dict.fromkeys(("vendor_id", "product_id", "dev_type", "label"), "")
                values = {**blank, **write.stored, "deleted": 0}
                values.update(compute_node_id=write.node_id, address=write.address)
                connection.execute(models.PciDevice.__table__.insert().values(values))
        return []

    monkeypatch.setattr(pci_batch, "write_devices", upserting)


def test_the_residue_of_nova_bug_1899541_made_with_the_defences_off_is_found(
    db, start, tmp_path, monkeypatch
):
    plane = start({HOST: INVENTORY})
    doomed, _ = flows.boot(plane, "vf:1,gpu:1")
    held = sorted(_statuses(instance_uuid=doomed))
    _insert_what_is_missing_as_novas_update_did(monkeypatch)

    with faults.inject(faults.AFTER_SOFT_DELETE, _take_device_rows_as_novas_archive_did):
        flows.delete(plane, doomed)
    plane.stop_compute(HOST)
    result = _audit(_config(db, tmp_path), "--heal")

    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[1:] == [
        *(f"  {address} missing vendor_id, product_id, dev_type: left" for address in held),
        "2 findings on 1 node; 0 healed, 2 left.",
    ]
