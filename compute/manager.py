"""The compute manager: the RPC endpoint of a compute host and its periodic task.

A compute service manages one or more nodes of its driver, each with its own
``ResourceTracker``. Builds arrive from the conductor, deletes from the API; every
write goes through objects, so through the conductor.

A build or a delete can stop half-way: the compute is killed, a message is lost with a
broker restart, the conductor does not answer. What is left to do is always in the
instance's row (BUILDING, or being deleted), and the periodic task finishes what no
flow of this process handles any more (``_finish_interrupted``): an interrupted build
ends in ERROR with a fault and releases what it held, an interrupted delete is
completed. Device changes the PCI tracker could not save are saved by the next run.
"""

import time

from oslo_concurrency import lockutils
from oslo_log import log as logging
from oslo_utils import timeutils

from pcisim import conf as pcisim_conf
from pcisim import exception, faults
from pcisim.compute import resource_tracker as rt
from pcisim.compute import states
from pcisim.objects.instance import InstanceList

LOG = logging.getLogger(__name__)
CONF = pcisim_conf.CONF


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
        self._instance_locks = lockutils.Semaphores()  # one flow per instance at a time
        self._unfinished = {}  # uuid -> (its row's state, when first seen so)
        self._aborted = set()  # builds given up as interrupted: a late message is dropped

    # ------------------------------------------------------------- startup

    def init_host(self, context):
        """Register the nodes, sync them, and finish deletes a crash interrupted.

        Builds left BUILDING end in ERROR at a later periodic run (see
        ``_finish_interrupted``), unless a build message sent while this compute was
        down arrives first.
        """
        self._sync_nodes(context)
        interrupted = [
            instance
            for instance in InstanceList.get_by_host_and_node(context, self.host)
            if _being_deleted(instance)
        ]
        for instance in interrupted:
            LOG.info("Finishing the delete of %s interrupted on %s", instance.uuid, self.host)
            self._delete(context, instance)
        # NOTE: no message has been taken yet, so only those deletes can have changed
        # what the first sync saw; without them a second sync is a second full pass.
        if interrupted:
            self._sync_nodes(context)

    def update_available_resource(self, context):
        """The periodic task: sync every node, stop guests of instances no longer on
        it (deleted while this compute was down), and finish the builds and deletes
        that were interrupted; one node's or instance's failure never stops the rest."""
        self._sync_nodes(context)
        try:
            self._finish_interrupted(context)
        except Exception:
            LOG.exception("Finishing interrupted builds and deletes on %s failed", self.host)

    def _sync_nodes(self, context):
        """Sync every node, from one read of the host's instances (one round trip, not
        one per node: with 250 nodes a host, those reads were three quarters of a
        run's CPU); a node that claimed or freed since reads its own again."""
        reads = self._read_instances_by_node(context)
        for node, tracker in self.trackers.items():
            try:
                live = tracker.update_available_resource(context, reads.get(node))
                self._reap_guests(node, live)
            except Exception:
                LOG.exception("Periodic resource update of node %s/%s failed", self.host, node)

    def _read_instances_by_node(self, context):
        """{node: (its live instances, its tracker's ``changes()`` before the read)};
        empty when the read fails, and then each node reads its own."""
        changes = {node: tracker.changes() for node, tracker in self.trackers.items()}
        try:
            instances = InstanceList.get_by_host_and_node(context, self.host)
        except Exception:
            LOG.exception("Reading the instances of %s failed; each node reads its own", self.host)
            return {}
        by_node = {node: [] for node in self.trackers}
        for instance in instances:
            if instance.node in by_node:
                by_node[instance.node].append(instance)
        return {node: (by_node[node], changes[node]) for node in self.trackers}

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
        failure puts the instance in ERROR with a fault and releases what it held. A
        build this compute gave up as interrupted (a message that came too late) is
        dropped.
        """
        with self._instance_lock(instance.uuid):
            if instance.uuid in self._aborted:
                LOG.warning("Dropping the late build of %s: it was given up", instance.uuid)
                return
            self._build(context, instance, node, request_spec)

    def _build(self, context, instance, node, request_spec):
        tracker = self.trackers[node]
        try:
            tracker.instance_claim(
                context, instance, request_spec.get("numa_cells"), request_spec.get("allocation")
            )
        except exception.ComputeResourcesUnavailable as error:
            LOG.info("Claim of %s on %s/%s failed: %s", instance.uuid, self.host, node, error)
            self.compute_task_api.reschedule(context, instance, request_spec, str(error))
            return
        except Exception as error:
            LOG.exception("Claim of %s on %s/%s failed", instance.uuid, self.host, node)
            self._fail_build(context, instance, node, error)
            return
        try:
            self._spawn_and_allocate(context, tracker, instance, node)
        except Exception as error:
            LOG.exception("Build of %s on %s/%s failed", instance.uuid, self.host, node)
            self._fail_build(context, instance, node, error)

    def _fail_build(self, context, instance, node, error):
        """ERROR with ``error`` as its fault, then release what the build holds.

        If the conductor cannot record the ERROR now (the instance may even be ACTIVE
        already, its reply lost), the guest and devices stay as they are, and the
        periodic task settles the instance by what its row says.
        """
        try:
            instance.mark_error(error, self.host)
        except Exception:
            LOG.exception("Could not put %s in ERROR; a periodic run will settle it", instance.uuid)
            return
        self._release(context, instance, node)

    def _release(self, context, instance, node):
        """Stop the guest and free the devices of ``instance`` on ``node``."""
        self.driver.destroy(node, instance.uuid)
        if node in self.trackers:
            self.trackers[node].free_instance(context, instance)

    def _spawn_and_allocate(self, context, tracker, instance, node):
        """Start the guest with the devices claimed for it, then write their
        allocation and the instance ACTIVE in one round trip."""
        faults.point(faults.BETWEEN_CLAIM_AND_ALLOCATE, instance=instance)
        devices = tracker.claimed_devices(instance)
        self.driver.spawn(node, instance.uuid, [device.address for device in devices])
        instance.vm_state, instance.task_state = states.ACTIVE, None
        instance.launched_at = timeutils.utcnow(with_timezone=True)
        tracker.allocate(context, instance)

    # -------------------------------------------------------------- delete

    def terminate_instance(self, context, instance):
        """Stop ``instance``, soft-delete it and free what it holds on this host.

        The API recorded the delete (task state ``deleting``) before it sent this, so
        the first write here is the soft-delete; an API from before it did is the
        one whose delete is recorded here first. An instance deleted already (a delete
        finished by the periodic task before this message came) only has what it
        still holds here released.
        """
        with self._instance_lock(instance.uuid):
            try:
                if instance.task_state != states.DELETING:
                    instance.task_state = states.DELETING
                    instance.save()
                self._delete(context, instance)
            except exception.InstanceNotFound:
                LOG.info("%s is deleted already; releasing what it held here", instance.uuid)
                self._release(context, instance, instance.node)

    def _delete(self, context, instance):
        """Each step can be repeated: a delete interrupted at any of them is finished
        by running it again (the row stays ``deleting`` until it is soft-deleted, DELETED
        in the same transaction)."""
        self.driver.destroy(instance.node, instance.uuid)
        instance.vm_state, instance.task_state = states.DELETED, None
        instance.terminated_at = timeutils.utcnow(with_timezone=True)
        instance.destroy()
        faults.point(faults.AFTER_SOFT_DELETE, instance=instance)
        if instance.node in self.trackers:
            self.trackers[instance.node].free_instance(context, instance)

    # ------------------------------------------------- interrupted flows

    def _finish_interrupted(self, context):
        """Finish the builds and deletes of this host that no flow handles any more.

        An instance is interrupted once its row has stayed unfinished and unchanged,
        with no flow of this process on it, for longer than an RPC call may take
        (``[DEFAULT] rpc_response_timeout``): by then its message is lost rather than
        late, or its flow stopped (a crash, a conductor that did not answer). A build
        ends in ERROR with a fault and releases what it held; a delete is completed.
        """
        grace = CONF.rpc_response_timeout
        now = time.monotonic()
        unfinished = {}
        for instance in InstanceList.get_by_host_and_node(context, self.host):
            if instance.vm_state != states.BUILDING and not _being_deleted(instance):
                continue
            state = (instance.vm_state, instance.task_state, instance.updated_at)
            seen, since = self._unfinished.get(instance.uuid, (state, now))
            unfinished[instance.uuid] = (state, since if seen == state else now)
            if seen == state and now - since >= grace:
                self._finish(context, instance)
        self._unfinished = unfinished

    def _finish(self, context, instance):
        try:
            with self._instance_lock(instance.uuid, blocking=False):
                if instance.vm_state == states.BUILDING:
                    self._abort_build(context, instance)
                else:
                    LOG.info("Finishing the interrupted delete of %s", instance.uuid)
                    self._delete(context, instance)
        except lockutils.AcquireLockFailedException:
            return  # a flow took it up meanwhile
        except Exception:
            LOG.exception("Could not finish the interrupted flow of %s", instance.uuid)

    def _abort_build(self, context, instance):
        LOG.warning(
            "The build of %s on %s was interrupted; it ends in ERROR", instance.uuid, self.host
        )
        self._aborted.add(instance.uuid)
        node = instance.node
        error = exception.BuildAbortException(
            instance_uuid=instance.uuid,
            reason=f"it stopped on {self.host} before it ended (a crash, a lost message "
            "or an unreachable conductor)",
        )
        instance.mark_error(error, self.host)
        self._release(context, instance, node)

    def _instance_lock(self, instance_uuid, blocking=True):
        return lockutils.lock(
            instance_uuid, semaphores=self._instance_locks, do_log=False, blocking=blocking
        )


def _being_deleted(instance):
    """Whether a delete of ``instance`` began: ``deleting``, or DELETED but not yet
    soft-deleted (as older versions, which saved the state before the soft-delete,
    could leave it)."""
    return instance.task_state == states.DELETING or instance.vm_state == states.DELETED
