"""FLOW_OFFLOAD_XMIT_DIRECT through a bridge port that is a VLAN device (bridge-vlan.toml: br0's port
veth0.10 on veth0), before and after the 6.19 transmit rework.

Up to 6.18 ``nf_flow_queue_xmit`` (net/netfilter/nf_flow_table_ip.c) sends on ``tuple.out.ifidx``, which
``nft_dev_path_info`` set to the path's first VLAN device (``info->outdev``), and pushes nothing: veth0.10's
own xmit tags the frame (``out.hw_ifidx``, the real device, served hardware offload only).  From 6.19 the
flow transmits on the real device and ``nf_flow_encap_push`` adds the tag.  The wire (veth0) is the same;
a capture on veth0.10 sees the fast-pathed replies only on the older kernels — Debian 6.12 in qemu
showed 5 frames there in ``flowsim conform --frames`` where the model had sent 2.
"""

from __future__ import annotations

from pathlib import Path

from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Dot1Q
from scapy.utils import rdpcap

from flowsim.profiles import get_profile
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation
from tests.test_sim import few, topo


def _replies(pcap: Path) -> list:
    """The TCP segments towards ns1 (10.0.1.99) in a capture, in order."""
    return [p for p in rdpcap(str(pcap)) if IP in p and TCP in p and p[IP].dst == "10.0.1.99"]


def _run(profile: str, out: Path) -> Simulation:
    t = topo("bridge-vlan")
    return Simulation(t, get_profile(profile), pcap_dir=out, traffic=few(t)).run()


def test_direct_xmit_passes_the_vlan_port_up_to_6_18_and_pushes_the_tag_after(tmp_path):
    old, new = tmp_path / "6.12", tmp_path / "7.2"
    a, b = _run("linux-6.12", old), _run("linux-7.2", new)
    for sim in (a, b):   # fast-pathed replies, all delivered
        reply = build_report(sim)["traffic"][0]["directions"]["reply"]
        assert reply["fastpath"] > 0 and reply["delivered"] == reply["sent"]
    wire_old, wire_new = _replies(old / "nsr1-veth0.pcap"), _replies(new / "nsr1-veth0.pcap")
    assert [bytes(p) for p in wire_old] == [bytes(p) for p in wire_new]         # the same frames on the wire
    assert all(p.haslayer(Dot1Q) and p[Dot1Q].vlan == 10 for p in wire_old)
    port_old, port_new = _replies(old / "nsr1-veth0.10.pcap"), _replies(new / "nsr1-veth0.10.pcap")
    assert len(port_old) == len(wire_old)                                      # every reply through veth0.10
    assert not any(p.haslayer(Dot1Q) for p in port_old)                        # untagged above the VLAN device
    assert 0 < len(port_new) < len(wire_new)                                   # the fast path skips veth0.10
