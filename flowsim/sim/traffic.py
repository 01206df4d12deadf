"""Traffic: the ``[[traffic]]`` tables as deterministic endpoints on the virtual clock.

Theory of operation
-------------------
A :class:`TrafficSpec` is one traffic table (:class:`flowsim.config.traffic.Traffic`,
the one declaration of its fields) with its client port chosen.  Each flow is a
:class:`Conversation` between two :class:`Endpoint` objects:

* the **client** lives in the ``from`` namespace and is bound from the
  start to ``(src, sport) → (to, dport)``;
* the **server** does not exist until the first packet is delivered
  somewhere: whichever namespace owns the address the packet finally
  reaches (after any DNAT) *accepts* it (``Kernel.accept``) and binds the
  server to the 4-tuple *as it arrived*.  Replies go to that tuple, so a
  reply only reaches the client when every NAT on the way was undone
  correctly — the client's socket is bound to exactly what it sent.

Timing.  ``start`` is when the client begins; the original direction sends
``packets`` packets ``1/rate`` apart (back to back, :data:`DEFAULT_GAP`
apart, when ``rate`` is 0); the reply direction spreads its
``reply_packets`` over the same time span, starting when the server is
established.  ``size`` / ``reply_size`` are **IP packet lengths** (L3
bytes, as the flowtable's MTU check counts them); the payload is what is
left after the IP and TCP/UDP headers.

TCP (with ``acks = "none"`` no congestion control, every segment in window,
no timer-driven retransmission): SYN → SYN/ACK → ACK (unless ``handshake = false``: data
from the first packet, which conntrack picks up mid-stream), then each of
``packets`` writes of ``size - headers`` bytes with ``TCP_NODELAY``: cut
into segments of the current MSS (``tcp_sendmsg_locked``), which follows
the path MTU the endpoint knows; ICMP Fragmentation Needed / Packet Too Big
lower it (path MTU discovery) and the segments lost to it are sent again at
once, cut to the new MSS (``tcp_simple_retransmit``).  Once both sides have
sent everything: FIN/ACK, FIN/ACK, ACK (conntrack ends in TIME_WAIT) or a
single RST (CLOSE).  ``acks`` says who acknowledges data: ``"none"`` (the
default) sends no pure ACKs — a table models its ACK stream as
``reply_packets`` of ACK size (``reply_size = 60``, as ``ip6ip6-rx.toml``
does); ``"linux"`` is a Linux receiver (:class:`AckState`: quick ACKs,
then one per two full segments or on the delayed-ACK timer) and a Linux
sender clocked by them (:class:`SendState`: the initial window of ten
segments, slow start, the retransmission timer with its backoff), and the
client then closes only once everything is acknowledged; both ends then
also send Linux's TCP options (``tcp_options_write``: MSS, SACK permitted,
timestamps and window scale on SYN and SYN/ACK, the timestamp after), so
their control packets have Linux's lengths and data 12 bytes less payload.  UDP: the client's
datagrams, the server's replies once the first datagram arrived; a datagram
larger than the path MTU the host learned is fragmented by the sending host
(IPv4 without DF), like ``IP_PMTUDISC_WANT`` / ``IPV6_PMTUDISC_WANT``.  GRE as UDP, over raw sockets of
protocol 47 at both ends (``raw_sendmsg``, ``raw_local_deliver``): each packet a GRE version 0 header
(:data:`GRE_V0_HEADER`) and zeros, no ports.

``df = false`` (IPv4, ``net.ipv4.ip_no_pmtu_disc = 1``: ``IP_PMTUDISC_DONT``)
sends every packet without DF, so routers fragment (``ip_fragment``)
instead of answering Fragmentation Needed.  TCP still sizes its segments
to its own route's MTU (``tcp_sync_mss``) and ignores any Fragmentation
Needed (``tcp_v4_mtu_reduced`` leaves a DONT socket's MSS alone).

GSO (``gso_size``): data packets leave the endpoint as one GSO skb of
``size`` bytes (at most :data:`GSO_MAX_SKB`, TCP's ``tcp_tso_autosize``
bound) whose segments carry ``gso_size`` payload bytes, lowered to what fits
the path MTU — TSO for TCP, ``UDP_SEGMENT`` for UDP.  veth, VLAN, bridge,
loopback and tunnel devices take the GSO skb whole (a capture on a veth
shows the large frame, as tcpdump does); a ppp device cannot, so the stack
cuts it in software first (``validate_xmit_skb``).  The receiving endpoint
takes a GSO skb as one large segment, as after GRO.

Every packet carries a :class:`~flowsim.kernel.stack.core.PacketTag` naming the
traffic, the direction (``original`` from the client, ``reply`` from the
server), a sequence number, its kind and the flow index.
"""

from __future__ import annotations

import math
import struct
import zlib

import attrs

from flowsim.config.traffic import Traffic
from flowsim.kernel.conntrack import TCP_ACK, TCP_FIN, TCP_PSH, TCP_RST, TCP_SYN
from flowsim.kernel.gso import gso_type_of
from flowsim.kernel.headers import (
    GRE_HLEN, GSO_LEGACY_MAX_SIZE, IPPROTO_GRE, IPPROTO_ICMP, IPPROTO_TCP, IPPROTO_UDP, shared_u16,
)
from flowsim.kernel.pkt import IPV6_MIN_MTU, AddrPair, addr_pair, ipv4_header, ipv6_header, tcp_header, udp_header
from flowsim.kernel.saddr import ip_route_connect_saddr
from flowsim.kernel.stack.core import ORIGIN_HOST, Timer

__all__ = ["TrafficSpec", "Conversation", "Endpoint", "DEFAULT_GAP", "EPHEMERAL_BASE"]

DEFAULT_GAP = 10e-6  # seconds between back-to-back packets (rate = 0)
EPHEMERAL_BASE = 40000  # first client port when the table gives none (ip_local_port_range is 32768-60999)
_PORT_LOW, _PORT_SPAN = 1024, 65536 - 1024  # client ports wrap inside the unprivileged range


def client_port(base: int, offset: int) -> int:
    """Client port *base* + *offset*, wrapped into 1024-65535 past the top (the 256th table of a file, or
    thousands of flows), so that every flow of a run gets a port a TCP header can carry."""
    port = base + offset
    return port if port <= 65535 else _PORT_LOW + (port - _PORT_LOW) % _PORT_SPAN
_HDR = {4: 20, 6: 40}
#: a table's proto: its IP protocol number, and the length of the header a datagram protocol puts before the
#: payload (UDP's; GRE version 0's gre_base_hdr, written by the raw socket's sender as the payload's first bytes)
L4_PROTO = {"tcp": IPPROTO_TCP, "udp": IPPROTO_UDP, "gre": IPPROTO_GRE}
_DATAGRAM_HLEN = {"udp": 8, "gre": GRE_HLEN}
GRE_V0_HEADER = bytes(GRE_HLEN)  # no checksum, key or sequence number, version 0, protocol 0 (zeros, as socat sends)
#: a retransmission queue entry (Endpoint.rtx_queue) is one int: the segment's sequence number above RTX_LEN_BITS
#: bits of its length (at most 65,535).  A (seq, length) tuple and the sequence number's own int cost 88 bytes,
#: this 32-36 (issue 16: a run whose connections all start at once has a segment queued per direction)
RTX_LEN_BITS = 17
_RTX_LEN_MASK = (1 << RTX_LEN_BITS) - 1


def rtx_entry(seq: int, length: int) -> int:
    """The retransmission queue's entry of the segment of *length* bytes at *seq*."""
    return seq << RTX_LEN_BITS | length


def rtx_segment(entry: int) -> tuple[int, int]:
    """(sequence number, length) of a retransmission queue entry."""
    return entry >> RTX_LEN_BITS, entry & _RTX_LEN_MASK


# The options a Linux TCP sends (tcp_options_write, net/ipv4/tcp_output.c) with the sysctl defaults
# (timestamps, SACK, window scaling on): NOP NOP TIMESTAMP on every segment after the handshake, and on SYN
# and SYN/ACK MSS, SACK_PERM + TIMESTAMP, NOP WSCALE.  acks = "linux" endpoints send them (the ACK clock
# and the byte counts of a Linux peer); the table's size stays the IP length, so data carries 12 bytes less.
TCPOLEN_TSTAMP_ALIGNED = 12
TCP_WSCALE = 7  # tcp_select_initial_window with the default tcp_rmem[2] (6 MB)
_TS_OPTION = struct.Struct("!BBBBII")        # NOP NOP kind 8 len 10 TSval TSecr
_SYN_OPTIONS = struct.Struct("!BBHBBBBIIBBBB")  # MSS, SACK_PERM, TIMESTAMP, NOP WSCALE
_SEQ_ACK_DOFF = struct.Struct("!4xIIB")  # a received TCP header's sequence and ACK numbers, data offset byte
MAX_TCP_HEADER = 320  # L1_CACHE_ALIGN(128 + MAX_HEADER) on x86-64
GSO_MAX_SKB = GSO_LEGACY_MAX_SIZE - 1 - MAX_TCP_HEADER  # tcp_tso_autosize: the largest GSO skb TCP builds


# The receiver's ACK clock (include/net/tcp.h, HZ-independent values in seconds)
TCP_MAX_QUICKACKS = 16
TCP_ATO_MIN = 0.040  # HZ/25
TCP_DELACK_MIN = 0.040  # HZ/25: also the bound tcp_send_delayed_ack takes from a (veth-short) srtt
TCP_RTO_MIN = 0.200  # HZ/5: the RTO of a connection whose RTT is far below it
TCP_MSS_DEFAULT = 536  # tcp_initialize_rcv_mss: the first rcv_mss estimate
TCP_INIT_SPACE = 65536  # tcp_full_space of the default 128 KiB tcp_rmem[1] at the default scaling ratio


def _after(a: int, b: int) -> bool:
    """``after(a, b)``: sequence number *a* is later than *b*, modulo 2^32."""
    return 0 < ((a - b) & 0xFFFFFFFF) < 0x80000000


@attrs.define
class AckState:
    """When a Linux receiver sends a pure ACK (``acks = "linux"``), from ``tcp_event_data_recv``,
    ``__tcp_ack_snd_check``, ``tcp_send_delayed_ack`` and ``tcp_delack_timer_handler`` (net/ipv4/tcp_input.c,
    tcp_output.c, tcp_timer.c): the first data segments are acknowledged one by one (quick-ack mode:
    ``tcp_incr_quickack`` allows ``rcv_wnd / (2 × rcv_mss)`` of them, at most 16, again after a silence longer
    than the RTO); afterwards an ACK goes out once more than one full segment is unacknowledged, or when the
    40 ms delayed-ACK timer fires.  Data the endpoint sends carries the ACK (it clears the pending one), and
    sending data within ``ato`` of receiving enters ping-pong mode (``tcp_event_data_sent``), which ends quick
    acks until a delayed ACK fires.  ``rcv_wnd`` is the initial window (no receive-buffer autotuning), and
    the window condition of ``__tcp_ack_snd_check`` is taken as met: the reader keeps up."""

    quick: int = 0
    ato: float = 0.0  # 0: no data received yet
    lrcvtime: float = 0.0
    pingpong: bool = False
    rcv_mss: int = TCP_MSS_DEFAULT
    rcv_wup: int | None = None  # rcv_nxt when the last ACK went out
    scheduled: bool = False  # inet_csk_ack_scheduled
    timeout: float | None = None  # the delayed-ACK timer, when armed
    timer_gen: int = 0

    def incr_quickack(self) -> None:
        """``tcp_incr_quickack``, with ``tcp_select_initial_window``'s window: the space rounded down to the MSS."""
        rcv_wnd = TCP_INIT_SPACE - TCP_INIT_SPACE % self.rcv_mss if self.rcv_mss < TCP_INIT_SPACE else TCP_INIT_SPACE
        quickacks = min(rcv_wnd // (2 * self.rcv_mss) or 2, TCP_MAX_QUICKACKS)
        self.quick = max(self.quick, quickacks)

    def data_received(self, ep: Endpoint, kernel, datalen: int) -> None:
        """``tcp_event_data_recv`` then ``__tcp_ack_snd_check`` for an in-window data segment."""
        now = kernel.now
        if self.rcv_wup is None:
            self.rcv_wup = (ep.rcv_nxt - datalen) & 0xFFFFFFFF
        self.scheduled = True
        if datalen >= self.rcv_mss:  # tcp_measure_rcv_mss
            self.rcv_mss = datalen
        if not self.ato:  # the first data segment
            self.incr_quickack()
            self.ato = TCP_ATO_MIN
        else:
            m = now - self.lrcvtime
            if m <= TCP_ATO_MIN / 2:
                self.ato = self.ato / 2 + TCP_ATO_MIN / 2
            elif m < self.ato:
                self.ato = min(self.ato / 2 + m, TCP_RTO_MIN)
            elif m > TCP_RTO_MIN:
                self.incr_quickack()
        self.lrcvtime = now
        full = ((ep.rcv_nxt - self.rcv_wup) & 0xFFFFFFFF) > self.rcv_mss
        if full or (self.quick and not self.pingpong):
            ep.send_ack(kernel)
        else:
            self.send_delayed_ack(ep, kernel)

    def send_delayed_ack(self, ep: Endpoint, kernel) -> None:
        """``tcp_send_delayed_ack``: ``ato`` bounded by the srtt, which on these links is below
        ``TCP_DELACK_MIN``; a timer about to fire sends the ACK now; an earlier timer is kept."""
        ato = min(self.ato, TCP_DELACK_MIN)
        timeout = kernel.now + ato
        if self.timeout is not None:
            if self.timeout <= kernel.now + ato / 4:
                ep.send_ack(kernel)
                return
            timeout = min(timeout, self.timeout)
        self.timeout = timeout
        self.timer_gen += 1
        kernel.schedule(timeout, self.delack_timer, ep, kernel, self.timer_gen)

    def delack_timer(self, ep: Endpoint, kernel, gen: int) -> None:
        """``tcp_delack_timer_handler``: a missed delayed ACK inflates ``ato`` (or leaves ping-pong mode)."""
        if gen != self.timer_gen or self.timeout is None:
            return
        self.timeout = None
        if not self.scheduled or ep.state in ("closed", "time_wait", "last_ack"):
            return
        if self.pingpong:
            self.pingpong = False
            self.ato = TCP_ATO_MIN
        else:
            self.ato = min(self.ato * 2, TCP_RTO_MIN)
        ep.send_ack(kernel)

    def data_sent(self, kernel) -> None:
        """``tcp_event_data_sent``: data sent within ``ato`` of the last data received is a reply."""
        if self.ato and kernel.now - self.lrcvtime < self.ato:
            self.pingpong = True

    def ack_sent(self, ep: Endpoint) -> None:
        """``tcp_event_ack_sent``: ``tcp_dec_quickack_mode``, the delayed-ACK timer stopped."""
        if self.quick and self.scheduled:
            self.quick -= 1
            if not self.quick:
                self.ato = TCP_ATO_MIN
        self.scheduled = False
        self.rcv_wup = ep.rcv_nxt
        # inet_csk_clear_xmit_timer(sk, ICSK_TIME_DACK) clears icsk_ack.pending but leaves the timer armed: its
        # sk_stop_timer is under INET_CSK_CLEAR_TIMERS, which include/net/inet_connection_sock.h does not define.
        # The timer still fires and tcp_delack_timer_handler finds nothing pending; so does delack_timer here (a
        # stale generation), an event that moves the clock as the kernel's expiry does, not a cancelled Timer
        self.timeout = None
        self.timer_gen += 1


# The sender's clock (include/net/tcp.h, net/ipv4/tcp_cubic.c; seconds)
TCP_INIT_CWND = 10  # tcp_init_cwnd: the initial window, in segments (RFC 6928)
TCP_INFINITE_SSTHRESH = 0x7FFFFFFF
TCP_TIMEOUT_INIT = 1.0  # the RTO before an RTT sample (RFC 6298)
TCP_RTO_MAX = 120.0
TCP_RETRIES2 = 15  # net.ipv4.tcp_retries2: RTOs before tcp_write_timeout gives up (tcp_write_err)
BICTCP_BETA, BICTCP_BETA_SCALE = 717, 1024  # cubic's multiplicative decrease (bictcp_recalc_ssthresh)


def _before(a: int, b: int) -> bool:
    """``before(a, b)``: sequence number *a* is earlier than *b*, modulo 2^32."""
    return _after(b, a)


@attrs.define
class SendState:
    """The sender's congestion window and retransmission timer (``acks = "linux"``: the peer's ACKs clock it).

    Writes join the socket's unsent bytes (``tcp_sendmsg_locked`` appends to the tail skb, so writes queued
    behind a full window merge); ``tcp_write_xmit`` cuts them at the current MSS and sends while fewer than
    ``cwnd`` segments are in flight (``tcp_cwnd_test``), from the initial window of :data:`TCP_INIT_CWND`.
    An ACK of new data grows the window (``tcp_slow_start`` below ``ssthresh``, then one segment per window —
    Reno's ``tcp_cong_avoid_ai``; cubic's curve is not modelled) when the sender is window-limited
    (``tcp_is_cwnd_limited``), restarts the retransmission timer (``tcp_rearm_rto``) and sends what the window
    now allows.  The timer runs while data is unacknowledged; its RTO comes from the first RTT
    sample (``tcp_rtt_estimator``: srtt + max(2 × srtt, ``TCP_RTO_MIN``), ``__tcp_set_rto``), one second before
    it.  When it fires (``tcp_retransmit_timer``) the sender enters loss (``tcp_enter_loss``: ``ssthresh`` to
    cubic's 717/1024 of the window, the window to one segment, everything outstanding lost), retransmits the
    oldest segment and backs off (the RTO doubles, up to :data:`TCP_RTO_MAX`); the lost segments go again as
    ACKs open the window, and new data after them.  After :data:`TCP_RETRIES2` retransmissions without an ACK
    the next expiry kills the connection (``tcp_write_timeout`` → ``tcp_write_err``: no packet).  So a
    direction whose ACKs never come back stalls after the initial window, as Linux's does (ip6ip6-over-pppoe's
    black-holed fast path on 7.2).  Not modelled: the tail-loss probe (``tcp_send_loss_probe``), SACK-based
    fast retransmit, the receive window, and SYN retransmission."""

    cwnd: int = TCP_INIT_CWND
    ssthresh: int = TCP_INFINITE_SSTHRESH
    cwnd_cnt: int = 0  # segments acknowledged towards the next increase (snd_cwnd_cnt)
    unsent: int = 0  # bytes written, not yet sent (the write queue after tcp_send_head)
    rto: float = TCP_TIMEOUT_INIT  # icsk_rto, without the backoff
    srtt: float = 0.0  # 0: no sample yet
    probe: tuple[int, float] | None = None  # (end sequence, send time) of the segment timed for the sample
    backoff: int = 0  # icsk_backoff
    retransmits: int = 0  # icsk_retransmits: RTOs since the last ACK of new data
    timer: Timer | None = None  # the retransmission timer, while armed
    expires: float = 0.0  # when it fires
    high_seq: int | None = None  # tp->high_seq while in loss (TCP_CA_Loss): snd_nxt when the RTO fired
    retx_next: int = 0  # in loss: the next sequence number to retransmit
    max_out: int = 0  # segments in flight at the last transmission (max_packets_out)
    stop_at: float = math.inf  # the harness stopped waiting (Simulation's sequential mode): no timer after

    # --- sending
    def in_flight(self, ep: Endpoint) -> int:
        """``tcp_packets_in_flight``: outside loss every unacknowledged segment; in loss the retransmitted ones
        (the rest are counted lost)."""
        if self.high_seq is None:
            return len(ep.rtx_queue)
        return sum(1 for e in ep.rtx_queue if _before(e >> RTX_LEN_BITS, self.retx_next))

    def write_xmit(self, ep: Endpoint, kernel) -> None:
        """``tcp_xmit_retransmit_queue`` in loss, then ``tcp_write_xmit``: segments of the current MSS (which
        follows the path MTU, also for bytes written before it fell) while the window allows; the one that
        empties the queue carries PSH."""
        if self.high_seq is not None and not self._retransmit_lost(ep, kernel):
            return
        while self.unsent and self.in_flight(ep) < self.cwnd:
            chunk = min(self.unsent, ep.mss())
            self.unsent -= chunk
            self._xmit(ep, kernel, "data", chunk, not self.unsent, None)

    def _retransmit_lost(self, ep: Endpoint, kernel) -> bool:
        """Loss recovery: the lost segments from ``retx_next`` while the window allows; True once all went."""
        for seq, n in map(rtx_segment, list(ep.rtx_queue)):
            if _before(seq, self.retx_next):
                continue
            if not _before(seq, self.high_seq) or self.in_flight(ep) >= self.cwnd:
                break
            self._xmit(ep, kernel, "retransmit", n, True, seq)
        return not _before(self.retx_next, self.high_seq)

    def _xmit(self, ep: Endpoint, kernel, kind: str, chunk: int, psh: bool, seq: int | None) -> None:
        if not ep.rtx_queue:
            self.arm(ep, kernel, self.rto)  # tcp_event_new_data_sent: the first packet out starts the timer
        ep.send(kernel, kind, TCP_ACK | (TCP_PSH if psh else 0), payload=chunk, seq=seq)
        ep.sent += 1
        if seq is not None:
            self.retx_next = (seq + chunk) & 0xFFFFFFFF
        self.max_out = self.in_flight(ep)

    def sent_new(self, ep: Endpoint, kernel, end_seq: int) -> None:
        """A segment (SYN included) ending at *end_seq* left: time it when no RTT sample was taken yet."""
        if not self.srtt and self.probe is None:
            self.probe = (end_seq, kernel.now)

    # --- the ACK clock
    def acked(self, ep: Endpoint, kernel, segments: int) -> None:
        """``tcp_ack`` of new data (*segments* of the queue cleaned): the RTT sample, the window, the timer."""
        now = kernel.now
        if self.probe is not None and not _after(self.probe[0], ep.una):
            m = max(now - self.probe[1], 1e-6)  # tcp_rtt_estimator's first sample
            self.srtt, self.probe = m, None
            self.rto = min(m + max(2 * m, TCP_RTO_MIN), TCP_RTO_MAX)
        self.retransmits = self.backoff = 0
        if self.high_seq is not None and not _after(self.high_seq, ep.una):
            self.high_seq = None  # tcp_try_undo_loss / tcp_end_cwnd_reduction: the loss episode is over
        if segments and (self.unsent or self.high_seq is not None or 2 * self.max_out > self.cwnd):
            self._cong_avoid(segments)
        if ep.rtx_queue:
            self.arm(ep, kernel, self.rto)
        else:
            self.cancel()
        self.write_xmit(ep, kernel)

    def _cong_avoid(self, acked: int) -> None:
        if self.cwnd < self.ssthresh:  # tcp_slow_start
            grown = min(self.cwnd + acked, self.ssthresh)
            acked -= grown - self.cwnd
            self.cwnd = grown
            if not acked:
                return
        self.cwnd_cnt += acked  # tcp_cong_avoid_ai with w = cwnd
        if self.cwnd_cnt >= self.cwnd:
            self.cwnd_cnt -= self.cwnd
            self.cwnd += 1

    # --- the retransmission timer
    def arm(self, ep: Endpoint, kernel, timeout: float) -> None:
        """``inet_csk_reset_xmit_timer``: the timer fires *timeout* from now (unless the harness stopped)."""
        self.cancel()
        if kernel.now + timeout < self.stop_at:
            self.timer, self.expires = Timer(self.retransmit_timer, ep, kernel), kernel.now + timeout
            kernel.schedule(self.expires, self.timer)

    def stop(self, at: float) -> None:
        """The harness stops waiting for this connection: no retransmission from *at* on (the guest's end
        snapshot comes before the next one)."""
        self.stop_at = at
        if self.timer is not None and self.expires >= at:
            self.cancel()

    def cancel(self) -> None:
        """``inet_csk_clear_xmit_timer``."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def retransmit_timer(self, ep: Endpoint, kernel) -> None:
        """``tcp_retransmit_timer``: nothing acknowledged for an RTO."""
        self.timer = None
        if not ep.rtx_queue or ep.state == "closed":
            return
        if self.retransmits >= TCP_RETRIES2:  # tcp_write_timeout: the connection is dead
            ep.state = "closed"
            self.unsent = 0
            return
        if self.high_seq is None or not self.retransmits:  # tcp_enter_loss: cubic's ssthresh once per episode
            self.ssthresh = max(self.cwnd * BICTCP_BETA // BICTCP_BETA_SCALE, 2)
        self.cwnd, self.cwnd_cnt = 1, 0
        self.high_seq, self.retx_next = ep.snd_nxt, ep.una
        seq, n = rtx_segment(ep.rtx_queue[0])
        self.retransmits += 1
        self.backoff += 1
        self._xmit(ep, kernel, "retransmit", n, True, seq)
        self.arm(ep, kernel, min(self.rto * (1 << self.backoff), TCP_RTO_MAX))


@attrs.frozen
class TrafficSpec(Traffic):
    """One traffic table as the generator uses it: a :class:`~flowsim.config.traffic.Traffic` (every field is
    declared there) whose client port is chosen."""

    @classmethod
    def from_topology(cls, t: Traffic, index: int = 0) -> TrafficSpec:
        """From a :class:`flowsim.config.traffic.Traffic` of a topology file: the client port defaults to
        40000 + 100 × *index* (the table's place in the file), wrapped by :func:`client_port`."""
        values = {a.name: getattr(t, a.name) for a in attrs.fields(Traffic)}
        if t.proto == "gre":
            values["sport"] = 0  # no ports: the endpoints' sockets are keyed by the addresses
        elif t.sport is None:
            values["sport"] = client_port(EPHEMERAL_BASE, 100 * index)
        return cls(**values)

    @property
    def gap(self) -> float:
        return 1.0 / self.rate if self.rate > 0 else DEFAULT_GAP

    @property
    def reply_gap(self) -> float:
        return self.gap * self.packets / self.reply_packets if self.reply_packets else self.gap


def _tcp_option(buf, at: int, end: int, kind: int, size: int) -> int | None:
    """``tcp_parse_options``: where option *kind* (*size* bytes long) of a received segment starts, else None."""
    while at < end:
        k = buf[at]
        if k == 0:  # TCPOPT_EOL
            break
        if k == 1:  # TCPOPT_NOP
            at += 1
            continue
        if at + 1 >= end or buf[at + 1] < 2:
            break
        if k == kind and buf[at + 1] == size and at + size <= end:
            return at
        at += buf[at + 1]
    return None


def _mss_option(buf, at: int, end: int) -> int | None:
    """The MSS option of a received SYN (``rx_opt.mss_clamp``), else None."""
    o = _tcp_option(buf, at, end, 2, 4)  # TCPOPT_MSS, TCPOLEN_MSS
    return None if o is None else (buf[o + 2] << 8) | buf[o + 3]


def _tsval(buf, at: int, end: int, default: int) -> int:
    """The TSval of a received segment's timestamp option, else *default*."""
    o = _tcp_option(buf, at, end, 8, 10)  # TCPOPT_TIMESTAMP, TCPOLEN_TIMESTAMP
    return default if o is None else int.from_bytes(buf[o + 2:o + 6], "big")


class Endpoint:
    """One side of a conversation: a socket bound to (proto, local, lport, remote, rport) in a namespace."""

    # slots: a run of a million connections holds two of these per connection
    __slots__ = ("conv", "direction", "netns", "addrs", "lport", "rport", "state",
                 "snd_nxt", "rcv_nxt", "ident", "pmtu", "adv_mtu", "mss_clamp", "sent", "writes", "una", "rtx_queue", "acks",
                 "pure_acks", "received", "data_segs_in", "short_segs_in", "short_bytes_in", "bytes_received", "done",
                 "_icmp_errors", "options",
                 "ts_off", "ts_recent", "cc", "data_in")

    def __init__(self, conv: Conversation, role: str, netns: str, laddr, lport: int, raddr, rport: int):
        self.conv = conv
        self.direction = "original" if role == "client" else "reply"  # the client's packets are the original's
        self.netns = netns
        # the parser's objects for the addresses: the socket and route lookups of received packets hit by identity;
        # with their packed bytes and sum, shared by the pair's sockets
        self.addrs: AddrPair = addr_pair(laddr, raddr)
        self.lport, self.rport = shared_u16(lport), shared_u16(rport)  # the parser's are one object per packet
        self.state = "closed"
        seed = zlib.crc32(f"{conv.spec.name}/{conv.flow}/{role}".encode())
        isn = seed & 0x7FFFFFFF
        self.snd_nxt = isn
        self.rcv_nxt = 0
        self.ident = seed & 0xFFFF
        self.pmtu: int | None = None
        self.adv_mtu = 1500  # the MTU the SYN's MSS option advertises (bind)
        self.mss_clamp = 0  # the peer's MSS option (tp->rx_opt.mss_clamp); 0: none seen, no clamp
        self.sent = 0  # data segments sent (retransmissions included)
        self.writes = 0  # writes of the table's size done
        self.una = isn  # oldest unacknowledged sequence number (tcp_ack)
        self.rtx_queue: list[int] = []  # the data segments sent, oldest first (rtx_entry: sequence and length)
        # the receiver's ACK clock, only with acks = "linux" (every use is behind that test)
        self.acks: AckState = AckState() if conv.spec.acks == "linux" else None  # type: ignore[assignment]
        # the sender's clock, with the ACK clock (a GSO writer's skbs are not cut or timed: it sends each write)
        self.cc: SendState | None = SendState() if conv.spec.acks == "linux" and not conv.spec.gso_size else None
        self.data_in = 0  # payload bytes received in order (what the reading application got)
        self.pure_acks = 0  # ACKs of the ACK clock (acks = "linux"), not the handshake's or the FIN's
        self.received = 0  # packets delivered to this endpoint
        self.data_segs_in = 0  # of them, TCP segments with payload (tcp_segs_in: tp->data_segs_in)
        # of those, the ones shorter than the peer's writes, and their IP bytes (conformance measures the
        # kernel's cut writes against them: flowsim.conform.compare)
        self.short_segs_in = self.short_bytes_in = 0
        self.bytes_received = 0
        self.done = False  # all data sent
        self._icmp_errors: list[tuple[int, int, int]] | None = None  # created at the first error (icmp_errors)
        # Linux's TCP options (acks = "linux"): the header is 12 bytes longer after the handshake
        self.options = conv.spec.proto == "tcp" and conv.spec.acks == "linux"
        # tcp_sk(sk)->tsoffset: a per-connection random offset (secure_tcp_ts_off); only options use it
        self.ts_off = seed >> 1 if self.options else 0
        self.ts_recent = 0  # the peer's last TSval, echoed as TSecr (tcp_store_ts_recent)

    @property
    def icmp_errors(self) -> list[tuple[int, int, int]]:
        """The ICMP errors this socket received: (type, code, mtu/info), oldest first."""
        return self._icmp_errors if self._icmp_errors is not None else []

    @property
    def role(self) -> str:
        """client | server"""
        return "client" if self.direction == "original" else "server"

    @property
    def laddr(self):
        return self.addrs.src

    @property
    def raddr(self):
        return self.addrs.dst

    @property
    def key(self) -> tuple:
        """What the stack finds the socket by: protocol, local and remote address and port (0 for GRE)."""
        return (L4_PROTO[self.conv.spec.proto], self.laddr, self.lport, self.raddr, self.rport)

    def connect_saddr(self, kernel) -> None:
        """The source of a client that binds no address, chosen at its ``connect`` (``ip_route_connect`` /
        ``ip6_dst_lookup_tail``: :func:`~flowsim.kernel.saddr.ip_route_connect_saddr`) through the routes and
        addresses as the run's events have left them; the table's load chose it from the commands alone.  Without
        a route the connect would fail: the load's choice stays, and its packets meet the same missing route."""
        st = kernel.netns[self.netns]
        src = ip_route_connect_saddr(st.ns, st.route(self.raddr), self.raddr)
        if src is not None and src != self.laddr:
            self.addrs = addr_pair(src, self.raddr)

    def bind(self, kernel) -> None:
        st = kernel.netns[self.netns]
        st.sockets[self.key] = self
        if self.pmtu is None:
            rt = st.route(self.raddr)
            configured = st.route_mtu(rt) if not rt.error else 1500
            # dst_mtu: a path MTU this host learned for the address (an earlier connection's ICMP) lowers it
            learned = st.pmtu_exception(self.raddr, kernel.now) if st.pmtu_exceptions else None
            self.pmtu = configured if learned is None else min(configured, learned)
            self.adv_mtu = self.pmtu if kernel.profile.advmss_mtu == "path" else configured

    # --- sending
    def _l3_size(self, size: int) -> int:
        """A data segment's IP length: *size*, cut to the path MTU and to the MSS the peer announced
        (``tcp_sync_mss`` → ``__tcp_mtu_to_mss``: min(pmtu − headers, mss_clamp), then the options)."""
        l3 = min(size, self.pmtu or size)
        if self.mss_clamp:
            return min(l3, self.mss_clamp + _HDR[self.addrs.version] + 20)
        return l3

    def mss(self) -> int:
        """``tcp_current_mss``: the path MTU less the IP and TCP headers (``__tcp_mtu_to_mss``), at most the MSS
        the peer announced (``rx_opt.mss_clamp``), less the options."""
        mss = (self.pmtu or 65535) - _HDR[self.addrs.version] - 20
        if self.mss_clamp and mss > self.mss_clamp:
            mss = self.mss_clamp
        return max(1, mss - (self.tcp_hdrlen() - 20))

    def tcp_hdrlen(self) -> int:
        """The TCP header of a segment after the handshake: 20 bytes, 32 with Linux's timestamps."""
        return 20 + TCPOLEN_TSTAMP_ALIGNED if self.options else 20

    def tcp_options(self, kernel, flags: int) -> bytes:
        """``tcp_options_write``: on SYN and SYN/ACK the MSS this end advertises (``tcp_advertise_mss``: the
        route MTU less 40 / 60 bytes), SACK permitted, the timestamp and the window scale; else the timestamp.
        TSval is the millisecond clock plus the connection's offset, TSecr the peer's last TSval (only for an
        endpoint with ``options``; the caller tests it, once per packet)."""
        tsval = (int(kernel.now * 1000) + self.ts_off) & 0xFFFFFFFF
        if flags & TCP_SYN:
            mss = self.adv_mtu - _HDR[self.addrs.version] - 20
            return _SYN_OPTIONS.pack(2, 4, mss, 4, 2, 8, 10, tsval, self.ts_recent, 1, 3, 3, TCP_WSCALE)
        return _TS_OPTION.pack(1, 1, 8, 10, tsval, self.ts_recent)

    def send(self, kernel, kind: str, flags: int = 0, size: int | None = None, *, payload: int | None = None,
             seq: int | None = None) -> None:
        """Build one packet of *kind* (*size* = IP length for data, or *payload* bytes of a TCP segment the
        sender already cut, at *seq* for a retransmission) and hand it to ``ip_local_out``."""
        spec = self.conv.spec
        addrs = self.addrs
        v = addrs.version
        tcp = spec.proto == "tcp"
        gso_size = 0
        if payload is not None:
            payload_len = payload
        elif size is None:
            payload_len = 0
        else:  # the payload that makes an IP packet of *size*: less the IP and TCP / UDP / GRE headers
            headers = _HDR[v] + (self.tcp_hdrlen() if tcp else _DATAGRAM_HLEN[spec.proto])
            if spec.gso_size:
                # tcp_current_mss / udp_send_skb: every segment fits the path MTU; tcp_tso_autosize bounds the skb
                mss = max(1, min(spec.gso_size, (self.pmtu or 65535) - headers))
                payload_len = max(min(size, GSO_MAX_SKB) - headers, 0)
                if payload_len > mss:  # tcp_set_skb_tso_segs: one segment's worth is not a GSO skb
                    gso_size = mss
            else:
                # TCP segments fit the path MTU (tcp_sync_mss: the MSS follows dst_mtu, DF or not); a UDP datagram
                # longer than it is fragmented by this host (ip_fragment without DF, ip6_fragment: flowsim.kernel.stack.ip)
                payload_len = max((self._l3_size(size) if tcp else size) - headers, 0)
        payload_len = shared_u16(payload_len)  # kept by the retransmission queue and the tag in flight
        payload = bytes(payload_len)
        if tcp:
            at = self.snd_nxt if seq is None else seq
            hdr = tcp_header(addrs.addr_sum, self.lport, self.rport, at, self.rcv_nxt if flags & TCP_ACK else 0,
                             flags, payload, 65535, self.tcp_options(kernel, flags) if self.options else b"")
            if seq is None:
                self.snd_nxt = (self.snd_nxt + payload_len + (1 if flags & (TCP_SYN | TCP_FIN) else 0)) & 0xFFFFFFFF
                if payload_len:
                    self.rtx_queue.append(rtx_entry(at, payload_len))
                if self.cc is not None and (payload_len or flags & TCP_SYN):
                    self.cc.sent_new(self, kernel, self.snd_nxt)
            if spec.acks == "linux":  # __tcp_transmit_skb: tcp_event_ack_sent, then tcp_event_data_sent
                if flags & TCP_ACK:
                    self.acks.ack_sent(self)
                if payload_len:
                    self.acks.data_sent(kernel)
            proto = IPPROTO_TCP
            df = spec.df is not False
        else:
            if spec.proto == "udp":
                hdr = udp_header(addrs.addr_sum, self.lport, self.rport, payload)
            else:  # raw_sendmsg of protocol 47: the GRE header is the payload's first bytes
                hdr = GRE_V0_HEADER
            proto = L4_PROTO[spec.proto]
            seglen = _HDR[v] + len(hdr) + (gso_size or payload_len)
            # IP_PMTUDISC_WANT, a UDP or raw socket's default (__ip_make_skb: DF when it fits the path MTU)
            df = spec.df if spec.df is not None else (self.pmtu is None or seglen <= self.pmtu)
        self.ident = shared_u16((self.ident + 1) & 0xFFFF)
        if v == 4:
            iph = ipv4_header(addrs.packed, proto, len(hdr) + payload_len, spec.ttl, 0, self.ident, df)
        else:
            iph = ipv6_header(addrs.packed, proto, len(hdr) + payload_len, spec.ttl)
        pkt = iph + hdr + payload
        conv = self.conv
        conv.seq += 1
        tag = kernel.new_tag(spec.name, self.direction, kind, ORIGIN_HOST, conv.seq, conv.flow)
        # the zero payload at the end: its frames wait on the wire without it (flowsim.kernel.skb.frame_on_wire)
        tag.zeros = payload_len
        # a UDP or raw socket (IP_PMTUDISC_WANT / IPV6_PMTUDISC_WANT) ignores DF (ip_sk_ignore_df,
        # ip6_sk_ignore_df): its datagram is cut to the path MTU by this host (ip_fragment without DF, ip6_fragment)
        kernel.send_l3(self.netns, pkt, tag, gso_size, gso_type_of(pkt) if gso_size else 0, not tcp)

    def stream(self, kernel, count: int, size: int, gap: float) -> None:
        """Send the next write now and schedule the rest *gap* apart."""
        if self.state not in ("established", "open"):
            return
        spec = self.conv.spec
        if spec.proto == "tcp" and not spec.gso_size:
            self.tcp_sendmsg(kernel, max(size - _HDR[self.addrs.version] - self.tcp_hdrlen(), 0))
        else:
            self.send(kernel, "data", TCP_ACK | TCP_PSH if spec.proto == "tcp" else 0, size)
            self.sent += 1
        self.writes += 1
        if self.writes < count:
            kernel.schedule(kernel.now + gap, self.stream, kernel, count, size, gap)
        else:
            self.done = True
            self.conv.maybe_close(kernel)

    def send_ack(self, kernel) -> None:
        """``tcp_send_ack``: a pure ACK of everything received."""
        self.pure_acks += 1
        self.send(kernel, "ack", TCP_ACK)

    def tcp_sendmsg(self, kernel, length: int) -> None:
        """One write of *length* bytes with ``TCP_NODELAY``: ``tcp_sendmsg_locked`` cuts it into segments of
        the current MSS (``tcp_send_mss``, which follows the path MTU: after a Fragmentation Needed the same
        write leaves as a full segment and a remnant) and ``tcp_push`` sends them at once; the last one
        carries PSH.  A zero-length write still sends one segment (the table asked for a packet)."""
        if self.cc is not None and length:  # queued: tcp_push sends what the congestion window allows
            self.cc.unsent += length
            self.cc.write_xmit(self, kernel)
            return
        mss = self.mss()
        left = length
        while True:
            chunk = min(left, mss)
            left -= chunk
            self.send(kernel, "data", TCP_ACK | (0 if left else TCP_PSH), payload=chunk)
            self.sent += 1
            if not left:
                return

    def tcp_simple_retransmit(self, kernel) -> None:
        """After the path MTU dropped (``tcp_v4_mtu_reduced`` / ``tcp_v6_mtu_reduced``): every segment still
        unacknowledged that is now larger than the MSS was lost at the narrow link; ``tcp_simple_retransmit``
        marks them lost and ``tcp_xmit_retransmit_queue`` sends them again at once, cut to the new MSS
        (``tcp_fragment``).  Unacknowledged is what the peer has not received yet: with ``acks = "none"``
        there is no ACK to tell the sender, so the receiving endpoint's ``rcv_nxt`` stands in for it."""
        mss = self.mss()
        una = self.snd_una()
        lost = [(seq, n) for seq, n in map(rtx_segment, self.rtx_queue) if n > mss and _after(seq + n, una)]
        for seq, n in lost:
            off = 0
            while off < n:
                chunk = min(n - off, mss)
                self.send(kernel, "retransmit", TCP_ACK | (TCP_PSH if off + chunk == n else 0),
                          payload=chunk, seq=(seq + off) & 0xFFFFFFFF)
                self.sent += 1
                off += chunk

    def all_acked(self) -> bool:
        """Everything written left and was acknowledged (the write queue empty, ``snd_una == snd_nxt``)."""
        return self.una == self.snd_nxt and not (self.cc is not None and self.cc.unsent)

    def snd_una(self) -> int:
        """The oldest unacknowledged sequence number: from the ACKs received (``tcp_ack``), or with
        ``acks = "none"`` from what the peer received."""
        peer = self.conv.peer(self)
        if self.conv.spec.acks == "none" and peer is not None:
            return peer.rcv_nxt
        return self.una

    # --- receiving (called by the stack after local delivery)
    def rx(self, kernel, st, info, skb) -> None:
        tot_len = info.tot_len
        self.received += 1
        self.bytes_received += tot_len
        spec = self.conv.spec
        if spec.proto != "tcp":
            return
        flags = info.tcp_flags or 0
        buf, at = skb.buf, info.l4off
        seq, ack, doff = _SEQ_ACK_DOFF.unpack_from(buf, at)
        doff = (doff >> 4) * 4
        datalen = info.l3off + tot_len - at - doff
        if self.options and doff > 20:
            self.ts_recent = _tsval(buf, at + 20, at + doff, self.ts_recent)
            if flags & TCP_SYN:
                self.mss_clamp = _mss_option(buf, at + 20, at + doff) or self.mss_clamp
        if datalen > 0:
            self.data_segs_in += 1
            if tot_len < (spec.size if self.direction == "reply" else spec.reply_size or spec.size):  # a server's
                self.short_segs_in += 1
                self.short_bytes_in += tot_len
        linux = spec.acks == "linux"
        if flags & TCP_ACK:
            outstanding = len(self.rtx_queue)
            if self.tcp_ack(ack):
                if self.cc is not None:
                    self.cc.acked(self, kernel, outstanding - len(self.rtx_queue))
                if linux:
                    self.conv.maybe_close(kernel)
        state = self.state
        _TCP_RX[state](self, kernel, flags, seq, datalen)
        if datalen and linux and state in ("established", "fin_wait") and not flags & (TCP_RST | TCP_FIN):
            self.acks.data_received(self, kernel, datalen)
        if datalen > 0 and self.data_segs_in == 1 and self.direction == "reply" and spec.reply_after == "data":
            kernel.schedule(kernel.now, self.conv.start_replies, kernel)  # after this segment's quick ACK

    def tcp_ack(self, ack: int) -> bool:
        """``tcp_ack``: an acknowledgement moves ``snd_una`` and cleans the retransmission queue
        (``tcp_clean_rtx_queue``); True when it acknowledged something new."""
        if _after(ack, self.una) and not _after(ack, self.snd_nxt):
            self.una = ack
            # the queue is in sequence order (segments are queued as snd_nxt advances; retransmissions are not
            # queued again): what the ACK covers is a prefix, and the first segment it does not end the scan
            queue, acked = self.rtx_queue, 0
            for e in queue:
                if _after((e >> RTX_LEN_BITS) + (e & _RTX_LEN_MASK), ack):
                    break
                acked += 1
            del queue[:acked]
            return True
        return False

    def _advance(self, seq: int, datalen: int, flags: int) -> None:
        end = seq + datalen + (1 if flags & (TCP_SYN | TCP_FIN) else 0)
        ahead = (end - self.rcv_nxt) & 0xFFFFFFFF
        if ahead < 0x80000000:
            self.data_in += min(ahead, datalen)
            self.rcv_nxt = end & 0xFFFFFFFF

    def _rx_syn_sent(self, kernel, flags, seq, datalen) -> None:
        if flags & TCP_RST:
            self.state = "closed"
        elif flags & TCP_SYN and flags & TCP_ACK:
            self.rcv_nxt = (seq + 1) & 0xFFFFFFFF
            self.state = "established"
            self.send(kernel, "ack", TCP_ACK)
            self.conv.client_established(kernel)

    def _rx_syn_rcvd(self, kernel, flags, seq, datalen) -> None:
        if flags & TCP_RST:
            self.state = "closed"
        elif flags & TCP_SYN and not flags & TCP_ACK:
            self.rcv_nxt = (seq + 1) & 0xFFFFFFFF
        elif flags & TCP_ACK:
            self._advance(seq, datalen, flags)
            self.state = "established"
            self.conv.server_established(kernel)

    def _rx_established(self, kernel, flags, seq, datalen) -> None:
        if flags & TCP_RST:
            self.state = "closed"
            return
        self._advance(seq, datalen, flags)
        if flags & TCP_FIN:  # passive close: our FIN goes with the ACK
            self.state = "last_ack"
            self.send(kernel, "fin", TCP_FIN | TCP_ACK)

    def _rx_fin_wait(self, kernel, flags, seq, datalen) -> None:
        if flags & TCP_RST:
            self.state = "closed"
            return
        self._advance(seq, datalen, flags)
        if flags & TCP_FIN:
            self.state = "time_wait"
            self.send(kernel, "ack", TCP_ACK)

    def _rx_last_ack(self, kernel, flags, seq, datalen) -> None:
        if flags & (TCP_ACK | TCP_RST):
            self.state = "closed"

    def _rx_closed(self, kernel, flags, seq, datalen) -> None:
        pass

    # --- ICMP errors about our packets
    def icmp_error(self, kernel, st, info, inner, skb) -> None:
        at = info.l4off
        value = int.from_bytes(skb.buf[at + 4:at + 8], "big")
        if self._icmp_errors is None:
            self._icmp_errors = []
        self._icmp_errors.append((info.icmp_type, info.icmp_code, value))
        frag_needed = (info.l4proto == IPPROTO_ICMP and info.icmp_type == 3 and info.icmp_code == 4)
        too_big = info.l4proto != IPPROTO_ICMP and info.icmp_type == 2
        if not (frag_needed or too_big):
            return
        mtu = value & 0xFFFF if frag_needed else value
        floor = 68 if self.addrs.version == 4 else IPV6_MIN_MTU
        if mtu < floor:
            return
        # inet_csk_update_pmtu / ip6_sk_update_pmtu: the route learns it first, for every later socket too
        st.update_pmtu(self.raddr, mtu, kernel.now)
        if frag_needed and self.conv.spec.proto == "tcp" and self.conv.spec.df is False:
            return  # tcp_v4_mtu_reduced: an IP_PMTUDISC_DONT socket (ip_no_pmtu_disc) keeps its MSS
        if self.pmtu is None or mtu < self.pmtu:
            self.pmtu = mtu  # path MTU discovery
            if self.conv.spec.proto == "tcp" and not self.conv.spec.gso_size:
                self.tcp_simple_retransmit(kernel)

    def report(self) -> dict:
        ports = self.conv.spec.proto != "gre"  # a raw socket has none
        return {"netns": self.netns, "local": f"{_fmt(self.laddr)}:{self.lport}" if ports else _fmt(self.laddr),
                "remote": f"{_fmt(self.raddr)}:{self.rport}" if ports else _fmt(self.raddr),
                "state": self.state, "sent": self.sent,
                "received": self.received, "pmtu": self.pmtu, "icmp_errors": len(self.icmp_errors)}


_TCP_RX = {
    "syn_sent": Endpoint._rx_syn_sent,
    "syn_rcvd": Endpoint._rx_syn_rcvd,
    "established": Endpoint._rx_established,
    "open": Endpoint._rx_established,
    "fin_wait": Endpoint._rx_fin_wait,
    "time_wait": Endpoint._rx_fin_wait,
    "last_ack": Endpoint._rx_last_ack,
    "closed": Endpoint._rx_closed,
}


def _fmt(addr) -> str:
    return f"[{addr}]" if addr.version == 6 else str(addr)


class Conversation:
    """One flow of a traffic table: a client, and the server it finds."""

    __slots__ = ("spec", "flow", "seq", "client", "server", "closing", "replying")

    def __init__(self, spec: TrafficSpec, flow: int = 0):
        self.spec = spec
        self.flow = flow
        self.seq = 0
        gre = spec.proto == "gre"  # no ports (an API caller's TrafficSpec may still carry some)
        sport = 0 if gre else client_port(spec.sport or EPHEMERAL_BASE, flow)
        self.client = Endpoint(self, "client", spec.netns, spec.src, sport, spec.dst, 0 if gre else spec.dport)
        self.server: Endpoint | None = None
        self.closing = False
        self.replying = False  # the server's replies started (start_replies)

    def start(self, kernel) -> None:
        """The client opens the conversation (at ``spec.start``)."""
        c = self.client
        if not self.spec.src_bound:
            c.connect_saddr(kernel)
        c.bind(kernel)
        if self.spec.proto == "tcp" and self.spec.handshake:
            c.state = "syn_sent"
            c.send(kernel, "syn", TCP_SYN)
        else:
            c.state = "established" if self.spec.proto == "tcp" else "open"
            if self.spec.proto == "tcp":
                c.rcv_nxt = zlib.crc32(f"{self.spec.name}/{self.flow}/server".encode()) & 0x7FFFFFFF
            self.client_established(kernel)

    def client_established(self, kernel) -> None:
        self.client.stream(kernel, self.spec.packets, self.spec.size, self.spec.gap)

    def accept(self, kernel, st, info) -> Endpoint | None:
        """A packet of this conversation reached namespace *st* with no socket: bind the server to it."""
        if self.server is not None:
            return None
        tcp = self.spec.proto == "tcp"
        flags = info.tcp_flags or 0
        if tcp and self.spec.handshake and not (flags & TCP_SYN and not flags & TCP_ACK):
            return None  # only a SYN opens a listening socket's connection
        s = Endpoint(self, "server", st.name, info.dst, info.dport or 0, info.src, info.sport or 0)
        self.server = s
        s.bind(kernel)
        if tcp and self.spec.handshake:
            s.state = "syn_rcvd"
            kernel.schedule(kernel.now, self._synack, kernel)
        elif tcp:
            s.state = "established"
            kernel.schedule(kernel.now, self.server_established, kernel)
        else:
            s.state = "open"
            kernel.schedule(kernel.now, self.server_established, kernel)
        return s

    def _synack(self, kernel) -> None:
        s = self.server
        s.send(kernel, "synack", TCP_SYN | TCP_ACK)

    def server_established(self, kernel) -> None:
        """The server's connection is up: it starts its replies now, or with ``reply_after = "data"`` when the
        client's first data segment arrives (:meth:`Endpoint.rx`), as a server that reads a request first
        or forks its writer after ``accept`` does: that segment's quick ACK then goes out before any reply."""
        if self.spec.reply_after == "data" and not self.server.data_segs_in:
            return
        self.start_replies(kernel)

    def start_replies(self, kernel) -> None:
        if self.replying:
            return
        self.replying = True
        s = self.server
        n = self.spec.reply_packets
        if n:
            s.stream(kernel, n, self.spec.reply_size or self.spec.size, self.spec.reply_gap)
        else:
            s.done = True
            self.maybe_close(kernel)

    def delivered(self) -> bool:
        """Everything both sides wrote arrived (what the conformance guest's ``wait_bytes`` waits for): with
        Linux's ACKs every byte acknowledged both ways; UDP every datagram received; else all of it sent."""
        c, s = self.client, self.server
        if s is None or not (c.done and s.done):
            return False
        spec = self.spec
        if spec.proto == "tcp" and spec.acks == "linux":
            return c.all_acked() and s.all_acked()
        if spec.proto != "tcp":
            return s.received >= spec.packets and c.received >= spec.reply_packets
        return True

    def received_bytes(self) -> int:
        """What the two applications read so far (the guest's ``wait_bytes`` watches its files grow): TCP's
        in-order payload, so a retransmitted duplicate is no progress; UDP's and GRE's datagrams."""
        eps = [e for e in (self.client, self.server) if e is not None]
        return sum(e.data_in if self.spec.proto == "tcp" else e.bytes_received for e in eps)

    def peer(self, ep: Endpoint) -> Endpoint | None:
        """The other end of *ep*'s connection (``None`` while no server accepted it)."""
        return self.server if ep is self.client else self.client

    def maybe_close(self, kernel) -> None:
        """Once both sides sent everything, the client closes (FIN or RST) one gap later; with
        ``acks = "linux"`` once everything both sides sent is also acknowledged (the last odd segment's ACK
        may wait for the delayed-ACK timer), so that no ACK of data trails the FIN."""
        if self.closing or self.spec.close is None or not self.client.done:
            return
        if self.server is None or not self.server.done:
            return
        if self.spec.acks == "linux" and not (self.client.all_acked() and self.server.all_acked()):
            return  # tcp_ack calls back here as the last ACKs arrive
        self.closing = True
        kernel.schedule(kernel.now + self.spec.gap, self._close, kernel)

    def _close(self, kernel) -> None:
        c = self.client
        if c.state != "established":
            return
        if self.spec.close == "rst":
            c.state = "closed"
            c.send(kernel, "rst", TCP_RST | TCP_ACK)
        else:
            c.state = "fin_wait"
            c.send(kernel, "fin", TCP_FIN | TCP_ACK)

    def report(self) -> dict:
        return {"flow": self.flow, "client": self.client.report(),
                "server": self.server.report() if self.server is not None else None}
