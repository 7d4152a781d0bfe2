"""/servers: create, list, show and delete servers (instances) with PCI devices."""

from pcisim.api import schemas, validation, views
from pcisim.objects.instance import Instance, InstanceList
from pcisim.objects.instance_fault import InstanceFaultList

STATUS = {"building": "BUILD", "active": "ACTIVE", "error": "ERROR", "deleted": "DELETED"}


def view(instance, fault=None, devices=None):
    server = {
        "id": instance.uuid,
        "name": instance.display_name,
        "status": STATUS.get(instance.vm_state, (instance.vm_state or "").upper()),
        "task_state": instance.task_state,
        "host": instance.host,
        "node": instance.node,
        "vcpus": instance.vcpus,
        "memory_mb": instance.memory_mb,
        "root_gb": instance.root_gb,
        "created_at": views.iso(instance.created_at),
    }
    if fault is not None:
        server["fault"] = {
            "code": fault.code,
            "message": fault.message,
            "created_at": views.iso(fault.created_at),
        }
    if devices is not None:
        server["pci_devices"] = [views.pci_device(device) for device in devices]
    return server


@validation.schema(schemas.SERVER_CREATE)
@validation.response_body_schema(schemas.SERVER_SHOW, status=202)
def create_server(api, context, body):
    spec = body["server"]
    instance = api.compute.create(
        context,
        spec["name"],
        vcpus=spec.get("vcpus", 1),
        memory_mb=spec.get("memory_mb", 512),
        root_gb=spec.get("root_gb", 1),
        pci_requests=spec.get("pci_requests"),
        numa_cells=spec.get("numa_cells"),
    )
    return {"server": _accepted(context, instance)}


def _accepted(context, instance):
    """The view of a server just accepted: it holds no device yet (its compute claims
    them once the build arrives), and has a fault only when no node would take it.
    So no message is spent reading devices, nor faults of a server that has none."""
    faults = []
    if instance.vm_state == "error":
        faults = InstanceFaultList.get_by_instance_uuids(context, [instance.uuid])
    return view(instance, fault=faults[0] if faults else None, devices=[])


@validation.response_body_schema(schemas.SERVER_LIST)
def list_servers(api, context):
    return {"servers": [view(instance) for instance in InstanceList.get_all(context)]}


@validation.response_body_schema(schemas.SERVER_SHOW)
def show_server(api, context, server_id):
    return {"server": _detail(context, Instance.get_by_uuid(context, server_id))}


@validation.response_body_schema(None, status=204)
def delete_server(api, context, server_id):
    api.compute.delete(context, Instance.get_by_uuid(context, server_id))


def _detail(context, instance):
    faults = InstanceFaultList.get_by_instance_uuids(context, [instance.uuid])
    return view(instance, fault=faults[0] if faults else None, devices=instance.pci_devices)
