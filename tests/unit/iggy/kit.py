"""Byte builders for Iggy frames, written from the layouts in the spec and apache/iggy sources."""

from __future__ import annotations

import struct

import xxhash

from brokerscope import tables
from brokerscope.protocols.base import ConnInfo, Context
from brokerscope.protocols.iggy import PROTOCOL
from tests.support.drive import Drive

CONN = ConnInfo("c1", "10.0.0.1", 50000, "10.0.0.2", 8090)


def u8(v: int) -> bytes:
    return bytes([v])


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def num_id(v: int) -> bytes:
    """Identifier, numeric: kind 1, length 4, u32."""
    return b"\x01\x04" + u32(v)


def str_id(s: str) -> bytes:
    """Identifier, string: kind 2, length, UTF-8."""
    b = s.encode()
    return b"\x02" + u8(len(b)) + b


def s8(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return u8(len(b)) + b


def s32(s: str) -> bytes:
    b = s.encode()
    return u32(len(b)) + b


def req(code: int, payload: bytes = b"") -> bytes:
    """Classic request: [length = 4 + payload][code][payload]."""
    return u32(4 + len(payload)) + u32(code) + payload


def resp(payload: bytes = b"", status: int = 0) -> bytes:
    """Classic response: [status][length][payload]."""
    return u32(status) + u32(len(payload)) + payload


def req2(code: int, request_id: int, payload: bytes = b"") -> bytes:
    """Request-id framing: [length = 12 + payload][code][request_id u64][payload]."""
    return u32(12 + len(payload)) + u32(code) + u64(request_id) + payload


def resp2(request_id: int, payload: bytes = b"", status: int = 0) -> bytes:
    """Request-id framing: [status][length = 8 + payload][request_id u64][payload]."""
    return u32(status) + u32(8 + len(payload)) + u64(request_id) + payload


def vsr_header(
    command: int,
    size: int,
    request: int,
    operation: int,
    client: int = 7,
    code: int = 0,
    status: int = 0,
    session: int = 0,
) -> bytes:
    """A 256-byte VSR header as apache-iggy 0.9 clients put it on the wire: size @48, command @60;
    Request (5): client u128 @128, request u64 @168, operation @176, session u64 @184, command
    code u32 @196 for non-replicated operations; Reply (8): request @200, operation @208,
    status u32 @216."""
    h = bytearray(256)
    struct.pack_into("<IIIBB", h, 48, size, 0, 0, command, 0)
    if command == 5:
        h[128:144] = client.to_bytes(16, "little")
        struct.pack_into("<QQB", h, 160, 123, request, operation)
        struct.pack_into("<Q", h, 184, session)
        struct.pack_into("<I", h, 196, code)
    elif command == 8:
        struct.pack_into("<QB", h, 200, request, operation)
        struct.pack_into("<I", h, 216, status)
    return bytes(h)


def login() -> list[tuple[str, bytes]]:
    """LOGIN_USER and its reply (raw bytes are kept for client frames only after a login)."""
    return [("c2s", req(38, s8("iggy") + s8("pw") + s32("v") + s32(""))), ("s2c", resp(u32(1)))]


def run(
    chunks: list[tuple[str, bytes]],
    ctx: Context | None = None,
    ts0: int = 1_000_000_000,
    allow_anomalies: bool = False,
):
    """Feed (direction, bytes) chunks 1 ms apart; return all rows (blocks as dict rows), close included, after checking
    them against the table schemas (tests.support.drive; damaged input may earn anomalies)."""
    d = Drive(PROTOCOL.conversation(CONN, ctx or Context()))
    for i, (direction, data) in enumerate(chunks):
        d.feed(direction, data, ts=ts0 + i * 1_000_000)
    d.close().tables(allow_anomalies=allow_anomalies)
    return [(t, x) for t, r in d.rows for x in (r.rows() if isinstance(r, tables.Block) else [r])]


def table(rows, name: str) -> list[dict]:
    return [r for t, r in rows if t == name]


VSR_ORIGIN = 1_700_000_000_000_000  # µs


def vsr_batch(msgs, pid=0, base=0, base_ts=0, deltas=None, bad_batch_sum=False, origin=VSR_ORIGIN) -> bytes:
    """One VSR-generation batch record (apache/iggy core/binary_protocol/src/batch.rs): 256-byte
    header (partition_id, base_offset, base_timestamp, origin_timestamp, batch_length,
    batch_checksum u64 each, message_count u32, zeros) then message frames (checksum u64, id
    u128, offset_delta u32, timestamp_delta u32, user headers length u32, payload length u32,
    reserved u64) + payload + user headers, from (id, payload, user headers blob)."""
    frames, sums = b"", []
    for i, (mid, payload, hdrs) in enumerate(msgs):
        rest = mid.to_bytes(16, "little") + u32(i) + u32(deltas[i] if deltas else 0)
        rest += u32(len(hdrs)) + u32(len(payload)) + u64(0) + payload + hdrs
        csum = u64(xxhash.xxh3_64_intdigest(rest))
        sums.append(csum)
        frames += csum + rest
    length = 256 + len(frames)
    meta = struct.pack("<QQQQQI", pid, base, base_ts, origin, length, len(msgs))
    bsum = xxhash.xxh3_64_intdigest(meta + b"".join(sums)) ^ (1 if bad_batch_sum else 0)
    head = struct.pack("<QQQQQQI", pid, base, base_ts, origin, length, bsum, len(msgs))
    return head + bytes(256 - len(head)) + frames
