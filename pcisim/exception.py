"""Every error pcisim raises on purpose, as a class with a message template.

An exception carries the values that caused it as keyword arguments; they fill the
template and travel with it. oslo.messaging rebuilds a remote exception by calling
``cls(message, **kwargs)``, so a ``PciDeviceNotFound`` raised on the conductor is
raised again on the compute as a ``PciDeviceNotFound`` with the same values.

``code`` is the HTTP status an API maps the error to.
"""


class PcisimException(Exception):
    msg_fmt = "An unknown error occurred."
    code = 500

    def __init__(self, message=None, **kwargs):
        self.kwargs = kwargs
        if message is None:
            try:
                message = self.msg_fmt % kwargs
            except (KeyError, TypeError) as missing:
                raise TypeError(
                    f"{type(self).__name__} needs {missing} to format {self.msg_fmt!r}"
                ) from None
        self.message = message
        super().__init__(message)


class NotFound(PcisimException):
    msg_fmt = "Resource could not be found."
    code = 404


class Invalid(PcisimException):
    msg_fmt = "Invalid request: %(reason)s"
    code = 400


class Conflict(PcisimException):
    msg_fmt = "Conflict: %(reason)s"
    code = 409


class InvalidInput(Invalid):
    msg_fmt = "Invalid input: %(reason)s"


class PciDeviceNotFound(NotFound):
    msg_fmt = "PCI device %(node_id)s:%(address)s not found."


class PciDeviceNotFoundById(NotFound):
    msg_fmt = "PCI device %(id)s not found."


class InstanceNotFound(NotFound):
    msg_fmt = "Instance %(instance_uuid)s could not be found."


class InstanceExists(Conflict):
    msg_fmt = "Instance %(instance_uuid)s already exists."


class ComputeHostNotFound(NotFound):
    msg_fmt = "Compute host %(host)s could not be found."


class ComputeNodeNotFound(NotFound):
    msg_fmt = "Compute node %(node_id)s could not be found."


class ComputeNodeExists(Conflict):
    msg_fmt = "Compute node %(host)s/%(hypervisor_hostname)s already exists."


class PciDeviceExists(Conflict):
    msg_fmt = "PCI device %(node_id)s:%(address)s already exists."


class DBNotAllowed(PcisimException):
    msg_fmt = (
        "%(binary)s may not access the database directly: %(function)s was called. "
        "Go through the conductor."
    )


class InvalidArchiveBudget(Invalid):
    msg_fmt = "max_rows must be an integer from 1 to 2147483647, got %(max_rows)r."


class DatabaseNotMigrated(PcisimException):
    msg_fmt = (
        "The database %(url)s is %(state)s, and this pcisim needs revision %(head)s: "
        "run 'pcisim-manage db sync' first."
    )


class PciDevicesNotFound(PciDeviceNotFound):
    msg_fmt = "PCI devices %(addresses)s of compute node %(node_id)s not found."


class PciDeviceConflict(Conflict):
    msg_fmt = (
        "PCI devices of compute node %(node_id)s were changed by another writer "
        "(%(details)s); nothing was written."
    )


class PciHealRefused(Conflict):
    msg_fmt = "Compute node %(node_id)s is left as it is: %(reason)s."


class ObjectActionError(PcisimException):
    msg_fmt = "Object action %(action)s failed because: %(reason)s"


class NotRemotable(Invalid):
    msg_fmt = (
        "%(objname)s.%(method)s is not a remotable method; "
        "the conductor runs remotable methods of registered objects only."
    )


class InstanceActionNotFound(NotFound):
    msg_fmt = "Instance action %(action_id)s could not be found."


class InstanceActionEventNotFound(NotFound):
    msg_fmt = "Instance action event %(event_id)s could not be found."


class PciConfigError(Invalid):
    msg_fmt = "Invalid [pci] %(option)s entry %(entry)s: %(reason)s"


class InvalidPciAddress(Invalid):
    msg_fmt = "Invalid PCI address %(address)r: %(reason)s"


class PciAliasNotFound(Invalid):
    msg_fmt = "PCI alias %(alias)s is not defined in [pci] alias."


class InvalidPciRequest(Invalid):
    msg_fmt = "Invalid PCI request %(request)r: %(reason)s"


class PciDeviceRequestFailed(Conflict):
    msg_fmt = "PCI device request %(requests)s failed: %(reason)s"


class PciDeviceInvalidStatus(Conflict):
    msg_fmt = "PCI device %(compute_node_id)s:%(address)s is %(status)s instead of %(hopestatus)s."


class PciDeviceInvalidOwner(Conflict):
    msg_fmt = (
        "PCI device %(compute_node_id)s:%(address)s is owned by %(owner)s instead of %(hopeowner)s."
    )


class PciDeviceVFInvalidStatus(Conflict):
    msg_fmt = (
        "Not all virtual functions of PF %(compute_node_id)s:%(address)s are "
        "%(hopestatus)s: %(busy)s."
    )


class PciDevicePFInvalidStatus(Conflict):
    msg_fmt = (
        "Physical function %(compute_node_id)s:%(address)s, parent of VF "
        "%(compute_node_id)s:%(vf_address)s, is %(status)s instead of %(hopestatus)s."
    )


class PciDevicePoolEmpty(Conflict):
    msg_fmt = (
        "PCI device %(compute_node_id)s:%(address)s is in no pool of free devices, "
        "so it cannot be taken out of one."
    )


class ServiceNotFound(NotFound):
    msg_fmt = "Service %(binary)s on host %(host)s could not be found."


class ServiceExists(Conflict):
    msg_fmt = "Service %(binary)s on host %(host)s already exists."


class ComputeResourcesUnavailable(Conflict):
    msg_fmt = "Insufficient compute resources on %(node)s: %(reason)s"


class NoValidHost(PcisimException):
    msg_fmt = "No valid host was found. %(reason)s"


class BuildAbortException(PcisimException):
    msg_fmt = "Build of instance %(instance_uuid)s aborted: %(reason)s"


class InvalidInventory(Invalid):
    msg_fmt = "Invalid inventory %(source)s: %(reason)s"


class TraceUnavailable(PcisimException):
    msg_fmt = "no trace in %(path)s: %(reason)s"


class FlowNotFound(NotFound):
    msg_fmt = "no flow %(request_id)s in %(path)s"


class FlowAmbiguous(Invalid):
    msg_fmt = "%(count)d flows in %(path)s begin with %(request_id)s: %(matches)s; give more of it"


class InvalidConfigValue(Invalid):
    msg_fmt = "invalid %(option)s: %(reason)s"


class ApiAuthTokenRequired(Invalid):
    msg_fmt = (
        "refusing to listen on %(address)s, which is not a loopback address, without "
        "[api] auth_token: set [api] auth_token, or listen on 127.0.0.1"
    )


class RemotableKindMismatch(NotRemotable):
    msg_fmt = "%(objname)s.%(method)s is a remotable %(kind)s: call it with %(rpc_method)s."


class MalformedObjectCall(Invalid):
    msg_fmt = "Malformed %(rpc_method)s call: %(reason)s"


class InvalidPciDeviceReport(InvalidInput):
    msg_fmt = "Invalid PCI device report %(entry)s: %(reason)s"


class ComputeNodeGenerationConflict(Conflict):
    msg_fmt = (
        "Compute node %(node_id)s changed since generation %(generation)s was read: "
        "another allocation or an inventory change came first."
    )


class UndeclaredResponse(PcisimException):
    msg_fmt = (
        "API handler %(handler)s declares no response: decorate it with "
        "validation.response_body_schema."
    )


class ServiceStopping(PcisimException):
    msg_fmt = "%(binary)s was asked to stop while it waited for %(awaited)s."


class InvalidAPIVersionString(Invalid):
    msg_fmt = (
        "API Version String %(version)s is of invalid format. Must be of format MajorNum.MinorNum."
    )


class InvalidGlobalAPIVersion(PcisimException):
    msg_fmt = (
        "Version %(req_ver)s is not supported by the API. Minimum is %(min_ver)s and "
        "maximum is %(max_ver)s."
    )
    code = 406


class FlavorNotFound(NotFound):
    msg_fmt = "Flavor %(flavor_id)s could not be found."


class FlavorExists(Conflict):
    msg_fmt = "Flavor with name %(name)s already exists."


class FlavorIdExists(Conflict):
    msg_fmt = "Flavor with ID %(flavor_id)s already exists."


class FlavorExtraSpecsNotFound(NotFound):
    msg_fmt = "Flavor %(flavor_id)s has no extra specs with key %(extra_specs_key)s."


class InvalidFlavorExtraSpec(Invalid):
    msg_fmt = "Invalid flavor extra spec %(key)s=%(value)r: %(reason)s"


class ImageNotFound(NotFound):
    msg_fmt = "Image %(image_id)s could not be found."


class AuthenticationFailed(PcisimException):
    msg_fmt = "The request you have made requires authentication."
    code = 401
