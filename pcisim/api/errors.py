"""How errors become HTTP responses: one table, stable codes, never a 500 for bad input.

Every error body is ``{"error": {"code": ..., "message": ...}}``. Codes are part of
the API: once published, a code keeps its meaning.
"""

from pcisim import exception

# (exception class, HTTP status, code), most specific first.
ERRORS = (
    (exception.InstanceNotFound, 404, "server.not_found"),
    (exception.ComputeNodeNotFound, 404, "hypervisor.not_found"),
    (exception.ComputeHostNotFound, 404, "hypervisor.not_found"),
    (exception.PciDeviceNotFoundById, 404, "pci_device.not_found"),
    (exception.PciAliasNotFound, 400, "pci.alias_not_found"),
    (exception.InvalidPciRequest, 400, "pci.request_invalid"),
    (exception.Invalid, 400, "request.invalid"),
    (exception.NotFound, 404, "not_found"),
    (exception.Conflict, 409, "conflict"),
)


class ApiError(Exception):
    """An error the API raises itself (bad body, unknown route)."""

    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def body(code, message):
    return {"error": {"code": code, "message": message}}


def for_exception(error):
    """(status, body) for a pcisim exception, or None when it is not an API error."""
    for cls, status, code in ERRORS:
        if isinstance(error, cls):
            # ``message``, not str(): a remote exception's str() carries the remote traceback.
            return status, body(code, error.message)
    return None
