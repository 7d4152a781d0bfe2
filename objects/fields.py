"""Field types of pcisim's objects: oslo.versionedobjects' own, plus PCI enums."""

from oslo_versionedobjects import fields
from oslo_versionedobjects.fields import *  # noqa: F403  (the field vocabulary in one place)


class PciDeviceStatus(fields.Enum):
    AVAILABLE = "available"
    CLAIMED = "claimed"
    ALLOCATED = "allocated"
    REMOVED = "removed"  # gone from the hypervisor; the row is soft-deleted on save
    DELETED = "deleted"  # the row has been soft-deleted
    UNAVAILABLE = "unavailable"  # a PF with an allocated VF, or a VF of an allocated PF
    UNCLAIMABLE = "unclaimable"  # a PF with a claimed VF, or a VF of a claimed PF

    ALL = (AVAILABLE, CLAIMED, ALLOCATED, REMOVED, DELETED, UNAVAILABLE, UNCLAIMABLE)

    def __init__(self):
        super().__init__(valid_values=PciDeviceStatus.ALL)


class PciDeviceType(fields.Enum):
    STANDARD = "type-PCI"
    SRIOV_PF = "type-PF"
    SRIOV_VF = "type-VF"
    VDPA = "vdpa"

    ALL = (STANDARD, SRIOV_PF, SRIOV_VF, VDPA)

    def __init__(self):
        super().__init__(valid_values=PciDeviceType.ALL)


class PciDeviceStatusField(fields.BaseEnumField):
    AUTO_TYPE = PciDeviceStatus()


class PciDeviceTypeField(fields.BaseEnumField):
    AUTO_TYPE = PciDeviceType()
