"""Evaluate a parsed ruleset at the netfilter hooks, as nf_tables does.

Theory of operation
-------------------
:class:`Nftables` is the run-time side of one namespace's ruleset: it owns
the rule and named counters (the :class:`~flowsim.nft.model.Ruleset` stays
a frozen value) and answers, for a hook and a packet, which base chains run
in which order (:meth:`Nftables.hook_entries`) and what they decide
(:meth:`Nftables.eval_hook`).

* **Order at a hook** (``nf_hook_entries_grow``, :mod:`flowsim.nft.hooks`):
  by priority, the later registration first among equals; ``type nat``
  chains run from the NAT core's priority.  NAT chains only see packets of a
  conntrack entry in state new/related whose NAT for this hook is not yet
  set up (``nf_nat_initialized``: IPS_SRC_NAT_DONE / IPS_DST_NAT_DONE); after
  the first chain that binds, the others are skipped.  The caller then calls
  ``nf_nat_setup_info`` (:mod:`flowsim.kernel.conntrack`) with
  :attr:`HookResult.nat`, or the null binding when it is None.
* **One chain** (``nft_do_chain``): rules in order; an expression that does
  not match ends the rule (``NFT_BREAK``); ``jump`` pushes a return point,
  ``goto`` does not; falling off a regular chain returns; falling off the
  base chain applies its policy.  ``accept`` ends this base chain only: the
  next base chain at the hook still runs; ``drop`` ends the hook.
* **Statements** record their effect in the :class:`HookResult`.  ``ct mark
  set`` also writes the conntrack entry at once (the kernel does; later rules
  read it back).  ``flow add @ft`` asks the caller through ``on_flow_add``
  (nft_flow_offload_eval's conditions and flow creation are the flowtable's
  business); a False answer is ``NFT_BREAK``: the rest of that rule (say a
  following ``counter … accept``) is not evaluated (``nft_flow_offload_eval``
  sets ``regs->verdict.code = NFT_BREAK``).

The packet is an :class:`NftPacket` view so this module needs no other part
of flowsim.  ``ct`` is duck-typed: the evaluator reads ``ct.mark``,
``ct.status`` (IPS_* bits) and ``ct.tuplehash[dir].src/dst/sport/dport/
l3proto/l4proto``, and writes ``ct.mark``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from typing import Protocol

import attrs

from flowsim.nft.hooks import (
    L3_HOOKS, NAT_MANIP, NF_IP_PRI_CONNTRACK, NF_IP_PRI_NAT_DST, NF_IP_PRI_NAT_SRC, HookEntry,
    nf_hook_entries,
)
from flowsim.nft.model import (
    NFPROTO_IPV4, NFPROTO_IPV6, NSEC_PER_SEC, Chain, ConcatMatch, CounterStmt, FlowAdd, Flowtable, Loc, LogStmt, Match,
    FIB_KEYS, NatStmt, QuotaDef, QuotaStmt, Range, LimitStmt, RejectStmt, Rule, Ruleset, Selector, SetStmt,
    TcpOptStmt, Verdict, VerdictMap,
)
from flowsim.nft.parse import SYMBOLS
from flowsim.nft.types import FIB_EXISTS

__all__ = [
    "NftPacket", "NftCounter", "NftLimit", "NftFib", "RuleRef", "TraceStep", "MarkSet", "DscpSet", "NftraceSet",
    "FlowAddRequest", "NatRequest", "HookResult", "HookEntry", "Nftables", "L3_HOOKS",
    "NF_IP_PRI_CONNTRACK", "NF_IP_PRI_NAT_DST", "NF_IP_PRI_NAT_SRC", "NAT_MANIP",
]

#: nf_nat_initialized(): IPS_SRC_NAT_DONE (1 << 7), IPS_DST_NAT_DONE (1 << 8)
_NAT_DONE_BIT = {"src": 1 << 7, "dst": 1 << 8}
_ETHERTYPE = {NFPROTO_IPV4: 0x0800, NFPROTO_IPV6: 0x86DD}


class NftConntrack(Protocol):
    """What the evaluator reads and writes of a conntrack entry (``struct nf_conn``; see the module docstring)."""

    status: int
    mark: int

    @property
    def tuplehash(self) -> Sequence[object]: ...


@attrs.frozen
class NftPacket:
    """What the rules may read of one packet at one hook.

    ``ct_state`` is nft's ``ct state`` name (new, established, related,
    untracked, invalid); left None it is ``invalid`` without a ``ct`` (as
    nft_ct_get_eval says) and ``established`` with one.  ``ct_dir`` is 0
    (original) or 1 (reply).  ``length`` is skb->len at the hook (L3 length).
    """

    nfproto: int
    l4proto: int | None = None
    saddr: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None
    daddr: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None
    sport: int | None = None
    dport: int | None = None
    dscp: int = 0
    ttl: int | None = None
    iif: str | None = None
    iifindex: int | None = None
    oif: str | None = None
    oifindex: int | None = None
    mark: int = 0
    length: int = 0
    tcp_flags: int | None = None
    icmp_type: int | None = None
    icmp_code: int | None = None
    ct: NftConntrack | None = None
    ct_state: str | None = None
    ct_dir: int | None = None
    nftrace: bool = False


@attrs.define(slots=True)
class NftCounter:
    """packets/bytes of a rule counter or a named counter (nft_counter)."""

    packets: int = 0
    bytes: int = 0


@attrs.define(slots=True)
class NftLimit:
    """The token bucket of one ``limit`` expression (``struct nft_limit``): tokens and the time of the last
    packet, in nanoseconds of the namespace's clock."""

    tokens: int
    last: int

    def nft_limit_eval(self, stmt: LimitStmt, cost: int, now: int) -> bool:
        """``nft_limit_eval``: refill by the time since the last packet (up to the bucket's size), take *cost*;
        True when the packet is over the limit (with ``over``: when it is within), NFT_BREAK for the rule."""
        tokens = min(self.tokens + now - self.last, stmt.tokens_max)
        self.last = now
        delta = tokens - cost
        if delta >= 0:
            self.tokens = delta
            return stmt.over
        self.tokens = tokens
        return not stmt.over


@attrs.frozen
class RuleRef:
    """Which rule (or, with ``index`` None, which chain's policy) decided."""

    family: str
    table: str
    chain: str
    index: int | None
    text: str
    loc: Loc | None = None

    def __str__(self) -> str:
        where = f" ({self.loc})" if self.loc else ""
        what = f"#{self.index}" if self.index is not None else "policy"
        return f"{self.family} {self.table} {self.chain} {what}: {self.text}{where}"


@attrs.frozen
class TraceStep:
    """One rule evaluated (or a policy applied, or a chain skipped), for ``flowsim trace``."""

    hook: str
    family: str
    table: str
    chain: str
    index: int | None
    text: str
    loc: Loc | None
    matched: bool
    verdict: str | None = None
    note: str = ""

    def __str__(self) -> str:
        what = f"rule {self.index}" if self.index is not None else "policy" if self.matched else "skip"
        res = f" -> {self.verdict}" if self.verdict else "" if self.matched else " (no match)"
        note = f"  [{self.note}]" if self.note else ""
        return f"{self.hook} {self.family} {self.table} {self.chain} {what}: {self.text}{res}{note}"


@attrs.frozen
class MarkSet:
    target: str  # "meta" (skb->mark) or "ct" (ct->mark)
    value: int


@attrs.frozen
class DscpSet:
    nfproto: int
    value: int


@attrs.frozen
class NftraceSet:
    value: int


@attrs.frozen
class FlowAddRequest:
    """``flow add @ft`` was reached; ``ok`` is what on_flow_add answered."""

    flowtable: Flowtable
    ok: bool
    rule: RuleRef


@attrs.frozen
class NatRequest:
    """A NAT statement fired: the caller runs nf_nat_setup_info with this range.

    ``manip`` is "src" (snat, masquerade) or "dst" (dnat, redirect); for
    masquerade/redirect the address comes from the device (the caller knows it).
    """

    kind: str
    manip: str
    family: int | None
    addr_min: object
    addr_max: object
    port_min: int | None
    port_max: int | None
    flags: frozenset
    rule: RuleRef


@attrs.frozen
class HookResult:
    """Everything one hook's evaluation decided and asked for."""

    hook: str
    verdict: str  # "accept" or "drop"
    decided_by: RuleRef | None
    effects: tuple = ()
    flow_adds: tuple[FlowAddRequest, ...] = ()
    nat: NatRequest | None = None
    nat_manip: str | None = None  # set when nat chains ran: bind `nat` or the null binding
    meta_mark: int = 0
    dscp: int | None = None  # new DSCP when a rule set it
    nftrace: bool = False
    reject: RejectStmt | None = None  # the `reject` that fired (verdict is drop): the stack sends its reply
    trace: tuple[TraceStep, ...] = ()

    @property
    def accepted(self) -> bool:
        return self.verdict == "accept"

    def format_trace(self) -> str:
        return "\n".join(str(s) for s in self.trace)


class NftFib(Protocol):
    """What a namespace answers a ``fib`` expression (``nft_fib4_eval`` / ``nft_fib6_eval`` and their ``_type``
    variants, provided by the stack): *key* is the selector's (:data:`flowsim.nft.model.FIB_KEYS`); the answer is
    the device found as ``(name, ifindex)`` or None, or the route type's number (RTN_*)."""

    def __call__(self, key: str, pkt: NftPacket, hook: str) -> tuple[str, int] | int | None: ...


@attrs.define(slots=True)
class _Ctx:
    """Per-evaluation state (nft_pktinfo + nft_regs of the kernel)."""

    hook: str
    pkt: NftPacket
    on_flow_add: Callable | None
    meta_mark: int
    dscp: int
    dscp_set: bool = False
    nftrace: bool = False
    effects: list = attrs.Factory(list)
    flow_adds: list = attrs.Factory(list)
    nat: NatRequest | None = None
    reject: RejectStmt | None = None
    trace: list = attrs.Factory(list)
    fib: NftFib | None = None


class _Ifref:
    """An interface as ``meta iif`` sees it: equal to its name or its index."""

    __slots__ = ("name", "index")

    def __init__(self, name, index):
        self.name, self.index = name, index

    def __eq__(self, other):
        return other == (self.index if isinstance(other, int) else self.name)

    __hash__ = None  # type: ignore[assignment]  # equal to an int and to a str: unhashable, as a list is


def _fib_getter(key: str) -> Callable:
    """The value a ``fib`` selector loads (``nft_fib_store_result``): an oif result is the device found (0 when none:
    ``missing``), an oifname its name ("" when none), a type the RTN_* number; NFT_BREAK without a namespace."""
    result = key.split()[-1]

    def load(p: NftPacket, c: _Ctx, s: Selector):
        if c.fib is None:
            return None
        found = c.fib(key, p, c.hook)
        if result == "type":
            return found
        dev = found if isinstance(found, tuple) else None
        if result == "oifname":
            return dev[0] if dev else ""
        return _Ifref(*dev) if dev else 0
    return load


def _ct_state_bit(pkt: NftPacket) -> int:
    name = pkt.ct_state or ("invalid" if pkt.ct is None else "established")
    return SYMBOLS["ct_state"][name]


def _ct_tuple(field):
    def get(p, c, sel):
        if p.ct is None:
            return None
        return getattr(p.ct.tuplehash[sel.dir], field)
    return get


def _ct_attr(field):
    return lambda p, c, sel: None if p.ct is None else getattr(p.ct, field)


#: (kind, key) -> getter(pkt, ctx, selector); None means NFT_BREAK
_GETTERS: dict[tuple[str, str], Callable] = {
    ("meta", "l4proto"): lambda p, c, s: p.l4proto,
    ("meta", "nfproto"): lambda p, c, s: p.nfproto,
    ("meta", "protocol"): lambda p, c, s: _ETHERTYPE.get(p.nfproto),
    ("meta", "iif"): lambda p, c, s: None if p.iif is None else _Ifref(p.iif, p.iifindex),
    ("meta", "oif"): lambda p, c, s: None if p.oif is None else _Ifref(p.oif, p.oifindex),
    ("meta", "iifname"): lambda p, c, s: p.iif,
    ("meta", "oifname"): lambda p, c, s: p.oif,
    ("meta", "mark"): lambda p, c, s: c.meta_mark,
    ("meta", "length"): lambda p, c, s: p.length,
    ("meta", "nftrace"): lambda p, c, s: int(c.nftrace),
    ("ip", "saddr"): lambda p, c, s: p.saddr,
    ("ip", "daddr"): lambda p, c, s: p.daddr,
    ("ip", "protocol"): lambda p, c, s: p.l4proto,
    ("ip", "dscp"): lambda p, c, s: c.dscp,
    ("ip", "ttl"): lambda p, c, s: p.ttl,
    ("ip", "length"): lambda p, c, s: p.length,
    ("ip6", "saddr"): lambda p, c, s: p.saddr,
    ("ip6", "daddr"): lambda p, c, s: p.daddr,
    ("ip6", "nexthdr"): lambda p, c, s: p.l4proto,
    ("ip6", "dscp"): lambda p, c, s: c.dscp,
    ("ip6", "hoplimit"): lambda p, c, s: p.ttl,
    ("ip6", "length"): lambda p, c, s: max(p.length - 40, 0),  # payload length
    ("tcp", "sport"): lambda p, c, s: p.sport,
    ("tcp", "dport"): lambda p, c, s: p.dport,
    ("tcp", "flags"): lambda p, c, s: p.tcp_flags,
    ("udp", "sport"): lambda p, c, s: p.sport,
    ("udp", "dport"): lambda p, c, s: p.dport,
    ("th", "sport"): lambda p, c, s: p.sport,
    ("th", "dport"): lambda p, c, s: p.dport,
    ("icmp", "type"): lambda p, c, s: p.icmp_type,
    ("icmp", "code"): lambda p, c, s: p.icmp_code,
    ("icmpv6", "type"): lambda p, c, s: p.icmp_type,
    ("icmpv6", "code"): lambda p, c, s: p.icmp_code,
    ("ct", "state"): lambda p, c, s: _ct_state_bit(p),
    ("ct", "direction"): lambda p, c, s: None if p.ct is None else p.ct_dir,
    ("ct", "status"): _ct_attr("status"),
    ("ct", "mark"): _ct_attr("mark"),
    ("ct", "helper"): _ct_attr("helper"),
    ("ct", "l3proto"): lambda p, c, s: None if p.ct is None else p.ct.tuplehash[0].l3proto,
    ("ct", "protocol"): lambda p, c, s: None if p.ct is None else p.ct.tuplehash[0].l4proto,
    ("ct", "saddr"): _ct_tuple("src"),
    ("ct", "daddr"): _ct_tuple("dst"),
    ("ct", "proto-src"): _ct_tuple("sport"),
    ("ct", "proto-dst"): _ct_tuple("dport"),
    **{("fib", key): _fib_getter(key) for key in FIB_KEYS},
}


def _load(sel: Selector, ctx: _Ctx):
    """The selector's value for this packet, or None (NFT_BREAK) when its dependency fails."""
    spec = sel.spec
    pkt = ctx.pkt
    if spec.nfproto is not None and pkt.nfproto != spec.nfproto:
        return None
    if spec.l4proto is not None and pkt.l4proto not in spec.l4proto:
        return None
    return _GETTERS[(sel.kind, sel.key)](pkt, ctx, sel)


def _elem_match(elem, x) -> bool:
    if elem is FIB_EXISTS:  # `fib … oif exists`: NFTA_FIB_F_PRESENT, a device was found
        return not (isinstance(x, int) and x == 0)
    if isinstance(elem, Range):
        return x in elem
    if isinstance(elem, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return getattr(x, "version", None) == elem.version and x in elem
    if isinstance(elem, str) and elem.endswith("*") and isinstance(x, str):
        return x.startswith(elem[:-1])  # ifname wildcard
    return x == elem


_RELOPS = {"<": lambda a, b: a < b, ">": lambda a, b: a > b, "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b}


def _match(m: Match, ctx: _Ctx) -> bool:
    x = _load(m.selector, ctx)
    if x is None:
        return False
    if m.mask is not None:
        x &= m.mask
    if m.flagcmp:
        hit = (x & m.values[0]) != 0
        return not hit if m.op == "!=" else hit
    if m.op in _RELOPS:
        return _RELOPS[m.op](x, m.values[0])
    hit = any(_elem_match(e, x) for e in m.values)
    return not hit if m.op == "!=" else hit


def _lookup(entries, x):
    for key, val in entries:
        if _elem_match(key, x):
            return val
    return None


class Nftables:
    """The nf_tables state of one namespace: a ruleset plus its counters.

    >>> from flowsim.nft.parse import parse_ruleset
    >>> nft = Nftables(parse_ruleset('''table inet f { chain fwd {
    ...     type filter hook forward priority 0; policy drop
    ...     tcp dport 22 counter accept } }'''))
    >>> nft.eval_hook("forward", NftPacket(nfproto=2, l4proto=6, dport=22, length=60)).verdict
    'accept'
    """

    def __init__(self, ruleset: Ruleset, clock: Callable[[], float] | None = None, fib: NftFib | None = None):
        self.ruleset = ruleset
        #: the namespace's answer to a ``fib`` expression (the stack's nft_fib_eval); None: a fib rule breaks
        self.fib = fib
        #: the namespace's time in seconds (the simulation's clock): what ``ktime_get_ns`` reads for a limit
        self.clock = clock if clock is not None else _clock_at_zero
        #: (family, table, chain, rule index, expression index) -> the bucket of a `limit`, made at its first
        #: packet: nft_limit_init fills it when the rule is loaded, and a full bucket stays full until then
        self.limits: dict[tuple, NftLimit] = {}
        #: bytes consumed per quota: a named one by (family, table, name), an anonymous one by its expression's
        #: (family, table, chain, rule index, expression index); from NFTA_QUOTA_CONSUMED (``used``) at load
        self.quotas_consumed: dict[tuple, int] = {}
        self.named_counters: dict[tuple[str, str, str], NftCounter] = {
            (t.family, t.name, c.name): NftCounter(c.packets, c.bytes)
            for t in ruleset.tables for c in t.counters.values()}
        #: (family, table, chain, rule index, expression index) -> counter of an anonymous `counter`
        self.rule_counters: dict[tuple, NftCounter] = {}
        for t in ruleset.tables:
            for ch in t.chains.values():
                for r in ch.rules:
                    for i, e in enumerate(r.exprs):
                        if isinstance(e, CounterStmt) and e.name is None and e.map_selector is None:
                            self.rule_counters[(t.family, t.name, ch.name, r.index, i)] = NftCounter(e.packets, e.bytes)
        self._entries_cache: dict[tuple, tuple[HookEntry, ...]] = {}
        #: devices with a netdev egress base chain: dev_queue_xmit asks for hook entries only for these
        self.egress_devices = frozenset(d for t in ruleset.tables for ch in t.chains.values()
                                        if ch.hook is not None and ch.hook.hook == "egress" for d in ch.hook.devices)

    # --- counters
    def counter(self, name: str, family: str | None = None, table: str | None = None) -> NftCounter:
        """The named counter *name* (``nft list counter``); KeyError if absent or ambiguous."""
        found = [v for (f, t, n), v in self.named_counters.items()
                 if n == name and family in (None, f) and table in (None, t)]
        if len(found) != 1:
            raise KeyError(f"counter {name!r}: {len(found)} matches")
        return found[0]

    def named_quotas(self) -> dict[tuple[str, str, str], tuple[QuotaDef, int]]:
        """Every named quota (``family, table, name``) with the bytes it consumed (its ``used`` before a packet)."""
        return {(t.family, t.name, q.name): (q, self.quotas_consumed.get((t.family, t.name, q.name), q.used))
                for t in self.ruleset.tables for q in t.quotas.values()}

    def rule_counter(self, family: str, table: str, chain: str, index: int) -> NftCounter:
        """The (first) anonymous counter of rule *index* of a chain."""
        for key, c in self.rule_counters.items():
            if key[:4] == (family, table, chain, index):
                return c
        raise KeyError(f"rule {index} of {family} {table} {chain} has no counter")

    def reset_counters(self) -> None:
        """``nft reset counters``: every rule and named counter back to zero."""
        for c in (*self.named_counters.values(), *self.rule_counters.values()):
            c.packets = c.bytes = 0

    # --- hook registration order
    def hook_entries(self, hook: str, nfproto: int | None = None, device: str | None = None) -> tuple[HookEntry, ...]:
        """Base chains (and, at ingress, flowtables) that run at *hook*, in kernel order."""
        try:  # a subscript, not a method call: the netdev ingress hook asks once per received packet
            return self._entries_cache[hook, nfproto, device]
        except KeyError:  # computed once per key: the ruleset is frozen
            cached = self._entries_cache[hook, nfproto, device] = nf_hook_entries(self.ruleset, hook, nfproto, device)
            return cached

    # --- evaluation
    def eval_hook(self, hook: str, pkt: NftPacket, *, on_flow_add: Callable[[Flowtable, NftPacket], bool] | None = None,
                  priority_range: tuple[int | None, int | None] | None = None, device: str | None = None,
                  entries: tuple[HookEntry, ...] | None = None) -> HookResult:
        """Run the base chains of *hook* for *pkt* (nf_hook_slow over the nft hooks).

        *device* defaults to ``pkt.iif`` at ingress and ``pkt.oif`` at egress.
        *priority_range* ``(lo, hi)`` keeps entries with ``lo < priority <= hi``
        (None: unbounded), e.g. ``(None, NF_IP_PRI_CONNTRACK)`` for the raw
        chains that run before conntrack.  *entries* evaluates an explicit
        subset of :meth:`hook_entries` instead.
        """
        if hook not in L3_HOOKS and hook not in ("ingress", "egress"):
            raise ValueError(f"unknown hook {hook!r}")
        if device is None:
            device = pkt.iif if hook == "ingress" else pkt.oif if hook == "egress" else None
        if entries is None:
            entries = self.hook_entries(hook, nfproto=pkt.nfproto, device=device)
        if priority_range is not None:
            lo, hi = priority_range
            entries = tuple(e for e in entries if (lo is None or e.priority > lo) and (hi is None or e.priority <= hi))
        ctx = _Ctx(hook=hook, pkt=pkt, on_flow_add=on_flow_add, meta_mark=pkt.mark, dscp=pkt.dscp,
                   nftrace=pkt.nftrace, fib=self.fib)
        manip = NAT_MANIP.get(hook)
        nat_open = (manip is not None and pkt.ct is not None and pkt.ct_state in ("new", "related")
                    and not pkt.ct.status & _NAT_DONE_BIT[manip])
        nat_ran = False
        verdict, decided = "accept", None
        for entry in entries:
            ch = entry.chain
            if ch is None or ch.hook is None:
                continue  # a flowtable: the fast path is the caller's (a chain entry is always a base chain)
            if ch.hook.type == "nat":
                if not nat_open or ctx.nat is not None:
                    why = "NAT already set up" if nat_open or ctx.nat else "not a new connection"
                    ctx.trace.append(TraceStep(hook, ch.family, ch.table, ch.name, None, "nat chain", ch.loc,
                                               False, None, f"skipped: {why}"))
                    continue
                nat_ran = True
            verdict, decided = self.nft_do_chain(ch, ctx)
            if verdict == "drop":
                break
        return HookResult(
            hook=hook, verdict=verdict, decided_by=decided, effects=tuple(ctx.effects),
            flow_adds=tuple(ctx.flow_adds), nat=ctx.nat, nat_manip=manip if nat_ran else None,
            meta_mark=ctx.meta_mark, dscp=ctx.dscp if ctx.dscp_set else None, nftrace=ctx.nftrace,
            reject=ctx.reject, trace=tuple(ctx.trace))

    def nft_do_chain(self, base: Chain, ctx: _Ctx) -> tuple[str, RuleRef]:
        """Evaluate one base chain with its jumps; returns (accept|drop, what decided)."""
        table = self.ruleset.table(base.family, base.table)
        stack: list[tuple[Chain, int]] = []
        chain, i = base, 0
        while True:
            if i >= len(chain.rules):
                if stack:
                    chain, i = stack.pop()
                    continue
                return self._policy(base, ctx)
            rule = chain.rules[i]
            i += 1
            v = self._eval_rule(table, chain, rule, ctx)
            if v is None or v.kind == "continue":
                continue
            if v.kind in ("accept", "drop"):
                return v.kind, self._ref(chain, rule)
            if v.kind == "return":
                if stack:
                    chain, i = stack.pop()
                    continue
                return self._policy(base, ctx)
            if v.chain is None:
                raise ValueError(f"verdict {v.kind} without a chain")  # the parser gives jump and goto one
            if v.kind == "jump":
                stack.append((chain, i))
            chain, i = table.chains[v.chain], 0  # jump or goto

    def _policy(self, base: Chain, ctx: _Ctx) -> tuple[str, RuleRef]:
        if base.hook is None:
            raise ValueError(f"chain {base.name} is not a base chain")  # hook_entries yields base chains only
        policy = base.hook.policy
        ref = RuleRef(base.family, base.table, base.name, None, f"policy {policy}", base.loc)
        ctx.trace.append(TraceStep(ctx.hook, base.family, base.table, base.name, None, ref.text, base.loc,
                                   True, policy))
        return policy, ref

    @staticmethod
    def _ref(chain: Chain, rule: Rule) -> RuleRef:
        return RuleRef(chain.family, chain.table, chain.name, rule.index, rule.text, rule.loc)

    def _eval_rule(self, table, chain: Chain, rule: Rule, ctx: _Ctx) -> Verdict | None:
        """nft_do_chain's inner loop over one rule's expressions."""
        verdict, note = None, ""
        matched = True
        for n, e in enumerate(rule.exprs):
            handler = _HANDLERS[type(e)]
            out = handler(self, table, chain, rule, n, e, ctx)
            if out is _BREAK:
                matched = False
                break
            if isinstance(out, tuple):  # (_BREAK, note): a statement broke the rule
                matched, note = False, out[1]
                break
            if isinstance(out, Verdict):
                verdict = out
                break
        ctx.trace.append(TraceStep(ctx.hook, chain.family, chain.table, chain.name, rule.index, rule.text,
                                   rule.loc, matched or bool(note), str(verdict) if verdict else None, note))
        return verdict

    # --- expression handlers: return None (go on), _BREAK, (_BREAK, note) or a Verdict
    def _h_match(self, table, chain, rule, n, e: Match, ctx):
        return None if _match(e, ctx) else _BREAK

    def _h_concat(self, table, chain, rule, n, e: ConcatMatch, ctx):
        key = tuple(_load(sel, ctx) for sel in e.selectors)
        if any(x is None for x in key):
            return _BREAK  # a selector's dependency failed (e.g. `icmpv6 type` of a TCP packet)
        hit = any(all(_elem_match(el, x) for el, x in zip(elem, key)) for elem in e.values)
        return None if hit == (e.op != "!=") else _BREAK

    def _h_limit(self, table, chain, rule, n, e: LimitStmt, ctx):
        # nft_limit_pkts_eval / nft_limit_bytes_eval: the cost of this packet against the rule's bucket
        now = round(self.clock() * NSEC_PER_SEC)
        key = (chain.family, chain.table, chain.name, rule.index, n)
        bucket = self.limits.get(key)
        if bucket is None:
            bucket = self.limits[key] = NftLimit(e.tokens_max, now)
        if bucket.nft_limit_eval(e, e.cost(ctx.pkt.length), now):
            return (_BREAK, "limit: within the rate" if e.over else "limit: over the rate")
        return None

    def _h_quota(self, table, chain, rule, n, e: QuotaStmt, ctx):
        # nft_quota_do_eval / nft_quota_obj_eval: every packet adds skb->len to the consumed bytes, within the
        # quota or not; over it (consumed > quota: Debian's 6.1.192 to 7.3 all compare so, nft_overquota) the
        # rule breaks, or with `over` (NFT_QUOTA_F_INV) it breaks while within
        q: QuotaStmt | QuotaDef = e if e.name is None else table.quotas[e.name]
        key = (chain.family, chain.table, chain.name, rule.index, n) if e.name is None else \
            (chain.family, chain.table, e.name)
        consumed = self.quotas_consumed[key] = self.quotas_consumed.get(key, q.used) + ctx.pkt.length
        if (consumed > q.quota) != q.over:
            return (_BREAK, "quota: within it" if q.over else "quota: over it")
        return None

    def _h_tcpopt(self, table, chain, rule, n, e: TcpOptStmt, ctx):
        return None  # the simulator's TCP segments carry no MSS option to clamp (TcpOptStmt)

    def _h_vmap(self, table, chain, rule, n, e: VerdictMap, ctx):
        x = _load(e.selector, ctx)
        v = None if x is None else _lookup(e.entries, x)
        return _BREAK if v is None else v

    def _h_verdict(self, table, chain, rule, n, e: Verdict, ctx):
        return e

    def _h_counter(self, table, chain, rule, n, e: CounterStmt, ctx):
        if e.map_selector is not None:
            x = _load(e.map_selector, ctx)
            name = None if x is None else _lookup(e.map_entries, x)
            if name is None:
                return _BREAK  # nft_objref_map_eval: lookup miss breaks the rule
            c = self.named_counters[(chain.family, chain.table, name)]
        elif e.name is not None:
            c = self.named_counters[(chain.family, chain.table, e.name)]
        else:
            c = self.rule_counters[(chain.family, chain.table, chain.name, rule.index, n)]
        c.packets += 1
        c.bytes += ctx.pkt.length
        return None

    def _h_flow_add(self, table, chain, rule, n, e: FlowAdd, ctx):
        ft = table.flowtables[e.flowtable]
        ok = True if ctx.on_flow_add is None else bool(ctx.on_flow_add(ft, ctx.pkt))
        ctx.flow_adds.append(FlowAddRequest(ft, ok, self._ref(chain, rule)))
        return None if ok else (_BREAK, f"flow {e.spelling} @{e.flowtable} failed: NFT_BREAK")

    def _h_set(self, table, chain, rule, n, e: SetStmt, ctx):
        spec = e.selector.spec
        if spec.nfproto is not None and ctx.pkt.nfproto != spec.nfproto:
            return _BREAK  # implicit `meta nfproto` dependency of `ip dscp set`
        value = e.value
        if isinstance(value, str):  # `ct helper set "NAME"`
            # nft_ct_helper_obj_eval: only a new (unconfirmed) entry of the object's protocol, without a
            # helper yet, gets one; the flowtable then refuses the connection (flow-add-helper)
            ct = ctx.pkt.ct
            if ct is not None and not ct.confirmed and ct.helper is None and ctx.pkt.l4proto == table.helpers[value][1]:
                ct.helper = value
            return None
        if isinstance(value, Selector):
            value = _load(value, ctx)
            if value is None:
                return _BREAK
        key = (e.selector.kind, e.selector.key)
        if key == ("meta", "mark"):
            ctx.meta_mark = value
            ctx.effects.append(MarkSet("meta", value))
        elif key == ("ct", "mark"):
            if ctx.pkt.ct is not None:  # nft_ct_set_eval: no ct, nothing to do
                ctx.pkt.ct.mark = value
                ctx.effects.append(MarkSet("ct", value))
        elif key == ("meta", "nftrace"):
            ctx.nftrace = bool(value)
            ctx.effects.append(NftraceSet(value))
        else:  # ip / ip6 dscp
            ctx.dscp, ctx.dscp_set = value & 0x3F, True
            ctx.effects.append(DscpSet(ctx.pkt.nfproto, value & 0x3F))
        return None

    def _h_nat(self, table, chain, rule, n, e: NatStmt, ctx):
        if e.family is not None and e.family != ctx.pkt.nfproto:
            return _BREAK  # `dnat ip to …` in an inet table does not apply to IPv6
        manip = "dst" if e.kind in ("dnat", "redirect") else "src"
        ctx.nat = NatRequest(e.kind, manip, e.family or ctx.pkt.nfproto, e.addr_min, e.addr_max,
                             e.port_min, e.port_max, e.flags, self._ref(chain, rule))
        return Verdict("accept")  # nft_nat_eval: verdict = nf_nat_setup_info() = NF_ACCEPT

    def _h_log(self, table, chain, rule, n, e: LogStmt, ctx):
        return None

    def _h_reject(self, table, chain, rule, n, e: RejectStmt, ctx):
        # the dependencies nft adds (stmt_evaluate_reject): `meta nfproto` for an icmp / icmpv6 code in an inet
        # table, `meta l4proto tcp` for a tcp reset; the rule breaks on another packet
        if e.family is not None and e.family != ctx.pkt.nfproto:
            return _BREAK
        if e.kind == "tcp-reset" and ctx.pkt.l4proto != _TCP:
            return _BREAK
        ctx.reject = e
        return Verdict("drop")  # nft_reject_*_eval: the reply is sent, then NF_DROP


_BREAK = object()
_TCP = SYMBOLS["inet_proto"]["tcp"]


def _clock_at_zero() -> float:
    """The clock of an :class:`Nftables` given none: time stands at 0 (a limit's bucket never refills)."""
    return 0.0

_HANDLERS: dict[type, Callable[..., object]] = {
    Match: Nftables._h_match, VerdictMap: Nftables._h_vmap, Verdict: Nftables._h_verdict,
    CounterStmt: Nftables._h_counter, FlowAdd: Nftables._h_flow_add, SetStmt: Nftables._h_set,
    NatStmt: Nftables._h_nat, LogStmt: Nftables._h_log, RejectStmt: Nftables._h_reject,
    ConcatMatch: Nftables._h_concat, LimitStmt: Nftables._h_limit, QuotaStmt: Nftables._h_quota,
    TcpOptStmt: Nftables._h_tcpopt,
}
