"""The self-contained HTML page of ``flowsim run --html FILE``.

:func:`html_report` builds one page from a run's report (:func:`flowsim.sim.report.build_report`),
the ``explain`` answers, the topology drawing and the ``(time, kind)`` samples a
:class:`PathRecorder` heard from :attr:`Kernel.path_tap`: the topology picture
(inline SVG through Graphviz's ``dot``, the Mermaid text when ``dot`` is
absent), per flowtable fast/slow/drops with reasons, per traffic direction
sent/delivered/fastpath/slowpath, the answers, the conntrack entries and a
plot of the fast-path and slow-path packets over virtual time (inline SVG).
No external resource and no JavaScript; every text is escaped.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess

__all__ = ["PathRecorder", "html_report", "topology_svg"]


class PathRecorder:
    """The ``Kernel.path_tap`` of a run: ``(virtual time, kind)`` per counted verdict."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, str]] = []

    def __call__(self, now: float, kind: str) -> None:
        self.samples.append((now, kind))


_CSS = """
body{font-family:sans-serif;margin:1.5em;color:#222;max-width:1200px}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.2em .6em;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
th{background:#f0f0f0}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;white-space:pre-wrap}
.note{color:#666;font-style:italic}
.picture svg{max-width:100%;height:auto}
"""


def _e(value) -> str:
    return html.escape("-" if value is None else str(value))


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(f'<td class="n">{_e(c)}</td>' if isinstance(c, (int, float)) and not isinstance(c, bool)
                        else f"<td>{_e(c)}</td>" for c in row)
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _reasons(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "-"


def topology_svg(topo) -> tuple[str | None, str]:
    """(inline SVG markup or None, the Mermaid text): the SVG when Graphviz's dot is installed."""
    from flowsim.sim.graph import to_dot, to_mermaid, topology_drawing

    drawing = topology_drawing(topo)
    mermaid = to_mermaid(drawing)
    exe = shutil.which("dot")
    if exe is None:
        return None, mermaid
    done = subprocess.run([exe, "-Tsvg"], input=to_dot(drawing), capture_output=True, text=True, check=False)
    if done.returncode != 0 or "<svg" not in done.stdout:
        return None, mermaid
    svg = done.stdout[done.stdout.index("<svg"):]
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)  # inline SVG in HTML needs no namespace declarations
    svg = re.sub(r"<!--.*?-->", "", svg, flags=re.S)
    return svg, mermaid


def _plot(samples: list[tuple[float, str]], end: float) -> str:
    """Cumulative fast-path and slow-path packets over virtual time, as inline SVG."""
    if not samples:
        return '<p class="note">No packet met a flowtable hook: nothing to plot.</p>'
    w, h, left, bottom, top, right = 900, 320, 60, 40, 20, 20
    t_end = max(end, max(t for t, _ in samples)) or 1.0
    series: dict[str, list[tuple[float, int]]] = {"fastpath": [(0.0, 0)], "slowpath": [(0.0, 0)]}
    counts = {"fastpath": 0, "slowpath": 0}
    for t, kind in sorted(samples, key=lambda s: s[0]):
        if kind not in counts:
            continue
        counts[kind] += 1
        series[kind].append((t, counts[kind]))
    for kind in series:
        series[kind].append((t_end, counts[kind]))
    y_max = max(counts.values()) or 1

    def xy(t: float, n: int) -> str:
        x = left + (w - left - right) * t / t_end
        y = h - bottom - (h - bottom - top) * n / y_max
        return f"{x:.1f},{y:.1f}"

    def thin(points: list[tuple[float, int]]) -> list[tuple[float, int]]:
        step = max(1, len(points) // 800)
        return points[::step] + ([points[-1]] if (len(points) - 1) % step else [])

    colors = {"fastpath": "#1a7f37", "slowpath": "#cf222e"}
    parts = [f'<svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
             f'aria-label="fast path and slow path packets over virtual time">',
             f'<rect x="{left}" y="{top}" width="{w - left - right}" height="{h - top - bottom}" '
             'fill="#fafafa" stroke="#999"/>']
    for i in range(5):
        n = round(y_max * i / 4)
        t = t_end * i / 4
        xs, ys = xy(0, n).split(",")[1], xy(t, 0).split(",")[0]
        parts.append(f'<text x="{left - 6}" y="{xs}" font-size="11" text-anchor="end">{n}</text>')
        parts.append(f'<text x="{ys}" y="{h - bottom + 16}" font-size="11" text-anchor="middle">{t:.3g}</text>')
    parts.append(f'<text x="{w / 2}" y="{h - 6}" font-size="12" text-anchor="middle">virtual time (s)</text>')
    for i, (kind, pts) in enumerate(series.items()):
        step_pts = []
        prev = 0
        for t, n in thin(pts):
            step_pts.append(xy(t, prev))
            step_pts.append(xy(t, n))
            prev = n
        parts.append(f'<polyline fill="none" stroke="{colors[kind]}" stroke-width="2" '
                     f'points="{" ".join(step_pts)}"/>')
        parts.append(f'<text x="{left + 10}" y="{top + 16 + 16 * i}" font-size="12" fill="{colors[kind]}">'
                     f'{_e(kind)}: {counts[kind]} packets</text>')
    parts.append("</svg>")
    return "".join(parts)


def html_report(report: dict, answers: list, samples: list[tuple[float, str]], picture: tuple[str | None, str]) -> str:
    """The page (see the module docstring)."""
    title = f"flowsim run {report.get('topology') or ''}".strip()
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>", f"<h1>{_e(title)}</h1>"]
    if report.get("description"):
        out.append(f"<p>{_e(report['description'])}</p>")
    pk = report["packets"]
    out.append(f"<p>profile {_e(report['profile'])} (kernel {_e(report['kernel'])}), "
               f"flowtables {'enabled' if report['flowtables_enabled'] else 'disabled'}, "
               f"virtual time {_e(report['time'])} s</p>")
    out.append('<h2 id="packets">Packets</h2>')
    out.append(_table(["injected", "delivered", "dropped", "in flight"],
                      [[pk["injected"], pk["delivered"], pk["dropped"], pk["in_flight"]]]))
    if report["drops"]:
        out.append(_table(["drop reason", "packets"], [[k, v] for k, v in report["drops"].items()]))
    if report.get("icmp_rate_limits"):  # ICMP errors the namespaces' rate limits held back
        kinds = ["ratelimit_global", "ratelimit_host", "ratelimit_host6", "ip_error"]
        out.append(_table(["netns: ICMP errors not sent", *kinds],
                          [[ns, *(v[k] for k in kinds)] for ns, v in report["icmp_rate_limits"].items()]))

    out.append('<h2 id="topology">Topology</h2>')
    svg, mermaid = picture
    if svg is not None:
        out.append(f'<div class="picture">{svg}</div>')
    else:
        out.append('<p class="note">Graphviz\'s dot is not installed: the picture as Mermaid text.</p>')
        out.append(f"<pre>{_e(mermaid)}</pre>")

    out.append('<h2 id="flowtables">Flowtables</h2>')
    if report["flowtables"]:
        out.append(_table(["netns", "flowtable", "devices", "fastpath", "slowpath", "drops", "reasons",
                           "flows created", "flows removed"],
                          [[ft["netns"], ft["name"], " ".join(ft["devices"]), ft["fastpath"], ft["slowpath"],
                            ft["drops"], _reasons(ft["reasons"]), ft["flows_created"], ft["flows_removed"]]
                           for ft in report["flowtables"]]))
    else:
        out.append('<p class="note">No flowtable in this topology.</p>')

    out.append('<h2 id="traffic">Traffic</h2>')
    rows = []
    for tr in report["traffic"]:
        for d, c in tr["directions"].items():
            to = f"[{tr['to']}]" if ":" in tr["to"] else tr["to"]  # IPv6 endpoints as [addr]:port
            to = tr["to"] if tr["proto"] == "gre" else f"{to}:{tr['dport']}"  # GRE has no ports
            rows.append([tr["name"], f"{tr['proto']} {tr['from']} {tr['src']} → {to}", d,
                         c["sent"], c["delivered"], c["dropped"], c["in_flight"], c["fastpath"], c["slowpath"]])
    out.append(_table(["traffic", "what", "direction", "sent", "delivered", "dropped", "in flight",
                       "fastpath", "slowpath"], rows))

    out.append('<h2 id="plot">Fast path and slow path over virtual time</h2>')
    out.append(_plot(samples, report["time"]))

    out.append('<h2 id="explain">Explain</h2>')
    if answers:
        out.extend(f"<pre>{_e(a.text())}</pre>" for a in answers)
    else:
        out.append('<p class="note">No connection met a flowtable: nothing to explain.</p>')

    out.append('<h2 id="conntrack">Conntrack</h2>')
    if any(report["conntrack"].values()):
        rows = [[ns, e["id"], e["proto"], e["state"], " ".join(e["status"]) if isinstance(e["status"], list)
                 else e["status"], e["original"], e["reply"], e["timeout"]]
                for ns, entries in report["conntrack"].items() for e in entries]
        out.append(_table(["netns", "id", "proto", "state", "status", "original", "reply", "timeout (s)"], rows))
    else:
        out.append('<p class="note">No conntrack entry.</p>')
    out.append("</body></html>\n")
    return "\n".join(out)
