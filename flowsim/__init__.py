"""flowsim: a simulator of the Linux netfilter flowtable software fast path.

It mirrors ``net/netfilter/nf_flow_table_*.c`` closely enough to review
flowtable patches (IPIP / IP6IP6 acceleration, ``DEV_PATH_TUN``) and to
predict whether a router's traffic takes the fast path, and why not.
"""

__version__ = "0.1.0"
