"""/hypervisors: compute nodes, their usage, PCI pools and PF/VF trees."""

from pcisim import exception
from pcisim.api import schemas, validation, views
from pcisim.objects.compute_node import ComputeNode, ComputeNodeList
from pcisim.objects.pci_device import PciDeviceList


def view(node):
    pools = node.pci_device_pools.objects if node.pci_device_pools else []
    return {
        "id": node.id,
        "host": node.host,
        "hypervisor_hostname": node.hypervisor_hostname,
        **{
            name: getattr(node, name)
            for name in (
                "vcpus",
                "vcpus_used",
                "memory_mb",
                "memory_mb_used",
                "local_gb",
                "local_gb_used",
            )
        },
        "pci_pools": [pool.to_dict() for pool in pools],
    }


@validation.response_body_schema(schemas.HYPERVISOR_LIST)
def list_hypervisors(api, context):
    return {"hypervisors": [view(node) for node in ComputeNodeList.get_all(context)]}


@validation.response_body_schema(schemas.HYPERVISOR_SHOW)
def show_hypervisor(api, context, node_id):
    return {"hypervisor": view(_node(context, node_id))}


@validation.response_body_schema(schemas.PCI_TREE)
def pci_tree(api, context, node_id):
    """Each PF with its VFs under it, then devices without a tracked parent."""
    node = _node(context, node_id)
    devices = list(PciDeviceList.get_all(context, {"compute_node_id": node.id}))
    pfs = {
        d.address: {**views.pci_device(d), "vfs": []} for d in devices if d.dev_type == "type-PF"
    }
    others = []
    for device in devices:
        if device.address in pfs:
            continue
        parent = pfs.get(device.parent_addr)
        (parent["vfs"] if parent else others).append(views.pci_device(device))
    return {
        "host": node.host,
        "hypervisor_hostname": node.hypervisor_hostname,
        "pfs": list(pfs.values()),
        "devices": others,
    }


def _node(context, node_id):
    # NOTE: an id no column can hold is simply not there; the database would refuse it.
    if node_id > schemas.MAX_ID:
        raise exception.ComputeNodeNotFound(node_id=node_id)
    return ComputeNode.get_by_id(context, node_id)
