"""Topology files: what a scenario says, read once, then frozen.

``importer`` (``flowsim import``: a snapshot of a real machine written as a
topology, checked by loading it), ``snapshot`` (the snapshot directory format
and the ``flowsim snapshot --script`` shell script),
``topology`` (the TOML reader: it imports the ones below),
``events`` (``[[event]]`` tables: iproute2 lines run at a virtual time),
``traffic`` (``[[traffic]]`` tables; :class:`~flowsim.config.traffic.Traffic`
declares a flow's fields), ``iproute`` (the ``ip``/``bridge`` command
interpreter), ``iproute_xfrm`` (``ip xfrm state|policy``), ``ipcontext``
(the family and namespace of one ``ip`` line), ``network``
(:class:`~flowsim.config.network.Topology`: namespaces, devices and links;
a loaded one is a frozen description that each run instantiates),
``raw`` (TOML line numbers, shell words), ``names`` (device and namespace
names as the kernel and ``ip netns`` check them) and ``limits`` (the bounded
virtual time of a run).  Each imports only the ones after
it in this list.  Every error names the file, the line and what was
expected.

May import: ``flowsim.kernel`` (devices, FIB, neighbours the commands
build), ``flowsim.nft`` and the shared vocabulary.  Never ``sim``,
``models``, ``conform`` or ``commands``.
"""
