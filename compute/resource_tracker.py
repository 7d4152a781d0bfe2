"""The resource tracker of one compute node: CPU, memory, disk and PCI devices.

It keeps the node's usage in step with what runs on it. ``update_available_resource``
(the periodic task) reads the hypervisor, syncs the PCI tracker with its report,
frees what instances that are no longer on the node still hold (``clean_usage``),
recounts the usage and saves the node, its PCI inventory and its devices. Claims and
frees come from builds and deletes. One lock guards the tracker's state: the periodic
task and the RPC handlers run in different threads.

The scheduler allocates from the node's inventory (``[scheduler] claim_mode =
allocations``); a claim then takes devices only from the PCI pools the allocation
names. When the instances on the node change, and at start-up, the periodic run heals
the node's allocations from what the tracker holds (``ComputeNode.heal_allocations``).

Like everything on a compute, it reaches the database only through objects, so
through the conductor.
"""

import threading
import uuid as uuidlib

from oslo_log import log as logging

from pcisim import conf as pcisim_conf
from pcisim import exception, faults
from pcisim.objects import pci_device
from pcisim.objects.compute_node import ComputeNode
from pcisim.objects.instance import InstanceList
from pcisim.pci import capacity
from pcisim.pci.manager import PciDevTracker

LOG = logging.getLogger(__name__)
RESOURCES = (("vcpus", "vcpus"), ("memory_mb", "memory_mb"), ("local_gb", "root_gb"))
# The allocation resource of each usage key.
ALLOCATED_AS = {capacity.NODE_TOTALS[name]: name for name in capacity.NODE_TOTALS}


class ResourceTracker:
    """Usage of one node (``host``/``nodename``) of a driver."""

    def __init__(self, host, nodename, driver, device_specs):
        self.host = host
        self.nodename = nodename
        self.driver = driver
        self.device_specs = device_specs
        self.compute_node = None
        self.pci_tracker = None
        self._usage = {}  # instance uuid -> {vcpus, memory_mb, local_gb}
        self._healed_for = None  # the instances the allocations were last healed for
        self._unreleased = set()  # instances freed here whose allocation end is unwritten
        self._agreed = {}  # node field -> (pools it held, pools found equal to them)
        self._changes = 0  # claims and frees begun: see ``changes``
        self._lock = threading.Lock()

    # -------------------------------------------------------------- periodic

    def changes(self):
        """How many claims and frees this tracker has begun. A read of the node's
        instances made after this returned a number holds every instance the tracker
        holds, and none it has freed, for as long as the number stays: a build's row
        is written before its claim, a delete's soft-delete before its free."""
        return self._changes

    def update_available_resource(self, context, read=None):
        """Sync with the hypervisor and the instances the database puts on this node;
        what this tracker held for any other instance (a delete that stopped half-way,
        a build put in ERROR) is freed, and its allocation here ends in the same write.

        ``read``: (this node's instances, ``changes()`` as it was before they were
        read), from one read of the whole host; they are read again here if a claim
        or a free began since.

        Returns the uuids of those instances. A PCI device whose row has vanished does
        not fail the run: the PCI tracker drops it and re-creates it from the next
        report.
        """
        faults.point(faults.BEFORE_PERIODIC, node=self.nodename)
        resources = self.driver.get_available_resource(self.nodename)
        with self._lock:
            self._sync_compute_node(context, resources)
            self.pci_tracker.update_devices_from_hypervisor_resources(resources["pci_devices"])
            instances, read_at = read or (None, None)
            if read_at != self._changes:
                instances = InstanceList.get_by_host_and_node(context, self.host, self.nodename)
            live = {instance.uuid for instance in instances}
            gone = (self.pci_tracker.holders() | set(self._usage)) - live
            self.pci_tracker.clean_usage(live)
            self._usage = {instance.uuid: _usage_of(instance) for instance in instances}
            self._save_yielding_to_other_writers(context, released=gone)
            self._heal_allocations_if_changed()
            return set(self._usage)

    def _heal_allocations_if_changed(self):
        if pcisim_conf.CONF.scheduler.claim_mode != "allocations":
            return
        holders = frozenset(self._usage)
        if holders == self._healed_for:
            return
        held = {uuid: self._allocated_to(uuid) for uuid in holders}
        healed = self.compute_node.heal_allocations(held)
        if healed["added"] or healed["removed"]:
            LOG.info("Node %s: healed allocations %s", self.nodename, healed)
        self._healed_for = holders

    def _allocated_to(self, instance_uuid):
        usage = self._usage[instance_uuid]
        return {
            **{ALLOCATED_AS[resource]: usage[resource] for resource, _ in RESOURCES},
            **self.pci_tracker.pci_resources_of(instance_uuid),
        }

    def _sync_compute_node(self, context, resources):
        if self.compute_node is None:
            self.compute_node = self._find_or_create_node(context, resources)
            self.pci_tracker = PciDevTracker(
                context, self.compute_node, self.device_specs, resources.get("numa_sockets")
            )
        for name in ("vcpus", "memory_mb", "local_gb"):
            if getattr(self.compute_node, name) != resources[name]:
                setattr(self.compute_node, name, resources[name])

    def _find_or_create_node(self, context, resources):
        try:
            return ComputeNode.get_by_host_and_nodename(context, self.host, self.nodename)
        except exception.ComputeHostNotFound:
            node = ComputeNode(
                context,
                uuid=str(uuidlib.uuid4()),
                host=self.host,
                hypervisor_hostname=self.nodename,
                vcpus=resources["vcpus"],
                memory_mb=resources["memory_mb"],
                local_gb=resources["local_gb"],
            )
            node.create()
            LOG.info("Registered compute node %s/%s", self.host, self.nodename)
            return node

    # ---------------------------------------------------------------- claims

    def instance_claim(self, context, instance, numa_cells=None, allocation=None):
        """Claim CPU, memory, disk and PCI devices for ``instance``, all or nothing;
        with ``allocation`` (the scheduler's), devices from the pools it names.

        A claim under an allocation is written with the instance's allocation
        (``allocate``): the scheduler's allocation already keeps every other boot
        off what it claims. Without one (legacy scheduling) the claim is written at
        once, for the scheduler reads the pools it leaves.

        Raises ``ComputeResourcesUnavailable`` naming what is short, or that another
        writer took a device first (``PciDeviceConflict``); then nothing is claimed.
        """
        with self._lock:
            self._changes += 1
            self._check_free(instance)
            try:
                devices = self.pci_tracker.claim_instance(
                    instance.uuid, instance.pci_requests, numa_cells, allocation
                )
            except exception.PciDeviceRequestFailed as error:
                raise exception.ComputeResourcesUnavailable(node=self.nodename, reason=str(error))
            self._usage[instance.uuid] = _usage_of(instance)
            if allocation is not None:
                return devices
            try:
                self._save(context)
            except exception.PciDeviceConflict as error:
                del self._usage[instance.uuid]
                self._save_node(context)
                raise exception.ComputeResourcesUnavailable(node=self.nodename, reason=str(error))
            return devices

    def claimed_devices(self, instance):
        """The devices ``instance`` holds here (claimed, or allocated)."""
        with self._lock:
            return self.pci_tracker.devices_of(instance.uuid)

    def allocate(self, context, instance):
        """Turn the instance's PCI claims into allocations, written with the instance's
        pending changes (a build's ACTIVE state) and the node's (the claim's usage and
        pools) in one round trip; ``PciDeviceConflict`` when another writer changed the
        devices since the claim, and then none is written."""
        with self._lock:
            devices = self.pci_tracker.allocate_instance(instance.uuid)
            try:
                self._save(context, instance=instance)
            except exception.PciDeviceConflict:
                self._save_node(context)
                raise
            return devices

    def free_instance(self, context, instance):
        """Release everything the instance holds on this node: its devices, its usage
        and, in the same write, its allocation here."""
        with self._lock:
            self._changes += 1
            self.pci_tracker.free_instance(instance.uuid)
            self._usage.pop(instance.uuid, None)
            self._save_yielding_to_other_writers(context, released={instance.uuid})

    def _check_free(self, instance):
        used = self._used()
        for resource, flavor_field in RESOURCES:
            wanted = getattr(instance, flavor_field) or 0
            total = getattr(self.compute_node, resource)
            if used[resource] + wanted > total:
                raise exception.ComputeResourcesUnavailable(
                    node=self.nodename,
                    reason=f"{resource}: {wanted} wanted, {total - used[resource]} free",
                )

    # ------------------------------------------------------------------ save

    def _used(self):
        return {
            resource: sum(usage[resource] for usage in self._usage.values())
            for resource, _ in RESOURCES
        }

    def _save(self, context, released=None, instance=None):
        """Save the devices and the node's usage, pools and inventory, and end the
        allocations of the ``released`` instances: in one round trip when devices
        changed or allocations end, and none when nothing did. With ``instance``, its
        pending changes travel with the devices and the node's, and are saved alone
        (the node's in a call of their own) if no device changed.

        On ``PciDeviceConflict`` nothing is saved and the PCI tracker holds the
        database's view again; the caller decides what the conflict means for it.
        """
        faults.point(faults.BEFORE_TRACKER_SAVE, node=self.nodename)
        node = self._stage_node()
        with node.obj_alternate_context(context):
            together = node if node.obj_what_changed() or released else None
            if instance is not None:
                if not self.pci_tracker.save(context, together, instance=instance):
                    instance.save()
            elif self.pci_tracker.save(context, together, released):
                released = None
        faults.point(faults.AFTER_TRACKER_SAVE, node=self.nodename)
        self._save_node(context, released)

    def _save_yielding_to_other_writers(self, context, released=()):
        """Save; if another writer changed a device first, the database's view wins
        (a free or a periodic run has nothing to retry) and the node is saved with it,
        ending the ``released`` instances' allocations, and those of instances freed
        here before by a save that failed (the conductor unreachable, say): the next
        save that succeeds ends them."""
        self._unreleased.update(released)
        ending = sorted(self._unreleased) or None
        try:
            self._save(context, ending)
        except exception.PciDeviceConflict:
            self._save_node(context, ending)
        self._unreleased.difference_update(ending or ())

    def _save_node(self, context, released=None):
        """Save the node's staged changes, if any, and end the ``released`` instances'
        allocations: a save with nothing to write would still be a round trip, one per
        node and periodic run (with 1,000 nodes, half of the run's round trips)."""
        node = self._stage_node()
        with node.obj_alternate_context(context):
            if released:
                node.save_with_devices(pci_device.NO_CHANGES, released=released)
            elif node.obj_what_changed():
                node.save()

    def _stage_node(self):
        """Set the node's usage, pools and inventory where they changed; return it."""
        node = self.compute_node
        for resource, used in self._used().items():
            if getattr(node, f"{resource}_used") != used:
                setattr(node, f"{resource}_used", used)
        self._publish(node, "pci_device_pools", self.pci_tracker.stats.to_device_pools_obj())
        self._publish(node, "pci_inventory", self.pci_tracker.inventory())
        return node

    def _publish(self, node, field, pools):
        """Set the node's ``field`` to ``pools`` where they differ from what it holds.

        The PCI tracker hands out the same inventory object until it changes, so the
        comparison (two JSON texts) is made once per pair of objects, not per save.
        """
        held = getattr(node, field)
        agreed = self._agreed.get(field)
        if held is pools or (agreed is not None and agreed[0] is held and agreed[1] is pools):
            return
        if held is None or held.to_json() != pools.to_json():
            setattr(node, field, pools)
        else:
            self._agreed[field] = (held, pools)


def _usage_of(instance):
    return {resource: getattr(instance, field) or 0 for resource, field in RESOURCES}
