"""Benchmark: the commands of issue 16's table, run as a user runs them.

Each command is a child process (``.venv/bin/flowsim`` or ``python -m flowsim``); its CPU time (user +
system) is what ``resource.getrusage(RUSAGE_CHILDREN)`` charges the parent for it, so start-up, imports,
reading and writing count, and other jobs on a shared machine do not.  flowsim's bytecode is compiled
first, as ``pip install`` does, so start-up is an installed flowsim's (not a recompile of every module).  The commands of a comparison run
in turn within each round (benchmarks/_bench.py), best of the rounds, spread printed.

* ``flowsim tuple CAPTURE --json`` on the 100k-frame mixed capture (benchmarks/mixed_capture.py):
  frames per CPU-second;
* ``flowsim run -q --json`` on the cover-letter topology (topologies/ip6ip6-rx.toml) with 10x its
  traffic (every ``packets`` / ``reply_packets`` of its ``[[traffic]]`` tables times 10: 20k packets):
  simulated packets (the report's ``injected``) per CPU-second, with the flowtables and with
  ``--no-flowtables`` — their ratio is what the fast path saves end to end;
* a topology whose flow is never offloaded (topologies/ip6ip6-rx-encaplimit.toml, 10x traffic) against
  its own ``--no-flowtables`` run: what a failed ``flow add`` costs per packet;
* ``flowsim --version``: start-up.

Prints the targets, a table; the last line is one JSON object.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mixed_capture  # noqa: E402
from _bench import compile_bytecode, interleave_commands, last_line, targets, verdict  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGIES = ROOT / "topologies"
SCALE = 10
ROUNDS = 5  # best of 5: two runs of 3 rounds put the never-offloaded ratio 1.5% apart
TARGETS = {"tuple_fps": 300_000, "run_pps": 40_000, "fastpath_saving": 3.0, "never_offloaded_cost": 1.1,
           "version_cpu_s": 0.1}
BEFORE = {"tuple_fps": 29_000, "run_pps": 9_000, "fastpath_saving": 1.47, "never_offloaded_cost": "1.6-2.1",
          "version_cpu_s": 0.4}


def flowsim() -> list[str]:
    exe = Path(sys.executable).with_name("flowsim")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "flowsim"]


def scaled(topology: Path, tmp: Path, factor: int = SCALE) -> Path:
    """A copy of *topology* with every traffic table's packet counts times *factor*; ValueError when it has none."""
    text = topology.read_text()
    text, n = re.subn(r"^(\s*(?:reply_)?packets\s*=\s*)(\d+)", lambda m: f"{m[1]}{int(m[2]) * factor}", text, flags=re.M)
    if not n:
        raise ValueError(f"{topology}: no [[traffic]] table with packets = N to run (and scale)")
    out = tmp / topology.name
    out.write_text(text)
    return out


def injected(argv: list[str]) -> int:
    """Packets the run injected (its --json report), from one untimed run that also checks it works."""
    res = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(res.stdout)["packets"]["injected"]


def main() -> int:
    fs = flowsim()
    targets([f"flowsim tuple CAPTURE --json, 100k mixed frames: >= {TARGETS['tuple_fps']:,} frames per CPU-s "
             f"(before: {BEFORE['tuple_fps']:,})",
             f"flowsim run -q --json, cover letter x{SCALE} traffic: >= {TARGETS['run_pps']:,} simulated packets "
             f"per CPU-s (before: {BEFORE['run_pps']:,})",
             f"the same with --no-flowtables, divided by the above: >= {TARGETS['fastpath_saving']}x "
             f"(before: {BEFORE['fastpath_saving']}x)",
             f"never-offloaded topology (encaplimit) vs --no-flowtables: <= {TARGETS['never_offloaded_cost']}x "
             f"(before: {BEFORE['never_offloaded_cost']}x)",
             f"flowsim --version: <= {TARGETS['version_cpu_s']} s CPU (before: {BEFORE['version_cpu_s']} s)"])
    out: dict = {"rounds": ROUNDS}
    compile_bytecode(ROOT / "flowsim")
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        capture = mixed_capture.write(tmp / "mixed.pcap")
        cover = scaled(TOPOLOGIES / "ip6ip6-rx.toml", tmp)
        encap = scaled(TOPOLOGIES / "ip6ip6-rx-encaplimit.toml", tmp)
        commands = {
            "version": [*fs, "--version"],
            "tuple": [*fs, "tuple", str(capture), "--json"],
            "run": [*fs, "run", "-q", "--json", str(cover)],
            "run-noft": [*fs, "run", "-q", "--json", "--no-flowtables", str(cover)],
            "encaplimit": [*fs, "run", "-q", "--json", str(encap)],
            "encaplimit-noft": [*fs, "run", "-q", "--json", "--no-flowtables", str(encap)],
        }
        packets = {name: injected(argv) for name, argv in commands.items() if name.startswith(("run", "encap"))}
        t = interleave_commands(commands, ROUNDS)

    print(f"\n{'command':<18}{'CPU s (best)':>13}{'rate':>16}  spread")
    for name in commands:
        n = mixed_capture.FRAMES if name == "tuple" else packets.get(name)
        unit = "frames/s" if name == "tuple" else "pkts/s"
        rate = f"{n / t.best(name):>9,.0f} {unit}" if n else ""
        print(f"{name:<18}{t.best(name):>13.3f}{rate:>16}  {t.spread(name):.2f}")
        out[name] = {"cpu_s": round(t.best(name), 3), "spread": round(t.spread(name), 2)}
        if n:
            out[name]["per_cpu_s"] = round(n / t.best(name))
            out[name]["items"] = n

    tuple_fps = mixed_capture.FRAMES / t.best("tuple")
    run_pps = packets["run"] / t.best("run")
    saving = (t.best("run-noft") / packets["run-noft"]) / (t.best("run") / packets["run"])
    never = (t.best("encaplimit") / packets["encaplimit"]) / (t.best("encaplimit-noft") / packets["encaplimit-noft"])
    version = t.best("version")
    checks = {
        "tuple_fps": (tuple_fps, tuple_fps >= TARGETS["tuple_fps"], f"{tuple_fps:,.0f} frames per CPU-s"),
        "run_pps": (run_pps, run_pps >= TARGETS["run_pps"], f"{run_pps:,.0f} packets per CPU-s"),
        "fastpath_saving": (saving, saving >= TARGETS["fastpath_saving"],
                            f"--no-flowtables costs {saving:.2f}x per packet"),
        "never_offloaded_cost": (never, never <= TARGETS["never_offloaded_cost"],
                                 f"never-offloaded costs {never:.2f}x --no-flowtables per packet"),
        "version_cpu_s": (version, version <= TARGETS["version_cpu_s"], f"flowsim --version {version:.3f} s CPU"),
    }
    print()
    for _value, ok, text in checks.values():
        print(f"{text:<60} {verdict(ok)}")
    out["results"] = {name: round(value, 3) for name, (value, _ok, _text) in checks.items()}
    out["meets"] = {name: ok for name, (_value, ok, _text) in checks.items()}
    out["meets_targets"] = all(out["meets"].values())
    last_line(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
