"""Kafka log segments: detection, splitting at batch boundaries, rows, damaged batches, torn
tails, and `.index` / `.timeindex` verification. Segments are written by a small test writer from
batches built by kafka-python's record builder, laid out as a broker stores them."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from brokerscope import tables
from brokerscope.protocols import base
from brokerscope.protocols.kafka import segments as seg
from tests.support.kafka_segment import write_segment

from .kit import records
from .test_kafka_records import _control_batch

CTX = base.Context()


def _batch(base_offset: int, msgs, codec: int = 0, **kw) -> bytes:
    data = records(msgs, 2, codec, offset=0, **kw)
    return struct.pack(">q", base_offset) + data[8:]  # the CRC does not cover the base offset


MSGS1 = [(b"k1", b"v1", [("h", b"1")]), (b"k2", b"v2", [])]
MSGS2 = [(b"k3", b"v3" * 100, []), (None, b"v4", [("a", None)])]


@pytest.fixture
def segment(tmp_path):
    batches = [_batch(100, MSGS1), _batch(102, MSGS2, codec=1), _control_batch(1, base_offset=104, pid=9)]
    return write_segment(tmp_path / "orders-3", batches, 100), batches


def _rows(path, start=0, end=None, ctx=CTX):
    end = Path(path).stat().st_size if end is None else end
    out: dict[str, list] = {"commands": [], "messages": [], "acks": [], "latencies": []}
    for t, r in seg.read(path, start, end, ctx):
        out[t].append(r)
    for t, rs in out.items():
        tables.conform(t, rs)
    return out


def test_matches(segment, tmp_path):
    path, _b = segment
    assert seg.matches(path)
    other = tmp_path / "not-a-partition-dir" / "00000000000000000000.log"
    other.parent.mkdir()
    other.write_bytes(Path(path).read_bytes())
    assert not seg.matches(str(other))  # "dir" is not a number
    garbage = tmp_path / "t-0" / "00000000000000000000.log"
    garbage.parent.mkdir()
    garbage.write_bytes(b"hello world, not a kafka log at all........")
    assert not seg.matches(str(garbage))
    assert not seg.matches(path[:-4] + ".index")


def test_rows(segment):
    path, _b = segment
    out = _rows(path)
    assert out["commands"] == []
    msgs = out["messages"]
    assert [(m["offset"], m["key"], m["message_id"]) for m in msgs] == [
        (100, b"k1", "orders-3@100"),
        (101, b"k2", "orders-3@101"),
        (102, b"k3", "orders-3@102"),
        (103, None, "orders-3@103"),
    ]
    assert all(m["direction"] == "stored" and m["source"] == "segment" for m in msgs)
    assert all((m["topic"], m["partition"]) == ("orders", 3) for m in msgs)
    assert [m["compression"] for m in msgs] == ["none", "none", "gzip", "gzip"]
    assert msgs[0]["headers"] == [{"key": "h", "value": b"1"}] and msgs[3]["headers"] == [
        {"key": "a", "value": None}
    ]
    assert msgs[0]["ts_ns"] == msgs[0]["message_ts_ns"] == 1_700_000_000_000 * 1_000_000
    (ack,) = out["acks"]
    assert (ack["ack_type"], ack["offset"], ack["producer_id"]) == ("kafka_txn_marker", 104, 9)


def test_plan_cuts_at_batch_boundaries(segment):
    path, batches = segment
    sizes = [len(b) for b in batches]
    ranges = seg.plan(path, 1)
    assert ranges == [(0, sizes[0]), (sizes[0], sizes[0] + sizes[1]), (sizes[0] + sizes[1], sum(sizes))]
    assert seg.plan(path, 1 << 20) == [(0, sum(sizes))]
    whole = _rows(path)["messages"]
    parts = [m for s, e in ranges for m in _rows(path, s, e)["messages"]]
    assert [m["offset"] for m in parts] == [m["offset"] for m in whole]


def test_flipped_crc_bit_keeps_good_batches(tmp_path):
    b2 = bytearray(_batch(102, MSGS2))
    b2[80] ^= 0x10  # inside the first record's value
    path = write_segment(tmp_path / "t-0", [_batch(100, MSGS1), bytes(b2), _batch(104, MSGS1)], 100)
    out = _rows(path)
    (c,) = out["commands"]
    assert (c["command"], c["decode_status"], c["stream_offset"]) == (
        "LogSegment",
        "checksum_mismatch",
        len(_batch(100, MSGS1)),
    )
    ok = {m["offset"]: m["checksum_ok"] for m in out["messages"]}
    assert ok == {100: True, 101: True, 102: False, 103: False, 104: True, 105: True}


def test_a_damaged_first_batch_is_the_segments_damage_not_no_segment(tmp_path):
    """One flipped byte in the first batch (found by a user trial) made the file 'not a capture
    or a broker segment file', exit 4, its good batches lost. A file named as a segment (its base
    offset) is one: the first batch is a checksum_mismatch, the batches after it are read."""
    b1 = bytearray(_batch(100, MSGS1))
    b1[70] ^= 0x10  # inside the first record
    path = write_segment(tmp_path / "t-0", [bytes(b1), _batch(102, MSGS2), _batch(104, MSGS1)], 100)
    assert seg.matches(path)
    out = _rows(path)
    assert [(c["command"], c["decode_status"], c["stream_offset"]) for c in out["commands"]] == [
        ("LogSegment", "checksum_mismatch", 0)
    ]
    ok = {m["offset"]: m["checksum_ok"] for m in out["messages"]}
    assert ok == {100: False, 101: False, 102: True, 103: True, 104: True, 105: True}
    named_otherwise = tmp_path / "t-0" / "old.log"  # no base offset in its name: not taken
    named_otherwise.write_bytes(Path(path).read_bytes())
    assert not seg.matches(str(named_otherwise))


def test_torn_tail(tmp_path):
    last = _batch(102, MSGS2)
    path = write_segment(tmp_path / "t-0", [_batch(100, MSGS1)], 100, tail=last[:40])
    out = _rows(path)
    (c,) = out["commands"]
    assert c["decode_status"] == "truncated" and "torn tail" in c["decode_error"]
    assert [m["offset"] for m in out["messages"]] == [100, 101]
    # a tail shorter than a batch header
    path = write_segment(tmp_path / "t-1", [_batch(100, MSGS1)], 100, tail=last[:9])
    assert [c["decode_status"] for c in _rows(path)["commands"]] == ["truncated"]


def test_index_mismatches(segment):
    path, batches = segment
    stem = path[:-4]
    idx = bytearray(Path(stem + ".index").read_bytes())
    struct.pack_into(">ii", idx, 8, 3, len(batches[0]) + 1)  # entry 1: a position inside a batch
    Path(stem + ".index").write_bytes(bytes(idx))
    tidx = bytearray(Path(stem + ".timeindex").read_bytes())
    struct.pack_into(">q", tidx, 0, 42)  # entry 0: wrong timestamp
    Path(stem + ".timeindex").write_bytes(bytes(tidx))
    out = _rows(path)
    probs = [(c["command"], c["decode_status"]) for c in out["commands"]]
    assert probs == [("OffsetIndex", "index_mismatch"), ("TimeIndex", "index_mismatch")]
    assert "no batch starts at position" in out["commands"][0]["decode_error"]
    assert "max timestamp" in out["commands"][1]["decode_error"]
    assert len(out["messages"]) == 4  # the log itself is fine


def test_index_offset_not_last_of_batch(segment):
    path, _b = segment
    stem = path[:-4]
    idx = bytearray(Path(stem + ".index").read_bytes())
    struct.pack_into(">i", idx, 0, 0)  # entry 0 says offset 100, the batch at 0 ends at 101
    Path(stem + ".index").write_bytes(bytes(idx))
    (c,) = _rows(path)["commands"]
    assert c["command"] == "OffsetIndex" and "ends at 101" in c["decode_error"]


def test_index_checked_once(segment):
    path, _b = segment
    Path(path[:-4] + ".index").write_bytes(struct.pack(">ii", 1, 7))
    ranges = seg.plan(path, 1)
    probs = [c for s, e in ranges for c in _rows(path, s, e)["commands"]]
    assert len(probs) == 1  # only the split at byte 0 verifies the indexes


def test_decode_files_on_a_log_directory(segment, tmp_path):
    from brokerscope.streams import decode_files

    path, _b = segment
    out = decode_files([str(tmp_path)])
    assert out["_errors"] == []
    msgs = out["messages"]
    assert len(msgs) == 4 and {m["protocol"] for m in msgs} == {"kafka"}
    assert msgs[0]["client_ip"] is None and msgs[0]["capture_id"]


def test_sample_segment_from_the_mock_broker():
    """sample_data/kafka/segments: batches of every codec as the broker stored them (fetched back
    raw from librdkafka's mock cluster), checked against the producers' delivery reports."""
    import base64
    import collections
    import json

    from brokerscope.streams import decode_files

    root = Path(__file__).resolve().parents[3] / "sample_data" / "kafka"
    manifest = json.loads((root / "segment.json").read_text())
    out = decode_files([str(root / "segments")])
    assert out["commands"] == [] and out["_errors"] == []  # CRCs and both indexes check out
    b = base64.b64decode
    want = collections.Counter(
        (m["partition"], m["offset"], b(m["key"]), b(m["value"]), tuple((k, b(v)) for k, v in m["headers"]))
        for m in manifest["produced"]
    )
    got = collections.Counter(
        (
            r["partition"],
            r["offset"],
            r["key"],
            r["value"],
            tuple((h["key"], h["value"]) for h in r["headers"]),
        )
        for r in out["messages"]
    )
    assert got == want
    assert {r["compression"] for r in out["messages"]} == {"none", "gzip", "snappy", "lz4", "zstd"}
    assert all(r["message_id"] == f"bs-segment-0@{r['offset']}" for r in out["messages"])


def test_legacy_message_sets_in_a_segment(tmp_path):
    """A segment written before message format v2: v1 messages, one of them a gzip wrapper whose
    offset is its last inner offset (as brokers store it). The offset index points at the
    wrapper by that offset."""
    plain = bytearray(records([(b"a", b"1", [])], 1, 0))
    struct.pack_into(">q", plain, 0, 10)
    wrapped = bytearray(records([(b"b", b"2", []), (b"c", b"3", [])], 1, 1))
    struct.pack_into(">q", wrapped, 0, 12)  # inner relative offsets 0, 1 -> 11, 12
    d = tmp_path / "old-0"
    d.mkdir()
    (d / "00000000000000000010.log").write_bytes(bytes(plain + wrapped))
    (d / "00000000000000000010.index").write_bytes(struct.pack(">ii", 2, len(plain)))
    path = str(d / "00000000000000000010.log")
    assert seg.matches(path)
    out = _rows(path)
    assert out["commands"] == []
    assert [(m["offset"], m["key"], m["compression"]) for m in out["messages"]] == [
        (10, b"a", "none"),
        (11, b"b", "gzip"),
        (12, b"c", "gzip"),
    ]
    assert all(m["producer_id"] is None and m["checksum_ok"] for m in out["messages"])


def _damaged(tmp_path, name: str, damage) -> tuple[str, list[bytes]]:
    """A segment of five batches (offsets 100..109), its log bytes changed by `damage(log,
    starts)` (bytearray, batch start positions); the index as written before the damage."""
    batches = [_batch(100 + 2 * i, MSGS2 if i % 2 else MSGS1, codec=i % 2) for i in range(5)]
    path = write_segment(tmp_path / f"{name}-0", batches, 100)
    log = bytearray(Path(path).read_bytes())
    starts = [sum(len(b) for b in batches[:i]) for i in range(5)]
    Path(path).write_bytes(bytes(damage(log, starts)))
    return path, batches


def _length(log, at, value):
    struct.pack_into(">i", log, at + 8, value)
    return log


@pytest.mark.parametrize(
    ("name", "damage", "hit"),
    [
        # a length far past the end: was 'no batch header', the 3 batches after it lost
        ("huge", lambda log, s: _length(log, s[2], 0x7FFF0000), 2),
        # bytes inserted before a batch: was the same
        ("inserted", lambda log, s: log[: s[2]] + bytes(40) + log[s[2] :], 1),
        # the first batch's length past the end: was 'torn tail', status error, every batch lost
        ("first", lambda log, s: _length(log, 0, 99999), 0),
        # a length shorter than the batch: the rest of it taken for damage, the batches after lost
        ("short", lambda log, s: _length(log, s[3], 100), 3),
        # a length longer than the batch but inside the file: the next batches were skipped over
        ("long", lambda log, s: _length(log, s[1], s[4] - s[1] - 12 + 5), 1),
    ],
)
def test_damage_keeps_the_batches_after_it(tmp_path, name, damage, hit):
    """Damage in the middle of a segment (found by a user trial): the reader finds the next
    batch (its header and CRC-32C hold) and reads on; every other batch's records are kept,
    checksums good, and the damage is a problem row, not a torn tail."""
    path, _batches = _damaged(tmp_path, name, damage)
    assert seg.matches(path)
    out = _rows(path)
    good = {m["offset"] for m in out["messages"] if m["checksum_ok"]}
    others = set(range(100, 110)) - {100 + 2 * hit, 101 + 2 * hit}
    assert others <= good
    problems = [c for c in out["commands"] if c["command"] == "LogSegment"]
    assert problems and not any("torn tail" in (c["decode_error"] or "") for c in problems)
    # the index checks walk past the damage too: no record read is 'not in the log'
    said = [c["decode_error"] for c in out["commands"] if c["command"] in ("OffsetIndex", "TimeIndex")]
    gone = {int(m) for e in said for m in re.findall(r"offset (\d+) is not in the log", e)}
    assert not gone & {m["offset"] for m in out["messages"]}, said
    nowhere = {int(p) for e in said for p in re.findall(r"no batch starts at position (\d+)", e)}
    assert not nowhere & {json.loads(m["details"])["file_position"] for m in out["messages"]}, said


def test_splits_are_cut_where_a_header_holds(tmp_path):
    """A damaged length walked the plan into a batch: the next split began inside it and
    reported its bytes again as damage (found by a user trial)."""
    path, _b = _damaged(tmp_path, "cut", lambda log, s: log[: s[2] + 30] + log[s[2] + 35 :])
    size = Path(path).stat().st_size
    splits = seg.plan(path, 300)
    with open(path, "rb") as f:
        for start, _end in splits[1:]:
            f.seek(start)
            assert seg._header_ok(f.read(17), size, start)
    rows = {t: [] for t in ("commands", "messages")}
    for start, end in splits:
        for t, r in seg.read(path, start, end, CTX):
            rows.setdefault(t, []).append(r)
    damage = [
        c for c in rows["commands"] if c["command"] == "LogSegment" and c["decode_status"] == "malformed"
    ]
    assert sum(c["size"] for c in damage) <= 5 + len(_b[2])  # the batch hit, at most, once


def test_a_first_batch_with_a_bad_magic_is_the_segments_damage(tmp_path):
    """The first batch's magic byte damaged: was 'not a capture or a broker segment file', the
    file rejected; a file named as a segment with a batch after the damage is read."""
    path, _b = _damaged(tmp_path, "magic", lambda log, s: log[:16] + b"\x07" + log[17:])
    assert seg.matches(path)
    out = _rows(path)
    assert {m["offset"] for m in out["messages"]} == set(range(102, 110))
    (c,) = [c for c in out["commands"] if c["command"] == "LogSegment"]
    assert c["decode_status"] == "malformed" and "skipped to the next batch, at byte" in c["decode_error"]


def test_preallocated_zeros_end_the_log(tmp_path):
    """An active segment under log.preallocate: its batches, then zeros to the segment's size
    (found by a user trial: 10 MiB of zeros were a malformed part, the file partial)."""
    batches = [_batch(100, MSGS1), _batch(102, MSGS2)]
    path = write_segment(tmp_path / "t-0", batches, 100, tail=bytes(10 << 20))
    out = _rows(path)
    assert not [c for c in out["commands"] if c["command"] == "LogSegment"]
    assert [m["offset"] for m in out["messages"]] == [100, 101, 102, 103]
    # zeros with a byte in them are no preallocation: damage, as before
    path = write_segment(tmp_path / "t-1", batches, 100, tail=bytes(1000) + b"\x01" + bytes(1000))
    (c,) = [c for c in _rows(path)["commands"] if c["command"] == "LogSegment"]
    assert c["decode_status"] == "malformed" and c["size"] == 2001


def test_partition_directories_a_broker_moves_or_deletes(tmp_path):
    """A broker's data directory holds `<topic>-<partition>.<id>-future` (a replica moving in:
    live data) and `-delete` / `-stray` directories (going away); found by a user trial: both
    were errors, so ingesting a whole data directory exited 3."""
    from brokerscope import inputs

    uid = "0123456789abcdef0123456789abcdef"
    future = write_segment(tmp_path / f"orders-3.{uid}-future", [_batch(100, MSGS1)], 100)
    deleting = write_segment(tmp_path / f"orders-4.{uid}-delete", [_batch(100, MSGS1)], 100)
    stray = write_segment(tmp_path / f"orders-5.{uid}-stray", [_batch(100, MSGS1)], 100)
    assert seg.topic_partition(future) == ("orders", 3) and seg.matches(future)
    assert {(m["topic"], m["partition"]) for m in _rows(future)["messages"]} == {("orders", 3)}
    d = inputs.discover([str(tmp_path)])
    assert [i.path for i in d.inputs] == [future] and d.errors == []
    assert sorted(p for p, _why in d.skipped if p.endswith(".log")) == sorted([deleting, stray])
    assert all("the broker is deleting" in why for p, why in d.skipped if p.endswith(".log"))
