"""The slow path of every namespace: device receive, L2, IP, netfilter hooks, xfrm, transmit.

``core`` holds :class:`~flowsim.kernel.stack.core.Kernel` (all namespaces
of a topology, the packet ledger, the clock hooks); ``l2``
(``__netif_receive_skb_core``, VLAN, bridge, PPPoE, device xmit), ``ip``
(``ip_rcv``/``ipv6_rcv``, forwarding, output, tunnels, ICMP errors),
``nf`` (the netfilter hooks around conntrack and NAT), ``xfrm`` (IPsec
policy, bundles, ESP output and input).  Packet bytes are built by
:mod:`flowsim.kernel.pkt`, which the endpoints and ESP share.

Inside, each module imports only the ones below it (``.importlinter``):
``core`` > ``ip`` > ``xfrm`` > ``l2`` | ``nf``.  The way back up
is the kernel's: ``l2`` delivers to the handlers registered in its
``ptype_base`` (``dev_add_pack``) and transmits on tunnels through the
``ndo_start_xmit`` the IP layer registered; ``xfrm`` sends its outer packet
through the ``xfrm_state_afinfo.local_out`` the IP layer lent it.  ``ip``
fills these tables when it is imported (the kernel's initcalls), and
``core`` imports it.

May import: the rest of ``flowsim.kernel`` (the flowtable included: the
stack calls it, never the other way round) and ``flowsim.nft``.
"""
