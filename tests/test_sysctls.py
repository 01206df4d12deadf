"""Numeric sysctls: checked where the topology sets them, and conntrack's timeouts read from them per namespace.

A value flowsim reads as a number (flowsim.config.sysctls: the flowtable's and conntrack's timeouts, PMTU
exceptions' life, the neighbour table's gc_thresh3) is one located error when it is not one; before, a
``nf_flowtable_udp_timeout = "abc"`` crashed the run at its first flow.  Conntrack's timeouts are per namespace
(net/netfilter/nf_conntrack_standalone.c, ``nf_ct_sysctl_table``): ``CtTimeouts.from_sysctls``.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from flowsim.config.sysctls import SysctlProblem, sysctl_problem
from flowsim.config.topology import load_topology, load_topology_text
from flowsim.errors import TopologyError
from flowsim.kernel.conntrack import DEFAULT_TIMEOUTS, ConntrackTable, CtTimeouts, CtTuple, TcpConntrack
from flowsim.sim.simulation import Simulation

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
BASE = """
[netns.a]
commands = '''
ip link set lo up
{command}
'''
sysctls = {{ {sysctls} }}
"""


@pytest.mark.parametrize("key, value, problem", [
    ("net.netfilter.nf_flowtable_udp_timeout", "abc", "not a number"),
    ("net.netfilter.nf_conntrack_udp_timeout", "-1", "out of range"),
    ("net.netfilter.nf_conntrack_tcp_timeout_established", "inf", "out of range"),
    ("net.netfilter.nf_conntrack_icmp_timeout", "nan", "out of range"),
    ("net.ipv6.route.mtu_expires", "1e9", "out of range"),
    ("net.ipv4.neigh.default.gc_thresh3", "1.5", "not an integer"),
    ("net.ipv6.neigh.default.gc_thresh3", "2147483648", "out of range"),
    ("net.ipv4.ipfrag_max_dist", "-1", "out of range"),
])
def test_a_bad_numeric_sysctl_is_one_located_error(key, value, problem):
    assert sysctl_problem(key, value).what == problem
    with pytest.raises(TopologyError, match=f"sysctl {key} = .*: {problem}") as err:
        load_topology_text(BASE.format(command="", sysctls=f'"{key}" = "{value}"'), "bad.toml")
    assert (err.value.file, err.value.line) == ("bad.toml", 7)
    # the same value in a `sysctl -w` line: the error names that line
    with pytest.raises(TopologyError, match=f"sysctl {key} = .*: {problem}") as err:
        load_topology_text(BASE.format(command=f"sysctl -w {key}={value}", sysctls=""), "bad.toml")
    assert (err.value.file, err.value.line) == ("bad.toml", 5)


@pytest.mark.parametrize("key, value", [
    ("net.netfilter.nf_flowtable_tcp_timeout", "0.5"), ("net.netfilter.nf_conntrack_udp_timeout", " 60 "),
    ("net.ipv4.neigh.default.gc_thresh3", "0"), ("net.ipv4.conf.all.forwarding", "2"),  # a switch: on
    ("net.core.somaxconn", "not modelled"),  # a key flowsim does not read stays inert
])
def test_good_and_unread_sysctls_load(key, value):
    assert sysctl_problem(key, value) is None
    topo = load_topology_text(BASE.format(command="", sysctls=f'"{key}" = "{value}"'), "ok.toml")
    assert topo.namespaces["a"].sysctls[key] == value


def test_conntrack_timeouts_come_from_the_namespace_sysctls():
    # OpenWrt's /etc/sysctl.d/11-nf-conntrack.conf
    t = CtTimeouts.from_sysctls({"net.netfilter.nf_conntrack_udp_timeout": "60",
                                 "net.netfilter.nf_conntrack_udp_timeout_stream": "180",
                                 "net.netfilter.nf_conntrack_tcp_timeout_established": "7440",
                                 "net.netfilter.nf_conntrack_icmpv6_timeout": "10"})
    assert (t.udp_unreplied, t.udp_replied, t.tcp[TcpConntrack.ESTABLISHED], t.icmpv6, t.icmp) == \
        (60.0, 180.0, 7440.0, 10.0, DEFAULT_TIMEOUTS.icmp)
    # the other TCP states keep the kernel's defaults; no conntrack sysctl at all: the defaults themselves
    assert t.tcp[TcpConntrack.TIME_WAIT] == DEFAULT_TIMEOUTS.tcp[TcpConntrack.TIME_WAIT] == 120.0
    assert CtTimeouts.from_sysctls({"net.ipv4.ip_forward": "1"}) is DEFAULT_TIMEOUTS


def test_an_unreplied_udp_entry_expires_after_the_namespace_udp_timeout():
    a, b = ipaddress.ip_address("192.0.2.1"), ipaddress.ip_address("198.51.100.1")
    for sysctls, life in (({}, 30.0), ({"net.netfilter.nf_conntrack_udp_timeout": "300"}, 300.0)):
        table = ConntrackTable(CtTimeouts.from_sysctls(sysctls))
        ct = table.nf_conntrack_in(CtTuple(a, b, 40000, 53, 2, 17), 10.0, length=60).entry
        table.nf_conntrack_confirm(ct, 10.0)
        assert ct.expires(10.0) == pytest.approx(life)  # nf_ct_expires: the seconds left


def test_the_stack_gives_each_namespace_its_own_timeouts():
    sim = Simulation(load_topology(TOPOLOGIES / "conform-limit.toml"))
    assert sim.kernel.netns["r"].conntrack.timeouts.udp_unreplied == 300.0
    assert sim.kernel.netns["ns1"].conntrack.timeouts is DEFAULT_TIMEOUTS


@pytest.mark.parametrize("key", ["nft", "kernel.hostname", "net", "net..ipv4", "net.ipv4.", "net.ipv4 .x",
                                 "vm.swappiness"])
def test_a_sysctl_outside_the_net_tree_is_refused(key):
    # a network namespace has only the net.* tree; a misplaced TOML key (an `nft = ...` line under a
    # [netns.X.sysctls] table) became the sysctl "nft", which the guest could not write
    assert sysctl_problem(key, "1").what == "not a sysctl of a network namespace"
    with pytest.raises(TopologyError, match="not a sysctl of a network namespace") as err:
        load_topology_text(BASE.format(command="", sysctls=f'"{key}" = "1"'), "bad.toml")
    assert (err.value.file, err.value.line) == ("bad.toml", 7)
    # the array form is checked as the table form is (it was not checked at all)
    with pytest.raises(TopologyError, match="not a sysctl of a network namespace"):
        load_topology_text(BASE.format(command="", sysctls="").replace("sysctls = {  }", f'sysctls = ["{key}=1"]'),
                           "bad.toml")
    if " " not in key:
        with pytest.raises(TopologyError, match="not a sysctl of a network namespace"):
            load_topology_text(BASE.format(command=f"sysctl -w {key}=1", sysctls=""), "bad.toml")
    assert sysctl_problem("net.ipv4.\x01", "1").what == "not a sysctl of a network namespace"


def test_the_array_form_checks_values_too():
    text = BASE.format(command="", sysctls="").replace("sysctls = {  }", 'sysctls = ["net.ipv4.ip_forward=yes"]')
    with pytest.raises(TopologyError, match="not an integer"):
        load_topology_text(text, "bad.toml")


@pytest.mark.parametrize("key, value", [
    ("net.ipv4.ip_forward", "yes"), ("net.ipv4.conf.eth0/10.forwarding", "on"), ("net.ipv6.conf.all.forwarding", ""),
    ("net.ipv4.conf.all.promote_secondaries", "1.0"), ("net.ipv4.conf.eth0.route_localnet", "y"),
    ("net.ipv6.conf.eth0.use_oif_addrs_only", "true"), ("net.ipv4.icmp_errors_use_inbound_ifaddr", "on"),
])
def test_a_switch_flowsim_reads_must_be_an_integer(key, value):
    # proc_dointvec refuses it; flowsim took any text but "0" for on
    assert sysctl_problem(key, value) == SysctlProblem("not an integer", "0 (off) or 1 (on)")
    assert sysctl_problem(key, "2") is None and sysctl_problem(key, "-1") is None


@pytest.mark.parametrize("value, picked_up", [(None, True), ("1", True), ("0", False)])
def test_nf_conntrack_tcp_loose_decides_a_mid_stream_pickup(value, picked_up):
    """nf_conntrack_tcp_loose (per namespace, 1 by default): an ACK of a connection conntrack never saw starts an
    entry (tcp_new's mid-stream pickup) only while it is on; off, only a SYN may."""
    text = BASE.format(command="", sysctls="" if value is None else f'"net.netfilter.nf_conntrack_tcp_loose" = {value}')
    table = Simulation(load_topology_text(text, "loose.toml")).kernel.netns["a"].conntrack
    a, b = ipaddress.ip_address("192.0.2.1"), ipaddress.ip_address("198.51.100.1")
    res = table.nf_conntrack_in(CtTuple(a, b, 40000, 80, 2, 6), 0.0, tcp_flags=0x10, length=52)  # a bare ACK
    assert (res.entry is not None) == picked_up
    assert res.state == ("new" if picked_up else "invalid")


def test_a_bad_sysctl_in_a_dotted_key_or_its_own_table_names_its_line():
    """``sysctls."KEY" = …`` lines (as openwrt-fw4 writes OpenWrt's conntrack sysctls) and a
    ``[netns.a.sysctls]`` table: the error names the key's own line, not the namespace's header."""
    dotted = ("[netns.a]\ncommands = '''\nip link set lo up\n'''\n"
              'sysctls."net.ipv4.ip_forward" = 1\nsysctls."net.netfilter.nf_conntrack_udp_timeout" = "x"\n'
              "nft = '''\ntable inet t {\n}\n'''\n")
    with pytest.raises(TopologyError, match="not a number") as err:
        load_topology_text(dotted, "dotted.toml")
    assert err.value.line == 6
    table = "[netns.a]\n[netns.a.sysctls]\n\"net.ipv4.ip_forward\" = 1\n\"nft\" = \"table inet t {}\"\n"
    with pytest.raises(TopologyError, match="not a sysctl of a network namespace") as err:
        load_topology_text(table, "table.toml")
    assert err.value.line == 4
    # the namespace's other keys still find their lines behind the dotted ones
    assert load_topology_text(dotted.replace('"x"', "60"), "ok.toml").namespaces["a"].sysctls == {
        "net.ipv4.ip_forward": "1", "net.netfilter.nf_conntrack_udp_timeout": "60"}
