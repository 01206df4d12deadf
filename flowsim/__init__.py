"""flowsim: a simulator of the Linux netfilter flowtable software fast path.

It mirrors ``net/netfilter/nf_flow_table_*.c`` closely enough to review
flowtable patches (IPIP / IP6IP6 acceleration, ``DEV_PATH_TUN``) and to
predict whether a router's traffic takes the fast path, and why not.

The public API (imported lazily, so ``flowsim --version`` stays fast)::

    import flowsim
    topo = flowsim.load_topology("topologies/ip6ip6-rx.toml")
    sim = flowsim.Simulation(topo, profile="linux-7.1.5")
    sim.run()
    report = flowsim.build_report(sim)

``load_topology``, ``Simulation``, ``build_report``, ``explain``,
``compare``, ``sweep``, ``skb_from_frame``, ``flow_tuple_from_skb``,
``get_profile`` and ``PROFILES``.  Everything else is internal and may move.

Layers (each imports only those below it; ``make test`` checks it with
import-linter): ``commands``/``cli`` → ``conform`` → ``sim`` → ``config``
→ ``models`` | ``kernel`` → ``nft`` → ``errors``, ``reasons``, ``profiles``.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_API = {
    "load_topology": "flowsim.config.topology",
    "Simulation": "flowsim.sim.simulation",
    "build_report": "flowsim.sim.report",
    "explain": "flowsim.sim.explain",
    "compare": "flowsim.sim.compare",
    "sweep": "flowsim.sim.sweep",
    "skb_from_frame": "flowsim.kernel.skb",
    "flow_tuple_from_skb": "flowsim.kernel.flowtable.tuple",
    "get_profile": "flowsim.profiles",
    "PROFILES": "flowsim.profiles",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    """Import the module behind a public name on first use."""
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'flowsim' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
