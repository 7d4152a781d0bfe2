"""PCI vendor and product ids: the one form that every reader of an id accepts.

The hypervisor's report, inventories, ``[pci] alias`` and ``[pci] device_spec`` all take
an id as 4 hex digits in either case and keep it in lowercase (``"10DE"`` is kept as
``"10de"``), as Nova's alias schema does. ``"0x8086"``, ``"86"``, ``"08086"`` and the
number 8086 are not ids. (An inventory file reads an unquoted YAML ``8086``, which YAML
makes a number, as the text written: that is the file's syntax, not another id form.)

Nova's ``[pci] device_spec`` also reads an id as a hex number (``"0x8086"``, ``"86"``);
pcisim refuses those, naming the id Nova would read (`as_nova_hex_number`).
"""

import re

PCI_ID = re.compile(r"[0-9A-Fa-f]{4}")
FORM = "4 hex digits"  # NOTE: how messages name the form


def is_pci_id(value):
    """Whether ``value`` is an id as written: a string of 4 hex digits in either case."""
    return isinstance(value, str) and PCI_ID.fullmatch(value) is not None


def as_nova_hex_number(value):
    """The id Nova's device_spec reads ``value`` as (``"0x86"`` -> ``"0086"``), or None
    when Nova would refuse it too, or ``value`` is already an id."""
    if not isinstance(value, str) or is_pci_id(value):
        return None
    try:
        number = int(value, 16)
    except ValueError:
        return None
    return f"{number:04x}" if 0 <= number <= 0xFFFF else None
