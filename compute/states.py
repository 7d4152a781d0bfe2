"""Instance states (``vm_state``) and transient tasks (``task_state``)."""

BUILDING = "building"
ACTIVE = "active"
ERROR = "error"
DELETED = "deleted"

SCHEDULING = "scheduling"
SPAWNING = "spawning"
DELETING = "deleting"
