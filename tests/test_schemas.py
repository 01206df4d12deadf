"""Every ``--json`` output validates against its shipped JSON Schema; a wrong output does not."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import pathlib

import jsonschema
import pytest

from flowsim.cli import main
from flowsim.reasons import REASONS
from flowsim.schemas import NAMES, load, schema_id
from flowsim.schemas import _build

GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"
ROOT = GOLDEN.parent.parent
TOPO = ROOT / "topologies"
CONFORM_LOG = ROOT / "tests" / "data" / "conform" / "results-debian-6.12.log.gz"
#: outputs with goldens (tests/golden/NAME); the others are run here, in process
GOLDEN_NAMES = ("run", "explain", "path", "tuple", "xfrm", "ovpn")
#: argv of the outputs without goldens: a couple of shipped topologies each, small
LIVE = {
    "trace": [["trace", str(TOPO / "selftest.toml"), "--limit", "3", "--json"],
              ["trace", str(TOPO / "ip6ip6-over-pppoe.toml"), "--limit", "40", "--hex", "--json"],
              ["trace", str(TOPO / "ip6ip6-rx.toml"), "--profile", "linux-7.0", "--limit", "4", "--json"]],
    "compare": [["compare", str(TOPO / "selftest.toml"), "--profile", "linux-6.18", "--profile", "linux-7.1.5",
                 "--duration", "0.2", "--json"],
                ["compare", str(TOPO / "ip6ip6-rx.toml"), "--profile", "linux-7.0", "--profile", "linux-7.1.5",
                 "--headlen", "64", "--duration", "0.2", "--json"]],
    "sweep": [["sweep", str(TOPO / "selftest.toml"), "--grid", "udp_timeout=1,30", "--grid", "traffic.*.packets=5",
               "--workers", "1", "-q", "--json"],
              ["sweep", str(TOPO / "pppoe-over-vlan.toml"), "--grid", "profile=linux-7.0,linux-7.1.5",
               "--set", "duration=0.2", "--workers", "1", "-q", "--json"]],
    "conform": [["conform", str(TOPO / "conform-fin.toml"), "--results", str(CONFORM_LOG), "--json"],
                ["conform", str(TOPO / "conform-nat.toml"), str(TOPO / "conform-vlan.toml"), "--results",
                 str(CONFORM_LOG), "--json"]],
    "profiles": [["profiles", "--json"], ["profiles", "ipip_rx", "--json"]],
}
_live_cache: dict = {}


def _live(name: str, i: int) -> dict:
    if (name, i) not in _live_cache:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main(LIVE[name][i])
        assert rc in (0, 1), (LIVE[name][i], rc)
        _live_cache[name, i] = json.loads(out.getvalue())
    return _live_cache[name, i]


def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = load(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _outputs(path: pathlib.Path) -> list[dict]:
    stdout = json.loads(path.read_text())["stdout"]
    if path.relative_to(GOLDEN).parts[0] == "tuple":
        return [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return [json.loads(stdout)] if stdout.strip() else []


CASES = sorted(p for name in GOLDEN_NAMES for p in (GOLDEN / name).rglob("*.json"))


def test_every_name_has_goldens_or_live_runs():
    assert {p.relative_to(GOLDEN).parts[0] for p in CASES} == set(GOLDEN_NAMES)
    assert set(GOLDEN_NAMES) | set(LIVE) == set(NAMES) and not set(GOLDEN_NAMES) & set(LIVE)


@pytest.mark.parametrize("name, i", [(n, i) for n in LIVE for i in range(len(LIVE[n]))],
                         ids=lambda x: str(x))
def test_live_output_validates(name, i):
    out = _live(name, i)
    for item in out if isinstance(out, list) else [out]:
        assert item["schema"] == schema_id(name)
    errors = sorted(_validator(name).iter_errors(out), key=str)
    assert not errors, errors[0]


def test_schema_copies_match_the_layers_above():
    from flowsim.conform.compare import summarize
    from flowsim.sim.sweep import METRICS

    assert _build.METRICS == METRICS and tuple(summarize([])) == _build.FACT_STATUSES


@pytest.mark.parametrize("path", CASES, ids=lambda p: str(p.relative_to(GOLDEN).with_suffix("")))
def test_golden_output_validates(path):
    name = path.relative_to(GOLDEN).parts[0]
    validator = _validator(name)
    outputs = _outputs(path)
    assert outputs or name == "tuple"
    for out in outputs:
        assert out["schema"] == schema_id(name)
        errors = sorted(validator.iter_errors(out), key=str)
        assert not errors, errors[0]


@pytest.mark.parametrize("name", NAMES)
def test_shipped_schema_is_built_from_the_reason_table(name):
    assert (pathlib.Path(_build.__file__).parent / f"{name}.json").read_text() == _build.text(name)
    assert load(name)["$defs"]["reason"]["enum"] == sorted(REASONS)


def _first(name: str) -> dict:
    if name in LIVE:
        return _live(name, 0)
    for path in CASES:
        if path.relative_to(GOLDEN).parts[0] == name:
            for out in _outputs(path):
                if name != "tuple" or out["result"] == "slowpath":
                    return out
    raise AssertionError(name)


def _run_with_drop() -> dict:
    for path in CASES:
        if path.relative_to(GOLDEN).parts[0] == "run":
            out = _outputs(path)[0]
            if out["drops"] and out["flowtables"]:
                return out
    raise AssertionError("no run golden with drops")


@pytest.mark.parametrize("name", NAMES)
def test_missing_required_field_fails(name):
    out = copy.deepcopy(_first(name))
    del out["schema"]
    assert not _validator(name).is_valid(out)
    out = copy.deepcopy(_first(name))
    out[sorted(k for k in out if k != "schema")[0]] = None if name != "explain" else {}
    del out[sorted(k for k in out if k != "schema")[-1]]
    assert not _validator(name).is_valid(out)


@pytest.mark.parametrize("name", NAMES)
def test_extra_property_fails(name):
    out = copy.deepcopy(_first(name))
    assert _validator(name).is_valid(out)
    out["surprise"] = 1
    assert not _validator(name).is_valid(out)


def test_unknown_reason_id_fails():
    run = _run_with_drop()
    v = _validator("run")
    assert v.is_valid(run)
    bad = copy.deepcopy(run)
    bad["drops"]["no-such-reason"] = 1
    assert not v.is_valid(bad)
    bad = copy.deepcopy(run)
    bad["flowtables"][0]["reasons"] = {"frobnicated": 2}
    assert not v.is_valid(bad)
    t = copy.deepcopy(_first("tuple"))
    assert _validator("tuple").is_valid(t)
    t["reason"] = "not-a-reason"
    assert not _validator("tuple").is_valid(t)


def test_live_outputs_wrong_values_fail():
    trace = copy.deepcopy(_live("trace", 1))
    dropped = [p for p in trace["packets"] if p["state"] == "dropped"]
    assert dropped and _validator("trace").is_valid(trace)
    dropped[0]["reason"] = "no-such-reason"
    assert not _validator("trace").is_valid(trace)
    trace = copy.deepcopy(_live("trace", 0))
    trace["packets"][0]["steps"][0]["details"]["vlan"] = {"id": 10}  # a Python object, not a value
    assert not _validator("trace").is_valid(trace)
    trace["packets"][0]["steps"][0]["details"]["vlan"] = None
    trace["packets"][0]["state"] = "gone"
    assert not _validator("trace").is_valid(trace)
    cmp = copy.deepcopy(_live("compare", 0))
    assert cmp["profile_switches"] and cmp["flowtables"]
    cmp["flowtables"][0]["reasons"]["frobnicated"] = [1, 2]
    assert not _validator("compare").is_valid(cmp)
    cmp = copy.deepcopy(_live("compare", 0))
    cmp["profile_switches"][next(iter(cmp["profile_switches"]))] = "(True, False)"  # str() of a tuple
    assert not _validator("compare").is_valid(cmp)
    sw = copy.deepcopy(_live("sweep", 0))
    sw["rows"][0]["reason.not-a-reason"] = 3
    assert not _validator("sweep").is_valid(sw)
    sw = copy.deepcopy(_live("sweep", 0))
    del sw["rows"][0]["fastpath"]
    assert not _validator("sweep").is_valid(sw)
    conf = copy.deepcopy(_live("conform", 1))
    conf["scenarios"][0]["facts"][0]["status"] = "maybe"
    assert not _validator("conform").is_valid(conf)
    conf = copy.deepcopy(_live("conform", 1))
    assert not _validator("conform").is_valid([conf])  # a list holds several kernels
    assert _validator("conform").is_valid([conf, conf])
    prof = copy.deepcopy(_live("profiles", 0))
    prof["switches"]["no_such_switch"] = prof["switches"].pop("ipip_rx")
    assert not _validator("profiles").is_valid(prof)
    prof = copy.deepcopy(_live("profiles", 1))
    prof["switches"]["ipip_rx"]["values"]["linux-9.9"] = True
    assert not _validator("profiles").is_valid(prof)


def test_wrong_type_and_schema_version_fail():
    run = copy.deepcopy(_run_with_drop())
    run["packets"]["injected"] = "12"
    assert not _validator("run").is_valid(run)
    x = copy.deepcopy(_first("xfrm"))
    x["schema"] = "flowsim.xfrm/2"
    assert not _validator("xfrm").is_valid(x)


def test_schema_command_prints_each_schema(capsys):
    for name in NAMES:
        assert main(["schema", name]) == 0
        assert json.loads(capsys.readouterr().out) == load(name)


def test_schema_command_bad_name_is_one_line(capsys):
    assert main(["schema", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(n in err for n in NAMES)
