"""``flowsim conform``: run topologies on a real Debian kernel in qemu and compare with the simulation.

Boots the kernel once under qemu (TCG, no network card) with every given
topology batched into the guest, runs each topology's own iproute2
commands, sysctls, nft ruleset and traffic (socat), collects conntrack,
nft counters and device statistics, and compares per connection with what
flowsim predicts under the matching profile (linux-6.12 / linux-6.1).  The
host tools, the kernel package and the initramfs are installed/downloaded
when missing and cached in ~/.cache/flowsim/conform.

Every shipped topology can be given: one the guest cannot run (a
flowsim-only device kind, pppoe until the guest runs it, gso_size) is
reported as skipped with its reason; a size too small for a socket payload
is raised, and long traffic is capped (--max-packets), each said in the
report and applied to the simulation too.

Exit status: 0 when every fact agreed (known differences and skipped
topologies included), 1 when something differs, 2 on errors (missing tools, no package mirror, a
scenario the guest could not set up, bad input), 3 on an internal error
(a flowsim bug: ``flowsim --debug conform …`` shows its traceback).
"""

from __future__ import annotations

import argparse
import json

from flowsim.commands._args import writable_file
from flowsim.conform.harness import KERNELS, run_conformance, update_doc
from flowsim.conform.parse import results_text
from flowsim.errors import ConfigError

__all__ = ["register", "run"]


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "conform", help="compare a topology's behaviour on a real kernel (qemu guest) with the simulation",
        description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n")[2])
    p.add_argument("topology", nargs="*", help="topology file(s) (TOML); several run in one boot")
    p.add_argument("--kernel", action="append", choices=list(KERNELS), default=None,
                   help="Debian kernel line to boot (default debian-6.12; repeat for several)")
    p.add_argument("--json", action="store_true", help="print one JSON object (a list with several kernels)")
    p.add_argument("--problems", action="store_true", help="list only the facts that do not agree")
    p.add_argument("--results", metavar="FILE", action="append",
                   help="compare a saved results channel (results.log of an earlier run) instead of booting; "
                        "repeat with several --kernel, one file each, in the same order")
    p.add_argument("--no-install", action="store_true", help="never apt-get install missing host tools")
    p.add_argument("--update-doc", metavar="MD",
                   help="write the results tables into MD between the conform-results markers")
    p.add_argument("--frames", action="store_true",
                   help="frame-exact mode: inject flowsim's own frames one by one at the endpoints' devices, "
                        "capture every device and compare frame by frame, byte by byte, and the flowtable "
                        "verdict of each received frame, with no tolerance (default: socat traffic, totals)")
    p.add_argument("--max-packets", type=_max_packets, metavar="N",
                   help="cap every traffic direction at N packets, in the guest and in the simulation alike "
                        "(shorter boots for long traffic tables; without it a direction longer than 200 "
                        "packets, 50 with --frames, or a paced one lasting over 20 s is capped by default; "
                        "the report lists every cap)")
    p.add_argument("--selftest", action="store_true",
                   help="instead of topologies, run the kernel's own tools/testing/selftests/net/netfilter/"
                        "nft_flowtable.sh (from Debian's linux-source package of exactly that kernel) and list "
                        "each PASS/FAIL line with the shipped topology modelling that scenario")
    p.add_argument("--patch", action="append", default=None, metavar="SERIES",
                   help="boot the kernel with a patch series applied to its modules (a git format-patch file, an "
                        "mbox of several, or a folder of .patch files; repeat for more, applied in order): the "
                        "touched .c files' modules are rebuilt from Debian's source of exactly that kernel in a "
                        "cached build root (root needed); headers and built-in code are refused")
    p.add_argument("--compare-stock", action="store_true",
                   help="with --patch: boot the patched and then the stock kernel with the same scenarios and "
                        "print the facts side by side, those the patch changes first (--set applies to the "
                        "patched side's simulation only)")
    p.add_argument("--snapshot", metavar="DIR", default=None,
                   help="instead of traffic: build each topology in the guest, save it with the script of flowsim "
                        "snapshot --script, bring the snapshot back as DIR/NAME/, import it with the topology's "
                        "traffic as DIR/NAME.toml and compare its flowsim run figures with the topology's "
                        "(exit 1 when a round trip differs)")
    p.add_argument("--profile", metavar="P", default=None,
                   help="simulate under profile P instead of the one modelling the kernel (the report names it)")
    p.add_argument("--set", dest="settings", action="append", default=[], metavar="K=V",
                   help="override a profile switch in the simulation, e.g. what a --patch is believed to change")
    p.set_defaults(func=run)


def _max_packets(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"at least 1 packet, not {n}")
    return n


def _check_results(path: str) -> str:
    """A saved results channel: a readable file, plain or gzip-compressed (as the harness reads it, which finds
    the text this read keeps: a pipe can be read only once, so nothing else may read from it first)."""
    try:
        results_text(path)
    except OSError as exc:
        raise ConfigError(f"--results {path}: cannot read: {exc.strerror}", value=path,
                          expected="a readable file") from None
    except ValueError as exc:  # too large, or broken gzip
        raise ConfigError(f"--results {path}: {exc}", value=path,
                          expected="results.log of an earlier run, plain or gzip-compressed") from None
    return path


def saved_runs(args) -> list[str | None]:
    """Per kernel (``--kernel``, in order), the saved results channel to replay, or None to boot it; a
    ConfigError unless there is one ``--results`` per kernel (or none).  Each file is checked first: a typo must
    not cost a boot."""
    kernels = args.kernel or ["debian-6.12"]
    if args.results is None:
        return [None] * len(kernels)
    if len(args.results) != len(kernels):
        raise ConfigError(f"{len(args.results)} --results for {len(kernels)} kernel(s): each kernel replays its own "
                          "saved run", value=" ".join(args.results),
                          expected="one --results FILE per --kernel, in the same order")
    return [_check_results(path) for path in args.results]


def run_selftests(args) -> int:
    """``--selftest``: the script's result lines per kernel, each paired with its topology."""
    from flowsim.conform.selftest import run_selftest

    if args.topology:
        raise ConfigError("--selftest takes no topology", value=" ".join(args.topology),
                          expected="flowsim conform --selftest [--kernel K]")
    runs = [run_selftest(k, install=not args.no_install, results=saved)
            for k, saved in zip(args.kernel or ["debian-6.12"], saved_runs(args))]
    if args.json:
        data = [{"kernel": {"name": r.kernel, "package": r.package, "version": r.version, "release": r.release},
                 "profile": r.profile, "status": r.status, "seconds": r.seconds, "lines": r.rows()} for r in runs]
        print(json.dumps(data[0] if len(data) == 1 else data, indent=2))
    else:
        for r in runs:
            print(f"kernel {r.release} ({r.package} {r.version}): nft_flowtable.sh exit {r.status}, "
                  f"{r.seconds:.0f} s; flowsim profile {r.profile}")
            for row in r.rows():
                print(f"  {row['verdict']:4}  {row['topology'] or '-':22} {row['message'].strip()}")
    failed = any(r.status != 0 or any(line.verdict == "FAIL" for line in r.lines) for r in runs)
    return 1 if failed else 0


def run_compare_stock(args, kernels: list[str]) -> int:
    """``--patch SERIES --compare-stock``: per kernel, the patched and the stock boot side by side."""
    from flowsim.conform.ab import run_compare_stock as compare_stock

    if not args.patch:
        raise ConfigError("--compare-stock needs --patch SERIES (it compares the patched kernel with the stock one)",
                          expected="flowsim conform TOPOLOGY --kernel K --patch SERIES --compare-stock")
    if args.results is not None or args.update_doc:
        raise ConfigError("--compare-stock boots both kernels; it takes neither --results nor --update-doc",
                          expected="flowsim conform TOPOLOGY --kernel K --patch SERIES --compare-stock")
    runs = [compare_stock(args.topology, k, patches=args.patch, install=not args.no_install, frames=args.frames,
                          max_packets=args.max_packets, profile_name=args.profile, settings=args.settings)
            for k in kernels]
    if args.json:
        data = [r.to_json() for r in runs]
        print(json.dumps(data[0] if len(data) == 1 else data, indent=2, default=str))
    else:
        print("\n".join(r.text(all_facts=not args.problems) for r in runs), end="")
    return max(r.status for r in runs)


def run_snapshot(args, kernels: list[str]) -> int:
    """``--snapshot DIR``: the round trip topology -> guest -> snapshot script -> import, per topology."""
    from flowsim.conform.roundtrip import run_snapshots

    others = [flag for flag, on in (("--frames", args.frames), ("--patch", args.patch), ("--update-doc", args.update_doc),
                                    ("--compare-stock", args.compare_stock), ("--max-packets", args.max_packets),
                                    ("--profile", args.profile), ("--set", args.settings), ("--problems", args.problems))
              if on]
    if len(kernels) > 1:
        others.append("a second --kernel")
    if others:
        raise ConfigError("--snapshot builds the topologies without traffic on one kernel: it does not take "
                          + ", ".join(others),
                          expected="flowsim conform TOPOLOGY... --snapshot DIR [--kernel K] [--results FILE] [--json]")
    result = run_snapshots(args.topology, args.snapshot, kernels[0], install=not args.no_install,
                           results=saved_runs(args)[0])
    if args.json:
        print(json.dumps(result.to_json(), indent=2, default=str))
    else:
        print(result.text(), end="")
    return result.status


def run(args) -> int:
    if args.selftest:
        return run_selftests(args)
    if not args.topology:
        raise ConfigError("no topology given", expected="one or more topology files, or --selftest")
    # the files first: a typo must not cost a boot
    saved = saved_runs(args)
    if args.update_doc:
        writable_file("--update-doc", args.update_doc)
    kernels = args.kernel or ["debian-6.12"]
    if args.snapshot is not None:
        return run_snapshot(args, kernels)
    if args.compare_stock:
        return run_compare_stock(args, kernels)
    results = [run_conformance(args.topology, k, results=replayed, install=not args.no_install,
                               frames=args.frames, max_packets=args.max_packets, patches=args.patch,
                               profile_name=args.profile, settings=args.settings)
               for k, replayed in zip(kernels, saved)]
    if args.json:
        data = [r.to_json() for r in results]
        print(json.dumps(data[0] if len(data) == 1 else data, indent=2, default=str))
    else:
        print("\n".join(r.text(all_facts=not args.problems) for r in results), end="")
    if args.update_doc:
        try:
            update_doc(args.update_doc, results)
        except (OSError, UnicodeError) as exc:  # checked above, but the file may have changed during the boot
            raise ConfigError(f"--update-doc {args.update_doc}: cannot update: {exc}", value=args.update_doc,
                              expected="a UTF-8 Markdown file flowsim can write") from None
    return max(r.status for r in results)
