"""The decoder contract and the protocol registry.

A protocol package `brokerscope.protocols.<name>` exposes `PROTOCOL`, an instance of a `Protocol`
subclass. The stream driver (`brokerscope.streams`) gives each connection's reassembled bytes to a
`Conversation` and collects the rows it returns. Nothing here knows about Spark.

Rows are `(table, dict)` pairs; the dict's keys are column names from `brokerscope.tables`. The
driver fills the columns every table shares (capture_id, protocol, conn_id, endpoints, date), so a
decoder sets only `ts_ns` and its table's own columns. Timestamps are integer nanoseconds since
the epoch (`ts_ns`, `ts_end_ns`, `request_ts_ns`, ...), converted by the driver.

Rules every decoder follows:
- never raise out of `feed`/`gap`/`close` on bad bytes: a frame that does not decode becomes a
  `commands` row with `decode_status` and `decode_error`, and the decoder resyncs;
- framing says "need more" instead of failing; leftovers carry over to the next `feed`;
- memory is bounded: a frame larger than `ctx.max_frame_bytes` is recorded and skipped, never buffered.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib
import importlib.util
import json
import logging
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from .. import native

Row = tuple[str, dict]
C2S = "c2s"
# Side channel to the driver, never written as a table: {"topic_id", "topic"} pairs a decoder
# learned (Kafka Metadata), used to name topics that other connections refer to only by id.
TOPIC_NAMES = "_topic_names"
S2C = "s2c"

# decode_status values shared by all protocols (a protocol may add its own)
OK = "ok"
MALFORMED = "malformed"
TRUNCATED = "truncated"
CHECKSUM_MISMATCH = "checksum_mismatch"
UNSUPPORTED_VERSION = "unsupported_version"
REQUEST_MISSING = "request_missing"
OVERSIZE = "oversize"
GAP = "gap"
UNKNOWN_COMMAND = "unknown_command"
DECOMPRESSION_FAILED = "decompression_failed"
DECODER_ERROR = "decoder_error"  # the decoder (or a segment reader) raised: retired, the task goes on
INDEX_MISMATCH = "index_mismatch"  # a segment's companion index disagrees with its log (no log bytes lost)

# A frame beyond its size limit whose header is credible is skipped exactly, but only up to this
# many times the limit: a larger declared size is taken as damage, and the direction resyncs.
SKIP_LIMIT_FACTOR = 4
# The most responses a conversation holds for requests it may read later: a request whose size was
# damaged, larger, takes the requests after it in until it is read again (Framer.reread_if_*),
# and their responses come meanwhile (Framer.holds_frames says when).
MAX_HELD_ANSWERS = 1024


@dataclass(frozen=True)
class PayloadPolicy:
    """What happens to message keys and values before they reach a table.

    mode: keep (whole), truncate (first `truncate_bytes`), hash (sha256 hex in value_hash, value
    null), drop (null). `value_size` always holds the original size.
    """

    mode: str = "keep"
    truncate_bytes: int = 256
    apply_to_keys: bool = False

    def text(self) -> str:
        """The policy as `inputs.payload` records it: keep, truncate N, hash or drop, and
        ` keys` where keys go the same way."""
        what = f"truncate {self.truncate_bytes}" if self.mode == "truncate" else self.mode
        return what if self.keys_kept else f"{what} keys"

    def value(self, data: bytes | None) -> dict:
        if data is None:
            return {"value": None, "value_size": None}
        out: dict = {"value_size": len(data)}
        if self.mode == "keep":
            out["value"] = bytes(data)
        elif self.mode == "truncate":
            out["value"] = bytes(data[: self.truncate_bytes])
        elif self.mode == "hash":
            out["value"] = None
            out["value_hash"] = hashlib.sha256(data).hexdigest()
        elif self.mode == "drop":
            out["value"] = None
        else:
            raise ValueError(f"unknown payload policy {self.mode!r}")
        return out

    def value_columns(self, values: pa.Array, sizes: pa.Array) -> dict:
        """`value` for many messages at once (a binary array, and its sizes as int64): the
        columns `value` gives."""
        out: dict = {"value_size": sizes}
        if self.mode == "keep":
            out["value"] = values
        elif self.mode == "truncate":
            out["value"] = pc.binary_slice(values, 0, self.truncate_bytes)
        elif self.mode == "hash":
            out["value"] = pa.nulls(len(values), pa.binary())
            out["value_hash"] = [
                None if v is None else hashlib.sha256(v).hexdigest() for v in values.to_pylist()
            ]
        elif self.mode == "drop":
            out["value"] = pa.nulls(len(values), pa.binary())
        else:
            raise ValueError(f"unknown payload policy {self.mode!r}")
        return out

    def key_column(self, keys: pa.Array) -> pa.Array | list:
        """`key` for many messages at once (a binary array)."""
        if self.keys_kept:
            return keys
        if self.mode == "truncate":
            return pc.binary_slice(keys, 0, self.truncate_bytes)
        return [self.key(k) for k in keys.to_pylist()]

    def key_text(self, data: bytes | None) -> str | None:
        """A key where `details` shows one (Pulsar's partition and ordering keys): under
        apply_to_keys, its first truncate_bytes, its sha256 (hex, as of the key column's bytes)
        or None (drop: left out); else as it is. Text, for JSON."""
        if data is None:
            return None
        if not self.keys_kept:
            if self.mode == "hash":
                return hashlib.sha256(data).hexdigest()
            if self.mode != "truncate":
                return None
            data = data[: self.truncate_bytes]
        return data.decode("utf-8", "backslashreplace")

    @property
    def checksums_kept(self) -> bool:
        """Are checksums over message payloads kept (TubeMQ's checkSum, Iggy's message and batch
        checksums, a stored CRC in an error text)? Only where the payload is kept whole: the
        checksum of a short value (a PIN, a yes or no) confirms a guess of it."""
        return self.mode == "keep"

    @property
    def keys_kept(self) -> bool:
        """Are keys kept whole (the policy does not apply to them)?"""
        return not self.apply_to_keys or self.mode == "keep"

    def key(self, data: bytes | None) -> bytes | None:
        if data is None or self.keys_kept:
            return None if data is None else bytes(data)
        if self.mode == "truncate":
            return bytes(data[: self.truncate_bytes])
        if self.mode == "hash":
            return hashlib.sha256(data).hexdigest().encode()
        return None


@dataclass(frozen=True)
class Context:
    """Settings a decoder needs, taken from the run's configuration."""

    max_frame_bytes: int = 100 * 1024 * 1024
    max_decompressed_bytes: int = 64 * 1024 * 1024
    max_raw_bytes: int = 4096  # how much of an undecodable frame is kept in `raw`
    payload: PayloadPolicy = field(default_factory=PayloadPolicy)
    protocol_options: dict = field(default_factory=dict)  # [protocols.<name>] from the config
    schemas: dict = field(default_factory=dict)  # protocol -> FileDescriptorSet bytes (schema_file)

    def option(self, protocol: str, key: str, default):
        return self.protocol_options.get(protocol, {}).get(key, default)

    def raw(self, data: bytes | memoryview, *, typed: bool) -> bytes | None:
        """The bytes of an undecodable frame kept in `raw`.

        Captures cut exchanges anywhere, so one rule keeps credentials out of `raw`: bytes are
        kept only for a frame whose type was read from the wire (a request's header, a response
        paired with its request) and is not an authentication type; the caller says so with
        `typed`. Bytes of undetermined type (resync skips, the fragment a capture starts with, a
        truncated tail without a readable header, a response whose request is missing, an
        unknown command) keep none. Frames carry message payloads, so the payload policy then
        applies: `truncate` caps them at truncate_bytes, `hash` and `drop` keep none (the row's
        status, error and size remain)."""
        if not typed:
            return None
        mode = self.payload.mode
        if mode == "keep":
            return bytes(data[: self.max_raw_bytes])
        if mode == "truncate":
            return bytes(data[: min(self.max_raw_bytes, self.payload.truncate_bytes)])
        return None


@dataclass(frozen=True)
class ConnInfo:
    conn_id: str
    client_ip: str
    client_port: int
    server_ip: str
    server_port: int
    midstream: bool = False  # the capture has no handshake: the first bytes may be mid-frame
    # (direction, stream offset, size) -> (first, last) frame numbers of the packets holding
    # those bytes, from the driver (streams.py); None where nothing numbers frames (unit tests)
    frames: Callable[[str, int, int], tuple[int | None, int | None]] | None = field(
        default=None, compare=False, repr=False
    )
    # what `frames` looks in, for compiled callers: the driver's index of each direction's
    # packets (streams._Frames: `starts`, `frames` arrays and `floor`), (c2s, s2c); None: ask `frames`
    frame_index: tuple | None = field(default=None, compare=False, repr=False)

    def frame_range(self, direction: str, offset: int | None, size: int | None) -> dict:
        """The `first_frame` and `last_frame` columns of a row carried by the frame of
        `direction` at stream `offset` of `size` bytes (a messages row: its command's frame),
        asked while that frame is decoded; empty when frames are not numbered."""
        if self.frames is None or offset is None:
            return {}
        first, last = self.frames(direction, offset, size or 0)
        return {"first_frame": first, "last_frame": last}


class Conversation:
    """One TCP connection's decoder. Subclasses implement `feed`, and usually `gap` and `close`."""

    def __init__(self, conn: ConnInfo, ctx: Context):
        self.conn = conn
        self.ctx = ctx

    def feed(self, direction: str, data: bytes, ts_ns: int) -> Iterable[Row]:
        """Bytes that follow, in order, what was fed before in `direction`; `ts_ns` is the capture
        time of the packet that carried them."""
        raise NotImplementedError

    def feed_run(self, direction: str, chunks: list[bytes], tss: list[int]) -> Iterable[Row]:
        """`feed` of each chunk in turn, with its packet's time: the payloads of a run of packets
        of one direction (the driver's lane). A conversation whose rows do not depend on where
        packets begin may take them at once (the same rows)."""
        out: list[Row] = []
        for data, ts in zip(chunks, tss):
            rows = self.feed(direction, data, ts)
            if rows:
                out.extend(rows)
        return out

    def gap(self, direction: str, nbytes: int, ts_ns: int) -> Iterable[Row]:
        """`nbytes` bytes of `direction` were never captured. Drop any partial frame and resync."""
        return ()

    def close(self) -> Iterable[Row]:
        """The connection ended (or the capture did): flush partial frames and unanswered requests."""
        return ()

    def low_water(self, direction: str) -> int | None:
        """The lowest stream offset of `direction` that a row still to come may name (its
        stream_offset): the driver forgets which packet brought the bytes below it. The framers'
        pending bytes by default (`self.framer`, one per direction, as every protocol here has);
        a conversation that holds frames for later rows lowers it; None: unknown, forget nothing."""
        framer = getattr(self, "framer", None)
        return framer[direction].low_water() if framer else None


class Protocol:
    """A protocol: its decoder and everything else the tool needs to know about it, declared in
    one place (the package's `PROTOCOL`) and registered by `name`."""

    name: str = ""
    default_ports: tuple[int, ...] = ()  # the `[ports]` default: connections on them are this protocol
    options: dict = {}  # defaults of `[protocols.<name>]` in the config
    schema_option: str | None = None  # the `[protocols.<name>]` key naming a user protobuf schema file
    segments: str | None = None  # module of the package that reads the protocol's segment files
    # module of the package with its journeys identity rule (`steps`: brokerscope/journeys.py)
    journeys: str | None = None

    def segment_reader(self):
        """The segment reader module (`matches`, `plan`, `read`), or None."""
        if not self.segments:
            return None
        return importlib.import_module(f"{type(self).__module__}.{self.segments}")

    def journey_rule(self):
        """The journeys identity rule module (`steps`), or None."""
        if not self.journeys:
            return None
        return importlib.import_module(f"{type(self).__module__}.{self.journeys}")

    def sniff(self, client_head: bytes, server_head: bytes) -> float:
        """Confidence 0..1 that this is the protocol, from the first bytes each side sent.
        Either head may be empty (one direction not captured or silent)."""
        return 0.0

    def conversation(self, conn: ConnInfo, ctx: Context) -> Conversation:
        raise NotImplementedError


GONE_CHUNKS = 256  # chunks consumed whose times StreamBuffer.unconsume can give back


class StreamBuffer:
    """The unconsumed bytes of one direction, with the capture time of every byte.

    `append` adds a chunk; `data` is a view of the pending bytes starting at stream offset
    `offset`; `consume(n)` drops the first n. `ts_at(off)` is the time of the packet that carried
    stream offset `off`, so a frame's first-byte and last-byte times are both available.
    """

    __slots__ = ("_buf", "_start", "offset", "_chunks", "last_ts", "_gone")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._start = 0
        self.offset = 0  # stream offset of the first pending byte
        self._chunks: deque[tuple[int, int]] = deque()  # (stream offset of chunk start, ts_ns)
        self.last_ts = 0
        self._gone: deque[tuple[int, int]] = deque(maxlen=GONE_CHUNKS)  # chunks consumed, last ones

    def __len__(self) -> int:
        return len(self._buf) - self._start

    @property
    def end(self) -> int:
        """Stream offset one past the last byte received."""
        return self.offset + len(self)

    def append(self, data: bytes | memoryview, ts_ns: int) -> None:
        if not data:
            return
        if not self._chunks or self._chunks[-1][1] != ts_ns:
            self._chunks.append((self.end, ts_ns))
        try:
            self._buf += data
        except BufferError:  # a caller still holds a view from `data`: grow a new buffer instead
            self._buf = self._buf[self._start :] + data
            self._start = 0
        self.last_ts = ts_ns

    def extend(self, chunks: list[bytes], tss: list[int]) -> None:
        """`append` of each of `chunks` in turn, with its time, the bytes joined once."""
        ch, end = self._chunks, self.end
        last = ch[-1][1] if ch else None
        last_ts = None
        for data, ts in zip(chunks, tss):
            if not data:
                continue
            if ts != last:
                ch.append((end, ts))
                last = ts
            end += len(data)
            last_ts = ts
        if last_ts is None:
            return
        joined = b"".join(chunks)
        try:
            self._buf += joined
        except BufferError:  # a caller still holds a view: grow a new buffer instead (append)
            self._buf = self._buf[self._start :] + joined
            self._start = 0
        self.last_ts = last_ts

    @property
    def data(self) -> memoryview:
        return memoryview(self._buf)[self._start :]

    def peek(self, n: int, start: int = 0) -> bytes:
        """A copy of the pending bytes [start, n)."""
        return bytes(self._buf[self._start + start : self._start + n])

    def unpack(self, st: struct.Struct, i: int = 0) -> tuple:
        """`st` unpacked from the pending bytes at `i` (no view, no copy)."""
        return st.unpack_from(self._buf, self._start + i)

    def find(self, sub: bytes, start: int = 0) -> int:
        """Index (from the first pending byte) of `sub` at or after `start`, or -1; no copy."""
        i = self._buf.find(sub, self._start + start)
        return -1 if i < 0 else i - self._start

    def consume(self, n: int) -> None:
        n = min(n, len(self))
        self._start += n
        self.offset += n
        # keep the chunk that covers the new first byte
        while len(self._chunks) > 1 and self._chunks[1][0] <= self.offset:
            self._gone.append(self._chunks.popleft())
        if self._start > 65536 and self._start * 2 > len(self._buf):
            try:
                del self._buf[: self._start]
            except BufferError:  # a caller still holds a view from `data`: compact next time
                return
            self._start = 0

    def unconsume(self, data: bytes, ts_ns: int) -> None:
        """Put back the bytes just consumed, `data` (a frame found damaged after it was taken:
        Framer.reread_if_swallowed), with the times they came at (`ts_ns` where those are forgotten)."""
        n = len(data)
        self.offset -= n
        if self._start >= n and self._buf[self._start - n : self._start] == data:
            self._start -= n
        else:  # compacted away, or taken whole without being buffered (Framer.feed_whole)
            self._buf = bytearray(data) + self._buf[self._start :]
            self._start = 0
        ch = self._chunks
        while self._gone and (not ch or ch[0][0] > self.offset):
            ch.appendleft(self._gone.pop())
        if not ch or ch[0][0] > self.offset:
            ch.appendleft((self.offset, ts_ns))

    def advance(self, nbytes: int, ts_ns: int) -> None:
        """With nothing pending: `nbytes` bytes that came at `ts_ns` were taken without being
        appended (Framer.feed_whole's whole frames)."""
        self.offset += nbytes
        self.last_ts = ts_ns

    def skip(self, nbytes: int) -> None:
        """Advance the stream offset past bytes that never arrived (a gap); pending bytes are dropped."""
        self.consume(len(self))
        self.offset += nbytes
        self._chunks.clear()

    def ts_at(self, stream_offset: int) -> int:
        """Capture time of the byte at `stream_offset` (must be pending or the last one consumed)."""
        ts = self.last_ts
        for off, t in reversed(self._chunks):
            ts = t
            if off <= stream_offset:
                break
        return ts


# verdicts of a resync candidate (FrameHunt)
NOT_A_FRAME, TENTATIVE, CONFIRMED = 0, 1, 2


class FrameHunt:
    """The search for a frame start in one direction after damage (a gap, garbage, a false size).

    `judge(data, i)` rates the bytes at `i`: CONFIRMED when the frame is credible and checked as
    far as the buffer allows (its body decodes and the next frame is plausible, or it continues
    the connection's sequence), TENTATIVE when its header is credible but its frame is not all
    buffered yet, NOT_A_FRAME otherwise. The first confirmed candidate wins. Tentative ones are
    held, with everything after them, until their frames are all here and judged again, or a
    confirmed candidate shows them false: a size read out of payload bytes cannot swallow the
    real frames that follow. Scanning resumes where it stopped, so a large frame arriving in
    pieces is not rescanned from its start.
    """

    MAX_HELD = 64  # tentative candidates held at once; beyond, new ones are passed over

    __slots__ = ("held", "scanned")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.held: list[int] = []  # stream offsets of tentative candidates, in order
        self.scanned: int | None = None  # stream offset up to which every start was judged

    def run(
        self,
        buf: StreamBuffer,
        judge: Callable[[memoryview, int], int],
        min_len: int,
        jump: Callable[[memoryview, int], int] | None = None,
    ) -> tuple[int | None, int]:
        """(index of the frame start found or None, bytes that can be dropped as garbage).

        `min_len` is the fewest bytes a judgement needs; `jump(data, i)` may name the next index
        worth judging (at least i)."""
        data = buf.data
        n, base_off = len(data), buf.offset
        held = []
        for off in self.held:
            if off < base_off:
                continue
            v = judge(data, off - base_off)
            if v == CONFIRMED:
                self.reset()
                return off - base_off, off - base_off
            if v == TENTATIVE:
                held.append(off)
        self.held = held
        i = 0 if self.scanned is None else max(0, self.scanned - base_off)
        last = n - min_len  # the last index that can be judged now
        while i <= last:
            if jump is not None:
                i = min(jump(data, i), last + 1)
                if i > last:
                    break
            v = judge(data, i)
            if v == CONFIRMED:
                self.reset()
                return i, i
            if v == TENTATIVE and len(held) < self.MAX_HELD:
                held.append(base_off + i)
            i += 1
        self.scanned = base_off + i
        return None, (held[0] - base_off if held else i)


# ---------------------------------------------------------------------------------------------
# wire helpers


class DecodeError(Exception):
    """Bytes that do not decode as the protocol says: the one error every decoder raises (or
    subclasses). `status` is the decode_status the frame gets."""

    def __init__(self, msg: str = "", status: str = MALFORMED):
        super().__init__(msg)
        self.status = status


class Truncated(DecodeError):
    """The data ended inside a field."""

    def __init__(self, msg: str = "message ends inside a field"):
        super().__init__(msg, TRUNCATED)


class VarintError(DecodeError, ValueError):
    """A varint cut short by the end of the data (`truncated`) or longer than allowed."""

    def __init__(self, msg: str, truncated: bool):
        super().__init__(msg, TRUNCATED if truncated else MALFORMED)
        self.truncated = truncated


def read_uvarint(buf: bytes | memoryview, pos: int, max_bits: int = 64) -> tuple[int, int]:
    """(value, next position) of the unsigned base-128 (LEB128) varint at `pos`, as Kafka's
    compact fields and protobuf encode them: 7 bits per byte, low group first, high bit = more."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise VarintError("varint runs past the end of the data", True)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= max_bits:
            raise VarintError(f"varint longer than {max_bits} bits", False)


# ---------------------------------------------------------------------------------------------
# details JSON


def _jsonable(o):
    if isinstance(o, bytes | bytearray | memoryview):
        b = bytes(o)
        try:
            s = b.decode("utf-8")
            if s.isprintable():
                return s
        except UnicodeDecodeError:
            pass
        return {"base64": base64.b64encode(b).decode("ascii")}
    if isinstance(o, set | frozenset | tuple):
        return list(o)
    if hasattr(o, "isoformat"):
        return o.isoformat()
    return repr(o)


_ENCODER = json.JSONEncoder(default=_jsonable, separators=(",", ":"), ensure_ascii=False)
# what _ENCODER.encode runs, made once instead of per call (the C encoder where it is built;
# no check for circular values: decoded fields hold none)
_ITERENCODE = (
    json.encoder.c_make_encoder(
        None, _jsonable, json.encoder.encode_basestring, None, ":", ",", False, False, True
    )
    if json.encoder.c_make_encoder is not None
    else None
)


_details = native.load(__package__, "_details")  # compiled from _details.c: to_json's writer


def to_json(obj) -> str:
    """Serialise decoded fields for the `details` column (bytes become text or base64): the
    compiled writer's text, equal to to_json_py's (json's encoder), which still writes what the
    writer leaves to it (a lone surrogate, a key json refuses)."""
    if obj.__class__ is not str:
        text = _details.dumps(obj, _jsonable)
        if text is not None:
            return text
    return to_json_py(obj)


def to_json_py(obj) -> str:
    """to_json by json's encoder: the reference the compiled writer is tested against."""
    if _ITERENCODE is None or obj.__class__ is str:
        return _ENCODER.encode(obj)
    return "".join(_ITERENCODE(obj, 0))


_JSON_STR = json.encoder.encode_basestring  # the C escaper to_json uses (non-ASCII kept)


def json_value(v) -> str:
    """One value as to_json writes it, cheaper for the common scalars (a str, int, bool or None:
    no encoder call), for details built piece by piece once per message."""
    c = v.__class__
    if c is str:
        return _JSON_STR(v)
    if c is int:
        return int.__repr__(v)
    if c is bool:
        return "true" if v else "false"
    if v is None:
        return "null"
    return _ENCODER.encode(v)


def text(v):
    """A protocol string as text: bytes that are not UTF-8 (python's protobuf hands a proto2 string
    over as bytes then) keep their bad bytes escaped (`\\xe9`), so the wire bytes can be read
    back; anything else is returned as it is."""
    return v.decode("utf-8", "backslashreplace") if isinstance(v, bytes | bytearray) else v


def redacted(data: bytes | str | None) -> str | None:
    """What a secret becomes in a table: its size only."""
    if data is None:
        return None
    return f"<redacted {len(data)} bytes>"


# ---------------------------------------------------------------------------------------------
# registry

# Every package under protocols/ that exposes PROTOCOL is a protocol; these come first, in this
# order (the order sniffers are asked in), any other package after them by name.
BUILTIN = ("kafka", "pulsar", "iggy", "tubemq")
_registry: dict[str, Protocol] = {}
load_errors: dict[str, str] = {}


def _package_names() -> list[str]:
    from .. import protocols as pkg

    return list(_packages_in(tuple(pkg.__path__)))


@functools.lru_cache(maxsize=8)
def _packages_in(path: tuple[str, ...]) -> tuple[str, ...]:
    """The protocol packages on `path`, built-in ones first (listed once per process: every
    decode task asks)."""
    import pkgutil

    found = sorted(m.name for m in pkgutil.iter_modules(list(path)) if m.ispkg)
    return tuple([n for n in BUILTIN if n in found] + [n for n in found if n not in BUILTIN])


def register(proto: Protocol) -> Protocol:
    _registry[proto.name] = proto
    return proto


def _load_builtins() -> None:
    for name in _package_names():
        if name in _registry or name in load_errors:
            continue
        modname = f"brokerscope.protocols.{name}"
        try:
            register(importlib.import_module(modname).PROTOCOL)
        except Exception as e:  # one broken decoder must not stop the others
            load_errors[name] = f"{type(e).__name__}: {e}"
            logging.getLogger(__name__).error("protocol %s not loaded: %s", name, load_errors[name])


def get(name: str) -> Protocol:
    _load_builtins()
    return _registry[name]


def known_names() -> list[str]:
    """Names of the protocol packages and of any registered since (without importing them)."""
    return list(dict.fromkeys([*_package_names(), *_registry]))


def protocols() -> dict[str, Protocol]:
    """Every registered protocol by name."""
    _load_builtins()
    return dict(_registry)


def iter_rows(*groups: Iterable[Row] | None) -> Iterator[Row]:
    for g in groups:
        if g:
            yield from g
