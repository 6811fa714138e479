"""Rows for the Pulsar tables (commands, messages, latencies, acks), built from decoded values:
dicts, and blocks (tables.Block) for the messages of one payload and the acks of one receipt or
ACK message id. Nothing here keeps state: the conversation pairs frames and hands over what it
found.

A block of message rows carries `_batch_index` until `finish` takes it off (the receipt or the
delivery names its message id by it)."""

from __future__ import annotations

import struct

import pyarrow as pa
import pyarrow.compute as pc

from ...tables import Block
from .. import base
from ..base import Context, PayloadPolicy, Row, text
from ..framer import Junk
from . import framing
from .framing import HEADER, ParsedFrame
from .gen import pulsar_api_pb2 as pb
from .messages import (
    COMPRESSION_NAMES,
    ChunkedMessage,
    Columns,
    PayloadError,
    Single,
    columns,
    expand_columns,
    is_batch,
    key_bytes,
    numbered,
)
from .pairing import AckedIds, PendingSend
from .values import joined, mid_strs, partition_of, scrub, to_dict, to_json

T = pb.BaseCommand
CHUNK_INCOMPLETE = "chunk_incomplete"
ENCRYPTED = "encrypted"
_U32 = struct.Struct(">I")
# metadata fields every message of a payload shares, kept in its details
_MD_DETAILS = ("replicated_from", "schema_version", "deliver_at_time", "marker_type", "uuid",
               "txnid_least_bits", "txnid_most_bits", "highest_sequence_id")  # fmt: skip


def _field_info(type_code: int) -> tuple[bool, str | None, bool]:
    """(has request_id, the error field if any, has topic) of a command type's body."""
    name = framing.BODY_FIELD.get(type_code)
    fields = pb.BaseCommand.DESCRIPTOR.fields_by_name[name].message_type.fields_by_name if name else {}
    err = "error" if "error" in fields else "error_code" if "error_code" in fields else None
    return "request_id" in fields, err, "topic" in fields


_FIELDS = {t: _field_info(t) for t in framing.TYPE_NAMES}
# commands that name several topics: they fill the `topics` column
_TOPIC_LISTS = {
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: ("topics",),
    T.WATCH_TOPIC_LIST_SUCCESS: ("topic",),
    T.WATCH_TOPIC_UPDATE: ("new_topics", "deleted_topics"),
    T.ADD_PARTITION_TO_TXN: ("partitions",),
}


def latency(req, resp, req_ts, resp_ts, cid, topic, partition=None, error_code=None, version=None) -> Row:
    """A latencies row; `resp` None: the request was never answered."""
    r = {
        "ts_ns": req_ts,
        "request_command": req,
        "response_command": resp,
        "correlation_id": cid,
        "request_ts_ns": req_ts,
        "response_ts_ns": resp_ts,
        "latency_us": None if resp_ts is None else (resp_ts - req_ts) / 1000.0,
        "error_code": error_code,
        "topic": topic,
        "partition": partition if partition is not None else partition_of(topic),
    }
    if version is not None:
        r["api_version"] = version
    return ("latencies", r)


# ---------------------------------------------------------------------------------------------
# commands


def command_columns(row: dict, type_code: int, body) -> None:
    """Fill the columns of a frame's commands row that its command's body gives: correlation_id,
    error_code, topic, topics."""
    has_rid, err_field, has_topic = _FIELDS[type_code]
    if has_rid and body.HasField("request_id"):
        row["correlation_id"] = body.request_id
    if err_field is not None and body.HasField(err_field):
        row["error_code"] = getattr(body, err_field)
    if has_topic and body.HasField("topic"):
        row["topic"] = body.topic
    lists = _TOPIC_LISTS.get(type_code)
    if lists is not None:
        row["topics"] = [text(t) for f in lists for t in getattr(body, f)]


def payload_details(pf: ParsedFrame, pol: PayloadPolicy) -> dict:
    """The details of a SEND's or MESSAGE's payload section (its messages get their own rows),
    its partition and ordering keys under the key policy `pol`."""
    out: dict = {"checksum_ok": pf.checksum_ok}
    if pf.broker_entry is not None:
        out["broker_entry"] = to_dict(pf.broker_entry)
    if pf.metadata is not None:
        md = to_dict(pf.metadata)
        md.pop("properties", None)  # they are the messages' headers
        if not pol.keys_kept:
            m = pf.metadata
            keys = {"ordering_key": md.get("ordering_key")}
            if "partition_key" in md:
                keys["partition_key"] = key_bytes(m.partition_key, m.partition_key_b64_encoded)
            for name, key in keys.items():
                if key is not None and (shown := pol.key_text(key)) is not None:
                    md[name] = shown
                else:
                    md.pop(name, None)
        out["metadata"] = md
    if pf.payload is not None:
        out["payload_size"] = len(pf.payload)
    return out


def junk_row(d: str, j: Junk, max_frame: int) -> dict:
    """A commands row for bytes that are not a whole frame, without `raw` (which the conversation
    decides). An oversize frame's header says what it is."""
    row = {
        "ts_ns": j.ts_first,
        "ts_end_ns": j.ts_last,
        "direction": d,
        "size": j.size,
        "stream_offset": j.offset,
        "decode_status": j.status,
        "decode_error": j.reason,
    }
    if j.status == base.OVERSIZE:
        row.update(oversize_fields(j.head, j.size, max_frame))
    elif j.status == base.TRUNCATED:
        need = f" of {_U32.unpack_from(j.head, 0)[0] + 4}" if len(j.head) >= 4 else ""
        row["decode_error"] = f"connection ended after {j.size}{need} bytes of a frame"
    return row


def oversize_fields(head: bytes, size: int, max_frame: int) -> dict:
    """What an oversize frame's header tells: its command type, and the command if it is all
    in the header bytes kept."""
    cmd_size = _U32.unpack_from(head, 4)[0]
    t = framing.peek_type(head[HEADER : HEADER + 3])
    cmd, _ = (
        framing.parse_command(head[HEADER : HEADER + cmd_size])
        if len(head) >= HEADER + cmd_size
        else (None, None)
    )
    details = {"total_size": size - 4, "max_frame_bytes": max_frame}
    if cmd is not None:
        details["command"] = scrub(to_dict(cmd))
    return {
        "command": framing.TYPE_NAMES.get(t) if t is not None else None,
        "command_code": t,
        "details": to_json(details),
    }


def error_row(d: str, offset: int, size: int, status: str, error: str, ts: int) -> Row:
    return (
        "commands",
        {
            "ts_ns": ts,
            "direction": d,
            "size": size,
            "stream_offset": offset,
            "decode_status": status,
            "decode_error": error,
        },
    )


# ---------------------------------------------------------------------------------------------
# messages


def message_base(
    direction: str, ts: int, topic, partition, who: dict, producer_name, pf: ParsedFrame
) -> dict:
    """The columns the message rows of one SEND or MESSAGE share; `who`: the producer_id or the
    consumer column."""
    md = pf.metadata
    return {
        "ts_ns": ts,
        "direction": direction,
        "source": "capture",
        "topic": topic,
        "partition": partition,
        **who,
        "producer_name": producer_name,
        "message_ts_ns": md.publish_time * 1_000_000 if md.HasField("publish_time") else None,
        "compression": COMPRESSION_NAMES.get(md.compression, str(md.compression)),
        "checksum_ok": pf.checksum_ok,
    }


def message_rows(
    ctx: Context, md: pb.MessageMetadata, payload: bytes, base_row: dict, status: str, extra: dict
) -> Block:
    """The rows of a whole (non-chunk) payload as one block (tables.Block): one per message, or
    one saying why there are none. Each row's batch index is in the `_batch_index` column until
    `finish` takes it off (the receipt or the delivery names the message id by it)."""
    common_details = dict(extra)
    for f in _MD_DETAILS:
        if md.HasField(f):
            common_details[f] = getattr(md, f)
    if is_batch(md):
        common_details["num_messages_in_batch"] = md.num_messages_in_batch
    if len(md.encryption_keys):
        return _encrypted_row(ctx, md, payload, base_row, common_details)
    try:
        msgs = expand_columns(md, payload, int(ctx.max_decompressed_bytes))
    except PayloadError as e:
        const = dict(base_row)
        const.update(ctx.payload.value(None))
        const.update(
            {
                "sequence": md.sequence_id,
                "decode_status": e.status,
                "decode_error": str(e),
                "details": to_json({**common_details, "payload_size": len(payload)}),
            }
        )
        return Block(1, {"_batch_index": range(-1, 0)}, const)
    return message_block(ctx, base_row, msgs, status, None, common_details)


def _encrypted_row(
    ctx: Context, md: pb.MessageMetadata, payload: bytes, base_row: dict, common: dict
) -> Block:
    """An encrypted payload is one row, its value kept as it is (a batch cannot be split)."""
    if md.encryption_algo:
        common["encryption_algo"] = md.encryption_algo
    common["encryption_keys"] = [k.key for k in md.encryption_keys]
    common["num_messages"] = md.num_messages_in_batch if is_batch(md) else 1
    pk = md.partition_key if md.HasField("partition_key") else None
    props = [(kv.key, kv.value) for kv in md.properties]
    s = Single(-1, payload, None, pk, props, md.sequence_id, None, None)
    if pk is not None:
        s.key = key_bytes(pk, md.partition_key_b64_encoded)
    return message_block(
        ctx, base_row, columns([s]), ENCRYPTED, "payload is encrypted: kept as it is", common
    )


def message_block(
    ctx: Context, base_row: dict, m: Columns, status: str, error: str | None, common: dict
) -> Block:
    """The messages `m` of one payload as a block: `base_row` (message_base) and the status as
    constants; each message's details are `common` and its own fields, the JSON of `common`
    written once."""
    pol = ctx.payload
    const = dict(base_row)
    const["decode_status"] = status
    const["decode_error"] = error
    cols: dict = {
        "_batch_index": m.batch_index,
        "headers": m.headers,
        "sequence": m.sequence,
        "details": _details(m, common, pol),
    }
    if m.value.__class__ is list:  # a few messages: lists, for conform to convert with the rest
        cols["key"] = m.key if pol.keys_kept else [pol.key(k) for k in m.key]
        sizes = pa.array([None if v is None else len(v) for v in m.value], pa.int64())
        cols.update(pol.value_columns(pa.array(m.value, pa.binary()), sizes))
    else:
        cols["key"] = pol.key_column(m.key)
        cols.update(pol.value_columns(m.value, pc.binary_length(m.value).cast(pa.int64())))
    return Block(len(m.batch_index), cols, const)


_KEY_FIELDS = ("ordering_key", "partition_key_b64")  # a message's own fields that hold its key
_KEEP = PayloadPolicy()


def _details(m: Columns, common: dict, pol: PayloadPolicy = _KEEP) -> pa.Array | list[str]:
    """Each message's details: `common`, then its batch index and the fields it has of its own
    (Columns.own), as to_json would write the dict, written piece by piece (in one compiled call
    when no message has fields of its own). Under a key policy, the ordering key as it says and
    no partition_key_b64 (the key column holds the key as the policy leaves it)."""
    head = to_json(common)[:-1]
    head += ',"batch_index":' if len(head) > 1 else '"batch_index":'
    if not m.own:
        return numbered(head, m.batch_index, "}")
    jv = base.json_value
    out = []
    for i, bi in enumerate(m.batch_index):
        t = f"{head}{bi}"
        for k, v in m.own.get(i, {}).items():
            if k in _KEY_FIELDS and not pol.keys_kept:
                if k == "partition_key_b64" or (v := pol.key_text(v)) is None:
                    continue
            t += f",{jv(k)}:{jv(v)}"
        out.append(t + "}")
    return out


def chunked_rows(
    ctx: Context, cm: ChunkedMessage, md: pb.MessageMetadata, base_row: dict, status: str, extra: dict
) -> Block:
    """Rows for a chunked message whose chunks are all in (`md`: the last chunk's metadata)."""
    whole = cm.assemble()
    first = cm.first_md or md
    det = dict(extra)
    det["chunks"] = {
        "uuid": cm.uuid,
        "num_chunks": cm.num_chunks,
        "chunk_message_ids": [cm.message_ids.get(i) for i in range(cm.num_chunks)],
    }
    # the compression and the batch flag of the whole message are in every chunk's metadata
    if "first_frame" in base_row:  # the message spans its chunks' frames
        base_row = {**base_row, "first_frame": cm.first_frame, "last_frame": cm.last_frame}
    return message_rows(ctx, first, whole, base_row, status, det)


def incomplete_chunk_row(ctx: Context, key: tuple, cm: ChunkedMessage, topic, consumer: str | None) -> dict:
    """The row of a chunked message some chunks of which were not captured (no value)."""
    direction, ident, _uuid = key
    md = cm.first_md
    row = {
        "ts_ns": cm.first_ts_ns,
        "direction": direction,
        "source": "capture",
        "producer_name": md.producer_name if md is not None else None,
        "sequence": md.sequence_id if md is not None else None,
        "decode_status": CHUNK_INCOMPLETE,
        "decode_error": f"{len(cm.chunks)} of {cm.num_chunks} chunks captured",
        "first_frame": cm.first_frame,  # the first and last chunk captured
        "last_frame": cm.last_frame,
        "details": to_json(
            {
                "uuid": cm.uuid,
                "chunks_seen": sorted(cm.chunks),
                "num_chunks": cm.num_chunks,
                "chunk_message_ids": cm.message_ids,
                "total_chunk_msg_size": cm.total_size,
            }
        ),  # fmt: skip
    }
    row.update(ctx.payload.value(None))
    if direction == "produce":
        row["producer_id"] = ident
    row["topic"] = topic
    if consumer is not None:  # delivered: the subscription it went to
        row["consumer"] = consumer
    row["partition"] = partition_of(row["topic"])
    return row


def finish(r: dict | Block) -> dict | Block:
    """A message row or block as the table takes it (without `_batch_index`)."""
    if r.__class__ is Block:
        r.cols.pop("_batch_index", None)
    else:
        r.pop("_batch_index", None)
    return r


def held_bytes(b: Block) -> int:
    """The value bytes a block of produce rows holds (what the payload policy kept)."""
    v = b.cols.get("value")
    if v is None:
        return len(b.const.get("value") or b"") * b.n
    if isinstance(v, pa.Array):
        return pc.sum(pc.binary_length(v)).as_py() or 0
    return sum(len(x or b"") for x in v)


def answered(b: Block, mid, error: int | None) -> Block:
    """A SEND's produce rows once it is answered: the receipt's message id, or the send error."""
    if mid is not None:
        b.cols["message_id"] = mid_strs(mid.ledger_id, mid.entry_id, b.cols["_batch_index"])
        if mid.partition >= 0:
            b.const["partition"] = mid.partition
    if error is not None:
        tail = f'"send_error":{int(error)}}}'
        if "details" in b.cols:
            b.cols["details"] = [
                (d[:-1] + "," if d and d != "{}" else "{") + tail for d in b.column("details")
            ]
        else:
            d = b.const.get("details")
            b.const["details"] = (d[:-1] + "," if d and d != "{}" else "{") + tail
    return finish(b)


# ---------------------------------------------------------------------------------------------
# acks


def receipt_acks(ts: int, body, error: int | None, topic, mid, ps: PendingSend | None) -> list[Row]:
    """The acks rows of a SEND_RECEIPT or SEND_ERROR (`body`), one block: one row per message of
    the SEND it answers (`ps`, if captured and still waiting), or one. `mid`: the receipt's
    message id."""
    seq = body.sequence_id
    common = {
        "ts_ns": ts,
        "topic": topic,
        "partition": mid.partition if mid is not None and mid.partition >= 0 else partition_of(topic),
        "producer_id": body.producer_id,
        "error_code": error,
        "ack_latency_us": None if ps is None else (ts - ps.ts_ns) / 1000.0,
        "correlation_id": seq,
    }
    extra = {"sequence_id": seq}
    if error is None and body.HasField("highest_sequence_id"):
        extra["highest_sequence_id"] = body.highest_sequence_id
    if ps is None:
        extra["send_unmatched"] = True  # the SEND was not captured, or gave up waiting for this receipt
    elif ps.chunk is not None:
        extra["chunk"] = ps.chunk
    if ps is None or not ps.sequences:
        bi = mid.batch_index if mid is not None else -1
        sequences = [(range(bi, bi + 1), [seq])]
    else:
        sequences = ps.sequences  # the batch indexes and sequences of each block of messages
    common["ack_type"] = "pulsar_receipt" if error is None else "pulsar_send_error"
    common["details"] = to_json(extra)
    cols: dict = {"sequence": joined([sequence for _bis, sequence in sequences])}
    if mid is not None:
        L, E = mid.ledger_id, mid.entry_id
        cols["message_id"] = joined([mid_strs(L, E, bis) for bis, _sequence in sequences])
    else:
        common["message_id"] = None
    return [("acks", Block(sum(len(bis) for bis, _sequence in sequences), cols, common))]


def ack_rows(
    ts: int,
    cumulative: bool,
    topic,
    partition,
    consumer: str,
    rid: int | None,
    details: str,
    acked: AckedIds,
) -> list[Row]:
    """The acks rows of one message id of an ACK, one block: a row per id it acknowledges
    (`acked`: the ids, their delivery times where seen, whether each was acked before)."""
    if not acked.n:
        return []
    const = {
        "ts_ns": ts,
        "ack_type": "pulsar_ack_cumulative" if cumulative else "pulsar_ack",
        "topic": topic,
        "partition": partition,
        "consumer": consumer,
        "correlation_id": rid,
    }
    cols: dict = {"message_id": acked.message_id}
    t = acked.delivered
    if t.__class__ is list:
        cols["ack_latency_us"] = [None if d is None else (ts - d) / 1000.0 for d in t]
    else:
        const["ack_latency_us"] = None if t is None else (ts - t) / 1000.0
    if acked.again.__class__ is list and True in acked.again:
        again_details = details[:-1] + ',"already_acked":true}'
        cols["details"] = [again_details if again else details for again in acked.again]
    else:
        const["details"] = details
    return [("acks", Block(acked.n, cols, const))]


def ack_response_row(ts: int, topic, consumer: str, body, latency_us: float | None, details: dict) -> Row:
    """The acks row of an ACK_RESPONSE (`latency_us`: of the ACK it answers, if paired)."""
    return (
        "acks",
        {
            "ts_ns": ts,
            "ack_type": "pulsar_ack_response",
            "topic": topic,
            "partition": partition_of(topic),
            "consumer": consumer,
            "error_code": body.error if body.HasField("error") else None,
            "correlation_id": body.request_id if body.HasField("request_id") else None,
            "ack_latency_us": latency_us,
            "details": to_json({"consumer_id": body.consumer_id, **details}),
        },
    )
