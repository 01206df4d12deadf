"""Start-up: a command imports only its own module; ``--version`` builds no command parser; a run imports
no tqdm when it draws no bar and no replay module without --replay; the program (not a caller of
``main(argv)``) freezes what start-up built.

Import sets, not timings (timings belong to benchmarks/): what a command does not
import it cannot spend time on.
"""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

from flowsim.cli import command_names, main

TOPO = Path(__file__).resolve().parent.parent / "topologies" / "selftest.toml"

PROBE = """
import sys
from flowsim.cli import main
rc = main({argv!r})
print(sorted(m for m in sys.modules if m.startswith("flowsim.commands.") and ".commands._" not in m), file=sys.stderr)
"""


def _imported(argv: list[str]) -> tuple[str, list[str]]:
    res = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True, check=True)
    return res.stdout, eval(res.stderr.strip().splitlines()[-1])  # noqa: S307 - our own repr of a list of str


def test_version_imports_no_command():
    out, mods = _imported(["--version"])
    assert out.startswith("flowsim ") and mods == []


def test_a_command_imports_only_itself():
    _, mods = _imported(["reasons"])
    assert mods == ["flowsim.commands.reasons"]
    _, mods = _imported(["--debug", "profiles"])
    assert mods == ["flowsim.commands.profiles"]


def test_a_run_imports_neither_a_bar_it_does_not_draw_nor_the_replay_it_does_not_do():
    probe = f"""
import sys
from flowsim.cli import main
main(["run", "-q", "--json", {str(TOPO)!r}])
print([m for m in ("tqdm", "flowsim.sim.replay") if m in sys.modules], file=sys.stderr)
"""
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert res.stderr.strip().splitlines()[-1] == "[]"


def test_the_program_freezes_its_start_up_a_caller_keeps_its_collector(capsys):
    probe = """
import gc, sys
from flowsim.cli import main
sys.argv = ["flowsim", "reasons"]
main()
print(gc.get_freeze_count() > 1000, gc.isenabled(), file=sys.stderr)
"""
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert res.stderr.strip().splitlines()[-1] == "True True"
    frozen = gc.get_freeze_count()
    assert main(["reasons"]) == 0 and gc.get_freeze_count() == frozen and gc.isenabled()


def test_top_level_help_and_unknown_commands_still_list_every_command():
    _, mods = _imported(["--help"])
    assert mods == [f"flowsim.commands.{n}" for n in command_names()]
    res = subprocess.run([sys.executable, "-m", "flowsim", "bogus"], capture_output=True, text=True)
    assert res.returncode == 2 and all(repr(n.rstrip("_")) in res.stderr for n in command_names())  # import_.py: import
