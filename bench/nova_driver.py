"""Nova 34's own PCI tracker on the fixed tracker workload, in process.

Run by the Nova virtualenv's Python (bench/.nova-venv), never imported by pcisim:

    bench/.nova-venv/bin/python bench/nova_driver.py SQLITE PFS VFS INSTANCES

It builds what a nova-compute would have, without RPC: a SQLite file migrated by
``nova.db.migration.db_sync``, ``[pci] device_spec`` for vendor 8086, a ComputeNode,
and ``nova.pci.manager.PciDevTracker`` (whose pools are
``nova.pci.stats.PciDeviceStats``). Object methods run locally (no indirection API),
as in the figures the issue quotes. It then runs phases P1-P4 once, as bench/tracker.py
does, and the cost of one claim at PFS x (VFS + 1) devices on a second node.

SQLITE is ``oslo.db`` (Nova's engine as oslo.db makes it) or ``pcisim`` (the engine
gets pcisim's connection setup, db/sqlite.py: pooled WAL connections).

Stdout carries one JSON object per line: ``{"progress": text}`` while running, then
``{"result": {...}}``. Writes are INSERT/UPDATE/DELETE rows given to the database
(counted as bench/harness.py counts them), transactions are commits.
"""

import contextlib
import importlib.util
import json
import os
import sys
import tempfile
import time
import uuid

import nova.conf
import sqlalchemy as sa
from nova import context as nova_context
from nova import objects
from nova.db import migration
from nova.db.main import api as db_api
from nova.pci import manager

DEVICE_SPEC = '{"vendor_id": "8086"}'
VF_SPEC = {"vendor_id": "8086", "product_id": "1520"}
PHASES = ("P1", "P2", "P3", "P4")


def emit(**message):
    print(json.dumps(message), flush=True)


def use_pcisim_sqlite():
    """Give Nova's engine the SQLite connections pcisim's conductor has (db/sqlite.py)."""
    path = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "db", "sqlite.py"
    )
    spec = importlib.util.spec_from_file_location("pcisim_db_sqlite", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    db_api.context_manager.append_on_engine_create(module.use_pooled_wal_connections)


def configure(directory, sqlite):
    """Nova's options, a migrated SQLite database and the object registry."""
    conf = nova.conf.CONF
    conf([], project="nova", default_config_files=[])
    conf.set_override("device_spec", [DEVICE_SPEC], group="pci")
    url = f"sqlite:///{os.path.join(directory, 'nova.sqlite')}"
    conf.set_override("connection", url, group="database")
    objects.register_all()
    if sqlite == "pcisim":
        use_pcisim_sqlite()
    db_api.configure(conf)
    migration.db_sync(database="main")
    return db_api.get_engine()


class Counters:
    """DML rows and commits on Nova's engine, read around each phase."""

    def __init__(self, engine):
        self.writes = self.transactions = 0
        sa.event.listen(engine, "after_execute", self._execute)
        sa.event.listen(engine, "commit", self._commit)

    def _execute(self, conn, statement, multiparams, params, execution_options, result):
        if getattr(statement, "is_dml", False):
            self.writes += len(multiparams) if multiparams else 1

    def _commit(self, conn):
        self.transactions += 1

    @contextlib.contextmanager
    def measure(self, into):
        writes, transactions, start = self.writes, self.transactions, time.perf_counter()
        yield
        into["seconds"] = time.perf_counter() - start
        into["writes"] = self.writes - writes
        into["transactions"] = self.transactions - transactions


def sriov_report(pfs, vfs_per_pf):
    """The report of bench/tracker.py, with the label and dev_id libvirt adds."""
    report = []
    for i in range(pfs):
        pf = f"0000:{0x10 + i:02x}:00.0"
        report.append(_device(pf, "1521", "type-PF", i % 2))
        report += [
            _device(
                f"0000:{0x10 + i:02x}:{0x10 + j // 8:02x}.{j % 8}", "1520", "type-VF", i % 2, pf
            )
            for j in range(vfs_per_pf)
        ]
    return json.dumps(report)


def _device(address, product, dev_type, numa, parent=None):
    return {
        "address": address,
        "vendor_id": "8086",
        "product_id": product,
        "dev_type": dev_type,
        "parent_addr": parent,
        "numa_node": numa,
        "label": f"label_8086_{product}",
        "dev_id": "pci_" + address.replace(":", "_").replace(".", "_"),
    }


def compute_node(context):
    node = objects.ComputeNode(
        context,
        uuid=str(uuid.uuid4()),
        host="bench",
        hypervisor_hostname=f"node-{uuid.uuid4().hex[:8]}",
        vcpus=64,
        memory_mb=262144,
        local_gb=2000,
        vcpus_used=0,
        memory_mb_used=0,
        local_gb_used=0,
        hypervisor_type="fake",
        hypervisor_version=1,
        cpu_info="{}",
        numa_topology=None,
    )
    node.create()
    return node


def requests(instance_uuid):
    request = objects.InstancePCIRequest(
        count=1, spec=[VF_SPEC], alias_name="nic", request_id=str(uuid.uuid4())
    )
    return objects.InstancePCIRequests(instance_uuid=instance_uuid, requests=[request])


def claim(tracker, context, pci_requests):
    """Claim for an instance without NUMA topology; fail loudly rather than time nothing."""
    if not tracker.claim_instance(context, pci_requests, None):
        raise RuntimeError(f"Nova claimed no device for {pci_requests.instance_uuid}")


def run_phases(context, counters, pfs, vfs, instances):
    """P1-P4 on a fresh compute node: {phase: {seconds, writes, transactions}}."""
    report, result = sriov_report(pfs, vfs), {phase: {} for phase in PHASES}
    tracker = manager.PciDevTracker(context, compute_node(context))
    owners = [{"uuid": str(uuid.uuid4()), "pci_devices": []} for _ in range(instances)]
    for phase in PHASES[:2]:
        emit(progress=phase)
        with counters.measure(result[phase]):
            tracker.update_devices_from_hypervisor_resources(report)
            tracker.save(context)
    emit(progress="P3")
    with counters.measure(result["P3"]):
        for instance in owners:
            claim(tracker, context, requests(instance["uuid"]))
            tracker.allocate_instance(instance)
            tracker.save(context)
    emit(progress="P4")
    with counters.measure(result["P4"]):
        for instance in owners:
            tracker.free_instance(context, instance)
            tracker.save(context)
    return result


def claim_cost(context, pfs, vfs=16, claims=64):
    """Microseconds per claim (pools only, no save) with pfs x (vfs + 1) devices."""
    claims = min(claims, pfs * vfs)  # a small inventory has fewer VFs to claim
    tracker = manager.PciDevTracker(context, compute_node(context))
    tracker.update_devices_from_hypervisor_resources(sriov_report(pfs, vfs))
    tracker.save(context)
    batch = [requests(str(uuid.uuid4())) for _ in range(claims)]
    start = time.perf_counter()
    for request in batch:
        claim(tracker, context, request)
    return (time.perf_counter() - start) / claims * 1e6


def main(argv):
    sqlite, (pfs, vfs, instances) = argv[0], (int(arg) for arg in argv[1:])
    with tempfile.TemporaryDirectory(prefix="pcisim-nova-") as directory:
        emit(progress="migrating its database")
        counters = Counters(configure(directory, sqlite))
        context = nova_context.get_admin_context()
        phases = run_phases(context, counters, pfs, vfs, instances)
        emit(progress="one claim")
        claim_us = claim_cost(context, pfs, vfs)
    emit(result={"phases": phases, "claim_us": claim_us})


if __name__ == "__main__":
    main(sys.argv[1:])
