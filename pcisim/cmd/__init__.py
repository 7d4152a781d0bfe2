"""Entry points of pcisim's commands.

NOTE: importing this package (as the ``pcisim`` HTTP client does) loads nothing of
oslo.messaging, oslo.db or SQLAlchemy: importing oslo.messaging fixes oslo.service's
backend, which each service command selects first thing in its ``main()``. The helpers
below import them when called.
"""

import faulthandler
import logging as std_logging
import re
import signal
import sys

from oslo_config import cfg
from oslo_log import log as logging

from pcisim import concurrency, exception, telemetry, trace


def select_backend(binary):
    """Select the concurrency backend, first thing in a service command's ``main()``;
    a ``PCISIM_CONCURRENCY`` that names no mode exits with one line saying so."""
    try:
        concurrency.select_backend()
    except concurrency.InvalidConcurrencyMode as error:
        sys.exit(f"{binary}: {error}")


def prepare(binary, argv=None):
    """Parse the command line and configuration files and set up logging, or exit with
    a message naming what is wrong with them."""
    from pcisim import conf as pcisim_conf

    try:
        pcisim_conf.parse_args(sys.argv[1:] if argv is None else argv)
        check_values(pcisim_conf.CONF)
    except (cfg.Error, exception.InvalidConfigValue) as error:
        sys.exit(f"{binary}: {error}")
    logging.setup(pcisim_conf.CONF, "pcisim")


def check_values(conf):
    """Read every option once, so that a value of the wrong type or out of range stops
    the command now, naming the option and its file, instead of failing in a thread
    later. Raises ``InvalidConfigValue``."""
    for key in list(conf):
        value = _value(conf, "DEFAULT", key)
        if isinstance(value, cfg.ConfigOpts.GroupAttr):
            for name in list(value):
                _value(value, key, name)


# NOTE: what oslo.config says of a bad value; get_location() would raise the same error.
_BAD_VALUE = re.compile(r"LocationInfo\(.*?detail='(?P<file>[^']*)'\) is not valid: (?P<reason>.*)")


def _value(holder, group, name):
    try:
        return holder[name]
    except cfg.ConfigSourceValueError as error:
        found = _BAD_VALUE.search(str(error))
        where = f" in {found['file']}" if found and found["file"] else ""
        reason = found["reason"] if found else str(error)
        raise exception.InvalidConfigValue(option=f"[{group}] {name}{where}", reason=reason)


def check_transport_url(binary, url=None):
    """Exit naming ``[DEFAULT] transport_url`` (its password masked) when no transport
    can be made of it: a malformed URL, or a driver that is not installed."""
    import oslo_messaging as messaging

    from pcisim import conf as pcisim_conf
    from pcisim import rpc

    url = url or pcisim_conf.CONF.transport_url
    try:
        rpc.get_transport(url=url).cleanup()
    except (messaging.MessagingException, ValueError, ImportError) as error:
        invalid = exception.InvalidConfigValue(
            option="[DEFAULT] transport_url", reason=rpc.masked(f"{url}: {error}", url)
        )
        sys.exit(f"{binary}: {invalid}")


def check_database_url(url):
    """Raise ``InvalidConfigValue`` naming ``[database] connection`` (its password
    masked) when SQLAlchemy cannot use it: malformed, or of a dialect or driver that is
    not installed. Nothing is connected to."""
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.engine import url as sa_url

    from pcisim import rpc

    try:
        sa_url.make_url(url).get_dialect().import_dbapi()
    except (sa_exc.ArgumentError, sa_exc.NoSuchModuleError, ValueError, ImportError) as error:
        reason = rpc.masked(f"{url}: {error}", url)
        raise exception.InvalidConfigValue(option="[database] connection", reason=reason)


def configure_database(create_directory=True):
    """Point the DB API at the configured database after checking its URL; raises
    ``InvalidConfigValue`` instead of touching anything when it is unusable.
    ``create_directory``: create a SQLite file's directory when missing."""
    from pcisim import conf as pcisim_conf
    from pcisim import rpc
    from pcisim.db import engine

    url = pcisim_conf.database_connection()
    check_database_url(url)
    try:
        engine.configure(create_directory=create_directory)
    except OSError as error:
        reason = rpc.masked(f"{url}: cannot create its directory: {error}", url)
        raise exception.InvalidConfigValue(option="[database] connection", reason=reason)


def _unreachable_database():
    from oslo_db import exception as db_exc
    from sqlalchemy import exc as sa_exc

    # NOTE: oslo.db translates a refused MySQL connection into DBConnectionError, but
    # not libpq's "connection to server ... failed", which stays SQLAlchemy's
    # OperationalError.
    return (db_exc.DBConnectionError, sa_exc.OperationalError)


def _database_errors():
    from oslo_db import exception as db_exc
    from sqlalchemy import exc as sa_exc

    return (db_exc.DBError, sa_exc.OperationalError)


_LAZY_ERROR_GROUPS = {
    "UNREACHABLE_DATABASE": _unreachable_database,
    "DATABASE_ERRORS": _database_errors,
}


def __getattr__(name):
    """``UNREACHABLE_DATABASE`` and ``DATABASE_ERRORS``, the exception classes to catch
    for a database that fails, imported on first use (see the module's NOTE)."""
    if name in _LAZY_ERROR_GROUPS:
        return _LAZY_ERROR_GROUPS[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def database_error(error, url):
    """One line saying why the database at ``url`` failed, without its password
    (SQLAlchemy adds a second line pointing to its documentation)."""
    from pcisim import rpc

    cause = getattr(getattr(error, "inner_exception", None), "orig", None) or error
    return rpc.masked(str(cause).splitlines()[0], url)


def prepare_service(binary, argv=None):
    """``prepare`` for a long-running service, which also takes ``--trace`` and exports
    OpenTelemetry traces when ``[otel] enabled``."""
    from pcisim import conf as pcisim_conf

    pcisim_conf.CONF.register_cli_opts(pcisim_conf.trace_cli_opts)
    prepare(binary, argv)
    dump_stacks_on_sigusr2()
    try:
        telemetry.start(pcisim_conf.CONF, service_name=binary.replace(" ", "-"))
    except exception.InvalidConfigValue as error:
        sys.exit(f"{binary}: {error}")
    if pcisim_conf.CONF.trace:
        path = pcisim_conf.CONF.trace_file
        try:
            trace.start(path, default_actor=binary)
        except OSError as error:
            sys.exit(f"{binary}: cannot record the trace to {path}: {error.strerror}")
        logging.getLogger(__name__).info("Recording every message to %s", trace.path())


def dump_stacks_on_sigusr2():
    """Make SIGUSR2 write the stack of every thread where the log goes, and run on.

    faulthandler writes from the signal handler itself, so a process whose threads are
    all blocked (a deadlock, a wait that never ends) still shows where each one is.
    """
    faulthandler.register(signal.SIGUSR2, file=_log_stream(), all_threads=True)


def _log_stream():
    """The stream of the root logger's first handler that has one (the log file, or
    the standard output or error oslo.log writes to); standard error otherwise."""
    for handler in std_logging.getLogger().handlers:
        stream = getattr(handler, "stream", None)
        if stream is not None and hasattr(stream, "fileno"):
            return stream
    return sys.stderr


def manage_main():
    """``pcisim-manage``: the backend is selected before the command's module is
    imported, since that module loads oslo.messaging (through the configuration)."""
    select_backend("pcisim-manage")
    from pcisim.cmd import manage

    return manage.console_main()


def status_main():
    """``pcisim-status``, its backend selected first for the same reason."""
    select_backend("pcisim-status")
    from pcisim.cmd import status

    sys.exit(status.main())
