"""The conductor: the one place where remotable object methods meet the database.

Computes and the API send remotable object calls here (see ``conductor/rpcapi.py``).
Each call runs in a thread granted database access, on a registered object class,
and only on a method declared ``@remotable`` of the kind asked for (a classmethod for a
class action); anything else, and an argument of the wrong type, is refused with an
error the caller can catch by type (``NotRemotable``, ``MalformedObjectCall``). An exception
raised by the object method is the caller's to handle, so it travels back as an
``ExpectedException`` and is not logged here as a conductor error.
"""

import collections
import datetime
import inspect
import re
import threading

import oslo_messaging as messaging
from oslo_log import log as logging
from oslo_utils import versionutils
from oslo_versionedobjects import base as ovo_base

from pcisim import dbaccess, exception, objects
from pcisim.conductor import rpcapi
from pcisim.objects import base as objects_base

LOG = logging.getLogger(__name__)


def _remotable_method(objclass, objmethod, classmethod_wanted):
    """The remotable method ``objmethod`` of ``objclass``: a classmethod for a class
    action, an instance method for an object action; ``NotRemotable`` otherwise."""
    method = getattr(objclass, objmethod, None)
    if objmethod.startswith("_") or not getattr(method, "remotable", False):
        raise exception.NotRemotable(objname=objclass.obj_name(), method=objmethod)
    is_classmethod = isinstance(inspect.getattr_static(objclass, objmethod), classmethod)
    if is_classmethod != classmethod_wanted:
        raise exception.RemotableKindMismatch(
            objname=objclass.obj_name(),
            method=objmethod,
            kind="classmethod" if is_classmethod else "method",
            rpc_method="object_class_action_versions" if is_classmethod else "object_action",
        )
    return method


_ARGUMENT_TYPES = {
    "objname": (str,),
    "objmethod": (str,),
    "object_versions": (dict,),
    "args": (list, tuple),
    "kwargs": (dict,),
}
_VERSION = re.compile(r"[0-9]+\.[0-9]+")


def _check_arguments(rpc_method, objinst=None, **values):
    """Refuse, with ``MalformedObjectCall`` naming it, an argument of the wrong type:
    what a well-behaved client never sends, and what would otherwise fail somewhere
    inside the object layer with an error that says nothing to the caller."""

    def refuse(reason):
        raise exception.MalformedObjectCall(rpc_method=rpc_method, reason=reason)

    if objinst is not None and not isinstance(objinst, objects_base.PcisimObject):
        refuse(f"objinst is a {type(objinst).__name__}, not a registered pcisim object")
    for name, value in values.items():
        if not isinstance(value, _ARGUMENT_TYPES[name]):
            wanted = " or ".join(t.__name__ for t in _ARGUMENT_TYPES[name])
            refuse(f"{name} is a {type(value).__name__}, not a {wanted}")
    if not all(isinstance(key, str) for key in values.get("kwargs", {})):
        refuse("kwargs has a key that is not a string")
    for objname, version in values.get("object_versions", {}).items():
        if not (
            isinstance(objname, str) and isinstance(version, str) and _VERSION.fullmatch(version)
        ):
            refuse(f"object_versions maps {objname!r} to {version!r}, not to a version X.Y")


# Values of these types are never changed in place: a field holding one is compared
# as it is; any other (a dict, a list, an object) by its primitive, taken before the
# method could change it.
_IMMUTABLE = (str, int, float, datetime.datetime, type(None))


def _comparable(obj, name, field):
    value = getattr(obj, name)
    return value if isinstance(value, _IMMUTABLE) else field.to_primitive(obj, name, value)


def _snapshot(obj):
    """What ``_changed_fields`` compares against: each set field, comparable."""
    return {
        name: _comparable(obj, name, field)
        for name, field in obj.fields.items()
        if obj.obj_attr_is_set(name)
    }


def _changed_fields(before, after):
    """Primitives of the fields ``after`` has that differ from the ``before`` snapshot."""
    updates = {}
    for name, field in after.fields.items():
        if after.obj_attr_is_set(name) and (
            name not in before or before[name] != _comparable(after, name, field)
        ):
            updates[name] = field.to_primitive(after, name, getattr(after, name))
    return updates


def _in_client_versions(result, object_versions):
    """``result`` as a primitive of the version the caller knows, when older than ours."""
    if not isinstance(result, ovo_base.VersionedObject):
        return result
    wanted = object_versions.get(result.obj_name(), result.VERSION)
    if wanted == result.VERSION or not versionutils.is_compatible(wanted, result.VERSION):
        return result
    return result.obj_to_primitive(target_version=wanted, version_manifest=object_versions)


class ConductorManager:
    """RPC endpoint of the topic ``conductor``."""

    target = messaging.Target(version=rpcapi.RPC_API_VERSION)

    def __init__(self):
        objects.register_all()
        self._lock = threading.Lock()
        self.calls = collections.Counter()

    def _record(self, kind, objname, objmethod):
        with self._lock:
            self.calls[(kind, objname, objmethod)] += 1
        LOG.debug("%s %s.%s", kind, objname, objmethod)

    @staticmethod
    def _run(method, *args, **kwargs):
        with dbaccess.granted():
            try:
                return method(*args, **kwargs)
            except Exception:
                raise messaging.ExpectedException()

    def object_class_action_versions(
        self, context, objname, objmethod, object_versions, args, kwargs
    ):
        """Run a remotable classmethod; return its result in the caller's versions.

        Raises ``UnsupportedObjectError`` for an unknown object, ``NotRemotable`` for a
        method that is not remotable, and whatever the method itself raises.
        """
        self._record("object_class_action_versions", objname, objmethod)
        try:
            _check_arguments(
                "object_class_action_versions",
                objname=objname,
                objmethod=objmethod,
                object_versions=object_versions,
                args=args,
                kwargs=kwargs,
            )
            objclass = objects_base.PcisimObject.obj_class_from_name(
                objname, object_versions.get(objname, "1.0")
            )
            method = _remotable_method(objclass, objmethod, classmethod_wanted=True)
        except Exception:
            raise messaging.ExpectedException()
        result = self._run(method, context, *args, **kwargs)
        return _in_client_versions(result, object_versions)

    def object_action(self, context, objinst, objmethod, args, kwargs):
        """Run a remotable method on ``objinst``; return ``(updates, result)``.

        ``updates`` maps each field the method changed to its primitive, plus
        ``obj_what_changed``: the fields still pending after the call.
        """
        try:
            _check_arguments(
                "object_action", objinst=objinst, objmethod=objmethod, args=args, kwargs=kwargs
            )
            self._record("object_action", objinst.obj_name(), objmethod)
            method = _remotable_method(type(objinst), objmethod, classmethod_wanted=False)
        except Exception:
            raise messaging.ExpectedException()
        before = _snapshot(objinst)
        result = self._run(method, objinst, *args, **kwargs)
        updates = _changed_fields(before, objinst)
        updates["obj_what_changed"] = objinst.obj_what_changed()
        return updates, result

    def object_backport_versions(self, context, objinst, object_versions):
        """``objinst`` as a primitive of the versions in ``object_versions``."""
        try:
            _check_arguments(
                "object_backport_versions", objinst=objinst, object_versions=object_versions
            )
            self._record("object_backport_versions", objinst.obj_name(), "")
            target = object_versions.get(objinst.obj_name())
            if target is None:
                raise exception.MalformedObjectCall(
                    rpc_method="object_backport_versions",
                    reason=f"object_versions names no version of {objinst.obj_name()}",
                )
            return objinst.obj_to_primitive(target_version=target, version_manifest=object_versions)
        except Exception:
            raise messaging.ExpectedException()
