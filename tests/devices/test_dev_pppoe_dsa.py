"""ppp_fill_forward_path / pppoe_fill_forward_path and dsa_user_fill_forward_path (drivers/net/ppp, net/dsa/user.c)."""

from __future__ import annotations

import errno

import pytest

from flowsim.config.topology import load_topology_text
from flowsim.kernel.devices import dsa, pppoe
from flowsim.kernel.devices.base import ETH_P_PPP_SES, DevPathType, PathCtx, PathError
from flowsim.profiles import get_profile

TEXT = """[netns.r]
commands = '''
ip link add e0 type ethernet
ip link add lan3 link e0 type dsa port 3 tagger edsa
ip link add ppp0 type pppoe dev lan3 session 0x1234 peer 02:00:00:00:12:34 {flags}
'''
"""


def ctx(dev: str, flags: str = ""):
    ns = load_topology_text(TEXT.format(flags=flags), "ppp.toml").netns("r")
    return PathCtx(ns, get_profile("linux-7.0"), ns.devices[dev], "00:00:00:00:00:00")


def test_pppoe_records_session_peer_and_copies_daddr():
    """DEV_PATH_PPPOE: proto 0x8864, id = session, h_dest = peer; ctx.daddr = peer; ctx.dev = Ethernet device."""
    c = ctx("ppp0")
    entry = pppoe.fill_forward_path(c)
    assert entry.type == DevPathType.PPPOE and entry.dev == "ppp0"
    assert (entry.encap.id, entry.encap.proto, entry.encap.h_dest) == (0x1234, ETH_P_PPP_SES, "02:00:00:00:12:34")
    assert c.daddr == "02:00:00:00:12:34" and c.dev.name == "lan3"


@pytest.mark.parametrize("flags,err,func", [("multilink", -errno.EOPNOTSUPP, "ppp_fill_forward_path"),
                                            ("disconnected", -1, "pppoe_fill_forward_path")])
def test_pppoe_refusals(flags, err, func):
    """Multilink PPP is -EOPNOTSUPP; an unconnected PPPoE socket is -1."""
    result = pppoe.fill_forward_path(ctx("ppp0", flags))
    assert isinstance(result, PathError) and result.errno == err and result.func == func


def test_ppp_device_is_not_ethernet():
    """The ppp unit is ARPHRD_PPP without a MAC: the neighbour step is skipped for it."""
    c = ctx("ppp0")
    assert c.dev.link_type == "ppp" and not c.dev.is_valid_ether() and c.dev.mtu == 1492


def test_dsa_records_port_and_tagger_and_moves_to_conduit():
    """DEV_PATH_DSA with dsa.port and dsa.proto; ctx.dev = conduit; never fails."""
    c = ctx("lan3")
    entry = dsa.fill_forward_path(c)
    assert entry.type == DevPathType.DSA and (entry.dsa.port, entry.dsa.proto) == (3, "edsa")
    assert c.dev.name == "e0"
