"""The import contracts of ``.importlinter`` hold: every package imports only the layers below it.

``lint-imports`` builds the import graph of the whole package (``import``
statements, including those under ``if TYPE_CHECKING:``) and checks the
layers, the forbidden import of the stack by the flowtable and the
independent modules.  Its report names the offending import and line.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _lint_imports() -> list[str]:
    """The command line of the ``lint-imports`` next to this interpreter (the venv's), else on PATH."""
    here = Path(sys.executable).with_name("lint-imports")
    return [str(here)] if here.exists() else [shutil.which("lint-imports") or "lint-imports"]


def test_import_contracts_are_kept() -> None:
    """``lint-imports`` exits 0: no contract of ``.importlinter`` is broken."""
    proc = subprocess.run([*_lint_imports(), "--no-cache", "--no-logo", str(ROOT / ".importlinter")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
