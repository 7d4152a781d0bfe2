"""A pytest plugin for people writing functional tests against pcisim.

Installed with pcisim (entry point ``pytest11``), it provides ``control_plane``: an
in-process conductor, compute hosts with simulated inventories and the compute API,
on a fresh SQLite file and the in-process transport::

    def test_a_gpu_is_freed_on_delete(control_plane):
        instance = control_plane.api.create(control_plane.context, "vm", pci_requests="gpu:1")
        assert control_plane.wait_for(instance.uuid) == "active"

Override ``control_plane_inventories`` (host -> list of ``NAME=SHORT_FORM`` or paths),
``control_plane_device_spec`` and ``control_plane_aliases`` to change what it runs.
See docs/testing.md for the helpers and the injection points.

NOTE: pytest loads this plugin in every session of a virtualenv where pcisim is
installed, so it imports nothing of oslo: only a test that uses ``control_plane``
selects the concurrency backend (the threading one, unless the session chose already).
"""

import pytest


@pytest.fixture
def control_plane_inventories():
    return {"compute-1": ["gpu-node=gpus=2"], "compute-2": ["nic-node=pfs=2,vfs_per_pf=4"]}


@pytest.fixture
def control_plane_device_spec():
    return ['{"vendor_id": "10de"}', '{"vendor_id": "8086"}']


@pytest.fixture
def control_plane_aliases():
    return [
        '{"name": "gpu", "vendor_id": "10de", "product_id": "1eb8"}',
        '{"name": "vf", "vendor_id": "8086", "product_id": "1520", "device_type": "type-VF"}',
        '{"name": "pf", "vendor_id": "8086", "product_id": "1521", "device_type": "type-PF"}',
    ]


@pytest.fixture
def control_plane(
    tmp_path, control_plane_inventories, control_plane_device_spec, control_plane_aliases
):
    """A running in-process control plane on a fresh SQLite database."""
    from pcisim import concurrency

    concurrency.select_backend()
    from oslo_db.sqlalchemy import enginefacade

    from pcisim import conf as pcisim_conf
    from pcisim import testing
    from pcisim.compute.driver import SimulatedDriver
    from pcisim.db import engine, migration
    from pcisim.pci.devspec import DeviceSpecList
    from pcisim.pci.request import parse_aliases

    pcisim_conf.register_opts()
    manager = enginefacade.transaction_context()
    engine.configure_manager(manager, f"sqlite:///{tmp_path / 'pcisim.sqlite'}", max_retries=0)
    migration.db_sync(manager.writer.get_engine())
    reset = engine.context_manager.patch_factory(manager)
    drivers = {
        host: SimulatedDriver.from_config(values)
        for host, values in control_plane_inventories.items()
    }
    try:
        with testing.ControlPlane(
            drivers,
            DeviceSpecList.from_config(control_plane_device_spec),
            parse_aliases(control_plane_aliases),
        ) as plane:
            yield plane
    finally:
        reset()
        manager.dispose_pool()
