"""pcisim-conductor: serves the topic ``conductor``, the only process with the database.

    pcisim-conductor [--config-file F] [--trace]

Refuses to start, naming the command to run, when the database schema is not at the
newest revision. Stops cleanly on SIGTERM or SIGINT.
"""

import os
import sys

from oslo_log import log as logging

from pcisim import cmd, exception
from pcisim.conductor import BINARY

# NOTE: every module that imports oslo.messaging (or oslo.service) is imported inside
# the functions, once main() has selected the concurrency backend.

LOG = logging.getLogger(__name__)


def build_service():
    """The conductor service; the database must be configured already."""
    from pcisim.conductor import service as conductor_service

    conductor_service.run_as_conductor_process()
    return conductor_service.ConductorService()


def check_database_exists(url):
    """Exit with instructions, creating nothing, when the SQLite file is not there."""
    from pcisim.db import sqlite

    if sqlite.is_file_url(url) and not os.path.exists(sqlite.file_path(url)):
        sys.exit(f"{BINARY}: the database {url} does not exist; run: pcisim-manage db sync")


def check_schema():
    """Exit with instructions when the schema is missing or out of date."""
    from pcisim import conf as pcisim_conf
    from pcisim import rpc
    from pcisim.db import migration

    current, head = migration.db_version(), migration.head_revision()
    if current != head:
        sys.exit(
            f"{BINARY}: the database {rpc.safe_url(pcisim_conf.database_connection())} is at "
            f"schema revision {current}, not {head}; run: pcisim-manage db sync"
        )


def main(argv=None):
    cmd.select_backend(BINARY)
    from pcisim import conf as pcisim_conf
    from pcisim import rpc
    from pcisim import service as pcisim_service
    from pcisim.conductor import service as conductor_service

    cmd.prepare_service(BINARY, argv)
    cmd.check_transport_url(BINARY)
    url = pcisim_conf.database_connection()
    try:
        check_database_exists(url)
        cmd.configure_database()
        check_schema()
        service = build_service()
        conductor_service.register()
    except exception.InvalidConfigValue as error:
        sys.exit(f"{BINARY}: {error}")
    except cmd.DATABASE_ERRORS as error:
        sys.exit(
            f"{BINARY}: cannot reach the database {rpc.safe_url(url)}: "
            f"{cmd.database_error(error, url)}"
        )
    pcisim_service.serve([service])
