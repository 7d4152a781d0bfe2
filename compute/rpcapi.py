"""The client side of the compute RPC API: what the conductor and the API ask of a host.

RPC API history:
  1.0 - build_and_run_instance, terminate_instance
"""

import oslo_messaging as messaging

from pcisim import conf as pcisim_conf
from pcisim import rpc

RPC_API_VERSION = "1.0"


class ComputeAPI:
    """Casts to the compute service of a host (topic ``compute``, server = host)."""

    def __init__(self, transport, conf=pcisim_conf.CONF):
        target = messaging.Target(topic=conf.compute.topic, version=RPC_API_VERSION)
        self.client = rpc.get_client(transport, target)

    def build_and_run_instance(self, context, instance, host, node, request_spec):
        """Claim, allocate and start ``instance`` on ``node``; reports back by casting.

        ``request_spec`` carries what scheduling used (PCI requests, NUMA cells, the
        hosts already tried) so that a failed claim can be rescheduled.
        """
        self.client.prepare(server=host).cast(
            context,
            "build_and_run_instance",
            instance=instance,
            node=node,
            request_spec=request_spec,
        )

    def terminate_instance(self, context, instance):
        """Stop ``instance``, soft-delete it and free what it held on its host."""
        self.client.prepare(server=instance.host).cast(
            context, "terminate_instance", instance=instance
        )
