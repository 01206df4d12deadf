"""``flowsim xfrm``: the GSO decision of xfrm_output for one GSO skb, and the ESP frames it produces.

Builds a GSO skb of bulk TCP (plain, or inside ipip, ip6tnl, VXLAN or
Geneve), runs the xfrm_output variant's GSO decision for the SA (mode,
crypto-offload device, ESP offload module), segments and encrypts it with
real AES-GCM (rfc4106) the way the chosen path does, and lets a receiver
decrypt every frame at the offset a real receiver uses.  ``--pcap`` writes
the frames (Ethernet); ``--json`` prints one JSON object.

Variants: v0 (before a204aef9fd77), v1 (after it), v2 (after 0aae2867aa60),
v3 (with the Oct-2026 fix "xfrm: use software GSO for inner tunnels without
crypto offload").

Example (the bug the Oct-2026 patch fixes)::

    flowsim xfrm --variant v2 --inner ip6tnl --mode transport \\
        --esp-offload-module --segments 8 --pcap out.pcap
"""

from __future__ import annotations

import argparse
import json

from flowsim.commands._args import int_in_range as _int
from flowsim.errors import ConfigError
from flowsim.kernel.esp import INNER_KINDS
from flowsim.schemas import schema_id
from flowsim.models.xfrm import OUTCOMES, XfrmRun, get_variant, simulate

__all__ = ["register", "run", "render_text"]


def register(sub) -> None:
    p = sub.add_parser("xfrm", help="xfrm_output GSO decision and ESP layout for a GSO skb",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", default="v3", metavar="V",
                   help="xfrm_output variant: v0, v1, v2, v3 (default v3)")
    p.add_argument("--inner", default="ipip", metavar="KIND",
                   help="inner packet: " + ", ".join(INNER_KINDS[1:]) + " or none (plain TCP); default ipip")
    p.add_argument("--mode", default="transport", metavar="MODE",
                   help="SA mode: transport or tunnel (default transport)")
    p.add_argument("--offload-dev", action="store_true",
                   help="the SA has a crypto-offload device (x->xso.dev); it can do ESP GSO unless --no-hw-gso")
    p.add_argument("--no-hw-gso", action="store_true",
                   help="with --offload-dev: the device cannot segment this skb in hardware")
    p.add_argument("--esp-offload-module", action="store_true",
                   help="esp4_offload/esp6_offload was loaded when the SA was made (x->type_offload set)")
    p.add_argument("--segments", default="8", metavar="N", help="segments in the GSO skb (default 8)")
    p.add_argument("--mss", default="1368", metavar="N", help="TCP payload per segment (default 1368)")
    p.add_argument("--family", default=None, metavar="4|6",
                   help="outer family for --inner none/vxlan/geneve (default 4; ipip is 4, ip6tnl 6)")
    p.add_argument("--spi", default="0x1001", metavar="SPI", help="SPI of the SA (default 0x1001)")
    p.add_argument("--key", default=None, metavar="HEX",
                   help="rfc4106 key: AES key + 4-byte salt, 20/28/36 bytes in hex (default a fixed test key)")
    p.add_argument("--seq", default="1", metavar="N", help="first ESP sequence number (default 1)")
    p.add_argument("--pcap", default=None, metavar="FILE", help="write the ESP frames to FILE")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _key(text: str | None) -> dict:
    if text is None:
        return {}
    try:
        return {"key": bytes.fromhex(text.removeprefix("0x"))}
    except ValueError:
        raise ConfigError(f"--key must be hex: {text!r}", value=text) from None


def run(args) -> int:
    variant = get_variant(args.variant).name
    inner = args.inner.lower()
    if inner not in INNER_KINDS:
        raise ConfigError(f"unknown --inner: {args.inner!r}", value=args.inner, expected=", ".join(INNER_KINDS))
    mode = args.mode.lower()
    if mode not in ("transport", "tunnel"):
        raise ConfigError(f"unknown --mode: {args.mode!r}", value=args.mode, expected="transport or tunnel")
    if args.no_hw_gso and not args.offload_dev:
        raise ConfigError("--no-hw-gso needs --offload-dev (software crypto is always segmented in software)")
    family = 4
    if args.family is not None:
        family = _int("--family", args.family, 4, 6)
        if family not in (4, 6):
            raise ConfigError(f"--family must be 4 or 6: {family!r}", value=family)
        fixed = {"ipip": 4, "ip6tnl": 6}.get(inner)
        if fixed is not None and fixed != family:
            raise ConfigError(f"--inner {inner} has an IPv{fixed} outer header: {family!r}", value=family,
                              expected=str(fixed))
    result = simulate(
        variant, inner, mode, offload_dev=args.offload_dev, esp_offload_module=args.esp_offload_module,
        hw_gso=args.offload_dev and not args.no_hw_gso,
        segments=_int("--segments", args.segments, 2, 4096), mss=_int("--mss", args.mss, 1, 65000),
        family=family, spi=_int("--spi", args.spi, 1, 0xFFFFFFFF), seq_first=_int("--seq", args.seq, 1, 0xFFFFFFFE),
        pcap=args.pcap, **_key(args.key))
    if args.json:
        print(json.dumps({"schema": schema_id("xfrm"), **result.to_dict()}, indent=None))
    else:
        print(render_text(result))
    return 0


def render_text(r: XfrmRun) -> str:
    """The human-readable report of one run."""
    d, v = r.decision, get_variant(r.decision.variant)
    i = d.inputs
    hl = 20 if r.family == 4 else 40
    lines = [
        f"xfrm_output, variant {v.name}: {v.title} — {v.commit}",
        f"  GSO test in the offload-ok branch: {v.condition}",
        f"inputs    inner_protocol={'set (' + r.inner + ')' if i.inner_protocol else 'unset (plain TCP)'}"
        f"  mode={i.mode}  offload dev={'yes' if i.offload_dev else 'none'}"
        f"  type_offload={'yes' if i.type_offload else 'no'}  hw ESP GSO={'yes' if i.hw_gso else 'no'}",
        f"decision  {d.branch} branch -> {d.outcome}" + (f"  (decision table row {d.row})" if d.row else ""),
        f"          {OUTCOMES[d.outcome]}",
        f"  why     {d.why}",
        f"  segments by  {d.segmenter}",
        f"  encrypts by  {d.encrypter}",
        f"layout    {r.layout.kind.upper()}: {r.layout.note}",
    ]
    if r.frames:
        offs = sorted({f.esp_offset for f in r.frames})
        clear = {r.clear_inner_bytes(f).hex() for f in r.frames} - {""}
        lines += [
            f"chain     {' → '.join(r.chain)}",
            f"frames    {len(r.frames)} ESP frames of {min(len(f.frame) for f in r.frames)}"
            f"..{max(len(f.frame) for f in r.frames)} bytes (Ethernet), SPI 0x{r.state.spi:x}, "
            f"seq {r.frames[0].seq}..{r.frames[-1].seq}",
            f"          ESP header at offset {', '.join(map(str, offs))} of the outer IP header "
            f"(a receiver reads it at {hl}); {r.malformed} malformed",
        ]
        if clear:
            lines.append(f"          inner bytes in clear before the misplaced ESP: {', '.join(sorted(clear))}")
    else:
        lines.append("frames    none: the kernel would not produce valid segments here")
    c = r.rx_counters
    lines.append(f"receiver  ESP read at offset {hl}: decrypted {c['decrypted']}/{len(r.frames)}"
                 f" (intact {r.rx_intact}), XfrmInStateProtoError {c['XfrmInStateProtoError']},"
                 f" XfrmInStateSeqError {c['XfrmInStateSeqError']}")
    filt = r.to_dict()["tcpdump_filter"]
    if filt:
        lines.append(f"tcpdump   tcpdump -r {r.pcap or 'FILE'} -nn '{filt}'  (matches misplaced-ESP frames)")
    if r.pcap:
        lines.append(f"pcap      {r.pcap}: {len(r.frames)} frames")
    return "\n".join(lines)
