"""A model of ``struct sk_buff``: bytes, offsets, the linear part, and what access costs.

Theory of operation
-------------------
The packet bytes live in one ``bytearray`` with some headroom in front.
``data`` is the offset of ``skb->data`` in it; ``len`` is everything from
``data`` to the end.  Only the first ``headlen`` bytes after ``data`` are in
the *linear* area; the rest stands for page fragments.  That split is what
the kernel's header access functions care about, and what the review of the
tunnel patches turned on:

* :meth:`SkBuff.header_pointer` (``skb_header_pointer``) returns the bytes
  without copying when they are linear, copies them (counted) when not, and
  returns ``None`` beyond the end;
* :meth:`SkBuff.may_pull` (``pskb_may_pull``) makes bytes linear, counting a
  head reallocation and the bytes copied when it has to;
* :meth:`SkBuff.pull` (``skb_pull``) moves ``data`` forward; doing so over
  bytes that are not linear is a kernel bug, raised as
  :class:`flowsim.errors.SkbPullBug`.

Offsets given to ``header_pointer``/``may_pull``/``pull`` are relative to
``skb->data``, as in the kernel.  ``mac_header``, ``network_header`` and
``transport_header`` are absolute offsets into the buffer.

Receive (:func:`skb_from_frame`) follows ``eth_type_trans`` and
``__netif_receive_skb_core``: the Ethernet header becomes the MAC header and
is pulled, and the outermost 802.1Q/802.1AD tag is moved into the hwaccel
tag by ``skb_vlan_untag`` before any ingress hook runs.
"""

from __future__ import annotations

from typing import Any, Protocol

import attrs

from flowsim.errors import SkbPullBug
from flowsim.kernel.headers import ETH_HLEN, ETH_P_8021AD, ETH_P_8021Q, VLAN_HLEN

_bytes = bytes  # inside SkBuff the method SkBuff.bytes shadows the builtin in annotations


class SkbTag(Protocol):
    """What the kernel reads of the simulator's label on a packet (:class:`flowsim.kernel.stack.core.PacketTag`)."""

    @property
    def traffic(self) -> str | None: ...

    @property
    def direction(self) -> str | None: ...

    #: the length of the zero payload the sending host put at the packet's end (frame_on_wire's claim)
    zeros: int

__all__ = ["SkbCost", "SkBuff", "skb_from_frame", "frame_on_wire", "NET_SKB_PAD", "HEADROOM", "ZEROS", "buffer_of"]

NET_SKB_PAD = 64  # headroom drivers reserve (max(32, L1_CACHE_BYTES) on x86-64)
HEADROOM = bytes(NET_SKB_PAD)  # an skb's buffer starts as these zeros (skb_reserve)


@attrs.define(slots=True)
class SkbCost:
    """What header access cost this skb: copies by ``skb_header_pointer``,
    head reallocations by ``pskb_may_pull``/``skb_cow_head``, and bytes copied."""

    copies: int = 0
    reallocs: int = 0
    bytes_copied: int = 0
    pull_bugs: int = 0

    def add(self, other: SkbCost) -> None:
        self.copies += other.copies
        self.reallocs += other.reallocs
        self.bytes_copied += other.bytes_copied
        self.pull_bugs += other.pull_bugs


@attrs.define(slots=True, eq=False)
class SkBuff:
    """``struct sk_buff``, the parts the flowtable reads and writes."""

    buf: bytearray
    data: int  # offset of skb->data in buf
    linear_end: int  # offset in buf where the linear area ends (data + skb_headlen)
    mac_header: int = -1
    network_header: int = -1
    transport_header: int = -1
    protocol: int = 0  # skb->protocol (host order)
    vlan_present: bool = False  # skb_vlan_tag_present
    vlan_proto: int = 0
    vlan_tci: int = 0
    iif: int = 0  # skb->skb_iif / the ingress device's ifindex
    gso_size: int = 0  # non-zero for a GSO skb (skb_shinfo(skb)->gso_size)
    gso_type: int = 0  # skb_shinfo(skb)->gso_type: SKB_GSO_* bits (flowsim.kernel.gso)
    tailroom: int = 0  # free bytes after the linear area (none for a head filled by the driver)
    mark: int = 0  # skb->mark
    tag: SkbTag | None = None  # the simulator's label: which traffic, direction and packet this is
    drop_reason: str | None = None  # reason id when a hook returned NF_DROP
    sec_path: tuple = ()  # skb_sec_path: the xfrm states that decrypted it, outermost first
    # What ip_frag_reasm / nf_ct_ipv4_gather_frags leave on a reassembled IPv4 packet (0 / False / () otherwise):
    frag_max_size: int = 0  # IPCB(skb)->frag_max_size: the largest fragment received (IP header + data)
    frag_pmtu: bool = False  # IPCB(skb)->flags & IPSKB_FRAG_PMTU: that largest fragment had DF
    ignore_df: bool = False  # skb->ignore_df: set by nf_defrag_ipv4 after reassembly
    frag_list: tuple[int, ...] = ()  # skb_shinfo(skb)->frag_list: data bytes of each original fragment
    # skb->_nfct as a device's ndo_start_xmit sees it: (namespace, NfCtx), set by ip_finish_output for the
    # tunnels' icmp_ndo_send / icmpv6_ndo_send, which undo NAT on the packet they quote
    nfct: Any = None
    # Cost counters kept as plain fields: one object less per packet.
    copies: int = 0
    reallocs: int = 0
    bytes_copied: int = 0
    pull_bugs: int = 0

    @property
    def cost(self) -> SkbCost:
        """A snapshot of this skb's access cost."""
        return SkbCost(self.copies, self.reallocs, self.bytes_copied, self.pull_bugs)

    # --- sizes -------------------------------------------------------------
    @property
    def len(self) -> int:
        """``skb->len``: bytes from ``data`` to the end."""
        return len(self.buf) - self.data

    @property
    def headlen(self) -> int:
        """``skb_headlen``: linear bytes from ``data``."""
        return self.linear_end - self.data

    @property
    def headroom(self) -> int:
        return self.data

    def bytes(self) -> bytes:
        """The packet from ``skb->data`` to the end."""
        return bytes(self.buf[self.data:])

    # --- header access -----------------------------------------------------
    def header_pointer(self, offset: int, length: int):
        """``skb_header_pointer``: *length* bytes at *offset* from data.

        A ``memoryview`` of the buffer when linear (no copy), a counted copy
        (``bytes``) when they reach into the fragments, ``None`` beyond the end.
        """
        start = self.data + offset
        end = start + length
        if offset < 0 or end > len(self.buf):
            return None
        if end <= self.linear_end:
            return memoryview(self.buf)[start:end]
        self.copies += 1
        self.bytes_copied += length
        return bytes(self.buf[start:end])

    def may_pull(self, length: int) -> bool:
        """``pskb_may_pull``: make *length* bytes from data linear if they exist."""
        need = self.data + length
        if need <= self.linear_end:
            return True
        if need > len(self.buf):
            return False
        # __pskb_pull_tail: copy the missing bytes into the head; when the
        # tailroom is short, pskb_expand_head reallocates it with 128 spare bytes.
        delta = need - self.linear_end
        if delta > self.tailroom:
            self.reallocs += 1
            self.tailroom = 128
        else:
            self.tailroom -= delta
        self.bytes_copied += delta
        self.linear_end = need
        return True

    def pull(self, length: int) -> None:
        """``skb_pull``: advance data by *length*; crossing the linear area is a kernel bug."""
        if self.data + length > self.linear_end:
            self.pull_bugs += 1
            raise SkbPullBug(self.data, length, self.headlen)
        self.data += length

    def push(self, header: _bytes) -> None:
        """``skb_cow_head`` + ``skb_push``: prepend *header*, reallocating the head if headroom is short."""
        n = len(header)
        if self.data < n:
            grow = max(NET_SKB_PAD, n - self.data)
            self.buf[0:0] = bytes(grow)
            self.data += grow
            self.linear_end += grow
            for name in ("mac_header", "network_header", "transport_header"):
                value = getattr(self, name)
                if value >= 0:
                    setattr(self, name, value + grow)
            self.reallocs += 1
        self.data -= n
        self.buf[self.data:self.data + n] = header

    def reset_network_header(self) -> None:
        """``skb_reset_network_header``."""
        self.network_header = self.data

    def ensure_writable(self, length: int) -> bool:
        """``skb_ensure_writable``: *length* bytes from data must exist and be linear."""
        return self.may_pull(length)

    # --- hwaccel VLAN tag ----------------------------------------------------
    def vlan_hwaccel_put_tag(self, proto: int, tci: int) -> None:
        """``__vlan_hwaccel_put_tag``."""
        self.vlan_present = True
        self.vlan_proto = proto
        self.vlan_tci = tci

    def vlan_hwaccel_clear_tag(self) -> None:
        """``__vlan_hwaccel_clear_tag``."""
        self.vlan_present = False
        self.vlan_proto = 0
        self.vlan_tci = 0


def skb_vlan_untag(skb: SkBuff) -> bool:
    """``skb_vlan_untag``: move the in-band outer tag into the hwaccel tag.

    Only the outermost tag, and only when no tag is present yet.  Returns
    False when the tag header is truncated (the kernel frees the skb).
    """
    if skb.vlan_present:
        return True
    if not skb.may_pull(VLAN_HLEN):
        return False
    buf, d = skb.buf, skb.data
    tci = (buf[d] << 8) | buf[d + 1]
    encap = (buf[d + 2] << 8) | buf[d + 3]
    skb.vlan_hwaccel_put_tag(skb.protocol, tci)
    skb.protocol = encap  # vlan_set_encap_proto
    # skb_pull_rcsum + skb_reorder_vlan_header: the MAC addresses move up by
    # VLAN_HLEN so the MAC header again directly precedes the network header.
    skb.data += VLAN_HLEN
    mac = skb.mac_header
    buf[mac + VLAN_HLEN:mac + VLAN_HLEN + 12] = buf[mac:mac + 12]
    skb.mac_header = mac + VLAN_HLEN
    skb.network_header = skb.data
    skb.transport_header = skb.data
    return True


def skb_from_frame(frame: bytes, iif: int = 0, headlen: int | None = None,
                   rx_vlan_offload: bool = True, gso_size: int = 0, gso_type: int = 0,
                   zeros: int = 0, mark: int = 0, tag: SkbTag | None = None) -> SkBuff | None:
    """An Ethernet frame as the skb an ingress hook sees (``eth_type_trans`` +
    ``__netif_receive_skb_core``).

    *headlen* is the number of frame bytes in the linear area (default: the
    whole frame; at least the Ethernet header, which every driver pulls).
    With *rx_vlan_offload* the outermost 802.1Q/802.1AD tag becomes the
    hwaccel tag.  *zeros* zero bytes follow *frame* (a frame as it waits on
    the wire: :func:`frame_on_wire`).  *mark* and *tag* are the skb's.  Returns ``None`` for a runt frame
    (shorter than an Ethernet header, or a truncated outer tag) that the
    kernel would drop before any hook.
    """
    n = len(frame) + zeros
    if n < ETH_HLEN:
        return None
    if headlen is None or headlen > n:
        headlen = n
    elif headlen < ETH_HLEN:
        headlen = ETH_HLEN
    data = NET_SKB_PAD + ETH_HLEN
    # the headroom, the frame and its zero tail joined into a buffer allocated once (a third of the time of a
    # zeroed buffer the frame is copied into, for a frame without a zero tail)
    if zeros:
        buf = buffer_of((HEADROOM, frame, _ZERO_VIEW[:zeros] if zeros <= len(ZEROS) else bytes(zeros)))
    else:
        buf = buffer_of((HEADROOM, frame))
    # positional arguments, in field order: this runs once per received frame
    skb = SkBuff(buf, data, NET_SKB_PAD + headlen, NET_SKB_PAD, data, data,
                 (buf[NET_SKB_PAD + 12] << 8) | buf[NET_SKB_PAD + 13], False, 0, 0, iif, gso_size, gso_type, 0,
                 mark, tag)
    if rx_vlan_offload and skb.protocol in (ETH_P_8021Q, ETH_P_8021AD) and not skb_vlan_untag(skb):
        return None
    return skb


def frame_on_wire(buf: bytes | bytearray, start: int, zeros: int) -> tuple[bytes, int]:
    """The frame from offset *start* of *buf* as it waits on the wire: its bytes before a tail of *zeros*
    zero bytes, and that tail's length -- 0 when the tail is not all zeros (:func:`skb_from_frame` puts the
    zeros back).

    Flowsim's payloads are zeros, so a frame in flight is mostly a zero tail; a run whose connections all
    start at once has two frames in flight per connection (issue 16).  The caller names the tail (the sending
    host's zero payload) and one compare with a zero buffer checks it: ``bytes.rstrip`` would test the tail
    a byte at a time, 3 ns a byte.
    """
    end = len(buf) - zeros
    if zeros <= 0 or zeros > len(ZEROS) or end < start or not buf.endswith(_ZERO_VIEW[:zeros]):
        return bytes(buf[start:]), 0
    return bytes(buf[start:end]), zeros


#: zeros as long as an IP packet's largest payload: the longest zero payload the stack checks without summing it
#: (frame_on_wire here, the receiver's flowsim.kernel.stack.ip._l4_ok)
ZEROS = bytes(65536)
_ZERO_VIEW = memoryview(ZEROS)  # its prefixes without a copy
#: a new bytearray of the given parts, sized once (``bytearray().join``: the empty separator is never written):
#: an skb's buffer, the headroom then what follows it (skb_from_frame; flowsim.kernel.pkt.new_skb)
buffer_of = bytearray().join
