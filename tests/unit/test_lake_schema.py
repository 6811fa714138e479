"""A lake written by an older brokerscope gains the columns added since, old rows reading null."""

from __future__ import annotations

import datetime

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from brokerscope import tables
from brokerscope.lake import Lake


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
