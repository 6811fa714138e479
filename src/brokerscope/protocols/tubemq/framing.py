"""TubeMQ frames on a TCP byte stream, as `Rules` for the shared framer.

Wire layout (all integers big-endian, 4 bytes each; TubeMQ's Protocol.txt and its Netty codec):

    offset 0   msgToken   0xFF7FF4FE (RPC_PROTOCOL_BEGIN_TOKEN)
    offset 4   serialNo   chosen by the requester, echoed in the response
    offset 8   listSize   number of blocks that follow, 1 .. MAX_LIST_SIZE
    offset 12  listSize x [ length (int32, 0 .. 8192) | data (length bytes) ]

The blocks' data, joined in order, hold the protobuf RPC envelope (see `rpc`). Senders cut the
joined bytes into blocks of at most 8192 bytes (RPC_MAX_BUFFER_SIZE); TubeMQ's decoder rejects a
larger block and a list size above (20 MiB + 8 MiB) / 8192.

A frame's size is known once the last block's length field has arrived, so `TubeRules.size`
walks the block lengths, remembering how far it got for the frame at the head of the buffer (a
large frame arriving in pieces is not re-walked). Anything that is not a frame is a `NotAFrame`
with its reason, and the framer resyncs on the next begin token.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ... import native
from ..base import CONFIRMED, MALFORMED, NOT_A_FRAME, OVERSIZE, StreamBuffer
from ..framer import MORE, Frame, NotAFrame, Rules

_rpc = native.load(__package__, "_rpc")  # compiled from _rpc.c: blocks joined, RPC envelopes

TOKEN = b"\xff\x7f\xf4\xfe"
TOKEN_INT = 0xFF7FF4FE
HEADER_LEN = 12
MAX_BLOCK = 8192
# TubeMQ: (META_MAX_MESSAGE_DATA_SIZE_UPPER_LIMIT (20 MiB) + 8 MiB) / RPC_MAX_BUFFER_SIZE
MAX_LIST_SIZE = (20 * 1024 * 1024 + 8 * 1024 * 1024) // MAX_BLOCK

_HDR = struct.Struct(">4sIi")  # token, serialNo (unsigned), listSize (signed, as Java reads it)
_LEN = struct.Struct(">i")
NOT_TOKEN = "bytes that do not start with the TubeMQ begin token"


@dataclass(slots=True)
class TubeFrame:
    """A whole frame, its blocks read."""

    offset: int  # stream offset of the token
    size: int  # bytes on the wire, header included
    serial: int
    block_sizes: list[int]
    body: bytes  # the blocks' data joined
    wire: bytes  # the frame as it was on the wire
    ts_first: int
    ts_last: int


def blocks(data: bytes | memoryview) -> list[tuple[int, int]]:
    """(offset of the data, length) of each whole block in `data` (a frame's first bytes)."""
    list_size = _HDR.unpack_from(data, 0)[2]
    out, pos, n = [], HEADER_LEN, len(data)
    while len(out) < list_size and pos + 4 <= n:
        length = _LEN.unpack_from(data, pos)[0]
        if pos + 4 + length > n:
            break
        out.append((pos + 4, length))
        pos += 4 + length
    return out


def read_frame(f: Frame) -> TubeFrame:
    """The header and blocks of a whole frame the rules sized (the compiled _rpc.frame joins
    them; blocks() reads a frame it leaves)."""
    data = f.data
    serial, sizes, body = _rpc.frame(data) or join_blocks(data)
    return TubeFrame(f.offset, len(data), serial, sizes, body, data, f.ts_first, f.ts_last)


def join_blocks(data: bytes) -> tuple[int, list[int], bytes]:
    """(serial, block lengths, the blocks' data joined) of a frame, in Python (what the compiled
    _rpc.frame leaves)."""
    parts = blocks(data)
    return _HDR.unpack_from(data, 0)[1], [n for _, n in parts], b"".join(data[p : p + n] for p, n in parts)


def header_info(head: bytes) -> dict:
    """What a frame's first bytes tell (for a frame cut by the end of the capture)."""
    if len(head) < HEADER_LEN or head[:4] != TOKEN:
        return {}
    _, serial, list_size = _HDR.unpack_from(head, 0)
    return {"serial": serial, "list_size": list_size, "blocks_complete": len(blocks(head))}


class TubeRules(Rules):
    """One direction's TubeMQ frames."""

    head_len = 1  # a byte that is not the token's first is already not a frame
    hunt_len = len(TOKEN)
    settled_sizes = True  # a size is the blocks' lengths, read from the bytes alone

    def __init__(self, max_frame: int, max_list_size: int = MAX_LIST_SIZE):
        self.max_frame = max(HEADER_LEN, max_frame)
        self.max_list = max_list_size
        # the walk through the blocks of the frame at the head of the buffer
        self._at = -1  # its stream offset (-1: none walked)
        self._serial = self._list = 0
        self._pos = 0  # offset (from the frame start) of the next block's length field
        self._left = 0  # blocks not walked yet

    def size(self, buf: StreamBuffer) -> int | NotAFrame:
        data = buf.data
        n = len(data)
        if buf.offset != self._at:
            if n < HEADER_LEN:
                head = bytes(data[:4])
                return MORE if head == TOKEN[: len(head)] else NotAFrame(NOT_TOKEN)
            token, serial, list_size = buf.unpack(_HDR)
            if token != TOKEN:
                return NotAFrame(NOT_TOKEN)
            if list_size <= 0 or list_size > self.max_list:
                info = {"serial": serial, "list_size": list_size}
                return NotAFrame(f"list size {list_size} outside 1..{self.max_list}", info=info, passed=4)
            self._at, self._serial, self._list = buf.offset, serial, list_size
            self._pos, self._left = HEADER_LEN, list_size
        pos, left = self._pos, self._left
        while pos + 4 <= n:
            length = _LEN.unpack_from(data, pos)[0]
            if length < 0 or length > MAX_BLOCK:
                index = self._list - left
                reason = f"block {index} length {length} outside 0..{MAX_BLOCK}"
                return self._bad(MALFORMED, reason, bad_block=index)
            if pos + 4 + length > self.max_frame:
                return self._bad(OVERSIZE, f"frame exceeds max_frame_bytes={self.max_frame}")
            if left == 1:
                self._at = -1
                return pos + 4 + length  # the last block's length is here: the frame's size is known
            if pos + 4 + length > n:
                break
            pos += 4 + length
            left -= 1
        self._pos, self._left = pos, left
        return MORE

    def split(self, data: bytes, max_frame: int) -> list[int]:
        """The sizes of the whole frames `data` starts with that `size` passes (_rpc.split)."""
        return _rpc.split(data, *self.limits(max_frame))

    def limits(self, max_frame: int) -> tuple[int, int]:
        """(largest frame, largest list size) of a frame `split` passes, under a framer's
        `max_frame` (_rpc.split's and _rpc.read_all's arguments)."""
        return min(max_frame, self.max_frame), self.max_list

    def reset(self) -> None:
        self._at = -1

    def _bad(self, status: str, reason: str, **info) -> NotAFrame:
        """The frame walked so far is not one to take: pass over its token and resync."""
        self._at = -1
        info = {"serial": self._serial, "list_size": self._list, **info}
        return NotAFrame(reason, status, info, passed=len(TOKEN))

    def judge(self, data: memoryview, i: int) -> int:
        return CONFIRMED if data[i : i + 4] == TOKEN else NOT_A_FRAME

    def jump(self, buf: StreamBuffer, i: int) -> int:
        j = buf.find(TOKEN, i)
        return len(buf) if j < 0 else j
