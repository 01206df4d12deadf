"""``flowsim conform --patch SERIES --compare-stock``: the stock and the patched kernel, side by side.

Theory of operation
-------------------
The real-kernel counterpart of ``flowsim compare``: the same scenarios are
booted twice — on the kit's patched modules (:mod:`flowsim.conform.patch`)
and on the stock kit — and each side is compared with flowsim as usual
(:func:`flowsim.conform.harness.run_conformance`).  The patched side runs
first, so a series that does not apply or build costs no boot.  ``--profile``
applies to both sides; ``--set`` only to the patched side (it states what the
patch is believed to change), so flowsim has one column per side when a
switch is set.

:func:`pair_rows` pairs the facts of the two results by (scenario, subject,
fact) and sorts them, differences first:

1. ``verdict`` — the patch changed the fact's verdict against flowsim
   (agrees on one kernel, differs on the other) or the fact exists on one
   side only;
2. ``value`` — the verdict is the same but the kernel's values differ by
   more than the fact's tolerance band admits (any difference of an
   ``exact`` fact, e.g. ``offloaded`` yes → no that a ``--set`` predicted);
3. ``noise`` — the values differ within the band (in socat mode real TCP's
   run-to-run variation: pure ACKs, a retransmission);
4. ``same`` — both kernels gave the same value.

:class:`StockComparison` renders the rows as text (:meth:`~StockComparison.text`)
and JSON (:meth:`~StockComparison.to_json`: both results as ``flowsim conform
--json`` prints them, plus the rows); under the text table the notes of the
first rows whose verdict changed (with ``--frames``, the first differing
frame with both hexdumps).  Its status is the conform exit status
of the worse side (2 when a scenario could not run on either kernel, 1 when
the patched kernel differs from flowsim, or the stock one does).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import attrs

from flowsim.conform.compare import Fact, _v
from flowsim.conform.harness import ConformResult, run_conformance
from flowsim.conform.kernel import cache_dir
from flowsim.errors import ConfigError
from flowsim.schemas import schema_id

__all__ = ["ABRow", "StockComparison", "pair_rows", "run_compare_stock", "CHANGES", "MARKS", "beyond_tolerance"]

CHANGES = ("verdict", "value", "noise", "same")
MARKS = {"verdict": "**", "value": "*", "noise": "~", "same": ""}
NOTES_SHOWN = 4   # notes (e.g. --frames hexdumps) of the first rows whose verdict changed, under the table


@attrs.frozen
class ABRow:
    """One fact on both kernels: the kernel values, flowsim's, each side's verdict and what changed."""

    scenario: str
    subject: str
    fact: str
    stock: object
    patched: object
    sim_stock: object
    sim_patched: object
    tolerance: str
    status_stock: str        # the stock side's verdict against flowsim, "-" when the side has no such fact
    status_patched: str
    change: str              # one of CHANGES
    note_stock: str = ""     # each side's note (known difference, --frames: the first differing frame's hexdumps)
    note_patched: str = ""

    def to_json(self) -> dict:
        return attrs.asdict(self)


def _key(f: Fact) -> tuple[str, str, str]:
    return (f.scenario, f.subject, f.fact)


_BAND = re.compile(r"^([+-]?\d+)\.\.([+-]?\d+)")


def beyond_tolerance(a: object, b: object, tolerance: str) -> bool:
    """Whether two kernel values of one fact differ by more than its tolerance band (``LOW..HIGH``) is wide:
    any difference of an ``exact`` or non-numeric fact."""
    m = _BAND.match(tolerance)
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    if not m or not numeric:
        return a != b
    return abs(a - b) > int(m.group(2)) - int(m.group(1))   # type: ignore[operator]


def pair_rows(stock: list[Fact], patched: list[Fact]) -> list[ABRow]:
    """The facts of both sides paired by (scenario, subject, fact), differences first (stable otherwise)."""
    a = {_key(f): f for f in stock}
    b = {_key(f): f for f in patched}
    order = list(dict.fromkeys([*(_key(f) for f in patched), *(_key(f) for f in stock)]))
    rows = []
    for k in order:
        fa, fb = a.get(k), b.get(k)
        if fa is None or fb is None or fa.status != fb.status:
            change = "verdict"
        elif fa.kernel != fb.kernel:
            change = "value" if beyond_tolerance(fa.kernel, fb.kernel, fb.tolerance) else "noise"
        else:
            change = "same"
        ref = fb or fa
        assert ref is not None
        rows.append(ABRow(k[0], k[1], k[2], fa.kernel if fa else None, fb.kernel if fb else None,
                          fa.sim if fa else None, fb.sim if fb else None, ref.tolerance,
                          fa.status if fa else "-", fb.status if fb else "-", change,
                          fa.note if fa else "", fb.note if fb else ""))
    rank = {c: i for i, c in enumerate(CHANGES)}
    return sorted(rows, key=lambda r: rank[r.change])   # sorted() is stable: scenario order within a class


@attrs.define
class StockComparison:
    """The two conformance results of one kernel, stock and patched, and their facts paired."""

    stock: ConformResult
    patched: ConformResult

    @property
    def rows(self) -> list[ABRow]:
        return pair_rows(self.stock.facts, self.patched.facts)

    @property
    def status(self) -> int:
        return max(self.stock.status, self.patched.status)

    def summary(self) -> dict[str, int]:
        out = dict.fromkeys(CHANGES, 0)
        for r in self.rows:
            out[r.change] += 1
        return out

    def _two_sims(self) -> bool:
        return self.stock.profile != self.patched.profile

    def to_json(self) -> dict:
        return {"schema": schema_id("conform"), "compare_stock": {
            "stock": self.stock.kernel_label, "patched": self.patched.kernel_label,
            "summary": self.summary(), "rows": [r.to_json() for r in self.rows]},
            "status": self.status, "stock": self.stock.to_json(), "patched": self.patched.to_json()}

    def text(self, *, all_facts: bool = True) -> str:
        s = self.summary()
        sims = self._two_sims()
        head = (f"stock   {self.stock.kernel_label} ({self.stock.package} {self.stock.version}) "
                f"vs flowsim profile {self.stock.profile}\n"
                f"patched {self.patched.kernel_label} vs flowsim profile {self.patched.profile}\n")
        for name, res in (("stock", self.stock), ("patched", self.patched)):
            if res.timings:
                head += f"timings {name}: " + ", ".join(f"{k} {v:.1f} s" for k, v in res.timings.items()) + "\n"
            head += "".join(f"skipped: {k.name}: {k.reason}\n" for k in res.skipped)
        cols = ("scenario", "subject", "fact", "stock", "patched",
                *(("flowsim stock", "flowsim patched") if sims else ("flowsim",)), "tolerance", "verdicts")
        shown = [r for r in self.rows if all_facts or r.change != "same"]
        table = [cols]
        for r in shown:
            verdicts = (r.status_patched if r.status_stock == r.status_patched
                        else f"{r.status_stock} -> {r.status_patched}")
            mark = MARKS[r.change].ljust(3) if r.change != "same" else ""
            table.append((r.scenario, r.subject, r.fact, _v(r.stock), _v(r.patched),
                           *((_v(r.sim_stock), _v(r.sim_patched)) if sims else (_v(r.sim_patched),)),
                           r.tolerance, mark + verdicts))
        widths = [max(len(row[i]) for row in table) for i in range(len(cols) - 1)]
        body = "".join(("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1]).rstrip() + "\n"
                       for row in table) if shown else ""
        notes = [r for r in shown if r.change == "verdict" and (r.note_patched or r.note_stock)]
        for r in notes[:NOTES_SHOWN]:
            for side, note in (("stock", r.note_stock), ("patched", r.note_patched)):
                if note:
                    body += f"{r.scenario} {r.subject} {r.fact}, {side} kernel:\n" + "".join(
                        f"  {line}\n" for line in note.splitlines())
        if len(notes) > NOTES_SHOWN:
            body += f"({len(notes) - NOTES_SHOWN} more rows with notes: --json has them all)\n"
        tail = (f"{s['verdict']} facts change their verdict with the patch (**), {s['value']} their value beyond "
                f"the tolerance (*), {s['noise']} within it (~), {s['same']} are the same on both kernels\n")
        return head + body + tail


def run_compare_stock(paths: list[str], kernel: str, *, patches: list[str], install: bool = True,
                      frames: bool = False, max_packets: int | None = None, profile_name: str | None = None,
                      settings: list[str] | None = None) -> StockComparison:
    """Boot *kernel* with *patches* and then stock, the same scenarios on both; the results side by side.

    The patched run's logs are kept as ``last-KERNEL-patched`` in the conformance cache, the stock
    run's as ``last-KERNEL`` (as a plain run keeps them).
    """
    if not patches:
        raise ConfigError("--compare-stock compares a patched kernel with the stock one: give --patch SERIES",
                          expected="flowsim conform TOPOLOGY --kernel K --patch SERIES --compare-stock")
    patched = run_conformance(paths, kernel, install=install, frames=frames, max_packets=max_packets,
                              patches=patches, profile_name=profile_name, settings=settings)
    if patched.workdir:
        keep = cache_dir() / f"last-{kernel}-patched"
        _replace(Path(patched.workdir), keep)
        patched.workdir = str(keep)
    stock = run_conformance(paths, kernel, install=install, frames=frames, max_packets=max_packets,
                            profile_name=profile_name)
    return StockComparison(stock, patched)


def _replace(src: Path, dest: Path) -> None:
    if src == dest or not src.exists():
        return
    shutil.rmtree(dest, ignore_errors=True)
    src.rename(dest)
