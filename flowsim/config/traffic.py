"""Traffic tables: the ``[[traffic]]`` arrays of a topology file as :class:`Traffic` flows.

Theory of operation
-------------------
A traffic table describes one flow the simulator generates
(:mod:`flowsim.sim.traffic` turns it into endpoints on the virtual clock)::

    [[traffic]]
    name = "download"                   # unique among the tables
    proto = "tcp"                       # tcp, udp or gre
    from = "client"                     # netns of the sender
    to = "2001:db8:3::2"                # destination address
    dport = 5201

``name``, ``proto``, ``from``, ``to`` and (TCP, UDP) ``dport`` are required; the
optional keys are ``src`` (an address configured in ``from``; default the
address the kernel selects for a connection that binds none: the output
route's ``src``, else its device's address in the gateway's subnet for IPv4,
RFC 6724's rules for IPv6, :mod:`flowsim.kernel.saddr`; ``src`` holds the load's
prediction, and the run chooses again when the table starts, after the events
before it: :meth:`flowsim.sim.traffic.Endpoint.connect_saddr`), ``sport``, ``packets`` /
``size`` and ``reply_packets`` / ``reply_size`` (IP lengths), ``handshake``
and ``close`` (TCP only, default on), ``rate`` (packets per second),
``start`` (seconds), ``gso_size``, ``flows``, ``df``, ``acks`` (TCP:
``"linux"`` adds the pure ACKs a Linux receiver sends; default ``"none"``) and
``reply_after`` (TCP: ``"data"`` starts the server's replies with the client's
first data segment, as a server that reads a request first; default
``"accept"``).  ``proto = "gre"`` sends GRE version 0 packets (``gre_build_header``'s
four bytes, protocol 0, then zeros: what a raw socket of protocol 47 writes from ``/dev/zero``)
between the two addresses, which the receiving host's raw socket takes (``raw_local_deliver``); it has no
ports (``sport``, ``dport``), and one flow only: conntrack keys GRE version 0 by its addresses
(``gre_pkt_to_tuple`` behaves as ``nf_conntrack_proto_generic``).  The tables are checked after the
namespaces' commands ran and L2 discovery is done, so ``from`` and ``src``
are checked against the built :class:`~flowsim.config.topology.Topology`.

Every error is one :class:`~flowsim.errors.TopologyError` naming the file,
the command ``[[traffic]]`` and the absolute line of the offending key (of
the table's header when the key is missing), found through the topology
loader's raw-TOML line index (:class:`flowsim.config.raw.RawToml`, since tomllib
gives no line numbers); a duplicate ``name`` names the line of the second one.
Times are bounded (:mod:`flowsim.config.limits`): ``start`` and the span of
the sends, ``packets / rate``, are finite and at most a million seconds.
"""

from __future__ import annotations

import ipaddress
import math

import attrs

from flowsim.config.network import Topology
from flowsim.config.limits import MAX_VIRTUAL_TIME, SECONDS_EXPECTED, is_number, seconds_problem
from flowsim.config.raw import RawToml, short
from flowsim.kernel.devices.base import IPAddress
from flowsim.kernel.headers import GRE_HLEN
from flowsim.kernel.pkt import IP_DEFAULT_TTL
from flowsim.kernel.saddr import ip_route_connect_saddr

__all__ = ["Traffic", "TRAFFIC_KEYS", "PROTOS", "ACK_MODELS", "REPLY_STARTS", "read_traffic"]

PROTOS = ("tcp", "udp", "gre")  # proto = …: what the endpoints send (gre: version 0 over raw sockets)
ACK_MODELS = ("none", "linux")  # acks = …: no pure ACKs, or a Linux receiver's (quick and delayed ACKs)
REPLY_STARTS = ("accept", "data")  # reply_after = …: the server writes once connected, or after the first data


@attrs.frozen
class Traffic:
    """One ``[[traffic]]`` table: a flow the simulator will generate (the one declaration of its fields:
    :class:`flowsim.sim.traffic.TrafficSpec` derives from it).

    ``packets`` go from ``src`` (an address of netns ``from``; default the one
    the kernel selects for a socket that binds none, ``src_bound`` then False:
    :func:`flowsim.kernel.saddr.ip_route_connect_saddr`) to ``to``;
    ``reply_packets`` come back.
    TCP flows do the three-way handshake and a FIN close unless disabled
    (``close = false`` in the file: no close; ``"rst"`` through the API).
    ``rate`` is packets per second (0: back to back), ``start`` seconds.
    With ``gso_size`` the endpoints hand the stack GSO skbs (TSO /
    ``UDP_SEGMENT``): data packets of ``size`` bytes cut later into segments
    of ``gso_size`` payload bytes.  ``flows = N`` plays N connections with
    client ports sport, sport+1, …; ``df = false`` sends IPv4 without DF, as
    a sender with ``net.ipv4.ip_no_pmtu_disc = 1`` does (routers then fragment
    instead of answering Fragmentation Needed).  ``ttl`` has no key in the
    file: sweeps and the API set it.  ``line`` is the table's header line.
    """

    name: str
    proto: str
    netns: str
    src: IPAddress
    dst: IPAddress
    dport: int
    sport: int | None = None
    packets: int = 10
    size: int = 1000
    reply_packets: int = 0
    reply_size: int | None = None
    handshake: bool = True
    close: str | None = "fin"  # "fin", "rst" or None (TCP only)
    rate: float = 0.0
    start: float = 0.0
    flows: int = 1  # several flows: client ports sport, sport+1, …
    ttl: int = IP_DEFAULT_TTL  # TTL / hop limit the endpoints send with
    df: bool | None = None  # IPv4 DF: None = TCP always, UDP when it fits the path MTU; False = ip_no_pmtu_disc
    gso_size: int | None = None  # data as GSO skbs (TSO / UDP_SEGMENT) with segments of this many payload bytes
    acks: str = "none"  # TCP pure ACKs: "none" (the table's reply_packets model them) or "linux" (delayed ACKs)
    reply_after: str = "accept"  # TCP: the server's replies start once connected, or after the first data
    line: int | None = None
    src_bound: bool = True  # the sender binds src; False: the table named none and the kernel's choice is src


TRAFFIC_KEYS = {"name", "proto", "from", "src", "to", "dport", "sport", "packets", "size", "reply_packets",
                 "reply_size", "handshake", "close", "rate", "start", "gso_size", "flows", "df", "acks",
                 "reply_after"}


def read_traffic(items, topo: Topology, raw: RawToml, file: str) -> list[Traffic]:
    """The checked ``[[traffic]]`` tables of a topology file, in file order."""
    out = []
    seen: set[str] = set()
    for _i, line, item, bad in raw.tables(items, "traffic", file, TRAFFIC_KEYS,
                                          ("name", "proto", "from", "to")):
        flow = _one_traffic(item, topo, line, bad)
        if flow.name in seen:  # a set: N tables load in linear time
            raise bad(f"duplicate traffic name {flow.name!r}", flow.name, "unique names", "name")
        seen.add(flow.name)
        out.append(flow)
    return out


def _one_traffic(item: dict, topo: Topology, line: int | None, bad) -> Traffic:
    proto = item["proto"]
    if proto not in PROTOS:
        raise bad(f"bad proto {short(proto)}", proto, ", ".join(PROTOS[:-1]) + f" or {PROTOS[-1]}", "proto")
    _ports(item, proto, bad)
    netns = item["from"]
    if not isinstance(netns, str) or netns not in topo.namespaces:
        raise bad(f"no namespace {short(netns)}", netns, "one of " + ", ".join(topo.namespaces), "from")
    dst = _address(item, "to", bad)
    ns = topo.namespaces[netns]
    if "src" in item:
        src = _address(item, "src", bad)
        if ns.owner_of(src) is None:
            raise bad(f"{src} is not an address of {netns}", str(src), f"an address configured in {netns}", "src")
    else:
        mine = [a.ip for d in ns.devices.values() if d.name != "lo" for a in d.addrs if a.version == dst.version]
        if not mine:
            raise bad(f"{netns} has no IPv{dst.version} address", netns, "a 'src' address", "from")
        # ip_route_connect's choice; without a route the kernel's connect fails: the sender then uses its first
        # address and its packets meet the same missing route
        src = ip_route_connect_saddr(ns, ns.fib.lookup(dst, access=False), dst) or mine[0]
    if src.version != dst.version:
        raise bad("src and to have different families", str(src), "addresses of one family", "src")

    def integer(key: str, lo: int, hi: int, default):
        value = item.get(key, default)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
            raise bad(f"bad {key} {short(value)}", value, f"an integer {lo}..{hi}", key)
        return value

    def flag(key: str) -> bool:
        value = item.get(key, proto == "tcp")
        if not isinstance(value, bool):
            raise bad(f"bad {key} {short(value)}", value, "true or false", key)
        if value and proto != "tcp":
            raise bad(f"{key} is only for tcp", value, f"false for {proto}", key)
        return value


    acks = item.get("acks", "none")
    if acks not in ACK_MODELS:
        raise bad(f"bad acks {short(acks)}", acks, " or ".join(f'"{a}"' for a in ACK_MODELS), "acks")
    if acks != "none" and proto != "tcp":
        raise bad("acks is only for tcp", acks, f"no acks key for {proto}", "acks")
    reply_after = item.get("reply_after", "accept")
    if reply_after not in REPLY_STARTS:
        raise bad(f"bad reply_after {short(reply_after)}", reply_after,
                  " or ".join(f'"{a}"' for a in REPLY_STARTS), "reply_after")
    if reply_after != "accept" and proto != "tcp":
        raise bad("reply_after is only for tcp", reply_after, f"no reply_after key for {proto}", "reply_after")
    df = item.get("df")
    if df is not None and not isinstance(df, bool):
        raise bad(f"bad df {short(df)}", df, "true or false", "df")
    if df is not None and dst.version != 4:
        raise bad("df is only for IPv4 (IPv6 routers never fragment)", df, "no df key for IPv6", "df")
    if not isinstance(item["name"], str) or not item["name"]:
        raise bad("traffic name must be a non-empty string", item["name"], "a string", "name")
    packets = integer("packets", 1, 10**9, 10)
    sport, flows = integer("sport", 1, 65535, None), integer("flows", 1, 65535, 1)
    if sport is not None and sport + flows - 1 > 65535:  # flows use client ports sport … sport + flows - 1
        raise bad(f"flows = {flows} from sport {sport} run past port 65535", flows,
                  f"at most {65536 - sport} flows from sport {sport}", "flows")
    if proto == "gre" and flows > 1:
        raise bad(f"flows = {flows} of GRE would be one connection", flows,
                  "flows = 1: conntrack keys GRE version 0 by its addresses (gre_pkt_to_tuple)", "flows")
    gso_size = integer("gso_size", 1, 65535, None)
    if gso_size is not None and proto == "gre":
        raise bad("gso_size is only for tcp and udp", gso_size, "no gso_size key for gre", "gso_size")
    size, reply_size = integer("size", 1, 65535, 1000), integer("reply_size", 1, 65535, None)
    if proto == "gre":
        least = GRE_HLEN + (20 if dst.version == 4 else 40)
        for key, value in (("size", size), ("reply_size", reply_size)):
            if value is not None and value < least:
                raise bad(f"{key} {value} cannot hold the IP and GRE headers", value,
                          f"at least {least} (an IP length)", key)
    rate, start = _rate(item, packets, bad), _start(item, bad)
    return Traffic(name=item["name"], proto=proto, netns=netns, src=src, dst=dst,
                   dport=0 if proto == "gre" else integer("dport", 1, 65535, None), sport=sport,
                   packets=packets, size=size,
                   reply_packets=integer("reply_packets", 0, 10**9, 0),
                   reply_size=reply_size, handshake=flag("handshake"),
                   close="fin" if flag("close") else None, rate=rate, start=start,
                   gso_size=gso_size, flows=flows, df=df, acks=acks,
                   reply_after=reply_after, line=line, src_bound="src" in item)


def _ports(item: dict, proto: str, bad) -> None:
    """TCP and UDP need ``dport`` (``sport`` is optional); GRE has no ports to give."""
    if proto == "gre":
        for key in ("sport", "dport"):
            if key in item:
                raise bad(f"{key} is not for gre", item[key], f"no {key} key: GRE has no ports", key)
    elif "dport" not in item:
        raise bad("traffic needs 'dport'", expected="name, proto, from, to and dport (tcp and udp)")


def _address(item: dict, key: str, bad) -> IPAddress:
    """An address written as a string (ipaddress would also take an integer: ``to = 5`` is 0.0.0.5)."""
    value = item[key]
    try:
        if not isinstance(value, str):
            raise TypeError
        return ipaddress.ip_address(value)
    except (ValueError, TypeError):
        raise bad(f"bad address {short(value)}", value, "an IP address as a string", key) from None


def _start(item: dict, bad) -> float:
    """``start``: when the client begins, a time a run can reach (:mod:`flowsim.config.limits`)."""
    value = item.get("start", 0)
    why = seconds_problem(value)
    if why is not None:
        raise bad(f"bad start {short(value)}: {why}", value, SECONDS_EXPECTED, "start")
    return float(value)


def _rate(item: dict, packets: int, bad) -> float:
    """``rate`` in packets per second (0: back to back), finite, and slow enough only for the sends to end
    within a run's bounded virtual time (``packets / rate`` seconds)."""
    value = item.get("rate", 0)
    if not is_number(value) or not math.isfinite(value) or value < 0:
        raise bad(f"bad rate {short(value)}", value, "a finite number of packets per second >= 0 (0: back to back)",
                  "rate")
    if value > 0 and seconds_problem(packets / value) is not None:
        raise bad(f"rate {value!r} spreads {packets} packets over {packets / value:g} s", value,
                  f"a rate of at least {packets / MAX_VIRTUAL_TIME:g} packets per second "
                  f"(a run's virtual time is at most {MAX_VIRTUAL_TIME:.0f} s)", "rate")
    return float(value)
