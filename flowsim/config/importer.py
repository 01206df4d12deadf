"""``flowsim import``: a snapshot of a live machine (:mod:`flowsim.config.snapshot`) becomes a topology file.

Theory of operation
-------------------
:func:`import_snapshot` reads every namespace folder of the snapshot and
writes the TOML text of a topology that rebuilds it with flowsim's own
command lines (:mod:`flowsim.config.iproute`):

* devices of the kinds flowsim models, from ``ip -j -d link show``: veth
  pairs (a peer in another namespace through ``link_netnsid`` and the
  namespace's ``ip netns list-id`` map, or else the one veth whose
  ``ifindex``/``link_index`` answer it), VLANs (id, protocol), bridges
  (``vlan_filtering``, ports, the VLANs of ``bridge -j vlan show``), ipip,
  ip6tnl (mode, ``encaplimit``), gre/gretap (key), vxlan, macvlan, dummy and
  a ppp device's PPPoE session (``pppoe.txt``, :meth:`_Importer.ppp_channels`),
  each with its MTU and MAC address; a NIC or a veth whose peer is outside the
  snapshot gets a stub namespace behind it, cabled by ``type ethernet peer``,
  so traffic can enter there.  Devices are created in the snapshot's ifindex
  order and the namespace tables ordered to keep it (:meth:`_Importer.namespace_order`);
* addresses (IPv6 with ``nodad``), routes, permanent neighbours, static
  bridge FDB entries, the ruleset text, the forwarding, rp_filter and
  flowtable/conntrack timeout sysctls, and ESP xfrm states and policies
  (:mod:`flowsim.config.import_xfrm`).

What the kernel creates by itself is left out on purpose and counted in a
comment: ``proto kernel`` routes, the ``local`` table, IPv6 link-local
addresses, loopback addresses, learned neighbours and FDB entries.  What
flowsim cannot represent (policy rules, routes in other tables, multipath
routes, other xfrm states, wireguard devices, a ruleset saved as JSON) is a
warning ``file: what: why`` on stderr and a comment in the output, never
dropped silently.  Names from the snapshot are checked
(:func:`~flowsim.config.snapshot.check_dev_name`,
:func:`~flowsim.config.snapshot.check_netns_name`) and shell-quoted before
they become command text; the result is loaded with
:func:`~flowsim.config.topology.load_topology_text` before it is returned.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import attrs

from flowsim.config.snapshot import (NFT_JSON, TEXT_FILES, NetnsSnapshot, Snapshot, SnapshotError,
                                     check_dev_name, check_netns_name)
from flowsim.config.import_xfrm import xfrm_policies, xfrm_states
from flowsim.config.limits import read_bounded
from flowsim.config.topology import load_topology_text
from flowsim.kernel.devices.base import ETH_DATA_LEN, IfAddr
from flowsim.kernel.fib import IPNetwork, address_prefix_route, prefix_route_metric
from flowsim.kernel.headers import RT_SCOPE_NAMES
from flowsim.errors import FlowsimError

__all__ = ["ImportResult", "import_snapshot", "toml_string", "toml_key", "traffic_tables"]

# the sysctls an import keeps (the script saves whole subtrees)
SYSCTL_KEEP = re.compile(r"net\.ipv4\.ip_forward|net\.ipv[46]\.conf\.[^.]+\.(forwarding|rp_filter)"
                         r"|net\.netfilter\.nf_flowtable_\w+"
                         r"|net\.netfilter\.nf_conntrack_(tcp|udp|icmp|icmpv6|generic)_timeout\w*"
                         r"|net\.netfilter\.nf_conntrack_tcp_loose")
_SYSCTL_KEY = re.compile(r"[A-Za-z0-9_./@+-]+")
_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")
_STACKED = ("vlan", "macvlan", "ipip", "ip6tnl", "gre", "gretap", "vxlan")
# the fallback device each tunnel module adds to every namespace (ipip_init_net, ip6_tnl_init_net, …), by kind
_FALLBACK = {"tunl0": "ipip", "sit0": "sit", "ip6tnl0": "ip6tnl", "gre0": "gre", "gretap0": "gretap",
             "erspan0": "erspan", "ip6gre0": "ip6gre", "ip_vti0": "vti", "ip6_vti0": "vti6"}
_UNSUPPORTED = {
    "wireguard": "flowsim's wireguard device has no keys or peers to import; add it by hand",
    "ppp": "ip output lacks the PPPoE session id and peer MAC; write `ip link add NAME type pppoe dev ETH "
           "session ID peer MAC` by hand",
    "dsa": "the DSA conduit, port and tagger are not in ip output; write `ip link add NAME link CONDUIT type dsa "
           "port N tagger T` by hand",
}


@dataclass
class Dev:
    """One device of the snapshot (a ``ip -j -d link show`` object)."""

    ns: str
    name: str
    ifindex: int
    kind: str | None
    raw: dict
    data: dict

    @property
    def up(self) -> bool:
        return "UP" in (self.raw.get("flags") or [])


@dataclass
class ImportResult:
    """The topology text and the warnings (``file: what: why``) of one import."""

    text: str
    warnings: list[str] = field(default_factory=list)


@dataclass
class _Ns:
    name: str
    comments: list[str] = field(default_factory=list)
    create: list[str] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    stacked: list[str] = field(default_factory=list)
    masters: list[str] = field(default_factory=list)
    addrs: list[str] = field(default_factory=list)
    routes: list[str] = field(default_factory=list)
    late: list[str] = field(default_factory=list)
    pvid: list[str] = field(default_factory=list)  # a bridge's default PVID, set after its VLANs
    sysctls: dict[str, str] = field(default_factory=dict)
    nft: str | None = None
    rank: dict[str, tuple[int, str, str | None]] = field(default_factory=dict)  # create line: ifindex, dev, lower
    then: dict[str, list[str]] = field(default_factory=dict)  # create line: what must follow it before any other

    def commands(self) -> list[str]:
        return (self.ordered_create() + self.setup + self.stacked + self.masters + self.addrs + self.routes + self.late
                + self.pvid)

    def ordered_create(self) -> list[str]:
        """The device creations in the snapshot's ifindex order — the order the machine created them, so flowsim
        numbers them alike (a flow entry's iifidx/ifidx) — each after the lower device it sits on."""
        names = {r[1] for r in self.rank.values()}
        order = sorted(range(len(self.create)), key=lambda i: (self.rank.get(self.create[i], (0, "", None))[0], i))
        out: list[str] = []
        done: set[str] = set()
        waiting: list[str] = []
        for i in order:
            waiting.append(self.create[i])
            progress = True
            while progress:
                progress = False
                for line in list(waiting):
                    _, name, lower = self.rank.get(line, (0, "", None))
                    if lower is None or lower in done or lower not in names:
                        waiting.remove(line)
                        out += [line, *self.then.get(line, ())]
                        done.add(name)
                        progress = True
        return out + [x for line in waiting for x in (line, *self.then.get(line, ()))]


def q(word: str) -> str:
    """A word of a command line, quoted for :func:`shlex.split` (names are checked before, quoted anyway)."""
    return shlex.quote(word)


def toml_string(text: str) -> str:
    """*text* as a TOML string: a multi-line literal when it can be one, else a basic string with escapes."""
    if "\n" in text and "'''" not in text and not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text):
        return "'''\n" + text + ("" if text.endswith("\n") else "\n") + "'''"
    out = []
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        elif 0xD800 <= ord(ch) <= 0xDFFF:  # a surrogate-escaped byte of a non-UTF-8 file name
            out.append("\\ufffd")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_string(key)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return toml_string(value) if "\n" not in value else toml_string(value.replace("\n", "\\n"))
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def traffic_tables(path: str | Path) -> str:
    """The ``[[traffic]]`` tables of the topology file *path*, as TOML text."""
    path = Path(path)
    try:
        raw = read_bounded(path)
    except OSError as exc:
        raise SnapshotError(f"cannot read: {exc.strerror}", file=path, expected="a topology file") from None
    except ValueError as exc:
        raise SnapshotError(f"cannot read: {exc}", file=path, expected="a topology file") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SnapshotError(f"not a TOML topology: {exc}", file=path, expected="a topology file") from None
    tables = data.get("traffic", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise SnapshotError("traffic is not an array of tables", file=path, expected="[[traffic]] tables")
    out = []
    for table in tables:
        out.append("[[traffic]]")
        out.extend(f"{toml_key(k)} = {_toml_value(v)}" for k, v in table.items())
        out.append("")
    return "\n".join(out)


class _Importer:
    def __init__(self, snap: Snapshot):
        self.snap = snap
        self.warnings: list[str] = []
        self.out: dict[str, _Ns] = {}
        self.stubs: dict[str, _Ns] = {}
        self.devs: dict[str, dict[int, Dev]] = {}
        self.by_name: dict[str, dict[str, Dev]] = {}
        self.skipped: dict[str, set[str]] = {}  # devices not created, per namespace
        self.nets: dict[tuple[str, str], list] = {}  # (namespace, device) -> the subnets of its addresses
        # (namespace, device, prefix, metric) of the prefix routes `ip addr add` makes again (fib_add_ifaddr,
        # addrconf_prefix_route): the snapshot's proto kernel routes the import leaves out; and those the
        # snapshot has (a prefix route the machine deleted is deleted again: deleted_prefix_routes)
        self.prefix_routes: set[tuple[str, str, IPNetwork, int]] = set()
        self.kernel_routes: set[tuple] = set()  # (namespace, dev, prefix, metric) as the snapshot has them
        self.ppp: dict[tuple[str, str], tuple[int, str, str]] = {}  # ppp device -> session id, peer MAC, device

    # -- reporting

    def warn(self, ns: str, file: str, what: str, why: str) -> None:
        location = str(self.snap.path / ns / file) if ns else str(self.snap.path / file)
        self.warnings.append(f"{location}: {what}: {why}")
        target = self.out.get(ns)
        if target is not None:
            target.comments.append(f"warning: {file}: {what}: {why}")

    # -- reading

    def read_links(self, nss: NetnsSnapshot) -> None:
        if not nss.has("link.json"):
            if nss.has("link.txt"):
                raise SnapshotError(
                    "ip without -j (OpenWrt's ip-tiny) wrote text output, which flowsim import cannot read "
                    "whole", file=nss.file("link.txt"),
                    expected="the JSON files: install ip-full (opkg install ip-full) and run the snapshot script "
                             "again")
            raise SnapshotError("missing", file=nss.file("link.json"),
                                expected="the output of ip -j -d link show (every namespace folder needs it)")
        devs: dict[int, Dev] = {}
        names: dict[str, Dev] = {}
        for obj in nss.json("link.json"):
            name = check_dev_name(obj.get("ifname"), nss.file("link.json"))
            ifindex = obj.get("ifindex")
            if not isinstance(ifindex, int):
                raise SnapshotError(f"device {name!r} has no integer ifindex", file=nss.file("link.json"),
                                    expected="the unmodified output of ip -j -d link show")
            info = obj.get("linkinfo") or {}
            if not isinstance(info, dict):
                raise SnapshotError(f"device {name!r}: linkinfo is not an object", file=nss.file("link.json"))
            kind = info.get("info_kind")
            if obj.get("link_type") == "loopback":
                kind = "loopback"
            elif obj.get("link_type") == "ppp":
                kind = "ppp"
            data = info.get("info_data") or {}
            dev = Dev(nss.name, name, ifindex, kind if isinstance(kind, str) else None, obj,
                      data if isinstance(data, dict) else {})
            devs[ifindex] = dev
            names[name] = dev
        self.devs[nss.name] = devs
        self.by_name[nss.name] = names
        self.skipped[nss.name] = set()

    def nsid_map(self, nss: NetnsSnapshot) -> dict[int, str]:
        out = {}
        for obj in nss.json("netnsid.json"):
            if isinstance(obj.get("nsid"), int) and isinstance(obj.get("name"), str):
                out[obj["nsid"]] = obj["name"]
        return out

    # -- devices

    def stub(self, ns: str, dev: str) -> str:
        base = f"stub-{ns}-{dev}"
        name, n = base, 1
        while name in self.out or name in self.stubs:
            n += 1
            name = f"{base}-{n}"
        check_netns_name(name, self.snap.path / ns)
        self.stubs[name] = _Ns(name, comments=[
            f"stub: the far end of {dev} in {ns}, which is outside the snapshot (a NIC, or a veth whose peer",
            "namespace was not saved); traffic can enter here: give it an address and routes"])
        return name

    def link_opts(self, dev: Dev, with_mtu: bool = True) -> str:
        opts = ""
        mac = dev.raw.get("address")
        if dev.raw.get("link_type") == "ether" and isinstance(mac, str) and _MAC.fullmatch(mac):
            opts += f" address {mac}"
        mtu = dev.raw.get("mtu")
        if with_mtu and isinstance(mtu, int) and 68 <= mtu <= 65535:
            opts += f" mtu {mtu}"
        return opts

    def bridge_auto_mtu(self, br: Dev) -> int:
        """The MTU ``br_mtu_auto_adjust`` gives the bridge *br*: its ports' smallest (``br_mtu_min``), ETH_DATA_LEN
        without ports."""
        mtus = [d.raw.get("mtu") for d in self.devs[br.ns].values() if d.raw.get("master") == br.name]
        return min((m for m in mtus if isinstance(m, int)), default=ETH_DATA_LEN)

    def veth_peer(self, dev: Dev, nsids: dict[str, dict[int, str]]) -> Dev | None:
        link_index = dev.raw.get("link_index")
        if "link_netnsid" not in dev.raw:
            peer = self.devs[dev.ns].get(link_index) if isinstance(link_index, int) else None
            return peer if peer is not None and peer.kind == "veth" else None
        peer_ns = nsids[dev.ns].get(dev.raw["link_netnsid"])
        if peer_ns is not None:
            peer = self.devs.get(peer_ns, {}).get(link_index) if isinstance(link_index, int) else None
            return peer if peer is not None and peer.kind == "veth" else None
        # no name for the nsid (e.g. the initial namespace, which has none): the one veth that answers
        found = [d for ns, devs in self.devs.items() if ns != dev.ns for d in devs.values()
                 if d.kind == "veth" and d.ifindex == link_index and d.raw.get("link_index") == dev.ifindex
                 and "link_netnsid" in d.raw]
        return found[0] if len(found) == 1 else None

    def devices(self) -> None:
        nsids = {nss.name: self.nsid_map(nss) for nss in self.snap.namespaces}
        paired: set[tuple[str, str]] = set()
        for nss in self.snap.namespaces:
            out = self.out[nss.name]
            pending: list[Dev] = []
            channels = self.ppp_channels(nss)
            for dev in self.devs[nss.name].values():
                kind = dev.kind
                if kind == "loopback":
                    if dev.up:
                        out.setup.append(f"ip link set {q(dev.name)} up")
                    continue
                if kind is not None and _FALLBACK.get(dev.name) == kind and all(dev.data.get(k, "any") == "any"
                                                           for k in ("local", "remote")):
                    self.fallback(dev)
                    continue
                if kind == "veth":
                    if (dev.ns, dev.name) in paired:
                        self.set_up(dev)
                        continue
                    peer = self.veth_peer(dev, nsids)
                    if peer is None:
                        stub = self.stub(dev.ns, dev.name)
                        out.comments.append(f"{dev.name}: its veth peer is outside the snapshot: cabled to stub "
                                            f"namespace {stub}")
                        out.create.append(f"ip link add {q(dev.name)}{self.link_opts(dev)} type ethernet peer name "
                                          f"{q(dev.name)} netns {q(stub)}")
                        out.rank[out.create[-1]] = (dev.ifindex, dev.name, None)
                        self.stubs[stub].setup.append(f"ip link set {q(dev.name)} up")
                    else:
                        paired.add((peer.ns, peer.name))
                        where = f" netns {q(peer.ns)}" if peer.ns != dev.ns else ""
                        out.create.append(f"ip link add {q(dev.name)}{self.link_opts(dev)} type veth peer name "
                                          f"{q(peer.name)}{self.link_opts(peer)}{where}")
                        out.rank[out.create[-1]] = (dev.ifindex, dev.name, None)
                    self.set_up(dev)
                elif kind is None and dev.raw.get("link_type") == "ether":
                    stub = self.stub(dev.ns, dev.name)
                    out.comments.append(f"{dev.name}: a NIC (no link kind): cabled to stub namespace {stub}")
                    out.create.append(f"ip link add {q(dev.name)}{self.link_opts(dev)} type ethernet peer name "
                                      f"{q(dev.name)} netns {q(stub)}")
                    out.rank[out.create[-1]] = (dev.ifindex, dev.name, None)
                    self.stubs[stub].setup.append(f"ip link set {q(dev.name)} up")
                    self.set_up(dev)
                elif kind == "dummy":
                    out.create.append(f"ip link add {q(dev.name)}{self.link_opts(dev)} type dummy")
                    out.rank[out.create[-1]] = (dev.ifindex, dev.name, None)
                    self.set_up(dev)
                elif kind == "bridge":
                    self.bridge(dev)
                elif kind in _STACKED:
                    pending.append(dev)
                elif kind == "ppp" and isinstance(channels, dict) and dev.name in channels:
                    self.ppp[(dev.ns, dev.name)] = channels[dev.name]
                    pending.append(dev)
                else:
                    if kind == "ppp" and isinstance(channels, str):
                        self.warn(dev.ns, "pppoe.txt" if nss.has("pppoe.txt") else "link.json",
                                  f"device {dev.name} (kind ppp)",
                                  channels + "; its addresses and routes are left out too")
                        self.skipped[dev.ns].add(dev.name)
                        continue
                    why = _UNSUPPORTED.get(kind or "", f"flowsim does not model {kind or 'this'} devices")
                    self.warn(dev.ns, "link.json", f"device {dev.name} (kind {kind or dev.raw.get('link_type')})",
                              why + "; its addresses and routes are left out too")
                    self.skipped[dev.ns].add(dev.name)
            self.stacked(out, pending)
            for dev in self.devs[nss.name].values():
                master = dev.raw.get("master")
                if isinstance(master, str) and dev.name not in self.skipped[dev.ns]:
                    if self.by_name[dev.ns].get(master, None) is None or master in self.skipped[dev.ns]:
                        self.warn(dev.ns, "link.json", f"device {dev.name} master {master}", "no such device")
                    elif self.by_name[dev.ns][master].kind != "bridge":
                        self.warn(dev.ns, "link.json", f"device {dev.name} master {master}",
                                  f"flowsim models bridge masters only, not {self.by_name[dev.ns][master].kind}")
                    else:
                        out.masters.append(f"ip link set {q(dev.name)} master {q(master)}")

    def fallback(self, dev: Dev) -> None:
        """A tunnel module's fallback device (tunl0, ip6tnl0, …): the kernel adds one to every namespace when
        the module loads, flowsim has none.  Left out; one that was set up or addressed is a warning."""
        self.skipped[dev.ns].add(dev.name)
        out = self.out[dev.ns]
        note = "left out, the kernel creates them when their module loads: fallback tunnel devices "
        if out.comments and out.comments[-1].startswith(note):
            out.comments[-1] += f", {dev.name}"
        else:
            out.comments.append(note + dev.name)
        if dev.up:
            self.warn(dev.ns, "link.json", f"fallback tunnel device {dev.name} is up",
                      "flowsim does not model a tunnel module's fallback device (the receiver of packets no "
                      "configured tunnel matches)")

    def ppp_channels(self, nss: NetnsSnapshot) -> dict[str, tuple[int, str, str]] | str:
        """Each ppp device's PPPoE session (id, peer MAC, Ethernet device) from pppoe.txt (/proc/net/pppoe), or
        why it cannot be known.  The kernel prints the session id (__be16) with %08X as the host reads it: the
        byte order comes from igmp.txt (:meth:`byte_order`).  /proc/net/pppoe does not name the ppp unit: one
        ppp device and one session only."""
        ppps = sorted(d.name for d in self.devs[nss.name].values() if d.kind == "ppp")
        if not ppps:
            return {}
        text = nss.text("pppoe.txt")
        if text is None:
            return _UNSUPPORTED["ppp"] + " (a snapshot with pppoe.txt, /proc/net/pppoe, has them)"
        sessions = []
        for line in text.split("\n")[1:]:
            w = line.split()
            if len(w) != 3 or not re.fullmatch(r"[0-9A-Fa-f]{1,8}", w[0]) or not _MAC.fullmatch(w[1]):
                continue
            sessions.append((int(w[0], 16), w[1].lower(), check_dev_name(w[2], nss.file("pppoe.txt"))))
        if len(ppps) != 1 or len(sessions) != 1:
            return (f"{len(ppps)} ppp devices and {len(sessions)} PPPoE sessions: /proc/net/pppoe does not say "
                    "which session is whose; write `ip link add NAME type pppoe dev ETH session ID peer MAC` by hand")
        raw, mac, lower = sessions[0]
        order = self.byte_order(nss)
        if order is None or raw > 0xFFFF:
            return ("the byte order /proc/net/pppoe printed the session id in is unknown (no igmp.txt, "
                    "/proc/net/igmp, with the group 224.0.0.1)")
        sid = raw if order == "big" else ((raw & 0xFF) << 8) | (raw >> 8)
        return {ppps[0]: (sid, mac, lower)}

    def byte_order(self, nss: NetnsSnapshot) -> str | None:
        """"little" or "big": how the host printed /proc/net/igmp's groups (%08X of a __be32, like the session id
        of /proc/net/pppoe), from 224.0.0.1, which every up IPv4 device joins (lo too)."""
        for folder in [nss, *self.snap.namespaces]:   # one machine: any namespace's file tells
            words = set((folder.text("igmp.txt") or "").upper().split())
            if "010000E0" in words:
                return "little"
            if "E0000001" in words:
                return "big"
        return None

    def namespace_order(self) -> list[NetnsSnapshot]:
        """The namespaces in the order their tables will run, so that every namespace's devices are created in its
        ifindex order, as the machine created them (flowsim numbers them in creation order; a flow entry shows
        them).  A veth pair's line sits in the table that runs first, and creates the peer then, as the next
        device of the other namespace.  Greedy: next the namespace whose turn breaks the fewest orders (ties:
        init, then by name) — a router that cabled its hosts goes before them."""
        nsids = {n.name: self.nsid_map(n) for n in self.snap.namespaces}
        own = {n.name: sorted(d.ifindex for d in self.devs[n.name].values()
                              if d.kind != "loopback" and not (d.kind is not None and _FALLBACK.get(d.name) == d.kind))
               for n in self.snap.namespaces}
        peers: dict[tuple[str, int], tuple[str, int]] = {}
        for n in self.snap.namespaces:
            for d in self.devs[n.name].values():
                if d.kind == "veth":
                    p = self.veth_peer(d, nsids)
                    if p is not None and p.ns != d.ns:
                        peers[(d.ns, d.ifindex)] = (p.ns, p.ifindex)

        def turn(ns: str, made: dict[str, set[int]]) -> int:
            """Run *ns*'s table on *made* (changed in place); how many creations come out of order."""
            cost = 0
            for i in own[ns]:
                if i in made[ns]:
                    continue
                cost += sum(1 for j in made[ns] if j > i)
                made[ns].add(i)
                peer = peers.get((ns, i))
                if peer is not None and peer[1] not in made[peer[0]]:
                    cost += sum(1 for j in own[peer[0]] if j < peer[1] and j not in made[peer[0]])
                    made[peer[0]].add(peer[1])
            return cost

        made: dict[str, set[int]] = {n.name: set() for n in self.snap.namespaces}
        left = list(self.snap.namespaces)   # init first, then by name: the tie-break
        order = []
        while left:
            best = min(left, key=lambda n: turn(n.name, {k: set(v) for k, v in made.items()}))
            turn(best.name, made)
            left.remove(best)
            order.append(best)
        return order

    def set_up(self, dev: Dev) -> None:
        if dev.up:
            self.out[dev.ns].setup.append(f"ip link set {q(dev.name)} up")

    def bridge(self, dev: Dev) -> None:
        out = self.out[dev.ns]
        d = dev.data
        opts = ""
        filtering = d.get("vlan_filtering") in (1, True)
        if filtering:
            opts += " vlan_filtering 1"
            if d.get("vlan_protocol") in ("802.1Q", "802.1ad"):
                opts += f" vlan_protocol {d['vlan_protocol']}"
            nss = self.snap_ns(dev.ns)
            if not nss.has("bridge-vlan.json"):
                # a VLAN-filtering bridge always has VLANs in `bridge vlan show` (at least its default PVID's):
                # a missing file is a snapshot made without a `bridge` that speaks JSON, not "no VLANs"
                text = nss.has("bridge-vlan.txt")
                raise SnapshotError(
                    f"VLAN-filtering bridge {dev.name}: its VLANs are "
                    + ("the text output of bridge without -j, which flowsim import does not read" if text else
                       "the output of `bridge -j vlan show`, and the file is missing"),
                    file=nss.file("bridge-vlan.txt" if text else "bridge-vlan.json"),
                    expected="bridge-vlan.json: install iproute2's bridge (OpenWrt: opkg install ip-bridge) and "
                             "run the snapshot script again")
            # the VLANs come from bridge -j vlan show, exactly: none added behind our back
            opts += " vlan_default_pvid 0"
            pvid = d.get("vlan_default_pvid", 1)
            if isinstance(pvid, int) and pvid:
                out.pvid.append(f"ip link set {q(dev.name)} type bridge vlan_default_pvid {pvid}")
        mtu = dev.raw.get("mtu")
        by_hand = isinstance(mtu, int) and 68 <= mtu <= 65535 and mtu != self.bridge_auto_mtu(dev)
        out.create.append(f"ip link add {q(dev.name)}{self.link_opts(dev, with_mtu=not by_hand)} type bridge{opts}")
        out.rank[out.create[-1]] = (dev.ifindex, dev.name, None)
        if by_hand:
            # an MTU the ports do not give was set by hand (br_change_mtu: BROPT_MTU_SET_BY_USER): set with ip link
            # set, not at creation (rtnl_create_link sets no flag), so that the ports enslaved later leave it.  Set
            # right after the bridge is made, before the VLANs on it; 1500, the bridge's MTU at creation, only once
            # the ports made it theirs (dev_set_mtu of the MTU a device has is nothing, not even the flag)
            line = f"ip link set {q(dev.name)} mtu {mtu}"
            if mtu != ETH_DATA_LEN:
                out.then[out.create[-1]] = [line]
            else:
                out.late.append(line)
        self.set_up(dev)

    def snap_ns(self, ns: str) -> NetnsSnapshot:
        return next(n for n in self.snap.namespaces if n.name == ns)

    def stacked(self, out: _Ns, pending: list[Dev]) -> None:
        """VLANs, macvlans and tunnels, each after the device it sits on."""
        made = {d.name for d in self.devs[out.name].values()
                if d.kind not in _STACKED and d.kind != "ppp"} - self.skipped[out.name]
        while pending:
            progress = False
            for dev in list(pending):
                lower = self.lower(dev)
                if lower is not None and lower not in made:
                    continue
                pending.remove(dev)
                progress = True
                line = self.stacked_line(dev, lower)
                if line is None:
                    self.skipped[dev.ns].add(dev.name)
                    continue
                out.create.append(line)
                out.rank[line] = (dev.ifindex, dev.name, lower)
                made.add(dev.name)
                if dev.up:
                    out.stacked.append(f"ip link set {q(dev.name)} up")
            if not progress:
                for dev in pending:
                    self.warn(dev.ns, "link.json", f"device {dev.name} on {self.lower(dev)}",
                              "its lower device is not in the snapshot or was left out")
                    self.skipped[dev.ns].add(dev.name)
                return

    def lower(self, dev: Dev) -> str | None:
        if dev.kind == "ppp":
            return self.ppp[(dev.ns, dev.name)][2]
        if dev.kind in ("vlan", "macvlan"):
            link = dev.raw.get("link")
            return link if isinstance(link, str) else None
        link = dev.data.get("link")
        return link if isinstance(link, str) else None

    def stacked_line(self, dev: Dev, lower: str | None) -> str | None:
        d, name = dev.data, q(dev.name)
        opts = self.link_opts(dev)
        if dev.kind == "ppp":
            sid, mac, _ = self.ppp[(dev.ns, dev.name)]
            return f"ip link add {name}{opts} type pppoe dev {q(lower or '')} session {sid:#06x} peer {mac}"
        if dev.kind in ("vlan", "macvlan") and lower is None:
            self.warn(dev.ns, "link.json", f"device {dev.name}", "a lower device in another namespace "
                      "(link_netnsid) is not modelled")
            return None
        if dev.kind == "vlan":
            vid = d.get("id")
            proto = d.get("protocol", "802.1Q")
            if not isinstance(vid, int) or proto not in ("802.1Q", "802.1ad"):
                self.warn(dev.ns, "link.json", f"vlan {dev.name}", f"unreadable id {vid!r} or protocol {proto!r}")
                return None
            return f"ip link add link {q(lower or '')} name {name}{opts} type vlan id {vid} protocol {proto}"
        if dev.kind == "macvlan":
            mode = d.get("mode", "vepa")
            if mode not in ("bridge", "private", "vepa", "passthru"):
                self.warn(dev.ns, "link.json", f"macvlan {dev.name} mode {mode!r}", "flowsim models bridge, private, "
                          "vepa and passthru")
                return None
            return f"ip link add link {q(lower or '')} name {name}{opts} type macvlan mode {q(str(mode))}"
        tail = self.tunnel_opts(dev, lower)
        if tail is None:
            return None
        return f"ip link add name {name}{opts} type {dev.kind}{tail}"

    def tunnel_opts(self, dev: Dev, lower: str | None) -> str | None:
        d = dev.data
        if d.get("external"):
            self.warn(dev.ns, "link.json", f"tunnel {dev.name}", "collect_md (external) tunnels are not modelled")
            return None
        family = 6 if dev.kind == "ip6tnl" else 4
        out = ""
        for key in ("local", "remote"):
            value = d.get(key)
            if isinstance(value, str) and value != "any":
                try:
                    addr = ipaddress.ip_address(value)
                except ValueError:
                    self.warn(dev.ns, "link.json", f"tunnel {dev.name} {key} {value!r}", "not an address")
                    return None
                if dev.kind != "vxlan" and addr.version != family:
                    self.warn(dev.ns, "link.json", f"tunnel {dev.name} {key} {value}", f"not IPv{family}")
                    return None
                out += f" {key} {addr}"
        if dev.kind == "vxlan":
            vni = d.get("id")
            if not isinstance(vni, int):
                self.warn(dev.ns, "link.json", f"vxlan {dev.name}", "no id")
                return None
            out = f" id {vni}" + out
            if isinstance(d.get("group"), str):
                out += f" group {ipaddress.ip_address(d['group'])}"
            if isinstance(d.get("port"), int):
                out += f" dstport {d['port']}"
        if lower is not None:
            out += f" dev {q(lower)}"
        ttl = d.get("ttl")
        if isinstance(ttl, int) and ttl and dev.kind != "vxlan":
            out += f" {'hoplimit' if dev.kind == 'ip6tnl' else 'ttl'} {ttl}"
        if dev.kind == "ip6tnl":
            proto = d.get("proto")
            if proto in ("ip6ip6", "ipip6", "any"):
                out += f" mode {proto}"
            if d.get("ip6_tnl_f_ign_encap_limit"):
                out += " encaplimit none"
            elif isinstance(d.get("encap_limit"), int):
                out += f" encaplimit {d['encap_limit']}"
        if dev.kind in ("gre", "gretap"):
            keys = {d.get(k) for k in ("ikey", "okey", "key") if d.get(k) is not None}
            if len(keys) > 1:
                self.warn(dev.ns, "link.json", f"gre {dev.name} keys {sorted(map(str, keys))}",
                          "different input and output keys are not modelled")
                return None
            if keys:
                key = _gre_key(keys.pop())
                if key is None:
                    self.warn(dev.ns, "link.json", f"gre {dev.name} key", "unreadable")
                    return None
                out += f" key {key}"
        return out

    # -- addresses, routes, neighbours

    def addresses(self, nss: NetnsSnapshot) -> None:
        out = self.out[nss.name]
        generated = 0
        for obj in nss.json("addr.json"):
            name = check_dev_name(obj.get("ifname"), nss.file("addr.json"))
            dev = self.by_name[nss.name].get(name)
            for info in obj.get("addr_info") or []:
                if not isinstance(info, dict) or info.get("family") not in ("inet", "inet6"):
                    continue
                local, plen = info.get("local"), info.get("prefixlen")
                try:
                    ip = ipaddress.ip_interface(f"{local}/{plen}")
                except ValueError:
                    raise SnapshotError(f"bad address {local!r}/{plen!r} on {name}", file=nss.file("addr.json"),
                                        expected="the unmodified output of ip -j addr show") from None
                if (dev is not None and dev.kind == "loopback") or ip.ip.is_link_local:
                    generated += 1
                    continue
                if dev is None or name in self.skipped[nss.name]:
                    self.warn(nss.name, "addr.json", f"address {ip} on {name}", "its device was left out")
                    continue
                self.nets.setdefault((nss.name, name), []).append(ip.network)
                line = f"ip addr add {ip}"
                peer = info.get("address")
                remote = None
                if isinstance(peer, str) and peer != local:
                    remote = ipaddress.ip_interface(f"{peer}/{plen}")
                    line = f"ip addr add {ip.ip} peer {remote}"
                line += f" dev {q(name)}"
                if ip.version == 6:
                    line += " nodad"
                metric = info.get("metric")  # IFA_RT_PRIORITY
                metric = metric if isinstance(metric, int) and 0 < metric <= 0xFFFFFFFF else 0
                if metric:
                    line += f" metric {metric}"
                addr = IfAddr(ip, remote, metric, info.get("noprefixroute") is True)
                scope = info.get("scope")  # IPv4's ifa_scope: what source address selection may pick it for
                if ip.version == 4 and isinstance(scope, str) and RT_SCOPE_NAMES.get(scope, addr.scope) != addr.scope:
                    addr = attrs.evolve(addr, scope=RT_SCOPE_NAMES[scope])
                    line += f" scope {scope}"
                if addr.noprefixroute:  # IFA_F_NOPREFIXROUTE: the machine's own route is imported
                    line += " noprefixroute"
                elif dev.up and address_prefix_route(addr) is not None:
                    self.prefix_routes.add((nss.name, name, addr.prefix, prefix_route_metric(addr)))
                out.addrs.append(line)
        if generated:
            out.comments.append(f"left out, the kernel creates them: {generated} loopback and IPv6 link-local "
                                "addresses")

    def routes(self, nss: NetnsSnapshot) -> None:
        out = self.out[nss.name]
        generated = 0
        lines: list[tuple[bool, str]] = []  # (has a gateway, the command)
        for family, file in ((4, "route4.json"), (6, "route6.json")):
            for r in nss.json(file):
                table = r.get("table", "main")
                key = self.kernel_route(nss.name, r) if table != "local" and r.get("protocol") == "kernel" else None
                if key is not None:
                    self.kernel_routes.add(key)
                if table == "local" or (r.get("protocol") == "kernel" and (key is None or key in self.prefix_routes)):
                    generated += 1
                    continue
                dst = r.get("dst")
                what = f"route {dst}" + (f" table {table}" if table != "main" else "")
                if table not in ("main", 254, "254"):
                    self.warn(nss.name, file, what, "flowsim models the main table only (no policy routing)")
                    continue
                if r.get("nexthops") or r.get("nhid"):
                    self.warn(nss.name, file, what, "multipath and nexthop-object routes are not modelled")
                    continue
                rtype = r.get("type", "unicast")
                if rtype not in ("unicast", "blackhole", "unreachable", "prohibit"):
                    self.warn(nss.name, file, what, f"route type {rtype} is not modelled")
                    continue
                dev = r.get("dev")
                if dev is not None:
                    check_dev_name(dev, nss.file(file))
                    if dev in self.skipped[nss.name] or dev not in self.by_name[nss.name]:
                        self.warn(nss.name, file, what, f"its device {dev} was left out")
                        continue
                line = self.route_line(family, r, rtype, nss.file(file))
                if self.gateway_off_subnets(nss.name, r):
                    line += " onlink"
                    out.comments.append(f"route {dst} via {r['gateway']} dev {dev}: the gateway is on none of "
                                        f"{dev}'s subnets (the kernel keeps such a route when the address goes): "
                                        "written with onlink")
                lines.append((bool(r.get("gateway")), line))
        # the routes without a gateway first: the gateway of a later one may be behind one of them (fib_check_nh
        # refuses it before), as behind a prefix route NetworkManager adds; `ip route` lists the default first
        out.routes.extend(line for _, line in sorted(lines, key=lambda gl: gl[0]))
        out.routes.extend(self.deleted_prefix_routes(nss))
        if generated:
            out.comments.append(f"left out, ip addr add recreates them: {generated} proto kernel and local-table "
                                "routes")

    def deleted_prefix_routes(self, nss: NetnsSnapshot) -> list[str]:
        """``ip route del`` of the prefix routes the imported addresses make and the machine no longer has (a
        route deleted, or flushed with ``ip route flush``): last, after the routes whose gateway was checked
        against them while they were there (the kernel keeps those).  Only for a family whose routes were
        saved."""
        out = []
        for ns, dev, prefix, metric in sorted(self.prefix_routes, key=str):
            file = "route4.json" if prefix.version == 4 else "route6.json"
            if ns != nss.name or (ns, dev, prefix, metric) in self.kernel_routes or nss.text(file) is None:
                continue
            out.append(f"ip -{prefix.version} route del {prefix} dev {q(dev)} metric {metric}")
            self.out[ns].comments.append(f"route {prefix} dev {dev}: the prefix route of its address was deleted "
                                         "on the machine: deleted again after the routes")
        return out

    def kernel_route(self, ns: str, r: dict) -> tuple | None:
        """The (namespace, device, prefix, metric) of a ``proto kernel`` route of the main table, to compare with
        the prefix routes of the imported addresses (:attr:`prefix_routes`: made again, so left out; any
        other — the route a manager such as NetworkManager adds for an address it gave ``noprefixroute``, with
        its own metric — is imported as a route); None for one the import leaves out whatever its key: what
        the kernel makes for the addresses the import leaves out (IPv6 link-local: fe80::/64) or has no prefix
        route for (a /128), and one it cannot read (route_line would refuse it)."""
        try:
            dst = ipaddress.ip_network(r.get("dst"), strict=False)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
        if dst.version == 6 and (dst.is_link_local or dst.prefixlen == 128):
            return None
        return (ns, r.get("dev"), dst, r.get("metric", 0 if dst.version == 4 else 256))

    def gateway_off_subnets(self, ns: str, r: dict) -> bool:
        """A route whose gateway is in no subnet of its device's addresses (not link-local, not onlink already):
        ``ip route add`` refuses it without ``onlink``, though the machine had it."""
        gw, dev = r.get("gateway"), r.get("dev")
        if not isinstance(gw, str) or not isinstance(dev, str) or "onlink" in (r.get("flags") or []):
            return False
        addr = ipaddress.ip_address(gw)
        if addr.is_link_local:
            return False
        return not any(addr in net for net in self.nets.get((ns, dev), []) if net.version == addr.version)

    def route_line(self, family: int, r: dict, rtype: str, file: Path) -> str:
        try:
            dst = r["dst"]
            for key in ("dst", "gateway", "prefsrc", "dev"):
                if r.get(key) is not None and not isinstance(r[key], str):
                    raise ValueError(f"{key} is not a string")
            words = ["ip", f"-{family}", "route", "add"]
            if rtype != "unicast":
                words.append(rtype)
            words.append("default" if dst == "default" else str(ipaddress.ip_network(dst, strict=True)))
            if r.get("gateway"):
                words += ["via", str(ipaddress.ip_address(r["gateway"]))]
            if r.get("dev"):
                words += ["dev", q(r["dev"])]
            metric = r.get("metric")
            if isinstance(metric, int) and metric != (0 if family == 4 else 1024):
                words += ["metric", str(metric)]
            metrics = r.get("metrics") or []
            for m in metrics if isinstance(metrics, list) else [metrics]:
                if isinstance(m, dict) and isinstance(m.get("mtu"), int):
                    words += ["mtu", *(["lock"] if "mtu" in (m.get("lock") or []) else []), str(m["mtu"])]
            if r.get("prefsrc"):
                words += ["src", str(ipaddress.ip_address(r["prefsrc"]))]
            proto = r.get("protocol")
            if isinstance(proto, str) and proto != "boot" and re.fullmatch(r"[A-Za-z0-9_]+", proto):
                words += ["proto", proto]
            scope = r.get("scope")
            if family == 4 and scope == "link" and r.get("gateway"):
                words += ["scope", "link"]
            if "onlink" in (r.get("flags") or []):
                words.append("onlink")
            return " ".join(words)
        except (KeyError, ValueError) as exc:
            raise SnapshotError(f"unreadable route {r!r:.80}: {exc}", file=file,
                                expected="the unmodified output of ip -j route show table all") from None

    def rules(self, nss: NetnsSnapshot) -> None:
        defaults = {(0, "local"), (32766, "main"), (32767, "default")}
        for file in ("rule4.json", "rule6.json"):
            for r in nss.json(file):
                if (r.get("priority"), r.get("table")) in defaults and r.get("src", "all") == "all" and len(r) <= 3:
                    continue
                self.warn(nss.name, file, f"rule priority {r.get('priority')} table {r.get('table')}",
                          "flowsim has no policy routing (ip rule)")

    def neighbours(self, nss: NetnsSnapshot) -> None:
        out = self.out[nss.name]
        learned = 0
        for n in nss.json("neigh.json"):
            state = n.get("state") or []
            if "PERMANENT" not in state:
                learned += 1
                continue
            name = check_dev_name(n.get("dev"), nss.file("neigh.json"))
            dev = self.by_name[nss.name].get(name)
            what = f"neighbour {n.get('dst')} dev {name}"
            if dev is None or name in self.skipped[nss.name] or dev.raw.get("link_type") != "ether":
                self.warn(nss.name, "neigh.json", what, "its device was left out or has no link-layer address")
                continue
            mac = n.get("lladdr")
            if not isinstance(mac, str) or not _MAC.fullmatch(mac):
                self.warn(nss.name, "neigh.json", what, f"link-layer address {mac!r} is not a MAC")
                continue
            try:
                dst = ipaddress.ip_address(n.get("dst"))
            except ValueError:
                raise SnapshotError(f"bad neighbour address {n.get('dst')!r}", file=nss.file("neigh.json")) from None
            out.late.append(f"ip neigh add {dst} lladdr {mac} dev {q(name)} nud permanent"
                            + (" router" if n.get("router") else ""))
        if learned:
            out.comments.append(f"left out: {learned} learned (not permanent) neighbours")

    def bridge_vlans(self, nss: NetnsSnapshot) -> None:
        out = self.out[nss.name]
        entries = nss.json("bridge-vlan.json")
        for e in entries:
            name = check_dev_name(e.get("ifname"), nss.file("bridge-vlan.json"))
            dev = self.by_name[nss.name].get(name)
            if dev is None or name in self.skipped[nss.name]:
                continue
            br = dev if dev.kind == "bridge" else self.by_name[nss.name].get(dev.raw.get("master") or "")
            if br is None or br.kind != "bridge" or br.data.get("vlan_filtering") not in (1, True):
                continue  # VLANs of a bridge without vlan_filtering change nothing
            for v in e.get("vlans") or []:
                vid, end = v.get("vlan"), v.get("vlanEnd")
                if not isinstance(vid, int):
                    continue
                flags = v.get("flags") or []
                line = f"bridge vlan add vid {vid}{'-' + str(end) if isinstance(end, int) else ''} dev {q(name)}"
                line += " pvid" if "PVID" in flags else ""
                line += " untagged" if "Egress Untagged" in flags else ""
                line += " self" if dev is br else ""
                out.late.append(line)

    def fdb(self, nss: NetnsSnapshot) -> None:
        out = self.out[nss.name]
        other = 0
        for e in nss.json("bridge-fdb.json"):
            if e.get("state") != "static" or not e.get("master") or "self" in (e.get("flags") or []):
                other += 1
                continue
            name = check_dev_name(e.get("ifname"), nss.file("bridge-fdb.json"))
            mac = e.get("mac")
            if name in self.skipped[nss.name] or name not in self.by_name[nss.name] or not isinstance(mac, str) \
                    or not _MAC.fullmatch(mac):
                self.warn(nss.name, "bridge-fdb.json", f"fdb {mac} dev {name}", "its port was left out")
                continue
            vlan = f" vlan {e['vlan']}" if isinstance(e.get("vlan"), int) else ""
            out.late.append(f"bridge fdb add {mac} dev {q(name)} master static{vlan}")
        if other and any(d.kind == "bridge" for d in self.by_name[nss.name].values()):
            out.comments.append(f"left out: {other} learned, local or self bridge FDB entries")

    # -- ruleset, sysctls, the rest

    def ruleset(self, nss: NetnsSnapshot) -> None:
        text = nss.text("ruleset.nft")
        if text is None:
            if nss.has(NFT_JSON):
                self.warn(nss.name, NFT_JSON, "the ruleset", "flowsim import reads the text form only: save "
                          "`nft -s list ruleset` (or `fw4 print`) as ruleset.nft instead")
            return
        if not text.strip():
            return
        from flowsim.nft.parse import parse_ruleset  # the grammar loads on first use

        try:
            parse_ruleset(text, file=str(nss.file("ruleset.nft")))
        except FlowsimError as exc:
            self.warn(nss.name, "ruleset.nft", "the ruleset", f"flowsim cannot read it ({exc}); left out, "
                      "as a comment")
            self.out[nss.name].comments.append("ruleset left out:")
            self.out[nss.name].comments.extend(text.rstrip("\n").split("\n"))
            return
        self.out[nss.name].nft = text

    def sysctls(self, nss: NetnsSnapshot) -> None:
        text = nss.text("sysctl.txt")
        if text is None:
            return
        out = self.out[nss.name]
        absent: set[str] = set()
        for no, line in enumerate(text.split("\n"), 1):
            key, sep, value = line.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not SYSCTL_KEEP.fullmatch(key):
                continue
            if not _SYSCTL_KEY.fullmatch(key) or not re.fullmatch(r"-?[0-9]+", value):
                self.warn(nss.name, "sysctl.txt", f"line {no}: {key[:60]!r}", "not a KEY = INTEGER line")
                continue
            parts = key.split(".")
            if parts[2:3] == ["conf"] and parts[3] not in ("all", "default"):
                dev = parts[3].replace("/", ".")   # sysctl writes eth0.10 as eth0/10
                if dev not in self.by_name[nss.name] or dev in self.skipped[nss.name]:
                    absent.add(dev)
                    continue
            out.sysctls[key] = value
        if absent:
            out.comments.append("left out: the sysctls of devices left out (" + ", ".join(sorted(absent)) + ")")

    def leftovers(self, nss: NetnsSnapshot) -> None:
        for file, convert in (("xfrm-state.txt", xfrm_states), ("xfrm-policy.txt", xfrm_policies)):
            text = nss.text(file)
            if not text or not text.strip():
                continue
            lines, skips = convert(text)
            for skip in skips:
                self.warn(nss.name, file, skip.what, skip.why + "; left out")
            for line in lines:
                why = _xfrm_refused(line)
                if why is None:
                    self.out[nss.name].late.append(line)
                else:
                    self.warn(nss.name, file, line.removeprefix("ip ").replace(" add ", " ", 1)[:90],
                              f"flowsim refuses it ({why}); left out")
        errors = nss.text("errors.txt")
        # sysctl cannot read net.ipv6.conf.*.stable_secret until one is set (EIO): every snapshot has those lines
        lines = [line for line in (errors or "").split("\n") if line.strip() and "stable_secret" not in line]
        if lines:
            self.warn(nss.name, "errors.txt", "the snapshot script saw errors", lines[0][:120])
        for name in TEXT_FILES:
            json_name = name[:-4] + ".json"
            if nss.has(name) and not nss.has(json_name) and name != "link.txt":
                tool, package = ("bridge", "ip-bridge") if name.startswith("bridge-") else ("ip", "ip-full")
                self.warn(nss.name, name, f"text output of {tool} without -j", f"not read: install {package} "
                          f"(opkg install {package}) and run the snapshot script again")
        bridges = sorted(d.name for d in self.by_name[nss.name].values() if d.kind == "bridge")
        if bridges and not nss.has("bridge-fdb.json") and not nss.has("bridge-fdb.txt"):
            self.warn(nss.name, "bridge-fdb.json", f"the static FDB entries of {', '.join(bridges)}",
                      "missing (no `bridge` on the machine?): none imported; install iproute2's bridge "
                      "(OpenWrt: opkg install ip-bridge) and run the snapshot script again")

    # -- the whole


    def links_checked(self, call):
        """*call*() over the links and namespace ids: content of an unexpected shape is one SnapshotError
        naming the snapshot, not a traceback (a FlowsimError raised inside passes as it is)."""
        try:
            return call()
        except (AttributeError, TypeError, KeyError, ValueError) as exc:
            if isinstance(exc, FlowsimError):
                raise
            raise SnapshotError(f"unexpected content in a link.json or netnsid.json ({type(exc).__name__}: {exc})",
                                file=self.snap.path,
                                expected="the unmodified output of the commands of docs/snapshot.md") from None

    def run(self) -> str:
        for nss in self.snap.namespaces:
            self.guarded(self.read_links, nss)
        self.snap.namespaces = self.links_checked(self.namespace_order)
        for nss in self.snap.namespaces:
            self.out[nss.name] = _Ns(nss.name)
        self.links_checked(self.devices)
        for nss in self.snap.namespaces:
            for step in (self.addresses, self.routes, self.rules, self.neighbours, self.bridge_vlans, self.fdb,
                         self.ruleset, self.sysctls, self.leftovers):
                self.guarded(step, nss)
        return self.render()

    def guarded(self, step: Callable[[NetnsSnapshot], None], nss: NetnsSnapshot) -> None:
        """One step; content of the wrong shape is an error naming the namespace folder, not a traceback."""
        try:
            step(nss)
        except (AttributeError, TypeError, KeyError, ValueError) as exc:
            if isinstance(exc, FlowsimError):
                raise
            raise SnapshotError(f"unexpected content ({type(exc).__name__}: {exc})", file=nss.path,
                                expected="the unmodified output of the commands of docs/snapshot.md") from None

    def render(self) -> str:
        lines = [f"# Imported by `flowsim import` from the snapshot {self.snap.path.name}.",
                 "# Each namespace's commands rebuild what ip, bridge, nft and sysctl showed there."]
        if self.warnings:
            lines.append("# Not imported (each is also a comment in its namespace):")
            lines.extend(f"#   {w}" for w in self.warnings)
        lines += ["", f"description = {toml_string('imported snapshot ' + self.snap.path.name)}",
                  f"source = {toml_string('flowsim import ' + str(self.snap.path))}", ""]
        for ns in list(self.out.values()) + list(self.stubs.values()):
            lines.append(f"[netns.{toml_string(ns.name)}]")
            lines.extend("# " + c.replace("\r", " ") for c in ns.comments)
            cmds = ns.commands()
            if cmds:
                lines.append("commands = " + toml_string("\n".join(cmds) + "\n"))
            if ns.sysctls:
                lines.append("sysctls = { " + ", ".join(f"{toml_string(k)} = {int(v)}" for k, v in ns.sysctls.items())
                             + " }")
            if ns.nft is not None:
                lines.append("nft = " + toml_string(ns.nft))
            lines.append("")
        return "\n".join(lines)


def _xfrm_refused(line: str) -> str | None:
    """None if flowsim's own ``ip xfrm`` parser takes *line* (alone in a namespace), else its complaint."""
    try:
        load_topology_text(f"[netns.x]\ncommands = {toml_string(line)}\n", file="<xfrm>")
    except FlowsimError as exc:
        return re.sub(r" in `[^`]*`", "", re.sub(r"^<xfrm>(:\d+)?: ", "", str(exc)))
    return None


def _gre_key(value) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(ipaddress.IPv4Address(value)) if "." in value else int(value, 0)
        except ValueError:
            return None
    return None


def import_snapshot(path: str | Path, *, traffic_from: str | Path | None = None,
                    out_name: str = "<import>") -> ImportResult:
    """The topology text rebuilding the snapshot at *path*, checked by loading it (a :class:`SnapshotError`
    or the loader's :class:`~flowsim.errors.TopologyError` otherwise), and its warnings."""
    importer = _Importer(Snapshot(path))
    text = importer.run()
    if traffic_from is not None:
        text += "\n# [[traffic]] tables copied from " + str(traffic_from).replace("\n", " ") + "\n"
        text += traffic_tables(traffic_from)
    return ImportResult(text, importer.warnings)


def check_loads(result: ImportResult, file: str) -> None:
    """Load the imported topology with flowsim's own reader (errors are its located TopologyError)."""
    load_topology_text(result.text, file=file)
