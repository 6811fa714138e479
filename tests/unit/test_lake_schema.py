"""Lake tables over time: an older lake gains the columns and table properties added since (old
rows reading null), and file statistics that let any reader filter on any column."""

from __future__ import annotations

import datetime
import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from brokerscope import tables
from brokerscope.lake import STATS_PROPERTY, Lake, _bounded_str, file_stats


def test_ensure_tables_adds_new_columns_to_an_older_lake(tmp_path):
    old = pa.schema(
        [
            f
            for f in tables.schema("inputs")
            if f.name not in ("damaged_bytes", "replaced_by", "filter", "filtered")
        ]
    )
    path = tmp_path / "lake" / "inputs"
    row = {n: None for n in old.names} | {"capture_id": "c1", "path": "/x.pcap", "status": "ok"}
    write_deltalake(str(path), pa.Table.from_pylist([row], schema=old))
    Lake(tmp_path / "lake").ensure_tables()
    dt = DeltaTable(str(path))
    assert sorted(pa.schema(dt.schema()).names) == sorted(tables.schema("inputs").names)
    got = dt.to_pyarrow_table().to_pylist()
    assert got == [row | {"damaged_bytes": None, "replaced_by": None, "filter": None, "filtered": None}]


def test_an_older_streams_table_gains_the_tls_columns(tmp_path):
    tls = tuple(n for n in tables.schema("streams").names if n.startswith("tls_"))
    assert len(tls) == 7
    old = pa.schema([f for f in tables.schema("streams") if f.name not in tls])
    path = tmp_path / "lake" / "streams"
    row = {n: None for n in old.names} | {
        "capture_id": "c1",
        "conn_id": "k1",
        "date": datetime.date(2026, 11, 20),
    }
    write_deltalake(str(path), pa.Table.from_pylist([row], schema=old), partition_by=["date"])
    Lake(tmp_path / "lake").ensure_tables()
    dt = DeltaTable(str(path))
    assert sorted(pa.schema(dt.schema()).names) == sorted(tables.schema("streams").names)
    got = dt.to_pyarrow_table().to_pylist()
    assert [{k: r[k] for k in ("conn_id", *tls)} for r in got] == [dict.fromkeys(tls) | {"conn_id": "k1"}]


def _messages_file(lake_root, rows: list[dict]) -> None:
    """Stage `rows` as one messages file and commit it, as a run does (statistics by file_stats)."""
    from brokerscope.lake import StagedWriter

    w = StagedWriter(str(lake_root), "run1")
    w.add("messages", tables.conform("messages", rows))
    Lake(lake_root).commit_table("messages", w.close(), [], "run1")


def test_a_filter_on_a_column_without_statistics_finds_its_rows(tmp_path):
    """delta-rs's pyarrow dataset reads the table's statistics columns from its properties; a
    column file_stats leaves out (direction) must not read as all null and lose every row."""
    lake = Lake(tmp_path / "lake")
    lake.ensure_tables()
    long_topic = "t" * 40  # longer than _STATS_STR_MAX: a null count but no min/max
    rows = [
        {"capture_id": "c1", "ts_ns": 1_700_000_000_000_000_000 + i, "direction": d, "topic": long_topic}
        for i, d in enumerate(["produce", "deliver", "produce"])
    ]
    _messages_file(lake.root, rows)
    dset = DeltaTable(lake.path("messages")).to_pyarrow_dataset()
    assert dset.count_rows(filter=pc.field("direction") == "produce") == 2
    assert dset.count_rows(filter=pc.field("topic") == long_topic) == 3
    assert dset.count_rows(filter=pc.field("capture_id") == "c2") == 0


@pytest.mark.parametrize("topic", ["\U0010ffff", "\U0010fffe", "ü-\U0001f600"])
def test_a_filter_on_a_topic_of_rare_characters_finds_its_rows(tmp_path, topic):
    """Found by a user trial: the statistics' JSON escaped U+10FFFF as a surrogate pair, which
    delta-rs reads as another value: a filter on that topic found none of its rows. Written as
    UTF-8, as delta-rs writes it itself."""
    lake = Lake(tmp_path / "lake")
    lake.ensure_tables()
    _messages_file(lake.root, [{"capture_id": "c1", "ts_ns": 1_700_000_000_000_000_000, "topic": topic}])
    dset = DeltaTable(lake.path("messages")).to_pyarrow_dataset()
    assert dset.count_rows(filter=pc.field("topic") == topic) == 1


def test_an_older_lake_gains_the_statistics_property(tmp_path):
    lake = Lake(tmp_path / "lake")
    lake.ensure_tables()
    DeltaTable(lake.path("messages")).alter.set_table_properties({STATS_PROPERTY: "capture_id"})
    lake.ensure_tables()
    conf = DeltaTable(lake.path("messages")).metadata().configuration
    assert conf[STATS_PROPERTY] == "capture_id,ts,ts_ns,protocol,topic,conn_id"


@pytest.mark.parametrize(
    "values",
    [
        ["a" * 40, "b" * 33, "ab"],
        ["x" * 31 + "\U0010ffff" * 5, "x" * 31 + "\U0010ffff" * 4],  # no cut max above them
        ["y" * 31 + "\ud7ff" + "z", "y" * 31 + "\ud7ff"],  # raising U+D7FF skips the surrogates
    ],
)
def test_cut_string_bounds_hold_every_value(values):
    lo, hi = _bounded_str(min(values), max(values))
    assert len(lo) <= 32 and all(lo <= v <= hi for v in values)
    assert len(hi) <= 32 or hi == max(values)


def test_statistics_from_values_where_the_footer_has_none(tmp_path):
    path = tmp_path / "f.parquet"
    t = pa.table({"topic": ["b", None, "a"], "ts_ns": pa.array([3, 1, 2], pa.int64())})
    pq.write_table(t, path, write_statistics=["ts_ns"])
    stats = json.loads(file_stats(path, 3))
    assert stats["nullCount"] == {"topic": 1, "ts_ns": 0}
    assert (stats["minValues"], stats["maxValues"]) == (
        {"topic": "a", "ts_ns": 1},
        {"topic": "b", "ts_ns": 3},
    )


@pytest.mark.slow
def test_reading_a_table_then_exiting_at_once_does_not_abort(tmp_path):
    """Lake.read_arrow in a process that exits right after: with pyarrow's I/O threads reading
    through delta-rs's filesystem it aborted in about 4 runs of 10 (exit 134, 'terminate called
    without an active exception'), which is how a `--skip-ingested` run with nothing new ended."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    for part in range(3):  # a few files, as a lake's inputs table has after some runs
        write_deltalake(
            str(tmp_path / "inputs"), pa.table({"path": [f"/cap/{part}.pcap"], "size": [part]}), mode="append"
        )
    code = f"from brokerscope.lake import Lake; assert len(Lake({str(tmp_path)!r}).read_arrow('inputs')) == 3"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    rcs = [
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True).returncode
        for _ in range(20)
    ]
    assert rcs == [0] * 20


def test_the_inputs_table_is_read_once_per_version(tmp_path, monkeypatch):
    """A --skip-ingested run asks for the inputs table several times; a year of nightly runs makes
    it a second's read (365 commits): read again only when its version moved on."""
    from brokerscope import tables
    from brokerscope.lake import Lake

    lake = Lake(tmp_path / "lake")
    lake.ensure_tables()
    row = {"capture_id": "c1", "path": "/a.pcap", "kind": "pcap", "size": 1, "mtime": 0, "run_id": "r1",
           "ingested_at": 0, "packets": 0, "status": "ok"}  # fmt: skip
    lake.write_inputs([row], ["/a.pcap"])
    reads = []
    real = Lake._read

    def counting(self, *a, **k):
        reads.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(Lake, "_read", counting)
    assert [r["path"] for r in lake.inputs_rows()] == ["/a.pcap"]
    assert lake.read_arrow("inputs", ["path"]).column("path").to_pylist() == ["/a.pcap"]
    assert lake.contents_of({"/a.pcap"})[0] is not lake.inputs_rows()[0]  # a copy: callers change them
    assert len(reads) == 1
    lake.write_inputs([{**row, "capture_id": "c2", "path": "/b.pcap"}], ["/b.pcap"])
    assert sorted(r["path"] for r in lake.inputs_rows()) == ["/a.pcap", "/b.pcap"]
    assert len(reads) == 2 and tables.TABLES[-1] == "inputs"
