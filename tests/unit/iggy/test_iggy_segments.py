"""Iggy segment files written byte for byte per layout decode back to the messages written."""

from __future__ import annotations

import json
import re
import struct
import zlib

import pytest

from brokerscope import tables
from brokerscope.protocols.base import Context
from brokerscope.protocols.iggy import segments as seg
from brokerscope.protocols.iggy.messages import build_headers, build_message

from .kit import VSR_ORIGIN, vsr_batch

HDRS = build_headers([("k", 2, b"v"), ("n", 9, b"\x05")])
MSGS = [(1000 + i, f"payload-{i}".encode() * (i + 1), HDRS if i % 2 else b"") for i in range(7)]


def part_dir(tmp_path):
    d = tmp_path / "streams" / "1" / "topics" / "2" / "partitions" / "3"
    d.mkdir(parents=True)
    return d


def write_new(d, msgs, header_size=64, base_offset=100, index="end"):
    """0.5+ segment: messages back to back, 16-byte index entries (rel offset, position, ts)."""
    log = b""
    idx = b""
    for i, (mid, payload, hdrs) in enumerate(msgs):
        start = len(log)
        ts = 1_700_000_000_000_000 + i
        log += build_message(
            mid,
            payload,
            hdrs,
            offset=base_offset + i,
            timestamp=ts,
            origin_timestamp=ts - 5,
            header_size=header_size,
        )
        idx += struct.pack("<IIQ", i, len(log) if index == "end" else start, ts)
    name = f"{base_offset:020d}"
    (d / f"{name}.log").write_bytes(log)
    (d / f"{name}.index").write_bytes(idx)
    return d / f"{name}.log", log


def write_legacy(d, msgs, per_batch=3, base_offset=0):
    """0.4 segment: batches [base_offset u64][length u32][last_offset_delta u32][max_ts u64]
    of messages [length u32][offset u64][state u8][ts u64][id u128][crc32 u32][hlen u32][h][p]."""
    log = b""
    for b0 in range(0, len(msgs), per_batch):
        body = b""
        chunk = msgs[b0 : b0 + per_batch]
        for j, (mid, payload, hdrs) in enumerate(chunk):
            off = base_offset + b0 + j
            m = struct.pack("<QBQ", off, 1, 1_700_000_000_000_000 + off) + mid.to_bytes(16, "little")
            m += struct.pack("<II", zlib.crc32(payload), len(hdrs)) + hdrs + payload
            body += struct.pack("<I", len(m)) + m
        log += (
            struct.pack(
                "<QIIQ",
                base_offset + b0,
                len(body),
                len(chunk) - 1,
                1_700_000_000_000_000 + b0 + len(chunk) - 1,
            )
            + body
        )
    path = d / f"{base_offset:020d}.log"
    path.write_bytes(log)
    return path, log


def read_all(path, split=1 << 30):
    rows = []
    for s, e in seg.plan(str(path), split):
        rows += list(seg.read(str(path), s, e, Context()))
    return rows


def _check(rows, n=None, first_offset=100):
    n = len(MSGS) if n is None else n
    msgs = [r for t, r in rows if t == "messages"]
    tables.conform("messages", msgs)
    tables.conform("commands", [r for t, r in rows if t == "commands"])
    assert [m["message_id"] for m in msgs] == [str(mid) for mid, _, _ in MSGS[:n]]
    assert [m["value"] for m in msgs] == [p for _, p, _ in MSGS[:n]]
    assert [m["offset"] for m in msgs] == list(range(first_offset, first_offset + n))
    assert all(m["direction"] == "stored" and m["source"] == "segment" for m in msgs)
    assert all(m["topic"] == "1/2" and m["partition"] == 3 for m in msgs)
    assert msgs[1]["headers"] == [{"key": "k", "value": b"v"}, {"key": "n", "value": b"\x05"}]
    return msgs


@pytest.mark.parametrize("header_size,index", [(64, "end"), (56, "end"), (64, "start")])
def test_new_layout_roundtrip(tmp_path, header_size, index):
    path, _ = write_new(part_dir(tmp_path), MSGS, header_size, index=index)
    assert seg.matches(str(path)) and seg.matches(str(path.parent))
    rows = read_all(path)
    msgs = _check(rows)
    assert all(m["checksum_ok"] for m in msgs)
    assert [r for t, r in rows if t == "commands"] == []
    assert msgs[0]["message_ts_ns"] == 1_700_000_000_000_000_000


def test_new_layout_splits_at_message_boundaries(tmp_path):
    path, log = write_new(part_dir(tmp_path), MSGS)
    splits = seg.plan(str(path), 200)
    assert len(splits) > 2 and splits[0][0] == 0 and splits[-1][1] == len(log)
    assert all(a[1] == b[0] for a, b in zip(splits, splits[1:], strict=False))
    _check(read_all(path, 200))


def test_torn_last_message_and_bad_checksum(tmp_path):
    path, log = write_new(part_dir(tmp_path), MSGS)
    raw = bytearray(log[:-10])  # torn tail
    second = 64 + len(MSGS[0][1])  # first byte of message 1
    raw[second + 64] ^= 0xFF  # flip a payload byte of message 1
    path.write_bytes(bytes(raw))
    rows = read_all(path)
    msgs = [r for t, r in rows if t == "messages"]
    errs = [r for t, r in rows if t == "commands"]
    assert [m["checksum_ok"] for m in msgs] == [True, False] + [True] * 4
    assert [m["offset"] for m in msgs] == list(range(100, 106))
    statuses = sorted(e["decode_status"] for e in errs)
    assert statuses == ["checksum_mismatch", "truncated"]
    trunc = next(e for e in errs if e["decode_status"] == "truncated")
    assert trunc["stream_offset"] == sum(64 + len(p) + len(h) for _, p, h in MSGS[:6])


def test_index_mismatch_is_reported(tmp_path):
    path, _ = write_new(part_dir(tmp_path), MSGS)
    idx = path.with_suffix(".index")
    raw = bytearray(idx.read_bytes())
    struct.pack_into("<I", raw, 2 * 16 + 4, 12345)  # wrong position for message 2
    idx.write_bytes(bytes(raw))
    rows = read_all(path)
    errs = [r for t, r in rows if t == "commands"]
    assert [e["decode_status"] for e in errs] == ["index_mismatch"]
    assert len([r for t, r in rows if t == "messages"]) == len(MSGS)


def test_legacy_layout_roundtrip_and_batch_splits(tmp_path):
    path, log = write_legacy(part_dir(tmp_path), MSGS)
    assert seg.matches(str(path))
    msgs = _check(read_all(path), first_offset=0)
    assert all(m["checksum_ok"] for m in msgs)
    assert json.loads(msgs[4]["details"])["batch_base_offset"] == 3
    splits = seg.plan(str(path), 1)
    assert len(splits) == 3  # one per batch
    _check(read_all(path, 1), first_offset=0)


def test_legacy_torn_and_bad_crc(tmp_path):
    path, log = write_legacy(part_dir(tmp_path), MSGS)
    raw = bytearray(log[:-3])
    raw[24 + 4 + 45] ^= 0x01  # first payload byte of the first message
    path.write_bytes(bytes(raw))
    rows = read_all(path)
    msgs = [r for t, r in rows if t == "messages"]
    errs = [r for t, r in rows if t == "commands"]
    assert msgs[0]["checksum_ok"] is False and all(m["checksum_ok"] for m in msgs[1:])
    assert len(msgs) == 6
    assert sorted(e["decode_status"] for e in errs) == ["checksum_mismatch", "truncated"]


def test_not_a_segment(tmp_path):
    p = tmp_path / "00000000000000000000.log"
    p.write_bytes(b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x3c\x00\x00\x00\x00\x02" + b"x" * 80)
    assert not seg.matches(str(p))
    rows = list(seg.read(str(p), 0, p.stat().st_size, Context()))
    assert [r["decode_status"] for t, r in rows] == ["malformed"]
    assert not seg.matches(str(tmp_path / "missing.log"))


def test_bad_checksum_on_first_message_still_recognised(tmp_path):
    path, log = write_new(part_dir(tmp_path), MSGS)
    raw = bytearray(log)
    raw[64] ^= 0xFF  # first payload byte of message 0
    path.write_bytes(bytes(raw))
    assert seg.matches(str(path))
    msgs = [r for t, r in read_all(path) if t == "messages"]
    assert [m["checksum_ok"] for m in msgs] == [False] + [True] * 6


def test_partition_directory_through_decode_files(tmp_path):
    from brokerscope.streams import decode_files

    d = part_dir(tmp_path)
    write_new(d, MSGS, base_offset=0)
    write_new(d, MSGS[:2], base_offset=len(MSGS))
    out = decode_files([str(tmp_path / "streams")])
    assert out["_errors"] == []
    msgs = [m for m in out["messages"] if m["protocol"] == "iggy"]
    assert len(msgs) == len(MSGS) + 2
    assert sorted(m["offset"] for m in msgs) == list(range(len(MSGS) + 2))
    assert {(m["direction"], m["source"], m["topic"], m["partition"]) for m in msgs} == {
        ("stored", "segment", "1/2", 3)
    }
    assert all(m["client_ip"] is None for m in msgs)


# VSR generation: the segment is the batch records themselves (typed user-header keys)
TYPED = b"\x02" + struct.pack("<I", 1) + b"k" + b"\x02" + struct.pack("<I", 1) + b"v"
TYPED += b"\x02" + struct.pack("<I", 1) + b"n" + b"\x09" + struct.pack("<I", 1) + b"\x05"
VSR_MSGS = [(mid, payload, TYPED if hdrs else b"") for mid, payload, hdrs in MSGS]
STAMP = 1_700_000_000_000_900


def write_batches(d, msgs, per_batch=3, base_offset=100, **kw):
    log = b""
    for b0 in range(0, len(msgs), per_batch):
        chunk = msgs[b0 : b0 + per_batch]
        log += vsr_batch(
            chunk, pid=3, base=base_offset + b0, base_ts=STAMP + b0, deltas=list(range(len(chunk))), **kw
        )
    path = d / f"{base_offset:020d}.log"
    path.write_bytes(log)
    return path, log


def test_vsr_batch_layout_roundtrip_and_splits(tmp_path):
    path, _ = write_batches(part_dir(tmp_path), VSR_MSGS)
    assert seg.matches(str(path)) and seg.detect(path.read_bytes()) == "v48_batch"
    assert len(seg.plan(str(path), 1)) == 3  # one split per batch
    msgs = _check(read_all(path, 1))
    assert [r for t, r in read_all(path) if t == "commands"] == []
    assert all(m["checksum_ok"] is True for m in msgs)
    assert [m["message_ts_ns"] for m in msgs[:4]] == [STAMP * 1000] * 3 + [(STAMP + 3) * 1000]
    d = json.loads(msgs[4]["details"])
    assert (d["batch_base_offset"], d["batch_checksum_ok"], d["origin_timestamp"]) == (
        103,
        True,
        VSR_ORIGIN + 1,
    )


def test_vsr_batch_layout_torn_bad_checksums(tmp_path):
    path, log = write_batches(part_dir(tmp_path), VSR_MSGS)
    raw = bytearray(log[:-3])  # torn last batch (message 6)
    raw[256 + 48] ^= 0x01  # first payload byte of message 0: its checksum fails
    raw[256 + sum(48 + len(p) + len(h) for _, p, h in VSR_MSGS[:3]) + 16] ^= 0x01  # batch 2 base_ts
    path.write_bytes(bytes(raw))
    rows = read_all(path)
    msgs = [r for t, r in rows if t == "messages"]
    errs = [r for t, r in rows if t == "commands"]
    tables.conform("commands", errs)
    assert len(msgs) == 6 and [m["checksum_ok"] for m in msgs] == [False] + [True] * 5
    assert [json.loads(m["details"])["batch_checksum_ok"] for m in msgs] == [True] * 3 + [False] * 3
    assert sorted(e["decode_status"] for e in errs) == ["checksum_mismatch", "checksum_mismatch", "truncated"]


@pytest.mark.parametrize(
    "written,named,why",
    [
        (100, 200, "message offset 100 is below the segment's base offset 200"),
        # 16 x (2^62 - 100) bytes into the .index: Python's seek raised ValueError, killing the task
        (1 << 62, 100, f"message offset {1 << 62} is beyond the index of base offset 100"),
    ],
)
def test_message_offsets_the_index_cannot_hold_are_a_row_not_an_exception(tmp_path, written, named, why):
    path, _ = write_new(part_dir(tmp_path), MSGS, base_offset=written)
    moved = path.with_name(f"{named:020d}.log")
    path.rename(moved)
    path.with_suffix(".index").rename(moved.with_suffix(".index"))
    rows = read_all(moved)
    assert len([r for t, r in rows if t == "messages"]) == len(MSGS)
    (err,) = [r for t, r in rows if t == "commands"]
    assert err["decode_status"] == "index_mismatch" and err["decode_error"] == why


def test_a_segment_reader_that_raises_costs_its_split_not_the_task(tmp_path, monkeypatch):
    from brokerscope.config import Settings
    from brokerscope.inputs import SegmentSplit
    from brokerscope.streams import segment_rows

    path, _ = write_new(part_dir(tmp_path), MSGS)
    real = seg.read

    def broken(p, start, end, ctx):
        yield from list(real(p, start, end, ctx))[:2]
        raise RuntimeError("reader bug")

    monkeypatch.setattr(seg, "read", broken)
    splits = [SegmentSplit(str(path), "cid", "iggy_segment", 0, path.stat().st_size)]
    rows = list(segment_rows(splits, Settings.load()))
    assert [t for t, _ in rows] == ["messages", "messages", "commands"]
    err = rows[-1][1]
    assert err["decode_status"] == "decoder_error" and err["decode_error"] == "RuntimeError: reader bug"
    tables.conform("commands", [err])


def _sizes():
    return [64 + len(p) + len(h) for _, p, h in MSGS]


@pytest.mark.parametrize(
    ("name", "damage", "lost"),
    [
        # 20 bytes inserted after the second message: was 'torn last message', 5 of 7 lost
        ("gap", lambda log, at: log[: at[2]] + bytes(20) + log[at[2] :], set()),
        # message 102's payload length cut by 10: was 'torn last message', the 4 after it lost
        (
            "len",
            lambda log, at: log[: at[2] + 52] + struct.pack("<I", len(MSGS[2][1]) - 10) + log[at[2] + 56 :],
            {102},
        ),
        # message 102's payload length grown past the file's end: the same
        ("far", lambda log, at: log[: at[2] + 52] + struct.pack("<I", 10**8) + log[at[2] + 56 :], {102}),
    ],
)
def test_damage_keeps_the_messages_after_it(tmp_path, name, damage, lost):
    """Damage in the middle of a 0.5+ segment (found by a user trial): the reader finds the next
    message by its offset and checksum and reads on; the damage is one malformed row."""
    path, log = write_new(part_dir(tmp_path), MSGS)
    at = [sum(_sizes()[:i]) for i in range(len(MSGS))]
    path.write_bytes(bytes(damage(bytearray(log), at)))
    rows = read_all(path)
    good = {r["offset"] for t, r in rows if t == "messages" and r["checksum_ok"]}
    assert good == set(range(100, 107)) - lost
    errs = [r for t, r in rows if t == "commands" and r["command"] != "SegmentIndex"]
    assert errs and not any("torn" in (e["decode_error"] or "") for e in errs)
    assert any(
        e["decode_status"] == "malformed" and "skipped to the next one" in e["decode_error"] for e in errs
    )
    # each message checked against its own offset's index entry: none read is out of place
    # (was: after a lost message, every entry paired with the message after its own)
    if name != "gap":  # bytes inserted: the positions after them are the index's to doubt
        good_at = {r["offset"] for t, r in rows if t == "messages" and r["checksum_ok"]}
        doubted = {
            int(m)
            for e in errs
            if e["decode_status"] == "index_mismatch"
            for m in re.findall(r"vs message at offset (\d+)", e["decode_error"])
        }
        assert not doubted & good_at, [e["decode_error"] for e in errs]


def test_a_segment_of_one_damaged_message_is_read(tmp_path):
    """One message, its checksum failing (found by a user trial: the file was 'not a capture or
    a broker segment file', exit 4): named as a segment, its offset the name's, its sizes the
    whole file: read, the message kept and flagged."""
    path, log = write_new(part_dir(tmp_path), MSGS[:1])
    raw = bytearray(log)
    raw[64] ^= 0xFF  # a payload byte
    path.write_bytes(bytes(raw))
    assert seg.matches(str(path))
    rows = read_all(path)
    (m,) = [r for t, r in rows if t == "messages"]
    assert m["offset"] == 100 and m["checksum_ok"] is False
    elsewhere = tmp_path / "copy.log"  # not named and placed as a segment: not taken
    elsewhere.write_bytes(bytes(raw))
    assert not seg.matches(str(elsewhere))


def test_zeros_after_the_messages_end_the_log(tmp_path):
    """Zeros after the last message (found by a user trial: 4096 zero bytes were 64 phantom
    messages at offset 0, flagged)."""
    path, log = write_new(part_dir(tmp_path), MSGS)
    path.write_bytes(log + bytes(4096))
    rows = read_all(path)
    assert [r["offset"] for t, r in rows if t == "messages"] == list(range(100, 107))
    assert not [r for t, r in rows if t == "commands" and r["decode_status"] != "index_mismatch"]


@pytest.mark.parametrize("split", [200, 1 << 30])
def test_damage_read_in_splits_invents_no_offsets(tmp_path, split):
    """A damaged length walked the plan into a message: a split began inside it and read garbage
    as messages at invented offsets, the rest lost (found by a user trial)."""
    path, log = write_new(part_dir(tmp_path), MSGS)
    at = [sum(_sizes()[:i]) for i in range(len(MSGS))]
    raw = bytearray(log)
    struct.pack_into("<I", raw, at[3] + 52, 3)  # message 103's payload length
    path.write_bytes(bytes(raw))
    rows = read_all(path, split)
    offsets = [r["offset"] for t, r in rows if t == "messages"]
    assert set(offsets) <= set(range(100, 107))  # nothing invented
    assert {r["offset"] for t, r in rows if t == "messages" and r["checksum_ok"]} == set(range(100, 107)) - {
        103
    }


def test_a_damaged_first_length_is_the_segments_damage(tmp_path):
    """The first message's payload length damaged (found by a user trial: the file was rejected,
    every message lost): named as a segment, the next message found by its offset."""
    path, log = write_new(part_dir(tmp_path), MSGS)
    raw = bytearray(log)
    struct.pack_into("<I", raw, 52, 999_999)
    path.write_bytes(bytes(raw))
    assert seg.matches(str(path))
    rows = read_all(path)
    assert {r["offset"] for t, r in rows if t == "messages" and r["checksum_ok"]} == set(range(101, 107))


# VSR generation, damage in the middle of the log (found by a user trial: one batch length
# overwritten, 3 of 9 batches kept): the reader finds the next sound batch and reads on
NINE = [(2000 + i, f"m{i}-".encode() * (3 + i % 4), TYPED if i % 3 == 0 else b"") for i in range(18)]
SIZES = [len(vsr_batch(NINE[b : b + 2])) for b in range(0, 18, 2)]  # 9 batches of 2 messages
AT = [sum(SIZES[:i]) for i in range(9)]  # where each batch starts


def _set_length(log: bytes, i: int, length: int) -> bytes:
    """Batch i's batch_length (u64 at byte 32 of its header) overwritten."""
    raw = bytearray(log)
    struct.pack_into("<Q", raw, AT[i] + 32, length)
    return bytes(raw)


def _flip(log: bytes, at: int) -> bytes:
    raw = bytearray(log)
    raw[at] ^= 0x40
    return bytes(raw)


# (damage, batches lost, bytes the malformed row skips, from where)
VSR_DAMAGE = {
    # the length past the file's end: was 'torn last batch' and the 5 batches after it lost
    "length past the end": (lambda log: _set_length(log, 3, 10**9), {3}, (AT[3], SIZES[3])),
    # a length short of the batch: the read landed inside it and stopped
    "length short": (lambda log: _set_length(log, 3, 300), {3}, (AT[3], SIZES[3])),
    # a length that runs 48 bytes into the next batch
    "length long": (lambda log: _set_length(log, 3, SIZES[3] + 48), {3}, (AT[3], SIZES[3])),
    # a length below a header's size: was 'no way to find the next batch'
    "length zero": (lambda log: _set_length(log, 3, 0), {3}, (AT[3], SIZES[3])),
    # bytes inserted between two batches: none is lost
    "garbage": (lambda log: log[: AT[3]] + b"\x5a\x01" * 150 + log[AT[3] :], set(), (AT[3], 300)),
    # zeros inserted between two batches (a zero length): none is lost
    "zeros": (lambda log: log[: AT[3]] + bytes(4096) + log[AT[3] :], set(), (AT[3], 4096)),
    # a message's payload length (u32 at byte 36 of its frame) in batch 3: the frames no longer tile
    "message length": (lambda log: _flip(log, AT[3] + 256 + 36), {3}, (AT[3], SIZES[3])),
}


@pytest.mark.parametrize("split", [1, 1500, 1 << 30])
@pytest.mark.parametrize("name", list(VSR_DAMAGE))
def test_vsr_damaged_batch_keeps_the_batches_after_it(tmp_path, name, split):
    damage, lost, (skip_at, skipped) = VSR_DAMAGE[name]
    path, log = write_batches(part_dir(tmp_path), NINE, per_batch=2)
    assert len(seg.plan(str(path), 1)) == 9 and AT[-1] + SIZES[-1] == len(log)
    path.write_bytes(damage(log))
    splits = seg.plan(str(path), split)
    assert all(a[1] == b[0] for a, b in zip(splits, splits[1:], strict=False))
    rows = read_all(path, split)
    msgs = [r for t, r in rows if t == "messages"]
    errs = [r for t, r in rows if t == "commands"]
    tables.conform("messages", msgs)
    tables.conform("commands", errs)
    kept = [b for b in range(9) if b not in lost]
    assert [m["offset"] for m in msgs] == [100 + 2 * b + j for b in kept for j in (0, 1)]  # nothing invented
    assert [m["message_id"] for m in msgs] == [str(NINE[2 * b + j][0]) for b in kept for j in (0, 1)]
    assert all(m["checksum_ok"] is True for m in msgs)
    (err,) = errs  # the damage is one part
    assert (err["decode_status"], err["stream_offset"], err["size"]) == ("malformed", skip_at, skipped)
    assert err["decode_error"].startswith(f"no batch at byte {skip_at}")
    assert err["decode_error"].endswith(
        f"{skipped} bytes skipped to the next one, at byte {skip_at + skipped}"
    )


def test_vsr_flipped_message_byte_is_flagged_not_skipped(tmp_path):
    """A payload byte of batch 3 flipped: its batch still reads, the message is kept flagged."""
    path, log = write_batches(part_dir(tmp_path), NINE, per_batch=2)
    path.write_bytes(_flip(log, AT[3] + 256 + 48))
    rows = read_all(path, 1500)
    msgs = [r for t, r in rows if t == "messages"]
    assert [m["offset"] for m in msgs] == list(range(100, 118))
    assert [m["offset"] for m in msgs if not m["checksum_ok"]] == [106]
    errs = [r for t, r in rows if t == "commands"]
    assert [e["decode_status"] for e in errs] == ["checksum_mismatch"]


def test_vsr_zeros_after_the_batches_end_the_log(tmp_path):
    """Zeros after the last batch (space preallocated) end the log: no problem row (was a
    malformed 'batch length 0' row, the segment partial)."""
    path, log = write_batches(part_dir(tmp_path), NINE, per_batch=2)
    path.write_bytes(log + bytes(70_000))
    for split in (1, 1 << 30):
        rows = read_all(path, split)
        assert [r["offset"] for t, r in rows if t == "messages"] == list(range(100, 118))
        assert [r for t, r in rows if t == "commands"] == []


def test_vsr_damaged_first_batch_is_the_segments_damage(tmp_path):
    """The first batch's length damaged in a file named as a segment: still read as one, the
    batches after the damage found by their base offset and checksum (was: not a segment)."""
    path, log = write_batches(part_dir(tmp_path), NINE, per_batch=2)
    path.write_bytes(_set_length(log, 0, 7))
    assert seg.matches(str(path))
    rows = read_all(path)
    assert [r["offset"] for t, r in rows if t == "messages"] == list(range(102, 118))
    (err,) = [r for t, r in rows if t == "commands"]
    assert (err["decode_status"], err["stream_offset"], err["size"]) == ("malformed", 0, SIZES[0])
    elsewhere = tmp_path / "copy.log"  # not named and placed as a segment: not taken
    elsewhere.write_bytes(path.read_bytes())
    assert not seg.matches(str(elsewhere))


def test_vsr_resync_wants_the_base_offset_that_follows(tmp_path):
    """A sound batch whose base offset does not follow the last one read (a batch of another
    segment) is not where the read goes on: the damage runs to the batch that does."""
    path, log = write_batches(part_dir(tmp_path), NINE, per_batch=2)
    stray = vsr_batch(NINE[:2], pid=3, base=5000, base_ts=STAMP, deltas=[0, 1])
    damaged = _set_length(log, 3, 10**9)
    path.write_bytes(damaged[: AT[4]] + stray + damaged[AT[4] :])  # right after the damaged batch
    rows = read_all(path)
    assert [r["offset"] for t, r in rows if t == "messages"] == list(range(100, 106)) + list(range(108, 118))
    (err,) = [r for t, r in rows if t == "commands"]
    assert (err["stream_offset"], err["size"]) == (AT[3], len(stray) + SIZES[3])
