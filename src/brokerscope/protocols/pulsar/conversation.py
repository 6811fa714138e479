"""One Pulsar connection: frames in both directions -> commands, messages, latencies, acks rows."""

from __future__ import annotations

import struct
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from .. import base
from ..base import C2S, S2C, ConnInfo, Context, Conversation, Row
from ..framer import Framer, Junk
from . import framing
from .framing import HEADER, ParsedFrame, PulsarRules
from .gen import pulsar_api_pb2 as pb
from .messages import (
    COMPRESSION_NAMES,
    ChunkedMessage,
    PayloadError,
    Single,
    expand,
    is_batch,
    is_chunk,
    key_bytes,
)
from .values import (
    SECRET_TYPES,
    bit_set,
    highest_bit,
    mid_str,
    partition_of,
    sanitize,
    scrub,
    text,
    to_dict,
    to_json,
)

T = pb.BaseCommand
MAX_PENDING = 100_000  # entries per pairing map
HOLD_BYTES = 16 * 1024 * 1024  # produce rows held until their receipt names the message id
CHUNK_INCOMPLETE = "chunk_incomplete"
ENCRYPTED = "encrypted"

# Commands that carry a request_id the peer answers with the same request_id.
REQUESTS = frozenset(
    {
        T.PARTITIONED_METADATA, T.LOOKUP, T.PRODUCER, T.SUBSCRIBE, T.UNSUBSCRIBE, T.SEEK,
        T.CLOSE_PRODUCER, T.CLOSE_CONSUMER, T.CONSUMER_STATS, T.GET_LAST_MESSAGE_ID,
        T.GET_TOPICS_OF_NAMESPACE, T.GET_SCHEMA, T.GET_OR_CREATE_SCHEMA, T.ACK, T.NEW_TXN,
        T.ADD_PARTITION_TO_TXN, T.ADD_SUBSCRIPTION_TO_TXN, T.END_TXN, T.END_TXN_ON_PARTITION,
        T.END_TXN_ON_SUBSCRIPTION, T.TC_CLIENT_CONNECT_REQUEST, T.WATCH_TOPIC_LIST,
        T.WATCH_TOPIC_LIST_CLOSE,
    }
)  # fmt: skip
RESPONSES = frozenset(
    {
        T.PARTITIONED_METADATA_RESPONSE, T.LOOKUP_RESPONSE, T.PRODUCER_SUCCESS, T.SUCCESS, T.ERROR,
        T.CONSUMER_STATS_RESPONSE, T.GET_LAST_MESSAGE_ID_RESPONSE, T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
        T.GET_SCHEMA_RESPONSE, T.GET_OR_CREATE_SCHEMA_RESPONSE, T.ACK_RESPONSE, T.NEW_TXN_RESPONSE,
        T.ADD_PARTITION_TO_TXN_RESPONSE, T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE, T.END_TXN_RESPONSE,
        T.END_TXN_ON_PARTITION_RESPONSE, T.END_TXN_ON_SUBSCRIPTION_RESPONSE,
        T.TC_CLIENT_CONNECT_RESPONSE, T.WATCH_TOPIC_LIST_SUCCESS,
    }
)  # fmt: skip
_U32 = struct.Struct(">I")


@dataclass
class Pending:
    command: str
    ts_ns: int  # last byte of the request
    topic: str | None = None
    partition: int | None = None
    extra: dict = field(default_factory=dict)


@dataclass
class PendingSend:
    ts_ns: int
    topic: str | None
    rows: list[dict]  # produce rows waiting for the message id
    held: int  # payload bytes held by `rows`
    sequences: list[tuple[int, int | None]]  # (batch_index, sequence) of every message
    chunk: dict | None = None


@dataclass(slots=True)
class Event:
    """One decoded frame, as the command handlers (`_on_*`) see it."""

    direction: str
    pf: ParsedFrame  # the frame: command, metadata, payload
    body: object  # the command's typed body (BaseCommand's field for its type)
    row: dict  # its commands row, being filled
    details: dict  # the row's details
    ts: int  # first byte's capture time
    ts_end: int  # last byte's capture time
    rows: list[Row]  # where the frame's rows go


class PulsarConversation(Conversation):
    """Frames both directions; pairs requests, sends and deliveries with their answers."""

    def __init__(self, conn: ConnInfo, ctx: Context):
        super().__init__(conn, ctx)
        self.max_frame = int(ctx.max_frame_bytes)
        # a capture may start inside a frame: the first frame start must be credible too
        self.framer = {
            d: Framer(PulsarRules(self.max_frame), self.max_frame, in_step=False) for d in (C2S, S2C)
        }
        self.producers: OrderedDict[int, dict] = OrderedDict()
        self.consumers: OrderedDict[int, dict] = OrderedDict()
        self.requests: OrderedDict[tuple[str, int], Pending] = OrderedDict()
        self.sends: OrderedDict[tuple[int, int], deque[PendingSend]] = OrderedDict()
        self.n_sends = 0
        self.held_bytes = 0
        self.pings: dict[str, deque[int]] = {C2S: deque(), S2C: deque()}
        self.connect: Pending | None = None
        self.challenge: Pending | None = None
        # consumer_id -> {(ledger, entry, batch_index): delivery ts (last byte)}
        self.deliveries: dict[int, OrderedDict[tuple[int, int, int], int]] = {}
        self.n_deliveries = 0
        self.batch_sizes: OrderedDict[tuple[int, int, int], int] = OrderedDict()  # (cid, L, E) -> n
        self.chunks: OrderedDict[tuple, ChunkedMessage] = OrderedDict()
        self.chunk_bytes = 0
        self.acked: OrderedDict[tuple[int, int, int, int], bool] = OrderedDict()  # (cid, L, E, bi)
        self.protocol_version: int | None = None
        # requests come from the client; the side that sends CONNECT is the client, whatever the
        # driver decided (a capture that starts mid-connection may have the roles the wrong way round)
        self.client_dir = C2S

    # ------------------------------------------------------------------------------------------
    # byte stream -> frames

    def feed(self, direction: str, data: bytes, ts_ns: int) -> list[Row]:
        rows: list[Row] = []
        fr = self.framer[direction]
        fr.push(data, ts_ns)
        try:
            while (item := fr.next()) is not None:
                if isinstance(item, Junk):
                    rows.append(self._junk_row(direction, item))
                else:
                    f = item
                    self._frame(direction, f.data[4:], f.offset, f.ts_first, f.ts_last, rows)
        except Exception as e:  # never raise out of the decoder: drop what is buffered
            off, n, ts = fr.drop_all()
            rows.append(self._error_row(direction, off, n, base.MALFORMED, f"decoder error: {e!r}", ts=ts))
        return sanitize(rows)

    def _junk_row(self, d: str, j: Junk) -> Row:
        """A row for bytes that are not a whole frame. Only an oversize frame's header or an
        unfinished frame that starts in step, of a type known and not carrying credentials, says
        what it is; bytes of no determined type keep none (Context.raw)."""
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
            row.update(self._oversize_fields(j.head, j.size))
        elif j.status == base.TRUNCATED:
            need = f" of {_U32.unpack_from(j.head, 0)[0] + 4}" if len(j.head) >= 4 else ""
            row["decode_error"] = f"connection ended after {j.size}{need} bytes of a frame"
            row["raw"] = self.ctx.raw(j.head, typed=self._typed_tail(d, memoryview(j.head)))
        return ("commands", row)

    def _typed_tail(self, d: str, mv: memoryview) -> bool:
        """Does a frame cut by the end of the capture start in step (or with a header that
        parses), with a command type that is known and carries no credentials (Context.raw)?"""
        if len(mv) < HEADER + 3:
            return False
        if self.framer[d].resync and framing.plausible_header(mv, 0, self.max_frame)[0] is not True:
            return False
        t = framing.peek_type(mv[HEADER : HEADER + 3])
        return t in framing.TYPE_NAMES and t not in SECRET_TYPES

    def _oversize_fields(self, head: bytes, size: int) -> dict:
        """What an oversize frame's header tells: its command type, and the command if it is all
        in the header bytes kept."""
        cmd_size = _U32.unpack_from(head, 4)[0]
        t = framing.peek_type(head[HEADER : HEADER + 3])
        cmd, _ = (
            framing.parse_command(head[HEADER : HEADER + cmd_size])
            if len(head) >= HEADER + cmd_size
            else (None, None)
        )
        details = {"total_size": size - 4, "max_frame_bytes": self.max_frame}
        if cmd is not None:
            details["command"] = scrub(to_dict(cmd))
        return {
            "command": framing.TYPE_NAMES.get(t) if t is not None else None,
            "command_code": t,
            "details": to_json(details),
        }

    def _error_row(
        self, d: str, offset: int, size: int, status: str, error: str, ts: int | None = None
    ) -> Row:
        buf = self.framer[d].buf
        return (
            "commands",
            {
                "ts_ns": buf.last_ts if ts is None else ts,
                "direction": d,
                "size": size,
                "stream_offset": offset,
                "decode_status": status,
                "decode_error": error,
            },
        )

    def gap(self, direction: str, nbytes: int, ts_ns: int) -> list[Row]:
        rows: list[Row] = []
        try:
            junks, _ = self.framer[direction].gap(nbytes, ts_ns)
            rows.extend(self._junk_row(direction, j) for j in junks)
        except Exception as e:
            rows.append(self._error_row(direction, 0, 0, base.GAP, f"decoder error: {e!r}", ts=ts_ns))
        return sanitize(rows)

    def close(self) -> list[Row]:
        rows: list[Row] = []
        try:
            for d in (C2S, S2C):
                rows.extend(self._junk_row(d, j) for j in self.framer[d].close())
            # produce rows still waiting for a receipt, then unanswered requests
            for key, q in self.sends.items():
                for ps in q:
                    rows.extend(("messages", self._finish(r)) for r in ps.rows)
                    rows.append(self._latency("SEND", None, ps.ts_ns, None, key[1], ps.topic))
            self.sends.clear()
            for (_d, rid), p in self.requests.items():
                rows.append(self._latency(p.command, None, p.ts_ns, None, rid, p.topic, p.partition))
            self.requests.clear()
            for p in (self.connect, self.challenge):
                if p is not None:
                    rows.append(self._latency(p.command, None, p.ts_ns, None, None, None))
            self.connect = self.challenge = None
            for d in (C2S, S2C):
                for ts in self.pings[d]:
                    rows.append(self._latency("PING", None, ts, None, None, None))
                self.pings[d].clear()
            for key, cm in self.chunks.items():
                rows.append(("messages", self._incomplete_chunk_row(key, cm)))
            self.chunks.clear()
        except Exception as e:
            rows.append(self._error_row(C2S, 0, 0, base.MALFORMED, f"decoder error at close: {e!r}"))
        return sanitize(rows)

    # ------------------------------------------------------------------------------------------
    # one frame

    def _frame(self, d: str, frame: bytes, offset: int, ts: int, ts_end: int, rows: list[Row]) -> None:
        pf = framing.parse_frame(frame)
        row = {
            "ts_ns": ts,
            "ts_end_ns": ts_end,
            "direction": d,
            "command": pf.type_name,
            "command_code": pf.type_code,
            "size": len(frame) + 4,
            "stream_offset": offset,
            "decode_status": pf.status,
            "decode_error": pf.error,
        }
        rows.append(("commands", row))
        details: dict = {}
        try:
            body = pf.body()
            if body is not None:
                details = to_dict(body)
                if pf.type_code in SECRET_TYPES:
                    scrub(details)
                has_rid, err_field, has_topic = _FIELDS[pf.type_code]
                if has_rid and body.HasField("request_id"):
                    row["correlation_id"] = body.request_id
                if err_field is not None and body.HasField(err_field):
                    row["error_code"] = getattr(body, err_field)
                if has_topic and body.HasField("topic"):
                    row["topic"] = body.topic
                lists = _TOPIC_LISTS.get(pf.type_code)
                if lists is not None:
                    row["topics"] = [text(t) for f in lists for t in getattr(body, f)]
            if pf.missing:
                details["missing_required"] = pf.missing
            if pf.has_payload_section:
                details = {"command": details, "payload": self._payload_details(pf)}
            handler = _HANDLERS.get(pf.type_code) if pf.cmd is not None else None
            if handler is not None and (body is not None or pf.type_code in (T.PING, T.PONG)):
                handler(self, Event(d, pf, body, row, details, ts, ts_end, rows))
        except Exception as e:  # a bug or an unexpected shape: keep the frame, say why
            row["decode_status"] = base.MALFORMED
            row["decode_error"] = f"decoder error: {e!r}"
        if row.get("topic") and row.get("partition") is None:
            row["partition"] = partition_of(row["topic"])
        row["details"] = to_json(details)
        if row["decode_status"] not in (base.OK, base.CHECKSUM_MISMATCH):
            typed = pf.type_code in framing.TYPE_NAMES and pf.type_code not in SECRET_TYPES
            row["raw"] = self.ctx.raw(_U32.pack(len(frame)) + frame[: self.ctx.max_raw_bytes], typed=typed)

    def _payload_details(self, pf: ParsedFrame) -> dict:
        out: dict = {"checksum_ok": pf.checksum_ok}
        if pf.broker_entry is not None:
            out["broker_entry"] = to_dict(pf.broker_entry)
        if pf.metadata is not None:
            md = to_dict(pf.metadata)
            md.pop("properties", None)  # they are the messages' headers
            out["metadata"] = md
        if pf.payload is not None:
            out["payload_size"] = len(pf.payload)
        return out

    # ------------------------------------------------------------------------------------------
    # pairing helpers

    def _latency(
        self, req, resp, req_ts, resp_ts, cid, topic, partition=None, error_code=None, version=None
    ) -> Row:
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

    def _remember(self, table: OrderedDict, key, value, rows: list[Row] | None = None) -> None:
        table[key] = value
        while len(table) > MAX_PENDING:
            k, old = table.popitem(last=False)
            if rows is not None and isinstance(old, Pending):
                rows.append(self._latency(old.command, None, old.ts_ns, None, k[1], old.topic, old.partition))

    def _request(self, d, pf, body, row, ts_end, rows) -> None:
        if d != self.client_dir or not body.HasField("request_id"):
            return
        p = Pending(pf.type_name, ts_end, row.get("topic"), row.get("partition"))
        self._remember(self.requests, (d, body.request_id), p, rows)

    def _response(self, d, pf, body, row, ts, rows) -> Pending | None:
        if not body.HasField("request_id"):
            return None
        req_dir = C2S if d == S2C else S2C
        p = self.requests.pop((req_dir, body.request_id), None)
        if p is None:
            return None
        if row.get("topic") is None and p.topic is not None:
            row["topic"] = p.topic
        rows.append(
            self._latency(
                p.command,
                pf.type_name,
                p.ts_ns,
                ts,
                body.request_id,
                p.topic,
                p.partition,
                row.get("error_code"),
            )
        )
        return p

    def _consumer_name(self, cid: int) -> str:
        c = self.consumers.get(cid)
        if c and c.get("subscription"):
            return c["subscription"]
        return str(cid)

    # ------------------------------------------------------------------------------------------
    # command handlers: (self, direction, frame, body, commands row, details, ts, ts_end, rows)

    def _on_connect(self, ev: Event) -> None:
        self.client_dir = ev.direction
        ev.row["api_version"] = ev.body.protocol_version
        ev.row["client_id"] = ev.body.client_version
        self.protocol_version = ev.body.protocol_version
        self.connect = Pending("CONNECT", ev.ts_end)

    def _on_connected(self, ev: Event) -> None:
        ev.row["api_version"] = ev.body.protocol_version
        if self.connect is not None:
            ev.rows.append(
                self._latency(
                    "CONNECT",
                    ev.pf.type_name,
                    self.connect.ts_ns,
                    ev.ts,
                    None,
                    None,
                    version=ev.body.protocol_version,
                )
            )
            self.connect = None

    def _on_auth_challenge(self, ev: Event) -> None:
        if self.connect is not None:
            ev.rows.append(self._latency("CONNECT", ev.pf.type_name, self.connect.ts_ns, ev.ts, None, None))
            self.connect = None
        self.challenge = Pending("AUTH_CHALLENGE", ev.ts_end)

    def _on_auth_response(self, ev: Event) -> None:
        if self.challenge is not None:
            ev.rows.append(
                self._latency("AUTH_CHALLENGE", ev.pf.type_name, self.challenge.ts_ns, ev.ts, None, None)
            )
            self.challenge = None

    def _on_ping(self, ev: Event) -> None:
        q = self.pings[ev.direction]
        q.append(ev.ts_end)
        if len(q) > 1000:
            ev.rows.append(self._latency("PING", None, q.popleft(), None, None, None))

    def _on_pong(self, ev: Event) -> None:
        q = self.pings[C2S if ev.direction == S2C else S2C]
        if q:
            ev.rows.append(self._latency("PING", "PONG", q.popleft(), ev.ts, None, None))

    def _on_request(self, ev: Event) -> None:
        # commands that name a producer or consumer get its topic
        if ev.row.get("topic") is None:
            if "producer_id" in ev.body.DESCRIPTOR.fields_by_name and ev.body.HasField("producer_id"):
                ev.row["topic"] = self.producers.get(ev.body.producer_id, {}).get("topic")
            elif "consumer_id" in ev.body.DESCRIPTOR.fields_by_name and ev.body.HasField("consumer_id"):
                ev.row["topic"] = self.consumers.get(ev.body.consumer_id, {}).get("topic")
        if ev.row.get("topic"):
            ev.row["partition"] = partition_of(ev.row["topic"])
        self._request(ev.direction, ev.pf, ev.body, ev.row, ev.ts_end, ev.rows)

    def _on_producer(self, ev: Event) -> None:
        info = {
            "topic": ev.body.topic,
            "name": ev.body.producer_name if ev.body.HasField("producer_name") else None,
        }
        self._remember(self.producers, ev.body.producer_id, info)
        self._on_request(ev)
        if ev.direction == self.client_dir and ev.body.HasField("request_id"):
            self.requests[(ev.direction, ev.body.request_id)].extra["producer_id"] = ev.body.producer_id

    def _on_subscribe(self, ev: Event) -> None:
        info = {"topic": ev.body.topic, "subscription": ev.body.subscription}
        if ev.body.HasField("consumer_name"):
            info["name"] = ev.body.consumer_name
        self._remember(self.consumers, ev.body.consumer_id, info)
        self._on_request(ev)

    def _on_producer_success(self, ev: Event) -> None:
        if not ev.body.producer_ready:
            # the producer waits for exclusive access: the final PRODUCER_SUCCESS follows
            p = self.requests.get((self.client_dir, ev.body.request_id))
            if p is not None:
                ev.row["topic"] = p.topic
                pid = p.extra.get("producer_id")
                if pid in self.producers:
                    self.producers[pid]["name"] = ev.body.producer_name
            return
        p = self._response(ev.direction, ev.pf, ev.body, ev.row, ev.ts, ev.rows)
        if p is not None:
            pid = p.extra.get("producer_id")
            if pid in self.producers:
                self.producers[pid]["name"] = ev.body.producer_name

    def _on_response(self, ev: Event) -> None:
        p = self._response(ev.direction, ev.pf, ev.body, ev.row, ev.ts, ev.rows)
        if p is None and ev.pf.type_code == T.ERROR and self.connect is not None:
            # the broker refused the connection (e.g. authentication failed)
            ev.rows.append(
                self._latency(
                    "CONNECT",
                    "ERROR",
                    self.connect.ts_ns,
                    ev.ts,
                    None,
                    None,
                    error_code=ev.row.get("error_code"),
                )
            )
            self.connect = None
        if ev.pf.type_code == T.ACK_RESPONSE:
            ev.row["topic"] = ev.row.get("topic") or self.consumers.get(ev.body.consumer_id, {}).get("topic")
            ev.rows.append(
                (
                    "acks",
                    {
                        "ts_ns": ev.ts,
                        "ack_type": "pulsar_ack_response",
                        "topic": ev.row.get("topic"),
                        "partition": partition_of(ev.row.get("topic")),
                        "consumer": self._consumer_name(ev.body.consumer_id),
                        "error_code": ev.body.error if ev.body.HasField("error") else None,
                        "correlation_id": ev.body.request_id if ev.body.HasField("request_id") else None,
                        "ack_latency_us": ev.rows[-1][1]["latency_us"]
                        if ev.rows
                        and ev.rows[-1][0] == "latencies"
                        and ev.rows[-1][1]["request_command"] == "ACK"
                        else None,
                        "details": to_json({"consumer_id": ev.body.consumer_id, **ev.details}),
                    },
                )
            )

    def _on_flow(self, ev: Event) -> None:
        ev.row["topic"] = self.consumers.get(ev.body.consumer_id, {}).get("topic")

    # ---- produce

    def _on_send(self, ev: Event) -> None:
        pid = ev.body.producer_id
        prod = self.producers.get(pid, {})
        topic = prod.get("topic")
        ev.row["topic"] = topic
        md = ev.pf.metadata
        if md is None:
            return
        msgs: list[dict] = []
        chunk = None
        base_row = {
            "ts_ns": ev.ts,
            "direction": "produce",
            "source": "capture",
            "topic": topic,
            "partition": partition_of(topic),
            "producer_id": pid,
            "producer_name": md.producer_name or prod.get("name"),
            "message_ts_ns": md.publish_time * 1_000_000 if md.HasField("publish_time") else None,
            "compression": COMPRESSION_NAMES.get(md.compression, str(md.compression)),
            "checksum_ok": ev.pf.checksum_ok,
        }
        status = base.CHECKSUM_MISMATCH if ev.pf.checksum_ok is False else base.OK
        if is_chunk(md):
            chunk = {"uuid": md.uuid, "chunk_id": md.chunk_id, "num_chunks": md.num_chunks_from_msg}
            msgs = self._chunk(
                ("produce", pid, md.uuid), md, ev.pf.payload or b"", None, ev.ts, base_row, status, {}
            )
        else:
            msgs = self._message_rows(md, ev.pf.payload or b"", base_row, status, {})
        seqs = [(-1 if r.get("_batch_index") is None else r["_batch_index"], r.get("sequence")) for r in msgs]
        held = sum(len(r.get("value") or b"") for r in msgs)
        ps = PendingSend(ev.ts_end, topic, msgs, held, seqs, chunk)
        key = (pid, ev.body.sequence_id)
        self.sends.setdefault(key, deque()).append(ps)
        self.sends.move_to_end(key)
        self.n_sends += 1
        self.held_bytes += held
        while self.n_sends > MAX_PENDING or self.held_bytes > HOLD_BYTES:
            if not self._evict_send(ev.rows):
                break

    def _evict_send(self, rows: list[Row]) -> bool:
        """Give up waiting for the oldest send's receipt: emit its produce rows as they are."""
        if not self.sends:
            return False
        key, q = next(iter(self.sends.items()))
        ps = q.popleft()
        if not q:
            del self.sends[key]
        self.n_sends -= 1
        self.held_bytes -= ps.held
        rows.extend(("messages", self._finish(r)) for r in ps.rows)
        rows.append(self._latency("SEND", None, ps.ts_ns, None, key[1], ps.topic))
        return True

    def _finish(self, r: dict) -> dict:
        r.pop("_batch_index", None)
        return r

    def _on_send_receipt(self, ev: Event) -> None:
        self._on_send_answer(ev, error=None)

    def _on_send_error(self, ev: Event) -> None:
        self._on_send_answer(ev, error=ev.body.error)

    def _on_send_answer(self, ev: Event, error) -> None:
        pid = ev.body.producer_id
        topic = self.producers.get(pid, {}).get("topic")
        ev.row["topic"] = topic
        key = (pid, ev.body.sequence_id)
        q = self.sends.get(key)
        ps = None
        if q:
            ps = q.popleft()
            if not q:
                del self.sends[key]
            self.n_sends -= 1
            self.held_bytes -= ps.held
            topic = topic or ps.topic
            ev.rows.append(
                self._latency(
                    "SEND", ev.pf.type_name, ps.ts_ns, ev.ts, ev.body.sequence_id, topic, error_code=error
                )
            )
        latency = None if ps is None else (ev.ts - ps.ts_ns) / 1000.0
        mid = ev.body.message_id if error is None and ev.body.HasField("message_id") else None
        part = mid.partition if mid is not None and mid.partition >= 0 else partition_of(topic)
        common = {
            "ts_ns": ev.ts,
            "topic": topic,
            "partition": part,
            "producer_id": pid,
            "error_code": error,
            "ack_latency_us": latency,
            "correlation_id": ev.body.sequence_id,
        }
        extra = {"sequence_id": ev.body.sequence_id}
        if error is None and ev.body.HasField("highest_sequence_id"):
            extra["highest_sequence_id"] = ev.body.highest_sequence_id
        if ps is None:
            extra["send_unmatched"] = True  # the SEND was not captured, or gave up waiting for this receipt
        if ps is not None and ps.chunk is not None:
            extra["chunk"] = ps.chunk
        ack_type = "pulsar_receipt" if error is None else "pulsar_send_error"
        if ps is None or not ps.sequences:
            bi = mid.batch_index if mid is not None else -1
            ev.rows.append(
                (
                    "acks",
                    {
                        **common,
                        "ack_type": ack_type,
                        "message_id": mid_str(mid.ledger_id, mid.entry_id, bi) if mid is not None else None,
                        "sequence": ev.body.sequence_id,
                        "details": to_json(extra),
                    },
                )
            )
        else:
            for bi, seq in ps.sequences:
                ev.rows.append(
                    (
                        "acks",
                        {
                            **common,
                            "ack_type": ack_type,
                            "message_id": mid_str(mid.ledger_id, mid.entry_id, bi)
                            if mid is not None
                            else None,
                            "sequence": seq,
                            "details": to_json(extra),
                        },
                    )
                )
        if ps is not None:
            for r in ps.rows:
                if mid is not None:
                    r["message_id"] = mid_str(mid.ledger_id, mid.entry_id, r.get("_batch_index", -1))
                    if mid.partition >= 0:
                        r["partition"] = mid.partition
                if error is not None:
                    det = r.get("details")
                    r["details"] = (
                        det[:-1] + "," if det and det != "{}" else "{"
                    ) + f'"send_error":{int(error)}}}'
                ev.rows.append(("messages", self._finish(r)))

    # ---- messages

    def _message_rows(self, md, payload: bytes, base_row: dict, status: str, extra: dict) -> list[dict]:
        """Rows for a whole (non-chunk) payload. Each row has `_batch_index` until finished."""
        common_details = dict(extra)
        for f in ("replicated_from", "schema_version", "deliver_at_time", "marker_type", "uuid",
                  "txnid_least_bits", "txnid_most_bits", "highest_sequence_id"):  # fmt: skip
            if md.HasField(f):
                common_details[f] = getattr(md, f)
        if is_batch(md):
            common_details["num_messages_in_batch"] = md.num_messages_in_batch
        if len(md.encryption_keys):
            if md.encryption_algo:
                common_details["encryption_algo"] = md.encryption_algo
            common_details["encryption_keys"] = [k.key for k in md.encryption_keys]
            common_details["num_messages"] = md.num_messages_in_batch if is_batch(md) else 1
            r = dict(base_row)
            pk = md.partition_key if md.HasField("partition_key") else None
            singles = [
                Single(
                    -1,
                    payload,
                    None,
                    pk,
                    [(kv.key, kv.value) for kv in md.properties],
                    md.sequence_id,
                    None,
                    None,
                )
            ]
            if pk is not None:
                singles[0].key = key_bytes(pk, md.partition_key_b64_encoded)
            return [
                self._row(r, s, ENCRYPTED, "payload is encrypted: kept as it is", common_details)
                for s in singles
            ]
        try:
            singles = expand(md, payload, int(self.ctx.max_decompressed_bytes))
        except PayloadError as e:
            r = dict(base_row)
            r.update(self.ctx.payload.value(None))
            r.update(
                {
                    "sequence": md.sequence_id,
                    "decode_status": e.status,
                    "decode_error": str(e),
                    "details": to_json({**common_details, "payload_size": len(payload)}),
                    "_batch_index": -1,
                }
            )
            return [r]
        return [self._row(dict(base_row), s, status, None, common_details) for s in singles]

    def _row(self, r: dict, s: Single, status: str, error: str | None, common: dict) -> dict:
        r.update(self.ctx.payload.value(s.value))
        r["key"] = self.ctx.payload.key(s.key)
        r["headers"] = [
            {"key": text(k), "value": v if isinstance(v, bytes) else v.encode("utf-8", "surrogateescape")}
            for k, v in s.properties
        ]
        r["sequence"] = s.sequence
        r["decode_status"] = status
        r["decode_error"] = error
        det = dict(common)
        det["batch_index"] = s.batch_index
        if s.event_time:
            det["event_time_ms"] = s.event_time
        if s.ordering_key is not None:
            det["ordering_key"] = s.ordering_key
        if s.null_value:
            det["null_value"] = True
        if isinstance(s.key_raw, str) and s.key is not None and s.key_raw.encode() != s.key:
            det["partition_key_b64"] = s.key_raw
        det.update(s.extra)
        r["details"] = to_json(det)
        r["_batch_index"] = s.batch_index
        return r

    def _chunk(self, key, md, payload, message_id, ts, base_row, status, extra) -> list[dict]:
        """Collect one chunk; when the message is complete, its rows."""
        cm = self.chunks.get(key)
        if cm is None:
            cm = ChunkedMessage(md.uuid, md.num_chunks_from_msg, md.total_chunk_msg_size, ts)
            self.chunks[key] = cm
            while len(self.chunks) > 10_000:
                _k, old = self.chunks.popitem(last=False)
                self.chunk_bytes -= old.size
        before = cm.size
        cm.add(md.chunk_id, payload, md, message_id)
        self.chunk_bytes += cm.size - before
        if not cm.complete:
            if self.chunk_bytes > self.ctx.max_decompressed_bytes:
                # bound memory: give up on the oldest partial messages
                while self.chunks and self.chunk_bytes > self.ctx.max_decompressed_bytes:
                    _k, old = self.chunks.popitem(last=False)
                    self.chunk_bytes -= old.size
            return []
        del self.chunks[key]
        self.chunk_bytes -= cm.size
        whole = cm.assemble()
        first = cm.first_md or md
        det = dict(extra)
        det["chunks"] = {
            "uuid": cm.uuid,
            "num_chunks": cm.num_chunks,
            "chunk_message_ids": [cm.message_ids.get(i) for i in range(cm.num_chunks)],
        }
        # the compression and the batch flag of the whole message are in every chunk's metadata
        rows = self._message_rows(first, whole, base_row, status, det)
        return rows

    def _incomplete_chunk_row(self, key, cm: ChunkedMessage) -> dict:
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
        row.update(self.ctx.payload.value(None))
        if direction == "produce":
            row["producer_id"] = ident
            row["topic"] = self.producers.get(ident, {}).get("topic")
        else:
            row["topic"] = self.consumers.get(ident, {}).get("topic")
            row["consumer"] = self._consumer_name(ident)
        row["partition"] = partition_of(row["topic"])
        return row

    def _on_message(self, ev: Event) -> None:
        cid = ev.body.consumer_id
        cons = self.consumers.get(cid, {})
        topic = cons.get("topic")
        ev.row["topic"] = topic
        md = ev.pf.metadata
        mid = ev.body.message_id
        L, E = mid.ledger_id, mid.entry_id
        part = mid.partition if mid.partition >= 0 else partition_of(topic)
        if md is None:
            return
        base_row = {
            "ts_ns": ev.ts,
            "direction": "deliver",
            "source": "capture",
            "topic": topic,
            "partition": part,
            # the subscription the message went to: the same value acks.consumer carries
            "consumer": self._consumer_name(cid),
            "producer_name": md.producer_name,
            "message_ts_ns": md.publish_time * 1_000_000 if md.HasField("publish_time") else None,
            "compression": COMPRESSION_NAMES.get(md.compression, str(md.compression)),
            "checksum_ok": ev.pf.checksum_ok,
        }
        extra: dict = {"consumer_id": cid}
        if cons.get("subscription"):
            extra["subscription"] = cons["subscription"]
        if ev.body.redelivery_count:
            extra["redelivery_count"] = ev.body.redelivery_count
        if ev.pf.broker_entry is not None:
            extra["broker_entry"] = to_dict(ev.pf.broker_entry)
        status = base.CHECKSUM_MISMATCH if ev.pf.checksum_ok is False else base.OK
        if is_chunk(md):
            msgs = self._chunk(
                ("deliver", cid, md.uuid),
                md,
                ev.pf.payload or b"",
                mid_str(L, E, -1),
                ev.ts,
                base_row,
                status,
                extra,
            )
        else:
            msgs = self._message_rows(md, ev.pf.payload or b"", base_row, status, extra)
        ack_set = list(ev.body.ack_set)
        dl = self.deliveries.setdefault(cid, OrderedDict())
        if is_chunk(md):
            # every chunk's id is acknowledged by the consumer: remember each delivery
            dl[(L, E, -1)] = ev.ts_end
            self.n_deliveries += 1
        for r in msgs:
            bi = r.get("_batch_index", -1)
            r["message_id"] = mid_str(L, E, bi)
            if (L, E, bi) in dl:
                self.n_deliveries -= 1  # the last chunk, remembered above
            if ack_set and bi >= 0 and not bit_set(ack_set, bi):
                r["details"] = r["details"][:-1] + ',"already_acked":true}'
            dl[(L, E, bi)] = ev.ts_end
            self.n_deliveries += 1
            ev.rows.append(("messages", self._finish(r)))
        if msgs and is_batch(md) and not len(md.encryption_keys):
            self._remember(self.batch_sizes, (cid, L, E), md.num_messages_in_batch)
        while self.n_deliveries > MAX_PENDING:
            oldest = next((c for c in self.deliveries if self.deliveries[c]), None)
            if oldest is None:
                break
            self.deliveries[oldest].popitem(last=False)
            self.n_deliveries -= 1

    # ---- acks

    def _on_ack(self, ev: Event) -> None:
        cid = ev.body.consumer_id
        cons = self.consumers.get(cid, {})
        topic = cons.get("topic")
        ev.row["topic"] = topic
        ev.row["partition"] = partition_of(topic)
        self._request(ev.direction, ev.pf, ev.body, ev.row, ev.ts_end, ev.rows)
        dl = self.deliveries.get(cid, OrderedDict())
        cumulative = ev.body.ack_type == pb.CommandAck.Cumulative
        consumer = self._consumer_name(cid)
        rid = ev.body.request_id if ev.body.HasField("request_id") else None
        extra = {"consumer_id": cid}
        if ev.body.HasField("validation_error"):
            extra["validation_error"] = pb.CommandAck.ValidationError.Name(ev.body.validation_error)
        if ev.body.txnid_most_bits or ev.body.txnid_least_bits:
            extra["txnid"] = [ev.body.txnid_most_bits, ev.body.txnid_least_bits]
        seen: set[tuple[int, int, int]] = set()
        for mid in ev.body.message_id:
            L, E, B = mid.ledger_id, mid.entry_id, mid.batch_index
            part = mid.partition if mid.partition >= 0 else partition_of(topic)
            n_batch = self.batch_sizes.get((cid, L, E))
            ack_set = list(mid.ack_set)
            size_known = True
            if ack_set:
                # batch-index ack: a set bit is a message still unacknowledged, a clear bit an acked one
                if mid.HasField("batch_size") and mid.batch_size > 0:
                    size = mid.batch_size
                elif n_batch:
                    size = n_batch
                else:  # delivery not captured: only indexes below the highest unacked one are certain
                    size_known = False
                    size = highest_bit(ack_set)
                in_entry = [i for i in range(min(size, 1 << 16)) if not bit_set(ack_set, i)] or [-1]
            elif B >= 0:
                in_entry = list(range(B + 1)) if cumulative else [B]
            elif n_batch:
                in_entry = list(range(n_batch))
            else:
                in_entry = [-1]
            targets: list[tuple[int, int, int]] = [(L, E, i) for i in in_entry]
            if cumulative:
                earlier = [k for k in dl if (k[0], k[1]) < (L, E)]
                targets = earlier + targets
            mid_extra = dict(extra)
            if ack_set:
                mid_extra["ack_set"] = ack_set
                if not size_known:
                    mid_extra["batch_size_unknown"] = True
            if cumulative:
                mid_extra["cumulative_to"] = mid_str(L, E, B)
            det = to_json(mid_extra)
            for k in targets:
                if k in seen:
                    continue  # the same id listed twice in one ACK is one acknowledgement
                seen.add(k)
                dts = dl.pop(k, None)
                if dts is not None:
                    self.n_deliveries -= 1
                elif cumulative and k[:2] != (L, E):
                    continue
                again = (cid, *k) in self.acked
                self._remember(self.acked, (cid, *k), True)
                ev.rows.append(
                    (
                        "acks",
                        {
                            "ts_ns": ev.ts,
                            "ack_type": "pulsar_ack_cumulative" if cumulative else "pulsar_ack",
                            "topic": topic,
                            "partition": part,
                            "message_id": mid_str(*k),
                            "consumer": consumer,
                            "ack_latency_us": None if dts is None else (ev.ts - dts) / 1000.0,
                            "correlation_id": rid,
                            "details": det if not again else det[:-1] + ',"already_acked":true}',
                        },
                    )
                )


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

_HANDLERS = {
    T.CONNECT: PulsarConversation._on_connect,
    T.CONNECTED: PulsarConversation._on_connected,
    T.AUTH_CHALLENGE: PulsarConversation._on_auth_challenge,
    T.AUTH_RESPONSE: PulsarConversation._on_auth_response,
    T.PING: PulsarConversation._on_ping,
    T.PONG: PulsarConversation._on_pong,
    T.PRODUCER: PulsarConversation._on_producer,
    T.SUBSCRIBE: PulsarConversation._on_subscribe,
    T.PRODUCER_SUCCESS: PulsarConversation._on_producer_success,
    T.SEND: PulsarConversation._on_send,
    T.SEND_RECEIPT: PulsarConversation._on_send_receipt,
    T.SEND_ERROR: PulsarConversation._on_send_error,
    T.MESSAGE: PulsarConversation._on_message,
    T.ACK: PulsarConversation._on_ack,
    T.FLOW: PulsarConversation._on_flow,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: PulsarConversation._on_flow,
    T.REACHED_END_OF_TOPIC: PulsarConversation._on_flow,
    T.ACTIVE_CONSUMER_CHANGE: PulsarConversation._on_flow,
}
for _t in REQUESTS:
    _HANDLERS.setdefault(_t, PulsarConversation._on_request)
for _t in RESPONSES:
    _HANDLERS.setdefault(_t, PulsarConversation._on_response)
