"""Reading what the conformance guest printed: sections, conntrack lines, nft and ip JSON.

Theory of operation
-------------------
The guest writes sections ``@@ SCENARIO KIND NETNS PHASE`` … ``@@end`` to its
second serial port (:mod:`flowsim.conform.guest`).  :func:`split_sections`
cuts the text into :class:`Section` values; the parsers turn each kind into
plain data, never raising on a line they do not understand (a kernel may
print a field this parser has not seen — it is kept in ``extra``):

* :func:`parse_conntrack` reads ``conntrack -L`` lines and the
  ``/proc/net/nf_conntrack`` format (which adds the L3 family in front).
  While a connection is offloaded the kernel prints neither a timeout nor a
  TCP state (``tcp 6 src=…``); on the classic path it prints both
  (``tcp 6 118 TIME_WAIT src=…``).  Flags in brackets (``[UNREPLIED]``,
  ``[ASSURED]``, ``[OFFLOAD]``, ``[HW_OFFLOAD]``) are collected per entry.
* :func:`parse_nft_json` reads ``nft -j list ruleset``: named counters per
  table, and each rule's anonymous ``counter`` with its position in its
  chain.
* :func:`parse_links` reads ``ip -s -j link show``: rx/tx packets and bytes
  per device.
* :func:`parse_sockets` reads ``ss -tinH``: each TCP socket's ports and
  its retransmissions (``tcp_info``), at the ``mid`` snapshot.
* :func:`results_text` reads a saved results channel (``--results``: the
  ``results.log`` of an earlier run, plain or gzip-compressed), at most
  :data:`MAX_RESULTS_BYTES` of it, compressed or not (an endless device or
  a gzip bomb is an error, not a read that fills the memory).
* :func:`parse_pcap` reads a capture the guest sent base64-encoded
  (``--frames``: tcpdump's pcap of one device and direction, or of an
  nflog group): link type and every frame's captured bytes.  A truncated
  last record (tcpdump stopped mid-write) is an error, not a frame.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import os
import re
import stat
import struct
import zlib
from pathlib import Path

import attrs

from flowsim.config.limits import read_bounded, size_text

# a saved results channel, read or decompressed: a --frames run of every conform-* topology writes some tens of MB
MAX_RESULTS_BYTES = 256 << 20

__all__ = ["Section", "split_sections", "CtTupleDir", "CtLine", "parse_conntrack", "NftRule", "NftState",
           "parse_nft_json", "parse_links", "parse_bytes", "SNMP_RATE_LIMITS", "parse_snmp", "Socket", "parse_sockets",
           "canonical_addr", "Pcap", "parse_pcap", "MAX_RESULTS_BYTES", "results_text", "gunzip"]


@attrs.frozen
class Section:
    """One ``@@ SCENARIO KIND NETNS PHASE`` block; ``-`` fields are ``None``."""

    scenario: str | None
    kind: str
    netns: str | None
    phase: str | None
    text: str


_HEAD = re.compile(r"^@@ (\S+) (\S+) (\S+) (\S+)\s*$")


def results_text(path: Path | str) -> str:
    """The text of a saved results channel, plain or gzip-compressed (undecodable bytes replaced, as the serial
    port's are).  OSError as ``open`` raises it; ValueError, saying why, for a file or its decompressed text
    beyond :data:`MAX_RESULTS_BYTES` or a broken gzip stream.

    The last text read is kept: ``conform --results`` checks the file before the boot-less replay reads it
    (once per kernel), and a pipe (``--results <(ssh router cat results.log)``) can be read only once.  A
    regular file is read again when it changed (another inode, size or modification time)."""
    global _LAST_RESULTS
    st = os.stat(path)
    key = (os.fspath(path), st.st_ino, st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else \
        (os.fspath(path), st.st_ino)
    if _LAST_RESULTS is not None and _LAST_RESULTS[0] == key:
        return _LAST_RESULTS[1]
    raw = read_bounded(path, MAX_RESULTS_BYTES, "a results channel")
    text = (gunzip(raw) if raw[:2] == b"\x1f\x8b" else raw).decode(errors="replace")
    _LAST_RESULTS = (key, text)
    return text


_LAST_RESULTS: tuple[tuple, str] | None = None  # (the file's identity, its text): see results_text


def gunzip(data: bytes) -> bytes:
    """``gzip.decompress`` (every member, in turn), stopped at :data:`MAX_RESULTS_BYTES` of output: a ValueError
    saying why for a broken, truncated or oversized stream."""
    out = bytearray()
    while data:
        inflate = zlib.decompressobj(wbits=31)  # a gzip member: header, deflate stream, trailer
        try:
            out += inflate.decompress(data, MAX_RESULTS_BYTES + 1 - len(out))
        except zlib.error as exc:
            raise ValueError(f"not a readable gzip file: {exc}") from None
        if len(out) > MAX_RESULTS_BYTES:
            raise ValueError(f"more than {size_text(MAX_RESULTS_BYTES)} once decompressed, the most a results "
                             "channel may hold")
        if not inflate.eof:
            raise ValueError("not a readable gzip file: the compressed stream is truncated")
        data = inflate.unused_data
    return bytes(out)


def split_sections(text: str) -> list[Section]:
    """Cut the guest's results channel into sections (an unterminated last one is kept)."""
    out: list[Section] = []
    head, body = None, []

    def none(v: str) -> str | None:
        return None if v == "-" else v

    for line in text.replace("\r", "").split("\n"):
        m = _HEAD.match(line)
        if m and head is None:
            head, body = m.groups(), []
        elif line == "@@end" and head is not None:
            out.append(Section(none(head[0]), head[1], none(head[2]), none(head[3]), "\n".join(body)))
            head = None
        elif head is not None:
            body.append(line)
    if head is not None:
        out.append(Section(none(head[0]), head[1], none(head[2]), none(head[3]), "\n".join(body)))
    return out


# ---------------------------------------------------------------------- conntrack

def canonical_addr(text: str) -> str:
    """An address as ``ipaddress`` prints it (/proc writes IPv6 in full, conntrack -L compressed)."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text


@attrs.frozen
class CtTupleDir:
    """One direction of a conntrack entry, with its accounting when enabled."""

    src: str
    dst: str
    sport: int | None = None
    dport: int | None = None
    packets: int | None = None
    bytes: int | None = None


@attrs.frozen
class CtLine:
    """One conntrack entry as listed."""

    proto: str
    l4num: int
    family: str | None          # "ipv4"/"ipv6" (only /proc says it)
    timeout: int | None         # None while offloaded
    state: str | None           # TCP state; None while offloaded and for UDP
    original: CtTupleDir
    reply: CtTupleDir
    flags: frozenset[str]
    mark: int | None = None
    extra: tuple[str, ...] = ()

    @property
    def offloaded(self) -> bool:
        return "OFFLOAD" in self.flags or "HW_OFFLOAD" in self.flags

    def key(self) -> tuple:
        """The original tuple that names the connection."""
        o = self.original
        return (self.proto, o.src, o.dst, o.sport, o.dport)


_KV = re.compile(r"^([a-z_]+)=(\S*)$")


def _ct_line(line: str) -> CtLine | None:
    tokens = line.split()
    if not tokens:
        return None
    family = None
    if tokens[0] in ("ipv4", "ipv6") and len(tokens) > 2:
        family, tokens = tokens[0], tokens[2:]
    if len(tokens) < 2 or not tokens[1].isdigit():
        return None
    proto, l4num, rest = tokens[0], int(tokens[1]), tokens[2:]
    timeout = state = None
    if rest and rest[0].isdigit():
        timeout, rest = int(rest[0]), rest[1:]
    if rest and "=" not in rest[0] and not rest[0].startswith("["):
        state, rest = rest[0], rest[1:]
    dirs: list[dict] = []
    flags, extra, mark = set(), [], None
    for tok in rest:
        if tok.startswith("[") and tok.endswith("]"):
            flags.add(tok[1:-1])
            continue
        m = _KV.match(tok)
        if not m:
            extra.append(tok)
            continue
        key, value = m.groups()
        if key == "src":
            dirs.append({"src": canonical_addr(value)})
        elif key in ("dst", "sport", "dport", "packets", "bytes") and dirs and key not in dirs[-1]:
            dirs[-1][key] = canonical_addr(value) if key == "dst" else int(value)
        elif key == "mark":
            mark = int(value)
        else:
            extra.append(tok)
    if len(dirs) < 2:
        return None
    return CtLine(proto, l4num, family, timeout, state, CtTupleDir(**dirs[0]), CtTupleDir(**dirs[1]),
                  frozenset(flags), mark, tuple(extra))


def parse_conntrack(text: str) -> list[CtLine]:
    """Entries of a ``conntrack -L`` or ``/proc/net/nf_conntrack`` listing (other lines are skipped)."""
    return [e for e in (_ct_line(line) for line in text.splitlines()) if e is not None]


# ---------------------------------------------------------------------- nft

@attrs.frozen
class NftRule:
    """A rule with an anonymous counter: where it is, what it does, what it counted."""

    family: str
    table: str
    chain: str
    index: int           # position in its chain, from 0
    handle: int
    text: str            # a short rendering of the rule's statements
    packets: int
    bytes: int


@attrs.frozen
class NftState:
    """Named counters (``(family, table, name) -> (packets, bytes)``) and counted rules of one namespace."""

    counters: dict = attrs.field(factory=dict)
    rules: tuple[NftRule, ...] = ()
    flowtables: tuple[dict, ...] = ()
    error: str | None = None


def _expr_text(expr: list) -> str:
    """A compact human text of a rule's JSON statements (for the report, not for matching)."""
    parts = []
    for stmt in expr:
        if not isinstance(stmt, dict):  # nft 1.0.6 prints an anonymous chain as its text
            parts.append(" ".join(str(stmt).split()))
            continue
        (kind, body), = stmt.items()
        if kind == "match":
            left = body.get("left")
            parts.append(f"{_operand(left)} {body.get('op', '==')} {_operand(body.get('right'))}")
        elif kind == "counter":
            parts.append("counter")
        elif kind == "flow":
            parts.append(f"flow {body.get('op')} {body.get('flowtable')}")
        else:
            parts.append(kind)
    return " ".join(parts)


def _operand(v) -> str:
    if isinstance(v, dict):
        (k, b), = v.items() if len(v) == 1 else (("?", v),)
        if k in ("meta", "ct") and isinstance(b, dict):
            return f"{k} {b.get('dir', '')} {b.get('key')}".replace("  ", " ")
        if k == "payload" and isinstance(b, dict):
            return f"{b.get('protocol', b.get('base'))} {b.get('field', '')}".strip()
        if k == "set":
            return "{" + ", ".join(_operand(x) for x in b) + "}"
        return k
    if isinstance(v, list):
        return "{" + ", ".join(_operand(x) for x in v) + "}"
    return str(v)


def parse_nft_json(text: str) -> NftState:
    """``nft -j list ruleset`` → named counters and counted rules (position within the chain kept).

    nft prints warnings on stderr (merged by the guest) before the JSON: nft 1.0.6 says ``warning: stmt ops
    chain have no json callback`` for an anonymous chain (``goto { … }``, as nft_flowtable.sh's ns2 input
    chain), whose statement and rules are then missing from the JSON; the rest is complete.
    """
    text = "\n".join(line for line in text.splitlines() if not line.startswith("warning: "))
    try:
        data = json.loads(text)
    except ValueError:
        return NftState(error=text.strip()[:200] or "no output")
    counters, rules, flowtables = {}, [], []
    position: dict[tuple, int] = {}
    for obj in data.get("nftables", []):
        (kind, body), = obj.items()
        if kind == "counter":
            counters[(body["family"], body["table"], body["name"])] = (body.get("packets", 0), body.get("bytes", 0))
        elif kind == "flowtable":
            flowtables.append(body)
        elif kind == "rule":
            where = (body["family"], body["table"], body["chain"])
            index = position.get(where, 0)
            position[where] = index + 1
            for stmt in body.get("expr", []):
                if isinstance(stmt, dict) and isinstance(stmt.get("counter"), dict) and "packets" in stmt["counter"]:
                    c = stmt["counter"]
                    rules.append(NftRule(*where, index, body.get("handle", 0), _expr_text(body.get("expr", [])),
                                         c["packets"], c["bytes"]))
    return NftState(counters, tuple(rules), tuple(flowtables))


# ---------------------------------------------------------------------- links, bytes

def parse_links(text: str) -> dict[str, dict[str, int]]:
    """``ip -s -j link show`` → ``{ifname: {rx_packets, rx_bytes, tx_packets, tx_bytes}}``."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    out = {}
    for link in data:
        stats = link.get("stats64") or link.get("stats") or {}
        rx, tx = stats.get("rx", {}), stats.get("tx", {})
        out[link.get("ifname", "?")] = {"rx_packets": rx.get("packets", 0), "rx_bytes": rx.get("bytes", 0),
                                        "tx_packets": tx.get("packets", 0), "tx_bytes": tx.get("bytes", 0)}
    return out


#: /proc/net/snmp's and snmp6's names of the ICMP rate-limit counters -> the run report's (icmp_rate_limits)
SNMP_RATE_LIMITS = {"OutRateLimitGlobal": "ratelimit_global", "OutRateLimitHost": "ratelimit_host",
                    "Icmp6OutRateLimitHost": "ratelimit_host6"}


def parse_snmp(text: str) -> dict[str, int]:
    """The ``snmp`` section: /proc/net/snmp's ``Icmp:`` header and value lines (net/ipv4/proc.c's
    ``icmp_put``) and /proc/net/snmp6's ``Icmp6OutRateLimitHost N`` -> the :data:`SNMP_RATE_LIMITS` counters
    found (a kernel without a counter has no such name)."""
    out: dict[str, int] = {}
    icmp = [line.split()[1:] for line in text.splitlines() if line.startswith("Icmp: ")]
    for names, values in zip(icmp[::2], icmp[1::2]):
        for name, value in zip(names, values):
            if name in SNMP_RATE_LIMITS and value.isdigit():
                out[SNMP_RATE_LIMITS[name]] = int(value)
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in SNMP_RATE_LIMITS and parts[1].isdigit():
            out[SNMP_RATE_LIMITS[parts[0]]] = int(parts[1])
    return out


def parse_bytes(text: str) -> dict[str, int]:
    """The ``bytes`` section: ``NAME SIZE`` per line."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


@attrs.frozen
class Socket:
    """One TCP socket of ``ss -tinH``: its ports and the ``tcp_info`` counters the harness reads."""

    state: str
    lport: int
    pport: int
    # tcpi_total_retrans, tcpi_bytes_retrans: segments sent again (RTO, TLP, fast retransmit) and their payload;
    # None when ss had no tcp_info (no tcp_diag: it falls back to /proc/net/tcp, which has no such counter)
    retrans: int | None = None
    bytes_retrans: int | None = None


def _port(endpoint: str) -> int | None:
    """The port of ``ADDR:PORT`` / ``[ADDR]:PORT`` (``ss -n``); None for ``*`` or a malformed one."""
    port = endpoint.rpartition(":")[2]
    return int(port) if port.isdigit() else None


def _tcp_info(sock: Socket, tokens: list[str]) -> Socket:
    """*sock* with the retransmission counters of its ``tcp_info`` fields, when *tokens* are ``tcp_info``'s
    (``segs_out``, which every kernel since 4.2 reports, is there); ss prints ``retrans:CUR/TOTAL`` and
    ``bytes_retrans:N`` only when non-zero, so there their absence means 0."""
    fields = dict(tok.split(":", 1) for tok in tokens if ":" in tok)
    if "segs_out" not in fields:
        return sock
    total = fields.get("retrans", "").rpartition("/")[2]
    nbytes = fields.get("bytes_retrans", "")
    return attrs.evolve(sock, retrans=int(total) if total.isdigit() else 0,
                        bytes_retrans=int(nbytes) if nbytes.isdigit() else 0)


def parse_sockets(text: str) -> list[Socket]:
    """``ss -tinH``: a line per socket (state, queues, local, peer), its ``tcp_info`` fields on an indented
    line after it (or on the same line)."""
    out: list[Socket] = []
    for line in text.splitlines():
        if line[:1].isspace() and out:
            out[-1] = _tcp_info(out[-1], line.split())
            continue
        parts = line.split()
        if len(parts) >= 5 and parts[1].isdigit() and parts[2].isdigit():
            lport, pport = _port(parts[3]), _port(parts[4])
            if lport is not None and pport is not None:
                out.append(_tcp_info(Socket(parts[0], lport, pport), parts[5:]))
    return out


# ---------------------------------------------------------------------- pcap

@attrs.frozen
class Pcap:
    """A classic pcap file: its link type and the captured bytes of each record."""

    linktype: int = 0
    frames: tuple[bytes, ...] = ()
    error: str | None = None


_PCAP_MAGIC = {b"\xd4\xc3\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">",     # microsecond
               b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\x3c\x4d": ">"}     # nanosecond


def parse_pcap(text: str) -> Pcap:
    """A pcap sent as base64 text (``base64 < FILE``); a text that is not one gives ``error``."""
    body = "".join(text.split())
    if not body:
        return Pcap(error="empty capture")
    try:
        raw = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        return Pcap(error=text.strip().splitlines()[0][:200] if text.strip() else "not base64")
    return read_pcap_bytes(raw)


def read_pcap_bytes(raw: bytes) -> Pcap:
    """The records of a pcap file's bytes."""
    endian = _PCAP_MAGIC.get(raw[:4])
    if endian is None or len(raw) < 24:
        return Pcap(error=f"not a pcap file (magic {raw[:4].hex() or 'empty'})")
    linktype = struct.unpack_from(endian + "I", raw, 20)[0] & 0x0FFFFFFF
    frames, off = [], 24
    while off < len(raw):
        if off + 16 > len(raw):
            return Pcap(linktype, tuple(frames), f"truncated record header at byte {off}")
        caplen = struct.unpack_from(endian + "I", raw, off + 8)[0]
        if off + 16 + caplen > len(raw):
            return Pcap(linktype, tuple(frames), f"truncated record at byte {off}")
        frames.append(raw[off + 16:off + 16 + caplen])
        off += 16 + caplen
    return Pcap(linktype, tuple(frames))
