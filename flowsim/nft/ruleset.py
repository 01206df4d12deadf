"""nftables for flowsim: parse a ruleset in nft's own syntax, evaluate it at the hooks.

Theory of operation
-------------------
A namespace's ruleset is text (``nft -f`` input, usually embedded in a
topology file).  :func:`parse_ruleset` turns it into a frozen
:class:`Ruleset` (:mod:`flowsim.nft.model`) with the lark grammar
``flowsim/nft.lark`` (:mod:`flowsim.nft.parse`), typing every value by its
selector and validating what the kernel validates when the batch is
committed: jump targets, loops, ``flow add`` only under a forward hook, NAT
only in nat chains.  Errors are :class:`~flowsim.errors.RulesetError` with
file, line, column and what was expected.

:class:`Nftables` (:mod:`flowsim.nft.eval`) is the run-time side: counters,
hook registration order, and :meth:`Nftables.eval_hook` which runs the base
chains of one hook over an :class:`NftPacket` and returns a
:class:`HookResult` (verdict, the rule that decided, requested side effects:
``flow add``, NAT binding, marks, DSCP; and a per-rule trace).

What this layer leaves to its callers (the kernel does them elsewhere too):
conntrack lookup/confirmation and NAT bindings (:mod:`flowsim.kernel.conntrack`),
flow creation behind ``flow add`` (the flowtable's nft_flow_offload_eval
conditions, via the ``on_flow_add`` callback), and writing the new DSCP or
mark into the packet bytes.

>>> rs = parse_ruleset('''
... table inet filter {
...   flowtable f1 { hook ingress priority 0; devices = { veth0, veth1 }; }
...   chain forward {
...     type filter hook forward priority 0; policy drop;
...     meta l4proto { tcp, udp } flow add @f1
...     ct state established,related accept
...   }
... }''')
>>> res = Nftables(rs).eval_hook("forward", NftPacket(nfproto=2, l4proto=6, ct_state="established", ct=None))
>>> res.verdict, [r.flowtable.name for r in res.flow_adds]
('accept', ['f1'])
"""

from flowsim.nft.eval import (
    L3_HOOKS, NAT_MANIP, NF_IP_PRI_CONNTRACK, NF_IP_PRI_NAT_DST, NF_IP_PRI_NAT_SRC, DscpSet, FlowAddRequest,
    HookEntry, HookResult, MarkSet, NatRequest, Nftables, NftCounter, NftPacket, NftraceSet, RuleRef,
    TraceStep,
)
from flowsim.nft.hooks import nft_flowtable_hook_devices
from flowsim.nft.model import (
    CHAIN_PRIORITIES, NFPROTO_INET, NFPROTO_IPV4, NFPROTO_IPV6, NFPROTO_NETDEV, BaseHook, Chain, CounterDef,
    CounterStmt, FlowAdd, Flowtable, Loc, LogStmt, Match, NamedSet, NatStmt, Range, RejectStmt, Rule,
    Ruleset, Selector, SetStmt, Table, Verdict, VerdictMap,
)
from flowsim.nft.parse import parse_ruleset

__all__ = [
    "parse_ruleset", "Ruleset", "Table", "Chain", "BaseHook", "Rule", "Flowtable", "CounterDef", "NamedSet",
    "Match", "VerdictMap", "Verdict", "CounterStmt", "FlowAdd", "SetStmt", "NatStmt", "LogStmt", "RejectStmt",
    "Selector", "Range", "Loc", "CHAIN_PRIORITIES", "NFPROTO_INET", "NFPROTO_IPV4", "NFPROTO_IPV6",
    "NFPROTO_NETDEV", "Nftables", "NftPacket", "NftCounter", "HookResult", "HookEntry", "RuleRef", "TraceStep",
    "MarkSet", "DscpSet", "NftraceSet", "FlowAddRequest", "NatRequest", "L3_HOOKS", "NAT_MANIP",
    "NF_IP_PRI_CONNTRACK", "NF_IP_PRI_NAT_DST", "NF_IP_PRI_NAT_SRC", "nft_flowtable_hook_devices",
]
