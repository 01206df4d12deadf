"""A pytest plugin that flips one profile switch for a whole session (``make mutation``).

``FLOWSIM_MUTATE="linux-7.0:ipip_rx=false"`` replaces ``PROFILES["linux-7.0"]`` by a
copy whose ``ipip_rx`` is False, under the same name, so that everything that asks for
that profile (``--profile linux-7.0``, ``get_profile("linux-7.0")``, and the default
profile when it is the one mutated) gets the mutant.  It runs at ``pytest_configure``,
before any test module is imported, in the controller and in every xdist worker (each
worker runs ``pytest_configure`` with the same ``-p tools.mutate_plugin`` and environment).

It also deselects the golden cases of the other profiles (each golden case names its
``--profile``, so they cannot see the mutant; the xfrm and ovpn cases run the default
profile) and moves the tests most likely to catch the flip to the front:
tests/test_switches.py, then the golden cases, then everything else, so that ``-x`` stops
early.  Without the variable the plugin does nothing.
"""

from __future__ import annotations

import os

import pytest

ENV = "FLOWSIM_MUTATE"


def parse(spec: str) -> tuple[str, str, str]:
    """``PROFILE:SWITCH=VALUE`` → (profile, switch, value)."""
    profile, _, rest = spec.partition(":")
    switch, sep, value = rest.partition("=")
    if not profile or not switch or not sep:
        raise pytest.UsageError(f"{ENV}={spec!r}: expected PROFILE:SWITCH=VALUE")
    return profile, switch, value


def mutate(spec: str) -> None:
    """Replace the named profile, in place in ``flowsim.profiles.PROFILES``, by its mutant."""
    import attrs

    from flowsim import profiles

    name, switch, raw = parse(spec)
    original = profiles.get_profile(name)
    value = profiles._coerce(attrs.fields_dict(profiles.Profile)[switch], raw)
    if switch not in profiles.SWITCHES:
        raise pytest.UsageError(f"{ENV}: {switch!r} is not a profile switch")
    if getattr(original, switch) == value:
        raise pytest.UsageError(f"{ENV}: {name} already has {switch}={raw}: not a mutation")
    profiles.PROFILES[name] = attrs.evolve(original, **{switch: value})  # same name: outputs differ only by behaviour


def pytest_configure(config: pytest.Config) -> None:
    spec = os.environ.get(ENV)
    if spec:
        mutate(spec)


def pytest_report_header(config: pytest.Config) -> str | None:
    spec = os.environ.get(ENV)
    return f"flowsim mutation: {spec}" if spec else None


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    from flowsim.profiles import DEFAULT_PROFILE

    profile = parse(spec)[0]

    def golden_sees_mutant(nodeid: str) -> bool:
        if nodeid.endswith(f"/{profile}]"):
            return True
        case = nodeid.partition("[")[2]
        return profile == DEFAULT_PROFILE and case.startswith(("xfrm/", "ovpn/"))

    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        golden_case = "test_golden.py::test_golden[" in item.nodeid
        (drop if golden_case and not golden_sees_mutant(item.nodeid) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)

    def rank(item: pytest.Item) -> int:
        return 0 if "test_switches" in item.nodeid else 1 if "test_golden" in item.nodeid else 2

    items[:] = sorted(keep, key=rank)  # stable: the order inside each group is kept
