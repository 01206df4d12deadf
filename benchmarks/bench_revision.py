"""Benchmark: a git revision against the working tree, both in one process, their runs interleaved.

What a change did to the speed.  Comparing two checkouts in two processes mixes the change with the
machine's noise (on the shared 2-core machine the same code measures up to 10% apart from one process to
the next); here both versions of flowsim are loaded into one process and their runs alternate ABAB… within
every round, timed in CPU time, best of the rounds with the spread (benchmarks/_bench.py).

The revision's ``flowsim/`` is extracted (``git archive``) into a temporary directory and imported there;
each side runs with its own modules installed in ``sys.modules`` (a function that imports lazily finds its
own tree's module).  The measuring code is this checkout's, the same for both sides:

* ``fastpath``: bench_fastpath's setup (the cover letter's router, *flows* offloaded TCP flows) and its
  frames out of the tunnel, received on eth1 (each a fast-path hit);
* ``run``: ``Simulation.run`` of the cover letter (topologies/ip6ip6-rx.toml) with *scale* times its
  traffic, loaded once per side.

Usage: ``python benchmarks/bench_revision.py [REV] [--rounds N] [--flows N] [--scale N]`` (REV: any
commit-ish, default HEAD).  The last line is one JSON object; ``new / rev`` below 1 means the working tree
is cheaper.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import interleave, last_line  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
PACKAGE = "flowsim"
MAX_FLOWS = 65536 - 20000  # bench_fastpath's connections use client ports from 20000


def resolve(rev: str) -> str:
    """The commit *rev* names in this checkout (``git rev-parse``; an argument list, never shell text)."""
    if rev.startswith("-"):
        raise SystemExit(f"bench_revision: {rev!r} is not a revision (expected a commit-ish such as HEAD~1)")
    res = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"bench_revision: {rev!r} is not a commit of {ROOT} (expected a commit-ish such as HEAD~1)")
    return res.stdout.strip()


def extract(commit: str, into: Path) -> Path:
    """The revision's ``flowsim/`` package, extracted under *into*; returns the directory to import it from."""
    tar = into / "rev.tar"
    with tar.open("wb") as out:
        res = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit, PACKAGE], stdout=out,
                             stderr=subprocess.PIPE, text=True)
    if res.returncode != 0:
        raise SystemExit(f"bench_revision: {commit[:12]} has no {PACKAGE}/ package ({res.stderr.strip()})")
    tree = into / "tree"
    with tarfile.open(tar) as archive:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 on: no member outside *tree*, no link out of it
            archive.extractall(tree, filter="data")
        else:  # git archive of this repository's own commit: relative paths only
            archive.extractall(tree)
    return tree


def _ours(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


class _ActiveTreeOnly(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: a flowsim module comes from the active tree or is not found.  Without it a
    module the revision lacks would be found elsewhere (an editable install's finder maps every flowsim name
    to the working tree), and the revision's side would run the working tree's code."""

    def find_spec(self, name, path, target=None):
        if not _ours(name) or Tree.active is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path if path is not None else [str(Tree.active.path)])
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r} in the {Tree.active.label} tree", name=name)
        return spec


class Tree:
    """One version of flowsim loaded into this process: its modules, in ``sys.modules`` (and its directory first
    on ``sys.path``) while it is the active one."""

    active: Tree | None = None

    def __init__(self, label: str, path: Path) -> None:
        self.label = label
        self.path = path
        self.modules: dict[str, ModuleType] = {}

    def load(self, setup: Callable[[Tree], Callable[[], object]]) -> Callable[[], object]:
        """Import this tree and build a side with *setup* (which runs it once: the lazy imports happen then);
        the side activates this tree before each of its runs."""
        self.activate()
        try:
            fn = setup(self)
        except Exception as exc:  # an older revision without what this checkout's setup calls
            raise SystemExit(f"bench_revision: the {self.label} tree cannot run this checkout's setup "
                             f"({type(exc).__name__}: {exc}); compare revisions closer to the working tree") from None
        self.modules.update((n, m) for n, m in sys.modules.items() if _ours(n))
        for name, mod in sorted(self.modules.items()):
            origin = getattr(mod, "__file__", None)
            if origin is not None and not Path(origin).resolve().is_relative_to(self.path.resolve()):
                raise SystemExit(f"bench_revision: the {self.label} tree's {name} came from {origin}, not from "
                                 f"{self.path}")

        def side() -> object:
            self.activate()
            return fn()
        return side

    def activate(self) -> None:
        """This tree's modules in ``sys.modules``, its directory first on ``sys.path``: an import in its code,
        lazy or not, finds its own modules."""
        if Tree.active is self:
            return
        if Tree.active is not None:
            Tree.active.modules.update((n, m) for n, m in sys.modules.items() if _ours(n))
            sys.path.remove(str(Tree.active.path))
        for name in [n for n in sys.modules if _ours(n)]:
            del sys.modules[name]
        sys.modules.update(self.modules)
        sys.path.insert(0, str(self.path))
        Tree.active = self

    def module(self, name: str) -> ModuleType:
        return importlib.import_module(f"{PACKAGE}.{name}")


def _bench_module(tree: Tree, name: str) -> ModuleType:
    """This checkout's benchmarks/*name*.py imported anew against *tree*'s flowsim."""
    spec = importlib.util.spec_from_file_location(f"_{name}_{tree.label}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fastpath_side(flows: int, frames: list[bytes], hits: dict[str, Callable[[], int]]):
    """The setup of the ``fastpath`` side: bench_fastpath's router with *flows* offloaded flows."""
    def setup(tree: Tree) -> Callable[[], object]:
        bench = _bench_module(tree, "bench_fastpath")
        k, ft = bench.offloaded_router(flows)
        hits[tree.label] = lambda: ft.fastpath
        run = bench.receive_all(k, frames)
        run()  # warm-up: the first packet of each flow builds its transmit plan
        return run
    return setup


def run_side(topology: Path, injected: dict[str, Callable[[], int]]):
    """The setup of the ``run`` side: *topology* loaded by the tree, a fresh Simulation per run."""
    def setup(tree: Tree) -> Callable[[], object]:
        topo = tree.module("config.topology").load_topology(topology)
        simulation = tree.module("sim.simulation").Simulation
        last: list = []

        def run() -> None:
            last[:] = [simulation(topo).run()]
        run()
        injected[tree.label] = lambda: sum(last[0].kernel.ledger.injected.values())
        return run
    return setup


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rev", nargs="?", default="HEAD", help="the revision to compare with the working tree")
    ap.add_argument("--rounds", type=int, default=20, help="rounds (each runs every side of both trees once)")
    ap.add_argument("--flows", type=int, default=10_000, help="fast-path flows (and frames per fastpath run)")
    ap.add_argument("--scale", type=int, default=10, help="the cover letter's traffic times this for the run side")
    args = ap.parse_args(argv)
    for opt in ("rounds", "flows", "scale"):
        if getattr(args, opt) < 1:
            ap.error(f"--{opt} must be at least 1")
    if args.flows > MAX_FLOWS:
        ap.error(f"--flows must be at most {MAX_FLOWS:,} (client ports 20000 up to 65535)")
    commit = resolve(args.rev)
    sys.meta_path.insert(0, _ActiveTreeOnly())
    with tempfile.TemporaryDirectory(prefix="flowsim-rev-") as tmp:
        tmpdir = Path(tmp)
        rev, new = Tree("rev", extract(commit, tmpdir)), Tree("new", ROOT)
        # the frames (scapy) and the scaled topology: built once by this checkout, the same for both sides
        new.activate()
        frames = _bench_module(new, "bench_fastpath").frames(args.flows)
        topology = _bench_module(new, "bench_cli").scaled(ROOT / "topologies" / "ip6ip6-rx.toml", tmpdir, args.scale)
        hits: dict[str, Callable[[], int]] = {}
        injected: dict[str, Callable[[], int]] = {}
        sides: dict[str, Callable[[], object]] = {}
        for tree in (rev, new):
            sides[f"fastpath {tree.label}"] = tree.load(fastpath_side(args.flows, frames, hits))
        for tree in (rev, new):
            sides[f"run {tree.label}"] = tree.load(run_side(topology, injected))
        t = interleave(sides, args.rounds)
        new.activate()

    # the same work on both sides, or the comparison means nothing
    for what, counts in (("fast-path hits", hits), ("packets injected by the run", injected)):
        if counts["rev"]() != counts["new"]():
            raise SystemExit(f"bench_revision: {what}: {counts['rev']()} in rev, {counts['new']()} in new")
    out: dict = {"rev": commit, "rounds": args.rounds,
                 "imported_from": {tree.label: tree.modules[PACKAGE].__file__ for tree in (rev, new)}}
    print(f"rev {commit[:12]} against the working tree, {args.rounds} rounds, sides interleaved in one process\n")
    print(f"{'side':<16}{'rev':>14}{'new':>14}  new / rev CPU   spread rev / new")
    for what, n in (("fastpath", args.flows), ("run", injected["new"]())):
        a, b = t.best(f"{what} rev"), t.best(f"{what} new")
        ratio = b / a
        print(f"{what:<16}{n / a:>10,.0f} p/s{n / b:>10,.0f} p/s  {ratio:>9.3f}        "
              f"{t.spread(f'{what} rev'):.2f} / {t.spread(f'{what} new'):.2f}")
        out[what] = {"packets": n, "rev_per_cpu_s": round(n / a), "new_per_cpu_s": round(n / b),
                     "new_over_rev_cpu": round(ratio, 4),
                     "spread": {"rev": round(t.spread(f"{what} rev"), 2), "new": round(t.spread(f"{what} new"), 2)}}
    out["fastpath"]["hits"] = hits["new"]()
    last_line(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
