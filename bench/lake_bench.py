"""Lake health for nightly jobs: file counts run after run, ts-range queries with and without file
statistics, and the cost of hashing every byte for the input identity.

    python bench/lake_bench.py                                   # full size: 200 captures, 500 MB
    python bench/lake_bench.py --captures 6 --runs 3 --files-per-run 2 --big-mb 20   # smoke run
    python bench/lake_bench.py --skip-identity --json lake.json

Three measurements, each skippable, in one shared local Spark session (local[2], JVM and Python
worker start-up excluded):

1. Night by night: N small rotated Kafka captures (tests/support/synth.py framing, Produce/Fetch
   exchanges as in kafka_bench.py, consecutive 5-minute windows, a server port and connection count
   per file) are ingested in R runs of F files, each run one `pipeline.ingest`, into two lakes:
   `[lake] optimize_after_run` off and on (only off where this build does not have the setting).
   After every run: its wall time and the files in each table's current snapshot.
2. A `ts` range filter over about 1% of the captures' time span, through DuckDB's delta reader
   (median of 5 after a warm-up), on the "off" lake as written (add actions carry min/max/null
   counts) and on a copy whose add actions carry only numRecords. Files read per query come from
   DuckDB's JSON profile (the delta scan's "Scanning Files" / "Total Files Read"). The same range on
   the BIGINT twin column `ts_ns` is measured too: it tells a reader that does not push timestamp
   predicates down to the Delta kernel apart from statistics that do not help.
3. Identity: CPU seconds of `capture.files.capture_id` (blake2b over every byte in 8 MiB chunks)
   and of the old identity (blake2b-128 over size, first and last MiB) on one big capture (synth's
   default payloads, as read_bench.py generates: cheap to decode, so the hash's share is at its
   largest), against the wall time of ingesting that capture into a fresh lake (default settings).
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import hashlib
import json
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

TABLES = ("commands", "messages", "latencies", "acks", "streams", "inputs")
SHORT = {
    "commands": "cmd",
    "messages": "msg",
    "latencies": "lat",
    "acks": "ack",
    "streams": "str",
    "inputs": "inp",
}
BASE_NS = 1_704_067_200_000_000_000  # 2024-01-01T00:00:00Z
ROTATE_NS = 300 * 1_000_000_000  # one capture file per 5 minutes, as `tcpdump -G 300` rotates
MASTER = "local[2]"
QUERY_TABLES = ("commands", "messages")
QUERY_REPEATS = 5


# -- set-up ------------------------------------------------------------------------------------


def settings_for(lake: str, optimize: bool | None):
    """brokerscope Settings for `lake`; optimize None leaves `[lake] optimize_after_run` unset."""
    from brokerscope.config import Settings

    over: dict = {"lake": {"path": lake}, "spark": {"master": MASTER}}
    if optimize is not None:
        over["lake"]["optimize_after_run"] = optimize
    return Settings.load(overrides=over)


def optimize_setting_available(probe_lake: str) -> bool:
    """Whether this build's Settings know `[lake] optimize_after_run`."""
    try:
        settings_for(probe_lake, True)
    except ValueError as e:
        if "unknown setting lake.optimize_after_run" in str(e):
            return False
        raise
    return True


def start_spark(work: Path):
    """One local Spark session, warmed up: a Python worker on every core, then one small ingest into
    a throwaway lake (the JVM's and the workers' first-run costs are not part of any measurement)."""
    from brokerscope.pipeline import ingest, make_spark

    probe = str(work / "lake-warmup")
    spark = make_spark(settings_for(probe, None), quiet_progress=True)
    n = spark.sparkContext.defaultParallelism
    spark.range(0, n, 1, n).mapInArrow(lambda it: it, "id long").collect()
    (cap,) = make_captures(work / "warmup", 1, start_ns=BASE_NS - 86_400 * 1_000_000_000)
    ingest([cap], settings_for(probe, None), spark=spark, progress=lambda m: None)
    shutil.rmtree(probe, ignore_errors=True)
    shutil.rmtree(work / "warmup", ignore_errors=True)
    return spark


def make_captures(d: Path, n: int, start_ns: int = BASE_NS) -> list[str]:
    """N rotated Kafka captures of a few hundred KB, in consecutive 5-minute windows; every file has
    its own server port, so no two files of one run share a connection's 4-tuple."""
    from kafka_bench import make_payloads

    from tests.support.synth import write_capture

    d.mkdir(parents=True, exist_ok=True)
    payloads = make_payloads(40, "lz4")
    paths = []
    for i in range(n):
        p = d / f"capture-{i:04d}.pcap"
        write_capture(
            str(p),
            n_conns=4 + (i * 3) % 7,
            exchanges=30,
            payloads=payloads,
            server_port=9092 + i,
            mss=16384,
            start_ns=start_ns + i * ROTATE_NS,
        )
        paths.append(str(p))
    return paths


def snapshot_files(lake: str) -> dict[str, int]:
    """Files in each table's current snapshot."""
    from deltalake import DeltaTable

    return {t: len(DeltaTable(os.path.join(lake, t)).file_uris()) for t in TABLES}


# -- 1. night by night ---------------------------------------------------------------------------


def nightly(
    spark, captures: list[str], lakes: dict[str, tuple[str, bool | None]], runs: int, per_run: int
) -> dict[str, list[dict]]:
    """Ingest `runs` runs of `per_run` captures into every lake of `lakes` (label -> (path, the
    optimize_after_run value)), the variants taking turns run by run so that load from elsewhere on
    the machine falls on both alike; per lake and run: seconds, files, rows, exit code."""
    from brokerscope.pipeline import ingest

    settings = {label: settings_for(path, opt) for label, (path, opt) in lakes.items()}
    out: dict[str, list[dict]] = {label: [] for label in lakes}
    for r in range(runs):
        batch = captures[r * per_run : (r + 1) * per_run]
        for label, (path, _opt) in lakes.items():
            t0 = time.perf_counter()
            summary = ingest(batch, settings[label], spark=spark, progress=lambda m: None)
            secs = time.perf_counter() - t0
            files = snapshot_files(path)
            out[label].append(
                {
                    "run": r + 1,
                    "seconds": secs,
                    "files": files,
                    "rows": dict(summary.rows),
                    "exit": summary.exit_code(),
                }
            )
            print(
                f"  run {r + 1:>3}/{runs} (optimize {label}): {secs:6.1f} s, files "
                + " ".join(f"{SHORT[t]}={files[t]}" for t in TABLES),
                flush=True,
            )
    return out


def print_nightly(off: list[dict], on: list[dict] | None) -> None:
    cols = " ".join(f"{SHORT[t]:>5}" for t in TABLES)
    print(
        f"{'':>4} {'':>7} {'files per table, optimize off':^35}  {'':>7} {'files per table, optimize on':^35}"
    )
    print(f"{'run':>4} {'s off':>7} {cols}  {'s on':>7} {cols}")
    for i, a in enumerate(off):
        left = f"{a['run']:>4} {a['seconds']:7.1f} " + " ".join(f"{a['files'][t]:>5}" for t in TABLES)
        if on is not None:
            b = on[i]
            right = f"{b['seconds']:7.1f} " + " ".join(f"{b['files'][t]:>5}" for t in TABLES)
        else:
            right = f"{'n/a':>7} " + " ".join(f"{'n/a':>5}" for _ in TABLES)
        print(f"{left}  {right}")
    for name, rs in (("off", off), ("on", on)):
        if rs:
            tot = sum(r["seconds"] for r in rs)
            print(f"optimize {name}: {tot:.1f} s over {len(rs)} runs ({tot / len(rs):.1f} s per run)")
    bad = [(r["run"], r["exit"]) for r in off + (on or []) if r["exit"] != 0]
    if bad:
        print(f"WARNING: runs with a non-zero exit code (run, code): {bad}")


# -- 2. ts range queries -------------------------------------------------------------------------


def strip_stats(src: str, dst: str) -> int:
    """Copy the Delta table `src` to `dst` with every add action's stats cut to numRecords and the
    checkpoints removed (readers replay the JSON log); returns the add actions rewritten."""
    shutil.copytree(src, dst)
    log = os.path.join(dst, "_delta_log")
    for p in glob.glob(os.path.join(log, "*.checkpoint*.parquet")) + glob.glob(
        os.path.join(log, "_last_checkpoint")
    ):
        os.unlink(p)
    if not os.path.exists(os.path.join(log, f"{0:020d}.json")):
        raise RuntimeError(f"{src}: the JSON log no longer starts at version 0; cannot drop its checkpoints")
    n = 0
    for p in sorted(glob.glob(os.path.join(log, "[0-9]*.json"))):
        lines = []
        with open(p) as fh:
            for line in fh:
                if not line.strip():
                    continue
                obj = json.loads(line)
                add = obj.get("add")
                if add and add.get("stats"):
                    add["stats"] = json.dumps({"numRecords": json.loads(add["stats"])["numRecords"]})
                    n += 1
                lines.append(json.dumps(obj, separators=(",", ":")))
        with open(p, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return n


def scan_files(con, sql: str, profile: str) -> tuple[int, int] | None:
    """(files read, files in the snapshot) of the delta scan of `sql`, from DuckDB's JSON profile."""
    con.execute("PRAGMA enable_profiling='json'")
    con.execute(f"PRAGMA profiling_output='{profile}'")
    try:
        con.execute(sql).fetchall()
    finally:
        con.execute("PRAGMA disable_profiling")
    with open(profile) as fh:
        todo = [json.load(fh)]
    while todo:
        node = todo.pop()
        extra = node.get("extra_info") or {}
        if isinstance(extra, dict) and "Scanning Files" in extra:
            read, total = str(extra["Scanning Files"]).split("/")
            return int(read), int(total)
        todo.extend(node.get("children", []))
    return None


def time_query(con, sql: str) -> tuple[float, int]:
    """Median seconds of QUERY_REPEATS runs (after one warm-up) and the count returned."""
    n = con.execute(sql).fetchone()[0]
    times = []
    for _ in range(QUERY_REPEATS):
        t0 = time.perf_counter()
        got = con.execute(sql).fetchone()[0]
        times.append(time.perf_counter() - t0)
        assert got == n, (sql, got, n)
    return statistics.median(times), n


def _tstz(ns: int) -> str:
    t = dt.datetime.fromtimestamp(ns // 1_000_000_000, dt.UTC) + dt.timedelta(
        microseconds=(ns // 1000) % 1_000_000
    )
    return t.strftime("%Y-%m-%d %H:%M:%S.%f") + "+00"


def query_bench(lake: str, work: Path) -> dict:
    """ts-range count queries on the lake as written and on a copy without column statistics."""
    from tests.support.lakecheck import duckdb_connect

    con = duckdb_connect()
    lo_ns, hi_ns = con.execute(f"SELECT min(ts_ns), max(ts_ns) FROM delta_scan('{lake}/commands')").fetchone()
    span = hi_ns - lo_ns
    # the range starts where the first capture after the middle of the span starts (the synthetic
    # captures fill only the first milliseconds of their 5-minute windows) and covers 1% of the span
    (a_ns,) = con.execute(
        f"SELECT min(ts_ns) FROM delta_scan('{lake}/commands') WHERE ts_ns >= {lo_ns + span // 2}"
    ).fetchone()
    b_ns = a_ns + span // 100
    # the ts_ns twin covers exactly the microseconds the ts literals do
    a_ns -= a_ns % 1000
    b_ns = b_ns - b_ns % 1000 + 999
    print(
        f"time span of the captures: {_tstz(lo_ns)} .. {_tstz(hi_ns)} ({span / 1e9 / 60:.1f} min); "
        f"range: {_tstz(a_ns)} .. {_tstz(b_ns)} (1%)"
    )
    nostats = work / "lake-nostats"
    shutil.rmtree(nostats, ignore_errors=True)
    stripped = {t: strip_stats(os.path.join(lake, t), str(nostats / t)) for t in QUERY_TABLES}
    print(
        "copy without statistics: add actions cut to numRecords: "
        + ", ".join(f"{t}={n}" for t, n in stripped.items())
    )
    preds = {
        "ts": f"ts BETWEEN TIMESTAMPTZ '{_tstz(a_ns)}' AND TIMESTAMPTZ '{_tstz(b_ns)}'",
        "ts_ns": f"ts_ns BETWEEN {a_ns} AND {b_ns}",
    }
    profile = str(work / "duckdb-profile.json")
    results = []
    for table in QUERY_TABLES:
        for col, pred in preds.items():
            row = {"table": table, "column": col, "predicate": pred}
            for variant, root in (("before", str(nostats)), ("after", lake)):
                sql = f"SELECT count(*) FROM delta_scan('{root}/{table}') WHERE {pred}"
                secs, n = time_query(con, sql)
                files = scan_files(duckdb_connect(), sql, profile)
                row[variant] = {"seconds": secs, "count": n, "files": files}
            assert row["before"]["count"] == row["after"]["count"], row
            results.append(row)
    for table in QUERY_TABLES:  # the ts literals and the ts_ns bounds select the same rows
        counts = {r["column"]: r["after"]["count"] for r in results if r["table"] == table}
        assert counts["ts"] == counts["ts_ns"], (table, counts)
    return {"range_ns": [a_ns, b_ns], "span_ns": span, "queries": results}


def print_query(res: dict) -> None:
    def files(f: tuple[int, int] | None) -> str:
        return "n/a" if f is None else f"{f[0]}/{f[1]}"

    print(
        f"{'table':<9} {'column':<6} {'rows':>8}  {'before s':>9} {'files':>11}  "
        f"{'after s':>9} {'files':>11}  {'before/after':>12}"
    )
    for r in res["queries"]:
        b, a = r["before"], r["after"]
        print(
            f"{r['table']:<9} {r['column']:<6} {a['count']:>8,}  "
            f"{b['seconds']:9.4f} {files(b['files']):>11}  "
            f"{a['seconds']:9.4f} {files(a['files']):>11}  {b['seconds'] / a['seconds']:11.2f}x"
        )
    print(
        "before = add actions carry only numRecords; after = the lake as written (min/max/nullCount); "
        f"seconds = median of {QUERY_REPEATS}; files = read/in snapshot, from DuckDB's JSON profile "
        "(the delta scan's 'Scanning Files')"
    )
    if any(
        r["column"] == "ts" and r["after"]["files"] and r["after"]["files"][0] == r["after"]["files"][1]
        for r in res["queries"]
    ):
        if any(
            r["column"] == "ts_ns" and r["after"]["files"] and r["after"]["files"][0] < r["after"]["files"][1]
            for r in res["queries"]
        ):
            print(
                "NOTE: this DuckDB delta extension skips no file on the TIMESTAMPTZ predicate although it "
                "does on the BIGINT ts_ns one: it does not pass timestamp literals down to the Delta kernel "
                "(duckdb/duckdb-delta#331 adds that), so ts statistics cannot help it yet."
            )


# -- 3. identity cost ----------------------------------------------------------------------------

_OLD_HEAD = 1 << 20


def old_capture_id(path: str) -> str:
    """The previous identity: blake2b-128 over (size as little-endian u64, first MiB, last MiB)."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        h.update(struct.pack("<Q", size))
        h.update(fh.read(_OLD_HEAD))
        if size > _OLD_HEAD:
            fh.seek(max(_OLD_HEAD, size - _OLD_HEAD))
            h.update(fh.read(_OLD_HEAD))
    return h.hexdigest()


def cpu_time(fn, *args, repeats: int = 3) -> tuple[float, float]:
    """Median CPU seconds and median wall seconds of fn(*args) in this process."""
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        fn(*args)
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return statistics.median(cpu), statistics.median(wall)


def identity_bench(spark, capture: str, lake: str) -> dict:
    from brokerscope.capture.files import capture_id
    from brokerscope.pipeline import ingest

    size = os.path.getsize(capture)
    with open(capture, "rb") as fh:  # into the page cache, as a capture just rotated is
        while fh.read(64 << 20):
            pass
    new_cpu, new_wall = cpu_time(capture_id, capture)
    old_cpu, old_wall = cpu_time(old_capture_id, capture)
    shutil.rmtree(lake, ignore_errors=True)
    t0 = time.perf_counter()
    summary = ingest([capture], settings_for(lake, None), spark=spark, progress=lambda m: None)
    ingest_s = time.perf_counter() - t0
    return {
        "capture": capture,
        "bytes": size,
        "new_cpu_s": new_cpu,
        "new_wall_s": new_wall,
        "old_cpu_s": old_cpu,
        "old_wall_s": old_wall,
        "ingest_wall_s": ingest_s,
        "ingest_rows": dict(summary.rows),
        "ingest_exit": summary.exit_code(),
        "cores": spark.sparkContext.defaultParallelism,
    }


def print_identity(r: dict) -> None:
    mb, ing, cores = r["bytes"] / 1e6, r["ingest_wall_s"], r["cores"]
    print(
        f"capture: {r['capture']} ({mb:,.1f} MB); "
        f"ingest wall time {ing:.2f} s ({MASTER}, exit {r['ingest_exit']})"
    )
    print(f"{'identity':<44} {'CPU s':>8} {'wall s':>8} {'MB/s':>8} {'CPU / ingest wall':>18}")
    for name, c, w in (
        ("new: blake2b, every byte, 8 MiB chunks", r["new_cpu_s"], r["new_wall_s"]),
        ("old: blake2b-128, size + first/last MiB", r["old_cpu_s"], r["old_wall_s"]),
    ):
        print(f"{name:<44} {c:8.3f} {w:8.3f} {mb / max(w, 1e-9):8.0f} {c / ing:17.1%}")
    extra = r["new_cpu_s"] - r["old_cpu_s"]
    print(
        f"extra hashing: {extra:.2f} CPU s = {extra / ing:.1%} of the ingest wall time on one core; the "
        f"pipeline hashes inside the parallel read tasks ({cores} cores), so its wall share is about "
        f"{extra / cores:.2f} s = {extra / cores / ing:.1%}"
    )


# -- main ----------------------------------------------------------------------------------------


def header() -> dict:
    import deltalake
    import duckdb
    import pyspark

    from brokerscope import __version__
    from tests.support.lakecheck import duckdb_connect

    ext = (
        duckdb_connect()
        .execute("SELECT extension_version FROM duckdb_extensions() WHERE extension_name = 'delta'")
        .fetchone()
    )
    return {
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "deltalake": deltalake.__version__,
        "duckdb": duckdb.__version__,
        "duckdb_delta_extension": ext[0] if ext else None,
        "pyspark": pyspark.__version__,
        "brokerscope": __version__,
        "python": sys.version.split()[0],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--captures", type=int, default=200, help="small rotated captures to generate")
    ap.add_argument("--runs", type=int, default=20, help="ingest runs (nights)")
    ap.add_argument("--files-per-run", type=int, default=10, help="captures per run")
    ap.add_argument(
        "--big-mb", type=int, default=500, help="size of the generated capture for the identity cost"
    )
    ap.add_argument("--capture", help="use this capture for the identity cost instead of generating one")
    ap.add_argument(
        "--workdir", help="where data goes (default: a temporary directory, removed unless --keep)"
    )
    ap.add_argument("--keep", action="store_true", help="keep the temporary working directory")
    ap.add_argument("--skip-identity", action="store_true")
    ap.add_argument("--skip-nightly", action="store_true")
    ap.add_argument("--skip-query", action="store_true")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    a = ap.parse_args()
    if a.runs * a.files_per_run > a.captures and not a.skip_nightly:
        ap.error(f"--runs x --files-per-run ({a.runs * a.files_per_run}) exceeds --captures ({a.captures})")
    if a.capture and not os.path.isfile(a.capture):
        ap.error(f"--capture {a.capture}: no such file")

    temp = a.workdir is None
    work = Path(a.workdir or tempfile.mkdtemp(prefix="lake_bench_")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    head = header()
    result: dict = {"header": head, "args": vars(a)}
    print(
        f"lake_bench: {head['cores']} cores ({head['cores_usable']} usable), Spark {MASTER}; deltalake "
        f"{head['deltalake']}, duckdb {head['duckdb']} (delta extension {head['duckdb_delta_extension']}), "
        f"pyspark {head['pyspark']}, brokerscope {head['brokerscope']}, Python {head['python']}"
    )
    print(f"workdir: {work}")
    spark = None
    try:
        t_all = time.perf_counter()
        need_spark = not a.skip_nightly or not a.skip_identity
        if need_spark:
            t0 = time.perf_counter()
            spark = start_spark(work)
            print(f"Spark started and warmed up in {time.perf_counter() - t0:.1f} s (not measured)")
        lake_off = str(work / "lake-off")

        if not a.skip_nightly:
            print(f"\n== 1. night by night: {a.runs} runs of {a.files_per_run} captures ==")
            t0 = time.perf_counter()
            captures = make_captures(work / "captures", a.captures)
            sizes = [os.path.getsize(p) for p in captures]
            print(
                f"generated {len(captures)} captures in {time.perf_counter() - t0:.1f} s: "
                f"{min(sizes) / 1e3:.0f}-{max(sizes) / 1e3:.0f} KB each, {sum(sizes) / 1e6:.1f} MB in all"
            )
            available = optimize_setting_available(lake_off)
            if not available:
                print(
                    "[lake] optimize_after_run is not available in this build (Settings.load: unknown "
                    "setting lake.optimize_after_run): measuring only the lake without it"
                )
            lake_on = str(work / "lake-on")
            for p in (lake_off, lake_on):
                shutil.rmtree(p, ignore_errors=True)
            lakes = (
                {"off": (lake_off, False), "on": (lake_on, True)} if available else {"off": (lake_off, None)}
            )
            runs = nightly(spark, captures, lakes, a.runs, a.files_per_run)
            off, on = runs["off"], runs.get("on")
            print()
            print_nightly(off, on)
            result["nightly"] = {"optimize_setting_available": available, "off": off, "on": on}

        if not a.skip_query:
            print(
                "\n== 2. ts range filter through DuckDB's delta reader, before and after file statistics =="
            )
            if a.skip_nightly:
                print("skipped: it queries the lake the night-by-night runs write (drop --skip-nightly)")
            else:
                res = query_bench(lake_off, work)
                print_query(res)
                result["query"] = res

        if not a.skip_identity:
            print("\n== 3. input identity: hashing every byte ==")
            if a.capture:
                big = os.path.abspath(a.capture)
            else:
                from tests.support.synth import write_capture

                big = str(work / f"big-{a.big_mb}MB.pcap")
                t0 = time.perf_counter()
                write_capture(big, exchanges=40, target_bytes=a.big_mb * 1_000_000)
                print(f"generated {big} in {time.perf_counter() - t0:.1f} s")
            res = identity_bench(spark, big, str(work / "lake-identity"))
            print_identity(res)
            result["identity"] = res
        result["total_seconds"] = time.perf_counter() - t_all
        print(f"\ntotal: {result['total_seconds']:.0f} s")
    finally:
        if spark is not None:
            spark.stop()
        if temp and not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        elif temp:
            print(f"kept {work}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(result, fh, indent=2, default=str)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
