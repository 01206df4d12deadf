"""Connection tracking: what the flowtable reads of a connection, and NAT.

Theory of operation
-------------------
One :class:`ConntrackTable` per namespace holds :class:`CtEntry` objects
(``struct nf_conn``), each with its two tuples (``tuplehash[ORIGINAL]``,
``tuplehash[REPLY]``), status bits (IPS_*), TCP state, mark, per-direction
accounting and an absolute expiry on the simulation's virtual clock (the
caller passes ``now`` in seconds everywhere).

Per packet the stack calls :meth:`ConntrackTable.nf_conntrack_in` at
prerouting (or output): a confirmed entry is looked up by either tuple,
giving the direction; on a miss an *unconfirmed* entry is created
(``init_conntrack``) and travels with the packet only.  The protocol handler
(:func:`nf_conntrack_tcp_packet` with the kernel's ``tcp_conntracks`` state
table, :func:`nf_conntrack_udp_packet`, generic/ICMP) updates state and
timeout and accounts the packet (``nf_ct_refresh_acct`` →
``nf_ct_acct_update``).  When the first packet has passed postrouting (or
input) the stack calls :meth:`ConntrackTable.nf_conntrack_confirm`, which
inserts both tuples: only then can later packets find the entry, and only
then may ``flow add`` offload it (``nft_flow_offload_eval`` skips an
unconfirmed ``ct``).

NAT (``nf_nat_setup_info``) rewrites the REPLY tuple once, at binding time,
so that replies are found by their translated addresses; both directions'
packets are then mangled by :func:`nf_nat_packet` from the tuples, exactly
as the flowtable's NAT (``nf_flow_nat_ip``/``nf_flow_nat_ipv6``) does.  The range, the tuple choice and the
packet mangling (:func:`nf_nat_manip_pkt`, the ``csum_*`` helpers) live in
:mod:`flowsim.kernel.nat` and are re-exported here.

The flowtable side: :func:`nf_conntrack_tcp_established`, IPS_OFFLOAD,
:func:`flow_offload_ct_tcp` (BE_LIBERAL), the teardown fix-up
:meth:`ConntrackTable.flow_offload_fixup_ct` and the GC's
:meth:`ConntrackTable.nf_flow_table_extend_ct_timeout` (``nf_flow_table_core.c``).

The timeouts are the namespace's (:meth:`CtTimeouts.from_sysctls`: its
``net.netfilter.nf_conntrack_*_timeout*`` sysctls over the kernel's defaults).

Not modelled: TCP window tracking (``tcp_in_window``: every segment is in
window), helpers and expectations (``helper`` is a plain attribute), zones,
clash resolution at confirm.  (ICMP errors about a NATed connection are
translated by the stack: ``nf_nat_icmp_reply_translation`` in
flowsim.kernel.stack.nf.)
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterator, Mapping

import attrs

from flowsim.kernel.headers import HZ, IPPROTO_GRE, IPPROTO_ICMP, IPPROTO_ICMPV6, shared_u16
from flowsim.kernel.nat import (
    _ICMP_ECHO, NatRange, csum_replace2, csum_replace4, get_unique_tuple, ipv6_l4_offset, nf_nat_manip_pkt,
)

__all__ = [
    "IP_CT_DIR_ORIGINAL", "IP_CT_DIR_REPLY", "IPS_EXPECTED", "IPS_SEEN_REPLY", "IPS_ASSURED",
    "IPS_CONFIRMED", "IPS_SRC_NAT", "IPS_DST_NAT", "IPS_NAT_MASK", "IPS_SEQ_ADJUST", "IPS_SRC_NAT_DONE",
    "IPS_DST_NAT_DONE", "IPS_DYING", "IPS_FIXED_TIMEOUT", "IPS_NAT_CLASH", "IPS_HELPER", "IPS_OFFLOAD",
    "IPS_HW_OFFLOAD", "IP_CT_TCP_FLAG_CLOSE_INIT", "IP_CT_TCP_FLAG_BE_LIBERAL", "IP_CT_TCP_FLAG_MAXACK_SET",
    "IP_CT_ESTABLISHED", "IP_CT_RELATED", "IP_CT_NEW", "IP_CT_IS_REPLY", "IP_CT_ESTABLISHED_REPLY",
    "IP_CT_RELATED_REPLY", "IP_CT_UNTRACKED", "TCP_FIN", "TCP_SYN", "TCP_RST", "TCP_PSH", "TCP_ACK",
    "tcp_error", "udp_error", "TCP_VALID_FLAGS",
    "TcpConntrack", "CtTimeouts", "DEFAULT_TIMEOUTS", "CT_TIMEOUT_SYSCTLS", "CT_TCP_LOOSE_SYSCTL",
    "NF_CT_DAY", "CT_OFFLOAD_EXTEND_UNDER", "CtTuple", "CtCounter", "CtEntry",
    "CtResult", "NatRange", "ConntrackTable", "nft_ct_state", "nf_conntrack_tcp_established", "nf_conntrack_tcp_set_closing",
    "nf_conntrack_tcp_packet", "nf_conntrack_udp_packet", "nf_conntrack_gre_packet", "nf_ct_acct_update", "flow_offload_ct_tcp",
    "csum_replace2", "csum_replace4", "nf_nat_manip_pkt",
    "nf_nat_packet", "ipv6_l4_offset",
]

IP_CT_DIR_ORIGINAL, IP_CT_DIR_REPLY = 0, 1

# enum ip_conntrack_status (uapi nf_conntrack_common.h)
IPS_EXPECTED = 1 << 0
IPS_SEEN_REPLY = 1 << 1
IPS_ASSURED = 1 << 2
IPS_CONFIRMED = 1 << 3
IPS_SRC_NAT = 1 << 4
IPS_DST_NAT = 1 << 5
IPS_NAT_MASK = IPS_SRC_NAT | IPS_DST_NAT
IPS_SEQ_ADJUST = 1 << 6
IPS_SRC_NAT_DONE = 1 << 7
IPS_DST_NAT_DONE = 1 << 8
IPS_DYING = 1 << 9
IPS_FIXED_TIMEOUT = 1 << 10
IPS_NAT_CLASH = 1 << 12
IPS_HELPER = 1 << 13
IPS_OFFLOAD = 1 << 14
IPS_HW_OFFLOAD = 1 << 15

# ip_ct_tcp_state.flags (IP_CT_TCP_FLAG_*)
IP_CT_TCP_FLAG_CLOSE_INIT = 0x04
IP_CT_TCP_FLAG_BE_LIBERAL = 0x08
IP_CT_TCP_FLAG_MAXACK_SET = 0x20

# enum ip_conntrack_info
IP_CT_ESTABLISHED, IP_CT_RELATED, IP_CT_NEW, IP_CT_IS_REPLY = 0, 1, 2, 3
IP_CT_ESTABLISHED_REPLY, IP_CT_RELATED_REPLY, IP_CT_UNTRACKED = 3, 4, 7

TCP_FIN, TCP_SYN, TCP_RST, TCP_PSH, TCP_ACK = 0x01, 0x02, 0x04, 0x08, 0x10
TCP_URG, TCP_ECE, TCP_CWR = 0x20, 0x40, 0x80

NF_CT_DAY = 86400.0
#: the profile's ct_offload_timeout -> the seconds left under which the GC extends an offloaded entry:
#: nf_flow_table_extend_ct_timeout's min_timeout, nf_ct_offload_timeout's half day
CT_OFFLOAD_EXTEND_UNDER = {"flowtable-gc": 300.0, "conntrack-gc": NF_CT_DAY / 2}


class TcpConntrack(enum.IntEnum):
    """enum tcp_conntrack, kernel values."""

    NONE = 0
    SYN_SENT = 1
    SYN_RECV = 2
    ESTABLISHED = 3
    FIN_WAIT = 4
    CLOSE_WAIT = 5
    LAST_ACK = 6
    TIME_WAIT = 7
    CLOSE = 8
    SYN_SENT2 = 9
    MAX = 10  # "invalid" in the transition table (sIV)
    IGNORE = 11  # sIG


_S = TcpConntrack
_sNO, _sSS, _sSR, _sES, _sFW, _sCW, _sLA, _sTW, _sCL, _sS2, _sIV, _sIG = (
    _S.NONE, _S.SYN_SENT, _S.SYN_RECV, _S.ESTABLISHED, _S.FIN_WAIT, _S.CLOSE_WAIT, _S.LAST_ACK,
    _S.TIME_WAIT, _S.CLOSE, _S.SYN_SENT2, _S.MAX, _S.IGNORE)

# tcp_conntracks[dir][index][old state], index from get_conntrack_index (nf_conntrack_proto_tcp.c)
_SYN, _SYNACK, _FIN, _ACK, _RST, _NONE = range(6)
_TCP_CONNTRACKS = (
    (  # ORIGINAL      sNO   sSS   sSR   sES   sFW   sCW   sLA   sTW   sCL   sS2
        (_sSS, _sSS, _sIG, _sIG, _sIG, _sIG, _sIG, _sSS, _sSS, _sS2),  # syn
        (_sIV, _sIV, _sSR, _sIV, _sIV, _sIV, _sIV, _sIV, _sIV, _sSR),  # synack
        (_sIV, _sIV, _sFW, _sFW, _sLA, _sLA, _sLA, _sTW, _sCL, _sIV),  # fin
        (_sES, _sIV, _sES, _sES, _sCW, _sCW, _sTW, _sTW, _sCL, _sIV),  # ack
        (_sIV, _sCL, _sCL, _sCL, _sCL, _sCL, _sCL, _sCL, _sCL, _sCL),  # rst
        (_sIV,) * 10,                                                  # none
    ),
    (  # REPLY
        (_sIV, _sS2, _sIV, _sIV, _sIV, _sIV, _sIV, _sSS, _sIV, _sS2),  # syn
        (_sIV, _sSR, _sIG, _sIG, _sIG, _sIG, _sIG, _sIG, _sIG, _sSR),  # synack
        (_sIV, _sIV, _sFW, _sFW, _sLA, _sLA, _sLA, _sTW, _sCL, _sIV),  # fin
        (_sIV, _sIG, _sSR, _sES, _sCW, _sCW, _sTW, _sTW, _sCL, _sIG),  # ack
        (_sIV, _sCL, _sCL, _sCL, _sCL, _sCL, _sCL, _sCL, _sCL, _sCL),  # rst
        (_sIV,) * 10,                                                  # none
    ),
)


def _tcp_index(flags: int) -> int:
    """get_conntrack_index: which row of the transition table a segment uses."""
    if flags & TCP_RST:
        return _RST
    if flags & TCP_SYN:
        return _SYNACK if flags & TCP_ACK else _SYN
    if flags & TCP_FIN:
        return _FIN
    if flags & TCP_ACK:
        return _ACK
    return _NONE


def _tcp_default_timeouts():
    return {_S.SYN_SENT: 120.0, _S.SYN_RECV: 60.0, _S.ESTABLISHED: 5 * NF_CT_DAY, _S.FIN_WAIT: 120.0,
            _S.CLOSE_WAIT: 60.0, _S.LAST_ACK: 30.0, _S.TIME_WAIT: 120.0, _S.CLOSE: 10.0,
            _S.SYN_SENT2: 120.0, _S.NONE: 0.0}


@attrs.frozen
class CtTimeouts:
    """Conntrack timeouts in seconds (net.netfilter.nf_conntrack_*_timeout defaults)."""

    tcp: dict = attrs.field(factory=_tcp_default_timeouts)
    tcp_unacknowledged: float = 300.0  # TCP_CONNTRACK_UNACK: caps ESTABLISHED before a reply
    udp_unreplied: float = 30.0
    udp_replied: float = 120.0  # "stream" timeout
    udp_stream_delay: float = 2.0  # replied traffic still alive this long after creation → stream
    icmp: float = 30.0
    generic: float = 600.0
    icmpv6: float = 30.0
    gre_unreplied: float = 30.0  # nf_conntrack_proto_gre.c's gre_timeouts[GRE_CT_UNREPLIED]
    gre_replied: float = 180.0  # [GRE_CT_REPLIED], the "stream" timeout

    @classmethod
    def from_sysctls(cls, sysctls: Mapping[str, str]) -> CtTimeouts:
        """A namespace's timeouts: its ``net.netfilter.nf_conntrack_*_timeout*`` sysctls (per namespace,
        nf_conntrack_standalone.c's ``nf_ct_sysctl_table``; the values checked when the topology set them,
        flowsim.config.sysctls) over the defaults."""
        given = {key: float(str(sysctls[key]).strip()) for key in CT_TIMEOUT_SYSCTLS if key in sysctls}
        if not given:
            return DEFAULT_TIMEOUTS
        tcp = _tcp_default_timeouts()
        fields: dict[str, float] = {}
        for key, seconds in given.items():
            name = CT_TIMEOUT_SYSCTLS[key]
            if name.startswith("tcp."):
                tcp[TcpConntrack[name[4:]]] = seconds
            else:
                fields[name] = seconds
        return cls(tcp=tcp, **fields)


DEFAULT_TIMEOUTS = CtTimeouts()

#: nf_conntrack_proto_tcp.c's tcp_loose (per namespace): 0 lets only a SYN start a connection (no mid-stream pickup)
CT_TCP_LOOSE_SYSCTL = "net.netfilter.nf_conntrack_tcp_loose"

#: conntrack's timeout sysctls (nf_conntrack_standalone.c, ``nf_ct_sysctl_table``) -> the :class:`CtTimeouts`
#: field, ``tcp.STATE`` for a TCP state's (SYN_SENT2 has none: it keeps SYN_SENT's default, two minutes)
CT_TIMEOUT_SYSCTLS: dict[str, str] = {
    "net.netfilter.nf_conntrack_generic_timeout": "generic",
    "net.netfilter.nf_conntrack_udp_timeout": "udp_unreplied",
    "net.netfilter.nf_conntrack_udp_timeout_stream": "udp_replied",
    "net.netfilter.nf_conntrack_icmp_timeout": "icmp",
    "net.netfilter.nf_conntrack_icmpv6_timeout": "icmpv6",
    "net.netfilter.nf_conntrack_gre_timeout": "gre_unreplied",
    "net.netfilter.nf_conntrack_gre_timeout_stream": "gre_replied",
    "net.netfilter.nf_conntrack_tcp_timeout_unacknowledged": "tcp_unacknowledged",
    **{f"net.netfilter.nf_conntrack_tcp_timeout_{state}": f"tcp.{state.upper()}"
       for state in ("syn_sent", "syn_recv", "established", "fin_wait", "close_wait", "last_ack", "time_wait",
                     "close")},
}


@attrs.frozen
class CtTuple:
    """struct nf_conntrack_tuple: addresses, ports (ICMP: echo id in sport), protocols."""

    src: ipaddress.IPv4Address | ipaddress.IPv6Address
    dst: ipaddress.IPv4Address | ipaddress.IPv6Address
    sport: int
    dport: int
    l3proto: int  # NFPROTO_IPV4 (2) / NFPROTO_IPV6 (10)
    l4proto: int

    def invert(self) -> CtTuple:
        """nf_ct_invert_tuple: the tuple of the other direction (ICMP keeps its id)."""
        if self.l4proto in _ICMP_ECHO:
            return CtTuple(self.dst, self.src, self.sport, self.dport, self.l3proto, self.l4proto)
        return CtTuple(self.dst, self.src, self.dport, self.sport, self.l3proto, self.l4proto)


@attrs.frozen
class CtCounter:
    """struct nf_conn_counter: one direction's accounting, as read (``CtEntry.acct``; the entry keeps the numbers)."""

    packets: int = 0
    bytes: int = 0


@attrs.define(slots=True, eq=False)
class CtEntry:
    """struct nf_conn.  ``timeout`` is the absolute expiry on the virtual clock."""

    tuplehash: list  # [ORIGINAL tuple, REPLY tuple]
    status: int = 0
    timeout: float = 0.0
    mark: int = 0
    tcp_state: TcpConntrack = TcpConntrack.NONE
    # ip_ct_tcp.seen[ORIGINAL / REPLY].flags, kept flat (issue 16: memory per conntrack entry); read with
    # .tcp_seen_flags
    tcp_seen0: int = 0
    tcp_seen1: int = 0
    tcp_last_dir: int = 0
    tcp_last_index: int = _NONE
    # struct nf_conn_acct, ORIGINAL then REPLY, kept flat (issue 16: memory per conntrack entry); read with .acct
    orig_packets: int = 0
    orig_bytes: int = 0
    reply_packets: int = 0
    reply_bytes: int = 0
    helper: str | None = None  # name of an attached conntrack helper (nfct_help)
    udp_stream_ts: float = 0.0
    id: int = 0

    @property
    def original(self) -> CtTuple:
        return self.tuplehash[IP_CT_DIR_ORIGINAL]

    @property
    def reply(self) -> CtTuple:
        return self.tuplehash[IP_CT_DIR_REPLY]

    @property
    def l4proto(self) -> int:
        return self.tuplehash[0].l4proto

    @property
    def tcp_seen_flags(self) -> tuple[int, int]:
        """ip_ct_tcp.seen[].flags of (ORIGINAL, REPLY), read-only: the conntrack functions set them."""
        return self.tcp_seen0, self.tcp_seen1

    @property
    def acct(self) -> tuple[CtCounter, CtCounter]:
        """The two directions' counters (ORIGINAL, REPLY), read-only: nf_ct_acct_update counts."""
        return CtCounter(self.orig_packets, self.orig_bytes), CtCounter(self.reply_packets, self.reply_bytes)

    def test(self, bit: int) -> bool:
        return bool(self.status & bit)

    @property
    def confirmed(self) -> bool:
        return self.test(IPS_CONFIRMED)

    @property
    def dying(self) -> bool:
        return self.test(IPS_DYING)

    def expires(self, now: float) -> float:
        """nf_ct_expires: seconds left (0 when expired)."""
        return max(self.timeout - now, 0.0)

    def is_expired(self, now: float) -> bool:
        """nf_ct_is_expired: timeout reached."""
        return self.timeout - now <= 0


@attrs.frozen
class CtResult:
    """What nf_conntrack_in attached to the packet.

    ``entry`` is None for invalid packets (nft then sees ``ct state invalid``);
    ``state`` is the nft ct state name; ``new`` says the entry was created now
    and awaits confirmation.
    """

    entry: CtEntry | None
    dir: int | None
    ctinfo: int | None
    state: str
    new: bool = False
    note: str = ""


def nft_ct_state(ctinfo: int | None, has_ct: bool = True) -> str:
    """The ``ct state`` name nft derives from ctinfo (nft_ct_get_eval)."""
    if ctinfo == IP_CT_UNTRACKED:
        return "untracked"
    if not has_ct or ctinfo is None:
        return "invalid"
    return ("established", "related", "new")[ctinfo % IP_CT_IS_REPLY]


#: nf_conntrack_proto_tcp.c's tcp_valid_flags: the combinations of FIN, SYN, RST, ACK and URG it tracks (PSH, ECE
#: and CWR are always valid)
TCP_VALID_FLAGS = frozenset({TCP_SYN, TCP_SYN | TCP_URG, TCP_SYN | TCP_ACK, TCP_RST, TCP_RST | TCP_ACK, TCP_FIN | TCP_ACK,
                             TCP_FIN | TCP_ACK | TCP_URG, TCP_ACK, TCP_ACK | TCP_URG})
TCPH_LEN, UDPH_LEN = 20, 8  # sizeof(struct tcphdr), sizeof(struct udphdr)


def tcp_error(buf, l4off: int, l4len: int) -> str | None:
    """``nf_conntrack_tcp_packet``'s first checks (``skb_header_pointer`` of the header, ``tcp_error``): what makes
    the segment invalid (no entry, nothing counted), or None.  *l4len* is ``skb->len - dataoff``.  The checksum
    check (``nf_conntrack_checksum``, at PREROUTING) is not modelled: flowsim's frames carry valid checksums."""
    if l4len < TCPH_LEN:
        return "short packet"  # th == NULL
    doff = (buf[l4off + 12] >> 4) * 4
    if doff < TCPH_LEN or l4len < doff:
        return "truncated packet"
    if buf[l4off + 13] & ~(TCP_ECE | TCP_CWR | TCP_PSH) not in TCP_VALID_FLAGS:
        return "invalid tcp flag combination"
    return None


def udp_error(buf, l4off: int, l4len: int) -> str | None:
    """``udp_error`` (``nf_conntrack_udp_packet``): a header cut short, or a length field past the packet or below
    the header's own; None when the datagram is tracked.  The checksum is not checked here (see :func:`tcp_error`)."""
    if l4len < UDPH_LEN:
        return "short packet"
    length = (buf[l4off + 4] << 8) | buf[l4off + 5]
    if length > l4len or length < UDPH_LEN:
        return "truncated/malformed packet"
    return None


def nf_conntrack_tcp_set_closing(ct: CtEntry, now: float, timeouts: CtTimeouts) -> None:
    """``nf_conntrack_tcp_set_closing`` (nf_conntrack_proto_tcp.c), what ``nf_ct_set_closing`` does when nft's
    ``reject with tcp reset`` answers a connection's segment: a confirmed entry goes to CLOSE, with CLOSE's
    timeout unless it was CLOSE already or has a fixed timeout."""
    if not ct.confirmed:
        return
    old = ct.tcp_state
    ct.tcp_state = TcpConntrack.CLOSE
    if old == TcpConntrack.CLOSE or ct.test(IPS_FIXED_TIMEOUT):
        return
    ct.timeout = now + timeouts.tcp[TcpConntrack.CLOSE]


def nf_conntrack_tcp_established(ct: CtEntry) -> bool:
    """TCP ESTABLISHED *and* IPS_ASSURED: what nft_flow_offload_eval requires of TCP."""
    return ct.tcp_state == TcpConntrack.ESTABLISHED and ct.test(IPS_ASSURED)


def flow_offload_ct_tcp(ct: CtEntry) -> None:
    """Set IP_CT_TCP_FLAG_BE_LIBERAL both ways: conntrack will miss offloaded segments (``nft_flow_offload_eval``)."""
    ct.tcp_seen0 |= IP_CT_TCP_FLAG_BE_LIBERAL
    ct.tcp_seen1 |= IP_CT_TCP_FLAG_BE_LIBERAL


def nf_ct_acct_update(ct: CtEntry, dir: int, length: int, packets: int = 1) -> None:
    """Account *packets* of *length* bytes total to direction *dir* (slow path, or fast path with `counter`)."""
    if dir == IP_CT_DIR_ORIGINAL:
        ct.orig_packets += packets
        ct.orig_bytes += length
    else:
        ct.reply_packets += packets
        ct.reply_bytes += length


def _refresh_acct(ct: CtEntry, dir: int, length: int, now: float, extra: float) -> None:
    """nf_ct_refresh_acct: new timeout unless fixed, and account the packet."""
    if not ct.test(IPS_FIXED_TIMEOUT):
        ct.timeout = now + extra
    nf_ct_acct_update(ct, dir, length)


def nf_conntrack_tcp_packet(ct: CtEntry, dir: int, flags: int, length: int, now: float,
                            timeouts: CtTimeouts = DEFAULT_TIMEOUTS) -> str:
    """One TCP segment through the state table (nf_conntrack_tcp_packet, no window check).

    Returns ``"accept"``, ``"invalid"`` (sIV: the packet gets no ct),
    ``"ignore"`` (sIG: accepted, state unchanged), ``"kill"`` (RST before any
    reply: the entry dies) or ``"repeat"`` (SYN reopening a closed connection:
    the caller kills the entry and looks up again).
    """
    old = ct.tcp_state
    index = _tcp_index(flags)
    new = _TCP_CONNTRACKS[dir][index][old]
    if new == _S.SYN_SENT and old >= _S.TIME_WAIT:
        seen = ct.tcp_seen0 | ct.tcp_seen1
        if seen & IP_CT_TCP_FLAG_CLOSE_INIT or (ct.tcp_last_dir == dir and ct.tcp_last_index == _RST):
            return "repeat"  # reopened connection: delete this one, look up again
        new = _S.IGNORE
    if new == _S.IGNORE:
        ct.tcp_last_dir, ct.tcp_last_index = dir, index
        return "ignore"
    if new == _S.MAX:
        return "invalid"
    ct.tcp_last_dir, ct.tcp_last_index = dir, index
    ct.tcp_state = new
    if old != new and new == _S.FIN_WAIT:
        if dir == IP_CT_DIR_ORIGINAL:
            ct.tcp_seen0 |= IP_CT_TCP_FLAG_CLOSE_INIT
        else:
            ct.tcp_seen1 |= IP_CT_TCP_FLAG_CLOSE_INIT
    timeout = timeouts.tcp[_S.CLOSE] if index == _RST else timeouts.tcp[new]
    if not ct.test(IPS_SEEN_REPLY):
        if flags & TCP_RST:
            return "kill"  # only reply is a RST: no established connection to keep
        if new == _S.ESTABLISHED:  # mid-stream pickup: avoid the huge ESTABLISHED timeout
            timeout = min(timeout, timeouts.tcp_unacknowledged)
    elif not ct.test(IPS_ASSURED) and old in (_S.SYN_RECV, _S.ESTABLISHED) and new == _S.ESTABLISHED:
        ct.status |= IPS_ASSURED  # valid ACK in ESTABLISHED after SYN_RECV: handshake complete
    _refresh_acct(ct, dir, length, now, timeout)
    return "accept"


def nf_conntrack_udp_packet(ct: CtEntry, dir: int, length: int, now: float,
                            timeouts: CtTimeouts = DEFAULT_TIMEOUTS) -> str:
    """nf_conntrack_udp_packet: unreplied 30 s; replied and alive after 2 s: stream, 120 s, ASSURED."""
    if ct.test(IPS_SEEN_REPLY):
        extra, stream = timeouts.udp_unreplied, False
        if now > ct.udp_stream_ts:
            extra, stream = timeouts.udp_replied, not ct.test(IPS_ASSURED)
        _refresh_acct(ct, dir, length, now, extra)
        if stream and not ct.test(IPS_NAT_CLASH):  # never ASSURED for NAT clash entries
            ct.status |= IPS_ASSURED
    else:
        _refresh_acct(ct, dir, length, now, timeouts.udp_unreplied)
    return "accept"


def nf_conntrack_gre_packet(ct: CtEntry, dir: int, length: int, now: float,
                            timeouts: CtTimeouts = DEFAULT_TIMEOUTS) -> str:
    """nf_conntrack_gre_packet (nf_conntrack_proto_gre.c): unreplied 30 s; once a reply was seen (the packet after
    it: nf_conntrack_in sets IPS_SEEN_REPLY after the handler) the stream timeout, 180 s, and ASSURED.  The
    kernel copies both timeouts into the entry at its first packet; flowsim reads the namespace's at each packet
    (the same unless a run event changes the sysctls while the connection lives)."""
    if ct.test(IPS_SEEN_REPLY):
        _refresh_acct(ct, dir, length, now, timeouts.gre_replied)
        if not ct.test(IPS_NAT_CLASH):  # never ASSURED for NAT clash entries
            ct.status |= IPS_ASSURED
    else:
        _refresh_acct(ct, dir, length, now, timeouts.gre_unreplied)
    return "accept"


class ConntrackTable:
    """The conntrack hash table of one namespace (``net->ct``) on a virtual clock.

    >>> import ipaddress as ip
    >>> ct = ConntrackTable()
    >>> t = CtTuple(ip.ip_address("10.0.1.99"), ip.ip_address("10.0.2.99"), 40000, 12345, 2, 6)
    >>> r = ct.nf_conntrack_in(t, 0.0, tcp_flags=TCP_SYN, length=60)
    >>> r.state, r.entry.tcp_state.name, ct.nf_conntrack_confirm(r.entry, 0.0)
    ('new', 'SYN_SENT', True)
    """

    def __init__(self, timeouts: CtTimeouts = DEFAULT_TIMEOUTS, *, tcp_loose: bool = True):
        self.timeouts = timeouts
        self.tcp_loose = tcp_loose  # net.netfilter.nf_conntrack_tcp_loose: pick up mid-stream
        # the hash of both tuples of every confirmed entry, one dict per direction (the direction is which dict:
        # no (entry, direction) pair per tuple, issue 16: memory per connection).  A tuple is in at most one:
        # the clash test of nf_conntrack_confirm, and a tuple that is its own inverse is only the REPLY one
        self._orig: dict[CtTuple, CtEntry] = {}
        self._reply: dict[CtTuple, CtEntry] = {}
        self._next_id = 1

    # --- table
    def __len__(self) -> int:
        return (len(self._orig) + len(self._reply)) // 2

    def entries(self) -> Iterator[CtEntry]:
        """Confirmed entries, each once (in the order they were confirmed)."""
        yield from list(self._orig.values())

    def _find(self, t: CtTuple) -> CtEntry | None:
        """The entry either of whose tuples is *t*."""
        ct = self._orig.get(t)
        return self._reply.get(t) if ct is None else ct

    def lookup(self, t: CtTuple, now: float | None = None) -> tuple[CtEntry, int] | None:
        """nf_conntrack_find_get: (entry, direction) for either tuple; expired entries are reaped."""
        ct = self._orig.get(t)
        if ct is not None:
            d = IP_CT_DIR_ORIGINAL
        else:
            ct = self._reply.get(t)
            if ct is None:
                return None
            d = IP_CT_DIR_REPLY
        if now is not None and ct.is_expired(now):
            self.nf_ct_kill(ct)
            return None
        return ct, d

    def create(self, t: CtTuple, now: float) -> CtEntry:
        """init_conntrack: a new unconfirmed entry (reply = inverted tuple), not in the hash."""
        # the ports as shared int objects: the parsed packet's are its own, and the entry outlives it
        t = CtTuple(t.src, t.dst, shared_u16(t.sport), shared_u16(t.dport), t.l3proto, t.l4proto)
        ct = CtEntry(tuplehash=[t, t.invert()], timeout=now, id=self._next_id)
        self._next_id += 1
        return ct

    def nf_conntrack_confirm(self, ct: CtEntry, now: float) -> bool:
        """__nf_conntrack_confirm: insert both tuples; False on a clash (the packet is dropped)."""
        if ct.confirmed:
            return True
        if ct.dying:
            return False
        for t in ct.tuplehash:
            other = self._find(t)
            if other is not None and other is not ct:
                return False
        ct.status |= IPS_CONFIRMED
        orig, reply = ct.tuplehash
        if orig != reply:  # one tuple for both directions (its own inverse) is found as the REPLY one
            self._orig[orig] = ct
        self._reply[reply] = ct
        return True

    def nf_ct_kill(self, ct: CtEntry) -> None:
        """Mark dying and unhash (nf_ct_delete)."""
        ct.status |= IPS_DYING
        for t in ct.tuplehash:
            if self._orig.get(t) is ct:
                del self._orig[t]
            elif self._reply.get(t) is ct:
                del self._reply[t]

    def gc(self, now: float) -> list[CtEntry]:
        """gc_worker: kill every expired entry; returns them."""
        dead = [ct for ct in self.entries() if ct.is_expired(now)]
        for ct in dead:
            self.nf_ct_kill(ct)
        return dead

    def nf_ct_refresh(self, ct: CtEntry, now: float, extra: float) -> None:
        """nf_ct_refresh: expiry = now + extra (flow_offload_add uses NF_CT_DAY)."""
        ct.timeout = now + extra

    # --- per packet
    def nf_conntrack_in(self, t: CtTuple, now: float, *, tcp_flags: int = 0, length: int = 0,
                        icmp_type: int | None = None, related_to: CtTuple | None = None) -> CtResult:
        """Track one packet whose tuple is *t* (nf_conntrack_in + resolve_normal_ct).

        ICMP errors pass the tuple of the packet they quote as *related_to*:
        they belong to that connection as RELATED, or are invalid.  A RELATED error is not counted in the
        connection's accounting: ``nf_conntrack_handle_icmp`` sets the skb's entry and nf_conntrack_in goes to
        ``out``, before ``nf_conntrack_handle_packet`` and its ``nf_ct_refresh_acct``.
        """
        if related_to is not None:
            hit = self.lookup(related_to, now)
            if hit is None:
                return CtResult(None, None, None, "invalid", note="ICMP error for no connection")
            ct, d = hit
            # the quoted packet went the other way: an error about ORIGINAL traffic travels in REPLY
            d = 1 - d
            return CtResult(ct, d, IP_CT_RELATED + (IP_CT_IS_REPLY if d else 0), "related")
        for _ in range(2):  # a TCP reopen kills the old entry and looks up again (-NF_REPEAT)
            hit = self.lookup(t, now)
            if hit is None:
                ct, d = self.create(t, now), IP_CT_DIR_ORIGINAL
                verdict = self._new(ct, t, tcp_flags, icmp_type)
                if verdict != "accept":
                    return CtResult(None, None, None, "invalid", note=verdict)
            else:
                ct, d = hit
            ctinfo = (IP_CT_ESTABLISHED_REPLY if d else
                      IP_CT_ESTABLISHED if ct.test(IPS_SEEN_REPLY) else
                      IP_CT_RELATED if ct.test(IPS_EXPECTED) else IP_CT_NEW)
            verdict = self._handle_packet(ct, d, t, tcp_flags, length, now)
            if verdict == "repeat":
                self.nf_ct_kill(ct)
                continue
            break
        if verdict == "invalid":
            return CtResult(None, None, None, "invalid", note="out of state")
        if verdict == "kill":
            self.nf_ct_kill(ct)
        elif d == IP_CT_DIR_REPLY:  # accept or ignore: the packet keeps its ct
            ct.status |= IPS_SEEN_REPLY
        return CtResult(ct, d, ctinfo, nft_ct_state(ctinfo), new=not ct.confirmed, note=verdict)

    def _new(self, ct: CtEntry, t: CtTuple, tcp_flags: int, icmp_type: int | None) -> str:
        """The l4 'new' checks: which first packets may create a connection (tcp_new, icmp_new)."""
        if t.l4proto == 6:
            first = _TCP_CONNTRACKS[0][_tcp_index(tcp_flags)][_S.NONE]
            if first == _S.MAX or (first == _S.ESTABLISHED and not self.tcp_loose):
                return "TCP segment cannot start a connection"
            if first == _S.ESTABLISHED:  # mid-stream pickup: no window knowledge at all
                ct.tcp_seen0 = ct.tcp_seen1 = IP_CT_TCP_FLAG_BE_LIBERAL
        elif t.l4proto in _ICMP_ECHO and icmp_type is not None and icmp_type != _ICMP_ECHO[t.l4proto][0]:
            return "ICMP type cannot start a connection"
        return "accept"

    def _handle_packet(self, ct, d, t, tcp_flags, length, now) -> str:
        """nf_conntrack_handle_packet: dispatch by layer-4 protocol."""
        if t.l4proto == 6:
            return nf_conntrack_tcp_packet(ct, d, tcp_flags, length, now, self.timeouts)
        if t.l4proto in (17, 136):
            if not ct.confirmed:  # replies within the first 2 s do not make a stream yet
                ct.udp_stream_ts = now + self.timeouts.udp_stream_delay
            return nf_conntrack_udp_packet(ct, d, length, now, self.timeouts)
        if t.l4proto == IPPROTO_GRE:
            return nf_conntrack_gre_packet(ct, d, length, now, self.timeouts)
        extra = self.timeouts.icmp if t.l4proto == IPPROTO_ICMP else \
            self.timeouts.icmpv6 if t.l4proto == IPPROTO_ICMPV6 else self.timeouts.generic
        _refresh_acct(ct, d, length, now, extra)
        return "accept"

    # --- NAT
    def nf_nat_used_tuple(self, t: CtTuple, ignored: CtEntry) -> bool:
        """Is the REPLY tuple that *t* would produce already taken by another entry?"""
        other = self._find(t.invert())
        return other is not None and other is not ignored

    def nf_nat_setup_info(self, ct: CtEntry, manip: str, rng: NatRange | None) -> bool:
        """Bind SRC or DST NAT (None: the null binding); rewrites the REPLY tuple.

        Returns True when the tuple changed (IPS_SRC_NAT / IPS_DST_NAT set).
        """
        done = IPS_SRC_NAT_DONE if manip == "src" else IPS_DST_NAT_DONE
        if ct.status & done:
            raise ValueError(f"NAT {manip} already set up for conntrack {ct.id}")
        curr = ct.tuplehash[IP_CT_DIR_REPLY].invert()  # the original tuple as NAT'ed so far
        new = curr if rng is None else get_unique_tuple(self, curr, rng, manip, ct)
        changed = new != curr
        if changed:
            ct.tuplehash[IP_CT_DIR_REPLY] = new.invert()  # nf_conntrack_alter_reply
            ct.status |= IPS_SRC_NAT if manip == "src" else IPS_DST_NAT
        ct.status |= done
        return changed

    # --- flowtable hooks (nf_flow_table_core.c)
    def flow_offload_fixup_ct(self, ct: CtEntry, now: float, *, closing: bool, flow_expired: bool,
                              offload_timeout: float = 30.0, mode: str = "expired") -> None:
        """Hand the connection back to conntrack on flow teardown (flow_offload_fixup_ct).

        *mode* is the profile's ``fixup_ct_timeout``: the offload timeout is taken off only when the flow
        expired ('expired'), or always ('state'; 'replied' also gives UDP the replied timeout always)."""
        if ct.l4proto == 6:
            if closing:
                state, expired = _S.CLOSE, False
            else:
                state, expired = ct.tcp_state, flow_expired
            ct.tcp_state = state  # flow_offload_fixup_tcp
            if state == _S.CLOSE:
                ct.tcp_seen0 |= IP_CT_TCP_FLAG_CLOSE_INIT  # a new SYN reopens
            ct.tcp_seen0 &= ~IP_CT_TCP_FLAG_MAXACK_SET
            ct.tcp_seen1 &= ~IP_CT_TCP_FLAG_MAXACK_SET
            timeout = self.timeouts.tcp[state]
        elif ct.l4proto == 17:
            replied = mode == "replied" or ct.test(IPS_SEEN_REPLY)
            timeout = self.timeouts.udp_replied if replied else self.timeouts.udp_unreplied
            expired = flow_expired
        else:
            return
        if expired or mode != "expired":
            timeout -= offload_timeout
        timeout = max(timeout, 0.0)
        if closing or ct.timeout - now > timeout:
            self.nf_ct_refresh(ct, now, timeout)

    def nf_flow_table_extend_ct_timeout(self, ct: CtEntry, now: float, mode: str = "flowtable-gc") -> bool:
        """Keep an offloaded ct from expiring while its flow lives; True when the kernel would WARN.

        *mode* is the profile's ``ct_offload_timeout``.  'flowtable-gc', ``nf_flow_table_extend_ct_timeout``
        (the flowtable GC, ``nf_flow_offload_gc_step``): when under 5 minutes remain, UDP gets a day, TCP a day
        when ESTABLISHED and 5 minutes in the closing states, nothing in the others; any other protocol hits
        the switch's ``default: WARN_ON_ONCE(1)`` with ``new_timeout`` still 1, so the entry expires a jiffy later
        (GRE, whose flows nft_flow_offload_eval adds: a day after ``flow_offload_add``'s ``nf_ct_refresh(ct,
        NF_CT_DAY)`` the entry dies and its flow is torn down as "ct dying").  'conntrack-gc',
        ``nf_ct_offload_timeout`` (conntrack's ``gc_worker``, which visits an entry at least once a minute; run
        here with the flowtable GC): a day for any protocol, when under half a day remains."""
        if not (ct.confirmed and ct.test(IPS_OFFLOAD)):
            return False
        expires = ct.expires(now)
        if mode == "conntrack-gc":
            if expires < CT_OFFLOAD_EXTEND_UNDER[mode]:
                self.nf_ct_refresh(ct, now, NF_CT_DAY)
            return False
        min_timeout = CT_OFFLOAD_EXTEND_UNDER[mode]
        if expires <= 0 or expires >= min_timeout:
            return False
        warn = False
        if ct.l4proto == 17 or ct.l4proto == 6 and ct.tcp_state == _S.ESTABLISHED:
            new = NF_CT_DAY
        elif ct.l4proto == 6 and ct.tcp_state in (_S.FIN_WAIT, _S.CLOSE_WAIT, _S.LAST_ACK, _S.TIME_WAIT):
            new = min_timeout
        elif ct.l4proto == 6:
            return False
        else:
            new, warn = 1 / HZ, True
        self.nf_ct_refresh(ct, now, new)
        return warn


# ----------------------------------------------------------------- NAT of a packet at a hook

#: HOOK2MANIP
_HOOK_MANIP = {"prerouting": "dst", "output": "dst", "postrouting": "src", "input": "src"}


def nf_nat_packet(ct: CtEntry, dir: int, hook: str, buf: bytearray, l3off: int) -> bool:
    """Apply the connection's NAT for this hook to the packet bytes (nf_nat_packet).

    SRC manips happen at postrouting/input, DST at prerouting/output; a reply
    packet gets the inverse (an SNAT'ed connection's replies are DNAT'ed at
    prerouting).  Returns True when the packet was rewritten.
    """
    manip = _HOOK_MANIP[hook]
    statusbit = IPS_SRC_NAT if manip == "src" else IPS_DST_NAT
    if dir == IP_CT_DIR_REPLY:
        statusbit ^= IPS_NAT_MASK
    if not ct.status & statusbit:
        return False
    target = ct.tuplehash[1 - dir].invert()
    nf_nat_manip_pkt(buf, l3off, manip, target)
    return True
