"""Which code may touch the database: the conductor's, and admin commands'.

A process that acts as a compute or an API forbids database access for the whole
process (``forbid``); the conductor's RPC handlers then ``grant`` it back, for their
own thread and for the duration of one call. So in the all-in-one process, where the
conductor and the computes share one interpreter, compute code still cannot reach the
database and its objects still travel to the conductor over RPC.

``objects`` reads the same switch to decide where a remotable method runs: locally
when this thread has the database, through the conductor when it has not.
"""

import contextlib
import threading

_forbidden_for = None
_grants = threading.local()


def forbid(binary):
    """Forbid database access in this process, naming who forbids it in errors."""
    global _forbidden_for
    _forbidden_for = binary


def allow():
    """Allow database access in this process (the conductor, admin commands)."""
    global _forbidden_for
    _forbidden_for = None


def forbidden_for():
    """The binary that forbade access, or None when this thread may use the DB."""
    if getattr(_grants, "depth", 0):
        return None
    return _forbidden_for


def allowed():
    return forbidden_for() is None


@contextlib.contextmanager
def granted():
    """Let the current thread use the database while the block runs."""
    _grants.depth = getattr(_grants, "depth", 0) + 1
    try:
        yield
    finally:
        _grants.depth -= 1
