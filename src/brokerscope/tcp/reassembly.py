"""Streaming reassembly of one direction of a TCP connection.

Positions are 64-bit stream offsets: offset 0 is the first data byte (the sequence number after the
SYN's, or the first sequence number seen when the capture starts mid-stream). A 32-bit sequence
number is mapped to an offset by serial arithmetic with the direction's history: a segment lies at
most one TCP window (MAX_WINDOW) behind the next expected byte (a retransmission can be no older)
and otherwise ahead of it, so wrap-around across 2^32 is seamless and a hole of up to 4 GiB minus
a window is measured exactly. The peer's ACK is believed up to MAX_ACK_AHEAD beyond the next
expected byte, and at any distance up to what this direction was seen sending (`high`). Holes of
4 GiB or more cannot be told from smaller ones: sequence numbers repeat every 4 GiB. The FIN
occupies one offset, as it occupies one sequence number.

Only bytes that arrive ahead of a hole are held (as non-overlapping pieces, at most
`max_reorder_bytes` of them, and at most `max_reorder_bytes // 256` pieces); delivered bytes are
never kept. A hole becomes a gap event of its
exact size once it is certain: the peer acknowledged past it, the held bytes (or pieces) exceed
their limit, it is older than `reorder_timeout_ns` of capture time, or `flush` is called.
"""

from __future__ import annotations

from bisect import bisect_right
from heapq import heappop, heappush

from .packet import DATA, FIN, GAP, RST, SYN, Event, Packet

MASK = 0xFFFFFFFF
WRAP = 1 << 32
# The largest window TCP can advertise (RFC 7323): nothing is retransmitted from further back than
# this behind the next expected byte, so a sequence number further behind is a jump ahead.
MAX_WINDOW = 65535 << 14
BEHIND = WRAP - MAX_WINDOW  # a 32-bit distance at or beyond this is a step back
# An ACK further ahead than this of anything this direction was seen sending is not believed (a
# corrupt or unrelated ACK must not declare a gigantic gap).
MAX_ACK_AHEAD = 1 << 30
# Held pieces also cost their bookkeeping (~200 bytes each): tiny out-of-order segments are capped
# by count as well, at one piece per PIECE_COST bytes of the byte limit (at least MIN_PIECES).
PIECE_COST = 256
MIN_PIECES = 64
_SYN_FIN = SYN | FIN
_SYN_FIN_RST = SYN | FIN | RST
# Zeek's scaled history letters repeat at the 1st, 10th, 100th, ... occurrence
POWERS_OF_TEN = frozenset(10**k for k in range(20))


# the counters a direction's reassembly keeps (see Reassembler's docstring), all non-negative
COUNTERS = (
    "delivered_bytes",
    "retransmitted_bytes",
    "out_of_order",
    "gap_count",
    "gap_bytes",
    "keepalives",
    "zero_window_probes",
)


class Reassembler:
    """One direction of a connection: segments in, ("data"/"gap", ...) events out, in stream order.

    Counters: `delivered_bytes` (bytes handed out as data), `retransmitted_bytes` (payload bytes
    received again: already delivered or already held), `out_of_order` (segments that brought new
    bytes ahead of a hole), `gap_count`/`gap_bytes` (bytes never captured; adjacent holes declared
    together count once), `keepalives` (segments at next-1 with 0 or 1 byte), `zero_window_probes`
    (1-byte segments sent while the peer advertised a zero window; the first copy is data, repeats
    also count as retransmitted bytes), `rxmit_packets` (segments that brought retransmitted bytes).

    `peer_window_zero` is set by the connection from the other side's advertised window.
    Event timestamps: data carries the capture time (and frame number) of the packet that brought
    it; a gap carries the capture time of the packet whose bytes follow it, or the time it was
    declared if none do.
    """

    __slots__ = (
        "max_reorder_bytes",
        "max_pieces",
        "reorder_timeout_ns",
        "from_lo",
        "isn",
        "base_seq",
        "midstream",
        "next_off",
        "high",
        "_nseq",
        "_blocked",
        "_starts",
        "_pieces",
        "_buffered",
        "_arrivals",
        "_hole_since",
        "fin_off",
        "fin_done",
        "_fin_ts",
        "peer_window_zero",
        "history",
        "rxmit_packets",
        *COUNTERS,
    )

    def __init__(
        self,
        max_reorder_bytes: int = 8 << 20,
        reorder_timeout_ns: int = 5_000_000_000,
        from_lo: bool = True,
    ) -> None:
        self.max_reorder_bytes = max_reorder_bytes
        self.max_pieces = max(MIN_PIECES, max_reorder_bytes // PIECE_COST)
        self.reorder_timeout_ns = reorder_timeout_ns
        self.from_lo = from_lo  # the direction flag put into events
        self.isn: int | None = None  # sequence number of this side's SYN, if one was seen
        self.base_seq: int | None = None  # 32-bit sequence number of stream offset 0
        self.midstream = False  # the direction started without a SYN
        self.next_off = 0  # stream offset of the next expected byte
        self.high = 0  # end offset of the furthest data (or FIN) this direction was seen sending
        self._nseq = -1  # 32-bit sequence number of next_off; -1 until the direction starts
        self._blocked = False  # something is held beyond a hole (pieces or a FIN)
        self._starts: list[int] = []  # start offsets of the held pieces, sorted
        self._pieces: list[list] = []  # [start, end, bytes | None (known lost), arrival ts_ns, frame]
        self._buffered = 0  # bytes held in pieces
        self._arrivals: list[tuple[int, int]] = []  # heap of (arrival ts_ns, start) of held pieces
        self._hole_since = 0  # capture time since when the current hole is known
        self.fin_off: int | None = None  # stream offset of the FIN
        self.fin_done = False  # the FIN was reached in order (next_off is past it)
        self._fin_ts = 0
        self.peer_window_zero = False
        # the connection's history letters (TcpConnection sets it): G at the 1st, 10th, 100th, ...
        # gap, T at the 1st, 10th, ... segment that brought bytes received before
        self.history: list[str] | None = None
        self.rxmit_packets = 0  # segments with retransmitted payload (bytes received before)
        self.delivered_bytes = 0
        self.retransmitted_bytes = 0
        self.out_of_order = 0
        self.gap_count = 0
        self.gap_bytes = 0
        self.keepalives = 0
        self.zero_window_probes = 0

    @property
    def started(self) -> bool:
        return self._nseq >= 0

    @property
    def next_seq(self) -> int | None:
        """32-bit sequence number of the next expected byte (None before the first segment)."""
        return self._nseq if self._nseq >= 0 else None

    @property
    def buffered_bytes(self) -> int:
        """Bytes currently held out of order."""
        return self._buffered

    # ------------------------------------------------------------------------------------------
    # input

    def segment(self, pkt: Packet) -> list[Event]:
        """Take one segment sent by this direction; return the events it makes available."""
        # Fast path: the next expected segment, nothing held, no SYN/FIN, payload fully captured.
        if pkt.seq == self._nseq and not self._blocked and not pkt.flags & _SYN_FIN:
            n = pkt.payload_len
            payload = pkt.payload
            if n == len(payload):
                if n:
                    self._nseq = (self._nseq + n) & MASK
                    self.next_off += n
                    self.delivered_bytes += n
                    if n == 1 and self.peer_window_zero:
                        self.zero_window_probes += 1
                    return [(DATA, self.from_lo, payload, pkt.ts_ns, pkt.frame)]
                return []
        rx = self.retransmitted_bytes  # retransmissions only take the slow path
        out = self._segment_slow(pkt)
        if self.retransmitted_bytes != rx:
            self.rxmit_packets += 1
            if self.rxmit_packets in POWERS_OF_TEN and self.history is not None:
                self.history.append("T" if self.from_lo else "t")
        return out

    def peer_ack(self, ack: int, ts_ns: int) -> list[Event]:
        """The other side acknowledged everything before sequence number `ack`: holes below it are
        certain to be gaps."""
        nseq = self._nseq
        if nseq < 0:
            return []
        d = (ack - nseq) & MASK
        if d > MAX_ACK_AHEAD:
            d = self._far_ack(ack)
        if d == 0:
            # nothing new acknowledged (or an implausible ACK)
            if self._blocked and ts_ns - self._hole_since > self.reorder_timeout_ns:
                out: list[Event] = []
                self._check_hole(ts_ns, out)
                return out
            return []
        if d == 1 and not self._pieces and self.fin_off is None:
            # one sequence number past everything this direction was seen sending, nothing held
            # beyond: its FIN, not captured (or a last byte: a gap once bytes after it come)
            return []
        out = []
        ack_off = self.next_off + d
        while self.next_off < ack_off:
            target, gts = ack_off, ts_ns
            if self._pieces and self._pieces[0][0] < target:
                target, gts = self._pieces[0][0], self._pieces[0][3]
            if self.fin_off is not None and not self.fin_done and self.next_off <= self.fin_off < target:
                target, gts = self.fin_off, self._fin_ts
            if target > self.next_off:
                self._gap(out, target - self.next_off, gts)
                self.next_off = target
            self._drain(out, True)
        self._check_hole(ts_ns, out)
        return out

    def _far_ack(self, ack: int) -> int:
        """How far beyond next_off an ACK more than MAX_ACK_AHEAD ahead lies, measured from the
        furthest byte this direction was seen sending: a hole of any size below it is credibly
        acknowledged (and up to MAX_ACK_AHEAD beyond it). 0 when not credible."""
        if self.high <= self.next_off:
            return 0
        dh = (ack - self.base_seq - self.high) & MASK
        if dh >= BEHIND:
            dh -= WRAP
        ack_off = self.high + dh
        return ack_off - self.next_off if dh <= MAX_ACK_AHEAD and ack_off > self.next_off else 0

    def flush(self, ts_ns: int) -> list[Event]:
        """End of the direction: every hole becomes a gap and all held bytes are delivered."""
        out: list[Event] = []
        while self._blocked:
            self._skip_hole(out)
        return out

    # ------------------------------------------------------------------------------------------
    # internals

    def _segment_slow(self, pkt: Packet) -> list[Event]:
        out: list[Event] = []
        flags = pkt.flags
        seq = pkt.seq
        ts = pkt.ts_ns
        n = pkt.payload_len
        payload = pkt.payload
        if len(payload) > n:  # never trust captured bytes beyond the IP lengths (link padding)
            payload = payload[:n]

        if self._nseq < 0:
            if flags & RST and not n:
                return out  # a bare RST (often seq 0) does not start a direction
            if flags & SYN:
                self.isn = seq
                start = (seq + 1) & MASK
            else:
                start = seq
                self.midstream = True
            self.base_seq = start
            self._nseq = start
            self.next_off = 0
        elif flags & SYN and self.isn is None:
            self.isn = seq

        data_seq = (seq + 1) & MASK if flags & SYN else seq
        d = (data_seq - self._nseq) & MASK
        if d >= BEHIND:
            d -= WRAP
        nxt = self.next_off
        off = nxt + d
        end = off + n
        if end + (flags & FIN) > self.high:  # the FIN takes one sequence number
            self.high = end + (flags & FIN)

        if d == -1 and n <= 1 and not flags & _SYN_FIN_RST:
            if n and self.peer_window_zero:  # a zero-window probe sent again
                self.zero_window_probes += 1
                self.retransmitted_bytes += 1
            else:
                self.keepalives += 1
            if self._blocked:
                self._check_hole(ts, out)
            return out

        moved = False
        if n:
            if end <= nxt:
                self.retransmitted_bytes += n
            else:
                cap_end = off + len(payload)
                if off < nxt:  # the front was delivered already
                    self.retransmitted_bytes += nxt - off
                    payload = payload[nxt - off :] if cap_end > nxt else b""
                    off = nxt
                    if cap_end < off:
                        cap_end = off
                if off == nxt and n == 1 and self.peer_window_zero:
                    self.zero_window_probes += 1
                if off == nxt and not self._pieces:
                    # in order with nothing held: deliver, the uncaptured tail is a gap right away
                    if cap_end > off:
                        out.append((DATA, self.from_lo, payload, ts, pkt.frame))
                        self.delivered_bytes += cap_end - off
                    if end > cap_end:
                        self._gap(out, end - cap_end, ts)
                    self.next_off = end
                    moved = True
                else:
                    added = 0
                    if cap_end > off:
                        added += self._insert(off, cap_end, payload, ts, pkt.frame)
                    if end > cap_end:
                        added += self._insert(cap_end, end, None, ts, pkt.frame)
                    if added and off > nxt:
                        self.out_of_order += 1

        if flags & FIN and not self.fin_done and end >= self.next_off and self.fin_off is None:
            self.fin_off = end
            self._fin_ts = ts

        self._drain(out, moved)
        if self._blocked:
            self._check_hole(ts, out)
        return out

    def _gap(self, out: list[Event], nbytes: int, ts: int) -> None:
        """Append a gap event, merged with a gap that immediately precedes it in `out`."""
        self.gap_bytes += nbytes
        if out and out[-1][0] == GAP:
            prev = out[-1]
            out[-1] = (GAP, self.from_lo, prev[2] + nbytes, prev[3])
            return
        self.gap_count += 1
        if self.gap_count in POWERS_OF_TEN and self.history is not None:
            self.history.append("G" if self.from_lo else "g")
        out.append((GAP, self.from_lo, nbytes, ts))

    def _insert(self, s: int, e: int, data, ts: int, frame: int) -> int:
        """Hold [s, e) (data None: known lost) minus what is held already; return new bytes held."""
        starts = self._starts
        pieces = self._pieces
        i = bisect_right(starts, s)
        if i and pieces[i - 1][1] > s:
            i -= 1
        j = i
        k = len(pieces)
        pos = s
        new: list[list] = []
        while pos < e:
            if j < k and pieces[j][0] < e:
                ps, pe = pieces[j][0], pieces[j][1]
                if ps > pos:
                    new.append(self._piece(pos, ps, s, data, ts, frame))
                covered = min(pe, e) - max(ps, pos)
                if covered > 0:
                    self.retransmitted_bytes += covered
                if pe > pos:
                    pos = pe
                j += 1
            else:
                new.append(self._piece(pos, e, s, data, ts, frame))
                pos = e
        if not new:
            return 0
        for p in new:
            heappush(self._arrivals, (p[3], p[0]))
        if i == j:
            pieces[i:i] = new
            starts[i:i] = [p[0] for p in new]
        else:
            merged = sorted(pieces[i:j] + new, key=_start)
            pieces[i:j] = merged
            starts[i:j] = [p[0] for p in merged]
        added = sum(p[1] - p[0] for p in new)
        if data is not None:
            self._buffered += added
        return added

    @staticmethod
    def _piece(p0: int, p1: int, s: int, data, ts: int, frame: int) -> list:
        if data is None:
            return [p0, p1, None, ts, frame]
        chunk = data[p0 - s : p1 - s]
        if not isinstance(chunk, bytes):
            chunk = bytes(chunk)  # never pin a larger buffer (e.g. an Arrow batch) while held
        return [p0, p1, chunk, ts, frame]

    def _drain(self, out: list[Event], moved: bool = False) -> None:
        """Deliver held pieces (and pass the FIN) that now follow next_off; refresh the state.
        `moved`: the caller advanced next_off (so the hole, if any, is a new one)."""
        pieces = self._pieces
        nxt = self.next_off
        i = 0
        k = len(pieces)
        while True:
            if i < k and pieces[i][0] == nxt:
                s, e, data, pts, pfr = pieces[i]
                if data is None:
                    self._gap(out, e - s, pts)
                else:
                    out.append((DATA, self.from_lo, data, pts, pfr))
                    self.delivered_bytes += e - s
                    self._buffered -= e - s
                nxt = e
                i += 1
            elif self.fin_off is not None and not self.fin_done and self.fin_off <= nxt:
                if self.fin_off == nxt:
                    nxt += 1  # the FIN occupies one sequence number
                self.fin_done = True
                moved = True
            else:
                break
        if i:
            del pieces[:i]
            del self._starts[:i]
        self.next_off = nxt
        self._nseq = (self.base_seq + nxt) & MASK
        blocked = bool(pieces) or (self.fin_off is not None and not self.fin_done)
        if blocked and (i or moved or not self._blocked):
            # the new hole is known since the earliest arrival of anything held beyond it
            arrivals = self._arrivals
            while arrivals and arrivals[0][1] < nxt:  # entries of pieces delivered by now
                heappop(arrivals)
            since = arrivals[0][0] if arrivals else self._fin_ts
            if self.fin_off is not None and not self.fin_done and self._fin_ts < since:
                since = self._fin_ts
            self._hole_since = since
        elif not pieces and self._arrivals:
            self._arrivals.clear()
        self._blocked = blocked

    def _check_hole(self, ts: int, out: list[Event]) -> None:
        """Declare holes that can no longer fill: too many bytes held, or waiting too long."""
        while self._blocked and (
            self._buffered > self.max_reorder_bytes
            or len(self._pieces) > self.max_pieces
            or ts - self._hole_since > self.reorder_timeout_ns
        ):
            self._skip_hole(out)

    def _skip_hole(self, out: list[Event]) -> None:
        """The hole at next_off is a gap: jump to the next held piece (or the FIN) and drain."""
        target = None
        gts = 0
        if self._pieces:
            target, gts = self._pieces[0][0], self._pieces[0][3]
        if self.fin_off is not None and not self.fin_done and (target is None or self.fin_off < target):
            target, gts = self.fin_off, self._fin_ts
        if target is None:  # nothing held: not blocked
            self._blocked = False
            return
        if target > self.next_off:
            self._gap(out, target - self.next_off, gts)
            self.next_off = target
        self._drain(out, True)


def _start(piece: list) -> int:
    return piece[0]
