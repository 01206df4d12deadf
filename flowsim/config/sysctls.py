"""The sysctls flowsim reads as numbers: one table of them with what each may hold, checked where a topology sets
them (``sysctls = {…}``, ``sysctl -w`` lines), so that a bad value is one located error, not a crash mid-run.

Theory of operation
-------------------
Some keys are turned into numbers by the simulator: the flowtable's and conntrack's timeouts
(``proc_dointvec_jiffies``: whole seconds in the kernel, any non-negative number of seconds here, within a
run's virtual time), the PMTU exceptions' life, the neighbour table's hard limit and the ICMP rate limits
(``proc_dointvec``).
The switches it reads (forwarding, ``promote_secondaries``, ``nf_conntrack_tcp_loose``, ``route_localnet``, …)
must be integers, as ``proc_dointvec`` wants: 0 is off, any other on.  Every other sysctl is kept as the text
it was given (a key flowsim does not model is inert), but a key must belong to the ``net.`` tree: the only
sysctls a network namespace has.  :func:`sysctl_problem` says what is wrong with one key and value.

The keys come from the kernel modules that read them; the bounds from :mod:`flowsim.config.limits`.
"""

from __future__ import annotations

import math
import re

import attrs

from flowsim.config.limits import MAX_VIRTUAL_TIME
from flowsim.kernel.conntrack import CT_TCP_LOOSE_SYSCTL, CT_TIMEOUT_SYSCTLS
from flowsim.kernel.flowtable.core import FLOW_TIMEOUT_SYSCTLS

__all__ = ["SECONDS_SYSCTLS", "INTEGER_SYSCTLS", "SWITCH_SYSCTLS", "SysctlProblem", "sysctl_problem"]

#: sysctls read as seconds
SECONDS_SYSCTLS = frozenset({
    *FLOW_TIMEOUT_SYSCTLS.values(),  # flow_offload_get_timeout
    "net.ipv4.route.mtu_expires", "net.ipv6.route.mtu_expires",  # ip_rt_mtu_expires / ip6_rt_mtu_expires
    *CT_TIMEOUT_SYSCTLS,  # conntrack's, per namespace (CtTimeouts.from_sysctls)
})
#: sysctls read as integers (proc_dointvec: an int)
INTEGER_SYSCTLS = frozenset({"net.ipv4.neigh.default.gc_thresh3", "net.ipv6.neigh.default.gc_thresh3",
                             "net.ipv4.ipfrag_max_dist",
                             # icmp_send's rate limits (flowsim.kernel.icmp_limit): milliseconds, a mask, counts
                             "net.ipv4.icmp_ratelimit", "net.ipv6.icmp.ratelimit", "net.ipv4.icmp_ratemask",
                             "net.ipv4.icmp_msgs_per_sec", "net.ipv4.icmp_msgs_burst"})
#: switches flowsim reads (0 off, another integer on; proc_dointvec refuses anything but an integer)
SWITCH_SYSCTLS = re.compile(r"net\.ipv4\.ip_forward|net\.ipv[46]\.conf\.[^.]+\.forwarding"
                            r"|net\.ipv4\.conf\.[^.]+\.promote_secondaries|" + re.escape(CT_TCP_LOOSE_SYSCTL) +
                            # source address selection (flowsim.kernel.saddr, icmp_send)
                            r"|net\.ipv4\.conf\.[^.]+\.route_localnet|net\.ipv6\.conf\.[^.]+\.use_oif_addrs_only"
                            r"|net\.ipv4\.icmp_errors_use_inbound_ifaddr")
#: a namespace's sysctls are the net.* tree, the one /proc/sys holds per network namespace; a component is
#: a /proc/sys directory or file name ("/" stands for a "." inside one, as in a VLAN device's name)
_NETNS_SYSCTL = re.compile(r"net(\.[^.\s\x00-\x1f]+)+")
_INT_MAX = (1 << 31) - 1
_INT_MIN = -(1 << 31)


@attrs.frozen
class SysctlProblem:
    """What is wrong with a sysctl's value, and what was expected."""

    what: str
    expected: str


def sysctl_problem(key: str, value: str) -> SysctlProblem | None:
    """None if *key* names a sysctl of a network namespace and *value* is one it may hold, else what is wrong."""
    if not _NETNS_SYSCTL.fullmatch(key):
        return SysctlProblem("not a sysctl of a network namespace",
                             "a key of the net. tree, its names separated by single dots (net.ipv4.ip_forward)")
    text = str(value).strip()
    if key in SECONDS_SYSCTLS:
        expected = f"a number of seconds, 0 to {MAX_VIRTUAL_TIME:.0f}"
        try:
            seconds = float(text)
        except ValueError:
            return SysctlProblem("not a number", expected)
        if not math.isfinite(seconds) or not 0 <= seconds <= MAX_VIRTUAL_TIME:
            return SysctlProblem("out of range", f"{expected} (a run's virtual time)")
    elif key in INTEGER_SYSCTLS:
        return _integer_problem(text, 0, f"an integer, 0 to {_INT_MAX}")
    elif SWITCH_SYSCTLS.fullmatch(key):
        return _integer_problem(text, _INT_MIN, "0 (off) or 1 (on)")
    return None


def _integer_problem(text: str, lowest: int, expected: str) -> SysctlProblem | None:
    """``proc_dointvec``: a decimal int from *lowest* to INT_MAX."""
    try:
        number = int(text, 10)
    except ValueError:
        return SysctlProblem("not an integer", expected)
    return None if lowest <= number <= _INT_MAX else SysctlProblem("out of range", expected)
