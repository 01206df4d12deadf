"""What every device kind shares, and the device-path values (include/linux/netdevice.h).

Theory of operation
-------------------
A device is a mutable :class:`NetDevice` (one subclass per kind, one module
per kind in :mod:`flowsim.kernel.devices`).  It knows its namespace, name, ifindex,
MAC, MTU, up/down state and addresses, and — by *name*, within its own
namespace, as the kernel keeps ``real_dev`` / ``pppoe_dev`` / the DSA conduit —
the device it is stacked on (``lower``).  Relations across namespaces (veth
peers, DSA cables) live in the topology graph only.

Path resolution mirrors ``struct net_device_path_ctx`` and ``struct
net_device_path``: :class:`PathCtx` is the mutable walk context (current
device, destination MAC, the VLANs pushed so far) and each kind's
``fill_forward_path(ctx)`` returns either the filled :class:`PathEntry` (after
moving ``ctx.dev`` down) or a :class:`PathError` (the kernel's negative return,
with the device and kernel function that refused).

:class:`Command` says where a configuration step came from (file, line, the
command text) so that every error can name it; :class:`Args` is the token
stream of one command line with the value parsers shared by all kinds.
"""

from __future__ import annotations

import builtins
import enum
import errno as _errno
import hashlib
import ipaddress
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import attrs

from flowsim.errors import TopologyError
from flowsim.kernel.headers import (  # re-exported: the device modules and their tests name them from here
    Encap,
    ETH_P_8021AD,
    ETH_P_8021Q,
    ETH_P_IP,
    ETH_P_IPV6,
    ETH_P_PPP_SES,
    IPPROTO_IPIP,
    IPPROTO_IPV6,
    mac_aton,
    mac_ntoa,
)
from flowsim.kernel.headers import RT_SCOPE_HOST, RT_SCOPE_UNIVERSE

_LOOPNET = ipaddress.IPv4Network("127.0.0.0/8")

#: what strtoul reads as octal with base 0: a 0 and octal digits
_STRTOUL_OCTAL = re.compile(r"0[0-7]+")

__all__ = [
    "ETH_P_IP", "ETH_P_IPV6", "ETH_P_8021Q", "ETH_P_8021AD", "ETH_P_PPP_SES",
    "IPPROTO_IPIP", "IPPROTO_IPV6", "NET_DEVICE_PATH_STACK_MAX", "NET_DEVICE_PATH_VLAN_MAX", "MAX_NEST_DEV",
    "ETH_DATA_LEN",
    "ZERO_MAC", "DevPathType", "BrVlanMode", "Command", "Args", "IfAddr", "NetDevice",
    "Encap", "PathEncap", "PathTun", "PathBridge", "PathDsa", "PathEntry", "PathError", "PathCtx",
    "mac_for", "parse_mac", "mac_from_bytes", "is_zero_mac", "is_valid_unicast_mac",
    "IFNAMSIZ", "DEV_NAME_EXPECTED", "dev_valid_name",
]

NET_DEVICE_PATH_STACK_MAX = 5  # including the final ETHERNET entry
NET_DEVICE_PATH_VLAN_MAX = 2
MAX_NEST_DEV = 8  # include/linux/netdevice.h: the most devices one chain of upper links may hold
ETH_DATA_LEN = 1500  # include/uapi/linux/if_ether.h: an Ethernet device's MTU, a bridge's without ports
ZERO_MAC = "00:00:00:00:00:00"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class DevPathType(enum.IntEnum):
    """``enum net_device_path_type`` (include/linux/netdevice.h)."""

    ETHERNET = 0
    VLAN = 1
    BRIDGE = 2
    PPPOE = 3
    DSA = 4
    MTK_WDMA = 5
    TUN = 6


class BrVlanMode(enum.IntEnum):
    """``DEV_PATH_BR_VLAN_*`` (include/linux/netdevice.h)."""

    KEEP = 0
    TAG = 1
    UNTAG = 2
    UNTAG_HW = 3


# --------------------------------------------------------------------------- MACs

def mac_for(netns: str, name: str) -> str:
    """A deterministic, locally administered unicast MAC for *netns*/*name*.

    Real kernels pick random addresses (``eth_hw_addr_random``); a hash keeps
    runs reproducible while staying inside the locally administered range.
    """
    digest = hashlib.sha256(f"{netns}/{name}".encode()).digest()
    return mac_from_bytes(b"\x02" + digest[:5])


#: the first 6 bytes of *raw* (zero padded) as ``aa:bb:cc:dd:ee:ff`` (``%pM``): :func:`flowsim.kernel.headers.mac_ntoa`
mac_from_bytes = mac_ntoa


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def parse_mac(text: str) -> str:
    """Canonical form of a MAC written ``aa:bb:cc:dd:ee:ff``; ValueError otherwise."""
    parts = text.split(":")
    # hex digits only: int() alone would take "-1", " f" or "+f" (iproute2's ll_addr_a2n refuses "-1", > 0xff)
    if len(parts) != 6 or not all(1 <= len(p) <= 2 and all(c in _HEX_DIGITS for c in p) for p in parts):
        raise ValueError(text)
    return ":".join(f"{int(p, 16):02x}" for p in parts)


def is_zero_mac(mac: str | None) -> bool:
    """``is_zero_ether_addr``."""
    return mac is None or mac == ZERO_MAC


def is_valid_unicast_mac(mac: str | None) -> bool:
    """``is_valid_ether_addr``: not multicast and not all zeros."""
    return mac is not None and not is_zero_mac(mac) and not int(mac[:2], 16) & 1


# --------------------------------------------------------------------------- where a step came from

@attrs.frozen
class Command:
    """One configuration command and where it was written (for error messages)."""

    text: str
    netns: str
    file: str | None = None
    line: int | None = None

    def error(self, message: str, *, value: Any = None, expected: str | None = None) -> TopologyError:
        """The one :class:`TopologyError` naming file, line and command."""
        return TopologyError(message, file=self.file, line=self.line, command=self.text,
                             value=value, expected=expected)


IFNAMSIZ = 16  # include/uapi/linux/if.h, with the terminating NUL
# lib/ctype.c: the bytes the kernel's isspace() is true for (latin-1 NBSP included)
_KERNEL_SPACE = frozenset(b"\t\n\v\f\r \xa0")
DEV_NAME_EXPECTED = (f"1 to {IFNAMSIZ - 1} bytes without '/', ':' or whitespace, not '.' or '..' "
                     "(dev_valid_name)")


def dev_valid_name(name: str) -> str | None:
    """``dev_valid_name``: None if the kernel accepts *name* as a device name, else why not."""
    raw = name.encode("utf-8", "surrogateescape")
    if not raw:
        return "empty device name"
    if len(raw) >= IFNAMSIZ:
        return f"device name of {len(raw)} bytes is too long"
    if name in (".", ".."):
        return f"device name {name!r} is reserved"
    for byte in raw:
        if byte in b"/:\0" or byte in _KERNEL_SPACE:
            return f"device name {name!r} contains {chr(byte)!r}"
    return None


class Args:
    """The remaining tokens of one command, with the shared value parsers."""

    def __init__(self, cmd: Command, tokens: list[str]):
        self.cmd = cmd
        self.tokens = list(tokens)
        self.pos = 0

    def __bool__(self) -> bool:
        return self.pos < len(self.tokens)

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def next(self, what: str) -> str:
        """The next token; a missing one is an error saying *what* was expected."""
        if self.pos >= len(self.tokens):
            prev = self.tokens[self.pos - 1] if self.pos else self.cmd.text.split()[0]
            raise self.cmd.error(f"missing argument after {prev!r}", expected=what)
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def rest(self) -> list[str]:
        out = self.tokens[self.pos:]
        self.pos = len(self.tokens)
        return out

    # --- value parsers: each names the keyword and what it expected
    def int(self, keyword: str, lo: int, hi: int, *, base: int = 0) -> int:
        text = self.next(f"an integer {lo}..{hi} after {keyword!r}")
        try:
            # iproute2's get_unsigned: strtoul(arg, &end, 0), where a leading 0 means octal (mtu 01500 is 832)
            value = int(text, 8) if base == 0 and _STRTOUL_OCTAL.fullmatch(text) else int(text, base)
        except ValueError:
            raise self.cmd.error(f"bad value {text!r} for {keyword!r}", value=text,
                                 expected=f"an integer {lo}..{hi}") from None
        if not lo <= value <= hi:
            raise self.cmd.error(f"value {value} for {keyword!r} out of range", value=text,
                                 expected=f"an integer {lo}..{hi}")
        return value

    def mac(self, keyword: str) -> str:
        text = self.next(f"a MAC address after {keyword!r}")
        try:
            return parse_mac(text)
        except ValueError:
            raise self.cmd.error(f"bad MAC address {text!r} for {keyword!r}", value=text,
                                 expected="a MAC address like 02:00:00:00:00:01") from None

    def addr(self, keyword: str, family: builtins.int | None = None) -> IPAddress:  # builtins: Args.int shadows
        want = {4: "an IPv4 address", 6: "an IPv6 address", None: "an IP address"}[family]
        text = self.next(f"{want} after {keyword!r}")
        try:
            value = ipaddress.ip_address(text)
        except ValueError:
            raise self.cmd.error(f"bad address {text!r} for {keyword!r}", value=text, expected=want) from None
        if family is not None and value.version != family:
            raise self.cmd.error(f"address {text!r} for {keyword!r} has the wrong family", value=text,
                                 expected=want)
        return value

    def choice(self, keyword: str, choices: dict[str, Any]) -> Any:
        text = self.next(f"one of {', '.join(choices)} after {keyword!r}")
        if text not in choices:
            raise self.cmd.error(f"bad value {text!r} for {keyword!r}", value=text,
                                 expected="one of " + ", ".join(choices))
        return choices[text]

    def name(self, keyword: str) -> str:
        text = self.next(f"a device name after {keyword!r}")
        problem = dev_valid_name(text)
        if problem is not None:
            raise self.cmd.error(f"bad device name {text!r}: {problem}", value=text, expected=DEV_NAME_EXPECTED)
        return text


def parse_kind_args(args: Args, table: Mapping[str, tuple[str, Callable[[Args, str], Any] | None]],
                    kind: str) -> dict[str, Any]:
    """Parse ``KEYWORD VALUE`` / ``FLAG`` tokens after ``type KIND`` using *table*.

    *table* maps a keyword to ``(option name, parser)``; a ``None`` parser is a
    flag (its option becomes ``True``).  Dispatch by keyword keeps each kind's
    syntax in one place, as iproute2's ``link_*.c`` files do.
    """
    opts: dict[str, Any] = {}
    while args:
        keyword = args.next("an option")
        if keyword not in table:
            raise args.cmd.error(f"unknown option {keyword!r} for type {kind}", value=keyword,
                                 expected="one of " + ", ".join(table))
        option, parser = table[keyword]
        opts[option] = True if parser is None else parser(args, keyword)
    return opts


# --------------------------------------------------------------------------- devices

@attrs.frozen
class IfAddr:
    """An address on a device (``struct in_ifaddr`` / ``inet6_ifaddr``)."""

    local: ipaddress.IPv4Interface | ipaddress.IPv6Interface
    peer: ipaddress.IPv4Interface | ipaddress.IPv6Interface | None = None
    metric: int = 0  # ifa_rt_priority (`metric N`): its prefix route's metric; 0 = the family's default
    noprefixroute: bool = False  # IFA_F_NOPREFIXROUTE: the kernel installs no prefix route for it
    # ifa_scope (`scope S`), IPv4's: what inet_select_addr may pick it for.  iproute2's default_scope gives
    # 127.0.0.0/8 host scope, every other address global.  IPv6 ignores it (inet6_rtm_newaddr: an IPv6
    # address's scope is its own, ipv6_addr_scope)
    scope: int = attrs.field()

    @scope.default
    def _default_scope(self) -> int:
        return RT_SCOPE_HOST if self.local.version == 4 and self.local.ip in _LOOPNET else RT_SCOPE_UNIVERSE

    @property
    def ip(self) -> IPAddress:
        return self.local.ip

    @property
    def version(self) -> int:
        return self.local.version

    @property
    def prefix(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        """The prefix of the connected route the kernel installs for it."""
        return (self.peer or self.local).network

    def __str__(self) -> str:
        if self.peer is not None:
            return f"{self.local.ip} peer {self.peer.with_prefixlen}"
        return self.local.with_prefixlen


@attrs.define(slots=True, eq=False)
class NetDevice:
    """A network device (``struct net_device``), one subclass per kind.

    ``lower`` names the device this one is stacked on in the same namespace
    (VLAN real device, PPPoE Ethernet device, DSA conduit, tunnel ``dev``).
    """

    LINK_TYPE: ClassVar[str] = "ether"  # ARPHRD_ETHER; others: loopback, tunnel, tunnel6, ppp, none, ipgre
    # NETIF_F_GSO_SOFTWARE in dev->features: the device takes GSO skbs whole (veth, VLAN, bridge, loopback and
    # the IP tunnels do); without it validate_xmit_skb segments them in software first
    GSO: ClassVar[bool] = True

    netns: str
    name: str
    kind: str
    ifindex: int = 0
    mac: str | None = None
    mtu: int = ETH_DATA_LEN
    up: bool = False
    addrs: list[IfAddr] = attrs.field(factory=list)
    master: str | None = None
    lower: str | None = None
    addr_set: bool = False  # NET_ADDR_SET: an `address` was given, never recomputed
    mtu_set: bool = False  # BROPT_MTU_SET_BY_USER: `ip link set … mtu` (not at creation) stops a bridge's auto adjust
    line: int | None = None  # where it was created, for later error messages

    @property
    def link_type(self) -> str:
        return self.LINK_TYPE

    def dev_addr(self) -> bytes:
        """``dev->dev_addr``: the MAC for Ethernet-like devices, the local address for tunnels."""
        if self.mac is None:
            return b""
        return mac_aton(self.mac)

    def h_source(self) -> str:
        """The 6 bytes ``nft_dev_path_info`` copies from ``dev_addr`` as a MAC string."""
        return mac_from_bytes(self.dev_addr())

    def is_valid_ether(self) -> bool:
        """``nft_is_valid_ether_device``: ARPHRD_ETHER, 6-byte valid unicast address, not loopback."""
        return self.link_type == "ether" and is_valid_unicast_mac(self.mac)

    def describe(self) -> str:
        """Kind-specific details for listings (``ip -d link``)."""
        return ""

    def addresses(self, version: int | None = None) -> list[IfAddr]:
        return [a for a in self.addrs if version is None or a.version == version]

    def ipv4_primary(self, prefix) -> IfAddr | None:
        """The primary IPv4 address of *prefix* on this device: its first one (``__inet_insert_ifa`` marks the
        later ones ``IFA_F_SECONDARY``), None when it has none."""
        return next((a for a in self.addrs if a.version == 4 and a.prefix == prefix), None)


# --------------------------------------------------------------------------- path values

@attrs.frozen
class PathEncap:
    """``net_device_path.encap``: VLAN or PPPoE id, protocol and (PPPoE) peer MAC."""

    id: int
    proto: int
    h_dest: str | None = None


@attrs.frozen
class PathTun:
    """``net_device_path.tun`` / ``struct flow_offload_tunnel``."""

    src: IPAddress
    dst: IPAddress
    l3_proto: int
    # path->tun.dst (7.3): the route the resolver looked up, kept as the tunnel direction's route
    # (switch tunnel_route=resolver); not part of the tuple
    route: Any = attrs.field(default=None, eq=False, repr=False)

    def to_json(self) -> dict:
        return {"src": str(self.src), "dst": str(self.dst), "l3_proto": self.l3_proto}

    def __str__(self) -> str:
        name = {IPPROTO_IPIP: "ipip", IPPROTO_IPV6: "ip6ip6"}.get(self.l3_proto, str(self.l3_proto))
        return f"{self.src} -> {self.dst} ({name})"


@attrs.frozen
class PathBridge:
    """``net_device_path.bridge``."""

    vlan_mode: BrVlanMode = BrVlanMode.KEEP
    vlan_id: int = 0
    vlan_proto: int = 0


@attrs.frozen
class PathDsa:
    """``net_device_path.dsa``: switch port index and tagger protocol."""

    port: int
    proto: str


@attrs.frozen
class PathEntry:
    """One filled slot of ``struct net_device_path_stack``."""

    type: DevPathType
    dev: str
    ifindex: int
    encap: PathEncap | None = None
    tun: PathTun | None = None
    bridge: PathBridge | None = None
    dsa: PathDsa | None = None

    def recorded(self, typed: bool = False) -> dict:
        """What the resolver recorded besides type and device: ethertypes and PPPoE session ids in hex as
        iproute2 prints them (for people), or with *typed* every number an integer (the JSON form)."""
        def num(value: int) -> int | str:
            return value if typed else f"0x{value:04x}"
        if self.encap is not None:
            ident = num(self.encap.id) if self.encap.proto == ETH_P_PPP_SES else self.encap.id
            out: dict[str, Any] = {"id": ident, "proto": num(self.encap.proto)}
            if self.encap.h_dest is not None:
                out["h_dest"] = self.encap.h_dest
            return out
        if self.tun is not None:
            return self.tun.to_json()
        if self.bridge is not None:
            return {"vlan_mode": self.bridge.vlan_mode.name, "vlan_id": self.bridge.vlan_id,
                    "vlan_proto": num(self.bridge.vlan_proto)}
        if self.dsa is not None:
            return {"port": self.dsa.port, "proto": self.dsa.proto}
        return {}

    def to_json(self) -> dict:
        return {"type": self.type.name, "dev": self.dev, "ifindex": self.ifindex, **self.recorded(typed=True)}

    def __str__(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.recorded().items())
        return f"{self.type.name} {self.dev}" + (f" [{extra}]" if extra else "")


@attrs.frozen
class PathError:
    """Why a path could not be used: the kernel's return value and who refused.

    ``index`` is the stack slot (entry) being filled or aggregated, ``dev``
    the device of that entry, ``func`` the kernel function that refused.
    """

    errno: int
    dev: str | None
    func: str
    reason: str
    index: int | None = None

    def to_json(self) -> dict:
        return {"errno": self.errno, "errname": _errname(self.errno), "dev": self.dev,
                "entry": self.index, "func": self.func, "reason": self.reason}

    def __str__(self) -> str:
        where = f"entry {self.index} ({self.dev})" if self.index is not None else (self.dev or "?")
        return f"{self.func}: {self.reason} [{where}, {_errname(self.errno)}]"


def _errname(err: int) -> str:
    if err == -1:
        return "-1"
    if -err == _errno.EOPNOTSUPP:  # errorcode[] names it by its alias ENOTSUP
        return "-EOPNOTSUPP"
    return "-" + _errno.errorcode.get(-err, str(-err))


@attrs.define(slots=True)
class PathCtx:
    """``struct net_device_path_ctx`` plus the namespace and profile the walk needs."""

    ns: Any  # flowsim.config.topology.Namespace (devices by name, FIB)
    profile: Any  # flowsim.profiles.Profile
    dev: NetDevice | None
    daddr: str
    vlans: list[Encap] = attrs.field(factory=list)
    ether_type: int = 0  # ctx->ether_type (7.3): pkt->ethertype of the packet that creates the flow

    def fail(self, err: int, func: str, reason: str) -> PathError:
        return PathError(err, self.dev.name if self.dev is not None else None, func, reason)
