"""/v2.1/os-hypervisors in Nova's 2.88 shape (resources shown before 2.88, ids as
integers before 2.53), with the node's PCI pools as ``os-pci:pci_stats``, and
/v2.1/os-aggregates, which pcisim has none of."""

import fnmatch
import re

from oslo_config import cfg
from oslo_utils import uuidutils

from pcisim import compute, exception
from pcisim.api import validation
from pcisim.api.nova import schemas
from pcisim.objects.compute_node import ComputeNode, ComputeNodeList
from pcisim.objects.service import ServiceList

CONF = cfg.CONF
# NOTE: ASCII digits only: str.isdigit() also takes "³", which int() refuses.
_DECIMAL = re.compile(r"[0-9]{1,10}")
RESOURCES = ("vcpus", "vcpus_used", "memory_mb", "memory_mb_used", "local_gb", "local_gb_used")


def summary(req, node, service):
    up = service is not None and service.is_up(CONF.service_down_time)
    return {
        "id": node.uuid if req.at_least("2.53") else node.id,
        "hypervisor_hostname": node.hypervisor_hostname,
        "state": "up" if up else "down",
        "status": "disabled" if service is not None and service.disabled else "enabled",
    }


def detail(req, node, service):
    pools = node.pci_device_pools.objects if node.pci_device_pools else []
    view = {
        **summary(req, node, service),
        "hypervisor_type": "pcisim",
        "hypervisor_version": 1000,
        "host_ip": "127.0.0.1",
        "service": {
            "host": node.host,
            "id": service.id if service is not None else None,
            "disabled_reason": None,
        },
        "os-pci:pci_stats": [pool.to_dict() for pool in pools],
    }
    if req.at_least("2.88"):
        view["uptime"] = None
    else:
        view.update({name: getattr(node, name) for name in RESOURCES})
        view.update(
            free_ram_mb=node.memory_mb - node.memory_mb_used,
            free_disk_gb=node.local_gb - node.local_gb_used,
            running_vms=0,
            current_workload=0,
            disk_available_least=node.local_gb - node.local_gb_used,
            cpu_info="{}",
        )
    return view


def _services(context):
    return {
        service.host: service for service in ServiceList.get_all_by_binary(context, compute.BINARY)
    }


def _listed(context, query):
    nodes = ComputeNodeList.get_all(context)
    pattern = query.get("hypervisor_hostname_pattern")
    if pattern is not None:
        nodes = [n for n in nodes if fnmatch.fnmatch(n.hypervisor_hostname, f"*{pattern}*")]
        if not nodes:
            raise exception.ComputeHostNotFound(host=pattern)
    services = _services(context)
    return [(node, services.get(node.host)) for node in nodes]


@validation.query_schema(schemas.HYPERVISOR_QUERY)
@validation.error_statuses(**{"404": "no hypervisor name matches the pattern"})
@validation.response_body_schema(schemas.HYPERVISOR_LIST)
def list_hypervisors(api, context, req, query):
    """Hypervisors: id, name, state and status."""
    return {"hypervisors": [summary(req, *pair) for pair in _listed(context, query)]}


@validation.query_schema(schemas.HYPERVISOR_QUERY)
@validation.error_statuses(**{"404": "no hypervisor name matches the pattern"})
@validation.response_body_schema(schemas.HYPERVISOR_DETAIL_LIST)
def list_hypervisors_detail(api, context, req, query):
    """Hypervisors with their service and PCI pools."""
    return {"hypervisors": [detail(req, *pair) for pair in _listed(context, query)]}


@validation.response_body_schema(schemas.HYPERVISOR_SHOW)
def show_hypervisor(api, context, req, hypervisor_id):
    """A hypervisor by id (a uuid from 2.53); anything else is not found, so that
    clients given a name look it up in the list."""
    node = _node(context, req, hypervisor_id)
    return {"hypervisor": detail(req, node, _services(context).get(node.host))}


def _node(context, req, hypervisor_id):
    if req.at_least("2.53") and uuidutils.is_uuid_like(hypervisor_id):
        for node in ComputeNodeList.get_all(context):
            if node.uuid == hypervisor_id:
                return node
    elif _DECIMAL.fullmatch(hypervisor_id) and int(hypervisor_id) <= schemas.MAX_ID:
        return ComputeNode.get_by_id(context, int(hypervisor_id))
    raise exception.ComputeNodeNotFound(node_id=hypervisor_id)


@validation.response_body_schema(schemas.AGGREGATE_LIST)
def list_aggregates(api, context, req):
    """Host aggregates: pcisim has none."""
    return {"aggregates": []}
