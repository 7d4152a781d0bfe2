"""The request context every call carries: who is asking, and the DB transaction.

``RequestContext`` is oslo.context's context, made usable by oslo.db's enginefacade so
that ``db/`` functions can open a reader or writer transaction on it.

A thread's *current* context is the one oslo.log's lines carry the request id of: an
API request, an RPC dispatch and a periodic task each make theirs current.
"""

import contextlib

from oslo_context import context
from oslo_db.sqlalchemy import enginefacade


@enginefacade.transaction_context_provider
class RequestContext(context.RequestContext):
    """A caller's identity and, while a DB function runs, its transaction."""


def get_admin_context():
    """Return a context with admin rights, with a request id of its own, made this
    thread's current one: what it is made for (a request, a periodic task) logs
    under its id, never under the id of whatever this thread did before."""
    return RequestContext(is_admin=True, overwrite=True)


def get_current():
    """This thread's current context, or None."""
    return context.get_current()


def set_current(ctxt):
    """Make ``ctxt`` this thread's current context; None leaves it with none."""
    if ctxt is not None:
        ctxt.update_store()
        return
    # NOTE: oslo.context has no public way to clear the thread's context; its own
    # ClearRequestContext fixture deletes the thread-local attribute like this.
    vars(context._request_store).pop("context", None)


@contextlib.contextmanager
def restoring_current():
    """Within, the thread may make other contexts current; after, it has the one it
    had before (or none), so that what it does next does not log under their ids."""
    previous = get_current()
    try:
        yield
    finally:
        set_current(previous)
