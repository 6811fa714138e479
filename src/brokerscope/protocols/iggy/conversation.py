"""One Iggy TCP connection's semantics: requests paired with their responses, and the rows.

framing.py tells the connection's framing (classic, request id or VSR) and cuts each direction
into frames (IggyRules for the shared framer); vsr.py reads the consensus headers; pairing.py
holds the pending requests; rows.py builds the table rows. This module decodes each frame's
payload for its command (commands.py) and turns it into rows.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from itertools import repeat

from .. import base
from ..base import C2S, S2C, ConnInfo, Context, Conversation, Row
from ..framer import Frame, Framer, Junk
from . import vsr
from .codes import (
    COMMANDS,
    REQUEST_HEADER,
    REQUEST_ID,
    RESPONSE_HEADER,
    VSR_COMMANDS,
    VSR_COMMON,
    VSR_EVICTION,
    VSR_HEADER_LEN,
    VSR_REPLY,
    VSR_REQUEST,
    read_layout,
    result_framed,
)
from .commands import (
    RESPONSES,
    SECRET_REQUESTS,
    SECRET_RESPONSES,
    decode_request,
    decode_response,
    reads_as_token,
    secret_reading,
)
from .framing import REQID, VSR, IggyRules, detect_mode
from .messages import Messages
from .pairing import Pending, new_request
from .rows import (
    auto_commit_ack_row,
    consumer_label,
    error_row,
    flag_batch_checksum,
    frame_columns,
    i32,
    i64,
    latency_row,
    message_block,
    offset_ack_row,
    send_ack_rows,
    with_summaries,
)
from .wire import DecodeError, Truncated, topic_name

MAX_DELIVERED = 100_000
LOGIN_CODES = frozenset({38, 40, 44, 45})


# keys whose values the decoders write (names of kinds and layouts), never payload bytes
_CONSTANT_KEYS = frozenset({"layout", "kind", "id_kind"})


def _strings(v, skip: frozenset = frozenset()) -> set[str]:
    """Every string value inside decoded fields (but those under `skip` keys)."""
    if isinstance(v, str):
        return {v}
    if isinstance(v, dict):
        return set().union(*(_strings(x, skip) for k, x in v.items() if k not in skip))
    if isinstance(v, list | tuple):
        return set().union(*(_strings(x, skip) for x in v))
    return set()


class IggyConversation(Conversation):
    """One connection: frames both directions (IggyRules), pairs responses with their requests
    (Pending) and turns each frame into rows (rows.py)."""

    def __init__(self, conn: ConnInfo, ctx: Context):
        super().__init__(conn, ctx)
        self.max_frame = ctx.max_frame_bytes  # [protocols.iggy] max_frame_bytes applied
        # a capture begun mid-connection may begin inside a frame: its first frame start must be
        # credible (a request's last byte read as a header took the whole client side)
        self.framer = {d: Framer(IggyRules(self, d), self.max_frame, not conn.midstream) for d in (C2S, S2C)}
        self.last_req_id: int | None = None  # request-id framing: the latest request's id
        self.closing = False
        self.mode: str | None = None  # framing.CLASSIC, REQID or VSR, once detected
        self.pending = Pending()
        self.delivered: OrderedDict[tuple, int] = OrderedDict()  # (topic, part, offset) -> ts
        self.logged_in = False  # a login was decoded: later client bytes hold no credentials
        # responses read while the client's framer holds a frame whose damaged length may have
        # taken their requests in (_waits): read once the client's frames are (_release_held)
        self.held: list[Frame] = []
        self.held_at: int | None = None  # classic: the client's frame under way when they began
        self.held_reread = False  # ... and that frame was read again: its length damaged
        self._item: Frame | None = None  # the client's frame being read (_drain), for a reread

    # -----------------------------------------------------------------------------------------
    # driver interface

    def feed(self, direction: str, data: bytes, ts_ns: int) -> list[Row]:
        rows: list[Row] = []
        try:
            self.framer[direction].push(data, ts_ns)
            self._drain(direction, rows)
            if self.held and direction == C2S:
                self._release_held(rows)
        except Exception as e:  # noqa: BLE001 - never raise out of a decoder
            off, n, ts = self.framer[direction].drop_all()
            rows.append(error_row(direction, off, n, ts, ts, base.MALFORMED, f"internal: {e!r}", None))
        return rows

    def gap(self, direction: str, nbytes: int, ts_ns: int) -> list[Row]:
        rows: list[Row] = []
        self._drain_cut(direction, rows, f"a capture gap of {nbytes} bytes")
        if self.held:
            self._release_held(rows, everything=True)  # before the pending requests go
        junks, inside_skip = self.framer[direction].gap(nbytes, ts_ns)
        rows.extend(self._junk_row(direction, j) for j in junks)
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
                self._drain_cut(d, rows, "the end of the connection")
                rows.extend(self._junk_row(d, j) for j in fr.close())
            self._release_held(rows, everything=True)
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
    # frames and junk

    def _drain_cut(self, direction: str, rows: list[Row], cut: str) -> None:
        """Before a gap's or the close's records (`cut` names the event): a frame still short of
        its length that holds credible frame starts (IggyRules.cut_start) had its length
        damaged, larger; it becomes one malformed row up to the first of them and the frames
        after it are read (Framer.reread_if_cut; again for a second such frame)."""
        if self.mode is None:
            return
        fr = self.framer[direction]
        why = f"runs past {cut} and frames start inside it: its length damaged"
        try:
            while fr.reread_if_cut(why):
                self._drain(direction, rows)
        except Exception as e:  # noqa: BLE001 - never raise out of a decoder
            off, n, ts = fr.drop_all()
            rows.append(error_row(direction, off, n, ts, ts, base.MALFORMED, f"internal: {e!r}", None))

    def _drain(self, direction: str, rows: list[Row]) -> None:
        fr = self.framer[direction]
        if self.mode is None:
            self.mode = detect_mode(direction, fr.buf.peek(65536), self.max_frame)
            if self.mode is None:
                return
            self.pending.keyed = self.mode == REQID
            if direction == S2C and len(self.framer[C2S].buf):
                self._drain(C2S, rows)  # requests first, so responses find them
        while (item := fr.next()) is not None:
            if self.pending.forgotten:  # requests past MAX_PENDING: their held rows go out now
                for req in self.pending.forgotten:
                    rows.extend(self._release(req))
                self.pending.forgotten.clear()
            if isinstance(item, Junk):
                self._junk(direction, item, rows)
            elif self.mode == VSR:
                self._vsr_frame(direction, item, rows)
            elif direction == C2S:
                self._item = item
                try:
                    self._request(item, rows)
                finally:
                    self._item = None
            elif self._waits(item):
                self.held.append(item)
            else:
                if self.held and self.mode != REQID:  # at the bound: the held ones first, in order
                    self._release_held(rows, everything=True)
                self._response(item, rows)

    def _waits(self, fr: Frame) -> bool:
        """Does the response `fr` wait for the client's frame under way (up to
        base.MAX_HELD_ANSWERS)? While that frame is still short of its length (a server answers
        whole requests: the response is to a request in it, its length damaged, larger, or to
        one before the capture): with request ids, one whose id is not pending (paired by id
        once released); classic, in order, when nothing is pending (_release_held tells which
        it answers), and the responses after it behind it."""
        if len(self.held) >= base.MAX_HELD_ANSWERS:
            return False
        c2s = self.framer[C2S]
        if self.mode == REQID:  # paired by id when released: no order to keep
            if len(fr.data) < 16 or self.pending.has_id(read_layout(REQUEST_ID, fr.data)["request_id"]):
                return False
            return c2s.short_head() is not None
        if self.held:
            return True
        if self.pending.oldest() is not None or (at := c2s.short_head()) is None:
            return False
        self.held_at, self.held_reread = at, False
        return True

    def _release_held(self, rows: list[Row], everything: bool = False) -> None:
        """Read the held responses, in the order they came, once the client's frame they waited
        for is no longer under way (`everything`: at once). Classic: paired in order only if that
        frame was read again (its place kept, Junk.reread); else they answer requests before the
        capture, as they would have without waiting."""
        c2s = self.framer[C2S]
        if not everything:
            if c2s.short_head() is not None if self.mode == REQID else c2s.short_head() == self.held_at:
                return
        held, self.held = self.held, []
        paired = self.mode == REQID or self.held_reread
        for fr in held:
            self._response(fr, rows, paired)
        self.held_at, self.held_reread = None, False

    def low_water(self, direction: str) -> int | None:
        """Also the responses held for their requests (their rows come later), oldest first."""
        low = super().low_water(direction)
        if direction == S2C and self.held:
            held = self.held[0].offset
            low = held if low is None or held < low else low
        return low

    def _junk(self, direction: str, j: Junk, rows: list[Row]) -> None:
        """A junk record's row; an oversize frame skipped exactly, or a frame whose damaged
        length was read again (Junk.reread), still takes its place in pairing."""
        if j.reread and self.mode != VSR and len(j.head) >= 8:
            rows.append(self._junk_row(direction, j))
            if direction == C2S:
                self.held_reread = self.held_reread or j.offset == self.held_at
                code = read_layout(REQUEST_HEADER, j.head)["code"]
                rid = (
                    read_layout(REQUEST_ID, j.head)["request_id"]
                    if self.mode == REQID and len(j.head) >= 16
                    else None
                )
                self.pending.add(
                    new_request(code, COMMANDS.get(code), self.pending.next_corr(rid), j.ts_last)
                )
            elif self.mode != REQID and (req := self.pending.pop()) is not None:
                rows.append(latency_row(req, read_layout(RESPONSE_HEADER, j.head)["status"], j.ts_first))
                rows.extend(self._release(req))
            return
        if j.status != base.OVERSIZE:
            rows.append(self._junk_row(direction, j))
            return
        if self.mode == VSR:
            command = j.head[60]  # the VSR header's command byte
            rows.append(self._junk_row(direction, j, {"vsr_command": VSR_COMMANDS[command], "size": j.size}))
            if j.skipped and command == 8 and (req := self.pending.pop()) is not None:
                rows.append(latency_row(req, None, j.ts_last))
                rows.extend(self._release(req))
        elif direction == C2S:
            h = read_layout(REQUEST_HEADER, j.head)
            code = h["code"]
            rows.append(self._junk_row(direction, j, {"code": code, "length": h["length"]}))
            if j.skipped:
                corr = self.pending.next_corr(None)
                self.pending.add(new_request(code, COMMANDS.get(code), corr, j.ts_last))
        else:
            h = read_layout(RESPONSE_HEADER, j.head)
            status = h["status"]
            req = self.pending.pop() if j.skipped else None
            rows.append(self._junk_row(direction, j, {"status": status, "length": h["length"]}))
            if req:
                rows.append(latency_row(req, status, j.ts_first))
                rows.extend(self._release(req))

    def _junk_row(self, direction: str, j: Junk, info: dict | None = None) -> Row:
        return error_row(direction, j.offset, j.size, j.ts_first, j.ts_last, j.status, j.reason, info)

    # -----------------------------------------------------------------------------------------
    # classic / request-id frames

    def _request(self, fr: Frame, rows: list[Row]) -> None:
        """A request: [length u32][code u32] (+ request_id u64 @8 in the request-id framing)."""
        frame = memoryview(fr.data)
        h = read_layout(REQUEST_HEADER, frame)
        length, code = h["length"], h["code"]
        name = COMMANDS.get(code)
        hdr = 16 if self.mode == REQID else 8
        req_id = read_layout(REQUEST_ID, frame)["request_id"] if self.mode == REQID else None
        if req_id is not None:
            self.last_req_id = req_id
        corr = self.pending.next_corr(req_id)
        row = frame_columns(C2S, fr)
        row.update(command=name, command_code=code, correlation_id=corr)
        details: dict = {"framing": self.mode, "length": length}
        if req_id is not None:
            details["request_id"] = req_id
        pend = new_request(code, name, corr, fr.ts_last)
        self._emit_request(code, name, frame[hdr:], frame, row, pend, details, fr.ts_last, rows)

    def _response(self, fr: Frame, rows: list[Row], paired: bool = True) -> None:
        """A response: [status u32][length u32] (+ request_id u64 @8 in the request-id framing).
        `paired` False: it answers no request in the capture (_release_held)."""
        frame = memoryview(fr.data)
        h = read_layout(RESPONSE_HEADER, frame)
        status, length = h["status"], h["length"]
        hdr = 16 if self.mode == REQID else 8
        req_id = read_layout(REQUEST_ID, frame)["request_id"] if self.mode == REQID else None
        req = self.pending.pop(req_id) if paired else None
        details: dict = {"framing": self.mode, "status": status, "length": length}
        if req_id is not None:
            details["request_id"] = req_id
        row = frame_columns(S2C, fr)
        row["error_code"] = status
        if req is None:
            row.update(
                correlation_id=req_id,
                decode_status=base.REQUEST_MISSING,
                decode_error="response without a request in the capture",
                details=base.to_json(details),
            )
            rows.append(("commands", row))
            return
        self._emit_response(req, status, frame[hdr:], frame, row, details, fr.ts_first, rows)

    # -----------------------------------------------------------------------------------------
    # VSR frames

    def _vsr_frame(self, direction: str, fr: Frame, rows: list[Row]) -> None:
        """A consensus frame: a client's Request, the server's Reply, or header only (eviction,
        replica traffic)."""
        frame = memoryview(fr.data)
        h = read_layout(VSR_COMMON, frame)
        command = h["command"]
        d = vsr.header_details(h, len(frame))
        row = frame_columns(direction, fr)
        if command == 5:  # Request
            self._vsr_request(frame, row, d, fr.ts_last, rows)
            return
        if command == 8:  # Reply
            self._vsr_reply(frame, row, d, fr.ts_first, rows)
            return
        if command == 13:  # Eviction
            d.update(vsr.eviction_details(read_layout(VSR_EVICTION, frame)))
        row.update(command=f"VSR_{VSR_COMMANDS[command]}", decode_status=base.OK, details=base.to_json(d))
        rows.append(("commands", row))

    def _vsr_request(self, frame: memoryview, row: dict, d: dict, ts1: int, rows: list[Row]) -> None:
        """A Request: its operation names the classic command its body holds."""
        q = read_layout(VSR_REQUEST, frame)
        request, operation = q["request"], q["operation"]
        d.update(vsr.request_details(q))
        code, decoder, secret = vsr.request_command(q)
        name = COMMANDS.get(code) if code is not None else None
        row.update(command=name or f"VSR_OP_{operation}", command_code=code, correlation_id=request)
        pend = new_request(code, row["command"], request, ts1)
        if code is None:
            self._unknown_request(row, f"VSR operation {operation}", d, pend, rows)
            return
        body, header = frame[VSR_HEADER_LEN:], frame[:VSR_HEADER_LEN]
        self._emit_request(code, name, body, header, row, pend, d, ts1, rows, secret=secret, decoder=decoder)

    def _vsr_reply(self, frame: memoryview, row: dict, d: dict, ts0: int, rows: list[Row]) -> None:
        """A Reply, paired in order with the Request it answers."""
        r = read_layout(VSR_REPLY, frame)
        status = r["status"]
        d.update(
            request=r["request"], operation=r["operation"], status=status, op=r["op"], commit=r["commit"]
        )
        row["error_code"] = status
        req = self.pending.pop()
        if req is None:
            row.update(
                correlation_id=r["request"],
                decode_status=base.REQUEST_MISSING,
                decode_error="reply without a request in the capture",
                details=base.to_json(d),
            )
            rows.append(("commands", row))
            return
        body = frame[VSR_HEADER_LEN:]
        if status == 0 and result_framed(r["operation"], len(body)):
            body, rejected = vsr.result_section(body, d)
            if rejected is not None:
                status = row["error_code"] = rejected
        if req["code"] is None:
            row.update(
                command=req["name"],
                correlation_id=req["corr"],
                decode_status=base.OK,
                details=base.to_json(d),
            )
            rows.append(("commands", row))
            rows.append(latency_row(req, status, ts0))
            return
        decoder = vsr.VSR_RESPONSES.get(req["code"])
        self._emit_response(req, status, body, frame[:VSR_HEADER_LEN], row, d, ts0, rows, decoder=decoder)

    # -----------------------------------------------------------------------------------------
    # payloads, whatever the framing

    def _unknown_request(self, row: dict, why: str, details: dict, pend, rows: list[Row]) -> None:
        """A request of no known command: its row, and its place in pairing."""
        row.update(decode_status=base.UNKNOWN_COMMAND, decode_error=why, details=base.to_json(details))
        rows.append(("commands", row))
        self.pending.add(pend)

    def _emit_request(
        self,
        code: int,
        name: str | None,
        payload: memoryview,
        frame: memoryview,
        row: dict,
        pend: dict,
        details: dict,
        ts1: int,
        rows: list[Row],
        secret: bool = False,
        decoder: Callable | None = None,
    ) -> None:
        """Decode a request payload into its commands row (+ produce rows) and remember it."""
        if name is None:
            self._unknown_request(row, f"unknown code {code}", details, pend, rows)
            return
        secret = secret or code in SECRET_REQUESTS
        # a body that reads as a secret command's, whatever its code says: a damaged code makes a
        # login, a password change or a token read as another command (a token's layout, a
        # length and a string, is every name's), so its bytes are kept out of `raw`, and its
        # fields are shown only once the reply confirms the command (_held_row)
        also = None if secret else secret_reading(payload)
        try:
            sums = self.ctx.payload.checksums_kept
            fields = decoder(payload) if decoder else decode_request(code, payload, sums)
        except DecodeError as e:
            item = self._item
            why = f"{name} request: {e}, and frames start inside it: its length damaged"
            if item is not None and self.framer[C2S].reread_if_swallowed(item, why):
                # its length damaged, larger, took the requests after it in: its bytes up to
                # them are one Junk, which takes its place in the pairing (_junk)
                if not self.pending.keyed:
                    self.pending.ordinal -= 1
                return
            status = base.TRUNCATED if isinstance(e, Truncated) else base.MALFORMED
            row.update(decode_status=status, decode_error=str(e), details=base.to_json(details))
            row["raw"] = self._raw(C2S, frame, typed=not secret and also is None)
            rows.append(("commands", row))
            self.pending.add(pend)
            return
        if also is not None:
            self._hold(code, len(payload), row, details, fields, pend, also)
            return
        if code in LOGIN_CODES:
            self.logged_in = True
        msgs = fields.pop("messages", None) if code == 101 else None
        part = fields.get("partitioning") if code == 101 else None
        key = part["value"] if part and part["kind"] == "messages_key" else None
        if key is not None and not self.ctx.payload.keys_kept:  # the key policy, as the key column's
            shown = self.ctx.payload.key_text(key)
            fields["partitioning"] = {k: v for k, v in part.items() if k != "value"}
            if shown is not None:
                fields["partitioning"]["value"] = shown
        details.update(fields)
        topic = topic_name(fields.get("stream_id"), fields.get("topic_id"))
        if code == 302 and fields.get("name"):  # CREATE_TOPIC: the topic being created
            topic = f"{fields['stream_id']['value']}/{fields['name']}"
        partition = fields.get("partition_id")
        if code == 101 and fields["partitioning"]["kind"] == "partition_id":
            partition = fields["partitioning"]["value"]
        pend.update(topic=topic, partition=partition, details=fields)
        text = base.to_json(details) if msgs is None else with_summaries(details, msgs)
        row.update(topic=topic, partition=i32(partition), decode_status=base.OK, details=text)
        flag_batch_checksum(row, (fields.get("batch") or {}).get("batch_checksum_ok"))
        rows.append(("commands", row))
        if msgs:  # SEND_MESSAGES: a produce row per message, held until the reply places them
            frames = self.conn.frame_range(C2S, row.get("stream_offset"), row.get("size"))
            block = message_block(
                "produce",
                msgs,
                topic,
                i32(partition),
                pend["corr"],
                ts1,
                self.ctx.payload,
                key,
                frames=frames,
            )
            # each message's place in the batch: a VSR batch numbers them (offset_delta, its
            # offset less the batch's base offset), the other layouts by their order
            batch = fields.get("batch")
            if batch is not None:
                places = [
                    o - batch["base_offset"] if o is not None else i for i, o in enumerate(msgs.offsets)
                ]
            else:
                places = list(range(len(msgs)))
            pend["produce"] = (block, places)
        self.pending.add(pend)

    def _hold(
        self, code: int, size: int, row: dict, details: dict, fields: dict, pend: dict, also: str
    ) -> None:
        """A request whose body also reads as a secret command's (`also`): its row waits for the
        reply. Shown as decoded only when the reply confirms the command (_held_row); without
        one, or with any other, it keeps its header details and the payload's size only."""
        hidden = dict(row, decode_status=base.OK)
        note = f"not shown: its bytes read as {also} too, and no reply confirmed it"
        hidden["details"] = base.to_json({**details, "payload_size": size, "_note": note})
        fields.pop("messages", None)  # no produce rows: a secret's bytes would be their values
        shown_details = {**details, **fields}
        topic = topic_name(fields.get("stream_id"), fields.get("topic_id"))
        if code == 302 and fields.get("name"):
            topic = f"{fields['stream_id']['value']}/{fields['name']}"
        partition = fields.get("partition_id")
        shown = dict(row, topic=topic, partition=i32(partition), decode_status=base.OK)
        shown["details"] = base.to_json(shown_details)
        pend["held"] = {
            "shown": shown,
            "hidden": hidden,
            "strings": _strings(fields, _CONSTANT_KEYS),
            "req": {"topic": topic, "partition": partition, "details": fields},
        }
        self.pending.add(pend)

    def _emit_response(
        self,
        req: dict,
        status: int,
        payload: memoryview,
        frame: memoryview,
        row: dict,
        details: dict,
        ts0: int,
        rows: list[Row],
        decoder: Callable | None = None,
    ) -> None:
        """Decode a response for its request: commands, latency, deliver and ack rows."""
        code = req["code"]
        fields: dict = {}
        failed: DecodeError | None = None
        if status == 0 and len(payload):
            try:
                sums = self.ctx.payload.checksums_kept
                fields = decoder(payload) if decoder else decode_response(code, payload, sums)
            except DecodeError as e:
                failed = e
        # a payload that reads as a personal access token is one, whatever request it answers (a
        # CREATE_PERSONAL_ACCESS_TOKEN whose code was damaged, a reply paired with the wrong request)
        token = code not in SECRET_RESPONSES and reads_as_token(payload)
        if (held := req.pop("held", None)) is not None:
            structured = failed is None and not token and bool(fields) and (decoder or code in RESPONSES)
            rows.append(("commands", self._held_row(held, req, structured and status == 0, fields)))
        row.update(
            command=req["name"],
            command_code=code,
            correlation_id=req["corr"],
            topic=req["topic"],
            partition=i32(req["partition"]),
        )
        rows.append(latency_row(req, status, ts0))
        if failed is not None:
            st = base.TRUNCATED if isinstance(failed, Truncated) else base.MALFORMED
            row.update(decode_status=st, decode_error=str(failed), details=base.to_json(details))
            # a login's reply is not kept either: a VSR reply's header repeats its request's
            # checksum, a hash of the password
            secret = code in SECRET_RESPONSES or code in SECRET_REQUESTS or token
            row["raw"] = self._raw(S2C, frame, typed=not secret)
            rows.append(("commands", row))
            return
        if token:  # its fields would be the token's bytes (a name, numbers): none shown
            fields = {}
            details.update(
                payload_size=len(payload), _note="not shown: its bytes read as a personal access token"
            )
        elif status != 0 and len(payload):
            details["payload_size"] = len(payload)
        msgs = fields.pop("messages", None) if code == 100 else None
        if msgs is not None:
            row["partition"] = i32(fields.get("partition_id"))
        details.update(fields)
        text = base.to_json(details) if msgs is None else with_summaries(details, msgs)
        row.update(decode_status=base.OK, details=text)
        flag_batch_checksum(row, fields.get("batch_checksum_ok"))
        rows.append(("commands", row))
        if msgs:  # POLL_MESSAGES: one deliver row per message
            frames = self.conn.frame_range(S2C, row.get("stream_offset"), row.get("size"))
            self._deliveries(req, msgs, i32(fields.get("partition_id")), ts0, rows, frames)
        if code == 101:  # SEND_MESSAGES: its produce rows placed by the reply, its acknowledgement
            confirmations = fields.get("confirmations") or []
            rows.extend(
                self._release(req, confirmations[0] if status == 0 and len(confirmations) == 1 else None)
            )
            rows.extend(send_ack_rows(req, status, confirmations, ts0))
        rows.extend(self._acks(req, status, fields, msgs, ts0))

    # -----------------------------------------------------------------------------------------
    # derived rows

    def _deliveries(
        self, req: dict, msgs: Messages, partition: int | None, ts: int, rows: list[Row], frames: dict
    ) -> None:
        """The deliver rows of a poll's messages; each delivered offset is remembered, so that an
        offset ack finds when its message was delivered."""
        consumer = consumer_label((req.get("details") or {}).get("consumer"))
        topic = req["topic"]
        rows.append(
            message_block(
                "deliver", msgs, topic, partition, req["corr"], ts, self.ctx.payload, None, consumer, frames
            )
        )
        delivered = self.delivered
        offs = msgs.offsets
        if None not in offs and len(delivered) + len(offs) <= MAX_DELIVERED:  # nothing to forget
            delivered.update(zip(zip(repeat(topic), repeat(partition), offs), repeat(ts)))
            return
        for off in offs:
            if off is not None:
                delivered[(topic, partition, off)] = ts
                while len(delivered) > MAX_DELIVERED:
                    delivered.popitem(last=False)

    def _acks(self, req: dict, status: int, fields: dict, msgs, ts: int) -> list[Row]:
        """STORE_CONSUMER_OFFSET (121) acks its offset; POLL_MESSAGES (100) with auto_commit acks
        the last message polled."""
        d = req.get("details") or {}
        if req["code"] == 121 and d:
            return [self._offset_ack(req, status, ts)]
        if req["code"] == 100 and d.get("auto_commit") and status == 0 and msgs:
            return [auto_commit_ack_row(req, status, i32(fields.get("partition_id")), msgs, ts)]
        return []

    @staticmethod
    def _held_row(held: dict, req: dict, structured: bool, reply: dict) -> dict:
        """The commands row of a request whose body also reads as a secret command's (_hold), at
        its reply: shown as decoded when the reply is the command's own, structured and
        successful, and holds every string the request holds (a stream or topic created, read:
        its name echoed), which no reply to a login, a password change or a token does; else
        its header details and size only. The request's topic and fields are then the shown
        row's."""
        if not structured or not held["strings"] <= _strings(reply):
            return held["hidden"]
        req.update(held["req"])
        return held["shown"]

    @staticmethod
    def _release(req: dict, placed: dict | None = None) -> list[Row]:
        """A SEND_MESSAGES request's held produce rows; `placed` (the reply's one confirmation)
        gives them their partition and offsets: base_offset + each message's place. A request
        whose row waits for its reply (_hold) and gets none: the row, its fields not shown."""
        if (row := req.pop("held", None)) is not None:
            return [("commands", row["hidden"])]
        held = req.pop("produce", None)
        if held is None:
            return []
        (table, block), places = held
        if placed is not None:
            base_offset = placed["base_offset"]
            offsets = [base_offset + p for p in places]
            if offsets and (i64(min(offsets)) is None or i64(max(offsets)) is None):
                offsets = [i64(o) for o in offsets]  # past int64: null
            block.cols["offset"] = offsets
            block.const["partition"] = i32(placed["partition_id"])
        return [(table, block)]

    def _offset_ack(self, req: dict, status: int | None, ts: int | None) -> Row:
        d = req["details"]
        delivered = self.delivered.get((req["topic"], d.get("partition_id"), d["offset"]))
        return offset_ack_row(req, status, ts, delivered)

    def _flush_pending(self) -> list[Row]:
        """Requests that will get no response: a latencies row each (+ the offset ack)."""
        rows = []
        for req in self.pending.take_all():
            rows.append(latency_row(req, None, None))
            rows.extend(self._release(req))
            if req["code"] == 121 and req.get("details"):
                rows.append(self._offset_ack(req, None, None))
        return rows

    def _raw(self, direction: str, data, *, typed: bool) -> bytes | None:
        """Bytes for `raw` (Context.raw: only frames of known, non-secret type). Client bytes are
        also withheld before a decoded login: a damaged login frame misread as another command
        would otherwise put the password in `raw`."""
        if direction == C2S and not self.logged_in:
            return None
        raw = self.ctx.raw(data, typed=typed)
        if raw and self.mode == VSR:
            raw = vsr.without_checksums(raw, direction == C2S)
        return raw
