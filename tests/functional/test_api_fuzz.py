"""schemathesis against /openapi.json: whatever it sends, the API never answers 5xx."""

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from pcisim import testing
from pcisim.compute.driver import SimulatedDriver
from pcisim.db import engine
from pcisim.pci.devspec import DeviceSpecList
from pcisim.pci.request import parse_aliases
from tests import backends


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory):
    scratch = backends.ScratchDatabase("sqlite", tmp_path_factory)
    reset = engine.context_manager.patch_factory(scratch.manager)
    drivers = {"host1": SimulatedDriver.from_config(["node1=gpus=1,pfs=1,vfs_per_pf=2"])}
    specs = DeviceSpecList.from_config(['{"vendor_id": "10de"}', '{"vendor_id": "8086"}'])
    aliases = parse_aliases(['{"name": "gpu", "vendor_id": "10de", "product_id": "1eb8"}'])
    with testing.ControlPlane(drivers, specs, aliases) as plane:
        yield schemathesis.openapi.from_wsgi("/openapi.json", plane.wsgi_app())
    reset()
    scratch.drop()


def _operations(schema):
    return [result.ok() for result in schema.get_all_operations()]


def test_no_request_gets_a_server_error(api_schema):
    operations = _operations(api_schema)
    assert len(operations) == 9
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), database=None
        )
        def no_server_error(case):
            case.call_and_validate(checks=[schemathesis.checks.not_a_server_error])

        no_server_error()
