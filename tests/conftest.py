import pytest

import pcisim  # noqa: F401  (selects the concurrency backend before anything else)
from db import engine
from pcisim import context as pcisim_context
from tests import backends


@pytest.fixture(scope="session", params=backends.BACKENDS)
def database(request, tmp_path_factory):
    """A fresh, migrated database on each backend, shared by the tests of a run."""
    scratch = backends.ScratchDatabase(request.param, tmp_path_factory)
    yield scratch
    scratch.drop()


@pytest.fixture
def db(database):
    """The DB API pointed at an empty database of each backend."""
    database.empty()
    reset = engine.context_manager.patch_factory(database.manager)
    yield database
    reset()


@pytest.fixture
def ctxt():
    return pcisim_context.get_admin_context()
