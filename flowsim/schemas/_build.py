"""Build the shipped JSON Schemas: ``python -m flowsim.schemas._build`` rewrites ``flowsim/schemas/*.json``.

The schemas are written here as Python so that the reason-id enum comes from
:data:`flowsim.reasons.REASONS` (the one table) and the shapes shared by
several outputs (a flow tuple, a path's info) are written once.
"""

from __future__ import annotations

import json
import pathlib

from flowsim.profiles import PROFILES, SWITCHES
from flowsim.reasons import REASONS
from flowsim.schemas import NAMES, schema_id

HERE = pathlib.Path(__file__).resolve().parent
DRAFT = "https://json-schema.org/draft/2020-12/schema"

S = {"type": "string"}
I = {"type": "integer"}  # noqa: E741
NUM = {"type": "number"}
B = {"type": "boolean"}
NULL = {"type": "null"}
REASON = {"$ref": "#/$defs/reason"}
SLOW_REASON = {"$ref": "#/$defs/slowpath_reason"}


def obj(props: dict, optional: tuple = ()) -> dict:
    """A fixed-shape object: every property required except *optional*, no other property."""
    return {"type": "object", "properties": props, "required": [k for k in props if k not in optional],
            "additionalProperties": False}


def arr(item: dict) -> dict:
    return {"type": "array", "items": item}


def nullable(x: dict) -> dict:
    if set(x) == {"type"} and isinstance(x["type"], str):
        return {"type": [x["type"], "null"]}
    return {"anyOf": [x, NULL]}


def enum(*values) -> dict:
    return {"enum": list(values)}


def counts(keys: dict | None = None) -> dict:
    """An object of counts keyed by *keys* (a schema for the property names)."""
    out = {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}}
    if keys is not None:
        out["propertyNames"] = keys
    return out


def const_schema(name: str) -> dict:
    return {"const": schema_id(name)}


def reason_defs() -> dict:
    ids = sorted(REASONS)
    return {
        "reason": {"enum": ids, "description": "a reason id of flowsim/reasons.py (flowsim reasons)"},
        "slowpath_reason": {"enum": [r for r in ids if REASONS[r].verdict == "accept"],
                            "description": "a reason id with verdict accept (the packet takes the slow path)"},
    }


ENCAP = obj({"id": I, "proto": I})
TUN = obj({"src": S, "dst": S, "l3_proto": I})
FLOW_TUPLE = obj({"src": S, "dst": S, "sport": I, "dport": I, "l3proto": I, "l4proto": I, "iifidx": I,
                  "encap": arr(ENCAP), "tun": nullable(TUN)})
XMIT = enum("unspec", "neigh", "direct", "xfrm")
PATH_INFO = obj({"indev": nullable(S), "indev_ifindex": nullable(I), "outdev": nullable(S),
                 "outdev_ifindex": nullable(I), "h_source": S, "h_dest": S, "encap": arr(ENCAP),
                 "ingress_vlans": I, "tun": nullable(TUN), "needs_gso_segment": B, "xmit_type": XMIT},
                optional=("xmit_type",))
STACK_TYPE = enum("ETHERNET", "VLAN", "PPPOE", "DSA", "BRIDGE", "TUN", "MTK_WDMA")
STACK_ENTRY = obj({"type": STACK_TYPE, "dev": S, "ifindex": I, "h_dest": S, "id": I, "proto": {"type": ["integer", "string"]},
                   "port": I, "src": S, "dst": S, "l3_proto": I, "vlan_id": I, "vlan_mode": S, "vlan_proto": I},
                  optional=("ifindex", "h_dest", "id", "proto", "port", "src", "dst", "l3_proto", "vlan_id",
                            "vlan_mode", "vlan_proto"))


def run_schema() -> dict:
    direction = obj({"sent": I, "delivered": I, "dropped": I, "in_flight": I, "fastpath": I, "slowpath": I})
    endpoint = obj({"netns": S, "local": S, "remote": S, "state": S, "sent": I, "received": I, "icmp_errors": I,
                    "pmtu": I})
    # direct xmit: out_ifidx, h_source, h_dest; neigh/xfrm: ifidx, route (flow_offload_tuple's union)
    tuplehash = obj({"dir": enum("original", "reply"), "tuple": FLOW_TUPLE, "iif": nullable(S), "ifidx": I,
                     "out_dev": nullable(S), "out_ifidx": I, "xmit_type": XMIT, "mtu": I, "h_source": S, "h_dest": S,
                     "route": nullable(S), "packets": I, "bytes": I, "slowpath": counts(SLOW_REASON)},
                    optional=("ifidx", "out_ifidx", "h_source", "h_dest", "route"))
    flowtable = obj({
        "netns": S, "name": S, "family": enum("ip", "ip6", "inet"), "devices": arr(S),
        "flags": arr(enum("offload", "counter")), "fastpath": I, "slowpath": I, "drops": I,
        "reasons": counts(REASON), "flows_created": I, "flows_removed": I, "flow_add_failures": counts(REASON),
        "flows": arr(obj({"id": I, "state": enum("active", "closing", "teardown"), "ct_id": I, "created": NUM,
                          "expires": NUM, "original": tuplehash, "reply": tuplehash})),
        "kernel_bugs": arr(S),
        "skb_cost": obj({"copies": I, "bytes_copied": I, "reallocs": I, "pull_bugs": I}),
        "gso": obj({"segmented": I, "segments": I}),
    })
    pk = obj({"packets": I, "bytes": I})
    ct = obj({"id": I, "proto": S, "original": S, "reply": S, "state": S, "status": arr(S), "timeout": NUM,
              "mark": I, "counters": obj({"original": pk, "reply": pk})})
    origin = obj({"injected": I, "delivered": I})
    # --replay (flowsim.sim.replay): one entry per frame of the captures, one summary per option
    hook_verdict = obj({"hook": nullable(S), "verdict": enum("fastpath", "slowpath", "drop"), "reason": nullable(REASON)})
    replay_frame = obj({"file": S, "index": I, "time": NUM, "device": S, "verdicts": arr(hook_verdict),
                        "fate": enum("forwarded", "delivered", "dropped", "in-flight", "skipped"),
                        "reason": nullable(S), "where": nullable(S), "out": arr(S)})
    replay_source = obj({"option": S, "netns": S, "device": S, "file": S, "frames": I, "injected": I,
                         "verdicts": counts(), "fates": counts()})
    return obj({
        "schema": const_schema("run"), "topology": S, "description": S, "profile": S, "kernel": S,
        "flowtables_enabled": B, "time": NUM, "duration": nullable(NUM),
        "packets": obj({"injected": I, "delivered": I, "dropped": I, "in_flight": I,
                        "by_origin": obj({"host": origin, "stack": origin, "replay": origin}, optional=("replay",))}),
        "drops": counts(REASON),
        "drop_samples": arr(obj({"time": NUM, "packet": S, "reason": REASON, "where": S})),
        "flowtables": arr(flowtable),
        "traffic": arr(obj({"name": S, "proto": enum("tcp", "udp", "gre"), "from": S, "src": S, "to": S, "dport": I,
                            "directions": obj({"original": direction, "reply": direction}),
                            "icmp_errors": obj({"sent": I, "delivered": I, "dropped": I}),
                            "flows": arr(obj({"flow": I, "client": endpoint, "server": nullable(endpoint)}))})),
        "conntrack": {"type": "object", "additionalProperties": arr(ct)},
        "counters": {"type": "object", "additionalProperties": {"type": "object", "additionalProperties": pk}},
        "quotas": {"type": "object", "additionalProperties": {"type": "object", "additionalProperties": obj(
            {"quota": I, "consumed": I, "over": B, "exceeded": B})}},
        "icmp_rate_limits": {"type": "object", "additionalProperties": obj(
            {"ratelimit_global": I, "ratelimit_host": I, "ratelimit_host6": I, "ip_error": I})},
        "events": arr(obj({"at": NUM, "netns": S, "command": S})),
        "replay": arr(replay_frame), "replay_sources": arr(replay_source),
    }, optional=("quotas", "icmp_rate_limits", "replay", "replay_sources"))


def explain_schema() -> dict:
    side = {"type": "object", "properties": {"flow": {}, "packet": {}}, "required": ["flow", "packet"],
            "additionalProperties": False}
    near = obj({"packets": I, "fields": arr(S), "values": {"type": "object", "additionalProperties": side},
                "differences": S, "reason": S})
    direction = obj({"fastpath": I, "slowpath": counts(SLOW_REASON), "near_miss": arr(near)})
    xfrm = obj({"spi": S, "mode": enum("transport", "tunnel"), "src": S, "dst": S, "reqid": I, "mtu": I, "dev": S},
               optional=("spi", "mode", "src", "dst", "reqid", "dev"))
    path = obj({"stack": arr(STACK_ENTRY), "info": nullable(PATH_INFO), "error": nullable(S), "warnings": arr(S),
                "xfrm": xfrm}, optional=("xfrm",))
    answer = obj({
        "netns": S, "flowtable": S, "connection": S,
        "original": obj({"proto": S, "src": S, "dst": S, "sport": I, "dport": I}),
        "offloaded": B, "directions": obj({"original": direction, "reply": direction}, optional=("original", "reply")),
        "stopped_by": nullable(REASON), "why": S, "fix": nullable(S),
        "paths": obj({"original": path, "reply": path}, optional=("original", "reply")),
    })
    return obj({"schema": const_schema("explain"), "answers": arr(answer)})


def path_schema() -> dict:
    route = obj({"dst": S, "type": S, "dev": S, "gateway": nullable(S), "metric": I, "mtu": I, "mtu_lock": B,
                 "error": I})
    error = obj({"func": S, "errno": I, "errname": S, "reason": S, "dev": nullable(S), "entry": nullable(I)})
    neighbour = obj({"addr": S, "lladdr": nullable(S), "state": nullable(S)})
    direction = {
        "route": nullable(route), "daddr": S, "neighbour": nullable(neighbour), "stack": arr(STACK_ENTRY),
        "info": PATH_INFO, "error": nullable(error), "warnings": arr(S), "skipped": B,
    }
    optional = ("daddr", "neighbour", "skipped")
    head = {"schema": const_schema("path"), "topology": S, "netns": S, "profile": S,
            "flowtable": obj({"name": S, "devices": arr(S), "hw_offload": B})}
    route_dir = obj({"dst": nullable(route),  # null: nft_flow_route found no route (no flow)
                     "in": obj({"ifindex": I, "encap": arr(ENCAP), "ingress_vlans": I, "tun": nullable(TUN)}),
                     "out": obj({"ifindex": I, "h_source": S, "h_dest": S, "needs_gso_segment": B}),
                     "xmit_type": XMIT})
    flow = obj({"created": B, "error": nullable(error), "tuple": arr(route_dir)})
    return {"oneOf": [
        obj({**head, **direction}, optional=optional),
        obj({**head, **direction, "reply": obj(direction, optional=optional), "flow": flow}, optional=optional),
    ]}


def tuple_schema() -> dict:
    return {"oneOf": [
        obj({"schema": const_schema("tuple"), "index": I, "result": {"const": "tuple"}, "reason": NULL,
             "tuple": FLOW_TUPLE, "offset": I, "tun_hdr_size": I}),
        obj({"schema": const_schema("tuple"), "index": I, "result": {"const": "slowpath"}, "reason": SLOW_REASON,
             "detail": nullable(S), "tuple": NULL}),
        obj({"schema": const_schema("tuple"), "index": I, "result": {"const": "kernel-bug"}, "reason": NULL,
             "detail": S, "tuple": NULL}),
    ]}


def xfrm_schema() -> dict:
    return obj({
        "schema": const_schema("xfrm"),
        "variant": obj({"name": enum("v0", "v1", "v2", "v3"), "title": S, "commit": S, "condition": S}),
        "inputs": obj({"mode": enum("transport", "tunnel"), "encap": B, "inner_protocol": B, "type_offload": B,
                       "offload_dev": B, "hw_gso": B, "packet_offload": B, "sw_sa_offload_ok": B}),
        "decision": obj({"row": I, "branch": S, "outcome": S, "outcome_text": S, "segmenter": S, "encrypter": S,
                         "why": S}),
        "sa": obj({"spi": S, "mode": enum("transport", "tunnel"), "aead": S, "key_bits": I, "seq_first": I}),
        "gso_skb": obj({"family": I, "inner": S, "mss": I, "segments": I}),
        "segmentation_chain": arr(S),
        "layout": obj({"kind": enum("correct", "kernel-bug", "malformed"), "note": S}),
        "frames": arr(obj({"seq": I, "bytes": I, "esp_offset": I, "clear_inner_bytes": S})),
        "malformed": I,
        "receiver": obj({"decrypted": I, "intact": I, "XfrmInHdrError": I, "XfrmInNoStates": I,
                         "XfrmInStateProtoError": I, "XfrmInStateSeqError": I}),
        "pcap": nullable(S), "tcpdump_filter": nullable(S),
    })


def ovpn_schema() -> dict:
    mode = enum("per-record", "udp-gso")
    cost = obj(dict.fromkeys(("inner_bytes", "record_bytes", "wire_bytes", "wire_datagrams", "aead_seals",
                              "aead_request_setups", "pktid_atomic_ops", "route_lookups", "lower_xmit_calls"), I))
    pk = obj({"packets": I, "bytes": I})
    return obj({
        "schema": const_schema("ovpn"), "mode": mode, "crypto": enum("sync", "async"),
        "cipher": enum("aes-gcm", "chacha20-poly1305"),
        "gso_skb": obj({"skbs": I, "segments": I, "gso_size": I, "record_size": I}),
        "batches": arr(obj({"path": mode, "count": I, "first_id": nullable(I), "sent": B, "error": nullable(S)})),
        "records_sent": I, "paths": arr(S), "fallbacks": arr(S), "events": arr(S),
        "packet_ids": obj({"next": I, "burned": I, "key_dead": B}),
        "receiver": obj({"accepted": I, "replay": I, "decrypt_error": I, "unknown_key": I, "malformed": I}),
        "invariants": obj(dict.fromkeys(("nonces_unique_per_key", "ranges_disjoint_and_contiguous", "ids_within_1_to_2^32-1",
                                       "burned_ids_never_reused", "exhaustion_kills_key", "receiver_accepts_every_record"), B)),
        "stats": obj({"vpn_tx": pk, "link_tx": pk, "dev_tx_packets": I, "dev_tx_dropped": I}),
        "cost_comparison": obj({"per-record": cost, "udp-gso": cost}),
        "cover_letter": obj(dict.fromkeys(("setup", "throughput", "cycles_per_byte", "instructions_per_byte", "source"), S)),
        "pcap": nullable(S),
    })


SCALAR = {"type": ["string", "integer", "number", "boolean", "null"]}
SWITCH_VALUE = {"type": ["string", "boolean"]}
PACKETS = obj({"injected": I, "delivered": I, "dropped": I, "in_flight": I,
               "by_origin": obj({"host": obj({"injected": I, "delivered": I}),
                                 "stack": obj({"injected": I, "delivered": I})})})

# the layers above (flowsim.sim.sweep.METRICS, flowsim.conform.compare.summarize) cannot be imported here;
# tests/test_schemas.py checks these copies against them
METRICS = ("injected", "delivered", "dropped", "in_flight", "fastpath", "slowpath", "hit_ratio",
           "flows_created", "flow_add_failures", "max_flows", "mean_flows",
           "skb_copies", "skb_reallocs", "skb_bytes_copied", "skb_pull_bugs", "kernel_bugs", "time")
FACT_STATUSES = ("agrees", "differs", "known", "n/a", "error")
AB_CHANGES = ("verdict", "value", "noise", "same")   # flowsim.conform.ab.CHANGES


def trace_schema() -> dict:
    details = {"type": "object", "additionalProperties": SCALAR,
               "properties": {"reason": REASON, "frame": {"type": "string", "pattern": "^([0-9a-f]{2})*$"}}}
    step = obj({"time": NUM, "where": S, "what": S, "details": details})
    packet = obj({"packet": S, "state": enum("live", "delivered", "dropped"), "reason": nullable(REASON),
                  "steps": arr(step)})
    return obj({"schema": const_schema("trace"), "profile": S, "packets": arr(packet)})


def compare_schema() -> dict:
    def ab(x: dict) -> dict:
        return obj({"a": x, "b": x})
    pair = {"type": "array", "items": I, "minItems": 2, "maxItems": 2}
    ft_counts = obj({"fastpath": I, "slowpath": I, "drops": I, "flows_created": I})
    skb = nullable(obj({"copies": I, "bytes_copied": I, "reallocs": I, "pull_bugs": I}))
    flowtable = obj({"netns": S, "name": S, "a": ft_counts, "b": ft_counts,
                     "reasons": {"type": "object", "propertyNames": REASON, "additionalProperties": pair},
                     "skb_cost": ab(skb), "kernel_bugs": ab(I)})
    tr = obj({"sent": I, "delivered": I, "fastpath": I, "slowpath": I})
    traffic = obj({"traffic": S, "direction": enum("original", "reply"), "a": tr, "b": tr})
    divergence = obj({"packet": S, "a": arr(S), "b": arr(S), "verdicts": ab(arr(S))})
    frame = obj({"netns": S, "dev": S, "frames": pair, "first_index": I, "a": nullable(S), "b": nullable(S)})
    return obj({
        "schema": const_schema("compare"), "topology": S,
        "profiles": {"type": "array", "items": S, "minItems": 2, "maxItems": 2},
        "profile_switches": {"type": "object", "additionalProperties": {
            "type": "array", "items": SWITCH_VALUE, "minItems": 2, "maxItems": 2}},
        "packets": ab(PACKETS), "drops": ab(counts(REASON)), "flowtables": arr(flowtable), "traffic": arr(traffic),
        "first_divergence": nullable(divergence), "frame_differences": arr(frame),
    })


def sweep_schema() -> dict:
    nonneg = {"type": "integer", "minimum": 0}
    metric = dict.fromkeys(METRICS, nonneg)
    metric.update({"hit_ratio": nullable({"type": "number", "minimum": 0, "maximum": 1}),
                   "mean_flows": {"type": "number", "minimum": 0}, "time": NUM})
    ids = sorted(REASONS)
    counted = [f"reason.{r}" for r in ids] + [f"drop.{r}" for r in ids]
    row = {"type": "object", "properties": metric, "required": list(METRICS),
           "patternProperties": {r"^(reason|drop)\.": nonneg},
           "propertyNames": {"anyOf": [{"not": {"pattern": r"^(reason|drop)\."}}, {"enum": counted}]},
           "additionalProperties": SCALAR,
           "description": "one run: its grid values (by grid key), the metrics, reason.ID (slow path) and drop.ID counts"}
    return obj({
        "schema": const_schema("sweep"), "topology": S,
        "grid": {"type": "object", "additionalProperties": {"type": "array", "items": S, "minItems": 1}},
        "fixed": {"type": "object", "additionalProperties": S},
        "columns": arr(S), "rows": arr(row),
    })


def conform_schema() -> dict:
    status = enum(*FACT_STATUSES)
    fact = obj({"scenario": S, "subject": S, "fact": S, "kernel": {}, "sim": {}, "tolerance": S,
                "status": status, "note": S})
    scenario = obj({"name": S, "file": S, "status": enum("agrees", "differs", "error", "skipped"),
                    "seconds": nullable(NUM), "errors": arr(S), "notes": arr(S), "facts": arr(fact),
                    # what the harness changed in the traffic (raised sizes, caps), and why
                    "adjustments": arr(S),
                    # status "skipped": file:line and why the guest cannot run the topology
                    "skipped": S}, optional=("adjustments", "skipped"))
    result = obj({
        "schema": const_schema("conform"),
        # --patch: "label" is "RELEASE + SERIES (N modules rebuilt)", "patch" the series and what it rebuilt
        "kernel": obj({"name": S, "package": S, "version": S, "release": S, "label": S,
                       "patch": obj({"series": arr(S), "patches": arr(S), "digest": S, "modules": arr(S),
                                     "ignored": arr(S), "label": S})}, optional=("label", "patch")),
        "profile": S, "date": S, "timings": {"type": "object", "additionalProperties": NUM},
        "status": enum(0, 1, 2),
        "summary": obj(dict.fromkeys(FACT_STATUSES, I)),
        "workdir": nullable(S), "scenarios": arr(scenario),
        # --frames only: the frame-exact mode's cap and what it injected
        "frames": obj({"max_packets": nullable(I), "injected": I, "capped": arr(S)}),
        # the packet cap per traffic direction: --max-packets, the mode's default, the tables capped
        "cap": obj({"max_packets": nullable(I), "default": I, "capped": arr(S)}),
    }, optional=("frames", "cap"))
    # --patch --compare-stock: both results and their facts paired (flowsim.conform.ab.ABRow)
    side = enum(*FACT_STATUSES, "-")
    row = obj({"scenario": S, "subject": S, "fact": S, "stock": {}, "patched": {}, "sim_stock": {},
               "sim_patched": {}, "tolerance": S, "status_stock": side, "status_patched": side,
               "change": enum(*AB_CHANGES), "note_stock": S, "note_patched": S})
    ab = obj({"schema": const_schema("conform"), "status": enum(0, 1, 2),
              "compare_stock": obj({"stock": S, "patched": S, "summary": obj(dict.fromkeys(AB_CHANGES, I)),
                                    "rows": arr(row)}),
              "stock": result, "patched": result})
    return {"description": "one kernel: one object; several kernels (--kernel repeated): a list of them; "
                           "--compare-stock: the stock and the patched result and their facts side by side",
            "oneOf": [result, {"type": "array", "items": result, "minItems": 2}, ab,
                      {"type": "array", "items": ab, "minItems": 2}]}


def profiles_schema() -> dict:
    names = enum(*PROFILES)
    switch = obj({"type": enum("bool", "str"), "choices": {"type": "array", "items": SWITCH_VALUE, "minItems": 2},
                  "description": S, "kernel": S,
                  "values": {"type": "object", "propertyNames": names, "additionalProperties": SWITCH_VALUE}})
    return obj({
        "schema": const_schema("profiles"), "default": names,
        "profiles": {"type": "object", "propertyNames": names, "additionalProperties": obj({"kernel": S, "note": S})},
        "switches": {"type": "object", "propertyNames": enum(*SWITCHES), "additionalProperties": switch},
    })


BUILDERS = {"run": run_schema, "explain": explain_schema, "path": path_schema, "tuple": tuple_schema,
            "xfrm": xfrm_schema, "ovpn": ovpn_schema, "trace": trace_schema, "compare": compare_schema,
            "sweep": sweep_schema, "conform": conform_schema, "profiles": profiles_schema}
TITLES = {"run": "flowsim run --json", "explain": "flowsim explain --json", "path": "flowsim path --json",
          "tuple": "flowsim tuple --json (one object per line)", "xfrm": "flowsim xfrm --json",
          "ovpn": "flowsim ovpn --json", "trace": "flowsim trace --json", "compare": "flowsim compare --json",
          "sweep": "flowsim sweep --json", "conform": "flowsim conform --json", "profiles": "flowsim profiles --json"}


def build(name: str) -> dict:
    body = BUILDERS[name]()
    return {"$schema": DRAFT, "$id": f"https://flowsim.invalid/schemas/{name}.json", "title": TITLES[name],
            **body, "$defs": reason_defs()}


def text(name: str) -> str:
    return json.dumps(build(name), indent=1) + "\n"


def main() -> int:
    assert set(BUILDERS) == set(NAMES)
    for name in NAMES:
        (HERE / f"{name}.json").write_text(text(name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
