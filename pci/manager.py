"""The PCI device tracker of one compute node.

``PciDevTracker`` holds the master copy of the node's PCI devices: the hypervisor says
which devices exist, ``[pci] device_spec`` says which of them are assignable, and the
tracker decides their statuses (claims, allocations, removals). The database holds
what the tracker last saved, written through the conductor: ``save`` sends every
device changed since the last save in one round trip, and none when nothing changed.

If the conductor reports that a device's row is gone (``PciDeviceNotFound``: an
operator or an archive run removed it), the tracker does not fail. It drops its copy
of that device, and the next hypervisor report re-creates it as a new, complete row.

Every save is a compare-and-swap on the devices' holders: it tells the database the
status and instance each row held when the tracker last read or wrote it. If another
writer changed one since (a second compute serving the same node, say a stale one
that has not noticed it was replaced), nothing is written, the tracker reloads the
database's view, and the caller gets ``PciDeviceConflict``: two instances never hold
one device.
"""

import collections

from oslo_log import log as logging

from pcisim import exception
from pcisim.objects import fields, pci_device_state
from pcisim.objects.pci_device import PciDevice, PciDeviceList
from pcisim.objects.pci_device_pool import PciDevicePool, PciDevicePoolList
from pcisim.pci import capacity
from pcisim.pci import stats as pci_stats
from pcisim.pci.report import REPORTED_FIELDS, normalized_report, report_of

LOG = logging.getLogger(__name__)
S = fields.PciDeviceStatus
# Statuses in which a device that left the hypervisor's report is removed at once:
# those of the state table's ``remove`` (a device without an owner).
REMOVABLE = pci_device_state.TRANSITIONS["remove"].sources


# An inventory key no device has: a device not yet noted.
_UNKNOWN = object()


class PciDevTracker:
    """The master copy of one compute node's PCI devices, their pools and holders."""

    def __init__(self, context, compute_node, device_specs, numa_sockets=None):
        """Load the node's devices from the database (one round trip)."""
        self._context = context
        self.node_id = compute_node.id
        self._specs = device_specs
        self._numa_sockets = numa_sockets
        self._load(context)

    def _load(self, context):
        self._devices = {}  # address -> PciDevice
        self._tags = {}  # address -> device_spec tags
        self._held_by = {}  # instance uuid -> {address: PciDevice}
        self._dirty = {}  # address -> PciDevice changed since the last save
        self._stored = {}  # address -> holder fields as last read or written
        self._held_reports = {}  # address -> report applied once the device is free
        self._pending_removal = set()
        self._inventory_keys = {}  # address -> its inventory pool's key, None if out
        self._inventory = None  # the inventory of those keys, until one changes
        self.stats = pci_stats.PciDeviceStats(
            tags_for=self._tags_for,
            numa_sockets=self._numa_sockets,
        )
        for device in PciDeviceList.get_by_compute_node(context, self.node_id):
            self._track(device)
            self._stored[device.address] = _holder(device)
        self._link_all()
        self._settle_pf_statuses()

    # ------------------------------------------------------------- queries

    @property
    def devices(self):
        return list(self._devices.values())

    def devices_of(self, instance_uuid):
        """Devices claimed by or allocated to an instance."""
        return list(self._held_by.get(instance_uuid, {}).values())

    def holders(self):
        return set(self._held_by)

    def inventory(self):
        """What the scheduler may allocate of this node's devices: the pools of every
        device in the inventory, with totals and groups (``pci/capacity.py``), and the
        node's NUMA sockets, which the ``socket`` NUMA policy plans with.

        The same object until a device joins, leaves or changes pool: claims and
        frees, most of what a tracker does, leave the inventory as it is, and the
        compute publishes it only when it changed.
        """
        if self._inventory is None:
            counts = collections.Counter(k for k in self._inventory_keys.values() if k)
            self._inventory = PciDevicePoolList.of(
                [
                    PciDevicePool(**{**key._asdict(), "tags": dict(key.tags)}, count=count)
                    for key, count in sorted(counts.items(), key=str)
                ],
                self._numa_sockets,
            )
        return self._inventory

    def _note_inventory(self, device):
        key = capacity.inventory_key(device, self._tags_for(device))
        if self._inventory_keys.get(device.address, _UNKNOWN) != key:
            self._inventory_keys[device.address] = key
            self._inventory = None

    def pci_resources_of(self, instance_uuid):
        """{PCI resource name: devices} that an instance holds, by inventory pool."""
        return dict(
            collections.Counter(
                capacity.resource_name(capacity.PoolKey.of(device, self._tags_for(device)))
                for device in self.devices_of(instance_uuid)
            )
        )

    def _tags_for(self, device):
        return self._tags.get(device.address, {})

    # -------------------------------------------------- hypervisor sync

    def update_devices_from_hypervisor_resources(self, reported):
        """Bring the tracked devices in line with the hypervisor's full report.

        Entries that are malformed are skipped with a warning naming them; entries the
        device_spec does not allow are ignored. New devices are created, free devices
        take changed values at once, busy ones when freed. A device missing from the
        report is removed when free, and otherwise kept (with a warning) until freed.
        """
        entries = list(self._assignable(reported))
        seen = {values["address"] for values in entries}
        ambiguous = self._duplicated(entries)
        for values in entries:
            if values["address"] in ambiguous:
                continue
            if values["address"] in self._devices:
                self._refresh(self._devices[values["address"]], values)
            else:
                self._create(values)
        for address in list(self._devices.keys() - seen):
            self._vanished(self._devices[address])
        self._link_all()
        self._settle_pf_statuses()

    def _duplicated(self, entries):
        """Addresses reported more than once: which entry is right cannot be told, so
        none is applied (a tracked device stays as it was, a new one waits)."""
        counts = collections.Counter(values["address"] for values in entries)
        duplicated = {address for address, count in counts.items() if count > 1}
        for address in sorted(duplicated):
            LOG.warning(
                "Node %s: PCI device %s is reported %d times; ignoring it in this report",
                self.node_id,
                address,
                counts[address],
            )
        return duplicated

    def _assignable(self, reported):
        for entry in reported:
            values = self._valid_entry(entry)
            if values is not None and self._specs.match(values) is not None:
                yield values

    def _valid_entry(self, entry):
        try:
            return normalized_report(entry)
        except exception.Invalid as error:
            LOG.warning(
                "Node %s: skipping malformed PCI device report %r: %s", self.node_id, entry, error
            )
            return None

    def _create(self, values):
        device = PciDevice(
            self._context,
            compute_node_id=self.node_id,
            status=S.AVAILABLE,
            instance_uuid=None,
            request_id=None,
            **values,
        )
        self._track(device)
        self._dirty[device.address] = device

    def _refresh(self, device, values):
        self._pending_removal.discard(device.address)
        if device.status == S.AVAILABLE:
            self._apply_report(device, values)
        elif _differs(device, values):
            self._held_reports[device.address] = values

    def _apply_report(self, device, values):
        self._held_reports.pop(device.address, None)
        if not _differs(device, values):
            return
        for name in REPORTED_FIELDS:
            if getattr(device, name) != values.get(name):
                setattr(device, name, values.get(name))
        self._tags[device.address] = self._specs.tags_for(values)
        self._note_inventory(device)
        self.stats.update_device(device)
        self._dirty[device.address] = device

    def _vanished(self, device):
        if device.status in REMOVABLE and device.instance_uuid is None:
            self._changed(device.remove())
        elif device.status not in (S.REMOVED, S.DELETED):
            if device.address not in self._pending_removal:
                LOG.warning(
                    "Node %s: PCI device %s is gone from the hypervisor while %s; "
                    "it is kept until freed, then removed",
                    self.node_id,
                    device.address,
                    device.status,
                )
            self._pending_removal.add(device.address)

    # ------------------------------------------------------------ claims

    def claim_instance(self, instance_uuid, pci_requests, numa_cells=None, allocation=None):
        """Claim devices for every request of an instance, or claim nothing and raise.

        With ``allocation`` ({resource: used}, what the scheduler allocated), devices
        come only from the PCI pools it names. Raises ``PciDeviceRequestFailed`` when
        the node cannot satisfy the requests.
        """
        requests = list(pci_requests.requests) if pci_requests else []
        if not requests:
            return []
        claimed = self.stats.consume_requests(requests, instance_uuid, numa_cells, allocation)
        for device in claimed:
            self._hold(instance_uuid, device)
            self._dirty[device.address] = device
        self._mark_relatives_dirty(claimed)
        return claimed

    def allocate_instance(self, instance_uuid):
        """Allocate every device the instance has claimed."""
        devices = [d for d in self.devices_of(instance_uuid) if d.status == S.CLAIMED]
        for device in devices:
            self._changed(device.allocate(instance_uuid, device.request_id))
        return devices

    def free_instance(self, instance_uuid):
        """Free every device the instance holds; return them.

        VFs go before PFs: an instance never holds a PF and one of its VFs together,
        but a database an audit heals may say it does, and a PF's free makes its VFs
        available, which the VF's own free would then refuse."""
        devices = sorted(
            self.devices_of(instance_uuid),
            key=lambda device: device.dev_type == fields.PciDeviceType.SRIOV_PF,
        )
        for device in devices:
            self._changed(device.free(instance_uuid))
        self._held_by.pop(instance_uuid, None)
        for device in devices:
            self._after_free(device)
        return devices

    def clean_usage(self, instance_uuids):
        """Free the devices of instances that are not in ``instance_uuids``."""
        freed = []
        for holder in self.holders() - set(instance_uuids):
            LOG.info(
                "Node %s: freeing PCI devices of %s, no longer on this node", self.node_id, holder
            )
            freed += self.free_instance(holder)
        return freed

    def _after_free(self, device):
        for relative in [device, device.parent_device, *device.child_devices]:
            if relative is None or relative.status != S.AVAILABLE:
                continue
            if relative.address in self._pending_removal:
                self._pending_removal.discard(relative.address)
                self._changed(relative.remove())
            elif relative.address in self._held_reports:
                self._apply_report(relative, self._held_reports[relative.address])

    # -------------------------------------------------------------- save

    def save(self, context=None, node=None, released=None, instance=None):
        """Write every device changed since the last save, in one round trip, as part of
        the request of ``context`` (default: the context the tracker was made with);
        with the pending changes of the compute ``node``, if given, in that same call,
        and the end of the ``released`` instances' allocations on it, or with those of
        ``instance`` (and the node's). Returns whether there was anything to write
        (when not, nothing is written, ``instance`` and ``node`` included).

        A device whose row has disappeared is dropped from the tracker with a warning;
        the next hypervisor report creates it again. When another writer changed a
        device since this tracker last read or wrote it, nothing is saved, the tracker
        reloads the node's devices from the database, and ``PciDeviceConflict`` is
        raised. Other errors (the conductor unreachable, say) propagate and the
        changes stay pending for the next save.
        """
        if not self._dirty:
            return False
        context = context or self._context
        dirty = list(self._dirty.values())
        expected = {d.address: self._stored[d.address] for d in dirty if d.address in self._stored}
        try:
            PciDeviceList(context, objects=dirty).save(expected, node, released, instance)
        except exception.PciDevicesNotFound as error:
            self._forget(error.kwargs["addresses"])
        except exception.PciDeviceConflict:
            LOG.warning("Node %s: reloading PCI devices another writer changed", self.node_id)
            self._load(context)
            raise
        self._dirty = {}
        for device in dirty:
            if device.status == S.DELETED:
                self._untrack(device)
            elif device.address in self._devices:
                self._stored[device.address] = _holder(device)
        return True

    def _forget(self, addresses):
        for address in addresses:
            LOG.warning(
                "Node %s: the row of PCI device %s is gone from the database; "
                "dropping it until the hypervisor reports it again",
                self.node_id,
                address,
            )
            self._untrack(self._devices[address])

    # -------------------------------------------------------- bookkeeping

    def _track(self, device):
        self._devices[device.address] = device
        self._tags[device.address] = self._specs.tags_for(report_of(device))
        self._note_inventory(device)
        if device.instance_uuid and device.status in (S.CLAIMED, S.ALLOCATED):
            self._hold(device.instance_uuid, device)
        self.stats.update_device(device)

    def _untrack(self, device):
        self._devices.pop(device.address, None)
        self._stored.pop(device.address, None)
        self._tags.pop(device.address, None)
        if self._inventory_keys.pop(device.address, None) is not None:
            self._inventory = None
        self._dirty.pop(device.address, None)
        self._held_reports.pop(device.address, None)
        self._pending_removal.discard(device.address)
        if device.instance_uuid in self._held_by:
            self._held_by[device.instance_uuid].pop(device.address, None)
        self.stats.discard_device(device)
        device.unlink()

    def _hold(self, instance_uuid, device):
        self._held_by.setdefault(instance_uuid, {})[device.address] = device

    def _changed(self, devices):
        for device in devices:
            self._note_inventory(device)
            self.stats.update_device(device)
            self._dirty[device.address] = device

    def _mark_relatives_dirty(self, devices):
        for device in devices:
            for relative in [device.parent_device, *device.child_devices]:
                if relative is not None and relative.obj_what_changed():
                    self._note_inventory(relative)
                    self._dirty[relative.address] = relative

    def _settle_pf_statuses(self):
        """Give every PF that follows its VFs the status they imply, and every VF of a
        claimed or allocated PF the status the PF imposes.

        A PF's status is derived from its VFs; a VF whose row vanished (and is
        re-created free) or a restart after such a loss must not leave the PF stuck.
        """
        for device in self._devices.values():
            if device.dev_type != fields.PciDeviceType.SRIOV_PF:
                continue
            if device.status not in pci_device_state.PF_FOLLOWING_VFS:
                # NOTE: a VF reported (again) while its PF is held joins it busy
                self._changed(pci_device_state.vfs_joining(device))
                continue
            status = pci_device_state.pf_status_for(pci_device_state.live_vfs(device))
            if device.status != status:
                device.status = status
                self._changed([device])

    def _link_all(self):
        """Link every VF to its tracked PF (cheap: a dict lookup per device)."""
        for device in self._devices.values():
            parent = self._devices.get(device.parent_addr) if device.parent_addr else None
            if parent is not device.parent_device:
                device.unlink_parent()
                if parent is not None:
                    device.link_parent(parent)


def _holder(device):
    return {"status": device.status, "instance_uuid": device.instance_uuid}


def _differs(device, values):
    return any(getattr(device, name) != values.get(name) for name in REPORTED_FIELDS)
