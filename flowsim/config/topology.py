"""Topologies: namespaces, devices and their links as a networkx graph, loaded from TOML.

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

Topology file (TOML)
--------------------
::

    # ASCII diagram and the source of the setup (comments)
    description = "one line"            # optional
    source = "where the setup comes from"  # optional

    [netns.router]                      # namespaces are configured in file order
    commands = '''
    ip link add eth0 type veth peer name eth0 netns client
    ip link set eth0 up
    ip addr add 2001:db8:1::2/64 dev eth0 nodad
    ip -6 route add default via 2002:db8:1::2 dev tun0
    '''
    sysctls = { "net.ipv6.conf.all.forwarding" = 1 }
    nft = '''
    table inet filter { … }
    '''

    [[traffic]]                         # flows for the simulator (see flowsim.config.traffic)
    name = "download"
    proto = "tcp"
    from = "client"                     # netns of the sender
    to = "2001:db8:3::2"
    dport = 5201

``commands`` is a string (one command per line, ``#`` comments, ``\\``
continuation) or an array of strings; the commands are ``ip [-4|-6] [-n NS]
link|addr|route|neigh …``, ``bridge vlan|fdb …`` and ``sysctl K=V`` in their
own syntax (see :mod:`flowsim.config.iproute`).  Use literal strings (``'''``) so that
errors point at the exact line.  Extensions for what iproute2 cannot create:

* ``ip link add ppp0 type pppoe dev ETH session ID peer MAC [multilink]
  [disconnected]`` — a ppp unit with one PPPoE channel (:mod:`flowsim.kernel.devices.pppoe`);
* ``ip link add lan1 link CONDUIT type dsa port N tagger NAME [peer name DEV
  [netns NS]]`` — a DSA user port, optionally cabled (:mod:`flowsim.kernel.devices.dsa`);
* ``ip link add eth0 type ethernet [peer name DEV [netns NS]]`` — a NIC;
* ``bridge vlan add … switchdev on|off`` — whether the VLAN was added through
  switchdev (BR_VLFLAG_ADDED_BY_SWITCHDEV; default: on for DSA user ports).

Every error is one :class:`~flowsim.errors.TopologyError` naming the file, the
absolute line, the command and what was expected.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path

import attrs
import networkx as nx

from flowsim.config.events import Event, _events
from flowsim.config.traffic import Traffic, _traffic
from flowsim.errors import TopologyError
from flowsim.kernel.devices.base import Command, Encap, IfAddr, NetDevice, mac_for
from flowsim.kernel.devices.bridge import BridgeDevice
from flowsim.kernel.devices.dsa import DsaUserDevice
from flowsim.kernel.devices.ethernet import LoopbackDevice
from flowsim.kernel.devices.vlan import VlanDevice
from flowsim.kernel.fib import Fib
from flowsim.kernel.neigh import NeighTable, discover

__all__ = ["Topology", "Namespace", "NftText", "Traffic", "Event", "LinkRequest", "UPPER_EDGES",
           "load_topology", "load_topology_text"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
UPPER_EDGES = frozenset({"lower", "pppoe", "conduit", "master"})


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
        self.sysctls: dict[str, str] = {}
        self.nft: NftText | None = None
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


class Topology:
    """Namespaces, devices and links (see the module docstring)."""

    def __init__(self, file: str | None = None):
        self.file = file
        self.graph = nx.MultiDiGraph()
        self.namespaces: dict[str, Namespace] = {}
        self.traffic: list[Traffic] = []
        self.events: list[Event] = []  # [[event]] tables: iproute2 lines a run executes at a time
        self.description = ""
        self.source = ""

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
        ns = self.require_netns(netns, cmd)
        if name in ns.devices:
            raise cmd.error(f"device {name!r} already exists in namespace {netns!r}", value=name,
                            expected="a new device name (RTNETLINK answers: File exists)")
        dev = cls(netns, name, kind, **fields)
        dev.mac = address or mac_for(netns, name)
        dev.addr_set = address is not None
        if mtu:
            dev.mtu = mtu
            dev.mtu_set = True
        dev.line = cmd.line
        self._register(ns, dev)
        return dev

    def link_upper(self, upper: NetDevice, lower: NetDevice, kind: str, cmd: Command) -> None:
        """``netdev_upper_dev_link``: refuse a relation that would make the uppers a cycle."""
        u, lo = (upper.netns, upper.name), (lower.netns, lower.name)
        view = nx.subgraph_view(self.graph, filter_edge=lambda a, b, k: k in UPPER_EDGES)
        if u == lo or nx.has_path(view, lo, u):
            chain = [upper.name] + ([n[1] for n in nx.shortest_path(view, lo, u)] if u != lo else [upper.name])
            raise cmd.error("cycle of upper devices " + " -> ".join(chain), value=upper.name,
                            expected="a device that is not already stacked above it (-EBUSY)")
        self.graph.add_edge(u, lo, key=kind)
        if kind != "master":
            upper.lower = lower.name

    def link_peer(self, a: NetDevice, b: NetDevice) -> None:
        self.graph.add_edge((a.netns, a.name), (b.netns, b.name), key="peer")
        self.graph.add_edge((b.netns, b.name), (a.netns, a.name), key="peer")

    def set_master(self, dev: NetDevice, br: NetDevice, cmd: Command) -> None:
        """``br_add_if``: *dev* becomes a port of bridge *br*."""
        if not isinstance(br, BridgeDevice):
            raise cmd.error(f"{br.name} is not a bridge", value=br.name, expected="a bridge device")
        if dev.master == br.name:
            return
        if dev.master is not None:
            self.clear_master(dev)
        if dev.link_type != "ether" or isinstance(dev, LoopbackDevice):
            raise cmd.error(f"{dev.name} cannot be a bridge port", value=dev.name,
                            expected="an Ethernet-like device")
        self.link_upper(br, dev, "master", cmd)
        dev.master = br.name
        br.add_port(dev, switchdev=isinstance(dev, DsaUserDevice))
        self._bridge_recalc(br)

    def clear_master(self, dev: NetDevice) -> None:
        """``br_del_if``."""
        if dev.master is None:
            return
        br = self.namespaces[dev.netns].devices[dev.master]
        self.graph.remove_edge((br.netns, br.name), (dev.netns, dev.name), key="master")
        br.del_port(dev.name)
        dev.master = None
        self._bridge_recalc(br)

    def _bridge_recalc(self, br: BridgeDevice) -> None:
        """``br_stp_recalculate_bridge_id`` and ``br_mtu_auto_adjust``: lowest port MAC, smallest MTU."""
        ports = [self.namespaces[br.netns].devices[p] for p in br.ports]
        if ports and not br.addr_set:
            br.mac = min(p.mac for p in ports)
        if ports and not br.mtu_set:
            br.mtu = min(p.mtu for p in ports)

    def move(self, dev: NetDevice, netns: str, cmd: Command) -> None:
        """``dev_change_net_namespace``: keep the ifindex unless taken; addresses and routes go."""
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
        discover(self)


# ---------------------------------------------------------------------- loading

_TOP_KEYS = {"description", "source", "netns", "traffic", "event"}
_NETNS_KEYS = {"commands", "sysctls", "nft"}


class _RawToml:
    """Line numbers for a TOML text (tomllib gives none): headers and keys outside strings."""

    _HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
    _KEY = re.compile(r"^\s*([A-Za-z0-9_\-]+|\"[^\"]*\")\s*=\s*(.*)$")

    def __init__(self, text: str):
        self.lines = text.split("\n")
        self.headers: list[tuple[int, str, bool]] = []  # (line, dotted name, is array)
        self.keys: list[tuple[int, int, str, str]] = []  # (line, header index, key, value text)
        ml: str | None = None
        for no, raw in enumerate(self.lines, 1):
            if ml is not None:
                if raw.count(ml) % 2 == 1:
                    ml = None
                continue
            m = self._HEADER.match(raw)
            if m:
                name = ".".join(p.strip().strip('"') for p in m.group(2).split("."))
                self.headers.append((no, name, m.group(1) == "[["))
                continue
            m = self._KEY.match(raw)
            if m:
                value = m.group(2)
                self.keys.append((no, len(self.headers) - 1, m.group(1).strip('"'), value))
                for delim in ("'''", '"""'):
                    if value.count(delim) % 2 == 1:
                        ml = delim
                        break

    def tables(self, items, name: str, file: str, allowed: set[str], required: tuple[str, ...]):
        """The ``[[name]]`` array of tables: (index, header line, table, bad) for each, once its keys are
        checked (no unknown key, every *required* one present).

        ``bad(message, value, expected, key)`` builds the TopologyError of that
        table, at the line of *key* (of the header without one).
        """
        if not isinstance(items, list):
            raise TopologyError(f"{name} must be an array of tables", file=file, line=self.header_line(name),
                                expected=f"[[{name}]] tables")
        for i, item in enumerate(items):
            line = self.header_line(name, i)

            def bad(message: str, value=None, expected: str | None = None, key: str | None = None, i=i, line=line):
                found = self.key(name, key, i) if key else None
                return TopologyError(message, file=file, line=found[0] if found else line, command=f"[[{name}]]",
                                     value=value, expected=expected)

            if not isinstance(item, dict):
                raise bad(f"{name} entries must be tables", item, f"[[{name}]] tables")
            for key in item:
                if key not in allowed:
                    raise bad(f"unknown key {key!r}", key, "one of " + ", ".join(sorted(allowed)), key)
            for key in required:
                if key not in item:
                    raise bad(f"{name} needs {key!r}", expected=", ".join(required[:-1]) + f" and {required[-1]}")
            yield i, line, item, bad

    def header_line(self, name: str, occurrence: int = 0) -> int | None:
        found = [h[0] for h in self.headers if h[1] == name]
        return found[occurrence] if occurrence < len(found) else None

    def key(self, header: str | None, key: str, occurrence: int = 0) -> tuple[int, str] | None:
        """(line, raw value text) of *key* in the *occurrence*-th table named *header* (None: top level)."""
        want = None
        if header is not None:
            idx = [i for i, h in enumerate(self.headers) if h[1] == header]
            if occurrence >= len(idx):
                return None
            want = idx[occurrence]
        for line, hidx, k, value in self.keys:
            if (want is None and hidx == -1 or hidx == want) and k == key:
                return line, value
        return None

    def value_start(self, header: str | None, key: str) -> int | None:
        """The line where a (multi-line) string value's text starts."""
        found = self.key(header, key)
        if found is None:
            return None
        line, value = found
        value = value.strip()
        for delim in ("'''", '"""'):
            if value.startswith(delim) and value[3:].strip() == "":
                return line + 1
        return line

    def find(self, text: str, start: int) -> int | None:
        """First line at or after *start* containing *text*."""
        for no in range(max(start, 1), len(self.lines) + 1):
            if text in self.lines[no - 1]:
                return no
        return None


def load_topology(path: str | Path) -> Topology:
    """Load a topology file; every error is a :class:`TopologyError` naming file and line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TopologyError(f"cannot read topology: {exc.strerror}", file=str(path), value=str(path),
                            expected="a readable TOML file") from None
    return load_topology_text(text, file=str(path))


def load_topology_text(text: str, file: str = "<topology>") -> Topology:
    """Load a topology from TOML *text* (``file`` is used in error messages)."""
    from flowsim.config import iproute  # the command interpreter needs Topology; import late

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise TopologyError(f"invalid TOML: {exc}", file=file, line=int(m.group(1)) if m else None,
                            expected="a TOML document") from None
    raw = _RawToml(text)
    topo = Topology(file)
    _check_keys(data, _TOP_KEYS, raw, None, file)
    topo.description = _opt_str(data, "description", raw, file)
    topo.source = _opt_str(data, "source", raw, file)
    netns = data.get("netns", {})
    if not isinstance(netns, dict) or not netns:
        raise TopologyError("no namespaces", file=file, line=raw.header_line("netns"),
                            expected="at least one [netns.NAME] table")
    for name in netns:
        topo.add_netns(name)
    for name, table in netns.items():
        header = f"netns.{name}"
        if not isinstance(table, dict):
            raise TopologyError(f"netns {name!r} is not a table", file=file, line=raw.header_line(header),
                                expected="[netns.NAME] with commands, sysctls, nft")
        _check_keys(table, _NETNS_KEYS, raw, header, file)
        ns = topo.namespaces[name]
        for cmd in _commands(table.get("commands", []), name, raw, header, file):
            iproute.run(topo, cmd)
        ns.sysctls.update(_sysctls(table.get("sysctls", {}), raw, header, file))
        if "nft" in table:
            if not isinstance(table["nft"], str):
                raise TopologyError("nft must be a string", file=file, line=_line(raw, header, "nft"),
                                    expected="the ruleset text in nft syntax ('''...''')")
            ns.nft = NftText(table["nft"], file, raw.value_start(header, "nft") or 0)
    topo.discover()
    topo.traffic = _traffic(data.get("traffic", []), topo, raw, file)
    topo.events = _events(data.get("event", []), topo, raw, file)
    return topo


def _line(raw: _RawToml, header: str | None, key: str) -> int | None:
    found = raw.key(header, key)
    return found[0] if found else raw.header_line(header) if header else None


def _check_keys(table: dict, allowed: set, raw: _RawToml, header: str | None, file: str) -> None:
    for key in table:
        if key not in allowed:
            raise TopologyError(f"unknown key {key!r}" + (f" in [{header}]" if header else ""), file=file,
                                line=_line(raw, header, key) or raw.header_line(f"{header}.{key}" if header else key),
                                value=key, expected="one of " + ", ".join(sorted(allowed)))


def _opt_str(data: dict, key: str, raw: _RawToml, file: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        raise TopologyError(f"{key} must be a string", file=file, line=_line(raw, None, key), value=value,
                            expected="a string")
    return value


def _commands(value, netns: str, raw: _RawToml, header: str, file: str) -> list[Command]:
    """Split ``commands`` into :class:`Command` values with absolute line numbers."""
    key_line = _line(raw, header, "commands")
    if isinstance(value, str):
        start = raw.value_start(header, "commands") or key_line or 0
        literal = raw.key(header, "commands")[1].strip().startswith("'''")
        lines = [(start + i if literal else None, text) for i, text in enumerate(value.split("\n"))]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        lines = [(None, v) for v in value]
    else:
        raise TopologyError("commands must be a string or an array of strings", file=file, line=key_line,
                            expected="one command per line")
    out: list[Command] = []
    cursor = key_line or 0
    pending: tuple[int | None, str] | None = None
    for line, text in lines:
        stripped = text.strip()
        if pending is not None:
            line, stripped = pending[0], pending[1] + " " + stripped
            pending = None
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending = (line if line is not None else raw.find(stripped[:-1].strip(), cursor), stripped[:-1].strip())
            continue
        if line is None:
            line = raw.find(stripped.split()[0] if len(stripped) > 60 else stripped, cursor) or key_line
        cursor = line or cursor
        out.append(Command(stripped, netns, file, line))
    return out


def _sysctls(value, raw: _RawToml, header: str, file: str) -> dict[str, str]:
    line = _line(raw, header, "sysctls")
    if isinstance(value, list):
        items = {}
        for item in value:
            key, sep, val = str(item).partition("=")
            if not sep:
                raise TopologyError(f"bad sysctl {item!r}", file=file, line=line, value=item, expected="KEY=VALUE")
            items[key.strip()] = val.strip()
        return items
    if isinstance(value, dict):
        flat: dict[str, str] = {}

        def walk(prefix: str, v) -> None:
            if isinstance(v, dict):  # TOML turned an unquoted dotted key into tables
                for k, sub in v.items():
                    walk(f"{prefix}.{k}" if prefix else k, sub)
            else:
                flat[prefix] = str(int(v) if isinstance(v, bool) else v)

        walk("", value)
        return flat
    raise TopologyError("sysctls must be a table or an array", file=file, line=line,
                        expected='{ "net.ipv4.ip_forward" = 1 } or ["net.ipv4.ip_forward=1"]')


def shell_split(cmd: Command) -> list[str]:
    """Split a command line like a shell would (quotes allowed)."""
    try:
        return shlex.split(cmd.text)
    except ValueError as exc:
        raise cmd.error(f"cannot split command line: {exc}", expected="balanced quotes") from None
