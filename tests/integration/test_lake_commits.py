"""The lake's commit protocol on real bytes: a run killed between two table commits is finished by
the next command, concurrent runs both land, leftovers are removed, add actions carry statistics
and commits say what they did."""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
import textwrap
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from brokerscope import cli, pipeline, tables
from brokerscope.config import Settings
from brokerscope.lake import COMPACT_MIN_FILES, STAGING, Lake, StagedWriter
from brokerscope.runs import RUNS, RunDir
from brokerscope.streams import decode_files
from tests.conftest import ROOT, SAMPLE_DATA
from tests.support.lakecheck import delta_rs_rows, duckdb_connect, normalized

pytestmark = pytest.mark.spark

CAPS = [SAMPLE_DATA / "kafka" / "zstd.pcap", SAMPLE_DATA / "pulsar" / "pulsar_lz4.pcap"]


def _settings(lake) -> Settings:
    return Settings.load(overrides={"lake": {"path": str(lake)}, "spark": {"shuffle_partitions": 4}})


def _rows(lake, names=tables.TABLES) -> dict[str, list]:
    drop = ("run_id", "ingested_at")  # differ between two runs of the same inputs
    return {t: normalized(delta_rs_rows(str(lake / t)), drop=drop) for t in names}


def test_a_run_killed_between_table_commits_is_finished_by_the_next_command(spark, tmp_path, capsys):
    lake = tmp_path / "lake"
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from brokerscope.lake import Lake
        real = Lake.commit_table
        def commit_then_die(self, table, *a, **k):
            out = real(self, table, *a, **k)
            os.kill(os.getpid(), signal.SIGKILL)  # after the first table (commands) committed
            return out
        Lake.commit_table = commit_then_die
        from brokerscope.config import Settings
        from brokerscope import pipeline
        s = Settings.load(overrides={{"lake": {{"path": {str(lake)!r}}}, "spark": {{"master": "local[1]"}}}})
        pipeline.ingest({[str(c) for c in CAPS]!r}, s)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    # the half-committed state the issue describes: commands holds the run, the others do not
    assert delta_rs_rows(str(lake / "commands")) and not delta_rs_rows(str(lake / "messages"))
    assert not delta_rs_rows(str(lake / "inputs"))
    # the next command that opens the lake finishes the run first, and says so in one line
    rc = cli.main(["tables", "--lake", str(lake), "--format", "csv"])
    err = capsys.readouterr().err
    assert rc == 0 and err.count("finished run") == 1 and "interrupted after its manifest (2 input(s))" in err
    assert not (lake / RUNS).exists() and not any((lake / t / STAGING).exists() for t in tables.TABLES)
    clean = tmp_path / "clean"
    pipeline.ingest([str(c) for c in CAPS], _settings(clean), spark=spark)
    assert _rows(lake) == _rows(clean)
    # every table commit of the run carries its Delta transaction id
    run_id = delta_rs_rows(str(lake / "inputs"))[0]["run_id"]
    for t in tables.TABLES:
        assert DeltaTable(str(lake / t)).transaction_version(f"brokerscope/{run_id}") == 1, t


def _staged_run(lake: Lake, run_id: str, paths: list[str], settings: Settings) -> dict:
    """A run's manifest over real decoded rows, staged the way decode tasks stage them."""
    got = decode_files(paths, settings)
    w = StagedWriter(str(lake.root), run_id)
    for t in tables.DECODED_TABLES:
        if got[t]:
            w.add(t, tables.conform(t, got[t]))
    files = w.close()
    ids = sorted({r["capture_id"] for r in got["streams"]})
    return {
        "run_id": run_id,
        "tables": {t: [f for f in files if f["table"] == t] for t in tables.DECODED_TABLES},
        "replace_ids": ids,
        "inputs": {
            "rows": [{"capture_id": c, "path": f"/{c}", "status": "ok", "date": "2026-11-24"} for c in ids],
            "paths": [f"/{c}" for c in ids],
        },
    }


def _commit_together(lake: Lake, manifests: list[dict]) -> list[BaseException]:
    """Commit the runs in threads released at the same moment."""
    gate = threading.Barrier(len(manifests))
    errors: list[BaseException] = []

    def go(m):
        run = RunDir(lake.root, m["run_id"])
        run.lock()
        run.write_manifest(m)
        gate.wait()
        try:
            lake.finish_run(run, m)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    threads = [threading.Thread(target=go, args=(m,)) for m in manifests]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_concurrent_runs_replacing_different_captures_both_land(tmp_path):
    lake = Lake(tmp_path / "lake")
    lake.ensure_tables()
    s = _settings(tmp_path / "lake")
    runs = [_staged_run(lake, f"run-{i}", [str(c)], s) for i, c in enumerate(CAPS)]
    assert _commit_together(lake, runs) == []
    both = decode_files([str(CAPS[0])], s), decode_files([str(CAPS[1])], s)
    for t in tables.DECODED_TABLES:
        want = normalized(tables.conform(t, both[0][t] + both[1][t]).to_pylist())
        assert normalized(delta_rs_rows(str(lake.path(t)))) == want, t


def test_concurrent_runs_replacing_the_same_capture_leave_one_winner(tmp_path):
    lake = Lake(tmp_path / "lake")
    lake.ensure_tables()
    s = _settings(tmp_path / "lake")
    runs = [_staged_run(lake, f"run-{i}", [str(CAPS[0])], s) for i in range(2)]
    assert _commit_together(lake, runs) == []
    want = decode_files([str(CAPS[0])], s)
    for t in tables.DECODED_TABLES:  # the rows once, not twice, and never a mix
        got = delta_rs_rows(str(lake.path(t)))
        assert normalized(got) == normalized(tables.conform(t, want[t]).to_pylist()), t
        files = {
            a["path"].split("/")[-1].split("-")[1]
            for a in pa.table(DeltaTable(lake.path(t)).get_add_actions(flatten=True)).to_pylist()
        }
        assert len(files) <= 1, t  # every file from one writer's task


def test_leftovers_of_a_run_killed_before_its_manifest_are_removed(spark, tmp_path, capsys):
    lake = tmp_path / "lake"
    pipeline.ingest([str(CAPS[0])], _settings(lake), spark=spark)
    before = _rows(lake)
    dead = RunDir(lake, "20260101T000000-deadbeef")
    dead.write_digests(0, 0, {0: b"\0" * 16})
    staged = lake / "commands" / STAGING / dead.run_id / "date=2026-01-01" / "capture_id=x" / "part-0.parquet"
    staged.parent.mkdir(parents=True)
    staged.write_bytes(b"PAR1")
    rc = cli.main(["recover", "--lake", str(lake)])
    err = capsys.readouterr().err
    assert rc == 0 and f"removed the leftovers of run {dead.run_id}" in err
    assert not (lake / RUNS).exists() and not (lake / "commands" / STAGING).exists()
    assert _rows(lake) == before
    rc = cli.main(["recover", "--lake", str(lake)])
    assert rc == 0 and "nothing to recover" in capsys.readouterr().out


def test_add_actions_carry_statistics_and_commits_say_what_they_did(spark, tmp_path):
    lake = tmp_path / "lake"
    pipeline.ingest([str(CAPS[0])], _settings(lake), spark=spark)
    summary = pipeline.ingest([str(c) for c in CAPS], _settings(lake), spark=spark)  # replaces CAPS[0]
    for t in tables.DECODED_TABLES:
        dt = DeltaTable(str(lake / t))
        adds = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
        assert adds, t
        rows = delta_rs_rows(str(lake / t))
        for a in adds:
            mine = pq.read_table(lake / t / a["path"]).to_pylist()
            assert a["num_records"] == len(mine) > 0
            # min/max bound every row of the file, null counts exact. Delta keeps timestamp
            # statistics to the millisecond and readers widen a max by 1 ms: brokerscope rounds its
            # max up, delta-rs's compaction rounds down
            ts = [r["ts"] for r in mine if r["ts"] is not None]
            if ts:
                assert a["min.ts"] <= min(ts) and max(ts) < a["max.ts"] + datetime.timedelta(
                    milliseconds=1
                ), t
            assert a["null_count.conn_id"] == sum(r["conn_id"] is None for r in mine), t
            protos = {r["protocol"] for r in mine}
            assert a["min.protocol"] == min(protos) and a["max.protocol"] == max(protos), t
        hist = next(h for h in dt.history() if h.get("brokerscope", {}).get("run_id") == summary.run_id)
        meta = hist["brokerscope"]
        assert meta["run_id"] == summary.run_id and sorted(meta["capture_ids"]) == sorted(
            {r["capture_id"] for r in rows}
        )
        assert hist["operationParameters"]["predicate"].startswith("capture_id IN (")
        assert (
            hist["operationMetrics"]["numRemovedFiles"] >= 1
            and hist["operationMetrics"]["numAddedFiles"] >= 1
        )
    # DuckDB's delta reader filters with the statistics and gets every edge right: before the first
    # row, and from the last row's exact microsecond (above a millisecond-truncated max)
    con = duckdb_connect()
    ts = sorted(r["ts"] for r in delta_rs_rows(str(lake / "commands")))
    for cond, want in (
        (f"ts < TIMESTAMPTZ '{ts[0].isoformat()}'", 0),
        (f"ts >= TIMESTAMPTZ '{ts[-1].isoformat()}'", ts.count(ts[-1])),
    ):
        q = f"SELECT count(*) FROM delta_scan('{lake / 'commands'}') WHERE {cond}"
        assert con.execute(q).fetchone()[0] == want, cond


def _on_disk(table_dir) -> set[str]:
    """Data files under a table directory, staging and the log excluded."""
    return {
        p.relative_to(table_dir).as_posix()
        for p in table_dir.rglob("*.parquet")
        if not p.relative_to(table_dir).parts[0].startswith("_")
    }


def test_compaction_keeps_rows_and_vacuum_removes_only_unreferenced_files(spark, tmp_path, capsys):
    caps = [str(p) for p in sorted((SAMPLE_DATA / "kafka").glob("*.pcap"))]
    lake = tmp_path / "lake"
    off = Settings.load(
        overrides={
            "lake": {"path": str(lake), "optimize_after_run": False},
            "spark": {"shuffle_partitions": 4},
        }
    )
    pipeline.ingest(caps[:4], off, spark=spark)
    pipeline.ingest(caps[4:], off, spark=spark)
    pipeline.ingest(caps[:4], off, spark=spark)  # re-ingest: the replaced files stay on disk
    before = _rows(lake)
    files = {i.name: i.files for i in Lake(lake).info()}
    dates = {r["date"] for r in delta_rs_rows(str(lake / "commands"))}
    assert files["commands"] > len(dates)  # each run's decode tasks wrote a file per date
    # a plain Parquet reader over the directory sees the replaced files too (not a Delta reader)
    assert len(_on_disk(lake / "commands")) > files["commands"]
    assert cli.main(["optimize", "--lake", str(lake)]) == 0
    out = capsys.readouterr().out
    after = {i.name: i.files for i in Lake(lake).info()}
    assert after["commands"] == len(dates) and f"commands | {files['commands']}" in out.replace("  ", " ")
    assert _rows(lake) == before  # compare by content: compaction changed files, not rows
    # vacuum with Delta's default retention deletes nothing just replaced ...
    assert cli.main(["vacuum", "--lake", str(lake)]) == 0
    assert len(_on_disk(lake / "commands")) > after["commands"]
    # ... nor with half an hour (it was rounded down to 0 hours: files replaced a moment ago went)
    capsys.readouterr()
    assert cli.main(["vacuum", "--lake", str(lake), "--retain-hours", "0.5"]) == 0
    assert not re.search(r"\| +[1-9]", capsys.readouterr().out)
    # ... with --retain-hours 0 it deletes exactly the files no version references any more
    capsys.readouterr()
    assert cli.main(["vacuum", "--lake", str(lake), "--retain-hours", "0"]) == 0
    for t in tables.TABLES:
        referenced = {
            a["path"] for a in pa.table(DeltaTable(str(lake / t)).get_add_actions(flatten=True)).to_pylist()
        }
        assert _on_disk(lake / t) == referenced, t
    assert _rows(lake) == before
    con = duckdb_connect()
    n = con.execute(f"SELECT count(*) FROM read_parquet('{lake / 'commands'}/**/*.parquet')").fetchone()[0]
    assert n == len(before["commands"])  # a plain read of the directory no longer doubles rows
    # vacuum again: nothing left to delete, and it says so (it named the deleted files again, as
    # delta-rs keeps their tombstones: found by a user trial)
    capsys.readouterr()
    assert cli.main(["vacuum", "--lake", str(lake), "--retain-hours", "0"]) == 0
    again = capsys.readouterr().out
    assert re.search(r"^commands +\| +0$", again, re.M) and not re.search(r"\| +[1-9]", again), again


def test_each_run_compacts_the_partitions_it_wrote(spark, tmp_path):
    caps = [str(p) for p in sorted((SAMPLE_DATA / "kafka").glob("*.pcap"))]
    got = {}
    for auto in (False, True):
        lake = tmp_path / f"lake-{auto}"
        s = Settings.load(
            overrides={
                "lake": {"path": str(lake), "optimize_after_run": auto},
                # decode tasks enough for the run's small files to be compacted (a set this small
                # is otherwise one task, one file)
                "spark": {"shuffle_partitions": 2 * COMPACT_MIN_FILES},
                "capture": {"split_size": 4096},
            }
        )
        pipeline.ingest(caps, s, spark=spark)
        got[auto] = ({i.name: i.files for i in Lake(lake).info()}, _rows(lake))
    assert got[True][1] == got[False][1]
    dates = {r["date"] for r in delta_rs_rows(str(tmp_path / "lake-True" / "commands"))}
    assert got[True][0]["commands"] == len(dates) < got[False][0]["commands"]  # a day's captures in one file


def test_an_older_lake_partitioned_by_capture_keeps_its_layout(spark, tmp_path):
    """Tables created by a brokerscope that partitioned by (date, capture_id) are written in that
    layout: same rows as a new lake, re-ingest still replaces."""
    from deltalake import DeltaTable as DT

    old = tmp_path / "old"
    for t in tables.DECODED_TABLES:
        DT.create(str(old / t), tables.schema(t), partition_by=["date", "capture_id"])
    new = tmp_path / "new"
    for lake in (old, new):
        pipeline.ingest([str(c) for c in CAPS], _settings(lake), spark=spark)
        pipeline.ingest([str(CAPS[0])], _settings(lake), spark=spark)
    assert _rows(old) == _rows(new)
    assert DT(str(old / "messages")).metadata().partition_columns == ["date", "capture_id"]
    assert DT(str(new / "messages")).metadata().partition_columns == ["date"]


def test_compaction_after_a_run_leaves_large_files_alone(tmp_path):
    """Only partitions with COMPACT_MIN_FILES or more files under a quarter of the target size are
    compacted after a run; `brokerscope optimize` (only_small off) compacts every file under the
    target."""
    from deltalake import write_deltalake

    lake = Lake(tmp_path / "lake")
    lake.ensure_tables()
    path = str(lake.path("streams"))
    batch = tables.conform("streams", [{"ts_ns": 1_700_000_000_000_000_000, "detected_by": "port"}] * 50)
    for _ in range(COMPACT_MIN_FILES - 1):
        write_deltalake(path, pa.Table.from_batches([batch]), mode="append")
    assert "streams" not in lake.optimize(["2023-11-14"], target_size=1 << 20, only_small=True)  # too few
    write_deltalake(path, pa.Table.from_batches([batch]), mode="append")
    sizes = pa.table(DeltaTable(path).get_add_actions(flatten=True)).column("size_bytes").to_pylist()
    assert len(sizes) == COMPACT_MIN_FILES
    # files above a quarter of the target: nothing to do
    assert "streams" not in lake.optimize(["2023-11-14"], target_size=4 * min(sizes) - 4, only_small=True)
    assert len(DeltaTable(path).file_uris()) == COMPACT_MIN_FILES
    # enough small files: compacted into one
    done = lake.optimize(["2023-11-14"], target_size=1 << 20, only_small=True)
    assert done["streams"]["numFilesRemoved"] == COMPACT_MIN_FILES
    assert len(DeltaTable(path).file_uris()) == 1
