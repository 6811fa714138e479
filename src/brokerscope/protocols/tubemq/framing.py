"""TubeMQ frames on a TCP byte stream.

Wire layout (all integers big-endian, 4 bytes each; TubeMQ's Protocol.txt and its Netty codec):

    offset 0   msgToken   0xFF7FF4FE (RPC_PROTOCOL_BEGIN_TOKEN)
    offset 4   serialNo   chosen by the requester, echoed in the response
    offset 8   listSize   number of blocks that follow, 1 .. MAX_LIST_SIZE
    offset 12  listSize x [ length (int32, 0 .. 8192) | data (length bytes) ]

The blocks' data, joined in order, hold the protobuf RPC envelope (see `rpc`). Senders cut the
joined bytes into blocks of at most 8192 bytes (RPC_MAX_BUFFER_SIZE); TubeMQ's decoder rejects a
larger block and a list size above (20 MiB + 8 MiB) / 8192.

`FrameScanner` walks one direction incrementally (blocks already walked are not re-read when more
bytes arrive), never raises, and turns anything that is not a frame into one `Junk` record that
spans up to the next begin token, so decoding resyncs on the token.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ..base import GAP, MALFORMED, OVERSIZE, TRUNCATED, StreamBuffer

TOKEN = b"\xff\x7f\xf4\xfe"
TOKEN_INT = 0xFF7FF4FE
HEADER_LEN = 12
MAX_BLOCK = 8192
# TubeMQ: (META_MAX_MESSAGE_DATA_SIZE_UPPER_LIMIT (20 MiB) + 8 MiB) / RPC_MAX_BUFFER_SIZE
MAX_LIST_SIZE = (20 * 1024 * 1024 + 8 * 1024 * 1024) // MAX_BLOCK

_HDR = struct.Struct(">4sIi")  # token, serialNo (unsigned), listSize (signed, as Java reads it)
_LEN = struct.Struct(">i")


@dataclass
class Frame:
    offset: int  # stream offset of the token
    size: int  # bytes on the wire, header included
    serial: int
    block_sizes: list[int]
    body: bytes  # the blocks' data joined
    ts_first: int
    ts_last: int


@dataclass
class Junk:
    """Bytes that are not a whole frame: garbage before a token, a frame with an impossible header,
    an oversize frame, a frame cut by a gap, or a truncated tail at close."""

    offset: int
    size: int
    status: str
    reason: str
    ts_first: int
    ts_last: int
    header: dict = field(default_factory=dict)


class FrameScanner:
    """Frames of one direction. `push` bytes, then call `next()` until it returns None."""

    def __init__(self, max_frame_bytes: int, max_list_size: int = MAX_LIST_SIZE):
        self.buf = StreamBuffer()
        self.max_frame = max(HEADER_LEN, max_frame_bytes)
        self.max_list = max_list_size
        # progress through the frame at the head of the buffer
        self._list_size: int | None = None
        self._serial = 0
        self._blocks: list[int] = []
        self._pos = 0  # offset (from the frame start) of the next block's length field
        # an open junk region (bytes being skipped until the next token)
        self._junk: Junk | None = None

    # -- input --------------------------------------------------------------------------------

    def push(self, data: bytes, ts_ns: int) -> None:
        self.buf.append(data, ts_ns)

    def gap(self, nbytes: int, ts_ns: int) -> None:
        """`nbytes` never arrived: whatever frame was in progress is lost; skip to the next token."""
        pending = len(self.buf)
        if self._junk is None:
            if pending or self._list_size is not None:
                self._open_junk(GAP, f"frame cut by a capture gap of {nbytes} bytes")
            else:
                self._open_junk(GAP, f"bytes after a capture gap of {nbytes} bytes")
                self._junk.ts_first = ts_ns
        self._reset_frame()
        self._junk.size += pending + nbytes
        self._junk.ts_last = ts_ns
        self.buf.skip(nbytes)

    # -- output -------------------------------------------------------------------------------

    def next(self) -> Frame | Junk | None:
        """The next complete frame or junk record, or None when more bytes are needed.

        Views of the buffer (`data`) are dropped before anything consumes from it: a bytearray
        cannot be compacted while a memoryview of it exists.
        """
        while True:
            if self._junk is not None:
                done = self._skip_to_token()
                if done is not None:
                    return done
                if self._junk is not None:
                    return None  # still skipping: the token has not arrived yet
                continue
            data = self.buf.data
            n = len(data)
            if self._list_size is None:
                if n == 0:
                    return None
                head = bytes(data[:4])
                if not TOKEN.startswith(head[:n]) or (n >= 4 and head != TOKEN):
                    del data
                    self._open_junk(MALFORMED, "bytes that do not start with the TubeMQ begin token")
                    continue
                if n < HEADER_LEN:
                    return None
                _, serial, list_size = _HDR.unpack_from(data, 0)
                if list_size <= 0 or list_size > self.max_list:
                    del data
                    self._open_junk(
                        MALFORMED,
                        f"list size {list_size} outside 1..{self.max_list}",
                        header={"serial": serial, "list_size": list_size},
                    )
                    self._consume_into_junk(4)
                    continue
                self._list_size = list_size
                self._serial = serial
                self._blocks = []
                self._pos = HEADER_LEN
            # walk the blocks that have arrived
            problem: tuple[str, str] | None = None
            while len(self._blocks) < self._list_size:
                if self._pos + 4 > n:
                    return None
                (length,) = _LEN.unpack_from(data, self._pos)
                if length < 0 or length > MAX_BLOCK:
                    problem = (MALFORMED, f"block {len(self._blocks)} length {length} outside 0..{MAX_BLOCK}")
                    break
                if self._pos + 4 + length > self.max_frame:
                    problem = (OVERSIZE, f"frame exceeds max_frame_bytes={self.max_frame}")
                    break
                if self._pos + 4 + length > n:
                    return None
                self._blocks.append(length)
                self._pos += 4 + length
            del data
            if problem is None:
                return self._take_frame()
            status, reason = problem
            hdr = {"serial": self._serial, "list_size": self._list_size}
            if status == MALFORMED:
                hdr["bad_block"] = len(self._blocks)
            self._reset_frame()
            self._open_junk(status, reason, header=hdr)
            self._consume_into_junk(4)

    def close(self) -> Junk | None:
        """End of stream: the open junk region or the unfinished frame, if any."""
        if self._junk is not None:
            j = self._junk
            j.size += len(self.buf)
            if len(self.buf):
                j.ts_last = self.buf.ts_at(self.buf.end - 1)
            self.buf.consume(len(self.buf))
            self._junk = None
            return j
        n = len(self.buf)
        if n == 0:
            return None
        off = self.buf.offset
        hdr: dict = {}
        if self._list_size is not None:
            hdr = {
                "serial": self._serial,
                "list_size": self._list_size,
                "blocks_complete": len(self._blocks),
            }
        j = Junk(
            off,
            n,
            TRUNCATED,
            f"stream ended {n} bytes into a frame",
            self.buf.ts_at(off),
            self.buf.ts_at(self.buf.end - 1),
            header=hdr,
        )
        self.buf.consume(n)
        self._reset_frame()
        return j

    def drop_all(self) -> tuple[int, int, int]:
        """After an internal error: forget everything buffered and the frame in progress.
        Returns (stream offset, bytes dropped, last time). Never touches the old buffer's storage."""
        old = self.buf
        off, n, ts = old.offset, len(old), old.last_ts
        self.buf = StreamBuffer()
        self.buf.offset = old.end
        self.buf.last_ts = ts
        self._reset_frame()
        self._junk = None
        return off, n, ts

    # -- internals ----------------------------------------------------------------------------

    def _reset_frame(self) -> None:
        self._list_size = None
        self._blocks = []
        self._pos = 0

    def _take_frame(self) -> Frame:
        data = self.buf.data
        off = self.buf.offset
        size = self._pos
        parts = []
        p = HEADER_LEN
        for length in self._blocks:
            parts.append(data[p + 4 : p + 4 + length])
            p += 4 + length
        body = b"".join(parts)
        del parts, data  # release the views before the buffer is consumed (and maybe compacted)
        f = Frame(
            off,
            size,
            self._serial,
            list(self._blocks),
            body,
            self.buf.ts_at(off),
            self.buf.ts_at(off + size - 1),
        )
        self.buf.consume(size)
        self._reset_frame()
        return f

    def _open_junk(self, status: str, reason: str, header: dict | None = None) -> None:
        off = self.buf.offset
        ts = self.buf.ts_at(off) if len(self.buf) else self.buf.last_ts
        self._junk = Junk(off, 0, status, reason, ts, ts, header=header or {})

    def _consume_into_junk(self, k: int) -> None:
        j = self._junk
        assert j is not None
        k = min(k, len(self.buf))
        if k <= 0:
            return
        j.size += k
        j.ts_last = self.buf.ts_at(self.buf.offset + k - 1)
        self.buf.consume(k)

    def _skip_to_token(self) -> Junk | None:
        """Skip bytes into the open junk region up to the next token; return the region once the
        token is found (the token stays buffered for the next frame)."""
        data = bytes(self.buf.data)
        idx = data.find(TOKEN)
        if idx < 0:
            # keep a possible token prefix at the end
            keep = 0
            for k in (3, 2, 1):
                if len(data) >= k and TOKEN.startswith(data[-k:]):
                    keep = k
                    break
            self._consume_into_junk(len(data) - keep)
            return None
        self._consume_into_junk(idx)
        j = self._junk
        self._junk = None
        if j.size == 0 and j.status != GAP:
            return None
        return j
