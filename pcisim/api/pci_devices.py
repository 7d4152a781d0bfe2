"""/pci-devices: every tracked PCI device, filtered by host, status, type or server."""

import flask

from pcisim import exception
from pcisim.api import errors, schemas, views
from pcisim.objects.pci_device import PciDevice, PciDeviceList

_FILTER_NAMES = {"server": "instance_uuid"}


def list_pci_devices(api, context):
    query = flask.request.args.to_dict(flat=True)
    unknown = sorted(set(query) - set(schemas.PCI_DEVICE_FILTERS))
    if unknown:
        raise errors.ApiError(400, "request.invalid", f"unknown query parameter(s) {unknown}")
    repeated = sorted(name for name, values in flask.request.args.lists() if len(values) > 1)
    if repeated:
        raise errors.ApiError(400, "request.invalid", f"query parameter(s) {repeated} given twice")
    schemas.validate(query, {"type": "object", "properties": schemas.PCI_DEVICE_FILTERS}, "query")
    filters = {_FILTER_NAMES.get(name, name): value for name, value in query.items()}
    devices = PciDeviceList.get_all(context, filters)
    return {"pci_devices": [views.pci_device(device) for device in devices]}


def show_pci_device(api, context, device_id):
    if device_id > schemas.MAX_ID:
        raise exception.PciDeviceNotFoundById(id=device_id)
    return {"pci_device": views.pci_device(PciDevice.get_by_dev_id(context, device_id))}
