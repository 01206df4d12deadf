"""``flowsim profiles [SWITCH…]``: the named kernel profiles and every switch they set.

For each switch: what it models, its allowed values, the value each named
profile gives it and the kernel change behind it.  Any switch can be changed
for one run with ``--profile P --set SWITCH=VALUE`` (booleans take 1/0,
true/false, on/off); the derived profile is named after the change, e.g.
``linux-7.0+ip6_tunnel_header_access=pull``.  ``--json`` prints the same as
one JSON object.
"""

from __future__ import annotations

import argparse
import json
import textwrap

import attrs

from flowsim.errors import ProfileError
from flowsim.profiles import DEFAULT_PROFILE, PROFILE_NOTES, PROFILES, SWITCHES, Profile
from flowsim.schemas import schema_id

__all__ = ["register", "run", "describe"]


def register(sub) -> None:
    p = sub.add_parser("profiles", help="list the kernel profiles and every switch: meaning, values, kernel change",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("switch", nargs="*", metavar="SWITCH", help="only these switches (default: all)")
    p.add_argument("--json", action="store_true", help="print one JSON object (schema: flowsim schema profiles)")
    p.set_defaults(func=run)


def _choices(field: attrs.Attribute) -> list:
    if field.type in (bool, "bool"):
        return [False, True]
    return list(field.metadata["choices"])


def describe(names: list[str] | None = None) -> dict:
    """Profiles and switches as plain data (what ``--json`` prints)."""
    fields = attrs.fields_dict(Profile)
    for name in names or ():
        if name not in SWITCHES:
            raise ProfileError(f"unknown profile switch {name!r}", value=name, expected="one of " + ", ".join(SWITCHES))
    switches = {}
    for name in names or SWITCHES:
        field = fields[name]
        switches[name] = {
            "type": "bool" if field.type in (bool, "bool") else "str",
            "choices": _choices(field),
            "description": field.metadata["doc"],
            "kernel": field.metadata["kernel"],
            "values": {p.name: getattr(p, name) for p in PROFILES.values()},
        }
    return {
        "schema": schema_id("profiles"),
        "default": DEFAULT_PROFILE,
        "profiles": {p.name: {"kernel": p.kernel, "note": PROFILE_NOTES[p.name]} for p in PROFILES.values()},
        "switches": switches,
    }


def _text(value) -> str:
    return ("1" if value else "0") if isinstance(value, bool) else str(value)


def format_text(data: dict, width: int = 100) -> str:
    lines = [f"Profiles (--profile P; default {data['default']}):"]
    pw = max(map(len, data["profiles"]))
    for name, info in data["profiles"].items():
        lines.append(f"  {name:<{pw}}  {info['note']}")
    lines += ["", "Switches (--set SWITCH=VALUE; booleans take 1/0, true/false, on/off):"]
    for name, sw in data["switches"].items():
        allowed = " | ".join(_text(c) for c in sw["choices"])
        lines += ["", f"{name}  ({'boolean: ' if sw['type'] == 'bool' else ''}{allowed})"]
        lines += textwrap.wrap(sw["description"], width, initial_indent="    ", subsequent_indent="    ")
        lines += textwrap.wrap("kernel: " + sw["kernel"], width, initial_indent="    ", subsequent_indent="      ")
        vw = max(len(_text(c)) for c in sw["choices"])
        for choice in sw["choices"]:
            who = [p for p, v in sw["values"].items() if v == choice]
            lines.append(f"    {_text(choice) + ':':<{vw + 1}} {' '.join(who) if who else '(no named profile)'}")
    return "\n".join(lines)


def run(args) -> int:
    data = describe(args.switch)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(format_text(data))
    return 0
