"""Kernel behaviour profiles (flowsim/profiles.py): named sets of switches and derived variants."""

from __future__ import annotations

import pytest

from flowsim.errors import ProfileError
from flowsim.profiles import DEFAULT_PROFILE, PROFILES, SWITCHES, get_profile, profile_from_cli


@pytest.mark.parametrize("name,ipip,ip6ip6,hdr_size,exthdr,fin", [
    ("linux-6.1", False, False, "absolute", "skip", "teardown"),
    ("linux-6.12", False, False, "absolute", "skip", "teardown"),
    ("linux-6.18", False, False, "absolute", "skip", "closing"),
    ("linux-6.19", True, False, "absolute", "skip", "closing"),
    ("linux-7.0", True, True, "absolute", "skip", "closing"),
    ("linux-7.1.5", True, True, "relative", "slowpath", "closing"),
    ("linux-7.2", True, True, "relative", "slowpath", "closing"),
    ("linux-7.3", True, True, "relative", "slowpath", "closing"),
])
def test_named_profiles(name, ipip, ip6ip6, hdr_size, exthdr, fin):
    """Each named profile carries its kernel's switches: IPIP from 6.19 (fe8313316eaf), IP6IP6 from 7.0 (5e5180352193),
    the June-2026 IPv6 tunnel parsing fixes in 7.1.5, FIN/RST CLOSING from 6.14."""
    p = get_profile(name)
    assert (p.ipip_rx, p.ip6ip6_rx, p.ip6_tunnel_hdr_size, p.ip6_tunnel_exthdr, p.tcp_fin_rst) == (
        ipip, ip6ip6, hdr_size, exthdr, fin)


def test_default_is_7_2():
    """Without --profile, linux-7.2 (Debian sid's 7.2.13, the newest released kernel)."""
    assert get_profile().name == DEFAULT_PROFILE == "linux-7.2"
    assert get_profile().kernel == "7.2.13" and get_profile("linux-7.3").kernel == "7.3-rc7"


def test_7_2_evolves_7_1_5_and_7_3_evolves_7_2():
    """7.2.13 differs from 7.1.5 in the tunnel route fix and the host-wide ICMP bucket's defaults; 7.3-rc7 from
    7.2.13 in the ctx->ether_type rework, the tunnel resolvers (family check, path->tun.dst) and the GC's
    nf_flow_dst_check."""
    def diff(a, b):
        sa, sb = get_profile(a).switches(), get_profile(b).switches()
        return {k for k in sa if sa[k] != sb[k]}
    assert diff("linux-7.1.5", "linux-7.2") == {"tunnel_push_dst", "direct_tunnel_dst", "icmp_msgs_default"}
    assert diff("linux-7.2", "linux-7.3") == {"tuple_encap_pppoe_proto", "hook_ether_type_check",
                                            "tunnel_resolver_family_check", "ip6tnl_resolver_lookup",
                                            "tunnel_route", "gc_dst_check"}


def test_derive_overrides_by_text_and_renames():
    """--set K=V derives a variant whose name says what changed; the named profile is untouched."""
    p = profile_from_cli("linux-7.0", ["ip6_tunnel_header_access=pull", "ipip_rx=off"])
    assert (p.ip6_tunnel_header_access, p.ipip_rx) == ("pull", False)
    assert p.name == "linux-7.0+ip6_tunnel_header_access=pull+ipip_rx=0"
    assert PROFILES["linux-7.0"].ip6_tunnel_header_access == "header_pointer"


@pytest.mark.parametrize("settings,match", [
    (["nope=1"], "unknown profile switch 'nope'"),
    (["ipip_rx=maybe"], "bad value 'maybe' for switch 'ipip_rx'"),
    (["ip6_tunnel_hdr_size=sideways"], "expected one of absolute, relative"),
    (["ipip_rx"], "expected SWITCH=VALUE"),
])
def test_bad_overrides_are_one_clear_error(settings, match):
    """A wrong switch or value is a ProfileError naming it and what was expected."""
    with pytest.raises(ProfileError, match=match):
        profile_from_cli("linux-7.0", settings)


def test_unknown_profile():
    """An unknown name lists the known ones."""
    with pytest.raises(ProfileError, match="unknown profile 'linux-9'.*linux-7.1.5"):
        get_profile("linux-9")


def test_every_switch_is_documented():
    """Each switch says what it models."""
    import attrs

    from flowsim.profiles import Profile

    for f in attrs.fields(Profile):
        if f.name in SWITCHES:
            assert len(f.metadata["doc"]) > 20, f.name


def test_every_switch_names_its_kernel_change():
    """Each switch names the kernel change behind it (flowsim profiles shows it)."""
    import attrs

    from flowsim.profiles import PROFILE_NOTES, Profile

    for f in attrs.fields(Profile):
        if f.name in SWITCHES:
            assert len(f.metadata["kernel"]) > 5, f.name
    assert set(PROFILE_NOTES) == set(PROFILES)


def test_profiles_command_lists_every_profile_and_switch(capsys):
    """`flowsim profiles`: each profile with its note; each switch with meaning, allowed values, kernel change and
    the profiles giving each value."""
    from flowsim.cli import main

    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    for name in PROFILES:
        assert name in out
    for name in SWITCHES:
        assert f"\n{name}  (" in out
    assert "kernel: 025a41e76b51" in out
    assert "    absolute: linux-6.1 linux-6.12 linux-6.18 linux-6.19 linux-7.0\n    relative: linux-7.1.5 linux-7.2 linux-7.3\n" in out
    assert "    this:     linux-7.2 linux-7.3\n" in out  # tunnel_push_dst=this from 7.2.13
    assert "None" not in out and "True" not in out and "False" not in out


def test_profiles_command_json_matches_the_profiles(capsys):
    """--json: the same facts as data; every value is the profile's own and among the switch's choices."""
    import json

    from flowsim.cli import main

    assert main(["profiles", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["default"] == DEFAULT_PROFILE
    assert list(data["profiles"]) == list(PROFILES)
    assert list(data["switches"]) == list(SWITCHES)
    for name, sw in data["switches"].items():
        assert sw["description"] and sw["kernel"]
        for profile, value in sw["values"].items():
            assert value == getattr(PROFILES[profile], name)
            assert value in sw["choices"]
            derived = profile_from_cli(profile, [f"{name}={value if isinstance(value, str) else int(value)}"])
            assert derived.switches() == PROFILES[profile].switches()  # the listed value round-trips through --set
    assert data["switches"]["ipip_rx"]["type"] == "bool"


def test_profiles_command_one_switch_and_unknown(capsys):
    """SWITCH arguments narrow the listing; an unknown one is the usual one-line error, exit 2."""
    from flowsim.cli import main

    assert main(["profiles", "tcp_fin_rst"]) == 0
    out = capsys.readouterr().out
    assert "tcp_fin_rst  (closing | teardown)" in out and "ipip_rx" not in out
    assert main(["profiles", "nope"]) == 2
    assert "unknown profile switch 'nope'" in capsys.readouterr().err
