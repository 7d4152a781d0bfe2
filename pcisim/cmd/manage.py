"""pcisim-manage: admin commands that work on the database directly, as nova-manage does.

    pcisim-manage [--config-file F] db sync
    pcisim-manage db version
    pcisim-manage db archive_deleted_rows [--max_rows N] [--before DATE] [--until-complete]
                                          [--sleep SECONDS] [--verbose] [--purge]
    pcisim-manage db purge (--all | --before DATE) [--verbose]
    pcisim-manage pci audit [--host HOST] [--heal] [--dry-run] [--verbose] [-f {text,json}]

Exit codes follow nova-manage. archive_deleted_rows: 0 nothing archived, 1 rows
archived, 2 invalid --max_rows (not an integer from 1 to 2147483647) or other invalid
arguments, 3 database unreachable, 4 invalid --before. purge: 0 rows deleted, 1 neither
--all nor --before, 2 invalid --before, 3 nothing purged. Every command: 2 for a bad
configuration file or argument, 255 for an unexpected error (and for an unreachable
database outside archiving, or one whose schema is not at this code's revision, which
archive and purge refuse, telling to run ``db sync``; a missing SQLite file is never
created by any command but ``db sync``). pci audit: 0 nothing found, 1 findings (healed
or not, as the output says), 3 database unreachable (see ``pcisim.cmd.pci_audit``).
"""

import argparse
import os
import signal
import sys
import threading

from dateutil import parser as date_parser
from dateutil import tz
from oslo_config import cfg
from oslo_log import log as logging

from pcisim import cmd, exception, rpc, table
from pcisim import conf as pcisim_conf
from pcisim import context as pcisim_context
from pcisim.cmd import pci_audit
from pcisim.db import archive, migration, sqlite

CONF = pcisim_conf.CONF
LOG = logging.getLogger(__name__)

EXIT_CONFIG_ERROR = 2
EXIT_ARCHIVE_UNREACHABLE = 3
EXIT_UNEXPECTED = 255


def _max_rows(text):
    """``--max_rows`` as an int; ``InvalidArchiveBudget`` naming it when out of range."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise exception.InvalidArchiveBudget(max_rows=text) from None
    if not 1 <= value <= archive.MAX_ROWS:
        raise exception.InvalidArchiveBudget(max_rows=text)
    return value


def parse_date(text):
    """A date as naive UTC; ``InvalidInput`` naming the text when it is not one."""
    try:
        value = date_parser.parse(text)
        if value.tzinfo is not None:
            value = value.astimezone(tz.UTC).replace(tzinfo=None)
    except (ValueError, OverflowError):
        raise exception.InvalidInput(reason=f"{text!r} is not a date (in UTC)")
    return value


def _seconds(text):
    """An argparse type: a non-negative number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


class _Progress:
    """A one-line running count on a terminal; silent when output is redirected."""

    def __init__(self):
        self.enabled = sys.stderr.isatty()

    def show(self, total):
        if self.enabled:
            sys.stderr.write(f"\rArchived {total} rows so far (Ctrl-C stops cleanly)...")
            sys.stderr.flush()

    def done(self):
        if self.enabled:
            sys.stderr.write("\n")


class _StopRequest(threading.Event):
    """Set by SIGINT (Ctrl-C) while in use, so that a loop of batches stops between
    two of them.

    A KeyboardInterrupt raised wherever the signal lands may be swallowed by the
    database layer's clean-up, and the loop would go on; a flag checked between
    batches cannot be. A second Ctrl-C interrupts at once.
    """

    def __enter__(self):
        self._previous = signal.signal(signal.SIGINT, self._requested)
        return self

    def _requested(self, signum, frame):
        self.set()
        signal.signal(signal.SIGINT, self._previous)

    def __exit__(self, *exc_info):
        signal.signal(signal.SIGINT, self._previous)


def _missing_file(url):
    return sqlite.is_file_url(url) and not os.path.exists(sqlite.file_path(url))


class DbCommands:
    """Schema and data-retention commands of the ``db`` category, on the database at
    ``url``."""

    def __init__(self, url):
        self.url = url

    def sync(self):
        migration.db_sync()
        print(f"Database is at revision {migration.db_version()}.")
        return 0

    def version(self):
        """Print the revision, and on stderr which database was read."""
        revision = None if _missing_file(self.url) else migration.db_version()
        print(revision or "None (the database has not been migrated)")
        print(f"database: {rpc.safe_url(self.url)}", file=sys.stderr)
        return 0

    def require_head(self):
        """Raise ``DatabaseNotMigrated`` unless the schema is at this code's newest
        revision; a missing SQLite file is reported without being created."""
        head = migration.head_revision()
        revision = None if _missing_file(self.url) else migration.db_version()
        if revision == head:
            return
        if _missing_file(self.url):
            state = "missing"
        elif revision is None:
            state = "not migrated"
        else:
            state = f"at revision {revision}"
        raise exception.DatabaseNotMigrated(url=rpc.safe_url(self.url), state=state, head=head)

    def archive_deleted_rows(self, max_rows, before, until_complete, sleep, verbose, purge):
        try:
            max_rows = _max_rows(max_rows)
        except exception.Invalid as error:
            print(f"Invalid --max_rows: {error}", file=sys.stderr)
            return 2
        try:
            before = parse_date(before) if before else None
        except exception.Invalid as error:
            print(f"Invalid --before: {error}", file=sys.stderr)
            return 4
        self.require_head()
        result = self._archive(max_rows, before, until_complete, sleep)
        if verbose:
            self._print_archived(result)
        if purge and result.total:
            archive.purge_shadow_tables(pcisim_context.get_admin_context())
        return 1 if result.total else 0

    def _archive(self, max_rows, before, until_complete, sleep):
        ctxt = pcisim_context.get_admin_context()
        total = archive.ArchiveResult()
        if not until_complete:
            total.add(archive.archive_deleted_rows(ctxt, max_rows=max_rows, before=before))
            return total
        progress = _Progress()
        with _StopRequest() as stop:
            while not stop.is_set():
                batch = archive.archive_deleted_rows(ctxt, max_rows=max_rows, before=before)
                total.add(batch)
                if not batch.total:
                    break
                progress.show(total.total)
                stop.wait(sleep)
            progress.done()
            if stop.is_set():
                print("Interrupted: stopped after the last complete batch.", file=sys.stderr)
        return total

    @staticmethod
    def _print_archived(result):
        if not result.total:
            print("Nothing was archived.")
            return
        rows = sorted(result.rows.items())
        print(table.render(["Table", "Number of Rows Archived"], rows))

    def purge(self, all_rows, before, verbose):
        if not (all_rows or before):
            print("Either --all or --before is required.", file=sys.stderr)
            return 1
        if all_rows and before:
            print("--all and --before are mutually exclusive.", file=sys.stderr)
            return 1
        try:
            before = parse_date(before) if before else None
        except exception.Invalid as error:
            print(f"Invalid --before: {error}", file=sys.stderr)
            return 2
        self.require_head()
        purged = archive.purge_shadow_tables(pcisim_context.get_admin_context(), before=before)
        if verbose:
            for name, count in sorted(purged.items()):
                print(f"Deleted {count} rows from {name}")
        if not purged:
            if verbose:
                print("No rows were purged.")
            return 3
        return 0


def _add_db_parsers(subparsers):
    db_parser = subparsers.add_parser("db", help="database schema and retention")
    actions = db_parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("sync", help="upgrade the database schema to the newest revision")
    actions.add_parser("version", help="print the database schema revision")

    archive_parser = actions.add_parser(
        "archive_deleted_rows", help="move soft-deleted rows into shadow tables"
    )
    archive_parser.add_argument(
        "--max_rows",
        "--max-rows",
        dest="max_rows",
        default="1000",
        metavar="N",
        help="at most N rows per run (default 1000); whole trees only",
    )
    archive_parser.add_argument(
        "--before", metavar="DATE", help="only rows deleted before DATE (UTC unless given)"
    )
    archive_parser.add_argument(
        "--until-complete",
        "--until_complete",
        dest="until_complete",
        action="store_true",
        help="repeat in batches of --max_rows until nothing is left",
    )
    archive_parser.add_argument(
        "--sleep",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="pause between batches of --until-complete",
    )
    archive_parser.add_argument("--verbose", action="store_true", help="print what moved")
    archive_parser.add_argument(
        "--purge", action="store_true", help="delete all shadow rows after archiving"
    )

    purge_parser = actions.add_parser("purge", help="delete rows from the shadow tables")
    purge_parser.add_argument(
        "--all", dest="all_rows", action="store_true", help="every shadow row"
    )
    purge_parser.add_argument("--before", metavar="DATE", help="shadow rows deleted before DATE")
    purge_parser.add_argument("--verbose", action="store_true", help="print what was deleted")


def _add_pci_parsers(subparsers):
    pci_parser = subparsers.add_parser("pci", help="PCI device records")
    actions = pci_parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    audit_parser = actions.add_parser(
        "audit", help="find PCI device records the tracker forbids; --heal mends some"
    )
    # NOTE: dest not "host": that would shadow [DEFAULT] host in the parsed options.
    audit_parser.add_argument(
        "--host", dest="audit_host", metavar="HOST", help="only the nodes of HOST"
    )
    audit_parser.add_argument(
        "--heal", action="store_true", help="mend what can be mended without guessing"
    )
    audit_parser.add_argument(
        "--dry-run", action="store_true", help="say what --heal would mend; change nothing"
    )
    audit_parser.add_argument(
        "--verbose", action="store_true", help="also each device's row, and clean nodes"
    )
    audit_parser.add_argument(
        "-f",
        "--format",
        dest="output",
        choices=pci_audit.FORMATS,
        default=pci_audit.TEXT,
        help="output format (default: %(default)s)",
    )


def _add_parsers(subparsers):
    _add_db_parsers(subparsers)
    _add_pci_parsers(subparsers)


CATEGORY_OPT = cfg.SubCommandOpt(
    "category", title="Categories", handler=_add_parsers, help="command category"
)

_ACTION_ARGS = {
    "archive_deleted_rows": ("max_rows", "before", "until_complete", "sleep", "verbose", "purge"),
    "purge": ("all_rows", "before", "verbose"),
}


def _run(action, url):
    if CONF.category.name == "pci":
        DbCommands(url).require_head()
        options = CONF.category
        return pci_audit.audit(
            options.audit_host, options.heal, options.dry_run, options.verbose, options.output
        )
    commands = DbCommands(url)
    kwargs = {name: getattr(CONF.category, name) for name in _ACTION_ARGS.get(action, ())}
    return getattr(commands, action)(**kwargs)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    CONF.register_cli_opt(CATEGORY_OPT)
    try:
        pcisim_conf.parse_args(argv)
        cmd.check_values(CONF)
        cmd.configure_database(create_directory=CONF.category.action == "sync")
    except (cfg.Error, exception.InvalidConfigValue) as error:
        print(f"pcisim-manage: {error}", file=sys.stderr)
        return EXIT_CONFIG_ERROR
    action = CONF.category.action
    url = pcisim_conf.database_connection()
    try:
        return _run(action, url)
    except exception.DatabaseNotMigrated as error:
        print(f"pcisim-manage: {error}", file=sys.stderr)
        return EXIT_UNEXPECTED
    except cmd.UNREACHABLE_DATABASE as error:
        reason = cmd.database_error(error, url)
        print(f"Cannot reach the database {rpc.safe_url(url)}: {reason}", file=sys.stderr)
        says_unreachable = action in ("archive_deleted_rows", "audit")
        return EXIT_ARCHIVE_UNREACHABLE if says_unreachable else EXIT_UNEXPECTED
    except Exception as error:
        LOG.exception("pcisim-manage %s %s failed", CONF.category.name, action)
        print(
            f"pcisim-manage {CONF.category.name} {action} failed: {rpc.masked(error, url)}",
            file=sys.stderr,
        )
        return EXIT_UNEXPECTED


def console_main():
    sys.exit(main())
