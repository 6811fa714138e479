"""Kafka log segments (`<log dir>/<topic>-<partition>/<base offset>.log`) -> `messages` rows.

A segment's `.log` is a plain sequence of record batches (message format v2) or message sets
(v0/v1), exactly as they travel in Produce/Fetch `records` fields, with absolute offsets: every
batch starts with baseOffset int64 and batchLength int32 (bytes after that field), which is how
the file is walked and cut at batch boundaries. The batch decoding is shared with the wire
decoder (`protocols.kafka.records`).

Companion files next to the log, verified against it as `kafka-dump-log --verify-index-only`
does:
- `.index`: 8-byte entries, relative offset int32 (offset - segment base offset) and position
  int32 (byte position of a batch in the log); the offset is the batch's last offset.
  Preallocated files end in zero entries.
- `.timeindex`: 12-byte entries, timestamp int64 and relative offset int32: the largest
  timestamp seen so far and the offset it belongs to.

Rows: one `messages` row per record (direction stored, source segment); transaction markers
(control batches) as `acks` rows (kafka_txn_marker); problems as `commands` rows with command
LogSegment / OffsetIndex / TimeIndex and decode_status checksum_mismatch, truncated (a torn
tail), malformed, decompression_failed or index_mismatch.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator

from .. import base
from . import records as rec

Row = tuple[str, dict]
INDEX_MISMATCH = base.INDEX_MISMATCH
# <topic>-<partition>, and the same with .<32 hex digits>-<state> a broker gives a partition
# directory it moves between log directories (future: the new replica, live data) or is
# deleting (delete; stray: one KRaft found it should not hold)
_DIR = re.compile(r"^(.+)-(\d+)(?:\.[0-9a-f]{32}-(future|delete|stray))?$")
DELETING = ("delete", "stray")
_NAME = re.compile(r"^(\d{1,20})\.log$")
_HEAD = struct.Struct(">qiib")  # baseOffset, length, (epoch or crc), magic: the first 17 bytes
MAX_BATCH = 1 << 30  # a batch header claiming more is not a batch


def topic_partition(path: str) -> tuple[str, int] | None:
    """(topic, partition) from the segment's directory name `<topic>-<partition>` (or a moving
    replica's `<topic>-<partition>.<id>-future`); None for a directory being deleted."""
    m = _DIR.match(os.path.basename(os.path.dirname(os.path.abspath(path))))
    if not m or m.group(3) in DELETING:
        return None
    return m.group(1), int(m.group(2))


def identity(path: str) -> str:
    """What names a segment's rows besides its bytes (capture.files.combine_id's context): its
    topic, partition and file name. A copy of a partition directory (a replica's, a moving one's
    `-future`) is the same input; equal bytes in another partition are not."""
    tp = topic_partition(path)
    return f"{tp[0]}-{tp[1]}/{os.path.basename(path)}" if tp else ""


def passed_over(path: str) -> str | None:
    """Why a segment is passed over, not read and no failure: its partition directory is one the
    broker is deleting (`<topic>-<partition>.<id>-delete` or `-stray`), its data going away."""
    m = _DIR.match(os.path.basename(os.path.dirname(os.path.abspath(path))))
    if m and m.group(3) in DELETING and base_offset_of(path) is not None:
        return f"a segment of a partition directory the broker is deleting (-{m.group(3)}): not read"
    return None


def base_offset_of(path: str) -> int | None:
    m = _NAME.match(os.path.basename(path))
    return int(m.group(1)) if m else None


def _header_ok(head: bytes, file_size: int, pos: int = 0) -> bool:
    if len(head) < 17:
        return False
    base_offset, length, _x, magic = _HEAD.unpack_from(head, 0)
    if magic not in (0, 1, 2) or base_offset < 0:
        return False
    min_len = 49 if magic == 2 else 14
    return min_len <= length <= MAX_BATCH and pos + 12 + length <= file_size + (1 << 20)


RESYNC_WINDOW = 1 << 20  # bytes searched at a time for the next batch after damage


def _crc_holds(batch: bytes) -> bool:
    """Whether `batch` (a whole v2 batch) has the CRC-32C it carries: at byte 17, of the bytes
    from its attributes (byte 21) on."""
    from crc32c import crc32c

    return len(batch) >= 21 and crc32c(memoryview(batch)[21:]) == struct.unpack_from(">I", batch, 17)[0]


def _zeros_to(f, pos: int, end: int) -> bool:
    """Whether bytes [pos, end) of `f` are all zero: the space a broker with log.preallocate
    reserved for the active segment, not yet written."""
    f.seek(pos)
    while pos < end:
        chunk = f.read(min(RESYNC_WINDOW, end - pos))
        if not chunk or chunk.strip(b"\0"):
            return not chunk
        pos += len(chunk)
    return True


def next_batch(f, pos: int, end: int, size: int, limit: int = MAX_BATCH) -> int | None:
    """The position after `pos` and before `end` of the first v2 batch whose header holds up and
    whose CRC-32C covers its bytes (what follows damage: a length field hit, bytes lost or
    inserted), or None. Only v2 batches (the format since Kafka 0.11) can be told this surely;
    batches longer than `limit` are not checked."""
    at = pos + 1
    while at < end:
        f.seek(at)
        buf = f.read(min(RESYNC_WINDOW, end - at) + 16)
        j = buf.find(b"\x02", 16)  # the magic byte, 16 bytes into a batch
        while 0 <= j and j - 16 < RESYNC_WINDOW:
            p = at + j - 16
            if p >= end:
                return None
            head = buf[j - 16 : j + 1] if j + 1 <= len(buf) else b""
            if len(head) < 17:
                f.seek(p)
                head = f.read(17)
            if _header_ok(head, size, p):
                total = 12 + struct.unpack_from(">i", head, 8)[0]
                if total <= limit:
                    f.seek(p)
                    if _crc_holds(f.read(total)):
                        return p
            j = buf.find(b"\x02", j + 1)
        at += RESYNC_WINDOW
    return None


def matches(path: str) -> bool:
    """A `.log` in a `<topic>-<partition>` directory whose first batch header is a Kafka one
    (and, when the first batch is small enough to read, whose checksum holds, or whose name is a
    segment's, its base offset: then a first batch damaged is the reader's to report, and the
    batches after it are read)."""
    if not path.endswith(".log") or topic_partition(path) is None:
        return False
    size = os.path.getsize(path)
    if size < 26:
        return False
    with open(path, "rb") as f:
        head = f.read(64 * 1024)
        if not _header_ok(head, size):
            # named as a segment (its base offset) and a batch follows the damage: the reader's
            return base_offset_of(path) is not None and next_batch(f, 0, min(size, 1 << 20), size) is not None
    length = struct.unpack_from(">i", head, 8)[0]
    if 12 + length <= len(head):
        rs = rec.read_record_set(head[: 12 + length], cap=1 << 20)
        return bool(rs.batches) and (rs.batches[0].crc_ok or base_offset_of(path) is not None)
    return True


def near_miss(path: str) -> str | None:
    """Why a file that is a segment by its name and first header is not read as one: its
    directory is not `<topic>-<partition>` (a segment copied out of its log directory)."""
    if base_offset_of(path) is None or topic_partition(path) is not None:
        return None
    with open(path, "rb") as f:
        head = f.read(17)
    if not _header_ok(head, os.path.getsize(path)):
        return None
    where = os.path.basename(os.path.dirname(os.path.abspath(path)))
    return (
        f"a Kafka log segment, read only in its <topic>-<partition> directory (the topic and "
        f"partition of its rows): {where!r} is not one"
    )


def plan(path: str, split_size: int) -> list[tuple[int, int]]:
    """Byte ranges [start, end) cut at batch boundaries, each about `split_size` bytes. The walk
    reads only batch headers (baseOffset, batchLength); from the first header that does not hold
    up, the rest of the file goes to the last range (its reader reports the damage)."""
    size = os.path.getsize(path)
    out: list[tuple[int, int]] = []
    start = pos = 0
    with open(path, "rb") as f:
        while pos < size:
            f.seek(pos)
            head = f.read(17)
            if not _header_ok(head, size, pos):
                break
            nxt = pos + 12 + struct.unpack_from(">i", head, 8)[0]
            if nxt > size:
                break
            if pos - start >= split_size:  # a cut where a header holds (a damaged length walks into a batch)
                out.append((start, pos))
                start = pos
            pos = nxt
    if start < size or not out:
        out.append((start, size))
    return out


def read(path: str, start: int, end: int, ctx: base.Context) -> Iterator[Row]:
    """Rows for the batches that start in [start, end); the split at 0 also verifies the indexes."""
    tp = topic_partition(path)
    topic, partition = tp if tp else (None, None)
    try:
        mtime_ns = os.stat(path).st_mtime_ns
    except OSError:
        mtime_ns = 0
    size = os.path.getsize(path)
    positions: list[tuple[int, rec.Batch]] = []
    with open(path, "rb") as f:
        pos = start
        while pos < end:
            f.seek(pos)
            head = f.read(17)
            if len(head) < 17 or not _header_ok(head, size, pos):
                if head and not head.strip(b"\0") and _zeros_to(f, pos, min(end, size)):
                    break  # preallocated space (log.preallocate): the log ends here
                nxt = next_batch(f, pos, end, size, ctx.max_frame_bytes) if len(head) == 17 else None
                status = base.TRUNCATED if len(head) < 17 else base.MALFORMED
                why = f"no batch header at byte {pos}" + (" (torn tail)" if status == base.TRUNCATED else "")
                if nxt is not None:
                    why += f": {nxt - pos} bytes skipped to the next batch, at byte {nxt}"
                yield _problem(
                    "LogSegment", pos, (nxt or min(end, size)) - pos, status, why, mtime_ns, head, ctx
                )
                if nxt is None:
                    break
                pos = nxt
                continue
            length = struct.unpack_from(">i", head, 8)[0]
            total = 12 + length
            if total > ctx.max_frame_bytes:
                yield _problem(
                    "LogSegment",
                    pos,
                    total,
                    base.OVERSIZE,
                    f"batch of {total} bytes exceeds the limit of {ctx.max_frame_bytes}",
                    mtime_ns,
                    head,
                    ctx,
                )
                pos += total
                continue
            f.seek(pos)
            data = f.read(total)
            if len(data) < total:
                nxt = next_batch(f, pos, end, size, ctx.max_frame_bytes)
                if nxt is None:
                    yield _problem(
                        "LogSegment",
                        pos,
                        len(data),
                        base.TRUNCATED,
                        f"torn tail: batch at byte {pos} needs {total} bytes, {len(data)} present",
                        mtime_ns,
                        data,
                        ctx,
                    )
                    break
                # not the tail: a batch follows, so this length was damaged
                why = f"batch at byte {pos} claims {total} bytes, past the file's end; {nxt - pos} bytes skipped to the next batch, at byte {nxt}"
                yield _problem("LogSegment", pos, nxt - pos, base.MALFORMED, why, mtime_ns, data[:17], ctx)
                pos = nxt
                continue
            rs = rec.read_record_set(data, ctx.max_decompressed_bytes, sums=ctx.payload.checksums_kept)
            if not rs.batches:
                yield _problem(
                    "LogSegment", pos, total, rs.status, rs.error or "unreadable batch", mtime_ns, data, ctx
                )
                nxt = next_batch(f, pos, pos + total, size, ctx.max_frame_bytes)
                pos = nxt if nxt is not None else pos + total
                continue
            b = rs.batches[0]
            positions.append((pos, b))
            yield from _batch_rows(b, pos, topic, partition, mtime_ns, data, ctx)
            # a checksum that fails may be a length that is wrong: a batch starting inside the
            # bytes it claimed is read, not skipped
            nxt = (
                None if b.crc_ok is not False else next_batch(f, pos, pos + total, size, ctx.max_frame_bytes)
            )
            pos = nxt if nxt is not None else pos + total
    if start == 0:
        yield from verify_indexes(path, ctx, mtime_ns)


def _batch_rows(b: rec.Batch, pos: int, topic, partition, mtime_ns: int, data: bytes, ctx) -> Iterator[Row]:
    ts_batch = (b.max_timestamp or 0) * 1_000_000 if (b.max_timestamp or 0) > 0 else mtime_ns
    if b.status != base.OK:
        yield _problem(
            "LogSegment",
            pos,
            b.size,
            b.status,
            f"batch at byte {pos} (offset {b.base_offset}): {b.error}",
            ts_batch,
            data,
            ctx,
            details=b.summary(),
        )
    if b.control:
        yield (
            "acks",
            {
                "ts_ns": ts_batch,
                "ack_type": "kafka_txn_marker",
                "topic": topic,
                "partition": partition,
                "offset": b.base_offset,
                "message_id": f"{topic}-{partition}@{b.base_offset}",
                "producer_id": b.producer_id,
                "details": base.to_json(
                    {
                        "control_type": b.control_type,
                        "producer_epoch": b.producer_epoch,
                        "coordinator_epoch": b.coordinator_epoch,
                        "source": "segment",
                    }
                ),
            },
        )
        return
    pol = ctx.payload
    # a v2 batch of a LogAppendTime topic (attributes bit 3): its records' time is the batch's
    # MaxTimestamp, the broker's append time (their own deltas keep the producer's CreateTime)
    append_ms = b.max_timestamp if b.magic >= 2 and b.timestamp_type == "log_append" else None
    for r in b.records:
        r_ms = append_ms if append_ms is not None else r.timestamp
        ts = r_ms * 1_000_000 if r_ms is not None and r_ms >= 0 else None
        row = {
            "ts_ns": ts if ts is not None else ts_batch,
            "direction": "stored",
            "source": "segment",
            "topic": topic,
            "partition": partition,
            "offset": r.offset,
            "message_id": f"{topic}-{partition}@{r.offset}",
            "key": pol.key(r.key),
            "headers": [{"key": k, "value": v} for k, v in r.headers],
            "message_ts_ns": ts,
            "producer_id": b.producer_id if b.magic >= 2 else None,
            "producer_epoch": b.producer_epoch if b.magic >= 2 else None,
            "sequence": (
                rec.sequence_of(b.base_sequence, r.delta)
                if b.magic >= 2 and (b.base_sequence or 0) >= 0
                else None
            ),
            "compression": b.codec,
            "checksum_ok": b.crc_ok if r.crc_ok is None else r.crc_ok,
            "decode_status": b.status,
            "decode_error": b.error,
            "details": base.to_json(
                {
                    "file_position": pos,
                    "batch_base_offset": b.base_offset,
                    "magic": b.magic,
                    "transactional": b.transactional,
                    "timestamp_type": b.timestamp_type,
                }
            ),
        }
        row.update(pol.value(r.value))
        yield ("messages", row)


def _problem(command, pos, size, status, error, ts_ns, raw, ctx, details=None) -> Row:
    return (
        "commands",
        {
            "ts_ns": ts_ns,
            "command": command,
            "stream_offset": pos,
            "size": size,
            "decode_status": status,
            "decode_error": error,
            # segment files store messages, never an auth exchange: payload policy only
            "raw": None if raw is None else ctx.raw(raw, typed=True),
            "details": None if details is None else base.to_json(details),
        },
    )


# ---------------------------------------------------------------------------------------------
# index verification


def _batch_at(f, pos: int, size: int) -> tuple[int, int, int | None] | None:
    """(base offset, last offset, max timestamp) of the batch starting at `pos`, from its header."""
    if pos < 0 or pos + 17 > size:
        return None
    f.seek(pos)
    head = f.read(61)
    if not _header_ok(head, size, pos):
        return None
    base_offset, length, _x, magic = _HEAD.unpack_from(head, 0)
    if magic == 2 and len(head) >= 61:
        last_delta, _bt, max_ts = struct.unpack_from(">iqq", head, 23)
        return base_offset, base_offset + last_delta, max_ts
    # v0/v1: a message (or a compressed wrapper whose offset is its last inner offset)
    return base_offset, base_offset, None


def _all_batches(f, size: int) -> list[tuple[int, int, int, int | None]]:
    """(position, base offset, last offset, max timestamp) for every batch in the log, walked as
    the reader walks it: past damage to the next batch (next_batch), and into a v2 batch whose
    CRC-32C fails where a batch starts inside the bytes it claims (its length damaged)."""
    out = []
    pos = 0
    while pos < size:
        b = _batch_at(f, pos, size)
        f.seek(pos)
        head = f.read(17)
        total = 12 + struct.unpack_from(">i", head, 8)[0] if b is not None else 0
        if b is None or pos + total > size:
            nxt = next_batch(f, pos, size, size)
            if nxt is None:
                break
            pos = nxt
            continue
        out.append((pos, *b))
        nxt = pos + total
        # where no header follows, the length may be damaged: a batch whose checksum fails may
        # hold the next one inside the bytes it claims (a sound log never gets here)
        if nxt < size and head[16] == 2 and _batch_at(f, nxt, size) is None:
            f.seek(pos)
            if not _crc_holds(f.read(total)):
                nxt = next_batch(f, pos, pos + total, size) or nxt
        pos = nxt
    return out


def _entries(path: str, width: int) -> list[bytes]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return []
    return [data[i : i + width] for i in range(0, len(data) - width + 1, width)]


def verify_indexes(path: str, ctx: base.Context, ts_ns: int) -> Iterator[Row]:
    """Check `.index` and `.timeindex` next to the log against the log's batches."""
    stem = path[: -len(".log")]
    base_off = base_offset_of(path) or 0
    size = os.path.getsize(path)
    index = _entries(stem + ".index", 8)
    tindex = _entries(stem + ".timeindex", 12)
    if not index and not tindex:
        return
    with open(path, "rb") as f:
        batches = _all_batches(f, size)
    by_pos = {p: (b, last, mts) for p, b, last, mts in batches}

    def containing(offset: int):
        for _p, b, last, mts in batches:
            if b <= offset <= last:
                return b, last, mts
        return None

    prev_off = prev_pos = -1
    for i, e in enumerate(index):
        rel, position = struct.unpack(">ii", e)
        if rel == 0 and position == 0 and i > 0:
            break  # preallocated tail
        offset = base_off + rel
        problem = None
        if i > 0 and (offset <= prev_off or position <= prev_pos):
            problem = f"entry {i} (offset {offset}, position {position}) is not after the previous entry"
        elif position not in by_pos:
            problem = f"entry {i}: no batch starts at position {position} (indexed offset {offset})"
        else:
            # Kafka indexes a batch by its last offset (kafka-dump-log compares the same)
            b, last, _m = by_pos[position]
            if offset != last:
                problem = (
                    f"entry {i}: indexed offset {offset}, but the batch at position {position} ends at {last}"
                )
        if problem:
            yield _problem("OffsetIndex", i * 8, 8, INDEX_MISMATCH, problem, ts_ns, e, ctx)
        prev_off, prev_pos = offset, position

    prev_ts = None
    for i, e in enumerate(tindex):
        ts, rel = struct.unpack(">qi", e)
        if ts == 0 and rel == 0 and i > 0:
            break
        offset = base_off + rel
        problem = None
        found = containing(offset)
        if prev_ts is not None and ts < prev_ts:
            problem = f"entry {i}: timestamp {ts} is before the previous entry's {prev_ts}"
        elif found is None:
            problem = f"entry {i}: offset {offset} is not in the log"
        elif found[2] is not None and found[2] != ts:
            problem = (
                f"entry {i}: timestamp {ts} for offset {offset}, but its batch's max timestamp is {found[2]}"
            )
        if problem:
            yield _problem("TimeIndex", i * 12, 12, INDEX_MISMATCH, problem, ts_ns, e, ctx)
        prev_ts = ts
