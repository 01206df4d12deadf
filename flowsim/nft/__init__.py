"""nf_tables: the ruleset of a namespace, from nft's own syntax to verdicts.

``nft.lark`` (the grammar), ``parse`` (text → statements, with file and
line), ``compile`` and ``types`` (typed expressions and sets), ``model``
(tables, chains, rules, flowtables), ``eval`` (``nft_do_chain``: rule
evaluation with the packet's metadata, and the stateful expressions' state: counters,
``limit`` token buckets on the namespace's clock, ``quota`` bytes), ``hooks`` (base chains and
flowtables in hook priority order, ``nf_hook_entries_grow``) and
``ruleset`` (:class:`~flowsim.nft.ruleset.Nftables`, the front).

May import: the shared vocabulary only (``flowsim.errors``,
``flowsim.reasons``, ``flowsim.profiles``).  The packet it evaluates is
handed in as metadata; nft knows nothing of skbs or devices.
"""
