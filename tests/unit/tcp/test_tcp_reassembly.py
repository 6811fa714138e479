"""One direction of reassembly, one pathology per test, exact bytes and counters."""

from __future__ import annotations

import random
import tracemalloc

from brokerscope.tcp import ACK, FIN, PSH, RST, SYN, Packet, Reassembler

MASK = 0xFFFFFFFF
ISN = 1000


def seg(seq: int, data: bytes = b"", flags: int = ACK | PSH, ts: int = 0, plen: int | None = None) -> Packet:
    """A segment sent by the lower endpoint; `plen` > len(data) makes it snap-truncated."""
    n = len(data) if plen is None else plen
    return Packet(
        ts_ns=ts,
        from_lo=True,
        seq=seq & MASK,
        ack=0,
        flags=flags,
        window=65535,
        payload=data,
        payload_len=n,
        wire_len=54 + n,
        snap_truncated=n > len(data),
    )


def syn(r: Reassembler, isn: int = ISN) -> None:
    assert r.segment(seg(isn, flags=SYN)) == []


def data(events) -> bytes:
    """Concatenate data events, asserting there are no gaps among them."""
    assert all(e[0] == "data" for e in events), events
    return b"".join(e[2] for e in events)


def counters(r: Reassembler) -> dict:
    return {
        "delivered": r.delivered_bytes,
        "retrans": r.retransmitted_bytes,
        "ooo": r.out_of_order,
        "gaps": r.gap_count,
        "gap_bytes": r.gap_bytes,
        "keepalives": r.keepalives,
    }


def zero(**kw) -> dict:
    base = {"delivered": 0, "retrans": 0, "ooo": 0, "gaps": 0, "gap_bytes": 0, "keepalives": 0}
    base.update(kw)
    return base


def test_in_order_segments_are_delivered_as_they_come():
    r = Reassembler()
    syn(r)
    ev = r.segment(seg(ISN + 1, b"abc", ts=10))
    assert ev == [("data", True, b"abc", 10, 0)]
    ev = r.segment(seg(ISN + 4, b"defg", ts=11))
    assert ev == [("data", True, b"defg", 11, 0)]
    assert r.segment(seg(ISN + 8)) == []  # pure ACK at the next sequence number
    assert counters(r) == zero(delivered=7)
    assert r.next_off == 7 and r.isn == ISN and not r.midstream


def test_out_of_order_segment_is_held_until_the_hole_fills():
    r = Reassembler()
    syn(r)
    assert data(r.segment(seg(ISN + 1, b"abc", ts=1))) == b"abc"
    assert r.segment(seg(ISN + 7, b"ghi", ts=2)) == []  # hole at offset 3..6
    assert r.segment(seg(ISN + 10, b"jk", ts=3)) == []
    assert r.buffered_bytes == 5
    ev = r.segment(seg(ISN + 4, b"def", ts=4))
    assert ev == [("data", True, b"def", 4, 0), ("data", True, b"ghi", 2, 0), ("data", True, b"jk", 3, 0)]
    assert r.buffered_bytes == 0
    assert counters(r) == zero(delivered=11, ooo=2)


def test_exact_retransmission_is_dropped_and_counted():
    r = Reassembler()
    syn(r)
    r.segment(seg(ISN + 1, b"abcd"))
    assert r.segment(seg(ISN + 1, b"abcd")) == []
    assert data(r.segment(seg(ISN + 5, b"ef"))) == b"ef"
    assert counters(r) == zero(delivered=6, retrans=4)


def test_segment_spanning_delivered_and_new_bytes_delivers_only_new():
    r = Reassembler()
    syn(r)
    r.segment(seg(ISN + 1, b"abcdef"))
    ev = r.segment(seg(ISN + 4, b"defghi", ts=7))
    assert ev == [("data", True, b"ghi", 7, 0)]
    assert counters(r) == zero(delivered=9, retrans=3)


def test_overlap_at_the_back_of_a_segment_with_held_bytes():
    # next expected is offset 0; "ghij" held at offsets 6..9; "abcdefgh" (0..7) overlaps it by "gh"
    r = Reassembler()
    syn(r)
    assert r.segment(seg(ISN + 7, b"ghij", ts=1)) == []
    ev = r.segment(seg(ISN + 1, b"abcdefgh", ts=2))
    assert ev == [("data", True, b"abcdef", 2, 0), ("data", True, b"ghij", 1, 0)]
    assert counters(r) == zero(delivered=10, retrans=2, ooo=1)


def test_overlap_at_the_front_of_a_segment_with_held_bytes():
    # "ghij" held at 6..9; "ijklm" (8..12) overlaps its tail with "ij"; then the hole fills
    r = Reassembler()
    syn(r)
    r.segment(seg(ISN + 7, b"ghij"))
    assert r.segment(seg(ISN + 9, b"ijklm")) == []
    assert r.buffered_bytes == 7
    assert data(r.segment(seg(ISN + 1, b"abcdef"))) == b"abcdefghijklm"
    assert counters(r) == zero(delivered=13, retrans=2, ooo=2)


def test_segment_covering_a_held_piece_keeps_both_new_ends():
    r = Reassembler()
    syn(r)
    r.segment(seg(ISN + 5, b"ef"))  # held 4..5
    assert r.segment(seg(ISN + 3, b"cdefgh")) == []  # 2..7: new 2..3 and 6..7
    assert data(r.segment(seg(ISN + 1, b"ab"))) == b"abcdefgh"
    assert counters(r) == zero(delivered=8, retrans=2, ooo=2)


def test_keepalive_is_neither_data_nor_retransmission():
    r = Reassembler()
    syn(r)
    r.segment(seg(ISN + 1, b"abc"))
    assert r.segment(seg(ISN + 3, flags=ACK)) == []  # seq = next-1, no byte
    assert r.segment(seg(ISN + 3, b"\x00", flags=ACK)) == []  # seq = next-1, one garbage byte
    assert data(r.segment(seg(ISN + 4, b"d"))) == b"d"
    assert counters(r) == zero(delivered=4, keepalives=2)


def test_zero_window_probe_is_data_and_its_resend_gives_only_new_bytes():
    r = Reassembler()
    syn(r)
    r.segment(seg(ISN + 1, b"abc"))
    r.peer_window_zero = True  # the receiver advertised a zero window
    ev = r.segment(seg(ISN + 4, b"d", ts=5))  # the probe: one byte at the next sequence number
    assert ev == [("data", True, b"d", 5, 0)]
    assert r.segment(seg(ISN + 4, b"d", ts=6)) == []  # the probe sent again: not a keepalive
    r.peer_window_zero = False  # window opened
    ev = r.segment(seg(ISN + 4, b"defgh", ts=7))
    assert ev == [("data", True, b"efgh", 7, 0)]
    assert counters(r) == zero(delivered=8, retrans=2)
    assert r.zero_window_probes == 2


def test_sequence_numbers_wrap_around_2_32():
    isn = (1 << 32) - 3
    r = Reassembler()
    syn(r, isn)
    assert data(r.segment(seg(isn + 1, b"abcdef"))) == b"abcdef"  # crosses 2^32
    assert r._nseq == 4
    assert r.segment(seg(isn + 10, b"jkl")) == []  # seq 7: held across the wrap
    assert data(r.segment(seg(isn + 4, b"defghi"))) == b"ghijkl"  # "def" old, "ghi" fills the hole
    assert r.segment(seg(isn + 1, b"ab")) == []  # old bytes from before the wrap
    assert counters(r) == zero(delivered=12, retrans=5, ooo=1)
    assert r.next_off == 12
    # an ACK across the wrap declares the hole it covers
    ev = r.peer_ack((isn + 1 + 15) & MASK, 9)
    assert ev == [("gap", True, 3, 9)]


def test_long_stream_wraps_many_times_with_unwrapped_offsets():
    r = Reassembler()
    isn = 0xFFFFFF00
    syn(r, isn)
    seq = isn + 1
    chunk = b"x" * 60000
    total = 0
    for _ in range(80000):  # 4.8 GB of sequence space: the 32-bit number wraps once
        assert r.segment(seg(seq, chunk))[0][2] is chunk
        seq += len(chunk)
        total += len(chunk)
    assert r.next_off == total > 1 << 32
    assert r.delivered_bytes == total and r.retransmitted_bytes == 0


def test_capture_starting_mid_stream_starts_at_first_seen_seq():
    r = Reassembler()
    ev = r.segment(seg(5000, b"xyz", ts=1))
    assert ev == [("data", True, b"xyz", 1, 0)]
    assert r.midstream and r.isn is None and r.base_seq == 5000
    assert data(r.segment(seg(5003, b"w"))) == b"w"
    assert counters(r) == zero(delivered=4)


def test_pure_ack_can_start_a_direction_mid_stream():
    r = Reassembler()
    assert r.segment(seg(7000, flags=ACK)) == []
    assert r.started and r.next_off == 0
    assert data(r.segment(seg(7000, b"ab"))) == b"ab"


def test_bare_rst_does_not_start_a_direction():
    r = Reassembler()
    assert r.segment(seg(0, flags=RST | ACK)) == []
    assert not r.started


def test_syn_and_fin_consume_one_sequence_number_and_data_after_fin_is_delivered():
    r = Reassembler()
    syn(r, 100)
    assert data(r.segment(seg(101, b"ab"))) == b"ab"
    assert r.segment(seg(103, flags=FIN | ACK)) == []
    assert r.fin_done and r.next_off == 3
    assert data(r.segment(seg(104, b"cd"))) == b"cd"  # in sequence after the FIN
    assert counters(r) == zero(delivered=4)


def test_fin_with_data_and_a_retransmitted_fin():
    r = Reassembler()
    syn(r, 100)
    assert data(r.segment(seg(101, b"abc", flags=FIN | ACK | PSH))) == b"abc"
    assert r.next_off == 4 and r._nseq == 105
    assert r.segment(seg(101, b"abc", flags=FIN | ACK | PSH)) == []
    assert r.peer_ack(105, 1) == []  # the ACK of the FIN is not a gap
    assert counters(r) == zero(delivered=3, retrans=3)


def test_fin_arriving_before_the_missing_data():
    r = Reassembler()
    syn(r, 100)
    assert r.segment(seg(103, b"cd", flags=FIN | ACK)) == []
    assert data(r.segment(seg(101, b"ab"))) == b"abcd"
    assert r.fin_done and r.next_off == 5
    assert counters(r) == zero(delivered=4, ooo=1)


def test_syn_carrying_data():
    r = Reassembler()
    ev = r.segment(seg(100, b"hello", flags=SYN, ts=3))
    assert ev == [("data", True, b"hello", 3, 0)]
    assert r.isn == 100 and r.base_seq == 101
    assert r.segment(seg(100, b"hello", flags=SYN)) == []  # retransmitted SYN
    assert counters(r) == zero(delivered=5, retrans=5)


def test_data_on_rst_is_delivered_when_in_sequence():
    r = Reassembler()
    syn(r)
    r.segment(seg(ISN + 1, b"ab"))
    assert data(r.segment(seg(ISN + 3, b"cd", flags=RST | ACK))) == b"cd"
    assert r.segment(seg(ISN + 5, flags=RST)) == []
    assert counters(r) == zero(delivered=4)


def test_gap_declared_when_peer_acknowledges_past_the_hole():
    r = Reassembler()
    syn(r)
    r.segment(seg(ISN + 1, b"abc", ts=1))
    r.segment(seg(ISN + 7, b"ghi", ts=2))
    assert r.peer_ack(ISN + 4, 3) == []  # acknowledges only what was delivered
    ev = r.peer_ack(ISN + 10, 4)
    assert ev == [("gap", True, 3, 2), ("data", True, b"ghi", 2, 0)]
    assert r.segment(seg(ISN + 4, b"def")) == []  # arrives after the gap was declared: old
    assert counters(r) == zero(delivered=6, ooo=1, gaps=1, gap_bytes=3, retrans=3)


def test_ack_beyond_everything_seen_declares_a_trailing_gap():
    r = Reassembler()
    syn(r)
    r.segment(seg(ISN + 1, b"abc"))
    assert r.peer_ack(ISN + 9, 5) == [("gap", True, 5, 5)]
    assert data(r.segment(seg(ISN + 9, b"z"))) == b"z"  # the stream continues after it
    assert r.peer_ack(ISN + 5, 6) == []  # an old ACK
    assert r.peer_ack((ISN + 10 + (1 << 31)) & MASK, 7) == []  # implausibly far: ignored
    assert counters(r) == zero(delivered=4, gaps=1, gap_bytes=5)


def test_ack_covering_two_holes_declares_both():
    r = Reassembler()
    syn(r)
    r.segment(seg(ISN + 3, b"cd", ts=1))  # hole 0..1
    r.segment(seg(ISN + 7, b"gh", ts=2))  # hole 4..5
    ev = r.peer_ack(ISN + 9, 3)
    assert ev == [
        ("gap", True, 2, 1),
        ("data", True, b"cd", 1, 0),
        ("gap", True, 2, 2),
        ("data", True, b"gh", 2, 0),
    ]
    assert counters(r) == zero(delivered=4, ooo=2, gaps=2, gap_bytes=4)


def test_gap_declared_when_held_bytes_exceed_the_limit():
    r = Reassembler(max_reorder_bytes=10)
    syn(r)
    assert r.segment(seg(ISN + 5, b"efghij", ts=1)) == []  # 6 held, hole 0..3
    ev = r.segment(seg(ISN + 11, b"klmnop", ts=2))  # 12 held > 10
    assert ev == [("gap", True, 4, 1), ("data", True, b"efghij", 1, 0), ("data", True, b"klmnop", 2, 0)]
    assert counters(r) == zero(delivered=12, ooo=2, gaps=1, gap_bytes=4)


def test_gap_declared_when_too_many_tiny_pieces_are_held():
    r = Reassembler(max_reorder_bytes=100 * 256)  # 100 pieces at most
    syn(r)
    for i in range(100):  # every other byte, after a hole at offset 0
        assert r.segment(seg(ISN + 2 + 2 * i, b"x", ts=i)) == []
    ev = r.segment(seg(ISN + 202, b"y", ts=100))  # the 101st piece
    # the first hole gives way; 100 pieces are left, within the bound, so the next hole waits
    assert ev == [("gap", True, 1, 0), ("data", True, b"x", 0, 0)]
    assert r.buffered_bytes == 100 and r.gap_count == 1 and r.next_off == 2


def test_gap_declared_when_the_hole_is_older_than_the_timeout():
    r = Reassembler(reorder_timeout_ns=1000)
    syn(r)
    r.segment(seg(ISN + 1, b"ab", ts=0))
    assert r.segment(seg(ISN + 5, b"ef", ts=100)) == []
    assert r.segment(seg(ISN + 7, b"gh", ts=1100)) == []  # hole known since 100: 1000 is not older
    assert r.peer_ack(ISN + 3, 1050) == []
    ev = r.peer_ack(ISN + 3, 1101)  # an ACK that says nothing new still advances the clock
    assert ev == [("gap", True, 2, 100), ("data", True, b"ef", 100, 0), ("data", True, b"gh", 1100, 0)]
    assert counters(r) == zero(delivered=6, ooo=2, gaps=1, gap_bytes=2)


def test_timeout_also_checked_on_own_segments():
    r = Reassembler(reorder_timeout_ns=1000)
    syn(r)
    r.segment(seg(ISN + 3, b"cd", ts=0))
    ev = r.segment(seg(ISN + 9, b"ij", ts=5000))
    # hole 0..1 is old: gap, "cd"; the hole 4..7 is only known since "ij" arrived: still held
    assert ev == [("gap", True, 2, 0), ("data", True, b"cd", 0, 0)]
    assert r.buffered_bytes == 2
    assert r.flush(6000) == [("gap", True, 4, 5000), ("data", True, b"ij", 5000, 0)]


def test_flush_turns_every_hole_into_a_gap():
    r = Reassembler()
    syn(r)
    r.segment(seg(ISN + 1, b"a", ts=1))
    r.segment(seg(ISN + 3, b"c", ts=2))
    r.segment(seg(ISN + 6, b"f", flags=FIN | ACK, ts=3))
    ev = r.flush(10)
    assert ev == [
        ("gap", True, 1, 2),
        ("data", True, b"c", 2, 0),
        ("gap", True, 2, 3),
        ("data", True, b"f", 3, 0),
    ]
    assert r.fin_done and r.next_off == 7 and r.buffered_bytes == 0
    assert r.flush(11) == []


def test_flush_with_a_hole_before_a_lone_fin():
    r = Reassembler()
    syn(r)
    r.segment(seg(ISN + 1, b"ab"))
    assert r.segment(seg(ISN + 6, flags=FIN | ACK, ts=4)) == []
    assert r.flush(9) == [("gap", True, 3, 4)]
    assert r.next_off == 6


def test_snap_truncated_segment_in_order_gives_data_then_gap():
    r = Reassembler()
    syn(r)
    ev = r.segment(seg(ISN + 1, b"abcd", plen=10, ts=1))
    assert ev == [("data", True, b"abcd", 1, 0), ("gap", True, 6, 1)]
    assert data(r.segment(seg(ISN + 11, b"k", ts=2))) == b"k"
    assert counters(r) == zero(delivered=5, gaps=1, gap_bytes=6)


def test_snap_truncated_segment_out_of_order():
    r = Reassembler()
    syn(r)
    assert r.segment(seg(ISN + 3, b"cd", plen=5, ts=1)) == []  # 2..6, captured 2..3
    assert r.segment(seg(ISN + 8, b"hi", ts=2)) == []
    ev = r.segment(seg(ISN + 1, b"ab", ts=3))
    assert ev == [
        ("data", True, b"ab", 3, 0),
        ("data", True, b"cd", 1, 0),
        ("gap", True, 3, 1),
        ("data", True, b"hi", 2, 0),
    ]
    assert counters(r) == zero(delivered=6, ooo=2, gaps=1, gap_bytes=3)


def test_segment_with_no_captured_payload_at_all():
    r = Reassembler()
    syn(r)
    ev = r.segment(seg(ISN + 1, b"", plen=100, ts=1))
    assert ev == [("gap", True, 100, 1)]
    assert data(r.segment(seg(ISN + 101, b"z"))) == b"z"


def test_link_padding_beyond_ip_length_is_ignored():
    r = Reassembler()
    syn(r)
    p = seg(ISN + 1, b"ab\x00\x00\x00\x00")
    p.payload_len = 2
    p.snap_truncated = False
    assert data(r.segment(p)) == b"ab"
    assert r._nseq == ISN + 3


def test_memory_does_not_grow_with_stream_length():
    r = Reassembler()
    syn(r)
    chunk = bytes(range(256)) * 4
    seq = ISN + 1
    tracemalloc.start()
    try:
        for i in range(3000):
            if i % 2 == 0:  # every pair swapped: one segment held at a time
                r.segment(seg(seq + len(chunk), chunk))
                r.segment(seg(seq, chunk))
                seq += 2 * len(chunk)
                assert r.buffered_bytes == 0
        size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.delivered_bytes == 3000 * len(chunk)
    assert r.out_of_order == 1500
    assert peak < 64 * 1024, peak  # 3 MB went through; only one segment was ever held


def test_randomised_overlaps_reorders_and_losses_tile_the_stream_exactly():
    rng = random.Random(1234)
    stream = rng.randbytes(200_000)
    isn = (1 << 32) - 50_000  # wraps in the middle
    for _trial in range(5):
        r = Reassembler(max_reorder_bytes=1 << 40, reorder_timeout_ns=1 << 62)
        syn(r, isn)
        covered = bytearray(len(stream))
        sends = []
        pos = 0
        while pos < len(stream):  # original transmissions, some lost
            n = rng.randint(1, 3000)
            if rng.random() > 0.05:
                sends.append((pos, n))
            pos += n
        for _ in range(len(sends) // 3):  # retransmissions with arbitrary overlaps
            a = rng.randrange(len(stream))
            sends.append((a, rng.randint(1, 4000)))
        # local reordering: shuffle within windows of 8
        for i in range(0, len(sends), 8):
            w = sends[i : i + 8]
            rng.shuffle(w)
            sends[i : i + 8] = w
        events = []
        for ts, (a, n) in enumerate(sends):
            piece = stream[a : a + n]
            covered[a : a + len(piece)] = b"\x01" * len(piece)
            events += r.segment(seg(isn + 1 + a, piece, ts=ts))
        events += r.flush(len(sends))
        out = 0
        for kind, from_lo, payload, *_ts in events:
            assert from_lo is True
            if kind == "data":
                assert payload == stream[out : out + len(payload)]
                out += len(payload)
            else:
                assert payload > 0 and not any(covered[out : out + payload])
                out += payload
        end = max(a + len(stream[a : a + n]) for a, n in sends)
        assert out == end
        assert r.delivered_bytes == sum(covered)
        assert r.gap_bytes == end - sum(covered)
        assert r.buffered_bytes == 0


GIB = 1 << 30


def test_an_ack_beyond_a_one_gib_hole_declares_it_at_once():
    """Bytes after a 1 GiB hole are held; the peer's ACK past them (more than 2^30 ahead of the
    next expected byte, but not beyond what this side was seen sending) makes the hole a gap of
    its exact size at once, and the held bytes follow in order."""
    r = Reassembler()
    syn(r)
    assert data(r.segment(seg(ISN + 1, b"a" * 100, ts=1))) == b"a" * 100
    after = ISN + 101 + GIB
    assert r.segment(seg(after, b"b" * 150, ts=2)) == []  # held beyond the hole
    ev = r.peer_ack((after + 150) & MASK, 3)
    assert [(e[0], e[2] if e[0] == "gap" else len(e[2])) for e in ev] == [("gap", GIB), ("data", 150)]
    assert data(r.segment(seg(after + 150, b"c" * 10, ts=4))) == b"c" * 10  # in step again
    assert counters(r) == zero(delivered=260, ooo=1, gaps=1, gap_bytes=GIB)


def test_a_three_gib_jump_is_a_gap_ahead_not_a_retransmission():
    """Sequence numbers 3 GiB ahead are 1 GiB behind modulo 2^32: a retransmission can be at most
    one TCP window (65535 << 14 bytes) old, so this is a jump ahead, measured exactly."""
    r = Reassembler()
    syn(r)
    assert data(r.segment(seg(ISN + 1, b"a" * 100, ts=1))) == b"a" * 100
    after = ISN + 101 + 3 * GIB
    assert r.segment(seg(after, b"b" * 250, ts=2)) == []
    ev = r.peer_ack((after + 250) & MASK, 3)
    assert [(e[0], e[2] if e[0] == "gap" else len(e[2])) for e in ev] == [("gap", 3 * GIB), ("data", 250)]
    assert counters(r) == zero(delivered=350, ooo=1, gaps=1, gap_bytes=3 * GIB)


def test_a_retransmission_from_almost_a_window_back_is_still_one():
    """Backwards by up to the largest window is a retransmission (here after 1.5 GiB of data)."""
    r = Reassembler()
    syn(r)
    for i in range(3):
        r.peer_ack((ISN + 1 + (i + 1) * GIB // 2) & MASK, i)  # half a GiB at a time, never captured
    assert r.next_off == 3 * GIB // 2 and r.gap_bytes == 3 * GIB // 2
    back = ISN + 1 + 3 * GIB // 2 - (65535 << 14)
    assert r.segment(seg(back, b"x" * 10, ts=9)) == []
    assert counters(r)["retrans"] == 10 and r.next_off == 3 * GIB // 2


def test_an_ack_far_beyond_anything_sent_is_not_believed():
    r = Reassembler()
    syn(r)
    r.segment(seg(ISN + 1, b"a" * 100, ts=1))
    r.segment(seg(ISN + 101 + 5000, b"b" * 10, ts=2))  # held beyond a hole of 5000
    assert r.peer_ack((ISN + 101 + 5010 + GIB + 1) & MASK, 3) == []  # 1 GiB past what was sent
    assert r.buffered_bytes == 10 and r.gap_count == 0
