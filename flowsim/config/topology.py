"""Topology files: the TOML reader that builds a :class:`~flowsim.config.network.Topology` and freezes it.

Theory of operation
-------------------
:func:`load_topology_text` reads the TOML document, creates the namespaces
of ``[netns.*]``, replays each one's command lines in file order through the
interpreter (:mod:`flowsim.config.iproute`), sets its sysctls and keeps its
nftables text, runs L2 discovery (:meth:`Topology.discover
<flowsim.config.network.Topology.discover>`), then reads the ``[[traffic]]``
(:mod:`flowsim.config.traffic`) and ``[[event]]`` (:mod:`flowsim.config.events`)
tables.  The result is frozen: a description that runs instantiate
(:mod:`flowsim.config.network` explains why).  This module is the top of
:mod:`flowsim.config`: it imports the interpreter and the table readers, none
of which imports it; :class:`Topology` and its parts are re-exported here.

Topology file (TOML)
--------------------
::

    # ASCII diagram and the source of the setup (comments)
    description = "one line"            # optional
    source = "where the setup comes from"  # optional

    [netns.router]                      # namespaces are configured in file order
    commands = '''
    ip link add eth0 type veth peer name eth0 netns client
    ip link set eth0 up
    ip addr add 2001:db8:1::2/64 dev eth0 nodad
    ip -6 route add default via 2002:db8:1::2 dev tun0
    '''
    sysctls = { "net.ipv6.conf.all.forwarding" = 1 }
    nft = '''
    table inet filter { … }
    '''

    [[traffic]]                         # flows for the simulator (see flowsim.config.traffic)
    name = "download"
    proto = "tcp"
    from = "client"                     # netns of the sender
    to = "2001:db8:3::2"
    dport = 5201

``commands`` is a string (one command per line, ``#`` comments, ``\\``
continuation) or an array of strings; the commands are ``ip [-4|-6] [-n NS]
link|addr|route|neigh …``, ``bridge vlan|fdb …`` and ``sysctl K=V`` in their
own syntax (see :mod:`flowsim.config.iproute`).  Use literal strings (``'''``) so that
errors point at the exact line.  Extensions for what iproute2 cannot create:

* ``ip link add ppp0 type pppoe dev ETH session ID peer MAC [multilink]
  [disconnected]`` — a ppp unit with one PPPoE channel (:mod:`flowsim.kernel.devices.pppoe`);
* ``ip link add lan1 link CONDUIT type dsa port N tagger NAME [peer name DEV
  [netns NS]]`` — a DSA user port, optionally cabled (:mod:`flowsim.kernel.devices.dsa`);
* ``ip link add eth0 type ethernet [peer name DEV [netns NS]]`` — a NIC;
* ``bridge vlan add … switchdev on|off`` — whether the VLAN was added through
  switchdev (BR_VLFLAG_ADDED_BY_SWITCHDEV; default: on for DSA user ports).

Every error is one :class:`~flowsim.errors.TopologyError` naming the file, the
absolute line, the command and what was expected — also for input that is no
topology at all: bytes that are not UTF-8 (the line and byte offset of the
first bad one), values nested too deep for tomllib, values of the wrong type
anywhere.  Names are checked as the kernel and iproute2 check them
(:mod:`flowsim.config.names`: namespaces as ``ip netns add``, every device a
command creates by ``dev_valid_name``), times are finite and bounded
(:mod:`flowsim.config.limits`).  Loading is linear in the size of the file
(:class:`~flowsim.config.raw.RawToml` indexes it once; ``benchmarks/bench_load.py``).
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

from flowsim.config import iproute
from flowsim.config.events import Event, read_events
from flowsim.config.limits import read_bounded
from flowsim.config.names import NETNS_NAME_EXPECTED, netns_invalid_name
from flowsim.config.network import UPPER_EDGES, LinkRequest, Namespace, NftText, Topology
from flowsim.config.raw import RawToml, short
from flowsim.config.sysctls import sysctl_problem
from flowsim.config.traffic import Traffic, read_traffic
from flowsim.errors import TopologyError
from flowsim.kernel.devices.base import Command

__all__ = ["Topology", "Namespace", "NftText", "Traffic", "Event", "LinkRequest", "UPPER_EDGES",
           "load_topology", "load_topology_text"]


#: ``progress(done, total)``: called after each replayed command line, *total* being the command lines
#: of the whole file (counted before the replay: a non-empty line, continuations and comments
#: included, so *done* may end below it).  flowsim.sim.progress.LoadProgress is one.
LoadProgress = Callable[[int, int], None]

_TOP_KEYS = {"description", "source", "netns", "traffic", "event"}
_NETNS_KEYS = {"commands", "sysctls", "nft"}


def load_topology(path: str | Path, progress: LoadProgress | None = None) -> Topology:
    """Load a topology file; every error is a :class:`TopologyError` naming file and line.

    *progress*, when given, is called as the command lines are replayed (see :data:`LoadProgress`)."""
    path = Path(path)
    try:
        data = read_bounded(path)
    except OSError as exc:
        raise TopologyError(f"cannot read topology: {exc.strerror}", file=str(path), value=str(path),
                            expected="a readable TOML file") from None
    except ValueError as exc:
        raise TopologyError(f"cannot read topology: {exc}", file=str(path), value=str(path),
                            expected="a TOML file") from None
    return load_topology_text(_decode(data, str(path)), file=str(path), progress=progress)


def _decode(data: bytes, file: str) -> str:
    """The file's text: TOML is UTF-8, so a bad byte is an error at its line and byte offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise TopologyError(f"not UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start} ({exc.reason})",
                            file=file, line=line, value=data[exc.start:exc.end],
                            expected="a UTF-8 text file (TOML)") from None


def _parse_toml(text: str, file: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))  # "(at end of document)" has none: the last line
        last = text.rstrip("\n").count("\n") + 1
        raise TopologyError(f"invalid TOML: {exc}", file=file, line=int(m.group(1)) if m else last,
                            expected="a TOML document") from None
    except RecursionError:
        raise TopologyError("invalid TOML: arrays or inline tables nested too deeply", file=file,
                            line=_deepest_line(text),
                            expected="a few levels of [ ] and { } (a topology needs 3 at most)") from None


def _deepest_line(text: str) -> int:
    """The first line where [ and { nest deepest (counted naively, strings included): tomllib parses nesting
    by recursion, so a RecursionError comes from the deepest value."""
    depth, deepest, where = 0, -1, 1
    for no, line in enumerate(text.split("\n"), 1):
        for ch in line:
            if ch in "[{":
                depth += 1
                if depth > deepest:
                    deepest, where = depth, no
            elif ch in "]}":
                depth = max(depth - 1, 0)
    return where


def load_topology_text(text: str, file: str = "<topology>", progress: LoadProgress | None = None) -> Topology:
    """Load a topology from TOML *text* (``file`` is used in error messages), frozen (a description);
    *progress* as for :func:`load_topology`."""
    data = _parse_toml(text, file)
    raw = RawToml(text)
    topo = Topology(file)
    _check_keys(data, _TOP_KEYS, raw, None, file)
    topo.description = _opt_str(data, "description", raw, file)
    topo.source = _opt_str(data, "source", raw, file)
    netns = data.get("netns", {})
    if not isinstance(netns, dict):
        raise TopologyError("netns must be a table of namespaces", file=file, line=raw.line_of("netns"),
                            value=type(netns).__name__, expected="[netns.NAME] tables")
    if not netns:
        raise TopologyError("no namespaces", file=file, line=raw.line_of("netns"),
                            expected="at least one [netns.NAME] table")
    for name in netns:
        why = netns_invalid_name(name)
        if why is not None:
            raise TopologyError(why, file=file, line=raw.line_of(f"netns.{name}"), value=name,
                                expected=NETNS_NAME_EXPECTED)
        topo.add_netns(name)
    total = _command_lines(netns) if progress is not None else 0
    done = 0
    for name, table in netns.items():
        header = f"netns.{name}"
        if not isinstance(table, dict):
            raise TopologyError(f"netns {name!r} is not a table", file=file, line=raw.line_of(header),
                                expected="[netns.NAME] with commands, sysctls, nft")
        _check_keys(table, _NETNS_KEYS, raw, header, file)
        ns = topo.namespaces[name]
        ns.commands = tuple(_commands(table.get("commands", []), name, raw, header, file))
        for cmd in ns.commands:
            _run(topo, cmd)
            if progress is not None:
                done += 1
                progress(done, max(total, done))
        ns.sysctls.update(_sysctls(table.get("sysctls", {}), raw, header, file))
        if "nft" in table:
            if not isinstance(table["nft"], str):
                raise TopologyError("nft must be a string", file=file, line=_line(raw, header, "nft"),
                                    expected="the ruleset text in nft syntax ('''...''')")
            ns.nft = NftText(table["nft"], file, raw.value_start(header, "nft") or _line(raw, header, "nft") or 0)
    topo.discover()
    topo.traffic = read_traffic(data.get("traffic", []), topo, raw, file)
    topo.events = read_events(data.get("event", []), topo, raw, file)
    return topo.freeze()


def _command_lines(netns: dict) -> int:
    """An upper bound of the command lines of all namespaces, cheap (no parsing): the non-blank lines
    of each ``commands`` string, the items of each array."""
    total = 0
    for table in netns.values():
        value = table.get("commands", []) if isinstance(table, dict) else []
        if isinstance(value, str):
            total += sum(1 for line in value.splitlines() if line.strip())
        elif isinstance(value, list):
            total += len(value)
    return total


def _run(topo: Topology, cmd: Command) -> None:
    """One command line; ``ip netns exec NS`` nested hundreds deep recurses too deeply: a located error."""
    try:
        iproute.run(topo, cmd)
    except RecursionError:
        text = cmd.text if len(cmd.text) <= 60 else cmd.text[:57] + "..."
        raise TopologyError("command nested too deeply", file=cmd.file, line=cmd.line, command=text,
                            expected="at most a few 'ip netns exec NS' prefixes") from None


def _line(raw: RawToml, header: str | None, key: str) -> int | None:
    return raw.line_of(header, key)


def _check_keys(table: dict, allowed: set, raw: RawToml, header: str | None, file: str) -> None:
    for key in table:
        if key not in allowed:
            raise TopologyError(f"unknown key {key!r}" + (f" in [{header}]" if header else ""), file=file,
                                line=raw.line_of(f"{header}.{key}") if header else raw.line_of(None, key),
                                value=key, expected="one of " + ", ".join(sorted(allowed)))


def _opt_str(data: dict, key: str, raw: RawToml, file: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        raise TopologyError(f"{key} must be a string", file=file, line=_line(raw, None, key), value=value,
                            expected="a string")
    return value


def _commands(value, netns: str, raw: RawToml, header: str, file: str) -> list[Command]:
    """Split ``commands`` into :class:`Command` values with absolute line numbers."""
    key_line = _line(raw, header, "commands")
    if isinstance(value, str):
        start = raw.value_start(header, "commands") or key_line or 0
        found = raw.key(header, "commands")  # None when written inline, as netns.NAME = { commands = … }
        literal = found is not None and found[1].strip().startswith("'''")
        lines = [(start + i if literal else None, text) for i, text in enumerate(value.split("\n"))]
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        lines = [(None, v) for v in value]
    else:
        raise TopologyError("commands must be a string or an array of strings", file=file, line=key_line,
                            expected="one command per line")
    out: list[Command] = []
    cursor = key_line or 0
    end = raw.table_end(header)  # the search for a line stays inside the table: linear in the file
    pending: tuple[int | None, str] | None = None
    for line, text in lines:
        stripped = text.strip()
        if pending is not None:
            line, stripped = pending[0], pending[1] + " " + stripped
            pending = None
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending = (line if line is not None else raw.find(stripped[:-1].strip(), cursor, end), stripped[:-1].strip())
            continue
        if line is None:
            line = raw.find(stripped.split()[0] if len(stripped) > 60 else stripped, cursor, end) or key_line
        cursor = line or cursor
        out.append(Command(stripped, netns, file, line))
    return out


def _check_sysctls(items: dict[str, str], file: str, line: int | None,
                   key_line: Callable[[str], int | None] = lambda key: None) -> None:
    """Every sysctl's key and value (flowsim.config.sysctls); an error names *key_line*'s line for the key
    when it has one of its own, else *line*."""
    for key, val in items.items():
        problem = sysctl_problem(key, val)
        if problem is not None:
            raise TopologyError(f"sysctl {key} = {short(val)}: {problem.what}", file=file,
                                line=key_line(key) or line, value=val, expected=problem.expected)


def _sysctl_key_line(raw: RawToml, header: str, key: str) -> int | None:
    """The line of sysctl *key* when it has one of its own: ``sysctls."KEY" = …`` in the namespace's table, or
    ``"KEY" = …`` in a ``[netns.X.sysctls]`` table (an inline table's keys share its line)."""
    for table, name in ((header, f"sysctls.{key}"), (f"{header}.sysctls", key)):
        found = raw.key(table, name)
        if found is not None:
            return found[0]
    return None


def _sysctls(value, raw: RawToml, header: str, file: str) -> dict[str, str]:
    line = _line(raw, header, "sysctls")

    def bad(message: str, item) -> TopologyError:
        return TopologyError(message, file=file, line=line, value=item,
                             expected='KEY=VALUE, the value a string, an integer or a boolean')

    if isinstance(value, list):
        items = {}
        for item in value:
            key, sep, val = item.partition("=") if isinstance(item, str) else ("", "", "")
            if not sep or not key.strip():
                raise bad(f"bad sysctl {short(item)}", item)
            items[key.strip()] = val.strip()
        _check_sysctls(items, file, line)
        return items
    if isinstance(value, dict):
        flat: dict[str, str] = {}
        stack = [("", value)]  # TOML turned an unquoted dotted key into tables
        while stack:
            prefix, v = stack.pop()
            if isinstance(v, dict):
                stack.extend((f"{prefix}.{k}" if prefix else k, sub) for k, sub in reversed(v.items()))
            elif isinstance(v, str) and prefix:
                flat[prefix] = v
            elif isinstance(v, int) and prefix and abs(v) < 2**64:  # a sysctl holds at most a u64
                flat[prefix] = str(int(v))  # bool is an int: true/false are 1/0
            else:
                raise bad(f"bad sysctl {prefix or '(empty key)'} = {short(v)}", v)
        _check_sysctls(flat, file, line, functools.partial(_sysctl_key_line, raw, header))
        return flat
    raise TopologyError("sysctls must be a table or an array", file=file, line=line, value=type(value).__name__,
                        expected='{ "net.ipv4.ip_forward" = 1 } or ["net.ipv4.ip_forward=1"]')
