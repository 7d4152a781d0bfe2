"""SQLite as pcisim runs it: concurrent writers wait their turn instead of failing."""

import threading

import pytest

from pcisim.db import api
from tests import backends
from tests.unit.db import factories


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    """SQLite only: its locking is what this module is about."""
    scratch = backends.ScratchDatabase("sqlite", tmp_path_factory)
    yield scratch
    scratch.drop()


def test_concurrent_read_then_write_transactions_never_fail_as_locked(db, ctxt):
    instances = [factories.instance(ctxt) for _ in range(4)]
    errors = []

    def update_and_read(instance):
        for n in range(30):
            try:
                api.instance_update(ctxt, instance.uuid, {"vm_state": f"state-{n}"})
                api.instance_get_by_uuid(ctxt, instance.uuid)
            except Exception as error:  # noqa: BLE001 - collected for the assertion
                errors.append(error)

    threads = [threading.Thread(target=update_and_read, args=(i,)) for i in instances]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert {api.instance_get_by_uuid(ctxt, i.uuid).vm_state for i in instances} == {"state-29"}
