"""The simulated hypervisor: configuration, reports, hot-plug, reload and guests."""

import json
import pathlib
import threading

import pytest

from pcisim import exception
from pcisim.compute.driver import SimulatedDriver
from pcisim.compute.inventory import Where, short_form_inventory

EXAMPLES = pathlib.Path(__file__).resolve().parents[3] / "etc" / "inventory"
NEW_VF = {
    "address": "0000:10:10.2",
    "vendor_id": "8086",
    "product_id": "1520",
    "dev_type": "type-VF",
    "parent_addr": "0000:10:00.0",
    "numa_node": 0,
}
GUEST, OTHER_GUEST = "3c1f4b9e-0000-4000-8000-000000000001", "3c1f4b9e-0000-4000-8000-000000000002"


def addresses(driver, nodename):
    return [device["address"] for device in driver.get_available_resource(nodename)["pci_devices"]]


@pytest.fixture
def driver():
    """Node ``nic``: PF 0000:10:00.0 with VFs 0000:10:10.0-1, PF 0000:11:00.0 with two more."""
    return SimulatedDriver.from_config(["nic=pfs=2,vfs_per_pf=2"])


class TestConfiguration:
    def test_nodes_from_every_kind_of_value(self):
        driver = SimulatedDriver.from_config(
            [
                f"gpu-node={EXAMPLES / 'gpu-node.yaml'}",
                "nic-node=pfs=4,vfs_per_pf=8",
                str(EXAMPLES / "multi-node.yaml"),
            ]
        )
        assert driver.get_available_nodes() == [
            "gpu-node",
            "nic-node",
            "rack1-edge",
            "rack1-gpu",
            "rack1-nic",
        ]
        assert len(addresses(driver, "nic-node")) == 4 * 9

    def test_the_constructor_takes_inventories(self):
        inventory = short_form_inventory("gpus=1", Where("test"))
        driver = SimulatedDriver({"g": inventory})
        assert addresses(driver, "g") == ["0000:80:00.0"]

    @pytest.mark.parametrize(
        "values, reason",
        [
            (["a=gpus=1", "a=pfs=1"], "node 'a' is defined twice in [compute] inventory"),
            (
                ["rack1-gpu=gpus=1", str(EXAMPLES / "multi-node.yaml")],
                "node 'rack1-gpu' is defined twice in [compute] inventory",
            ),
            (["pfs=4,vfs_per_pf=8"], "a short form needs a node name: NAME=pfs=4,vfs_per_pf=8"),
            (["a="], "nothing follows a="),
            (["a b=gpus=1"], "'a b' is not a node name (letters, digits, '.', '_', '-')"),
        ],
    )
    def test_bad_values_are_refused(self, values, reason):
        with pytest.raises(exception.InvalidInventory) as raised:
            SimulatedDriver.from_config(values)
        assert raised.value.kwargs["reason"] == reason

    def test_a_short_form_error_names_the_value_and_the_node(self):
        with pytest.raises(exception.InvalidInventory) as raised:
            SimulatedDriver.from_config(["nic=pfs=4,vfs=8"])
        assert raised.value.message.startswith(
            "Invalid inventory 'nic=pfs=4,vfs=8': node 'nic': key 'vfs': unknown key"
        )


class TestResources:
    def test_totals_numa_sockets_and_devices(self):
        driver = SimulatedDriver.from_config([f"m={EXAMPLES / 'mixed-numa-node.yaml'}"])
        resources = driver.get_available_resource("m")
        assert {key: resources[key] for key in ("vcpus", "memory_mb", "local_gb")} == {
            "vcpus": 48,
            "memory_mb": 196608,
            "local_gb": 4096,
        }
        assert resources["numa_sockets"] == {0: 0, 1: 0}
        assert len(resources["pci_devices"]) == 5

    def test_every_call_returns_fresh_copies(self, driver):
        first = driver.get_available_resource("nic")
        first["pci_devices"][0]["address"] = "0000:99:00.0"
        first["pci_devices"].clear()
        first["numa_sockets"][0] = 7
        second = driver.get_available_resource("nic")
        assert second["pci_devices"][0]["address"] == "0000:10:00.0"
        assert second["numa_sockets"] == {0: 0}
        driver.get_available_nodes().clear()
        assert driver.get_available_nodes() == ["nic"]

    @pytest.mark.parametrize(
        "call",
        [
            lambda d: d.get_available_resource("nope"),
            lambda d: d.hot_plug("nope", NEW_VF),
            lambda d: d.hot_unplug("nope", "0000:10:00.0"),
            lambda d: d.spawn("nope", GUEST, []),
            lambda d: d.destroy("nope", GUEST),
            lambda d: d.list_instances("nope"),
        ],
    )
    def test_an_unknown_node_is_not_found(self, driver, call):
        with pytest.raises(exception.ComputeNodeNotFound):
            call(driver)


class TestHotPlug:
    def test_a_plugged_vf_is_reported_with_its_defaults(self, driver):
        entry = driver.hot_plug("nic", {**NEW_VF, "address": "0000:10:10.2".upper()})
        assert entry == {**NEW_VF, "label": "label_8086_1520", "dev_id": "pci_0000_10_10_2"}
        assert driver.get_available_resource("nic")["pci_devices"][-1] == entry

    @pytest.mark.parametrize(
        "device, reason",
        [
            (
                {**NEW_VF, "address": "0000:10:10.0"},
                "hot-plugged device (0000:10:10.0): key 'address': 0000:10:10.0 is already "
                "on this node",
            ),
            (
                {**NEW_VF, "parent_addr": "0000:12:00.0"},
                "hot-plugged device (0000:10:10.2): key 'parent_addr': no device 0000:12:00.0 "
                "on this node",
            ),
            (
                {**NEW_VF, "parent_addr": "0000:10:10.0"},
                "hot-plugged device (0000:10:10.2): key 'parent_addr': 0000:10:10.0 is a "
                "type-VF, not a type-PF",
            ),
            (
                {**NEW_VF, "numa_node": 1},
                "hot-plugged device (0000:10:10.2): key 'numa_node': 1 is not a NUMA node "
                "number (0..0)",
            ),
            (
                {**NEW_VF, "vf": 1},
                "hot-plugged device (0000:10:10.2): key 'vf': unknown key; the keys are address, "
                "vendor_id, "
                "product_id, dev_type, parent_addr, numa_node, label, dev_id",
            ),
        ],
    )
    def test_a_bad_device_is_refused_and_nothing_changes(self, driver, device, reason):
        before = driver.get_available_resource("nic")
        with pytest.raises(exception.InvalidInventory) as raised:
            driver.hot_plug("nic", device)
        assert raised.value.message == f"Invalid inventory of node 'nic': {reason}"
        assert driver.get_available_resource("nic") == before

    def test_unplugging_a_pf_takes_its_vfs_along(self, driver):
        removed = driver.hot_unplug("nic", "0000:10:00.0")
        assert removed == ["0000:10:00.0", "0000:10:10.0", "0000:10:10.1"]
        assert addresses(driver, "nic") == ["0000:11:00.0", "0000:11:10.0", "0000:11:10.1"]

    def test_unplugging_a_vf_leaves_its_pf_and_siblings(self, driver):
        assert driver.hot_unplug("nic", "0000:10:10.1") == ["0000:10:10.1"]
        assert addresses(driver, "nic")[:2] == ["0000:10:00.0", "0000:10:10.0"]

    @pytest.mark.parametrize(
        "address, reason",
        [
            ("0000:12:00.0", "key 'address': no device 0000:12:00.0 on this node"),
            ("0000:12:00", "key 'address': expected the form dddd:bb:ss.f in '0000:12:00'"),
        ],
    )
    def test_unplugging_what_is_not_there_is_an_error(self, driver, address, reason):
        with pytest.raises(exception.InvalidInventory) as raised:
            driver.hot_unplug("nic", address)
        assert raised.value.kwargs["reason"] == f"hot-unplug: {reason}"
        assert len(addresses(driver, "nic")) == 6

    def test_a_device_unplugged_and_plugged_again(self, driver):
        driver.hot_unplug("nic", "0000:10:10.1")
        driver.hot_plug("nic", {**NEW_VF, "address": "0000:10:10.1"})
        assert "0000:10:10.1" in addresses(driver, "nic")


class TestReload:
    @pytest.fixture
    def files(self, tmp_path):
        """``node.json`` (node ``f``, one GPU) and ``rack.json`` (nodes ``r1``, ``r2``)."""
        node, rack = tmp_path / "node.json", tmp_path / "rack.json"
        node.write_text(json.dumps({"pci_devices": [gpu("0000:80:00.0")]}))
        rack.write_text(json.dumps({"nodes": {"r1": "gpus=1", "r2": "pfs=1"}}))
        return node, rack

    @pytest.fixture
    def driver(self, files):
        node, rack = files
        return SimulatedDriver.from_config([f"f={node}", str(rack), "s=gpus=1"])

    def test_a_file_node_takes_the_file_contents(self, driver, files):
        node, _ = files
        driver.hot_plug("f", gpu("0000:81:00.0"))
        node.write_text(json.dumps({"vcpus": 4, "pci_devices": [gpu("0000:82:00.0")]}))
        driver.reload()
        assert driver.get_available_resource("f")["vcpus"] == 4
        assert addresses(driver, "f") == ["0000:82:00.0"]

    def test_short_form_nodes_keep_their_hot_plugged_devices(self, driver):
        driver.hot_plug("s", gpu("0000:90:00.0"))
        driver.reload()
        assert addresses(driver, "s") == ["0000:80:00.0", "0000:90:00.0"]

    def test_nodes_come_and_go_with_a_multi_node_file(self, driver, files):
        _, rack = files
        driver.spawn("r2", GUEST, [])
        rack.write_text(json.dumps({"nodes": {"r1": "gpus=1", "r3": "gpus=2"}}))
        driver.reload()
        assert driver.get_available_nodes() == ["f", "r1", "r3", "s"]
        assert driver.list_instances("r3") == set()
        with pytest.raises(exception.ComputeNodeNotFound):
            driver.list_instances("r2")

    def test_a_bad_file_changes_nothing(self, driver, files):
        node, rack = files
        node.write_text(json.dumps({"pci_devices": []}))
        rack.write_text(json.dumps({"nodes": {"r1": "gpus=1", "r2": "pfs=x"}}))
        with pytest.raises(exception.InvalidInventory) as raised:
            driver.reload()
        assert raised.value.kwargs["reason"] == "node 'r2': key 'pfs': 'x' is not an integer"
        assert driver.get_available_nodes() == ["f", "r1", "r2", "s"]
        assert addresses(driver, "f") == ["0000:80:00.0"]

    def test_a_node_named_like_another_source_is_refused(self, driver, files):
        _, rack = files
        rack.write_text(json.dumps({"nodes": {"s": "gpus=3"}}))
        with pytest.raises(exception.InvalidInventory):
            driver.reload()
        assert addresses(driver, "s") == ["0000:80:00.0"]
        assert "r1" in driver.get_available_nodes()

    def test_guests_of_a_reloaded_node_stay(self, driver):
        driver.spawn("f", GUEST, ["0000:80:00.0"])
        driver.reload()
        assert driver.list_instances("f") == {GUEST}


def gpu(address):
    return {"address": address, "vendor_id": "10de", "product_id": "1eb8", "dev_type": "type-PCI"}


class TestGuests:
    def test_spawn_list_and_destroy(self, driver):
        driver.spawn("nic", GUEST, ["0000:10:10.0"])
        driver.spawn("nic", OTHER_GUEST, [])
        assert driver.list_instances("nic") == {GUEST, OTHER_GUEST}
        driver.destroy("nic", GUEST)
        assert driver.list_instances("nic") == {OTHER_GUEST}

    def test_destroy_is_idempotent(self, driver):
        driver.spawn("nic", GUEST, [])
        driver.destroy("nic", GUEST)
        driver.destroy("nic", GUEST)
        assert driver.list_instances("nic") == set()

    def test_list_instances_is_a_copy(self, driver):
        driver.spawn("nic", GUEST, [])
        driver.list_instances("nic").clear()
        assert driver.list_instances("nic") == {GUEST}

    def test_a_running_guest_cannot_be_spawned_again(self, driver):
        driver.spawn("nic", GUEST, [])
        with pytest.raises(exception.InstanceExists):
            driver.spawn("nic", GUEST, [])

    def test_a_device_the_node_lacks_is_refused(self, driver):
        with pytest.raises(exception.InvalidInput, match="node nic has no PCI device 0000:12"):
            driver.spawn("nic", GUEST, ["0000:12:00.0"])
        assert driver.list_instances("nic") == set()

    def test_a_device_goes_to_one_guest_until_that_guest_is_destroyed(self, driver):
        driver.spawn("nic", GUEST, ["0000:10:10.0"])
        with pytest.raises(exception.Conflict, match=f"passed through to guest {GUEST}"):
            driver.spawn("nic", OTHER_GUEST, ["0000:10:10.1", "0000:10:10.0".upper()])
        assert driver.list_instances("nic") == {GUEST}
        driver.destroy("nic", GUEST)
        driver.spawn("nic", OTHER_GUEST, ["0000:10:10.0"])

    def test_a_guest_outlives_the_unplugging_of_its_device(self, driver):
        driver.spawn("nic", GUEST, ["0000:10:10.0"])
        driver.hot_unplug("nic", "0000:10:00.0")
        assert driver.list_instances("nic") == {GUEST}

    def test_of_many_simultaneous_spawns_for_one_device_one_wins(self, driver):
        outcomes, start = [], threading.Barrier(16)

        def spawn(number):
            start.wait()
            try:
                driver.spawn("nic", f"guest-{number}", ["0000:10:10.0"])
                outcomes.append("spawned")
            except exception.Conflict:
                outcomes.append("refused")

        threads = [threading.Thread(target=spawn, args=(number,)) for number in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["refused"] * 15 + ["spawned"]
        assert len(driver.list_instances("nic")) == 1
