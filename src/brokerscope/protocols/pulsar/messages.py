"""Pulsar message payloads: decompression, batch splitting, chunk reassembly.

A batch payload (MessageMetadata.num_messages_in_batch set) is, after decompression, a sequence of

    u32 single_metadata_size | SingleMessageMetadata | payload_size bytes of the message value

Chunked messages (MessageMetadata.uuid + chunk_id + num_chunks_from_msg) are one message cut into
several SEND / MESSAGE frames; the chunks' payloads concatenated are the (compressed) whole.
"""

from __future__ import annotations

import base64
import io
import struct
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import NamedTuple

import cramjam
import lz4.block
import pyarrow as pa
import zstandard
from google.protobuf.message import DecodeError

from ... import native
from .. import arrowcols, base
from .gen import pulsar_api_pb2 as pb

_batch = native.load(__package__, "_batch")  # compiled from _batch.c: a batch payload's entries

COMPRESSION_NAMES = {v.number: v.name for v in pb.CompressionType.DESCRIPTOR.values}
MAX_CHUNKED = 10_000  # chunked messages reassembled at once, per connection
_U32 = struct.Struct(">I")
_INT64_MAX = 2**63 - 1
NUMBERED_MIN = 8  # numbered strings written as an Arrow column from this many on
WALK_MIN = 8  # batches of this many messages on are read by the compiled walk, as Arrow columns


class PayloadError(base.DecodeError):
    """A payload that cannot be turned into messages; `status` is the decode_status."""

    def __init__(self, status: str, msg: str):
        super().__init__(msg, status)


def _zstd(data: bytes, cap: int) -> bytes:
    """ZSTD frames, streaming so a bomb stops at `cap` + 1 bytes."""
    parts: list[bytes] = []
    got = 0
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True) as r:
        while got <= cap:
            chunk = r.read(min(1 << 20, cap + 1 - got))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
    return b"".join(parts)


def _snappy_length(data: bytes) -> int:
    """The varint uncompressed length at the head of a raw snappy block."""
    shift = result = 0
    for b in data[:5]:
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result
        shift += 7
    return 1 << 62


def decompress(codec: int, data: bytes, uncompressed_size: int, cap: int) -> bytes:
    """Decompress a Pulsar payload, refusing output larger than `cap` bytes."""
    if codec == pb.NONE:
        return data
    if uncompressed_size > cap:
        raise PayloadError("decompression_failed", f"uncompressed size {uncompressed_size} over cap {cap}")
    try:
        if codec == pb.LZ4:
            # raw LZ4 block; the size comes from MessageMetadata.uncompressed_size
            out = lz4.block.decompress(data, uncompressed_size=uncompressed_size)
        elif codec == pb.ZLIB:
            d = zlib.decompressobj()
            out = d.decompress(data, cap + 1)
        elif codec == pb.ZSTD:
            out = _zstd(data, cap)
        elif codec == pb.SNAPPY:
            # raw snappy starts with the uncompressed length as a varint: check it before allocating
            if _snappy_length(data) > cap:
                raise PayloadError("decompression_failed", f"snappy output over cap {cap}")
            out = bytes(cramjam.snappy.decompress_raw(data))
        else:
            raise PayloadError("decompression_failed", f"unknown compression {codec}")
    except PayloadError:
        raise
    except Exception as e:  # every codec library has its own exception types
        raise PayloadError("decompression_failed", f"{COMPRESSION_NAMES.get(codec, codec)}: {e}") from e
    if len(out) > cap:
        raise PayloadError("decompression_failed", f"output over cap {cap}")
    if uncompressed_size and len(out) != uncompressed_size:
        raise PayloadError("decompression_failed", f"got {len(out)} bytes, metadata says {uncompressed_size}")
    return bytes(out)


@dataclass
class Single:
    """One message: from a batch entry or a whole non-batched payload."""

    batch_index: int  # -1 for a non-batched message
    value: bytes | None
    key: bytes | None
    key_raw: str | None  # partition_key as on the wire
    properties: list[tuple[str, str]]
    sequence: int | None
    event_time: int | None  # ms
    ordering_key: bytes | None
    null_value: bool = False
    extra: dict = field(default_factory=dict)


def key_bytes(partition_key: str | None, b64: bool) -> bytes | None:
    if partition_key is None:
        return None
    if isinstance(partition_key, bytes):  # not valid UTF-8 on the wire
        return partition_key
    if b64:
        try:
            return base64.b64decode(partition_key, validate=False)
        except (ValueError, TypeError):
            return partition_key.encode("utf-8", "surrogateescape")
    return partition_key.encode("utf-8", "surrogateescape")


def is_batch(md: pb.MessageMetadata) -> bool:
    return md.HasField("num_messages_in_batch")


def split_batch(md: pb.MessageMetadata, data: bytes) -> list[Single]:
    """Split an uncompressed batch payload into its messages."""
    count = md.num_messages_in_batch
    out: list[Single] = []
    pos = 0
    n = len(data)
    for i in range(count):
        if n - pos < 4:
            raise PayloadError("truncated", f"batch: message {i} of {count} missing")
        (size,) = _U32.unpack_from(data, pos)
        if size > n - pos - 4:
            raise PayloadError("malformed", f"batch: metadata size {size} of message {i} exceeds payload")
        smm = pb.SingleMessageMetadata()
        try:
            smm.MergeFromString(data[pos + 4 : pos + 4 + size])
        except (DecodeError, ValueError, RuntimeError) as e:
            raise PayloadError("malformed", f"batch: message {i} metadata: {e}") from e
        pos += 4 + size
        psize = smm.payload_size
        if psize < 0 or psize > n - pos:
            raise PayloadError("truncated", f"batch: message {i} payload of {psize} bytes exceeds payload")
        value = data[pos : pos + psize]
        pos += psize
        pk = smm.partition_key if smm.HasField("partition_key") else None
        extra = {}
        if smm.compacted_out:
            extra["compacted_out"] = True
        out.append(
            Single(
                batch_index=i,
                value=None if smm.null_value else value,
                key=key_bytes(pk, smm.partition_key_b64_encoded),
                key_raw=pk,
                properties=[(kv.key, kv.value) for kv in smm.properties],
                sequence=smm.sequence_id if smm.HasField("sequence_id") else md.sequence_id + i,
                event_time=smm.event_time if smm.HasField("event_time") else None,
                ordering_key=smm.ordering_key if smm.HasField("ordering_key") else None,
                null_value=smm.null_value,
                extra=extra,
            )
        )
    if pos != n:
        if not out:  # num_messages_in_batch 0 with a payload: nothing to attach the bytes to
            raise PayloadError("malformed", f"batch: {n} payload bytes, num_messages_in_batch {count}")
        # bytes after the last message: keep going, but say so
        out[-1].extra["trailing_bytes"] = n - pos
    return out


def single_of(md: pb.MessageMetadata, value: bytes) -> Single:
    """A non-batched message."""
    pk = md.partition_key if md.HasField("partition_key") else None
    return Single(
        batch_index=-1,
        value=None if md.null_value else value,
        key=key_bytes(pk, md.partition_key_b64_encoded),
        key_raw=pk,
        properties=[(kv.key, kv.value) for kv in md.properties],
        sequence=md.sequence_id,
        event_time=md.event_time if md.HasField("event_time") else None,
        ordering_key=md.ordering_key if md.HasField("ordering_key") else None,
        null_value=md.null_value,
    )


def expand(md: pb.MessageMetadata, payload: bytes, cap: int) -> list[Single]:
    """Messages of one (whole, not chunked, not encrypted) payload."""
    data = decompress(md.compression, payload, md.uncompressed_size, cap)
    if is_batch(md):
        return split_batch(md, data)
    return [single_of(md, data)]


class Columns(NamedTuple):
    """The messages of one payload as columns, one entry per message: Arrow arrays (the compiled
    walk's buffers) or lists (Single's fields: a few messages, for which Arrow arrays cost more
    than conform's conversion of a whole batch of rows) and, for the few messages that have
    fields of their own, those fields."""

    batch_index: range  # -1 for a message not in a batch, else 0 .. n - 1
    value: pa.Array | list[bytes | None]  # binary, null where null_value
    key: pa.Array | list[bytes | None]  # binary: the partition key (decoded where it is base64)
    headers: pa.Array | list[list[dict]]  # list<tables.HEADER>, from the properties
    sequence: pa.Array | list[int]  # int64 (ints where one is past int64)
    # per message (index) with fields of its own, those fields in the order its details write
    # them: event_time_ms (not 0), ordering_key, null_value, partition_key_b64 (the key's text
    # where it was base64 and decodes to other bytes), compacted_out, trailing_bytes
    own: dict[int, dict]

    def pylists(self) -> Columns:
        """The same columns as Python lists (to compare the two readers)."""
        return self._replace(
            **{
                f: getattr(self, f).to_pylist()
                for f in ("value", "key", "headers", "sequence")
                if isinstance(getattr(self, f), pa.Array)
            }
        )


def _own_fields(s: Single) -> dict:
    """A message's fields of its own (Columns.own) from its Single."""
    out: dict = {}
    if s.event_time:
        out["event_time_ms"] = s.event_time
    if s.ordering_key is not None:
        out["ordering_key"] = s.ordering_key
    if s.null_value:
        out["null_value"] = True
    if s.key_raw.__class__ is str and s.key is not None and s.key_raw.encode() != s.key:
        out["partition_key_b64"] = s.key_raw
    out.update(s.extra)
    return out


def columns(singles: list[Single]) -> Columns:
    """Messages as columns (lists)."""
    own = {i: f for i, s in enumerate(singles) if (f := _own_fields(s))}
    first = singles[0].batch_index if singles else 0
    return Columns(
        range(first, first + len(singles)),
        [s.value for s in singles],
        [s.key for s in singles],
        [
            [
                {
                    "key": k if k.__class__ is str else base.text(k),
                    "value": v.encode("utf-8", "surrogateescape") if v.__class__ is str else v,
                }
                for k, v in s.properties
            ]
            for s in singles
        ],
        [s.sequence for s in singles],
        own,
    )


def expand_columns(md: pb.MessageMetadata, payload: bytes, cap: int) -> Columns:
    """`expand`, as columns: a batch's entries read by the compiled walk (`walk`: from WALK_MIN
    messages on), or by split_batch where the walk does not take them as they are (it then says
    what is wrong)."""
    data = decompress(md.compression, payload, md.uncompressed_size, cap)
    if not is_batch(md):
        return columns([single_of(md, data)])
    if md.num_messages_in_batch >= WALK_MIN and (got := walk(md, data)) is not None:
        return got
    return columns(split_batch(md, data))


def walk(md: pb.MessageMetadata, data: bytes) -> Columns | None:
    """The messages of an uncompressed batch payload read by the compiled walk (_batch.c) as Arrow
    columns, or None where it leaves them to split_batch."""
    got = _batch.split(data, md.num_messages_in_batch, md.sequence_id)
    if got is None:
        return None
    n, value, key, hoffsets, hkeys, hvalues, sequence, own, end = got
    key = arrowcols.binary(key)
    own = own or {}
    b64 = [i for i, f in own.items() if "partition_key_b64" in f]
    if b64:  # base64 keys: the key column holds their decoded bytes, the details their text
        keys = key.to_pylist()
        for i in b64:
            raw = own[i]["partition_key_b64"]
            keys[i] = key_bytes(raw, True)
            if keys[i] == raw.encode():
                del own[i]["partition_key_b64"]
                if not own[i]:
                    del own[i]
        key = pa.array(keys, pa.binary())
    if end != len(data):  # bytes after the last message: keep going, but say so
        own.setdefault(n - 1, {})["trailing_bytes"] = len(data) - end
    return Columns(
        range(n),
        arrowcols.binary(value),
        key,
        arrowcols.headers(n, hoffsets, arrowcols.binary(hkeys, pa.string()), arrowcols.binary(hvalues)),
        sequence
        if sequence.__class__ is list
        else pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(sequence)]),
        own,
    )


def numbered(prefix: str, bis: range, suffix: str = "") -> pa.Array | list[str]:
    """`prefix + str(i) + suffix` for each i of `bis`: an Arrow string column written by the
    compiled module (no Python string per message), or a list where that costs more (fewer
    than NUMBERED_MIN strings: an Arrow array costs microseconds to make) or for text Arrow
    cannot take (lone surrogates: the tables say which value)."""
    if len(bis) < NUMBERED_MIN:
        return [f"{prefix}{i}{suffix}" for i in bis]
    try:
        head, tail = prefix.encode(), suffix.encode()
    except UnicodeEncodeError:
        return [f"{prefix}{i}{suffix}" for i in bis]
    return arrowcols.text(*_batch.numbered(head, bis.start, len(bis), tail))


def is_chunk(md: pb.MessageMetadata) -> bool:
    return md.HasField("uuid") and md.HasField("num_chunks_from_msg") and md.num_chunks_from_msg > 1


@dataclass
class ChunkedMessage:
    """The chunks of one chunked message seen so far."""

    uuid: str
    num_chunks: int
    total_size: int
    first_ts_ns: int
    chunks: dict[int, bytes] = field(default_factory=dict)
    message_ids: dict[int, str] = field(default_factory=dict)
    first_md: pb.MessageMetadata | None = None
    size: int = 0
    # frame numbers: the first chunk's first packet, the last chunk's last packet (in arrival order)
    first_frame: int | None = None
    last_frame: int | None = None

    def add(self, chunk_id: int, data: bytes, md: pb.MessageMetadata, message_id: str | None) -> None:
        if chunk_id in self.chunks:
            return  # a redelivered chunk
        self.chunks[chunk_id] = data
        self.size += len(data)
        if message_id is not None:
            self.message_ids[chunk_id] = message_id
        if chunk_id == 0 or self.first_md is None:
            self.first_md = md

    @property
    def complete(self) -> bool:
        return all(i in self.chunks for i in range(self.num_chunks))

    def assemble(self) -> bytes:
        return b"".join(self.chunks[i] for i in range(self.num_chunks))


class Reassembly:
    """The chunked messages of one connection being put together, by (direction, producer or
    consumer id, uuid); bounded by MAX_CHUNKED messages and by `cap` bytes of chunks held."""

    def __init__(self, cap: int):
        self.partial: OrderedDict[tuple, ChunkedMessage] = OrderedDict()
        self.size = 0  # bytes of chunks held
        self.cap = cap

    def add(
        self,
        key: tuple,
        md: pb.MessageMetadata,
        data: bytes,
        message_id: str | None,
        ts_ns: int,
        frames: dict | None = None,
    ) -> ChunkedMessage | None:
        """Collect one chunk: its message once every chunk is in, else None. `frames`: the
        chunk's first_frame / last_frame, if numbered."""
        cm = self.partial.get(key)
        if cm is None:
            cm = ChunkedMessage(md.uuid, md.num_chunks_from_msg, md.total_chunk_msg_size, ts_ns)
            cm.first_frame = (frames or {}).get("first_frame")
            self.partial[key] = cm
            while len(self.partial) > MAX_CHUNKED:
                self._drop_oldest()
        cm.last_frame = (frames or {}).get("last_frame")
        before = cm.size
        cm.add(md.chunk_id, data, md, message_id)
        self.size += cm.size - before
        if not cm.complete:
            # bound memory: give up on the oldest partial messages
            while self.partial and self.size > self.cap:
                self._drop_oldest()
            return None
        del self.partial[key]
        self.size -= cm.size
        return cm

    def _drop_oldest(self) -> None:
        _k, old = self.partial.popitem(last=False)
        self.size -= old.size

    def drain(self) -> list[tuple[tuple, ChunkedMessage]]:
        """The messages still missing chunks; none are left."""
        out = list(self.partial.items())
        self.partial.clear()
        return out
