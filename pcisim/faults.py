"""Named points in pcisim's flows where a test can inject an action.

A flow marks a point with ``faults.point("name", **details)``; a test registers what
should happen there::

    with faults.inject(faults.AFTER_SOFT_DELETE, lambda **d: archive_everything()):
        compute_api.delete(ctxt, instance)

The action runs in the flow's own thread, with the flow's details as keyword
arguments, and whatever it raises is raised at the point (a test can simulate a crash
that way). A point nobody injected into costs one dictionary lookup.

The points:

``after_soft_delete``
    (compute, terminate_instance) the instance row is soft-deleted, its devices are
    not freed yet: the window in which Nova lost its device rows (bug 1899541).
    Details: ``instance``.
``before_tracker_save`` / ``after_tracker_save``
    (compute, resource tracker) around the PCI tracker's save. Details: ``node``.
``before_periodic``
    (compute) before a node's periodic ``update_available_resource``. Details: ``node``.
``between_claim_and_allocate``
    (compute, build_and_run_instance) devices are claimed, not yet allocated.
    Details: ``instance``.
``before_allocation_claim``
    (conductor, scheduler) a node is chosen from what was read of it, its allocation
    not written yet; the scheduler's other threads that chose it wait meanwhile: a
    boot through another conductor allocating there now makes this one's
    compare-and-swap fail. Details: ``instance``, ``node_id``.
``before_view_read``
    (conductor, scheduler) a thread begins the read of the nodes and up hosts, for
    itself and every request that asked meanwhile; requests asking now wait for it to
    end and share the next. Details: ``context``.
``before_audit_heal_save``
    (pcisim-manage pci audit --heal) a heal has read what it mends, and not written
    yet: a live writer changing it now makes the heal's guarded write refuse. Details:
    ``node_id`` and ``heal``: ``devices`` (a node's tracker has freed the devices of
    gone instances), ``allocation`` (an orphaned one, with ``consumer_uuid``),
    ``pools`` (recomputed from the rows) or ``blank row`` (with ``device_id``).
"""

import contextlib
import threading

AFTER_SOFT_DELETE = "after_soft_delete"
BEFORE_TRACKER_SAVE = "before_tracker_save"
AFTER_TRACKER_SAVE = "after_tracker_save"
BEFORE_PERIODIC = "before_periodic"
BETWEEN_CLAIM_AND_ALLOCATE = "between_claim_and_allocate"
BEFORE_ALLOCATION_CLAIM = "before_allocation_claim"
BEFORE_AUDIT_HEAL_SAVE = "before_audit_heal_save"
BEFORE_VIEW_READ = "before_view_read"
POINTS = frozenset(
    {
        AFTER_SOFT_DELETE,
        BEFORE_TRACKER_SAVE,
        AFTER_TRACKER_SAVE,
        BEFORE_PERIODIC,
        BETWEEN_CLAIM_AND_ALLOCATE,
        BEFORE_ALLOCATION_CLAIM,
        BEFORE_AUDIT_HEAL_SAVE,
        BEFORE_VIEW_READ,
    }
)

_actions = {}
_lock = threading.Lock()


def point(name, **details):
    """Run the actions injected at ``name``, if any."""
    actions = _actions.get(name)
    if actions:
        for action in list(actions):
            action(**details)


@contextlib.contextmanager
def inject(name, action):
    """Run ``action(**details)`` each time a flow reaches ``name``, inside the block."""
    if name not in POINTS:
        raise ValueError(f"unknown injection point {name!r}; points: {sorted(POINTS)}")
    with _lock:
        _actions.setdefault(name, []).append(action)
    try:
        yield
    finally:
        with _lock:
            _actions[name].remove(action)
            if not _actions[name]:
                del _actions[name]


def once(action):
    """Wrap ``action`` so that it runs the first time only."""
    fired = threading.Event()

    def run_once(**details):
        if not fired.is_set():
            fired.set()
            action(**details)

    return run_once
