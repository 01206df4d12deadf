"""Idle virtual time costs no real time: the run loop jumps over GC ticks at which nothing can expire.

Each case runs twice, with ``coalesce_gc`` (the default) and with every tick
(``coalesce_gc=False``, the loop before the jumps), and the two runs must
give the same report, the same flowtable histories and the same captures:
``nf_flow_offload_work_gc``, conntrack's ``gc_worker`` and ``ip_expire`` only
act at the ticks :func:`flowsim.sim.simulation.next_expiry` does not skip.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from flowsim.config.topology import load_topology, load_topology_text
from flowsim.errors import ConfigError
from flowsim.kernel.stack.core import Kernel
from flowsim.sim.report import build_report
from flowsim.sim.simulation import MAX_TIME, Simulation
from flowsim.sim.traffic import TrafficSpec

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"
SELFTEST = (TOPOLOGIES / "selftest.toml").read_text()


def specs(topo, **changes):
    """The topology's traffic tables, each with *changes* (e.g. a later start)."""
    return [attrs.evolve(TrafficSpec.from_topology(t, i), **changes) for i, t in enumerate(topo.traffic)]


def with_events(text: str, *tables: str) -> str:
    return text + "".join("\n[[event]]\n" + t + "\n" for t in tables)


def run(topo, coalesce: bool, tmp: Path, profile=None, duration=None, **changes):
    """One run; (report JSON, flowtable histories, capture bytes, GC ticks run)."""
    ticks = []
    sim = Simulation(topo, profile, traffic=specs(topo, **changes), pcap_dir=tmp, coalesce_gc=coalesce)
    gc = sim.kernel.gc

    def counting_gc():
        ticks.append(sim.kernel.now)
        gc()
    sim.kernel.gc = counting_gc  # type: ignore[method-assign]
    sim.run(duration=duration)
    report = json.dumps(build_report(sim), sort_keys=True, default=str)
    history = [(ns, name, list(ft.history)) for ns, st in sim.kernel.netns.items()
               for name, ft in st.flowtables.items()]
    pcaps = {p.name: p.read_bytes() for p in sorted(tmp.glob("*.pcap"))}
    return report, history, pcaps, ticks


CASES = [
    # (name, topology text or file, profile, duration, changes of every traffic table)
    ("udp-idle: both UDP flows expire after 30 s idle, their ct later", "conform-udp-idle", None, 400.0, {}),
    ("udp-idle under 6.12: same expiries with the older profile", "conform-udp-idle", "linux-6.12", 400.0, {}),
    ("selftest starting at 5000 s: 5000 idle ticks before the first packet", "selftest", None, None,
     {"start": 5000.0}),
    ("selftest at 5000 s with a duration: idle ticks after the traffic expire flows and ct", "selftest", None,
     9000.0, {"start": 5000.0}),
    ("FIN-closed TCP: closing states refresh the ct every tick until the flow goes", "conform-fin", None, 700.0,
     {"start": 100.0}),
]


@pytest.mark.parametrize("name,source,profile,duration,changes", CASES, ids=[c[0].split(":")[0] for c in CASES])
def test_coalesced_ticks_give_the_tick_by_tick_run(tmp_path, name, source, profile, duration, changes):
    """A run that jumps over idle GC ticks reports exactly what the run of every tick reports."""
    topo = load_topology(TOPOLOGIES / f"{source}.toml")
    a = run(topo, True, tmp_path / "a", profile, duration, **changes)
    b = run(topo, False, tmp_path / "b", profile, duration, **changes)
    assert a[0] == b[0]
    assert a[1] == b[1]
    assert a[2] == b[2] and a[2]
    assert set(a[3]) <= set(b[3]) and len(a[3]) < len(b[3])


def test_an_event_in_an_idle_gap_runs_at_its_time(tmp_path):
    """A device taken down and up again during an idle stretch: the same teardown and recreation as tick by tick."""
    text = with_events(SELFTEST, 'at = 2500.25\nnetns = "nsr1"\ncommand = "ip link set veth0 down"',
                       'at = 2600\nnetns = "nsr1"\ncommand = "ip link set veth0 up"')
    topo = load_topology_text(text, "selftest-events.toml")
    a = run(topo, True, tmp_path / "a", None, 9000.0, start=2000.0)
    b = run(topo, False, tmp_path / "b", None, 9000.0, start=2000.0)
    assert a[:3] == b[:3]
    assert len(a[3]) < len(b[3]) / 10


def test_a_start_at_the_time_bound_runs_a_handful_of_ticks(tmp_path):
    """start = MAX_TIME - 1000 s (the issue's start = 1e7 hang, within the bound): the run jumps to the traffic
    instead of ticking a million times."""
    topo = load_topology(TOPOLOGIES / "selftest.toml")
    report, _, _, ticks = run(topo, True, tmp_path, None, None, start=MAX_TIME - 1000)
    assert len(ticks) < 50
    assert json.loads(report)["packets"]["delivered"] > 0


@pytest.mark.parametrize("kwargs,run_kwargs,what", [
    ({}, {"duration": float("inf")}, "bad duration inf"),
    ({}, {"duration": float("nan")}, "bad duration nan"),
    ({}, {"duration": -1}, "bad duration -1"),
    ({}, {"duration": MAX_TIME * 10}, "bad duration"),
    ({}, {"duration": "10"}, "bad duration '10'"),
    ({"link_delay": 0}, {}, "bad link_delay 0"),
    ({"link_delay": float("nan")}, {}, "bad link_delay nan"),
    ({"traffic_start": float("inf")}, {}, "scheduled at virtual time inf"),
    ({"traffic_start": 1e300}, {}, "scheduled at virtual time 1e\\+300"),
    ({"traffic_rate": 1e-300}, {}, "scheduled at virtual time 1e\\+300"),
])
def test_absurd_times_from_the_api_are_config_errors(kwargs, run_kwargs, what):
    """Non-finite, negative or centuries-away times are one ConfigError, never a hang or a traceback."""
    topo = load_topology(TOPOLOGIES / "selftest.toml")
    changes = {k.removeprefix("traffic_"): v for k, v in kwargs.items() if k.startswith("traffic_")}
    sim_kwargs = {k: v for k, v in kwargs.items() if not k.startswith("traffic_")}
    with pytest.raises(ConfigError, match=what):
        Simulation(topo, flowtables=False, traffic=specs(topo, **changes), **sim_kwargs).run(**run_kwargs)


def test_kernel_gc_is_what_next_expiry_mirrors():
    """next_expiry mirrors Kernel.gc's three periodic works: a new one there must be added to it too."""
    import ast
    import inspect
    import textwrap
    tree = ast.parse(textwrap.dedent(inspect.getsource(Kernel.gc)))
    calls = sorted(ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call))
    assert calls == ["ft.nf_flow_offload_work_gc", "self.netns.values", "st.conntrack.gc", "st.flowtables.values",
                     "stack_ip.ip_expire_frags"]
