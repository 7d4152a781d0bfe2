"""``[pci] device_spec``: which reported devices are assignable, and the tags they carry.

Nova's semantics: each option value is a JSON dict or a list of dicts; a device is
assignable when some spec matches it, and it takes the tags of the first spec that
does. With no spec at all, no device is assignable.
"""

import json

from pcisim.exception import InvalidPciAddress, PciConfigError
from pcisim.objects.fields import PciDeviceType
from pcisim.pci import ids
from pcisim.pci.address import ANY, address_spec

OPTION = "device_spec"
BOOLEAN_TAGS = ("trusted", "remote_managed")


class DeviceSpec:
    """One device_spec dict: the devices it selects, and the tags it gives them.

    ``vendor_id`` and ``product_id`` are ids (see `pci.ids`) or ``*``; ``address`` is a
    glob string or a dict of regexes (see `pci.address`); a missing key matches
    anything. Every other key is a tag with a string value; ``trusted`` and
    ``remote_managed`` are ``"true"`` or ``"false"``. Raises `PciConfigError` naming
    the bad key.
    """

    def __init__(self, spec):
        self._spec = spec
        fields = dict(spec)
        self._vendor_id = self._pci_id("vendor_id", fields.pop("vendor_id", ANY))
        self._product_id = self._pci_id("product_id", fields.pop("product_id", ANY))
        self._address = self._address_spec(fields.pop("address", None))
        # NOTE: as in Nova, a spec naming one address that is a PF also selects the
        # PF's VFs; a VF's report names its PF in parent_addr.
        self._selects_vfs_of_address = bool(self._address and self._address.is_single_address)
        self._tags = self._checked_tags(fields)

    @property
    def tags(self):
        """The tags this spec gives the devices it matches, as a new dict."""
        return dict(self._tags)

    def match(self, dev):
        """Whether this spec selects ``dev``, a device as the hypervisor reports it.

        ``dev`` has ``address``, ``vendor_id`` and ``product_id`` in lowercase hex,
        ``dev_type`` and, for a VF, ``parent_addr``.
        """
        return (
            self._vendor_id in (None, dev["vendor_id"])
            and self._product_id in (None, dev["product_id"])
            and self._matches_address(dev)
        )

    def _matches_address(self, dev):
        if self._address is None or self._address.match(dev["address"]):
            return True
        return (
            self._selects_vfs_of_address
            and dev["dev_type"] == PciDeviceType.SRIOV_VF
            and self._address.match(dev["parent_addr"])
        )

    def _pci_id(self, key, value):
        """A vendor or product id: None for any, else the id in lowercase.

        NOTE: Nova reads a device_spec id as any hex number up to ffff (``"0x8086"``,
        ``"86"``); pcisim takes the one id form of every reader (``pci.ids``) and
        refuses the others, naming the id Nova would have read, so that an operator's
        spec never selects other devices than it did in Nova.
        """
        if value == ANY:
            return None
        if not ids.is_pci_id(value):
            nova_reads = ids.as_nova_hex_number(value)
            hint = f"; write {nova_reads!r}, the id Nova reads it as" if nova_reads else ""
            raise self._error(f"{key} {value!r} is not '*' or {ids.FORM}{hint}")
        return value.lower()

    def _address_spec(self, value):
        if value is None:
            return None
        try:
            return address_spec(value)
        except InvalidPciAddress as error:
            raise self._error(f"address {value!r}: {error.kwargs['reason']}")

    def _checked_tags(self, tags):
        if "devname" in tags:
            raise self._error("devname is not supported; select devices by address")
        for key, value in tags.items():
            if not isinstance(value, str):
                raise self._error(f"tag {key} must be a string, got {value!r}")
            if key in BOOLEAN_TAGS and value.lower() not in ("true", "false"):
                raise self._error(f"tag {key} must be 'true' or 'false', got {value!r}")
        return {key: value.lower() if key in BOOLEAN_TAGS else value for key, value in tags.items()}

    def _error(self, reason):
        return PciConfigError(option=OPTION, entry=json.dumps(self._spec), reason=reason)


class DeviceSpecList:
    """Every ``[pci] device_spec`` entry, in configuration order."""

    def __init__(self, specs=()):
        self.specs = tuple(specs)

    @classmethod
    def from_config(cls, values):
        """The specs of the option's values, each a JSON dict or list of dicts.

        Raises `PciConfigError` naming the bad entry and what is wrong with it.
        """
        return cls(spec for value in values for spec in _specs_in(value))

    def match(self, dev):
        """The first spec that selects ``dev`` (see `DeviceSpec.match`), or None."""
        for spec in self.specs:
            if spec.match(dev):
                return spec
        return None

    def tags_for(self, dev):
        """The tags of the first spec that selects ``dev``; {} when none does."""
        spec = self.match(dev)
        return {} if spec is None else spec.tags


def _specs_in(value):
    try:
        loaded = json.loads(value)
    except ValueError as error:
        raise _entry_error(value, f"not valid JSON: {error}")
    items = [loaded] if isinstance(loaded, dict) else loaded
    if not isinstance(items, list):
        raise _entry_error(value, "expected a JSON object or a list of objects")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise _entry_error(value, f"item {index} is not a JSON object")
        yield DeviceSpec(item)


def _entry_error(value, reason):
    return PciConfigError(option=OPTION, entry=value, reason=reason)
