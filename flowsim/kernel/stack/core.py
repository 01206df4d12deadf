"""The simulated kernel: devices, netfilter, routing and transmit across namespaces (the slow path).

Theory of operation
-------------------
:class:`Kernel` implements :class:`flowsim.kernel.api.Kernel` for a whole
:class:`~flowsim.config.topology.Topology`.  Each namespace gets a
:class:`NetnsState` (:class:`flowsim.kernel.api.NetnsState`): its
:class:`~flowsim.kernel.conntrack.ConntrackTable`, its
:class:`~flowsim.nft.ruleset.Nftables` (parsed from the namespace's ruleset with
the file and line it came from), one :class:`flowsim.kernel.flowtable.core.Flowtable`
per ``flowtable`` object, a route cache, the IPv4 reassembly queues and
the sockets of the simulated endpoints.

A packet is an :class:`~flowsim.kernel.skb.SkBuff` whose ``tag`` is a
:class:`PacketTag`.  Its life is a chain of calls that mirror the kernel's
functions, split by layer:

* :mod:`flowsim.kernel.stack.l2` — ``__netif_receive_skb_core`` (netdev ingress
  hook with nft chains and flowtables, ``vlan_do_receive`` and "another
  round", bridge rx ``br_handle_frame``, PPPoE ``pppoe_rcv``) and every
  device's transmit (veth/NIC to the peer, VLAN tag, bridge forwarding
  with VLAN filtering, PPPoE header, DSA user ports, tunnels);
* :mod:`flowsim.kernel.stack.ip` — ``ip_rcv`` / ``ipv6_rcv``, PREROUTING, the
  routing decision, ``ip_forward`` (TTL, MTU, FORWARD with ``flow add``),
  POSTROUTING, fragmentation, ``ip_finish_output2``, local delivery and
  output, tunnel encapsulation and decapsulation, ICMP errors;
* :mod:`flowsim.kernel.stack.nf` — the netfilter hooks: nft base chains in
  priority order around the conntrack and NAT cores, NAT bindings and
  packet mangling (including ICMP errors about NATed connections).

Frames between namespaces travel on the :attr:`Kernel.schedule` clock
(``flowsim.sim.simulation`` runs the event queue; without one, delivery is immediate).
Every packet ends in exactly one of: delivered to an endpoint
(:meth:`Kernel.deliver`), dropped with a reason id from
:mod:`flowsim.reasons` (:meth:`Kernel.drop`), or still in flight; the
:class:`Ledger` keeps the books and :meth:`Ledger.check` proves they add up.

The stack depends on the flowtable, never the other way round: it imports
:mod:`flowsim.kernel.flowtable` and calls it where the kernel does — at the
netdev ingress hook (:func:`flowsim.kernel.flowtable.fastpath.nf_flow_offload_hook`,
the function ``nf_flow_table_offload`` registers with ``nf_register_net_hook``
for each device of a flowtable; :mod:`flowsim.kernel.stack.l2` runs it in the
hook's priority order), from ``flow add``
(:func:`flowsim.kernel.flowtable.core.nft_flow_offload_eval`, in
:mod:`flowsim.kernel.stack.nf`) and by the GC tick of the simulation
(:meth:`Kernel.gc`).  The flowtable calls back only through the services
:class:`flowsim.kernel.api.Kernel` names, which :class:`Kernel` provides
(mypy checks it: see :func:`_implements_api`).  With ``flowtables=False``
the flowtable entries of the ingress hook are skipped and ``flow add``
answers NFT_BREAK: the pure slow path.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import attrs

from flowsim.kernel import api as kernel_api
from flowsim.kernel.conntrack import CT_TCP_LOOSE_SYSCTL, ConntrackTable, CtTimeouts
from flowsim.kernel.fib import Route
from flowsim.kernel.icmp_limit import IcmpRateLimits
from flowsim.kernel.flowtable.core import Flowtable
from flowsim.kernel.pkt import new_skb
from flowsim.kernel.skb import SkBuff
from flowsim.kernel.stack import ip as stack_ip
from flowsim.kernel.stack import l2 as stack_l2
from flowsim.kernel.stack import nf as stack_nf
from flowsim.kernel.stack import xfrm as stack_xfrm
from flowsim.nft.ruleset import Nftables, nft_flowtable_hook_devices, parse_ruleset
from flowsim.profiles import Profile, get_profile
from flowsim.reasons import reason

__all__ = ["Kernel", "NetnsState", "PacketTag", "Ledger", "TraceRecord", "LINK_DELAY", "ORIGIN_HOST",
           "ORIGIN_STACK"]

LINK_DELAY = 20e-6  # seconds a frame takes across a veth pair or cable
ORIGIN_HOST = "host"  # sent by a traffic endpoint
ORIGIN_STACK = "stack"  # made by the simulated kernel (ICMP errors)


@attrs.define(slots=True, eq=False, init=False, weakref_slot=False)
class PacketTag:
    """The simulator's label on a packet (``skb.tag``): whose it is, and what became of it.

    ``pieces`` counts the skbs alive for this packet (fragments, flooded
    copies); ``state`` is ``live``, ``delivered`` or ``dropped``.

    Eight slots (a run whose connections all start at once holds two tags per connection, issue 16):
    ``key`` is (traffic, direction, origin), what the ledger counts the packet under, one tuple shared by
    every packet with that key; ``drop`` is (reason, where) of the first drop of any piece.
    """

    key: tuple[str | None, str | None, str]
    seq: int
    kind: str  # syn, synack, ack, data, fin, rst, udp, icmp-error …
    flow: int  # which flow of a traffic table with several
    pieces: int
    state: str
    drop: tuple[str, str] | None
    # the length of the zero payload its sending host put at the packet's end: a frame on the wire is kept
    # without it when it still ends with it (flowsim.kernel.skb.frame_on_wire checks the claim)
    zeros: int

    def __init__(self, traffic: str | None, direction: str | None, seq: int, kind: str = "data",
                 origin: str = ORIGIN_HOST, flow: int = 0) -> None:
        key = (traffic, direction, origin)
        self.__attrs_init__(_TAG_KEYS.setdefault(key, key), seq, kind, flow, 1, "live", None, 0)

    @property
    def traffic(self) -> str | None:
        return self.key[0]

    @property
    def direction(self) -> str | None:  # "original" | "reply"
        return self.key[1]

    @property
    def origin(self) -> str:
        return self.key[2]

    @property
    def reason(self) -> str | None:
        """First drop reason of any piece."""
        return None if self.drop is None else self.drop[0]

    @property
    def where(self) -> str | None:
        """Namespace/device of that drop."""
        return None if self.drop is None else self.drop[1]

    def __str__(self) -> str:
        traffic, direction, _origin = self.key
        flow = f"[{self.flow}]" if self.flow else ""
        return f"{traffic or '-'}{flow}/{direction or '-'}#{self.seq}:{self.kind}"


#: PacketTag.key's tuples, one per (traffic, direction, origin) (a few per traffic table)
_TAG_KEYS: dict[tuple[str | None, str | None, str], tuple[str | None, str | None, str]] = {}


class Ledger:
    """Packet conservation: injected = delivered + dropped (by reason) + in flight."""

    def __init__(self) -> None:
        self.injected: collections.Counter[str] = collections.Counter()  # origin -> n
        self.delivered: collections.Counter[str] = collections.Counter()  # origin -> n
        self.dropped: collections.Counter[str] = collections.Counter()  # reason -> n
        # how many packets are in flight; they are found where they wait (Simulation.pending: the event queue,
        # the reassembly queues), not in an index of their own (issue 16: a run holds two per connection)
        self.in_flight = 0
        # per traffic: (name, direction, origin) -> Counter(sent, delivered, dropped)
        self.per_traffic: collections.defaultdict[tuple[str | None, str | None, str], collections.Counter[str]] = \
            collections.defaultdict(collections.Counter)
        # (time, tag, reason, where) of the first drops, for reports
        self.drop_log: list[tuple[float, str, str | None, str | None]] = []
        self.all_tags: list[PacketTag] | None = None  # every packet in injection order, when kept (tracing)

    def inject(self, tag: PacketTag) -> None:
        if self.all_tags is not None:
            self.all_tags.append(tag)
        self.injected[tag.origin] += 1
        self.in_flight += 1
        self.per_traffic[tag.key]["sent"] += 1

    def add_pieces(self, tag: PacketTag, n: int) -> None:
        """*n* more skbs now carry this packet (fragmentation, flooding)."""
        tag.pieces += n

    def merge_pieces(self, tag: PacketTag, n: int) -> None:
        """*n* skbs became one (reassembly)."""
        tag.pieces -= n - 1

    def deliver(self, tag: PacketTag) -> bool:
        """One piece reached its endpoint; the first makes the packet delivered."""
        tag.pieces -= 1
        if tag.state != "live":
            return False
        tag.state = "delivered"
        self.delivered[tag.origin] += 1
        self.in_flight -= 1
        self.per_traffic[tag.key]["delivered"] += 1
        return True

    def drop(self, tag: PacketTag, rid: str, where: str, now: float) -> bool:
        """One piece was dropped; the packet counts as dropped when no piece is left."""
        tag.pieces -= 1
        if tag.drop is None:
            tag.drop = (rid, where)
        if tag.state != "live" or tag.pieces > 0:
            return False
        tag.state = "dropped"
        first, at = tag.drop
        self.dropped[first] += 1
        self.in_flight -= 1
        self.per_traffic[tag.key]["dropped"] += 1
        if len(self.drop_log) < 1000:
            self.drop_log.append((now, str(tag), first, at))
        return True

    def totals(self) -> dict:
        injected = sum(self.injected.values())
        return {"injected": injected, "delivered": sum(self.delivered.values()),
                "dropped": sum(self.dropped.values()), "in_flight": self.in_flight}

    def check(self, pending: collections.Counter | None = None) -> None:
        """Assert conservation; with *pending* (tag -> skbs queued, every skb that still exists), also that
        every packet in flight is queued somewhere, with as many skbs as it has pieces."""
        t = self.totals()
        if t["injected"] != t["delivered"] + t["dropped"] + t["in_flight"]:
            raise AssertionError(f"packet conservation violated: {t}")
        if pending is None:
            return
        found = 0
        for tag, queued in pending.items():
            if tag.state != "live":
                continue
            found += 1
            if queued != tag.pieces:
                raise AssertionError(f"packet {tag}: {tag.pieces} pieces alive, {queued} queued")
        if found != self.in_flight:
            raise AssertionError(f"{self.in_flight - found} of {self.in_flight} packets in flight have no skb left "
                                 "(leaked)")


@attrs.frozen
class TraceRecord:
    """One step of a packet's life (``Kernel.trace``)."""

    time: float
    packet: str
    where: str
    what: str
    details: tuple = ()  # (name, value) pairs, values JSON-ready: None, bool, int, float or text

    def __str__(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.details if v is not None)
        return f"{self.time * 1e3:10.3f} ms  {self.packet:28} {self.where:24} {self.what}" + (f"  [{extra}]" if extra else "")


def _trace_value(v):
    """A trace detail as a JSON-ready value: numbers, booleans and ``None`` stay typed (``null`` for an absent
    VLAN, not the text "None"); addresses and other values become their text form."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


IP_RT_MTU_EXPIRES = 600  # ip_rt_mtu_expires / ip6_rt_mtu_expires: 10 minutes (net/ipv4/route.c, net/ipv6/route.c)


@attrs.define(slots=True, eq=False)
class NetnsState:
    """Per-namespace kernel state (:class:`flowsim.kernel.api.NetnsState` plus the stack's own)."""

    name: str
    ns: Any  # flowsim.config.topology.Namespace
    conntrack: ConntrackTable
    flowtables: dict  # name -> flowsim.kernel.flowtable.core.Flowtable
    nft: Any = None  # flowsim.nft.ruleset.Nftables or None (no ruleset: no netfilter at all)
    ruleset: Any = None
    unbound: tuple = ()  # (nft Flowtable, device name) listed but absent: bound by name when it registers
    ft_by_key: dict = attrs.Factory(dict)  # (family, table, name) -> Flowtable
    # device name -> its netdev ingress hook's steps, flowtables resolved (flowsim.kernel.stack.l2._ingress_steps)
    ingress_steps: dict = attrs.Factory(dict)
    ct_active: bool = False  # conntrack hooks registered (the ruleset has L3 chains or flowtables)
    routes: dict = attrs.Factory(dict)  # (daddr, oif) -> Route (the FIB does not change during a run)
    # what the stack derives per packet from the devices and sysctls (ip_tunnel_lookup, IN_DEV_FORWARD), kept
    # until a run event changes the namespace: key -> answer
    conf_cache: dict = attrs.Factory(dict)
    # the reassembly queues: (src, dst, id, proto) -> FragQueue; ("ipv6" | "ipv6-ct", src, dst, id, iif) -> Frag6Queue
    frags: dict = attrs.Factory(dict)
    # inet_peer's rid per IPv4 source (net->ipv4.peers): how many fragments from it reached a queue (ip_frag_too_far)
    inet_peer_rid: dict = attrs.Factory(dict)
    sockets: dict = attrs.Factory(dict)  # (l4proto, laddr, lport, raddr, rport) -> endpoint
    ip_ident: int = 0
    ip6_ident: int = 0
    hook_cache: dict = attrs.Factory(dict)  # (hook, nfproto) -> merged hook steps (flowsim.kernel.stack.nf)
    gen: int = 0  # bumped by every run event that changed this namespace (netdev_changes, netdev_register)
    # the path MTUs this host learned (ICMP Fragmentation Needed / Packet Too Big to one of its sockets): daddr ->
    # (mtu, expiry), the IPv4 route's nexthop exception (update_or_create_fnhe) or the IPv6 RTF_CACHE clone
    # (rt6_insert_exception); every later route to that address carries it (dst_mtu) until it expires
    pmtu_exceptions: dict = attrs.Factory(dict)
    icmp_limits: IcmpRateLimits = attrs.Factory(IcmpRateLimits)  # icmp_send's rate limits (flowsim.kernel.icmp_limit)

    def route(self, daddr, oif: str | None = None):
        """``ip_route_output_key`` / ``fib_lookup`` through a cache."""
        key = (daddr, oif)
        rt = self.routes.get(key)
        if rt is None:
            rt = self.routes[key] = self.ns.fib.lookup(daddr, oif=oif)
        return rt

    def route_mtu(self, rt) -> int:
        """``dst_mtu``: the route's MTU metric, else its device's MTU."""
        return self.ns.fib.route_mtu(rt)

    def pmtu_exception(self, daddr, now: float) -> int | None:
        """The path MTU learned for *daddr* (``fnhe_pmtu`` / the exception route's MTU), None when none is live."""
        hit = self.pmtu_exceptions.get(daddr)
        if hit is None:
            return None
        if now >= hit[1]:  # ip_rt_mtu_expires / ip6_rt_mtu_expires: the exception is gone
            del self.pmtu_exceptions[daddr]
            return None
        return hit[0]

    def update_pmtu(self, daddr, mtu: int, now: float) -> None:
        """``__ip_rt_update_pmtu`` / ``rt6_update_exception``: remember *mtu* for *daddr* (only ever lower while
        live), for ``net.ipv{4,6}.route.mtu_expires`` seconds (600)."""
        old = self.pmtu_exception(daddr, now)
        if old is not None and old <= mtu:
            return
        key = f"net.ipv{daddr.version}.route.mtu_expires"
        self.pmtu_exceptions[daddr] = (mtu, now + float(self.ns.sysctls.get(key, IP_RT_MTU_EXPIRES)))

    def next_ident(self) -> int:
        """``ip_select_ident`` (a per-namespace counter keeps runs reproducible)."""
        self.ip_ident = (self.ip_ident + 1) & 0xFFFF
        return self.ip_ident

    def next_ident6(self) -> int:
        """``ipv6_select_ident``: a fragment header's identification (a per-namespace counter, as
        :meth:`next_ident`, where the kernel draws a random number per datagram: ``get_random_u32_above(0)``,
        net/ipv6/output_core.c)."""
        self.ip6_ident = (self.ip6_ident + 1) & 0xFFFFFFFF
        return self.ip6_ident

    def sysctl_on(self, key: str, default: str = "0") -> bool:
        return self.ns.sysctl_on(key, default)

    def forwarding(self, dev, version: int) -> bool:
        """IN_DEV_FORWARD(in_dev) for IPv4 (per device, else ``all`` / ``ip_forward``); IPv6's global switch."""
        key = ("forwarding", dev.name, version)
        on = self.conf_cache.get(key)
        if on is None:
            on = self.conf_cache[key] = self._forwarding(dev, version)
        return on

    def _forwarding(self, dev, version: int) -> bool:
        if version == 4:
            for name in (dev.name.replace(".", "/"), dev.name):
                key = f"net.ipv4.conf.{name}.forwarding"
                if key in self.ns.sysctls:
                    return self.ns.sysctl_on(key)
            return self.sysctl_on("net.ipv4.conf.all.forwarding") or self.sysctl_on("net.ipv4.ip_forward")
        return self.sysctl_on("net.ipv6.conf.all.forwarding")


class Timer:
    """A cancellable event on the :attr:`Kernel.schedule` clock (the kernel's ``timer_list``: ``mod_timer`` is
    a new Timer, ``del_timer`` :meth:`cancel`).  The simulation drops a cancelled timer from its queue without
    moving the clock, so a timer that never fires (a retransmission timer stopped by the last ACK) leaves no
    trace in a run's end time or its GC ticks."""

    __slots__ = ("fn", "args", "cancelled")

    def __init__(self, fn: Callable, *args: Any) -> None:
        self.fn, self.args, self.cancelled = fn, args, False

    def cancel(self) -> None:
        self.cancelled = True

    def __call__(self) -> None:
        if not self.cancelled:
            self.cancelled = True  # fired: a later cancel() is a no-op
            self.fn(*self.args)


class PeerCache(dict):
    """Device → the other end of its veth pair or cable (``Topology.peer``; None without one), looked up when first
    asked.  Links change only when an event adds a device (``Kernel.netdev_register`` clears the cache).  A dict
    that fills itself: a transmitted frame pays one C-level subscript for its peer, not a method call."""

    __slots__ = ("topo",)

    def __init__(self, topo) -> None:
        super().__init__()
        self.topo = topo

    def __missing__(self, dev):
        peer = self[dev] = self.topo.peer(dev)  # devices hash by identity
        return peer


class Kernel:
    """The simulated kernel of every namespace of *topo* (see the module docstring).

    ``schedule(t, fn, *args)`` runs ``fn(*args)`` at virtual time *t* (the
    simulation's event queue; default: at once).  ``capture(netns, dev,
    frame)`` receives every frame written to or read from a device when set;
    ``verdict(skb, text)``, when set, hears each flowtable hook verdict
    (``fastpath``, ``slowpath REASON``, ``drop REASON``) for the skb it saw.
    ``path_tap(now, kind)``, when set, hears each counted ``fastpath`` /
    ``slowpath`` verdict with the virtual time (a run's HTML plot).
    ``accept(kernel, state, skb, info)`` finds the endpoint for a packet no
    socket is bound to (a listening server), or returns None.
    """

    def __init__(self, topo: Any, profile: Profile | str | None = None, *, flowtables: bool = True,
                 headlen: int | None = None, tracing: bool = False, link_delay: float = LINK_DELAY) -> None:
        # topo: a flowsim.config Topology (a layer above the kernel; flowsim.kernel.api.Topology is its part
        # the flowtable reads)
        # the run's own network (struct net per namespace): a loaded topology is a frozen description,
        # so the kernel instantiates it and owns the live devices, FIBs and neighbour tables a run changes
        self.topo = topo = topo.live()
        self.profile = get_profile(profile)
        self.now = 0.0
        self.flowtables_enabled = flowtables
        self.headlen = headlen
        self.tracing = tracing
        self.traces: list[TraceRecord] = []
        self.link_delay = link_delay
        self.ledger = Ledger()
        self.schedule: Callable = lambda t, fn, *args: fn(*args)
        self.capture: Callable | None = None
        self.packet_tap: Callable | None = None  # (netns, dev, frame, skb, outbound): a run's pcapng
        self.verdict: Callable | None = None  # the flowtable hook's verdict per skb (a run's pcapng)
        self.path_tap: Callable | None = None  # (now, kind) per fastpath/slowpath count (a run's HTML plot)
        self.accept: Callable | None = None
        self.accounting: dict = collections.defaultdict(collections.Counter)  # (traffic, dir) -> kind -> n
        self.xmit_depth = 0
        self.xfrm_seq: collections.Counter = collections.Counter()  # (netns, daddr, spi) -> last ESP seq sent
        self._seq = 0
        self._vlan_uppers: dict = {}
        self.netns: dict[str, NetnsState] = {name: self._netns_state(ns) for name, ns in topo.namespaces.items()}
        self.peers = PeerCache(topo)
        # The two per-packet entry points, bound once as partials (one Python frame less per frame and skb):
        #   receive_frame(dev, frame, tag, zeros=0, mark=0, gso_size=0, gso_type=0): a frame (and *zeros* zero
        #     bytes after it) arrives on *dev* from its wire (veth peer, cable); a GSO skb crosses a veth whole
        #     (stack_l2.netif_receive_frame);
        #   dev_queue_xmit(dev, skb): egress hook, capture, then the device's xmit (kernel_api.Kernel;
        #     stack_l2.dev_queue_xmit).
        self.receive_frame = functools.partial(stack_l2.netif_receive_frame, self)
        self.dev_queue_xmit = functools.partial(stack_l2.dev_queue_xmit, self)

    # ------------------------------------------------------------------ setup
    def _netns_state(self, ns) -> NetnsState:
        # the namespace's conntrack sysctls: its timeouts, and nf_conntrack_tcp_loose (mid-stream pickup, on by default)
        table = ConntrackTable(CtTimeouts.from_sysctls(ns.sysctls),
                               tcp_loose=ns.sysctl_on(CT_TCP_LOOSE_SYSCTL, "1"))
        st = NetnsState(ns.name, ns, table, {})
        ns.fib.sync()  # the address-derived routes the run starts with (later events are compared with them)
        if ns.nft is None or not ns.nft.text.strip():
            return st
        text = ns.nft
        ruleset = parse_ruleset(text.text, file=text.file, line_offset=max(text.line - 1, 0))
        st.ruleset = ruleset
        # nf_tables_newflowtable hooks each listed device at commit (after the namespace's ip commands): a
        # missing one refuses the ruleset before 6.16 and stays unbound after (nft_netdev_hook_alloc)
        st.unbound = nft_flowtable_hook_devices(ruleset, ns.devices, self.profile.flowtable_absent_device, ns.name)
        # a `limit`'s bucket refills on the run's time; a `fib` expression asks the namespace's routes
        st.nft = Nftables(ruleset, clock=self._clock, fib=functools.partial(stack_nf.nft_fib_eval, st))
        st.ct_active = any(c.hook is not None and c.hook.hook not in ("ingress", "egress")
                           for c in ruleset.base_chains) or bool(ruleset.flowtables)
        for ft in ruleset.flowtables:  # nf_flow_table_init of each ``flowtable`` object
            obj = Flowtable.from_nft(ns.name, ft)
            st.flowtables.setdefault(ft.name, obj)
            st.ft_by_key[(ft.family, ft.table, ft.name)] = obj
        return st

    def _clock(self) -> float:
        """The run's time (``ktime_get_ns`` for the nft expressions that read it)."""
        return self.now

    def state(self, netns: str) -> NetnsState:
        return self.netns[netns]

    def peer(self, dev):
        """The other end of a veth pair or cable (cached: links change only when an event adds a device,
        :meth:`netdev_register`)."""
        return self.peers[dev]

    def new_tag(self, traffic: str | None, direction: str | None, kind: str, origin: str = ORIGIN_STACK,
                seq: int | None = None, flow: int = 0) -> PacketTag:
        """A tag for a packet that enters the network now (counted as injected)."""
        if seq is None:
            self._seq += 1
            seq = self._seq
        tag = PacketTag(traffic, direction, seq, kind, origin, flow)
        self.ledger.inject(tag)
        return tag

    # ------------------------------------------------------------------ kernel_api.Kernel
    def neigh_output(self, dev, skb, nexthop) -> None:
        """``ip_finish_output2`` → ``neigh_output``: link-layer header for Ethernet devices, then xmit."""
        stack_l2.neigh_output(self, dev, skb, nexthop)

    def xfrm_output(self, ns: kernel_api.NetnsState, skb: SkBuff, dst: Route) -> None:
        """The fast path's XFRM xmit: ``dst_output`` of the cached bundle (see :mod:`flowsim.kernel.stack.xfrm`).

        The flowtable hands back the state it was given; the stack takes its own by name.
        """
        # an XFRM tuple caches the bundle flow add saw (nft_xmit_type: dst_xfrm(dst)), an XfrmRoute
        stack_xfrm.xfrm_output_fast(self, self.netns[ns.name], skb, cast(stack_xfrm.XfrmRoute, dst))

    def trace(self, skb, where: str, what: str, **details) -> None:
        if self.tracing:
            tag = getattr(skb, "tag", None)
            self.traces.append(TraceRecord(self.now, str(tag) if tag is not None else "-", where, what,
                                           tuple(sorted((k, _trace_value(v)) for k, v in details.items()))))

    def add_pieces(self, skb, n: int) -> None:
        """*n* more skbs now carry *skb*'s packet (fragmentation, flooding, GSO segmentation)."""
        if skb.tag is not None:
            self.ledger.add_pieces(skb.tag, n)

    def account(self, skb, kind: str) -> None:
        """The flowtable hook's verdict for this packet: ``fastpath`` or ``slowpath``."""
        tag = skb.tag
        if tag is not None:
            self.accounting[tag.key][kind] += 1
        if self.path_tap is not None:
            self.path_tap(self.now, kind)

    # ------------------------------------------------------------------ configuration changes during a run
    def netdev_changes(self, netns: str, before: dict[str, tuple[bool, int]], why: str = "") -> None:
        """After a run event changed namespace *netns* (*before*: device name -> (up, mtu) until then):
        the notifiers of the devices that registered or whose state changed.

        A device not in *before* was added by the event: NETDEV_REGISTER first
        (:meth:`netdev_register`), and NETDEV_UP with it when it was created up.
        Route validity next, for device, address and route changes alike
        (:meth:`flowsim.kernel.fib.Fib.sync`: ``rt_cache_flush`` for IPv4, fib6
        node serials for IPv6; the routes of a new device's addresses appear
        there).  NETDEV_DOWN: ``neigh_ifdown`` and the
        flowtable's ``nf_flow_table_cleanup`` (flows entering through the
        device torn down, GC flushed).  After an UP the neighbours on the
        segment are learnt again (what the first ARP/ND exchange would do).
        The namespace's route cache is dropped after any event.
        """
        st = self.netns[netns]
        st.routes.clear()
        st.conf_cache.clear()
        st.gen += 1
        up: list[str] = []
        down: list[str] = []
        mtu: list[str] = []
        for name, dev in st.ns.devices.items():
            old = before.get(name)
            if old is None:
                self.netdev_register(st, dev, why)
                if dev.up:
                    up.append(name)
            elif old != (dev.up, dev.mtu):
                (mtu if old[0] == dev.up else up if dev.up else down).append(name)
        # route validity first (rt_cache_flush, fib6 serials: Fib.sync), also for address and route changes
        st.ns.fib.sync(came_up=up, went_down=down, mtu_changed=mtu)
        for name in down:
            dev = st.ns.devices[name]
            st.ns.neigh.flush_dev(name)
            for ft in st.flowtables.values():
                ft.cleanup_dev(self, st, dev.ifindex)
            if self.tracing:
                self.traces.append(TraceRecord(self.now, "-", f"{netns} {name}", f"NETDEV_DOWN ({why})", ()))
        if up:
            self.topo.discover()

    def netdev_register(self, st: NetnsState, dev, why: str = "") -> None:
        """NETDEV_REGISTER of *dev*, added to namespace *st* by a run event (``register_netdevice``).

        ``nft_flowtable_event`` (6.16+, a331b78a5525) binds the hook of every
        flowtable that lists the device's name and was left unbound at commit
        (:func:`flowsim.nft.hooks.nft_flowtable_hook_devices`): the ingress hook
        is looked up by device name (:func:`flowsim.nft.hooks.nf_hook_entries`),
        so dropping the pair from ``st.unbound`` is the binding.  Before 6.16 a
        ruleset listing an absent device never loaded, so nothing is unbound.
        The caches that assumed a fixed set of devices are dropped: the veth/cable
        peers (:meth:`peer`), the VLAN uppers of ``__vlan_find_dev_deep_rcu`` (a
        VLAN added on an existing lower), the merged L3 hook steps and the routes.
        """
        bound = [ft.name for ft, name in st.unbound if name == dev.name]
        st.unbound = tuple((ft, name) for ft, name in st.unbound if name != dev.name)
        self.peers.clear()
        self._vlan_uppers.clear()
        st.hook_cache.clear()
        st.routes.clear()
        st.conf_cache.clear()
        st.gen += 1
        if self.tracing:
            what = f"NETDEV_REGISTER ({why})" + (f": flowtable {', '.join(bound)} hooked" if bound else "")
            self.traces.append(TraceRecord(self.now, "-", f"{st.name} {dev.name}", what, ()))

    # ------------------------------------------------------------------ fate of a packet
    def drop(self, skb, rid: str, where: str = "", **details) -> None:
        """``kfree_skb_reason``: the packet (this piece of it) is gone, for reason *rid*."""
        reason(rid)  # only ids from the table
        tag = skb.tag
        if self.tracing:
            self.trace(skb, where or "drop", f"drop: {rid}", **details)
        if tag is not None:
            self.ledger.drop(tag, rid, where, self.now)

    def deliver(self, skb, where: str = "") -> None:
        """The packet reached its endpoint."""
        if self.tracing:
            self.trace(skb, where or "deliver", "delivered")
        if skb.tag is not None:
            self.ledger.deliver(skb.tag)

    # ------------------------------------------------------------------ entry points
    def ip_local_out(self, st: NetnsState, skb) -> None:
        """``ip_local_out`` / ``ip6_local_out`` of an L3 skb made in namespace *st* (endpoints, ICMP)."""
        stack_ip.ip_local_out(self, st, skb)

    def send_l3(self, netns: str, packet: bytes, tag, gso_size: int = 0, gso_type: int = 0,
                ignore_df: bool = False) -> None:
        """An endpoint (or the stack's ICMP) in *netns* sends the IP packet *packet*, already tagged and injected.

        With *gso_size* it is a GSO skb (TSO / UDP_SEGMENT): segments of *gso_size* payload bytes, cut later.
        *ignore_df*: ``skb->ignore_df`` as the socket sets it (a UDP socket: ``ip_sk_ignore_df``,
        ``ip6_sk_ignore_df``), so that output fragments it past the path MTU.
        """
        skb = new_skb(packet, tag, 0, gso_size, gso_type)
        skb.ignore_df = ignore_df
        stack_ip.ip_local_out(self, self.netns[netns], skb)

    def gc(self) -> None:
        """The periodic work of one second: flowtable GC, conntrack GC, reassembly timeouts."""
        for st in self.netns.values():
            for ft in st.flowtables.values():
                ft.nf_flow_offload_work_gc(self, st)
            st.conntrack.gc(self.now)
            stack_ip.ip_expire_frags(self, st)


if TYPE_CHECKING:
    def _implements_api(kernel: Kernel, st: NetnsState) -> tuple[kernel_api.Kernel, kernel_api.NetnsState]:
        """Never called: mypy proves here that the stack offers what :mod:`flowsim.kernel.api` names."""
        return kernel, st
