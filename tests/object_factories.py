"""Objects for tests, created through whatever path the process uses (RPC or local)."""

import uuid

from pcisim.objects.compute_node import ComputeNode
from pcisim.objects.pci_device import PciDevice


def compute_node(ctxt, host="host1", node="node1"):
    created = ComputeNode(
        ctxt,
        uuid=str(uuid.uuid4()),
        host=host,
        hypervisor_hostname=node,
        vcpus=8,
        memory_mb=4096,
        local_gb=100,
    )
    created.create()
    return created


def vf(ctxt, node, address="0000:81:00.1", **values):
    """A saved VF of PF 0000:81:00.0 (which is not created), free unless told otherwise."""
    values = {
        "vendor_id": "8086",
        "product_id": "1520",
        "dev_type": "type-VF",
        "status": "available",
        "label": "label_8086_1520",
        "parent_addr": "0000:81:00.0",
        "numa_node": 0,
        **values,
    }
    device = PciDevice(ctxt, compute_node_id=node.id, address=address, **values)
    device.save()
    return device


def new_pf(ctxt, node, address="0000:82:00.0"):
    """A PF that was never saved, with the fields the PCI tracker sets (uuid, dev_id and
    extra_info stay unset)."""
    return PciDevice(
        ctxt,
        compute_node_id=node.id,
        address=address,
        vendor_id="8086",
        product_id="1521",
        dev_type="type-PF",
        status="available",
        label="label_8086_1521",
        numa_node=0,
        parent_addr=None,
        instance_uuid=None,
        request_id=None,
    )
