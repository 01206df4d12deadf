"""The parsed nftables ruleset: frozen values the evaluator walks.

A :class:`Ruleset` is what ``nft -f`` would leave in the kernel after the
batch commits: tables (``struct nft_table``) holding chains
(``struct nft_chain``, base chains carry a :class:`BaseHook`), rules
(``struct nft_rule``: an ordered tuple of expressions), flowtables
(``struct nft_flowtable``), named counters and sets.  Everything here is a
value: the evaluator (:mod:`flowsim.nft.eval`) keeps counters and other run
state apart, so one ruleset can be evaluated by several simulations.

Rule expressions are of two sorts, in the order written:

* :class:`Match` / :class:`VerdictMap` — read a *selector* (``meta
  l4proto``, ``ip saddr``, ``ct state`` …) from the packet; a miss ends the
  rule (``NFT_BREAK``);
* statements — :class:`Verdict`, :class:`CounterStmt`, :class:`FlowAdd`,
  :class:`SetStmt`, :class:`NatStmt`, :class:`LogStmt`,
  :class:`RejectStmt`.

Selectors and their data types are one table, :data:`SELECTORS`, keyed by
``(kind, key)``; each row says what the selector reads, which network and
transport protocol it depends on (nft adds the implicit ``meta nfproto`` /
``meta l4proto`` dependency matches), and whether ``set`` may write it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import attrs

__all__ = [
    "Loc", "NFPROTO_IPV4", "NFPROTO_IPV6", "NFPROTO_INET", "NFPROTO_NETDEV",
    "FAMILIES", "HOOKS_BY_FAMILY", "CHAIN_PRIORITIES", "SelectorSpec", "SELECTORS",
    "Selector", "Range", "Match", "VerdictMap", "Verdict", "CounterStmt", "FlowAdd",
    "SetStmt", "NatStmt", "LogStmt", "RejectStmt", "LimitStmt", "QuotaStmt", "QuotaDef", "TcpOptStmt", "ConcatMatch",
    "Rule", "BaseHook", "Chain",
    "Flowtable", "CounterDef", "NamedSet", "Table", "Ruleset", "Statement",
    "NF_FLOWTABLE_HW_OFFLOAD", "NF_FLOWTABLE_COUNTER", "NSEC_PER_SEC", "NFT_LIMIT_PKT_BURST_DEFAULT",
    "LIMIT_TIME_UNITS", "DATA_UNITS", "U32_MAX", "U64_MAX", "S64_MAX", "FIB_DEVICE_FLAGS", "FIB_RESULT_DTYPE",
    "FIB_KEYS", "fib_key",
]

NFPROTO_INET = 1
NFPROTO_IPV4 = 2
NFPROTO_NETDEV = 5
NFPROTO_IPV6 = 10

#: nft family keyword -> NFPROTO_* (bridge/arp are parsed only to be refused).
FAMILIES = {"ip": NFPROTO_IPV4, "ip6": NFPROTO_IPV6, "inet": NFPROTO_INET, "netdev": NFPROTO_NETDEV}

#: hooks a base chain may use per family (nf_tables_api.c, nft_chain_parse_hook).
HOOKS_BY_FAMILY = {
    "ip": ("prerouting", "input", "forward", "output", "postrouting"),
    "ip6": ("prerouting", "input", "forward", "output", "postrouting"),
    "inet": ("prerouting", "input", "forward", "output", "postrouting", "ingress"),
    "netdev": ("ingress", "egress"),
}

#: named chain priorities of the ip/ip6/inet/netdev families (nft(8) "PRIORITY").
CHAIN_PRIORITIES = {"raw": -300, "mangle": -150, "dstnat": -100, "filter": 0, "security": 50, "srcnat": 100}

NF_FLOWTABLE_HW_OFFLOAD = 0x1
NF_FLOWTABLE_COUNTER = 0x2


@attrs.frozen
class Loc:
    """Where something was written: file, 1-based line and column."""

    file: str | None
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file or '<ruleset>'}:{self.line}:{self.column}"


# ----------------------------------------------------------------- selectors

@attrs.frozen
class SelectorSpec:
    """One row of the selector table.

    ``dtype`` names the data type (see :mod:`flowsim.nft.parse` coercions);
    ``nfproto``/``l4proto`` are the implicit dependencies (None: none);
    ``settable`` says whether ``<selector> set <value>`` is supported.
    """

    dtype: str
    nfproto: int | None = None
    l4proto: tuple[int, ...] | None = None
    settable: bool = False


_TCP, _UDP, _ICMP, _ICMPV6 = 6, 17, 1, 58

SELECTORS: Mapping[tuple[str, str], SelectorSpec] = MappingProxyType({
    ("meta", "l4proto"): SelectorSpec("inet_proto"),
    ("meta", "nfproto"): SelectorSpec("nf_proto"),
    ("meta", "protocol"): SelectorSpec("ether_type"),
    ("meta", "iif"): SelectorSpec("iface_index"),
    ("meta", "oif"): SelectorSpec("iface_index"),
    ("meta", "iifname"): SelectorSpec("ifname"),
    ("meta", "oifname"): SelectorSpec("ifname"),
    ("meta", "mark"): SelectorSpec("mark", settable=True),
    ("meta", "length"): SelectorSpec("integer"),
    ("meta", "nftrace"): SelectorSpec("integer", settable=True),
    ("ip", "saddr"): SelectorSpec("ipv4_addr", NFPROTO_IPV4),
    ("ip", "daddr"): SelectorSpec("ipv4_addr", NFPROTO_IPV4),
    ("ip", "protocol"): SelectorSpec("inet_proto", NFPROTO_IPV4),
    ("ip", "dscp"): SelectorSpec("dscp", NFPROTO_IPV4, settable=True),
    ("ip", "ttl"): SelectorSpec("integer", NFPROTO_IPV4),
    ("ip", "length"): SelectorSpec("integer", NFPROTO_IPV4),
    ("ip6", "saddr"): SelectorSpec("ipv6_addr", NFPROTO_IPV6),
    ("ip6", "daddr"): SelectorSpec("ipv6_addr", NFPROTO_IPV6),
    ("ip6", "nexthdr"): SelectorSpec("inet_proto", NFPROTO_IPV6),
    ("ip6", "dscp"): SelectorSpec("dscp", NFPROTO_IPV6, settable=True),
    ("ip6", "hoplimit"): SelectorSpec("integer", NFPROTO_IPV6),
    ("ip6", "length"): SelectorSpec("integer", NFPROTO_IPV6),
    ("tcp", "sport"): SelectorSpec("inet_service", l4proto=(_TCP,)),
    ("tcp", "dport"): SelectorSpec("inet_service", l4proto=(_TCP,)),
    ("tcp", "flags"): SelectorSpec("tcp_flag", l4proto=(_TCP,)),
    ("udp", "sport"): SelectorSpec("inet_service", l4proto=(_UDP,)),
    ("udp", "dport"): SelectorSpec("inet_service", l4proto=(_UDP,)),
    ("th", "sport"): SelectorSpec("inet_service", l4proto=(_TCP, _UDP)),
    ("th", "dport"): SelectorSpec("inet_service", l4proto=(_TCP, _UDP)),
    ("icmp", "type"): SelectorSpec("icmp_type", NFPROTO_IPV4, (_ICMP,)),
    ("icmp", "code"): SelectorSpec("icmp_code", NFPROTO_IPV4, (_ICMP,)),
    ("icmpv6", "type"): SelectorSpec("icmpv6_type", NFPROTO_IPV6, (_ICMPV6,)),
    ("icmpv6", "code"): SelectorSpec("icmpv6_code", NFPROTO_IPV6, (_ICMPV6,)),
    ("ct", "state"): SelectorSpec("ct_state"),
    ("ct", "direction"): SelectorSpec("ct_dir"),
    ("ct", "status"): SelectorSpec("ct_status"),
    ("ct", "mark"): SelectorSpec("mark", settable=True),
    ("ct", "helper"): SelectorSpec("ct_helper", settable=True),
    ("ct", "l3proto"): SelectorSpec("nf_proto"),
    ("ct", "protocol"): SelectorSpec("inet_proto"),
    # `ct original saddr` & co.: the key is prefixed with the direction at parse time
    ("ct", "saddr"): SelectorSpec("ct_addr"),
    ("ct", "daddr"): SelectorSpec("ct_addr"),
    ("ct", "proto-src"): SelectorSpec("inet_service"),
    ("ct", "proto-dst"): SelectorSpec("inet_service"),
})

#: ``fib ADDR [. FLAG]… RESULT`` (net/netfilter/nft_fib.c): the canonical key of a fib selector, its address
#: (saddr | daddr), its flags in this order (iif | oif, mark) and its result (oif | oifname | type)
FIB_DEVICE_FLAGS = ("iif", "oif")
FIB_RESULT_DTYPE = {"oif": "fib_oif", "oifname": "ifname", "type": "fib_addrtype"}


def fib_key(addr: str, device: str | None, mark: bool, result: str) -> str:
    """The selector key of ``fib`` *addr* with its flags and *result*: ``saddr . iif . mark oif``."""
    return " . ".join([addr, *([device] if device else []), *(["mark"] if mark else [])]) + " " + result


#: the combinations nft_fib_init takes: not both iif and oif, no oif flag with an oif or oifname result
FIB_KEYS = {fib_key(a, d, m, r): r for a in ("saddr", "daddr") for d in (None, *FIB_DEVICE_FLAGS)
            for m in (False, True) for r in FIB_RESULT_DTYPE if not (d == "oif" and r != "type")}
SELECTORS = MappingProxyType({**SELECTORS,
                              **{("fib", k): SelectorSpec(FIB_RESULT_DTYPE[r]) for k, r in FIB_KEYS.items()}})

#: ct keys that need a direction (`ct original saddr`), and those that refuse one.
CT_DIR_KEYS = frozenset({"saddr", "daddr", "proto-src", "proto-dst"})


@attrs.frozen
class Selector:
    """``kind key`` as written (``meta l4proto``); ``dir`` for ``ct original …``."""

    kind: str
    key: str
    dir: int | None = None

    @property
    def spec(self) -> SelectorSpec:
        return SELECTORS[(self.kind, self.key)]

    def __str__(self) -> str:
        if self.dir is not None:
            return f"ct {('original', 'reply')[self.dir]} {self.key}"
        return f"{self.kind} {self.key}"


@attrs.frozen
class Range:
    """An inclusive range ``lo-hi`` of ints or addresses."""

    lo: object
    hi: object

    def __contains__(self, x) -> bool:
        try:
            return self.lo <= x <= self.hi
        except TypeError:  # IPv4 value against an IPv6 range: no match
            return False


# ----------------------------------------------------------------- expressions

@attrs.frozen
class Match:
    """``selector [& mask] [op] values`` (nft_cmp / nft_lookup / nft_range / nft_bitwise).

    ``values`` are typed elements (ints, addresses, networks, :class:`Range`,
    strings); ``is_set`` means membership in an anonymous or named set
    (``set_name``); ``flagcmp`` means a bitmask test ``(x & v) != 0``, what
    nft makes of ``ct state established,related``; ``mask`` is a bitwise and
    applied first (``tcp flags syn / syn,ack`` or ``ct mark & 0xff == 1``).
    """

    selector: Selector
    op: str
    values: tuple
    is_set: bool = False
    set_name: str | None = None
    flagcmp: bool = False
    mask: int | None = None
    loc: Loc | None = attrs.field(default=None, eq=False)


@attrs.frozen
class ConcatMatch:
    """``sel1 . sel2 [op] { v1 . v2, … }``: the selectors' values concatenated, looked up in the set
    (nft_lookup on a concatenated key, as firewall4's ``icmpv6 type . icmpv6 code { 130 . 0, … }``)."""

    selectors: tuple[Selector, ...]
    op: str
    values: tuple  # of tuples, one typed element per selector
    loc: Loc | None = attrs.field(default=None, eq=False)


@attrs.frozen
class Verdict:
    """``accept | drop | return | continue | jump C | goto C`` (nft_immediate)."""

    kind: str
    chain: str | None = None
    loc: Loc | None = attrs.field(default=None, eq=False)

    @property
    def terminal(self) -> bool:
        return self.kind != "continue"

    def __str__(self) -> str:
        return f"{self.kind} {self.chain}" if self.chain else self.kind


@attrs.frozen
class VerdictMap:
    """``selector vmap { key : verdict, … }`` (nft_lookup into a verdict map)."""

    selector: Selector
    entries: tuple  # of (element, Verdict)
    set_name: str | None = None
    loc: Loc | None = attrs.field(default=None, eq=False)


@attrs.frozen
class CounterStmt:
    """``counter`` (anonymous, per rule), ``counter name X``, or ``counter name SEL map {…}``."""

    name: str | None = None
    map_selector: Selector | None = None
    map_entries: tuple = ()  # of (element, counter name)
    packets: int = 0
    bytes: int = 0
    loc: Loc | None = attrs.field(default=None, eq=False)


@attrs.frozen
class FlowAdd:
    """``flow add @ft`` (``flow offload @ft`` is the old spelling): nft_flow_offload_eval."""

    flowtable: str
    spelling: str = "add"
    loc: Loc | None = attrs.field(default=None, eq=False)


@attrs.frozen
class SetStmt:
    """``meta mark set V``, ``ct mark set V``, ``ip[6] dscp set V``, ``meta nftrace set V``.

    ``value`` is an int, or a :class:`Selector` to copy from (``ct mark set meta mark``).
    """

    selector: Selector
    value: int | str | Selector  # str: the helper object of ``ct helper set "ftp"``
    loc: Loc | None = attrs.field(default=None, eq=False)


@attrs.frozen
class NatStmt:
    """``snat|dnat [ip|ip6] to ADDR[-ADDR][:PORT[-PORT]]``, ``masquerade``, ``redirect``.

    ``family`` is the NFPROTO the statement applies to (None: the packet's own,
    for masquerade/redirect in inet tables).  Terminal, like the kernel's
    nft_nat_eval which sets the verdict from nf_nat_setup_info.
    """

    kind: str
    family: int | None = None
    addr_min: object = None
    addr_max: object = None
    port_min: int | None = None
    port_max: int | None = None
    flags: frozenset = frozenset()
    loc: Loc | None = attrs.field(default=None, eq=False)


@attrs.frozen
class LogStmt:
    """``log [prefix …] [level …]``: parsed, no effect on the packet."""

    options: tuple = ()
    loc: Loc | None = attrs.field(default=None, eq=False)


@attrs.frozen
class RejectStmt:
    """``reject [with icmp|icmpv6|icmpx [type] CODE | with tcp reset]``: terminal; the reply is sent and the packet
    dropped (``nft_reject_inet_eval``, ``nft_reject_ipv4_eval``, ``nft_reject_ipv6_eval``).

    ``kind`` is NFTA_REJECT_TYPE's: ``icmp`` (NFT_REJECT_ICMP_UNREACH: an ICMP code of the table's family, or of
    ``icmp`` / ``icmpv6`` as written), ``icmpx`` (NFT_REJECT_ICMPX_UNREACH: an NFT_REJECT_ICMPX_* code each family
    maps) or ``tcp-reset``; ``family`` the family an ``icmp`` / ``icmpv6`` code belongs to, which nft makes an
    implicit ``meta nfproto`` match in an inet table (as ``tcp reset`` an implicit ``meta l4proto tcp``).
    """

    with_: str | None = None
    loc: Loc | None = attrs.field(default=None, eq=False)
    kind: str = "icmpx"
    code: int = 1  # NFT_REJECT_ICMPX_PORT_UNREACH: nft's `reject` in an inet table
    family: int | None = None  # NFPROTO_IPV4 / NFPROTO_IPV6 for kind icmp


NSEC_PER_SEC = 1_000_000_000
#: net/netfilter/nft_limit.c: "Use same default as in iptables."
NFT_LIMIT_PKT_BURST_DEFAULT = 5
#: nft's time_unit_parse (src/datatype.c): a limit's unit in seconds
LIMIT_TIME_UNITS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}
#: nft's data_unit_parse (src/datatype.c): a byte limit's rate and burst, a quota's bytes
DATA_UNITS = {"bytes": 1, "kbytes": 1024, "mbytes": 1024 * 1024}
U32_MAX = (1 << 32) - 1
U64_MAX = (1 << 64) - 1
S64_MAX = (1 << 63) - 1


@attrs.frozen
class LimitStmt:
    """``limit rate [over] N/UNIT [burst B packets]`` or ``limit rate [over] N BYTES/UNIT [burst B BYTES]``
    (net/netfilter/nft_limit.c), as ``nft_limit_init`` keeps it: the token bucket in nanoseconds.

    *rate* is per *unit* seconds, in packets or (*bytes*) in bytes; *burst* as the kernel has it (a packet
    limit's 0 is ``NFT_LIMIT_PKT_BURST_DEFAULT``, 5; nft itself sends 5 when none is written).  *over* is
    ``NFT_LIMIT_F_INV``.  The bucket's state lives with the ruleset's other runtime state
    (:class:`flowsim.nft.eval.NftLimit`)."""

    rate: int
    unit: int  # seconds: second 1, minute 60, hour 3600, day 86400, week 604800 (nft's time_unit_parse)
    burst: int = 0
    over: bool = False
    bytes: bool = False  # NFT_LIMIT_PKT_BYTES, else NFT_LIMIT_PKTS
    loc: Loc | None = attrs.field(default=None, eq=False)

    @property
    def nsecs(self) -> int:
        return self.unit * NSEC_PER_SEC

    @property
    def tokens_max(self) -> int:
        """``nft_limit_init``'s bucket size: a packet limit's cost times its burst, a byte limit's
        ``unit * (rate + burst) / rate``, both in nanoseconds."""
        burst = self.burst or (0 if self.bytes else NFT_LIMIT_PKT_BURST_DEFAULT)
        if self.bytes:
            return self.nsecs * (self.rate + burst) // self.rate
        return self.nsecs // self.rate * burst

    def cost(self, length: int) -> int:
        """What one packet of *length* bytes (``skb->len``) takes from the bucket: ``nft_limit_pkts_init``'s
        ``priv->cost``, or ``nft_limit_bytes_eval``'s ``nsecs * len / rate``."""
        return self.nsecs * length // self.rate if self.bytes else self.nsecs // self.rate


@attrs.frozen
class QuotaStmt:
    """``quota [over|until] N BYTES [used M BYTES]`` or ``quota name "NAME"`` (net/netfilter/nft_quota.c):
    *quota* bytes, of which *used* are consumed when the rule is loaded (NFTA_QUOTA_CONSUMED); ``over`` is
    ``NFT_QUOTA_F_INV``.  A named quota (*name*) is the table's object (:class:`QuotaDef`), which every rule
    naming it shares; the consumed bytes live with the ruleset's runtime state (``Nftables.quotas_consumed``)."""

    quota: int = 0
    over: bool = False
    used: int = 0
    name: str | None = None
    loc: Loc | None = attrs.field(default=None, eq=False)


@attrs.frozen
class QuotaDef:
    """A named quota object: ``quota NAME { [over|until] N BYTES [used M BYTES] }``."""

    name: str
    quota: int
    over: bool = False
    used: int = 0
    loc: Loc | None = attrs.field(default=None, eq=False)


@attrs.frozen
class TcpOptStmt:
    """``tcp option maxseg size set rt mtu`` (nft_exthdr_tcp_set_eval with nft_rt's NFT_RT_TCPMSS): clamps
    the MSS option of SYNs.  The simulator's TCP segments carry no options, so there is nothing to clamp:
    no effect on the packet."""

    option: str
    field: str
    loc: Loc | None = attrs.field(default=None, eq=False)


Statement = (Verdict | CounterStmt | FlowAdd | SetStmt | NatStmt | LogStmt | RejectStmt | LimitStmt | QuotaStmt
             | TcpOptStmt)


@attrs.frozen
class Rule:
    """One rule: its expressions in order, the source text and location."""

    exprs: tuple
    text: str
    loc: Loc
    index: int = 0  # position in its chain (0-based), set when the chain is frozen
    comment: str | None = None


@attrs.frozen
class BaseHook:
    """``type T hook H [device D] priority P; policy V;`` of a base chain."""

    type: str
    hook: str
    priority: int
    policy: str = "accept"
    devices: tuple[str, ...] = ()
    priority_text: str = ""


@attrs.frozen
class Chain:
    """A chain; ``hook`` is set for base chains.  ``order`` = registration order."""

    family: str
    table: str
    name: str
    rules: tuple[Rule, ...]
    hook: BaseHook | None = None
    loc: Loc | None = attrs.field(default=None, eq=False)
    order: int = 0
    anonymous: bool = False

    @property
    def is_base(self) -> bool:
        return self.hook is not None


@attrs.frozen
class Flowtable:
    """``flowtable NAME { hook ingress priority P; devices = {…}; [flags offload;] [counter;] }``."""

    family: str
    table: str
    name: str
    hook: str
    priority: int
    devices: tuple[str, ...]
    flags: frozenset = frozenset()
    counter: bool = False
    loc: Loc | None = attrs.field(default=None, eq=False)
    order: int = 0
    #: where each of ``devices`` was written (the device's token, or the ``$variable`` that gave it)
    device_locs: tuple[Loc, ...] = attrs.field(default=(), eq=False)

    @property
    def nf_flowtable_flags(self) -> int:
        """NF_FLOWTABLE_HW_OFFLOAD | NF_FLOWTABLE_COUNTER as the kernel stores them."""
        return (NF_FLOWTABLE_HW_OFFLOAD if "offload" in self.flags else 0) | (
            NF_FLOWTABLE_COUNTER if self.counter else 0)


@attrs.frozen
class CounterDef:
    """A named counter object with its initial values."""

    name: str
    packets: int = 0
    bytes: int = 0
    loc: Loc | None = attrs.field(default=None, eq=False)


@attrs.frozen
class NamedSet:
    """A named set or map; for maps ``elements`` are (key, value) pairs."""

    name: str
    dtype: str
    elements: tuple
    flags: frozenset = frozenset()
    is_map: bool = False
    map_dtype: str | None = None
    loc: Loc | None = attrs.field(default=None, eq=False)


@attrs.frozen
class Table:
    """``table FAMILY NAME { … }``."""

    family: str
    name: str
    chains: Mapping[str, Chain]
    flowtables: Mapping[str, Flowtable]
    counters: Mapping[str, CounterDef]
    sets: Mapping[str, NamedSet]
    loc: Loc | None = attrs.field(default=None, eq=False)
    #: ``ct helper NAME { type "T" protocol P; }`` objects: name -> (type, l4 protocol number)
    helpers: Mapping[str, tuple[str, int]] = attrs.field(factory=dict, eq=False)
    #: ``quota NAME { … }`` objects
    quotas: Mapping[str, QuotaDef] = attrs.field(factory=dict, eq=False)

    @property
    def nfproto(self) -> int:
        return FAMILIES[self.family]


@attrs.frozen
class Ruleset:
    """All tables of one namespace, in creation order."""

    tables: tuple[Table, ...]
    file: str | None = None
    #: interface names the rules and flowtables refer to, with where (for topology checks)
    devices_referenced: tuple[tuple[str, Loc], ...] = ()

    def table(self, family: str, name: str) -> Table:
        for t in self.tables:
            if t.family == family and t.name == name:
                return t
        raise KeyError(f"no table {family} {name}")

    def chain(self, family: str, table: str, name: str) -> Chain:
        return self.table(family, table).chains[name]

    @property
    def flowtables(self) -> tuple[Flowtable, ...]:
        return tuple(ft for t in self.tables for ft in t.flowtables.values())

    def flowtable(self, name: str, family: str | None = None, table: str | None = None) -> Flowtable:
        """The flowtable called *name* (optionally in one table); KeyError if absent or ambiguous."""
        found = [ft for ft in self.flowtables
                 if ft.name == name and (family is None or ft.family == family)
                 and (table is None or ft.table == table)]
        if len(found) != 1:
            raise KeyError(f"flowtable {name!r}: {len(found)} matches")
        return found[0]

    @property
    def base_chains(self) -> tuple[Chain, ...]:
        return tuple(c for t in self.tables for c in t.chains.values() if c.is_base)

