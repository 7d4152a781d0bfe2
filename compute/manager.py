"""The compute manager: the RPC endpoint of a compute host and its periodic task.

A compute service manages one or more nodes of its driver, each with its own
``ResourceTracker``. Builds arrive from the conductor, deletes from the API; every
write goes through objects, so through the conductor.
"""

from oslo_log import log as logging
from oslo_utils import timeutils

from compute import resource_tracker as rt
from compute import states
from objects.instance import InstanceList
from pcisim import exception, faults

LOG = logging.getLogger(__name__)


class ComputeManager:
    """RPC endpoint of the topic ``compute`` on one host."""

    def __init__(self, host, driver, device_specs, compute_task_api):
        self.host = host
        self.driver = driver
        self.compute_task_api = compute_task_api
        self.trackers = {
            node: rt.ResourceTracker(host, node, driver, device_specs)
            for node in driver.get_available_nodes()
        }

    # ------------------------------------------------------------- startup

    def init_host(self, context):
        """Register the nodes, sync them, and finish deletes a crash interrupted."""
        self.update_available_resource(context)
        interrupted = [
            instance
            for instance in InstanceList.get_by_host_and_node(context, self.host)
            if instance.task_state == states.DELETING
        ]
        for instance in interrupted:
            LOG.info("Finishing the delete of %s interrupted on %s", instance.uuid, self.host)
            self._delete(context, instance)
        # NOTE: no message has been taken yet, so only those deletes can have changed
        # what the first sync saw; without them a second sync is a second full pass.
        if interrupted:
            self.update_available_resource(context)

    def update_available_resource(self, context):
        """The periodic task: sync every node and stop guests of instances no longer
        on it (deleted while this compute was down); one node's failure never stops
        the rest."""
        for node, tracker in self.trackers.items():
            try:
                live = tracker.update_available_resource(context)
                self._reap_guests(node, live)
            except Exception:
                LOG.exception("Periodic resource update of node %s/%s failed", self.host, node)

    def _reap_guests(self, node, live):
        for instance_uuid in self.driver.list_instances(node) - live:
            LOG.info(
                "Stopping guest %s on %s/%s: its instance is gone", instance_uuid, self.host, node
            )
            self.driver.destroy(node, instance_uuid)

    # --------------------------------------------------------------- build

    def build_and_run_instance(self, context, instance, node, request_spec):
        """Claim, allocate and start ``instance`` on ``node``, or hand it back.

        A claim that does not fit asks the conductor to try another host. Any other
        failure puts the instance in ERROR with a fault and releases what it held.
        """
        tracker = self.trackers[node]
        try:
            tracker.instance_claim(context, instance, request_spec.get("numa_cells"))
        except exception.ComputeResourcesUnavailable as error:
            LOG.info("Claim of %s on %s/%s failed: %s", instance.uuid, self.host, node, error)
            self.compute_task_api.reschedule(context, instance, request_spec, str(error))
            return
        try:
            self._allocate_and_spawn(context, tracker, instance, node)
        except Exception as error:
            LOG.exception("Build of %s on %s/%s failed", instance.uuid, self.host, node)
            tracker.free_instance(context, instance)
            self.driver.destroy(node, instance.uuid)
            instance.mark_error(error, self.host)

    def _allocate_and_spawn(self, context, tracker, instance, node):
        faults.point(faults.BETWEEN_CLAIM_AND_ALLOCATE, instance=instance)
        devices = tracker.allocate(context, instance)
        self.driver.spawn(node, instance.uuid, [device.address for device in devices])
        instance.vm_state, instance.task_state = states.ACTIVE, None
        instance.launched_at = timeutils.utcnow(with_timezone=True)
        instance.save()

    # -------------------------------------------------------------- delete

    def terminate_instance(self, context, instance):
        """Stop ``instance``, soft-delete it and free what it holds on this host."""
        instance.task_state = states.DELETING
        instance.save()
        self._delete(context, instance)

    def _delete(self, context, instance):
        self.driver.destroy(instance.node, instance.uuid)
        instance.vm_state, instance.task_state = states.DELETED, None
        instance.terminated_at = timeutils.utcnow(with_timezone=True)
        instance.save()
        instance.destroy()
        faults.point(faults.AFTER_SOFT_DELETE, instance=instance)
        self.trackers[instance.node].free_instance(context, instance)
