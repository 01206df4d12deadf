"""The one table of reason ids: why a packet left (or never took) the fast path.

Every slow-path or drop exit of the simulated data path carries one of these
stable, kebab-case ids.  The JSON report, ``flowsim explain`` and the tests
use the ids; the table says which kernel function takes the exit and what it
means.  Add a row here before using a new id anywhere: :func:`reason` refuses
ids that are not in the table, so a typo cannot become a silent new reason.

Verdicts (``struct nf_hook_ops`` return values the flowtable hook uses):
``accept`` = NF_ACCEPT, continue through the ordinary stack (slow path);
``drop`` = NF_DROP; ``stolen`` = NF_STOLEN, the fast path transmitted it.
"""

from __future__ import annotations

import attrs

__all__ = ["Reason", "REASONS", "reason", "ACCEPT", "DROP", "STOLEN"]

ACCEPT = "accept"
DROP = "drop"
STOLEN = "stolen"


@attrs.frozen
class Reason:
    id: str
    verdict: str  # ACCEPT (slow path) or DROP
    where: str  # the kernel function that takes this exit
    text: str  # one line for humans


_ROWS = [
    # --- parsing: nf_flow_offload_inet_hook / nf_flow_skb_encap_protocol (net/netfilter/nf_flow_table_ip.c)
    ("l3proto-unsupported", ACCEPT, "nf_flow_offload_inet_hook",
     "skb->protocol is not IPv4, IPv6, 802.1Q or PPPoE session for this hook"),
    ("encap-unsupported", ACCEPT, "nf_flow_skb_encap_protocol",
     "in-band VLAN or PPPoE header whose inner protocol is not the hook's (or a second in-band header)"),
    ("header-truncated", ACCEPT, "pskb_may_pull / skb_header_pointer",
     "a header the parser needs lies beyond the end of the packet"),
    # --- IPv4 / IPv6 header checks (nf_flow_ip4_tunnel_proto, nf_flow_tuple_ip, nf_flow_ip6_tunnel_proto, nf_flow_tuple_ipv6)
    ("fragment", ACCEPT, "ip_is_fragment", "IPv4 fragment (MF set or fragment offset non-zero)"),
    ("ip-options", ACCEPT, "ip_has_options", "IPv4 header length is not 20 bytes (options present)"),
    ("ip-ihl-invalid", ACCEPT, "nf_flow_ip4_tunnel_proto",
     "IPv4 IHL below 5 (rejected explicitly since 025a41e76b51, CVE-2026-72417)"),
    ("ttl-expired", ACCEPT, "nf_flow_tuple_ip / nf_flow_tuple_ipv6 / tunnel checks",
     "TTL or hop limit is 1 or 0: the slow path must send the ICMP time-exceeded"),
    ("ipv6-exthdr", ACCEPT, "nf_flow_tuple_ipv6 / nf_flow_ip6_tunnel_proto",
     "IPv6 extension header where the fast path only accepts TCP/UDP/GRE "
     "(or, from 7.1.5, any extension header after an outer IPv6 header)"),
    ("ipv6-exthdr-error", ACCEPT, "ipv6_skip_exthdr",
     "the IPv6 extension header chain cannot be walked (truncated, or next header 59)"),
    ("l4proto-unsupported", ACCEPT, "nf_flow_tuple_ip / nf_flow_tuple_ipv6",
     "layer-4 protocol is not TCP, UDP or GRE"),
    ("gre-version", ACCEPT, "nf_flow_tuple_ip / nf_flow_tuple_ipv6", "GRE header version is not 0"),
    # --- lookup and per-flow checks (nf_flow_offload_forward, called by nf_flow_offload_ip_hook / _ipv6_hook)
    ("no-flow-entry", ACCEPT, "flow_offload_lookup", "no flow in the flowtable has this tuple"),
    ("flow-teardown", ACCEPT, "nf_flow_offload_forward", "the matching flow is being torn down (NF_FLOW_TEARDOWN)"),
    ("ct-dying", ACCEPT, "nf_flow_offload_forward", "the flow's conntrack entry is dying"),
    ("mtu-exceeded", ACCEPT, "nf_flow_exceeds_mtu",
     "packet longer than the flow's MTU (plus in-band headers, minus tunnel overhead)"),
    ("tcp-syn-closing", ACCEPT, "nf_flow_state_check", "TCP SYN on a CLOSING flow: flow torn down"),
    ("tcp-fin-rst", ACCEPT, "nf_flow_state_check", "TCP FIN or RST before 6.14: flow torn down"),
    ("route-stale", ACCEPT, "nf_flow_dst_check", "cached route is obsolete: flow torn down"),
    # --- drops in the fast path (nf_flow_offload_ip_hook / nf_flow_offload_ipv6_hook, after the checks)
    ("not-writable", DROP, "skb_ensure_writable", "headers cannot be made writable"),
    # iptunnel_handle_offloads / skb_cow_head fail only when an allocation fails (-ENOMEM); the simulator
    # never fails an allocation, so no run takes this exit (kept so the table lists every kernel outcome)
    ("tunnel-push-failed", DROP, "nf_flow_tunnel_v4_push / nf_flow_tunnel_v6_push",
     "outer tunnel header could not be pushed (allocation failure: not produced by the simulator)"),
    ("no-egress-device", DROP, "dev_get_by_index_rcu", "the tuple's egress ifindex names no device: flow torn down"),
    ("neigh-error", DROP, "ip_neigh_gw4 / ip_neigh_gw6", "neighbour lookup or creation failed: flow torn down"),
    ("xmit-type-unknown", DROP, "nf_flow_offload_ip_hook", "tuple has no usable xmit type"),
    ("encap-push-failed", DROP, "nf_flow_encap_push",
     "VLAN/PPPoE header push failed (headroom, or PPPoE over a non-IP protocol)"),
    ("gso-segment-error", DROP, "nf_flow_encap_gso_xmit", "software GSO segmentation failed"),
    ("kernel-bug", DROP, "skb_pull / nf_flow_tunnel_*_push",
     "the modelled kernel hits a known bug here (e.g. skb_pull over non-linear bytes); the packet is lost"),
    # --- flow creation: why `flow add @ft` created no flow (nft_flow_offload_eval in nft_flow_offload.c);
    #     the packet goes on
    ("flow-add-sec-path", ACCEPT, "nft_flow_offload_eval", "the packet was decrypted by IPsec (it has a sec_path)"),
    ("flow-add-ip-options", ACCEPT, "nft_flow_offload_eval", "the packet has IPv4 options"),
    ("flow-add-no-conntrack", ACCEPT, "nft_flow_offload_eval", "no conntrack entry is attached"),
    ("flow-add-tcp-fin-rst", ACCEPT, "nft_flow_offload_eval", "the packet carries TCP FIN or RST"),
    ("flow-add-tcp-not-established", ACCEPT, "nf_conntrack_tcp_established",
     "the TCP connection is not ESTABLISHED and ASSURED yet"),
    ("flow-add-gre-nat", ACCEPT, "nft_flow_offload_eval", "GRE connections with NAT or keys are not offloaded"),
    ("flow-add-l4proto", ACCEPT, "nft_flow_offload_eval", "only TCP, UDP and GRE connections are offloaded"),
    ("flow-add-helper", ACCEPT, "nft_flow_offload_eval",
     "a conntrack helper is attached, or the ct has SEQ_ADJUST / NAT_CLASH"),
    ("flow-add-unconfirmed", ACCEPT, "nft_flow_offload_eval",
     "the conntrack entry is not confirmed yet (first packet of the connection)"),
    ("flow-add-already-offloaded", ACCEPT, "nft_flow_offload_eval", "IPS_OFFLOAD is already set: one flow per ct"),
    ("flow-add-path", ACCEPT, "nft_flow_route", "path resolution failed and the kernel creates no flow"),
    ("flow-add-ct-dying", ACCEPT, "flow_offload_alloc", "the conntrack entry is dying"),
    # --- the slow path: nf_tables and conntrack
    ("nft-drop", DROP, "nft_do_chain", "an nftables rule or a chain policy dropped the packet"),
    ("nft-reject", DROP, "nft_reject_inet_eval / nft_reject_ipv4_eval / nft_reject_ipv6_eval",
     "an nftables reject statement refused the packet; its ICMP error (nf_send_unreach) or TCP reset (nf_send_reset) "
     "is sent back"),
    ("ct-clash", DROP, "__nf_conntrack_confirm", "conntrack confirmation clashed with an existing entry"),
    ("masquerade-no-address", DROP, "nf_nat_masquerade_ipv4 / nf_nat_masquerade_ipv6",
     "masquerade found no address to translate to (\"ate my IP address\")"),
    # --- the slow path: receive, forwarding and transmit (flowsim.kernel.stack.l2 / stack_ip)
    ("frame-truncated", DROP, "eth_type_trans / skb_vlan_untag / pppoe_rcv",
     "the frame is shorter than its link-layer headers"),
    ("dev-down", DROP, "__netif_receive_skb_core / __dev_queue_xmit", "the device is down"),
    ("no-carrier", DROP, "veth_xmit / dummy_xmit", "the device has no peer (no cable) or discards everything"),
    ("unsupported-device", DROP, "ndo_start_xmit", "the simulator has no transmit model for this device kind"),
    ("gso-segment-failed", DROP, "validate_xmit_skb / ip_finish_output_gso → skb_gso_segment",
     "a GSO skb the device cannot take whole (or whose segments exceed the MTU) could not be segmented"),
    ("xmit-recursion", DROP, "dev_xmit_recursion", "transmit nested deeper than XMIT_RECURSION_LIMIT (a tunnel loop)"),
    ("unknown-protocol", DROP, "__netif_receive_skb_core / ip_local_deliver_finish / ppp_input",
     "no handler for the ethertype, PPP protocol or IP protocol"),
    ("vlan-no-device", DROP, "__netif_receive_skb_core", "VLAN-tagged frame for a VID without a VLAN device"),
    ("not-for-host", DROP, "ip_rcv_core", "the frame's destination MAC is not this device's (PACKET_OTHERHOST)"),
    ("bridge-vlan-filtered", DROP, "br_allowed_ingress / br_allowed_egress",
     "bridge VLAN filtering refused the frame on this port and VID"),
    ("bridge-no-destination", DROP, "br_handle_frame_finish / br_dev_xmit",
     "the bridge has no port to send the frame to"),
    ("pppoe-no-session", DROP, "pppoe_rcv / pppoe_xmit", "no connected PPPoE session for this session id and peer"),
    ("ip-header-invalid", DROP, "ip_rcv_core / ipv6_rcv", "bad IP version, header length, total length or checksum"),
    ("no-route", DROP, "ip_route_input_slow / ip6_route_input / ip_route_output_key",
     "no route to the destination, or an unreachable, prohibit or blackhole route (ip_error / ip6_pkt_drop send "
     "ICMP destination unreachable, rate-limited, none for a blackhole)"),
    ("forwarding-disabled", DROP, "ip_route_input_slow / ip6_forward",
     "forwarding is off for the ingress device (net.ipv4.conf.DEV.forwarding / net.ipv6.conf.all.forwarding); "
     "no ICMP error is sent (ip_error, ip6_forward)"),
    ("ttl-exceeded-forward", DROP, "ip_forward / ip6_forward",
     "TTL or hop limit is 1 or 0: ICMP time exceeded is sent back"),
    ("frag-needed", DROP, "ip_forward / ip_tunnel_xmit / ip_finish_output",
     "IPv4 packet with DF longer than the MTU: ICMP fragmentation needed is sent back"),
    ("pkt-too-big", DROP, "ip6_forward / ip6_tnl_xmit / ip6_finish_output",
     "IPv6 packet longer than the MTU: ICMPv6 Packet Too Big is sent back"),
    ("neigh-unresolved", DROP, "neigh_resolve_output", "the next hop has no valid neighbour entry"),
    ("no-tunnel", DROP, "ipip_rcv / ip6_tnl_rcv", "no tunnel device matches the outer addresses and protocol"),
    ("tunnel-no-local", DROP, "ip6_tnl_xmit → ip6_tnl_xmit_ctl",
     "an ip6tnl device without a local address, or whose local address is not configured here, does not "
     "transmit: tx_err_link_failure"),
    ("tunnel-proto-mismatch", DROP, "ipip_tunnel_xmit / ip6_tnl_start_xmit",
     "the tunnel's mode does not carry this inner protocol"),
    ("reassembly-timeout", DROP, "ip_expire / ip6_frag_expire / nf_ct_frag6_expire",
     "a fragmented datagram was not complete within ipfrag_time (ip6frag_time)"),
    ("frag-overlap", DROP, "inet_frag_queue_insert",
     "a fragment overlaps one already queued: the whole datagram is discarded (RFC 5722)"),
    ("frag-duplicate", DROP, "inet_frag_queue_insert", "a fragment whose bytes are already queued (DUP_FRAG)"),
    ("frag-too-far", DROP, "ip_frag_too_far / ip_frag_reinit",
     "an IPv4 queue's fragments, after more than ipfrag_max_dist (64) other fragments from the same source"),
    ("frag-invalid", DROP, "ip_frag_queue / ip6_frag_queue / nf_ct_frag6_queue",
     "a fragment without data, a second last fragment with another end, or bytes past the last one's end"),
    ("frag-oversize", DROP, "ip_frag_reasm / ip6_frag_queue / nf_ct_frag6_queue",
     "the fragments reach past the largest IPv4 datagram or IPv6 payload (65535 bytes)"),
    ("frag-unaligned", DROP, "ip6_frag_queue / nf_ct_frag6_queue",
     "an IPv6 fragment with MF whose data is not a multiple of 8 bytes (ICMPv6 Parameter Problem)"),
    ("frag-headers-incomplete", DROP, "ipv6_frag_rcv",
     "a first IPv6 fragment without its whole upper-layer header (RFC 8200 4.5; ICMPv6 Parameter Problem)"),
    ("bad-checksum", DROP, "tcp_v4_rcv / udp_rcv / icmp_rcv", "the receiving host found a wrong L4 checksum"),
    ("no-socket", DROP, "tcp_v4_rcv / udp_rcv",
     "no endpoint is bound to the packet's addresses and ports (the host answers UDP with Port Unreachable, TCP with a "
     "RST)"),
    ("flowtable-drop", DROP, "nf_flow_offload_hook", "the flowtable hook returned NF_DROP without a reason id"),
    ("xfrm-no-state", DROP, "xfrm_lookup / xfrm4_rcv",
     "no xfrm state for the policy's template (XfrmOutNoStates) or for the SPI received (XfrmInNoStates)"),
    ("xfrm-decrypt-failed", DROP, "esp_input / xfrm_input",
     "the ESP packet did not authenticate or decode (XfrmInStateProtoError / XfrmInStateModeError)"),
    ("xfrm-policy-check", DROP, "xfrm4_policy_check / __xfrm_policy_check",
     "the packet does not satisfy the fwd policy's templates (XfrmInTmplMismatch / XfrmInNoPols)"),
    ("xfrm-policy-block", DROP, "xfrm_lookup", "a matching xfrm policy has action block (XfrmOutPolBlock)"),
]

REASONS: dict[str, Reason] = {r[0]: Reason(*r) for r in _ROWS}


def reason(rid: str) -> Reason:
    """Return the table row for *rid*; unknown ids are a programming error.

    >>> reason("fragment").verdict
    'accept'
    """
    try:
        return REASONS[rid]
    except KeyError:
        raise KeyError(f"unknown reason id {rid!r}; add it to flowsim/reasons.py") from None

