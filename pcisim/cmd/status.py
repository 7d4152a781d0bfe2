"""pcisim-status: checks an operator runs before an upgrade, as nova-status does.

    pcisim-status [--config-file F] upgrade check [--json]

On oslo.upgradecheck: each check is a Success, a Warning (look before upgrading) or a
Failure (fix first); the exit code is the worst of them, 0, 1 or 2, and 255 for a
configuration that cannot be read or an unexpected error. The checks read the database
directly, as ``pcisim-manage`` does, and change nothing; services record their version
when they start (``objects.service.SERVICE_VERSION``).
"""

import os
import sys

from oslo_config import cfg
from oslo_serialization import jsonutils
from oslo_upgradecheck import upgradecheck
from oslo_utils import versionutils

from pcisim import cmd, conductor, exception, objects, rpc
from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim.db import api as db_api
from pcisim.db import migration, pci_audit, sqlite
from pcisim.objects import base
from pcisim.objects.service import SERVICE_VERSION

CONF = pcisim_conf.CONF
BINARY = "pcisim-status"
EXIT_ERROR = 255
SHOWN = 5  # devices named in a result's details; the count says how many in all
Code = upgradecheck.Code
Result = upgradecheck.Result


class Checks(upgradecheck.UpgradeCommands):
    """The upgrade checks of pcisim, on the database at ``[database] connection``."""

    display_title = "pcisim upgrade check results"

    def __init__(self):
        self._schema = None  # the schema check's result, which the data checks need

    def _check_schema(self):
        """The schema is at the newest revision this code knows."""
        if self._schema is None:
            self._schema = _schema_result(pcisim_conf.database_connection())
        return self._schema

    def _check_blank_devices(self):
        """No PCI device row misses an identity field (Nova bug 1899541's residue)."""
        return self._data_check(
            pci_audit.blank_devices,
            Code.FAILURE,
            "A device row missing an identity field (node, address, vendor, product or "
            "type) matches no device a hypervisor reports, and no tracker can save it: "
            "`pcisim-manage pci audit --heal` deletes those no live node can report; "
            "compare the rest with their node's devices.",
        )

    def _check_held_by_missing_instances(self):
        """No PCI device is claimed or allocated for an instance that is gone."""
        return self._data_check(
            pci_audit.devices_held_by_missing_instances,
            Code.WARNING,
            "These devices are claimed or allocated for an instance without a live row. "
            "A delete in progress frees its devices within a periodic run of its compute; "
            "any other stays held, and never handed out, until `pcisim-manage pci audit "
            "--heal` frees it.",
        )

    def _check_service_versions(self):
        """No service runs code newer than this; no compute is newer than the conductors."""
        rows = self._rows(db_api.service_versions)
        return rows if isinstance(rows, Result) else _versions_result(rows)

    def _check_stored_objects(self):
        """No versioned object the database stores is newer than this code knows."""
        rows = self._rows(db_api.stored_flavor_copies)
        return rows if isinstance(rows, Result) else _stored_objects_result(rows)

    def _data_check(self, query, code, explanation):
        rows = self._rows(query)
        if isinstance(rows, Result):
            return rows
        if not rows:
            return Result(Code.SUCCESS)
        return Result(code, f"{len(rows)} found: {_devices(rows)}. {explanation}")

    def _rows(self, query):
        """The rows ``query`` reads, or the Result that says why it could not."""
        if self._check_schema().code != Code.SUCCESS:
            return Result(Code.WARNING, "Not checked: the database schema is not current.")
        try:
            return query(pcisim_context.get_admin_context())
        except cmd.UNREACHABLE_DATABASE as error:
            return _unreachable(pcisim_conf.database_connection(), error)

    _upgrade_checks = (
        ("Database schema", _check_schema),
        ("PCI devices with an identity", _check_blank_devices),
        ("PCI devices held by live instances", _check_held_by_missing_instances),
        ("Service versions", _check_service_versions),
        ("Stored object versions", _check_stored_objects),
    )


def _versions_result(rows):
    """A service newer than this code is a Failure: it speaks RPC and object versions
    this code does not know. A compute newer than every conductor is a Warning: a
    conductor backports objects to older computes, never to newer ones."""
    newer = [row for row in rows if _version(row) > SERVICE_VERSION]
    if newer:
        return Result(
            Code.FAILURE,
            f"{_services(newer)}: newer than this code's service version {SERVICE_VERSION}, "
            "whose RPC and object versions it does not know. Check with the code they run.",
        )
    conductors = [_version(row) for row in rows if row.binary == conductor.BINARY]
    newest = max(conductors, default=SERVICE_VERSION)
    ahead = [row for row in rows if row.binary != conductor.BINARY and _version(row) > newest]
    if ahead:
        return Result(
            Code.WARNING,
            f"{_services(ahead)}: newer than every conductor (service version {newest}). "
            "Upgrade the conductors first.",
        )
    return Result(Code.SUCCESS)


def _stored_objects_result(rows):
    """A stored object newer than this code's class (or of a class it does not know) is
    a Failure: this code could not load it."""
    objects.register_all()
    classes = base.PcisimObjectRegistry.obj_classes()
    known = {name: versions[0].VERSION for name, versions in classes.items()}
    namespace = base.PcisimObject.OBJ_SERIAL_NAMESPACE
    unknown = []
    for instance_uuid, text in rows:
        stored = jsonutils.loads(text)
        if f"{namespace}.name" not in stored:
            continue  # NOTE: a copy written before flavors were objects (Instance 1.4)
        name, version = stored[f"{namespace}.name"], stored[f"{namespace}.version"]
        if name not in known or _newer(version, known[name]):
            unknown.append(f"instance {instance_uuid}'s {name} {version}")
    if not unknown:
        return Result(Code.SUCCESS)
    shown = "; ".join(unknown[:SHOWN])
    return Result(
        Code.FAILURE,
        f"{len(unknown)} found: {shown}. These objects were stored by newer code than "
        "this, which cannot load them: run the upgrade check of the code that wrote them.",
    )


def _newer(version, known):
    return versionutils.convert_version_to_tuple(version) > (
        versionutils.convert_version_to_tuple(known)
    )


def _version(row):
    return row.version or 0  # NOTE: a service that has not said runs version 0 code


def _services(rows):
    named = [f"{row.binary} on {row.host} at service version {_version(row)}" for row in rows]
    return "; ".join(named)


def _schema_result(url):
    if sqlite.is_file_url(url) and not _exists(url):
        return Result(Code.FAILURE, f"The database {rpc.safe_url(url)} does not exist.")
    try:
        current, head = migration.db_version(), migration.head_revision()
    except cmd.UNREACHABLE_DATABASE as error:
        return _unreachable(url, error)
    if current == head:
        return Result(Code.SUCCESS)
    error = exception.DatabaseNotMigrated(
        url=rpc.safe_url(url), state=f"at revision {current}", head=head
    )
    return Result(Code.FAILURE, str(error))


def _exists(url):
    return os.path.exists(sqlite.file_path(url))


def _unreachable(url, error):
    reason = cmd.database_error(error, url)
    return Result(Code.FAILURE, f"Cannot reach the database {rpc.safe_url(url)}: {reason}")


def _devices(rows):
    named = [
        f"node {row.compute_node_id} {row.address or '(no address)'} "
        f"{row.status}{f' by {row.instance_uuid}' if row.instance_uuid else ''}"
        for row in rows[:SHOWN]
    ]
    more = len(rows) - SHOWN
    return "; ".join(named) + (f"; and {more} more" if more > 0 else "")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    checks = Checks()
    upgradecheck.register_cli_options(CONF, checks)
    try:
        pcisim_conf.parse_args(argv)
        cmd.check_values(CONF)
        cmd.configure_database(create_directory=False)
    except (cfg.Error, exception.InvalidConfigValue) as error:
        print(f"{BINARY}: {error}", file=sys.stderr)
        return EXIT_ERROR
    # NOTE: oslo.upgradecheck reads --json from its module's CONF, which its own main()
    # sets; pcisim parses its configuration itself (its options, its checks of values).
    upgradecheck.CONF = CONF
    return upgradecheck.run(CONF)
