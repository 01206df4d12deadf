"""[[event]] lines that add a device mid-run: NETDEV_REGISTER and the flowtable hook bound on it.

A router's flowtable lists ``devices = { veth0, veth1 }`` while veth1 (towards the
server) is only created by an event at t = 0.5 s; the traffic starts at t = 1.0 s.
``nf_tables_newflowtable`` → ``nft_netdev_hook_alloc`` refuses the ruleset before
6.16 (-ENOENT); from 6.16 (6d07a289504a, a331b78a5525) the hook stays unbound and
``nft_flowtable_event`` binds it at NETDEV_REGISTER (flowsim: ``Kernel.netdev_register``,
called by ``Kernel.netdev_changes`` after the event's ``register_netdevice``).
"""

from __future__ import annotations

import pytest

from flowsim.config.topology import load_topology_text
from flowsim.errors import RulesetError, TopologyError
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation

TOPOLOGY = """\
description = "veth1, towards ns2, appears at 0.5 s"
source = "tests/test_event_device.py"

[netns.r]
commands = '''
ip link set lo up
ip link add veth0 type veth peer name eth0 netns ns1
ip addr add 192.0.2.1/24 dev veth0
ip link set veth0 up
'''
sysctls = { "net.ipv4.ip_forward" = 1 }
nft = '''
table inet filter {
  flowtable ft {
    hook ingress priority 0
    devices = { veth0, veth1 }
  }
  chain forward {
    type filter hook forward priority 0; policy accept;
    meta l4proto { tcp, udp } flow add @ft
  }
}
'''

[netns.ns1]
commands = '''
ip link set lo up
ip addr add 192.0.2.2/24 dev eth0
ip link set eth0 up
ip route add default via 192.0.2.1
'''

[netns.ns2]
commands = '''
ip link set lo up
'''

[[event]]
at = 0.5
netns = "r"
command = "ip link add veth1 type veth peer name eth0 netns ns2"

[[event]]
at = 0.5
netns = "r"
command = "ip addr add 198.51.100.1/24 dev veth1"

[[event]]
at = 0.5
netns = "r"
command = "ip link set veth1 up"

[[event]]
at = 0.5
netns = "ns2"
command = "ip addr add 198.51.100.2/24 dev eth0"

[[event]]
at = 0.5
netns = "ns2"
command = "ip link set eth0 up"

[[event]]
at = 0.5
netns = "ns2"
command = "ip route add default via 198.51.100.1"

[[traffic]]
name = "udp"
proto = "udp"
from = "ns1"
to = "198.51.100.2"
dport = 5301
start = 1.0
packets = 20
size = 600
reply_packets = 20
reply_size = 600

[[traffic]]
name = "tcp"
proto = "tcp"
from = "ns1"
to = "198.51.100.2"
dport = 80
start = 1.0
packets = 20
size = 1000
"""


def _line(text: str, needle: str) -> int:
    """The 1-based line of *text* holding *needle*."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def _counts(sim: Simulation) -> dict:
    """(fastpath, slowpath) per traffic and direction, and the flowtable's totals."""
    r = build_report(sim)
    per = {(t["name"], d): (v["fastpath"], v["slowpath"]) for t in r["traffic"] for d, v in t["directions"].items()}
    ft = r["flowtables"][0]
    return {"traffic": per, "flowtable": (ft["fastpath"], ft["slowpath"])}


def test_device_added_by_an_event_binds_the_flowtable_hook():
    """linux-7.1.5: nft_netdev_hook_alloc leaves veth1 unbound; register_netdevice at 0.5 s runs
    nft_flowtable_event (NETDEV_REGISTER: Kernel.netdev_register) and the flows offload in both directions."""
    sim = Simulation(load_topology_text(TOPOLOGY, "t.toml"), "linux-7.1.5", tracing=True)
    assert [dev for _ft, dev in sim.unbound_devices["r"]] == ["veth1"]
    sim.run()
    assert sim.unbound_devices == {}
    assert sim.topo.peer(sim.topo.device("r", "veth1")) is sim.topo.device("ns2", "eth0")
    got = _counts(sim)
    assert got["traffic"] == {("udp", "original"): (18, 2), ("udp", "reply"): (20, 0),
                              ("tcp", "original"): (22, 2), ("tcp", "reply"): (1, 1)}
    assert got["flowtable"] == (61, 5)
    assert sim.kernel.ledger.totals() == {"injected": 66, "delivered": 66, "dropped": 0, "in_flight": 0}
    registered = [(t.where, t.what.endswith("flowtable ft hooked")) for t in sim.kernel.traces
                  if t.what.startswith("NETDEV_REGISTER")]
    assert registered == [("r veth1", True), ("ns2 eth0", False)]


def test_same_counts_as_a_device_present_from_the_start():
    """nft_flowtable_event bound the hook as nf_tables_newflowtable would have: the run offloads as if veth1
    had been created before the ruleset (the same packets on the flowtable's fast and slow paths)."""
    static = TOPOLOGY.replace("ip link set veth0 up\n", "ip link set veth0 up\n"
                              "ip link add veth1 type veth peer name eth0 netns ns2\n", 1)
    static = static.replace('command = "ip link add veth1 type veth peer name eth0 netns ns2"',
                            'command = "ip link set veth1 down"')
    late = _counts(Simulation(load_topology_text(TOPOLOGY, "t.toml"), "linux-7.1.5").run())
    early = _counts(Simulation(load_topology_text(static, "t.toml"), "linux-7.1.5").run())
    assert late == early


def test_a_device_of_another_name_leaves_the_hook_unbound():
    """NETDEV_REGISTER of wan1 binds nothing (nft_flowtable_event matches the hook by name): veth1 stays
    unbound, no packet from the server meets the flowtable, and flow add finds no flowtable path out."""
    text = TOPOLOGY.replace("add veth1", "add wan1").replace("dev veth1", "dev wan1").replace("set veth1", "set wan1")
    sim = Simulation(load_topology_text(text, "t.toml"), "linux-7.1.5").run()
    assert [dev for _ft, dev in sim.unbound_devices["r"]] == ["veth1"]
    assert _counts(sim)["traffic"] == {("udp", "original"): (0, 20), ("udp", "reply"): (0, 0),
                                       ("tcp", "original"): (0, 24), ("tcp", "reply"): (0, 0)}


def test_before_6_16_the_ruleset_is_refused_at_the_devices_list():
    """linux-6.12: nft_netdev_hook_alloc returns -ENOENT for veth1 at commit, before any event can create it;
    the error names the file, line and column of veth1 in the devices list."""
    with pytest.raises(RulesetError) as info:
        Simulation(load_topology_text(TOPOLOGY, "t.toml"), "linux-6.12")
    exc = info.value
    line = _line(TOPOLOGY, "devices = { veth0, veth1 }")
    assert (exc.file, exc.line, exc.column, exc.value) == ("t.toml", line, 24, "veth1")
    assert "No such file or directory" in str(exc)


def _with_event(netns: str, command: str) -> str:
    return TOPOLOGY + f'\n[[event]]\nat = 0.7\nnetns = "{netns}"\ncommand = "{command}"\n'


@pytest.mark.parametrize("netns,command,what", [
    ("r", "ip link add veth1 type dummy", "device 'veth1' already exists in namespace 'r'"),  # from the 0.5 s event
    ("r", "ip link add veth0 type veth peer name eth9", "device 'veth0' already exists in namespace 'r'"),
    ("r", "ip link add veth5 type veth peer name eth0 netns ns1", "device 'eth0' already exists in namespace 'ns1'"),
    ("r", "ip link del veth0", "cannot be deleted during a run"),
    ("r", "ip link set veth0 netns ns2", "only up, down and mtu can change during a run"),
])
def test_bad_device_events_are_located_errors_at_load(netns, command, what):
    """The load-time dry run (flowsim.config.events._dry_run) runs register_netdevice's name check
    (-EEXIST, "RTNETLINK answers: File exists") on a copy, after the events before it: file and line."""
    text = _with_event(netns, command)
    with pytest.raises(TopologyError) as info:
        load_topology_text(text, "t.toml")
    exc = info.value
    assert (exc.file, exc.line) == ("t.toml", _line(text, command)) and what in str(exc)


def test_a_vlan_added_by_an_event():
    """register_netdevice of a VLAN upper mid-run (vlan_newlink on veth0): the dry run accepts it and the run's
    topology has it stacked on veth0 (Kernel.netdev_register drops the __vlan_find_dev_deep_rcu cache)."""
    text = _with_event("r", "ip link add link veth0 name veth0.10 type vlan id 10")
    sim = Simulation(load_topology_text(text, "t.toml"), "linux-7.1.5").run()
    vlan = sim.topo.device("r", "veth0.10")
    assert vlan.lower == "veth0" and vlan.vlan_id == 10
    assert _counts(sim)["flowtable"] == (61, 5)
