"""One TCP connection: both directions, handshake roles, and when a 4-tuple is reused."""

from __future__ import annotations

from .packet import ACK, FIN, RST, SYN, Event, Packet
from .reassembly import MAX_ACK_AHEAD, Reassembler

_SYN_FIN_RST = SYN | FIN | RST
_SYN_RST = SYN | RST
MASK = 0xFFFFFFFF  # 32-bit sequence space
# After an idle period, a packet whose sequence number (or acknowledgement) lies this close to where
# the connection left off continues it: a random ISN of a new connection lands this close with
# probability 2^-11.
CONTINUATION_WINDOW = 1 << 20


def _near(a: int, b: int | None) -> bool:
    """Whether 32-bit sequence numbers a and b are within CONTINUATION_WINDOW of each other."""
    if b is None:
        return False
    d = (a - b) & MASK
    return d <= CONTINUATION_WINDOW or d >= (1 << 32) - CONTINUATION_WINDOW


class Direction:
    """Packet statistics and the reassembler of one direction (the packets one endpoint sent).

    `packets`, `payload_bytes` (TCP payload per the IP header lengths, as sent, retransmissions
    included), `frame_bytes` (sum of wire_len), `snap_truncated_packets`; the reassembly counters
    are read through to `reasm`.
    """

    __slots__ = ("from_lo", "reasm", "packets", "payload_bytes", "frame_bytes", "snap_truncated_packets")

    def __init__(self, from_lo: bool, max_reorder_bytes: int, reorder_timeout_ns: int) -> None:
        self.from_lo = from_lo
        self.reasm = Reassembler(max_reorder_bytes, reorder_timeout_ns, from_lo)
        self.packets = 0
        self.payload_bytes = 0
        self.frame_bytes = 0
        self.snap_truncated_packets = 0

    @property
    def delivered_bytes(self) -> int:
        return self.reasm.delivered_bytes

    @property
    def retransmitted_bytes(self) -> int:
        return self.reasm.retransmitted_bytes

    @property
    def out_of_order(self) -> int:
        return self.reasm.out_of_order

    @property
    def gap_count(self) -> int:
        return self.reasm.gap_count

    @property
    def gap_bytes(self) -> int:
        return self.reasm.gap_bytes

    @property
    def keepalives(self) -> int:
        return self.reasm.keepalives

    @property
    def zero_window_probes(self) -> int:
        return self.reasm.zero_window_probes


class TcpConnection:
    """Both directions of one connection, fed the packets of one canonical 4-tuple in capture order.

    Per-direction state is in `dirs`: `dirs[0]` (also `lo`) holds what the lower endpoint sent,
    `dirs[1]` (also `hi`) what the higher endpoint sent; `direction(from_lo)` picks one.

    The constructor only looks at `first` (start time, whether the capture caught the handshake);
    pass `first` to `add` as well to process it. Use `starts_new(pkt)` before `add(pkt)`: when it
    is True, `finish()` this connection and start a new one with `pkt`.
    """

    __slots__ = (
        "dirs",
        "lo",
        "hi",
        "client_is_lo",
        "_client_by_syn",
        "syn_seen",
        "fin_seen",
        "rst_seen",
        "midstream",
        "first_ts",
        "last_ts",
        "idle_timeout_ns",
        "_syn_isn",
    )

    def __init__(
        self,
        first: Packet,
        max_reorder_bytes: int = 8 << 20,
        reorder_timeout_ns: int = 5_000_000_000,
        idle_timeout_ns: int = 600_000_000_000,
    ) -> None:
        self.lo = Direction(True, max_reorder_bytes, reorder_timeout_ns)
        self.hi = Direction(False, max_reorder_bytes, reorder_timeout_ns)
        self.dirs = (self.lo, self.hi)
        # True: the lower endpoint is the client. Decided by a SYN without ACK (its sender is the
        # client), else by a SYN+ACK (its sender is the server); None when no handshake was seen.
        self.client_is_lo: bool | None = None
        self._client_by_syn = False
        self.syn_seen = False
        self.fin_seen = False
        self.rst_seen = False
        self.midstream = not first.flags & SYN  # first packet was neither SYN nor SYN+ACK
        self.first_ts = first.ts_ns
        self.last_ts = first.ts_ns
        self.idle_timeout_ns = int(idle_timeout_ns)
        self._syn_isn: list[int | None] = [None, None]  # seq of the SYN (no ACK) sent by lo, hi

    def direction(self, from_lo: bool) -> Direction:
        return self.lo if from_lo else self.hi

    def starts_new(self, pkt: Packet) -> bool:
        """True when `pkt` begins a new connection on this 4-tuple.

        - a SYN without ACK, after a FIN or RST, whose sequence number is not the ISN of a SYN that
          side sent before (a retransmitted SYN is not new);
        - any packet after more than `idle_timeout_ns` of silence, unless it visibly continues this
          connection: its sequence number is near the next one expected from its sender, or (sender
          not seen yet) its ACK is near the next one expected from the peer. Long-lived idle
          connections (Kafka clients refresh metadata every 5 minutes on a connection the broker
          keeps for 10) stay one connection, as in Wireshark's tcp.stream.
        """
        flags = pkt.flags
        if flags & SYN and not flags & ACK:
            if self.fin_seen or self.rst_seen:
                isn = self._syn_isn[0 if pkt.from_lo else 1]
                if isn is None or pkt.seq != isn:
                    return True
            elif pkt.ts_ns - self.last_ts > self.idle_timeout_ns:
                return pkt.seq != self._syn_isn[0 if pkt.from_lo else 1]
            return False
        if pkt.ts_ns - self.last_ts > self.idle_timeout_ns:
            return not self.continues(pkt)
        return False

    def continues(self, pkt: Packet) -> bool:
        """Whether `pkt`'s sequence numbers fit where this connection left off."""
        if pkt.from_lo:
            d, o = self.lo.reasm, self.hi.reasm
        else:
            d, o = self.hi.reasm, self.lo.reasm
        if d.started:
            return _near(pkt.seq, d.next_seq)
        return bool(pkt.flags & ACK) and _near(pkt.ack, o.next_seq)

    def add(self, pkt: Packet) -> list[Event]:
        """Process one packet; return the events it made available, in order: gaps in the other
        direction that its ACK made certain come first, then this direction's events."""
        if pkt.from_lo:
            d, o = self.lo, self.hi
        else:
            d, o = self.hi, self.lo
        d.packets += 1
        d.payload_bytes += pkt.payload_len
        d.frame_bytes += pkt.wire_len
        if pkt.snap_truncated:
            d.snap_truncated_packets += 1
        self.last_ts = pkt.ts_ns
        flags = pkt.flags
        if flags & _SYN_FIN_RST:
            self._control(pkt, flags)
        if flags & ACK:
            ro = o.reasm
            if not flags & _SYN_RST:  # the window of a SYN is unscaled, that of an RST meaningless
                ro.peer_window_zero = not pkt.window
            # inline the common "ACK brings nothing new" test of Reassembler.peer_ack
            nseq = ro._nseq
            if nseq >= 0:
                da = (pkt.ack - nseq) & MASK
                if ro._blocked or 0 < da <= MAX_ACK_AHEAD:
                    events = ro.peer_ack(pkt.ack, pkt.ts_ns)
                    if events:
                        events.extend(d.reasm.segment(pkt))
                        return events
        return d.reasm.segment(pkt)

    def finish(self) -> list[Event]:
        """End of the connection (or of the capture): flush both directions, lo first."""
        events = self.lo.reasm.flush(self.last_ts)
        events.extend(self.hi.reasm.flush(self.last_ts))
        return events

    def _control(self, pkt: Packet, flags: int) -> None:
        if flags & SYN:
            self.syn_seen = True
            if flags & ACK:
                if not self._client_by_syn:
                    self.client_is_lo = not pkt.from_lo
            else:
                if not self._client_by_syn:
                    self.client_is_lo = pkt.from_lo
                    self._client_by_syn = True
                idx = 0 if pkt.from_lo else 1
                if self._syn_isn[idx] is None:
                    self._syn_isn[idx] = pkt.seq
        if flags & FIN:
            self.fin_seen = True
        if flags & RST:
            self.rst_seen = True

    # ------------------------------------------------------------------------------------------
    # totals over both directions (for the `streams` row)

    @property
    def packets(self) -> int:
        return self.lo.packets + self.hi.packets

    @property
    def gap_count(self) -> int:
        return self.lo.reasm.gap_count + self.hi.reasm.gap_count

    @property
    def gap_bytes(self) -> int:
        return self.lo.reasm.gap_bytes + self.hi.reasm.gap_bytes

    @property
    def retransmitted_bytes(self) -> int:
        return self.lo.reasm.retransmitted_bytes + self.hi.reasm.retransmitted_bytes

    @property
    def out_of_order(self) -> int:
        return self.lo.reasm.out_of_order + self.hi.reasm.out_of_order

    @property
    def keepalives(self) -> int:
        return self.lo.reasm.keepalives + self.hi.reasm.keepalives
