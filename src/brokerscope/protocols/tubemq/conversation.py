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

The commands, latencies and acks rows and the produced messages are gathered across frames as
column values (rows.Gathered) and handed over as tables.Block runs: a frame costs a tuple per
row, not a dict that the driver and tables.conform read key by key.
"""

from __future__ import annotations

import os
import zlib

from ..base import (
    C2S,
    MALFORMED,
    MAX_HELD_ANSWERS,
    OK,
    REQUEST_MISSING,
    S2C,
    TRUNCATED,
    UNKNOWN_COMMAND,
    ConnInfo,
    Context,
    Conversation,
    Row,
    json_value,
    to_json,
)
from ..framer import Frame, Framer, Junk
from ..schema import MessagePool
from . import rows as build
from . import rpc
from .content import MSG_TIMES, parse_broker_info, parse_subscribe_info, parse_topic_info
from .framing import HEADER_LEN, TOKEN, TubeFrame, TubeRules, _rpc, header_info, read_frame
from .rows import M_COMMIT, Gathered, Pending

MAX_PENDING = 100_000
MAX_STACK_CHARS = 4000

M_SEND = 13
M_GET = 17
M_CONSUMER_REGISTER_B = 15

# `details` pieces of the envelope's service type and a response's status, as to_json writes them
_SERVICE_JSON = {t: f',"service_type":{t},"service":{json_value(n)}' for t, n in rpc.SERVICES.items()}
_STATUS_JSON = {s: f',"status":{json_value(n)}' for s, n in rpc.STATUS.items()}


class TubeMQConversation(Conversation):
    # whole sendMessageP2B frames by the compiled _rpc.exchanges (rows as the Python path below
    # makes them: the reference, every frame with BROKERSCOPE_TUBEMQ_PYTHON=1 or compiled=False)
    compiled = os.environ.get("BROKERSCOPE_TUBEMQ_PYTHON") != "1"

    def __init__(self, conn: ConnInfo, ctx: Context, compiled: bool | None = None):
        """`compiled`: whether _rpc.exchanges takes the sendMessageP2B frames it can (default
        the class's `compiled`)."""
        super().__init__(conn, ctx)
        max_frame = ctx.max_frame_bytes  # [protocols.tubemq] max_frame_bytes is applied by the config
        # a frame starts with the begin token: a capture that starts mid-frame resyncs on it
        self.framer = {d: Framer(TubeRules(max_frame), max_frame) for d in (C2S, S2C)}
        self.pending: dict[int, Pending] = {}  # by serial, oldest first
        # the user's schema_file, checked on the driver when the settings were loaded
        fds = ctx.schemas.get("tubemq")
        self.schema = MessagePool.from_bytes(fds) if fds else None
        # last delivery per (topic, partition): (ts of the response's first byte, currOffset)
        self.deliveries: dict[tuple, tuple[int, int | None]] = {}
        self.out = Gathered()
        # responses read while their request may be inside the client's held bytes (_read):
        # _read's arguments, read once the requests the client's bytes hold are read
        self.held: list[tuple] = []
        # the compiled frame reader's arguments: the body table and each method's entries in it
        self.reader = (rpc.BUILTIN.table, *rpc.body_entries(self.schema))
        fr = self.framer[C2S]
        self.limits = fr.rules.limits(fr.max_frame)  # of the frames _rpc.read_all takes
        if compiled is None:
            compiled = self.compiled
        # exchanges writes the produced value as the `keep` payload policy keeps it
        self.fast = (
            self._fast_state() if compiled and self.schema is None and ctx.payload.mode == "keep" else None
        )

    def _fast_state(self):
        """What _rpc.exchanges reads and writes of this conversation (its own pending requests
        and gathered rows, the tables of the Python path), made once."""
        send, out = rpc.METHODS[M_SEND], self.out.pending
        return _rpc.fast_state(
            *self.reader, *self.limits, MAX_PENDING, self.pending, Pending, self.conn.frames,
            out["commands"], out["latencies"], out["acks"], out["messages"], _SERVICE_JSON,
            send.services, _STATUS_JSON[0], build.PRODUCE_SPEC, zlib.crc32, json_value, MSG_TIMES,
            build.produced_time, C2S, send.name, OK, MALFORMED, "tubemq_produce", self.conn.frame_index,
        )  # fmt: skip

    # -- contract -----------------------------------------------------------------------------

    def feed(self, direction: str, data: bytes, ts_ns: int) -> list[Row]:
        if not data:
            return []
        fr = self.framer[direction]
        if fr.idle():
            # in step with nothing pending: the whole frames the chunk starts with, sized and read
            # in one compiled call (what Framer.feed_whole and _take do frame by frame), each
            # frame's bytes all came at ts_ns; the rest goes to the framer. sendMessageP2B
            # frames first, their rows made by _rpc.exchanges; from the first other frame on
            # the rows are made here.
            start = fr.buf.offset
            at = _rpc.exchanges(self.fast, data, start, ts_ns, direction) if self.fast is not None else 0
            if at == len(data):
                fr.took(data, at, ts_ns)
                return self._taken(direction)
            sizes, got = _rpc.read_all(data[at:] if at else data, *self.limits, *self.reader)
            taken = at + sum(sizes)
            fr.took(data, taken, ts_ns)
            for size, one in zip(sizes, got):
                self._read(direction, start + at, data[at : at + size], ts_ns, ts_ns, one)
                at += size
            if taken == len(data):  # all of it: the framer holds nothing (idle)
                return self._taken(direction)
        else:
            fr.push(data, ts_ns)
        self._drain(direction)
        return self._taken(direction)

    def _taken(self, direction: str) -> list[Row]:
        """The rows made so far, once the held responses whose requests the client's frames just
        read gave are read too."""
        if direction == C2S and self.held:
            self._release()
        return self.out.take()

    def gap(self, direction: str, nbytes: int, ts_ns: int) -> list[Row]:
        fr = self.framer[direction]
        self._drain(direction, f"a capture gap of {nbytes} bytes")
        try:
            junk, _ = fr.gap(nbytes, ts_ns)
        except Exception as e:  # never raise out of the decoder
            self._error_row(direction, fr.buf.offset, 0, ts_ns, f"internal error on gap: {e!r}")
            return self.out.take()
        for j in junk:
            self._junk_row(direction, j)
        self._drain(direction)
        return self._taken(direction)

    def close(self) -> list[Row]:
        for direction, fr in self.framer.items():
            self._drain(direction, "the end of the connection")
            try:
                junk = fr.close()
            except Exception as e:
                self._error_row(direction, fr.buf.offset, 0, fr.buf.last_ts, f"internal error: {e!r}")
                continue
            for j in junk:
                self._junk_row(direction, j)
        self._release(everything=True)
        for serial, p in self.pending.items():
            build.unanswered(self.out, serial, p)
        self.pending.clear()
        return self.out.take(everything=True)

    def low_water(self, direction: str) -> int | None:
        """Also the responses held for their requests (their rows come later), oldest first."""
        low = super().low_water(direction)
        if direction == S2C and self.held:
            held = self.held[0][0]
            low = held if low is None or held < low else low
        return low

    # -- framing ------------------------------------------------------------------------------

    def _drain(self, direction: str, cut: str | None = None) -> None:
        """The rows of what the framer gives now. `cut`: the connection ended or a gap came (the
        event, said in the reason): a frame short of its size that holds frame starts first
        gives them (Framer.reread_if_cut: a block length damaged)."""
        fr = self.framer[direction]
        while True:
            try:
                item = fr.next()
                if item is None and cut is not None:
                    why = f"runs past {cut} and frames start inside it: a block length damaged"
                    if fr.reread_if_cut(why):
                        continue
            except Exception as e:  # a bug must not stop the connection: drop what is buffered
                off, n, ts = fr.drop_all()
                self._error_row(direction, off, n, ts, f"internal framing error: {e!r}")
                continue
            if item is None:
                return
            if isinstance(item, Junk):
                self._junk_row(direction, item)
                continue
            self._take(direction, item)

    def _take(self, direction: str, item: Frame) -> None:
        """A whole frame's rows (one the framer gave)."""
        got = _rpc.read(item.data, *self.reader)
        self._read(direction, item.offset, item.data, item.ts_first, item.ts_last, got, item)

    def _read(
        self,
        direction: str,
        offset: int,
        data: bytes,
        ts_first: int,
        ts_last: int,
        got,
        item: Frame | None = None,
        hold: bool = True,
    ) -> None:
        """A whole frame's rows; a decoder bug is an error row for the frame. Its blocks, envelope
        and body are read by the compiled _rpc.read (`got`), and what that leaves by the Python
        readers (_frame, _body). `item`: the Frame the framer gave, read again should it have
        swallowed the frames after it (not one of feed's whole frames: those after it are read).
        `hold`: a response may wait for its request (_hold)."""
        if hold and direction == S2C and self._hold((offset, data, ts_first, ts_last, got)):
            return
        if got is None:
            f = read_frame(Frame(offset, data, ts_first, ts_last))
            env = fields = head = body_json = None
        else:
            serial, sizes, body, env, fields, head, body_json = got
            f = TubeFrame(offset, len(data), serial, sizes, body, data, ts_first, ts_last)
            if env is None:
                env = False  # left to protobuf
        try:
            self._frame(direction, f, env, fields, head, body_json, item)
        except Exception as e:
            err = f"internal error: {e!r}"
            self._error_row(direction, f.offset, f.size, f.ts_first, err, f.ts_last, f.serial)

    def _hold(self, args: tuple) -> bool:
        """Hold a response (`_read`'s arguments) whose request is not pending while the client's
        held bytes hold that request's frame start (`held`, up to MAX_HELD_ANSWERS)?"""
        data = args[1]
        if len(self.held) >= MAX_HELD_ANSWERS or len(data) < HEADER_LEN:
            return False
        if not self._answers_held(int.from_bytes(data[4:8], "big")):
            return False
        self.held.append(args)
        return True

    def _answers_held(self, serial: int) -> bool:
        """Is the request of `serial` not pending, and does a frame of that serial start inside
        the bytes the client's direction holds, past their first (a request a damaged block
        length took in)?"""
        if serial in self.pending:
            return False
        buf = self.framer[C2S].buf
        return len(buf) > HEADER_LEN and buf.find(TOKEN + serial.to_bytes(4, "big"), 1) > 0

    def _release(self, everything: bool = False) -> None:
        """Read the held responses whose request is pending now, or no longer inside the
        client's held bytes (`everything`: all of them, at the close), in the order they came."""
        held, self.held = self.held, []
        for h in held:
            if not everything and self._answers_held(int.from_bytes(h[1][4:8], "big")):
                self.held.append(h)
            else:
                self._read(S2C, *h, hold=False)

    def _error_row(self, direction, offset, size, ts, err, ts_end=None, serial=None) -> None:
        self.out.put(
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

    def _junk_row(self, direction: str, j: Junk) -> None:
        """Bytes that are not a whole frame; what its header told, if the rules read one."""
        info = j.info or (header_info(j.head) if j.status == TRUNCATED else None)
        self.out.put(
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

    def _frames(self, direction: str, f: TubeFrame) -> tuple[int | None, int | None]:
        """The first and last frame numbers of the packets of `direction` that carried the bytes
        of `f` (None, None where frames are not numbered)."""
        frames = self.conn.frames
        return (None, None) if frames is None else frames(direction, f.offset, f.size)

    def _frame(
        self,
        direction: str,
        f: TubeFrame,
        env,
        fields: dict | None,
        head: str | None,
        body_json: str | None,
        item: Frame | None = None,
    ) -> None:
        """A frame's rows (`env`: what _rpc.read gave of its envelope, None when it was not read,
        False when protobuf is to read it; `fields`: its body's when read; `head`, `body_json`:
        the JSON _rpc.read wrote of them). Its commands row is the tuple rows.COMMANDS names; its
        fields are worked out here and in _request / _response, then added once the frame is
        read. Its `details` are JSON text written piece by piece in to_json's form, key after
        key (`_Command.details`, a list joined at the end): no dict encoded per frame."""
        numbers = self.conn.frames  # _frames, inline
        frames = (None, None) if numbers is None else numbers(direction, f.offset, f.size)
        try:
            if env:
                env = rpc.envelope_of(env)
            else:
                env = rpc.decode_envelope(f.body) if env is None else rpc.read_envelope(f.body)
        except ValueError as e:
            details = {"serial": f.serial, "blocks": f.block_sizes}
            self.out.add(
                "commands",
                (
                    f.ts_first, f.ts_last, direction, f.serial, f.size, f.offset, MALFORMED,
                    f"RPC envelope: {e}", None, None, None, None, None, None, None, None,
                    to_json(details), None, *frames,
                ),
            )  # fmt: skip
            return
        if env.trailing and item is not None:
            # bytes after the RPC message that hold frames: a block length hit by damage took them
            why = f"{env.trailing} bytes after its RPC message, and frames start inside it: a block length damaged"
            if self.framer[direction].reread_if_swallowed(item, why):
                return
        if head is None:  # the open object _rpc.read writes
            head = to_json(
                {"serial": f.serial, "blocks": f.block_sizes, "flag": env.flag, "rpc_header": env.conn_header}
            )[:-1]
        details = [head]
        put = details.append
        st = env.service_type
        if st is not None:
            put(_SERVICE_JSON.get(st) or f',"service_type":{st},"service":"unknown"')
        if env.protocol_ver is not None:
            put(f',"protocol_ver":{env.protocol_ver}')
        if env.trailing:
            put(f',"trailing_bytes":{env.trailing}')
        cmd = _Command(direction, frames, fields, details)
        if env.is_request:
            self._request(cmd, env, f, body_json)
        else:
            self._response(cmd, env, f, body_json)

    def _add_command(self, f: TubeFrame, env: rpc.Envelope, c: _Command) -> None:
        self.out.commands(
            (
                f.ts_first, f.ts_last, c.direction, f.serial, f.size, f.offset, c.status, c.error,
                env.protocol_ver, c.command, c.code, c.topic, c.partition, c.client_id, c.topics,
                c.error_code, "".join(c.details) + "}", None, *c.frames,
            )
        )  # fmt: skip

    def _request(self, c: _Command, env: rpc.Envelope, f: TubeFrame, body_json: str | None) -> None:
        mid = env.method_id
        meth = rpc.METHODS.get(mid) if mid is not None else None
        c.command = meth.name if meth is not None else rpc.method_name(mid)
        c.code = mid
        put = c.details.append
        if env.timeout is not None:
            put(f',"timeout_ms":{env.timeout}')
        if meth is not None and env.service_type is not None and env.service_type not in meth.services:
            put(',"service_mismatch":true')
        msg, body, err = self._body(mid, True, env.body, c.fields, body_json)
        put(',"request":')
        put(body)
        self._body_status(c, meth, mid, err)
        group = None
        if msg is not None:
            get = msg.get
            c.topic = get("topicName")
            c.partition = get("partitionId")
            c.client_id = get("clientId") or get("brokerId")
            group = get("groupName")
            c.topics = get("topicList") or None
            if mid == M_CONSUMER_REGISTER_B:
                op = get("opType", 0)  # protobuf's default when it is not set
                put(',"op":' + json_value(rpc.OP_TYPES.get(op, str(op))))
            subs = get("subscribeInfo")
            if subs:
                put(',"subscriptions":' + to_json([parse_subscribe_info(s) for s in subs]))
            event = get("event")
            if event is not None:
                put(',"event_status":' + json_value(_event_status(event)))
        self._add_command(f, env, c)
        # pairing
        if f.serial in self.pending:
            build.unanswered(self.out, f.serial, self.pending.pop(f.serial))
        self.pending[f.serial] = Pending(
            mid, c.command, f.ts_last, c.topic, c.partition, c.client_id, group, env.protocol_ver
        )
        while len(self.pending) > MAX_PENDING:
            s = next(iter(self.pending))
            build.unanswered(self.out, s, self.pending.pop(s))
        if msg is not None and mid == M_SEND:
            # the message's frames are counted in the producer's direction (the request's)
            produced = c.frames if c.direction == C2S else self._frames(C2S, f)
            build.produce(self.out, msg, f, self.ctx.payload, produced)
        if msg is not None and mid == M_GET and msg.get("lastPackConsumed"):
            lat, off = self._since_delivery(msg.get("topicName"), msg.get("partitionId"), f.ts_last)
            build.confirm_ack(self.out, msg, f, lat, off)

    def _response(self, c: _Command, env: rpc.Envelope, f: TubeFrame, body_json: str | None) -> None:
        pend = self.pending.pop(f.serial, None)
        mid = env.method_id if env.method_id is not None else (pend.method_id if pend else None)
        put = c.details.append
        if pend is not None and env.method_id is not None and pend.method_id != env.method_id:
            put(',"request_method":' + json_value(pend.method_id))
        put(_STATUS_JSON.get(env.status) or ',"status":' + json_value(str(env.status)))
        error_code: int | None = None
        msg = None
        if env.status != 0:
            error_code = env.status
            c.command = rpc.method_name(mid) if mid is not None else "exception"
            c.code = mid
            stack = env.stack_trace or ""
            put(',"exception":' + json_value(env.exception_name))
            put(',"stack_trace":' + json_value(stack[:MAX_STACK_CHARS]))
            first = stack.strip().splitlines()[0] if stack.strip() else ""
            c.error = f"{env.exception_name}: {first}" if first else (env.exception_name or "exception")
            if pend is None:
                c.status = REQUEST_MISSING
        else:
            meth = rpc.METHODS.get(mid) if mid is not None else None
            c.command = meth.name if meth is not None else rpc.method_name(mid)
            c.code = mid
            msg, body, err = self._body(mid, False, env.body, c.fields, body_json)
            put(',"response":')
            put(body)
            self._body_status(c, meth, mid, err)
            if msg is not None:
                get = msg.get
                success = get("success")
                code = get("errCode")
                if success is False or (success is None and code is not None and code != rpc.ERR_SUCCESS):
                    error_code = code if code is not None else -1
                    put(',"error":' + json_value(get("errMsg")))
                elif success is True or code is not None:
                    error_code = 0
                self._metadata(msg, put)
        if pend is not None:
            c.topic, c.partition, c.client_id = pend.topic, pend.partition, pend.client_id
        c.error_code = error_code
        self._add_command(f, env, c)
        if pend is not None:
            self.out.latencies(
                (
                    pend.ts_end, pend.name, c.command, pend.api_version, f.serial, pend.ts_end, f.ts_first,
                    (f.ts_first - pend.ts_end) / 1000.0, error_code, c.topic, c.partition,
                )
            )  # fmt: skip
        if msg is not None and mid == M_GET:
            self._deliver(msg, f, pend, c.frames if c.direction == S2C else self._frames(S2C, f))
        if mid == M_COMMIT and (msg is not None or env.status != 0):
            lat = self._since_delivery(pend.topic, pend.partition, pend.ts_end)[0] if pend else None
            build.commit_ack(self.out, msg, f, pend, error_code, lat)
        if msg is not None and mid == M_SEND:
            build.produce_ack(self.out, msg, f, pend, error_code)

    def _body(
        self,
        mid: int | None,
        is_request: bool,
        body: bytes | None,
        fields: dict | None,
        body_json: str | None,
    ) -> tuple[dict | None, str, str | None]:
        """rpc.decode_body's (fields, details, error) of a method's body, the details as JSON
        text; `fields`, `body_json`: what _rpc.read read and wrote of it already (by the entry
        body_entries gave the method). Payload checksums only where the payload policy keeps
        them (rpc.PAYLOAD_SUMS)."""
        keep = self.ctx.payload.checksums_kept
        if fields is not None:  # read as a client writes it: the compiled reader leaves the rest
            if body_json is not None and keep:
                return fields, body_json, None
            entry = self.reader[1 if is_request else 2][mid]
            details = rpc.sized(fields, rpc.BUILTIN, entry)
            shown = details if keep else rpc.without_sums(details)
            if shown is details and body_json is not None:
                return fields, body_json, None
            return fields, to_json(shown), None
        msg, details, err = rpc.decode_body(mid, is_request, body, self.schema)
        return msg, to_json(details if keep else rpc.without_sums(details)), err

    def _body_status(self, c: _Command, meth, mid, err: str | None) -> None:
        """An unknown method id or a body that does not parse: the row's status and error. No raw
        bytes: nearly every method carries credentials (tokens in each heartbeat), and one
        damaged bit of a method id reads a heartbeat's body as getMessagesC2B's, which does not
        (found by setting every byte of the recorded authentication frames to other values)."""
        if meth is None:
            c.status = UNKNOWN_COMMAND
            c.error = f"unknown TubeMQ method id {mid}"
        elif err:
            c.status = MALFORMED
            c.error = err

    def _metadata(self, msg: dict, put) -> None:
        """Broker lists, topic metadata and partition assignments, parsed for `details` (`put`:
        its next JSON piece)."""
        infos = msg.get("brokerInfos")
        parsed = [parse_broker_info(b) for b in infos] if infos else []
        if parsed:
            put(',"brokers":' + to_json(parsed))
        topic_infos = msg.get("topicInfos")  # HeartResponseM2P only
        if topic_infos:
            by_id = {b["broker_id"]: b for b in parsed if "broker_id" in b}
            put(',"topic_infos":' + to_json([parse_topic_info(t, by_id) for t in topic_infos]))
        event = msg.get("event")
        if event is not None:
            put(',"event_status":' + json_value(_event_status(event)))
            assigned = [parse_subscribe_info(s) for s in event.get("subscribeInfo") or ()]
            put(',"assigned":' + to_json(assigned))

    def _deliver(self, msg: dict, f: TubeFrame, pend: Pending | None, frames: tuple) -> None:
        """Delivered messages; the pack's time and offset are kept for the ack that confirms it."""
        block = build.deliver(msg, f, pend, self.ctx.payload, frames)
        if block is not None:
            self.out.put("messages", block)
        key = (pend.topic if pend else None, pend.partition if pend else None)
        self.deliveries[key] = (f.ts_first, msg.get("currOffset"))
        if len(self.deliveries) > MAX_PENDING:
            self.deliveries.pop(next(iter(self.deliveries)))

    def _since_delivery(self, topic, partition, ts: int) -> tuple[float | None, int | None]:
        """Microseconds from the last delivery of (topic, partition) to `ts`, and its offset."""
        d = self.deliveries.get((topic, partition))
        if d is None:
            return None, None
        return (ts - d[0]) / 1000.0, d[1]


def _event_status(event: dict) -> str:
    """An EventProto's status by TubeMQ's name (0, TODO, when it is not set)."""
    status = event.get("status", 0)
    return rpc.EVENT_STATUS.get(status, str(status))


class _Command:
    """A frame's commands row as it is worked out: the fields its method decides (the rest come
    from the frame itself: TubeMQConversation._add_command), with the frame's direction, frame
    numbers, its body's fields as _rpc.read gave them (None: not read) and its `details` as JSON
    pieces: the open object, then `,"key":value` per key, closed when the row is added."""

    __slots__ = (
        "direction", "frames", "fields", "status", "error", "command", "code", "topic", "partition",
        "client_id", "topics", "error_code", "details",
    )  # fmt: skip

    def __init__(self, direction: str, frames: tuple, fields: dict | None, details: list[str]) -> None:
        self.direction, self.frames, self.fields, self.details = direction, frames, fields, details
        self.status = OK
        self.error = self.command = self.code = self.topic = self.partition = None
        self.client_id = self.topics = self.error_code = None
