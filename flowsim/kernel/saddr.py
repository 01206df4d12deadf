"""Source address selection: the address a connection, a masquerade or an ICMP error leaves from.

Theory of operation
-------------------
A socket that connects without binding an address, ``masquerade`` and an ICMP error all ask the kernel which of
the namespace's addresses to send from.  Each family has its own answer.

IPv4 (``ip_route_output_key_hash_rcu`` → ``fib_select_path`` in net/ipv4/route.c and fib_semantics.c): a
destination of ours is its own source (or its local route's ``src``); otherwise the route's preferred source
(``ip route … src A``; the connected routes carry their address) or, without one, ``fib_result_prefsrc`` →
:func:`inet_select_addr` on the route's device, the gateway's subnet first, within the route's scope.  Only
*primary* addresses count (``IFA_F_SECONDARY``: a later address of a prefix the device already has), in the
order ``__inet_insert_ifa`` keeps them: the widest scope number first, then as added.  When the device has none,
the first primary address of any device (``in_dev_select_addr``, ``lo`` first: the ``for_each_netdev`` order)
whose scope is not link and within the route's.

IPv6 (``ip6_route_get_saddr`` in include/net/ip6_route.h, ``ipv6_dev_get_saddr`` in net/ipv6/addrconf.c): the
route's ``src``, else RFC 6724's rules as ``ipv6_get_saddr_eval`` orders them, each a tie-breaker for the ones
before: the destination itself, the right scope (the smallest that reaches the destination, else the
widest), not deprecated, on the outgoing device, the label of the destination (``ip6addrlbl_init_table``),
public rather than temporary, ORCHID alike, the longest prefix in common (at most the address's own prefix
length).  The first candidate wins a tie: the devices in ``for_each_netdev`` order, each device's addresses
widest scope first and, within a scope, the newest first (``ipv6_link_dev_addr``).  A multicast or link-local
destination, or ``use_oif_addrs_only``, looks at the outgoing device alone.

Not modelled: VRF (l3mdev) devices, IPv6 address lifetimes (deprecated, temporary, optimistic or tentative
addresses: flowsim's have none of these states), ``ip addrlabel`` changes, the socket's ``IPV6_ADDR_PREFERENCES``.
"""

from __future__ import annotations

import ipaddress

from flowsim.kernel.headers import RT_SCOPE_HOST, RT_SCOPE_LINK, RT_SCOPE_NAMES, RT_SCOPE_UNIVERSE

__all__ = ["inet_select_addr", "fib_result_prefsrc", "ipv6_dev_get_saddr", "ip6_route_get_saddr",
           "ip_route_connect_saddr", "ipv6_addr_label"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# include/net/ipv6.h: IPV6_ADDR_SCOPE_* (the source scope __ipv6_addr_src_scope reads off the address type)
IPV6_ADDR_SCOPE_LINKLOCAL = 0x02
IPV6_ADDR_SCOPE_SITELOCAL = 0x05
IPV6_ADDR_SCOPE_GLOBAL = 0x0E

# net/ipv6/addrlabel.c ip6addrlbl_init_table: the default policy table (RFC 6724), longest prefix first as
# ip6addrlbl_add keeps it
_LABELS = tuple(sorted(((ipaddress.IPv6Network(p), label) for p, label in (
    ("::/0", 1), ("fc00::/7", 5), ("fec0::/10", 11), ("2002::/16", 2), ("3ffe::/16", 12), ("2001::/32", 6),
    ("2001:10::/28", 7), ("::ffff:0:0/96", 4), ("::/96", 3), ("::1/128", 0))), key=lambda e: -e[0].prefixlen))
_ORCHID = ipaddress.IPv6Network("2001:10::/28")  # ipv6_addr_orchid


# ----------------------------------------------------------------------------- IPv4

def _route_localnet(ns, dev) -> bool:
    """``IN_DEV_ROUTE_LOCALNET``: net.ipv4.conf.{all,DEV}.route_localnet."""
    return any(ns.sysctl_on(f"net.ipv4.conf.{conf}.route_localnet") for conf in ("all", dev.name))


def _primaries(dev) -> list:
    """The device's primary IPv4 addresses (:meth:`~flowsim.kernel.devices.base.NetDevice.ipv4_primary`: a
    secondary is a later address of a prefix the device had) in ``in_dev->ifa_list`` order: ``__inet_insert_ifa``
    puts a primary after the last one whose scope number is not below its own, so the list runs from the
    narrowest scope to the widest, each scope in the order added."""
    primaries = [a for a in dev.addrs if a.version == 4 and dev.ipv4_primary(a.prefix) is a]
    return sorted(primaries, key=lambda a: -a.scope)  # stable: the order added within a scope


def inet_select_addr(ns, dev, dst: IPAddress | None, scope: int) -> IPAddress | None:
    """``inet_select_addr`` (net/ipv4/devinet.c): *dev*'s first primary address whose scope is within *scope*,
    one in *dst*'s subnet first; else ``in_dev_select_addr`` over every device."""
    localnet_scope = RT_SCOPE_LINK if dev is not None and _route_localnet(ns, dev) else RT_SCOPE_HOST
    addr = None
    for a in _primaries(dev) if dev is not None else ():
        if min(a.scope, localnet_scope) > scope:
            continue
        if dst is None or dst in a.prefix:  # inet_ifa_match
            return a.ip
        if addr is None:
            addr = a.ip
    if addr is not None:
        return addr
    for other in ns.devices.values():  # for_each_netdev: "It is important that lo is the first interface"
        for a in _primaries(other):  # in_dev_select_addr
            if a.scope != RT_SCOPE_LINK and a.scope <= scope:
                return a.ip
    return None


def fib_result_prefsrc(ns, route) -> IPAddress | None:
    """``fib_result_prefsrc`` (net/ipv4/fib_semantics.c): the route's ``src``, else ``inet_select_addr`` on its
    device for its gateway (``fib_info_update_nhc_saddr``; none for an IPv6 gateway) within its scope."""
    if route.src is not None and route.src.version == 4:
        return route.src
    dev = ns.devices.get(route.dev) if route.dev is not None else None
    gw = route.gateway if route.gateway is not None and route.gateway.version == 4 else None
    return inet_select_addr(ns, dev, gw, RT_SCOPE_NAMES.get(route.scope, RT_SCOPE_UNIVERSE))


# ----------------------------------------------------------------------------- IPv6

def _src_scope(addr: IPAddress) -> int:
    """``__ipv6_addr_src_scope(__ipv6_addr_type(addr))`` for a unicast or multicast address."""
    if addr.is_multicast:
        return addr.packed[1] & 0x0F
    if addr.is_link_local or addr.is_loopback:  # __ipv6_addr_type: ::1 has link-local scope (addr-select 3.4)
        return IPV6_ADDR_SCOPE_LINKLOCAL
    if isinstance(addr, ipaddress.IPv6Address) and addr.is_site_local:
        return IPV6_ADDR_SCOPE_SITELOCAL
    return IPV6_ADDR_SCOPE_GLOBAL


def ipv6_addr_label(addr: IPAddress) -> int:
    """``ipv6_addr_label`` with the default policy table (net/ipv6/addrlabel.c)."""
    return next(label for net, label in _LABELS if addr in net)


def _common_prefix(a: IPAddress, b: IPAddress) -> int:
    """``ipv6_addr_diff``: the number of leading bits *a* and *b* share (128 when equal)."""
    return 128 - (int(a) ^ int(b)).bit_length()


def _addr_list(dev) -> list:
    """The device's IPv6 addresses in ``idev->addr_list`` order: ``ipv6_link_dev_addr`` inserts an address
    before the first of a scope not wider than its own, so the widest scope comes first and, within a scope,
    the newest."""
    out: list = []
    for a in dev.addrs:
        if a.version != 6:
            continue
        scope = _src_scope(a.ip)
        at = next((i for i, b in enumerate(out) if scope >= _src_scope(b.ip)), len(out))
        out.insert(at, a)
    return out


def _score(a, dev, daddr: IPAddress, dst_scope: int, dst_label: int, ifindex: int) -> tuple:
    """``ipv6_get_saddr_eval``'s rules for candidate *a* on *dev*, in rule order (a greater tuple wins)."""
    ip = a.ip
    scope = _src_scope(ip)
    return (
        ip == daddr,  # IPV6_SADDR_RULE_LOCAL
        -scope if scope >= dst_scope else scope - 128,  # IPV6_SADDR_RULE_SCOPE
        # IPV6_SADDR_RULE_PREFERRED, _HOA: flowsim's addresses are neither deprecated nor home addresses
        not ifindex or ifindex == dev.ifindex,  # IPV6_SADDR_RULE_OIF
        ipv6_addr_label(ip) == dst_label,  # IPV6_SADDR_RULE_LABEL
        # IPV6_SADDR_RULE_PRIVACY: no temporary addresses
        (ip in _ORCHID) == (daddr in _ORCHID),  # IPV6_SADDR_RULE_ORCHID
        min(_common_prefix(ip, daddr), a.local.network.prefixlen),  # IPV6_SADDR_RULE_PREFIX
    )


def ipv6_dev_get_saddr(ns, dst_dev, daddr: IPAddress) -> IPAddress | None:
    """``ipv6_dev_get_saddr`` (net/ipv6/addrconf.c): the best of the candidates by :func:`_score`, the first
    found on a tie; None where the kernel answers -EADDRNOTAVAIL."""
    dst_scope = _src_scope(daddr)
    ifindex = dst_dev.ifindex if dst_dev is not None else 0
    use_oif_addr = dst_dev is not None and (
        daddr.is_multicast or dst_scope <= IPV6_ADDR_SCOPE_LINKLOCAL
        or ns.sysctl_on(f"net.ipv6.conf.{dst_dev.name}.use_oif_addrs_only"))
    devices = (dst_dev,) if use_oif_addr else tuple(ns.devices.values())
    label = ipv6_addr_label(daddr)
    best, best_score = None, None
    for dev in devices:
        if not dev.up:  # addrconf_ifdown took its addresses (keep_addr_on_down is off by default)
            continue
        for a in _addr_list(dev):
            if a.ip.is_multicast or a.ip.is_unspecified:
                continue
            score = _score(a, dev, daddr, dst_scope, label, ifindex)
            if best_score is None or score > best_score:
                best, best_score = a.ip, score
    return best


def ip6_route_get_saddr(ns, route, daddr: IPAddress) -> IPAddress | None:
    """``ip6_route_get_saddr``: the route's ``src`` (``fib6_prefsrc``), else :func:`ipv6_dev_get_saddr` for the
    route's device (none without a route)."""
    if route is not None and route.src is not None and route.src.version == 6:
        return route.src
    dev = ns.devices.get(route.dev) if route is not None and route.dev is not None else None
    return ipv6_dev_get_saddr(ns, dev, daddr)


# ----------------------------------------------------------------------------- a connection

def ip_route_connect_saddr(ns, route, daddr: IPAddress) -> IPAddress | None:
    """The source of a connection to *daddr* that bound no address, *route* the output route to it:
    ``ip_route_connect`` (IPv4: a local destination is its own source unless its local route names one, else
    :func:`fib_result_prefsrc`) or ``ip6_dst_lookup_tail`` (:func:`ip6_route_get_saddr`).  None when the
    route is an error: the kernel's connect fails."""
    if route.error:
        return None
    if daddr.version == 6:
        return ip6_route_get_saddr(ns, route, daddr)
    if route.type == "local":
        return route.src if route.src is not None else daddr
    return fib_result_prefsrc(ns, route)
