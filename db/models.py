"""The database schema: live tables as SQLAlchemy models, and their shadow twins.

Every table carries ``created_at``, ``updated_at``, ``deleted_at`` and an integer
``deleted`` that is 0 while the row is live and the row's id once soft-deleted, so a
unique constraint that includes ``deleted`` admits one live row and any number of
deleted ones.

Foreign keys state ownership: a row whose foreign key names a parent belongs to that
parent, and archiving moves it together with the parent (see ``db/archive.py``).
``pci_devices.instance_uuid`` deliberately has no foreign key: it records which
instance holds a device, not who owns the row. The compute node owns its devices.

Each live table ``<name>`` has a ``shadow_<name>`` twin with the same columns and no
indexes, unique constraints or foreign keys, into which archiving moves rows.
"""

from datetime import datetime

import sqlalchemy as sa
from oslo_utils import timeutils
from sqlalchemy import orm
from sqlalchemy.orm import Mapped, mapped_column

SHADOW_PREFIX = "shadow_"


def _utcnow():
    return timeutils.utcnow()


class Base(orm.DeclarativeBase):
    """Columns every table has. ``sqlite_autoincrement`` stops SQLite reusing the ids
    of archived rows, which would make shadow rows collide."""

    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    created_at: Mapped[datetime | None] = mapped_column(sa.DateTime, default=_utcnow)
    updated_at: Mapped[datetime | None] = mapped_column(sa.DateTime, onupdate=_utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(sa.DateTime)
    deleted: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0)

    def soft_delete(self):
        self.deleted = self.id
        self.deleted_at = _utcnow()


def _table_args(*constraints):
    return (*constraints, Base.__table_args__)


class ComputeNode(Base):
    __tablename__ = "compute_nodes"
    __table_args__ = _table_args(
        sa.UniqueConstraint(
            "host", "hypervisor_hostname", "deleted", name="uniq_compute_nodes0host0node0deleted"
        ),
        sa.UniqueConstraint("uuid", name="uniq_compute_nodes0uuid"),
        # NOTE: covers the scheduler's read of every node's generation, which then
        # reads no row of the table itself.
        sa.Index("compute_nodes_deleted_id_generation_idx", "deleted", "id", "generation"),
    )

    uuid: Mapped[str] = mapped_column(sa.String(36), nullable=False)
    host: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    hypervisor_hostname: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    vcpus: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0)
    memory_mb: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0)
    local_gb: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0)
    vcpus_used: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0)
    memory_mb_used: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0)
    local_gb_used: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0)
    pci_stats: Mapped[str | None] = mapped_column(sa.Text)
    # What the scheduler may allocate of the node's PCI devices (pci/capacity.py), and
    # the node's generation: bumped by every change of its inventory or allocations,
    # compared-and-swapped by every allocation the scheduler writes.
    pci_inventory: Mapped[str | None] = mapped_column(sa.Text)
    generation: Mapped[int] = mapped_column(
        sa.Integer, nullable=False, default=0, server_default="0"
    )


class Instance(Base):
    __tablename__ = "instances"
    __table_args__ = _table_args(
        sa.UniqueConstraint("uuid", name="uniq_instances0uuid"),
        sa.Index("instances_host_node_deleted_idx", "host", "node", "deleted"),
        sa.Index("instances_deleted_deleted_at_idx", "deleted", "deleted_at"),
    )

    uuid: Mapped[str] = mapped_column(sa.String(36), nullable=False)
    display_name: Mapped[str | None] = mapped_column(sa.String(255))
    project_id: Mapped[str | None] = mapped_column(sa.String(255))
    user_id: Mapped[str | None] = mapped_column(sa.String(255))
    host: Mapped[str | None] = mapped_column(sa.String(255))
    node: Mapped[str | None] = mapped_column(sa.String(255))
    vm_state: Mapped[str | None] = mapped_column(sa.String(255))
    task_state: Mapped[str | None] = mapped_column(sa.String(255))
    vcpus: Mapped[int | None] = mapped_column(sa.Integer)
    memory_mb: Mapped[int | None] = mapped_column(sa.Integer)
    root_gb: Mapped[int | None] = mapped_column(sa.Integer)
    # The image the instance was booted from (the Nova face's imageRef).
    image_ref: Mapped[str | None] = mapped_column(sa.String(255))
    launched_at: Mapped[datetime | None] = mapped_column(sa.DateTime)
    terminated_at: Mapped[datetime | None] = mapped_column(sa.DateTime)


class InstanceExtra(Base):
    __tablename__ = "instance_extra"
    __table_args__ = _table_args(
        sa.UniqueConstraint("instance_uuid", name="uniq_instance_extra0instance_uuid"),
    )

    instance_uuid: Mapped[str] = mapped_column(
        sa.String(36), sa.ForeignKey("instances.uuid"), nullable=False
    )
    flavor: Mapped[str | None] = mapped_column(sa.Text)
    pci_requests: Mapped[str | None] = mapped_column(sa.Text)
    numa_topology: Mapped[str | None] = mapped_column(sa.Text)


class InstanceAction(Base):
    __tablename__ = "instance_actions"
    __table_args__ = _table_args(
        sa.Index("instance_actions_instance_uuid_idx", "instance_uuid"),
    )

    instance_uuid: Mapped[str] = mapped_column(
        sa.String(36), sa.ForeignKey("instances.uuid"), nullable=False
    )
    action: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    request_id: Mapped[str | None] = mapped_column(sa.String(255))
    user_id: Mapped[str | None] = mapped_column(sa.String(255))
    project_id: Mapped[str | None] = mapped_column(sa.String(255))
    start_time: Mapped[datetime | None] = mapped_column(sa.DateTime)
    finish_time: Mapped[datetime | None] = mapped_column(sa.DateTime)
    message: Mapped[str | None] = mapped_column(sa.String(255))


class InstanceActionEvent(Base):
    __tablename__ = "instance_actions_events"
    __table_args__ = _table_args(
        sa.Index("instance_actions_events_action_id_idx", "action_id"),
    )

    action_id: Mapped[int] = mapped_column(
        sa.Integer, sa.ForeignKey("instance_actions.id"), nullable=False
    )
    event: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    host: Mapped[str | None] = mapped_column(sa.String(255))
    start_time: Mapped[datetime | None] = mapped_column(sa.DateTime)
    finish_time: Mapped[datetime | None] = mapped_column(sa.DateTime)
    result: Mapped[str | None] = mapped_column(sa.String(255))
    details: Mapped[str | None] = mapped_column(sa.Text)


class InstanceFault(Base):
    __tablename__ = "instance_faults"
    __table_args__ = _table_args(
        sa.Index("instance_faults_instance_uuid_idx", "instance_uuid"),
    )

    instance_uuid: Mapped[str] = mapped_column(
        sa.String(36), sa.ForeignKey("instances.uuid"), nullable=False
    )
    code: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    message: Mapped[str | None] = mapped_column(sa.String(255))
    details: Mapped[str | None] = mapped_column(sa.Text)
    host: Mapped[str | None] = mapped_column(sa.String(255))


class PciDevice(Base):
    __tablename__ = "pci_devices"
    __table_args__ = _table_args(
        sa.UniqueConstraint(
            "compute_node_id", "address", "deleted", name="uniq_pci_devices0node0address0deleted"
        ),
        sa.Index("pci_devices_node_deleted_idx", "compute_node_id", "deleted"),
        sa.Index("pci_devices_instance_uuid_deleted_idx", "instance_uuid", "deleted"),
    )

    compute_node_id: Mapped[int] = mapped_column(
        sa.Integer, sa.ForeignKey("compute_nodes.id"), nullable=False
    )
    address: Mapped[str] = mapped_column(sa.String(12), nullable=False)
    vendor_id: Mapped[str] = mapped_column(sa.String(4), nullable=False)
    product_id: Mapped[str] = mapped_column(sa.String(4), nullable=False)
    dev_type: Mapped[str] = mapped_column(sa.String(8), nullable=False)
    label: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    status: Mapped[str] = mapped_column(sa.String(36), nullable=False)
    dev_id: Mapped[str | None] = mapped_column(sa.String(255))
    uuid: Mapped[str | None] = mapped_column(sa.String(36))
    request_id: Mapped[str | None] = mapped_column(sa.String(36))
    extra_info: Mapped[str | None] = mapped_column(sa.Text)
    numa_node: Mapped[int | None] = mapped_column(sa.Integer)
    parent_addr: Mapped[str | None] = mapped_column(sa.String(12))
    instance_uuid: Mapped[str | None] = mapped_column(sa.String(36))


class Service(Base):
    """A running pcisim service (a compute, say) and when it last said it was alive."""

    __tablename__ = "services"
    __table_args__ = _table_args(
        sa.UniqueConstraint("host", "binary", "deleted", name="uniq_services0host0binary0deleted"),
    )

    host: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    binary: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    topic: Mapped[str | None] = mapped_column(sa.String(255))
    report_count: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0)
    last_seen_up: Mapped[datetime | None] = mapped_column(sa.DateTime)
    forced_down: Mapped[bool] = mapped_column(sa.Boolean, nullable=False, default=False)
    disabled: Mapped[bool] = mapped_column(sa.Boolean, nullable=False, default=False)
    # The SERVICE_VERSION of the code it runs (objects/service.py); NULL before it said.
    version: Mapped[int | None] = mapped_column(sa.Integer)


class Allocation(Base):
    """What a consumer (an instance) holds of a node's resources, written by the
    scheduler when it chooses the node. ``resource`` is ``VCPU``, ``MEMORY_MB``,
    ``DISK_GB`` or a PCI pool's name (``pci/capacity.py``).

    The node owns its allocations (they are archived with it). A consumer's are deleted,
    not soft-deleted, when it ends (deleted, or in ERROR): nothing of an instance's
    history lives here, so the column is ``consumer_uuid``, without a foreign key.
    """

    __tablename__ = "allocations"
    __table_args__ = _table_args(
        sa.Index("allocations_node_idx", "compute_node_id"),
        sa.Index("allocations_consumer_idx", "consumer_uuid"),
    )

    compute_node_id: Mapped[int] = mapped_column(
        sa.Integer, sa.ForeignKey("compute_nodes.id"), nullable=False
    )
    consumer_uuid: Mapped[str] = mapped_column(sa.String(36), nullable=False)
    resource: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    used: Mapped[int] = mapped_column(sa.Integer, nullable=False)


class Flavor(Base):
    """A named size of instance, with its extra specs (``FlavorExtraSpec``), as Nova's
    flavors are. ``flavorid`` is the id the API shows; ``id`` stays internal."""

    __tablename__ = "flavors"
    __table_args__ = _table_args(
        sa.UniqueConstraint("flavorid", "deleted", name="uniq_flavors0flavorid0deleted"),
        sa.UniqueConstraint("name", "deleted", name="uniq_flavors0name0deleted"),
    )

    flavorid: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    name: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    memory_mb: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    vcpus: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    root_gb: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    ephemeral_gb: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0)
    swap: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0)
    is_public: Mapped[bool] = mapped_column(sa.Boolean, nullable=False, default=True)
    disabled: Mapped[bool] = mapped_column(sa.Boolean, nullable=False, default=False)
    description: Mapped[str | None] = mapped_column(sa.Text)


class FlavorExtraSpec(Base):
    """One ``key: value`` of a flavor (``pci_passthrough:alias: gpu:1``); the flavor
    owns it."""

    __tablename__ = "flavor_extra_specs"
    __table_args__ = _table_args(
        sa.UniqueConstraint(
            "flavor_id", "key", "deleted", name="uniq_flavor_extra_specs0flavor_id0key0deleted"
        ),
    )

    flavor_id: Mapped[int] = mapped_column(sa.Integer, sa.ForeignKey("flavors.id"), nullable=False)
    key: Mapped[str] = mapped_column(sa.String(255), nullable=False)
    value: Mapped[str] = mapped_column(sa.String(255), nullable=False)


# Tables that name an instance without being owned by it: never archived as its residue.
INSTANCE_REFERENCE_ONLY = frozenset({"pci_devices"})


def _shadow_table(table):
    columns = [
        sa.Column(
            column.name,
            column.type,
            primary_key=column.primary_key,
            autoincrement=False,
            nullable=column.nullable,
        )
        for column in table.columns
    ]
    return sa.Table(SHADOW_PREFIX + table.name, Base.metadata, *columns)


LIVE_TABLES = tuple(Base.metadata.sorted_tables)
SHADOW_TABLES = {table.name: _shadow_table(table) for table in LIVE_TABLES}


def shadow_of(table):
    """The shadow twin of a live table."""
    return SHADOW_TABLES[table.name]
