"""Kafka frames on a TCP byte stream, as `Rules` for the shared framer.

Every request and response is an int32 size followed by that many bytes. A request starts with
its header (api_key int16, api_version int16, correlation_id int32, client_id string, ...); a
response with its correlation_id. After a v0 SaslHandshake, raw SASL tokens (an int32 size and
the token, no Kafka header) follow until the client sends a Kafka request again.

The first frame of a direction, and any frame with a size beyond the limit, must look like a
frame start before it is believed; after a gap or garbage the framer hunts for one (`judge`).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from .. import base
from ..base import C2S, OVERSIZE, StreamBuffer
from ..framer import MORE, NotAFrame, Rules
from . import schema
from .inference import decode_exact
from .names import EXTRA_API_NAMES
from .rows import records_summary

if TYPE_CHECKING:
    from .conversation import KafkaConversation

_I32 = struct.Struct(">i")
_HDR = struct.Struct(">ihhih")  # size, api_key, api_version, correlation_id, client_id length
MAX_CLIENT_ID = 512
# A resync candidate whose frame is not yet all buffered must continue the connection: its
# correlation id at most this far past the last request's (clients count up by one per request).
CORR_WINDOW = 1 << 16
REQUEST_HEAD = 14  # bytes of a request's size and header up to the client id's length


def _printable(b: bytes) -> bool:
    return all(32 <= c < 127 for c in b)


def plausible_request(buf: bytes | memoryview, pos: int, max_frame: int) -> int:
    """Confidence that a request frame starts at `pos` (0 = no, 1 = known API and version, 2 =
    known API with a decodable header). Needs 14 bytes; fewer gives 0."""
    if pos + REQUEST_HEAD > len(buf):
        return 0
    size, key, ver, corr, clen = _HDR.unpack_from(buf, pos)
    if size < 10 or size > max_frame or key < 0 or ver < 0 or ver > 64 or corr < 0:
        return 0
    if clen < -1 or clen > MAX_CLIENT_ID or clen > size - 10:
        return 0
    if clen > 0:
        cid = bytes(buf[pos + REQUEST_HEAD : pos + REQUEST_HEAD + clen])
        if len(cid) == clen and not _printable(cid):
            return 0
    s = schema.spec(key)
    if s is None:
        return 1 if key in EXTRA_API_NAMES else 0
    if ver > s.valid.hi:
        return 1
    return 2


class KafkaRules(Rules):
    """One direction's Kafka frames; what the conversation knows (pending correlation ids, the
    SASL mode, the last request) makes a frame start credible."""

    head_len = 4
    hunt_len = REQUEST_HEAD
    prefix_len = 4  # the conversation reads a frame after its size field
    settled_sizes = True  # a size once given has set `started`: later the same size field gives it

    def __init__(self, conv: KafkaConversation, direction: str):
        self.conv, self.c2s = conv, direction == C2S
        self.max_frame = conv.max_frame
        self.started = False  # a frame start was believed: later sizes in range need no check

    def size(self, buf: StreamBuffer) -> int | NotAFrame | None:
        size = buf.unpack(_I32)[0]
        if self.started and 0 <= size <= self.max_frame:
            return 4 + size
        data = buf.data
        verdict = self._request_start(data, size) if self.c2s else self._response_start(data, size)
        if verdict.__class__ is int and verdict > 0 and 0 <= size <= self.max_frame:
            self.started = True  # MORE is negative: not believed yet
        return verdict

    def _request_start(self, data: memoryview, size: int) -> int | NotAFrame | None:
        if len(data) < REQUEST_HEAD:
            return MORE if size >= 10 else None
        if self.conv.sasl_raw and 0 <= size <= self.max_frame:
            return 4 + size
        if plausible_request(data, 0, 1 << 31):
            return 4 + size  # beyond the limit, the framer skips it exactly or resyncs
        if self.started:  # a size field that is not a frame start, mid-conversation
            return self._bad_size(size)
        return None

    def _response_start(self, data: memoryview, size: int) -> int | NotAFrame | None:
        if len(data) < 8:
            return MORE if 4 <= size <= self.max_frame else None
        corr = _I32.unpack_from(data, 4)[0]
        conv = self.conv
        if size > self.max_frame or size < 0:
            if corr in conv.pending and 0 < size <= base.SKIP_LIMIT_FACTOR * self.max_frame:
                return 4 + size  # answers a request: skipped exactly
            return self._bad_size(size) if self.started else None
        if size < 4:
            return None
        if not self.started and corr not in conv.pending and not conv.sasl_raw:
            # the first response of a capture that may start mid-frame: a correlation id is
            # never negative, and where the next frame is already here its size must be sane
            if corr < 0:
                return None
            nxt = 4 + size
            if len(data) >= nxt + 4 and not 4 <= _I32.unpack_from(data, nxt)[0] <= self.max_frame:
                return None
        return 4 + size

    def _bad_size(self, size: int) -> NotAFrame:
        reason = f"declared frame size {size} exceeds the limit of {self.max_frame} bytes"
        return NotAFrame(reason + "; resynchronised at the next frame start", OVERSIZE, passed=4)

    def prefix(self, data: bytes) -> bytes:
        return _I32.pack(len(data))  # the size field

    def judge(self, data: memoryview, i: int) -> int:
        ok = self._credible_request(data, i) if self.c2s else self._credible_response(data, i)
        if ok:
            self.started = True
            return base.CONFIRMED
        return base.NOT_A_FRAME

    def cut_start(self, data: memoryview, i: int) -> bool:
        """A frame start inside a frame cut short (Framer.reread_if_cut), believed only on more
        than `judge` asks: a response's size and pending correlation id, or a request's header,
        are found in record payloads (a request header's api key and version read as a
        correlation id are a small number, often pending). The whole frame is here and decodes
        (a request: header and body under its spec, its correlation id continuing the
        connection's and its client id the connection's; a response: answering a pending
        request other than the one the cut frame's own correlation id names, its body decoding
        exactly and plausibly under that request's api), and the frame after it ends the buffer
        or starts credibly too (two frames in a row)."""
        if self.judge(data, i) != base.CONFIRMED:
            return False
        size = _I32.unpack_from(data, i)[0]
        end, n = i + 4 + size, len(data)
        if end > n:
            return False
        conv = self.conv
        if self.c2s:
            _size, _key, _ver, corr, clen = _HDR.unpack_from(data, i)
            if plausible_request(data, i, self.max_frame) < 2:
                return False
            if conv.last_corr is not None and not 0 < corr - conv.last_corr <= CORR_WINDOW:
                return False
            at = i + REQUEST_HEAD
            cid = bytes(data[at : at + clen]).decode("utf-8", "backslashreplace") if clen >= 0 else None
            if conv.client_id is not None and cid != conv.client_id:
                return False
            return end == n or plausible_request(data, end, self.max_frame) > 0
        corr = _I32.unpack_from(data, i + 4)[0]
        p = conv.pending.get(corr)
        if p is None or corr == _I32.unpack_from(data, 4)[0]:
            return False
        if schema.plan(p.api_key, p.version, "response") is not None:
            try:
                cap = conv.ctx.max_decompressed_bytes
                # bytes after its body as the decoder keeps them (librdkafka's mock broker: one
                # after each Metadata v13 response)
                body = bytes(data[i + 4 : end])
                decode_exact(body, p.api_key, p.version, cap, records_summary, schema.MAX_TRAILING)
            except Exception:  # noqa: BLE001 - any failure: not this response
                return False
        if end == n:
            return True
        return (
            n - end >= 8
            and 4 <= _I32.unpack_from(data, end)[0] <= self.max_frame
            and _I32.unpack_from(data, end + 4)[0] in conv.pending
        )

    def _credible_request(self, data: memoryview, i: int) -> bool:
        """A plausible header and, when the whole frame is buffered, a body that decodes under
        its spec (or, for APIs the specs lack, a next frame that is plausible)."""
        conf = plausible_request(data, i, self.max_frame)
        if not conf:
            return False
        size, _key, _ver, corr, clen = _HDR.unpack_from(data, i)
        end = i + 4 + size
        conv = self.conv
        if end > len(data):
            # not confirmable yet (its body, the next frame): believed only when it continues the
            # connection, its correlation id just past the last request's and the same client id
            if conf < 2 or conv.last_corr is None or not 0 < corr - conv.last_corr <= CORR_WINDOW:
                return False
            at = i + REQUEST_HEAD
            cid = bytes(data[at : at + clen]).decode("utf-8", "backslashreplace") if clen >= 0 else None
            return conv.client_id is None or cid == conv.client_id
        if conf == 2:
            frame = bytes(data[i + 4 : end])
            try:
                h = schema.read_request_header(frame)
                schema.decode_body(schema.plan(h.api_key, h.api_version, "request"), frame, h.body_offset)
            except schema.DecodeError:
                return False
            return True
        return end == len(data) or plausible_request(data, end, self.max_frame) > 0

    def _credible_response(self, data: memoryview, i: int) -> bool:
        """A size in range and a correlation id that is pending, or a next frame that is sane."""
        size = _I32.unpack_from(data, i)[0]
        if not 4 <= size <= self.max_frame:
            return False
        if _I32.unpack_from(data, i + 4)[0] in self.conv.pending:
            return True
        n, nxt = len(data), i + 4 + size
        return nxt == n or (
            nxt + 8 <= n
            and 4 <= _I32.unpack_from(data, nxt)[0] <= self.max_frame
            and _I32.unpack_from(data, nxt + 4)[0] >= 0
        )
