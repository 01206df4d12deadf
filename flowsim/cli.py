"""The ``flowsim`` command.

Each sub-command lives in its own module under :mod:`flowsim.commands` and
exposes ``register(subparsers)``, which adds its parser and sets
``func(args) -> int`` as the default.  This module only discovers them, so
adding a command never touches another command's code.

Errors flowsim raises on purpose (:class:`flowsim.errors.FlowsimError`) are
printed as one line ``flowsim: error: …`` with exit status 2, never a
traceback; so are bad options (argparse's usage error, also status 2).  Any
other exception is a flowsim bug: one line ``flowsim: internal error, please
report: TYPE: MESSAGE`` with exit status 3, and the traceback only under the
global ``--debug``.

Start-up is a fixed cost of every run (issue 16): only the command's own
module is imported, and when :func:`main` is the program (no *argv*: the
console script or ``python -m flowsim``) the cyclic garbage collector is
off while the command's modules load, and what they built is then frozen
(:func:`gc.freeze`): some 80,000 objects (functions, classes, their dicts)
that live until exit, which the collections during start-up and the first
full collection of the run would otherwise walk (~45 ms CPU, a tenth of a
small run).  A caller of ``main(argv)`` keeps its collector as it was.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import pkgutil
import sys
import traceback

from flowsim import __version__
from flowsim.commands._args import plain_parser
from flowsim.errors import FlowsimError

__all__ = ["main", "build_parser", "add_profile_args"]


def add_profile_args(parser: argparse.ArgumentParser, *, multiple: bool = False) -> None:
    """The common ``--profile P`` and ``--set K=V`` options."""
    # imported here, as a command registers: the profiles (and attrs) load while main() has the collector off,
    # and never for `flowsim --version`
    from flowsim.profiles import DEFAULT_PROFILE, PROFILES

    if multiple:
        parser.add_argument("--profile", action="append", metavar="P", default=None,
                            help=f"kernel behaviour profile, given twice ({', '.join(PROFILES)})")
    else:
        parser.add_argument("--profile", metavar="P", default=DEFAULT_PROFILE,
                            help=f"kernel behaviour profile (default {DEFAULT_PROFILE}; one of {', '.join(PROFILES)})")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="K=V",
                        help="override a profile switch, e.g. ipip_rx=0 (the switches and their values: flowsim profiles)")


def command_names() -> list[str]:
    """The sub-command modules of :mod:`flowsim.commands` (found without importing them)."""
    import flowsim.commands as pkg

    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))


def _command_word(argv: list[str]) -> str | None:
    """The sub-command *argv* asks for: its first word that is not an option (global options take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given *argv* naming a command, only that command's module is imported (start-up time)."""
    parser = argparse.ArgumentParser(
        prog="flowsim",
        description="Simulate the Linux netfilter flowtable fast path (with IPIP/IP6IP6 acceleration).",
    )
    parser.add_argument("--version", action="version", version=f"flowsim {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an internal error (a flowsim bug: please report it)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    modules = {name.rstrip("_"): name for name in command_names()}   # import_.py holds `flowsim import`
    word = _command_word(argv) if argv is not None else None
    for name in [modules[word]] if word in modules else modules.values():
        importlib.import_module(f"flowsim.commands.{name}").register(sub)
    plain_parser(parser)  # descriptions are module docstrings: no reStructuredText markup in --help
    return parser


EXIT_ERROR = 2  # bad input: a FlowsimError or a usage error
EXIT_INTERNAL = 3  # a flowsim bug


def main(argv: list[str] | None = None) -> int:
    """Run one command; the exit status is returned (argparse's usage errors and --help too), never raised."""
    program = argv is None  # flowsim is the process, not a function a test or a script calls
    argv = sys.argv[1:] if argv is None else list(argv)
    if _command_word(argv) is None and "--version" in argv and "-h" not in argv and "--help" not in argv:
        print(f"flowsim {__version__}")  # without building every command's parser
        return 0
    if program and gc.isenabled():
        gc.disable()
        parser = build_parser(argv)
        gc.freeze()
        gc.enable()
    else:
        parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed by argparse
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    try:
        return int(args.func(args) or 0)
    except FlowsimError as exc:
        print(f"flowsim: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `flowsim tuple x.pcap | head`
        return 0
    except KeyboardInterrupt:
        return 130  # the shell's status for SIGINT
    except Exception as exc:
        return internal_error(exc, debug=args.debug)


def internal_error(exc: BaseException, *, debug: bool = False) -> int:
    """Report an exception flowsim did not raise on purpose: one line (the traceback first under --debug)."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    message = " ".join(str(exc).split())
    print(f"flowsim: internal error, please report: {type(exc).__name__}: {message}", file=sys.stderr)
    return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
