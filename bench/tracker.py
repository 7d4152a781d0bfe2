"""The PCI tracker on the fixed workload of issue 4, against per-device saves.

Inventory: 64 PFs x 16 VFs = 1,088 devices (8086:1521 PFs, 8086:1520 VFs, NUMA i % 2).
Phases, each with the conductor round trips included:
  P1  first sync on an empty database + save
  P2  the same report again + save
  P3  512 instances each claim and allocate one VF, saving after every instance
  P4  free them all, saving after each

Reference, measured in the same run on the same transport and database: the same
tracker saving each changed device in its own round trip, as Nova's tracker does.

Scaling, at 136, 272, 544, 1,088 and 4,352 devices: the first sync per device, the
tracker's own work and its one batch save apart (the save is PciDeviceList 1.4's: each
device's changed fields travel, and only the new ids, the time and the rows not found
come back); and the cost of one claim (no save), up to 1,088 devices.

    python -m bench.tracker [--quick] [--runs N]
"""

import argparse
import time
import uuid

from bench import harness
from pcisim.objects.instance_pci_requests import InstancePCIRequest, InstancePCIRequests
from pcisim.pci.devspec import DeviceSpecList
from pcisim.pci.manager import PciDevTracker

DEVICE_SPEC = '{"vendor_id": "8086"}'
VF_SPEC = {"vendor_id": "8086", "product_id": "1520"}
PHASES = ("P1", "P2", "P3", "P4")


def sriov_report(pfs, vfs_per_pf):
    """PF i at 0000:BB:00.0 (BB = 0x10+i); its VF j at 0000:BB:SS.F (SS = 0x10+j//8)."""
    report = []
    for i in range(pfs):
        pf = f"0000:{0x10 + i:02x}:00.0"
        report.append(
            {
                "address": pf,
                "vendor_id": "8086",
                "product_id": "1521",
                "dev_type": "type-PF",
                "numa_node": i % 2,
            }
        )
        report += [
            {
                "address": f"0000:{0x10 + i:02x}:{0x10 + j // 8:02x}.{j % 8}",
                "vendor_id": "8086",
                "product_id": "1520",
                "dev_type": "type-VF",
                "parent_addr": pf,
                "numa_node": i % 2,
            }
            for j in range(vfs_per_pf)
        ]
    return report


class PerDeviceSaveTracker(PciDevTracker):
    """The reference: one round trip per changed device, as Nova's tracker saves."""

    def save(self):
        for device in list(self._dirty.values()):
            device.save()
        self._dirty.clear()


def _requests():
    return InstancePCIRequests(
        requests=[
            InstancePCIRequest(
                count=1, spec=[VF_SPEC], alias_name="nic", request_id=str(uuid.uuid4())
            )
        ]
    )


def run_phases(plane, tracker_class, pfs, vfs, instances):
    """One run of P1-P4 on a fresh compute node: {phase: {seconds, round_trips, writes}}."""
    counters, specs, report = (
        harness.Counters(plane),
        DeviceSpecList.from_config([DEVICE_SPEC]),
        sriov_report(pfs, vfs),
    )
    tracker = tracker_class(plane.context, harness.compute_node(plane.context), specs)
    result = {phase: {} for phase in PHASES}
    uuids = [str(uuid.uuid4()) for _ in range(instances)]
    for phase in ("P1", "P2"):
        with counters.measure(result[phase]):
            tracker.update_devices_from_hypervisor_resources(report)
            tracker.save()
    with counters.measure(result["P3"]):
        for instance in uuids:
            tracker.claim_instance(instance, _requests())
            tracker.allocate_instance(instance)
            tracker.save()
    with counters.measure(result["P4"]):
        for instance in uuids:
            tracker.free_instance(instance)
            tracker.save()
    return result


def first_sync_cost(plane, pfs, vfs=16, runs=3):
    """Microseconds per device of a first sync of pfs x (vfs + 1) devices on a new node:
    (the tracker building its devices, the batch save, the CPU time of the batch save
    in every thread of this process, the conductor's included), each the fastest of
    ``runs``."""
    specs, report = DeviceSpecList.from_config([DEVICE_SPEC]), sriov_report(pfs, vfs)
    sync, save, cpu = [], [], []
    for _ in range(runs):
        tracker = PciDevTracker(plane.context, harness.compute_node(plane.context), specs)
        start = time.perf_counter()
        tracker.update_devices_from_hypervisor_resources(report)
        synced, synced_cpu = time.perf_counter(), time.process_time()
        tracker.save()
        sync.append(synced - start)
        save.append(time.perf_counter() - synced)
        cpu.append(time.process_time() - synced_cpu)
    return tuple(min(values) / len(report) * 1e6 for values in (sync, save, cpu))


def claim_cost(plane, pfs, vfs=16, claims=64):
    """Microseconds per claim (pools only, no save) with pfs x (vfs + 1) devices."""
    claims = min(claims, pfs * vfs)  # a small inventory has fewer VFs to claim
    tracker = PciDevTracker(
        plane.context,
        harness.compute_node(plane.context),
        DeviceSpecList.from_config([DEVICE_SPEC]),
    )
    tracker.update_devices_from_hypervisor_resources(sriov_report(pfs, vfs))
    tracker.save()
    requests = [_requests() for _ in range(claims)]
    start = time.perf_counter()
    for n, request in enumerate(requests):
        tracker.claim_instance(f"claim-{n}", request)
    return (time.perf_counter() - start) / claims * 1e6


def measure(runs, pfs, vfs, instances):
    samples = {name: {phase: [] for phase in PHASES} for name in ("pcisim", "per-device")}
    with harness.ControlPlane() as plane:
        for run in range(runs):
            for name, cls in (("pcisim", PciDevTracker), ("per-device", PerDeviceSaveTracker)):
                harness.progress(f"tracker: run {run + 1}/{runs}, {name}")
                for phase, values in run_phases(plane, cls, pfs, vfs, instances).items():
                    samples[name][phase].append(values)
        harness.progress("tracker: claim cost by inventory size")
        scaling = {(n * 17): claim_cost(plane, n) for n in (8, 16, 32, 64)}
        harness.progress("tracker: first sync cost by inventory size")
        first_sync = {(n * 17): first_sync_cost(plane, n) for n in (8, 16, 32, 64, 256)}
    harness.done_progress()
    return samples, scaling, first_sync


def report(samples, scaling, first_sync, pfs, vfs, instances):
    rows, result = [], {"phases": {}, "claim_us_by_devices": scaling}
    result["first_sync_us_per_device"] = {
        n: {"sync": sync, "save": save, "save_cpu": cpu}
        for n, (sync, save, cpu) in first_sync.items()
    }
    for phase in PHASES:
        ours, ref = (samples[name][phase] for name in ("pcisim", "per-device"))
        t = harness.summarize([s["seconds"] for s in ours])
        r = harness.summarize([s["seconds"] for s in ref])
        result["phases"][phase] = {
            "pcisim": t,
            "per_device": r,
            "round_trips": ours[0]["round_trips"],
            "writes": ours[0]["writes"],
            "per_device_round_trips": ref[0]["round_trips"],
        }
        rows.append(
            (
                phase,
                f"{t['median']:.3f}",
                f"{t['min']:.3f}-{t['max']:.3f}",
                ours[0]["round_trips"],
                ours[0]["writes"],
                f"{r['median']:.3f}",
                ref[0]["round_trips"],
                f"{r['median'] / t['median']:.1f}x",
            )
        )
    harness.print_table(
        f"PCI tracker, {pfs} PFs x {vfs} VFs, {instances} instances, conductor RPC on "
        "kombu+memory, SQLite file "
        "(seconds: median, min-max)",
        ("phase", "pcisim s", "min-max", "trips", "writes", "per-device s", "trips", "speedup"),
        rows,
    )
    base = scaling[min(scaling)]
    harness.print_table(
        "One claim (pools only) as the inventory grows",
        ("devices", "us/claim", "vs smallest"),
        [(n, f"{us:.1f}", f"{us / base:.2f}x") for n, us in sorted(scaling.items())],
    )
    harness.print_table(
        "First sync as the inventory grows (us per device, fastest of 3; goal: save < 50)",
        ("devices", "tracker", "batch save", "its CPU", "total"),
        [
            (n, f"{sync:.0f}", f"{save:.0f}", f"{cpu:.0f}", f"{sync + save:.0f}")
            for n, (sync, save, cpu) in sorted(first_sync.items())
        ],
    )
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m bench.tracker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="8 PFs, 64 instances, one run")
    parser.add_argument("--runs", type=int, default=3, help="runs to take the median of")
    args = parser.parse_args(argv)
    shape = (8, 16, 64) if args.quick else (64, 16, 512)
    samples, scaling, first_sync = measure(1 if args.quick else args.runs, *shape)
    result = report(samples, scaling, first_sync, *shape)
    harness.record("tracker-quick" if args.quick else "tracker", result)


if __name__ == "__main__":
    main()
