"""The client side of the conductor: how compute and API processes reach the database.

``ConductorAPI`` is the ``indirection_api`` of objects in processes (and threads)
without the database: a remotable method called there becomes an RPC call to the
topic ``conductor``, which runs it and sends back the result and the changes.

RPC API history:
  1.0 - object_action, object_class_action_versions, object_backport_versions
"""

import oslo_messaging as messaging
from oslo_versionedobjects import base as ovo_base

from pcisim import conf as pcisim_conf
from pcisim import rpc

RPC_API_VERSION = "1.0"


class ConductorAPI(ovo_base.VersionedObjectIndirectionAPI):
    """Runs remotable object methods on the conductor, over RPC."""

    def __init__(self, transport, conf=pcisim_conf.CONF):
        target = messaging.Target(topic=conf.conductor.topic, version=RPC_API_VERSION)
        self.client = rpc.get_client(transport, target, version_cap=conf.upgrade_levels.conductor)

    def ping(self, context, timeout):
        """Whether a conductor answers on the topic within ``timeout`` seconds.

        oslo.messaging's RPC server answers ``oslo_rpc_server_ping`` itself when
        ``rpc_ping_enabled`` is on (the conductor turns it on); a conductor without it
        answers with an error, which is an answer too. No answer is ``False``.
        """
        try:
            self.client.prepare(timeout=timeout).call(context, "oslo_rpc_server_ping")
        except messaging.MessagingTimeout:
            return False
        except messaging.RemoteError:
            pass
        return True

    def object_class_action_versions(
        self, context, objname, objmethod, object_versions, args, kwargs
    ):
        """Run ``objname.objmethod(context, *args, **kwargs)`` on the conductor.

        ``object_versions`` tells the conductor which object versions this process
        understands; a returned object comes back in those versions.
        """
        return self.client.prepare().call(
            context,
            "object_class_action_versions",
            objname=objname,
            objmethod=objmethod,
            object_versions=object_versions,
            args=args,
            kwargs=kwargs,
        )

    def object_action(self, context, objinst, objmethod, args, kwargs):
        """Run ``objinst.objmethod(*args, **kwargs)`` on the conductor.

        Returns ``(updates, result)``: the fields the method changed, as primitives,
        with ``obj_what_changed`` listing what is still pending; and its result. Only
        what the method reads travels (``PcisimObject.obj_for_call``).
        """
        return self.client.prepare().call(
            context,
            "object_action",
            objinst=objinst.obj_for_call(objmethod),
            objmethod=objmethod,
            args=args,
            kwargs=kwargs,
        )

    def object_backport_versions(self, context, objinst, object_versions):
        """Ask the conductor to rewrite ``objinst`` into versions this process knows."""
        return self.client.prepare().call(
            context,
            "object_backport_versions",
            objinst=objinst,
            object_versions=object_versions,
        )

    def object_class_action(self, context, objname, objmethod, objver, args, kwargs):
        """The pre-manifest form: the caller knows ``objname`` at ``objver`` only."""
        return self.object_class_action_versions(
            context, objname, objmethod, {objname: objver}, args, kwargs
        )

    def object_backport(self, context, objinst, target_version):
        """The pre-manifest form: ``objinst`` rewritten to ``target_version``; nested
        objects follow their ``obj_relationships``."""
        return self.object_backport_versions(context, objinst, {objinst.obj_name(): target_version})


class ComputeTaskAPI:
    """Asks the conductor to build instances (namespace ``compute_task``)."""

    def __init__(self, transport, conf=pcisim_conf.CONF):
        target = messaging.Target(
            topic=conf.conductor.topic, namespace="compute_task", version="1.0"
        )
        self.client = rpc.get_client(transport, target)

    def schedule_and_build_instances(self, context, instance, request_spec):
        """Create ``instance``, pick a node and start the build there; returns it created.

        ``request_spec``: ``{"numa_cells": [..] or None, "numa_nodes": N or None}``:
        the host NUMA cells the guest is on, or how many the scheduler chooses (a
        conductor before ``numa_nodes`` ignores it).
        """
        return self.client.prepare().call(
            context,
            "schedule_and_build_instances",
            instance=instance,
            request_spec=request_spec,
        )

    def reschedule(self, context, instance, request_spec, reason):
        """Report a failed claim so that the conductor tries another node."""
        self.client.prepare().cast(
            context, "reschedule", instance=instance, request_spec=request_spec, reason=reason
        )
