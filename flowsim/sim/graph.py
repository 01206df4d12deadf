"""Pictures of a topology: Graphviz DOT and Mermaid drawn from its networkx graph.

:func:`topology_drawing` reads a loaded topology (:attr:`Topology.graph`, nodes
``(netns, device)``) into a :class:`Drawing`: one cluster per namespace, one
node per device (name, kind, addresses), and the edges of the graph —
``peer`` (veth pairs and cables, drawn once between the two namespaces),
the upper relations (VLAN/macvlan ``lower``, ``pppoe``, DSA ``conduit``,
bridge ``master``: upper → lower), and tunnels drawn over their underlay
(a dashed edge to the ``dev`` a tunnel is bound to, or else to the device
the namespace routes the tunnel's remote through, and a dashed edge between
the two ends of a tunnel whose ``local``/``remote`` match).  Devices listed
in a flowtable of their namespace's ruleset are marked (bold, filled), and
with a flow the resolved ``dev_fill_forward_path`` stack of
:func:`flowsim.kernel.flowtable.path.resolve_path` is highlighted, entries
numbered as ``flowsim path`` prints them.

:func:`to_dot` and :func:`to_mermaid` render a drawing; every name is quoted
and escaped, so any device or namespace name gives valid output.
"""

from __future__ import annotations

import ipaddress

import attrs

from flowsim.config.network import UPPER_EDGES, Topology
from flowsim.errors import ConfigError
from flowsim.kernel.flowtable.path import DirPath, FlowtableRef, resolve_path, ruleset_flowtables
from flowsim.profiles import Profile

__all__ = ["Drawing", "DrawNode", "DrawEdge", "topology_drawing", "path_for", "to_dot", "to_mermaid"]

Node = tuple[str, str]


@attrs.frozen
class DrawNode:
    node: Node
    label: tuple[str, ...]  # lines: name, kind, addresses
    flowtables: tuple[str, ...] = ()  # flowtables listing this device
    path_index: tuple[int, ...] = ()  # positions in the highlighted path stack


@attrs.frozen
class DrawEdge:
    a: Node
    b: Node
    kind: str  # peer, lower, pppoe, conduit, master, underlay, tunnel, path
    label: str = ""
    dashed: bool = False


@attrs.define
class Drawing:
    title: str
    clusters: dict[str, list[DrawNode]] = attrs.field(factory=dict)
    edges: list[DrawEdge] = attrs.field(factory=list)
    path: DirPath | None = None
    path_netns: str | None = None

    def highlighted(self) -> set[Node]:
        return {n.node for nodes in self.clusters.values() for n in nodes if n.path_index}


def path_for(topo: Topology, netns: str, dst: str, profile: Profile) -> tuple[DirPath, FlowtableRef]:
    """What ``flowsim path --netns NETNS --dst DST`` resolves (the namespace's first flowtable)."""
    ns = topo.netns(netns)
    try:
        daddr = ipaddress.ip_address(dst)
    except ValueError:
        raise ConfigError(f"bad address {dst!r} in --path", value=dst, expected="an IPv4 or IPv6 address") from None
    tables = ruleset_flowtables(ns.nft.text) if ns.nft is not None else []
    ft = tables[0] if tables else FlowtableRef("(none)", frozenset())
    return resolve_path(ns, ns.fib.lookup(daddr), daddr, ft, profile), ft


def _flowtable_devices(topo: Topology) -> dict[Node, list[str]]:
    listed: dict[Node, list[str]] = {}
    for ns in topo.namespaces.values():
        if ns.nft is None:
            continue
        for ft in ruleset_flowtables(ns.nft.text):
            for dev in sorted(ft.devices):
                listed.setdefault((ns.name, dev), []).append(ft.name)
    return listed


def topology_drawing(topo: Topology, title: str = "", path: DirPath | None = None,
                     path_netns: str | None = None) -> Drawing:
    """The drawing of *topo* (see the module docstring); *path* is highlighted in *path_netns*."""
    g = topo.graph
    listed = _flowtable_devices(topo)
    on_path: dict[Node, list[int]] = {}
    if path is not None and path_netns is not None:
        for i, entry in enumerate(path.stack):
            on_path.setdefault((path_netns, entry.dev), []).append(i)
    drawing = Drawing(title or (topo.file or "topology"), path=path, path_netns=path_netns)
    for name, ns in topo.namespaces.items():
        nodes = []
        for dev in ns.devices.values():
            node = (name, dev.name)
            label = (dev.name, dev.kind, *(str(a) for a in dev.addrs))
            nodes.append(DrawNode(node, label, tuple(listed.get(node, ())), tuple(on_path.get(node, ()))))
        drawing.clusters[name] = nodes
    seen_peer: set[frozenset] = set()
    for a, b, kind in g.edges(keys=True):
        if kind == "peer":
            pair = frozenset((a, b))
            if pair in seen_peer:
                continue
            seen_peer.add(pair)
            drawing.edges.append(DrawEdge(a, b, "peer"))
        elif kind in UPPER_EDGES:
            dev = g.nodes[a]["device"]
            label = f"vlan {dev.vlan_id}" if kind == "lower" and hasattr(dev, "vlan_id") else kind
            drawing.edges.append(DrawEdge(a, b, kind, label))
        elif kind == "underlay":
            drawing.edges.append(DrawEdge(a, b, "underlay", "underlay", dashed=True))
    drawing.edges += _tunnel_edges(topo)
    if path is not None and path_netns is not None:
        for e0, e1 in zip(path.stack, path.stack[1:]):
            if e0.dev != e1.dev:
                drawing.edges.append(DrawEdge((path_netns, e0.dev), (path_netns, e1.dev), "path", "path"))
    return drawing


def _tunnel_edges(topo: Topology) -> list[DrawEdge]:
    edges: list[DrawEdge] = []
    tunnels = [d for d in topo.devices() if getattr(d, "remote", None) is not None]
    bound = {a for a, _b, k in topo.graph.edges(keys=True) if k == "underlay"}
    done: set[frozenset] = set()
    for tun in tunnels:
        node = (tun.netns, tun.name)
        if node not in bound:  # drawn over the device the namespace routes the remote through
            route = topo.netns(tun.netns).fib.lookup(tun.remote)
            if not route.error and route.dev is not None and route.dev != tun.name:
                edges.append(DrawEdge(node, (tun.netns, route.dev), "underlay", "underlay", dashed=True))
        for other in tunnels:
            if other is tun or other.kind != tun.kind:
                continue
            if getattr(other, "local", None) == tun.remote and other.remote == getattr(tun, "local", None):
                pair = frozenset((node, (other.netns, other.name)))
                if pair not in done:
                    done.add(pair)
                    edges.append(DrawEdge(node, (other.netns, other.name), "tunnel", tun.kind, dashed=True))
    return edges


# ---------------------------------------------------------------------- DOT

def _q(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _id(node: Node) -> str:
    return _q(f"{node[0]}/{node[1]}")


def _dot_label(lines: tuple[str, ...] | list[str]) -> str:
    return '"' + "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in lines) + '"'


PATH_COLOR = "red"


def to_dot(drawing: Drawing) -> str:
    out = [f"digraph {_q(drawing.title)} {{", "  graph [rankdir=LR, compound=true, fontname=Helvetica, "
           f"label={_q(_caption(drawing))}, labelloc=t];",
           "  node [shape=box, style=rounded, fontname=Helvetica, fontsize=10];",
           "  edge [fontname=Helvetica, fontsize=9, dir=none];"]
    for name, nodes in drawing.clusters.items():
        out.append(f"  subgraph {_q('cluster_' + name)} {{")
        out.append(f"    label={_q('netns ' + name)}; style=rounded; color=gray40;")
        for n in nodes:
            lines = list(n.label)
            style: dict[str, str] = {}
            if n.flowtables:
                lines.append("flowtable " + ", ".join(n.flowtables))
                style.update(style='"rounded,filled,bold"', fillcolor='"lightblue"', penwidth="2")
            if n.path_index:
                lines.append("path #" + ",".join(str(i) for i in n.path_index))
                style.update(color=PATH_COLOR, fontcolor=PATH_COLOR, penwidth="3")
            extra = "".join(f", {k}={v}" for k, v in style.items())
            out.append(f"    {_id(n.node)} [label={_dot_label(lines)}{extra}];")
        out.append("  }")
    for e in drawing.edges:
        attrs_ = []
        if e.label:
            attrs_.append(f"label={_q(e.label)}")
        if e.dashed:
            attrs_.append("style=dashed")
        if e.kind in ("lower", "pppoe", "conduit", "master", "underlay"):
            attrs_.append("dir=forward")
        if e.kind == "path":
            attrs_ += [f"color={PATH_COLOR}", "penwidth=3", "dir=forward", "constraint=false"]
        out.append(f"  {_id(e.a)} -> {_id(e.b)}" + (f" [{', '.join(attrs_)}]" if attrs_ else "") + ";")
    out.append("}")
    return "\n".join(out) + "\n"


def _caption(drawing: Drawing) -> str:
    text = drawing.title
    p = drawing.path
    if p is not None:
        text += f"\npath {drawing.path_netns} -> {p.daddr}: " + (
            " > ".join(f"{e.type.name} {e.dev}" for e in p.stack) or "(empty)")
        if p.error is not None:
            text += f"\nerror: {p.error}"
    return text


# ---------------------------------------------------------------------- Mermaid

def _mq(text: str) -> str:
    """A Mermaid quoted label: double quotes and markup characters as entities."""
    return (text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;"))


def to_mermaid(drawing: Drawing) -> str:
    ids: dict[Node, str] = {}
    out = ["flowchart LR"]
    for i, (name, nodes) in enumerate(drawing.clusters.items()):
        out.append(f'  subgraph ns{i}["netns {_mq(name)}"]')
        for n in nodes:
            nid = ids[n.node] = f"d{len(ids)}"
            lines = [_mq(x) for x in n.label]
            if n.flowtables:
                lines.append("flowtable " + _mq(", ".join(n.flowtables)))
            if n.path_index:
                lines.append("path #" + ",".join(str(i) for i in n.path_index))
            out.append(f'    {nid}["{"<br/>".join(lines)}"]')
        out.append("  end")
    for e in drawing.edges:
        arrow = "==>" if e.kind == "path" else "-.->" if e.dashed else "---" if e.kind == "peer" else "-->"
        label = f"|{_mq(e.label)}|" if e.label else ""
        out.append(f"  {ids[e.a]} {arrow}{label} {ids[e.b]}")
    out.append("  classDef flowtable fill:#add8e6,stroke-width:2px")
    out.append("  classDef path stroke:#f00,stroke-width:3px")
    ft = [ids[n.node] for nodes in drawing.clusters.values() for n in nodes if n.flowtables]
    hl = [ids[n.node] for nodes in drawing.clusters.values() for n in nodes if n.path_index]
    if ft:
        out.append(f"  class {','.join(ft)} flowtable")
    if hl:
        out.append(f"  class {','.join(hl)} path")
    return "\n".join(out) + "\n"
