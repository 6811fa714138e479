"""StreamBuffer: byte bookkeeping and per-byte capture times."""

from brokerscope.protocols.base import StreamBuffer


def test_offsets_and_times_follow_chunks():
    b = StreamBuffer()
    b.append(b"abcd", 100)
    b.append(b"efgh", 200)
    assert b.peek(6) == b"abcdef" and len(b) == 8 and b.end == 8
    assert b.ts_at(0) == 100 and b.ts_at(3) == 100 and b.ts_at(4) == 200 and b.ts_at(7) == 200
    b.consume(5)
    assert b.offset == 5 and bytes(b.data) == b"fgh" and b.ts_at(5) == 200
    b.skip(10)  # a 10-byte gap
    assert len(b) == 0 and b.offset == 18
    b.append(b"xy", 300)
    assert b.ts_at(18) == 300 and bytes(b.data) == b"xy"


def test_consume_while_a_view_is_held_does_not_raise():
    b = StreamBuffer()
    b.append(bytes(200_000), 1)
    view = b.data  # a decoder holding a view across consume()
    b.consume(150_000)
    assert len(b) == 50_000 and view[0] == 0
    del view
    b.append(b"z", 2)
    b.consume(50_000)
    assert bytes(b.data) == b"z" and b.ts_at(b.offset) == 2


def test_append_while_a_view_is_held_does_not_raise():
    b = StreamBuffer()
    b.append(b"abc", 1)
    view = b.data
    b.append(b"def", 2)
    assert bytes(view) == b"abc" and bytes(b.data) == b"abcdef" and b.ts_at(3) == 2


def test_unconsume_gives_back_the_bytes_just_consumed_with_their_times():
    """Framer.reread puts a frame found damaged back: its bytes and the times they came at,
    whether they are still in the buffer or it was compacted since."""
    for big in (False, True):
        b = StreamBuffer()
        pad = b"p" * (70_000 if big else 10)  # past 64 KiB, consume compacts the buffer
        b.append(pad, 1)
        b.append(b"frame-", 2)
        b.append(b"bytes", 3)
        b.append(b"next", 4)
        b.consume(len(pad))
        frame = b.peek(11)
        b.consume(11)
        assert bytes(b.data) == b"next"
        b.unconsume(frame, 99)
        assert bytes(b.data) == b"frame-bytesnext" and b.offset == len(pad)
        assert [b.ts_at(len(pad) + k) for k in (0, 6, 11)] == [2, 3, 4]
