"""The memo of failed path resolutions (``nft_flow_route`` after a refused ``flow add``, issue 16).

In the kernel every packet of a connection whose ``flow add`` fails runs ``nft_flow_route`` again and fails
the same way while nothing it reads changed.  flowsim answers the repeats from a memo on the flowtable,
keyed by the question (addresses, direction, ingress device, route, mark) and checked against the
namespace's generations (run events, FIB, neighbours, bridge FDBs): the refusal is still counted per packet,
with the same detail, and a change of any generation resolves again.
"""

from __future__ import annotations

import ipaddress

import pytest
from ftkit import established_ct, setup

from flowsim.kernel.devices import bridge
from flowsim.kernel.flowtable import core
from flowsim.kernel.flowtable.core import nft_flow_offload_eval
from flowsim.kernel.neigh import NeighEntry
from flowsim.kernel.skb import skb_from_frame


def _frame() -> bytes:
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP() / TCP())


@pytest.fixture
def refused(monkeypatch):
    """selftest.toml's nsr1 without the neighbour of the forward next hop: every flow add fails in
    nft_dev_fill_forward_path; nft_flow_route is counted."""
    kernel, state = setup("selftest.toml", "nsr1", "linux-7.2")
    ct = established_ct(state, "10.0.1.99", "10.0.2.99", 40000, 12345)
    route = state.ns.fib.lookup(ct.tuplehash[1].src)  # the stack's cached route: one object for every packet
    nexthop = route.nexthop(ipaddress.ip_address("10.0.2.99"))
    gone = state.ns.neigh.lookup(route.dev, nexthop)
    assert gone is not None and state.ns.neigh.delete(route.dev, nexthop)
    calls = []
    real = core.nft_flow_route

    def counted(*args, **kwargs):
        calls.append(args[3])
        return real(*args, **kwargs)

    monkeypatch.setattr(core, "nft_flow_route", counted)

    def flow_add() -> bool:
        return nft_flow_offload_eval(kernel, state, state.flowtables["f1"], skb=skb_from_frame(_frame()), ct=ct,
                                     ctdir=0, in_dev=state.ns.devices["veth0"], route=route, tcp_flags=0x10)

    return state, ct, gone, calls, flow_add


def test_a_repeated_refusal_is_counted_per_packet_but_resolved_once(refused):
    state, ct, _gone, calls, flow_add = refused
    ft = state.flowtables["f1"]
    assert [flow_add() for _ in range(3)] == [False, False, False]
    assert len(calls) == 1
    assert ft.flow_add_failures["flow-add-path"] == 3
    count, detail = ft.ct_failures[ct.id]["flow-add-path"]
    assert count == 3 and "no neighbour" in detail
    assert not ft.flows


def test_a_neighbour_change_resolves_again_and_the_flow_is_created(refused):
    state, _ct, gone, calls, flow_add = refused
    assert not flow_add()
    state.ns.neigh.add(NeighEntry(gone.addr, gone.dev, gone.lladdr, gone.state))  # neigh.version moves
    assert flow_add() and len(calls) == 2 and len(state.flowtables["f1"].flows) == 1


@pytest.mark.parametrize("change", ["fib", "run event", "fdb"])
def test_any_generation_change_resolves_again(refused, change):
    state, _ct, _gone, calls, flow_add = refused
    assert not flow_add() and not flow_add() and len(calls) == 1
    if change == "fib":
        state.ns.fib.rt_cache_flush()
    elif change == "run event":
        state.gen += 1  # Kernel.netdev_changes
    else:
        bridge._fdb_changed()  # some bridge learnt or moved an entry
    assert not flow_add() and len(calls) == 2
    assert state.flowtables["f1"].flow_add_failures["flow-add-path"] == 3


def test_a_conntrack_tuple_replaced_by_nat_resolves_again(refused):
    """nf_conntrack_alter_reply replaces the reply tuple: the memo keyed on the connection sees another question."""
    state, ct, _gone, calls, flow_add = refused
    assert not flow_add() and not flow_add() and len(calls) == 1
    ct.tuplehash[1] = ct.tuplehash[1].invert().invert()  # an equal tuple, but a new object
    assert not flow_add() and len(calls) == 2
