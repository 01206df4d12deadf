"""flowsim: a simulator of the Linux netfilter flowtable software fast path.

It mirrors ``net/netfilter/nf_flow_table_*.c`` closely enough to review
flowtable patches (IPIP / IP6IP6 acceleration, ``DEV_PATH_TUN``) and to
predict whether a router's traffic takes the fast path, and why not.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    """Lazy exports: ``flowsim.sweep`` (a callable module: ``flowsim.sweep(topology, grid)``)."""
    if name == "sweep":
        import importlib

        return importlib.import_module("flowsim.sweep")
    raise AttributeError(f"module 'flowsim' has no attribute {name!r}")
