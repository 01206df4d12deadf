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

A flowtable's devices are hooked by name when the ruleset is committed
(:func:`nft_flowtable_hook_devices`): a listed device the namespace does not
have refuses the whole ruleset before 6.16 and is left unbound from 6.16 on,
to be hooked when a device of that name registers.  Since the hook lookup
here is by name, a device that appears later is found without more work.

The order depends on the frozen ruleset only, so
:meth:`flowsim.nft.eval.Nftables.hook_entries` computes it here once per
(hook, family, device) and caches it; :mod:`flowsim.nft.eval` re-exports
this module's public names.
"""

from __future__ import annotations

from collections.abc import Container

import attrs

from flowsim.errors import RulesetError
from flowsim.nft.model import Chain, Flowtable, Ruleset

__all__ = [
    "HookEntry", "nf_hook_entries", "L3_HOOKS", "NF_IP_PRI_CONNTRACK", "NF_IP_PRI_NAT_DST", "NF_IP_PRI_NAT_SRC",
    "NAT_MANIP", "nft_flowtable_hook_devices", "ABSENT_DEVICE_MODES",
]

#: profiles.Profile.flowtable_absent_device: what nft_netdev_hook_alloc does with a device that does not exist
ABSENT_DEVICE_MODES = ("refuse", "bind-on-register")

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


def nft_flowtable_hook_devices(ruleset: Ruleset, present: Container[str], absent: str,
                               netns: str = "") -> tuple[tuple[Flowtable, str], ...]:
    """``nf_tables_newflowtable`` → ``nft_flowtable_parse_hook`` → ``nft_netdev_hook_alloc`` for every device.

    *present* holds the namespace's device names when the ruleset is committed.
    With *absent* ``"refuse"`` (kernels before 6.16) a listed device that is not
    there fails the batch with -ENOENT (nft: "Could not process rule: No such
    file or directory"), reported at the device in the ``devices`` list.  With
    ``"bind-on-register"`` (6.16, 6d07a289504a) the hook is created without
    it and ``nft_flowtable_event`` binds it at NETDEV_REGISTER (a331b78a5525);
    the (flowtable, device) pairs left unbound are returned.
    """
    if absent not in ABSENT_DEVICE_MODES:
        raise ValueError(f"flowtable_absent_device {absent!r}")  # profiles.py checks the choices
    unbound = []
    for ft in ruleset.flowtables:
        for i, dev in enumerate(ft.devices):
            if dev in present:
                continue
            if absent == "bind-on-register":
                unbound.append((ft, dev))
                continue
            loc = ft.device_locs[i] if i < len(ft.device_locs) else ft.loc
            where = f" in namespace {netns!r}" if netns else ""
            raise RulesetError(
                f"flowtable {ft.name!r} lists device {dev!r}, which does not exist{where}: the kernel refuses "
                f"the ruleset (nft_netdev_hook_alloc: -ENOENT; nft: Could not process rule: No such file "
                f"or directory)", file=loc.file if loc else ruleset.file, line=loc.line if loc else None,
                column=loc.column if loc else None, value=dev,
                expected="a device created before the ruleset, or a 6.16+ profile "
                         "(flowtable_absent_device=bind-on-register) that binds it when it appears")
    return tuple(unbound)
