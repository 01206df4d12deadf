"""The ASCII diagrams at the top of the shipped topologies agree with what the topology builds.

A topology file starts with ``#`` comments; many hold a drawing of the setup (boxes or lines
of ``─ │ ┌ ═`` with namespace names and device names).  The diagram is the run of comment lines
from the one above the first line with a drawing character down to the next empty comment line.
Every word in it must be a namespace, a device of some namespace, a flowtable, or one of the
plain words of :data:`WORDS` (kinds, keywords, English): a renamed device or a typo fails.

Boxed diagrams (the nft_flowtable.sh family: a line of namespace names over a row of
``┌──┐`` boxes) are also checked by column: a device drawn inside a box belongs to the namespace
written above that box.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest

from flowsim.config.topology import Topology, load_topology, load_topology_text

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGIES = sorted((ROOT / "topologies").glob("*.toml"))
DRAWING = re.compile(r"[─│┌┐└┘├┤┬┴┼═]")
SPLIT = re.compile(r"[\s─│┌┐└┘├┤┬┴┼═⇄→←<>{}()\[\],;=|+*\"'`]+")

#: Words a diagram may use that name no namespace or device.
_WORDS = """
a added and as at by carry carries counter default dev devices each filter flag flow flowtable for forward
from handshakes/teardowns in inet into is listed masquerade meta mode mtu no of on one only or path
per peer port ports postrouting prerouting software-only table tagged tagger the to tunnel untagged
via with without
veth vlan ip6ip6 ip6tnl ipip ipip6 ipsec esp gre pppoe dsa bridge tcp udp l4proto daddr oif dnat snat
tun ethernet vlan_filtering conduit user switchdev nat ip mtk encaplimit over underlay not s routed
masq lists lowest bras aftr ipv4 ipv6 ds-lite firewall4
"""
WORDS = frozenset(_WORDS.split())


def diagram(text: str) -> list[tuple[int, str]]:
    """(line number, comment text without the leading ``#``) of the diagram in the leading comments."""
    lines = []
    for no, line in enumerate(text.split("\n"), 1):
        if not line.startswith("#"):
            break
        lines.append((no, line[1:]))
    first = next((i for i, (_, body) in enumerate(lines) if DRAWING.search(body)), None)
    if first is None:
        return []
    start = first - 1 if first > 0 and lines[first - 1][1].strip() else first
    end = next((i for i in range(first, len(lines)) if not lines[i][1].strip()), len(lines))
    return lines[start:end]


def words(body: str) -> list[tuple[int, str]]:
    """(column, word) of the names a diagram line may show: no addresses, numbers or punctuation."""
    found = []
    body = body.replace("..", "  ")  # lan1..lan4
    for m in re.finditer(r"[^\s─│┌┐└┘├┤┬┴┼═⇄→←]+", body):
        for part in SPLIT.split(m.group()):
            word = part.strip(".:/-")
            if not word or not re.match(r"[A-Za-z]", word) or _address(part.strip(".,:;")):
                continue
            found.append((m.start() + m.group().find(part), word))
    return found


def _address(text: str) -> bool:
    try:
        ipaddress.ip_interface(text)
        return True
    except ValueError:
        return ":" in text and all(re.fullmatch(r"[0-9a-fA-F]{0,4}", p) for p in text.split(":"))


def names(topo: Topology, text: str) -> set[str]:
    flowtables = set(re.findall(r"flowtable\s+([A-Za-z_][\w-]*)\s*\{", text))
    return set(topo.namespaces) | {dev for _ns, dev in topo.graph.nodes} | flowtables


def unknown_words(topo: Topology, text: str) -> list[str]:
    known = names(topo, text)
    return [f"line {no}: {word!r}" for no, body in diagram(text) for _col, word in words(body)
            if word not in known and word.lower() not in WORDS and word not in known | {w.lower() for w in known}]


def misplaced_devices(topo: Topology, text: str) -> list[str]:
    """Devices drawn inside the box of a namespace they do not belong to (boxed diagrams only)."""
    lines = diagram(text)
    top = next((i for i, (_, body) in enumerate(lines) if "┌" in body), None)
    if top is None or top == 0:
        return []
    header = words(lines[top - 1][1])
    if not header or any(w not in topo.namespaces for _c, w in header):
        return []
    body = lines[top][1]
    boxes = [(m.start(), m.end()) for m in re.finditer(r"┌[^┐]*┐", body)]
    owner = {}
    for col, ns in header:  # the box the name is written over, or else the nearest one
        owner[min(boxes, key=lambda box: 0 if box[0] <= col < box[1] else min(abs(col - box[0]), abs(col - box[1])))] = ns
    if not boxes or len(owner) != len(header):
        return []
    wrong = []
    for no, line in lines[top + 1:]:
        if "└" in line:
            break
        for col, word in words(line):
            for (lo, hi), ns in owner.items():
                if lo <= col < hi and (ns, word) not in topo.graph.nodes and word in {d for _n, d in topo.graph.nodes}:
                    wrong.append(f"line {no}: {word!r} drawn in {ns}'s box")
    return wrong


def boxed(text: str) -> bool:
    return any("┌" in body for _no, body in diagram(text))


WITH_DIAGRAM = [p for p in TOPOLOGIES if diagram(p.read_text())]


def test_shipped_topologies_have_diagrams():
    """The finder sees the diagrams (most shipped topologies have one), boxes included."""
    assert len(WITH_DIAGRAM) >= 30
    assert boxed((ROOT / "topologies" / "selftest.toml").read_text())


@pytest.mark.parametrize("path", WITH_DIAGRAM, ids=lambda p: p.stem)
def test_diagram_names_exist(path):
    """Every namespace and device name the diagram shows is in the topology; boxed devices sit in
    their own namespace's box."""
    text = path.read_text()
    topo = load_topology(path)
    assert unknown_words(topo, text) == []
    assert misplaced_devices(topo, text) == []


def test_a_wrong_device_name_fails():
    """Renaming one device in the diagram only (veth1 → veth7 in nsr1's box) is caught."""
    text = (ROOT / "topologies" / "selftest.toml").read_text()
    bad = text.replace("veth0        veth1  ├", "veth0        veth7  ├", 1)
    assert bad != text
    topo = load_topology_text(bad)
    assert unknown_words(topo, bad) == ["line 5: 'veth7'"]


def test_a_device_in_the_wrong_box_fails():
    """A device of nsr2 drawn in ns1's box: it exists, but not there."""
    text = (ROOT / "topologies" / "selftest.toml").read_text()
    bad = text.replace("│ eth0       ├", "│ veth1      ├", 1)
    assert bad != text
    assert misplaced_devices(load_topology_text(bad), bad) == ["line 5: 'veth1' drawn in ns1's box"]


def test_a_wrong_namespace_name_fails():
    """A namespace name over a box that the topology does not have."""
    text = (ROOT / "topologies" / "ip6ip6-rx.toml").read_text()
    bad = text.replace("#   client                 router", "#   client                 routr", 1)
    assert bad != text
    assert unknown_words(load_topology_text(bad), bad) == ["line 8: 'routr'"]
