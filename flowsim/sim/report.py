"""The report of a run: one JSON-ready dict, and the same as readable tables.

Theory of operation
-------------------
:func:`build_report` reads a finished :class:`~flowsim.sim.simulation.Simulation` and
returns plain data (``json.dumps`` works on it as is):

``profile``, ``kernel``, ``topology``, ``flowtables_enabled``, ``time``
    the run's settings and the virtual time it ended at;
``packets``
    ``injected`` / ``delivered`` / ``dropped`` / ``in_flight`` (they add
    up: packet conservation), and the same per origin (``host`` endpoints,
    ``stack`` — ICMP errors the simulated kernels sent);
``drops``
    reason id (:mod:`flowsim.reasons`) → packets; ``drop_samples`` the first
    drops with time, packet, reason and where;
``flowtables``
    one ``Flowtable.report()`` per flowtable (netns, name, fastpath,
    slowpath, reasons, flows with both tuples and their counters);
``traffic``
    per table: ``directions.original`` / ``.reply`` with ``sent``,
    ``delivered``, ``dropped``, ``in_flight`` and the flowtable verdicts
    ``fastpath`` / ``slowpath`` (one per flowtable hook the packets met),
    ``icmp_errors`` the stack sent about it, and each flow's endpoints;
``conntrack``
    netns → entries: protocol, TCP state (UDP: UNREPLIED/REPLIED), status
    flags (IPS_* names, OFFLOAD included), both tuples, mark, per-direction
    packet/byte counters, seconds left;
``counters``
    netns → nft named counters (``family table name`` → packets, bytes);
``quotas`` (only when a namespace has named quotas)
    netns → nft named quotas (``family table name`` → ``quota`` bytes, ``consumed`` bytes, ``over`` (the
    ``over`` flag), ``exceeded``: consumed past the quota, ``nft_overquota``);
``replay``, ``replay_sources`` (only in a run with ``--replay``)
    one entry per frame of the replayed captures: file, index, time, device,
    the verdict at each flowtable hook it met (``hook`` NETNS/DEV,
    ``verdict``, ``reason``), its ``fate`` (``forwarded`` out of a replayed
    port ``where``, ``delivered``, ``dropped`` with ``reason`` and ``where``,
    ``in-flight``, ``skipped`` ``sent by DEV``) and the devices it went
    ``out`` of; per ``--replay`` option the counts of frames, injected
    ones, verdicts and fates (:mod:`flowsim.sim.replay`).  ``packets.by_origin``
    then has a ``replay`` entry too.

:func:`format_report` prints the same as aligned tables.
"""

from __future__ import annotations

import collections

from flowsim.kernel import conntrack as ctmod
from flowsim.kernel.stack.core import ORIGIN_HOST, ORIGIN_STACK
from flowsim.schemas import schema_id

__all__ = ["build_report", "format_report", "ct_status_names", "STATUS_BITS"]

#: IPS_* bits in report order
STATUS_BITS = (
    ("EXPECTED", ctmod.IPS_EXPECTED), ("SEEN_REPLY", ctmod.IPS_SEEN_REPLY), ("ASSURED", ctmod.IPS_ASSURED),
    ("CONFIRMED", ctmod.IPS_CONFIRMED), ("SRC_NAT", ctmod.IPS_SRC_NAT), ("DST_NAT", ctmod.IPS_DST_NAT),
    ("SEQ_ADJUST", ctmod.IPS_SEQ_ADJUST), ("SRC_NAT_DONE", ctmod.IPS_SRC_NAT_DONE),
    ("DST_NAT_DONE", ctmod.IPS_DST_NAT_DONE), ("DYING", ctmod.IPS_DYING),
    ("FIXED_TIMEOUT", ctmod.IPS_FIXED_TIMEOUT), ("NAT_CLASH", ctmod.IPS_NAT_CLASH), ("HELPER", ctmod.IPS_HELPER),
    ("OFFLOAD", ctmod.IPS_OFFLOAD), ("HW_OFFLOAD", ctmod.IPS_HW_OFFLOAD),
)
_L4 = {6: "tcp", 17: "udp", 1: "icmp", 58: "icmpv6", 4: "ipip", 41: "ipv6", 47: "gre"}
_DIRS = ("original", "reply")


def ct_status_names(status: int) -> list[str]:
    """The IPS_* flag names set in *status*."""
    return [name for name, bit in STATUS_BITS if status & bit]


def _addr(a) -> str:
    return f"[{a}]" if a.version == 6 else str(a)


def _tuple(t) -> str:
    if t.l4proto in (6, 17):
        return f"{_addr(t.src)}:{t.sport} -> {_addr(t.dst)}:{t.dport}"
    return f"{t.src} -> {t.dst}"


def _ct_entry(ct, now: float) -> dict:
    l4 = ct.l4proto
    if l4 == 6:
        state = ct.tcp_state.name
    else:
        state = "REPLIED" if ct.status & ctmod.IPS_SEEN_REPLY else "UNREPLIED"
    return {
        "id": ct.id, "proto": _L4.get(l4, str(l4)), "state": state, "status": ct_status_names(ct.status),
        "original": _tuple(ct.tuplehash[0]), "reply": _tuple(ct.tuplehash[1]), "mark": ct.mark,
        "timeout": round(ct.expires(now), 3),
        "counters": {d: {"packets": ct.acct[i].packets, "bytes": ct.acct[i].bytes} for i, d in enumerate(_DIRS)},
    }


def build_report(sim) -> dict:
    """Everything a run produced, as JSON-ready data (see the module docstring)."""
    k = sim.kernel
    ledger = k.ledger
    now = k.now
    totals = ledger.totals()
    origins: tuple[str, ...] = (ORIGIN_HOST, ORIGIN_STACK)
    if getattr(sim, "replay", None) is not None:
        from flowsim.sim.replay import ORIGIN_REPLAY  # here: a run without --replay never loads the replay module

        origins += (ORIGIN_REPLAY,)
    by_origin = {origin: {"injected": ledger.injected[origin], "delivered": ledger.delivered[origin]}
                 for origin in origins}
    per = ledger.per_traffic
    traffic = []
    for spec in sim.specs:
        dirs = {}
        for d in _DIRS:
            c = per.get((spec.name, d, ORIGIN_HOST), collections.Counter())
            acct = k.accounting.get((spec.name, d, ORIGIN_HOST), collections.Counter())
            sent, delivered, dropped = c["sent"], c["delivered"], c["dropped"]
            dirs[d] = {"sent": sent, "delivered": delivered, "dropped": dropped,
                       "in_flight": sent - delivered - dropped,
                       "fastpath": acct["fastpath"], "slowpath": acct["slowpath"]}
        icmp = collections.Counter()
        for d in _DIRS:
            icmp.update(per.get((spec.name, d, ORIGIN_STACK), collections.Counter()))
        flows = [c for c in sim.conversations if c.spec is spec]
        # the source its first flow used: a table without src has the one its connect chose (Endpoint.connect_saddr)
        src = flows[0].client.laddr if flows else spec.src
        traffic.append({
            "name": spec.name, "proto": spec.proto, "from": spec.netns, "src": str(src), "to": str(spec.dst),
            "dport": spec.dport, "directions": dirs,
            "icmp_errors": {"sent": icmp["sent"], "delivered": icmp["delivered"], "dropped": icmp["dropped"]},
            "flows": [c.report() for c in flows],
        })
    flowtables, conntrack, counters, quotas = [], {}, {}, {}
    for st in k.netns.values():
        for ft in st.flowtables.values():
            flowtables.append(ft.report(st.ns))
        if st.ct_active:
            conntrack[st.name] = [_ct_entry(ct, now) for ct in st.conntrack.entries()]
        if st.nft is not None and st.nft.named_counters:
            counters[st.name] = {f"{f} {t} {n}": {"packets": c.packets, "bytes": c.bytes}
                                 for (f, t, n), c in st.nft.named_counters.items()}
        if st.nft is not None and (named := st.nft.named_quotas()):
            quotas[st.name] = {f"{f} {t} {n}": {"quota": q.quota, "consumed": used, "over": q.over,
                                                "exceeded": used > q.quota} for (f, t, n), (q, used) in named.items()}
    report = {
        "schema": schema_id("run"), "topology": sim.topo.file, "description": sim.topo.description,
        "profile": k.profile.name, "kernel": k.profile.kernel, "flowtables_enabled": k.flowtables_enabled,
        "time": round(sim.end, 9), "duration": sim.duration,
        "packets": {**totals, "by_origin": by_origin},
        "drops": dict(sorted(ledger.dropped.items())),
        "drop_samples": [{"time": round(t, 9), "packet": p, "reason": r, "where": w}
                         for t, p, r, w in ledger.drop_log[:20]],
        "flowtables": flowtables, "traffic": traffic, "conntrack": conntrack, "counters": counters,
        "events": [{"at": e.at, "netns": e.netns, "command": e.command.text} for e in sim.events_run],
    }
    if quotas:  # only then: a run without named quotas keeps its keys
        report["quotas"] = quotas
    limited = {st.name: st.icmp_limits.counters() for st in k.netns.values() if st.icmp_limits.limited}
    if limited:  # only then, as quotas
        report["icmp_rate_limits"] = limited
    if getattr(sim, "replay", None) is not None:  # only then: the report of a run without --replay keeps its keys
        report["replay"], report["replay_sources"] = sim.replay.report()
    return report


# ----------------------------------------------------------------- text

def _table(headers: list[str], rows: list[list], indent: str = "  ") -> list[str]:
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    out = []
    for n, r in enumerate(cells):
        line = "  ".join(c.ljust(w) if i == 0 or not c.replace(".", "").isdigit() else c.rjust(w)
                         for i, (c, w) in enumerate(zip(r, widths)))
        out.append(indent + line.rstrip())
        if n == 0:
            out.append(indent + "  ".join("-" * w for w in widths))
    return out


#: the one-line legend printed under each table of :func:`format_report`
_LEGEND = {
    "traffic": "  sent/delivered/dropped: packets per direction; in flight: sent but neither delivered nor dropped "
               "when the run ended; fastpath/slowpath: flowtable hook verdicts (one per hook a packet met)",
    "flowtables": "  fastpath: packets the flowtable hook forwarded itself; slowpath: packets it passed to the normal "
                  "forward path (reasons at the right); drops: dropped by the hook; flows: in the table at the end",
    "drops": "  packets lost, per reason id (`flowsim reasons` explains each); e.g.: the first ones, where and why",
    "conntrack": "  connections at the end; pkts orig/reply: packets conntrack counted per direction (fast-path "
                 "packets bypass it unless the flowtable has the `counter` flag)",
    "counters": "  nft named counters at the end: packets and bytes that matched their rule",
    "quotas": "  nft named quotas at the end: bytes consumed (every packet that reached a rule naming the quota); "
              "exceeded: past the quota, where `quota` breaks the rule and `quota over` lets it go on",
    "icmp_rate_limits": "  ICMP errors a namespace did not send: ratelimit_global (icmp_global_allow, both families), "
                        "ratelimit_host / ratelimit_host6 (per destination, inet_peer_xrlim_allow: /proc/net/snmp's "
                        "OutRateLimitHost, snmp6's Icmp6OutRateLimitHost), ip_error (ip_error's own check, not counted "
                        "by the kernel)",
    "replay": "  frames of each --replay capture: injected at the device's receive path, skipped when the device "
              "sent them; verdicts: one per flowtable hook met; forwarded: left through a replayed port (absorbed "
              "on its wire, counted delivered)",
}


def format_report(r: dict) -> str:
    """The report as readable tables."""
    p = r["packets"]
    lines = [
        f"flowsim run {r['topology']}",
        f"  profile {r['profile']} (kernel {r['kernel']}), flowtables {'on' if r['flowtables_enabled'] else 'off'}, "
        f"virtual time {r['time'] * 1e3:.3f} ms",
        f"  packets: injected {p['injected']} (hosts {p['by_origin']['host']['injected']}, "
        f"ICMP errors {p['by_origin']['stack']['injected']}), delivered {p['delivered']}, dropped {p['dropped']}, "
        f"in flight {p['in_flight']}",
    ]
    if "replay" in p["by_origin"]:
        lines[2] = lines[2].replace("), delivered", f", replayed {p['by_origin']['replay']['injected']}), delivered")
    rows = []
    for t in r["traffic"]:
        for d in _DIRS:
            x = t["directions"][d]
            rows.append([t["name"] if d == "original" else "", d, x["sent"], x["delivered"], x["dropped"],
                         x["in_flight"], x["fastpath"], x["slowpath"]])
    if r["traffic"] or not r.get("replay_sources"):  # a replay alone (--no-traffic) has no traffic table
        lines += ["", "traffic"]
        lines += _table(["name", "direction", "sent", "delivered", "dropped", "in flight", "fastpath", "slowpath"],
                        rows)
        lines.append(_LEGEND["traffic"])
    if r["flowtables"]:
        lines += ["", "flowtables"]
        rows = [[f["netns"], f["name"], f["fastpath"], f["slowpath"], f.get("drops", 0), len(f.get("flows", [])),
                 ", ".join(f"{k} {v}" for k, v in f.get("reasons", {}).items()) or "-"] for f in r["flowtables"]]
        lines += _table(["netns", "flowtable", "fastpath", "slowpath", "drops", "flows", "slow-path reasons"], rows)
        lines.append(_LEGEND["flowtables"])
        for f in r["flowtables"]:
            if f.get("gso", {}).get("segmented"):
                lines.append(f"  {f['netns']} @{f['name']}: {f['gso']['segmented']} GSO skbs segmented in software "
                             f"into {f['gso']['segments']} before the encap push (needs_gso_segment)")
    if r.get("events"):
        lines += ["", "events"]
        lines += [f"  {e['at'] * 1e3:9.3f} ms  {e['netns']}: {e['command']}" for e in r["events"]]
    if r["drops"]:
        lines += ["", "drops"]
        lines += _table(["reason", "packets"], [[k, v] for k, v in r["drops"].items()])
        lines.append(_LEGEND["drops"])
        for s in r["drop_samples"][:5]:
            lines.append(f"    e.g. {s['packet']} at {s['time'] * 1e3:.3f} ms in {s['where']}: {s['reason']}")
    for netns, entries in r["conntrack"].items():
        if not entries:
            continue
        lines += ["", f"conntrack ({netns})"]
        rows = [[e["proto"], e["original"], e["reply"], e["state"], ",".join(e["status"]) or "-",
                 e["counters"]["original"]["packets"], e["counters"]["reply"]["packets"]] for e in entries]
        lines += _table(["proto", "original", "reply", "state", "status", "pkts orig", "pkts reply"], rows)
        lines.append(_LEGEND["conntrack"])
    for netns, cs in r["counters"].items():
        lines += ["", f"nft counters ({netns})"]
        lines += _table(["counter", "packets", "bytes"], [[k, v["packets"], v["bytes"]] for k, v in cs.items()])
        lines.append(_LEGEND["counters"])
    for netns, qs in r.get("quotas", {}).items():
        lines += ["", f"nft quotas ({netns})"]
        lines += _table(["quota", "bytes", "consumed", "mode", "state"],
                        [[k, v["quota"], v["consumed"], "over" if v["over"] else "until",
                          "exceeded" if v["exceeded"] else "within"] for k, v in qs.items()])
        lines.append(_LEGEND["quotas"])
    if r.get("icmp_rate_limits"):
        lines += ["", "icmp rate limits"]
        kinds = ["ratelimit_global", "ratelimit_host", "ratelimit_host6", "ip_error"]
        lines += _table(["netns", *kinds], [[ns, *(v[k] for k in kinds)] for ns, v in r["icmp_rate_limits"].items()])
        lines.append(_LEGEND["icmp_rate_limits"])
    if r.get("replay_sources"):
        lines += ["", "replay"]
        rows = []
        for s in r["replay_sources"]:
            first = [s["option"], s["frames"], s["injected"]]
            counts = [("verdict", k, v) for k, v in s["verdicts"].items()] + [("fate", k, v) for k, v in s["fates"].items()]
            for n, (what, k, v) in enumerate(counts or [("-", "-", "")]):
                rows.append((first if n == 0 else ["", "", ""]) + [what, k, v])
        lines += _table(["replay", "frames", "injected", "what", "verdict / fate", "packets"], rows)
        lines.append(_LEGEND["replay"])
    return "\n".join(lines) + "\n"
