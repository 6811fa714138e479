"""One Kafka TCP connection: request/response pairing, and the commands and latencies rows.

Frames come from the shared framer (`framing.KafkaRules`). A response carries no api key: it is
paired with its request by correlation id; a response whose request is missing is held for
inference (`inference.MissingRequests`). What each api means beyond its commands row (messages,
acks, topic names) is in `apis.py`, by api key; `rows.py` builds the rows.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from dataclasses import dataclass, field

from .. import base
from ..base import C2S, S2C, ConnInfo, Context, Conversation, Row
from ..framer import Framer, Junk
from . import rows, schema
from .apis import REQUESTS, RESPONSES, decode_response
from .framing import MAX_CLIENT_ID, KafkaRules, plausible_request
from .inference import MissingRequests
from .names import CREDENTIAL_API_KEYS, SASL_HANDSHAKE, ApiKey
from .rows import api_name

_I32 = struct.Struct(">i")
MAX_PENDING = 100_000
MAX_HELD_BYTES = 64 * 1024 * 1024  # produced message rows held for their offsets
_MAX_TOPIC_IDS = 100_000  # per connection


class _Reread(Exception):
    """The frame being handled went back to the framer, to be read again (_reread)."""


def _named_not_sasl(key: int) -> bool:
    """May a frame of this api key keep its bytes in `raw`? Only a named one that carries no
    credentials (Context.raw)."""
    return api_name(key) is not None and key not in CREDENTIAL_API_KEYS


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
    produce: list = field(default_factory=list)  # [(topic, partition, Batch)]
    produced: list = field(default_factory=list)  # their messages rows (rows.MessageBlock)
    commits: list = field(default_factory=list)  # [(topic, partition, offset)]
    group: str | None = None
    producer_id: int | None = None
    fetch_offsets: dict = field(default_factory=dict)  # (topic or id, partition) -> fetch offset
    read_committed: bool = False
    txn: dict | None = None
    held_bytes: int = 0
    share_acks: list = field(default_factory=list)  # [(topic, topic id, partition, first, last, types)]
    authenticating: bool = False  # sent while the connection authenticated: its response keeps no raw
    # first_frame / last_frame of the frame being handled (ConnInfo.frame_range): the request's,
    # then, while its response is handled, the response's (messages rows take them)
    frames: dict = field(default_factory=dict)
    topics: list | None = None  # the request's topics (a response that names none has them)


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
        self.missing = MissingRequests(ctx)
        self.last_corr: int | None = None  # correlation id of the last request header read
        self.client_id: str | None = None  # client id of the last request decoded
        # a SaslHandshake request was read, and no request of an API without credentials decoded
        # since: a request that does not decode then may be the authentication frame damaged (a
        # byte of its api key or a length), so none of its bytes are kept (raw, client_id)
        self.authenticating = False
        self._item = None  # the Frame being handled (_drain), for _reread

    # -- driver interface ---------------------------------------------------------------------
    def feed(self, direction: str, data: bytes, ts_ns: int) -> list[Row]:
        return self._fed(direction, self.framer[direction].push(data, ts_ns))

    def feed_run(self, direction: str, chunks: list[bytes], tss: list[int]) -> list[Row]:
        """At once: a frame's rows depend on its bytes and their times, not on the packets."""
        return self._fed(direction, self.framer[direction].push_run(chunks, tss))

    def _fed(self, direction: str, short: bool) -> list[Row]:
        """The rows of what was pushed into `direction`'s framer (`short`: its head frame is
        still short of its size, nothing to drain)."""
        out: list[Row] = []
        fr = self.framer[direction]
        if short:
            return out
        try:
            self._drain(direction, out)
        except Exception as e:  # never raise out of the decoder: drop what is buffered
            off, n, ts = fr.drop_all()
            err = f"internal: {type(e).__name__}: {e}"
            out.append(rows.error_row(self.ctx, direction, off, base.MALFORMED, err, None, n, ts, ts))
            self.in_step[direction] = False
        return out

    def gap(self, direction: str, nbytes: int, ts_ns: int) -> list[Row]:
        out: list[Row] = []
        self._drain_cut(direction, out, f"a capture gap of {nbytes} bytes")
        junk, _ = self.framer[direction].gap(nbytes, ts_ns)
        for j in junk:
            self._junk(direction, j, out)
        return out

    def close(self) -> list[Row]:
        out: list[Row] = []
        for d, fr in self.framer.items():
            self._drain_cut(d, out, "the end of the connection")
            for j in fr.close():
                self._junk(d, j, out)
        for corr, p in self.pending.items():
            out.extend(self._unanswered(corr, p))
        self.pending.clear()
        out.extend(self.missing.release_all(self.topic_ids))
        return out

    def low_water(self, direction: str) -> int | None:
        """Also the responses held for inference (their commands rows come later), oldest first."""
        low = super().low_water(direction)
        if direction == S2C and self.missing.held:
            held = next(iter(self.missing.held.values())).offset
            low = held if low is None or held < low else low
        return low

    # -- frames and junk ----------------------------------------------------------------------
    def _drain_cut(self, d: str, out: list[Row], cut: str) -> None:
        """Before a gap's or the close's records (`cut` names the event): a frame still short of
        its size that holds credible frame starts (KafkaRules.cut_start) had its size damaged,
        larger; it becomes one malformed row up to the first of them and the frames after it are
        read (Framer.reread_if_cut; again for a second such frame). Responses held for
        inference whose request is read now are answered (they came while it was held up)."""
        fr = self.framer[d]
        why = f"runs past {cut} and frames start inside it: its size damaged"
        reread = False
        try:
            while fr.reread_if_cut(why):
                reread = True
                self._drain(d, out)
            if reread and d == C2S:
                for frame, offset, ts0, ts1 in self.missing.take_pending(self.pending):
                    self._response(frame, offset, ts0, ts1, out)
        except Exception as e:  # never raise out of the decoder: drop what is buffered
            off, n, ts = fr.drop_all()
            err = f"internal: {type(e).__name__}: {e}"
            out.append(rows.error_row(self.ctx, d, off, base.MALFORMED, err, None, n, ts, ts))
            self.in_step[d] = False

    def _drain(self, d: str, out: list[Row]) -> None:
        fr = self.framer[d]
        handle = self._request if d == C2S else self._response
        reread = False
        while (item := fr.next()) is not None:
            if item.__class__ is Junk:
                self._junk(d, item, out)
                continue
            if not item.in_step:
                self.in_step[d] = False
            frame = item.data  # after its size field (KafkaRules.prefix_len)
            self._item = item
            try:
                handle(frame, item.offset, item.ts_first, item.ts_last, out)
            except _Reread:
                reread = True
                continue
            except Exception as e:  # a bug or an unforeseen input: one error row, go on
                raw = frame if self._typed_head(d, frame) else None
                err = f"internal: {type(e).__name__}: {e}"
                out.append(
                    rows.error_row(
                        self.ctx,
                        d,
                        item.offset,
                        base.MALFORMED,
                        err,
                        raw,
                        len(frame) + 4,
                        item.ts_first,
                        item.ts_last,
                    )
                )
            finally:
                self._item = None
            self.in_step[d] = True
        if reread and d == C2S:  # requests read again: the responses held for them pair now
            for frame, offset, ts0, ts1 in self.missing.take_pending(self.pending):
                self._response(frame, offset, ts0, ts1, out)

    def _reread(self, d: str, why: str) -> None:
        """The frame being handled does not decode (`why`): when its bytes hold a credible frame
        start (its size damaged, larger: the frames after it taken in), they go back to the
        framer, one malformed Junk up to that start and the frames after it read
        (Framer.reread_if_swallowed): raises _Reread; else nothing."""
        item = self._item
        if item is not None and self.framer[d].reread_if_swallowed(
            item, f"{why}, and frames start inside it: its size damaged"
        ):
            raise _Reread

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
        raw = extra.pop("raw", raw)
        out.append(
            rows.error_row(
                self.ctx, d, j.offset, j.status, j.reason, raw, j.size, j.ts_first, j.ts_last, **extra
            )
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
        raw = head[:64] if self._typed_answer(p) else None
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
                unanswered = self._unanswered(corr, p)
                unanswered[0][1].update(
                    response_command=p.name, response_ts_ns=ts, latency_us=(ts - p.ts_end) / 1000.0
                )
                out.extend(unanswered)  # with its produced messages, without offsets
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

    def _typed_answer(self, p: Pending) -> bool:
        """`_typed` for the response to `p`: none to a request sent while the connection
        authenticated (a damaged request's response may be the server's SCRAM proof)."""
        return self._typed(S2C, p.api_key) and not p.authenticating

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
        return p is not None and self._typed_answer(p)

    # -- topic ids ----------------------------------------------------------------------------
    def resolve_topic(self, name: str | None, topic_id: str | None) -> str | None:
        if name:
            return name
        if topic_id:
            return self.topic_ids.get(topic_id)
        return None

    def learn_topic_ids(self, body: dict, out: list[Row]) -> None:
        for t in body.get("Topics") or ():
            tid, name = t.get("TopicId"), t.get("Name")
            if tid and name and tid != "00000000-0000-0000-0000-000000000000":
                # per connection only: rows must not depend on which task decoded what before;
                # the pipeline names ids across connections from these side rows
                if len(self.topic_ids) < _MAX_TOPIC_IDS or tid in self.topic_ids:
                    self.topic_ids[tid] = name
                out.append((base.TOPIC_NAMES, {"topic_id": tid, "topic": name}))

    # -- requests -----------------------------------------------------------------------------
    def _request(self, frame: bytes, offset: int, ts0: int, ts1: int, out: list[Row]) -> None:
        size = len(frame) + 4
        if self.sasl_raw:
            conf = plausible_request(_I32.pack(len(frame)) + frame[: 10 + MAX_CLIENT_ID], 0, self.max_frame)
            if conf < 2:
                out.append(rows.sasl_token(C2S, frame, offset, ts0, ts1))
                return
            self.sasl_raw = False
        try:
            h = schema.read_request_header(frame)
        except schema.DecodeError as e:
            out.append(
                rows.error_row(self.ctx, C2S, offset, e.status, f"request header: {e}", None, size, ts0, ts1)
            )
            return
        self._note_request(h.correlation_id, h.api_key, h.api_version)
        self.client_id = h.client_id
        if h.api_key == SASL_HANDSHAKE:
            self.authenticating = True
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
        pend.authenticating = self.authenticating
        pend.frames = self.conn.frame_range(C2S, offset, size)
        if p is None:
            row.update(rows.no_plan(h.api_key, h.api_version, name))
            row["raw"] = self.ctx.raw(frame, typed=self._typed(C2S, h.api_key))
            out.append(("commands", self._undecoded(row, pend)))
            self._add_pending(h.correlation_id, pend, out)
            return
        try:
            body = schema.decode_body(p, frame, h.body_offset)
        except schema.DecodeError as e:
            self._reread(C2S, f"{name} v{h.api_version} request: {e}")
            row.update(
                decode_status=e.status,
                decode_error=rows.plan_error(p, e),
                raw=self.ctx.raw(frame, typed=self._typed(C2S, h.api_key)),
            )
            out.append(("commands", self._undecoded(row, pend)))
            self._add_pending(h.correlation_id, pend, out)
            return
        row.update(rows.summary_columns(p.summarize(body), body, self.topic_ids))
        pend.topic, pend.partition, pend.topics = row["topic"], row["partition"], row["topics"]
        status, err = base.OK, None
        key = h.api_key
        semantics = REQUESTS.get(key)
        if semantics is not None:
            status, err = semantics(self, body, h, pend, ts0) or (status, err)
        details = self._details(body, p)
        details["_header"] = {"version": h.header_version, **({"tagged": h.tagged} if h.tagged else {})}
        if p.below_baseline:
            details["_note"] = "version older than the specs' baseline, decoded from the field version ranges"
        row.update(decode_status=status, decode_error=err, details=base.to_json(details))
        if status != base.OK:
            row["raw"] = self.ctx.raw(frame, typed=self._typed(C2S, key))
            row = self._undecoded(row, pend)
        elif key not in CREDENTIAL_API_KEYS:
            self.authenticating = False
        out.append(("commands", row))
        acks0 = key == ApiKey.Produce and body.get("Acks") == 0
        if acks0:
            out.extend(pend.produced)
        else:
            self._add_pending(h.correlation_id, pend, out)

    def _undecoded(self, row: dict, pend: Pending) -> dict:
        """The row of a request that did not decode: while authenticating, without its bytes (it
        may be the authentication frame, damaged: its `raw`, and a client id that a damaged
        length may have run into the credentials)."""
        if self.authenticating:
            row["raw"] = row["client_id"] = pend.client_id = None
        return row

    def _note_request(self, corr: int, key: int, ver: int) -> None:
        """A request header was read: the last correlation id (framing), and the request's api
        for the inference of responses whose request is missing."""
        self.last_corr = corr
        self.missing.note(corr, key, ver)

    def _details(self, body: dict, p: schema.Plan) -> dict:
        """Decoded fields for `details`: records replaced by their batch headers, secrets redacted.

        Produce and Fetch summarize their records while making message rows; record sets of other
        APIs (ShareFetch, FetchSnapshot, ...) are summarized here, so no payload reaches `details`."""
        cap, sums = self.ctx.max_decompressed_bytes, self.ctx.payload.checksums_kept
        return rows.clean(body, frozenset(p.records_fields), cap, sums)

    # -- pairing ------------------------------------------------------------------------------
    def _add_pending(self, corr: int, pend: Pending, out: list[Row]) -> None:
        old = self.pending.pop(corr, None)
        if old is not None:
            out.extend(self._unanswered(corr, old))
        self.pending[corr] = pend
        self.held_bytes += pend.held_bytes
        while len(self.pending) > MAX_PENDING or (self.held_bytes > MAX_HELD_BYTES and len(self.pending) > 1):
            c, p = self.pending.popitem(last=False)
            out.extend(self._unanswered(c, p))
        if corr in self.missing.held_by_corr and corr in self.pending:
            # its response is in the capture before it (two files' clocks apart, a NIC's queues
            # merged out of order), held as request_missing: paired now (its latency negative:
            # null, with an anomaly)
            got = self.missing.take(corr)
            if got is not None:
                self._response(*got, out)

    def _unanswered(self, corr: int, p: Pending) -> list[Row]:
        """A request whose response never came: a latency row with null response columns, and
        its produced messages without offsets."""
        self.held_bytes -= p.held_bytes
        return rows.unanswered(p, corr)

    # -- responses ----------------------------------------------------------------------------
    def _response(self, frame: bytes, offset: int, ts0: int, ts1: int, out: list[Row]) -> None:
        size = len(frame) + 4
        if self.sasl_raw and (len(frame) < 4 or _I32.unpack_from(frame, 0)[0] not in self.pending):
            out.append(rows.sasl_token(S2C, frame, offset, ts0, ts1))
            return
        if len(frame) < 4:
            out.append(
                rows.error_row(
                    self.ctx,
                    S2C,
                    offset,
                    base.MALFORMED,
                    "response shorter than its header",
                    None,
                    size,
                    ts0,
                    ts1,
                )
            )
            return
        corr = _I32.unpack_from(frame, 0)[0]
        p = self.pending.pop(corr, None)
        if p is None:
            out.extend(self.missing.hold(corr, frame, offset, ts0, ts1, self.pending))
            return
        self.held_bytes -= p.held_bytes
        p.frames = self.conn.frame_range(S2C, offset, size)
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
        lat = rows.latency(p, corr, ts0)
        plan = schema.plan(p.api_key, p.version, "response") if p.decodable else None
        body = tagged = None
        if plan is None:
            known = schema.spec(p.api_key) is not None
            status = base.UNSUPPORTED_VERSION if known else base.UNKNOWN_COMMAND
            why = "the request could not be decoded, so neither can its response"
        else:
            body, tagged, error = decode_response(frame, p, plan)
            if body is None or "_undecoded" in body:  # kept raw (ApiVersions' error 35): or damaged?
                why = f"{error}" if body is None else "ApiVersions' error 35 body does not decode in v0"
                try:
                    self._reread(S2C, f"{p.name} v{p.version} response: {why}")
                except _Reread:  # its request waits on for the response read again, if any
                    self.pending[corr] = p
                    self.held_bytes += p.held_bytes
                    raise
            if body is None:
                status, why = error.status, rows.plan_error(plan, error)
        if body is None:  # its rows without a body: produced messages keep no offsets
            row.update(decode_status=status, decode_error=why)
            row["raw"] = self.ctx.raw(frame, typed=self._typed_answer(p))
            out.extend([("commands", row), ("latencies", lat)])
            out.extend(p.produced)
            return
        if p.api_key == ApiKey.ApiVersions and body.get("_answered_in_v0"):
            plan = schema.plan(ApiKey.ApiVersions, 0, "response")
        self._answered(frame, p, corr, ts0, plan, body, tagged, row, lat, out)

    def _answered(self, frame, p: Pending, corr, ts0, plan: schema.Plan, body, tagged, row, lat, out) -> None:
        """The rows of a response whose body decoded (under `plan`): its commands row (begun as
        `row`), its latency `lat`, and what its api means (apis.RESPONSES)."""
        row.update(rows.summary_columns(plan.summarize(body), body, self.topic_ids, p))
        lat["error_code"] = row["error_code"]
        status, err = base.OK, None
        extra: list[Row] = []
        key = p.api_key
        semantics = RESPONSES.get(key)
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
            row["raw"] = self.ctx.raw(frame, typed=self._typed_answer(p))
        out.append(("commands", row))
        out.append(("latencies", lat))
        out.extend(extra)
