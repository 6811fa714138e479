"""Delta Lake tables: creating them, committing a run's files atomically, reading them back.

Two writers behind one interface, chosen by `lake.writer` (auto | spark | embedded):

- `spark`: delta-spark's own writer (`df.write.format("delta")` with `replaceWhere`), used when its
  classes are on the JVM classpath (clusters started with `--packages io.delta:delta-spark_...`).
- `embedded`: Spark writes the Parquet files into a staging directory inside the table; the driver
  moves them into their partition directories and commits them, together with the removal of the
  files the same inputs produced before, in ONE Delta transaction through delta-rs.

Either way a table changes only at its commit: a run killed earlier leaves every table as it was
(its staged files are invisible to Delta readers), and re-ingesting the same inputs replaces the
partitions `capture_id IN (those inputs)` instead of adding duplicates.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import AddAction, RemoveAction

from . import tables

log = logging.getLogger(__name__)

STAGING = "_staging"


@dataclass
class TableInfo:
    name: str
    rows: int
    version: int
    size_bytes: int
    files: int


def delta_spark_available(spark) -> bool:
    """True when delta-spark's JVM classes are on the classpath of this session."""
    try:
        spark._jvm.java.lang.Class.forName("io.delta.tables.DeltaTable")
        return True
    except Exception:
        return False


def spark_schema(table: str, with_partitions: bool = True):
    from pyspark.sql.pandas.types import from_arrow_schema

    sch = tables.schema(table)
    return from_arrow_schema(sch)


class Lake:
    def __init__(self, root: str | os.PathLike, writer: str = "auto"):
        self.root = Path(root).absolute()
        if writer not in ("auto", "spark", "embedded"):
            raise ValueError(f"lake.writer must be auto|spark|embedded, not {writer!r}")
        self.writer = writer

    def path(self, table: str) -> str:
        return str(self.root / table)

    # -- creation ---------------------------------------------------------------------------
    def ensure_tables(self) -> None:
        """Create every table that does not exist yet, empty, with its full schema."""
        self.root.mkdir(parents=True, exist_ok=True)
        for t in tables.TABLES:
            p = self.path(t)
            if not DeltaTable.is_deltatable(p):
                DeltaTable.create(
                    p,
                    tables.schema(t),
                    mode="ignore",
                    partition_by=tables.partition_by(t) or None,
                    name=t,
                    description=f"brokerscope {t}",
                )

    def exists(self) -> bool:
        return all(DeltaTable.is_deltatable(self.path(t)) for t in tables.TABLES)

    def resolve_writer(self, spark) -> str:
        if self.writer == "auto":
            return "spark" if delta_spark_available(spark) else "embedded"
        if self.writer == "spark" and not delta_spark_available(spark):
            raise RuntimeError(
                "lake.writer = spark, but delta-spark's classes are not on the classpath "
                "(start Spark with --packages io.delta:delta-spark_2.13:4.0.0 or use writer = embedded)"
            )
        return self.writer

    # -- writing ----------------------------------------------------------------------------
    def write(self, table: str, df, replace_capture_ids: list[str], run_id: str, writer: str) -> int:
        """Replace the rows of `replace_capture_ids` in `table` with `df`, atomically.
        Returns the number of rows written."""
        if writer == "spark":
            return self._write_delta_spark(table, df, replace_capture_ids)
        return self._write_embedded(table, df, replace_capture_ids, run_id)

    def _write_delta_spark(self, table: str, df, replace_capture_ids: list[str]) -> int:
        cond = _in_predicate(replace_capture_ids)
        (
            df.write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", cond)
            .partitionBy(*tables.partition_by(table))
            .save(self.path(table))
        )
        dt = DeltaTable(self.path(table))
        return int(_num_records(dt, replace_capture_ids))

    def _write_embedded(self, table: str, df, replace_capture_ids: list[str], run_id: str) -> int:
        tpath = Path(self.path(table))
        stage = tpath / STAGING / run_id
        if stage.exists():
            shutil.rmtree(stage)
        df.write.mode("overwrite").partitionBy(*tables.partition_by(table)).parquet(str(stage))
        adds: list[AddAction] = []
        rows = 0
        for f in sorted(stage.rglob("*.parquet")):
            rel_stage = f.relative_to(stage)
            pvals = _partition_values(rel_stage.parent)
            dest_rel = rel_stage.parent / f"{run_id}-{f.name}"
            dest = tpath / dest_rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            md = pq.read_metadata(f)
            os.replace(f, dest)
            st = dest.stat()
            rows += md.num_rows
            adds.append(
                AddAction(
                    path=dest_rel.as_posix(),
                    size=st.st_size,
                    partition_values=pvals,
                    modification_time=int(st.st_mtime * 1000),
                    data_change=True,
                    stats=json.dumps({"numRecords": md.num_rows}),
                )
            )
        removes = self._removes(table, replace_capture_ids)
        if adds or removes:
            dt = DeltaTable(str(tpath))
            dt.create_write_transaction(
                [*removes, *adds],
                mode="append",
                schema=tables.schema(table),
                partition_by=tables.partition_by(table),
            )
        shutil.rmtree(stage, ignore_errors=True)
        try:
            (tpath / STAGING).rmdir()
        except OSError:
            pass
        return rows

    def _removes(self, table: str, capture_ids: list[str]) -> list[RemoveAction]:
        if not capture_ids:
            return []
        dt = DeltaTable(self.path(table))
        ids = set(capture_ids)
        now = int(time.time() * 1000)
        out = []
        for a in _adds(dt):
            if a.get("partition.capture_id") in ids:
                pv = {k.split(".", 1)[1]: _pv_str(v) for k, v in a.items() if k.startswith("partition.")}
                out.append(
                    RemoveAction(
                        path=a["path"],
                        data_change=True,
                        deletion_timestamp=now,
                        size=a["size_bytes"],
                        partition_values=pv,
                    )
                )
        return out

    def write_inputs(self, rows: list[dict]) -> None:
        """Record ingested inputs; a capture_id ingested again replaces its earlier record."""
        if not rows:
            return
        batch = tables.conform("inputs", rows)
        ids = sorted({r["capture_id"] for r in rows})
        write_deltalake(
            self.path("inputs"),
            pa.Table.from_batches([batch]),
            mode="overwrite",
            predicate=_in_predicate(ids),
        )

    # -- reading ----------------------------------------------------------------------------
    def read_arrow(self, table: str) -> pa.Table:
        """The table's current snapshot through delta-rs (driver-side; small tables and tests)."""
        return DeltaTable(self.path(table)).to_pyarrow_table()

    def info(self) -> list[TableInfo]:
        out = []
        for t in tables.TABLES:
            p = self.path(t)
            if not DeltaTable.is_deltatable(p):
                continue
            dt = DeltaTable(p)
            acts = _adds(dt)
            out.append(
                TableInfo(
                    t,
                    rows=sum(int(a.get("num_records") or 0) for a in acts),
                    version=dt.version(),
                    size_bytes=sum(int(a["size_bytes"]) for a in acts),
                    files=len(acts),
                )
            )
        return out

    def register(self, spark) -> list[str]:
        """Register every table as a temp view from its current Delta snapshot."""
        use_delta = delta_spark_available(spark)
        names = []
        for t in tables.TABLES:
            p = self.path(t)
            if not DeltaTable.is_deltatable(p):
                continue
            if use_delta:
                df = spark.read.format("delta").load(p)
            else:
                files = DeltaTable(p).file_uris()
                sch = spark_schema(t)
                if files:
                    df = spark.read.schema(sch).option("basePath", p).parquet(*files)
                    df = df.select(*sch.fieldNames())
                else:
                    df = spark.createDataFrame([], sch)
            df.createOrReplaceTempView(t)
            names.append(t)
        return names


def _adds(dt: DeltaTable) -> list[dict]:
    """The table's current add actions as dicts (partition values flattened)."""
    return pa.table(dt.get_add_actions(flatten=True)).to_pylist()


def _num_records(dt: DeltaTable, capture_ids: list[str]) -> int:
    ids = set(capture_ids)
    return sum(int(a.get("num_records") or 0) for a in _adds(dt) if a.get("partition.capture_id") in ids)


def _partition_values(rel: Path) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for part in rel.parts:
        k, _, v = part.partition("=")
        v = urllib.parse.unquote(v)
        out[k] = None if v == "__HIVE_DEFAULT_PARTITION__" else v
    return out


def _pv_str(v) -> str | None:
    if v is None:
        return None
    return v.isoformat() if hasattr(v, "isoformat") else str(v)


def _in_predicate(ids: list[str]) -> str:
    if not ids:
        return "false"
    quoted = ", ".join("'" + i.replace("'", "''") + "'" for i in sorted(ids))
    return f"capture_id IN ({quoted})"
