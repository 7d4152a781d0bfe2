"""The conductor service: object calls and compute tasks on the topic ``conductor``."""

from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim import dbaccess, rpc
from pcisim.compute import rpcapi as compute_rpcapi
from pcisim.conductor import BINARY, compute_task, manager
from pcisim.objects import base as objects_base
from pcisim.objects.service import Service
from pcisim.service import RPCService


class ConductorService(RPCService):
    """Serves remotable object calls (``ConductorManager``) and builds
    (``ComputeTaskManager``); its handler threads are the ones with the database."""

    def __init__(self, transport_url=None, topic=None):
        # NOTE: computes wait for their conductor by pinging it (ConductorAPI.ping).
        rpc.answer_pings()
        self.manager = manager.ConductorManager()
        topic = topic or pcisim_conf.CONF.conductor.topic
        super().__init__(BINARY, topic, [self.manager], transport_url=transport_url)

    def prepare(self):
        self.endpoints.append(
            compute_task.ComputeTaskManager(compute_rpcapi.ComputeAPI(self.transport))
        )


def register(conf=pcisim_conf.CONF):
    """Record this conductor's service record, saying which version of the code it runs
    (``pcisim-status upgrade check`` compares the computes' with it). The database must
    be configured; the conductor's own code has it, in the all-in-one process too."""
    with dbaccess.granted():
        context = pcisim_context.get_admin_context()
        Service.register(context, conf.host, BINARY, conf.conductor.topic)


def run_as_conductor_process():
    """The whole process is a conductor: the database is allowed everywhere in it."""
    dbaccess.allow()
    objects_base.set_indirection_api(None)
