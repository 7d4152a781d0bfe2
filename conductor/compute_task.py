"""The conductor's compute-task endpoint: creating, scheduling and rescheduling builds.

RPC API history (namespace ``compute_task``):
  1.0 - schedule_and_build_instances, reschedule
"""

import functools

import oslo_messaging as messaging
from oslo_log import log as logging

from conductor import scheduler
from pcisim import conf as pcisim_conf
from pcisim import dbaccess, exception

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

    @_with_database
    def schedule_and_build_instances(self, context, instance, request_spec):
        """Create ``instance`` (a new, unsaved Instance), pick a node and cast the build.

        Returns the created instance: BUILDING on its way to a node, or ERROR with a
        "No valid host" fault when none fits.
        """
        instance.create()
        self._schedule(context, instance, dict(request_spec, tried=[]))
        return instance

    @_with_database
    def reschedule(self, context, instance, request_spec, reason):
        """A claim failed on the last node tried: try another, up to the attempt limit."""
        attempts = pcisim_conf.CONF.scheduler.max_attempts
        if len(request_spec["tried"]) >= attempts:
            error = exception.NoValidHost(reason=f"{attempts} attempts failed; the last: {reason}")
            instance.mark_error(error)
            return
        self._schedule(context, instance, request_spec)

    def _schedule(self, context, instance, request_spec):
        try:
            host, node = scheduler.select_destination(
                context, instance, request_spec.get("numa_cells"), request_spec["tried"]
            )
        except exception.NoValidHost as error:
            LOG.info("No node for %s: %s", instance.uuid, error)
            instance.mark_error(error)
            return
        instance.host, instance.node, instance.task_state = host, node, "spawning"
        instance.save()
        request_spec["tried"].append([host, node])
        self.compute_rpcapi.build_and_run_instance(context, instance, host, node, request_spec)
