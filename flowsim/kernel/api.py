"""The contract between the simulated stack and the flowtable.

The stack (:mod:`flowsim.kernel.stack.core`, :mod:`flowsim.sim.simulation`) owns devices, routing,
neighbours, nf_tables and conntrack per namespace and moves packets between
devices; the flowtable (:mod:`flowsim.kernel.flowtable.core`, :mod:`flowsim.kernel.flowtable.fastpath`)
owns flow entries and the per-packet fast path.  This module writes down what
each side calls on the other, as :class:`typing.Protocol` classes, so the two
can be read (and tested) separately.

The stack calls the flowtable
-----------------------------
* at the netdev **ingress** hook of a device, for each flowtable entry that
  ``Nftables.hook_entries("ingress", device=…)`` yields, in that order::

      verdict = fastpath.nf_flow_offload_hook(kernel, ns, ft, skb, in_dev)

  ``verdict`` is ``"accept"`` (continue through the stack: slow path),
  ``"drop"`` or ``"stolen"`` (the fast path has transmitted the skb through
  :meth:`Kernel.dev_queue_xmit` / :meth:`Kernel.neigh_output`; the stack
  must not touch it again).  On ``"drop"`` the reason id is in
  ``skb.drop_reason``.  The skb arrives with ``data`` at the network
  header, as ``skb_from_frame`` leaves it.
* from the forward chain's ``flow add @ft`` (the ``on_flow_add`` callback of
  ``Nftables.eval_hook``)::

      ok = flowtable.nft_flow_offload_eval(kernel, ns, ft, skb=skb, ct=ct, ctdir=d,
                                           in_dev=in_dev, route=route, tcp_flags=flags)

  ``route`` is the FIB route the stack chose for this packet (``this_dst``);
  ``False`` means NFT_BREAK (the rest of the rule is skipped).
* every second of virtual time: ``ft.nf_flow_offload_work_gc(kernel, ns)``.

The flowtable calls the stack (:class:`Kernel`)
------------------------------------------------
* ``kernel.now`` — virtual time in seconds;
* ``kernel.profile`` — the :class:`~flowsim.profiles.Profile`;
* ``kernel.topo`` — the :class:`~flowsim.config.topology.Topology`;
* ``kernel.dev_queue_xmit(dev, skb)`` — transmit an skb whose ``data``
  points at its link-layer header (Ethernet for Ethernet-type devices),
  ``skb.protocol`` set and possibly a hwaccel VLAN tag: runs the netdev
  egress hook and the device's xmit (a veth hands the frame to its peer);
* ``kernel.neigh_output(dev, skb, nexthop)`` — send an L3 skb out of *dev*
  towards *nexthop* the way ``ip_finish_output2`` does (neighbour resolution
  and link-layer header for Ethernet devices; VLAN, PPP, bridge and tunnel
  devices run their own xmit).  Used by the ≤ 6.18 NEIGH xmit;
* ``kernel.xfrm_output(ns, skb, dst)`` — the XFRM xmit (``nf_flow_xmit_xfrm``):
  hand the L3 skb (``data`` at the IP header, TTL already decremented) to
  the IPsec output of the cached route *dst* (an xfrm bundle,
  :class:`flowsim.kernel.stack.xfrm.XfrmRoute`): POSTROUTING on the inner packet,
  ESP encapsulation, then the outer packet's OUTPUT, POSTROUTING and
  transmit.  The fast path returns ``"stolen"`` after it;
* ``kernel.tracing`` — true when steps are being recorded; callers test it
  before building a step's details, so tracing costs nothing when off;
* ``kernel.trace(skb, where, what, **details)`` — one step of a packet's
  life for ``flowsim trace``;
* ``kernel.account(skb, kind)`` — *kind* is ``"fastpath"`` or
  ``"slowpath"``: attribute the hook's verdict to the packet's traffic
  direction (``skb.tag``);
* ``kernel.add_pieces(skb, n)`` — the packet of *skb* now travels as *n*
  more skbs (the fast path segmented a GSO skb), for packet accounting.

``ns`` is the stack's per-namespace state (:class:`NetnsState`).

The classes below are :class:`typing.Protocol` types, checked by mypy:
:class:`flowsim.kernel.stack.core.Kernel` is checked against :class:`Kernel`
where it is defined, and the flowtable can annotate its ``kernel`` and
``ns_state`` parameters with them without importing the stack.  This module
imports only what sits below both sides (devices, FIB, neighbours,
conntrack, skb, profiles).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from flowsim.kernel.conntrack import ConntrackTable
from flowsim.kernel.devices.base import NetDevice
from flowsim.kernel.fib import Fib, IPAddress, Route
from flowsim.kernel.neigh import NeighTable
from flowsim.kernel.skb import SkBuff
from flowsim.profiles import Profile

__all__ = ["Kernel", "NetnsState", "Namespace", "Topology"]


class Namespace(Protocol):
    """What the flowtable reads of a network namespace (``struct net``; :class:`flowsim.config.network.Namespace`)."""

    @property
    def name(self) -> str: ...

    @property
    def devices(self) -> Mapping[str, NetDevice]: ...

    @property
    def by_index(self) -> Mapping[int, NetDevice]: ...

    @property
    def fib(self) -> Fib: ...

    @property
    def neigh(self) -> NeighTable: ...

    def sysctl(self, key: str, default: str | None = None) -> str | None: ...


class Topology(Protocol):
    """The namespaces by name (``nft_flow_route`` resolves paths across them)."""

    def netns(self, name: str) -> Namespace: ...


class NetnsState(Protocol):
    """Per-namespace state the flowtable reads."""

    @property
    def name(self) -> str: ...

    @property
    def ns(self) -> Namespace: ...

    @property
    def conntrack(self) -> ConntrackTable: ...

    @property
    def gen(self) -> int:
        """Bumped by every change of the namespace's configuration during a run (a run event: devices,
        addresses, routes, neighbours): what the flowtable remembers of path resolution is kept while the
        namespace's generations (this, the FIB's and the neighbour table's version) are unchanged."""
        ...


class Kernel(Protocol):
    """Services of the simulated stack the flowtable uses."""

    @property
    def now(self) -> float: ...

    @property
    def profile(self) -> Profile: ...

    @property
    def topo(self) -> Topology: ...

    @property
    def tracing(self) -> bool: ...

    @property
    def verdict(self) -> Callable[[SkBuff, str], None] | None: ...

    def dev_queue_xmit(self, dev: NetDevice, skb: SkBuff) -> None: ...

    def neigh_output(self, dev: NetDevice, skb: SkBuff, nexthop: IPAddress) -> None: ...

    def xfrm_output(self, ns: NetnsState, skb: SkBuff, dst: Route) -> None: ...

    def trace(self, skb: SkBuff, where: str, what: str, **details: object) -> None: ...

    def account(self, skb: SkBuff, kind: str) -> None: ...

    def add_pieces(self, skb: SkBuff, n: int) -> None: ...
