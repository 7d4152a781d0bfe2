"""Services record the version of their code (``objects.service.SERVICE_VERSION``).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade():
    # NOTE: nullable: a service that started before this revision has not said yet.
    for table in ("services", "shadow_services"):
        op.add_column(table, sa.Column("version", sa.Integer))
