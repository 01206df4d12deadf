"""``flowsim graph``: DOT that Graphviz accepts, Mermaid with a subgraph per namespace, the path highlighted."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from flowsim.cli import main
from flowsim.config.topology import load_topology

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGIES = sorted((ROOT / "topologies").glob("*.toml"))
DOT = shutil.which("dot")


def _graph(capsys, *argv) -> str:
    assert main(["graph", *map(str, argv)]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("topology", TOPOLOGIES, ids=lambda p: p.stem)
def test_dot_parses_and_has_every_device(topology, capsys):
    text = _graph(capsys, topology)
    topo = load_topology(str(topology))
    for ns in topo.namespaces.values():
        assert f'subgraph "cluster_{ns.name}"' in text
        for dev in ns.devices:
            assert f'"{ns.name}/{dev}" [label=' in text
    if DOT is None:
        pytest.skip("Graphviz's dot is not installed (apt-get install graphviz)")
    done = subprocess.run([DOT, "-Tsvg"], input=text, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "<svg" in done.stdout


@pytest.mark.parametrize("topology", TOPOLOGIES, ids=lambda p: p.stem)
def test_mermaid_has_one_subgraph_per_namespace(topology, capsys):
    text = _graph(capsys, topology, "--format", "mermaid")
    topo = load_topology(str(topology))
    assert text.startswith("flowchart LR\n")
    titles = re.findall(r'^  subgraph ns\d+\["netns ([^"]+)"\]$', text, re.M)
    assert titles == list(topo.namespaces)
    assert text.count("\n  end\n") == len(topo.namespaces)


def _highlighted(dot_text: str) -> set[str]:
    return {m.group(1) for m in re.finditer(r'^    "([^"]+)" \[label=.*color=red', dot_text, re.M)}


def test_path_highlights_what_flowsim_path_reports(capsys):
    topology = ROOT / "topologies" / "ip6ip6-rx.toml"
    main(["path", str(topology), "--netns", "router", "--dst", "2001:db8:3::2", "--json"])
    stack = json.loads(capsys.readouterr().out)["stack"]
    assert stack
    expected = {f"router/{e['dev']}" for e in stack}
    dot_text = _graph(capsys, topology, "--path", "router:2001:db8:3::2")
    assert _highlighted(dot_text) == expected
    assert _highlighted(_graph(capsys, topology)) == set()
    mermaid = _graph(capsys, topology, "--format", "mermaid", "--path", "router:2001:db8:3::2")
    assert re.search(r"^  class [d0-9,]+ path$", mermaid, re.M)


def test_flowtable_devices_are_marked(capsys):
    text = _graph(capsys, ROOT / "topologies" / "ip6ip6-rx.toml")
    assert re.search(r'"router/eth0" \[label="[^"]*flowtable ft", style="rounded,filled,bold"', text)
    assert "flowtable" not in text.split('"client/eth0"')[1].split("\n")[0]


def test_svg_and_output_file(tmp_path, capsys):
    if DOT is None:
        pytest.skip("Graphviz's dot is not installed (apt-get install graphviz)")
    out = tmp_path / "t.svg"
    assert main(["graph", str(ROOT / "topologies" / "ipip.toml"), "--format", "svg", "-o", str(out)]) == 0
    assert out.read_text().lstrip().startswith("<?xml") or "<svg" in out.read_text()


def test_svg_without_dot_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["graph", str(ROOT / "topologies" / "ipip.toml"), "--format", "svg"]) == 2
    assert "graphviz" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--path", "router"], ["--path", "router:not-an-address"],
                                  ["--path", "nope:2001:db8:3::2"], ["--format", "png"]])
def test_bad_path_or_format_is_one_error(argv, capsys):
    assert main(["graph", str(ROOT / "topologies" / "ip6ip6-rx.toml"), *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip()
