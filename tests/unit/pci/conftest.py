import pytest

from pcisim import conf as pcisim_conf
from tests import backends


@pytest.fixture(scope="session")
def database(tmp_path_factory):
    """The tracker's tests run on SQLite: its database work is the conductor's, tested
    on every backend elsewhere."""
    scratch = backends.ScratchDatabase("sqlite", tmp_path_factory)
    yield scratch
    scratch.drop()


@pytest.fixture(scope="session")
def transport_url():
    return pcisim_conf.IN_PROCESS_TRANSPORT_URL
