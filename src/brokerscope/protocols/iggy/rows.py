"""Rows of the Iggy tables (commands, messages, latencies, acks) built from decoded values.

Pure functions: the conversation passes in everything a row needs (the pending request dict of
pairing.new_request, decoded fields and messages, timestamps in ns)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ... import tables
from .. import base
from ..base import PayloadPolicy, Row
from ..framer import Frame
from .codes import COMMANDS
from .messages import Messages

I64_LIMIT = 2**63


def i32(v) -> int | None:
    return v if isinstance(v, int) and -(2**31) <= v < 2**31 else None


def i64(v) -> int | None:
    return v if isinstance(v, int) and -(2**63) <= v < 2**63 else None


def consumer_label(c: dict | None) -> str | None:
    """The consumer of a POLL_MESSAGES / STORE_CONSUMER_OFFSET request as one string:
    `consumer:<id>` for a single consumer, `group:<id>` for a consumer group; <id> is the
    numeric id or the name, as the client sent it (e.g. `consumer:7`, `group:orders`)."""
    if not c:
        return None
    prefix = "group" if c.get("kind") == "consumer_group" else "consumer"
    return f"{prefix}:{c.get('id')}"


def flag_batch_checksum(row: dict, ok: bool | None) -> None:
    """A message batch whose batch checksum does not verify marks its frame's row (the messages
    keep their own per-message checksum verdicts)."""
    if ok is False:
        row["decode_status"] = base.CHECKSUM_MISMATCH
        row["decode_error"] = "batch checksum does not match"


def frame_columns(direction: str, fr: Frame) -> dict:
    """The columns every decoded frame's commands row starts with: where and when it was seen."""
    return {
        "direction": direction,
        "size": len(fr.data),
        "stream_offset": fr.offset,
        "ts_ns": fr.ts_first,
        "ts_end_ns": fr.ts_last,
    }


def error_row(
    direction: str,
    off: int,
    size: int,
    ts0: int,
    ts1: int,
    status: str,
    err: str,
    info: dict | None,
    raw: bytes | None = None,
) -> Row:
    """A commands row for bytes that did not decode; `info` (header fields) becomes details, and
    names the command when it holds a known `code`."""
    row = {
        "direction": direction,
        "size": size,
        "stream_offset": off,
        "ts_ns": ts0,
        "ts_end_ns": ts1,
        "decode_status": status,
        "decode_error": err,
    }
    if info:
        row["details"] = base.to_json(info)
        code = info.get("code")
        if code in COMMANDS:
            row["command"] = COMMANDS[code]
            row["command_code"] = code
    if raw is not None:
        row["raw"] = raw
    return ("commands", row)


def latency_row(req: dict, status: int | None, resp_ts: int | None) -> Row:
    """A request's latencies row; without a response (`resp_ts` None) only the request half."""
    row = {
        "ts_ns": req["ts_end"],
        "request_command": req["name"],
        "correlation_id": req["corr"],
        "request_ts_ns": req["ts_end"],
        "topic": req["topic"],
        "partition": i32(req["partition"]),
    }
    if resp_ts is not None:
        row.update(
            response_command=req["name"],
            response_ts_ns=resp_ts,
            latency_us=(resp_ts - req["ts_end"]) / 1000.0,
            error_code=status,
        )
    return ("latencies", row)


def offset_ack_row(req: dict, status: int | None, ts: int | None, delivered_ts: int | None) -> Row:
    """The acks row of a STORE_CONSUMER_OFFSET (`ts` None: no response seen); `delivered_ts` is
    when the acknowledged message was delivered on this connection, if it was."""
    d = req["details"]
    row = {
        "ts_ns": ts if ts is not None else req["ts_end"],
        "ack_type": "iggy_offset",
        "topic": req["topic"],
        "partition": i32(d.get("partition_id")),
        "offset": i64(d["offset"]),
        "consumer": consumer_label(d["consumer"]),
        "error_code": status,
        "correlation_id": req["corr"],
    }
    if delivered_ts is not None:
        row["ack_latency_us"] = (req["ts_end"] - delivered_ts) / 1000.0
    if ts is None:
        row["details"] = base.to_json({"response": "missing"})
    return ("acks", row)


def send_ack_rows(req: dict, status: int | None, confirmations: list[dict], ts: int) -> list[Row]:
    """The acks rows of a SEND_MESSAGES reply: one per partition it confirms written (its base
    offset), or one for the request's partition when the reply confirms none (a failure, a
    classic empty reply)."""
    base_row = {
        "ts_ns": ts,
        "ack_type": "iggy_send",
        "topic": req["topic"],
        "partition": i32(req["partition"]),
        "error_code": status,
        "correlation_id": req["corr"],
        "ack_latency_us": (ts - req["ts_end"]) / 1000.0,
    }
    if not confirmations:
        return [("acks", base_row)]
    return [
        (
            "acks",
            {
                **base_row,
                "partition": i32(c["partition_id"]),
                "offset": i64(c["base_offset"]),
                "details": base.to_json({"stream_id": c["stream_id"], "topic_id": c["topic_id"]}),
            },
        )
        for c in confirmations
    ]


def auto_commit_ack_row(req: dict, status: int, partition: int | None, msgs: Messages, ts: int) -> Row:
    """The acks row of a POLL_MESSAGES with auto_commit: the server stores the last polled offset."""
    return (
        "acks",
        {
            "ts_ns": ts,
            "ack_type": "iggy_offset",
            "topic": req["topic"],
            "partition": partition,
            "offset": msgs.offsets[-1],
            "message_id": msgs.ids[-1].as_py() if isinstance(msgs.ids, pa.Array) else msgs.ids[-1],
            "consumer": consumer_label(req["details"]["consumer"]),
            "error_code": status,
            "correlation_id": req["corr"],
            "details": base.to_json({"auto_commit": True, "messages": len(msgs)}),
        },
    )


def with_summaries(details: dict, msgs: Messages) -> str:
    """`details` as JSON with the frame's messages listed last under "messages" (Messages.summaries:
    each message itself gets a messages row)."""
    head = base.to_json(details)[:-1]
    return f'{head}{"," if len(head) > 1 else ""}"messages":[{",".join(msgs.summaries)}]}}'


def message_block(
    direction: str,
    msgs: Messages,
    topic: str | None,
    partition: int | None,
    corr: int,
    ts: int,
    payload: PayloadPolicy,
    key: bytes | None = None,
    consumer: str | None = None,
    frames: dict | None = None,
) -> Row:
    """The messages rows of one frame's decoded messages, `direction` "produce" or "deliver"
    (`consumer`: whom a deliver went to), as one block (tables.Block): what the frame gives every
    message as constants, the rest as columns; key and values pass through the payload policy.
    `frames`: the carrying frame's first_frame / last_frame."""
    const: dict = {
        "ts_ns": ts,
        "direction": direction,
        "source": "capture",
        "topic": topic,
        "partition": partition,
        "key": payload.key(key),
        "correlation_id": corr,
        **(frames or {}),
    }
    oks = msgs.checksum_ok
    cols: dict = {"message_id": msgs.ids, "checksum_ok": oks, "message_ts_ns": msgs.ts_ns}
    if direction == "deliver":
        offs = msgs.offsets
        fits = None not in offs and max(offs, default=0) < I64_LIMIT
        cols["offset"] = offs if fits else [i64(o) for o in offs]
        const["consumer"] = consumer
    if False in oks:
        cols["decode_status"] = [base.CHECKSUM_MISMATCH if ok is False else base.OK for ok in oks]
        cols["decode_error"] = ["message checksum does not match" if ok is False else None for ok in oks]
    else:
        const["decode_status"] = base.OK
    if msgs.headers is not None:
        cols["headers"] = msgs.headers
    else:
        const["headers"] = []
    values = msgs.payloads
    if isinstance(values, pa.Array):
        sizes = pc.binary_length(values).cast(pa.int64())
    else:
        values, sizes = pa.array(values, pa.binary()), pa.array(map(len, values), pa.int64())
    cols.update(payload.value_columns(values, sizes))
    cols["details"] = msgs.details
    return ("messages", tables.Block(len(msgs), cols, const))
