"""The guest's ends put the first reply where the simulation puts it (flowsim.conform.guest: udp_order, and
the TCP server that writes after the client's first byte, as reply_after = "data" simulates).

Whether the client's second datagram or the server's first reply meets the router first decides whether
conntrack sees a reply before nft_flow_offload_eval adds the flow (net/netfilter/nft_flow_offload.c): the flow
is added at the second original packet (the first confirmed one), and every later reply takes the fast path,
so the entry stays [UNREPLIED].  socat forks its child at the first datagram, so in the guest the order was a
race.  These tests run the very shell lines the guest runs, with socat over the loopback, against a Python
peer that plays the other end slowly.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowsim.conform.guest import IP, TrafficPlan, _traffic_start, udp_order

pytestmark = pytest.mark.skipif(not (shutil.which("socat") and shutil.which("busybox")),
                                reason="socat and busybox (usleep) are needed")


def _plan(rate: float, port: int, packets: int = 4, reply_packets: int = 4, proto: str = "udp") -> TrafficPlan:
    return TrafficPlan(index=7, name="u", proto=proto, family=4, client="c", server="s", src="127.0.0.1",
                       dst="127.0.0.1", dport=port, listen_port=port, sport=port + 1, packets=packets, size=100,
                       reply_packets=reply_packets, reply_size=100, close=False, rate=rate)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(line: str, tmp: Path, bindir: Path) -> subprocess.Popen:
    """One of the guest's background lines, without its netns and $PIDS bookkeeping, files under *tmp* (a
    short path: socat's address length is checked for the guest's /tmp)."""
    m = re.fullmatch(rf"{re.escape(IP)} netns exec \S+ (.*) & t\d+_(srv|cli)=\$!; PIDS=.*", line)
    assert m, line
    command = m.group(1).replace("/tmp/t7", str(tmp / "t7"))
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    return subprocess.Popen(command, shell=True, env=env, start_new_session=True)


def _wait_udp_bound(port: int) -> None:
    """Until a socket is bound to UDP *port* on 127.0.0.1 or any address (/proc/net/udp), as the guest's wait_listen
    waits: a fixed sleep lost the first datagram on a loaded machine, and the test then waited for a reply that
    never came."""
    bound = {f"0100007F:{port:04X}", f"00000000:{port:04X}"}
    for _ in range(200):
        with open("/proc/net/udp") as f:
            if any(line.split()[1] in bound for line in f.readlines()[1:]):
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing bound UDP port {port} in 10 s")


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="fr", dir="/tmp"))
    yield d
    shutil.rmtree(d)


@pytest.fixture
def bindir(tmp_path: Path) -> Path:
    """usleep, which the guest's busybox has and Debian's userland does not."""
    d = tmp_path / "bin"
    d.mkdir()
    (d / "usleep").symlink_to(shutil.which("busybox"))
    return d


def _stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, 9)
    proc.wait()


def test_back_to_back_server_answers_after_the_second_datagram(tmp_path, bindir):
    """rate = 0: the simulated second datagram passes the router before the first reply: the guest's server
    waits for two datagrams, however slowly the second comes."""
    port = _free_port()
    srv_line = _traffic_start(_plan(0, port))[0]
    proc = _spawn(srv_line, tmp_path, bindir)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as c:
            c.settimeout(0.6)
            _wait_udp_bound(port)                # socat listening (wait_listen in the guest)
            c.sendto(b"\0" * 72, ("127.0.0.1", port))
            with pytest.raises(socket.timeout):  # socat forked its child at once: no answer to one datagram
                c.recv(2048)
            c.sendto(b"\0" * 72, ("127.0.0.1", port))
            c.settimeout(5)
            assert len(c.recv(2048)) == 72
    finally:
        _stop(proc)


def test_paced_client_waits_for_the_first_reply(tmp_path, bindir):
    """rate > 0: the simulated reply passes the router before the next datagram: the guest's client sends
    its second datagram only after the first reply came, even when the server answers after the gap."""
    port = _free_port()
    plan = _plan(20, port)                       # a 50 ms gap; the server below answers after 400 ms
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", port))
        s.settimeout(5)
        proc = _spawn(_traffic_start(plan)[2], tmp_path, bindir)
        try:
            _, peer = s.recvfrom(2048)
            s.settimeout(0.4)
            with pytest.raises(socket.timeout):  # nothing more while no reply arrived
                s.recvfrom(2048)
            s.sendto(b"\0" * 72, peer)
            s.settimeout(5)
            got = [s.recvfrom(2048)[0] for _ in range(plan.packets - 1)]
            assert [len(g) for g in got] == [72] * (plan.packets - 1)
        finally:
            _stop(proc)


def test_tcp_server_writes_after_the_first_byte(tmp_path, bindir):
    """socat forks the server's writer at accept; the guest's writer starts only once the client's first
    byte arrived (whether the client's first segment or the server's passed the router first was a race of
    the two processes, seen on 6.1), as the simulated server with reply_after = "data"."""
    port = _free_port()
    proc = _spawn(_traffic_start(_plan(0, port, proto="tcp"))[0], tmp_path, bindir)
    try:
        for _ in range(100):
            try:
                c = socket.create_connection(("127.0.0.1", port), timeout=0.5)
                break
            except OSError:
                time.sleep(0.05)
        with c:
            with pytest.raises(socket.timeout):  # connected, nothing written yet
                c.recv(4096)
            c.sendall(b"\0" * 48)
            c.settimeout(5)
            got = b""
            while len(got) < 4 * 48:
                chunk = c.recv(4096)
                assert chunk
                got += chunk
            assert got == b"\0" * (4 * 48)
            srv = tmp_path / "t7.srv"
            for _ in range(100):                 # the first byte by dd, the rest by cat, in order
                if srv.stat().st_size >= 48:
                    break
                time.sleep(0.05)
            assert srv.read_bytes() == b"\0" * 48
    finally:
        _stop(proc)


def test_no_wait_without_replies_or_a_second_datagram():
    assert udp_order(_plan(0, 1, reply_packets=0)) == ("", "")
    assert udp_order(_plan(10, 1, packets=1)) == ("", "")
    first, after = udp_order(_plan(0, 1))
    assert "-lt 144 ]" in first and after == ""                 # two datagrams of 72 bytes
    first, after = udp_order(_plan(10, 1))
    assert first == "" and "[ ! -s /tmp/t7.cli ]" in after


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="needs root and iproute2")
def test_pin_neigh_makes_resolved_entries_permanent():
    """init.sh's pin_neigh on two namespaces joined by a veth pair, after a ping resolved both sides: every
    entry is PERMANENT with its address, so no neighbour goes stale and is probed in a long scenario."""
    import flowsim.conform.guest as guest
    init = (Path(guest.__file__).parent / "data" / "init.sh").read_text()
    body = init[init.index("pin_neigh() {"):]
    body = body[:body.index("\n}\n") + 3]
    tag = f"fr{os.getpid()}"
    a, b = f"{tag}a", f"{tag}b"
    sh = subprocess.run
    try:
        for ns in (a, b):
            sh(["ip", "netns", "add", ns], check=True)
        sh(["ip", "-n", a, "link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns", b], check=True)
        for ns, dev, addr in ((a, "v0", "10.99.0.1/24"), (b, "v1", "10.99.0.2/24")):
            sh(["ip", "-n", ns, "addr", "add", addr, "dev", dev], check=True)
            sh(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
        sh(["ip", "netns", "exec", a, shutil.which("busybox"), "ping", "-c1", "-W2", "10.99.0.2"], check=True,
           capture_output=True)
        sh(["sh", "-c", f"IP={shutil.which('ip')}\n{body}\npin_neigh {a} {b}"], check=True)
        for ns, peer in ((a, "10.99.0.2"), (b, "10.99.0.1")):
            shown = sh(["ip", "-n", ns, "-4", "neigh", "show", peer], capture_output=True, text=True).stdout
            assert "PERMANENT" in shown and "lladdr" in shown, (ns, shown)
    finally:
        for ns in (a, b):
            sh(["ip", "netns", "del", ns], capture_output=True)


#: include/uapi/asm-generic/socket.h (SO_TIMESTAMPNS_OLD; Python 3.11's socket module does not name it)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


def _recv_stamped(c: socket.socket, size: int) -> tuple[bytes, float]:
    """recvmsg with the kernel's receive timestamp (seconds) of the last segment it read."""
    data, anc, _flags, _addr = c.recvmsg(size, socket.CMSG_SPACE(16))
    stamps = [struct.unpack("qq", d[:16]) for level, kind, d in anc
              if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS]
    assert data and stamps, "no receive timestamp"
    return data, stamps[0][0] + stamps[0][1] / 1e9


def test_tcp_client_pauses_after_its_first_write(tmp_path, bindir):
    """The guest's TCP client sends its first segment, then waits FIRST_WRITE_PAUSE_US before the rest, as
    the simulation's writes are a millisecond apart against microseconds of path: a Packet Too Big or the
    server's quick ACK the first segment brings back arrives before the second, whatever the host's load.

    Measured here on the host, whose load can only narrow the gap seen: a socat that reads the first write late
    sends it closer to the second.  So the pause is looked for in up to three runs (one run with the gap is
    proof of the pause; a client without it shows none in any)."""
    from flowsim.conform.guest import FIRST_WRITE_PAUSE_US
    gaps = []
    for attempt in range(3):
        gap = _first_write_gap(tmp_path / str(attempt), bindir)
        gaps.append(gap)
        if gap >= 0.9 * FIRST_WRITE_PAUSE_US / 1e6:
            return
    pytest.fail(f"no pause of {FIRST_WRITE_PAUSE_US} us after the first write in 3 runs: gaps {gaps} s")


def _first_write_gap(tmp_path, bindir) -> float:
    """One run of the guest's TCP client: the time between the kernel's receipt of its first write and of the
    first byte of its second (SO_TIMESTAMPNS)."""
    tmp_path.mkdir()
    port = _free_port()
    plan = _plan(0, port, proto="tcp")
    line = _traffic_start(plan)[2]
    m = re.fullmatch(rf"(sh -c '.*') \| {re.escape(IP)} netns exec \S+ (socat .*) > (\S+) 2>\S+ & t7_cli=.*",
                     line)
    assert m, line
    writer = m.group(1).replace("/tmp/t7", str(tmp_path / "t7"))
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    with socket.socket() as s:
        # the kernel's receive time of each segment (SO_TIMESTAMPNS, tcp_recv_timestamp), not when this process
        # got round to reading it: a loaded machine delays the reader, not the arrivals (set before the
        # connection, so that the accepted socket inherits it and the first segment is stamped)
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        s.bind(("127.0.0.1", port))
        s.listen(1)
        s.settimeout(5)
        proc = subprocess.Popen(f"{writer} | {m.group(2)} > /dev/null", shell=True, env=env, start_new_session=True)
        try:
            c, _ = s.accept()
            with c:
                c.settimeout(5)
                first, t_first = _recv_stamped(c, 4096)
                rest, t_second = _recv_stamped(c, 1)  # the first byte of the second write
                while len(first) + len(rest) < plan.packets * plan.payload(plan.size):
                    chunk = c.recv(4096)
                    assert chunk
                    rest += chunk
                assert len(first) == plan.payload(plan.size)          # the first write alone
                return t_second - t_first
        finally:
            _stop(proc)
