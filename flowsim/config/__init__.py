"""Topology files: what a scenario says, read once.

``topology`` (the TOML reader and :class:`~flowsim.config.topology.Topology`),
``iproute`` (the ``ip``/``bridge`` command interpreter), ``iproute_xfrm``
(``ip xfrm state|policy``), ``traffic`` (``[[traffic]]`` tables) and
``events`` (``[[event]]`` tables: iproute2 lines run at a virtual time).
Every error names the file, the line and what was expected.

May import: ``flowsim.kernel`` (devices, FIB, neighbours the commands
build), ``flowsim.nft`` and the shared vocabulary.  Never ``sim``,
``models``, ``conform`` or ``commands``.
"""
