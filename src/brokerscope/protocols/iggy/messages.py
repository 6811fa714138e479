"""Iggy message lists: SEND_MESSAGES requests, POLL_MESSAGES responses, segment logs.

Two message layouts exist (apache/iggy `core/common/src/types/message`):

- 0.5 and later (`IggyMessageHeader`), per message a fixed header then payload then user headers:
    0 checksum u64 | 8 id u128 | 24 offset u64 | 32 timestamp u64 | 40 origin timestamp u64 |
    48 user headers length u32 | 52 payload length u32 | [56 reserved u64 = 0]
  The header is 56 bytes in 0.5-0.6 and 64 bytes (with the reserved word) since. The checksum is
  XXH3-64 of the message bytes after the checksum field (header[8:] + payload + user headers); the
  client sends 0 and the server fills it in.
- before 0.5, the spec's layout: polled message = offset u64, state u8, timestamp u64, id u128,
  checksum u32 (CRC32 of the payload), headers length u32, headers, payload length u32, payload;
  sent message = id u128, headers length u32, headers, payload length u32, payload.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import pyarrow as pa

from ... import native
from .. import arrowcols, base
from .codes import MESSAGE_STATES
from .wire import DecodeError, Reader, identifier, partitioning, user_headers

_batch = native.load(__package__, "_batch")  # compiled from _batch.c: a batch record's messages

try:  # XXH3-64 checksums (of any bytes-like object); without the package the checksum is
    # reported, not verified
    import xxhash

    xxh3_64 = xxhash.xxh3_64_intdigest
    # what the compiled walk verifies checksums with: the library's own C function where its
    # module exports it (a call without Python objects per message), else the Python function
    _XXH3 = native.c_function(xxhash._xxhash, "XXH3_64bits") or xxh3_64

except ImportError:  # pragma: no cover - xxhash is a pinned dependency

    def xxh3_64(data: bytes) -> int | None:
        return None

    _XXH3 = None


HEADER_SIZES = (64, 56)
INDEX_SIZE = 16  # send-batch index entry: offset u32, position u32, timestamp u64
MAX_MESSAGES = 1_000_000


@dataclass(slots=True, eq=False)
class Messages:
    """The messages of one frame as columns, one entry per message in wire order, with the two
    texts the rows keep of each: `details`, its messages row's (its user headers with kinds and
    typed values, then its timestamps, checksum, state and header size where known), and
    `summaries`, its entry in the frame's commands row (id, payload and headers sizes, offset,
    checksum and its verdict, state). Made by the compiled walk (VSR batch records: ids, payloads
    and details as Arrow arrays, summaries one text per record) or from the message dicts of the
    other layouts (`of`: lists, a summary per message)."""

    ids: list[str] | pa.Array  # decimal text of the u128 id
    payloads: list[bytes] | pa.Array
    headers: list[list[dict]] | None  # the headers column's values ({"key", "value"}); None: none has any
    offsets: list[int | None]
    checksum_ok: list[bool | None]
    ts_ns: list[int | None]  # the server's timestamp, else the origin one (µs), in ns
    details: list[str] | pa.Array
    summaries: list[str]  # entries, or runs of them joined by commas: ",".join gives them all

    def __len__(self) -> int:
        return len(self.offsets)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Messages) and self.plain() == other.plain()

    def plain(self) -> dict:
        """Every column as a Python list (summaries as the one text they join to)."""
        out = {f: _py(getattr(self, f)) for f in _COLUMNS if f != "summaries"}
        out.update(headers=self.headers, summaries=",".join(self.summaries))
        return out

    @classmethod
    def of(cls, msgs: list[dict], sums: bool = True) -> Messages:
        """The columns of message dicts (parse_message, parse_legacy_polled, parse_message_v48);
        `sums` false leaves their checksums out of the texts (PayloadPolicy.checksums_kept)."""
        return cls(
            [str(m["id"]) for m in msgs],
            [m["payload"] for m in msgs],
            [_header_values(m["headers"]) for m in msgs] if any(m["headers"] for m in msgs) else None,
            [m.get("offset") for m in msgs],
            [m.get("checksum_ok") for m in msgs],
            [(t * 1000 if (t := m.get("timestamp") or m.get("origin_timestamp")) else None) for m in msgs],
            _details(msgs, sums),
            [_summary(m, sums) for m in msgs],
        )

    @classmethod
    def join(cls, parts: list[Messages]) -> Messages:
        """The messages of several batch records, in order."""
        if len(parts) == 1:
            return parts[0]
        cols = {f: _joined([getattr(p, f) for p in parts]) for f in _COLUMNS}
        headers = None
        if any(p.headers is not None for p in parts):
            headers = [x for p in parts for x in (p.headers if p.headers is not None else [[]] * len(p))]
        return cls(headers=headers, **cols)


def _py(col: list | pa.Array) -> list:
    return col.to_pylist() if isinstance(col, pa.Array) else col


def _joined(cols: list[list | pa.Array]) -> list | pa.Array:
    """Columns one after the other: one Arrow array where all are, else a list."""
    if all(isinstance(c, pa.Array) for c in cols):
        return pa.concat_arrays(cols)
    return [x for c in cols for x in _py(c)]


_COLUMNS = ("ids", "payloads", "offsets", "checksum_ok", "ts_ns", "details", "summaries")  # not headers
_DETAIL_KEYS = ("origin_timestamp", "timestamp", "checksum", "state", "header_size")
_SUMMARY_KEYS = ("offset", "checksum", "checksum_ok", "state")
_DETAIL_KEYS_NO_SUM, _SUMMARY_KEYS_NO_SUM = (
    tuple(k for k in ks if k != "checksum") for ks in (_DETAIL_KEYS, _SUMMARY_KEYS)
)


def _header_values(hs: list[dict]) -> list[dict]:
    """The headers column's value of a message: its user headers' keys and value bytes."""
    return [{"key": h["key"], "value": h["value"]} for h in hs]


def _headers_json(hs: list[dict], names: dict[str, str]) -> str:
    """The start of a message's details: its user headers as JSON, up to the list's closing
    bracket (`names`: header keys and kinds already written as JSON)."""
    jv = base.json_value
    typed = []
    for h in hs:
        k, kind = h["key"], h["kind"]
        if (kj := names.get(k)) is None:
            kj = names[k] = jv(k)
        if (kindj := names.get(kind)) is None:
            kindj = names[kind] = jv(kind)
        typed.append(f'{{"key":{kj},"kind":{kindj},"value":{jv(h["typed"])}}}')
    return f'{{"headers":[{",".join(typed)}'


# user-header blobs seen lately (a producer's messages often carry the same ones): blob -> (the
# headers column's value, the start of the details), shared by every message that has it
_BLOBS: dict[bytes, tuple[list[dict], str]] = {}
_BLOBS_MAX, _BLOB_MAX = 4096, 1024
_NAMES: dict[str, str] = {}  # header keys and kinds as JSON


def _blob(blob: bytes) -> tuple[list[dict], str]:
    """The headers column's value and the details' start of a user-headers blob."""
    got = _BLOBS.get(blob)
    if got is None:
        hs = user_headers(blob)
        if len(_NAMES) > _BLOBS_MAX:
            _NAMES.clear()
        got = (_header_values(hs), _headers_json(hs, _NAMES))
        if len(blob) <= _BLOB_MAX:
            if len(_BLOBS) >= _BLOBS_MAX:
                _BLOBS.clear()
            _BLOBS[blob] = got
    return got


def _details(msgs: list[dict], sums: bool = True) -> list[str]:
    """Each message dict's details (Messages.details), written piece by piece, the JSON of a
    headers list once (user_headers gives one list per distinct blob); its checksum only where
    `sums`."""
    keys = _DETAIL_KEYS if sums else _DETAIL_KEYS_NO_SUM
    out = []
    made: dict[int, str] = {}
    names: dict[str, str] = {}
    jv = base.json_value
    for m in msgs:
        hs = m["headers"]
        if not hs:
            text = '{"headers":['
        elif (text := made.get(id(hs))) is None:
            text = made[id(hs)] = _headers_json(hs, names)
        text += "]"
        get = m.get
        for k in keys:
            v = get(k)
            if v is not None:  # ints as they are, without a call
                text += f',"{k}":{v}' if v.__class__ is int else f',"{k}":{jv(v)}'
        out.append(text + "}")
    return out


def _summary(m: dict, sums: bool = True) -> str:
    """A message dict's entry in its frame's commands row (Messages.summaries); its checksum only
    where `sums`."""
    text = f'{{"id":"{m["id"]}","payload_size":{len(m["payload"])},"headers":{len(m["headers"])}'
    get = m.get
    for k in _SUMMARY_KEYS if sums else _SUMMARY_KEYS_NO_SUM:
        v = get(k)
        if v is not None:  # ints as they are, without a call
            text += f',"{k}":{v}' if v.__class__ is int else f',"{k}":{base.json_value(v)}'
    return text + "}"


def checksum_of(message: bytes | memoryview) -> int | None:
    """The XXH3-64 checksum Iggy stores for a whole message (header included)."""
    return xxh3_64(bytes(message[8:]))


def parse_message(buf: bytes | memoryview, pos: int, end: int, header_size: int) -> tuple[dict, int]:
    """One 0.5+ message at `pos`; returns (message, next position)."""
    if pos + header_size > end:
        raise DecodeError(f"message header truncated at {pos}")
    (checksum,) = struct.unpack_from("<Q", buf, pos)
    mid = int.from_bytes(buf[pos + 8 : pos + 24], "little")
    offset, ts, origin_ts, hlen, plen = struct.unpack_from("<QQQII", buf, pos + 24)
    reserved = struct.unpack_from("<Q", buf, pos + 56)[0] if header_size == 64 else None
    body = pos + header_size
    stop = body + plen + hlen
    if stop > end:
        raise DecodeError(f"message at {pos} runs past the data ({plen}+{hlen} bytes)")
    payload = bytes(buf[body : body + plen])
    headers = user_headers(bytes(buf[body + plen : stop])) if hlen else []
    ok = None
    if checksum:
        calc = checksum_of(buf[pos:stop])
        ok = None if calc is None else calc == checksum
    msg = {
        "id": mid,
        "offset": offset,
        "timestamp": ts,
        "origin_timestamp": origin_ts,
        "checksum": checksum,
        "checksum_ok": ok,
        "headers": headers,
        "payload": payload,
        "size": stop - pos,
        "header_size": header_size,
    }
    if reserved:
        msg["reserved"] = reserved
    return msg, stop


def parse_messages(buf, pos: int, end: int, count: int | None, header_size: int) -> list[dict]:
    """Messages from pos to end (exactly); `count`, when given, must match."""
    out = []
    while pos < end:
        if len(out) >= MAX_MESSAGES:
            raise DecodeError("too many messages")
        m, pos = parse_message(buf, pos, end, header_size)
        out.append(m)
    if count is not None and len(out) != count:
        raise DecodeError(f"{len(out)} messages where the count says {count}")
    return out


def parse_messages_any(buf, pos: int, end: int, count: int | None) -> list[dict]:
    """Try the 64-byte header layout, then the 56-byte one."""
    err: Exception | None = None
    for hs in HEADER_SIZES:
        try:
            return parse_messages(buf, pos, end, count, hs)
        except DecodeError as e:
            err = e
    raise DecodeError(f"no message layout fits: {err}")


def parse_legacy_polled(r: Reader, count: int) -> list[dict]:
    out = []
    for _ in range(count):
        offset = r.u64()
        state = r.u8()
        ts = r.u64()
        mid = r.u128()
        checksum = r.u32()
        hlen = r.u32()
        headers = user_headers(r.bytes(hlen)) if hlen else []
        payload = r.bytes(r.u32())
        out.append(
            {
                "id": mid,
                "offset": offset,
                "state": MESSAGE_STATES.get(state, state),
                "timestamp": ts,
                "checksum": checksum,
                "checksum_ok": zlib.crc32(payload) == checksum,
                "headers": headers,
                "payload": payload,
                "format": "legacy",
            }
        )
    r.done()
    return out


def parse_polled(payload: bytes | memoryview, sums: bool = True) -> dict:
    """POLL_MESSAGES response: partition_id u32, current_offset u64, count u32, messages (their
    checksums and the batches' only where `sums`: PayloadPolicy.checksums_kept)."""
    r = Reader(payload)
    partition_id = r.u32()
    current_offset = r.u64()
    count = r.u32()
    out = {"partition_id": partition_id, "current_offset": current_offset, "count": count}
    if count > MAX_MESSAGES:
        raise DecodeError(f"message count {count}")
    if count and looks_like_batch(payload, r.pos, len(payload)):
        # VSR generation (apache/iggy server build_polled_messages_reply): the head above, then
        # the stored batch records as they are, `count` = the messages over all batches
        try:
            out.update(parse_batches_v48(payload, r.pos, len(payload), count, sums))
            out["format"] = "v48_batch"
            return out
        except DecodeError:
            pass  # fall through to the older layouts
    try:
        msgs = parse_messages_any(payload, r.pos, len(payload), count)
        out["messages"] = Messages.of(msgs, sums)
        out["format"] = f"v{msgs[0]['header_size']}" if count else "v64"
        return out
    except DecodeError as e_new:
        try:
            out["messages"] = Messages.of(parse_legacy_polled(Reader(payload, r.pos), count), sums)
            out["format"] = "legacy"
            return out
        except DecodeError:
            raise e_new from None


def parse_send(payload: bytes | memoryview, sums: bool = True) -> dict:
    """SEND_MESSAGES request, either layout (the messages' checksums and the batch's only where
    `sums`: PayloadPolicy.checksums_kept).

    0.5+: metadata_length u32 (= sizes of the two identifiers, partitioning and count), stream
    Identifier, topic Identifier, Partitioning, messages_count u32, messages_count index entries of
    16 bytes (position u32 at +4 = end of message i relative to the first message), messages.
    Before 0.5: stream Identifier, topic Identifier, Partitioning, then messages to the end.
    """
    try:
        return _parse_send_new(payload, sums)
    except DecodeError as e_new:
        try:
            return _parse_send_legacy(payload)
        except DecodeError:
            raise e_new from None


def _parse_send_new(payload, sums: bool = True) -> dict:
    r = Reader(payload)
    metadata_length = r.u32()
    start = r.pos
    stream = identifier(r)
    topic = identifier(r)
    part = partitioning(r)
    count = r.u32()
    if r.pos - start != metadata_length:
        raise DecodeError(f"metadata length {metadata_length} != {r.pos - start}")
    if count > MAX_MESSAGES:
        raise DecodeError(f"message count {count}")
    if looks_like_batch(payload, r.pos, len(payload)) and (
        len(payload) - r.pos == struct.unpack_from("<Q", payload, r.pos + 32)[0]
    ):
        # VSR generation: one batch record (apache/iggy core/binary_protocol/src/batch.rs)
        batch, msgs, _ = read_batch_v48(payload, r.pos, len(payload), count, sums)
        return {
            "format": "v48_batch",
            "metadata_length": metadata_length,
            "stream_id": stream,
            "topic_id": topic,
            "partitioning": part,
            "messages_count": count,
            "batch": batch,  # its partition_id/base_offset are 0 until the server stamps them
            "messages": msgs,
        }
    r.need(count * INDEX_SIZE)
    index = [struct.unpack_from("<IIQ", payload, r.pos + i * INDEX_SIZE) for i in range(count)]
    first = r.pos + count * INDEX_SIZE
    msgs = parse_messages_any(payload, first, len(payload), count)
    # the index gives each message's end; check it against the messages found
    pos = 0
    for m, (_, end_pos, _) in zip(msgs, index, strict=True):
        pos += m["size"]
        if end_pos not in (0, pos):
            raise DecodeError(f"index position {end_pos} != message end {pos}")
    return {
        "format": f"v{msgs[0]['header_size']}" if msgs else "v64",
        "metadata_length": metadata_length,
        "stream_id": stream,
        "topic_id": topic,
        "partitioning": part,
        "messages_count": count,
        "messages": Messages.of(msgs, sums),
    }


def _parse_send_legacy(payload) -> dict:
    r = Reader(payload)
    stream = identifier(r)
    topic = identifier(r)
    part = partitioning(r)
    msgs = []
    while r.remaining:
        if len(msgs) >= MAX_MESSAGES:
            raise DecodeError("too many messages")
        mid = r.u128()
        hlen = r.u32()
        headers = user_headers(r.bytes(hlen)) if hlen else []
        body = r.bytes(r.u32())
        msgs.append({"id": mid, "headers": headers, "payload": body, "checksum_ok": None})
    return {
        "format": "legacy",
        "stream_id": stream,
        "topic_id": topic,
        "partitioning": part,
        "messages_count": len(msgs),
        "messages": Messages.of(msgs),
    }


def build_message(
    mid: int,
    payload: bytes,
    headers: bytes = b"",
    offset: int = 0,
    timestamp: int = 0,
    origin_timestamp: int = 0,
    header_size: int = 64,
    with_checksum: bool = True,
) -> bytes:
    """Serialise one 0.5+ message (for simulators, segment writers and tests)."""
    rest = mid.to_bytes(16, "little") + struct.pack(
        "<QQQII", offset, timestamp, origin_timestamp, len(headers), len(payload)
    )
    if header_size == 64:
        rest += b"\0" * 8
    rest += payload + headers
    checksum = (xxh3_64(rest) or 0) if with_checksum else 0
    return struct.pack("<Q", checksum) + rest


def build_headers(items: list[tuple[str, int, bytes]]) -> bytes:
    """User headers blob from (key, kind code, value bytes)."""
    out = b""
    for key, kind, value in items:
        k = key.encode()
        out += struct.pack("<I", len(k)) + k + bytes([kind]) + struct.pack("<I", len(value)) + value
    return out


# The message batch of the VSR generation (apache-iggy 0.9 clients, Rust SDK 0.11), confirmed
# from apache/iggy core/binary_protocol/src/batch.rs: "the one layout a SendMessages body, the
# replicated prepare, the persisted segment record, and the poll reply all share".
#   batch header (256 bytes): partition_id u64 @0, base_offset u64 @8, base_timestamp u64 @16,
#     origin_timestamp u64 @24, batch_length u64 @32 (= 256 + blob), batch_checksum u64 @40,
#     message_count u32 @48, reserved (zero) @52..256. A producer sends partition_id, base_offset
#     and base_timestamp as 0; the server stamps them and recomputes the batch checksum.
#   message frame: 48-byte header then payload then user headers: checksum u64 @0 (XXH3-64 of
#     frame[8:] + payload + user headers), id u128 @8, offset_delta u32 @24, timestamp_delta u32
#     @28 (microseconds after the batch origin_timestamp), user_headers_length u32 @32,
#     payload_length u32 @36, reserved u64 @40 (zero).
#   batch checksum: XXH3-64 over partition_id, base_offset, base_timestamp, origin_timestamp,
#     batch_length (u64 LE each) and message_count (u32 LE), then each message's 8-byte checksum
#     field in order (not the bodies: those are bound by the per-message checksums).
BATCH_HEADER_V48 = 256
V48 = 48
_BATCH_META = struct.Struct("<QQQQQQI")  # partition, base offset, base ts, origin ts, len, checksum, count
_BATCH_HASHED = struct.Struct("<QQQQQI")
# a message frame's header: checksum, id (16 bytes LE), offset delta, timestamp delta, user headers
# length, payload length, reserved
_V48_HEADER = struct.Struct("<Q16sIIIIQ")


def batch_checksum(header_fields: tuple, message_checksums: list[bytes]) -> int | None:
    """The batch checksum Iggy stores at batch header offset 40 (None without xxhash)."""
    pid, base_offset, base_ts, origin_ts, length, count = header_fields
    data = _BATCH_HASHED.pack(pid, base_offset, base_ts, origin_ts, length, count)
    return xxh3_64(data + b"".join(message_checksums))


def parse_message_v48(buf, pos: int, end: int) -> tuple[dict, int]:
    """One message frame of a batch: (message, next position); offsets/times are relative."""
    if pos + V48 > end:
        raise DecodeError(f"message header truncated at {pos}")
    checksum, mid, delta, ts_delta, hlen, plen, reserved = _V48_HEADER.unpack_from(buf, pos)
    if reserved:
        raise DecodeError(f"message at {pos}: reserved bytes not zero")
    body = pos + V48
    stop = body + plen + hlen
    if stop > end:
        raise DecodeError(f"message at {pos} runs past the data ({plen}+{hlen} bytes)")
    ok = None
    if checksum:
        calc = xxh3_64(buf[pos + 8 : stop])
        ok = None if calc is None else calc == checksum
    msg = {
        "id": int.from_bytes(mid, "little"),
        "offset_delta": delta,
        "timestamp_delta": ts_delta,
        "checksum": checksum,
        "checksum_ok": ok,
        "headers": user_headers(bytes(buf[body + plen : stop])) if hlen else [],
        "payload": bytes(buf[body : body + plen]),
        "size": stop - pos,
        "header_size": V48,
    }
    return msg, stop


def parse_batch_v48(buf, pos: int, end: int, count: int | None = None) -> tuple[dict, int]:
    """One batch record at `pos` (within `end`): (batch fields with its messages, next position).

    Each message gets its absolute `offset` (base_offset + delta), `origin_timestamp` (the
    producer's clock: batch origin + timestamp_delta, µs) and `timestamp` (the server's
    base_timestamp, µs; None while the server has not stamped the batch)."""
    if pos + BATCH_HEADER_V48 > end:
        raise DecodeError("batch header truncated")
    pid, base_offset, base_ts, origin_ts, length, checksum, n = _BATCH_META.unpack_from(buf, pos)
    if length < BATCH_HEADER_V48 or pos + length > end:
        raise DecodeError(f"batch length {length} does not fit {end - pos} bytes")
    if any(bytes(buf[pos + 52 : pos + BATCH_HEADER_V48])):
        raise DecodeError("batch header reserved bytes not zero")
    if count is not None and n != count:
        raise DecodeError(f"batch count {n} != {count}")
    stop = pos + length
    msgs = []
    sums = []
    p = pos + BATCH_HEADER_V48
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)  # slices without copies
    while p < stop:
        if len(msgs) >= n:
            raise DecodeError("more messages than the batch count")
        m, nxt = parse_message_v48(mv, p, stop)
        sums.append(bytes(mv[p : p + 8]))
        m["offset"] = base_offset + m["offset_delta"]
        m["origin_timestamp"] = origin_ts + m["timestamp_delta"] if origin_ts else None
        m["timestamp"] = base_ts or None
        msgs.append(m)
        p = nxt
    if len(msgs) != n:
        raise DecodeError(f"{len(msgs)} messages where the batch says {n}")
    ok = None
    if checksum:
        calc = batch_checksum((pid, base_offset, base_ts, origin_ts, length, n), sums)
        ok = None if calc is None else calc == checksum
    batch = dict(zip(_BATCH_FIELDS, (pid, base_offset, base_ts, origin_ts, length, checksum, ok, n)))
    batch["messages"] = msgs
    return batch, stop


# a batch record's fields as parse_batch_v48 and read_batch_v48 give them (details.batch)
_BATCH_FIELDS = (
    "partition_id", "base_offset", "base_timestamp", "origin_timestamp", "batch_length", "batch_checksum",
    "batch_checksum_ok", "message_count",
)  # fmt: skip


def read_batch_v48(
    buf, pos: int, end: int, count: int | None = None, sums: bool = True
) -> tuple[dict, Messages, int]:
    """parse_batch_v48, its messages as columns: (batch fields, messages, next position). The
    compiled walk (_batch.c) reads them; a batch it does not take goes to parse_batch_v48,
    which says what is wrong (or reads what the walk leaves to it). `sums` false leaves the
    batch checksum and the messages' out (their verdicts stay): PayloadPolicy.checksums_kept."""
    got = _batch.walk(buf, pos, end, -1 if count is None else count, _XXH3, sums)
    if got is None:
        batch, nxt = parse_batch_v48(buf, pos, end, count)
        if not sums:
            del batch["batch_checksum"]
        return batch, Messages.of(batch.pop("messages"), sums), nxt
    pid, base_offset, base_ts, origin_ts, length, checksum, n, ok, nxt, *cols, hidx, hblobs = got
    ids, payloads, offsets, oks, ts_ns, details, summaries = cols
    headers = None
    details = arrowcols.binary(details, pa.string())
    if hidx:
        headers = [[]] * len(offsets)  # one empty list for every message without headers
        details = details.to_pylist()
        for i, blob in zip(hidx, hblobs):
            values, start = _blob(blob)
            headers[i] = values
            details[i] = start + details[i]  # the walk wrote what follows the headers
    batch = dict(zip(_BATCH_FIELDS, (pid, base_offset, base_ts, origin_ts, length, checksum, ok, n)))
    if not sums:
        del batch["batch_checksum"]
    ids, payloads = arrowcols.binary(ids, pa.string()), arrowcols.binary(payloads)
    msgs = Messages(ids, payloads, headers, offsets, oks, ts_ns, details, [summaries] if summaries else [])
    return batch, msgs, nxt


def parse_batches_v48(buf, pos: int, end: int, count: int | None, sums: bool = True) -> dict:
    """Batch records back to back from pos to end (a poll reply may carry several); `count`,
    when given, is the total number of messages; `sums` as read_batch_v48 takes it."""
    batches = []
    parts: list[Messages] = []
    total = 0
    while pos < end:
        if len(batches) >= MAX_MESSAGES:
            raise DecodeError("too many batches")
        b, msgs, pos = read_batch_v48(buf, pos, end, None, sums)
        parts.append(msgs)
        total += len(msgs)
        batches.append(b)
    if count is not None and total != count:
        raise DecodeError(f"{total} messages in the batches where the count says {count}")
    oks = [b["batch_checksum_ok"] for b in batches]
    return {
        "batches": batches,
        "batch_checksum_ok": False if False in oks else (True if oks and all(oks) else None),
        "messages": Messages.join(parts),
    }


def looks_like_batch(buf, pos: int, end: int) -> bool:
    """A batch header at pos: its length fits the data and its reserved tail is zero."""
    if end - pos < BATCH_HEADER_V48:
        return False
    length = struct.unpack_from("<Q", buf, pos + 32)[0]
    return BATCH_HEADER_V48 <= length <= end - pos and not any(bytes(buf[pos + 52 : pos + 256]))


def build_batch_v48(
    messages: list[tuple[int, bytes, bytes]],
    origin_timestamp: int,
    partition_id: int = 0,
    base_offset: int = 0,
    base_timestamp: int = 0,
    timestamp_deltas: list[int] | None = None,
    with_checksums: bool = True,
) -> bytes:
    """Serialise one batch (for simulators and tests) from (id, payload, user headers blob)."""
    blob = b""
    sums = []
    for i, (mid, payload, headers) in enumerate(messages):
        tdelta = timestamp_deltas[i] if timestamp_deltas else 0
        rest = mid.to_bytes(16, "little") + struct.pack("<IIIIQ", i, tdelta, len(headers), len(payload), 0)
        rest += payload + headers
        csum = (xxh3_64(rest) or 0) if with_checksums else 0
        sums.append(struct.pack("<Q", csum))
        blob += sums[-1] + rest
    length = BATCH_HEADER_V48 + len(blob)
    fields = (partition_id, base_offset, base_timestamp, origin_timestamp, length, len(messages))
    bsum = (batch_checksum(fields, sums) or 0) if with_checksums else 0
    head = bytearray(BATCH_HEADER_V48)
    _BATCH_META.pack_into(
        head, 0, partition_id, base_offset, base_timestamp, origin_timestamp, length, bsum, len(messages)
    )
    return bytes(head) + blob
