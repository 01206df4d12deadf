"""Neighbour tables (ARP / NDISC) with NUD states (net/core/neighbour.c).

Theory of operation
-------------------
One :class:`NeighTable` per namespace maps ``(device, address)`` to a frozen
:class:`NeighEntry` with the link-layer address and the NUD state.  Entries
come from ``ip neigh add`` (default state ``permanent``, as iproute2 sends
it) or from the topology loader, which resolves every address of every
device on the same L2 segment as ``reachable`` — what ARP/ND would have
learnt after the first exchange.  ``ip neigh add … nud
incomplete|failed|stale|…`` models unresolved or aging neighbours; explicit
entries always win over discovered ones.

:func:`discover` stands in for the first ARP/ND exchange: it floods one
broadcast frame from every up Ethernet device through veth peers and cables,
VLAN tags (``vlan_do_receive`` before the bridge, as
``__netif_receive_skb_core`` does), bridges with their VLAN filtering
(``br_allowed_ingress`` / egress untagged) and DSA user ports.  Bridges learn
the sender's MAC on the port and VID it arrived in (``br_fdb_update``) — the
pre-learnt FDB path resolution needs — and every device receiving the frame
untagged becomes a ``reachable`` neighbour of the sender for its addresses in
the sender's subnets.

The flowtable only asks whether a state is in ``NUD_VALID``
(``nft_dev_fill_forward_path``); a missing entry behaves like the fresh
``NUD_NONE`` entry ``dst_neigh_lookup`` would create.  The slow path will use
:meth:`NeighTable.update` (``neigh_update``) when it resolves one.

    >>> NudState.STALE in NUD_VALID, NudState.INCOMPLETE in NUD_VALID
    (True, False)
"""

from __future__ import annotations

import enum
import ipaddress

import attrs

from flowsim.kernel.devices.base import Encap, NetDevice
from flowsim.kernel.devices.bridge import BridgeDevice
from flowsim.kernel.devices.ethernet import LoopbackDevice, ipv6_off
from flowsim.kernel.devices.macvlan import MacvlanDevice
from flowsim.kernel.devices.vlan import VlanDevice
from flowsim.kernel.headers import mac_aton

__all__ = ["NudState", "NUD_VALID", "NUD_NAMES", "NeighEntry", "NeighTable", "discover"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class NudState(enum.IntFlag):
    """``NUD_*`` (include/uapi/linux/neighbour.h)."""

    NONE = 0x00
    INCOMPLETE = 0x01
    REACHABLE = 0x02
    STALE = 0x04
    DELAY = 0x08
    PROBE = 0x10
    FAILED = 0x20
    NOARP = 0x40
    PERMANENT = 0x80


NUD_VALID = NudState.PERMANENT | NudState.NOARP | NudState.REACHABLE | NudState.PROBE | NudState.STALE | NudState.DELAY
_NUD_VALID_BITS = int(NUD_VALID)
NUD_NAMES: dict[str, NudState] = {name.lower(): s for name, s in NudState.__members__.items()}


@attrs.frozen
class NeighEntry:
    """One neighbour (``struct neighbour``): ``lladdr`` is None while unresolved."""

    addr: IPAddress
    dev: str
    lladdr: str | None
    state: NudState
    router: bool = False
    origin: str = "static"  # "static" (ip neigh) or "discovered" (same L2 segment)

    @property
    def valid(self) -> bool:
        """``nud_state & NUD_VALID`` (on the plain ints: IntFlag's ``&`` builds a flag object per call)."""
        return bool(int(self.state) & _NUD_VALID_BITS)

    def __str__(self) -> str:
        ll = f" lladdr {self.lladdr}" if self.lladdr else ""
        return f"{self.addr} dev {self.dev}{ll} {self.state.name}"


class NeighTable:
    """Neighbours of one namespace, both families."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, IPAddress], NeighEntry] = {}
        # bumped by every change: a reader may keep an entry for as long as it stays the same
        # (the fast path reads the neighbour of a flow's next hop for every packet)
        self.version = 0
        self.frozen = False  # the table of a loaded description (flowsim.config.network.Topology.freeze)
        # neigh->hh: the hardware headers built for valid entries, (dev, addr, source MAC, protocol) -> header,
        # for the table version they were built at (neigh_hh_init; any change rebuilds them)
        self._hh: dict[tuple, bytes | None] = {}
        self._hh_version = -1

    def _mutable(self) -> None:
        if self.frozen:
            raise TypeError("the neighbour table of a loaded topology is a description: change the run's live copy")

    def __iter__(self):
        return iter(self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)

    def lookup(self, dev: str, addr: IPAddress) -> NeighEntry | None:
        """``neigh_lookup``: the entry for *addr* on *dev*, or None."""
        return self.entries.get((dev, addr))

    def hh_header(self, dev: str, addr: IPAddress, src_mac: str, proto: int) -> bytes | None:
        """``neigh_hh_output``'s cached header (``neigh->hh``, filled by ``neigh_hh_init``): the Ethernet header
        to the valid entry for *addr* on *dev* from *src_mac*, or None when there is no valid entry with an
        address (``neigh_resolve_output`` would queue and solicit).  Built once per table version, device MAC
        and protocol instead of per packet."""
        if self._hh_version != self.version:
            self._hh.clear()
            self._hh_version = self.version
        key = (dev, addr, src_mac, proto)
        try:
            return self._hh[key]
        except KeyError:
            n = self.entries.get((dev, addr))
            hh = None
            if n is not None and n.lladdr and n.valid:
                hh = mac_aton(n.lladdr) + mac_aton(src_mac) + proto.to_bytes(2, "big")  # eth_header
            self._hh[key] = hh
            return hh

    def add(self, entry: NeighEntry, *, replace: bool = True) -> NeighEntry:
        """``neigh_add``; with *replace* False an existing entry is kept (returned)."""
        self._mutable()
        key = (entry.dev, entry.addr)
        if not replace and key in self.entries:
            return self.entries[key]
        self.entries[key] = entry
        self.version += 1
        return entry

    def create(self, dev: str, addr: IPAddress, gc_thresh3: int) -> NeighEntry | None:
        """``__neigh_create`` → ``neigh_alloc``: a fresh ``NUD_NONE`` entry, or None (-ENOBUFS) when the
        table holds ``gc_thresh3`` entries and ``neigh_forced_gc`` frees none ("neighbor table overflow!")."""
        if len(self.entries) >= gc_thresh3 and not self.neigh_forced_gc():
            return None
        return self.add(NeighEntry(addr, dev, None, NudState.NONE, origin="created"))

    def neigh_forced_gc(self) -> int:
        """``neigh_forced_gc``: drop the FAILED and NOARP entries (permanent ones are never on its list).

        The kernel also drops entries not updated since the last flush; the
        simulator's tables are not aged, so those never qualify.
        """
        self._mutable()
        doomed = [k for k, e in self.entries.items() if e.state in (NudState.FAILED, NudState.NOARP)]
        for key in doomed:
            del self.entries[key]
        if doomed:
            self.version += 1
        return len(doomed)

    def discover(self, dev: str, addr: IPAddress, lladdr: str) -> NeighEntry:
        """Record what ARP/ND resolution found, unless an explicit entry exists."""
        return self.add(NeighEntry(addr, dev, lladdr, NudState.REACHABLE, origin="discovered"), replace=False)

    def update(self, dev: str, addr: IPAddress, lladdr: str | None, state: NudState) -> NeighEntry:
        """``neigh_update``: the slow path resolved (or lost) a neighbour."""
        old = self.entries.get((dev, addr))
        router = old.router if old is not None else False
        return self.add(NeighEntry(addr, dev, lladdr, state, router=router, origin="discovered"))

    def delete(self, dev: str, addr: IPAddress) -> bool:
        self._mutable()
        self.version += 1
        return self.entries.pop((dev, addr), None) is not None

    def flush_dev(self, dev: str) -> None:
        """``neigh_ifdown``: entries of a device that went away."""
        self._mutable()
        for key in [k for k in self.entries if k[0] == dev]:
            del self.entries[key]
        self.version += 1


def discover(topo) -> None:
    """Pre-learn bridge FDBs and resolve neighbours on every L2 segment of *topo*."""
    for ns in topo.namespaces.values():
        for dev in list(ns.devices.values()):
            if dev.up and dev.link_type == "ether" and dev.mac and not isinstance(dev, LoopbackDevice):
                receivers = _Flood(topo, dev).run()
                _resolve_neighbours(ns, dev, receivers)


def _resolve_neighbours(ns, dev: NetDevice, receivers: list[NetDevice]) -> None:
    """The addresses of the devices *dev*'s frames reach that *dev* would resolve: those in a subnet of its own
    addresses, and a link-local IPv6 address given to one (ND finds it on the link from *dev*'s own link-local
    address, which every IPv6 device has: a route's link-local gateway, ``ip6_validate_gw``)."""
    v6 = not ipv6_off(dev)
    for other in receivers:
        for a in other.addrs:
            if (any(mine.version == a.version and a.ip in mine.prefix and a.ip != mine.ip for mine in dev.addrs)
                    or (v6 and a.version == 6 and a.ip.is_link_local)):
                ns.neigh.discover(dev.name, a.ip, other.mac)


class _Flood:
    """One broadcast frame from *src*: where it is received untagged, and what bridges learn."""

    MAX_TAGS = 4

    def __init__(self, topo, src: NetDevice) -> None:
        assert src.mac is not None  # discover() floods only from devices with a MAC
        self.topo = topo
        self.src = src
        self.src_mac: str = src.mac
        self.seen: set = set()
        self.receivers: list[NetDevice] = []

    def run(self) -> list[NetDevice]:
        self.tx(self.src, ())
        return self.receivers

    def _dev(self, netns: str, name: str) -> NetDevice:
        return self.topo.namespaces[netns].devices[name]

    def _lower(self, dev: VlanDevice | MacvlanDevice) -> NetDevice:
        assert dev.lower is not None  # a VLAN or macvlan device is created on its lower device
        return self._dev(dev.netns, dev.lower)

    def _master(self, dev: NetDevice, master: str) -> BridgeDevice:
        br = self._dev(dev.netns, master)
        assert isinstance(br, BridgeDevice)  # only a bridge is a master (Topology.set_master)
        return br

    def _visit(self, op: str, dev: NetDevice, tags: tuple) -> bool:
        key = (op, dev.netns, dev.name, tags)
        if key in self.seen or not dev.up or len(tags) > self.MAX_TAGS:
            return False
        self.seen.add(key)
        return True

    def tx(self, dev: NetDevice, tags: tuple) -> None:
        """The frame leaves *dev* carrying *tags* (innermost first)."""
        if not self._visit("tx", dev, tags):
            return
        if isinstance(dev, VlanDevice):
            self.tx(self._lower(dev), tags + (Encap(dev.vlan_id, dev.vlan_proto),))
        elif isinstance(dev, BridgeDevice):
            vid, inner = self._classify(dev, None, tags)
            if vid is not None:
                self._forward(dev, vid, inner, exclude=None)
        elif isinstance(dev, MacvlanDevice):
            self.tx(self._lower(dev), tags)
        else:
            peer = self.topo.peer(dev)
            if peer is not None:
                self.rx(peer, tags)

    def rx(self, dev: NetDevice, tags: tuple) -> None:
        """The frame arrives on *dev* (``__netif_receive_skb_core``: VLAN first, then the bridge)."""
        if not self._visit("rx", dev, tags):
            return
        upper = self.topo.vlan_upper(dev, tags[-1]) if tags else None
        if upper is not None:
            self.rx(upper, tags[:-1])
        elif dev.master is not None:
            br = self._master(dev, dev.master)
            vid, inner = self._classify(br, dev.name, tags)
            if vid is None:
                return
            br.fdb_learn(self.src_mac, vid, dev.name)
            self._forward(br, vid, inner, exclude=dev.name)
        elif not tags:
            if dev is not self.src:
                self.receivers.append(dev)
            for up in self.topo.uppers(dev):
                if isinstance(up, MacvlanDevice):
                    self.rx(up, tags)

    def _classify(self, br: BridgeDevice, port: str | None, tags: tuple) -> tuple[int | None, tuple]:
        outer = tags[-1] if tags else None
        vid = br.allowed_ingress(port, outer)
        if br.vlan_filtering and outer is not None and outer.proto == br.vlan_protocol:
            tags = tags[:-1]
        return vid, tags

    def _egress(self, br: BridgeDevice, port: str | None, vid: int, tags: tuple) -> tuple | None:
        untagged = br.allowed_egress(port, vid)
        if untagged is None:
            return None
        return tags if untagged or not br.vlan_filtering else tags + (Encap(vid, br.vlan_protocol),)

    def _forward(self, br: BridgeDevice, vid: int, tags: tuple, exclude: str | None) -> None:
        for port in br.ports:
            if port == exclude:
                continue
            out = self._egress(br, port, vid, tags)
            if out is not None:
                self.tx(self._dev(br.netns, port), out)
        if exclude is not None:  # from a port: also up to the bridge itself
            up = self._egress(br, None, vid, tags)
            if up is not None:
                self.rx_local(br, up)

    def rx_local(self, br: BridgeDevice, tags: tuple) -> None:
        if not self._visit("local", br, tags):
            return
        upper = self.topo.vlan_upper(br, tags[-1]) if tags else None
        if upper is not None:
            self.rx(upper, tags[:-1])
        elif not tags and br is not self.src:
            self.receivers.append(br)
