"""A real-kernel harness call from a slow test that builds a patch: the rules every such test follows.

Without root the debootstrap build root cannot be made: skipped.  A set-up error (no network, no qemu) skips
the test here and fails it in CI, where ``.ci/run`` installed everything; a tool vanishing mid-run fails it.
"""

from __future__ import annotations

import os
import subprocess

import pytest


def patched_boot(call, *args, **kw):
    """``call(*args, **kw)`` (``run_conformance``, ``run_compare_stock`` …) under those rules."""
    from flowsim.conform.harness import ConformSetupError

    if os.geteuid() != 0 and os.environ.get("CI") != "true":
        pytest.skip("--patch builds modules in a debootstrap build root: needs root")
    try:
        return call(*args, **kw)
    except ConformSetupError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"conformance set-up failed in CI: {exc}")
        pytest.skip(f"conformance set-up not possible here: {exc}")
    except subprocess.SubprocessError as exc:  # pragma: no cover - a tool vanished mid-run
        pytest.fail(str(exc))
