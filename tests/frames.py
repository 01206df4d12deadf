"""Frame builders and hypothesis strategies shared by the tests (one place).

Frames are built with scapy so that nothing here re-implements the codecs
under test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from hypothesis import strategies as st
from scapy.layers.inet import GRE, ICMP, IP, TCP, UDP
from scapy.layers.inet6 import (
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.layers.ppp import PPP, PPPoE

V4 = ("10.0.1.99", "10.0.2.99")
V6 = ("dead:1::99", "dead:2::99")
OUTER_V4 = ("192.168.10.1", "192.168.10.2")
OUTER_V6 = ("fee1:2::1", "fee1:2::2")


@contextlib.contextmanager
def l4_payload_raw() -> Iterator[None]:
    """Within it scapy leaves a TCP or UDP payload Raw.  Once a layer binds a port (``scapy.all``, which some
    test of the same worker imports: DNS on 53, SMB on 445, VXLAN on 4789…) scapy dissects a payload by port
    and may build other bytes from a random one: a test that compares scapy's rebuilt checksums with flowsim's
    bytes would fail by port, not by checksum."""
    saved = TCP.payload_guess, UDP.payload_guess
    TCP.payload_guess, UDP.payload_guess = [], []
    try:
        yield
    finally:
        TCP.payload_guess, UDP.payload_guess = saved


def ip(version: int, src=None, dst=None, **kw):
    """An IPv4 or IPv6 header with the test addresses."""
    if version == 4:
        return IP(src=src or V4[0], dst=dst or V4[1], **kw)
    if "ttl" in kw:
        kw["hlim"] = kw.pop("ttl")
    return IPv6(src=src or V6[0], dst=dst or V6[1], **kw)


def outer(version: int, **kw):
    """An outer tunnel header (IPIP or IP6IP6 endpoints)."""
    a = OUTER_V4 if version == 4 else OUTER_V6
    return ip(version, a[0], a[1], **kw)


def eth(*layers, ether=None):
    """Ether() / layers … as bytes."""
    pkt = ether or Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    for layer in layers:
        pkt = pkt / layer
    return bytes(pkt)


def pppoe(session: int = 0x1234, proto: int = 0x0021):
    return PPPoE(sessionid=session) / PPP(proto=proto)


L4 = {
    "tcp": lambda: TCP(sport=40000, dport=12345, flags="A"),
    "udp": lambda: UDP(sport=40000, dport=53),
    "gre": lambda: GRE(),
}


# --- hypothesis strategies -------------------------------------------------

l2_stacks = st.sampled_from(["none", "dot1q", "qinq", "dot1ad+dot1q", "pppoe", "dot1q+pppoe"])
tunnels = st.sampled_from(["none", "ipip", "ip6ip6", "4in6", "6in4", "ip6ip6+destopt"])
inner_versions = st.sampled_from([4, 6])
l4s = st.sampled_from(["tcp", "tcp", "udp", "udp", "gre", "gre1", "icmp"])
v6_exthdrs = st.one_of(st.just([]), st.just([]), st.lists(st.sampled_from(["hop", "dest", "rt", "frag0", "frag1"]), max_size=2))


@st.composite
def frames(draw, clean: bool = False):
    """A random stack built with scapy: L2 encaps, tunnel, inner IP, L4.

    With *clean*, only stacks the fast path can take (TTL 64, TCP/UDP/GRE v0,
    no IPv4 options or fragments, no IPv6 extension headers, not cut), with
    a random linear length: for comparing whole tuples.
    """
    l2 = draw(l2_stacks)
    tunnel = draw(tunnels)
    version = {"ipip": 4, "ip6ip6": 6, "ip6ip6+destopt": 6, "4in6": 4, "6in4": 6}.get(tunnel, draw(inner_versions))
    ttl = 64 if clean else draw(st.sampled_from([0, 1, 2, 64, 64, 64, 64]))
    l4 = draw(st.sampled_from(["tcp", "udp", "gre"]) if clean else l4s)
    vid = draw(st.integers(0, 4095))
    prio = draw(st.sampled_from([0, 0, 5]))
    session = draw(st.integers(1, 0xFFFE))
    proto = {4: 0x0021, 6: 0x0057}

    pkt = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    if l2 == "dot1q":
        pkt /= Dot1Q(vlan=vid, prio=prio)
    elif l2 == "qinq":
        pkt /= Dot1Q(vlan=vid, prio=prio) / Dot1Q(vlan=(vid + 1) % 4096)
    elif l2 == "dot1ad+dot1q":
        pkt /= Dot1AD(vlan=vid) / Dot1Q(vlan=(vid + 7) % 4096, prio=prio)
    elif l2 == "pppoe":
        pkt /= PPPoE(sessionid=session)
    elif l2 == "dot1q+pppoe":
        pkt /= Dot1Q(vlan=vid) / PPPoE(sessionid=session)
    outer_version = {"ipip": 4, "6in4": 4, "ip6ip6": 6, "ip6ip6+destopt": 6, "4in6": 6}.get(tunnel)
    first_version = outer_version or version
    if "pppoe" in l2:
        pkt /= PPP(proto=proto[first_version])
    if tunnel == "ipip" or tunnel == "6in4":
        pkt /= outer(4, ttl=64 if clean else draw(st.sampled_from([1, 64, 64, 64])))
    elif tunnel in ("ip6ip6", "4in6"):
        pkt /= outer(6, hlim=64 if clean else draw(st.sampled_from([1, 64, 64, 64])))
    elif tunnel == "ip6ip6+destopt":
        pkt /= outer(6) / IPv6ExtHdrDestOpt()
    if version == 4:
        options = [] if clean else draw(st.sampled_from([[], [], [], [b"\x01\x01\x01\x00"]]))
        frag = 0 if clean else draw(st.sampled_from([0, 0, 0, 0, 1]))
        layer = IP(src=V4[0], dst=V4[1], ttl=ttl, frag=frag, flags="DF" if not frag else 0)
        if options:
            layer.options = options
        pkt /= layer
    else:
        pkt /= IPv6(src=V6[0], dst=V6[1], hlim=ttl)
        for ext in [] if clean else draw(v6_exthdrs):
            pkt /= {"hop": IPv6ExtHdrHopByHop, "dest": IPv6ExtHdrDestOpt, "rt": IPv6ExtHdrRouting,
                    "frag0": lambda: IPv6ExtHdrFragment(offset=0, m=0),
                    "frag1": lambda: IPv6ExtHdrFragment(offset=8)}[ext]()
    if l4 == "tcp":
        pkt /= TCP(sport=draw(st.integers(1, 65535)), dport=draw(st.integers(1, 65535)))
    elif l4 == "udp":
        pkt /= UDP(sport=draw(st.integers(1, 65535)), dport=draw(st.integers(1, 65535)))
    elif l4 == "gre":
        pkt /= GRE()
    elif l4 == "gre1":
        pkt /= GRE(version=1, key_present=1, proto=0x880B)
    else:
        pkt /= ICMP() if version == 4 else UDP(sport=1, dport=1)
    raw = bytes(pkt)
    cut = len(raw) if clean else draw(st.one_of(st.just(len(raw)), st.just(len(raw)), st.just(len(raw)), st.integers(0, len(raw))))
    headlen = draw(st.one_of(st.none(), st.integers(0, len(raw))))
    return raw[:cut], headlen
