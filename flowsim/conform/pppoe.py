"""PPPoE sessions in the conformance guest: a topology's ``type pppoe`` pair as a real kernel-mode session.

flowsim declares a PPPoE session with its own line, on both ends::

    ip link add ppp0 type pppoe dev eth1.7 session 0x0042 peer 02:00:00:00:07:01

iproute2 cannot create such a device: on a real system pppd does, through a
PPPoX socket (drivers/net/ppp/pppoe.c) bound to the Ethernet device, with a
ppp unit (drivers/net/ppp/ppp_generic.c) on top.  The guest does the same:

* the two lines with the same session id in two namespaces are one session;
  each line's ``peer`` must be the MAC of the other end's Ethernet device
  (the topology sets the MACs), else the pair is refused;
* both ends run ``pppd file OPTIONS`` in their namespace with the
  kernel-mode plugin (``plugin /etc/ppp/plugins/rp-pppoe.so nic-DEV``) and
  ``rp_pppoe_sess ID:PEER`` ("attach to existing session"): the plugin
  connects its PPPoX socket to the topology's session id and peer MAC
  without discovery, exactly what pppoe-server's kernel mode hands its own
  pppd after PADS.  pppoe-server itself is not used: Debian's build (rp-pppoe
  3.15-2) has no ``-k`` (its getopt string lacks it) and starts every pppd
  on a pty through the user-space ``pppoe`` ("Couldn't allocate
  pseudo-tty" in the guest), a session without ``ndo_fill_forward_path``
  that would read as "not offloaded".  Without discovery no PADI/PADO/
  PADR/PADS is ever sent; LCP and IPCP/IPV6CP follow at once.  The end
  declared second is called the server (the access concentrator in the
  shipped topologies): it only decides the IPv6 interface identifiers;
* both options files turn off what would add traffic or change the set-up
  later: no LCP echoes, no compression (CCP, VJ, address/protocol field
  compression), no default route, no proxy ARP, no kernel tuning
  (``noktune``: pppd would set ip_forward), no persist; the MTU and MRU are
  the ppp device's (flowsim's: ``mtu`` of the line, else the Ethernet
  device's MTU minus the 8-byte PPPoE header); the device name is the
  topology's (``ifname``);
* IPv4 through IPCP when both ends have an IPv4 address on the ppp device
  (``LOCAL:REMOTE`` from their ``ip addr add`` lines, the peer from the
  line's ``peer`` or the other end's address), else ``noip``; IPv6 through IPV6CP (``+ipv6``, fixed
  interface identifiers ``::1`` server, ``::2`` client) when either end has
  an IPv6 address on it, else ``noipv6``;
* before the pppds start, each end's Ethernet device and the devices under
  it (a VLAN's real device) get flowsim's MAC addresses, the ones the peer
  MACs were checked against (the topology's, else flowsim's own);
* the set-up waits (at most :data:`UP_TIMEOUT` seconds) until both ppp
  devices carry the negotiated addresses, then checks ``/proc/net/pppoe`` of
  each namespace (only a kernel-mode session is listed there: a pty session
  through the user-space ``pppoe`` has no ``ndo_fill_forward_path`` and
  would read as "not offloaded") for the topology's session id, peer MAC and
  device, and writes both listings to the results channel as a ``note``;
  on a timeout or a mismatch the pppd logs are the error's text.

Ordering (:func:`split_commands`): a session needs both Ethernet devices,
which the namespaces' commands create in file order, so every ``type
pppoe`` line and every later line of its namespace run after all other
lines: first the sessions, then those lines in file order, without the
IPv4 address line IPCP already configured, IPv6 addresses with ``nodad``.
Every later line, not only those naming the ppp device: a line after the
session may depend on it without naming it — an ``ip6tnl`` or ``ipip``
tunnel whose route to its remote goes over the session takes its MTU from
that route when it is created (``ip6_tnl_link_config``: the route's device
MTU less the tunnel header; without a route the ``ETH_DATA_LEN`` less it
that ``ip6_tnl_dev_init_gen`` set stays, 1460 for 1452).
A later line that creates or moves a device into another namespace and
names no deferred device stays in place, for that namespace's lines.

Every name and value from the topology reaches the guest's shell through
:func:`shlex.quote`; device names are refused unless they are letters,
digits, ``_ . -``.
"""

from __future__ import annotations

import ipaddress
import re
import shlex

import attrs

from flowsim.config.raw import shell_split
from flowsim.conform.kernel import GUEST_BIN, PPPD_PLUGIN_PATH
from flowsim.errors import ConfigError
from flowsim.kernel.devices.base import Command

__all__ = ["Unsupported", "End", "Session", "SessionStart", "find_sessions", "split_commands", "options", "session_script",
           "PLUGIN", "UP_TIMEOUT", "PIDS", "RUN_DIR", "PPPOE_HLEN"]

PLUGIN = "/" + PPPD_PLUGIN_PATH      # pppd's kernel-mode plugin, at the fixed path the initramfs gives it
RUN_DIR = "/tmp/pppoe"
PIDS = "/tmp/pppoe.pids"                # the guest's cleanup ends these processes
UP_TIMEOUT = 30                         # seconds for discovery, LCP and IPCP/IPV6CP under TCG
PPPOE_HLEN = 8                          # PPPOE_SES_HLEN: the PPPoE header and the PPP protocol field
IPV6_IID = {"server": "::1", "client": "::2"}
_SAFE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
_ADDR_OBJ = ("a", "ad", "add", "addr", "addre", "addres", "address")
_IP_OPTS_WITH_ARG = ("-n", "-netns", "-f", "-family", "-b", "-batch", "-rc", "-rcvbuf")


class Unsupported(ConfigError):
    """A PPPoE line the guest cannot set up with pppd (no peer line, a wrong peer MAC, multilink, …)."""

    def __init__(self, why: str, where: str | None, expected: str | None = None):
        super().__init__(why, where=where, expected=expected)
        self.why = why


def _where(cmd) -> str:
    return f"{cmd.file}:{cmd.line}"


@attrs.frozen
class End:
    """One end of a session: its ``type pppoe`` line and what the topology gives the ppp device."""

    cmd: Command                # the ``ip link add … type pppoe`` line
    netns: str
    ifname: str
    lower: str
    session: int
    peer: str                   # the other end's MAC, as the line says
    mtu: int
    v4: str | None = None       # first IPv4 address on the ppp device
    v4_peer: str | None = None  # its ``peer``
    v6: bool = False            # any IPv6 address on the ppp device
    macs: tuple[tuple[str, str], ...] = ()  # (device, MAC) from the session's Ethernet device down, flowsim's


@attrs.frozen
class Session:
    """A pair of ``type pppoe`` lines: the server (declared second) and the client end, each a pppd."""

    index: int
    server: End
    client: End
    v4: tuple[str, str] | None  # (server address, client address) through IPCP, or None: ``noip``
    v6: bool

    @property
    def tag(self) -> str:
        return f"{RUN_DIR}/{self.index}"


@attrs.frozen
class SessionStart:
    """The pseudo command :func:`flowsim.conform.guest.render_command` renders as the session's set-up."""

    session: Session
    text: str
    netns: str
    file: str | None
    line: int | None

    def render(self) -> str:
        # "$S" (the scenario id, for the note) is expanded by the guest's /init, never topology text
        return shlex.join(["sh", "-c", session_script(self.session)]) + ' sh "$S"'


# ---------------------------------------------------------------------- reading the topology

def _kind(tokens: list[str]) -> str | None:
    if tokens[:1] == ["ip"] and "type" in tokens and "add" in tokens:
        i = tokens.index("type") + 1
        return tokens[i] if i < len(tokens) else ""
    return None


def is_pppoe_line(cmd) -> bool:
    return _kind(shell_split(cmd)) == "pppoe"


def _words(tokens: list[str]) -> list[str]:
    """The tokens after ``ip`` and its options."""
    i = 1
    while i < len(tokens) and tokens[i].startswith("-"):
        i += 2 if tokens[i] in _IP_OPTS_WITH_ARG else 1
    return tokens[i:]


def addr_add(cmd) -> tuple[str, str | None, str] | None:
    """``ip addr add LOCAL [peer PEER] … dev DEV``: (LOCAL without prefix, PEER without prefix, DEV), else None."""
    tokens = shell_split(cmd)
    if tokens[:1] != ["ip"]:
        return None
    w = _words(tokens)
    if len(w) < 3 or w[0] not in _ADDR_OBJ or w[1] != "add":
        return None
    local = peer = dev = None
    rest = w[2:]
    i = 0
    while i < len(rest):
        tok = rest[i]
        if tok in ("peer", "remote", "dev", "local") and i + 1 < len(rest):
            if tok == "peer" or tok == "remote":
                peer = rest[i + 1].split("/")[0]
            elif tok == "dev":
                dev = rest[i + 1]
            else:
                local = rest[i + 1].split("/")[0]
            i += 2
            continue
        if local is None:
            try:
                ipaddress.ip_address(tok.split("/")[0])
                local = tok.split("/")[0]
            except ValueError:
                pass
        i += 1
    if local is None or dev is None:
        return None
    return local, peer, dev


def _check_name(cmd, what: str, name: str) -> str:
    if not _SAFE.match(name):
        raise Unsupported(f"PPPoE {what} {name!r} cannot be passed to pppd in the conformance guest", _where(cmd),
                          "letters, digits, '_', '.', '-' (at most 15)")
    return name


def _end(topo, cmd) -> End:
    """The ``type pppoe`` line *cmd* as one session end (refused: missing parts, multilink, disconnected)."""
    tokens = shell_split(cmd)
    w = _words(tokens)
    opts: dict[str, str] = {}
    flags = set()
    i = 2  # after "link add"
    ifname = None
    while i < len(w):
        tok = w[i]
        if tok in ("dev", "session", "peer", "mtu", "name", "type") and i + 1 < len(w):
            opts[tok] = w[i + 1]
            i += 2
            continue
        if tok in ("multilink", "disconnected"):
            flags.add(tok)
        elif ifname is None:
            ifname = tok
        i += 1
    ifname = opts.get("name", ifname)
    missing = [k for k in ("dev", "session", "peer") if k not in opts]
    if missing or ifname is None:
        raise cmd.error("a PPPoE session in the guest needs the device name, dev, session and peer "
                        f"(missing: {', '.join(missing) or 'name'})", value=cmd.text,
                        expected="'ip link add NAME type pppoe dev DEV session ID peer MAC'")
    if flags:
        raise Unsupported(f"PPPoE {' and '.join(sorted(flags))} cannot be set up with pppd in the guest",
                          _where(cmd), "a plain session (no multilink, not disconnected)")
    try:
        session = int(opts["session"], 0)
    except ValueError:
        session = -1
    if not 1 <= session <= 0xFFFE:
        raise cmd.error(f"PPPoE session {opts['session']!r} is not a session id", value=opts["session"],
                        expected="1 to 0xfffe")
    if not _MAC.match(opts["peer"]):
        raise cmd.error(f"PPPoE peer {opts['peer']!r} is not a MAC address", value=opts["peer"],
                        expected="xx:xx:xx:xx:xx:xx")
    _check_name(cmd, "device", ifname)
    _check_name(cmd, "Ethernet device", opts["dev"])
    ns = topo.namespaces[cmd.netns]
    dev = ns.devices.get(ifname)
    if "mtu" in opts:
        mtu = int(opts["mtu"], 0)
    elif dev is not None and getattr(dev, "mtu", None):
        mtu = dev.mtu
    else:
        lower = ns.devices.get(opts["dev"])
        mtu = (lower.mtu if lower is not None else 1500) - PPPOE_HLEN
    v4 = v4_peer = None
    v6 = False
    for c in ns.commands:
        a = addr_add(c)
        if a is None or a[2] != ifname:
            continue
        if ipaddress.ip_address(a[0]).version == 6:
            v6 = True
        elif v4 is None:
            v4, v4_peer = a[0], a[1]
    return End(cmd, cmd.netns, ifname, opts["dev"], session, opts["peer"].lower(), mtu, v4, v4_peer, v6)


def find_sessions(topo) -> list[Session]:
    """The topology's ``type pppoe`` lines paired by session id into sessions (refused: no or a wrong peer)."""
    ends = [_end(topo, c) for ns in topo.namespaces.values() for c in ns.commands if is_pppoe_line(c)]
    by_id: dict[int, list[End]] = {}
    for e in ends:
        by_id.setdefault(e.session, []).append(e)
    out: list[Session] = []
    for sid, pair in by_id.items():
        if len(pair) != 2 or pair[0].netns == pair[1].netns:
            where = ", ".join(f"{e.netns} ({e.cmd.file}:{e.cmd.line})" for e in pair)
            raise Unsupported(f"PPPoE session 0x{sid:04x}: the guest needs both ends in the topology, "
                              f"found {len(pair)}: {where}", _where(pair[0].cmd),
                              "two 'type pppoe' lines with the same session, in two namespaces")
        client, server = pair
        for e, other in ((client, server), (server, client)):
            lower = topo.namespaces[other.netns].devices.get(other.lower)
            mac = getattr(lower, "mac", None)
            if mac is None or mac.lower() != e.peer:
                raise Unsupported(f"PPPoE session 0x{sid:04x}: peer {e.peer} is not the MAC of "
                                  f"{other.netns}/{other.lower} ({mac}); pppd learns the real one",
                                  _where(e.cmd), f"peer {mac}")
        v4 = None
        if client.v4 and server.v4:
            v4 = (server.v4, client.v4)
            for e, want in ((client, server.v4), (server, client.v4)):
                if e.v4_peer not in (None, want):
                    raise Unsupported(f"PPPoE session 0x{sid:04x}: {e.netns}'s peer address {e.v4_peer} is not "
                                      f"the other end's {want}", _where(e.cmd), want)
        server, client = (attrs.evolve(e, macs=tuple(_chain(topo, e.netns, e.lower))) for e in (server, client))
        out.append(Session(len(out), server, client, v4, client.v6 or server.v6))
    return out


def split_commands(topo, sessions: list[Session]) -> tuple[dict[str, list], list]:
    """Each namespace's lines without the sessions' lines, and what runs after them (see the module text)."""
    ifnames = {(e.netns, e.ifname) for s in sessions for e in (s.server, s.client)}
    ipcp = {(e.netns, e.ifname): e.v4 for s in sessions if s.v4 for e in (s.server, s.client)}
    early: dict[str, list] = {}
    late: list = []
    for name, ns in topo.namespaces.items():
        early[name] = []
        deferring: set[str] = set()  # the ppp devices, then the devices the deferred lines create
        for c in ns.commands:
            if is_pppoe_line(c):
                deferring.add(_end(topo, c).ifname)
                continue
            tokens = shell_split(c)
            if not deferring or ("netns" in tokens and deferring.isdisjoint(tokens)):
                early[name].append(c)  # before the session line; or a device for another namespace's lines
                continue
            deferring |= _created_devices(tokens)
            a = addr_add(c)
            if a is not None and (name, a[2]) in ipcp and ipcp[(name, a[2])] == a[0]:
                continue        # IPCP configured it (LOCAL peer REMOTE/32)
            if a is not None and (name, a[2]) in ifnames and ipaddress.ip_address(a[0]).version == 6 \
                    and "nodad" not in tokens:
                c = attrs.evolve(c, text=c.text + " nodad")
            late.append(c)
    starts = [SessionStart(s, f"pppoe session 0x{s.client.session:04x}", s.client.netns,
                           s.client.cmd.file, s.client.cmd.line) for s in sessions]
    return early, [*starts, *late]


def _created_devices(tokens: list[str]) -> set[str]:
    """The devices an ``ip [OPTIONS] link add [link DEV] [name|dev] NAME … [peer name PEER …]`` line creates
    (the words iproute's ``_link_add`` reads for the name)."""
    w = _words(tokens) if tokens[:1] == ["ip"] else []
    if w[:2] != ["link", "add"]:
        return set()
    created = set()
    rest = w[2:]
    while rest and rest[0] == "link":
        rest = rest[2:]
    if rest:
        created.add(rest[1] if rest[0] in ("name", "dev") and len(rest) > 1 else rest[0])
    if "peer" in rest:
        after = rest[rest.index("peer") + 1:]
        if len(after) > 1 and after[0] == "name":
            created.add(after[1])
    return created


# ---------------------------------------------------------------------- rendering

def options(s: Session, role: str) -> str:
    """pppd's options file for the *role* (``server`` or ``client``) end of *s*."""
    e = s.server if role == "server" else s.client
    lines = [f"# flowsim conform: PPPoE session 0x{e.session:04x}, {role} end in {e.netns}"]
    # the plugin attaches to the session (pppd's pppoe.so: "%d:%x:%x:%x:%x:%x:%x", the id in decimal)
    lines += [f"plugin {PLUGIN}", f"nic-{e.lower}", f"rp_pppoe_sess {e.session}:{e.peer}", "nodetach"]
    lines += [
        f"ifname {e.ifname}", f"linkname flowsim-{s.index}-{role}", "noauth",
        f"mtu {e.mtu}", f"mru {e.mtu}",
        "lcp-echo-interval 0", "lcp-echo-failure 0",
        "noccp", "nobsdcomp", "nodeflate", "nopredictor1", "novj", "novjccomp", "nopcomp", "noaccomp",
        "nomultilink", "noipdefault", "nodefaultroute", "noproxyarp", "noktune", "nopersist", "maxfail 1",
    ]
    if s.v4 is None:
        lines.append("noip")
    else:
        local, remote = (s.v4[0], s.v4[1]) if role == "server" else (s.v4[1], s.v4[0])
        lines.append(f"{local}:{remote}")
    if s.v6:
        other = "client" if role == "server" else "server"
        lines += ["+ipv6", f"ipv6 {IPV6_IID[role]},{IPV6_IID[other]}"]
    else:
        lines.append("noipv6")
    lines += [f"logfile {s.tag}.{role}.log", "debug"]
    return "\n".join(lines) + "\n"


def _ready(s: Session, role: str) -> list[str]:
    """grep -E patterns ``ip -o addr show dev PPP`` shows once *role*'s end is up."""
    out = []
    if s.v4 is not None:
        local, remote = (s.v4[0], s.v4[1]) if role == "server" else (s.v4[1], s.v4[0])
        out.append(f"inet {re.escape(local)} peer {re.escape(remote)}/32 ")
    if s.v6:
        out.append(f"inet6 fe80{re.escape(IPV6_IID[role])}[/ ]")
    return out


def _sid_pattern(e: End) -> str:
    # /proc/net/pppoe prints the __be16 sid with %08X: byte-swapped on a little-endian guest
    swapped = ((e.session & 0xFF) << 8) | (e.session >> 8)
    return f"^0000({e.session:04X}|{swapped:04X}) {e.peer} +{re.escape(e.lower)}$"


def session_script(s: Session) -> str:
    """The ``sh -c`` text that starts session *s*, waits for it and checks it (``$1``: the scenario id)."""
    q = shlex.quote
    ip, tag = GUEST_BIN["ip"], s.tag
    srv, cli = s.server, s.client
    server_cmd = [ip, "netns", "exec", srv.netns, GUEST_BIN["pppd"], "file", f"{tag}.server"]
    client_cmd = [ip, "netns", "exec", cli.netns, GUEST_BIN["pppd"], "file", f"{tag}.client"]
    ready = " && ".join(f"ready {q(e.netns)} {q(e.ifname)} {q(p)}"
                        for role, e in (("server", srv), ("client", cli)) for p in _ready(s, role)) or "true"
    checks = " && ".join(f"{ip} netns exec {q(e.netns)} cat /proc/net/pppoe | grep -qiE {q(_sid_pattern(e))}"
                         for e in (srv, cli))
    what = f"PPPoE session 0x{cli.session:04x} {cli.netns}/{cli.ifname} - {srv.netns}/{srv.ifname} (pppd)"
    lines = [
        "/sbin/modprobe -a ppp_generic pppox pppoe >/dev/null 2>&1",
        f"mkdir -p /etc/ppp {RUN_DIR}; [ -e /var/run ] || ln -s /run /var/run",
        # flowsim's MACs (the peers were checked against them), set before the session exists: a later
        # change flushes it (lower_devices)
        *(f"{ip} -n {q(e.netns)} link set dev {q(dev)} address {q(mac)} || exit 1"
          for e in (srv, cli) for dev, mac in reversed(e.macs)),
        f"printf %s {q(options(s, 'server'))} > {tag}.server",
        f"printf %s {q(options(s, 'client'))} > {tag}.client",
        f"{shlex.join(server_cmd)} </dev/null >{tag}.server.out 2>&1 & echo $! >> {PIDS}",
        f"{shlex.join(client_cmd)} </dev/null >{tag}.client.out 2>&1 & echo $! >> {PIDS}",
        f'ready() {{ {ip} -n "$1" -o addr show dev "$2" 2>/dev/null | grep -qE "$3"; }}',
        "logs() { for f in " + f"{tag}.*; do echo \"== $f\"; cat \"$f\"; done; "
        + " ".join(f"{ip} netns exec {q(e.netns)} cat /proc/net/pppoe; {ip} -n {q(e.netns)} addr show;"
                   for e in (srv, cli)) + " }",
        # a deadline by the clock: under TCG one round of ip and grep takes a good part of a second
        "t0=$(cut -d. -f1 /proc/uptime)",
        f"until {ready}; do",
        f"  if [ $(($(cut -d. -f1 /proc/uptime) - t0)) -ge {UP_TIMEOUT} ]; then "
        f"echo {q(what + f': not up after {UP_TIMEOUT} s')}; logs; exit 1; fi",
        "  usleep 200000",
        "done",
        f"if ! {{ {checks}; }}; then echo {q(what + ': not the topology session in /proc/net/pppoe')}; logs; "
        "exit 1; fi",
        '{ echo "@@ ${1:--} note - -"; echo ' + q(what + ": up after ") + '"$(($(cut -d. -f1 /proc/uptime) - t0))"' + " s; "
        + " ".join(f"echo {q(e.netns + ':')}; {ip} netns exec {q(e.netns)} cat /proc/net/pppoe;" for e in (srv, cli))
        + ' echo "@@end"; } >&3',
    ]
    return "\n".join(lines) + "\n"


def lower_devices(topo) -> set[tuple[str, str]]:
    """(netns, device) of every session's Ethernet device and the devices under it (VLAN ``link``s).

    Setting the MAC address of one of them once the session is up, even to the same address, ends the
    session: ``netif_set_mac_address`` always calls the NETDEV_CHANGEADDR notifier and ``pppoe_device_event``
    answers it with ``pppoe_flush_dev`` (drivers/net/ppp/pppoe.c).  ``--frames`` must leave them alone (the
    pairing already checked that each peer MAC is the other end's device MAC as the topology sets it).
    """
    return {(e.netns, dev) for s in find_sessions(topo) for e in (s.server, s.client) for dev, _ in e.macs}


def _chain(topo, netns: str, name: str) -> list[tuple[str, str]]:
    """(device, MAC) of *name* and the devices under it (a VLAN's ``lower``), as flowsim built them."""
    ns = topo.namespaces[netns]
    out = []
    dev = ns.devices.get(name)
    while dev is not None and getattr(dev, "mac", None):
        out.append((dev.name, dev.mac))
        lower = getattr(dev, "lower", None)
        dev = ns.devices.get(lower) if isinstance(lower, str) else None
    return out
