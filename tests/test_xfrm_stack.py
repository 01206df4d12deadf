"""IPsec in topologies: ip xfrm lines, ESP in the slow path, the fast path's XFRM xmit."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.ipsec import ESP, SecurityAssociation
from scapy.layers.l2 import Ether

from flowsim.config.topology import load_topology, load_topology_text
from flowsim.errors import TopologyError
from flowsim.kernel import esp
from flowsim.kernel.flowtable.path import XmitType
from flowsim.kernel.stack.xfrm import XfrmRoute, esp4_get_mtu
from flowsim.profiles import get_profile
from flowsim.sim.simulation import Simulation

TOPO = Path(__file__).resolve().parent.parent / "topologies"
FILE = TOPO / "ipsec-tunnel.toml"
KEY_OUT = bytes.fromhex("fedcba9876543210fedcba9876543210a0a1a2a3")  # spi 0x1001, nsr1 -> nsr2
KEY_IN = bytes.fromhex("0123456789abcdef0123456789abcdef01020304")  # spi 0x1002, nsr2 -> nsr1
A1, A2 = "192.168.10.1", "192.168.10.2"


def _run(text: str | None = None, profile: str = "linux-7.1.5"):
    topo = load_topology_text(text, str(FILE)) if text else load_topology(FILE)
    sim = Simulation(topo, get_profile(profile))
    wire = []
    kernel = sim.kernel
    orig = kernel.receive_frame

    def receive_frame(dev, frame, tag, zeros=0, *args):
        if (dev.netns, dev.name) in (("nsr1", "veth1"), ("nsr2", "veth0")):
            wire.append((dev.netns, frame + bytes(zeros)))  # the frame and its zero tail
        orig(dev, frame, tag, zeros, *args)

    kernel.receive_frame = receive_frame
    sim.run(None)
    return sim, wire


@pytest.fixture(scope="module")
def ran():
    return _run()


def _ft(sim):
    return sim.kernel.netns["nsr1"].flowtables["f1"]


def _ip_frames(wire):
    out = []
    for netns, frame in wire:
        pkt = Ether(frame)
        if IP in pkt:
            out.append((netns, pkt[IP]))
    return out


def test_ipsec_tunnel_delivers_everything(ran):
    """IPsec tunnel topology: the transfer through the ESP tunnel completes; conservation holds, nothing is dropped."""
    sim, _wire = ran
    sim.check()
    t = sim.kernel.ledger.totals()
    assert t["injected"] == t["delivered"] > 400 and t["dropped"] == 0 and t["in_flight"] == 0
    conv = sim.conversations[0]
    assert conv.client.received >= 200 and conv.server.received >= 200


def test_frames_between_routers_are_esp(ran):
    """IPsec tunnel topology: every IPv4 frame on the nsr1-nsr2 link is ESP between the SA ends; scapy decodes the SPIs."""
    _sim, wire = ran
    frames = _ip_frames(wire)
    assert len(frames) > 400
    for netns, ip in frames:
        assert ip.proto == 50 and ESP in ip
        if netns == "nsr2":  # sent by nsr1
            assert (ip.src, ip.dst, ip[ESP].spi) == (A1, A2, 0x1001)
        else:
            assert (ip.src, ip.dst, ip[ESP].spi) == (A2, A1, 0x1002)
    seqs = [ip[ESP].seq for netns, ip in frames if netns == "nsr2"]
    assert seqs == list(range(1, len(seqs) + 1))  # one sequence number per packet, in order


def test_esp_decrypts_to_the_inner_packets(ran):
    """IPsec tunnel topology: scapy's AES-GCM SA with the state's key opens every ESP frame; the inner packets are the TCP flow."""
    _sim, wire = ran
    sas = {0x1001: SecurityAssociation(ESP, spi=0x1001, crypt_algo="AES-GCM", crypt_key=KEY_OUT,
                                       tunnel_header=IP(src=A1, dst=A2)),
           0x1002: SecurityAssociation(ESP, spi=0x1002, crypt_algo="AES-GCM", crypt_key=KEY_IN,
                                       tunnel_header=IP(src=A2, dst=A1))}
    inner = [sas[ip[ESP].spi].decrypt(ip) for _netns, ip in _ip_frames(wire)]
    fwd = [p for p in inner if p.src == "10.0.1.99"]
    back = [p for p in inner if p.src == "10.0.2.99"]
    assert all(p.dst == "10.0.2.99" and p[TCP].dport == 12345 for p in fwd)
    assert all(p.dst == "10.0.1.99" and p[TCP].sport == 12345 for p in back)
    assert len(fwd) >= 200 and len(back) >= 200
    assert sum(len(p[TCP].payload) for p in fwd) >= 200 * 1000


def test_flowsim_esp_receiver_agrees(ran):
    """IPsec tunnel topology: flowsim.kernel.esp's esp_input with the state's key recovers the same inner IPv4 packets."""
    _sim, wire = ran
    state = esp.XfrmState(spi=0x1001, key=KEY_OUT, mode="tunnel", tunnel=(A1, A2))
    n = 0
    for netns, frame in wire:
        if netns != "nsr2" or frame[12:14] != b"\x08\x00":
            continue
        plain, nexthdr = esp.esp_input(state, frame[14 + 20:])
        assert nexthdr == 4 and plain[12:16] == bytes([10, 0, 1, 99]) and plain[16:20] == bytes([10, 0, 2, 99])
        n += 1
    assert n >= 200


def test_flow_tuple_into_tunnel_is_xfrm(ran):
    """nft_flow_route / nft_dev_forward_path: the direction whose route has an xfrm bundle (into the tunnel) is XFRM; the other is NEIGH."""
    sim, _wire = ran
    ft = _ft(sim)
    flows = list(ft.flows.values())
    assert len(flows) == 1
    orig, reply = flows[0].tuplehash
    assert orig.xmit_type == XmitType.XFRM and reply.xmit_type == XmitType.NEIGH
    assert isinstance(orig.dst, XfrmRoute) and orig.dst.sa.spi == 0x1001 and orig.dst.dev == "veth1"
    assert orig.mtu == esp4_get_mtu(orig.dst.sa, 1500) == 1446  # xfrm_state_mtu of the bundle


def test_forward_chain_sees_only_first_packets(ran):
    """check_counters: routed_orig / routed_repl count only the slow-path packets, far fewer than the transfer."""
    sim, _wire = ran
    nft = sim.kernel.netns["nsr1"].nft
    orig, repl = nft.counter("routed_orig"), nft.counter("routed_repl")
    assert 1 <= orig.packets <= 3 and repl.packets <= 3
    assert orig.bytes + repl.bytes < 1400


def test_fast_path_counts_xfrm_transmits(ran):
    """nf_flow_offload_ip_hook, FLOW_OFFLOAD_XMIT_XFRM (nf_flow_xmit_xfrm): packets sent through the XFRM tuple are STOLEN by the fast path and counted as fast path."""
    sim, wire = ran
    acc = sim.kernel.accounting[("tcp-12345", "original", "host")]
    esp_out = sum(1 for netns, ip in _ip_frames(wire) if netns == "nsr2")
    assert acc["fastpath"] >= 0.95 * esp_out and acc["slowpath"] <= 3
    reply = sim.kernel.accounting[("tcp-12345", "reply", "host")]
    assert reply["fastpath"] >= 195  # decrypted on veth1, then NEIGH out of veth0
    assert _ft(sim).fastpath == acc["fastpath"] + reply["fastpath"]


def test_xfrm_fast_path_trace():
    """nf_flow_xmit_xfrm: a traced packet of the flow leaves the flowtable through xfrm_output and is ESP-encapsulated."""
    topo = load_topology(FILE)
    sim = Simulation(topo, get_profile("linux-7.1.5"), tracing=True)
    sim.run(None)
    whats = [r.what for r in sim.kernel.traces if r.where == "flowtable @f1"]
    assert "fast path: xfrm_output on veth1" in whats
    assert any(r.what == "esp encapsulated" for r in sim.kernel.traces)
    assert any(r.what == "esp decrypted" for r in sim.kernel.traces)


def test_wrong_key_drops_as_decrypt_failed():
    """IPsec tunnel topology, negative: nsr2 with another key for SPI 0x1001 cannot open the ESP; drops are xfrm-decrypt-failed."""
    text = FILE.read_text()
    good = "0xfedcba9876543210fedcba9876543210a0a1a2a3 128 sel src 10.0.1.0/24 dst 10.0.2.0/24"
    at = text.index("[netns.nsr2]")
    bad = text[:at] + text[at:].replace(good, good.replace("fedcba9876543210", "0000000000000000"), 1)
    assert bad != text
    sim, _wire = _run(bad)
    sim.check()
    assert sim.kernel.ledger.dropped["xfrm-decrypt-failed"] >= 1
    assert sim.kernel.ledger.totals()["delivered"] == 0


def test_missing_fwd_policy_drops_decrypted_packets():
    """xfrm4_policy_check(FWD): a decrypted tunnel-mode packet with no fwd policy is dropped (XfrmInNoPols)."""
    text = FILE.read_text()
    line = ("ip xfrm policy add src 10.0.1.0/24 dst 10.0.2.0/24 dir fwd tmpl src 192.168.10.1 dst 192.168.10.2 "
            "proto esp reqid 1 mode tunnel priority 1 action allow\n")
    assert line in text
    sim, _wire = _run(text.replace(line, ""))
    sim.check()
    assert sim.kernel.ledger.dropped["xfrm-policy-check"] >= 1


def test_missing_out_state_drops_as_no_state():
    """xfrm_lookup: an out policy whose template has no state drops the forwarded packet (xfrm-no-state)."""
    text = FILE.read_text().replace("dir out tmpl src 192.168.10.1 dst 192.168.10.2 proto esp reqid 1",
                                    "dir out tmpl src 192.168.10.1 dst 192.168.10.2 proto esp reqid 9")
    sim, _wire = _run(text)
    sim.check()
    assert sim.kernel.ledger.dropped["xfrm-no-state"] >= 1


def test_xfrm_lines_parse_into_the_namespace():
    """The selftest's do_esp syntax fills ns.xfrm: two states and two policies per router."""
    topo = load_topology(FILE)
    db = topo.netns("nsr1").xfrm
    assert len(db.states) == 2 and len(db.policies) == 2
    out = db.policy("out", ipaddress.ip_address("10.0.1.99"), ipaddress.ip_address("10.0.2.99"), 6)
    assert out is not None and out.tmpls[0].mode == "tunnel" and out.tmpls[0].reqid == 1
    sa = db.state_for(out.tmpls[0], ipaddress.ip_address("10.0.1.99"), ipaddress.ip_address("10.0.2.99"))
    assert sa.spi == 0x1001 and sa.key == KEY_OUT and sa.mode == "tunnel"
    assert topo.netns("ns1").xfrm is None


@pytest.mark.parametrize("line, message", [
    ("ip xfrm state add src 192.168.10.1 dst 192.168.10.2 proto esp spi 7 mode tunnel enc aes 0x00 auth sha1 0x00",
     "not modelled"),
    ("ip xfrm state add src 192.168.10.1 dst 192.168.10.2 proto ah spi 7 aead 'rfc4106(gcm(aes))' 0x00 128",
     "not modelled"),
    ("ip xfrm state add src 192.168.10.1 dst 192.168.10.2 proto esp spi 7 aead 'rfc4106(gcm(aes))' 0x0011 128",
     "4-byte salt"),
    ("ip xfrm state add src 192.168.10.1 proto esp spi 7 aead 'rfc4106(gcm(aes))' "
     "0x0123456789abcdef0123456789abcdef01020304 128", "missing 'dst'"),
    ("ip xfrm policy add src 10.0.1.0/24 dst 10.0.2.0/24 dir sideways", "bad value"),
    ("ip xfrm policy add src 10.0.1.0/24 dst 10.0.2.0/24 tmpl src 192.168.10.1 dst 192.168.10.2 proto esp",
     "missing 'dir'"),
    ("ip xfrm polic add src 10.0.1.0/24 dst 10.0.2.0/24 dir out frobnicate", "unknown xfrm policy option"),
    ("ip xfrm bogus", "unknown ip xfrm object"),
])
def test_xfrm_line_errors(line, message):
    """Refused ip xfrm lines are TopologyErrors naming the file, line and command."""
    text = FILE.read_text().replace("ip route add default via 192.168.10.2\n",
                                    f"ip route add default via 192.168.10.2\n{line}\n", 1)
    with pytest.raises(TopologyError) as exc:
        load_topology_text(text, str(FILE))
    err = exc.value
    assert message in str(err)
    assert "ipsec-tunnel.toml" in str(err) and line.split()[2] in str(err)


def test_decrypted_packets_never_create_flows():
    """`flow add` refuses a packet with a sec_path."""

    from ftkit import add_flow, established_ct, setup
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    from flowsim.kernel.skb import skb_from_frame

    kernel, state = setup("selftest.toml", "nsr1", "linux-7.1.5")
    ct = established_ct(state, "10.0.1.99", "10.0.2.99", 40000, 12345)
    skb = skb_from_frame(bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP() / TCP()))
    skb.sec_path = ("sa",)
    assert not add_flow(kernel, state, "f1", ct, 1, "veth1", skb=skb)
    assert "flow-add-sec-path" in state.flowtables["f1"].ct_failures[ct.id]


@pytest.mark.parametrize("flowtables", [True, False])
def test_gso_skbs_are_segmented_before_esp(flowtables):
    """xfrm_output_gso: a GSO skb into the IPsec tunnel (fast path XFRM xmit or slow path) is segmented first,
    each segment its own ESP packet; every packet is delivered."""
    import attrs

    topo = load_topology(FILE)
    sim = Simulation(topo, get_profile("linux-7.1.5"), flowtables=flowtables)
    specs = [attrs.evolve(s, gso_size=1300, size=9000, packets=20) for s in sim.specs]
    sim = Simulation(topo, get_profile("linux-7.1.5"), flowtables=flowtables, traffic=specs)
    esp_sizes = []
    sim.kernel.capture = lambda netns, dev, f: esp_sizes.append(len(f)) if (netns, dev) == ("nsr1", "veth1") \
        and f[12:14] == b"\x08\x00" and f[23] == 50 else None
    sim.run()
    totals = sim.kernel.ledger.totals()
    assert totals["delivered"] == totals["injected"] and not totals["dropped"]
    # 9000-byte skbs with 1300-byte segments: 7 ESP packets each, none above the link MTU
    assert len(esp_sizes) >= 20 * 7 and max(esp_sizes) <= 1514


def test_tunnel_mode_decapsulation_keeps_the_frames_link_layer_header(tmp_path):
    """xfrm_input's tunnel mode (net/xfrm/xfrm_input.c) calls skb_mac_header_rebuild before the inner packet
    is received again on the same device: a capture there shows the ESP frame, then the inner packet with the
    same Ethernet addresses (as tcpdump does on Debian 6.1's ipsec-tunnel in qemu), not zeros."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.ipsec import ESP
    from scapy.layers.l2 import Ether
    from scapy.utils import rdpcap

    from flowsim.config.topology import load_topology
    from flowsim.sim.simulation import Simulation

    topo = load_topology(Path(__file__).resolve().parent.parent / "topologies" / "ipsec-tunnel.toml")
    Simulation(topo, pcap_dir=tmp_path).run()
    frames = rdpcap(str(tmp_path / "nsr2-veth0.pcap"))
    pairs = [(a, b) for a, b in zip(frames, frames[1:]) if ESP in a and TCP in b and ESP not in b]
    assert pairs
    for esp_frame, inner in pairs:
        assert (inner[Ether].src, inner[Ether].dst) == (esp_frame[Ether].src, esp_frame[Ether].dst)
        assert inner[Ether].type == 0x0800 and inner[IP].proto == 6
