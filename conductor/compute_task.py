"""The conductor's compute-task endpoint: creating, scheduling and rescheduling builds.

RPC API history (namespace ``compute_task``):
  1.0 - schedule_and_build_instances, reschedule
"""

import functools

import oslo_messaging as messaging
from oslo_log import log as logging

from pcisim import conf as pcisim_conf
from pcisim import dbaccess, exception
from pcisim.conductor import scheduler
from pcisim.db import allocations as db_allocations
from pcisim.objects.instance_fault import InstanceFault

LOG = logging.getLogger(__name__)
NAMESPACE = "compute_task"
RPC_API_VERSION = "1.0"


def _with_database(method):
    """Run an endpoint method in a thread granted database access (objects run here)."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with dbaccess.granted():
            return method(*args, **kwargs)

    return wrapper


class ComputeTaskManager:
    """Builds instances: creates their records, picks nodes, retries on failed claims."""

    target = messaging.Target(namespace=NAMESPACE, version=RPC_API_VERSION)

    def __init__(self, compute_rpcapi):
        self.compute_rpcapi = compute_rpcapi
        self.scheduler = scheduler.Scheduler()

    @_with_database
    def schedule_and_build_instances(self, context, instance, request_spec):
        """Pick a node for ``instance`` (a new, unsaved Instance), create it there and
        cast the build.

        Returns the created instance: BUILDING on its way to a node, or ERROR with a
        "No valid host" fault when none fits. The row is written with its node chosen
        already, so that whatever stops this call half-way, the compute that owns the
        instance sees it and finishes it (``ComputeManager._finish_interrupted``).
        """
        request_spec = dict(request_spec, tried=[])
        try:
            host, node = self._select(context, instance, request_spec, instance.create)
        except exception.NoValidHost as error:
            instance.vm_state, instance.task_state = "error", None
            instance.create()
            InstanceFault.record(context, instance.uuid, error)
            return instance
        self.compute_rpcapi.build_and_run_instance(context, instance, host, node, request_spec)
        return instance

    @_with_database
    def reschedule(self, context, instance, request_spec, reason):
        """A claim failed on the last node tried: release its allocation there and try
        another node, up to the attempt limit."""
        db_allocations.release(context, instance.uuid)
        attempts = pcisim_conf.CONF.scheduler.max_attempts
        if len(request_spec["tried"]) >= attempts:
            error = exception.NoValidHost(reason=f"{attempts} attempts failed; the last: {reason}")
            instance.mark_error(error)
            return
        try:
            host, node = self._select(context, instance, request_spec, instance.save)
        except exception.NoValidHost as error:
            instance.mark_error(error)
            return
        self.compute_rpcapi.build_and_run_instance(context, instance, host, node, request_spec)

    def _select(self, context, instance, request_spec, write):
        """A (host, node) not tried yet, recorded as tried, the instance's row written
        with it by ``write`` (its ``create`` or ``save``), and in allocations mode its
        allocation there, in ``request_spec["allocation"]``; ``NoValidHost`` if none."""

        def record(host, node):
            instance.host, instance.node, instance.task_state = host, node, "spawning"
            # NOTE: in the scheduler's transaction, which is the one of ``context``.
            with instance.obj_alternate_context(context):
                write()

        numa_nodes, tried = request_spec.get("numa_nodes"), request_spec["tried"]
        # NOTE: a guest of numa_nodes cells is placed anew on each node tried; the
        # cells of the last node chosen travel in numa_cells, to its compute's claim.
        numa_cells = None if numa_nodes else request_spec.get("numa_cells")
        try:
            if pcisim_conf.CONF.scheduler.claim_mode == "legacy":
                host, node = scheduler.select_destination(context, instance, numa_cells, tried)
                record(host, node)
            else:
                host, node, allocation, chosen = self.scheduler.claim_destination(
                    context, instance, numa_cells, tried, record, numa_nodes=numa_nodes
                )
                request_spec["allocation"], request_spec["numa_cells"] = allocation, chosen
        except exception.NoValidHost as error:
            LOG.info("No node for %s: %s", instance.uuid, error)
            raise
        tried.append([host, node])
        return host, node
