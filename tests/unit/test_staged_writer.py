"""lake.StagedWriter: one Parquet file per (table, date) holding every capture's rows (per
(table, date, capture_id) for the tables of an older lake), bounded buffers, no partition columns
in the files."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from brokerscope import tables
from brokerscope.lake import StagedWriter


def _batch(cids: list[str], value_size: int = 10) -> object:
    rows = [
        {
            "capture_id": c,
            "ts_ns": 1_700_000_000_000_000_000 + i,
            "direction": "produce",
            "value": b"v" * value_size,
        }
        for i, c in enumerate(cids)
    ]
    return tables.conform("messages", rows)


def test_one_file_per_date_with_the_capture_id_column(tmp_path):
    w = StagedWriter(str(tmp_path), "run1")
    w.add("messages", _batch(["a", "b", "a"]))
    w.add("messages", _batch(["b"]))
    (f,) = w.close()
    assert (f["capture_id"], f["rows"], f["date"]) == (None, 4, "2023-11-14")
    assert f["path"].startswith("_staging/run1/date=2023-11-14/part-")
    t = pq.read_table(tmp_path / "messages" / f["path"])
    assert t.column("capture_id").to_pylist() == ["a", "b", "a", "b"] and "date" not in t.column_names
    stats = json.loads(f["file_stats"])
    assert stats["minValues"]["capture_id"] == "a" and stats["maxValues"]["capture_id"] == "b"


def test_older_lakes_keep_a_file_per_capture(tmp_path):
    w = StagedWriter(str(tmp_path), "run1", by_capture=("messages",))
    w.add("messages", _batch(["a", "b", "a"]))
    w.add("messages", _batch(["b"]))
    files = sorted(w.close(), key=lambda f: f["capture_id"])
    assert [(f["capture_id"], f["rows"], f["date"]) for f in files] == [
        ("a", 2, "2023-11-14"),
        ("b", 2, "2023-11-14"),
    ]
    for f in files:
        assert f["path"].startswith(f"_staging/run1/date=2023-11-14/capture_id={f['capture_id']}/")
        t = pq.read_table(tmp_path / "messages" / f["path"])
        assert t.num_rows == f["rows"] and "capture_id" not in t.column_names and "date" not in t.column_names


def test_pending_bytes_stay_bounded(tmp_path):
    w = StagedWriter(str(tmp_path), "run1", bytes_pending=1 << 20, by_capture=("messages",))
    for i in range(40):  # 40 files x 100 KB: 4 MB in all, never more than 1 MiB buffered
        w.add("messages", _batch([f"cap{i}"], value_size=100_000))
        assert w._pending_total <= 1 << 20
    files = w.close()
    assert len(files) == 40 and sum(f["rows"] for f in files) == 40
