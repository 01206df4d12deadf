"""The simulator's prediction for a scenario, and its comparison with what the kernel showed.

Theory of operation
-------------------
:func:`simulate` is the one adapter to the simulator: it runs
:class:`flowsim.sim.simulation.Simulation` under the profile matching the booted kernel
(``linux-6.12`` for ``debian-6.12``, ``linux-6.1`` for ``debian-6.1``) and
returns the ``flowsim run --json`` report, plus ``rule_counters`` (the
anonymous ``counter`` of each rule, which the report leaves out).

:func:`compare` walks the connections of a :class:`ScenarioObservation`
(:mod:`flowsim.conform.observe`) and states, for each, the facts both sides
can state, as :class:`Fact` rows (kernel value, simulator value, tolerance,
verdict):

* ``offloaded`` — a flow was created for the connection in the flowtable
  namespace (kernel: ``[OFFLOAD]`` in the ``mid`` snapshot; simulator: a
  flow with the connection's original tuple in that namespace's flowtable);
* ``ct shown`` — what ``conntrack -L`` prints at the end: the TCP state
  (which the kernel hides while a connection is offloaded — the simulator's
  entry is printed by the same rule), ``UNREPLIED``, ``ASSURED``,
  ``OFFLOAD``;
* ``ct packets/bytes`` per direction — conntrack accounting at the end
  (the flowtable ``counter`` flag decides whether fast-path packets count);
* ``slow path``, ``fast path``, ``delivered`` per direction — packets the
  flowtable did not steal (the harness's prerouting probe), the rest of
  what was delivered (for TCP the model's side by the same rule, so a
  packet fast-pathed and then dropped counts on neither side), and what the
  receiving host's input hook counted;
* per rule of the topology's own rulesets, and per named counter, the
  packets counted.

Tolerances.  UDP is compared exactly: the guest sends exactly the datagrams
the traffic table describes.  TCP is simulated with ``acks = "linux"`` (the
harness sets it: the guest's sockets are Linux's), so the model sends pure
ACKs as a Linux receiver does (quick ACKs, then one per two full segments
or on the 40 ms delayed-ACK timer); how many the real receiver sends still
depends on timing (ping-pong mode, when the reader runs), and the teardown
may fold the last ACK into the FIN.  So a TCP count may exceed the simulator's by up
to ``2 + (data segments the other side sent)`` where those ACKs are counted
(delivered; fast or slow path when the whole direction takes it; conntrack
accounting that includes fast-path packets), less the pure ACKs the model
sent there (the window keeps its width and moves down by them), plus 3 retransmitted segments
(tail-loss probes and RTOs happen when TCG stalls a virtual CPU), by 2
elsewhere, and be 1 below it (and the model's pure ACKs below, where counted).  Since 2026-12-02 the
guest reads each sender's retransmissions from its socket (``ss -tinH`` at the ``mid`` snapshot:
``tcpi_total_retrans``, ``tcpi_bytes_retrans``), and those measured replace the 3.  Where every packet
is counted the window also moves by the data segments the kernel's sender made of the same writes: sub-MSS
writes queued while an earlier segment has not left the host merge into one segment (autocorking, TSQ, a
full congestion window), and writes queued into one GSO skb leave cut at the receive window's edge when the
receiver reads slowly; both depend on when softirqs and processes run.  The guest's probe counts the data
segments each receiver got, and the difference from the model's moves the low end (fewer) or the high end
(more) by exactly that many, shown in the tolerance column, only when every byte arrived.  Where the
model's writes exceed the flow's MTU and take the slow path in bulk, the probe also counts the data segments
shorter than the writes (packets and bytes): only those pieces of cut writes can fit the MTU and leave the
slow path, so a slow-path count's low end moves by the pieces the kernel had more, bytes by their bytes.
Byte counts get the same allowance, ACKs
counted at the largest control packet (an IP header plus 40 bytes of TCP
header and options) and retransmissions at the data packet size.  The rule
that creates flows (``flow add``) is always exact: one per flow.

A disagreement listed exactly in
:data:`flowsim.conform.known.KNOWN_DIFFERENCES` (scenario, subject, fact,
kernel line) is reported as ``known`` with its cause and kernel source, and
does not fail the run; the harness applies that table to both modes.
"""

from __future__ import annotations

import re

import attrs

from flowsim.config.topology import load_topology
from flowsim.conform.guest import IP_HEADER, ScenarioPlan, TrafficPlan
from flowsim.conform.observe import DIRS, ConnObservation, ScenarioObservation
from flowsim.conform.parse import canonical_addr
from flowsim.profiles import get_profile
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation
from flowsim.sim.traffic import L4_PROTO

__all__ = ["Fact", "simulate", "compare", "summarize", "format_facts", "Tolerance"]

OTHER = {"original": "reply", "reply": "original"}
TCP_CONTROL_SLACK = 2   # kernel-only control packets per direction (FIN/ACK folding, window updates)
TCP_RETRANSMITS = 3     # data segments Linux may send twice (tail loss probe, RTO) when TCG stalls a CPU


@attrs.frozen
class Tolerance:
    """kernel − simulator must lie in [low, high]."""

    low: int = 0
    high: int = 0
    why: str = "exact"

    def accepts(self, kernel, sim) -> bool:
        if isinstance(kernel, (int, float)) and isinstance(sim, (int, float)) \
                and not isinstance(kernel, bool) and not isinstance(sim, bool):
            return self.low <= kernel - sim <= self.high
        return kernel == sim

    def text(self) -> str:
        if self.low == self.high == 0:
            return "exact"
        return f"{self.low:+d}..{self.high:+d} ({self.why})"


EXACT = Tolerance()


@attrs.frozen
class Fact:
    """One compared fact of one scenario."""

    scenario: str
    subject: str        # a connection name, or "NETNS rule …" / "NETNS counter NAME"
    fact: str
    kernel: object
    sim: object
    tolerance: str
    status: str         # agrees | differs | known | n/a
    note: str = ""


# ---------------------------------------------------------------------- simulator

def simulate(topology_path: str, profile: str, traffic: list | None = None, sequential: bool = False) -> dict:
    """The simulator's report for *topology_path* under *profile*, plus ``rule_counters``.

    *traffic* (:class:`flowsim.sim.traffic.TrafficSpec` list) replaces the file's traffic tables: the
    harness passes the tables as the guest plays them (:func:`flowsim.conform.harness.plan_traffic`), one
    after the other (*sequential*).
    """
    sim = Simulation(load_topology(topology_path), get_profile(profile), traffic=traffic, sequential=sequential)
    sim.run()
    report = build_report(sim)
    rules = {}
    for st in sim.kernel.netns.values():
        nft = getattr(st, "nft", None)
        counters = getattr(nft, "rule_counters", None) or {}
        seen = set()
        for (family, table, chain, index, _expr), c in sorted(counters.items()):
            if (family, table, chain, index) not in seen:  # the rule's first counter, as the kernel parser keeps
                seen.add((family, table, chain, index))
                rules.setdefault(st.name, []).append({"family": family, "table": table, "chain": chain,
                                                      "index": index, "packets": c.packets, "bytes": c.bytes})
    report["rule_counters"] = rules
    acks: dict[str, dict[str, int]] = {}
    data: dict[str, dict[str, int]] = {}
    short: dict[str, dict[str, list[int]]] = {}
    for conv in sim.conversations:  # acks = "linux": the model's own pure ACKs, which the tolerances account for
        per = acks.setdefault(conv.spec.name, {"original": 0, "reply": 0})
        per["original"] += conv.client.pure_acks
        per["reply"] += conv.server.pure_acks if conv.server is not None else 0
        # the data segments each receiver got, against which the kernel's coalescing is measured
        segs = data.setdefault(conv.spec.name, {"original": 0, "reply": 0})
        segs["original"] += conv.server.data_segs_in if conv.server is not None else 0
        segs["reply"] += conv.client.data_segs_in
        # of them, the ones shorter than the writes (packets, IP bytes): what the probe's short counters count
        sh = short.setdefault(conv.spec.name, {"original": [0, 0], "reply": [0, 0]})
        for d, ep in (("original", conv.server), ("reply", conv.client)):
            if ep is not None:
                sh[d][0] += ep.short_segs_in
                sh[d][1] += ep.short_bytes_in
    report["pure_acks"] = acks
    report["data_segs_in"] = data
    report["short_segs_in"] = short
    return report


def _parse_endpoint(text: str) -> tuple[str, int | None]:
    text = text.strip()
    if text.startswith("["):
        addr, _, port = text[1:].partition("]:")
        return canonical_addr(addr), int(port) if port else None
    addr, sep, port = text.rpartition(":")
    if sep and port.isdigit() and "." in addr:
        return canonical_addr(addr), int(port)
    return canonical_addr(text), None


def _sim_tuple(text: str) -> tuple:
    left, _, right = text.partition("->")
    return (*_parse_endpoint(left), *_parse_endpoint(right))


def _conn_key(t: TrafficPlan, no_port: int | None = None) -> tuple:
    """(src, sport, dst, dport) of connection *t*; GRE has no ports: *no_port* stands for them (None in a
    conntrack entry's text, 0 in a flow's tuple)."""
    if t.proto == "gre":
        return (canonical_addr(t.src), no_port, canonical_addr(t.dst), no_port)
    return (canonical_addr(t.src), t.sport, canonical_addr(t.dst), t.dport)


def sim_ct(report: dict, netns: str, t: TrafficPlan) -> dict | None:
    """The simulator's conntrack entry of connection *t* in *netns* (by its original tuple)."""
    for e in report.get("conntrack", {}).get(netns, []):
        if e.get("proto") == t.proto and _sim_tuple(e.get("original", "")) == _conn_key(t):
            return e
    return None


def sim_flows(report: dict, netns: str, t: TrafficPlan) -> list[dict]:
    """The simulator's flows of connection *t* in *netns*'s flowtables (any state)."""
    out = []
    proto = L4_PROTO[t.proto]
    for ft in report.get("flowtables", []):
        if ft.get("netns") != netns:
            continue
        for f in ft.get("flows", []):
            tup = f.get("original", {}).get("tuple", {})
            if (canonical_addr(str(tup.get("src"))), tup.get("sport"), canonical_addr(str(tup.get("dst"))),
                    tup.get("dport")) == _conn_key(t, 0) and tup.get("l4proto") == proto:
                out.append(f)
    return out


# ---------------------------------------------------------------------- display rules

def kernel_ct_shown(e) -> str:
    """What ``conntrack -L`` shows of an entry, reduced to state and flags."""
    if e is None:
        return "(no entry)"
    parts = [e.state] if e.state else []
    parts += [f for f in ("UNREPLIED", "ASSURED", "OFFLOAD") if f in e.flags]
    return " ".join(parts) or "-"


def sim_ct_shown(e: dict | None) -> str:
    """The simulator's entry printed by conntrack's rules: no TCP state while offloaded."""
    if e is None:
        return "(no entry)"
    status = set(e.get("status", []))
    offloaded = "OFFLOAD" in status or "HW_OFFLOAD" in status
    parts = []
    if e.get("proto") == "tcp" and not offloaded:  # ct_seq_show skips timeout and state while offloaded
        parts.append(e.get("state"))
    if "SEEN_REPLY" not in status:
        parts.append("UNREPLIED")
    # one flag of OFFLOAD / ASSURED: an offloaded entry shows [OFFLOAD] instead of [ASSURED]
    parts.append("OFFLOAD" if offloaded else "ASSURED" if "ASSURED" in status else "")
    return " ".join(p for p in parts if p) or "-"


# ---------------------------------------------------------------------- tolerances

def _tcp_tolerance(t: TrafficPlan, d: str, acks_counted: bool, hdr: int = 1, size: int = 0,
                   sim_acks: int = 0, segments: int = 0, split: str = "",
                   short: tuple[int, int] | None = None, retrans: tuple[int, int] | None = None) -> Tolerance:
    """The TCP allowance of the module docstring; *hdr* > 1 scales it to bytes (*size*: a data segment's).

    *sim_acks*: the pure ACKs the simulation itself sent in direction *d* (``acks = "linux"``); where ACKs are
    counted the window moves down by them, keeping its width: the kernel may send fewer or more than the model.
    *segments*: the data segments the kernel's receiver got more (> 0) or fewer (< 0) than the model's
    (:func:`_segments_measured`); where every packet is counted that end of the window moves by them.
    *split* says where the pieces of a write the kernel split can go when the model's writes are too big for
    the fast path (``nf_flow_exceeds_mtu``) and take the slow path in bulk: pieces that fit are fast-pathed,
    so a slow-path count (``"leaves"``) may lose the whole write, a fast-path count (``"joins"``) gain both.
    *short*: the data segments shorter than the writes the kernel's receiver got more than the model's, and
    their IP bytes (:func:`_short_measured`): only such pieces can fit the flow's MTU, so where measured they
    bound what a slow-path count loses — the low end moves by them instead of by whole writes.
    *retrans*: the segments and payload bytes the direction's real sender sent again (its socket's
    ``tcp_info``, :func:`flowsim.conform.observe.observe`); where measured, the high end of a count of every
    packet allows exactly those instead of :data:`TCP_RETRANSMITS` segments.
    """
    if t.proto != "tcp":
        return EXACT
    other_data = t.reply_packets if d == "original" else t.packets
    shift = sim_acks if acks_counted else 0
    high = max(TCP_CONTROL_SLACK + (other_data if acks_counted else 0) - shift, TCP_CONTROL_SLACK)
    low = -1 - shift
    why = "TCP control" + (" + pure ACKs" if acks_counted else "")
    data = 0  # bytes of data segments the window's low end also moves by
    if acks_counted:  # what counts every packet also counts retransmissions (TLP/RTO under emulation)
        why += " + retransmissions"
        if segments < 0:
            low += segments
            why += f" + {-segments} writes coalesced"
        elif segments > 0:
            high += segments
            why += f" + {segments} writes split"
    if split == "leaves" and short is not None:
        # the kernel's data segments that are not short exceed the flow's MTU as the model's do and stay on
        # the slow path: kernel − model >= (data segments more) − (short pieces more), in packets and bytes
        pieces, pieces_bytes = short
        if pieces > 0:
            low, data = low + min(0, segments - pieces), max(pieces_bytes, 0)
            why += f" + {pieces} short pieces fast-pathed"
    elif segments > 0 and split == "leaves":  # a boot without the short counters: whole writes
        low, data = low - segments, segments * (size or 1)
        why += f" + {segments} split writes fast-pathed"
    elif segments > 0 and split == "joins":
        high += 2 * segments
        why += f" + {segments} split writes fast-pathed"
    if not acks_counted:
        again = 0
    elif retrans is None:  # a boot without the sockets' counters: TLPs and RTOs under emulation, a few
        again = TCP_RETRANSMITS * (size or 1)
    else:  # measured: each segment sent again, its payload and at most a full header
        again = retrans[1] + retrans[0] * hdr if hdr > 1 else retrans[0]
        why = why.replace(" + retransmissions", f" + {retrans[0]} retransmitted" if retrans[0] else "")
    return Tolerance(low * hdr - (data if hdr > 1 else 0), high * hdr + again, why)


def _delivered_whole(t: TrafficPlan, c: ConnObservation | None, d: str) -> bool:
    """The kernel's receiver got every byte of TCP direction *d*: only then do its segment counts measure how
    the sender cut and merged the writes (a stalled transfer's are data never sent)."""
    return c is not None and t.proto == "tcp" and c.bytes.get(d) == t.stream_bytes(d)


def _segments_measured(report: dict, t: TrafficPlan, c: ConnObservation | None, d: str) -> int:
    """How many more (> 0) or fewer (< 0) data segments the kernel's receiver counted in direction *d* than
    the model's: what the real sender's timing made of the same writes.

    Fewer: writes smaller than the MSS that the sender queues before the previous segment left the host merge
    into one segment (``tcp_sendmsg_locked`` appends to the unsent tail skb when ``tcp_push`` held it back:
    autocorking, ``tcp_should_autocork``; TSQ, ``tcp_small_queue_check``; a full congestion window,
    ``tcp_write_xmit``).  More: writes queued into one GSO-sized skb (``tcp_xmit_size_goal``) leave cut at
    the receive window's edge, not at write boundaries (``tcp_write_xmit`` → ``tcp_mss_split_point``) when
    the receiving application reads slowly.  Both depend on when softirqs and processes run, so the guest
    measures it: its probe counts the segments that carried payload (``data_segs_in``), the model counts its
    own.  Only when the kernel's receiver got every byte: fewer segments of a stalled transfer are data
    never sent.
    """
    if not _delivered_whole(t, c, d):
        return 0
    kernel = c.data_segs.get(d)
    sim = report.get("data_segs_in", {}).get(t.name, {}).get(d)
    return kernel - sim if kernel is not None and sim is not None else 0


def _short_measured(report: dict, t: TrafficPlan, c: ConnObservation | None, d: str) -> tuple[int, int] | None:
    """How many more data segments shorter than the writes the kernel's receiver counted in direction *d* than
    the model's, and how many more IP bytes they carried: the pieces of writes the kernel's sender cut at the
    receive window's edge (``tcp_write_xmit`` → ``tcp_mss_split_point``).  The net count of
    :func:`_segments_measured` hides a cut behind a merge elsewhere; these counters do not.  None for a boot
    without the counters (before 2026-12-02) or a transfer that did not complete."""
    if not _delivered_whole(t, c, d):
        return None
    kernel = c.short_segs.get(d)
    sim = report.get("short_segs_in", {}).get(t.name, {}).get(d)
    if kernel is None or sim is None:
        return None
    return kernel[0] - sim[0], kernel[1] - sim[1]


def _sim_acks(report: dict, t: TrafficPlan, d: str) -> int:
    """Pure ACKs the simulation's endpoints sent in direction *d* of *t* (:func:`simulate` counts them)."""
    return report.get("pure_acks", {}).get(t.name, {}).get(d, 0)


def _bulk(direction: dict, value: int | None) -> bool:
    """The simulator says (almost) the whole direction took this path."""
    sent = direction.get("sent", 0)
    return bool(value) and sent > 0 and value >= sent - 4


# ---------------------------------------------------------------------- comparison

def _fact(rows: list, scenario: str, subject: str, fact: str, kernel, sim, tol: Tolerance) -> None:
    if sim is None:
        status = "n/a"
    else:
        status = "agrees" if tol.accepts(kernel, sim) else "differs"
    rows.append(Fact(scenario, subject, fact, kernel, sim, tol.text(), status))


def _sim_slow(plan: ScenarioPlan, direction: dict) -> int | None:
    """The connection's packets the flowtable did not fast-path, as the probe counts them.

    The report's ``slowpath`` counts every slow verdict of a flowtable hook, which includes the outer
    packet of a tunnel missing the flowtable on the underlay (``l4proto-unsupported``) before its inner
    packet is fast-pathed on the tunnel device; with one flowtable namespace on the way, the packets
    sent minus those fast-pathed is what the kernel's probe sees.
    """
    if "sent" not in direction:
        return None
    if len(plan.flowtable_netns) != 1:
        return direction.get("slowpath")
    return max(0, direction["sent"] - direction.get("fastpath", 0))


def _compare_conn(rows: list, plan: ScenarioPlan, t: TrafficPlan, c: ConnObservation, report: dict) -> None:
    s = plan.name
    traffic = next((x for x in report.get("traffic", []) if x.get("name") == t.name), None)
    dirs = (traffic or {}).get("directions", {})
    kfast = {d: _kernel_fast(t, c, d) for d in DIRS}
    for ns in plan.flowtable_netns:
        kmid, kend = c.ct.get((ns, "mid")), c.ct.get((ns, "end"))
        # a flow torn down and collected is gone from the report: fast-path packets prove it existed.  The
        # kernel side likewise: [OFFLOAD] in a conntrack snapshot, or packets the flowtable stole (a short TCP
        # connection torn down by its FIN, flow_offload_teardown before 6.14, shows no [OFFLOAD] at mid-run).
        created = bool(sim_flows(report, ns, t)) or any(dirs.get(d, {}).get("fastpath") for d in DIRS)
        kcreated = (bool(kmid and kmid.offloaded) or bool(kend and kend.offloaded)
                    or (len(plan.flowtable_netns) == 1 and any((kfast[d] or 0) > 0 for d in DIRS)))
        _fact(rows, s, t.name, f"{ns}: offloaded (flow created)", kcreated, created, EXACT)
        sct = sim_ct(report, ns, t)
        _fact(rows, s, t.name, f"{ns}: conntrack shows at end", kernel_ct_shown(kend), sim_ct_shown(sct), EXACT)
        for d in DIRS:
            if kend is None or sct is None:
                continue
            kd, sd = getattr(kend, d), sct.get("counters", {}).get(d, {})
            # conntrack counts fast-path packets only with the flowtable counter flag: then ACKs count too.
            counts_all = sd.get("packets", 0) > (_sim_slow(plan, dirs.get(d, {})) or 0)
            acks = counts_all or _bulk(dirs.get(d, {}), _sim_slow(plan, dirs.get(d, {})))
            na, nc = _sim_acks(report, t, d), _segments_measured(report, t, c, d)
            nshort, again = _short_measured(report, t, c, d), c.retrans.get(d)
            split = "" if counts_all else _split_path(plan, dirs.get(d, {}), "leaves")
            _fact(rows, s, t.name, f"{ns}: ct packets {d}", kd.packets, sd.get("packets"),
                  _tcp_tolerance(t, d, acks, sim_acks=na, segments=nc, split=split, short=nshort, retrans=again))
            _fact(rows, s, t.name, f"{ns}: ct bytes {d}", kd.bytes, sd.get("bytes"),
                  _tcp_tolerance(t, d, acks, IP_HEADER[t.family] + 40,
                                 t.size if d == "original" else t.reply_size, sim_acks=na, segments=nc,
                                 split=split, short=nshort, retrans=again))
    for d in DIRS:
        sd, na, nc = dirs.get(d, {}), _sim_acks(report, t, d), _segments_measured(report, t, c, d)
        again = c.retrans.get(d)
        if not plan.flowtable_netns:  # no flowtable: no probe counts a path, and every packet takes the slow one
            _fact(rows, s, t.name, f"delivered {d}", c.delivered.get(d), sd.get("delivered"),
                  _tcp_tolerance(t, d, True, sim_acks=na, segments=nc, retrans=again))
            continue
        _fact(rows, s, t.name, f"slow path {d}", _kernel_slow(c, d), _sim_slow(plan, sd),
              _tcp_tolerance(t, d, _bulk(sd, _sim_slow(plan, sd)), sim_acks=na, segments=nc,
                             split=_split_path(plan, sd, "leaves"), short=_short_measured(report, t, c, d),
                             retrans=again))
        _fact(rows, s, t.name, f"fast path {d}", kfast[d], _sim_fast(plan, t, sd),
              _tcp_tolerance(t, d, bool(sd.get("fastpath")), sim_acks=na, segments=nc,
                             split=_split_path(plan, sd, "joins"), retrans=again))
        _fact(rows, s, t.name, f"delivered {d}", c.delivered.get(d), sd.get("delivered"),
              _tcp_tolerance(t, d, True, sim_acks=na, segments=nc, retrans=again))


def _sim_fast(plan: ScenarioPlan, t: TrafficPlan, direction: dict) -> int | None:
    """The model's side of the fast-path fact, by the kernel side's definition (:func:`_kernel_fast`): for TCP
    what was delivered less the slow path, so that a packet the flowtable forwarded and something after the
    router dropped counts on neither side (ip6ip6-over-pppoe on 7.2 and 7.3: the replies fast-pathed into the
    PPPoE session leave with tun0's address as source MAC, and the BRAS's ``pppoe_rcv`` drops them); UDP's,
    whose kernel side starts from what was sent, as the flowtable counted it."""
    slow, delivered = _sim_slow(plan, direction), direction.get("delivered")
    if t.proto != "tcp" or slow is None or delivered is None:
        return direction.get("fastpath")
    return delivered - slow


def _split_path(plan: ScenarioPlan, direction: dict, way: str) -> str:
    """*way* when the model's direction has a flow (some packets fast-pathed) but took the slow path in bulk
    (its writes too big for the flow's MTU), so that pieces of a write the kernel split may take the fast
    path; else ``""``."""
    return way if direction.get("fastpath") and _bulk(direction, _sim_slow(plan, direction)) else ""


def _kernel_slow(c: ConnObservation, d: str) -> int | None:
    """Packets of direction *d* the kernel's flowtables did not steal (the harness's prerouting probes)."""
    return sum(v[d] for v in c.slow.values() if v.get(d) is not None) if c.slow else None


def _kernel_fast(t: TrafficPlan, c: ConnObservation, d: str) -> int | None:
    """Fast path = what arrived at the router minus the slow path; UDP's and GRE's arrivals are exactly what was
    sent (a datagram dropped after the slow path still arrived), TCP's are taken as what was delivered."""
    kslow = _kernel_slow(c, d)
    arrived = (t.packets if d == "original" else t.reply_packets) if t.proto != "tcp" else c.delivered.get(d)
    return arrived - kslow if arrived is not None and kslow is not None else None


#: a rule's match that no TCP segment passes (an ICMP type, a UDP header field, another layer-4 protocol): its
#: counter owes nothing to the TCP stacks' timing (nft's listing, as the probe reads it)
_NOT_TCP = re.compile(r"\b(icmp|icmpv6|udp) (type|code|dport|sport|length)\b|\bl4proto (udp|icmp|ipv6-icmp|icmpv6|gre)\b")


def _aggregate_tolerance(plan: ScenarioPlan, report: dict, text: str, netns: str = "",
                         obs: ScenarioObservation | None = None) -> Tolerance:
    """A rule or named counter sums connections: exact for `flow add`, else the TCP allowances added up.

    In a connection's own end (*netns* is its client or server) a rule or counter sees the pure ACKs of
    that end's stack too (nft_flowtable.sh's ip4dscp0 in the server's input chain), as delivered does.
    """
    if "flow add" in text:
        return Tolerance(0, 0, "one per flow")
    if _NOT_TCP.search(text) and "tcp" not in text:
        return Tolerance(0, 0, "no TCP segment matches")
    low = high = 0
    for t in plan.traffic:
        if t.proto != "tcp":
            continue
        traffic = next((x for x in report.get("traffic", []) if x.get("name") == t.name), {})
        for d in DIRS:
            sd = traffic.get("directions", {}).get(d, {})
            c = obs.conns.get(t.name) if obs else None
            tol = _tcp_tolerance(t, d, _bulk(sd, _sim_slow(plan, sd)) or netns in (t.client, t.server),
                                 sim_acks=_sim_acks(report, t, d), segments=_segments_measured(report, t, c, d),
                                 retrans=c.retrans.get(d) if c is not None else None)
            low, high = low + tol.low, high + tol.high
    return Tolerance(low, high, "sum over TCP connections") if (low or high) else EXACT


def compare(plan: ScenarioPlan, obs: ScenarioObservation, report: dict) -> list[Fact]:
    """Every fact of one scenario, kernel against simulator (see the module docstring)."""
    rows: list[Fact] = []
    s = plan.name
    for err in obs.errors:
        rows.append(Fact(s, "guest", "set-up", err.splitlines()[0] if err else "error", None, "", "error",
                         " | ".join(err.splitlines()[1:3])))
    for t in plan.traffic:
        c = obs.conns.get(t.name)
        if c is not None:
            _compare_conn(rows, plan, t, c, report)
    sim_rules = {(ns, r["family"], r["table"], r["chain"], r["index"]): r
                 for ns, rules in report.get("rule_counters", {}).items() for r in rules}
    for ns, rules in obs.rules.items():
        for r in rules:
            sr = sim_rules.get((ns, r.family, r.table, r.chain, r.index))
            subject = f"{ns} rule {r.family} {r.table} {r.chain} #{r.index}"
            _fact(rows, s, subject, f"packets [{r.text}]", r.packets, sr["packets"] if sr else None,
                  _aggregate_tolerance(plan, report, r.text, ns, obs))
    for ns, counters in obs.counters.items():
        scounters = report.get("counters", {}).get(ns, {})
        for name, packets in counters.items():
            sc = next((v for k, v in scounters.items() if k.split()[-1] == name), None)
            _fact(rows, s, f"{ns} counter {name}", "packets", packets, sc["packets"] if sc else None,
                  _aggregate_tolerance(plan, report, "", ns, obs))
    # the ICMP errors each namespace's rate limits refused, where either side refused any (the run reports a
    # namespace only then: icmp_rate_limits); ip_error's own refusals have no kernel counter
    sim_limits = report.get("icmp_rate_limits", {})
    for ns, limits in obs.snmp.items():
        mine = sim_limits.get(ns, {})
        for kind, refused in limits.items():
            if refused or mine.get(kind):
                _fact(rows, s, f"{ns} icmp", f"errors refused: {kind}", refused, mine.get(kind, 0), EXACT)
    return rows


def summarize(rows: list[Fact]) -> dict[str, int]:
    out = {"agrees": 0, "differs": 0, "known": 0, "n/a": 0, "error": 0}
    for r in rows:
        out[r.status] = out.get(r.status, 0) + 1
    return out


def format_facts(rows: list[Fact], *, only_problems: bool = False) -> str:
    """The comparison as an aligned table (one row per fact)."""
    shown = [r for r in rows if not only_problems or r.status not in ("agrees",)]
    head = ("scenario", "subject", "fact", "kernel", "flowsim", "tolerance", "")
    table = [head] + [(r.scenario, r.subject, r.fact, _v(r.kernel), _v(r.sim), r.tolerance,
                       r.status + (f": {r.note}" if r.note else "")) for r in shown]
    widths = [max(len(row[i]) for row in table) for i in range(len(head) - 1)]
    lines = []
    for row in table:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _v(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)
