"""A conductor round trip in the classic eventlet mode, reported as JSON.

    PCISIM_CONCURRENCY=eventlet python -m tests.functional.eventlet_round_trip STATE_DIR

Imports pcisim first, as every entry point does, which monkey-patches the process and
selects oslo.service's eventlet backend. Then it starts a conductor in this process on
``kombu+memory:////`` with a SQLite file database under STATE_DIR, acts as a compute,
creates a compute node and a PCI device, saves a change, and prints what happened.
"""

import json
import pathlib
import sys

from pcisim import concurrency

concurrency.select_backend()  # monkey-patches and selects the backend, before anything else

# isort: split
import eventlet.patcher
from oslo_service import backend

from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim import testing
from pcisim.db import engine, migration
from pcisim.objects.pci_device import PciDevice
from tests import object_factories


def configure(state_dir):
    pcisim_conf.parse_args([], default_config_files=[])
    connection = f"sqlite:///{pathlib.Path(state_dir) / 'pcisim.sqlite'}"
    pcisim_conf.CONF.set_override("connection", connection, group="database")
    engine.configure()
    migration.db_sync()


def round_trip(conductor):
    """Create a node and a device from the compute side, save a change, read it back."""
    ctxt = pcisim_context.get_admin_context()
    node = object_factories.compute_node(ctxt)
    device = object_factories.vf(ctxt, node, "0000:81:00.1")
    device.status = "claimed"
    device.save()
    stored = PciDevice.get_by_dev_addr(ctxt, node.id, device.address)
    return {
        "node_id": node.id,
        "device_id": device.id,
        "stored_status": stored.status,
        "pending": sorted(device.obj_what_changed()),
        "executor": conductor.service.rpcserver.executor_type,
        "calls": {".".join(filter(None, key)): n for key, n in conductor.calls.items()},
    }


def main(state_dir):
    report = {
        "thread_patched": eventlet.patcher.is_monkey_patched("thread"),
        "backend": backend.get_backend_type().name,
    }
    configure(state_dir)
    with testing.InProcessConductor() as conductor:
        report.update(round_trip(conductor))
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
