"""The flowtable: ``net/netfilter/nf_flow_table_*.c`` and ``nft_flow_offload.c``.

``tuple`` (``struct flow_offload_tuple`` and the parsers that build it:
``nf_flow_tuple_ip``, ``nf_flow_tuple_encap``, the tunnel checks), ``path``
(``dev_fill_forward_path`` → ``nft_dev_path_info`` → ``nft_flow_route``),
``core`` (``nf_flow_table_core.c``: entries, add/lookup/refresh/teardown,
GC, timeouts, counters; ``nft_flow_offload_eval``) and ``fastpath``
(``nf_flow_table_ip.c``: the ingress hooks; every exit has a reason id).

May import: the rest of ``flowsim.kernel`` (skb, headers, conntrack,
devices, fib, neigh, gso) and the shared vocabulary.  The stack calls into
this package; this package never imports ``flowsim.kernel.stack``.
"""
