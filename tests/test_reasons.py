"""The one table of reason ids (DESIGN.md "Contracts")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flowsim.reasons import REASONS, reason

SOURCE = Path(__file__).resolve().parent.parent / "flowsim"


def test_ids_are_stable_kebab_case_with_a_verdict():
    """Ids are kebab-case; each row has a slow-path or drop verdict, a kernel function and a text."""
    for rid, row in REASONS.items():
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rid)
        assert row.verdict in ("accept", "drop") and row.where and row.text


def test_unknown_id_is_refused():
    """A typo cannot become a new reason."""
    with pytest.raises(KeyError, match="add it to flowsim/reasons.py"):
        reason("no-such-reason")


def test_every_reason_the_tuple_builder_returns_is_in_the_table():
    """Each reason literal in the parser is a row of the table."""
    text = (SOURCE / "kernel" / "flowtable" / "tuple.py").read_text()
    used = set(re.findall(r'"([a-z0-9]+(?:-[a-z0-9]+)+)", f?"', text))
    assert used and used <= set(REASONS), used - set(REASONS)


def test_cli_lists_every_reason(capsys):
    """`flowsim reasons --json` documents every id in one place."""
    import json

    from flowsim.cli import main

    assert main(["reasons", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == set(REASONS)
