"""The neighbouring tunnel problems of the same patch stream.

``xfrm`` (the GSO decision of ``xfrm_output`` for inner tunnels, per
variant) and ``ovpn`` / ``ovpn_proto`` / ``ovpn_pktid`` (ovpn's transmit
path with and without UDP GSO batching, DATA_V2 records, packet-ID
ranges).

May import: ``flowsim.kernel`` (the skb, the GSO segmenter, ESP, the pcap
writer) and the shared vocabulary.  Independent of ``config``, ``sim`` and
``conform``.
"""
