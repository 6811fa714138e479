"""One damaged block or record header: the rows, frame numbers, errors and damaged bytes do not
depend on the split size, and the good data after the damage is read.

Found by a user trial: a pcapng block whose total length field was damaged to a length running
past the end of the file (or a few bytes inserted between blocks that read as such a header) ended
the read of the whole file there ("truncated block", every later packet lost, exit 0 / 3), while a
read in several splits found the next block in the later splits and kept more. A pcap record
whose caplen was damaged did the same (past the end of the file), or, with a caplen that stayed in
the file, swallowed the records after it that a split starting among them read. Now the reader
resyncs after such a block or record on the next credible one, by the rule a split's start
applies, and counts the damage (malformed, damaged bytes, errors: the input `partial`).
"""

from __future__ import annotations

import random
import struct

import pytest
from capture_kit import epb, idb, pcap_bytes, read_path, shb, write
from test_capture_splits import _clean_pcap

from brokerscope import pipeline
from brokerscope.inputs import Input

AT = 100  # the damaged block / record: this many packets before it


def _as_one_read(stats: list[dict]) -> tuple:
    errors = sorted(e for st in stats for e in st["errors"])
    return (
        errors,
        sum(st["damaged"] for st in stats),
        sum(st["malformed"] for st in stats),
        sum(st["records"] for st in stats),
    )


def _assert_every_split_reads_as_one(path: str, damage: tuple[int, int], compiled: bool) -> list[dict]:
    """One split; splits that put the damage in the first split, a split boundary at the damage
    and at every byte inside the damaged bytes and just around them; fixed split sizes: the same
    rows (frame numbers included), errors, damaged bytes and records. The whole read's rows."""
    whole, (st,) = read_path(path, compiled=compiled)
    at, n = damage
    layouts = [[at + n + 300], [at + n + 4096, at + n + 9000]]  # the damage in the first split
    layouts += [[b] for b in range(at - 20, at + n + 20)]  # a boundary at, inside and around it
    layouts += [[at - 1000, b, at + n + 50] for b in (at, at + 1, at + n // 2, at + n)]
    for bounds in layouts:
        rows, stats = read_path(path, bounds=bounds, compiled=compiled)
        assert rows == whole, bounds
        assert _as_one_read(stats) == _as_one_read([st]), bounds
    for size in (300, 1000, 4096):
        rows, stats = read_path(path, split_size=size, compiled=compiled)
        assert rows == whole, size
        assert _as_one_read(stats) == _as_one_read([st]), size
    return whole


def _status(path: str, kind: str, split_size: int) -> tuple:
    """The input's status, reason and damaged bytes, from its splits' counters as the driver
    sums them."""
    _, stats = read_path(path, split_size=split_size)
    for st in stats:
        st["file_index"] = 0
    i = Input(path=path, kind=kind, size=1, mtime_ns=0, capture_id="c", file_index=0)
    status, why, _packets, damaged = pipeline._status(i, pipeline._per_file(stats)[0])
    return status, why, damaged


def _pcapng(n: int = 300) -> tuple[list[bytes], list[dict]]:
    recs, _ = _clean_pcap(n)
    return [shb("<"), idb("<", 1, tsresol=9)] + [epb("<", 0, ts, f) for ts, f in recs], recs


def _key(r: dict) -> tuple:
    return r["ts_ns"], r["seq"], r["ack"]


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize(
    "how", ["length past the end", "length past the end, big-endian", "inserted header", "inserted bytes"]
)
def test_pcapng_damaged_block_reads_the_same_at_every_split_size(tmp_path, how, compiled):
    order = ">" if "big-endian" in how else "<"
    recs, _ = _clean_pcap(300)
    blocks = [shb(order), idb(order, 1, tsresol=9)] + [epb(order, 0, ts, f) for ts, f in recs]
    clean, _ = read_path(write(tmp_path, "clean.pcapng", b"".join(blocks)))
    k = 2 + AT  # the block of packet AT
    at = sum(len(b) for b in blocks[:k])
    if how.startswith("length"):
        bad = bytearray(blocks[k])
        struct.pack_into(order + "I", bad, 4, 1 << 20)  # 1 MiB: sane, but past the end of the file
        data = b"".join(blocks[:k]) + bytes(bad) + b"".join(blocks[k + 1 :])
        damage, lost = (at, len(bad)), 1
    elif how == "inserted header":  # an EPB type and a length past the end of the file
        junk = struct.pack(order + "II", 6, 1 << 20)
        data = b"".join(blocks[:k]) + junk + b"".join(blocks[k:])
        damage, lost = (at, len(junk)), 0
    else:  # 30 bytes that break the 4-byte alignment: a header with a length past the end, and junk
        junk = struct.pack(order + "II", 6, 1 << 20) + random.Random(8).randbytes(22)
        data = b"".join(blocks[:k]) + junk + b"".join(blocks[k:])
        damage, lost = (at, len(junk)), 0
    path = write(tmp_path, "d.pcapng", data)
    whole = _assert_every_split_reads_as_one(path, damage, compiled)
    # the good data after the damage is kept: every packet but the damaged block's
    assert [_key(r) for r in whole] == [_key(r) for r in clean[:AT] + clean[AT + lost :]]
    # with the undamaged file's frame numbers (at every split size: above): a damaged packet block
    # takes its number, bytes inserted between blocks none
    assert [r["frame"] for r in whole] == [r["frame"] for r in clean[:AT] + clean[AT + lost :]]
    _, (st,) = read_path(path, compiled=compiled)
    assert st["malformed"] == 1 and st["damaged"] == damage[1], st
    assert any(e.startswith(f"bad block length {1 << 20} at offset ") for e in st["errors"]), st["errors"]
    assert f"resynced at offset {at + damage[1]} (skipped {damage[1]} bytes)" in st["errors"]
    # recorded: the input is partial, saying why, at every split size
    for size in (0, 1000):
        status, why, damaged = _status(path, "pcapng", size)
        assert (status, damaged) == ("partial", damage[1]) and "bad block length" in why


def test_pcapng_cut_last_block_is_still_a_truncation(tmp_path):
    """A block running past the end with no credible block after it is a cut file, as before."""
    blocks, _ = _pcapng(60)
    clean, _ = read_path(write(tmp_path, "clean.pcapng", b"".join(blocks)))
    path = write(tmp_path, "cut.pcapng", b"".join(blocks)[:-40])
    whole, (st,) = read_path(path)
    assert whole == clean[:-1] and st["malformed"] == 0 and st["damaged"] == len(blocks[-1]) - 40
    assert [e for e in st["errors"] if e.startswith("truncated block at offset")], st["errors"]
    for size in (300, 1000):
        rows, stats = read_path(path, split_size=size)
        assert rows == whole and _as_one_read(stats) == _as_one_read([st])


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("caplen", [200_000, 60_000, 4096, 300, "to a later record"])
def test_pcap_damaged_caplen_reads_the_same_at_every_split_size(tmp_path, caplen, compiled):
    """A caplen past the end of the file (was: the read stopped there), one that stays in the file
    (was: the records it swallowed were read by a split starting among them only), one that ends
    exactly where a later record begins (the header after it sound: a record longer than its frame
    on the wire gives it away)."""
    recs, raw = _clean_pcap(300)
    clean, _ = read_path(write(tmp_path, "clean.pcap", raw))
    at = 24 + sum(16 + len(f) for _, f in recs[:AT])
    if caplen == "to a later record":
        caplen = sum(16 + len(f) for _, f in recs[AT : AT + 5]) - 16
    b = bytearray(raw)
    struct.pack_into("<I", b, at + 8, caplen)
    path = write(tmp_path, "d.pcap", bytes(b))
    size = 16 + len(recs[AT][1])
    whole = _assert_every_split_reads_as_one(path, (at, size), compiled)
    assert [_key(r) for r in whole] == [_key(r) for r in clean[:AT] + clean[AT + 1 :]]
    # the damaged record takes its frame number (as Wireshark numbers it), so the frames after it
    # keep the undamaged file's, at every split size (above)
    assert [r["frame"] for r in whole] == [r["frame"] for r in clean[:AT] + clean[AT + 1 :]]
    _, (st,) = read_path(path, compiled=compiled)
    assert st["malformed"] == 1 and st["damaged"] == size, st
    assert st["errors"] == [
        f"bad record header at offset {at} (caplen {caplen}, origlen {len(recs[AT][1])})",
        f"resynced at offset {at + size} (skipped {size} bytes)",
    ]
    for split in (0, 1000):
        status, why, damaged = _status(path, "pcap", split)
        assert (status, damaged) == ("partial", size) and "bad record header" in why


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("short", [1, 20])
def test_pcap_caplen_damaged_smaller_is_read_whole(tmp_path, short, compiled):
    """A caplen damaged smaller than its frame (a user trial: 20 less; the snap length larger)
    was read as a packet cut by the snap length, the rest of its bytes damage up to the next
    record: a TubeMQ message lost as a gap. The next record starts where the frame's original
    length ends: the record is read whole, the damage named, at every split size."""
    recs, raw = _clean_pcap(300)
    clean, _ = read_path(write(tmp_path, "clean.pcap", raw))
    at = 24 + sum(16 + len(f) for _, f in recs[:AT])
    wire = len(recs[AT][1])
    b = bytearray(raw)
    struct.pack_into("<I", b, at + 8, wire - short)
    path = write(tmp_path, "d.pcap", bytes(b))
    whole = _assert_every_split_reads_as_one(path, (at, 16 + wire), compiled)
    assert whole == clean
    _, (st,) = read_path(path, compiled=compiled)
    assert (st["malformed"], st["damaged"], st["snap_truncated"]) == (1, 0, 0), st
    assert st["errors"] == [
        f"bad record header at offset {at} (caplen {wire - short}, origlen {wire}): "
        f"read as {wire} bytes, where the next record starts"
    ]
    for split in (0, 1000):
        status, why, damaged = _status(path, "pcap", split)
        assert (status, damaged) == ("partial", 0) and "bad record header" in why


def test_pcap_time_jump_is_read_not_damage(tmp_path):
    """A record a day and more after the one before (a capture paused): read, no error."""
    recs, _ = _clean_pcap(100)
    recs = recs[:50] + [(ts + 3 * 86400 * 10**9, f) for ts, f in recs[50:]]
    path = write(tmp_path, "j.pcap", pcap_bytes(recs))
    whole, (st,) = read_path(path)
    assert len(whole) == len(recs) and st["errors"] == [] and st["damaged"] == 0
    whole_py, (st_py,) = read_path(path, compiled=False)
    assert whole_py == whole and st_py["errors"] == []
