"""pcisim-manage as an operator runs it: the installed script, a config file, a real database.

Rows are seeded in this process through the DB API; the command runs in a subprocess
against the same database. Behaviour that depends on the database (what archiving and
purging move or delete) runs on every backend of the ``db`` fixture; argument checking,
which never reaches SQL, runs once, on an SQLite file of this module's own.
"""

import datetime
import signal
import time

import pytest
import sqlalchemy as sa

from pcisim.db import api, archive, engine, migration, models
from tests import backends
from tests.functional import cli
from tests.unit.db import factories

# The tables of an instance's tree, one row each in ``_deleted_instance``.
INSTANCE_TREE = (
    "instances",
    "instance_extra",
    "instance_actions",
    "instance_actions_events",
    "instance_faults",
)
OLD, MIDDLE = datetime.datetime(2020, 1, 1), datetime.datetime(2020, 6, 1)
BETWEEN = "2020-03-01"
UNREACHABLE_URL = "mysql+pymysql://root@127.0.0.1:1/nothing"


# ------------------------------------------------------------------------ fixtures


# NOTE: not named ``config``: that would shadow conftest's autouse ``config`` fixture and,
# through ``db``, run every test of this module on every backend.
@pytest.fixture
def db_config(db, tmp_path):
    """A config file pointing pcisim-manage at the ``db`` fixture's database."""
    return cli.write_config(tmp_path, db.url)


@pytest.fixture(scope="module")
def _module_sqlite(tmp_path_factory):
    scratch = backends.ScratchDatabase("sqlite", tmp_path_factory)
    yield scratch
    scratch.drop()


@pytest.fixture
def sqlite_db(_module_sqlite):
    """An emptied, migrated SQLite database, the DB API pointed at it."""
    _module_sqlite.empty()
    reset = engine.context_manager.patch_factory(_module_sqlite.manager)
    yield _module_sqlite
    reset()


@pytest.fixture
def sqlite_config(sqlite_db, tmp_path):
    return cli.write_config(tmp_path, sqlite_db.url)


@pytest.fixture
def fresh_config(tmp_path):
    """A config file naming an SQLite file that does not exist yet."""
    return cli.write_config(tmp_path, f"sqlite:///{tmp_path / 'fresh.sqlite'}")


@pytest.fixture
def node(ctxt):
    return factories.compute_node(ctxt)


# ------------------------------------------------------------------------- helpers


def _address(index):
    """A distinct, well-formed PCI address for each index below 8192."""
    return f"0000:{0x81 + index // 256:02x}:{index % 256 // 8:02x}.{index % 8}"


def _deleted_instance(ctxt):
    """A soft-deleted instance owning one row in each of the other INSTANCE_TREE tables."""
    instance = factories.instance_with_history(ctxt)
    api.instance_destroy(ctxt, instance.uuid)
    return instance


def _deleted_devices(ctxt, node_id, count, start=0):
    addresses = [_address(index) for index in range(start, start + count)]
    api.pci_device_batch_save(
        ctxt, node_id, create=[factories.pci_values(node_id, address) for address in addresses]
    )
    api.pci_device_batch_save(ctxt, node_id, destroy=addresses)
    return addresses


def _deleted_devices_at(ctxt, node_id, deleted_at):
    """Soft-deleted devices, each deleted at its time of ``deleted_at``: {address: when}."""
    addresses = _deleted_devices(ctxt, node_id, len(deleted_at))
    table = models.PciDevice.__table__
    with engine.get_engine().begin() as connection:
        for address, when in zip(addresses, deleted_at, strict=True):
            connection.execute(
                table.update().where(table.c.address == address).values(deleted_at=when)
            )
    return addresses


def _rows_per_table():
    """Rows in each live and shadow table that has any."""
    with engine.get_engine().connect() as connection:
        counts = {
            table.name: connection.scalar(sa.select(sa.func.count()).select_from(table))
            for table in models.Base.metadata.sorted_tables
        }
    return {name: count for name, count in counts.items() if count}


def _ids(table):
    with engine.get_engine().connect() as connection:
        return list(connection.scalars(sa.select(table.c.id)))


def _shadow_addresses():
    shadow = models.shadow_of(models.PciDevice.__table__)
    with engine.get_engine().connect() as connection:
        return sorted(connection.scalars(sa.select(shadow.c.address)))


def _archive_in_process(ctxt):
    """Fill the shadow tables the way a previous archive run would have."""
    assert archive.archive_deleted_rows(ctxt, max_rows=10_000).total


# ------------------------------------------------------------------ db sync/version


def test_db_version_of_a_fresh_database_prints_none(fresh_config):
    result = cli.run(fresh_config, "db", "version")

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("None ")


def test_db_sync_creates_every_table_and_prints_the_revision(fresh_config, tmp_path):
    result = cli.run(fresh_config, "db", "sync")

    assert result.returncode == 0, result.stderr
    assert migration.head_revision() in result.stdout
    created = sa.create_engine(f"sqlite:///{tmp_path / 'fresh.sqlite'}")
    try:
        tables = set(sa.inspect(created).get_table_names())
    finally:
        created.dispose()
    assert tables == set(models.Base.metadata.tables) | {"alembic_version"}


def test_db_version_after_sync_prints_the_head_revision(fresh_config):
    assert cli.run(fresh_config, "db", "sync").returncode == 0

    result = cli.run(fresh_config, "db", "version")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == migration.head_revision()


def test_db_version_names_the_database_it_read_on_stderr(fresh_config, tmp_path):
    result = cli.run(fresh_config, "db", "version")

    assert result.returncode == 0, result.stderr
    assert f"sqlite:///{tmp_path / 'fresh.sqlite'}" in result.stderr


def test_db_sync_prints_no_python_warnings(fresh_config):
    result = cli.run(fresh_config, "db", "sync")

    assert result.returncode == 0, result.stderr
    assert "Warning:" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [("db", "version"), ("db", "archive_deleted_rows"), ("db", "purge", "--all")],
    ids=["version", "archive", "purge"],
)
def test_only_db_sync_creates_a_missing_state_path(tmp_path, args):
    state = tmp_path / "state"
    config_file = cli.write_config(tmp_path, text=f"[DEFAULT]\nstate_path = {state}\n")

    cli.run(config_file, *args)

    assert not state.exists()


@pytest.mark.parametrize("args", [("archive_deleted_rows",), ("purge", "--all")])
def test_archive_and_purge_of_a_missing_database_exit_255_telling_to_run_db_sync(
    fresh_config, tmp_path, args
):
    result = cli.run(fresh_config, "db", *args)

    assert result.returncode == 255
    assert "missing" in result.stderr and "pcisim-manage db sync" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "fresh.sqlite").exists()


@pytest.mark.parametrize("args", [("archive_deleted_rows",), ("purge", "--all")])
def test_archive_and_purge_of_an_unmigrated_database_exit_255_telling_to_run_db_sync(
    fresh_config, tmp_path, args
):
    sa.create_engine(f"sqlite:///{tmp_path / 'fresh.sqlite'}").connect().close()

    result = cli.run(fresh_config, "db", *args)

    assert result.returncode == 255
    assert "not migrated" in result.stderr and "pcisim-manage db sync" in result.stderr
    assert "Traceback" not in result.stderr


def test_db_sync_without_a_connection_creates_the_sqlite_file_in_state_path(tmp_path):
    config_file = cli.write_config(tmp_path)

    result = cli.run(config_file, "db", "sync")

    assert result.returncode == 0, result.stderr
    assert (tmp_path / "pcisim.sqlite").is_file()


# ------------------------------------------------------------- archive_deleted_rows


def test_archive_with_nothing_deleted_exits_0_and_says_so(sqlite_config, ctxt, node):
    factories.instance_with_history(ctxt)
    factories.pci_device(ctxt, node.id)
    before = _rows_per_table()

    result = cli.run(sqlite_config, "db", "archive_deleted_rows", "--verbose")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Nothing was archived."
    assert _rows_per_table() == before


def test_archive_exits_1_and_prints_rows_archived_per_table(db_config, ctxt, node):
    _deleted_instance(ctxt)
    _deleted_devices(ctxt, node.id, 2)

    result = cli.run(db_config, "db", "archive_deleted_rows", "--verbose")

    assert result.returncode == 1, result.stderr
    assert cli.archived_counts(result.stdout) == {
        **dict.fromkeys(INSTANCE_TREE, 1),
        "pci_devices": 2,
    }


def test_archive_moves_only_deleted_trees_to_the_shadow_tables(db_config, ctxt, node):
    factories.instance_with_history(ctxt)
    _deleted_instance(ctxt)
    factories.pci_device(ctxt, node.id, _address(0))
    _deleted_devices(ctxt, node.id, 1, start=1)

    result = cli.run(db_config, "db", "archive_deleted_rows")

    assert result.returncode == 1, result.stderr
    assert _rows_per_table() == {
        "compute_nodes": 1,
        "pci_devices": 1,
        **dict.fromkeys(INSTANCE_TREE, 1),
        **{models.SHADOW_PREFIX + name: 1 for name in INSTANCE_TREE},
        "shadow_pci_devices": 1,
    }
    assert _shadow_addresses() == [_address(1)]


@pytest.mark.parametrize("spelling", ["--max_rows", "--max-rows"])
def test_archive_stops_at_max_rows(sqlite_config, ctxt, node, spelling):
    _deleted_devices(ctxt, node.id, 3)

    result = cli.run(sqlite_config, "db", "archive_deleted_rows", spelling, "2")

    assert result.returncode == 1, result.stderr
    assert _rows_per_table() == {"compute_nodes": 1, "pci_devices": 1, "shadow_pci_devices": 2}


@pytest.mark.parametrize("max_rows", ["0", "-5", "abc", "2147483648", "1" * 30])
def test_archive_rejects_an_invalid_max_rows(sqlite_config, ctxt, node, max_rows):
    _deleted_devices(ctxt, node.id, 1)
    before = _rows_per_table()

    result = cli.run(sqlite_config, "db", "archive_deleted_rows", "--max_rows", max_rows)

    assert result.returncode == 2
    assert "--max_rows" in result.stderr
    assert repr(max_rows) in result.stderr
    assert _rows_per_table() == before


def test_archive_rejects_an_unparsable_before_date(sqlite_config, ctxt, node):
    _deleted_devices(ctxt, node.id, 1)
    before = _rows_per_table()

    result = cli.run(sqlite_config, "db", "archive_deleted_rows", "--before", "yesterdayish")

    assert result.returncode == 4
    assert "yesterdayish" in result.stderr
    assert _rows_per_table() == before


def test_archive_before_a_date_moves_only_rows_deleted_earlier(db_config, ctxt, node):
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    old, _, _ = _deleted_devices_at(ctxt, node.id, [OLD, MIDDLE, now])

    result = cli.run(db_config, "db", "archive_deleted_rows", "--before", BETWEEN)

    assert result.returncode == 1, result.stderr
    assert _shadow_addresses() == [old]
    assert _rows_per_table()["pci_devices"] == 2


def test_archive_before_a_date_with_an_offset_compares_in_utc(sqlite_config, ctxt, node):
    early, _ = _deleted_devices_at(
        ctxt, node.id, [datetime.datetime(2020, 1, 1, 0, 30), datetime.datetime(2020, 1, 1, 2, 30)]
    )

    # 03:00 at UTC+2 is 01:00 UTC: between the two deletions.
    before = "2020-01-01T03:00+02:00"
    result = cli.run(sqlite_config, "db", "archive_deleted_rows", "--before", before)

    assert result.returncode == 1, result.stderr
    assert _shadow_addresses() == [early]


def test_archive_until_complete_moves_everything_in_batches(db_config, ctxt, node):
    _deleted_devices(ctxt, node.id, 5)

    result = cli.run(
        db_config, "db", "archive_deleted_rows", "--max_rows", "2", "--until-complete", "--verbose"
    )

    assert result.returncode == 1, result.stderr
    assert cli.archived_counts(result.stdout) == {"pci_devices": 5}
    assert _rows_per_table() == {"compute_nodes": 1, "shadow_pci_devices": 5}


def test_archive_with_purge_leaves_the_shadow_tables_empty(db_config, ctxt, node):
    _deleted_instance(ctxt)
    _archive_in_process(ctxt)
    _deleted_instance(ctxt)
    _deleted_devices(ctxt, node.id, 1)

    result = cli.run(db_config, "db", "archive_deleted_rows", "--purge")

    assert result.returncode == 1, result.stderr
    assert _rows_per_table() == {"compute_nodes": 1}


def test_archive_without_verbose_prints_nothing(sqlite_config, ctxt, node):
    _deleted_instance(ctxt)
    _deleted_devices(ctxt, node.id, 1)

    result = cli.run(sqlite_config, "db", "archive_deleted_rows")

    assert result.returncode == 1, result.stderr
    assert result.stdout == ""


def test_archive_keeps_a_device_allocated_to_a_deleted_instance(db_config, ctxt, node):
    """The point of the project: nova bug 1899541 archived such rows."""
    instance = factories.instance(ctxt)
    factories.pci_device(ctxt, node.id, _address(0))
    api.pci_device_update(
        ctxt, node.id, _address(0), {"status": "allocated", "instance_uuid": instance.uuid}
    )
    api.instance_destroy(ctxt, instance.uuid)

    result = cli.run(db_config, "db", "archive_deleted_rows")

    assert result.returncode == 1, result.stderr
    device = api.pci_device_get_by_addr(ctxt, node.id, _address(0))
    assert (device.status, device.instance_uuid) == ("allocated", instance.uuid)
    assert _shadow_addresses() == []
    assert _rows_per_table()["shadow_instances"] == 1


def test_archive_of_an_unreachable_database_exits_3_naming_it(tmp_path):
    config_file = cli.write_config(tmp_path, UNREACHABLE_URL, max_retries=1, retry_interval=0)

    result = cli.run(config_file, "db", "archive_deleted_rows")

    assert result.returncode == 3
    assert UNREACHABLE_URL in result.stderr
    assert result.stdout == ""


def test_archive_until_complete_stops_cleanly_on_sigint(sqlite_config, ctxt, node):
    seeded, batch = 3000, 50
    table = models.PciDevice.__table__
    with engine.get_engine().begin() as connection:
        connection.execute(
            table.insert(),
            [
                {
                    **factories.pci_values(node.id, _address(index)),
                    "deleted": index + 1,
                    "deleted_at": OLD,
                }
                for index in range(seeded)
            ],
        )
    seeded_ids = set(_ids(table))
    shadow = models.shadow_of(table)

    process = cli.start(
        sqlite_config,
        *("db", "archive_deleted_rows", "--until-complete", "--verbose"),
        *("--max_rows", batch, "--sleep", "0.2"),
    )
    try:
        _wait_for_rows(shadow, process)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=cli.TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()

    assert process.returncode == 1, stderr
    assert "Interrupted" in stderr
    live_ids, shadow_ids = set(_ids(table)), set(_ids(shadow))
    assert 0 < len(shadow_ids) < seeded
    assert len(shadow_ids) % batch == 0
    assert live_ids.isdisjoint(shadow_ids)
    assert live_ids | shadow_ids == seeded_ids
    assert cli.archived_counts(stdout) == {"pci_devices": len(shadow_ids)}


def _wait_for_rows(table, process, timeout=30):
    """Wait until ``table`` has rows, so that the command is surely past its start-up."""
    deadline = time.monotonic() + timeout
    while not _ids(table):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"nothing reached {table.name} in {timeout} s"
        time.sleep(0.05)


# ---------------------------------------------------------------- configuration file


def test_missing_config_file_exits_2_naming_it(tmp_path):
    missing = tmp_path / "absent.conf"

    result = cli.run(missing, "db", "version")

    assert result.returncode == 2
    assert str(missing) in result.stderr


def test_malformed_config_file_exits_2_naming_the_line(tmp_path):
    config_file = cli.write_config(tmp_path, text="[DEFAULT]\nthis line has no equals sign\n")

    result = cli.run(config_file, "db", "version")

    assert result.returncode == 2
    assert "this line has no equals sign" in result.stderr
    assert str(config_file) in result.stderr


# --------------------------------------------------------------------------- purge


def test_purge_without_all_or_before_exits_1(sqlite_config):
    result = cli.run(sqlite_config, "db", "purge")

    assert result.returncode == 1
    assert "--all" in result.stderr and "--before" in result.stderr


def test_purge_with_both_all_and_before_exits_1(sqlite_config, ctxt):
    _deleted_instance(ctxt)
    _archive_in_process(ctxt)
    before = _rows_per_table()

    result = cli.run(sqlite_config, "db", "purge", "--all", "--before", BETWEEN)

    assert result.returncode == 1
    assert _rows_per_table() == before


def test_purge_rejects_an_unparsable_before_date(sqlite_config, ctxt):
    _deleted_instance(ctxt)
    _archive_in_process(ctxt)
    before = _rows_per_table()

    result = cli.run(sqlite_config, "db", "purge", "--before", "yesterdayish")

    assert result.returncode == 2
    assert "yesterdayish" in result.stderr
    assert _rows_per_table() == before


def test_purge_with_nothing_to_purge_exits_3(sqlite_config, ctxt, node):
    _deleted_devices(ctxt, node.id, 1)
    before = _rows_per_table()

    result = cli.run(sqlite_config, "db", "purge", "--all")

    assert result.returncode == 3, result.stderr
    assert _rows_per_table() == before


def test_purge_all_empties_the_shadow_tables(db_config, ctxt, node):
    _deleted_instance(ctxt)
    _deleted_devices(ctxt, node.id, 2)
    _archive_in_process(ctxt)
    _deleted_devices(ctxt, node.id, 1, start=2)

    result = cli.run(db_config, "db", "purge", "--all")

    assert result.returncode == 0, result.stderr
    assert _rows_per_table() == {"compute_nodes": 1, "pci_devices": 1}


def test_purge_before_a_date_deletes_only_older_shadow_rows(db_config, ctxt, node):
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    _, middle, recent = _deleted_devices_at(ctxt, node.id, [OLD, MIDDLE, now])
    _archive_in_process(ctxt)

    result = cli.run(db_config, "db", "purge", "--before", BETWEEN)

    assert result.returncode == 0, result.stderr
    assert _shadow_addresses() == sorted([middle, recent])


def test_purge_verbose_prints_rows_deleted_per_table(sqlite_config, ctxt, node):
    _deleted_instance(ctxt)
    _deleted_devices(ctxt, node.id, 2)
    _archive_in_process(ctxt)

    result = cli.run(sqlite_config, "db", "purge", "--all", "--verbose")

    assert result.returncode == 0, result.stderr
    expected = {models.SHADOW_PREFIX + name: 1 for name in INSTANCE_TREE}
    expected["shadow_pci_devices"] = 2
    assert result.stdout.splitlines() == [
        f"Deleted {count} rows from {table}" for table, count in sorted(expected.items())
    ]


# ----------------------------------------------------------- errors that once escaped


def test_archive_rejects_a_before_date_out_of_range_in_utc(sqlite_config, ctxt, node):
    _deleted_devices(ctxt, node.id, 1)
    before = _rows_per_table()

    # A valid date at UTC-5 that is in year 10000 once converted to UTC.
    date = "9999-12-31T23:59:59-05:00"
    result = cli.run(sqlite_config, "db", "archive_deleted_rows", "--before", date)

    assert result.returncode == 4, result.stderr
    assert date in result.stderr
    assert _rows_per_table() == before


def test_purge_rejects_a_before_date_out_of_range_in_utc(sqlite_config, ctxt):
    _deleted_instance(ctxt)
    _archive_in_process(ctxt)

    # A valid date at UTC+5 that is in year 0 once converted to UTC.
    date = "0001-01-01T00:00+05:00"
    result = cli.run(sqlite_config, "db", "purge", "--before", date)

    assert result.returncode == 2, result.stderr
    assert date in result.stderr


def test_archive_failing_unexpectedly_does_not_claim_rows_were_archived(tmp_path):
    # A reachable database without the schema: the first SELECT fails.
    config_file = cli.write_config(tmp_path, f"sqlite:///{tmp_path / 'unmigrated.sqlite'}")

    result = cli.run(config_file, "db", "archive_deleted_rows")

    assert result.returncode not in (0, 1), result.stderr


def test_purge_of_an_unreachable_database_does_not_claim_nothing_was_purged(tmp_path):
    config_file = cli.write_config(tmp_path, UNREACHABLE_URL, max_retries=1, retry_interval=0)

    result = cli.run(config_file, "db", "purge", "--all")

    assert UNREACHABLE_URL in result.stderr
    assert result.returncode not in (0, 3)


def test_archive_rejects_a_negative_sleep_before_archiving(sqlite_config, ctxt, node):
    _deleted_devices(ctxt, node.id, 3)
    before = _rows_per_table()

    result = cli.run(
        sqlite_config,
        *("db", "archive_deleted_rows", "--until-complete", "--max_rows", "1", "--sleep", "-1"),
    )

    assert result.returncode not in (0, 1), result.stderr
    assert "--sleep" in result.stderr
    assert _rows_per_table() == before
