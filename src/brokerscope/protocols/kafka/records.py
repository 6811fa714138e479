"""Kafka record batches, shared by the wire decoder and the segment reader.

Message format v0/v1 (message sets) and v2 (record batches), as documented in Kafka's protocol
guide ("Messages aka Records"). Both start with an int64 offset and an int32 length, and have the
magic byte at offset 16, which is how a reader tells them apart.

v2 record batch layout (offsets from the batch start):
   0 baseOffset int64          8 batchLength int32 (bytes after this field)
  12 partitionLeaderEpoch int32 16 magic int8 (2)   17 crc uint32 (CRC-32C of bytes 21..end)
  21 attributes int16 (bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control)
  23 lastOffsetDelta int32     27 baseTimestamp int64   35 maxTimestamp int64
  43 producerId int64          51 producerEpoch int16   53 baseSequence int32
  57 recordCount int32         61 records (possibly compressed)
record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
  key (varint length, -1 = null), value (same), header count varint, headers (key, value).
All varints are zigzag encoded.

v0/v1 message: offset int64, messageSize int32, crc uint32 (CRC-32 of magic..end), magic int8,
  attributes int8 (bits 0-2 codec), [v1: timestamp int64], key bytes (int32 length), value bytes.
A compressed message is a wrapper whose value is a compressed inner message set; inner offsets are
absolute in v0 and relative in v1 (the wrapper carries the offset of the last inner message).
"""

from __future__ import annotations

import gzip
import io
import struct
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from ... import native, tables
from .. import arrowcols, base

_records = native.load(__package__, "_records")  # compiled from _records.c: the record set walk

# the LZ4F_ functions python-lz4's module exports, by which the walk decodes a whole LZ4 frame
# itself (anything else about an LZ4 body still goes to _decompress_v2)
LZ4F_FUNCTIONS = (
    "LZ4F_createDecompressionContext",
    "LZ4F_freeDecompressionContext",
    "LZ4F_decompress",
    "LZ4F_isError",
    "LZ4F_resetDecompressionContext",
)


def lz4_in_walk(on: bool = True) -> bool:
    """Let the compiled walk decode LZ4 bodies with python-lz4's library (`on`), or hand each to
    _decompress_v2 (the reference); whether it now does."""
    addrs = None
    if on:
        try:
            from lz4.frame import _frame
        except ImportError:  # pragma: no cover - lz4 is a pinned dependency
            _frame = None
        addrs = [native.c_function(_frame, name) for name in LZ4F_FUNCTIONS] if _frame else [None]
    if not addrs or None in addrs:
        _records.lz4_functions(None)
        return False
    _records.lz4_functions(*addrs)
    return True


lz4_in_walk()

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}

_V0_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes (18 bytes)
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
INT64_MAX = 2**63 - 1


class RecordError(base.DecodeError):
    """A batch that cannot be read. `status` is a decode_status value."""


SEQUENCE_MAX = 2**31 - 1  # a producer's sequence numbers run 0 .. SEQUENCE_MAX, then from 0 again


def sequence_of(base_sequence: int, delta: int) -> int:
    """The sequence number of a batch's record at `delta`: baseSequence + delta, wrapped past
    SEQUENCE_MAX to 0 as the producer numbered it (Kafka's DefaultRecordBatch.incrementSequence);
    a delta out of 0 .. SEQUENCE_MAX is damage, its sum kept (a value the tables may refuse)."""
    s = base_sequence + delta
    return s - SEQUENCE_MAX - 1 if s > SEQUENCE_MAX and 0 <= delta <= SEQUENCE_MAX else s


@dataclass(slots=True)
class Record:
    offset: int  # absolute offset (base offset + delta; for produce requests the client's value)
    delta: int  # position relative to the batch's base offset
    timestamp: int | None  # ms since the epoch
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    crc_ok: bool | None = None  # v0/v1 messages carry their own CRC


def _py(col: pa.Array | list) -> list:
    return col.to_pylist() if isinstance(col, pa.Array) else list(col)


@dataclass(slots=True)
class Columns:
    """The records of a batch column-wise, as the tables take them: Arrow arrays, or Python lists
    where a value does not fit int64 (the tables turn those into nulls with an anomaly)."""

    offset: pa.Array | list  # int64, absolute
    delta: pa.Array | list  # int64, offset relative to the batch's base offset
    timestamp: pa.Array | list  # int64 ms since the epoch, null where the message has none
    ts_ns: pa.Array | list  # the same in ns, null where negative (no timestamp)
    sequence: pa.Array | list | None  # base sequence + delta (v2 batches of idempotent producers)
    key: pa.Array  # binary
    value: pa.Array  # binary
    value_size: pa.Array  # int64
    headers: pa.Array | None  # list<struct<key string, value binary>> (tables.HEADER); None: none
    crc_ok: pa.Array | None = None  # bool: v0/v1 messages carry their own CRC
    min_offset: int | None = None  # the smallest offset

    def __len__(self) -> int:
        return len(self.delta)

    @property
    def payload_bytes(self) -> int:
        return _data_size(self.key) + _data_size(self.value)

    @classmethod
    def of(cls, recs: list[Record]) -> Columns:
        """Columns of records read one by one (v0/v1 message sets)."""
        values = [r.value for r in recs]
        return cls(
            [r.offset for r in recs],
            [r.delta for r in recs],
            [r.timestamp for r in recs],
            [None if r.timestamp is None or r.timestamp < 0 else r.timestamp * 1_000_000 for r in recs],
            None,
            pa.array([r.key for r in recs], pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([None if v is None else len(v) for v in values], pa.int64()),
            pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in recs], pa.list_(tables.HEADER)),
            pa.array([r.crc_ok for r in recs], pa.bool_()),
            min((r.offset for r in recs), default=None),
        )

    def filter(self, keep: list[bool]) -> Columns:
        mask = pa.array(keep, pa.bool_())
        idx = [i for i, k in enumerate(keep) if k]

        def f(col):
            if col is None or isinstance(col, int):
                return col  # min_offset stays a bound
            return col.filter(mask) if isinstance(col, pa.Array) else [col[i] for i in idx]

        return Columns(*(f(getattr(self, k)) for k in Columns.__slots__))

    def records(self) -> list[Record]:
        n = len(self)
        crc = _py(self.crc_ok) if self.crc_ok is not None else [None] * n
        headers = _py(self.headers) if self.headers is not None else [[]] * n
        return [
            Record(o, d, t, k, v, [(h["key"], h["value"]) for h in hs], ok)
            for o, d, t, k, v, hs, ok in zip(
                _py(self.offset),
                _py(self.delta),
                _py(self.timestamp),
                _py(self.key),
                _py(self.value),
                headers,
                crc,
            )
        ]


def _data_size(col: pa.Array) -> int:
    """Bytes of a binary array's values."""
    offsets = col.buffers()[1]
    if not len(col) or offsets is None:
        return 0
    o = memoryview(offsets).cast("i")
    return o[col.offset + len(col)] - o[col.offset]


def decimal_strings(prefix: str, values: pa.Array | list, suffix: str = "") -> pa.Array | list[str]:
    """`prefix + str(v) + suffix` for each value: an Arrow string column written by the compiled
    module for an int64 array without nulls (no Python string per value), else a list."""
    if isinstance(values, pa.Array) and values.type == pa.int64() and not values.null_count:
        try:
            head, tail = prefix.encode(), suffix.encode()
        except UnicodeEncodeError:  # text with lone surrogates: the tables say which value
            return [f"{prefix}{v}{suffix}" for v in values.to_pylist()]
        n = len(values)
        offsets, data = _records.decimals(head, values.buffers()[1], values.offset, n, tail)
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return [f"{prefix}{v}{suffix}" for v in _py(values)]


def _int64(n: int, data: bytes, valid: bytes | None = None, nulls: int = 0) -> pa.Array:
    return arrowcols.fixed(pa.int64(), n, data, valid, nulls)


class Ints(tables.Parts):
    """int64 rows of walk buffers: parts (validity or None, int64 values or an int `first` for
    first, first + 1, ..., start, n)."""

    __slots__ = ()
    typ = pa.int64()

    @classmethod
    def gather(cls, cols: list[tables.Parts]) -> pa.Array:
        valid, values, nulls = _records.gather(0, [p for c in cols for p in c.parts])
        return _int64(sum(c.n for c in cols), values, valid, nulls)


class Binary(tables.Parts):
    """binary rows of walk buffers: parts (validity or None, int32 offsets, data, start, n)."""

    __slots__ = ()
    typ = pa.binary()

    @classmethod
    def gather(cls, cols: list[tables.Parts]) -> pa.Array | None:
        got = _records.gather(1, [p for c in cols for p in c.parts])
        return None if got is None else arrowcols.binary(got)


class Decimals(tables.Parts):
    """text rows `prefix + str(v) + suffix` of int64 walk buffers: parts (prefix bytes, suffix
    bytes, int64 values or an int `first`, start, n)."""

    __slots__ = ()
    typ = pa.string()

    @classmethod
    def gather(cls, cols: list[tables.Parts]) -> pa.Array:
        return arrowcols.text(*_records.gather(2, [p for c in cols for p in c.parts]))


_CHUNK_COLUMNS = (
    "offset",
    "delta",
    "timestamp",
    "ts_ns",
    "sequence",
    "key",
    "value",
    "value_size",
    "headers",
)


class Chunk:
    """The records of the v2 batches one `record_sets` call walked (or a part of them, where a
    binary column's 2 GiB ends it): each column an Arrow array over all its batches, built once,
    when first asked for (`col`)."""

    __slots__ = ("w", "n", "_arrays", "_cols", "header_offsets", "key_offsets", "value_offsets")

    def __init__(self, w: dict):
        self.w = w
        self.n = w["n"]
        self._arrays: dict[str, pa.Array] = {}
        self._cols: Columns | None = None
        self.header_offsets = memoryview(w["header_offsets"]).cast("i")
        self.key_offsets = memoryview(w["key"][1]).cast("i")
        self.value_offsets = memoryview(w["value"][1]).cast("i")

    def col(self, name: str) -> pa.Array:
        """Column `name` of Columns (_CHUNK_COLUMNS) over all the chunk's records."""
        a = self._arrays.get(name)
        if a is None:
            a = self._arrays[name] = self._build(name)
        return a

    def _build(self, name: str) -> pa.Array:
        w, n = self.w, self.n
        if name in ("offset", "delta", "timestamp"):
            return _int64(n, w[name])
        if name in ("ts_ns", "sequence"):  # null where negative (no time), no base sequence
            valid, data, nulls = w[name]
            return _int64(n, data, valid, nulls)
        if name in ("key", "value"):
            return arrowcols.binary(w[name])
        if name == "value_size":  # null where the value is
            value = self.col("value")
            bufs = [value.buffers()[0], pa.py_buffer(w["value_size"])]
            return pa.Array.from_buffers(pa.int64(), n, bufs, null_count=value.null_count)
        if w["header_keys_utf8"]:
            hk = arrowcols.binary(w["header_keys"], pa.string())
        else:  # header keys are text: bytes that are not UTF-8 escaped, as everywhere
            hk = pa.array([base.text(k) for k in arrowcols.binary(w["header_keys"]).to_pylist()], pa.string())
        # built from the walk's buffers as they are (its list offsets end at the entries it kept)
        return arrowcols.headers(n, w["header_offsets"], hk, arrowcols.binary(w["header_values"]))

    @property
    def cols(self) -> Columns:
        """Every column (a batch's own Columns are slices of these)."""
        if self._cols is None:
            self._cols = Columns(*(self.col(k) for k in _CHUNK_COLUMNS))
        return self._cols

    def has_headers(self, first: int, n: int) -> bool:
        return self.header_offsets[first + n] != self.header_offsets[first]

    def payload_bytes(self, first: int, n: int) -> int:
        """Bytes of the keys and values of records first .. first + n - 1."""
        k, v = self.key_offsets, self.value_offsets
        return k[first + n] - k[first] + v[first + n] - v[first]

    def columns(self, first: int, n: int, b: Batch, min_delta: int) -> Columns:
        """Records first .. first + n - 1 (those of batch `b`) as the batch's own Columns."""
        c = self.cols
        return Columns(
            c.offset.slice(first, n),
            c.delta.slice(first, n),
            c.timestamp.slice(first, n),
            c.ts_ns.slice(first, n),
            c.sequence.slice(first, n) if b.base_sequence >= 0 else None,
            c.key.slice(first, n),
            c.value.slice(first, n),
            c.value_size.slice(first, n),
            c.headers.slice(first, n) if self.has_headers(first, n) else None,
            min_offset=b.base_offset + min_delta if n else None,
        )

    def overflowed(self, first: int, n: int, b: Batch) -> Columns:
        """The Columns of a batch whose offsets, times or sequences pass int64: Python ints, as
        the tables expect them (they note the values that do not fit)."""
        c = self.columns(first, n, b, 0)
        deltas = c.delta.to_pylist()
        ts = [b.base_timestamp + d for d in memoryview(self.w["ts_delta"]).cast("q")[first : first + n]]
        c.offset = [b.base_offset + d for d in deltas]
        c.timestamp = ts
        c.ts_ns = [None if t < 0 else t * 1_000_000 for t in ts]
        c.sequence = None if b.base_sequence < 0 else [sequence_of(b.base_sequence, d) for d in deltas]
        c.min_offset = b.base_offset + min(deltas) if n else None
        return c


@dataclass
class Batch:
    """One v2 batch, or one top-level v0/v1 message (a wrapper when compressed)."""

    base_offset: int
    magic: int
    size: int  # bytes on the wire, offset and length fields included
    codec: str = "none"
    crc_ok: bool = True
    attributes: int = 0
    timestamp_type: str = "create"
    partition_leader_epoch: int | None = None
    last_offset_delta: int = 0
    base_timestamp: int | None = None
    max_timestamp: int | None = None
    producer_id: int | None = None
    producer_epoch: int | None = None
    base_sequence: int | None = None
    transactional: bool = False
    control: bool = False
    record_count: int = 0
    own: Columns | None = None  # its records as Columns of its own (`cols`)
    control_type: str | None = None  # ABORT | COMMIT for control batches
    coordinator_epoch: int | None = None
    error: str | None = None  # set when the batch could not be fully read
    status: str = "ok"  # decode_status of the batch
    # v2: where its records are, (Chunk, first row, rows, smallest offset delta); the tables
    # take the rows of consecutive batches from the chunk at once (rows.message_blocks)
    span: tuple[Chunk, int, int, int] | None = None

    @property
    def cols(self) -> Columns | None:
        """The records read (all of them, or those before an error); None when none could be."""
        if self.own is None and self.span is not None:
            chunk, first, n, min_delta = self.span
            self.own = chunk.columns(first, n, self, min_delta)
        return self.own

    @cols.setter
    def cols(self, value: Columns | None) -> None:
        self.own = value

    @property
    def payload_bytes(self) -> int:
        """Bytes of its records' keys and values."""
        if self.own is None and self.span is not None:
            return self.span[0].payload_bytes(self.span[1], self.span[2])
        return self.own.payload_bytes if self.own is not None else 0

    @property
    def records(self) -> list[Record]:
        """The records one by one (segment files, control batches); tables take `cols`."""
        return self.cols.records() if self.cols is not None else []

    def summary(self) -> dict:
        """The batch header for `details` (no record payloads)."""
        d = {
            "base_offset": self.base_offset,
            "magic": self.magic,
            "size": self.size,
            "codec": self.codec,
            "crc_ok": self.crc_ok,
            "record_count": self.record_count,
        }
        if self.magic >= 2:
            d.update(
                partition_leader_epoch=self.partition_leader_epoch,
                last_offset_delta=self.last_offset_delta,
                base_timestamp=self.base_timestamp,
                max_timestamp=self.max_timestamp,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence,
                transactional=self.transactional,
                control=self.control,
                timestamp_type=self.timestamp_type,
            )
        if self.control_type:
            d["control_type"] = self.control_type
            d["coordinator_epoch"] = self.coordinator_epoch
        if self.error:
            d["error"] = self.error
            d["status"] = self.status
        return d


@dataclass
class RecordSet:
    batches: list[Batch]
    partial_tail: int = 0  # bytes of an incomplete batch at the end (normal in Fetch responses)
    error: str | None = None  # framing problem that stopped the walk
    status: str = "ok"


# ---------------------------------------------------------------------------------------------
# codecs


def _xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32, needed only to fix the LZ4 frame header checksum (a few bytes)."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    m = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & m

    n = len(data)
    i = 0
    if n >= 16:
        v = [(seed + p1 + p2) & m, (seed + p2) & m, seed & m, (seed - p1) & m]
        while i + 16 <= n:
            for j in range(4):
                lane = int.from_bytes(data[i + 4 * j : i + 4 * j + 4], "little")
                v[j] = (rotl((v[j] + lane * p2) & m, 13) * p1) & m
            i += 16
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & m
    else:
        h = (seed + p5) & m
    h = (h + n) & m
    while i + 4 <= n:
        h = (rotl((h + int.from_bytes(data[i : i + 4], "little") * p3) & m, 17) * p4) & m
        i += 4
    while i < n:
        h = (rotl((h + data[i] * p5) & m, 11) * p1) & m
        i += 1
    h ^= h >> 15
    h = (h * p2) & m
    h ^= h >> 13
    h = (h * p3) & m
    h ^= h >> 16
    return h


def _lz4_fix_header(data: bytes) -> bytes:
    """Rewrite the frame descriptor checksum. Kafka clients before KIP-57 (message format v0/v1)
    computed it over the magic number too; the frame format computes it over FLG..(content size)."""
    if len(data) < 7 or data[:4] != b"\x04\x22\x4d\x18":
        return data
    flg = data[4]
    desc_end = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if len(data) <= desc_end:
        return data
    hc = (_xxh32(bytes(data[4:desc_end])) >> 8) & 0xFF
    return bytes(data[:desc_end]) + bytes([hc]) + bytes(data[desc_end + 1 :])


def _cap_check(n: int, cap: int) -> None:
    if n > cap:
        raise RecordError(
            f"decompressed size exceeds the cap of {cap} bytes (compression bomb?)", "decompression_failed"
        )


def _gunzip(data: bytes, cap: int) -> bytes:
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = d.decompress(data, cap + 1)
    _cap_check(len(out), cap)
    if not d.eof and d.unconsumed_tail:
        _cap_check(cap + 1, cap)
    return out


def _snappy_raw(block: bytes, cap: int) -> bytes:
    import cramjam

    n, _ = _uvarint(block, 0)
    _cap_check(n, cap)
    return bytes(cramjam.snappy.decompress_raw(block))


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """The uncompressed length that starts a raw snappy block (at most 32 bits)."""
    try:
        return base.read_uvarint(buf, pos, max_bits=35)
    except base.VarintError as e:
        raise RecordError(f"bad snappy length: {e}", "decompression_failed") from None


_XERIAL = b"\x82SNAPPY\x00"


def _unsnappy(data: bytes, cap: int) -> bytes:
    """Raw snappy, or the xerial framing Java clients write: 16-byte header then
    (int32 length, raw snappy block) chunks."""
    if data[:8] != _XERIAL:
        return _snappy_raw(data, cap)
    pos = 16
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise RecordError("xerial snappy chunk length truncated", "decompression_failed")
        n = _I32.unpack_from(data, pos)[0]
        pos += 4
        if n < 0 or pos + n > len(data):
            raise RecordError("xerial snappy chunk truncated", "decompression_failed")
        out += _snappy_raw(bytes(data[pos : pos + n]), cap - len(out))
        _cap_check(len(out), cap)
        pos += n
    return bytes(out)


def _lz4_frame(buf: bytes | memoryview, cap: int) -> bytes:
    """One LZ4 frame's output, at most `cap` bytes. python-lz4's documented low-level calls with
    a context kept per thread (reset for each frame), not its LZ4FrameDecompressor: that class
    copies a view into bytes and runs a dozen lines of Python per call (about 80 instructions
    per message of 44-record batches, docs/benchmarks.md), and a kept context keeps its buffers.
    A frame cut short gives what it holds, as the class does."""
    import lz4.frame

    ctx = getattr(_LZ4_CONTEXT, "ctx", None)
    if ctx is None:
        ctx = _LZ4_CONTEXT.ctx = lz4.frame.create_decompression_context()

    def run(limit: int) -> tuple[bytes, int, bool]:
        lz4.frame.reset_decompression_context(ctx)
        return lz4.frame.decompress_chunk(ctx, buf, max_length=limit)

    out, used, eof = _within_limits(len(buf), cap, run)
    _cap_check(len(out), cap)
    if not eof and used < len(buf):  # stopped at the limit with input left: more than cap
        _cap_check(cap + 1, cap)
    return out


_LZ4_CONTEXT = threading.local()


def _unlz4(data: bytes, cap: int, legacy_ok: bool) -> bytes:
    try:
        return _lz4_frame(data, cap)
    except RecordError:
        raise
    except Exception as e:
        if not legacy_ok:
            raise RecordError(f"lz4: {e}", "decompression_failed") from None
        try:
            return _lz4_frame(_lz4_fix_header(data), cap)
        except RecordError:
            raise
        except Exception as e2:
            raise RecordError(f"lz4: {e2}", "decompression_failed") from None


def _unzstd(data: bytes, cap: int) -> bytes:
    import zstandard

    def run(limit: int) -> tuple[bytes]:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True) as r:
            return (r.read(limit),)

    (out,) = _within_limits(len(data), cap, run)
    _cap_check(len(out), cap)
    return out


def _first_limit(n: int, cap: int) -> int:
    """The output a decompressor of `n` bytes is first allowed. python-lz4 and zstandard allocate
    what they are allowed up front: the whole cap (64 MiB) per batch cost an mmap, page faults and
    an munmap, 24 us of an LZ4 batch's 25 and 34 of a zstd one's 51. 256x covers LZ4's largest
    expansion and nearly every zstd batch (zstd's RLE blocks pass it); one that fills it is read
    again, allowed the cap. _records.c's LZ4 path starts from the same limit."""
    return min(cap + 1, 256 * n + 65536)


def _within_limits(n: int, cap: int, decompress: Callable[[int], tuple]) -> tuple:
    """`decompress(limit)` (its output first) of `n` bytes, allowed _first_limit, and once more
    allowed cap + 1 where the first try filled its limit: what the last try gave."""
    limit = _first_limit(n, cap)
    while True:
        got = decompress(limit)
        if len(got[0]) < limit or limit > cap:
            return got
        limit = cap + 1


_VIEW_CODECS = (1, 3, 4)  # gzip, lz4, zstd read a memoryview as they read bytes


def decompress(codec: int, data: bytes, cap: int, magic: int = 2) -> bytes:
    """Decompress a batch's records (v2) or a wrapper's value (v0/v1), at most `cap` bytes out."""
    try:
        if codec == 1:
            return _gunzip(data, cap)
        if codec == 2:
            return _unsnappy(data, cap)
        if codec == 3:
            return _unlz4(data, cap, legacy_ok=magic < 2)
        if codec == 4:
            return _unzstd(data, cap)
    except RecordError:
        raise
    except (zlib.error, gzip.BadGzipFile, EOFError, ValueError, OSError, RuntimeError) as e:
        raise RecordError(f"{CODECS.get(codec)}: {e}", "decompression_failed") from None
    except Exception as e:  # codec libraries raise their own error types
        raise RecordError(f"{CODECS.get(codec)}: {type(e).__name__}: {e}", "decompression_failed") from None
    raise RecordError(f"unknown compression codec {codec}", "decompression_failed")


# ---------------------------------------------------------------------------------------------
# v2


def _decompress_v2(codec: int, data: memoryview, cap: int) -> bytes | tuple[str, str]:
    """What _records.record_sets calls for a compressed v2 body (a view of the record set, valid
    during the call): its records' bytes, or (error, status)."""
    try:
        return decompress(codec, data if codec in _VIEW_CODECS else bytes(data), cap, 2)
    except RecordError as e:
        return str(e), e.status


def _crc_error(name: str, crc: int, sums: bool) -> str:
    """A batch's CRC mismatch as its error says it: the stored CRC, computed over the records
    (keys and values), only where `sums` (PayloadPolicy.checksums_kept)."""
    return f"{name} mismatch (stored {crc:#010x})" if sums else f"{name} mismatch"


def _v2_batch(t: tuple, chunks: list[Chunk], sums: bool = True) -> Batch:
    """A v2 batch from the walk's tuple (_records.c says what it holds); `sums`: _crc_error's."""
    crc, chunk, first, n, min_delta, overflow, error, status = t[:8]
    b = Batch(*t[8:])
    b.codec = CODECS.get(b.codec) or f"codec{b.codec}"
    crc_ok = b.crc_ok
    if not crc_ok:
        b.status, b.error = "checksum_mismatch", _crc_error("CRC-32C", crc, sums)
    if error is not None:
        if b.status == "ok":
            b.status = status
        b.error = (b.error + "; " if b.error else "") + error
    if n >= 0:
        if overflow:
            b.own = chunks[chunk].overflowed(first, n, b)
        else:
            b.span = (chunks[chunk], first, n, min_delta)
    if b.control and b.records:
        r = b.records[0]
        if r.key and len(r.key) >= 4:
            _v, ctype = struct.unpack_from(">hh", r.key, 0)
            b.control_type = CONTROL_TYPES.get(ctype, f"type{ctype}")
        if r.value and len(r.value) >= 6:
            b.coordinator_epoch = struct.unpack_from(">i", r.value, 2)[0]
    return b


# ---------------------------------------------------------------------------------------------
# v0 / v1


def _read_legacy(buf: bytes, pos: int, size: int, cap: int, depth: int = 0, sums: bool = True) -> Batch:
    offset, _msize, crc, magic, attributes = _V0_HEAD.unpack_from(buf, pos)
    end = pos + size
    codec_id = attributes & 0x07
    b = Batch(
        base_offset=offset,
        magic=magic,
        size=size,
        codec=CODECS.get(codec_id, f"codec{codec_id}"),
        attributes=attributes,
        timestamp_type="log_append" if attributes & 0x08 else "create",
    )
    b.crc_ok = (zlib.crc32(buf[pos + 16 : end]) & 0xFFFFFFFF) == crc
    if not b.crc_ok:
        b.status, b.error = "checksum_mismatch", _crc_error("CRC-32", crc, sums)
    try:
        p = pos + 18
        ts = None
        if magic == 1:
            if p + 8 > end:
                raise RecordError("message timestamp truncated", "truncated")
            ts = _I64.unpack_from(buf, p)[0]
            p += 8
        key, p = _bytes32(buf, p, end)
        value, p = _bytes32(buf, p, end)
        if p != end:
            raise RecordError(f"{end - p} bytes after the message value")
        if not codec_id:
            b.cols = Columns.of([Record(offset, 0, ts, key, value, crc_ok=b.crc_ok)])
            b.record_count = 1
            return b
        if depth > 0:
            raise RecordError("nested compressed wrapper message")
        inner_raw = decompress(codec_id, value or b"", cap, magic)
        inner = read_record_set(inner_raw, cap, _depth=1, sums=sums)
        msgs = [r for ib in inner.batches for r in ib.records]
        if inner.partial_tail or inner.error:
            raise RecordError(
                inner.error or "inner message set truncated", inner.status if inner.error else "truncated"
            )
        if magic == 1 and msgs:
            # relative inner offsets: the wrapper's offset is that of the last inner message
            last = msgs[-1].offset
            for r in msgs:
                r.delta = r.offset
                r.offset = offset - last + r.offset
                if b.timestamp_type == "log_append":
                    r.timestamp = ts
        else:
            for r in msgs:
                r.delta = r.offset - (msgs[0].offset if msgs else 0)
        for ib in inner.batches:
            if not ib.crc_ok:
                b.crc_ok = False
                b.status, b.error = "checksum_mismatch", "an inner message fails its CRC-32"
        b.cols = Columns.of(msgs)
        b.record_count = len(msgs)
        b.base_timestamp = ts
    except RecordError as e:
        if b.status == "ok":
            b.status = e.status
        b.error = (b.error + "; " if b.error else "") + str(e)
    return b


def _bytes32(buf: bytes, p: int, end: int) -> tuple[bytes | None, int]:
    if p + 4 > end:
        raise RecordError("length field truncated", "truncated")
    n = _I32.unpack_from(buf, p)[0]
    p += 4
    if n < 0:
        return None, p
    if p + n > end:
        raise RecordError(f"field of {n} bytes runs past the message", "truncated")
    return bytes(buf[p : p + n]), p + n


# ---------------------------------------------------------------------------------------------
# record sets


def read_record_set(
    data: bytes | memoryview, cap: int = 64 * 1024 * 1024, _depth: int = 0, sums: bool = True
) -> RecordSet:
    """Every batch in a `records` field. An incomplete last batch is counted in `partial_tail`
    (brokers cut Fetch responses at a size limit); a batch that fails keeps its header info and
    `status`/`error`, and the walk continues with the next one. `sums` false leaves a failing
    batch's stored CRC out of its error (PayloadPolicy.checksums_kept)."""
    return read_record_sets([data], cap, _depth, sums)[0]


def read_record_sets(
    datas: list, cap: int = 64 * 1024 * 1024, _depth: int = 0, sums: bool = True
) -> list[RecordSet]:
    """`read_record_set` of each of `datas` (a frame's partitions), walked by one compiled call:
    the records of all their v2 batches are rows of the same chunks of columns."""
    w = _records.record_sets(datas, cap, _decompress_v2)
    chunks = [Chunk(c) for c in w["chunks"]] if _has_v2(w) else []
    out = []
    for data, (tail, error, status, batches) in zip(datas, w["sets"]):
        rs = RecordSet([], tail, error, status or "ok")
        for t in batches:
            if len(t) == 3:  # v0/v1: (pos, size, magic)
                rs.batches.append(_read_legacy(data, t[0], t[1], cap, _depth, sums))
            else:
                rs.batches.append(_v2_batch(t, chunks, sums))
        out.append(rs)
    return out


def _has_v2(w: dict) -> bool:
    """Whether the walk read a v2 batch's records (even none): its batches need the chunks."""
    return any(len(t) > 3 and t[3] >= 0 for _tail, _e, _s, batches in w["sets"] for t in batches)
