"""pcisim-status upgrade check as an operator runs it: the installed script, a config
file, a real database seeded (or broken) in this process.

Results and exit codes are oslo.upgradecheck's: Success 0, Warning 1, Failure 2.
"""

import json
import pathlib
import subprocess
import sys
import uuid

import pytest
import sqlalchemy as sa

from pcisim.db import api, engine, migration, models
from pcisim.objects.flavor import Flavor
from pcisim.objects.service import SERVICE_VERSION
from tests.functional import cli
from tests.unit.db import factories

STATUS = pathlib.Path(sys.executable).with_name("pcisim-status")
UNREACHABLE_URL = "mysql+pymysql://root@127.0.0.1:1/nothing"
SUCCESS, WARNING, FAILURE = 0, 1, 2


def _check(config):
    """Run ``upgrade check --json``; (exit code, {check name: (result, details)})."""
    result = subprocess.run(
        [str(STATUS), "--config-file", str(config), "upgrade", "check", "--json"],
        capture_output=True,
        text=True,
        timeout=cli.TIMEOUT,
        cwd=pathlib.Path(config).parent,
    )
    assert result.stdout, result.stderr
    checks = json.loads(result.stdout)["checks"]
    return result.returncode, {c["check"]: (c["result"], c["details"]) for c in checks}


@pytest.fixture
def config(db, tmp_path):
    return cli.write_config(tmp_path, db.url)


def _sql(statement):
    with engine.get_engine().begin() as connection:
        connection.execute(statement)


def _service(ctxt, host, binary, version):
    api.service_create(ctxt, {"host": host, "binary": binary, "version": version})


def test_a_current_consistent_database_passes_every_check(config, ctxt):
    factories.node_with_devices(ctxt, "0000:81:00.1", "0000:81:00.2")
    _service(ctxt, "ctl", "pcisim-conductor", SERVICE_VERSION)
    _service(ctxt, "host1", "pcisim-compute", SERVICE_VERSION)

    code, results = _check(config)

    assert code == SUCCESS
    assert {result for result, _ in results.values()} == {SUCCESS}


def test_a_row_blanked_by_sql_fails_the_identity_check_naming_it(config, ctxt):
    node = factories.node_with_devices(ctxt, "0000:81:00.1", "0000:81:00.2")
    devices = models.PciDevice.__table__
    _sql(sa.update(devices).where(devices.c.address == "0000:81:00.2").values(vendor_id=""))

    code, results = _check(config)

    assert code == FAILURE
    result, details = results["PCI devices with an identity"]
    assert result == FAILURE
    assert details.startswith(f"1 found: node {node.id} 0000:81:00.2 available.")


def test_a_device_held_by_an_archived_instance_is_a_warning_naming_it(config, ctxt):
    node = factories.compute_node(ctxt)
    gone = str(uuid.uuid4())
    factories.pci_device(ctxt, node.id, "0000:81:00.1", status="allocated", instance_uuid=gone)

    code, results = _check(config)

    assert code == WARNING
    result, details = results["PCI devices held by live instances"]
    assert result == WARNING
    assert details.startswith(f"1 found: node {node.id} 0000:81:00.1 allocated by {gone}.")
    assert results["PCI devices with an identity"][0] == SUCCESS


def test_a_service_newer_than_this_code_fails_the_version_check_naming_it(config, ctxt):
    _service(ctxt, "ctl", "pcisim-conductor", SERVICE_VERSION)
    _service(ctxt, "host1", "pcisim-compute", SERVICE_VERSION + 1)

    code, results = _check(config)

    assert code == FAILURE
    result, details = results["Service versions"]
    assert result == FAILURE
    assert details.startswith(f"pcisim-compute on host1 at service version {SERVICE_VERSION + 1}")


def test_a_compute_newer_than_every_conductor_is_a_warning_to_upgrade_them_first(config, ctxt):
    _service(ctxt, "ctl", "pcisim-conductor", None)  # it started before services said
    _service(ctxt, "host1", "pcisim-compute", SERVICE_VERSION)

    code, results = _check(config)

    assert code == WARNING
    result, details = results["Service versions"]
    assert result == WARNING and "Upgrade the conductors first" in details
    assert details.startswith(f"pcisim-compute on host1 at service version {SERVICE_VERSION}")


def test_a_schema_behind_the_code_fails_and_the_data_is_not_checked(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    migration.db_sync(sa.create_engine(url), revision="0002")

    code, results = _check(cli.write_config(tmp_path, url))

    assert code == FAILURE
    result, details = results["Database schema"]
    assert result == FAILURE and "pcisim-manage db sync" in details
    assert results["PCI devices with an identity"] == (
        WARNING,
        "Not checked: the database schema is not current.",
    )


def test_a_missing_sqlite_file_fails_the_schema_check_and_is_not_created(tmp_path):
    path = tmp_path / "missing.sqlite"

    code, results = _check(cli.write_config(tmp_path, f"sqlite:///{path}"))

    assert code == FAILURE
    assert results["Database schema"][0] == FAILURE
    assert not path.exists()


def test_an_unreachable_database_fails_the_schema_check_naming_it(tmp_path):
    code, results = _check(cli.write_config(tmp_path, UNREACHABLE_URL, max_retries=0))

    assert code == FAILURE
    result, details = results["Database schema"]
    assert result == FAILURE and "Cannot reach the database" in details


def _instance_keeping_a_flavor_copy(ctxt, version):
    copy = json.loads(
        Flavor(flavorid="f1", name="m1.gpu", memory_mb=512, vcpus=1, root_gb=1).to_json()
    )
    copy["pcisim_object.version"] = version
    instance_uuid = str(uuid.uuid4())
    api.instance_create(ctxt, {"uuid": instance_uuid}, extra={"flavor": json.dumps(copy)})
    return instance_uuid


def test_flavor_copies_this_code_can_load_pass_the_stored_objects_check(config, ctxt):
    _instance_keeping_a_flavor_copy(ctxt, Flavor.VERSION)
    factories.instance(ctxt)  # NOTE: its copy predates flavors as objects

    code, results = _check(config)

    assert (code, results["Stored object versions"]) == (SUCCESS, (SUCCESS, None))


def test_a_flavor_copy_stored_by_newer_code_fails_the_stored_objects_check_naming_it(config, ctxt):
    _instance_keeping_a_flavor_copy(ctxt, Flavor.VERSION)
    newer = _instance_keeping_a_flavor_copy(ctxt, "1.99")

    code, results = _check(config)

    assert code == FAILURE
    result, details = results["Stored object versions"]
    assert result == FAILURE
    assert details.startswith(f"1 found: instance {newer}'s Flavor 1.99.")
