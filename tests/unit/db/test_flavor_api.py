"""Flavors and their extra specs in the database: one live flavor per id and name,
extra specs set, replaced and removed by key, a deleted flavor gone from reads."""

import pytest

from pcisim import exception
from pcisim.db import archive
from pcisim.db import flavors as db_flavors

GPU = {
    "flavorid": "gpu.small",
    "name": "gpu.small",
    "memory_mb": 2048,
    "vcpus": 2,
    "root_gb": 10,
    "ephemeral_gb": 0,
    "swap": 0,
    "is_public": True,
    "disabled": False,
    "description": None,
}


def test_a_flavor_is_stored_with_its_extra_specs(db, ctxt):
    db_flavors.flavor_create(ctxt, GPU, {"pci_passthrough:alias": "gpu:1"})

    flavor = db_flavors.flavor_get_by_flavor_id(ctxt, "gpu.small")
    assert (flavor["memory_mb"], flavor["vcpus"], flavor["root_gb"]) == (2048, 2, 10)
    assert flavor["extra_specs"] == {"pci_passthrough:alias": "gpu:1"}


@pytest.mark.parametrize(
    ("changed", "error"),
    [({"name": "other"}, exception.FlavorIdExists), ({"flavorid": "2"}, exception.FlavorExists)],
)
def test_a_second_live_flavor_with_the_same_id_or_name_is_refused(db, ctxt, changed, error):
    db_flavors.flavor_create(ctxt, GPU)

    with pytest.raises(error):
        db_flavors.flavor_create(ctxt, {**GPU, **changed}, {"hw:numa_nodes": "1"})

    assert [f["flavorid"] for f in db_flavors.flavor_get_all(ctxt)] == ["gpu.small"]


def test_extra_specs_are_set_replaced_and_removed_by_key(db, ctxt):
    db_flavors.flavor_create(ctxt, GPU, {"a": "1", "b": "2"})

    after = db_flavors.flavor_extra_specs_update_or_create(ctxt, "gpu.small", {"b": "3", "c": "4"})
    db_flavors.flavor_extra_specs_delete(ctxt, "gpu.small", "a")

    assert after == {"a": "1", "b": "3", "c": "4"}
    assert db_flavors.flavor_get_by_flavor_id(ctxt, "gpu.small")["extra_specs"] == {
        "b": "3",
        "c": "4",
    }
    with pytest.raises(exception.FlavorExtraSpecsNotFound, match="a"):
        db_flavors.flavor_extra_specs_delete(ctxt, "gpu.small", "a")


def test_a_deleted_flavor_is_gone_its_id_reusable_and_archived_with_its_specs(db, ctxt):
    db_flavors.flavor_create(ctxt, GPU, {"a": "1"})

    db_flavors.flavor_destroy(ctxt, "gpu.small")

    with pytest.raises(exception.FlavorNotFound, match="gpu.small"):
        db_flavors.flavor_get_by_flavor_id(ctxt, "gpu.small")
    db_flavors.flavor_create(ctxt, GPU)
    moved = archive.archive_deleted_rows(ctxt).rows
    assert (moved["flavors"], moved["flavor_extra_specs"]) == (1, 1)
    assert db_flavors.flavor_get_by_flavor_id(ctxt, "gpu.small")["extra_specs"] == {}


def test_flavors_are_listed_by_id_and_filtered_by_visibility_and_size(db, ctxt):
    db_flavors.flavor_create(ctxt, {**GPU, "flavorid": "b", "name": "b", "is_public": False})
    db_flavors.flavor_create(ctxt, {**GPU, "flavorid": "a", "name": "a", "memory_mb": 512})

    assert [f["flavorid"] for f in db_flavors.flavor_get_all(ctxt)] == ["a", "b"]
    assert [f["flavorid"] for f in db_flavors.flavor_get_all(ctxt, is_public=True)] == ["a"]
    assert [f["flavorid"] for f in db_flavors.flavor_get_all(ctxt, min_memory_mb=1024)] == ["b"]


def test_unknown_flavors_are_not_found_by_any_write(db, ctxt):
    for write in (
        lambda: db_flavors.flavor_destroy(ctxt, "nope"),
        lambda: db_flavors.flavor_extra_specs_update_or_create(ctxt, "nope", {"a": "1"}),
        lambda: db_flavors.flavor_extra_specs_delete(ctxt, "nope", "a"),
    ):
        with pytest.raises(exception.FlavorNotFound, match="nope"):
            write()
