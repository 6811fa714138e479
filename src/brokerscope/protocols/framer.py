"""One direction's framing, shared by the protocols: buffering, gaps, oversize frames, garbage
and resync. A protocol says what its frames look like (`Rules`); the framer hands whole frames,
or a `Junk` record with its status and reason, to the conversation, which keeps only semantics.

    framer.push(data, ts)
    while (item := framer.next()) is not None:
        ...  # a Frame to decode, or Junk to record

In step, a frame's size comes from its header (`Rules.size`). A header that is not a frame start
puts the direction out of step, and so does a gap: then `base.FrameHunt` looks for a credible
frame start (`Rules.judge`), and the bytes passed over become one `malformed` Junk. A frame
larger than `max_frame` is `oversize` Junk: skipped exactly when its size is credible (at most
`base.SKIP_LIMIT_FACTOR` times the limit, its header credible by `Rules.credible`), else the
direction resyncs and the bytes up to the next frame start are that one oversize Junk.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import GAP, MALFORMED, OVERSIZE, SKIP_LIMIT_FACTOR, TRUNCATED, FrameHunt, StreamBuffer

HEAD_KEPT = 256  # bytes of an oversize frame's start handed over with its Junk


@dataclass
class Frame:
    offset: int  # stream offset of the first byte
    data: bytes  # the whole frame, header included
    ts_first: int
    ts_last: int


@dataclass
class Junk:
    """Bytes that are not a whole frame: passed over by a resync, an oversize frame, the partial
    frame a gap cut, or what is left when the connection ends."""

    offset: int
    size: int  # bytes on the wire (an oversize frame: its declared size)
    status: str  # a base decode_status
    reason: str
    ts_first: int
    ts_last: int
    head: bytes = b""  # an oversize frame's first bytes (its header); an unfinished frame's bytes
    skipped: bool = False  # an oversize frame skipped exactly: the next frame start is known


class Rules:
    """A protocol's frames, for one direction."""

    head_len: int = 8  # bytes that hold a frame's size
    hunt_len: int = 8  # fewest bytes a resync judgement needs

    def size(self, head: memoryview) -> int | None:
        """Total bytes of the frame starting `head` (at least `head_len` bytes), or None when the
        header is not a frame start (the direction then resyncs)."""
        raise NotImplementedError

    def judge(self, data: memoryview, i: int) -> int:
        """A resync candidate at `i`: base.CONFIRMED, TENTATIVE or NOT_A_FRAME (see FrameHunt)."""
        raise NotImplementedError

    def credible(self, head: memoryview, size: int) -> bool | None:
        """Does this header of an oversize frame start a real frame (True: recorded and skipped;
        False: not a frame start, resync; None: more bytes needed to tell)?"""
        return True

    def jump(self, buf: StreamBuffer, i: int) -> int | None:
        """The next index at or after `i` worth judging in a resync, or None to judge every one."""
        return None


class Framer:
    """Frames of one direction (see the module docstring)."""

    def __init__(self, rules: Rules, max_frame: int, in_step: bool = True):
        """`in_step=False`: the stream may start inside a frame, so the first frame start must be
        credible too."""
        self.rules = rules
        self.max_frame = max_frame
        self.buf = StreamBuffer()
        self.skip = 0  # bytes of an oversize frame still to discard
        self.resync = not in_step  # out of step: hunting for a frame start
        self.hunt = FrameHunt()
        self._garbage: Junk | None = None  # bytes passed over by the current resync
        self._jump = None
        if type(rules).jump is not Rules.jump:
            self._jump = lambda data, i: self.rules.jump(self.buf, i)

    def push(self, data: bytes, ts_ns: int) -> None:
        self.buf.append(data, ts_ns)

    def next(self) -> Frame | Junk | None:
        """The next whole frame or junk record, or None when more bytes are needed."""
        b = self.buf
        while True:
            if self.skip:
                n = min(self.skip, len(b))
                b.consume(n)
                self.skip -= n
                if self.skip:
                    return None
            if self.resync:
                found, drop = self.hunt.run(b, self.rules.judge, self.rules.hunt_len, self._jump)
                if drop:
                    self._pass_over(drop)
                if found is None:
                    return None
                self.resync = False
                if self._garbage is not None:
                    return self._take_garbage()
            if len(b) < self.rules.head_len:
                return None
            size = self.rules.size(b.data)
            if size is None:
                self.resync = True
                continue
            if size > self.max_frame:
                credible = self.rules.credible(b.data, size)
                if credible is None:
                    return None
                if not credible:
                    self.resync = True
                    continue
                junk = self._oversize(size)
                if junk is not None:
                    return junk
                continue
            if len(b) < size:
                return None
            off = b.offset
            frame = Frame(off, b.peek(size), b.ts_at(off), b.ts_at(off + size - 1))
            b.consume(size)
            return frame

    def gap(self, nbytes: int, ts_ns: int) -> tuple[list[Junk], bool]:
        """`nbytes` never arrived. Returns the junk it makes (bytes passed over, the partial frame
        it cut) and whether it fell inside an oversize frame being skipped (then the next frame
        start is still known)."""
        b = self.buf
        out = [self._take_garbage()] if self._garbage is not None else []
        if len(b):
            reason = f"{nbytes} bytes missing after a partial frame"
            out.append(Junk(b.offset, len(b), GAP, reason, b.ts_at(b.offset), ts_ns))
        skipping, pending = self.skip, len(b)
        b.skip(nbytes)
        if skipping and not pending and nbytes <= skipping:
            self.skip = skipping - nbytes
            return out, True
        self.skip = 0
        self.resync = True
        self.hunt.reset()
        return out, False

    def close(self) -> list[Junk]:
        """The connection ended: the bytes a resync was passing over (up to a credible frame
        start it held, if any), then an unfinished frame (with its bytes)."""
        b = self.buf
        if self.resync and len(b):
            held = [off for off in self.hunt.held if off >= b.offset]
            self._pass_over(held[0] - b.offset if held else len(b))
        out = [self._take_garbage()] if self._garbage is not None else []
        if len(b):
            reason = "connection ended inside a frame"
            out.append(
                Junk(b.offset, len(b), TRUNCATED, reason, b.ts_at(b.offset), b.last_ts, b.peek(len(b)))
            )
            b.consume(len(b))
        return out

    def drop_all(self) -> tuple[int, int, int]:
        """After a decoder error: forget what is buffered and resync. (offset, bytes, last ts)."""
        b = self.buf
        off, n = b.offset, len(b)
        b.consume(n)
        self.resync = True
        return off, n, b.last_ts

    # -- internals ----------------------------------------------------------------------------

    def _oversize(self, size: int) -> Junk | None:
        """A frame beyond the limit: its Junk (size: the declared size) when it is skipped
        exactly; else None, and the bytes up to the next credible frame start become its Junk."""
        b = self.buf
        skip = size <= SKIP_LIMIT_FACTOR * self.max_frame
        reason = f"frame of {size} bytes exceeds max_frame_bytes {self.max_frame}"
        ts = b.ts_at(b.offset)
        if skip:
            junk = Junk(b.offset, size, OVERSIZE, reason, ts, b.last_ts, b.peek(HEAD_KEPT), True)
            have = min(size, len(b))
            b.consume(have)
            self.skip = size - have
            return junk
        # a size beyond anything credible is damage: every byte up to the next frame start is
        # this one record, so each byte of the stream lands in exactly one row
        reason += "; resynchronised at the next frame start"
        self._garbage = Junk(b.offset, 0, OVERSIZE, reason, ts, ts, b.peek(HEAD_KEPT))
        self._pass_over(self.rules.head_len)
        self.resync = True
        return None

    def _pass_over(self, n: int) -> None:
        if n <= 0:
            return
        b = self.buf
        g = self._garbage
        if g is None:
            g = self._garbage = Junk(b.offset, 0, MALFORMED, "", b.ts_at(b.offset), 0)
        g.size += n
        g.ts_last = b.ts_at(b.offset + n - 1)
        b.consume(n)

    def _take_garbage(self) -> Junk:
        g, self._garbage = self._garbage, None
        if g.status == MALFORMED:
            g.reason = f"skipped {g.size} bytes to resync"
        return g
