"""PCI addresses and the glob and regex address specs of [pci] device_spec."""

import pytest

from pcisim.exception import InvalidPciAddress
from pcisim.pci.address import GlobAddressSpec, PciAddress, RegexAddressSpec, address_spec


class TestPciAddress:
    def test_parse_reads_each_field_as_hex(self):
        assert PciAddress.parse("0001:0a:1f.7") == PciAddress(
            domain=1, bus=0x0A, slot=0x1F, function=7
        )

    def test_parse_ignores_case_and_str_is_canonical_lowercase(self):
        assert str(PciAddress.parse("000A:0B:0C.1")) == "000a:0b:0c.1"

    @pytest.mark.parametrize(
        "text", ["0000:00:00.0", "ffff:00:00.0", "0000:ff:00.0", "0000:00:1f.0", "0000:00:00.7"]
    )
    def test_each_field_accepts_its_maximum(self, text):
        assert str(PciAddress.parse(text)) == text

    @pytest.mark.parametrize(
        "text, reason",
        [
            ("0000:00:20.0", "slot 0x20 is above the maximum 0x1f"),
            ("0000:00:00.8", "function 0x8 is above the maximum 0x7"),
        ],
    )
    def test_a_field_one_past_its_maximum_is_named_with_the_maximum(self, text, reason):
        with pytest.raises(InvalidPciAddress) as raised:
            PciAddress.parse(text)
        assert raised.value.message == f"Invalid PCI address {text!r}: {reason}"

    @pytest.mark.parametrize(
        "text",
        [
            "10000:00:00.0",  # one past the domain maximum needs a fifth digit
            "0000:100:00.0",  # likewise for the bus
            "",
            "0000:0a:00",
            "0000:0a:00.",
            "0a:00.1",
            "0000:0a:00:1",
            "0000:0a:00.1.0",
            "000:0a:00.1",
            "0000:a:00.1",
            "0000:0a:0.1",
            "0000:0a:00.10",
            " 0000:0a:00.1",
        ],
    )
    def test_anything_but_dddd_bb_ss_f_is_a_bad_format(self, text):
        with pytest.raises(InvalidPciAddress, match="expected the form dddd:bb:ss.f"):
            PciAddress.parse(text)

    @pytest.mark.parametrize(
        "text, field",
        [("000g:0a:00.1", "domain"), ("0000:0x:00.1", "bus"), ("0000:0a:+1.1", "slot")],
    )
    def test_a_field_that_is_not_hex_is_named(self, text, field):
        with pytest.raises(InvalidPciAddress, match=f"{field} .* is not hex"):
            PciAddress.parse(text)

    @pytest.mark.parametrize("text", [None, 10, b"0000:0a:00.1"])
    def test_an_address_is_a_string(self, text):
        with pytest.raises(InvalidPciAddress, match="an address is a string"):
            PciAddress.parse(text)

    def test_field_texts_are_canonical(self):
        assert PciAddress.parse("0000:0A:00.1").field_texts == {
            "domain": "0000",
            "bus": "0a",
            "slot": "00",
            "function": "1",
        }


class TestGlobAddressSpec:
    @pytest.mark.parametrize(
        "glob",
        ["0000:0a:00.1", "0000:0A:00.1", "*:0a:00.*", ":0a:00.", "0a:00.1", "0a:00", "*", ""],
    )
    def test_matches(self, glob):
        assert GlobAddressSpec(glob).match("0000:0a:00.1")

    @pytest.mark.parametrize(
        "glob", ["0001:0a:00.1", "*:0b:00.*", ":0a:01.", "0a:00.2", "*.0", "1:*:*.*"]
    )
    def test_does_not_match(self, glob):
        assert not GlobAddressSpec(glob).match("0000:0a:00.1")

    def test_given_fields_need_not_be_zero_padded(self):
        assert GlobAddressSpec("0:a:0.1").match("0000:0a:00.1")

    @pytest.mark.parametrize("glob", ["ffff:ff:1f.7", "*:*:*.7", "ffff:*:*.*"])
    def test_each_field_accepts_its_maximum(self, glob):
        assert GlobAddressSpec(glob).match("ffff:ff:1f.7")

    @pytest.mark.parametrize(
        "glob, reason",
        [
            ("10000:*:*.*", "domain 0x10000 is above the maximum 0xffff"),
            ("*:100:*.*", "bus 0x100 is above the maximum 0xff"),
            ("*:*:20.*", "slot 0x20 is above the maximum 0x1f"),
            ("*:*:*.8", "function 0x8 is above the maximum 0x7"),
        ],
    )
    def test_a_field_one_past_its_maximum_is_named_with_the_maximum(self, glob, reason):
        with pytest.raises(InvalidPciAddress) as raised:
            GlobAddressSpec(glob)
        assert raised.value.message == f"Invalid PCI address {glob!r}: {reason}"

    @pytest.mark.parametrize(
        "glob, field",
        [
            ("0x0:*:*.*", "domain"),
            ("*:g0:*.*", "bus"),
            ("*:*:0?.*", "slot"),
            ("*:*:*.1.0", "function"),
        ],
    )
    def test_a_field_that_is_not_hex_is_named(self, glob, field):
        with pytest.raises(InvalidPciAddress, match=f"{field} .* is not hex"):
            GlobAddressSpec(glob)

    def test_more_than_three_fields_before_the_dot_is_a_bad_format(self):
        with pytest.raises(InvalidPciAddress, match="more than three fields"):
            GlobAddressSpec("0:0000:0a:00.1")

    def test_matching_a_malformed_address_raises(self):
        with pytest.raises(InvalidPciAddress, match="expected the form"):
            GlobAddressSpec("*").match("0a:00.1")

    @pytest.mark.parametrize(
        "glob, single", [("0000:0a:00.0", True), ("0a:00.0", False), ("*:0a:00.0", False)]
    )
    def test_is_single_address_when_every_field_is_given(self, glob, single):
        assert GlobAddressSpec(glob).is_single_address is single


class TestRegexAddressSpec:
    def test_each_pattern_matches_its_field(self):
        spec = RegexAddressSpec(
            {"domain": ".*", "bus": "0a", "slot": "0[0-3]", "function": "[1-7]"}
        )
        assert spec.match("0000:0a:03.1")
        assert not spec.match("0000:0a:04.1")
        assert not spec.match("0000:0a:03.0")

    def test_a_missing_key_matches_anything(self):
        assert RegexAddressSpec({}).match("ffff:ff:1f.7")
        assert RegexAddressSpec({"bus": "0[ab]"}).match("0001:0b:1f.7")

    def test_patterns_match_from_the_start_of_the_canonical_lowercase_field(self):
        # NOTE: Nova's re.match: a pattern need not cover the whole field
        assert not RegexAddressSpec({"bus": "a"}).match("0000:0a:00.0")
        assert RegexAddressSpec({"bus": "0"}).match("0000:0a:00.0")
        assert not RegexAddressSpec({"bus": "0A"}).match("0000:0A:00.0")
        assert RegexAddressSpec({"bus": "0a"}).match("0000:0A:00.0")
        assert not RegexAddressSpec({"bus": "0$"}).match("0000:0a:00.0")

    @pytest.mark.parametrize("bus", ["80", "8a", "8f"])
    def test_a_one_digit_bus_pattern_selects_the_sixteen_buses_it_starts(self, bus):
        assert RegexAddressSpec({"bus": "8"}).match(f"0000:{bus}:00.0")
        assert not RegexAddressSpec({"bus": "8"}).match("0000:08:00.0")

    @pytest.mark.parametrize(
        "patterns, selected",
        [
            ({"domain": ".*", "bus": "0a", "slot": "00", "function": "[5-6]"}, True),
            ({"domain": ".*", "bus": "0a", "slot": ".*", "function": "[4-5]"}, True),
            ({"domain": ".*", "bus": "0a", "slot": "[0-3]", "function": ".*"}, True),
            ({"domain": ".*", "bus": "02", "slot": ".*", "function": "[4-5]"}, False),
            ({"domain": ".*", "bus": "02", "slot": "[0-3]", "function": ".*"}, False),
        ],
    )
    def test_nova_s_regex_specs_select_what_they_select_in_nova(self, patterns, selected):
        assert RegexAddressSpec(patterns).match("0000:0a:00.5") is selected

    def test_an_unknown_key_is_named(self):
        with pytest.raises(InvalidPciAddress, match="unknown key 'func'"):
            RegexAddressSpec({"bus": "0a", "func": "1"})

    def test_an_invalid_regex_is_named_by_its_key(self):
        with pytest.raises(InvalidPciAddress, match=r"slot '0\[' is not a regular expression"):
            RegexAddressSpec({"slot": "0["})

    def test_a_pattern_that_is_not_a_string_is_named_by_its_key(self):
        with pytest.raises(InvalidPciAddress, match="function must be a string"):
            RegexAddressSpec({"function": 1})

    @pytest.mark.parametrize(
        "patterns, single",
        [
            ({"domain": "0000", "bus": "0a", "slot": "00", "function": "0"}, True),
            ({"domain": "0000", "bus": "0a", "slot": "00", "function": "[0-1]"}, False),
            ({"bus": "0a", "slot": "00", "function": "0"}, False),
        ],
    )
    def test_is_single_address_when_every_pattern_is_plain_hex(self, patterns, single):
        assert RegexAddressSpec(patterns).is_single_address is single


class TestAddressSpecFactory:
    def test_a_string_is_a_glob(self):
        assert isinstance(address_spec("*:0a:00.*"), GlobAddressSpec)

    def test_a_dict_is_a_set_of_regexes(self):
        assert isinstance(address_spec({"bus": "0a"}), RegexAddressSpec)

    @pytest.mark.parametrize("value", [None, 10, ["0000:0a:00.1"]])
    def test_anything_else_is_an_error(self, value):
        with pytest.raises(InvalidPciAddress, match="expected a glob string or a dict"):
            address_spec(value)
