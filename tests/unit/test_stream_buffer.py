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
