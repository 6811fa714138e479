"""Iggy partition segments (`.log`, with `.index` since 0.5) -> `messages` rows (direction stored).

On-disk layouts (confirmed against apache/iggy's server sources):

- 0.5 and later: the `.log` is a plain sequence of messages, each a fixed header (64 bytes since the
  reserved word was added, 56 before; see protocols/iggy/messages.py) then payload then user
  headers; the checksum is XXH3-64 over the message after the checksum field. The `.index` holds one
  16-byte entry per message: relative offset u32, position u32 (byte position of the message in the
  log: the end of the message in current servers, its start in some builds; both are accepted),
  timestamp u64.
- 0.4 (batch-and-message): the `.log` is a sequence of batches: base_offset u64, length u32 (bytes
  of messages), last_offset_delta u32, max_timestamp u64, then messages, each: length u32 (bytes
  after this field), offset u64, state u8, timestamp u64, id u128, checksum u32 (CRC32 of the
  payload), headers length u32, headers, payload.

- VSR generation (apache-iggy 0.9 / server-ng): the `.log` is a sequence of message batch
  records, the same bytes a SEND_MESSAGES body and a POLL_MESSAGES reply carry ("the replicated
  prepare, the persisted segment record, and the poll reply all share" one layout, apache/iggy
  core/binary_protocol/src/batch.rs): a 256-byte batch header (partition_id, base_offset,
  base_timestamp, origin_timestamp, batch_length, batch_checksum u64 each, message_count u32)
  then 48-byte-header messages. Both checksums are verified. After a batch that does not read
  (a length or a frame damaged, bytes inserted), the reader goes on at the next sound batch
  that follows the last one read (`_next_batch`). The index files of this generation are not
  documented in the sources read: they are not checked for this layout.

Directory layout: .../streams/<stream>/topics/<topic>/partitions/<partition>/<start offset>.log;
`topic` is "<stream>/<topic>" (as on the wire, where it is "<stream id or name>/<topic id or name>").
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections.abc import Iterator
from typing import NamedTuple

from .. import base
from .codes import MESSAGE_STATES
from .messages import BATCH_HEADER_V48, V48, checksum_of, looks_like_batch, parse_batch_v48
from .wire import DecodeError, user_headers

Row = tuple[str, dict]
NEW64, NEW56, LEGACY, BATCHES = "v64", "v56", "legacy", "v48_batch"
BATCH_HEADER = 24
INDEX_ENTRY = 16
_PATH = re.compile(r"streams[/\\]([^/\\]+)[/\\]topics[/\\]([^/\\]+)[/\\]partitions[/\\]([^/\\]+)")


def _read(path: str, start: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(n)


def _head_of(path: str) -> tuple[bytes, int | None]:
    """The first MiB of a segment file, and its base offset where its name and place say it is
    a segment (`.../partitions/<n>/<offset>.log`)."""
    name = os.path.basename(path)[:-4]
    named = name.isdigit() and _PATH.search(os.path.abspath(path)) is not None
    return _read(path, 0, 1 << 20), int(name) if named else None


def detect(head: bytes, base_offset: int | None = None) -> str | None:
    """The layout of a segment from its first bytes: the first message (or batch) must check
    out by its checksum, or, when that message is damaged, by the structure around it: the
    next message's offset following it, or, for a file named as a segment (its `base_offset`),
    the message's offset being that one and its sizes the whole file (a segment of one
    message), or a sound message or VSR batch following it."""
    if looks_like_batch(head, 0, len(head)):
        try:
            parse_batch_v48(head, 0, len(head))  # counts, reserved bytes, frames tiling the batch
            return BATCHES
        except DecodeError:
            pass
    for fmt, hs in ((NEW64, 64), (NEW56, 56)):
        if len(head) < hs:
            continue
        hlen, plen = struct.unpack_from("<II", head, 48)
        size = hs + plen + hlen
        if hs == 64 and struct.unpack_from("<Q", head, 56)[0] != 0:
            continue
        if size > len(head):
            continue
        (checksum,) = struct.unpack_from("<Q", head, 0)
        if checksum and checksum_of(head[:size]) == checksum:
            return fmt
        offset = struct.unpack_from("<Q", head, 24)[0]
        if offset == base_offset and size == len(head) < 1 << 20:
            return fmt
        if len(head) >= size + 32 and struct.unpack_from("<Q", head, size + 24)[0] == offset + 1:
            nh, np_ = struct.unpack_from("<II", head, size + 48) if len(head) >= size + 56 else (0, 0)
            if size + hs + nh + np_ <= len(head) or len(head) >= 1 << 20:
                return fmt
    if base_offset is not None:  # named as a segment: a damaged first message, a good one after it
        for fmt, hs in ((NEW64, 64), (NEW56, 56)):
            if _next_message(head, 0, hs, base_offset - 1) is not None:
                return fmt
        if _next_batch(head, 0, _Last(base_offset - 1, 0)) is not None:  # or a damaged first batch
            return BATCHES
    if len(head) >= BATCH_HEADER + 4 + 45:
        base_offset, length = struct.unpack_from("<QI", head, 0)
        mlen = struct.unpack_from("<I", head, BATCH_HEADER)[0]
        if 45 <= mlen and mlen + 4 <= length and BATCH_HEADER + 4 + mlen <= len(head):
            m = head[BATCH_HEADER + 4 : BATCH_HEADER + 4 + mlen]
            offset, state = struct.unpack_from("<QB", m, 0)
            checksum, hl = struct.unpack_from("<II", m, 33)
            if 41 + hl <= mlen and (
                zlib.crc32(m[41 + hl :]) == checksum or (offset == base_offset and state in MESSAGE_STATES)
            ):
                return LEGACY
    return None


def matches(path: str) -> bool:
    """An Iggy segment file, or a directory holding some."""
    try:
        if os.path.isdir(path):
            return any(matches(os.path.join(path, n)) for n in sorted(os.listdir(path)) if n.endswith(".log"))
        if not path.endswith(".log"):
            return False
        return detect(*_head_of(path)) is not None
    except OSError:
        return False


def _unit_size(head: bytes, fmt: str) -> int | None:
    """Size of the message (or batch) whose header is `head`."""
    if fmt == LEGACY:
        if len(head) < BATCH_HEADER:
            return None
        return BATCH_HEADER + struct.unpack_from("<I", head, 8)[0]
    if fmt == BATCHES:
        return struct.unpack_from("<Q", head, 32)[0] if len(head) >= 40 else None
    hs = 64 if fmt == NEW64 else 56
    if len(head) < hs:
        return None
    hlen, plen = struct.unpack_from("<II", head, 48)
    return hs + plen + hlen


def plan(path: str, split_size: int) -> list[tuple[int, int]]:
    """Byte ranges of about `split_size`, cut at message (0.5+) or batch (0.4, VSR) boundaries:
    for 0.5+ and VSR only where the message or batch there is sound (a damaged length walks into
    another unit's bytes; one over RESYNC_SPAN is not read to tell); from the first that is not,
    the rest is the last range, whose reader resyncs past the damage."""
    size = os.path.getsize(path)
    if size == 0:
        return []
    fmt = detect(*_head_of(path))
    if fmt is None:
        return [(0, size)]
    splits = []
    start = pos = 0
    with open(path, "rb") as f:
        while pos < size:
            f.seek(pos)
            n = _unit_size(f.read(64), fmt)
            if n is None or n <= 0 or pos + n > size:
                break  # torn tail: it stays in the last split and is reported there
            pos += n
            if pos - start >= split_size:
                # a cut at a message whose checksum holds: a damaged length walks into another
                # message's bytes
                if fmt in (NEW64, NEW56) and not _message_holds(f, pos, 64 if fmt == NEW64 else 56):
                    break
                if fmt == BATCHES and not _batch_holds(f, pos, size):
                    break
                splits.append((start, pos))
                start = pos
    if start < size:
        splits.append((start, size))
    return splits


def _location(path: str) -> tuple[str | None, int | None]:
    m = _PATH.search(os.path.abspath(path))
    if not m:
        return None, None
    part = int(m.group(3)) if m.group(3).isdigit() else None
    return f"{m.group(1)}/{m.group(2)}", part


def identity(path: str) -> str:
    """What names a segment's rows besides its bytes (capture.files.combine_id's context): its
    stream, topic and partition directories and file name; none for a file outside them."""
    m = _PATH.search(os.path.abspath(path))
    return f"{m.group(1)}/{m.group(2)}/{m.group(3)}/{os.path.basename(path)}" if m else ""


def _problem(
    path: str, file_offset: int, size: int, status: str, err: str, ts_ns: int, raw: bytes | None = None
) -> Row:
    row = {
        "ts_ns": ts_ns,
        "command": "SEGMENT",
        "size": size,
        "stream_offset": file_offset,
        "decode_status": status,
        "decode_error": err,
        "details": base.to_json({"path": path, "file_offset": file_offset}),
    }
    if raw is not None:
        row["raw"] = raw
    return ("commands", row)


def read(path: str, start: int, end: int, ctx: base.Context | None = None) -> Iterator[Row]:
    """Rows for the messages whose first byte lies in [start, end) (plan's ranges)."""
    ctx = ctx or base.Context()
    try:
        st = os.stat(path)
        mtime_ns = st.st_mtime_ns
        fmt = detect(*_head_of(path))
        data = _read(path, start, end - start)
    except OSError as e:
        yield _problem(path, start, 0, base.MALFORMED, f"cannot read: {e}", 0)
        return
    if fmt is None:
        yield _problem(
            path,
            start,
            len(data),
            base.MALFORMED,
            "not an Iggy segment",
            mtime_ns,
            raw=ctx.raw(data, typed=True),
        )
        return
    topic, partition = _location(path)
    seg = {
        "path": path,
        "topic": topic,
        "partition": partition,
        "ctx": ctx,
        "mtime": mtime_ns,
        "size": st.st_size,
    }
    if fmt == LEGACY:
        yield from _read_legacy(data, start, seg)
    elif fmt == BATCHES:
        yield from _read_batches(data, start, seg)
    else:
        yield from _read_new(data, start, 64 if fmt == NEW64 else 56, seg)


def _msg_row(seg: dict, m: dict, file_offset: int) -> Row:
    ctx = seg["ctx"]
    ts = m["timestamp"] * 1000 if m.get("timestamp") else seg["mtime"]
    row = {
        "ts_ns": ts,
        "direction": "stored",
        "source": "segment",
        "topic": seg["topic"],
        "partition": seg["partition"],
        "offset": m["offset"],
        "message_id": str(m["id"]),
        "headers": [{"key": h["key"], "value": h["value"]} for h in m["headers"]],
        "checksum_ok": m["checksum_ok"],
        "message_ts_ns": ts,
        "decode_status": base.CHECKSUM_MISMATCH if m["checksum_ok"] is False else base.OK,
    }
    if m["checksum_ok"] is False:
        row["decode_error"] = "message checksum does not match"
    row.update(ctx.payload.value(m["payload"]))
    det = {"file_offset": file_offset}
    if ctx.payload.checksums_kept:
        det["checksum"] = m["checksum"]
    det["headers"] = [{"key": h["key"], "kind": h["kind"], "value": h["typed"]} for h in m["headers"]]
    for k in ("origin_timestamp", "state", "batch_base_offset", "batch_checksum_ok"):
        if m.get(k) is not None:
            det[k] = m[k]
    row["details"] = base.to_json(det)
    return ("messages", row)


def _index(path: str) -> str | None:
    idx = path[:-4] + ".index"
    return idx if os.path.exists(idx) else None


RESYNC_OFFSETS = 64  # after damage, the next message is looked for among this many offsets
RESYNC_SPAN = 64 << 20  # and within this many bytes of it


def _valid_at(data: bytes, q: int, hs: int) -> int | None:
    """The size of a 0.5+ message at `q` whose checksum holds, or None."""
    if q < 0 or len(data) - q < hs:
        return None
    hlen, plen = struct.unpack_from("<II", data, q + 48)
    size = hs + plen + hlen
    if q + size > len(data):
        return None
    return size if checksum_of(data[q : q + size]) == struct.unpack_from("<Q", data, q)[0] else None


def _message_holds(f, pos: int, hs: int) -> bool:
    """Whether a 0.5+ message whose checksum holds starts at `pos` of file `f`."""
    f.seek(pos)
    head = f.read(hs)
    if len(head) < hs:
        return False
    hlen, plen = struct.unpack_from("<II", head, 48)
    if hs + plen + hlen > RESYNC_SPAN:  # no message is this large: a damaged length
        return False
    f.seek(pos)
    return _valid_at(f.read(hs + plen + hlen), 0, hs) is not None


def _next_message(data: bytes, pos: int, hs: int, after: int) -> int | None:
    """The position past `pos` of the first message whose checksum holds and whose offset is
    among the RESYNC_OFFSETS after `after` (the last offset read, or the one before the segment's
    first), within RESYNC_SPAN bytes: what follows damage (bytes lost or inserted, a length field hit). Found by its
    offset field (u64 at byte 24), then checked whole."""
    for k in range(1, RESYNC_OFFSETS + 1):
        if not 0 <= after + k < 1 << 64:  # a u64 on disk
            continue
        needle = (after + k).to_bytes(8, "little")
        stop = pos + RESYNC_SPAN
        j = data.find(needle, pos + 1 + 24, stop)
        while j >= 0:
            if _valid_at(data, j - 24, hs) is not None:
                return j - 24
            j = data.find(needle, j + 1, stop)
    return None


def _zeros_to_end(data: bytes, pos: int) -> bool:
    """Whether `data` holds only zeros from `pos`: space reserved past the last message or batch
    (not messages, not damage)."""
    return _NONZERO.search(data, pos) is None


def _skipped(path: str, fo: int, n: int, at: int, what: str, ts_ns: int) -> Row:
    """The malformed row of `n` damaged bytes at file offset `fo`, passed over to the next sound
    message or batch, at file offset `at`."""
    return _problem(
        path, fo, n, base.MALFORMED, f"{what}: {n} bytes skipped to the next one, at byte {at}", ts_ns
    )


# The VSR batch header (256 bytes; the whole layout in messages.py, BATCH_HEADER_V48): the fields
# a resync checks. partition_id u64 @0, base_offset u64 @8, batch_length u64 @32 (header
# included), message_count u32 @48, reserved @52..256 (zero).
_BATCH_IDS = struct.Struct("<QQ")  # partition_id, base_offset
B_LENGTH = 32
B_COUNT = 48
B_RESERVED = 52
_RESERVED = bytes(BATCH_HEADER_V48 - B_RESERVED)  # a header's zero tail: what a resync looks for
_NONZERO = re.compile(rb"[^\x00]")


class _Last(NamedTuple):
    """What the next VSR batch follows: the last offset read (None: not known), the position
    where the bytes after the last sound batch begin, and its partition id (None: not known)."""

    offset: int | None
    end: int
    partition: int | None = None


def _batch_head(head: bytes, room: int) -> tuple[int, int, int, int] | None:
    """(partition_id, base_offset, batch_length, message_count) of the VSR batch header `head`
    (its first 256 bytes) when it holds: its reserved tail zero, a message or more, its length
    room for their frame headers and within `room` (the bytes from it to the end)."""
    if len(head) < BATCH_HEADER_V48:
        return None
    pid, base_offset = _BATCH_IDS.unpack_from(head, 0)
    (length,) = struct.unpack_from("<Q", head, B_LENGTH)
    (count,) = struct.unpack_from("<I", head, B_COUNT)
    if count < 1 or not BATCH_HEADER_V48 + V48 * count <= length <= room:
        return None
    return (pid, base_offset, length, count) if head[B_RESERVED:BATCH_HEADER_V48] == _RESERVED else None


def _sound_batch(data: bytes, p: int) -> dict | None:
    """The VSR batch at `p` when it is sound: its header holds, its frames tile it and are as
    many as it says, and its batch checksum, where it has one, holds."""
    h = _batch_head(data[p : p + BATCH_HEADER_V48], len(data) - p)
    if h is None:
        return None
    try:
        batch, _ = parse_batch_v48(data, p, p + h[2])
    except DecodeError:
        return None
    return batch if batch["batch_checksum_ok"] is not False else None


def _batch_holds(f, pos: int, size: int) -> bool:
    """Whether a sound VSR batch starts at `pos` of file `f` (of `size` bytes): where plan may cut."""
    f.seek(pos)
    h = _batch_head(f.read(BATCH_HEADER_V48), size - pos)
    if h is None or h[2] > RESYNC_SPAN:  # a batch this large is not read whole here
        return False
    f.seek(pos)
    return _sound_batch(f.read(h[2]), 0) is not None


def _next_batch(data: bytes, pos: int, last: _Last, span: int = RESYNC_SPAN) -> int | None:
    """The position past `pos`, within `span` bytes, of the first sound VSR batch that follows
    `last`: of its partition, its base offset past the last offset read by no more than the
    messages the bytes between could hold (a frame is 48 bytes at least), itself no longer than
    `span` (its whole bytes are checked): what follows damage (a length field hit, bytes lost or
    inserted). Found by its header's zero tail: a run of 204 zeros or more starts just after the
    message count's last nonzero byte (a batch has a message), so each run gives at most 4
    places for a header and is passed once: the search is linear in the bytes."""
    stop = min(len(data), pos + span + BATCH_HEADER_V48)
    at = pos + 1
    while (j := data.find(_RESERVED, at, stop)) >= 0:
        for p in range(max(j - B_RESERVED, pos + 1), j - B_COUNT):  # count's last nonzero byte at j-1
            h = _batch_head(data[p : p + BATCH_HEADER_V48], min(len(data) - p, span))
            if h is None or (last.partition is not None and h[0] != last.partition):
                continue
            if last.offset is not None and not 0 < h[1] - last.offset <= 1 + (p - last.end) // V48:
                continue
            if _sound_batch(data, p) is not None:
                return p
        nonzero = _NONZERO.search(data, j + len(_RESERVED), stop)
        if nonzero is None:
            return None
        at = nonzero.start()
    return None


def _read_new(data: bytes, start: int, hs: int, seg: dict) -> Iterator[Row]:
    path = seg["path"]
    pos = 0
    found: list[tuple[int, int, int, int]] = []  # (offset, start pos, end pos, timestamp)
    last_ts = seg["mtime"]
    name = os.path.basename(path)[:-4]
    # the offset before the next message's: the segment's first less one, known at its start
    last_offset = int(name) - 1 if name.isdigit() and start == 0 else None
    while pos < len(data):
        fo = start + pos
        if len(data) - pos < hs:
            yield _problem(path, fo, len(data) - pos, base.TRUNCATED, "torn message header", last_ts)
            break
        zeros = not data[pos : pos + hs].strip(b"\0")  # zeros are no message header
        if zeros and _zeros_to_end(data, pos):
            break  # zeros to the end: space reserved, not messages
        hlen, plen = struct.unpack_from("<II", data, pos + 48)
        size = hs + plen + hlen
        ok = _valid_at(data, pos, hs) is not None
        if not ok and zeros:
            nxt = _next_message(data, pos, hs, last_offset) if last_offset is not None else None
            end = nxt if nxt is not None else len(data)
            yield _problem(path, fo, end - pos, base.MALFORMED, f"no message at byte {fo}: zeros", last_ts)
            if nxt is None:
                break
            pos = nxt
            continue
        if not ok and last_offset is not None:
            nxt = _next_message(data, pos, hs, last_offset)
            if nxt is not None and nxt < pos + size:  # no message here: a length or bytes damaged
                yield _skipped(path, fo, nxt - pos, start + nxt, f"no message at byte {fo}", last_ts)
                pos = nxt
                continue
        if pos + size > len(data):
            yield _problem(
                path,
                fo,
                len(data) - pos,
                base.TRUNCATED,
                f"torn last message ({len(data) - pos} of {size} bytes)",
                last_ts,
            )
            break
        buf = data[pos : pos + size]
        checksum = struct.unpack_from("<Q", buf, 0)[0]
        mid = int.from_bytes(buf[8:24], "little")
        offset, ts, ots = struct.unpack_from("<QQQ", buf, 24)
        try:
            headers = user_headers(buf[hs + plen :]) if hlen else []
        except DecodeError as e:
            yield _problem(path, fo, size, base.MALFORMED, f"user headers: {e}", last_ts)
            headers = []
        m = {
            "id": mid,
            "offset": offset,
            "timestamp": ts,
            "origin_timestamp": ots,
            "checksum": checksum,
            "checksum_ok": ok,
            "headers": headers,
            "payload": buf[hs : hs + plen],
        }
        if ts:
            last_ts = ts * 1000
        if not ok:
            yield _problem(
                path,
                fo,
                size,
                base.CHECKSUM_MISMATCH,
                f"message at offset {offset}: checksum mismatch",
                last_ts,
            )
        yield _msg_row(seg, m, fo)
        found.append((offset, fo, fo + size, ts))
        if ok:
            last_offset = offset
        pos += size
    yield from _verify_index(seg, found, last_ts)


def _verify_index(seg: dict, found: list, ts_ns: int) -> Iterator[Row]:
    """Compare the `.index` entries of the messages read with where they really are."""
    idx = _index(seg["path"])
    if not idx or not found:
        return
    name = os.path.basename(seg["path"])[:-4]
    base_offset = int(name) if name.isdigit() else found[0][0]
    first_rel = found[0][0] - base_offset
    try:
        idx_size = os.path.getsize(idx)
    except OSError:
        return
    # a damaged offset (u64 on disk) can point before the segment or past any file: no entry
    if not 0 <= first_rel * INDEX_ENTRY < idx_size:
        offset, spos, epos, _ = found[0]
        where = "below the segment's base offset" if first_rel < 0 else "beyond the index of base offset"
        msg = f"message offset {offset} is {where} {base_offset}"
        yield _problem(seg["path"], spos, epos - spos, "index_mismatch", msg, ts_ns)
        return
    # each message against the entry of its own offset (a message lost to damage leaves its
    # entry unread, not the entries after it paired with the wrong messages)
    rels = [o - base_offset for o, *_x in found if 0 <= (o - base_offset) * INDEX_ENTRY < idx_size]
    lo = min(rels, default=first_rel)
    try:
        raw = _read(idx, lo * INDEX_ENTRY, (max(rels, default=lo) - lo + 1) * INDEX_ENTRY)
    except OSError:
        return
    for offset, spos, epos, ts in found:
        i = offset - base_offset - lo
        if not (0 <= i and (i + 1) * INDEX_ENTRY <= len(raw)):
            yield _problem(
                seg["path"], spos, epos - spos, "index_mismatch", f"no index entry for offset {offset}", ts_ns
            )
            break
        rel, ipos, its = struct.unpack_from("<IIQ", raw, i * INDEX_ENTRY)
        if rel != offset - base_offset or ipos not in (epos, spos) or (its and ts and its != ts):
            yield _problem(
                seg["path"],
                spos,
                epos - spos,
                "index_mismatch",
                f"index entry ({rel}, {ipos}, {its}) vs message at offset {offset}: "
                f"({offset - base_offset}, {spos}..{epos}, {ts})",
                ts_ns,
            )


def _read_legacy(data: bytes, start: int, seg: dict) -> Iterator[Row]:
    path = seg["path"]
    pos = 0
    last_ts = seg["mtime"]
    while pos < len(data):
        fo = start + pos
        if len(data) - pos < BATCH_HEADER:
            yield _problem(path, fo, len(data) - pos, base.TRUNCATED, "torn batch header", last_ts)
            return
        base_offset, length, last_delta, max_ts = struct.unpack_from("<QIIQ", data, pos)
        bend = pos + BATCH_HEADER + length
        torn = bend > len(data)
        mpos = pos + BATCH_HEADER
        stop = min(bend, len(data))
        while mpos < stop:
            mfo = start + mpos
            if stop - mpos < 4:
                yield _problem(path, mfo, stop - mpos, base.TRUNCATED, "torn message", last_ts)
                break
            mlen = struct.unpack_from("<I", data, mpos)[0]
            if mlen < 45 or mpos + 4 + mlen > stop:
                status = base.TRUNCATED if mpos + 4 + mlen > stop and torn else base.MALFORMED
                yield _problem(
                    path, mfo, stop - mpos, status, f"message of {mlen} bytes does not fit its batch", last_ts
                )
                break
            m = data[mpos + 4 : mpos + 4 + mlen]
            offset, state, ts = struct.unpack_from("<QBQ", m, 0)
            mid = int.from_bytes(m[17:33], "little")
            checksum, hl = struct.unpack_from("<II", m, 33)
            try:
                headers = user_headers(m[41 : 41 + hl]) if hl else []
            except DecodeError as e:
                yield _problem(path, mfo, 4 + mlen, base.MALFORMED, f"headers: {e}", last_ts)
                headers = []
            payload = m[41 + hl :]
            ok = zlib.crc32(payload) == checksum
            if ts:
                last_ts = ts * 1000
            if not ok:
                yield _problem(
                    path,
                    mfo,
                    4 + mlen,
                    base.CHECKSUM_MISMATCH,
                    f"message at offset {offset}: checksum mismatch",
                    last_ts,
                )
            yield _msg_row(
                seg,
                {
                    "id": mid,
                    "offset": offset,
                    "timestamp": ts,
                    "checksum": checksum,
                    "checksum_ok": ok,
                    "headers": headers,
                    "payload": payload,
                    "state": MESSAGE_STATES.get(state, state),
                    "batch_base_offset": base_offset,
                },
                mfo,
            )
            mpos += 4 + mlen
        if torn:
            if mpos >= stop:
                yield _problem(
                    path,
                    fo,
                    len(data) - pos,
                    base.TRUNCATED,
                    f"torn last batch ({len(data) - pos} of {BATCH_HEADER + length})",
                    last_ts,
                )
            return
        pos = bend


def _read_batches(data: bytes, start: int, seg: dict) -> Iterator[Row]:
    """VSR-generation segment: batch records back to back. A batch that does not read (its
    length or a frame damaged, bytes inserted before it) is one malformed row up to the next
    sound batch that follows the last one read (_next_batch), and the read goes on from there;
    zeros to the end are space reserved, not batches."""
    path = seg["path"]
    pos = 0
    last_ts = seg["mtime"]
    name = os.path.basename(path)[:-4]
    # before the first batch, the offset before the segment's first, known at its start
    last = _Last(int(name) - 1 if name.isdigit() and start == 0 else None, 0)
    while pos < len(data):
        fo = start + pos
        left = len(data) - pos
        if _zeros_to_end(data, pos):
            break  # zeros to the end: space reserved, not batches
        try:
            batch, nxt = parse_batch_v48(data, pos, len(data))
        except DecodeError as e:
            length = struct.unpack_from("<Q", data, pos + B_LENGTH)[0] if left >= B_LENGTH + 8 else 0
            # the search reaches past a batch longer than its span whose frames are damaged
            found = _next_batch(data, pos, last, max(RESYNC_SPAN, length if length <= left else 0))
            if found is None and start + len(data) < seg["size"]:
                found = len(data)  # the next split's, which plan cut where a sound batch starts
            if found is not None:
                what = "zeros" if not data[pos : pos + BATCH_HEADER_V48].strip(b"\0") else str(e)
                yield _skipped(
                    path, fo, found - pos, start + found, f"no batch at byte {fo} ({what})", last_ts
                )
                pos = found
                continue
            if left < BATCH_HEADER_V48:
                yield _problem(path, fo, left, base.TRUNCATED, "torn batch header", last_ts)
            elif length > left:
                why = f"torn last batch ({left} of {length} bytes)"
                yield _problem(path, fo, left, base.TRUNCATED, why, last_ts)
            else:
                yield _problem(
                    path, fo, left, base.MALFORMED, f"batch: {e}; no sound batch after it", last_ts
                )
            return
        if batch["base_timestamp"]:
            last_ts = batch["base_timestamp"] * 1000
        if batch["batch_checksum_ok"] is False:
            yield _problem(
                path,
                fo,
                batch["batch_length"],
                base.CHECKSUM_MISMATCH,
                f"batch at offset {batch['base_offset']}: batch checksum mismatch",
                last_ts,
            )
        else:  # its header is to be believed: the next batch follows it
            last = _Last(batch["base_offset"] + batch["message_count"] - 1, nxt, batch["partition_id"])
        mpos = fo + BATCH_HEADER_V48
        for m in batch["messages"]:
            m["batch_base_offset"] = batch["base_offset"]
            m["batch_checksum_ok"] = batch["batch_checksum_ok"]
            if m["checksum_ok"] is False:
                yield _problem(
                    path,
                    mpos,
                    m["size"],
                    base.CHECKSUM_MISMATCH,
                    f"message at offset {m['offset']}: checksum mismatch",
                    last_ts,
                )
            yield _msg_row(seg, m, mpos)
            mpos += m["size"]
        pos = nxt
