"""One TubeMQ TCP connection: frames of both directions -> commands, messages, latencies, acks.

Requests and responses are paired by serialNo. What each frame becomes:

- every frame: one `commands` row named after its RPC method (`sendMessageP2B`, ...);
- sendMessageP2B request: one `messages` row, direction `produce`;
- getMessagesC2B response: one `messages` row per TransferedMessage, direction `deliver`;
- consumerCommitC2B response, and getMessagesC2B requests with lastPackConsumed (TubeMQ's
  consumption confirmation): `acks` rows of type `tubemq_commit`;
- sendMessageP2B response: an `acks` row of type `tubemq_produce` (the broker's message id and
  append offset);
- each request: one `latencies` row (null response columns when no response came).
"""

from __future__ import annotations

import datetime as _dt
import zlib
from collections import OrderedDict
from dataclasses import dataclass

from ..base import (
    C2S,
    MALFORMED,
    OK,
    REQUEST_MISSING,
    S2C,
    TRUNCATED,
    UNKNOWN_COMMAND,
    ConnInfo,
    Context,
    Conversation,
    Row,
    to_json,
)
from ..framer import Framer, Junk
from ..schema import MessagePool
from . import rpc
from .framing import HEADER_LEN, TubeFrame, TubeRules, header_info, read_frame

MAX_PENDING = 100_000
MAX_STACK_CHARS = 4000
FLAG_HAS_ATTRIBUTE = 0x01  # TransferedMessage / SendMessageRequestP2B flag bit: data starts with attributes

M_SEND = 13
M_GET = 17
M_COMMIT = 18
M_CONSUMER_REGISTER_B = 15


def tube_checksum(data: bytes) -> int:
    """TubeMQ's message checksum: CRC32 (zlib polynomial) with the sign bit cleared."""
    return zlib.crc32(data) & 0x7FFFFFFF


def _checksum_ok(expected: int | None, data: bytes) -> bool | None:
    """None when no checksum was sent (TubeMQ's Java producer always sends -1), else whether it
    equals TubeMQ's checksum (CheckSum.crc32: CRC32 & 0x7FFFFFFF, the only form TubeMQ computes
    and the only one its consumer accepts)."""
    if expected is None or expected == -1:
        return None
    return expected == tube_checksum(data)


def split_payload(data: bytes, flag: int | None) -> tuple[str | None, bytes, str | None]:
    """(attribute text, payload, error) of an attribute-prefixed message body.

    Layout when flag bit 0 is set: int32 attribute length (big-endian) | attribute (UTF-8) | payload.
    """
    if flag is None or not flag & FLAG_HAS_ATTRIBUTE:
        return None, data, None
    if len(data) < 4:
        return None, data, f"flag says attributes follow but data is only {len(data)} bytes"
    n = int.from_bytes(data[:4], "big", signed=True)
    if n < 0 or n > len(data) - 4:
        return None, data, f"attribute length {n} outside 0..{len(data) - 4}"
    attr = data[4 : 4 + n].decode("utf-8", errors="replace")
    return attr, data[4 + n :], None


def parse_attributes(attr: str | None) -> list[dict]:
    """TubeMQ attributes `k1=v1,k2=v2` as header dicts (keys may repeat)."""
    if not attr:
        return []
    out = []
    for item in attr.split(","):
        if not item:
            continue
        k, sep, v = item.partition("=")
        out.append({"key": k, "value": v.encode("utf-8") if sep else b""})
    return out


def _text(s: str | bytes) -> str:
    """A protobuf string field as text. A proto2 string that is not UTF-8 comes back from the
    parser as bytes: its bytes are kept visible (backslash escapes), never an exception."""
    return s.decode("utf-8", "backslashreplace") if isinstance(s, bytes) else s


def parse_msg_time(s: str | bytes | None) -> int | None:
    """TubeMQ msgTime `yyyyMMddHHmm` (producer's clock, taken as UTC) -> ns since the epoch."""
    if not s:
        return None
    s = _text(s)
    for fmt in ("%Y%m%d%H%M", "%Y%m%d%H%M%S"):
        try:
            t = _dt.datetime.strptime(s.strip(), fmt).replace(tzinfo=_dt.UTC)
            return int(t.timestamp()) * 1_000_000_000
        except ValueError:
            continue
    return None


def _attr_value(headers: list[dict], key: str) -> str | None:
    for h in headers:
        if h["key"] == key:
            return h["value"].decode("utf-8", errors="replace")
    return None


def parse_broker_info(s: str | bytes) -> dict:
    """`brokerId:host:port` -> dict (unparsable parts kept as text)."""
    s = _text(s)
    parts = s.split(":")
    out: dict = {"info": s}
    if parts and parts[0].lstrip("-").isdigit():
        out["broker_id"] = int(parts[0])
    if len(parts) > 1:
        out["host"] = parts[1]
    if len(parts) > 2 and parts[2].isdigit():
        out["port"] = int(parts[2])
    return out


def parse_topic_info(s: str | bytes, brokers: dict[int, dict] | None = None) -> dict:
    """A producer heartbeat's topicInfos entry -> dict.

    Layout (TubeMQ's DataConverterUtil.convertTopicInfo, separators from TokenConstants):
    `topic#brokerId:partitionNum:storeNum[,brokerId:partitionNum:storeNum...][#maxMsgSizeInB]`.
    `brokers` (broker id -> parse_broker_info of the same response's brokerInfos) adds host/port.
    """
    s = _text(s)
    out: dict = {"info": s}
    seg = s.strip().split("#")
    if len(seg) < 2:
        return out
    out["topic"] = seg[0]
    parts: list[dict] = []
    for item in seg[1].split(","):
        f = item.split(":")
        if len(f) < 3 or not all(x.strip().lstrip("-").isdigit() for x in f[:3]):
            if item:
                parts.append({"info": item})
            continue
        bid, num, stores = (int(x) for x in f[:3])
        p: dict = {"broker_id": bid, "partitions": num, "stores": stores}
        b = (brokers or {}).get(bid)
        if b is not None:
            p.update({k: b[k] for k in ("host", "port") if k in b})
        parts.append(p)
    out["brokers"] = parts
    out["partition_count"] = sum(p.get("partitions", 0) * p.get("stores", 1) for p in parts)
    if len(seg) > 2 and seg[2].strip().isdigit():
        out["max_msg_size"] = int(seg[2])
    return out


def parse_subscribe_info(s: str | bytes) -> dict:
    """`consumerId@group#brokerId:host:port#topic:partitionId` (TubeMQ writes `#` or `-` between
    the three parts) -> dict."""
    s = _text(s)
    out: dict = {"info": s}
    sep = "#" if "#" in s else "-"
    parts = s.rsplit(sep, 2)
    if len(parts) == 3:
        consumer, broker, tp = parts
        cid, _, group = consumer.partition("@")
        out["consumer_id"] = cid
        out["group"] = group
        out["broker"] = parse_broker_info(broker)
        topic, _, part = tp.rpartition(":")
        out["topic"] = topic
        if part.lstrip("-").isdigit():
            out["partition"] = int(part)
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


class TubeMQConversation(Conversation):
    def __init__(self, conn: ConnInfo, ctx: Context):
        super().__init__(conn, ctx)
        max_frame = ctx.max_frame_bytes  # [protocols.tubemq] max_frame_bytes is applied by the config
        # a frame starts with the begin token: a capture that starts mid-frame resyncs on it
        self.framer = {d: Framer(TubeRules(max_frame), max_frame) for d in (C2S, S2C)}
        self.pending: OrderedDict[int, Pending] = OrderedDict()
        # the user's schema_file, checked on the driver when the settings were loaded
        fds = ctx.schemas.get("tubemq")
        self.schema = MessagePool.from_bytes(fds) if fds else None
        # last delivery per (topic, partition): (ts of the response's first byte, currOffset)
        self.deliveries: dict[tuple, tuple[int, int | None]] = {}

    # -- contract -----------------------------------------------------------------------------

    def feed(self, direction: str, data: bytes, ts_ns: int) -> list[Row]:
        if not data:
            return []
        self.framer[direction].push(data, ts_ns)
        return self._drain(direction)

    def gap(self, direction: str, nbytes: int, ts_ns: int) -> list[Row]:
        fr = self.framer[direction]
        try:
            junk, _ = fr.gap(nbytes, ts_ns)
        except Exception as e:  # never raise out of the decoder
            return [self._error_row(direction, fr.buf.offset, 0, ts_ns, f"internal error on gap: {e!r}")]
        return [self._junk_row(direction, j) for j in junk] + self._drain(direction)

    def close(self) -> list[Row]:
        rows: list[Row] = []
        for direction, fr in self.framer.items():
            rows.extend(self._drain(direction))
            try:
                junk = fr.close()
            except Exception as e:
                rows.append(
                    self._error_row(direction, fr.buf.offset, 0, fr.buf.last_ts, f"internal error: {e!r}")
                )
                continue
            rows.extend(self._junk_row(direction, j) for j in junk)
        while self.pending:
            serial, p = self.pending.popitem(last=False)
            rows.extend(self._unanswered(serial, p))
        return rows

    # -- framing ------------------------------------------------------------------------------

    def _drain(self, direction: str) -> list[Row]:
        fr = self.framer[direction]
        rows: list[Row] = []
        while True:
            try:
                item = fr.next()
            except Exception as e:  # a bug must not stop the connection: drop what is buffered
                off, n, ts = fr.drop_all()
                rows.append(self._error_row(direction, off, n, ts, f"internal framing error: {e!r}"))
                continue
            if item is None:
                return rows
            if isinstance(item, Junk):
                rows.append(self._junk_row(direction, item))
                continue
            f = read_frame(item)
            try:
                rows.extend(self._frame(direction, f))
            except Exception as e:
                err = f"internal error: {e!r}"
                rows.append(
                    self._error_row(direction, f.offset, f.size, f.ts_first, err, f.ts_last, f.serial)
                )

    def _error_row(self, direction, offset, size, ts, err, ts_end=None, serial=None) -> Row:
        return (
            "commands",
            {
                "ts_ns": ts,
                "ts_end_ns": ts_end if ts_end is not None else ts,
                "direction": direction,
                "correlation_id": serial,
                "size": size,
                "stream_offset": offset,
                "decode_status": MALFORMED,
                "decode_error": err,
            },
        )

    def _junk_row(self, direction: str, j: Junk) -> Row:
        """Bytes that are not a whole frame; what its header told, if the rules read one."""
        info = j.info or (header_info(j.head) if j.status == TRUNCATED else None)
        return (
            "commands",
            {
                "ts_ns": j.ts_first,
                "ts_end_ns": j.ts_last,
                "direction": direction,
                "correlation_id": info.get("serial") if info else None,
                "size": j.size,
                "stream_offset": j.offset,
                "decode_status": j.status,
                "decode_error": j.reason,
                "details": to_json(info) if info else None,
            },
        )

    # -- frames -------------------------------------------------------------------------------

    def _frame(self, direction: str, f: TubeFrame) -> list[Row]:
        row: dict = {
            "ts_ns": f.ts_first,
            "ts_end_ns": f.ts_last,
            "direction": direction,
            "correlation_id": f.serial,
            "size": f.size,
            "stream_offset": f.offset,
            "decode_status": OK,
        }
        details: dict = {"serial": f.serial, "blocks": f.block_sizes}
        try:
            env = rpc.decode_envelope(f.body)
        except ValueError as e:
            row.update(
                decode_status=MALFORMED,
                decode_error=f"RPC envelope: {e}",
                details=to_json(details),
            )
            return [("commands", row)]
        details["flag"] = env.flag
        details["rpc_header"] = env.conn_header
        if env.service_type is not None:
            details["service_type"] = env.service_type
            details["service"] = rpc.SERVICES.get(env.service_type, "unknown")
        if env.protocol_ver is not None:
            details["protocol_ver"] = env.protocol_ver
        if env.trailing:
            details["trailing_bytes"] = env.trailing
        row["api_version"] = env.protocol_ver
        if env.is_request:
            return self._request(row, details, env, f)
        return self._response(row, details, env, f)

    def _request(self, row: dict, details: dict, env: rpc.Envelope, f: TubeFrame) -> list[Row]:
        rows: list[Row] = []
        mid = env.method_id
        meth = rpc.METHODS.get(mid) if mid is not None else None
        row["command"] = rpc.method_name(mid)
        row["command_code"] = mid
        if env.timeout is not None:
            details["timeout_ms"] = env.timeout
        if meth is not None and env.service_type is not None and env.service_type not in meth.services:
            details["service_mismatch"] = True
        msg, body, err = rpc.decode_body(mid, True, env.body, self.schema)
        details["request"] = body
        self._body_status(row, meth, mid, err, f)
        topic = partition = client_id = group = None
        if msg is not None:
            topic = _field(msg, "topicName")
            partition = _field(msg, "partitionId")
            client_id = _field(msg, "clientId") or _field(msg, "brokerId")
            group = _field(msg, "groupName")
            topics = list(getattr(msg, "topicList", []) or [])
            if topics:
                row["topics"] = topics
            if mid == M_CONSUMER_REGISTER_B:
                details["op"] = rpc.OP_TYPES.get(msg.opType, str(msg.opType))
            subs = list(getattr(msg, "subscribeInfo", []) or [])
            if subs:
                details["subscriptions"] = [parse_subscribe_info(s) for s in subs]
            event = _field(msg, "event")
            if event is not None:
                details["event_status"] = rpc.EVENT_STATUS.get(event.status, str(event.status))
        row.update(topic=topic, partition=partition, client_id=client_id, details=to_json(details))
        rows.append(("commands", row))
        # pairing
        if f.serial in self.pending:
            rows.extend(self._unanswered(f.serial, self.pending.pop(f.serial)))
        self.pending[f.serial] = Pending(
            mid, row["command"], f.ts_last, topic, partition, client_id, group, env.protocol_ver
        )
        while len(self.pending) > MAX_PENDING:
            s, p = self.pending.popitem(last=False)
            rows.extend(self._unanswered(s, p))
        if msg is not None and mid == M_SEND:
            rows.append(self._produce(msg, f))
        if msg is not None and mid == M_GET and _field(msg, "lastPackConsumed"):
            rows.append(self._confirm_ack(msg, f))
        return rows

    def _response(self, row: dict, details: dict, env: rpc.Envelope, f: TubeFrame) -> list[Row]:
        rows: list[Row] = []
        pend = self.pending.pop(f.serial, None)
        mid = env.method_id if env.method_id is not None else (pend.method_id if pend else None)
        if pend is not None and env.method_id is not None and pend.method_id != env.method_id:
            details["request_method"] = pend.method_id
        details["status"] = rpc.STATUS.get(env.status, str(env.status))
        error_code: int | None = None
        msg = None
        if env.status != 0:
            error_code = env.status
            row["command"] = rpc.method_name(mid) if mid is not None else "exception"
            row["command_code"] = mid
            stack = env.stack_trace or ""
            details["exception"] = env.exception_name
            details["stack_trace"] = stack[:MAX_STACK_CHARS]
            first = stack.strip().splitlines()[0] if stack.strip() else ""
            row["decode_error"] = (
                f"{env.exception_name}: {first}" if first else (env.exception_name or "exception")
            )
            if pend is None:
                row["decode_status"] = REQUEST_MISSING
        else:
            row["command"] = rpc.method_name(mid)
            row["command_code"] = mid
            meth = rpc.METHODS.get(mid) if mid is not None else None
            msg, body, err = rpc.decode_body(mid, False, env.body, self.schema)
            details["response"] = body
            self._body_status(row, meth, mid, err, f)
            if msg is not None:
                success = _field(msg, "success")
                code = _field(msg, "errCode")
                if success is False or (success is None and code is not None and code != rpc.ERR_SUCCESS):
                    error_code = code if code is not None else -1
                    details["error"] = _field(msg, "errMsg")
                elif success is True or code is not None:
                    error_code = 0
                self._metadata(msg, details)
        topic = pend.topic if pend else None
        partition = pend.partition if pend else None
        row.update(
            topic=topic,
            partition=partition,
            client_id=pend.client_id if pend else None,
            error_code=error_code,
            details=to_json(details),
        )
        rows.append(("commands", row))
        if pend is not None:
            rows.append(
                (
                    "latencies",
                    {
                        "ts_ns": pend.ts_end,
                        "request_command": pend.name,
                        "response_command": row["command"],
                        "api_version": pend.api_version,
                        "correlation_id": f.serial,
                        "request_ts_ns": pend.ts_end,
                        "response_ts_ns": f.ts_first,
                        "latency_us": (f.ts_first - pend.ts_end) / 1000.0,
                        "error_code": error_code,
                        "topic": topic,
                        "partition": partition,
                    },
                )
            )
        if msg is not None and mid == M_GET:
            rows.extend(self._deliver(msg, f, pend))
        if mid == M_COMMIT and (msg is not None or env.status != 0):
            rows.append(self._commit_ack(msg, f, pend, error_code))
        if msg is not None and mid == M_SEND:
            rows.append(self._produce_ack(msg, f, pend, error_code))
        return rows

    def _body_status(self, row: dict, meth, mid, err: str | None, f: TubeFrame) -> None:
        """An unknown method id or a body that does not parse: the row's status and error; raw
        bytes only for methods that carry no credentials."""
        if meth is None:
            row["decode_status"] = UNKNOWN_COMMAND
            row["decode_error"] = f"unknown TubeMQ method id {mid}"
        elif err:
            row["decode_status"] = MALFORMED
            row["decode_error"] = err
            row["raw"] = self.ctx.raw(f.wire, typed=not meth.carries_auth)

    def _metadata(self, msg, details: dict) -> None:
        """Broker lists, topic metadata and partition assignments, parsed for `details`."""
        brokers = list(getattr(msg, "brokerInfos", []) or [])
        parsed = [parse_broker_info(b) for b in brokers]
        if parsed:
            details["brokers"] = parsed
        topic_infos = list(getattr(msg, "topicInfos", []) or [])  # HeartResponseM2P only
        if topic_infos:
            by_id = {b["broker_id"]: b for b in parsed if "broker_id" in b}
            details["topic_infos"] = [parse_topic_info(t, by_id) for t in topic_infos]
        event = _field(msg, "event")
        if event is not None:
            details["event_status"] = rpc.EVENT_STATUS.get(event.status, str(event.status))
            details["assigned"] = [parse_subscribe_info(s) for s in event.subscribeInfo]

    def _unanswered(self, serial: int, p: Pending) -> list[Row]:
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

    # -- messages and acks ----------------------------------------------------------------------

    def _produce(self, msg, f: TubeFrame) -> Row:
        data = bytes(msg.data)
        flag = _field(msg, "flag")
        attr, payload, err = split_payload(data, flag)
        headers = parse_attributes(attr)
        row: dict = {
            "ts_ns": f.ts_first,
            "direction": "produce",
            "source": "capture",
            "topic": _field(msg, "topicName"),
            "partition": _field(msg, "partitionId"),
            "headers": headers,
            "producer_name": _field(msg, "clientId"),
            "checksum_ok": _checksum_ok(_field(msg, "checkSum"), data),
            "correlation_id": f.serial,
            "message_ts_ns": parse_msg_time(_field(msg, "msgTime") or _attr_value(headers, "$msgTime$")),
            "decode_status": MALFORMED if err else OK,
            "decode_error": err,
            "details": to_json(
                {
                    "flag": flag,
                    "msg_type": _field(msg, "msgType"),
                    "msg_time": _field(msg, "msgTime"),
                    "attributes": attr,
                    "check_sum": _field(msg, "checkSum"),
                    "sent_addr": _ipv4(_field(msg, "sentAddr")),
                    "data_size": len(data),
                }
            ),
        }
        row.update(self.ctx.payload.value(payload))
        return ("messages", row)

    def _deliver(self, msg, f: TubeFrame, pend: Pending | None) -> list[Row]:
        rows: list[Row] = []
        topic = pend.topic if pend else None
        req_part = pend.partition if pend else None
        for tm in msg.messages:
            data = bytes(tm.payLoadData)
            flag = _field(tm, "flag")
            attr, payload, err = split_payload(data, flag)
            headers = parse_attributes(attr)
            part = _field(tm, "partitionId")
            recv_ms = _field(tm, "recvTimeInMs")
            ts_msg = recv_ms * 1_000_000 if recv_ms else parse_msg_time(_attr_value(headers, "$msgTime$"))
            cs = _field(tm, "checkSum")
            row: dict = {
                "ts_ns": f.ts_first,
                "direction": "deliver",
                "source": "capture",
                "topic": topic,
                "partition": part if part is not None else req_part,
                "message_id": str(tm.messageId) if tm.HasField("messageId") else None,
                "consumer": pend.group if pend else None,  # the consumer group that fetched it
                "headers": headers,
                "checksum_ok": _checksum_ok(cs, data),
                "correlation_id": f.serial,
                "message_ts_ns": ts_msg,
                "decode_status": MALFORMED if err else OK,
                "decode_error": err,
                "details": to_json(
                    {
                        "flag": flag,
                        "attributes": attr,
                        "check_sum": cs,
                        "index_key_code": _field(tm, "indexKeyCode"),
                        "report_addr": _ipv4(_field(tm, "reportAddr")),
                        "recv_time_ms": recv_ms,
                        "data_size": len(data),
                        "curr_offset": _field(msg, "currOffset"),
                    }
                ),
            }
            row.update(self.ctx.payload.value(payload))
            rows.append(("messages", row))
        key = (topic, req_part)
        self.deliveries[key] = (f.ts_first, _field(msg, "currOffset"))
        if len(self.deliveries) > MAX_PENDING:
            self.deliveries.pop(next(iter(self.deliveries)))
        return rows

    def _latency_from_delivery(self, topic, partition, ts: int) -> tuple[float | None, int | None]:
        d = self.deliveries.get((topic, partition))
        if d is None:
            return None, None
        return (ts - d[0]) / 1000.0, d[1]

    def _confirm_ack(self, msg, f: TubeFrame) -> Row:
        """getMessagesC2B with lastPackConsumed=true confirms the previous pack of the partition."""
        topic, part = _field(msg, "topicName"), _field(msg, "partitionId")
        lat, off = self._latency_from_delivery(topic, part, f.ts_last)
        return (
            "acks",
            {
                "ts_ns": f.ts_first,
                "ack_type": "tubemq_commit",
                "topic": topic,
                "partition": part,
                "offset": off,
                "consumer": _field(msg, "groupName"),
                "ack_latency_us": lat,
                "correlation_id": f.serial,
                "details": to_json({"via": "getMessagesC2B", "client_id": _field(msg, "clientId")}),
            },
        )

    def _commit_ack(self, msg, f: TubeFrame, pend: Pending | None, error_code: int | None) -> Row:
        topic = pend.topic if pend else None
        part = pend.partition if pend else None
        lat = None
        if pend is not None:
            lat, _ = self._latency_from_delivery(topic, part, pend.ts_end)
        return (
            "acks",
            {
                "ts_ns": f.ts_first,
                "ack_type": "tubemq_commit",
                "topic": topic,
                "partition": part,
                "offset": _field(msg, "currOffset") if msg is not None else None,
                "consumer": pend.group if pend else None,
                "error_code": error_code,
                "ack_latency_us": lat,
                "correlation_id": f.serial,
                "details": to_json(
                    {
                        "via": "consumerCommitC2B",
                        "max_offset": _field(msg, "maxOffset") if msg is not None else None,
                        "client_id": pend.client_id if pend else None,
                    }
                ),
            },
        )

    def _produce_ack(self, msg, f: TubeFrame, pend: Pending | None, error_code: int | None) -> Row:
        mid = _field(msg, "messageId")
        return (
            "acks",
            {
                "ts_ns": f.ts_first,
                "ack_type": "tubemq_produce",
                "topic": pend.topic if pend else None,
                "partition": pend.partition if pend else None,
                "offset": _field(msg, "appendOffset"),
                "message_id": str(mid) if mid is not None else None,
                "error_code": error_code,
                "ack_latency_us": (f.ts_first - pend.ts_end) / 1000.0 if pend else None,
                "correlation_id": f.serial,
                "details": to_json({"append_time_ms": _field(msg, "appendTime")}),
            },
        )


def _field(msg, name: str):
    """msg.name if the message has that field and it is set, else None."""
    try:
        return getattr(msg, name) if msg.HasField(name) else None
    except ValueError:  # no such field (or repeated)
        return None


def _ipv4(v: int | None) -> str | None:
    if v is None:
        return None
    v &= 0xFFFFFFFF
    return ".".join(str((v >> s) & 0xFF) for s in (24, 16, 8, 0))


__all__ = [
    "TubeMQConversation",
    "HEADER_LEN",
    "tube_checksum",
    "split_payload",
    "parse_topic_info",
    "parse_subscribe_info",
]
