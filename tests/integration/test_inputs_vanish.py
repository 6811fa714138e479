"""A capture deleted or cut short while a run reads it (a retention clean-up racing the nightly
job): the run finishes, records that file as an error naming why, and keeps every other file's
rows (found by a user trial: a traceback, exit 1, and no file ingested)."""

from __future__ import annotations

import os
import shutil

import pytest

from brokerscope import inputs, pipeline, tables
from brokerscope.capture import capture_id
from brokerscope.config import Settings
from tests.conftest import SAMPLE_DATA
from tests.support.lakecheck import delta_rs_rows, normalized

pytestmark = pytest.mark.spark

GONE, KEPT = SAMPLE_DATA / "kafka" / "zstd.pcap", SAMPLE_DATA / "kafka" / "lz4.pcap"


def _settings(lake) -> Settings:
    return Settings.load(overrides={"lake": {"path": str(lake)}, "spark": {"shuffle_partitions": 4}})


def _rows(lake) -> dict[str, list[dict]]:
    return {t: delta_rs_rows(str(lake / t)) for t in tables.TABLES}


def _cut_in_decode(monkeypatch, path: str, at: int) -> None:
    """Cut the file at `path` to `at` bytes in the decode task, once it opened the file to read
    its payloads back (after the read stage read and hashed it whole)."""
    real = pipeline._decode_fn

    def decode_fn(*a, **k):
        decode = real(*a, **k)

        def cutting(batches):
            from brokerscope import streams

            opened = streams.PayloadFiles._open

            def _open(self, fi):
                fd = opened(self, fi)
                if self.files[fi][0] == path and os.stat(path).st_size > at:
                    os.truncate(path, at)
                return fd

            streams.PayloadFiles._open = _open
            try:
                yield from decode(batches)
            finally:
                streams.PayloadFiles._open = opened

        return cutting

    monkeypatch.setattr(pipeline, "_decode_fn", decode_fn)


@pytest.mark.parametrize("when", ["before planning", "after planning"])
@pytest.mark.parametrize("how", ["deleted", "cut short"])
def test_a_capture_gone_while_the_run_reads_it_is_an_error_and_the_rest_is_kept(
    spark, tmp_path, monkeypatch, when, how
):
    d = tmp_path / "caps"
    d.mkdir()
    gone, kept = d / "a.pcap", d / "b.pcap"
    shutil.copy(GONE, gone)
    shutil.copy(KEPT, kept)

    def lose() -> None:
        if how == "deleted":
            gone.unlink()
        else:
            os.truncate(gone, 100)

    disc = inputs.discover([str(d)])
    found = os.stat(gone)
    if when == "before planning":
        lose()
    else:  # the read tasks find it changed: planned with its size, then lost
        real_plan = inputs.plan

        def plan_then_lose(*a, **k):
            out = real_plan(*a, **k)
            lose()
            return out

        monkeypatch.setattr(pipeline.inputs, "plan", plan_then_lose)
    lake = tmp_path / "lake"
    summary = pipeline.ingest([str(d)], _settings(lake), spark=spark, disc=disc)
    monkeypatch.undo()
    assert summary.exit_code() == 3
    named = [why for p, why in summary.errors + summary.unreadable if p == str(gone)]
    assert named and named[0].startswith("gone or changed while the run read it")
    got = _rows(lake)
    rec = {r["path"]: r for r in got["inputs"]}
    assert rec[str(gone)]["status"] == "error" and rec[str(gone)]["capture_id"] is None
    assert rec[str(kept)]["status"] == "ok"
    # the other capture's rows are those of an ingest of it alone
    alone = tmp_path / "alone"
    pipeline.ingest([str(kept)], _settings(alone), spark=spark)
    want = _rows(alone)
    for t in tables.DECODED_TABLES:
        assert normalized(got[t]) == normalized(want[t]), t
    # back in place, as it was (its size and time: a move away and back, a restore with cp -p),
    # the next nightly run ingests it (found by a user trial: skipped for good as 'gave nothing')
    shutil.copy(GONE, gone)
    os.utime(gone, ns=(found.st_atime_ns, found.st_mtime_ns))
    again = pipeline.ingest([str(d)], _settings(lake), spark=spark, skip_ingested=True)
    assert again.exit_code() == 0
    assert {r["status"] for r in _rows(lake)["inputs"] if r["path"] == str(gone)} >= {"ok"}


def test_a_copy_of_a_capture_gone_while_read_is_not_said_to_be_ingested(spark, tmp_path, monkeypatch):
    """Two equal files, the one read deleted after planning (found by a user trial: the summary
    said the copy was 'ingested once' though nothing of it was): the copy is named as not
    ingested, and the next run takes it."""
    d = tmp_path / "caps"
    d.mkdir()
    gone, copy = d / "a.pcap", d / "b.pcap"
    shutil.copy(GONE, gone)
    shutil.copy(GONE, copy)
    real_plan = inputs.plan

    def plan_then_lose(*a, **k):
        out = real_plan(*a, **k)
        gone.unlink()
        return out

    monkeypatch.setattr(pipeline.inputs, "plan", plan_then_lose)
    lake = tmp_path / "lake"
    summary = pipeline.ingest([str(d)], _settings(lake), spark=spark)
    monkeypatch.undo()
    assert not [e for e in summary.capture_errors if "ingested once" in e]
    assert [
        e
        for e in summary.capture_errors
        if e.startswith(f"{copy}: same content as {gone}") and "not ingested" in e
    ]
    again = pipeline.ingest([str(d)], _settings(lake), spark=spark, skip_ingested=True)
    assert again.exit_code() == 0
    assert {r["status"] for r in _rows(lake)["inputs"] if r["path"] == str(copy)} == {"ok"}


def test_a_capture_cut_short_while_the_decode_reads_it_back_is_not_ingested(spark, tmp_path, monkeypatch):
    """Cut short during the decode stage, after the read stage read and hashed it (found by a
    user trial: the reads back past the cut counted as snap-truncated packets, the capture
    recorded as whole, exit 0; the next run of the shorter file wrote its rows again beside the
    first ones). It is named as changed while the run read it and has no rows, as a file cut
    short before its read; the next run takes it as it is then, once."""
    d = tmp_path / "caps"
    d.mkdir()
    cut, kept = d / "a.pcap", d / "b.pcap"
    shutil.copy(GONE, cut)
    shutil.copy(KEPT, kept)
    size = cut.stat().st_size
    at, path = size // 2, str(cut)
    _cut_in_decode(monkeypatch, path, at)
    lake = tmp_path / "lake"
    summary = pipeline.ingest([str(d)], _settings(lake), spark=spark)
    monkeypatch.undo()
    assert cut.stat().st_size == at
    assert summary.exit_code() == 3
    assert [why for p, why in summary.unreadable if p == path] == [
        f"gone or changed while the run read it (size {size} -> {at}): "
        "payload bytes after the read stage are missing"
    ]
    assert not summary.seen.get("snap_truncated"), summary.lines()  # no false snap-length warning
    got = _rows(lake)
    rec = {r["path"]: r for r in got["inputs"]}
    # the summary counts what was ingested: the other file and its packets
    assert summary.packets == rec[str(kept)]["packets"]
    assert summary.lines()[0].startswith(
        f"run {summary.run_id}: 1 file(s) (and 1 read but not ingested), {summary.packets:,} packets"
    )
    assert rec[path]["status"] == "error" and rec[path]["capture_id"] is None
    assert rec[str(kept)]["status"] == "ok"
    whole, other = capture_id(str(GONE)), rec[str(kept)]["capture_id"]
    for t in tables.DECODED_TABLES:
        assert {r["capture_id"] for r in got[t]} <= {other}, t
    assert got["messages"]
    # the next run takes the shorter file as it is now: its rows once, no other content named
    again = pipeline.ingest([str(d)], _settings(lake), spark=spark, skip_ingested=True)
    assert not [e for e in again.capture_errors if "other content" in e], again.capture_errors
    got = _rows(lake)
    now = capture_id(path)
    assert {r["capture_id"] for r in got["inputs"] if r["path"] == path} == {now}
    alone = {t: [r for r in got[t] if r["capture_id"] == now] for t in tables.DECODED_TABLES}
    assert alone["commands"] and not any(r["capture_id"] == whole for t in alone for r in got[t])


def test_a_read_task_killed_by_a_capture_cut_under_its_memory_map_fails_only_that_file(
    spark, tmp_path, monkeypatch
):
    """A read task maps a plain capture into memory; cut short under it, the pages past the cut
    are gone and the next read of one kills the task's Python worker (SIGBUS: found by a user
    trial, 2 runs in 17: a traceback, exit 1, nothing committed). Here a read task maps the file,
    it is cut, and the worker touches a page past the cut: a real SIGBUS. The job fails; the run
    finds the file shorter than it was found and decodes the rest without it: exit 3, the file
    an error naming why, the other file's rows those of an ingest of it alone."""
    d = tmp_path / "caps"
    d.mkdir()
    cut, kept = d / "a.pcap", d / "b.pcap"
    shutil.copy(GONE, cut)
    shutil.copy(KEPT, kept)
    once = tmp_path / "crash-once"
    once.touch()
    path, marker = str(cut), str(once)
    real = pipeline._read_splits_fn

    def mapped_then_cut(*a, **k):
        read = real(*a, **k)

        def crashing(batches):
            import mmap

            try:
                os.remove(marker)  # the first read task only
            except FileNotFoundError:
                pass
            else:
                with open(path, "rb") as f:
                    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                    os.truncate(path, 100)
                    mm[len(mm) - 1]  # the page is gone: SIGBUS
            yield from read(batches)

        return crashing

    monkeypatch.setattr(pipeline, "_read_splits_fn", mapped_then_cut)
    lake = tmp_path / "lake"
    summary = pipeline.ingest([str(d)], _settings(lake), spark=spark)
    monkeypatch.undo()
    assert not once.exists()  # a worker did crash
    assert summary.exit_code() == 3
    named = [why for p, why in summary.errors + summary.unreadable if p == path]
    assert named and named[0].startswith("gone or changed while the run read it")
    got = _rows(lake)
    rec = {r["path"]: r for r in got["inputs"]}
    assert rec[path]["status"] == "error" and rec[str(kept)]["status"] == "ok"
    alone = tmp_path / "alone"
    pipeline.ingest([str(kept)], _settings(alone), spark=spark)
    want = _rows(alone)
    for t in tables.DECODED_TABLES:
        assert normalized(got[t]) == normalized(want[t]), t


@pytest.mark.parametrize("before", ["the same content", "a shorter prefix"])
def test_a_capture_ingested_before_and_cut_while_read_again_keeps_its_record(
    spark, tmp_path, monkeypatch, before
):
    """A capture ingested before, decoded again (touched, or grown since) and cut short while the
    decode reads its payloads back (found by a user trial: the run's error row replaced the
    earlier capture's `inputs` rows, whose rows stayed in the tables with no record; the next
    run could not tell the shorter file for that capture cut short and decoded it again: rows
    doubled, exit 0). The error row is added beside the earlier capture's row, which keeps its
    chunk digests: the next run names the file as cut short since it was ingested and decodes
    nothing."""
    from brokerscope.capture.files import ID_CHUNK
    from tests.support.synth import write_capture

    d = tmp_path / "caps"
    d.mkdir()
    cap, path = d / "cap.pcap", str(d / "cap.pcap")
    whole, prefix = tmp_path / "whole.pcap", tmp_path / "prefix.pcap"
    write_capture(str(whole), exchanges=20, target_bytes=ID_CHUNK + (2 << 20))
    write_capture(str(prefix), exchanges=20, target_bytes=ID_CHUNK + (3 << 19))
    assert whole.read_bytes().startswith(prefix.read_bytes())
    shutil.copy(prefix if before == "a shorter prefix" else whole, cap)
    lake = tmp_path / "lake"
    assert pipeline.ingest([str(d)], _settings(lake), spark=spark).exit_code() == 0
    first = _rows(lake)
    [was] = first["inputs"]
    assert was["status"] == "ok" and was["chunk_digests"]
    # read again: touched (same bytes, a newer mtime), or grown to the whole capture
    shutil.copy(whole, cap)
    os.utime(cap, ns=(cap.stat().st_atime_ns, cap.stat().st_mtime_ns + 10**9))
    at = ID_CHUNK + (1 << 20)
    _cut_in_decode(monkeypatch, path, at)
    summary = pipeline.ingest([str(d)], _settings(lake), spark=spark, skip_ingested=True)
    monkeypatch.undo()
    assert cap.stat().st_size == at
    assert summary.exit_code() == 4
    # nothing was ingested: no file, no packet counted (found by a user trial: '1 file(s),
    # 195,200 packets' next to 'exit 4: no input could be ingested')
    assert summary.packets == summary.tcp_segments == 0
    assert summary.lines()[0].startswith(
        f"run {summary.run_id}: 0 file(s) (and 1 read but not ingested), 0 packets"
    )
    assert [why for p, why in summary.unreadable if p == path][0].startswith(
        "gone or changed while the run read it"
    )
    got = _rows(lake)
    for t in tables.DECODED_TABLES:
        assert normalized(got[t]) == normalized(first[t]), t
    assert sorted((r["status"], r["capture_id"] or "") for r in got["inputs"]) == [
        ("error", ""),
        ("ok", was["capture_id"]),
    ]
    assert [r for r in got["inputs"] if r["status"] == "ok"] == [was]
    # the next run finds the capture it was cut from: not decoded again, its rows not doubled
    again = pipeline.ingest([str(d)], _settings(lake), spark=spark, skip_ingested=True)
    assert not [e for e in again.capture_errors if "other content" in e], again.capture_errors
    assert again.exit_code() == 4
    assert [why for p, why in again.errors if p == path][0].startswith(
        f"cut short since it was ingested ({was['size']} -> {at} bytes)"
    )
    got = _rows(lake)
    for t in tables.DECODED_TABLES:
        assert normalized(got[t]) == normalized(first[t]), t
