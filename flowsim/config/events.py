"""Run events: the ``[[event]]`` tables of a topology, iproute2 lines a run executes at a virtual time.

Theory of operation
-------------------
An event changes the network while traffic flows — a WAN link that goes
down and comes back, a route that moves::

    [[event]]
    at = 0.002                          # seconds of virtual time: finite, 0 … 1e6 (flowsim.config.limits)
    netns = "router"
    command = "ip link set eth1 down"

The command is an ordinary topology line (:mod:`flowsim.config.iproute`), limited
to what changes a running kernel without rebuilding it: ``ip link add``
(any kind :mod:`flowsim.config.iproute` knows, e.g. a veth pair with ``peer
name X netns Y``, or a VLAN on an existing device), ``ip link set DEV``
with ``up``, ``down`` or ``mtu N``, and ``ip route``, ``ip neigh`` and
``ip addr`` lines (any ``-4``/``-6``).  A device added by an event is
registered with the kernel (``Kernel.netdev_register``: NETDEV_REGISTER, which
binds the flowtable hooks that list it by name on a 6.16+ profile).
Deleting devices, moving them to another namespace or changing their master
is refused, since flows, hooks and caches of the run refer to them.

The loader checks the events by running them, in time order, on a live
copy of the finished topology (:meth:`~flowsim.config.network.Topology.instantiate`),
so a bad event is one :class:`~flowsim.errors.TopologyError` naming the file
and the line of its ``command`` before any packet is sent.  During a run
:class:`flowsim.sim.simulation.Simulation` executes each one at ``at`` on
the run's own copy of the topology (the kernel's) and hands the kernel the
devices whose state changed
(``Kernel.netdev_changes``: NETDEV_DOWN / NETDEV_UP notifiers, route cache
flush) — which is where the flowtable's ``nf_flow_table_cleanup`` runs.
"""

from __future__ import annotations

import attrs

from flowsim.config import iproute
from flowsim.config.network import Topology
from flowsim.config.limits import SECONDS_EXPECTED, seconds_problem
from flowsim.config.raw import RawToml, short
from flowsim.kernel.devices.base import Command

__all__ = ["Event", "EVENT_KEYS", "read_events"]

EVENT_KEYS = {"at", "netns", "command"}
_LINK_SET_OPTIONS = {"up", "down", "mtu"}
_OBJECTS = {"route", "r", "ro", "rou", "rout", "neigh", "neighbor", "neighbour", "n", "address", "addr", "a"}


@attrs.frozen
class Event:
    """One ``[[event]]`` table: *command* runs in *netns* at virtual time *at* (seconds)."""

    at: float
    netns: str
    command: Command


def read_events(items, topo: Topology, raw: RawToml, file: str) -> list[Event]:
    """The checked events of a topology file, in time order (file order among equal times)."""
    out = []
    for i, header_line, item, bad in raw.tables(items, "event", file, EVENT_KEYS, ("at", "netns", "command")):
        at = item["at"]
        why = seconds_problem(at)  # nan passed `at < 0` and ran at time 0
        if why is not None:
            raise bad(f"bad at {short(at)}: {why}", at, SECONDS_EXPECTED, "at")
        netns = item["netns"]
        if not isinstance(netns, str) or netns not in topo.namespaces:
            raise bad(f"no namespace {short(netns)}", netns, "one of " + ", ".join(topo.namespaces), "netns")
        text = item["command"]
        if not isinstance(text, str) or not text.strip():
            raise bad("command must be a non-empty string", short(text), "one iproute2 line", "command")
        found = raw.key("event", "command", i)
        cmd = Command(text.strip(), netns, file, found[0] if found else header_line)
        _check_kind(cmd)
        out.append(Event(float(at), netns, cmd))
    out.sort(key=lambda e: e.at)  # stable: file order among events of one instant
    _dry_run(out, topo)
    return out


def _check_kind(cmd: Command) -> None:
    """Only the commands a running kernel can take (see the module docstring)."""
    words = [w for w in cmd.text.split() if w not in ("-4", "-6")]
    expected = "ip link add …, ip link set DEV up|down|mtu N, or an ip route / ip neigh / ip addr line"
    if len(words) < 2 or words[0] != "ip":
        raise cmd.error("not an ip command", value=words[0] if words else "", expected=expected)
    if words[1] in ("link", "l"):
        if len(words) >= 3 and words[2] in ("add", "a", "ad"):
            return  # NETDEV_REGISTER: the dry run checks the rest (names, kinds, duplicates)
        if len(words) < 4 or words[2] != "set":
            raise cmd.error("devices cannot be deleted during a run: flows, hooks and caches of the run refer "
                            "to them", value=" ".join(words[1:3]), expected=expected)
        rest = words[4:] if words[3] != "dev" else words[5:]
        options = [w for w in rest if not w.isdigit()]
        if not options or any(w not in _LINK_SET_OPTIONS for w in options):
            raise cmd.error("only up, down and mtu can change during a run (moving a device or changing its "
                            "master would leave flows and caches of the run pointing at it)", value=" ".join(rest),
                            expected=expected)
    elif words[1] not in _OBJECTS:
        raise cmd.error(f"'ip {words[1]}' cannot run as an event", value=words[1], expected=expected)


def _dry_run(events: list[Event], topo: Topology) -> None:
    """Run the events on a copy of *topo*: their errors surface at load time, with file and line."""
    if not events:
        return
    scratch = topo.instantiate()
    for e in events:
        iproute.run(scratch, e.command)
