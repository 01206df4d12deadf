"""Kernel behaviour profiles: one frozen object of named switches per kernel.

Every behaviour that differs between kernel versions (net/netfilter/nf_flow_table_*.c,
nft_flow_offload.c and the tunnel drivers' ``ndo_fill_forward_path``) is a
switch here, never an ``if version >= …`` test in the data path.  A profile is
an immutable :class:`Profile`; :func:`get_profile` returns a named one and
:meth:`Profile.derive` makes a variant (``--set switch=value`` on the CLI)::

    >>> p = get_profile("linux-7.0").derive(ip6_tunnel_header_access="pull")
    >>> p.ip6_tunnel_header_access, p.name
    ('pull', 'linux-7.0+ip6_tunnel_header_access=pull')

Named profiles: ``linux-6.1``, ``linux-6.12`` (Debian kernels used for the
qemu conformance runs), ``linux-6.18`` (no tunnel acceleration),
``linux-6.19`` (IPIP), ``linux-7.0`` (IP6IP6 as merged for 7.0, with its
known bugs), ``linux-7.1.5`` (June-2026 fixes), ``linux-7.2`` (Debian sid's
7.2.13: the tunnel push reads this direction's route; the default, the newest
released kernel) and ``linux-7.3`` (Debian experimental's 7.3-rc7: the
``ctx->ether_type`` rework, tunnel resolvers checking the packet family and
giving the tunnel route, routes checked by the GC).  A switch's
documentation says "7.0" for the behaviour of that merge.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from flowsim.errors import ProfileError

__all__ = ["Profile", "PROFILES", "PROFILE_NOTES", "DEFAULT_PROFILE", "get_profile", "profile_from_cli", "SWITCHES"]

DEFAULT_PROFILE = "linux-7.2"


def _switch(doc: str, choices: tuple[str, ...] | None = None, *, kernel: str):
    """A profile field: *doc* says what it models; *choices* for str switches; *kernel* the kernel change
    behind it (the series or commit, and the release it came in), shown by ``flowsim profiles``."""
    return attrs.field(metadata={"doc": doc, "choices": choices, "kernel": kernel})


@attrs.frozen
class Profile:
    """The behaviour switches of one kernel version (see the module docstring)."""

    name: str = attrs.field(metadata={"doc": "profile name", "choices": None})
    kernel: str = attrs.field(metadata={"doc": "kernel version this models", "choices": None})

    # --- receive side: net/netfilter/nf_flow_table_ip.c parsing (nf_flow_offload_ip_hook,
    #     nf_flow_offload_ipv6_hook, nf_flow_ip4_tunnel_proto, nf_flow_ip6_tunnel_proto, nf_flow_tuple_encap)
    ipip_rx: bool = _switch(
        "IPIP tunnels recognised at the flowtable hook (nf_flow_ip4_tunnel_proto, 6.19)",
        kernel="IPIP flowtable acceleration series (fe8313316eaf), 6.19")
    ip6ip6_rx: bool = _switch(
        "IP6IP6 tunnels recognised at the flowtable hook (nf_flow_ip6_tunnel_proto, 7.0)",
        kernel="IP6IP6 flowtable acceleration series (5e5180352193), 7.0")
    ip4_tunnel_ihl_check: bool = _switch(
        "explicit IHL < 5 check in nf_flow_ip4_tunnel_proto (025a41e76b51, CVE-2026-72417, 7.1.5)",
        kernel="025a41e76b51 (CVE-2026-72417), 7.1.5")
    ip6_tunnel_hdr_size: str = _switch(
        "IPv6 tunnel header size stored by nf_flow_ip6_tunnel_proto: 'absolute' offset from "
        "ipv6_skip_exthdr (7.0 bug with in-band VLAN/PPPoE) or 'relative' (fixed, 7.1.5)",
        ("absolute", "relative"),
        kernel="June-2026 IPv6 tunnel parsing fixes, 7.1.5")
    ip6_tunnel_exthdr: str = _switch(
        "extension headers after the outer IPv6 header: 'skip' them with ipv6_skip_exthdr (7.0) "
        "or send the packet to the 'slowpath' (7.1.5)", ("skip", "slowpath"),
        kernel="June-2026 IPv6 tunnel parsing fixes, 7.1.5")
    ip6_tunnel_header_access: str = _switch(
        "how the outer IPv6 header is read: 'header_pointer' (7.0, not pulled; a later skb_pull "
        "of non-linear bytes is a bug) or 'pull' (pskb_may_pull, 7.1.5)", ("header_pointer", "pull"),
        kernel="June-2026 IPv6 tunnel parsing fixes (pskb_may_pull), 7.1.5")
    tuple_encap_pppoe_proto: str = _switch(
        "protocol nf_flow_tuple_encap compares for a PPPoE-carried packet: the 'raw' PPP protocol "
        "(mainline through 7.2.13: tunnel fields stay empty) or the 'mapped' ethertype (7.3: "
        "ctx->ether_type rework)", ("raw", "mapped"),
        kernel="ctx->ether_type rework of nf_flow_skb_encap_protocol / nf_flow_tuple_encap, 7.3 (commit id not found)")
    hook_ether_type_check: bool = _switch(
        "nf_flow_skb_encap_protocol records ctx->ether_type (the in-band VLAN/PPPoE payload's, else "
        "skb->protocol) and nf_flow_offload_ip_hook / _ipv6_hook return NF_ACCEPT when it is not the hook's "
        "family, before the lookup (7.3); before, an in-band header had to carry the hook's protocol and a "
        "packet of the other family was parsed by the hook's own tuple builder",
        kernel="ctx->ether_type rework of nf_flow_offload_ip_hook / nf_flow_offload_ipv6_hook, 7.3 "
               "(commit id not found)")

    # --- transmit side: nf_flow_offload_ip_hook's xmit (nf_flow_tunnel_v4_push / nf_flow_tunnel_v6_push,
    #     nf_flow_encap_push, nf_flow_queue_xmit / neigh_xmit)
    ip6ip6_tx_encap_limit: bool = _switch(
        "IP6IP6 push adds a destination-options header with encap limit 4 and the MTU check "
        "subtracts 8 more (7.0); removed in 7.1.5",
        kernel="IP6IP6 series (5e5180352193), 7.0; encap limit removed in 7.1.5")
    encap_push_order: str = _switch(
        "how VLAN tags are pushed on transmit: 'legacy' (<= 6.18: neigh_xmit / hw_ifidx path), "
        "'entry0-first' (6.19: generic skb_vlan_push from entry 0, reverse QinQ order), "
        "'innermost-first' (April-2026 fix, nf_flow_vlan_push)", ("legacy", "entry0-first", "innermost-first"),
        kernel="VLAN push rework, 6.19; April-2026 inline VLAN/PPPoE fixes (nf_flow_vlan_push), 7.0")
    pppoe_direct_xmit: bool = _switch(
        "PPPoE path entries force DIRECT xmit with needs_gso_segment (April-2026 fix)",
        kernel="April-2026 inline VLAN/PPPoE fixes, 7.0")
    tunnel_push_dst: str = _switch(
        "route used by the tunnel push: the 'opposite' tuple's dst_cache (7.0 bug) or 'this' "
        "direction's (7.2: nf_flow_offload_ip_hook passes tuplehash->tuple.dst_cache)", ("opposite", "this"),
        kernel="Pablo Neira Ayuso's tunnel dst fix (Fixes d30301ba4b07 / 93cf357fa797), in 7.2.13")
    direct_tunnel_dst: bool = _switch(
        "a DIRECT-xmit tuple whose opposite tuple has a tunnel keeps its route (flow_offload_fill_route) "
        "and nf_flow_dst_check checks every tuple that holds a route (7.2); before, DIRECT tuples kept "
        "none and were never checked",
        kernel="'move dst_cache/dst_cookie out of the runtime union' (Zhengyang Chen, Fixes d30301ba4b07), "
               "in 7.2.13")

    # --- path discovery: nf_flow_table_path.c (nft_dev_path_info, dev_fill_forward_path, ndo_fill_forward_path)
    # The tx side of the tunnel acceleration is these resolvers: a flow into the tunnel carries the
    # tunnel in its tuple only through DEV_PATH_TUN, and the fast path pushes the outer header for
    # exactly those tuples (nf_flow_tunnel_v4_push / _v6_push came in the same series).
    ipip_fill_forward_path: bool = _switch(
        "ipip_fill_forward_path exists (DEV_PATH_TUN for IPIP; the fast path pushes the IPIP header, 6.19)",
        kernel="IPIP flowtable acceleration series (fe8313316eaf), 6.19")
    ip6tnl_fill_forward_path: bool = _switch(
        "ip6_tnl_fill_forward_path exists (DEV_PATH_TUN for ip6tnl; the fast path pushes the IP6IP6 header, 7.0)",
        kernel="IP6IP6 flowtable acceleration series (5e5180352193), 7.0")
    ip6tnl_requires_encaplimit_none: bool = _switch(
        "ip6_tnl_fill_forward_path refuses tunnels without 'encaplimit none' (7.1.5)",
        kernel="June-2026 IP6IP6 fixes, 7.1.5")
    ip6tnl_resolver_lookup: str = _switch(
        "the route lookup of ip6_tnl_fill_forward_path, which picks the device the path continues on "
        "(ctx->dev): the tunnel's 'remote' address only (fl6.daddr, <= 7.2.13) or the 'tunnel-flow': also its "
        "local address, its link as oif and its TClass/flow label, as ipxip6_tnl_xmit looks up (flowsim's "
        "routes do not depend on the flow label)", ("remote", "tunnel-flow"),
        kernel="'net: ip6_tunnel: use tunnel parameters for fill_forward_path route lookup' (Lorenzo Bianconi, "
               "net-next, 8 Jul 2026, not in 7.2.13); 7.3 copies the tunnel's flow t->fl.u.ip6")
    tunnel_resolver_family_check: bool = _switch(
        "ipip_fill_forward_path / ip6_tnl_fill_forward_path refuse (-EOPNOTSUPP) a flow whose packets are "
        "not the tunnel's inner family (ctx->ether_type, 7.3): no flow for IPv4 over ip6tnl",
        kernel="net_device_path_ctx.ether_type checks in ipip.c / ip6_tunnel.c, 7.3 (commit id not found)")
    tunnel_route: str = _switch(
        "the route a tunnel direction keeps: 'update-route' (nft_flow_tunnel_update_route: nf_route to the "
        "remote from the local address with the packet's mark; a failed lookup keeps the flow without the "
        "tunnel; <= 7.2) or 'resolver' (the resolver's own lookup, path->tun.dst: ipip with local, TOS "
        "and link, ip6tnl with the tunnel's flow; 7.3)", ("update-route", "resolver"),
        kernel="path->tun.dst replaces nft_flow_tunnel_update_route in nf_flow_table_path.c, 7.3 "
               "(commit id not found)")
    path_failure: str = _switch(
        "what a path-resolution failure does: build an 'incomplete-flow' (7.0) or create 'no-flow' "
        "(June-2026 rework)", ("incomplete-flow", "no-flow"),
        kernel="June-2026 path resolution rework, 7.1.5")
    path_requires_both_neigh: bool = _switch(
        "device paths used only when both directions are NEIGH xmit (<= 6.18)",
        kernel="direct xmit path rework, 6.19 (both directions NEIGH before)")
    bridge_tag_encap_check: bool = _switch(
        "bridge VLAN TAG mode checks the 2-VLAN limit in nft_dev_path_info (6.19)",
        kernel="bridge VLAN TAG encap check in nft_dev_path_info, 6.19")

    # --- nf_tables control plane: net/netfilter/nf_tables_api.c (nft_netdev_hook_alloc, nft_flowtable_event)
    flowtable_absent_device: str = _switch(
        "a flowtable listing a device the namespace does not have: 'refuse' the ruleset "
        "(nft_netdev_hook_alloc returns -ENOENT, nft: 'Could not process rule: No such file or directory'; "
        "before 6.16) or 'bind-on-register': accept it and hook the device when it appears "
        "(6.16: 6d07a289504a 'Support wildcard netdev hook specs' drops the -ENOENT, a331b78a5525 "
        "'Respect NETDEV_REGISTER events' binds it in nft_flowtable_event)", ("refuse", "bind-on-register"),
        kernel="6d07a289504a 'Support wildcard netdev hook specs' and a331b78a5525 'Respect NETDEV_REGISTER events', 6.16")

    # --- flow life cycle: nf_flow_state_check (nf_flow_table_ip.c), flow_offload_teardown (nf_flow_table_core.c)
    tcp_fin_rst: str = _switch(
        "TCP FIN/RST in the fast path: set 'closing' and stay (6.14+) or 'teardown' at once (older)",
        ("closing", "teardown"),
        kernel="flow CLOSING state for TCP FIN/RST, 6.14")
    fixup_ct_timeout: str = _switch(
        "the conntrack timeout flow_offload_fixup_ct gives a torn-down flow's entry: 'expired' (the flow's "
        "state — TCP's, UDP's by IPS_SEEN_REPLY — less the offload timeout only when the flow expired; 6.14 "
        "with the CLOSING rework), 'state' (less the offload timeout always; 6.12.117) or 'replied' (UDP "
        "always udp_timeouts[UDP_CT_REPLIED], less the offload timeout always; 6.1.192: an unreplied UDP "
        "entry lives 90 s past its flow)", ("expired", "state", "replied"),
        kernel="'netfilter: flowtable: fixup UDP timeout depending on ct state' (Vlad Buslov, 2023; absent "
               "from Debian's 6.1.192, present in 6.12.117), the flow CLOSING rework of flow_offload_fixup_ct, 6.14")
    advmss_mtu: str = _switch(
        "the MTU a SYN's or SYN-ACK's MSS option is derived from (ipv4_default_advmss / ip6_default_advmss): "
        "the route's 'path' MTU, a path MTU the host learned for that address included (6.1.192), or its "
        "'configured' MTU, the metric or the device's (ip_dst_mtu_configured / ip6_dst_mtu_configured: "
        "6.12.117 and 7.2.13 have them; 6.12.118 dropped them again)", ("configured", "path"),
        kernel="ip_dst_mtu_configured (include/net/ip.h), ip6_dst_mtu_configured: in Debian's 6.12.117 and "
               "7.2.13 sources, not in 6.1.192 nor 6.12.118 (commit id not found)")
    ct_offload_timeout: str = _switch(
        "what keeps an offloaded flow's conntrack entry from expiring: the 'flowtable-gc' "
        "(nf_flow_table_extend_ct_timeout: under 5 minutes left, UDP a day, TCP by state, and any other "
        "protocol — GRE — WARN_ON_ONCE and a jiffy, so an offloaded GRE entry dies a day after flow add) or "
        "the 'conntrack-gc' (nf_ct_offload_timeout: under half a day left, a day, for every protocol)",
        ("flowtable-gc", "conntrack-gc"),
        kernel="'netfilter: conntrack: rework offload nf_conn timeout extension logic' (Florian Westphal, "
               "6.14; in Debian's 6.12.118, not in 6.1.192)")
    gc_dst_check: bool = _switch(
        "nf_flow_offload_gc_step also tears down a flow when nf_flow_dst_check fails on either tuple "
        "(7.3); before, a stale route was noticed only by a packet of that direction",
        kernel="nf_flow_dst_check moved to nf_flow_table.h and called from nf_flow_offload_gc_step, 7.3 "
               "(commit id not found)")

    # --- ICMP errors: net/ipv4/icmp.c, net/ipv6/icmp.c (flowsim.kernel.icmp_limit)
    icmp_msgs_default: str = _switch(
        "the defaults of net.ipv4.icmp_msgs_per_sec / icmp_msgs_burst, the host-wide bucket of rate-limited "
        "ICMP errors (icmp_sk_init): '1000/50' (6.1.192, 6.12.118) or '10000/10000' (7.2.13)",
        ("1000/50", "10000/10000"),
        kernel="icmp_sk_init in Debian's 6.12.118 and 7.2.13 sources (commit id not found; the profiles between "
               "them keep 1000/50)")
    icmpv6_ratelimit: str = _switch(
        "icmpv6_xrlim_allow's timeout per destination: net.ipv6.icmp.ratelimit 1000 ms shifted right by "
        "(128 - plen) >> 5 for the route's prefix length ('prefix': a /64 route gives 250 ms) or 100 ms for "
        "every route ('100ms')", ("prefix", "100ms"),
        kernel="0201eedb69b2 'ipv6: icmp: remove obsolete code in icmpv6_xrlim_allow()', 7.0 (and 6.18.y, "
               "6.19.y stable)")

    def derive(self, **overrides) -> Profile:
        """A copy with some switches changed; values may be given as text."""
        fields = attrs.fields_dict(Profile)
        changes = {}
        for key, raw in overrides.items():
            if key not in fields or key in ("name", "kernel"):
                raise ProfileError(f"unknown profile switch {key!r}", value=key,
                                   expected="one of " + ", ".join(SWITCHES))
            changes[key] = _coerce(fields[key], raw)
        if not changes:
            return self
        suffix = "".join(f"+{k}={_text(v)}" for k, v in changes.items())
        return attrs.evolve(self, name=self.name + suffix, **changes)

    def switches(self) -> dict[str, object]:
        """The switches as a plain dict (for reports)."""
        return {k: v for k, v in attrs.asdict(self).items() if k not in ("name", "kernel")}


SWITCHES: tuple[str, ...] = tuple(f.name for f in attrs.fields(Profile) if f.name not in ("name", "kernel"))

_TRUE = {"1", "true", "yes", "on", "y"}
_FALSE = {"0", "false", "no", "off", "n"}


def _text(v) -> str:
    return ("1" if v else "0") if isinstance(v, bool) else str(v)


def _coerce(field: attrs.Attribute, raw):
    if field.type in (bool, "bool"):
        if isinstance(raw, bool):
            return raw
        low = str(raw).strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ProfileError(f"bad value {raw!r} for switch {field.name!r}", value=raw,
                           expected="a boolean (1/0, true/false, on/off)")
    choices = field.metadata.get("choices")
    value = str(raw).strip()
    if choices and value not in choices:
        raise ProfileError(f"bad value {raw!r} for switch {field.name!r}", value=raw,
                           expected="one of " + ", ".join(choices))
    return value


_LINUX_6_18 = Profile(
    name="linux-6.18", kernel="6.18",
    ipip_rx=False, ip6ip6_rx=False, ip4_tunnel_ihl_check=False,
    ip6_tunnel_hdr_size="absolute", ip6_tunnel_exthdr="skip", ip6_tunnel_header_access="header_pointer",
    tuple_encap_pppoe_proto="raw", hook_ether_type_check=False,
    ip6ip6_tx_encap_limit=False,
    encap_push_order="legacy", pppoe_direct_xmit=False, tunnel_push_dst="opposite", direct_tunnel_dst=False,
    ipip_fill_forward_path=False, ip6tnl_fill_forward_path=False, ip6tnl_requires_encaplimit_none=False,
    ip6tnl_resolver_lookup="remote", tunnel_resolver_family_check=False, tunnel_route="update-route",
    path_failure="incomplete-flow", path_requires_both_neigh=True, bridge_tag_encap_check=False,
    flowtable_absent_device="bind-on-register", tcp_fin_rst="closing", fixup_ct_timeout="expired", advmss_mtu="configured",
    gc_dst_check=False, icmp_msgs_default="1000/50", icmpv6_ratelimit="prefix", ct_offload_timeout="flowtable-gc",
)

_LINUX_6_19 = attrs.evolve(
    _LINUX_6_18, name="linux-6.19", kernel="6.19",
    ipip_rx=True, ipip_fill_forward_path=True,
    encap_push_order="entry0-first", path_requires_both_neigh=False, bridge_tag_encap_check=True,
)

# 7.0: the merge window + the April-2026 inline VLAN/PPPoE fixes, before June 2026.
_LINUX_7_0 = attrs.evolve(
    _LINUX_6_19, name="linux-7.0", kernel="7.0",
    ip6ip6_rx=True, ip6ip6_tx_encap_limit=True, ip6tnl_fill_forward_path=True,
    encap_push_order="innermost-first", pppoe_direct_xmit=True, icmpv6_ratelimit="100ms",
)

_LINUX_7_1_5 = attrs.evolve(
    _LINUX_7_0, name="linux-7.1.5", kernel="7.1.5",
    ip4_tunnel_ihl_check=True, ip6_tunnel_hdr_size="relative", ip6_tunnel_exthdr="slowpath",
    ip6_tunnel_header_access="pull", ip6ip6_tx_encap_limit=False, ip6tnl_requires_encaplimit_none=True,
    path_failure="no-flow",
)

# Debian sid's 7.2.13 (linux-source-7.2): nf_flow_offload_ip_hook / _ipv6_hook pass this direction's
# tuplehash->tuple.dst_cache to nf_flow_tunnel_v4_push / _v6_push, and flow_offload_fill_route keeps the route of
# a DIRECT tuple whose opposite tuple has a tunnel (nf_flow_dst_check then checks it).
_LINUX_7_2 = attrs.evolve(
    _LINUX_7_1_5, name="linux-7.2", kernel="7.2.13",
    tunnel_push_dst="this", direct_tunnel_dst=True, icmp_msgs_default="10000/10000",
)

# Debian experimental's 7.3-rc7 (linux-source-7.3): the ctx->ether_type rework (nf_flow_skb_encap_protocol,
# nf_flow_tuple_encap, the hooks), the tunnel resolvers' family check and route (path->tun.dst), the GC's
# nf_flow_dst_check of both tuples.
_LINUX_7_3 = attrs.evolve(
    _LINUX_7_2, name="linux-7.3", kernel="7.3-rc7",
    tuple_encap_pppoe_proto="mapped", hook_ether_type_check=True, tunnel_resolver_family_check=True,
    ip6tnl_resolver_lookup="tunnel-flow", tunnel_route="resolver", gc_dst_check=True,
)

# Debian kernels booted by the conformance harness: pre-CLOSING (< 6.14).
# flow_offload_fixup_ct as Debian's sources have it (linux-source-6.12 6.12.117, linux-source-6.1 6.1.192).
# Debian's 6.12.118 (linux-source-6.12 6.12.118-1~deb12u1) drops ip_dst_mtu_configured / ip6_dst_mtu_configured
# again: ipv4_default_advmss takes ipv4_mtu(dst) and ip6_default_advmss dst6_mtu(dst), a learned path MTU
# included, as 6.1.192 does (measured: selftest-nat-pmtu's DNAT connection, whose server learned 1500 toward
# the router in the connection before, advertises MSS 1460 on 6.12.118 and 1960 on 6.12.117 and 7.2.13).
_LINUX_6_12 = attrs.evolve(_LINUX_6_18, name="linux-6.12", kernel="6.12", tcp_fin_rst="teardown",
                          flowtable_absent_device="refuse", fixup_ct_timeout="state", advmss_mtu="path")
_LINUX_6_1 = attrs.evolve(_LINUX_6_12, name="linux-6.1", kernel="6.1", fixup_ct_timeout="replied",
                         ct_offload_timeout="conntrack-gc")

PROFILES: dict[str, Profile] = {
    p.name: p for p in (_LINUX_6_1, _LINUX_6_12, _LINUX_6_18, _LINUX_6_19, _LINUX_7_0, _LINUX_7_1_5,
                        _LINUX_7_2, _LINUX_7_3)
}

# One line per named profile for ``flowsim profiles`` (the module docstring says the same).
PROFILE_NOTES: dict[str, str] = {
    "linux-6.1": "Debian 6.1 kernel of the qemu conformance runs: no tunnel acceleration, FIN/RST tears down",
    "linux-6.12": "Debian 6.12 kernel of the qemu conformance runs: no tunnel acceleration, FIN/RST tears down",
    "linux-6.18": "no tunnel acceleration; FIN/RST sets CLOSING",
    "linux-6.19": "IPIP acceleration",
    "linux-7.0": "IP6IP6 acceleration as merged for 7.0, with its known bugs",
    "linux-7.1.5": "June-2026 fixes",
    "linux-7.2": "Debian sid 7.2.13: tunnel push with this direction's route (the default)",
    "linux-7.3": "Debian experimental 7.3-rc7: ctx->ether_type rework (tunnels in PPPoE match), tunnel "
                 "resolvers check the family and give the route, GC checks routes; tunnel TOS/collect_md "
                 "refusals not modelled",
}


def get_profile(name: str | Profile | None = None) -> Profile:
    """The named profile (default ``linux-7.2``); a Profile is returned as is."""
    if isinstance(name, Profile):
        return name
    if name is None:
        name = DEFAULT_PROFILE
    try:
        return PROFILES[name]
    except KeyError:
        raise ProfileError(f"unknown profile {name!r}", value=name,
                           expected="one of " + ", ".join(PROFILES)) from None


def profile_from_cli(name: str | None, settings: Iterable[str] = ()) -> Profile:
    """Build a profile from ``--profile NAME`` and ``--set K=V`` arguments."""
    overrides = {}
    for item in settings or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ProfileError(f"bad --set {item!r}", value=item, expected="SWITCH=VALUE")
        overrides[key.strip()] = value
    return get_profile(name).derive(**overrides)
