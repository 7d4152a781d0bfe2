"""Inventory files and short forms: the documented examples, the layout, every refusal."""

import json
import pathlib
import re

import pytest

from pcisim.compute.inventory import Where, load_nodes, short_form_inventory
from pcisim.exception import InvalidInventory
from tests.unit.pci.inventory import sriov_report

ROOT = pathlib.Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "etc" / "inventory"
DOC = ROOT / "docs" / "inventory.md"
DOC_EXAMPLE = re.compile(r"\[`(etc/inventory/[^`]+)`\]\([^)]*\):\n\n```\w+\n(.*?)```", re.S)


def short_form(text):
    return short_form_inventory(text, Where(repr(text)).at("node 'n'"))


def reasons_of(callable_, *args):
    with pytest.raises(InvalidInventory) as raised:
        callable_(*args)
    return raised.value.kwargs["reason"]


class TestDocumentedExamples:
    def test_the_doc_shows_every_example_file_as_it_is(self):
        shown = dict(DOC_EXAMPLE.findall(DOC.read_text()))
        on_disk = {f"etc/inventory/{path.name}" for path in EXAMPLES.iterdir()}
        assert set(shown) == on_disk
        for name, text in shown.items():
            assert (ROOT / name).read_text() == text

    def test_gpu_node(self):
        node = load_nodes(EXAMPLES / "gpu-node.yaml", "gpu-node")["gpu-node"]
        assert (node.vcpus, node.memory_mb, node.local_gb) == (64, 262144, 2048)
        assert node.numa_sockets == {0: 0, 1: 1}
        assert node.report()[0] == {
            "address": "0000:80:00.0",
            "vendor_id": "10de",
            "product_id": "1eb8",
            "dev_type": "type-PCI",
            "parent_addr": None,
            "numa_node": 0,
            "label": "nvidia-t4",
            "dev_id": "pci_0000_80_00_0",
        }
        assert [device["numa_node"] for device in node.report()] == [0, 1, 0, 1]

    def test_sriov_nic_node_in_json(self):
        node = load_nodes(EXAMPLES / "sriov-nic-node.json", "nic")["nic"]
        by_type = {}
        for device in node.report():
            by_type.setdefault(device["dev_type"], []).append(device)
        assert [pf["address"] for pf in by_type["type-PF"]] == ["0000:10:00.0", "0000:11:00.0"]
        assert [vf["parent_addr"] for vf in by_type["type-VF"]] == ["0000:10:00.0"] * 3 + [
            "0000:11:00.0"
        ] * 3
        assert {vf["label"] for vf in by_type["type-VF"]} == {"label_8086_1520"}

    def test_mixed_two_numa_node_node(self):
        node = load_nodes(EXAMPLES / "mixed-numa-node.yaml", "mixed")["mixed"]
        assert node.numa_sockets == {0: 0, 1: 0}
        devices = {device["address"]: device for device in node.report()}
        assert devices["0000:3b:00.3"]["dev_type"] == "vdpa"
        assert devices["0000:3b:00.3"]["parent_addr"] == "0000:3b:00.0"
        assert devices["0000:3b:00.3"]["dev_id"] == "vdpa_vdpa0"
        assert devices["0000:af:00.0"]["numa_node"] == 1
        assert devices["0000:d8:00.0"]["numa_node"] is None

    def test_multi_node_file(self):
        nodes = load_nodes(EXAMPLES / "multi-node.yaml")
        assert sorted(nodes) == ["rack1-edge", "rack1-gpu", "rack1-nic"]
        assert len(nodes["rack1-nic"].devices) == 2 + 2 * 8
        assert [device["product_id"] for device in nodes["rack1-gpu"].report()] == ["20b5"] * 2
        assert nodes["rack1-gpu"].vcpus == 64
        assert nodes["rack1-edge"].memory_mb == 16384


class TestShortForm:
    def test_follows_the_benchmark_layout(self):
        generated = short_form("pfs=4,vfs_per_pf=8,vendor=8086,product=1520,numa_nodes=2")
        reported = [
            {key: value for key, value in device.items() if key not in ("label", "dev_id")}
            for device in generated.report()
        ]
        expected = [{"parent_addr": None, **device} for device in sriov_report(4, 8)]
        assert reported == expected

    def test_vf_eight_and_on_take_the_next_slot(self):
        addresses = list(short_form("pfs=2,vfs_per_pf=10").devices)
        assert addresses[:3] == ["0000:10:00.0", "0000:10:10.0", "0000:10:10.1"]
        assert addresses[9:12] == ["0000:10:11.0", "0000:10:11.1", "0000:11:00.0"]

    def test_gpus_follow_the_nics_from_bus_0x80(self):
        report = short_form("pfs=1,gpus=3,numa_nodes=2,gpu_product=20B5").report()
        gpus = [device for device in report if device["dev_type"] == "type-PCI"]
        assert [gpu["address"] for gpu in gpus] == [
            "0000:80:00.0",
            "0000:81:00.0",
            "0000:82:00.0",
        ]
        assert [gpu["numa_node"] for gpu in gpus] == [0, 1, 0]
        assert {(gpu["vendor_id"], gpu["product_id"]) for gpu in gpus} == {("10de", "20b5")}

    def test_defaults(self):
        node = short_form("gpus=1")
        assert (node.vcpus, node.memory_mb, node.local_gb) == (32, 131072, 1024)
        assert node.numa_sockets == {0: 0}
        assert [(d["vendor_id"], d["product_id"]) for d in node.report()] == [("10de", "1eb8")]

    def test_resources_are_given_by_key(self):
        node = short_form("vcpus=8, memory_mb=4096 ,local_gb=0")
        assert (node.vcpus, node.memory_mb, node.local_gb, node.devices) == (8, 4096, 0, {})

    @pytest.mark.parametrize(
        "text, pf_product",
        [
            ("pfs=1,vfs_per_pf=1", "1521"),
            ("pfs=1,vfs_per_pf=1,vendor=15b3,product=101e", "101e"),
            ("pfs=1,vfs_per_pf=1,vendor=8086,product=154c", "154c"),
            ("pfs=1,vfs_per_pf=1,vendor=15b3,product=101e,pf_product=101d", "101d"),
        ],
    )
    def test_pf_product_is_the_i350_pf_for_default_vfs_and_else_the_vf_product(
        self, text, pf_product
    ):
        pf, vf = short_form(text).report()
        assert (pf["dev_type"], pf["product_id"]) == ("type-PF", pf_product)
        assert pf["vendor_id"] == vf["vendor_id"]

    def test_the_largest_layout_fits(self):
        node = short_form("pfs=112,vfs_per_pf=128,gpus=128")
        assert len(node.devices) == 112 * 129 + 128
        assert list(node.devices)[-129 - 128 :][:2] == ["0000:7f:00.0", "0000:7f:10.0"]
        assert list(node.devices)[-1] == "0000:ff:00.0"

    @pytest.mark.parametrize(
        "text, reason",
        [
            (
                "pfs=4,vfs=8",
                "key 'vfs': unknown key; the keys are pfs, vfs_per_pf, gpus, "
                "numa_nodes, vcpus, memory_mb, local_gb, vendor, product, pf_product, "
                "gpu_vendor, gpu_product",
            ),
            ("pfs=four", "key 'pfs': 'four' is not an integer"),
            ("pfs=1.5", "key 'pfs': '1.5' is not an integer"),
            ("pfs=4,pfs=2", "key 'pfs': is given twice"),
            ("pfs=4,vfs_per_pf", "'vfs_per_pf' is not KEY=VALUE"),
            ("pfs=4,", "'' is not KEY=VALUE"),
            ("vcpus=-1", "key 'vcpus': -1 is below 0"),
            ("numa_nodes=0", "key 'numa_nodes': 0 is below 1"),
            ("pfs=113", "key 'pfs': 113 is above 112"),
            ("vfs_per_pf=129", "key 'vfs_per_pf': 129 is above 128"),
            ("gpus=129", "key 'gpus': 129 is above 128"),
            ("vendor=intel", "key 'vendor': 'intel' is not 4 hex digits"),
            ("gpu_product=1eb", "key 'gpu_product': '1eb' is not 4 hex digits"),
        ],
    )
    def test_malformed_short_forms_are_refused_naming_the_key(self, text, reason):
        assert reasons_of(short_form, text) == f"node 'n': {reason}"


def write(tmp_path, document, name="node.json"):
    path = tmp_path / name
    path.write_text(json.dumps(document) if name.endswith(".json") else document)
    return path


PF = {
    "address": "0000:10:00.0",
    "vendor_id": "8086",
    "product_id": "1521",
    "dev_type": "type-PF",
    "numa_node": 0,
}
VF = {
    "address": "0000:10:10.0",
    "vendor_id": "8086",
    "product_id": "1520",
    "dev_type": "type-VF",
    "parent_addr": "0000:10:00.0",
    "numa_node": 0,
}
GPU = {"address": "0000:80:00.0", "vendor_id": "10de", "product_id": "1eb8", "dev_type": "type-PCI"}
NODE_KEYS = "vcpus, memory_mb, local_gb, numa_nodes, sockets, pci_devices"
DEVICE_KEYS = "address, vendor_id, product_id, dev_type, parent_addr, numa_node, label, dev_id"


class TestRefusedNodes:
    """Each bad node, as a single-node JSON file named ``n``, and the reason given."""

    @pytest.mark.parametrize(
        "node, reason",
        [
            ({"cpus": 4}, f"node 'n': key 'cpus': unknown key; the keys are {NODE_KEYS}"),
            ({"vcpus": -1}, "node 'n': key 'vcpus': -1 is below 0"),
            ({"memory_mb": "4096"}, "node 'n': key 'memory_mb': '4096' is not an integer"),
            ({"local_gb": True}, "node 'n': key 'local_gb': True is not an integer"),
            ({"numa_nodes": 0}, "node 'n': key 'numa_nodes': 0 is below 1"),
            ({"numa_nodes": 1025}, "node 'n': key 'numa_nodes': 1025 is above 1024"),
            (
                {"numa_nodes": 2, "sockets": {"0": 0}},
                "node 'n': key 'sockets': NUMA node 1 has no socket",
            ),
            (
                {"sockets": {"0": 0, "1": 0}},
                "node 'n': key 'sockets': 1 is not a NUMA node of this node (0..0)",
            ),
            ({"sockets": [0]}, "node 'n': key 'sockets': maps each NUMA node to its socket"),
            ({"sockets": {"0": -1}}, "node 'n': key 'sockets': -1 is below 0"),
            ({"pci_devices": {"a": 1}}, "node 'n': key 'pci_devices': a list of devices"),
        ],
    )
    def test_node_entries(self, tmp_path, node, reason):
        assert reasons_of(load_nodes, write(tmp_path, node), "n") == reason

    @pytest.mark.parametrize(
        "devices, reason",
        [
            (["0000:10:00.0"], "pci_devices[0]: a device is a mapping"),
            (
                [{**GPU, "numa": 0}],
                "pci_devices[0] (0000:80:00.0): key 'numa': unknown key; the keys are "
                f"{DEVICE_KEYS}",
            ),
            (
                [{**GPU, "dev_type": None}],
                "pci_devices[0] (0000:80:00.0): key 'dev_type': is required",
            ),
            (
                [{key: GPU[key] for key in ("address", "vendor_id", "dev_type")}],
                "pci_devices[0] (0000:80:00.0): key 'product_id': is required",
            ),
            (
                [{**GPU, "address": "0000:80:00"}],
                "pci_devices[0]: key 'address': expected the form dddd:bb:ss.f in '0000:80:00'",
            ),
            (
                [{**GPU, "address": "0000:80:20.0"}],
                "pci_devices[0]: key 'address': slot 0x20 is above the maximum 0x1f "
                "in '0000:80:20.0'",
            ),
            (
                [{**GPU, "vendor_id": "10dg"}],
                "pci_devices[0] (0000:80:00.0): key 'vendor_id': '10dg' is not 4 hex digits",
            ),
            (
                [{**GPU, "product_id": 31}],
                "pci_devices[0] (0000:80:00.0): key 'product_id': 31 is not 4 hex digits "
                "(quote ids in YAML)",
            ),
            (
                [{**GPU, "dev_type": "type-GPU"}],
                "pci_devices[0] (0000:80:00.0): key 'dev_type': 'type-GPU' is not one of "
                "type-PCI, type-PF, type-VF, vdpa",
            ),
            (
                [{**GPU, "numa_node": 1}],
                "pci_devices[0] (0000:80:00.0): key 'numa_node': 1 is not a NUMA node "
                "number (0..0)",
            ),
            (
                [{**GPU, "numa_node": -1}],
                "pci_devices[0] (0000:80:00.0): key 'numa_node': -1 is not a NUMA node "
                "number (0..0)",
            ),
            (
                [{**GPU, "label": 7}],
                "pci_devices[0] (0000:80:00.0): key 'label': 7 is not a string",
            ),
            (
                [GPU, {**GPU, "address": "0000:80:00.0".upper()}],
                "pci_devices[1] (0000:80:00.0): key 'address': 0000:80:00.0 is also pci_devices[0]",
            ),
            (
                [{**VF, "parent_addr": None}],
                "pci_devices[0] (0000:10:10.0): key 'parent_addr': is required for a type-VF",
            ),
            (
                [PF, {**VF, "parent_addr": "0000:11:00.0"}],
                "pci_devices[1] (0000:10:10.0): key 'parent_addr': no device 0000:11:00.0 on "
                "this node",
            ),
            (
                [GPU, {**VF, "parent_addr": "0000:80:00.0"}],
                "pci_devices[1] (0000:10:10.0): key 'parent_addr': 0000:80:00.0 is a "
                "type-PCI, not a type-PF",
            ),
            (
                [{**GPU, "parent_addr": "0000:10:00.0"}],
                "pci_devices[0] (0000:80:00.0): key 'parent_addr': only a type-VF or vdpa has one",
            ),
        ],
    )
    def test_device_entries(self, tmp_path, devices, reason):
        path = write(tmp_path, {"pci_devices": devices})
        assert reasons_of(load_nodes, path, "n") == f"node 'n', {reason}"

    def test_a_vf_may_come_before_its_pf(self, tmp_path):
        node = load_nodes(write(tmp_path, {"pci_devices": [VF, PF]}), "n")["n"]
        assert list(node.devices) == [VF["address"], PF["address"]]

    def test_ids_and_addresses_are_reported_in_lowercase(self, tmp_path):
        gpu = {**GPU, "address": "0000:AF:00.0", "vendor_id": "10DE"}
        (device,) = load_nodes(write(tmp_path, {"pci_devices": [gpu]}), "n")["n"].report()
        assert (device["address"], device["vendor_id"]) == ("0000:af:00.0", "10de")


class TestRefusedFiles:
    def test_a_multi_node_file_is_refused_whole_for_one_bad_node(self, tmp_path):
        document = {"nodes": {"good": {"vcpus": 4}, "bad": {"vcpus": -4}}}
        path = write(tmp_path, document)
        assert reasons_of(load_nodes, path) == "node 'bad': key 'vcpus': -4 is below 0"

    @pytest.mark.parametrize(
        "document, reason",
        [
            (
                {"nodes": {"a": {}}, "vcpus": 4},
                "top level: key 'vcpus': unknown key; the keys are nodes",
            ),
            ({"nodes": {}}, "top level: key 'nodes': maps node names to nodes"),
            ({"nodes": ["a"]}, "top level: key 'nodes': maps node names to nodes"),
            (
                {"nodes": {"a b": {}}},
                "'a b' is not a node name (letters, digits, '.', '_', '-')",
            ),
            ({"nodes": {"a": 4}}, "node 'a': a node is a mapping or a short-form string"),
            (
                {"nodes": {"a": "pfs=x"}},
                "node 'a': key 'pfs': 'x' is not an integer",
            ),
            (["vcpus"], "an inventory file holds a mapping"),
        ],
    )
    def test_multi_node_documents(self, tmp_path, document, reason):
        assert reasons_of(load_nodes, write(tmp_path, document)) == reason

    def test_the_source_is_the_file(self, tmp_path):
        path = write(tmp_path, {"vcpus": -1})
        with pytest.raises(InvalidInventory) as raised:
            load_nodes(path, "n")
        assert raised.value.message == (
            f"Invalid inventory {path}: node 'n': key 'vcpus': -1 is below 0"
        )

    def test_a_single_node_file_needs_a_name(self, tmp_path):
        assert reasons_of(load_nodes, write(tmp_path, {"vcpus": 4})) == (
            "a single-node file needs a node name: configure it as NAME=PATH"
        )

    def test_a_multi_node_file_takes_no_name(self, tmp_path):
        path = write(tmp_path, {"nodes": {"a": {}}})
        assert reasons_of(load_nodes, path, "b") == (
            "a multi-node file names its nodes: configure PATH, not b=PATH"
        )

    def test_an_unreadable_file(self, tmp_path):
        reason = reasons_of(load_nodes, tmp_path / "missing.yaml", "n")
        assert reason == "cannot be read: No such file or directory"

    @pytest.mark.parametrize(
        "name, text, reason",
        [
            ("node.json", '{"vcpus": 4,}', "is not valid JSON: "),
            ("node.yaml", "vcpus: [4", "is not valid YAML: "),
            ("node.json", '{"vcpus": 4, "vcpus": 8}', "is not valid JSON: key 'vcpus' appears"),
            ("node.yaml", "vcpus: 4\nvcpus: 8\n", "is not valid YAML: key 'vcpus' appears"),
        ],
    )
    def test_unparsable_files_and_keys_given_twice(self, tmp_path, name, text, reason):
        path = tmp_path / name
        path.write_text(text)
        assert reasons_of(load_nodes, path, "n").startswith(reason)

    def test_a_node_named_twice_in_yaml_is_refused_not_overwritten(self, tmp_path):
        path = write(tmp_path, "nodes:\n  a: gpus=1\n  a: gpus=2\n", name="nodes.yaml")
        assert "key 'a' appears twice" in reasons_of(load_nodes, path)

    def test_an_unquoted_yaml_address_read_as_a_number_is_refused(self, tmp_path):
        text = "pci_devices:\n- {address: 0000:10:10.1, vendor_id: '8086', product_id: '1520',"
        path = write(tmp_path, text + " dev_type: type-PCI}\n", name="node.yaml")
        assert reasons_of(load_nodes, path, "n") == (
            "node 'n', pci_devices[0]: key 'address': 610.1 is not a PCI address "
            "(quote addresses in YAML)"
        )

    def test_unquoted_yaml_ids_are_taken_as_written(self, tmp_path):
        text = "pci_devices:\n- {address: '0000:10:00.0', vendor_id: 8086, product_id: 1520,"
        path = write(tmp_path, text + " dev_type: type-PCI}\n", name="node.yaml")
        (device,) = load_nodes(path, "n")["n"].report()
        assert (device["vendor_id"], device["product_id"]) == ("8086", "1520")
