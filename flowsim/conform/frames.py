"""Frame-exact conformance (``flowsim conform --frames``): flowsim's own frames played into a real kernel.

Theory of operation
-------------------
The socat mode lets real TCP/UDP stacks talk and compares totals with
slack.  This mode compares frames, byte for byte, with no tolerance:

1. **Simulation** (:func:`simulate_frames`).  The topology runs in the
   simulator under the harness's profile with the stack's packet tap
   (``Kernel.packet_tap``, the tap ``flowsim run --pcapng`` writes from) and
   the flowtable hook's verdict tap (``Kernel.verdict``).  Every frame is
   kept with its namespace, device, direction, packet id and, for a frame a
   flowtable hook received, the verdict (``fastpath`` / ``slowpath REASON``
   / ``drop REASON``).  ``--max-packets N`` caps every traffic direction at
   N packets (``packets`` and ``reply_packets`` of each ``[[traffic]]``
   table) before the run, so a long table stays a short boot.
2. **Endpoints** are the namespaces that send or accept traffic; they must
   not hold a flowtable.  Their *wire devices* are their devices with a
   veth peer in another namespace.  The frames flowsim transmits on a wire
   device are the frames to inject, in flowsim's order, both directions
   interleaved as flowsim emitted them.
3. **Guest** (:func:`render_frames_scenario`).  The topology is built as in
   the socat mode (:func:`flowsim.conform.guest.render_command`), then

   * IPv6 noise is switched off before any device exists: in every
     namespace ``accept_ra=0``, ``accept_dad=0``, ``addr_gen_mode=1`` (no
     link-local address, so no DAD, no router solicitation) and
     ``router_solicitations=0`` for ``all`` and ``default``.  MLD reports
     of the solicited-node groups are sent when a device comes up; the
     captures start two seconds later, after the last unsolicited report.
     Nothing is filtered: a frame flowsim did not emit is a difference;
   * every Ethernet device gets flowsim's MAC address
     (:func:`flowsim.kernel.devices.base.mac_for`, or the one the topology
     sets) with ``ip link set dev D address M``;
   * neighbours: flowsim does not model ARP or neighbour discovery on the
     wire; its loader pre-resolves every neighbour on a shared L2 segment
     (:func:`flowsim.kernel.neigh.discover`).  The guest gets the same
     entries as ``nud permanent`` on both sides, so no ARP/ND frame is ever
     sent;
   * the endpoints' stacks never answer: a ``netdev`` ingress chain with
     policy ``drop`` on every wire device (packet taps run before the
     ingress hook, so the captures still record the frames);
   * the rulesets are loaded as written, plus, in every flowtable
     namespace, a ``prerouting`` chain at priority -500 (before
     defragmentation and conntrack) doing ``log group 7``.

   Every device of every namespace except the endpoints' non-wire devices
   and ``lo`` is captured by two ``tcpdump -Q in`` / ``-Q out`` processes
   (``-U --immediate-mode -s 65600 -B 4096 -Z root``): a pcap keeps no direction, and
   flowsim's link delay may interleave the two directions of one device
   differently from a sequential injection, so each direction is its own
   ordered stream.  ``tcpdump -i nflog:7`` records the log group.  Then each
   frame to inject is written with ``socat -u OPEN:FILE INTERFACE:DEV``
   inside its namespace, one frame per write, in flowsim's order, strictly
   one after the other (a run of frames on the same device shares one
   ``ip netns exec``).  A GSO skb (a ``gso_size`` table's TSO) is written
   whole through a ``PACKET_VNET_HDR`` socket with its ``virtio_net_hdr``
   (:func:`virtio_net_hdr`), from a device with TSO back on, so the router
   receives the GSO skb flowsim's did; the captures of the unsegmented skb
   show the TCP checksum seed the kernel writes (``KERNEL_DERIVED``).  The pcaps return base64-encoded in the results
   channel (sections ``pcap`` and ``nflog``, parsed by
   :func:`flowsim.conform.parse.parse_pcap`).
4. **Verdicts.**  The flowtable hook runs at netdev ingress; a packet it
   does not steal continues to ``prerouting``.  The log chain therefore
   records exactly the packets the hook passed to the slow path, whether
   they are then forwarded, delivered locally (the outer packet of a tunnel)
   or dropped later.  That is flowsim's ``slowpath`` verdict, which a
   ``forward`` chain would miss for the locally delivered ones, and the
   kernel's counters give totals, not the frame.  A received frame with a
   flowsim verdict is ``slowpath`` on the kernel's side when its L3 packet
   (the frame's bytes after the Ethernet and VLAN headers) is among the
   namespace's logged packets (each logged packet is used once per device:
   a packet that passes stacked flowtable devices, a VLAN and the PPPoE
   session on it, meets each of their hooks and is logged once), else
   ``fastpath`` (a frame the hook dropped would show as a missing frame on
   the egress device).  flowsim's ``drop`` counts as not slow path.
5. **Comparison** (:func:`compare_frames`): per device and direction the
   frame count, then frame by frame the bytes (the first differing frame is
   reported with both hexdumps and a scapy one-line summary of each), and
   per frame with a flowsim verdict the verdicts.  Facts are
   :class:`flowsim.conform.compare.Fact` rows with tolerance ``exact``.
"""

from __future__ import annotations

import collections
from pathlib import Path
import re
import shlex
import struct

import attrs

from flowsim.config.topology import Topology
from flowsim.conform import pppoe
from flowsim.conform.compare import Fact
from flowsim.conform.guest import IP, ScenarioPlan, quiet_ipv6, scenario_files, setup_lines
from flowsim.conform.known import KERNEL_DERIVED, KERNEL_RANDOM, TCP_SEED
from flowsim.conform.kernel import GUEST_BIN
from flowsim.conform.parse import Pcap, Section, parse_pcap
from flowsim.errors import ConfigError
from flowsim.kernel.gso import SKB_GSO_DODGY, SKB_GSO_TCPV4, SKB_GSO_TCPV6
from flowsim.kernel.headers import IPPROTO_ICMPV6, IPPROTO_TCP, NEXTHDR_FRAGMENT, csum_fold
from flowsim.kernel.pkt import l4_checksum, pseudo_sum
from flowsim.kernel.capture import (
    _ARPHRD, LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_RAW, _from_ethernet, device_linktype,
)
from flowsim.profiles import get_profile
from flowsim.sim.simulation import Simulation
from flowsim.sim.traffic import TrafficSpec

__all__ = ["SimFrame", "FramePlan", "simulate_frames", "render_frames_scenario", "frames_files",
           "compare_frames", "hexdump", "summary", "l3_bytes", "NFLOG_GROUP", "FRAMES_TABLE", "SETTLE",
           "render_frames_init", "kernel_frames", "FRAMES_LINK_DELAY", "KernelFrames", "scenario_id", "error_facts",
           "nflog_payload",
           "kernel_random_fields", "cooked_to_packet", "random_field_offsets", "first_real_difference",
           "GSO_SUFFIX", "virtio_gso_type", "virtio_net_hdr", "tcp_checksum_seed"]

NFLOG_GROUP = 7
FRAMES_TABLE = "flowsim_frames"
SETTLE = 2          # seconds between the last device coming up and the captures (unsolicited MLD reports)
# The guest injects one frame at a time and the kernel carries it across every veth to its end (netif_rx,
# the backlog softirq) before the next socat starts: no two packets are ever in flight at once.  flowsim is
# run with a link delay far below the generator's 10 us gap so that it does the same; with its default
# 20 us, a reply crossing the client's FIN reached the router after it in flowsim and before it in the guest
# (bridge-vlan on 6.12: 'flow-teardown' slow path in flowsim, fast path in the kernel).
FRAMES_LINK_DELAY = 1e-9
LINKTYPE_NFLOG = 239
# Names that reach socat's address syntax (``INTERFACE:DEV``) and nft's quoted device names unquoted by
# a shell: letters, digits and ``_ . -`` only (the kernel allows more; the guest refuses the rest).
_SAFE_DEV = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
KERNEL_SET = {**KERNEL_RANDOM, **KERNEL_DERIVED}
_ETH_VLAN = (0x8100, 0x88A8)
_PPPOE_SESSION = 0x8864


@attrs.frozen
class SimFrame:
    """One frame as flowsim's packet tap saw it, in the device's pcap link type."""

    index: int              # position in the run's tap order
    netns: str
    dev: str
    data: bytes
    linktype: int
    outbound: bool
    packet: int | None      # one id per simulated packet
    verdict: str | None     # the flowtable hook's verdict on this received frame
    gso_size: int = 0       # a GSO skb's skb_shinfo(skb)->gso_size (0: an ordinary frame)
    gso_type: int = 0       # ... and its gso_type (SKB_GSO_* bits)


@attrs.frozen
class FramePlan:
    """What the guest plays and captures for one scenario, and what flowsim captured."""

    frames: tuple[SimFrame, ...]
    inject: tuple[SimFrame, ...]
    captured: tuple[tuple[str, str], ...]       # (netns, dev) the guest captures, in order
    endpoints: tuple[str, ...]
    wires: tuple[tuple[str, str], ...]          # endpoint wire devices: ingress drop, injection
    macs: tuple[tuple[str, str, str], ...]      # (netns, dev, mac)
    neigh: tuple[tuple[str, str, str, str], ...]  # (netns, dev, addr, lladdr)
    router_netns: tuple[str, ...]               # namespaces with a flowtable (log chain)
    max_packets: int | None = None
    capped: tuple[str, ...] = ()                # traffic tables the cap shortened
    esp_keys: tuple[tuple[int, bytes], ...] = ()  # (SPI, rfc4106 key + salt) of the topology's ESP SAs

    def expected(self, netns: str, dev: str, outbound: bool) -> list[SimFrame]:
        return [f for f in self.frames if f.netns == netns and f.dev == dev and f.outbound == outbound]


# ---------------------------------------------------------------------- simulation

def _bad(topo: Topology, msg: str, expected: str) -> ConfigError:
    return ConfigError(msg, where=topo.file, expected=expected)


def simulate_frames(topo: Topology, plan: ScenarioPlan, profile: str,
                    max_packets: int | None = None) -> FramePlan:
    """Run *topo* under *profile* with the packet and verdict taps; the frames and the guest's plan."""
    specs = [TrafficSpec.from_topology(t, i) for i, t in enumerate(topo.traffic)]
    capped = []
    if max_packets is not None:
        short = []
        for s in specs:
            n = attrs.evolve(s, packets=min(s.packets, max_packets), reply_packets=min(s.reply_packets, max_packets))
            if n != s:
                capped.append(s.name)
            short.append(n)
        specs = short
    sim = Simulation(topo, get_profile(profile), traffic=specs, link_delay=FRAMES_LINK_DELAY)
    live = sim.topo
    rec: list[list] = []

    def tap(netns: str, dev: str, frame: bytes, skb, outbound: bool) -> None:
        d = live.namespaces[netns].devices.get(dev)
        kind = d.link_type if d is not None else "ether"
        rec.append([netns, dev, frame, outbound, getattr(skb, "tag", None), None, skb, device_linktype(kind), kind,
                    getattr(skb, "gso_size", 0), getattr(skb, "gso_type", 0)])

    def verdict(skb, text: str) -> None:
        for r in reversed(rec):
            if not r[3] and r[6] is skb:
                if r[5] is None:
                    r[5] = text
                return

    sim.kernel.packet_tap = tap
    sim.kernel.verdict = verdict
    sim.run()
    ids: dict[int, int] = {}
    frames = []
    for i, (netns, dev, frame, outbound, tag, text, _skb, lt, kind, gso_size, gso_type) in enumerate(rec):
        pid = ids.setdefault(id(tag), len(ids) + 1) if tag is not None else None
        # the tap hands an L3 device's frame behind a synthetic Ethernet header: as its pcap holds it (raw IP,
        # or a cooked header: packet type, ARPHRD, protocol — as `flowsim run --pcapng` writes it)
        data = _from_ethernet(frame, lt, _ARPHRD.get(kind, 0), outbound) if lt != LINKTYPE_ETHERNET else frame
        frames.append(SimFrame(i, netns, dev, data, lt, outbound, pid, text, gso_size, gso_type))
    rec.clear()

    endpoints = tuple(dict.fromkeys(x for t in plan.traffic for x in (t.client, t.server)))
    for ns in endpoints:
        if ns in plan.flowtable_netns:
            raise _bad(topo, f"--frames: namespace {ns!r} sends or accepts traffic and has a flowtable",
                       "endpoints (traffic sources and servers) without a flowtable: their stacks are muted")
    wires = []
    for ns in endpoints:
        for dev in live.namespaces[ns].devices.values():
            peer = live.peer(dev)
            if peer is not None and peer.netns != ns:
                wires.append((ns, dev.name))
    captured = []
    for name, ns in live.namespaces.items():
        for dev in ns.devices.values():
            if dev.name == "lo" or (name in endpoints and (name, dev.name) not in wires):
                continue
            captured.append((name, dev.name))
    for ns, dev in set(captured) | set(wires):
        if not _SAFE_DEV.match(dev):
            raise _bad(topo, f"--frames: device name {dev!r} in {ns!r} cannot be captured and injected in the guest",
                       "device names of letters, digits, '_', '.', '-' (at most 15)")
    inject = tuple(f for f in frames if f.outbound and (f.netns, f.dev) in wires)
    for f in inject:
        if f.gso_size and virtio_gso_type(f.gso_type) is None:
            raise _bad(topo, f"--frames: {f.netns}/{f.dev} sends a GSO skb of gso_type {f.gso_type:#x}, which a "
                             "packet socket's virtio_net_hdr cannot carry",
                       "GSO traffic of plain TCP over IPv4 or IPv6 from the endpoints (gso_size on a TCP table)")
    macs = []
    for name, ns in live.namespaces.items():
        for dev in ns.devices.values():
            if dev.link_type == "ether" and dev.mac and dev.name != "lo" and int(dev.mac[:2], 16) & 1 == 0:
                macs.append((name, dev.name, dev.mac))
    neigh = []
    for name, space in topo.namespaces.items():
        for e in space.neigh.entries.values():
            if e.lladdr:
                neigh.append((name, e.dev, str(e.addr), e.lladdr))
    esp_keys = {(sa.spi, sa.key) for ns in live.namespaces.values() if ns.xfrm is not None
                for sa in ns.xfrm.states if sa.key}
    return FramePlan(tuple(frames), inject, tuple(captured), endpoints, tuple(wires), tuple(macs), tuple(neigh),
                     plan.flowtable_netns, max_packets, tuple(capped), tuple(sorted(esp_keys)))


# ---------------------------------------------------------------------- guest

def mute_ruleset(fplan: FramePlan, netns: str) -> str:
    """The endpoint's ``netdev`` tables: every wire device's ingress dropped (its stack never answers)."""
    out = []
    for i, (ns, dev) in enumerate(fplan.wires):
        if ns == netns:
            out += [f"table netdev {FRAMES_TABLE}_{i} {{",
                    f'  chain mute {{ type filter hook ingress device "{dev}" priority -500; policy drop; }}', "}"]
    return "\n".join(out) + "\n"


def log_ruleset() -> str:
    """The flowtable namespaces' log chain: every packet the flowtable hook passed to the slow path."""
    return (f"table inet {FRAMES_TABLE} {{\n"
            f"  chain slowpath {{ type filter hook prerouting priority -500; policy accept; "
            f"log group {NFLOG_GROUP}; }}\n}}\n")


def frames_files(fplan: FramePlan, index: int) -> dict[str, bytes]:
    """The frame files, the mute tables and the log table of scenario *index* (paths inside the initramfs)."""
    files = {f"conform/s{index}/{frame_file(k, f)}": virtio_net_hdr(f) + f.data if f.gso_size else f.data
             for k, f in enumerate(fplan.inject)}
    for ns in fplan.endpoints:
        files[f"conform/s{index}/{ns}.mute.nft"] = mute_ruleset(fplan, ns).encode()
    files[f"conform/s{index}/log.nft"] = log_ruleset().encode()
    return files


# A GSO skb is injected with a struct virtio_net_hdr in front (PACKET_VNET_HDR on the packet socket:
# packet_snd -> virtio_net_hdr_to_skb): the frame file's name ends in GSO_SUFFIX.
GSO_SUFFIX = ".gso"
SOL_PACKET, PACKET_VNET_HDR = 263, 15  # include/linux/socket.h, include/uapi/linux/if_packet.h
# include/uapi/linux/virtio_net.h: VIRTIO_NET_HDR_GSO_TCPV4 / _TCPV6, by the skb's gso_type bit
_VIRTIO_GSO = {SKB_GSO_TCPV4: 1, SKB_GSO_TCPV6: 4}
_VNET_HDR = struct.Struct("<BBHHHH")  # flags, gso_type, hdr_len, gso_size, csum_start, csum_offset (LE on x86)


def virtio_gso_type(gso_type: int) -> int | None:
    """The ``VIRTIO_NET_HDR_GSO_*`` of an skb's *gso_type*: plain TCP over IPv4 or IPv6 only (a tunnel's
    SKB_GSO_IPXIP4/6 bits, UDP_L4 and ESP have no virtio type a packet socket takes without a seeded
    checksum); None otherwise."""
    hit = [v for bit, v in _VIRTIO_GSO.items() if gso_type & bit]
    return hit[0] if len(hit) == 1 and gso_type & ~(SKB_GSO_TCPV4 | SKB_GSO_TCPV6 | SKB_GSO_DODGY) == 0 else None


def virtio_net_hdr(f: SimFrame) -> bytes:
    """The ``struct virtio_net_hdr`` that makes the guest's packet socket build *f* as the GSO skb flowsim sent.

    No VIRTIO_NET_HDR_F_NEEDS_CSUM: ``__virtio_net_hdr_to_skb`` finds the transport header with the flow
    dissector, and the first ``validate_xmit_skb`` seeds the TCP checksum itself (tcp4_gso_segment /
    tcp6_gso_segment); ``hdr_len`` puts the headers in the linear area, the payload in page fragments, as
    a TCP sender's skb has them.
    """
    l4 = _l4_offset(f.data, _l3_offset(f.data, f.linktype))
    hdr_len = l4 + (f.data[l4 + 12] >> 4) * 4
    vtype = virtio_gso_type(f.gso_type)
    assert vtype is not None  # simulate_frames refused the rest
    return _VNET_HDR.pack(0, vtype, hdr_len, f.gso_size, 0, 0)


def tcp_checksum_seed(kernel: bytes, sim: bytes, linktype: int) -> bool:
    """*kernel* is *sim*, a GSO skb's frame, but for its TCP checksum, which holds the pseudo-header seed
    ``__tcp_v4_send_check`` / ``__tcp_v6_send_check`` write (``th->check = ~tcp_v4_check(len, saddr, daddr,
    0)``) where flowsim's frame carries the full checksum."""
    if len(kernel) != len(sim):
        return False
    l3 = _l3_offset(sim, linktype)
    if len(sim) < l3 + 40:
        return False
    l4 = _l4_offset(sim, l3)
    if sim[l3] >> 4 == 4 and sim[l3 + 9] == IPPROTO_TCP:
        src, dst, l4len = sim[l3 + 12:l3 + 16], sim[l3 + 16:l3 + 20], struct.unpack_from("!H", sim, l3 + 2)[0] - (l4 - l3)
    elif sim[l3] >> 4 == 6 and sim[l3 + 6] == IPPROTO_TCP:
        src, dst, l4len = sim[l3 + 8:l3 + 24], sim[l3 + 24:l3 + 40], struct.unpack_from("!H", sim, l3 + 4)[0]
    else:
        return False
    at = l4 + 16
    if len(sim) < at + 2 or kernel[:at] != sim[:at] or kernel[at + 2:] != sim[at + 2:]:
        return False
    # the folded, uncomplemented pseudo-header sum
    seed = csum_fold(pseudo_sum(int.from_bytes(src, "big"), int.from_bytes(dst, "big"), IPPROTO_TCP, l4len))
    return struct.unpack_from("!H", kernel, at)[0] == seed


def _l4_offset(data: bytes, l3: int) -> int:
    """Where the L4 header of the IPv4 (its IHL) or IPv6 packet at *l3* starts (no IPv6 extension headers)."""
    return l3 + ((data[l3] & 15) * 4 if data[l3] >> 4 == 4 else 40)


def frame_file(k: int, f: SimFrame) -> str:
    """The file of the *k*-th frame to inject, below the scenario's folder (a GSO skb's marked)."""
    return f"f/{k}{GSO_SUFFIX if f.gso_size else ''}"


def _runs(fplan: FramePlan) -> list[tuple[str, str, list[int]]]:
    """Consecutive frames to inject on the same device: (netns, dev, frame file numbers)."""
    out: list[tuple[str, str, list[int]]] = []
    for k, f in enumerate(fplan.inject):
        if out and out[-1][0] == f.netns and out[-1][1] == f.dev:
            out[-1][2].append(k)
        else:
            out.append((f.netns, f.dev, [k]))
    return out


# one frame per socat call: socat -u reads the whole file (-b larger than any frame) and writes it once; a
# GSO skb's file (GSO_SUFFIX) goes through a socket with PACKET_VNET_HDR, its virtio_net_hdr first
_INJECT_SCRIPT = ('d=$1; shift; for f in "$@"; do o=; case $f in *' + GSO_SUFFIX + ') '
                  f'o=,setsockopt-int={SOL_PACKET}:{PACKET_VNET_HDR}:1;; esac; '
                  'socat -u -b 262144 "OPEN:$f" "INTERFACE:$d$o" || echo "inject $f on $d failed"; done')


def render_frames_scenario(topo: Topology, plan: ScenarioPlan, fplan: FramePlan) -> str:
    """The shell function ``scenario_N`` of the ``--frames`` mode (see the module docstring)."""
    q = shlex.quote
    s = plan.index
    base = f"/conform/s{s}"
    out = [f"scenario_{s}() {{", f"  begin {s} {q(plan.name)}", *setup_lines(topo, plan, quiet_ipv6)]
    # a PPPoE session's Ethernet devices got flowsim's MACs before the session started (flowsim.conform.pppoe);
    # setting one again, even to the same address, ends the session (pppoe_device_event -> pppoe_flush_dev)
    sessions = pppoe.lower_devices(topo)
    for ns, dev, mac in fplan.macs:
        if (ns, dev) in sessions:
            continue
        out.append(f"  run - {IP} -n {q(ns)} link set dev {q(dev)} address {q(mac)} || return")
    # the harness turns TSO off everywhere; a device that sends flowsim's GSO skbs needs it back, or its
    # validate_xmit_skb would cut them (a virtio_net_hdr marks them SKB_GSO_DODGY: with TSO, tcp_gso_segment
    # only recounts gso_segs and passes them on whole, as a TCP sender's TSO skb crosses a veth)
    senders = dict.fromkeys((f.netns, f.dev) for f in fplan.inject if f.gso_size)
    for ns, dev in senders:
        out.append(f"  run - NS {q(ns)} {GUEST_BIN['ethtool']} -K {q(dev)} tso on || return")
    # libpcap's TPACKET_V2 ring (tcpdump --immediate-mode) cuts an Ethernet device's frames at its MTU + 18
    # unless the device has an offload on (pcap-linux.c): a device that receives or forwards a GSO skb
    # whole gets 'gso', which only decides whether its own sockets build GSO skbs (none send here)
    for ns, dev in dict.fromkeys((f.netns, f.dev) for f in fplan.frames if f.gso_size):
        if (ns, dev) not in senders:
            out.append(f"  run - NS {q(ns)} {GUEST_BIN['ethtool']} -K {q(dev)} gso on || return")
    for ns, dev, addr, lladdr in fplan.neigh:
        out.append(f"  run - {IP} -n {q(ns)} neigh replace {q(addr)} lladdr {q(lladdr)} dev {q(dev)} "
                   f"nud permanent || return")
    for name, space in topo.namespaces.items():
        if space.nft is not None:
            out.append(f"  run {q(f'{space.nft.file}:{space.nft.line}')} NS {q(name)} {GUEST_BIN['nft']} -f "
                       f"{q(f'{base}/{name}.nft')} || return")
    for ns in fplan.endpoints:
        out.append(f"  run - NS {q(ns)} {GUEST_BIN['nft']} -f {q(f'{base}/{ns}.mute.nft')} || return")
    for ns in fplan.router_netns:
        out.append(f"  run - NS {q(ns)} {GUEST_BIN['nft']} -f {q(f'{base}/log.nft')} || return")
        out.append(f"  NS {q(ns)} {GUEST_BIN['conntrack']} -F >/dev/null 2>&1")
    out.append(f"  sleep {SETTLE}")
    out.append("  CAPS=")
    for k, (ns, dev) in enumerate(fplan.captured):
        for d in ("in", "out"):
            out.append(f"  capture {q(ns)} {q(dev)} {d} /tmp/c{k}.{d}")
    for k, ns in enumerate(fplan.router_netns):
        out.append(f"  capture {q(ns)} nflog:{NFLOG_GROUP} - /tmp/n{k}")
    out.append("  capture_ready")
    out.append(f"  note inject {len(fplan.inject)} frames")
    for ns, dev, ks in _runs(fplan):
        files = " ".join(q(f"{base}/{frame_file(k, fplan.inject[k])}") for k in ks)
        out.append(f"  NS {q(ns)} sh -c {q(_INJECT_SCRIPT)} sh {q(dev)} {files} >>/tmp/inject.err 2>&1")
    out.append("  note injected")
    out.append(f"  [ -s /tmp/inject.err ] && section {s} stderr inject - < /tmp/inject.err; rm -f /tmp/inject.err")
    out.append("  capture_stop")
    for k in range(len(fplan.captured)):
        for d in ("in", "out"):
            out.append(f"  dump {s} pcap {k}.{d} /tmp/c{k}.{d}")
    for k in range(len(fplan.router_netns)):
        out.append(f"  dump {s} nflog {k} /tmp/n{k}")
    out.append(f"  echo \"$(up)\" | section {s} uptime - end")
    out.append("}")
    return "\n".join(out) + "\n"


# The helpers the frames scenarios use, added to the guest's /init beside the scenarios.
FRAMES_HELPERS = r"""
# capture NS DEV DIR FILE: tcpdump on DEV of NS (DIR in|out, or - for both), pid appended to $CAPS.
# Snap length: the largest GSO skb (64 KiB) and its L2 headers; libpcap sizes each slot of its ring by it
# on a device that is not Ethernet (ppp0: the -s 0 default of 256 KiB left 8 slots in 2 MiB, and a
# 12-segment burst lost 4 frames), so 4 MiB of ring hold 62 such frames.
capture() {
  if [ "$3" = - ]; then q=; else q="-Q $3"; fi
  $IP netns exec "$1" /usr/bin/tcpdump -i "$2" $q -U --immediate-mode -s 65600 -B 4096 -Z root -n -w "$4" 2>"$4.err" &
  CAPS="$CAPS $!"; CAPF="$CAPF $4.err"
}
# capture_ready: until every tcpdump said it listens (10 s at most).
capture_ready() {
  n=0
  while [ $n -lt 200 ]; do
    ok=1
    for f in $CAPF; do grep -q "listening on" "$f" 2>/dev/null || ok=0; done
    [ $ok = 1 ] && return 0
    usleep 50000; n=$((n+1))
  done
  note "capture_ready: timeout"
}
# nfnetlink_log batches log records and flushes them by a timer (NFULNL_TIMEOUT_DEFAULT, 1 s): stopping
# tcpdump sooner loses the last slow-path records (seen: the FINs at the end read as fast path).
capture_stop() {
  sleep 2
  kill -INT $CAPS 2>/dev/null
  wait_gone $CAPS
  CAPS=; CAPF=
}
# dump SCENARIO KIND ID FILE: the capture, base64, as one section.
dump() {
  if [ -e "$4" ]; then base64 < "$4"; else echo "missing: $(cat "$4.err" 2>/dev/null)"; fi | section "$1" "$2" - "$3"
  rm -f "$4" "$4.err"
}
/sbin/modprobe -a nfnetlink_log nft_log 2>&1 | section - modprobe - frames
"""


# ---------------------------------------------------------------------- kernel side

def l3_bytes(data: bytes, linktype: int) -> bytes:
    """The L3 packet of a captured frame: after the Ethernet header, any VLAN tags and a PPPoE session header;
    after a Linux cooked (SLL) header's 16 bytes; a raw-IP frame is its packet."""
    if linktype == LINKTYPE_LINUX_SLL:
        return data[16:]
    if linktype != LINKTYPE_ETHERNET:
        return data
    off, proto = 12, None
    while len(data) >= off + 2:
        proto = struct.unpack_from("!H", data, off)[0]
        if proto in _ETH_VLAN:
            off += 4
            continue
        break
    if proto == _PPPOE_SESSION:  # PPPoE session header (6 bytes), then the PPP protocol (2)
        return data[off + 2 + 8:]
    return data[off + 2:]


@attrs.frozen
class KernelFrames:
    """What the guest captured for one scenario."""

    pcaps: dict          # (netns, dev, outbound) -> Pcap
    nflog: dict          # netns -> list of logged L3 packets
    errors: tuple[str, ...] = ()


def kernel_frames(fplan: FramePlan, sections: list[Section], sid: str) -> KernelFrames:
    """The captures of scenario *sid* from its ``pcap`` and ``nflog`` sections."""
    pcaps, nflog, errors = {}, {}, []
    by = {(s.kind, s.phase): s for s in sections if s.scenario == sid}
    for k, (ns, dev) in enumerate(fplan.captured):
        for d in ("in", "out"):
            sec = by.get(("pcap", f"{k}.{d}"))
            p = parse_pcap(sec.text) if sec else Pcap(error="no capture in the results channel")
            if p.error:
                errors.append(f"{ns}/{dev} {d}: {p.error}")
            pcaps[(ns, dev, d == "out")] = p
    for k, ns in enumerate(fplan.router_netns):
        sec = by.get(("nflog", str(k)))
        p = parse_pcap(sec.text) if sec else Pcap(error="no nflog capture in the results channel")
        if p.error:
            errors.append(f"{ns} nflog: {p.error}")
        nflog[ns] = [nflog_payload(x) for x in p.frames]
    return KernelFrames(pcaps, nflog, tuple(errors))


def nflog_payload(data: bytes) -> bytes:
    """The packet of one LINKTYPE_NFLOG record (NFULA_PAYLOAD, TLVs in host byte order, 4-byte aligned)."""
    off = 4
    while off + 4 <= len(data):
        length, kind = struct.unpack_from("<HH", data, off)
        if length < 4:
            break
        if kind == 9:  # NFULA_PAYLOAD
            return data[off + 4:off + length]
        off += (length + 3) & ~3
    return b""


# ---------------------------------------------------------------------- comparison

def hexdump(data: bytes, mark: int | None = None) -> str:
    """16 bytes per line with offsets; the line holding byte *mark* ends with ``<``."""
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        flag = " <" if mark is not None and off <= mark < off + 16 else ""
        lines.append(f"{off:04x}  {hexes:<47}{flag}")
    return "\n".join(lines)


def summary(data: bytes, linktype: int) -> str:
    """scapy's one-line summary of a captured frame."""
    try:
        from scapy.layers.inet import IP as ScapyIP  # binds IP and IPv6 to Ether for the dissection
        from scapy.layers.inet6 import IPv6
        if linktype == LINKTYPE_ETHERNET:
            from scapy.layers.l2 import Ether
            return Ether(data).summary()
        if linktype == LINKTYPE_LINUX_SLL:
            from scapy.layers.l2 import CookedLinux
            return CookedLinux(data).summary()
        return (IPv6 if data[:1] and data[0] >> 4 == 6 else ScapyIP)(data).summary()
    except Exception as exc:  # noqa: BLE001 - a summary must never hide the bytes
        return f"(scapy: {exc})"


def first_difference(a: bytes, b: bytes) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def cooked_to_packet(got: tuple[bytes, ...], want: list[SimFrame]) -> tuple[tuple[bytes, ...], list[bytes]] | None:
    """A device libpcap recorded in Linux cooked mode where flowsim's capture has another link type: both
    reduced to the packet (None: no reduction needed).

    libpcap (pcap-linux.c, map_arphrd_to_dlt) runs ARPHRD_PPP in cooked mode, maps ARPHRD_TUNNEL (ipip),
    ARPHRD_SIT and ARPHRD_NONE to raw IP, and opens every ARPHRD it has no entry for — ARPHRD_TUNNEL6
    (ip6tnl), ARPHRD_IPGRE (gre), ARPHRD_IP6GRE (ip6gre) — in cooked mode too.  Whatever it chose is the
    pcap's link type: a cooked capture loses its 16-byte header (packet type, ARPHRD, address, protocol —
    the protocol must match the packet's IP version), flowsim's frame its own link-layer header.
    """
    if not want or want[0].linktype == LINKTYPE_LINUX_SLL:
        return None
    packets = []
    for f in got:
        proto = struct.unpack_from("!H", f, 14)[0] if len(f) >= 16 else None
        body = f[16:]
        version = body[0] >> 4 if body else None
        # a protocol that does not match the version keeps the header: the frame then differs, visibly
        packets.append(body if (proto, version) in ((0x0800, 4), (0x86DD, 6)) else f)
    return tuple(packets), [l3_bytes(sf.data, sf.linktype) for sf in want]


def _ipv4_checksum_ok(header: bytes) -> bool:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


def _l3_offset(data: bytes, linktype: int) -> int:
    return len(data) - len(l3_bytes(data, linktype)) if linktype == LINKTYPE_ETHERNET else \
        16 if linktype == LINKTYPE_LINUX_SLL else 0


def _esp_same_plaintext(k: bytearray, s: bytearray, at: int, keys: dict[int, bytes]) -> bool:
    """Both frames carry, from *at*, the same ESP header (SPI, sequence number) and, opened with that SA's key
    (``esp_input``), the same plaintext and next header: only the IV, and with it the ciphertext and the
    ICV, differ.  The IV is the sequence number XOR a salt ``aead_init_geniv`` draws at random per SA
    (crypto/seqiv.c, crypto/geniv.c), so no model can write the kernel's."""
    from flowsim.kernel.esp import ESP_HEADER_LEN, XfrmState, esp_input

    if len(k) < at + ESP_HEADER_LEN or k[at:at + 8] != s[at:at + 8]:
        return False
    spi = int.from_bytes(k[at:at + 4], "big")
    key = keys.get(spi)
    if key is None:
        return False
    state = XfrmState(spi=spi, key=key)
    mine, theirs = esp_input(state, bytes(k[at:])), esp_input(state, bytes(s[at:]))
    return mine is not None and mine == theirs


def kernel_random_fields(kernel: bytes, sim: bytes, linktype: int,
                         esp_keys: dict[int, bytes] | None = None) -> tuple[str, ...] | None:
    """The :data:`~flowsim.conform.known.KERNEL_RANDOM` fields that alone make two frames differ, or None.

    Only tunnel headers are looked at — an IPv4 header carrying IPv4/IPv6 (protocol 4 or 41: its ID and
    header checksum, and both checksums must be valid) or an IPv6 header carrying them (directly or behind
    a destination options header, the encapsulation limit: its flow label) — walking from the outermost
    header inwards, the IPv4 header of an ICMP error (type 3, 11, 12) without DF, as a router sends it
    (its ID and checksum), the IPv6 header of an ICMPv6 error (type < 128: its flow label; and when it quotes
    an IPv6 fragment, that fragment's identification and the ICMPv6 checksum, both checksums valid) and the
    fragment header right after an IPv6 header (its identification, which a router that cuts a reassembled
    packet again draws at random); every other
    byte, the innermost packet's headers and the quoted packet of an error included, must be equal.  An ESP
    packet of an SA whose key *esp_keys* holds (by SPI) is compared by its header and its decrypted
    plaintext (:func:`_esp_same_plaintext`).
    """
    if len(kernel) != len(sim):
        return None
    k, s = bytearray(kernel), bytearray(sim)
    off = _l3_offset(sim, linktype)
    fields: list[str] = []
    while off + 20 <= len(k) and k[off] >> 4 == s[off] >> 4:
        if k[off] >> 4 == 4:
            ihl = (k[off] & 15) * 4
            icmp_error = (k[off + 9] == s[off + 9] == 1 and off + ihl < len(k) and k[off + ihl] in (3, 11, 12)
                          and not k[off + 6] & 0x40)  # outermost, or inside the tunnel headers walked so far
            if icmp_error:  # the ICMP message (its quoted packet included) stays exact
                if not (_ipv4_checksum_ok(bytes(k[off:off + ihl])) and _ipv4_checksum_ok(bytes(s[off:off + ihl]))):
                    return None
                for b in (off + 4, off + 5, off + 10, off + 11):
                    k[b] = s[b] = 0
                fields.append("ICMP error's IPv4 ID and header checksum")
                break
            if k[off + 9] == s[off + 9] == 50 and esp_keys and not fields:
                if not (_ipv4_checksum_ok(bytes(k[off:off + ihl])) and _ipv4_checksum_ok(bytes(s[off:off + ihl]))):
                    return None
                if _esp_same_plaintext(k, s, off + ihl, esp_keys):
                    k[off + ihl + 8:] = s[off + ihl + 8:]
                    fields.append("ESP IV, ciphertext and ICV")
                break
            if k[off + 9] not in (4, 41) or k[off + 9] != s[off + 9] or off + ihl > len(k):
                break
            if not (_ipv4_checksum_ok(bytes(k[off:off + ihl])) and _ipv4_checksum_ok(bytes(s[off:off + ihl]))):
                return None
            for b in (off + 4, off + 5, off + 10, off + 11):
                k[b] = s[b] = 0
            fields.append("ipip outer IPv4 ID and header checksum")
            off += ihl
        elif k[off] >> 4 == 6 and off + 40 <= len(k):
            nh, nxt = k[off + 6], off + 40
            if nh == s[off + 6] == 58 and nxt < len(k) and k[nxt] < 128:
                # an ICMPv6 error a router sent, outermost or inside the tunnel headers walked so far: its own flow
                # label is automatic (the message stays exact, but for the identification of a fragment it quotes,
                # which a router drew cutting a packet again)
                k[off + 1] &= 0xF0
                s[off + 1] &= 0xF0
                k[off + 2:off + 4] = s[off + 2:off + 4] = b"\0\0"
                fields.append("ICMPv6 error's flow label")
                ident = _quoted_fragment_ident(k, s, off)
                if ident is not None:
                    if not (_icmpv6_checksum_ok(k, off) and _icmpv6_checksum_ok(s, off)):
                        return None
                    k[ident:ident + 4] = s[ident:ident + 4] = bytes(4)
                    k[nxt + 2:nxt + 4] = s[nxt + 2:nxt + 4] = b"\0\0"  # the checksum that covers it
                    fields.append("IPv6 fragment identification")
                break
            if nh == 60 and nxt + 8 <= len(k):   # destination options (the tunnel encapsulation limit)
                nh, nxt = k[nxt], nxt + (k[nxt + 1] + 1) * 8
            if nh == s[off + 6] == 50 and esp_keys and not fields:
                if _esp_same_plaintext(k, s, nxt, esp_keys):
                    k[nxt + 8:] = s[nxt + 8:]
                    fields.append("ESP IV, ciphertext and ICV")
                break
            if nh == s[off + 6] == NEXTHDR_FRAGMENT and nxt + 8 <= len(k):
                # a fragment a router cut again after conntrack's reassembly: ip6_fragment's identification
                k[nxt + 4:nxt + 8] = s[nxt + 4:nxt + 8] = bytes(4)
                fields.append("IPv6 fragment identification")
                break
            if nh not in (4, 41):
                break
            k[off + 1] &= 0xF0
            s[off + 1] &= 0xF0
            k[off + 2:off + 4] = s[off + 2:off + 4] = b"\0\0"
            fields.append("ip6tnl outer IPv6 flow label")
            off = nxt
        else:
            break
    return tuple(dict.fromkeys(fields)) if fields and k == s else None


def _quoted_fragment_ident(k: bytes | bytearray, s: bytes | bytearray, off: int) -> int | None:
    """Where the identification of the fragment quoted by the ICMPv6 error at *off* in both frames is: the quoted
    IPv6 header followed by its fragment header, the same in both but for that field; None otherwise."""
    q = off + 48  # the error's IPv6 header, then type, code, checksum and the 4-byte MTU / pointer
    if q + 48 > min(len(k), len(s)) or k[q] >> 4 != 6 or k[q + 6] != NEXTHDR_FRAGMENT:
        return None
    return q + 44 if k[q:q + 44] == s[q:q + 44] else None


def _icmpv6_checksum_ok(frame: bytes | bytearray, off: int) -> bool:
    """The ICMPv6 message after the IPv6 header at *off* sums to zero with its pseudo-header (RFC 4443 2.3), as
    the receiving host's ``icmpv6_rcv`` checks it (flowsim.kernel.stack.ip's ``_icmp_rcv``)."""
    msg = frame[off + 40:off + 40 + struct.unpack_from("!H", frame, off + 4)[0]]
    src, dst = int.from_bytes(frame[off + 8:off + 24], "big"), int.from_bytes(frame[off + 24:off + 40], "big")
    return l4_checksum(src, dst, IPPROTO_ICMPV6, msg) == 0


def random_field_offsets(kernel: bytes, sim: bytes, linktype: int) -> set[int]:
    """The byte offsets of the tunnel headers' kernel-random fields (:func:`kernel_random_fields`' walk, without
    its checks): outer IPv4 ID and header checksum, outer IPv6 flow label, an IPv6 fragment's identification
    (also one an ICMPv6 error quotes, with the checksum over it), from the outermost header inwards.

    A frame that differs elsewhere too is reported at its first differing byte outside these: a changed
    outer TTL then points at the TTL, not at the random ID before it (and the checksum it changes).
    """
    out: set[int] = set()
    off = _l3_offset(sim, linktype)
    while off + 20 <= min(len(kernel), len(sim)) and kernel[off] >> 4 == sim[off] >> 4:
        if kernel[off] >> 4 == 4:
            ihl = (kernel[off] & 15) * 4
            if kernel[off + 9] not in (4, 41) or kernel[off + 9] != sim[off + 9] or ihl < 20:
                break
            out.update((off + 4, off + 5, off + 10, off + 11))
            off += ihl
        elif kernel[off] >> 4 == 6 and off + 40 <= min(len(kernel), len(sim)):
            nh, nxt = kernel[off + 6], off + 40
            if nh == 58 and nxt < len(kernel) and kernel[nxt] < 128:  # an ICMPv6 error: the fragment it quotes
                ident = _quoted_fragment_ident(kernel, sim, off)
                if ident is not None:
                    out.update((*range(ident, ident + 4), nxt + 2, nxt + 3))
                break
            if nh == 60 and nxt + 8 <= len(kernel):
                nh, nxt = kernel[nxt], nxt + (kernel[nxt + 1] + 1) * 8
            if nh == NEXTHDR_FRAGMENT:
                out.update(range(nxt + 4, nxt + 8))
                break
            if nh not in (4, 41):
                break
            out.update((off + 1, off + 2, off + 3))
            off = nxt
        else:
            break
    return out


def first_real_difference(kernel: bytes, sim: bytes, linktype: int) -> int:
    """The first byte where the frames differ, kernel-random tunnel fields skipped (unless only they differ)."""
    skip = random_field_offsets(kernel, sim, linktype)
    return next((i for i, (x, y) in enumerate(zip(kernel, sim)) if x != y and i not in skip),
                first_difference(kernel, sim))


def _log_key(l3: bytes) -> bytes:
    """A packet as the log chain and a capture are paired: DSCP/ECN (and so the IPv4 header checksum) left out.

    A ``netdev`` ingress chain of the topology may rewrite DSCP (nft_flowtable.sh's ``ip dscp set cs3`` on
    veth0) after the packet tap and before prerouting logs the packet; the bytes themselves are compared on
    the egress devices, this only finds which captured frame the logged packet was.
    """
    b = bytearray(l3)
    if len(b) >= 20 and b[0] >> 4 == 4:
        b[1] = 0
        b[10:12] = b"\0\0"
    elif len(b) >= 40 and b[0] >> 4 == 6:
        b[0] &= 0xF0
        b[1] &= 0x0F
    return bytes(b)


def _verdict_class(text: str | None) -> str | None:
    if text is None:
        return None
    return "slowpath" if text.startswith("slowpath") else "fastpath"


def compare_frames(name: str, fplan: FramePlan, kf: KernelFrames) -> list[Fact]:
    """Per captured device and direction: count, bytes frame by frame, hook verdicts (all exact)."""
    rows: list[Fact] = []
    for err in kf.errors:
        rows.append(Fact(name, "guest", "capture", err, None, "", "error"))
    logged = {ns: collections.Counter(map(_log_key, v)) for ns, v in kf.nflog.items()}
    esp_keys = dict(fplan.esp_keys)
    for ns, dev in fplan.captured:
        for outbound in (False, True):
            subject = f"{ns}/{dev} {'out' if outbound else 'in'}"
            want = fplan.expected(ns, dev, outbound)
            pcap = kf.pcaps.get((ns, dev, outbound))
            if pcap is None or pcap.error:
                continue
            got, linktype = pcap.frames, pcap.linktype
            wanted = [sf.data for sf in want]
            cooked = cooked_to_packet(got, want) if linktype == LINKTYPE_LINUX_SLL else None
            if cooked is not None:
                (got, wanted), linktype = cooked, LINKTYPE_RAW
            rows.append(_row(name, subject, "frames", len(got), len(want)))
            diff = None
            randomised: collections.Counter = collections.Counter()
            masked = 0
            for i, (kb, sb) in enumerate(zip(got, wanted)):
                if kb != sb:
                    fields = (TCP_SEED,) if want[i].gso_size and tcp_checksum_seed(kb, sb, linktype) else \
                        kernel_random_fields(kb, sb, linktype, esp_keys)
                    if fields is None:
                        diff = i
                        break
                    randomised.update(fields)
                    masked += 1
            if diff is None and len(got) != len(want):
                diff = min(len(got), len(want))
            if diff is None and randomised:
                kind = "kernel-random" if all(f in KERNEL_RANDOM for f in randomised) else "kernel-set"
                text = f"{len(got) - masked} frames identical, {masked} equal but for {kind} fields"
                rows.append(Fact(name, subject, "bytes", text, f"{len(want)} frames", "exact", "known",
                                 "; ".join(f"{f} ({c} frames): {KERNEL_SET[f]}" for f, c in randomised.items())))
            elif diff is None:
                rows.append(_row(name, subject, "bytes", f"{len(got)} frames identical",
                                 f"{len(want)} frames identical"))
            else:
                k = got[diff] if diff < len(got) else None
                s = wanted[diff] if diff < len(wanted) else None
                at = first_real_difference(k, s, linktype) if k is not None and s is not None else None
                skipped = at is not None and k is not None and s is not None and at != first_difference(k, s)
                note = [f"first difference: frame {diff}" + (f", byte {at}" if at is not None else "")
                        + (" (kernel-random tunnel fields before it not counted)" if skipped else "")]
                data: bytes | None
                for who, data in (("kernel", k), ("flowsim", s)):
                    note.append(f"{who}: " + ("(no frame)" if data is None else summary(data, linktype)))
                    if data is not None:
                        note.append(hexdump(data, at))
                rows.append(Fact(name, subject, "bytes",
                                 f"frame {diff}: " + ("-" if k is None else summary(k, linktype)),
                                 f"frame {diff}: " + ("-" if s is None else summary(s, linktype)),
                                 "exact", "differs", "\n".join(note)))
            if outbound or not any(f.verdict for f in want):
                continue
            # each device its own copy: a packet received through stacked flowtable devices (wan, then wan.7,
            # then the PPPoE session pppoe-wan) meets every one of their hooks and is logged once, at prerouting
            pool = collections.Counter(logged.get(ns, ()))
            kv, sv = [], []
            for i, sf in enumerate(want):
                if sf.verdict is None:
                    continue
                if i < len(got):
                    l3 = _log_key(l3_bytes(got[i], linktype))
                    slow = pool[l3] > 0
                    if slow:
                        pool[l3] -= 1
                    kv.append((i, "slowpath" if slow else "fastpath"))
                else:
                    kv.append((i, "(no frame)"))
                sv.append((i, _verdict_class(sf.verdict), sf.verdict))
            bad = next(((i, k, t) for (i, k), (_, c, t) in zip(kv, sv) if k != c), None)
            ktext = _count_text(v for _, v in kv)
            stext = _count_text(c for _, c, _ in sv)
            if bad is None:
                rows.append(_row(name, subject, "flowtable verdicts", ktext, stext))
            else:
                i, k, t = bad
                rows.append(Fact(name, subject, "flowtable verdicts", ktext, stext, "exact", "differs",
                                 f"first difference: frame {i}: kernel {k}, flowsim {t}"))
    return rows


def _count_text(values) -> str:
    c = collections.Counter(values)
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"


def _row(scenario: str, subject: str, fact: str, kernel, sim) -> Fact:
    return Fact(scenario, subject, fact, kernel, sim, "exact", "agrees" if kernel == sim else "differs")


def render_frames_init(scenarios: list, fplans: list[FramePlan]) -> dict[str, bytes]:
    """``/init`` for ``--frames`` (the packaged template, the helpers, every scenario) and the files."""
    template = (Path(__file__).parent / "data" / "init.sh").read_text()
    body = FRAMES_HELPERS + "".join(render_frames_scenario(topo, plan, fp)
                                    for (topo, plan), fp in zip(scenarios, fplans))
    calls = "".join(f"scenario_{plan.index}; cleanup {plan.index}\n" for _, plan in scenarios)
    files = {"init": template.replace("@SCENARIOS@", body).replace("@RUN@", calls).encode()}
    for (topo, plan), fp in zip(scenarios, fplans):
        files.update(scenario_files(topo, plan))
        files.update(frames_files(fp, plan.index))
    return files


def scenario_id(plan: ScenarioPlan, sections: list[Section]) -> str:
    """The scenario's id in this boot (found by name, as :func:`flowsim.conform.observe.observe` does)."""
    return next((s.scenario for s in sections if s.kind == "begin" and s.text.strip() == plan.name),
                str(plan.index)) or str(plan.index)


def error_facts(name: str, errors: list[str]) -> list[Fact]:
    """The guest's set-up errors as rows (as :func:`flowsim.conform.compare.compare` reports them)."""
    return [Fact(name, "guest", "set-up", err.splitlines()[0] if err else "error", None, "", "error",
                 " | ".join(err.splitlines()[1:3])) for err in errors]
