"""NAT on conntrack: the range a rule asks for, the tuple chosen, the packet rewritten.

Theory of operation
-------------------
NAT is bound once per connection and manip, when its first packet passes
the NAT hook: :meth:`flowsim.kernel.conntrack.ConntrackTable.nf_nat_setup_info`
turns the rule's :class:`NatRange` (``struct nf_nat_range2``) into a tuple
with :func:`get_unique_tuple` (keep the original when it is in range and
free, else pick an address and the first free port) and rewrites the REPLY
tuple once, so that replies are found by their translated addresses.  Both
directions' packets are then mangled from the tuples
(:func:`flowsim.kernel.conntrack.nf_nat_packet` calls :func:`nf_nat_manip_pkt`),
exactly as the flowtable's NAT (``nf_flow_nat_ip``/``nf_flow_nat_ipv6``) does.  :func:`nf_nat_manip_pkt` and
the ``csum_*`` helpers work on a ``bytearray`` with incremental checksum
updates (RFC 1624, :func:`flowsim.kernel.headers.csum_replace`) and are meant to be
reused by the fast path.

This module mirrors the tuple choice of ``nf_nat_core.c`` and the packet
manipulation of ``nf_nat_proto.c``.  It sits below :mod:`flowsim.kernel.conntrack`,
which re-exports its public names and imports nothing the other way: a
tuple is whatever has the fields of :class:`NatTuple` (the conntrack's
``CtTuple``), and "is this tuple taken" is asked of the table passed to
:func:`get_unique_tuple` (:class:`NatTupleTable`, ``nf_nat_used_tuple``).
"""

from __future__ import annotations

import ipaddress
from typing import Protocol, TypeVar

import attrs

from flowsim.kernel.headers import csum_replace, ipv6_skip_exthdr

__all__ = [
    "NatRange", "NatTuple", "NatTupleTable", "get_unique_tuple", "csum_replace2", "csum_replace4",
    "ipv6_l4_offset", "nf_nat_manip_pkt",
]

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class NatTuple(Protocol):
    """The fields of ``struct nf_conntrack_tuple`` NAT reads (an attrs class: ``attrs.evolve`` makes the candidates)."""

    @property
    def src(self) -> IpAddress: ...

    @property
    def dst(self) -> IpAddress: ...

    @property
    def sport(self) -> int: ...

    @property
    def dport(self) -> int: ...

    @property
    def l3proto(self) -> int: ...

    @property
    def l4proto(self) -> int: ...


_Tuple = TypeVar("_Tuple", bound=NatTuple)
_Tuple_contra = TypeVar("_Tuple_contra", bound=NatTuple, contravariant=True)
_Entry_contra = TypeVar("_Entry_contra", contravariant=True)


class NatTupleTable(Protocol[_Tuple_contra, _Entry_contra]):
    """The conntrack table as ``get_unique_tuple`` asks it (``nf_nat_used_tuple``)."""

    def nf_nat_used_tuple(self, t: _Tuple_contra, ignored: _Entry_contra) -> bool: ...


# shared with flowsim.kernel.conntrack (tuple inversion, the ICMP "new" check), which imports it from here
_ICMP_ECHO = {1: (8, 0), 58: (128, 129)}  # l4proto -> (echo request, echo reply)


@attrs.frozen
class NatRange:
    """struct nf_nat_range2: addresses and ports to map to (None: keep).

    A maximum left None is the minimum, as ``nft_nat_init`` sets
    ``sreg_addr_max``/``sreg_proto_max`` to the minimum's register.
    """

    addr_min: IpAddress | None = None
    addr_max: IpAddress | None = None
    port_min: int | None = None
    port_max: int | None = None
    flags: frozenset[str] = frozenset()  # random, fully-random, persistent

    @property
    def addr_hi(self) -> IpAddress | None:
        return self.addr_min if self.addr_max is None else self.addr_max

    @property
    def port_hi(self) -> int | None:
        return self.port_min if self.port_max is None else self.port_max

    @classmethod
    def from_request(cls, req, *, addr=None) -> NatRange:
        """From an nft NatRequest (duck-typed); *addr* is the masquerade/redirect address."""
        amin = req.addr_min if addr is None else addr
        amax = req.addr_max if addr is None else addr
        return cls(amin, amax, req.port_min, req.port_max, frozenset(req.flags))


def get_unique_tuple(table: NatTupleTable[_Tuple, _Entry_contra], orig: _Tuple, rng: NatRange, manip: str,
                     ct: _Entry_contra) -> _Tuple:
    """get_unique_tuple: keep what is in range and free, else pick an address and a free port.

    The kernel starts the port search at a random or hashed offset; here it
    starts at the original port so that runs are reproducible.
    """
    random = rng.flags & {"random", "fully-random"}
    addr_field, port_field = ("src", "sport") if manip == "src" else ("dst", "dport")
    if manip == "src" and not random and _in_range(orig, rng, addr_field, port_field) \
            and not table.nf_nat_used_tuple(orig, ct):
        return orig
    t = orig
    addr_hi = rng.addr_hi
    if rng.addr_min is not None and addr_hi is not None:  # find_best_ips_proto: stable choice by the other address
        lo, hi = int(rng.addr_min), int(addr_hi)
        key = int(orig.src) + (0 if "persistent" in rng.flags else int(orig.dst))
        pick = lo + key % (hi - lo + 1)
        # mypy's attrs plugin cannot see through the NatTuple protocol; CtTuple is an attrs class
        t = attrs.evolve(t, **{addr_field: ipaddress.ip_address(pick) if orig.l3proto == 2
                               else ipaddress.IPv6Address(pick)})  # type: ignore[misc]
    if orig.l4proto in _ICMP_ECHO:
        port_field = "sport"  # the echo id, whatever the manip
    elif orig.l4proto not in (6, 17, 136, 132, 33):
        return t  # no ports to choose (GRE, …)
    port_hi = rng.port_hi
    if rng.port_min is None or port_hi is None:
        if manip == "dst" and orig.l4proto not in _ICMP_ECHO:
            return t  # a DNAT without ports keeps the port
        port = getattr(t, port_field)
        if orig.l4proto in _ICMP_ECHO:
            lo, size = 0, 65536
        elif port < 512:
            lo, size = 1, 511
        elif port < 1024:
            lo, size = 600, 424
        else:
            lo, size = 1024, 64512
    else:
        lo, size = rng.port_min, port_hi - rng.port_min + 1
    start = getattr(t, port_field)
    off = (start - lo) % size if lo <= start < lo + size else 0
    cand = t
    for i in range(size):
        cand = attrs.evolve(t, **{port_field: lo + (off + i) % size})  # type: ignore[misc]  # as above
        if not table.nf_nat_used_tuple(cand, ct):
            return cand
    return cand  # all taken: the clash drops the packet at confirm


def _in_range(t: NatTuple, rng: NatRange, addr_field: str, port_field: str) -> bool:
    a = getattr(t, addr_field)
    if rng.addr_min is not None and not (rng.addr_min <= a <= rng.addr_hi):
        return False
    p = getattr(t, port_field)
    return rng.port_min is None or rng.port_min <= p <= rng.port_hi


# ----------------------------------------------------------------- checksums and NAT mangling

def csum_replace2(check: int, old: int, new: int) -> int:
    """csum_replace2: a 16-bit field changed from *old* to *new*."""
    return csum_replace(check, old.to_bytes(2, "big"), new.to_bytes(2, "big"))


def csum_replace4(check: int, old: bytes, new: bytes) -> int:
    """csum_replace4 (and its 16-byte IPv6 cousin): an address changed."""
    return csum_replace(check, bytes(old), bytes(new))


def ipv6_l4_offset(buf, l3off: int) -> tuple[int, int, int]:
    """(layer-4 protocol, its offset, fragment offset) after the IPv6 extension headers (ipv6_skip_exthdr)."""
    def read(off, n):
        return bytes(buf[off:off + n]) if off + n <= len(buf) else None
    off, nh, frag = ipv6_skip_exthdr(read, l3off + 40, buf[l3off + 6])
    return nh, off, frag


def _l4_csum_update(buf, l4proto: int, l4off: int, old: bytes, new: bytes, pseudo: bool) -> None:
    """Update the L4 checksum for a change of *old* to *new* bytes it covers."""
    pos = {6: 16, 17: 6, 136: 6, 1: 2, 58: 2}.get(l4proto)
    if pos is None or l4off + pos + 2 > len(buf):
        return
    if l4proto == 1 and pseudo:
        return  # ICMPv4 has no pseudo-header
    check = int.from_bytes(buf[l4off + pos:l4off + pos + 2], "big")
    if l4proto in (17, 136) and check == 0:
        return  # UDP without checksum stays so (udp_manip_pkt)
    check = csum_replace(check, old, new)
    if l4proto in (17, 136) and check == 0:
        check = 0xFFFF  # CSUM_MANGLED_0
    buf[l4off + pos:l4off + pos + 2] = check.to_bytes(2, "big")


def nf_nat_manip_pkt(buf: bytearray, l3off: int, manip: str, target: NatTuple) -> None:
    """Rewrite the source (``manip="src"``) or destination of the packet at *l3off* to *target*'s.

    Addresses and ports (ICMP echo: the id) are set from *target*; the IPv4
    header checksum and the L4 checksum (TCP always, UDP only when non-zero,
    a zero result becoming 0xFFFF) are updated incrementally (``inet_proto_csum_replace4``,
    as ``nf_nat_ipv4_manip_pkt`` and the flowtable's ``nf_flow_nat_ip_l4`` do).
    """
    version = buf[l3off] >> 4
    if version == 4:
        l4proto = buf[l3off + 9]
        l4off = l3off + (buf[l3off] & 0x0F) * 4
        addr_off = l3off + (12 if manip == "src" else 16)
        alen = 4
        frag = int.from_bytes(buf[l3off + 6:l3off + 8], "big") & 0x1FFF
    else:
        l4proto, l4off, frag = ipv6_l4_offset(buf, l3off)
        addr_off = l3off + (8 if manip == "src" else 24)
        alen = 16
        frag = frag & ~0x7 or l4off < 0
    new_addr = getattr(target, manip).packed
    old_addr = bytes(buf[addr_off:addr_off + alen])
    if not frag:  # later fragments carry no L4 header
        if l4proto in _ICMP_ECHO:
            pos, new_port = l4off + 4, target.sport
        else:
            pos = l4off + (0 if manip == "src" else 2)
            new_port = target.sport if manip == "src" else target.dport
        if l4proto in (6, 17, 136, 1, 58) and pos + 2 <= len(buf):
            old_port = bytes(buf[pos:pos + 2])
            new_bytes = new_port.to_bytes(2, "big")
            if l4proto not in _ICMP_ECHO or buf[l4off] in _ICMP_ECHO[l4proto]:
                _l4_csum_update(buf, l4proto, l4off, old_port, new_bytes, pseudo=False)
                buf[pos:pos + 2] = new_bytes
        if old_addr != new_addr:
            _l4_csum_update(buf, l4proto, l4off, old_addr, new_addr, pseudo=True)
    if version == 4:
        check = int.from_bytes(buf[l3off + 10:l3off + 12], "big")
        buf[l3off + 10:l3off + 12] = csum_replace4(check, old_addr, new_addr).to_bytes(2, "big")
    buf[addr_off:addr_off + alen] = new_addr

