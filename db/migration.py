"""Schema migrations with alembic: upgrade to head, report the current revision."""

import os

from alembic import command
from alembic import config as alembic_config
from alembic import migration as alembic_migration
from alembic import script as alembic_script

from pcisim.db import engine

MIGRATIONS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "migrations")


def _config(connection):
    config = alembic_config.Config()
    config.set_main_option("script_location", MIGRATIONS_DIR)
    config.attributes["connection"] = connection
    return config


def db_sync(sa_engine=None, revision="head"):
    """Upgrade the database to ``revision`` (the newest by default)."""
    sa_engine = sa_engine or engine.get_engine()
    with sa_engine.begin() as connection:
        command.upgrade(_config(connection), revision)


def db_version(sa_engine=None):
    """The database's current revision, or None for an unmigrated database."""
    sa_engine = sa_engine or engine.get_engine()
    with sa_engine.connect() as connection:
        return alembic_migration.MigrationContext.configure(connection).get_current_revision()


def head_revision():
    return alembic_script.ScriptDirectory(MIGRATIONS_DIR).get_current_head()
