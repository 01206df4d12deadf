"""Property: any mutation of a shipped topology loads, or is one located TopologyError / RulesetError (issue 15).

The mutations are what an editing slip or an attacker does to a file: delete,
duplicate or move a line, swap two characters, insert junk (brackets, quotes,
escapes, non-ASCII), change a number (to a huge, negative, fractional,
``nan`` or ``inf`` one).  The loader must then give a frozen topology whose
rulesets the nft parser reads, or one TopologyError, or one RulesetError
(the nft parser's): never another exception, never a RecursionError.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowsim.config.topology import load_topology_text
from flowsim.errors import RulesetError, TopologyError
from flowsim.nft.ruleset import parse_ruleset

TOPOLOGIES = sorted((Path(__file__).resolve().parent.parent / "topologies").glob("*.toml"))
TEXTS = {p.name: p.read_text() for p in TOPOLOGIES}
JUNK = st.lists(st.sampled_from(list("[]{}=\"'\\.,#\n 0x-:/é\x00") + ["'''", '"""', "\\u00e9", "[[traffic]]",
                                                                     "[netns.x]", "nan"]),
                max_size=6).map("".join)
NUMBER = re.compile(r"\b\d+(\.\d+)?\b")
NUMBERS = st.sampled_from(["0", "-1", "1e7", "1e-300", "nan", "inf", "-inf", "99999999999999999999999", "0.5",
                           "65536", "4294967296", "1_000", "0x10", "true"])


@st.composite
def mutation(draw, text: str) -> str:
    """One edit of *text* (see the module docstring)."""
    lines = text.split("\n")
    i = draw(st.integers(0, len(lines) - 1))
    kind = draw(st.sampled_from(["delete", "duplicate", "replace", "swap", "junk", "number"]))
    if kind == "delete":
        del lines[i]
    elif kind == "duplicate":
        lines.insert(i, lines[i])
    elif kind == "replace":
        lines[i] = lines[draw(st.integers(0, len(lines) - 1))]
    elif kind == "swap" and len(lines[i]) >= 2:
        j = draw(st.integers(0, len(lines[i]) - 2))
        lines[i] = lines[i][:j] + lines[i][j + 1] + lines[i][j] + lines[i][j + 2:]
    elif kind == "junk":
        j = draw(st.integers(0, len(lines[i])))
        lines[i] = lines[i][:j] + draw(JUNK) + lines[i][j:]
    elif kind == "number":
        found = list(NUMBER.finditer(text))
        if found:
            m = found[draw(st.integers(0, len(found) - 1))]
            return text[:m.start()] + draw(NUMBERS) + text[m.end():]
    return "\n".join(lines)


@st.composite
def mutated(draw) -> tuple[str, str]:
    """(file name, text) of a shipped topology after one to three edits."""
    name = draw(st.sampled_from(sorted(TEXTS)))
    text = TEXTS[name]
    for _ in range(draw(st.integers(1, 3))):
        text = draw(mutation(text))
    return name, text


def load_and_parse(name: str, text: str) -> None:
    """What a run does first: load the topology, then parse each namespace's ruleset as the kernel does."""
    topo = load_topology_text(text, name)
    for ns in topo.namespaces.values():
        if ns.nft is not None and ns.nft.text.strip():
            parse_ruleset(ns.nft.text, file=ns.nft.file, line_offset=max(ns.nft.line - 1, 0))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_topology_loads_or_is_one_located_error(case):
    """Any mutation of a shipped topology loads, or is one TopologyError/RulesetError naming the file and a line."""
    name, text = case
    try:
        load_and_parse(name, text)
    except TopologyError as exc:
        assert exc.file == name and exc.line is not None and str(exc).startswith(f"{name}:{exc.line}: ")
    except RulesetError as exc:
        assert exc.file == name and exc.line is not None
