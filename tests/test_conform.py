"""Conformance harness: guest rendering, result parsing and the comparator (no qemu needed).

The kernel output fixtures in tests/data/conform/ were captured from real runs of
``flowsim conform topologies/conform-*.toml`` on Debian 6.12.118 and 6.1.0-57
(the results channel of each boot, gzipped, and single sections cut from it).
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import attrs
import pytest

from flowsim.cli import main
from flowsim.config.topology import load_topology, load_topology_text
from flowsim.conform import compare as cc
from flowsim.conform import kernel as ck
from flowsim.conform import guest as gmod
from flowsim.conform import known
from flowsim.conform.guest import (
    IP_HEADER, ScenarioSkipped, _sysctl_path, plan_scenario, probe_ruleset, render_command, render_init, run_archive,
)
from flowsim.conform.harness import plan_traffic, run_conformance, update_doc
from flowsim.conform import parse as cparse
from flowsim.conform.parse import (
    parse_bytes, parse_conntrack, parse_links, parse_nft_json, parse_sockets, results_text, split_sections,
)
from flowsim.errors import ConfigError, TopologyError
from flowsim.kernel.devices.base import Command

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "conform"
SCENARIOS = sorted(glob.glob(str(ROOT / "topologies" / "conform-*.toml")))

MINI = """
[netns.r]
commands = '''
ip link add veth0 type veth peer name eth0 netns h1
ip link add veth1 type veth peer name eth0 netns h2
ip addr add 192.0.2.1/24 dev veth0
ip addr add 198.51.100.1/24 dev veth1
ip link set veth0 up
ip link set veth1 up
'''
sysctls = { "net.ipv4.ip_forward" = 1 }
nft = '''
table inet filter {
  flowtable ft { hook ingress priority 0; devices = { veth0, veth1 }; }
  chain forward { type filter hook forward priority 0; policy accept; meta l4proto udp flow add @ft }
}
'''
[netns.h1]
commands = '''
ip addr add 192.0.2.2/24 dev eth0
ip link set eth0 up
ip route add default via 192.0.2.1
'''
[netns.h2]
commands = '''
ip addr add 198.51.100.2/24 dev eth0
ip link set eth0 up
ip route add default via 198.51.100.1
'''
[[traffic]]
name = "u"
proto = "udp"
from = "h1"
to = "198.51.100.2"
dport = 5000
%s
"""


def mini(extra: str = "", file: str = "mini.toml"):
    return load_topology_text(MINI % extra, file=file)


# ---------------------------------------------------------------------- rendering

@pytest.mark.parametrize("text, netns, expected", [
    ("ip link add veth0 type veth peer name eth0 netns h1", "r",
     "/usr/sbin/ip -n r link add veth0 type veth peer name eth0 netns h1"),
    ("ip -6 route add default via 2001:db8::1", "h1", "/usr/sbin/ip -n h1 -6 route add default via 2001:db8::1"),
    ("ip netns exec h2 ip addr add 192.0.2.9/24 dev eth0", "r", "/usr/sbin/ip -n h2 addr add 192.0.2.9/24 dev eth0"),
    ("bridge vlan add vid 10 dev veth0", "r", "/usr/sbin/bridge -n r vlan add vid 10 dev veth0"),
    ("sysctl -w net.ipv4.ip_forward=1", "r",
     "/usr/sbin/ip netns exec r sh -c 'echo \"$1\" > \"$2\"' sh 1 /proc/sys/net/ipv4/ip_forward"),
])
def test_render_command(text, netns, expected):
    """Topology lines run in their namespace through the real binaries, by full path."""
    assert render_command(Command(text, netns, "t.toml", 3)) == expected


@pytest.mark.parametrize("text", [
    "ip link add ppp0 type pppoe dev eth0 session 1 peer 02:00:00:00:00:01",
    "ip link add lan1 link eth0 type dsa port 1 tagger dsa",
    "ip link add eth0 type ethernet",
    "bridge vlan add vid 10 dev lan1 switchdev off",
])
def test_render_command_refuses_flowsim_extensions(text):
    """What only flowsim can build is refused with the file and line."""
    with pytest.raises(TopologyError, match=r"t\.toml:7"):
        render_command(Command(text, "r", "t.toml", 7))


@pytest.mark.parametrize("key, path", [
    ("net.ipv4.ip_forward", "/proc/sys/net/ipv4/ip_forward"),
    ("net.ipv4.conf.eth0/10.forwarding", "/proc/sys/net/ipv4/conf/eth0.10/forwarding"),
])
def test_sysctl_path(key, path):
    """A '/' in a sysctl key stands for a dot inside a device name, as sysctl(8) reads it."""
    assert _sysctl_path(key) == path


def test_plan_pins_ports_like_the_simulator():
    """Client ports default to 40000 + 100 * file index (flowsim.sim.traffic.EPHEMERAL_BASE)."""
    plan = plan_scenario(load_topology(ROOT / "topologies/conform-forward.toml"))
    assert [t.sport for t in plan.traffic] == [40000, 40100, 40200, 40300]
    assert plan.flowtable_netns == ("r",)
    assert {t.server for t in plan.traffic} == {"ns2"}


def test_plan_finds_the_dnat_target():
    """Traffic to an address nobody owns is accepted where the ruleset DNATs it (port mapped too)."""
    plan = plan_scenario(load_topology(ROOT / "topologies/conform-nat.toml"))
    dnat = next(t for t in plan.traffic if t.name == "tcp-dnat")
    assert (dnat.server, dnat.dst, dnat.dport, dnat.listen_port) == ("ns2", "203.0.113.80", 80, 5201)


def test_plan_raises_a_size_too_small_for_a_socket():
    """A size that leaves no socket payload is raised to the smallest that works, and the plan says so."""
    plan = plan_scenario(mini("size = 20"))
    t = plan.traffic[0]
    assert t.size == 29 and t.reply_size == 29  # IPv4 20 + UDP 8 + one payload byte
    assert len(plan.adjustments) == 2
    assert "traffic 'u' (h1 " in plan.adjustments[0] and "size 20 raised to 29" in plan.adjustments[0]


def test_plan_refuses_tcp_without_handshake():
    """A real TCP stack always does the handshake."""
    text = (MINI % "").replace('proto = "udp"', 'proto = "tcp"\nhandshake = false')
    with pytest.raises(ConfigError, match=r"mini\.toml:\d+: traffic 'u': handshake = false"):
        plan_scenario(load_topology_text(text, file="mini.toml"))


def test_probe_counts_only_where_a_flowtable_is():
    """ct expressions (which turn conntrack on) go only into flowtable namespaces; hosts get input counters."""
    plan = plan_scenario(mini())
    router, client, server = (probe_ruleset(plan, ns) for ns in ("r", "h1", "h2"))
    assert "t0_slow_original" in router and "hook prerouting priority -150" in router
    assert " ct " not in client and " ct " not in server
    assert "t0_in_reply" in client and "t0_in_original" in server


def test_render_init_is_valid_shell():
    """The generated /init parses as POSIX shell, with one function per scenario and its files."""
    topos = [load_topology(p) for p in SCENARIOS[:3]]
    files = render_init([(t, plan_scenario(t, i)) for i, t in enumerate(topos)])
    init = files["init"].decode()
    assert "@SCENARIOS@" not in init and "@RUN@" not in init
    assert all(f"scenario_{i}()" in init for i in range(3))
    assert any(k.endswith("/r.nft") for k in files) and any(k.endswith(".probe.nft") for k in files)
    sh = shutil.which("dash") or shutil.which("sh")
    res = subprocess.run([sh, "-n"], input=init, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def _read_newc(data: bytes) -> dict[str, tuple[int, bytes]]:
    out, pos = {}, 0
    while True:
        head = data[pos:pos + 110]
        assert head[:6] == b"070701"
        f = [int(head[6 + 8 * i:14 + 8 * i], 16) for i in range(13)]
        namesize, filesize, mode = f[11], f[6], f[1]
        name = data[pos + 110:pos + 110 + namesize - 1].decode()
        pos = (pos + 110 + namesize + 3) & ~3
        body = data[pos:pos + filesize]
        pos = (pos + filesize + 3) & ~3
        if name == "TRAILER!!!":
            return out
        out[name] = (mode, body)


def test_cpio_newc_round_trip():
    """The newc writer's archive reads back (names, modes, contents, 4-byte alignment)."""
    entries = [ck.CpioEntry("bin", stat.S_IFDIR | 0o755), ck.CpioEntry("bin/x", stat.S_IFREG | 0o755, b"abc"),
               ck.CpioEntry("bin/y", stat.S_IFLNK | 0o777, b"x"), ck.CpioEntry("dev/console", stat.S_IFCHR | 0o600,
                                                                              rdev=(5, 1))]
    data = ck.cpio_newc(entries)
    assert len(data) % 512 == 0
    got = _read_newc(data)
    assert got["bin/x"] == (stat.S_IFREG | 0o755, b"abc") and got["bin/y"][1] == b"x"
    assert stat.S_ISCHR(got["dev/console"][0])


def test_run_archive_creates_parent_directories():
    """The per-run archive carries the directories of the scenario files."""
    got = _read_newc(gzip.decompress(run_archive({"init": b"#!/bin/sh\n", "conform/s0/r.nft": b"table"})))
    assert stat.S_ISDIR(got["conform"][0]) and stat.S_ISDIR(got["conform/s0"][0])
    assert got["conform/s0/r.nft"][1] == b"table"


def test_modules_dep_and_softdeps(tmp_path):
    """The module closure follows modules.dep and soft dependencies through their aliases."""
    (tmp_path / "modules.dep").write_text("kernel/net/netfilter/nf_tables.ko.xz: kernel/lib/libcrc32c.ko.xz\n"
                                          "kernel/lib/libcrc32c.ko.xz:\nkernel/crypto/crc32c_generic.ko.xz:\n"
                                          "kernel/fs/ext4.ko.xz:\n")
    (tmp_path / "modules.softdep").write_text("softdep libcrc32c pre: crc32c\n")
    (tmp_path / "modules.alias").write_text("alias crc32c crc32c_generic\n")
    assert ck._module_closure(tmp_path) == {"kernel/net/netfilter/nf_tables.ko.xz", "kernel/lib/libcrc32c.ko.xz",
                                            "kernel/crypto/crc32c_generic.ko.xz"}


def test_missing_tool_is_one_clear_error(monkeypatch):
    """A missing host tool without the right to install is one error naming the package to install."""
    monkeypatch.setitem(ck.TOOLS, "no-such-tool-flowsim", ("no-such-package", True))
    with pytest.raises(ck.ConformSetupError, match="apt-get install --no-install-recommends no-such-package"):
        ck.ensure_tools(["no-such-tool-flowsim"], install=False)


def test_cache_dir_follows_xdg(monkeypatch, tmp_path):
    """The cache lives under $XDG_CACHE_HOME/flowsim/conform."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert ck.cache_dir() == tmp_path / "flowsim" / "conform"


# ---------------------------------------------------------------------- parsing

def test_split_sections():
    """Sections keep scenario, kind, namespace and phase; '-' is None; stray lines are ignored."""
    secs = split_sections("noise\n@@ 0 conntrack r mid\na\nb\n@@end\n@@ - done - -\n12.5\n@@end\n")
    assert [(s.scenario, s.kind, s.netns, s.phase, s.text) for s in secs] == [
        ("0", "conntrack", "r", "mid", "a\nb"), (None, "done", None, None, "12.5")]


def test_results_text_plain_gzip_and_concatenated_members(tmp_path):
    """A saved results channel reads as gzip.decompress reads it: plain, one gzip member, or several in turn."""
    text = "@@ 0 conntrack r mid\na\n@@end\n"
    for name, data in [("plain", text.encode()), ("gz", gzip.compress(text.encode())),
                       ("two", gzip.compress(text[:10].encode()) + gzip.compress(text[10:].encode()))]:
        (tmp_path / name).write_bytes(data)
        assert results_text(tmp_path / name) == text, name
    (tmp_path / "bad").write_bytes(b"\x80\xff@@end\n")  # the serial port's stray bytes are replaced, not fatal
    assert results_text(tmp_path / "bad") == "\ufffd\ufffd@@end\n"


@pytest.mark.parametrize("data, says", [
    (gzip.compress(bytes(500))[:-12], "the compressed stream is truncated"),
    (b"\x1f\x8bnot deflate at all", "not a readable gzip file"),
    (gzip.compress(bytes(2048)), "more than 1,000 bytes once decompressed"),  # a gzip bomb, in small
    (bytes(1001), "more than 1,000 bytes, the most a results channel may hold"),  # /dev/zero, in small
], ids=["truncated", "not-deflate", "bomb", "endless"])
def test_results_text_refuses_without_reading_without_end(tmp_path, monkeypatch, data, says):
    """Broken gzip is a ValueError saying so; a file or its decompressed text beyond the bound is refused at the
    bound (an endless device or a gzip bomb would otherwise fill the memory)."""
    monkeypatch.setattr(cparse, "MAX_RESULTS_BYTES", 1000)
    (tmp_path / "r").write_bytes(data)
    with pytest.raises(ValueError, match=says):
        results_text(tmp_path / "r")


def test_parse_conntrack_offloaded_and_classic():
    """Offloaded entries show no timeout and no TCP state; classic ones show both (observation 4)."""
    entries = parse_conntrack((DATA / "conntrack-L.txt").read_text())
    offloaded = [e for e in entries if e.offloaded]
    classic = [e for e in entries if e.state == "TIME_WAIT"]
    assert offloaded and all(e.timeout is None and e.state is None for e in offloaded)
    assert classic and all(e.timeout and "ASSURED" in e.flags and not e.offloaded for e in classic)
    udp = [e for e in entries if e.proto == "udp"]
    assert udp and all({"UNREPLIED", "OFFLOAD"} <= e.flags for e in udp)
    assert udp[0].original.packets == 50 and udp[0].reply.packets == 10


def test_parse_proc_conntrack_canonical_addresses():
    """/proc/net/nf_conntrack prints IPv6 in full; the parser compares it in compressed form."""
    entries = parse_conntrack((DATA / "proc-nf_conntrack.txt").read_text())
    v6 = [e for e in entries if e.family == "ipv6"]
    assert v6 and v6[0].original.src == "2001:db8:1::2"
    assert {e.family for e in entries} == {"ipv4", "ipv6"}


def test_parse_nft_json_rules_and_counters():
    """Rule counters keep their chain position; named counters are keyed by family, table and name."""
    state = parse_nft_json((DATA / "nft-ruleset.json").read_text())
    fwd = [r for r in state.rules if r.table == "filter" and r.chain == "forward"]
    assert [r.index for r in fwd] == [0, 1]
    assert "flow add @ft" in fwd[0].text and fwd[0].packets == 3
    masq = next(r for r in state.rules if r.chain == "postrouting")
    assert "masquerade" in masq.text
    assert ("inet", "flowsim_probe", "t0_slow_original") in state.counters


def test_parse_nft_json_error_is_kept():
    """nft's error text instead of JSON becomes the state's error, not an exception."""
    assert parse_nft_json("Error: syntax error").error.startswith("Error")


def test_parse_links_and_bytes():
    """ip -s -j link gives per-device rx/tx; the bytes section gives file sizes."""
    links = parse_links((DATA / "ip-link.json").read_text())
    assert links["veth0"]["rx_packets"] > 0 and links["lo"]["tx_packets"] == 0
    assert parse_bytes("t0.srv 100\nt0.cli 0\ngarbage\n") == {"t0.srv": 100, "t0.cli": 0}


def test_parse_sockets_reads_retransmissions():
    """ss -tinH: the ports of each socket and, from its tcp_info line, the segments and bytes sent again
    (printed only when non-zero: absent is 0); a line ss did not mean is skipped, not an error."""
    text = ("ESTAB 0      0      10.0.1.99:40000 10.0.2.99:12345\n"
            "\t cubic wscale:7,7 rto:204 rtt:0.5/0.2 mss:1448 retrans:0/4 bytes_retrans:5792 segs_out:60 data_segs_out:52\n"
            "ESTAB 0      0      [2001:db8:1::1]:40001 [2001:db8:3::2]:5201\n"
            "\t cubic wscale:7,7 rto:204 rtt:0.5/0.2 mss:1428 bytes_sent:2000\n"
            "Cannot open netns\n")
    text = text.replace("mss:1428", "mss:1428 segs_out:3")
    a, b = parse_sockets(text)
    assert (a.lport, a.pport, a.retrans, a.bytes_retrans) == (40000, 12345, 4, 5792)
    assert (b.lport, b.pport, b.retrans, b.bytes_retrans) == (40001, 5201, 0, 0)
    # without tcp_diag ss reads /proc/net/tcp (6.12.117's guest before the module was shipped): no tcp_info,
    # so nothing is measured, though the socket is there
    (c,) = parse_sockets("ESTAB 0 0  203.0.113.10:8080  192.0.0.2:40300 rto:0.2 ato:0.04 cwnd:34 reordering:0\n")
    assert (c.lport, c.pport, c.retrans, c.bytes_retrans) == (8080, 40300, None, None)


def test_observe_reads_each_senders_retransmissions_at_mid():
    """The client's socket sends the original direction, the server's (on the port it listens on) the reply;
    a boot without the sockets section measures nothing (None)."""
    from flowsim.conform.observe import observe
    from flowsim.conform.parse import Section
    plan = plan_scenario(load_topology(ROOT / "topologies/conform-forward.toml"))
    t = next(x for x in plan.traffic if x.proto == "tcp")
    sid = str(plan.index)
    sections = [Section(sid, "begin", None, None, plan.name),
                Section(sid, "sockets", t.client, "mid",
                        f"ESTAB 0 0 {t.src}:{t.sport} {t.dst}:{t.dport}\n\t segs_out:9 retrans:0/2 bytes_retrans:300\n"),
                Section(sid, "sockets", t.server, "mid", f"ESTAB 0 0 {t.dst}:{t.listen_port} {t.src}:{t.sport}\n\t segs_out:4\n")]
    c = observe(plan, sections).conns[t.name]
    assert c.retrans == {"original": (2, 300), "reply": (0, 0)}
    assert observe(plan, sections[:1]).conns[t.name].retrans == {"original": None, "reply": None}


def test_measured_retransmissions_replace_the_fixed_allowance():
    """Where the sender's retransmissions were measured the high end of a count of every packet allows exactly
    those (bytes: their payload and a header each), not TCP_RETRANSMITS; counts that see no ACKs allow none."""
    plan = plan_scenario(load_topology(ROOT / "topologies/openwrt-fw4.toml"))
    t = next(x for x in plan.traffic if x.name == "tcp-dslite")
    fixed = cc._tcp_tolerance(t, "reply", True, 60, t.reply_size)
    none = cc._tcp_tolerance(t, "reply", True, 60, t.reply_size, retrans=(0, 0))
    seven = cc._tcp_tolerance(t, "reply", True, 60, t.reply_size, retrans=(7, 7 * 1348))
    assert fixed.high - none.high == cc.TCP_RETRANSMITS * t.reply_size and none.low == fixed.low
    assert seven.high - none.high == 7 * 1348 + 7 * 60 and "7 retransmitted" in seven.why
    assert cc._tcp_tolerance(t, "reply", True, retrans=(7, 7 * 1348)).high == none.high // 60 + 7
    assert cc._tcp_tolerance(t, "reply", False, retrans=(7, 1)) == cc._tcp_tolerance(t, "reply", False)


# ---------------------------------------------------------------------- comparator

@pytest.mark.parametrize("tol, kernel, sim, ok", [
    (cc.EXACT, 5, 5, True),
    (cc.EXACT, 5, 4, False),
    (cc.Tolerance(-1, 2, "x"), 6, 4, True),
    (cc.Tolerance(-1, 2, "x"), 7, 4, False),
    (cc.Tolerance(-1, 2, "x"), 3, 4, True),
    (cc.Tolerance(-1, 2, "x"), 2, 4, False),
    (cc.EXACT, "TIME_WAIT ASSURED", "TIME_WAIT ASSURED", True),
    (cc.Tolerance(-1, 2, "x"), True, False, False),
])
def test_tolerance(tol, kernel, sim, ok):
    """kernel − flowsim must lie within the tolerance; non-numbers compare equal or not."""
    assert tol.accepts(kernel, sim) is ok


@pytest.mark.parametrize("entry, shown", [
    ({"proto": "tcp", "state": "ESTABLISHED", "status": ["SEEN_REPLY", "ASSURED", "OFFLOAD"]}, "OFFLOAD"),
    ({"proto": "tcp", "state": "TIME_WAIT", "status": ["SEEN_REPLY", "ASSURED"]}, "TIME_WAIT ASSURED"),
    ({"proto": "udp", "state": "UNREPLIED", "status": ["CONFIRMED", "OFFLOAD"]}, "UNREPLIED OFFLOAD"),
    ({"proto": "udp", "state": "REPLIED", "status": ["SEEN_REPLY", "CONFIRMED"]}, "-"),
    (None, "(no entry)"),
])
def test_sim_entry_printed_like_conntrack(entry, shown):
    """flowsim's entry is printed by ct_seq_show's rules: no state while offloaded, OFFLOAD instead of ASSURED."""
    assert cc.sim_ct_shown(entry) == shown


@pytest.mark.parametrize("proto, d, acks, low, high", [
    ("udp", "original", True, 0, 0),
    ("tcp", "original", False, -1, 2),
    ("tcp", "reply", True, -1, 2 + 100 + 3),
    ("tcp", "original", True, -1, 2 + 20 + 3),
])
def test_tcp_tolerance(proto, d, acks, low, high):
    """TCP may exceed flowsim by its control packets, plus pure ACKs and retransmissions where counted."""
    plan = plan_scenario(load_topology(ROOT / "topologies/conform-forward.toml"))
    t = next(x for x in plan.traffic if x.proto == proto)
    tol = cc._tcp_tolerance(t, d, acks)
    assert (tol.low, tol.high) == (low, high)


def _replay(kernel: str, paths=SCENARIOS, **kw):
    return run_conformance(paths, kernel, results=str(DATA / f"results-{kernel}.log.gz"), **kw)


@pytest.mark.parametrize("kernel", ["debian-6.12", "debian-6.1"])
def test_recorded_kernel_runs_agree_with_flowsim(kernel):
    """Every fact of the recorded kernel runs agrees with today's simulator (a regression guard, no boot)."""
    result = _replay(kernel)
    bad = [f for f in result.facts if f.status not in ("agrees", "known")]
    assert not bad, "\n" + cc.format_facts(bad)
    assert result.status == 0 and len(result.scenarios) == len(SCENARIOS)


def test_a_wrong_prediction_differs():
    """A simulator that predicts a different UDP slow path is caught, with both values shown."""
    def wrong(path, profile, traffic=None, sequential=False):
        report = cc.simulate(path, profile, traffic, sequential)
        for t in report["traffic"]:
            if t["proto"] == "udp":
                t["directions"]["original"]["fastpath"] -= 1
        return report

    result = _replay("debian-6.12", [str(ROOT / "topologies/conform-forward.toml")], simulate_fn=wrong)
    bad = [f for f in result.facts if f.status == "differs"]
    assert result.status == 1
    assert {(f.subject, f.fact) for f in bad} >= {("udp4", "slow path original"), ("udp4", "fast path original")}
    assert next(f for f in bad if f.fact == "slow path original").kernel == 2


def test_known_difference_does_not_fail(monkeypatch):
    """A listed known difference is reported with its reason and keeps the status at 0."""
    monkeypatch.setattr(known, "KNOWN_DIFFERENCES", [known.KnownDifference(
        "conform-forward", "udp4", "delivered original", ("debian-6.12",), "because", "net/ipv4/x.c: f()")])

    def wrong(path, profile, traffic=None, sequential=False):
        report = cc.simulate(path, profile, traffic, sequential)
        next(t for t in report["traffic"] if t["name"] == "udp4")["directions"]["original"]["delivered"] += 1
        return report

    result = _replay("debian-6.12", [str(ROOT / "topologies/conform-forward.toml")], simulate_fn=wrong)
    listed = [f for f in result.facts if f.status == "known"]
    assert listed and listed[0].note == "because (net/ipv4/x.c: f())" and result.status == 0


def test_guest_error_is_status_2():
    """A scenario the guest could not set up is an error row and exit status 2."""
    text = "@@ 0 begin - 1.0\nconform-forward\n@@end\n@@ 0 error - -\nt.toml:3\nip link add\nRTNETLINK answers: File exists\n@@end\n"
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"flowsim-conform-err-{os.getpid()}.log"
    path.write_text(text)
    try:
        result = run_conformance([str(ROOT / "topologies/conform-forward.toml")], "debian-6.12", results=str(path))
    finally:
        path.unlink()
    assert result.status == 2
    assert result.facts[0].status == "error" and "t.toml:3" in result.facts[0].kernel


def test_results_from_a_pipe_are_read_once(capsys):
    """`conform --results <(ssh router cat results.log)`: the option check, then the replay of each kernel, share
    one read of the pipe (the check used to read a byte of it first, and the replay found no gzip stream)."""
    import threading

    data = (DATA / "results-debian-6.12.log.gz").read_bytes()
    r, w = os.pipe()  # what the shell's <(…) hands over: /dev/fd/N of a pipe (opened again, it is the same pipe)

    def write() -> None:
        with os.fdopen(w, "wb") as fh:
            fh.write(data)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        status = main(["conform", *SCENARIOS, "--kernel", "debian-6.12", "--kernel", "debian-6.1",
                       "--results", f"/dev/fd/{r}", "--results", f"/dev/fd/{r}", "--problems"])
    finally:
        writer.join(timeout=10)
        os.close(r)
    assert status == 0 and capsys.readouterr().out.count(" agree, 0 differ, 0 known differences, 0 not reported "
                                                         "by flowsim, 0 errors") == 2


def test_a_results_file_that_changed_is_read_again(tmp_path):
    """results_text keeps the last text it read, for the same file unchanged only."""
    path = tmp_path / "results.log"
    path.write_text("@@ 0 begin - 1.0\nconform-forward\n@@end\n")
    first = cparse.results_text(path)
    path.write_text("@@ 0 begin - 2.0\nconform-forward\n@@end\n@@ 1 begin - 1.0\nx\n@@end\n")
    assert cparse.results_text(path) != first and "@@ 1 begin" in cparse.results_text(path)


def test_replay_names_the_package_the_boot_recorded(tmp_path):
    """A boot writes kit.json beside its results channel; a replay of it names that package and version (in the
    result and in the docs heading), and one without says it is a saved channel."""
    import shutil

    from flowsim.conform.harness import KIT_FILE, markdown_table

    saved = tmp_path / "results.log.gz"
    shutil.copy(DATA / "results-debian-6.12.log.gz", saved)
    paths = [str(ROOT / "topologies/conform-forward.toml")]
    bare = run_conformance(paths, "debian-6.12", results=str(saved))
    assert (bare.package, bare.version) == ("(saved results)", "")
    assert "6.12.118+deb12-amd64 (saved results), profile" in markdown_table([bare])
    (tmp_path / KIT_FILE).write_text('{"package": "linux-image-6.12.118+deb12-amd64", '
                                     '"version": "6.12.118-1~deb12u1", "release": "6.12.118+deb12-amd64"}\n')
    named = run_conformance(paths, "debian-6.12", results=str(saved))
    assert (named.package, named.version) == ("linux-image-6.12.118+deb12-amd64", "6.12.118-1~deb12u1")
    assert "(linux-image-6.12.118+deb12-amd64 6.12.118-1~deb12u1), profile `linux-6.12`" in markdown_table([named])
    (tmp_path / KIT_FILE).write_text("not json")
    assert run_conformance(paths, "debian-6.12", results=str(saved)).package == "(saved results)"


def test_cli_replay_json_and_doc(tmp_path, capsys):
    """flowsim conform --results prints JSON and can write the docs table between its markers."""
    doc = tmp_path / "c.md"
    doc.write_text("# x\n\n<!-- conform-results:begin -->\nold\n<!-- conform-results:end -->\ntail\n")
    rc = main(["conform", str(ROOT / "topologies/conform-fin.toml"), "--results",
               str(DATA / "results-debian-6.12.log.gz"), "--json", "--update-doc", str(doc)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["status"] == 0 and out["scenarios"][0]["name"] == "conform-fin"
    text = doc.read_text()
    assert "old" not in text and "| conform-fin |" in text and text.endswith("tail\n")


def test_cli_replays_one_saved_run_per_kernel(tmp_path, capsys):
    """Several --kernel, one --results each, in the same order: each kernel's tables come from its own boot, and
    --update-doc writes them all at once, as make conform's boots do."""
    doc = tmp_path / "c.md"
    rc = main(["conform", str(ROOT / "topologies/conform-fin.toml"), "--kernel", "debian-6.12", "--kernel",
               "debian-6.1", "--results", str(DATA / "results-debian-6.12.log.gz"), "--results",
               str(DATA / "results-debian-6.1.log.gz"), "--json", "--update-doc", str(doc)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and [r["kernel"]["release"].split("+")[0][:4] for r in out] == ["6.12", "6.1."]
    text = doc.read_text()
    assert text.index("### 6.12.") < text.index("### 6.1.") and text.count("| conform-fin | 26 | 26 | 0 | 0 | agrees |") == 2


@pytest.mark.parametrize("kernels, files", [(2, 1), (1, 2)])
def test_cli_results_count_must_match_the_kernels(kernels, files, capsys):
    argv = ["conform", str(ROOT / "topologies/conform-fin.toml")]
    argv += [a for k in ["debian-6.12", "debian-6.1"][:kernels] for a in ("--kernel", k)]
    argv += [a for _ in range(files) for a in ("--results", str(DATA / "results-debian-6.12.log.gz"))]
    assert main(argv) == 2
    assert f"{files} --results for {kernels} kernel(s)" in capsys.readouterr().err


def test_cli_unknown_topology_is_exit_2(capsys):
    """A missing topology file is one error line and exit status 2."""
    assert main(["conform", "no-such.toml", "--results", str(DATA / "results-debian-6.12.log.gz")]) == 2
    assert "no-such.toml" in capsys.readouterr().err


def test_update_doc_appends_markers(tmp_path):
    """A document without the markers gets them appended, text kept."""
    doc = tmp_path / "c.md"
    doc.write_text("# mine\n")
    update_doc(doc, [_replay("debian-6.1", [str(ROOT / "topologies/conform-vlan.toml")])])
    text = doc.read_text()
    assert text.startswith("# mine\n") and "| conform-vlan |" in text


def test_plan_refuses_run_events():
    """[[event]] tables need the simulator's virtual clock: conform refuses them with the file and line."""
    text = MINI % "" + '\n[[event]]\nat = 1\nnetns = "r"\ncommand = "ip link set veth0 down"\n'
    with pytest.raises(ScenarioSkipped, match=r"mini\.toml:\d+: \[\[event\]\] at 1.0 s"):
        plan_scenario(load_topology_text(text, file="mini.toml"))


def test_plan_refuses_gso_size():
    """The guest's TCP/UDP stack decides its own GSO sizes: a table's gso_size cannot be reproduced with
    sockets; --frames injects flowsim's GSO skbs, so it plans the table."""
    text = (MINI % "").replace('proto = "udp"', 'proto = "udp"\ngso_size = 1000')
    with pytest.raises(ScenarioSkipped, match=r"mini\.toml:\d+: traffic 'u': gso_size cannot be rendered"):
        plan_scenario(load_topology_text(text, file="mini.toml"))
    assert plan_scenario(load_topology_text(text, file="mini.toml"), frames=True).traffic


def test_nft_json_after_a_warning():
    """nft 1.0.6 warns about an anonymous chain before its JSON (merged stderr): the JSON is still read."""
    text = ('warning: stmt ops chain have no json callback\n'
            '{"nftables": [{"counter": {"family": "inet", "table": "t", "name": "c", "packets": 3, "bytes": 9}}]}')
    state = parse_nft_json(text)
    assert state.error is None and state.counters == {("inet", "t", "c"): (3, 9)}
    assert parse_nft_json("warning: x\nnot json").error == "not json"
    # and its anonymous chain comes as a string statement
    rule = {"rule": {"family": "inet", "table": "t", "chain": "input", "handle": 2, "expr": [
        {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "tcp"}}, "goto {\n\tip dscp cs3 accept\n}"]}}
    assert parse_nft_json(json.dumps({"nftables": [rule]})).error is None


def test_a_flow_torn_down_by_fin_still_counts_as_created_on_the_kernel_side():
    """Debian 6.12 (saved boot of openwrt-fw4 and conform-fin): a short TCP connection's flow is gone by the
    mid-run conntrack snapshot (FIN tears it down: flow_offload_teardown before 6.14), so [OFFLOAD] is never
    seen, but the packets the flowtable stole prove the flow existed — as flowsim's side counts it."""
    paths = [str(ROOT / "topologies" / n) for n in ("openwrt-fw4.toml", "conform-fin.toml")]
    result = run_conformance(paths, "debian-6.12", results=str(DATA / "results-openwrt-fw4-debian-6.12.log.gz"))
    made = {(f.scenario, f.subject): (f.kernel, f.sim, f.status) for f in result.facts
            if f.fact.endswith("offloaded (flow created)")}
    assert made[("openwrt-fw4", "tcp-download")] == (True, True, "agrees")
    assert made[("openwrt-fw4", "udp-upload")] == (True, True, "agrees")
    assert all(status == "agrees" for _, _, status in made.values()), made


def test_probe_counts_data_segments_of_tcp_only():
    """The receiver's input chain counts the TCP segments that carry payload (tcp_segs_in's data_segs_in),
    one rule per data offset; UDP gets none.  nft accepts the rules (checked where nft is installed)."""
    plan = plan_scenario(load_topology(ROOT / "topologies/conform-forward.toml"))
    tcp = next(t for t in plan.traffic if t.proto == "tcp")
    udp = next(t for t in plan.traffic if t.proto == "udp")
    server = probe_ruleset(plan, tcp.server)
    assert f"counter {tcp.tag}_data_original" in server and f"{udp.tag}_data" not in server
    v4 = " tcp doff 8 ip length > 52 " if tcp.family == 4 else " tcp doff 8 ip6 length > 32 "
    assert sum(f"counter name {tcp.tag}_data_original" in line for line in server.splitlines()) == 11
    assert v4 in server


@pytest.mark.parametrize("kernel_segs, measured", [(100, 0), (70, -30), (None, 0), (120, 20)])
def test_measured_segments_move_the_window(kernel_segs, measured):
    """Data segments the kernel's receiver got fewer than the model's widen the low end of facts that count
    every packet by exactly that many (sid under load: 100 one-byte writes in 72 segments), more widen the
    high end (openwrt-fw4's downloads: writes cut at the receive window's edge), and no other; only when
    every byte arrived."""
    from flowsim.conform.observe import ConnObservation
    plan = plan_scenario(load_topology(ROOT / "topologies/conform-forward.toml"))
    t = next(x for x in plan.traffic if x.proto == "tcp")
    c = ConnObservation(t.name, t.proto)
    c.data_segs = {"original": None, "reply": kernel_segs}
    c.bytes = {"original": None, "reply": t.stream_bytes("reply")}
    report = {"data_segs_in": {t.name: {"original": 20, "reply": 100}}}
    n = cc._segments_measured(report, t, c, "reply")
    assert n == measured and cc._segments_measured(report, t, c, "original") == 0
    c.bytes["reply"] -= 1   # a stalled transfer (ip6ip6-over-pppoe on 7.2): fewer segments, not coalesced
    assert cc._segments_measured(report, t, c, "reply") == 0
    base, wide = cc._tcp_tolerance(t, "reply", True), cc._tcp_tolerance(t, "reply", True, segments=n)
    assert (wide.low, wide.high) == (base.low + min(measured, 0), base.high + max(measured, 0))
    assert ("writes coalesced" in wide.why) == (measured < 0) and ("writes split" in wide.why) == (measured > 0)
    assert cc._tcp_tolerance(t, "reply", False, segments=n) == cc._tcp_tolerance(t, "reply", False)


def test_split_writes_may_leave_a_slow_path_that_the_model_takes_in_bulk():
    """-nopmtu tables (2000-byte writes over a 1500-byte link, fragmented on the slow path): a write the
    kernel split leaves the slow path when its pieces fit the flow's MTU (nf_flow_exceeds_mtu no longer
    holds): a slow-path count may lose the write, bytes included, and the fast path gain both pieces."""
    plan = plan_scenario(load_topology(ROOT / "topologies/selftest-nat-pmtu.toml"))
    t = next(x for x in plan.traffic if x.name == "tcp-dnat-1666-nopmtu")
    base = cc._tcp_tolerance(t, "reply", True, 60, t.reply_size, segments=3)
    leaves = cc._tcp_tolerance(t, "reply", True, 60, t.reply_size, segments=3, split="leaves")
    assert (leaves.low, leaves.high) == (base.low - 3 * 60 - 3 * t.reply_size, base.high)
    joins = cc._tcp_tolerance(t, "reply", True, segments=3, split="joins")
    assert joins.high == cc._tcp_tolerance(t, "reply", True, segments=3).high + 6
    assert "3 split writes fast-pathed" in joins.why
    # only where the model has a flow but sends the direction through the slow path in bulk
    bulk_slow = {"sent": 54, "slowpath": 51, "fastpath": 3}
    assert cc._split_path(plan, bulk_slow, "leaves") == "leaves"
    assert cc._split_path(plan, {"sent": 54, "slowpath": 54, "fastpath": 0}, "leaves") == ""
    assert cc._split_path(plan, {"sent": 54, "slowpath": 3, "fastpath": 51}, "joins") == ""
    assert cc._tcp_tolerance(t, "reply", True, segments=-3, split="leaves") == \
        cc._tcp_tolerance(t, "reply", True, segments=-3)


def test_probe_counts_data_segments_shorter_than_the_writes():
    """The receiver's input chain also counts the data segments shorter than the direction's writes (IP length
    below the table's size, one range per data offset): the pieces of writes the sender cut.  IPv6's length
    field leaves out the 40-byte header."""
    plan = plan_scenario(load_topology(ROOT / "topologies/selftest-base.toml"))
    v4 = next(t for t in plan.traffic if t.name == "tcp-12345")
    v6 = next(t for t in plan.traffic if t.name == "tcp6-12345")
    client = probe_ruleset(plan, v4.client)
    assert f"counter {v4.tag}_short_reply" in client
    assert f"tcp doff 8 ip length 53-{v4.reply_size - 1} counter name {v4.tag}_short_reply" in client
    assert sum(f"counter name {v4.tag}_short_reply" in line for line in client.splitlines()) == 11
    assert f"tcp doff 8 ip6 length 33-{v6.reply_size - 41} counter name {v6.tag}_short_reply" in \
        probe_ruleset(plan, v6.client)
    # writes of one byte behind a bare TCP header: no data segment can be shorter, no counter
    small = attrs.evolve(v4, size=20 + 20 + 1)
    assert gmod._short_segment(small, small.size) == []


def test_measured_short_pieces_bound_what_the_slow_path_loses():
    """6.12.117, selftest-base tcp-12345 reply (-nopmtu: 2000-byte writes, a 1500-byte flow MTU): the kernel's
    receiver counted one data segment more than the model's, but nsr1's slow path lost 2336 bytes, more than
    one write.  The short-segment counters see every cut piece, merges elsewhere notwithstanding: the low end
    moves by the pieces and their bytes; a boot without the counters keeps the whole-write rule."""
    from flowsim.conform.observe import ConnObservation
    plan = plan_scenario(load_topology(ROOT / "topologies/selftest-base.toml"))
    t = next(x for x in plan.traffic if x.name == "tcp-12345")
    c = ConnObservation(t.name, t.proto)
    c.bytes = {"original": t.stream_bytes("original"), "reply": t.stream_bytes("reply")}
    c.short_segs = {"original": None, "reply": (3, 3 * 1400 + 52)}
    report = {"short_segs_in": {t.name: {"original": [0, 0], "reply": [0, 0]}}}
    short = cc._short_measured(report, t, c, "reply")
    assert short == (3, 4252) and cc._short_measured(report, t, c, "original") is None
    hdr = 60
    whole = cc._tcp_tolerance(t, "reply", True, hdr, t.reply_size, segments=1, split="leaves")
    measured = cc._tcp_tolerance(t, "reply", True, hdr, t.reply_size, segments=1, split="leaves", short=short)
    base = cc._tcp_tolerance(t, "reply", True, hdr, t.reply_size, segments=1)
    assert whole.low == base.low - hdr - t.reply_size  # one write, the rule before the counters
    assert measured.low == base.low - 2 * hdr - 4252 and measured.high == base.high  # kernel − model >= 1 − 3
    assert "3 short pieces fast-pathed" in measured.why
    assert base.low > 97776 - 100112 >= measured.low  # the 6.12.117 row, now inside
    # no more short pieces than the model's: nothing left the slow path, the window stays
    assert cc._tcp_tolerance(t, "reply", True, hdr, t.reply_size, segments=1, split="leaves", short=(0, 0)) == base
    c.bytes["reply"] -= 1  # a stalled transfer: nothing measured
    assert cc._short_measured(report, t, c, "reply") is None


def test_simulation_counts_data_segments_per_receiver():
    """simulate() reports each receiver's data segments (Endpoint.data_segs_in): one per write of a table
    whose writes fit the MSS, none for UDP."""
    report = cc.simulate(str(ROOT / "topologies/conform-forward.toml"), "linux-6.12")
    topo = load_topology(ROOT / "topologies/conform-forward.toml")
    for spec in topo.traffic:
        want = {"original": spec.packets, "reply": spec.reply_packets} if spec.proto == "tcp" else \
            {"original": 0, "reply": 0}
        assert report["data_segs_in"][spec.name] == want
        # each write one segment of the table's size: none shorter
        assert report["short_segs_in"][spec.name] == {"original": [0, 0], "reply": [0, 0]}


def test_socat_mode_simulates_a_server_that_replies_after_the_first_data():
    """The guest's server writes once the client's first byte arrived, so the client's first segment arrives
    (and is quick-ACKed) before any reply: the plan simulates TCP with reply_after = "data" and says so;
    --frames plays flowsim's own frames and keeps the table's."""
    topo = load_topology(ROOT / "topologies/conform-forward.toml")
    plan = plan_scenario(topo)
    assert {t.reply_after for t in plan.traffic if t.proto == "tcp"} == {"data"}
    assert {t.reply_after for t in plan.traffic if t.proto == "udp"} == {"accept"}
    assert any('reply_after = "data"' in a for a in plan.adjustments)
    specs = plan_traffic(topo, plan)
    assert {s.reply_after for s in specs if s.proto == "tcp"} == {"data"}
    assert {t.reply_after for t in plan_scenario(topo, frames=True).traffic} == {"accept"}


def test_an_unreplied_udp_entry_outlives_its_flow_on_6_1():
    """Debian 6.1.192 (saved boot of openwrt-fw4): udp-upload's replies all took the fast path, so its entry
    never saw a reply (UNREPLIED); when the flow expires, 6.1's flow_offload_fixup_ct gives it
    udp_timeouts[UDP_CT_REPLIED] less the offload timeout (OpenWrt's nf_conntrack_udp_timeout_stream, 180 s,
    less 30 s), so the entry is still listed at the end, where 6.12 (by IPS_SEEN_REPLY: OpenWrt's
    nf_conntrack_udp_timeout, 60 s, less 30 s) and later have let it go (profile switch fixup_ct_timeout)."""
    result = run_conformance([str(ROOT / "topologies" / "openwrt-fw4.toml")], "debian-6.1",
                             results=str(DATA / "results-openwrt-fw4-debian-6.1.log.gz"))
    assert result.status == 0, result.text()
    end = {f.subject: (f.kernel, f.sim) for f in result.facts if f.fact.endswith("conntrack shows at end")}
    assert "UNREPLIED" in str(end["udp-upload"][0]) and end["udp-upload"][0] == end["udp-upload"][1]
    # the 6.12 profile on the same boot misses the entry: the switch decides it
    flipped = run_conformance([str(ROOT / "topologies" / "openwrt-fw4.toml")], "debian-6.1",
                              results=str(DATA / "results-openwrt-fw4-debian-6.1.log.gz"),
                              settings=["fixup_ct_timeout=state"])
    assert flipped.status == 1


@pytest.mark.parametrize("kernel", ["debian-sid", "debian-experimental"])
def test_black_holed_acks_stall_the_real_and_the_simulated_sender_alike(kernel):
    """ip6ip6-over-pppoe on 7.2.13 and 7.3-rc7 (saved socat boots): the download's ACKs are fast-pathed into the
    PPPoE session with tun0's address as source MAC and the BRAS's pppoe_rcv drops them, so the real server
    stops after its initial window and retransmits its first segment on the backed-off RTO
    (tcp_retransmit_timer); flowsim's sender (SendState) stalls alike instead of sending its 200 writes.  The
    fast-path fact follows the kernel side's rule for TCP (delivered less the slow path): the replies the
    flowtable forwarded and the BRAS dropped count on neither side."""
    result = run_conformance([str(ROOT / "topologies" / "ip6ip6-over-pppoe.toml")], kernel,
                             results=str(DATA / f"results-ip6ip6-over-pppoe-{kernel}.log.gz"))
    assert result.status == 0, result.text()
    facts = {f.fact: f for f in result.facts if f.subject == "tcp-download"}
    assert len(facts) == 12 and all(f.status == "agrees" for f in facts.values())
    # SYN, ACK, the initial window of 10 and the RTO retransmissions: far from the 200 writes (+ handshake)
    sent = facts["delivered original"]
    assert 2 + 10 < sent.sim <= sent.kernel < 30
    (scenario,) = result.scenarios
    (traffic,) = [t for t in scenario.report["traffic"] if t["name"] == "tcp-download"]
    assert facts["fast path reply"].kernel == facts["fast path reply"].sim == 0
    assert traffic["directions"]["reply"]["fastpath"] > 0  # what the flowtable itself forwarded


def test_short_pieces_explain_the_nopmtu_byte_totals_on_6_12():
    """Debian 6.12.117 (saved boot with the short-segment counters, 2026-12-02): in selftest-dscp-egress's
    and selftest-nat-pmtu's -nopmtu tables the server's 2000-byte writes left partly cut (tcp_write_xmit →
    tcp_mss_split_point): one data segment more than the writes at the client, but five short pieces, and
    nsr1's slow path lost 2252 bytes, more than one write.  The whole-write rule put them 12 bytes outside;
    the measured pieces put them inside, and every other fact of both scenarios agrees.  6.12.117 still derived
    the advertised MSS from the configured MTU (ip_dst_mtu_configured), which 6.12.118 and the linux-6.12 profile
    no longer do: the replay sets it back."""
    topologies = [str(ROOT / "topologies" / f"{name}.toml") for name in ("selftest-dscp-egress", "selftest-nat-pmtu")]
    result = run_conformance(topologies, "debian-6.12", results=str(DATA / "results-nopmtu-debian-6.12.log.gz"),
                             settings=["advmss_mtu=configured"])
    assert result.status == 0, result.text()
    rows = [f for f in result.facts if f.fact == "nsr1: ct bytes reply"
            and f.subject in ("tcp-12345-nopmtu", "tcp-masquerade-nopmtu")]
    assert [(f.kernel, f.sim) for f in rows] == [(97860, 100112), (97860, 100112)]
    assert all("5 short pieces fast-pathed" in f.tolerance for f in rows)
    plan = plan_scenario(load_topology(topologies[0]))
    t = next(x for x in plan.traffic if x.name == "tcp-12345-nopmtu")
    whole = cc._tcp_tolerance(t, "reply", True, IP_HEADER[4] + 40, t.reply_size, segments=1, split="leaves")
    assert not whole.accepts(97860, 100112)  # the rule before the counters


def test_measured_retransmissions_explain_a_dslite_download_on_6_12():
    """Debian 6.12.117 (saved boot of openwrt-fw4 with the sockets' tcp_info, 2026-12-02): under the host's
    load the DS-Lite server sent 7 segments again, 5412 bytes (tcpi_total_retrans, tcpi_bytes_retrans), more
    than the 3 the fixed allowance grants, and the router's ct bytes reply came 8948 bytes above flowsim's.
    The measured allowance covers exactly them; every fact of the topology agrees."""
    topology = str(ROOT / "topologies" / "openwrt-fw4.toml")
    result = run_conformance([topology], "debian-6.12", results=str(DATA / "results-retrans-debian-6.12.log.gz"))
    assert result.status == 0, result.text()
    row = next(f for f in result.facts if f.subject == "tcp-dslite" and f.fact == "router: ct bytes reply")
    assert (row.kernel, row.sim) == (289112, 280164) and "7 retransmitted" in row.tolerance
    (scenario,) = result.scenarios
    assert scenario.observation.conns["tcp-dslite"].retrans == {"original": (0, 0), "reply": (7, 5412)}
