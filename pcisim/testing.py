"""Run the control plane inside a test process, over a real transport.

``InProcessConductor`` starts a conductor serving a topic of its own on the given
transport (``kombu+memory:////`` by default: real serialization, in process). Inside
``acting_as_compute()`` the calling process behaves as a compute: database access is
forbidden outside the conductor's threads, and remotable object calls travel to the
conductor over RPC. ``calls`` counts what the conductor received::

    with InProcessConductor() as conductor:   # started, and acting as a compute
        device.save()
        assert conductor.calls[("object_action", "PciDevice", "save")] == 1

``ControlPlane`` adds compute services with simulated hypervisors and the compute API;
the calling thread is the API. See its docstring.

The database must be configured already (``db.engine.configure`` or a patched
factory), and ``pcisim.conf.register_opts`` called.
"""

# ruff: noqa: E402 (the backend is selected before most imports: see the NOTE below)

import contextlib
import threading
import uuid

from pcisim import concurrency

# NOTE: a harness used directly, outside the pytest plugin, must still select the
# backend before its imports below bring in oslo.messaging.
concurrency.select_backend()

# isort: split
from pcisim import compute, dbaccess, exception, rpc, trace
from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim.api import app as api_app
from pcisim.compute import api as compute_api
from pcisim.compute import service as compute_service
from pcisim.conductor import rpcapi
from pcisim.conductor import service as conductor_service
from pcisim.db import archive
from pcisim.objects import base as objects_base
from pcisim.objects.instance import Instance
from pcisim.objects.pci_device import PciDeviceList
from pcisim.objects.service import Service
from pcisim.polling import wait_until

CONF = pcisim_conf.CONF
API_ACTOR = api_app.ACTOR


class InProcessConductor:
    """A conductor in this process, serving a topic of its own."""

    def __init__(self, transport_url=pcisim_conf.IN_PROCESS_TRANSPORT_URL):
        self.transport_url = transport_url
        self.topic = f"conductor-{uuid.uuid4().hex[:12]}"
        self.service = conductor_service.ConductorService(transport_url, topic=self.topic)
        self.manager = self.service.manager
        self.client_transport = None
        self._acting = contextlib.ExitStack()

    @property
    def calls(self):
        return self.manager.calls

    def start(self):
        self.service.start()
        self.client_transport = rpc.get_transport(url=self.transport_url)
        return self

    def stop(self):
        """Stop serving (again, harmlessly, if a test stopped the service already)."""
        self.service.stop()
        self.client_transport.cleanup()

    @contextlib.contextmanager
    def acting_as_compute(self, binary="test-compute"):
        """While the block runs, this process is a compute talking to this conductor."""
        CONF.set_override("topic", self.topic, group="conductor")
        objects_base.set_indirection_api(rpcapi.ConductorAPI(self.client_transport))
        dbaccess.forbid(binary)
        try:
            yield self
        finally:
            dbaccess.allow()
            objects_base.set_indirection_api(None)
            CONF.clear_override("topic", group="conductor")

    def __enter__(self):
        self.start()
        return self._acting.enter_context(self.acting_as_compute())

    def __exit__(self, *exc_info):
        self._acting.close()
        self.stop()


class ControlPlane:
    """A conductor and compute hosts in this process; the calling thread is the API.

    ``drivers`` maps host names to simulated hypervisors, which outlive the compute
    services (a restarted compute finds its hypervisor as it left it). Builds are
    asynchronous, as in a real cloud: ``wait_for`` polls an instance's state.
    """

    def __init__(
        self, drivers, device_specs, aliases, transport_url=pcisim_conf.IN_PROCESS_TRANSPORT_URL
    ):
        self.drivers = drivers
        self.device_specs = device_specs
        self.conductor = InProcessConductor(transport_url)
        self.compute_topic = f"compute-{uuid.uuid4().hex[:12]}"
        self.computes = {}
        self.api = None
        self.aliases = aliases
        self.context = pcisim_context.get_admin_context()
        self._stack = contextlib.ExitStack()

    def start(self):
        CONF.set_override("topic", self.compute_topic, group="compute")
        self.conductor.start()
        self._stack.enter_context(self.conductor.acting_as_compute("pcisim-api"))
        self.api = compute_api.API(self.conductor.client_transport, self.aliases)
        for host in self.drivers:
            self.start_compute(host)
        return self

    def stop(self):
        """Stop every service at once (each takes about a second to stop polling)."""
        stoppers = [threading.Thread(target=service.stop) for service in self.computes.values()]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()
        self.computes.clear()
        self._stack.close()
        self.conductor.stop()
        CONF.clear_override("topic", group="compute")

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()

    # ------------------------------------------------------------ computes

    def start_compute(self, host):
        service = compute_service.ComputeService(
            host, self.drivers[host], self.device_specs, self.conductor.transport_url
        )
        service.start()
        self.computes[host] = service
        return service

    def stop_compute(self, host, forced_down=False):
        """Stop a compute; ``forced_down`` also tells the control plane it is down."""
        self.computes.pop(host).stop()
        if forced_down:
            self.set_forced_down(host, True)

    def restart_compute(self, host):
        """Start a compute again (stopping it first if it runs) as the operator would."""
        if host in self.computes:
            self.stop_compute(host)
        self.set_forced_down(host, False)
        return self.start_compute(host)

    def set_forced_down(self, host, forced_down):
        record = Service.get_by_host_and_binary(self.context, host, compute.BINARY)
        record.forced_down = forced_down
        record.save()

    def run_periodic(self, host=None):
        """Run the periodic resource update of one compute, or of every one."""
        for name, service in self.computes.items():
            if host in (None, name):
                with trace.acting_as(service.actor):
                    service.manager.update_available_resource(pcisim_context.get_admin_context())

    # ----------------------------------------------------------- instances

    def boot(self, name="vm", pci_requests=None, **flavor):
        """Create an instance and wait for its build to end; returns (uuid, vm_state).

        Like an API request, each boot and delete has a request context (and so a
        traced flow) of its own."""
        with trace.acting_as(API_ACTOR):
            context = pcisim_context.get_admin_context()
            instance = self.api.create(context, name, pci_requests=pci_requests, **flavor)
        return instance.uuid, self.wait_for(instance.uuid)

    def delete(self, instance_uuid, timeout=30.0):
        """Delete an instance and wait until it is gone and holds no PCI device."""
        with trace.acting_as(API_ACTOR):
            context = pcisim_context.get_admin_context()
            self.api.delete(context, Instance.get_by_uuid(context, instance_uuid))
        self.wait_for(instance_uuid, done=("deleted",), timeout=timeout)
        wait_until(
            lambda: not self._held_devices(instance_uuid),
            timeout,
            f"the devices of {instance_uuid} to be freed",
        )

    def _held_devices(self, instance_uuid):
        with dbaccess.granted():
            return list(PciDeviceList.get_by_instance_uuid(self.context, instance_uuid))

    def wait_for(self, instance_uuid, done=("active", "error"), timeout=30.0):
        """The instance once its vm_state is in ``done`` (or it is deleted, for
        ``done=("deleted",)``); ``TimeoutError`` otherwise."""
        return wait_until(
            lambda: (state := self._state(instance_uuid)) in done and state,
            timeout,
            f"instance {instance_uuid} to be {' or '.join(done)}",
        )

    def _state(self, instance_uuid):
        with dbaccess.granted():
            try:
                return Instance.get_by_uuid(self.context, instance_uuid).vm_state
            except exception.InstanceNotFound:
                return "deleted"

    def wsgi_app(self):
        """The HTTP API over this control plane, as a WSGI (Flask) application."""
        return api_app.create_app(api_app.Api(compute=self.api))

    def archive(self, max_rows=10000):
        """Run archive_deleted_rows as an operator would (directly on the database)."""
        with dbaccess.granted():
            return archive.archive_deleted_rows(self.context, max_rows=max_rows)
