"""pcisim-conductor: serves the topic ``conductor``, the only process with the database.

    pcisim-conductor [--config-file F] [--trace]

Refuses to start, naming the command to run, when the database schema is not at the
newest revision. Stops cleanly on SIGTERM or SIGINT.
"""

import sys

from oslo_db import exception as db_exc
from oslo_log import log as logging

from conductor import service as conductor_service
from db import engine, migration
from pcisim import cmd
from pcisim import conf as pcisim_conf
from pcisim import service as pcisim_service

LOG = logging.getLogger(__name__)
BINARY = conductor_service.BINARY


def build_service():
    """The conductor service; the database must be configured already."""
    conductor_service.run_as_conductor_process()
    return conductor_service.ConductorService()


def check_schema():
    """Exit with instructions when the schema is missing or out of date."""
    current, head = migration.db_version(), migration.head_revision()
    if current != head:
        sys.exit(
            f"{BINARY}: the database {pcisim_conf.database_connection()} is at schema "
            f"revision {current}, not {head}; run: pcisim-manage db sync"
        )


def main(argv=None):
    cmd.prepare_service(BINARY, argv)
    engine.configure()
    try:
        check_schema()
    except db_exc.DBConnectionError as error:
        sys.exit(f"{BINARY}: cannot reach the database: {error}")
    pcisim_service.serve([build_service()])
