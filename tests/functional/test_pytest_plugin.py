"""The control_plane fixture that pcisim's pytest plugin gives its users."""

pytest_plugins = ["pytester"]

EXAMPLE = """
from pcisim import faults


def test_a_gpu_is_allocated_and_freed(control_plane):
    plane = control_plane
    instance_uuid, state = plane.boot("vm", pci_requests="gpu:1")
    assert state == "active"
    archived = []
    with faults.inject(faults.AFTER_SOFT_DELETE, lambda **d: archived.append(plane.archive())):
        plane.delete(instance_uuid)
    assert archived[0].instance_uuids == [instance_uuid]
    assert "pci_devices" not in archived[0].rows
"""


def test_a_user_test_runs_against_the_control_plane_fixture(pytester):
    pytester.makepyfile(EXAMPLE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
