"""Which base chains (and flowtables) run at a netfilter hook, in which order.

Theory of operation
-------------------
Every base chain with a ``hook`` and every flowtable registers at a hook
(netdev ingress/egress: per device; the L3 hooks: per family, ``inet``
for both).  :func:`nf_hook_entries` lists the registrations that apply to
one hook, family and device as :class:`HookEntry` values in the order the
kernel runs them (``nf_hook_entries_grow``): by priority; among equal
priorities the chain registered *later* runs first.  Registration order is
the order tables and chains appear (a table's chains before its
flowtables).  ``type nat`` chains do not run at their own priority: the NAT
core (``nf_nat_ipv4_ops``) sits at ``NF_IP_PRI_NAT_DST`` (-100) in
prerouting/output and ``NF_IP_PRI_NAT_SRC`` (100) in input/postrouting and
calls the nat chains, ordered by their priority, from there
(``nf_nat_inet_fn``).

The order depends on the frozen ruleset only, so
:meth:`flowsim.nft.eval.Nftables.hook_entries` computes it here once per
(hook, family, device) and caches it; :mod:`flowsim.nft.eval` re-exports
this module's public names.
"""

from __future__ import annotations

import attrs

from flowsim.nft.model import Chain, Flowtable, Ruleset

__all__ = [
    "HookEntry", "nf_hook_entries", "L3_HOOKS", "NF_IP_PRI_CONNTRACK", "NF_IP_PRI_NAT_DST", "NF_IP_PRI_NAT_SRC",
    "NAT_MANIP",
]

L3_HOOKS = ("prerouting", "input", "forward", "output", "postrouting")
NF_IP_PRI_CONNTRACK = -200
NF_IP_PRI_NAT_DST = -100
NF_IP_PRI_NAT_SRC = 100
#: HOOK2MANIP: which NAT manipulation a hook's nat chains set up
NAT_MANIP = {"prerouting": "dst", "output": "dst", "postrouting": "src", "input": "src"}
_NAT_PRIO = {"dst": NF_IP_PRI_NAT_DST, "src": NF_IP_PRI_NAT_SRC}


@attrs.frozen
class HookEntry:
    """One registration at a hook: a base chain or (ingress only) a flowtable."""

    priority: int
    key: tuple
    chain: Chain | None = None
    flowtable: Flowtable | None = None


def nf_hook_entries(ruleset: Ruleset, hook: str, nfproto: int | None = None,
                    device: str | None = None) -> tuple[HookEntry, ...]:
    """Base chains (and, at ingress, flowtables) that run at *hook*, in kernel order."""
    chains, fts = [], []
    for t in ruleset.tables:
        for ch in t.chains.values():
            h = ch.hook
            if h is None or h.hook != hook:
                continue
            if hook in ("ingress", "egress"):
                if device not in h.devices:
                    continue
            elif t.family != "inet" and nfproto is not None and t.nfproto != nfproto:
                continue
            chains.append((ch, h))
        if hook == "ingress":
            fts += [ft for ft in t.flowtables.values() if device in ft.devices]
    manip = NAT_MANIP.get(hook)
    core_order = min((c.order for c, h in chains if h.type == "nat"), default=0)
    out = []
    for c, h in chains:
        if h.type == "nat" and manip is not None:  # NAT_MANIP names every hook a nat chain may have
            prio = _NAT_PRIO[manip]
            key = (prio, -core_order, h.priority, -c.order)
        else:
            prio = h.priority
            key = (prio, -c.order, 0, 0)
        out.append(HookEntry(prio, key, chain=c))
    out += [HookEntry(ft.priority, (ft.priority, -ft.order, 0, 0), flowtable=ft) for ft in fts]
    result = tuple(sorted(out, key=lambda e: e.key))
    return result
