"""The Linux data path, modelled function by function.

``skb`` (bytes, offsets, ``header_pointer``/``pskb_may_pull`` with cost
counters), ``headers``, ``pkt`` (building IP/TCP/UDP packets), ``gso`` (``__skb_gso_segment``), ``capture`` (the
packet taps and the pcap/pcapng formats), ``fib``, ``neigh``,
``conntrack``/``nat``, ``esp``, the stack (``stack/``: L2, IP, netfilter
hooks, xfrm), the devices (``devices/``, one module per
``ndo_fill_forward_path`` kind) and the flowtable (``flowtable/``: all of
``nf_flow_table_*.c`` and ``nft_flow_offload.c``).

May import: the shared vocabulary (``flowsim.errors``, ``flowsim.reasons``,
``flowsim.profiles``) and ``flowsim.nft`` (the ruleset the stack evaluates).
Never ``config``, ``sim``, ``models``, ``conform`` or ``commands``.
"""
