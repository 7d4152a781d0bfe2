"""Initial schema: compute nodes, instances and what they own, PCI devices, shadows.

Revision ID: 0001
Revises:
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

SQLITE = {"sqlite_autoincrement": True}


def _bookkeeping():
    return [
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.DateTime),
        sa.Column("updated_at", sa.DateTime),
        sa.Column("deleted_at", sa.DateTime),
        sa.Column("deleted", sa.Integer, nullable=False),
    ]


def _create(name, *items):
    return op.create_table(name, *_bookkeeping(), *items, **SQLITE)


def _create_shadow(table):
    op.create_table(
        "shadow_" + table.name,
        *(
            sa.Column(
                c.name,
                c.type,
                primary_key=c.primary_key,
                autoincrement=False,
                nullable=c.nullable,
            )
            for c in table.columns
        ),
    )


def upgrade():
    tables = [
        _create(
            "compute_nodes",
            sa.Column("uuid", sa.String(36), nullable=False),
            sa.Column("host", sa.String(255), nullable=False),
            sa.Column("hypervisor_hostname", sa.String(255), nullable=False),
            sa.Column("vcpus", sa.Integer, nullable=False),
            sa.Column("memory_mb", sa.Integer, nullable=False),
            sa.Column("local_gb", sa.Integer, nullable=False),
            sa.Column("vcpus_used", sa.Integer, nullable=False),
            sa.Column("memory_mb_used", sa.Integer, nullable=False),
            sa.Column("local_gb_used", sa.Integer, nullable=False),
            sa.Column("pci_stats", sa.Text),
            sa.UniqueConstraint(
                "host", "hypervisor_hostname", "deleted",
                name="uniq_compute_nodes0host0node0deleted",
            ),
            sa.UniqueConstraint("uuid", name="uniq_compute_nodes0uuid"),
        ),
        _create(
            "instances",
            sa.Column("uuid", sa.String(36), nullable=False),
            sa.Column("display_name", sa.String(255)),
            sa.Column("project_id", sa.String(255)),
            sa.Column("user_id", sa.String(255)),
            sa.Column("host", sa.String(255)),
            sa.Column("node", sa.String(255)),
            sa.Column("vm_state", sa.String(255)),
            sa.Column("task_state", sa.String(255)),
            sa.Column("vcpus", sa.Integer),
            sa.Column("memory_mb", sa.Integer),
            sa.Column("root_gb", sa.Integer),
            sa.Column("launched_at", sa.DateTime),
            sa.Column("terminated_at", sa.DateTime),
            sa.UniqueConstraint("uuid", name="uniq_instances0uuid"),
        ),
        _create(
            "instance_extra",
            sa.Column(
                "instance_uuid", sa.String(36), sa.ForeignKey("instances.uuid"), nullable=False
            ),
            sa.Column("flavor", sa.Text),
            sa.Column("pci_requests", sa.Text),
            sa.Column("numa_topology", sa.Text),
            sa.UniqueConstraint("instance_uuid", name="uniq_instance_extra0instance_uuid"),
        ),
        _create(
            "instance_actions",
            sa.Column(
                "instance_uuid", sa.String(36), sa.ForeignKey("instances.uuid"), nullable=False
            ),
            sa.Column("action", sa.String(255), nullable=False),
            sa.Column("request_id", sa.String(255)),
            sa.Column("user_id", sa.String(255)),
            sa.Column("project_id", sa.String(255)),
            sa.Column("start_time", sa.DateTime),
            sa.Column("finish_time", sa.DateTime),
            sa.Column("message", sa.String(255)),
        ),
        _create(
            "instance_actions_events",
            sa.Column(
                "action_id", sa.Integer, sa.ForeignKey("instance_actions.id"), nullable=False
            ),
            sa.Column("event", sa.String(255), nullable=False),
            sa.Column("host", sa.String(255)),
            sa.Column("start_time", sa.DateTime),
            sa.Column("finish_time", sa.DateTime),
            sa.Column("result", sa.String(255)),
            sa.Column("details", sa.Text),
        ),
        _create(
            "instance_faults",
            sa.Column(
                "instance_uuid", sa.String(36), sa.ForeignKey("instances.uuid"), nullable=False
            ),
            sa.Column("code", sa.Integer, nullable=False),
            sa.Column("message", sa.String(255)),
            sa.Column("details", sa.Text),
            sa.Column("host", sa.String(255)),
        ),
        _create(
            "pci_devices",
            sa.Column(
                "compute_node_id", sa.Integer, sa.ForeignKey("compute_nodes.id"), nullable=False
            ),
            sa.Column("address", sa.String(12), nullable=False),
            sa.Column("vendor_id", sa.String(4), nullable=False),
            sa.Column("product_id", sa.String(4), nullable=False),
            sa.Column("dev_type", sa.String(8), nullable=False),
            sa.Column("label", sa.String(255), nullable=False),
            sa.Column("status", sa.String(36), nullable=False),
            sa.Column("dev_id", sa.String(255)),
            sa.Column("uuid", sa.String(36)),
            sa.Column("request_id", sa.String(36)),
            sa.Column("extra_info", sa.Text),
            sa.Column("numa_node", sa.Integer),
            sa.Column("parent_addr", sa.String(12)),
            sa.Column("instance_uuid", sa.String(36)),
            sa.UniqueConstraint(
                "compute_node_id", "address", "deleted",
                name="uniq_pci_devices0node0address0deleted",
            ),
        ),
    ]
    op.create_index("instances_host_node_deleted_idx", "instances", ["host", "node", "deleted"])
    op.create_index("instances_deleted_deleted_at_idx", "instances", ["deleted", "deleted_at"])
    op.create_index(
        "instance_actions_instance_uuid_idx", "instance_actions", ["instance_uuid"]
    )
    op.create_index(
        "instance_actions_events_action_id_idx", "instance_actions_events", ["action_id"]
    )
    op.create_index("instance_faults_instance_uuid_idx", "instance_faults", ["instance_uuid"])
    op.create_index(
        "pci_devices_node_deleted_idx", "pci_devices", ["compute_node_id", "deleted"]
    )
    op.create_index(
        "pci_devices_instance_uuid_deleted_idx", "pci_devices", ["instance_uuid", "deleted"]
    )
    for table in tables:
        _create_shadow(table)
