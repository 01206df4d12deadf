"""The one table of reason ids (flowsim/reasons.py): every id the code uses is a row, every row is used."""

from __future__ import annotations

import ast
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from flowsim.reasons import REASONS, reason

SOURCE = Path(__file__).resolve().parent.parent / "flowsim"
KEBAB = re.compile(r"[a-z0-9]+(-[a-z0-9]+)+")  # hyphenated: a returned string of this shape is a reason id

# Rows no run can take: the kernel exit exists, the simulator never fails an allocation (see the table's comment).
NOT_PRODUCED = {"tunnel-push-failed"}


def _strings(node: ast.expr) -> list[str]:
    """The string constants *node* can evaluate to: a constant, either branch of ``a if c else b``, or an operand
    of ``a or "b"``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    if isinstance(node, ast.BoolOp):
        return [s for value in node.values for s in _strings(value)]
    return []


def _callee(call: ast.Call) -> str | None:
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", None)


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(SOURCE.parent)): ast.parse(p.read_text(), str(p))
            for p in sorted(SOURCE.rglob("*.py")) if p != SOURCE / "reasons.py"}


def _rid_parameters(modules: dict[str, ast.Module]) -> dict[str, set[int]]:
    """Function name → positional index (self excluded) of its ``rid`` parameter, over the whole package; a class
    whose ``__init__`` has one under the class's name too (``raise FragDiscard("frag-overlap", …)``)."""
    out: dict[str, set[int]] = defaultdict(set)
    for tree in modules.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names = [a.arg for a in node.args.posonlyargs + node.args.args]
                if "rid" in names:
                    out[node.name].add(names.index("rid") - (names[:1] in (["self"], ["cls"])))
            elif isinstance(node, ast.ClassDef):
                for init in node.body:
                    if isinstance(init, ast.FunctionDef) and init.name == "__init__":
                        names = [a.arg for a in init.args.posonlyargs + init.args.args]
                        if "rid" in names:
                            out[node.name].add(names.index("rid") - 1)
    return out


def _used_ids() -> dict[str, dict[str, set[str]]]:
    """Where reason ids are used, by kind: {kind: {id: {module:line}}}.

    * ``rid``: the argument given for a ``rid`` parameter (``kernel.drop(skb, "x", …)``, ``_accept(…, "x")``,
      ``ft.record_failure(ct, "x")``, ``reason("x")``, ``skb.drop_reason or "x"``), positionally or by keyword;
    * ``pair``: the first item of a returned ``"x", "detail"`` / ``"x", f"detail"`` pair (the tuple builder's
      ``(rid, detail)``);
    * ``returned``: any hyphenated string returned alone or in a tuple (``return "xfrm-policy-check"``,
      ``return rt, "xfrm-no-state"``, ``return info, "nft-drop"``).
    """
    modules = _modules()
    rid_at = _rid_parameters(modules)
    used: dict[str, dict[str, set[str]]] = {"rid": defaultdict(set), "pair": defaultdict(set),
                                            "returned": defaultdict(set)}
    for name, tree in modules.items():
        for node in ast.walk(tree):
            site = f"{name}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Call) and _callee(node) in rid_at:
                args = [node.args[i] for i in rid_at[_callee(node)] if i < len(node.args)]
                args += [k.value for k in node.keywords if k.arg == "rid"]
                for arg in args:
                    for s in _strings(arg):
                        used["rid"][s].add(site)
            elif isinstance(node, ast.Return) and node.value is not None:
                items = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                if len(items) == 2 and _strings(items[0]) and (_strings(items[1]) or isinstance(items[1], ast.JoinedStr)):
                    for s in _strings(items[0]):
                        used["pair"][s].add(site)
                for item in items:
                    for s in _strings(item):
                        if KEBAB.fullmatch(s):
                            used["returned"][s].add(site)
    return used


USED = _used_ids()


def test_ids_are_stable_kebab_case_with_a_verdict():
    """Ids are kebab-case; each row has a slow-path or drop verdict, a kernel function and a text."""
    for rid, row in REASONS.items():
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rid)
        assert row.verdict in ("accept", "drop") and row.where and row.text


def test_unknown_id_is_refused():
    """A typo cannot become a new reason: reason() raises for an id not in the table."""
    with pytest.raises(KeyError, match="add it to flowsim/reasons.py"):
        reason("no-such-reason")


@pytest.mark.parametrize("kind", sorted(USED))
def test_every_reason_id_the_package_uses_is_in_the_table(kind):
    """Each reason literal anywhere in flowsim (rid arguments, returned ids, the tuple builder's pairs) is a row."""
    found = USED[kind]
    assert found, f"no {kind} reason ids found: the scan no longer sees the code's pattern"
    # "" is a type placeholder (fastpath.py: ``res.reason or ""`` where a missing tuple always has a reason)
    unknown = {rid: sorted(sites) for rid, sites in found.items() if rid not in REASONS and rid}
    assert not unknown


def test_the_tuple_builder_returns_its_reasons_as_pairs():
    """nf_flow_tuple_ip / nf_flow_tuple_ipv6 / nf_flow_skb_encap_protocol exits are (rid, detail) pairs the scan sees."""
    in_tuple = {rid for rid, sites in USED["pair"].items() if any("flowtable/tuple.py" in s for s in sites)}
    assert {"fragment", "ip-options", "ttl-expired", "header-truncated", "l4proto-unsupported"} <= in_tuple


def test_every_row_of_the_table_is_used_somewhere():
    """No dead row: every id but the documented allocation-failure exits is produced by some code path."""
    used = set().union(*USED.values())
    assert set(REASONS) - used == NOT_PRODUCED


def test_explain_advice_is_keyed_by_table_ids():
    """flowsim explain's advice exists only for ids of the table."""
    from flowsim.sim.explain import ADVICE

    assert set(ADVICE) <= set(REASONS)


def test_cli_lists_every_reason(capsys):
    """`flowsim reasons --json` documents every id in one place."""
    from flowsim.cli import main

    assert main(["reasons", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == set(REASONS)
