"""The TLS record layer of one direction, streaming: bytes in as reassembly delivers them, whole
records out, gaps handled.

    TLSPlaintext / TLSCiphertext (RFC 5246 6.2, RFC 8446 5.1):
      ContentType type (1) | ProtocolVersion version (2) | uint16 length | fragment[length]

A record may be split across segments and a segment may hold several records. In step, the
stream is a chain of records. A gap that ends inside the record whose header was read loses that
record only (`Lost` with `records=1`): the stream stays in step, so the sender's record sequence
number is still known. Any other gap (or a header that is not a record header) puts the stream
out of step: it hunts for a record header whose record is followed by another credible header
(or by the end of the stream) and reports the bytes it skipped as `Lost` with `records=None`.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field

# ContentType (RFC 5246 6.2.1, RFC 6520, RFC 8446 B.1)
CHANGE_CIPHER_SPEC = 20
ALERT = 21
HANDSHAKE = 22
APPLICATION_DATA = 23
HEARTBEAT = 24
CONTENT_TYPES = {
    CHANGE_CIPHER_SPEC: "change_cipher_spec",
    ALERT: "alert",
    HANDSHAKE: "handshake",
    APPLICATION_DATA: "application_data",
    HEARTBEAT: "heartbeat",
}

HEADER = struct.Struct("!BHH")  # type, version, length
HEADER_LEN = HEADER.size
MAJOR_3 = 3  # every record version is 3.x: SSL 3.0 (3.0) to TLS 1.2 (3.3); TLS 1.3 records say 3.3
MAX_MINOR = 4
MAX_PLAINTEXT = 1 << 14
# the largest TLSCiphertext.length: 2^14 + 2048 in TLS 1.2 (RFC 5246 6.2.3); TLS 1.3 allows 2^14 + 256
MAX_BODY = MAX_PLAINTEXT + 2048
# a record that the hunt takes must be followed by this many bytes of a credible next header
CONFIRM_LEN = HEADER_LEN


def credible(buf, i: int) -> int:
    """The record length if a credible record header starts at buf[i] (5 bytes there), else -1."""
    ctype, version, length = HEADER.unpack_from(buf, i)
    if ctype not in CONTENT_TYPES or version >> 8 != MAJOR_3 or version & 0xFF > MAX_MINOR:
        return -1
    if (length == 0 and ctype != APPLICATION_DATA) or length > MAX_BODY:  # empty: only app data may be
        return -1
    return length


@dataclass(slots=True)
class Record:
    """One whole record. `times`: (offset in body, capture time) of the segments that carried
    the body from that offset on, first offset 0; `offset`: the header's stream offset."""

    ctype: int
    version: int
    body: bytes
    offset: int
    times: list = field(default_factory=list)

    def __repr__(self) -> str:
        return f"Record({CONTENT_TYPES.get(self.ctype, self.ctype)}, {len(self.body)} bytes at {self.offset})"


@dataclass(slots=True)
class Lost:
    """Bytes of the stream that hold no whole record: `nbytes` missing or skipped, at stream
    offset `offset`. `records` is how many records they were when known (a gap inside a record
    whose header was read: 1, with that record's `ctype` and `body_len`), else None."""

    nbytes: int
    offset: int
    ts: int
    records: int | None = None
    ctype: int | None = None
    body_len: int | None = None
    truncated: bool = False  # the stream ended inside this record


_TYPE_LEADS = tuple(bytes((t, MAJOR_3)) for t in CONTENT_TYPES)


class RecordStream:
    """One direction's records. `feed`, `gap` and `close` return Records and Losts in order."""

    __slots__ = (
        "buf",
        "base",
        "marks",
        "in_step",
        "skip",
        "lost",
        "lost_at",
        "lost_ts",
        "records",
        "resyncs",
    )

    def __init__(self, in_step: bool = True):
        self.buf = bytearray()
        self.base = 0  # stream offset of buf[0]
        self.marks: deque[tuple[int, int]] = deque()  # (stream offset, ts) where each fed chunk began
        self.in_step = in_step
        self.skip = 0  # bytes still to pass of a record a gap cut (in step)
        self.lost = 0  # out of step: bytes missing or skipped since the stream left step
        self.lost_at = 0
        self.lost_ts = 0
        self.records = 0
        self.resyncs = 0

    def __repr__(self) -> str:
        return f"RecordStream(at={self.base}, held={len(self.buf)}, in_step={self.in_step})"

    # -- input ------------------------------------------------------------------------------
    def feed(self, data: bytes, ts: int) -> list:
        out: list = []
        if not data:
            return out
        if self.skip:
            n = min(self.skip, len(data))
            self.skip -= n
            self.base += n
            data = data[n:]
            if not data:
                return out
        self.marks.append((self.base + len(self.buf), ts))
        self.buf += data
        if self.in_step:
            self._records(out)
        if not self.in_step:
            self._hunt(out, closing=False)
        return out

    def gap(self, nbytes: int, ts: int) -> list:
        out: list = []
        if nbytes <= 0:
            return out
        if self.skip:
            n = min(self.skip, nbytes)
            self.skip -= n
            self.base += n
            nbytes -= n
            if not nbytes:
                return out
            self._leave_step(ts)  # the gap runs past the end of the record it cut
        elif self.in_step:
            have = len(self.buf)
            if have >= HEADER_LEN and credible(self.buf, 0) >= 0:
                ctype, _v, length = HEADER.unpack_from(self.buf, 0)
                total = HEADER_LEN + length
                if have + nbytes <= total:  # the gap ends inside the record at the head
                    out.append(Lost(have + nbytes, self.base, ts, 1, ctype, length))
                    self.skip = total - have - nbytes
                    self.base += have + nbytes
                    self.buf.clear()
                    self.marks.clear()
                    return out
            self._leave_step(ts)
        # out of step: the held bytes and the gap are lost until the hunt finds a record
        self.lost += len(self.buf) + nbytes
        self.base += len(self.buf) + nbytes
        self.buf.clear()
        self.marks.clear()
        return out

    def close(self, ts: int) -> list:
        out: list = []
        if not self.in_step:
            self._hunt(out, closing=True)
        if self.buf or self.lost or self.skip:
            truncated = self.in_step and len(self.buf) >= HEADER_LEN
            n = len(self.buf) + self.lost
            at = self.lost_at if self.lost else self.base
            rec = 1 if truncated else None
            ctype = length = None
            if truncated:
                ctype, _v, length = HEADER.unpack_from(self.buf, 0)
            if n:
                out.append(Lost(n, at, self.lost_ts if self.lost else ts, rec, ctype, length, truncated))
            self.base += len(self.buf)
            self.buf.clear()
            self.marks.clear()
            self.lost = 0
        return out

    # -- in step ----------------------------------------------------------------------------
    def _records(self, out: list) -> None:
        buf = self.buf
        pos = 0
        n = len(buf)
        while n - pos >= HEADER_LEN:
            length = credible(buf, pos)
            if length < 0:  # not a record header: out of step from here
                self._consume(pos)
                self._leave_step(self.marks[0][1] if self.marks else 0)
                return
            end = pos + HEADER_LEN + length
            if end > n:
                break
            out.append(self._record(pos, end))
            pos = end
        self._consume(pos)

    def _record(self, pos: int, end: int) -> Record:
        ctype, version, _length = HEADER.unpack_from(self.buf, pos)
        start = self.base + pos
        body_at = start + HEADER_LEN
        times = []
        for off, ts in self.marks:
            if off >= start + (end - pos):
                break
            if off <= body_at:
                times[:] = [(0, ts)]
            else:
                times.append((off - body_at, ts))
        self.records += 1
        return Record(ctype, version, bytes(self.buf[pos + HEADER_LEN : end]), start, times)

    def _consume(self, n: int) -> None:
        if not n:
            return
        del self.buf[:n]
        self.base += n
        marks = self.marks
        while len(marks) > 1 and marks[1][0] <= self.base:
            marks.popleft()

    def _leave_step(self, ts: int) -> None:
        self.in_step = False
        self.lost_at = self.base
        self.lost_ts = ts

    # -- out of step ------------------------------------------------------------------------
    def _hunt(self, out: list, closing: bool) -> None:
        """Find the next credible record start; resync there, or keep waiting for more bytes."""
        buf = self.buf
        i = 0
        while True:
            i = self._next_lead(i)
            if i < 0:  # no candidate: keep the last byte (a lead may straddle the chunk end)
                drop = max(0, len(buf) - 1) if not closing else len(buf)
                self.lost += drop
                self._consume(drop)
                return
            if len(buf) - i < HEADER_LEN:
                if closing:
                    i += 1
                    continue
                self.lost += i
                self._consume(i)
                return
            length = credible(buf, i)
            end = i + HEADER_LEN + length
            if length >= 0 and (
                (end + CONFIRM_LEN <= len(buf) and credible(buf, end) >= 0) or (closing and end == len(buf))
            ):
                break
            if length >= 0 and end + CONFIRM_LEN > len(buf) and not closing:
                self.lost += i  # a candidate still arriving: wait for it and its successor
                self._consume(i)
                return
            i += 1
        self.lost += i
        self._consume(i)
        out.append(Lost(self.lost, self.lost_at, self.lost_ts or (self.marks[0][1] if self.marks else 0)))
        self.lost = 0
        self.lost_ts = 0
        self.in_step = True
        self.resyncs += 1
        self._records(out)
        if not self.in_step:
            self._hunt(out, closing)

    def _next_lead(self, start: int) -> int:
        """The first position at or after start where a content type byte is followed by 3."""
        best = -1
        for lead in _TYPE_LEADS:
            j = self.buf.find(lead, start)
            if j >= 0 and (best < 0 or j < best):
                best = j
        return best
