"""The run loop: a virtual clock, an event queue, the traffic, periodic GC, captures and conservation.

Theory of operation
-------------------
:class:`Simulation` owns one :class:`~flowsim.kernel.stack.core.Kernel` for the whole
topology and a queue of events: a heap of the distinct times that have
events, and for each time its events ``(function, *arguments)`` in the
order they were scheduled (one flat tuple per event; no order number, and
one float for all the events of an instant).  Events are the traffic endpoints' sends
(:mod:`flowsim.sim.traffic`), frames arriving at the far end of a veth pair or
cable (``Kernel.link_delay`` after they were sent), and the ICMP errors the
stack sends.  Events at the same time run in the order they were
scheduled, so every run of the same topology, traffic and profile is
identical.

Every whole second of virtual time, before the events of that instant,
the periodic work runs (``Kernel.gc``): each flowtable's
``nf_flow_offload_work_gc``, the conntrack GC and the reassembly timeout.
Without ``duration`` the run ends when no event is left (so no GC runs for
traffic that finishes within the first second); with ``duration`` it stops
at that time — events after it stay queued, their packets *in flight* —
and the GC ticks up to it run even when the network is idle, which is how
idle flows time out.

Idle stretches cost no real time: a tick at which nothing can expire
changes nothing (no flow reaches its timeout, no offloaded conntrack entry
falls under the five minutes ``nf_flow_offload_gc_step`` extends, no
conntrack entry reaches its timeout in ``gc_worker``, no reassembly queue
is ``ipfrag_time`` old), so the loop jumps over such ticks to the first one
at which something can (:func:`next_expiry`), runs it, and looks again.
The report is the same as with every tick run (``coalesce_gc=False``).
Times are virtual seconds, finite and at most :data:`MAX_TIME`: a later
event (a ``start``, a ``rate`` so small that the next packet is centuries
away, a duration) is a :class:`~flowsim.errors.ConfigError`.

At the end the books are checked: every injected packet was delivered,
dropped with a reason, or is in flight, and every in-flight packet is
accounted for by an skb in the queue or a reassembly queue
(:meth:`flowsim.kernel.stack.core.Ledger.check`).  With ``pcap_dir`` every frame
written to or read from a device is stored in ``NETNS-DEVICE.pcap``
(Ethernet link type; devices without a link-layer header get zero MAC
addresses), timestamped with the virtual clock; a name that does not make a
plain file name inside that directory is refused (:func:`pcap_file`).
With ``pcapng`` every device's frames go into one pcapng file
(:class:`flowsim.kernel.capture.PcapngWriter`): an interface ``NETNS/DEV``
per device with its libpcap link type, the direction, the packet's id
(one per simulated packet) and, on each frame a flowtable hook saw, its
verdict as a comment: ``fastpath``, ``slowpath REASON`` or ``drop REASON``.
With ``replay`` (:class:`flowsim.sim.replay.Replay`) the frames of captures
are injected at their devices' receive path on the same clock, next to the
traffic (``traffic=[]`` plays them alone), and the replay hears the taps.

    >>> from flowsim.config.topology import load_topology        # doctest: +SKIP
    >>> sim = Simulation(load_topology("topologies/selftest.toml"), flowtables=False).run()  # doctest: +SKIP
    >>> sim.kernel.ledger.totals()["in_flight"]            # doctest: +SKIP
    0
"""

from __future__ import annotations

import collections
import heapq
import math
import os
from pathlib import Path

from flowsim.config import iproute
from flowsim.config.limits import MAX_VIRTUAL_TIME
from flowsim.errors import ConfigError
from flowsim.kernel.capture import PcapngWriter, PcapWriter
from flowsim.kernel.conntrack import CT_OFFLOAD_EXTEND_UNDER, IPS_OFFLOAD
from flowsim.kernel.flowtable.core import NF_FLOW_TEARDOWN
from flowsim.kernel.stack.core import LINK_DELAY, ORIGIN_HOST, Kernel, PacketTag, Timer
from flowsim.kernel.stack.ip import IPFRAG_TIME
from flowsim.sim.traffic import Conversation, TrafficSpec

# the stack's functions that call its capture tap: a received frame, a transmitted one

__all__ = ["Simulation", "GC_INTERVAL", "PROGRESS_EVERY", "MAX_TIME", "next_expiry", "pcap_file"]

GC_INTERVAL = 1.0  # seconds: nf_flow_offload_work_gc and gc_worker periods
PROGRESS_EVERY = 512  # events between two calls of run()'s progress hook
# The latest virtual time a run accepts: the same bound as a topology file's times (no timeout of
# the kernel needs more: NF_CT_DAY is five days), one definition for files and the API.
MAX_TIME = MAX_VIRTUAL_TIME
# Sequential mode (the conformance guest's socat mode plays one table after the other): how often a table's
# delivery is looked at, and when the guest's wait_bytes (flowsim/conform/data/init.sh) gives up on it —
# 3 s without a byte, 30 s in all
SEQUENTIAL_POLL = 0.001
SEQUENTIAL_STILL = 3.0
SEQUENTIAL_MAX = 30.0
# ... and when, after it gave up on the last table, its end snapshot counts (flowsim/conform/guest.py's
# render_scenario: the mid snapshot, wait_gone's 300 polls for a TCP end whose FIN never leaves, sleep 1;
# 20.4 s on the 7.2.13 boot of ip6ip6-over-pppoe under emulation): a stalled connection's retransmissions
# after that are not seen
SEQUENTIAL_STALLED_END = 20.0


def check_time(what: str, value, *, positive: bool = False) -> float:
    """A virtual time (or span) from the API: a finite number within [0, MAX_TIME]."""
    expected = f"a finite number of seconds {'>' if positive else '>='} 0 and <= {MAX_TIME:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"bad {what} {value!r}", value=value, expected=expected)
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0) or value > MAX_TIME:
        raise ConfigError(f"bad {what} {value!r}", value=value, expected=expected)
    return value


def next_expiry(kernel) -> float:
    """The earliest virtual time at which the periodic work (``Kernel.gc``) can change anything.

    Mirrors ``Kernel.gc`` in its order: ``nf_flow_offload_work_gc`` (a flow
    reaching its timeout, a flow torn down or whose ct is dying: the next
    tick; an offloaded ct falling under the 5 minutes
    ``nf_flow_table_extend_ct_timeout`` refreshes, or 6.1's half day of ``nf_ct_offload_timeout``), conntrack's
    ``gc_worker``
    (an entry reaching its timeout) and ``ip_expire`` (a reassembly queue
    ``ipfrag_time`` old).  May be early, never late: a tick before it is a
    no-op.  ``-inf`` means "the next tick", ``inf`` "never".
    """
    first = math.inf
    extend_under = CT_OFFLOAD_EXTEND_UNDER[kernel.profile.ct_offload_timeout]
    for st in kernel.netns.values():
        for ft in st.flowtables.values():
            for flow in ft.flows.values():
                if flow.test(NF_FLOW_TEARDOWN) or flow.ct.dying:
                    return -math.inf
                first = min(first, flow.timeout)
                if flow.ct.confirmed and flow.ct.test(IPS_OFFLOAD):
                    first = min(first, flow.ct.timeout - extend_under)
        for ct in st.conntrack.entries():
            first = min(first, ct.timeout)
        for q in st.frags.values():
            first = min(first, q.created + IPFRAG_TIME)
    return first


def pcap_file(directory: Path, netns: str, dev: str) -> Path:
    """``DIRECTORY/NETNS-DEV.pcap``, refused unless it is a plain file name inside *directory*.

    Names are checked when a topology is loaded (``dev_valid_name``, ``ip netns``'s
    file names); this is the defence at the place the path is built, for any
    name that reaches a run another way.
    """
    name = f"{netns}-{dev}.pcap"
    expected = "a namespace and device name that make a plain file name (no '/', NUL or '..')"
    if (not netns or not dev or "/" in name or os.sep in name or (os.altsep and os.altsep in name)
            or "\0" in name or Path(name).name != name):
        raise ConfigError(f"capture file name {name!r} for device {dev!r} in namespace {netns!r}",
                          value=name, expected=expected)
    path = directory / name
    root = directory.resolve()
    if path.resolve().parent != root:
        raise ConfigError(f"capture file {path} falls outside {root}", value=name, expected=expected)
    return path


class Simulation:
    """A topology, its traffic and one kernel profile on a virtual clock.

    A run changes its network the way the kernel changes a namespace: run
    events reconfigure it and the fast path creates the neighbours it misses.
    It changes the kernel's own instance (``Kernel.topo``,
    :meth:`flowsim.config.network.Topology.live`), never the loaded
    description: one loaded topology runs many times with identical results.
    """

    def __init__(self, topo, profile=None, *, flowtables: bool = True, headlen: int | None = None,
                 pcap_dir: str | Path | None = None, tracing: bool = False, pcapng: str | Path | None = None,
                 traffic: list[TrafficSpec] | None = None, link_delay: float = LINK_DELAY,
                 coalesce_gc: bool = True, replay=None, sequential: bool = False):
        link_delay = check_time("link_delay", link_delay, positive=True)
        self.coalesce_gc = coalesce_gc  # False: run every idle GC tick (the reference the jumps are tested against)
        self.kernel = Kernel(topo, profile, flowtables=flowtables, headlen=headlen, tracing=tracing,
                             link_delay=link_delay)
        self.topo = self.kernel.topo  # the run's live instance of *topo*
        if tracing:
            self.kernel.ledger.all_tags = []
        self.kernel.schedule = self.at
        self.kernel.accept = self._accept
        if traffic is None:
            traffic = [TrafficSpec.from_topology(t, i) for i, t in enumerate(self.topo.traffic)]
        self.specs = list(traffic)
        self.conversations = [Conversation(s, f) for s in self.specs for f in range(s.flows)]
        # sequential: the tables one after the other, as the conformance guest plays them (its socat mode); a
        # table's ``start`` is then its pause after the data of the one before it was delivered both ways
        self.sequential = sequential
        self._waves: list[list[Conversation]] = []
        self._stalled: list[Conversation] = []  # tables given up on, still retransmitting
        # the conversations of each traffic name: (index of its first, flows) per table of that name, the last
        # table first (its flows answer, as the later key of a dict would); no key per conversation (issue 16)
        self._by_name: dict[str | None, list[tuple[int, int]]] = {}
        first = 0
        for spec in self.specs:
            self._by_name.setdefault(spec.name, []).insert(0, (first, spec.flows))
            first += spec.flows
        # the event queue: the heap of the times that have events, and per time its bucket [index of the next
        # event to run, (fn, *args), ...], in the order scheduled -- what a heap of (time, order, fn, *args) would
        # run, without an order int and a float per event (issue 16: two frames in flight per connection)
        self.queue: list[float] = []
        self._buckets: dict[float, list] = {}
        self.events_run: list = []  # the [[event]] tables executed so far (flowsim.config.events.Event)
        self.end = 0.0
        self.duration: float | None = None
        self.pcap_dir = Path(pcap_dir) if pcap_dir is not None else None
        self._writers: dict[tuple[str, str], PcapWriter] = {}
        if self.pcap_dir is not None:
            try:
                self.pcap_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ConfigError(f"cannot create {self.pcap_dir}: {exc.strerror}", value=str(self.pcap_dir),
                                  expected="a writable directory") from None
            self.kernel.capture = self._capture
        # one pcapng for the run (interface NETNS/DEV per device, direction, packet id, hook verdicts)
        self.pcapng: PcapngWriter | None = None
        self._ng_ifaces: dict[tuple[str, str], int] = {}
        self._ng_ids: dict[int, tuple[PacketTag, int]] = {}  # id(tag) -> (tag, packet id)
        self._ng_held: list[list] = []  # blocks held until the hook's verdict on the first (an rx frame)
        self._ng_skb: object = None  # the skb of that rx frame
        if pcapng is not None:
            self.pcapng = PcapngWriter(pcapng)
            self.kernel.packet_tap = self._capture_ng
            self.kernel.verdict = self._verdict
        # frames of captures injected at devices (flowsim.sim.replay.Replay): its taps run before the pcapng's
        self.replay = replay
        if replay is not None:
            replay.attach(self.kernel)
            self._ng_tap, self._ng_verdict = self.kernel.packet_tap, self.kernel.verdict
            self.kernel.packet_tap = self._replay_tap
            self.kernel.verdict = self._replay_verdict

    def _replay_tap(self, netns: str, dev: str, frame: bytes, skb, outbound: bool) -> None:
        self.replay.tap(netns, dev, frame, skb, outbound)
        if self._ng_tap is not None:
            self._ng_tap(netns, dev, frame, skb, outbound)

    def _replay_verdict(self, skb, text: str) -> None:
        self.replay.verdict(skb, text)
        if self._ng_verdict is not None:
            self._ng_verdict(skb, text)

    @property
    def profile(self):
        return self.kernel.profile

    @property
    def unbound_devices(self) -> dict[str, tuple]:
        """Flowtable devices listed but absent, per netns (``nf_tables_newflowtable``; an event adding one
        binds it: ``Kernel.netdev_register``)."""
        return {name: st.unbound for name, st in self.kernel.netns.items() if st.unbound}

    # ------------------------------------------------------------------ events
    def at(self, t: float, fn, *args) -> None:
        """Run ``fn(*args)`` at virtual time *t* (finite, at most :data:`MAX_TIME`)."""
        if not (0 <= t <= MAX_TIME):  # also False for nan
            what = getattr(fn, "__qualname__", "an event")
            raise ConfigError(f"{what} scheduled at virtual time {t:g} s", value=t,
                              expected=f"times within [0, {MAX_TIME:g}] s (a start or rate too far out?)")
        # one flat tuple (fn, *args): no arguments tuple of its own per queued event (issue 16: frames in flight)
        bucket = self._buckets.get(t)
        if bucket is None:
            self._buckets[t] = [1, (fn, *args)]
            heapq.heappush(self.queue, t)
        else:
            bucket.append((fn, *args))

    def _event(self, event) -> None:
        """A ``[[event]]`` line runs on the run's live topology; the kernel hears what changed.

        Its namespace hears of every change; any other namespace only when a device appeared there (the
        peer of a veth pair added with ``peer … netns Y``).
        """
        before = {ns_name: {name: (dev.up, dev.mtu) for name, dev in ns.devices.items()}
                  for ns_name, ns in self.topo.namespaces.items()}
        iproute.run(self.topo, event.command)
        for ns_name, ns in self.topo.namespaces.items():
            if ns_name == event.netns or ns.devices.keys() != before[ns_name].keys():
                self.kernel.netdev_changes(ns_name, before[ns_name], event.command.text)
        self.events_run.append(event)

    def _accept(self, kernel, st, skb, info):
        """A host packet with no socket: the conversation it belongs to may bind its server here."""
        tag = skb.tag
        if tag is None or tag.origin != ORIGIN_HOST or tag.direction != "original":
            return None
        flow = tag.flow
        for first, flows in self._by_name.get(tag.traffic, ()):
            if 0 <= flow < flows:
                return self.conversations[first + flow].accept(kernel, st, info)
        return None

    def _capture(self, netns: str, dev: str, frame: bytes) -> None:
        w = self._writers.get((netns, dev))
        if w is None:
            assert self.pcap_dir is not None  # _capture is installed only with a pcap_dir
            w = self._writers[(netns, dev)] = PcapWriter(pcap_file(self.pcap_dir, netns, dev))
        w.write(frame, self.kernel.now)

    def _capture_ng(self, netns: str, dev: str, frame: bytes, skb, outbound: bool) -> None:
        """A frame for the run's pcapng (``Kernel.packet_tap``), with its skb and direction.

        A received frame is held until the flowtable hook's verdict on its skb
        (:meth:`_verdict`) or the next received frame, with the frames captured
        meanwhile, so the file keeps the capture order.
        """
        key = (netns, dev)
        iface = self._ng_ifaces.get(key)
        assert self.pcapng is not None
        if iface is None:
            d = self.topo.namespaces[netns].devices.get(dev)
            iface = self._ng_ifaces[key] = self.pcapng.device(f"{netns}/{dev}", d.link_type if d else "ether")
        tag = getattr(skb, "tag", None)
        pid = None
        if tag is not None:
            entry = self._ng_ids.get(id(tag))
            if entry is None:
                entry = self._ng_ids[id(tag)] = (tag, len(self._ng_ids) + 1)
            pid = entry[1]
        block = [iface, frame, self.kernel.now, outbound, pid, None]
        if not outbound:
            self._ng_flush()
            self._ng_skb = skb
            self._ng_held.append(block)
        elif self._ng_held:
            self._ng_held.append(block)
        else:
            self._ng_write(block)

    def _verdict(self, skb, text: str) -> None:
        """The flowtable hook's verdict on *skb*: the comment of the frame it was received in."""
        if self._ng_held and skb is self._ng_skb:
            self._ng_held[0][5] = text
            self._ng_flush()

    def _ng_write(self, block: list) -> None:
        assert self.pcapng is not None
        iface, frame, ts, outbound, pid, comment = block
        self.pcapng.write(iface, frame, ts, outbound=outbound, packetid=pid, comment=comment)

    def _ng_flush(self) -> None:
        for block in self._ng_held:
            self._ng_write(block)
        self._ng_held.clear()
        self._ng_skb = None

    def pcap_path(self, netns: str, dev: str) -> Path | None:
        """Where the capture of *dev* in *netns* is (None without ``pcap_dir``)."""
        return None if self.pcap_dir is None else pcap_file(self.pcap_dir, netns, dev)

    # ------------------------------------------------------------------ the loop
    def run(self, duration: float | None = None, progress=None) -> Simulation:
        """Run the traffic until no event is left, or until *duration* seconds of virtual time.

        *progress*, when given, is called with the virtual clock every
        :data:`PROGRESS_EVERY` events, at each idle GC tick that runs (ticks at which nothing can
        expire are jumped over, see :meth:`_gc_until`) and at the end
        (:class:`flowsim.sim.progress.SimProgress` draws a bar with it).
        """
        if duration is not None:
            duration = check_time("duration", duration)
        k = self.kernel
        self.duration = duration
        if self.sequential:
            self._waves = [[c for c in self.conversations if c.spec is spec] for spec in reversed(self.specs)]
            self._next_wave(k)
        else:
            for conv in self.conversations:
                self.at(conv.spec.start, conv.start, k)
        for event in self.topo.events:
            self.at(event.at, self._event, event)
        if self.replay is not None:
            self.replay.schedule(self)
        self._next_gc = GC_INTERVAL
        q, buckets = self.queue, self._buckets
        events = 0
        while q:
            t = q[0]
            bucket = buckets[t]
            i = bucket[0]
            if i == len(bucket):  # the instant is over (an event run at it may have added to it until now)
                heapq.heappop(q)
                del buckets[t]
                continue
            event = bucket[i]
            fn = event[0]
            if fn.__class__ is Timer and fn.cancelled:  # del_timer'd: gone without moving the clock
                bucket[i] = None
                bucket[0] = i + 1
                continue
            if duration is not None and t > duration:
                break
            if self._next_gc <= t:  # a GC tick is due before this event (the test of _gc_until, without a call)
                self._gc_until(t, None)
                continue  # what the tick scheduled may come first
            bucket[i] = None  # the bucket does not keep a run event's frame and tag alive
            bucket[0] = i + 1
            k.now = t
            fn(*event[1:])
            if progress is not None:
                events += 1
                if events % PROGRESS_EVERY == 0:
                    progress(k.now)
        if duration is not None:
            self._gc_until(duration, progress)
            k.now = max(k.now, duration)
        self.end = k.now
        if progress is not None:
            progress(self.end)
        self.close()
        self.check()
        return self

    def _next_wave(self, k) -> None:
        """Sequential mode: start the next table's connections after its pause, then watch them."""
        if not self._waves:
            for conv in self._stalled:  # the guest's end snapshot: nothing it could count comes later
                for ep in (conv.client, conv.server):
                    if ep is not None and ep.cc is not None:
                        ep.cc.stop(k.now + SEQUENTIAL_STALLED_END)
            return
        wave = self._waves.pop()
        t = k.now + wave[0].spec.start
        for conv in wave:
            self.at(t, conv.start, k)
        self.at(t + SEQUENTIAL_POLL, self._watch_wave, k, wave, t, t, -1)

    def _watch_wave(self, k, wave: list[Conversation], began: float, moved: float, seen: int) -> None:
        """Sequential mode: once every byte of *wave* was delivered both ways, the next table starts; as the
        guest's ``wait_bytes`` does, also when nothing arrived for :data:`SEQUENTIAL_STILL` seconds or after
        :data:`SEQUENTIAL_MAX` seconds; else look again :data:`SEQUENTIAL_POLL` later."""
        got = sum(c.received_bytes() for c in wave)
        if got != seen:
            moved, seen = k.now, got
        if all(c.delivered() for c in wave):
            self._next_wave(k)
        elif k.now - moved >= SEQUENTIAL_STILL or k.now - began >= SEQUENTIAL_MAX:
            self._stalled.extend(c for c in wave if not c.delivered())
            self._next_wave(k)
        else:
            self.at(k.now + SEQUENTIAL_POLL, self._watch_wave, k, wave, began, moved, seen)

    def _gc_until(self, limit: float, progress) -> None:
        """Run the GC ticks at or before *limit*, jumping over the idle ones (see the module docstring).

        ``self._next_gc`` is the first tick neither run nor proven a no-op.
        Nothing but ticks happens before *limit*, so a tick before
        :func:`next_expiry` changes nothing and is skipped; the jump lands on
        the tick at or before that time (early rather than late), which runs.
        """
        k = self.kernel
        while self._next_gc <= limit:
            if self.coalesce_gc:
                first = next_expiry(k)
                if first > limit:  # nothing can expire up to limit: every tick to it is a no-op
                    self._next_gc = (math.floor(limit / GC_INTERVAL) + 1) * GC_INTERVAL
                    break
                if first > self._next_gc:
                    self._next_gc = math.floor(first / GC_INTERVAL) * GC_INTERVAL
            k.now = self._next_gc
            k.gc()
            self._next_gc += GC_INTERVAL
            if progress is not None:
                progress(k.now)

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()
        if self.pcapng is not None:
            self._ng_flush()
            self.pcapng.close()
            self.pcapng = None

    def pending(self) -> collections.Counter:
        """tag -> skbs of that packet still queued (events and reassembly queues)."""
        out: collections.Counter = collections.Counter()
        for bucket in self._buckets.values():
            for event in bucket[bucket[0]:]:
                for a in event[1:]:
                    if isinstance(a, PacketTag):
                        out[a] += 1
        for st in self.kernel.netns.values():
            for fq in st.frags.values():
                for skb in fq.skbs:
                    if skb.tag is not None:
                        out[skb.tag] += 1
        return out

    def check(self) -> None:
        """Packet conservation (raises AssertionError when the books do not add up)."""
        self.kernel.ledger.check(self.pending())
