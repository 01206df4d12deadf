"""Why a connection was, or was not, offloaded: the answers of ``flowsim explain``.

Theory of operation
-------------------
After a run, every connection conntrack saw in a namespace that has a
flowtable is explained from what the simulation recorded, in the order the
kernel decides:

1. Did ``flow add @ft`` ever create a flow for it?  If not, the first
   ``nft_flow_offload_eval`` condition (``nft_flow_offload.c``) that
   refused it (``Flowtable.ct_failures``, a ``flow-add-*`` reason id) — for
   path failures with the device-path stack and aggregated info per
   direction, resolved again with
   :func:`flowsim.kernel.flowtable.path.nft_flow_route` so the answer can
   name the device to add, the tunnel setting to change or the kernel
   version that has the resolver.  If no refusal was recorded either, no
   ``flow add`` rule ever ran for the connection.
2. If it was offloaded: per direction, how many packets the fast path took and
   why the others stayed slow — reasons recorded against the flow's tuple
   (``mtu-exceeded``, ``tcp-syn-closing``…) and *near misses*: packets whose
   addresses and ports belong to the flow but whose key differs, with the
   differing fields (an empty tunnel field, a VLAN TCI with priority bits, a
   different ingress device).

Each answer is a plain sentence and, where a user can act, a fix.
"""

from __future__ import annotations

import attrs

from flowsim.kernel.conntrack import IP_CT_DIR_ORIGINAL
from flowsim.kernel.flowtable.path import XmitType, nft_flow_route
from flowsim.reasons import REASONS

__all__ = ["Explanation", "explain", "ADVICE"]

# reason id -> (what happened, in plain words; what to do about it, or None)
ADVICE: dict[str, tuple[str, str | None]] = {
    "flow-add-tcp-not-established": (
        "the TCP connection never became established (conntrack did not see the handshake complete), "
        "so `flow add` refused it", "make sure both directions of the handshake cross this router"),
    "flow-add-tcp-fin-rst": ("the only packets that reached `flow add` carried FIN or RST", None),
    "flow-add-helper": ("a conntrack helper is attached to the connection (or it needs sequence adjustment); "
                        "such connections stay on the slow path", "do not attach a helper to this traffic"),
    "flow-add-l4proto": ("only TCP, UDP and GRE connections can be offloaded", None),
    "flow-add-gre-nat": ("GRE connections with NAT or keys are not offloaded", None),
    "flow-add-ip-options": ("the packets carry IPv4 options", None),
    "flow-add-sec-path": ("the packets that reached `flow add` had been decrypted by IPsec; such packets are "
                          "never offloaded", "offload the direction before decryption, or not at all"),
    "flow-add-unconfirmed": ("`flow add` only ever saw the first packet of the connection (not yet confirmed)", None),
    "flow-add-already-offloaded": ("the connection already has a flow (in this or another flowtable)", None),
    "flow-add-ct-dying": ("the conntrack entry was dying when `flow add` ran", None),
    "flow-add-no-conntrack": ("the packet had no conntrack entry", "do not mark the traffic notrack"),
    "mtu-exceeded": ("packets are longer than the flow's MTU and go to the slow path (which fragments or "
                     "sends ICMP)", "lower the senders' MTU/MSS, or raise the MTU of the egress path"),
    "tcp-syn-closing": ("a SYN arrived on a CLOSING flow, which was torn down", None),
    "tcp-fin-rst": ("FIN/RST tore the flow down (kernels before 6.14)", None),
    "flow-teardown": ("packets arrived while the flow was being torn down", None),
    "ttl-expired": ("packets arrive with TTL/hop limit 1", None),
}

_NEAR_MISS = {
    "tun": "the packets' tunnel fields are empty although the flow expects the tunnel (nf_flow_skb_encap_protocol "
           "in nf_flow_table_ip.c: for a tunnel carried in PPPoE the raw PPP protocol is compared, so the "
           "fields stay zero)",
    "encap": "the packets' VLAN/PPPoE encapsulation differs from the flow's (e.g. a VLAN TCI with priority bits, "
             "while the path records only the VID)",
    "iifidx": "the packets arrive on another device than the one the flow expects",
    "src": "the packets' source address differs from the flow's (NAT?)",
    "dst": "the packets' destination address differs from the flow's (NAT?)",
}


@attrs.frozen
class Explanation:
    """One connection's answer."""

    netns: str
    flowtable: str
    connection: str
    original: dict  # the ct's ORIGINAL tuple: proto, src, dst, sport, dport
    offloaded: bool
    directions: dict  # "original"/"reply" -> {"fastpath": n, "slowpath": {reason: n}, "near_miss": [...]}
    stopped_by: str | None  # reason id of the first refusal, None when offloaded
    why: str
    fix: str | None
    paths: dict  # "original"/"reply" -> {"stack": [...], "info": {...}, "error": str|None}

    def to_dict(self) -> dict:
        return attrs.asdict(self)

    def text(self) -> str:
        lines = [f"{self.netns} @{self.flowtable}: {self.connection}",
                 f"  {'offloaded' if self.offloaded else 'NOT offloaded'}: {self.why}"]
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        said = {self.why}  # each explaining sentence once: a near miss that is the answer is not repeated
        for d, info in self.directions.items():
            slow = ", ".join(f"{k} {v}" for k, v in info.get("slowpath", {}).items()) or "-"
            lines.append(f"  {d}: fast path {info.get('fastpath', 0)}, slow path: {slow}")
            for miss in info.get("near_miss", ()):
                lines.append(f"    near miss ({miss['packets']} packets with the flow's addresses and ports but another "
                             f"key): {miss['differences']}")
                if not any(miss["reason"] in s for s in said):
                    lines.append(f"      {miss['reason']}")
                    said.add(miss["reason"])
        for d, p in self.paths.items():
            stack = " → ".join(f"{e['type']} {e['dev']}" for e in p.get("stack", ())) or "-"
            x = p.get("xfrm")
            if x is not None:  # the flow's route is an xfrm bundle: ESP in `mode` to `dst`, then the stack
                stack = (f"XFRM spi {x.get('spi', '?')} {x.get('mode', '')} {x.get('src', '?')} → {x.get('dst', '?')}"
                         f" (mtu {x['mtu']}), then {stack}")
            lines.append(f"  path {d}: {stack}" + (f"  [error: {p['error']}]" if p.get("error") else ""))
            for w in p.get("warnings", ()):
                lines.append(f"    warning: {w}")
        return "\n".join(lines)


# refusals every connection meets on its way (the handshake, the close, later packets once offloaded):
# an answer prefers any other reason the connection met
_ROUTINE = ("flow-add-tcp-not-established", "flow-add-unconfirmed", "flow-add-tcp-fin-rst",
            "flow-add-already-offloaded")


def _first_failure(per: dict | None) -> tuple[str, str] | None:
    """The refusal that explains a connection: the most frequent non-routine one, else the routine ones in order."""
    if not per:
        return None
    telling = [r for r in per if r not in _ROUTINE]
    if telling:
        rid = max(telling, key=lambda r: per[r][0])
    else:
        rid = next(r for r in _ROUTINE if r in per)
    return rid, per[rid][1]


def _field(key, name: str, st):
    """A key field as typed JSON data: integers, address text, device names, ``None`` for no tunnel."""
    value = getattr(key, name)
    if name == "encap":
        return [e.to_json() for e in value]
    if name == "tun":
        return None if value is None else value.to_dict()
    if name == "iifidx":
        dev = st.ns.by_index.get(value)
        return dev.name if dev is not None else value
    if name in ("src", "dst"):
        from flowsim.kernel.headers import addr_text
        return addr_text(value, key.l3proto)
    return value


_ETHERTYPES = {0x8100: "VLAN", 0x88A8: "802.1ad VLAN", 0x8864: "PPPoE session"}


def _encap_text(encap) -> str:
    if not encap:
        return "no VLAN/PPPoE header"
    parts = []
    for e in encap:
        name = _ETHERTYPES.get(e.proto, f"ethertype {e.proto:#06x}")
        if e.proto == 0x8864:
            parts.append(f"{name} {e.id:#06x}")
        elif e.proto in (0x8100, 0x88A8) and e.id >> 12:
            parts.append(f"{name} TCI {e.id:#06x} (VID {e.id & 0xFFF}, priority {e.id >> 13})")
        else:
            parts.append(f"{name} {e.id}")
    return " in ".join(parts)


def _tun_text(tun) -> str:
    if tun is None:
        return "no tunnel"
    d = tun.to_dict()
    family = "IPv4" if tun.l3_proto == 4 else "IPv6"
    return f"{d['src']} → {d['dst']} ({family} tunnel)"


def _value_text(key, name: str, st) -> str:
    """A key field in words, for the text answers."""
    if name == "encap":
        return _encap_text(key.encap)
    if name == "tun":
        return _tun_text(key.tun)
    return str(_field(key, name, st))


def _near_reason(name: str, sample, th) -> str:
    """Why packets differ from their flow in field *name*: the kernel behaviour behind it."""
    if name == "tun" and sample.tun is None and any(e.proto == 0x8864 for e in sample.encap):
        return _NEAR_MISS["tun"]
    if name == "encap" and th.in_vlan_ingress:
        return ("the flow's VLAN comes from a bridge VLAN added through switchdev (UNTAG_HW): the switch strips "
                "it before the CPU sees the packet, so only hardware offload can match it")
    if name == "encap" and any((e.id >> 12) for e in sample.encap):
        return "the packets' VLAN TCI carries priority bits; the path records only the VID"
    if name == "tun" and sample.tun is None:
        return "the packets carry no tunnel header although the flow expects the tunnel"
    return _NEAR_MISS.get(name, f"the packets' {name} differs from the flow's")


def _near_diff(name: str, sample, th, st) -> str:
    """One differing field in words: what the packets carry, what the flow expects."""
    return f"{name}: packets {_value_text(sample, name, st)}, flow {_value_text(th.key, name, st)}"


def _original(ct) -> dict:
    t = ct.tuplehash[IP_CT_DIR_ORIGINAL]
    return {"proto": {6: "tcp", 17: "udp", 47: "gre"}.get(t.l4proto, str(t.l4proto)), "src": str(t.src),
            "dst": str(t.dst), "sport": t.sport, "dport": t.dport}


def _endpoint(addr, port: int) -> str:
    """``addr:port``, IPv6 as ``[addr]:port``."""
    return f"[{addr}]:{port}" if addr.version == 6 else f"{addr}:{port}"


def _conn_text(ct) -> str:
    t = ct.tuplehash[IP_CT_DIR_ORIGINAL]
    proto = {6: "tcp", 17: "udp", 47: "gre"}.get(t.l4proto, str(t.l4proto))
    if t.l4proto not in (6, 17):  # GRE version 0: keyed by the addresses alone
        return f"{proto} {t.src} -> {t.dst}"
    return f"{proto} {_endpoint(t.src, t.sport)} -> {_endpoint(t.dst, t.dport)}"


def _paths(kernel, st, ft, ct) -> tuple[dict, str | None, str | None]:
    """Resolve both directions again: the stacks, the aggregate, and advice from the error."""
    orig = ct.tuplehash[0]
    back = st.ns.fib.lookup(orig.src)
    in_dev = back.dev
    out: dict = {}
    fix = why = None
    if in_dev is None:
        return out, f"no route back to {orig.src}", None
    fr = nft_flow_route(kernel.topo, st.name, (ct.tuplehash[0], ct.tuplehash[1]), 0, in_dev, ft.ref,
                        kernel.profile)
    for d, name in ((0, "original"), (1, "reply")):
        p = fr.paths[d]
        if p is None:
            out[name] = {"stack": [], "info": None, "error": None}
            continue
        out[name] = {"stack": [{"type": e.type.name, "dev": e.dev} for e in p.stack],
                     "info": p.info.to_json(st.ns) if p.info is not None else None,
                     "error": str(p.error) if p.error is not None else None,
                     "warnings": list(p.warnings)}
        if p.error is not None and why is None:
            why, fix = _path_advice(kernel, st, ft, p)
    return out, why, fix


def _xfrm_path(th) -> dict:
    """An XFRM direction: the bundle the flow was created with (the route the forward path's xfrm_lookup
    returned: the fib alone cannot show it), its SA and the MTU it leaves."""
    dst = th.dst
    sa = getattr(dst, "sa", None)
    out = {"dev": getattr(dst, "dev", None), "mtu": th.mtu}
    if sa is not None:
        out.update(spi=f"{sa.spi:#x}", mode=sa.mode, src=str(sa.src), dst=str(sa.dst), reqid=sa.reqid)
    return out


def _path_advice(kernel, st, ft, p) -> tuple[str, str | None]:
    err = p.error
    profile = kernel.profile
    route_dev = st.ns.devices.get(p.route.dev) if p.route is not None and p.route.dev else None
    kind = getattr(route_dev, "kind", None)
    if kind == "ipip" and not profile.ipip_fill_forward_path:
        return (f"kernel {profile.kernel} has no resolver for ipip tunnels (ipip_fill_forward_path, from 6.19): "
                f"the path ends at {route_dev.name}", "use a kernel >= 6.19 (profile linux-6.19 or later)")
    if kind == "ip6tnl" and not profile.ip6tnl_fill_forward_path:
        return (f"kernel {profile.kernel} has no resolver for ip6tnl tunnels (ip6_tnl_fill_forward_path, from 7.0)",
                "use a kernel >= 7.0")
    if "encaplimit" in err.reason or "ENCAP_LIMIT" in err.reason:
        return (f"{err.dev} is not configured with `encaplimit none`; from 7.1.5 the ip6tnl resolver refuses it",
                f"ip link set {err.dev} type ip6tnl encaplimit none (or create it so)")
    if "is not a device of flowtable" in err.reason:
        tunnels = [e.dev for e in p.stack if e.type.name == "TUN"]
        extra = f" (for tunnel {tunnels[0]}, the flowtable must list its underlay device)" if tunnels else ""
        return (f"the path's device {err.dev} is not in flowtable {ft.name}'s device list{extra}",
                f"add {err.dev} to `devices = {{ … }}` of flowtable {ft.name}")
    if "neighbour" in err.reason or "NUD" in err.reason:
        return (f"the neighbour was unresolved when the flow was created ({err.reason})",
                "make sure the next hop answers ARP/ND before traffic starts")
    if "VLAN" in err.reason or "vlan" in err.func:
        return (f"the bridge/VLAN path failed: {err.reason}", "add the VLAN to the bridge port (bridge vlan add)")
    return (f"path resolution failed: {err}", None)


def explain(sim) -> list[Explanation]:
    """Explain every connection of every namespace with a flowtable after ``sim.run()``."""
    kernel = sim.kernel
    out = []
    for st in kernel.netns.values():
        for ft in st.flowtables.values():
            for ct in st.conntrack.entries():
                if ct.tuplehash[0].l4proto not in (6, 17, 47):
                    continue
                out.append(_explain_ct(kernel, st, ft, ct, ft.by_ct.get(ct.id)))
    return out


def _explain_ct(kernel, st, ft, ct, flow) -> Explanation:
    directions: dict = {}
    paths, path_why, path_fix = _paths(kernel, st, ft, ct)
    if flow is not None:
        for d, name in ((0, "original"), (1, "reply")):
            th = flow.tuplehash[d]
            if th.xmit_type == XmitType.XFRM and name in paths:
                paths[name]["xfrm"] = _xfrm_path(th)
            misses = []
            near = ft.near_misses.get((flow.id, d))
            if near is not None:
                fields, n, sample = near
                reasons = list(dict.fromkeys(_near_reason(f, sample, th) for f in fields))
                misses.append({"fields": list(fields), "packets": n,
                               "values": {f: {"packet": _field(sample, f, st), "flow": _field(th.key, f, st)}
                                          for f in fields},
                               "differences": "; ".join(_near_diff(f, sample, th, st) for f in fields),
                               "reason": "; ".join(reasons)})
            directions[name] = {"fastpath": th.packets, "slowpath": dict(th.slow or {}), "near_miss": misses}
        slow_dirs = [n for n, d in directions.items() if not d["fastpath"]]
        if slow_dirs:
            d = slow_dirs[0]
            detail = directions[d]
            if detail["near_miss"]:
                miss = detail["near_miss"][0]
                why = f"the flow exists but {d} packets miss it (near miss below): {miss['reason']}"
                fix = None
            elif detail["slowpath"]:
                rid = max(detail["slowpath"], key=detail["slowpath"].get)
                why, fix = ADVICE.get(rid, (REASONS[rid].text, None))
                why = f"the flow exists but {d} packets leave the fast path: {why}"
            else:
                why, fix = f"the flow exists; no {d} packet reached the flowtable hook as a hit", path_fix
                if path_why:
                    why += f" ({path_why})"
        else:
            why, fix = "both directions take the fast path", None
        return Explanation(st.name, ft.name, _conn_text(ct), _original(ct), True, directions, None, why, fix, paths)
    failure = _first_failure(ft.ct_failures.get(ct.id))
    if failure is None:
        why = ("no `flow add @" + ft.name + "` rule ran for this connection: check the forward chain's rules "
               "(and that the traffic is forwarded by this namespace)")
        return Explanation(st.name, ft.name, _conn_text(ct), _original(ct), False, {}, None, why, None, paths)
    rid, detail = failure
    if rid == "flow-add-path":
        why, fix = path_why or f"path resolution failed: {detail}", path_fix
    else:
        why, fix = ADVICE.get(rid, (REASONS[rid].text, None))
        if detail:
            why += f" ({detail})"
    return Explanation(st.name, ft.name, _conn_text(ct), _original(ct), False, {}, rid, why, fix, paths)
