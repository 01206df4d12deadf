"""``flowsim schema NAME``: print the JSON Schema (draft 2020-12) of one ``--json`` output.

Every machine-readable output carries ``"schema": "flowsim.NAME/1"``; this
prints the schema it validates against (shipped in the package as
flowsim/schemas/NAME.json).  Reason ids are an enum taken from the table
``flowsim reasons`` prints.
"""

from __future__ import annotations

import argparse
import sys

from flowsim.errors import ConfigError
from flowsim.schemas import NAMES

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("schema", help="print the JSON Schema of a command's --json output",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", metavar="NAME", help=f"the output whose schema to print: one of {', '.join(NAMES)}")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.name not in NAMES:
        raise ConfigError(f"no schema {args.name!r}", value=args.name, expected="one of " + ", ".join(NAMES))
    from importlib import resources

    sys.stdout.write(resources.files("flowsim.schemas").joinpath(f"{args.name}.json").read_text())
    return 0
