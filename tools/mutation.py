"""Is every profile switch caught by a test?  (``make mutation``)

For each named profile of ``flowsim.profiles.PROFILES`` and each switch of
``SWITCHES``, flip the switch to every other allowed value (booleans negated,
choice switches to each other choice) and run a focused subset of the test
suite with the mutant in place (``tools/mutate_plugin.py``, through the
``FLOWSIM_MUTATE`` environment variable).  A mutant is *caught* when a test
fails; the table names the first failing test.  Exit status 1 if any mutant
is NOT CAUGHT.  Flips that are unreachable in a profile (the switch is read
only behind another switch the profile has off: ``EQUIVALENT``) are listed as
equivalent and not run.

Results are cached in ``.mutation/results.json``: a caught mutant is not run
again (``--fresh`` forgets them); NOT CAUGHT ones are, so adding a test and
re-running only costs the survivors.  ``--snapshot REV`` runs against a clean
export of a commit (``git archive``) instead of the working tree, for when the
working tree is mid-change; ``--overlay PATH`` copies files of the working tree
over that export (new tests).  Mutants are run grouped by switch.

    python tools/mutation.py [-n 2] [--switch S ...] [--profile P ...] [--fresh] [--snapshot REV [--overlay PATH ...]]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = ROOT / ".mutation"
CACHE = CACHE_DIR / "results.json"

# The tests that exercise profile behaviour (test_profiles.py is left out on purpose: it reads the
# profile table itself, so it would "catch" a flip without any behaviour being checked).
SUBSET = [
    "tests/test_switches.py",
    "tests/test_golden.py",
    "tests/test_scenarios.py",
    "tests/test_tuple.py",
    "tests/test_path.py",
    "tests/test_explain.py",
    "tests/test_fastpath.py",
    "tests/test_corpus.py",
    "tests/test_compare.py",
    "tests/test_ip6tnl_resolver_lookup.py",
    "tests/devices",
]


# Flips that cannot change anything in some profiles: the switch is read only behind another switch that the
# profile has off.  (switch → (the profile makes the flip unreachable, why)); each names the only read site.
EQUIVALENT = {
    "ip4_tunnel_ihl_check": (lambda p: not p.ipip_rx,
                             "read only in nf_flow_ip4_tunnel_proto, which runs only with ipip_rx"),
    "ip6_tunnel_hdr_size": (lambda p: not p.ip6ip6_rx,
                            "read only in nf_flow_ip6_tunnel_proto, which runs only with ip6ip6_rx"),
    "ip6_tunnel_exthdr": (lambda p: not p.ip6ip6_rx,
                          "read only in nf_flow_ip6_tunnel_proto, which runs only with ip6ip6_rx"),
    "ip6_tunnel_header_access": (lambda p: not p.ip6ip6_rx,
                                 "read only in nf_flow_ip6_tunnel_proto, which runs only with ip6ip6_rx"),
    "tuple_encap_pppoe_proto": (lambda p: not (p.ipip_rx or p.ip6ip6_rx),
                                "nf_flow_tuple_encap uses the protocol only to fill tunnel fields (ipip_rx/ip6ip6_rx)"),
    "ip6ip6_tx_encap_limit": (lambda p: not p.ip6tnl_fill_forward_path,
                              "only flows through an ip6tnl path (ip6tnl_fill_forward_path) push an IPv6 tunnel"),
    "ip6tnl_requires_encaplimit_none": (lambda p: not p.ip6tnl_fill_forward_path,
                                        "read only in ip6_tnl_fill_forward_path, absent without ip6tnl_fill_forward_path"),
    "tunnel_push_dst": (lambda p: not (p.ipip_fill_forward_path or p.ip6tnl_fill_forward_path),
                        "tunnel push needs a DEV_PATH_TUN entry, which only the tunnel resolvers create"),
    "ip6tnl_resolver_lookup": (lambda p: not p.ip6tnl_fill_forward_path or p.tunnel_route == "resolver",
                               "read only in ip6_tnl_fill_forward_path (absent without ip6tnl_fill_forward_path), "
                               "whose lookup is the tunnel's flow anyway under tunnel_route=resolver"),
}


def equivalent(profile_name: str, switch: str) -> str | None:
    """Why flipping *switch* in the named profile cannot change behaviour, or None."""
    from flowsim.profiles import PROFILES

    gate = EQUIVALENT.get(switch)
    return gate[1] if gate and gate[0](PROFILES[profile_name]) else None


def mutants(profiles: list[str] | None = None, switches: list[str] | None = None) -> list[tuple[str, str, str]]:
    """(profile, switch, mutated value as text), grouped by switch."""
    import attrs

    from flowsim.profiles import PROFILES, SWITCHES, Profile

    fields = attrs.fields_dict(Profile)
    out: list[tuple[str, str, str]] = []
    for switch in SWITCHES:
        if switches and switch not in switches:
            continue
        for name, profile in PROFILES.items():
            if profiles and name not in profiles:
                continue
            value = getattr(profile, switch)
            if isinstance(value, bool):
                others = ["false" if value else "true"]
            else:
                others = [c for c in fields[switch].metadata["choices"] if c != value]
            out.extend((name, switch, o) for o in others)
    return out


def key(profile: str, switch: str, value: str) -> str:
    return f"{profile}:{switch}={value}"


def run_subset(tree: Path, workers: int, spec: str | None) -> tuple[bool, str, float]:
    """Run the subset in *tree* with mutant *spec*: (passed, first failing test or '', seconds).

    Anything but "all passed" or "some test failed" (a usage error, a crash) raises RuntimeError.
    """
    env = dict(os.environ)
    env.pop("FLOWSIM_MUTATE", None)
    if spec:
        env["FLOWSIM_MUTATE"] = spec
    env["PYTHONPATH"] = str(tree)  # the tree's flowsim, not the installed one
    paths = [p for p in SUBSET if (tree / p).exists()]
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-rf", "-p", "no:cacheprovider", "-p", "tools.mutate_plugin",
           "-o", "addopts=", "-n", str(workers), *paths]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if proc.returncode == 0:
        return True, "", seconds
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)
    if proc.returncode not in (1, 2) or not failed:  # 2: xdist's -x interrupts the session
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"{spec or 'baseline'}: pytest exit {proc.returncode}:\n{tail}")
    return False, failed[0], seconds


def snapshot(rev: str) -> Path:
    """A clean export of *rev* under .mutation/ (re-used if it exists)."""
    commit = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    tree = CACHE_DIR / f"tree-{commit[:12]}"
    if not tree.exists():
        with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
            archive = Path(tmp) / "tree.tar"
            subprocess.run(["git", "archive", "-o", str(archive), commit], cwd=ROOT, check=True)
            with tarfile.open(archive) as tar:
                tar.extractall(Path(tmp) / "tree", filter="data")
            (Path(tmp) / "tree").rename(tree)
    return tree


def load_cache() -> dict:
    try:
        return json.loads(CACHE.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def save_cache(cache: dict) -> None:
    tmp = CACHE.with_suffix(".tmp")
    tmp.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")
    tmp.replace(CACHE)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--workers", type=int, default=2, help="pytest-xdist workers per run (default 2)")
    ap.add_argument("--profile", action="append", help="only this profile (repeatable)")
    ap.add_argument("--switch", action="append", help="only this switch (repeatable)")
    ap.add_argument("--fresh", action="store_true", help="forget cached results")
    ap.add_argument("--snapshot", metavar="REV", help="run against a clean export of commit REV")
    ap.add_argument("--overlay", action="append", default=[], metavar="PATH",
                    help="with --snapshot: copy PATH from the working tree over the export (repeatable)")
    ap.add_argument("--skip-baseline", action="store_true", help="do not first check that the unmutated subset passes")
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    todo = mutants(args.profile, args.switch)
    if args.list:
        for m in todo:
            print(key(*m))
        return 0
    CACHE_DIR.mkdir(exist_ok=True)
    tree = snapshot(args.snapshot) if args.snapshot else ROOT
    if args.snapshot:
        for path in ["tools", *args.overlay]:  # this tool's plugin, even if uncommitted, and what was asked for
            if (ROOT / path).is_dir():
                shutil.copytree(ROOT / path, tree / path, dirs_exist_ok=True)
            else:
                shutil.copy2(ROOT / path, tree / path)
    cache = {} if args.fresh else load_cache()

    ok, first, seconds = (True, "", 0.0) if args.skip_baseline else run_subset(tree, args.workers, None)
    if not ok:
        print(f"the unmutated subset fails ({first}); fix that first", file=sys.stderr)
        return 2
    print(f"baseline: subset passes in {seconds:.0f} s ({tree})", file=sys.stderr)

    rows = []
    for profile, switch, value in todo:
        k = key(profile, switch, value)
        why = equivalent(profile, switch)
        if why:
            rows.append((profile, switch, value, f"equivalent: {why}"))
            continue
        hit = cache.get(k)
        if not (hit and hit["caught"]):
            ok, first, seconds = run_subset(tree, args.workers, k)
            hit = {"caught": not ok, "by": first, "seconds": round(seconds, 1)}
            cache[k] = hit
            save_cache(cache)
            print(f"{k}: {'caught by ' + first if hit['caught'] else 'NOT CAUGHT'} ({seconds:.0f} s)",
                  file=sys.stderr, flush=True)
        rows.append((profile, switch, value, hit["by"] if hit["caught"] else "NOT CAUGHT"))

    widths = [max(len(r[i]) for r in [("profile", "switch", "value", "caught")] + rows) for i in range(3)]
    print(f"{'profile':{widths[0]}}  {'switch':{widths[1]}}  {'value':{widths[2]}}  caught")
    for r in rows:
        print(f"{r[0]:{widths[0]}}  {r[1]:{widths[1]}}  {r[2]:{widths[2]}}  {r[3]}")
    survivors = sum(r[3] == "NOT CAUGHT" for r in rows)
    equivalents = sum(r[3].startswith("equivalent") for r in rows)
    print(f"{len(rows)} mutants: {len(rows) - survivors - equivalents} caught, {equivalents} equivalent, "
          f"{survivors} not caught")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
