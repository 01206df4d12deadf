"""``flowsim ovpn``: ovpn's transmit path for GSO skbs, before and after the GSO batching series.

Sends GSO skbs of bulk TCP through an ovpn peer (UDP over IPv4), seals
every segment as a DATA_V2 record with real AEAD, lets a receiver with the
2048-id replay window open every record, checks the packet-id invariants,
and compares the per-record path (``per-record``, upstream before "ovpn:
preserve GSO batching") with the UDP GSO aggregate path (``udp-gso``, with
the series; it falls back to per-record for async crypto, GSO_BY_FRAGS,
odd geometry or size).  ``--pcap`` writes the UDP frames; ``--json`` prints
one JSON object.  Exit status 1 if an invariant does not hold.

Example::

    flowsim ovpn --mode udp-gso --crypto sync --gso-size 1364 --segments 16
"""

from __future__ import annotations

import argparse
import json

from flowsim.commands._args import int_in_range as _int
from flowsim.errors import ConfigError
from flowsim.schemas import schema_id
from flowsim.models.ovpn import CIPHERS, COVER_LETTER, LL_MAX_HEADER_CHOICES, OVPN_DEFAULT_MTU, OvpnRun, simulate

__all__ = ["register", "run", "render_text"]


def register(sub) -> None:
    p = sub.add_parser("ovpn", help="ovpn GSO transmit: per-record vs UDP GSO batching",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", default="udp-gso", metavar="MODE",
                   help="per-record (before the series) or udp-gso (with it); default udp-gso")
    p.add_argument("--crypto", default="sync", metavar="KIND", help="sync or async AEAD transform (default sync)")
    p.add_argument("--gso-size", default="1364", metavar="N",
                   help="gso_size of the inner TCP skb: payload bytes per segment (default 1364)")
    p.add_argument("--segments", default="16", metavar="N", help="segments per GSO skb (default 16)")
    p.add_argument("--skbs", default="1", metavar="N", help="GSO skbs to send (default 1)")
    p.add_argument("--last-size", default=None, metavar="N", help="payload of the last segment (default gso_size)")
    p.add_argument("--cipher", default="aes-gcm", metavar="C", help="aes-gcm or chacha20-poly1305 (default aes-gcm)")
    p.add_argument("--gso-by-frags", action="store_true", help="the input skb has gso_size GSO_BY_FRAGS")
    p.add_argument("--ll-max-header", default="32", metavar="N",
                   help="LL_MAX_HEADER of the kernel build: 32, 96 or 128 (default 32)")
    p.add_argument("--mtu", default=str(OVPN_DEFAULT_MTU), metavar="N",
                   help=f"ovpn device MTU (default {OVPN_DEFAULT_MTU})")
    p.add_argument("--first-packet-id", default="1", metavar="N",
                   help="the key's next packet id (try 0xfffffffd to see exhaustion)")
    p.add_argument("--fail-segment", action="append", default=[], metavar="K",
                   help="make the encryption of segment K (0-based, in every skb) fail; repeatable")
    p.add_argument("--pcap", default=None, metavar="FILE", help="write the UDP frames to FILE")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _choice(name: str, text: str, choices) -> str:
    if text.lower() not in choices:
        raise ConfigError(f"unknown {name}: {text!r}", value=text, expected=", ".join(choices))
    return text.lower()


def run(args) -> int:
    ll = _int("--ll-max-header", args.ll_max_header, 0, 4096)
    if ll not in LL_MAX_HEADER_CHOICES:
        raise ConfigError(f"--ll-max-header is a kernel constant: {ll!r}", value=ll,
                          expected=", ".join(map(str, LL_MAX_HEADER_CHOICES)))
    segments = _int("--segments", args.segments, 1, 65535)
    result = simulate(
        _choice("--mode", args.mode, ("per-record", "udp-gso")),
        _choice("--crypto", args.crypto, ("sync", "async")),
        gso_size=_int("--gso-size", args.gso_size, 1, 65535), segments=segments,
        skbs=_int("--skbs", args.skbs, 1, 10000), cipher=_choice("--cipher", args.cipher, tuple(CIPHERS)),
        gso_by_frags=args.gso_by_frags, ll_max_header=ll, mtu=_int("--mtu", args.mtu, 68, 65451),
        last=None if args.last_size is None else _int("--last-size", args.last_size, 1, 65535),
        first_packet_id=_int("--first-packet-id", args.first_packet_id, 1, 0xFFFFFFFF),
        faults=frozenset(_int("--fail-segment", k, 0, segments - 1) for k in args.fail_segment),
        pcap=args.pcap)
    if args.json:
        print(json.dumps({"schema": schema_id("ovpn"), **result.to_dict()}))
    else:
        print(render_text(result))
    return 0 if all(result.invariants.values()) else 1


_COST_ROWS = (
    ("lower_xmit_calls", "lower-device transmit calls"),
    ("route_lookups", "route (dst_cache) lookups"),
    ("aead_request_setups", "AEAD request setups"),
    ("pktid_atomic_ops", "packet-id atomic operations"),
    ("aead_seals", "AEAD seal operations"),
    ("wire_datagrams", "UDP datagrams on the wire"),
    ("inner_bytes", "inner bytes"),
    ("record_bytes", "record bytes"),
    ("wire_bytes", "wire bytes (Ethernet)"),
)


def _ranges(batches) -> str:
    sent = [b for b in batches if b.sent]
    if not sent:
        return "none"
    if all(b.count == 1 for b in sent):
        return f"{len(sent)} single ids {sent[0].first_id}..{sent[-1].first_id}"
    return ", ".join(f"{b.first_id}..{b.first_id + b.count - 1}" for b in sent[:6]) + (
        " …" if len(sent) > 6 else "")


def render_text(r: OvpnRun) -> str:
    """The human-readable report of one run."""
    p = r.peer
    d = r.to_dict()
    aggregates = [b for b in p.batches if b.path == "udp-gso"]
    era = "upstream before the series" if p.mode == "per-record" else 'with "ovpn: preserve GSO batching" v5'
    lines = [
        f"ovpn transmit, mode {p.mode} ({era}), crypto {p.crypto}, {p.key.cipher}",
        f"GSO skb   {r.skbs} × {r.segments} segments, gso_size {r.gso_size} "
        f"(record {d['gso_skb']['record_size']} B = inner + 24)",
        f"path      {', '.join(d['paths']) or 'nothing sent'}"
        + (f": {len(aggregates)} UDP GSO aggregate(s)" if aggregates else ""),
    ]
    for why in d["fallbacks"]:
        lines.append(f"fallback  {why}")
    dropped = [b for b in p.batches if not b.sent]
    lines += [
        f"ids       sent {_ranges(p.batches)}; next {p.key.pid.seq_num}, burned {len(p.key.pid.burned)}, "
        f"key {'DEAD' if p.key.dead else 'alive'}",
        f"records   {len(p.records)} sent, {p.dev_tx_dropped} dropped"
        + (f" ({'; '.join(sorted({b.error for b in dropped}))})" if dropped else ""),
        f"stats     vpn_tx {p.vpn_tx.packets} pkts/{p.vpn_tx.bytes} B   link_tx {p.link_tx.packets} pkts/"
        f"{p.link_tx.bytes} B   dev tx_packets {p.dev_tx_packets} tx_dropped {p.dev_tx_dropped}",
    ]
    for ev in p.events:
        lines.append(f"event     {ev}")
    c = r.receiver.counters
    lines.append(f"receiver  accepted {c['accepted']}/{len(p.records)} (replay {c['replay']}, "
                 f"decrypt errors {c['decrypt_error']}), replay window 2048 ids")
    lines.append("invariants")
    for name, ok in r.invariants.items():
        lines.append(f"  {'ok  ' if ok else 'FAIL'} {name}")
    lines.append("cost of the same input per path          per-record    udp-gso")
    for key, label in _COST_ROWS:
        a, b = d["cost_comparison"]["per-record"][key], d["cost_comparison"]["udp-gso"][key]
        lines.append(f"  {label:<38} {a:>10} {b:>10}")
    lines += [
        "cover letter (quoted facts, not computed here): " + COVER_LETTER["source"],
        f"  throughput {COVER_LETTER['throughput']}; cycles/byte {COVER_LETTER['cycles_per_byte']}",
        f"  setup: {COVER_LETTER['setup']}",
    ]
    if r.pcap:
        lines.append(f"pcap      {r.pcap}: {len(p.frames)} frames")
    return "\n".join(lines)
