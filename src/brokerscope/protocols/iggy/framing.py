"""Iggy's three framings: which one a connection speaks, and the framer Rules that cut one
direction into frames (protocols/framer.py does the buffering, gaps and resync).

Framings, detected per connection from the first request (all little-endian):
- classic (the spec): request [length u32][code u32][payload], length = 4 + payload;
  response [status u32][length u32][payload]; responses come in request order (FIFO pairing,
  correlation_id = the request's 1-based ordinal on the connection).
- request id (apache/iggy "server-ng" `RequestFrame2`/`ResponseFrame2`): request
  [length u32][code u32][request_id u64][payload], length = 12 + payload; response
  [status u32][length u32][request_id u64][payload], length = 8 + payload; paired by request id.
- VSR (consensus headers, the client-wire version spoken by apache-iggy 0.9 clients): a 256-byte
  header whose `size` u32 @48 counts header + body, `command` u8 @60 (vsr.py has the layout).
The headers are the field tables of codes.py: REQUEST_HEADER, RESPONSE_HEADER, REQUEST_ID and
VSR_COMMON.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from .. import base
from ..base import C2S, StreamBuffer
from ..framer import Rules
from .codes import (
    COMMANDS,
    EMPTY_REQUEST,
    REQUEST_HEADER,
    RESPONSE_HEADER,
    VSR_COMMANDS,
    VSR_COMMON,
    VSR_HEADER_LEN,
    read_layout,
)
from .commands import decode_request, decode_response
from .wire import DecodeError

if TYPE_CHECKING:
    from .conversation import IggyConversation

CLASSIC = "classic"
REQID = "request_id"
VSR = "vsr"
MAX_STATUS = 100_000  # Iggy error codes are small numbers
RESYNC_MAX_STATUS = 10_000  # stricter when hunting for a response header in garbage
# a resync candidate whose request id is at most this far past the latest request's continues the
# connection (clients count request ids up by one)
REQ_ID_WINDOW = 1 << 16
_II = struct.Struct("<II")


def plausible_request(buf, pos: int, max_len: int) -> bool:
    """A classic/request-id request header at pos: length within bounds and a known code."""
    if len(buf) - pos < 8:
        return False
    length, code = _II.unpack_from(buf, pos)
    return 4 <= length <= max_len and code in COMMANDS


def vsr_size(buf, pos: int = 0) -> int:
    """The frame size of a plausible VSR header at pos (a size that holds the header and a known
    command), else 0."""
    if len(buf) - pos < 64:
        return 0
    h = read_layout(VSR_COMMON, buf, pos)
    ok = h["size"] >= VSR_HEADER_LEN and h["command"] in VSR_COMMANDS and 0 < h["command"]
    return h["size"] if ok else 0


def plausible_vsr(buf, pos: int = 0) -> bool:
    """A VSR header at pos (vsr_size)."""
    return vsr_size(buf, pos) > 0


def decodes_as_request(code: int, payload) -> bool:
    """Does `payload` decode as the request payload of `code`?"""
    try:
        decode_request(code, payload)
        return True
    except DecodeError:
        return False
    except Exception:  # noqa: BLE001 - any failure means "not this layout"
        return False


def detect_mode(direction: str, data, max_frame: int) -> str | None:
    """The connection's framing from the first bytes of `direction` (at most 64 KiB of them);
    None = need more bytes."""
    if direction == C2S:
        if plausible_request(data, 0, max_frame):
            length, code = _II.unpack_from(data, 0)
            if code in EMPTY_REQUEST and length in (4, 12):
                return CLASSIC if length == 4 else REQID
            if len(data) < 4 + length:
                return None if len(data) < 65536 else CLASSIC
            classic_ok = decodes_as_request(code, data[8 : 4 + length])
            reqid_ok = length >= 12 and decodes_as_request(code, data[16 : 4 + length])
            return REQID if (reqid_ok and not classic_ok) else CLASSIC
        if len(data) >= 64 and plausible_vsr(data):
            return VSR
        if len(data) >= 8:
            length, code = _II.unpack_from(data, 0)
            if 4 <= length <= max_frame and code < 10_000 and len(data) >= 4 + length:
                return CLASSIC  # an unknown command in a well-formed frame
        return None if len(data) < 64 else CLASSIC
    # server spoke first (client side not captured): classic unless it is a VSR header
    if len(data) < 8:
        return None
    return VSR if len(data) >= 64 and plausible_vsr(data) else CLASSIC


class IggyRules(Rules):
    """Iggy's frames in one direction, in the connection's framing (`mode`, found from its first
    bytes): the classic and request-id headers (codes.REQUEST_HEADER, RESPONSE_HEADER, REQUEST_ID)
    or the VSR consensus header (codes.VSR_COMMON: `size` counts the whole frame). A resync
    candidate is judged against the conversation's state: the latest request id, the pending
    requests, whether the connection is closing."""

    def __init__(self, conv: IggyConversation, direction: str):
        self.conv, self.direction = conv, direction

    @property
    def head_len(self) -> int:
        return 64 if self.conv.mode == VSR else 8

    hunt_len = head_len

    def size(self, buf: StreamBuffer) -> int | None:
        conv = self.conv
        if conv.mode == VSR:
            return vsr_size(buf.data) or None
        if self.direction == C2S:
            length, code = buf.unpack(REQUEST_HEADER.struct)  # the layout's fields, in order
            min_len = 12 if conv.mode == REQID else 4
            if length < min_len or (code not in COMMANDS and (code > 10_000 or length > conv.max_frame)):
                return None
            return 4 + length
        status, length = buf.unpack(RESPONSE_HEADER.struct)
        if status >= MAX_STATUS or (conv.mode == REQID and length < 8):
            return None
        return 8 + length

    def judge(self, data: memoryview, i: int) -> int:
        if self.conv.mode == VSR:
            return self._vsr(data, i)
        return self._request(data, i) if self.direction == C2S else self._response(data, i)

    def cut_start(self, data: memoryview, i: int) -> bool:
        """A frame start inside a frame cut short (Framer.reread_if_cut), believed on more than
        `judge` asks (a request id that continues the connection's; a response's small status and
        sane length, found in any payload of small little-endian numbers): a request whole, its
        payload decoding, the next header plausible or the buffer's end; a response only in the
        request-id framing, its id pending and not the cut frame's own, whole, the next header
        plausible or the buffer's end. VSR frames and classic responses (paired in order, their
        headers credible on little) are not split."""
        mode = self.conv.mode
        if mode not in (CLASSIC, REQID) or self.judge(data, i) != base.CONFIRMED:
            return False
        length, code = _II.unpack_from(data, i)
        n = len(data)
        if self.direction == C2S:
            end = i + 4 + length
            if end > n or not decodes_as_request(code, bytes(data[i + (16 if mode == REQID else 8) : end])):
                return False
            return end == n or plausible_request(data, end, self.conv.max_frame)
        end = i + 8 + length
        if mode != REQID or end > n or n < 16:
            return False
        rid = struct.unpack_from("<Q", data, i + 8)[0]
        if not self.conv.pending.has_id(rid) or rid == struct.unpack_from("<Q", data, 8)[0]:
            return False
        return end == n or (n - end >= 16 and self._plausible_response(data, end))

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
        if not decodes_as_request(code, bytes(data[i + (16 if self.conv.mode == REQID else 8) : end])):
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
        pending = self.conv.pending
        if self.conv.mode == REQID and n - i >= 16:
            if pending.has_id(struct.unpack_from("<Q", data, i + 8)[0]):
                return base.CONFIRMED
        if end > n:
            return base.TENTATIVE
        if status == 0 and length and self.conv.mode != REQID and (oldest := pending.oldest()) is not None:
            try:
                decode_response(oldest["code"], bytes(data[i + 8 : end]))
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
