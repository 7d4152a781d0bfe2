"""PCI aliases and requests: what an operator may configure and a user may ask for."""

import json
import uuid

import pytest

from pcisim import exception
from pcisim.objects.instance_pci_requests import InstancePCIRequests
from pcisim.pci import request
from pcisim.pci.request import Alias

NIC = '{"name": "nic", "vendor_id": "8086", "product_id": "1520", "device_type": "type-VF"}'
GPU = '{"name": "gpu", "vendor_id": "10de", "product_id": "1eb8", "numa_policy": "required"}'


IDS = {"vendor_id": "8086", "product_id": "1520"}


def alias(**values):
    return json.dumps({"name": "a", **IDS, **values})


def config_error(values):
    with pytest.raises(exception.PciConfigError) as raised:
        request.parse_aliases(values)
    return raised.value


@pytest.fixture
def aliases():
    return request.parse_aliases([NIC, GPU])


# Aliases: good definitions and defaults


def test_an_alias_keeps_its_name_type_policy_and_ids():
    assert request.parse_aliases([NIC, GPU]) == {
        "nic": Alias("nic", "type-VF", "legacy", ({"vendor_id": "8086", "product_id": "1520"},)),
        "gpu": Alias("gpu", None, "required", ({"vendor_id": "10de", "product_id": "1eb8"},)),
    }


def test_no_values_define_no_alias():
    assert request.parse_aliases([]) == {}


def test_numa_policy_defaults_to_legacy_and_device_type_to_none():
    (defined,) = request.parse_aliases([alias()]).values()
    assert (defined.numa_policy, defined.device_type) == ("legacy", None)


@pytest.mark.parametrize(
    ("ids", "missing"),
    [
        ({}, "no vendor_id and no product_id"),
        ({"vendor_id": "8086"}, "no product_id"),
        ({"product_id": "1520"}, "no vendor_id"),
    ],
)
def test_an_alias_without_vendor_id_or_product_id_is_refused_as_nova_refuses_it(ids, missing):
    error = config_error([json.dumps({"name": "a", **ids})])
    assert f"alias 'a' has {missing}; an alias names the vendor_id and product_id" in str(error)


def test_a_vdpa_alias_is_refused_as_nova_refuses_it():
    error = config_error([alias(device_type="vdpa")])
    assert "alias 'a' asks for vdpa devices, which are not requested by alias" in str(error)


@pytest.mark.parametrize("device_type", ["type-PCI", "type-PF", "type-VF"])
def test_every_device_type_is_accepted(device_type):
    assert request.parse_aliases([alias(device_type=device_type)])["a"].device_type == device_type


@pytest.mark.parametrize("policy", ["required", "legacy", "preferred", "socket"])
def test_every_numa_policy_is_accepted(policy):
    assert request.parse_aliases([alias(numa_policy=policy)])["a"].numa_policy == policy


def test_ids_are_lowercased():
    spec = request.parse_aliases([alias(vendor_id="10DE", product_id="1Eb8")])["a"].specs[0]
    assert spec == {"vendor_id": "10de", "product_id": "1eb8"}


def test_the_name_is_stripped():
    assert list(request.parse_aliases([json.dumps({"name": " gpu ", **IDS})])) == ["gpu"]


def test_a_value_may_be_a_list_of_definitions():
    assert set(request.parse_aliases([f"[{NIC}, {GPU}]"])) == {"nic", "gpu"}


# Aliases: a repeated name ORs its specs


def test_a_repeated_name_ors_its_specs_in_order():
    pf = alias(vendor_id="8086", product_id="1521")
    vf = alias(vendor_id="8086", product_id="1520")
    assert request.parse_aliases([pf, vf])["a"].specs == (
        {"vendor_id": "8086", "product_id": "1521"},
        {"vendor_id": "8086", "product_id": "1520"},
    )


def test_a_name_repeated_inside_one_list_ors_too():
    both = json.dumps(
        [{"name": "a", **IDS, "product_id": "0001"}, {"name": "a", **IDS, "product_id": "0002"}]
    )
    assert len(request.parse_aliases([both])["a"].specs) == 2


def test_an_absent_numa_policy_agrees_with_legacy():
    defined = request.parse_aliases([alias(), alias(numa_policy="legacy")])["a"]
    assert defined.numa_policy == "legacy"


# Aliases: repeated definitions that conflict


@pytest.mark.parametrize(
    ("first", "second", "shown"),
    [
        (
            {"device_type": "type-VF"},
            {"device_type": "type-PF"},
            "device_type 'type-VF' and 'type-PF'",
        ),
        ({"device_type": "type-VF"}, {}, "device_type 'type-VF' and None"),
        ({}, {"device_type": "type-PCI"}, "device_type None and 'type-PCI'"),
        (
            {"numa_policy": "required"},
            {"numa_policy": "socket"},
            "numa_policy 'required' and 'socket'",
        ),
        ({"numa_policy": "preferred"}, {}, "numa_policy 'preferred' and 'legacy'"),
    ],
)
def test_repeated_definitions_must_agree(first, second, shown):
    error = config_error([alias(**first), alias(**second)])
    assert error.kwargs["option"] == "alias"
    assert error.kwargs["entry"] == alias(**second)
    assert f"alias 'a' is defined with {shown}" in error.message


# Aliases: bad values, each named in the error


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("{not json", "not valid JSON"),
        ('"nic"', "expected a JSON dict or a JSON list of dicts"),
        ('[{"name": "a"}, 1]', "expected a JSON dict or a JSON list of dicts"),
        ('{"vendor_id": "8086"}', "the key 'name' is missing"),
        ('{"name": ""}', "name '' is not a non-empty string"),
        ('{"name": "  "}', "name '  ' is not a non-empty string"),
        ('{"name": 7}', "name 7 is not a non-empty string"),
        ('{"name": "a:b"}', "name 'a:b' contains ':' or ','"),
        ('{"name": "a,b"}', "name 'a,b' contains ':' or ','"),
        (alias(colour="red"), "unknown key 'colour'"),
        (alias(capability_type="pci"), "unknown key 'capability_type'"),
        (alias(vendor_id="808"), "vendor_id '808' is not 4 hex digits"),
        (alias(vendor_id="80861"), "vendor_id '80861' is not 4 hex digits"),
        (alias(vendor_id="80g6"), "vendor_id '80g6' is not 4 hex digits"),
        (alias(vendor_id=8086), "vendor_id 8086 is not 4 hex digits"),
        (alias(product_id="0x15"), "product_id '0x15' is not 4 hex digits"),
        (alias(device_type="type-GPU"), "device_type 'type-GPU' is not one of"),
        (alias(device_type=None), "device_type None is not one of"),
        (alias(numa_policy="strict"), "numa_policy 'strict' is not one of"),
        (alias(numa_policy=None), "numa_policy None is not one of"),
    ],
)
def test_a_bad_entry_is_named_with_its_bad_key_and_value(entry, reason):
    error = config_error([NIC, entry])
    assert (error.kwargs["option"], error.kwargs["entry"]) == ("alias", entry)
    assert reason in error.kwargs["reason"]
    assert error.message.startswith(f"Invalid [pci] alias entry {entry}: ")


# Requests as text


def test_text_names_aliases_with_counts_in_order(aliases):
    assert request.parse_request("nic:2,gpu:1", aliases) == [
        (aliases["nic"], 2),
        (aliases["gpu"], 1),
    ]


def test_whitespace_around_items_names_and_counts_is_ignored(aliases):
    assert request.parse_request("  nic : 2 ,\tgpu:1 ", aliases) == [
        (aliases["nic"], 2),
        (aliases["gpu"], 1),
    ]


def test_a_leading_zero_is_still_a_count(aliases):
    assert request.parse_request("nic:02", aliases) == [(aliases["nic"], 2)]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "it is empty"),
        ("   ", "it is empty"),
        ("nic:1,,gpu:1", "it has an empty item"),
        ("nic:1,", "it has an empty item"),
        (",nic:1", "it has an empty item"),
        ("nic", "item 'nic' has no count; write 'nic:1' for one device"),
        (":1", "an item has no alias name"),
        ("nic:", "count '' of 'nic' is not a positive integer"),
        ("nic:0", "count 0 of 'nic' is not a positive integer"),
        ("nic:-1", "count '-1' of 'nic' is not a positive integer"),
        ("nic:+1", "count '+1' of 'nic' is not a positive integer"),
        ("nic:x", "count 'x' of 'nic' is not a positive integer"),
        ("nic:1.5", "count '1.5' of 'nic' is not a positive integer"),
        ("nic:1:2", "count '1:2' of 'nic' is not a positive integer"),
    ],
)
def test_a_bad_text_request_is_refused_with_its_reason(aliases, text, reason):
    with pytest.raises(exception.InvalidPciRequest) as raised:
        request.parse_request(text, aliases)
    assert raised.value.kwargs == {"request": text, "reason": reason}


def test_an_unknown_alias_is_named(aliases):
    with pytest.raises(exception.PciAliasNotFound) as raised:
        request.parse_request("nic:1,fpga:1", aliases)
    assert raised.value.kwargs == {"alias": "fpga"}


# Requests as the HTTP API's list


def test_a_list_names_aliases_with_counts_in_order(aliases):
    items = [{"alias": "gpu", "count": 1}, {"alias": "nic", "count": 3}]
    assert request.parse_request(items, aliases) == [(aliases["gpu"], 1), (aliases["nic"], 3)]


@pytest.mark.parametrize(
    ("items", "reason"),
    [
        ([], "it is empty"),
        ([{"alias": "nic"}], "item {'alias': 'nic'} is not a dict of exactly 'alias' and 'count'"),
        (
            [{"alias": "nic", "count": 1, "numa": "x"}],
            "is not a dict of exactly 'alias' and 'count'",
        ),
        (["nic:1"], "item 'nic:1' is not a dict of exactly 'alias' and 'count'"),
        ([{"alias": 5, "count": 1}], "alias 5 is not a string"),
        ([{"alias": "", "count": 1}], "an item has no alias name"),
        ([{"alias": "nic", "count": 0}], "count 0 of 'nic' is not a positive integer"),
        ([{"alias": "nic", "count": -1}], "count -1 of 'nic' is not a positive integer"),
        ([{"alias": "nic", "count": "1"}], "count '1' of 'nic' is not a positive integer"),
        ([{"alias": "nic", "count": 1.5}], "count 1.5 of 'nic' is not a positive integer"),
        ([{"alias": "nic", "count": True}], "count True of 'nic' is not a positive integer"),
    ],
)
def test_a_bad_list_request_is_refused_with_its_reason(aliases, items, reason):
    with pytest.raises(exception.InvalidPciRequest) as raised:
        request.parse_request(items, aliases)
    assert raised.value.kwargs["request"] == items
    assert reason in raised.value.kwargs["reason"]


def test_an_unknown_alias_in_a_list_is_named(aliases):
    with pytest.raises(exception.PciAliasNotFound) as raised:
        request.parse_request([{"alias": "fpga", "count": 1}], aliases)
    assert raised.value.kwargs == {"alias": "fpga"}


@pytest.mark.parametrize("value", [None, 3, {"alias": "nic", "count": 1}])
def test_a_request_is_text_or_a_list(aliases, value):
    with pytest.raises(exception.InvalidPciRequest, match="expected text or a list of dicts"):
        request.parse_request(value, aliases)


# Building InstancePCIRequest objects


def test_a_request_carries_count_spec_alias_and_policy(aliases):
    (built,) = request.build_requests("nic:2", aliases)
    assert (built.count, built.alias_name, built.numa_policy) == (2, "nic", "legacy")
    assert built.spec == [{"vendor_id": "8086", "product_id": "1520", "dev_type": "type-VF"}]


def test_a_spec_has_no_dev_type_when_the_alias_has_no_device_type(aliases):
    (built,) = request.build_requests("gpu:1", aliases)
    assert (built.spec, built.numa_policy) == (
        [{"vendor_id": "10de", "product_id": "1eb8"}],
        "required",
    )


def test_every_ored_spec_gets_the_dev_type():
    specs = [
        alias(product_id="1521", device_type="type-PF"),
        alias(vendor_id="15b3", product_id="101d", device_type="type-PF"),
    ]
    (built,) = request.build_requests("a:1", request.parse_aliases(specs))
    assert built.spec == [
        {"vendor_id": "8086", "product_id": "1521", "dev_type": "type-PF"},
        {"vendor_id": "15b3", "product_id": "101d", "dev_type": "type-PF"},
    ]


@pytest.mark.parametrize(
    "asked",
    [
        "nic:1,gpu:1,nic:2",
        [{"alias": "nic", "count": 1}, {"alias": "gpu", "count": 1}, {"alias": "nic", "count": 2}],
    ],
)
def test_an_alias_named_twice_makes_two_requests_as_in_nova(aliases, asked):
    built = request.build_requests(asked, aliases)
    assert [(r.alias_name, r.count) for r in built] == [("nic", 1), ("gpu", 1), ("nic", 2)]
    assert len({r.request_id for r in built}) == 3


def test_a_list_request_builds_the_same_requests(aliases):
    built = request.build_requests(
        [{"alias": "nic", "count": 1}, {"alias": "gpu", "count": 2}], aliases
    )
    assert [(each.alias_name, each.count) for each in built] == [("nic", 1), ("gpu", 2)]


def test_request_ids_are_fresh_uuids(aliases):
    ids = [
        each.request_id for _ in range(3) for each in request.build_requests("nic:1,gpu:1", aliases)
    ]
    assert len(set(ids)) == 6
    assert all(str(uuid.UUID(each)) == each for each in ids)


def test_building_does_not_share_specs_with_the_alias(aliases):
    (built,) = request.build_requests("gpu:1", aliases)
    built.spec[0]["vendor_id"] = "ffff"
    assert aliases["gpu"].specs == ({"vendor_id": "10de", "product_id": "1eb8"},)


def test_a_bad_request_builds_nothing(aliases):
    with pytest.raises(exception.PciAliasNotFound):
        request.build_requests("nic:1,fpga:1", aliases)


def test_an_instance_gets_its_requests_as_one_object(aliases):
    instance_uuid = str(uuid.uuid4())
    built = request.build_instance_requests(None, instance_uuid, "nic:1,gpu:1", aliases)
    assert isinstance(built, InstancePCIRequests)
    assert built.instance_uuid == instance_uuid
    assert [each.alias_name for each in built.requests] == ["nic", "gpu"]


def test_built_requests_survive_the_json_the_database_stores(aliases):
    built = request.build_instance_requests(None, str(uuid.uuid4()), "nic:2", aliases)
    (loaded,) = InstancePCIRequests.from_json(None, built.instance_uuid, built.to_json()).requests
    assert loaded.to_dict() == built.requests[0].to_dict()


# Matching a spec against a device or pool

VF = {
    "vendor_id": "8086",
    "product_id": "1520",
    "dev_type": "type-VF",
    "physical_network": "physnet1",
}


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"vendor_id": "8086"},
        {"vendor_id": "8086", "product_id": "1520", "dev_type": "type-VF"},
        {"physical_network": "physnet1"},
    ],
)
def test_a_spec_matches_when_every_key_is_equal(spec):
    assert request.spec_matches(spec, VF)


@pytest.mark.parametrize(
    "spec",
    [
        {"vendor_id": "10de"},
        {"vendor_id": "8086", "product_id": "1521"},
        {"dev_type": "type-PF"},
        {"physical_network": "physnet2"},
        {"trusted": "true"},
        {"vendor_id": "8086", "dev_type": "type-PF"},
    ],
)
def test_a_spec_does_not_match_when_any_key_differs_or_is_missing(spec):
    assert not request.spec_matches(spec, VF)


def test_tags_may_be_nested_in_the_candidate():
    device = {"vendor_id": "8086", "tags": {"physical_network": "physnet1", "trusted": "true"}}
    assert request.spec_matches({"vendor_id": "8086", "trusted": "true"}, device)
    assert not request.spec_matches({"trusted": "false"}, device)


def test_values_compare_exactly_but_for_case():
    assert not request.spec_matches({"vendor_id": "8086"}, {"vendor_id": "8086 "})
    assert not request.spec_matches({"Physical_Network": "physnet1"}, VF)


@pytest.mark.parametrize(
    ("spec", "candidate"),
    [
        ({"physical_network": "PhysNet1"}, VF),
        ({"physical_network": "physnet1"}, {**VF, "physical_network": "PHYSNET1"}),
        ({"vendor_id": "10DE"}, {"vendor_id": "10de"}),
        ({"trusted": "True"}, {"tags": {"trusted": "true"}}),
    ],
)
def test_device_spec_values_compare_ignoring_case_as_in_nova(spec, candidate):
    assert request.spec_matches(spec, candidate)


def test_a_built_spec_matches_a_device_of_its_alias(aliases):
    (built,) = request.build_requests("nic:1", aliases)
    assert request.spec_matches(built.spec[0], VF)
    assert not request.spec_matches(built.spec[0], {**VF, "dev_type": "type-PF"})
