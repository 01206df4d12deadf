"""The run loop: virtual clock, GC ticks, duration, captures, conservation, and the flowtable hooks in the loop."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import attrs
import pytest

from flowsim.config.topology import load_topology
from flowsim.errors import ConfigError
from flowsim.kernel.stack.core import Kernel
from flowsim.sim.simulation import Simulation
from flowsim.sim.traffic import TrafficSpec

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
ip = ipaddress.ip_address


def topo(name: str):
    return load_topology(TOPOLOGIES / f"{name}.toml")


def few(t, n=5):
    return [attrs.evolve(TrafficSpec.from_topology(x, i), packets=min(x.packets, n),
                         reply_packets=min(x.reply_packets, n)) for i, x in enumerate(t.traffic)]


def test_runs_are_deterministic(tmp_path):
    """The same topology, traffic and profile give byte-identical captures (ordered event queue)."""
    a, b = tmp_path / "a", tmp_path / "b"
    t = topo("bridge-vlan")
    Simulation(t, flowtables=False, pcap_dir=a, traffic=few(t)).run()
    t = topo("bridge-vlan")
    Simulation(t, flowtables=False, pcap_dir=b, traffic=few(t)).run()
    names = sorted(p.name for p in a.glob("*.pcap"))
    assert names == sorted(p.name for p in b.glob("*.pcap")) and names
    assert all((a / n).read_bytes() == (b / n).read_bytes() for n in names)


def test_one_pcap_per_namespace_and_device(tmp_path):
    """--pcap-dir: NETNS-DEVICE.pcap for every device a frame crossed, upper devices included."""
    t = topo("bridge-vlan")
    Simulation(t, flowtables=False, pcap_dir=tmp_path, traffic=few(t)).run()
    names = {p.name for p in tmp_path.glob("*.pcap")}
    assert {"ns1-eth0.pcap", "ns1-eth0.10.pcap", "nsr1-veth0.pcap", "nsr1-veth0.10.pcap", "nsr1-br0.pcap",
            "nsr1-veth1.pcap", "nsr2-veth0.pcap", "nsr2-veth1.pcap", "ns2-eth0.pcap"} <= names


def test_duration_cuts_the_run_and_keeps_packets_in_flight():
    """--duration shorter than the traffic: queued packets are in flight, and the books still add up."""
    sim = Simulation(topo("selftest"), flowtables=False).run(duration=0.0005)
    t = sim.kernel.ledger.totals()
    assert t["in_flight"] > 0 and t["injected"] == t["delivered"] + t["dropped"] + t["in_flight"]
    assert sim.end == 0.0005


def test_negative_duration_is_refused():
    """A negative duration is a configuration error naming the value."""
    with pytest.raises(ConfigError, match="duration"):
        Simulation(topo("selftest"), flowtables=False).run(duration=-1)


def test_conntrack_gc_reaps_unreplied_udp_after_30_seconds():
    """gc_worker every second: one-way UDP entries (30 s unreplied) are gone at 31 s; the IPIP one (generic, 600 s) stays."""
    for duration, left in ((29.0, [4, 17, 17]), (31.0, [4])):
        t = topo("stack-limit")
        sim = Simulation(t, flowtables=False, traffic=few(t)).run(duration=duration)
        assert sorted(ct.l4proto for ct in sim.kernel.netns["cpe"].conntrack.entries()) == left


def test_flowtable_gc_runs_every_second():
    """nf_flow_offload_work_gc on the virtual clock: an idle UDP flow is removed after its 30 s timeout (nf_flow_table_core.c)."""
    t = topo("pppoe-over-vlan")
    traffic = [attrs.evolve(TrafficSpec.from_topology(t.traffic[1], 1), packets=5)]
    sim = Simulation(t, traffic=traffic).run(duration=40.0)
    ft = sim.kernel.netns["cpe"].flowtables["ft"].report()
    assert ft["flows_created"] == 1 and ft["flows_removed"] == 1 and ft["flows"] == []


def test_flowtable_hooks_take_packets_off_the_slow_path():
    """With the flowtable, most selftest packets are stolen at nsr1's ingress; everything still arrives (as nft_flowtable.sh checks)."""
    sim = Simulation(topo("selftest")).run()
    k = sim.kernel
    ft = k.netns["nsr1"].flowtables["f1"].report()
    assert k.ledger.totals()["dropped"] == 0 and k.ledger.totals()["in_flight"] == 0
    assert ft["fastpath"] > 700 and ft["slowpath"] < 20
    acct = k.accounting[("tcp-12345", "original", "host")]
    assert acct["fastpath"] + acct["slowpath"] == 204  # one hook per packet: nsr1 veth0


def test_flowtables_off_skips_hooks_and_flow_add():
    """flowtables=False: no verdicts from the flowtable, `flow add` answers NFT_BREAK (no flow, no OFFLOAD)."""
    sim = Simulation(topo("selftest"), flowtables=False).run()
    ft = sim.kernel.netns["nsr1"].flowtables["f1"].report()
    assert ft["fastpath"] == ft["slowpath"] == 0 and ft["flows_created"] == 0
    assert not any(ct.status & (1 << 14) for ct in sim.kernel.netns["nsr1"].conntrack.entries())


def test_kernel_alone_delivers_to_a_bound_socket():
    """Without a simulation the kernel runs every step at once; a socket in the target netns gets the packet."""
    from flowsim.kernel.pkt import build_ipv4, udp_datagram

    class Sink:
        got = []

        def rx(self, kernel, st, info, skb):
            self.got.append((str(info.src), info.sport))

    k = Kernel(topo("selftest"), flowtables=False)
    a, b = ip("10.0.1.99"), ip("10.0.2.99")
    k.netns["ns2"].sockets[(17, b, 12345, a, 5000)] = Sink()
    tag = k.new_tag("x", "original", "udp")
    # selftest's forward chain only lets TCP to 12345 through: the UDP datagram is refused at nsr1
    k.send_l3("ns1", build_ipv4(a, b, 17, udp_datagram(a, b, 5000, 12345, b"hi")), tag)
    assert dict(k.ledger.dropped) == {"nft-drop": 1}
    k2 = Kernel(topo("stack-limit"), flowtables=False)
    c, s = ip("192.168.1.10"), ip("198.51.100.10")
    sink = Sink()
    k2.netns["server"].sockets[(17, s, 4500, c, 5000)] = sink
    k2.send_l3("client", build_ipv4(c, s, 17, udp_datagram(c, s, 5000, 4500, b"hi")), k2.new_tag("x", "original", "udp"))
    assert sink.got == [("192.168.1.10", 5000)] and k2.ledger.totals()["delivered"] == 1


def test_tracing_records_the_path_of_a_packet():
    """tracing=True: Kernel.trace keeps each step (device rx/xmit, hooks, decisions) for `flowsim trace`."""
    t = topo("ipip")
    sim = Simulation(t, flowtables=False, tracing=True, traffic=few(t, 1)[:1]).run()
    lines = [str(r) for r in sim.kernel.traces if r.packet.endswith("#1:syn")]
    text = "\n".join(lines)
    assert "nsr1 tun0 xmit" in text and "encapsulated" in text and "decapsulated" in text
    assert "ns2 eth0" in text and "delivered" in text


@pytest.mark.parametrize("netns,dev,what", [
    ("ns", "link", "falls outside"),  # ns-link.pcap: a symlink out of the directory
    ("a/../../b", "eth0", "plain file name"),
    ("/etc", "passwd", "plain file name"),
    ("", "eth0", "plain file name"),
    ("ns", "", "plain file name"),
    ("ns", "a\0b", "plain file name"),
])
def test_pcap_paths_never_leave_the_directory(tmp_path, netns, dev, what):
    """pcap_file refuses names that are not a plain file name inside --pcap-dir (defence behind the loader's checks)."""
    from flowsim.sim.simulation import pcap_file
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "ns-link.pcap").symlink_to(tmp_path / "elsewhere.pcap")
    tmp_path = tmp_path / "out"
    with pytest.raises(ConfigError, match=what):
        pcap_file(tmp_path, netns, dev)
    assert pcap_file(tmp_path, "ns1", "eth0.10") == tmp_path / "ns1-eth0.10.pcap"
