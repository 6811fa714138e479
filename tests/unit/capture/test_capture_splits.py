"""Splits: every split size gives exactly the rows of an unsplit read; damage is survived."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from capture_kit import ROW_COLS, custom, epb, idb, isb, nrb, pcap_bytes, read_path, shb, total, write
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, CookedLinux, Ether
from scapy.packet import Raw

from brokerscope.capture import Split, capture_id, identify, parse_stats, plan_splits, read_split
from brokerscope.capture.decode import READ_PYTHON_ENV
from tests.conftest import CAPTURES, SAMPLE_DATA

TS = 1_650_000_000_000_000_000
SPLIT_SIZES = (300, 1000, 4096)
ETH = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def _templates():
    """A few frames of each kind; per-packet variety comes from patching seq and payload size."""
    rnd = random.Random(1)
    out = []
    for i in range(8):
        payload = rnd.randbytes(rnd.choice([0, 1, 7, 60, 200, 333]))
        if i % 4 == 3:
            ip = IPv6(src=f"2001:db8::{i}", dst="2001:db8::ff")
        else:
            ip = IP(src=f"10.0.{i}.1", dst="10.9.9.9")
        out.append(bytes(ip / TCP(sport=40000 + i, dport=9092, flags="PA") / Raw(payload)))
    return out


TEMPLATES = _templates()
_UDP_RAW = bytes(IP() / UDP())
_SLL_HDR = {4: bytes(CookedLinux(proto=0x0800)), 6: bytes(CookedLinux(proto=0x86DD))}


def _records(n: int, rnd: random.Random):
    """(ts_ns, L3 packet bytes) for n packets: mostly TCP, some UDP/ARP-like noise."""
    ts = TS
    out = []
    for i in range(n):
        ts += rnd.randrange(1, 3_000_000_000)
        if i % 50 == 49:
            out.append((ts, None))  # a non-TCP record
            continue
        pkt = bytearray(TEMPLATES[i % len(TEMPLATES)])
        l4 = 20 if pkt[0] >> 4 == 4 else 40
        struct.pack_into(">II", pkt, l4 + 4, rnd.getrandbits(32), i)  # seq, ack (checksum left stale)
        out.append((ts, bytes(pkt)))
    return out


_NOISE = [bytes(Ether(**ETH) / ARP()), bytes(Ether(**ETH) / IP() / UDP() / Raw(b"u" * 20))]
_ETH_HDR = {4: bytes(Ether(**ETH, type=0x0800)), 6: bytes(Ether(**ETH, type=0x86DD))}


def _eth(l3: bytes | None, i: int) -> bytes:
    if l3 is None:
        return _NOISE[i % 2]
    return _ETH_HDR[l3[0] >> 4] + l3


def _assert_split_equivalence(path: str, expect_rows: int):
    whole, (st,) = read_path(path)
    assert len(whole) == expect_rows
    assert len({r["rec_offset"] for r in whole}) == len(whole)
    for size in SPLIT_SIZES:
        rows, stats = read_path(path, split_size=size, batch_packets=97)
        assert len(stats) > 1
        assert rows == whole, f"split size {size}"
        for key in ("records", "tcp", "udp", "other", "bytes", "malformed"):
            assert total(stats, key) == st[key], (size, key)
        assert min(s["first_ts_ns"] for s in stats if s["first_ts_ns"] is not None) == st["first_ts_ns"]
        assert max(s["last_ts_ns"] for s in stats if s["last_ts_ns"] is not None) == st["last_ts_ns"]
    return whole, st


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("nano", [False, True])
def test_pcap_splits_equal_unsplit(tmp_path, order, nano):
    rnd = random.Random(2)
    recs = _records(2500, rnd)
    frames = [(ts, _eth(l3, i)) for i, (ts, l3) in enumerate(recs)]
    path = write(tmp_path, "s.pcap", pcap_bytes(frames, order=order, nano=nano, snaplen=300))
    n_tcp = sum(1 for _, l3 in recs if l3 is not None)
    _, st = _assert_split_equivalence(path, n_tcp)
    assert st["records"] == 2500 and st["snap_truncated"] > 0 and st["errors"] == []


@pytest.mark.parametrize("second", ["<", ">"])
@pytest.mark.parametrize("compiled", [True, False])
def test_pcapng_multi_interface_multi_section_splits_equal_unsplit(tmp_path, monkeypatch, second, compiled):
    """A split inside a later section reads its packets with that section's interfaces, in the
    same byte order as the first section too (pcapng files joined by `cat`: a user trial found a
    split there timed by the first section's nanoseconds, 1970 rows and exit 0)."""
    import brokerscope.capture.reader as reader

    walks = []
    real_walk = reader._section_at

    def counting_walk(buf, target, dec):
        walks.append(target)
        return real_walk(buf, target, dec)

    monkeypatch.setattr(reader, "_section_at", counting_walk)
    if not compiled:
        monkeypatch.setenv(READ_PYTHON_ENV, "1")
    rnd = random.Random(3)
    recs = _records(3000, rnd)
    parts = [
        shb("<"),
        idb("<", 1),  # 0: Ethernet, microseconds
        idb("<", 101, tsresol=9),  # 1: raw IP, nanoseconds
        idb("<", 113, tsresol=0x80 | 24, tsoffset=-5),  # 2: Linux cooked, 2^-24 s
    ]
    n_if = 3
    order = "<"
    units = {
        0: lambda t: t // 1000,
        1: lambda t: t,
        2: lambda t: ((t + 5 * 10**9) << 24) // 10**9,
        3: lambda t: t // 10**6,
    }

    def body(iface: int, l3: bytes | None, i: int) -> bytes:
        if l3 is None:
            return _eth(None, i) if iface in (0, 3) else _UDP_RAW
        if iface in (0, 3):
            return _eth(l3, i)
        if iface == 1:
            return l3
        return _SLL_HDR[l3[0] >> 4] + l3

    for i, (ts, l3) in enumerate(recs):
        if i == 1000:
            parts.append(idb(order, 1, tsresol=3))  # 3: appended mid-section, milliseconds
            n_if = 4
        if i == 1800:  # a second section, interface ids mean other things now
            order = second
            parts += [shb(order), idb(order, 101, tsresol=9), idb(order, 1)]
            units = {0: lambda t: t, 1: lambda t: t // 1000}
            n_if = 2
        if i % 97 == 0:
            parts.append(rnd.choice([nrb(order), isb(order), custom(order)]))
        iface = i % n_if
        if i >= 1800:
            lt_iface = {0: 1, 1: 0}[iface]  # reuse body(): raw IP is 1, Ethernet is 0 there
        else:
            lt_iface = iface
        parts.append(epb(order, iface, units[iface](ts), body(lt_iface, l3, i)))
    path = write(tmp_path, "s.pcapng", b"".join(parts))
    n_tcp = sum(1 for _, l3 in recs if l3 is not None)
    whole, st = _assert_split_equivalence(path, n_tcp)
    # the custom blocks among them are frames (Wireshark numbers them), not packets
    assert st["errors"] == [] and st["records"] - st["other_frames"] == 3000 and st["other_frames"] > 0
    # the splits in the second section learned its interfaces from the file head
    assert walks and max(walks) > len(b"".join(parts)) * 0.6
    # the timestamps survive every resolution (ms and us interfaces round down)
    want = {ts for ts, l3 in recs if l3 is not None}
    got = {r["ts_ns"] for r in whole}
    assert len(got & want) > len(want) // 3


def _clean_pcap(n: int = 400):
    rnd = random.Random(4)
    recs = [(ts, _eth(l3, i)) for i, (ts, l3) in enumerate(_records(n, rnd)) if l3 is not None]
    return recs, pcap_bytes(recs)


def _boundary(recs, k: int) -> int:
    return 24 + sum(16 + len(f) for _, f in recs[:k])


def test_garbage_in_the_middle_resyncs(tmp_path):
    recs, raw = _clean_pcap()
    clean, _ = read_path(write(tmp_path, "clean.pcap", raw))
    cut = _boundary(recs, 150)
    junk = random.Random(5).randbytes(1234)
    path = write(tmp_path, "junk.pcap", raw[:cut] + junk + raw[cut:])
    rows, (st,) = read_path(path)
    for r in rows[150:]:
        r["rec_offset"] -= len(junk)
    assert rows == clean
    assert st["malformed"] == 1
    assert any(e.startswith(f"bad record header at offset {cut}") for e in st["errors"])
    assert any(f"resynced at offset {cut + len(junk)}" in e for e in st["errors"])
    whole, _ = read_path(path)
    for size in SPLIT_SIZES:
        _assert_split_rows_around_damage(read_path(path, split_size=size)[0], whole, 150)


def _no_frames(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "frame"} for r in rows]


def _assert_split_rows_around_damage(rows, whole, first_after: int):
    """Split reads of a damaged file agree with the unsplit read, except that a split starting
    just before the garbage cannot validate a header chain through it: up to CHAIN-1 records right
    before the garbage may be missed there. Never a duplicate, nothing else lost. (Frame numbers
    past damage are not compared: missed records shift them, and Wireshark stops at damage.)"""
    rows, whole = _no_frames(rows), _no_frames(whole)
    assert len({r["rec_offset"] for r in rows}) == len(rows)
    assert all(r in whole for r in rows)
    missing = [i for i, r in enumerate(whole) if r not in rows]
    assert all(first_after - 3 <= i < first_after for i in missing), missing


def test_garbage_inside_a_record_loses_only_that_record(tmp_path):
    recs, raw = _clean_pcap()
    clean, _ = read_path(write(tmp_path, "clean.pcap", raw))
    cut = _boundary(recs, 200) + 16 + 20  # inside record 200's data
    rows, (st,) = read_path(write(tmp_path, "j.pcap", raw[:cut] + b"\xfe" * 77 + raw[cut:]))
    assert [r["ack"] for r in rows if r["ack"] != clean[200]["ack"]] == [
        r["ack"] for r in clean if r["ack"] != clean[200]["ack"]
    ]
    assert len(rows) >= len(clean) - 1 and st["errors"]


def test_truncated_last_record(tmp_path):
    recs, raw = _clean_pcap(100)
    clean, _ = read_path(write(tmp_path, "clean.pcap", raw))
    rows, (st,) = read_path(write(tmp_path, "t.pcap", raw[:-10]))
    assert rows == clean[:-1]
    assert any(
        e.startswith(f"truncated record at offset {_boundary(recs, len(recs) - 1)}") for e in st["errors"]
    )
    rows, (st,) = read_path(write(tmp_path, "t2.pcap", raw + b"\x01\x02\x03"))  # a partial header
    assert rows == clean and any("truncated record header" in e for e in st["errors"])
    for size in SPLIT_SIZES:
        assert read_path(write(tmp_path, "t3.pcap", raw[:-10]), split_size=size)[0] == clean[:-1]


def test_absurd_caplen(tmp_path):
    recs, raw = _clean_pcap(100)
    clean, _ = read_path(write(tmp_path, "clean.pcap", raw))
    b = bytearray(raw)
    at = _boundary(recs, 40)
    struct.pack_into("<I", b, at + 8, 0x7FFFFFF0)  # caplen of record 40
    rows, (st,) = read_path(write(tmp_path, "a.pcap", bytes(b)))
    # record 40 is not read, but numbered (a frame with no packet, as Wireshark numbers a
    # record): the frame numbers after it are the undamaged file's
    assert _no_frames(rows) == _no_frames(clean[:40] + clean[41:])
    assert [r["frame"] for r in rows] == [r["frame"] for r in clean[:40] + clean[41:]]
    assert any(e.startswith(f"bad record header at offset {at} (caplen {0x7FFFFFF0}") for e in st["errors"])
    # and an absurd caplen in the very last record: stops cleanly
    b = bytearray(raw)
    struct.pack_into("<I", b, _boundary(recs, len(recs) - 1) + 8, 0xFFFFFFFF)
    rows, (st,) = read_path(write(tmp_path, "b.pcap", bytes(b)))
    assert rows == clean[:-1] and st["errors"]


def test_pcapng_damage(tmp_path):
    blocks = [shb("<"), idb("<", 1, tsresol=9)]
    recs, _ = _clean_pcap(60)
    blocks += [epb("<", 0, ts, f) for ts, f in recs]
    clean, _ = read_path(write(tmp_path, "c.pcapng", b"".join(blocks)))
    assert len(clean) == len(recs)
    # garbage between blocks, of a length that breaks 4-byte alignment
    dam = blocks[:30] + [random.Random(6).randbytes(1001)] + blocks[30:]
    rows, (st,) = read_path(write(tmp_path, "g.pcapng", b"".join(dam)))
    assert [r["ack"] for r in rows] == [r["ack"] for r in clean]
    assert st["malformed"] == 1 and any("resynced" in e for e in st["errors"])
    whole, _ = read_path(write(tmp_path, "g.pcapng", b"".join(dam)))
    for size in SPLIT_SIZES:
        rows = read_path(write(tmp_path, "g.pcapng", b"".join(dam)), split_size=size)[0]
        _assert_split_rows_around_damage(rows, whole, 28)
    # an absurd block length
    bad = bytearray(blocks[10])
    struct.pack_into("<I", bad, 4, 0x7FFFFFF0)
    rows, (st,) = read_path(write(tmp_path, "a.pcapng", b"".join(blocks[:10] + [bytes(bad)] + blocks[11:])))
    assert [r["ack"] for r in rows] == [r["ack"] for r in clean[:8] + clean[9:]]
    assert any("bad block length" in e for e in st["errors"])
    # a truncated last block
    rows, (st,) = read_path(write(tmp_path, "t.pcapng", b"".join(blocks)[:-7]))
    assert rows == clean[:-1] and any("truncated block" in e for e in st["errors"])


def _read_range(path: str, start: int, end: int) -> tuple[list[dict], dict]:
    """(rows, stats) of the split [start, end) of a pcap."""
    batches = list(read_split(Split(path, "c", 0, "pcap", start, end)))
    rows = [r for b in batches[:-1] for r in b.to_pylist()]
    return rows, parse_stats(batches[-1])


def _assert_every_start_agrees(path: str, starts) -> None:
    whole, _ = _read_range(path, 0, 1 << 40)
    for start in starts:
        head, hst = _read_range(path, 0, start)
        tail, st = _read_range(path, start, 1 << 40)
        for r in tail:  # the tail's records follow the head's (capture.files.FrameNumbers)
            r["record_no"] += hst["records"]
        assert head + tail == whole, start
        assert st["errors"] == [] and st["damaged"] == 0 and st["empty_records"] == 0, (start, st)


def test_split_starting_inside_real_vsr_frames():
    """The real Iggy client's VSR frames open with a 256-byte consensus header that is mostly
    zeros. 16 zero bytes read as an empty record at time 0; four in a row passed for a header
    chain, so a split starting inside such a frame took the zeros for records, and every later
    resync then wanted timestamps within a day of 1970: the rest of the split was lost as damage
    (bench/pipeline_bench.py: 313 of 12,500 copies of this capture, the last 3.4 MB of the
    first 128 MiB split's successor)."""
    path = str(SAMPLE_DATA / "iggy" / "client_vsr.pcap")
    whole, _ = _read_range(path, 0, 1 << 40)
    offs = [r["rec_offset"] for r in whole]
    # records 8-12: requests and replies of 302-368 bytes, each a VSR header and a body
    _assert_every_start_agrees(path, range(offs[8] + 1, offs[13]))


def test_split_starting_inside_payloads_that_look_like_empty_records(tmp_path):
    """Zeros (origlen 0) and arrays of 16-byte structs that read as empty records of plausible
    times are not a header chain: a chain needs CHAIN non-empty records."""
    rnd = random.Random(7)
    recs, _ = _clean_pcap(40)
    sec = recs[0][0] // 10**9
    fake = b"".join(struct.pack("<IIII", sec, i, 0, 60) for i in range(6))
    frames = []
    for i, (ts, f) in enumerate(recs):
        pad = [bytes(300), fake + rnd.randbytes(40), bytes(64) + fake + rnd.randbytes(9)][i % 3]
        frames.append((ts, f + pad))
    path = write(tmp_path, "z.pcap", pcap_bytes(frames))
    whole, (st,) = read_path(path)
    assert len(whole) == len(recs) and st["errors"] == []
    offs = [r["rec_offset"] for r in whole]
    _assert_every_start_agrees(path, range(offs[3] + 1, offs[6]))  # one of each pad


def _enclosing(offs: list[int], q: int) -> range:
    """The split starts inside the record holding byte q, up to q (offs: the file's record offsets)."""
    i = max(k for k, o in enumerate(offs) if o <= q)
    return range(offs[i] + 1, q + 1)


def test_split_starting_where_a_false_chain_runs_past_the_end_of_the_file():
    """A chain cut by the end of the file passes after one complete record (a truly truncated last
    record must keep its place), but two payload strides that read as headers, the second's
    "record" running past the end, passed too: 351 start offsets of gzip.pcap took Kafka payload
    for records (at time 0), and 477 of client_vsr.pcap (in the year 2098). A cut chain must now
    start within a year after the file's first record."""
    for path, false_starts in (
        (SAMPLE_DATA / "kafka" / "gzip.pcap", (3205, 10744)),
        (SAMPLE_DATA / "iggy" / "client_vsr.pcap", (10754,)),
    ):
        whole, _ = _read_range(str(path), 0, 1 << 40)
        offs = [r["rec_offset"] for r in whole]
        for q in false_starts:
            assert q not in offs
            _assert_every_start_agrees(str(path), _enclosing(offs, q))


def test_a_false_start_does_not_lock_in_the_rest_of_the_split(tmp_path):
    """A pcap inside a payload (a capture sent as a message: here the records of two public Kafka
    captures from 2021, inside a 2026 frame of gzip.pcap) is a chain of genuine record headers, and
    a split starting just before it takes it for records. 16 bytes of junk followed; the resync
    there wanted times within a day of the embedded records', the carrying capture's records never
    validated again, and the rest of the split was lost as damage. Now a resync that finds no chain
    near the last record's time within REF_REACH bytes takes the first chain it found."""
    src = SAMPLE_DATA / "kafka" / "gzip.pcap"
    data = src.read_bytes()
    whole, _ = _read_range(str(src), 0, 1 << 40)
    at = [r["rec_offset"] for r in whole][20]
    emb = b"".join(
        (CAPTURES / "deepflow" / n).read_bytes()[24:]  # two records each, 56 s apart
        for n in ("18-api-versions-v3.pcap", "01-fetch-v12-perf.pcap")
    )
    extra = emb + b"\xff" * 16  # fraction 0xffffffff: a bad header
    s, f, cl, ol = struct.unpack_from("<IIII", data, at)
    rec = struct.pack("<IIII", s, f, cl + len(extra), ol + len(extra)) + data[at + 16 : at + 16 + cl]
    nxt = at + len(rec) + len(extra)
    path = write(tmp_path, "p.pcap", data[:at] + rec + extra + data[at + 16 + cl :])
    whole, st = _read_range(path, 0, 1 << 40)
    assert st["errors"] == [] and st["damaged"] == 0
    for start in (at + 1, at + 16 + cl):
        tail, st = _read_range(path, start, 1 << 40)
        after = [r for r in tail if r["rec_offset"] >= nxt], [r for r in whole if r["rec_offset"] >= nxt]
        for r in after[0] + after[1]:
            r.pop("record_no", None)  # the tail's numbering starts where it resynced
        assert after[0] == after[1]
        assert st["damaged"] == 16, st


@pytest.mark.parametrize(
    "path", [SAMPLE_DATA / "kafka" / "lz4.pcap", CAPTURES / "ndpi" / "kafka.pcapng"], ids=lambda p: p.name
)
def test_batches_end_at_batch_bytes(path):
    """A packets batch ends once batch_bytes of records were read for it, so a task holding one
    batch holds about that much however large the packets are; the rows are the same."""
    whole, (st,) = read_path(str(path))
    sp = plan_splits(str(path), 0, capture_id(str(path)), identify(str(path)), 0)[0]
    bb = 1024
    batches = list(read_split(sp, batch_packets=1 << 20, batch_bytes=bb))[:-1]
    assert sum(b.num_rows for b in batches) == len(whole) and len(batches) > 5
    rows = [r for b in batches for r in b.select(list(ROW_COLS)).to_pylist()]
    assert rows == _no_frames(whole)
    for b, after in zip(batches, batches[1:]):
        offsets, wire = b.column("rec_offset").to_pylist(), b.column("wire_len").to_pylist()
        # reached the bound: the records behind it span at least bb bytes ...
        assert after.column("rec_offset")[0].as_py() - offsets[0] >= bb
        # ... and was not cut later than the record that reached it (captured whole: caplen = wire_len)
        assert sum(wire[:-1]) < bb
    assert st["snap_truncated"] == 0


def test_pcapng_split_inside_its_last_block_reads_nothing_wrong():
    """The public Iggy capture ends with an Interface Statistics Block; a split starting inside
    the block before it once took bytes near the end of the file for a block in the other byte
    order, with three left over: "truncated block header at offset 4117", the input partial.
    Every split size gives the whole file's records, and no error."""
    path = str(SAMPLE_DATA / "public" / "iggy-rs.pcapng")
    whole, (st,) = read_path(path)
    assert st["errors"] == []
    for size in (300, 777, 1000, 2000, 3000):
        rows, stats = read_path(path, split_size=size)
        assert len(stats) > 1
        assert rows == whole, size
        assert [e for s in stats for e in s["errors"]] == [], size


def _truncation(stats: list[dict]) -> tuple[list[str], int]:
    """What the splits of a read said of a cut end: their truncation errors and damaged bytes."""
    errors = [e for st in stats for e in st["errors"] if e.startswith("truncated")]
    return errors, sum(st["damaged"] for st in stats)


@pytest.mark.parametrize(
    "name, sizes",
    [
        ("pulsar/pulsar_chunked.pcap", (300, 1000, 4096)),
        ("kafka/share.pcap", (1000, 4096)),
        ("public/iggy-rs.pcapng", (300, 1024)),
    ],
)
def test_a_cut_end_is_reported_whatever_the_split_size(tmp_path, name, sizes):
    """A capture cut inside its last record says so (`partial`) at every split size: where the
    cut record starts in the next split, that split's first resync cannot land on it (a chain
    needs one whole record), and the split before says it, as a read of the whole file does.
    Found as a user: pulsar_chunked.pcap cut at byte 22,792 read cleanly with 4,096-byte splits."""
    data = (SAMPLE_DATA / name).read_bytes()
    rnd = random.Random(13)
    cuts = [22792] if name.startswith("pulsar") else []
    cuts += sorted(rnd.sample(range(len(data) // 3, len(data) - 1), 40))
    for cut in cuts:
        path = write(tmp_path, f"cut{Path(name).suffix}", data[:cut])
        whole_rows, whole_stats = read_path(path)
        for size in sizes:
            rows, stats = read_path(path, split_size=size)
            assert rows == whole_rows, (cut, size)
            assert _truncation(stats) == _truncation(whole_stats), (cut, size)


def _as_one_read(stats: list[dict]) -> tuple[list[str], int, int]:
    """What a read said of the file's structure, whichever splits said it: errors, damaged bytes,
    records."""
    errors = sorted(e for st in stats for e in st["errors"])
    return errors, sum(st["damaged"] for st in stats), sum(st["records"] for st in stats)


def _assert_splits_read_as_one(path: str, sizes) -> None:
    whole_rows, whole_stats = read_path(path)
    for size in sizes:
        rows, stats = read_path(path, split_size=size)
        assert rows == whole_rows, size  # frame numbers included
        assert _as_one_read(stats) == _as_one_read(whole_stats), size


def test_records_a_split_start_cannot_resync_on_are_read_by_the_split_before(tmp_path):
    """Found as a user: where the records after a split's start do not validate as a resync chain
    (a timestamp a day away from its neighbours, damage), the split's first resync lands later,
    and the records between were read by no split: with 4,096-byte splits share.pcap with one
    record's seconds changed lost that record without a word, and every frame number after it
    was one too low (Wireshark's "Go to packet" went to the wrong packet). The split before now
    reads on to where the next one's resync lands, and frames are numbered from where each
    split's records begin."""
    data = bytearray((SAMPLE_DATA / "kafka" / "share.pcap").read_bytes())
    struct.pack_into("<I", data, 20688, 3950494295)  # record 151's ts_sec, 62 years on
    _assert_splits_read_as_one(write(tmp_path, "ts.pcap", bytes(data)), (1000, 4096))
    ng = bytearray((CAPTURES / "ndpi" / "kafka.pcapng").read_bytes())
    ng[2745:2795] = bytes(50)  # inside an EPB: its trailing length and the next block damaged
    _assert_splits_read_as_one(write(tmp_path, "zeros.pcapng", bytes(ng)), (1024,))


@pytest.mark.parametrize("name, sizes", [("kafka/share.pcap", (4096,)), ("ndpi/kafka.pcapng", (1024,))])
def test_random_damage_reads_the_same_at_every_split_size(tmp_path, name, sizes):
    """Random garbage (8-50 bytes) written over a real capture: the splits give the whole read's
    rows, frame numbers, errors and damaged bytes (before: 4 and 32 of 200 such files differed)."""
    src = (SAMPLE_DATA if name.startswith("kafka/") else CAPTURES) / name
    data = src.read_bytes()
    rnd = random.Random(7)
    for _ in range(40):
        b = bytearray(data)
        at = rnd.randrange(len(b) // 4, len(b) - 60)
        n = rnd.randrange(8, 50)
        b[at : at + n] = bytes(rnd.randrange(256) for _ in range(n))
        _assert_splits_read_as_one(write(tmp_path, f"g{src.suffix}", bytes(b)), sizes)
