"""Little-endian readers for Iggy's binary payloads and the shared structures.

Layouts (apache/iggy `core/common`):
- Identifier: kind u8 (1 numeric, 2 string), length u8, value (u32 LE when numeric, UTF-8 else).
- Consumer: kind u8 (1 consumer, 2 group) then, since 0.5, an Identifier; before, id u32.
- Partitioning: kind u8 (1 balanced, 2 partition id, 3 messages key), length u8, value.
- PollingStrategy: kind u8 (1 offset, 2 timestamp, 3 first, 4 last, 5 next), value u64.
- User headers: repeated [key length u32][key][value kind u8][value length u32][value].
"""

from __future__ import annotations

import struct

from ..base import DecodeError, Truncated
from .codes import CONSUMER_KINDS, HEADER_KINDS, PARTITIONING_KINDS, POLLING_KINDS

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_F32 = struct.Struct("<f")
_F64 = struct.Struct("<d")


# bytes that do not match the layout being read raise base.DecodeError (Truncated when the payload
# ends before the layout does), re-exported here


class Reader:
    """Cursor over a bytes-like payload; every read checks bounds."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | memoryview, pos: int = 0, end: int | None = None):
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > self.end:
            raise Truncated(f"need {n} bytes at {self.pos}, have {self.end - self.pos}")

    def u8(self) -> int:
        self.need(1)
        v = self.buf[self.pos]
        self.pos += 1
        return v

    def u16(self) -> int:
        self.need(2)
        v = _U16.unpack_from(self.buf, self.pos)[0]
        self.pos += 2
        return v

    def u32(self) -> int:
        self.need(4)
        v = _U32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return v

    def u64(self) -> int:
        self.need(8)
        v = _U64.unpack_from(self.buf, self.pos)[0]
        self.pos += 8
        return v

    def u128(self) -> int:
        self.need(16)
        v = int.from_bytes(self.buf[self.pos : self.pos + 16], "little")
        self.pos += 16
        return v

    def f32(self) -> float:
        self.need(4)
        v = _F32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return v

    def bytes(self, n: int) -> bytes:
        self.need(n)
        v = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return v

    def str8(self) -> str:
        """A UTF-8 string prefixed by its length as u8."""
        return _text(self.bytes(self.u8()))

    def str32(self) -> str:
        """A UTF-8 string prefixed by its length as u32."""
        n = self.u32()
        return _text(self.bytes(n))

    def done(self) -> None:
        if self.pos != self.end:
            raise DecodeError(f"{self.end - self.pos} trailing bytes at {self.pos}")


def _text(b: bytes) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DecodeError(f"invalid UTF-8: {e}") from None


def identifier(r: Reader) -> dict:
    """Identifier: kind u8, length u8, value."""
    kind = r.u8()
    length = r.u8()
    if kind == 1:
        if length != 4:
            raise DecodeError(f"numeric identifier of length {length}")
        return {"kind": "numeric", "length": 4, "value": r.u32()}
    if kind == 2:
        if length == 0:
            raise DecodeError("empty string identifier")
        return {"kind": "string", "length": length, "value": _text(r.bytes(length))}
    raise DecodeError(f"identifier kind {kind}")


def id_text(ident: dict | None) -> str | None:
    return None if ident is None else str(ident["value"])


def consumer(r: Reader, legacy: bool) -> dict:
    """Consumer: kind u8 then an Identifier (0.5+) or a u32 id (`legacy`, the spec's layout)."""
    kind = r.u8()
    if kind not in CONSUMER_KINDS:
        raise DecodeError(f"consumer kind {kind}")
    if legacy:
        return {"kind": CONSUMER_KINDS[kind], "id": r.u32()}
    ident = identifier(r)
    return {"kind": CONSUMER_KINDS[kind], "id": ident["value"], "id_kind": ident["kind"]}


def partitioning(r: Reader) -> dict:
    kind = r.u8()
    length = r.u8()
    if kind not in PARTITIONING_KINDS:
        raise DecodeError(f"partitioning kind {kind}")
    value = r.bytes(length)
    out: dict = {"kind": PARTITIONING_KINDS[kind], "length": length}
    if kind == 2:
        if length != 4:
            raise DecodeError(f"partition id partitioning of length {length}")
        out["value"] = _U32.unpack(value)[0]
    elif kind == 3:
        out["value"] = value
    elif length:
        raise DecodeError("balanced partitioning with a value")
    return out


def polling_strategy(r: Reader) -> dict:
    kind = r.u8()
    if kind not in POLLING_KINDS:
        raise DecodeError(f"polling kind {kind}")
    return {"kind": POLLING_KINDS[kind], "value": r.u64()}


def header_value(kind: int, value: bytes):
    """The typed value of a user header, for details (the raw bytes go to the headers column)."""
    try:
        if kind == 2:
            return value.decode("utf-8")
        if kind == 3 and len(value) == 1:
            return bool(value[0])
        if kind in (4, 5, 6, 7, 8) and len(value) in (1, 2, 4, 8, 16):
            return int.from_bytes(value, "little", signed=True)
        if kind in (9, 10, 11, 12, 13) and len(value) in (1, 2, 4, 8, 16):
            return int.from_bytes(value, "little")
        if kind == 14 and len(value) == 4:
            return _F32.unpack(value)[0]
        if kind == 15 and len(value) == 8:
            return _F64.unpack(value)[0]
    except UnicodeDecodeError:
        pass
    return value


# blobs parsed lately (a producer's messages often carry the same headers): blob -> parsed list,
# shared by every message that has it, so never changed by a caller
_SEEN: dict[bytes, list[dict]] = {}
_SEEN_MAX, _SEEN_BLOB_MAX = 4096, 1024


def user_headers(buf: bytes) -> list[dict]:
    """Parse a user-headers blob into [{key, kind, value(bytes), typed}] in wire order (a list
    callers must not change: a blob seen before gives the same list).

    Two entry layouts: [key length u32][key][value kind u8][value length u32][value] (0.5-0.8),
    and typed keys [key kind u8][key length u32][key][value kind u8][value length u32][value]
    (apache-iggy 0.9 clients). The one that parses the whole blob wins."""
    buf = buf if buf.__class__ is bytes else bytes(buf)
    out = _SEEN.get(buf)
    if out is not None:
        return out
    out = _headers_plain(buf, typed_keys=False)
    if out is None:
        out = _headers_plain(buf, typed_keys=True)
    if out is None:  # neither layout fits: read again for the error (the first layout's)
        _headers_read(buf, typed_keys=False)
        _headers_read(buf, typed_keys=True)
        raise DecodeError("user headers fit neither layout")  # not reached: the reads raise
    if len(buf) <= _SEEN_BLOB_MAX:
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.clear()
        _SEEN[buf] = out
    return out


def _headers_plain(buf: bytes, typed_keys: bool) -> list[dict] | None:
    """The entries of a headers blob in one layout (typed keys or not), read with plain indexing:
    None where the blob does not fit it (_headers_read then says why)."""
    out = []
    pos, end = 0, len(buf)
    u32 = _U32.unpack_from
    try:
        while pos < end:
            key_kind = None
            if typed_keys:
                key_kind = buf[pos]
                pos += 1
                if key_kind not in HEADER_KINDS:
                    return None
            (n,) = u32(buf, pos)
            pos += 4
            if pos + n > end:
                return None
            key = buf[pos : pos + n]
            pos += n
            kind = buf[pos]
            (n,) = u32(buf, pos + 1)
            pos += 5
            if kind not in HEADER_KINDS or pos + n > end:
                return None
            value = buf[pos : pos + n]
            pos += n
            out.append(_header(key, kind, value, key_kind))
    except (IndexError, struct.error):
        return None
    return out


def _header(key: bytes, kind: int, value: bytes, key_kind: int | None) -> dict:
    if key_kind in (None, 1, 2):
        key_text = key.decode("utf-8", "backslashreplace")
    else:  # a typed non-string key: its value rendered as text
        key_text = str(header_value(key_kind, key))
    h = {"key": key_text, "kind": HEADER_KINDS[kind], "value": value, "typed": header_value(kind, value)}
    if key_kind is not None:
        h["key_kind"] = HEADER_KINDS[key_kind]
    return h


def _headers_read(buf: bytes, typed_keys: bool) -> list[dict]:
    r = Reader(buf)
    out = []
    while r.remaining:
        key_kind = None
        if typed_keys:
            key_kind = r.u8()
            if key_kind not in HEADER_KINDS:
                raise DecodeError(f"header key kind {key_kind}")
        key = r.bytes(r.u32())
        kind = r.u8()
        if kind not in HEADER_KINDS:
            raise DecodeError(f"header kind {kind}")
        value = r.bytes(r.u32())
        out.append(_header(key, kind, value, key_kind))
    return out


def legacy_header_map(r: Reader, length: int) -> list[dict]:
    """Pre-0.5 headers blob (same entry layout), bounded by `length`."""
    return user_headers(r.bytes(length))


def topic_name(stream: dict | None, topic: dict | None) -> str | None:
    """The `topic` column: "<stream>/<topic>", each its name or numeric id as sent."""
    if stream is None or topic is None:
        return None
    s = stream["value"] if isinstance(stream, dict) else stream
    t = topic["value"] if isinstance(topic, dict) else topic
    return f"{s}/{t}"
