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
import zlib
from dataclasses import dataclass, field

import crc32c as _crc32c

from .. import base

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}

_V2_HEADER = struct.Struct(">qiiBIhiqqqhii")  # baseOffset .. recordCount, 61 bytes
V2_HEADER_SIZE = _V2_HEADER.size
_V0_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes (18 bytes)
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")


class RecordError(base.DecodeError):
    """A batch that cannot be read. `status` is a decode_status value."""


@dataclass(slots=True)
class Record:
    offset: int  # absolute offset (base offset + delta; for produce requests the client's value)
    delta: int  # position relative to the batch's base offset
    timestamp: int | None  # ms since the epoch
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    crc_ok: bool | None = None  # v0/v1 messages carry their own CRC


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
    records: list[Record] = field(default_factory=list)
    control_type: str | None = None  # ABORT | COMMIT for control batches
    coordinator_epoch: int | None = None
    error: str | None = None  # set when the batch could not be fully read
    status: str = "ok"  # decode_status of the batch

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
# varints


def _zigzag_varint(buf: bytes, pos: int) -> tuple[int, int]:
    if pos + 1 < len(buf) and buf[pos + 1] < 0x80:  # two bytes: the common case for lengths 64..8191
        result = (buf[pos] & 0x7F) | (buf[pos + 1] << 7)
        if buf[pos] & 0x80:
            return (result >> 1) ^ -(result & 1), pos + 2
    result = 0
    shift = 0
    n = len(buf)
    while True:
        if pos >= n:
            raise RecordError("varint runs past the end of the batch", "truncated")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise RecordError("varint longer than 10 bytes")


def _varbytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _zigzag_varint(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise RecordError(f"field of {n} bytes runs past the end of the batch", "truncated")
    return bytes(buf[pos:end]), end


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


def _unlz4(data: bytes, cap: int, legacy_ok: bool) -> bytes:
    import lz4.frame

    def run(buf: bytes) -> bytes:
        d = lz4.frame.LZ4FrameDecompressor()
        out = d.decompress(buf, max_length=cap + 1)
        _cap_check(len(out), cap)
        if not d.eof and not d.needs_input:
            _cap_check(cap + 1, cap)
        return out

    try:
        return run(data)
    except RecordError:
        raise
    except Exception as e:
        if not legacy_ok:
            raise RecordError(f"lz4: {e}", "decompression_failed") from None
        try:
            return run(_lz4_fix_header(data))
        except RecordError:
            raise
        except Exception as e2:
            raise RecordError(f"lz4: {e2}", "decompression_failed") from None


def _unzstd(data: bytes, cap: int) -> bytes:
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True) as r:
        out = r.read(cap + 1)
    _cap_check(len(out), cap)
    return out


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


def _read_records(body: bytes, count: int, base_offset: int, base_ts: int, recs: list) -> int:
    """Decode `count` v2 records from `body` into `recs`; returns the end position.

    The hot loop of the decoder: single-byte varints (values -64..63, nearly every length and
    delta) are decoded inline; longer ones go through `_zigzag_varint`."""
    zz = _zigzag_varint
    n = len(body)
    p = 0
    try:
        for _ in range(count):
            c = body[p]
            if c < 0x80:
                rlen = (c >> 1) ^ -(c & 1)
                p += 1
            else:
                rlen, p = zz(body, p)
            rend = p + rlen
            if rlen < 0 or rend > n:
                raise RecordError("record runs past the end of the batch", "truncated")
            p += 1  # record attributes (unused)
            c = body[p]
            if c < 0x80:
                ts_delta = (c >> 1) ^ -(c & 1)
                p += 1
            else:
                ts_delta, p = zz(body, p)
            c = body[p]
            if c < 0x80:
                off_delta = (c >> 1) ^ -(c & 1)
                p += 1
            else:
                off_delta, p = zz(body, p)
            c = body[p]
            if c < 0x80:
                klen = (c >> 1) ^ -(c & 1)
                p += 1
            else:
                klen, p = zz(body, p)
            if klen < 0:
                key = None
            else:
                key = body[p : p + klen]
                p += klen
            c = body[p]
            if c < 0x80:
                vlen = (c >> 1) ^ -(c & 1)
                p += 1
            else:
                vlen, p = zz(body, p)
            if vlen < 0:
                value = None
            else:
                value = body[p : p + vlen]
                p += vlen
            if p > rend:
                raise RecordError("record fields run past the record", "truncated")
            c = body[p]
            if c < 0x80:
                nh = (c >> 1) ^ -(c & 1)
                p += 1
            else:
                nh, p = zz(body, p)
            headers = []
            if nh:
                if nh < 0 or nh > rend - p:
                    raise RecordError(f"header count {nh} impossible")
                for _h in range(nh):
                    hk, p = _varbytes(body, p)
                    hv, p = _varbytes(body, p)
                    headers.append(((hk or b"").decode("utf-8", errors="backslashreplace"), hv))
            if p != rend:
                raise RecordError(f"record length {rlen} does not match its fields")
            recs.append(Record(base_offset + off_delta, off_delta, base_ts + ts_delta, key, value, headers))
    except IndexError:
        raise RecordError("record runs past the end of the batch", "truncated") from None
    return p


def _read_v2(buf: bytes, pos: int, size: int, cap: int, verify_crc: bool = True) -> Batch:
    (
        base_offset,
        _length,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_delta,
        base_ts,
        max_ts,
        pid,
        epoch,
        base_seq,
        count,
    ) = _V2_HEADER.unpack_from(buf, pos)
    end = pos + size
    codec_id = attributes & 0x07
    b = Batch(
        base_offset=base_offset,
        magic=magic,
        size=size,
        codec=CODECS.get(codec_id, f"codec{codec_id}"),
        attributes=attributes,
        timestamp_type="log_append" if attributes & 0x08 else "create",
        partition_leader_epoch=leader_epoch,
        last_offset_delta=last_delta,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=base_seq,
        transactional=bool(attributes & 0x10),
        control=bool(attributes & 0x20),
        record_count=count,
    )
    if verify_crc:
        b.crc_ok = _crc32c.crc32c(buf[pos + 21 : end]) == crc
        if not b.crc_ok:
            b.status, b.error = "checksum_mismatch", f"CRC-32C mismatch (stored {crc:#010x})"
    body = buf[pos + V2_HEADER_SIZE : end]
    try:
        if codec_id:
            body = decompress(codec_id, bytes(body), cap, magic)
        if count < 0 or count > len(body):
            raise RecordError(f"record count {count} impossible for {len(body)} bytes")
        body = bytes(body)
        recs = b.records
        p = _read_records(body, count, base_offset, base_ts, recs)
        if p != len(body):
            raise RecordError(f"{len(body) - p} bytes after the last record")
    except RecordError as e:
        if b.status == "ok":
            b.status = e.status
        b.error = (b.error + "; " if b.error else "") + str(e)
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


def _read_legacy(buf: bytes, pos: int, size: int, cap: int, depth: int = 0) -> Batch:
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
        b.status, b.error = "checksum_mismatch", f"CRC-32 mismatch (stored {crc:#010x})"
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
            b.records.append(Record(offset, 0, ts, key, value, crc_ok=b.crc_ok))
            b.record_count = 1
            return b
        if depth > 0:
            raise RecordError("nested compressed wrapper message")
        inner_raw = decompress(codec_id, value or b"", cap, magic)
        inner = read_record_set(inner_raw, cap, _depth=1)
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
        b.records = msgs
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


def read_record_set(data: bytes | memoryview, cap: int = 64 * 1024 * 1024, _depth: int = 0) -> RecordSet:
    """Every batch in a `records` field. An incomplete last batch is counted in `partial_tail`
    (brokers cut Fetch responses at a size limit); a batch that fails keeps its header info and
    `status`/`error`, and the walk continues with the next one."""
    buf = data
    n = len(buf)
    pos = 0
    rs = RecordSet([])
    while pos < n:
        if pos + 17 > n:
            rs.partial_tail = n - pos
            break
        length = _I32.unpack_from(buf, pos + 8)[0]
        magic = buf[pos + 16]
        size = 12 + length
        min_len = 49 if magic >= 2 else 14
        if length < min_len or magic > 2:
            rs.error = f"bad batch header at byte {pos}: length {length}, magic {magic}"
            rs.status = "malformed"
            break
        if pos + size > n:
            rs.partial_tail = n - pos
            break
        if magic == 2:
            b = _read_v2(buf, pos, size, cap)
        else:
            b = _read_legacy(buf, pos, size, cap, _depth)
        rs.batches.append(b)
        pos += size
    return rs
