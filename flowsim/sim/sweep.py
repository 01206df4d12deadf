"""Sweeps: one topology, run once per point of a grid of settings, in parallel.

Theory of operation
-------------------
A *grid* maps keys to lists of values; its *points* are their cartesian
product, the first key varying slowest.  :func:`sweep` runs the topology
once per point and returns one row per run, in point order: a pandas
DataFrame whose columns are the grid keys, then :data:`METRICS`, then one
``reason.ID`` column per flowtable slow-path reason and one ``drop.ID``
column per drop reason that any run met (0 where a run did not).

Keys (:func:`resolve_key`):

``profile``
    a named kernel profile, the base the switches below are applied to;
``SWITCH``
    any :class:`~flowsim.profiles.Profile` switch, with the values ``--set``
    accepts (``ip6_tunnel_header_access=pull``, ``ipip_rx=0``);
``tcp_timeout``, ``udp_timeout``
    seconds: the sysctls ``net.netfilter.nf_flowtable_tcp_timeout`` /
    ``nf_flowtable_udp_timeout`` of every namespace (the flow timeout,
    30 s by default; ``flow_offload_get_timeout``);
``ct_udp_timeout``, ``ct_udp_timeout_stream``, ``ct_tcp_timeout_established`` …
    seconds: conntrack's ``net.netfilter.nf_conntrack_*`` timeout of every
    namespace (``CtTimeouts.from_sysctls``; what an entry has left when its
    flow ends, ``flow_offload_fixup_ct``);
``traffic.NAME.FIELD``
    a field of the traffic table NAME, or of every table with ``*``:
    :data:`TRAFFIC_FIELDS` (``packets``, ``rate``, ``flows`` …); a named
    table wins over ``*``;
``duration``, ``headlen``, ``flowtables``
    the run's virtual duration (``none``: until the traffic is done), the
    linear bytes of each received frame (``none``: all), and the flowtable
    hooks on or off.

Every key and value is checked and converted in the caller's process
before any run starts, so a bad one is a single
:class:`~flowsim.errors.ConfigError` naming the key and what it expected.
Each point becomes a :class:`SweepTask` holding the topology's *text*
(workers of a remote Dask cluster need not share a file system) and the
point's settings; :func:`run_point` builds the simulation from it, runs
it and measures it.  A process loads a topology text once and every point
it runs instantiates that description (its sysctls set on the point's own
copy), so reading the file is not repeated per point.  ``fixed`` settings apply to every point and are not
columns; a grid key overrides the same fixed key.

Execution: by default a local :class:`~concurrent.futures.ProcessPoolExecutor`
(``workers`` processes, default one per CPU; in this process when
``workers=1`` or there is a single point).  Its processes start from a
fork server, not by forking the caller, which may run threads (Jupyter,
Dask, tqdm); so, as with ``spawn``, a script that calls :func:`sweep` at
import time needs the usual ``if __name__ == "__main__":`` guard.  Any ``executor`` with
``submit(fn, arg)`` returning futures with ``result()`` works instead — a
``concurrent.futures`` executor or a ``dask.distributed.Client``.  Runs are
deterministic, so every executor gives the same table, bit for bit.

Measures (:data:`METRICS`, all summed over the topology's flowtables):
``injected`` / ``delivered`` / ``dropped`` / ``in_flight`` packets (they
add up); ``fastpath`` / ``slowpath`` verdicts of the flowtable hooks and
``hit_ratio`` = fastpath / (fastpath + slowpath) (NaN when no packet met a
hook); ``flows_created`` and ``flow_add_failures`` (``flow add`` refusals);
``max_flows`` / ``mean_flows``, the flow-table size; the hooks' header
access cost ``skb_copies``, ``skb_reallocs``, ``skb_bytes_copied``,
``skb_pull_bugs`` and ``kernel_bugs``; ``time``, the virtual end.

The flow-table size is exact, not sampled: flows enter the table only in
``flow_offload_add`` and leave it only when the GC frees them, and every
flowtable records both in its history, so :func:`flow_table_size` replays
them into a step function (``max_flows`` is its peak, ``mean_flows`` its
time average over the run).

    >>> df = sweep("topologies/ip6ip6-rx.toml",                  # doctest: +SKIP
    ...            {"profile": ["linux-7.0", "linux-7.1.5"], "traffic.*.packets": [10, 100]})
    >>> df[["profile", "traffic.*.packets", "fastpath", "hit_ratio"]]  # doctest: +SKIP

The module is callable: ``flowsim.sim.sweep(...)`` is :func:`sweep`.
"""

from __future__ import annotations

import functools
import itertools
import math
import multiprocessing
import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import attrs

from flowsim.config.limits import read_bounded
from flowsim.config.topology import Topology, load_topology_text
from flowsim.errors import ConfigError, FlowsimError, ProfileError
from flowsim.kernel.conntrack import CT_TIMEOUT_SYSCTLS
from flowsim.kernel.flowtable.core import FLOW_TIMEOUT_SYSCTLS
from flowsim.kernel.headers import IPPROTO_TCP, IPPROTO_UDP
from flowsim.profiles import DEFAULT_PROFILE, SWITCHES, get_profile
from flowsim.sim.progress import count_bar
from flowsim.sim.report import build_report
from flowsim.sim.simulation import Simulation
from flowsim.sim.traffic import TrafficSpec

__all__ = [
    "sweep", "parse_grid", "plan", "run_point", "measure", "point_simulation", "flow_table_size", "resolve_key",
    "SweepTask", "SweepPlan", "KeySpec", "Setting", "SweepError",
    "METRICS", "RUN_KEYS", "TIMEOUT_KEYS", "TRAFFIC_FIELDS",
]

#: per-run measures, in column order (after the grid keys)
METRICS = ("injected", "delivered", "dropped", "in_flight", "fastpath", "slowpath", "hit_ratio",
           "flows_created", "flow_add_failures", "max_flows", "mean_flows",
           "skb_copies", "skb_reallocs", "skb_bytes_copied", "skb_pull_bugs", "kernel_bugs", "time")
_SKB_COST = ("copies", "reallocs", "bytes_copied", "pull_bugs")  # Flowtable.report()["skb_cost"] fields


class SweepError(FlowsimError, RuntimeError):
    """A run of a sweep failed; the message names the topology and the point."""


class _Bad(Exception):
    """A value a converter refuses; ``args[0]`` says what it expected."""


# ----------------------------------------------------------------- value converters

def _none(raw) -> bool:
    return raw is None or (isinstance(raw, str) and raw.strip().lower() == "none")


def _number(lo: float, hi: float | None = None, *, integer: bool = False, none: bool = False) -> Callable:
    """A converter to a finite int (or float) in [lo, hi]; ``none`` also allows None / "none"."""
    what = ("an integer" if integer else "a number") + (f" {lo}..{hi}" if hi is not None else f" >= {lo}")
    what += " or none" if none else ""

    def convert(raw):
        if none and _none(raw):
            return None
        if isinstance(raw, bool):
            raise _Bad(what)
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise _Bad(what) from None
        if not math.isfinite(value) or (integer and not value.is_integer()):
            raise _Bad(what)
        if value < lo or (hi is not None and value > hi):
            raise _Bad(what)
        return int(value) if integer else value

    return convert


_TRUE = {"1", "true", "yes", "on", "y"}
_FALSE = {"0", "false", "no", "off", "n"}


def _boolean(*, none: bool = False) -> Callable:
    what = "a boolean (1/0, true/false, on/off)" + (" or none" if none else "")

    def convert(raw):
        if none and _none(raw):
            return None
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise _Bad(what)

    return convert


def _choice(*choices) -> Callable:
    what = "one of " + ", ".join("none" if c is None else c for c in choices)

    def convert(raw):
        value = None if _none(raw) else str(raw).strip()
        if value not in choices:
            raise _Bad(what)
        return value

    return convert


def _profile_name(raw) -> str:
    try:
        return get_profile(str(raw).strip()).name
    except ProfileError as exc:
        raise _Bad(exc.expected) from None


def _switch(name: str) -> Callable:
    def convert(raw):
        try:
            return getattr(get_profile(DEFAULT_PROFILE).derive(**{name: raw}), name)
        except ProfileError as exc:
            raise _Bad(exc.expected) from None

    return convert


# ----------------------------------------------------------------- the keys

#: run parameters: key -> converter
RUN_KEYS: dict[str, Callable] = {
    "duration": _number(0, none=True),
    "headlen": _number(14, 65535, integer=True, none=True),
    "flowtables": _boolean(),
}

#: timeout keys -> the sysctl they set in every namespace: the flowtable's, and conntrack's
TIMEOUT_KEYS: dict[str, str] = {
    "tcp_timeout": FLOW_TIMEOUT_SYSCTLS[IPPROTO_TCP],
    "udp_timeout": FLOW_TIMEOUT_SYSCTLS[IPPROTO_UDP],
    **{"ct_" + key.removeprefix("net.netfilter.nf_conntrack_"): key for key in CT_TIMEOUT_SYSCTLS},
}

#: ``traffic.NAME.FIELD``: the TrafficSpec fields a sweep may vary -> converter
TRAFFIC_FIELDS: dict[str, Callable] = {
    "packets": _number(1, 10**9, integer=True),
    "size": _number(1, 65535, integer=True),
    "reply_packets": _number(0, 10**9, integer=True),
    "reply_size": _number(1, 65535, integer=True, none=True),
    "rate": _number(0),
    "start": _number(0),
    "flows": _number(1, 65535, integer=True),
    "sport": _number(1, 65535, integer=True),
    "dport": _number(1, 65535, integer=True),
    "ttl": _number(1, 255, integer=True),
    "handshake": _boolean(),
    "close": _choice("fin", "rst", None),
    "df": _boolean(none=True),
}
_TCP_ONLY = frozenset({"handshake", "close"})
_NOT_GRE = frozenset({"sport", "dport", "flows"})  # GRE has no ports, and one connection per table


def _applies(field: str, proto: str) -> bool:
    """Whether a traffic table of *proto* has the sweep's *field* (``traffic.*.F`` skips the others)."""
    return not (field in _TCP_ONLY and proto != "tcp" or field in _NOT_GRE and proto == "gre")


@attrs.frozen
class KeySpec:
    """What a grid key sets: its kind, the target (switch, sysctl, traffic table and field) and its converter."""

    key: str
    kind: str  # profile | switch | sysctl | traffic | run
    convert: Callable = attrs.field(eq=False, repr=False)
    target: tuple = ()

    def setting(self, raw) -> Setting:
        """The checked :class:`Setting` of *raw*, or a ConfigError naming the key and what it expected."""
        try:
            value = self.convert(raw)
        except _Bad as exc:
            raise ConfigError(f"bad value {raw!r} for grid key {self.key!r}", value=raw,
                              expected=exc.args[0]) from None
        return Setting(self.key, self.kind, self.target, value)


@attrs.frozen
class Setting:
    """One checked setting of a run: what it sets (kind, target) and its value (plain data: picklable)."""

    key: str
    kind: str
    target: tuple
    value: Any


def _unknown_key(key: str, traffic: Mapping[str, str]) -> ConfigError:
    """The error for a key :func:`resolve_key` does not know, as precise as the key allows."""
    parts = key.split(".")
    if parts[0] == "traffic":
        if len(parts) != 3:
            return ConfigError(f"bad grid key {key!r}", value=key, expected="traffic.NAME.FIELD")
        if parts[1] not in traffic and parts[1] != "*":
            return ConfigError(f"grid key {key!r}: no traffic table {parts[1]!r}", value=key,
                               expected="one of " + ", ".join([*traffic, "*"]))
        return ConfigError(f"grid key {key!r}: no traffic field {parts[2]!r}", value=key,
                           expected="one of " + ", ".join(TRAFFIC_FIELDS))
    return ConfigError(
        f"unknown grid key {key!r}", value=key,
        expected="profile, " + ", ".join(RUN_KEYS) + ", " + ", ".join(TIMEOUT_KEYS)
        + ", traffic.NAME.FIELD or a profile switch (" + ", ".join(SWITCHES) + ")")


def resolve_key(key: str, traffic: Mapping[str, str]) -> KeySpec:
    """The :class:`KeySpec` of *key*; *traffic* maps the topology's table names to their protocol."""
    key = str(key).strip()
    if key == "profile":
        return KeySpec(key, "profile", _profile_name)
    if key in SWITCHES:
        return KeySpec(key, "switch", _switch(key), (key,))
    if key in TIMEOUT_KEYS:
        return KeySpec(key, "sysctl", _number(0), (TIMEOUT_KEYS[key],))
    if key in RUN_KEYS:
        return KeySpec(key, "run", RUN_KEYS[key], (key,))
    parts = key.split(".")
    if len(parts) == 3 and parts[0] == "traffic" and (parts[1] in traffic or parts[1] == "*") \
            and parts[2] in TRAFFIC_FIELDS:
        name, field = parts[1], parts[2]
        if name != "*" and not _applies(field, traffic[name]):
            raise ConfigError(f"grid key {key!r}: traffic {name!r} is {traffic[name]}", value=key,
                              expected=f"{field} on a {'tcp' if field in _TCP_ONLY else 'tcp or udp'} traffic table")
        return KeySpec(key, "traffic", TRAFFIC_FIELDS[field], (name, field))
    raise _unknown_key(key, traffic)


# ----------------------------------------------------------------- grids

def parse_grid(items: Iterable[str]) -> dict[str, list[str]]:
    """``["K=V1,V2", …]`` (the ``--grid`` options) as ``{K: [V1, V2]}``; values stay text."""
    grid: dict[str, list[str]] = {}
    for item in items:
        key, sep, values = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"bad grid item {item!r}", value=item, expected="KEY=VALUE1,VALUE2,…")
        if key in grid:
            raise ConfigError(f"grid key {key!r} given twice", value=key,
                              expected="each key once, values joined by commas")
        parts = [v.strip() for v in values.split(",")]
        if not values.strip() or any(not v for v in parts):
            raise ConfigError(f"empty value in grid item {item!r}", value=item, expected=f"{key}=VALUE1,VALUE2,…")
        grid[key] = parts
    return grid


def _as_grid(grid) -> dict[str, list]:
    """A mapping of key -> values (a scalar is one value), or CLI items ``"K=V1,V2"``."""
    if isinstance(grid, str):
        return parse_grid([grid])
    if not isinstance(grid, Mapping):
        return parse_grid(grid)
    out = {}
    for key, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            values = [values]
        values = list(values)
        if not values:
            raise ConfigError(f"grid key {key!r} has no values", value=key, expected="at least one value")
        out[str(key).strip()] = values
    return out


# ----------------------------------------------------------------- tasks

@attrs.frozen
class SweepTask:
    """One run: the topology's TOML text and the settings of one point (fixed ones first)."""

    file: str
    text: str = attrs.field(repr=False)
    settings: tuple  # (Setting, …)
    point: tuple  # ((grid key, value), …): the row's key columns

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.point) or "(no grid)"

    def __dask_tokenize__(self):
        return ("flowsim.sim.sweep.SweepTask", self.file, self.text, repr(self.settings))


@attrs.frozen
class SweepPlan:
    """A checked grid: the key columns and one task per point."""

    keys: tuple
    tasks: tuple

    def frame(self, results: list[dict]):
        """The DataFrame of *results* (one :func:`run_point` dict per task, in order)."""
        import pandas as pd

        extra = sorted({c for r in results for c in r if c.startswith("reason.")}) \
            + sorted({c for r in results for c in r if c.startswith("drop.")})
        records = [{**dict(t.point), **{m: r[m] for m in METRICS}, **{c: r.get(c, 0) for c in extra}}
                   for t, r in zip(self.tasks, results)]
        return pd.DataFrame.from_records(records, columns=[*self.keys, *METRICS, *extra])


def _topology_text(topology) -> tuple[str, str]:
    """(file name, TOML text) of a topology file (or of the file a Topology was loaded from)."""
    file = topology if isinstance(topology, (str, Path)) else getattr(topology, "file", None)
    if file is None:
        raise ConfigError(f"bad topology {topology!r}", value=topology, expected="a topology file")
    path = Path(file)
    try:
        return str(path), read_bounded(path).decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read topology {str(path)!r}: {exc.strerror}", value=str(path),
                          expected="a readable topology file") from None
    except ValueError as exc:  # too large, or not UTF-8 (a UnicodeDecodeError)
        raise ConfigError(f"cannot read topology {str(path)!r}: {exc}", value=str(path),
                          expected="a UTF-8 topology file") from None


def plan(topology, grid, fixed: Mapping | None = None) -> SweepPlan:
    """Check *grid* and *fixed* against the topology and make one :class:`SweepTask` per point."""
    file, text = _topology_text(topology)
    topo = _loaded(file, text)
    traffic = {t.name: t.proto for t in topo.traffic}
    grid = _as_grid(grid)
    fixed = {str(k).strip(): v for k, v in (fixed or {}).items() if str(k).strip() not in grid}
    fixed_settings = tuple(resolve_key(k, traffic).setting(v) for k, v in fixed.items())
    columns = [[resolve_key(k, traffic).setting(raw) for raw in values] for k, values in grid.items()]
    tasks = []
    for point in itertools.product(*columns):
        tasks.append(SweepTask(file, text, fixed_settings + point, tuple((s.key, s.value) for s in point)))
    return SweepPlan(tuple(grid), tuple(tasks))


# ----------------------------------------------------------------- one run

@functools.lru_cache(maxsize=4)
def _loaded(file: str, text: str) -> Topology:
    """The topology of a task, loaded once per process: every point a worker runs instantiates the same
    description (tasks carry the text, so that remote workers need no shared file system)."""
    return load_topology_text(text, file=file)


def _of_kind(settings, kind: str) -> list[Setting]:
    return [s for s in settings if s.kind == kind]


def _profile(settings):
    names = [s.value for s in _of_kind(settings, "profile")]
    base = get_profile(names[-1] if names else None)
    return base.derive(**{s.target[0]: s.value for s in _of_kind(settings, "switch")})


def _apply_sysctls(topo, settings) -> None:
    for s in _of_kind(settings, "sysctl"):
        for ns in topo.namespaces.values():
            ns.sysctls[s.target[0]] = str(s.value)


def _traffic_specs(topo, settings) -> list[TrafficSpec]:
    """The topology's traffic with ``traffic.*.F`` applied, then ``traffic.NAME.F`` (the named table wins)."""
    specs = [TrafficSpec.from_topology(t, i) for i, t in enumerate(topo.traffic)]
    changes = sorted(_of_kind(settings, "traffic"), key=lambda setting: setting.target[0] != "*")
    for change in changes:
        (name, field), value = change.target, change.value
        specs = [attrs.evolve(s, **{field: value})
                 if (name == s.name or name == "*") and _applies(field, s.proto) else s
                 for s in specs]
    return specs


def _simulation(task: SweepTask) -> tuple[Simulation, float | None]:
    topo = _loaded(task.file, task.text).instantiate()  # the point's sysctls change its own live copy
    _apply_sysctls(topo, task.settings)
    run = {s.target[0]: s.value for s in _of_kind(task.settings, "run")}
    sim = Simulation(topo, _profile(task.settings), flowtables=run.get("flowtables", True),
                     headlen=run.get("headlen"), traffic=_traffic_specs(topo, task.settings))
    return sim, run.get("duration")


def flow_table_size(sim) -> list[tuple[float, int]]:
    """``(time, flows)`` after each add or free, over all flowtables of *sim*, starting at ``(0.0, 0)``."""
    events = [(t, 1 if what == "add" else -1)
              for st in sim.kernel.netns.values() for ft in st.flowtables.values()
              for t, what, _id, _detail in ft.history if what in ("add", "free")]
    steps, size = [(0.0, 0)], 0
    for t, delta in sorted(events):  # frees (-1) before adds at the same instant
        size += delta
        steps.append((t, size))
    return steps


def _occupancy(sim) -> tuple[int, float]:
    """(peak, time average over the run) of :func:`flow_table_size`."""
    steps = flow_table_size(sim)
    end = sim.end
    area = sum(n * (min(t1, end) - t0) for (t0, n), (t1, _) in zip(steps, steps[1:] + [(end, 0)]) if t1 > t0)
    return max(n for _t, n in steps), (area / end if end > 0 else float(steps[-1][1]))


def measure(sim) -> dict:
    """The :data:`METRICS`, ``reason.ID`` and ``drop.ID`` of a finished run."""
    report = build_report(sim)
    packets, fts = report["packets"], report["flowtables"]
    fast = sum(f["fastpath"] for f in fts)
    slow = sum(f["slowpath"] for f in fts)
    peak, mean = _occupancy(sim)
    row = {
        "injected": packets["injected"], "delivered": packets["delivered"], "dropped": packets["dropped"],
        "in_flight": packets["in_flight"], "fastpath": fast, "slowpath": slow,
        "hit_ratio": fast / (fast + slow) if fast + slow else math.nan,
        "flows_created": sum(f.get("flows_created", 0) for f in fts),
        "flow_add_failures": sum(sum(f.get("flow_add_failures", {}).values()) for f in fts),
        "max_flows": peak, "mean_flows": mean,
        **{f"skb_{k}": sum((f.get("skb_cost") or {}).get(k, 0) for f in fts) for k in _SKB_COST},
        "kernel_bugs": sum(len(f.get("kernel_bugs", [])) for f in fts), "time": report["time"],
    }
    for f in fts:
        for rid, n in f["reasons"].items():
            row[f"reason.{rid}"] = row.get(f"reason.{rid}", 0) + n
    for rid, n in report["drops"].items():
        row[f"drop.{rid}"] = n
    return row


def run_point(task: SweepTask) -> dict:
    """Build, run and :func:`measure` one point (this is what the workers execute)."""
    try:
        sim, duration = _simulation(task)
        sim.run(duration)
        return measure(sim)
    except Exception as exc:  # noqa: BLE001 - re-raised with the point named, picklable
        raise SweepError(f"{task.file}: run {task.label()} failed: {type(exc).__name__}: {exc}") from exc


def point_simulation(topology, point: Mapping, fixed: Mapping | None = None) -> tuple[Simulation, float | None]:
    """The (not yet run) simulation of one point and its duration, to look closer at one row."""
    (task,) = plan(topology, {k: [v] for k, v in point.items()}, fixed).tasks
    return _simulation(task)


# ----------------------------------------------------------------- execution

def _mp_context():
    """forkserver where there is one: no fork of a process that may run threads (tqdm, Dask, Jupyter)."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver") if "forkserver" in methods else None


def _gather(executor, tasks, bar) -> list[dict]:
    futures = [executor.submit(run_point, t) for t in tasks]
    results = []
    for future in futures:
        results.append(future.result())
        bar.update(1)
    return results


def _execute(tasks, executor, workers: int | None, bar) -> list[dict]:
    if executor is not None:
        if not callable(getattr(executor, "submit", None)):
            raise ConfigError(f"bad executor {executor!r}", value=executor,
                              expected="a concurrent.futures executor or a dask.distributed Client")
        return _gather(executor, tasks, bar)
    n = workers if workers is not None else (os.cpu_count() or 1)
    if n < 1:
        raise ConfigError(f"bad number of workers {workers!r}", value=workers, expected="at least 1")
    if n == 1 or len(tasks) <= 1:
        results = []
        for t in tasks:
            results.append(run_point(t))
            bar.update(1)
        return results
    with ProcessPoolExecutor(max_workers=min(n, len(tasks)), mp_context=_mp_context()) as pool:
        return _gather(pool, tasks, bar)


def sweep(topology, grid, executor=None, *, fixed: Mapping | None = None, workers: int | None = None,
          progress: bool | None = False):
    """Run *topology* once per point of *grid*; one DataFrame row per run (see the module docstring).

    *topology* is a topology file; *grid* maps keys to value lists (or is a
    list of ``"K=V1,V2"`` strings); *fixed* settings apply to every run;
    *executor* is None (a local process pool of *workers* processes), a
    ``concurrent.futures`` executor or a ``dask.distributed.Client``;
    *progress* draws a bar of finished runs on stderr (None: when stderr is
    a terminal).
    """
    the_plan = plan(topology, grid, fixed)
    with count_bar(len(the_plan.tasks), desc="sweep", enabled=progress) as bar:
        results = _execute(the_plan.tasks, executor, workers, bar)
    return the_plan.frame(results)
