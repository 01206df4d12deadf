"""``flowsim import SNAPSHOT -o TOPOLOGY.toml``: a topology that rebuilds a snapshot of a live machine.

SNAPSHOT is the directory ``flowsim snapshot --script`` writes (one folder per
network namespace with the output of ip, bridge, nft and sysctl; docs/snapshot.md).
What flowsim cannot represent is a warning "file: what: why" on stderr and a
comment in the output; the output is loaded with flowsim's own reader before
the command succeeds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flowsim.config.importer import check_loads, import_snapshot
from flowsim.errors import ConfigError

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("import", help="write a topology that rebuilds a snapshot of a live machine",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("snapshot", metavar="SNAPSHOT",
                   help="snapshot directory (one folder per namespace, written by the flowsim snapshot script)")
    p.add_argument("-o", "--output", metavar="TOPOLOGY", required=True,
                   help="topology file to write (TOML); '-' prints it")
    p.add_argument("--traffic-from", metavar="FILE", default=None,
                   help="copy the [[traffic]] tables of this topology file into the output")
    p.set_defaults(func=run)


def run(args) -> int:
    result = import_snapshot(args.snapshot, traffic_from=args.traffic_from)
    for warning in result.warnings:
        print(f"flowsim: warning: {warning}", file=sys.stderr)
    name = "<stdout>" if args.output == "-" else args.output
    if args.output == "-":
        sys.stdout.write(result.text)
    else:
        try:
            Path(args.output).write_text(result.text, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write {args.output}: {exc.strerror}", where=args.output) from None
    check_loads(result, name)
    return 0
