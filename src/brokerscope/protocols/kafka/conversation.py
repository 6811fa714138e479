"""One Kafka TCP connection: request/response pairing, and rows for every table.

Frames come from the shared framer (`framing.KafkaRules`). A response carries no api key: it is
paired with its request by correlation id.
"""

from __future__ import annotations

import base64
import struct
from collections import OrderedDict
from dataclasses import dataclass, field

from .. import base
from ..base import C2S, S2C, ConnInfo, Context, Conversation, Row
from ..framer import Framer, Junk
from . import inference, schema
from . import records as rec
from .framing import MAX_CLIENT_ID, KafkaRules, plausible_request
from .names import (
    AUTH_API_KEYS,
    EXTRA_API_NAMES,
    SECRET_FIELDS,
    SENSITIVE_CONFIG,
    ApiKey,
)

_I32 = struct.Struct(">i")
# KIP-932 AcknowledgeTypes ("0:Gap,1:Accept,2:Release,3:Reject,4:Renew" in the request specs);
# a gap marks an offset without a record, not an acknowledgement
SHARE_ACK_TYPES = {1: "accept", 2: "release", 3: "reject", 4: "renew"}
MAX_SHARE_ACK_ROWS = 100_000  # per request; beyond, one acks row per acknowledged range
MAX_PENDING = 100_000
MAX_HELD_BYTES = 64 * 1024 * 1024  # produced message rows held for their offsets
_MAX_TOPIC_IDS = 100_000  # per connection
# responses whose request is missing are held until the connection ends, when every api requested
# on it is known, and then decoded where the api can be inferred with certainty (inference.py)
MAX_HELD_MISSING = 1_000
MAX_HELD_MISSING_BYTES = 16 * 1024 * 1024
RECENT_REQUESTS = 1_024  # correlation id -> (api key, version) of the latest requests
MAX_REQUESTED_APIS = 4_096  # distinct (api key, version) pairs remembered per connection


def _no_plan(key: int, version: int, name: str | None) -> dict:
    """Status and error of a frame no spec describes: an unknown api, or a version too new."""
    if schema.spec(key) is None:
        return {
            "decode_status": base.UNKNOWN_COMMAND,
            "decode_error": f"api key {key} ({name or 'unknown'}) is not in the message specs",
        }
    lo, hi = schema.spec_versions(key)
    return {
        "decode_status": base.UNSUPPORTED_VERSION,
        "decode_error": f"{name} v{version} is newer than the specs (v{lo}-v{hi})",
    }


def api_name(key: int) -> str | None:
    return schema.api_name(key) or EXTRA_API_NAMES.get(key)


def _named_not_sasl(key: int) -> bool:
    """May a frame of this api key keep its bytes in `raw`? Only a named, non-SASL one
    (Context.raw)."""
    return api_name(key) is not None and key not in AUTH_API_KEYS


@dataclass
class HeldResponse:
    """A response whose request is not in the capture, waiting for the end of the connection."""

    corr: int
    frame: bytes
    offset: int
    ts0: int
    ts1: int
    neighbours: dict = field(default_factory=dict)  # correlation id N-1 / N+1 -> (api key, version)


@dataclass
class Pending:
    """A request waiting for its response."""

    api_key: int
    version: int
    name: str | None
    decodable: bool
    ts_end: int  # last byte of the request
    topic: str | None
    partition: int | None
    client_id: str | None
    produce: list = field(default_factory=list)  # [(topic, partition, Batch, [message rows])]
    commits: list = field(default_factory=list)  # [(topic, partition, offset)]
    group: str | None = None
    producer_id: int | None = None
    fetch_offsets: dict = field(default_factory=dict)  # (topic or id, partition) -> fetch offset
    read_committed: bool = False
    txn: dict | None = None
    held_bytes: int = 0
    share_acks: list = field(default_factory=list)  # [(topic, topic id, partition, first, last, types)]


class KafkaConversation(Conversation):
    def __init__(self, conn: ConnInfo, ctx: Context):
        super().__init__(conn, ctx)
        self.max_frame = ctx.max_frame_bytes
        self.framer = {d: Framer(KafkaRules(self, d), self.max_frame) for d in (C2S, S2C)}
        # frame starts are confirmed, not a guess about where a capture cut in: the stream began
        # with its handshake, or a whole frame was taken since the start or the last resync
        self.in_step = {C2S: not conn.midstream, S2C: not conn.midstream}
        self.pending: OrderedDict[int, Pending] = OrderedDict()
        self.topic_ids: dict[str, str] = {}
        self.sasl_raw = False  # SaslHandshake v0 done: raw SASL tokens follow, no Kafka header
        self.held_bytes = 0
        # request_missing inference: what was requested on this connection, and the held responses
        self.recent_reqs: OrderedDict[int, tuple[int, int]] = OrderedDict()
        self.requested: dict[tuple[int, int], bool] = {}  # (api key, version) -> decodable
        self.last_corr: int | None = None  # correlation id of the last request header read
        self.client_id: str | None = None  # client id of the last request decoded
        self.requested_overflow = False
        self.held: OrderedDict[int, HeldResponse] = OrderedDict()  # by arrival
        self.held_by_corr: dict[int, list[HeldResponse]] = {}
        self.held_missing_bytes = 0
        self._held_seq = 0

    # -- driver interface ---------------------------------------------------------------------
    def feed(self, direction: str, data: bytes, ts_ns: int) -> list[Row]:
        out: list[Row] = []
        fr = self.framer[direction]
        fr.push(data, ts_ns)
        try:
            self._drain(direction, out)
        except Exception as e:  # never raise out of the decoder: drop what is buffered
            off, n, ts = fr.drop_all()
            err = f"internal: {type(e).__name__}: {e}"
            out.append(self._error_row(direction, off, base.MALFORMED, err, None, n, ts, ts))
            self.in_step[direction] = False
        return out

    def gap(self, direction: str, nbytes: int, ts_ns: int) -> list[Row]:
        out: list[Row] = []
        junk, _ = self.framer[direction].gap(nbytes, ts_ns)
        for j in junk:
            self._junk(direction, j, out)
        return out

    def close(self) -> list[Row]:
        out: list[Row] = []
        for d, fr in self.framer.items():
            for j in fr.close():
                self._junk(d, j, out)
        for corr, p in self.pending.items():
            out.extend(self._unanswered(corr, p))
        self.pending.clear()
        while self.held:
            out.append(self._release_held(infer=True))
        return out

    # -- frames and junk ----------------------------------------------------------------------
    def _drain(self, d: str, out: list[Row]) -> None:
        fr = self.framer[d]
        handle = self._request if d == C2S else self._response
        while (item := fr.next()) is not None:
            if item.__class__ is Junk:
                self._junk(d, item, out)
                continue
            if not item.in_step:
                self.in_step[d] = False
            frame = item.data[4:]
            try:
                handle(frame, item.offset, item.ts_first, item.ts_last, out)
            except Exception as e:  # a bug or an unforeseen input: one error row, go on
                raw = frame if self._typed_head(d, frame) else None
                err = f"internal: {type(e).__name__}: {e}"
                out.append(
                    self._error_row(
                        d, item.offset, base.MALFORMED, err, raw, len(item.data), item.ts_first, item.ts_last
                    )
                )
            self.in_step[d] = True

    def _junk(self, d: str, j: Junk, out: list[Row]) -> None:
        """The row of bytes that are not a whole frame, with what a header that survived tells."""
        extra: dict = {}
        raw = None
        head = j.head
        if j.status == base.OVERSIZE and head:
            extra = self._oversize_header(d, head)
        elif j.status == base.GAP and len(head) >= 4 and self.framer[d].rules.started:
            if 0 <= _I32.unpack_from(head, 0)[0] <= self.max_frame:
                extra = self._gap_header(d, head[:12], j.ts_first, out)
        elif j.status == base.TRUNCATED and self._typed_head(d, head[4:12]):
            raw = head[: self.ctx.max_raw_bytes]
        if "raw" in extra:
            raw = extra.pop("raw")
        out.append(
            self._error_row(d, j.offset, j.status, j.reason, raw, j.size, j.ts_first, j.ts_last, **extra)
        )
        if not j.skipped:
            self.in_step[d] = False  # the next frame start is a resync's guess

    def _oversize_header(self, d: str, head: bytes) -> dict:
        """What a credible header of an oversize frame tells; its request is no longer pending."""
        if d == C2S:
            key, ver, corr = struct.unpack_from(">hhi", head, 4)
            self.pending.pop(corr, None)
            raw = head[:64] if self._typed(C2S, key) else None
            return dict(
                command=api_name(key), command_code=key, api_version=ver, correlation_id=corr, raw=raw
            )
        corr = _I32.unpack_from(head, 4)[0]
        p = self.pending.pop(corr, None)
        if p is None:
            return {"correlation_id": corr}
        raw = head[:64] if self._typed(S2C, p.api_key) else None
        return dict(
            command=p.name, command_code=p.api_key, api_version=p.version, correlation_id=corr, raw=raw
        )

    def _gap_header(self, direction: str, head: bytes, ts: int, out: list[Row]) -> dict:
        """What the surviving head of a frame cut by a gap tells: for a request, its api, version
        and correlation id (registered as pending, so its response still decodes)."""
        if direction == C2S and len(head) >= 12:
            key, ver, corr = struct.unpack_from(">hhi", head, 4)
            if api_name(key) is not None and corr >= 0:
                self._note_request(corr, key, ver)
                p = schema.plan(key, ver, "request")
                self._add_pending(
                    corr, Pending(key, ver, api_name(key), p is not None, ts, None, None, None), out
                )
                return {
                    "command": api_name(key),
                    "command_code": key,
                    "api_version": ver,
                    "correlation_id": corr,
                }
        if direction == S2C and len(head) >= 8:
            corr = _I32.unpack_from(head, 4)[0]
            p = self.pending.pop(corr, None)
            if p is not None:
                # the response's first byte was captured: the latency is known, its body is not
                rows = self._unanswered(corr, p)
                rows[0][1].update(
                    response_command=p.name, response_ts_ns=ts, latency_us=(ts - p.ts_end) / 1000.0
                )
                out.extend(rows)  # with its produced messages, without offsets
                return {
                    "command": p.name,
                    "command_code": p.api_key,
                    "api_version": p.version,
                    "correlation_id": corr,
                }
        return {}

    def _typed(self, d: str, key: int) -> bool:
        """May a frame of this api key keep its bytes in `raw`? Only a named, non-SASL one whose
        start is confirmed: the direction is in step (Context.raw). The first frame of a mid-stream
        capture is a guess, and a wrong guess spans the real frames after it."""
        return self.in_step[d] and _named_not_sasl(key)

    def _typed_head(self, d: str, head: bytes | memoryview) -> bool:
        """Is this the start of a frame (after its size field) whose type is read and not SASL?
        Only while the direction is in step (a whole frame was taken since it started or
        resynchronised): a request whose header is there, or a response whose correlation id is
        pending (Context.raw)."""
        if self.sasl_raw or self.framer[d].resync:
            return False
        if d == C2S:
            return len(head) >= 2 and self._typed(d, struct.unpack_from(">h", head, 0)[0])
        p = self.pending.get(_I32.unpack_from(head, 0)[0]) if len(head) >= 4 else None
        return p is not None and self._typed(d, p.api_key)

    # -- rows ---------------------------------------------------------------------------------
    def _error_row(self, d, offset, status, error, raw, size, ts0, ts1, **extra) -> Row:
        row = {
            "direction": d,
            "size": size,
            "stream_offset": offset,
            "ts_ns": ts0,
            "ts_end_ns": ts1,
            "decode_status": status,
            "decode_error": error,
            # callers pass bytes only for a frame of known, non-auth type (Context.raw)
            "raw": None if raw is None else self.ctx.raw(raw, typed=True),
        }
        row.update(extra)
        return ("commands", row)

    def _summary_columns(self, summ: dict, body: dict, topic=None, partition=None) -> dict:
        """The commands row's topic, topic id, topics, partition, error code and throttle time
        from a decoded body's summary (`topic`, `partition`: the request's, for a response that
        names none)."""
        topics = list(summ["topics"]) + [n for t in summ["topic_ids"] if (n := self._resolve_topic(None, t))]
        return {
            "topic": topics[0] if topics else topic,
            "topic_id": summ["topic_ids"][0] if not (topics or topic) and summ["topic_ids"] else None,
            "topics": topics or None,
            "partition": summ["partition"] if summ["partition"] is not None else partition,
            "error_code": summ["error_code"],
            "throttle_time_ms": body.get("ThrottleTimeMs"),
        }

    def _resolve_topic(self, name: str | None, topic_id: str | None) -> str | None:
        if name:
            return name
        if topic_id:
            return self.topic_ids.get(topic_id)
        return None

    def _learn_topic_ids(self, body: dict, out: list[Row]) -> None:
        for t in body.get("Topics") or ():
            tid, name = t.get("TopicId"), t.get("Name")
            if tid and name and tid != "00000000-0000-0000-0000-000000000000":
                # per connection only: rows must not depend on which task decoded what before;
                # the pipeline names ids across connections from these side rows
                if len(self.topic_ids) < _MAX_TOPIC_IDS or tid in self.topic_ids:
                    self.topic_ids[tid] = name
                out.append((base.TOPIC_NAMES, {"topic_id": tid, "topic": name}))

    # -- requests -----------------------------------------------------------------------------
    def _sasl_token(self, direction: str, frame: bytes, offset: int, ts0: int, ts1: int) -> Row:
        """A raw SASL token (after a v0 SaslHandshake): its size only, never its bytes."""
        details = base.to_json({"token": base.redacted(frame)})
        row = {
            "direction": direction,
            "command": "SaslToken",
            "size": len(frame) + 4,
            "stream_offset": offset,
        }
        row.update(ts_ns=ts0, ts_end_ns=ts1, decode_status=base.OK, details=details)
        return "commands", row

    def _request(self, frame: bytes, offset: int, ts0: int, ts1: int, out: list[Row]) -> None:
        size = len(frame) + 4
        if self.sasl_raw:
            conf = plausible_request(_I32.pack(len(frame)) + frame[: 10 + MAX_CLIENT_ID], 0, self.max_frame)
            if conf < 2:
                out.append(self._sasl_token(C2S, frame, offset, ts0, ts1))
                return
            self.sasl_raw = False
        try:
            h = schema.read_request_header(frame)
        except schema.DecodeError as e:
            out.append(self._error_row(C2S, offset, e.status, f"request header: {e}", None, size, ts0, ts1))
            return
        self._note_request(h.correlation_id, h.api_key, h.api_version)
        self.client_id = h.client_id
        name = api_name(h.api_key)
        row = {
            "direction": C2S,
            "command": name,
            "command_code": h.api_key,
            "api_version": h.api_version,
            "correlation_id": h.correlation_id,
            "client_id": h.client_id,
            "size": size,
            "stream_offset": offset,
            "ts_ns": ts0,
            "ts_end_ns": ts1,
        }
        p = schema.plan(h.api_key, h.api_version, "request")
        pend = Pending(h.api_key, h.api_version, name, p is not None, ts1, None, None, h.client_id)
        if p is None:
            row.update(_no_plan(h.api_key, h.api_version, name))
            row["raw"] = self.ctx.raw(frame, typed=self._typed(C2S, h.api_key))
            out.append(("commands", row))
            self._add_pending(h.correlation_id, pend, out)
            return
        try:
            body = schema.decode_body(p, frame, h.body_offset)
        except schema.DecodeError as e:
            row.update(
                decode_status=e.status,
                decode_error=self._why(p, e),
                raw=self.ctx.raw(frame, typed=self._typed(C2S, h.api_key)),
            )
            out.append(("commands", row))
            self._add_pending(h.correlation_id, pend, out)
            return
        row.update(self._summary_columns(p.summarize(body), body))
        pend.topic, pend.partition = row["topic"], row["partition"]
        status, err = base.OK, None
        msgs: list[Row] = []
        key = h.api_key
        semantics = _REQUEST_SEMANTICS.get(key)
        if semantics is not None:
            status, err = semantics(self, body, h, pend, ts0, msgs) or (status, err)
        details = self._details(body, p)
        details["_header"] = {"version": h.header_version, **({"tagged": h.tagged} if h.tagged else {})}
        if p.below_baseline:
            details["_note"] = "version older than the specs' baseline, decoded from the field version ranges"
        row.update(decode_status=status, decode_error=err, details=base.to_json(details))
        if status != base.OK:
            row["raw"] = self.ctx.raw(frame, typed=self._typed(C2S, key))
        out.append(("commands", row))
        acks0 = key == ApiKey.Produce and body.get("Acks") == 0
        if acks0:
            for _t, _p, _b, mrows in pend.produce:
                out.extend(mrows)
        else:
            self._add_pending(h.correlation_id, pend, out)

    # -- responses whose request is missing -----------------------------------------------------
    def _note_request(self, corr: int, key: int, ver: int) -> None:
        """Remember what was requested: the candidates and neighbours for inference."""
        kv = (key, ver)
        if kv not in self.requested:
            if len(self.requested) < MAX_REQUESTED_APIS:
                self.requested[kv] = schema.plan(key, ver, "response") is not None
            else:
                self.requested_overflow = True
        self.last_corr = corr
        self.recent_reqs[corr] = kv
        self.recent_reqs.move_to_end(corr)
        if len(self.recent_reqs) > RECENT_REQUESTS:
            self.recent_reqs.popitem(last=False)
        for c in (corr - 1, corr + 1):
            for h in self.held_by_corr.get(c, ()):
                h.neighbours[corr] = kv

    def _hold(self, corr: int, frame: bytes, offset: int, ts0: int, ts1: int, out: list[Row]) -> None:
        h = HeldResponse(corr, frame, offset, ts0, ts1)
        for c in (corr - 1, corr + 1):
            kv = self.recent_reqs.get(c)
            if kv is None and c in self.pending:
                kv = (self.pending[c].api_key, self.pending[c].version)
            if kv is not None:
                h.neighbours[c] = kv
        self._held_seq += 1
        self.held[self._held_seq] = h
        self.held_by_corr.setdefault(corr, []).append(h)
        self.held_missing_bytes += len(frame)
        while len(self.held) > MAX_HELD_MISSING or (
            self.held_missing_bytes > MAX_HELD_MISSING_BYTES and len(self.held) > 1
        ):
            out.append(self._release_held(infer=False))

    def _release_held(self, infer: bool) -> Row:
        """The commands row of the oldest held response: decoded under the inferred api when that
        is certain (decode_status stays request_missing), else undecoded with the reason."""
        _seq, h = self.held.popitem(last=False)
        self.held_missing_bytes -= len(h.frame)
        same = self.held_by_corr.get(h.corr, [])
        if h in same:
            same.remove(h)
        if not same:
            self.held_by_corr.pop(h.corr, None)
        size = len(h.frame) + 4
        kv = body = None
        if not infer:
            why = "not held for inference: too many responses without their request on this connection"
        elif self.requested_overflow:
            why = f"more than {MAX_REQUESTED_APIS} (api, version) pairs requested on this connection"
        else:
            try:
                kv, body, why = inference.infer(
                    h.frame,
                    h.corr,
                    h.neighbours,
                    self.requested,
                    self.ctx.max_decompressed_bytes,
                    _records_summary,
                )
            except Exception as e:  # never raise out of the decoder (close() has no other guard)
                kv, body, why = None, None, f"inference failed: {type(e).__name__}: {e}"
        if kv is None or body is None:
            return self._error_row(
                S2C,
                h.offset,
                base.REQUEST_MISSING,
                "response whose request is not in the capture (api key and version unknown)",
                None,
                size,
                h.ts0,
                h.ts1,
                correlation_id=h.corr,
                details=base.to_json({"inferred": False, "inferred_reason": why}),
            )
        key, ver = kv
        plan = schema.plan(key, ver, "response")
        summ = plan.summarize(body)
        topics = list(summ["topics"]) + [
            self._resolve_topic(None, t) for t in summ["topic_ids"] if self._resolve_topic(None, t)
        ]
        details = {"inferred": True, "inferred_reason": why, **_clean(body)}
        return (
            "commands",
            {
                "direction": S2C,
                "command": api_name(key),
                "command_code": key,
                "api_version": ver,
                "correlation_id": h.corr,
                "topic": topics[0] if topics else None,
                "topic_id": summ["topic_ids"][0] if not topics and summ["topic_ids"] else None,
                "topics": topics or None,
                "partition": summ["partition"],
                "error_code": summ["error_code"],
                "throttle_time_ms": body.get("ThrottleTimeMs"),
                "size": size,
                "stream_offset": h.offset,
                "ts_ns": h.ts0,
                "ts_end_ns": h.ts1,
                "decode_status": base.REQUEST_MISSING,
                "decode_error": f"response whose request is not in the capture; decoded as "
                f"{inference.label(kv)}, inferred from the neighbouring requests (details.inferred_reason)",
                "details": base.to_json(details),
                # an inferred type was not read from the wire: no bytes (Context.raw)
                "raw": None,
            },
        )

    def _why(self, p: schema.Plan, e: Exception) -> str:
        msg = f"{p.name} v{p.version} {p.kind}: {e}"
        if p.below_baseline:
            msg += " (version older than the specs' baseline)"
        return msg

    def _add_pending(self, corr: int, pend: Pending, out: list[Row]) -> None:
        old = self.pending.pop(corr, None)
        if old is not None:
            out.extend(self._unanswered(corr, old))
        self.pending[corr] = pend
        self.held_bytes += pend.held_bytes
        while len(self.pending) > MAX_PENDING or (self.held_bytes > MAX_HELD_BYTES and len(self.pending) > 1):
            c, p = self.pending.popitem(last=False)
            out.extend(self._unanswered(c, p))

    def _unanswered(self, corr: int, p: Pending) -> list[Row]:
        """A request whose response never came: a latency row with null response columns, and
        its produced messages without offsets."""
        self.held_bytes -= p.held_bytes
        rows: list[Row] = [
            (
                "latencies",
                {
                    "ts_ns": p.ts_end,
                    "request_command": p.name,
                    "api_version": p.version,
                    "correlation_id": corr,
                    "request_ts_ns": p.ts_end,
                    "topic": p.topic,
                    "partition": p.partition,
                },
            )
        ]
        for _t, _p, _b, mrows in p.produce:
            rows.extend(mrows)
        return rows

    def _details(self, body: dict, p: schema.Plan) -> dict:
        """Decoded fields for `details`: records replaced by their batch headers, secrets redacted.

        Produce and Fetch summarize their records while making message rows; record sets of other
        APIs (ShareFetch, FetchSnapshot, ...) are summarized here, so no payload reaches `details`."""
        return _clean(body, frozenset(p.records_fields), self.ctx.max_decompressed_bytes)

    # -- produce ------------------------------------------------------------------------------
    # -- per-API semantics (the tables at the end of the module) ------------------------------
    # requests: (body, header, pending, first-byte time, produced message rows) -> (status, error)
    # or None; responses: (body, pending, correlation id, time, latency, extra rows) -> the same

    def _fetch_request(self, body, h, pend: Pending, ts0: int, msgs) -> None:
        """Remember the offsets asked for and the isolation level."""
        pend.read_committed = body.get("IsolationLevel") == 1
        for t in body.get("Topics") or ():
            tk = t.get("Topic") or t.get("TopicId")
            for part in t.get("Partitions") or ():
                pend.fetch_offsets[(tk, part.get("Partition"))] = part.get("FetchOffset")

    def _commit_request(self, body, h, pend: Pending, ts0: int, msgs) -> None:
        """OffsetCommit, TxnOffsetCommit: the offsets committed, for their acks."""
        pend.group = body.get("GroupId")
        pend.producer_id = body.get("ProducerId")
        for t in body.get("Topics") or ():
            tname = self._resolve_topic(t.get("Name"), t.get("TopicId"))
            for part in t.get("Partitions") or ():
                pend.commits.append((tname, part.get("PartitionIndex"), part.get("CommittedOffset")))

    def _share_ack_request(self, body, h, pend: Pending, ts0: int, msgs) -> None:
        """ShareFetch, ShareAcknowledge (KIP-932 share groups): the acknowledgement batches."""
        pend.group = body.get("GroupId")
        for t in body.get("Topics") or ():
            tid = t.get("TopicId")
            for part in t.get("Partitions") or ():
                for a in part.get("AcknowledgementBatches") or ():
                    pend.share_acks.append(
                        (
                            self._resolve_topic(None, tid),
                            tid,
                            part.get("PartitionIndex"),
                            a.get("FirstOffset"),
                            a.get("LastOffset"),
                            a.get("AcknowledgeTypes") or [],
                        )
                    )

    def _end_txn_request(self, body, h, pend: Pending, ts0: int, msgs) -> None:
        pend.txn = {
            "transactional_id": body.get("TransactionalId"),
            "producer_id": body.get("ProducerId"),
            "producer_epoch": body.get("ProducerEpoch"),
            "committed": body.get("Committed"),
        }

    def _sasl_handshake_request(self, body, h, pend: Pending, ts0: int, msgs) -> None:
        if h.api_version == 0:  # raw SASL tokens follow a successful v0 handshake
            pend.txn = {"sasl_v0": True}

    def _metadata_response(self, body, p: Pending, corr, ts0, latency_us, extra) -> None:
        self._learn_topic_ids(body, extra)

    def _fetch_response_rows(self, body, p: Pending, corr, ts0, latency_us, extra):
        return self._fetch_response(body, p, corr, ts0, extra)

    def _share_fetch_response_rows(self, body, p: Pending, corr, ts0, latency_us, extra):
        status = self._share_fetch_response(body, p, corr, ts0, extra)
        self._share_acks(body, p, corr, ts0, latency_us, extra)
        return status

    def _end_txn_response(self, body, p: Pending, corr, ts0, latency_us, extra) -> None:
        if not p.txn:
            return
        details = {"committed": p.txn["committed"], "producer_epoch": p.txn["producer_epoch"]}
        ack = {
            "ts_ns": ts0,
            "ack_type": "kafka_end_txn",
            "producer_id": p.txn["producer_id"],
            "consumer": p.txn["transactional_id"],
            "error_code": body.get("ErrorCode"),
            "ack_latency_us": latency_us,
            "correlation_id": corr,
            "details": base.to_json(details),
        }
        extra.append(("acks", ack))

    def _sasl_handshake_response(self, body, p: Pending, corr, ts0, latency_us, extra) -> None:
        if p.version == 0 and body.get("ErrorCode") == 0:
            self.sasl_raw = True

    def _sasl_authenticate_response(self, body, p: Pending, corr, ts0, latency_us, extra) -> None:
        if body.get("ErrorCode") == 0:
            self.sasl_raw = False

    def _produce_request(self, body, h, pend: Pending, ts0: int, msgs) -> tuple[str, str | None]:
        status, err = base.OK, None
        cap = self.ctx.max_decompressed_bytes
        for t in body.get("TopicData") or ():
            tname = self._resolve_topic(t.get("Name"), t.get("TopicId"))
            for part in t.get("PartitionData") or ():
                pidx = part.get("Index")
                raw = part.get("Records")
                if raw is None:
                    continue
                rs = rec.read_record_set(raw, cap)
                part["Records"] = _records_summary(rs)
                if rs.error and status == base.OK:
                    status, err = rs.status, f"{tname}-{pidx}: {rs.error}"
                if rs.partial_tail and status == base.OK:
                    status, err = base.TRUNCATED, f"{tname}-{pidx}: incomplete batch in a produce request"
                for b in rs.batches:
                    if b.status != base.OK and status == base.OK:
                        status, err = b.status, f"{tname}-{pidx} batch at {b.base_offset}: {b.error}"
                    rows = self._message_rows(
                        b, "produce", tname, pidx, h.correlation_id, ts0, with_offset=False
                    )
                    for _, r in rows:
                        pend.held_bytes += (r.get("value_size") or 0) + len(r.get("key") or b"")
                    pend.produce.append((tname, pidx, b, rows))
        return status, err

    def _message_rows(
        self,
        b: rec.Batch,
        direction: str,
        topic,
        partition,
        corr,
        ts_ns,
        with_offset: bool,
        min_offset: int | None = None,
        topic_id: str | None = None,
    ) -> list[Row]:
        """One `messages` row per record of a (non-control) batch."""
        if b.control:
            return []
        rows: list[Row] = []
        pol = self.ctx.payload
        keep_all = pol.mode == "keep" and not pol.apply_to_keys
        v2 = b.magic >= 2
        pid = b.producer_id if v2 else None
        epoch = b.producer_epoch if v2 else None
        seq0 = b.base_sequence if v2 and (b.base_sequence or 0) >= 0 else None
        # details: batch-level fields once, the record's offset delta appended per row
        head = base.to_json(
            {
                "batch_base_offset": b.base_offset,
                "magic": b.magic,
                "transactional": b.transactional,
                "timestamp_type": b.timestamp_type,
            }
        )
        head = head[:-1] + ',"offset_delta":'
        # a topic known only by id on this connection: the pipeline names it from the Metadata
        # responses of the whole capture set (topics.resolve_topic_ids), message_id with it
        unnamed = topic is None and topic_id is not None
        prefix = f"{topic}-{partition}@"
        for r in b.records:
            if min_offset is not None and r.offset < min_offset:
                continue
            ts = r.timestamp
            value = r.value
            row = {
                "ts_ns": ts_ns,
                "direction": direction,
                "source": "capture",
                "topic": topic,
                "partition": partition,
                "key": r.key if keep_all else pol.key(r.key),
                "headers": [{"key": k, "value": v} for k, v in r.headers],
                "message_ts_ns": None if ts is None or ts < 0 else ts * 1_000_000,
                "producer_id": pid,
                "producer_epoch": epoch,
                "sequence": None if seq0 is None else seq0 + r.delta,
                "compression": b.codec,
                "checksum_ok": b.crc_ok if r.crc_ok is None else r.crc_ok,
                "correlation_id": corr,
                "decode_status": b.status,
                "decode_error": b.error,
                "details": f"{head}{r.delta}}}",
            }
            if unnamed:
                row["topic_id"] = topic_id
            if with_offset:
                row["offset"] = r.offset
                row["message_id"] = None if unnamed else f"{prefix}{r.offset}"
            if keep_all:
                row["value"] = value
                row["value_size"] = None if value is None else len(value)
            else:
                row.update(pol.value(value))
            rows.append(("messages", row))
        return rows

    # -- responses ----------------------------------------------------------------------------
    def _response(self, frame: bytes, offset: int, ts0: int, ts1: int, out: list[Row]) -> None:
        size = len(frame) + 4
        if self.sasl_raw and (len(frame) < 4 or _I32.unpack_from(frame, 0)[0] not in self.pending):
            out.append(self._sasl_token(S2C, frame, offset, ts0, ts1))
            return
        if len(frame) < 4:
            out.append(
                self._error_row(
                    S2C, offset, base.MALFORMED, "response shorter than its header", None, size, ts0, ts1
                )
            )
            return
        corr = _I32.unpack_from(frame, 0)[0]
        p = self.pending.pop(corr, None)
        if p is None:
            self._hold(corr, frame, offset, ts0, ts1, out)
            return
        self.held_bytes -= p.held_bytes
        row = {
            "direction": S2C,
            "command": p.name,
            "command_code": p.api_key,
            "api_version": p.version,
            "correlation_id": corr,
            "size": size,
            "stream_offset": offset,
            "ts_ns": ts0,
            "ts_end_ns": ts1,
        }
        lat = {
            "ts_ns": p.ts_end,
            "request_command": p.name,
            "response_command": p.name,
            "api_version": p.version,
            "correlation_id": corr,
            "request_ts_ns": p.ts_end,
            "response_ts_ns": ts0,
            "latency_us": (ts0 - p.ts_end) / 1000.0,
            "topic": p.topic,
            "partition": p.partition,
        }
        plan = schema.plan(p.api_key, p.version, "response") if p.decodable else None
        body = tagged = None
        if plan is None:
            known = schema.spec(p.api_key) is not None
            status = base.UNSUPPORTED_VERSION if known else base.UNKNOWN_COMMAND
            why = "the request could not be decoded, so neither can its response"
        else:
            body, tagged, error = self._decode_response(frame, p, plan)
            if body is None:
                status, why = error.status, self._why(plan, error)
        if body is None:  # its rows without a body: produced messages keep no offsets
            row.update(decode_status=status, decode_error=why)
            row["raw"] = self.ctx.raw(frame, typed=self._typed(S2C, p.api_key))
            out.extend([("commands", row), ("latencies", lat)])
            for _t, _p, _b, mrows in p.produce:
                out.extend(mrows)
            return
        if p.api_key == ApiKey.ApiVersions and body.get("_answered_in_v0"):
            plan = schema.plan(ApiKey.ApiVersions, 0, "response")
        row.update(self._summary_columns(plan.summarize(body), body, p.topic, p.partition))
        lat["error_code"] = row["error_code"]
        status, err = base.OK, None
        extra: list[Row] = []
        key = p.api_key
        semantics = _RESPONSE_SEMANTICS.get(key)
        if semantics is not None:
            status, err = semantics(self, body, p, corr, ts0, lat["latency_us"], extra) or (status, err)
        details = self._details(body, plan)
        if tagged:
            details["_header"] = {"tagged": tagged}
        if plan.below_baseline:
            details["_note"] = "version older than the specs' baseline, decoded from the field version ranges"
        if plan.version != p.version:
            details["_note"] = (
                f"answered in ApiVersions v{plan.version} (requested v{p.version} not supported)"
            )
        row.update(decode_status=status, decode_error=err, details=base.to_json(details))
        if status != base.OK:
            row["raw"] = self.ctx.raw(frame, typed=self._typed(S2C, key))
        out.append(("commands", row))
        out.append(("latencies", lat))
        out.extend(extra)

    def _decode_response(self, frame: bytes, p: Pending, plan: schema.Plan):
        """(body, tagged header fields, None) or (None, None, DecodeError)."""
        if p.api_key == ApiKey.ApiVersions and p.version > 0 and frame[4:6] == b"\x00\x23":
            # ApiVersions error 35 (UNSUPPORTED_VERSION): brokers answer in v0 so that any client
            # can read the versions they do support. Clients read only the error code here, and
            # some servers (librdkafka's mock) send a body no version describes: keep it raw.
            try:
                body = schema.decode_body(schema.plan(ApiKey.ApiVersions, 0, "response"), frame, 4)
            except schema.DecodeError:
                body = {
                    "ErrorCode": 35,
                    "_undecoded": {"base64": base64.b64encode(frame[6:]).decode("ascii")},
                }
            body["_answered_in_v0"] = True
            return body, None, None
        try:
            _c, tagged, pos = schema.read_response_header(frame, p.api_key, plan.version)
            return schema.decode_body(plan, frame, pos), tagged, None
        except schema.DecodeError as e:
            # without its traceback: the traceback's frames reach _frames(), whose view of the
            # stream buffer would then stay exported (a reference cycle until the next garbage
            # collection) and the next append to the buffer would fail with BufferError
            return None, None, e.with_traceback(None)

    def _produce_response(self, body, p: Pending, corr, ts0, latency_us, extra) -> None:
        acked: dict[tuple, tuple[int, int]] = {}
        for t in body.get("Responses") or ():
            tname = self._resolve_topic(t.get("Name"), t.get("TopicId"))
            for part in t.get("PartitionResponses") or ():
                pidx = part.get("Index")
                ec = part.get("ErrorCode")
                bo = part.get("BaseOffset")
                acked[(tname, pidx)] = (ec, bo)
                pid = seq = None
                for tt, pp, b, _rows in p.produce:
                    if tt == tname and pp == pidx and b.magic >= 2:
                        pid, seq = b.producer_id, b.base_sequence
                        break
                extra.append(
                    (
                        "acks",
                        {
                            "ts_ns": ts0,
                            "ack_type": "kafka_produce",
                            "topic": tname,
                            "partition": pidx,
                            "offset": bo if ec == 0 else None,
                            "message_id": f"{tname}-{pidx}@{bo}"
                            if ec == 0 and bo is not None and bo >= 0
                            else None,
                            "producer_id": pid,
                            "sequence": seq,
                            "error_code": ec,
                            "ack_latency_us": latency_us,
                            "correlation_id": corr,
                            "details": base.to_json(
                                {
                                    "log_append_time_ms": part.get("LogAppendTimeMs"),
                                    "log_start_offset": part.get("LogStartOffset"),
                                }
                            ),
                        },
                    )
                )
        # produced messages get their offsets: base offset + position within the request
        pos_in_part: dict[tuple, int] = {}
        for tt, pp, _b, rows in p.produce:
            ec, bo = acked.get((tt, pp), (None, None))
            for _tbl, r in rows:
                n = pos_in_part.get((tt, pp), 0)
                pos_in_part[(tt, pp)] = n + 1
                if ec == 0 and bo is not None and bo >= 0:
                    r["offset"] = bo + n
                    r["message_id"] = f"{tt}-{pp}@{bo + n}"
                extra.append(("messages", r))

    def _fetch_response(self, body, p: Pending, corr, ts0, extra) -> tuple[str, str | None]:
        status, err = base.OK, None
        cap = self.ctx.max_decompressed_bytes
        for t in body.get("Responses") or ():
            tk = t.get("Topic") or t.get("TopicId")
            tname = self._resolve_topic(t.get("Topic"), t.get("TopicId"))
            for part in t.get("Partitions") or ():
                pidx = part.get("PartitionIndex")
                raw = part.get("Records")
                if not raw:
                    if raw is not None:
                        part["Records"] = _records_summary(rec.RecordSet([]))
                    continue
                rs = rec.read_record_set(raw, cap)
                part["Records"] = _records_summary(rs)
                if status == base.OK:
                    status, err = _first_error(rs, f"{tname}-{pidx}")
                min_off = p.fetch_offsets.get((tk, pidx))
                # read_committed: records of aborted transactions are dropped by the consumer
                # (AbortedTransactions lists producer id and first offset; the ABORT marker ends it)
                aborted = {
                    a.get("ProducerId"): a.get("FirstOffset") for a in part.get("AbortedTransactions") or ()
                }
                aborting: set = set()
                for b in rs.batches:
                    if p.read_committed and b.transactional and b.producer_id in aborted:
                        if b.control:
                            aborting.discard(b.producer_id)
                            aborted.pop(b.producer_id, None)
                        elif b.base_offset >= aborted[b.producer_id]:
                            aborting.add(b.producer_id)
                    if b.control:
                        extra.append(
                            (
                                "acks",
                                {
                                    "ts_ns": ts0,
                                    "ack_type": "kafka_txn_marker",
                                    "topic": tname,
                                    "topic_id": None if tname else t.get("TopicId"),
                                    "partition": pidx,
                                    "offset": b.base_offset,
                                    "message_id": f"{tname}-{pidx}@{b.base_offset}" if tname else None,
                                    "producer_id": b.producer_id,
                                    "correlation_id": corr,
                                    "details": base.to_json(
                                        {
                                            "control_type": b.control_type,
                                            "producer_epoch": b.producer_epoch,
                                            "coordinator_epoch": b.coordinator_epoch,
                                        }
                                    ),
                                },
                            )
                        )
                        continue
                    if b.producer_id in aborting:
                        continue
                    extra.extend(
                        self._message_rows(
                            b,
                            "deliver",
                            tname,
                            pidx,
                            corr,
                            ts0,
                            with_offset=True,
                            min_offset=min_off,
                            topic_id=t.get("TopicId"),
                        )
                    )
        return status, err

    def _share_fetch_response(self, body, p: Pending, corr, ts0, extra) -> tuple[str, str | None]:
        """ShareFetch (KIP-932): the records of a batch that lie in the partition's
        AcquiredRecords ranges are what the share consumer receives: `deliver` rows with the
        group as consumer and the range's delivery count in details (above 1: a redelivery)."""
        status, err = base.OK, None
        cap = self.ctx.max_decompressed_bytes
        for t in body.get("Responses") or ():
            tid = t.get("TopicId")
            tname = self._resolve_topic(None, tid)
            for part in t.get("Partitions") or ():
                pidx = part.get("PartitionIndex")
                raw = part.get("Records")
                if not raw:
                    continue
                rs = rec.read_record_set(raw, cap)
                part["Records"] = _records_summary(rs)
                if status == base.OK:
                    status, err = _first_error(rs, f"{tname or tid}-{pidx}")
                acquired = [
                    (a.get("FirstOffset"), a.get("LastOffset"), a.get("DeliveryCount"))
                    for a in part.get("AcquiredRecords") or ()
                ]
                for b in rs.batches:
                    rows = self._message_rows(
                        b, "deliver", tname, pidx, corr, ts0, with_offset=True, topic_id=tid
                    )
                    for tab, r in rows:
                        count = next((n for lo, hi, n in acquired if lo <= r["offset"] <= hi), None)
                        if count is None:
                            continue  # returned in the batch but not acquired by this consumer
                        r["consumer"] = p.group
                        r["details"] = f'{r["details"][:-1]},"delivery_count":{count}}}'
                        extra.append((tab, r))
        return status, err

    def _share_acks(self, body, p: Pending, corr, ts0, latency_us, extra) -> None:
        """Acknowledgements a share consumer sent (in ShareFetch or ShareAcknowledge): one
        `kafka_share_ack` row per offset (accept, release, reject, renew; gaps are skipped), with the
        partition's error code from the response. Ranges past MAX_SHARE_ACK_ROWS in one request
        become one row per range (`details.last_offset`)."""
        if not p.share_acks:
            return
        errs: dict[tuple, int | None] = {}
        for t in body.get("Responses") or ():
            for part in t.get("Partitions") or ():
                code = part.get("AcknowledgeErrorCode", part.get("ErrorCode"))
                errs[(t.get("TopicId"), part.get("PartitionIndex"))] = code
        budget = MAX_SHARE_ACK_ROWS
        for tname, tid, pidx, first, last, types in p.share_acks:
            if first is None or last is None or last < first:
                continue
            per_offset = last - first + 1 <= budget
            offsets = range(first, last + 1) if per_offset else (first,)
            for off in offsets:
                code = (
                    types[off - first]
                    if len(types) > 1 and off - first < len(types)
                    else (types or [None])[0]
                )
                if code == 0:
                    continue  # a gap: no record at this offset
                details = {"api": p.name, "type": SHARE_ACK_TYPES.get(code, code)}
                if not per_offset:
                    details["last_offset"] = last
                extra.append(
                    (
                        "acks",
                        {
                            "ts_ns": ts0,
                            "ack_type": "kafka_share_ack",
                            "topic": tname,
                            "topic_id": None if tname else tid,
                            "partition": pidx,
                            "offset": off,
                            "message_id": f"{tname}-{pidx}@{off}" if tname else None,
                            "consumer": p.group,
                            "error_code": errs.get((tid, pidx)),
                            "ack_latency_us": latency_us,
                            "correlation_id": corr,
                            "details": base.to_json(details),
                        },
                    )
                )
            budget -= len(offsets)

    def _commit_response(self, body, p: Pending, corr, ts0, latency_us, extra) -> None:
        errs: dict[tuple, int] = {}
        for t in body.get("Topics") or ():
            tname = self._resolve_topic(t.get("Name"), t.get("TopicId"))
            for part in t.get("Partitions") or ():
                errs[(tname, part.get("PartitionIndex"))] = part.get("ErrorCode")
        for tname, pidx, off in p.commits:
            extra.append(
                (
                    "acks",
                    {
                        "ts_ns": ts0,
                        "ack_type": "kafka_offset_commit",
                        "topic": tname,
                        "partition": pidx,
                        "offset": off,
                        "consumer": p.group,
                        "producer_id": p.producer_id,
                        "error_code": errs.get((tname, pidx)),
                        "ack_latency_us": latency_us,
                        "correlation_id": corr,
                        "details": base.to_json({"api": p.name}),
                    },
                )
            )


def _first_error(rs: rec.RecordSet, where: str) -> tuple[str, str | None]:
    """(status, error) of a fetched record set: its own error, else its first bad batch's."""
    if rs.error:
        return rs.status, f"{where}: {rs.error}"
    for b in rs.batches:
        if b.status != base.OK:
            return b.status, f"{where} batch at {b.base_offset}: {b.error}"
    return base.OK, None


def _records_summary(rs: rec.RecordSet) -> dict:
    d: dict = {"batches": [b.summary() for b in rs.batches]}
    if rs.partial_tail:
        d["partial_tail_bytes"] = rs.partial_tail
    if rs.error:
        d["error"] = rs.error
    return d


def _clean(o, records: frozenset = frozenset(), cap: int = 0):
    """Copy a decoded body for details, redacting secret fields and sensitive config values and
    summarizing record sets (fields named in `records` that still hold bytes)."""
    if isinstance(o, dict):
        out = {}
        for k, v in o.items():
            if k in SECRET_FIELDS and isinstance(v, bytes | str):
                out[k] = base.redacted(v)
            elif k in records and isinstance(v, bytes):
                out[k] = _records_summary(rec.read_record_set(v, cap))
            else:
                out[k] = _clean(v, records, cap)
        if isinstance(out.get("Value"), str) and isinstance(out.get("Name"), str):
            if out.get("IsSensitive") is True or SENSITIVE_CONFIG.search(out["Name"]):
                out["Value"] = base.redacted(out["Value"])
        return out
    if isinstance(o, list):
        return [_clean(v, records, cap) for v in o]
    return o


# What an API's requests and responses mean beyond their commands row (methods above).
_C = KafkaConversation
_REQUEST_SEMANTICS = {
    ApiKey.Produce: _C._produce_request,
    ApiKey.Fetch: _C._fetch_request,
    ApiKey.OffsetCommit: _C._commit_request,
    ApiKey.TxnOffsetCommit: _C._commit_request,
    ApiKey.ShareFetch: _C._share_ack_request,
    ApiKey.ShareAcknowledge: _C._share_ack_request,
    ApiKey.EndTxn: _C._end_txn_request,
    ApiKey.SaslHandshake: _C._sasl_handshake_request,
}
_RESPONSE_SEMANTICS = {
    ApiKey.Metadata: _C._metadata_response,
    ApiKey.Produce: _C._produce_response,
    ApiKey.Fetch: _C._fetch_response_rows,
    ApiKey.OffsetCommit: _C._commit_response,
    ApiKey.TxnOffsetCommit: _C._commit_response,
    ApiKey.ShareFetch: _C._share_fetch_response_rows,
    ApiKey.ShareAcknowledge: _C._share_acks,
    ApiKey.EndTxn: _C._end_txn_response,
    ApiKey.SaslHandshake: _C._sasl_handshake_response,
    ApiKey.SaslAuthenticate: _C._sasl_authenticate_response,
}
