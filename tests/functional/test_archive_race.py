"""Nova bug 1899541 reproduced on each delete path, and survived.

An operator's ``archive_deleted_rows`` runs in the window between an instance's soft
delete and the freeing of its PCI devices:

- ``normal_delete``: the compute deletes; the archive is injected at
  ``faults.AFTER_SOFT_DELETE`` in its delete handler;
- ``local_delete``: the compute is down, the API soft-deletes the instance and leaves
  its devices allocated; the archive runs before the compute comes back, whose
  periodic ``clean_usage`` must free them;
- ``crash_during_delete``: the compute's delete handler archives at
  ``faults.AFTER_SOFT_DELETE`` and dies there; the restarted compute must free them.

Each path runs once per backend (SQLite, and MariaDB as in CI) against a node with one
PF, its one VF and one GPU, so that the next boot of the same request needs exactly the
devices that were freed. The run records what happened (`Race`); each test checks one
promise of the design against that record.

pcisim's archive never takes a live device row, so those runs cannot show what the
compute does when a row is gone anyway. The ``lost_rows`` runs take the rows in the
window as Nova's archive did (moved to the shadow table by SQL, before pcisim's own
archive runs), to check the second line of defence: nothing is ever inserted in their
place with fields missing, nothing fails, and the devices come back whole.
"""

import dataclasses
import logging

import pytest
import sqlalchemy as sa

from pcisim import dbaccess, faults, testing
from pcisim.compute.driver import SimulatedDriver
from pcisim.db import engine, models
from pcisim.objects.instance import Instance
from pcisim.pci.devspec import DeviceSpecList
from pcisim.pci.request import parse_aliases
from tests import backends
from tests.functional import flows

PATHS = ("normal_delete", "local_delete", "crash_during_delete")
HOST, NODE = "race-host", "race-node"
INVENTORY = f"{NODE}=pfs=1,vfs_per_pf=1,gpus=1"
REQUEST = "vf:1,gpu:1"
SPECS = DeviceSpecList.from_config(['{"vendor_id": "8086"}', '{"vendor_id": "10de"}'])
ALIASES = parse_aliases(
    [
        '{"name": "vf", "vendor_id": "8086", "product_id": "1520", "device_type": "type-VF"}',
        '{"name": "gpu", "vendor_id": "10de", "product_id": "1eb8"}',
    ]
)
# NOTE: what pci.manager logs when clean_usage frees the devices of a vanished instance.
CLEAN_USAGE_MESSAGE = "no longer on this node"


@pytest.fixture(scope="session", params=["sqlite", "mysql"])
def database(request, tmp_path_factory):
    """SQLite, and MariaDB (required in CI): the backends the race is proven on."""
    scratch = backends.ScratchDatabase(request.param, tmp_path_factory)
    yield scratch
    scratch.drop()


class SimulatedCrash(Exception):
    """The compute dying inside its delete handler."""


class Records(logging.Handler):
    """Log records of every thread: errors of any logger, and pci.manager's INFO."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.errors = []
        self.crashes = []
        self.pci_info = []

    def emit(self, record):
        if record.levelno >= logging.ERROR:
            crashed = record.exc_info and isinstance(record.exc_info[1], SimulatedCrash)
            (self.crashes if crashed else self.errors).append(record)
        elif record.name == "pcisim.pci.manager":
            self.pci_info.append(record.getMessage())


@dataclasses.dataclass
class Race:
    """What one delete path, with an archive in its window, left behind."""

    path: str
    records: Records
    takes_device_rows: bool = False  # take the instance's device rows, as Nova did
    instance_uuid: str = None
    held: list = None  # addresses of the devices the instance held
    seen_by_archive: dict = None  # the instance and its devices when the archive ran
    archives: list = dataclasses.field(default_factory=list)  # every ArchiveResult
    identity_checks: int = 0
    missing_identity: list = dataclasses.field(default_factory=list)  # rows lacking one
    incomplete_inserts: list = dataclasses.field(default_factory=list)  # INSERTs lacking one
    tracker_saves: int = 0  # tracker saves that went through, from the delete on
    rows_before: list = None  # (id, address) of the live device rows
    rows_after: list = None
    devices_after: list = None
    pools_before: list = None
    pools_after: list = None
    next_boot: tuple = None  # (vm_state, addresses of its devices)

    def archive_in_window(self, plane):
        """Run the operator's archive, noting what it found still in place."""
        self.seen_by_archive = {
            "instance_soft_deleted": _soft_deleted(self.instance_uuid),
            "devices_held": _addresses(flows.devices(instance_uuid=self.instance_uuid)),
        }
        if self.takes_device_rows:
            _take_device_rows(self.instance_uuid)
        self.archives.append(plane.archive())
        self.check_identity()

    def check_identity(self, **details):
        """Look for device rows, live or shadow, lacking an identity field."""
        self.identity_checks += 1
        self.missing_identity += flows.rows_missing_identity()

    def after_tracker_save(self, **details):
        self.tracker_saves += 1
        self.check_identity()

    def watch_insert(self, conn, cursor, statement, parameters, context, executemany):
        """(SQLAlchemy ``before_cursor_execute``) note device INSERTs lacking identity."""
        insert = context.compiled.statement if getattr(context, "isinsert", False) else None
        if insert is None or insert.table.name != "pci_devices" or insert.select is not None:
            return
        for values in context.compiled_parameters:
            missing = [name for name in flows.IDENTITY if values.get(name) is None]
            if missing:
                self.incomplete_inserts.append({name: values.get(name) for name in missing})


def _soft_deleted(instance_uuid):
    table = models.Instance.__table__
    query = sa.select(table.c.deleted).where(table.c.uuid == instance_uuid)
    with dbaccess.granted(), engine.get_engine().connect() as connection:
        return connection.scalar(query) not in (None, 0)


def _take_device_rows(instance_uuid):
    """Move the live device rows naming the instance to the shadow table (Nova's bug)."""
    live, shadow = flows.DEVICES, flows.SHADOW_DEVICES
    naming = (live.c.instance_uuid == instance_uuid) & (live.c.deleted == 0)
    with dbaccess.granted(), engine.get_engine().begin() as connection:
        copy = sa.insert(shadow).from_select(live.c.keys(), sa.select(live).where(naming))
        connection.execute(copy)
        connection.execute(sa.delete(live).where(naming))


def _addresses(rows):
    return sorted(row["address"] for row in rows)


def _row_ids():
    return [(row["id"], row["address"]) for row in flows.devices()]


# ------------------------------------------------------------- the delete paths


def _normal_delete(plane, race, instance):
    saves_before = race.tracker_saves

    def freed_or_failed():
        return race.tracker_saves > saves_before or race.records.errors

    with faults.inject(faults.AFTER_SOFT_DELETE, lambda **_: race.archive_in_window(plane)):
        plane.api.delete(plane.context, instance)
        testing.wait_until(freed_or_failed, what="the compute's delete to free or fail")
    plane.run_periodic(HOST)


def _local_delete(plane, race, instance):
    plane.stop_compute(HOST, forced_down=True)
    plane.api.delete(plane.context, instance)
    race.archive_in_window(plane)
    plane.set_forced_down(HOST, False)
    plane.start_compute(HOST)
    plane.run_periodic(HOST)


def _crash_during_delete(plane, race, instance):
    def archive_and_crash(**_):
        race.archive_in_window(plane)
        raise SimulatedCrash(f"compute {HOST} dies deleting {instance.uuid}")

    with faults.inject(faults.AFTER_SOFT_DELETE, archive_and_crash):
        plane.api.delete(plane.context, instance)
        testing.wait_until(lambda: race.records.crashes, what="the compute to crash")
    plane.restart_compute(HOST)
    plane.run_periodic(HOST)


DELETE_PATHS = {
    "normal_delete": _normal_delete,
    "local_delete": _local_delete,
    "crash_during_delete": _crash_during_delete,
}


def _run(plane, race):
    """Boot, delete on the race's path with the archive in the window, boot again."""
    race.pools_before = flows.pools(plane, HOST, NODE)
    race.instance_uuid, state = flows.boot(plane, REQUEST)
    assert state == "active", "the first boot must succeed for the race to be run"
    race.held = _addresses(flows.devices(instance_uuid=race.instance_uuid))
    race.rows_before = _row_ids()
    instance = Instance.get_by_uuid(plane.context, race.instance_uuid)
    with (
        faults.inject(faults.BEFORE_TRACKER_SAVE, race.check_identity),
        faults.inject(faults.AFTER_TRACKER_SAVE, race.after_tracker_save),
    ):
        DELETE_PATHS[race.path](plane, race, instance)
        race.rows_after = _row_ids()
        race.devices_after = flows.devices()
        race.pools_after = flows.pools(plane, HOST, NODE)
        next_uuid, state = flows.boot(plane, REQUEST)
        race.next_boot = (state, _addresses(flows.devices(instance_uuid=next_uuid)))
        race.archives.append(plane.archive())
    race.check_identity()


def _race(database, path, takes_device_rows=False):
    """Run one delete path on an empty database, recording logs and device INSERTs."""
    database.empty()
    reset = engine.context_manager.patch_factory(database.manager)
    race = Race(path, Records(), takes_device_rows)
    db_engine = database.manager.writer.get_engine()
    pci_logger, root = logging.getLogger("pcisim.pci.manager"), logging.getLogger()
    level = pci_logger.level
    root.addHandler(race.records)
    pci_logger.setLevel(logging.INFO)
    sa.event.listen(db_engine, "before_cursor_execute", race.watch_insert)
    try:
        drivers = {HOST: SimulatedDriver.from_config([INVENTORY])}
        with testing.ControlPlane(drivers, SPECS, ALIASES) as plane:
            _run(plane, race)
            root.removeHandler(race.records)  # what stopping logs is no part of the race
    finally:
        sa.event.remove(db_engine, "before_cursor_execute", race.watch_insert)
        root.removeHandler(race.records)
        pci_logger.setLevel(level)
        reset()
    return race


@pytest.fixture(scope="module", params=PATHS)
def race(request, database):
    """A delete path with pcisim's archive in its window."""
    return _race(database, request.param)


@pytest.fixture(scope="module", params=PATHS)
def lost_rows(request, database):
    """A delete path whose device rows are taken in its window, as Nova's archive did."""
    return _race(database, request.param, takes_device_rows=True)


def _errors(race):
    return [f"{record.name}: {record.getMessage()}" for record in race.records.errors]


def _statuses(race):
    return [(device["status"], device["instance_uuid"]) for device in race.devices_after]


# ------------------------------------------------------------------ the promises


def test_the_archive_runs_after_the_soft_delete_and_before_the_devices_are_freed(race):
    assert race.seen_by_archive == {"instance_soft_deleted": True, "devices_held": race.held}
    assert race.archives[0].instance_uuids == [race.instance_uuid]


def test_the_simulated_crash_is_the_only_failure_of_the_delete_handler(race):
    expected = 1 if race.path == "crash_during_delete" else 0
    crashed_in = [record.name for record in race.records.crashes]
    assert crashed_in == ["oslo_messaging.rpc.server"] * expected


def test_no_exception_escapes_the_compute_delete_or_periodic_task(race):
    assert _errors(race) == []


def test_no_device_row_is_ever_inserted_without_its_identity(race):
    assert race.incomplete_inserts == []


def test_no_device_row_ever_lacks_an_identity_field(race):
    assert race.identity_checks > 2
    assert race.missing_identity == []


def test_the_number_of_live_device_rows_does_not_change(race):
    assert len(race.rows_after) == len(race.rows_before)


def test_every_device_keeps_its_row(race):
    assert race.rows_after == race.rows_before


def test_the_devices_end_available_and_held_by_no_instance(race):
    assert _statuses(race) == [("available", None)] * len(race.rows_before)


def test_the_published_pools_count_the_devices_free_again(race):
    assert race.pools_after == race.pools_before


def test_the_compute_frees_the_devices_on_the_path_it_should(race):
    freed_by_clean_usage = any(
        CLEAN_USAGE_MESSAGE in message and race.instance_uuid in message
        for message in race.records.pci_info
    )
    assert freed_by_clean_usage == (race.path != "normal_delete")


def test_the_next_boot_is_given_the_freed_devices(race):
    assert race.next_boot == ("active", race.held)


def test_no_archive_lists_pci_devices(race):
    assert [result.rows for result in race.archives if "pci_devices" in result.rows] == []


# ------------------------------------------ rows taken anyway: the second defence


def test_rows_taken_in_the_window_fail_no_delete_or_periodic_task(lost_rows):
    assert lost_rows.seen_by_archive["devices_held"] == lost_rows.held
    assert _errors(lost_rows) == []


def test_rows_taken_in_the_window_are_never_reinserted_without_their_identity(lost_rows):
    assert lost_rows.incomplete_inserts == []
    assert lost_rows.missing_identity == []


def test_rows_taken_in_the_window_are_created_again_within_one_periodic_run(lost_rows):
    after = [address for _, address in lost_rows.rows_after]
    assert after == [address for _, address in lost_rows.rows_before]


def test_devices_whose_rows_were_taken_end_available(lost_rows):
    assert _statuses(lost_rows) == [("available", None)] * len(lost_rows.rows_before)


def test_devices_whose_rows_were_taken_are_counted_free_in_the_pools(lost_rows):
    assert lost_rows.pools_after == lost_rows.pools_before


def test_the_next_boot_is_given_the_devices_whose_rows_were_taken(lost_rows):
    assert lost_rows.next_boot == ("active", lost_rows.held)
