"""A minimal kernel for flowtable tests: the flowsim.kernel.api contract, recording what is transmitted.

Lets the flowtable and fast path run against a real topology, real conntrack
and real path resolution without the whole simulated stack.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import attrs

from flowsim.config.topology import load_topology
from flowsim.kernel.conntrack import TCP_ACK, TCP_SYN, ConntrackTable, CtTuple
from flowsim.kernel.flowtable.core import Flowtable, nft_flow_offload_eval
from flowsim.nft.ruleset import parse_ruleset
from flowsim.profiles import get_profile

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"


@attrs.define
class NsState:
    name: str
    ns: object
    conntrack: ConntrackTable
    flowtables: dict
    gen: int = 0  # flowsim.kernel.api.NetnsState.gen: no run events here


@attrs.define
class FakeKernel:
    topo: object
    profile: object
    now: float = 0.0
    tracing: bool = False
    verdict: object = None  # Kernel.verdict: no pcapng here
    xmits: list = attrs.Factory(list)  # (kind, dev name, skb)
    accounted: list = attrs.Factory(list)
    steps: list = attrs.Factory(list)

    def dev_queue_xmit(self, dev, skb):
        self.xmits.append(("dev_queue_xmit", dev.name, skb))

    def neigh_output(self, dev, skb, nexthop):
        self.xmits.append(("neigh_output", dev.name, skb))

    def trace(self, skb, where, what, **details):
        self.steps.append((where, what, details))

    def account(self, skb, kind):
        self.accounted.append(kind)

    def add_pieces(self, skb, n):
        self.steps.append(("ledger", f"{n} more pieces", {}))


def setup(topology: str, netns: str, profile: str):
    """A kernel and one namespace's state with its flowtables, from a shipped topology."""
    topo = load_topology(TOPOLOGIES / topology)
    # tests change routes and neighbours: they need a run's live copy where a loaded topology is a
    # read-only description (Topology.live, from the config rework); an older topology is live already
    live = getattr(topo, "live", None)
    topo = live() if live is not None else topo
    kernel = FakeKernel(topo, get_profile(profile))
    ns = topo.netns(netns)
    ruleset = parse_ruleset(ns.nft.text)
    fts = {ft.name: Flowtable.from_nft(netns, ft) for ft in ruleset.flowtables}
    return kernel, NsState(netns, ns, ConntrackTable(), fts)


def established_ct(state: NsState, src, dst, sport, dport, l4proto=6, now=0.0):
    """Drive a connection through conntrack to ESTABLISHED+ASSURED (TCP) or replied (UDP), confirmed."""
    src, dst = ipaddress.ip_address(src), ipaddress.ip_address(dst)
    l3 = 2 if src.version == 4 else 10
    orig = CtTuple(src, dst, sport, dport, l3, l4proto)
    ct = state.conntrack.nf_conntrack_in(orig, now, tcp_flags=TCP_SYN if l4proto == 6 else 0, length=60).entry
    state.conntrack.nf_conntrack_confirm(ct, now)
    if l4proto == 6:
        state.conntrack.nf_conntrack_in(orig.invert(), now, tcp_flags=TCP_SYN | TCP_ACK, length=60)
        state.conntrack.nf_conntrack_in(orig, now, tcp_flags=TCP_ACK, length=52)
    else:
        state.conntrack.nf_conntrack_in(orig.invert(), now, length=60)
    return ct


def add_flow(kernel, state, ft_name, ct, ctdir, in_dev, skb=None):
    """Run `flow add @ft` for a packet of direction *ctdir* that came in on *in_dev*."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    from flowsim.kernel.skb import skb_from_frame

    ns = state.ns
    ct.tuplehash[ctdir]
    route = ns.fib.lookup(ct.tuplehash[1 - ctdir].src)
    if skb is None:
        skb = skb_from_frame(bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP() / TCP()))
    return nft_flow_offload_eval(kernel, state, state.flowtables[ft_name], skb=skb, ct=ct, ctdir=ctdir,
                                 in_dev=ns.devices[in_dev], route=route, tcp_flags=0x10)
