"""What the kernel showed for one scenario, per connection: the facts the comparator checks.

Theory of operation
-------------------
:func:`observe` folds the parsed guest sections of one scenario
(:mod:`flowsim.conform.parse`) into a :class:`ScenarioObservation`: for each
``[[traffic]]`` connection a :class:`ConnObservation` with

* per flowtable namespace and snapshot (``mid``: all data delivered, nothing
  closed; ``end``: after the TCP closes and one second), the conntrack entry
  of the connection — found by its original tuple, which the harness pinned
  (``sport``) — with its flags, TCP state and accounting;
* the slow-path packets per direction: the probe's prerouting counters in
  each flowtable namespace (``slow``);
* the packets delivered per direction: the probe's input counters in the
  server (original) and client (reply) namespaces (``delivered``), and of
  them the TCP segments that carried payload (``data_segs``, the receiver's
  ``data_segs_in``), and of those the segments shorter than the direction's
  writes, packets and bytes (``short_segs``: pieces of cut writes);
* the bytes the receiving sockets got (``bytes``), and the segments and bytes
  each direction's sender sent again (``retrans``: its socket's ``tcp_info``
  at ``mid``).

Beside the connections: each namespace's rule counters and named counters of
the topology's own ruleset (the probe table left out) at ``end``, and the
setup errors the guest reported.  The same shape is built from the
simulator's report by :mod:`flowsim.conform.compare`, so comparing is a walk
over two equal structures.
"""

from __future__ import annotations

import contextlib

import attrs

from flowsim.conform.guest import PROBE_TABLE, ScenarioPlan, TrafficPlan
from flowsim.conform.parse import (
    CtLine, Section, canonical_addr, parse_bytes, parse_conntrack, parse_links, parse_nft_json, parse_snmp,
    parse_sockets,
)

__all__ = ["ConnObservation", "ScenarioObservation", "observe", "find_ct", "describe"]

DIRS = ("original", "reply")
PHASES = ("mid", "end")


@attrs.define
class ConnObservation:
    """One connection as the kernel showed it."""

    name: str
    proto: str
    ct: dict = attrs.field(factory=dict)          # (netns, phase) -> CtLine | None
    slow: dict = attrs.field(factory=dict)        # netns -> {dir: packets the flowtable did not steal}
    delivered: dict = attrs.field(factory=dict)   # dir -> packets into the receiving host
    data_segs: dict = attrs.field(factory=dict)   # dir -> of them, TCP segments with payload (data_segs_in)
    short_segs: dict = attrs.field(factory=dict)  # dir -> (packets, IP bytes) of data segments below the write size
    retrans: dict = attrs.field(factory=dict)     # dir -> (segments, payload bytes) its sender sent again
    bytes: dict = attrs.field(factory=dict)       # dir -> bytes the receiving socket got


@attrs.define
class ScenarioObservation:
    """One scenario as the kernel showed it."""

    name: str
    file: str
    conns: dict = attrs.field(factory=dict)       # traffic name -> ConnObservation
    rules: dict = attrs.field(factory=dict)       # netns -> tuple[NftRule]
    counters: dict = attrs.field(factory=dict)    # netns -> {name: packets}
    links: dict = attrs.field(factory=dict)       # netns -> {ifname: stats}
    snmp: dict = attrs.field(factory=dict)        # netns -> {ratelimit_*: ICMP errors refused} (boots since 2026-12-04)
    errors: list = attrs.field(factory=list)
    notes: list = attrs.field(factory=list)
    seconds: float | None = None


def find_ct(entries: list[CtLine], t: TrafficPlan) -> CtLine | None:
    """The entry of connection *t*: its original tuple as the client sent it (before any NAT)."""
    ports = (None, None) if t.proto == "gre" else (t.sport, t.dport)  # GRE's listing has keys, no ports
    want = (t.proto, canonical_addr(t.src), canonical_addr(t.dst), *ports)
    return next((e for e in entries if e.key() == want), None)


def observe(plan: ScenarioPlan, sections: list[Section]) -> ScenarioObservation:
    """The kernel's facts for *plan* from its sections (see the module docstring)."""
    # the scenario's id in this boot: found by name, so that a saved run can be replayed for a subset
    sid = next((s.scenario for s in sections if s.kind == "begin" and s.text.strip() == plan.name), str(plan.index))
    mine = [s for s in sections if s.scenario == sid]
    obs = ScenarioObservation(plan.name, plan.file)
    by = {(s.kind, s.netns, s.phase): s for s in mine}
    for s in mine:
        if s.kind == "error":
            obs.errors.append(s.text.strip())
        elif s.kind in ("note", "stderr") and "timeout" in s.text or s.kind == "stderr":
            obs.notes.append(f"{s.netns or ''} {s.text.strip()}".strip())
    begin = next((s for s in mine if s.kind == "begin"), None)
    finish = next((s for s in mine if s.kind == "finish"), None)
    if begin and finish and begin.phase:
        with contextlib.suppress(ValueError):
            obs.seconds = round(float(finish.text.strip()) - float(begin.phase), 2)
    received = parse_bytes(by[("bytes", None, None)].text) if ("bytes", None, None) in by else {}
    nft_end = {ns: parse_nft_json(by[("nft", ns, "end")].text) for ns in plan.namespaces
               if ("nft", ns, "end") in by}
    for t in plan.traffic:
        c = ConnObservation(t.name, t.proto)
        for ns in plan.flowtable_netns:
            for phase in PHASES:
                sec = by.get(("conntrack", ns, phase))
                c.ct[(ns, phase)] = find_ct(parse_conntrack(sec.text), t) if sec else None
            state = nft_end.get(ns)
            if state is not None:
                c.slow[ns] = {d: _probe_count(state, f"{t.tag}_slow_{d}") for d in DIRS}
        # each direction's receiving end: the server gets the original direction, the client the reply
        ends = {"original": nft_end.get(t.server), "reply": nft_end.get(t.client)}
        c.delivered = {d: _probe_count(ends[d], f"{t.tag}_in_{d}") for d in DIRS}
        if t.proto == "tcp":
            c.data_segs = {d: _probe_count(ends[d], f"{t.tag}_data_{d}") for d in DIRS}
            # boots before the short-segment counters have none: None, and the comparison falls back
            c.short_segs = {d: _probe_counter(ends[d], f"{t.tag}_short_{d}") for d in DIRS}
        c.bytes = {"original": received.get(f"{t.tag}.srv"), "reply": received.get(f"{t.tag}.cli")}
        if t.proto == "tcp":
            c.retrans = {"original": _retrans(by.get(("sockets", t.client, "mid")), t.sport, t.dport),
                         "reply": _retrans(by.get(("sockets", t.server, "mid")), t.listen_port, t.sport)}
        obs.conns[t.name] = c
    for ns, state in nft_end.items():
        if state.error:
            obs.errors.append(f"{ns}: nft -j list ruleset: {state.error}")
        obs.rules[ns] = tuple(r for r in state.rules if r.table != PROBE_TABLE)
        obs.counters[ns] = {name: v[0] for (fam, table, name), v in state.counters.items() if table != PROBE_TABLE}
        links = by.get(("links", ns, "end"))
        obs.links[ns] = parse_links(links.text) if links else {}
        snmp = by.get(("snmp", ns, "end"))
        if snmp is not None:
            obs.snmp[ns] = parse_snmp(snmp.text)
    if not mine:
        obs.errors.append("the guest printed nothing for this scenario")
    elif ("uptime", None, "end") not in by and not obs.errors:
        obs.errors.append("the scenario did not finish (no end snapshot)")
    return obs


def _probe_count(state, name: str) -> int | None:
    """Packets of the probe table's named counter *name* in a namespace's end state (None: not there)."""
    if state is None:
        return None
    return state.counters.get(("inet", PROBE_TABLE, name), (None,))[0]


def _retrans(section: Section | None, lport: int, pport: int) -> tuple[int, int] | None:
    """(segments, payload bytes) the socket with these ports sent again, from the ``mid`` snapshot's
    ``ss -tinH`` (``tcpi_total_retrans``, ``tcpi_bytes_retrans``); None when the boot has no such section
    (before 2026-12-02), the socket is gone (a sender that gave up) or ss could not read its ``tcp_info``.
    The peer port is the client's own: NAT keeps it unless it clashes (nf_nat_l4proto_unique_tuple)."""
    if section is None:
        return None
    sock = next((x for x in parse_sockets(section.text) if (x.lport, x.pport) == (lport, pport)), None)
    if sock is None or sock.retrans is None or sock.bytes_retrans is None:
        return None
    return sock.retrans, sock.bytes_retrans


def _probe_counter(state, name: str) -> tuple[int, int] | None:
    """(packets, bytes) of the probe table's named counter *name* (None: not there)."""
    if state is None:
        return None
    return state.counters.get(("inet", PROBE_TABLE, name))


def describe(obs: ScenarioObservation) -> list[str]:
    """A short human summary of what the kernel showed (for ``--kernel-only`` runs and the docs)."""
    lines = [f"{obs.name}: {obs.seconds} s" + (f"; errors: {obs.errors}" if obs.errors else "")]
    for c in obs.conns.values():
        cts = []
        for (ns, phase), e in c.ct.items():
            if e is None:
                cts.append(f"{ns}/{phase}: -")
            else:
                cts.append(f"{ns}/{phase}: {e.state or ''}{' OFFLOAD' if e.offloaded else ''}"
                           f"{' UNREPLIED' if 'UNREPLIED' in e.flags else ''} "
                           f"pk={e.original.packets}/{e.reply.packets}")
        lines.append(f"  {c.name}: slow={c.slow} delivered={c.delivered} bytes={c.bytes}; " + "; ".join(cts))
    for ns, rules in obs.rules.items():
        for r in rules:
            lines.append(f"  {ns} {r.table}/{r.chain}#{r.index} [{r.text}] packets={r.packets}")
        for name, packets in obs.counters.get(ns, {}).items():
            lines.append(f"  {ns} counter {name} packets={packets}")
    return lines
