"""``flowsim conform`` planning without qemu: every shipped topology plans or is skipped, sizes raised,
packets capped (and the simulation told so), known differences exact."""

from __future__ import annotations

import glob
import json
from pathlib import Path
from types import SimpleNamespace

import attrs
import jsonschema
import pytest

from flowsim.config.topology import load_topology
from flowsim.conform import compare as cc
from flowsim.conform import known
from flowsim.conform.guest import (
    SOCAT_SIM_TCP_RATE, TCP_MIN_MSS, ScenarioSkipped, plan_scenario, render_init, render_scenario, start_pause,
)
from flowsim.conform.harness import (
    DEFAULT_MAX_PACKETS, default_cap, load_scenarios, plan_traffic, run_conformance,
)
from flowsim.schemas import load
from flowsim.sim.traffic import TrafficSpec

ROOT = Path(__file__).resolve().parents[1]
TOPOLOGIES = sorted(glob.glob(str(ROOT / "topologies" / "*.toml")))
LOG = ROOT / "tests" / "data" / "conform" / "results-debian-6.12.log.gz"
FLOWSIM_ONLY = {"dsa", "stack-limit"}


@pytest.mark.parametrize("frames", [False, True], ids=["socat", "frames"])
@pytest.mark.parametrize("path", TOPOLOGIES, ids=lambda p: Path(p).stem)
def test_every_shipped_topology_plans_or_is_skipped(path, frames):
    """No shipped topology is an error: it plans (and renders), or it is skipped with file:line and a reason."""
    topo = load_topology(path)
    try:
        plan = plan_scenario(topo, 0, frames=frames, max_packets=default_cap(topo, frames))
    except ScenarioSkipped as exc:
        assert exc.reason.startswith(f"{topo.file}:")
        if Path(path).stem in FLOWSIM_ONLY:
            assert "'ethernet'" in exc.reason and "flowsim extension" in exc.reason
        return
    assert Path(path).stem not in FLOWSIM_ONLY
    if not frames:
        render_init([(topo, plan)])


def test_small_tcp_reply_is_raised_and_simulated_raised():
    """ip6ip6-rx's 60-byte TCP replies leave no payload: raised to 73, said, and the simulation plays 73."""
    topo = load_topology(ROOT / "topologies" / "ip6ip6-rx.toml")
    plan = plan_scenario(topo)
    t = next(x for x in plan.traffic if x.name == "tcp-rx-from-tunnel")
    assert (t.size, t.reply_size, t.packets) == (1400, 73, 1000)
    note = next(a for a in plan.adjustments if "tcp-rx-from-tunnel" in a)
    assert "reply size 60 raised to 73" in note and "->" in note and "IPv6 40 + TCP 32" in note
    specs = plan_traffic(topo, plan)
    spec = next(s for s in specs if s.name == "tcp-rx-from-tunnel")
    assert (spec.size, spec.reply_size, spec.packets) == (1400, 73, t.packets)
    other = next(s for s in specs if s.name != "tcp-rx-from-tunnel")
    assert other == next(s for s in specs if s.name == other.name)  # untouched tables keep their values
    # the simulation plays the raised size: 73-byte data segments (60 bytes is a bare TCP header, as before)
    def sizes(report_specs):
        seen = set()
        from flowsim.profiles import get_profile
        from flowsim.sim.simulation import Simulation
        sim = Simulation(topo, get_profile("linux-6.12"), traffic=report_specs)
        sim.kernel.packet_tap = lambda ns, dev, frame, skb, out: seen.add(len(frame) - 14) if (
            ns, dev, out) == ("client", "eth0", True) else None
        sim.run()
        return set(seen)
    assert 73 in sizes(specs) and 73 not in sizes(None)


def test_frames_mode_does_not_raise_sizes():
    """--frames injects flowsim's own frames: a 60-byte TCP segment is played as it is."""
    topo = load_topology(ROOT / "topologies" / "ip6ip6-rx.toml")
    t = next(x for x in plan_scenario(topo, frames=True).traffic if x.name == "tcp-rx-from-tunnel")
    assert t.reply_size == 60


def test_mss_pin_is_the_larger_direction_and_at_least_tcp_min_mss():
    """Both socats pin the larger direction's MSS (TCP_MAXSEG also clamps the advertised MSS), >= 88."""
    topo = load_topology(ROOT / "topologies" / "ip6ip6-rx.toml")
    init = render_init([(topo, plan_scenario(topo))])["init"].decode()
    assert f"mss={1400 - 40 - 20},nodelay" in init and "mss=13," not in init
    assert TCP_MIN_MSS == 88


def test_socat_max_packets_on_a_replay():
    """--max-packets without --frames: the result lists the capped tables and the cap."""
    result = run_conformance([str(ROOT / "topologies" / "conform-fin.toml")], "debian-6.12", results=str(LOG),
                             max_packets=5)
    assert result.cap["max_packets"] == 5 and result.cap["capped"]
    assert "capped at 5 per direction" in result.text()


def test_max_packets_caps_the_plan_and_the_simulation():
    """--max-packets in socat mode: every direction capped, said per table, and simulated capped."""
    topo = load_topology(ROOT / "topologies" / "conform-forward.toml")
    plan = plan_scenario(topo, max_packets=5)
    assert all(t.packets <= 5 and t.reply_packets <= 5 for t in plan.traffic)
    assert len([a for a in plan.adjustments if "capped at 5 per direction" in a]) == len(plan.traffic)
    specs = plan_traffic(topo, plan)
    assert [(s.packets, s.reply_packets) for s in specs] == [(5, 5)] * len(specs)
    # uncapped: the file's traffic, TCP with Linux's ACKs (the guest's sockets send them), said once
    plain = plan_scenario(topo)
    assert [a for a in plain.adjustments if a.startswith("TCP simulated with acks")] == [
        'TCP simulated with acks = "linux" (the guest\'s sockets send Linux\'s pure ACKs), back-to-back writes '
        "1 ms apart (socat's writes in the guest come slower than the ACK of the last segment), reply_after = "
        '"data" (the guest\'s server writes once the client\'s first byte arrived, which it first quick-ACKs): '
        + ", ".join(t.name for t in topo.traffic if t.proto == "tcp")]
    file_specs = [TrafficSpec.from_topology(t, i) for i, t in enumerate(topo.traffic)]
    # in the guest's order (all start at 0 here: the file's), each start its pause after the table before it
    assert plan_traffic(topo, plain) == [attrs.evolve(s, acks="linux", rate=SOCAT_SIM_TCP_RATE, reply_after="data",
                                                      start=0.0)
                                         if s.proto == "tcp" else attrs.evolve(s, start=0.0) for s in file_specs]
    # frames: flowsim's own frames, the tables' own ACKs
    assert {s.acks for s in plan_traffic(topo, plan_scenario(topo, frames=True))} == {t.acks for t in topo.traffic}


def test_default_cap():
    """No cap for short traffic; the mode's default for long tables; a paced table by its duration."""
    fwd = load_topology(ROOT / "topologies" / "conform-forward.toml")
    rx = load_topology(ROOT / "topologies" / "ip6ip6-rx.toml")
    assert default_cap(fwd, False) is None  # 100 packets: not over
    assert default_cap(rx, False) == DEFAULT_MAX_PACKETS["socat"] == 200  # 1000 + 500
    assert default_cap(rx, True) == DEFAULT_MAX_PACKETS["frames"]
    slow = SimpleNamespace(traffic=[attrs.evolve(fwd.traffic[0], rate=2.0, packets=100)])
    assert default_cap(slow, False) == 40  # 20 s at 2 packets/s


def test_skipped_topologies_do_not_change_the_status():
    """A replayed run with a flowsim-only topology: skipped row with its reason, status from the others."""
    paths = [str(ROOT / "topologies" / "conform-fin.toml"), str(ROOT / "topologies" / "dsa.toml")]
    result = run_conformance(paths, "debian-6.12", results=str(LOG))
    assert result.status == 0 and [k.name for k in result.skipped] == ["dsa"]
    text = result.text()
    assert "skipped: dsa: " in text and "topologies/dsa.toml:34: link kind 'ethernet'" in text
    data = result.to_json()
    row = next(s for s in data["scenarios"] if s["name"] == "dsa")
    assert row["status"] == "skipped" and "flowsim extension" in row["skipped"]
    jsonschema.Draft202012Validator(load("conform")).validate(json.loads(json.dumps(data, default=str)))


def test_all_skipped_boots_nothing():
    """Only unrunnable topologies: no boot, no error, status 0."""
    result = run_conformance([str(ROOT / "topologies" / "dsa.toml")], "debian-6.12", install=False)
    assert result.status == 0 and result.package == "(not booted)" and not result.scenarios
    jsonschema.Draft202012Validator(load("conform")).validate(json.loads(json.dumps(result.to_json())))


def test_load_scenarios_raises_skip_without_a_list():
    """A caller that does not collect skips gets the ScenarioSkipped (a ConfigError) itself."""
    with pytest.raises(ScenarioSkipped, match="link kind 'ethernet'"):
        load_scenarios([str(ROOT / "topologies" / "dsa.toml")])


def test_known_differences_are_exact_and_never_about_offload():
    """Entries name one fact exactly, with cause and source; offload and fast/slow path facts are refused."""
    for e in known.KNOWN_DIFFERENCES:
        known.check_entry(e)
    good = known.KnownDifference("s", "c", "r: ct bytes reply", ("debian-sid",), "why", "net/x.c: f()")
    known.check_entry(good)
    for bad in (attrs.evolve(good, scenario="s*"), attrs.evolve(good, fact="r: offloaded (flow created)"),
                attrs.evolve(good, fact="fast path original"), attrs.evolve(good, fact="flowtable verdicts"),
                attrs.evolve(good, source=""), attrs.evolve(good, kernels=())):
        with pytest.raises(ValueError):
            known.check_entry(bad)


def test_apply_known_matches_kernel_line(monkeypatch):
    """A listed difference is known only on the kernel lines it names."""
    e = known.KnownDifference("s", "c", "r: ct bytes reply", ("debian-sid",), "why", "net/x.c: f()")
    monkeypatch.setattr(known, "KNOWN_DIFFERENCES", [e])
    f = cc.Fact("s", "c", "r: ct bytes reply", 1, 2, "exact", "differs")
    assert known.apply_known([f], "debian-sid")[0].status == "known"
    assert known.apply_known([f], "debian-sid")[0].note == "why (net/x.c: f())"
    assert known.apply_known([f], "debian-6.12")[0].status == "differs"


def test_probe_tells_tables_on_the_same_port_apart():
    """ipip.toml's tcp-12345 and tcp6-12345 both go to port 12345: each input counter names its family and
    client port (the shared counter summed both connections, sid run: 499 'delivered' for 204)."""
    from flowsim.conform.guest import probe_ruleset
    plan = plan_scenario(load_topology(ROOT / "topologies" / "ipip.toml"))
    rules = probe_ruleset(plan, plan.traffic[0].server)
    assert "meta nfproto ipv4 meta l4proto tcp th sport 40000 th dport 12345 counter name t0_in_original" in rules
    assert "meta nfproto ipv6 meta l4proto tcp th sport 40100 th dport 12345 counter name t1_in_original" in rules


def test_df_false_turns_pmtu_discovery_off_on_both_sockets():
    """selftest-base's `df = false` (nft_flowtable.sh's ip_no_pmtu_disc=1): both IPv4 sockets
    IP_PMTUDISC_DONT, as flowsim's generator sends without DF; IPv6 unchanged."""
    topo = load_topology(ROOT / "topologies" / "selftest-base.toml")
    init = render_init([(topo, plan_scenario(topo))])["init"].decode()
    v4 = [line for line in init.splitlines() if "TCP4" in line]
    assert v4 and all("mtudiscover=0" in line for line in v4)
    assert not any("mtudiscover" in line for line in init.splitlines() if "TCP6" in line)


def test_a_counter_in_a_connection_end_allows_its_pure_acks():
    """A named counter in the server's input chain counts the client's pure ACKs: the ACK allowance applies
    there (sid: ns2's ip4dscp0 counted 371 for flowsim's 200, within 200 data + 200 ACKs + control).  The model
    sends pure ACKs itself (acks = "linux"): the window keeps its width and moves down by them."""
    topo = load_topology(ROOT / "topologies" / "selftest-bridge-ipip.toml")
    plan = plan_scenario(topo)
    report = cc.simulate(topo.file, "linux-7.2")
    server = plan.traffic[0].server
    acks = sum(n for t in plan.traffic for n in report["pure_acks"][t.name].values())
    assert acks > 400
    end = cc._aggregate_tolerance(plan, report, "", server)
    assert end.high - end.low >= 400 and end.low <= -acks // 2
    mid = cc._aggregate_tolerance(plan, report, "", "nsr1")
    assert mid.high - mid.low < 50


def test_sysctls_of_deleted_devices_are_not_written():
    """selftest-ipsec's br0 is deleted by its commands: its forwarding sysctl stays out of the guest script."""
    from flowsim.conform.guest import live_sysctls
    topo = load_topology(ROOT / "topologies" / "selftest-ipsec.toml")
    keys = [k for k, _ in live_sysctls(topo, "nsr1")]
    assert "net.ipv4.conf.br0.forwarding" not in keys and "net.ipv4.conf.veth1/10.forwarding" in keys
    assert "/conf/br0/" not in render_init([(topo, plan_scenario(topo))])["init"].decode()


def test_oif_of_a_deleted_device_loads_as_a_name_match():
    """selftest-ipsec's ruleset matches 'meta oif "br0"' after its commands deleted br0: nft would refuse
    it at load, so the guest loads 'meta oifname "br0"' (matches nothing, as the stale index) and says so."""
    from flowsim.conform.guest import guest_ruleset
    topo = load_topology(ROOT / "topologies" / "selftest-ipsec.toml")
    text = guest_ruleset(topo, "nsr1")
    assert 'meta oifname "br0" tcp sport 12345' in text and 'meta oif "veth0" tcp sport 12345' in text
    assert any("'meta oif/iif br0' loaded as" in a for a in plan_scenario(topo).adjustments)
    files = render_init([(topo, plan_scenario(topo))])
    assert b'meta oifname "br0"' in next(v for k, v in files.items() if k.endswith("/nsr1.nft"))


def test_a_table_that_starts_after_a_pause_waits_the_simulated_idle_time():
    """openwrt-fw4's udp-voip-after-pause (start = 80) comes 60.1 s after udp-voip's last datagram (200 at
    10/s) in the simulation, longer than nf_flowtable_udp_timeout: the guest, which plays the tables one
    after the other, sleeps the whole idle time (rounded up) after the tables before it, and says so."""
    topo = load_topology(ROOT / "topologies/openwrt-fw4.toml")
    plan = plan_scenario(topo)
    pauses = {t.name: t.pause for t in plan.traffic}
    assert pauses["udp-voip-after-pause"] == 61 and set(pauses.values()) == {0, 61}
    assert any("udp-voip-after-pause" in a and "starts 61 s after" in a for a in plan.adjustments)
    script = render_scenario(topo, plan)
    assert "  sleep 61\n  note traffic t5 udp-voip-after-pause\n" in script
    voip = next(t for t in topo.traffic if t.name == "udp-voip")
    later = attrs.evolve(voip, start=10.5)
    assert start_pause(later, [voip]) == 0                    # inside the earlier table's own run
    assert start_pause(attrs.evolve(voip, start=25), [voip]) == 6
    assert start_pause(voip, []) == 0
