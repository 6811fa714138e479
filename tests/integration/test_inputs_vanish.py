"""A capture deleted or cut short while a run reads it (a retention clean-up racing the nightly
job): the run finishes, records that file as an error naming why, and keeps every other file's
rows (found by a user trial: a traceback, exit 1, and no file ingested)."""

from __future__ import annotations

import os
import shutil

import pytest

from brokerscope import inputs, pipeline, tables
from brokerscope.config import Settings
from tests.conftest import SAMPLE_DATA
from tests.support.lakecheck import delta_rs_rows, normalized

pytestmark = pytest.mark.spark

GONE, KEPT = SAMPLE_DATA / "kafka" / "zstd.pcap", SAMPLE_DATA / "kafka" / "lz4.pcap"


def _settings(lake) -> Settings:
    return Settings.load(overrides={"lake": {"path": str(lake)}, "spark": {"shuffle_partitions": 4}})


def _rows(lake) -> dict[str, list[dict]]:
    return {t: delta_rs_rows(str(lake / t)) for t in tables.TABLES}


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
