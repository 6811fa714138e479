"""protocols/framer.py on a toy framing (b"F" + u16 length + body of b"x"s): frames across
pushes, oversize frames skipped or resynced (then one record up to the next frame), gaps inside
a frame, past its end and inside a skip, garbage as one record with the rules' reason, and what
close() returns."""

from __future__ import annotations

import struct

from brokerscope.protocols import framer
from brokerscope.protocols.base import CONFIRMED, NOT_A_FRAME, TENTATIVE
from brokerscope.protocols.framer import MORE, Frame, Framer, Junk, NotAFrame, Rules


class Toy(Rules):
    head_len = hunt_len = 3

    def size(self, buf):
        head = buf.data
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
    assert drain(fr) == []  # an oversize frame of up to OVERSIZE_HELD bytes is gathered whole first
    junk, inside = fr.gap(20, 1)  # ... and skipped exactly once a gap cuts it
    assert [(j.status, j.offset, j.size, j.skipped) for j in junk] == [("oversize", 0, 33, True)] and inside
    fr.push(b"x" * 8 + frame(1), 2)  # the rest of the skipped frame, then a frame
    assert drain(fr) == [("frame", 33, 4)]


def _damaged_oversize(frames: int) -> bytes:
    """A frame whose size says 33 bytes (oversize: the limit is 10) but that holds 2 bytes, then
    `frames` frames of 4 bytes: its size damaged, larger."""
    return b"F" + struct.pack(">H", 30) + b"xx" + frame(1) * frames


def test_an_oversize_frame_that_holds_frames_is_read_again():
    """Gathered whole, the frames inside it are found (Rules.cut_start): one malformed Junk up to
    the first, every frame read (were: all skipped with it as one oversize record)."""
    fr = Framer(Toy(), 10)
    data = _damaged_oversize(10)
    got = []
    for i in range(0, len(data), 3):
        fr.push(data[i : i + 3], i)
        got += drain(fr)
    assert got == [("malformed", 0, 5, False)] + [("frame", 5 + 4 * k, 4) for k in range(10)]


def test_an_oversize_frame_that_runs_past_the_end_and_holds_frames_is_read_again():
    fr = Framer(Toy(), 10)
    fr.push(_damaged_oversize(3), 0)  # 17 of the 33 bytes it declares
    assert drain(fr) == []
    assert fr.reread_if_cut("runs past the end")
    assert drain(fr) == [("malformed", 0, 5, False)] + [("frame", 5 + 4 * k, 4) for k in range(3)]
    assert fr.close() == []


def test_an_oversize_frame_cut_by_the_end_is_still_oversize():
    fr = Framer(Toy(), 10)
    fr.push(frame(30)[:10], 0)
    assert drain(fr) == [] and not fr.reread_if_cut("runs past the end")
    assert [(j.status, j.offset, j.size, j.skipped) for j in fr.close()] == [("oversize", 0, 33, True)]


def test_a_gap_inside_a_frame_of_known_size_is_one_record_and_keeps_step():
    fr = Framer(Toy(), 100)
    fr.push(frame(10)[:6], 0)
    assert drain(fr) == []
    junk, inside = fr.gap(4, 1)  # bytes 6..9 of a 13-byte frame
    assert not inside and [(j.status, j.offset, j.size, j.skipped) for j in junk] == [("gap", 0, 13, True)]
    assert junk[0].head == frame(10)[:6] and "4 bytes missing inside this frame" in junk[0].reason
    fr.push(b"xxx" + frame(3), 2)  # the frame's last 3 bytes, then a frame: no resync needed
    assert drain(fr) == [("frame", 13, 6)]


def test_a_gap_past_the_frame_end_is_one_record_up_to_the_next_frame_start():
    fr = Framer(Toy(), 100)
    fr.push(frame(10)[:6], 0)
    junk, inside = fr.gap(9, 1)  # runs 2 bytes past the 13-byte frame
    assert (junk, inside) == ([], False)
    fr.push(b"zz" + frame(3), 2)  # stream offset 15: two stray bytes, then a frame
    got = []
    while (item := fr.next()) is not None:
        got.append(item)
    gap, f = got
    assert (gap.status, gap.offset, gap.size, gap.head) == ("gap", 0, 6 + 9 + 2, frame(10)[:6])
    assert gap.reason.startswith("frame cut by a capture gap of 9 bytes")
    assert isinstance(f, Frame) and (f.offset, f.in_step) == (17, False)


def test_gaps_while_hunting_grow_one_record_and_sizes_add_up():
    fr = Framer(Toy(), 100)
    fr.push(frame(2) + b"junk", 0)
    assert drain(fr) == [("frame", 0, 5)]
    # the garbage the hunt passed over closes as its own record; the bytes it had not judged
    # yet go with the gap
    junk, _ = fr.gap(10, 1)
    junk += fr.gap(3, 2)[0]  # a second gap before any frame start: the same gap record
    fr.push(b"x" + frame(1), 3)
    got = [(j.status, j.offset, j.size, j.skipped) for j in junk] + drain(fr)
    assert got == [("malformed", 5, 2, False), ("gap", 7, 16, False), ("frame", 23, 4)]
    assert 5 + sum(g[2] for g in got) == 5 + 4 + 10 + 3 + 1 + 4  # every stream offset, once


class Tagged(Toy):
    """A toy whose frames must start with b"F" (else it says why), read a byte at a time."""

    head_len = 1

    def size(self, buf):
        head = buf.data
        if head[0] != ord("F"):
            return NotAFrame("no F here", info={"byte": head[0]})
        return MORE if len(head) < 3 else 3 + struct.unpack_from(">H", head, 1)[0]


def test_a_not_a_frame_verdict_names_the_junk_and_more_waits():
    fr = Framer(Tagged(), 100)
    fr.push(b"F\x00", 0)
    assert drain(fr) == []  # MORE: two bytes cannot tell
    fr.push(b"\x01x" + b"??" + frame(0), 1)
    got = []
    while (item := fr.next()) is not None:
        got.append(item)
    assert [type(g).__name__ for g in got] == ["Frame", "Junk", "Frame"]
    assert (got[1].reason, got[1].size, got[1].info) == ("no F here", 2, {"byte": ord("?")})


def test_a_start_the_rules_reject_after_the_hunt_found_it_does_not_loop():
    class Fickle(Toy):
        def size(self, buf):
            return None  # never a frame, though judge confirms starts

    fr = Framer(Fickle(), 100, in_step=False)
    fr.push(frame(1) * 3, 0)
    got = drain(fr) + [(j.status, j.offset, j.size, j.skipped) for j in fr.close()]
    assert sum(g[2] for g in got) == 12 and all(g[0] == "malformed" for g in got)


def test_close_keeps_a_held_credible_start_as_an_unfinished_frame():
    fr = Framer(Toy(), 100, in_step=False)
    fr.push(b"zz" + frame(9)[:5], 0)
    assert drain(fr) == []
    junk = fr.close()
    assert [(j.status, j.offset, j.size) for j in junk] == [("malformed", 0, 2), ("truncated", 2, 5)]
    assert isinstance(junk[1], Junk) and junk[1].head == frame(9)[:5]


def test_idle_exactly_when_next_gives_nothing(monkeypatch):
    """idle() is True only where next() would give None and nothing is left to give: after whole
    frames, never with bytes buffered, a skip under way or a resync's record open."""
    stream = frame(3) + frame(20) + b"junk" + frame(1) + frame(2)
    for cut in range(1, 9):
        fr = Framer(Toy(), 10)
        for i in range(0, len(stream), cut):
            fr.push(stream[i : i + cut], i)
            before = fr.idle()
            got = drain(fr)
            if before:
                assert got == [] and fr.buf.offset == i + len(stream[i : i + cut])
            assert fr.idle() == (len(fr.buf) == 0 and not fr.skip and not fr.resync)
        assert not fr.idle() or fr.close() == []
    fr = Framer(Toy(), 10)
    fr.push(frame(30)[:12], 0)  # an oversize frame being gathered whole: its bytes buffered
    assert drain(fr) == [] and len(fr.buf) == 12 and not fr.idle()
    fr.push(b"x" * 21 + frame(0), 12)
    assert drain(fr) == [("oversize", 0, 33, True), ("frame", 33, 3)] and fr.idle()
    monkeypatch.setattr(framer, "OVERSIZE_HELD", 20)  # beyond it, skipped as its bytes come
    fr = Framer(Toy(), 10)
    fr.push(frame(30)[:12], 0)  # an oversize frame being skipped: not idle though nothing is buffered
    assert drain(fr) == [("oversize", 0, 33, True)] and len(fr.buf) == 0 and not fr.idle()
    fr.push(b"x" * 21 + frame(0), 12)
    assert drain(fr) == [("frame", 33, 3)] and fr.idle()


class CountingToy(Toy):
    def __init__(self):
        self.calls = 0

    def size(self, buf):
        self.calls += 1
        return super().size(buf)


class SettledToy(CountingToy):
    settled_sizes = True


def _run(rules: Rules, ops: list) -> list:
    fr = Framer(rules, 60)
    out: list = []
    for op, arg, ts in ops:
        if op == "push":
            fr.push(arg, ts)
            out += drain(fr)
        else:
            junk, inside = fr.gap(arg, ts)
            out += [(j.status, j.offset, j.size, j.skipped) for j in junk] + [("inside", inside)]
            out += drain(fr)
    out += [(j.status, j.offset, j.size, j.skipped) for j in fr.close()]
    return out


def test_settled_sizes_wait_for_a_frame_without_asking_again_and_give_the_same_records():
    """Rules whose sizes are settled (Kafka, Pulsar, TubeMQ) are asked a frame's size once while
    its bytes come in pieces; frames, junk and gaps are those of rules asked every time, over
    random pieces of frames, oversize frames, garbage and gaps."""
    import random

    rng = random.Random(7)
    for _ in range(300):
        stream = b"".join(
            rng.choice(
                [frame(rng.randrange(0, 40)), frame(rng.randrange(61, 90)), b"garbage"[: rng.randrange(1, 8)]]
            )
            for _ in range(rng.randrange(1, 8))
        )
        ops, at, ts = [], 0, 0
        while at < len(stream):
            n = rng.randrange(1, 12)
            if rng.random() < 0.1:
                ops.append(("gap", n, ts))
            else:
                ops.append(("push", stream[at : at + n], ts))
            at += n
            ts += 1
        plain, settled = CountingToy(), SettledToy()
        assert _run(settled, ops) == _run(plain, ops)
        assert settled.calls <= plain.calls
    one = SettledToy()
    assert _run(one, [("push", frame(30)[i : i + 3], i) for i in range(0, 33, 3)]) == [("frame", 0, 33)]
    assert one.calls == 2  # once sized, once taken


def test_push_says_when_next_would_give_nothing():
    """push() returns True only where next() would give None and change nothing (a settled
    frame still short): conversations then skip asking. Random pieces, gaps, garbage, oversize."""
    import random

    rng = random.Random(11)
    said = 0
    for _ in range(300):
        stream = b"".join(
            rng.choice(
                [frame(rng.randrange(0, 40)), frame(rng.randrange(61, 90)), b"junk"[: rng.randrange(1, 5)]]
            )
            for _ in range(rng.randrange(1, 8))
        )
        fr = Framer(SettledToy(), 60)
        at = 0
        while at < len(stream):
            n = rng.randrange(1, 12)
            if rng.random() < 0.1:
                fr.gap(n, at)
                drain(fr)
            elif fr.push(stream[at : at + n], at):
                said += 1
                state = (fr.buf.offset, len(fr.buf), fr.skip, fr.resync, fr._short, fr.rules.calls)
                assert drain(fr) == []
                assert (fr.buf.offset, len(fr.buf), fr.skip, fr.resync, fr._short, fr.rules.calls) == state
            else:
                drain(fr)
            at += n
    assert said > 200
