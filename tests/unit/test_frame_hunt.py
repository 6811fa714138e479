"""base.FrameHunt, the resync search the decoders share: which candidate wins, and that a frame
arriving in pieces is not rescanned from its start."""

from __future__ import annotations

import struct

from brokerscope.protocols.base import CONFIRMED, NOT_A_FRAME, TENTATIVE, FrameHunt, StreamBuffer

# a toy framing: b"F" + length (u16, big-endian) + body; a body must be all b"x" to be credible
MAGIC = ord("F")


class Judge:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, data: memoryview, i: int) -> int:
        self.calls += 1
        if data[i] != MAGIC:
            return NOT_A_FRAME
        (length,) = struct.unpack_from(">H", data, i + 1)
        end = i + 3 + length
        if end > len(data):
            return TENTATIVE
        if bytes(data[i + 3 : end]).strip(b"x"):
            return NOT_A_FRAME
        return CONFIRMED


def frame(n: int) -> bytes:
    return b"F" + struct.pack(">H", n) + b"x" * n


def test_a_confirmed_frame_beats_an_earlier_false_size():
    buf, hunt = StreamBuffer(), FrameHunt()
    buf.append(b"..F\xff\xff.." + frame(3) + frame(4), 1)  # the first F claims 65535 bytes
    found, drop = hunt.run(buf, Judge(), 3)
    assert (found, drop) == (7, 7)


def test_a_tentative_frame_is_held_until_it_is_whole():
    buf, hunt = StreamBuffer(), FrameHunt()
    whole = frame(100)
    buf.append(b"garbage" + whole[:50], 1)
    assert hunt.run(buf, Judge(), 3) == (None, 7)  # the bytes before the candidate can go
    buf.consume(7)
    buf.append(whole[50:], 2)
    assert hunt.run(buf, Judge(), 3) == (0, 0)


def test_a_held_candidate_shown_false_gives_way_to_the_next_held_one():
    buf, hunt = StreamBuffer(), FrameHunt()
    first = b"F\x00\x08" + b"xxxF\x00\x05"  # claims 8 bytes; a second candidate starts inside it
    buf.append(first, 1)
    assert hunt.run(buf, Judge(), 3) == (None, 0)
    buf.append(b"xxxxx", 2)  # the first frame's body holds the second's header: false

    assert hunt.run(buf, Judge(), 3) == (6, 6)


def test_a_large_frame_in_pieces_is_judged_in_linear_time():
    buf, hunt, judge = StreamBuffer(), FrameHunt(), Judge()
    data = b"junk" + frame(60_000)
    pieces = [data[i : i + 1000] for i in range(0, len(data), 1000)]
    for k, p in enumerate(pieces):
        buf.append(p, k)
        found, drop = hunt.run(buf, judge, 3)
        buf.consume(drop)
        if found is not None:
            break
    assert found == 0 and len(buf) == len(frame(60_000))
    # every start is judged once, plus the held candidate once per piece
    assert judge.calls <= len(data) + len(pieces)
