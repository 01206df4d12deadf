"""`flowsim run --html FILE`: one self-contained page per shipped topology, rendered by headless Chromium (issue 18 item 4)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from flowsim.cli import main
from flowsim.sim.html import html_report

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGIES = sorted((ROOT / "topologies").glob("*.toml"))
SECTIONS = ('id="packets"', 'id="topology"', 'id="flowtables"', 'id="traffic"', 'id="plot"', 'id="explain"',
            'id="conntrack"')
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:[a-z]+:)?//|url\(|@import|<link\b|<script\b|<iframe\b""", re.I)


def write_page(capsys, topology: Path, page: Path) -> str:
    rc = main(["run", str(topology), "--html", str(page), "-q"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return page.read_text(encoding="utf-8")


@pytest.mark.parametrize("topology", TOPOLOGIES, ids=lambda p: p.stem)
def test_page_for_every_topology(capsys, tmp_path, topology):
    """Every shipped topology gets a page with every section, an inline plot and nothing external."""
    text = write_page(capsys, topology, tmp_path / "run.html")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    for section in SECTIONS:
        assert section in text, section
    assert "virtual time (s)" in text or "nothing to plot" in text
    assert not EXTERNAL.search(text), EXTERNAL.search(text)
    assert "http://" not in text and "https://" not in text


def test_texts_are_escaped():
    """A name with markup in it is shown as text, never as markup."""
    report = {"topology": "<b>x</b>.toml", "description": "a <script>alert(1)</script> & b", "profile": "p",
              "kernel": "k", "flowtables_enabled": True, "time": 1.0,
              "packets": {"injected": 1, "delivered": 1, "dropped": 0, "in_flight": 0}, "drops": {},
              "flowtables": [], "traffic": [], "conntrack": {}}
    page = html_report(report, [], [(0.5, "fastpath"), (0.7, "slowpath")], (None, 'flowchart "<ns>"'))
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert "&lt;ns&gt;" in page and "<polyline" in page and "not installed" in page


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium is not installed (Debian: chromium)")
def test_page_renders_in_headless_chromium(capsys, tmp_path):
    """The page renders in a real browser with no console error; the screenshot stays in tmp_path."""
    page = tmp_path / "run.html"
    write_page(capsys, ROOT / "topologies" / "ip6ip6-rx.toml", page)
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
         f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1280,2000",
         page.as_uri()],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert shot.is_file() and shot.stat().st_size > 1000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    log = done.stderr
    assert "CONSOLE" not in log and "Uncaught" not in log, log


def test_page_shows_icmp_rate_limits_and_gre(capsys, tmp_path):
    """The ICMP errors a rate limit held back (conform-icmp-limit's router: 15 IPv4, 28 IPv6, 17 by ip_error),
    only where some were; a GRE table's destination without a port."""
    root = Path(__file__).resolve().parent.parent / "topologies"
    text = write_page(capsys, root / "conform-icmp-limit.toml", tmp_path / "limit.html")
    assert "ICMP errors not sent" in text
    assert '<td class="n">15</td><td class="n">28</td><td class="n">17</td>' in text
    gre = write_page(capsys, root / "conform-gre.toml", tmp_path / "gre.html")
    assert "ICMP errors not sent" not in gre and "gre ns1 192.0.2.2 → 198.51.100.2<" in gre
