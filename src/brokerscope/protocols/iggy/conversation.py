"""One Iggy TCP connection: framing (three generations), pairing, and rows.

Framings, detected per connection from the first request (all little-endian):
- classic (the spec): request [length u32][code u32][payload], length = 4 + payload;
  response [status u32][length u32][payload]; responses come in request order (FIFO pairing,
  correlation_id = the request's 1-based ordinal on the connection).
- request id (apache/iggy "server-ng" `RequestFrame2`/`ResponseFrame2`): request
  [length u32][code u32][request_id u64][payload], length = 12 + payload; response
  [status u32][length u32][request_id u64][payload], length = 8 + payload; paired by request id.
- VSR (consensus headers of apache/iggy core/binary_protocol/src/consensus/header.rs, the
  client-wire version spoken by apache-iggy 0.9 clients): a 256-byte header (checksum u128,
  checksum_body u128, cluster u128, size u32 @48 = header + body, view u32, release u32,
  command u8 @60, replica u8 @61, ...) then the body. Requests carry client u128 @128,
  request_checksum @144, request u64 @168, operation u8 @176, session u64 @184, user_id u32
  @192 and (non-replicated) the command code u32 @196; replies carry commit u64 @184,
  request u64 @200, operation u8 @208 and status u32 @216. One request in flight: FIFO pairing.
  Bodies are the classic payloads; metadata / offset-write / register replies lead with a
  result section (consensus/reply_result.rs).
"""

from __future__ import annotations

import struct
from collections import OrderedDict, deque

from .. import base
from ..base import C2S, S2C, ConnInfo, Context, Conversation, Row, StreamBuffer
from ..framer import Frame, Framer, Junk, Rules
from .codes import (
    COMMANDS,
    EMPTY_REQUEST,
    EVICTION_REASONS,
    REQUEST_HEADER,
    REQUEST_ID,
    RESPONSE_HEADER,
    VSR_COMMANDS,
    VSR_COMMON,
    VSR_EVICTION,
    VSR_HEADER_LEN,
    VSR_NON_REPLICATED,
    VSR_OPERATION_CODES,
    VSR_OPERATIONS,
    VSR_REGISTER,
    VSR_REPLY,
    VSR_REQUEST,
    read_layout,
    result_framed,
)
from .commands import (
    SECRET_REQUESTS,
    SECRET_RESPONSES,
    cluster_metadata,
    decode_request,
    decode_response,
    protocol_version_text,
    register,
    register_reply,
    send_confirmations,
    stream_details_vsr,
    topic_details_vsr,
)
from .wire import DecodeError, Truncated, topic_name

CLASSIC = "classic"
REQID = "request_id"
VSR = "vsr"
VSR_HEADER = VSR_HEADER_LEN
MAX_PENDING = 100_000
MAX_DELIVERED = 100_000
MAX_STATUS = 100_000  # Iggy error codes are small numbers
LOGIN_CODES = frozenset({38, 40, 44, 45})
RESYNC_MAX_STATUS = 10_000  # stricter when hunting for a response header in garbage
# a resync candidate whose request id is at most this far past the latest request's continues the
# connection (clients count request ids up by one)
REQ_ID_WINDOW = 1 << 16
_II = struct.Struct("<II")


def _vsr_or_classic(vsr_decoder, code: int):
    """The VSR-generation layout first; a reply in the classic shape still decodes."""

    def dec(payload) -> dict:
        try:
            return vsr_decoder(payload)
        except DecodeError:
            return decode_response(code, payload)

    return dec


# reply payload decoders of the VSR generation, by the request's command code
VSR_RESPONSES = {
    40: register_reply,
    12: cluster_metadata,
    101: send_confirmations,
    200: _vsr_or_classic(stream_details_vsr, 200),
    202: _vsr_or_classic(stream_details_vsr, 202),
    300: _vsr_or_classic(topic_details_vsr, 300),
    302: _vsr_or_classic(topic_details_vsr, 302),
}


def plausible_request(buf, pos: int, max_len: int) -> bool:
    """A classic/request-id request header at pos: length within bounds and a known code."""
    if len(buf) - pos < 8:
        return False
    length, code = _II.unpack_from(buf, pos)
    return 4 <= length <= max_len and code in COMMANDS


def plausible_vsr(buf, pos: int = 0) -> bool:
    if len(buf) - pos < 64:
        return False
    h = read_layout(VSR_COMMON, buf, pos)
    return h["size"] >= VSR_HEADER and h["command"] in VSR_COMMANDS and 0 < h["command"]


def _try(code: int, payload) -> bool:
    try:
        decode_request(code, payload)
        return True
    except DecodeError:
        return False
    except Exception:  # noqa: BLE001 - any failure means "not this layout"
        return False


class IggyRules(Rules):
    """Iggy's frames in one direction, in the connection's framing (`mode`, found from its first
    bytes): the classic and request-id headers (codes.REQUEST_HEADER, RESPONSE_HEADER, REQUEST_ID)
    or the VSR consensus header (codes.VSR_COMMON: `size` counts the whole frame)."""

    def __init__(self, conv: IggyConversation, direction: str):
        self.conv, self.direction = conv, direction

    @property
    def head_len(self) -> int:
        return 64 if self.conv.mode == VSR else 8

    hunt_len = head_len

    def size(self, buf: StreamBuffer) -> int | None:
        conv, head = self.conv, buf.data
        if conv.mode == VSR:
            return read_layout(VSR_COMMON, head)["size"] if plausible_vsr(head) else None
        if self.direction == C2S:
            h = read_layout(REQUEST_HEADER, head)
            length, code = h["length"], h["code"]
            min_len = 12 if conv.mode == REQID else 4
            if length < min_len or (code not in COMMANDS and (code > 10_000 or length > conv.max_frame)):
                return None
            return 4 + length
        h = read_layout(RESPONSE_HEADER, head)
        status, length = h["status"], h["length"]
        if status >= MAX_STATUS or (conv.mode == REQID and length < 8):
            return None
        return 8 + length

    def judge(self, data: memoryview, i: int) -> int:
        if self.conv.mode == VSR:
            return self._vsr(data, i)
        return self._request(data, i) if self.direction == C2S else self._response(data, i)

    def _request(self, data: memoryview, i: int) -> int:
        """A classic/request-id request at `i`: known code, sane length; confirmed when its payload
        decodes and the next header is plausible, or (request-id framing) its id continues the
        connection's."""
        if not plausible_request(data, i, self.conv.max_frame):
            return base.NOT_A_FRAME
        length, code = _II.unpack_from(data, i)
        n, end = len(data), i + 4 + length
        if self.conv.mode == REQID:
            if length < 12:
                return base.NOT_A_FRAME
            if n - i >= 16 and self.conv.last_req_id is not None:
                rid = struct.unpack_from("<Q", data, i + 8)[0]
                if 0 < rid - self.conv.last_req_id <= REQ_ID_WINDOW:
                    return base.CONFIRMED
        if end > n:
            return base.TENTATIVE
        if not _try(code, bytes(data[i + (16 if self.conv.mode == REQID else 8) : end])):
            return base.NOT_A_FRAME
        return self._confirm_by_next(data, end, 8, lambda e: plausible_request(data, e, self.conv.max_frame))

    def _response(self, data: memoryview, i: int) -> int:
        """A response at `i`: a small status and sane length; confirmed when (request-id framing)
        its id is pending, or its payload decodes for the request it answers and the next header
        is plausible."""
        if not self._plausible_response(data, i):
            return base.NOT_A_FRAME
        status, length = _II.unpack_from(data, i)
        n, end = len(data), i + 8 + length
        if self.conv.mode == REQID and n - i >= 16:
            if struct.unpack_from("<Q", data, i + 8)[0] in self.conv.by_id:
                return base.CONFIRMED
        if end > n:
            return base.TENTATIVE
        if status == 0 and length and self.conv.mode != REQID and self.conv.fifo:
            try:
                decode_response(self.conv.fifo[0]["code"], bytes(data[i + 8 : end]))
            except Exception:  # noqa: BLE001 - any failure means "not this response"
                return base.NOT_A_FRAME
        return self._confirm_by_next(data, end, 8, lambda e: self._plausible_response(data, e))

    def _vsr(self, data: memoryview, i: int) -> int:
        """A VSR header at `i`, confirmed by the next header where the buffer holds it."""
        if not plausible_vsr(data, i):
            return base.NOT_A_FRAME
        end = i + read_layout(VSR_COMMON, data, i)["size"]
        if end > len(data):
            return base.TENTATIVE
        return self._confirm_by_next(data, end, 64, lambda e: plausible_vsr(data, e))

    def _confirm_by_next(self, data: memoryview, end: int, need: int, plausible) -> int:
        """A whole candidate frame ending at `end` is confirmed by the data ending there (or the
        connection ending after part of a next header) or by a plausible next header."""
        left = len(data) - end
        if left == 0 or (left < need and self.conv.closing):
            return base.CONFIRMED
        if left < need:
            return base.TENTATIVE
        return base.CONFIRMED if plausible(end) else base.NOT_A_FRAME

    def _plausible_response(self, data, i: int) -> bool:
        status, length = _II.unpack_from(data, i)
        return (
            status < RESYNC_MAX_STATUS
            and length <= self.conv.max_frame
            and (self.conv.mode != REQID or length >= 8)
        )


class IggyConversation(Conversation):
    """Frames both directions of one connection and turns frames into rows."""

    def __init__(self, conn: ConnInfo, ctx: Context):
        super().__init__(conn, ctx)
        self.max_frame = int(ctx.option("iggy", "max_frame_bytes", ctx.max_frame_bytes))
        self.framer = {d: Framer(IggyRules(self, d), self.max_frame) for d in (C2S, S2C)}
        self.last_req_id: int | None = None  # request-id framing: the latest request's id
        self.closing = False
        self.mode: str | None = None
        self.ordinal = 0
        self.fifo: deque[dict] = deque()  # classic pairing
        self.by_id: OrderedDict[int, dict] = OrderedDict()  # request-id / VSR pairing
        self.delivered: OrderedDict[tuple, int] = OrderedDict()  # (topic, part, offset) -> ts
        self.logged_in = False  # a login was decoded: later client bytes hold no credentials

    # -----------------------------------------------------------------------------------------
    # driver interface

    def feed(self, direction: str, data: bytes, ts_ns: int) -> list[Row]:
        rows: list[Row] = []
        try:
            self.framer[direction].push(data, ts_ns)
            self._drain(direction, rows)
        except Exception as e:  # noqa: BLE001 - never raise out of a decoder
            off, n, ts = self.framer[direction].drop_all()
            rows.append(self._error_row(direction, off, n, ts, ts, base.MALFORMED, f"internal: {e!r}", None))
        return rows

    def gap(self, direction: str, nbytes: int, ts_ns: int) -> list[Row]:
        junks, inside_skip = self.framer[direction].gap(nbytes, ts_ns)
        rows = [self._junk_row(direction, j) for j in junks]
        if not inside_skip:
            # responses can no longer be paired reliably: close out what is pending
            rows.extend(self._flush_pending())
        return rows

    def close(self) -> list[Row]:
        rows: list[Row] = []
        try:
            self.closing = True  # a resync candidate at the very end needs no next header
            for d in (C2S, S2C):
                fr = self.framer[d]
                if len(fr.buf) and fr.resync and self.mode is not None:
                    self._drain(d, rows)
                rows.extend(self._junk_row(d, j) for j in fr.close())
            rows.extend(self._flush_pending())
        except Exception as e:  # noqa: BLE001
            rows.append(
                (
                    "commands",
                    {"ts_ns": 0, "decode_status": base.MALFORMED, "decode_error": f"internal: {e!r}"},
                )
            )
        return rows

    # -----------------------------------------------------------------------------------------
    # framing

    def _detect(self, direction: str) -> bool:
        """Pick the connection's framing from the first bytes; False = need more."""
        data = self.framer[direction].buf.peek(65536)
        if direction == C2S:
            if plausible_request(data, 0, self.max_frame):
                length, code = _II.unpack_from(data, 0)
                if code in EMPTY_REQUEST and length in (4, 12):
                    self.mode = CLASSIC if length == 4 else REQID
                    return True
                if len(data) < 4 + length:
                    if len(data) < 65536:
                        return False
                    self.mode = CLASSIC
                    return True
                classic_ok = _try(code, data[8 : 4 + length])
                reqid_ok = length >= 12 and _try(code, data[16 : 4 + length])
                self.mode = REQID if (reqid_ok and not classic_ok) else CLASSIC
                return True
            if len(data) >= 64 and plausible_vsr(data):
                self.mode = VSR
                return True
            if len(data) >= 8:
                length, code = _II.unpack_from(data, 0)
                if 4 <= length <= self.max_frame and code < 10_000 and len(data) >= 4 + length:
                    self.mode = CLASSIC  # an unknown command in a well-formed frame
                    return True
            if len(data) < 64:
                return False
            self.mode = CLASSIC
            return True
        # server spoke first (client side not captured): classic unless it is a VSR header
        if len(data) < 8:
            return False
        if len(data) >= 64 and plausible_vsr(data):
            self.mode = VSR
        else:
            self.mode = CLASSIC
        return True

    def _drain(self, direction: str, rows: list[Row]) -> None:
        fr = self.framer[direction]
        if self.mode is None:
            if not self._detect(direction):
                return
            if direction == S2C and len(self.framer[C2S].buf):
                self._drain(C2S, rows)  # requests first, so responses find them
        while (item := fr.next()) is not None:
            if isinstance(item, Junk):
                self._junk(direction, item, rows)
            elif self.mode == VSR:
                self._vsr_frame(direction, item, rows)
            elif direction == C2S:
                self._request(item, rows)
            else:
                self._response(item, rows)

    def _junk(self, direction: str, j: Junk, rows: list[Row]) -> None:
        """A junk record's row; an oversize frame skipped exactly still takes its place in pairing."""
        if j.status != base.OVERSIZE:
            rows.append(self._junk_row(direction, j))
            return
        if self.mode == VSR:
            command = j.head[60]
            rows.append(self._junk_row(direction, j, {"vsr_command": VSR_COMMANDS[command], "size": j.size}))
            if j.skipped and command == 8 and self.fifo:
                rows.append(self._latency(self.fifo.popleft(), None, j.ts_last))
        elif direction == C2S:
            length, code = _II.unpack_from(j.head, 0)
            rows.append(self._junk_row(direction, j, {"code": code, "length": length}))
            if j.skipped:
                pend = {"code": code, "name": COMMANDS.get(code), "corr": self._next_corr(None)}
                self._pending_add({**pend, "ts_end": j.ts_last, "topic": None, "partition": None})
        else:
            status, length = _II.unpack_from(j.head, 0)
            req = self._pending_pop(None) if j.skipped else None
            rows.append(self._junk_row(direction, j, {"status": status, "length": length}))
            if req:
                rows.append(self._latency(req, status, j.ts_first))

    def _junk_row(self, direction: str, j: Junk, info: dict | None = None) -> Row:
        return self._error_row(direction, j.offset, j.size, j.ts_first, j.ts_last, j.status, j.reason, info)

    # -----------------------------------------------------------------------------------------
    # classic / request-id frames

    def _request(self, fr: Frame, rows: list[Row]) -> None:
        frame = memoryview(fr.data)
        off, ts0, ts1, total = fr.offset, fr.ts_first, fr.ts_last, len(fr.data)
        h = read_layout(REQUEST_HEADER, frame)
        length, code = h["length"], h["code"]
        name = COMMANDS.get(code)
        hdr = 16 if self.mode == REQID else 8
        req_id = read_layout(REQUEST_ID, frame)["request_id"] if self.mode == REQID else None
        if req_id is not None:
            self.last_req_id = req_id
        payload = frame[hdr:]
        corr = self._next_corr(req_id)
        row = {
            "direction": C2S,
            "command": name,
            "command_code": code,
            "correlation_id": corr,
            "size": total,
            "stream_offset": off,
            "ts_ns": ts0,
            "ts_end_ns": ts1,
        }
        pend = {
            "code": code,
            "name": name,
            "corr": corr,
            "ts_end": ts1,
            "topic": None,
            "partition": None,
            "details": None,
        }
        details: dict = {"framing": self.mode, "length": length}
        if req_id is not None:
            details["request_id"] = req_id
        self._emit_request(code, name, payload, frame, row, pend, details, ts1, rows)

    def _emit_request(
        self, code, name, payload, frame, row, pend, details, ts1, rows, secret: bool = False, decoder=None
    ) -> None:
        """Decode a request payload into its commands row (+ produce rows) and remember it."""
        corr = pend["corr"]
        if name is None:
            row.update(
                decode_status=base.UNKNOWN_COMMAND,
                decode_error=f"unknown code {code}",
                details=base.to_json(details),
            )
            rows.append(("commands", row))
            self._pending_add(pend)
            return
        try:
            fields = decoder(payload) if decoder else decode_request(code, payload)
        except DecodeError as e:
            status = base.TRUNCATED if isinstance(e, Truncated) else base.MALFORMED
            row.update(decode_status=status, decode_error=str(e), details=base.to_json(details))
            row["raw"] = self._raw(C2S, frame, typed=code not in SECRET_REQUESTS and not secret)
            rows.append(("commands", row))
            self._pending_add(pend)
            return
        if code in LOGIN_CODES:
            self.logged_in = True
        msgs = fields.pop("messages", None) if code == 101 else None
        if msgs is not None:
            fields["messages"] = [self._msg_summary(m) for m in msgs]
        details.update(fields)
        topic = topic_name(fields.get("stream_id"), fields.get("topic_id"))
        if code == 302 and fields.get("name"):  # CREATE_TOPIC: the topic being created
            topic = f"{fields['stream_id']['value']}/{fields['name']}"
        partition = fields.get("partition_id")
        if code == 101 and fields["partitioning"]["kind"] == "partition_id":
            partition = fields["partitioning"]["value"]
        pend.update(topic=topic, partition=partition, details=fields)
        row.update(
            topic=topic, partition=_i32(partition), decode_status=base.OK, details=base.to_json(details)
        )
        _flag_batch_checksum(row, (fields.get("batch") or {}).get("batch_checksum_ok"))
        rows.append(("commands", row))
        if msgs:
            key = None
            if fields["partitioning"]["kind"] == "messages_key":
                key = fields["partitioning"]["value"]
            for m in msgs:
                rows.append(self._message_row("produce", m, topic, _i32(partition), corr, ts1, key))
        self._pending_add(pend)

    def _response(self, fr: Frame, rows: list[Row]) -> None:
        frame = memoryview(fr.data)
        off, ts0, ts1, total = fr.offset, fr.ts_first, fr.ts_last, len(fr.data)
        h = read_layout(RESPONSE_HEADER, frame)
        status, length = h["status"], h["length"]
        hdr = 16 if self.mode == REQID else 8
        req_id = read_layout(REQUEST_ID, frame)["request_id"] if self.mode == REQID else None
        payload = frame[hdr:]
        req = self._pending_pop(req_id)
        details: dict = {"framing": self.mode, "status": status, "length": length}
        if req_id is not None:
            details["request_id"] = req_id
        row = {
            "direction": S2C,
            "size": total,
            "stream_offset": off,
            "ts_ns": ts0,
            "ts_end_ns": ts1,
            "error_code": status,
        }
        if req is None:
            row.update(
                correlation_id=req_id,
                decode_status=base.REQUEST_MISSING,
                decode_error="response without a request in the capture",
                details=base.to_json(details),
            )
            rows.append(("commands", row))
            return
        self._emit_response(req, status, payload, frame, row, details, ts0, rows)

    def _emit_response(self, req, status, payload, frame, row, details, ts0, rows, decoder=None) -> None:
        """Decode a response for its request: commands, latency, deliver and ack rows."""
        code = req["code"]
        row.update(
            command=req["name"],
            command_code=code,
            correlation_id=req["corr"],
            topic=req["topic"],
            partition=_i32(req["partition"]),
        )
        rows.append(self._latency(req, status, ts0))
        fields: dict = {}
        if status == 0 and len(payload):
            try:
                fields = decoder(payload) if decoder else decode_response(code, payload)
            except DecodeError as e:
                st = base.TRUNCATED if isinstance(e, Truncated) else base.MALFORMED
                row.update(decode_status=st, decode_error=str(e), details=base.to_json(details))
                row["raw"] = self._raw(S2C, frame, typed=code not in SECRET_RESPONSES)
                rows.append(("commands", row))
                return
        elif len(payload):
            details["payload_size"] = len(payload)
        msgs = fields.pop("messages", None) if code == 100 else None
        if msgs is not None:
            fields["messages"] = [self._msg_summary(m) for m in msgs]
            row["partition"] = _i32(fields.get("partition_id"))
        details.update(fields)
        row.update(decode_status=base.OK, details=base.to_json(details))
        _flag_batch_checksum(row, fields.get("batch_checksum_ok"))
        rows.append(("commands", row))
        if msgs:
            consumer = consumer_label((req.get("details") or {}).get("consumer"))
            for m in msgs:
                row_m = self._message_row(
                    "deliver", m, req["topic"], _i32(fields.get("partition_id")), req["corr"], ts0
                )
                row_m[1]["consumer"] = consumer
                rows.append(row_m)
        rows.extend(self._acks(req, status, fields, msgs, ts0))

    # -----------------------------------------------------------------------------------------
    # VSR frames

    def _vsr_frame(self, direction: str, fr: Frame, rows: list[Row]) -> None:
        frame = memoryview(fr.data)
        off, ts0, ts1, size = fr.offset, fr.ts_first, fr.ts_last, len(fr.data)
        h = read_layout(VSR_COMMON, frame)
        command = h["command"]
        body = frame[VSR_HEADER:]
        d: dict = {
            "framing": VSR,
            "vsr_command": VSR_COMMANDS[command],
            "size": size,
            "view": h["view"],
            "release": h["release"],
            "replica": h["replica"],
            "body_size": size - VSR_HEADER,
        }
        row = {"direction": direction, "size": size, "stream_offset": off, "ts_ns": ts0, "ts_end_ns": ts1}
        if command == 5:  # Request
            q = read_layout(VSR_REQUEST, frame)
            request, operation = q["request"], q["operation"]
            d["client"] = f"{int.from_bytes(q['client'], 'little'):032x}"
            d.update(timestamp=q["timestamp"], session=q["session"], header_user_id=q["header_user_id"])
            d["request_checksum"] = f"{int.from_bytes(q['request_checksum'], 'little'):x}"
            d.update(request=request, operation=operation)
            decoder = None
            secret = False
            if operation == VSR_REGISTER:
                code, decoder, secret = 40, register, True
            elif operation == VSR_NON_REPLICATED:
                code = q["code"]
            else:
                code = VSR_OPERATION_CODES.get(operation)
            name = COMMANDS.get(code) if code is not None else None
            d["operation_name"] = VSR_OPERATIONS.get(operation, f"op_{operation}")
            row.update(command=name or f"VSR_OP_{operation}", command_code=code, correlation_id=request)
            pend = {
                "code": code,
                "name": row["command"],
                "corr": request,
                "ts_end": ts1,
                "topic": None,
                "partition": None,
                "details": None,
            }
            if code is None:
                row.update(
                    decode_status=base.UNKNOWN_COMMAND,
                    decode_error=f"VSR operation {operation}",
                    details=base.to_json(d),
                )
                rows.append(("commands", row))
                self._pending_add(pend)
                return
            self._emit_request(
                code, name, body, frame[:VSR_HEADER], row, pend, d, ts1, rows, secret=secret, decoder=decoder
            )
            return
        if command == 8:  # Reply
            r = read_layout(VSR_REPLY, frame)
            request, operation, status = r["request"], r["operation"], r["status"]
            d.update(request=request, operation=operation, status=status)
            d["op"], d["commit"] = r["op"], r["commit"]
            row["error_code"] = status
            req = self.fifo.popleft() if self.fifo else None
            if req is None:
                row.update(
                    correlation_id=request,
                    decode_status=base.REQUEST_MISSING,
                    decode_error="reply without a request in the capture",
                    details=base.to_json(d),
                )
                rows.append(("commands", row))
                return
            decoder = VSR_RESPONSES.get(req["code"])
            if status == 0 and result_framed(operation, len(body)):
                # metadata, consumer-offset write and non-empty register replies lead with a
                # result section: [count u32] then count x {index u32, result u32}; success is
                # count 0 followed by the typed payload (apache/iggy consensus/reply_result.rs)
                if len(body) < 4:
                    d["result_section"] = "missing"
                else:
                    count = struct.unpack_from("<I", body, 0)[0]
                    d["result_count"] = count
                    if count == 0:
                        body = body[4:]
                    elif len(body) >= 4 + 8 * min(count, 1024):
                        d["results"] = [
                            dict(zip(("index", "result"), struct.unpack_from("<II", body, 4 + 8 * i)))
                            for i in range(min(count, 1024))
                        ]
                        status = d["results"][0]["result"]  # a committed rejection's error code
                        row["error_code"] = status
                        if len(body) > 4 + 8 * count:
                            d["payload_size"] = len(body) - 4 - 8 * count
                        body = body[:0]
                    else:
                        d["result_section"] = "truncated"
            if req["code"] is None:
                row.update(
                    command=req["name"],
                    correlation_id=req["corr"],
                    decode_status=base.OK,
                    details=base.to_json(d),
                )
                rows.append(("commands", row))
                rows.append(self._latency(req, status, ts0))
                return
            self._emit_response(req, status, body, frame[:VSR_HEADER], row, d, ts0, rows, decoder=decoder)
            return
        # other consensus frames (eviction, replica traffic): header only
        if command == 13:
            e = read_layout(VSR_EVICTION, frame)
            d["client"] = f"{int.from_bytes(e['client'], 'little'):032x}"
            d["reason"] = e["reason"]
            d["reason_name"] = EVICTION_REASONS.get(e["reason"], "unknown")
            if e["reason"] in (14, 15):  # the server's accepted protocol window
                d["server_protocol_max"] = protocol_version_text(e["protocol_max"])
                d["server_protocol_min"] = protocol_version_text(e["protocol_min"])
        row.update(command=f"VSR_{VSR_COMMANDS[command]}", decode_status=base.OK, details=base.to_json(d))
        rows.append(("commands", row))
        return

    # -----------------------------------------------------------------------------------------
    # pairing and derived rows

    def _next_corr(self, req_id: int | None) -> int:
        self.ordinal += 1
        return self.ordinal if req_id is None else req_id

    def _pending_add(self, req: dict, key: int | None = None) -> None:
        if self.mode == REQID:
            k = req["corr"] if key is None else key
            self.by_id[k] = req
            while len(self.by_id) > MAX_PENDING:
                self.by_id.popitem(last=False)
        else:
            self.fifo.append(req)
            while len(self.fifo) > MAX_PENDING:
                self.fifo.popleft()

    def _pending_pop(self, req_id: int | None) -> dict | None:
        if self.mode == REQID:
            return self.by_id.pop(req_id, None) if req_id is not None else None
        return self.fifo.popleft() if self.fifo else None

    def _flush_pending(self) -> list[Row]:
        rows = []
        for req in list(self.fifo) + list(self.by_id.values()):
            rows.append(self._latency(req, None, None))
            if req["code"] == 121 and req.get("details"):
                rows.append(self._offset_ack(req, None, None))
        self.fifo.clear()
        self.by_id.clear()
        return rows

    def _latency(
        self, req: dict, status: int | None, resp_ts: int | None, response_name: str | None = None
    ) -> Row:
        row = {
            "ts_ns": req["ts_end"],
            "request_command": req["name"],
            "correlation_id": req["corr"],
            "request_ts_ns": req["ts_end"],
            "topic": req["topic"],
            "partition": _i32(req["partition"]),
        }
        if resp_ts is not None:
            row.update(
                response_command=response_name or req["name"],
                response_ts_ns=resp_ts,
                latency_us=(resp_ts - req["ts_end"]) / 1000.0,
                error_code=status,
            )
        return ("latencies", row)

    def _acks(self, req: dict, status: int, fields: dict, msgs, ts: int) -> list[Row]:
        d = req.get("details") or {}
        if req["code"] == 121 and d:
            return [self._offset_ack(req, status, ts)]
        if req["code"] == 100 and d.get("auto_commit") and status == 0 and msgs:
            last = msgs[-1]
            c = d["consumer"]
            return [
                (
                    "acks",
                    {
                        "ts_ns": ts,
                        "ack_type": "iggy_offset",
                        "topic": req["topic"],
                        "partition": _i32(fields.get("partition_id")),
                        "offset": last.get("offset"),
                        "message_id": str(last["id"]),
                        "consumer": consumer_label(c),
                        "error_code": status,
                        "correlation_id": req["corr"],
                        "details": base.to_json({"auto_commit": True, "messages": len(msgs)}),
                    },
                )
            ]
        return []

    def _offset_ack(self, req: dict, status: int | None, ts: int | None) -> Row:
        d = req["details"]
        c = d["consumer"]
        offset = d["offset"]
        part = d.get("partition_id")
        row = {
            "ts_ns": ts if ts is not None else req["ts_end"],
            "ack_type": "iggy_offset",
            "topic": req["topic"],
            "partition": _i32(part),
            "offset": _i64(offset),
            "consumer": consumer_label(c),
            "error_code": status,
            "correlation_id": req["corr"],
        }
        delivered = self.delivered.get((req["topic"], part, offset))
        if delivered is not None:
            row["ack_latency_us"] = (req["ts_end"] - delivered) / 1000.0
        if ts is None:
            row["details"] = base.to_json({"response": "missing"})
        return ("acks", row)

    def _msg_summary(self, m: dict) -> dict:
        s = {"id": str(m["id"]), "payload_size": len(m["payload"]), "headers": len(m["headers"])}
        for k in ("offset", "checksum", "checksum_ok", "state"):
            if m.get(k) is not None:
                s[k] = m[k]
        return s

    def _message_row(
        self, direction: str, m: dict, topic, partition, corr, ts: int, key: bytes | None = None
    ) -> Row:
        row = {
            "ts_ns": ts,
            "direction": direction,
            "source": "capture",
            "topic": topic,
            "partition": partition,
            "offset": _i64(m.get("offset")) if direction == "deliver" else None,
            "message_id": str(m["id"]),
            "key": self.ctx.payload.key(key),
            "headers": [{"key": h["key"], "value": h["value"]} for h in m["headers"]],
            "checksum_ok": m.get("checksum_ok"),
            "correlation_id": corr,
            "decode_status": base.OK,
        }
        if m.get("checksum_ok") is False:
            row["decode_status"] = base.CHECKSUM_MISMATCH
            row["decode_error"] = "message checksum does not match"
        row.update(self.ctx.payload.value(m["payload"]))
        mts = m.get("timestamp") or m.get("origin_timestamp")
        if mts:
            row["message_ts_ns"] = mts * 1000  # Iggy timestamps are microseconds
        det = {"headers": [{"key": h["key"], "kind": h["kind"], "value": h["typed"]} for h in m["headers"]]}
        for k in ("origin_timestamp", "timestamp", "checksum", "state", "header_size"):
            if m.get(k) is not None:
                det[k] = m[k]
        row["details"] = base.to_json(det)
        if direction == "deliver" and m.get("offset") is not None:
            self.delivered[(topic, partition, m["offset"])] = ts
            while len(self.delivered) > MAX_DELIVERED:
                self.delivered.popitem(last=False)
        return ("messages", row)

    def _raw(self, direction: str, data, *, typed: bool) -> bytes | None:
        """Bytes for `raw` (Context.raw: only frames of known, non-secret type). Client bytes are
        also withheld before a decoded login: a damaged login frame misread as another command
        would otherwise put the password in `raw`."""
        if direction == C2S and not self.logged_in:
            return None
        return self.ctx.raw(data, typed=typed)

    def _error_row(
        self,
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


def _flag_batch_checksum(row: dict, ok: bool | None) -> None:
    """A message batch whose batch checksum does not verify marks its frame's row (the messages
    keep their own per-message checksum verdicts)."""
    if ok is False:
        row["decode_status"] = base.CHECKSUM_MISMATCH
        row["decode_error"] = "batch checksum does not match"


def consumer_label(c: dict | None) -> str | None:
    """The consumer of a POLL_MESSAGES / STORE_CONSUMER_OFFSET request as one string:
    `consumer:<id>` for a single consumer, `group:<id>` for a consumer group; <id> is the
    numeric id or the name, as the client sent it (e.g. `consumer:7`, `group:orders`)."""
    if not c:
        return None
    prefix = "group" if c.get("kind") == "consumer_group" else "consumer"
    return f"{prefix}:{c.get('id')}"


def _i32(v) -> int | None:
    return v if isinstance(v, int) and -(2**31) <= v < 2**31 else None


def _i64(v) -> int | None:
    return v if isinstance(v, int) and -(2**63) <= v < 2**63 else None
