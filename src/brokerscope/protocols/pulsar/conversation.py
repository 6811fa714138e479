"""One Pulsar connection: frames in both directions -> commands, messages, latencies, acks rows.

The shared framer cuts each direction into frames (framing.PulsarRules); `_frame` decodes one into
its commands row and hands it to its type's handler (`_HANDLERS`). A handler looks up the producer
or consumer a frame names (clients.py), pairs the frame with what it answers (pairing.py: requests,
held sends, deliveries; messages.Reassembly: chunks) and adds the rows that makes (rows.py)."""

from __future__ import annotations

import struct
from collections import OrderedDict, deque
from dataclasses import dataclass

from ...tables import Block
from .. import base
from ..base import C2S, S2C, ConnInfo, Context, Conversation, Row
from ..framer import Frame, Framer, Junk
from . import framing
from .clients import Clients
from .framing import HEADER, ParsedFrame, PulsarRules
from .gen import pulsar_api_pb2 as pb
from .messages import Reassembly, is_batch, is_chunk
from .pairing import Deliveries, HeldSends, Pending, PendingSend, acked_indexes, remember
from .rows import (
    ack_response_row,
    ack_rows,
    answered,
    chunked_rows,
    command_columns,
    error_row,
    finish,
    held_bytes,
    incomplete_chunk_row,
    junk_row,
    latency,
    message_base,
    message_rows,
    payload_details,
    receipt_acks,
)
from .values import (
    SECRET_TYPES,
    bit_set,
    damaged,
    mid_str,
    mid_strs,
    partition_of,
    sanitize,
    scrub,
    to_dict,
    to_json,
)

T = pb.BaseCommand
_U32 = struct.Struct(">I")

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


def _swallow_sign(pf: ParsedFrame, n: int) -> str | None:
    """What says a frame (`n` bytes after its total_size) may hold the frames after it, its
    total_size damaged, or None: a checksum that fails (SEND, MESSAGE), or bytes after the command
    of a frame of a known type that carries none (every other command: its total_size is 4 +
    command_size, its BaseCommand parses to its end), or a command that does not parse."""
    if pf.checksum_ok is False:
        return "fails its checksum"
    if pf.cmd is None:
        return "its command does not parse"
    t = pf.type_code
    if pf.has_payload_section and t in framing.TYPE_NAMES and t not in framing.PAYLOAD_TYPES:
        return f"{n - 4 - pf.cmd_size} bytes after its {pf.type_name} command, which carries no payload"
    return None


class PulsarConversation(Conversation):
    """Frames both directions; pairs requests, sends and deliveries with their answers."""

    def __init__(self, conn: ConnInfo, ctx: Context):
        super().__init__(conn, ctx)
        self.max_frame = int(ctx.max_frame_bytes)
        # a capture may start inside a frame: the first frame start must be credible too
        self.framer = {
            d: Framer(PulsarRules(self.max_frame), self.max_frame, in_step=False) for d in (C2S, S2C)
        }
        self.clients = Clients()  # producers and consumers by id
        self.requests: OrderedDict[tuple[str, int], Pending] = OrderedDict()  # (direction, request_id)
        self.connect: Pending | None = None
        self.challenge: Pending | None = None
        self.pings: dict[str, deque[int]] = {C2S: deque(), S2C: deque()}
        self.sends = HeldSends()  # produce rows waiting for their receipt
        self.deliveries = Deliveries()  # delivered ids waiting for their ack
        self.chunks = Reassembly(ctx.max_decompressed_bytes)
        self.protocol_version: int | None = None
        # requests come from the client; the side that sends CONNECT is the client, whatever the
        # driver decided (a capture that starts mid-connection may have the roles the wrong way round)
        self.client_dir = C2S
        # frames of one direction read while the other's framer holds a frame whose damaged size
        # may have taken in what they answer or follow (_waits): (direction, frame, offset, ts,
        # ts_end), read in time order with that direction's frames once they are (_release)
        self.held: list[tuple] = []

    # ------------------------------------------------------------------------------------------
    # byte stream -> frames

    def feed(self, direction: str, data: bytes, ts_ns: int) -> list[Row]:
        rows: list[Row] = []
        fr = self.framer[direction]
        if fr.push(data, ts_ns):
            return rows  # a frame still short of its size
        self._drain(direction, rows)
        if self.held and direction != self.held[0][0]:
            self._release(rows)
        return sanitize(rows)

    def low_water(self, direction: str) -> int | None:
        """Also the frames held (their rows come later), oldest first."""
        low = super().low_water(direction)
        if self.held and direction == self.held[0][0]:
            held = self.held[0][2]
            low = held if low is None or held < low else low
        return low

    def _waits(self, d: str, pf: ParsedFrame) -> bool:
        """Does `pf`, a frame of `d`, wait for the frames the other direction's framer may hold
        in a frame whose damaged size took them in (Framer.holds_frames), to be read with them
        in time order (`held`, up to base.MAX_HELD_ANSWERS; _release)? An answer of the server
        whose request is not pending (its request may be inside); a request of the client whose
        request id is pending (its id reused after the answer to the earlier one, which may be
        inside: read now, it would take that answer); once one waits, every frame of `d` after it."""
        other = S2C if d == C2S else C2S
        if len(self.held) >= base.MAX_HELD_ANSWERS or (self.held and self.held[0][0] != d):
            return False
        if self.held:
            return True  # behind the ones held, whatever it is (a MESSAGE of a consumer in there)
        body = pf.body()
        if body is None:
            return False
        if d == self.client_dir:
            if "request_id" not in body.DESCRIPTOR.fields_by_name or not body.HasField("request_id"):
                return False
            if (d, body.request_id) not in self.requests:
                return False
        elif pf.type_code in (T.SEND_RECEIPT, T.SEND_ERROR):
            if (body.producer_id, body.sequence_id) in self.sends.waiting:
                return False
        elif "request_id" not in body.DESCRIPTOR.fields_by_name or not body.HasField("request_id"):
            return False  # an answer to no request (MESSAGE, ...)
        elif (self.client_dir, body.request_id) in self.requests:
            return False
        return self.framer[other].holds_frames()

    def _release(self, rows: list[Row], everything: bool = False, before: int | None = None) -> None:
        """Read the held frames, in the order they came, once the other direction's framer no
        longer holds a frame that may have taken in what they wait for (`everything`: at the
        close; `before`: only those timed before it, as that direction's frames read again
        reach that time: _drain)."""
        d = self.held[0][0]
        other = S2C if d == C2S else C2S
        if before is None and not everything and self.framer[other].holds_frames():
            return
        while self.held and (before is None or self.held[0][3] < before):
            _d, frame, offset, ts, ts_end = self.held.pop(0)
            self._frame(d, frame, offset, ts, ts_end, rows)

    def _drain(self, direction: str, rows: list[Row], cut: str | None = None) -> None:
        """The rows of what the framer gives now. `cut`: the connection ended or a gap came (the
        event, said in the reason): a frame short of its size that holds frame starts first
        gives them (Framer.reread_if_cut: its size damaged)."""
        fr = self.framer[direction]
        try:
            while True:
                while (item := fr.next()) is not None:
                    if isinstance(item, Junk):
                        rows.append(self._junk_row(direction, item))
                    else:
                        if self.held and self.held[0][0] != direction:  # the others in time order
                            self._release(rows, before=item.ts_first)
                        self._frame(
                            direction, item.data, item.offset, item.ts_first, item.ts_last, rows, item
                        )
                why = f"runs past {cut} and frames start inside it: its size damaged"
                if cut is None or not fr.reread_if_cut(why):
                    return
        except Exception as e:  # never raise out of the decoder: drop what is buffered
            off, n, ts = fr.drop_all()
            rows.append(error_row(direction, off, n, base.MALFORMED, f"decoder error: {e!r}", ts))

    def _junk_row(self, d: str, j: Junk) -> Row:
        """A row for bytes that are not a whole frame. Only an oversize frame's header or an
        unfinished frame that starts in step, of a type known and not carrying credentials, says
        what it is; bytes of no determined type keep none (Context.raw)."""
        row = junk_row(d, j, self.max_frame)
        if j.status == base.TRUNCATED:
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

    def gap(self, direction: str, nbytes: int, ts_ns: int) -> list[Row]:
        rows: list[Row] = []
        self._drain(direction, rows, f"a capture gap of {nbytes} bytes")
        try:
            junks, _ = self.framer[direction].gap(nbytes, ts_ns)
            rows.extend(self._junk_row(direction, j) for j in junks)
        except Exception as e:
            rows.append(error_row(direction, 0, 0, base.GAP, f"decoder error: {e!r}", ts_ns))
        if self.held and direction != self.held[0][0]:
            self._release(rows)
        return sanitize(rows)

    def close(self) -> list[Row]:
        rows: list[Row] = []
        try:
            for d in (C2S, S2C):
                self._drain(d, rows, "the end of the connection")
                rows.extend(self._junk_row(d, j) for j in self.framer[d].close())
            if self.held:
                self._release(rows, everything=True)
            # produce rows still waiting for a receipt, then unanswered requests
            for (_pid, seq), ps in self.sends.drain():
                self._unanswered_send(seq, ps, rows)
            for (_d, rid), p in self.requests.items():
                rows.append(latency(p.command, None, p.ts_ns, None, rid, p.topic, p.partition))
            self.requests.clear()
            for p in (self.connect, self.challenge):
                if p is not None:
                    rows.append(latency(p.command, None, p.ts_ns, None, None, None))
            self.connect = self.challenge = None
            for d in (C2S, S2C):
                rows.extend(latency("PING", None, ts, None, None, None) for ts in self.pings[d])
                self.pings[d].clear()
            for key, cm in self.chunks.drain():
                rows.append(("messages", self._incomplete_chunk_row(key, cm)))
        except Exception as e:
            ts = self.framer[C2S].buf.last_ts
            rows.append(error_row(C2S, 0, 0, base.MALFORMED, f"decoder error at close: {e!r}", ts))
        return sanitize(rows)

    # ------------------------------------------------------------------------------------------
    # one frame

    def _frame(
        self,
        d: str,
        frame: bytes,
        offset: int,
        ts: int,
        ts_end: int,
        rows: list[Row],
        item: Frame | None = None,
    ) -> None:
        """A frame's rows (`item`: the Frame it came as, to be read again should it have
        swallowed the frames after it)."""
        pf = framing.parse_frame(frame, self.ctx.payload.checksums_kept)
        if item is not None and (why := _swallow_sign(pf, len(frame))) is not None:
            if self.framer[d].reread_if_swallowed(
                item, f"{why}, and frames start inside it: its size damaged"
            ):
                return
        if item is not None and self._waits(d, pf):
            self.held.append((d, frame, offset, ts, ts_end))
            return
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
            why = (
                damaged(pf, frame[4 : 4 + pf.cmd_size])
                if body is not None and pf.type_code in SECRET_TYPES
                else None
            )
            if why is not None:  # none of its text kept, anywhere
                row["decode_status"] = base.MALFORMED
                row["decode_error"] = f"{pf.type_name} seems damaged ({why}): none of its fields kept"
                body = None
            if body is not None:
                details = to_dict(body)
                if pf.type_code in SECRET_TYPES:
                    scrub(details)
                command_columns(row, pf.type_code, body)
            if pf.missing:
                details["missing_required"] = pf.missing
            if pf.has_payload_section:
                details = {"command": details, "payload": payload_details(pf, self.ctx.payload)}
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

    # ------------------------------------------------------------------------------------------
    # pairing helpers

    def _request(self, d, pf, body, row, ts_end, rows) -> None:
        """Remember a request until its response (the oldest are given up, unanswered)."""
        if d != self.client_dir or not body.HasField("request_id"):
            return
        p = Pending(pf.type_name, ts_end, row.get("topic"), row.get("partition"))
        for (_d, rid), old in remember(self.requests, (d, body.request_id), p):
            rows.append(latency(old.command, None, old.ts_ns, None, rid, old.topic, old.partition))

    def _response(self, d, pf, body, row, ts, rows) -> Pending | None:
        """Pair a response with its request: the latency row; the request, if it was seen."""
        if not body.HasField("request_id"):
            return None
        req_dir = C2S if d == S2C else S2C
        p = self.requests.pop((req_dir, body.request_id), None)
        if p is None:
            return None
        if row.get("topic") is None and p.topic is not None:
            row["topic"] = p.topic
        err = row.get("error_code")
        rows.append(latency(p.command, pf.type_name, p.ts_ns, ts, body.request_id, p.topic, p.partition, err))
        return p

    # ------------------------------------------------------------------------------------------
    # command handlers: each takes the frame's Event

    def _on_connect(self, ev: Event) -> None:
        self.client_dir = ev.direction
        ev.row["api_version"] = ev.body.protocol_version
        ev.row["client_id"] = ev.body.client_version
        self.protocol_version = ev.body.protocol_version
        self.connect = Pending("CONNECT", ev.ts_end)

    def _on_connected(self, ev: Event) -> None:
        ev.row["api_version"] = ev.body.protocol_version
        if self.connect is not None:
            version = ev.body.protocol_version
            ev.rows.append(
                latency("CONNECT", ev.pf.type_name, self.connect.ts_ns, ev.ts, None, None, version=version)
            )
            self.connect = None

    def _on_auth_challenge(self, ev: Event) -> None:
        if self.connect is not None:
            ev.rows.append(latency("CONNECT", ev.pf.type_name, self.connect.ts_ns, ev.ts, None, None))
            self.connect = None
        self.challenge = Pending("AUTH_CHALLENGE", ev.ts_end)

    def _on_auth_response(self, ev: Event) -> None:
        if self.challenge is not None:
            ev.rows.append(
                latency("AUTH_CHALLENGE", ev.pf.type_name, self.challenge.ts_ns, ev.ts, None, None)
            )
            self.challenge = None

    def _on_ping(self, ev: Event) -> None:
        q = self.pings[ev.direction]
        q.append(ev.ts_end)
        if len(q) > 1000:
            ev.rows.append(latency("PING", None, q.popleft(), None, None, None))

    def _on_pong(self, ev: Event) -> None:
        q = self.pings[C2S if ev.direction == S2C else S2C]
        if q:
            ev.rows.append(latency("PING", "PONG", q.popleft(), ev.ts, None, None))

    def _on_request(self, ev: Event) -> None:
        # commands that name a producer or consumer get its topic
        if ev.row.get("topic") is None:
            if "producer_id" in ev.body.DESCRIPTOR.fields_by_name and ev.body.HasField("producer_id"):
                ev.row["topic"] = self.clients.producer_topic(ev.body.producer_id)
            elif "consumer_id" in ev.body.DESCRIPTOR.fields_by_name and ev.body.HasField("consumer_id"):
                ev.row["topic"] = self.clients.consumer_topic(ev.body.consumer_id)
        if ev.row.get("topic"):
            ev.row["partition"] = partition_of(ev.row["topic"])
        self._request(ev.direction, ev.pf, ev.body, ev.row, ev.ts_end, ev.rows)

    def _on_producer(self, ev: Event) -> None:
        name = ev.body.producer_name if ev.body.HasField("producer_name") else None
        self.clients.add_producer(ev.body.producer_id, ev.body.topic, name)
        self._on_request(ev)
        if ev.direction == self.client_dir and ev.body.HasField("request_id"):
            self.requests[(ev.direction, ev.body.request_id)].extra["producer_id"] = ev.body.producer_id

    def _on_subscribe(self, ev: Event) -> None:
        name = ev.body.consumer_name if ev.body.HasField("consumer_name") else None
        self.clients.add_consumer(ev.body.consumer_id, ev.body.topic, ev.body.subscription, name)
        self._on_request(ev)

    def _on_producer_success(self, ev: Event) -> None:
        if not ev.body.producer_ready:
            # the producer waits for exclusive access: the final PRODUCER_SUCCESS follows
            p = self.requests.get((self.client_dir, ev.body.request_id))
            if p is not None:
                ev.row["topic"] = p.topic
                self.clients.name_producer(p.extra.get("producer_id"), ev.body.producer_name)
            return
        p = self._response(ev.direction, ev.pf, ev.body, ev.row, ev.ts, ev.rows)
        if p is not None:
            self.clients.name_producer(p.extra.get("producer_id"), ev.body.producer_name)

    def _on_response(self, ev: Event) -> None:
        p = self._response(ev.direction, ev.pf, ev.body, ev.row, ev.ts, ev.rows)
        if p is None and ev.pf.type_code == T.ERROR and self.connect is not None:
            # the broker refused the connection (e.g. authentication failed)
            error = ev.row.get("error_code")
            ev.rows.append(
                latency("CONNECT", "ERROR", self.connect.ts_ns, ev.ts, None, None, error_code=error)
            )
            self.connect = None
        if ev.pf.type_code == T.ACK_RESPONSE:
            cid = ev.body.consumer_id
            ev.row["topic"] = ev.row.get("topic") or self.clients.consumer_topic(cid)
            # the ACK's latency, if this answered one
            last_table, last = ev.rows[-1] if ev.rows else (None, None)
            paired = last_table == "latencies" and last["request_command"] == "ACK"
            ack_latency = last["latency_us"] if paired else None
            topic, consumer = ev.row.get("topic"), self.clients.consumer_name(cid)
            ev.rows.append(ack_response_row(ev.ts, topic, consumer, ev.body, ack_latency, ev.details))

    def _on_consumer_stats(self, ev: Event) -> None:
        """CONSUMER_STATS names a consumer id only: its request remembers the consumer and its
        subscription, for the answer (whose msg_backlog is the subscription's, lag.py)."""
        self._on_request(ev)
        p = self.requests.get((ev.direction, ev.body.request_id)) if ev.body.HasField("request_id") else None
        if p is not None and ev.body.HasField("consumer_id"):
            cid = ev.body.consumer_id
            p.extra.update(consumer_id=cid, subscription=self.clients.consumer(cid).get("subscription"))

    def _on_consumer_stats_response(self, ev: Event) -> None:
        """The answer's details gain the consumer id its request named and that consumer's
        subscription (when its SUBSCRIBE was captured)."""
        p = self._response(ev.direction, ev.pf, ev.body, ev.row, ev.ts, ev.rows)
        if p is not None and "consumer_id" in p.extra:
            ev.details["consumer_id"] = p.extra["consumer_id"]
            if p.extra["subscription"]:
                ev.details["subscription"] = p.extra["subscription"]

    def _on_flow(self, ev: Event) -> None:
        ev.row["topic"] = self.clients.consumer_topic(ev.body.consumer_id)

    # ---- produce

    def _on_send(self, ev: Event) -> None:
        pid = ev.body.producer_id
        prod = self.clients.producer(pid)
        topic = prod.get("topic")
        ev.row["topic"] = topic
        md = ev.pf.metadata
        if md is None:
            return
        name = md.producer_name or prod.get("name")
        who = {"producer_id": pid}
        base_row = message_base("produce", ev.ts, topic, partition_of(topic), who, name, ev.pf)
        chunk = None
        if is_chunk(md):
            chunk = {"uuid": md.uuid, "chunk_id": md.chunk_id, "num_chunks": md.num_chunks_from_msg}
        msgs = self._messages(ev, ("produce", pid), base_row, {}, None)
        # the rows wait for the receipt, which names their message id
        seqs = [
            (b.cols["_batch_index"], b.cols["sequence"] if "sequence" in b.cols else b.column("sequence"))
            for b in msgs
        ]
        held = sum(held_bytes(b) for b in msgs)
        self.sends.add((pid, ev.body.sequence_id), PendingSend(ev.ts_end, topic, msgs, held, seqs, chunk))
        while self.sends.over():
            oldest = self.sends.take_oldest()
            if oldest is None:
                break
            (_pid, seq), ps = oldest
            self._unanswered_send(seq, ps, ev.rows)

    def _unanswered_send(self, seq: int, ps: PendingSend, rows: list[Row]) -> None:
        """A send whose receipt never came (or was given up on): its produce rows as they are,
        and its latency row."""
        rows.extend(("messages", finish(r)) for r in ps.rows)
        rows.append(latency("SEND", None, ps.ts_ns, None, seq, ps.topic))

    def _on_send_receipt(self, ev: Event) -> None:
        self._on_send_answer(ev, error=None)

    def _on_send_error(self, ev: Event) -> None:
        self._on_send_answer(ev, error=ev.body.error)

    def _on_send_answer(self, ev: Event, error) -> None:
        """A SEND_RECEIPT or SEND_ERROR: the send's latency, an acks row per message it sent, and
        the produce rows it held, now with their message id (or the error)."""
        pid, seq = ev.body.producer_id, ev.body.sequence_id
        topic = self.clients.producer_topic(pid)
        ev.row["topic"] = topic
        ps = self.sends.take((pid, seq))
        if ps is not None:
            topic = topic or ps.topic
            ev.rows.append(latency("SEND", ev.pf.type_name, ps.ts_ns, ev.ts, seq, topic, error_code=error))
        mid = ev.body.message_id if error is None and ev.body.HasField("message_id") else None
        ev.rows.extend(receipt_acks(ev.ts, ev.body, error, topic, mid, ps))
        if ps is not None:
            ev.rows.extend(("messages", answered(r, mid, error)) for r in ps.rows)

    # ---- messages

    def _messages(self, ev: Event, who: tuple[str, int], base_row: dict, extra: dict, mid) -> list[Block]:
        """The message rows of a SEND's or MESSAGE's payload, as a block (none while a chunked
        message is incomplete). A chunk is collected (by `who`: produce or deliver, and the
        producer or consumer id) until its message is complete; `mid`: the chunk's message id,
        if known."""
        md = ev.pf.metadata
        status = base.CHECKSUM_MISMATCH if ev.pf.checksum_ok is False else base.OK
        payload = ev.pf.payload or b""
        base_row.update(self.conn.frame_range(ev.direction, ev.row.get("stream_offset"), ev.row.get("size")))
        if not is_chunk(md):
            return [message_rows(self.ctx, md, payload, base_row, status, extra)]
        cm = self.chunks.add((*who, md.uuid), md, payload, mid, ev.ts, base_row)
        return [] if cm is None else [chunked_rows(self.ctx, cm, md, base_row, status, extra)]

    def _incomplete_chunk_row(self, key, cm) -> dict:
        direction, ident, _uuid = key
        if direction == "produce":
            return incomplete_chunk_row(self.ctx, key, cm, self.clients.producer_topic(ident), None)
        topic = self.clients.consumer_topic(ident)
        return incomplete_chunk_row(self.ctx, key, cm, topic, self.clients.consumer_name(ident))

    def _on_message(self, ev: Event) -> None:
        cid = ev.body.consumer_id
        cons = self.clients.consumer(cid)
        topic = cons.get("topic")
        ev.row["topic"] = topic
        md = ev.pf.metadata
        mid = ev.body.message_id
        L, E = mid.ledger_id, mid.entry_id
        part = mid.partition if mid.partition >= 0 else partition_of(topic)
        if md is None:
            return
        # the consumer column: the subscription the message went to, as acks.consumer has it
        who = {"consumer": self.clients.consumer_name(cid)}
        base_row = message_base("deliver", ev.ts, topic, part, who, md.producer_name, ev.pf)
        extra: dict = {"consumer_id": cid}
        if cons.get("subscription"):
            extra["subscription"] = cons["subscription"]
        if ev.body.redelivery_count:
            extra["redelivery_count"] = ev.body.redelivery_count
        if ev.pf.broker_entry is not None:
            extra["broker_entry"] = to_dict(ev.pf.broker_entry)
        msgs = self._messages(ev, ("deliver", cid), base_row, extra, mid_str(L, E, -1))
        # each message waits for its ack
        ack_set = list(ev.body.ack_set)
        dl = self.deliveries.of(cid)
        if is_chunk(md):
            # every chunk's id is acknowledged by the consumer: remember each delivery
            self.deliveries.add_chunk(dl, L, E, ev.ts_end)
        for b in msgs:
            bis = b.cols["_batch_index"]
            b.cols["message_id"] = mid_strs(L, E, bis)
            if ack_set and any(bi >= 0 and not bit_set(ack_set, bi) for bi in bis):
                details = b.column("details")
                b.cols["details"] = [
                    d[:-1] + ',"already_acked":true}' if bi >= 0 and not bit_set(ack_set, bi) else d
                    for d, bi in zip(details, bis, strict=True)
                ]
            self.deliveries.add_all(dl, L, E, bis, ev.ts_end)
            ev.rows.append(("messages", finish(b)))
        if msgs and is_batch(md) and not len(md.encryption_keys):
            self.deliveries.set_batch_size(cid, L, E, md.num_messages_in_batch)
        self.deliveries.trim()

    # ---- acks

    def _on_ack(self, ev: Event) -> None:
        cid = ev.body.consumer_id
        topic = self.clients.consumer_topic(cid)
        ev.row["topic"] = topic
        ev.row["partition"] = partition_of(topic)
        self._request(ev.direction, ev.pf, ev.body, ev.row, ev.ts_end, ev.rows)
        cumulative = ev.body.ack_type == pb.CommandAck.Cumulative
        consumer = self.clients.consumer_name(cid)
        rid = ev.body.request_id if ev.body.HasField("request_id") else None
        extra = {"consumer_id": cid}
        if ev.body.HasField("validation_error"):
            extra["validation_error"] = pb.CommandAck.ValidationError.Name(ev.body.validation_error)
        if ev.body.txnid_most_bits or ev.body.txnid_least_bits:
            extra["txnid"] = [ev.body.txnid_most_bits, ev.body.txnid_least_bits]
        seen: dict[tuple[int, int], set[int]] = {}  # the ids this ACK acknowledged, by entry
        for mid in ev.body.message_id:
            L, E, B = mid.ledger_id, mid.entry_id, mid.batch_index
            part = mid.partition if mid.partition >= 0 else partition_of(topic)
            ack_set = list(mid.ack_set)
            n_batch = self.deliveries.batch_size(cid, L, E)
            in_entry, size_known = acked_indexes(mid, ack_set, cumulative, n_batch)
            mid_extra = dict(extra)
            if ack_set:
                mid_extra["ack_set"] = ack_set
                if not size_known:
                    mid_extra["batch_size_unknown"] = True
            if cumulative:
                mid_extra["cumulative_to"] = mid_str(L, E, B)
            det = to_json(mid_extra)
            acked = self.deliveries.acknowledge(cid, L, E, in_entry, cumulative, seen)
            ev.rows.extend(ack_rows(ev.ts, cumulative, topic, part, consumer, rid, det, acked))


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
    T.CONSUMER_STATS: PulsarConversation._on_consumer_stats,
    T.CONSUMER_STATS_RESPONSE: PulsarConversation._on_consumer_stats_response,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: PulsarConversation._on_flow,
    T.REACHED_END_OF_TOPIC: PulsarConversation._on_flow,
    T.ACTIVE_CONSUMER_CHANGE: PulsarConversation._on_flow,
}
for _t in REQUESTS:
    _HANDLERS.setdefault(_t, PulsarConversation._on_request)
for _t in RESPONSES:
    _HANDLERS.setdefault(_t, PulsarConversation._on_response)
