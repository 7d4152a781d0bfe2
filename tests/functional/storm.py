"""A storm of boots and deletes through the HTTP API, and what must hold once it is over.

``Storm`` runs clients in threads, each booting a server with PCI devices, waiting
for its build to end and deleting it, over and over, as users do, whatever the API
answers meanwhile (a 500 while the conductor is away, a refused connection); a delete
the API accepted that has not taken effect after a while is sent again, as a user
would. It counts what it asked and saw. ``problems`` reads the database directly, as
an operator would, and names every instance that has not ended (ACTIVE, ERROR with a
fault, or deleted), every device held by an instance that does not hold it rightly,
and every incomplete device row.
"""

import collections
import dataclasses
import itertools
import json
import threading
import time
import urllib.error
import urllib.request

import sqlalchemy as sa

from pcisim.db import models

HTTP_TIMEOUT = 30
POLL_SECONDS = 0.1
FINAL = ("ACTIVE", "ERROR")
HELD = ("claimed", "allocated")


def http(method, url, body=None):
    """(status, JSON body) of an HTTP request; (None, reason) when it got no answer."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode() if body else None,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
            text = response.read()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as error:
        text = error.read()
        try:
            return error.code, json.loads(text)
        except ValueError:
            return error.code, text
    except (OSError, urllib.error.URLError) as error:
        return None, str(error)


@dataclasses.dataclass
class Tally:
    """What the clients of a storm asked and saw, by kind."""

    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    servers: list = dataclasses.field(default_factory=list)  # ids of accepted boots
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def add(self, what, server_id=None):
        with self.lock:
            self.counts[what] += 1
            if server_id is not None:
                self.servers.append(server_id)

    def __str__(self):
        return ", ".join(f"{what}: {count}" for what, count in sorted(self.counts.items()))


class Storm:
    """``clients`` threads booting and deleting servers through the API at ``api()``.

    ``api`` is a callable returning the API's base URL, so that clients follow an API
    process that was started again. Each boot asks for the next of ``requests``.
    """

    def __init__(self, api, requests, clients=4, build_timeout=60, resend_after=20):
        self.api = api
        self.requests = itertools.cycle(requests)
        self.clients = clients
        self.build_timeout = build_timeout
        self.resend_after = resend_after
        self.tally = Tally()
        self._stop = threading.Event()
        self._threads = []
        self._next_lock = threading.Lock()

    def __enter__(self):
        self._threads = [
            threading.Thread(target=self._client, name=f"storm-{n}", daemon=True)
            for n in range(self.clients)
        ]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()

    def stop(self):
        """Stop asking; wait for every client to finish its server (boot and delete)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2 * self.build_timeout)
        return self.tally

    def wait_for_requests(self, count, timeout=60):
        """Wait until the clients have had ``count`` boots accepted in all."""
        deadline = time.monotonic() + timeout
        while len(self.tally.servers) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {self.tally} within {timeout} s")
            time.sleep(POLL_SECONDS)

    def _client(self):
        while not self._stop.is_set():
            with self._next_lock:
                request = next(self.requests)
            server = self._boot(request)
            if server is not None:
                self._delete(server)

    def _boot(self, request):
        status, body = http(
            "POST", f"{self.api()}/servers", {"server": {"name": "storm", "pci_requests": request}}
        )
        if status != 202:
            self.tally.add(f"boot answered {status}")
            time.sleep(POLL_SECONDS)
            return None
        server = body["server"]["id"]
        self.tally.add("boot accepted", server)
        ended = self._poll(server, lambda s: s is not None and s.get("status") in FINAL)
        self.tally.add(f"boot ended {ended.get('status') if ended else 'unseen'}")
        return server

    def _delete(self, server):
        """Delete until the API takes it; ask again, as a user would, when an accepted
        delete has not taken effect after ``resend_after`` (its message was lost)."""
        for attempt in range(2):
            if attempt:
                self.tally.add("delete sent again")
            deadline = time.monotonic() + self.build_timeout
            while time.monotonic() < deadline:
                status, _ = http("DELETE", f"{self.api()}/servers/{server}")
                if status in (204, 404):
                    break
                self.tally.add(f"delete answered {status}")
                time.sleep(POLL_SECONDS)
            timeout = self.resend_after if not attempt else self.build_timeout
            if self._poll(server, lambda s: s is None, default=False, timeout=timeout) is None:
                self.tally.add("delete ended")
                return
        self.tally.add("delete not seen to end")

    def _poll(self, server, done, default=None, timeout=None):
        """The server's view once ``done(view)`` (None once it is gone), else ``default``."""
        deadline = time.monotonic() + (timeout or self.build_timeout)
        while time.monotonic() < deadline:
            status, body = http("GET", f"{self.api()}/servers/{server}")
            view = body["server"] if status == 200 else None
            if status in (200, 404) and done(view):
                return view
            time.sleep(POLL_SECONDS)
        return default


# ----------------------------------------------------------------- what must hold


def _rows(connection, model):
    return [dict(row._mapping) for row in connection.execute(sa.select(model.__table__))]


def _snapshot(engine):
    with engine.connect() as connection:
        return {
            "instances": _rows(connection, models.Instance),
            "faults": _rows(connection, models.InstanceFault),
            "extras": _rows(connection, models.InstanceExtra),
            "devices": [row for row in _rows(connection, models.PciDevice) if not row["deleted"]],
            "nodes": {row["id"]: row["host"] for row in _rows(connection, models.ComputeNode)},
        }


def problems(engine):
    """Every way the database says the control plane has not settled correctly.

    An instance has ended when it is deleted, or ACTIVE or ERROR with no task left, an
    ERROR one with a fault saying why. A device is held (claimed, allocated, or naming
    an instance) only by a live ACTIVE instance, on that instance's host, and each
    ACTIVE instance holds as many devices as it asked for. No fault tells of a device
    given to two guests, and every device row has its identity.
    """
    rows = _snapshot(engine)
    found, active = _unended(rows)
    found += _misheld(rows, active)
    found += [
        f"fault of {fault['instance_uuid']}: {fault['message']}"
        for fault in rows["faults"]
        if "passed through to guest" in (fault["message"] or "")
    ]
    found += [
        f"device row {row['id']} lacks its identity"
        for row in rows["devices"]
        if any(row[column] is None for column in ("compute_node_id", "address", "status"))
    ]
    return found


def _unended(rows):
    """Problems with instances that have not ended, and {uuid: host} of ACTIVE ones."""
    found, active = [], {}
    faulted = {fault["instance_uuid"] for fault in rows["faults"]}
    for instance in rows["instances"]:
        uuid, state, task = instance["uuid"], instance["vm_state"], instance["task_state"]
        if instance["deleted"]:
            continue
        if state not in ("active", "error") or task is not None:
            found.append(f"instance {uuid} has not ended: {state}/{task} on {instance['host']}")
        elif state == "error" and uuid not in faulted:
            found.append(f"instance {uuid} is in ERROR without a fault")
        elif state == "active":
            active[uuid] = instance["host"]
    return found, active


def _misheld(rows, active):
    found, held = [], collections.Counter()
    for device in rows["devices"]:
        holder, host = device["instance_uuid"], rows["nodes"].get(device["compute_node_id"])
        if device["status"] not in HELD and holder is None:
            continue
        held[holder] += 1
        where = f"device {device['address']} of {host} ({device['status']})"
        if holder not in active:
            found.append(f"{where} is held by {holder}, not a live ACTIVE instance")
        elif active[holder] != host:
            found.append(f"{where} is held by {holder}, which runs on {active[holder]}")
    wanted = {extra["instance_uuid"]: _count(extra["pci_requests"]) for extra in rows["extras"]}
    for uuid in active:
        if held[uuid] != wanted.get(uuid, 0):
            found.append(f"{uuid} is ACTIVE with {held[uuid]} devices of {wanted.get(uuid, 0)}")
    return found


def _count(pci_requests):
    if not pci_requests:
        return 0
    return sum(request["count"] for request in json.loads(pci_requests))


def outcomes(engine, uuids):
    """How the instances ``uuids`` ended: a Counter of deleted/active/error, and one of
    the exception names of the faults of those that went to ERROR on the way."""
    rows = _snapshot(engine)
    instances = {row["uuid"]: row for row in rows["instances"]}
    ended = collections.Counter()
    for uuid in uuids:
        row = instances.get(uuid)
        ended["deleted" if row is None or row["deleted"] else row["vm_state"]] += 1
    wanted = set(uuids)
    faults = collections.Counter(
        fault["message"].split(":")[0]
        for fault in rows["faults"]
        if fault["instance_uuid"] in wanted
    )
    return ended, faults
