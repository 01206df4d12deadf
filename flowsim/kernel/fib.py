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

    >>> import ipaddress
    >>> r = Route(ipaddress.ip_network("0.0.0.0/0"), dev="veth1", gateway=ipaddress.ip_address("192.168.10.2"))
    >>> str(r), str(r.nexthop(ipaddress.ip_address("10.0.2.99")))
    ('default via 192.168.10.2 dev veth1', '192.168.10.2')
"""

from __future__ import annotations

import errno
import ipaddress
from collections.abc import Iterable

import attrs

__all__ = ["Route", "Fib", "ROUTE_TYPES", "ROUTE_ERRORS"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

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


def _no_route(daddr: IPAddress) -> Route:
    return Route(ipaddress.ip_network((daddr, daddr.max_prefixlen)), type="none", proto="none")


class Fib:
    """The routing tables (main and local) of one namespace."""

    def __init__(self, ns) -> None:
        self.ns = ns  # flowsim.config.topology.Namespace: devices with their addresses and state
        self.static: list[Route] = []
        # rt_genid / fib6 sernum: bumped by every route change, so cached routes
        # (a flow's dst_cache) can tell they are obsolete (dst_check)
        self.genid = 0
        self.frozen = False  # the FIB of a loaded description (flowsim.config.network.Topology.freeze)

    def _mutable(self) -> None:
        if self.frozen:
            raise TypeError("the FIB of a loaded topology is a description: change the run's live copy")

    # --- derived routes
    def connected(self, version: int | None = None) -> list[Route]:
        """Prefix routes of the addresses on up devices (``fib_add_ifaddr``, ``addrconf_prefix_route``)."""
        out = []
        for dev in self.ns.devices.values():
            if not dev.up or dev.link_type == "loopback":
                continue
            for a in dev.addresses(version):
                host = a.peer is None and a.local.network.prefixlen == a.local.max_prefixlen
                if host:
                    continue
                out.append(Route(a.prefix, dev=dev.name, metric=0 if a.version == 4 else 256, proto="kernel",
                                 scope="link", src=a.ip if a.version == 4 else None))
        return out

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
        self.genid += 1
        old = self.find(route.prefix, route.metric, route.table)
        if mode == "add" and old is not None:
            if route.version == 4 or (old.gateway, old.dev) == (route.gateway, route.dev):
                raise KeyError(str(old))
            self.static.append(route)  # IPv6: another nexthop of an ECMP route (rt6 siblings)
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

    def delete(self, prefix: IPNetwork, *, metric: int | None = None, dev: str | None = None,
               gateway: IPAddress | None = None) -> Route:
        self._mutable()
        for r in self.static:
            if (r.prefix == prefix and (metric is None or r.metric == metric) and (dev is None or r.dev == dev)
                    and (gateway is None or r.gateway == gateway)):
                self.static.remove(r)
                self.genid += 1
                return r
        raise LookupError(str(prefix))

    def flush_dev(self, dev: str) -> None:
        """Routes through a device that leaves the namespace go with it (NETDEV_UNREGISTER)."""
        self._mutable()
        self.static = [r for r in self.static if r.dev != dev]
        self.genid += 1

    # --- lookups
    def _usable(self, r: Route) -> bool:
        if r.dev is None:
            return True
        dev = self.ns.devices.get(r.dev)
        return dev is not None and dev.up

    def _candidates(self, daddr: IPAddress, routes: Iterable[Route]) -> list[Route]:
        return [r for r in routes if r.version == daddr.version and daddr in r.prefix and self._usable(r)]

    def lookup(self, daddr: IPAddress, *, saddr: IPAddress | None = None, oif: str | None = None,
               mark: int = 0) -> Route:
        """Output route lookup for *daddr* (see the module docstring); never raises."""
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

        return min(found, key=rank)

    def route_mtu(self, route: Route) -> int:
        """``dst_mtu``: the route's MTU metric, else its device's MTU."""
        if route.mtu:
            return route.mtu
        dev = self.ns.devices.get(route.dev) if route.dev else None
        return dev.mtu if dev is not None else 0
