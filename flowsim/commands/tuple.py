"""``flowsim tuple CAPTURE``: the flow tuple the kernel would hash, frame by frame.

One line per frame: the tuple, or ``slowpath`` with the reason id the
flowtable hook would return NF_ACCEPT with.  ``--json`` prints one JSON
object per line.
"""

from __future__ import annotations

import argparse
import json
import sys

from flowsim.commands._args import IFINDEX_MAX, count_type, headlen_type
from flowsim.errors import CaptureError, KernelBugError
from flowsim.kernel.capture import read_capture
from flowsim.kernel.flowtable.tuple import HOOKS, flow_tuple_from_skb
from flowsim.kernel.headers import ETH_P_8021AD, ETH_P_8021Q
from flowsim.kernel.skb import skb_from_frame, skb_vlan_untag
from flowsim.profiles import profile_from_cli
from flowsim.reasons import reason
from flowsim.schemas import schema_id

__all__ = ["register", "run", "frame_result"]


def register(sub) -> None:
    from flowsim.cli import add_profile_args

    p = sub.add_parser("tuple", help="print the flow tuple (or slow-path reason) of each frame of a capture",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("capture", metavar="CAPTURE", help="pcap or pcapng file")
    add_profile_args(p)
    p.add_argument("--iif", type=count_type("--iif", 1, IFINDEX_MAX, "an ifindex"), default=1, metavar="N",
                   help="ifindex of the ingress device (default 1)")
    p.add_argument("--family", choices=HOOKS, default="inet",
                   help="flowtable family whose hook runs (default inet)")
    p.add_argument("--no-rx-vlan-offload", dest="rx_vlan_offload", action="store_false",
                   help="the NIC leaves the outer VLAN tag in the frame; __netif_receive_skb_core untags it "
                        "(skb_vlan_untag) before the ingress hook all the same, so the hook sees the same skb")
    p.add_argument("--headlen", type=headlen_type(minimum=0), default=None, metavar="N",
                   help="bytes of each frame in the skb's linear area (default: all)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=run)


def frame_result(index: int, frame: bytes, *, iif: int, family: str, profile, rx_vlan_offload: bool,
                 headlen: int | None) -> dict:
    """The JSON object for one frame."""
    skb = skb_from_frame(frame, iif=iif, headlen=headlen, rx_vlan_offload=rx_vlan_offload)
    if (skb is not None and not rx_vlan_offload and skb.protocol in (ETH_P_8021Q, ETH_P_8021AD)
            and not skb_vlan_untag(skb)):
        # a NIC without rx-vlan-offload hands the tag up in-band, but __netif_receive_skb_core
        # (net/core/dev.c) runs skb_vlan_untag on any eth_type_vlan frame before the ingress hook
        skb = None  # truncated tag: skb_vlan_untag frees the skb
    if skb is None:
        return {"index": index, "result": "slowpath", "reason": "header-truncated",
                "detail": "runt frame: dropped by the device before any hook", "tuple": None}
    try:
        res = flow_tuple_from_skb(skb, iifidx=iif, family=family, profile=profile)
    except KernelBugError as exc:
        return {"index": index, "result": "kernel-bug", "reason": None, "detail": str(exc), "tuple": None}
    if res.ok:
        return {"index": index, "result": "tuple", "reason": None, "tuple": res.tuple.to_dict(),
                "offset": res.ctx.offset, "tun_hdr_size": res.ctx.tun_hdr_size}
    return {"index": index, "result": "slowpath", "reason": res.reason, "detail": res.detail, "tuple": None}


def _text(obj: dict) -> str:
    if obj["result"] == "tuple":
        t = obj["tuple"]
        encap = ",".join(f"{e['proto']:#06x}/{e['id']}" for e in t["encap"]) or "-"
        tun = "-" if t["tun"] is None else f"{t['tun']['src']}>{t['tun']['dst']}/{t['tun']['l3_proto']}"
        return (f"{obj['index']:>5} tuple {t['src']}:{t['sport']} > {t['dst']}:{t['dport']} "
                f"l3proto {t['l3proto']} l4proto {t['l4proto']} iif {t['iifidx']} encap {encap} tun {tun}")
    if obj["result"] == "kernel-bug":
        return f"{obj['index']:>5} KERNEL BUG {obj['detail']}"
    return f"{obj['index']:>5} slowpath {obj['reason']}: {obj['detail'] or reason(obj['reason']).text}"


def run(args) -> int:
    profile = profile_from_cli(args.profile, args.settings)
    out = sys.stdout
    try:
        for frame in read_capture(args.capture):
            obj = frame_result(frame.index, frame.data, iif=args.iif, family=args.family, profile=profile,
                               rx_vlan_offload=args.rx_vlan_offload, headlen=args.headlen)
            out.write((json.dumps({"schema": schema_id("tuple"), **obj}) if args.json else _text(obj)) + "\n")
    except CaptureError as exc:
        out.flush()
        print(f"flowsim: error: {exc}", file=sys.stderr)
        return 2
    return 0
