"""pcisim-status: checks an operator runs before an upgrade, as nova-status does.

    pcisim-status [--config-file F] upgrade check [--json]

On oslo.upgradecheck: each check is a Success, a Warning (look before upgrading) or a
Failure (fix first); the exit code is the worst of them, 0, 1 or 2, and 255 for a
configuration that cannot be read or an unexpected error. The checks read the database
directly, as ``pcisim-manage`` does, and change nothing.
"""

import os
import sys

from oslo_config import cfg
from oslo_upgradecheck import upgradecheck

from pcisim import cmd, exception, rpc
from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim.db import migration, pci_audit, sqlite

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
            "compare it with its node's devices and delete it.",
        )

    def _check_held_by_missing_instances(self):
        """No PCI device is claimed or allocated for an instance that is gone."""
        return self._data_check(
            pci_audit.devices_held_by_missing_instances,
            Code.WARNING,
            "These devices are claimed or allocated for an instance without a live row. "
            "A delete in progress frees its devices within a periodic run of its compute; "
            "any other stays held, and never handed out, until mended.",
        )

    def _data_check(self, query, code, explanation):
        if self._check_schema().code != Code.SUCCESS:
            return Result(Code.WARNING, "Not checked: the database schema is not current.")
        url = pcisim_conf.database_connection()
        try:
            rows = query(pcisim_context.get_admin_context())
        except cmd.UNREACHABLE_DATABASE as error:
            return _unreachable(url, error)
        if not rows:
            return Result(Code.SUCCESS)
        return Result(code, f"{len(rows)} found: {_devices(rows)}. {explanation}")

    _upgrade_checks = (
        ("Database schema", _check_schema),
        ("PCI devices with an identity", _check_blank_devices),
        ("PCI devices held by live instances", _check_held_by_missing_instances),
    )


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
