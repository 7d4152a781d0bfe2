"""A control plane on SQLite in this process, and its HTTP API served for real.

``sqlite_plane`` starts a conductor and one compute host (a GPU and a PF with two VFs)
on a scratch SQLite database; ``serving`` serves a WSGI application with waitress on a
free loopback port, as ``pcisim-api`` does, so that the ``pcisim`` console script can
talk to it from a subprocess.
"""

import contextlib

import schemathesis
import sqlalchemy as sa

from pcisim import dbaccess, testing, wsgi
from pcisim.api import app as api_app
from pcisim.compute.driver import SimulatedDriver
from pcisim.db import engine, models
from pcisim.pci.devspec import DeviceSpecList
from pcisim.pci.request import parse_aliases
from tests import backends

SPECS = ['{"vendor_id": "10de"}', '{"vendor_id": "8086"}']
ALIASES = [
    '{"name": "gpu", "vendor_id": "10de", "product_id": "1eb8"}',
    '{"name": "vf", "vendor_id": "8086", "product_id": "1520", "device_type": "type-VF"}',
]
NODE = "node1=gpus=1,pfs=1,vfs_per_pf=2"
# NOTE: schemathesis checks answers with every check it has but positive_data_acceptance:
# the document cannot say which PCI aliases are configured, so a schema-valid request
# for one that is not is rightly refused (400).
NOT_APPLICABLE_CHECKS = [schemathesis.checks.positive_data_acceptance]
# What a request or a message could write; services and compute nodes also change on
# their own, with every heartbeat and periodic update.
WRITABLE_TABLES = (
    "instances",
    "instance_extra",
    "instance_actions",
    "instance_actions_events",
    "instance_faults",
    "pci_devices",
)


@contextlib.contextmanager
def sqlite_plane(tmp_path_factory, node=NODE):
    """A running ``testing.ControlPlane`` with host ``host1`` of one ``node`` (an
    ``[compute] inventory`` entry), on a SQLite file."""
    scratch = backends.ScratchDatabase("sqlite", tmp_path_factory)
    reset = engine.context_manager.patch_factory(scratch.manager)
    drivers = {"host1": SimulatedDriver.from_config([node])}
    try:
        specs = DeviceSpecList.from_config(SPECS)
        with testing.ControlPlane(drivers, specs, parse_aliases(ALIASES)) as plane:
            yield plane
    finally:
        reset()
        scratch.drop()


def app(plane, auth_token=None, users=()):
    """The HTTP API of ``plane``, requiring ``auth_token`` when one is given (which
    the identity face issues to ``users``, ``name:password`` entries)."""
    return api_app.create_app(api_app.Api(compute=plane.api), auth_token=auth_token, users=users)


@contextlib.contextmanager
def serving(wsgi_app):
    """``wsgi_app`` served on 127.0.0.1 and a free port; yields its URL."""
    service = wsgi.WSGIService(wsgi_app, "127.0.0.1", 0)
    service.start()
    try:
        yield service.url
    finally:
        service.stop()


def database_rows():
    """Every row of the tables a request could write, read directly: two reads are
    equal when nothing was written in between."""
    tables = models.Base.metadata.tables
    with dbaccess.granted(), engine.get_engine().connect() as connection:
        return {
            name: sorted(
                (tuple(row) for row in connection.execute(sa.select(tables[name]))), key=repr
            )
            for name in WRITABLE_TABLES
        }
