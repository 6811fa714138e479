"""TubeMQ's rows for the tables, built from decoded messages: pure functions, no connection
state (the conversation pairs requests and responses and hands over what it knows)."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

import pyarrow as pa

from ...tables import Block
from .. import base
from ..base import MALFORMED, OK, PayloadPolicy, Row, to_json
from .content import attr_value, checksum_ok, parse_attributes, parse_msg_time, split_payload
from .framing import TubeFrame

M_COMMIT = 18  # consumerCommitC2B


@dataclass
class Pending:
    method_id: int | None
    name: str
    ts_end: int  # last byte of the request
    topic: str | None
    partition: int | None
    client_id: str | None
    group: str | None
    api_version: int | None


def unanswered(serial: int, p: Pending) -> list[Row]:
    """A request that got no response: its latency row with null response columns (and a
    commit's ack, marked as having no response)."""
    rows: list[Row] = [
        (
            "latencies",
            {
                "ts_ns": p.ts_end,
                "request_command": p.name,
                "api_version": p.api_version,
                "correlation_id": serial,
                "request_ts_ns": p.ts_end,
                "topic": p.topic,
                "partition": p.partition,
            },
        )
    ]
    if p.method_id == M_COMMIT:
        rows.append(
            (
                "acks",
                {
                    "ts_ns": p.ts_end,
                    "ack_type": "tubemq_commit",
                    "topic": p.topic,
                    "partition": p.partition,
                    "consumer": p.group,
                    "correlation_id": serial,
                    "details": to_json({"via": "consumerCommitC2B", "response": "missing"}),
                },
            )
        )
    return rows


def produce(msg: dict, f: TubeFrame, policy: PayloadPolicy, frames: dict | None = None) -> Row:
    """sendMessageP2B (its fields, rpc.decode_body): the message a producer sent (`frames`: its
    frame's first_frame / last_frame)."""
    get = msg.get
    data = get("data") or b""
    flag = get("flag")
    attr, payload, err = split_payload(data, flag)
    headers = parse_attributes(attr)
    check_sum, msg_time = get("checkSum"), get("msgTime")
    row: dict = {
        "ts_ns": f.ts_first,
        "direction": "produce",
        "source": "capture",
        "topic": get("topicName"),
        "partition": get("partitionId"),
        "headers": headers,
        "producer_name": get("clientId"),
        "checksum_ok": checksum_ok(check_sum, data),
        "correlation_id": f.serial,
        "message_ts_ns": parse_msg_time(msg_time or attr_value(headers, "$msgTime$")),
        "decode_status": MALFORMED if err else OK,
        "decode_error": err,
        "details": to_json(
            {
                "flag": flag,
                "msg_type": get("msgType"),
                "msg_time": msg_time,
                "attributes": attr,
                "check_sum": check_sum,
                "sent_addr": ipv4(get("sentAddr")),
                "data_size": len(data),
            }
        ),
    }
    row.update(policy.value(payload))
    row.update(frames or {})
    return ("messages", row)


def deliver(
    msg: dict, f: TubeFrame, pend: Pending | None, policy: PayloadPolicy, frames: dict | None = None
) -> list[Row]:
    """getMessagesC2B's response: a row per message delivered to the consumer group, one block
    (tables.Block) for the pack (`frames`: the response frame's first_frame / last_frame)."""
    tms = msg.get("messages")
    if not tms:
        return []
    req_part = pend.partition if pend else None
    const = {
        "ts_ns": f.ts_first,
        "direction": "deliver",
        "source": "capture",
        "topic": pend.topic if pend else None,
        "consumer": pend.group if pend else None,  # the consumer group that fetched it
        "correlation_id": f.serial,
        **(frames or {}),
    }
    curr = base.json_value(msg.get("currOffset"))
    jv = base.json_value
    cols: dict[str, list] = {k: [] for k in _DELIVER_COLUMNS}
    values = []
    for tm in tms:
        get = tm.get
        data = get("payLoadData") or b""
        flag = get("flag")
        attr, payload, err = split_payload(data, flag)
        headers = parse_attributes(attr)
        part = get("partitionId")
        recv_ms = get("recvTimeInMs")
        cs = get("checkSum")
        mid = get("messageId")
        cols["partition"].append(part if part is not None else req_part)
        cols["message_id"].append(str(mid) if mid is not None else None)
        cols["headers"].append(headers)
        cols["checksum_ok"].append(checksum_ok(cs, data))
        cols["message_ts_ns"].append(
            recv_ms * 1_000_000 if recv_ms else parse_msg_time(attr_value(headers, "$msgTime$"))
        )
        cols["decode_status"].append(MALFORMED if err else OK)
        cols["decode_error"].append(err)
        cols["details"].append(
            f'{{"flag":{jv(flag)},"attributes":{jv(attr)},"check_sum":{jv(cs)},'
            f'"index_key_code":{jv(get("indexKeyCode"))},"report_addr":{jv(ipv4(get("reportAddr")))},'
            f'"recv_time_ms":{jv(recv_ms)},"data_size":{len(data)},"curr_offset":{curr}}}'
        )
        values.append(payload)
    sizes = pa.array([len(v) for v in values], pa.int64())
    cols.update(policy.value_columns(pa.array(values, pa.binary()), sizes))
    return [("messages", Block(len(values), cols, const))]


_DELIVER_COLUMNS = (
    "partition", "message_id", "headers", "checksum_ok", "message_ts_ns", "decode_status", "decode_error", "details",
)  # fmt: skip


def confirm_ack(msg: dict, f: TubeFrame, lat: float | None, off: int | None) -> Row:
    """getMessagesC2B with lastPackConsumed=true confirms the previous pack of the partition
    (`lat`, `off`: since that pack's delivery, and its offset)."""
    get = msg.get
    topic, part = get("topicName"), get("partitionId")
    return (
        "acks",
        {
            "ts_ns": f.ts_first,
            "ack_type": "tubemq_commit",
            "topic": topic,
            "partition": part,
            "offset": off,
            "consumer": get("groupName"),
            "ack_latency_us": lat,
            "correlation_id": f.serial,
            "details": to_json({"via": "getMessagesC2B", "client_id": get("clientId")}),
        },
    )


def commit_ack(
    msg: dict | None, f: TubeFrame, pend: Pending | None, error_code: int | None, lat: float | None
) -> Row:
    """consumerCommitC2B's response (`lat`: from the last delivery to the commit request)."""
    topic = pend.topic if pend else None
    part = pend.partition if pend else None
    return (
        "acks",
        {
            "ts_ns": f.ts_first,
            "ack_type": "tubemq_commit",
            "topic": topic,
            "partition": part,
            "offset": msg.get("currOffset") if msg is not None else None,
            "consumer": pend.group if pend else None,
            "error_code": error_code,
            "ack_latency_us": lat,
            "correlation_id": f.serial,
            "details": to_json(
                {
                    "via": "consumerCommitC2B",
                    "max_offset": msg.get("maxOffset") if msg is not None else None,
                    "client_id": pend.client_id if pend else None,
                }
            ),
        },
    )


def produce_ack(msg: dict, f: TubeFrame, pend: Pending | None, error_code: int | None) -> Row:
    """sendMessageP2B's response: the broker's message id and append offset."""
    get = msg.get
    mid = get("messageId")
    return (
        "acks",
        {
            "ts_ns": f.ts_first,
            "ack_type": "tubemq_produce",
            "topic": pend.topic if pend else None,
            "partition": pend.partition if pend else None,
            "offset": get("appendOffset"),
            "message_id": str(mid) if mid is not None else None,
            "error_code": error_code,
            "ack_latency_us": (f.ts_first - pend.ts_end) / 1000.0 if pend else None,
            "correlation_id": f.serial,
            "details": to_json({"append_time_ms": get("appendTime")}),
        },
    )


def ipv4(v: int | None) -> str | None:
    """A 32-bit number (TubeMQ's sentAddr, reportAddr) as a dotted IPv4 address."""
    if v is None:
        return None
    return socket.inet_ntoa(_U32.pack(v & 0xFFFFFFFF))


_U32 = struct.Struct(">I")
