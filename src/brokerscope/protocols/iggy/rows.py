"""Rows of the Iggy tables (commands, messages, latencies, acks) built from decoded values.

Pure functions: the conversation passes in everything a row needs (the pending request dict of
pairing.new_request, decoded fields and messages, timestamps in ns)."""

from __future__ import annotations

from .. import base
from ..base import PayloadPolicy, Row
from ..framer import Frame
from .codes import COMMANDS


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


def auto_commit_ack_row(req: dict, status: int, partition: int | None, msgs: list[dict], ts: int) -> Row:
    """The acks row of a POLL_MESSAGES with auto_commit: the server stores the last polled offset."""
    last = msgs[-1]
    return (
        "acks",
        {
            "ts_ns": ts,
            "ack_type": "iggy_offset",
            "topic": req["topic"],
            "partition": partition,
            "offset": last.get("offset"),
            "message_id": str(last["id"]),
            "consumer": consumer_label(req["details"]["consumer"]),
            "error_code": status,
            "correlation_id": req["corr"],
            "details": base.to_json({"auto_commit": True, "messages": len(msgs)}),
        },
    )


def msg_summary(m: dict) -> dict:
    """A message as its frame's details list it (the message itself gets a messages row)."""
    s = {"id": str(m["id"]), "payload_size": len(m["payload"]), "headers": len(m["headers"])}
    for k in ("offset", "checksum", "checksum_ok", "state"):
        if m.get(k) is not None:
            s[k] = m[k]
    return s


def message_row(
    direction: str,
    m: dict,
    topic: str | None,
    partition: int | None,
    corr: int,
    ts: int,
    payload: PayloadPolicy,
    key: bytes | None = None,
    frames: dict | None = None,
) -> Row:
    """The messages row of one decoded message, `direction` "produce" or "deliver"; its key and
    value pass through the payload policy. `frames`: its frame's first_frame / last_frame."""
    row = {
        "ts_ns": ts,
        "direction": direction,
        "source": "capture",
        "topic": topic,
        "partition": partition,
        "offset": i64(m.get("offset")) if direction == "deliver" else None,
        "message_id": str(m["id"]),
        "key": payload.key(key),
        "headers": [{"key": h["key"], "value": h["value"]} for h in m["headers"]],
        "checksum_ok": m.get("checksum_ok"),
        "correlation_id": corr,
        "decode_status": base.OK,
        **(frames or {}),
    }
    if m.get("checksum_ok") is False:
        row["decode_status"] = base.CHECKSUM_MISMATCH
        row["decode_error"] = "message checksum does not match"
    row.update(payload.value(m["payload"]))
    mts = m.get("timestamp") or m.get("origin_timestamp")
    if mts:
        row["message_ts_ns"] = mts * 1000  # Iggy timestamps are microseconds
    det = {"headers": [{"key": h["key"], "kind": h["kind"], "value": h["typed"]} for h in m["headers"]]}
    for k in ("origin_timestamp", "timestamp", "checksum", "state", "header_size"):
        if m.get(k) is not None:
            det[k] = m[k]
    row["details"] = base.to_json(det)
    return ("messages", row)
