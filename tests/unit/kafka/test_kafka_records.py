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


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
@pytest.mark.parametrize("value", [b"\0" * (4 << 20), bytes(range(256)) * 64])
def test_a_batch_of_exactly_the_cap_decodes_whatever_its_ratio(codec, value):
    """LZ4 and zstd are first allowed 256x their input (records._first_limit), then the cap: a
    records section of exactly `cap` bytes decodes, one byte fewer allowed is a bomb, for data
    that compresses past 256x (zeros: zstd about 15,000x) and data that barely does."""
    plain = records([(b"k", value, [])], 2, 0)
    section = len(plain) - 61
    comp = {"lz4": (3, lz4.frame.compress), "zstd": (4, lambda d: zstandard.ZstdCompressor().compress(d))}
    batch = _recompress_v2(plain, *comp[codec])
    assert R.read_record_set(batch, cap=section).batches[0].records[0].value == value
    b = R.read_record_set(batch, cap=section - 1).batches[0]
    assert b.status == "decompression_failed" and "cap" in b.error


def test_corrupt_compressed_data():
    plain = records(MSGS, 2, 0)
    bad = _recompress_v2(plain, 1, lambda d: b"\x1f\x8b" + zlib.compress(d)[2:])
    b = R.read_record_set(bad).batches[0]
    assert b.status == "decompression_failed" and b.crc_ok


# -- the compiled record walk (_records.c) on hand-built bodies -----------------------------------


def _zz(v: int) -> bytes:
    """A zigzag varint (64-bit)."""
    u = (v << 1) ^ (v >> 63)
    u &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = u & 0x7F
        u >>= 7
        if u:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(b: bytes | None) -> bytes:
    return _zz(-1) if b is None else _zz(len(b)) + b


def _record(key, value, headers=(), ts_delta=0, off_delta=0, length_fix=0) -> bytes:
    body = b"\0" + _zz(ts_delta) + _zz(off_delta) + _field(key) + _field(value) + _zz(len(headers))
    for hk, hv in headers:
        body += _field(hk) + _field(hv)
    return _zz(len(body) + length_fix) + body


def _v2(body: bytes, count: int, base_offset: int = 100, base_ts: int = 1_700_000_000_000, base_seq: int = 7):
    """A v2 batch around `body` (uncompressed), its CRC right."""
    tail = struct.pack(">hiqqqhii", 0, count - 1, base_ts, base_ts, 9, 0, base_seq, count) + body
    crc = crc32c.crc32c(tail)
    head = struct.pack(">qiiBI", base_offset, 4 + 1 + 4 + len(tail), 0, 2, crc)
    return head + tail


def test_walk_golden_columns():
    """Offsets, timestamps, sequences, null keys and values, headers (a null header key is "",
    a header key that is not UTF-8 is escaped) all come out as the documented layout says."""
    body = (
        _record(b"k0", b"v0", [(b"h", b"1")], ts_delta=0, off_delta=0)
        + _record(None, None, [], ts_delta=5, off_delta=1)
        + _record(b"", b"x" * 300, [(None, None), (b"caf\xe9", b"2")], ts_delta=-1, off_delta=2)
    )
    b = R.read_record_set(_v2(body, 3)).batches[0]
    assert b.status == "ok" and b.error is None and b.crc_ok
    c = b.cols
    assert c.offset.to_pylist() == [100, 101, 102]
    assert c.ts_ns.to_pylist() == [
        1_700_000_000_000_000_000,
        1_700_000_000_005_000_000,
        1_699_999_999_999_000_000,
    ]
    assert c.sequence.to_pylist() == [7, 8, 9]
    assert c.key.to_pylist() == [b"k0", None, b""]
    assert c.value.to_pylist() == [b"v0", None, b"x" * 300]
    assert c.value_size.to_pylist() == [2, None, 300]
    assert c.headers.to_pylist() == [
        [{"key": "h", "value": b"1"}],
        [],
        [{"key": "", "value": None}, {"key": "caf\\xe9", "value": b"2"}],
    ]
    assert c.payload_bytes == 2 + 0 + 2 + 300
    assert [(r.offset, r.delta, r.key, r.headers) for r in b.records][1] == (101, 1, None, [])


def test_walk_without_headers_and_negative_timestamps():
    body = _record(b"a", b"b", ts_delta=0) + _record(b"c", b"d", ts_delta=0, off_delta=1)
    c = R.read_record_set(_v2(body, 2, base_ts=-1, base_seq=-1)).batches[0].cols
    assert c.headers is None and c.sequence is None
    assert c.ts_ns.to_pylist() == [None, None] and c.timestamp.to_pylist() == [-1, -1]


@pytest.mark.parametrize(
    ("tail", "status", "error"),
    [
        (b"", "truncated", "record runs past the end of the batch"),
        (_record(b"k", b"v")[:-3], "truncated", "record runs past the end of the batch"),
        (_record(b"k", b"v", length_fix=1) + b"\0", "malformed", "record length 9 does not match its fields"),
        (b"\x14\0\0\0\x02k\x02v" + _zz(9) + b"\0" * 10, "malformed", "header count 9 impossible"),
        (
            b"\x16\0\0\0\x02k\x02v\x02" + _zz(40) + b"ab",
            "truncated",
            "field of 40 bytes runs past the end of the batch",
        ),
        (b"\x0e\0" + b"\xff" * 9 + b"\x81\0", "malformed", "varint longer than 10 bytes"),
        (b"\x1a\0" + b"\xff" * 9 + b"\x7f" + b"\0" * 4, "malformed", "varint wider than 64 bits"),
        (b"\x0e\0\0\0\x02k\x20v\0", "truncated", "record fields run past the record"),
    ],
)
def test_walk_errors_keep_the_records_before(tail, status, error):
    """A bad record stops the walk with the plain-Python reader's status and message; the
    records read before it are kept, headers of the bad one are not."""
    good = _record(b"g", b"good", [(b"h", b"v")])
    b = R.read_record_set(_v2(good + tail, 2)).batches[0]
    assert (b.status, b.error) == (status, error)
    assert b.cols.key.to_pylist() == [b"g"]
    assert b.cols.headers.to_pylist() == [[{"key": "h", "value": b"v"}]]


def test_walk_deltas_past_int64_become_anomalies_not_wrapped_values():
    """An offset or timestamp that does not fit int64 once the base is added stays a Python int
    (not a wrapped value), and the tables write it as null with an anomaly, as any value that
    does not fit its column."""
    from brokerscope import tables
    from brokerscope.protocols import base
    from brokerscope.protocols.kafka import rows

    body = _record(b"k", b"v", ts_delta=2**62, off_delta=2**62) + _record(b"k", b"w", off_delta=1)
    b = R.read_record_set(_v2(body, 2, base_offset=2**62, base_ts=2**62)).batches[0]
    assert b.status == "ok"
    assert b.cols.offset == [2**63, 2**62 + 1] and b.cols.sequence == [2**62 + 7, 8]
    [(table, block)] = rows.message_rows(b, base.PayloadPolicy(), "deliver", "t", 0, 1, 5, True)
    got = tables.conform(table, [block]).to_pylist()
    assert [r["offset"] for r in got] == [None, 2**62 + 1]
    assert [r["sequence"] for r in got] == [2**62 + 7, 8]
    assert got[0]["anomalies"] == [
        f"offset: {2**63} (out of range for int64)",
        f"message_ts: {2**63 * 1_000_000} ns since 1970 (out of range for int64)",
    ]
    assert got[1]["anomalies"] == [f"message_ts: {2**62 * 1_000_000} ns since 1970 (out of range for int64)"]


# -- strings per record written by the compiled module (details, message_id) ----------------------

_EDGES = [0, 1, -1, 9, 10, -10, 99, 100, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63), 1234567890123]


@pytest.mark.parametrize(
    ("prefix", "suffix"),
    [("t-0@", ""), ('{"batch_base_offset":5,"offset_delta":', "}"), ("", ""), ("tópico-☃-None@", "ü")],
)
def test_decimal_strings_are_python_formatting(prefix, suffix):
    import pyarrow as pa

    values = pa.array(_EDGES, pa.int64())
    want = [f"{prefix}{v}{suffix}" for v in _EDGES]
    got = R.decimal_strings(prefix, values, suffix)
    assert isinstance(got, pa.Array) and got.type == pa.string() and got.to_pylist() == want
    # a slice (offset into the buffer), an empty column, the list a v0/v1 batch gives
    assert R.decimal_strings(prefix, values.slice(3, 4), suffix).to_pylist() == want[3:7]
    assert R.decimal_strings(prefix, values.slice(5, 0), suffix).to_pylist() == []
    assert R.decimal_strings(prefix, _EDGES, suffix) == want


def test_decimal_strings_fall_back_to_python_where_arrow_cannot_take_the_text():
    """A topic decoded with lone surrogates (bytes that are not UTF-8) and values with nulls or
    beyond int64 give the Python strings the tables then judge, as before."""
    import pyarrow as pa

    assert R.decimal_strings("bad\udcff-0@", pa.array([1, 2], pa.int64())) == [
        "bad\udcff-0@1",
        "bad\udcff-0@2",
    ]
    assert R.decimal_strings("t-0@", pa.array([1, None], pa.int64())) == ["t-0@1", "t-0@None"]
    assert R.decimal_strings("t-0@", [2**63, 5]) == [f"t-0@{2**63}", "t-0@5"]


def test_message_rows_strings_match_per_record_formatting():
    """details and message_id of a delivered batch (also cut at a fetch offset, which slices the
    columns) and of produced messages given their offsets: what formatting each record in
    Python gives, character for character."""
    from brokerscope import tables
    from brokerscope.protocols import base
    from brokerscope.protocols.kafka import rows

    msgs = [(f"k{i}".encode(), f"v{i}".encode(), []) for i in range(12)]
    b = R.read_record_set(records(msgs, 2, 3, offset=1_000)).batches[0]
    recs = [(r.offset, r.delta) for r in b.records]
    head = (
        f'{{"batch_base_offset":{b.base_offset},"magic":2,"transactional":false,'
        '"timestamp_type":"create","offset_delta":'
    )
    for min_offset in (None, recs[5][0]):
        [(_t, blk)] = rows.message_rows(
            b, base.PayloadPolicy(), "deliver", "tópico", 3, 1, 5, True, min_offset
        )
        got = tables.conform("messages", [blk]).to_pylist()
        want = [(o, d) for o, d in recs if min_offset is None or o >= min_offset]
        assert len(got) == len(want) == (12 if min_offset is None else 7)
        assert [r["details"] for r in got] == [f"{head}{d}}}" for _o, d in want]
        assert [r["message_id"] for r in got] == [f"tópico-3@{o}" for o, _d in want]
    [(_t, blk)] = rows.message_rows(b, base.PayloadPolicy(), "produce", "t", None, 1, 5, False)
    rows.with_offsets(blk, {("t", None): (0, 77)}, {})
    got = tables.conform("messages", [blk]).to_pylist()
    assert [(r["offset"], r["message_id"]) for r in got] == [(77 + i, f"t-None@{77 + i}") for i in range(12)]


def _frame_sets() -> list[bytes]:
    """The records fields of a frame's partitions: batches that differ in every batch-level
    field a messages row takes (codec, producer, headers or none, sequences or none, a CRC that
    fails, records cut short), a v0 message set among them, and one record set of two batches."""
    plain = [(f"k{i}".encode(), f"value {i} ".encode() * 40, []) for i in range(5)]
    bad_crc = bytearray(records(plain, 2, 0, offset=30))
    bad_crc[-1] ^= 0xFF  # the last value byte: the CRC fails, the records still read
    cut = bytearray(records(MSGS, 2, 0, offset=50))
    struct.pack_into(">i", cut, 57, 5)  # five records announced, three there: truncated
    struct.pack_into(">I", cut, 17, crc32c.crc32c(bytes(cut[21:])))
    return [
        records(MSGS, 2, 3, offset=10),
        records(plain, 2, 0, offset=20, producer_id=7, producer_epoch=2, base_sequence=4)
        + records(plain, 2, 4, offset=25),
        bytes(bad_crc),
        records(plain, 0, 0, offset=40),
        bytes(cut),
        records(plain, 2, 1, offset=60),
    ]


@pytest.mark.parametrize("whole", [False, True])
@pytest.mark.parametrize("with_offset", [True, False])
def test_message_blocks_are_the_rows_of_each_batch(with_offset, whole):
    """One walk over a frame's record sets and one block per run of batches give exactly the
    rows message_rows gives batch by batch (conformed, every column), fetch offsets cutting
    into batches included; the produce side gets each partition's offsets from with_offsets.
    `whole`: no v0 set and no offset cut, so one block holds every record the walk read."""
    from brokerscope import tables
    from brokerscope.protocols import base
    from brokerscope.protocols.kafka import rows

    sets = _frame_sets()
    if whole:
        del sets[3]  # the v0 message set
    pol = base.PayloadPolicy()
    frames = {"first_frame": 3, "last_frame": 4}
    together = R.read_record_sets(sets)
    alone = [R.read_record_set(s) for s in sets]
    min_off = {1: 22, 5: 52} if with_offset and not whole else {}
    picks = [(b, "t", i % 3, None, min_off.get(i)) for i, rs in enumerate(together) for b in rs.batches]
    blocks = rows.message_blocks(picks, pol, "deliver", 9, 5, with_offset, frames)
    assert sum(isinstance(blk, rows.MessageBlock) and len(blk.parts) > 1 for _t, blk in blocks) >= 1
    if whole:
        [(_t, blk)] = blocks
        assert len(blk) == together[0].batches[0].span[0].n
    want = [
        r
        for i, rs in enumerate(alone)
        for b in rs.batches
        for r in rows.message_rows(
            b, pol, "deliver", "t", i % 3, 9, 5, with_offset, min_off.get(i), None, frames
        )
    ]
    if not with_offset:  # produced: offsets from the response, per partition; partition 1 failed
        acked = {("t", 0): (0, 1000), ("t", 1): (6, -1), ("t", 2): (0, 2**63 - 3)}
        for blocks_ in (blocks, want):
            pos: dict = {}
            for _t, blk in blocks_:
                rows.with_offsets(blk, acked, pos)
    got_rows = tables.conform("messages", [blk for _t, blk in blocks]).to_pylist()
    want_rows = tables.conform("messages", [blk for _t, blk in want]).to_pylist()
    assert got_rows == want_rows
    assert len(got_rows) > 20 and {r["decode_status"] for r in got_rows} == {
        "ok",
        "checksum_mismatch",
        "truncated",
    }
    assert {r["compression"] for r in got_rows} == {"lz4", "none", "zstd", "gzip"}
    if not with_offset:
        # partition 1 was not acknowledged; partition 2's offsets pass int64: noted, not lost
        assert {r["partition"] for r in got_rows if r["offset"] is None} == {1, 2}
        assert {r["partition"] for r in got_rows if r["anomalies"]} == {2}


def test_record_sets_walk_equals_one_set_at_a_time():
    """read_record_sets over many record sets reads each as read_record_set does: batches,
    errors, partial tails and records."""
    sets = [*_frame_sets(), b"\x00" * 5, records(MSGS, 2, 0, offset=70)[:-3], b"\x00" * 8 + b"\xff" * 9]
    for together, s in zip(R.read_record_sets(sets), sets):
        alone = R.read_record_set(s)
        assert (together.partial_tail, together.error, together.status) == (
            alone.partial_tail,
            alone.error,
            alone.status,
        )
        assert [b.summary() for b in together.batches] == [b.summary() for b in alone.batches]
        assert [b.records for b in together.batches] == [b.records for b in alone.batches]
        assert [b.payload_bytes for b in together.batches] == [
            b.cols.payload_bytes if b.cols is not None else 0 for b in alone.batches
        ]


def test_decimal_runs_are_python_formatting_a_prefix_per_run():
    """`details` and message_id of a block's batches, a prefix per run of values: what Python's
    formatting gives; text with lone surrogates goes value by value."""
    import pyarrow as pa

    from brokerscope.protocols.kafka import rows

    arr = pa.array([7, -1, 2**62, 0, 5], pa.int64())
    for prefixes in (["a-", "b-"], ["a\udcff-", "b-"], ["only-"]):
        counts = [2, 2] if len(prefixes) == 2 else [4]
        got = rows._decimal_runs(prefixes, counts, arr.slice(1, 4), "}")
        got = got.to_pylist() if isinstance(got, pa.Array) else got
        pre = [p for p, k in zip(prefixes, counts) for _ in range(k)]
        assert got == [f"{p}{v}}}" for p, v in zip(pre, [-1, 2**62, 0, 5])]


# -- columns gathered from the walks' buffers (records.Ints, Binary, Decimals; _records.gather) ---


def _walked(msgs: list, offset: int) -> dict:
    """The walk's buffers of one v2 batch of `msgs` (key, value, headers) at `offset`."""
    walk = R._records.record_sets([records(msgs, 2, 0, offset=offset)], 1 << 20, R._decompress_v2)
    return walk["chunks"][0]


def test_gathered_columns_are_the_joined_arrays_of_their_parts():
    """Rows of several walks' buffers, in parts of any start and length (nulls, empty values,
    ranges of offsets), gathered into one column: the arrays of the parts joined, bit for bit
    the same values and nulls."""
    import pyarrow as pa

    from brokerscope import tables

    a = _walked([(b"k1", b"v1", []), (None, b"", []), (b"", None, []), (b"k4", b"v" * 300, [])], 10)
    b = _walked([(b"x", None, []), (None, b"y" * 7, []), (b"zz", b"zzz", [])], 5_000)
    # 19 rows without a null before the first one: the bitmap is made there, whole bytes before
    c = _walked([(b"k%d" % i, None if i == 18 else b"v", []) for i in range(20)], 7)
    chunks = [(a, R.Chunk(a)), (b, R.Chunk(b)), (c, R.Chunk(c))]
    spans = [(0, 0, 4), (1, 0, 3), (0, 1, 2), (1, 2, 1), (0, 3, 0), (0, 3, 1), (1, 0, 1)]
    spans = [(2, 0, 10), (2, 10, 10), *spans, (2, 3, 17), (2, 1, 1)]

    def parts(kind, name):
        cols = []
        for c, start, n in spans:
            w = chunks[c][0]
            if kind is R.Binary:
                valid, offsets, data, nulls = w[name]
                cols.append(R.Binary([(valid if nulls else None, offsets, data, start, n)], n))
            elif name == "value_size":
                valid, nulls = w["value"][0], w["value"][3]
                cols.append(R.Ints([(valid if nulls else None, w[name], start, n)], n))
            else:
                cols.append(R.Ints([(None, w[name], start, n)], n))
        return cols

    def joined(name):
        return pa.concat_arrays([chunks[c][1].col(name).slice(start, n) for c, start, n in spans])

    for kind, name in ((R.Binary, "key"), (R.Binary, "value"), (R.Ints, "value_size"), (R.Ints, "offset")):
        got = kind.gather(parts(kind, name))
        want = joined(name)
        assert got.to_pylist() == want.to_pylist() and got.null_count == want.null_count, name
        got.validate(full=True)
    # a Parts alone is its own rows
    one = parts(R.Binary, "value")[3]
    assert one.array().to_pylist() == [None, b"y" * 7, b"zzz"]
    # ranges: first, first + 1, ... per part; text: prefix + str(v) + suffix per part
    rng = R.Ints([(None, 5, 0, 3), (None, -2, 0, 2), (None, 2**63 - 2, 0, 2)], 7)
    assert rng.array().to_pylist() == [5, 6, 7, -2, -1, 2**63 - 2, 2**63 - 1]
    text = R.Decimals(
        [(b"t-0@", b"", 9, 0, 2), (b'{"d":', b"}", a["delta"], 1, 3), (b"", b"", -(2**63), 0, 1)], 6
    )
    d = chunks[0][1].col("delta").to_pylist()[1:4]
    want = ["t-0@9", "t-0@10", *(f'{{"d":{x}}}' for x in d), str(-(2**63))]
    assert text.array().to_pylist() == want
    assert R.Decimals.gather([text, text]).to_pylist() == text.array().to_pylist() * 2
    assert tables.Parts in R.Ints.__mro__ and R.Ints.gather([]).to_pylist() == []


def test_gather_refuses_parts_outside_their_buffers():
    """A part whose rows run past its buffers (or with offsets out of order) is an error, not a
    read past the end."""
    import pytest

    a = _walked([(b"k1", b"v1", []), (b"k2", b"v2", [])], 0)
    valid, offsets, data, _nulls = a["value"]
    bad = [
        (0, [(None, a["offset"], 1, 2)]),  # rows 1..2 of 2
        (0, [(b"\x01", a["offset"], 0, 9)]),
        (1, [(None, offsets, data, 0, 3)]),
        (1, [(None, (2).to_bytes(4, "little") + (1).to_bytes(4, "little"), b"ab", 0, 1)]),
        (1, [(None, offsets, b"", 0, 2)]),
        (2, [(b"p", b"", a["delta"], 0, 3)]),
        (0, [(None, a["offset"], -1, 1)]),
    ]
    for kind, parts in bad:
        with pytest.raises(ValueError):
            R._records.gather(kind, parts)
    with pytest.raises(TypeError):
        R._records.gather(2, [("p", b"", 0, 0, 1)])


def test_conform_gathers_parts_and_joins_them_with_other_blocks_columns():
    """A messages batch whose blocks give a column as Parts: one gathered column; where another
    block gives it as an array or a list, or as a constant, each Parts becomes its array and
    the column is as before. The rows are the same either way."""
    import pyarrow as pa

    from brokerscope import tables

    a = _walked([(b"k1", b"v1", []), (None, b"v2", []), (b"k3", None, [])], 100)
    valid, offsets, data, nulls = a["value"]

    def block(**cols):
        return tables.Block(3, cols, {"ts_ns": 1_700_000_000_000_000_000, "protocol": "kafka"})

    def parts():
        return {
            "value": R.Binary([(valid if nulls else None, offsets, data, 0, 3)], 3),
            "offset": R.Ints([(None, a["offset"], 0, 3)], 3),
            "message_id": R.Decimals([(b"t-0@", b"", a["offset"], 0, 3)], 3),
        }

    arrays = {k: v.array() for k, v in parts().items()}
    lists = {k: v.to_pylist() for k, v in arrays.items()}
    want = tables.conform("messages", [block(**arrays), block(**arrays)]).to_pylist()
    assert want[0]["message_id"] == "t-0@100" and want[2]["value"] is None
    for mix in ([parts(), parts()], [parts(), arrays], [lists, parts()]):
        got = tables.conform("messages", [block(**dict(m)) for m in mix])
        assert got.to_pylist() == want
    const = tables.Block(3, {}, {"ts_ns": 1_700_000_000_000_000_000, "protocol": "kafka", "value": b"c"})
    got = tables.conform("messages", [block(**parts()), const]).column("value").to_pylist()
    assert got == [b"v1", b"v2", None, b"c", b"c", b"c"]
    assert block(**parts()).column("message_id") == ["t-0@100", "t-0@101", "t-0@102"]
    assert block(**parts()).take([2, 0]).column("value") == [None, b"v1"]
    assert isinstance(tables.conform("messages", [block(**parts())]).column("value"), pa.Array)


# -- LZ4 bodies decoded inside the walk (python-lz4's LZ4F_ functions) ----------------------------


def _lz4_cases() -> list[tuple[str, bytes, int]]:
    """(name, v2 batch, cap): LZ4 bodies the walk takes whole, and every kind it hands back."""
    import random

    rng = random.Random(13)
    msgs = [
        (b"k%d" % i, rng.randbytes(rng.randrange(0, 300)) + b"abc" * rng.randrange(0, 200), [])
        for i in range(60)
    ]
    plain = records(msgs, 2, 0, offset=500)
    section = len(plain) - 61
    zeros = records([(b"z", b"\0" * (1 << 20), [])], 2, 0)
    cases = []
    for opts in (
        {},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB, "content_checksum": True, "block_checksum": True},
        {"block_linked": False, "store_size": False},
        {"compression_level": 9, "block_size": lz4.frame.BLOCKSIZE_MAX64KB},
    ):
        good = _recompress_v2(plain, 3, lambda d, o=opts: lz4.frame.compress(d, **o))
        body = good[61:]
        cases.append((f"whole {opts}", good, 64 << 20))
        cases.append((f"cap exact {opts}", good, section))
        cases.append((f"cap short {opts}", good, section - 1))
        for cut in (4, 7, 15, len(body) // 2, len(body) - 5, len(body) - 1):
            cases.append((f"cut at {cut} {opts}", _v2_body(good, body[:cut]), 64 << 20))
        flipped = bytearray(body)
        flipped[len(body) // 2] ^= 0x40
        cases.append((f"flipped {opts}", _v2_body(good, bytes(flipped)), 64 << 20))
        cases.append((f"trailing bytes {opts}", _v2_body(good, body + b"\x01\x02\x03"), 64 << 20))
        cases.append((f"two frames {opts}", _v2_body(good, body + body), 64 << 20))
    big = _recompress_v2(zeros, 3, lz4.frame.compress)  # past 256x: decoded again, allowed the cap
    cases.append(("zeros past the first limit", big, 64 << 20))
    cases.append(("zeros, cap short", big, len(zeros) - 62))
    cases.append(("empty body", _v2_body(big, b""), 64 << 20))
    cases.append(("not lz4", _v2_body(big, rng.randbytes(200)), 64 << 20))
    cases.append(("lz4 magic, garbage", _v2_body(big, b"\x04\x22\x4d\x18" + rng.randbytes(60)), 64 << 20))
    return cases


def _v2_body(batch: bytes, body: bytes) -> bytes:
    """`batch` (a v2 batch, codec bits kept) with its records section replaced, length and CRC right."""
    head = bytearray(batch[:61])
    struct.pack_into(">i", head, 8, 61 - 12 + len(body))
    out = bytes(head) + body
    return out[:17] + struct.pack(">I", crc32c.crc32c(out[21:])) + out[21:]


def _seen(rs: R.RecordSet) -> tuple:
    return (
        rs.error,
        rs.status,
        rs.partial_tail,
        [
            (
                b.status,
                b.error,
                b.crc_ok,
                b.codec,
                [(r.key, r.value, r.offset, r.timestamp, r.headers) for r in b.records],
            )
            for b in rs.batches
        ],
    )


@pytest.mark.parametrize(
    ("name", "batch", "cap"), _lz4_cases(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_lz4_bodies_in_the_walk_read_as_python_lz4_reads_them(name, batch, cap):
    """The walk's own LZ4 decoding gives what _decompress_v2 (python-lz4) gives: the records of a
    whole frame, and for every other body (cut, damaged, trailing bytes, over the cap) the same
    status, error text and records, because it hands those to _decompress_v2."""
    assert R.lz4_in_walk(True)
    try:
        here = _seen(R.read_record_set(batch, cap=cap))
        R.lz4_in_walk(False)
        there = _seen(R.read_record_set(batch, cap=cap))
    finally:
        R.lz4_in_walk(True)
    assert here == there


def test_lz4_context_left_by_one_call_reads_the_next(monkeypatch):
    """A call leaves its LZ4 context and output buffer for the next: after every kind of body
    (cut mid-frame, damaged, over the cap, larger than the buffer so far), a whole frame in the
    next call is still read in the walk, with python-lz4's records, and so after the functions
    were swapped."""
    calls = []
    real = R._decompress_v2
    monkeypatch.setattr(R, "_decompress_v2", lambda *a: calls.append(a[0]) or real(*a))
    good = _recompress_v2(records(MSGS, 2, 0), 3, lz4.frame.compress)
    want = _seen(R.read_record_set(good))
    for swap in (False, True):
        for _name, batch, cap in _lz4_cases():
            R.read_record_set(batch, cap=cap)
            if swap:  # the kept context was made by the functions replaced: freed, not reused
                R.lz4_in_walk(False)
                R.lz4_in_walk(True)
            calls.clear()
            assert _seen(R.read_record_set(good)) == want, _name
            assert calls == [], _name


def test_whole_lz4_frames_do_not_call_python(monkeypatch):
    """A whole frame is decoded in the walk: the Python decompressor is not asked."""
    calls = []
    real = R._decompress_v2
    monkeypatch.setattr(R, "_decompress_v2", lambda *a: calls.append(a[0]) or real(*a))
    batch = _recompress_v2(records(MSGS, 2, 0), 3, lz4.frame.compress)
    _check(R.read_record_set(batch), "lz4")
    assert calls == []
    cut = _v2_body(batch, batch[61:-3])
    R.read_record_set(cut)
    assert calls == [3]


def test_sequences_wrap_past_int32_max_to_zero():
    """A producer numbers its records 0 .. 2^31 - 1 and then from 0 again (Kafka's
    DefaultRecordBatch.incrementSequence): a batch based at 2147483646 holds 2147483646,
    2147483647, 0 (was: 2147483648)."""
    body = b"".join(_record(b"k", b"v", off_delta=i) for i in range(3))
    b = R.read_record_set(_v2(body, 3, base_seq=2147483646)).batches[0]
    assert b.cols.sequence.to_pylist() == [2147483646, 2147483647, 0]
    assert [R.sequence_of(b.base_sequence, r.delta) for r in b.records] == [2147483646, 2147483647, 0]
