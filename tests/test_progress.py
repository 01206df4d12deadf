"""Progress bars: on stderr only, only for a terminal, off with --quiet; stdout stays clean (issue 6, Also)."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import struct
import subprocess
import sys
import tempfile
import termios
from pathlib import Path

import pytest

from flowsim.cli import main
from flowsim.config.topology import load_topology
from flowsim.sim.progress import SimProgress, count_bar, expected_end, progress_enabled
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation
from flowsim.sim.traffic import DEFAULT_GAP

ROOT = Path(__file__).resolve().parent.parent
TOPO = ROOT / "topologies" / "ip6ip6-rx.toml"


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class Closed(io.StringIO):
    def isatty(self) -> bool:
        raise ValueError("I/O operation on closed file")


@pytest.mark.parametrize("quiet, stream, expected", [
    (False, Terminal(), True),
    (True, Terminal(), False),
    (False, io.StringIO(), False),
    (False, object(), False),
    (False, Closed(), False),
])
def test_progress_enabled(quiet, stream, expected):
    """A bar only when not quiet and the stream is a terminal."""
    assert progress_enabled(quiet, stream) is expected


def test_expected_end():
    """The run's duration when given, else the latest start + packets × gap of the traffic."""
    sim = Simulation(load_topology(TOPO))
    assert expected_end(sim.specs, 12.5) == 12.5
    assert expected_end(sim.specs) == pytest.approx(1000 * DEFAULT_GAP)
    assert expected_end([]) == 0.0


@pytest.mark.parametrize("factory", [
    lambda stream, on: SimProgress(1.0, enabled=on, stream=stream),
    lambda stream, on: count_bar(3, enabled=on, stream=stream),
])
@pytest.mark.parametrize("on", [True, False])
def test_bars_write_to_their_stream_only_when_enabled(factory, on):
    """Both bars draw on the given stream when enabled and write nothing when disabled."""
    stream = Terminal()
    with factory(stream, on) as bar:
        bar(0.5) if isinstance(bar, SimProgress) else bar.update(1)
    assert bool(stream.getvalue()) is on


def test_sim_progress_follows_the_clock():
    """The hook advances with the virtual clock and grows its total when the run goes past it."""
    with SimProgress(1.0, enabled=False) as bar:
        for t in (0.25, 0.1, 2.0):
            bar(t)
        assert bar.n == 2.0 and bar.bar.total == 2.0


def test_run_calls_the_hook_and_changes_nothing():
    """Simulation.run(progress=…) is called with a non-decreasing clock ending at sim.end; the report is identical."""
    seen = []
    with_hook = Simulation(load_topology(TOPO)).run(progress=seen.append)
    without = Simulation(load_topology(TOPO)).run()
    assert len(seen) > 2 and seen == sorted(seen) and seen[-1] == with_hook.end
    assert build_report(with_hook) == build_report(without)


def test_run_hook_ticks_while_idle():
    """With a duration the hook sees every GC tick that runs: each idle tick tick by tick, and the end always."""
    seen = []
    Simulation(load_topology(TOPO), coalesce_gc=False).run(3.0, progress=seen.append)
    assert [t for t in seen if t >= 1.0][:3] == [1.0, 2.0, 3.0] and seen[-1] == 3.0
    jumped = []
    Simulation(load_topology(TOPO)).run(3.0, progress=jumped.append)
    assert jumped[-1] == 3.0 and set(jumped) <= set(seen)


def test_run_without_terminal_writes_nothing_on_stderr(capsys):
    """`flowsim run` under a test (stderr is not a terminal): no bar, JSON alone on stdout."""
    assert main(["run", str(TOPO), "--json"]) == 0
    out = capsys.readouterr()
    assert out.err == "" and json.loads(out.out)["profile"]


@pytest.mark.parametrize("command", [
    ["explain", str(TOPO), "--json"],
    ["compare", str(TOPO), "--profile", "linux-7.0", "--profile", "linux-7.1.5", "--json"],
    ["trace", str(TOPO), "--limit", "1", "--json"],
])
def test_simulating_commands_without_terminal_write_nothing_on_stderr(command, capsys):
    """explain, compare and trace under a test (stderr is not a terminal): no bar, JSON alone on stdout."""
    assert main(command) == 0
    out = capsys.readouterr()
    assert out.err == "" and json.loads(out.out)["schema"]


def test_compare_draws_one_bar_per_side(monkeypatch):
    """compare(progress=True) labels its two runs A and B; progress=False (the default) draws nothing."""
    from flowsim.sim.compare import compare

    stream = Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    compare(str(TOPO), "linux-7.0", "linux-7.1.5", progress=True)
    drawn = stream.getvalue()
    compare(str(TOPO), "linux-7.0", "linux-7.1.5")
    assert "A linux-7.0" in drawn and "B linux-7.1.5" in drawn and stream.getvalue() == drawn


def _run_with_terminal_stderr(*args) -> tuple[str, str]:
    """Run `python -m flowsim ARGS` with stdout to a file and stderr on a 24x100 pseudo-terminal: (stdout, stderr)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    chunks = []
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen([sys.executable, "-m", "flowsim", *args], stdout=out, stderr=slave, cwd=ROOT)
            os.close(slave)
            while True:
                try:
                    data = os.read(master, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            proc.wait(timeout=60)
        finally:
            os.close(master)
        out.seek(0)
        return out.read().decode(), b"".join(chunks).decode(errors="replace")


@pytest.mark.parametrize("command", [
    ["run", str(TOPO), "--json"],
    ["sweep", str(TOPO), "--grid", "traffic.*.packets=5,10", "--workers", "1", "--json"],
    ["explain", str(TOPO), "--json"],
    ["compare", str(TOPO), "--profile", "linux-7.0", "--profile", "linux-7.1.5", "--json"],
    ["trace", str(TOPO), "--limit", "1", "--json"],
])
@pytest.mark.parametrize("quiet", [False, True])
def test_terminal_gets_a_bar_stdout_stays_json(command, quiet):
    """stderr on a terminal: a bar there (none with --quiet); stdout is the JSON and nothing else."""
    out, err = _run_with_terminal_stderr(*command, *(["--quiet"] if quiet else []))
    json.loads(out)
    assert ("%|" in err) is not quiet


def _big_topology(directory: Path, pairs: int = 600) -> Path:
    """A generated topology of 1 + 2 × *pairs* command lines (above LOAD_MIN_COMMANDS for 600 pairs)."""
    lines = ["ip link set lo up", *(f"ip link add v{i} type veth peer name p{i}" for i in range(pairs)),
             *(f"ip link set v{i} up" for i in range(pairs))]
    path = directory / "big.toml"
    path.write_text("[netns.big]\ncommands = '''\n" + "\n".join(lines) + "\n'''\n")
    return path


def test_load_topology_reports_each_command_line(tmp_path):
    """load_topology(progress=…) is called once per replayed command line with (done, total), done counting
    up to total; the topology is the same as without the callback."""
    path = _big_topology(tmp_path, 10)
    seen: list[tuple[int, int]] = []
    topo = load_topology(path, progress=lambda done, total: seen.append((done, total)))
    assert [d for d, _ in seen] == list(range(1, 22)) and {t for _, t in seen} == {21}
    assert sorted(topo.graph.nodes) == sorted(load_topology(path).graph.nodes)


def test_load_progress_draws_only_for_a_large_topology():
    """LoadProgress draws nothing below its minimum of command lines, nor when disabled; above it, a bar."""
    from flowsim.sim.progress import LOAD_MIN_COMMANDS, LoadProgress

    for total, on, drawn in ((LOAD_MIN_COMMANDS - 1, True, False), (LOAD_MIN_COMMANDS, False, False),
                             (LOAD_MIN_COMMANDS, True, True)):
        stream = Terminal()
        with LoadProgress(enabled=on, stream=stream) as bar:
            for done in range(1, total + 1):
                bar(done, total)
        assert bool(stream.getvalue()) is drawn, (total, on)
        assert bar.n == total


@pytest.mark.parametrize("quiet", [False, True])
def test_terminal_gets_a_load_bar_for_a_large_topology(tmp_path, quiet):
    """flowsim graph on a generated topology of 1201 command lines with stderr on a terminal: a
    "loading topology" bar there (none with --quiet); stdout is the Mermaid text and nothing else."""
    out, err = _run_with_terminal_stderr("graph", str(_big_topology(tmp_path)), "--format", "mermaid",
                                         *(["--quiet"] if quiet else []))
    assert out.startswith("flowchart LR\n") and "%|" not in out and "loading" not in out
    assert ("loading topology" in err and "%|" in err) is not quiet
    assert ("loading topology" in err) is not quiet


def test_load_bar_not_on_a_pipe_nor_for_a_small_topology(tmp_path, capsys):
    """stderr not a terminal (a test): nothing on stderr even for a large file; a shipped topology on a
    terminal: no load bar (it has far fewer command lines)."""
    assert main(["graph", str(_big_topology(tmp_path)), "--format", "mermaid"]) == 0
    out = capsys.readouterr()
    assert out.err == "" and out.out.startswith("flowchart LR\n")
    _out, err = _run_with_terminal_stderr("graph", str(TOPO), "--format", "mermaid")
    assert "loading topology" not in err
