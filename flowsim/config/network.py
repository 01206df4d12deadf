"""The network a topology file describes: namespaces, devices and their links as a networkx graph.

Theory of operation
-------------------
A :class:`Topology` is a set of :class:`Namespace` objects (each with its
devices, IPv4/IPv6 :class:`~flowsim.kernel.fib.Fib`, :class:`~flowsim.kernel.neigh.NeighTable`,
sysctls and nftables ruleset text) plus :attr:`Topology.graph`, a
``networkx.MultiDiGraph`` whose nodes are ``(netns, name)`` (attribute
``device``) and whose edges are keyed by their kind:

* ``peer`` — the two ends of a veth pair or a DSA/NIC cable (one edge each way);
* ``lower`` (VLAN or macvlan → real device), ``pppoe`` (ppp unit → Ethernet
  device), ``conduit`` (DSA user port → conduit), ``master`` (bridge → port):
  upper → lower, the relations ``netdev_upper_dev_link`` keeps acyclic;
* ``underlay`` — a tunnel bound with ``dev D`` → D (not an upper relation).

It is built by replaying, namespace by namespace in file order, the iproute2 /
bridge command lines of a topology file (:mod:`flowsim.config.iproute`).  ifindexes
are allocated per namespace like the kernel's ``dev_index_reserve``: ``lo`` is
1, then increasing in creation order (a veth's peer is registered before the
device itself); a device moved to another namespace keeps its ifindex unless
it is taken there.  MACs are derived from ``netns/name`` (locally
administered) so runs are reproducible; VLANs and DSA user ports inherit their
lower device's, a bridge takes its lowest port MAC, as the kernel does, unless
``address`` is given.

After the commands, :meth:`Topology.discover` floods one broadcast frame from
every Ethernet device through veth peers, VLAN tags, bridges (with their VLAN
filtering) and DSA cables: bridges learn each sender's MAC on the port and
VID it arrived in (the pre-learnt FDB the path resolver needs), and every
device that receives the frame untagged resolves as a ``reachable``
neighbour of the sender for its addresses inside the sender's subnets.

Descriptions and live instances
-------------------------------
A loaded topology is a *description*: :func:`flowsim.config.topology.load_topology`
freezes it (:meth:`Topology.freeze`: the graph is ``nx.freeze``-d, the FIB
and neighbour tables and the building methods refuse changes, sysctls are
read-only), since a run changes its network the way the kernel changes a
namespace — ``[[event]]`` lines reconfigure devices and routes, the fast path
creates the neighbours it misses.  A run works on :meth:`Topology.instantiate`,
a fresh copy with its own devices, FIBs, neighbour tables, bridge FDBs and
xfrm states (``struct net`` per run), which the
:class:`~flowsim.kernel.stack.core.Kernel` owns; so one loaded topology can
be run many times, under any profile, with identical results.
"""

from __future__ import annotations

import copy
import ipaddress
import types
from collections.abc import Iterator

import attrs
import networkx as nx

from flowsim.config.names import DEV_NAME_EXPECTED, dev_valid_name
from flowsim.errors import TopologyError
from flowsim.kernel.devices.base import ETH_DATA_LEN, MAX_NEST_DEV, Command, Encap, IfAddr, NetDevice, mac_for
from flowsim.kernel.devices.bridge import BridgeDevice
from flowsim.kernel.devices.dsa import DsaUserDevice
from flowsim.kernel.devices.ethernet import LoopbackDevice, ipv6_off
from flowsim.kernel.devices.ip6tnl import Ip6tnlDevice
from flowsim.kernel.devices.macvlan import MacvlanDevice
from flowsim.kernel.devices.vlan import VlanDevice
from flowsim.kernel.fib import Fib
from flowsim.kernel.headers import IPV6_MIN_MTU
from flowsim.kernel.neigh import NeighTable, discover

__all__ = ["Topology", "Namespace", "NftText", "LinkRequest", "UPPER_EDGES", "FrozenTopologyError", "ipv6_off"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
UPPER_EDGES = frozenset({"lower", "pppoe", "conduit", "master"})
# the relations the kernel makes with netdev_upper_dev_link (VLAN, macvlan, DSA user port, bridge port) and so counts
# in lower_level / upper_level; a PPP unit is not one (pppoe binds its channel to the Ethernet device)
_NESTED_EDGES = UPPER_EDGES - {"pppoe"}


def _thaw(graph: nx.MultiDiGraph) -> None:
    """Undo ``nx.freeze`` on a copy: its marks are per-instance attributes shadowing the methods.  Unlike
    building a new graph, this keeps every adjacency in its order (uppers and peers are found in it)."""
    for name, value in list(vars(graph).items()):
        if value is nx.classes.function.frozen:
            delattr(graph, name)
    vars(graph).pop("frozen", None)


class FrozenTopologyError(TypeError):
    """A change asked of a description (a loaded topology): change :meth:`Topology.instantiate` instead."""


@attrs.frozen
class NftText:
    """A namespace's nftables ruleset text and where it starts (absolute line of its first line)."""

    text: str
    file: str | None
    line: int


@attrs.frozen
class LinkRequest:
    """The kind-independent part of ``ip link add`` (``name``, ``link``, ``address``, ``mtu``, ``netns``)."""

    name: str
    netns: str
    kind: str
    link: str | None = None
    address: str | None = None
    mtu: int | None = None


class Namespace:
    """One network namespace (``struct net``)."""

    def __init__(self, topo: Topology, name: str):
        self.topo = topo
        self.name = name
        self.devices: dict[str, NetDevice] = {}
        self.by_index: dict[int, NetDevice] = {}
        self.next_ifindex = 1
        self.fib = Fib(self)
        self.neigh = NeighTable()
        self.sysctls: dict[str, str] = {}  # read-only (a mappingproxy) in a description
        self.nft: NftText | None = None
        self.commands: tuple[Command, ...] = ()  # the file's command lines, as replayed (conform renders them)
        self.xfrm = None  # flowsim.kernel.stack.xfrm.XfrmDb once an 'ip xfrm' line ran

    def __repr__(self) -> str:
        return f"<Namespace {self.name}: {', '.join(self.devices)}>"

    def alloc_ifindex(self) -> int:
        """``dev_index_reserve(net, 0)``: the next free index at or after the cyclic cursor."""
        index = self.next_ifindex
        while index in self.by_index:
            index += 1
        self.next_ifindex = index + 1
        return index

    def dev_by_index(self, ifindex: int) -> NetDevice | None:
        """``dev_get_by_index``."""
        return self.by_index.get(ifindex)

    def owner_of(self, addr: IPAddress) -> NetDevice | None:
        """The device holding *addr* locally, if any."""
        for dev in self.devices.values():
            if any(a.ip == addr for a in dev.addrs):
                return dev
        return None

    def sysctl(self, key: str, default: str | None = None) -> str | None:
        return self.sysctls.get(key, default)

    def sysctl_on(self, key: str, default: str = "0") -> bool:
        """A switch (``proc_dointvec``): on unless it holds 0."""
        return str(self.sysctls.get(key, default)).strip() not in ("0", "")

    def sysctl_int(self, key: str, default: int) -> int:
        """One of :data:`flowsim.config.sysctls.INTEGER_SYSCTLS` (``proc_dointvec``; checked when the topology set
        it), *default* when unset."""
        value = self.sysctls.get(key)
        return default if value is None else int(str(value).strip())


class Topology:
    """Namespaces, devices and links (see the module docstring)."""

    def __init__(self, file: str | None = None):
        self.file = file
        self.graph = nx.MultiDiGraph()
        self.namespaces: dict[str, Namespace] = {}
        self.traffic: list = []  # flowsim.config.traffic.Traffic: the [[traffic]] tables
        self.events: list = []  # flowsim.config.events.Event: iproute2 lines a run executes at a time
        self.description = ""
        self.source = ""
        self.frozen = False  # a description (see the module docstring)

    # ------------------------------------------------------------------ description / live instance
    def freeze(self) -> Topology:
        """Make this topology a description: every later change raises (see the module docstring).

        The devices themselves stay plain objects: only the building methods
        below, the graph, the FIBs, the neighbour tables and the sysctls refuse.
        """
        nx.freeze(self.graph)
        for ns in self.namespaces.values():
            ns.fib.frozen = True
            ns.neigh.frozen = True
            ns.sysctls = types.MappingProxyType(ns.sysctls)
        self.traffic = tuple(self.traffic)
        self.events = tuple(self.events)
        self.frozen = True
        return self

    def instantiate(self) -> Topology:
        """A fresh live copy for one run: its own graph, devices, FIBs, neighbour tables, bridge FDBs,
        VLANs and xfrm states, every one of them changeable (``copy_net_ns`` of every namespace)."""
        memo: dict[int, object] = {}
        if self.frozen:  # the immutable parts are shared; read-only sysctls become a dict again
            memo[id(self.traffic)], memo[id(self.events)] = self.traffic, self.events
            for ns in self.namespaces.values():
                memo[id(ns.nft)] = ns.nft
                memo[id(ns.sysctls)] = dict(ns.sysctls)
        live = copy.deepcopy(self, memo)
        _thaw(live.graph)
        for ns in live.namespaces.values():
            ns.fib.frozen = False
            ns.neigh.frozen = False
        live.frozen = False
        return live

    def live(self) -> Topology:
        """What a run may change: a fresh :meth:`instantiate` of a description, or this topology when it is
        already live (built by hand, or instantiated and prepared by the caller)."""
        return self.instantiate() if self.frozen else self

    def _mutable(self) -> None:
        if self.frozen:
            raise FrozenTopologyError(f"{self.file or 'this topology'} is a loaded description: "
                                      "change the live copy of a run (Topology.instantiate())")

    # ------------------------------------------------------------------ queries
    def netns(self, name: str) -> Namespace:
        try:
            return self.namespaces[name]
        except KeyError:
            raise TopologyError(f"no namespace {name!r}", file=self.file, value=name,
                                expected="one of " + ", ".join(self.namespaces)) from None

    def device(self, netns: str, name: str) -> NetDevice:
        """The device *name* in *netns* (``__dev_get_by_name``)."""
        dev = self.netns(netns).devices.get(name)
        if dev is None:
            raise TopologyError(f"no device {name!r} in namespace {netns!r}", file=self.file, value=name,
                                expected="one of " + ", ".join(self.netns(netns).devices))
        return dev

    def device_by_index(self, netns: str, ifindex: int) -> NetDevice | None:
        return self.netns(netns).dev_by_index(ifindex)

    def devices(self) -> Iterator[NetDevice]:
        for ns in self.namespaces.values():
            yield from ns.devices.values()

    def _related(self, dev: NetDevice, kind: str, out: bool = True) -> list[NetDevice]:
        node = (dev.netns, dev.name)
        edges = self.graph.out_edges(node, keys=True) if out else self.graph.in_edges(node, keys=True)
        other = 1 if out else 0
        return [self.graph.nodes[e[other]]["device"] for e in edges if e[2] == kind]

    def peer(self, dev: NetDevice) -> NetDevice | None:
        """The other end of a veth pair or cable."""
        peers = self._related(dev, "peer")
        return peers[0] if peers else None

    def uppers(self, dev: NetDevice) -> list[NetDevice]:
        """Devices stacked directly on *dev* (``netdev_for_each_upper_dev``)."""
        return [u for kind in UPPER_EDGES for u in self._related(dev, kind, out=False)]

    def vlan_upper(self, dev: NetDevice, tag: Encap) -> VlanDevice | None:
        """``__vlan_find_dev_deep_rcu``: the VLAN device on *dev* for *tag*."""
        for up in self._related(dev, "lower", out=False):
            if isinstance(up, VlanDevice) and up.vlan_id == tag.id and up.vlan_proto == tag.proto:
                return up
        return None

    # ------------------------------------------------------------------ building
    def add_netns(self, name: str) -> Namespace:
        """``ip netns add``: a namespace with its loopback device (ifindex 1)."""
        self._mutable()
        ns = Namespace(self, name)
        self.namespaces[name] = ns
        lo = LoopbackDevice(name, "lo", "loopback", mac="00:00:00:00:00:00", mtu=65536,
                            addrs=[IfAddr(ipaddress.ip_interface("127.0.0.1/8")),
                                   IfAddr(ipaddress.ip_interface("::1/128"))])
        self._register(ns, lo)
        return ns

    def _register(self, ns: Namespace, dev: NetDevice) -> None:
        dev.netns = ns.name
        dev.ifindex = ns.alloc_ifindex()
        ns.devices[dev.name] = dev
        ns.by_index[dev.ifindex] = dev
        self.graph.add_node((ns.name, dev.name), device=dev)

    def require_netns(self, name: str, cmd: Command) -> Namespace:
        if name not in self.namespaces:
            raise cmd.error(f"namespace {name!r} does not exist", value=name,
                            expected="a namespace of this file (" + ", ".join(self.namespaces) + ")")
        return self.namespaces[name]

    def require_device(self, netns: str, name: str, cmd: Command) -> NetDevice:
        ns = self.require_netns(netns, cmd)
        dev = ns.devices.get(name)
        if dev is None:
            raise cmd.error(f"device {name!r} does not exist in namespace {netns!r}", value=name,
                            expected="an existing device (" + ", ".join(ns.devices) + ")")
        return dev

    def new_device(self, cls: type, cmd: Command, *, netns: str, name: str, kind: str,
                   address: str | None = None, mtu: int | None = None, **fields) -> NetDevice:
        """Create and register a device (``register_netdevice``); duplicate names are refused."""
        self._mutable()
        ns = self.require_netns(netns, cmd)
        why = dev_valid_name(name)  # register_netdevice → dev_get_valid_name: -EINVAL
        if why is not None:
            raise cmd.error(why, value=name, expected=DEV_NAME_EXPECTED)
        if name in ns.devices:
            raise cmd.error(f"device {name!r} already exists in namespace {netns!r}", value=name,
                            expected="a new device name (RTNETLINK answers: File exists)")
        dev = cls(netns, name, kind, **fields)
        dev.mac = address or mac_for(netns, name)
        dev.addr_set = address is not None
        if mtu:  # rtnl_create_link sets it without ndo_change_mtu: a bridge's stays automatic (mtu_set unset)
            dev.mtu = mtu
        dev.line = cmd.line
        self._register(ns, dev)
        return dev

    def link_upper(self, upper: NetDevice, lower: NetDevice, kind: str, cmd: Command) -> None:
        """``netdev_upper_dev_link``: refuse a relation that would make the uppers a cycle."""
        self._mutable()
        u, lo = (upper.netns, upper.name), (lower.netns, lower.name)
        view = nx.subgraph_view(self.graph, filter_edge=lambda a, b, k: k in UPPER_EDGES)
        if u == lo or nx.has_path(view, lo, u):
            chain = [upper.name] + ([n[1] for n in nx.shortest_path(view, lo, u)] if u != lo else [upper.name])
            raise cmd.error("cycle of upper devices " + " -> ".join(chain), value=upper.name,
                            expected="a device that is not already stacked above it (-EBUSY)")
        if kind in _NESTED_EDGES:
            below, above = self._nest_level(lo, down=True), self._nest_level(u, down=False)
            if below + above > MAX_NEST_DEV:  # dev->lower_level + upper_dev->upper_level
                raise cmd.error(f"too many stacked devices: {lower.name} and the {below - 1} below it, {upper.name} "
                                f"and the {above - 1} above it would make a chain of {below + above}",
                                value=upper.name,
                                expected=f"at most {MAX_NEST_DEV} devices in a chain of upper links "
                                         "(MAX_NEST_DEV; __netdev_upper_dev_link: -EMLINK, Too many links)")
        self.graph.add_edge(u, lo, key=kind)
        if kind != "master":
            upper.lower = lower.name

    def _nest_level(self, node: tuple[str, str], down: bool) -> int:
        """``lower_level`` (*down*: the longest chain of upper links from *node* down, *node* included) or
        ``upper_level`` (up), as ``__netdev_update_lower_level`` / ``__netdev_update_upper_level`` keep them; a
        chain is never longer than :data:`MAX_NEST_DEV`, so neither is the recursion."""
        edges = self.graph.out_edges(node, keys=True) if down else self.graph.in_edges(node, keys=True)
        return 1 + max((self._nest_level(e[1] if down else e[0], down) for e in edges if e[2] in _NESTED_EDGES),
                       default=0)

    def link_peer(self, a: NetDevice, b: NetDevice) -> None:
        self.graph.add_edge((a.netns, a.name), (b.netns, b.name), key="peer")
        self.graph.add_edge((b.netns, b.name), (a.netns, a.name), key="peer")

    def set_master(self, dev: NetDevice, br: NetDevice, cmd: Command) -> None:
        """``br_add_if``: *dev* becomes a port of bridge *br*."""
        self._mutable()
        if not isinstance(br, BridgeDevice):
            raise cmd.error(f"{br.name} is not a bridge", value=br.name, expected="a bridge device")
        if dev.master == br.name:
            return
        if dev.master is not None:
            self.clear_master(dev)
        if dev.link_type != "ether" or isinstance(dev, LoopbackDevice):
            raise cmd.error(f"{dev.name} cannot be a bridge port", value=dev.name,
                            expected="an Ethernet-like device")
        if isinstance(dev, BridgeDevice):  # "No bridging of bridges"
            raise cmd.error(f"Can not enslave a bridge to a bridge: {dev.name} is one", value=dev.name,
                            expected="a device that is not a bridge (br_add_if: -ELOOP)")
        macvlans = [up.name for up in self._related(dev, "lower", out=False) if isinstance(up, MacvlanDevice)]
        if macvlans:  # netdev_rx_handler_register: the macvlan port holds the receive handler
            raise cmd.error(f"{dev.name} carries the macvlans {', '.join(macvlans)}: its receive handler is "
                            "theirs", value=dev.name,
                            expected="a device without macvlans (br_add_if: -EBUSY, Device or resource busy)")
        self.link_upper(br, dev, "master", cmd)
        dev.master = br.name
        br.add_port(dev, switchdev=isinstance(dev, DsaUserDevice))
        self._bridge_recalc(br)

    def clear_master(self, dev: NetDevice) -> None:
        """``br_del_if``."""
        self._mutable()
        if dev.master is None:
            return
        br = self.namespaces[dev.netns].devices[dev.master]
        self.graph.remove_edge((br.netns, br.name), (dev.netns, dev.name), key="master")
        br.del_port(dev.name)
        dev.master = None
        self._bridge_recalc(br)

    def _bridge_recalc(self, br: BridgeDevice) -> None:
        """``br_stp_recalculate_bridge_id`` (the lowest port MAC) and ``br_mtu_auto_adjust``."""
        ports = [self.namespaces[br.netns].devices[p] for p in br.ports]
        if ports and not br.addr_set:
            br.mac = min(p.mac for p in ports)
        self._bridge_mtu_auto_adjust(br)

    def _bridge_mtu_auto_adjust(self, br: BridgeDevice) -> None:
        """``br_mtu_auto_adjust``: unless the user set the bridge's MTU (``BROPT_MTU_SET_BY_USER``), the smallest
        of its ports' (``br_mtu_min``: ``ETH_DATA_LEN`` without ports), set as ``dev_set_mtu`` sets it."""
        if br.mtu_set:
            return
        mtu = min((self.namespaces[br.netns].devices[p].mtu for p in br.ports), default=ETH_DATA_LEN)
        if mtu != br.mtu:
            self._changed_mtu(br, mtu)

    def set_mtu(self, dev: NetDevice, mtu: int, cmd: Command) -> None:
        """``ip link set DEV mtu N`` (``dev_set_mtu``): the kind's ``ndo_change_mtu`` check, the new MTU, then
        what ``NETDEV_CHANGEMTU`` makes of it (:meth:`_changed_mtu`)."""
        self._mutable()
        if mtu == dev.mtu:  # dev_set_mtu_ext returns before ndo_change_mtu: a bridge's MTU stays automatic
            return
        if isinstance(dev, Ip6tnlDevice) and dev.mode == "ip6ip6" and mtu < IPV6_MIN_MTU:
            raise cmd.error(f"MTU {mtu} is below IPv6's least, {IPV6_MIN_MTU}, on the ip6ip6 tunnel {dev.name}",
                            value=mtu, expected=f"at least {IPV6_MIN_MTU} (ip6_tnl_change_mtu: -EINVAL)")
        lower = self.namespaces[dev.netns].devices[dev.lower] if dev.lower is not None else None
        if lower is not None and mtu > lower.mtu:
            if isinstance(dev, VlanDevice):
                raise cmd.error(f"MTU {mtu} is above the real device {lower.name}'s {lower.mtu}", value=mtu,
                                expected=f"at most {lower.mtu} (vlan_dev_change_mtu: -ERANGE, Numerical result "
                                         "out of range)")
            if isinstance(dev, MacvlanDevice):
                raise cmd.error(f"MTU {mtu} is above the lower device {lower.name}'s {lower.mtu}", value=mtu,
                                expected=f"at most {lower.mtu} (macvlan_change_mtu: -EINVAL)")
        self._changed_mtu(dev, mtu)
        if isinstance(dev, BridgeDevice):
            dev.mtu_set = True  # br_change_mtu: BROPT_MTU_SET_BY_USER, the auto adjust stops

    def _changed_mtu(self, dev: NetDevice, mtu: int) -> None:
        """*dev*'s MTU is *mtu*, and ``NETDEV_CHANGEMTU`` runs: ``vlan_device_event`` and ``macvlan_device_event``
        bring down the VLANs and macvlans above it that are larger (each in turn notifying its own), and
        ``br_device_event`` re-adjusts the bridge it is a port of."""
        dev.mtu = mtu
        if ipv6_off(dev):
            # addrconf_notify: "if MTU under IPV6_MIN_MTU stop IPv6 on this interface" (addrconf_ifdown: its
            # addresses and routes go, and come back only when added again)
            dev.addrs[:] = [a for a in dev.addrs if a.version != 6]
            self.namespaces[dev.netns].fib.rt6_disable_ip(dev.name)
        for up in self._related(dev, "lower", out=False):
            if isinstance(up, (VlanDevice, MacvlanDevice)) and up.mtu > mtu:
                self._changed_mtu(up, mtu)
        if dev.master is not None:
            br = self.namespaces[dev.netns].devices[dev.master]
            assert isinstance(br, BridgeDevice)  # set_master makes only bridges masters
            self._bridge_mtu_auto_adjust(br)

    def move(self, dev: NetDevice, netns: str, cmd: Command) -> None:
        """``dev_change_net_namespace``: keep the ifindex unless taken; addresses and routes go."""
        self._mutable()
        target = self.require_netns(netns, cmd)
        if netns == dev.netns:
            return
        if dev.name in target.devices:
            raise cmd.error(f"device {dev.name!r} already exists in namespace {netns!r}", value=dev.name,
                            expected="a namespace without a device of that name")
        stacked = self.uppers(dev) or dev.master is not None or dev.lower is not None
        if stacked or isinstance(dev, (BridgeDevice, LoopbackDevice)):
            raise cmd.error(f"cannot move {dev.name}: it is stacked or namespace-local", value=dev.name,
                            expected="a device without uppers, lower or master (move it before stacking)")
        old = self.namespaces[dev.netns]
        old_node = (old.name, dev.name)
        del old.devices[dev.name]
        del old.by_index[dev.ifindex]
        old.fib.flush_dev(dev.name)
        old.neigh.flush_dev(dev.name)
        if dev.ifindex in target.by_index:
            dev.ifindex = target.alloc_ifindex()
        dev.netns = netns
        dev.addrs.clear()
        dev.up = False
        target.devices[dev.name] = dev
        target.by_index[dev.ifindex] = dev
        nx.relabel_nodes(self.graph, {old_node: (netns, dev.name)}, copy=False)

    def delete(self, dev: NetDevice, cmd: Command) -> None:
        """``ip link del``: also the veth peer, the uppers, and the ports' membership."""
        self._mutable()
        if isinstance(dev, LoopbackDevice):
            raise cmd.error("cannot delete lo", value=dev.name, expected="another device")
        doomed = [dev]
        peer = self.peer(dev)
        if peer is not None and dev.kind == "veth":
            doomed.append(peer)
        for d in doomed:
            self._unregister(d)

    def _unregister(self, dev: NetDevice) -> None:
        node = (dev.netns, dev.name)
        if node not in self.graph:
            return
        for up in self.uppers(dev):
            if isinstance(up, BridgeDevice):
                self.clear_master(dev)
            else:
                self._unregister(up)
        if isinstance(dev, BridgeDevice):
            for port in list(dev.ports):
                self.clear_master(self.namespaces[dev.netns].devices[port])
        self.clear_master(dev)
        ns = self.namespaces[dev.netns]
        del ns.devices[dev.name]
        del ns.by_index[dev.ifindex]
        ns.fib.flush_dev(dev.name)
        ns.neigh.flush_dev(dev.name)
        self.graph.remove_node(node)

    # ------------------------------------------------------------------ L2 discovery
    def discover(self) -> None:
        """Pre-learn bridge FDBs and fill neighbour tables (:func:`flowsim.kernel.neigh.discover`)."""
        self._mutable()
        discover(self)
