"""The compact per-connection and per-flow records of flowsim.kernel.flowtable.core (issue 16): CtFailures reads
as the {reason id: (count, first detail)} mapping it replaced, and a flow's tuples carry their direction."""

from __future__ import annotations

from ftkit import add_flow, established_ct, setup

from flowsim.kernel.conntrack import IP_CT_DIR_ORIGINAL, IP_CT_DIR_REPLY
from flowsim.kernel.flowtable.core import CtFailures, FlowOffloadTuple


def test_ct_failures_mapping() -> None:
    per = CtFailures("flow-add-tcp-not-established", "TCP state SYN_SENT")
    per.add("flow-add-tcp-not-established", "TCP state SYN_RECV")  # the first detail stays
    per.add("flow-add-path", "no route")
    per.add("flow-add-path", "other")
    assert dict(per) == {"flow-add-tcp-not-established": (2, "TCP state SYN_SENT"), "flow-add-path": (2, "no route")}
    assert list(per) == ["flow-add-tcp-not-established", "flow-add-path"]
    assert len(per) == 2 and "flow-add-path" in per and "flow-add-helper" not in per
    assert per.get("flow-add-helper") is None


def test_recorded_failures_and_tuple_dirs() -> None:
    kernel, state = setup("selftest.toml", "nsr1", "linux-7.1.5")
    ft = state.flowtables["f1"]
    ct = established_ct(state, "10.0.1.99", "10.0.2.99", 40000, 12345)
    assert add_flow(kernel, state, "f1", ct, 0, "veth0")
    assert not add_flow(kernel, state, "f1", ct, 0, "veth0")
    assert not add_flow(kernel, state, "f1", ct, 0, "veth0")
    assert dict(ft.ct_failures[ct.id]) == {"flow-add-already-offloaded": (2, "")}
    flow = ft.by_ct[ct.id]
    orig, reply = flow.tuplehash
    assert (orig.dir, reply.dir) == (IP_CT_DIR_ORIGINAL, IP_CT_DIR_REPLY)
    assert isinstance(reply, FlowOffloadTuple) and orig.flow is flow and reply.flow is flow
    assert [h.to_dict(state.ns)["dir"] for h in flow.tuplehash] == ["original", "reply"]
