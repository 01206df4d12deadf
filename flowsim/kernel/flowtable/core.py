"""Flow entries and their life cycle: ``nf_flow_table_core.c`` and ``nft_flow_offload.c``.

Theory of operation
-------------------
A :class:`Flowtable` is one ``struct nf_flowtable``: a hash table from
:class:`~flowsim.kernel.flowtable.tuple.FlowTuple` keys to the two :class:`FlowOffloadTuple`
halves of every :class:`FlowOffload` (one per connection; a torn-down flow
waiting for the GC stays in its bucket behind the connection's new one, as
``rhashtable_insert_fast`` leaves it), plus the
flowtable's flags (``counter``, ``offload``) and the statistics the report
shows.  The key/metadata split of ``struct flow_offload_tuple`` is kept: the
key is an immutable ``FlowTuple``; direction, xmit type, MTU, egress device,
MACs and route live beside it in ``FlowOffloadTuple``.

A flow is born in the forward chain, when ``flow add @ft`` runs
:func:`nft_flow_offload_eval` — the conditions of ``nft_flow_offload.c`` in order, then
``nft_flow_route`` (:mod:`flowsim.kernel.flowtable.path`), :func:`flow_offload_alloc`,
:func:`flow_offload_route_init` and :meth:`Flowtable.flow_offload_add`.  Every
refusal is recorded with a reason id (``flow-add-*`` rows of
:mod:`flowsim.reasons`) so ``flowsim explain`` can say what stopped it.

It lives while packets refresh it (:meth:`Flowtable.flow_offload_refresh`);
the garbage collector (:meth:`Flowtable.nf_flow_offload_work_gc`, every
second of virtual time) tears down expired flows and those whose conntrack
entry is dying, hands the connection back to conntrack
(``flow_offload_fixup_ct``) and removes them; flows still alive get their
conntrack timeout extended.  The per-packet fast path is in
:mod:`flowsim.kernel.flowtable.fastpath`.
"""

from __future__ import annotations

import array
import collections
import ipaddress
from collections.abc import Iterator, Mapping, Sequence
from typing import ClassVar, overload

import attrs

from flowsim.kernel.conntrack import (
    IP_CT_DIR_ORIGINAL, IP_CT_DIR_REPLY, IPS_CONFIRMED, IPS_DST_NAT, IPS_NAT_CLASH, IPS_NAT_MASK,
    IPS_OFFLOAD, IPS_SEQ_ADJUST, IPS_SRC_NAT, NF_CT_DAY, TCP_FIN, TCP_RST, CtEntry, flow_offload_ct_tcp,
    nf_conntrack_tcp_established,
)
from flowsim.kernel.devices.bridge import fdb_generation
from flowsim.kernel.fib import Route
from flowsim.kernel.flowtable.path import FlowtableRef, XmitType, nft_flow_route
from flowsim.kernel.flowtable.tuple import Encap, FlowTuple, Tunnel
from flowsim.kernel.headers import AF_INET, AF_INET6, ETH_P_IP, IPPROTO_GRE, IPPROTO_TCP, IPPROTO_UDP
from flowsim.kernel.skb import SkbCost
from flowsim.reasons import ACCEPT, STOLEN, reason

__all__ = [
    "NF_FLOWTABLE_HW_OFFLOAD", "NF_FLOWTABLE_COUNTER", "NF_FLOW_SNAT", "NF_FLOW_DNAT", "NF_FLOW_CLOSING",
    "NF_FLOW_TEARDOWN", "NF_FLOW_TIMEOUT", "FLOW_TIMEOUT_SYSCTLS", "FlowXmit", "FlowOffloadTuple", "FlowOffload", "Flowtable",
    "flow_offload_alloc", "flow_offload_route_init", "nft_flow_offload_eval", "offload_timeout",
]

NF_FLOWTABLE_HW_OFFLOAD = 0x1
NF_FLOWTABLE_COUNTER = 0x2

# enum nf_flow_flags (bit numbers)
NF_FLOW_SNAT = 0
NF_FLOW_DNAT = 1
NF_FLOW_CLOSING = 2
NF_FLOW_TEARDOWN = 3

NF_FLOW_TIMEOUT = 30.0  # seconds (30 * HZ)
#: flow_offload_get_timeout's per-protocol sysctls (net/netfilter/nf_flow_table_core.c)
FLOW_TIMEOUT_SYSCTLS = {IPPROTO_TCP: "net.netfilter.nf_flowtable_tcp_timeout",
                        IPPROTO_UDP: "net.netfilter.nf_flowtable_udp_timeout"}


def offload_timeout(ns, l4proto: int) -> float:
    """``flow_offload_get_timeout``: the per-protocol sysctl (30 s by default), else NF_FLOW_TIMEOUT."""
    key = FLOW_TIMEOUT_SYSCTLS.get(l4proto)
    if key is None:
        return NF_FLOW_TIMEOUT
    value = ns.sysctl(key) if hasattr(ns, "sysctl") else None
    if value is None:
        return NF_FLOW_TIMEOUT
    timeout = float(value)
    return _TIMEOUTS.setdefault(timeout, timeout)  # one float object per value, not one per flow


_TIMEOUTS: dict[float, float] = {}


#: address -> its 16-byte union: every flow of the same hosts shares the key's address bytes (issue 16: memory per
#: flow entry); a new one past _ADDR16_MAX starts the memo afresh
_ADDR16: dict = {}
_ADDR16_MAX = 65536


def _addr16(addr) -> bytes:
    packed = _ADDR16.get(addr)
    if packed is None:
        if len(_ADDR16) >= _ADDR16_MAX:
            _ADDR16.clear()
        packed = _ADDR16[addr] = ipaddress.ip_address(addr).packed.ljust(16, b"\0")
    return packed


@attrs.frozen(eq=False)
class FlowXmit:
    """What ``flow_offload_fill_route`` writes into ``struct flow_offload_tuple`` from the route: xmit type, MTU,
    the dst (``dst_cache``/``dst_cookie``) or the DIRECT xmit's ``out`` union (ifindex, MACs), and the ingress
    VLAN and GSO bits of the path.

    Immutable, and one object for every flow half that took the same route (:func:`_xmit_interned`): the
    kernel copies these fields into each flow; the simulator shares them (issue 16: memory per flow entry).
    Compared by identity (the memo decides what is the same route).
    """

    xmit_type: XmitType = XmitType.UNSPEC
    mtu: int = 0
    dst: Route | None = None  # dst_cache (NEIGH/XFRM: an XfrmRoute for XFRM; DIRECT too in ≤ 6.18)
    dst_cookie: int = 0  # IPv6: rt6_get_cookie (the fib6 node's serial); IPv4: the rtable's rt_genid
    ifidx: int = 0  # NEIGH/XFRM egress device
    out_ifidx: int = 0  # DIRECT egress device
    out_hw_ifidx: int = 0  # ≤ 6.18 DIRECT: the real device, for hardware offload only (software xmits on out_ifidx)
    h_source: str = "00:00:00:00:00:00"
    h_dest: str = "00:00:00:00:00:00"
    in_vlan_ingress: int = 0
    needs_gso_segment: bool = False


#: the route halves in use, one object per distinct value (see _dst_key); a new one past _ADDR16_MAX starts the
#: memo afresh
_XMITS: dict[tuple, FlowXmit] = {}
_NO_XMIT = FlowXmit()


def _dst_key(dst) -> object:
    """How the memo tells dst entries apart: by value where ``Fib.dst_check`` does — an IPv4 route (its check is
    the genid) and an IPv6 route the kernel derives from an address (rebuilt equal at every lookup); else by
    identity (an IPv6 static route, an xfrm bundle: the entry keeps the object, so its id is not reused)."""
    if dst.__class__ is Route and (dst.version == 4 or dst.proto == "kernel"):
        return dst
    return id(dst)


def _xmit_interned(*fields) -> FlowXmit:
    """The :class:`FlowXmit` of these field values (in field order), shared by every flow half that has them."""
    key = (*fields[:2], _dst_key(fields[2]), *fields[3:])
    xmit = _XMITS.get(key)
    if xmit is None:
        if len(_XMITS) >= _ADDR16_MAX:
            _XMITS.clear()
        xmit = _XMITS[key] = FlowXmit(*fields)
    return xmit


def _xmit_field(name: str) -> property:
    """A read-only view of a :class:`FlowXmit` field on the tuple (``th.mtu`` is ``th.xmit.mtu``)."""
    return property(lambda self: getattr(self.xmit, name), doc=f"``{name}`` of the tuple's route (FlowXmit)")


@attrs.define(slots=True, eq=False, weakref_slot=False)
class FlowOffloadTuple:
    """``struct flow_offload_tuple_rhash``: the key and the metadata after ``__hash``.

    This class is the ORIGINAL tuple, :class:`FlowOffloadReplyTuple` the REPLY one: ``dir`` is a class attribute,
    not a slot, and no ``__weakref__`` slot either, so a tuple takes 96 bytes, not 112 (issue 16: memory per
    flow entry).  :func:`flow_offload_tuple` makes the one of a direction.
    """

    dir: ClassVar[int] = IP_CT_DIR_ORIGINAL
    key: FlowTuple
    xmit: FlowXmit = _NO_XMIT  # the route's part, shared by the flows of one route (flow_offload_fill_route)
    dst_checked: int = -1  # simulator memo: the Fib.version at which dst_check last passed (no change since)
    flow: FlowOffload = attrs.field(kw_only=True)  # container_of(): the entry this half belongs to
    # the transmit plan the xmit switch answered last: (neighbour table version, egress device MAC, link-layer
    # addresses, egress device, its ifindex), kept while those hold (see fastpath.nf_flow_offload_hook)
    plan: tuple | None = None
    # simulator counters (the kernel keeps none per flow without the `counter` flag)
    packets: int = 0
    bytes: int = 0
    slow: dict | None = None  # reason -> packets that hit this tuple but left the fast path (created on first use)

    xmit_type = _xmit_field("xmit_type")
    mtu = _xmit_field("mtu")
    dst = _xmit_field("dst")
    dst_cookie = _xmit_field("dst_cookie")
    ifidx = _xmit_field("ifidx")
    out_ifidx = _xmit_field("out_ifidx")
    out_hw_ifidx = _xmit_field("out_hw_ifidx")
    h_source = _xmit_field("h_source")
    h_dest = _xmit_field("h_dest")
    in_vlan_ingress = _xmit_field("in_vlan_ingress")
    needs_gso_segment = _xmit_field("needs_gso_segment")

    @property
    def encap_num(self) -> int:
        return len(self.key.encap)

    def to_dict(self, ns=None) -> dict:
        def name(ifidx):
            dev = ns.by_index.get(ifidx) if ns is not None else None
            return dev.name if dev is not None else None
        d = {"dir": "original" if self.dir == IP_CT_DIR_ORIGINAL else "reply", "tuple": self.key.to_dict(),
             "iif": name(self.key.iifidx), "xmit_type": self.xmit_type.name.lower(), "mtu": self.mtu,
             "packets": self.packets, "bytes": self.bytes, "slowpath": dict(self.slow or {})}
        if self.xmit_type == XmitType.DIRECT:
            d.update(out_ifidx=self.out_ifidx, out_dev=name(self.out_ifidx), h_source=self.h_source,
                     h_dest=self.h_dest)
        else:
            d.update(ifidx=self.ifidx, out_dev=name(self.ifidx),
                     route=None if self.dst is None else str(self.dst))
        return d


@attrs.define(slots=True, eq=False, weakref_slot=False)
class FlowOffloadReplyTuple(FlowOffloadTuple):
    """The REPLY direction's :class:`FlowOffloadTuple`."""

    dir: ClassVar[int] = IP_CT_DIR_REPLY


def flow_offload_tuple(key: FlowTuple, d: int, flow: FlowOffload) -> FlowOffloadTuple:
    """The flow's tuple of direction *d* (``flow->tuplehash[d]``)."""
    cls = FlowOffloadTuple if d == IP_CT_DIR_ORIGINAL else FlowOffloadReplyTuple
    return cls(key=key, flow=flow)


@attrs.define(slots=True, eq=False)
class FlowOffload:
    """``struct flow_offload``: one connection's two directions."""

    tuplehash: tuple[FlowOffloadTuple, ...]  # (ORIGINAL, REPLY)
    ct: CtEntry
    flags: int = 0
    timeout: float = 0.0
    created: float = 0.0
    id: int = 0
    offload_timeout: float = NF_FLOW_TIMEOUT  # the protocol's sysctl, read when the flow is added

    def test(self, bit: int) -> bool:
        return bool(self.flags & (1 << bit))

    def set(self, bit: int) -> None:
        self.flags |= 1 << bit

    @property
    def state(self) -> str:
        if self.test(NF_FLOW_TEARDOWN):
            return "teardown"
        return "closing" if self.test(NF_FLOW_CLOSING) else "active"


def flow_offload_alloc(ct: CtEntry) -> FlowOffload | None:
    """``flow_offload_alloc``: both tuples from the conntrack tuples; NAT flags from the ct status.

    ``None`` when the ct is dying.  Ports only for TCP/UDP.  The key fields
    that come from the route (iifidx, encaps, tunnel) are filled by
    :func:`flow_offload_route_init`.
    """
    if ct.dying:
        return None
    flow = FlowOffload(tuplehash=(), ct=ct)
    halves = []
    for d in (IP_CT_DIR_ORIGINAL, IP_CT_DIR_REPLY):
        t = ct.tuplehash[d]
        ports = (t.sport, t.dport) if t.l4proto in (IPPROTO_TCP, IPPROTO_UDP) else (0, 0)
        l3 = AF_INET if t.l3proto == 2 else AF_INET6
        key = FlowTuple(_addr16(t.src), _addr16(t.dst), ports[0], ports[1], 0, l3, t.l4proto)
        halves.append(flow_offload_tuple(key, d, flow))
    flow.tuplehash = tuple(halves)
    if ct.status & IPS_SRC_NAT:
        flow.set(NF_FLOW_SNAT)
    if ct.status & IPS_DST_NAT:
        flow.set(NF_FLOW_DNAT)
    return flow


#: the tunnel keys in use, one object per tunnel shared by its flows (issue 16: memory per flow entry)
_TUNNELS: dict[Tunnel, Tunnel] = {}


def _tunnel_key(tun) -> Tunnel | None:
    if tun is None:
        return None
    key = Tunnel(_addr16(tun.src), _addr16(tun.dst), tun.l3_proto)
    if len(_TUNNELS) >= _ADDR16_MAX:
        _TUNNELS.clear()
    return _TUNNELS.setdefault(key, key)


def flow_offload_route_init(flow: FlowOffload, route, ns, profile) -> None:
    """``flow_offload_route_init`` → ``flow_offload_fill_route`` for ORIGINAL then REPLY (nf_flow_table_core.c)."""
    for d, half in enumerate(flow.tuplehash):
        rd = route.tuple[d]
        # the forwarding MTU of this direction's route (the underlay's for a tunnel direction)
        mtu = ns.fib.dst_mtu_maybe_forward(rd.dst) if rd.dst is not None else 0  # flow_offload_fill_route
        encaps = rd.in_encaps[:rd.in_num_encaps]
        # reversed: tuple.encap[0] is the outermost (bottom-most) header, as the packet shows it
        key_encap = tuple(Encap(e.id, e.proto) for e in reversed(encaps))
        vlan_ingress = 0
        for j in range(len(encaps)):
            if rd.in_ingress_vlans & (1 << j):
                vlan_ingress |= 1 << (len(encaps) - 1 - j)
        half.key = half.key._replace(iifidx=rd.in_ifindex, encap=key_encap,
                                     tun=_tunnel_key(rd.in_tun) if rd.in_num_tuns else None)
        dst, dst_cookie = None, 0
        ifidx = out_ifidx = out_hw_ifidx = 0
        h_source = h_dest = _NO_XMIT.h_source
        if rd.xmit_type == XmitType.DIRECT:
            h_dest, h_source = rd.out_h_dest, rd.out_h_source
            out_ifidx, out_hw_ifidx = rd.out_ifindex, rd.out_hw_ifindex
            if profile.encap_push_order == "legacy":
                dst = rd.dst  # ≤ 6.18 keeps the route for every xmit type
            elif profile.direct_tunnel_dst and route.tuple[1 - d].in_num_tuns:
                # 7.2: "if (route->tuple[!dir].in.num_tuns)" keeps dst_cache / dst_cookie for a DIRECT tuple that
                # pushes a tunnel (the push reads it); nf_flow_dst_check then checks it like a NEIGH tuple's
                dst = rd.dst
                dst_cookie = ns.fib.dst_cookie(rd.dst) if rd.dst is not None else 0
                half.dst_checked = ns.fib.version
        else:
            ifidx = rd.out_ifindex
            dst = rd.dst
            # flow_offload_dst_cookie: only NEIGH and XFRM tuples keep a dst to check (nf_flow_dst_check)
            dst_cookie = ns.fib.dst_cookie(rd.dst)
            half.dst_checked = ns.fib.version
        half.xmit = _xmit_interned(rd.xmit_type, mtu, dst, dst_cookie, ifidx, out_ifidx, out_hw_ifidx, h_source,
                                   h_dest, vlan_ingress, rd.out_needs_gso_segment)


class FlowHistory(Sequence):
    """The flowtable's events, ``(time, event, flow id, detail)`` in order: ``add``, ``teardown`` (the detail
    says why) and ``free``.

    A sequence of those tuples, stored as columns (an ``array`` of times, one of flow ids, one byte per
    event, the details only where there is one): a tuple per event cost 80 bytes, a row here 17
    (issue 16: memory per flow entry).
    """

    EVENTS = ("add", "teardown", "free")
    _CODE = {e: i for i, e in enumerate(EVENTS)}

    def __init__(self) -> None:
        self._times = array.array("d")
        self._ids = array.array("q")
        self._events = bytearray()
        self._details: dict[int, str] = {}

    def append(self, event: tuple[float, str, int, str]) -> None:
        now, what, flow_id, detail = event
        if detail:
            self._details[len(self._events)] = detail
        self._times.append(now)
        self._ids.append(flow_id)
        self._events.append(self._CODE[what])

    def __len__(self) -> int:
        return len(self._events)

    def _row(self, i: int) -> tuple[float, str, int, str]:
        return self._times[i], self.EVENTS[self._events[i]], self._ids[i], self._details.get(i, "")

    @overload
    def __getitem__(self, index: int) -> tuple[float, str, int, str]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[float, str, int, str]]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._row(i) for i in range(*index.indices(len(self)))]
        n = len(self)
        if not -n <= index < n:
            raise IndexError("flowtable history index out of range")
        return self._row(index % n)

    def __iter__(self) -> Iterator[tuple[float, str, int, str]]:
        return (self._row(i) for i in range(len(self)))

    def __repr__(self) -> str:
        return f"FlowHistory({list(self)!r})"


#: the failure details in use, one string per text ("TCP state SYN_SENT" for every connection refused on its
#: handshake); a new one past _ADDR16_MAX starts the memo afresh
_DETAILS: dict[str, str] = {}


def _detail_interned(detail: str) -> str:
    if not detail:
        return ""
    if len(_DETAILS) >= _ADDR16_MAX:
        _DETAILS.clear()
    return _DETAILS.setdefault(detail, detail)


class CtFailures(Mapping):
    """One connection's refused flow adds (``Flowtable.ct_failures``): reason id -> ``(count, first detail)``, in
    the order first seen.

    Almost every connection has one reason only (a TCP connection's handshake packets are refused as not yet
    established): that one lives in three slots of this object, the others in a dict created on the second
    reason.  A dict and a [count, detail] list per connection cost ~230 bytes, this 64 (issue 16: memory per
    connection).
    """

    __slots__ = ("rid", "count", "detail", "more")

    def __init__(self, rid: str, detail: str = "") -> None:
        self.rid = rid
        self.count = 1
        self.detail = detail
        self.more: dict[str, list] | None = None  # the other reasons: rid -> [count, first detail]

    def add(self, rid: str, detail: str = "") -> None:
        """One more refusal for *rid*; its detail is kept from the first one only."""
        if rid == self.rid:
            self.count += 1
            return
        more = self.more
        if more is None:
            more = self.more = {}
        entry = more.get(rid)
        if entry is None:
            more[rid] = [1, _detail_interned(detail)]
        else:
            entry[0] += 1

    def __getitem__(self, rid: str) -> tuple[int, str]:
        if rid == self.rid:
            return self.count, self.detail
        if self.more is not None and rid in self.more:
            count, detail = self.more[rid]
            return count, detail
        raise KeyError(rid)

    def __contains__(self, rid: object) -> bool:
        return rid == self.rid or (self.more is not None and rid in self.more)

    def __iter__(self) -> Iterator[str]:
        yield self.rid
        if self.more is not None:
            yield from self.more

    def __len__(self) -> int:
        return 1 + (len(self.more) if self.more is not None else 0)

    def __repr__(self) -> str:
        return f"CtFailures({dict(self.items())!r})"


@attrs.define(slots=True, eq=False)
class Flowtable:
    """``struct nf_flowtable`` of one namespace, with the simulator's statistics."""

    netns: str
    name: str
    family: str = "inet"
    devices: tuple = ()
    priority: int = 0
    flags: int = 0
    # the rhashtable, one bucket chain per key: FlowTuple -> the entry at the head of the chain (the newest, the one
    # rhashtable_lookup returns: flow_offload_lookup is .get) and FlowTuple -> the older entries, newest first
    table: dict = attrs.Factory(dict)
    shadowed: dict = attrs.Factory(dict)
    flows: dict = attrs.Factory(dict)  # id -> FlowOffload (for gc and reports)
    # statistics
    fastpath: int = 0
    slowpath: int = 0
    drops: int = 0
    reasons: collections.Counter = attrs.Factory(collections.Counter)
    flows_created: int = 0
    flows_removed: int = 0
    flow_add_failures: collections.Counter = attrs.Factory(collections.Counter)
    ct_failures: dict = attrs.Factory(dict)  # ct id -> CtFailures {reason id: (count, first detail)} of refused adds
    near_misses: dict = attrs.Factory(dict)  # (flow id, dir) -> (differing fields, count, first packet key)
    # a missing key -> (its live flow, dir) or None (fastpath._near_miss), until the next flow_offload_add
    miss_memo: dict = attrs.Factory(dict)
    by_ct: dict = attrs.Factory(dict)  # ct id -> its latest flow, kept after the flow is freed (for explain)
    kernel_bugs: list = attrs.Factory(list)
    gso_segmented: int = 0  # GSO skbs the fast path cut in software before an encap push (needs_gso_segment)
    gso_segments: int = 0  # the segments it sent for them
    cost: SkbCost = attrs.Factory(SkbCost)  # header access of the hook: copies, reallocations, pull bugs
    # (route device, destination key bytes, id(gateway), egress ifindex) -> (gateway, the NEIGH xmit's plan:
    # (neighbour table version, device MAC, link-layer addresses, device, ifindex)): the neighbour read, shared
    # by the tuples through one next hop while the table is unchanged
    neigh_cache: dict = attrs.Factory(dict)
    # nft_flow_route question -> (generations, conntrack entry, its tuples, route, detail) of a resolution that
    # failed (_path_failure)
    path_failures: dict = attrs.Factory(dict)
    history: FlowHistory = attrs.Factory(FlowHistory)  # (time, event, flow id, detail)
    # the hook's parse for the kernel's profile: (profile, its parser closure, the hook's protocol or 0 for inet)
    hook: tuple | None = None
    _next_id: int = 1
    _ip_ident: int = 0

    def next_ip_ident(self) -> int:
        """``__ip_select_ident`` for the outer headers this flowtable pushes (deterministic)."""
        self._ip_ident = (self._ip_ident + 1) & 0xFFFF
        return self._ip_ident

    @classmethod
    def from_nft(cls, netns: str, ft) -> Flowtable:
        """One per ``flowtable`` object of a namespace's ruleset (:class:`flowsim.nft.model.Flowtable`)."""
        return cls(netns=netns, name=ft.name, family=ft.family, devices=tuple(ft.devices),
                   priority=ft.priority, flags=ft.nf_flowtable_flags)

    @property
    def ref(self) -> FlowtableRef:
        return FlowtableRef(self.name, frozenset(self.devices), bool(self.flags & NF_FLOWTABLE_HW_OFFLOAD))

    # --- nf_flow_table_core.c --------------------------------------------------
    def flow_offload_add(self, flow: FlowOffload, now: float, ns) -> str | None:
        """``flow_offload_add``: timeout, insert both tuples, ct timeout to a day.  Reason id on failure.

        ``rhashtable_insert_fast`` on this plain (not unique-key) table checks
        no duplicate: an entry with the same key — the torn-down flow of the
        same connection, waiting for the GC — stays in the bucket behind the
        new one (:meth:`rhashtable_insert`).  It fails only on allocation, which
        the simulator never does: the result is always None.
        """
        flow.offload_timeout = offload_timeout(ns, flow.ct.l4proto)
        flow.timeout = now + flow.offload_timeout
        flow.id = self._next_id
        self._next_id += 1
        flow.created = now
        for half in flow.tuplehash:
            self.rhashtable_insert(half)
        if self.miss_memo:  # a key that had no flow near it may have one now
            self.miss_memo.clear()
        self.flows[flow.id] = flow
        self.by_ct[flow.ct.id] = flow
        flow.ct.timeout = now + NF_CT_DAY  # nf_ct_refresh(ct, NF_CT_DAY)
        self.flows_created += 1
        self.history.append((now, "add", flow.id, ""))
        return None

    def flow_offload_refresh(self, flow: FlowOffload, now: float, force: bool = False) -> None:
        """``flow_offload_refresh``: push the expiry forward, only by more than a second unless forced."""
        timeout = now + flow.offload_timeout
        if force or timeout - flow.timeout > 1.0:
            flow.timeout = timeout

    def flow_offload_teardown(self, flow: FlowOffload, kernel, ns_state, why: str) -> None:
        """``flow_offload_teardown``: clear IPS_OFFLOAD; the first time, set TEARDOWN and fix up the ct."""
        flow.ct.status &= ~IPS_OFFLOAD
        if flow.test(NF_FLOW_TEARDOWN):
            return
        flow.set(NF_FLOW_TEARDOWN)
        now = kernel.now
        expired = flow.timeout - now <= 0
        ns_state.conntrack.flow_offload_fixup_ct(
            flow.ct, now, closing=flow.test(NF_FLOW_CLOSING), flow_expired=expired,
            offload_timeout=offload_timeout(ns_state.ns, flow.ct.l4proto), mode=kernel.profile.fixup_ct_timeout)
        self.history.append((now, "teardown", flow.id, why))

    def nf_flow_offload_work_gc(self, kernel, ns_state) -> None:
        """``nf_flow_offload_gc_step`` (every second): tear down expired or dying flows (7.3, switch
        ``gc_dst_check``: also those whose route in either tuple is stale), free torn-down ones, extend the rest."""
        now = kernel.now
        gc_dst_check = kernel.profile.gc_dst_check
        fib = ns_state.ns.fib
        for flow in list(self.flows.values()):
            if flow.timeout - now <= 0 or flow.ct.dying:
                self.flow_offload_teardown(flow, kernel, ns_state, "expired" if flow.timeout - now <= 0 else "ct dying")
            elif gc_dst_check and any(h.dst is not None and h.dst_checked != fib.version
                                      and not fib.dst_check(h.dst, h.dst_cookie) for h in flow.tuplehash):
                # 7.3 nf_flow_offload_gc_step: nf_flow_dst_check of the ORIGINAL, then the REPLY tuple (a tuple
                # without dst_cache passes); the memo skips the check while the FIB has not changed
                self.flow_offload_teardown(flow, kernel, ns_state, "route obsolete (gc)")
            if flow.test(NF_FLOW_TEARDOWN):
                self._remove(flow, now)
            elif ns_state.conntrack.nf_flow_table_extend_ct_timeout(flow.ct, now, kernel.profile.ct_offload_timeout):
                kernel.trace(None, f"{ns_state.name} flowtable gc",
                             f"WARN_ON_ONCE in nf_flow_table_extend_ct_timeout: flow {flow.id}'s entry (IP protocol "
                             f"{flow.ct.l4proto}) now expires in a jiffy")

    def cleanup_dev(self, kernel, ns_state, ifindex: int) -> None:
        """``nf_flow_table_cleanup`` (NETDEV_DOWN): tear down flows whose iifidx is the device, then GC."""
        for flow in list(self.flows.values()):
            if any(h.key.iifidx == ifindex for h in flow.tuplehash):
                self.flow_offload_teardown(flow, kernel, ns_state, f"device {ifindex} down")
        self.nf_flow_offload_work_gc(kernel, ns_state)

    def rhashtable_insert(self, half: FlowOffloadTuple) -> None:
        """``rhashtable_insert_fast`` (``__rhashtable_insert_fast`` with no key): the entry goes in at the head of
        its bucket, before any entry with the same key (a rehash keeps their order)."""
        key = half.key
        old = self.table.get(key)
        if old is not None:
            self.shadowed.setdefault(key, []).insert(0, old)
        self.table[key] = half

    def rhashtable_remove(self, half: FlowOffloadTuple) -> None:
        """``rhashtable_remove_fast``: unlink this very entry; the next one of the same key, if any, moves up."""
        key = half.key
        older = self.shadowed.get(key)
        if self.table.get(key) is half:
            if older:
                self.table[key] = older.pop(0)
            else:
                del self.table[key]
        elif older is not None:
            older[:] = [h for h in older if h is not half]
        if older is not None and not older:
            del self.shadowed[key]

    def _remove(self, flow: FlowOffload, now: float) -> None:
        """``flow_offload_del``: both tuples out of the table, then the flow is freed."""
        for half in flow.tuplehash:
            self.rhashtable_remove(half)
        del self.flows[flow.id]
        self.flows_removed += 1
        self.history.append((now, "free", flow.id, ""))

    # --- statistics ----------------------------------------------------------------
    def count(self, verdict: str, rid: str | None) -> None:
        """One hook verdict: STOLEN (fast path), ACCEPT (slow path, with its reason) or DROP."""
        if verdict == STOLEN:
            self.fastpath += 1
            return
        if verdict == ACCEPT:
            self.slowpath += 1
        else:
            self.drops += 1
        if rid is not None:
            self.reasons[rid] += 1

    def record_failure(self, ct: CtEntry | None, rid: str, detail: str = "") -> None:
        counts = self.flow_add_failures
        if rid not in counts:  # only ids from the table, checked when first counted (a refused flow add
            reason(rid)        # is refused again for every packet of its connection)
        counts[rid] += 1
        if ct is not None:
            per = self.ct_failures.get(ct.id)
            if per is None:
                self.ct_failures[ct.id] = CtFailures(rid, _detail_interned(detail))
            else:
                per.add(rid, detail)

    def report(self, ns=None) -> dict:
        """The ``flowtables[]`` object of ``flowsim run --json``."""
        return {
            "netns": self.netns, "name": self.name, "family": self.family, "devices": list(self.devices),
            "flags": [f for bit, f in ((NF_FLOWTABLE_HW_OFFLOAD, "offload"), (NF_FLOWTABLE_COUNTER, "counter"))
                      if self.flags & bit],
            "fastpath": self.fastpath, "slowpath": self.slowpath, "drops": self.drops,
            "reasons": dict(sorted(self.reasons.items())),
            "flows_created": self.flows_created, "flows_removed": self.flows_removed,
            "flow_add_failures": dict(sorted(self.flow_add_failures.items())),
            "flows": [{"id": f.id, "state": f.state, "ct_id": f.ct.id, "created": f.created, "expires": f.timeout,
                       "original": f.tuplehash[0].to_dict(ns), "reply": f.tuplehash[1].to_dict(ns)}
                      for f in self.flows.values()],
            "kernel_bugs": list(self.kernel_bugs),
            "skb_cost": attrs.asdict(self.cost),
            "gso": {"segmented": self.gso_segmented, "segments": self.gso_segments},
        }


# --- memo of failed path resolutions ----------------------------------------------------

#: at most this many missing keys remembered for explain's near misses (fastpath._near_miss)
MISS_MEMO_MAX = 4096

#: at most this many remembered failures per flowtable (a new one past it starts the memo afresh)
PATH_FAILURES_MAX = 4096


def _path_gen(ns_state) -> tuple[int, int, int, int]:
    """Everything ``nft_flow_route`` reads that can change during a run, as generations: the namespace's run
    events (devices, addresses), the FIB (routes, ``rt_genid`` / fib6 serials), the neighbour table and the
    bridges' FDBs (``br_fill_forward_path``)."""
    ns = ns_state.ns
    return (ns_state.gen, ns.fib.version, ns.neigh.version, fdb_generation())


def _path_key(ct: CtEntry, ctdir: int, in_dev, route, mark: int) -> tuple:
    """What one ``nft_flow_route`` call is asked: the connection (its two directions' addresses after NAT: the
    entry checks that its tuples are the very ones it was made from), the packet's direction, ingress device,
    route (``this_dst``: the route object the stack's cache holds) and mark.  Identities, not addresses: no
    address hashing per packet."""
    return (id(ct), ctdir, in_dev.name, id(route), mark)


def _path_failure(ns_state, ft: Flowtable, ct: CtEntry, ctdir: int, in_dev, route, mark: int) -> str | None:
    """The detail of a failed ``nft_flow_route`` with the same question under the same generations, or None.

    In the kernel every packet of a connection whose ``flow add`` fails re-runs ``nft_flow_route`` (route
    back, neighbour, ``dev_fill_forward_path``) and fails again the same way while nothing changed; the
    simulator answers from the memo, and the caller counts the failure per packet as the kernel's refusal is.
    """
    hit = ft.path_failures.get(_path_key(ct, ctdir, in_dev, route, mark))
    if hit is None:
        return None
    gen, held, t0, t1, _route, detail = hit
    # NAT replaces a conntrack tuple (nf_conntrack_alter_reply): another tuple object is another question
    if held is not ct or t0 is not ct.tuplehash[0] or t1 is not ct.tuplehash[1] or gen != _path_gen(ns_state):
        return None
    return detail


def _remember_path_failure(ns_state, ft: Flowtable, ct: CtEntry, ctdir: int, in_dev, route, mark: int,
                           detail: str) -> None:
    memo = ft.path_failures
    if len(memo) >= PATH_FAILURES_MAX:
        memo.clear()
    # the connection and the route are kept with the entry: the ids in the key stay theirs
    memo[_path_key(ct, ctdir, in_dev, route, mark)] = (_path_gen(ns_state), ct, ct.tuplehash[0], ct.tuplehash[1],
                                                        route, detail)


# --- nft_flow_offload.c ------------------------------------------------------------

def _ipv4_has_options(skb) -> bool:
    if skb.protocol != ETH_P_IP:
        return False
    return (skb.buf[skb.network_header] & 0x0F) != 5


def nft_flow_offload_eval(kernel, ns_state, ft: Flowtable, *, skb, ct: CtEntry | None, ctdir: int | None,
                          in_dev, route, tcp_flags: int = 0) -> bool:
    """``nft_flow_offload_eval`` (net/netfilter/nft_flow_offload.c): its conditions in order; True when a flow
    was created.

    False is NFT_BREAK: the rest of the rule is not evaluated.  Each refusal
    is recorded on *ft* with its reason id (``flow-add-*``).
    """
    if skb.sec_path:  # decrypted by IPsec: the policy checks need the slow path
        ft.record_failure(ct, "flow-add-sec-path")
        return False
    if _ipv4_has_options(skb):
        ft.record_failure(ct, "flow-add-ip-options")
        return False
    if ct is None:
        ft.record_failure(None, "flow-add-no-conntrack")
        return False
    l4 = ct.tuplehash[IP_CT_DIR_ORIGINAL].l4proto
    if l4 == IPPROTO_TCP:
        if tcp_flags & (TCP_FIN | TCP_RST):
            ft.record_failure(ct, "flow-add-tcp-fin-rst")
            return False
        if not nf_conntrack_tcp_established(ct):
            ft.record_failure(ct, "flow-add-tcp-not-established", f"TCP state {ct.tcp_state.name}")
            return False
    elif l4 == IPPROTO_UDP:
        pass
    elif l4 == IPPROTO_GRE:
        orig = ct.tuplehash[IP_CT_DIR_ORIGINAL]
        if ct.status & IPS_NAT_MASK:
            ft.record_failure(ct, "flow-add-gre-nat")
            return False
        if orig.sport or orig.dport:  # "No support for GRE v1": PPTP's keys (gre_pkt_to_tuple)
            ft.record_failure(ct, "flow-add-gre-nat", f"GRE keys {orig.sport:#x}/{orig.dport:#x}")
            return False
    else:
        ft.record_failure(ct, "flow-add-l4proto", f"IP protocol {l4}")
        return False
    if ct.helper is not None or ct.status & (IPS_SEQ_ADJUST | IPS_NAT_CLASH):
        ft.record_failure(ct, "flow-add-helper", ct.helper or "seq-adjust/nat-clash")
        return False
    if not ct.status & IPS_CONFIRMED:
        ft.record_failure(ct, "flow-add-unconfirmed")
        return False
    if ct.status & IPS_OFFLOAD:  # test_and_set_bit(IPS_OFFLOAD_BIT)
        ft.record_failure(ct, "flow-add-already-offloaded")
        return False
    ct.status |= IPS_OFFLOAD
    ns = ns_state.ns
    assert ctdir is not None  # nf_ct_get gives the direction with the ct
    failed = _path_failure(ns_state, ft, ct, ctdir, in_dev, route, skb.mark)
    if failed is not None:  # the same resolution failed before and nothing it reads has changed since
        ct.status &= ~IPS_OFFLOAD
        ft.record_failure(ct, "flow-add-path", failed)
        return False
    fr = nft_flow_route(kernel.topo, ns_state.name, (ct.tuplehash[0], ct.tuplehash[1]), ctdir, in_dev,
                        ft.ref, kernel.profile, this_dst=route, mark=skb.mark)
    if fr.error is not None:
        ct.status &= ~IPS_OFFLOAD
        detail = str(fr.error)
        _remember_path_failure(ns_state, ft, ct, ctdir, in_dev, route, skb.mark, detail)
        ft.record_failure(ct, "flow-add-path", detail)
        return False
    flow = flow_offload_alloc(ct)
    if flow is None:
        ct.status &= ~IPS_OFFLOAD
        ft.record_failure(ct, "flow-add-ct-dying")
        return False
    flow_offload_route_init(flow, fr, ns, kernel.profile)
    if l4 == IPPROTO_TCP:
        flow_offload_ct_tcp(ct)
    failed = ft.flow_offload_add(flow, kernel.now, ns)
    if failed is not None:
        ct.status &= ~IPS_OFFLOAD
        ft.record_failure(ct, failed)
        return False
    kernel.trace(skb, "flow add", f"flow {flow.id} created in @{ft.name}",
                 original=str(flow.tuplehash[0].key), reply=str(flow.tuplehash[1].key))
    return True
