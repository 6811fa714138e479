"""One direction's framing, shared by the protocols: buffering, gaps, oversize frames, garbage
and resync. A protocol says what its frames look like (`Rules`); the framer hands whole frames,
or a `Junk` record with its status and reason, to the conversation, which keeps only semantics.

    if not framer.push(data, ts):  # True: still short of the frame being gathered
        while (item := framer.next()) is not None:
            ...  # a Frame to decode, or Junk to record

In step, a frame's size comes from its header (`Rules.size`). A header that is not a frame start
puts the direction out of step: then `base.FrameHunt` looks for a credible frame start
(`Rules.judge`), and the bytes passed over become one Junk, `malformed` with the reason the rules
gave. A frame larger than `max_frame` is `oversize` Junk: skipped exactly when its size is
credible (at most `base.SKIP_LIMIT_FACTOR` times the limit, its header credible by
`Rules.credible`), else the direction resyncs and the bytes up to the next frame start are that
one oversize Junk. One of at most OVERSIZE_HELD bytes is gathered whole first: if a credible frame
start lies inside it (Rules.cut_start), its size was damaged, larger, and it is read again (one
malformed Junk up to that start, the frames after it read), else it is the oversize Junk.

Gaps (bytes the capture missed) follow one rule. A gap that ends inside the frame at the head of
the buffer, whose size is known, is one `gap` Junk spanning that whole frame; the direction stays
in step. Any other gap is one `gap` Junk spanning the partial frame it cut, the missing bytes and
the bytes after it up to the next frame start. A gap inside an oversize frame being skipped
makes no record (that frame's Junk already counts its bytes). So every stream offset of a
direction, missing or not, lands in exactly one Frame or Junk, and their sizes add up.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import CONFIRMED, GAP, MALFORMED, OVERSIZE, SKIP_LIMIT_FACTOR, TRUNCATED, FrameHunt, StreamBuffer

HEAD_KEPT = 256  # bytes of a frame's start handed over with its Junk
# An oversize frame (credible, skipped exactly) up to this size is gathered whole before it is
# skipped, to be looked into for the frames a damaged size took in (Pulsar's 5 MiB limit: 5-20
# MiB; Kafka's 100 MiB: none). The memory of one frame per direction.
OVERSIZE_HELD = 32 << 20
MORE = -1  # Rules.size: more bytes are needed to know the frame's size


@dataclass(slots=True)
class Frame:
    offset: int  # stream offset of the first byte
    data: bytes  # the whole frame, header included (but for Rules.prefix_len bytes)
    ts_first: int
    ts_last: int
    in_step: bool = (
        True  # starts where a whole frame ended (or an in-step stream began), not found by a resync
    )


@dataclass(slots=True)
class Junk:
    """Bytes that are not a whole frame: passed over by a resync, an oversize frame, a frame cut
    by a gap, or what is left when the connection ends."""

    offset: int
    size: int  # stream offsets spanned (an oversize or gap-cut frame: its whole size)
    status: str  # a base decode_status
    reason: str
    ts_first: int
    ts_last: int
    head: bytes = b""  # first bytes of a frame that starts in step (its header), if the Junk is one
    skipped: bool = False  # a frame of known size skipped exactly: the next frame start is known
    info: dict | None = None  # header fields the rules read (NotAFrame.info)
    # a frame whose size was damaged, read again (Framer.reread_if_*): one of the direction's
    # frames (its `head`, its first bytes), though it ends where the frames it took in start
    reread: bool = False


@dataclass(frozen=True, slots=True)
class NotAFrame:
    """`Rules.size`'s verdict on a header that is not a frame start, with why. The bytes from
    here to the next frame start become one Junk with this status, reason and info."""

    reason: str
    status: str = MALFORMED
    info: dict | None = None
    passed: int = 0  # bytes of the header to pass over before hunting (a marker it would find again)


class Rules:
    """A protocol's frames, for one direction."""

    head_len: int = 8  # fewest bytes `size` looks at
    hunt_len: int = 8  # fewest bytes a resync judgement needs
    prefix_len: int = 0  # leading bytes (a length field) left out of Frame.data

    def size(self, buf: StreamBuffer) -> int | NotAFrame | None:
        """Total bytes of the frame starting at the head of `buf` (which holds at least
        `head_len` bytes); MORE when more bytes are needed to tell; NotAFrame (or None, for no
        reason worth naming) when the header is not a frame start: the direction then resyncs."""
        raise NotImplementedError

    def judge(self, data: memoryview, i: int) -> int:
        """A resync candidate at `i`: base.CONFIRMED, TENTATIVE or NOT_A_FRAME (see FrameHunt)."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forget any walk of the frame at the head of the buffer (Framer.feed_whole passed the
        bytes it would have started at)."""

    def cut_start(self, data: memoryview, i: int) -> bool:
        """Is the frame start at `i` credible enough to end a frame cut short at the connection's
        end or a capture gap (Framer.reread_if_cut)? A real frame's payload cut by a real gap must
        not be split into frames read out of it: rules whose `judge` confirms on little (a size
        and a small number) ask more here. Default: `judge` confirms it."""
        return self.judge(data, i) == CONFIRMED

    def credible(self, head: memoryview, size: int) -> bool | None:
        """Does this header of an oversize frame start a real frame (True: recorded and skipped;
        False: not a frame start, resync; None: more bytes needed to tell)?"""
        return True

    def prefix(self, data: bytes) -> bytes:
        """The `prefix_len` bytes a Frame's data leaves out, made again from the data (its size
        field): Framer.reread_if_swallowed puts the whole frame back."""
        return b""

    def jump(self, buf: StreamBuffer, i: int) -> int | None:
        """The next index at or after `i` worth judging in a resync, or None to judge every one."""
        return None

    # size() gives the same int again for the same head bytes once it gave one (nothing of its
    # own or its conversation's state changes it after): Framer.next then waits for the rest of
    # a frame without asking again for every segment that brings part of it
    settled_sizes = False

    # split(data, max_frame) -> the sizes of the whole frames `data` starts with, each one that
    # `size` would pass as it is (not oversize), stopping at anything else: Framer.feed_whole's
    # fast path (a compiled walk); None: the rules have none
    split = None


class Framer:
    """Frames of one direction (see the module docstring)."""

    def __init__(self, rules: Rules, max_frame: int, in_step: bool = True):
        """`in_step=False`: the stream may start inside a frame, so the first frame start must be
        credible too."""
        self.rules = rules
        self.max_frame = max_frame
        self.buf = StreamBuffer()
        self.skip = 0  # bytes of a frame of known size still to discard
        self.resync = not in_step  # out of step: hunting for a frame start
        self.hunt = FrameHunt()
        self._in_step = in_step  # the next frame starts where a whole frame ended
        self._found = False  # the head of the buffer is a start the hunt just found
        self._garbage: Junk | None = None  # bytes passed over by the current resync
        self._short: tuple[int, int] | None = None  # (offset, size): the head frame, bytes short
        self._holds: tuple = (None, False)  # holds_frames' answer, by the buffer's (offset, length)
        self._jump = None
        if type(rules).jump is not Rules.jump:
            self._jump = lambda data, i: self.rules.jump(self.buf, i)

    def push(self, data: bytes, ts_ns: int) -> bool:
        """Buffer the next bytes. True when `next` would give None now without changing anything:
        the head frame, sized once (settled_sizes), is still short (a conversation then need not
        ask it: most segments of a large frame)."""
        self.buf.append(data, ts_ns)
        return self._short is not None and self._still_short()

    def push_run(self, chunks: list[bytes], tss: list[int]) -> bool:
        """`push` of each of `chunks` in turn, with its time, at once."""
        self.buf.extend(chunks, tss)
        return self._short is not None and self._still_short()

    def holds_frames(self) -> bool:
        """Is the head frame still short of its size while the bytes it holds have a frame start
        past its first credible as reread_if_cut asks (Rules.cut_start)? Its size may be
        damaged, larger, taking the frames after it in: the other direction's answers to them
        come first. Scanned once per state of the buffer."""
        b = self.buf
        if self.short_head() is None or len(b) <= self.rules.hunt_len:
            return False
        key = (b.offset, len(b))
        if self._holds[0] != key:
            self._holds = (key, self._holds_start(b, self.rules.cut_start) > 0)
        return self._holds[1]

    def short_head(self) -> int | None:
        """The stream offset of the frame at the head of the buffer when it is sized and still
        short of its size (in step: no resync or skip under way), else None."""
        b = self.buf
        if self.skip or self.resync or len(b) < self.rules.head_len:
            return None
        if self.rules.settled_sizes:  # sized by next() once: _short
            return b.offset if self._short is not None and self._still_short() else None
        size = self.rules.size(b)
        return b.offset if size.__class__ is int and size > len(b) else None

    def _still_short(self) -> bool:
        """The head frame sized once (`_short`, set) is still short, and nothing else is under
        way: `next` has nothing to give."""
        b, short = self.buf, self._short
        return short[0] == b.offset and len(b) < short[1] and not self.skip and not self.resync

    def feed_whole(self, data: bytes, ts_ns: int) -> list[Frame]:
        """`push`, and the whole frames `data` starts with when the direction is in step with
        nothing pending (cut by the rules' `split`, as `next` would give them: every byte of them
        came at `ts_ns`); the bytes after them stay for `next`."""
        b = self.buf
        split = self.rules.split
        if split is None or not self.idle():
            b.append(data, ts_ns)
            return []
        frames, at, in_step, prefix = [], 0, self._in_step, self.rules.prefix_len
        for size in split(data, self.max_frame):
            frames.append(Frame(b.offset + at, data[at + prefix : at + size], ts_ns, ts_ns, in_step))
            at += size
            in_step = True
        self.took(data, at, ts_ns)
        return frames

    def took(self, data: bytes, at: int, ts_ns: int) -> None:
        """With the framer idle: the caller took the first `at` bytes of `data` as whole frames
        (as `feed_whole` does, or the rules' own compiled reader of a chunk's frames); the rest
        is pushed for `next`."""
        b = self.buf
        self._short = None
        if at:
            self._in_step, self._found = True, False
            self.rules.reset()
            b.advance(at, ts_ns)
        if at < len(data):
            b.append(data[at:] if at else data, ts_ns)

    def idle(self) -> bool:
        """Nothing buffered, skipped or hunted for: `next` would give None (a conversation that
        took the frames of `feed_whole` need not ask it)."""
        return not (self.skip or self.resync or self._garbage is not None or len(self.buf))

    def next(self) -> Frame | Junk | None:
        """The next whole frame or junk record, or None when more bytes are needed."""
        if self._short is not None:
            if self._still_short():
                return None  # still short of the frame settled_sizes rules sized
            self._short = None
        b = self.buf
        while True:
            if self.skip:
                self._drop_skipped()
                if self.skip:
                    return None
            if self.resync:
                found, drop = self.hunt.run(b, self.rules.judge, self.rules.hunt_len, self._jump)
                if drop:
                    self._pass_over(drop)
                if found is None:
                    return None
                self.resync = False
                self._found = True
                junk = self._take_garbage()
                if junk is not None:
                    return junk
            n = len(b)
            if n < self.rules.head_len:
                return None
            size = self.rules.size(b)
            if size.__class__ is not int:
                self._not_a_frame(size)
                continue
            if size < 0:
                return None  # MORE
            self._found = False
            if size > self.max_frame:
                credible = self.rules.credible(b.data, size)
                if credible is None:
                    return None
                if not credible:
                    self._lose_step()
                    continue
                if self._held_whole(size):
                    if n < size:  # gathered whole first
                        if self.rules.settled_sizes:
                            self._short = (b.offset, size)
                        return None
                    at = self._holds_start(b, self.rules.cut_start, size)
                    if at:
                        why = f"frame of {size} bytes exceeds max_frame_bytes {self.max_frame}"
                        self._read_again(
                            NotAFrame(f"{why}, and frames start inside it: its size damaged", passed=at)
                        )
                        continue
                junk = self._oversize(size)
                if junk is not None:
                    return junk
                continue
            if n < size:
                if self.rules.settled_sizes:
                    self._short = (b.offset, size)
                return None
            off = b.offset
            data = b.peek(size, self.rules.prefix_len)
            frame = Frame(off, data, b.ts_at(off), b.ts_at(off + size - 1), self._in_step)
            b.consume(size)
            self._in_step = True
            return frame

    def reread_if_swallowed(self, frame: Frame, reason: str) -> bool:
        """Whether `frame`, the frame `next` gave last, found damaged by the conversation (its
        checksum, its body), swallowed the frames after it (a size field hit: `_swallowed`); if
        so its bytes go back, and from its start to the next credible frame start they are one
        malformed Junk with `reason`, the frames after it read as they are. A start is credible
        as for reread_if_cut (Rules.cut_start)."""
        at = self._swallowed(frame)
        if not at:
            return False
        self.buf.unconsume(self.rules.prefix(frame.data) + frame.data, frame.ts_first)
        self.rules.reset()  # no walk of the frame that was at the head before
        self._garbage, self._short = None, None
        self._read_again(NotAFrame(reason, passed=at))
        return True

    def reread_if_cut(self, why: str) -> bool:
        """At the connection's end or a capture gap (call it before `close` or `gap`): whether
        the frame at the head of the buffer, still short of its size, holds a credible frame
        start past its first byte (Rules.cut_start: a size field hit by damage, larger: the frame
        waits for bytes that never come, and the frames it holds would be lost with it in one
        truncated or gap record). If so, from its start to the first such frame start the bytes
        are one malformed Junk with `why` (and the bytes held, the size declared), and `next`
        gives the frames from there, the first out of step (Frame.in_step False: found, not
        confirmed by the frame before); call it again once `next` gives None (a second damaged
        frame)."""
        b = self.buf
        if self.skip or self.resync or len(b) <= max(self.rules.hunt_len, self.rules.head_len):
            return False
        at = self._holds_start(b, self.rules.cut_start)
        if not at:
            return False
        size = self.rules.size(b)
        self.rules.reset()  # no walk of the frame that was at the head
        declared = f" of the {size} its size declares" if size.__class__ is int and size > len(b) else ""
        self._short, self._found = None, False
        self._read_again(NotAFrame(f"{why} ({len(b)} bytes held{declared})", passed=at))
        return True

    def _read_again(self, verdict: NotAFrame) -> None:
        """The frame at the head of the buffer, its size damaged, becomes a Junk up to the
        frame start the verdict passes to (Junk.reread, with its first bytes)."""
        head = self.buf.peek(HEAD_KEPT)
        self._not_a_frame(verdict)
        if self._garbage is not None:
            self._garbage.reread, self._garbage.head = True, head

    def _swallowed(self, frame: Frame) -> int:
        """The index of the first credible frame start (Rules.cut_start) inside `frame` (its
        size prefix included), past its first byte; 0 for none."""
        whole = StreamBuffer()
        whole.append(self.rules.prefix(frame.data) + frame.data, frame.ts_first)
        return self._holds_start(whole, self.rules.cut_start)

    def _holds_start(self, buf: StreamBuffer, credible=None, end: int | None = None) -> int:
        """The index of the first credible frame start in `buf` (up to `end`) past its first byte
        (`credible`, by default Rules.judge confirming it), or 0 for none."""
        rules = self.rules
        if credible is None:
            judge = rules.judge
            credible = lambda data, i: judge(data, i) == CONFIRMED  # noqa: E731
        jumps = self._jump is not None
        n = len(buf) if end is None else min(end, len(buf))
        data, last, i = buf.data, n - rules.hunt_len, 1
        try:
            while i <= last:
                if jumps:
                    i = max(i, rules.jump(buf, i) or i)
                    if i > last:
                        return 0
                if credible(data, i):
                    return i
                i += 1
            return 0
        finally:
            data.release()

    def gap(self, nbytes: int, ts_ns: int) -> tuple[list[Junk], bool]:
        """`nbytes` never arrived (see the module docstring for the records a gap makes).
        Returns the junk known now (a resync's gap record comes from `next` or `close` once its
        end is known) and whether the gap fell inside an oversize frame being skipped."""
        b = self.buf
        over = self._held_oversize()
        out = [over] if over is not None else []
        self._short = None
        self._drop_skipped()  # bytes of the frame being skipped that next() has not dropped
        pending = len(b)
        if self.skip and not pending:
            if nbytes <= self.skip:
                self.skip -= nbytes
                b.skip(nbytes)
                return out, True
            b.skip(self.skip)  # the rest of the skipped frame, already counted by its Junk
            nbytes -= self.skip
            self.skip = 0
        if not self.resync and pending >= self.rules.head_len:
            size = self.rules.size(b)
            if size.__class__ is int and pending < size <= self.max_frame and pending + nbytes <= size:
                # the gap ends inside this frame: one record for the frame, and stay in step
                off = b.offset
                reason = f"{nbytes} bytes missing inside this frame"
                junk = Junk(off, size, GAP, reason, b.ts_at(off), ts_ns, b.peek(HEAD_KEPT), True)
                b.skip(nbytes)
                self.skip = size - pending - nbytes
                return [*out, junk], False
        g = self._garbage
        if g is not None and g.status == GAP:
            g.size += pending + nbytes  # a second gap while hunting: the same record grows
        else:
            closed = self._take_garbage()
            if closed is not None:
                out.append(closed)
            head = b.peek(HEAD_KEPT) if pending and not self.resync else b""
            if pending:
                reason = f"frame cut by a capture gap of {nbytes} bytes"
                ts_first = b.ts_at(b.offset)
            else:  # its first byte was never captured: its row starts with the packet before
                # (the frame the driver names for it, streams._Offsets.span), if any
                reason, ts_first = f"{nbytes} bytes missing (capture gap)", b.last_ts or ts_ns
            reason += "; resynchronised at the next frame start"
            self._garbage = Junk(b.offset, pending + nbytes, GAP, reason, ts_first, ts_ns, head)
        self._garbage.ts_last = ts_ns
        b.skip(nbytes)
        self._lose_step()
        return out, False

    def close(self) -> list[Junk]:
        """The connection ended: the bytes a resync was passing over (up to a credible frame
        start it held, if any), then an unfinished frame (with its bytes)."""
        b = self.buf
        over = self._held_oversize()
        out = [over] if over is not None else []
        self._short = None
        if self.resync and len(b):
            held = [off for off in self.hunt.held if off >= b.offset]
            self._pass_over(held[0] - b.offset if held else len(b))
        junk = self._take_garbage()
        if junk is not None:
            out.append(junk)
        if len(b):
            reason = "connection ended inside a frame"
            out.append(
                Junk(b.offset, len(b), TRUNCATED, reason, b.ts_at(b.offset), b.last_ts, b.peek(len(b)))
            )
            b.consume(len(b))
        return out

    def low_water(self) -> int:
        """The lowest stream offset a record still to come may start at: the first pending byte,
        or the start of what a resync is passing over."""
        g = self._garbage
        return self.buf.offset if g is None or g.offset > self.buf.offset else g.offset

    def drop_all(self) -> tuple[int, int, int]:
        """After a decoder error: forget what is buffered (and the bytes a resync had passed
        over) and resync. Returns (stream offset, bytes, last ts) of what was dropped."""
        b = self.buf
        self._short = None
        off, n = b.offset, len(b)
        if self._garbage is not None:
            off, n = self._garbage.offset, self._garbage.size + n
            self._garbage = None
        b.consume(len(b))
        self.skip = 0
        self._lose_step()
        return off, n, b.last_ts

    # -- internals ----------------------------------------------------------------------------

    def _drop_skipped(self) -> None:
        """Drop the buffered bytes of the frame being skipped."""
        n = min(self.skip, len(self.buf))
        self.buf.consume(n)
        self.skip -= n

    def _lose_step(self) -> None:
        self.resync = True
        self._in_step = False
        self.hunt.reset()

    def _not_a_frame(self, verdict: NotAFrame | None) -> None:
        """The head of the buffer is not a frame start: open the record the resync fills."""
        b = self.buf
        passed = 0
        if verdict is not None and self._garbage is None:
            ts = b.ts_at(b.offset)
            self._garbage = Junk(b.offset, 0, verdict.status, verdict.reason, ts, ts, info=verdict.info)
            passed = verdict.passed
        if self._found and not passed:
            passed = 1  # the hunt found this start and the rules reject it: never judge it again
        self._found = False
        self._pass_over(min(passed, len(b)))
        self._lose_step()

    def _held_whole(self, size: int) -> bool:
        """Is an oversize frame of `size`, credible, gathered whole before it is skipped?"""
        return size <= min(OVERSIZE_HELD, SKIP_LIMIT_FACTOR * self.max_frame)

    def _held_oversize(self) -> Junk | None:
        """At a gap or the close: the oversize frame being gathered whole at the head of the
        buffer, now skipped exactly as it would have been (its Junk; the bytes still to come
        are `skip`), or None."""
        b = self.buf
        if self.resync or self.skip or len(b) < self.rules.head_len:
            return None
        size = self.rules.size(b)
        if size.__class__ is not int or size <= max(self.max_frame, len(b)) or not self._held_whole(size):
            return None
        if not self.rules.credible(b.data, size):
            return None
        return self._oversize(size)

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
        self._lose_step()
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

    def _take_garbage(self) -> Junk | None:
        """The record of what the resync passed over, if it holds anything."""
        g, self._garbage = self._garbage, None
        if g is None or (g.size == 0 and g.status != GAP):
            return None
        if not g.reason:
            g.reason = f"skipped {g.size} bytes to resync"
        return g
