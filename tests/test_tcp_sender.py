"""The traffic generator's TCP sender as Linux plays it (``acks = "linux"``): the congestion window and the
retransmission timer (net/ipv4/tcp_output.c ``tcp_write_xmit`` / ``tcp_cwnd_test``, tcp_input.c ``tcp_ack`` /
``tcp_slow_start`` / ``tcp_rtt_estimator``, tcp_timer.c ``tcp_retransmit_timer`` / ``tcp_write_timeout``).

The case that needs it: ip6ip6-over-pppoe on 7.2 and 7.3, where the receiver's ACKs are fast-pathed into the
PPPoE session with tun0's address as source MAC and the BRAS drops them (``pppoe_rcv`` → ``get_item``): a real
sender stops after its initial window and retransmits its oldest segment on the backed-off RTO.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flowsim.config.topology import load_topology_text
from flowsim.sim.simulation import SEQUENTIAL_STALLED_END, SEQUENTIAL_STILL
from flowsim.sim.traffic import (
    TCP_INFINITE_SSTHRESH, TCP_INIT_CWND, TCP_RETRIES2, TCP_RTO_MAX, TCP_RTO_MIN, rtx_segment,
)

from tests.test_tcp_acks import _run

ROOT = Path(__file__).resolve().parent.parent
PPPOE = ROOT / "topologies" / "ip6ip6-over-pppoe.toml"
FORWARD = ROOT / "topologies" / "conform-forward.toml"


@pytest.mark.parametrize("profile", ["linux-7.2", "linux-7.3"])
def test_black_holed_acks_stall_the_sender_after_its_initial_window(profile):
    """ip6ip6-over-pppoe: the download's ACKs never reach the server, so it sends TCP_INIT_CWND segments, then
    only the oldest again on each RTO (tcp_retransmit_timer), the RTO doubling from srtt + TCP_RTO_MIN up to
    TCP_RTO_MAX; the 16th expiry without an ACK kills the connection (tcp_write_timeout, no packet)."""
    _sim, conv, sent = _run(PPPOE, "tcp-download", profile, acks="linux", rate=1000.0)
    data = [(t, kind) for t, d, kind in sent if d == "original" and kind in ("data", "retransmit")]
    assert [k for _t, k in data] == ["data"] * TCP_INIT_CWND + ["retransmit"] * TCP_RETRIES2
    first = data[0][0]
    gaps = [b - a for (a, _), (b, _) in zip([(first, "")] + data[TCP_INIT_CWND:], data[TCP_INIT_CWND:])]
    rto = gaps[0]
    assert TCP_RTO_MIN < rto < TCP_RTO_MIN + 0.001  # a sub-millisecond srtt + max(2 srtt, TCP_RTO_MIN)
    assert gaps == pytest.approx([min(rto * 2 ** i, TCP_RTO_MAX) for i in range(TCP_RETRIES2)])
    assert conv.client.state == "closed" and conv.client.cc.cwnd == 1
    # every retransmission is the oldest segment: the client got the ten segments once and their copies
    assert conv.server.data_in == TCP_INIT_CWND * rtx_segment(conv.client.rtx_queue[0])[1]
    assert conv.server.received == 1 + TCP_INIT_CWND + TCP_RETRIES2 + 1  # the handshake's ACK first


def test_the_guest_stops_counting_a_stalled_table():
    """Sequential mode (the conformance guest's socat run): wait_bytes gives up SEQUENTIAL_STILL seconds after
    the last byte, the end snapshot comes SEQUENTIAL_STALLED_END later; no retransmission after it is
    simulated, so the run ends with the last one before it."""
    sim, conv, sent = _run(PPPOE, "tcp-download", "linux-7.2", sequential=True, acks="linux", rate=1000.0)
    rtx = [t for t, d, kind in sent if d == "original" and kind == "retransmit"]
    start = next(t for t, d, kind in sent if kind == "data")
    rto = rtx[0] - start
    stop = start + (TCP_INIT_CWND - 1) / 1000.0 + SEQUENTIAL_STILL + SEQUENTIAL_STALLED_END
    expected = [start + rto * (2 ** (i + 1) - 1) for i in range(TCP_RETRIES2)]
    assert rtx == pytest.approx([t for t in expected if t < stop], abs=1e-3)
    assert len(rtx) == 6  # 0.2, 0.6, 1.4, 3.0, 6.2, 12.6 s after the first segment
    assert sim.end == pytest.approx(rtx[-1], abs=1e-3) and conv.client.state == "established"


def test_back_to_back_writes_wait_for_the_window_and_slow_start_opens_it():
    """tcp_cwnd_test: at most TCP_INIT_CWND segments in flight before the first ACK; each ACK of new data grows
    the window by the segments it acknowledged (tcp_slow_start) while the sender is window-limited.  On 6.12
    the download's ACKs come back (the tunnel is not accelerated) over a path longer than ten writes."""
    _sim, conv, sent = _run(PPPOE, "tcp-download", "linux-6.12", acks="linux", reply_packets=0, packets=100,
                            rate=0)
    c = conv.client
    assert c.cc.cwnd > TCP_INIT_CWND and not c.cc.unsent and c.una == c.snd_nxt
    one_way = next(t for t, _d, k in sent if k == "synack")
    back = next(t for t, d, k in sent if d == "reply" and k == "ack") + one_way  # the first ACK arrives
    data = [t for t, d, k in sent if d == "original" and k == "data"]
    assert len(data) == 100 and sum(t < back for t in data) == TCP_INIT_CWND
    assert sum(t == pytest.approx(back) for t in data) == 2  # acked 1: cwnd 11, in flight 9
    # the segments cut from merged writes are full-MSS for the 1500-byte route, too big for the tunnel: PMTU
    # discovery (tcp_simple_retransmit) resends them, while the timer never fires (cwnd stays in slow start)
    assert c.pmtu < 1500 and c.cc.ssthresh == TCP_INFINITE_SSTHRESH


def test_a_stopped_retransmission_timer_does_not_move_the_clock():
    """Every segment acknowledged within microseconds: the timer armed at the first is cancelled
    (inet_csk_clear_xmit_timer), and the run ends with its last packet, not an RTO later."""
    sim, _conv, sent = _run(FORWARD, "tcp4", "linux-7.2", acks="linux", reply_packets=0, packets=5, rate=0)
    assert sim.end == pytest.approx(max(t for t, *_ in sent), abs=0.05) and sim.end < TCP_RTO_MIN


def test_the_first_retransmission_after_an_outage_recovers_the_transfer():
    """veth1 down from 20 ms to 500 ms: the segments in flight are lost.  The RTO fires 0.2 s after the oldest
    was sent (the link still down), backs off, and the retransmission at about 0.6 s passes; its ACK ends the
    backoff, and the lost segments go again in slow start from one segment (tcp_enter_loss: ssthresh cubic's
    717/1024 of the window), then the writes queued meanwhile, merged into full-MSS segments.  Every byte
    arrives and the connection closes."""
    text = FORWARD.read_text() + "".join(
        f'\n[[event]]\nat = {at}\nnetns = "r"\ncommand = "ip link set veth1 {state}"\n'
        for at, state in ((0.02, "down"), (0.5, "up")))
    _sim, conv, sent = _run(load_topology_text(text, "x.toml"), "tcp4", acks="linux", rate=1000.0,
                            reply_packets=0)
    c = conv.client
    rtx = [t for t, _d, kind in sent if kind == "retransmit"]
    assert rtx[0] == pytest.approx(0.02 + TCP_RTO_MIN, abs=0.002) and rtx[1] == pytest.approx(rtx[0] + 2 * (rtx[0] - 0.02), abs=0.002)
    assert len(rtx) > 2 and all(rtx[1] < t < rtx[1] + 0.01 for t in rtx[2:])  # the lost ones, clocked by ACKs
    assert c.cc.ssthresh == TCP_INIT_CWND * 717 // 1024 and c.cc.high_seq is None and c.cc.retransmits == 0
    assert c.state == "time_wait" and conv.server.rcv_nxt == c.snd_nxt
    assert sum(kind == "data" for _t, _d, kind in sent) < 100  # the writes queued behind the stall merged
