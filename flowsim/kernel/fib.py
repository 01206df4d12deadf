"""Per-namespace IPv4 / IPv6 forwarding information base (fib_table_lookup, ip6_pol_route).

Theory of operation
-------------------
A :class:`Fib` belongs to one namespace.  It holds the routes added with
``ip route add`` (static :class:`Route` values) and derives, every time it is
asked, the routes the kernel installs for addresses: a connected prefix route
per address (``proto kernel scope link``; metric 0 for IPv4, 256 for IPv6;
none for an IPv4 /32 or IPv6 /128 without peer) and a ``local`` route per
address in the local table.  Deriving them keeps the FIB right when addresses
are flushed or devices go down without any bookkeeping.

:meth:`Fib.lookup` mirrors an output route lookup (``ip_route_output_key`` /
``ip6_route_output``): the local table first, then the longest matching
prefix among routes whose device is up, lowest metric first, first added
first.  With an output interface (``flowi4_oif``) IPv4 only considers routes
through it and, finding none, assumes the destination is on-link there, as
``ip_route_output_key_hash_rcu`` does; IPv6 merely prefers routes through it
(``rt6_device_match`` without ``RT6_LOOKUP_F_IFACE``).  A lookup never raises:
failures are routes whose :attr:`Route.error` is the kernel's negative errno
(blackhole ``-EINVAL``, unreachable ``-EHOSTUNREACH``, prohibit ``-EACCES``,
no route at all ``-ENETUNREACH``).

Route validity (what ``dst_check`` answers for a route a flow cached) is kept
per family, as the kernel keeps it.  IPv4: the namespace's ``rt_genid``
(:meth:`Fib.rt_cache_flush`), bumped by ``fib_table_insert``, by
``fib_table_delete`` and replace of a route a lookup had returned
(``FA_S_ACCESSED``), and by address and device events.  IPv6: a serial per
fib6 node, the route's cookie (``rt6_get_cookie``): ``fib6_add`` bumps the
nodes from the new route up to the root
(:meth:`Fib.fib6_update_sernum_upto_root`), a deleted route fails its own
check, an address deleted bumps them all (:meth:`Fib.fib6_flush_trees`).
:meth:`Fib.sync` applies what a run event did to the addresses and devices.

    >>> import ipaddress
    >>> r = Route(ipaddress.ip_network("0.0.0.0/0"), dev="veth1", gateway=ipaddress.ip_address("192.168.10.2"))
    >>> str(r), str(r.nexthop(ipaddress.ip_address("10.0.2.99")))
    ('default via 192.168.10.2 dev veth1', '192.168.10.2')
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Callable, Iterable
from typing import cast

import attrs

__all__ = ["Route", "Fib", "ROUTE_TYPES", "ROUTE_ERRORS"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_ZERONET = ipaddress.IPv4Network("0.0.0.0/8")  # ipv4_is_zeronet: no prefix route for an address in it

ROUTE_TYPES = ("unicast", "local", "blackhole", "unreachable", "prohibit")
# fib_props[].error / ip6_rt_type_to_error; "none" is the no-match result
ROUTE_ERRORS = {"unicast": 0, "local": 0, "blackhole": -errno.EINVAL, "unreachable": -errno.EHOSTUNREACH,
                "prohibit": -errno.EACCES, "none": -errno.ENETUNREACH}


@attrs.frozen
class Route:
    """One route (``struct fib_alias``+``fib_nh`` / ``struct fib6_info``), also a lookup result."""

    prefix: IPNetwork
    type: str = "unicast"
    dev: str | None = None
    gateway: IPAddress | None = None
    metric: int = 0
    mtu: int = 0  # RTAX_MTU; 0 = the device's MTU
    mtu_lock: bool = False
    src: IPAddress | None = None
    proto: str = "boot"
    scope: str = "universe"
    table: str = "main"
    onlink: bool = False

    @property
    def version(self) -> int:
        return self.prefix.version

    @property
    def error(self) -> int:
        """The ``dst->error`` / ``PTR_ERR`` of this result (0 for a usable route)."""
        return ROUTE_ERRORS[self.type]

    def nexthop(self, daddr: IPAddress) -> IPAddress:
        """``rt_nexthop`` / ``rt6_nexthop``: the gateway, or the destination itself when on-link."""
        return self.gateway if self.gateway is not None else daddr

    def __str__(self) -> str:
        words = [] if self.type == "unicast" else [self.type]
        words.append("default" if self.prefix.prefixlen == 0 else str(self.prefix))
        if self.gateway is not None:
            words += ["via", str(self.gateway)]
        if self.dev is not None:
            words += ["dev", self.dev]
        if self.proto not in ("boot", "static"):
            words += ["proto", self.proto]
        if self.scope != "universe":
            words += ["scope", self.scope]
        if self.src is not None:
            words += ["src", str(self.src)]
        if self.metric:
            words += ["metric", str(self.metric)]
        if self.mtu:
            words += ["mtu"] + (["lock"] if self.mtu_lock else []) + [str(self.mtu)]
        return " ".join(words)

    def to_json(self) -> dict:
        return {"dst": "default" if self.prefix.prefixlen == 0 else str(self.prefix), "type": self.type,
                "dev": self.dev, "gateway": None if self.gateway is None else str(self.gateway),
                "metric": self.metric, "mtu": self.mtu, "mtu_lock": self.mtu_lock, "error": self.error}


_IPV6_ROOT = ipaddress.IPv6Network("::/0")  # the root node of a fib6 table (tb6_root)


def address_prefix_route(a) -> IPNetwork | None:
    """The prefix of the route ``fib_add_ifaddr`` / ``inet6_addr_add`` → ``addrconf_prefix_route`` make for the
    address *a* (an :class:`~flowsim.kernel.devices.base.IfAddr`), None when they make none: ``noprefixroute``,
    a host address without peer (a /32 or /128), an IPv4 address in 0.0.0.0/8 (``ipv4_is_zeronet``).  (An IPv4
    secondary makes none either: that depends on the device's other addresses, :meth:`Fib.connected`.)"""
    if a.noprefixroute or (a.peer is None and a.local.network.prefixlen == a.local.max_prefixlen):
        return None
    if a.version == 4 and a.prefix.network_address in _ZERONET:
        return None
    return a.prefix


def prefix_route_metric(a) -> int:
    """The metric of *a*'s prefix route: its ``metric`` (``ifa_rt_priority``), else 0 for IPv4 and
    ``IP6_RT_PRIO_ADDRCONF`` (256) for IPv6."""
    return a.metric or (0 if a.version == 4 else 256)


def _no_route(daddr: IPAddress) -> Route:
    return Route(ipaddress.ip_network((daddr, daddr.max_prefixlen)), type="none", proto="none")


class Fib:
    """The routing tables (main and local) of one namespace."""

    def __init__(self, ns) -> None:
        self.ns = ns  # flowsim.config.topology.Namespace: devices with their addresses and state
        self.static: list[Route] = []
        # Route validity (dst_check), per family as the kernel keeps it:
        # IPv4: net->ipv4.rt_genid, bumped by rt_cache_flush; every cached rtable remembers the value it was
        #   made under (rt_is_expired).
        self.rt_genid = 0
        # IPv6: one serial number per fib6 node (fn_sernum), from the per-namespace counter
        #   net->ipv6.fib6_sernum (fib6_new_sernum); a route's cookie is its node's (fib6_get_cookie_safe).
        #   A node is (table, prefix); one never changed holds the value of the last fib6_flush_trees.
        self.fib6_sernum = 0
        self._fn_sernum: dict[tuple[str, IPNetwork], int] = {}
        self._fib6_flushed = 0
        self._accessed: set[Route] = set()  # static IPv4 routes a lookup returned (FA_S_ACCESSED)
        self._derived: frozenset | None = None  # the address-derived routes at the last sync()
        # prefix routes of addresses deleted by `ip route del` (device, prefix, metric): gone until the device
        # comes up again or an address makes the route again (prefix_route_restored)
        self.deleted_prefix_routes: set[tuple[str, IPNetwork, int]] = set()
        self.version = 0  # any change above: lets a cached dst_check answer stand until the next one
        self.frozen = False  # the FIB of a loaded description (flowsim.config.network.Topology.freeze)

    @property
    def genid(self) -> tuple[int, int]:
        """Both generations at once: (IPv4 rt_genid, IPv6 fib6_sernum) (a summary to compare, not a cookie)."""
        return (self.rt_genid, self.fib6_sernum)

    # --- route validity (dst_check)
    def rt_cache_flush(self) -> None:
        """``rt_cache_flush`` → ``rt_genid_bump_ipv4``: every IPv4 route cached before is obsolete."""
        self.rt_genid += 1
        self.version += 1

    def fib6_new_sernum(self) -> int:
        """``fib6_new_sernum``: the next value of the namespace's counter."""
        self.fib6_sernum += 1
        return self.fib6_sernum

    def fn_sernum(self, table: str, prefix: IPNetwork) -> int:
        """The ``fn_sernum`` of the fib6 node of *prefix* in *table*."""
        return max(self._fn_sernum.get((table, prefix), 0), self._fib6_flushed)

    def fib6_update_sernum_upto_root(self, table: str, prefix: ipaddress.IPv6Network) -> None:
        """``fib6_update_sernum_upto_root``: a new serial on the node of *prefix* and on every node above it.

        The nodes above a prefix are those of the prefixes covering it (down to
        the root, ``::/0``): routes there may no longer be the best match for
        part of their range.  More specific and disjoint prefixes keep theirs.
        """
        sernum = self.fib6_new_sernum()
        path: set[tuple[str, IPNetwork]] = {(table, prefix), (table, _IPV6_ROOT)}
        nodes = [(r.table, r.prefix) for r in self.static + self.connected(6) + self.local(6) if r.version == 6]
        path.update(key for key in [*nodes, *self._fn_sernum]
                    if key[0] == table and isinstance(key[1], ipaddress.IPv6Network) and prefix.subnet_of(key[1]))
        for key in path:
            self._fn_sernum[key] = sernum
        self.version += 1

    def fib6_flush_trees(self) -> None:
        """``rt_genid_bump_ipv6`` → ``fib6_flush_trees``: a new serial on every node of every table."""
        self._fib6_flushed = self.fib6_new_sernum()
        self._fn_sernum.clear()
        self.version += 1

    def _route_changed(self, route: Route, old: Route | None = None, *, inserted: bool = True) -> None:
        """What a route insert, replace or delete does to cached routes, per family.

        IPv4 (``fib_table_insert`` / ``fib_table_delete``): a new route always
        flushes; a replaced or deleted one only when a lookup had returned it
        (``FA_S_ACCESSED``).  IPv6: ``fib6_add`` bumps the new route's node up to
        the root; a deleted or replaced route leaves its node (its
        ``fib6_node`` is NULL), which fails its own cookie check, nothing more.
        """
        if route.version == 4:
            replaced = old if old is not None else (None if inserted else route)
            if replaced is None or replaced in self._accessed:
                self.rt_cache_flush()
            if replaced is not None:
                self._accessed.discard(replaced)
            self.version += 1
            return
        if inserted:
            self.fib6_update_sernum_upto_root(route.table, cast(ipaddress.IPv6Network, route.prefix))
        self.version += 1

    def dst_cookie(self, dst: Route) -> int:
        """The cookie a flow stores with its dst (``flow_offload_dst_cookie``, ``flow_offload_fill_route``).

        IPv6: ``rt6_get_cookie``, the serial of the route's fib6 node.  IPv4
        stores 0, but the rtable carries ``rt_genid``: that is the value here.
        An xfrm bundle is checked through the route of its path
        (``xfrm_bundle_ok``: ``dst_check(xfrm_dst_path(dst), path_cookie)``).
        """
        dst = getattr(dst, "route", None) or dst
        if dst.version == 4:
            return self.rt_genid
        return self.fn_sernum(dst.table, dst.prefix)

    def dst_check(self, dst: Route, cookie: int) -> bool:
        """``dst_check``: ``ipv4_dst_check`` (``rt_is_expired``) or ``ip6_dst_check`` (the route still in its
        fib6 node, ``fib6_get_cookie_safe``, and the node's serial equal to *cookie*)."""
        dst = getattr(dst, "route", None) or dst
        if dst.version == 4:
            return cookie == self.rt_genid
        return self._in_tree(dst) and cookie == self.fn_sernum(dst.table, dst.prefix)

    def _in_tree(self, route: Route) -> bool:
        """The IPv6 route is still linked in its node: a static one not deleted (routes through a device that is
        down are deleted: ``rt6_sync_down_dev``), a derived one still derived."""
        if route.proto == "kernel":
            return route in (self.local(6) if route.table == "local" else self.connected(6))
        return any(r is route for r in self.static) and self._usable(route)

    def derived(self) -> frozenset:
        """The routes the kernel installs for addresses (prefix and local routes), both families."""
        return frozenset(self.connected() + self.local())

    def sync(self, came_up: Iterable[str] = (), went_down: Iterable[str] = (), mtu_changed: Iterable[str] = ()) -> None:
        """After a run event: what the notifiers do to cached routes (see :meth:`netdev_event` and the address
        notifiers).

        The address-derived routes are compared with the last sync: an IPv4
        change is ``fib_inetaddr_event`` / ``fib_netdev_event`` → ``rt_cache_flush``;
        an IPv6 prefix or local route gone is an address deleted
        (``__ipv6_ifa_notify`` RTM_DELADDR → ``rt_genid_bump_ipv6``, also what
        ``addrconf_ifdown`` does to the addresses of a device going down); one
        new is ``fib6_add`` of the address's routes (each node up to the root).
        """
        before = self._derived
        now = self._derived = self.derived()
        for name in went_down:
            self.netdev_event(name, "down")
        for name in came_up:
            self.netdev_event(name, "up")
        for name in mtu_changed:
            self.netdev_event(name, "changemtu")
        if before is None or before == now:
            return
        gone, new = before - now, now - before
        if any(r.version == 4 for r in gone | new):
            self.rt_cache_flush()
        if any(r.version == 6 for r in gone):
            self.fib6_flush_trees()
        for r in sorted((r for r in new if r.version == 6), key=str):
            self.fib6_update_sernum_upto_root(r.table, cast(ipaddress.IPv6Network, r.prefix))

    def netdev_event(self, dev: str, event: str) -> None:
        """``fib_netdev_event`` (IPv4: UP, DOWN and CHANGEMTU flush the route cache) and the routes part of
        ``addrconf_notify``; on DOWN both families delete the static routes through the device
        (:meth:`sync_down_dev`), so they fail their check from then on and do not come back with the device.
        An IPv6 MTU change only updates the routes' MTU (``rt6_mtu_change``)."""
        self.rt_cache_flush()
        if event == "down":
            self.sync_down_dev(dev)
        self.version += 1

    def sync_down_dev(self, dev: str) -> list[Route]:
        """``ip link set DEV down``: the static routes whose nexthop is *dev* are deleted, in both families.

        IPv4: ``fib_netdev_event`` NETDEV_DOWN → ``fib_disable_ip`` → ``fib_sync_down_dev`` marks every fib_info
        whose nexthops are all on *dev* ``RTNH_F_DEAD`` and ``fib_flush`` removes it.  IPv6: ``addrconf_notify``
        → ``addrconf_ifdown`` → ``rt6_disable_ip`` → ``rt6_sync_down_dev`` → ``fib6_ifdown`` returns -1 (delete)
        for a route whose ``fib6_nh`` is on *dev*.  Neither is re-added when the device comes back up
        (net/ipv4/fib_frontend.c, net/ipv6/route.c): a user re-adds them, as nft_flowtable.sh does.
        flowsim has no multipath routes, so "all nexthops on *dev*" is "its one nexthop".  The addresses'
        own prefix and local routes are derived and come back with the device (``fib_add_ifaddr``,
        ``addrconf_prefix_route`` on NETDEV_UP)."""
        return self._sync_down(dev, (4, 6))

    def rt6_disable_ip(self, dev: str) -> list[Route]:
        """``addrconf_ifdown`` → ``rt6_disable_ip`` alone (IPv6 stopped on *dev*, as when its MTU falls below
        IPV6_MIN_MTU): the static IPv6 routes through *dev* are deleted, the IPv4 ones stay."""
        return self._sync_down(dev, (6,))

    def _sync_down(self, dev: str, versions: tuple[int, ...]) -> list[Route]:
        gone = [r for r in self.static if r.dev == dev and r.version in versions]
        if gone:
            self.static = [r for r in self.static if not (r.dev == dev and r.version in versions)]
            self.rt_cache_flush()
            for r in gone:
                if r.version == 6:   # fib6_del → fib6_update_sernum on the way up
                    self.fib6_update_sernum_upto_root(r.table, cast(ipaddress.IPv6Network, r.prefix))
        return gone

    def accessed(self, route: Route) -> None:
        """``fib_alias_accessed``: an IPv4 lookup reached *route* (FA_S_ACCESSED: deleting or replacing it later
        flushes the route cache)."""
        if route.version == 4:
            self._accessed.add(route)

    def _mutable(self) -> None:
        if self.frozen:
            raise TypeError("the FIB of a loaded topology is a description: change the run's live copy")

    # --- derived routes
    def connected(self, version: int | None = None) -> list[Route]:
        """Prefix routes of the addresses on up devices (``fib_add_ifaddr``, ``inet6_addr_add`` →
        ``addrconf_prefix_route``).

        None for a host address (a /32 or /128 without peer), an address added ``noprefixroute``
        (``IFA_F_NOPREFIXROUTE``), an IPv4 address in 0.0.0.0/8 (``ipv4_is_zeronet``) or an IPv4 secondary (an
        address of a prefix an earlier one on the device has: ``__inet_insert_ifa`` marks it
        ``IFA_F_SECONDARY``, and the primary's route serves both); an IPv6 prefix two addresses share is one route
        (``fib6_add`` finds it there).  The metric is the address's ``metric`` (``ifa_rt_priority``), else 0 for
        IPv4 and ``IP6_RT_PRIO_ADDRCONF`` (256) for IPv6; an IPv4 route's source is its address.
        """
        out = []
        for dev in self.ns.devices.values():
            if not dev.up or dev.link_type == "loopback":
                continue
            seen = set()  # IPv4: the prefixes of earlier addresses; IPv6: of the routes made
            for a in dev.addresses(version):
                prefix = a.prefix
                if prefix in seen:  # an IPv4 secondary, or an IPv6 prefix route already there
                    continue
                if a.version == 4:
                    seen.add(prefix)
                if address_prefix_route(a) is None:
                    continue
                seen.add(prefix)
                metric = prefix_route_metric(a)
                if self.deleted_prefix_routes and (dev.name, prefix, metric) in self.deleted_prefix_routes:
                    continue
                out.append(Route(prefix, dev=dev.name, metric=metric, proto="kernel", scope="link",
                                 src=a.ip if a.version == 4 else None))
        return out

    def prefix_route_restored(self, dev: str, prefix: IPNetwork | None = None) -> None:
        """The prefix routes of *dev*'s addresses are made again: all of them on NETDEV_UP (``fib_netdev_event``
        → ``fib_add_ifaddr`` of each address, ``addrconf_notify`` → ``addrconf_permanent_addr``), the one of
        *prefix* when an address adds it (``fib_add_ifaddr``, ``inet6_addr_add``)."""
        self.deleted_prefix_routes = {d for d in self.deleted_prefix_routes
                                      if d[0] != dev or (prefix is not None and d[1] != prefix)}

    def local(self, version: int | None = None) -> list[Route]:
        """The local table: one host route per address (``fib_add_ifaddr`` RTN_LOCAL)."""
        out = []
        for dev in self.ns.devices.values():
            if not dev.up:
                continue
            for a in dev.addresses(version):
                # lo owns its whole prefix (local 127.0.0.0/8 dev lo table local)
                host = a.local.network if dev.link_type == "loopback" else ipaddress.ip_network((a.ip, a.local.max_prefixlen))
                out.append(Route(host, type="local",
                                 dev=dev.name, proto="kernel", scope="host", table="local", src=a.ip))
        return out

    def routes(self, version: int | None = None) -> list[Route]:
        """The main table as ``ip route show`` would list it."""
        return self.connected(version) + [r for r in self.static if version is None or r.version == version]

    # --- changes (``ip route add|change|replace|del``)
    def find(self, prefix: IPNetwork, metric: int | None = None, table: str = "main") -> Route | None:
        for r in self.static:
            if r.prefix == prefix and r.table == table and (metric is None or r.metric == metric):
                return r
        return None

    def add(self, route: Route, *, mode: str = "add") -> None:
        """Insert *route*; *mode* is add (must be new), replace (add or overwrite) or change (must exist).

        Raises LookupError (no such route) or KeyError (route exists) for the caller to report.
        """
        self._mutable()
        old = self.find(route.prefix, route.metric, route.table)
        if mode == "add" and old is not None:
            if route.version == 4 or (old.gateway, old.dev) == (route.gateway, route.dev):
                raise KeyError(str(old))
            self.static.append(route)  # IPv6: another nexthop of an ECMP route (rt6 siblings)
            self._route_changed(route)
            return
        if mode == "change" and old is None:
            # `ip route change` matches on prefix only when no metric was given
            old = self.find(route.prefix, None, route.table)
            if old is None:
                raise LookupError(str(route.prefix))
        if old is not None:
            self.static[self.static.index(old)] = route
        else:
            self.static.append(route)
        self._route_changed(route, old)

    def delete(self, prefix: IPNetwork, *, metric: int | None = None, dev: str | None = None,
               gateway: IPAddress | None = None) -> Route:
        """``ip route del``: the first route that matches, in metric order (``fib_table_delete`` walks the
        prefix's aliases by priority, ``ip6_route_del`` the node's routes by metric) — an address's prefix
        route too, which stays deleted until the device comes up again or an address makes it again."""
        self._mutable()
        found = [r for r in self.static + self.connected(prefix.version)
                 if r.prefix == prefix and (metric is None or r.metric == metric) and (dev is None or r.dev == dev)
                 and (gateway is None or r.gateway == gateway)]
        if not found:
            raise LookupError(str(prefix))
        r = min(found, key=lambda f: f.metric)  # stable: a static route before a prefix route of its metric
        self._delete(r)
        return r

    def flush(self, version: int, selected: Callable[[Route], bool]) -> list[Route]:
        """``ip route flush``: every route of the main table of *version* that *selected* keeps is deleted (one
        RTM_DELROUTE each, as :meth:`delete`), the prefix routes of addresses too."""
        self._mutable()
        gone = [r for r in self.routes(version) if selected(r)]
        for r in gone:
            self._delete(r)
        return gone

    def _delete(self, r: Route) -> None:
        if r.proto == "kernel" and not any(r is s for s in self.static):
            self.deleted_prefix_routes.add((cast(str, r.dev), r.prefix, r.metric))
            if self._derived is not None:  # a route deleted, not an address: sync() must not take it for one
                self._derived = self._derived - {r}
        else:
            self.static.remove(r)
        self._route_changed(r, inserted=False)

    def flush_dev(self, dev: str) -> None:
        """Routes through a device that leaves the namespace go with it (NETDEV_UNREGISTER)."""
        self._mutable()
        self.static = [r for r in self.static if r.dev != dev]
        # fib_disable_ip → rt_cache_flush; addrconf_ifdown deletes the addresses → rt_genid_bump_ipv6
        self.rt_cache_flush()
        self.fib6_flush_trees()

    # --- lookups
    def _usable(self, r: Route) -> bool:
        if r.dev is None:
            return True
        dev = self.ns.devices.get(r.dev)
        return dev is not None and dev.up

    def _candidates(self, daddr: IPAddress, routes: Iterable[Route]) -> list[Route]:
        return [r for r in routes if r.version == daddr.version and daddr in r.prefix and self._usable(r)]

    def lookup(self, daddr: IPAddress, *, saddr: IPAddress | None = None, oif: str | None = None,
               mark: int = 0, access: bool = True) -> Route:
        """Output route lookup for *daddr* (see the module docstring); never raises.  Without *access* the
        route found is not marked accessed: a look at the FIB that no packet of the simulation made."""
        if daddr.version == 4 and int(daddr) == 0:
            # ip_route_output_key_hash_rcu: no destination → loopback
            return Route(ipaddress.ip_network("127.0.0.1/32"), type="local", dev="lo", proto="kernel",
                         scope="host", table="local")
        local = self._candidates(daddr, self.local(daddr.version))
        if local:
            return local[0]
        found = self._candidates(daddr, self.static + self.connected(daddr.version))
        if oif is not None and daddr.version == 4:
            through = [r for r in found if r.dev == oif]
            if not through:
                dev = self.ns.devices.get(oif)
                if dev is None or not dev.up:
                    return _no_route(daddr)
                return Route(ipaddress.ip_network((daddr, 32)), dev=oif, scope="link", proto="onlink")
            found = through
        if not found:
            return _no_route(daddr)
        order = {id(r): i for i, r in enumerate(found)}

        def rank(r: Route):
            prefer = 0 if (oif is not None and r.dev == oif) else 1
            return (-r.prefix.prefixlen, r.metric, prefer, order[id(r)])

        best = min(found, key=rank)
        if access and best.version == 4 and best.proto != "kernel":
            self.accessed(best)  # fib_table_lookup → fib_alias_accessed
        return best

    def dst_mtu_maybe_forward(self, route: Route) -> int:
        """The MTU a forwarded packet is checked against: ``ip_dst_mtu_maybe_forward(dst, true)`` (include/net/ip.h)
        / ``ip6_dst_mtu_maybe_forward(dst, true)`` (include/net/ip6_route.h), as ``ip_forward`` / ``ip6_forward``
        and the flowtable's ``flow_offload_fill_route`` ask it.

        IPv4 honours a route's configured ``mtu`` whether locked or not ("'forwarding = true' case should always
        honour route mtu"); only a *learned* PMTU (``rt_pmtu``) needs ``mtu lock`` or
        ``net.ipv4.ip_forward_use_pmtu``, and the simulated routers learn none (they send no traffic of their own
        that an ICMP error could lower).  IPv6 honours the route's MTU only when locked (``dst_metric_locked``):
        otherwise the device's (``idev->cnf.mtu6``).  Local output keeps the route's MTU for both
        (``dst_mtu`` → ``ip6_mtu`` is ``ip6_dst_mtu_maybe_forward(dst, false)``).
        """
        if route.version == 6 and route.mtu and not route.mtu_lock:
            dev = self.ns.devices.get(route.dev) if route.dev else None
            if dev is not None:
                return dev.mtu
        return self.route_mtu(route)

    def route_mtu(self, route: Route) -> int:
        """``dst_mtu``: the route's MTU metric, else its device's MTU."""
        if route.mtu:
            return route.mtu
        dev = self.ns.devices.get(route.dev) if route.dev else None
        return dev.mtu if dev is not None else 0
