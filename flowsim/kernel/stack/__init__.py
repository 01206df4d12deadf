"""The slow path of every namespace: device receive, L2, IP, netfilter hooks, xfrm, transmit.

``core`` holds :class:`~flowsim.kernel.stack.core.Kernel` (all namespaces
of a topology, the packet ledger, the clock hooks); ``l2``
(``__netif_receive_skb_core``, VLAN, bridge, PPPoE, device xmit), ``ip``
(``ip_rcv``/``ipv6_rcv``, forwarding, output, tunnels, ICMP errors),
``nf`` (the netfilter hooks around conntrack and NAT), ``xfrm`` (IPsec
policy, bundles, ESP output and input) and ``pkt`` (packet building
helpers the endpoints and the stack share).

May import: the rest of ``flowsim.kernel`` and ``flowsim.nft``.
"""
