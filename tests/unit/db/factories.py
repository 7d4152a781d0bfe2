"""Rows for DB tests, with every required field set unless a test says otherwise."""

import uuid

import sqlalchemy as sa
from oslo_utils import timeutils

from pcisim.compute import BINARY
from pcisim.db import api, engine, models


def compute_node(ctxt, host="host1", node="node1", **values):
    return api.compute_node_create(
        ctxt,
        {
            "uuid": str(uuid.uuid4()),
            "host": host,
            "hypervisor_hostname": node,
            "vcpus": 16,
            "memory_mb": 65536,
            "local_gb": 1000,
            **values,
        },
    )


def compute_service_up(ctxt, host):
    """The live, just-seen compute service record of ``host``: a host the scheduler
    may choose."""
    return api.service_create(
        ctxt,
        {"host": host, "binary": BINARY, "topic": "compute", "last_seen_up": timeutils.utcnow()},
    )


def pci_values(node_id, address="0000:81:00.0", **values):
    return {
        "compute_node_id": node_id,
        "address": address,
        "vendor_id": "8086",
        "product_id": "1520",
        "dev_type": "type-VF",
        "label": "label_8086_1520",
        "status": "available",
        "parent_addr": "0000:81:00.0",
        "numa_node": 0,
        **values,
    }


def pci_device(ctxt, node_id, address="0000:81:00.1", **values):
    return api.pci_device_create(ctxt, pci_values(node_id, address, **values))


def node_with_devices(ctxt, *addresses):
    """A compute node with a live device at each of ``addresses``."""
    node = compute_node(ctxt)
    for address in addresses:
        pci_device(ctxt, node.id, address)
    return node


def new_device_values(address, **values):
    """A new device's values as a batch save takes them (no node id)."""
    values = pci_values(None, address, **values)
    del values["compute_node_id"]
    return values


def instance(ctxt, host="host1", node="node1", **values):
    return api.instance_create(
        ctxt,
        {"uuid": str(uuid.uuid4()), "host": host, "node": node, "vm_state": "active", **values},
        extra={"pci_requests": "[]", "flavor": '{"vcpus": 1}'},
    )


def instance_with_history(ctxt, **values):
    """An instance owning a row in every table an instance owns: 5 rows in all."""
    inst = instance(ctxt, **values)
    _action(inst.uuid)
    api.instance_fault_create(
        ctxt, {"instance_uuid": inst.uuid, "code": 500, "message": "boom", "host": "host1"}
    )
    return inst


def _action(instance_uuid):
    """An action with one event: rows an instance owns and archiving moves with it,
    which no DB API call writes (nothing in pcisim records actions yet)."""
    actions, events = models.InstanceAction.__table__, models.InstanceActionEvent.__table__
    with engine.get_engine().begin() as connection:
        inserted = connection.execute(
            sa.insert(actions).values(instance_uuid=instance_uuid, action="create")
        )
        (action_id,) = inserted.inserted_primary_key
        connection.execute(
            sa.insert(events).values(action_id=action_id, event="compute_build", host="host1")
        )


def deleted_device(ctxt, node_id, address="0000:81:00.1", **values):
    """A device created and then soft-deleted, as the PCI tracker removes one."""
    pci_device(ctxt, node_id, address, **values)
    return api.pci_device_destroy(ctxt, node_id, address)


def set_deleted_at(table_name, row_id, when):
    """Backdate (or postdate) a row's deletion, which no API call lets a caller choose."""
    table = models.Base.metadata.tables[table_name]
    with engine.get_engine().begin() as connection:
        connection.execute(sa.update(table).where(table.c.id == row_id).values(deleted_at=when))
