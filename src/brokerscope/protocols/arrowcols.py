"""Arrow columns from the buffers the compiled walks write (protocols/arrowbuf.h): fixed-width,
binary and string columns, the messages table's headers column, a text column of numbered strings. The
buffers are wrapped as they are (`Array.from_buffers`), never converted value by value."""

from __future__ import annotations

import pyarrow as pa

from .. import tables

HEADERS = pa.list_(tables.HEADER)  # the messages table's `headers` column


def binary(col: tuple, typ: pa.DataType | None = None) -> pa.Array:
    """A binary (or `typ`: string) column from a walk's (validity, offsets, data, null count)."""
    valid, offsets, data, nulls = col
    n = len(offsets) // 4 - 1
    bufs = [pa.py_buffer(valid) if nulls else None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(typ or pa.binary(), n, bufs, null_count=nulls)


def fixed(typ: pa.DataType, n: int, values, valid=None, nulls: int = 0) -> pa.Array:
    """A fixed-width column (int, float, bool) of n values from its values buffer and, where
    `nulls`, its validity bitmap."""
    bufs = [pa.py_buffer(valid) if nulls else None, pa.py_buffer(values)]
    return pa.Array.from_buffers(typ, n, bufs, null_count=nulls)


def text(offsets: bytes, data: bytes) -> pa.Array:
    """A string column without nulls from its int32 offsets and UTF-8 data."""
    n = len(offsets) // 4 - 1
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def headers(n: int, offsets: bytes, keys: pa.Array, values: pa.Array) -> pa.Array:
    """The headers column of n messages: int32 list offsets (n + 1) into the entries, whose keys
    (string) and values (binary) are columns of their own."""
    entries = pa.Array.from_buffers(tables.HEADER, len(keys), [None], children=[keys, values])
    return pa.Array.from_buffers(HEADERS, n, [None, pa.py_buffer(offsets)], children=[entries])
