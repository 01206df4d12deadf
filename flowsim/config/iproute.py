"""The iproute2 / bridge / sysctl command lines a topology file is written in.

Theory of operation
-------------------
:func:`run` splits one :class:`~flowsim.kernel.devices.base.Command` like a shell,
then dispatches on the program (``ip``, ``bridge``, ``sysctl``), the object
(``link``, ``address``, ``route``, ``neigh``, ``vlan``, ``fdb``; abbreviations
as iproute2 matches them) and the verb, each a small function applying the
change to the :class:`~flowsim.config.network.Topology`.  ``ip link add … type KIND``
hands the kind's options to the kind's module in :mod:`flowsim.kernel.devices`.
``ip xfrm state|policy`` hands its options to :mod:`flowsim.config.iproute_xfrm`.
Every refusal is the kernel's or iproute2's, reported as one
:class:`~flowsim.errors.TopologyError` naming file, line and command.

Supported subset (what the kernel selftests and router setups use)::

    ip [-4|-6] [-n NS] link add [link DEV] [name] NAME [address MAC] [mtu N] [netns NS] [up] type KIND ...
    ip link set [dev] DEV [up|down] [mtu N] [master BR|nomaster] [netns NS] [address MAC] [type KIND ...]
    ip link del [dev] DEV
    ip addr add|del ADDR[/LEN] [peer ADDR[/LEN]] dev DEV [nodad] [noprefixroute] [metric N] [scope S] ...;
        ip addr flush dev DEV
    ip route add|change|replace|append|del [TYPE] PREFIX|default [via [inet|inet6] GW] [dev DEV]
             [metric|preference N] [mtu [lock] N] [src A] [proto P] [scope S] [onlink] [table main]
    ip [-4|-6] route flush [dev DEV] [proto P] [scope S] [via GW] [metric N] [exact|root|match PREFIX]
             [table main] | cache
    ip neigh add|replace|change|del ADDR [lladdr MAC] dev DEV [nud STATE] [router]
    bridge vlan add|del vid N[-M] dev DEV [pvid] [untagged] [self|master] [switchdev on|off]
    bridge fdb add|append|replace|del MAC dev PORT [master] [static|dynamic] [vlan N]
    ip xfrm state add src A dst B proto esp spi N [reqid N] [mode tunnel|transport]
             aead 'rfc4106(gcm(aes))' 0xKEY 128 [sel src P dst Q] [replay-window N] [flag F]
    ip xfrm policy add src P dst Q [proto P] dir out|in|fwd [tmpl src A dst B proto esp [reqid N]
             [mode tunnel|transport] [level required|use]] [priority N] [action allow|block]
    sysctl [-w] [-q] KEY=VALUE
    ip netns exec NS COMMAND
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Callable

import attrs

from flowsim.config.ipcontext import IpContext
from flowsim.config.iproute_xfrm import _xfrm_policy_add, _xfrm_state_add
from flowsim.config.network import LinkRequest, Topology, ipv6_off
from flowsim.config.sysctls import sysctl_problem
from flowsim.config.raw import shell_split
from flowsim.kernel.devices import KIND_MODULES
from flowsim.kernel.devices.base import Args, Command, IfAddr, NetDevice, parse_mac
from flowsim.kernel.devices.bridge import BridgeDevice
from flowsim.kernel.devices.bridge import change as bridge_change
from flowsim.kernel.fib import Route
from flowsim.kernel.headers import IPV6_MIN_MTU, RT_SCOPE_NAMES
from flowsim.kernel.neigh import NUD_NAMES, NUD_VALID, NeighEntry, NudState

__all__ = ["run", "Command"]


def run(topo: Topology, cmd: Command) -> None:
    """Apply one command line to *topo* (a live one: a loaded description refuses, FrozenTopologyError)."""
    topo._mutable()  # device fields (up, mtu, addresses) have no guard of their own
    tokens = shell_split(cmd)
    if not tokens:  # a line of only a shell comment, or the API's empty Command
        raise cmd.error("empty command", expected="ip, bridge or sysctl")
    programs = {"ip": _ip, "bridge": _bridge, "sysctl": _sysctl}
    handler = programs.get(tokens[0])
    if handler is None:
        raise cmd.error(f"unknown command {tokens[0]!r}", value=tokens[0], expected="ip, bridge or sysctl")
    handler(topo, cmd, tokens[1:])


def _match(cmd: Command, word: str, table: list[tuple[str, Callable]], what: str) -> Callable:
    """iproute2 ``matches()``: the first entry *word* is a prefix of."""
    for full, func in table:
        if word and full.startswith(word):
            return func
    raise cmd.error(f"unknown {what} {word!r}", value=word, expected="one of " + ", ".join(f for f, _ in table))


# ---------------------------------------------------------------------- ip

def _ip(topo: Topology, cmd: Command, tokens: list[str]) -> None:
    family, netns = None, cmd.netns
    while tokens and tokens[0].startswith("-"):
        opt = tokens.pop(0)
        if opt in ("-4", "-6"):
            family = int(opt[1])
        elif opt in ("-n", "-net", "-netns"):
            if not tokens:
                raise cmd.error(f"missing namespace after {opt}", expected="a namespace name")
            netns = tokens.pop(0)
            topo.require_netns(netns, cmd)
        elif opt in ("-d", "-details", "-s", "-stats", "-j", "-json", "-p", "-pretty"):
            continue
        else:
            raise cmd.error(f"unknown ip option {opt!r}", value=opt, expected="-4, -6 or -n NS")
    if not tokens:
        raise cmd.error("missing object", expected="link, address, route or neigh")
    if tokens[0] == "netns":
        _netns(topo, cmd, tokens[1:])
        return
    ctx = IpContext(topo, cmd, family, netns)
    handler = _match(cmd, tokens[0], [("address", _addr), ("route", _route), ("neighbour", _neigh),
                                      ("neighbor", _neigh), ("link", _link), ("xfrm", _xfrm)], "ip object")
    handler(ctx, tokens[1:])


def _netns(topo: Topology, cmd: Command, tokens: list[str]) -> None:
    """``ip netns exec NS CMD…`` runs CMD in NS (so selftest lines paste as they are)."""
    if len(tokens) >= 3 and tokens[0] == "exec":
        ns = topo.require_netns(tokens[1], cmd).name
        run(topo, Command(shlex.join(tokens[2:]), ns, cmd.file, cmd.line))
        return
    raise cmd.error("only 'ip netns exec NS COMMAND' is supported", value=" ".join(tokens[:2]),
                    expected="namespaces declared as [netns.NAME] tables")


def _verb(ctx: IpContext, tokens: list[str], verbs: dict[str, Callable], obj: str) -> None:
    if not tokens:
        raise ctx.cmd.error(f"missing verb after {obj!r}", expected="one of " + ", ".join(verbs))
    verb = next((v for v in verbs if tokens[0] and v.startswith(tokens[0])), None)  # iproute2 matches()
    if verb is None:
        raise ctx.cmd.error(f"unknown verb {tokens[0]!r} for ip {obj}", value=tokens[0],
                            expected="one of " + ", ".join(verbs))
    verbs[verb](ctx, verb, Args(ctx.cmd, tokens[1:]))


# --- ip link

def _link(ctx: IpContext, tokens: list[str]) -> None:
    _verb(ctx, tokens, {"add": _link_add, "set": _link_set, "change": _link_set, "del": _link_del,
                        "delete": _link_del}, "link")


def _link_add(ctx: IpContext, verb: str, args: Args) -> None:
    fields: dict = {"link": None, "address": None, "mtu": None, "netns": ctx.netns, "name": None}
    up = False
    while True:
        word = args.next("'type KIND'")
        if word == "type":
            break
        if word == "link":
            fields["link"] = args.name("link")
        elif word in ("name", "dev"):
            fields["name"] = args.name(word)
        elif word == "address":
            fields["address"] = args.mac("address")
        elif word == "mtu":
            fields["mtu"] = args.int("mtu", 68, 65535)
        elif word == "netns":
            fields["netns"] = ctx.topo.require_netns(args.next("a namespace"), ctx.cmd).name
        elif word in ("txqueuelen", "qlen", "numtxqueues", "numrxqueues"):
            args.next(f"a value after {word!r}")
        elif word == "up":
            up = True
        elif fields["name"] is None:
            args.pos -= 1
            fields["name"] = args.name("name")
        else:
            raise ctx.cmd.error(f"unknown link option {word!r}", value=word,
                                expected="link, name, address, mtu, netns or type")
    if fields["name"] is None:
        raise ctx.cmd.error("missing device name", expected="'ip link add NAME type KIND'")
    kind = args.next("a device kind")
    module = KIND_MODULES.get(kind)
    if module is None:
        raise ctx.cmd.error(f"unknown device type {kind!r}", value=kind,
                            expected="one of " + ", ".join(KIND_MODULES))
    opts = module.parse_args(args, kind)
    req = LinkRequest(fields["name"], fields["netns"], kind, fields["link"], fields["address"], fields["mtu"])
    dev = module.create(ctx.topo, ctx.cmd, req, opts)
    if up:
        dev.up = True


def _link_set(ctx: IpContext, verb: str, args: Args) -> None:
    """``ip link set``: attributes may come before or after ``[dev] DEV``, as in iplink_parse."""
    dev: NetDevice | None = None
    actions: list[tuple[str, object]] = []
    while args:
        word = args.next("a link attribute")
        if word == "dev":
            dev = ctx.dev(args.name("dev"))
        elif word in ("up", "down"):
            actions.append(("up", word == "up"))
        elif word == "mtu":
            actions.append(("mtu", args.int("mtu", 68, 65535)))
        elif word == "master":
            actions.append(("master", ctx.dev(args.name("master"))))
        elif word == "nomaster":
            actions.append(("nomaster", None))
        elif word == "netns":
            actions.append(("netns", args.next("a namespace")))
        elif word == "address":
            actions.append(("address", args.mac("address")))
        elif word == "type":
            actions.append(("type", args))
            break  # the kind's options run to the end of the line
        elif word in ("txqueuelen", "qlen", "alias", "arp", "multicast", "promisc", "carrier"):
            args.next(f"a value after {word!r}")
        elif dev is None:
            args.pos -= 1
            dev = ctx.dev(args.name("dev"))
        else:
            raise ctx.cmd.error(f"unknown link attribute {word!r}", value=word,
                                expected="up, down, mtu, master, nomaster, netns, address or type")
    if dev is None:
        raise ctx.cmd.error("missing device", expected="'ip link set [dev] DEV …'")
    if not actions:
        raise ctx.cmd.error("nothing to set", expected="up, down, mtu, master, nomaster, netns, address or type")
    for what, value in actions:
        _LINK_SET[what](ctx, dev, value)


def _set_up(ctx: IpContext, dev: NetDevice, value) -> None:
    fib = ctx.topo.netns(ctx.netns).fib
    if dev.up and not value:  # NETDEV_DOWN: the routes through it are deleted (Fib.sync_down_dev)
        fib.sync_down_dev(dev.name)
    elif value and not dev.up:  # NETDEV_UP: its addresses make their prefix routes again
        fib.prefix_route_restored(dev.name)
    dev.up = value


def _set_mtu(ctx: IpContext, dev: NetDevice, value) -> None:
    ctx.topo.set_mtu(dev, value, ctx.cmd)


def _set_master(ctx: IpContext, dev: NetDevice, value) -> None:
    ctx.topo.set_master(dev, value, ctx.cmd)


def _set_nomaster(ctx: IpContext, dev: NetDevice, value) -> None:
    ctx.topo.clear_master(dev)


def _set_netns(ctx: IpContext, dev: NetDevice, value) -> None:
    ctx.topo.move(dev, value, ctx.cmd)


def _set_address(ctx: IpContext, dev: NetDevice, value) -> None:
    dev.mac, dev.addr_set = value, True


def _set_type(ctx: IpContext, dev: NetDevice, args: Args) -> None:
    kind = args.next("a device kind")
    if kind != dev.kind or not isinstance(dev, BridgeDevice):
        raise ctx.cmd.error(f"cannot change type {kind!r} options of {dev.name}", value=kind,
                            expected="'type bridge …' on a bridge")
    bridge_change(ctx.topo, ctx.cmd, dev, KIND_MODULES[kind].parse_args(args, kind))


_LINK_SET: dict[str, Callable] = {"up": _set_up, "mtu": _set_mtu, "master": _set_master, "nomaster": _set_nomaster,
                                  "netns": _set_netns, "address": _set_address, "type": _set_type}


def _link_del(ctx: IpContext, verb: str, args: Args) -> None:
    word = args.next("a device")
    dev = ctx.dev(args.name("dev") if word == "dev" else word)
    ctx.topo.delete(dev, ctx.cmd)


# --- ip address

def _addr(ctx: IpContext, tokens: list[str]) -> None:
    _verb(ctx, tokens, {"add": _addr_add, "replace": _addr_add, "del": _addr_del, "delete": _addr_del,
                        "flush": _addr_flush}, "address")


def _prefix(ctx: IpContext, text: str, what: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    try:
        value = ipaddress.ip_interface(text)
    except ValueError:
        raise ctx.cmd.error(f"bad address {text!r}", value=text, expected=f"{what} like 10.0.1.1/24 or dead:1::1/64") from None
    if ctx.family is not None and value.version != ctx.family:
        raise ctx.cmd.error(f"address {text!r} is not IPv{ctx.family}", value=text, expected=f"an IPv{ctx.family} address")
    return value


def _addr_opts(ctx: IpContext, args: Args) -> tuple[ipaddress.IPv4Interface | ipaddress.IPv6Interface, dict]:
    local = _prefix(ctx, args.next("an address"), "an address")
    opts: dict = {"peer": None, "dev": None, "metric": 0, "noprefixroute": False, "scope": None}
    while args:
        word = args.next("an address option")
        if word in ("peer", "remote"):
            opts["peer"] = _prefix(ctx, args.next("a peer address"), "a peer address")
        elif word == "dev":
            opts["dev"] = ctx.dev(args.name("dev"))
        elif word == "noprefixroute":
            opts["noprefixroute"] = True
        elif word in ("metric", "priority"):  # IFA_RT_PRIORITY: the metric of the address's prefix route
            opts["metric"] = args.int(word, 0, 0xFFFFFFFF)
        elif word in ("nodad", "home", "mngtmpaddr", "optimistic"):
            continue
        elif word == "scope":  # iproute2's rtnl_rtscope_a2n: a name or a number
            opts["scope"] = (args.choice(word, RT_SCOPE_NAMES) if args.peek() in RT_SCOPE_NAMES
                             else args.int(word, 0, 255))
        elif word in ("label", "broadcast", "brd", "valid_lft", "preferred_lft"):
            args.next(f"a value after {word!r}")
        else:
            raise ctx.cmd.error(f"unknown address option {word!r}", value=word,
                                expected="peer, dev, nodad, noprefixroute, metric, scope")
    if opts["dev"] is None:
        raise ctx.cmd.error("missing device", expected="'dev DEV'")
    return local, opts


def _addr_add(ctx: IpContext, verb: str, args: Args) -> None:
    local, opts = _addr_opts(ctx, args)
    dev: NetDevice = opts["dev"]
    if opts["peer"] is not None:
        # `ADDR peer PEER/LEN`: the prefix length belongs to the peer
        local = ipaddress.ip_interface((local.ip, local.max_prefixlen))
    if any(a.ip == local.ip for a in dev.addrs):
        if verb == "replace":
            return
        raise ctx.cmd.error(f"address {local.ip} already on {dev.name}", value=str(local),
                            expected="a new address (RTNETLINK answers: File exists)")
    if local.version == 6 and ipv6_off(dev):  # inet6_addr_add → addrconf_add_dev → ipv6_find_idev → ipv6_add_dev
        raise ctx.cmd.error(f"{dev.name} has MTU {dev.mtu}, below IPv6's least ({IPV6_MIN_MTU}): no IPv6 on it",
                            value=str(local), expected=f"a device of MTU {IPV6_MIN_MTU} or more (ipv6_add_dev: "
                                                       "-EINVAL, Invalid argument)")
    new = IfAddr(local, opts["peer"], opts["metric"], opts["noprefixroute"])
    if opts["scope"] is not None and new.version == 4:  # inet6_rtm_newaddr ignores it: IPv6's is the address's own
        new = attrs.evolve(new, scope=opts["scope"])
    # fib_add_ifaddr (not for an IPv4 secondary) / addrconf_prefix_route add its prefix route, again if deleted
    first = dev.ipv4_primary(new.prefix) if new.version == 4 else None
    if first is not None and first.scope != new.scope:  # __inet_insert_ifa: a secondary has its primary's scope
        raise ctx.cmd.error(f"address {local.ip} would be a secondary of {first.ip} with another scope",
                            value=str(local), expected=f"scope {_scope_name(first.scope)} (RTNETLINK answers: Invalid argument, "
                                                       "ipv4: Invalid scope value)")
    primary = first is None
    dev.addrs.append(new)
    if primary and not new.noprefixroute:
        ctx.topo.netns(ctx.netns).fib.prefix_route_restored(dev.name, new.prefix)


def _scope_name(scope: int) -> str:
    """iproute2's rtnl_rtscope_n2a: the name of an address scope, else its number."""
    return next((name for name, n in RT_SCOPE_NAMES.items() if n == scope), str(scope))


def _addr_del(ctx: IpContext, verb: str, args: Args) -> None:
    local, opts = _addr_opts(ctx, args)
    dev: NetDevice = opts["dev"]
    for a in dev.addrs:
        if a.ip == local.ip:
            dev.addrs[:] = [b for b in dev.addrs if b is not a and not _goes_with(ctx, dev, a, b)]
            _last_ipv4_address_gone(ctx, dev, had_ipv4=a.version == 4)
            return
    raise ctx.cmd.error(f"address {local.ip} is not on {dev.name}", value=str(local),
                        expected="an address of the device (RTNETLINK answers: Cannot assign requested address)")


def _goes_with(ctx: IpContext, dev: NetDevice, primary: IfAddr, other: IfAddr) -> bool:
    """``__inet_del_ifa``: deleting an IPv4 primary address (:meth:`NetDevice.ipv4_primary`) deletes the
    secondaries of its prefix (*other* one of them) unless ``promote_secondaries`` is on for the device (all or
    the device's conf), when the next one becomes the primary."""
    if primary.version != 4 or other.version != 4 or other.prefix != primary.prefix:
        return False
    if dev.ipv4_primary(primary.prefix) is not primary:  # a secondary is deleted alone
        return False
    ns = ctx.topo.netns(ctx.netns)
    promote = any(ns.sysctl_on(f"net.ipv4.conf.{conf}.promote_secondaries") for conf in ("all", dev.name))
    return not promote


def _addr_flush(ctx: IpContext, verb: str, args: Args) -> None:
    word = args.next("'dev DEV'")
    dev = ctx.dev(args.name("dev") if word == "dev" else word)
    had_ipv4 = any(a.version == 4 for a in dev.addrs)
    dev.addrs[:] = [a for a in dev.addrs if ctx.family is not None and a.version != ctx.family]
    _last_ipv4_address_gone(ctx, dev, had_ipv4)


def _last_ipv4_address_gone(ctx: IpContext, dev: NetDevice, had_ipv4: bool) -> None:
    """``fib_inetaddr_event`` (NETDEV_DOWN): when the device's last IPv4 address goes, ``fib_disable_ip(dev,
    event, true)`` flushes every IPv4 route through it (``ip route add default via …`` on another device then
    succeeds, as in nft_flowtable.sh's bridge-and-VLAN setup).  IPv6 keeps its gateway routes (addrconf
    removes only the prefix route)."""
    if not had_ipv4 or any(a.version == 4 for a in dev.addrs):
        return
    fib = ctx.topo.netns(ctx.netns).fib
    for r in [r for r in fib.static if r.version == 4 and r.dev == dev.name]:
        fib.delete(r.prefix, metric=r.metric, dev=r.dev, gateway=r.gateway)


# --- ip route

def _route(ctx: IpContext, tokens: list[str]) -> None:
    verbs = {"add": "add", "append": "add", "change": "change", "replace": "replace", "del": "del",
             "delete": "del", "flush": "flush"}
    verb = next((v for v in verbs if tokens and tokens[0] and v.startswith(tokens[0])), None)
    if verb is None:
        raise ctx.cmd.error(f"unknown verb {tokens[0] if tokens else ''!r} for ip route",
                            value=tokens[0] if tokens else None, expected="one of " + ", ".join(verbs))
    if verb == "flush":
        _route_flush(ctx, Args(ctx.cmd, tokens[1:]))
        return
    _route_change(ctx, verbs[verb], Args(ctx.cmd, tokens[1:]))


# iproute2's route selectors (the family is the flush's, so both prefixes are of it)
_PREFIX_SELECTORS = {"exact": lambda r, p: r.prefix == p, "root": lambda r, p: r.prefix.subnet_of(p),
                     "match": lambda r, p: p.subnet_of(r.prefix)}


def _route_flush(ctx: IpContext, args: Args) -> None:
    """``ip [-4|-6] route flush SELECTOR…`` (iproute2's iproute_list_flush_or_save): one RTM_DELROUTE for every
    route of the main table that matches — ``dev``, ``proto``, ``scope``, ``via``, ``metric`` and a prefix
    (``exact PREFIX`` or a bare one, ``root PREFIX``: it and longer, ``match PREFIX``: it and shorter) — an
    address's prefix route too (it comes back with the device, :meth:`Fib.prefix_route_restored`).  Without
    ``-6`` the family is IPv4 (the default table filter makes iproute2 list AF_INET).  ``cache``: IPv4's
    ``/proc/sys/net/ipv4/route/flush`` (``rt_cache_flush``)."""
    if not args:
        raise ctx.cmd.error('"ip route flush" requires arguments', expected="dev DEV, a prefix, proto P, "
                            "table main or cache")
    version = ctx.family or 4
    fib = ctx.topo.netns(ctx.netns).fib
    tests: list[Callable] = []
    cache = False
    while args:
        word = args.next("a route selector")
        if word in ("dev", "oif"):
            name = ctx.dev(args.name(word)).name
            tests.append(lambda r, name=name: r.dev == name)
        elif word in ("proto", "protocol"):
            proto = args.next("a protocol")
            tests.append(lambda r, proto=proto: r.proto == proto)
        elif word == "scope":
            scope = args.choice("scope", {s: s for s in ("global", "universe", "link", "host")})
            tests.append(lambda r, scope=scope: r.scope == ("universe" if scope == "global" else scope))
        elif word == "via":
            via = args.addr("via")
            tests.append(lambda r, via=via: r.gateway == via)
        elif word in ("metric", "preference", "priority"):
            metric = args.int(word, 0, 0xFFFFFFFF)
            tests.append(lambda r, metric=metric: r.metric == metric)
        elif word == "table":
            args.choice("table", {"main": "main", "254": "main"})
        elif word in ("cache", "cached", "cloned"):
            cache = True
        else:
            mode = word if word in _PREFIX_SELECTORS else "exact"
            text = args.next(f"a prefix after {word!r}") if word in _PREFIX_SELECTORS or word == "to" else word
            prefix = _route_prefix(ctx, text, None) if text != "default" else \
                ipaddress.ip_network("0.0.0.0/0" if version == 4 else "::/0")
            if prefix.version != version:
                raise ctx.cmd.error(f"prefix {text!r} is not IPv{version}", value=text,
                                    expected=f"an IPv{version} prefix (ip -{prefix.version} route flush …)")
            tests.append(lambda r, prefix=prefix, sel=_PREFIX_SELECTORS[mode]: sel(r, prefix))
    if cache:
        if version == 6:
            raise ctx.cmd.error("flowsim keeps no IPv6 route cache to flush", value="cache",
                                expected="ip -4 route flush cache, or selectors of main-table routes")
        fib.rt_cache_flush()
        return
    fib.flush(version, lambda r: all(t(r) for t in tests))


def _route_change(ctx: IpContext, mode: str, args: Args) -> None:
    rtype = "unicast"
    first = args.next("a prefix or 'default'")
    if first in ("unicast", "blackhole", "unreachable", "prohibit"):
        rtype = first
        first = args.next("a prefix or 'default'")
    opts: dict = {"via": None, "dev": None, "metric": None, "mtu": 0, "lock": False, "src": None,
                  "proto": "boot", "scope": None, "onlink": False}
    while args:
        word = args.next("a route option")
        if word == "via":
            if args.peek() in ("inet", "inet6"):
                args.next("family")
            opts["via"] = args.addr("via")
        elif word == "dev" or word == "oif":
            opts["dev"] = ctx.dev(args.name(word))
        elif word in ("metric", "preference", "priority"):
            opts["metric"] = args.int(word, 0, 0xFFFFFFFF)
        elif word == "mtu":
            if args.peek() == "lock":
                args.next("lock")
                opts["lock"] = True
            opts["mtu"] = args.int("mtu", 68, 65535)
        elif word == "src":
            opts["src"] = args.addr("src")
        elif word == "proto":
            opts["proto"] = args.next("a protocol")
        elif word == "scope":
            opts["scope"] = args.choice("scope", {s: s for s in ("global", "universe", "link", "host")})
        elif word == "onlink":
            opts["onlink"] = True
        elif word == "table":
            args.choice("table", {"main": "main", "254": "main"})
        elif word in ("pref", "advmss", "hoplimit", "initcwnd", "initrwnd", "realm", "expires"):
            args.next(f"a value after {word!r}")
        else:
            raise ctx.cmd.error(f"unknown route option {word!r}", value=word,
                                expected="via, dev, metric, mtu, src, proto, scope, onlink or table")
    prefix = _route_prefix(ctx, first, opts["via"])
    if mode == "del":
        _route_del(ctx, prefix, opts)
        return
    route = _route_nexthop(ctx, prefix, rtype, opts)
    ns = ctx.topo.netns(ctx.netns)
    try:
        ns.fib.add(route, mode=mode)
    except KeyError:
        raise ctx.cmd.error(f"route {route} already exists", value=str(prefix),
                            expected="a new route, or 'ip route replace' (RTNETLINK answers: File exists)") from None
    except LookupError:
        raise ctx.cmd.error(f"no route {prefix} to change", value=str(prefix),
                            expected="an existing route (RTNETLINK answers: No such file or directory)") from None


def _route_prefix(ctx: IpContext, text: str, via) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if text == "default":
        version = ctx.family or (via.version if via is not None else 4)
        return ipaddress.ip_network("0.0.0.0/0" if version == 4 else "::/0")
    try:
        prefix = ipaddress.ip_network(text, strict=True)
    except ValueError:
        raise ctx.cmd.error(f"bad prefix {text!r}", value=text,
                            expected="PREFIX/LEN with no host bits, or 'default'") from None
    if ctx.family is not None and prefix.version != ctx.family:
        raise ctx.cmd.error(f"prefix {text!r} is not IPv{ctx.family}", value=text, expected=f"an IPv{ctx.family} prefix")
    if via is not None and via.version != prefix.version:
        raise ctx.cmd.error(f"gateway {via} and prefix {text} differ in family", value=str(via),
                            expected=f"an IPv{prefix.version} gateway")
    return prefix


def _route_nexthop(ctx: IpContext, prefix, rtype: str, opts: dict) -> Route:
    """``fib_check_nh`` / ``ip6_route_check_nh``: the gateway must be on-link; find the device."""
    dev: NetDevice | None = opts["dev"]
    via = opts["via"]
    ns = ctx.topo.netns(ctx.netns)
    if rtype == "unicast" and via is None and dev is None:
        raise ctx.cmd.error(f"route {prefix} has neither gateway nor device", value=str(prefix),
                            expected="'via GW' and/or 'dev DEV'")
    if via is not None and via.version == 6 and via.is_link_local and not opts["onlink"]:
        # ip6_validate_gw: a link-local unicast gateway is not looked up (ND finds it on the link), but the
        # egress device must be given
        if dev is None:
            raise ctx.cmd.error(f"gateway {via} is link-local and no device is given", value=str(via),
                                expected=f"'via {via} dev DEV' (RTNETLINK answers: Egress device not specified)")
        if dev.link_type == "loopback":
            raise ctx.cmd.error(f"gateway {via} through {dev.name}", value=dev.name, expected="a device other than "
                                "loopback (Egress device can not be loopback device for this route)")
    elif via is not None and not opts["onlink"]:
        # fib_check_nh_v4_gw: a lookup of the gateway among routes of scope link or narrower (a device route: the
        # prefix route of an address, or one added with `dev` alone), through the given device if any;
        # ip6_route_check_nh: a route to it without a gateway
        found = [r for r in ns.fib.connected(via.version) + ns.fib.static
                 if r.version == via.version and via in r.prefix and r.type == "unicast" and r.gateway is None
                 and (via.version == 6 or r.scope in ("link", "host")) and (dev is None or r.dev == dev.name)
                 and r.dev in ns.devices and ns.devices[r.dev].up]  # a down device's nexthops are dead
        if not found:
            raise ctx.cmd.error(f"gateway {via} is not on a connected subnet" +
                                (f" of {dev.name}" if dev is not None else ""), value=str(via),
                                expected="a gateway inside a subnet of an up device, or 'onlink' "
                                         "(RTNETLINK answers: Nexthop has invalid gateway)")
        best = max(found, key=lambda r: (r.prefix.prefixlen, -r.metric))  # the longest prefix, then the metric
        ns.fib.accessed(best)  # the check's fib_lookup reached it (fib_table_lookup → fib_alias_accessed)
        dev = ns.devices[best.dev]
    metric = opts["metric"] if opts["metric"] is not None else (0 if prefix.version == 4 else 1024)
    scope = opts["scope"] or ("link" if via is None and dev is not None and prefix.version == 4 else "universe")
    return Route(prefix, type=rtype, dev=dev.name if dev is not None else None, gateway=via, metric=metric,
                 mtu=opts["mtu"], mtu_lock=opts["lock"], src=opts["src"], proto=opts["proto"],
                 scope="universe" if scope == "global" else scope, onlink=opts["onlink"])


def _route_del(ctx: IpContext, prefix, opts: dict) -> None:
    try:
        ctx.topo.netns(ctx.netns).fib.delete(prefix, metric=opts["metric"],
                                             dev=opts["dev"].name if opts["dev"] is not None else None,
                                             gateway=opts["via"])
    except LookupError:
        raise ctx.cmd.error(f"no route {prefix} to delete", value=str(prefix),
                            expected="an existing route (RTNETLINK answers: No such process)") from None


# --- ip neigh

def _neigh(ctx: IpContext, tokens: list[str]) -> None:
    _verb(ctx, tokens, {"add": _neigh_add, "replace": _neigh_add, "change": _neigh_add, "del": _neigh_del,
                        "delete": _neigh_del}, "neigh")


def _neigh_add(ctx: IpContext, verb: str, args: Args) -> None:
    addr = args.addr("neigh", ctx.family)
    lladdr, dev, state, router = None, None, NudState.PERMANENT, False
    while args:
        word = args.next("a neighbour option")
        if word == "lladdr":
            lladdr = args.mac("lladdr")
        elif word == "dev":
            dev = ctx.dev(args.name("dev"))
        elif word == "nud":
            state = args.choice("nud", NUD_NAMES)
        elif word == "router":
            router = True
        elif word in ("extern_learn", "proxy"):
            continue
        else:
            raise ctx.cmd.error(f"unknown neighbour option {word!r}", value=word, expected="lladdr, dev, nud, router")
    if dev is None:
        raise ctx.cmd.error("missing device", expected="'dev DEV'")
    if dev.link_type != "ether":
        raise ctx.cmd.error(f"{dev.name} has no link-layer neighbours", value=dev.name, expected="an Ethernet device")
    if state & NUD_VALID and lladdr is None:
        raise ctx.cmd.error(f"nud {state.name.lower()} needs a link-layer address", value=str(addr),
                            expected="'lladdr MAC' (or nud incomplete|failed|none)")
    table = ctx.topo.netns(ctx.netns).neigh
    if verb == "add" and table.lookup(dev.name, addr) is not None:
        raise ctx.cmd.error(f"neighbour {addr} dev {dev.name} exists", value=str(addr),
                            expected="a new neighbour, or 'ip neigh replace' (RTNETLINK answers: File exists)")
    table.add(NeighEntry(addr, dev.name, lladdr, state, router=router))


def _neigh_del(ctx: IpContext, verb: str, args: Args) -> None:
    addr = args.addr("neigh", ctx.family)
    word = args.next("'dev DEV'")
    if word != "dev":
        raise ctx.cmd.error(f"unexpected {word!r}", value=word, expected="'dev DEV'")
    dev = ctx.dev(args.name("dev"))
    if not ctx.topo.netns(ctx.netns).neigh.delete(dev.name, addr):
        raise ctx.cmd.error(f"no neighbour {addr} on {dev.name}", value=str(addr), expected="an existing neighbour")


# --- ip xfrm (the state and policy options are parsed in flowsim.config.iproute_xfrm)

def _xfrm(ctx: IpContext, tokens: list[str]) -> None:
    if not tokens:
        raise ctx.cmd.error("missing object after 'ip xfrm'", expected="state or policy")
    handler = _match(ctx.cmd, tokens[0], [("state", _xfrm_state), ("policy", _xfrm_policy)], "ip xfrm object")
    handler(ctx, tokens[1:])


def _xfrm_state(ctx: IpContext, tokens: list[str]) -> None:
    _verb(ctx, tokens, {"add": _xfrm_state_add, "update": _xfrm_state_add}, "xfrm state")


def _xfrm_policy(ctx: IpContext, tokens: list[str]) -> None:
    _verb(ctx, tokens, {"add": _xfrm_policy_add, "update": _xfrm_policy_add}, "xfrm policy")


# ---------------------------------------------------------------------- bridge

def _bridge(topo: Topology, cmd: Command, tokens: list[str]) -> None:
    netns = cmd.netns
    while tokens and tokens[0].startswith("-"):
        opt = tokens.pop(0)
        if opt in ("-n", "-netns") and tokens:
            netns = topo.require_netns(tokens.pop(0), cmd).name
        elif opt not in ("-d", "-s", "-j", "-p"):
            raise cmd.error(f"unknown bridge option {opt!r}", value=opt, expected="-n NS")
    ctx = IpContext(topo, cmd, None, netns)
    if not tokens:
        raise cmd.error("missing object", expected="vlan or fdb")
    handler = _match(cmd, tokens[0], [("vlan", _bridge_vlan), ("fdb", _bridge_fdb)], "bridge object")
    if len(tokens) < 2:
        raise cmd.error(f"missing verb after {tokens[0]!r}", expected="add or del")
    verb = {"add": "add", "append": "add", "replace": "add", "del": "del", "delete": "del"}.get(tokens[1])
    if verb is None:
        raise cmd.error(f"unknown verb {tokens[1]!r}", value=tokens[1], expected="add or del")
    handler(ctx, verb, Args(ctx.cmd, tokens[2:]))


def _bridge_of(ctx: IpContext, dev: NetDevice, self_: bool) -> tuple[BridgeDevice, str | None]:
    """The bridge and the VLAN group owner (None = the bridge itself) that *dev* names."""
    if isinstance(dev, BridgeDevice) and (self_ or dev.master is None):
        return dev, None
    if dev.master is None:
        raise ctx.cmd.error(f"{dev.name} is not a bridge port", value=dev.name,
                            expected="a port of a bridge (ip link set DEV master BR), or a bridge with 'self'")
    return ctx.topo.netns(ctx.netns).devices[dev.master], dev.name


def _bridge_vlan(ctx: IpContext, verb: str, args: Args) -> None:
    vids, dev, flags = None, None, {"pvid": False, "untagged": False, "self": False, "switchdev": None}
    while args:
        word = args.next("a vlan option")
        if word == "vid":
            vids = _vid_range(ctx, args.next("a VLAN id or range"))
        elif word == "dev":
            dev = ctx.dev(args.name("dev"))
        elif word in ("pvid", "untagged", "self"):
            flags[word] = True
        elif word == "master":
            continue
        elif word == "switchdev":
            flags["switchdev"] = args.choice("switchdev", {"on": True, "off": False})
        else:
            raise ctx.cmd.error(f"unknown vlan option {word!r}", value=word,
                                expected="vid, dev, pvid, untagged, self, master, switchdev on|off")
    if vids is None or dev is None:
        raise ctx.cmd.error("bridge vlan needs vid and dev", expected="'vid N dev DEV'")
    if flags["pvid"] and len(vids) > 1:
        raise ctx.cmd.error("pvid with a VLAN range", value=vids, expected="a single vid with 'pvid'")
    br, owner = _bridge_of(ctx, dev, flags["self"])
    switchdev = flags["switchdev"]
    if switchdev is None:
        switchdev = owner is not None and dev.kind == "dsa"
    for vid in vids:
        if verb == "add":
            br.vlan_add(owner, vid, pvid=flags["pvid"], untagged=flags["untagged"], switchdev=switchdev)
        elif not br.vlan_del(owner, vid):
            raise ctx.cmd.error(f"VLAN {vid} is not on {dev.name}", value=vid, expected="a configured VLAN")


def _vid_range(ctx: IpContext, text: str) -> list[int]:
    lo, sep, hi = text.partition("-")
    try:
        first, last = int(lo), int(hi) if sep else int(lo)
    except ValueError:
        raise ctx.cmd.error(f"bad VLAN id {text!r}", value=text, expected="1-4094 or a range like 10-20") from None
    if not 1 <= first <= last <= 4094:
        raise ctx.cmd.error(f"bad VLAN id {text!r}", value=text, expected="1-4094 or a range like 10-20")
    return list(range(first, last + 1))


def _bridge_fdb(ctx: IpContext, verb: str, args: Args) -> None:
    text = args.next("a MAC address")
    try:
        mac = parse_mac(text)
    except ValueError:
        raise ctx.cmd.error(f"bad MAC address {text!r}", value=text, expected="a MAC like 02:00:00:00:00:01") from None
    dev, vid, static = None, None, True
    while args:
        word = args.next("an fdb option")
        if word == "dev":
            dev = ctx.dev(args.name("dev"))
        elif word == "vlan":
            vid = args.int("vlan", 1, 4094)
        elif word in ("static", "permanent", "local"):
            static = True
        elif word == "dynamic":
            static = False
        elif word in ("master", "self", "extern_learn", "sticky"):
            continue
        else:
            raise ctx.cmd.error(f"unknown fdb option {word!r}", value=word, expected="dev, vlan, master, static, dynamic")
    if dev is None:
        raise ctx.cmd.error("missing device", expected="'dev PORT'")
    br, port = _bridge_of(ctx, dev, False)
    if port is None:
        raise ctx.cmd.error(f"{dev.name} is a bridge, not a port", value=dev.name, expected="a bridge port")
    if verb == "del":
        for v in ([vid] if vid is not None else [0] + sorted(br.vlan_group(port))):
            br.fdb.pop((mac, v), None)
        return
    if vid is not None:
        if br.vlan_find(port, vid) is None:  # br_fdb_add: "RTM_NEWNEIGH with unconfigured vlan"
            raise ctx.cmd.error(f"VLAN {vid} is not configured on {port}", value=vid,
                                expected=f"a VLAN of {port} (bridge vlan add vid {vid} dev {port})")
        br.fdb_add(mac, vid, port, static=static)
        return
    for v in [0] + sorted(br.vlan_group(port)):  # no vlan given: vid 0 and every VLAN of the port
        br.fdb_add(mac, v, port, static=static)


# ---------------------------------------------------------------------- sysctl

def _sysctl(topo: Topology, cmd: Command, tokens: list[str]) -> None:
    items = [t for t in tokens if t not in ("-w", "-q")]
    if not items:
        raise cmd.error("missing KEY=VALUE", expected="sysctl -w KEY=VALUE")
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise cmd.error(f"bad sysctl {item!r}", value=item, expected="KEY=VALUE")
        problem = sysctl_problem(key, value)
        if problem is not None:
            raise cmd.error(f"sysctl {key} = {value!r}: {problem.what}", value=value, expected=problem.expected)
        topo.netns(cmd.netns).sysctls[key] = value
