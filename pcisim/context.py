"""The request context every call carries: who is asking, and the DB transaction.

``RequestContext`` is oslo.context's context, made usable by oslo.db's enginefacade so
that ``db/`` functions can open a reader or writer transaction on it.
"""

from oslo_context import context
from oslo_db.sqlalchemy import enginefacade


@enginefacade.transaction_context_provider
class RequestContext(context.RequestContext):
    """A caller's identity and, while a DB function runs, its transaction."""


def get_admin_context():
    """Return a context with admin rights, for services and admin commands."""
    return RequestContext(is_admin=True, overwrite=False)
