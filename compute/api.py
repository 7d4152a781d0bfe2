"""The compute API: what the HTTP API (and tests) call to create and delete instances.

It runs in the API process, without the database: instance records are created by the
conductor, which schedules them; deletes go to the instance's compute, or are done
here ("local delete") when that compute is down, leaving its devices to be freed by
the compute's next periodic run.
"""

import uuid as uuidlib

from oslo_log import log as logging

from pcisim import conf as pcisim_conf
from pcisim import exception
from pcisim.compute import BINARY, flavors, states
from pcisim.compute import rpcapi as compute_rpcapi
from pcisim.conductor import rpcapi as conductor_rpcapi
from pcisim.objects.flavor import Flavor
from pcisim.objects.instance import Instance
from pcisim.objects.service import Service
from pcisim.pci import request as pci_request

LOG = logging.getLogger(__name__)


class API:
    """Create and delete instances; create flavors and set their extra specs."""

    def __init__(self, transport, aliases):
        self.aliases = aliases
        self.compute_task_api = conductor_rpcapi.ComputeTaskAPI(transport)
        self.compute_rpcapi = compute_rpcapi.ComputeAPI(transport)

    def create(
        self,
        context,
        name,
        vcpus=1,
        memory_mb=512,
        root_gb=1,
        pci_requests=None,
        numa_cells=None,
        numa_policy=None,
        image_ref=None,
    ):
        """Create an instance and start its build; returns it BUILDING or in ERROR.

        ``pci_requests`` is ``"alias:count[,alias:count]"`` or a list of
        ``{"alias", "count"}``; ``numa_policy`` overrides its aliases' NUMA policy.
        Bad requests raise before anything is written.
        """
        return self._create(
            context,
            Instance(
                context,
                display_name=name,
                vcpus=vcpus,
                memory_mb=memory_mb,
                root_gb=root_gb,
                image_ref=image_ref,
            ),
            pci_requests,
            numa_policy,
            numa_cells,
        )

    def create_from_flavor(self, context, name, flavor, image_ref=None):
        """Create an instance of ``flavor`` (a ``Flavor``), which it keeps a copy of:
        its sizes, and its PCI requests and NUMA policy read from its extra specs
        (``compute.flavors``)."""
        values = flavors.instance_values(flavor)
        instance = Instance(
            context,
            display_name=name,
            vcpus=values["vcpus"],
            memory_mb=values["memory_mb"],
            root_gb=values["root_gb"],
            image_ref=image_ref,
            flavor=flavor,
        )
        return self._create(
            context,
            instance,
            values["pci_requests"],
            values["numa_policy"],
            numa_nodes=values["numa_nodes"],
        )

    def _create(
        self, context, instance, pci_requests, numa_policy, numa_cells=None, numa_nodes=None
    ):
        instance_uuid = str(uuidlib.uuid4())
        requests = None
        if pci_requests:
            requests = pci_request.build_instance_requests(
                context, instance_uuid, pci_requests, self.aliases, numa_policy
            )
        instance.uuid = instance_uuid
        instance.vm_state, instance.task_state = states.BUILDING, states.SCHEDULING
        instance.pci_requests = requests
        instance.project_id, instance.user_id = context.project_id, context.user_id
        request_spec = {"numa_cells": list(numa_cells) if numa_cells else None}
        if numa_nodes:
            request_spec["numa_nodes"] = numa_nodes
        return self.compute_task_api.schedule_and_build_instances(context, instance, request_spec)

    def create_flavor(self, context, extra_specs=None, **values):
        """Create a flavor of ``values`` (``objects.flavor.VALUES``) and
        ``extra_specs``, checked before anything is written
        (``flavors.check_extra_specs``)."""
        extra_specs = dict(extra_specs or {})
        flavors.check_extra_specs(extra_specs, self.aliases, values["vcpus"])
        flavor = Flavor(context, extra_specs=extra_specs, **values)
        flavor.create()
        return flavor

    def update_flavor_extra_specs(self, context, flavor, extra_specs):
        """Set ``extra_specs`` on ``flavor`` once the flavor's specs after would be
        read (nothing is written otherwise)."""
        flavors.check_extra_specs({**flavor.extra_specs, **extra_specs}, self.aliases, flavor.vcpus)
        flavor.update_extra_specs(extra_specs)
        return flavor

    def delete(self, context, instance):
        """Delete ``instance``: on its compute when that is up, here otherwise.

        The delete is recorded (task state ``deleting``) before it is sent, so that a
        compute whose message was lost finishes it from the row on a periodic run.
        """
        if instance.host and self._compute_is_up(context, instance.host):
            instance.task_state = states.DELETING
            instance.save()
            self.compute_rpcapi.terminate_instance(context, instance)
            return
        LOG.info("Local delete of %s: its compute %s is down", instance.uuid, instance.host)
        instance.vm_state, instance.task_state = states.DELETED, None
        instance.destroy()

    @staticmethod
    def _compute_is_up(context, host):
        try:
            service = Service.get_by_host_and_binary(context, host, BINARY)
        except exception.ServiceNotFound:
            return False
        return service.is_up(pcisim_conf.CONF.service_down_time)
