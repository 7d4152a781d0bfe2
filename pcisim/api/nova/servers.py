"""/v2.1/servers in Nova's view: create from a flavor and an image, list, show, delete.

Servers are pcisim's instances, created through the compute API from a ``Flavor``
(``compute.api.API.create_from_flavor``). What clients send that pcisim has no use for
(networks, volumes, security groups, metadata) is checked for shape and accepted; the
metadata shown is the PCI devices held (``_metadata``). A
server's address is a placeholder from a documentation range (192.0.2.0/24):
openstacksdk deletes a server that reaches ACTIVE without one. Its PCI devices travel
as ``os-pci:pci_devices``, as Nova's removed os-pci API named them.
"""

import hashlib
import re

from oslo_utils import uuidutils

from pcisim import exception
from pcisim.api import servers as pcisim_servers
from pcisim.api import validation, views
from pcisim.api.nova import images, schemas
from pcisim.objects.flavor import Flavor
from pcisim.objects.instance import Instance, InstanceList
from pcisim.objects.instance_fault import InstanceFaultList

POWER_STATES = {"active": 1}  # every other vm_state: 0, NOSTATE
SHOWN_PROGRESS = ("ACTIVE", "BUILD")
PCI_DEVICES_KEY = "os-pci:pci_devices"


def summary(req, instance):
    return {
        "id": instance.uuid,
        "name": instance.display_name,
        "links": req.links("servers", instance.uuid),
    }


def detail(req, instance, fault=None):
    status = pcisim_servers.STATUS.get(instance.vm_state, (instance.vm_state or "").upper())
    view = {
        **summary(req, instance),
        "status": status,
        "tenant_id": instance.project_id,
        "user_id": instance.user_id,
        "metadata": _metadata(instance.pci_devices),
        "hostId": _host_id(instance),
        "image": _image(req, instance),
        "flavor": _flavor(req, instance),
        "created": _time(instance.created_at),
        "updated": _time(instance.updated_at or instance.created_at),
        "addresses": _addresses(instance) if status == "ACTIVE" else {},
        "accessIPv4": "",
        "accessIPv6": "",
        "OS-DCF:diskConfig": "MANUAL",
        "OS-EXT-AZ:availability_zone": "nova",
        "config_drive": "",
        "key_name": None,
        "OS-SRV-USG:launched_at": _time(instance.launched_at),
        "OS-SRV-USG:terminated_at": _time(instance.terminated_at),
        "security_groups": [{"name": "default"}],
        "OS-EXT-SRV-ATTR:host": instance.host,
        "OS-EXT-SRV-ATTR:hypervisor_hostname": instance.node,
        "OS-EXT-SRV-ATTR:instance_name": f"instance-{instance.id:08x}",
        "OS-EXT-STS:task_state": instance.task_state,
        "OS-EXT-STS:vm_state": instance.vm_state,
        "OS-EXT-STS:power_state": POWER_STATES.get(instance.vm_state, 0),
        "os-extended-volumes:volumes_attached": [],
        "os-pci:pci_devices": [views.pci_device(device) for device in instance.pci_devices],
    }
    if status in SHOWN_PROGRESS:
        view["progress"] = 100 if status == "ACTIVE" else 0
    if req.at_least("2.9"):
        view["locked"] = False
    if req.at_least("2.19"):
        view["description"] = None
    if req.at_least("2.26"):
        view["tags"] = []
    if fault is not None:
        view["fault"] = {
            "code": fault.code,
            "message": fault.message,
            "created": _time(fault.created_at),
        }
    return view


def _metadata(devices):
    """NOTE: pcisim keeps no metadata; it shows the server's PCI devices there too,
    because the ``openstack`` CLI shows a server's metadata (as ``properties``) and
    drops fields it does not know, such as ``os-pci:pci_devices``."""
    if not devices:
        return {}
    return {
        PCI_DEVICES_KEY: ", ".join(
            f"{d.address} {d.vendor_id}:{d.product_id} {d.dev_type} {d.status}" for d in devices
        )
    }


def _time(value):
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value is not None else None


def _host_id(instance):
    """As Nova: a hash of the project and host, the same for servers sharing a host."""
    if not instance.host:
        return ""
    return hashlib.sha224(f"{instance.project_id or ''}{instance.host}".encode()).hexdigest()


def _image(req, instance):
    if not instance.image_ref:
        return ""
    return {
        "id": instance.image_ref,
        "links": [req.bookmark("images", instance.image_ref)],
    }


def _flavor(req, instance):
    """The flavor embedded from 2.47, its id and links before; a server created on
    pcisim's own face, with sizes of its own, has a flavor named ``custom``."""
    flavor = instance.flavor
    if not req.at_least("2.47"):
        flavorid = flavor.flavorid if flavor is not None else ""
        return {"id": flavorid, "links": [req.bookmark("flavors", flavorid)]}
    view = {
        "vcpus": instance.vcpus,
        "ram": instance.memory_mb,
        "disk": instance.root_gb,
        "ephemeral": flavor.ephemeral_gb if flavor is not None else 0,
        "swap": flavor.swap if flavor is not None else 0,
        "original_name": flavor.name if flavor is not None else "custom",
    }
    if req.at_least("2.61"):
        view["extra_specs"] = dict(flavor.extra_specs) if flavor is not None else {}
    return view


def _addresses(instance):
    """A placeholder fixed address from TEST-NET-1, and a MAC of OpenStack's prefix."""
    number = instance.id % 65536
    return {
        "private": [
            {
                "version": 4,
                "addr": f"192.0.2.{number % 254 + 1}",
                "OS-EXT-IPS:type": "fixed",
                "OS-EXT-IPS-MAC:mac_addr": f"fa:16:3e:00:{number // 256:02x}:{number % 256:02x}",
            }
        ]
    }


def _count(spec):
    """How many servers to create: ``max_count``, at least ``min_count`` (which the
    schema takes as integers or digit strings, as Nova does)."""
    least, most = int(spec.get("min_count", 1)), int(spec.get("max_count", 1))
    if "max_count" in spec and least > most:
        raise exception.InvalidInput(reason=f"min_count {least} is more than max_count {most}")
    return max(least, most)


@validation.schema(schemas.SERVER_CREATE)
@validation.response_body_schema(schemas.SERVER_CREATED, status=202)
def create_server(api, context, req, body):
    """Create ``min_count`` to ``max_count`` servers (as many as asked, here) of a
    flavor, from an image; answers the first."""
    spec = body["server"]
    if isinstance(spec.get("networks"), str) and not req.at_least("2.37"):
        raise exception.InvalidInput(
            reason=f"networks {spec['networks']!r} needs microversion 2.37 or later"
        )
    flavor = _referenced_flavor(context, spec["flavorRef"])
    image_ref = _referenced_image(spec.get("imageRef"))
    count = _count(spec)
    names = [spec["name"]] if count == 1 else [f"{spec['name']}-{i}" for i in range(1, count + 1)]
    created = [api.compute.create_from_flavor(context, name, flavor, image_ref) for name in names]
    return {
        "server": {
            "id": created[0].uuid,
            "links": req.links("servers", created[0].uuid),
            "OS-DCF:diskConfig": "MANUAL",
            "security_groups": [{"name": group["name"]} for group in _groups(spec)],
            "adminPass": "pcisim",
        }
    }


def _groups(spec):
    return spec.get("security_groups") or [{"name": "default"}]


def _last_segment(reference):
    """An id given as itself or as a link (``.../flavors/ID``), as Nova reads refs."""
    return str(reference).rstrip("/").rsplit("/", 1)[-1]


def _referenced_flavor(context, reference):
    try:
        return Flavor.get_by_flavor_id(context, _last_segment(reference))
    except exception.FlavorNotFound:
        raise exception.InvalidInput(reason=f"flavorRef {reference!r}: no such flavor") from None


def _referenced_image(reference):
    """The image id, or None to boot from a volume (``imageRef`` empty or absent)."""
    if not reference:
        return None
    image_ref = _last_segment(reference)
    try:
        images.get(image_ref)
    except exception.ImageNotFound:
        raise exception.InvalidInput(reason=f"imageRef {reference!r}: no such image") from None
    return image_ref


@validation.query_schema(schemas.SERVER_QUERY)
@validation.response_body_schema(schemas.SERVER_LIST)
def list_servers(api, context, req, query):
    """Servers: id, name and links; ``?name=`` a regular expression, as in Nova."""
    return {"servers": [summary(req, instance) for instance in _listed(context, query)]}


@validation.query_schema(schemas.SERVER_QUERY)
@validation.response_body_schema(schemas.SERVER_DETAIL_LIST)
def list_servers_detail(api, context, req, query):
    """Servers in full, with their PCI devices and the fault of those in ERROR."""
    instances = _listed(context, query, ["flavor", "pci_devices"])
    faults = _faults(context, [i.uuid for i in instances if i.vm_state == "error"])
    return {"servers": [detail(req, i, faults.get(i.uuid)) for i in instances]}


def _listed(context, query, expected_attrs=None):
    if query.get("deleted", "false").lower() in ("true", "1", "yes"):
        return []  # NOTE: pcisim's API shows no deleted server
    instances = InstanceList.get_all(context, expected_attrs=expected_attrs)
    if "name" in query:
        name = _name_pattern(query["name"])
        instances = [i for i in instances if name.search(i.display_name or "")]
    if "status" in query:
        wanted = query["status"].upper()
        instances = [i for i in instances if pcisim_servers.STATUS.get(i.vm_state) == wanted]
    return list(instances)


def _name_pattern(text):
    try:
        return re.compile(text)
    except re.error:
        return re.compile(re.escape(text))


def _faults(context, uuids):
    newest = {}
    if uuids:
        for fault in InstanceFaultList.get_by_instance_uuids(context, uuids):
            newest.setdefault(fault.instance_uuid, fault)
    return newest


@validation.response_body_schema(schemas.SERVER_SHOW)
def show_server(api, context, req, server_id):
    """A server; an id that is not a uuid (a name) is not found, so clients look the
    name up in the list."""
    instance = _instance(context, server_id, ["flavor", "pci_devices"])
    fault = None
    if instance.vm_state == "error":
        fault = _faults(context, [instance.uuid]).get(instance.uuid)
    return {"server": detail(req, instance, fault)}


@validation.response_body_schema(None, status=204)
def delete_server(api, context, req, server_id):
    """Delete a server: it is gone once its compute freed what it held."""
    api.compute.delete(context, _instance(context, server_id))


def _instance(context, server_id, expected_attrs=None):
    if not uuidutils.is_uuid_like(server_id):
        raise exception.InstanceNotFound(instance_uuid=server_id)
    return Instance.get_by_uuid(context, server_id, expected_attrs=expected_attrs)
