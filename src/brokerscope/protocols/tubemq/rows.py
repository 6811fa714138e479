"""TubeMQ's rows for the tables, built from decoded messages: pure functions, no connection
state (the conversation pairs requests and responses and hands over what it knows)."""

from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass

import pyarrow as pa

from ... import native, tables
from ...tables import Block
from .. import arrowcols, base
from ..base import MALFORMED, OK, PayloadPolicy, Row, json_value, to_json
from .content import attr_value, parse_msg_time
from .framing import TubeFrame

_rpc = native.load(__package__, "_rpc")  # compiled from _rpc.c: many messages' columns

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
    order they were made in. `commands`, `latencies`, `acks` and `messages` add a row's tuple to
    their table (the per-frame rows: a call less than `add`)."""

    __slots__ = ("out", "pending", "lists", "ended", "commands", "latencies", "acks", "messages")

    def __init__(self) -> None:
        self.out: list[Row] = []
        self.pending: dict[str, list[tuple]] = {t: [] for t in COLUMNS}
        self.lists = tuple(self.pending.values())  # the same lists, to count them in one call
        self.ended = 0  # rows gathered since the last take of everything that `put` handed over
        self.commands, self.latencies, self.acks, self.messages = (self.pending[t].append for t in COLUMNS)

    def add(self, table: str, values: tuple) -> None:
        self.pending[table].append(values)

    def put(self, table: str, row) -> None:
        if table in self.pending:
            self.ended += self._end(table)
        self.out.append((table, row))

    def _end(self, table: str) -> int:
        """Hand over the table's gathered rows as a block; how many."""
        rows = self.pending[table]
        n = len(rows)
        if n:
            cols = dict(zip(COLUMNS[table], columns(table, rows)))
            self.out.append((table, Block(n, cols, dict(CONST.get(table, ())))))
            rows.clear()  # the list stays: its append is bound above
        return n

    def take(self, everything: bool = False) -> list[Row]:
        """The rows made so far, with the gathered ones once BLOCK_ROWS were gathered since the
        last time (`everything`: all of them, the connection's end)."""
        if everything or self.ended + sum(map(len, self.lists)) >= BLOCK_ROWS:
            for t in COLUMNS:
                self._end(t)
            self.ended = 0
        out, self.out = self.out, []
        return out


def _kind(table: str, name: str) -> str:
    """What _rpc.transpose makes of a gathered column: by the type of its table column."""
    sch = tables.schema(table)
    typ = sch.field(name).type if name in sch.names else pa.int64()  # an `X_ns` key
    if typ == pa.int32():
        return "n"
    if pa.types.is_integer(typ):
        return "i"
    if pa.types.is_floating(typ):
        return "f"
    return {pa.string(): "s", pa.binary(): "b", pa.bool_(): "?", arrowcols.HEADERS: "h"}.get(typ, "o")


@functools.cache
def kinds(table: str, names: tuple[str, ...]) -> bytes:
    """_rpc.transpose's kinds of these columns of `table`."""
    return "".join(_kind(table, c) for c in names).encode()


_FIXED = {ord("i"): pa.int64(), ord("n"): pa.int32(), ord("f"): pa.float64(), ord("?"): pa.bool_()}
_VAR = {ord("s"): pa.string(), ord("b"): pa.binary()}


def columns(table: str, rows: list[tuple], names: tuple[str, ...] | None = None) -> list:
    """The gathered rows of `table` (tuples of its `names`, COLUMNS[table] by default) as columns:
    Arrow arrays wrapped around the buffers _rpc.transpose writes (int32 columns as int32, other
    ints as int64, which conform casts to the column's type), a list of the values where the kind
    is none of those or a value does not fit it."""
    n, out, want = len(rows), [], kinds(table, names or COLUMNS[table])
    for kind, got in zip(want, _rpc.transpose(rows, want)):
        if got.__class__ is list:
            out.append(got)
        elif kind in _FIXED:
            valid, values, nulls = got
            out.append(arrowcols.fixed(_FIXED[kind], n, values, valid, nulls))
        elif kind == ord("h"):
            offsets, keys, values = got
            out.append(
                arrowcols.headers(n, offsets, arrowcols.binary(keys, pa.string()), arrowcols.binary(values))
            )
        else:
            out.append(arrowcols.binary(got, _VAR[kind]))
    return out


@dataclass(slots=True)
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
    (payload,), (err,), (headers,), (ok,), (details,), _ = message_columns(
        [msg], "data", PRODUCE_DETAILS if policy.checksums_kept else PRODUCE_DETAILS_NO_SUM, "}"
    )
    value = policy.value(payload)
    out.messages(
        (
            f.ts_first, get("topicName"), get("partitionId"), headers, get("clientId"), ok, f.serial,
            produced_time(get("msgTime"), headers), MALFORMED if err else OK, err,
            details, value["value"], value["value_size"], value.get("value_hash"), *frames,
        )
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
    tail = f',"curr_offset":{base.json_value(msg.get("currOffset"))}}}'
    spec = DELIVER_DETAILS if policy.checksums_kept else DELIVER_DETAILS_NO_SUM
    values, errors, headers, oks, details, sizes = message_columns(tms, "payLoadData", spec, tail)
    parts = [tm.get("partitionId") for tm in tms]
    ids = [tm.get("messageId") for tm in tms]
    recv = [tm.get("recvTimeInMs") for tm in tms]
    given = (
        [req_part if p is None else p for p in parts],
        [None if m is None else str(m) for m in ids],
        headers,
        oks,
        [r * 1_000_000 if r else parse_msg_time(attr_value(h, "$msgTime$")) for r, h in zip(recv, headers)],
        [MALFORMED if e else OK for e in errors],
        errors,
        details,
    )
    cols: dict = dict(zip(DELIVERED, columns("messages", list(zip(*given)), DELIVERED)))
    cols.update(policy.value_columns(pa.array(values, pa.binary()), pa.array(sizes, pa.int64())))
    return Block(len(values), cols, const)


# the columns of a delivered pack that rows.deliver gives as columns (Arrow, by _rpc.transpose)
DELIVERED = (
    "partition", "message_id", "headers", "checksum_ok", "message_ts_ns", "decode_status", "decode_error", "details",
)  # fmt: skip


# the `details` of a delivered message and of a produced one (message_columns' spec: JSON key,
# field, what the value is)
_VALUE, _IPV4, _ATTRIBUTES, _SIZE = range(4)  # _rpc.c's J_VALUE, J_IPV4, J_ATTRIBUTES, J_SIZE
DELIVER_DETAILS = (
    ('{"flag":', "flag", _VALUE),
    (',"attributes":', None, _ATTRIBUTES),
    (',"check_sum":', "checkSum", _VALUE),
    (',"index_key_code":', "indexKeyCode", _VALUE),
    (',"report_addr":', "reportAddr", _IPV4),
    (',"recv_time_ms":', "recvTimeInMs", _VALUE),
    (',"data_size":', None, _SIZE),
)
PRODUCE_DETAILS = (
    ('{"flag":', "flag", _VALUE),
    (',"msg_type":', "msgType", _VALUE),
    (',"msg_time":', "msgTime", _VALUE),
    (',"attributes":', None, _ATTRIBUTES),
    (',"check_sum":', "checkSum", _VALUE),
    (',"sent_addr":', "sentAddr", _IPV4),
    (',"data_size":', None, _SIZE),
)
# the same without the message's checksum, a CRC of its data (PayloadPolicy.checksums_kept)
DELIVER_DETAILS_NO_SUM = tuple(e for e in DELIVER_DETAILS if e[1] != "checkSum")
PRODUCE_DETAILS_NO_SUM = tuple(e for e in PRODUCE_DETAILS if e[1] != "checkSum")


# the specs as _rpc.columns takes them, read once (by the id of the constant)
_SPECS = {
    id(spec): _rpc.details_spec(spec)
    for spec in (DELIVER_DETAILS, PRODUCE_DETAILS, DELIVER_DETAILS_NO_SUM, PRODUCE_DETAILS_NO_SUM)
}
PRODUCE_SPEC = _SPECS[id(PRODUCE_DETAILS)]  # _rpc.exchanges' produced messages


def produced_time(msg_time: str | None, headers: list[dict]) -> int | None:
    """A produced message's message_ts_ns: its msgTime, else its `$msgTime$` attribute."""
    return parse_msg_time(msg_time or attr_value(headers, "$msgTime$"))


def message_columns(msgs: list[dict], payload: str, spec: tuple, tail: str) -> tuple[list, ...]:
    """(payloads, errors, headers, checksum_ok, details, payload sizes) of messages' fields: each
    one's data (`payload`) split by content.message_parts, its checksum checked as
    content.checksum_ok checks it, its details JSON by `spec` then `tail` (compiled:
    _rpc.columns)."""
    compiled = _SPECS.get(id(spec)) or _rpc.details_spec(spec)
    return _rpc.columns(msgs, payload, "flag", "checkSum", compiled, tail, zlib.crc32, base.json_value)


def confirm_ack(out: Gathered, msg: dict, f: TubeFrame, lat: float | None, off: int | None) -> None:
    """getMessagesC2B with lastPackConsumed=true confirms the previous pack of the partition
    (`lat`, `off`: since that pack's delivery, and its offset)."""
    get = msg.get
    details = '{"via":"getMessagesC2B","client_id":' + json_value(get("clientId")) + "}"
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
    out.acks(
        (
            f.ts_first, "tubemq_produce", topic, part, get("appendOffset"), None,
            str(mid) if mid is not None else None, error_code, lat, f.serial,
            '{"append_time_ms":' + json_value(get("appendTime")) + "}",
        )
    )  # fmt: skip
