"""Inventories of simulated compute nodes: resources, NUMA layout and PCI devices.

An inventory comes from a YAML or JSON file (one node, or several under ``nodes:``) or
from a short form such as ``pfs=4,vfs_per_pf=8,numa_nodes=2``. Everything is checked
as it is read: one error refuses the whole source with `InvalidInventory`, whose
reason names the node, the entry and the key. A device is an entry of the hypervisor's
report, checked by the report's one definition of an entry (``pci.report``); what this
module adds is what a node knows: its NUMA nodes, and that a VF's PF is on it.
docs/inventory.md describes the format.
"""

import collections
import dataclasses
import pathlib
import re
from collections.abc import Hashable

import yaml

from pcisim import strict_json
from pcisim.exception import InvalidInventory, InvalidPciAddress
from pcisim.objects.fields import PciDeviceType
from pcisim.pci import ids, report
from pcisim.pci.address import PciAddress

RESOURCE_DEFAULTS = {"vcpus": 32, "memory_mb": 131072, "local_gb": 1024}
NODE_KEYS = (*RESOURCE_DEFAULTS, "numa_nodes", "sockets", "pci_devices")
ID_KEYS = ("vendor_id", "product_id")
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_NODE_NAME = 255  # NOTE: the hypervisor_hostname column
MAX_NUMA_NODES = report.MAX_NUMA_NODES
MAX_RESOURCE = 2**31 - 1  # NOTE: the resource columns are 32-bit integers
# NOTE: YAML reads these unquoted as numbers: 0000:10:10.1 as 610.1, 8086 as 8086.
YAML_HINTS = {
    "address": "quote addresses in YAML",
    "parent_addr": "quote addresses in YAML",
    "vendor_id": "quote ids in YAML",
    "product_id": "quote ids in YAML",
}

SHORT_FORM_COUNTS = {"pfs": 0, "vfs_per_pf": 0, "gpus": 0, "numa_nodes": 1, **RESOURCE_DEFAULTS}
SHORT_FORM_IDS = {
    "vendor": "8086",
    "product": "1520",
    "pf_product": None,  # NOTE: see _pf_product
    "gpu_vendor": "10de",
    "gpu_product": "1eb8",
}
SHORT_FORM_KEYS = (*SHORT_FORM_COUNTS, *SHORT_FORM_IDS)
# NOTE: the generated layout must fit in a PCI address: PF buses 0x10..0x7f, VF slots
# 0x10..0x1f with 8 functions each, GPU buses 0x80..0xff.
SHORT_FORM_MAXIMA = {
    "pfs": 0x70,
    "vfs_per_pf": 0x10 * 8,
    "gpus": 0x80,
    "numa_nodes": MAX_NUMA_NODES,
}
INTEL_I350_PF = "1521"


@dataclasses.dataclass(frozen=True)
class Inventory:
    """One node's resources, NUMA layout and PCI devices, checked and normalised.

    ``devices`` maps each address to its entry in the hypervisor report format, every
    key present. An inventory is never changed: `plugged` and `unplugged` make new
    ones, so a reader holding one always sees a consistent node.
    """

    vcpus: int
    memory_mb: int
    local_gb: int
    numa_sockets: dict
    devices: dict

    def report(self):
        """The PCI devices as fresh dicts, which the caller may change."""
        return [dict(device) for device in self.devices.values()]

    def plugged(self, entry, where):
        """This inventory with one more device, checked as a file's device is, and the
        device's report entry."""
        device = _device(entry, where, len(self.numa_sockets))
        where = where.named(device["address"])
        if device["address"] in self.devices:
            raise where.error(f"{device['address']} is already on this node", key="address")
        devices = {**self.devices, device["address"]: device}
        _check_parent(device, devices, where)
        return dataclasses.replace(self, devices=devices), dict(device)

    def unplugged(self, address, where):
        """This inventory without the device at ``address`` and, for a PF, its VFs; and
        the addresses removed."""
        address = _address(address, where)
        if address not in self.devices:
            raise where.error(f"no device {address} on this node", key="address")
        removed = [
            child
            for child, device in self.devices.items()
            if address in (child, device["parent_addr"])
        ]
        kept = self.devices.keys() - set(removed)
        devices = {child: device for child, device in self.devices.items() if child in kept}
        return dataclasses.replace(self, devices=devices), removed


@dataclasses.dataclass(frozen=True)
class Where:
    """An entry of an inventory source, as error messages name it."""

    source: str
    path: tuple = ()

    def at(self, entry):
        return Where(self.source, (*self.path, entry))

    def named(self, name):
        """The same entry, with ``name`` after it: ``pci_devices[3] (0000:10:00.1)``."""
        return Where(self.source, (*self.path[:-1], f"{self.path[-1]} ({name})"))

    def error(self, problem, key=None):
        entry = ", ".join(self.path) or ("top level" if key is not None else "")
        named_key = f"key {key!r}" if key is not None else ""
        reason = ": ".join(part for part in (entry, named_key, problem) if part)
        return InvalidInventory(source=self.source, reason=reason)


# ----------------------------------------------------------------- sources


def load_nodes(path, nodename=None):
    """The inventories a file describes, by node name.

    A file with a top-level ``nodes:`` mapping describes several nodes and is read
    without ``nodename``; any other file describes one node, named ``nodename``.
    """
    where = Where(str(path))
    document = _read_document(path, where)
    if not isinstance(document, dict):
        raise where.error("an inventory file holds a mapping")
    if "nodes" in document:
        if nodename is not None:
            raise where.error(
                f"a multi-node file names its nodes: configure PATH, not {nodename}=PATH"
            )
        _refuse_unknown_keys(document, ("nodes",), where)
        return _nodes(document["nodes"], where)
    if nodename is None:
        raise where.error("a single-node file needs a node name: configure it as NAME=PATH")
    return {nodename: node_inventory(document, where.at(f"node {nodename!r}"))}


def _nodes(nodes, where):
    if not isinstance(nodes, dict) or not nodes:
        raise where.error("maps node names to nodes", key="nodes")
    for name in nodes:
        check_node_name(name, where)
    return {name: node_inventory(node, where.at(f"node {name!r}")) for name, node in nodes.items()}


def check_node_name(name, where):
    if not isinstance(name, str) or not NODE_NAME.fullmatch(name):
        raise where.error(f"{name!r} is not a node name (letters, digits, '.', '_', '-')")
    if len(name) > MAX_NODE_NAME:
        raise where.error(f"node name {name:.20}... is over {MAX_NODE_NAME} characters long")


def _read_document(path, where):
    try:
        text = pathlib.Path(path).read_text()
    except OSError as error:
        raise where.error(f"cannot be read: {error.strerror}")
    is_json = str(path).endswith(".json")
    try:
        if is_json:
            return strict_json.loads(text)
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except (ValueError, yaml.YAMLError) as error:
        raise where.error(f"is not valid {'JSON' if is_json else 'YAML'}: {_one_line(error)}")


def _one_line(error):
    """PyYAML's message without the lines it draws under the text: one line, with the
    place of the problem."""
    problem, mark = getattr(error, "problem", None), getattr(error, "problem_mark", None)
    if problem is None:
        return " ".join(str(error).split())
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"{problem}{where}"


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in a mapping is an error
    (PyYAML keeps the last silently, so a node named twice would vanish)."""

    def construct_mapping(self, node, deep=False):
        keys = [self.construct_object(key_node, deep=deep) for key_node, _ in node.value]
        counts = collections.Counter(key for key in keys if isinstance(key, Hashable))
        for key, count in counts.items():
            if count > 1:
                problem = f"key {key!r} appears twice in one mapping"
                raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark)
        return super().construct_mapping(node, deep=deep)


# ------------------------------------------------------------------- nodes


def node_inventory(node, where):
    """The inventory of one node, described by a mapping or a short-form string."""
    if isinstance(node, str):
        return short_form_inventory(node, where)
    if not isinstance(node, dict):
        raise where.error("a node is a mapping or a short-form string")
    _refuse_unknown_keys(node, NODE_KEYS, where)
    resources = {
        name: _count(node.get(name, default), where, name, maximum=MAX_RESOURCE)
        for name, default in RESOURCE_DEFAULTS.items()
    }
    numa_nodes = _count(node.get("numa_nodes", 1), where, "numa_nodes", 1, MAX_NUMA_NODES)
    return Inventory(
        **resources,
        numa_sockets=_sockets(node.get("sockets"), numa_nodes, where),
        devices=_devices(node.get("pci_devices", []), numa_nodes, where),
    )


def _sockets(sockets, numa_nodes, where):
    """NUMA node -> socket; each node its own socket unless ``sockets`` says otherwise."""
    if sockets is None:
        return {numa_node: numa_node for numa_node in range(numa_nodes)}
    if not isinstance(sockets, dict):
        raise where.error("maps each NUMA node to its socket", key="sockets")
    mapping = {_numa_key(key, numa_nodes, where): value for key, value in sockets.items()}
    missing = sorted(set(range(numa_nodes)) - mapping.keys())
    if missing:
        raise where.error(f"NUMA node {missing[0]} has no socket", key="sockets")
    return {node: _count(socket, where, "sockets") for node, socket in sorted(mapping.items())}


def _numa_key(key, numa_nodes, where):
    """A NUMA node number given as a mapping key: an int, or a digit string in JSON."""
    number = int(key) if isinstance(key, str) and key.isdigit() else key
    if not isinstance(number, int) or isinstance(number, bool) or not 0 <= number < numa_nodes:
        problem = f"{number!r} is not a NUMA node of this node (0..{numa_nodes - 1})"
        raise where.error(problem, key="sockets")
    return number


def _count(value, where, key, minimum=0, maximum=None):
    if not isinstance(value, int) or isinstance(value, bool):
        raise where.error(f"{value!r} is not an integer", key=key)
    if value < minimum:
        raise where.error(f"{value} is below {minimum}", key=key)
    if maximum is not None and value > maximum:
        raise where.error(f"{value} is above {maximum}", key=key)
    return value


def _refuse_unknown_keys(mapping, known, where):
    for key in mapping:
        if key not in known:
            raise where.error(f"unknown key; the keys are {', '.join(known)}", key=key)


# ----------------------------------------------------------------- devices


def _devices(entries, numa_nodes, where):
    """Address -> device for a node's ``pci_devices`` list, in any order of PFs and VFs."""
    if not isinstance(entries, list):
        raise where.error("a list of devices", key="pci_devices")
    devices, indexes = {}, {}
    for index, entry in enumerate(entries):
        device = _device(entry, _device_place(where, index), numa_nodes)
        address = device["address"]
        if address in devices:
            problem = f"{address} is also pci_devices[{indexes[address]}]"
            raise _device_place(where, index, address).error(problem, key="address")
        devices[address], indexes[address] = device, index
    for address, device in devices.items():
        _check_parent(device, devices, _device_place(where, indexes[address], address))
    return devices


def _device_place(where, index, address=None):
    place = where.at(f"pci_devices[{index}]")
    return place if address is None else place.named(address)


def _device(entry, where, numa_nodes):
    """One device entry, checked alone (`report.entry_problem`) for a node of ``numa_nodes``
    NUMA nodes, in the report format with every key present."""
    entry = _ids_as_written(entry)
    problem = report.entry_problem(entry, numa_nodes)
    if problem is not None:
        reason = problem.reason + _yaml_hint(entry, problem.key)
        raise _named(where, entry).error(reason, key=problem.key)
    device = report.normal_entry(entry)
    default_dev_id = "pci_" + re.sub("[:.]", "_", device["address"])
    return {**device, "dev_id": device["dev_id"] or default_dev_id}


def _ids_as_written(entry):
    """``entry`` with an id YAML read as a number (an unquoted ``8086``) as the digits
    written, when they make an id."""
    if not isinstance(entry, dict):
        return entry
    return {key: _id_as_written(value) if key in ID_KEYS else value for key, value in entry.items()}


def _id_as_written(value):
    is_number = isinstance(value, int) and not isinstance(value, bool)
    return str(value) if is_number and ids.is_pci_id(str(value)) else value


def _yaml_hint(entry, key):
    value = entry.get(key) if isinstance(entry, dict) else None
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    return f" ({YAML_HINTS[key]})" if is_number and key in YAML_HINTS else ""


def _named(where, entry):
    """``where`` named by the entry's address, when it has a valid one."""
    address = entry.get("address") if isinstance(entry, dict) else None
    try:
        return where.named(str(PciAddress.parse(address)))
    except InvalidPciAddress:
        return where


def _check_parent(device, devices, where):
    """A VF (or vDPA device) names a PF of the same node as its parent."""
    parent_addr = device["parent_addr"]
    if parent_addr is None:
        return
    parent = devices.get(parent_addr)
    if parent is None:
        raise where.error(f"no device {parent_addr} on this node", key="parent_addr")
    if parent["dev_type"] != PciDeviceType.SRIOV_PF:
        problem = f"{parent_addr} is a {parent['dev_type']}, not a {PciDeviceType.SRIOV_PF}"
        raise where.error(problem, key="parent_addr")


def _address(value, where):
    """The canonical text of an address given alone, to unplug its device."""
    if not isinstance(value, str):
        raise where.error(f"{value!r} is not a string", key="address")
    try:
        return str(PciAddress.parse(value))
    except InvalidPciAddress as error:
        raise where.error(error.kwargs["reason"] + f" in {value!r}", key="address")


# -------------------------------------------------------------- short form


def short_form_inventory(text, where):
    """The node a short form such as ``pfs=4,vfs_per_pf=8,numa_nodes=2`` describes.

    PF i is at 0000:BB:00.0 (BB = 0x10 + i) with VF j at 0000:BB:SS.F (SS = 0x10 + j//8,
    F = j%8); GPU k is at 0000:CC:00.0 (CC = 0x80 + k). PF i with its VFs, and GPU k,
    are on NUMA node i (or k) modulo ``numa_nodes``.
    """
    return node_inventory(_generated_node(_short_form_values(text, where)), where)


def _short_form_values(text, where):
    given = {}
    for item in text.split(","):
        key, equals, value = (part.strip() for part in item.partition("="))
        if not equals:
            raise where.error(f"{item!r} is not KEY=VALUE")
        if key not in SHORT_FORM_KEYS:
            raise where.error(f"unknown key; the keys are {', '.join(SHORT_FORM_KEYS)}", key=key)
        if key in given:
            raise where.error("is given twice", key=key)
        given[key] = value
    values = {
        key: _short_form_count(given[key], where, key) if key in given else default
        for key, default in SHORT_FORM_COUNTS.items()
    }
    for key, default in SHORT_FORM_IDS.items():
        values[key] = _short_form_id(given[key], where, key) if key in given else default
    values["pf_product"] = values["pf_product"] or _pf_product(values)
    return values


def _short_form_id(text, where, key):
    if not ids.is_pci_id(text):
        raise where.error(f"{text!r} is not {ids.FORM}", key=key)
    return text.lower()


def _short_form_count(text, where, key):
    if not re.fullmatch(r"-?[0-9]+", text):
        raise where.error(f"{text!r} is not an integer", key=key)
    minimum = 1 if key == "numa_nodes" else 0
    return _count(int(text), where, key, minimum, SHORT_FORM_MAXIMA.get(key))


def _pf_product(values):
    """PFs of the default VFs (Intel I350, 8086:1520) are 8086:1521; others share the VFs' id."""
    is_i350 = (values["vendor"], values["product"]) == ("8086", "1520")
    return INTEL_I350_PF if is_i350 else values["product"]


def _generated_node(values):
    devices = []
    for i in range(values["pfs"]):
        devices += _sriov_nic(i, values)
    devices += [_gpu(k, values) for k in range(values["gpus"])]
    resources = {key: values[key] for key in RESOURCE_DEFAULTS}
    return {**resources, "numa_nodes": values["numa_nodes"], "pci_devices": devices}


def _sriov_nic(i, values):
    """PF i and its VFs."""
    bus, numa_node = 0x10 + i, i % values["numa_nodes"]
    pf = f"0000:{bus:02x}:00.0"
    vf_entries = [
        {
            "address": f"0000:{bus:02x}:{0x10 + j // 8:02x}.{j % 8}",
            "vendor_id": values["vendor"],
            "product_id": values["product"],
            "dev_type": PciDeviceType.SRIOV_VF,
            "parent_addr": pf,
            "numa_node": numa_node,
        }
        for j in range(values["vfs_per_pf"])
    ]
    pf_entry = {
        "address": pf,
        "vendor_id": values["vendor"],
        "product_id": values["pf_product"],
        "dev_type": PciDeviceType.SRIOV_PF,
        "numa_node": numa_node,
    }
    return [pf_entry, *vf_entries]


def _gpu(k, values):
    return {
        "address": f"0000:{0x80 + k:02x}:00.0",
        "vendor_id": values["gpu_vendor"],
        "product_id": values["gpu_product"],
        "dev_type": PciDeviceType.STANDARD,
        "numa_node": k % values["numa_nodes"],
    }
