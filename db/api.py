"""The database API: every read and write the conductor and admin commands make.

Functions take a request context first and run in a reader or writer transaction of
``db.engine``; a writer called inside another writer joins its transaction. Rows come
back as model instances, detached but loaded. Errors are ``pcisim.exception`` classes
naming the values that caused them.

The contract this project exists for: ``pci_device_update`` updates one existing live
row or raises ``PciDeviceNotFound``. It never inserts. Creating a device is the
separate ``pci_device_create``, which refuses a device with any identity field missing.
Every PCI device write, one device's or a batch's, runs the statements of
``db/pci_batch.py``: each existing device is written by its one conditional UPDATE.
"""

import dataclasses
import datetime
import functools
import types

import sqlalchemy as sa
from oslo_db import exception as db_exc
from oslo_utils import timeutils

from pcisim import exception
from pcisim.db import allocations, models, pci_batch, row_updates
from pcisim.db.engine import core_writer, reader, retry_on_deadlock, writer

PCI_REQUIRED_FIELDS = (
    "compute_node_id",
    "address",
    "vendor_id",
    "product_id",
    "dev_type",
    "label",
    "status",
)
_BOOKKEEPING = frozenset({"id", "created_at", "updated_at", "deleted", "deleted_at"})
# vm_states of an instance that holds nothing any more.
_ENDED = frozenset({"error", "deleted"})
_PCI_IDENTITY = frozenset({"compute_node_id", "address"})


@functools.cache
def _columns(model):
    return frozenset(model.__table__.columns.keys())


@functools.cache
def _not_nullable(model):
    return frozenset(column.name for column in model.__table__.columns if not column.nullable)


def _check_values(model, values, forbidden=_BOOKKEEPING):
    """Refuse keys that are not columns, or that callers may not set."""
    unknown = sorted(set(values) - _columns(model))
    if unknown:
        raise exception.InvalidInput(
            reason=f"{model.__tablename__} has no column(s) {', '.join(unknown)}"
        )
    refused = sorted(set(values) & forbidden)
    if refused:
        raise exception.InvalidInput(
            reason=f"{model.__tablename__} column(s) {', '.join(refused)} cannot be set"
        )
    nulled = sorted(key for key in _not_nullable(model) if key in values and values[key] is None)
    if nulled:
        raise exception.InvalidInput(
            reason=f"{model.__tablename__} column(s) {', '.join(nulled)} cannot be null"
        )


def _as_written(model, values):
    """A row of ``model`` holding ``values`` and None in every other column: what an
    insert wrote, read by attribute like a row, without the ORM object that would cost
    more than the insert's statement."""
    return types.SimpleNamespace(**{**dict.fromkeys(_columns(model)), **values})


def _apply(row, values):
    for key, value in values.items():
        setattr(row, key, value)


def _live(model):
    return sa.select(model).where(model.deleted == 0)


def _insert(context, row, exists):
    """Add ``row``; raise ``exists()`` when a unique constraint refuses it."""
    context.session.add(row)
    try:
        context.session.flush()
    except db_exc.DBDuplicateEntry:
        raise exists()
    return row


def _one(context, query, not_found):
    """The row ``query`` selects, or raise ``not_found()``."""
    row = context.session.scalar(query)
    if row is None:
        raise not_found()
    return row


def _now():
    return timeutils.utcnow()


# ---------------------------------------------------------------- compute nodes


@retry_on_deadlock
@writer
def compute_node_create(context, values):
    """Insert a compute node; ``ComputeNodeExists`` if host/node is already taken."""
    _check_values(models.ComputeNode, values)
    return _insert(
        context,
        models.ComputeNode(**values),
        lambda: exception.ComputeNodeExists(
            host=values.get("host"), hypervisor_hostname=values.get("hypervisor_hostname")
        ),
    )


@reader
def compute_node_get(context, node_id):
    return _one(
        context,
        _live(models.ComputeNode).filter_by(id=node_id),
        lambda: exception.ComputeNodeNotFound(node_id=node_id),
    )


@reader
def compute_node_get_by_host_and_nodename(context, host, nodename):
    query = _live(models.ComputeNode).filter_by(host=host, hypervisor_hostname=nodename)
    return _one(context, query, lambda: exception.ComputeHostNotFound(host=f"{host}/{nodename}"))


@reader
def compute_node_get_all_by_host(context, host):
    """All live nodes of a host; ``ComputeHostNotFound`` when it has none."""
    query = _live(models.ComputeNode).filter_by(host=host).order_by(models.ComputeNode.id)
    nodes = list(context.session.scalars(query))
    if not nodes:
        raise exception.ComputeHostNotFound(host=host)
    return nodes


@reader
def compute_node_get_all(context):
    query = _live(models.ComputeNode).order_by(models.ComputeNode.id)
    return list(context.session.scalars(query))


@retry_on_deadlock
@core_writer
def compute_node_update(context, node_id, values):
    """Update a live node's columns in one statement, reading nothing, and return
    the time written (its ``updated_at``); ``ComputeNodeNotFound`` if no live node has
    that id. A change of its inventory bumps its generation, so that an allocation
    chosen from the old inventory is refused."""
    _check_values(models.ComputeNode, values, forbidden=_BOOKKEEPING | {"generation"})
    now = _now()
    statement = row_updates.compute_node(tuple(sorted(values)))
    result = context.connection.execute(statement, row_updates.parameters(node_id, values, now))
    if result.rowcount != 1:
        raise exception.ComputeNodeNotFound(node_id=node_id)
    return now


@retry_on_deadlock
@writer
def compute_node_delete(context, node_id):
    """Soft-delete a compute node together with its live PCI devices, and remove the
    allocations on it."""
    node = compute_node_get(context, node_id)
    query = sa.select(models.PciDevice.address).where(
        models.PciDevice.compute_node_id == node_id, models.PciDevice.deleted == 0
    )
    now = _now()
    writes = [
        pci_batch.DeviceWrite(node_id, address, None, now)
        for address in context.session.scalars(query)
    ]
    pci_batch.write_devices(context.session.connection(), writes)
    allocations.remove_on_node(context.session.connection(), node_id)
    node.soft_delete()
    context.session.flush()
    return node


# -------------------------------------------------------------------- instances


@retry_on_deadlock
@core_writer
def instance_create(context, values, extra=None):
    """Insert an instance and its ``instance_extra`` row in one transaction, reading
    nothing back; return the instance as written (its id and column defaults
    included), a row of no session.

    ``extra`` holds the JSON texts ``flavor``, ``pci_requests`` and ``numa_topology``.
    Raises ``InstanceExists`` for a duplicate uuid.
    """
    _check_values(models.Instance, values)
    extra = dict(extra or {})
    _check_values(models.InstanceExtra, extra, forbidden=_BOOKKEEPING | {"instance_uuid"})
    connection = context.connection
    try:
        result = connection.execute(_INSTANCES.insert(), values)
    except db_exc.DBDuplicateEntry:
        raise exception.InstanceExists(instance_uuid=values.get("uuid"))
    connection.execute(_INSTANCE_EXTRAS.insert(), {**extra, "instance_uuid": values.get("uuid")})
    (instance_id,) = result.inserted_primary_key
    return _as_written(models.Instance, {**result.last_inserted_params(), "id": instance_id})


_INSTANCES = models.Instance.__table__
_INSTANCE_EXTRAS = models.InstanceExtra.__table__


def _instance_query(uuid, read_deleted):
    query = sa.select(models.Instance).filter_by(uuid=uuid)
    if not read_deleted:
        query = query.where(models.Instance.deleted == 0)
    return query


@reader
def instance_get_by_uuid(context, uuid, read_deleted=False):
    """An instance by uuid; with ``read_deleted`` a soft-deleted one too."""
    return _one(
        context,
        _instance_query(uuid, read_deleted),
        lambda: exception.InstanceNotFound(instance_uuid=uuid),
    )


@reader
def instance_get_all(context):
    """Every live instance, oldest first."""
    return list(context.session.scalars(_live(models.Instance).order_by(models.Instance.id)))


@reader
def instance_get_all_by_host_and_node(context, host, node=None):
    query = _live(models.Instance).filter_by(host=host)
    if node is not None:
        query = query.filter_by(node=node)
    return list(context.session.scalars(query.order_by(models.Instance.id)))


@retry_on_deadlock
@core_writer
def instance_update(context, uuid, values, release_allocations=False):
    """Update a live instance's columns in one statement, reading nothing, and return
    the time written (its ``updated_at``); ``InstanceNotFound`` if no live instance
    has that uuid. With ``release_allocations``, one that ends (ERROR, DELETED)
    releases its allocations in the same transaction."""
    _check_values(models.Instance, values, forbidden=_BOOKKEEPING | {"uuid"})
    now = _now()
    statement = row_updates.instance(tuple(sorted(values)))
    connection = context.connection
    if connection.execute(statement, row_updates.parameters(uuid, values, now)).rowcount != 1:
        raise exception.InstanceNotFound(instance_uuid=uuid)
    if release_allocations and values.get("vm_state") in _ENDED:
        allocations.release_in(connection, uuid)
    return now


@retry_on_deadlock
@writer
def instance_destroy(context, uuid, values=None, release_allocations=False):
    """Soft-delete an instance, with its last ``values`` written in the same
    transaction, and with ``release_allocations`` remove its allocations there too.
    What it owns stays until archiving moves it along; its allocations until its
    compute frees its devices (``compute_node_save_with_devices``) or heals them."""
    _check_values(models.Instance, values or {}, forbidden=_BOOKKEEPING | {"uuid"})
    instance = instance_get_by_uuid(context, uuid)
    _apply(instance, values or {})
    instance.soft_delete()
    context.session.flush()
    if release_allocations:
        allocations.release_in(context.session.connection(), uuid)
    return instance


@reader
def instance_extra_get_by_instance_uuid(context, uuid):
    return _one(
        context,
        _live(models.InstanceExtra).filter_by(instance_uuid=uuid),
        lambda: exception.InstanceNotFound(instance_uuid=uuid),
    )


@retry_on_deadlock
@writer
def instance_extra_update_by_uuid(context, uuid, values):
    _check_values(models.InstanceExtra, values, forbidden=_BOOKKEEPING | {"instance_uuid"})
    extra = instance_extra_get_by_instance_uuid(context, uuid)
    _apply(extra, values)
    context.session.flush()
    return extra


# ------------------------------------------------------------- instance faults


def _insert_owned(context, model, values):
    _check_values(model, values)
    row = model(**values)
    context.session.add(row)
    try:
        context.session.flush()
    except db_exc.DBReferenceError:
        raise exception.InstanceNotFound(instance_uuid=values.get("instance_uuid"))
    return row


@retry_on_deadlock
@writer
def instance_fault_create(context, values):
    """Record why an instance failed (code, message, details, host)."""
    instance_get_by_uuid(context, values.get("instance_uuid"), read_deleted=True)
    return _insert_owned(context, models.InstanceFault, values)


@reader
def instance_fault_get_by_instance_uuids(context, uuids):
    """Faults per instance uuid, newest first."""
    query = (
        _live(models.InstanceFault)
        .where(models.InstanceFault.instance_uuid.in_(list(uuids)))
        .order_by(models.InstanceFault.id.desc())
    )
    faults = {uuid: [] for uuid in uuids}
    for fault in context.session.scalars(query):
        faults[fault.instance_uuid].append(fault)
    return faults


# ------------------------------------------------------------------ PCI devices


def _check_new_device(values):
    missing = [field for field in PCI_REQUIRED_FIELDS if values.get(field) is None]
    if missing:
        raise exception.InvalidInput(
            reason="a PCI device needs " + ", ".join(missing) + f"; got {sorted(values)}"
        )
    _check_values(models.PciDevice, values)


def _check_device_update(values):
    _check_values(models.PciDevice, values, forbidden=_BOOKKEEPING | _PCI_IDENTITY)


@retry_on_deadlock
@writer
def pci_device_create(context, values):
    """Insert one PCI device.

    Raises ``InvalidInput`` naming every missing required field (see
    ``PCI_REQUIRED_FIELDS``) before touching the database, ``PciDeviceExists`` when the
    node already has a live device at that address, and ``ComputeNodeNotFound`` when
    the node does not exist.
    """
    _check_new_device(values)
    node_id = values["compute_node_id"]
    pci_batch.insert_devices(context.session.connection(), node_id, [values], _now())
    return _newest_device(context, node_id, values["address"])


@retry_on_deadlock
@writer
def pci_device_update(context, node_id, address, values):
    """Update the one live device at (node_id, address) and return it.

    This is the conditional UPDATE ``pci_device_batch_save`` runs for each device it
    updates (``pci_batch.device_update``), without a compare-and-swap. Raises
    ``PciDeviceNotFound`` and writes nothing when no live row matches, for instance
    because archiving moved it away. It never inserts.
    """
    _check_device_update(values)
    return _write_device(context, node_id, address, values)


@retry_on_deadlock
@writer
def pci_device_destroy(context, node_id, address):
    """Soft-delete the live device at (node_id, address) and return its row; the same
    conditional UPDATE as ``pci_device_update``. ``PciDeviceNotFound`` if none."""
    return _write_device(context, node_id, address, None)


def _write_device(context, node_id, address, values):
    """Write one device as ``pci_batch.DeviceWrite`` (``values``, or None to
    soft-delete) and return its row as written; ``PciDeviceNotFound`` if none is live."""
    write = pci_batch.DeviceWrite(node_id, address, values, _now())
    if pci_batch.write_devices(context.session.connection(), [write]):
        raise exception.PciDeviceNotFound(node_id=node_id, address=address)
    return _newest_device(context, node_id, address)


def _newest_device(context, node_id, address):
    """The newest row at (node_id, address), live or just soft-deleted: a node has at
    most one live device at an address, created after every deleted one there."""
    query = (
        sa.select(models.PciDevice)
        .filter_by(compute_node_id=node_id, address=address)
        .order_by(models.PciDevice.id.desc())
        .limit(1)
        .execution_options(populate_existing=True)
    )
    return context.session.scalar(query)


@reader
def pci_device_get_by_addr(context, node_id, address):
    query = _live(models.PciDevice).filter_by(compute_node_id=node_id, address=address)
    return _one(
        context, query, lambda: exception.PciDeviceNotFound(node_id=node_id, address=address)
    )


@reader
def pci_device_get_by_id(context, device_id):
    return _one(
        context,
        _live(models.PciDevice).filter_by(id=device_id),
        lambda: exception.PciDeviceNotFoundById(id=device_id),
    )


@reader
def pci_device_get_all_by_node(context, node_id):
    query = _live(models.PciDevice).filter_by(compute_node_id=node_id)
    return list(context.session.scalars(query.order_by(models.PciDevice.address)))


PCI_DEVICE_FILTERS = ("host", "status", "dev_type", "instance_uuid", "compute_node_id")


@reader
def pci_device_get_all(context, **filters):
    """Live devices of every node, by node and address; filters from PCI_DEVICE_FILTERS."""
    unknown = sorted(set(filters) - set(PCI_DEVICE_FILTERS))
    if unknown:
        raise exception.InvalidInput(reason=f"unknown PCI device filter(s) {', '.join(unknown)}")
    query = _live(models.PciDevice)
    host = filters.pop("host", None)
    if host is not None:
        query = query.join(
            models.ComputeNode, models.ComputeNode.id == models.PciDevice.compute_node_id
        ).where(models.ComputeNode.host == host)
    for name, value in filters.items():
        if value is not None:
            query = query.where(getattr(models.PciDevice, name) == value)
    order = (models.PciDevice.compute_node_id, models.PciDevice.address)
    return list(context.session.scalars(query.order_by(*order)))


@reader
def pci_device_get_all_by_instance_uuid(context, instance_uuid):
    """Live devices held (claimed or allocated) by an instance."""
    query = _live(models.PciDevice).filter_by(instance_uuid=instance_uuid)
    return list(context.session.scalars(query.order_by(models.PciDevice.address)))


@dataclasses.dataclass
class PciDeviceBatchResult:
    """What ``pci_device_batch_save`` wrote, by address.

    ``created`` holds the column values written in each new row (a column not given
    is NULL), its id included; ``updated``
    and ``destroyed`` the values each update or soft delete set, ``updated_at``
    included (the caller knows the rest of the row). A soft-deleted row's ``deleted``
    takes the row's id, given here as True. ``missing`` lists, sorted, the addresses
    to update or destroy that have no live row. ``at`` is the time of every write
    (each row's ``created_at``, ``updated_at`` or ``deleted_at``).
    """

    at: datetime.datetime
    created: dict = dataclasses.field(default_factory=dict)
    updated: dict = dataclasses.field(default_factory=dict)
    destroyed: dict = dataclasses.field(default_factory=dict)
    missing: list = dataclasses.field(default_factory=list)


@retry_on_deadlock
@core_writer
def pci_device_batch_save(context, node_id, create=(), update=None, destroy=(), expected=None):
    """Write a node's changed devices in one transaction; a ``PciDeviceBatchResult``.

    ``create`` is a list of new devices' values, ``update`` maps an address to the
    changed values, ``destroy`` lists addresses to soft-delete. Every new device is
    validated before anything is written (``InvalidInput``). An address to update or
    destroy that has no live row does not stop the others: it is reported in
    ``missing`` and nothing is inserted for it.

    ``expected`` maps addresses to the ``status`` and ``instance_uuid`` the writer
    believes their rows hold: a compare-and-swap. If a row holds neither those nor
    the values being written (a retry of a write that did land is not a conflict),
    another writer changed it first, and ``PciDeviceConflict`` is raised with nothing
    written.
    """
    update, destroy, expected = dict(update or {}), list(dict.fromkeys(destroy)), expected or {}
    _check_batch(node_id, create, update, expected)
    now = _now()
    writes = [
        pci_batch.DeviceWrite(node_id, address, values, now, expected.get(address))
        for address, values in update.items()
    ]
    writes += [
        pci_batch.DeviceWrite(node_id, address, None, now, expected.get(address))
        for address in destroy
    ]
    connection = context.connection
    missing = pci_batch.write_devices(connection, writes)
    result, gone = PciDeviceBatchResult(at=now, missing=missing), set(missing)
    for write in writes:
        if write.address not in gone:
            getattr(result, write.kind)[write.address] = write.stored
    result.created = pci_batch.insert_devices(connection, node_id, create, now)
    return result


def _check_batch(node_id, create, update, expected):
    for values in create:
        _check_new_device({**values, "compute_node_id": node_id})
    for values in update.values():
        _check_device_update(values)
    for address, holder in expected.items():
        if set(holder) != set(pci_batch.HOLDER_FIELDS):
            raise exception.InvalidInput(
                reason=f"expected holder of {address} must be status and instance_uuid, "
                f"got {sorted(holder)}"
            )


# --------------------------------------------------------------------- services


@retry_on_deadlock
@writer
def service_create(context, values):
    """Insert a service record; ``ServiceExists`` when host and binary are taken."""
    _check_values(models.Service, values)
    return _insert(
        context,
        models.Service(**values),
        lambda: exception.ServiceExists(host=values.get("host"), binary=values.get("binary")),
    )


@reader
def service_get_by_host_and_binary(context, host, binary):
    query = _live(models.Service).filter_by(host=host, binary=binary)
    return _one(context, query, lambda: exception.ServiceNotFound(host=host, binary=binary))


@reader
def service_get_all_by_binary(context, binary):
    query = _live(models.Service).filter_by(binary=binary).order_by(models.Service.host)
    return list(context.session.scalars(query))


@reader
def service_versions(context):
    """(host, binary, version) of every live service, by binary and host; ``version``
    is None for a service that has not said (it started before revision 0004)."""
    services = models.Service.__table__
    query = (
        sa.select(services.c.host, services.c.binary, services.c.version)
        .where(services.c.deleted == 0)
        .order_by(services.c.binary, services.c.host)
    )
    return list(context.session.connection().execute(query))


@reader
def stored_flavor_copies(context):
    """(instance uuid, JSON) of the flavor copies live instances keep: the versioned
    objects the database stores, as ``Flavor.to_json`` wrote them."""
    extras = models.InstanceExtra.__table__
    query = (
        sa.select(extras.c.instance_uuid, extras.c.flavor)
        .where(extras.c.deleted == 0, extras.c.flavor.is_not(None))
        .order_by(extras.c.instance_uuid)
    )
    return list(context.session.connection().execute(query))


@reader
def service_hosts_up(context, binary, seen_since):
    """The hosts whose ``binary`` service is live, not forced down and was seen at or
    after ``seen_since`` (naive UTC): the scheduler's question, answered without
    building a Service object per host."""
    parameters = {"binary": binary, "seen_since": seen_since}
    return set(context.session.connection().execute(_HOSTS_UP, parameters).scalars())


_SERVICES = models.Service.__table__
# NOTE: built once: the scheduler asks for every boot.
_HOSTS_UP = sa.select(_SERVICES.c.host).where(
    _SERVICES.c.binary == sa.bindparam("binary"),
    _SERVICES.c.deleted == 0,
    _SERVICES.c.forced_down == sa.false(),
    _SERVICES.c.last_seen_up >= sa.bindparam("seen_since"),
)


@retry_on_deadlock
@writer
def service_update(context, service_id, values):
    _check_values(models.Service, values)
    service = context.session.scalar(_live(models.Service).filter_by(id=service_id))
    if service is None:
        raise exception.ServiceNotFound(host=f"id {service_id}", binary="?")
    _apply(service, values)
    context.session.flush()
    return service
