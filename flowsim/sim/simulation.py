"""The run loop: a virtual clock, an event queue, the traffic, periodic GC, captures and conservation.

Theory of operation
-------------------
:class:`Simulation` owns one :class:`~flowsim.kernel.stack.core.Kernel` for the whole
topology and a priority queue of events ``(time, order, function,
arguments)``.  Events are the traffic endpoints' sends
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

At the end the books are checked: every injected packet was delivered,
dropped with a reason, or is in flight, and every in-flight packet is
accounted for by an skb in the queue or a reassembly queue
(:meth:`flowsim.kernel.stack.core.Ledger.check`).  With ``pcap_dir`` every frame
written to or read from a device is stored in ``NETNS-DEVICE.pcap``
(Ethernet link type; devices without a link-layer header get zero MAC
addresses), timestamped with the virtual clock.

    >>> from flowsim.config.topology import load_topology        # doctest: +SKIP
    >>> sim = Simulation(load_topology("topologies/selftest.toml"), flowtables=False).run()  # doctest: +SKIP
    >>> sim.kernel.ledger.totals()["in_flight"]            # doctest: +SKIP
    0
"""

from __future__ import annotations

import collections
import heapq
from pathlib import Path

from flowsim.config import iproute
from flowsim.errors import ConfigError
from flowsim.kernel.capture import PcapWriter
from flowsim.kernel.stack.core import LINK_DELAY, ORIGIN_HOST, Kernel, PacketTag
from flowsim.sim.traffic import Conversation, TrafficSpec

__all__ = ["Simulation", "GC_INTERVAL", "PROGRESS_EVERY"]

GC_INTERVAL = 1.0  # seconds: nf_flow_offload_work_gc and gc_worker periods
PROGRESS_EVERY = 512  # events between two calls of run()'s progress hook


class Simulation:
    """A topology, its traffic and one kernel profile on a virtual clock.

    A run changes its network the way the kernel changes a namespace: run
    events reconfigure it and the fast path creates the neighbours it misses.
    It changes the kernel's own instance (``Kernel.topo``,
    :meth:`flowsim.config.network.Topology.live`), never the loaded
    description: one loaded topology runs many times with identical results.
    """

    def __init__(self, topo, profile=None, *, flowtables: bool = True, headlen: int | None = None,
                 pcap_dir: str | Path | None = None, tracing: bool = False,
                 traffic: list[TrafficSpec] | None = None, link_delay: float = LINK_DELAY):
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
        self._by_key = {(c.spec.name, c.flow): c for c in self.conversations}
        self.queue: list = []
        self.events_run: list = []  # the [[event]] tables executed so far (flowsim.config.events.Event)
        self._order = 0
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

    @property
    def profile(self):
        return self.kernel.profile

    # ------------------------------------------------------------------ events
    def at(self, t: float, fn, *args) -> None:
        """Run ``fn(*args)`` at virtual time *t*."""
        heapq.heappush(self.queue, (t, self._order, fn, args))
        self._order += 1

    def _event(self, event) -> None:
        """A ``[[event]]`` line runs on the run's live topology; the kernel hears what changed."""
        ns = self.topo.namespaces[event.netns]
        before = {name: (dev.up, dev.mtu) for name, dev in ns.devices.items()}
        iproute.run(self.topo, event.command)
        self.kernel.netdev_changes(event.netns, before, event.command.text)
        self.events_run.append(event)

    def _accept(self, kernel, st, skb, info):
        """A host packet with no socket: the conversation it belongs to may bind its server here."""
        tag = skb.tag
        if tag is None or tag.origin != ORIGIN_HOST or tag.direction != "original":
            return None
        conv = self._by_key.get((tag.traffic, tag.flow))
        return conv.accept(kernel, st, info) if conv is not None else None

    def _capture(self, netns: str, dev: str, frame: bytes) -> None:
        w = self._writers.get((netns, dev))
        if w is None:
            w = self._writers[(netns, dev)] = PcapWriter(self.pcap_dir / f"{netns}-{dev}.pcap")
        w.write(frame, self.kernel.now)

    def pcap_path(self, netns: str, dev: str) -> Path | None:
        """Where the capture of *dev* in *netns* is (None without ``pcap_dir``)."""
        return None if self.pcap_dir is None else self.pcap_dir / f"{netns}-{dev}.pcap"

    # ------------------------------------------------------------------ the loop
    def run(self, duration: float | None = None, progress=None) -> Simulation:
        """Run the traffic until no event is left, or until *duration* seconds of virtual time.

        *progress*, when given, is called with the virtual clock every
        :data:`PROGRESS_EVERY` events, at each idle GC tick and at the end
        (:class:`flowsim.sim.progress.SimProgress` draws a bar with it).
        """
        if duration is not None and duration < 0:
            raise ConfigError(f"bad duration {duration}", value=duration, expected="a number of seconds >= 0")
        k = self.kernel
        self.duration = duration
        for conv in self.conversations:
            self.at(conv.spec.start, conv.start, k)
        for event in self.topo.events:
            self.at(event.at, self._event, event)
        next_gc = GC_INTERVAL
        q = self.queue
        events = 0
        while q:
            t = q[0][0]
            if duration is not None and t > duration:
                break
            while next_gc <= t:
                k.now = next_gc
                k.gc()
                next_gc += GC_INTERVAL
            t, _, fn, args = heapq.heappop(q)
            k.now = t
            fn(*args)
            if progress is not None:
                events += 1
                if events % PROGRESS_EVERY == 0:
                    progress(k.now)
        if duration is not None:
            while next_gc <= duration:
                k.now = next_gc
                k.gc()
                next_gc += GC_INTERVAL
                if progress is not None:
                    progress(k.now)
            k.now = max(k.now, duration)
        self.end = k.now
        if progress is not None:
            progress(self.end)
        self.close()
        self.check()
        return self

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()

    def pending(self) -> collections.Counter:
        """id(tag) -> skbs of that packet still queued (events and reassembly queues)."""
        out: collections.Counter = collections.Counter()
        for _t, _n, _fn, args in self.queue:
            for a in args:
                if isinstance(a, PacketTag):
                    out[id(a)] += 1
        for st in self.kernel.netns.values():
            for fq in st.frags.values():
                for skb in fq.skbs:
                    if skb.tag is not None:
                        out[id(skb.tag)] += 1
        return out

    def check(self) -> None:
        """Packet conservation (raises AssertionError when the books do not add up)."""
        self.kernel.ledger.check(self.pending())
