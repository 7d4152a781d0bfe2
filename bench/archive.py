"""Archive: ``archive_deleted_rows`` until complete, against the raw-SQL limit.

Data, inserted in bulk (SQLAlchemy core executemany) into a fresh database per
measurement: N soft-deleted instances, each owning an instance_extra row, two actions
(create, delete) with one event each, and every tenth a fault (6.1 rows per instance);
N/10 live instances with the same rows, interleaved with the deleted ones, which stay;
a compute node with 1,024 live PCI devices, half of them allocated to instances
deleted and live alike, which stay (Nova bug 1899541); and 64 soft-deleted devices,
which move.

Measured, each in a subprocess of its own so that peak memories are separable:

  archive   ``db.archive.archive_deleted_rows(ctxt, max_rows=M)`` called until it
            returns nothing, as ``pcisim-manage db archive_deleted_rows --until-complete``
  raw SQL   the same rows moved by one INSERT INTO shadow_x SELECT and one DELETE per
            table, parents copied first and deleted last, in one transaction: the
            least work any archiver of this data can do through SQL

Throughput is rows moved per second of wall time; the goal of issue 7 is archive at
least half the raw-SQL rate. On SQLite the same ratio is also given in CPU seconds of
the subprocess, which hold still on a busy machine (the database works in-process).
Memory is the subprocess's peak RSS during the measurement (VmHWM, reset before it
starts), and its growth over the RSS it had before; the archive runs at N/10, 3N/10
and N instances show whether it grows with the rows (goal: it does not). After every
measurement the live and shadow tables are counted against what had to move.

Backends: a SQLite file, and MariaDB on 127.0.0.1 when reachable (a database created
for each measurement and dropped after it).

    python -m bench.archive [--quick] [--instances N] [--max-rows M]
"""

import argparse
import contextlib
import datetime
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import sqlalchemy as sa
from oslo_db.sqlalchemy import enginefacade

from bench import harness
from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim.db import archive as db_archive
from pcisim.db import engine as db_engine
from pcisim.db import migration, models

MYSQL_SERVER = "mysql+pymysql://root@127.0.0.1:3306"
CHUNK = 5000
DEVICES = 1024
DELETED_DEVICES = 64
DELETED_AT = datetime.datetime(2024, 1, 1)
LIVE_EVERY = 11
T = {table.name: table for table in models.LIVE_TABLES}


# ------------------------------------------------------------------ data


def _instance_rows(first, count):
    """Instances ``first`` to ``first + count - 1``: every eleventh live, the rest deleted."""
    rows = []
    for id_ in range(first, first + count):
        deleted = id_ % LIVE_EVERY != 0
        rows.append(
            {
                "id": id_,
                "uuid": str(uuid.UUID(int=id_)),
                "display_name": f"vm-{id_}",
                "project_id": "9c1f6b2f7d1e4c6a8e0b3a5d7f9e1c3b",
                "user_id": "4a6c8e0b2d4f6a8c0e2b4d6f8a0c2e4b",
                "host": "compute-1",
                "node": "node-1",
                "vm_state": "deleted" if deleted else "active",
                "vcpus": 4,
                "memory_mb": 8192,
                "root_gb": 40,
                "created_at": DELETED_AT,
                "launched_at": DELETED_AT,
                "terminated_at": DELETED_AT if deleted else None,
                "deleted_at": DELETED_AT if deleted else None,
                "deleted": id_ if deleted else 0,
            }
        )
    return rows


def _owned_rows(instances):
    """Rows the instances own, by table name; action and event ids follow instance ids."""
    extra, actions, events, faults = [], [], [], []
    for instance in instances:
        id_, owner = instance["id"], instance["uuid"]
        extra.append(
            {
                "instance_uuid": owner,
                "flavor": '{"name": "m1.large", "vcpus": 4, "memory_mb": 8192, "root_gb": 40}',
                "pci_requests": '[{"count": 1, "spec": [{"vendor_id": "8086"}]}]',
            }
        )
        for n, (action, event) in enumerate((("create", "build"), ("delete", "terminate"))):
            action_id = 2 * id_ + n
            actions.append(
                {
                    "id": action_id,
                    "instance_uuid": owner,
                    "action": action,
                    "request_id": f"req-{owner}",
                    "start_time": DELETED_AT,
                    "finish_time": DELETED_AT,
                }
            )
            events.append(
                {
                    "action_id": action_id,
                    "event": f"compute_{event}",
                    "host": "compute-1",
                    "start_time": DELETED_AT,
                    "finish_time": DELETED_AT,
                    "result": "Success",
                }
            )
        if id_ % 10 == 0:
            faults.append(
                {"instance_uuid": owner, "code": 500, "message": "NoValidHost", "host": "c-1"}
            )
    return {
        "instance_extra": extra,
        "instance_actions": actions,
        "instance_actions_events": events,
        "instance_faults": faults,
    }


def _device_rows(node_id, instance_uuids):
    """Devices of one node: the first half allocated to those instances (deleted ones
    and live ones alike), the rest free, and DELETED_DEVICES removed ones."""
    rows = []
    for n in range(DEVICES + DELETED_DEVICES):
        holder = instance_uuids[n % len(instance_uuids)] if n < DEVICES // 2 else None
        gone = n >= DEVICES
        rows.append(
            {
                "id": n + 1,
                "compute_node_id": node_id,
                "address": f"0000:{0x10 + n // 256:02x}:{n // 8 % 32:02x}.{n % 8}",
                "vendor_id": "8086",
                "product_id": "1520",
                "dev_type": "type-VF",
                "label": "label_8086_1520",
                "status": "deleted" if gone else "allocated" if holder else "available",
                "instance_uuid": holder,
                "numa_node": n % 2,
                "deleted": n + 1 if gone else 0,
                "deleted_at": DELETED_AT if gone else None,
            }
        )
    return rows


def _moving(instances, owned):
    """Rows of each table that belong to deleted instances."""
    gone = {row["uuid"] for row in instances if row["deleted"]}
    actions = {row["id"] for row in owned["instance_actions"] if row["instance_uuid"] in gone}
    moving = {"instances": len(gone)}
    for name, rows in owned.items():
        if name == "instance_actions_events":
            moving[name] = sum(row["action_id"] in actions for row in rows)
        else:
            moving[name] = sum(row["instance_uuid"] in gone for row in rows)
    return moving


def populate(sa_engine, instances):
    """Insert the data for ``instances`` deleted instances; returns rows that must move.

    Live instances are interleaved with the deleted ones, as long-lived servers are
    among short-lived ones: finding the next deleted rows means passing live ones.
    """
    moving, total = {}, instances * LIVE_EVERY // (LIVE_EVERY - 1)
    for first in range(1, total + 1, CHUNK):
        rows = _instance_rows(first, min(CHUNK, total + 1 - first))
        owned = _owned_rows(rows)
        with sa_engine.begin() as connection:
            connection.execute(T["instances"].insert(), rows)
            for name, values in owned.items():
                connection.execute(T[name].insert(), values)
        for name, count in _moving(rows, owned).items():
            moving[name] = moving.get(name, 0) + count
    uuids = [str(uuid.UUID(int=i)) for i in range(1, min(total, 2 * DEVICES) + 1)]
    with sa_engine.begin() as connection:
        node = {"id": 1, "uuid": str(uuid.uuid4()), "host": "compute-1"}
        connection.execute(T["compute_nodes"].insert(), [{**node, "hypervisor_hostname": "n"}])
        connection.execute(T["pci_devices"].insert(), _device_rows(1, uuids))
    moving["pci_devices"] = DELETED_DEVICES
    return moving


# ------------------------------------------------------------- raw SQL


def _marked(child, *owners):
    """``child``'s columns, marked deleted as archiving marks a row moved with its owner."""
    columns = []
    for column in child.c:
        if column.name == "deleted":
            column = sa.case((column == 0, child.c.id), else_=column).label("deleted")
        elif column.name == "deleted_at":
            stamps = [column, *(owner.c.deleted_at for owner in owners)]
            column = sa.func.coalesce(*stamps).label("deleted_at")
        columns.append(column)
    return columns


def raw_statements():
    """The raw-SQL archive of this data: copies parents first, then deletes children first."""
    i, e, a, ev, f, d = (
        T[name]
        for name in (
            "instances",
            "instance_extra",
            "instance_actions",
            "instance_actions_events",
            "instance_faults",
            "pci_devices",
        )
    )
    gone = i.c.deleted != 0
    owned_by_gone = [
        (table, sa.select(*_marked(table, i)).join(i, i.c.uuid == table.c.instance_uuid))
        for table in (e, a, f)
    ]
    copies = [
        (i, sa.select(i).where(gone)),
        *((table, select.where(gone)) for table, select in owned_by_gone),
        (
            ev,
            sa.select(*_marked(ev, a, i))
            .join(a, a.c.id == ev.c.action_id)
            .join(i, i.c.uuid == a.c.instance_uuid)
            .where(gone),
        ),
        (d, sa.select(d).where(d.c.deleted != 0)),
    ]
    gone_uuids = sa.select(i.c.uuid).where(gone)
    gone_actions = sa.select(a.c.id).where(a.c.instance_uuid.in_(gone_uuids))
    deletes = [
        sa.delete(ev).where(ev.c.action_id.in_(gone_actions)),
        *(sa.delete(table).where(table.c.instance_uuid.in_(gone_uuids)) for table in (a, f, e)),
        sa.delete(i).where(gone),
        sa.delete(d).where(d.c.deleted != 0),
    ]
    inserts = [
        sa.insert(models.shadow_of(table)).from_select(list(table.c.keys()), select)
        for table, select in copies
    ]
    return inserts, deletes


def raw_archive(sa_engine):
    inserts, deletes = raw_statements()
    with sa_engine.begin() as connection:
        for statement in inserts:
            connection.execute(statement)
        return sum(connection.execute(statement).rowcount for statement in deletes)


# ------------------------------------------------------ one measurement


def archive_until_complete(max_rows):
    """Archive as ``pcisim-manage db archive_deleted_rows --until-complete`` does."""
    ctxt, total = pcisim_context.get_admin_context(), 0
    while batch := db_archive.archive_deleted_rows(ctxt, max_rows=max_rows).total:
        total += batch
    return total


def _memory_kib():
    """(current RSS, peak RSS) of this process in KiB.

    The peak is VmHWM, which ``_reset_peak`` sets back to the current RSS: so the
    peak is the measurement's own, not that of the imports before it (nor, as
    ``ru_maxrss`` can be, the parent's before the exec). Elsewhere than Linux,
    ``ru_maxrss`` for both.
    """
    try:
        with open("/proc/self/status") as status:
            fields = dict(line.split(":", 1) for line in status)
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])
    except (OSError, KeyError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak, peak


def _reset_peak():
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def measure(method, url, max_rows):
    """Run in a subprocess: archive the database at ``url``; print rows, time, memory."""
    pcisim_conf.parse_args([], default_config_files=[])
    pcisim_conf.CONF.set_override("connection", url, group="database")
    db_engine.configure()
    with db_engine.get_engine().connect() as connection:
        connection.execute(sa.select(T["instances"].c.id).limit(1)).all()
    _reset_peak()
    before, _ = _memory_kib()
    start, cpu = time.perf_counter(), time.process_time()
    if method == "raw":
        rows = raw_archive(db_engine.get_engine())
    else:
        rows = archive_until_complete(max_rows)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    _, peak = _memory_kib()
    print(
        json.dumps(
            {"rows": rows, "seconds": seconds, "cpu": cpu, "rss_kib": peak, "base_kib": before}
        )
    )


def in_subprocess(method, url, max_rows):
    command = [sys.executable, "-m", "bench.archive", "--measure", method, url]
    command += ["--max-rows", str(max_rows)]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


# --------------------------------------------------------- databases


def mysql_reachable():
    try:
        socket.create_connection(("127.0.0.1", 3306), timeout=2).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def scratch_database(backend, directory):
    """A migrated database of its own: (url, engine); dropped (or deleted) afterwards."""
    admin, name = None, f"pcisim_bench_{uuid.uuid4().hex[:12]}"
    if backend == "sqlite":
        url = f"sqlite:///{os.path.join(directory, name + '.sqlite')}"
    else:
        admin = sa.create_engine(MYSQL_SERVER, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.exec_driver_sql(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
        url = f"{MYSQL_SERVER}/{name}?charset=utf8mb4"
    manager = enginefacade.transaction_context()
    db_engine.configure_manager(manager, url, max_retries=0)
    sa_engine = manager.writer.get_engine()
    try:
        migration.db_sync(sa_engine)
        yield url, sa_engine
    finally:
        manager.dispose_pool()
        if admin is not None:
            with admin.connect() as connection:
                connection.exec_driver_sql(f"DROP DATABASE {name}")
            admin.dispose()
        elif os.path.exists(url[len("sqlite:///") :]):
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(url[len("sqlite:///") :] + suffix)


def counts(sa_engine):
    with sa_engine.connect() as connection:
        return {
            (table.name, shadow): connection.execute(
                sa.select(sa.func.count()).select_from(models.shadow_of(table) if shadow else table)
            ).scalar()
            for table in models.LIVE_TABLES
            for shadow in (False, True)
        }


def check(before, after, moving):
    """The rows that had to move are in the shadows, and only they left the live tables."""
    for (name, shadow), count in after.items():
        moved = moving.get(name, 0)
        expected = moved if shadow else before[(name, False)] - moved
        if count != expected:
            where = "shadow_" + name if shadow else name
            raise AssertionError(f"{where} has {count} rows after archiving, not {expected}")


def run(backend, directory, method, instances, max_rows):
    """Populate a fresh database and measure one method on it in a subprocess."""
    with scratch_database(backend, directory) as (url, sa_engine):
        harness.progress(f"archive: {backend}, {instances:,} instances, populating")
        moving = populate(sa_engine, instances)
        before = counts(sa_engine)
        harness.progress(f"archive: {backend}, {instances:,} instances, {method}")
        result = in_subprocess(method, url, max_rows)
        check(before, counts(sa_engine), moving)
    if result["rows"] != sum(moving.values()):
        raise AssertionError(f"{method} reported {result['rows']} rows, not {sum(moving.values())}")
    return {"instances": instances, "method": method, **result}


# ------------------------------------------------------------- report


def report(measurements, max_rows):
    rows, result = [], {}
    for backend, runs in measurements.items():
        raw = next(m for m in runs if m["method"] == "raw")
        result[backend] = runs
        for m in runs:
            m["rows_per_second"] = m["rows"] / m["seconds"]
            m["of_raw"] = m["rows_per_second"] / (raw["rows"] / raw["seconds"])
            # NOTE: on SQLite all the work is this process's, so its CPU time measures
            # it even while other processes take the cores; a server's work is not.
            m["of_raw_cpu"] = raw["cpu"] / raw["rows"] * m["rows"] / m["cpu"]
            rows.append(_row(backend, m))
    harness.print_table(
        f"Archive until complete (max_rows={max_rows}) vs raw SQL; a subprocess per row "
        "(goal: archive >= 0.5x raw rows/s, memory flat)",
        ("backend", "instances", "rows", "method", "seconds", "CPU s", "rows/s", "of raw")
        + ("of raw, CPU", "peak MiB", "growth MiB"),
        rows,
    )
    return result


def _row(backend, m):
    return (
        backend,
        f"{m['instances']:,}",
        f"{m['rows']:,}",
        "raw SQL" if m["method"] == "raw" else "archive",
        f"{m['seconds']:.2f}",
        f"{m['cpu']:.2f}",
        f"{m['rows_per_second']:,.0f}",
        f"{m['of_raw']:.2f}x",
        f"{m['of_raw_cpu']:.2f}x" if backend == "sqlite" else "-",
        f"{m['rss_kib'] / 1024:.0f}",
        f"{(m['rss_kib'] - m['base_kib']) / 1024:.1f}",
    )


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m bench.archive",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="2,000 instances")
    parser.add_argument("--instances", type=int, help="deleted instances (default 100,000)")
    parser.add_argument("--max-rows", type=int, default=1000, help="budget of each call")
    parser.add_argument("--measure", nargs=2, metavar=("METHOD", "URL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        return measure(*args.measure, args.max_rows)
    instances = args.instances or (2000 if args.quick else 100_000)
    backends = ["sqlite"] + (["mysql"] if mysql_reachable() else [])
    if len(backends) == 1:
        print("MariaDB unreachable at 127.0.0.1:3306: measured on SQLite only")
    measurements = {}
    with tempfile.TemporaryDirectory(prefix="pcisim-bench-archive-") as directory:
        for backend in backends:
            sizes = (instances // 10, 3 * instances // 10, instances)
            measurements[backend] = [
                run(backend, directory, "archive", n, args.max_rows) for n in sizes
            ] + [run(backend, directory, "raw", instances, args.max_rows)]
    harness.done_progress()
    result = report(measurements, args.max_rows)
    harness.record("archive-quick" if args.quick else "archive", result)


if __name__ == "__main__":
    main()
