"""Netfilter for the slow path: nft base chains in priority order around the conntrack and NAT cores.

Theory of operation
-------------------
At an L3 hook the kernel runs one list of ``nf_hook_entries`` sorted by
priority.  nf_tables contributes base chains (:meth:`Nftables.hook_entries`);
conntrack and NAT contribute fixed entries.  :func:`nf_hook` merges them as
the kernel orders them:

========== ================================================================
hook       fixed entries (priority)
========== ================================================================
prerouting ``ipv4_conntrack_in`` (-200), NAT core ``nf_nat_ipv4_pre_routing`` (-100)
output     ``ipv4_conntrack_local`` (-200), NAT core (-100)
forward    —
input      NAT core (100), ``ipv4_confirm`` (last)
postrouting NAT core (100), ``ipv4_confirm`` (last)
========== ================================================================

Consecutive base chains are evaluated together (one ``eval_hook`` call
over those entries); the packet view (:class:`~flowsim.nft.ruleset.NftPacket`) is
rebuilt after every step that can change the packet.  The NAT core runs
the hook's ``type nat`` chains only for a connection whose NAT for this
manipulation is not yet set up, binds what they ask for (or the null
binding) with ``nf_nat_setup_info``, then rewrites the packet with
``nf_nat_packet`` — an ICMP error RELATED to a NATed connection gets its
quoted packet translated too (``nf_nat_icmp_reply_translation``), whether
conntrack found it from its quote or the stack attached the offender's entry
to an error it generated (:func:`nf_ct_attach`); such an error is never
bound to a NAT of its own (``nf_nat_ipv4_fn`` returns first).  The
simulator rewrites NATed connections at every NAT hook whether or not the
namespace registered a nat chain for that hook (modern kernels do the same
once any nat chain exists).

Statements' side effects are applied here: ``meta mark set`` to
``skb.mark``, ``ip[6] dscp set`` into the header (checksum updated),
``ct mark set`` is already on the entry.  ``flow add @ft`` calls
``flowtable.nft_flow_offload_eval`` with the route the stack chose.
"""

from __future__ import annotations

import ipaddress

import attrs

from flowsim.kernel.conntrack import (
    IP_CT_DIR_ORIGINAL, IP_CT_RELATED, IP_CT_RELATED_REPLY, IPS_DST_NAT, IPS_DST_NAT_DONE, IPS_NAT_MASK, IPS_SRC_NAT,
    IPS_SRC_NAT_DONE, CtEntry,
    CtTuple, NatRange, nf_nat_manip_pkt, nf_nat_packet, tcp_error, udp_error,
)
from flowsim.kernel.flowtable.core import nft_flow_offload_eval
from flowsim.kernel.headers import (
    GRE_HLEN, GRE_VERSION, GRE_VERSION_1, IPPROTO_GRE, IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP, RT_SCOPE_UNIVERSE,
    internet_checksum,
)
from flowsim.kernel.pkt import (
    PktInfo, ipv4_change_dsfield, ipv6_change_dsfield, l4_checksum, parse_ip, reparse_ip,
)
from flowsim.kernel.saddr import inet_select_addr, ipv6_dev_get_saddr
from flowsim.nft.model import RejectStmt
from flowsim.nft.ruleset import NftPacket

__all__ = ["NfCtx", "nf_hook", "nf_ct_attach", "ct_tuple", "quoted_info", "HOOK_CORE"]

_INF = float("inf")

#: fixed entries per hook: (priority, rank among equal priorities, action)
HOOK_CORE = {
    "prerouting": ((-200, 0, "ct_in"), (-100, 2, "nat")),
    "output": ((-200, 0, "ct_in"), (-100, 2, "nat")),
    "forward": (),
    "input": ((100, 2, "nat"), (_INF, 9, "confirm")),
    "postrouting": ((100, 2, "nat"), (_INF, 9, "confirm")),
}
_MANIP = {"prerouting": "dst", "output": "dst", "input": "src", "postrouting": "src"}
_DONE = {"src": IPS_SRC_NAT_DONE, "dst": IPS_DST_NAT_DONE}


@attrs.define(slots=True)
class NfCtx:
    """What conntrack attached to the packet in this namespace (``skb->_nfct`` + ctinfo)."""

    ct: CtEntry | None = None
    dir: int | None = None
    state: str | None = None
    ctinfo: int | None = None
    reject: RejectStmt | None = None  # the nft `reject` that dropped the packet at a hook


def nf_ct_attach(nfc: NfCtx | None) -> NfCtx:
    """``nf_ct_attach`` → ``nf_conntrack_attach`` (nf_conntrack_core.c): an ICMP error gets its offender's entry.

    ``icmp_glue_bits`` / ``icmpv6_getfrag`` call it for every error they
    build.  The error travels the other way: an offender in the ORIGINAL
    direction makes it RELATED_REPLY, one in the REPLY direction RELATED.
    An offender without an entry attaches nothing (``nf_ct_attach`` checks
    ``skb_nfct``): the error is then tracked from its quoted tuple at OUTPUT.
    """
    if nfc is None or nfc.ct is None or nfc.dir is None:
        return NfCtx()
    if nfc.dir == IP_CT_DIR_ORIGINAL:
        return NfCtx(nfc.ct, 1, "related", IP_CT_RELATED_REPLY)
    return NfCtx(nfc.ct, 0, "related", IP_CT_RELATED)


def ct_tuple(info: PktInfo, keys: tuple[int, int] = (0, 0)) -> CtTuple:
    """``nf_ct_get_tuple``: addresses, ports (ICMP echo: the id; GRE: *keys*, :func:`gre_pkt_to_tuple`),
    protocols; others keyed by address only."""
    sport, dport = (info.sport or keys[0], info.dport or keys[1]) if info.first else (0, 0)
    return CtTuple(info.src, info.dst, sport, dport, info.nfproto, info.l4proto)


GRE_PROTO_PPP = 0x880B  # include/net/pptp.h: what PPTP's enhanced GRE carries


def gre_pkt_to_tuple(buf, info: PktInfo) -> tuple[int, int] | None:
    """``gre_pkt_to_tuple`` (nf_conntrack_proto_gre.c): (source key, destination key) of a GRE packet, None where
    it gives no tuple.  Version 0 (or a header cut short) "behaves like nf_conntrack_proto_generic": keys 0.
    Version 1 (PPTP) carrying PPP: the destination key is its call ID, the source key ``gre_keymap_lookup``'s,
    0 here (flowsim models no PPTP helper to fill the keymap); carrying anything else: no tuple."""
    at, end = info.l4off, info.l3off + info.tot_len
    if at + GRE_HLEN > end or buf[at + 1] & GRE_VERSION != GRE_VERSION_1:
        return 0, 0
    if at + 8 > end:  # the PPTP header up to the call ID
        return 0, 0
    if (buf[at + 2] << 8) | buf[at + 3] != GRE_PROTO_PPP:
        return None
    return 0, (buf[at + 6] << 8) | buf[at + 7]


def quoted_info(buf, info: PktInfo) -> PktInfo | None:
    """The packet an ICMP error quotes (header and the first 8 bytes of its payload)."""
    at = info.l4off + 8
    end = info.l3off + info.tot_len
    if at + 20 > end:
        return None
    return parse_ip(buf, at, end, quoted=True)


#: the protocols whose packet handler checks the header first: l4proto -> tcp_error / udp_error
_L4_ERROR = {IPPROTO_TCP: tcp_error, IPPROTO_UDP: udp_error}


def _conntrack_in(kernel, st, skb, info: PktInfo, nfc: NfCtx) -> None:
    """``nf_conntrack_in``: attach the entry (creating an unconfirmed one) and its direction."""
    if nfc.ct is not None:
        return
    if info.frag and not info.first:
        # a later IPv6 fragment nf_ct_frag6_gather let on unreassembled: get_l4proto finds no L4 header, and
        # nf_conntrack_in accepts it without an entry (nft's ct state: invalid)
        return
    table = st.conntrack
    related_to = None
    keys = (0, 0)  # GRE's, where the ports would be
    if info.is_icmp_error:
        inner = quoted_info(skb.buf, info)
        if inner is None:
            nfc.state = "invalid"
            return
        # icmp_error_message: look up the inverted quoted tuple; its direction is the error's
        hit = table.lookup(ct_tuple(inner).invert(), kernel.now)
        if hit is None:
            nfc.state = "invalid"
            return
        ct, d = hit
        related_to = ct.tuplehash[1 - d]  # what nf_conntrack_in inverts back to direction d
    elif info.l4proto == IPPROTO_GRE:
        gre_keys = gre_pkt_to_tuple(skb.buf, info)
        if gre_keys is None:  # resolve_normal_ct: "Can't get tuple", the packet goes on without an entry
            nfc.state = "invalid"
            kernel.trace(skb, f"{st.name} conntrack", "invalid: GRE version 1 without PPP (gre_pkt_to_tuple)")
            return
        keys = gre_keys
    elif info.l4proto in _L4_ERROR:
        # nf_conntrack_tcp_packet / nf_conntrack_udp_packet refuse a malformed header first (-NF_ACCEPT): the
        # packet goes on without an entry and nothing is counted (nor created: its unconfirmed entry is freed)
        problem = _L4_ERROR[info.l4proto](skb.buf, info.l4off, info.l3off + info.tot_len - info.l4off)
        if problem is not None:
            nfc.state = "invalid"
            kernel.trace(skb, f"{st.name} conntrack", f"invalid: {problem}")
            return
    res = table.nf_conntrack_in(ct_tuple(info, keys), kernel.now, tcp_flags=info.tcp_flags or 0, length=info.tot_len,
                                icmp_type=info.icmp_type, related_to=related_to)
    nfc.ct, nfc.dir, nfc.state, nfc.ctinfo = res.entry, res.dir, res.state, res.ctinfo


def nf_nat_masquerade_saddr(st, out_dev, nexthop, info: PktInfo):
    """The address ``masquerade`` translates to: ``nf_nat_masquerade_ipv4``'s ``inet_select_addr(out, nh,
    RT_SCOPE_UNIVERSE)`` (the next hop's subnet first), ``nf_nat_masquerade_ipv6``'s ``ipv6_dev_get_saddr(out,
    daddr)`` (net/netfilter/nf_nat_masquerade.c); None where the kernel drops ("ate my IP address")."""
    if info.version == 4:
        return inet_select_addr(st.ns, out_dev, nexthop, RT_SCOPE_UNIVERSE)
    return ipv6_dev_get_saddr(st.ns, out_dev, info.dst)


def _nat_core(kernel, st, hook: str, skb, info: PktInfo, nfc: NfCtx, res, out_dev, route) -> PktInfo | None:
    """Bind NAT if the nat chains ran (``nf_nat_inet_fn``), then rewrite the packet (``nf_nat_packet``); None
    when ``masquerade`` has no address to translate to (NF_DROP)."""
    ct, d = nfc.ct, nfc.dir
    if ct is None or d is None:  # conntrack sets both or neither (_conntrack_in)
        return info
    if nfc.ctinfo in (IP_CT_RELATED, IP_CT_RELATED_REPLY) and info.is_icmp_error:
        # nf_nat_ipv4_fn / nf_nat_ipv6_fn: a RELATED ICMP error is translated, never bound (no nat chains)
        if ct.status & IPS_NAT_MASK and nf_nat_icmp_reply_translation(ct, d, hook, skb.buf, info):
            info = reparse_ip(skb.buf, info.l3off)
            kernel.trace(skb, f"{st.name} {hook}", "NAT rewrite", src=info.src, dst=info.dst, sport=info.sport,
                         dport=info.dport)
        return info
    manip = _MANIP[hook]
    if res is not None and res.nat_manip is not None and not ct.status & _DONE[manip]:
        rng = None
        if res.nat is not None:
            addr = None
            if res.nat.kind == "masquerade":
                nexthop = route.nexthop(info.dst) if route is not None else None
                addr = nf_nat_masquerade_saddr(st, out_dev, nexthop, info) if out_dev is not None else None
                if addr is None:
                    return None
            elif res.nat.kind == "redirect" and skb is not None:
                addr = info.dst
            rng = NatRange.from_request(res.nat, addr=addr)
        st.conntrack.nf_nat_setup_info(ct, manip, rng)
        kernel.trace(skb, f"{st.name} {hook}", f"NAT {manip} bound", ct=ct.id,
                     reply=_endpoints(ct.tuplehash[1]))
    if not ct.status & IPS_NAT_MASK:
        return info
    changed = nf_nat_packet(ct, d, hook, skb.buf, info.l3off)
    if changed:
        info = reparse_ip(skb.buf, info.l3off)
        kernel.trace(skb, f"{st.name} {hook}", "NAT rewrite", src=info.src, dst=info.dst, sport=info.sport,
                     dport=info.dport)
    return info


def nf_nat_icmp_reply_translation(ct: CtEntry, dir: int, hook: str, buf: bytearray, info: PktInfo) -> bool:
    """Translate an ICMP error about a NATed connection: the quoted packet back, then the outer header.

    The quoted packet gets the *opposite* manipulation towards the tuple of
    the other direction; the outer header the hook's own; the ICMP checksum
    is recomputed over the whole message.
    """
    manip = _MANIP[hook]
    statusbit = IPS_SRC_NAT if manip == "src" else IPS_DST_NAT
    if dir == 1:
        statusbit ^= IPS_NAT_MASK
    if not ct.status & statusbit:
        return False
    inner_off = info.l4off + 8
    other = ct.tuplehash[1 - dir]
    nf_nat_manip_pkt(buf, inner_off, "dst" if manip == "src" else "src", other)
    nf_nat_manip_pkt(buf, info.l3off, manip, other.invert())
    end = info.l3off + info.tot_len
    at = info.l4off
    buf[at + 2:at + 4] = b"\0\0"
    if info.version == 4:
        check = internet_checksum(buf[at:end])
    else:
        o = reparse_ip(buf, info.l3off)
        check = l4_checksum(o.src, o.dst, IPPROTO_ICMPV6, buf[at:end])
    buf[at + 2:at + 4] = check.to_bytes(2, "big")
    return True


def _set_dscp(buf: bytearray, info: PktInfo, dscp: int) -> PktInfo:
    if info.version == 4:
        ipv4_change_dsfield(buf, info.l3off, dscp)
    else:
        ipv6_change_dsfield(buf, info.l3off, dscp)
    info.dscp = dscp
    return info


def _packet(skb, info: PktInfo, nfc: NfCtx, in_dev, out_dev) -> NftPacket:
    return NftPacket(
        nfproto=info.nfproto, l4proto=info.l4proto, saddr=info.src, daddr=info.dst, sport=info.sport,
        dport=info.dport, dscp=info.dscp, ttl=info.ttl,
        iif=None if in_dev is None else in_dev.name, iifindex=None if in_dev is None else in_dev.ifindex,
        oif=None if out_dev is None else out_dev.name, oifindex=None if out_dev is None else out_dev.ifindex,
        mark=skb.mark, length=info.tot_len, tcp_flags=info.tcp_flags, icmp_type=info.icmp_type,
        icmp_code=info.icmp_code, ct=nfc.ct, ct_state=nfc.state,
        ct_dir=nfc.dir)


def _steps(st, hook: str, nfproto: int) -> list:
    """The hook's entries merged with the fixed conntrack/NAT entries, in kernel order (cached per namespace)."""
    key = ("steps", hook, nfproto)
    cached = st.hook_cache.get(key)
    if cached is not None:
        return cached
    steps = []
    if st.nft is not None:
        for e in st.nft.hook_entries(hook, nfproto=nfproto):
            nat = e.chain is not None and e.chain.hook.type == "nat"
            steps.append((e.priority, 1 if nat else 3, "nat-chain" if nat else "chain", e))
    if st.ct_active:
        steps += [(p, r, a, None) for p, r, a in HOOK_CORE[hook]]
    steps.sort(key=lambda s: (s[0], s[1]))
    st.hook_cache[key] = steps
    return steps


def nf_hook(kernel, st, hook: str, skb, info: PktInfo, nfc: NfCtx, in_dev=None, out_dev=None,
            route=None) -> tuple[PktInfo, str | None]:
    """``NF_HOOK`` at an L3 hook: returns the (possibly rewritten) packet view and a drop reason or None."""
    if st.nft is None and not st.ct_active:  # nothing registered at any L3 hook of this namespace
        return info, None
    steps = _steps(st, hook, info.nfproto)
    if not steps:
        return info, None
    i, n = 0, len(steps)
    nat_res = None
    while i < n:
        prio, rank, action, entry = steps[i]
        if action in ("chain", "nat-chain"):
            group = [entry]
            j = i + 1
            while j < n and steps[j][2] == action:
                group.append(steps[j][3])
                j += 1
            i = j
            res = _eval(kernel, st, hook, skb, info, nfc, in_dev, out_dev, route, tuple(group))
            if action == "nat-chain":
                nat_res = res
            if res.verdict == "drop":
                if res.reject is None:
                    return info, "nft-drop"
                nfc.reject = res.reject  # the caller sends the reply (flowsim.kernel.stack.ip.nft_reject)
                return info, "nft-reject"
            if res.meta_mark != skb.mark:
                skb.mark = res.meta_mark
            if res.dscp is not None and res.dscp != info.dscp:
                info = _set_dscp(skb.buf, info, res.dscp)
            continue
        i += 1
        if action == "ct_in":
            _conntrack_in(kernel, st, skb, info, nfc)
        elif action == "nat":
            nat_info = _nat_core(kernel, st, hook, skb, info, nfc, nat_res, out_dev, route)
            if nat_info is None:
                return info, "masquerade-no-address"
            info = nat_info
        elif action == "confirm":
            ct = nfc.ct
            # __nf_conntrack_confirm: only the ORIGINAL direction confirms ("we refuse to set up related
            # connections for unconfirmed conns": an ICMP error attached to an unconfirmed entry leaves it so)
            if ct is not None and not ct.confirmed and nfc.dir == IP_CT_DIR_ORIGINAL \
                    and not st.conntrack.nf_conntrack_confirm(ct, kernel.now):
                return info, "ct-clash"
    return info, None


def _eval(kernel, st, hook, skb, info, nfc, in_dev, out_dev, route, entries):
    """``nft_do_chain`` over consecutive base chains; ``flow add`` (forward only) runs nft_flow_offload_eval."""
    pkt = _packet(skb, info, nfc, in_dev, out_dev)

    def on_flow_add(ft_model, _pkt):
        ft = st.ft_by_key.get((ft_model.family, ft_model.table, ft_model.name))
        if ft is None or not kernel.flowtables_enabled:
            kernel.trace(skb, f"{st.name} forward", f"flow add @{ft_model.name}: flowtables disabled")
            return False
        return nft_flow_offload_eval(
            kernel, st, ft, skb=skb, ct=nfc.ct, ctdir=nfc.dir, in_dev=in_dev, route=route,
            tcp_flags=info.tcp_flags or 0)

    res = st.nft.eval_hook(hook, pkt, on_flow_add=on_flow_add if hook == "forward" else None, entries=entries)
    if kernel.tracing:
        for step in res.trace:
            kernel.trace(skb, f"{st.name} {hook}", str(step))
    return res


def _endpoints(t) -> str:
    """A conntrack tuple's endpoints for the trace, IPv6 as ``[addr]:port``."""
    def ep(addr, port):
        return f"[{addr}]:{port}" if addr.version == 6 else f"{addr}:{port}"
    return f"{ep(t.src, t.sport)}->{ep(t.dst, t.dport)}"


# ----------------------------------------------------------------- nft fib (net/ipv4/netfilter/nft_fib_ipv4.c,
# net/ipv6/netfilter/nft_fib_ipv6.c): the namespace's answer to a `fib` expression

#: include/uapi/linux/rtnetlink.h's route types, as a fib `type` result; a route type flowsim names -> its number
RTN_UNSPEC, RTN_UNICAST, RTN_LOCAL, RTN_BROADCAST, RTN_ANYCAST, RTN_MULTICAST = 0, 1, 2, 3, 4, 5
RTN_BLACKHOLE, RTN_UNREACHABLE, RTN_PROHIBIT = 6, 7, 8
_RTN = {"unicast": RTN_UNICAST, "local": RTN_LOCAL, "blackhole": RTN_BLACKHOLE, "unreachable": RTN_UNREACHABLE,
        "prohibit": RTN_PROHIBIT, "none": RTN_UNREACHABLE}
_LIMITED_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
_LOCAL_MULTICAST = ipaddress.IPv4Network("224.0.0.0/24")  # ipv4_is_local_multicast


def nft_fib_eval(st, key: str, pkt, hook: str):
    """The namespace's answer to ``fib`` *key* for *pkt* at *hook*: ``nft_fib4_eval`` / ``nft_fib6_eval`` (the
    device found, ``(name, ifindex)``, or None) or their ``_type`` variants (an RTN_* number).  Not modelled:
    l3mdev (VRF) tables, policy routing (``mark`` is read by no rule of a single-table FIB), multipath."""
    words = key.split()
    flags = set(words[:-1])
    addr = pkt.daddr if "daddr" in flags else pkt.saddr
    dev = _dev(st, pkt.iif) if "iif" in flags else _dev(st, pkt.oif) if "oif" in flags else None
    if words[-1] == "type":
        return _fib_type4(st, addr, dev) if pkt.nfproto == 2 else _fib_type6(st, addr, dev)
    return _fib_oif(st, flags, pkt, hook, addr, dev)


def _dev(st, name: str | None):
    return st.ns.devices.get(name) if name is not None else None


def _found(dev) -> tuple[str, int] | None:
    """``nft_fib_store_result``'s device: its name and ifindex, or None."""
    return (dev.name, dev.ifindex) if dev is not None else None


def _fib_oif(st, flags: set, pkt, hook: str, addr, oif):
    """``nft_fib4_eval`` / ``nft_fib6_eval``: the device the route to *addr* leaves by; with the iif or oif flag, that
    device only if the route uses it.  No route, a local one or a reject route: none."""
    in_dev = _dev(st, pkt.iif)
    # nft_fib_can_skip: at prerouting or input, a packet that came in on loopback answers with its device
    if hook in ("prerouting", "input") and in_dev is not None and in_dev.link_type == "loopback":
        return _found(in_dev)
    if pkt.nfproto == 2:
        # a source 0.0.0.0 to a broadcast or link-local multicast address (DHCP): the receiving device
        if int(pkt.saddr) == 0 and (pkt.daddr == _LIMITED_BROADCAST or pkt.daddr in _LOCAL_MULTICAST):
            return _found(in_dev)
    elif pkt.l4proto == IPPROTO_ICMPV6 and pkt.saddr.is_unspecified and pkt.daddr.is_link_local:
        return _found(in_dev)  # nft_fib_v6_skip_icmpv6 (DAD)
    route = st.ns.fib.lookup(addr)
    if route.type != "unicast":  # RTN_LOCAL ("should not see"), RTF_LOCAL, a reject route, or no route: none
        return None
    if oif is None:
        return _found(_dev(st, route.dev))
    return _found(oif) if route.dev == oif.name else None  # fib_info_nh_uses_dev


def _fib_type4(st, addr, dev) -> int:
    """``nft_fib4_eval_type``: ``inet_dev_addr_type`` (with the iif or oif flag) or ``inet_addr_type_dev_table``."""
    if int(addr) == 0 or addr == _LIMITED_BROADCAST:
        return RTN_BROADCAST
    if addr.is_multicast:
        return RTN_MULTICAST
    for rt in st.ns.fib.local(4):  # the local table only (a host route per address; lo owns 127.0.0.0/8): a lookup
        if addr in rt.prefix:      # of the main table too would mark its routes accessed, which the kernel's does not
            return RTN_LOCAL if dev is None or dev.name == rt.dev else RTN_UNICAST
    return RTN_UNICAST


def _fib_type6(st, addr, dev) -> int:
    """``__nft_fib6_eval_type``: local on the iif or oif (``nf_ipv6_chk_addr``), a reject route's type, the
    subnet-router anycast address of a connected prefix, a local route without a device, else by address type."""
    ret = RTN_LOCAL if dev is not None and any(a.ip == addr for a in dev.addresses(6)) else RTN_UNSPEC
    if addr.is_multicast:  # every IPv6 device has ff00::/8 (addrconf_add_mroute), which flowsim's FIB leaves out
        return ret or RTN_MULTICAST
    route = st.ns.fib.lookup(addr)
    if route.type not in ("unicast", "local"):
        return _RTN[route.type]
    if route.type == "unicast" and route.gateway is None and route.prefix.prefixlen < 127 \
            and route.prefix.network_address == addr:
        ret = RTN_ANYCAST  # __ipv6_anycast_destination
    elif dev is None and route.type == "local":
        ret = RTN_LOCAL
    if ret:
        return ret
    return RTN_UNSPEC if addr.is_unspecified else RTN_UNICAST
