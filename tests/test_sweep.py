"""Sweeps: grids of profiles, switches, timeouts and traffic run in parallel, one row per run (issue 6, Sweeps)."""

from __future__ import annotations

import concurrent.futures
import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest

import flowsim
from flowsim.cli import main
from flowsim.errors import ConfigError
from flowsim.kernel.conntrack import TcpConntrack
from flowsim.sim.sweep import METRICS, SweepError, flow_table_size, parse_grid, plan, point_simulation, sweep

TOPO = str(Path(__file__).resolve().parent.parent / "topologies" / "ip6ip6-rx.toml")
TCP, UDP = "tcp-rx-from-tunnel", "udp-tx-into-tunnel"
#: small traffic: every run takes a few milliseconds
SMALL = {f"traffic.{TCP}.packets": 6, f"traffic.{TCP}.reply_packets": 3, f"traffic.{UDP}.packets": 6}
#: sparse UDP flows: one datagram every 2 s, so the flow timeout decides whether the flow survives the gaps
SPARSE = {**SMALL, f"traffic.{UDP}.rate": 0.5, f"traffic.{UDP}.flows": 3}
GRID = {"profile": ["linux-7.0", "linux-7.1.5"], "udp_timeout": [1, 30]}


@pytest.fixture(scope="module")
def serial():
    """The reference: GRID over SPARSE traffic, run one after the other in this process."""
    return sweep(TOPO, GRID, fixed=SPARSE, workers=1)


# ----------------------------------------------------------------- grid parsing

@pytest.mark.parametrize("items, grid", [
    (["udp_timeout=1,2,30"], {"udp_timeout": ["1", "2", "30"]}),
    (["profile=linux-7.0", "traffic.*.packets=10, 100"],
     {"profile": ["linux-7.0"], "traffic.*.packets": ["10", "100"]}),
    ([" headlen = 14,none"], {"headlen": ["14", "none"]}),
    ([], {}),
])
def test_parse_grid(items, grid):
    """--grid K=V1,V2 items become {K: [V1, V2]}, text kept as given (stripped)."""
    assert parse_grid(items) == grid


@pytest.mark.parametrize("items, fragment", [
    (["udp_timeout"], "bad grid item 'udp_timeout'"),
    (["=1,2"], "bad grid item '=1,2'"),
    (["udp_timeout="], "empty value"),
    (["udp_timeout=1,,2"], "empty value"),
    (["udp_timeout=1", "udp_timeout=2"], "given twice"),
])
def test_parse_grid_errors(items, fragment):
    """A malformed --grid item is one ConfigError that quotes it."""
    with pytest.raises(ConfigError, match=fragment):
        parse_grid(items)


@pytest.mark.parametrize("grid, fragment", [
    ({"foo": [1]}, r"unknown grid key 'foo' \(expected profile, duration"),
    ({"traffic.nope.packets": [1]}, r"no traffic table 'nope' \(expected one of tcp-rx-from-tunnel, udp-tx"),
    ({"traffic.*.pkts": [1]}, r"no traffic field 'pkts' \(expected one of packets, size"),
    ({"traffic.packets": [1]}, r"bad grid key 'traffic.packets' \(expected traffic.NAME.FIELD\)"),
    ({"udp_timeout": ["x"]}, r"bad value 'x' for grid key 'udp_timeout' \(expected a number >= 0\)"),
    ({"tcp_timeout": [-1]}, r"bad value -1 for grid key 'tcp_timeout'"),
    ({"duration": ["inf"]}, r"grid key 'duration' \(expected a number >= 0 or none\)"),
    ({"headlen": [3]}, r"grid key 'headlen' \(expected an integer 14..65535 or none\)"),
    ({"flowtables": ["maybe"]}, r"grid key 'flowtables' \(expected a boolean"),
    ({"profile": ["linux-9"]}, r"grid key 'profile' \(expected one of linux-6.1, "),
    ({"ipip_rx": ["maybe"]}, r"grid key 'ipip_rx' \(expected a boolean"),
    ({"ip6_tunnel_header_access": ["memcpy"]}, r"\(expected one of header_pointer, pull\)"),
    ({f"traffic.{UDP}.packets": [1.5]}, r"grid key 'traffic.udp-tx-into-tunnel.packets' \(expected an integer 1.."),
    ({f"traffic.{UDP}.close": ["rst"]}, r"traffic 'udp-tx-into-tunnel' is udp \(expected close on a tcp"),
    ({"udp_timeout": []}, r"grid key 'udp_timeout' has no values"),
])
def test_bad_grid_is_one_config_error(grid, fragment):
    """A bad key or value is refused before any run, naming the key and what was expected."""
    with pytest.raises(ConfigError, match=fragment):
        plan(TOPO, grid)


def test_bad_fixed_setting_is_refused():
    """Fixed settings are checked like grid keys."""
    with pytest.raises(ConfigError, match="grid key 'udp_timeout'"):
        plan(TOPO, {"profile": ["linux-7.0"]}, fixed={"udp_timeout": "soon"})


def test_points_are_the_cartesian_product_in_order():
    """Points: the product of the value lists, the first key varying slowest; values converted."""
    p = plan(TOPO, {"profile": ["linux-7.0", "linux-7.1.5"], "udp_timeout": ["1", "2.5"]})
    assert p.keys == ("profile", "udp_timeout")
    assert [t.point for t in p.tasks] == [
        (("profile", "linux-7.0"), ("udp_timeout", 1.0)), (("profile", "linux-7.0"), ("udp_timeout", 2.5)),
        (("profile", "linux-7.1.5"), ("udp_timeout", 1.0)), (("profile", "linux-7.1.5"), ("udp_timeout", 2.5))]


# ----------------------------------------------------------------- what each key sets

def _sysctl(sim, key):
    return {ns.ns.sysctl(f"net.netfilter.nf_flowtable_{key}") for ns in sim.kernel.netns.values()}


def _spec(sim, name):
    return next(s for s in sim.specs if s.name == name)


@pytest.mark.parametrize("point, fixed, probe, expected", [
    ({"profile": "linux-7.0"}, {}, lambda sim, d: sim.profile.name, "linux-7.0"),
    ({"ip6_tunnel_header_access": "pull"}, {"profile": "linux-7.0"},
     lambda sim, d: (sim.profile.kernel, sim.profile.ip6_tunnel_header_access), ("7.0", "pull")),
    ({"ipip_rx": "off"}, {}, lambda sim, d: sim.profile.ipip_rx, False),
    ({"udp_timeout": 5}, {}, lambda sim, d: _sysctl(sim, "udp_timeout"), {"5.0"}),
    ({"tcp_timeout": "7"}, {}, lambda sim, d: _sysctl(sim, "tcp_timeout"), {"7.0"}),
    # conntrack's timeouts: each namespace's table takes them (CtTimeouts.from_sysctls)
    ({"ct_udp_timeout": 45, "ct_tcp_timeout_established": "7440"}, {},
     lambda sim, d: {(st.conntrack.timeouts.udp_unreplied, st.conntrack.timeouts.tcp[TcpConntrack.ESTABLISHED])
                     for st in sim.kernel.netns.values()}, {(45.0, 7440.0)}),
    ({"traffic.*.packets": 3}, {}, lambda sim, d: [s.packets for s in sim.specs], [3, 3]),
    ({f"traffic.{UDP}.flows": 4}, {"traffic.*.flows": 2},
     lambda sim, d: [s.flows for s in sim.specs], [2, 4]),
    ({"traffic.*.flows": 2}, {f"traffic.{UDP}.flows": 4},
     lambda sim, d: [s.flows for s in sim.specs], [2, 4]),
    ({"traffic.*.close": "rst"}, {}, lambda sim, d: (_spec(sim, TCP).close, _spec(sim, UDP).close), ("rst", None)),
    ({f"traffic.{UDP}.rate": "2.5"}, {}, lambda sim, d: _spec(sim, UDP).gap, 0.4),
    ({"headlen": 14, "flowtables": "off"}, {},
     lambda sim, d: (sim.kernel.headlen, sim.kernel.flowtables_enabled), (14, False)),
    ({"duration": 3}, {}, lambda sim, d: d, 3.0),
    ({"duration": "none"}, {"duration": 3}, lambda sim, d: d, None),
])
def test_each_key_sets_what_it_names(point, fixed, probe, expected):
    """Profile, switches, timeouts (sysctls of every namespace), traffic fields (NAME over *), run parameters."""
    sim, duration = point_simulation(TOPO, point, fixed)
    assert probe(sim, duration) == expected


# ----------------------------------------------------------------- the table

def test_columns_are_keys_then_metrics_then_reasons(serial):
    """Columns: the grid keys, METRICS, then reason.ID (and drop.ID) columns; one row per point."""
    assert list(serial.columns[:2]) == ["profile", "udp_timeout"]
    assert tuple(serial.columns[2:2 + len(METRICS)]) == METRICS
    assert all(c.startswith(("reason.", "drop.")) for c in serial.columns[2 + len(METRICS):])
    assert "reason.no-flow-entry" in serial.columns and len(serial) == 4


def test_metrics_add_up(serial):
    """hit_ratio = fastpath/(fastpath+slowpath); the reasons add up to the slow path; conservation holds."""
    assert (serial["hit_ratio"] == serial["fastpath"] / (serial["fastpath"] + serial["slowpath"])).all()
    assert (serial["injected"] == serial["delivered"] + serial["dropped"] + serial["in_flight"]).all()
    slow = serial[[c for c in serial.columns if c.startswith("reason.")]].sum(axis=1)
    assert (slow == serial["slowpath"]).all()


def test_short_udp_timeout_loses_flows_between_packets(serial):
    """UDP every 2 s: a 1 s flow timeout expires each flow between datagrams (slow path, new flows); 30 s keeps it."""
    for _profile, rows in serial.groupby("profile"):
        short, long = rows.set_index("udp_timeout").loc[1.0], rows.set_index("udp_timeout").loc[30.0]
        assert short["hit_ratio"] < long["hit_ratio"]
        assert short["flows_created"] > long["flows_created"]
        assert long["max_flows"] == 4  # 3 concurrent UDP flows + the TCP connection


def test_flowtables_off_has_no_hit_ratio():
    """Without flowtable hooks nothing is counted: fastpath 0, hit_ratio NaN, no flows."""
    df = sweep(TOPO, {"flowtables": [False]}, fixed=SMALL, workers=1)
    assert df.loc[0, "fastpath"] == 0 and math.isnan(df.loc[0, "hit_ratio"]) and df.loc[0, "max_flows"] == 0


def test_flow_table_size_steps():
    """flow_table_size: a step per add and free, from (0, 0); its peak is max_flows."""
    sim, duration = point_simulation(TOPO, {"udp_timeout": 1}, SPARSE)
    sim.run(duration)
    steps = flow_table_size(sim)
    assert steps[0] == (0.0, 0) and all(n >= 0 for _t, n in steps)
    assert [t for t, _n in steps] == sorted(t for t, _n in steps)
    row = sweep(TOPO, {"udp_timeout": [1]}, fixed=SPARSE, workers=1).iloc[0]
    assert max(n for _t, n in steps) == row["max_flows"] and len(steps) - 1 >= 2 * row["flows_created"] - 4


# ----------------------------------------------------------------- executors: same table everywhere

def test_process_pool_equals_serial(serial):
    """The default local process pool gives exactly the serial table (runs are deterministic)."""
    pd.testing.assert_frame_equal(sweep(TOPO, GRID, fixed=SPARSE, workers=2), serial)


def test_any_executor_with_submit_equals_serial(serial):
    """A concurrent.futures executor passed in is used as is."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        pd.testing.assert_frame_equal(sweep(TOPO, GRID, pool, fixed=SPARSE), serial)


def test_dask_local_cluster_equals_serial(serial):
    """A dask.distributed Client on a local cluster of two worker processes gives exactly the serial table."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=50) as cluster, distributed.Client(cluster) as client:
        pd.testing.assert_frame_equal(sweep(TOPO, GRID, client, fixed=SPARSE), serial)


def test_bad_executor():
    """An executor without submit() is refused."""
    with pytest.raises(ConfigError, match="bad executor"):
        sweep(TOPO, {"udp_timeout": [1]}, executor=object())


def test_failed_run_names_the_point(monkeypatch):
    """A run that fails raises SweepError naming the topology and the point."""
    def boom(sim):
        raise RuntimeError("measure failed")

    monkeypatch.setattr("flowsim.sim.sweep.measure", boom)
    with pytest.raises(SweepError, match=r"ip6ip6-rx.toml: run udp_timeout=1.0 failed: RuntimeError: measure failed"):
        sweep(TOPO, {"udp_timeout": [1]}, workers=1)


def test_flowsim_sweep_is_callable():
    """flowsim.sweep(...) is the public API's name for flowsim.sim.sweep.sweep."""
    df = flowsim.sweep(TOPO, {"traffic.*.packets": [2]}, fixed=SMALL, workers=1)
    assert len(df) == 1 and flowsim.sweep is sweep


# ----------------------------------------------------------------- the command

def _cli(capsys, *args):
    rc = main(["sweep", TOPO, *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _small_args():
    return [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]


def test_cli_csv_equals_the_api(capsys):
    """--csv prints the DataFrame the API returns; nothing on stderr (not a terminal: no bar)."""
    rc, out, err = _cli(capsys, "--grid", "profile=linux-7.0,linux-7.1.5", "--workers", "1", "--csv", *_small_args())
    assert rc == 0 and err == ""
    got = pd.read_csv(io.StringIO(out))
    want = sweep(TOPO, {"profile": ["linux-7.0", "linux-7.1.5"]}, fixed=SMALL, workers=1)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)


def test_cli_json(capsys):
    """--json: one object with the topology, the grid, the fixed settings, the columns and one row per run."""
    rc, out, _ = _cli(capsys, "--grid", "udp_timeout=1,30", "--workers", "1", "--json", "--profile", "linux-7.0",
                      *_small_args())
    data = json.loads(out)
    assert rc == 0 and data["grid"] == {"udp_timeout": ["1", "30"]} and data["fixed"]["profile"] == "linux-7.0"
    assert [r["udp_timeout"] for r in data["rows"]] == [1.0, 30.0] and data["columns"][0] == "udp_timeout"


@pytest.mark.parametrize("args, fragment", [
    (["--grid", "udp_timeout=soon"], "bad value 'soon' for grid key 'udp_timeout'"),
    (["--grid", "nope=1"], "unknown grid key 'nope'"),
    (["--grid", "udp_timeout=1", "--set", "oops"], "bad --set 'oops'"),
])
def test_cli_errors_are_one_line(capsys, args, fragment):
    """Bad grid keys or values: exit status 2 and one line on stderr."""
    rc, out, err = _cli(capsys, *args)
    assert rc == 2 and out == "" and fragment in err and err.count("\n") == 1


def test_points_of_a_process_share_one_loaded_topology():
    """A process loads a task's topology text once; every point it runs instantiates that description."""
    from flowsim.sim import sweep as sweep_mod

    sweep_mod._loaded.cache_clear()
    sweep(TOPO, {"udp_timeout": [1, 30, 60]}, fixed=SMALL, workers=1)
    info = sweep_mod._loaded.cache_info()
    assert info.misses == 1 and info.hits == 3  # the plan's load, then the three points
