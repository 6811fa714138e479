"""The Spark wiring, and the only module that knows about Spark's execution model.

splits --mapInArrow(read_split)--> packets --repartition(4-tuple)--> sortWithinPartitions
      --mapInArrow(StreamDriver)--> one "union" DataFrame (a struct column per table)
(a capture set that is one task: read, sort and decode in that task, no shuffle)
segment splits --mapInArrow(segment reader)--> the same union DataFrame
union --persist--> one Delta commit per table (lake.py), then the `inputs` record.
"""

from __future__ import annotations

import atexit
import ctypes
import dataclasses
import datetime
import functools
import gc
import importlib
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from . import capture, classcache, inputs, packetruns, sparkhome, tables, vantage
from .capture.decode import link_mismatch
from .capture.files import (
    ID_CHUNK,
    chunk_digests,
    combine_id,
    first_packet_ns,
    gzip_id,
)
from .config import Settings
from .lake import Lake, StagedWriter, latest_by_path, row_to_json
from .protocols.base import INDEX_MISMATCH
from .report import Summary
from .runs import RunDir
from .streams import CHANGED, SORT_COLS, PayloadFiles, StreamDriver, payloads_lost, segment_rows

log = logging.getLogger(__name__)

# rows per conform call and table: conform's cost is mostly per call and column (a 134 MB Kafka
# decode task's conform: 0.27 CPU s at 4,096 rows, 0.22 at 16,384, 0.21 at 65,536)
ROWS_PER_BATCH = 16384
LOCAL_JIT = "-XX:TieredStopAtLevel=1"  # the driver JVM's JIT in local mode (make_spark)
# log4j2.properties: in an installed package (setup.py copies it), else in the repository's conf/
LOG4J_PLACES = (
    Path(__file__).resolve().parent / "conf" / "log4j2.properties",
    Path(__file__).resolve().parents[2] / "conf" / "log4j2.properties",
)

# the decode stage's output: a struct column per table, exactly one non-null per row
UNION = pa.schema(
    [pa.field(t, pa.struct(list(tables.schema(t)))) for t in tables.DECODED_TABLES]
    + [pa.field("stats", pa.string())]
)
# the embedded writer's task output: one row per Parquet file a task staged, plus counters rows
FILES = pa.schema(
    [
        pa.field("table", pa.string()),
        pa.field("path", pa.string()),
        pa.field("date", pa.string()),
        pa.field("capture_id", pa.string()),
        pa.field("rows", pa.int64()),
        pa.field("fixup", pa.bool_()),  # some rows name their topic only by id
        pa.field("file_stats", pa.string()),  # the Delta statistics of the file (lake.file_stats)
        pa.field("stats", pa.string()),
    ]
)


@dataclass(frozen=True)
class Staged:
    """What decode tasks of the embedded writer need to stage their files (lake.StagedWriter)."""

    root: str
    run_id: str
    by_capture: tuple[str, ...]  # tables of an older lake partitioned by capture_id


def make_spark(
    settings: Settings, app_name: str | None = None, quiet_progress: bool = False, class_cache: bool = False
):
    """A SparkSession for brokerscope: UTC, microsecond Parquet timestamps, Arrow on. Spark's
    progress bar is drawn unless `quiet_progress`, and only on a terminal (in a log or a pipe its
    carriage returns are noise). With `class_cache` (the CLI), a local JVM starts from a Spark
    home without Spark ML's jar (sparkhome.py, unless `spark.ml_jars`) and maps its class archive
    or writes it (classcache.py); a JVM that writes it must be waited for: `finish_class_cache`
    at the end of the process."""
    from pyspark.sql import SparkSession

    # Under spark-submit the driver JVM already exists (PYSPARK_GATEWAY_PORT is set) and holds
    # --master, --conf and --properties-file; a builder master would override it and silently run
    # the job in local mode.
    launched_by_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    given = _submitted_conf() if launched_by_submit else {}
    master = given.get("spark.master", settings.master)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers run the interpreter that runs brokerscope (its venv has the dependencies)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    b = SparkSession.builder.appName(app_name or settings.raw["spark"]["app_name"])
    if (
        not launched_by_submit
        and not os.environ.get("SPARK_SUBMIT_DEPLOY_MODE")
        and "spark.master" not in os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    ):
        b = b.master(settings.master)
    log4j = next((p for p in LOG4J_PLACES if p.is_file()), None)
    conf = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.sources.partitionOverwriteMode": "static",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": str(not quiet_progress and sys.stderr.isatty()).lower(),
        "spark.sql.adaptive.enabled": "true",
        "spark.python.worker.reuse": "true",
        # the decode stage's input batches end at this size too, whatever the packets' sizes
        "spark.sql.execution.arrow.maxBytesPerBatch": str(settings.batch_bytes),
    }
    java = [f"-Dlog4j2.configurationFile=file:{log4j}"] if log4j else []
    if master.startswith("local"):
        # one JVM runs the driver and every task. C1 JIT only: C2's compiler threads cost more CPU
        # than the code they optimize saves on runs of seconds to minutes (a 200 MB capture on
        # one core: 26-27 s -> 20 s; the JVM's share of the work is the Arrow hand-off and the
        # shuffle). A [spark.conf] "spark.driver.extraJavaOptions" replaces these options.
        java.append(LOCAL_JIT)
        # shuffle checksums only help diagnose blocks corrupted between hosts; on one host they
        # cost 0.8 s of a 19 s run on 200 MB of capture
        conf["spark.shuffle.checksum.enabled"] = "false"
        # the workers' daemon imports the installed PySpark's bytecode, not the source in Spark's
        # zip (sparkdaemon.py): 0.6 CPU s less before the first task
        conf["spark.python.daemon.module"] = "brokerscope.sparkdaemon"
    if java:
        conf["spark.driver.extraJavaOptions"] = " ".join(java)
    # spark-submit's --conf / --properties-file values win over ours; [spark.conf] wins over both
    conf = {k: v for k, v in conf.items() if k not in given}
    conf.update({k: str(v) for k, v in settings.raw["spark"].get("conf", {}).items()})
    cli_local = class_cache and _starts_local_jvm(settings, launched_by_submit)
    if cli_local and not settings.raw["spark"]["ml_jars"]:
        sparkhome.use_view()  # a Spark home without Spark ML's jar: its session extension goes
    cache = None
    if cli_local and settings.raw["spark"]["class_cache"]:
        jvm = [conf.get(k, "") for k in ("spark.driver.extraJavaOptions", *_CLASSPATH_KEYS)]
        cache = classcache.plan(jvm)
        if cache:
            conf["spark.driver.extraJavaOptions"] = " ".join([jvm[0], *cache.options]).strip()
    for k, v in conf.items():
        b = b.config(k, v)
    if not launched_by_submit:
        _import_while_the_jvm_starts()
    before = child_pids()
    try:
        spark = b.getOrCreate()
    except BaseException as e:
        _stop_unconnected_jvm(before)
        if not isinstance(e, Exception) or cache is None or cache.pending is not None:
            raise _jvm_failed(e) from None
        # a JVM that cannot start with its archive (damaged, or not its own): start without, and
        # drop the archive if that works (a bad [spark.conf] fails either way: the archive stays)
        try:
            spark = b.config("spark.driver.extraJavaOptions", jvm[0]).getOrCreate()
        except Exception as again:
            _stop_unconnected_jvm(before)
            raise _jvm_failed(again) from None
        classcache.discard(cache)
        cache = None
    global _pending
    if cache is not None and cache.pending is not None:
        _pending = (spark, cache)
    spark.sparkContext.setLogLevel("WARN")
    if not spark.sparkContext.master.startswith("local"):
        _ship_package(spark.sparkContext)
    return spark


def _jvm_failed(e: BaseException) -> BaseException:
    """What to raise for a session that did not start: a JVM that exited before PySpark could
    connect (a bad [spark.conf] value: its own message is on stderr above) is one line, as a
    configuration error is (exit 2); anything else as it is."""
    condition = getattr(e, "getCondition", None) or getattr(e, "getErrorClass", lambda: None)
    if condition() == "JAVA_GATEWAY_EXITED":
        return ValueError(
            "Spark's JVM exited before it started (its message is above): check the [spark.conf] "
            "and [spark] settings of the config"
        )
    return e


def child_pids(parent: int | None = None) -> set[int]:
    """The processes whose parent is `parent`, by default this one (Linux's /proc; elsewhere
    none are known)."""
    me, out = os.getpid() if parent is None else parent, set()
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            # pid (comm) state ppid ...: comm may hold spaces and parentheses
            if int(stat.rsplit(b")", 1)[1].split()[1]) == me:
                out.add(int(name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def _stop_unconnected_jvm(before: set[int], wait_s: float = 5.0) -> None:
    """Stop the JVM a failed or interrupted getOrCreate launched and never connected to.

    PySpark's JVM ignores SIGINT and exits when its stdin closes, but it watches stdin only once
    it has handed Python its port: interrupted before that (Ctrl-C or SIGTERM in the first
    second), PySpark removes the directory the JVM writes its port to, the JVM's main thread dies
    on it, and its py4j server thread keeps it alive for good, holding this process's stdout and
    stderr (a scheduler reading them waits forever). A connected JVM exits with this process."""
    from pyspark import SparkContext

    if SparkContext._gateway is not None:
        return
    started = child_pids() - before
    for sig in (signal.SIGTERM, signal.SIGKILL):  # SIGKILL for one still there after wait_s
        for pid in started:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + wait_s
        while started and time.monotonic() < deadline:
            for pid in list(started):
                try:
                    if os.waitpid(pid, os.WNOHANG)[0]:
                        started.discard(pid)
                except ChildProcessError:
                    started.discard(pid)
            time.sleep(0.05)
        if not started:
            return


# what PySpark's first call into a new JVM imports (its numpy argument converter asks
# pyspark.testing.utils, which imports pandas): 0.42 CPU s the driver would spend with the JVM
# started and idle, waiting for that call
_FIRST_CALL_IMPORTS = "pyspark.testing.utils"


def _import_while_the_jvm_starts() -> None:
    """Import what PySpark's first call into the JVM needs in a thread, while the JVM starts (the
    driver only waits for it then); the first call finds the modules imported, or waits for the
    thread's import to end (the import lock)."""

    def run() -> None:
        try:
            importlib.import_module(_FIRST_CALL_IMPORTS)
        except Exception:  # the first call imports it again and raises what is wrong
            pass

    if _FIRST_CALL_IMPORTS not in sys.modules:
        threading.Thread(target=run, name="brokerscope-imports", daemon=True).start()


def _submitted_conf() -> dict[str, str]:
    """The Spark settings spark-submit started this driver's JVM with (--master, --conf,
    --properties-file or spark-defaults.conf): the JVM holds them as system properties, which a
    SparkConf reads only once Python is connected to that JVM (before, SparkConf() is empty)."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's gateway (PYSPARK_GATEWAY_PORT)
    return dict(SparkConf().getAll())


_CLASSPATH_KEYS = ("spark.jars", "spark.jars.packages", "spark.driver.extraClassPath")
_pending: tuple[object, classcache.Plan] | None = None  # a session whose JVM writes the archive


def _starts_local_jvm(settings: Settings, launched_by_submit: bool) -> bool:
    """Will getOrCreate start a local-mode JVM with the options given here?"""
    from pyspark import SparkContext

    return (
        settings.master.startswith("local")
        and not launched_by_submit
        and SparkContext._active_spark_context is None
        and "PYSPARK_SUBMIT_ARGS" not in os.environ
    )


def finish_class_cache(progress: Callable[[str], None] = lambda m: None) -> None:
    """If this process's session writes the JVM's class archive: stop it, wait for its JVM to
    write the archive and publish it (once per JVM build, Spark jars and options)."""
    global _pending
    if _pending is not None:
        (spark, cache), _pending = _pending, None
        classcache.finish(spark, cache, progress)


def drop_class_cache() -> None:
    """Forget the class archive this process's JVM was to write: an interrupted command does not
    wait for it (the JVM writes it as it exits; unpublished, it is removed by a later run)."""
    global _pending
    _pending = None


def _ship_package(sc) -> None:
    """Make this brokerscope importable on executors that lack it (its dependencies must be
    installed there: pip install brokerscope, or a venv shipped with --archives)."""
    import tempfile

    tmp = tempfile.mkdtemp(prefix="brokerscope-")
    atexit.register(shutil.rmtree, tmp, True)
    zpath = Path(tmp) / "brokerscope.zip"
    package_zip(zpath)
    sc.addPyFile(str(zpath))


def package_zip(zpath: Path) -> None:
    """brokerscope as a zip for executors' Python path, each module with its bytecode beside it
    (zipimport reads `x.pyc` next to `x.py`; it writes none itself, so without them every worker
    compiles every module it imports): hash-checked against the source in the zip (PEP 552), and
    read only by a Python of the driver's version (another version's workers compile the source)."""
    import py_compile
    import tempfile
    import zipfile

    pkg = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as z:
        pyc, mode = os.path.join(tmp, "module.pyc"), py_compile.PycInvalidationMode.CHECKED_HASH
        for f in pkg.rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts:
                rel = Path("brokerscope") / f.relative_to(pkg)
                z.write(f, rel)
                if f.suffix == ".py":
                    py_compile.compile(str(f), pyc, rel.as_posix(), doraise=True, invalidation_mode=mode)
                    z.write(pyc, rel.with_suffix(".pyc"))
        # zipimport cannot import namespace packages (brokerscope/ and protocols/ have no
        # __init__.py): give every package directory of the zip one
        for d in [pkg, *pkg.rglob("*")]:
            if d.is_dir() and "__pycache__" not in d.parts and not (d / "__init__.py").exists():
                if any(d.rglob("*.py")):
                    z.writestr((Path("brokerscope") / d.relative_to(pkg) / "__init__.py").as_posix(), "")


# -- tasks (run on executors: plain functions of picklable arguments) -------------------------


def _tasks(spark, packs: list[list[dict]]):
    """One row per task (`id`, its index in `packs`) in a partition of its own: the tasks find
    their splits in `packs`, which travels with the function (no Python RDD to convert)."""
    return spark.range(0, len(packs), 1, len(packs))


def _packs_of(batches: Iterator[pa.RecordBatch], packs: list[list[dict]]) -> Iterator[list[dict]]:
    for b in batches:
        for i in b.column("id").to_pylist():
            yield packs[i]


class _NoPandas:
    """An import hook that refuses pandas (used once, by keep_pandas_out)."""

    def find_spec(self, name: str, path=None, target=None):
        if name == "pandas":
            raise ImportError("brokerscope's Spark tasks do not use pandas")
        return None


def keep_pandas_out() -> None:
    """Keep pandas out of this Python worker. pyarrow imports pandas, when it is installed (PySpark
    needs it on the driver), the first time it converts Python values: its Python side to know
    pandas types, its C++ side for pandas' null markers. That is about 800 M instructions (0.2 CPU
    s) in every worker, before its first task's rows; the tasks hand pyarrow no pandas object.
    pyarrow's pandas probe is settled as "no pandas" with the import refused once, and the C++
    side finds `None` in sys.modules: a failed import without a file system search. Called at the
    start of each task function; nothing is done where pandas is already loaded."""
    if "pandas" in sys.modules:
        return
    probe = getattr(getattr(pa, "lib", None), "_pandas_api", None)
    if probe is None:  # a pyarrow without the shim this knows: leave it be
        return
    hook = _NoPandas()
    sys.meta_path.insert(0, hook)
    try:
        settled = probe.have_pandas  # the probe's one import attempt, refused
    finally:
        sys.meta_path.remove(hook)
    if not settled:
        sys.modules["pandas"] = None  # type: ignore[assignment]


# the cyclic collector's thresholds in a decode task's worker: a young collection after this
# many container objects (not 700), an older one after 20 young (not 10), a full one after 100
GC_THRESHOLDS = (50_000, 20, 100)


def settle_collector() -> None:
    """Once per Python worker, at its first decode task (the protocol packages imported): the
    objects of every module so far go to the collector's permanent generation, and the
    collector runs less often (GC_THRESHOLDS). Its full passes otherwise walk all of pyarrow's,
    PySpark's and the decoders' objects again each time, for garbage that is never among them,
    and its young passes ran every 700 tuples and lists the decoders make and drop: with the
    defaults 0.005-0.026 CPU s per message_bench workload (1.4-5.6 %), none with these; the
    decoders make almost no reference cycles (docs/benchmarks.md)."""
    global _frozen
    if not _frozen:
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        _frozen = True


_frozen = False


def _read_splits_fn(
    settings: Settings,
    run: RunDir,
    sizes: dict[int, int],
    packs: list[list[dict]],
    payload_refs: bool = False,
    runs: bool = False,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """Read the capture splits of the tasks given (`_tasks` rows) into packets; hash each
    split's identity chunks (bytes the reader just brought into memory) into the run directory,
    and put the key log text of its pcapng Decryption Secrets Blocks there (runs.py `secrets/`).
    `payload_refs`: payloads of plain files as offsets (the decode task reads them back). The
    packet records each split read and their first and last times go beside its digests: the
    decode numbers frames with them, and groups the files into vantage points. `runs`: the
    packets as packetruns.RUNS rows (one per run of a connection's packets in a batch)."""

    flt = settings.packet_filter

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_pandas_out()
        for pack in _packs_of(batches, packs):
            for r in pack:
                sp = capture.Split(
                    r["path"], r["capture_id"], r["file_index"], r["kind"], r["start"], r["end"]
                )
                records, span, first_at, order, directions = None, (None, None), None, None, None
                secrets: list[bytes] = []
                try:
                    for b in capture.read_split(
                        sp,
                        settings.batch_packets,
                        settings.max_pending_fragments,
                        settings.batch_bytes,
                        payload_refs,
                        flt,
                        secrets,
                    ):
                        st = capture.parse_stats(b)
                        if st is not None:
                            records, span = st["records"], (st["first_ts_ns"], st["last_ts_ns"])
                            first_at, order = st.get("first_at"), st.get("order")
                            directions = st.get("directions")
                        if runs:
                            yield from packetruns.pack(b)
                        else:
                            yield b
                    size = sizes[sp.file_index]
                    digests = chunk_digests(sp.path, sp.start, sp.end, size)
                except OSError as e:  # gone, or cut short, since it was planned: no rows of it
                    run.write_digests(sp.file_index, sp.start, {}, error=unread_reason(e))
                    continue
                if secrets:
                    run.write_tls_key_logs(sp.file_index, sp.start, secrets)
                run.write_digests(
                    sp.file_index,
                    sp.start,
                    digests,
                    records,
                    span,
                    first_at,
                    order=order,
                    directions=directions,
                )

    return read


def _table_batches(rows: Iterator[tuple[str, dict | tables.Block]]) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Group (table, row) pairs into conformed batches of about ROWS_PER_BATCH rows (a block is
    never cut)."""
    pending: dict[str, list] = {t: [] for t in tables.DECODED_TABLES}
    count = dict.fromkeys(tables.DECODED_TABLES, 0)
    for t, row in rows:
        pending[t].append(row)
        count[t] += tables.size(row)
        if count[t] >= ROWS_PER_BATCH:
            yield t, tables.conform(t, pending[t])
            pending[t] = []
            count[t] = 0
    for t in tables.DECODED_TABLES:
        if pending[t]:
            yield t, tables.conform(t, pending[t])


def _as_union(t: str, rb: pa.RecordBatch) -> pa.RecordBatch:
    cols = []
    for f in UNION:
        if f.name == t:
            cols.append(pa.StructArray.from_arrays(rb.columns, fields=list(rb.schema)))
        else:
            cols.append(pa.nulls(rb.num_rows, type=f.type))
    return pa.RecordBatch.from_arrays(cols, schema=UNION)


def _stats_union(stats: list[dict]) -> pa.RecordBatch:
    cols = [pa.nulls(len(stats), type=f.type) for f in list(UNION)[:-1]]
    cols.append(pa.array([json.dumps(s) for s in stats], pa.string()))
    return pa.RecordBatch.from_arrays(cols, schema=UNION)


def _files_batch(files: list[dict], stats: list[dict]) -> pa.RecordBatch:
    none = {
        "table": None,
        "path": None,
        "date": None,
        "capture_id": None,
        "rows": 0,
        "fixup": False,
        "file_stats": None,
    }
    rows = [{**f, "stats": None} for f in files] + [{**none, "stats": json.dumps(s)} for s in stats]
    return pa.RecordBatch.from_pylist(rows, schema=FILES)


def _emit(rows: Iterator[tuple[str, dict]], stats: Callable[[], list[dict]], staged: Staged | None):
    """Rows of one task as UNION batches (delta-spark writer) or, with `staged` (embedded writer),
    written to Parquet in the task and reported as FILES rows (embedded writer)."""
    if staged is None:
        for t, rb in _table_batches(rows):
            yield _as_union(t, rb)
        if stats():
            yield _stats_union(stats())
        return
    w = StagedWriter(staged.root, staged.run_id, by_capture=staged.by_capture)
    try:
        for t, rb in _table_batches(rows):
            w.add(t, rb)
        files = w.close()
    except BaseException:
        w.abort()
        raise
    yield _files_batch(files, stats())


def _gone_since_found(todo: list) -> dict[str, tuple]:
    """path -> (input, why) of the inputs that are gone, or shorter than discovery found them."""
    out = {}
    for i in todo:
        try:
            size = os.stat(i.path).st_size
        except OSError as e:
            out[i.path] = (i, unread_reason(e))
            continue
        if size < i.size:
            out[i.path] = (i, f"{UNREAD} ({size} bytes now, {i.size} found)")
    return out


def _shrunk(lake: Lake, todo: list) -> dict[str, tuple]:
    """path -> (input, why) of the plain captures now shorter than the capture last ingested from
    their path, whose bytes begin with that capture's: every identity chunk wholly inside the file
    hashes as the `inputs` row's `chunk_digests` say (the last, partial chunk cannot be checked:
    the row keeps digests of whole chunks only). Such a file was cut short (a rotation tool, a
    user shrinking it): decoding it would write its rows again beside that capture's, which hold
    them and more. A file shorter than one chunk, or a capture recorded without digests (an
    older lake), cannot be told from other content under the name, and is decoded as that."""
    cands = [i for i in todo if i.kind in PLAIN_CAPTURES]
    if not cands:
        return {}
    last = latest_by_path(r for r in lake.inputs_rows() if r["capture_id"] and r["status"] != "replaced")
    out = {}
    for i in cands:
        r = last.get(i.path)
        if r is None or not r.get("chunk_digests") or (r["size"] or 0) <= i.size or i.size < ID_CHUNK:
            continue
        want = r["chunk_digests"]
        whole = i.size // ID_CHUNK
        try:
            got = chunk_digests(i.path, 0, whole * ID_CHUNK, whole * ID_CHUNK)
        except OSError:
            continue  # gone or cut again: _gone_since_found says so
        if "".join(got[k].hex() for k in range(whole)) == want[: whole * 32]:
            out[i.path] = (
                i,
                f"{SHRUNK} ({r['size']} -> {i.size} bytes): it begins with the capture ingested from "
                f"it ({r['capture_id']}, run {r['run_id']}), whose rows are kept; not decoded",
            )
    return out


# the `inputs.error` of a capture found shorter than the one ingested from its path, its bytes
# that capture's first ones (_shrunk)
SHRUNK = "cut short since it was ingested"
# the capture kinds whose identity chunks hash the file's own bytes (not decompressed ones)
PLAIN_CAPTURES = ("pcap", "pcapng")


def _chunk_text(digests: dict[int, bytes]) -> str:
    """An `inputs.chunk_digests` value: the digests in chunk order, hex."""
    return "".join(digests[k].hex() for k in sorted(digests))


def _unread_rows(gone: dict[str, tuple], summary: Summary, run_id: str, counted: bool = True) -> list[dict]:
    """The `inputs` rows (status error) of inputs the run could not read as it planned, each
    named in the summary: as unreadable where `counted` among its files, else as rejected."""
    rows = []
    for i, why in gone.values():
        (summary.unreadable if counted else summary.errors).append((i.path, why))
        rows.append({**_recorded_row(i, run_id, "error"), "error": why})
    return rows


# how the `inputs.error` of a file a run could not read as planned begins: --skip-ingested takes
# such a file again, whatever its size and time
UNREAD = "gone or changed while the run read it"


def _lost(stats: list[dict], file_indexes: set[int]) -> dict[int, str]:
    """file_index -> why, of the files of `file_indexes` whose payloads a decode task could not
    read back (streams.PayloadFiles: changed, cut short or gone after the read stage), as an
    `inputs` error that begins with UNREAD."""
    out = {}
    for fi, st in _per_file(stats).items():
        e = next((e for e in st["errors"] if payloads_lost(e)), None) if fi in file_indexes else None
        if e is not None:
            out[fi] = UNREAD + e[len(CHANGED) :] if e.startswith(CHANGED) else f"{UNREAD} ({e})"
    return out


def _without(todo: list, dups: list, gone: dict, summary: Summary) -> tuple[list, list]:
    """`todo` without the inputs `gone` (path -> (input, why)), numbered again, and `dups` without
    their copies (_orphaned)."""
    kept = (i for i in todo if i.path not in gone)
    return [dataclasses.replace(i, file_index=n) for n, i in enumerate(kept)], _orphaned(dups, gone, summary)


def _copies_said(dups: list) -> list[str]:
    """The summary's line for each copy of another input's bytes (d, k), but for captures that
    hold no packet (an idle period's file of a rotation: its headers only, as every other's)."""
    return [
        f"{d.path}: same content as {k.path}, ingested once"
        for d, k in dups
        if not (d.kind in inputs.CAPTURE_KINDS and capture.files.holds_no_packets(d.path, d.kind, d.size))
    ]


def _orphaned(dups: list, gone: dict, summary: Summary) -> list:
    """`dups` without the copies of inputs now `gone`: those are not ingested by this run (the
    next one takes them), and the summary says so instead of 'ingested once'."""
    kept = []
    for d, k in dups:
        if k.path not in gone:
            kept.append((d, k))
            continue
        said = f"{d.path}: same content as {k.path}, ingested once"
        summary.capture_errors[:] = [e for e in summary.capture_errors if e != said]
        summary.capture_errors.append(
            f"{d.path}: same content as {k.path}, which the run could not read: not ingested, the next run takes it"
        )
    return kept


def _vantage(i: inputs.Input, places: dict, packets: int | None) -> str | None:
    """An input's vantage point (vantage.groups, by capture_id): none for a segment, nor for a
    capture of no packet (an idle period's file of a rotation is no place of its own)."""
    if i.kind not in inputs.CAPTURE_KINDS or not packets:
        return None
    return places.get(i.capture_id, i.capture_id)


def unread_reason(e: OSError) -> str:
    """Why a file planned for the run could not be read as planned, in one line."""
    why = e.strerror or str(e)
    return f"{UNREAD} ({why})"


def _as_runs(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Sorted UNPACKED batches as sorted packetruns.RUNS batches."""
    for b in batches:
        yield from packetruns.pack(b)


def _read_only(batches: Iterator[pa.RecordBatch], files: set[int]) -> Iterator[pa.RecordBatch]:
    """`batches` without the packets of `files` (file indexes the read tasks could not read as
    planned: RunDir.unread)."""
    import pyarrow.compute as pc

    keep_out = pa.array(sorted(files), pa.int32())
    for b in batches:
        mask = pc.invert(pc.is_in(b.column("file_index"), keep_out))
        yield b.filter(mask)


def _decode_fn(
    settings: Settings,
    staged: Staged | None,
    run: RunDir,
    sizes: dict[int, int],
    files: dict[int, tuple[str, int, int]] | None = None,
    runs: bool = False,
    shuffled: bool = False,
):
    """Decode sorted packets; `files` (path, size, mtime_ns per file index) to read the payloads
    of packets that give their offset; `runs`: the packets come as sorted packetruns.RUNS rows;
    `shuffled`: sorted by Spark with each split's own order_ns (raised here: capture.SplitOrder),
    not by the task that read them all."""

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_pandas_out()
        cpu0, wall0 = time.process_time(), time.time()
        # every read task of the capture set finished before this stage began: all ids are known,
        # and every Decryption Secrets Block was read
        digests, unread = run.digests(sizes), run.unread(sizes)
        drv = StreamDriver(
            settings,
            run.capture_ids(sizes, digests, unread=unread),
            PayloadFiles(files, digests) if files else None,
            run.frame_numbers(sizes),
            tls_keys=run.tls_keys(settings.tls_keys),
            vantages=run.vantages(sizes),
        )
        settle_collector()

        def stats() -> list[dict]:
            names = [{"topic_names": drv.topic_names}] if drv.topic_names else []
            tls = [{"tls": drv.tls_outcomes}] if drv.tls_outcomes else []
            seen = [{"seen": drv.seen}] if any(drv.seen.values()) else []
            return drv.capture_stats + names + tls + seen

        log_to = os.environ.get(TASK_LOG_ENV)
        seen = {"packets": 0, "payload_bytes": 0}
        conns: set[tuple] = set()
        order = run.split_order(sizes) if shuffled else None
        if runs:
            batches = packetruns.unpack(batches, settings.batch_packets, order)
        elif order:  # packets Spark sorted one by one: merged again, as runs, where order_ns rose
            batches = packetruns.unpack(_as_runs(batches), settings.batch_packets, order)
        if unread:
            batches = _read_only(batches, set(unread))
        if log_to:
            batches = _counted(batches, seen, conns)
        yield from _emit(drv.run_batches(batches), stats, staged)
        give_back_memory()
        if log_to:
            line = {"cpu_s": round(time.process_time() - cpu0, 3), "wall_s": round(time.time() - wall0, 3)}
            with open(log_to, "a") as f:
                f.write(json.dumps({**line, **seen, "connections": len(conns)}) + "\n")

    return decode


# a file to which each decode task appends a JSON line (its Python worker's CPU seconds, wall
# seconds, packets, payload bytes, connections): how even the tasks are (bench/versus_tshark.py)
TASK_LOG_ENV = "BROKERSCOPE_TASK_LOG"
# the 4-tuple that names a connection: the shuffle keeps each connection's packets in one task
CONN_COLS = ("lo_ip", "lo_port", "hi_ip", "hi_port")


def _counted(batches: Iterator[pa.RecordBatch], seen: dict, conns: set) -> Iterator[pa.RecordBatch]:
    """Pass `batches` through, counting their packets, payload bytes and connections."""
    import pyarrow.compute as pc

    for b in batches:
        seen["packets"] += b.num_rows
        seen["payload_bytes"] += pc.sum(b.column("payload_len")).as_py() or 0
        conns.update(zip(*(b.column(c).to_pylist() for c in CONN_COLS)))
        yield b


def give_back_memory() -> None:
    """Return what a finished task freed to the OS. Spark keeps a Python worker for the next
    task, and the heap a decode task grew would otherwise stay its RSS, idle, while the driver
    compacts the run's files (a 1 GB capture on local[2]: the tree's peak)."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc: freed pages go back to the OS
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _malloc_trim()


def _read_and_decode_fn(read, decode):
    """Both stages in one task, its packets (payloads as offsets, read back by the decode)
    sorted in memory as the shuffle would (for a capture set small enough to be one task: every
    split is read, and hashed, before the decode starts)."""

    def both(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        read_batches, stats = list(read(batches)), []
        for b in read_batches:
            st = capture.parse_stats(b)
            if st is not None:
                stats.append({**st, "file_index": b.column("file_index")[0].as_py()})
        packets = pa.Table.from_batches(read_batches, schema=tables.PACKETS).drop_columns(["capture_id"])
        del read_batches
        ordered = (
            capture.SplitOrder.of_stats(stats)
            .raise_table(packets)
            .sort_by([(c, "ascending") for c in SORT_COLS])
        )
        del packets
        yield from decode(iter(ordered.to_batches(max_chunksize=10_000)))

    return both


def _segments_fn(settings: Settings, staged: Staged | None, run: RunDir, packs: list[list[dict]]):
    """Read segment files, each whole in one task: hash it first (its capture_id names every
    row; the second read comes from the page cache), then decode its splits in order."""

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_pandas_out()
        splits = [inputs.SegmentSplit(**r) for pack in _packs_of(batches, packs) for r in pack]
        stats: list[dict] = []

        def rows() -> Iterator[tuple[str, dict]]:
            for fi in dict.fromkeys(sp.file_index for sp in splits):
                mine = [sp for sp in splits if sp.file_index == fi]
                try:
                    digests = chunk_digests(mine[0].path, 0, mine[0].size, mine[0].size)
                except OSError as e:  # gone, or cut short, since it was planned: no rows of it
                    run.write_digests(fi, 0, {}, error=unread_reason(e))
                    continue
                run.write_digests(fi, 0, digests)
                cid = combine_id(mine[0].size, digests, inputs.id_context(mine[0].kind, mine[0].path))
                st = {
                    "file_index": fi,
                    "capture_id": cid,
                    "segment_rows": 0,
                    "damaged_rows": 0,  # problem rows: parts of the log not read as records
                    "flagged_rows": 0,  # records kept with a problem (a checksum that fails)
                    "damaged": 0,  # bytes of the log in problem rows (a torn tail, a bad batch)
                    "errors": [],
                }
                stats.append(st)
                for table, row in segment_rows(
                    [dataclasses.replace(sp, capture_id=cid) for sp in mine], settings
                ):
                    st["segment_rows"] += 1
                    status = row.get("decode_status", "ok")
                    if status != "ok":
                        problem = table == "commands"  # else a record kept, its batch's problem row names it
                        st["damaged_rows" if problem else "flagged_rows"] += 1
                        if problem and status != INDEX_MISMATCH:
                            st["damaged"] += int(row.get("size") or 0)
                        if len(st["errors"]) < 5 and (problem or not st["damaged_rows"]):
                            st["errors"].append(f"{row['decode_status']}: {row.get('decode_error')}")
                    yield table, row

        yield from _emit(rows(), lambda: stats, staged)

    return read


# -- the job ----------------------------------------------------------------------------------


def ingest(
    paths: list[str],
    settings: Settings,
    spark=None,
    progress: Callable[[str], None] = lambda m: log.info(m),
    skip_ingested: bool = False,
    disc: inputs.Discovery | None = None,
    make_session: Callable[[], object] | None = None,
) -> Summary:
    """Decode `paths` (one capture set) into the lake at settings.lake_path (`disc`: their
    discovery, when the caller already made it; `make_session`: how to start Spark when there is
    work and no `spark` was given). Files that are no input are recorded in `inputs` with status
    error; `Summary.exit_code()` tells a scheduler how it went."""
    t0 = time.time()
    settings.load_tls_keys()  # the key logs, read here on the driver (the tasks get them with the settings)
    run_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:8]
    summary = Summary(run_id=run_id)
    disc = disc or inputs.discover(paths, settings.exclude)
    summary.errors = list(disc.errors)
    summary.skipped = list(disc.skipped)
    summary.excluded = list(disc.excluded)
    lake = Lake(settings.lake_path, settings.writer)
    if not (disc.inputs or disc.duplicates) and not lake.table_names():
        # nothing to read and no lake there yet (a mistyped path): no lake is made to record it
        summary.no_lake, summary.only_new = True, skip_ingested
        progress(_nothing(disc, paths) + " (no lake made)")
        summary.seconds = time.time() - t0
        return summary
    lake.ensure_tables(settings.derived_tables)
    for line in lake.recover():
        progress(line)
        summary.recovered.append(line)
    todo, dups = disc.inputs, disc.duplicates
    rejected = _rejected_rows(disc, run_id)
    flt = settings.packet_filter
    summary.filter = flt.text() if flt is not None else None
    summary.payload = settings.payload_policy.text()
    summary.only_new = skip_ingested
    if skip_ingested:
        # the filter and the payload policy are part of what was ingested: an input ingested
        # with another filter (or none), or under another policy (payloads kept that the policy
        # now hashes or drops), is decoded again, and its rows replaced by this run's
        done, gave_nothing = _ingested_keys(lake)

        def ingested(i) -> bool:
            want = summary.filter if i.kind in inputs.CAPTURE_KINDS else None  # segments: unfiltered
            return done.get((i.path, i.size, i.mtime_ns // 1000)) == (want, summary.payload)

        new = [i for i in todo if not ingested(i)]
        moved = _moved(lake, new)
        # a capture only compressed since it was ingested with this filter: nothing new to decode,
        # unless a file decoded now shares its connections (then decoded again with it, below)
        same = {
            p
            for p, m in moved.items()
            if m.same and (m.was["filter"], _payload_of(m.was)) == (summary.filter, summary.payload)
        }
        new = [i for i in new if i.path not in same]
        # captures of earlier runs outside these paths (last night's directory) may be continued
        # by a new file too: decoded again with it where they are still there, unchanged
        todo = _with_crossing(
            lake, new, todo + _recorded_elsewhere(lake, todo), settings.idle_timeout_ns, moved
        )
        compressed = [(i, moved[i.path]) for i in disc.inputs if i.path in same and i not in todo]
        # gzip files recorded as the capture they hold, decoded again with a file sharing its
        # connections: their rows replace that capture's too
        moved.update(_moved(lake, [i for i in todo if i.path not in moved]))
        dups = [(d, k) for d, k in dups if not ingested(d)]
        # a new copy of a capture ingested before and not decoded now: recorded as that capture
        decoded = {i.path for i in todo}
        last = latest_by_path(r for r in lake.inputs_rows() if r["status"] != "replaced")
        copies = [(d, k) for d, k in dups if k.path not in decoded and k.path in last]
        rejected += [_moved_row(d, last[k.path], run_id) for d, k in copies]
        summary.capture_errors.extend(_copies_said(copies))
        dups = [(d, k) for d, k in dups if k.path in decoded]
        summary.skipped_already_ingested = [i.path for i in disc.inputs if i not in todo]
        summary.skipped_unreadable = sum(
            (i.path, i.size, i.mtime_ns // 1000) in gave_nothing for i in disc.inputs if i not in todo
        )
        todo = [dataclasses.replace(i, file_index=n) for n, i in enumerate(todo)]
        # a file rejected before is not reported again (it is recorded, with its reason)
        rejected = [r for r in rejected if (r["path"], r["size"], r["mtime"]) not in done]
        kept = {r["path"] for r in rejected}
        summary.errors = [(p, e) for p, e in summary.errors if _recorded_path(p) in kept]
        summary.skipped = [(p, e) for p, e in summary.skipped if _recorded_path(p) in kept]
    else:
        moved, compressed = _moved(lake, todo), []
    # a capture compressed after it was ingested (tcpdump -z gzip) is that capture: recorded under
    # its new path when there is nothing new to decode, else decoded, its rows replacing the
    # capture's (_identified); a compression of a capture beside it (gzip still running, or -k)
    # is not decoded: the capture is
    todo, compressing = _compressing(todo)
    if compressed or compressing:
        rows = {}
        for i, m in compressed:
            rows[i.path] = _moved_row(i, m.was, run_id)
            summary.capture_errors.append(
                f"{i.path}: the capture ingested from {m.was['path']} ({m.was['capture_id']}), "
                "compressed since: not decoded again"
            )
        for i, plain in compressing:
            rows[i.path] = {
                **_recorded_row(i, run_id, "skipped"),
                "error": f"a compression of {plain}, which is decoded",
                "filter": summary.filter,  # --skip-ingested passes it over while the filter stays
                "payload": summary.payload,  # and the payload policy
            }
            summary.capture_errors.append(
                f"{i.path}: a compression of {plain} (beside it): not decoded, {plain} is"
            )
        for d, k in dups:  # the same compressed bytes under another path: recorded the same way
            if k.path in rows:
                rejected.append({**rows[k.path], "path": d.path, "size": d.size, "mtime": d.mtime_ns // 1000})
                summary.skipped_already_ingested.append(d.path)
        dups = [(d, k) for d, k in dups if k.path not in rows]
        rejected += rows.values()
        summary.skipped_already_ingested += [p for p in rows if p not in summary.skipped_already_ingested]
        todo = [dataclasses.replace(i, file_index=n) for n, i in enumerate(todo)]
    # a copy is named by the run that finds it, not again by each --skip-ingested run after
    summary.capture_errors.extend(_copies_said(dups))
    # a capture cut short since it was ingested (its whole chunks those of the capture ingested
    # from its path): not decoded, the rows of that capture kept
    shrunk = _shrunk(lake, todo)
    if shrunk:
        todo, dups = _without(todo, dups, shrunk, summary)
        for i, why in shrunk.values():
            summary.errors.append((i.path, why))
            # --skip-ingested passes it over while it stays so (and the filter and policy stay)
            rejected.append(
                {
                    **_recorded_row(i, run_id, "error"),
                    "error": why,
                    "filter": summary.filter,
                    "payload": summary.payload,
                }
            )
    # a file gone or cut short since discovery (a retention clean-up racing the run) is not read
    gone = _gone_since_found(todo)
    if gone:
        todo, dups = _without(todo, dups, gone, summary)
        rejected += _unread_rows(gone, summary, run_id, counted=False)
    # the earlier content of a path now rejected keeps its record (its rows are still here)
    rejected += lake.contents_of({r["path"] for r in rejected})

    def nothing_ingested() -> Summary:
        lake.write_inputs(rejected, [r["path"] for r in rejected])
        progress(_nothing(disc, paths))
        summary.seconds = time.time() - t0
        return summary

    summary.files = len(todo)
    if not todo:
        return nothing_ingested()
    spark = spark or (make_session or (lambda: make_spark(settings)))()
    summary.writer = lake.resolve_writer(spark)
    while True:
        psplits, ssplits = inputs.plan(todo, settings.split_size, spark.sparkContext.defaultParallelism)
        total = sum(i.size for i in todo)
        progress(
            f"planned {len(psplits)} capture split(s) and {len(ssplits)} segment split(s) "
            f"over {len(todo)} file(s), {total / 1e6:.1f} MB"
        )
        run = RunDir(lake.root, run_id)
        run.lock()
        staged = Staged(str(lake.root), run_id, lake.by_capture()) if summary.writer == "embedded" else None
        out = _decoded(spark, settings, todo, psplits, ssplits, staged, run)
        progress("decoding")
        try:
            w = _Writing(lake, run, summary, progress, todo, dups, rejected, settings.derived_tables, moved)
            if staged:
                stats = _commit_staged(out, w)
            else:
                stats = _write_dataframes(out, w)
                run.remove()
            break
        except BaseException as e:
            run.remove_secrets()
            if run.manifest() is not None:  # some tables may hold the run: the next command that
                run.release()  # opens the lake finishes it
                raise
            run.remove()
            # a file cut short while a task read it can kill the task's worker (its pages gone
            # from the read's memory map: SIGBUS) and so fail the job: the run goes on without it
            cut = _gone_since_found(todo) if isinstance(e, Exception) else {}
            if not cut:
                raise
            for t in tables.DECODED_TABLES:
                lake.drop_staging(t, run_id)
        todo, dups = _without(todo, dups, cut, summary)
        rejected += _unread_rows(cut, summary, run_id, counted=False) + lake.contents_of(set(cut))
        summary.files = len(todo)
        if not todo:
            return nothing_ingested()
        progress(f"{len(cut)} file(s) cut short or gone while the run read them: decoding the rest again")
    if settings.optimize_after_run and staged:
        progress("compacting the partitions this run wrote")
        try:
            lake.optimize(summary.dates, settings.target_file_size, only_small=True)
        except Exception as e:  # noqa: BLE001 - the run is committed; compaction can wait
            summary.capture_errors.append(
                f"{lake.root}: compaction after the run failed (rows are safe): {e}"
            )
    for s in stats:
        if s.get("file_index") in w.not_ingested:  # read, then found gone or changed: no rows
            continue
        summary.packets += _packets(s)
        summary.tcp_segments += int(s.get("tcp", 0))
        summary.filtered += int(s.get("filtered", 0))
        for outcome, n in s.get("tls", {}).items():
            summary.tls[outcome] = summary.tls.get(outcome, 0) + n
        for what, per in s.get("seen", {}).items():
            total = summary.seen.setdefault(what, {})
            for cid, n in per.items():
                total[cid] = total.get(cid, 0) + n
    for per in summary.seen.values():  # an input not ingested has no warnings (_Writing.identified)
        for cid in w.dropped:
            per.pop(cid, None)
    summary.seen = {what: per for what, per in summary.seen.items() if per}
    summary.keylogs = bool(settings.raw["tls"]["keylog_files"])
    summary.connections = summary.rows.get("streams", 0)
    if summary.seen:  # the warnings name the files
        summary.paths = {r["capture_id"]: r["path"] for r in lake.inputs_rows() if r["run_id"] == run_id}
    summary.seconds = time.time() - t0
    return summary


def _decoded(spark, settings: Settings, todo, psplits, ssplits, staged: Staged | None, run: RunDir):
    """The decode DataFrame: FILES rows (embedded writer, `staged` given) or UNION rows."""
    sc = spark.sparkContext
    out_schema = _spark_schema(FILES if staged else UNION)
    parts = []
    if psplits:
        target = inputs.effective_split_size(todo, settings.split_size, sc.defaultParallelism)
        packs = pack_splits(psplits, target)
        files = {i.file_index: (i.path, i.size, i.mtime_ns) for i in todo if i.kind in inputs.CAPTURE_KINDS}
        sizes = {fi: size for fi, (_path, size, _mtime) in files.items()}
        if len(packs) == 1:  # a small capture set: one task reads, sorts and decodes, no shuffle
            # payloads as offsets here too: the sort moves no payload bytes (1.6 -> 1.4 CPU s and
            # 470 -> 235 MB for 100 MB of capture), the decode reads them back
            read = _read_splits_fn(settings, run, sizes, packs, payload_refs=True)
            decode = _decode_fn(settings, staged, run, sizes, files)
            parts.append(_tasks(spark, packs).mapInArrow(_read_and_decode_fn(read, decode), out_schema))
        else:
            # payloads stay in the files: the shuffle moves and sorts packet headers and offsets,
            # and each decode task reads its connections' payload bytes back (streams.PayloadFiles);
            # with spark.packet_runs a row of the shuffle is a run of one connection's packets
            runs = bool(settings.raw["spark"]["packet_runs"])
            read = _read_splits_fn(settings, run, sizes, packs, payload_refs=True, runs=runs)
            decode = _decode_fn(settings, staged, run, sizes, files, runs=runs, shuffled=True)
            shuffled = packetruns.RUNS if runs else tables.PACKETS
            packets = _tasks(spark, packs).mapInArrow(read, _spark_schema(shuffled))
            if not runs:
                packets = packets.drop("capture_id")  # file_index names it: less to shuffle
            nparts = decode_partitions(
                int(settings.raw["spark"]["shuffle_partitions"]), sc.defaultParallelism, len(packs)
            )
            parts.append(
                packets.repartition(nparts, *CONN_COLS)
                .sortWithinPartitions(*SORT_COLS)
                .mapInArrow(decode, out_schema)
            )
    if ssplits:
        # a segment file is read whole by one task, which hashes it before naming its rows
        per_file: dict[int, list] = {}
        for sp in ssplits:
            per_file.setdefault(sp.file_index, []).append(sp)
        units = [
            inputs.SegmentSplit(sps[0].path, "", sps[0].kind, sps[0].start, sps[-1].end, fi, sps[0].size)
            for fi, sps in per_file.items()
        ]
        packs = [
            [asdict(sp) for u in pack for sp in per_file[u["file_index"]]]
            for pack in pack_splits(units, settings.split_size)
        ]
        parts.append(_tasks(spark, packs).mapInArrow(_segments_fn(settings, staged, run, packs), out_schema))
    return parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])


def _identified(
    lake: Lake, todo, dups, run: RunDir, summary: Summary, moved: dict | None = None
) -> tuple[list[str], list[dict]]:
    """After the decode: every input's capture_id from its tasks' digests, the capture ids whose
    rows this run replaces (its own, and the earlier content of its paths that grew), and its
    `inputs` rows. A path holding other content than before is named in the summary. A capture
    compressed since it was ingested (`moved`, _moved) and decoded now replaces the rows of that
    capture: its plain path's rows are the gzip file's history."""
    sizes = {i.file_index: i.size for i in todo}
    digests = run.digests(sizes)
    contexts = {i.file_index: inputs.id_context(i.kind, i.path) for i in todo}
    ids = run.capture_ids(sizes, digests, contexts, unread={})  # _Writing.identified took those out
    todo[:] = [dataclasses.replace(i, capture_id=ids[i.file_index]) for i in todo]
    by_path = {i.path: i for i in todo}
    read_as = {i.path: i for i in todo}  # the input whose tasks hashed the path's bytes
    for d, k in dups:
        by_path[d.path] = dataclasses.replace(d, capture_id=by_path[k.path].capture_id)
        read_as[d.path] = k

    # (gzip path, capture id) of each capture compressed since, its decompressed bytes hashed
    # already (_moved): its rows at the plain path, or at the gzip path where it was recorded
    # compressed, are the gzip file's history
    verified = set()
    for p, m in (moved or {}).items():
        verified.add((p, m.was["capture_id"]))
        if p in by_path:
            by_path[m.was["path"]], read_as[m.was["path"]] = by_path[p], read_as[p]

    def grew(path: str, size: int | None, old_id: str) -> bool:
        i = read_as[path]
        return (i.path, old_id) in verified or _begins_with(i, digests[i.file_index], size, old_id)

    replace_ids, history, other = lake.path_history(by_path, grew)
    earlier = {(r["path"], r["capture_id"]): r for r in history}
    for path, old_id in other:
        summary.capture_errors.append(_other_content(by_path[path], earlier.get((path, old_id), {}), old_id))
    return replace_ids, history


def _other_content(i, was: dict, old_id: str) -> str:
    """The summary's line for input `i`, a capture of its own under a path that held capture
    `old_id` (its `inputs` row `was`). A plain capture shorter than that one was checked for
    its prefix only where it holds a whole identity chunk and the row its chunk digests
    (_shrunk): else it is not said not to begin with it."""
    if i.kind in PLAIN_CAPTURES and (was.get("size") or 0) > i.size:
        if i.size < ID_CHUNK:
            unchecked = (
                f"too short to tell whether it begins with it (under one {ID_CHUNK >> 20} MiB identity chunk)"
            )
        elif not was.get("chunk_digests"):
            unchecked = (
                "which was recorded without its chunk digests: whether it begins with it cannot be told"
            )
        else:
            unchecked = ""
        if unchecked:
            return (
                f"{i.path}: is shorter than the capture ingested from it before ({old_id}, "
                f"{was['size']} -> {i.size} bytes), {unchecked}: decoded as a capture of its own, "
                "the earlier one keeps its rows"
            )
    return (
        f"{i.path}: holds other content than the capture ingested from it before ({old_id}), which "
        "it does not begin with (a name reused, a ring buffer's next file): a capture of its own, "
        "the earlier one keeps its rows"
    )


def _begins_with(i, digests: dict[int, bytes], size: int | None, old_id: str) -> bool:
    """Whether the file of input `i` (its chunk digests as the run's tasks wrote them) begins
    with the `size` bytes that were capture `old_id`: the chunks wholly inside them are the run's,
    the last one is hashed again up to `size`. A file it cannot read now does not. A segment
    ingested before its id named its partition (`old_id` of its bytes alone) begins with them
    too: its rows are replaced, not doubled."""
    if size is None or size > i.size:
        return False
    whole = size // ID_CHUNK
    if any(k not in digests for k in range(whole)):
        return False
    prefix = {k: digests[k] for k in range(whole)}
    if size % ID_CHUNK:
        try:
            prefix.update(chunk_digests(i.path, whole * ID_CHUNK, whole * ID_CHUNK + 1, size))
        except OSError:
            return False
    context = inputs.id_context(i.kind, i.path)
    return combine_id(size, prefix, context) == old_id or bool(context) and combine_id(size, prefix) == old_id


@dataclass
class _Writing:
    """What both writers take besides the decoded rows: the lake and the run, what the run
    ingests (`todo`; `dups`, the same content under other paths; `rejected` files' rows;
    `moved`, gzip captures of ingested ones: _moved), the derived tables asked for, and where
    it reports."""

    lake: Lake
    run: RunDir
    summary: Summary
    progress: Callable[[str], None]
    todo: list
    dups: list
    rejected: list
    derived: tuple = ()
    moved: dict | None = None
    # the capture ids of inputs the decode could not read back (_lost): their staged rows go
    dropped: set = dataclasses.field(default_factory=set)
    # the file indexes of the inputs the run did not ingest after all (unread or _lost): the
    # summary does not count their packets
    not_ingested: set = dataclasses.field(default_factory=set)

    def identified(self, stats: list[dict]) -> tuple[list[str], list[dict]]:
        """The capture ids the run replaces and the earlier `inputs` rows it keeps (_identified).
        An input a read task could not read as planned (RunDir.unread: gone or cut short while
        the run read it) has no rows: it is recorded as an error, not ingested. So has one that
        changed, was cut short or went after the read stage, while the decode read its payloads
        back (`stats`' PayloadFiles errors, _lost): its rows, decoded with payloads missing,
        are dropped (`dropped`; the writers leave them out) and the next run takes it as it is
        then, as it takes a file gone from the read stage. Either does not displace the earlier
        `inputs` rows of its path: they are kept beside its error row (Lake.contents_of)."""
        unread = self.run.unread({i.file_index for i in self.todo})
        lost = _lost(stats, {i.file_index for i in self.todo} - set(unread))
        if lost:
            sizes = {i.file_index: i.size for i in self.todo if i.file_index in lost}
            self.dropped |= set(self.run.capture_ids(sizes, unread={}).values())
            unread = {**unread, **lost}
        if unread:
            gone = {i.path: (i, unread[i.file_index]) for i in self.todo if i.file_index in unread}
            self.todo[:] = [i for i in self.todo if i.path not in gone]
            self.not_ingested |= set(unread)
            self.summary.not_ingested = len(self.not_ingested)
            self.dups[:] = _orphaned(self.dups, gone, self.summary)
            self.rejected += _unread_rows(gone, self.summary, self.run.run_id)
            # the content ingested from such a path before keeps its record beside the error
            # row (its rows are still in the tables, and the next run checks a shorter file
            # against its chunk digests: _shrunk), as a path rejected before the decode does
            self.rejected += self.lake.contents_of(set(gone))
        return _identified(self.lake, self.todo, self.dups, self.run, self.summary, self.moved)

    def record(self, stats: list[dict], history: list[dict]) -> tuple[list[dict], list[str]]:
        """The run's `inputs` rows and the paths they replace the rows of (_inputs_record)."""
        before = self.lake.vantage_ends({i.capture_id for i in self.todo})
        rows = history + self.rejected
        plain = {i.file_index: i.size for i in self.todo if i.kind in PLAIN_CAPTURES}
        chunks = {fi: _chunk_text(d) for fi, d in self.run.digests(plain).items()}
        indexes = {i.file_index for i in self.todo}
        directions = self.run.directions(indexes)
        # steps back where a split begins: no read task saw them (SplitOrder.steps_at_starts)
        starts = self.run.split_order(indexes).steps_at_starts
        stats = stats + [{"file_index": fi, "clock_steps_back": n} for fi, n in starts.items()]
        return _inputs_record(
            self.todo, self.dups, rows, self.run.run_id, stats, self.summary, before, chunks, directions
        )


def _commit_staged(out, w: _Writing) -> list[dict]:
    """Embedded writer: run the decode (tasks stage their files), write the run's manifest, then
    commit table by table from it (lake.finish_run), the derived tables (journeys, lag) after
    them, `inputs` last."""
    lake, run = w.lake, w.run
    try:
        results = [r.asDict() for r in out.collect()]
        run.remove_secrets()  # the decode is done: the captures' TLS keys are not kept a moment longer
        stats = [json.loads(r["stats"]) for r in results if r["stats"]]
        names = _topic_names(stats)
        replace_ids, history = w.identified(stats)
        per_table = {t: [r for r in results if r["table"] == t] for t in tables.DECODED_TABLES}
        for t, files in per_table.items():
            files[:] = lake.drop_captures(t, files, w.dropped)
            lake.apply_topic_names(t, files, names)
        rows, paths = w.record(stats, history)
        manifest = {
            "run_id": run.run_id,
            "capture_ids": sorted({i.capture_id for i in w.todo}),
            "tables": {t: [{k: f[k] for k in _MANIFEST_KEYS} for f in fs] for t, fs in per_table.items()},
            "replace_ids": replace_ids,
            "journeys": "journeys" in w.derived,
            "lag": "lag" in w.derived,
            "inputs": {"rows": [row_to_json(r) for r in rows], "paths": paths},
        }
        run.write_manifest(manifest)
    except BaseException:
        for t in tables.DECODED_TABLES:
            lake.drop_staging(t, run.run_id)
        raise
    w.summary.rows.update(lake.finish_run(run, manifest, w.progress))
    w.summary.dates = sorted({f["date"] for fs in per_table.values() for f in fs if f["date"]})
    return stats


_MANIFEST_KEYS = ("path", "date", "capture_id", "rows", "file_stats")


def _write_dataframes(out, w: _Writing) -> list[dict]:
    """delta-spark's writer: the decoded rows persisted once, then one Delta write per table; the
    derived tables (journeys, lag) are computed and committed by the embedded writer's code
    after them (lake.finish_derived), before `inputs`."""
    from pyspark import StorageLevel

    out = out.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        stats = [json.loads(r[0]) for r in out.where("stats IS NOT NULL").select("stats").collect()]
        names = _topic_names(stats)
        replace_ids, history = w.identified(stats)
        for t in tables.DECODED_TABLES:
            w.progress(f"writing {t}")
            df = out.where(f"{t} IS NOT NULL").select(f"{t}.*")
            if w.dropped:  # inputs the decode could not read back: not ingested (_Writing.identified)
                df = df.where(~df["capture_id"].isin(sorted(w.dropped)))
            w.summary.rows[t] = w.lake.write_dataframe(t, df, replace_ids, names)
    finally:
        out.unpersist()
    ids = sorted({i.capture_id for i in w.todo})
    records, paths = w.record(stats, history)
    w.summary.rows.update(
        w.lake.finish_derived(records, paths, w.run.run_id, ids, replace_ids, w.derived, w.progress)
    )
    return stats


# capture records other readers take as they are: read (or skipped, if empty) and counted per input
RECORD_ANOMALIES = {
    "caplen_over_origlen": "with caplen > origlen, read as captured",
    "caplen_over_snaplen": "longer than the snap length, read as captured",
    "empty_records": "with no captured bytes (caplen 0), skipped",
    "clock_steps_back": "where the capture's clock steps back more than 5 s: the packets after each keep "
    "the file's order where no other file has records at those times, else sort by their time",
    "clock_out_of_time": "with a time more than 5 s off the records around them, kept in their place "
    "in the file (their rows' times, and latencies, as captured)",
}


def _inputs_record(
    todo,
    dups,
    extra: list[dict],
    run_id: str,
    stats: list[dict],
    summary: Summary,
    before: dict[str, int],
    chunks: dict[int, str] | None = None,
    directions: dict[int, dict[int, int]] | None = None,
) -> tuple[list[dict], list[str]]:
    """The run's `inputs` rows and the paths they replace (the record is committed last). Sets
    each input's status from its tasks' counters and fills the summary's file lists. `before`:
    the vantage points of earlier runs and when they ended (Lake.vantage_ends); `chunks`: the
    plain captures' `chunk_digests` per file index (_chunk_text); `directions`: the captures'
    connection directions (RunDir.directions: vantage.groups)."""
    by_id = {i.capture_id: (chunks or {}).get(i.file_index) for i in todo}
    per_file = _per_file(stats)
    # each capture's vantage point, named by its first capture, or the earlier run's vantage
    # point it continues (vantage.groups)
    ids = {i.file_index: i.capture_id for i in todo}
    places = {
        ids[fi]: v if isinstance(v, str) else ids[v]
        for fi, v in vantage.groups(vantage.spans_of(stats), before, directions).items()
        if fi in ids
    }
    now_us = int(time.time() * 1e6)
    today = datetime.datetime.now(datetime.UTC).date()
    status: dict[str, tuple[str, str | None, int | None, int]] = {}
    filtered: dict[str, int | None] = {}  # capture_id -> packets the filter dropped
    for i in todo:
        st = per_file.get(i.file_index, {})
        if summary.filter and i.kind in inputs.CAPTURE_KINDS:
            filtered[i.capture_id] = int(st.get("filtered", 0))
        for e in st.get("errors", []):
            summary.capture_errors.append(f"{i.path}: {e}")
        for key, what in RECORD_ANOMALIES.items():
            if st.get(key):
                summary.capture_errors.append(f"{i.path}: {st[key]} record(s) {what}")
        status[i.capture_id] = _status(i, st, _link_doubt(i, st))
        verdict, why = status[i.capture_id][:2]
        if verdict == "partial":
            summary.partial.append((i.path, why or ""))
        elif verdict == "error":
            summary.unreadable.append((i.path, why or ""))
    recorded = [*todo, *(d for d, _ in dups)]
    return (
        [
            {
                "capture_id": i.capture_id,
                "path": i.path,
                "kind": i.kind,
                "size": i.size,
                "mtime": i.mtime_ns // 1000,
                "run_id": run_id,
                "ingested_at": now_us,
                "packets": status[i.capture_id][2],
                "status": status[i.capture_id][0],
                "error": status[i.capture_id][1],
                "damaged_bytes": status[i.capture_id][3],
                "filter": summary.filter if i.kind in inputs.CAPTURE_KINDS else None,
                "payload": summary.payload,
                "filtered": filtered.get(i.capture_id),
                "vantage": _vantage(i, places, status[i.capture_id][2]),
                "chunk_digests": by_id.get(i.capture_id),
                "date": today,
            }
            for i in recorded
        ]
        + extra,
        [i.path for i in recorded] + [r["path"] for r in extra],
    )


def _packets(st: dict) -> int:
    """The packets a read counted: its records (frame numbers), less the pcapng blocks that are
    frames but hold no packet."""
    return int(st.get("records", 0)) - int(st.get("other_frames", 0))


def _nothing(disc: inputs.Discovery, paths: list[str]) -> str:
    """The progress line of a run with nothing to decode."""
    if disc.inputs or disc.duplicates or disc.errors:
        return "nothing to ingest"
    return f"nothing to ingest: no capture or segment file in {', '.join(paths)}"


def _link_doubt(i, st: dict) -> str | None:
    """Why a capture's declared link type seems wrong (decode.link_mismatch), asked only of a
    capture with packets none of which its read found to be IP (nor filtered out)."""
    if i.kind not in inputs.CAPTURE_KINDS or not _packets(st):
        return None
    if any(int(st.get(k, 0)) for k in ("tcp", "udp", "ip_fragments", "filtered")):
        return None
    return link_mismatch(i.path, i.kind)


def _status(i, st: dict, link: str | None = None) -> tuple[str, str | None, int | None, int]:
    """(status, reason, packets, damaged bytes) of one input from its tasks' counters; `link`:
    why its declared link type seems wrong (then nothing of it was readable)."""
    errors = [e for e in st.get("errors", []) if not e.startswith("... and ")]
    if i.kind in inputs.CAPTURE_KINDS:
        records, damaged = _packets(st), int(st.get("damaged", 0))
        if link:
            return "error", f"nothing readable: {link}", records, damaged
        trouble = damaged or int(st.get("malformed", 0)) or errors
        why = "; ".join(errors[:3]) or (f"{damaged} damaged bytes" if damaged else None)
        if (records == 0 or records == int(st.get("unknown_linktype", 0))) and trouble:
            return "error", f"nothing readable: {why}", records, damaged
        return ("partial" if trouble else "ok"), why if trouble else None, records, damaged
    total, bad = int(st.get("segment_rows", 0)), int(st.get("damaged_rows", 0))
    flagged = int(st.get("flagged_rows", 0))
    why = "; ".join(errors[:3]) or None
    damaged = int(st.get("damaged", 0))  # was reported as 0, whatever was skipped
    if bad and total == bad:  # nothing but problem rows: no record was read
        return "error", f"nothing readable: {why}", None, damaged
    what = [
        f"{n} {name}{'' if n == 1 else 's'}"
        for n, name in ((bad, "damaged part"), (flagged, "flagged record"))
        if n
    ]
    return ("partial" if what else "ok"), f"{', '.join(what)}: {why}" if what else None, None, damaged


def _with_crossing(lake: Lake, todo: list, found: list, idle_ns: int, moved: dict | None = None) -> list:
    """`todo` and the inputs of `found` the lake holds connections of that ran into one of
    todo's paths' earlier contents, or that a new file of todo may continue (rotated files):
    decoded again with them, so a connection that crossed into a capture now decoded anew (a file
    that grew, the next file of a rotation) stays one connection and its rows are replaced, not
    kept beside a mid-stream copy of its rest."""
    if not todo:
        return todo
    wanted = {i.path for i in todo}
    # the capture ingested from a path now compressed (`moved`, _moved) is at its .gz path
    at = {m.was["path"]: p for p, m in (moved or {}).items()}
    current = [
        {**r, "path": at.get(r["path"], r["path"])}
        for r in lake.inputs_rows()
        if r["capture_id"] and r["status"] in ("ok", "partial")
    ]
    seeds = {r["capture_id"] for r in current if r["path"] in wanted}
    done = {i.path for i in found} - wanted
    streams = functools.cache(lambda: lake.read_arrow("streams", list(_STREAMS_READ)))  # read once
    seeds |= _continued(lake, todo, {r["capture_id"] for r in current if r["path"] in done}, idle_ns, streams)
    touched = lake.sharing_connections(seeds, streams)
    again = {r["path"] for r in current if r["capture_id"] in touched} - wanted
    return [i for i in found if i.path in wanted or i.path in again]


def _recorded_elsewhere(lake: Lake, found: list) -> list:
    """Inputs of the captures the lake holds (ok or partial) at paths other than `found`'s, that
    are still there with the size and modification time recorded: what an earlier run read from
    another directory (the nightly job's `--input /captures/<date>`), which a new file of this run
    may continue (_with_crossing)."""
    here = {i.path for i in found}
    rows = _inputs_us(lake, ["path", "kind", "size", "status", "ingested_at", "run_id"])
    out = []
    for r in latest_by_path(r for r in rows if r["status"] != "replaced").values():
        if r["path"] in here or r["kind"] not in inputs.CAPTURE_KINDS or r["status"] not in ("ok", "partial"):
            continue
        try:
            st = os.stat(r["path"])
        except OSError:
            continue
        if st.st_size == r["size"] and st.st_mtime_ns // 1000 == r["mtime"]:
            out.append(inputs.Input(r["path"], r["kind"], st.st_size, st.st_mtime_ns, ""))
    return out


# Zeek's conn_state of a connection not closed at its last packet: no RST, not FIN both ways
_OPEN_AT_END = frozenset({"S0", "S1", "S2", "S3", "OTH"})
# the streams columns _with_crossing reads, once, for _continued and Lake.sharing_connections
_STREAMS_READ = ("capture_id", "capture_ids", "conn_state", "first_ts", "last_ts", "midstream")


def _continued(
    lake: Lake, todo: list, ingested: set[str], idle_ns: int, streams: Callable[[], pa.Table] | None = None
) -> set[str]:
    """The captures of `ingested` that a capture file of `todo` may continue, or that may
    continue it: one of their connections ended in them still open, its last packet at most
    idle_ns before the file's first packet (the next file of a rotation, read in a later run),
    or, none so near, the last such capture before it (a connection quiet longer than idle_ns
    across the rotation); or the first of them to begin after the file began holds connections
    open when it began (a file that came late, its next file ingested before it). `streams`: the
    streams table's _STREAMS_READ columns, when the caller has them."""
    if not ingested or "streams" not in lake.table_names():
        return set()  # the first night: no file's head to read
    starts = [
        t
        for i in todo
        if i.kind in inputs.CAPTURE_KINDS and (t := first_packet_ns(i.path, i.kind)) is not None
    ]
    if not starts:
        return set()
    st = streams() if streams is not None else lake.read_arrow("streams", list(_STREAMS_READ))
    first_ns, last_ns = (
        pc.multiply(st.column(c).cast(pa.int64()), 1000).to_pylist() for c in ("first_ts", "last_ts")
    )  # µs -> ns
    out = set()
    begins: dict[str, int] = {}  # capture -> the first packet of its connections (those begun in it)
    open_at: dict[str, list[int]] = {}  # capture -> first packets of its connections begun mid-stream
    latest: dict[int, tuple[int, str]] = {}  # a start -> the last open connection's end before it
    near: set[int] = set()  # the starts an open connection ended at most idle_ns before
    cols = st.select(["capture_id", "capture_ids", "conn_state", "midstream"]).to_pylist()
    for r, first, last in zip(cols, first_ns, last_ns):
        ended_in = r["capture_ids"][-1] if r["capture_ids"] else r["capture_id"]
        if ended_in in ingested and r["conn_state"] in _OPEN_AT_END and last is not None:
            for t in starts:
                if 0 <= t - last <= idle_ns:
                    out.add(ended_in)
                    near.add(t)
                elif last < t and (last, ended_in) > latest.get(t, (-1, "")):
                    latest[t] = (last, ended_in)
        began = r["capture_id"]
        if began in ingested and first is not None:
            begins[began] = min(begins.get(began, first), first)
            if r["midstream"]:
                open_at.setdefault(began, []).append(first)
    # quiet longer than the idle timeout: the decode takes a connection whose sequence numbers
    # fit as one however long its silence (TcpConnection.continues), so the capture ending last
    # before the file with a connection open comes too where none ended within idle_ns
    out.update(c for t, (_last, c) in latest.items() if t not in near)
    for t in starts:
        after = [(b, c) for c, b in begins.items() if b > t]
        if after:
            b, c = min(after)
            if any(f - b <= idle_ns for f in open_at.get(c, ())):
                out.add(c)
    return out


def _recorded_path(path: str) -> str:
    """The `inputs.path` of a rejected input: the file a path leads to, or, where it leads
    nowhere (a dangling symlink, a missing path), the path itself made absolute."""
    return os.path.realpath(path) if os.path.exists(path) else os.path.abspath(path)


@dataclass(frozen=True)
class _Moved:
    """A gzip file holding a capture the lake ingested from the plain path beside it, gone since
    (tcpdump -z gzip after the file's rotation): `was`, that capture's `inputs` row there; `same`:
    the decompressed bytes are that capture's and no more (else it grew before it was compressed)."""

    was: dict
    same: bool


def _moved(lake: Lake, candidates: list) -> dict[str, _Moved]:
    """The inputs of `candidates` that are a capture the lake ingested from their plain path, by
    path. The decompressed bytes are hashed as a capture's are: other content under such a name is
    a capture of its own."""
    gz = [i for i in candidates if i.kind.endswith(".gz") and not os.path.exists(i.path[: -len(".gz")])]
    if not gz:
        return {}
    latest = latest_by_path(  # plain path -> the capture ingested from it last
        r
        for r in lake.inputs_rows()
        if r["status"] in ("ok", "partial") and r["capture_id"] and r["kind"] in ("pcap", "pcapng")
    )
    out = {}
    for i in gz:
        was = latest.get(i.path[: -len(".gz")])
        if was is None or was["kind"] + ".gz" != i.kind:
            continue
        try:
            cid, more = gzip_id(i.path, was["size"])
        except (OSError, EOFError, zlib.error):
            continue  # damaged: decoded as any other input, which says what is wrong
        if cid == was["capture_id"]:
            out[i.path] = _Moved(was, not more)
    return out


def _moved_row(i, was: dict, run_id: str) -> dict:
    """The `inputs` row of input `i` holding the capture `was` records (gzip of it, a copy), not
    decoded again."""
    return {**was, "path": i.path, "kind": i.kind, "size": i.size, "mtime": i.mtime_ns // 1000,
            "run_id": run_id, "ingested_at": int(time.time() * 1e6), "replaced_by": None}  # fmt: skip


def _recorded_row(i, run_id: str, status: str) -> dict:
    """An `inputs` row of input `i` that was not decoded."""
    return {"capture_id": None, "path": i.path, "kind": i.kind, "size": i.size, "mtime": i.mtime_ns // 1000,
            "run_id": run_id, "ingested_at": int(time.time() * 1e6), "packets": None, "status": status,
            "error": None, "damaged_bytes": 0, "date": datetime.datetime.now(datetime.UTC).date()}  # fmt: skip


def _compressing(todo: list) -> tuple[list, list[tuple[object, str]]]:
    """`todo` less its gzip files that are a compression of a capture beside them (X.gz beside
    X, whose decompressed bytes, as far as they go, are X's first: gzip still writing it, or
    gzip -k), and those files with the path of X. X is the capture decoded."""
    paths = {i.path for i in todo}
    out, found = [], []
    for i in todo:
        plain = i.path[: -len(".gz")]
        if i.kind.endswith(".gz") and plain in paths and _a_compression_of(i.path, plain):
            found.append((i, plain))
        else:
            out.append(i)
    return out, found


def _a_compression_of(gz_path: str, plain: str) -> bool:
    """Whether the decompressed bytes of `gz_path`, as far as they go (a gzip file still being
    written ends early: zlib gives what its bytes hold), are the first bytes of `plain`, and there
    are some."""
    n = 0
    d = zlib.decompressobj(wbits=31)  # a gzip member
    try:
        with open(gz_path, "rb") as gz, open(plain, "rb") as fh:
            while chunk := gz.read(1 << 20):
                while chunk:
                    data = d.decompress(chunk)
                    if fh.read(len(data)) != data:
                        return False
                    n += len(data)
                    chunk = b""
                    if d.eof:  # the next member, if any
                        chunk, d = d.unused_data, zlib.decompressobj(wbits=31)
    except (OSError, zlib.error):
        return n > 0  # damaged past the bytes compared: those were the capture's
    return n > 0


def _rejected_rows(disc, run_id: str) -> list[dict]:
    """`inputs` rows for the files discovery found but could not take: status error, or skipped
    for the sidecars of directories (no input by their bytes nor their name). A dangling symlink
    is recorded with the link's own size and mtime (so --skip-ingested knows it next time), a
    missing path with neither (reported by every run that names it)."""
    now_us = int(time.time() * 1e6)
    today = datetime.datetime.now(datetime.UTC).date()
    out = []
    statuses = [*(("error", e) for e in disc.errors), *(("skipped", e) for e in disc.skipped)]
    for status, (path, why) in statuses:
        try:
            st = os.stat(path)
        except OSError:
            try:
                st = os.lstat(path)
            except OSError:
                st = None
        out.append(
            {
                "path": _recorded_path(path),
                "size": st.st_size if st else None,
                "mtime": st.st_mtime_ns // 1000 if st else None,
                "run_id": run_id,
                "ingested_at": now_us,
                "status": status,
                "error": why,
                "date": today,
            }
        )
    return out


def decode_partitions(configured: int, parallelism: int, read_tasks: int) -> int:
    """Partitions of the connection shuffle: `configured` if set, else at least two per core and
    one per read task, so a decode task takes about what a read task read (split_size): its sort
    and its memory stay flat as capture sets grow."""
    return configured or max(2, 2 * parallelism, read_tasks)


def pack_splits(splits: list, target: int) -> list[list[dict]]:
    """Group splits into ceil(total / target) tasks, largest split first into the task with the
    fewest bytes, so a capture set of many small files does not pay Spark's per-task cost once
    per file. A split never spans tasks."""
    total = sum(sp.end - sp.start for sp in splits)
    n = max(1, -(-total // max(1, target)))
    bins: list[tuple[int, list[dict]]] = [(0, []) for _ in range(min(n, len(splits)))]
    for sp in sorted(splits, key=lambda sp: sp.start - sp.end):
        i = min(range(len(bins)), key=lambda k: bins[k][0])
        size, items = bins[i]
        items.append(asdict(sp))
        bins[i] = (size + sp.end - sp.start, items)
    return [items for _, items in bins if items]


def _topic_names(stats: list[dict]) -> dict[str, str]:
    """Topic id -> name pairs every task learned (Kafka Metadata), for the whole capture set."""
    out: dict[str, str] = {}
    for s in stats:
        out.update(s.get("topic_names", {}))
    return out


def _per_file(stats: list[dict]) -> dict[int, dict]:
    """The tasks' counters summed per file index (error lists joined, each error once)."""
    out: dict[int, dict] = {}
    for s in stats:
        fi = s.get("file_index")
        if fi is None:
            continue
        acc = out.setdefault(fi, {"errors": []})
        for k, v in s.items():
            if k == "errors":  # every task that met a file's problem says it: once per file
                seen = acc["errors"]
                for e in v:  # a growing file: each task saw its own size, the first one says it
                    if e not in seen and not (
                        e.startswith(CHANGED) and any(x.startswith(CHANGED) for x in seen)
                    ):
                        seen.append(e)
            elif isinstance(v, int) and not isinstance(v, bool) and k not in ("file_index",):
                if not k.endswith("_ts_ns"):
                    acc[k] = acc.get(k, 0) + v
    return out


def _ingested_keys(
    lake: Lake,
) -> tuple[dict[tuple[str, int, int], tuple[str | None, str]], set[tuple[str, int, int]]]:
    """(path, size, mtime in µs) of every file the lake holds a current record of -> the filter
    it was ingested with (None: none) and the payload policy (_payload_of); and the keys of those
    that gave nothing (status error)."""
    out, nothing = {}, set()
    for r in _inputs_us(lake, ["path", "size", "status", "filter", "payload", "error"]):
        if (r["error"] or "").startswith(UNREAD):  # never read: gone while a run read it, maybe back
            continue
        if r["status"] != "replaced" and r["mtime"] is not None:
            out[(r["path"], r["size"], r["mtime"])] = (r["filter"], _payload_of(r))
            if r["status"] == "error":
                nothing.add((r["path"], r["size"], r["mtime"]))
    return out, nothing


def _inputs_us(lake: Lake, columns: list[str]) -> list[dict]:
    """The `inputs` rows, `columns` of them and `mtime` in microseconds (the key --skip-ingested
    compares with a file's st_mtime_ns // 1000)."""
    t = lake.read_arrow("inputs")
    mtimes = t.column("mtime").cast(pa.int64()).to_pylist()
    return [{**r, "mtime": m} for r, m in zip(t.select(columns).to_pylist(), mtimes)]


def _payload_of(row: dict) -> str:
    """The payload policy an `inputs` row's capture was decoded under; a row of a lake older than
    the column: the default's (keep), what every such lake ran under unless configured."""
    return row.get("payload") or "keep"


def _spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
