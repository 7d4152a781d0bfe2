"""/pci-devices: every tracked PCI device, filtered by host, status, type, server or node."""

from pcisim import exception
from pcisim.api import schemas, validation, views
from pcisim.objects.pci_device import PciDevice, PciDeviceList

_FILTER_NAMES = {"server": "instance_uuid"}


@validation.query_schema(schemas.PCI_DEVICE_QUERY)
@validation.response_body_schema(schemas.PCI_DEVICE_LIST)
def list_pci_devices(api, context, query):
    filters = {_FILTER_NAMES.get(name, name): value for name, value in query.items()}
    devices = PciDeviceList.get_all(context, filters)
    return {"pci_devices": [views.pci_device(device) for device in devices]}


@validation.response_body_schema(schemas.PCI_DEVICE_SHOW)
def show_pci_device(api, context, device_id):
    if device_id > schemas.MAX_ID:
        raise exception.PciDeviceNotFoundById(id=device_id)
    return {"pci_device": views.pci_device(PciDevice.get_by_dev_id(context, device_id))}
