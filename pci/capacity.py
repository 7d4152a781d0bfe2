"""What the scheduler may allocate of a node: resources, PCI pools and shared counters.

A compute publishes its node's PCI *inventory*: its assignable devices in pools, each
with a total, whatever the devices' statuses. The scheduler allocates from it: a node's
free capacity is its inventory minus the allocations written on it. An allocation
names what it takes by resource name: ``VCPU``, ``MEMORY_MB``, ``DISK_GB``, or a PCI
pool's ``resource_name``.

A PF and its VFs draw on one shared counter, as Kubernetes DRA's partitionable devices
do. Its capacity is the number of the PF's VFs in the inventory (1 for a PF without
any); a VF costs 1 and the PF costs the whole counter, so a PF can be allocated only
while every VF of it is free, and a VF only while its PF is. Every other pool has a
counter of its own, of its total, at a cost of 1 a device.
"""

import collections
import dataclasses
import hashlib
import json

from pcisim.objects.fields import PciDeviceStatus, PciDeviceType

VCPU, MEMORY_MB, DISK_GB = "VCPU", "MEMORY_MB", "DISK_GB"
# The instance field each node resource is allocated from.
FLAVOR_RESOURCES = {VCPU: "vcpus", MEMORY_MB: "memory_mb", DISK_GB: "root_gb"}
# The node field holding each resource's total.
NODE_TOTALS = {VCPU: "vcpus", MEMORY_MB: "memory_mb", DISK_GB: "local_gb"}
PCI_PREFIX = "PCI:"
OUT_OF_INVENTORY = frozenset({PciDeviceStatus.REMOVED, PciDeviceStatus.DELETED})


def group_of(device):
    """The PF address whose counter ``device`` draws on, or None (a counter of its pool)."""
    if device.dev_type == PciDeviceType.SRIOV_VF:
        return device.parent_addr
    if device.dev_type == PciDeviceType.SRIOV_PF:
        return device.address
    return None


def resource_name(pool):
    """The name allocations give a PCI pool (anything with the pool's attributes and
    ``tags`` as a dict): short, and the same on every process."""
    tags = dict(pool.tags)
    digest = "-"
    if tags:
        text = json.dumps(sorted(tags.items()), separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    numa = "-" if pool.numa_node is None else pool.numa_node
    fields = (pool.dev_type, pool.vendor_id, pool.product_id, numa, pool.group or "-", digest)
    return PCI_PREFIX + ":".join(map(str, fields))


class PoolKey(
    collections.namedtuple("PoolKey", "vendor_id product_id numa_node dev_type group tags")
):
    """What an inventory pool's devices share; ``tags`` as sorted (key, value) pairs."""

    @classmethod
    def of(cls, device, tags):
        return cls(
            device.vendor_id,
            device.product_id,
            device.numa_node,
            device.dev_type,
            group_of(device),
            tuple(sorted(tags.items())),
        )


def inventory_key(device, tags):
    """The PoolKey of the inventory pool ``device`` counts in, or None when it is
    out of the inventory (removed, deleted)."""
    if device.status in OUT_OF_INVENTORY:
        return None
    return PoolKey.of(device, tags)


@dataclasses.dataclass(frozen=True)
class Draw:
    """How one PCI pool draws on its counter."""

    counter: str
    cost: int


def draws(pools):
    """{resource name: Draw} and {counter: capacity} of inventory ``pools`` (objects
    with the pool attributes, ``group`` and ``count``, the total)."""
    vfs = collections.Counter()
    for pool in pools:
        if pool.group is not None and pool.dev_type == PciDeviceType.SRIOV_VF:
            vfs[pool.group] += pool.count
    by_name, capacity = {}, {}
    for pool in pools:
        name = resource_name(pool)
        if pool.group is None:
            by_name[name], capacity[name] = Draw(name, 1), pool.count
            continue
        counter = PCI_PREFIX + pool.group
        size = vfs[pool.group] or 1
        by_name[name] = Draw(counter, 1 if pool.dev_type == PciDeviceType.SRIOV_VF else size)
        capacity[counter] = size
    return by_name, capacity


def counters_left(by_name, capacity, used):
    """{counter: capacity left} once the allocations ``used`` ({resource: used}) drew."""
    left = dict(capacity)
    for name, amount in used.items():
        draw = by_name.get(name)
        if draw is not None:
            left[draw.counter] -= amount * draw.cost
    return left
