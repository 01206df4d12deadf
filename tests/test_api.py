"""The public API of ``flowsim/__init__.py``: every name resolves, lazily."""

from __future__ import annotations

import subprocess
import sys

import flowsim


def test_every_public_name_resolves():
    """Each name of ``flowsim.__all__`` is importable as ``from flowsim import NAME``."""
    for name in flowsim.__all__:
        assert getattr(flowsim, name) is not None, name


def test_public_names_are_the_implementations():
    """The API re-exports the implementations themselves, not wrappers."""
    from flowsim.config.topology import load_topology
    from flowsim.sim.sweep import sweep

    assert flowsim.load_topology is load_topology and flowsim.sweep is sweep


def test_import_flowsim_loads_no_layer():
    """``import flowsim`` (and so ``flowsim --version``) imports none of the packages below it."""
    code = "import sys, flowsim; print(sorted(m for m in sys.modules if m.startswith('flowsim.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_unknown_name_is_an_attribute_error():
    """A name outside the API is an AttributeError naming it."""
    try:
        flowsim.not_an_api  # noqa: B018
    except AttributeError as exc:
        assert "not_an_api" in str(exc)
    else:
        raise AssertionError("flowsim.not_an_api resolved")
