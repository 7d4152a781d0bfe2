"""Alembic environment: runs pcisim's migrations on a connection or a URL."""

import sqlalchemy as sa
from alembic import context

from pcisim.db import models

config = context.config


def run_migrations(connection):
    context.configure(
        connection=connection,
        target_metadata=models.Base.metadata,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online():
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
        return
    engine = sa.create_engine(config.get_main_option("sqlalchemy.url"))
    try:
        with engine.connect() as connection:
            run_migrations(connection)
    finally:
        engine.dispose()


run_online()
