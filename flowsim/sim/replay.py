"""Capture replay: the frames of a pcap/pcapng injected at a device as if its wire delivered them.

Theory of operation
-------------------
``flowsim run TOPOLOGY --replay NETNS:DEV=CAPTURE`` (repeatable) reads each
capture with :func:`flowsim.kernel.capture.read_capture` and injects its
frames at device *DEV* of namespace *NETNS* where a frame from the device's
wire enters the kernel: ``Kernel.receive_frame``
(:func:`flowsim.kernel.stack.l2.netif_receive_frame`: ``eth_type_trans`` then
``netif_receive_skb`` → ``__netif_receive_skb_core``, whose netdev ingress hook
runs the flowtable's ``nf_flow_offload_ip_hook`` / ``nf_flow_offload_ipv6_hook``
at its priority among the nft ingress chains, then ``vlan_do_receive``, the
bridge's ``br_handle_frame`` or ``ip_rcv`` / ``ipv6_rcv``).  Only devices with
a wire take replayed frames: a veth, an Ethernet NIC or a DSA user port.

Which frames.  A capture on a port holds both directions; a frame the port
itself *sent* is not injected (the router made it; replaying it as received
would be a different packet): the direction the capture records decides
(pcapng ``epb_flags`` inbound/outbound, a Linux cooked header's
``PACKET_OUTGOING``), else — classic pcap of Ethernet — a frame whose source
MAC is the device's own MAC, or that of another device of its namespace (the
bridge it is a port of, a VLAN or macvlan on it: what the kernel transmits
with) was sent by it.  A classic pcap cannot tell the frames a bridge
*forwarded* out of a port (their source MAC is the remote host's) from those
it received: capture such ports in one direction (``tcpdump -Q in``) or in a
pcapng that records it (``epb_flags``).  Skipped frames are listed with
fate ``skipped`` and reason ``sent by DEV``.  A pcapng with several named
interfaces (``flowsim run --pcapng`` writes one per device) contributes the
frames of the interface named ``NETNS/DEV`` or ``DEV`` only.

Link types.  Raw IP (``LINKTYPE_RAW``, ``IPV4``, ``IPV6``) and cooked captures
are converted as ``tcprewrite --dlt=enet`` would be asked to: an Ethernet
header addressed to the device's MAC (``--enet-dmac``), from the MAC of its
wire's peer (zero when it has none).  A raw-IP capture records no direction:
every frame is injected.  Frames addressed to a MAC that is neither the
device's nor broadcast/multicast are injected unchanged and meet what the
kernel does with ``PACKET_OTHERHOST``: ``ip_rcv`` drops them
(``not-for-host``) unless the device is a bridge port (the bridge forwards by
its FDB); flowsim models no promiscuous mode.

Time.  Frames play on the run's virtual clock at their capture timestamps
relative to the first frame of all replayed captures (so the captures of a
router's WAN and LAN ports merge into the order the router saw, and
connections reach ESTABLISHED as they did); ties keep the order of the
``--replay`` options naming the files, then each file's own order.  Frames of
two files stamped in the same tick (microseconds in a classic pcap) cannot be
ordered truly: a router that forwards in both directions within a tick is
best captured into one pcapng (``run --pcapng``, ``dumpcap -i a -i b``), whose
order is kept when several options name it.  ``--replay-rate PPS`` paces the
merged injected frames evenly instead: frame *i* at *i*/PPS seconds.

Where they end.  A replayed packet the kernel transmits out of a port that
is itself being replayed leaves on a wire the capture already stands for: it
is absorbed there (fate ``forwarded``, out of that device; the packet ledger
counts it delivered) rather than reaching the simulated peer, whose reaction
the capture holds too.  Out of any other device it goes on through the
topology and ends delivered (to an endpoint of a ``[[traffic]]`` table),
dropped with a reason, or in flight; the packet ledger counts it with origin
``replay`` and the books still add up.  ICMP errors the stack sends about a
replayed packet are absorbed at replayed ports the same way.

Replayed frames coexist with the topology's ``[[traffic]]`` tables on one
clock; ``flowsim run --no-traffic`` plays the captures alone.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import attrs

from flowsim.config.limits import MAX_VIRTUAL_TIME
from flowsim.errors import ConfigError
from flowsim.kernel.capture import INBOUND, LINKTYPE_ETHERNET, OUTBOUND, Frame, read_capture
from flowsim.kernel.devices.dsa import DsaUserDevice
from flowsim.kernel.devices.ethernet import EthernetDevice
from flowsim.kernel.headers import mac_aton
from flowsim.kernel.stack.core import ORIGIN_STACK

__all__ = ["ORIGIN_REPLAY", "ReplaySource", "Replay", "parse_replay", "load_replay"]

IN_FLIGHT = "in-flight"   # a replayed frame's fate while the run still carries it (not a reason id)

#: the packet ledger's origin of replayed frames
ORIGIN_REPLAY = "replay"
OPTION = "--replay"


@attrs.frozen
class ReplaySource:
    """One ``--replay NETNS:DEV=CAPTURE`` option."""

    netns: str
    dev: str
    path: str
    text: str  # the option's value as given

    @property
    def label(self) -> str:
        """The name replayed packets carry (``PacketTag.traffic``): ``NETNS:DEV``."""
        return f"{self.netns}:{self.dev}"


@attrs.define(slots=True, eq=False)
class ReplayFrame:
    """One frame of a capture, what replay made of it and, once injected, what became of it."""

    source: ReplaySource
    frame: Frame
    data: bytes
    time: float = 0.0
    order: int = 0  # which capture file (ties at one time play in the order of the options naming the files)
    skipped: str | None = None  # why it was not injected ("sent by DEV")
    tag: object = None  # its PacketTag once injected
    verdicts: list = attrs.Factory(list)  # {"hook", "verdict", "reason"} per flowtable hook verdict
    last_rx: str | None = None  # NETNS/DEV that received it last
    out: list = attrs.Factory(list)  # NETNS/DEV it was transmitted out of
    forwarded: str | None = None  # the replayed port it left through (absorbed on its wire)


def parse_replay(text: str) -> ReplaySource:
    """``NETNS:DEV=CAPTURE`` (a device name has no ``:``, so the last ``:`` before ``=`` splits)."""
    where, sep, path = text.partition("=")
    netns, colon, dev = where.rpartition(":")
    if not sep or not colon or not netns or not dev or not path:
        raise ConfigError(f"bad {OPTION} {text!r}", value=text, expected="NETNS:DEV=CAPTURE, e.g. r:veth0=wan.pcap")
    return ReplaySource(netns, dev, path, text)


def _error(src: ReplaySource, what: str, expected: str | None = None) -> ConfigError:
    return ConfigError(f"{OPTION} {src.text}: {what}", value=src.text, expected=expected)


def _wired(dev) -> bool:
    return isinstance(dev, DsaUserDevice) or (isinstance(dev, EthernetDevice) and dev.kind != "dummy")


def load_replay(texts: list[str], topo, rate: float | None = None) -> list[ReplayFrame]:
    """Every frame of the ``--replay`` captures, checked against *topo*, directions decided, times set.

    Raises :class:`~flowsim.errors.ConfigError` naming the option and the file
    for a bad ``NETNS:DEV``, a device without a wire or a pcapng without the
    device's interface; the capture reader's :class:`~flowsim.errors.CaptureError`
    as it is.  The list is in injection order (see the module docstring).
    """
    out: list[ReplayFrame] = []
    files: dict[str, int] = {}  # the same file named by several options keeps its own order at equal times
    for text in texts:
        src = parse_replay(text)
        ns = topo.namespaces.get(src.netns)
        if ns is None:
            raise _error(src, f"no namespace {src.netns!r}", "one of: " + ", ".join(sorted(topo.namespaces)))
        dev = ns.devices.get(src.dev)
        if dev is None:
            raise _error(src, f"no device {src.dev!r} in namespace {src.netns}",
                         "one of: " + ", ".join(sorted(ns.devices)))
        if not _wired(dev):
            raise _error(src, f"{src.dev} is a {dev.kind} device, which no wire delivers frames to",
                         "a veth, an Ethernet NIC or a DSA user port")
        if not Path(src.path).is_file():
            raise _error(src, f"{src.path}: no such capture file", "a readable pcap or pcapng file")
        frames = list(read_capture(src.path))
        order = files.setdefault(os.path.realpath(src.path), len(files))
        names = {f.interface for f in frames if f.interface is not None}
        if len(names) > 1:
            wanted = {f"{src.netns}/{src.dev}", src.dev}
            if not names & wanted:
                raise _error(src, f"{src.path} has interfaces {', '.join(sorted(names))}, none named "
                                  f"{src.netns}/{src.dev} or {src.dev}", "a capture of this device")
            frames = [f for f in frames if f.interface in wanted]
        own = mac_aton(dev.mac)
        # what the namespace transmits with: a port's own MAC, its bridge's, its VLANs' and macvlans'
        ours = {mac_aton(d.mac) for d in ns.devices.values() if d.link_type == "ether" and d.mac} | {own}
        peer = topo.peer(dev)
        peer_mac = mac_aton(peer.mac) if peer is not None and peer.link_type == "ether" else bytes(6)
        for f in frames:
            data = f.data
            if f.linktype != LINKTYPE_ETHERNET:  # tcprewrite --dlt=enet --enet-dmac=DEV --enet-smac=PEER
                data = own + peer_mac + data[12:]
            r = ReplayFrame(src, f, data)
            if f.direction == OUTBOUND or (f.direction != INBOUND and data[6:12] in ours):
                r.skipped = f"sent by {src.dev}"
            r.order = order
            out.append(r)
    first = min((r.frame.ts for r in out if r.frame.ts is not None), default=0.0)
    last: dict[int, float] = {}
    for r in out:  # a frame without a timestamp (a simple packet block) plays with the one before it
        ts = r.frame.ts if r.frame.ts is not None else last.get(r.order, first)
        last[r.order] = ts
        r.time = ts - first
        if r.time > MAX_VIRTUAL_TIME:
            raise _error(r.source, f"{r.source.path}: frame {r.frame.index} is {r.time:g} s after the first frame",
                         f"captures spanning at most {MAX_VIRTUAL_TIME:g} s (or --replay-rate)")
    out.sort(key=lambda r: (r.time, r.order, r.frame.index))
    if rate is not None:
        n = 0
        for r in out:  # a skipped frame is listed at the time of the next injected one
            r.time = n / rate
            n += r.skipped is None
        if out and out[-1].time > MAX_VIRTUAL_TIME:
            raise ConfigError(f"--replay-rate {rate:g}: {n} frames take {out[-1].time:g} s",
                              value=rate, expected=f"at most {MAX_VIRTUAL_TIME:g} s of replay")
    return out


class _Wire:
    """What ``Kernel.deliver`` needs of a frame absorbed on a replayed port's wire: its tag."""

    __slots__ = ("tag",)

    def __init__(self, tag) -> None:
        self.tag = tag


class Replay:
    """The replayed frames of one run: their injection events, taps and report.

    :meth:`attach` schedules the frames on the simulation's clock, wraps
    ``Kernel.receive_frame`` (the wire's delivery) to absorb replayed packets
    leaving through a replayed port, and hears ``Kernel.packet_tap`` /
    ``Kernel.verdict`` through :meth:`tap` and :meth:`verdict`.
    """

    def __init__(self, frames: list[ReplayFrame], rate: float | None = None) -> None:
        self.frames = frames
        self.rate = rate
        self.sources: list[ReplaySource] = []
        for r in frames:
            if r.source not in self.sources:
                self.sources.append(r.source)
        self.ports = {(s.netns, s.dev) for s in self.sources}
        self.labels = {s.label for s in self.sources}
        self._by_tag: dict[int, ReplayFrame] = {}
        self.kernel = None
        self._receive = None

    def attach(self, kernel) -> None:
        """Wrap the wire's delivery (``Kernel.receive_frame``) of *kernel*; the taps are the caller's to chain."""
        self.kernel = kernel
        self._receive = kernel.receive_frame
        kernel.receive_frame = self._wire

    def schedule(self, sim) -> None:
        """Each frame to inject, at its time on *sim*'s clock."""
        for r in self.frames:
            if r.skipped is None:
                sim.at(r.time, self._inject, r)

    def _inject(self, r: ReplayFrame) -> None:
        """The frame arrives from the wire of its device (``netif_receive_frame``)."""
        k = self.kernel
        assert k is not None and self._receive is not None
        src = r.source
        tag = k.new_tag(src.label, None, "frame", origin=ORIGIN_REPLAY, seq=r.frame.index)
        r.tag = tag
        self._by_tag[id(tag)] = r
        dev = k.topo.namespaces[src.netns].devices.get(src.dev)  # the live device: an event may have removed it
        if dev is None:
            k.drop(_Wire(tag), "dev-down", f"{src.netns} {src.dev} rx")
            return
        self._receive(dev, r.data, tag)

    def _wire(self, dev, frame: bytes, tag, zeros: int = 0, mark: int = 0, gso_size: int = 0,
              gso_type: int = 0) -> None:
        """A frame reaches the far end of a wire: absorbed when a replayed packet left through a replayed port."""
        k = self.kernel
        assert k is not None and self._receive is not None
        if tag is not None and (tag.origin == ORIGIN_REPLAY or (tag.origin == ORIGIN_STACK
                                                                and tag.traffic in self.labels)):
            sender = k.peer(dev)
            if sender is not None and (sender.netns, sender.name) in self.ports:
                r = self._by_tag.get(id(tag))
                if r is not None and r.forwarded is None:
                    r.forwarded = f"{sender.netns}/{sender.name}"
                k.deliver(_Wire(tag), f"{sender.netns} {sender.name} wire")
                return
        self._receive(dev, frame, tag, zeros, mark, gso_size, gso_type)

    def tap(self, netns: str, dev: str, frame: bytes, skb, outbound: bool) -> None:
        """``Kernel.packet_tap``: where a replayed packet was received and transmitted."""
        tag = getattr(skb, "tag", None)
        r = self._by_tag.get(id(tag)) if tag is not None else None
        if r is None:
            return
        where = f"{netns}/{dev}"
        if outbound:
            if where not in r.out:
                r.out.append(where)
        else:
            r.last_rx = where

    def verdict(self, skb, text: str) -> None:
        """``Kernel.verdict``: a flowtable hook's verdict on a replayed packet, at the device it came in on."""
        tag = getattr(skb, "tag", None)
        r = self._by_tag.get(id(tag)) if tag is not None else None
        if r is None:
            return
        verdict, _, reason = text.partition(" ")
        r.verdicts.append({"hook": r.last_rx, "verdict": verdict, "reason": reason or None})

    # ------------------------------------------------------------------ report
    @staticmethod
    def fate(r: ReplayFrame) -> tuple[str, str | None, str | None]:
        """(fate, reason, where) of a replayed frame."""
        if r.skipped is not None:
            return "skipped", r.skipped, None
        tag = r.tag
        state = getattr(tag, "state", "live")
        if state == "delivered":
            if r.forwarded is not None:
                return "forwarded", None, r.forwarded
            return "delivered", None, r.last_rx
        if state == "dropped":
            return "dropped", getattr(tag, "reason", None), getattr(tag, "where", None)
        return IN_FLIGHT, None, None

    def report(self) -> tuple[list[dict], list[dict]]:
        """(one entry per frame, one summary per source) for the run report."""
        entries = []
        summary: dict[str, dict] = {}
        for s in self.sources:
            summary[s.text] = {"option": s.text, "netns": s.netns, "device": s.dev, "file": s.path, "frames": 0,
                               "injected": 0, "verdicts": collections.Counter(), "fates": collections.Counter()}
        for r in self.frames:
            fate, reason, where = self.fate(r)
            entries.append({"file": r.source.path, "index": r.frame.index, "time": round(r.time, 9),
                            "device": f"{r.source.netns}/{r.source.dev}", "verdicts": r.verdicts, "fate": fate,
                            "reason": reason, "where": where, "out": r.out})
            s = summary[r.source.text]
            s["frames"] += 1
            s["injected"] += r.skipped is None
            for v in r.verdicts:
                s["verdicts"][v["verdict"] + (f" {v['reason']}" if v["reason"] else "")] += 1
            s["fates"][fate + (f": {reason}" if reason else "") + (f" {where}" if fate == "forwarded" else "")] += 1
        sources = [{**s, "verdicts": dict(sorted(s["verdicts"].items())), "fates": dict(sorted(s["fates"].items()))}
                   for s in summary.values()]
        return entries, sources
