"""Services: which compute services run, and when each last reported in.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _columns(shadow=False):
    return [
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=not shadow),
        sa.Column("created_at", sa.DateTime),
        sa.Column("updated_at", sa.DateTime),
        sa.Column("deleted_at", sa.DateTime),
        sa.Column("deleted", sa.Integer, nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("binary", sa.String(255), nullable=False),
        sa.Column("topic", sa.String(255)),
        sa.Column("report_count", sa.Integer, nullable=False),
        sa.Column("last_seen_up", sa.DateTime),
        sa.Column("forced_down", sa.Boolean, nullable=False),
        sa.Column("disabled", sa.Boolean, nullable=False),
    ]


def upgrade():
    op.create_table(
        "services",
        *_columns(),
        sa.UniqueConstraint(
            "host", "binary", "deleted", name="uniq_services0host0binary0deleted"
        ),
        sqlite_autoincrement=True,
    )
    op.create_table("shadow_services", *_columns(shadow=True))
