"""[pci] device_spec: which reported devices are assignable, and their tags."""

import json

import pytest

from pcisim.exception import PciConfigError
from pcisim.pci.devspec import DeviceSpec, DeviceSpecList

PF_ADDR = "0000:0a:00.0"


def device(address, vendor_id="8086", product_id="1521", dev_type="type-PCI", parent_addr=None):
    """A device as the hypervisor reports it."""
    return {
        "address": address,
        "vendor_id": vendor_id,
        "product_id": product_id,
        "dev_type": dev_type,
        "parent_addr": parent_addr,
    }


PF = device(PF_ADDR, product_id="1521", dev_type="type-PF")
VF = device("0000:0a:10.1", product_id="1520", dev_type="type-VF", parent_addr=PF_ADDR)
OTHER_VF = device("0000:0b:10.1", product_id="1520", dev_type="type-VF", parent_addr="0000:0b:00.0")
GPU = device("0000:81:00.0", vendor_id="10de", product_id="1db4")


def specs(*values):
    return DeviceSpecList.from_config([json.dumps(value) for value in values])


class TestVendorAndProduct:
    def test_a_spec_selects_devices_of_its_vendor_and_product(self):
        spec = DeviceSpec({"vendor_id": "10de", "product_id": "1db4"})
        assert spec.match(GPU)
        assert not spec.match(PF)

    @pytest.mark.parametrize(
        "spec", [{}, {"vendor_id": "*"}, {"product_id": "*"}, {"vendor_id": "*", "product_id": "*"}]
    )
    def test_a_missing_or_star_id_matches_any(self, spec):
        assert DeviceSpec(spec).match(GPU) and DeviceSpec(spec).match(PF)

    def test_a_vendor_alone_selects_all_its_products(self):
        spec = DeviceSpec({"vendor_id": "8086"})
        assert [spec.match(dev) for dev in (PF, VF, GPU)] == [True, True, False]

    def test_ids_are_read_in_either_case(self):
        assert DeviceSpec({"vendor_id": "10DE", "product_id": "1DB4"}).match(GPU)


class TestAddress:
    @pytest.mark.parametrize("address", ["*:0a:00.*", ":0a:00.", "0a:00", PF_ADDR, {"bus": "0a"}])
    def test_an_address_spec_selects_the_addresses_it_matches(self, address):
        spec = DeviceSpec({"address": address})
        assert spec.match(PF)
        assert not spec.match(GPU)

    def test_a_regex_dict_selects_the_addresses_it_matches(self):
        spec = DeviceSpec({"address": {"bus": "0[ab]", "slot": "10", "function": "[1-7]"}})
        assert [spec.match(dev) for dev in (PF, VF, OTHER_VF)] == [False, True, True]

    def test_a_spec_matches_on_vendor_product_and_address_together(self):
        spec = DeviceSpec({"vendor_id": "8086", "product_id": "1520", "address": "*:0a:*.*"})
        assert [spec.match(dev) for dev in (PF, VF, OTHER_VF)] == [False, True, False]


class TestPfAddressSelectsItsVfs:
    def test_the_address_of_a_pf_selects_the_pf_and_its_vfs(self):
        spec = DeviceSpec({"address": PF_ADDR})
        assert [spec.match(dev) for dev in (PF, VF, OTHER_VF)] == [True, True, False]

    def test_with_the_vf_product_it_selects_only_the_vfs(self):
        spec = DeviceSpec({"address": PF_ADDR, "product_id": "1520"})
        assert [spec.match(dev) for dev in (PF, VF)] == [False, True]

    def test_a_regex_dict_naming_the_pf_selects_its_vfs(self):
        address = {"domain": "0000", "bus": "0a", "slot": "00", "function": "0"}
        assert DeviceSpec({"address": address}).match(VF)

    @pytest.mark.parametrize("address", ["*:0a:00.0", "0a:00.0", {"bus": "0a", "slot": "00"}])
    def test_an_address_pattern_selects_vfs_only_by_their_own_address(self, address):
        assert not DeviceSpec({"address": address}).match(VF)

    def test_only_vfs_are_selected_through_their_parent(self):
        vdpa = device("0000:0a:10.2", dev_type="vdpa", parent_addr=PF_ADDR)
        assert not DeviceSpec({"address": PF_ADDR}).match(vdpa)


class TestTags:
    def test_every_other_key_is_a_tag(self):
        spec = DeviceSpec(
            {"vendor_id": "8086", "address": "*", "physical_network": "physnet1", "label": "x"}
        )
        assert spec.tags == {"physical_network": "physnet1", "label": "x"}

    @pytest.mark.parametrize("tag", ["trusted", "remote_managed"])
    def test_boolean_tags_are_true_or_false_in_any_case_stored_lowercase(self, tag):
        assert DeviceSpec({tag: "True"}).tags == {tag: "true"}
        assert DeviceSpec({tag: "false"}).tags == {tag: "false"}

    def test_tags_are_a_copy(self):
        spec = DeviceSpec({"physical_network": "physnet1"})
        spec.tags["physical_network"] = "changed"
        assert spec.tags == {"physical_network": "physnet1"}

    def test_a_device_gets_the_tags_of_the_first_spec_that_selects_it(self):
        device_specs = specs(
            {"product_id": "1520", "physical_network": "physnet1"},
            {"vendor_id": "8086", "physical_network": "physnet2"},
        )
        assert device_specs.tags_for(VF) == {"physical_network": "physnet1"}
        assert device_specs.tags_for(PF) == {"physical_network": "physnet2"}

    def test_a_device_no_spec_selects_has_no_tags(self):
        assert specs({"vendor_id": "8086", "physical_network": "physnet1"}).tags_for(GPU) == {}


class TestDeviceSpecList:
    def test_without_any_spec_no_device_is_assignable(self):
        device_specs = DeviceSpecList.from_config([])
        assert [device_specs.match(dev) for dev in (PF, VF, GPU)] == [None, None, None]

    def test_the_first_spec_that_selects_a_device_wins(self):
        device_specs = specs({"vendor_id": "10de"}, {"address": "*:0a:*.*"}, {"vendor_id": "8086"})
        assert device_specs.match(VF) is device_specs.specs[1]
        assert device_specs.match(OTHER_VF) is device_specs.specs[2]

    def test_a_value_may_hold_a_list_of_specs_kept_in_order(self):
        device_specs = DeviceSpecList.from_config(
            ['[{"vendor_id": "10de"}, {"vendor_id": "8086"}]', '{"address": "*"}']
        )
        assert len(device_specs.specs) == 3
        assert device_specs.match(PF) is device_specs.specs[1]

    def test_an_empty_list_value_adds_no_spec(self):
        assert DeviceSpecList.from_config(["[]"]).match(PF) is None


class TestConfigErrors:
    @pytest.mark.parametrize(
        "value, reason",
        [
            ('{"vendor_id": "8086"', "not valid JSON"),
            ("vendor_id=8086", "not valid JSON"),
            ('"8086"', "expected a JSON object or a list of objects"),
            ("42", "expected a JSON object or a list of objects"),
            ('[{"vendor_id": "8086"}, "8086"]', "item 1 is not a JSON object"),
        ],
    )
    def test_a_value_of_unknown_structure_is_named(self, value, reason):
        with pytest.raises(PciConfigError) as raised:
            DeviceSpecList.from_config(['{"vendor_id": "10de"}', value])
        assert raised.value.message.startswith(f"Invalid [pci] device_spec entry {value}: {reason}")

    @pytest.mark.parametrize(
        "spec, reason",
        [
            ({"vendor_id": "80x6"}, "vendor_id '80x6' is not '*' or 4 hex digits"),
            ({"vendor_id": ""}, "vendor_id '' is not '*' or 4 hex digits"),
            ({"vendor_id": 8086}, "vendor_id 8086 is not '*' or 4 hex digits"),
            ({"product_id": "1g20"}, "product_id '1g20' is not '*' or 4 hex digits"),
            ({"product_id": "a"}, "product_id 'a' is not '*' or 4 hex digits"),
            ({"product_id": "10000"}, "product_id '10000' is not '*' or 4 hex digits"),
            (
                {"address": "*:100:00.*"},
                "address '*:100:00.*': bus 0x100 is above the maximum 0xff",
            ),
            ({"address": "*:*:*.8"}, "address '*:*:*.8': function 0x8 is above the maximum 0x7"),
            ({"address": "0:0:0a:00.1"}, "address '0:0:0a:00.1': more than three fields"),
            ({"address": 10}, "address 10: expected a glob string or a dict of regexes"),
            ({"address": {"bus": "0a", "fn": "1"}}, "unknown key 'fn'"),
            ({"address": {"slot": "(0"}}, "slot '(0' is not a regular expression"),
            ({"physical_network": 1}, "tag physical_network must be a string, got 1"),
            ({"trusted": True}, "tag trusted must be a string, got True"),
            ({"trusted": "yes"}, "tag trusted must be 'true' or 'false', got 'yes'"),
            ({"devname": "eth0"}, "devname is not supported"),
        ],
    )
    def test_a_bad_key_is_named_with_its_entry(self, spec, reason):
        value = json.dumps(spec)
        with pytest.raises(PciConfigError) as raised:
            DeviceSpecList.from_config([value])
        assert f"Invalid [pci] device_spec entry {value}: " in raised.value.message
        assert reason in raised.value.message

    def test_a_bad_spec_in_a_list_is_named_by_itself(self):
        with pytest.raises(PciConfigError) as raised:
            DeviceSpecList.from_config(['[{"vendor_id": "8086"}, {"vendor_id": "zz"}]'])
        assert raised.value.kwargs["entry"] == '{"vendor_id": "zz"}'
        assert "vendor_id 'zz'" in raised.value.message


@pytest.mark.parametrize(
    ("written", "nova_reads"),
    [("0x8086", "8086"), ("0X10DE", "10de"), ("86", "0086"), ("08086", "8086"), (" 8086", "8086")],
)
def test_a_device_spec_id_nova_reads_as_a_hex_number_is_refused_naming_the_id_to_write(
    written, nova_reads
):
    with pytest.raises(PciConfigError) as raised:
        DeviceSpec({"vendor_id": written})
    assert f"is not '*' or 4 hex digits; write '{nova_reads}', the id Nova reads" in str(
        raised.value
    )
