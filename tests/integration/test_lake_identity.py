"""Input identity on a real Spark session: capture_id is a hash of every byte, a path whose
content changed replaces its earlier rows, identical content under two paths is one input."""

from __future__ import annotations

import os
import shutil
from collections import Counter

import pyarrow as pa
import pytest

from brokerscope import pipeline, tables
from brokerscope.capture import capture_id
from brokerscope.config import Settings
from tests.conftest import SAMPLE_DATA
from tests.support.lakecheck import delta_rs_rows, normalized

pytestmark = pytest.mark.spark

ZSTD = SAMPLE_DATA / "kafka" / "zstd.pcap"


def _settings(lake, extra: dict | None = None) -> Settings:
    over = {"lake": {"path": str(lake)}, "spark": {"shuffle_partitions": 4}, **(extra or {})}
    return Settings.load(overrides=over)


def _rows(lake) -> dict[str, list[dict]]:
    return {t: delta_rs_rows(str(lake / t)) for t in tables.TABLES}


def _produced_ids(rows) -> Counter:
    return Counter(r["message_id"] for r in rows["messages"] if r["direction"] == "produce")


def test_a_capture_that_grew_replaces_its_earlier_rows(spark, tmp_path):
    """tcpdump was still writing when the first run started: the second run over the same path
    (--skip-ingested, as the nightly job runs) replaces the first run's rows in the same commits."""
    cap = tmp_path / "cap.pcap"
    cap.write_bytes(ZSTD.read_bytes()[:9000])
    lake = tmp_path / "lake"
    first = pipeline.ingest([str(cap)], _settings(lake), spark=spark)
    cut_id = capture_id(cap)
    assert first.rows["messages"] > 0
    shutil.copy(ZSTD, cap)
    pipeline.ingest([str(cap)], _settings(lake), spark=spark, skip_ingested=True)
    got = _rows(lake)
    produced = _produced_ids(got)
    assert produced and max(produced.values()) == 1, produced.most_common(3)
    assert {r["capture_id"] for t in tables.DECODED_TABLES for r in got[t]} == {capture_id(ZSTD)}
    # the path's history: the current content, and the cut one marked replaced by it
    hist = sorted((r["capture_id"], r["status"], r["replaced_by"]) for r in got["inputs"])
    assert hist == sorted([(capture_id(ZSTD), "ok", None), (cut_id, "replaced", capture_id(ZSTD))])
    # every decoded table equals a clean ingest of the whole file
    clean = tmp_path / "clean"
    pipeline.ingest([str(ZSTD)], _settings(clean), spark=spark)
    want = _rows(clean)
    for t in tables.DECODED_TABLES:
        assert normalized(got[t]) == normalized(want[t]), t
    # a report of the replaced capture says so (found by a user trial: an empty page, 'inputs
    # none recorded')
    from brokerscope import dashboard

    with pytest.raises(ValueError, match=f"capture {cut_id} was replaced by {capture_id(ZSTD)}"):
        dashboard.build(lake, tmp_path / "r.html", dashboard.Scope(capture_ids=(cut_id,)))
    assert not (tmp_path / "r.html").exists()


def test_files_differing_in_one_byte_are_two_inputs(spark, tmp_path):
    """Two 4 MB captures equal but for one byte in the middle (the old id read only both ends)."""
    from tests.support.synth import write_capture

    a = tmp_path / "a.pcap"
    write_capture(str(a), exchanges=20, target_bytes=4_000_000)
    data = bytearray(a.read_bytes())
    assert len(data) > 4_000_000
    # change one byte of a TCP payload in the middle: both files stay valid captures
    mid = data.index(b"request", len(data) // 2)
    data[mid] = ord("R")
    b = tmp_path / "b.pcap"
    b.write_bytes(bytes(data))
    lake = tmp_path / "lake"
    summary = pipeline.ingest([str(a), str(b)], _settings(lake), spark=spark)
    assert summary.files == 2 and not [e for e in summary.capture_errors if "same content" in e]
    got = _rows(lake)
    ids = {r["capture_id"] for r in got["inputs"]}
    assert ids == {capture_id(a), capture_id(b)} and len(ids) == 2
    # ingested one after the other, the second does not replace the first
    lake2 = tmp_path / "lake2"
    pipeline.ingest([str(a)], _settings(lake2), spark=spark)
    n = len(_rows(lake2)["streams"])
    pipeline.ingest([str(b)], _settings(lake2), spark=spark)
    per_capture = Counter(r["capture_id"] for r in _rows(lake2)["streams"])
    assert per_capture == {capture_id(a): n, capture_id(b): n}


def test_same_content_under_two_paths_is_one_input_listed_under_both(spark, tmp_path):
    one, two = tmp_path / "one.pcap", tmp_path / "copy" / "two.pcap"
    two.parent.mkdir()
    shutil.copy(ZSTD, one)
    shutil.copy(ZSTD, two)
    lake = tmp_path / "lake"
    summary = pipeline.ingest([str(one), str(two)], _settings(lake), spark=spark)
    assert summary.files == 1
    got = _rows(lake)
    assert max(_produced_ids(got).values()) == 1
    assert sorted((r["path"], r["capture_id"]) for r in got["inputs"]) == sorted(
        [(str(one), capture_id(ZSTD)), (str(two), capture_id(ZSTD))]
    )
    # a later run that finds the content under a third path adds that path, decodes nothing twice
    three = tmp_path / "three.pcap"
    shutil.copy(ZSTD, three)
    pipeline.ingest([str(three)], _settings(lake), spark=spark)
    again = _rows(lake)
    assert max(_produced_ids(again).values()) == 1
    assert len(again["inputs"]) == 3 and {r["status"] for r in again["inputs"]} == {"ok"}


def test_replacing_one_capture_rewrites_the_files_it_shares_with_others(spark, tmp_path):
    """After compaction a day's captures share files; a capture that grew is replaced by rewriting
    those files without its rows, and every row of the others is kept exactly."""
    other = SAMPLE_DATA / "kafka" / "lz4.pcap"
    cap = tmp_path / "cap.pcap"
    cap.write_bytes(ZSTD.read_bytes()[:9000])
    lake = tmp_path / "lake"
    pipeline.ingest([str(cap), str(other)], _settings(lake), spark=spark)
    from deltalake import DeltaTable

    mixed = [
        a
        for a in pa.table(DeltaTable(str(lake / "messages")).get_add_actions(flatten=True)).to_pylist()
        if a["min.capture_id"] != a["max.capture_id"]
    ]
    assert mixed  # the compacted file holds both captures
    shutil.copy(ZSTD, cap)
    pipeline.ingest([str(cap)], _settings(lake), spark=spark, skip_ingested=True)
    clean = tmp_path / "clean"
    pipeline.ingest([str(ZSTD)], _settings(clean), spark=spark)
    pipeline.ingest([str(other)], _settings(clean), spark=spark)
    got, want = _rows(lake), _rows(clean)
    for t in tables.DECODED_TABLES:
        assert normalized(got[t]) == normalized(want[t]), t


def _pcap_records(data: bytes) -> tuple[bytes, list[bytes]]:
    """A little-endian pcap's header and its records (record header and bytes each)."""
    out, off = [], 24
    while off + 16 <= len(data):
        n = int.from_bytes(data[off + 8 : off + 12], "little")
        out.append(data[off : off + 16 + n])
        off += 16 + n
    return data[:24], out


class _Rotation:
    """The zstd sample capture rotated into four files, written into `night` as tcpdump would
    (`write(k)`: file k, or its first `upto` records only: still being written)."""

    def __init__(self, tmp_path) -> None:
        self.head, self.recs = _pcap_records(ZSTD.read_bytes())
        self.cuts = [round(k * len(self.recs) / 4) for k in range(5)]
        self.night, self.lake, self.fresh = tmp_path / "night", tmp_path / "lake", tmp_path / "fresh"
        self.night.mkdir()

    def write(self, k: int, upto: int | None = None) -> None:
        part = self.recs[self.cuts[k] : self.cuts[k + 1]]
        (self.night / f"r{k}.pcap").write_bytes(self.head + b"".join(part[:upto] if upto else part))


def test_a_rotated_file_that_grew_is_decoded_again_with_the_files_it_shares_connections_with(spark, tmp_path):
    """A capture rotated into three files while tcpdump still wrote the third, then the nightly
    run after it grew (found by a user trial): the third file's connections began in the second,
    so their streams rows (of the second file) kept the packets of its earlier content while its
    new content gave their rest a mid-stream row of its own: packets counted twice, conn_ids
    split. The files that share connections with it are decoded again with it: the lake equals
    one made from the final files."""
    head, recs = _pcap_records(ZSTD.read_bytes())
    cuts = [0, len(recs) // 3, 2 * len(recs) // 3, len(recs)]
    night = tmp_path / "night"
    night.mkdir()
    for k in range(3):
        part = recs[cuts[k] : cuts[k + 1]]
        (night / f"r{k}.pcap").write_bytes(head + b"".join(part[:5] if k == 2 else part))
    lake, fresh = tmp_path / "lake", tmp_path / "fresh"
    pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)
    (night / "r2.pcap").write_bytes(head + b"".join(recs[cuts[2] :]))  # it grew
    pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)
    pipeline.ingest([str(night)], _settings(fresh), spark=spark)
    got, want = _rows(lake), _rows(fresh)
    assert sum(r["c2s_packets"] + r["s2c_packets"] for r in got["streams"]) == len(recs)
    assert any(len(r["capture_ids"]) > 1 for r in want["streams"])  # connections cross the files
    for t in tables.DECODED_TABLES:
        assert normalized(got[t]) == normalized(want[t]), t


def test_a_name_reused_for_other_content_keeps_the_earlier_capture(spark, tmp_path):
    """A ring buffer's next lap (tcpdump -W) or a name that repeats (-w cap-%H.pcap) puts another
    capture under a path ingested before (found by a user trial: the earlier capture's rows were
    deleted, silently). The path's content does not begin with the earlier content: both captures
    keep their rows and inputs rows, and the summary names the path. The same path growing later
    still replaces its own earlier content."""
    ring = tmp_path / "ring"
    ring.mkdir()
    lz4, snappy = SAMPLE_DATA / "kafka" / "lz4.pcap", SAMPLE_DATA / "kafka" / "snappy.pcap"
    shutil.copy(SAMPLE_DATA / "kafka" / "gzip.pcap", ring / "ring.pcap0")
    lake = tmp_path / "lake"
    pipeline.ingest([str(ring)], _settings(lake), spark=spark, skip_ingested=True)
    first = _rows(lake)
    shutil.copy(snappy, ring / "ring.pcap0")  # the next lap
    summary = pipeline.ingest([str(ring)], _settings(lake), spark=spark, skip_ingested=True)
    got = _rows(lake)
    gz, sn = capture_id(SAMPLE_DATA / "kafka" / "gzip.pcap"), capture_id(snappy)
    for t in tables.DECODED_TABLES:
        kept = [r for r in got[t] if r["capture_id"] == gz]
        assert normalized(kept) == normalized(first[t]), t
    assert {r["topic"] for r in got["messages"]} == {"bs-gzip", "bs-snappy"}
    hist = sorted((r["capture_id"], r["status"]) for r in got["inputs"])
    assert hist == sorted([(gz, "ok"), (sn, "ok")])
    named = [e for e in summary.capture_errors if "other content than the capture ingested" in e]
    assert len(named) == 1 and str(ring / "ring.pcap0") in named[0] and gz in named[0]
    # the next lap grows while tcpdump writes it: cut first, whole later; the cut is replaced
    data = lz4.read_bytes()
    (ring / "ring.pcap0").write_bytes(data[: len(data) // 2])
    summary = pipeline.ingest([str(ring)], _settings(lake), spark=spark, skip_ingested=True)
    cut = capture_id(ring / "ring.pcap0")
    shutil.copy(lz4, ring / "ring.pcap0")
    summary = pipeline.ingest([str(ring)], _settings(lake), spark=spark, skip_ingested=True)
    assert not [e for e in summary.capture_errors if "other content" in e]
    got = _rows(lake)
    assert {r["capture_id"] for r in got["messages"]} == {gz, sn, capture_id(lz4)}
    status = {r["capture_id"]: r["status"] for r in got["inputs"]}
    assert status == {gz: "ok", sn: "ok", cut: "replaced", capture_id(lz4): "ok"}


def test_a_capture_compressed_after_it_was_ingested_is_not_counted_twice(spark, tmp_path):
    """tcpdump -z gzip compresses each file after its rotation, often after the nightly run took
    it (found by a user trial: the .gz was a new capture, every message and connection twice).
    X.gz whose bytes decompress to the capture ingested from X (gone) is recorded as that capture
    under its new path, not decoded again, and named; the next night skips it. A .gz of other
    bytes under such a name is decoded."""
    import gzip

    night = tmp_path / "night"
    night.mkdir()
    src = SAMPLE_DATA / "iggy" / "client_vsr.pcap"
    shutil.copy(src, night / "rot.pcap0")
    lake = tmp_path / "lake"
    pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)
    first = _rows(lake)
    with open(night / "rot.pcap0", "rb") as fh, gzip.open(night / "rot.pcap0.gz", "wb") as gz:
        gz.write(fh.read())
    (night / "rot.pcap0").unlink()
    summary = pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)
    assert summary.exit_code() == 0 and summary.files == 0
    named = [e for e in summary.capture_errors if "compressed since: not decoded again" in e]
    assert len(named) == 1 and str(night / "rot.pcap0.gz") in named[0]
    got = _rows(lake)
    for t in tables.DECODED_TABLES:
        assert normalized(got[t]) == normalized(first[t]), t
    cid = capture_id(src)
    assert sorted((r["path"].rsplit("/", 1)[1], r["capture_id"]) for r in got["inputs"]) == [
        ("rot.pcap0", cid),
        ("rot.pcap0.gz", cid),
    ]
    again = pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)
    assert again.skipped_already_ingested == [str(night / "rot.pcap0.gz")] and not again.capture_errors
    # other bytes compressed under a name ingested before: a capture of its own
    other = SAMPLE_DATA / "kafka" / "lz4.pcap"
    shutil.copy(other, night / "b.pcap")
    pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)
    with gzip.open(night / "b.pcap.gz", "wb") as gz:
        gz.write((SAMPLE_DATA / "kafka" / "snappy.pcap").read_bytes())
    (night / "b.pcap").unlink()
    summary = pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)
    assert summary.files == 1 and not [e for e in summary.capture_errors if "compressed since" in e]
    assert {r["topic"] for r in _rows(lake)["messages"]} >= {"bs-lz4", "bs-snappy"}


def test_the_next_files_of_a_rotation_read_by_a_later_run_continue_its_connections(spark, tmp_path):
    """A capture rotated into four files, the first two ingested one night and the other two the
    next (found by a user trial: the connections open at the second file's end became a second,
    mid-stream connection each, the first ones 'not closed', extract gave part of them). The files
    a new file may continue (a connection open at their end, idle less than the timeout before its
    first packet) are decoded again with it: the lake equals one made from the four files at once."""
    rot = _Rotation(tmp_path)
    write, recs, night, lake, fresh = rot.write, rot.recs, rot.night, rot.lake, rot.fresh

    write(0)
    write(1)
    pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)
    write(2)
    write(3)
    pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)
    pipeline.ingest([str(night)], _settings(fresh), spark=spark)
    got, want = _rows(lake), _rows(fresh)
    assert any(len(r["capture_ids"]) > 2 for r in want["streams"])  # connections cross the files
    assert sum(r["c2s_packets"] + r["s2c_packets"] for r in got["streams"]) == len(recs)
    for t in tables.DECODED_TABLES:
        assert normalized(got[t]) == normalized(want[t]), t


def test_the_next_night_s_directory_continues_the_connections_of_last_night_s(spark, tmp_path):
    """The nightly job's layout, one directory per day (`--input /captures/<date>`), a rotation's
    files split across two of them (found by a user trial: connections open at midnight were cut
    in two, a response lost, role-reversed `unknown` copies). The earlier night's files a new one
    continues are decoded again with it, from their own directory: the lake equals one run."""
    rot = _Rotation(tmp_path)
    rot.write(0)
    rot.write(1)
    rot.write(2)
    rot.write(3)
    day1, day2 = tmp_path / "2026-11-21", tmp_path / "2026-11-22"
    day1.mkdir()
    day2.mkdir()
    for k in range(4):
        shutil.copy2(rot.night / f"r{k}.pcap", (day1 if k < 2 else day2) / f"r{k}.pcap")
    pipeline.ingest([str(day1)], _settings(rot.lake), spark=spark, skip_ingested=True)
    second = pipeline.ingest([str(day2)], _settings(rot.lake), spark=spark, skip_ingested=True)
    assert second.exit_code() == 0
    pipeline.ingest([str(rot.night)], _settings(rot.fresh), spark=spark)
    got, want = _rows(rot.lake), _rows(rot.fresh)
    assert any(len(r["capture_ids"]) > 2 for r in want["streams"])  # connections cross the files
    assert sum(r["c2s_packets"] + r["s2c_packets"] for r in got["streams"]) == len(rot.recs)
    for t in tables.DECODED_TABLES:
        assert normalized(got[t]) == normalized(want[t]), t
    # each file recorded once, at the path it was read from
    assert sorted(r["path"].rsplit("/", 2)[1] for r in got["inputs"] if r["status"] == "ok") == [
        "2026-11-21",
        "2026-11-21",
        "2026-11-22",
        "2026-11-22",
    ]


def test_a_rotation_ingested_over_several_nights_is_one_vantage_point(spark, tmp_path):
    """Files that follow each other in time are one place, whichever night ingested them (found by
    a user trial: each night's files were a vantage point of their own, named by that night's first
    file). Four sample captures that follow each other, two ingested one night and two the next:
    every `inputs.vantage` names the first file, as one run over the four names it."""
    kafka = SAMPLE_DATA / "kafka"
    files = [kafka / f"{n}.pcap" for n in ("none", "gzip", "snappy", "lz4")]  # in time order
    night, lake, fresh = tmp_path / "night", tmp_path / "lake", tmp_path / "fresh"
    night.mkdir()
    for f in files[:2]:
        shutil.copy(f, night)
    pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)
    for f in files[2:]:
        shutil.copy(f, night)
    pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)
    pipeline.ingest([str(night)], _settings(fresh), spark=spark)
    first = capture_id(str(files[0]))

    def places(root) -> dict[str, str]:
        return {r["path"].rsplit("/", 1)[1]: r["vantage"] for r in delta_rs_rows(str(root / "inputs"))}

    assert places(fresh) == {f.name: first for f in files}
    assert places(lake) == places(fresh)


def _gzip(path) -> None:
    """As tcpdump -z gzip does after a rotation: path.gz written, path removed."""
    import gzip

    with open(path, "rb") as fh, gzip.open(f"{path}.gz", "wb") as gz:
        gz.write(fh.read())
    os.unlink(path)


def _same_lake(got_root, want_root) -> None:
    got, want = _rows(got_root), _rows(want_root)
    for t in tables.DECODED_TABLES:
        assert normalized(got[t], DROP) == normalized(want[t], DROP), t


DROP = ("capture_id", "capture_ids", "first_frame", "last_frame", "date", "conn_id")


def test_compressed_rotations_over_nights_equal_one_run_over_the_final_files(spark, tmp_path):
    """Found by a user trial (tcpdump -z gzip under a nightly --skip-ingested job): a file taken
    while still written and gzipped when complete was a second capture (its partial rows kept:
    rows twice); a gzipped file whose connections a newer file continued was not decoded again
    (connections split, commands lost); each later night added another inputs row for each
    compressed file and named it again. Over four nights of a capture rotated into four files:
    the lake equals one run over the final files, and a compressed file has one current row."""
    rot = _Rotation(tmp_path)
    write, recs, night, lake, fresh = rot.write, rot.recs, rot.night, rot.lake, rot.fresh

    def nightly() -> pipeline.Summary:
        return pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)

    write(0)
    write(1, 4)  # still being written
    nightly()
    write(1)  # complete, then compressed: it grew before it was gzipped
    _gzip(night / "r1.pcap")
    write(2)
    nightly()
    _gzip(night / "r0.pcap")  # compressed, unchanged: its connections continue in r1 and r2
    write(3)
    third = nightly()
    assert not [e for e in third.capture_errors if "r1.pcap.gz" in e]  # named once, by its night
    _gzip(night / "r2.pcap")
    nightly()
    pipeline.ingest([str(night)], _settings(fresh), spark=spark)
    _same_lake(lake, fresh)
    rows = _rows(lake)
    assert sum(r["c2s_packets"] + r["s2c_packets"] for r in rows["streams"]) == len(recs)
    current = [r["path"].rsplit("/", 1)[1] for r in rows["inputs"] if r["status"] in ("ok", "partial")]
    assert len(current) == len(set(current)), current  # one current row per path


def test_a_compression_beside_its_capture_is_not_decoded(spark, tmp_path):
    """gzip still writing X.gz (or gzip -k) when the nightly run lists the directory (found by a
    user trial: X and the partial X.gz were two captures, rows twice, and the partial one's rows
    stayed after X.gz was complete). X.gz beside X, decompressing to X's first bytes, is recorded
    and named, not decoded; the next night, X gone and X.gz complete, it is X compressed."""
    import gzip

    night, lake, fresh = tmp_path / "night", tmp_path / "lake", tmp_path / "fresh"
    night.mkdir()
    shutil.copy(SAMPLE_DATA / "kafka" / "lz4.pcap", night / "a.pcap")
    whole = gzip.compress((night / "a.pcap").read_bytes())
    (night / "a.pcap.gz").write_bytes(whole[: len(whole) * 6 // 10])
    first = pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)
    assert first.files == 1
    assert [e for e in first.capture_errors if "a compression of" in e] == [
        f"{night / 'a.pcap.gz'}: a compression of {night / 'a.pcap'} (beside it): not decoded, {night / 'a.pcap'} is"
    ]
    (night / "a.pcap").unlink()
    (night / "a.pcap.gz").write_bytes(whole)
    pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)
    pipeline.ingest([str(night)], _settings(fresh), spark=spark)
    _same_lake(lake, fresh)


def test_a_compressed_capture_is_decoded_again_when_asked(spark, tmp_path):
    """Found by a user trial: after X was gzipped, neither another filter (--skip-ingested) nor a
    run without --skip-ingested decoded X.gz ('already ingested'), so a lake could not be
    repaired. A run that must decode it decodes it, its rows replacing the capture's."""
    night, lake, fresh = tmp_path / "night", tmp_path / "lake", tmp_path / "fresh"
    night.mkdir()
    shutil.copy(SAMPLE_DATA / "kafka" / "lz4.pcap", night / "a.pcap")
    since = {"filter": {"since": "2027-01-01T00:00:00Z"}}
    pipeline.ingest([str(night)], _settings(lake, since), spark=spark, skip_ingested=True)
    assert not _rows(lake)["messages"]  # the sample is older than the filter
    _gzip(night / "a.pcap")
    summary = pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)  # no filter
    assert summary.files == 1
    pipeline.ingest([str(night)], _settings(fresh), spark=spark)
    _same_lake(lake, fresh)
    summary = pipeline.ingest([str(night)], _settings(lake), spark=spark)  # all again
    assert summary.files == 1
    _same_lake(lake, fresh)


def test_a_rotated_file_that_comes_a_night_late_joins_the_files_around_it(spark, tmp_path):
    """Found by a user trial: the second file of a rotation came the night after the third (a
    copy that failed, a clock): its connections ran on into the third, ingested before, whose
    rows kept them as mid-stream connections of their own (a split connection, commands lost). The
    first ingested capture to begin after a new file, holding connections open when it began, is
    decoded again with it: the lake equals one run over the four files."""
    rot = _Rotation(tmp_path)
    write, recs, night, lake, fresh = rot.write, rot.recs, rot.night, rot.lake, rot.fresh

    for k in (0, 2, 3):
        write(k)
    pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)
    write(1)
    pipeline.ingest([str(night)], _settings(lake), spark=spark, skip_ingested=True)
    pipeline.ingest([str(night)], _settings(fresh), spark=spark)
    _same_lake(lake, fresh)
    assert sum(r["c2s_packets"] + r["s2c_packets"] for r in _rows(lake)["streams"]) == len(recs)


SEGMENT = SAMPLE_DATA / "kafka" / "segments" / "bs-segment-0" / "00000000000000000000.log"


def _partition_dir(root, name: str):
    """A `<topic>-<partition>` directory under `root` holding the sample segment's bytes."""
    d = root / name
    d.mkdir(parents=True)
    shutil.copy(SEGMENT, d / SEGMENT.name)
    return d / SEGMENT.name


def _per_partition(rows) -> Counter:
    return Counter((r["topic"], r["partition"]) for r in rows["messages"])


def test_equal_segments_of_two_partitions_are_two_inputs(spark, tmp_path):
    """Two partitions whose logs hold the same bytes (found by a user trial: one capture_id, the
    second partition recorded as a copy of the first and its rows never written). A copy of a
    partition's directory elsewhere (another broker's replica) stays one input."""
    data, replica = tmp_path / "data", tmp_path / "replica"
    zero, one = _partition_dir(data, "orders-0"), _partition_dir(data, "orders-1")
    copy = _partition_dir(replica, "orders-0")
    lake = tmp_path / "lake"
    summary = pipeline.ingest([str(data), str(replica)], _settings(lake), spark=spark)
    assert summary.files == 2, summary
    got = _rows(lake)
    assert _per_partition(got) == {("orders", 0): 20, ("orders", 1): 20}
    ids = {r["path"]: r["capture_id"] for r in got["inputs"]}
    assert ids[str(zero)] == ids[str(copy)] != ids[str(one)]
    assert {r["capture_id"] for r in got["messages"]} == {ids[str(zero)], ids[str(one)]}
    # a second run over the same directories replaces, never doubles
    pipeline.ingest([str(data)], _settings(lake), spark=spark)
    assert _per_partition(_rows(lake)) == {("orders", 0): 20, ("orders", 1): 20}


def test_a_segment_recorded_under_the_id_of_its_bytes_alone_is_replaced_not_doubled(spark, tmp_path):
    """A lake written before a segment's capture_id named its partition holds its rows under the
    id of its bytes alone: ingesting the segment again replaces those rows."""
    from deltalake import DeltaTable, write_deltalake

    seg = _partition_dir(tmp_path / "data", "orders-0")
    lake = tmp_path / "lake"
    pipeline.ingest([str(seg)], _settings(lake), spark=spark)
    new_id, old_id = _rows(lake)["inputs"][0]["capture_id"], capture_id(seg)
    assert new_id != old_id
    # the earlier lake: every row of the segment under the id of its bytes alone
    for t in tables.TABLES:
        dt = DeltaTable(str(lake / t))
        data = dt.to_pyarrow_table()
        if not data.num_rows or "capture_id" not in data.column_names:
            continue
        ids = pa.array([old_id if c == new_id else c for c in data.column("capture_id").to_pylist()])
        data = data.set_column(data.column_names.index("capture_id"), "capture_id", ids)
        write_deltalake(str(lake / t), data, mode="overwrite", partition_by=dt.metadata().partition_columns)
    assert {r["capture_id"] for r in _rows(lake)["messages"]} == {old_id}
    seg.touch()  # as a nightly --skip-ingested run finds an active segment appended to
    pipeline.ingest([str(seg)], _settings(lake), spark=spark, skip_ingested=True)
    got = _rows(lake)
    assert _per_partition(got) == {("orders", 0): 20}
    assert {r["capture_id"] for r in got["messages"]} == {new_id}
    assert sorted((r["capture_id"], r["status"]) for r in got["inputs"]) == sorted(
        [(new_id, "ok"), (old_id, "replaced")]
    )


def test_a_capture_cut_short_after_it_was_ingested_is_not_ingested_again(spark, tmp_path):
    """A capture ingested whole, then cut short (a rotation tool, a user shrinking it; found by a
    user trial: the shorter file was other content than the capture ingested from the path, and
    its rows were written again beside that capture's: rows doubled). Its whole identity chunks
    are those `inputs` recorded for that capture: it is named as cut short, not decoded, the
    capture keeps its rows; exit 4 (nothing ingested); the next --skip-ingested run passes it by.
    Other content of that length under the name is still a capture of its own."""
    from brokerscope.capture.files import ID_CHUNK
    from tests.support.synth import write_capture

    cap = tmp_path / "caps" / "cap.pcap"
    cap.parent.mkdir()
    write_capture(str(cap), exchanges=20, target_bytes=ID_CHUNK + (2 << 20))
    whole = capture_id(cap)
    lake = tmp_path / "lake"
    assert pipeline.ingest([str(cap.parent)], _settings(lake), spark=spark).exit_code() == 0
    first = _rows(lake)
    size = cap.stat().st_size
    os.truncate(cap, ID_CHUNK + (1 << 20))
    summary = pipeline.ingest([str(cap.parent)], _settings(lake), spark=spark, skip_ingested=True)
    assert summary.exit_code() == 4
    assert not [e for e in summary.capture_errors if "other content" in e], summary.capture_errors
    assert summary.errors == [
        (
            str(cap),
            f"cut short since it was ingested ({size} -> {ID_CHUNK + (1 << 20)} bytes): it begins with "
            f"the capture ingested from it ({whole}, run {first['inputs'][0]['run_id']}), whose rows "
            "are kept; not decoded",
        )
    ]
    got = _rows(lake)
    for t in tables.DECODED_TABLES:
        assert normalized(got[t]) == normalized(first[t]), t
    assert sorted((r["status"], r["capture_id"] or "", r["size"]) for r in got["inputs"]) == [
        ("error", "", ID_CHUNK + (1 << 20)),
        ("ok", whole, size),
    ]
    again = pipeline.ingest([str(cap.parent)], _settings(lake), spark=spark, skip_ingested=True)
    assert again.exit_code() == 0 and not again.errors and again.skipped_already_ingested == [str(cap)]
    # a file of that length whose first chunk differs (a ring buffer's next lap): its own capture
    data = bytearray(cap.read_bytes())
    data[ID_CHUNK // 2 : ID_CHUNK // 2 + 7] = b"REQUEST"
    cap.write_bytes(data)
    assert pipeline._shrunk(pipeline.Lake(str(lake)), [pipeline.inputs.discover([str(cap)]).inputs[0]]) == {}


def test_a_capture_cut_below_one_chunk_is_not_said_to_hold_other_content(spark, tmp_path):
    """A capture shorter than one identity chunk, cut short since it was ingested (found by a
    user trial: the summary said the file held other content, 'which it does not begin with',
    though nothing was checked: it may well begin with it). It is decoded as a capture of its own
    (the documented limit of _shrunk), and the summary says it is shorter and too short to tell."""
    d = tmp_path / "caps"
    d.mkdir()
    cap = d / "cap.pcap"
    shutil.copy(SAMPLE_DATA / "kafka" / "zstd.pcap", cap)
    size, was = cap.stat().st_size, capture_id(cap)
    lake = tmp_path / "lake"
    assert pipeline.ingest([str(d)], _settings(lake), spark=spark).exit_code() == 0
    os.truncate(cap, size // 2)
    summary = pipeline.ingest([str(d)], _settings(lake), spark=spark, skip_ingested=True)
    assert not [e for e in summary.capture_errors if "does not begin with" in e], summary.capture_errors
    assert [e for e in summary.capture_errors if e.startswith(f"{cap}: ")][0] == (
        f"{cap}: is shorter than the capture ingested from it before ({was}, {size} -> {size // 2} "
        "bytes), too short to tell whether it begins with it (under one 8 MiB identity chunk): "
        "decoded as a capture of its own, the earlier one keeps its rows"
    )
