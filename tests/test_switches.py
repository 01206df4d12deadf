"""Each profile switch changes something observable in every profile where it can: one table per switch.

Every test reads the *named* profiles as they are (never ``derive``), one row per profile, so flipping a
switch in ``flowsim/profiles.py`` turns some row red.  ``make mutation`` (tools/mutation.py) checks that
for every switch of every profile; these tests close the flips the rest of the suite did not see.
Rows of profiles where a switch is unreachable (tools/mutation.py ``EQUIVALENT``) document the behaviour
there all the same.
"""

from __future__ import annotations

import pytest
from frames import L4, V4, eth, ip, outer, pppoe
from scapy.layers.inet import IP, TCP

from flowsim.kernel.flowtable.tuple import flow_tuple_from_skb
from flowsim.kernel.skb import skb_from_frame
from flowsim.profiles import PROFILES, get_profile


def _parse(frame: bytes, profile: str):
    return flow_tuple_from_skb(skb_from_frame(frame, iif=5), iifidx=5, profile=get_profile(profile))


def test_every_named_profile_has_a_row():
    """The tables below cover every named profile (a new profile must say what its switches do)."""
    for table in (IHL_BELOW_5, IPIP_IN_PPPOE):
        assert set(table) == set(PROFILES)


# --- ip4_tunnel_ihl_check: 025a41e76b51 (CVE-2026-72417, 7.1.5) -----------------------------------------------
# nf_flow_ip4_tunnel_proto (from 6.19, with ipip_rx) gains an explicit IHL < 5 check; before it, IHL 4 gives a
# 16-byte header that ip_has_options refuses.  Without ipip_rx (≤ 6.18) nf_flow_tuple_ip refuses it as options.
IHL_BELOW_5 = {
    "linux-6.1": "ip-options",
    "linux-6.12": "ip-options",
    "linux-6.18": "ip-options",
    "linux-6.19": "ip-options",
    "linux-7.0": "ip-options",
    "linux-7.1.5": "ip-ihl-invalid",
}


@pytest.mark.parametrize("profile,reason", sorted(IHL_BELOW_5.items()))
def test_ipv4_ihl_below_5(profile, reason):
    """An IPv4 header with IHL 4 leaves the hook with the reason of nf_flow_ip4_tunnel_proto's check, if any."""
    frame = eth(IP(src=V4[0], dst=V4[1], ihl=4) / TCP())
    assert _parse(frame, profile).reason == reason


# --- tuple_encap_pppoe_proto: nf_flow_tuple_encap (nf_flow_table_ip.c) -------------------------------------------
# For a PPPoE-carried packet mainline compares the raw PPP protocol (0x0021) with ETH_P_IP, so the tunnel fields of
# an IPIP packet out of PPPoE stay empty; the CI tree's ctx.ether_type rework compares the mapped ethertype and fills
# them.  Before 6.19 (no ipip_rx) the outer header is the flow's and protocol 4 is not offloaded.
IPIP_IN_PPPOE = {
    "linux-6.1": ("l4proto-unsupported", None),
    "linux-6.12": ("l4proto-unsupported", None),
    "linux-6.18": ("l4proto-unsupported", None),
    "linux-6.19": (None, False),
    "linux-7.0": (None, False),
    "linux-7.1.5": (None, False),
}


@pytest.mark.parametrize("profile,expected", sorted(IPIP_IN_PPPOE.items()))
def test_ipip_in_pppoe_tunnel_fields(profile, expected):
    """IPIP inside a PPPoE session: whether nf_flow_tuple_encap fills the tuple's tunnel fields (reason, filled)."""
    res = _parse(eth(pppoe(0x77, 0x0021) / outer(4) / ip(4) / L4["tcp"]()), profile)
    assert (res.reason, res.tuple.tun is not None if res.ok else None) == expected
