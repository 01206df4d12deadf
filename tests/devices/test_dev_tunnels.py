"""ipip_fill_forward_path and ip6_tnl_fill_forward_path, and the kinds without a resolver (net/ipv4/ipip.c, net/ipv6/ip6_tunnel.c; from which kernel: flowsim.profiles)."""

from __future__ import annotations

import errno
import ipaddress

import pytest

from flowsim.config.topology import load_topology_text
from flowsim.kernel.devices import ip6tnl, ipip, ndo_fill_forward_path
from flowsim.kernel.devices.base import IPPROTO_IPIP, IPPROTO_IPV6, DevPathType, PathCtx, PathError
from flowsim.profiles import get_profile

ip = ipaddress.ip_address
TEXT = """[netns.r]
commands = '''
ip link add e0 type dummy
ip link set e0 up
ip addr add 10.0.0.1/24 dev e0
ip addr add 2001:db8::1/64 dev e0 nodad
ip link add t4 type ipip local 10.0.0.1 remote 10.0.0.2
ip link add t6 type ip6tnl mode ip6ip6 local 2001:db8::1 remote 2001:db8::2 encaplimit none
ip link add t6l type ip6tnl local 2001:db8::1 remote 2001:db8::2
ip link add tbh type ipip local 10.0.0.1 remote 192.0.2.1
ip route add blackhole 192.0.2.0/24
ip link add t6u type ip6tnl local 2001:db8::1 remote 2001:db8:9::1 encaplimit none
ip link add g type gre local 10.0.0.1 remote 10.0.0.2
ip link add x type vxlan id 1 remote 10.0.0.2
ip link add w type wireguard
ip link add link e0 name m type macvlan
ip link add v type veth peer name v2
'''
"""


def ctx(dev: str, profile: str = "linux-7.0"):
    ns = load_topology_text(TEXT, "tun.toml").netns("r")
    return PathCtx(ns, get_profile(profile), ns.devices[dev], "00:00:00:00:00:00")


def test_ipip_records_endpoints_and_moves_to_underlay():
    """DEV_PATH_TUN with local/remote and IPPROTO_IPIP; ctx.dev = the route's output device."""
    c = ctx("t4")
    entry = ipip.fill_forward_path(c)
    assert entry.type == DevPathType.TUN
    assert (entry.tun.src, entry.tun.dst, entry.tun.l3_proto) == (ip("10.0.0.1"), ip("10.0.0.2"), IPPROTO_IPIP)
    assert c.dev.name == "e0"


def test_ipip_route_error_is_returned():
    """A blackhole route to the remote fails the resolver with the route's error (-EINVAL)."""
    result = ipip.fill_forward_path(ctx("tbh"))
    assert isinstance(result, PathError) and result.errno == -errno.EINVAL


def test_ip6tnl_records_endpoints():
    """DEV_PATH_TUN with IPPROTO_IPV6 for an ip6tnl with encaplimit none."""
    c = ctx("t6", "linux-7.1.5")
    entry = ip6tnl.fill_forward_path(c)
    assert entry.tun.l3_proto == IPPROTO_IPV6 and entry.tun.dst == ip("2001:db8::2") and c.dev.name == "e0"


@pytest.mark.parametrize("profile,refused", [("linux-7.0", False), ("linux-7.1.5", True)])
def test_ip6tnl_encap_limit_refused_from_7_1_5(profile, refused):
    """From 7.1.5 a tunnel without `encaplimit none` is -EOPNOTSUPP (ip6tnl_requires_encaplimit_none)."""
    result = ip6tnl.fill_forward_path(ctx("t6l", profile))
    assert isinstance(result, PathError) is refused
    if refused:
        assert result.errno == -errno.EOPNOTSUPP


def test_ip6tnl_no_route_is_enetunreach():
    """No route to the remote: the dst error (-ENETUNREACH)."""
    result = ip6tnl.fill_forward_path(ctx("t6u"))
    assert isinstance(result, PathError) and result.errno == -errno.ENETUNREACH


@pytest.mark.parametrize("dev,profiles", [
    ("t4", {"linux-6.18": False, "linux-6.19": True, "linux-7.0": True, "linux-7.1.5": True}),
    ("t6", {"linux-6.18": False, "linux-6.19": False, "linux-7.0": True, "linux-7.1.5": True}),
    ("g", dict.fromkeys(("linux-6.18", "linux-6.19", "linux-7.0", "linux-7.1.5"), False)),
    ("x", dict.fromkeys(("linux-6.18", "linux-7.1.5"), False)),
    ("w", dict.fromkeys(("linux-6.18", "linux-7.1.5"), False)),
    ("m", dict.fromkeys(("linux-6.18", "linux-7.1.5"), False)),
    ("v", dict.fromkeys(("linux-6.18", "linux-7.1.5"), False)),
])
def test_which_kinds_have_a_resolver(dev, profiles):
    """No tunnel resolvers before 6.19, no ip6tnl before 7.0; gre/vxlan/wireguard/macvlan/veth never."""
    for profile, has in profiles.items():
        c = ctx(dev, profile)
        assert (ndo_fill_forward_path(c.dev, c.profile) is not None) is has, profile


def test_tunnel_dev_addr_is_the_local_address():
    """ipip/ip6tnl dev_addr is the local address; nft_dev_path_info copies its first 6 bytes."""
    assert ctx("t4").dev.h_source() == "0a:00:00:01:00:00"
    assert ctx("t6").dev.h_source() == "20:01:0d:b8:00:00"
    assert not ctx("t4").dev.is_valid_ether() and not ctx("w").dev.is_valid_ether() and ctx("x").dev.is_valid_ether()
