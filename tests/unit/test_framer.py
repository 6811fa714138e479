"""protocols/framer.py on a toy framing (b"F" + u16 length + body of b"x"s): frames across
pushes, oversize frames skipped or resynced (then one record up to the next frame), gaps inside
and outside a skip, garbage as one record, and what close() returns."""

from __future__ import annotations

import struct

from brokerscope.protocols.base import CONFIRMED, NOT_A_FRAME, TENTATIVE
from brokerscope.protocols.framer import Frame, Framer, Junk, Rules


class Toy(Rules):
    head_len = hunt_len = 3

    def size(self, head):
        return 3 + struct.unpack_from(">H", head, 1)[0] if head[0] == ord("F") else None

    def judge(self, data, i):
        if data[i] != ord("F"):
            return NOT_A_FRAME
        end = i + 3 + struct.unpack_from(">H", data, i + 1)[0]
        if end > len(data):
            return TENTATIVE
        return NOT_A_FRAME if bytes(data[i + 3 : end]).strip(b"x") else CONFIRMED


def frame(n: int) -> bytes:
    return b"F" + struct.pack(">H", n) + b"x" * n


def drain(fr: Framer) -> list[tuple]:
    out = []
    while (item := fr.next()) is not None:
        if isinstance(item, Frame):
            out.append(("frame", item.offset, len(item.data)))
        else:
            out.append((item.status, item.offset, item.size, item.skipped))
    return out


def test_frames_across_pushes_and_garbage_as_one_record():
    fr = Framer(Toy(), 100)
    data = frame(5) + b"garbage!" + frame(2) + frame(0)
    got = []
    for i in range(0, len(data), 3):
        fr.push(data[i : i + 3], i)
        got += drain(fr)
    assert got == [("frame", 0, 8), ("malformed", 8, 8, False), ("frame", 16, 5), ("frame", 21, 3)]


def test_oversize_is_skipped_up_to_the_limit_factor_else_resynced():
    fr = Framer(Toy(), 10)
    fr.push(frame(20) + frame(1), 0)  # 23 bytes: above 10, within 4x: skipped exactly
    assert drain(fr) == [("oversize", 0, 23, True), ("frame", 23, 4)]
    fr = Framer(Toy(), 10)
    fr.push(frame(50) + frame(1), 0)  # 53 bytes: beyond 4x the limit: its header is dropped
    assert drain(fr) == [("oversize", 0, 53, False), ("frame", 53, 4)]  # one record up to the frame


def test_a_gap_inside_a_skipped_frame_keeps_the_next_start():
    fr = Framer(Toy(), 10)
    fr.push(frame(30)[:5], 0)
    assert drain(fr) == [("oversize", 0, 33, True)]
    junk, inside = fr.gap(20, 1)
    assert (junk, inside) == ([], True)
    fr.push(b"x" * 8 + frame(1), 2)  # the rest of the skipped frame, then a frame
    assert drain(fr) == [("frame", 33, 4)]


def test_a_gap_cuts_the_partial_frame_and_resyncs():
    fr = Framer(Toy(), 100)
    fr.push(frame(10)[:6], 0)
    assert drain(fr) == []
    junk, inside = fr.gap(7, 1)
    assert not inside and [(j.status, j.offset, j.size) for j in junk] == [("gap", 0, 6)]
    fr.push(b"xx" + frame(3), 2)  # stream offset 13: two stray bytes, then a frame
    assert drain(fr) == [("malformed", 13, 2, False), ("frame", 15, 6)]


def test_close_keeps_a_held_credible_start_as_an_unfinished_frame():
    fr = Framer(Toy(), 100, in_step=False)
    fr.push(b"zz" + frame(9)[:5], 0)
    assert drain(fr) == []
    junk = fr.close()
    assert [(j.status, j.offset, j.size) for j in junk] == [("malformed", 0, 2), ("truncated", 2, 5)]
    assert isinstance(junk[1], Junk) and junk[1].head == frame(9)[:5]
