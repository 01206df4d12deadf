"""Every ``--json`` output validates against its shipped JSON Schema; a wrong output does not."""

from __future__ import annotations

import copy
import json
import pathlib

import jsonschema
import pytest

from flowsim.cli import main
from flowsim.reasons import REASONS
from flowsim.schemas import NAMES, load, schema_id
from flowsim.schemas import _build

GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"


def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = load(name)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _outputs(path: pathlib.Path) -> list[dict]:
    stdout = json.loads(path.read_text())["stdout"]
    if path.relative_to(GOLDEN).parts[0] == "tuple":
        return [json.loads(line) for line in stdout.splitlines() if line.strip()]
    return [json.loads(stdout)] if stdout.strip() else []


CASES = sorted(p for name in NAMES for p in (GOLDEN / name).rglob("*.json"))


def test_every_name_has_goldens():
    assert {p.relative_to(GOLDEN).parts[0] for p in CASES} == set(NAMES)


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
