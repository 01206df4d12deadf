"""IPsec in the slow path: ``ip xfrm`` states and policies, ESP output and input (``xfrm_lookup``, ``xfrm4_output``).

Theory of operation
-------------------
A namespace's ``ip xfrm state add`` / ``ip xfrm policy add`` lines fill its
:class:`XfrmDb` (``Namespace.xfrm``).  Only ESP with ``rfc4106(gcm(aes))``
is modelled, in tunnel mode (transport-mode states parse, and are used for
IPv4 ESP in transport mode); the crypto is :mod:`flowsim.kernel.esp`'s real
AES-GCM.

Forwarding (``ip_forward``): first ``xfrm4_policy_check(FWD)`` — a packet
matching a ``dir fwd`` policy must have been decrypted by a state matching
each of the policy's templates, and a decrypted tunnel-mode packet needs
such a policy (``XfrmInTmplMismatch`` / ``XfrmInNoPols``); then
``xfrm4_route_forward`` → ``xfrm_lookup``: a ``dir out`` policy matching the
packet's addresses replaces the route by an *xfrm bundle*
(:class:`XfrmRoute`: the underlay route to the template's remote end, the
MTU reduced by the ESP overhead as ``esp4_get_mtu`` computes it, and the
state).  ``flow add`` sees that route, so the flow's direction into the
tunnel gets the XFRM xmit type (:func:`flowsim.kernel.flowtable.path.nft_flow_route`).

Output (``xfrm4_output``): POSTROUTING on the inner packet, then
``xfrm_output``: the inner packet becomes the ESP payload of a new outer
IPv4 header (``xfrm4_tunnel_encap_add`` + ``esp_output``, one sequence
number per packet and state; the inner DF is copied and, as there is no
socket, a DF outer header gets ID 0 from ``ip_select_ident_segs``), and the outer packet leaves through OUTPUT,
POSTROUTING and the underlay route (``xfrm_output_resume`` → ``dst_output``).
The fast path's XFRM branch (``nf_flow_xmit_xfrm``) calls the same output (:meth:`Kernel.xfrm_output`).

Input (``xfrm4_rcv`` from ``ip_local_deliver``): the state is looked up by
destination, SPI and protocol, the AEAD opened; in tunnel mode the inner
packet is received again on the same device (``xfrm_input`` → ``netif_rx``),
so the ingress hook and its flowtable see the decrypted packet; the skb
remembers the states that decrypted it (its ``sec_path``).

Not modelled: the replay window on input, lifetimes, acquire, IPv6 SAs,
other algorithms, ``dir in`` checks for local sockets, and the
``sec_path`` test of ``flow add`` (``nft_flow_offload_skip``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import attrs

from flowsim.kernel import esp
from flowsim.kernel.fib import Route
from flowsim.kernel.headers import AF_INET, ETH_P_IP, IPPROTO_ESP, IPPROTO_IPIP, internet_checksum
from flowsim.kernel.pkt import build_ipv4, new_skb, parse_ip
from flowsim.kernel.stack.l2 import gso_segment, netif_receive_skb
from flowsim.kernel.stack.nf import NfCtx, nf_hook

__all__ = ["XfrmSA", "XfrmPolicy", "XfrmTmpl", "XfrmDb", "XfrmRoute", "esp4_get_mtu", "policy_check",
           "route_forward", "xfrm4_output", "xfrm_output_fast", "xfrm4_rcv", "secpath", "XfrmStateAfinfo",
           "xfrm_state_register_afinfo"]


@attrs.frozen
class XfrmStateAfinfo:
    """``struct xfrm_state_afinfo``: what an address family's IP layer lends xfrm (``xfrm4_state_afinfo``).

    xfrm sits below the IP layer here (``ip_forward`` calls it, as
    ``xfrm4_route_forward`` calls ``xfrm_lookup``); it reaches back up only
    through this, as ``xfrm_output_resume`` does through
    ``skb_dst(skb)->ops->local_out``.
    """

    local_out: Callable[..., None]  # __ip_local_out: (kernel, netns state, skb, route=underlay route)


_AFINFO: dict[int, XfrmStateAfinfo] = {}


def xfrm_state_register_afinfo(family: int, afinfo: XfrmStateAfinfo) -> None:
    """``xfrm_state_register_afinfo``: the IP layer of *family* registers itself (``xfrm4_state_init``)."""
    _AFINFO[family] = afinfo


IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@attrs.frozen
class XfrmSA:
    """``ip xfrm state``: one ESP SA with ``rfc4106(gcm(aes))``."""

    src: IpAddress
    dst: IpAddress
    spi: int
    key: bytes  # AES key + 4-byte salt
    reqid: int = 0
    mode: str = "tunnel"
    icv_bits: int = 128
    sel_src: IpNetwork | None = None
    sel_dst: IpNetwork | None = None

    @property
    def esp_state(self) -> esp.XfrmState:
        return _esp_state(self)


_ESP_STATES: dict[XfrmSA, esp.XfrmState] = {}


def _esp_state(sa: XfrmSA) -> esp.XfrmState:
    st = _ESP_STATES.get(sa)
    if st is None:
        st = _ESP_STATES[sa] = esp.XfrmState(spi=sa.spi, key=sa.key, mode=sa.mode,
                                             tunnel=(str(sa.src), str(sa.dst)))
    return st


@attrs.frozen
class XfrmTmpl:
    """One ``tmpl src A dst B proto esp [reqid N] [mode M]`` of a policy."""

    src: IpAddress
    dst: IpAddress
    proto: str = "esp"
    reqid: int = 0
    mode: str = "transport"


@attrs.frozen
class XfrmPolicy:
    """``ip xfrm policy``: selector, direction, templates."""

    src: IpNetwork
    dst: IpNetwork
    dir: str  # out | in | fwd
    tmpls: tuple[XfrmTmpl, ...] = ()
    priority: int = 0
    action: str = "allow"
    proto: int = 0  # selector's upper-layer protocol, 0 = any

    def matches(self, src: IpAddress, dst: IpAddress, proto: int) -> bool:
        return (src.version == self.src.version and src in self.src and dst in self.dst
                and (not self.proto or self.proto == proto))


@attrs.define
class XfrmDb:
    """A namespace's SAD and SPD."""

    states: list[XfrmSA] = attrs.Factory(list)
    policies: list[XfrmPolicy] = attrs.Factory(list)

    def policy(self, dir: str, src: IpAddress, dst: IpAddress, proto: int) -> XfrmPolicy | None:
        """``xfrm_policy_lookup``: the matching policy with the lowest priority value (first added on a tie)."""
        best = None
        for p in self.policies:
            if p.dir == dir and p.matches(src, dst, proto) and (best is None or p.priority < best.priority):
                best = p
        return best

    def state_for(self, tmpl: XfrmTmpl, src: IpAddress, dst: IpAddress) -> XfrmSA | None:
        """``xfrm_state_find``: a state for the template (and the packet, if the state has a selector)."""
        for sa in self.states:
            if (sa.src == tmpl.src and sa.dst == tmpl.dst and sa.mode == tmpl.mode
                    and (not tmpl.reqid or sa.reqid == tmpl.reqid)
                    and (sa.sel_src is None or src in sa.sel_src) and (sa.sel_dst is None or dst in sa.sel_dst)):
                return sa
        return None

    def state_by_spi(self, daddr, spi: int) -> XfrmSA | None:
        """``xfrm_state_lookup(daddr, spi, IPPROTO_ESP)``."""
        for sa in self.states:
            if sa.dst == daddr and sa.spi == spi:
                return sa
        return None


@attrs.frozen
class XfrmRoute(Route):
    """An xfrm bundle (``struct xfrm_dst``): the underlay route, with the SA and the reduced MTU."""

    # keyword-only: Route's own fields have defaults, and a bundle always has its state and underlay route
    sa: XfrmSA = attrs.field(kw_only=True)
    policy: XfrmPolicy | None = attrs.field(default=None, kw_only=True)
    route: Route = attrs.field(kw_only=True)  # xfrm_dst->route: the underlay route the outer packet takes

    @property
    def xfrm(self) -> XfrmSA:
        """Non-None: "the dst has an xfrm bundle" (``dst_xfrm(dst)``, as ``nft_xmit_type`` asks)."""
        return self.sa


def esp4_get_mtu(sa: XfrmSA, mtu: int) -> int:
    """``xfrm_state_mtu`` → ``esp4_get_mtu`` for rfc4106 (block size aligned to 4)."""
    header_len = esp.ESP_HEADER_LEN + (20 if sa.mode == "tunnel" else 0)
    net_adj = 0 if sa.mode == "tunnel" else 20
    return ((mtu - header_len - sa.icv_bits // 8 - net_adj) & ~3) + net_adj - 2


def secpath(skb) -> tuple:
    """The states that decrypted *skb* (``skb_sec_path``), outermost first."""
    return skb.sec_path


# ----------------------------------------------------------------- forward

def policy_check(st, skb, info) -> str | None:
    """``xfrm4_policy_check(NULL, XFRM_POLICY_FWD, skb)``: a drop reason id, or None."""
    db = st.ns.xfrm
    sp = skb.sec_path
    pol = db.policy("fwd", info.src, info.dst, info.l4proto)
    if pol is None:
        if any(sa.mode != "transport" for sa in sp):
            return "xfrm-policy-check"  # XfrmInNoPols: decrypted in tunnel mode but no policy allows it
        return None
    if pol.action != "allow":
        return "xfrm-policy-check"  # XfrmInPolBlock
    for tmpl in pol.tmpls:  # xfrm_policy_ok: each template must be matched by a state of the sec_path
        if not any(sa.src == tmpl.src and sa.dst == tmpl.dst and sa.mode == tmpl.mode
                   and (not tmpl.reqid or sa.reqid == tmpl.reqid) for sa in sp):
            return "xfrm-policy-check"  # XfrmInTmplMismatch
    return None


def route_forward(kernel, st, skb, info, rt):
    """``xfrm4_route_forward`` → ``xfrm_lookup``: (route or bundle, drop reason or None)."""
    db = st.ns.xfrm
    pol = db.policy("out", info.src, info.dst, info.l4proto)
    if pol is None:
        return rt, None
    if pol.action != "allow":
        return rt, "xfrm-policy-block"
    if not pol.tmpls:
        return rt, None
    tmpl = pol.tmpls[0]
    sa = db.state_for(tmpl, info.src, info.dst)
    if sa is None:
        return rt, "xfrm-no-state"
    if sa.mode != "tunnel":
        return rt, "xfrm-no-state"  # transport mode is for local traffic between the SA's ends only
    under = st.route(sa.dst)
    if under.error or under.type == "local":
        return rt, "no-route"
    mtu = esp4_get_mtu(sa, st.route_mtu(under))
    return XfrmRoute(**attrs.asdict(under, recurse=False) | {"mtu": mtu}, sa=sa, policy=pol, route=under), None


# ----------------------------------------------------------------- output

def xfrm4_output(kernel, st, skb, info, nfc, rt: XfrmRoute, out_dev, in_dev=None) -> None:
    """``xfrm4_output``: POSTROUTING on the inner packet, then ``xfrm_output``."""
    info, why = nf_hook(kernel, st, "postrouting", skb, info, nfc, in_dev=in_dev, out_dev=out_dev, route=rt)
    if why is not None:
        kernel.drop(skb, why, f"{st.name} postrouting")
        return
    xfrm_output(kernel, st, skb, info, rt)


def xfrm_output(kernel, st, skb, info, rt: XfrmRoute) -> None:
    """``xfrm_output`` → ``xfrm4_tunnel_encap_add`` + ``esp_output``, then ``ip_local_out`` of the outer packet."""
    sa = rt.sa
    where = f"{st.name} xfrm output"
    if skb.gso_size:  # xfrm_output_gso: segment in software, then each segment through the transform
        for seg in gso_segment(kernel, skb, where) or ():
            xfrm_output(kernel, st, seg, parse_ip(seg.buf, seg.data), rt)
        return
    if info.version != 4:
        kernel.drop(skb, "xfrm-no-state", where, inner=f"IPv{info.version}")
        return
    key = (st.name, sa.dst, sa.spi)
    seq = kernel.xfrm_seq[key] = kernel.xfrm_seq[key] + 1  # xfrm_replay_overflow: one per packet
    inner = bytes(skb.buf[info.l3off:info.l3off + info.tot_len])
    body = esp.esp_output_tail(sa.esp_state, seq, inner, IPPROTO_IPIP)
    tos = inner[1] & 0xFC  # xfrm4_tunnel_encap_add: DSCP copied, ECN by INET_ECN_encapsulate
    ecn = inner[1] & 0x03
    # xfrm4_tunnel_encap_add → ip_select_ident(net, skb, NULL) → ip_select_ident_segs: no socket, so DF without
    # skb->ignore_df gets ID 0; otherwise __ip_select_ident (a per-namespace counter here)
    ident = 0 if info.df and not skb.ignore_df else st.next_ident()
    outer = build_ipv4(sa.src, sa.dst, IPPROTO_ESP, body, tos=tos | (ecn if ecn != 3 else 2), ident=ident, df=info.df)
    if kernel.tracing:
        kernel.trace(skb, where, "esp encapsulated", spi=hex(sa.spi), seq=seq, src=sa.src, dst=sa.dst)
    _AFINFO[AF_INET].local_out(kernel, st, new_skb(outer, skb.tag, skb.mark), route=rt.route)


def xfrm_output_fast(kernel, st, skb, dst: XfrmRoute) -> None:
    """The fast path's ``dst_output`` of an XFRM tuple: the same ``xfrm4_output`` (IPCB flags: FORWARDED)."""
    info = parse_ip(skb.buf, skb.data)
    if info is None:
        kernel.drop(skb, "ip-header-invalid", f"{st.name} xfrm output")
        return
    out_dev = st.ns.devices.get(dst.dev)
    xfrm4_output(kernel, st, skb, info, NfCtx(), dst, out_dev, st.ns.by_index.get(skb.iif))


# ----------------------------------------------------------------- input

def xfrm4_rcv(kernel, st, in_dev, skb, info) -> None:
    """``xfrm4_rcv`` → ``xfrm_input`` → ``esp_input``; tunnel mode re-receives the inner packet on *in_dev*."""
    where = f"{st.name} xfrm input"
    db = st.ns.xfrm
    end = info.l3off + info.tot_len
    payload = bytes(skb.buf[info.l4off:end])
    if db is None or len(payload) < esp.ESP_HEADER_LEN + esp.ICV_LEN:
        kernel.drop(skb, "xfrm-no-state", where)
        return
    spi = int.from_bytes(payload[:4], "big")
    sa = db.state_by_spi(info.dst, spi)
    if sa is None or sa.src != info.src:
        kernel.drop(skb, "xfrm-no-state", where, spi=hex(spi))  # XfrmInNoStates
        return
    res = esp.esp_input(sa.esp_state, payload)
    if res is None:
        kernel.drop(skb, "xfrm-decrypt-failed", where, spi=hex(spi))  # XfrmInStateProtoError
        return
    plain, nexthdr = res
    if sa.mode == "tunnel":
        if nexthdr != IPPROTO_IPIP:
            kernel.drop(skb, "xfrm-decrypt-failed", where, nexthdr=nexthdr)  # XfrmInStateModeError
            return
        inner = new_skb(plain, skb.tag, skb.mark)
        inner.protocol = ETH_P_IP
        inner.sec_path = secpath(skb) + (sa,)
        _mac_header_rebuild(skb, inner)
        if kernel.tracing:
            kernel.trace(skb, where, "esp decrypted", spi=hex(spi), seq=int.from_bytes(payload[4:8], "big"))
        netif_receive_skb(kernel, in_dev, inner)  # xfrm_input → netif_rx on skb->dev
        return
    # transport mode: the payload replaces the ESP part; deliver the result locally
    hdr = bytearray(skb.buf[info.l3off:info.l4off])
    hdr[9] = nexthdr
    packet = bytes(hdr) + plain
    new = new_skb(_fix_v4(packet), skb.tag, skb.mark)
    new.sec_path = secpath(skb) + (sa,)
    netif_receive_skb(kernel, in_dev, new)


def _mac_header_rebuild(outer, inner) -> None:
    """``skb_mac_header_rebuild`` (xfrm_input's tunnel-mode decapsulation, net/xfrm/xfrm_input.c): the received
    frame's link-layer header, moved in front of the inner packet with the inner protocol, so that the packet
    taps of the second receive on the same device show the addresses the ESP frame came with."""
    if outer.mac_header < 0 or outer.mac_header + 12 > len(outer.buf):
        return
    d = inner.data
    inner.buf[d - 14:d - 2] = outer.buf[outer.mac_header:outer.mac_header + 12]
    inner.buf[d - 2:d] = inner.protocol.to_bytes(2, "big")
    inner.mac_header = d - 14


def _fix_v4(packet: bytes) -> bytes:
    """Total length and header checksum of a rebuilt IPv4 packet."""
    buf = bytearray(packet)
    hlen = (buf[0] & 0x0F) * 4
    buf[2:4] = len(buf).to_bytes(2, "big")
    buf[10:12] = b"\0\0"
    buf[10:12] = internet_checksum(bytes(buf[:hlen])).to_bytes(2, "big")
    return bytes(buf)


def parse_network(text: str):
    """A selector prefix (``10.0.1.0/24``, an address alone is a host prefix)."""
    return ipaddress.ip_network(text, strict=False)
