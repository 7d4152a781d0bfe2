"""Allocations: what the scheduler gives each instance of a node, guarded by the node's
generation; the node's PCI inventory.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _node_columns():
    return [
        sa.Column("pci_inventory", sa.Text),
        sa.Column("generation", sa.Integer, nullable=False, server_default="0"),
    ]


def _allocation_columns(shadow=False):
    return [
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=not shadow),
        sa.Column("created_at", sa.DateTime),
        sa.Column("updated_at", sa.DateTime),
        sa.Column("deleted_at", sa.DateTime),
        sa.Column("deleted", sa.Integer, nullable=False),
        sa.Column("compute_node_id", sa.Integer, nullable=False),
        sa.Column("consumer_uuid", sa.String(36), nullable=False),
        sa.Column("resource", sa.String(255), nullable=False),
        sa.Column("used", sa.Integer, nullable=False),
    ]


def upgrade():
    for table in ("compute_nodes", "shadow_compute_nodes"):
        for column in _node_columns():
            op.add_column(table, column)
    op.create_index(
        "compute_nodes_deleted_id_generation_idx",
        "compute_nodes",
        ["deleted", "id", "generation"],
    )
    op.create_table(
        "allocations",
        *_allocation_columns(),
        sa.ForeignKeyConstraint(["compute_node_id"], ["compute_nodes.id"]),
        sqlite_autoincrement=True,
    )
    op.create_index("allocations_node_idx", "allocations", ["compute_node_id"])
    op.create_index("allocations_consumer_idx", "allocations", ["consumer_uuid"])
    op.create_table("shadow_allocations", *_allocation_columns(shadow=True))
