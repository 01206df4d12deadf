"""The traffic generator's TCP as Linux plays it: the receiver's ACK clock (``acks = "linux"``) and the sender
after a path MTU drop.

Receiver (net/ipv4/tcp_input.c, tcp_output.c, tcp_timer.c): ``tcp_event_data_recv`` starts quick-ACK mode on the
first data segment (``tcp_incr_quickack``: ``rcv_wnd / (2 × rcv_mss)`` ACKs, at most ``TCP_MAX_QUICKACKS`` = 16);
``__tcp_ack_snd_check`` then acknowledges once more than one full segment is unacknowledged, otherwise
``tcp_send_delayed_ack`` arms the 40 ms timer (``TCP_DELACK_MIN``, the bound a sub-millisecond srtt gives);
``tcp_event_data_sent`` enters ping-pong mode when data answers data within ``ato``.

Sender: ``tcp_sendmsg_locked`` cuts each write into segments of the current MSS, which follows the path MTU;
after Fragmentation Needed / Packet Too Big, ``tcp_v4_mtu_reduced`` / ``tcp_v6_mtu_reduced`` →
``tcp_simple_retransmit`` resends at once every unacknowledged segment now over the MSS, cut to it.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from flowsim.config.topology import load_topology, load_topology_text
from flowsim.errors import TopologyError
from flowsim.profiles import get_profile
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation
from flowsim.sim.traffic import TCP_DELACK_MIN, TCP_MAX_QUICKACKS, AckState

ROOT = Path(__file__).resolve().parent.parent
FORWARD = ROOT / "topologies" / "conform-forward.toml"


def _run(path, name: str, profile: str = "linux-7.2", *, sequential: bool = False, **change):
    """Table *name* of *path* (a file, or a loaded topology) alone, *change* applied: (simulation, its one
    conversation, every packet an endpoint sent as (time, direction, kind))."""
    topo = load_topology(path) if isinstance(path, Path) else path
    sim = Simulation(topo, get_profile(profile))
    sim = Simulation(topo, get_profile(profile), sequential=sequential,
                     traffic=[attrs.evolve(s, **change) for s in sim.specs if s.name == name])
    sent: list[tuple[float, str, str]] = []
    real = sim.kernel.send_l3

    def spy(netns, pkt, tag, *rest):
        sent.append((sim.kernel.now, tag.direction, tag.kind))
        return real(netns, pkt, tag, *rest)

    sim.kernel.send_l3 = spy
    sim.run()
    (conv,) = sim.conversations
    return sim, conv, sent


def test_first_data_segments_are_acknowledged_one_by_one_then_every_second():
    """tcp_incr_quickack: 960-byte segments give 65 280 / (2 × 960) = 34 quick ACKs, capped at 16; afterwards
    __tcp_ack_snd_check answers every second segment (more than one rcv_mss unacknowledged)."""
    _sim, conv, sent = _run(FORWARD, "tcp4", acks="linux", reply_packets=0)
    server = [kind for _t, d, kind in sent if d == "reply"]
    assert server[0] == "synack" and server[-1] == "fin"
    assert conv.server.pure_acks == TCP_MAX_QUICKACKS + (100 - TCP_MAX_QUICKACKS) // 2 == 58
    assert conv.client.pure_acks == 0  # nothing to acknowledge but the handshake and the FIN
    assert conv.server.acks.quick == 0 and not conv.server.acks.pingpong


@pytest.mark.parametrize("rcv_mss,quick", [(536, 16), (1448, 16), (1940, 16), (4000, 8), (8948, 3), (40000, 2)])
def test_quick_acks_follow_the_segment_size(rcv_mss, quick):
    """tcp_incr_quickack: rcv_wnd / (2 × rcv_mss), at least 2, at most TCP_MAX_QUICKACKS; rcv_wnd is the initial
    window, 64 KiB rounded down to a multiple of the MSS (tcp_select_initial_window)."""
    state = AckState(rcv_mss=rcv_mss)
    state.incr_quickack()
    assert state.quick == quick


def test_a_lone_segment_waits_for_the_delayed_ack_timer():
    """Segments 0.1 s apart: after the quick ACKs each one is alone (not more than one rcv_mss unacknowledged),
    so tcp_send_delayed_ack arms the timer and tcp_delack_timer_handler sends the ACK 40 ms later."""
    _sim, conv, sent = _run(FORWARD, "tcp4", acks="linux", reply_packets=0, packets=20, rate=10)
    data = [t for t, d, k in sent if (d, k) == ("original", "data")]
    acks = [t for t, d, k in sent if (d, k) == ("reply", "ack")]
    assert len(acks) == 20
    # quick ACKs leave with their segment (the link's latency later); the last 4 wait TCP_DELACK_MIN
    for sent_at, acked_at in list(zip(data, acks))[TCP_MAX_QUICKACKS:]:
        assert acked_at - sent_at == pytest.approx(TCP_DELACK_MIN, abs=1e-3)
    for sent_at, acked_at in list(zip(data, acks))[:TCP_MAX_QUICKACKS]:
        assert acked_at - sent_at < 1e-3


def test_data_answering_data_ends_quick_acks():
    """tcp_event_data_sent: a server sending its own data within ato of receiving enters ping-pong mode,
    tcp_in_quickack_mode is false, and its data carries the ACKs: far fewer pure ACKs than one per segment."""
    _sim, conv, _sent = _run(FORWARD, "tcp4", acks="linux", reply_packets=100, reply_size=1000)
    alone = _run(FORWARD, "tcp4", acks="linux", reply_packets=0)[1]
    assert conv.server.acks.pingpong or conv.server.pure_acks < alone.server.pure_acks
    assert conv.server.pure_acks < 100 // 2


def test_no_pure_acks_without_the_model():
    """acks = "none" (the default): the table's reply_packets are the whole reply direction."""
    sim, conv, sent = _run(FORWARD, "tcp4")
    assert conv.client.pure_acks == conv.server.pure_acks == 0
    assert [k for _t, d, k in sent if d == "reply"].count("ack") == 0
    r = build_report(sim)
    assert r["traffic"][0]["directions"]["reply"]["sent"] == 20 + 2  # SYN/ACK, 20 data, FIN/ACK


@pytest.mark.parametrize("acks", ["none", "linux"])
def test_a_pmtu_drop_resends_the_lost_segments_cut_to_the_new_mss(acks):
    """selftest-base's IPv6 transfer: 2000-byte segments meet the 1500-byte link; the 4 segments each end has in
    flight are lost (pkt-too-big) and resent at once, each in two (tcp_simple_retransmit); every later write
    leaves as 1440 + 500 bytes (tcp_send_mss) — with Linux's ACK clock, writes queued behind the congestion
    window merge and leave as full 1428-byte segments (tcp_write_xmit) —; and every byte arrives (rcv_nxt
    reaches the sender's snd_nxt)."""
    sim, conv, _sent = _run(ROOT / "topologies" / "selftest-base.toml", "tcp6-12345", acks=acks)
    r = build_report(sim)
    assert r["drops"] == {"pkt-too-big": 8}
    assert conv.client.pmtu == conv.server.pmtu == 1500
    assert conv.client.writes == conv.server.writes == 50
    for end in (conv.client, conv.server):
        rest = end.sent - 4 - 4 * 2
        if acks == "none":
            assert rest == 46 * 2
        else:  # 46 writes of 1928 bytes (12 of the 2000 are the timestamp option), between merged and alone
            assert -(-46 * 1928 // 1428) <= rest < 46 * 2
    assert conv.server.rcv_nxt == conv.client.snd_nxt and conv.client.rcv_nxt == conv.server.snd_nxt
    assert conv.client.rtx_queue == [] or acks == "none"  # every segment acknowledged (tcp_clean_rtx_queue)


def _with_key(table: str, line: str):
    """conform-forward.toml with *line* added to the traffic table *table* (tcp4 or udp4), loaded as x.toml."""
    proto = table[:3]
    head = f'name = "{table}"\nproto = "{proto}"\n'
    return load_topology_text(FORWARD.read_text().replace(head, head + line + "\n"), "x.toml")


@pytest.mark.parametrize("key, good, bad, expected", [
    ("acks", '"linux"', '"delayed"', r"bad acks 'delayed'.*\"none\" or \"linux\""),
    ("reply_after", '"data"', "1", r"bad reply_after 1.*\"accept\" or \"data\""),
])
def test_tcp_only_keys_are_checked(key, good, bad, expected):
    """acks ("none" or "linux") and reply_after ("accept" or "data") are checked, and only for TCP; errors
    name the file and line; a good value reaches the table."""
    with pytest.raises(TopologyError, match=f"{key} is only for tcp"):
        _with_key("udp4", f"{key} = {good}")
    with pytest.raises(TopologyError, match=r"x\.toml:\d+: " + expected):
        _with_key("tcp4", f"{key} = {bad}")
    tcp4 = next(t for t in _with_key("tcp4", f"{key} = {good}").traffic if t.name == "tcp4")
    assert getattr(tcp4, key) == good.strip('"')


def test_reply_after_data_quick_acks_the_first_segment_before_replying():
    """reply_after = "data": the server's first packet after the SYN-ACK is the quick ACK of the client's first
    segment (tcp_event_data_recv → quick-ACK mode, __tcp_ack_snd_check), then its replies, as socat's server,
    whose writer forks after accept, sends them (ipip.toml on 7.2/7.3: the reply direction's slow-path bytes
    at the router are SYN-ACK + ACK, 112).  The default writes as soon as the handshake completes."""
    _sim, conv, sent = _run(FORWARD, "tcp4", acks="linux", reply_after="data")
    server = [kind for _t, d, kind in sent if d == "reply"]
    assert server[:3] == ["synack", "ack", "data"]
    first_data = next(t for t, d, kind in sent if d == "original" and kind == "data")
    first_reply = next(t for t, d, kind in sent if d == "reply" and kind == "data")
    assert first_reply >= first_data and conv.server.writes == 20
    _sim, conv, sent = _run(FORWARD, "tcp4", acks="linux")
    assert [kind for _t, d, kind in sent if d == "reply"][:2] == ["synack", "data"]
