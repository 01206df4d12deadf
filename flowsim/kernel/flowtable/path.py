"""Forward-path resolution: ``dev_fill_forward_path`` → ``nft_flow_route`` (net/core/dev.c, nft_flow_offload.c).

Theory of operation
-------------------
When ``flow add @ft`` creates a flow, the kernel works out, for each
direction, how packets of that direction leave the router and — from the same
walk — how packets of the *opposite* direction arrive:

1. :func:`dev_fill_forward_path` (net/core/dev.c) walks down from the
   route's output device, calling each device's ``ndo_fill_forward_path``
   (:mod:`flowsim.kernel.devices`) until a device without one, and appends it as the
   final ``ETHERNET`` entry.  At most 5 entries; a resolver error or a
   resolver that does not move ``ctx.dev`` fails the walk.
2. :func:`nft_dev_fill_forward_path` first resolves the neighbour of the next
   hop when the route's device is a valid Ethernet device (its MAC must be
   ``NUD_VALID``), then does the walk.
3. :func:`nft_dev_path_info` aggregates the stack (top device first) into a
   :class:`PathInfo`: ingress device (= egress device), encapsulations,
   tunnel, MACs, xmit type.  In 7.0 an entry that fails only clears
   ``indev`` and the loop goes on; from the June-2026 rework
   (``path_failure = no-flow``) the first failure is returned.
4. :func:`nft_dev_forward_path` writes the result into the per-direction
   :class:`RouteDir` pair: ``out`` of this direction and ``in`` of the
   opposite one, replacing this direction's route by the underlay route when
   a tunnel was found (``nft_flow_tunnel_update_route``; from 7.3 the route
   the tunnel's resolver looked up, switch ``tunnel_route``).
5. :func:`nft_flow_route` looks up the route back to the sender, fills the
   defaults (``nft_default_forward_path``) and runs step 4 for the NEIGH
   directions.  It returns a :class:`FlowRoute`: the two :class:`RouteDir`
   values the flow's tuples are built from (``flow_offload_route_init``,
   which reverses the encap order in ``nf_flow_table_core.c``, is the
   flowtable's job), the per-direction diagnostics (:class:`DirPath`), and,
   when no flow may be created, the :class:`PathError` that says which entry
   caused it.

Calling it from the flowtable (``nft_flow_offload_eval``)::

    route = nft_flow_route(topo, "nsr1", (CtTuple(orig_src, orig_dst), CtTuple(reply_src, reply_dst)),
                           dir=0, in_dev="veth0", ft=FlowtableRef("f1", {"veth0", "veth1"}),
                           profile=get_profile("linux-7.0"))
    if route.error is None:
        ...  # flow_offload_alloc + flow_offload_route_init(route.tuple)

``tuples[d]`` are the conntrack tuples' addresses per direction after NAT
(``ct->tuplehash[d].tuple.src/dst.u3``); ``in_dev`` is the device the current
packet came in on (``nft_in(pkt)``); ``this_dst`` the route the slow path chose
for it (default: looked up again).
"""

from __future__ import annotations

import builtins
import enum
import errno
import ipaddress
from collections.abc import Iterable, Sequence

import attrs

from flowsim.kernel.devices import ndo_fill_forward_path
from flowsim.kernel.devices.base import (
    NET_DEVICE_PATH_STACK_MAX, ZERO_MAC, BrVlanMode, DevPathType, Encap, NetDevice, PathCtx, PathEntry,
    PathError, PathTun, is_zero_mac,
)
from flowsim.kernel.fib import Route
from flowsim.kernel.headers import ETH_P_IP, ETH_P_IPV6
from flowsim.kernel.flowtable.tuple import NF_FLOW_TABLE_ENCAP_MAX
from flowsim.kernel.neigh import NudState
from flowsim.nft.parse import parse_ruleset
from flowsim.profiles import Profile, get_profile

__all__ = [
    "XmitType", "CtTuple", "FlowtableRef", "DevicePath", "PathInfo", "DirPath", "RouteDir", "FlowRoute",
    "dev_fill_forward_path", "nft_dev_fill_forward_path", "nft_dev_path_info", "resolve_path",
    "nft_dev_forward_path", "nft_flow_route", "ruleset_flowtables",
    "FLOW_OFFLOAD_DIR_ORIGINAL", "FLOW_OFFLOAD_DIR_REPLY", "NF_FLOW_TABLE_ENCAP_MAX",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
FLOW_OFFLOAD_DIR_ORIGINAL = 0
FLOW_OFFLOAD_DIR_REPLY = 1


class XmitType(enum.IntEnum):
    """``enum flow_offload_xmit_type``."""

    UNSPEC = 0
    NEIGH = 1
    XFRM = 2
    DIRECT = 3
    TC = 4


@attrs.frozen
class CtTuple:
    """The address part of one conntrack direction (``ct->tuplehash[dir].tuple``), after NAT."""

    src: IPAddress
    dst: IPAddress


def _device_names(names: Iterable[str]) -> frozenset[str]:
    return frozenset(names)


@attrs.frozen
class FlowtableRef:
    """What path resolution needs of a flowtable: its devices and the HW-offload flag."""

    name: str
    devices: frozenset[str] = attrs.field(converter=_device_names)
    hw_offload: bool = False

    def find_dev(self, dev: str | None) -> bool:
        """``nft_flowtable_find_dev``."""
        return dev is not None and dev in self.devices


# ---------------------------------------------------------------------- values

@attrs.frozen
class DevicePath:
    """``struct net_device_path_stack`` after ``dev_fill_forward_path``; *error* names the failing slot."""

    stack: tuple[PathEntry, ...]
    error: PathError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@attrs.frozen
class PathInfo:
    """``struct nft_forward_info``: the aggregate of one stack (device names, not pointers)."""

    indev: str | None = None
    outdev: str | None = None
    hw_outdev: str | None = None  # <= 6.18 only (removed with hw_ifidx in 6.19)
    encaps: tuple[Encap, ...] = ()
    ingress_vlans: int = 0
    tun: PathTun | None = None
    num_tuns: int = 0
    h_source: str = ZERO_MAC
    h_dest: str = ZERO_MAC
    xmit_type: XmitType = XmitType.UNSPEC
    needs_gso_segment: bool = False
    error: PathError | None = None  # first entry that failed (in 7.0 the walk may recover)
    notes: tuple[str, ...] = ()

    def to_json(self, ns=None) -> dict:
        def index(name):
            return ns.devices[name].ifindex if ns is not None and name in ns.devices else None
        return {"indev": self.indev, "indev_ifindex": index(self.indev), "outdev": self.outdev,
                "outdev_ifindex": index(self.outdev), "encap": [e.to_json() for e in self.encaps],
                "ingress_vlans": self.ingress_vlans, "tun": self.tun.to_json() if self.tun else None,
                "xmit_type": self.xmit_type.name.lower(), "needs_gso_segment": self.needs_gso_segment,
                "h_source": self.h_source, "h_dest": self.h_dest}


@attrs.frozen
class DirPath:
    """Diagnostics of one direction: route, neighbour, stack, aggregate and what stopped it."""

    dir: int
    route: Route
    daddr: IPAddress
    nexthop: IPAddress | None = None
    ha: str | None = None  # neighbour MAC; None when the neighbour step was skipped
    neigh_state: NudState | None = None
    stack: tuple[PathEntry, ...] = ()
    info: PathInfo | None = None  # None: the fill failed (the kernel leaves info zeroed)
    error: PathError | None = None  # what makes this direction unusable
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def xmit_type(self) -> XmitType:
        """The xmit type this direction ends up with: DIRECT from the path, else the route's NEIGH."""
        if self.info is not None and self.info.xmit_type == XmitType.DIRECT:
            return XmitType.DIRECT
        return XmitType.NEIGH


@attrs.frozen
class RouteDir:
    """``nf_flow_route.tuple[dir]``: ``in`` = how this direction arrives, ``out`` = how it leaves.

    ``in_encaps`` keeps the order the path recorded (top device first);
    ``flow_offload_fill_route`` reverses it into the tuple (outermost first).
    """

    dst: Route | None = None
    in_ifindex: int = 0
    in_encaps: tuple[Encap, ...] = ()
    in_num_encaps: int = 0
    in_ingress_vlans: int = 0
    in_tun: PathTun | None = None
    in_num_tuns: int = 0
    out_ifindex: int = 0
    out_hw_ifindex: int = 0
    out_h_source: str = ZERO_MAC
    out_h_dest: str = ZERO_MAC
    out_needs_gso_segment: bool = False
    xmit_type: XmitType = XmitType.UNSPEC

    def to_json(self) -> dict:
        return {"dst": self.dst.to_json() if self.dst else None,
                "in": {"ifindex": self.in_ifindex, "encap": [e.to_json() for e in self.in_encaps[:self.in_num_encaps]],
                       "ingress_vlans": self.in_ingress_vlans, "tun": self.in_tun.to_json() if self.in_tun else None},
                "out": {"ifindex": self.out_ifindex, "h_source": self.out_h_source, "h_dest": self.out_h_dest,
                        "needs_gso_segment": self.out_needs_gso_segment},
                "xmit_type": self.xmit_type.name.lower()}


@attrs.frozen
class FlowRoute:
    """The result of :func:`nft_flow_route`: ``tuple[d]`` per direction; ``error`` → no flow."""

    netns: str
    dir: int
    tuple: tuple[RouteDir, RouteDir]
    paths: builtins.tuple[DirPath | None, DirPath | None]  # builtins: the field above shadows the name
    error: PathError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


# ---------------------------------------------------------------------- dev_fill_forward_path (net/core/dev.c)

def dev_fill_forward_path(ns, dev: NetDevice, daddr: str, profile: Profile, ether_type: int = ETH_P_IP) -> DevicePath:
    """Mirrors dev_fill_forward_path: walk the resolvers, then the final ETHERNET entry.

    *ether_type* is ``ctx->ether_type`` (7.3: ``pkt->ethertype``, which the tunnel resolvers check)."""
    ctx = PathCtx(ns, profile, dev, daddr, ether_type=ether_type)
    stack: list[PathEntry] = []
    while ctx.dev is not None:
        resolver = ndo_fill_forward_path(ctx.dev, profile)
        if resolver is None:
            break
        last = ctx.dev
        if len(stack) >= NET_DEVICE_PATH_STACK_MAX:  # dev_fwd_path
            return DevicePath(tuple(stack), PathError(-1, last.name, "dev_fwd_path",
                              f"stack full: no slot {len(stack)} (max {NET_DEVICE_PATH_STACK_MAX})", len(stack)))
        result = resolver(ctx)
        if isinstance(result, PathError):
            return DevicePath(tuple(stack), attrs.evolve(result, index=len(stack)))
        stack.append(result)
        if ctx.dev is last:
            return DevicePath(tuple(stack), PathError(-1, last.name, "dev_fill_forward_path",
                              "the resolver did not move to another device", len(stack) - 1))
    if ctx.dev is None:
        return DevicePath(tuple(stack))
    if len(stack) >= NET_DEVICE_PATH_STACK_MAX:
        return DevicePath(tuple(stack), PathError(-1, ctx.dev.name, "dev_fwd_path",
                          f"no slot left for the final ETHERNET entry (max {NET_DEVICE_PATH_STACK_MAX})", len(stack)))
    stack.append(PathEntry(DevPathType.ETHERNET, ctx.dev.name, ctx.dev.ifindex))
    return DevicePath(tuple(stack))


# ---------------------------------------------------------------------- nft_dev_fill_forward_path, nft_dev_path_info

@attrs.frozen
class _Fill:
    ha: str | None
    nexthop: IPAddress | None
    neigh_state: NudState | None
    path: DevicePath | None
    error: PathError | None


def nft_dev_fill_forward_path(ns, route: Route, daddr: IPAddress, profile: Profile) -> _Fill:
    """Mirrors nft_dev_fill_forward_path: neighbour of the next hop (Ethernet only), then the walk."""
    dev = ns.devices[route.dev]
    ha, nexthop, state = None, None, None
    if dev.is_valid_ether():
        nexthop = route.nexthop(daddr)
        n = ns.neigh.lookup(dev.name, nexthop)
        if n is None:
            return _Fill(None, nexthop, NudState.NONE, None,
                         PathError(-1, dev.name, "nft_dev_fill_forward_path",
                                   f"no neighbour {nexthop} on {dev.name} (a new entry is NUD_NONE)"))
        ha, state = n.lladdr or ZERO_MAC, n.state
        if not n.valid:
            return _Fill(ha, nexthop, state, None,
                         PathError(-1, dev.name, "nft_dev_fill_forward_path",
                                   f"neighbour {nexthop} on {dev.name} is {n.state.name.lower()}, not NUD_VALID"))
    path = dev_fill_forward_path(ns, dev, ha or ZERO_MAC, profile, ETH_P_IP if daddr.version == 4 else ETH_P_IPV6)
    return _Fill(ha, nexthop, state, path, path.error)


class _Info:
    """Mutable ``nft_forward_info`` while aggregating."""

    def __init__(self, ha: str | None):
        self.indev: str | None = None
        self.outdev: str | None = None
        self.encaps: list[Encap] = []
        self.ingress_vlans = 0
        self.tun: PathTun | None = None
        self.num_tuns = 0
        self.h_source = ZERO_MAC
        self.h_source_dev: str | None = None
        self.h_dest = ha or ZERO_MAC
        self.xmit_type = XmitType.UNSPEC
        self.needs_gso_segment = False
        self.error: PathError | None = None
        self.notes: list[str] = []

    def fail(self, i: int, entry: PathEntry, reason: str) -> None:
        self.indev = None
        if self.error is None:
            self.error = PathError(-1, entry.dev, "nft_dev_path_info", reason, i)

    def freeze(self, hw_outdev: str | None = None) -> PathInfo:
        return PathInfo(self.indev, self.outdev, hw_outdev, tuple(self.encaps), self.ingress_vlans, self.tun,
                        self.num_tuns, self.h_source, self.h_dest, self.xmit_type, self.needs_gso_segment,
                        self.error, tuple(self.notes))


def _info_l2(ns, info: _Info, i: int, e: PathEntry, profile: Profile, legacy: bool) -> bool:
    """ETHERNET / DSA / VLAN / PPPOE / TUN branch; returns False when the loop must stop (DSA)."""
    info.indev = e.dev
    if is_zero_mac(info.h_source):
        info.h_source = ns.devices[e.dev].h_source()
        info.h_source_dev = e.dev
    if e.type == DevPathType.ETHERNET:
        return True
    if e.type == DevPathType.DSA:
        return False
    if e.type == DevPathType.TUN:
        if info.num_tuns:
            info.fail(i, e, "a second tunnel in the stack")
            return True
        info.tun, info.num_tuns = e.tun, 1
        return True
    if len(info.encaps) >= NF_FLOW_TABLE_ENCAP_MAX:
        info.fail(i, e, f"more than {NF_FLOW_TABLE_ENCAP_MAX} encapsulations")
        return True
    if legacy and info.outdev is None:
        info.outdev = e.dev
    enc = e.encap
    assert enc is not None  # VLAN and PPPOE entries record their encap
    info.encaps.append(Encap(enc.id, enc.proto))
    if e.type == DevPathType.PPPOE:
        info.h_dest = enc.h_dest or ZERO_MAC  # ppp_fill_forward_path: the connected peer's MAC
        if profile.pppoe_direct_xmit:
            info.xmit_type = XmitType.DIRECT
            info.needs_gso_segment = True
    return True


def _info_bridge(ns, info: _Info, i: int, e: PathEntry, profile: Profile) -> None:
    """DEV_PATH_BRIDGE branch: MAC, VLAN mode, DIRECT xmit."""
    if is_zero_mac(info.h_source):
        info.h_source = ns.devices[e.dev].h_source()
    br = e.bridge
    assert br is not None  # a BRIDGE entry records its VLAN mode
    mode = br.vlan_mode
    if mode == BrVlanMode.UNTAG_HW:
        if info.encaps:
            info.ingress_vlans |= 1 << (len(info.encaps) - 1)
    elif mode == BrVlanMode.TAG:
        if profile.bridge_tag_encap_check and len(info.encaps) >= NF_FLOW_TABLE_ENCAP_MAX:
            info.fail(i, e, f"TAG with {NF_FLOW_TABLE_ENCAP_MAX} encapsulations already recorded")
        else:
            if len(info.encaps) >= NF_FLOW_TABLE_ENCAP_MAX:
                info.notes.append(f"entry {i}: TAG writes encap[{len(info.encaps)}] past the array (no check before 6.19)")
            info.encaps.append(Encap(br.vlan_id, br.vlan_proto))
    elif mode == BrVlanMode.UNTAG:
        if not info.encaps:
            info.fail(i, e, "UNTAG with no encapsulation recorded (WARN_ON_ONCE)")
        else:
            info.encaps.pop()
    info.xmit_type = XmitType.DIRECT


# `flags offload` asks nf_flow_offload_add to push each flow to the NIC (nf_flow_table_offload.c, the
# driver's ndo_setup_tc TC_SETUP_FT).  No driver is modelled: the flow still lives in the software table
# and its packets take the software fast path, which is what flowsim shows.
HW_OFFLOAD_WARNING = ("flowtable {ft} has 'flags offload': hardware offload (nf_flow_offload_add -> the "
                      "driver's ndo_setup_tc TC_SETUP_FT) is not modelled; flowsim shows the software fast path")

_L2_TYPES = (DevPathType.ETHERNET, DevPathType.DSA, DevPathType.VLAN, DevPathType.PPPOE, DevPathType.TUN)


def nft_dev_path_info(ns, stack: Sequence[PathEntry], ha: str | None, ft: FlowtableRef,
                      profile: Profile) -> PathInfo:
    """Mirrors nft_dev_path_info (7.0), with the June-2026 early return as ``path_failure=no-flow``."""
    info = _Info(ha)
    legacy = profile.encap_push_order == "legacy"
    stop_early = profile.path_failure == "no-flow"
    for i, e in enumerate(stack):
        if e.type in _L2_TYPES:
            if not _info_l2(ns, info, i, e, profile, legacy):
                break
        elif e.type == DevPathType.BRIDGE:
            _info_bridge(ns, info, i, e, profile)
        else:
            info.fail(i, e, f"path type {e.type.name} is not usable by the software flowtable")
        if info.error is not None and stop_early:
            info.indev = None
            return info.freeze()
    if info.error is not None and info.indev is not None:
        info.notes.append(f"entry {info.error.index} ({info.error.dev}) failed: {info.error.reason}; "
                          f"a later entry set indev again (REF keeps going)")
    hw_outdev = None
    if legacy:
        info.outdev = info.outdev or info.indev
        hw_outdev = info.indev
    else:
        info.outdev = info.indev
    if ft.hw_offload and info.indev is not None and ns.devices[info.indev].is_valid_ether():
        info.xmit_type = XmitType.DIRECT
    src = ns.devices.get(info.h_source_dev) if info.h_source_dev else None
    if info.xmit_type == XmitType.DIRECT and src is not None and src.link_type != "ether":
        info.notes.append(f"DIRECT xmit with h_source {info.h_source} copied from {src.name}'s dev_addr "
                          f"({src.link_type}), not from an Ethernet device")
    return info.freeze(hw_outdev)


def resolve_path(ns, route: Route, daddr: IPAddress, ft: FlowtableRef, profile: Profile,
                 dir: int = FLOW_OFFLOAD_DIR_ORIGINAL) -> DirPath:
    """Resolve and aggregate one direction whose packets use *route* towards *daddr*.

    The first half of :func:`nft_dev_forward_path`, usable alone (``flowsim path``).
    """
    if route.error or route.dev is None:
        return DirPath(dir, route, daddr, error=PathError(route.error or -errno.ENETUNREACH, None, "nf_route",
                                                          f"no usable route to {daddr} ({route.type})"))
    fill = nft_dev_fill_forward_path(ns, route, daddr, profile)
    stack = fill.path.stack if fill.path else ()
    if fill.error is not None or fill.path is None:
        return DirPath(dir, route, daddr, fill.nexthop, fill.ha, fill.neigh_state, stack, error=fill.error)
    info = nft_dev_path_info(ns, stack, fill.ha, ft, profile)
    error = None
    if info.indev is None:
        error = info.error or PathError(-1, None, "nft_dev_path_info", "no ingress device found")
    if error is None and not ft.find_dev(info.indev):
        error = PathError(-errno.ENOENT, info.indev, "nft_dev_forward_path",  # nft_flowtable_find_dev failed
                          f"{info.indev} is not a device of flowtable {ft.name}")
    warnings = info.notes
    if ft.hw_offload:
        warnings = (*warnings, HW_OFFLOAD_WARNING.format(ft=ft.name))
    return DirPath(dir, route, daddr, fill.nexthop, fill.ha, fill.neigh_state, stack, info=info, error=error,
                   warnings=warnings)


# ---------------------------------------------------------------------- forward path and flow route

def nft_flow_tunnel_update_route(ns, tun: PathTun, in_dev: str | None, mark: int = 0) -> Route | None:
    """Mirrors nft_flow_tunnel_update_route: the underlay route to the tunnel remote, or None."""
    route = ns.fib.lookup(tun.dst, saddr=tun.src, mark=mark)
    return None if route.error else route


def nft_dev_forward_path(ns, route: list[RouteDir], tuples: Sequence[CtTuple], dir: int, in_dev: str | None,
                         ft: FlowtableRef, profile: Profile, mark: int = 0) -> DirPath:
    """Mirrors nft_dev_forward_path: fill ``route[dir].out`` and ``route[!dir].in`` (mutates *route*)."""
    other = 1 - dir
    dst = route[dir].dst
    assert dst is not None  # nft_default_forward_path gave both directions their route
    daddr = tuples[other].src
    p = resolve_path(ns, dst, daddr, ft, profile, dir)
    info = p.info or PathInfo()  # a failed fill leaves info zeroed
    if info.outdev is not None:
        route[dir] = attrs.evolve(route[dir], out_ifindex=ns.devices[info.outdev].ifindex,
                                  out_hw_ifindex=ns.devices[info.hw_outdev].ifindex if info.hw_outdev else 0)
    if info.indev is None or not ft.find_dev(info.indev):
        return p
    route[other] = attrs.evolve(route[other], in_ifindex=ns.devices[info.indev].ifindex, in_encaps=info.encaps)
    tun = info.tun
    if info.num_tuns and tun is not None and profile.tunnel_route == "resolver":
        # 7.3: the resolver's route (path->tun.dst) replaces this direction's route; no second lookup
        route[dir] = attrs.evolve(route[dir], dst=tun.route)
        route[other] = attrs.evolve(route[other], in_tun=PathTun(tun.dst, tun.src, tun.l3_proto),
                                    in_num_tuns=info.num_tuns)
    elif info.num_tuns and tun is not None:
        tun_dst = nft_flow_tunnel_update_route(ns, tun, in_dev, mark)
        if tun_dst is not None:
            route[dir] = attrs.evolve(route[dir], dst=tun_dst)
            route[other] = attrs.evolve(route[other], in_tun=PathTun(tun.dst, tun.src, tun.l3_proto),
                                        in_num_tuns=info.num_tuns)
        else:
            p = attrs.evolve(p, warnings=p.warnings + (f"no underlay route to tunnel remote {tun.dst}: "
                                                       "tunnel ignored",))
    route[other] = attrs.evolve(route[other], in_num_encaps=len(info.encaps), in_ingress_vlans=info.ingress_vlans)
    if info.xmit_type == XmitType.DIRECT:
        route[dir] = attrs.evolve(route[dir], out_h_source=info.h_source, out_h_dest=info.h_dest,
                                  xmit_type=XmitType.DIRECT)
    route[dir] = attrs.evolve(route[dir], out_needs_gso_segment=info.needs_gso_segment)
    return p


def _dev_name(dev: NetDevice | str | None) -> str | None:
    return dev.name if isinstance(dev, NetDevice) else dev


def nft_flow_route(topo, netns: str, tuples: Sequence[CtTuple], dir: int, in_dev: NetDevice | str,
                   ft: FlowtableRef, profile: Profile | str | None = None, *, this_dst: Route | None = None,
                   mark: int = 0) -> FlowRoute:
    """Mirrors nft_flow_route (+ nft_default_forward_path); see the module docstring for the call."""
    profile = get_profile(profile)
    ns = topo.netns(netns)
    in_name = _dev_name(in_dev)
    other = 1 - dir
    empty = (RouteDir(), RouteDir())
    if this_dst is None:
        this_dst = ns.fib.lookup(tuples[other].src)
    if this_dst.error or this_dst.dev is None:
        return FlowRoute(netns, dir, empty, (None, None),
                         PathError(-errno.ENOENT, in_name, "nft_flow_route", f"current packet has no route ({this_dst})"))
    other_dst = ns.fib.lookup(tuples[dir].src, saddr=tuples[other].src, oif=in_name, mark=mark)
    if other_dst.error or other_dst.dev is None:
        return FlowRoute(netns, dir, empty, (None, None),
                         PathError(-errno.ENOENT, in_name, "nft_flow_route",
                                   f"no route back to {tuples[dir].src} through {in_name}"))
    route = [RouteDir(), RouteDir()]
    for dst, d in ((this_dst, dir), (other_dst, other)):  # nft_default_forward_path
        route[1 - d] = attrs.evolve(route[1 - d], in_ifindex=ns.devices[dst.dev].ifindex)
        # XFRM if the dst has an xfrm bundle (flowsim.kernel.stack.xfrm.XfrmRoute), else NEIGH
        xmit = XmitType.XFRM if getattr(dst, "xfrm", None) is not None else XmitType.NEIGH
        route[d] = attrs.evolve(route[d], dst=dst, xmit_type=xmit)
    paths: list[DirPath | None] = [None, None]
    neigh = [route[d].xmit_type == XmitType.NEIGH for d in (0, 1)]
    error = None
    for d in (dir, other):
        if not neigh[d] or (profile.path_requires_both_neigh and not all(neigh)):
            continue
        found = paths[d] = nft_dev_forward_path(ns, route, tuples, d, in_name, ft, profile, mark)
        if found.error is not None and profile.path_failure == "no-flow" and error is None:
            error = found.error
    return FlowRoute(netns, dir, (route[0], route[1]), (paths[0], paths[1]), error)


# ---------------------------------------------------------------------- flowtables in ruleset text

def ruleset_flowtables(text: str) -> list[FlowtableRef]:
    """The flowtables declared in nft ruleset *text* (name, devices, ``flags offload``), in declaration order.

    Read with the ruleset parser (:func:`flowsim.nft.parse.parse_ruleset`), so
    devices named through ``define`` and every syntax ``nft -f`` accepts are handled
    as the slow path sees them; a ruleset that does not parse raises its
    :class:`~flowsim.errors.RulesetError`.
    """
    return [FlowtableRef(ft.name, ft.devices, hw_offload="offload" in ft.flags)
            for ft in parse_ruleset(text).flowtables]
