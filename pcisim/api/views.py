"""Shared pieces of response bodies."""


def iso(value):
    return value.isoformat() if value is not None else None


def pci_device(device):
    return {
        "id": device.id,
        "compute_node_id": device.compute_node_id,
        "address": device.address,
        "vendor_id": device.vendor_id,
        "product_id": device.product_id,
        "dev_type": device.dev_type,
        "status": device.status,
        "parent_addr": device.parent_addr,
        "numa_node": device.numa_node,
        "label": device.label,
        "server": device.instance_uuid,
    }
