"""ICMP error rate limits: the host-wide token bucket and the per-destination one (net/ipv4/icmp.c,
net/ipv6/icmp.c, net/ipv4/inetpeer.c), as Debian's 6.1.192, 6.12.118 and 7.2.13 sources have them.

Theory of operation
-------------------
``__icmp_send`` / ``icmp6_send`` ask two limiters, in this order, once the error is eligible:

1. ``icmpv4_global_allow`` / ``icmpv6_global_allow``: a type outside the rate mask (IPv4's
   ``net.ipv4.icmp_ratemask``, default 0x1818: destination unreachable but Fragmentation Needed, source
   quench, time exceeded, parameter problem; IPv6's ``icmpv6_ratemask``, every error type but Packet Too Big)
   is never limited.  Otherwise ``icmp_global_allow``: the namespace's credit (``net.ipv4.icmp_msgs_per_sec``
   per second, at most ``net.ipv4.icmp_msgs_burst``, refilled at most every ``HZ / 50`` jiffies) must be
   positive.  Both families share it.  Skipped for a packet that came in on a loopback device.
2. ``icmpv4_xrlim_allow`` / ``icmpv6_xrlim_allow``, after the route to the offender's source: only when the
   global step applied, and not through a loopback device.  ``inet_peer_xrlim_allow`` on the destination's
   ``inet_peer``: a bucket of jiffies that fills by the time elapsed, up to ``XRLIM_BURST_FACTOR`` (6) times
   the timeout, and pays one timeout per error.  A new peer starts full (``rate_last`` 60 s in the past), so
   six errors go back to back, then one per timeout: ``net.ipv4.icmp_ratelimit`` (1000 ms) for IPv4,
   ``net.ipv6.icmp.ratelimit`` for IPv6, which up to 6.19 was 1000 ms shifted right by
   ``(128 - plen) >> 5`` for the route's prefix length ``plen`` (a /64 route: 250 ms) and since 0201eedb69b2
   ("ipv6: icmp: remove obsolete code in icmpv6_xrlim_allow()", 7.0) is 100 ms for every route.  An allowed
   error then pays the global credit (``icmp_global_consume``).

An IPv4 packet whose input route failed reaches ``icmp_send`` through ``ip_error`` (net/ipv4/route.c), which
first takes ``ip_rt_error_cost`` (HZ) from the same ``inet_peer`` bucket, capped at ``ip_rt_error_burst``
(5 HZ): with the per-destination limit after it, such an error costs two seconds of tokens, and a new peer
gets two back to back.  IPv6's route errors (``ip6_pkt_drop``) have no such step.

Time is counted in jiffies of ``HZ`` = 250 (``CONFIG_HZ`` of Debian's amd64 kernels), as the kernel counts it:
two errors within the same 4 ms tick see no time pass.  ``icmp_global_consume`` takes a random 0, 1 or 2
credits per error (``get_random_u32_below(3)``, for security); flowsim takes their mean, one, so that runs are
reproducible: with the kernel's randomness the global limit's cut-off varies around the modelled one.  The
per-destination limit, which decides for traffic to a few hosts, has no randomness.  Not modelled:
``net.ipv6.icmp.ratemask`` set to another list, ``inet_peer`` entries aged out (a peer unused for minutes
would start full again, as it refills to full within six timeouts anyway).
"""

from __future__ import annotations

import attrs

from flowsim.kernel.headers import HZ
from flowsim.kernel.pkt import ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, ICMPV6_PKT_TOOBIG

__all__ = ["HZ", "XRLIM_BURST_FACTOR", "ICMP_RATEMASK", "IcmpRateLimits", "jiffies", "msecs_to_jiffies",
           "icmpv4_mask_allow", "icmpv6_mask_allow", "icmp_global_allow", "icmp_global_consume",
           "inet_peer_xrlim_allow", "ip_error_allow", "icmpv6_peer_timeout"]

XRLIM_BURST_FACTOR = 6  # net/ipv4/inetpeer.c
ICMP_RATEMASK = 0x1818  # icmp_sk_init: destination unreachable, source quench, time exceeded, parameter problem
NR_ICMP_TYPES = 18  # include/uapi/linux/icmp.h
ICMPV6_ERRMSG_MAX = 127  # inet6_net_init: bitmap_set(icmpv6_ratemask, 0, ICMPV6_ERRMSG_MAX + 1), less Packet Too Big
ICMPV6_MSG_MAX = 255
_NEW_PEER_AGE = 60 * HZ  # inet_getpeer: rate_last = jiffies - 60*HZ, "chosen enough high"
IP_RT_ERROR_COST, IP_RT_ERROR_BURST = HZ, 5 * HZ  # net/ipv4/route.c (net.ipv4.route.error_cost / _burst: init_net only)


def jiffies(now: float) -> int:
    """The tick of virtual time *now* (seconds)."""
    return int(now * HZ)


def msecs_to_jiffies(ms: int) -> int:
    """``msecs_to_jiffies`` for HZ = 250: rounded up (``proc_dointvec_ms_jiffies`` stores the sysctl so)."""
    return -(-ms * HZ // 1000) if ms > 0 else 0


@attrs.define(slots=True)
class IcmpRateLimits:
    """One namespace's limiter state: ``net->ipv4.icmp_global_credit`` / ``_stamp`` and the ``inet_peer``
    buckets of each family (``net->ipv4.peers``, ``net->ipv6.peers``): address -> [rate_tokens, rate_last]."""

    credit: int = 0
    stamp: int | None = None  # None: never refilled (the kernel's stamp 0, a long time ago)
    peers: dict = attrs.Factory(dict)
    # the kernel's counters of refused errors, /proc/net/snmp's Icmp: OutRateLimitGlobal (both families count
    # there: icmpv6_global_allow increments the IPv4 MIB) and OutRateLimitHost, /proc/net/snmp6's
    # Icmp6OutRateLimitHost; and ip_error's refusals, which the kernel counts nowhere
    limited_global: int = 0  # ICMP_MIB_RATELIMITGLOBAL
    limited_host: int = 0  # ICMP_MIB_RATELIMITHOST
    limited_host6: int = 0  # ICMP6_MIB_RATELIMITHOST
    limited_route: int = 0  # ip_error's own refusals

    @property
    def limited(self) -> int:
        """Errors not sent for a rate limit, every kind."""
        return self.limited_global + self.limited_host + self.limited_host6 + self.limited_route

    def counters(self) -> dict[str, int]:
        """The refusals by kind, as a run reports them (``icmp_rate_limits``)."""
        return {"ratelimit_global": self.limited_global, "ratelimit_host": self.limited_host,
                "ratelimit_host6": self.limited_host6, "ip_error": self.limited_route}


def icmpv4_mask_allow(icmp_type: int, code: int, ratemask: int) -> bool:
    """``icmpv4_mask_allow``: True when the type is never limited."""
    if icmp_type > NR_ICMP_TYPES:
        return True
    if icmp_type == ICMP_DEST_UNREACH and code == ICMP_FRAG_NEEDED:  # "Don't limit PMTU discovery."
        return True
    return not (1 << icmp_type) & ratemask


def icmpv6_mask_allow(icmp_type: int) -> bool:
    """``icmpv6_mask_allow`` with the default ``icmpv6_ratemask`` (0-1,3-127)."""
    if icmp_type > ICMPV6_MSG_MAX:
        return True
    return icmp_type == ICMPV6_PKT_TOOBIG or icmp_type > ICMPV6_ERRMSG_MAX


def icmp_global_allow(state: IcmpRateLimits, now: int, per_sec: int, burst: int) -> bool:
    """``icmp_global_allow`` at jiffy *now*: credit left, or refilled by the time since the last refill."""
    if state.credit > 0:
        return True
    delta = HZ if state.stamp is None else min(now - state.stamp, HZ)
    if delta < HZ // 50:
        return False
    incr = per_sec * delta // HZ
    if not incr:
        return False
    state.stamp = now
    state.credit = min(state.credit + incr, burst)
    return True


def icmp_global_consume(state: IcmpRateLimits) -> None:
    """``icmp_global_consume``: one credit (the mean of the kernel's random 0, 1 or 2; see the module docstring)."""
    state.credit -= 1


def inet_peer_xrlim_allow(state: IcmpRateLimits, addr, now: int, timeout: int) -> bool:
    """``inet_peer_xrlim_allow`` on the peer of *addr* (created by ``inet_getpeer`` when new), at jiffy *now*."""
    peer = _getpeer(state, addr, now)
    token = peer[0]
    delta = now - peer[1]
    if delta:
        peer[1] = now
        token = min(token + delta, XRLIM_BURST_FACTOR * timeout)
    return _pay(peer, token, timeout)


def ip_error_allow(state: IcmpRateLimits, addr, now: int) -> bool:
    """``ip_error``'s own check on the offender's ``inet_peer`` (net/ipv4/route.c): the bucket fills by the time
    elapsed up to ``ip_rt_error_burst`` (5 HZ) and pays ``ip_rt_error_cost`` (HZ) an error.  The same bucket
    as :func:`inet_peer_xrlim_allow`'s, which ``icmp_send`` asks next: a route error costs two timeouts, so
    back to back a new peer gets two errors, not six."""
    peer = _getpeer(state, addr, now)
    token = min(peer[0] + now - peer[1], IP_RT_ERROR_BURST)
    peer[1] = now
    return _pay(peer, token, IP_RT_ERROR_COST)


def _pay(peer: list, token: int, cost: int) -> bool:
    """Both buckets' last step: take *cost* from the refilled *token* when it holds that much; keep the rest."""
    allowed = token >= cost
    peer[0] = token - cost if allowed else token
    return allowed


def _getpeer(state: IcmpRateLimits, addr, now: int) -> list:
    """``inet_getpeer``: the peer of *addr*, created with no tokens and ``rate_last`` 60 s ago."""
    peer = state.peers.get(addr)
    if peer is None:
        peer = state.peers[addr] = [0, now - _NEW_PEER_AGE]
    return peer


def icmpv6_peer_timeout(ratelimit_ms: int, prefix_len: int | None) -> int:
    """``icmpv6_xrlim_allow``'s timeout in jiffies: ``net.ipv6.icmp.ratelimit``, shifted for a route of
    *prefix_len* bits when the kernel still did (``prefix_len`` None: 0201eedb69b2 and later)."""
    tmo = msecs_to_jiffies(ratelimit_ms)
    if prefix_len is not None and prefix_len < 128:
        tmo >>= (128 - prefix_len) >> 5
    return tmo
