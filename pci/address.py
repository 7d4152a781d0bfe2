"""PCI addresses ``dddd:bb:ss.f`` and the address specs of ``[pci] device_spec``.

A reported device has one exact address (`PciAddress`). A device_spec selects addresses
with either a glob string (`GlobAddressSpec`, ``"*:0a:00.*"``) or a dict of regular
expressions, one per field (`RegexAddressSpec`); `address_spec` builds the right one.
Every field is hexadecimal and bounded by the hardware maxima in `FIELDS`.
"""

import dataclasses
import functools
import re
import string
from typing import NamedTuple

from pcisim.exception import InvalidPciAddress

ANY = "*"
HEX_DIGITS = frozenset(string.hexdigits)


class Field(NamedTuple):
    """One field of a PCI address: its name, canonical width in hex digits, maximum."""

    name: str
    width: int
    maximum: int

    def value(self, address, text):
        """The field's value written as ``text`` in ``address``, checked against the maximum."""
        if not text or not HEX_DIGITS.issuperset(text):
            raise InvalidPciAddress(address=address, reason=f"{self.name} {text!r} is not hex")
        value = int(text, 16)
        if value > self.maximum:
            raise InvalidPciAddress(
                address=address,
                reason=f"{self.name} 0x{value:x} is above the maximum 0x{self.maximum:x}",
            )
        return value

    def canonical(self, value):
        return f"{value:0{self.width}x}"


FIELDS = (
    Field("domain", 4, 0xFFFF),
    Field("bus", 2, 0xFF),
    Field("slot", 2, 0x1F),
    Field("function", 1, 0x7),
)
FIELD_NAMES = tuple(field.name for field in FIELDS)
CANONICAL_WIDTHS = [field.width for field in FIELDS]


def _split(text):
    """``"dddd:bb:ss.f"`` -> ``["dddd", "bb", "ss"], "f"``."""
    domain_bus_slot, _, function = text.partition(".")
    return domain_bus_slot.split(":"), function


@dataclasses.dataclass(frozen=True)
class PciAddress:
    """The exact address of one PCI device."""

    domain: int
    bus: int
    slot: int
    function: int

    @classmethod
    def parse(cls, text):
        """The address written ``dddd:bb:ss.f`` in hex, in either case.

        Raises `InvalidPciAddress` naming what is wrong: the form, a field that is not
        hex, or a field above its maximum.
        """
        if not isinstance(text, str):
            raise InvalidPciAddress(address=text, reason="an address is a string")
        return cls._parse(text)

    @classmethod
    # NOTE: the tracker matches every reported address against every device_spec on
    # every periodic run; the same few thousand addresses come back each time.
    @functools.lru_cache(maxsize=16384)
    def _parse(cls, text):
        leading, function = _split(text)
        parts = [*leading, function]
        if [len(part) for part in parts] != CANONICAL_WIDTHS:
            raise InvalidPciAddress(address=text, reason="expected the form dddd:bb:ss.f")
        return cls(*(field.value(text, part) for field, part in zip(FIELDS, parts, strict=True)))

    @functools.cached_property
    def field_texts(self):
        """``{"domain": "0000", "bus": "0a", "slot": "00", "function": "1"}``."""
        return {field.name: field.canonical(getattr(self, field.name)) for field in FIELDS}

    def __str__(self):
        return f"{self.domain:04x}:{self.bus:02x}:{self.slot:02x}.{self.function:x}"


class GlobAddressSpec:
    """A glob address spec, as Nova reads it.

    ``"dddd:bb:ss.f"`` where leading fields may be left off (``"0a:00.1"``), any field
    may be empty or ``*``, and the function may be left off with or without its dot
    (``":0a:00."``, ``"0a:00"``). A field left off, empty or ``*`` matches anything; a
    given field is hex within its maximum and matches that value.
    """

    def __init__(self, text):
        leading, function = _split(text)
        if len(leading) > 3:
            raise InvalidPciAddress(address=text, reason="more than three fields before '.'")
        parts = [part.strip() for part in [ANY] * (3 - len(leading)) + leading + [function]]
        self._wanted = tuple(
            (field.name, field.value(text, part))
            for field, part in zip(FIELDS, parts, strict=True)
            if part not in ("", ANY)
        )
        self.is_single_address = len(self._wanted) == len(FIELDS)

    def match(self, address_text):
        address = PciAddress.parse(address_text)
        return all(getattr(address, name) == value for name, value in self._wanted)


class RegexAddressSpec:
    """A dict of regular expressions keyed by field name, as Nova reads it.

    ``{"domain": ".*", "bus": "0a", "slot": "0[0-3]", "function": "[1-7]"}``: every key
    is optional; each pattern is matched from the start of the canonical lowercase
    field (``re.match``, as Nova does): ``"8"`` selects buses 80 to 8f, ``"[0-3]"``
    slots 00 to 1f, and ``"0A"`` nothing. Write ``"0a$"`` to match a field whole.
    """

    def __init__(self, patterns):
        for key in patterns:
            if key not in FIELD_NAMES:
                raise InvalidPciAddress(
                    address=patterns,
                    reason=f"unknown key {key!r}; the keys are {', '.join(FIELD_NAMES)}",
                )
        self._wanted = tuple(
            (name, _compile(patterns, name)) for name in FIELD_NAMES if name in patterns
        )
        # NOTE: Nova's test for "this spec names one device", which lets a PF's
        # address select its VFs too.
        self.is_single_address = len(self._wanted) == len(FIELDS) and all(
            HEX_DIGITS.issuperset(pattern.pattern) for _, pattern in self._wanted
        )

    def match(self, address_text):
        fields = PciAddress.parse(address_text).field_texts
        return all(pattern.match(fields[name]) for name, pattern in self._wanted)


def _compile(patterns, name):
    pattern = patterns[name]
    if not isinstance(pattern, str):
        raise InvalidPciAddress(address=patterns, reason=f"{name} must be a string")
    try:
        return re.compile(pattern)
    except re.error as error:
        raise InvalidPciAddress(
            address=patterns, reason=f"{name} {pattern!r} is not a regular expression: {error}"
        )


def address_spec(value):
    """The matcher for a device_spec ``address``: a glob string or a dict of regexes.

    The matcher has ``match(address_text) -> bool`` and ``is_single_address``, true when
    it names exactly one address. Raises `InvalidPciAddress` for anything else.
    """
    if isinstance(value, str):
        return GlobAddressSpec(value)
    if isinstance(value, dict):
        return RegexAddressSpec(value)
    raise InvalidPciAddress(address=value, reason="expected a glob string or a dict of regexes")
