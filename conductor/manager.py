"""The conductor: the one place where remotable object methods meet the database.

Computes and the API send remotable object calls here (see ``conductor/rpcapi.py``).
Each call runs in a thread granted database access, on a registered object class,
and only on a method declared ``@remotable``; anything else is refused. An exception
raised by the object method is the caller's to handle, so it travels back as an
``ExpectedException`` and is not logged here as a conductor error.
"""

import collections
import threading

import oslo_messaging as messaging
from oslo_log import log as logging
from oslo_utils import versionutils
from oslo_versionedobjects import base as ovo_base

import objects
from conductor import rpcapi
from objects import base as objects_base
from pcisim import dbaccess, exception

LOG = logging.getLogger(__name__)


def _remotable_method(objclass, objmethod):
    method = getattr(objclass, objmethod, None)
    if objmethod.startswith("_") or not getattr(method, "remotable", False):
        raise exception.NotRemotable(objname=objclass.obj_name(), method=objmethod)
    return method


def _changed_fields(before, after):
    """Primitives of the fields ``after`` has that differ from ``before``."""
    updates = {}
    for name, field in after.fields.items():
        if not after.obj_attr_is_set(name):
            continue
        value = field.to_primitive(after, name, getattr(after, name))
        had = before.obj_attr_is_set(name)
        if not had or field.to_primitive(before, name, getattr(before, name)) != value:
            updates[name] = value
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
            objclass = objects_base.PcisimObject.obj_class_from_name(
                objname, object_versions.get(objname, "1.0")
            )
            method = _remotable_method(objclass, objmethod)
        except Exception:
            raise messaging.ExpectedException()
        result = self._run(method, context, *args, **kwargs)
        return _in_client_versions(result, object_versions)

    def object_action(self, context, objinst, objmethod, args, kwargs):
        """Run a remotable method on ``objinst``; return ``(updates, result)``.

        ``updates`` maps each field the method changed to its primitive, plus
        ``obj_what_changed``: the fields still pending after the call.
        """
        self._record("object_action", objinst.obj_name(), objmethod)
        try:
            method = _remotable_method(type(objinst), objmethod)
        except Exception:
            raise messaging.ExpectedException()
        before = objinst.obj_clone()
        result = self._run(method, objinst, *args, **kwargs)
        updates = _changed_fields(before, objinst)
        updates["obj_what_changed"] = objinst.obj_what_changed()
        return updates, result

    def object_backport_versions(self, context, objinst, object_versions):
        """``objinst`` as a primitive of the versions in ``object_versions``."""
        self._record("object_backport_versions", objinst.obj_name(), "")
        target = object_versions[objinst.obj_name()]
        return objinst.obj_to_primitive(target_version=target, version_manifest=object_versions)
