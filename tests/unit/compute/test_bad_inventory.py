"""Values no database column can hold, and bad calls, refused by the simulated hypervisor.

``test_inventory.py`` and ``test_driver.py`` refuse malformed inventories, entries and
hot-plugs; this table adds what is well formed but too big to store (a resource past a
32-bit column, a label or node name past 255 characters) and the driver's other calls.
Every case goes through ``SimulatedDriver`` as the compute uses it, and a refused call
leaves the driver as it was.
"""

import json

import pytest

from pcisim import exception
from pcisim.compute.driver import SimulatedDriver

PF = {"address": "0000:10:00.0", "vendor_id": "8086", "product_id": "1521", "dev_type": "type-PF"}
GPU = {"address": "0000:80:00.0", "vendor_id": "10de", "product_id": "1eb8", "dev_type": "type-PCI"}
LONG_NAME = "n" * 256


def _file(tmp_path, node):
    path = tmp_path / "node.json"
    path.write_text(json.dumps(node))
    return f"n={path}"


# (case, [compute] inventory value or a function of tmp_path making one, what it says)
CONFIG_CASES = [
    ("vcpus past 32 bits", "n=gpus=1,vcpus=2147483648", "key 'vcpus': 2147483648 is above"),
    ("memory past 32 bits", "n=memory_mb=99999999999", "key 'memory_mb': 99999999999 is above"),
    (
        "local_gb past 32 bits in a file",
        lambda tmp_path: _file(tmp_path, {"local_gb": 2**31}),
        "key 'local_gb': 2147483648 is above 2147483647",
    ),
    (
        "a label of 256 characters",
        lambda tmp_path: _file(tmp_path, {"pci_devices": [{**GPU, "label": "x" * 256}]}),
        "key 'label': is 256 characters long, over 255",
    ),
    (
        "a dev_id of 256 characters",
        lambda tmp_path: _file(tmp_path, {"pci_devices": [{**GPU, "dev_id": "x" * 256}]}),
        "key 'dev_id': is 256 characters long, over 255",
    ),
    ("a node name of 256 characters", f"{LONG_NAME}=gpus=1", "is over 255 characters long"),
    (
        "a PF with a parent_addr",
        lambda tmp_path: _file(tmp_path, {"pci_devices": [{**PF, "parent_addr": PF["address"]}]}),
        "key 'parent_addr': only a type-VF or vdpa has one",
    ),
    (
        "a VF that is its own parent",
        lambda tmp_path: _file(
            tmp_path,
            {
                "pci_devices": [
                    {
                        **PF,
                        "address": "0000:10:10.0",
                        "dev_type": "type-VF",
                        "parent_addr": "0000:10:10.0",
                    }
                ]
            },
        ),
        "key 'parent_addr': is the device itself",
    ),
]


@pytest.mark.parametrize(
    ("value", "says"),
    [case[1:] for case in CONFIG_CASES],
    ids=[case[0] for case in CONFIG_CASES],
)
def test_an_inventory_no_database_could_store_is_refused_naming_the_key(tmp_path, value, says):
    value = value(tmp_path) if callable(value) else value

    with pytest.raises(exception.InvalidInventory) as raised:
        SimulatedDriver.from_config([value])

    assert says in raised.value.message


@pytest.fixture
def driver():
    return SimulatedDriver.from_config(["nic=pfs=1,vfs_per_pf=2"])


# (case, method, arguments, exception, what it says)
CALL_CASES = [
    (
        "hot-plug of a label of 256 characters",
        "hot_plug",
        ("nic", {**GPU, "label": "x" * 256}),
        exception.InvalidInventory,
        "key 'label': is 256 characters long",
    ),
    (
        "hot-plug of a list",
        "hot_plug",
        ("nic", [GPU]),
        exception.InvalidInventory,
        "hot-plugged device: a device is a mapping",
    ),
    (
        "hot-plug of an unknown dev_type",
        "hot_plug",
        ("nic", {**GPU, "dev_type": ["type-PCI"]}),
        exception.InvalidInventory,
        "key 'dev_type': ['type-PCI'] is not one of",
    ),
    (
        "hot-plug on an unknown node",
        "hot_plug",
        ("gpu", GPU),
        exception.ComputeNodeNotFound,
        "gpu",
    ),
    (
        "hot-unplug of a malformed address",
        "hot_unplug",
        ("nic", "0000:10:00"),
        exception.InvalidInventory,
        "key 'address': expected the form dddd:bb:ss.f",
    ),
    (
        "hot-unplug of a number",
        "hot_unplug",
        ("nic", 10),
        exception.InvalidInventory,
        "key 'address': 10 is not a string",
    ),
    (
        "spawn with a malformed address",
        "spawn",
        ("nic", "3c1f4b9e-0000-4000-8000-000000000001", ["0000:10:10"]),
        exception.InvalidPciAddress,
        "0000:10:10",
    ),
    (
        "spawn with an address not on the node",
        "spawn",
        ("nic", "3c1f4b9e-0000-4000-8000-000000000001", ["0000:80:00.0"]),
        exception.InvalidInput,
        "node nic has no PCI device 0000:80:00.0",
    ),
]


@pytest.mark.parametrize(
    ("method", "args", "raises", "says"),
    [case[1:] for case in CALL_CASES],
    ids=[case[0] for case in CALL_CASES],
)
def test_a_bad_call_is_refused_and_changes_nothing(driver, method, args, raises, says):
    before = driver.get_available_resource("nic"), driver.list_instances("nic")

    with pytest.raises(raises) as raised:
        getattr(driver, method)(*args)

    assert says in raised.value.message
    assert (driver.get_available_resource("nic"), driver.list_instances("nic")) == before
