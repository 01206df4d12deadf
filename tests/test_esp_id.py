"""The IPv4 ID of an ESP tunnel-mode outer header, as the kernel chooses it.

``xfrm4_prepare_output`` → ``xfrm4_tunnel_encap_add`` (net/xfrm/xfrm_output.c) copies DF from the inner header
(``XFRM_MODE_SKB_CB(skb)->frag_off & htons(IP_DF)``) and calls ``ip_select_ident(net, skb, NULL)``; with no socket,
``ip_select_ident_segs`` (include/net/ip.h) writes ``iph->id = 0`` when DF is set and ``skb->ignore_df`` is not,
else ``__ip_select_ident`` (a hashed counter; a per-namespace counter in flowsim).  Debian 7.2.13 on
ipsec-tunnel.toml (nsr1/veth1 in, frame 0, bytes 18-19) writes 0 where the model wrote 1.

The other headers flowsim builds without a socket keep their counter: ipip's outer header (``iptunnel_xmit`` calls
``__ip_select_ident`` whatever DF says) and ICMP errors (no DF: ``__ip_select_ident``).
"""

from __future__ import annotations

from pathlib import Path

from scapy.layers.inet import IP
from scapy.layers.l2 import Ether

from flowsim.config.topology import load_topology
from flowsim.sim.simulation import Simulation

FILE = Path(__file__).resolve().parent.parent / "topologies" / "ipsec-tunnel.toml"


def _esp_on_the_link():
    sim = Simulation(load_topology(FILE))
    wire = []
    orig = sim.kernel.receive_frame

    def receive_frame(dev, frame, tag, zeros=0, *args):
        if (dev.netns, dev.name) in (("nsr1", "veth1"), ("nsr2", "veth0")):
            wire.append(Ether(frame + bytes(zeros)))  # the frame and its zero tail
        orig(dev, frame, tag, zeros, *args)

    sim.kernel.receive_frame = receive_frame
    sim.run(None)
    return [p[IP] for p in wire if IP in p and p[IP].proto == 50]


def test_esp_tunnel_outer_header_with_df_has_id_zero():
    """ip_select_ident_segs(net, skb, NULL): DF, no socket, no ignore_df → ID 0 on every ESP outer header."""
    esp = _esp_on_the_link()
    assert len(esp) > 400
    assert all(ip.flags.DF for ip in esp)
    assert {ip.id for ip in esp} == {0}
