"""ICMP errors the router generates for a NATed packet reach its sender translated (issue 14, item 2).

``icmp_send`` / ``icmp6_send`` (net/ipv4/icmp.c, net/ipv6/icmp.c) build the error with ``icmp_glue_bits`` /
``icmpv6_getfrag``, which call ``nf_ct_attach``: ``nf_conntrack_attach`` (nf_conntrack_core.c) gives the error
the offender's entry, RELATED_REPLY for an ORIGINAL offender.  At OUTPUT and POSTROUTING ``nf_nat_ipv4_fn`` /
``nf_nat_ipv6_fn`` hand a RELATED ICMP error to ``nf_nat_icmp_reply_translation`` /
``nf_nat_icmpv6_reply_translation`` (nf_nat_proto.c): the quote gets the original destination back and the outer
source becomes the address the sender talked to.  Without it the quote is half NATed (DNAT done in PREROUTING,
the masquerade not yet), the sender's socket cannot match it, and path MTU discovery never ends.

The scenarios are nft_flowtable.sh's ``test_tcp_forwarding_nat`` with PMTU discovery on: the originator (MTU
9000) sends 8000-byte segments over nsr1's 1500-byte link.
"""

from __future__ import annotations

import attrs
import pytest
from scapy.layers.inet import ICMP, IP, IPerror, TCPerror
from scapy.layers.inet6 import IPerror6, ICMPv6PacketTooBig, ICMPv6TimeExceeded, IPv6
from scapy.layers.l2 import Ether

from flowsim.kernel.headers import internet_checksum
from flowsim.kernel.conntrack import IP_CT_ESTABLISHED, IP_CT_ESTABLISHED_REPLY, IP_CT_RELATED, IP_CT_RELATED_REPLY
from flowsim.kernel.stack.nf import NfCtx, nf_ct_attach
from flowsim.config.topology import load_topology, load_topology_text
from flowsim.profiles import get_profile
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation
from tests.test_scenarios import TOPO, run

# nsr1 of selftest-nat.toml with the same DNAT and masquerade for IPv6, and a stream to the IPv6 service address
NAT6 = '''
table ip6 nat {
   chain prerouting {
      type nat hook prerouting priority 0; policy accept;
      meta iif "veth0" ip6 daddr dead:6::6 tcp dport 1666 counter dnat ip6 to [dead:2::99]:12345
   }
   chain postrouting {
      type nat hook postrouting priority 0; policy accept;
      meta oifname "veth1" counter masquerade
   }
}
'''
TRAFFIC6 = '''
[[traffic]]
name = "tcp6-dnat-1666"
proto = "tcp"
from = "ns1"
to = "dead:6::6"
dport = 1666
packets = 200
size = 1400
reply_packets = 200
'''


def _nat46_text() -> str:
    text = (TOPO / "selftest-nat.toml").read_text()
    return text.replace("'''\n\n[netns.nsr2]", NAT6 + "'''\n\n[netns.nsr2]", 1) + TRAFFIC6


def _big(size=8000, **more):
    return lambda specs: [attrs.evolve(s, size=size, **more) for s in specs]


def _simulate(topology, profile, specs, text=None):
    """Run with a capture of ns1's eth0: (simulation, report, the ICMP errors ns1 received, decoded by scapy)."""
    topo = load_topology_text(text, str(TOPO / topology)) if text else load_topology(TOPO / topology)
    sim = Simulation(topo, get_profile(profile))
    sim = Simulation(topo, get_profile(profile), traffic=specs(sim.specs))
    frames = []
    sim.kernel.capture = lambda ns, d, f: frames.append(f) if (ns, d) == ("ns1", "eth0") else None
    sim.run()
    decoded = [Ether(f) for f in frames]
    errors = [p for p in decoded if (ICMP in p and IPerror in p and p[IP].dst == "10.0.1.99") or
              (IPerror6 in p and p[IPv6].dst == "dead:1::99")]
    return sim, build_report(sim), errors


def _checksums_valid(p) -> bool:
    """Rebuild the decoded frame with every checksum recomputed by scapy: the bytes must not move."""
    again = p.copy()
    for layer in (IP, ICMP, IPerror, TCPerror, ICMPv6PacketTooBig, ICMPv6TimeExceeded):
        if layer in again:
            field = "cksum" if layer in (ICMPv6PacketTooBig, ICMPv6TimeExceeded) else "chksum"
            if layer is not TCPerror:  # a truncated quote's TCP checksum is the sender's, not recomputable
                delattr(again[layer], field)
    return bytes(Ether(bytes(again))) == bytes(p)


@pytest.mark.parametrize("name,vip,client,outer,quote", [
    ("tcp-dnat-1666", "10.6.6.6", "10.0.1.99", IP, IPerror),
    ("tcp6-dnat-1666", "dead:6::6", "dead:1::99", IPv6, IPerror6),
])
def test_dnat_pmtu_error_is_translated_and_sender_learns(name, vip, client, outer, quote):
    """A DNATed segment over the link MTU: the Frag Needed / Packet Too Big comes from the service address and
    quotes the sender's own packet, checksums valid (icmp_send → nf_ct_attach → nf_nat_icmp_reply_translation);
    the sender lowers its PMTU to 1500 and the transfer completes: the segments lost in flight are resent cut to
    the new MSS (tcp_v4_mtu_reduced / tcp_v6_mtu_reduced → tcp_simple_retransmit) and every byte arrives.  Each
    8000-byte write leaves cut at the MSS the server announced (1960 for its 2000-byte MTU: rx_opt.mss_clamp in
    tcp_sync_mss), four 2000-byte segments and a short one; the initial window (TCP_INIT_CWND, ten segments)
    lets two writes out before the first error is back: 8 over the 1500-byte link."""
    sim, r, errors = _simulate("selftest-nat.toml", "linux-7.1.5", text=_nat46_text(), specs=lambda ss: [
        attrs.evolve(s, size=8000, reply_size=1400) for s in ss if s.name == name])
    (conv,) = sim.conversations
    # IPv4: Linux's ACKs and options, so the server's MSS option (1960) cuts each write; the IPv6 table has none
    lost = 8 if outer is IP else 4
    assert len(errors) == lost and conv.client.pmtu == 1500
    for p in errors:
        o, q = p[outer], p[quote]
        assert (o.src, o.dst) == (vip, client)
        assert (q.src, q.dst, p[TCPerror].sport, p[TCPerror].dport) == (client, vip, conv.client.lport, 1666)
        assert (p[ICMP].nexthopmtu if outer is IP else p[ICMPv6PacketTooBig].mtu) == 1500
        assert _checksums_valid(p)
    (t,) = r["traffic"]
    o = t["directions"]["original"]
    assert o["sent"] - o["delivered"] == lost and o["delivered"] == conv.server.received
    # IPv4's server: its 1400-byte writes queued behind a full window merge into two 2000-byte segments
    # (tcp_sendmsg_locked appends to the unsent tail), lost at nsr2 in turn; IPv6 has no ACK clock here
    rp = t["directions"]["reply"]
    assert rp["sent"] - rp["delivered"] == (2 if outer is IP else 0)
    assert r["drops"] == {"frag-needed" if outer is IP else "pkt-too-big": lost + rp["sent"] - rp["delivered"]}
    if outer is IP:
        # 200 writes of 7960 bytes: the first two as five segments each (four of 1948 lost, each resent as two
        # of at most 1448), the other 198 cut at 1448: six per write alone, fewer where writes queued behind
        # a full window merged
        rest = conv.client.sent - 2 * 5 - 8 * 2
        assert -(-198 * 7960 // 1448) <= rest <= 198 * 6
    else:  # 200 writes of 7940 bytes, after the error cut to 1440-byte segments: 4 left whole (resent as 6)
        assert conv.client.sent == 4 + 200 * 6
    assert conv.server.rcv_nxt == conv.client.snd_nxt and conv.client.state == "time_wait"  # every byte, FIN


# topology, profile, traffic, (sent, delivered) per direction, drops: the selftest's NAT scenarios with PMTU
# discovery, the originator's 8000-byte segments; the reply side learns from nsr2 (no NAT there).
SELFTEST = [
    # each end's segments at most the MSS the other announced (tcp_sync_mss: rx_opt.mss_clamp), 1960 for ns2's
    # 2000-byte MTU: the client's 8000-byte writes leave as 2000-byte segments until it learns 1500
    ("selftest-nat.toml", "linux-7.1.5", "tcp-dnat-1666", (1775, 1767), (1773, 1765), (1765, 10)),
    ("selftest-nat.toml", "linux-7.1.5", "tcp-masquerade", (1775, 1767), (1773, 1765), (1765, 10)),
    ("selftest-nat.toml", "linux-6.12", "tcp-dnat-1666", (1775, 1767), (1773, 1765), (1763, 12)),
    ("bridge-vlan.toml", "linux-7.1.5", "tcp-dnat-1666", (1208, 1204), (1230, 1214), (1202, 6)),
    ("bridge-vlan.toml", "linux-6.12", "tcp-dnat-1666", (1208, 1204), (1230, 1214), (1200, 8)),
]


@pytest.mark.parametrize("topology,profile,name,orig,reply,fast_slow", SELFTEST)
def test_selftest_dnat_scenarios_complete_with_pmtu_discovery(topology, profile, name, orig, reply, fast_slow):
    """nft_flowtable.sh's DNAT, masquerade and bridge(+VLAN) DNAT with PMTU discovery: both ends learn 1500 from
    translated errors and every later segment arrives, the flowtable taking over (nf_flow_offload_ip_hook)."""
    sim, r = run(topology, profile, specs=_big())
    t = next(t for t in r["traffic"] if t["name"] == name)
    o, rp = t["directions"]["original"], t["directions"]["reply"]
    assert (o["sent"], o["delivered"]) == orig and (rp["sent"], rp["delivered"]) == reply
    assert (o["fastpath"], o["slowpath"]) == fast_slow
    conv = next(c for c in sim.conversations if c.spec.name == name)
    assert conv.client.pmtu == 1500 and conv.server.pmtu == 1500
    assert conv.client.state == "time_wait"  # the FIN exchange went through: the transfer completed
    assert conv.server.rcv_nxt == conv.client.snd_nxt and conv.client.rcv_nxt == conv.server.snd_nxt


def test_time_exceeded_for_dnated_packet_is_translated():
    """TTL 1 towards the service address: ip_forward's Time Exceeded, attached to the still unconfirmed entry
    (RELATED_REPLY, which __nf_conntrack_confirm leaves unconfirmed), quotes 10.6.6.6:1666 as sent: 3 errors
    (without the ACK clock: a Linux sender would retransmit the first segment on its RTO, tcp_test_sender)."""
    sim, r, errors = _simulate("selftest-nat.toml", "linux-7.1.5", specs=lambda ss: [
        attrs.evolve(s, ttl=1, handshake=False, close=None, packets=3, reply_packets=0, acks="none")
        for s in ss if s.name == "tcp-dnat-1666"])
    assert len(errors) == 3
    for p in errors:
        assert (p[ICMP].type, p[ICMP].code) == (11, 0)
        assert (p[IP].src, p[IPerror].dst, p[TCPerror].dport) == ("10.6.6.6", "10.6.6.6", 1666)
        assert _checksums_valid(p)
    assert r["drops"] == {"ttl-exceeded-forward": 3}
    assert len(sim.kernel.netns["nsr1"].conntrack) == 0  # never confirmed: no entry left in the table


@pytest.mark.parametrize("ctinfo,dir,attached", [
    (IP_CT_ESTABLISHED, 0, (1, IP_CT_RELATED_REPLY)),
    (IP_CT_ESTABLISHED_REPLY, 1, (0, IP_CT_RELATED)),
])
def test_nf_ct_attach_reverses_the_direction(ctinfo, dir, attached):
    """nf_conntrack_attach: the error travels against its offender, RELATED_REPLY for ORIGINAL, RELATED for REPLY."""
    ct = object()
    got = nf_ct_attach(NfCtx(ct, dir, "established", ctinfo))
    assert (got.ct, got.dir, got.ctinfo, got.state) == (ct, *attached, "related")


def test_nf_ct_attach_without_entry_attaches_nothing():
    """nf_ct_attach checks skb_nfct first: an untracked offender's error is tracked from its quote at OUTPUT."""
    assert nf_ct_attach(NfCtx()) == NfCtx() and nf_ct_attach(None) == NfCtx()


def _ipip_masq_text(masquerade: bool = True) -> str:
    """ipip.toml with nsr1 masquerading into tun0 and a 1300-byte route to the tunnel's remote end: the tunnel
    device (MTU 1480) passes ip_forward's check, its xmit (tnl_update_pmtu: 1300 - 20) refuses."""
    text = (TOPO / "ipip.toml").read_text()
    text = text.replace("ip route change default via 192.168.100.2\n",
                        "ip route change default via 192.168.100.2\n"
                        "ip route add 192.168.10.2/32 dev veth1 mtu 1300\n", 1)
    if masquerade:
        text = text.replace("   chain forward {\n", "   chain postrouting {\n"
                            "      type nat hook postrouting priority 100; policy accept;\n"
                            "      oifname \"tun0\" masquerade\n   }\n\n   chain forward {\n", 1)
    return text


@pytest.mark.parametrize("masquerade", [True, False])
def test_tunnel_xmit_error_for_a_masqueraded_packet_reaches_the_sender(masquerade):
    """tnl_update_pmtu (net/ipv4/ip_tunnel.c) refuses a DF packet over the tunnel's path MTU with
    icmp_ndo_send, after POSTROUTING masqueraded it: the quote's source is put back to the entry's original
    source (ct->tuplehash[dir].tuple.src) and the entry attached, so the error goes to ns1, which learns the
    path MTU (1280) and completes the transfer; without NAT it is a plain icmp_send to the same sender.  The error
    comes from nsr1's address towards ns1 (before icmp_ndo_send it went to the masquerade address, nsr1's own,
    and came from there); nf_nat_icmp_reply_translation leaves a masquerade-only entry's RELATED_REPLY error
    alone (IPS_DST_NAT not set), so the quote keeps the header checksum of the masqueraded header, as the
    kernel's does (icmp_ndo_send rewrites saddr only)."""
    sim, r, errors = _simulate("ipip.toml", "linux-7.2", text=_ipip_masq_text(masquerade), specs=lambda ss: [
        attrs.evolve(s, size=1400, packets=20, reply_packets=0) for s in ss if s.name == "tcp-12345"])
    (conv,) = sim.conversations
    assert errors and all(p[IP].dst == "10.0.1.99" and p[IPerror].src == "10.0.1.99" for p in errors)
    assert all(p[ICMP].type == 3 and p[ICMP].code == 4 and p[ICMP].nexthopmtu == 1280 for p in errors)
    assert conv.client.pmtu == 1280 and all(p[IP].src == "10.0.1.1" for p in errors)
    quote_ok = [internet_checksum(bytes(p[IPerror])[:20]) == 0 for p in errors]
    assert quote_ok == [not masquerade] * len(errors)
    assert r["drops"] == {"frag-needed": len(errors)}
    assert conv.server.rcv_nxt == conv.client.snd_nxt and conv.client.state == "time_wait"
    masq = [e for e in sim.kernel.netns["nsr1"].conntrack.entries() if e.original.dport == 12345]
    assert bool(masq[0].reply.dst != masq[0].original.src) == masquerade  # the reply goes to nsr1's tun0 address
