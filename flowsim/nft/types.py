"""nft data types: symbol tables and the coercion of written values.

Every right-hand side of a rule is parsed first as *raw* values (an atom
with its token kind and location, a range ``a-b``, a ``a/b`` slash or a set)
and typed only once the selector is known, as nft's evaluation step types
constants by the datatype of the left-hand side.  :data:`SYMBOLS` holds the
names each type accepts (``tcp``, ``established``, ``cs3`` …) with the
kernel's values.
"""

from __future__ import annotations

import ipaddress
import re

import attrs

from flowsim.nft.model import NFPROTO_IPV4, NFPROTO_IPV6, SELECTORS, Loc, Range

__all__ = ["FIB_EXISTS", "SYMBOLS", "BITMASK_DTYPES", "DTYPES", "SET_TYPES", "coerce", "coerce_atom", "nft_number",
           "RawAtom", "RawRange", "RawSlash", "RawSet", "TOKEN_KIND"]

#: symbolic constants per data type (nft's datatype symbol tables).
SYMBOLS: dict[str, dict[str, int]] = {
    "inet_proto": {"icmp": 1, "igmp": 2, "ipip": 4, "ipencap": 4, "tcp": 6, "udp": 17, "ipv6": 41,
                   "gre": 47, "esp": 50, "ah": 51, "icmpv6": 58, "ipv6-icmp": 58, "dccp": 33,
                   "comp": 108, "sctp": 132, "udplite": 136},
    "inet_service": {"ftp": 21, "ssh": 22, "telnet": 23, "smtp": 25, "domain": 53, "bootps": 67,
                     "bootpc": 68, "http": 80, "ntp": 123, "snmp": 161, "https": 443,
                     "dhcpv6-client": 546, "dhcpv6-server": 547},
    "nf_proto": {"ipv4": NFPROTO_IPV4, "ipv6": NFPROTO_IPV6},
    "ether_type": {"ip": 0x0800, "arp": 0x0806, "ip6": 0x86DD, "vlan": 0x8100, "8021ad": 0x88A8},
    "dscp": {**{f"cs{i}": 8 * i for i in range(8)},
             "af11": 10, "af12": 12, "af13": 14, "af21": 18, "af22": 20, "af23": 22, "af31": 26,
             "af32": 28, "af33": 30, "af41": 34, "af42": 36, "af43": 38, "va": 44, "ef": 46, "le": 1},
    # NF_CT_STATE_INVALID_BIT, NF_CT_STATE_BIT(ctinfo) = 1 << (ctinfo % IP_CT_IS_REPLY + 1), UNTRACKED
    "ct_state": {"invalid": 1, "established": 2, "related": 4, "new": 8, "untracked": 64},
    # IPS_* bits of uapi nf_conntrack_common.h (same values as flowsim.kernel.conntrack.IPS_*)
    "ct_status": {"expected": 1, "seen-reply": 2, "assured": 4, "confirmed": 8, "snat": 16,
                  "dnat": 32, "dying": 512},
    "ct_dir": {"original": 0, "reply": 1},
    "tcp_flag": {"fin": 0x01, "syn": 0x02, "rst": 0x04, "psh": 0x08, "ack": 0x10, "urg": 0x20,
                 "ecn": 0x40, "cwr": 0x80},
    "icmp_type": {"echo-reply": 0, "destination-unreachable": 3, "source-quench": 4, "redirect": 5,
                  "echo-request": 8, "router-advertisement": 9, "router-solicitation": 10,
                  "time-exceeded": 11, "parameter-problem": 12, "timestamp-request": 13,
                  "timestamp-reply": 14},
    "icmpv6_type": {"destination-unreachable": 1, "packet-too-big": 2, "time-exceeded": 3,
                    "parameter-problem": 4, "echo-request": 128, "echo-reply": 129,
                    "mld-listener-query": 130, "mld-listener-report": 131, "mld-listener-done": 132,
                    "nd-router-solicit": 133, "nd-router-advert": 134, "nd-neighbor-solicit": 135,
                    "nd-neighbor-advert": 136, "nd-redirect": 137, "mld2-listener-report": 143},
    # nftables src/proto.c: `icmp code` is icmp_code_type, `icmpv6 code` icmpv6_code_type — `nft list ruleset`
    # prints these names (firewall4's `icmpv6 code 0` comes back as `no-route`)
    "icmp_code": {"net-unreachable": 0, "host-unreachable": 1, "prot-unreachable": 2, "port-unreachable": 3,
                  "frag-needed": 4, "net-prohibited": 9, "host-prohibited": 10, "admin-prohibited": 13},
    "icmpv6_code": {"no-route": 0, "admin-prohibited": 1, "addr-unreachable": 3, "port-unreachable": 4,
                    "policy-fail": 5, "reject-route": 6},
    # nftables src/datatype.c's icmpx_code_type: NFT_REJECT_ICMPX_* (include/uapi/linux/netfilter/nf_tables.h)
    "icmpx_code": {"no-route": 0, "port-unreachable": 1, "host-unreachable": 2, "admin-prohibited": 3},
    # nftables src/fib.c's fib_addr_type: the RTN_* route types (include/uapi/linux/rtnetlink.h)
    "fib_addrtype": {"unspec": 0, "unicast": 1, "local": 2, "broadcast": 3, "anycast": 4, "multicast": 5,
                     "blackhole": 6, "unreachable": 7, "prohibit": 8},
}

BITMASK_DTYPES = frozenset({"ct_state", "ct_status", "tcp_flag"})

#: ``fib … oif missing`` / ``exists`` (nft sets NFTA_FIB_F_PRESENT and compares the found flag with 0 or 1): the
#: value an ``exists`` compares equal to — any device found
FIB_EXISTS = "<exists>"

#: the largest value of each integer data type (bits of the kernel register)
_MAXVAL = {"inet_proto": 255, "inet_service": 65535, "nf_proto": 255, "ether_type": 0xFFFF,
           "dscp": 63, "ct_state": 0xFF, "ct_status": 0xFFFFFFFF, "ct_dir": 1, "tcp_flag": 0xFF,
           "icmp_type": 255, "icmpv6_type": 255, "icmp_code": 255, "icmpv6_code": 255, "mark": 0xFFFFFFFF, "integer": 0xFFFFFFFF,
           "fib_addrtype": 255}

#: named-set ``type`` keywords -> data type
SET_TYPES = {"ipv4_addr": "ipv4_addr", "ipv6_addr": "ipv6_addr", "inet_service": "inet_service",
              "inet_proto": "inet_proto", "ifname": "ifname", "mark": "mark", "iface_index": "iface_index",
              "ct_state": "ct_state", "verdict": "verdict", "counter": "counter", "dscp": "dscp"}

#: what each data type accepts, for messages
_EXPECTED = {"ipv4_addr": "an IPv4 address, prefix or range", "ipv6_addr": "an IPv6 address, prefix or range",
             "ct_addr": "an IPv4 or IPv6 address", "ifname": "an interface name",
             "iface_index": "an interface name or index"}


@attrs.frozen
class RawAtom:
    kind: str  # num ip4 ip6 name str
    text: str
    loc: Loc


@attrs.frozen
class RawRange:
    lo: RawAtom
    hi: RawAtom
    loc: Loc


@attrs.frozen
class RawSlash:
    left: RawAtom
    right: RawAtom
    loc: Loc


@attrs.frozen
class RawSet:
    elems: tuple  # raw values, or (key, value) pairs for maps
    loc: Loc


TOKEN_KIND = {"NUMBER": "num", "IPV4_ADDR": "ip4", "IPV6_ADDR": "ip6", "IDENT": "name", "STRING": "str"}


def nft_number(text: str) -> int:
    """A NUMBER token's value as nft's scanner reads it (src/scanner.l, checked with nft 1.0.6): ``0x``/``0X`` and
    hex digits, ``0`` and octal digits (``022`` is 18), else decimal (``018`` is 18, ``09`` is 9)."""
    if text[:2] in ("0x", "0X"):
        return int(text[2:], 16)
    if len(text) > 1 and text[0] == "0" and _OCTAL.fullmatch(text):
        return int(text, 8)
    return int(text, 10)


_OCTAL = re.compile(r"0[0-7]+")


def coerce_atom(dtype: str, a: RawAtom, err):
    """One raw atom as a typed scalar of *dtype* (int, address, str)."""
    if dtype == "ct_helper":  # `ct helper set "ftp"`: the name of a `ct helper` object
        if a.kind in ("str", "name"):
            return a.text
        raise err(f"{a.text!r} is not a ct helper name", a.loc, a.text, "a quoted ct helper object name")
    if dtype == "fib_oif":  # `fib … oif`: missing, exists, or an interface as for `meta oif`
        if a.kind == "name" and a.text in ("missing", "exists"):
            return 0 if a.text == "missing" else FIB_EXISTS
        dtype = "iface_index"
    if dtype in ("ifname", "iface_index"):
        if a.kind in ("str", "name"):
            return a.text
        if a.kind == "num" and dtype == "iface_index":
            return nft_number(a.text)
        raise err(f"{a.text!r} is not an interface", a.loc, a.text, _EXPECTED[dtype])
    if dtype in ("ipv4_addr", "ipv6_addr", "ct_addr"):
        want = {"ipv4_addr": ("ip4",), "ipv6_addr": ("ip6",), "ct_addr": ("ip4", "ip6")}[dtype]
        if a.kind not in want:
            raise err(f"{a.text!r} is not a valid {dtype.replace('_', ' ')}", a.loc, a.text, _EXPECTED[dtype])
        try:
            return ipaddress.ip_address(a.text)
        except ValueError:
            raise err(f"bad address {a.text!r}", a.loc, a.text, _EXPECTED[dtype]) from None
    if a.kind == "num":
        v = nft_number(a.text)
    elif a.kind == "name" and a.text in SYMBOLS.get(dtype, {}):
        v = SYMBOLS[dtype][a.text]
    else:
        syms = SYMBOLS.get(dtype)
        expected = "a number" + (" or one of " + ", ".join(syms) if syms else "")
        raise err(f"{a.text!r} is not a valid {dtype.replace('_', ' ')} value", a.loc, a.text, expected)
    if not 0 <= v <= _MAXVAL.get(dtype, 0xFFFFFFFF):
        raise err(f"value {v} out of range for {dtype.replace('_', ' ')}", a.loc, a.text,
                  f"0..{_MAXVAL.get(dtype, 0xFFFFFFFF)}")
    return v


def coerce(dtype: str, v, err):
    """A raw value (atom, range, prefix) as a set element of *dtype*."""
    if isinstance(v, RawAtom):
        return coerce_atom(dtype, v, err)
    if isinstance(v, RawRange):
        lo, hi = coerce_atom(dtype, v.lo, err), coerce_atom(dtype, v.hi, err)
        if type(lo) is not type(hi) or lo > hi:
            raise err("bad range", v.loc, f"{v.lo.text}-{v.hi.text}", "LOW-HIGH with LOW <= HIGH")
        return Range(lo, hi)
    if isinstance(v, RawSlash) and dtype in ("ipv4_addr", "ipv6_addr", "ct_addr"):
        coerce_atom(dtype, v.left, err)
        try:
            return ipaddress.ip_network(f"{v.left.text}/{v.right.text}", strict=False)
        except ValueError:
            raise err("bad prefix", v.loc, f"{v.left.text}/{v.right.text}", "ADDRESS/LENGTH") from None
    if isinstance(v, RawSet):
        raise err("nested set not allowed here", v.loc, None, "a value")
    raise err(f"'/' is not valid for {dtype.replace('_', ' ')}", v.loc, None, "a value")


DTYPES = tuple(sorted({s.dtype for s in SELECTORS.values()}))

