"""Random sequences of boots, deletes, archives, periodic runs, hot (un)plugs and
restarts keep every invariant of the design (``tests/functional/pci_machine.py``),
and what the machine found, replayed as plain tests.

``make test`` runs a bounded number of examples on one shared control plane, always
the same ones (``derandomize``: the tree is shared by many hands, and a failure must
come from the change under test); ``make soak`` (``python -m tests.soak``) explores
afresh for as long as it is given and prints what it did.
"""

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from pcisim import testing
from pcisim.compute.driver import SimulatedDriver
from pcisim.pci.devspec import DeviceSpecList
from pcisim.pci.request import parse_aliases
from tests import backends
from tests.functional import flows, pci_machine

CI_SETTINGS = settings(
    max_examples=30,
    stateful_step_count=20,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    scratch = backends.ScratchDatabase("sqlite", tmp_path_factory)
    yield scratch
    scratch.drop()


@pytest.fixture(scope="module")
def harness(database, config):
    harness = pci_machine.Harness(database).start()
    yield harness
    harness.stop()


@pytest.mark.slow
def test_random_sequences_of_flows_and_faults_keep_every_invariant(harness):
    pci_machine.PciMachine.harness = harness
    run_state_machine_as_test(pci_machine.PciMachine, settings=CI_SETTINGS)


# ------------------------------------------------------------ what it found

NIC = "nic-node=pfs=1,vfs_per_pf=2"
VF = "0000:10:10.1"


@pytest.fixture
def nic(db):
    """One node with one PF and its two VFs."""
    driver = SimulatedDriver.from_config([NIC])
    specs = DeviceSpecList.from_config(pci_machine.SPECS)
    with testing.ControlPlane(
        {"nic-host": driver}, specs, parse_aliases(pci_machine.ALIASES)
    ) as plane:
        yield plane, driver


def test_a_vf_plugged_back_while_its_pf_is_allocated_is_unavailable(nic):
    plane, driver = nic
    (entry,) = [
        d for d in driver.get_available_resource("nic-node")["pci_devices"] if d["address"] == VF
    ]
    driver.hot_unplug("nic-node", VF)
    plane.run_periodic()
    assert plane.boot("pf-vm", "pf:1")[1] == "active"
    driver.hot_plug("nic-node", entry)
    plane.run_periodic()
    assert [row["status"] for row in flows.devices(address=VF)] == ["unavailable"]
    assert plane.boot("vf-vm", "vf:1")[1] == "error"  # no VF is free: its PF is passed through
