"""What the functional tests of allocate/free flows read and do through a ControlPlane.

Device rows are read straight from the database, as an operator would, so that a test
sees what was written rather than what an object believes; everything else goes through
the control plane's API and objects.
"""

import collections
import threading
import types

import sqlalchemy as sa

from pcisim import context, dbaccess, testing
from pcisim.compute.driver import SimulatedDriver
from pcisim.db import allocations as db_allocations
from pcisim.db import api as db_api
from pcisim.db import engine, models
from pcisim.objects.compute_node import ComputeNode
from pcisim.objects.instance import Instance
from pcisim.objects.instance_fault import InstanceFaultList
from pcisim.pci import capacity
from pcisim.pci.devspec import DeviceSpecList
from pcisim.pci.request import parse_aliases

DEVICES = models.PciDevice.__table__
SHADOW_DEVICES = models.shadow_of(DEVICES)
ALLOCATIONS = models.Allocation.__table__
SPECS = DeviceSpecList.from_config(['{"vendor_id": "8086"}', '{"vendor_id": "10de"}'])
ALIASES = parse_aliases(
    [
        '{"name": "vf", "vendor_id": "8086", "product_id": "1520", "device_type": "type-VF"}',
        '{"name": "pf", "vendor_id": "8086", "product_id": "1521", "device_type": "type-PF"}',
        '{"name": "gpu", "vendor_id": "10de", "product_id": "1eb8"}',
    ]
)
IDENTITY = ("compute_node_id", "address", "vendor_id", "product_id", "dev_type", "label", "status")
HELD = ("claimed", "allocated")


def _rows(query):
    with dbaccess.granted(), engine.get_engine().connect() as connection:
        return [dict(row._mapping) for row in connection.execute(query)]


def devices(table=DEVICES, live=True, **where):
    """Rows of ``pci_devices`` (live ones unless ``live=False``) matching ``where``."""
    query = sa.select(table).order_by(table.c.id)
    if live:
        query = query.where(table.c.deleted == 0)
    for column, value in where.items():
        query = query.where(table.c[column] == value)
    return _rows(query)


def allocations(**where):
    """Rows of ``allocations`` matching ``where``."""
    query = sa.select(ALLOCATIONS).order_by(ALLOCATIONS.c.id)
    for column, value in where.items():
        query = query.where(ALLOCATIONS.c[column] == value)
    return _rows(query)


def allocations_by_node():
    """{node id: {consumer: {resource: used}}} of every allocation."""
    found = collections.defaultdict(lambda: collections.defaultdict(dict))
    for row in allocations():
        found[row["compute_node_id"]][row["consumer_uuid"]][row["resource"]] = row["used"]
    return found


def resource_of(row):
    """The allocation resource a device row is counted in (no device_spec of these
    tests sets tags)."""
    return capacity.resource_name(capacity.PoolKey.of(types.SimpleNamespace(**row), {}))


def allocations_of(plane, instance_uuid):
    """{node id: {resource: used}} of the instance's allocations."""
    with dbaccess.granted():
        return db_allocations.get_by_consumer(plane.context, instance_uuid)


def nodes(plane):
    """The live compute node rows."""
    with dbaccess.granted():
        return db_api.compute_node_get_all(plane.context)


def rows_missing_identity():
    """Every row of ``pci_devices`` and ``shadow_pci_devices`` lacking an identity field."""
    return [
        row
        for table in (DEVICES, SHADOW_DEVICES)
        for row in _rows(sa.select(table).where(sa.or_(*(table.c[c].is_(None) for c in IDENTITY))))
    ]


def held_devices():
    """Live rows claimed by or allocated to an instance, or naming one."""
    return [d for d in devices() if d["status"] in HELD or d["instance_uuid"] is not None]


def holders():
    """Each instance holding devices, with the (node, address) of each."""
    held = {}
    for device in held_devices():
        where = (device["compute_node_id"], device["address"])
        held.setdefault(device["instance_uuid"], []).append(where)
    return held


def control_plane(hosts):
    """A control plane (not started) of ``{host: '[compute] inventory' value}``, with
    SPECS and ALIASES."""
    drivers = {host: SimulatedDriver.from_config([spec]) for host, spec in hosts.items()}
    return testing.ControlPlane(drivers, SPECS, ALIASES)


def pools(plane, host, node):
    """The node's published PCI pools as dicts (what the scheduler reads)."""
    compute_node = ComputeNode.get_by_host_and_nodename(plane.context, host, node)
    return [pool.to_dict() for pool in compute_node.pci_device_pools or ()]


def boot(plane, request, numa_cells=None, **flavor):
    """Create an instance and wait for its build: (uuid, vm_state)."""
    instance = plane.api.create(
        plane.context, "vm", pci_requests=request, numa_cells=numa_cells, **flavor
    )
    return instance.uuid, plane.wait_for(instance.uuid)


def delete(plane, instance_uuid):
    """Delete and wait until the instance is gone and holds no device."""
    plane.api.delete(plane.context, Instance.get_by_uuid(plane.context, instance_uuid))
    plane.wait_for(instance_uuid, done=("deleted",))
    testing.wait_until(lambda: not devices(instance_uuid=instance_uuid), what="devices freed")


def boot_at_once(plane, requests, **flavor):
    """Create one instance per request, from as many threads released together, and
    wait for every build to end. Returns each instance's (vm_state, fault message)."""
    release, uuids = threading.Barrier(len(requests)), []

    def create(request):
        release.wait()
        instance = plane.api.create(
            context.get_admin_context(), "racer", pci_requests=request, **flavor
        )
        uuids.append(instance.uuid)

    threads = [threading.Thread(target=create, args=(request,)) for request in requests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    states = {uuid: plane.wait_for(uuid, timeout=60) for uuid in uuids}
    faults = {
        fault.instance_uuid: fault.message
        for fault in InstanceFaultList.get_by_instance_uuids(plane.context, uuids)
    }
    return {uuid: (state, faults.get(uuid)) for uuid, state in states.items()}
