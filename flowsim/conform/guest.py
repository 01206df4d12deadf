"""Conformance guest: a topology rendered as a busybox shell script, and the qemu boot that runs it.

Theory of operation
-------------------
:func:`render_scenario` turns one loaded topology into a shell function for
the guest's ``/init`` (see ``flowsim/data/conform/init.sh``), in the order
the simulator builds the same topology:

1. ``ip netns add`` for every namespace, then each namespace's own command
   lines in file order, run as ``/usr/sbin/ip -n NS …``, ``/usr/sbin/bridge
   -n NS …`` or a ``/proc/sys`` write (``sysctl K=V``), then its sysctls.
   A failing line ends the scenario with an ``error`` section naming the
   topology file and line.
2. Harness settings that change no forwarding decision:
   ``net.netfilter.nf_conntrack_acct=1`` everywhere (conntrack byte and
   packet accounting), TSO/GSO/GRO off on every device (``ethtool -K``),
   so the kernel handles the same wire-sized packets the simulator models
   instead of 64 KB super-packets, and IPv6's own traffic off in every
   namespace before any device exists (:data:`QUIET_V6`: no automatic
   link-local address, DAD or router solicitation, which flowsim does not
   model and a rule counter on the router would count).
3. Neighbour warm-up: every neighbour the simulator's loader pre-resolves
   (:func:`flowsim.kernel.neigh.discover`) is pinged once from its namespace,
   *before* any ruleset exists, so neither conntrack nor a rule counter sees
   it, and every resolved entry is made permanent (``pin_neigh``: the
   simulator's never go stale, so no probe of a long scenario reaches a
   rule); then the namespaces' nft rulesets are loaded as written, plus the
   harness's own ``table inet flowsim_probe`` (:func:`probe_ruleset`).
4. The traffic, one ``[[traffic]]`` table after the other (sorted by
   ``start``; a table whose ``start`` comes after the simulated end of the
   ones before it waits that pause first, :func:`start_pause`), with socat.  Sizes are IP packet lengths, as in
   :mod:`flowsim.sim.traffic`.  TCP: ``packets`` data segments one way and
   ``reply_packets`` back, each exactly ``size`` bytes long (``mss`` pinned,
   the 12-byte timestamp option Linux negotiates subtracted, one segment's
   payload per socat read and write, ``nodelay``; a pause after the client's
   first write, :data:`FIRST_WRITE_PAUSE_US`; the server writes once the
   client's first byte arrived).  UDP: exactly ``packets``
   datagrams (``socat -b`` cuts a datagram per block of a file-backed
   stream) from an unconnected socket, so that ICMP errors do not stop the
   sender; the server answers from its first received datagram on, at the
   same ``rate``, as flowsim's server does.  Client ports are pinned the way
   flowsim picks them (``sport``, else 40000 + 100 × table index), so each
   connection is known by its conntrack tuple.
5. Snapshot ``mid`` (all data delivered, no TCP connection closed yet), the
   TCP closes (``close = true``: the client's stdin ends, socat sends FIN,
   the server answers with its own), one second to settle, snapshot ``end``.

The probe table counts, per connection and direction, the packets that took
the slow path (``ct original … ct direction …`` in a ``prerouting`` chain at
priority -150, after conntrack and defragmentation: every packet the
flowtable did *not* steal at ingress, once, even one that ``ip_forward``
drops later) and the packets delivered to the end hosts (``input`` chains
on the connection's ports).  It only counts; it never drops or marks.

Output goes to the guest's second serial port (``/dev/ttyS1``, a file on
the host) as sections ``@@ SCENARIO KIND NETNS PHASE`` … ``@@end``, parsed by
:mod:`flowsim.conform.parse`; the console (``ttyS0``) is kept as a log.
"""

from __future__ import annotations

import gzip
import ipaddress
import math
import re
import shlex
import stat
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from flowsim.config.raw import shell_split
from flowsim.config.topology import Topology, Traffic
from flowsim.conform import pppoe
from flowsim.conform.kernel import GUEST_BIN, ConformSetupError, CpioEntry, KernelKit, cpio_newc
from flowsim.errors import ConfigError
from flowsim.kernel.flowtable.path import ruleset_flowtables
from flowsim.kernel.headers import GRE_HLEN, IPPROTO_GRE
from flowsim.sim.simulation import Simulation

__all__ = ["TrafficPlan", "ScenarioPlan", "plan_scenario", "render_scenario", "probe_ruleset", "render_init",
           "boot_guest", "GuestResult", "PROBE_TABLE", "BASE_SPORT", "ScenarioSkipped", "smallest_size", "TCP_MIN_MSS",
           "live_sysctls"]

PROBE_TABLE = "flowsim_probe"
BASE_SPORT = 40000
TCP_TIMESTAMP_OPTION = 12   # bytes of TCP options a timestamp-enabled segment carries
IP_HEADER = {4: 20, 6: 40}
# the bytes of header the kernel adds in front of a socket's payload; GRE's none: a raw socket's payload begins
# with the GRE header (zeros from /dev/zero: version 0, protocol 0, the packets flowsim.sim.traffic sends)
L4_HEADER = {"tcp": 20 + TCP_TIMESTAMP_OPTION, "udp": 8, "gre": 0}
UNSUPPORTED_KINDS = {"dsa": "needs a DSA switch", "ethernet": "is a flowsim extension (a real NIC)"}

IP = GUEST_BIN["ip"]
TCP_MIN_MSS = 88            # include/net/tcp.h: the smallest TCP_MAXSEG do_tcp_setsockopt accepts


class ScenarioSkipped(ConfigError):
    """A topology the guest cannot run at all (a flowsim-only device kind, a feature the harness lacks).

    ``flowsim conform`` reports it as skipped with :attr:`reason` and runs the others; the exit status is
    not affected.  It is a :class:`ConfigError`, so a caller that plans one topology still gets an error.
    """

    def __init__(self, reason: str, where: str, expected: str | None = None):
        super().__init__(reason, where=where, expected=expected)
        self.reason = f"{where}: {reason}"


def smallest_size(proto: str, family: int) -> int:
    """The smallest IP packet length a socket can send as one segment / datagram: one payload byte; GRE's
    header (a raw socket's payload)."""
    return IP_HEADER[family] + (GRE_HLEN if proto == "gre" else L4_HEADER[proto] + 1)


@attrs.frozen
class TrafficPlan:
    """One ``[[traffic]]`` table as the guest runs it: who listens where, which ports."""

    index: int
    name: str
    proto: str
    family: int
    client: str          # netns of the sender
    server: str          # netns that accepts (owner of `to`, or of the DNAT target)
    src: str
    dst: str
    dport: int
    listen_port: int     # dport after DNAT
    sport: int
    packets: int
    size: int
    reply_packets: int
    reply_size: int
    close: bool
    rate: float
    file_index: int = -1  # the table's place in the topology file (the simulator's client port rule)
    df: bool | None = None  # the table's `df` key: False = both sockets IP_PMTUDISC_DONT (ip_no_pmtu_disc)
    acks: str = "none"  # the simulation's ACK model: "linux" for TCP in socat mode (the guest's sockets ACK)
    reply_after: str = "accept"  # the simulated server's first write: "data" in socat mode (after the first byte)
    sim_rate: float = 0.0  # the simulation's write rate when it differs from the guest's (SOCAT_SIM_TCP_RATE)
    pause: int = 0  # whole seconds the guest waits before the table, after the ones before it (start_pause)
    bind_src: bool = True  # the table names its src; False: the client binds its port only, the kernel picks src
    listen_addr: str = ""  # GRE: the server's address, dst after any DNAT (its raw socket binds it)

    @property
    def tag(self) -> str:
        return f"t{self.index}"

    def payload(self, size: int) -> int:
        """Application bytes per packet so that the IP packet is *size* bytes long (``size`` is L3, as in
        :mod:`flowsim.sim.traffic`); TCP segments carry the timestamp option Linux negotiates."""
        return size - IP_HEADER[self.family] - L4_HEADER[self.proto]

    def stream_bytes(self, direction: str) -> int:
        """The bytes a TCP direction writes (all of them arrive: what the guest's ``wait_bytes`` waits for)."""
        if direction == "original":
            return self.packets * self.payload(self.size)
        return self.reply_packets * self.payload(self.reply_size)

    @property
    def unit(self) -> int:
        """UDP bytes each datagram leaves in the receivers' files (recv truncates to the smaller block)."""
        return min(self.payload(self.size), self.payload(self.reply_size))


@attrs.frozen
class ScenarioPlan:
    """Everything the guest needs for one topology, and what the parser needs to read its output."""

    index: int
    name: str
    file: str
    namespaces: tuple[str, ...]
    flowtable_netns: tuple[str, ...]
    traffic: tuple[TrafficPlan, ...]
    adjustments: tuple[str, ...] = ()   # what the harness changed in the traffic, and why (in the report)


def _bad(topo: Topology, msg: str, line: int | None = None, expected: str | None = None) -> ConfigError:
    where = f"{topo.file}:{line}" if line else topo.file
    return ConfigError(msg, where=where, expected=expected)


def _dnat_targets(topo: Topology, dst, dport: int) -> list[tuple[str, int]]:
    """(address, port) pairs the rulesets DNAT to (``dnat [ip|ip6] to ADDR[:PORT]``)."""
    out = []
    for ns in topo.namespaces.values():
        if ns.nft is None:
            continue
        for m in re.finditer(r"\bdnat\s+(?:ip6?\s+)?to\s+(\[[0-9a-fA-F:]+\]|[0-9a-fA-F.:]+?)(?::(\d+))?(?=[\s;}]|$)",
                             ns.nft.text):
            addr = m.group(1).strip("[]")
            try:
                out.append((str(ipaddress.ip_address(addr)), int(m.group(2) or dport)))
            except ValueError:
                continue
    return out


def _server(topo: Topology, t: Traffic) -> tuple[str, int, str]:
    """The namespace that accepts traffic *t*, the port it listens on and the address (after any DNAT)."""
    for ns in topo.namespaces.values():
        if ns.name != t.netns and ns.owner_of(t.dst) is not None:
            return ns.name, t.dport, str(t.dst)
    for addr, port in _dnat_targets(topo, t.dst, t.dport):
        for ns in topo.namespaces.values():
            if ns.owner_of(ipaddress.ip_address(addr)) is not None:
                return ns.name, port, addr
    raise _bad(topo, f"traffic {t.name!r}: no namespace owns {t.dst} and no DNAT rule points elsewhere", t.line,
               "a destination address configured in some namespace, or a 'dnat to ADDR' rule")


def _skip_rate_limited(topo: Topology) -> None:
    """--frames: raise :class:`ScenarioSkipped` when the simulation holds back ICMP errors for a rate limit
    (flowsim.kernel.icmp_limit).  The guest writes flowsim's frames one socat call each, so the kernel's
    buckets refill between them by the harness's pace, not the traffic's; socat mode compares those counts."""
    sim = Simulation(topo).run()
    held = {name: st.icmp_limits.limited for name, st in sim.kernel.netns.items() if st.icmp_limits.limited}
    if held:
        counts = ", ".join(f"{n} in {name}" for name, n in held.items())
        raise ScenarioSkipped(f"--frames: ICMP errors are rate-limited here ({counts} not sent): the guest writes "
                              "frames one at a time, and the kernel's per-destination buckets refill between them "
                              "at that pace; socat mode compares the counts", topo.file or "")


def _skip_reason(topo: Topology, frames: bool) -> None:
    """Raise :class:`ScenarioSkipped` for what the guest cannot run at all (file and line in the reason).

    ``gso_size`` only in socat mode: ``--frames`` injects flowsim's GSO skbs whole, with a
    ``virtio_net_hdr`` (:mod:`flowsim.conform.frames`), where a socket's stack would size its own."""
    for cmds in topology_commands(topo).values():
        for cmd in cmds:
            tokens = shell_split(cmd)
            where = f"{cmd.file}:{cmd.line}"
            if tokens[0] == "ip" and "type" in tokens[1:-1]:
                kind = tokens[tokens.index("type", 1) + 1]
                if kind in UNSUPPORTED_KINDS:
                    raise ScenarioSkipped(f"link kind {kind!r} cannot run in the conformance guest: it "
                                          f"{UNSUPPORTED_KINDS[kind]}", where)
            if tokens[0] == "bridge" and "switchdev" in tokens:
                raise ScenarioSkipped("'switchdev on|off' is a flowsim extension", where)
    if frames:
        _skip_rate_limited(topo)
    if topo.events:
        e = topo.events[0]
        raise ScenarioSkipped(f"[[event]] at {e.at} s: run events have no virtual clock to run on in the guest",
                              f"{topo.file}:{e.command.line}", "a topology without [[event]] tables")
    for t in topo.traffic:
        if t.gso_size is not None and not frames:
            raise ScenarioSkipped(f"traffic {t.name!r}: gso_size cannot be rendered with sockets: the guest's stack "
                                  "sizes its own GSO skbs (--frames injects flowsim's)", f"{topo.file}:{t.line}",
                                  "no gso_size, or --frames")


# Socat mode simulates a TCP table without `rate` at this many writes per second.  In the guest, socat
# reads dd's blocks and writes one segment each, far slower under emulation than a segment's round trip over
# veth: the server's first ACK passes the router before the client's second segment (the kernel's probes count
# 3 original packets on the slow path where `flow add` matches only replies: SYN, ACK, the first segment).
# Back to back at the simulator's 10 µs, 8-14 segments would race ahead of that ACK.  (Pacing the guest's
# writer as well, a dd and a usleep per write, was tried: on sid the scenario after ip6ip6-over-pppoe, whose
# connection the black-holed ACKs stall, then hung in its set-up; the guest writes back to back.)
SOCAT_SIM_TCP_RATE = 1000.0


def _sim_end(t) -> float:
    """When a traffic table's last write is sent in the simulation (its ``rate`` paces both directions over
    the same time, :attr:`flowsim.sim.traffic.TrafficSpec.reply_gap`; back to back counts as no time)."""
    return t.start + ((t.packets - 1) / t.rate if t.rate else 0.0)


def start_pause(t, before) -> int:
    """Whole seconds the guest waits before traffic table *t*, once the tables *before* it ended: the idle
    time the simulation has between their last write and *t*'s ``start`` (rounded up), so that a flow that
    expires in that pause (``nf_flow_has_expired``, conntrack's timeouts) does so in the guest too.  The
    guest plays the tables one after the other, so it cannot wait until an absolute ``start``: the earlier
    tables may have taken longer there than in the simulation."""
    if t.start <= 0:
        return 0
    idle = t.start - max((_sim_end(b) for b in before), default=0.0)
    return max(0, math.ceil(idle))


def plan_scenario(topo: Topology, index: int = 0, *, frames: bool = False,
                  max_packets: int | None = None) -> ScenarioPlan:
    """What the guest will run for *topo*; skips what it cannot run (:class:`ScenarioSkipped`, with file:line).

    A size too small for a socket payload is raised to :func:`smallest_size` (socat mode only: ``--frames``
    injects flowsim's own frames, no socket sends anything, and a TCP table without a handshake is fine
    there too); *max_packets* caps every traffic direction; in socat mode TCP is simulated with
    ``acks = "linux"``, since the guest's sockets acknowledge as Linux does, and ``reply_after = "data"``,
    since the guest's server writes once the client's first byte arrived.  Each change is a line of
    :attr:`ScenarioPlan.adjustments`, and the simulation the kernel is compared with must use the plan's
    traffic (:func:`flowsim.conform.harness.plan_traffic`).
    """
    _skip_reason(topo, frames)
    plans, notes, acked = [], [], []
    gre_servers: dict[str, str] = {}
    order = {id(t): i for i, t in enumerate(topo.traffic)}
    ordered = sorted(topo.traffic, key=lambda t: t.start)
    for i, t in enumerate(ordered):
        if t.proto == "tcp" and not t.handshake and not frames:
            raise _bad(topo, f"traffic {t.name!r}: handshake = false cannot be rendered with a real TCP stack",
                       t.line, "handshake = true")
        server, port, listen_addr = _server(topo, t)
        if t.proto == "gre" and not frames:
            # a raw socket takes every GRE packet to the address it binds (raw_v4_match / raw_v6_match): one
            # table per server address, or the two would read each other's packets
            other = gre_servers.setdefault(f"{server} {listen_addr}", t.name)
            if other != t.name:
                raise ScenarioSkipped(f"GRE tables {other!r} and {t.name!r} both go to {listen_addr} in {server}: "
                                      "the guest's raw sockets cannot tell their packets apart", topo.file or "",
                                      "GRE tables to different server addresses")
        who = f"traffic {t.name!r} ({t.netns} {t.src} -> {server} {t.dst})"
        size, reply_size = t.size, t.reply_size or t.size
        packets, reply_packets = t.packets, t.reply_packets
        low = smallest_size(t.proto, t.dst.version)
        if not frames:
            for what, value in (("size", size), ("reply size", reply_size)):
                if value < low:
                    notes.append(f"{who}: {what} {value} raised to {low}: {value} bytes leave no {t.proto.upper()} "
                                 f"payload for a socket (IPv{t.dst.version} {IP_HEADER[t.dst.version]} + "
                                 f"{t.proto.upper()} {L4_HEADER[t.proto] or GRE_HLEN} bytes of headers"
                                 + (" with the timestamp option" if t.proto == "tcp" else "") + ")")
            size, reply_size = max(size, low), max(reply_size, low)
        if max_packets is not None and (packets > max_packets or reply_packets > max_packets):
            notes.append(f"{who}: packets {packets}/{reply_packets} (original/reply) capped at {max_packets} "
                         "per direction")
            packets, reply_packets = min(packets, max_packets), min(reply_packets, max_packets)
        acks = "linux" if t.proto == "tcp" and not frames else t.acks  # socat: real Linux TCP at both ends
        sim_rate = SOCAT_SIM_TCP_RATE if t.proto == "tcp" and not frames and not t.rate else 0.0
        # the guest's server writes after the client's first byte (_traffic_start), which it quick-ACKs first
        reply_after = "data" if t.proto == "tcp" and not frames else t.reply_after
        if acks != t.acks or sim_rate or reply_after != t.reply_after:
            acked.append(t.name)
        # the simulator's default client port (flowsim.sim.traffic: EPHEMERAL_BASE + 100 * file index)
        sport = 0 if t.proto == "gre" else t.sport or BASE_SPORT + 100 * order[id(t)]
        plans.append(TrafficPlan(
            index=i, name=t.name, proto=t.proto, family=t.dst.version, client=t.netns, server=server,
            src=str(t.src), dst=str(t.dst), dport=t.dport, listen_port=port, sport=sport,
            packets=packets, size=size, reply_packets=reply_packets, reply_size=reply_size,
            close=t.proto == "tcp" and t.close is not None, rate=t.rate, file_index=order[id(t)], df=t.df,
            acks=acks, sim_rate=sim_rate, reply_after=reply_after, pause=start_pause(t, ordered[:i]),
            bind_src=t.src_bound, listen_addr=listen_addr))
        if plans[-1].pause:
            notes.append(f"{who}: starts {plans[-1].pause} s after the tables before it ended (start = "
                         f"{t.start:g} s; the simulation's idle time before it)")
    if acked:
        notes.append("TCP simulated with acks = \"linux\" (the guest's sockets send Linux's pure ACKs), "
                     f"back-to-back writes {1000 / SOCAT_SIM_TCP_RATE:g} ms apart (socat's writes in the guest "
                     "come slower than the ACK of the last segment), reply_after = \"data\" (the guest's "
                     "server writes once the client's first byte arrived, which it first quick-ACKs): "
                     + ", ".join(acked))
    for name in topo.namespaces:
        for dev in absent_interfaces(topo, name):
            notes.append(f"{name}'s ruleset: 'meta oif/iif {dev}' loaded as 'meta oifname/iifname {dev}': the "
                         f"commands delete {dev} and nft refuses an oif name it cannot resolve at load")
    ft_ns = tuple(ns.name for ns in topo.namespaces.values() if ns.nft and ruleset_flowtables(ns.nft.text))
    name = Path(topo.file or "topology").stem
    return ScenarioPlan(index, name, topo.file or "", tuple(topo.namespaces), ft_ns, tuple(plans), tuple(notes))


# ---------------------------------------------------------------------- commands

def _sysctl_path(key: str) -> str:
    """``net.ipv4.conf.eth0/10.forwarding`` -> ``/proc/sys/net/ipv4/conf/eth0.10/forwarding`` (sysctl's rule)."""
    return "/proc/sys/" + "/".join(part.replace("/", ".") for part in key.split("."))


# The value and the path reach the guest's sh as its positional parameters, never as script text:
# a value such as ``1;reboot`` is written to the file as it is, not run.
_SYSCTL_SCRIPT = 'echo "$1" > "$2"'


def _write_sysctl(netns: str, key: str, value: str) -> str:
    """``sysctl -w KEY=VALUE`` in *netns*: echo the value into its /proc/sys file (names and values as data)."""
    return shlex.join([IP, "netns", "exec", netns, "sh", "-c", _SYSCTL_SCRIPT, "sh", str(value), _sysctl_path(key)])


def render_command(cmd) -> str:
    """One topology command line as the guest runs it in its namespace (real binaries, full paths)."""
    if isinstance(cmd, pppoe.SessionStart):   # a PPPoE session: a pppd at each end (flowsim.conform.pppoe)
        return cmd.render()
    tokens = shell_split(cmd)
    prog, rest = tokens[0], tokens[1:]
    if prog == "ip" and len(rest) >= 3 and rest[0] == "netns" and rest[1] == "exec":
        inner = attrs.evolve(cmd, text=shlex.join(rest[3:]), netns=rest[2]) if attrs.has(type(cmd)) \
            else type(cmd)(shlex.join(rest[3:]), rest[2], cmd.file, cmd.line)
        return render_command(inner)
    if prog == "ip":
        if "type" in rest:
            kind = rest[rest.index("type") + 1] if rest.index("type") + 1 < len(rest) else ""
            if kind == "pppoe":
                raise cmd.error("a 'type pppoe' line is set up as a session with its peer's line "
                                "(topology_commands pairs them)", value=kind, expected="topology_commands(topo)")
            if kind in UNSUPPORTED_KINDS:
                raise cmd.error(f"link kind {kind!r} cannot run in the conformance guest: it "
                                f"{UNSUPPORTED_KINDS[kind]}", value=kind, expected="veth, vlan, bridge, ipip, ip6tnl, …")
        return shlex.join([IP, "-n", cmd.netns, *rest])
    if prog == "bridge":
        if "switchdev" in rest:
            raise cmd.error("'switchdev on|off' is a flowsim extension", value="switchdev",
                            expected="a bridge command without it")
        return shlex.join([GUEST_BIN["bridge"], "-n", cmd.netns, *rest])
    if prog == "sysctl":
        items = [t for t in rest if not t.startswith("-")]
        return " && ".join(_write_sysctl(cmd.netns, *item.split("=", 1)) for item in items)
    raise cmd.error(f"unknown command {prog!r}", value=prog, expected="ip, bridge or sysctl")


def live_sysctls(topo: Topology, netns: str) -> list[tuple[str, str]]:
    """*netns*'s sysctls the guest writes after the commands: a per-device key (``net.ipv4.conf.DEV.*``,
    ``net.ipv6.conf.DEV.*``) of a device the commands deleted is left out — flowsim keeps it as an inert
    value, the kernel has no /proc/sys file for it (selftest-ipsec.toml's br0, deleted by the script)."""
    ns = topo.namespaces[netns]
    out = []
    for key, value in ns.sysctls.items():
        parts = key.split(".")
        if len(parts) >= 5 and parts[0] == "net" and parts[1] in ("ipv4", "ipv6") and parts[2] == "conf":
            dev = parts[3].replace("/", ".")
            if dev not in ("all", "default") and dev not in ns.devices:
                continue
        out.append((key, value))
    return out


_OIF_IIF = re.compile(r'\bmeta\s+(oif|iif)\s+("?)([A-Za-z0-9_.:-]{1,15})\2(?=[\s;}]|$)')


def absent_interfaces(topo: Topology, netns: str) -> list[str]:
    """Devices *netns*'s ruleset matches with ``meta oif/iif NAME`` that its commands deleted."""
    ns = topo.namespaces[netns]
    if ns.nft is None:
        return []
    return sorted({m.group(3) for m in _OIF_IIF.finditer(ns.nft.text) if m.group(3) not in ns.devices})


def guest_ruleset(topo: Topology, netns: str) -> str:
    """*netns*'s ruleset as the guest loads it, after every command: ``meta oif/iif NAME`` of a device the
    commands deleted becomes ``meta oifname/iifname NAME``.  nft resolves an ``oif`` name to its ifindex
    when it loads the rule and refuses a missing one ("Interface does not exist"); the script the topology
    transcribes loaded the rule while the device existed (nft_flowtable.sh's br0), and the stale index then
    matches nothing — as a name no device has."""
    text = topo.namespaces[netns].nft.text
    gone = set(absent_interfaces(topo, netns))
    return _OIF_IIF.sub(lambda m: f"meta {m.group(1)}name \"{m.group(3)}\"" if m.group(3) in gone else m.group(0),
                        text)


def topology_commands(topo: Topology) -> dict[str, list]:
    """Each namespace's command lines (Command objects) in file order, as the topology reader replayed them.

    PPPoE (:mod:`flowsim.conform.pppoe`): the ``type pppoe`` lines and the later lines naming a ppp device
    move behind all others, under the key ``"pppoe"``: the sessions' set-up, then those lines.
    """
    try:
        sessions = pppoe.find_sessions(topo)
    except pppoe.Unsupported as exc:
        raise ScenarioSkipped(exc.why, exc.where or topo.file or "", exc.expected) from None
    if not sessions:
        return {name: list(ns.commands) for name, ns in topo.namespaces.items()}
    early, late = pppoe.split_commands(topo, sessions)
    return {**early, "pppoe": late}


# ---------------------------------------------------------------------- probe

def _ct_match(t: TrafficPlan) -> str:
    fam = "ip" if t.family == 4 else "ip6"
    match = f"meta l4proto {t.proto} ct original {fam} saddr {t.src} ct original {fam} daddr {t.dst}"
    if t.proto == "gre":  # version 0: conntrack keys it by the addresses (gre_pkt_to_tuple)
        return match
    return f"{match} ct original proto-src {t.sport} ct original proto-dst {t.dport}"


def _data_segment(t: TrafficPlan) -> list[str]:
    """Matches for a TCP segment that carries payload, one per data offset (nft cannot compare two fields):
    the IP length exceeds the headers.  What ``tcp_segs_in`` counts as ``data_segs_in``; the comparison
    measures the sender's coalescing of writes with it.  A Linux TCP segment has no IP options or IPv6
    extension headers here (after a tunnel's decapsulation neither)."""
    if t.family == 4:
        return [f"tcp doff {doff} ip length > {20 + 4 * doff}" for doff in range(5, 16)]
    return [f"tcp doff {doff} ip6 length > {4 * doff}" for doff in range(5, 16)]


def _short_segment(t: TrafficPlan, size: int) -> list[str]:
    """Matches for a TCP data segment shorter than the direction's writes (IP length below *size*, the table's
    ``size`` / ``reply_size``), one per data offset: the pieces of writes the sender cut (``tcp_write_xmit`` →
    ``tcp_mss_split_point`` at the receive window's edge).  Where the model's writes exceed the flow's MTU,
    only such pieces can fit it and leave the slow path; their bytes are what a slow-path byte count can lose.
    None where no segment with payload can be shorter."""
    rules = []
    for doff in range(5, 16):
        if t.family == 4:
            low, high, field = 20 + 4 * doff + 1, size - 1, "ip length"
        else:  # ip6 length: the payload length, without the 40-byte header
            low, high, field = 4 * doff + 1, size - IP_HEADER[6] - 1, "ip6 length"
        if low <= high:
            rules.append(f"tcp doff {doff} {field} {low}-{high}")
    return rules


def probe_ruleset(plan: ScenarioPlan, netns: str) -> str:
    """The harness's counting table for *netns*: forward (slow path) and input (delivered) per connection."""
    counters, slow, inputs = [], [], []
    for t in plan.traffic:
        # ct expressions register conntrack in the namespace: only where a flowtable already needs it.
        for d in ("original", "reply") if netns in plan.flowtable_netns else ():
            counters.append(f"  counter {t.tag}_slow_{d} {{ }}")
            slow.append(f"    {_ct_match(t)} ct direction {d} counter name {t.tag}_slow_{d}")
        fam = "ip" if t.family == 4 else "ip6"
        ends = []
        if netns == t.server:
            # family and client port too: two tables of a topology may share the destination port (ipip.toml's
            # tcp-12345 and tcp6-12345); NAT keeps the client port unless it clashes (nf_nat_l4proto_unique_tuple).
            # GRE has no ports: its server's address (plan_scenario lets one GRE table use it)
            ends.append(("original", f"meta nfproto ipv{t.family} meta l4proto {t.proto} " +
                         (f"{fam} daddr {t.listen_addr}" if t.proto == "gre" else
                          f"th sport {t.sport} th dport {t.listen_port}")))
        if netns == t.client:
            ends.append(("reply", f"{fam} saddr {t.dst} {fam} daddr {t.src} meta l4proto {t.proto}" +
                         ("" if t.proto == "gre" else f" th sport {t.dport} th dport {t.sport}")))
        for d, match in ends:
            counters.append(f"  counter {t.tag}_in_{d} {{ }}")
            inputs.append(f"    {match} counter name {t.tag}_in_{d}")
            if t.proto == "tcp":
                counters.append(f"  counter {t.tag}_data_{d} {{ }}")
                inputs.extend(f"    {match} {rule} counter name {t.tag}_data_{d}" for rule in _data_segment(t))
                short = _short_segment(t, t.size if d == "original" else t.reply_size)
                if short:
                    counters.append(f"  counter {t.tag}_short_{d} {{ }}")
                    inputs.extend(f"    {match} {rule} counter name {t.tag}_short_{d}" for rule in short)
    return "\n".join([
        f"table inet {PROBE_TABLE} {{", *counters,
        # prerouting after conntrack (-200) and before DNAT (-100): every packet the flowtable did not
        # steal, reassembled, once — also one that ip_forward will drop (DF, too big) before forward.
        "  chain slowpath {", "    type filter hook prerouting priority -150; policy accept;", *slow, "  }",
        "  chain input {", "    type filter hook input priority -300; policy accept;", *inputs, "  }",
        "}", ""])


# ---------------------------------------------------------------------- traffic

def _sock(t: TrafficPlan, listen: bool) -> str:
    proto = f"{t.proto.upper()}{t.family}"
    # df = false: IPv4 without DF from both ends, as flowsim's generator sends it (IP_PMTUDISC_DONT, what
    # net.ipv4.ip_no_pmtu_disc=1 gives every socket; a TCP socket then keeps its MSS, tcp_v4_mtu_reduced)
    nodf = ",mtudiscover=0" if t.df is False and t.family == 4 else ""
    if listen:
        return f"{proto}-LISTEN:{t.listen_port},reuseaddr{nodf}"
    if t.proto == "udp":
        # An unconnected socket: ICMP errors (fragmentation needed) are not reported to socat, which
        # would otherwise stop at EMSGSIZE; it keeps sending, like the simulator's generator.
        proto += "-DATAGRAM"
    dst = f"[{t.dst}]" if t.family == 6 else t.dst
    # a table without src: the guest's kernel selects the source (the model's src is its prediction, which the
    # conntrack facts then check); the port stays bound
    src = t.src if t.bind_src else ("::" if t.family == 6 else "0.0.0.0")
    src = f"[{src}]" if t.family == 6 else src
    return f"{proto}:{dst}:{t.dport},bind={src}:{t.sport}{nodf}"


def _writer(count: int, size: int, rate: float, after_each: str = "") -> str:
    """Shell that writes *count* blocks of *size* zero bytes, paced at *rate* blocks/s when given
    (*after_each*: more shell after each paced block's pause)."""
    if count == 0:
        return ":"
    if not rate:
        return f"dd if=/dev/zero bs={size} count={count} 2>/dev/null"
    gap = max(int(1_000_000 / rate), 1)
    return (f"i=0; while [ $i -lt {count} ]; do dd if=/dev/zero bs={size} count=1 2>/dev/null; "
            f"usleep {gap}; {after_each}i=$((i+1)); done")


# How long a UDP end waits for the other's packet that the simulation has come first (udp_order): polls of
# UDP_ORDER_POLL_US, at most UDP_ORDER_POLLS per wait (about two seconds, more with the guest's fork of
# usleep), and how often a wait may run out (a datagram too big for the path, conform-mtu's first, is never
# answered) before the client stops waiting: the harness's wait_bytes gives up after 3 s without progress.
# One second was too short on a loaded host (2026-12-02, 7.2.13 under a load of 5 on 2 cores: conform-mtu's
# udp-big client gave up before socat's server had forked its first reply, and all 20 replies met the flow).
UDP_ORDER_POLL_US, UDP_ORDER_POLLS, UDP_ORDER_TIMEOUTS = 10_000, 200, 1


def _await(unmet: str) -> str:
    """Shell: poll while the test *unmet* holds, at most UDP_ORDER_POLLS times."""
    return f"n=0; while {unmet} && [ $n -lt {UDP_ORDER_POLLS} ]; do usleep {UDP_ORDER_POLL_US}; n=$((n+1)); done; "


def udp_order(t: TrafficPlan) -> tuple[str, str]:
    """Shell that puts a UDP table's first reply where the simulation puts it: (the server's, before its
    first reply; the client's, after each paced datagram's pause, counting the waits that ran out in ``$m``).

    Back to back (``rate = 0``, :data:`flowsim.sim.traffic.DEFAULT_GAP`), the simulated client's second
    datagram passes the router before the first reply comes back, so the flow exists and every reply is
    fast-pathed: the guest's server answers only once it holds two datagrams.  Paced (a gap of milliseconds
    against the simulation's microseconds of path), the reply to a datagram passes the router before the
    next datagram: the guest's client, until its first reply arrived, waits for it after each pause.
    """
    d = f"/tmp/{t.tag}"
    if not t.reply_packets or t.packets < 2:
        return "", ""
    if not t.rate:
        return _await(f"[ $(cat {d}.srv 2>/dev/null | wc -c) -lt {2 * t.unit} ]"), ""
    return "", (f"[ -s {d}.cli ] || [ $m -ge {UDP_ORDER_TIMEOUTS} ] || {{ {_await(f'[ ! -s {d}.cli ]')}"
                f"[ -s {d}.cli ] || m=$((m+1)); }}; ")


SOCAT_ADDRESS_MAX = 511  # socat 1.7.4 refuses a longer address ('E address "…" too long'); measured


def _system(command: str) -> str:
    """socat's ``SYSTEM:`` address running *command*: the harness's own shell, kept short enough for socat."""
    address = f"SYSTEM:{command}"
    if len(address) > SOCAT_ADDRESS_MAX:
        raise ValueError(f"socat address of {len(address)} bytes (at most {SOCAT_ADDRESS_MAX}): {address[:60]}…")
    return shlex.quote(address)


def _bg(netns: str, command: str, var: str) -> str:
    """A background process in *netns* whose pid (the real program's: ip execs it) lands in $var."""
    return f"{IP} netns exec {shlex.quote(netns)} {command} & {var}=$!; PIDS=\"$PIDS ${var}\""


# After the client's first TCP write the guest pauses, as the simulation's writes are a millisecond apart
# (SOCAT_SIM_TCP_RATE) against its microseconds of path: whatever the first segment brings back before the
# second leaves — a Packet Too Big that lowers the MSS, the server's quick ACK that creates a flow where
# `flow add` matches only replies (selftest-ipip-vlan) — does so in the guest too, not as the host's load has it.
FIRST_WRITE_PAUSE_US = 100_000


def _first_write(t: TrafficPlan) -> str:
    """Shell of a TCP client's writes: back to back after a pause behind the first (FIRST_WRITE_PAUSE_US)."""
    size = t.payload(t.size)
    if t.rate or t.packets < 2:
        return _writer(t.packets, size, t.rate)
    return f"{_writer(1, size, 0)}; usleep {FIRST_WRITE_PAUSE_US}; {_writer(t.packets - 1, size, 0)}"


def _raw_address(t: TrafficPlan, peer: str, own: str, kind: str) -> str:
    """socat's raw IP address of protocol 47 (``IP4-DATAGRAM:PEER:47,bind=OWN``, ``IP6-…``, or *kind* RECV /
    SENDTO); *peer* may be shell text (``$peer``), outside the quoting this returns."""
    b = (lambda a: f"[{a}]") if t.family == 6 else (lambda a: a)
    own_addr = f"bind={b(own)}"
    if kind == "RECV":
        return f"IP{t.family}-RECV:{IPPROTO_GRE},{own_addr}"
    peer_addr = peer if peer.startswith("$") else b(peer)
    options = own_addr + (f",range={b(peer)}/{32 if t.family == 4 else 128}" if kind == "DATAGRAM" else "")
    return f"IP{t.family}-{kind}:{peer_addr}:{IPPROTO_GRE},{options}"


# socat -d -d logs each datagram it reads: "received packet with N bytes from AF=2 ADDR:0" (IPv6 "[ADDR]:0"): the
# GRE server's replies go to the first sender it logged, the client's address as NAT left it
_GRE_PEER = r"s/.* received packet with [0-9]* bytes from AF=[0-9]* \(.*\):0$/\1/p"


def _gre_start(t: TrafficPlan) -> list[str]:
    """GRE over raw sockets of protocol 47, as the simulator's endpoints send it (flowsim.sim.traffic): the server
    receives (``IP4-RECV``, bound to its address) and, once the first packet (two when back to back: udp_order)
    arrived, answers its sender (the client as NAT left it) with ``IP4-SENDTO``; the client is an
    ``IP4-DATAGRAM`` socket bound to its address that takes only the server's packets (``range``).  Each
    write of ``dd`` is one packet: its zeros begin with a GRE version 0 header of protocol 0."""
    d = f"/tmp/{t.tag}"
    q = shlex.quote
    out, back = t.payload(t.size), t.payload(t.reply_size)
    bind = t.src if t.bind_src else ("::" if t.family == 6 else "0.0.0.0")
    _, next_datagram = udp_order(t)
    first = 2 if not t.rate and t.packets >= 2 else 1
    lines = [
        _bg(t.server, f"socat -d -d -u -b {out} {_raw_address(t, '', t.listen_addr, 'RECV')} "
                      f"OPEN:{d}.srv,creat,trunc 2>{d}.srv.log", f"{t.tag}_srv"),
        f"wait_listen {q(t.server)} {IPPROTO_GRE} raw",  # /proc/net/raw shows the protocol as the port
    ]
    if t.reply_packets:
        srv = (_await(f"[ $(cat {d}.srv 2>/dev/null | wc -c) -lt {first * out} ]") +
               f"peer=$(sed -n {q(_GRE_PEER)} {d}.srv.log | head -n 1); "
               f"{_writer(t.reply_packets, back, t.rate)} | socat -u -b {back} - "
               f"{_raw_address(t, '$peer', t.listen_addr, 'SENDTO')} 2>{d}.srv.err")
        lines.append(f"{IP} netns exec {q(t.server)} sh -c {q(srv)} & {t.tag}_rep=$!; PIDS=\"$PIDS ${t.tag}_rep\"")
    cli = (f"exec 4<&0; cat <&4 > {d}.cli & {'m=0; ' if next_datagram else ''}"
           f"{_writer(t.packets, out, t.rate, after_each=next_datagram)}; wait")
    lines += [
        _bg(t.client, f"socat -b {out} -T 120 {_raw_address(t, t.dst, bind, 'DATAGRAM')} {_system(cli)} "
                      f"2>{d}.cli.err", f"{t.tag}_cli"),
        f"wait_bytes {d}.srv {t.packets * out} {d}.cli {t.reply_packets * min(out, back)}",
    ]
    return lines


def _traffic_start(t: TrafficPlan) -> list[str]:
    if t.proto == "gre":
        return _gre_start(t)
    d = f"/tmp/{t.tag}"
    q = shlex.quote
    out_bytes, back_bytes = t.stream_bytes("original"), t.stream_bytes("reply")
    if t.proto == "tcp":
        # mss pins the segment: Linux subtracts the 12-byte timestamp option from it.  Both sides get the
        # larger direction's (a side's TCP_MAXSEG also clamps the MSS it advertises, so the smaller one would
        # cut the other direction's segments), at least TCP_MIN_MSS (socat's setsockopt fails below):
        # each write of one segment's payload, with nodelay, is then one segment of exactly its size.
        pin = max(max(t.size, t.reply_size) - IP_HEADER[t.family] - 20, TCP_MIN_MSS)
        mss = f",mss={pin},nodelay"
        # The server writes once the client's first byte arrived, as the simulated server does with
        # reply_after = "data": socat forks its writer at accept, and whether the client's first segment or
        # the server's passed the router first was the two processes' race (dd reads exactly one byte).
        srv = (f"dd bs=1 count=1 > {d}.srv 2>/dev/null; {_writer(t.reply_packets, t.payload(t.reply_size), t.rate)}; "
               f"cat >> {d}.srv")
        cli = (f"{_first_write(t)}; while [ ! -e {d}.close ] && [ ! -e /tmp/stop ]; do usleep 20000; done")
        return [
            # -b = one segment's payload: each read of the writer's dd blocks is one write, one segment.
            _bg(t.server, f"socat -b {t.payload(t.reply_size)} -t 5 {_sock(t, True)}{mss} {_system(srv)} "
                          f"2>{d}.srv.err", f"{t.tag}_srv"),
            f"wait_listen {q(t.server)} {t.listen_port} tcp",
            f"sh -c {q(cli)} | " + _bg(t.client, f"socat -b {t.payload(t.size)} -t 5 - {_sock(t, False)}{mss} "
                                               f"> {d}.cli 2>{d}.cli.err", f"{t.tag}_cli"),
            f"wait_bytes {d}.srv {out_bytes} {d}.cli {back_bytes}",
        ]
    # UDP: socat -b cuts one datagram per block.  The server starts answering when the first datagram
    # arrived (socat starts its child then), at the same rate, as the simulator's server does.  Which of the
    # client's second datagram and the server's first reply meets the router first decides whether conntrack
    # ever sees a reply (nft_flow_offload_eval adds the flow at the first packet of a confirmed entry, and
    # every later reply takes the fast path: [UNREPLIED]); the simulation's order is made the guest's, not
    # left to how fast socat forks (udp_order).
    # exec 4<&0: a background job of a non-interactive shell would read /dev/null instead of stdin.
    first_reply, next_datagram = udp_order(t)
    srv = (f"exec 4<&0; cat <&4 > {d}.srv & {first_reply}"
           f"{_writer(t.reply_packets, t.payload(t.reply_size), t.rate)}; wait")
    cli = (f"exec 4<&0; cat <&4 > {d}.cli & {'m=0; ' if next_datagram else ''}"
           f"{_writer(t.packets, t.payload(t.size), t.rate, after_each=next_datagram)}; wait")
    return [
        _bg(t.server, f"socat -b {t.payload(t.reply_size)} -T 120 {_sock(t, True)} {_system(srv)} "
                      f"2>{d}.srv.err", f"{t.tag}_srv"),
        f"wait_listen {q(t.server)} {t.listen_port} udp",
        _bg(t.client, f"socat -b {t.payload(t.size)} -T 120 {_sock(t, False)} {_system(cli)} 2>{d}.cli.err",
            f"{t.tag}_cli"),
        f"wait_bytes {d}.srv {t.packets * t.unit} {d}.cli {t.reply_packets * t.unit}",
    ]


def _traffic_close(t: TrafficPlan) -> list[str]:
    if t.proto == "tcp" and t.close:
        return [f"touch /tmp/{t.tag}.close"]
    return []


def _traffic_files(t: TrafficPlan) -> list[str]:
    d = f"/tmp/{t.tag}"
    return [f"{d}.srv", f"{d}.cli", f"{d}.srv.err", f"{d}.cli.err"]


# ---------------------------------------------------------------------- scenario

# IPv6's own traffic, which flowsim does not model, switched off in every namespace before any device exists: no
# automatic link-local address (addr_gen_mode=1: so no DAD and no router solicitation from it), no DAD, no RA, no
# router solicitation.  Each /proc/sys path and value arrive as positional parameters, never as script text.
QUIET_V6 = ("accept_ra=0", "accept_dad=0", "addr_gen_mode=1", "router_solicitations=0")
_QUIET_SCRIPT = ('for c in all default; do for kv in "$@"; do '
                 'echo "${kv#*=}" > "/proc/sys/net/ipv6/conf/$c/${kv%%=*}" 2>/dev/null; done; done; true')


def quiet_ipv6(netns: str) -> list[str]:
    """The guest lines that switch :data:`QUIET_V6` on in *netns* (for ``all`` and ``default``)."""
    q = shlex.quote
    return [f"  NS {q(netns)} sh -c {q(_QUIET_SCRIPT)} sh {' '.join(QUIET_V6)}"]


def setup_lines(topo: Topology, plan: ScenarioPlan, per_netns: Callable[[str], list[str]] | None = None) -> list[str]:
    """A scenario's set-up in the guest, the same in both modes: its namespaces (*per_netns* adds lines right
    after each is created), the topology's own commands and sysctls, then the harness settings."""
    q = shlex.quote
    out = []
    for ns in plan.namespaces:
        out.append(f"  run - {IP} netns add {q(ns)}")
        out.extend(per_netns(ns) if per_netns else ())
    for cmds in topology_commands(topo).values():
        for cmd in cmds:
            out.append(f"  run {q(f'{cmd.file}:{cmd.line}')} {render_command(cmd)} || return")
    for name in topo.namespaces:
        for key, value in live_sysctls(topo, name):
            out.append(f"  run {q(f'{topo.file}: sysctl {key}')} {_write_sysctl(name, key, value)} || return")
    for ns in plan.namespaces:
        out.append(f"  harness_settings {q(ns)}")
    return out


def render_scenario(topo: Topology, plan: ScenarioPlan) -> str:
    """The shell function ``scenario_N`` for the guest (see the module docstring for its steps)."""
    q = shlex.quote
    s = plan.index
    out = [f"scenario_{s}() {{", f"  begin {s} {q(plan.name)}", *setup_lines(topo, plan, quiet_ipv6)]
    for name, ns in topo.namespaces.items():
        pings = [f"{e.dev}:{e.addr}" for e in ns.neigh if str(e.addr) and getattr(e, "origin", "") == "discovered"]
        if pings:
            out.append(f"  warm_neigh {q(name)} {' '.join(map(q, pings))}")
    if any("warm_neigh" in line for line in out):
        out.append(f"  pin_neigh {' '.join(map(q, plan.namespaces))}")
    for name, ns in topo.namespaces.items():
        if ns.nft is not None:
            out.append(f"  run {q(f'{ns.nft.file}:{ns.nft.line}')} NS {q(name)} {GUEST_BIN['nft']} -f "
                       f"{q(f'/conform/s{s}/{name}.nft')} || return")
        out.append(f"  run - NS {q(name)} {GUEST_BIN['nft']} -f {q(f'/conform/s{s}/{name}.probe.nft')} || return")
        out.append(f"  NS {q(name)} {GUEST_BIN['conntrack']} -F >/dev/null 2>&1")
    out.append("  PIDS=")
    for t in plan.traffic:
        if t.pause:
            out.append(f"  sleep {t.pause}")
        out.append(f"  note traffic {t.tag} {q(t.name)}")
        out.extend("  " + line for line in _traffic_start(t))
    out.append(f"  snapshot {s} mid {' '.join(map(q, plan.namespaces))}")
    for t in plan.traffic:
        out.extend("  " + line for line in _traffic_close(t))
    closing = [f"${t.tag}_{side}" for t in plan.traffic if t.proto == "tcp" and t.close for side in ("srv", "cli")]
    if closing:
        out.append(f"  wait_gone {' '.join(closing)}")
    out.append("  sleep 1")
    out.append(f"  snapshot {s} end {' '.join(map(q, plan.namespaces))}")
    files = " ".join(f for t in plan.traffic for f in _traffic_files(t))
    out.append(f"  files {s} {files}")
    out.append("}")
    return "\n".join(out) + "\n"


def scenario_files(topo: Topology, plan: ScenarioPlan) -> dict[str, bytes]:
    """The per-scenario files the guest reads: rulesets and probe tables."""
    files = {}
    for name, ns in topo.namespaces.items():
        if "/" in name or "\0" in name or name in ("", ".", ".."):  # the loader refuses these (ip netns's rule)
            raise _bad(topo, f"namespace name {name!r} cannot name a file in the guest",
                       expected="a name without '/' or NUL, not '.' or '..'")
        if ns.nft is not None:
            files[f"conform/s{plan.index}/{name}.nft"] = guest_ruleset(topo, name).encode()
        files[f"conform/s{plan.index}/{name}.probe.nft"] = probe_ruleset(plan, name).encode()
    return files


def render_init(scenarios: list[tuple[Topology, ScenarioPlan]]) -> dict[str, bytes]:
    """``/init`` (the packaged template plus every scenario function) and the scenario files."""
    template = (Path(__file__).parent / "data" / "init.sh").read_text()
    body = "".join(render_scenario(topo, plan) for topo, plan in scenarios)
    calls = "".join(f"scenario_{plan.index}; cleanup {plan.index}\n" for _, plan in scenarios)
    files = {"init": template.replace("@SCENARIOS@", body).replace("@RUN@", calls).encode()}
    for topo, plan in scenarios:
        files.update(scenario_files(topo, plan))
    return files


def run_archive(files: dict[str, bytes]) -> bytes:
    """The small per-run archive appended to the cached base initramfs."""
    entries, dirs = [], set()
    for path in sorted(files):
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in dirs:
                dirs.add(d)
                entries.append(CpioEntry(d, stat.S_IFDIR | 0o755))
        entries.append(CpioEntry(path, stat.S_IFREG | 0o755, files[path]))
    return gzip.compress(cpio_newc(entries), compresslevel=1)


# ---------------------------------------------------------------------- boot

@attrs.frozen
class GuestResult:
    """What one boot left: the results channel (ttyS1), the console log (ttyS0), wall time."""

    results: str
    console: str
    seconds: float
    returncode: int


def boot_guest(kit: KernelKit, base: Path, files: dict[str, bytes], workdir: Path, *,
               qemu: str = "qemu-system-x86_64", timeout: float = 600, smp: int = 1) -> GuestResult:
    """Boot *kit* with the base initramfs plus *files* under TCG; no NIC, two serial ports, power off at the end.

    One virtual CPU: with two, multi-threaded TCG occasionally lets the guest trip over its own code
    patching (an ``int3`` oops in ``sched_clock_cpu`` was seen on a loaded host).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    initrd = workdir / "initrd.img"
    initrd.write_bytes(base.read_bytes() + run_archive(files))
    console, results = workdir / "console.log", workdir / "results.log"
    for f in (console, results):
        f.unlink(missing_ok=True)
    cmd = [qemu, "-accel", "tcg", "-smp", str(smp), "-m", "1024", "-display", "none", "-monitor", "none",
           "-no-reboot", "-nic", "none", "-serial", f"file:{console}", "-serial", f"file:{results}",
           "-kernel", str(kit.vmlinuz), "-initrd", str(initrd),
           "-append", "console=ttyS0 quiet panic=-1 net.ifnames=0"]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        rc = proc.returncode
        err = proc.stderr
    except subprocess.TimeoutExpired:
        rc, err = -1, f"qemu did not power off within {timeout:.0f} s"
    except OSError as exc:
        raise ConformSetupError(f"cannot run {qemu}: {exc.strerror}") from None
    seconds = time.monotonic() - t0
    text = results.read_text(errors="replace") if results.exists() else ""
    log = console.read_text(errors="replace") if console.exists() else ""
    if "@@ - done" not in text:
        tail = (err.strip().splitlines() or log.strip().splitlines() or ["no output"])[-1]
        raise ConformSetupError(f"guest run failed (qemu exit {rc}): {tail}; console log: {console}")
    return GuestResult(text.replace("\r", ""), log, round(seconds, 2), rc)
