"""Payloads as offsets into their files (the shuffle path): the read stage gives payload_at, the
decode stage reads the bytes back, and a file that changed in between is a named, partial input."""

from __future__ import annotations

import gzip
import os
import shutil

import pyarrow as pa
import pytest

from brokerscope import pipeline, tables
from brokerscope.capture import capture_id, identify, plan_splits, read_split
from brokerscope.config import Settings
from brokerscope.streams import SORT_COLS, PayloadFiles, StreamDriver
from tests.conftest import CAPTURES, SAMPLE_DATA

CAP = SAMPLE_DATA / "kafka" / "lz4.pcap"


def _batches(path: str, refs: bool) -> list[pa.RecordBatch]:
    out = []
    for sp in plan_splits(path, 0, capture_id(path), identify(path), 0):
        out.extend(read_split(sp, payload_refs=refs))
    return out


def _table(batches: list[pa.RecordBatch]) -> pa.Table:
    return pa.Table.from_batches(batches, schema=tables.PACKETS)


@pytest.mark.parametrize("cap", [CAP, CAPTURES / "ndpi" / "kafka.pcapng"], ids=lambda p: p.name)
def test_offsets_point_at_the_very_payload_bytes(cap):
    inline, refs = _table(_batches(str(cap), False)), _table(_batches(str(cap), True))
    assert inline.num_rows == refs.num_rows > 40
    others = [c for c in tables.PACKETS.names if c not in ("payload", "payload_at")]
    assert inline.select(others).equals(refs.select(others))
    assert inline.column("payload_at").null_count == inline.num_rows
    data = cap.read_bytes()
    rows = zip(*(refs.column(c).to_pylist() for c in ("lo_ip", "payload", "payload_at", "payload_len")))
    got = []
    for lo_ip, p, at, n in rows:
        if lo_ip is not None:  # a packet (not the split's stats row): its payload is an offset
            assert p is None and at is not None
            p = data[at : at + n]
        got.append(p)
    assert got == inline.column("payload").to_pylist()


def test_gzip_captures_keep_their_payloads_inline(tmp_path):
    gz = tmp_path / "lz4.pcap.gz"
    with gzip.open(gz, "wb") as f:
        f.write(CAP.read_bytes())
    t = _table(_batches(str(gz), True))
    assert t.column("payload_at").null_count == t.num_rows
    assert t.column("payload").to_pylist() == _table(_batches(str(CAP), False)).column("payload").to_pylist()


def _decode(path: str, files: dict) -> tuple[dict[str, int], StreamDriver]:
    t = _table(_batches(path, True)).sort_by([(c, "ascending") for c in SORT_COLS])
    drv = StreamDriver(Settings.load(), [capture_id(path)], PayloadFiles(files))
    counts: dict[str, int] = {}
    for table, row in drv.run_batches(t.to_batches()):
        counts[table] = counts.get(table, 0) + tables.size(row)
    return counts, drv


def test_decoding_reads_the_payloads_back(tmp_path):
    path = str(tmp_path / "c.pcap")
    shutil.copy(CAP, path)
    st = os.stat(path)
    counts, drv = _decode(path, {0: (path, st.st_size, st.st_mtime_ns)})
    assert counts["messages"] == 24 and counts["commands"] == 66
    assert not any(s.get("errors") for s in drv.capture_stats)


def test_a_file_changed_between_the_stages_loses_its_payloads_not_the_task(tmp_path):
    """Rewritten after the read stage: no other bytes are taken for its payloads; the input
    is named as changed (its inputs row is partial) and the decode finishes."""
    path = str(tmp_path / "c.pcap")
    shutil.copy(CAP, path)
    st = os.stat(path)
    counts, drv = _decode(path, {0: (path, st.st_size + 1, st.st_mtime_ns)})
    assert counts.get("messages", 0) == 0 and counts["streams"] == 5
    errors = [e for s in drv.capture_stats if s.get("file_index") == 0 for e in s.get("errors", [])]
    assert any("changed while the run read it" in e for e in errors), errors
    # each decode task holding some of its connections says so: the run names it once (a user
    # trial saw the warning four times, and the inputs row's error repeated it)
    grown = [
        {**s, "errors": [e.replace("->", "-> 9") for e in s.get("errors", [])]} for s in drv.capture_stats
    ]
    per_file = pipeline._per_file(drv.capture_stats * 3 + grown)  # the last task saw it larger
    assert per_file[0]["errors"] == list(dict.fromkeys(errors))


def test_a_changed_file_truncates_the_packets_that_had_payload_bytes_only(tmp_path):
    """Its packets without payload lose nothing: a pure ACK reads no bytes, and is not counted
    as snap-truncated when the file is gone."""
    path = str(tmp_path / "c.pcap")
    shutil.copy(CAP, path)
    st = os.stat(path)
    t = _table(_batches(path, True)).sort_by([(c, "ascending") for c in SORT_COLS])
    files = PayloadFiles({0: (path, st.st_size + 1, st.st_mtime_ns)})
    drv = StreamDriver(Settings.load(), [capture_id(path)], files)
    streams = [row for table, row in drv.run_batches(t.to_batches()) if table == "streams"]
    lens = t.column("payload_len").to_pylist()
    refs = [n for n, at in zip(lens, t.column("payload_at").to_pylist()) if at is not None]
    assert 0 < refs.count(0) < len(refs)
    assert sum(r["snap_truncated_packets"] for r in streams) == len(refs) - refs.count(0)
    assert files.read(0, 0, 0, False) == (b"", False)


def test_payloads_read_back_are_let_go_window_by_window(tmp_path, monkeypatch):
    """The lane reads payloads back READ_AHEAD packets ahead of it; the batch's list lets go of
    those of the window it decoded when it reads the next: a batch's payloads are never all held
    (a batch of 64 KiB segments would be half a GB). Here windows of 8 packets."""
    from brokerscope import streams

    monkeypatch.setattr(streams, "READ_AHEAD", 8)
    path = str(tmp_path / "c.pcap")
    shutil.copy(CAP, path)
    st = os.stat(path)
    held: list[int] = []  # at each read, the payloads the batch's list holds before the last window
    real = StreamDriver._read_back

    def watching(self, cols, k, end, done):
        got = real(self, cols, k, end, done)
        held.append(sum(p is not None for p in cols[10][: max(0, k - 8)]))
        return got

    monkeypatch.setattr(StreamDriver, "_read_back", watching)
    counts, _ = _decode(path, {0: (path, st.st_size, st.st_mtime_ns)})
    assert counts["messages"] == 24 and len(held) > 10
    assert max(held) == 0


def test_a_file_appended_to_between_the_stages_gives_its_payloads(tmp_path):
    """tcpdump still appending to the file the run read (found by a user trial: every payload of
    a 26 MB capture became a gap, 'changed while the run read it'). The bytes the read stage
    read are still there (the last identity chunk of them hashes as the read stage's digest):
    its payloads are read; a rewrite of the same size or longer is still a changed file."""
    from brokerscope.capture.files import chunk_digests

    path = str(tmp_path / "c.pcap")
    shutil.copy(CAP, path)
    st = os.stat(path)
    digests = {0: chunk_digests(path, 0, st.st_size, st.st_size)}
    packets = _table(_batches(path, True)).sort_by([(c, "ascending") for c in SORT_COLS])  # the read stage
    with open(path, "ab") as f:
        f.write(b"\x00" * 5000)  # more records on their way
    counts, drv = _decode_with(packets, path, PayloadFiles({0: (path, st.st_size, st.st_mtime_ns)}, digests))
    assert counts["messages"] == 24 and not any(s.get("errors") for s in drv.capture_stats)
    with open(path, "r+b") as f:  # rewritten: other bytes where the read stage read
        f.seek(100)
        f.write(b"\xff" * 50)
    counts, drv = _decode_with(packets, path, PayloadFiles({0: (path, st.st_size, st.st_mtime_ns)}, digests))
    assert counts.get("messages", 0) == 0
    assert any("changed while the run read it" in e for s in drv.capture_stats for e in s.get("errors", []))


def _decode_with(t: pa.Table, path: str, files: PayloadFiles) -> tuple[dict[str, int], StreamDriver]:
    drv = StreamDriver(Settings.load(), [capture_id(path)], files)
    counts: dict[str, int] = {}
    for table, row in drv.run_batches(t.to_batches()):
        counts[table] = counts.get(table, 0) + tables.size(row)
    return counts, drv


def test_a_file_cut_short_while_the_decode_reads_it_is_named_as_changed(tmp_path):
    """Cut short after the decode opened it (its size and time as the read stage saw them):
    the reads past the cut come back short (found by a user trial: counted as snap-truncated
    packets, and the capture recorded as whole). The file is checked again and named as changed,
    as one changed before the decode opened it is; the reads before the cut gave their bytes."""
    path = str(tmp_path / "c.pcap")
    shutil.copy(CAP, path)
    st = os.stat(path)
    packets = _table(_batches(path, True)).sort_by([(c, "ascending") for c in SORT_COLS])  # the read stage
    files = PayloadFiles({0: (path, st.st_size, st.st_mtime_ns)})
    ats = [
        (at, n)
        for at, n in zip(packets["payload_at"].to_pylist(), packets["payload_len"].to_pylist())
        if at and n
    ]
    first, last = min(ats), max(ats)
    assert files.read(0, *first, False) == (CAP.read_bytes()[first[0] : first[0] + first[1]], False)
    os.truncate(path, last[0] + 1)  # a rotation tool cuts it: the decode holds it open
    assert files.read(0, *last, False) == (b"", True)
    assert files.read(0, *first, False) == (b"", True)  # nothing more is taken from it
    assert files.close() == {
        0: f"changed while the run read it (size {st.st_size} -> {last[0] + 1}): "
        "payload bytes after the read stage are missing"
    }


def _columns(path: str) -> tuple[list, list, list, list]:
    """The read stage's payload_at, payload_len, file_index and snap_truncated columns, sorted as
    the decode takes them."""
    t = _table(_batches(path, True)).sort_by([(c, "ascending") for c in SORT_COLS])
    return tuple(
        t.column(c).to_pylist() for c in ("payload_at", "payload_len", "file_index", "snap_truncated")
    )


def test_payloads_that_follow_one_another_are_read_by_one_call(tmp_path, monkeypatch):
    """A connection's segments as the capture wrote them, a few headers apart, are read back by
    one pread per run of them (a system call was 5 % of a decode task), each the very bytes a
    read of its own gives; pure ACKs inside a run read nothing."""
    from brokerscope import streams

    path = str(tmp_path / "c.pcap")
    shutil.copy(CAP, path)
    st = os.stat(path)
    ats, lens, fis, sts = _columns(path)
    one = PayloadFiles({0: (path, st.st_size, st.st_mtime_ns)})
    want = [
        one.read(fi, at, n, s) if at is not None else (None, s) for at, n, fi, s in zip(ats, lens, fis, sts)
    ]
    payloads = sum(1 for at, n in zip(ats, lens) if at is not None and n)
    calls: list[int] = []
    real = os.pread
    monkeypatch.setattr(streams.os, "pread", lambda fd, n, at: calls.append(n) or real(fd, n, at))
    pls, got_sts = [None] * len(ats), list(sts)
    PayloadFiles({0: (path, st.st_size, st.st_mtime_ns)}).fill(
        pls, got_sts, fis, list(ats), lens, 0, len(ats)
    )
    assert list(zip(pls, got_sts)) == want
    assert payloads > 40 and len(calls) < payloads / 4
    assert max(calls) > 3 * max(n for n in lens if n)  # spans of several packets


def test_a_run_read_back_short_is_read_packet_by_packet(tmp_path):
    """A file cut short inside a run of payloads: the run's read comes back short, and its packets
    are read one by one: those before the cut keep their bytes, the file is named as changed."""
    path = str(tmp_path / "c.pcap")
    shutil.copy(CAP, path)
    st = os.stat(path)
    ats, lens, fis, sts = _columns(path)
    data = CAP.read_bytes()
    refs = sorted((at, n) for at, n in zip(ats, lens) if at is not None and n)
    cut = refs[len(refs) // 2][0] + 1  # inside the payload of a packet in the middle
    os.truncate(path, cut)
    files = PayloadFiles({0: (path, st.st_size, st.st_mtime_ns)})
    files._fds[0] = os.open(path, os.O_RDONLY)  # opened before the cut, as the decode had
    pls, got_sts = [None] * len(ats), list(sts)
    files.fill(pls, got_sts, fis, list(ats), lens, 0, len(ats))
    kept = [(p, at, n) for p, at, n in zip(pls, ats, lens) if at is not None and n and p]
    assert kept and all(p == data[at : at + n] for p, at, n in kept)
    assert all(at + n <= cut for _p, at, n in kept)
    assert files.close()[0].startswith(f"changed while the run read it (size {st.st_size} -> {cut})")


def test_a_file_rewritten_at_its_size_is_named_as_rewritten_not_by_sizes(tmp_path):
    """Rewritten in place at the same size between the stages (found by a user trial: named
    'size 28311224 -> 28311224'): the error says its bytes were rewritten at the same size, or,
    where the read stage's digests are not at hand, that it was modified at that size."""
    from brokerscope.capture.files import chunk_digests

    path = str(tmp_path / "c.pcap")
    shutil.copy(CAP, path)
    st = os.stat(path)
    digests = {0: chunk_digests(path, 0, st.st_size, st.st_size)}
    at = next(a for a, n in zip(*_columns(path)[:2]) if a is not None and n)
    data = bytearray(CAP.read_bytes())
    data[-10:] = b"X" * 10
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    for given, how in [(digests, "its bytes rewritten"), (None, "modified")]:
        files = PayloadFiles({0: (path, st.st_size, st.st_mtime_ns)}, given)
        assert files.read(0, at, 1, False) == (b"", True)
        assert files.close()[0] == (
            f"changed while the run read it ({how} at the same size, {st.st_size} bytes): "
            "payload bytes after the read stage are missing"
        )
