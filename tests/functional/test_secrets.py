"""Passwords of transport and database URLs never appear in what pcisim prints or logs.

Every command is started as an operator starts it, with ``debug = true`` and URLs that
carry a password to servers that are not there (port 1), and everything it writes to
stdout and stderr is searched for the password. A service that waits for its broker
forever is read for a few seconds (as long as it takes to log a few reconnection
attempts) and then killed.
"""

import logging
import pathlib
import subprocess
import threading
import time

import pytest
from oslo_db.sqlalchemy import enginefacade

from pcisim import conf as pcisim_conf
from pcisim.db import engine as db_engine
from pcisim.db import migration
from tests import config_overrides
from tests.functional import processes

PASSWORD = "s3cr3t-pw"
RABBIT = f"rabbit://guest:{PASSWORD}@127.0.0.1:1/"
MYSQL = f"mysql+pymysql://root:{PASSWORD}@127.0.0.1:1/x"
POSTGRESQL = f"postgresql+psycopg2://root:{PASSWORD}@127.0.0.1:1/x"
UNKNOWN_DRIVER = f"nonsense://guest:{PASSWORD}@127.0.0.1:1/"
# A process is read until it logs what a test awaits, then a little longer, so that
# what it logs next (a retry, say) is read too.
AWAIT_SECONDS = 90
READ_AFTER_SECONDS = 2


@pytest.fixture
def migrated(tmp_path):
    """A migrated SQLite file, so that a conductor gets as far as its broker."""
    url = f"sqlite:///{tmp_path / 'pcisim.sqlite'}"
    manager = enginefacade.transaction_context()
    db_engine.configure_manager(manager, url)
    migration.db_sync(manager.writer.get_engine())
    manager.dispose_pool()
    return url


def _config(tmp_path, transport_url=None, connection=None, **sections):
    default = {"state_path": tmp_path / "state", "debug": "true"}
    if transport_url:
        default["transport_url"] = transport_url
    all_sections = {"DEFAULT": default, **sections}
    if connection:
        all_sections["database"] = {"connection": connection, "retry_interval": 0}
    return processes.write_config(tmp_path / "pcisim.conf", all_sections)


def _run(script, config, *args, before=()):
    command = [str(processes.console_script(script)), *before, "--config-file", str(config)]
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=processes.environment(),
        cwd=pathlib.Path(config).parent,
    )


def _output_until(text, script, config, *before):
    """Start ``script``, read what it writes until ``text`` appears (at most
    ``AWAIT_SECONDS``) and a little longer, kill it; its output."""
    command = [str(processes.console_script(script)), *before, "--config-file", str(config)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=processes.environment(),
        cwd=pathlib.Path(config).parent,
    )
    lines, seen = [], threading.Event()

    def read():
        for line in process.stdout:
            lines.append(line)
            if text in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if seen.wait(AWAIT_SECONDS):
        time.sleep(READ_AFTER_SECONDS)
    process.kill()
    process.wait(timeout=30)
    reader.join(timeout=30)
    process.stdout.close()
    return "".join(lines)


def _shown(result):
    return result.stdout + result.stderr


# ------------------------------------------------------------- commands that exit


@pytest.mark.parametrize(
    ("script", "args", "connection"),
    [
        ("pcisim-manage", ("db", "sync"), MYSQL),
        ("pcisim-manage", ("db", "version"), POSTGRESQL),
        ("pcisim-manage", ("db", "archive_deleted_rows", "--verbose"), MYSQL),
        ("pcisim-manage", ("db", "purge", "--all"), POSTGRESQL),
        ("pcisim-conductor", (), MYSQL),
        ("pcisim-conductor", (), POSTGRESQL),
    ],
)
def test_an_unreachable_database_is_named_without_its_password(tmp_path, script, args, connection):
    result = _run(script, _config(tmp_path, connection=connection), *args)

    assert result.returncode != 0
    assert PASSWORD not in _shown(result)
    assert "root:***@127.0.0.1:1/x" in result.stderr


def test_pcisim_up_names_an_unreachable_database_without_its_password(tmp_path):
    result = _run("pcisim", _config(tmp_path, connection=MYSQL), before=("up", "--port", "0"))

    assert result.returncode != 0
    assert PASSWORD not in _shown(result)
    assert "cannot reach the database mysql+pymysql://root:***@127.0.0.1:1/x" in result.stderr


@pytest.mark.parametrize(
    ("script", "before"),
    [("pcisim-conductor", ()), ("pcisim-compute", ()), ("pcisim-api", ()), ("pcisim", ("up",))],
)
def test_a_transport_url_of_no_installed_driver_is_named_without_its_password(
    tmp_path, script, before
):
    config = _config(tmp_path, transport_url=UNKNOWN_DRIVER, compute={"inventory": "n1=gpus=1"})

    result = _run(script, config, before=before)

    assert result.returncode != 0
    assert PASSWORD not in _shown(result)
    assert "nonsense://guest:***@127.0.0.1:1/" in result.stderr


def test_a_database_url_of_no_installed_driver_is_named_without_its_password(tmp_path):
    config = _config(tmp_path, connection=f"mysql+nosuchdriver://root:{PASSWORD}@h/x")

    result = _run("pcisim-manage", config, "db", "version")

    assert result.returncode == 2
    assert PASSWORD not in _shown(result)
    assert "mysql+nosuchdriver://root:***@h/x" in result.stderr


# ------------------------------------------------- services waiting for a broker


def test_a_conductor_waiting_for_its_broker_never_logs_the_password(tmp_path, migrated):
    config = _config(tmp_path, transport_url=RABBIT, connection=migrated)

    output = _output_until("Connection refused", "pcisim-conductor", config)

    assert "Connection refused" in output
    assert PASSWORD not in output


def test_a_compute_waiting_for_its_broker_never_logs_the_password(tmp_path):
    config = _config(tmp_path, transport_url=RABBIT, compute={"inventory": "node1=gpus=1"})

    output = _output_until("Connection refused", "pcisim-compute", config)

    assert "Connection refused" in output
    assert PASSWORD not in output


def test_pcisim_api_logs_its_broker_without_the_password(tmp_path):
    config = _config(tmp_path, transport_url=RABBIT)

    output = _output_until("pcisim API listening on", "pcisim-api", config)

    assert "pcisim API listening on" in output
    assert PASSWORD not in output


def test_pcisim_up_on_an_unreachable_broker_never_logs_the_password(tmp_path):
    config = _config(tmp_path, transport_url=RABBIT)

    output = _output_until("Connection refused", "pcisim", config, "up")

    assert "Connection refused" in output
    assert PASSWORD not in output


# ------------------------------------------------------------------- option values


def test_the_options_holding_secrets_are_masked_when_options_are_logged(config, caplog):
    values = {
        ("transport_url", None): RABBIT,
        ("connection", "database"): MYSQL,
        ("auth_token", "api"): PASSWORD + "-token",
        ("users", "api"): [f"alice:{PASSWORD}"],
    }
    with config_overrides.overridden(config, values), caplog.at_level(logging.DEBUG):
        pcisim_conf.CONF.log_opt_values(logging.getLogger("options"), logging.DEBUG)

    assert "transport_url" in caplog.text and "auth_token" in caplog.text
    assert "users" in caplog.text
    assert PASSWORD not in caplog.text
