"""RPC overhead: a remotable object call against a bare oslo.messaging call.

This process acts as a compute; an InProcessConductor writes a SQLite file. On each
transport (``kombu+memory:////``, and RabbitMQ on 127.0.0.1 when it is reachable) the
same client transport carries:

  bare call        ``call(ctxt, "noop")`` to a second RPC server on the same transport,
                   with the same serializer (the request context travels too)
  object_action    ``PciDevice.save()`` with one changed field: the device travels to the
                   conductor, which updates its row in one transaction and returns the
                   changed fields
  5 single saves   five devices, each changed and saved in its own round trip
  batch of 500     500 changed devices saved by ``PciDeviceList.save()``, one round trip:
                   only each device's changed field travels (PciDeviceList 1.4), and
                   only the time of the write and the rows not found come back

Goals (issue 7): object_action / bare call <= 1.5x; batch of 500 / 5 single saves < 1.

The rows in between add one thing at a time to the bare call, to show where the
object call's extra time goes:

  bare call + device   the device as the argument of a no-op call (object serialization)
  save, no change      object_action that writes nothing (conductor dispatch, no DB)
  save in process      ``PciDevice.save()`` in a thread with the database: no RPC at all

What a save sends: a compute node with its two pool lists (4 pools each) and an
instance with its flavor and a PCI request, each saved with one changed field, as
they travel now (the fields the method reads and the changes: ``obj_sent_for``) and
whole, as they did before (goal < 1).

``--profile`` also times the parts of one object_action (serializers, JSON, conductor
dispatch, object method, DB transaction, and the transport as the remainder) by
wrapping those functions in this process for a separate series of calls.

Calls of every case are interleaved, so a noisy neighbour slows all of them alike.
A row's figure is the median of the runs' medians; min-max spans the runs' medians.
Single calls cost the same however many are made; a batch costs a round trip plus a
part that grows linearly with its devices, printed per device under the table (goal
under 50 us; it was about 500 us while whole devices travelled both ways).

    python -m bench.rpc [--quick] [--runs N] [--profile]
"""

import argparse
import contextlib
import logging
import socket
import statistics
import threading
import time
import uuid
from urllib import parse

from pcisim import concurrency

concurrency.select_backend()  # selects the concurrency backend before oslo.messaging loads

# isort: split
import oslo_messaging as messaging

from bench import harness
from pcisim import conf as pcisim_conf
from pcisim import dbaccess, rpc, testing
from pcisim.conductor import manager as conductor_manager
from pcisim.conductor import rpcapi
from pcisim.db import api as db_api
from pcisim.objects.compute_node import ComputeNode
from pcisim.objects.flavor import Flavor
from pcisim.objects.instance import Instance
from pcisim.objects.instance_pci_requests import InstancePCIRequest, InstancePCIRequests
from pcisim.objects.pci_device import PciDevice, PciDeviceList
from pcisim.objects.pci_device_pool import PciDevicePool, PciDevicePoolList

RABBIT_URL = "rabbit://guest:guest@127.0.0.1:5672/"
BATCH = 500
SINGLES = 5


class NoopEndpoint:
    """The bare reference: methods that do nothing, served on a topic of their own."""

    target = messaging.Target(version="1.0")

    def noop(self, context):
        return None

    def accept(self, context, device):
        return None


def reachable(url, timeout=2.0):
    parsed = parse.urlsplit(url)
    try:
        socket.create_connection((parsed.hostname, parsed.port), timeout=timeout).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def noop_client(conductor):
    """A client of a no-op RPC server, on the conductor's transport and client transport."""
    transport = rpc.get_transport(url=conductor.transport_url)
    topic = f"bench-noop-{uuid.uuid4().hex[:12]}"
    server = rpc.get_server(
        transport, messaging.Target(topic=topic, server="bench"), [NoopEndpoint()]
    )
    server.start()
    try:
        yield rpc.get_client(
            conductor.client_transport, messaging.Target(topic=topic, version="1.0")
        )
    finally:
        server.stop()
        server.wait()
        transport.cleanup()


@contextlib.contextmanager
def conductor_on(plane, url):
    """The plane's own conductor for its transport; a second one for another transport.

    One database serves both: the engine facade is configured once per process.
    """
    if url == plane.conductor.transport_url:
        yield plane.conductor
        return
    conductor = testing.InProcessConductor(url).start()
    try:
        with conductor.acting_as_compute("pcisim-bench"):
            yield conductor
    finally:
        conductor.stop()


def make_devices(context, count):
    """A compute node with ``count`` devices, created in one round trip."""
    node = harness.compute_node(context)
    devices = PciDeviceList(
        context,
        objects=[
            PciDevice(
                context,
                compute_node_id=node.id,
                address=f"0000:{0x10 + i // 256:02x}:{i // 8 % 32:02x}.{i % 8}",
                vendor_id="8086",
                product_id="1520",
                dev_type="type-PCI",
                label="label_8086_1520",
                status="available",
                numa_node=0,
            )
            for i in range(count)
        ],
    )
    devices.save()
    return list(devices)


def _pools():
    """The pools of a node of two NICs, each a PF and its VFs on a NUMA node of its own."""
    pools = [
        PciDevicePool(
            vendor_id="8086",
            product_id=product,
            numa_node=numa_node,
            dev_type=dev_type,
            tags={"physical_network": "physnet1"},
            count=count,
            group=f"0000:8{numa_node}:00.0",
        )
        for numa_node in (0, 1)
        for product, dev_type, count in (("1521", "type-PF", 1), ("1520", "type-VF", 8))
    ]
    return PciDevicePoolList.of(pools, numa_sockets={"0": 0, "1": 1})


def node_with_pools(context):
    node = harness.compute_node(context)
    node.pci_device_pools, node.pci_inventory = _pools(), _pools()
    node.save()
    return node


def instance_with_requests(context, node):
    """An instance as a compute holds it during a build: its flavor and PCI request."""
    instance_uuid = str(uuid.uuid4())
    request = InstancePCIRequest(
        count=1,
        spec=[{"vendor_id": "8086", "product_id": "1520", "dev_type": "type-VF"}],
        alias_name="vf",
        request_id=str(uuid.uuid4()),
        numa_policy="legacy",
    )
    flavor = Flavor(
        flavorid="vf.small",
        name="vf.small",
        memory_mb=512,
        vcpus=1,
        root_gb=1,
        extra_specs={"pci_passthrough:alias": "vf:1"},
    )
    instance = Instance(
        context,
        uuid=instance_uuid,
        display_name="bench",
        host=node.host,
        node=node.hypervisor_hostname,
        vm_state="building",
        vcpus=1,
        memory_mb=512,
        root_gb=1,
        pci_requests=InstancePCIRequests(instance_uuid=instance_uuid, requests=[request]),
        flavor=flavor,
    )
    instance.create()
    return instance


def sent_whole(call, cls):
    """``call`` with objects of ``cls`` sent whole to the conductor, as before
    ``obj_sent_for``."""

    def whole():
        sent_for, cls.obj_sent_for = cls.obj_sent_for, {}
        try:
            call()
        finally:
            cls.obj_sent_for = sent_for

    return whole


def toggle_usage(node):
    node.vcpus_used = 1 - node.vcpus_used


def toggle_task(instance):
    instance.task_state = None if instance.task_state else "spawning"


def toggle(*devices):
    """Change one field of each device, so that saving it writes its row."""
    for device in devices:
        device.numa_node = 1 - device.numa_node


def in_process_save(device):
    with dbaccess.granted():
        device.save()


def single_cases(client, context, devices):
    """name -> (prepare, call) of the one-call cases; ``devices`` has SINGLES + 3."""
    changing, unchanged, local, *singles = devices
    return {
        "bare call": (None, lambda: client.prepare().call(context, "noop")),
        "bare call + device": (
            None,
            lambda: client.prepare().call(context, "accept", device=unchanged),
        ),
        "save, no change": (None, unchanged.save),
        "object_action": (lambda: toggle(changing), changing.save),
        "save in process": (lambda: toggle(local), lambda: in_process_save(local)),
        f"{SINGLES} single saves": (
            lambda: toggle(*singles),
            lambda: [device.save() for device in singles],
        ),
    }


def sent_cases(context):
    """name -> (prepare, call) of the saves of a node and an instance, now and whole."""
    node = node_with_pools(context)
    instance = instance_with_requests(context, node)
    return {
        "node save": (lambda: toggle_usage(node), node.save),
        "node save, sent whole": (lambda: toggle_usage(node), sent_whole(node.save, ComputeNode)),
        "instance save": (lambda: toggle_task(instance), instance.save),
        "instance save, sent whole": (
            lambda: toggle_task(instance),
            sent_whole(instance.save, Instance),
        ),
    }


def batch_case(context, devices):
    batch = PciDeviceList(context, objects=devices)
    return {f"batch of {len(devices)}": (lambda: toggle(*devices), batch.save)}


def interleaved(cases, calls, warmup=3):
    """Seconds per call of each case, calling the cases in turn ``calls`` times."""
    samples = {name: [] for name in cases}
    for n in range(warmup + calls):
        for name, (prepare, call) in cases.items():
            if prepare:
                prepare()
            start = time.perf_counter()
            call()
            elapsed = time.perf_counter() - start
            if n >= warmup:
                samples[name].append(elapsed)
    return samples


def measure_transport(plane, url, runs, calls, batches):
    """{case: [median seconds of each run]} on one transport."""
    medians = {}
    with conductor_on(plane, url) as conductor, noop_client(conductor) as client:
        devices = make_devices(plane.context, SINGLES + 3 + BATCH)
        singles = single_cases(client, plane.context, devices[: SINGLES + 3])
        singles |= sent_cases(plane.context)
        batch = batch_case(plane.context, devices[SINGLES + 3 :])
        for run in range(runs):
            harness.progress(f"rpc: {transport_name(url)}, run {run + 1}/{runs}")
            samples = interleaved(singles, calls) | interleaved(batch, batches, warmup=1)
            for name, values in samples.items():
                medians.setdefault(name, []).append(statistics.median(values))
    return medians


def transport_name(url):
    return parse.urlsplit(url).scheme.split("+")[-1]


# ---------------------------------------------------------------- profile


class Timers:
    """Inclusive seconds spent in wrapped functions, by label, while installed."""

    def __init__(self):
        self.seconds = {}
        self.bytes = {}
        self._undo = []

    def wrap(self, owner, name, label, side_by_thread=False, measure_size=False):
        original = owner.__dict__[name]
        function = original.__func__ if isinstance(original, staticmethod) else original

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                result = function(*args, **kwargs)
            finally:
                key = label
                if side_by_thread:
                    main = threading.current_thread() is threading.main_thread()
                    key = f"{label} ({'compute' if main else 'conductor'})"
                self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - start
            if measure_size:
                self.bytes[label] = self.bytes.get(label, 0) + len(result["oslo.message"])
            return result

        setattr(owner, name, staticmethod(timed) if isinstance(original, staticmethod) else timed)
        self._undo.append((owner, name, original))

    def restore(self):
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()


def _install(timers):
    from oslo_messaging._drivers import common as driver_common

    for name in ("serialize_entity", "deserialize_entity", "serialize_context"):
        timers.wrap(rpc.RequestContextSerializer, name, name, side_by_thread=True)
    timers.wrap(rpc.RequestContextSerializer, "deserialize_context", "deserialize_context")
    timers.wrap(driver_common, "serialize_msg", "JSON encode", measure_size=True)
    timers.wrap(driver_common, "deserialize_msg", "JSON decode")
    for name in ("object_action", "object_class_action_versions"):
        timers.wrap(rpcapi.ConductorAPI, name, "rpc call")
        timers.wrap(conductor_manager.ConductorManager, name, "conductor method")
    timers.wrap(conductor_manager.ConductorManager, "_run", "object method")
    timers.wrap(db_api, "pci_device_update", "DB transaction")
    timers.wrap(db_api, "pci_device_batch_save", "DB transaction")


def breakdown(seconds, total, calls):
    """Exclusive microseconds per call of each part of one call, from inclusive timers."""
    t = {name: value / calls * 1e6 for name, value in seconds.items()}
    serializers = {k: v for k, v in t.items() if "serialize_" in k}
    rpc_call = t.get("rpc call", total / calls * 1e6)
    parts = {
        "remotable wrapper (compute)": total / calls * 1e6 - rpc_call,
        **serializers,
        "JSON encode + decode": t.get("JSON encode", 0.0) + t.get("JSON decode", 0.0),
        "conductor dispatch": t.get("conductor method", 0.0) - t.get("object method", 0.0),
        "object method, outside the DB API": t.get("object method", 0.0)
        - t.get("DB transaction", 0.0),
        "DB transaction (DB API function)": t.get("DB transaction", 0.0),
    }
    parts["transport, queues, thread hand-offs"] = rpc_call - sum(
        value for name, value in parts.items() if name != "remotable wrapper (compute)"
    )
    return {name: value for name, value in parts.items() if abs(value) >= 0.5}


def profile(plane, url, calls, batches):
    """Microseconds per call of each part of the bare call, object_action and a batch."""
    result = {}
    with conductor_on(plane, url) as conductor, noop_client(conductor) as client:
        device, *batch = make_devices(plane.context, 1 + BATCH)
        cases = {
            "bare call": (None, lambda: client.prepare().call(plane.context, "noop")),
            "object_action": (lambda: toggle(device), device.save),
            **batch_case(plane.context, batch),
        }
        for name, case in cases.items():
            count = batches if name.startswith("batch") else calls
            interleaved({name: case}, 0, warmup=min(count, 10))
            timers = Timers()
            _install(timers)
            try:
                total = sum(interleaved({name: case}, count, warmup=0)[name])
            finally:
                timers.restore()
            result[name] = {
                "us_per_call": total / count * 1e6,
                "parts_us": breakdown(timers.seconds, total, count),
                "request_and_reply_bytes": timers.bytes.get("JSON encode", 0) // count,
            }
    return result


# ---------------------------------------------------------------- report


ROWS = (
    "bare call",
    "bare call + device",
    "save, no change",
    "object_action",
    "save in process",
    f"{SINGLES} single saves",
    f"batch of {BATCH}",
    "node save, sent whole",
    "node save",
    "instance save, sent whole",
    "instance save",
)
RATIOS = {
    "object_action": ("bare call", "<= 1.5x"),
    f"batch of {BATCH}": (f"{SINGLES} single saves", "< 1"),
    "node save": ("node save, sent whole", "< 1"),
    "instance save": ("instance save, sent whole", "< 1"),
}


def report(measured, runs, calls, batches):
    rows, result = [], {}
    for name, medians in measured.items():
        summary = {case: harness.summarize(values) for case, values in medians.items()}
        result[name] = {"ms": _ms(summary), "ratios": {}}
        for case in ROWS:
            s = summary[case]
            ratio = goal = ""
            if case in RATIOS:
                reference, goal = RATIOS[case]
                value = s["median"] / summary[reference]["median"]
                result[name]["ratios"][f"{case} / {reference}"] = value
                ratio = f"{value:.2f}x"
            rows.append(
                (
                    name,
                    case,
                    f"{s['median'] * 1e3:.2f}",
                    f"{s['min'] * 1e3:.2f}-{s['max'] * 1e3:.2f}",
                    ratio,
                    goal,
                )
            )
    harness.print_table(
        f"RPC overhead: {runs} runs x {calls} calls ({batches} batches), conductor on a "
        "SQLite file (ms per call: median of run medians, min-max of run medians)",
        ("transport", "call", "median ms", "min-max", "ratio", "goal"),
        rows,
    )
    for name, medians in measured.items():
        per_device = statistics.median(medians[f"batch of {BATCH}"]) / BATCH * 1e6
        result[name]["batch_us_per_device"] = per_device
        print(f"{name}: a batch of {BATCH} costs {per_device:.0f} us per device (goal < 50)")
    return result


def _ms(summary):
    return {case: {k: v * 1e3 for k, v in s.items()} for case, s in summary.items()}


def report_profile(profiles):
    for name, cases in profiles.items():
        parts = list(dict.fromkeys(p for case in cases.values() for p in case["parts_us"]))
        rows = [
            (part, *(f"{case['parts_us'].get(part, 0.0):.0f}" for case in cases.values()))
            for part in parts
        ]
        rows.append(("total", *(f"{case['us_per_call']:.0f}" for case in cases.values())))
        rows.append(
            (
                "JSON bytes, request + reply",
                *(str(case["request_and_reply_bytes"]) for case in cases.values()),
            )
        )
        harness.print_table(
            f"Where one call goes on {name} (us per call, timers wrapped around each part)",
            ("part", *cases),
            rows,
        )


def transports():
    """The transports to measure, and a note for each one left out."""
    urls = [pcisim_conf.IN_PROCESS_TRANSPORT_URL]
    if reachable(RABBIT_URL):
        urls.append(RABBIT_URL)
    else:
        print(f"RabbitMQ unreachable at {rpc.safe_url(RABBIT_URL)}: measured on memory only")
    return urls


def quiet_messaging_logs():
    # With no logging configured, warnings reach stderr: kombu and oslo.messaging warn
    # on every in-memory connection (no host name, no heartbeat), amqp on closing a
    # channel that still receives a consumer's cancellation. None concerns a benchmark.
    for name in ("kombu", "oslo.messaging", "amqp"):
        logging.getLogger(name).setLevel(logging.ERROR)


def use_own_exchange():
    """Queues that go away with the run, on an exchange of their own (on RabbitMQ)."""
    pcisim_conf.CONF.set_override("amqp_auto_delete", True, group="oslo_messaging_rabbit")
    pcisim_conf.CONF.set_override("control_exchange", "pcisim_bench")


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m bench.rpc",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="fewer calls (seconds)")
    parser.add_argument("--runs", type=int, default=None, help="runs (default 5, quick 2)")
    parser.add_argument("--profile", action="store_true", help="time the parts of one call")
    args = parser.parse_args(argv)
    runs = args.runs or (2 if args.quick else 5)
    calls, batches = (20, 2) if args.quick else (300, 15)
    quiet_messaging_logs()
    measured, profiles = {}, {}
    plane = harness.ControlPlane()
    use_own_exchange()
    with plane:
        for url in transports():
            measured[transport_name(url)] = measure_transport(plane, url, runs, calls, batches)
            if args.profile:
                profiles[transport_name(url)] = profile(plane, url, calls, batches)
    harness.done_progress()
    result = report(measured, runs, calls, batches)
    if args.profile:
        report_profile(profiles)
        result["profile"] = profiles
    harness.record("rpc-quick" if args.quick else "rpc", result)


if __name__ == "__main__":
    main()
