"""benchmarks/bench_split.py: a run's CPU time split by where each frame was received, and the saving's bound.

Timings belong to the benchmark's output; what is checked is the accounting: the rows add up to each side's total,
both sides ran the traffic a plain run of the topology runs (same packets, the same fast-path hits at the router),
the bound and the rest needed for the target follow from the rows, and a bad option is one clear error.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from flowsim.config.topology import load_topology
from flowsim.sim.simulation import Simulation

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "bench_split.py"


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)


@pytest.fixture(scope="module")
def split() -> dict:
    res = _bench("--rounds", "1", "--scale", "1")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_the_same_traffic_as_a_plain_run(split):
    sim = Simulation(load_topology(ROOT / "topologies" / "ip6ip6-rx.toml")).run()
    totals = sim.kernel.ledger.totals()
    assert split["packets"] == totals["injected"] == 2006  # 2,000 packets of the tables and the TCP handshake
    assert split["fastpath_hits"] == sim.kernel.netns["router"].flowtables["ft"].fastpath > 0
    assert split["flowtable_netns"] == ["router"]  # the namespaces whose rows the bound takes out
    assert split["rounds"] == 1


def test_the_rows_add_up_to_each_side(split):
    rows = split["split"]
    assert set(rows) == {"client", "remote", "router", "server", "endpoint sends, timers"}
    for side in ("flowtables", "no-flowtables"):
        assert sum(r[side] for r in rows.values()) == pytest.approx(split["cpu_s"][side], abs=1e-3)
        assert all(r[side] > 0 for r in rows.values())
    # only the router has a flowtable: its frames are what the flowtables make cheaper
    assert rows["router"]["flowtables"] < rows["router"]["no-flowtables"]


def test_a_preempted_round_still_adds_up(monkeypatch):
    """A round preempted during frames (CI's runners are): the wall clock jumps while the CPU clock does not.

    Timed with the wall clock alone, the frames' rows would exceed the run's CPU time and leave the rest below zero
    (the failure this test was written for); each row is its share of the wall time applied to the CPU time.
    """
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_split
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    lost = [0.0]

    def preempted_perf_counter() -> float:  # 1 ms lost to another process at every read
        lost[0] += 1e-3
        return time.perf_counter() + lost[0]

    fake = types.SimpleNamespace(perf_counter=preempted_perf_counter, process_time=time.process_time)
    monkeypatch.setattr(bench_split, "time", fake)
    run = bench_split.split_run(ROOT / "topologies" / "ip6ip6-rx.toml", flowtables=True)
    assert run.wall_s > 2 * run.cpu_s  # the clock did jump: thousands of reads, a millisecond each
    assert sum(run.split.values()) == pytest.approx(run.cpu_s, rel=1e-9)
    assert all(s >= 0 for s in run.split.values())
    assert run.split[bench_split.REST] > 0  # the run's own events between frames: their wall time, scaled


def test_bound_and_target_follow_from_the_rows(split):
    cpu, router = split["cpu_s"], split["split"]["router"]
    assert split["saving"] == pytest.approx(cpu["no-flowtables"] / cpu["flowtables"], rel=5e-3)  # rounded figures
    rest = cpu["no-flowtables"] - router["no-flowtables"]
    assert split["rest_s"]["no-flowtables"] == pytest.approx(rest, abs=1e-3)
    assert split["saving_bound"] == pytest.approx(cpu["no-flowtables"] / rest, abs=1e-2)
    # everything outside the router at rest_for_target_s: the saving would be exactly 3x
    r = split["rest_for_target_s"]
    assert (r + router["no-flowtables"]) / (r + router["flowtables"]) == pytest.approx(3.0, rel=1e-2)


def test_another_topology(tmp_path):
    """A topology given by path: its namespaces are the rows, its flowtable namespaces the bound's."""
    res = _bench(str(ROOT / "topologies" / "conform-forward.toml"), "--rounds", "1", "--scale", "1")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["flowtable_netns"] == ["r"]
    assert set(out["split"]) == {"ns1", "ns2", "r", "endpoint sends, timers"}


@pytest.mark.parametrize("args, says", [
    (("--rounds", "0"), "--rounds"), (("--scale", "-1"), "--scale"), (("--rounds", "x"), "--rounds"),
    (("no-such.toml",), "cannot read the topology 'no-such.toml'"),
])
def test_bad_option_is_one_clear_error(args, says):
    res = _bench(*args)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert says in res.stderr


def test_topology_without_traffic_or_that_does_not_load(tmp_path):
    quiet = tmp_path / "quiet.toml"
    quiet.write_text('[netns.a]\ncommands = "ip link set lo up"\n')
    res = _bench(str(quiet), "--rounds", "1")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "no [[traffic]] table with packets = N" in res.stderr
    broken = tmp_path / "broken.toml"
    broken.write_text('[netns.a]\ncommands = "ip link add"\n\n[[traffic]]\nproto = "udp"\nfrom = "a"\n'
                      'to = "10.0.0.1"\npackets = 1\n')
    res = _bench(str(broken), "--rounds", "1")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith("bench_split: error: ") and "broken.toml" in res.stderr
