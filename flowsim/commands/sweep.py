"""``flowsim sweep``: run a topology once per point of a grid of settings, in parallel, one row per run.

Each ``--grid KEY=V1,V2,…`` adds a dimension; the runs are the cartesian
product of them (the first key varies slowest).  KEY is ``profile``, a
profile switch, ``tcp_timeout`` / ``udp_timeout`` (the flowtable
sysctls of every namespace, in seconds), ``ct_udp_timeout``,
``ct_tcp_timeout_established`` … (conntrack's, likewise),
``traffic.NAME.FIELD`` (NAME a
traffic table or ``*``; FIELD packets, size, reply_packets, reply_size,
rate, start, flows, sport, dport, ttl, handshake, close, df), ``duration``,
``headlen`` or ``flowtables``.  ``--set KEY=V`` fixes any of them for
every run.  The runs go to a local process pool (``--workers N``, default
one per CPU) or to a Dask cluster (``--dask ADDRESS`` of a scheduler, or
``--dask local`` for a local one; the workers need flowsim installed).

The table goes to stdout (text, ``--csv`` or ``--json``); a progress bar
goes to stderr when it is a terminal, unless ``--quiet``.

Example::

    flowsim sweep topologies/ip6ip6-rx.toml --grid profile=linux-7.0,linux-7.1.5 \\
        --grid 'traffic.*.packets=10,100' --csv

Exit status: 0 after the sweep, 2 on bad input (one line on stderr), 3 on
an internal error (a flowsim bug: ``flowsim --debug sweep …`` shows its traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import json

from flowsim.commands._args import count_type
from flowsim.errors import ConfigError
from flowsim.schemas import schema_id
from flowsim.sim.progress import progress_enabled
from flowsim.sim.sweep import parse_grid, sweep

__all__ = ["register", "run", "dask_client"]


# a bound, not a tuning: each worker is a process (or a Dask worker) of its own
_workers = count_type("--workers", 1, 1024, "a number of processes")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep", help="run a topology over a grid of profiles, switches, timeouts and traffic; one row per run",
        description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("topology", help="topology file (TOML)")
    p.add_argument("--grid", action="append", default=[], metavar="K=V1,V2", required=True,
                   help="a grid dimension: key and its values (repeat for more dimensions)")
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="K=V",
                   help="a setting for every run (any grid key)")
    p.add_argument("--profile", metavar="P", default=None, help="base kernel profile (default linux-7.2)")
    p.add_argument("--duration", metavar="S", default=None, help="virtual seconds of every run")
    p.add_argument("--headlen", metavar="N", default=None, help="linear bytes of each received frame")
    p.add_argument("--dask", metavar="ADDRESS",
                   help="run on the Dask scheduler at ADDRESS (tcp://host:8786), or 'local' for a local cluster")
    p.add_argument("--workers", type=_workers, metavar="N",
                   help="local worker processes (default: one per CPU; 1 runs in this process; "
                        "with --dask local: its workers)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object (schema: flowsim schema sweep)")
    out.add_argument("--csv", action="store_true", help="print CSV")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)


def _fixed(args) -> dict:
    fixed = {k: v for k, v in (("profile", args.profile), ("duration", args.duration), ("headlen", args.headlen))
             if v is not None}
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"bad --set {item!r}", value=item, expected="KEY=VALUE")
        fixed[key.strip()] = value
    return fixed


@contextlib.contextmanager
def dask_client(address: str, workers: int | None = None):
    """A ``dask.distributed.Client`` for *address* (``local``: a LocalCluster of *workers* processes), closed after."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ConfigError("--dask needs dask.distributed", value=address,
                          expected="pip install 'flowsim[dask]'") from None
    if address == "local":
        with LocalCluster(n_workers=workers or 2, threads_per_worker=1, dashboard_address=None) as cluster, \
                Client(cluster) as client:
            yield client
        return
    try:
        client = Client(address, timeout="10s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConfigError(f"cannot connect to the Dask scheduler at {address!r}: {exc}", value=address,
                          expected="the address of a running scheduler, e.g. tcp://127.0.0.1:8786") from None
    with client:
        yield client


def _print(df, args) -> None:
    if args.csv:
        print(df.to_csv(index=False), end="")
    elif args.json:
        rows = json.loads(df.to_json(orient="records"))
        print(json.dumps({"schema": schema_id("sweep"), "topology": args.topology, "grid": parse_grid(args.grid),
                          "fixed": _fixed(args),
                          "columns": list(df.columns), "rows": rows}, indent=2))
    else:
        print(df.to_string(index=False))


def run(args) -> int:
    grid = parse_grid(args.grid)
    bar = progress_enabled(args.quiet)
    if args.dask:
        with dask_client(args.dask, args.workers) as client:
            df = sweep(args.topology, grid, client, fixed=_fixed(args), progress=bar)
    else:
        df = sweep(args.topology, grid, fixed=_fixed(args), workers=args.workers, progress=bar)
    _print(df, args)
    return 0
