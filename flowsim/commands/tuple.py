"""``flowsim tuple CAPTURE``: the flow tuple the kernel would hash, frame by frame.

One line per frame: the tuple, or ``slowpath`` with the reason id the
flowtable hook would return NF_ACCEPT with.  ``--json`` prints one JSON
object per line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from itertools import islice

from flowsim.commands._args import IFINDEX_MAX, count_type, headlen_type
from flowsim.errors import CaptureError, KernelBugError
from flowsim.kernel.capture import read_capture, read_frames
from flowsim.kernel.flowtable.tuple import HOOKS, flow_tuple_from_skb, frame_parser
from flowsim.kernel.headers import ETH_P_8021AD, ETH_P_8021Q, addr_text
from flowsim.profiles import profile_from_cli
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
    from flowsim.kernel.skb import skb_from_frame, skb_vlan_untag  # --headlen only: not at start-up

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
    detail = obj["detail"]
    if not detail:
        from flowsim.reasons import reason  # the reason's text, for a frame without a detail of its own

        detail = reason(obj["reason"]).text
    return f"{obj['index']:>5} slowpath {obj['reason']}: {detail}"


def _tuple_obj(index: int, res: tuple) -> dict:
    """The JSON object of a frame whose parse gave a tuple (:func:`frame_parser`'s result)."""
    key, offset, _hdrsize, tun_hdr_size, _tun_proto, _ether_type = res
    return {"index": index, "result": "tuple", "reason": None, "tuple": key.to_dict(), "offset": offset,
            "tun_hdr_size": tun_hdr_size}


def _frame_obj(index: int, res: tuple | None) -> dict:
    """The JSON object of a frame, from :func:`frame_parser`'s result (what :func:`frame_result` gives)."""
    if res is None:
        return {"index": index, "result": "slowpath", "reason": "header-truncated",
                "detail": "runt frame: dropped by the device before any hook", "tuple": None}
    if len(res) == 2:
        return {"index": index, "result": "slowpath", "reason": res[0], "detail": res[1], "tuple": None}
    return _tuple_obj(index, res)


class _JsonWriter:
    """``json.dumps({"schema": …, **frame_result(…)})`` of each frame, a tuple's line written by hand: the same
    text (checked by tests/test_tuple_fast.py and tests/test_cli_tuple.py), a quarter of the cost.  Addresses are
    ASCII (digits, hex, dots, colons), numbers integers, so nothing needs escaping; an address, an encap list or
    a tunnel is formatted once per distinct value (a capture repeats them).  Addresses are remembered per
    family: an IPv4 address is a 16-byte union whose last 12 bytes are zero, as is an IPv6 address such as
    ``2001:db8::``, and the two are written differently."""

    _CACHE_MAX = 1 << 16

    def __init__(self) -> None:
        self.prefix = f'{{"schema": {json.dumps(schema_id("tuple"))}, "index": '
        self.schema = {"schema": schema_id("tuple")}
        # the text after the ports, and the address cache of the family, per (iifidx, l3proto, l4proto,
        # encap, tun, offset, tun_hdr_size): the same for every frame of a flow's layout
        self.tails: dict[tuple, tuple[str, dict[bytes, str]]] = {}
        self.addrs: dict[int, dict[bytes, str]] = {}

    def extend(self, pending: list[str], results: Iterable[tuple | None], index: int) -> None:
        """Append the line of each of *results* (:func:`frame_parser`'s, of frames *index*, *index* + 1, …)
        to *pending*; what *results* raises goes through, the lines before it appended."""
        append = pending.append
        prefix = self.prefix
        tails = self.tails
        for index, res in enumerate(results, index):  # noqa: B020  # the start, then each frame's index
            if res is not None and len(res) == 6:
                key, offset, _hdrsize, tun_hdr_size, _tun_proto, _ether_type = res
                src, dst, sport, dport, iifidx, l3proto, l4proto, encap, tun = key
                shape = (iifidx, l3proto, l4proto, encap, tun, offset, tun_hdr_size)
                known = tails.get(shape)
                if known is None:
                    known = self.tail(shape)
                tail, addrs = known
                s = addrs.get(src)
                if s is None:
                    s = self.addr(addrs, src, l3proto)
                d = addrs.get(dst)
                if d is None:
                    d = self.addr(addrs, dst, l3proto)
                append(f'{prefix}{index}, "result": "tuple", "reason": null, "tuple": {{"src": "{s}", "dst": "{d}", '
                       f'"sport": {sport}, "dport": {dport}, {tail}')
            else:
                append(json.dumps({**self.schema, **_frame_obj(index, res)}) + "\n")

    def line(self, index: int, res: tuple) -> str:
        """The line of one frame."""
        out: list[str] = []
        self.extend(out, (res,), index)
        return out[0]

    def addr(self, addrs: dict[bytes, str], raw: bytes, l3proto: int) -> str:
        """:func:`~flowsim.kernel.headers.addr_text` of *raw*, remembered in *addrs* (its family's)."""
        if len(addrs) >= self._CACHE_MAX:
            addrs.clear()
        text = addrs[raw] = addr_text(raw, l3proto)
        return text

    def tail(self, shape: tuple) -> tuple[str, dict[bytes, str]]:
        iifidx, l3proto, l4proto, encap, tun, offset, tun_hdr_size = shape
        if len(self.tails) >= self._CACHE_MAX:
            self.tails.clear()
        e = ", ".join(f'{{"id": {x.id}, "proto": {x.proto}}}' for x in encap)
        t = "null" if tun is None else json.dumps(tun.to_dict())
        text = (f'"l3proto": {l3proto}, "l4proto": {l4proto}, "iifidx": {iifidx}, '
                f'"encap": [{e}], "tun": {t}}}, "offset": {offset}, "tun_hdr_size": {tun_hdr_size}}}\n')
        known = self.tails[shape] = text, self.addrs.setdefault(l3proto, {})
        return known


# lines per write: a chunk's text (~300 bytes a JSON line) and its bytes (TextIOWrapper's copy at the flush)
# stay small enough that glibc's malloc keeps them in its heap when freed; at 4096 lines (1.3 MB each) it
# gave them back to the kernel after every chunk, and the next chunk's pages faulted in again: 15,000 minor
# faults on the 100k-frame mixed capture, a tenth of the command's CPU time (benchmarks/bench_cli.py)
_CHUNK = 1024


def _text_lines(pending: list[str], results: Iterable[tuple | None], index: int) -> None:
    """:meth:`_JsonWriter.extend` for the text form."""
    append = pending.append
    for index, res in enumerate(results, index):  # noqa: B020  # the start, then each frame's index
        append(_text(_frame_obj(index, res)) + "\n")


def run(args) -> int:
    profile = profile_from_cli(args.profile, args.settings)
    out = sys.stdout
    pending: list[str] = []
    try:
        if args.headlen is None:
            # the whole frame in the linear area: the hook's parse straight from the frame's bytes
            # (frame_parser), the result the skb path gives (tests/test_tuple_fast.py); a chunk of frames
            # at a time, read and parsed by map (no Python loop of its own), written by one loop
            parse = frame_parser(profile, args.family, args.iif)
            extend = _JsonWriter().extend if args.json else _text_lines
            frames = read_frames(args.capture)
            index = 1
            while True:
                extend(pending, map(parse, islice(frames, _CHUNK)), index)
                if len(pending) < _CHUNK:
                    break
                index += _CHUNK
                out.write("".join(pending))
                pending.clear()
        else:
            for frame in read_capture(args.capture):
                obj = frame_result(frame.index, frame.data, iif=args.iif, family=args.family, profile=profile,
                                   rx_vlan_offload=args.rx_vlan_offload, headlen=args.headlen)
                pending.append((json.dumps({"schema": schema_id("tuple"), **obj}) if args.json else _text(obj)) + "\n")
                if len(pending) >= _CHUNK:
                    out.write("".join(pending))
                    pending.clear()
    except CaptureError as exc:
        out.write("".join(pending))
        out.flush()
        print(f"flowsim: error: {exc}", file=sys.stderr)
        return 2
    out.write("".join(pending))
    return 0
