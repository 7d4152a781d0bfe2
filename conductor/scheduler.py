"""Choosing a node for a new instance: free CPU, memory and disk, and PCI pools.

The choice uses what the computes published (their compute node records and PCI
pools), so it can be stale; the compute's claim is the authority, and a claim that
fails there sends the instance back here for another node.
"""

from oslo_log import log as logging

from objects.compute_node import ComputeNodeList
from objects.service import ServiceList
from pci.stats import PciDeviceStats
from pcisim import conf as pcisim_conf
from pcisim import exception

LOG = logging.getLogger(__name__)
COMPUTE_BINARY = "pcisim-compute"


def select_destination(context, instance, numa_cells=None, exclude=()):
    """The (host, node) with the most free memory that fits, or ``NoValidHost``."""
    down_after = pcisim_conf.CONF.service_down_time
    up = {
        s.host
        for s in ServiceList.get_all_by_binary(context, COMPUTE_BINARY)
        if s.is_up(down_after)
    }
    nodes = [
        n
        for n in ComputeNodeList.get_all(context)
        if n.host in up and [n.host, n.hypervisor_hostname] not in exclude
    ]
    if not nodes:
        raise exception.NoValidHost(reason="no compute service is up that was not tried")
    fitting = [n for n in nodes if _fits(n, instance)]
    if not fitting:
        raise exception.NoValidHost(reason=f"no node has {_flavor(instance)} free")
    requests = list(instance.pci_requests.requests) if instance.pci_requests else []
    fitting = [n for n in fitting if _pci_fits(n, requests, numa_cells)]
    if not fitting:
        raise exception.NoValidHost(reason=f"no node can provide PCI devices {_names(requests)}")
    best = max(fitting, key=lambda n: n.memory_mb - n.memory_mb_used)
    return best.host, best.hypervisor_hostname


def _fits(node, instance):
    return all(
        (getattr(instance, wanted) or 0) <= getattr(node, total) - getattr(node, f"{total}_used")
        for total, wanted in (
            ("vcpus", "vcpus"),
            ("memory_mb", "memory_mb"),
            ("local_gb", "root_gb"),
        )
    )


def _pci_fits(node, requests, numa_cells):
    if not requests:
        return True
    stats = PciDeviceStats.from_device_pools(node.pci_device_pools)
    return stats.support_requests(requests, set(numa_cells) if numa_cells else None)


def _flavor(instance):
    return (
        f"{instance.vcpus or 0} vCPUs, {instance.memory_mb or 0} MB of memory and "
        f"{instance.root_gb or 0} GB of disk"
    )


def _names(requests):
    return ", ".join(f"{r.alias_name}:{r.count}" for r in requests)
