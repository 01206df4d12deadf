"""[[event]] tables: iproute2 lines a run executes at a virtual time, checked at load (flowsim.config.events)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowsim.config.topology import load_topology_text
from flowsim.errors import TopologyError

SELFTEST = (Path(__file__).resolve().parent.parent / "topologies" / "selftest.toml").read_text()
BASE_LINES = SELFTEST.count("\n")


def with_events(*tables: str) -> str:
    return SELFTEST + "".join("\n[[event]]\n" + t + "\n" for t in tables)


def test_events_are_parsed_in_time_order():
    """Events keep their command, namespace and line, sorted by time (file order among equal times)."""
    topo = load_topology_text(with_events('at = 0.5\nnetns = "nsr1"\ncommand = "ip link set veth1 up"',
                                          'at = 0.1\nnetns = "nsr1"\ncommand = "ip link set veth1 down"'),
                              "t.toml")
    assert [(e.at, e.netns, e.command.text) for e in topo.events] == [
        (0.1, "nsr1", "ip link set veth1 down"), (0.5, "nsr1", "ip link set veth1 up")]
    assert topo.events[0].command.line == BASE_LINES + 10 and topo.events[0].command.file == "t.toml"
    assert topo.device("nsr1", "veth1").up  # the loader checks them on a copy: the topology is untouched


ERRORS = [
    ('at = 1\nnetns = "nsr1"\ncommand = "ip link set veth1 down"\nwhen = 2', 6, "unknown key 'when'"),
    ('at = 1\nnetns = "nsr1"', 2, "event needs 'command'"),
    ('at = -1\nnetns = "nsr1"\ncommand = "ip link set veth1 down"', 3, "bad at -1"),
    ('at = 1\nnetns = "nsr9"\ncommand = "ip link set veth1 down"', 4, "no namespace 'nsr9'"),
    ('at = 1\nnetns = "nsr1"\ncommand = "ip link del veth1"', 5, "cannot be deleted during a run"),
    ('at = 1\nnetns = "nsr1"\ncommand = "ip link add veth1 type dummy"', 5, "already exists"),  # dry run
    ('at = 1\nnetns = "nsr1"\ncommand = "ip link set veth1 master br0"', 5, "only up, down and mtu"),
    ('at = 1\nnetns = "nsr1"\ncommand = "sysctl -w net.ipv4.ip_forward=0"', 5, "not an ip command"),
    ('at = 1\nnetns = "nsr1"\ncommand = "ip xfrm state flush"', 5, "'ip xfrm' cannot run as an event"),
    ('at = 1\nnetns = "nsr1"\ncommand = "ip link set veth9 down"', 5, "veth9"),  # found by the dry run
]


@pytest.mark.parametrize("table,line,what", ERRORS, ids=[e[2] for e in ERRORS])
def test_bad_events_name_file_and_line(table, line, what):
    """A bad event is one TopologyError at load time naming the file and the line of the offending key."""
    with pytest.raises(TopologyError) as info:
        load_topology_text(with_events(table), "t.toml")
    assert info.value.file == "t.toml" and info.value.line == BASE_LINES + line and what in str(info.value)
