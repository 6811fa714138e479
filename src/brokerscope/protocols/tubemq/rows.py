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
from .content import attr_value, checksum_ok, message_parts, parse_msg_time
from .framing import TubeFrame

M_COMMIT = 18  # consumerCommitC2B

# The rows a connection makes one or more of per frame, gathered across frames (`Gathered`) as
# tuples of these columns, in this order; CONST: what every gathered row of the table has.
COMMANDS = (
    "ts_ns", "ts_end_ns", "direction", "correlation_id", "size", "stream_offset", "decode_status",
    "decode_error", "api_version", "command", "command_code", "topic", "partition", "client_id",
    "topics", "error_code", "details", "raw", "first_frame", "last_frame",
)  # fmt: skip
LATENCIES = (
    "ts_ns", "request_command", "response_command", "api_version", "correlation_id", "request_ts_ns",
    "response_ts_ns", "latency_us", "error_code", "topic", "partition",
)  # fmt: skip
ACKS = (
    "ts_ns", "ack_type", "topic", "partition", "offset", "consumer", "message_id", "error_code",
    "ack_latency_us", "correlation_id", "details",
)  # fmt: skip
PRODUCED = (  # messages rows of sendMessageP2B requests
    "ts_ns", "topic", "partition", "headers", "producer_name", "checksum_ok", "correlation_id",
    "message_ts_ns", "decode_status", "decode_error", "details", "value", "value_size", "value_hash",
    "first_frame", "last_frame",
)  # fmt: skip
COLUMNS = {"commands": COMMANDS, "latencies": LATENCIES, "acks": ACKS, "messages": PRODUCED}
CONST = {"messages": {"direction": "produce", "source": "capture"}}
BLOCK_ROWS = 1024  # gathered rows a connection holds before handing them over


class Gathered:
    """A connection's rows as it hands them over: the rows of COLUMNS' tables gathered as tuples
    (`add`) into one tables.Block per stretch of them; a row given whole (`put`: a dict row, a
    block of delivered messages) first ends its table's stretch, so each table's rows keep the
    order they were made in."""

    __slots__ = ("out", "pending", "held")

    def __init__(self) -> None:
        self.out: list[Row] = []
        self.pending: dict[str, list[tuple]] = {t: [] for t in COLUMNS}
        self.held = 0

    def add(self, table: str, values: tuple) -> None:
        self.pending[table].append(values)
        self.held += 1

    def put(self, table: str, row) -> None:
        if table in self.pending:
            self._end(table)
        self.out.append((table, row))

    def _end(self, table: str) -> None:
        rows = self.pending[table]
        if rows:
            cols = dict(zip(COLUMNS[table], map(list, zip(*rows))))
            self.out.append((table, Block(len(rows), cols, dict(CONST.get(table, ())))))
            self.pending[table] = []

    def take(self, everything: bool = False) -> list[Row]:
        """The rows made so far, with the gathered ones once BLOCK_ROWS are held (`everything`:
        all of them, the connection's end)."""
        if everything or self.held >= BLOCK_ROWS:
            for t in COLUMNS:
                self._end(t)
            self.held = 0
        out, self.out = self.out, []
        return out


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


def unanswered(out: Gathered, serial: int, p: Pending) -> None:
    """A request that got no response: its latency row with null response columns (and a
    commit's ack, marked as having no response)."""
    out.add(
        "latencies",
        (p.ts_end, p.name, None, p.api_version, serial, p.ts_end, None, None, None, p.topic, p.partition),
    )
    if p.method_id == M_COMMIT:
        details = to_json({"via": "consumerCommitC2B", "response": "missing"})
        out.add(
            "acks",
            (
                p.ts_end,
                "tubemq_commit",
                p.topic,
                p.partition,
                None,
                p.group,
                None,
                None,
                None,
                serial,
                details,
            ),
        )


def produce(out: Gathered, msg: dict, f: TubeFrame, policy: PayloadPolicy, frames: tuple) -> None:
    """sendMessageP2B (its fields, rpc.decode_body): the message a producer sent (`frames`: its
    frame's first_frame, last_frame)."""
    get = msg.get
    data = get("data") or b""
    flag = get("flag")
    attr, payload, err, headers = message_parts(data, flag)
    check_sum, msg_time = get("checkSum"), get("msgTime")
    details = to_json(
        {
            "flag": flag,
            "msg_type": get("msgType"),
            "msg_time": msg_time,
            "attributes": attr,
            "check_sum": check_sum,
            "sent_addr": ipv4(get("sentAddr")),
            "data_size": len(data),
        }
    )
    value = policy.value(payload)
    out.add(
        "messages",
        (
            f.ts_first, get("topicName"), get("partitionId"), headers, get("clientId"),
            checksum_ok(check_sum, data), f.serial,
            parse_msg_time(msg_time or attr_value(headers, "$msgTime$")), MALFORMED if err else OK, err,
            details, value["value"], value["value_size"], value.get("value_hash"), *frames,
        ),
    )  # fmt: skip


def deliver(
    msg: dict, f: TubeFrame, pend: Pending | None, policy: PayloadPolicy, frames: tuple
) -> Block | None:
    """getMessagesC2B's response: a row per message delivered to the consumer group, one block
    (tables.Block) for the pack (`frames`: the response frame's first_frame, last_frame)."""
    tms = msg.get("messages")
    if not tms:
        return None
    req_part = pend.partition if pend else None
    const = {
        "ts_ns": f.ts_first,
        "direction": "deliver",
        "source": "capture",
        "topic": pend.topic if pend else None,
        "consumer": pend.group if pend else None,  # the consumer group that fetched it
        "correlation_id": f.serial,
        "first_frame": frames[0],
        "last_frame": frames[1],
    }
    curr = base.json_value(msg.get("currOffset"))
    jv = base.json_value
    cols: dict[str, list] = {k: [] for k in _DELIVER_COLUMNS}
    values = []
    for tm in tms:
        get = tm.get
        data = get("payLoadData") or b""
        flag = get("flag")
        attr, payload, err, headers = message_parts(data, flag)
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
    return Block(len(values), cols, const)


_DELIVER_COLUMNS = (
    "partition", "message_id", "headers", "checksum_ok", "message_ts_ns", "decode_status", "decode_error", "details",
)  # fmt: skip


def confirm_ack(out: Gathered, msg: dict, f: TubeFrame, lat: float | None, off: int | None) -> None:
    """getMessagesC2B with lastPackConsumed=true confirms the previous pack of the partition
    (`lat`, `off`: since that pack's delivery, and its offset)."""
    get = msg.get
    details = to_json({"via": "getMessagesC2B", "client_id": get("clientId")})
    out.add(
        "acks",
        (
            f.ts_first, "tubemq_commit", get("topicName"), get("partitionId"), off, get("groupName"),
            None, None, lat, f.serial, details,
        ),
    )  # fmt: skip


def commit_ack(
    out: Gathered,
    msg: dict | None,
    f: TubeFrame,
    pend: Pending | None,
    error_code: int | None,
    lat: float | None,
) -> None:
    """consumerCommitC2B's response (`lat`: from the last delivery to the commit request)."""
    get = (msg or {}).get
    details = to_json(
        {
            "via": "consumerCommitC2B",
            "max_offset": get("maxOffset"),
            "client_id": pend.client_id if pend else None,
        }
    )
    topic, part, group = (pend.topic, pend.partition, pend.group) if pend else (None, None, None)
    out.add(
        "acks",
        (
            f.ts_first,
            "tubemq_commit",
            topic,
            part,
            get("currOffset"),
            group,
            None,
            error_code,
            lat,
            f.serial,
            details,
        ),
    )


def produce_ack(out: Gathered, msg: dict, f: TubeFrame, pend: Pending | None, error_code: int | None) -> None:
    """sendMessageP2B's response: the broker's message id and append offset."""
    get = msg.get
    mid = get("messageId")
    topic, part, lat = (
        (pend.topic, pend.partition, (f.ts_first - pend.ts_end) / 1000.0) if pend else (None, None, None)
    )
    out.add(
        "acks",
        (
            f.ts_first, "tubemq_produce", topic, part, get("appendOffset"), None,
            str(mid) if mid is not None else None, error_code, lat, f.serial,
            to_json({"append_time_ms": get("appendTime")}),
        ),
    )  # fmt: skip


def ipv4(v: int | None) -> str | None:
    """A 32-bit number (TubeMQ's sentAddr, reportAddr) as a dotted IPv4 address."""
    if v is None:
        return None
    return socket.inet_ntoa(_U32.pack(v & 0xFFFFFFFF))


_U32 = struct.Struct(">I")
