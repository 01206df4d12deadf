"""benchmarks/bench_revision.py: a revision and the working tree measured in one process.

What is checked is that the comparison is of the two trees on the same work (timings belong to the
benchmark's output, not to a test): the revision is imported from its own extracted copy, both sides hit
the fast path for every frame and inject the run's packets, and a name that is no commit is one clear error.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flowsim.config.topology import load_topology
from flowsim.sim.simulation import Simulation

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "bench_revision.py"

pytestmark = pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs a git checkout (git archive)")


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)


def test_head_against_the_working_tree():
    res = _bench("HEAD", "--rounds", "2", "--flows", "150", "--scale", "1")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert out["rev"] == head and out["rounds"] == 2
    rev_file, new_file = Path(out["imported_from"]["rev"]), Path(out["imported_from"]["new"])
    assert new_file.resolve().is_relative_to(ROOT.resolve())
    assert not rev_file.resolve().is_relative_to(ROOT.resolve()) and rev_file.name == "__init__.py"
    # every frame of the warm-up and of both rounds took the fast path, on each side (the script compares them)
    assert out["fastpath"]["packets"] == 150 and out["fastpath"]["hits"] == 150 * 3
    cover = Simulation(load_topology(ROOT / "topologies" / "ip6ip6-rx.toml")).run()
    assert out["run"]["packets"] == sum(cover.kernel.ledger.injected.values())
    for side in ("fastpath", "run"):
        assert out[side]["rev_per_cpu_s"] > 0 and out[side]["new_per_cpu_s"] > 0
        assert out[side]["new_over_rev_cpu"] == pytest.approx(out[side]["rev_per_cpu_s"] / out[side]["new_per_cpu_s"],
                                                              rel=0.01)


@pytest.mark.parametrize("rev", ["no-such-revision", "--upload-pack=touch"])
def test_a_name_that_is_no_commit_is_one_error(rev):
    res = _bench("--", rev)  # after "--": argparse hands even an option-like name to the revision
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert f"{rev!r}" in res.stderr and "commit" in res.stderr


@pytest.mark.parametrize(("args", "message"), [(["--rounds", "0"], "--rounds must be at least 1"),
                                                (["--flows", "45537"], "--flows must be at most 45,536")])
def test_bad_options_are_one_error(args, message):
    res = _bench("HEAD", *args)
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr


def test_a_revision_that_cannot_run_the_setup_is_one_error():
    """The first commit, from before the architecture issue's packages: its flowsim has no flowsim.kernel."""
    root = subprocess.run(["git", "-C", str(ROOT), "rev-list", "--max-parents=0", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.split()[0]
    if (ROOT / ".git" / "shallow").exists():
        pytest.skip("a shallow clone: the first commit is not here")
    res = _bench(root, "--rounds", "1", "--flows", "10", "--scale", "1")
    assert res.returncode != 0 and "Traceback" not in res.stderr
    # its flowsim has no flowsim.config: not found there, and not taken from the working tree either
    assert "the rev tree cannot run this checkout's setup (ModuleNotFoundError: No module named 'flowsim." in res.stderr
    assert "in the rev tree" in res.stderr
