"""Flavors and their extra specs, and the image an instance was booted from: what
Nova's compute API (the API's Nova face) creates servers from.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _bookkeeping(shadow):
    return [
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=not shadow),
        sa.Column("created_at", sa.DateTime),
        sa.Column("updated_at", sa.DateTime),
        sa.Column("deleted_at", sa.DateTime),
        sa.Column("deleted", sa.Integer, nullable=False),
    ]


def _flavor_columns(shadow=False):
    return [
        *_bookkeeping(shadow),
        sa.Column("flavorid", sa.String(255), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("memory_mb", sa.Integer, nullable=False),
        sa.Column("vcpus", sa.Integer, nullable=False),
        sa.Column("root_gb", sa.Integer, nullable=False),
        sa.Column("ephemeral_gb", sa.Integer, nullable=False),
        sa.Column("swap", sa.Integer, nullable=False),
        sa.Column("is_public", sa.Boolean, nullable=False),
        sa.Column("disabled", sa.Boolean, nullable=False),
        sa.Column("description", sa.Text),
    ]


def _extra_spec_columns(shadow=False):
    return [
        *_bookkeeping(shadow),
        sa.Column("flavor_id", sa.Integer, nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("value", sa.String(255), nullable=False),
    ]


def upgrade():
    for table in ("instances", "shadow_instances"):
        op.add_column(table, sa.Column("image_ref", sa.String(255)))
    op.create_table(
        "flavors",
        *_flavor_columns(),
        sa.UniqueConstraint("flavorid", "deleted", name="uniq_flavors0flavorid0deleted"),
        sa.UniqueConstraint("name", "deleted", name="uniq_flavors0name0deleted"),
        sqlite_autoincrement=True,
    )
    op.create_table("shadow_flavors", *_flavor_columns(shadow=True))
    op.create_table(
        "flavor_extra_specs",
        *_extra_spec_columns(),
        sa.ForeignKeyConstraint(["flavor_id"], ["flavors.id"]),
        sa.UniqueConstraint(
            "flavor_id", "key", "deleted", name="uniq_flavor_extra_specs0flavor_id0key0deleted"
        ),
        sqlite_autoincrement=True,
    )
    op.create_table("shadow_flavor_extra_specs", *_extra_spec_columns(shadow=True))
