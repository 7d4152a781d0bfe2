"""pcisim-manage pci audit --heal on random databases never touches what a live
instance holds, inserts nothing, and has nothing left to do when run again.

Each example writes, with SQLAlchemy Core, nodes with PF, VF and GPU rows in any
status (legal together or not), held by live, ERROR, deleted, archived or
never-existing instances, or by none, and allocations of live and gone consumers;
then heals twice. ``make test`` runs a bounded number of examples, always the same
ones (``derandomize``), on every backend; what the search found is replayed below it
as plain tests.
"""

import contextlib
import io
import uuid

import sqlalchemy as sa
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from pcisim import dbaccess
from pcisim.cmd import pci_audit
from pcisim.db import engine, models
from pcisim.objects import fields
from tests.functional import cli

NODES = models.ComputeNode.__table__
INSTANCES = models.Instance.__table__
SHADOW_INSTANCES = models.shadow_of(INSTANCES)
DEVICES = models.PciDevice.__table__
ALLOCATIONS = models.Allocation.__table__
SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
HELD = ("claimed", "allocated")
NOT_HELD = sorted(set(fields.PciDeviceStatus.ALL) - set(HELD))
# Where an instance's row is: live on a node, live in ERROR on a node, deleted,
# archived to the shadow table, or nowhere.
KINDS = ("live", "error", "deleted", "archived", "never")
GONE = ("deleted", "archived", "never")
INSTANCE_UUIDS = [str(uuid.UUID(int=n)) for n in range(1, 5)]
STRANGER = str(uuid.UUID(int=99))  # a consumer no instance row ever named


@st.composite
def _node(draw):
    """A node's device rows: (address, vendor, product, type, parent, status, holder),
    the holder an index in INSTANCE_UUIDS or None; mostly held when held, by someone."""
    instance = st.sampled_from(range(len(INSTANCE_UUIDS)))
    holding = st.one_of(
        st.tuples(st.sampled_from(HELD), instance),
        st.tuples(st.sampled_from(NOT_HELD), st.none()),
        st.tuples(st.sampled_from(HELD + tuple(NOT_HELD)), st.one_of(st.none(), instance)),
    )
    rows = []
    for pf in range(draw(st.integers(0, 2))):
        address = f"0000:1{pf}:00.0"
        rows.append((address, "8086", "1521", "type-PF", None, *draw(holding)))
        for vf in range(draw(st.integers(0, 2))):
            vf_address = f"0000:1{pf}:10.{vf}"
            rows.append((vf_address, "8086", "1520", "type-VF", address, *draw(holding)))
    for gpu in range(draw(st.integers(0, 2))):
        address = f"0000:8{gpu}:00.0"
        rows.append((address, "10de", "1eb8", "type-PCI", None, *draw(holding)))
    return rows


@st.composite
def _databases(draw):
    nodes = draw(st.lists(_node(), min_size=1, max_size=2))
    node_index = st.sampled_from(range(len(nodes)))
    instances = [(draw(st.sampled_from(KINDS)), draw(node_index)) for _ in INSTANCE_UUIDS]
    consumers = st.sampled_from([*range(len(INSTANCE_UUIDS)), None])
    allocations = draw(st.sets(st.tuples(node_index, consumers), max_size=6))
    return nodes, instances, sorted(allocations, key=str)


def _write(database):
    """Write the drawn rows; {node index: node id}."""
    nodes, instances, allocations = database
    node_ids = {}
    with dbaccess.granted(), engine.get_engine().begin() as connection:
        for index in range(len(nodes)):
            values = {"uuid": str(uuid.uuid4()), "host": f"host{index}"}
            values["hypervisor_hostname"] = f"node{index}"
            inserted = connection.execute(NODES.insert().values(values))
            node_ids[index] = inserted.inserted_primary_key[0]
        for (kind, index), instance_uuid in zip(instances, INSTANCE_UUIDS, strict=True):
            _write_instance(connection, instance_uuid, kind, index)
        for index, rows in enumerate(nodes):
            for address, vendor, product, dev_type, parent, status, holder in rows:
                device = {
                    "compute_node_id": node_ids[index],
                    "address": address,
                    "vendor_id": vendor,
                    "product_id": product,
                    "dev_type": dev_type,
                    "label": f"label_{vendor}_{product}",
                    "parent_addr": parent,
                    "status": status,
                    "instance_uuid": None if holder is None else INSTANCE_UUIDS[holder],
                    "numa_node": 0,
                }
                connection.execute(DEVICES.insert().values(device))
        for index, consumer in allocations:
            consumer_uuid = STRANGER if consumer is None else INSTANCE_UUIDS[consumer]
            connection.execute(
                ALLOCATIONS.insert().values(
                    compute_node_id=node_ids[index],
                    consumer_uuid=consumer_uuid,
                    resource="VCPU",
                    used=1,
                )
            )


def _write_instance(connection, instance_uuid, kind, index):
    if kind == "never":
        return
    values = {"uuid": instance_uuid, "host": f"host{index}", "node": f"node{index}"}
    values["vm_state"] = "error" if kind == "error" else "active"
    if kind == "archived":
        values.update(id=int(uuid.UUID(instance_uuid)), deleted=1, vm_state="deleted")
        connection.execute(SHADOW_INSTANCES.insert().values(values))
    else:
        values["deleted"] = int(kind == "deleted")
        connection.execute(INSTANCES.insert().values(values))


def _snapshot():
    """What the heal may change: device holders, allocations, node generations, and
    the ids of every row of those tables."""
    with dbaccess.granted(), engine.get_engine().connect() as connection:
        devices = {
            row.id: (row.compute_node_id, row.address, row.status, row.instance_uuid, row.deleted)
            for row in connection.execute(sa.select(DEVICES))
        }
        allocations = {
            row.id: (row.compute_node_id, row.consumer_uuid, row.resource, row.used)
            for row in connection.execute(sa.select(ALLOCATIONS))
        }
        generations = dict(connection.execute(sa.select(NODES.c.id, NODES.c.generation)).all())
        places = connection.execute(
            sa.select(
                INSTANCES.c.uuid, INSTANCES.c.host, INSTANCES.c.node, INSTANCES.c.vm_state
            ).where(INSTANCES.c.deleted == 0)
        ).all()
        names = dict(
            connection.execute(
                sa.select(NODES.c.id, NODES.c.host + "/" + NODES.c.hypervisor_hostname)
            ).all()
        )
    live = {row.uuid: (f"{row.host}/{row.node}", row.vm_state) for row in places}
    return devices, allocations, generations, live, names


def _heal():
    with dbaccess.granted(), contextlib.redirect_stdout(io.StringIO()) as out:
        pci_audit.audit(host=None, heal=True)
    return out.getvalue()


def _held_by_live_instances_on_their_node(snapshot):
    devices, _, _, live, names = snapshot
    return {
        device_id: (status, holder)
        for device_id, (node_id, _, status, holder, deleted) in devices.items()
        if not deleted and status in HELD and holder in live and live[holder][0] == names[node_id]
    }


def _allocations_of_live_instances_on_their_node(snapshot):
    _, allocations, _, live, names = snapshot
    return {
        allocation_id: row
        for allocation_id, row in allocations.items()
        if row[1] in live and live[row[1]] == (names[row[0]], "active")
    }


def test_heal_never_touches_what_a_live_instance_holds_inserts_nothing_and_is_done_at_once(db):
    @given(database=_databases())
    @SETTINGS
    def heal_keeps_the_invariants(database):
        note(f"nodes, instances, allocations: {database!r}")
        db.empty()
        _write(database)
        before = _snapshot()

        report = _heal()
        after = _snapshot()
        _heal()

        assert _held_by_live_instances_on_their_node(after) == (
            _held_by_live_instances_on_their_node(before)
        ), report
        assert _allocations_of_live_instances_on_their_node(after) == (
            _allocations_of_live_instances_on_their_node(before)
        ), report
        assert set(after[0]) == set(before[0]) and set(after[1]) <= set(before[1]), report
        assert _snapshot() == after, report

    heal_keeps_the_invariants()


# ------------------------------------------------------------ what it found

PF = ("0000:10:00.0", "8086", "1521", "type-PF", None)
VF = ("0000:10:10.0", "8086", "1520", "type-VF", "0000:10:00.0")
GONE_THEN_LIVE = [("deleted", 0), ("live", 0), ("live", 0), ("live", 0)]


def test_heal_leaves_a_gone_instances_pf_over_a_vf_a_live_instance_holds(db):
    # NOTE: a PF's free makes its VFs available; the live instance's VF among them.
    (first, second, *_) = INSTANCE_UUIDS
    _write(([[(*PF, "allocated", 0), (*VF, "allocated", 1)]], GONE_THEN_LIVE, []))

    report = _heal()

    assert f"  {PF[0]} allocated by {first}, which has no live instance row: left" in report
    assert _holders() == {PF[0]: ("allocated", first), VF[0]: ("allocated", second)}


def test_heal_frees_a_pf_and_its_vf_a_gone_instance_holds_together(db, tmp_path):
    _write(([[(*PF, "allocated", 0), (*VF, "allocated", 0)]], GONE_THEN_LIVE, []))

    result = cli.run(cli.write_config(tmp_path, db.url), "pci", "audit", "--heal")

    assert "Traceback" not in result.stderr, result.stderr
    assert result.stdout.count("which has no live instance row: freed\n") == 2
    assert set(_holders().values()) == {("available", None)}


def _holders():
    with dbaccess.granted(), engine.get_engine().connect() as connection:
        rows = connection.execute(sa.select(DEVICES).where(DEVICES.c.deleted == 0))
        return {row.address: (row.status, row.instance_uuid) for row in rows}
