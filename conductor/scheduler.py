"""Choosing a node for a new instance: free CPU, memory and disk, and PCI pools.

The choice uses what the computes published (their compute node records and PCI
pools), so it can be stale; the compute's claim is the authority, and a claim that
fails there sends the instance back here for another node.
"""

import functools

from oslo_log import log as logging

from pcisim import conf as pcisim_conf
from pcisim import exception
from pcisim.compute import rpcapi as compute_rpcapi
from pcisim.db import api as db_api
from pcisim.objects.pci_device_pool import PciDevicePoolList
from pcisim.objects.service import ServiceList
from pcisim.pci.stats import PciDeviceStats

LOG = logging.getLogger(__name__)


def select_destination(context, instance, numa_cells=None, exclude=()):
    """The (host, node) with the most free memory that fits, or ``NoValidHost``."""
    down_after = pcisim_conf.CONF.service_down_time
    up = {
        s.host
        for s in ServiceList.get_all_by_binary(context, compute_rpcapi.BINARY)
        if s.is_up(down_after)
    }
    # NOTE: rows, not ComputeNode objects: with 1,000 nodes, building the objects and
    # their pool objects took 90% of the 270 ms a request cost (bench/scale.py).
    nodes = [
        n
        for n in db_api.compute_node_get_all(context)
        if n.host in up and [n.host, n.hypervisor_hostname] not in exclude
    ]
    if not nodes:
        raise exception.NoValidHost(reason="no compute service is up that was not tried")
    fitting = [n for n in nodes if _fits(n, instance)]
    if not fitting:
        raise exception.NoValidHost(reason=f"no node has {_flavor(instance)} free")
    requests = list(instance.pci_requests.requests) if instance.pci_requests else []
    pci_fits = _pci_filter(requests, numa_cells)
    fitting = [n for n in fitting if pci_fits(n.pci_stats)]
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


def _pci_filter(requests, numa_cells):
    """Whether a node's published pools (its ``pci_stats`` column) can serve ``requests``.

    Nodes that publish the same pools get the same answer, so each distinct
    ``pci_stats`` is planned once per request: most nodes of a large cloud look alike.
    """
    if not requests:
        return lambda pci_stats: True
    cells = set(numa_cells) if numa_cells else None

    @functools.cache
    def fits(pci_stats):
        stats = PciDeviceStats.from_device_pools(PciDevicePoolList.from_json(pci_stats))
        return stats.support_requests(requests, cells)

    return fits


def _flavor(instance):
    return (
        f"{instance.vcpus or 0} vCPUs, {instance.memory_mb or 0} MB of memory and "
        f"{instance.root_gb or 0} GB of disk"
    )


def _names(requests):
    return ", ".join(f"{r.alias_name}:{r.count}" for r in requests)
