"""Delta Lake tables: creating them, committing a run's files atomically, reading them back.

Two writers behind one interface, chosen by `lake.writer` (auto | spark | embedded):

- `spark`: delta-spark's own writer (`df.write.format("delta")` with `replaceWhere`), used when its
  classes are on the JVM classpath (clusters started with `--packages io.delta:delta-spark_...`).
- `embedded`: Spark writes the Parquet files into a staging directory inside the table; the driver
  moves them into their partition directories and commits them, together with the removal of the
  files the same inputs produced before, in ONE Delta transaction through delta-rs.

Either way a table changes only at its commit (staged files are invisible to Delta readers), and
re-ingesting the same inputs replaces the partitions `capture_id IN (those inputs)` instead of
adding duplicates. The embedded writer commits from a manifest with the run's Delta txn id on every
table, so a run killed between two table commits is finished by `Lake.recover` (docs/design.md).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import math
import os
import random
import re
import shutil
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from deltalake import Schema as DeltaSchema
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, CommitProperties, RemoveAction, Transaction

from . import __version__, snapshot, tables
from .config import WRITERS
from .report import one_line, panics_held_back
from .runs import RUNS, RunDir, app_id, stopped_runs
from .topics import name_topics_df, needs_topic_names, resolve_topic_ids

log = logging.getLogger(__name__)

STAGING = "_staging"
COMMIT_ATTEMPTS = 12  # a table commit that conflicts with concurrent runs is retried this often
# columns whose min/max/null counts go into the add actions' statistics, where a table has them
STATS_COLUMNS = (
    "capture_id",
    "ts",
    "ts_ns",
    "protocol",
    "topic",
    "conn_id",
    "command",
    "request_command",
    "ack_type",
)
_STATS_STR_MAX = 32  # longer string bounds are cut (lake._bounded_str)
_MAX_CHAR = chr(0x10FFFF)
# the table property naming the columns with statistics: without it a reader may take a column
# absent from the statistics for all null (delta-rs's pyarrow dataset then skips every file of a
# filter on it, e.g. messages.direction, and returns no rows)
STATS_PROPERTY = "delta.dataSkippingStatsColumns"


@dataclass
class TableInfo:
    name: str
    rows: int
    version: int
    size_bytes: int
    files: int


def _kind(p: Path) -> str:
    """What `p` is, for a message: "a file", "a broken symbolic link", ..."""
    if p.is_file():
        return "a file"
    if p.is_symlink() and not p.exists():
        return "a broken symbolic link"
    return "a special file (a device, pipe or socket)"


def _not_a_directory(p: Path) -> None:
    """Raise ValueError when the lake path `p` is something other than a directory."""
    if (p.exists() or p.is_symlink()) and not p.is_dir():
        raise ValueError(f"lake {p} is not a directory: it is {_kind(p)}")


def delta_spark_available(spark) -> bool:
    """True when delta-spark's JVM classes are on the classpath of this session."""
    try:
        spark._jvm.java.lang.Class.forName("io.delta.tables.DeltaTable")
        return True
    except Exception:
        return False


def spark_schema(table: str):
    from pyspark.sql.pandas.types import from_arrow_schema

    sch = tables.schema(table)
    return from_arrow_schema(sch)


# the compaction after a run: partitions with at least this many files under target_size / 4
COMPACT_MIN_FILES = 8


def _small_file_partitions(dt: DeltaTable, dates: list[str] | None, small: int) -> list[str]:
    """The partitions (ISO dates; [""] for an unpartitioned table) of `dates` that hold
    COMPACT_MIN_FILES or more files smaller than `small` bytes."""
    adds = pa.table(dt.get_add_actions(flatten=True)).to_pydict()
    counts: dict[str, int] = {}
    day = adds.get("partition.date")
    for i, size in enumerate(adds["size_bytes"]):
        d = "" if day is None else str(day[i])
        if size < small and (dates is None or day is None or d in dates):
            counts[d] = counts.get(d, 0) + 1
    return sorted(d for d, n in counts.items() if n >= COMPACT_MIN_FILES)


_URL_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")  # what delta-rs decodes in a table path


class Lake:
    def __init__(self, root: str | os.PathLike, writer: str = "auto"):
        self.root = Path(root).absolute()
        if _URL_ESCAPE.search(str(self.root)):
            raise ValueError(
                f"{self.root}: a lake path with %XX in it cannot be used: delta-rs reads it as a URL "
                "escape (another directory); rename it"
            )
        if writer not in WRITERS:
            raise ValueError(f"lake.writer must be {'|'.join(WRITERS)}, not {writer!r}")
        self.writer = writer
        # table -> why it cannot be read (a damaged commit in its _delta_log, a data file its log
        # names gone): found by info() and register(), which go on with the other tables
        self.unreadable: dict[str, str] = {}
        # the `inputs` table as last read: (its version, the table, its rows as dicts or None); a
        # nightly run asks for it several times, and a year of runs makes it a second's read
        self._inputs: tuple[int, pa.Table, list[dict] | None] | None = None

    def _unreadable(self, table: str, e: Exception) -> None:
        self.unreadable[table] = f"{self.path(table)}: the Delta table cannot be read: {one_line(e)[:300]}"

    def path(self, table: str) -> str:
        return str(self.root / table)

    def partition_columns(self, table: str) -> list[str]:
        """The table's partition columns as its Delta metadata has them (a lake created by an
        older brokerscope keeps its (date, capture_id) layout), or the current layout."""
        p = self.path(table)
        if DeltaTable.is_deltatable(p):
            return list(DeltaTable(p).metadata().partition_columns)
        return tables.partition_by(table)

    def by_capture(self) -> tuple[str, ...]:
        """Tables partitioned by capture_id (older lakes): StagedWriter writes a file per capture."""
        return tuple(t for t in tables.DECODED_TABLES if "capture_id" in self.partition_columns(t))

    # -- creation ---------------------------------------------------------------------------
    def ensure_tables(self, derived: tuple[str, ...] = ()) -> None:
        """Create every table that does not exist yet, empty, with its full schema (and the
        `derived` tables a run will compute: tables.DERIVED_TABLES); add the columns a table of an
        older brokerscope lacks (new columns read as null in old rows), and name the columns
        with statistics (STATS_PROPERTY) where a table does not yet."""
        self.root.mkdir(parents=True, exist_ok=True)
        for t in (*tables.TABLES, *derived):
            p = self.path(t)
            props = stats_properties(t)
            if not DeltaTable.is_deltatable(p):
                DeltaTable.create(
                    p,
                    tables.schema(t),
                    mode="ignore",
                    partition_by=tables.partition_by(t) or None,
                    name=t,
                    description=f"brokerscope {t}",
                    configuration=props or None,
                )
                continue
            dt = DeltaTable(p)
            have = set(pa.schema(dt.schema()).names)
            missing = [f for f in tables.schema(t) if f.name not in have]
            if missing:
                dt.alter.add_columns(DeltaSchema.from_arrow(pa.schema(missing)).fields)
            if props and dt.metadata().configuration.get(STATS_PROPERTY) != props[STATS_PROPERTY]:
                dt.alter.set_table_properties(props)

    def exists(self) -> bool:
        return all(DeltaTable.is_deltatable(self.path(t)) for t in tables.TABLES)

    def check_writable(self) -> list[Path]:
        """Raise ValueError (one line naming the path and what is wrong) when the lake cannot be
        written: a file, a directory that cannot be created (a file on its way, a parent that
        takes no new entries: /proc, a read-only filesystem) or written. Creates the lake's
        directory when it is missing, and returns the directories it made (the lake's first);
        meant to run before Spark starts."""
        r = self.root
        _not_a_directory(r)
        missing = [p for p in (r, *r.parents) if not p.exists()]
        if missing:
            parent = missing[-1].parent
            if not parent.is_dir():
                raise ValueError(
                    f"cannot write to the lake {r}: {parent} is {_kind(parent)}, not a directory"
                )
            try:
                r.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ValueError(
                    f"cannot write to the lake {r}: cannot create the directory {missing[-1]} in "
                    f"{parent} ({e.strerror or e})"
                ) from None
        for d in [r, *(Path(self.path(t)) for t in tables.TABLES)]:
            if d.is_dir():
                probe = d / f".brokerscope-write-test-{uuid.uuid4().hex}"
                try:
                    with open(probe, "wb") as f:  # a block's worth and synced: a full disk says so
                        f.write(b"\0" * 4096)
                        f.flush()
                        os.fsync(f.fileno())
                    probe.unlink()
                except OSError as e:
                    with contextlib.suppress(OSError):
                        probe.unlink()
                    raise ValueError(
                        f"cannot write to the lake {r}: cannot create files in {d} ({e.strerror or e})"
                    ) from None
        return missing

    def check_readable(self) -> None:
        """Raise ValueError (one line naming the path and what is wrong) when there is no
        brokerscope lake at the path: nothing there, a file, a directory without its tables."""
        _not_a_directory(self.root)
        if not self.root.is_dir():
            raise ValueError(f"no brokerscope lake at {self.root} (run `brokerscope ingest` first)")
        if not os.access(self.root, os.R_OK | os.X_OK):
            raise ValueError(f"cannot read the lake {self.root}: permission denied")
        missing = [t for t in tables.TABLES if not DeltaTable.is_deltatable(self.path(t))]
        if len(missing) == len(tables.TABLES):
            raise ValueError(f"no brokerscope lake at {self.root} (run `brokerscope ingest` first)")

    def resolve_writer(self, spark) -> str:
        if self.writer == "auto":
            return "spark" if delta_spark_available(spark) else "embedded"
        if self.writer == "spark" and not delta_spark_available(spark):
            raise RuntimeError(
                "lake.writer = spark, but delta-spark's classes are not on the classpath "
                "(start Spark with --packages io.delta:delta-spark_4.2_2.13:4.4.1 or use writer = embedded)"
            )
        return self.writer

    # -- writing ----------------------------------------------------------------------------
    def write_dataframe(
        self, table: str, df, replace_capture_ids: list[str], topic_names: dict[str, str] | None = None
    ) -> int:
        """delta-spark's writer: replace the partitions of `replace_capture_ids` with `df` in one
        Delta commit (topics known only by id named from `topic_names`, as the embedded writer
        does). Returns the rows now held for those inputs."""
        if topic_names and "topic_id" in df.columns:
            df = name_topics_df(df, topic_names)
        self._save_delta(table, df, _in_predicate(replace_capture_ids))
        return _num_records(self.path(table), table, replace_capture_ids)

    def _save_delta(self, table: str, df, replace_where: str) -> None:
        (
            df.write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", replace_where)
            .partitionBy(*self.partition_columns(table))
            .save(self.path(table))
        )

    def apply_topic_names(self, table: str, files: list[dict], topic_names: dict[str, str]) -> None:
        """Rewrite the staged files whose rows name topics only by id (before the manifest)."""
        tpath = Path(self.path(table))
        for f in files:
            if f.get("fixup") and topic_names:
                src = tpath / f["path"]
                pq.write_table(resolve_topic_ids(pq.read_table(src), topic_names), src, compression="snappy")
                f["file_stats"] = file_stats(src, f["rows"])

    def drop_captures(self, table: str, files: list[dict], ids: set[str]) -> list[dict]:
        """The staged files of `table` without the rows of the capture `ids` (inputs the run does
        not ingest after all: pipeline._Writing.identified), before the manifest: a file of one
        of them is deleted, a file that mixes them with other captures rewritten without them."""
        if not ids:
            return files
        tpath, drop, kept = Path(self.path(table)), pa.array(sorted(ids), pa.string()), []
        for f in files:
            src = tpath / f["path"]
            if f.get("capture_id") is not None:  # a file per capture (an older lake's layout)
                if f["capture_id"] in ids:
                    src.unlink(missing_ok=True)
                else:
                    kept.append(f)
                continue
            t = pq.read_table(src)
            gone = pa.compute.fill_null(pa.compute.is_in(t["capture_id"], value_set=drop), False)
            rest = t.filter(pa.compute.invert(gone))
            if rest.num_rows == 0:
                src.unlink(missing_ok=True)
                continue
            if rest.num_rows < t.num_rows:
                pq.write_table(rest, src, compression="snappy")
                f["rows"], f["file_stats"] = rest.num_rows, file_stats(src, rest.num_rows)
            kept.append(f)
        return kept

    def commit_table(
        self,
        table: str,
        files: list[dict],
        replace_capture_ids: list[str],
        run_id: str,
        captures: list[str] | None = None,
    ) -> tuple[int, bool]:
        """The embedded writer's commit of one table: move the Parquet files the tasks staged (see
        StagedWriter) into their partition directories and commit them, with the removal of every
        row of `replace_capture_ids` (see _removes), in one delta-rs transaction carrying the run's
        txn id (`captures`: the run's capture ids, for the commitInfo).
        Idempotent: a table that already holds the run is left alone (roll forward). A commit that
        conflicts with another writer's is retried against the new snapshot. Returns (rows added,
        committed now)."""
        tpath = Path(self.path(table))
        aid = app_id(run_id)
        rows = sum(int(f["rows"]) for f in files)
        if DeltaTable(str(tpath)).transaction_version(aid) is not None:
            return rows, False
        parts = self.partition_columns(table)
        adds: list[AddAction] = []
        for f in sorted(files, key=lambda f: f["path"]):
            src = tpath / f["path"]
            dest_rel = Path(*Path(f["path"]).parts[2:])  # drop _staging/<run_id>/
            dest = tpath / dest_rel
            if src.exists():
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dest)
            elif not dest.exists():
                raise RuntimeError(f"{table}: staged file {f['path']} of run {run_id} is missing")
            st = dest.stat()
            adds.append(
                AddAction(
                    path=dest_rel.as_posix(),
                    size=st.st_size,
                    partition_values={k: f[k] for k in parts},
                    modification_time=int(st.st_mtime * 1000),
                    data_change=True,
                    stats=f.get("file_stats") or json.dumps({"numRecords": f["rows"]}),
                )
            )
        captures = sorted(captures or {f["capture_id"] for f in files if f["capture_id"]})
        first: set[str] | None = None
        for attempt in range(COMMIT_ATTEMPTS):
            dt = DeltaTable(str(tpath))
            removes, kept = self._removes(dt, table, replace_capture_ids)
            if first is None:
                first = {r.path for r in removes}
            elif {r.path for r in removes} - first:
                log.warning(
                    "%s: another run committed rows of the captures run %s replaces while it ran; "
                    "this run's rows replace them (the last commit wins)",
                    table,
                    run_id,
                )
                first = {r.path for r in removes}
            if not adds and not removes:
                break
            meta = _commit_info(
                run_id, captures, replace_capture_ids, len(adds) + len(kept), len(removes), rows
            )
            # delta-rs would rebase a blind commit onto a concurrent one by itself, keeping removes
            # computed on the old snapshot (both runs' rows of a capture would survive): no retries
            # there, they happen here with the removes recomputed
            props = CommitProperties(
                custom_metadata=meta, app_transactions=[Transaction(aid, 1, _now_ms())], max_commit_retries=0
            )
            try:
                with panics_held_back():
                    dt.create_write_transaction(
                        [*removes, *kept, *adds],
                        mode="append",
                        schema=tables.schema(table),
                        partition_by=parts,
                        commit_properties=props,
                    )
                break
            except CommitFailedError:  # another run committed first: retry on its snapshot
                if attempt == COMMIT_ATTEMPTS - 1:
                    raise
                log.warning("%s: commit of run %s conflicted; retrying on the new snapshot", table, run_id)
                time.sleep(min(2.0, 0.05 * 2**attempt) * (1 + random.random()))
        return rows, True

    def finish_run(self, run: RunDir, manifest: dict, progress=lambda m: None) -> dict[str, int]:
        """Commit a run from its manifest, table by table, then its `inputs` record; tables that
        already hold the run are skipped, so this also rolls forward a run that was killed."""
        rows = {}
        for t in tables.DECODED_TABLES:
            progress(f"committing {t}")
            rows[t], _ = self.commit_table(
                t,
                manifest["tables"].get(t, []),
                manifest["replace_ids"],
                run.run_id,
                manifest.get("capture_ids"),
            )
        inp = manifest["inputs"]
        requested = tuple(t for t in tables.DERIVED_TABLES if manifest.get(t))
        rows.update(
            self.finish_derived(
                [_row_from_json(r) for r in inp["rows"]],
                inp["paths"],
                run.run_id,
                manifest.get("capture_ids") or [],
                manifest["replace_ids"],
                requested,
                progress,
            )
        )
        for t in (*tables.DECODED_TABLES, *tables.DERIVED_TABLES):
            self.drop_staging(t, run.run_id)
        run.remove()
        return rows

    def finish_derived(
        self,
        records: list[dict],
        paths: list[str],
        run_id: str,
        capture_ids: list[str],
        replace_ids: list[str],
        requested: tuple[str, ...] = (),
        progress=lambda m: None,
    ) -> dict[str, int]:
        """A run's last steps after its decoded tables are committed: its clocks, the derived
        tables (journeys, lag) and its `inputs` record (`records` replacing the rows of `paths`).

        The derived rows of a capture are computed over a capture set (derived_set): the run's
        captures and every capture an earlier run computed them with (or, never computed, ingested
        with) where the run replaces one of those, whose rows are computed again with it (a
        producer's capture ingested again keeps its consumers'). A derived table the run did not
        ask for is computed too where an earlier run computed the set's (rows or none) or it holds
        rows of the set: they would be stale. The set's captures' `inputs` rows name the run
        (`derived_run`). Rows added per derived table."""
        members = self.derived_set(capture_ids, replace_ids)
        involved = members | set(replace_ids)
        computed = self._computed(involved)  # the set's derived rows were computed, rows or none
        todo = [
            t
            for t in tables.DERIVED_TABLES
            if t in requested
            or (DeltaTable.is_deltatable(self.path(t)) and computed)
            or self._holds(t, involved)
        ]
        if todo:
            records, paths = self._with_set_rows(records, paths, members, run_id)
        clk = self.clock_inputs(records, members if todo else set(capture_ids), progress)
        payload = {r["capture_id"]: r.get("payload") for r in records if r.get("capture_id")}
        rows = {}
        for t in todo:
            progress(
                f"computing {t}" if t in requested else f"computing {t} again (its captures were replaced)"
            )
            rows[t] = self.commit_derived(t, run_id, sorted(members), replace_ids, clk, payload)
        self.write_inputs(records, paths, run_id)
        return rows

    def derived_set(self, capture_ids: list[str], replace_ids: list[str]) -> set[str]:
        """The captures a run's derived rows are computed over: its own (`capture_ids`) and those
        still in the lake in the set of a capture the run replaces (`replace_ids`, its own
        included). A capture's set: the captures its derived rows were computed with (the same
        `derived_run`), or, never computed, those its run ingested with it (the same `run_id`)."""
        if not DeltaTable.is_deltatable(self.path("inputs")):
            return set(capture_ids)
        prior = self.inputs_rows()
        gone = set(replace_ids) | set(capture_ids)

        def set_of(r: dict) -> str:
            return r.get("derived_run") or r["run_id"]

        sets = {set_of(r) for r in prior if r["capture_id"] in gone}
        kept = {
            r["capture_id"]
            for r in prior
            if r["capture_id"] not in gone and r["status"] in ("ok", "partial") and set_of(r) in sets
        }
        return set(capture_ids) | kept

    def _computed(self, ids: set[str]) -> bool:
        """Whether an earlier run computed the derived tables of one of captures `ids` (its
        `inputs.derived_run`), whether or not that gave rows."""
        if not ids or not DeltaTable.is_deltatable(self.path("inputs")):
            return False
        return any(r.get("derived_run") for r in self.inputs_rows() if r["capture_id"] in ids)

    def _holds(self, table: str, ids: set[str]) -> bool:
        """Whether derived `table` exists and holds rows of one of `ids`."""
        if not ids or not DeltaTable.is_deltatable(self.path(table)):
            return False
        found = snapshot.dataset(self.path(table), table).to_table(
            columns=["capture_id"], filter=pa.compute.field("capture_id").isin(sorted(ids)), use_threads=False
        )
        return found.num_rows > 0

    def _with_set_rows(
        self, records: list[dict], paths: list[str], members: set[str], run_id: str
    ) -> tuple[list[dict], list[str]]:
        """The run's `inputs` record with `derived_run` set on the rows of `members`, and the
        rows of the paths of members from earlier runs written again with it."""
        mine = set(paths)
        prior = self.inputs_rows() if DeltaTable.is_deltatable(self.path("inputs")) else []
        theirs = {r["path"] for r in prior if r["capture_id"] in members and r["path"] not in mine}
        out = [dict(r) for r in records] + [dict(r) for r in prior if r["path"] in theirs]
        for r in out:
            if r.get("capture_id") in members and r.get("status") in ("ok", "partial"):
                r["derived_run"] = run_id
        return out, [*paths, *sorted(theirs)]

    def clock_inputs(self, rows: list[dict], ids: set[str], progress=lambda m: None):
        """The clocks of the vantage points of the captures `ids` (clocks.estimate, from their
        committed commands rows; nothing to do for one vantage point), written into their
        `inputs` rows (`rows`, the run's record): returned for the journeys."""
        from . import clocks

        mine = {
            r["capture_id"]: r["vantage"] for r in rows if r.get("capture_id") in ids and r.get("vantage")
        }
        if len(set(mine.values())) > 1:
            progress("estimating the clock offsets of the vantage points")
        clk = clocks.estimate(str(self.root), mine)
        for r in rows:
            o = clk.offsets.get(r.get("capture_id"))
            if o is not None:
                r["clock_offset_us"] = o.offset_ns / 1000
                r["clock_offset_bound_us"] = o.bound_ns / 1000
                r["clock_offset_ref"] = o.ref
                r["clock_offset_pairs"] = o.pairs
        return clk

    def commit_derived(
        self,
        table: str,
        run_id: str,
        capture_ids: list[str],
        replace_ids: list[str],
        clk=None,
        payload: dict[str, str] | None = None,
    ) -> int:
        """Compute a derived table (tables.DERIVED_TABLES: journeys.py, lag.py) of the captures
        `capture_ids` (a capture set: derived_set) from the committed tables and commit it like a
        decoded table (staged, then commit_table), replacing its rows of those and `replace_ids`;
        `clk`: the run's clocks and `payload` the captures' payload policies (inputs.payload),
        for the journeys. A table already holding the run is left alone (roll forward). Rows
        added."""
        from . import journeys, lag

        compute = {
            "journeys": lambda root, ids: journeys.compute(root, ids, clk, payload),
            "lag": lag.compute,
        }[table]
        self.ensure_tables((table,))
        if DeltaTable(self.path(table)).transaction_version(app_id(run_id)) is not None:
            return 0
        writer = StagedWriter(str(self.root), run_id)
        try:
            writer.add(table, compute(str(self.root), capture_ids))
            files = writer.close()
        except BaseException:
            writer.abort()
            raise
        rows, _ = self.commit_table(
            table, files, sorted(set(replace_ids) | set(capture_ids)), run_id, capture_ids
        )
        self.drop_staging(table, run_id)
        return rows

    def optimize(
        self, dates: list[str] | None = None, target_size: int = 128 << 20, only_small: bool = False
    ) -> dict[str, dict]:
        """Compact small files into files of about `target_size` with delta-rs (optimize.compact),
        in the partitions of `dates` (ISO dates; all partitions when None). Rows are unchanged;
        the replaced files stay on disk for readers of older versions until `vacuum`. Returns
        delta-rs's metrics per table.

        `only_small` (the compaction after each run): a partition is compacted only where it holds
        COMPACT_MIN_FILES or more files under a quarter of `target_size`, so a run that wrote a
        few large files does not rewrite them (merging four 30 MB files gains readers little and
        costs a second pass over the run's output), while the small files of runs over small
        captures are merged before they pile up."""
        out = {}
        for t in tables.ALL_TABLES:
            p = self.path(t)
            if not DeltaTable.is_deltatable(p):
                continue
            filters = None
            by_date = "date" in self.partition_columns(t)
            if dates is not None and by_date:
                if not dates:
                    continue
                filters = [("date", "in", sorted(set(dates)))]
            dt = DeltaTable(p)
            if only_small:
                todo = _small_file_partitions(dt, dates if by_date else None, target_size // 4)
                if not todo:
                    continue
                if by_date:
                    filters = [("date", "in", todo)]
            meta = {"brokerscope": {"operation": "optimize", "version": __version__}}
            with panics_held_back():
                out[t] = dt.optimize.compact(
                    partition_filters=filters,
                    target_size=target_size,
                    commit_properties=CommitProperties(custom_metadata=meta),
                )
        return out

    def vacuum(self, retain_hours: float = 168, dry_run: bool = False) -> dict[str, list[str]]:
        """Delete the data files no table version of the last `retain_hours` references (delta-rs
        vacuum). Staged files of running runs are not touched (vacuum skips `_` directories)."""
        out = {}
        for t in tables.ALL_TABLES:
            p = self.path(t)
            if not DeltaTable.is_deltatable(p):
                continue
            dt = DeltaTable(p)
            # whole hours for delta-rs, rounded up: 0.5 is no licence to delete files of 0.2 hours
            opts = {"retention_hours": math.ceil(retain_hours), "enforce_retention_duration": False}
            # delta-rs lists every file its log removed, also those a vacuum deleted before (it
            # keeps the tombstones): only those still on disk are reported
            found = [
                f for f in dt.vacuum(dry_run=True, **opts) if (Path(p) / urllib.parse.unquote(f)).exists()
            ]
            if found and not dry_run:
                with panics_held_back():
                    dt.vacuum(dry_run=False, **opts)
            out[t] = found
        return out

    def recover(self) -> list[str]:
        """Finish every run that was killed after writing its manifest, remove what runs killed
        before it left behind (staged files, run directories). One line per run, for the user."""
        out = []
        if not (self.root / RUNS).is_dir():
            return out
        for run in stopped_runs(self.root):
            m = run.manifest()
            if m is not None:
                self.finish_run(run, m)
                n = len(m["inputs"]["paths"])
                out.append(f"finished run {run.run_id}, interrupted after its manifest ({n} input(s))")
            else:
                for t in (*tables.DECODED_TABLES, *tables.DERIVED_TABLES):
                    self.drop_staging(t, run.run_id)
                run.remove()
                out.append(f"removed the leftovers of run {run.run_id}, killed before its commit")
        return out

    def drop_staging(self, table: str, run_id: str) -> None:
        stage = Path(self.path(table)) / STAGING
        shutil.rmtree(stage / run_id, ignore_errors=True)
        try:
            stage.rmdir()
        except OSError:
            pass

    def _removes(
        self, dt: DeltaTable, table: str, capture_ids: list[str]
    ) -> tuple[list[RemoveAction], list[AddAction]]:
        """Actions that take every row of `capture_ids` out of the snapshot `dt`: removes of the
        files holding them, and adds of rewritten files for the rows of other captures that shared
        a file with them (compaction mixes a day's captures). A file is read only where its
        capture_id statistics cannot rule it out, and then its capture_id column first."""
        if not capture_ids:
            return [], []
        ids = set(capture_ids)
        lo_id, hi_id = min(ids), max(ids)
        now = int(time.time() * 1000)
        tpath = Path(self.path(table))
        removes, kept = [], []
        for a in _adds(dt):
            pv = {k.split(".", 1)[1]: _pv_str(v) for k, v in a.items() if k.startswith("partition.")}
            if "capture_id" in pv:  # partitioned by capture: the partition value says it all
                if pv["capture_id"] not in ids:
                    continue
            else:
                lo, hi = a.get("min.capture_id"), a.get("max.capture_id")
                if lo is not None and hi is not None and (hi < lo_id or lo > hi_id):
                    continue
                if lo is None or lo != hi or lo not in ids:
                    col = pq.read_table(tpath / a["path"], columns=["capture_id"]).column("capture_id")
                    n_hit = (
                        pa.compute.sum(pa.compute.is_in(col, value_set=pa.array(sorted(ids)))).as_py() or 0
                    )
                    if n_hit == 0:
                        continue
                    if n_hit < len(col):
                        kept.append(self._rewrite_without(tpath, a, pv, ids))
            removes.append(
                RemoveAction(
                    path=a["path"],
                    data_change=True,
                    deletion_timestamp=now,
                    size=a["size_bytes"],
                    partition_values=pv,
                )
            )
        return removes, kept

    @staticmethod
    def _rewrite_without(tpath: Path, a: dict, pv: dict, ids: set[str]) -> AddAction:
        """A new file in `a`'s partition holding its rows of the captures other than `ids`."""
        t = pq.read_table(tpath / a["path"])
        keep = pa.compute.invert(pa.compute.is_in(t.column("capture_id"), value_set=pa.array(sorted(ids))))
        t = t.filter(keep)
        rel = Path(a["path"]).parent / f"part-rw-{uuid.uuid4().hex}.parquet"
        pq.write_table(t, tpath / rel, compression="snappy")
        st = (tpath / rel).stat()
        return AddAction(
            path=rel.as_posix(),
            size=st.st_size,
            partition_values=pv,
            modification_time=int(st.st_mtime * 1000),
            data_change=True,
            stats=file_stats(tpath / rel, t.num_rows),
        )

    def path_history(
        self, current: dict[str, object], grew: Callable[[str, int, str], bool]
    ) -> tuple[list[str], list[dict], list[tuple[str, str]]]:
        """For a run recording `current` (path -> its Input, capture_id known): the capture ids
        whose rows the run replaces, the earlier `inputs` rows of those paths to keep, and the
        (path, earlier capture_id) of paths given other content.

        A path's earlier content is replaced (its rows removed in the run's commits) where the
        path's content now begins with it, `grew(path, earlier size, earlier capture_id)`: a
        capture that grew, a segment appended to; its `inputs` rows stay, as `replaced`, and
        another path still holding that content keeps its rows. Other content under the name (a
        ring buffer's next lap, a name reused) is a capture of its own: the earlier one keeps its
        rows and its `inputs` row."""
        prior = self.inputs_rows()
        new_ids = {i.capture_id for i in current.values()}
        held = {
            r["capture_id"]
            for r in prior
            if r["path"] not in current and r["status"] in ("ok", "partial") and r["capture_id"]
        }
        # the content each path held last: other content now is news once, not at every run
        last = latest_by_path(r for r in prior if r["capture_id"] and r["status"] != "replaced")
        history, old, other = [], set(), []
        for r in prior:
            i = current.get(r["path"])
            if i is None or not r["capture_id"] or r["capture_id"] == i.capture_id:
                continue  # another path, a rejected file's record, or this content again
            if r["status"] != "replaced":
                if not grew(r["path"], r["size"], r["capture_id"]):
                    if last.get(r["path"]) is r:
                        other.append((r["path"], r["capture_id"]))
                    history.append(dict(r))  # the rows of inputs_rows are shared
                    continue
                r = {**r, "status": "replaced", "replaced_by": i.capture_id}
                old.add(r["capture_id"])
            history.append(r)
        return sorted(new_ids | (old - held)), history, other

    def sharing_connections(self, ids: set[str], streams: Callable[[], pa.Table] | None = None) -> set[str]:
        """The capture ids that share a connection with one of `ids`, through any number of
        others (streams.capture_ids: a connection that ran across rotated files), `ids`
        included. `streams`: the streams table (its capture_ids column at least), when the
        caller has it."""
        if not ids or not DeltaTable.is_deltatable(self.path("streams")):
            return set(ids)
        t = streams() if streams is not None else self._read("streams", ["capture_ids"])
        groups = [set(g) for g in t.column("capture_ids").to_pylist() if g and len(g) > 1]
        out, grew = set(ids), True
        while grew:
            grew = False
            for g in groups:
                if not g <= out and g & out:
                    out |= g
                    grew = True
        return out

    def contents_of(self, paths: set[str]) -> list[dict]:
        """The `inputs` rows of content ingested from `paths` (a capture_id: ok, partial or
        replaced), as they are: a run that records a path as rejected (emptied, gone, no longer
        a capture) writes them again beside its row, so the rows decoded from that content keep
        the record that maps their capture_id to the path."""
        if not paths:
            return []
        return [dict(r) for r in self.inputs_rows() if r["path"] in paths and r["capture_id"]]

    def vantage_ends(self, other_than: set[str]) -> dict[str, int]:
        """The vantage points of the captures ingested before, but for `other_than` (capture
        ids), and the time (ns) their last connection ended (streams.last_ts): the chains a
        run's files may continue (vantage.groups' `before`)."""
        if not {"inputs", "streams"} <= set(self.table_names()):
            return {}
        place = {
            r["capture_id"]: r["vantage"]
            for r in self.inputs_rows()
            if r["vantage"] and r["status"] in ("ok", "partial") and r["capture_id"] not in other_than
        }
        if not place:
            return {}
        st = self.read_arrow("streams", ["capture_id", "last_ts"])
        st = st.filter(pa.compute.is_in(st["capture_id"], pa.array(sorted(place), pa.string())))
        st = st.set_column(1, "last_us", st["last_ts"].cast(pa.int64()))
        ends: dict[str, int] = {}
        for r in st.group_by("capture_id").aggregate([("last_us", "max")]).to_pylist():
            if r["last_us_max"] is not None:
                v, ns = place[r["capture_id"]], r["last_us_max"] * 1000
                ends[v] = max(ends.get(v, ns), ns)
        return ends

    def write_inputs(self, rows: list[dict], paths: list[str], run_id: str | None = None) -> None:
        """Record what a run ingested: `rows` replace every earlier row of `paths` (once per run:
        with `run_id`, a table already holding the run's txn is left alone)."""
        if not rows:
            return
        aid = app_id(run_id) if run_id else None
        if aid and DeltaTable(self.path("inputs")).transaction_version(aid) is not None:
            return
        batch = tables.conform("inputs", rows)
        ids = sorted({r["capture_id"] for r in rows if r.get("capture_id")})
        for attempt in range(COMMIT_ATTEMPTS):
            meta = {"brokerscope": {"run_id": run_id, "capture_ids": ids, "version": __version__}}
            txn = [Transaction(aid, 1, _now_ms())] if aid else None
            try:
                with panics_held_back():
                    write_deltalake(
                        self.path("inputs"),
                        pa.Table.from_batches([batch]),
                        mode="overwrite",
                        predicate=_in_predicate(paths, "path"),
                        commit_properties=CommitProperties(
                            custom_metadata=meta, app_transactions=txn, max_commit_retries=0
                        ),
                    )
                return
            except CommitFailedError:
                if attempt == COMMIT_ATTEMPTS - 1:
                    raise
                time.sleep(min(2.0, 0.05 * 2**attempt) * (1 + random.random()))

    # -- reading ----------------------------------------------------------------------------
    def read_arrow(self, table: str, columns: list[str] | None = None) -> pa.Table:
        """The table's current snapshot (driver-side; small tables and tests), all its columns
        or `columns`, read on this thread from its local files (snapshot.dataset says why);
        `inputs` once per version of the table."""
        if table == "inputs":
            t = self._inputs_table()
            return t.select(columns) if columns else t
        return self._read(table, columns)

    def _read(self, table: str, columns: list[str] | None = None) -> pa.Table:
        """The table's current snapshot read from its local files (snapshot.dataset)."""
        return snapshot.dataset(self.path(table), table).to_table(columns=columns, use_threads=False)

    def _inputs_table(self) -> pa.Table:
        """The `inputs` table, read again only when its version moved on (its log's last commit,
        listed here: DeltaTable.version() made a process that exited soon after abort, 1 run in
        80 on a loaded machine)."""
        version = _log_version(self.path("inputs"))
        if self._inputs is None or version is None or self._inputs[0] != version:
            self._inputs = (version, self._read("inputs"), None)
        return self._inputs[1]

    def inputs_rows(self) -> list[dict]:
        """The `inputs` table's rows as dicts (shared between callers: not to be changed), made
        once per version of the table."""
        t = self.read_arrow("inputs")
        version, _, rows = self._inputs
        if rows is None:
            rows = t.to_pylist()
            self._inputs = (version, t, rows)
        return rows

    def readable(self, table: str) -> DeltaTable:
        """The table's current snapshot, every data file its log names on disk; an error (one
        line in `unreadable`) where the log is damaged or a file is gone."""
        try:
            dt = DeltaTable(self.path(table))
            _all_files_there(dt, self.path(table))
            return dt
        except Exception as e:  # noqa: BLE001 - delta-rs's errors for a damaged log: one line
            self._unreadable(table, e)
            raise

    def table_names(self) -> list[str]:
        """The brokerscope tables this lake holds (in tables.ALL_TABLES order)."""
        return [t for t in tables.ALL_TABLES if DeltaTable.is_deltatable(self.path(t))]

    def info(self) -> list[TableInfo]:
        """Rows, version, files and bytes of each table that can be read (the others in
        `unreadable`)."""
        out = []
        for t in self.table_names():
            p = self.path(t)
            try:
                dt = DeltaTable(p)
                acts = _adds(dt)
                _all_files_there(dt, p)
            except Exception as e:  # noqa: BLE001 - delta-rs's errors for a damaged log: one line
                self._unreadable(t, e)
                continue
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
        """Register every table as a temp view from its current Delta snapshot; a table that
        cannot be read is left out (`unreadable`), the others are registered."""
        use_delta = delta_spark_available(spark)
        names = []
        for t in self.table_names():
            p = self.path(t)
            try:
                if use_delta:
                    df = spark.read.format("delta").load(p)
                else:
                    dt = DeltaTable(p)
                    files, base = snapshot.local_files(dt, p) or (dt.file_uris(), p)
                    sch = spark_schema(t)
                    if files:
                        df = spark.read.schema(sch).option("basePath", base).parquet(*files)
                        df = df.select(*sch.fieldNames())
                    else:
                        df = spark.createDataFrame([], sch)
            except Exception as e:  # noqa: BLE001 - a damaged log, a data file gone: one line
                self._unreadable(t, e)
                spark.catalog.dropTempView(t)  # not a view of this table read earlier
                continue
            df.createOrReplaceTempView(t)
            names.append(t)
        return names


class StagedWriter:
    """Writes one task's rows as Parquet files into the tables' staging directories.

    Runs inside a Spark task (the embedded writer): rows never travel through the JVM. Files go to
    `<lake>/<table>/_staging/<run_id>/date=<d>/part-<uuid>.parquet`, one per table and date, rows
    of every capture together, without the `date` column (Delta keeps partition values in the
    log). Tables of a lake created before brokerscope partitioned by date only (`by_capture`) get
    a file per (date, capture_id) under `date=<d>/capture_id=<c>/`. `close()` returns what the
    driver needs to commit them. Rows are buffered per file up to `rows_per_group` rows or `bytes_per_group`
    bytes, then written as one row group; all buffers together stay under `bytes_pending` (the
    biggest is written out first), so memory is bounded however many files a task writes.
    """

    def __init__(
        self,
        root: str,
        run_id: str,
        rows_per_group: int = 65536,
        bytes_per_group: int = 64 << 20,
        bytes_pending: int = 256 << 20,
        by_capture: tuple[str, ...] = (),
    ):
        self.root = Path(root)
        self.run_id = run_id
        self.by_capture = set(by_capture)
        self.rows_per_group = rows_per_group
        self.bytes_per_group = bytes_per_group
        self.bytes_pending = bytes_pending
        self._pending_total = 0
        self._token = uuid.uuid4().hex
        self._open: dict[
            tuple[str, str, str], list
        ] = {}  # key -> [writer, relpath, rows, pending, pending_bytes]

    def add(self, table: str, batch: pa.RecordBatch) -> None:
        """A conformed batch of `table` (tables.schema), partition columns included."""
        if batch.num_rows == 0:
            return
        dates = batch.column("date")
        cids = (
            batch.column("capture_id") if table in self.by_capture else pa.nulls(batch.num_rows, pa.string())
        )
        if dates.null_count == 0 and _single(dates) and (cids.null_count == len(cids) or _single(cids)):
            self._add(table, dates[0].as_py().isoformat(), cids[0].as_py(), batch)
            return
        keys = [(d.isoformat() if d else None, c) for d, c in zip(dates.to_pylist(), cids.to_pylist())]
        for key in dict.fromkeys(keys):
            mask = pa.array([k == key for k in keys])
            self._add(table, key[0], key[1], batch.filter(mask))

    def _add(self, table: str, date: str | None, cid: str | None, batch: pa.RecordBatch) -> None:
        key = (table, date, cid)
        st = self._open.get(key)
        by_capture = table in self.by_capture
        if st is None:
            part = f"date={_pq_path_value(date)}"
            if by_capture:
                part += f"/capture_id={_pq_path_value(cid)}"
            rel = f"{STAGING}/{self.run_id}/{part}/part-{self._token}-{len(self._open):05d}.parquet"
            st = self._open[key] = [None, rel, 0, [], 0, False]
        data = batch.drop_columns(["date", "capture_id"] if by_capture else ["date"])
        if not st[5] and needs_topic_names(data):
            st[5] = True
        st[3].append(data)
        st[4] += data.nbytes
        st[2] += data.num_rows
        self._pending_total += data.nbytes
        if sum(b.num_rows for b in st[3]) >= self.rows_per_group or st[4] >= self.bytes_per_group:
            self._flush(table, st)
        while self._pending_total > self.bytes_pending:
            (t, _, _), big = max(self._open.items(), key=lambda kv: kv[1][4])
            self._flush(t, big)

    def _flush(self, table: str, st: list) -> None:
        if not st[3]:
            return
        if st[0] is None:
            path = self.root / table / st[1]
            path.parent.mkdir(parents=True, exist_ok=True)
            st[0] = pq.ParquetWriter(str(path), st[3][0].schema, compression="snappy")
        st[0].write_table(pa.Table.from_batches(st[3]))
        self._pending_total -= st[4]
        st[3], st[4] = [], 0

    def close(self) -> list[dict]:
        out = []
        for (table, date, cid), st in self._open.items():
            self._flush(table, st)
            st[0].close()
            out.append(
                {
                    "table": table,
                    "path": st[1],
                    "date": date,
                    "capture_id": cid,
                    "rows": st[2],
                    "fixup": st[5],
                    "file_stats": file_stats(self.root / table / st[1], st[2]),
                }
            )
        self._open.clear()
        return out

    def abort(self) -> None:
        for (table, _, _), st in self._open.items():
            if st[0] is not None:
                st[0].close()
                Path(self.root / table / st[1]).unlink(missing_ok=True)
        self._open.clear()


def stats_properties(table: str) -> dict[str, str]:
    """The table properties naming the columns file_stats gives statistics for: the STATS_COLUMNS
    the table has (the inputs table, written by write_deltalake with its own statistics, none)."""
    if table == "inputs":
        return {}
    names = set(tables.schema(table).names)
    return {STATS_PROPERTY: ",".join(c for c in STATS_COLUMNS if c in names)}


def _single(arr: pa.Array) -> bool:
    return arr[0] == arr[len(arr) - 1] and len(pa.compute.unique(arr)) == 1


def _pq_path_value(v: str | None) -> str:
    return "__HIVE_DEFAULT_PARTITION__" if v is None else urllib.parse.quote(v, safe="-_.")


def latest_by_path(rows: Iterable[dict]) -> dict[str, dict]:
    """path -> the `inputs` row of `rows` ingested last there (then by run id)."""
    out: dict[str, dict] = {}
    for r in rows:
        seen = out.get(r["path"])
        if seen is None or (r["ingested_at"], r["run_id"]) > (seen["ingested_at"], seen["run_id"]):
            out[r["path"]] = r
    return out


def _all_files_there(dt: DeltaTable, root: str) -> None:
    """FileNotFoundError naming the first data file the table's log names that is not on disk
    (deleted or lost by hand: every reader of the table would fail on it)."""
    local = snapshot.local_files(dt, root)
    uris = local[0] if local is not None else dt.file_uris()
    gone = [u for u in uris if "://" not in u and not os.path.exists(u)]
    if gone:
        raise FileNotFoundError(
            f"a data file its log names is gone: {gone[0]} ({len(gone)} of {len(uris)} files)"
        )


def _adds(dt: DeltaTable) -> list[dict]:
    """The table's current add actions as dicts (partition values flattened)."""
    return pa.table(dt.get_add_actions(flatten=True)).to_pylist()


def _num_records(path: str, table: str, capture_ids: list[str]) -> int:
    ids = pa.array(sorted(set(capture_ids)), pa.string())
    return snapshot.dataset(path, table).count_rows(
        filter=pa.compute.field("capture_id").isin(ids), use_threads=False
    )


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


def _in_predicate(ids: list[str], column: str = "capture_id") -> str:
    if not ids:
        return "false"
    quoted = ", ".join("'" + i.replace("'", "''") + "'" for i in sorted(set(ids)))
    return f"{column} IN ({quoted})"


def file_stats(path: str | os.PathLike, rows: int) -> str:
    """Delta statistics of a Parquet file: numRecords, and minValues, maxValues and nullCount of
    every STATS_COLUMNS column the file has (the table property STATS_PROPERTY names them, and a
    reader takes a named column missing here for all null). From the footer, or from the column's
    values where a row group's footer lacks them. Bounds never exclude a row: timestamps as ISO-8601
    to the millisecond with the max rounded up, long strings cut (_bounded_str)."""
    md = pq.read_metadata(path)
    names = md.schema.to_arrow_schema().names
    mins: dict = {}
    maxs: dict = {}
    nulls: dict = {}
    for col in STATS_COLUMNS:
        if col not in names:
            continue
        got = _footer_bounds(md, names.index(col))
        if got is None:
            got = _value_bounds(path, col)
        n_null, lo, hi = got
        nulls[col] = n_null
        if lo is None:
            continue
        if isinstance(lo, datetime.datetime):
            mins[col] = _iso_ms(lo, up=False)
            maxs[col] = _iso_ms(hi, up=True)
        elif isinstance(lo, str):
            mins[col], maxs[col] = _bounded_str(lo, hi)
        else:
            mins[col], maxs[col] = lo, hi
    # UTF-8 as it is: delta-rs reads an escaped U+10FFFE or U+10FFFF (a surrogate pair) as another value
    return json.dumps(
        {"numRecords": rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}, ensure_ascii=False
    )


def _footer_bounds(md: pq.FileMetaData, ci: int) -> tuple[int, object, object] | None:
    """(null count, min, max) of column `ci` from the row groups' statistics; None when a row
    group lacks its null count, or its min/max while holding values."""
    lo = hi = None
    n_null = 0
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        st = rg.column(ci).statistics
        if st is None or not st.has_null_count:
            return None
        n_null += st.null_count
        if st.has_min_max:
            lo = st.min if lo is None else min(lo, st.min)
            hi = st.max if hi is None else max(hi, st.max)
        elif st.null_count < rg.num_rows:
            return None
    return n_null, lo, hi


def _value_bounds(path: str | os.PathLike, col: str) -> tuple[int, object, object]:
    """(null count, min, max) of `col` read from the file's values."""
    arr = pq.read_table(path, columns=[col]).column(0)
    mm = pa.compute.min_max(arr)
    return arr.null_count, mm["min"].as_py(), mm["max"].as_py()


def _bounded_str(lo: str, hi: str) -> tuple[str, str]:
    """String bounds of at most _STATS_STR_MAX characters where they can be: the min cut to a
    prefix (never above it), the max cut to a prefix whose last character is raised by one (above
    every string starting with that prefix); the max whole when no such prefix exists."""
    lo = lo[:_STATS_STR_MAX]
    if len(hi) > _STATS_STR_MAX:
        head = hi[:_STATS_STR_MAX].rstrip(_MAX_CHAR)
        if head:
            nxt = ord(head[-1]) + 1
            if 0xD800 <= nxt <= 0xDFFF:  # surrogates are not characters: skip to the next one
                nxt = 0xE000
            hi = head[:-1] + chr(nxt)
    return lo, hi


def _iso_ms(v: datetime.datetime, up: bool) -> str:
    if v.tzinfo is None:
        v = v.replace(tzinfo=datetime.UTC)
    if up and v.microsecond % 1000:
        v += datetime.timedelta(microseconds=1000 - v.microsecond % 1000)
    v = v.replace(microsecond=v.microsecond - v.microsecond % 1000)
    return v.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{v.microsecond // 1000:03d}Z"


def _commit_info(
    run_id: str, captures: list[str], replaced: list[str], added: int, removed: int, rows: int
) -> dict:
    """commitInfo of a table commit: the rows it replaces (its predicate), its metrics, the run."""
    return {
        # delta-rs writes its own operation (WRITE) and mode (Append) over any given here
        "operationParameters": {
            "predicate": _in_predicate(replaced) if replaced else None,
            "writer": "brokerscope embedded",
        },
        "operationMetrics": {"numAddedFiles": added, "numRemovedFiles": removed, "numOutputRows": rows},
        "userMetadata": f"brokerscope run {run_id}",
        "brokerscope": {
            "run_id": run_id,
            "capture_ids": captures,
            "replaced": replaced,
            "version": __version__,
        },
    }


def _log_version(path: str) -> int | None:
    """The version of a Delta table's last commit (the highest NNN.json of its _delta_log), or
    None when it cannot be listed."""
    try:
        names = os.listdir(os.path.join(path, "_delta_log"))
    except OSError:
        return None
    versions = [int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()]
    return max(versions) if versions else None


def _now_ms() -> int:
    return int(time.time() * 1000)


def row_to_json(r: dict) -> dict:
    """An `inputs` row in a form JSON keeps (the manifest): timestamps as µs, dates as ISO."""
    out = {}
    for k, v in r.items():
        if isinstance(v, datetime.datetime):
            v = int(v.timestamp() * 1_000_000)
        elif isinstance(v, datetime.date):
            v = v.isoformat()
        out[k] = v
    return out


def _row_from_json(r: dict) -> dict:
    return {**r, "date": datetime.date.fromisoformat(r["date"])} if isinstance(r.get("date"), str) else r
