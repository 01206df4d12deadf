"""The flow tuple the kernel hashes, and the parser that builds it from an skb or a frame.

Theory of operation
-------------------
``struct flow_offload_tuple`` (include/net/netfilter/nf_flow_table.h) puts the lookup key before a
``__hash`` marker: addresses, ports, ingress ifindex, L3 and L4 protocol, up
to two L2 encapsulations (VLAN / PPPoE) and the tunnel's outer addresses.
:class:`FlowTuple` holds exactly those key fields, in that order; everything
else about a direction of a flow (dir, xmit type, MTU, MACs…) lives in the
flow entry, so equality can never depend on metadata by accident.

One parser follows ``nf_flow_table_ip.c`` step by step, with the checks in
the kernel's order and the same header access
(``pskb_may_pull`` where the kernel pulls, ``skb_header_pointer`` where it
does not), so the skb's cost counters match the kernel's work.  Its steps,
inlined into one closure per profile and family (:func:`_make_parser`) and
marked there by the kernel function they model:

``nf_flow_offload_inet_hook``  picks the IPv4 or IPv6 hook (family ``inet``)
``nf_flow_skb_encap_protocol`` skips one in-band VLAN or PPPoE header and runs
                               the tunnel check of the inner protocol
``nf_flow_ip4_tunnel_proto``   IPv4 sanity checks; IPIP → skip the outer header
``nf_flow_ip6_tunnel_proto``   hop limit, extension headers; IP6IP6 → skip it
``nf_flow_tuple_ip/_ipv6``     the inner header checks and the key
``nf_flow_tuple_encap``        the encap and tunnel fields of the key

:func:`nf_flow_offload_lookup` runs it on an skb (the simulator),
:func:`frame_parser` on whole received frames without an skb (``flowsim tuple``).
tests/test_tuple_fast.py proves it equal to the function-per-function
transcription it replaced (tests/tuple_reference.py, kept for that only).

The result is a :class:`TupleResult`: the tuple plus the parse context
(``struct nf_flowtable_ctx``: offset, L4 header size, tunnel header size and
protocol), or a slow-path reason id from :mod:`flowsim.reasons` with a
human-readable detail.  Behaviour that differs between kernels comes from the
:class:`~flowsim.profiles.Profile` switches.

Example::

    >>> from scapy.all import Ether, IP, TCP
    >>> from flowsim.kernel.skb import skb_from_frame
    >>> skb = skb_from_frame(bytes(Ether() / IP(src="10.0.1.99", dst="10.0.2.99") / TCP(sport=40000, dport=12345)), iif=3)
    >>> r = flow_tuple_from_skb(skb, iifidx=3)
    >>> r.tuple.sport, r.tuple.dport, r.tuple.iifidx
    (40000, 12345, 3)
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import attrs

from flowsim.kernel.headers import (
    AF_INET, AF_INET6, ETH_HLEN, GRE_VERSION, Encap, ETH_P_8021AD, ETH_P_8021Q, ETH_P_IP, ETH_P_IPV6, ETH_P_PPP_SES,
    IPPROTO_GRE, IPPROTO_IPIP, IPPROTO_IPV6, IPV4_HLEN, IPV6_HLEN, L4_HDRSIZE, PPP_TO_ETHERTYPE, PPPOE_SES_HLEN, VLAN_HLEN,
    addr_bytes,
    addr_text, ipv6_ext_hdr, ipv6_skip_exthdr,
)
from flowsim.profiles import Profile, get_profile

if TYPE_CHECKING:  # annotations only: flowsim tuple's frame path builds no skb
    from flowsim.kernel.skb import SkBuff

__all__ = [
    "Encap", "Tunnel", "FlowTuple", "FlowtableCtx", "TupleResult",
    "flow_tuple_from_skb", "flow_tuple_from_frame", "frame_parser", "nf_flow_offload_lookup", "nf_flow_offload_parse",
    "hook_parser",
    "HOOKS",
    "NF_FLOW_TABLE_ENCAP_MAX",
]

NF_FLOW_TABLE_ENCAP_MAX = 2  # include/net/netfilter/nf_flow_table.h: the size of tuple.encap[]
_ZERO12 = bytes(12)
_UNPACK_V4_ADDRS = struct.Struct("!4s4s").unpack_from
_UNPACK_V6_ADDRS = struct.Struct("!16s16s").unpack_from
_UNPACK_PORTS = struct.Struct("!HH").unpack_from  # also a VLAN header's TCI and encapsulated protocol
_UNPACK_PPPOE = struct.Struct("!2xH2xH").unpack_from  # a PPPoE session header's session id and PPP protocol
# the fields of an IPv4 header the hook reads: version/IHL, frag_off, TTL, protocol (and saddr, daddr); of an
# IPv6 header: nexthdr, hop_limit, saddr, daddr.  One C call per header instead of a subscript per byte
_UNPACK_V4_CHECKED = struct.Struct("!B5xHBB").unpack_from
_UNPACK_V4_KEYED = struct.Struct("!B5xHBB2x4s4s").unpack_from
_UNPACK_V6_KEYED = struct.Struct("!6xBB16s16s").unpack_from
_L3_NAMES = {AF_INET: "ipv4", AF_INET6: "ipv6"}
_new_tuple = tuple.__new__  # FlowTuple(...) without the generated __new__'s extra call


# The key classes are NamedTuples, not attrs classes: hashing and comparing
# them happens in C, the way the kernel jhashes and memcmps the key bytes, and
# creating one costs a third of a frozen attrs instance.  That is the per-packet
# work of the fast path (see benchmarks/bench_tuple.py).  They are immutable
# values all the same; compare them only with each other.

class Tunnel(NamedTuple):
    """``struct flow_offload_tunnel``: outer source/destination (16-byte unions) and ``l3_proto`` (4 or 41)."""

    src: bytes
    dst: bytes
    l3_proto: int

    @property
    def family(self) -> int:
        return AF_INET if self.l3_proto == IPPROTO_IPIP else AF_INET6

    def to_dict(self) -> dict:
        return {"src": addr_text(self.src, self.family), "dst": addr_text(self.dst, self.family),
                "l3_proto": self.l3_proto}


class FlowTuple(NamedTuple):
    """The key fields of ``struct flow_offload_tuple``, in the kernel's order (nf_flow_table.h).

    Addresses are the kernel's 16-byte unions (an IPv4 address in the first
    4 bytes).  ``encap`` holds the used entries only (index 0 = outermost);
    unused entries are zero in the kernel and no real entry is zero, so the
    comparison is the same.  ``tun`` is ``None`` for the all-zero tunnel.
    """

    src: bytes
    dst: bytes
    sport: int
    dport: int
    iifidx: int
    l3proto: int
    l4proto: int
    encap: tuple[Encap, ...] = ()
    tun: Tunnel | None = None

    @classmethod
    def make(cls, src: str, dst: str, sport: int, dport: int, *, iifidx: int, l4proto: int,
             encap=(), tun: tuple[str, str, int] | None = None) -> FlowTuple:
        """Build a tuple from text addresses (handy in tests and notebooks)."""
        sb = addr_bytes(src)
        l3 = AF_INET6 if ":" in src else AF_INET
        t = None if tun is None else Tunnel(addr_bytes(tun[0]), addr_bytes(tun[1]), tun[2])
        return cls(sb, addr_bytes(dst), sport, dport, iifidx, l3, l4proto,
                   tuple(e if isinstance(e, Encap) else Encap(*e) for e in encap), t)

    @property
    def src_text(self) -> str:
        return addr_text(self.src, self.l3proto)

    @property
    def dst_text(self) -> str:
        return addr_text(self.dst, self.l3proto)

    def to_dict(self) -> dict:
        """The JSON form of ``flowsim tuple --json`` (addresses as text, numbers as integers)."""
        return {
            "src": self.src_text, "dst": self.dst_text, "sport": self.sport, "dport": self.dport,
            "l3proto": self.l3proto, "l4proto": self.l4proto, "iifidx": self.iifidx,
            "encap": [e.to_json() for e in self.encap],
            "tun": None if self.tun is None else self.tun.to_dict(),
        }

    def differences(self, other: FlowTuple) -> list[str]:
        """The key fields whose values differ (for "why did this packet miss its flow?")."""
        return [name for name, a, b in zip(self._fields, self, other) if a != b]

    def __str__(self) -> str:
        encap = ",".join(f"{e.proto:#06x}:{e.id}" for e in self.encap)
        tun = "-" if self.tun is None else f"{self.tun.to_dict()['src']}->{self.tun.to_dict()['dst']}/{self.tun.l3_proto}"
        src, dst = ((f"[{self.src_text}]", f"[{self.dst_text}]") if self.l3proto == AF_INET6
                    else (self.src_text, self.dst_text))
        return (f"{_L3_NAMES.get(self.l3proto, self.l3proto)} {src}:{self.sport} -> "
                f"{dst}:{self.dport} l4proto {self.l4proto} iif {self.iifidx} "
                f"encap [{encap}] tun {tun}")


@attrs.define(slots=True)
class FlowtableCtx:
    """``struct nf_flowtable_ctx``: carried through the parse instead of globals."""

    in_ifindex: int
    offset: int = 0  # bytes from the network header to the (inner) IP header
    hdrsize: int = 0  # L4 header size pulled by the tuple builder
    tun_hdr_size: int = 0  # ctx->tun.hdr_size
    tun_proto: int = 0  # ctx->tun.proto (IPPROTO_IPIP / IPPROTO_IPV6); ctx->tun.inner_proto from 7.3
    ether_type: int = 0  # ctx->ether_type (7.3, switch hook_ether_type_check): the protocol under the in-band header


class TupleResult(NamedTuple):
    """The tuple and its context, or the slow-path reason the kernel would give (one per packet: a NamedTuple)."""

    tuple: FlowTuple | None
    ctx: FlowtableCtx
    reason: str | None = None
    detail: str = ""
    hook: str | None = None  # "ipv4" / "ipv6": the hook that parsed it

    @property
    def ok(self) -> bool:
        return self.tuple is not None


# --- the hook's parse: one implementation, specialised per profile and family ------------------------
#
# nf_flow_offload_inet_hook → nf_flow_offload_ip_hook / nf_flow_offload_ipv6_hook (net/netfilter/
# nf_flow_table_inet.c, nf_flow_table_ip.c) up to the table lookup, with every check in the kernel's
# order.  The kernel functions are inlined into one closure per (profile, family): the profile's
# switches are constants of the closure, so a packet pays for the branches its layout takes and for
# no call, no context object and no attribute lookup.  The closure reads the skb's bytes at the
# kernel's offsets; ``lin`` is the end of the linear area, and a read past it goes through
# ``skb.may_pull`` (``pskb_may_pull``) or ``skb.header_pointer`` (``skb_header_pointer``) exactly
# where the kernel uses them, so the skb's cost counters are the kernel's.  Without an skb (a whole
# frame, :func:`flow_tuple_from_frame`) the frame is all linear and a read past its end fails as
# ``pskb_may_pull`` fails.  tests/test_tuple_fast.py proves it equal to the step-by-step
# transcription it replaced (tests/tuple_reference.py) on the corpus and on generated stacks.
#
# A failure is returned as a (reason id, detail) pair; success as
# (key, offset, hdrsize, tun_hdr_size, tun_proto, ether_type): the tuple and nf_flowtable_ctx.

_PPP_TO_ETHERTYPE = PPP_TO_ETHERTYPE.get  # pppoe_proto_to_ethertype(p) is _PPP_TO_ETHERTYPE(p, 0)
_IPV6_EXT_HDRS = frozenset(n for n in range(256) if ipv6_ext_hdr(n))  # ipv6_ext_hdr(n) is n in _IPV6_EXT_HDRS
# the L4 header size per IP protocol number (None: not the flowtable's), indexed by the protocol byte: a
# subscript of a tuple, not a dict method call, per packet
_L4_HDRSIZES = tuple(L4_HDRSIZE.get(n) for n in range(256))
_VLAN_TPIDS = frozenset((ETH_P_8021Q, ETH_P_8021AD))  # eth_type_vlan
_PPPOE_PULL = ETH_HLEN + PPPOE_SES_HLEN  # nf_flow_pppoe_proto pulls this much from skb->data (kernel quirk)
_Parse = Callable[..., Any]  # the closure _make_parser builds


# Encap and Tunnel values are interned: the key's L2 encapsulations and tunnel endpoints repeat from packet to
# packet, and a dict lookup costs a fraction of building a NamedTuple (tuple.__new__ with its argument tuples).
# They are immutable values, equal whether shared or not.  Keyed by the fields as read: (id, proto) for an
# encap, the (src, dst) pair as read from the outer header (4 or 16 bytes each, so the families never meet).
_ENCAPS: dict[tuple[int, int], Encap] = {}
_TUNNELS: dict[tuple[bytes, bytes], Tunnel] = {}
_INTERN_MAX = 1 << 16  # past this many values (a capture with as many tunnel endpoints) a cache starts over


def _new_encap(fields: tuple[int, int]) -> Encap:
    """The Encap of *fields* (id, proto), remembered: :data:`_ENCAPS` missed it."""
    if len(_ENCAPS) >= _INTERN_MAX:
        _ENCAPS.clear()
    encap = _ENCAPS[fields] = _new_tuple(Encap, fields)
    return encap


def _new_tunnel(addrs: tuple[bytes, bytes]) -> Tunnel:
    """The Tunnel of the outer addresses *addrs* as read (4 bytes: IPIP, 16: IP6IP6), remembered: :data:`_TUNNELS`
    missed it."""
    if len(_TUNNELS) >= _INTERN_MAX:
        _TUNNELS.clear()
    src, dst = addrs
    tun = _TUNNELS[addrs] = (_new_tuple(Tunnel, (src + _ZERO12, dst + _ZERO12, IPPROTO_IPIP)) if len(src) == 4
                             else _new_tuple(Tunnel, (src, dst, IPPROTO_IPV6)))
    return tun


def _pppoe_detail(buf, m: int) -> str:
    """Why a PPPoE session frame is not the hook's: its PPP protocol field (at ``m`` + 6, ``m`` = after Ethernet)."""
    raw = (buf[m + 6] << 8) | buf[m + 7]
    if raw >> 8 in (0x21, 0x57) and raw & 0xFF:
        return f"PPP protocol field {raw:#06x} looks compressed (PFC): only 0x0021/0x0057 map to IPv4/IPv6"
    return f"PPP protocol {raw:#06x} is not the hook's protocol (0x0021 IPv4, 0x0057 IPv6)"


def _inet_dispatch(buf, d: int, m: int, lin: int, protocol: int, skb) -> int | tuple[str, str]:
    """``nf_flow_offload_inet_hook`` (nf_flow_table_inet.c) for an skb whose protocol is not IPv4/IPv6:
    the protocol under one in-band VLAN or PPPoE header, whose hook runs, or why none does."""
    proto = protocol
    if proto == ETH_P_8021Q:
        if d + VLAN_HLEN > lin and (skb is None or not skb.may_pull(VLAN_HLEN)):
            return "header-truncated", "in-band 802.1Q header truncated"
        proto = (buf[m + 2] << 8) | buf[m + 3]  # veth->h_vlan_encapsulated_proto
    elif proto == ETH_P_PPP_SES:
        if d + _PPPOE_PULL > lin and (skb is None or not skb.may_pull(_PPPOE_PULL)):  # nf_flow_pppoe_proto
            return "header-truncated", "PPPoE session header truncated"
        proto = _PPP_TO_ETHERTYPE((buf[m + 6] << 8) | buf[m + 7], 0)  # pppoe_proto_to_ethertype without the call
    if proto in (ETH_P_IP, ETH_P_IPV6):
        return proto
    if protocol == ETH_P_PPP_SES:
        return "encap-unsupported", _pppoe_detail(buf, m)
    if protocol in (ETH_P_8021Q, ETH_P_8021AD):
        return "encap-unsupported", f"{protocol:#06x} header carries ethertype {proto:#06x}"
    return "l3proto-unsupported", f"ethertype {proto:#06x}"


def _make_parser(profile: Profile, family: str) -> _Parse:
    """The hook's parse under *profile* at a *family* flowtable: one closure, the profile's switches as its constants."""
    ipip_rx = profile.ipip_rx
    ip6ip6_rx = profile.ip6ip6_rx
    ihl_check = profile.ip4_tunnel_ihl_check
    ip6_pull = profile.ip6_tunnel_header_access == "pull"
    ip6_exthdr_slowpath = profile.ip6_tunnel_exthdr == "slowpath"
    ip6_hdr_absolute = profile.ip6_tunnel_hdr_size == "absolute"
    ether_type_check = profile.hook_ether_type_check
    pppoe_mapped = profile.tuple_encap_pppoe_proto == "mapped"
    hdrsizes = _L4_HDRSIZES
    vlan_tpids = _VLAN_TPIDS
    ppp_to_ethertype = _PPP_TO_ETHERTYPE  # pppoe_proto_to_ethertype without the call
    ext_hdrs = _IPV6_EXT_HDRS
    encaps_get = _ENCAPS.get
    tunnels_get = _TUNNELS.get
    # nf_flowtable_ctx as it stood when the parse failed, written just before every failure (a failure
    # is a (reason, detail) pair, so the context travels beside it); read by nf_flow_offload_lookup
    failed_ctx = [0, 0, 0, 0, 0]

    def parse(d: int, nh: int, m: int, lin: int, protocol: int, vlan: Encap | None, proto: int, skb, iifidx: int,
              buf) -> tuple | None:
        """*buf*: the bytes; *d*: skb->data; *nh*: network header; *m*: mac header + ETH_HLEN; *lin*: end of the
        linear area; *vlan*: the hwaccel tag; *proto*: the hook's protocol (ETH_P_IP / ETH_P_IPV6).  *d* = 0:
        *buf* is a whole received frame, no skb (:func:`frame_parser`): the receive path first, *proto* 0 for
        the inet hook's dispatch.  Parameters in this order so that a :func:`functools.partial` binds all
        but the frame."""
        offset = hdrsize = tun_hdr_size = tun_proto = ether_type = 0
        if not d:
            # eth_type_trans and __netif_receive_skb_core's skb_vlan_untag (skb_from_frame), all of it linear
            end = len(buf)
            if end < ETH_HLEN:
                return None  # a runt: the device drops it before any hook
            protocol = (buf[12] << 8) | buf[13]
            d = ETH_HLEN
            if protocol in vlan_tpids:
                if end < ETH_HLEN + VLAN_HLEN:
                    return None  # truncated tag: skb_vlan_untag frees the skb
                tci, encapsulated = _UNPACK_PORTS(buf, ETH_HLEN)
                fields = tci, protocol
                vlan = encaps_get(fields) or _new_encap(fields)
                protocol = encapsulated
                d = ETH_HLEN + VLAN_HLEN
            nh = m = d
            lin = end
            if not proto:
                proto = protocol
                if proto != ETH_P_IP and proto != ETH_P_IPV6:  # nf_flow_offload_inet_hook
                    dispatched = _inet_dispatch(buf, d, m, lin, protocol, None)
                    if dispatched.__class__ is tuple:
                        failed_ctx[:] = _NO_CTX
                        return dispatched  # (reason, detail)
                    proto = dispatched  # type: ignore[assignment]  # the protocol under the in-band header

        # --- nf_flow_skb_encap_protocol: one in-band VLAN / PPPoE header, then the tunnel check
        if ether_type_check:
            # 7.3: skip the in-band header whatever it carries; ctx->ether_type is the protocol under it
            if protocol == ETH_P_8021Q:
                if d + VLAN_HLEN > lin:
                    if skb is None or not skb.may_pull(VLAN_HLEN):
                        failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                        return "header-truncated", "in-band 802.1Q header truncated"
                    lin = skb.linear_end
                ether_type = (buf[m + 2] << 8) | buf[m + 3]
                offset = VLAN_HLEN
            elif protocol == ETH_P_PPP_SES:
                if d + _PPPOE_PULL > lin:  # nf_flow_pppoe_proto
                    if skb is None or not skb.may_pull(_PPPOE_PULL):
                        failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                        return "header-truncated", "PPPoE session header truncated"
                    lin = skb.linear_end
                ether_type = ppp_to_ethertype((buf[m + 6] << 8) | buf[m + 7], 0)  # __nf_flow_pppoe_proto: 0 for another
                offset = PPPOE_SES_HLEN
            elif protocol in (ETH_P_IP, ETH_P_IPV6):
                ether_type = protocol
            elif protocol == ETH_P_8021AD:
                failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                return "encap-unsupported", "in-band 802.1AD header (only the outer tag is untagged)"
            else:
                failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                return "l3proto-unsupported", f"ethertype {protocol:#06x}"
            inner = ether_type
            tunnel_check = (inner == ETH_P_IP and ipip_rx) or (inner == ETH_P_IPV6 and ip6ip6_rx)
        elif protocol == proto:
            # the hook's own protocol, no in-band header (most packets): the switch has no case for it, and the
            # family's tunnel check runs
            inner = protocol
            tunnel_check = ipip_rx if inner == ETH_P_IP else ip6ip6_rx
        else:
            inner = protocol
            failure: tuple[str, str] | None = None
            if inner != ETH_P_IP and inner != ETH_P_IPV6:  # the switch's cases; IPv4 / IPv6 (the most) skip them
                if inner == ETH_P_8021Q:
                    # pskb_may_pull(skb_mac_offset + sizeof(struct vlan_ethhdr)): 4 bytes past skb->data
                    if d + VLAN_HLEN > lin:
                        if skb is None or not skb.may_pull(VLAN_HLEN):
                            failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                            return "header-truncated", "in-band 802.1Q header truncated"
                        lin = skb.linear_end
                    encapsulated = (buf[m + 2] << 8) | buf[m + 3]
                    if encapsulated == proto:
                        offset = VLAN_HLEN
                        inner = proto
                    else:
                        failure = "encap-unsupported", f"802.1Q header carries ethertype {encapsulated:#06x}"
                elif inner == ETH_P_PPP_SES:
                    if d + _PPPOE_PULL > lin and (skb is None or not skb.may_pull(_PPPOE_PULL)):  # nf_flow_pppoe_proto
                        failure = "header-truncated", "PPPoE session header truncated"
                    else:
                        if skb is not None:
                            lin = skb.linear_end
                        inner = ppp_to_ethertype((buf[m + 6] << 8) | buf[m + 7], 0)  # set even when not *proto*
                        if inner == proto:
                            offset = PPPOE_SES_HLEN
                        else:
                            failure = "encap-unsupported", _pppoe_detail(buf, m)
                elif inner == ETH_P_8021AD:
                    failure = "encap-unsupported", "in-band 802.1AD header (only the outer tag is untagged)"
                else:
                    failure = "l3proto-unsupported", f"ethertype {protocol:#06x}"
            if inner == ETH_P_IP:
                tunnel_check = ipip_rx
                if not ipip_rx and proto != ETH_P_IP:
                    failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                    return failure or ("l3proto-unsupported", f"ethertype {protocol:#06x}")
            elif inner == ETH_P_IPV6:
                tunnel_check = ip6ip6_rx
                if not ip6ip6_rx and proto != ETH_P_IPV6:
                    failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                    return failure or ("l3proto-unsupported", f"ethertype {protocol:#06x}")
            else:
                failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                return failure or ("l3proto-unsupported", f"ethertype {protocol:#06x}")

        if tunnel_check:
            if inner == ETH_P_IP:
                # nf_flow_ip4_tunnel_proto: sanity checks of the (outer) IPv4 header; IPIP → skip it
                need = IPV4_HLEN + offset
                if d + need > lin:
                    if skb is None or not skb.may_pull(need):
                        failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                        return "header-truncated", f"IPv4 header needs {need} bytes, packet has {len(buf) - d}"
                    lin = skb.linear_end
                ihl, frag_off, ttl, l4proto = _UNPACK_V4_CHECKED(buf, nh + offset)  # one read of the fields checked
                ihl &= 0x0F
                if ihl_check and ihl < 5:
                    failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                    return "ip-ihl-invalid", f"IPv4 IHL {ihl}"
                if frag_off & 0x3FFF:  # ip_is_fragment: MF or offset
                    failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                    return "fragment", "IPv4 fragment"
                if ihl != 5:  # ip_has_options
                    failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                    return "ip-options", f"IPv4 header length {ihl << 2}"
                if ttl <= 1:
                    failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                    return "ttl-expired", f"IPv4 TTL {ttl}"
                if l4proto == IPPROTO_IPIP:
                    tun_proto = IPPROTO_IPIP
                    tun_hdr_size = IPV4_HLEN
                    offset += IPV4_HLEN
            else:
                # nf_flow_ip6_tunnel_proto: hop limit and extension headers; IP6IP6 → skip the outer header
                start = offset
                if ip6_pull:  # 7.1.5: pskb_may_pull
                    need = IPV6_HLEN + start
                    if d + need > lin:
                        if skb is None or not skb.may_pull(need):
                            failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                            return "header-truncated", f"IPv6 header needs {need} bytes, packet has {len(buf) - d}"
                        lin = skb.linear_end
                    hdr = buf
                    o = nh + start
                elif skb is not None:  # 7.0: skb_header_pointer, a counted copy past the linear area
                    hdr = skb.header_pointer(start, IPV6_HLEN)
                    if hdr is None:
                        failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                        return "header-truncated", f"IPv6 header needs {IPV6_HLEN + start} bytes, packet has {len(buf) - d}"
                    o = 0
                else:
                    if d + start + IPV6_HLEN > len(buf):
                        failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                        return "header-truncated", f"IPv6 header needs {IPV6_HLEN + start} bytes, packet has {len(buf) - d}"
                    hdr = buf
                    o = d + start
                hop_limit = hdr[o + 7]
                if hop_limit <= 1:
                    failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                    return "ttl-expired", f"IPv6 hop limit {hop_limit}"
                nexthdr = hdr[o + 6]
                if ip6_exthdr_slowpath:
                    if nexthdr in ext_hdrs:  # ipv6_ext_hdr
                        failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                        return "ipv6-exthdr", f"extension header {nexthdr} after the IPv6 header"
                    hdrlen = IPV6_HLEN + start
                else:  # 7.0: ipv6_skip_exthdr
                    read = skb.header_pointer if skb is not None else _frame_reader(buf, d)
                    hdrlen, nexthdr, _ = ipv6_skip_exthdr(read, IPV6_HLEN + start, nexthdr)
                    if hdrlen < 0:
                        failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                        return "ipv6-exthdr-error", "IPv6 extension header chain cannot be walked"
                if nexthdr == IPPROTO_IPV6:
                    # 7.0 stores the absolute offset (bug when an in-band header precedes)
                    tun_hdr_size = hdrlen if ip6_hdr_absolute else hdrlen - start
                    tun_proto = IPPROTO_IPV6
                    offset += tun_hdr_size

        if ether_type_check and ether_type != proto:
            # 7.3 nf_flow_offload_ip_hook / _ipv6_hook: ctx.ether_type is not the hook's family → NF_ACCEPT
            if protocol == ether_type:
                failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                return "l3proto-unsupported", f"ethertype {ether_type:#06x} at the {family} hook"
            failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
            return "encap-unsupported", (f"{protocol:#06x} header carries ethertype "
                                         f"{ether_type:#06x}, not the hook's {proto:#06x}")

        if proto == ETH_P_IP:
            # --- nf_flow_tuple_ip: checks of the (inner) IPv4 header and the key
            need = IPV4_HLEN + offset
            if d + need > lin:
                if skb is None or not skb.may_pull(need):
                    failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                    return "header-truncated", f"IPv4 header needs {need} bytes, packet has {len(buf) - d}"
                lin = skb.linear_end
            thoff, frag_off, ttl, l4proto, src, dst = _UNPACK_V4_KEYED(buf, nh + offset)  # the header, read once
            thoff = (thoff & 0x0F) * 4
            if frag_off & 0x3FFF:  # ip_is_fragment
                failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                return "fragment", "IPv4 fragment"
            if thoff != IPV4_HLEN:  # ip_has_options
                failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                return "ip-options", f"IPv4 header length {thoff}"
            thoff += offset
            size = hdrsizes[l4proto]
            if size is None:
                failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                return "l4proto-unsupported", f"IP protocol {l4proto}"
            hdrsize = size  # ctx->hdrsize
            if ttl <= 1:
                failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                return "ttl-expired", f"IPv4 TTL {ttl}"
            src += _ZERO12
            dst += _ZERO12
            l3proto = AF_INET
        else:
            # --- nf_flow_tuple_ipv6: checks of the (inner) IPv6 header and the key
            thoff = IPV6_HLEN + offset
            if d + thoff > lin:
                if skb is None or not skb.may_pull(thoff):
                    failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                    return "header-truncated", f"IPv6 header needs {thoff} bytes, packet has {len(buf) - d}"
                lin = skb.linear_end
            l4proto, hop_limit, src, dst = _UNPACK_V6_KEYED(buf, nh + offset)  # the header, read once
            size = hdrsizes[l4proto]
            if size is None:
                if l4proto in ext_hdrs:  # ipv6_ext_hdr
                    failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                    return "ipv6-exthdr", f"IPv6 extension header {l4proto}"
                failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                return "l4proto-unsupported", f"IPv6 next header {l4proto}"
            hdrsize = size  # ctx->hdrsize
            if hop_limit <= 1:
                failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                return "ttl-expired", f"IPv6 hop limit {hop_limit}"
            l3proto = AF_INET6
        # the L4 header: pskb_may_pull(thoff + ctx->hdrsize), then the ports (or GRE's version)
        need = thoff + hdrsize
        if d + need > lin and (skb is None or not skb.may_pull(need)):
            failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
            return "header-truncated", f"L4 header needs {need} bytes, packet has {len(buf) - d}"
        at = nh + thoff
        if l4proto == IPPROTO_GRE:
            if buf[at + 1] & GRE_VERSION:
                failed_ctx[:] = offset, hdrsize, tun_hdr_size, tun_proto, ether_type
                return "gre-version", f"GRE version {buf[at + 1] & GRE_VERSION}"
            sport = dport = 0
        else:
            sport, dport = _UNPACK_PORTS(buf, at)

        # --- nf_flow_tuple_encap: the hwaccel tag (full TCI), one in-band 802.1Q (full TCI) or PPPoE (session
        # id) header, and the tunnel's outer addresses when the compared protocol is the tunnel's family
        if vlan is None and protocol != ETH_P_8021Q and protocol != ETH_P_PPP_SES:
            if not tun_proto:  # the common case
                return (_new_tuple(FlowTuple, (src, dst, sport, dport, iifidx, l3proto, l4proto, (), None)),
                        offset, hdrsize, 0, 0, ether_type)
            encap: tuple[Encap, ...] = ()
            inner = protocol
            o = nh
        else:
            inner = protocol
            o = nh
            if inner == ETH_P_8021Q:
                tci, inner = _UNPACK_PORTS(buf, m)
                fields = tci, ETH_P_8021Q
                inband = encaps_get(fields) or _new_encap(fields)
                encap = (inband,) if vlan is None else (vlan, inband)
                o = nh + VLAN_HLEN
            elif inner == ETH_P_PPP_SES:
                sid, inner = _UNPACK_PPPOE(buf, nh)  # inner: the raw PPP protocol through 7.2.13
                fields = sid, ETH_P_PPP_SES
                inband = encaps_get(fields) or _new_encap(fields)
                encap = (inband,) if vlan is None else (vlan, inband)
                if pppoe_mapped:
                    inner = ppp_to_ethertype(inner, 0)
                o = nh + PPPOE_SES_HLEN
            else:
                encap = (vlan,)  # type: ignore[assignment]  # vlan is set: the branch above takes the untagged case
        tun = None
        if inner == ETH_P_IP and tun_proto == IPPROTO_IPIP:
            addrs = _UNPACK_V4_ADDRS(buf, o + 12)
            tun = tunnels_get(addrs) or _new_tunnel(addrs)
        elif inner == ETH_P_IPV6 and tun_proto == IPPROTO_IPV6:
            addrs = _UNPACK_V6_ADDRS(buf, o + 8)
            tun = tunnels_get(addrs) or _new_tunnel(addrs)
        return (_new_tuple(FlowTuple, (src, dst, sport, dport, iifidx, l3proto, l4proto, encap, tun)),
                offset, hdrsize, tun_hdr_size, tun_proto, ether_type)

    parse.failed_ctx = failed_ctx  # type: ignore[attr-defined]
    return parse


_NO_CTX = (0, 0, 0, 0, 0)


def _frame_reader(buf, d: int):
    """``skb_header_pointer`` on a whole (linear) frame: *length* bytes at *offset* from data, None past the end."""
    end = len(buf)

    def read(offset: int, length: int):
        start = d + offset
        return None if offset < 0 or start + length > end else buf[start:start + length]
    return read


_HOOK_NAME = {ETH_P_IP: "ipv4", ETH_P_IPV6: "ipv6"}
_PARSERS: dict[tuple[int, str], tuple[Profile, _Parse]] = {}
_last_parser: tuple[Profile | None, str, _Parse | None] = (None, "", None)  # a run uses one profile and family


def _parser(profile: Profile, family: str) -> _Parse:
    """The parser of *profile* and *family*, built once (keyed by the profile's identity: hashing a profile
    costs more than the parse; the entry keeps the profile alive, so its id is not reused)."""
    global _last_parser
    last_profile, last_family, parse = _last_parser
    if last_profile is profile and last_family == family and parse is not None:
        return parse
    entry = _PARSERS.get((id(profile), family))
    if entry is None or entry[0] is not profile:
        entry = _PARSERS[id(profile), family] = (profile, _make_parser(profile, family))
    _last_parser = (profile, family, entry[1])
    return entry[1]


def hook_parser(profile: Profile, family: str) -> tuple[_Parse, int]:
    """The parse closure of *profile* at a *family* flowtable, and the protocol of the family's hook (0 for
    inet, whose hook dispatches): what the fast-path hook calls directly for an IPv4/IPv6 skb, with the
    arguments :func:`nf_flow_offload_parse` passes it."""
    return _parser(profile, family), _HOOK_PROTO[family]


# --- hook entry points ----------------------------------------------------------

HOOKS = ("inet", "ip", "ip6")
_HOOK_PROTO = {"ip": ETH_P_IP, "ip6": ETH_P_IPV6, "inet": 0}


def flow_tuple_from_skb(skb: SkBuff, *, iifidx: int | None = None, family: str = "inet",
                        profile: Profile | str | None = None) -> TupleResult:
    """Run the flowtable hook of *family* (``inet``, ``ip`` or ``ip6``) up to the lookup.

    *iifidx* is the ifindex of the device whose ingress hook runs (default
    the skb's ``iif``).  Never raises for a bad packet, except
    :class:`~flowsim.errors.SkbPullBug` where the modelled kernel has that bug.
    """
    if profile.__class__ is not Profile:
        profile = get_profile(profile)
    if family not in HOOKS:
        raise ValueError(f"unknown flowtable family {family!r} (expected one of {', '.join(HOOKS)})")
    return nf_flow_offload_lookup(skb, skb.iif if iifidx is None else iifidx, family, profile)


def nf_flow_offload_parse(skb: SkBuff, iifidx: int, family: str, profile: Profile) -> tuple[tuple, int]:
    """The hook's parse of *skb* behind the inet hook's dispatch, as the closure answers it, and the protocol
    of the hook that ran (0: the dispatch refused the packet).

    The answer is ``(key, offset, hdrsize, tun_hdr_size, tun_proto, ether_type)`` or ``(reason, detail)``:
    the fast-path hook (nf_flow_offload_hook) reads it without building a :class:`TupleResult`."""
    buf = skb.buf
    m = skb.mac_header + ETH_HLEN
    protocol = skb.protocol
    proto = _HOOK_PROTO[family]
    lin = skb.linear_end
    if not proto:
        proto = protocol
        if proto != ETH_P_IP and proto != ETH_P_IPV6:  # the dispatch only has work to do for in-band headers
            dispatched = _inet_dispatch(buf, skb.data, m, lin, protocol, skb)
            if dispatched.__class__ is tuple:
                return dispatched, 0  # (reason, detail)
            proto = dispatched  # type: ignore[assignment]  # the protocol under the in-band header
            lin = skb.linear_end
    vlan = _new_tuple(Encap, (skb.vlan_tci, skb.vlan_proto)) if skb.vlan_present else None
    return _parser(profile, family)(skb.data, skb.network_header, m, lin, protocol, vlan, proto, skb, iifidx,
                                    buf), proto


def nf_flow_offload_lookup(skb: SkBuff, iifidx: int, family: str, profile: Profile) -> TupleResult:
    """``nf_flow_offload_lookup`` / ``nf_flow_offload_ipv6_lookup`` up to the table lookup, behind the
    inet hook's dispatch: :func:`flow_tuple_from_skb` with its arguments checked, once per packet.

    The result's ctx is the kernel's ``nf_flowtable_ctx`` as the parse left it."""
    res, proto = nf_flow_offload_parse(skb, iifidx, family, profile)
    if len(res) == 2:
        if not proto:  # the inet hook's dispatch: no context yet
            return TupleResult(None, FlowtableCtx(iifidx), res[0], res[1], None)
        return TupleResult(None, FlowtableCtx(iifidx, *_parser(profile, family).failed_ctx),  # type: ignore[attr-defined]
                           res[0], res[1], _HOOK_NAME[proto])
    key, offset, hdrsize, tun_hdr_size, tun_proto, ether_type = res
    return _new_tuple(TupleResult, (key, FlowtableCtx(iifidx, offset, hdrsize, tun_hdr_size, tun_proto, ether_type),
                                    None, "", _HOOK_NAME[proto]))


def frame_parser(profile: Profile, family: str, iifidx: int) -> Callable[[bytes], tuple | None]:
    """The hook's parse of whole received frames at a *family* flowtable of device *iifidx*, without an skb:
    ``eth_type_trans`` and ``__netif_receive_skb_core``'s untag of the outer VLAN tag
    (:func:`~flowsim.kernel.skb.skb_from_frame`, all of the frame linear), then the parser
    :func:`nf_flow_offload_lookup` runs, in one call per frame (``flowsim tuple``).

    The callable returns None for a runt frame the device drops; ``(reason, detail)`` when the hook
    accepts the packet to the slow path; else ``(key, offset, hdrsize, tun_hdr_size, tun_proto, ether_type)``.
    The result does not depend on whether the NIC untags (``skb_vlan_untag`` runs before the hook either way).
    """
    if family not in HOOKS:
        raise ValueError(f"unknown flowtable family {family!r} (expected one of {', '.join(HOOKS)})")
    return functools.partial(_parser(profile, family), 0, 0, 0, 0, 0, None, _HOOK_PROTO[family], None, iifidx)


def flow_tuple_from_frame(frame: bytes, iifidx: int, family: str, profile: Profile) -> tuple | None:
    """:func:`frame_parser`'s answer for one frame."""
    return frame_parser(profile, family, iifidx)(frame)
