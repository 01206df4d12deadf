"""Every command prints exactly its golden output (``tests/golden``).

The goldens pin behaviour across refactors: a difference here is either a
bug or an intended change, which regenerates the files
(``python -m tests.golden.cases [PREFIX…]``) in a commit that says why.
"""

from __future__ import annotations

import json

import pytest

from tests.golden import cases as golden

CASES = golden.cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    """The command's exit status, stdout and capture bytes equal the stored golden file."""
    stored = json.loads(golden.path_of(case).read_text())
    assert golden.produce(CASES[case]) == stored


def test_every_golden_file_has_a_case() -> None:
    """No stale golden file lingers after a topology or case is removed."""
    files = {p.relative_to(golden.GOLDEN).with_suffix("").as_posix() for p in golden.GOLDEN.rglob("*.json")}
    assert files == set(CASES)
