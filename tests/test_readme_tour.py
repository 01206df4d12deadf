"""README.md's "A short tour" shows real output of `flowsim graph` and `flowsim run --html`: rerun the
commands and compare, so the pasted text cannot go stale."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from flowsim.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
#: The page's sections (its <h2>), in order, as the tour names them.
SECTIONS = ["Packets", "Topology", "Flowtables", "Traffic", "Fast path and slow path over virtual time", "Explain",
            "Conntrack"]
TOUR = README[README.index("## A short tour"):README.index("\n## ", README.index("## A short tour") + 1)]


def shown(command: str) -> tuple[list[str], str]:
    """(argv, output block) of the ```sh block holding exactly *command* and the fenced block after it."""
    m = re.search(r"```sh\n" + re.escape(command) + r"\n```\n```[a-z]*\n(.*?)```\n", TOUR, re.S)
    assert m, f"README's tour no longer shows {command!r} with its output"
    return shlex.split(command)[1:], m.group(1)


def run(argv: list[str], capsys, monkeypatch, cwd: Path) -> str:
    monkeypatch.chdir(cwd)
    assert main(argv) == 0
    return capsys.readouterr().out


def test_graph_mermaid_output_is_the_one_shown(capsys, monkeypatch):
    """The Mermaid text in the tour is exactly what the command prints."""
    argv, text = shown("flowsim graph topologies/ip6ip6-rx.toml --format mermaid --path router:2001:db8:3::2")
    assert run(argv, capsys, monkeypatch, ROOT) == text


def test_run_html_output_and_page_are_the_ones_described(capsys, monkeypatch, tmp_path):
    """The trimmed stdout in the tour is the start of what `run --html` prints, and the page holds the
    sections the tour names."""
    argv, text = shown("flowsim run topologies/ip6ip6-rx.toml --html report.html")
    lines = text.rstrip("\n").split("\n")
    assert lines[-1] == "…"
    argv = [str(tmp_path / a) if a == "report.html" else a for a in argv]
    out = run(argv, capsys, monkeypatch, ROOT)
    assert out.split("\n")[:len(lines) - 1] == lines[:-1]
    page = (tmp_path / "report.html").read_text()
    sections = re.findall(r"<h2[^>]*>([^<]*)", page)
    assert [h.strip() for h in sections] == SECTIONS
    paragraph = " ".join(TOUR[TOUR.index("`report.html` holds"):].split("\n\n")[0].split())
    for name in SECTIONS:
        assert name in paragraph, name


def test_tour_blocks_are_found():
    """Both commands are in the tour section (not elsewhere only)."""
    assert "flowsim graph topologies/ip6ip6-rx.toml --format mermaid" in TOUR
    assert "--html report.html" in TOUR


def test_openwrt_explain_output_is_the_one_shown(capsys, monkeypatch):
    """The OpenWrt router (firewall4's ruleset) of the tour: explain's answer exactly as shown."""
    argv, text = shown("flowsim explain topologies/openwrt-fw4.toml --traffic tcp-download")
    assert run(argv, capsys, monkeypatch, ROOT) == text


def test_replay_output_is_the_one_shown(capsys, monkeypatch, tmp_path):
    """The tour's replay: its captures written by the first command, the second's stdout starts with the shown
    head and ends with the shown replay table (the part after '…')."""
    (tmp_path / "topologies").symlink_to(ROOT / "topologies")
    m = re.search(r"```sh\n(flowsim run topologies/conform-forward.toml --pcap-dir caps) > /dev/null\n```\n", TOUR)
    assert m, "README's tour no longer writes the captures it replays"
    run(shlex.split(m.group(1))[1:], capsys, monkeypatch, tmp_path)
    argv, text = shown("flowsim run topologies/conform-forward.toml --no-traffic "
                       "--replay r:veth0=caps/r-veth0.pcap --replay r:veth1=caps/r-veth1.pcap")
    head, tail = text.split("…\n")
    out = run(argv, capsys, monkeypatch, tmp_path)
    assert out.startswith(head) and out.endswith(tail) and tail.startswith("replay\n")
