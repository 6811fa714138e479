"""One TCP connection: both directions, handshake roles, when a 4-tuple is reused, and its
Zeek-style endpoint states and history (`conn_state`, `history`)."""

from __future__ import annotations

import re

from .packet import ACK, FIN, RST, SYN, Event, Packet
from .reassembly import BEHIND, MAX_ACK_AHEAD, POWERS_OF_TEN, Reassembler

_SYN_FIN_RST = SYN | FIN | RST
_SYN_RST = SYN | RST
MASK = 0xFFFFFFFF  # 32-bit sequence space
# After an idle period, a packet whose sequence number (or acknowledgement) lies this close to where
# the connection left off continues it: a random ISN of a new connection lands this close with
# probability 2^-11.
CONTINUATION_WINDOW = 1 << 20
# The longest a sender waits between two copies of a segment (a SYN included): its retransmission
# timeout doubles up to RTO_MAX, 120 s in Linux (TCP_RTO_MAX; RFC 6298 (2.5) lets a stack cap it at
# no less than 60 s). After a silence longer than this and the idle timeout, nothing the
# connection sent before is still being retransmitted: a SYN with the ISN of the side's earlier SYN,
# or a segment behind where its sender left off, is a replay of the connection (a capture of it
# again, its times shifted: `editcap -t`, mergecap), not a copy of the earlier one.
RTO_MAX_NS = 120_000_000_000
# The most packets held for bytes the first of them acknowledges and the capture has not shown yet
# (TcpConnection.add): a skew of that many packets between two merged capture points is undone;
# tcp.max_reorder_bytes of their payload and tcp.reorder_timeout_s bound them too.
HELD_MAX = 16

# Endpoint states, as Zeek's TCP analyzer keeps them per endpoint (SYN_ACK_SENT, an originator
# that sent a SYN+ACK, cannot happen here: the sender of a SYN+ACK is always the server).
INACTIVE, SYN_SENT, PARTIAL, ESTABLISHED, CLOSED, RESET = range(6)
# Direction.watch: what a packet without SYN/FIN/RST can still change: the endpoint is INACTIVE,
# its first pure ACK ('A') or first data packet ('D') is not in the history yet. 0 once all three
# are done: the hot path tests it for zero, and only then one of two masks against it.
W_INACTIVE, W_ACK, W_DATA = 1, 2, 4
_WATCH_EMPTY = W_INACTIVE | W_ACK  # what a packet without payload may still change
_WATCH_DATA = W_INACTIVE | W_DATA
# Direction.hist: the control letters recorded. S and H share one bit, as in Zeek (one letter per
# endpoint for its first SYN of either kind).
_H_SYN, _H_FIN, _H_RST, _H_FIN_RST, _H_MULTI = 1, 2, 4, 8, 16
# Zeek's RSTOS0 test on the originator-cased history: the originator's SYN first, then its RST
# before any of its H, A, F, G, I or Q.
_RSTOS0 = re.compile(r"\^?S[^HAFGIQ]*R.*")


def _near(a: int, b: int | None) -> bool:
    """Whether 32-bit sequence numbers a and b are within CONTINUATION_WINDOW of each other."""
    if b is None:
        return False
    d = (a - b) & MASK
    return d <= CONTINUATION_WINDOW or d >= (1 << 32) - CONTINUATION_WINDOW


def _ahead(a: int, b: int) -> bool:
    """Whether 32-bit sequence number a is at b or at most CONTINUATION_WINDOW past it, or one
    before it (a keep-alive's or a zero window probe's sequence number, snd_una - 1)."""
    d = (a - b) & MASK
    return d <= CONTINUATION_WINDOW or d == MASK


class Direction:
    """Packet statistics and the reassembler of one direction (the packets one endpoint sent).

    `packets`, `payload_bytes` (TCP payload per the IP header lengths, as sent, retransmissions
    included), `frame_bytes` (sum of wire_len), `snap_truncated_packets`; the reassembly counters
    are read through to `reasm`.
    """

    __slots__ = (
        "from_lo",
        "reasm",
        "packets",
        "payload_bytes",
        "frame_bytes",
        "snap_truncated_packets",
        "state",
        "prev_state",
        "watch",
        "hist",
        "zero_windows",
    )

    def __init__(self, from_lo: bool, max_reorder_bytes: int, reorder_timeout_ns: int) -> None:
        self.from_lo = from_lo
        self.reasm = Reassembler(max_reorder_bytes, reorder_timeout_ns, from_lo)
        self.packets = 0
        self.payload_bytes = 0
        self.frame_bytes = 0
        self.snap_truncated_packets = 0
        self.state = INACTIVE  # the endpoint's state (see TcpConnection.conn_state)
        self.prev_state = INACTIVE
        self.watch = W_INACTIVE | W_ACK | W_DATA
        self.hist = 0  # _H_* bits of the control letters already in the history
        self.zero_windows = 0  # packets advertising a zero window (see TcpConnection._zero_window)

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
        "_history",
        "_held",
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
        self._history: list[str] = []  # history letters, upper case for lo, lower case for hi
        self.lo.reasm.history = self.hi.reasm.history = self._history  # G and T letters
        # a packet acknowledging bytes its peer's direction has not shown yet, and the packets of
        # its direction captured after it (and the peer's pure ACKs sent before those bytes), in
        # capture order, waiting for those bytes (add); None
        # when nothing waits (the compiled lane, tcp/_lane.c, takes nothing while it is not None)
        self._held: list[Packet] | None = None

    def direction(self, from_lo: bool) -> Direction:
        return self.lo if from_lo else self.hi

    def starts_new(self, pkt: Packet) -> bool:
        """True when `pkt` begins a new connection on this 4-tuple.

        - a SYN without ACK after a FIN or RST, or after more than `idle_timeout_ns` of silence,
          unless it retransmits the SYN its side sent before (the same ISN) while that can still
          come: after a FIN or RST only while its sender has not left SYN-SENT (sent no ACK, data
          or FIN), after silence only within RTO_MAX_NS;
        - any other packet after more than `idle_timeout_ns` of silence, unless it visibly
          continues this connection: its sequence number is near the next one expected from its
          sender, or (sender not seen yet) its ACK is near the next one expected from the peer.
          Long-lived idle connections (Kafka clients refresh metadata every 5 minutes on a
          connection the broker keeps for 10; keep-alives every 2 hours) stay one connection, as
          in Wireshark's tcp.stream. After a silence longer than RTO_MAX_NS too, a sequence number
          behind the next one (by more than a keep-alive's one byte) continues nothing: no
          retransmission comes so late.

        So the same traffic captured again (a replay; a capture and its copy shifted by
        `editcap -t`, ingested together or merged into one file), whose 4-tuples and ISNs repeat,
        is a new connection after the first copy's FIN/RST or a long silence.
        """
        flags = pkt.flags
        silence = pkt.ts_ns - self.last_ts
        idle = silence > self.idle_timeout_ns
        if flags & SYN and not flags & ACK:
            d = self.lo if pkt.from_lo else self.hi
            isn = self._syn_isn[0 if pkt.from_lo else 1]
            closed = self.fin_seen or self.rst_seen or self._fin_held()
            if isn is None or pkt.seq != isn:
                return closed or idle
            if idle and silence > RTO_MAX_NS:
                return True  # retransmissions of that SYN stopped long ago
            return closed and _past_syn_sent(d)
        if idle:
            return not self.continues(pkt, behind=silence <= RTO_MAX_NS)
        return False

    def _fin_held(self) -> bool:
        """Is a FIN waiting (`_held`) for the peer's bytes it acknowledges?"""
        return self._held is not None and any(h.flags & FIN for h in self._held)

    def continues(self, pkt: Packet, behind: bool = True) -> bool:
        """Whether `pkt`'s sequence numbers fit where this connection left off; `behind`: a
        sequence number before where its sender left off (a retransmission, a SYN+ACK again) may
        fit too."""
        if not behind and pkt.flags & SYN:
            return False
        if pkt.from_lo:
            d, o = self.lo.reasm, self.hi.reasm
        else:
            d, o = self.hi.reasm, self.lo.reasm
        if d.started:
            return _near(pkt.seq, d.next_seq) if behind else _ahead(pkt.seq, d.next_seq)
        return bool(pkt.flags & ACK) and _near(pkt.ack, o.next_seq)

    def add(self, pkt: Packet) -> list[Event]:
        """Process one packet; return the events it made available, in order: gaps in the other
        direction that its ACK made certain come first, then this direction's events.

        A packet acknowledging bytes the other direction has not shown yet waits (`_held`), and
        the packets of its direction after it wait with it, as do pure ACKs of the hole's
        direction at or before the hole's start that acknowledge nothing unseen (sent before the
        hole's bytes: evidence of reordering, not of loss). When a packet of the hole's direction
        brings bytes of the hole, or its FIN (at the hole's start, or where a held packet
        acknowledges up to it: the FIN's sequence number is no data byte), captured after their
        ACK (two interfaces or a NIC's queues merged out of order, with a skew of one packet or
        several), the held pure ACKs of its direction go first, then it, then the other held
        packets in capture order, up to one that still acknowledges bytes not shown. Else the
        hole is declared: the first held packet's gap and events, then the others', in the order
        they always had, before a packet of the hole's direction that does not fill the hole
        (data, a pure ACK past the hole's start: the bytes before it were sent), a SYN, FIN or
        RST of the acknowledging direction, or a packet that would pass the bound of the held
        ones: HELD_MAX packets, tcp.max_reorder_bytes of their payload, tcp.reorder_timeout_s
        after the first."""
        held = self._held
        if held is None:
            if self._acks_unseen(pkt):
                self._held, self.last_ts = [pkt], pkt.ts_ns
                return []
            return self._add(pkt)
        events = self._add_held(pkt, held)
        self.last_ts = pkt.ts_ns
        return events

    def _add_held(self, pkt: Packet, held: list[Packet]) -> list[Event]:
        """`add` while `held` (`_held`: packets in capture order, the first acknowledging bytes of
        the other direction not shown yet, the others of its direction or pure ACKs of the
        hole's direction sent before the hole's bytes) waits."""
        events: list[Event] = []
        while True:
            first = held[0]
            flags = pkt.flags
            if pkt.from_lo != first.from_lo:
                # a packet of the hole's direction
                if (pkt.payload_len or flags & FIN) and self._fills(pkt, held):
                    # bytes of the hole (or its FIN), captured after their ACK: the pure ACKs of
                    # their direction held before them first, then they, then the held packets
                    mine = [h for h in held if h.from_lo == pkt.from_lo]
                    if mine:
                        held[:] = [h for h in held if h.from_lo != pkt.from_lo]
                        for h in mine:
                            events += self._add(h)
                    events += self._add(pkt)
                    events += self._release(held)
                    return events
                if (
                    not pkt.payload_len
                    and not flags & _SYN_FIN_RST
                    and self._before_hole(pkt)
                    and self._room(pkt, held)
                ):
                    held.append(pkt)  # sent before the hole's bytes: reordering, not loss
                    return events
            elif not flags & _SYN_FIN_RST and self._room(pkt, held):
                held.append(pkt)
                return events
            # the hole is declared: the first held packet goes, its gap first, then those after it
            # that wait for nothing; then this packet, as if they had not been held
            del held[0]
            events += self._add(first)
            events += self._release(held)
            if self._held is None:
                events += self.add(pkt)
                return events
            held = self._held

    def _fills(self, pkt: Packet, held: list[Packet]) -> bool:
        """Does `pkt` (payload or a FIN), of the other direction than the first held packet's,
        bring bytes of the hole a held packet acknowledges (or, without payload, its FIN: the FIN
        takes one sequence number, and a held packet acknowledges exactly up to it, or it is at
        the hole's start), and acknowledge none of the bytes held packets bring (it was sent
        before them: a late packet, not a retransmission)?"""
        x, y = (self.lo.reasm, self.hi.reasm) if pkt.from_lo else (self.hi.reasm, self.lo.reasm)
        nseq, n = x._nseq, pkt.payload_len
        if not n:  # a FIN: at the hole's start, or the last sequence number a held packet acknowledges
            end = (pkt.seq + 1) & MASK
            if pkt.seq != nseq and not any(self._acks_unseen(h) and h.ack == end for h in held):
                return False
            n = 1
        if not any(self._acks_unseen(h) and _into(pkt.seq, n, nseq, h.ack) for h in held):
            return False
        return not self._acks_past(pkt) or not any(
            h.payload_len and _into(h.seq, h.payload_len, y._nseq, pkt.ack) for h in held
        )

    def _before_hole(self, pkt: Packet) -> bool:
        """Was `pkt`, a packet without payload of the hole's direction, sent before the hole's
        bytes: its sequence number at the hole's start or before it (a keep-alive's), and its ACK
        of nothing not shown (of the held packets' bytes: sent after them)? A pure ACK past the
        hole's start shows the bytes before it were sent: the hole is declared."""
        if 0 < (pkt.seq - (self.lo if pkt.from_lo else self.hi).reasm._nseq) & MASK < BEHIND:
            return False  # past the hole's start
        return not self._acks_past(pkt)

    def _room(self, pkt: Packet, held: list[Packet]) -> bool:
        """Would `pkt` stay within the bound of the held packets: HELD_MAX packets,
        tcp.max_reorder_bytes of their payload, tcp.reorder_timeout_s after the first?"""
        r = self.lo.reasm
        return (
            len(held) < HELD_MAX
            and pkt.ts_ns - held[0].ts_ns <= r.reorder_timeout_ns
            and sum(h.payload_len for h in held) + pkt.payload_len <= r.max_reorder_bytes
        )

    def _release(self, held: list[Packet]) -> list[Event]:
        """The events of the held packets, from the first, while they acknowledge nothing unseen
        (a packet that does is the first held now); `_held` is None once none is left."""
        events: list[Event] = []
        while held and not self._acks_unseen(held[0]):
            events += self._add(held.pop(0))
        if not held:
            self._held = None
        return events

    def _acks_unseen(self, pkt: Packet) -> bool:
        """Does `pkt` (no SYN or RST; a FIN may be one: a FIN+ACK of the peer's FIN captured
        before it) acknowledge bytes its peer's direction has not shown?"""
        return not pkt.flags & _SYN_RST and self._acks_past(pkt)

    def _acks_past(self, pkt: Packet) -> bool:
        """Does `pkt`, whatever its other flags, acknowledge bytes its peer's direction has not
        shown (within MAX_ACK_AHEAD of the next byte expected)?"""
        if not pkt.flags & ACK:
            return False
        nseq = (self.hi if pkt.from_lo else self.lo).reasm._nseq
        return nseq >= 0 and 0 < (pkt.ack - nseq) & MASK <= MAX_ACK_AHEAD

    def _add(self, pkt: Packet) -> list[Event]:
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
            self._control(pkt, flags, d, o)
        elif d.watch and d.watch & (_WATCH_DATA if pkt.payload_len else _WATCH_EMPTY):
            self._plain(flags, pkt.payload_len, d, o)
        if flags & ACK:
            ro = o.reasm
            if not flags & _SYN_RST:  # the window of a SYN is unscaled, that of an RST meaningless
                if pkt.window:
                    ro.peer_window_zero = False
                else:
                    ro.peer_window_zero = True
                    self._zero_window(flags, d)
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

    def take(
        self, from_lo: bool, seq: int, ack: int, flags: int, window: int, n: int, wire_len: int, ts_ns: int
    ) -> bool:
        """`starts_new` and `add` for the commonest packets without building them: the next `n`
        bytes of its direction, all captured (the caller's test), or none (a pure ACK at the
        direction's next sequence number), within the idle timeout, no SYN/FIN/RST, its ACK and
        window news to no one, nothing held and nothing left to record in the direction's state
        or history. True: taken, the caller delivers its bytes (if any) as the one data event
        `add` would give; False: nothing changed, ask `starts_new` and `add` it."""
        if ts_ns - self.last_ts > self.idle_timeout_ns or self._held is not None:
            return False  # maybe a new connection (starts_new), or a packet held (add)
        if from_lo:
            d, o = self.lo, self.hi
        else:
            d, o = self.hi, self.lo
        r = d.reasm
        if (
            seq != r._nseq
            or r._blocked
            or flags & _SYN_FIN_RST
            or d.watch & (_WATCH_DATA if n else _WATCH_EMPTY)
        ):
            return False
        if flags & ACK:
            ro = o.reasm
            nseq = ro._nseq
            if not window or nseq >= 0 and (ro._blocked or 0 < (ack - nseq) & MASK <= MAX_ACK_AHEAD):
                return False  # a zero window to count, or an ACK that may declare a gap
            ro.peer_window_zero = False
        d.packets += 1
        d.payload_bytes += n
        d.frame_bytes += wire_len
        self.last_ts = ts_ns
        r._nseq = (seq + n) & MASK
        r.next_off += n
        r.delivered_bytes += n
        if n == 1 and r.peer_window_zero:
            r.zero_window_probes += 1
        return True

    def finish(self) -> list[Event]:
        """End of the connection (or of the capture): flush both directions, lo first."""
        held, self._held = self._held, None
        events: list[Event] = []
        if held is not None:  # the hole declared, the held packets' events in capture order
            last = self.last_ts
            for pkt in held:
                events += self._add(pkt)
            self.last_ts = last
        events += self.lo.reasm.flush(self.last_ts)
        events.extend(self.hi.reasm.flush(self.last_ts))
        return events

    def _control(self, pkt: Packet, flags: int, d: Direction, o: Direction) -> None:
        """A packet with SYN, FIN or RST: roles, reuse bookkeeping, history letter, states."""
        self._control_history(flags, d)
        self._control_state(flags, d, o)
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
    # Zeek-style connection state and history. The endpoint state machine follows Zeek's TCP
    # analyzer (its transitions on SYN, SYN+ACK, FIN, RST and on an endpoint's first packet),
    # without its roles: a SYN without ACK is an originator's, a SYN+ACK a responder's, which is
    # how the handshake assigns brokerscope's roles too. Roles are applied at the end.

    def _add_letter(self, d: Direction, letter: str) -> None:
        self._history.append(letter if d.from_lo else letter.lower())

    def _plain(self, flags: int, n: int, d: Direction, o: Direction) -> None:
        """A packet without SYN/FIN/RST from an endpoint whose state or A/D letters are not final."""
        if d.state == INACTIVE:
            if not n and o.state == SYN_SENT:
                pass  # an ACK of the SYN before the SYN+ACK does not make a partial connection
            elif flags & ACK and o.state == ESTABLISHED:
                _set(d, ESTABLISHED)  # the SYN was missed, the SYN+ACK was not
            else:
                _set(d, PARTIAL)
        bit = W_DATA if n else (W_ACK if flags & ACK else 0)
        if d.watch & bit:
            d.watch &= ~bit
            self._add_letter(d, "D" if n else "A")

    def _zero_window(self, flags: int, d: Direction) -> None:
        """`d` advertised a zero window: W at the 1st, 10th, 100th, ... such packet, not counting
        those with FIN or sent after the endpoint closed or reset (Zeek's rule)."""
        if flags & FIN or d.state == CLOSED or d.state == RESET:
            return
        d.zero_windows += 1
        if d.zero_windows in POWERS_OF_TEN:
            self._add_letter(d, "W")

    def _control_history(self, flags: int, d: Direction) -> None:
        """Zeek's letter for a SYN/FIN/RST packet, at its first occurrence per endpoint."""
        if ((flags & SYN) >> 1) + (flags & FIN) + ((flags & RST) >> 2) > 1:  # two or three of them
            bit, letter = (_H_FIN_RST, "I") if flags & FIN and flags & RST else (_H_MULTI, "Q")
        elif flags & SYN:
            bit, letter = _H_SYN, "H" if flags & ACK else "S"
        elif flags & FIN:
            bit, letter = _H_FIN, "F"
        else:
            bit, letter = _H_RST, "R"
        if not d.hist & bit:
            d.hist |= bit
            self._add_letter(d, letter)

    @staticmethod
    def _control_state(flags: int, d: Direction, o: Direction) -> None:
        s = d.state
        if s == INACTIVE:
            if flags & SYN:
                if flags & ACK or o.state == SYN_SENT:  # a SYN+ACK, or a simultaneous open
                    if o.state == SYN_SENT:
                        _set(o, ESTABLISHED)
                    _set(d, ESTABLISHED)
                else:
                    _set(d, SYN_SENT)
            if flags & FIN:
                _set(d, CLOSED)
            if flags & RST:
                _set(d, RESET)
        elif s == SYN_SENT:
            if flags & FIN:
                _set(d, CLOSED)
            if flags & RST:
                _set(d, RESET)
        elif s == ESTABLISHED or s == PARTIAL:
            if flags & SYN and s == PARTIAL and o.state == INACTIVE and not flags & ACK:
                _set(d, SYN_SENT)
            if flags & FIN and not flags & RST:
                _set(d, CLOSED)
                if o.state == RESET and o.prev_state == CLOSED:
                    _set(o, CLOSED)  # the peer's FIN then RST was a normal close
            if flags & RST:
                _set(d, RESET)
        elif s == CLOSED:
            if flags & RST and o.state != CLOSED:
                _set(d, RESET)

    def history(self, client_is_lo: bool) -> str:
        """Zeek's history string: upper case for the client (the originator), lower case for the
        server, each letter at its first occurrence per side."""
        h = "".join(self._history)
        return h if client_is_lo else h.swapcase()

    def conn_state(self, client_is_lo: bool) -> str:
        """Zeek's conn_state, the client being the originator (S0 SF REJ RSTO ... OTH)."""
        o, r = (self.lo, self.hi) if client_is_lo else (self.hi, self.lo)
        os_, rs = o.state, r.state
        o_inactive = os_ == INACTIVE or os_ == PARTIAL
        r_inactive = rs == INACTIVE or rs == PARTIAL
        if rs == RESET:
            if os_ == SYN_SENT or (os_ == RESET and not o.payload_bytes and not r.payload_bytes):
                return "REJ"
            return "RSTRH" if o_inactive else "RSTR"
        if os_ == RESET:
            if r_inactive:
                return "RSTOS0" if _RSTOS0.fullmatch(self.history(client_is_lo)) else "OTH"
            return "RSTO"
        if os_ == CLOSED and rs == CLOSED:
            return "SF"
        if os_ == CLOSED:
            return "SH" if r_inactive else "S2"
        if rs == CLOSED:
            return "SHR" if o_inactive else "S3"
        if os_ == SYN_SENT and rs == INACTIVE:
            return "S0"
        if os_ == ESTABLISHED and rs == ESTABLISHED:
            return "S1"
        return "OTH"

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


def _into(seq: int, n: int, nseq: int, ack: int) -> bool:
    """Do the `n` bytes at sequence number `seq` reach into the hole from `nseq` (the next byte
    expected) up to `ack`?"""
    if nseq < 0:
        return False
    return (seq - nseq) & MASK < (ack - nseq) & MASK or (nseq - seq) & MASK < n


def _past_syn_sent(d: Direction) -> bool:
    """Whether endpoint `d` has sent a pure ACK, data (without SYN, FIN or RST) or a FIN: it has
    left SYN-SENT, where an endpoint sends its SYN again, an RST to an unacceptable ACK or a
    SYN,ACK to a SYN (RFC 9293, 3.10.7.3), so it retransmits its SYN no more."""
    return d.watch & (W_ACK | W_DATA) != W_ACK | W_DATA or bool(d.hist & (_H_FIN | _H_FIN_RST))


def _set(d: Direction, state: int) -> None:
    """Move an endpoint to `state` (never INACTIVE), remembering the one it leaves."""
    if state != d.state:
        d.prev_state = d.state
        d.state = state
        d.watch &= ~W_INACTIVE
