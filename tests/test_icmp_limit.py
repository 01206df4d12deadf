"""ICMP error rate limits (flowsim.kernel.icmp_limit), as Debian's 6.1.192, 6.12.118 and 7.2.13 sources have
them: ``icmp_global_allow`` / ``icmp_global_consume`` and ``icmpv4_xrlim_allow`` (net/ipv4/icmp.c),
``icmpv6_xrlim_allow`` (net/ipv6/icmp.c), ``inet_peer_xrlim_allow`` (net/ipv4/inetpeer.c), called from
``__icmp_send`` / ``icmp6_send`` in that order."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from flowsim.config.topology import load_topology, load_topology_text
from flowsim.conform.parse import SNMP_RATE_LIMITS, parse_snmp
from flowsim.errors import TopologyError
from flowsim.kernel.icmp_limit import (
    HZ, IcmpRateLimits, icmp_global_allow, icmp_global_consume, icmpv4_mask_allow, icmpv6_mask_allow,
    icmpv6_peer_timeout, inet_peer_xrlim_allow, msecs_to_jiffies,
)
from flowsim.sim.report import build_report, format_report
from flowsim.sim.simulation import Simulation
from flowsim.sim.traffic import TrafficSpec

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


# ----------------------------------------------------------------------------- the limiters


def test_a_new_peer_allows_six_errors_then_one_per_timeout():
    # inet_getpeer: rate_last 60 s ago, so the bucket starts at XRLIM_BURST_FACTOR (6) timeouts
    state, timeout = IcmpRateLimits(), HZ
    assert [inet_peer_xrlim_allow(state, "a", 0, timeout) for _ in range(8)] == [True] * 6 + [False] * 2
    assert inet_peer_xrlim_allow(state, "a", HZ - 1, timeout) is False  # 249 jiffies: not a whole timeout yet
    assert inet_peer_xrlim_allow(state, "a", HZ, timeout) is True
    # another destination has its own bucket
    assert inet_peer_xrlim_allow(state, "b", HZ, timeout) is True


def test_a_peer_refills_up_to_six_timeouts():
    state = IcmpRateLimits()
    for _ in range(6):
        inet_peer_xrlim_allow(state, "a", 0, 10)
    # an hour later the bucket holds six timeouts, not 360000 jiffies
    allowed = [inet_peer_xrlim_allow(state, "a", 3600 * HZ, 10) for _ in range(8)]
    assert allowed == [True] * 6 + [False] * 2


def test_the_host_wide_bucket_starts_full_and_refills_after_a_fiftieth_of_a_second():
    state = IcmpRateLimits()
    assert icmp_global_allow(state, 1000, 1000, 50) and state.credit == 50
    for _ in range(50):
        icmp_global_consume(state)
    assert not icmp_global_allow(state, 1000 + HZ // 50 - 1, 1000, 50)  # delta < HZ / 50
    assert icmp_global_allow(state, 1000 + HZ // 50, 1000, 50)  # 5 jiffies: 1000 * 5 / 250 = 20 credits
    assert state.credit == 20
    # a rate too small for the elapsed ticks gives nothing (incr 0)
    empty = IcmpRateLimits(credit=0, stamp=0)
    assert not icmp_global_allow(empty, 5, 10, 50)


@pytest.mark.parametrize("icmp_type, code, limited", [
    (3, 1, True),     # host unreachable
    (3, 4, False),    # Fragmentation Needed: "Don't limit PMTU discovery."
    (11, 0, True),    # time exceeded
    (12, 0, True),    # parameter problem
    (0, 0, False),    # echo reply: not in 0x1818
    (19, 0, False),   # past NR_ICMP_TYPES
])
def test_the_ipv4_rate_mask(icmp_type, code, limited):
    assert icmpv4_mask_allow(icmp_type, code, 0x1818) is not limited


@pytest.mark.parametrize("icmp_type, limited", [(1, True), (2, False), (3, True), (4, True), (128, False), (129, False)])
def test_the_ipv6_rate_mask(icmp_type, limited):
    # inet6_net_init: every type up to ICMPV6_ERRMSG_MAX but Packet Too Big
    assert icmpv6_mask_allow(icmp_type) is not limited


@pytest.mark.parametrize("ms, plen, jiffies", [
    (1000, 64, 62),     # up to 6.19: a /64 route's (128 - 64) >> 5 = 2: 250 >> 2
    (1000, 0, 15),      # the default route: >> 4
    (1000, 128, 250),   # a host route (or a learned path MTU's RTF_CACHE clone): the whole second
    (100, None, 25),    # 0201eedb69b2: HZ / 10 for every route
])
def test_the_ipv6_timeout(ms, plen, jiffies):
    assert icmpv6_peer_timeout(ms, plen) == jiffies


def test_milliseconds_round_up_to_jiffies():
    assert [msecs_to_jiffies(ms) for ms in (0, 1, 4, 5, 1000)] == [0, 1, 1, 2, 250]


# ----------------------------------------------------------------------------- icmp_send in a run

#: c sends through r: to 198.51.100.7 / 2001:db8:9::7, for which r has no route (a destination unreachable
#: error per datagram), or to 203.0.113.7 / 2001:db8:7::7, which r routes back to c (with a hop limit of 1: time
#: exceeded)
UNREACHABLE = """[netns.c]
commands = '''
ip link add eth0 type veth peer name veth0 netns r
ip link set eth0 up
ip addr add 192.0.2.2/24 dev eth0
ip route add default via 192.0.2.1
ip -6 addr add 2001:db8:1::2/64 dev eth0 nodad
ip -6 route add default via 2001:db8:1::1
'''
[netns.r]
commands = '''
ip link set veth0 up
ip addr add 192.0.2.1/24 dev veth0
ip -6 addr add 2001:db8:1::1/64 dev veth0 nodad
ip route add 203.0.113.0/24 via 192.0.2.2
ip -6 route add 2001:db8:7::/64 via 2001:db8:1::2
ROUTES
'''
sysctls = { "net.ipv4.ip_forward" = 1, "net.ipv6.conf.all.forwarding" = 1SYSCTLS }

[[traffic]]
name = "t"
proto = "udp"
from = "c"
to = "DST"
dport = 5000
packets = PACKETS
size = 100
RATE
"""


def topology(dst: str, rate: str = "", sysctls: str = "", packets: int = 20, routes: str = ""):
    text = UNREACHABLE.replace("DST", dst).replace("RATE", rate).replace("SYSCTLS", sysctls).replace(
        "PACKETS", str(packets)).replace("ROUTES", routes)
    return load_topology_text(text, file="unreachable.toml")


def errors(dst: str, profile: str = "linux-7.2", rate: str = "", sysctls: str = "", packets: int = 20,
           ttl: int | None = None) -> tuple[int, int]:
    """(ICMP errors c received, errors r's icmp_send did not send) for *packets* datagrams to *dst*."""
    topo = topology(dst, rate, sysctls, packets)
    traffic = None
    if ttl is not None:
        traffic = [attrs.evolve(TrafficSpec.from_topology(t, i), ttl=ttl) for i, t in enumerate(topo.traffic)]
    sim = Simulation(topo, profile, traffic=traffic).run()
    report = build_report(sim)
    (t,) = report["traffic"]
    assert sum(report["drops"].values()) == packets
    limits = sim.kernel.netns["r"].icmp_limits
    return t["icmp_errors"]["delivered"], limits.limited - limits.limited_route


@pytest.mark.parametrize("profile", ["linux-6.1", "linux-6.12", "linux-7.2"])
@pytest.mark.parametrize("dst, ttl", [("203.0.113.7", 1), ("2001:db8:7::7", 1), ("2001:db8:9::7", None)])
def test_back_to_back_errors_stop_after_the_burst(profile, dst, ttl):
    # 20 datagrams 10 µs apart, within a jiffy: the destination's bucket gives its six (time exceeded from
    # ip_forward; IPv6's no route from ip6_pkt_drop)
    assert errors(dst, profile, ttl=ttl) == (6, 14)


def test_ipv4_route_errors_pay_ip_error_first():
    # ip_error takes HZ from the peer's bucket (at most 5 HZ) before icmp_send's HZ: two errors back to back;
    # the third passes ip_error and is refused by icmpv4_xrlim_allow, the rest stop at ip_error (not counted)
    assert errors("198.51.100.7") == (2, 1)


def test_ipv4_route_errors_at_two_per_second_starve():
    # +125 jiffies a datagram: three errors, then ip_error takes every 250 the bucket reaches and
    # icmpv4_xrlim_allow, right after it in the same jiffy, finds nothing
    assert errors("198.51.100.7", rate="rate = 2")[0] == 3


def first_errors(dst: str, routes: str) -> list[tuple[int, int]]:
    sim = Simulation(topology(dst, packets=1, routes=routes)).run()
    return [e[:2] for e in sim.conversations[0].client.icmp_errors]


@pytest.mark.parametrize("route, code", [
    ("unreachable", 1),   # EHOSTUNREACH: host unreachable
    ("prohibit", 13),     # EACCES: ICMP_PKT_FILTERED
    ("blackhole", None),  # EINVAL: ip_error sends nothing
])
def test_ipv4_route_types(route, code):
    assert first_errors("198.51.100.7", f"ip route add {route} 198.51.100.0/24") == \
        ([] if code is None else [(3, code)])


@pytest.mark.parametrize("route, code", [("unreachable", 0), ("prohibit", 1), ("blackhole", None)])
def test_ipv6_route_types(route, code):
    # ip6_pkt_discard (no route), ip6_pkt_prohibit (administratively prohibited), dst_discard
    assert first_errors("2001:db8:9::7", f"ip -6 route add {route} 2001:db8:9::/64") == \
        ([] if code is None else [(1, code)])


def test_ipv4_time_exceeded_at_two_per_second():
    # 2 pps: the bucket (1500 jiffies) loses 250 - 125 a datagram: eleven in a row, then every other one
    assert errors("203.0.113.7", rate="rate = 2", ttl=1) == (15, 5)


@pytest.mark.parametrize("profile, sent", [("linux-7.2", 15), ("linux-6.12", 9)])
def test_ipv6_errors_at_twenty_per_second(profile, sent):
    # 50 ms apart (12 or 13 jiffies).  Since 0201eedb69b2, 100 ms a destination (25 jiffies): the bucket of 150
    # loses about 12.5 a datagram, so eleven in a row, then every other one.  Before, the /64 route back gives
    # 250 >> 2 = 62 jiffies: a bucket of 372, seven in a row, then one every five datagrams
    assert errors("2001:db8:9::7", profile, rate="rate = 20")[0] == sent


@pytest.mark.parametrize("sysctls, delivered", [
    (', "net.ipv4.icmp_ratelimit" = 0', 20),    # no limit per destination; the host-wide one holds 10000
    (', "net.ipv4.icmp_ratemask" = 0', 20),     # no type is limited
    (', "net.ipv4.icmp_ratelimit" = 0, "net.ipv4.icmp_msgs_burst" = 3', 3),  # the host-wide bucket's burst
    (', "net.ipv4.icmp_ratelimit" = 4000', 6),  # the burst is six timeouts whatever the timeout
])
def test_the_sysctls(sysctls, delivered):
    assert errors("203.0.113.7", sysctls=sysctls, ttl=1)[0] == delivered


@pytest.mark.parametrize("value", ['"fast"', "-1", '"1.5"'])
def test_a_bad_rate_sysctl_is_a_located_error(value):
    with pytest.raises(TopologyError, match=r"unreachable\.toml.*icmp_ratelimit"):
        topology("198.51.100.7", sysctls=f', "net.ipv4.icmp_ratelimit" = {value}', packets=1)


def test_frames_mode_skips_a_rate_limited_scenario():
    # --frames writes flowsim's frames one socat call each: the kernel's buckets would refill at that pace
    from pathlib import Path

    from flowsim.config.topology import load_topology
    from flowsim.conform.guest import ScenarioSkipped, plan_scenario
    topo = load_topology(Path(__file__).resolve().parent.parent / "topologies" / "conform-icmp-limit.toml")
    assert plan_scenario(topo, 0, frames=False).traffic
    with pytest.raises(ScenarioSkipped, match=r"rate-limited here \(60 in r not sent\)"):
        plan_scenario(topo, 0, frames=True)


@pytest.mark.parametrize("profile", ["linux-6.1", "linux-7.2"])
def test_run_reports_the_refusals_as_the_kernel_counts_them(profile):
    """``icmp_rate_limits``: per namespace, the refusals /proc/net/snmp counts (OutRateLimitGlobal,
    OutRateLimitHost), /proc/net/snmp6's Icmp6OutRateLimitHost, and ip_error's (counted nowhere).
    conform-icmp-limit: IPv4 18 + 1 of 20 to the unreachable route (ip_error, then icmpv4_xrlim_allow), 14 of 20
    rejected; IPv6 14 and 14."""
    sim = Simulation(load_topology(TOPOLOGIES / "conform-icmp-limit.toml"), profile).run()
    report = build_report(sim)
    assert report["icmp_rate_limits"] == {"r": {"ratelimit_global": 0, "ratelimit_host": 15, "ratelimit_host6": 28,
                                                "ip_error": 17}}
    assert "icmp rate limits" in format_report(report)
    quiet = build_report(Simulation(load_topology(TOPOLOGIES / "conform-forward.toml"), profile).run())
    assert "icmp_rate_limits" not in quiet  # only a run that refused an error has the key


def test_ipv6_error_without_a_route_back_counts_per_destination():
    """icmp6_send asks icmpv6_xrlim_allow before its own route lookup: a source with no route back is refused
    there and counted as Icmp6OutRateLimitHost (net/ipv6/icmp.c), where IPv4's icmp_send just gives up."""
    # c sends from 2001:db8:5::2, a prefix r has no route for, to 2001:db8:9::7, which r cannot reach either
    text = UNREACHABLE.replace("ip -6 route add default via 2001:db8:1::1",
                               "ip -6 route add default via 2001:db8:1::1\nip -6 addr add 2001:db8:5::2/64 dev lo")
    text = text.replace('to = "DST"', 'src = "2001:db8:5::2"\nto = "2001:db8:9::7"')
    text = text.replace("RATE", "").replace("SYSCTLS", "").replace("PACKETS", "3").replace("ROUTES", "")
    sim = Simulation(load_topology_text(text, file="noback.toml"), "linux-7.2").run()
    assert sim.kernel.netns["r"].icmp_limits.counters() == {"ratelimit_global": 0, "ratelimit_host": 0,
                                                             "ratelimit_host6": 3, "ip_error": 0}


def test_parse_snmp_reads_the_kernels_rate_limit_counters():
    """/proc/net/snmp's Icmp: lines and /proc/net/snmp6's Icmp6OutRateLimitHost, as 7.2.13 printed them for
    conform-icmp-limit's router (the harness's snmp section); the run's report names them alike."""
    text = ("Icmp: InMsgs InErrors InCsumErrors InDestUnreachs InTimeExcds InParmProbs InSrcQuenchs InRedirects InEchos "
            "InEchoReps InTimestamps InTimestampReps InAddrMasks InAddrMaskReps OutMsgs OutErrors OutRateLimitGlobal "
            "OutRateLimitHost OutDestUnreachs OutTimeExcds OutParmProbs OutSrcQuenchs OutRedirects OutEchos OutEchoReps "
            "OutTimestamps OutTimestampReps OutAddrMasks OutAddrMaskReps\n"
            "Icmp: 6 0 0 0 0 0 0 0 2 4 0 0 0 0 13 0 0 15 8 0 0 0 0 4 1 0 0 0 0\n"
            "Icmp6OutRateLimitHost           \t28\n")
    assert parse_snmp(text) == {"ratelimit_global": 0, "ratelimit_host": 15, "ratelimit_host6": 28}
    assert set(SNMP_RATE_LIMITS.values()) < set(IcmpRateLimits().counters())
    assert parse_snmp("") == {}
