"""Record batches (v2) and message sets (v0/v1): every codec, CRCs, control batches, partial
tails, compression bombs. Inputs are built by kafka-python's record builders (an independent
encoder) or by hand from the documented layout."""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import crc32c
import lz4.frame
import pytest
import zstandard

from brokerscope.protocols.kafka import records as R

from .kit import records

MSGS = [
    (b"key-1", b"value one " * 20, [("trace", b"abc"), ("trace", b"dup"), ("empty", None)]),
    (None, b"no key", []),
    (b"k3", None, [("h", b"")]),  # a tombstone
]


def _check(rs: R.RecordSet, codec: str, base: int = 0):
    assert rs.error is None and rs.partial_tail == 0
    recs = [r for b in rs.batches for r in b.records]
    assert [(r.key, r.value) for r in recs] == [(k, v) for k, v, _h in MSGS]
    assert [r.offset for r in recs] == [base, base + 1, base + 2]
    assert all(b.codec == codec and b.crc_ok and b.status == "ok" for b in rs.batches)
    return recs


@pytest.mark.parametrize(("codec_id", "codec"), [(0, "none"), (1, "gzip"), (3, "lz4"), (4, "zstd")])
def test_v2_codecs(codec_id, codec):
    rs = R.read_record_set(records(MSGS, 2, codec_id, offset=40))
    recs = _check(rs, codec, 40)
    assert recs[0].headers == [("trace", b"abc"), ("trace", b"dup"), ("empty", None)]
    assert recs[2].headers == [("h", b"")]
    assert [r.timestamp for r in recs] == [1_700_000_000_000, 1_700_000_000_001, 1_700_000_000_002]
    b = rs.batches[0]
    assert (b.magic, b.record_count, b.last_offset_delta) == (2, 3, recs[-1].delta)


def _recompress_v2(batch: bytes, codec_id: int, compress) -> bytes:
    """Re-encode an uncompressed v2 batch with another codec: records section compressed,
    attributes codec bits set, batchLength and CRC-32C recomputed (layout in records.py)."""
    head = bytearray(batch[:61])
    body = compress(bytes(batch[61:]))
    attrs = struct.unpack_from(">h", head, 21)[0] & ~7 | codec_id
    struct.pack_into(">h", head, 21, attrs)
    struct.pack_into(">i", head, 8, 61 - 12 + len(body))
    out = bytes(head) + body
    crc = crc32c.crc32c(out[21:])
    return out[:17] + struct.pack(">I", crc) + out[21:]


def _xerial(data: bytes, block: int = 64) -> bytes:
    """The xerial snappy framing Java clients write: magic, version 1, compatible 1, then
    (int32 length, raw snappy block) chunks."""
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for i in range(0, len(data), block):
        c = bytes(cramjam.snappy.compress_raw(data[i : i + block]))
        out += struct.pack(">i", len(c)) + c
    return out


@pytest.mark.parametrize("framing", ["raw", "xerial"])
def test_v2_snappy(framing):
    plain = records(MSGS, 2, 0, offset=7)
    comp = (lambda d: bytes(cramjam.snappy.compress_raw(d))) if framing == "raw" else _xerial
    rs = R.read_record_set(_recompress_v2(plain, 2, comp))
    _check(rs, "snappy", 7)


@pytest.mark.parametrize(
    ("magic", "codec_id", "codec"),
    [(0, 0, "none"), (0, 1, "gzip"), (0, 3, "lz4"), (1, 0, "none"), (1, 1, "gzip"), (1, 3, "lz4")],
)
def test_legacy_message_sets(magic, codec_id, codec):
    msgs = [(k, v, []) for k, v, _h in MSGS]
    data = bytearray(records(msgs, magic, codec_id, offset=100))
    if magic == 1 and codec_id:
        # brokers give the wrapper the absolute offset of its last inner message; inner offsets
        # are relative (kafka-python's producer leaves the wrapper at 0, as brokers reassign it)
        struct.pack_into(">q", data, 0, 102)
    rs = R.read_record_set(bytes(data))
    assert rs.error is None
    recs = [r for b in rs.batches for r in b.records]
    assert [(r.key, r.value) for r in recs] == [(k, v) for k, v, _h in msgs]
    assert [r.offset for r in recs] == [100, 101, 102]
    assert all(b.magic == magic and b.codec == codec and b.crc_ok for b in rs.batches)
    if magic == 1:
        assert recs[0].timestamp is not None


def test_lz4_legacy_header_checksum():
    """v0/v1 producers before KIP-57 computed the LZ4 frame header checksum over the magic too."""
    import kafka.codec

    data = kafka.codec.lz4_encode_old_kafka(b"hello kafka " * 30)
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(data)
    assert R.decompress(3, data, 1 << 20, magic=1) == b"hello kafka " * 30
    with pytest.raises(R.RecordError):  # only tolerated for message format v0/v1
        R.decompress(3, data, 1 << 20, magic=2)


def test_v2_producer_state_and_transactional():
    data = records(
        MSGS, 2, 0, offset=5, transactional=True, producer_id=77, producer_epoch=3, base_sequence=1000
    )
    b = R.read_record_set(data).batches[0]
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.transactional, b.control) == (
        77,
        3,
        1000,
        True,
        False,
    )
    assert b.summary()["producer_id"] == 77


def _control_batch(ctype: int, base_offset: int = 9, pid: int = 77) -> bytes:
    """A v2 control batch with one control record: key (version int16, type int16), value
    (version int16, coordinator epoch int32)."""
    key, value = struct.pack(">hh", 0, ctype), struct.pack(">hi", 0, 5)

    def zz(n):  # zigzag varint
        n = (n << 1) ^ (n >> 63)
        out = b""
        while True:
            if n < 0x80:
                return out + bytes([n])
            out += bytes([n & 0x7F | 0x80])
            n >>= 7

    rec = b"\x00" + zz(0) + zz(0) + zz(len(key)) + key + zz(len(value)) + value + zz(0)
    rec = zz(len(rec)) + rec
    attrs = 0x10 | 0x20  # transactional, control
    body = struct.pack(">hiqqqhii", attrs, 0, 1, 1, pid, 3, -1, 1) + rec
    crc = crc32c.crc32c(body)
    return struct.pack(">qiibI", base_offset, 4 + 1 + 4 + len(body), 0, 2, crc) + body


def test_control_batch():
    rs = R.read_record_set(_control_batch(1) + _control_batch(0, 10))
    assert [(b.control, b.control_type, b.coordinator_epoch, b.crc_ok) for b in rs.batches] == [
        (True, "COMMIT", 5, True),
        (True, "ABORT", 5, True),
    ]


def test_flipped_crc_bit_v2_keeps_records():
    data = bytearray(records(MSGS, 2, 0))
    data[70] ^= 0x01  # inside the first record's key or value
    b = R.read_record_set(bytes(data)).batches[0]
    assert b.crc_ok is False and b.status == "checksum_mismatch"
    assert len(b.records) == 3


def test_flipped_crc_bit_v0():
    data = bytearray(records([(b"k", b"v" * 10, [])], 0, 0))
    data[-1] ^= 0x80
    b = R.read_record_set(bytes(data)).batches[0]
    assert b.crc_ok is False and b.status == "checksum_mismatch"
    assert b.records[0].crc_ok is False


def test_partial_tail_is_not_an_error():
    one = records(MSGS, 2, 0)
    two = records(MSGS, 2, 0, offset=3)
    rs = R.read_record_set(one + two[:30])
    assert rs.error is None and rs.partial_tail == 30 and len(rs.batches) == 1
    rs = R.read_record_set(one + two[:5])  # fewer bytes than a batch header
    assert rs.error is None and rs.partial_tail == 5


def test_bad_batch_header():
    rs = R.read_record_set(b"\0" * 8 + struct.pack(">i", 3) + b"\0" * 20)
    assert rs.status == "malformed" and rs.batches == []


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd", "snappy"])
def test_compression_bomb_is_capped(codec):
    plain = records([(b"k", b"\0" * (4 << 20), [])], 2, 0)
    comp = {
        "gzip": (1, lambda d: gzip.compress(d, 9)),
        "lz4": (3, lz4.frame.compress),
        "zstd": (4, lambda d: zstandard.ZstdCompressor().compress(d)),
        "snappy": (2, lambda d: bytes(cramjam.snappy.compress_raw(d))),
    }[codec]
    bomb = _recompress_v2(plain, *comp)
    assert len(bomb) < 300 * 1024
    b = R.read_record_set(bomb, cap=1 << 20).batches[0]
    assert b.status == "decompression_failed" and "cap" in b.error
    assert b.records == []
    # the same batch under a large enough cap decodes
    assert R.read_record_set(bomb, cap=8 << 20).batches[0].records[0].value == b"\0" * (4 << 20)


def test_corrupt_compressed_data():
    plain = records(MSGS, 2, 0)
    bad = _recompress_v2(plain, 1, lambda d: b"\x1f\x8b" + zlib.compress(d)[2:])
    b = R.read_record_set(bad).batches[0]
    assert b.status == "decompression_failed" and b.crc_ok
