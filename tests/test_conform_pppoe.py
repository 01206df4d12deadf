"""flowsim conform: a topology's ``type pppoe`` pair as a real kernel-mode PPPoE session (flowsim/conform/pppoe.py).

Without qemu: the pairing of the two lines, the order the guest runs them
in, pppd's options files, the quoting of names, and the refusals.  One slow
test boots Debian sid (about a minute under TCG, skipped without root or a
mirror) and checks that the session is a kernel-mode one with the
topology's id and peers; the frame-exact results on 7.2 and 7.3 are in
docs/conformance.md.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from flowsim.config.topology import load_topology, load_topology_text
from flowsim.conform import pppoe
from flowsim.conform.guest import (UNSUPPORTED_KINDS, ScenarioSkipped, plan_scenario, render_command,
                                   render_scenario, topology_commands)
from flowsim.errors import TopologyError
from flowsim.kernel.devices.base import Command

TOPOLOGIES = Path(__file__).resolve().parent.parent / "topologies"

MINI = """
[netns.{a}]
commands = '''
ip link add eth0 address 02:00:00:00:00:0a type veth peer name eth0 address 02:00:00:00:00:0b netns {bq}
ip link set eth0 up
ip link add ppp0 type pppoe dev eth0 session {sid} peer {peer_a}{extra}
ip link set ppp0 up
ip addr add 10.0.0.1 peer 10.0.0.2/32 dev ppp0
ip addr add 2001:db8::1/64 dev ppp0
ip route add default dev ppp0
'''

[netns.{b}]
commands = '''
ip link set eth0 up
ip link add ppp0 type pppoe dev eth0 session {sid} peer 02:00:00:00:00:0a
ip link set ppp0 up
ip addr add 10.0.0.2 peer 10.0.0.1/32 dev ppp0
'''
"""


def mini(a="cpe", b="bras", sid="0x0042", peer_a="02:00:00:00:00:0b", extra=""):
    return load_topology_text(MINI.format(a=json.dumps(a), b=json.dumps(b), bq=shlex.quote(b), sid=sid, peer_a=peer_a, extra=extra),
                              "mini.toml")


def test_pppoe_is_no_longer_an_unsupported_kind():
    assert "pppoe" not in UNSUPPORTED_KINDS


def test_pairing_of_the_shipped_topologies():
    """pppoe-over-vlan: IPv4 through IPCP and IPv6; ip6ip6-over-pppoe: IPv6 only (noip)."""
    (s,) = pppoe.find_sessions(load_topology(TOPOLOGIES / "pppoe-over-vlan.toml"))
    assert (s.client.netns, s.client.lower, s.server.netns, s.server.lower) == ("cpe", "eth1.7", "bras", "eth0.7")
    assert (s.client.session, s.client.peer, s.server.peer) == (0x42, "02:00:00:00:07:01", "02:00:00:00:07:02")
    assert s.v4 == ("100.64.0.1", "100.64.0.2") and s.v6
    assert s.client.mtu == s.server.mtu == 1492     # the VLAN device's 1500 minus the PPPoE header
    (s,) = pppoe.find_sessions(load_topology(TOPOLOGIES / "ip6ip6-over-pppoe.toml"))
    assert (s.client.session, s.v4, s.v6) == (0x1234, None, True)


def test_session_lines_run_after_all_others():
    """Both Ethernet ends exist before the session; the IPv4 line IPCP configured is left out."""
    cmds = topology_commands(load_topology(TOPOLOGIES / "pppoe-over-vlan.toml"))
    assert list(cmds) == ["cpe", "bras", "client", "server", "pppoe"]
    for ns in ("cpe", "bras"):
        assert not any("ppp0" in c.text for c in cmds[ns])
    late = cmds["pppoe"]
    assert isinstance(late[0], pppoe.SessionStart) and (late[0].file, late[0].line) == (late[0].session.client.cmd.file,
                                                                                         late[0].session.client.cmd.line)
    assert [(c.netns, c.text) for c in late[1:]] == [
        ("cpe", "ip link set ppp0 up"),
        ("cpe", "ip addr add 2001:db8:ff::2/64 dev ppp0 nodad"),
        ("cpe", "ip route add default dev ppp0"),
        ("cpe", "ip -6 route add default dev ppp0"),
        ("bras", "ip link set ppp0 up"),
        ("bras", "ip addr add 2001:db8:ff::1/64 dev ppp0 nodad"),
        ("bras", "ip link set eth1 up"),  # every later line of the namespace, in file order
        ("bras", "ip addr add 198.51.100.1/24 dev eth1"),
        ("bras", "ip addr add 2001:db8:100::1/64 dev eth1 nodad"),
    ]


def test_a_tunnel_over_the_session_is_created_after_it():
    """ip6ip6-over-pppoe: tun0's route to its remote goes over ppp0, and ip6_tnl_link_config takes the tunnel's MTU
    from that route when the device is created (1492 - 40 = 1452, flowsim's); created before the session it found
    no route and took ETH_DATA_LEN - 40 = 1460, so the guest's tunnel was not the file's."""
    cmds = topology_commands(load_topology(TOPOLOGIES / "ip6ip6-over-pppoe.toml"))
    assert not any("tun0" in c.text for c in cmds["cpe"])
    late = [c.text for c in cmds["pppoe"][1:] if c.netns == "cpe"]
    assert late.index("ip -6 route add 2001:db8:2::/64 dev ppp0") < late.index(
        "ip link add tun0 type ip6tnl mode ip6ip6 local 2001:db8:ff::2 remote 2001:db8:2::2 encaplimit none")
    assert late[-1] == "ip -6 route add default via 2002:db8:1::2 dev tun0"


def test_a_later_line_for_another_namespace_stays_in_place():
    """A veth created after the session line with its peer in another namespace is created before that
    namespace's lines need the peer; a device the deferred lines create is deferred with them."""
    topo = mini(extra="\nip link add vx type veth peer name vx netns \"bras\"\nip link add va type veth peer name vb"
                      "\nip link set vb netns \"bras\"")
    cmds = topology_commands(topo)
    assert 'ip link add vx type veth peer name vx netns "bras"' in [c.text for c in cmds["cpe"]]
    late = [c.text for c in cmds["pppoe"][1:] if c.netns == "cpe"]
    assert late[:2] == ["ip link add va type veth peer name vb", 'ip link set vb netns "bras"']
    assert pppoe._created_devices(["ip", "link", "add", "link", "eth0", "name", "e7", "type", "vlan"]) == {"e7"}
    assert pppoe._created_devices(["ip", "link", "add", "tun0", "type", "ip6tnl"]) == {"tun0"}
    assert pppoe._created_devices(["ip", "link", "set", "tun0", "up"]) == set()
    assert pppoe._created_devices(["ip", "-6", "link", "add", "dev", "t6", "type", "ip6tnl"]) == {"t6"}
    assert pppoe._created_devices(["ip", "link", "add", "va", "type", "veth", "peer", "name", "vb"]) == {"va", "vb"}


def test_ipv6_address_gets_nodad():
    late = topology_commands(mini())["pppoe"]
    assert ("cpe", "ip addr add 2001:db8::1/64 dev ppp0 nodad") in [(c.netns, c.text) for c in late[1:]]
    assert not any(c.text.startswith("ip addr add 10.0.0.") for c in late[1:])


def _lines(text: str) -> list[str]:
    return text.splitlines()[1:]  # after the comment


def test_options_files():
    """Kernel-mode plugin attached to the topology's session, nothing that adds traffic or changes addresses."""
    (s,) = pppoe.find_sessions(load_topology(TOPOLOGIES / "pppoe-over-vlan.toml"))
    client = _lines(pppoe.options(s, "client"))
    assert client[:4] == ["plugin /etc/ppp/plugins/rp-pppoe.so", "nic-eth1.7",
                          "rp_pppoe_sess 66:02:00:00:00:07:01", "nodetach"]  # the plugin reads the id in decimal
    for line in ("ifname ppp0", "noauth", "mtu 1492", "mru 1492", "lcp-echo-interval 0", "lcp-echo-failure 0",
                 "noccp", "novj", "nopcomp", "noaccomp", "noipdefault", "nodefaultroute", "noproxyarp", "noktune",
                 "nopersist", "100.64.0.2:100.64.0.1", "+ipv6", "ipv6 ::2,::1"):
        assert line in client, line
    assert not {"persist", "defaultroute", "usepeerdns", "demand"} & set(client)
    server = _lines(pppoe.options(s, "server"))
    assert "rp_pppoe_sess 66:02:00:00:00:07:02" in server and "nic-eth0.7" in server
    assert "100.64.0.1:100.64.0.2" in server and "ipv6 ::1,::2" in server
    (s,) = pppoe.find_sessions(load_topology(TOPOLOGIES / "ip6ip6-over-pppoe.toml"))
    client = _lines(pppoe.options(s, "client"))
    assert "rp_pppoe_sess 4660:02:00:00:00:11:01" in client and "noip" in client and "+ipv6" in client
    assert not any(":" in x and x[0].isdigit() for x in client if not x.startswith("rp_pppoe_sess"))


def test_mtu_of_the_line_wins():
    text = MINI.format(a='"cpe"', b='"bras"', bq="bras", sid="7", peer_a="02:00:00:00:00:0b", extra="")
    (s,) = pppoe.find_sessions(load_topology_text(text.replace("add ppp0 type", "add ppp0 mtu 1400 type", 1), "m.toml"))
    assert s.client.mtu == 1400 and "mtu 1400" in pppoe.options(s, "client").splitlines()


def test_session_script_waits_checks_and_explains():
    (s,) = pppoe.find_sessions(load_topology(TOPOLOGIES / "pppoe-over-vlan.toml"))
    script = pppoe.session_script(s)
    assert "pppoe-server" not in script           # Debian's has no kernel mode (no -k): a pty session
    assert script.count("/usr/sbin/pppd file") == 2
    assert f"-ge {pppoe.UP_TIMEOUT}" in script and "logs; exit 1" in script
    # /proc/net/pppoe lists only kernel-mode sessions; the __be16 id is printed byte-swapped on x86
    assert "'^0000(0042|4200) 02:00:00:00:07:01 +eth1\\.7$'" in script
    # flowsim's MACs on the Ethernet devices, the real device first, before any pppd
    setmac = [line for line in script.splitlines() if " address " in line]
    assert setmac[2:] == ["/usr/sbin/ip -n cpe link set dev eth1 address 02:00:00:00:07:02 || exit 1",
                          "/usr/sbin/ip -n cpe link set dev eth1.7 address 02:00:00:00:07:02 || exit 1"]
    assert script.index(setmac[-1]) < script.index("/usr/sbin/pppd")
    if shutil.which("sh"):
        assert subprocess.run(["sh", "-n", "-c", script], capture_output=True).returncode == 0


@pytest.mark.parametrize("a, b", [("cpe", "bras"), ("c;touch x", "b$(reboot)"), ("a'b", 'q"r')])
def test_names_are_quoted(a, b):
    """Namespace names from the file reach the guest as single words, never as shell text."""
    start = topology_commands(mini(a=a, b=b))["pppoe"][0]
    words = shlex.split(render_command(start))
    assert words[:2] == ["sh", "-c"] and words[3:] == ["sh", "$S"]
    script = words[2]
    pppd = [shlex.split(line.split(" </dev/null")[0]) for line in script.splitlines() if "/usr/sbin/pppd file" in line]
    assert [p[3] for p in pppd] == [b, a]
    if shutil.which("sh"):
        assert subprocess.run(["sh", "-n", "-c", script], capture_output=True).returncode == 0


def test_rendered_scenario_has_the_session_before_the_traffic():
    topo = load_topology(TOPOLOGIES / "ip6ip6-over-pppoe.toml")
    text = render_scenario(topo, plan_scenario(topo))
    assert text.index("/usr/sbin/pppd file") < text.index("harness_settings") < text.index("note traffic")
    assert text.index("/usr/sbin/pppd file") < text.index("ip -n cpe -6 route add 2001:db8:2::/64 dev ppp0")


def test_bare_pppoe_line_is_not_rendered_alone():
    with pytest.raises(TopologyError, match=r"t\.toml:7"):
        render_command(Command("ip link add ppp0 type pppoe dev eth0 session 1 peer 02:00:00:00:00:01", "r",
                               "t.toml", 7))


@pytest.mark.parametrize("text, match", [
    ("ip link add ppp0 type pppoe dev eth0 peer 02:00:00:00:00:01", "missing: session"),
    ("ip link add ppp0 type pppoe dev eth0 session 7", "missing: peer"),
    ("ip link add ppp0 type pppoe session 7 peer 02:00:00:00:00:01", "missing: dev"),
    ("ip link add ppp0 type pppoe dev eth0 session 0 peer 02:00:00:00:00:01", "not a session id"),
    ("ip link add ppp0 type pppoe dev eth0 session 7 peer 02:00:00:00:00", "not a MAC"),
])
def test_refuses_an_incomplete_line(text, match):
    with pytest.raises(TopologyError, match=match):
        pppoe._end(None, Command(text, "r", "t.toml", 3))


@pytest.mark.parametrize("kwargs, match", [
    ({"peer_a": "02:00:00:00:00:0c"}, "is not the MAC of bras/eth0"),
    ({"extra": " multilink"}, "multilink cannot be set up"),
])
def test_skips_what_pppd_cannot_build(kwargs, match):
    with pytest.raises(ScenarioSkipped, match=match):
        plan_scenario(mini(**kwargs))


def test_skips_a_session_with_one_end():
    text = MINI.format(a='"cpe"', b='"bras"', bq="bras", sid="0x42", peer_a="02:00:00:00:00:0b", extra="").replace(
        "ip link add ppp0 type pppoe dev eth0 session 0x42 peer 02:00:00:00:00:0a\n"
        "ip link set ppp0 up\nip addr add 10.0.0.2 peer 10.0.0.1/32 dev ppp0\n", "")
    with pytest.raises(ScenarioSkipped, match="both ends"):
        topology_commands(load_topology_text(text, "mini.toml"))


def test_frames_mode_must_leave_the_session_devices_alone():
    """The devices whose MAC change (even to the same address) would flush the session (pppoe_device_event)."""
    topo = load_topology(TOPOLOGIES / "pppoe-over-vlan.toml")
    assert pppoe.lower_devices(topo) == {("cpe", "eth1.7"), ("cpe", "eth1"), ("bras", "eth0.7"), ("bras", "eth0")}


@pytest.mark.slow
def test_real_kernel_session_comes_up(tmp_path):
    """Debian sid (7.2) in qemu: ip6ip6-over-pppoe's session is a kernel-mode PPPoE session with the topology's
    id and peers, and the flow over it is offloaded as flowsim says (socat mode, 10 packets a direction)."""
    import os

    from flowsim.conform.harness import ConformSetupError, run_conformance
    from flowsim.conform.parse import split_sections
    try:
        result = run_conformance([str(TOPOLOGIES / "ip6ip6-over-pppoe.toml")], "debian-sid", max_packets=10,
                                 workdir=tmp_path)
    except ConformSetupError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"conformance set-up failed in CI: {exc}")
        pytest.skip(f"conformance set-up not possible here: {exc}")
    assert not [f for f in result.facts if f.status == "error"]
    notes = "\n".join(s.text for s in split_sections((tmp_path / "results.log").read_text()) if s.kind == "note")
    assert "PPPoE session 0x1234 cpe/ppp0 - bras/ppp0 (pppd): up after" in notes
    assert "00003412 02:00:00:00:11:01     eth1" in notes and "00003412 02:00:00:00:11:02     eth0" in notes
    offloaded = [f for f in result.facts if f.fact == "cpe: offloaded (flow created)"]
    assert [(f.kernel, f.sim) for f in offloaded] == [(True, True)]
