"""ovpn packet ids: the per-key transmit counter and the receiver's replay window.

Theory of operation (drivers/net/ovpn/pktid.{c,h})
--------------------------------------------------
The packet id is the part of the AEAD nonce that travels on the wire, so a
(key, id) pair must never be used twice.  The transmit side keeps one 32-bit
counter per key slot, starting at 1:

* ``ovpn_pktid_xmit_next`` (every record, before the series) is a
  fetch-and-add-unless-zero: it hands out the current value and increments;
  once the counter has wrapped to 0 it fails with ``-ERANGE`` and the caller
  kills the key.  Usable ids are 1 … 2³²−1.
* ``ovpn_pktid_xmit_reserve`` (one per UDP GSO batch, with the series)
  takes *n* consecutive ids in one atomic step; if the counter cannot supply
  all *n* it takes none and fails with ``-ERANGE`` (ids are handed out in one gapless run; what
  v5 does with a partial remainder is unverified).

An id that was handed out is spent whatever happens next: a later failure
*burns* it (a gap on the wire, harmless to the receiver), it is never given
back.  :class:`PktidXmit` keeps the history of handouts and burns so tests
and the CLI can check the invariants.

The receiver (``ovpn_pktid_recv``) keeps a sliding window of
``REPLAY_WINDOW_SIZE`` = 2048 ids: id 0 is refused, a forward jump clears
the ids in between, a backtrack is accepted once if it is still inside the
window's extent and above the floor.
"""

from __future__ import annotations

import attrs

__all__ = ["PktidXmit", "PktidRecv", "PKTID_MAX", "REPLAY_WINDOW_SIZE", "ERANGE", "EINVAL"]

PKTID_MAX = 0xFFFFFFFF
REPLAY_WINDOW_ORDER = 8
REPLAY_WINDOW_SIZE = (1 << REPLAY_WINDOW_ORDER) * 8  # bytes of history × 8 bits = 2048 ids
ERANGE = 34
EINVAL = 22


@attrs.define(slots=True)
class PktidXmit:
    """``struct ovpn_pktid_xmit``: the per-key atomic counter (0 once exhausted) and its history."""

    seq_num: int = 1
    handouts: list[tuple[int, int]] = attrs.field(factory=list)  # (first id, count), in order
    burned: list[int] = attrs.field(factory=list)
    exhausted: bool = False

    def ovpn_pktid_xmit_next(self) -> int:
        """One id, or ``-ERANGE`` once the counter wrapped (``atomic_fetch_add_unless(…, 1, 0)``)."""
        return self.ovpn_pktid_xmit_reserve(1)

    def ovpn_pktid_xmit_reserve(self, n: int) -> int:
        """*n* consecutive ids in one step: the first, or ``-ERANGE`` (nothing taken) if they do not fit."""
        if n < 1:
            raise ValueError("reserve at least one packet id")
        cur = self.seq_num
        if cur == 0 or cur + n - 1 > PKTID_MAX:
            self.exhausted = True
            return -ERANGE
        # The counter wraps to 0 after handing out 2^32-1: the next call fails (``atomic_fetch_add_unless(&pid->seq_num, 1, 0)``).
        self.seq_num = (cur + n) & PKTID_MAX
        self.handouts.append((cur, n))
        return cur

    def burn(self, first: int, n: int = 1) -> None:
        """Record that ids ``first … first+n-1`` were spent without a record reaching the wire."""
        self.burned.extend(range(first, first + n))


@attrs.define(slots=True)
class PktidRecv:
    """``struct ovpn_pktid_recv``: highest id seen, window extent, bitmap (bit d = id − d seen)."""

    id: int = 0
    extent: int = 0
    history: int = 0
    id_floor: int = 0
    window: int = REPLAY_WINDOW_SIZE

    def ovpn_pktid_recv(self, pkt_id: int) -> int:
        """0 if *pkt_id* is new and inside the window (and mark it), else ``-EINVAL``."""
        if pkt_id == 0:
            return -EINVAL
        mask = (1 << self.window) - 1
        if pkt_id > self.id:
            delta = pkt_id - self.id
            if delta < self.window:
                # Forward jump: the ids skipped over stay unmarked (gaps are harmless).
                self.history = ((self.history << delta) | 1) & mask
                self.extent = min(self.window, self.extent + delta)
            else:
                self.history = 1
                self.extent = self.window
            self.id = pkt_id
            return 0
        delta = self.id - pkt_id
        if delta >= self.extent or pkt_id <= self.id_floor:
            return -EINVAL
        if (self.history >> delta) & 1:
            return -EINVAL  # replay
        self.history |= 1 << delta
        return 0
