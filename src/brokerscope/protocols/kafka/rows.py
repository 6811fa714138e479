"""Rows of the Kafka tables (commands, messages, latencies, acks) built from decoded values.

Pure functions: no conversation state. The caller passes what a row needs (a decoded body or its
summary, a record batch, the request's `Pending`, the topic ids learned on the connection,
timestamps in ns, the payload policy)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ... import native, tables
from .. import base
from ..base import Context, PayloadPolicy, Row
from . import records as rec
from . import schema
from .names import EXTRA_API_NAMES, SECRET_FIELDS, SENSITIVE_CONFIG

if TYPE_CHECKING:
    from .conversation import Pending

_body = native.load(__package__, "_body")  # compiled from _body.c: clean, the details copy

# KIP-932 AcknowledgeTypes ("0:Gap,1:Accept,2:Release,3:Reject,4:Renew" in the request specs);
# a gap marks an offset without a record, not an acknowledgement
SHARE_ACK_TYPES = {1: "accept", 2: "release", 3: "reject", 4: "renew"}
MAX_SHARE_ACK_ROWS = 100_000  # per request; beyond, one acks row per acknowledged range


def api_name(key: int) -> str | None:
    return schema.api_name(key) or EXTRA_API_NAMES.get(key)


# -- commands -------------------------------------------------------------------------------------
def no_plan(key: int, version: int, name: str | None) -> dict:
    """Status and error of a frame no spec describes: an unknown api, or a version too new."""
    if schema.spec(key) is None:
        return {
            "decode_status": base.UNKNOWN_COMMAND,
            "decode_error": f"api key {key} ({name or 'unknown'}) is not in the message specs",
        }
    lo, hi = schema.spec_versions(key)
    return {
        "decode_status": base.UNSUPPORTED_VERSION,
        "decode_error": f"{name} v{version} is newer than the specs (v{lo}-v{hi})",
    }


def plan_error(p: schema.Plan, e: Exception) -> str:
    """The decode_error of a body that does not decode under its plan."""
    msg = f"{p.name} v{p.version} {p.kind}: {e}"
    if p.below_baseline:
        msg += " (version older than the specs' baseline)"
    return msg


def error_row(ctx: Context, d, offset, status, error, raw, size, ts0, ts1, **extra) -> Row:
    row = {
        "direction": d,
        "size": size,
        "stream_offset": offset,
        "ts_ns": ts0,
        "ts_end_ns": ts1,
        "decode_status": status,
        "decode_error": error,
        # callers pass bytes only for a frame of known, non-auth type (Context.raw)
        "raw": None if raw is None else ctx.raw(raw, typed=True),
    }
    row.update(extra)
    return ("commands", row)


def sasl_token(direction: str, frame: bytes, offset: int, ts0: int, ts1: int) -> Row:
    """A raw SASL token (after a v0 SaslHandshake): its size only, never its bytes."""
    details = base.to_json({"token": base.redacted(frame)})
    row = {
        "direction": direction,
        "command": "SaslToken",
        "size": len(frame) + 4,
        "stream_offset": offset,
    }
    row.update(ts_ns=ts0, ts_end_ns=ts1, decode_status=base.OK, details=details)
    return "commands", row


def summary_columns(summ: dict, body: dict, topic_ids: dict, request=None) -> dict:
    """The commands row's topic, topic id, topics, partition, error code and throttle time
    from a decoded body's summary (`topic_ids`: the names learned on the connection; `request`:
    the request's Pending, whose topic, topics and partition a response that names none has)."""
    # the names, then the names of the ids learned on the connection, once each (a Metadata v10+
    # response names a topic and gives its id)
    topics = list(
        dict.fromkeys([*summ["topics"], *(n for t in summ["topic_ids"] if t and (n := topic_ids.get(t)))])
    )
    topic = topics[0] if topics else request and request.topic
    partition = summ["partition"] if summ["partition"] is not None else request and request.partition
    return {
        "topic": topic,
        "topic_id": summ["topic_ids"][0] if not topic and summ["topic_ids"] else None,
        "topics": topics or (request and request.topics) or None,
        "partition": partition,
        "error_code": summ["error_code"],
        "throttle_time_ms": body.get("ThrottleTimeMs"),
    }


def first_error(rs: rec.RecordSet, where: str) -> tuple[str, str | None]:
    """(status, error) of a fetched record set: its own error, else its first bad batch's."""
    if rs.error:
        return rs.status, f"{where}: {rs.error}"
    for b in rs.batches:
        if b.status != base.OK:
            return b.status, f"{where} batch at {b.base_offset}: {b.error}"
    return base.OK, None


class Summary(dict):
    """A record set's summary for `details`: batch headers only (numbers, codec names, errors),
    built here, so `clean` passes it over instead of copying it."""


def records_summary(rs: rec.RecordSet) -> dict:
    d = Summary(batches=[b.summary() for b in rs.batches])
    if rs.partial_tail:
        d["partial_tail_bytes"] = rs.partial_tail
    if rs.error:
        d["error"] = rs.error
    return d


_SCALARS = frozenset({int, str, bool, float, type(None)})  # values clean passes on as they are


def _summarize(v: bytes, cap: int) -> Summary:
    return records_summary(rec.read_record_set(v, cap))


def _summarize_no_sums(v: bytes, cap: int) -> Summary:
    return records_summary(rec.read_record_set(v, cap, sums=False))


_CLEANER = _body.cleaner(SECRET_FIELDS, Summary, base.redacted, _summarize, SENSITIVE_CONFIG.search)
_CLEANER_NO_SUMS = _body.cleaner(
    SECRET_FIELDS, Summary, base.redacted, _summarize_no_sums, SENSITIVE_CONFIG.search
)


def clean(o, records: frozenset = frozenset(), cap: int = 0, sums: bool = True):
    """Copy a decoded body for details, redacting secret fields and sensitive config values and
    summarizing record sets (fields named in `records` that still hold bytes; a failing batch's
    stored CRC only where `sums`, PayloadPolicy.checksums_kept): equal to clean_py's copy, made by
    the compiled _body.clean, which copies the top level and below it only the dicts and lists
    where something changes (the rest is the body's own: serialize the copy before the body
    changes)."""
    return _body.clean(_CLEANER if sums else _CLEANER_NO_SUMS, o, records, cap)


def clean_py(o, records: frozenset = frozenset(), cap: int = 0):
    """clean in Python: the reference the compiled one is tested against."""
    if isinstance(o, Summary):
        return o
    if isinstance(o, dict):
        out = {}
        for k, v in o.items():
            if k in SECRET_FIELDS and isinstance(v, bytes | str):
                out[k] = base.redacted(v)
            elif v.__class__ in _SCALARS:
                out[k] = v
            elif k in records and isinstance(v, bytes):
                out[k] = _summarize(v, cap)
            else:
                out[k] = clean_py(v, records, cap)
        if isinstance(out.get("Value"), str) and isinstance(out.get("Name"), str):
            if out.get("IsSensitive") is True or SENSITIVE_CONFIG.search(out["Name"]):
                out["Value"] = base.redacted(out["Value"])
        return out
    if isinstance(o, list):
        return [v if v.__class__ in _SCALARS else clean_py(v, records, cap) for v in o]
    return o


# -- latencies ------------------------------------------------------------------------------------
def latency(p: Pending, corr: int, ts0: int) -> dict:
    """The latencies row of an answered request (`ts0`: the response's first byte)."""
    return {
        "ts_ns": p.ts_end,
        "request_command": p.name,
        "response_command": p.name,
        "api_version": p.version,
        "correlation_id": corr,
        "request_ts_ns": p.ts_end,
        "response_ts_ns": ts0,
        "latency_us": (ts0 - p.ts_end) / 1000.0,
        "topic": p.topic,
        "partition": p.partition,
    }


def unanswered(p: Pending, corr: int) -> list[Row]:
    """A request whose response never came: a latency row with null response columns, and its
    produced messages without offsets."""
    rows: list[Row] = [
        (
            "latencies",
            {
                "ts_ns": p.ts_end,
                "request_command": p.name,
                "api_version": p.version,
                "correlation_id": corr,
                "request_ts_ns": p.ts_end,
                "topic": p.topic,
                "partition": p.partition,
            },
        )
    ]
    rows.extend(p.produced)
    return rows


# -- messages -------------------------------------------------------------------------------------
class MessageBlock(tables.Block):
    """`messages` rows of consecutive batches: `parts` lists whose rows they are, in order, as
    (topic, partition, rows): a produce response gives each partition's offsets (with_offsets)."""

    __slots__ = ("parts",)

    def __init__(self, n: int, cols: dict, const: dict, parts: list[tuple]):
        super().__init__(n, cols, const)
        self.parts = parts


# a pick: a batch whose records become messages rows, (batch, topic, partition, topic id, the
# smallest offset delivered or None)
Pick = tuple[rec.Batch, str | None, int | None, str | None, int | None]


def message_blocks(
    picks: list[Pick], pol: PayloadPolicy, direction: str, corr, ts_ns, with_offset: bool, frames: dict
) -> list[Row]:
    """The `messages` rows of a frame's batches, in order: consecutive v2 batches of one topic
    whose records one walk read (`Batch.span`) as one block, each other batch as message_rows
    makes it. The rows are those message_rows gives batch by batch."""
    out: list[Row] = []
    i = 0
    while i < len(picks):
        b, topic, _p, topic_id, _m = picks[i]
        j = i
        if b.span is not None and not b.control:
            chunk = b.span[0]
            while j < len(picks):
                bj, tj, _pj, tid_j, _mj = picks[j]
                if (
                    bj.span is None
                    or bj.span[0] is not chunk
                    or bj.control
                    or tj != topic
                    or tid_j != topic_id
                ):
                    break
                j += 1
        if j > i:
            out.extend(_block(picks[i:j], pol, direction, corr, ts_ns, with_offset, frames))
            i = j
            continue
        b, topic, partition, topic_id, min_offset = picks[i]
        out.extend(
            message_rows(
                b, pol, direction, topic, partition, corr, ts_ns, with_offset, min_offset, topic_id, frames
            )
        )
        i += 1
    return out


def _block(picks: list[Pick], pol: PayloadPolicy, direction, corr, ts_ns, with_offset, frames) -> list[Row]:
    """One block of the records of batches `picks` (v2, of one chunk and topic, not control)."""
    chunk = picks[0][0].span[0]
    parts: list[tuple] = []  # (batch, partition, first row, rows, kept rows: None = all)
    for b, _t, partition, _tid, min_offset in picks:
        _c, first, n, min_delta = b.span
        keep = None
        if n and min_offset is not None and b.base_offset + min_delta < min_offset:
            offs = chunk.col("offset").slice(first, n).to_numpy(zero_copy_only=True)
            keep = first + np.flatnonzero(offs >= min_offset)
        k = n if keep is None else len(keep)
        if k:
            parts.append((b, partition, first, n, keep))
    if not parts:
        return []
    counts = [n if keep is None else len(keep) for _b, _p, _f, n, keep in parts]
    batches = [x[0] for x in parts]
    topic, topic_id = picks[0][1], picks[0][3]
    unnamed = topic is None and topic_id is not None
    # the columns a block may leave out: a constant for every row instead
    wanted = {
        "headers": any(chunk.has_headers(f, n) for _b, _p, f, n, _k in parts),
        "sequence": not all(b.base_sequence < 0 for b in batches),
        "offset": with_offset,
    }
    ids = None if unnamed or not with_offset else [f"{topic}-{x[1]}@" for x in parts]
    contiguous = all(keep is None for *_x, keep in parts) and all(
        parts[x][2] + parts[x][3] == parts[x + 1][2] for x in range(len(parts) - 1)
    )
    if contiguous:
        total, cols = _walked(chunk, parts, pol, ids, wanted)
    else:
        total, cols = _picked(chunk, parts, pol, ids, wanted)
    const = _block_const(ts_ns, direction, topic, corr, frames)
    _per_batch(const, "partition", [x[1] for x in parts], counts)
    _per_batch(const, "producer_id", [b.producer_id for b in batches], counts)
    _per_batch(const, "producer_epoch", [b.producer_epoch for b in batches], counts)
    _per_batch(const, "compression", [b.codec for b in batches], counts)
    _per_batch(const, "decode_status", [b.status for b in batches], counts)
    _per_batch(const, "decode_error", [b.error for b in batches], counts)
    _per_batch(const, "checksum_ok", [b.crc_ok for b in batches], counts)
    if not wanted["headers"]:
        const["headers"] = []
    if not wanted["sequence"]:
        const["sequence"] = None
    if unnamed:
        const["topic_id"] = topic_id
        if with_offset:
            const["message_id"] = None
    who = [(topic, x[1], k) for x, k in zip(parts, counts)]
    return [("messages", MessageBlock(total, cols, const, who))]


def _walked(
    chunk: rec.Chunk, parts: list[tuple], pol: PayloadPolicy, ids: list[str] | None, wanted: dict[str, bool]
) -> tuple[int, dict]:
    """The columns of a block whose batches are consecutive rows of `chunk`, every record kept:
    as rows of the walk's buffers (records.Ints, Binary, Decimals) for conform to gather with
    the other blocks' (an array where the payload policy changes keys or values). `ids`: the
    message_id prefix of each batch's rows, if they have one; `wanted`: whether the block gives
    headers, sequence and offset."""
    w = chunk.w
    start = parts[0][2]
    total = parts[-1][2] + parts[-1][3] - start

    def ints(values, valid=None, nulls: int = 0) -> rec.Ints:
        return rec.Ints([(valid if nulls else None, values, start, total)], total)

    def nullable(name: str) -> rec.Ints:  # the walk's (validity, values, null count)
        valid, values, nulls = w[name]
        return ints(values, valid, nulls)

    def binary(name: str) -> rec.Binary:
        valid, offsets, data, nulls = w[name]
        return rec.Binary([(valid if nulls else None, offsets, data, start, total)], total)

    cols: dict = {
        "key": binary("key") if pol.keys_kept else pol.key_column(chunk.col("key").slice(start, total)),
        "message_ts_ns": nullable("ts_ns"),
        # the batch-level fields, then each record's offset delta
        "details": rec.Decimals(
            [(_details_head(b).encode(), b"}", w["delta"], f, n) for b, _p, f, n, _k in parts], total
        ),
    }
    if wanted["headers"]:
        cols["headers"] = chunk.col("headers").slice(start, total)
    if wanted["sequence"]:
        cols["sequence"] = nullable("sequence")
    if wanted["offset"]:
        cols["offset"] = ints(w["offset"])
    if ids is not None:
        try:
            heads = [p.encode() for p in ids]
        except UnicodeEncodeError:  # text with lone surrogates: the tables say which value
            cols["message_id"] = _decimal_runs(
                ids, [x[3] for x in parts], chunk.col("offset").slice(start, total)
            )
        else:
            cols["message_id"] = rec.Decimals(
                [(h, b"", w["offset"], f, n) for h, (_b, _p, f, n, _k) in zip(heads, parts)], total
            )
    if pol.mode == "keep":
        value = w["value"]
        cols["value"] = binary("value")
        cols["value_size"] = ints(w["value_size"], value[0], value[3])
    else:
        col = chunk.col
        cols.update(
            pol.value_columns(col("value").slice(start, total), col("value_size").slice(start, total))
        )
    return total, cols


def _picked(
    chunk: rec.Chunk, parts: list[tuple], pol: PayloadPolicy, ids: list[str] | None, wanted: dict[str, bool]
) -> tuple[int, dict]:
    """_walked's columns where some records are left out, or the batches are not consecutive:
    arrays of the rows picked."""
    idx = pa.array(
        np.concatenate([np.arange(f, f + n) if keep is None else keep for _b, _p, f, n, keep in parts]),
        pa.int64(),
    )
    counts = [n if keep is None else len(keep) for _b, _p, _f, n, keep in parts]

    def pick(name: str) -> pa.Array:
        return chunk.col(name).take(idx)

    cols: dict = {
        "key": pol.key_column(pick("key")),
        "message_ts_ns": pick("ts_ns"),
        "details": _decimal_runs([_details_head(b) for b, *_x in parts], counts, pick("delta"), "}"),
    }
    for name, given in wanted.items():
        if given:
            cols[name] = pick(name)
    if ids is not None:
        cols["message_id"] = _decimal_runs(ids, counts, cols["offset"])
    cols.update(pol.value_columns(pick("value"), pick("value_size")))
    return len(idx), cols


def _per_batch(const: dict, name: str, values: list, counts: list[int]) -> None:
    """A batch-level field of a block's rows: a constant where every batch has the same value,
    else each batch's value over its rows (tables.PerRun)."""
    if values.count(values[0]) == len(values):  # one type per field: 1 == True cannot mix
        const[name] = values[0]
    else:
        const[name] = tables.PerRun(values, counts)


def _decimal_runs(
    prefixes: list[str], counts: list[int], values: pa.Array, suffix: str = ""
) -> pa.Array | list:
    """`prefix + str(v) + suffix` for each value, the prefix of each run of `counts` values."""
    if len(prefixes) == 1:
        return rec.decimal_strings(prefixes[0], values, suffix)
    try:
        heads = [p.encode() for p in prefixes]
        tail = suffix.encode()
    except UnicodeEncodeError:  # text with lone surrogates: the tables say which value
        heads = None
    if heads is None or values.null_count or values.type != pa.int64():
        pre = [p for p, k in zip(prefixes, counts) for _ in range(k)]
        return [f"{p}{v}{suffix}" for p, v in zip(pre, values.to_pylist())]
    arg = (heads, np.asarray(counts, np.int32).tobytes())
    offsets, data = rec._records.decimals(arg, values.buffers()[1], values.offset, len(values), tail)
    return pa.Array.from_buffers(pa.string(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def message_rows(
    b: rec.Batch,
    pol: PayloadPolicy,
    direction: str,
    topic,
    partition,
    corr,
    ts_ns,
    with_offset: bool,
    min_offset: int | None = None,
    topic_id: str | None = None,
    frames: dict | None = None,
) -> list[Row]:
    """The `messages` rows of a (non-control) batch's records, as one block (MessageBlock), key
    and value under the payload policy `pol`; none before `min_offset`. `frames`: the carrying
    frame's first_frame / last_frame (ConnInfo.frame_range), constants of the block."""
    c = b.cols
    if b.control or c is None or not len(c):
        return []
    if min_offset is not None and (c.min_offset is None or c.min_offset < min_offset):
        c = c.filter([o is not None and o >= min_offset for o in rec._py(c.offset)])
        if not len(c):
            return []
    # a topic known only by id on this connection: the pipeline names it from the Metadata
    # responses of the whole capture set (topics.resolve_topic_ids), message_id with it
    unnamed = topic is None and topic_id is not None
    const = _block_const(ts_ns, direction, topic, corr, frames)
    const.update(
        partition=partition,
        producer_id=b.producer_id if b.magic >= 2 else None,
        producer_epoch=b.producer_epoch if b.magic >= 2 else None,
        compression=b.codec,
        decode_status=b.status,
        decode_error=b.error,
    )
    cols: dict = {
        "key": pol.key_column(c.key),
        "message_ts_ns": c.ts_ns,
        # the batch-level fields, then each record's offset delta
        "details": rec.decimal_strings(_details_head(b), c.delta, "}"),
    }
    if c.headers is None:
        const["headers"] = []
    else:
        cols["headers"] = c.headers
    if c.sequence is None:
        const["sequence"] = None
    else:
        cols["sequence"] = c.sequence
    if c.crc_ok is None:
        const["checksum_ok"] = b.crc_ok
    else:
        cols["checksum_ok"] = c.crc_ok
    if unnamed:
        const["topic_id"] = topic_id
    if with_offset:
        cols["offset"] = c.offset
        if unnamed:
            const["message_id"] = None
        else:
            cols["message_id"] = _message_ids(topic, partition, c.offset)
    cols.update(pol.value_columns(c.value, c.value_size))
    return [("messages", MessageBlock(len(c), cols, const, [(topic, partition, len(c))]))]


def _block_const(ts_ns, direction: str, topic, corr, frames: dict | None) -> dict:
    """The constants of every messages block of a frame."""
    const = {
        "ts_ns": ts_ns,
        "direction": direction,
        "source": "capture",
        "topic": topic,
        "correlation_id": corr,
    }
    const.update(frames or {})
    return const


def _details_head(b: rec.Batch) -> str:
    """The batch-level start of a message's `details` (what to_json writes for these fields),
    open for its offset delta."""
    return (
        f'{{"batch_base_offset":{base.json_value(b.base_offset)},"magic":{b.magic},'
        f'"transactional":{base.json_value(b.transactional)},'
        f'"timestamp_type":{base.json_value(b.timestamp_type)},"offset_delta":'
    )


def _message_ids(topic, partition, offsets: pa.Array | list) -> pa.Array | list[str]:
    """`topic-partition@offset` per message."""
    return rec.decimal_strings(f"{topic}-{partition}@", offsets)


def with_offsets(block: MessageBlock, acked: dict, pos: dict) -> None:
    """Give produced messages their offsets: each partition's (`block.parts`) from the produce
    response's base offset (`acked`: (error code, base offset) by (topic, partition)) plus their
    position in the request (`pos`: rows of the partition before this block, updated). Rows of
    a partition not acknowledged keep none."""
    starts = []
    for t, p, k in block.parts:
        n = pos.get((t, p), 0)
        pos[(t, p)] = n + k
        ec, bo = acked.get((t, p), (None, None))
        starts.append(bo + n if ec == 0 and bo is not None and bo >= 0 else None)
    if all(s is None for s in starts):
        return
    if None not in starts and all(s + k - 1 <= rec.INT64_MAX for s, (_t, _p, k) in zip(starts, block.parts)):
        # first, first + 1, ... per partition, written where conform gathers the column
        block.cols["offset"] = rec.Ints(
            [(None, s, 0, k) for s, (_t, _p, k) in zip(starts, block.parts)], block.n
        )
        try:
            heads = [f"{t}-{p}@".encode() for t, p, _k in block.parts]
        except UnicodeEncodeError:  # text with lone surrogates: the tables say which value
            block.cols["message_id"] = [
                f"{t}-{p}@{o}" for (t, p, k), s in zip(block.parts, starts) for o in range(s, s + k)
            ]
        else:
            block.cols["message_id"] = rec.Decimals(
                [(h, b"", s, 0, k) for h, s, (_t, _p, k) in zip(heads, starts, block.parts)], block.n
            )
        return
    # a partition without offsets, or offsets past int64: values as Python ints, None where none
    offs: list = []
    ids: list = []
    for (t, p, k), s in zip(block.parts, starts):
        if s is None:
            offs += [None] * k
            ids += [None] * k
        else:
            offs += range(s, s + k)
            ids += [f"{t}-{p}@{o}" for o in range(s, s + k)]
    block.cols["offset"] = offs
    block.cols["message_id"] = ids


# -- acks -----------------------------------------------------------------------------------------
def produce_ack(ts0, topic, partition, part: dict, ec, bo, producer_id, sequence, corr, latency_us) -> Row:
    """A produce partition's acknowledgement (`part`: its PartitionResponses entry, `ec` and
    `bo` its error code and base offset)."""
    return (
        "acks",
        {
            "ts_ns": ts0,
            "ack_type": "kafka_produce",
            "topic": topic,
            "partition": partition,
            "offset": bo if ec == 0 else None,
            "message_id": f"{topic}-{partition}@{bo}" if ec == 0 and bo is not None and bo >= 0 else None,
            "producer_id": producer_id,
            "sequence": sequence,
            "error_code": ec,
            "ack_latency_us": latency_us,
            "correlation_id": corr,
            "details": base.to_json(
                {
                    "log_append_time_ms": part.get("LogAppendTimeMs"),
                    "log_start_offset": part.get("LogStartOffset"),
                }
            ),
        },
    )


def txn_marker_ack(ts0, topic, topic_id, partition, b: rec.Batch, corr) -> Row:
    """A control batch (transaction COMMIT / ABORT marker) a fetch returned."""
    return (
        "acks",
        {
            "ts_ns": ts0,
            "ack_type": "kafka_txn_marker",
            "topic": topic,
            "topic_id": None if topic else topic_id,
            "partition": partition,
            "offset": b.base_offset,
            "message_id": f"{topic}-{partition}@{b.base_offset}" if topic else None,
            "producer_id": b.producer_id,
            "correlation_id": corr,
            "details": base.to_json(
                {
                    "control_type": b.control_type,
                    "producer_epoch": b.producer_epoch,
                    "coordinator_epoch": b.coordinator_epoch,
                }
            ),
        },
    )


def offset_commit_acks(p: Pending, errs: dict, corr, ts0, latency_us) -> list[Row]:
    """One `kafka_offset_commit` row per committed partition of the request (`errs`: the
    response's error code by (topic, partition))."""
    return [
        (
            "acks",
            {
                "ts_ns": ts0,
                "ack_type": "kafka_offset_commit",
                "topic": tname,
                "partition": pidx,
                "offset": off,
                "consumer": p.group,
                "producer_id": p.producer_id,
                "error_code": errs.get((tname, pidx)),
                "ack_latency_us": latency_us,
                "correlation_id": corr,
                "details": base.to_json({"api": p.name}),
            },
        )
        for tname, pidx, off in p.commits
    ]


def end_txn_ack(txn: dict, error_code, corr, ts0, latency_us) -> Row:
    details = {"committed": txn["committed"], "producer_epoch": txn["producer_epoch"]}
    ack = {
        "ts_ns": ts0,
        "ack_type": "kafka_end_txn",
        "producer_id": txn["producer_id"],
        "consumer": txn["transactional_id"],
        "error_code": error_code,
        "ack_latency_us": latency_us,
        "correlation_id": corr,
        "details": base.to_json(details),
    }
    return ("acks", ack)


def share_acks(p: Pending, errs: dict, corr, ts0, latency_us) -> list[Row]:
    """Acknowledgements a share consumer sent (in ShareFetch or ShareAcknowledge): one
    `kafka_share_ack` row per offset (accept, release, reject, renew; gaps are skipped), with the
    partition's error code from the response (`errs`, by (topic id, partition)). Ranges past
    MAX_SHARE_ACK_ROWS in one request become one row per range (`details.last_offset`)."""
    out: list[Row] = []
    budget = MAX_SHARE_ACK_ROWS
    for tname, tid, pidx, first, last, types in p.share_acks:
        if first is None or last is None or last < first:
            continue
        per_offset = last - first + 1 <= budget
        offsets = range(first, last + 1) if per_offset else (first,)
        for off in offsets:
            code = types[off - first] if len(types) > 1 and off - first < len(types) else (types or [None])[0]
            if code == 0:
                continue  # a gap: no record at this offset
            details = {"api": p.name, "type": SHARE_ACK_TYPES.get(code, code)}
            if not per_offset:
                details["last_offset"] = last
            out.append(
                (
                    "acks",
                    {
                        "ts_ns": ts0,
                        "ack_type": "kafka_share_ack",
                        "topic": tname,
                        "topic_id": None if tname else tid,
                        "partition": pidx,
                        "offset": off,
                        "message_id": f"{tname}-{pidx}@{off}" if tname else None,
                        "consumer": p.group,
                        "error_code": errs.get((tid, pidx)),
                        "ack_latency_us": latency_us,
                        "correlation_id": corr,
                        "details": base.to_json(details),
                    },
                )
            )
        budget -= len(offsets)
    return out
