"""Read a lake back with independent readers: delta-rs and DuckDB's delta extension."""

from __future__ import annotations

import glob
import os

import pyarrow as pa
from deltalake import DeltaTable


def delta_rs_rows(table_path: str) -> list[dict]:
    return pa.table(DeltaTable(table_path).to_pyarrow_table()).to_pylist()


def derived_settings(lake: str | os.PathLike, **derived: bool):
    """The settings of a test ingest into the lake at `lake` with the derived tables named
    (journeys=True, lag=True) on or off, 4 shuffle partitions."""
    from brokerscope.config import Settings

    overrides = {"lake": {"path": str(lake)}, "spark": {"shuffle_partitions": 4}}
    overrides |= {name: {"enabled": on} for name, on in derived.items()}
    return Settings.load(overrides=overrides)


def ingest_derived(spark, pcaps: list[str], lake: str, **derived: bool):
    """One Spark run ingesting `pcaps` into the lake at `lake` with the derived tables named
    (journeys=True, lag=True) computed; no errors. Returns the run's Summary."""
    from brokerscope import pipeline

    summary = pipeline.ingest(pcaps, derived_settings(lake, **derived), spark=spark)
    assert summary.errors == []
    return summary


def duckdb_connect():
    """A DuckDB connection with the delta extension loaded offline from its wheel."""
    import duckdb
    import duckdb_extension_delta

    pattern = os.path.join(
        os.path.dirname(duckdb_extension_delta.__file__), "extensions", "*", "delta.duckdb_extension"
    )
    ext = sorted(glob.glob(pattern))[-1]
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{ext}'")
    return con


def duckdb_count(con, table_path: str) -> int:
    return con.execute(f"SELECT count(*) FROM delta_scan('{table_path}')").fetchone()[0]


def _norm(v):
    import datetime as dt

    if isinstance(v, dt.datetime):
        if v.tzinfo is None:  # Spark's collect() gives naive datetimes; brokerscope sessions run in UTC
            v = v.replace(tzinfo=dt.UTC)
        return (v - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    if isinstance(v, bytearray):
        return bytes(v)
    if isinstance(v, list):
        return [_norm(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in sorted(v.items())}
    return v


def normalized(rows: list[dict], drop: tuple[str, ...] = ()) -> list[tuple]:
    """Rows as sorted tuples of (column, value) with timestamps as epoch microseconds."""
    return sorted(tuple((k, repr(_norm(v))) for k, v in sorted(r.items()) if k not in drop) for r in rows)


def write_decoded(root: str, out: dict[str, list[dict]]) -> None:
    """Write decoded rows (`streams.decode_files`' tables, or hand-made rows of the decoded
    tables' columns) as the lake's Delta tables with delta-rs, no Spark: a lake the derived
    tables (journeys.py, lag.py) read as they read an ingested one."""
    from deltalake import write_deltalake

    from brokerscope import tables

    for t in tables.DECODED_TABLES:
        names = tables.schema(t).names
        rows = [{k: v for k, v in r.items() if k in names} for r in out.get(t, [])]
        write_deltalake(f"{root}/{t}", pa.Table.from_batches([tables.conform(t, rows)]), mode="overwrite")
