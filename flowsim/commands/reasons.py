"""``flowsim reasons``: the table of reason ids, the one place they are documented."""

from __future__ import annotations

import json

from flowsim.reasons import REASONS

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("reasons", help="list every reason id with its verdict and kernel function")
    p.add_argument("--json", action="store_true", help="one JSON object: id -> {verdict, where, text}")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.json:
        print(json.dumps({rid: {"verdict": r.verdict, "where": r.where, "text": r.text} for rid, r in REASONS.items()},
                         indent=2))
        return 0
    width = max(map(len, REASONS))
    for rid, r in REASONS.items():
        print(f"{rid:<{width}}  {r.verdict:<6}  {r.where}\n{'':<{width}}          {r.text}")
    return 0
