"""What a flavor asks of an instance, read from its sizes and extra specs as Nova reads
them, and the check of extra specs before they are stored.

- ``pci_passthrough:alias`` (``gpu:1,nic:2``): the instance's PCI requests, one per
  item, by ``[pci] alias`` (``pci.request``);
- ``hw:pci_numa_affinity_policy`` (required, legacy, preferred, socket): overrides
  the NUMA policy of every alias the flavor names;
- ``hw:numa_nodes``: a positive integer, at most the flavor's vCPUs: the guest's NUMA
  cells, which the scheduler places on as many host NUMA nodes (the first that fit,
  PCI devices by them, as the aliases' policy says). NOTE: in ``[scheduler]
  claim_mode = legacy`` the guest is placed as one without NUMA topology; and no
  node's CPUs or memory are counted per NUMA node.

Other keys are kept as given, as Nova keeps keys of namespaces it does not know.
"""

import re

from pcisim import exception
from pcisim.pci import request as pci_request

PCI_ALIAS = "pci_passthrough:alias"
PCI_NUMA_POLICY = "hw:pci_numa_affinity_policy"
NUMA_NODES = "hw:numa_nodes"
# NOTE: ASCII digits only: str.isdigit() also takes "³", which int() refuses.
_DECIMAL = re.compile(r"[0-9]{1,4}")


def check_extra_specs(extra_specs, aliases, vcpus):
    """Raise ``InvalidFlavorExtraSpec`` naming the first key whose value pcisim cannot
    read (for a flavor of ``vcpus``), and ``PciAliasNotFound`` for an alias
    ``[pci] alias`` lacks."""
    if PCI_ALIAS in extra_specs:
        try:
            pci_request.parse_request(extra_specs[PCI_ALIAS], aliases)
        except exception.InvalidPciRequest as error:
            raise _invalid(extra_specs, PCI_ALIAS, error.kwargs["reason"]) from None
    policy = extra_specs.get(PCI_NUMA_POLICY)
    if policy is not None and policy not in pci_request.NUMA_POLICIES:
        raise _invalid(extra_specs, PCI_NUMA_POLICY, f"not one of {pci_request.NUMA_POLICIES}")
    if NUMA_NODES in extra_specs:
        _numa_nodes(extra_specs, vcpus)


def _numa_nodes(extra_specs, vcpus):
    value = extra_specs[NUMA_NODES]
    if not _DECIMAL.fullmatch(value) or int(value) < 1:
        raise _invalid(extra_specs, NUMA_NODES, "not a positive integer")
    if int(value) > vcpus:
        raise _invalid(extra_specs, NUMA_NODES, f"more NUMA nodes than the {vcpus} vCPUs")
    return int(value)


def _invalid(extra_specs, key, reason):
    return exception.InvalidFlavorExtraSpec(key=key, value=extra_specs[key], reason=reason)


def instance_values(flavor):
    """The keyword arguments of ``compute.api.API.create`` that ``flavor`` gives."""
    specs = flavor.extra_specs
    return {
        "vcpus": flavor.vcpus,
        "memory_mb": flavor.memory_mb,
        "root_gb": flavor.root_gb,
        "pci_requests": specs.get(PCI_ALIAS),
        "numa_policy": specs.get(PCI_NUMA_POLICY),
        "numa_nodes": int(specs[NUMA_NODES]) if NUMA_NODES in specs else None,
    }
