"""The `brokerscope` command: ingest, sql, shell, report, tables, extract, recover, optimize, vacuum, demo."""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from . import __version__, export, report
from .capture.filter import PacketFilter
from .config import POLICIES, Settings, check_setting, schema_options
from .protocols.base import known_names
from .report import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_TERMINATED, EXIT_USAGE, Terminated, no_room, one_line

log = logging.getLogger("brokerscope")

EXAMPLE_QUERY = """
SELECT protocol, server_port, count(*) AS connections,
       sum(c2s_bytes + s2c_bytes) AS payload_bytes, sum(frames_ok) AS frames_ok,
       sum(frames_failed) AS frames_failed
FROM streams GROUP BY protocol, server_port ORDER BY connections DESC, server_port
""".strip()


FILTER_FLAGS = ("--since", "--until", "--host", "--tcp-port")


class UsageError(ValueError):
    """Bad arguments, configuration or environment: one line, exit 2, before Spark starts."""


@functools.lru_cache(maxsize=1)
def _java_ok() -> str | None:
    """None when Java 17+ is available, else a one-line explanation (asked once per process)."""
    java = shutil.which("java")
    if not java:
        return "Java 17 or newer is required to run Spark, and `java` is not on PATH (install openjdk-17-jre-headless)."
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except Exception as e:  # noqa: BLE001
        return f"cannot run `java -version`: {e}"
    import re

    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return None
    major = int(m.group(1)) if m.group(1) != "1" else int(m.group(2) or 0)
    if major < 17:
        return f"Java 17 or newer is required to run Spark; found Java {major} ({java})."
    return None


def _settings(args) -> Settings:
    overrides: dict = {}
    if getattr(args, "lake", None):
        overrides.setdefault("lake", {})["path"] = args.lake
    if getattr(args, "master", None):
        overrides.setdefault("spark", {})["master"] = args.master
    if getattr(args, "split_size", None):
        check_setting("--split-size", args.split_size, "capture.split_size")  # named by its flag
        overrides.setdefault("capture", {})["split_size"] = args.split_size
    if getattr(args, "payload", None):
        overrides.setdefault("payload", {})["policy"] = args.payload
    if getattr(args, "journeys", False):
        overrides.setdefault("journeys", {})["enabled"] = True
    if getattr(args, "lag", False):
        overrides.setdefault("lag", {})["enabled"] = True
    # the ingest filter: a flag given replaces that part of [filter]; a bad value is named by its flag
    flags = {"since": "since", "until": "until", "host": "hosts", "tcp_port": "ports"}
    given = {key: getattr(args, flag, None) for flag, key in flags.items()}
    PacketFilter.parse(
        given["since"], given["until"], given["hosts"] or (), given["ports"] or (), FILTER_FLAGS
    )
    for key, value in given.items():
        if value is not None:
            overrides.setdefault("filter", {})[key] = value
    options = schema_options()
    for spec in getattr(args, "schema", None) or []:
        proto, _, path = spec.partition("=")
        proto = proto.strip()
        if proto not in options or not path:
            known = ", ".join(sorted(options))
            raise UsageError(f"--schema wants PROTO=FILE with PROTO one of {known}, not {spec!r}")
        overrides.setdefault("protocols", {}).setdefault(proto, {})[options[proto]] = path
    s = Settings.load(args.conf, overrides)
    if getattr(args, "exclude", None):  # added to [inputs] exclude
        s.raw["inputs"]["exclude"] += args.exclude
    if getattr(args, "tls_keylog", None):  # added to [tls] keylog_files
        s.raw["tls"]["keylog_files"] += args.tls_keylog
    if getattr(args, "tls_keylog_insecure_ok", False):
        s.raw["tls"]["keylog_insecure_ok"] = True
    s.validate()
    for spec in getattr(args, "port", None) or []:
        proto, _, port = spec.partition("=")
        if not port.isdigit() or not 0 < int(port) < 65536 or proto.strip() not in known_names():
            raise UsageError(
                f"--port wants PROTO=PORT with PROTO one of {', '.join(known_names())} and PORT "
                f"1-65535 (e.g. kafka=19092), not {spec!r}"
            )
        s.add_port(proto.strip(), int(port))
    return s


def _spark(settings: Settings, quiet: bool = False):
    err = _java_ok()
    if err:
        raise UsageError(err)
    from .pipeline import make_spark

    # PySpark logs a failed query's context as JSON on stderr; the CLI prints one line instead
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    spark = make_spark(settings, quiet_progress=quiet, class_cache=True)
    spark_started()
    return spark


def cmd_ingest(args) -> int:
    """Exit codes: pipeline.EXIT_* (README, "Exit codes")."""
    settings = _settings(args)
    from . import inputs
    from .lake import Lake
    from .pipeline import ingest

    err = _java_ok()  # before the lake is made: a run that cannot start Spark leaves nothing
    if err:
        raise UsageError(err)
    made = Lake(settings.lake_path).check_writable()  # a bad --lake is one line, before Spark starts
    settings.load_tls_keys()  # on the driver, before Spark starts: a refused key log is exit 2

    def progress(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    disc = inputs.discover(args.paths, settings.exclude)
    summary = ingest(
        args.paths,
        settings,
        progress=progress,
        skip_ingested=args.skip_ingested,
        disc=disc,
        make_session=lambda: _spark(settings, quiet=args.quiet),
    )
    # the inputs rejected (with --skip-ingested, not those the lake recorded as rejected before)
    for p, e in summary.errors:
        print(report.shown(f"brokerscope: {p}: {e}"), file=sys.stderr)
    for line in summary.lines():
        print(line)
    if summary.no_lake:  # the directories the writability check made go again, if still empty
        for d in made:
            with contextlib.suppress(OSError):
                d.rmdir()
    print(
        f"lake: {Path(settings.lake_path).absolute()}{' (none made: nothing to record)' if summary.no_lake else ''}"
    )
    return summary.exit_code()


def _print_rows(columns: list[str], rows: list[tuple], fmt: str, out=None) -> None:
    export.write(export.from_rows(columns, rows), fmt, out or sys.stdout)


def run_sql(spark, lake_path: str, query: str, limit: int | None = None) -> tuple[list[str], list[tuple]]:
    from .lake import Lake

    lake = Lake(lake_path)
    lake.check_readable()
    _recover(lake)
    lake.register(spark)
    df = spark.sql(query)
    rows = df.limit(limit).collect() if limit else df.collect()
    return df.columns, [tuple(r) for r in rows]


def _sql_text(args) -> str:
    """The SQL of `brokerscope sql`: the QUERY argument, -f FILE, or standard input (`-`, or no
    QUERY with input piped in)."""
    if args.file and args.query:
        raise UsageError("give a query or -f FILE, not both")
    if args.file:
        try:
            return Path(args.file).read_text()
        except OSError as e:
            raise UsageError(f"cannot read {args.file}: {e.strerror or e}") from None
    if args.query == "-" or (args.query is None and not sys.stdin.isatty()):
        return sys.stdin.read()
    if args.query is None:
        raise UsageError("give a query, -f FILE.sql, or SQL on standard input")
    return args.query


def _out_paths(out: str, n: int) -> list[str]:
    """--out FILE for n results: FILE itself for one, FILE's stem numbered for several
    (res.csv -> res-1.csv, res-2.csv)."""
    if n == 1:
        return [out]
    p = Path(out)
    return [str(p.with_name(f"{p.stem}-{i}{p.suffix}")) for i in range(1, n + 1)]


def _write_out(results, args) -> None:
    """Each result to its --out file, whole or not at all (export.whole_file): a write that fails
    leaves the file as it was."""
    for table, path in zip(results, _out_paths(args.out, len(results))):
        if args.format == "parquet":
            with export.whole_file(path) as f:
                export.write_parquet(table, f)
        else:
            with export.whole_file(path, "w", encoding="utf-8", newline="") as f:
                export.write(table, args.format, f, args.binary)
        print(f"brokerscope: wrote {table.num_rows} row(s) to {path}", file=sys.stderr)


def cmd_sql(args) -> int:
    """Every statement of the SQL in turn, on one Spark session. The lake and the tables the
    statements read are checked first, before Spark starts (exit 2, one line)."""
    from . import query, sqltext

    settings, lake = _open_lake(args)  # before Spark starts: a missing lake is one line
    statements, _ = sqltext.split(_sql_text(args))
    if not statements:
        raise UsageError("no SQL statement given")
    query.check_tables(statements, lake)
    if args.format == "parquet" and not args.out:
        raise UsageError("--format parquet writes a file: give --out FILE")
    if args.out:  # every path a result may go to: statements without one leave fewer results
        for path in dict.fromkeys([args.out, *_out_paths(args.out, len(statements))]):
            export.check_out(path, "the file")
    spark = _spark(settings, quiet=True)
    lake.register(spark)
    _say_unreadable(lake)
    results, shown = [], 0
    for st in statements:
        # the file and line of the statement (Spark's own 'line N pos M' counts within it)
        if args.file:
            where = f" ({args.file}:{st.line})"
        else:
            where = f" (statement at line {st.line})" if len(statements) > 1 else ""
        try:
            table = query.fetch(spark, st.text, args.limit)
        except Exception as e:  # AnalysisException and friends: one clear line
            if _interrupt_in(e) is not None:  # the error of a call Ctrl-C or SIGTERM cut short
                raise
            print(f"brokerscope: query failed{where}: {one_line(e)}", file=sys.stderr)
            return EXIT_USAGE
        if table is None:
            continue
        if args.out:
            results.append(table)
            continue
        if shown:
            sys.stdout.write("\n")
        try:
            export.write(table, args.format, sys.stdout, args.binary)
        except ValueError as e:  # a result the format cannot hold (a name twice in JSON, ...)
            print(f"brokerscope: cannot write the result{where}: {e}", file=sys.stderr)
            return EXIT_USAGE
        shown += 1
    if results:
        _write_out(results, args)
    return 0


def cmd_shell(args) -> int:
    """An interactive SQL prompt on one Spark session (statements from standard input)."""
    from .query import Shell

    settings, lake = _open_lake(args)
    if sys.stdin.isatty():
        print(
            "brokerscope: starting Spark (seconds; once for the whole session)", file=sys.stderr, flush=True
        )
    spark = _spark(settings, quiet=True)
    lake.register(spark)
    _say_unreadable(lake)
    return Shell(spark, lake, args.format, args.binary).loop()


def cmd_tables(args) -> int:

    settings, lake = _open_lake(args)
    info = lake.info()
    _print_rows(
        ["table", "rows", "delta_version", "files", "size_bytes"],
        [(i.name, i.rows, i.version, i.files, i.size_bytes) for i in info],
        args.format,
    )
    return EXIT_USAGE if _say_unreadable(lake) else 0


def _say_unreadable(lake) -> bool:
    """One line per table of the lake that cannot be read (the rest is read as usual)."""
    for why in lake.unreadable.values():
        print(f"brokerscope: {why}", file=sys.stderr)
    return bool(lake.unreadable)


def _recover(lake) -> list[str]:
    """Finish runs that were killed between their table commits (one line each, on stderr). On a
    lake this process cannot write (a read-only mount, a snapshot), one line says so and the
    command reads what is committed."""
    try:
        lines = lake.recover()
    except OSError as e:  # delta-rs's errors are OSErrors too: several lines, colour codes in them
        why = e.strerror or no_room(e) or one_line(e)
        print(
            f"brokerscope: cannot finish interrupted runs in {lake.root} ({why}): reading what they committed",
            file=sys.stderr,
        )
        return []
    for line in lines:
        print(f"brokerscope: {line}", file=sys.stderr)
    return lines


def _open_lake(args, recover: bool = True, write: bool = False):
    """(settings, lake) for a command on an existing lake: one line and exit 2 when there is none,
    or (`write`: the command changes it) when it cannot be written; runs killed midway are
    finished first."""
    from .lake import Lake

    settings = _settings(args)
    lake = Lake(settings.lake_path)
    lake.check_readable()
    if write:
        lake.check_writable()
    if recover:
        _recover(lake)
    return settings, lake


def cmd_extract(args) -> int:
    """Packets of connections, frames or a time window, from the original inputs, for Wireshark.
    Exit 1 when no packet matched."""
    from . import extract

    settings, _ = _open_lake(args)
    flt = PacketFilter.parse(args.since, args.until, args.host or (), args.tcp_port or (), FILTER_FLAGS)
    frames = extract.parse_frames([*(args.frames or ()), *(args.frame or ())])
    r = extract.extract(
        settings.lake_path, args.out, args.conn_id or (), args.capture_id or (), flt, frames or None
    )
    if r.damaged:
        nos = ", ".join(str(f) for f in r.damaged[:10]) + (", ..." if len(r.damaged) > 10 else "")
        print(
            f"brokerscope: frame {nos}: a record whose length is damaged (ingest resynced over it): "
            "no packet in it, nothing written for it",
            file=sys.stderr,
        )
    if not r.packets:
        has = "" if r.frames_in_file is None else f" (the capture has {r.frames_in_file:,} frames)"
        print(f"brokerscope: no packet matched: nothing written{has}", file=sys.stderr)
        return 1
    past = [f for f in frames if f > r.frames_in_file] if frames and r.frames_in_file is not None else []
    if past:
        print(
            f"brokerscope: {len(past):,} frame number(s) past the capture's {r.frames_in_file:,} frames "
            f"(from {min(past):,}): nothing written for them",
            file=sys.stderr,
        )
    print(f"wrote {r.packets:,} packet(s) from {len(r.files)} file(s) to {r.out}")
    print(f"open it: wireshark -r {r.out}")
    return 0


def cmd_report(args) -> int:
    """One HTML page of plots over the lake (dashboard.py), aggregated without Spark."""
    from . import dashboard

    settings, _ = _open_lake(args)
    scope = dashboard.Scope.parse(args.capture_id, args.since, args.until, args.topic)
    tty = sys.stderr.isatty()

    def progress(msg: str) -> None:
        if tty:
            print(f"[{time.strftime('%H:%M:%S')}] report: {msg}", file=sys.stderr, flush=True)

    r = dashboard.build(settings.lake_path, args.out, scope, progress)
    for why in r.empty:
        print(f"brokerscope: no chart for {why}", file=sys.stderr)
    print(
        f"wrote {r.out} ({r.bytes / 1e6:.1f} MB, {r.charts} chart{'' if r.charts == 1 else 's'}) in {r.seconds:.1f} s: open it in a browser"
    )
    return 0


def cmd_recover(args) -> int:
    _, lake = _open_lake(args, recover=False, write=True)
    if not _recover(lake):
        print(f"nothing to recover in {lake.root}")
    return 0


def _files(lake) -> dict[str, int]:
    return {i.name: i.files for i in lake.info()}


def cmd_optimize(args) -> int:
    from .config import parse_size

    settings, lake = _open_lake(args, write=True)
    before = _files(lake)
    size = parse_size(args.target_size) if args.target_size else settings.target_file_size
    lake.optimize(None, size)
    after = _files(lake)
    _print_rows(["table", "files_before", "files_after"], [(t, before[t], after[t]) for t in after], "table")
    return 0


def cmd_vacuum(args) -> int:

    settings, lake = _open_lake(args, write=not args.dry_run)
    hours = settings.vacuum_retain_hours if args.retain_hours is None else args.retain_hours
    gone = lake.vacuum(hours, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    _print_rows(["table", f"files_{verb.replace(' ', '_')}"], [(t, len(f)) for t, f in gone.items()], "table")
    return 0


def cmd_demo(args) -> int:
    """Ingest the bundled sample data and show what the lake holds."""
    sample = (
        Path(args.sample_data) if args.sample_data else Path(__file__).resolve().parents[2] / "sample_data"
    )
    if not sample.is_dir():
        raise UsageError(f"sample data not found at {sample}")
    from . import inputs

    # the capture and segment files only: the provenance notes and scripts beside them are no input
    args.paths = [i.path for i in inputs.discover([str(sample)]).inputs] or [str(sample)]
    args.skip_ingested = False
    rc = cmd_ingest(args)
    if rc not in (0, 3):  # sample data with a damaged file still shows the query
        return rc
    settings = _settings(args)
    from pyspark.sql import SparkSession

    from .pipeline import make_spark

    # the ingest's session (asking getOrCreate again logged "Using an existing Spark session")
    spark = SparkSession.getActiveSession() or make_spark(settings, quiet_progress=True)
    print("\nexample query:\n" + EXAMPLE_QUERY + "\n")
    cols, rows = run_sql(spark, settings.lake_path, EXAMPLE_QUERY)
    _print_rows(cols, rows, "table")
    lake = shlex.quote(settings.lake_path)
    cmd = command_name()
    print(f'\nnext: {cmd} sql "SELECT command, count(*) FROM commands GROUP BY command" --lake {lake}')
    print(f"      {cmd} shell --lake {lake}")
    print(f"      {cmd} report --lake {lake} --out report.html")
    return 0


def command_name() -> str:
    """How the person who ran this can run `brokerscope` again: `brokerscope` when that name on
    PATH is this installation's, else the script's path (.venv/bin/brokerscope after `make
    demo`), else python -m."""
    script = Path(sys.prefix) / "bin" / "brokerscope"
    found = shutil.which("brokerscope")
    if found and script.exists() and Path(found).resolve() == script.resolve():
        return "brokerscope"
    if script.exists():
        rel = os.path.relpath(script)
        return shlex.quote(rel if not rel.startswith("..") else str(script))
    return f"{shlex.quote(sys.executable)} -m brokerscope.cli"


def _command(sub, name: str, help: str, **kw) -> argparse.ArgumentParser:
    """A subcommand whose `--help` starts with the line the command list shows for it."""
    return sub.add_parser(name, help=help, description=kw.pop("description", help), **kw)


def filter_flags(parser, about: str) -> None:
    """--since, --until, --host and --tcp-port (capture.filter.PacketFilter), for ingest and extract."""
    flt = parser.add_argument_group("filters", about)
    flt.add_argument(
        "--since",
        metavar="TIME",
        help="capture time from which packets are kept (inclusive): ISO 8601, e.g. "
        "2026-11-20T14:05:00+01:00 (no zone: UTC), or epoch seconds",
    )
    flt.add_argument(
        "--until", metavar="TIME", help="capture time at which packets stop being kept (exclusive)"
    )
    flt.add_argument(
        "--host",
        action="append",
        metavar="ADDR[/PREFIX]",
        help="keep packets to or from this IP address or network, e.g. 10.0.0.5, 10.0.0.0/24 (repeatable)",
    )
    flt.add_argument(
        "--tcp-port",
        action="append",
        metavar="N",
        help="keep packets to or from this TCP port (repeatable; unlike --port, which names a protocol's port)",
    )


def exclude_flag(parser) -> None:
    """--exclude GLOB, for ingest and the nightly job."""
    parser.add_argument(
        "--exclude",
        action="append",
        metavar="GLOB",
        help="no input: files or directories whose name (or path below a directory given) matches "
        "GLOB, e.g. '*.tmp' (repeatable; added to [inputs] exclude). Hidden files are never inputs "
        "in a directory, and other files there that are no capture by their bytes nor their name "
        "are skipped, not failures",
    )


def _hours(text: str) -> float:
    """Hours for --retain-hours: a number of 0 or more."""
    try:
        h = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of hours: {text!r}") from None
    if not h >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"hours are 0 or more, not {text}")
    return h


def _rows(text: str) -> int:
    """A row count for --limit: an integer of 0 or more."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a row count: {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"a row count is 0 or more, not {n}")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="brokerscope", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp, lake_default: str | None = None):
        sp.add_argument("--lake", help="lake directory (default: lake.path from the config, 'lake')")
        sp.add_argument("--conf", help="brokerscope TOML config file (default: embedded defaults)")
        sp.add_argument("--master", help="Spark master (default local[*]; e.g. spark://host:7077)")

    def output(sp, formats):
        sp.add_argument(
            "--format",
            choices=formats,
            default="table",
            help="table (for people: long cells shortened, and counted), csv, json (one array), "
            "jsonl (an object per line)" + (", parquet (with --out)" if "parquet" in formats else ""),
        )
        sp.add_argument(
            "--binary",
            choices=export.BINARY,
            default="base64",
            help="binary values as base64 (default) or hex",
        )

    ing = _command(sub, "ingest", help="decode captures and segment files into the lake")
    ing.add_argument("paths", nargs="+", help="files, directories or globs (one capture set)")
    common(ing)
    exclude_flag(ing)
    ing.add_argument("--port", action="append", metavar="PROTO=PORT", help="add a broker port (repeatable)")
    ing.add_argument("--split-size", help="split size for large files (e.g. 128MiB)")
    ing.add_argument("--payload", choices=POLICIES, help="payload policy")
    ing.add_argument(
        "--schema",
        action="append",
        metavar="PROTO=FILE",
        help="a protobuf schema (.proto or descriptor set) for messages brokerscope lacks, e.g. "
        "tubemq=MasterService.proto (repeatable)",
    )
    ing.add_argument(
        "--skip-ingested", action="store_true", help="skip inputs the lake's inputs table already holds"
    )
    ing.add_argument(
        "--journeys",
        action="store_true",
        help="also compute the journeys table (Kafka, Pulsar, Iggy and TubeMQ messages from producer "
        "to each consumer) for the run's captures ([journeys] enabled)",
    )
    ing.add_argument(
        "--lag",
        action="store_true",
        help="also compute the lag table (Kafka and Iggy consumers' high watermark, committed and "
        "delivered offsets, Pulsar subscriptions' backlogs, per partition and minute) for the run's "
        "captures ([lag] enabled)",
    )
    filter_flags(
        ing,
        "keep only some packets of the captures, dropped as they are read: a packet is kept when its "
        "capture time is in [--since, --until) and either endpoint matches a --host (if given) and "
        "either TCP port is a --tcp-port (if given); these replace [filter] of the config",
    )
    ing.add_argument(
        "--tls-keylog",
        action="append",
        metavar="FILE",
        help="an NSS key log (SSLKEYLOGFILE format) to decrypt TLS connections with (repeatable; "
        "added to [tls] keylog_files); refused when its group or others may read it",
    )
    ing.add_argument(
        "--tls-keylog-insecure-ok",
        action="store_true",
        help="read key logs even when their group or others may read them",
    )
    ing.add_argument(
        "-q", "--quiet", action="store_true", help="no Spark progress bar (drawn only on a terminal)"
    )
    ing.set_defaults(func=cmd_ingest)

    sq = _command(
        sub,
        "sql",
        help="run SQL over the lake's tables: a query, -f FILE.sql or standard input, several "
        "statements separated by ;",
    )
    sq.add_argument("query", nargs="?", help="the SQL; - (or none, with input piped in) reads standard input")
    sq.add_argument("-f", "--file", help="read the SQL from this file")
    common(sq)
    output(sq, export.FORMATS)
    sq.add_argument(
        "--out",
        metavar="FILE",
        help="write the result to FILE (several results: FILE's name numbered, res-1.csv, res-2.csv, ...)",
    )
    sq.add_argument("--limit", type=_rows, help="at most this many rows per result (0: none)")
    sq.set_defaults(func=cmd_sql)

    sh = _command(sub, "shell", help="interactive SQL over the lake on one Spark session")
    common(sh)
    output(sh, export.TEXT_FORMATS)
    sh.set_defaults(func=cmd_shell)

    tb = _command(sub, "tables", help="list the lake's tables: rows, Delta version, size")
    common(tb)
    tb.add_argument("--format", choices=export.TEXT_FORMATS, default="table")
    tb.set_defaults(func=cmd_tables)

    ex = _command(
        sub,
        "extract",
        help="write the packets of connections, frames or a time window to a pcapng/pcap for Wireshark",
    )
    common(ex)
    ex.add_argument("-o", "--out", required=True, help="file to write: .pcapng (default format) or .pcap")
    ex.add_argument("--conn-id", action="append", help="a connection (conn_id of any table; repeatable)")
    ex.add_argument("--capture-id", action="append", help="every connection of a capture (repeatable)")
    ex.add_argument(
        "--frames",
        action="append",
        metavar="N-M",
        help="with one --capture-id: the packets numbered N to M in its file (a row's first_frame and "
        "last_frame, Wireshark's frame.number; repeatable, N-M,K,...)",
    )
    ex.add_argument(
        "--frame", action="append", metavar="N", help="with one --capture-id: packet N (repeatable)"
    )
    filter_flags(
        ex,
        "of the connections or captures chosen, keep a packet when its capture time is in [--since, "
        "--until) and either endpoint matches a --host (if given) and either TCP port is a --tcp-port",
    )
    ex.set_defaults(func=cmd_extract)

    rp = _command(
        sub,
        "report",
        help="write one self-contained HTML page of plots over the lake (no network needed to open it)",
    )
    common(rp)
    rp.add_argument("-o", "--out", default="report.html", help="the HTML file to write (default report.html)")
    where = rp.add_argument_group("scope", "restrict every chart to some rows (the flags combine with AND)")
    where.add_argument(
        "--capture-id",
        action="append",
        metavar="ID",
        help="rows of this capture (inputs.capture_id; repeatable)",
    )
    where.add_argument(
        "--since",
        metavar="TIME",
        help="rows from this capture time on (ISO 8601, no zone: UTC; or epoch seconds)",
    )
    where.add_argument("--until", metavar="TIME", help="rows before this capture time")
    where.add_argument(
        "--topic",
        action="append",
        metavar="NAME",
        help="rows of this topic (repeatable); connections that carried it",
    )
    rp.set_defaults(func=cmd_report)

    rc = _command(sub, "recover", help="finish runs that were killed midway, remove their leftovers")
    common(rc)
    rc.set_defaults(func=cmd_recover)

    op = _command(sub, "optimize", help="compact every table's small files (delta-rs optimize)")
    common(op)
    op.add_argument("--target-size", help="file size to compact to (default lake.target_file_size, 128MiB)")
    op.set_defaults(func=cmd_optimize)

    va = _command(sub, "vacuum", help="delete data files the tables no longer reference (delta-rs vacuum)")
    common(va)
    va.add_argument(
        "--retain-hours",
        type=_hours,
        help="keep files unreferenced for less than this (default lake.vacuum_retain_hours, 168)",
    )
    va.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    va.set_defaults(func=cmd_vacuum)

    dm = _command(sub, "demo", help="ingest the bundled sample data and run an example query")
    common(dm)
    dm.add_argument("--sample-data", help="directory to ingest (default: the repository's sample_data/)")
    dm.add_argument(
        "-q", "--quiet", action="store_true", help="no Spark progress bar (drawn only on a terminal)"
    )
    dm.set_defaults(func=cmd_demo, port=None, split_size=None, payload=None)
    return p


_prog = "brokerscope"  # how the command's messages start (stopped_by_signals)
_told = False  # a signal while stopping was told to wait


def _stopping() -> None:
    """From the first Ctrl-C or SIGTERM on, later ones wait for the clean-up (report.STOPPING):
    both handled by _on_signal, Ctrl-C too if Python's own handler raised the first."""
    global _told
    if not report.STOPPING.is_set():
        _told = False
        report.STOPPING.set()
    _handle(signal.SIGINT)
    _handle(signal.SIGTERM)


def _on_signal(signum, frame) -> None:
    """SIGTERM, and SIGINT once Spark runs: Spark's jobs are cancelled from another thread (the
    main thread's py4j connection is the call interrupted: PySpark's own SIGINT handler cancels
    on it and fails, 'reentrant call'), and the command stops as on Ctrl-C. Once: a signal while
    the command cleans up after one is told to wait (a second Ctrl-C broke the clean-up)."""
    global _told
    if report.STOPPING.is_set():
        if not _told:
            _told = True
            print(f"{_prog}: stopping, cleaning up (a moment)", file=sys.stderr, flush=True)
        return
    _stopping()
    sc = _active_context()
    if sc is not None:
        threading.Thread(target=_cancel_jobs, args=(sc,), name="brokerscope-cancel", daemon=True).start()
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _cancel_jobs(sc) -> None:
    try:
        sc.cancelAllJobs()
    except Exception:  # noqa: BLE001 - a JVM already gone has no jobs
        pass


def _active_context():
    """The running SparkContext, or None (PySpark not even imported)."""
    context = sys.modules.get("pyspark.core.context")
    return context.SparkContext._active_spark_context if context else None


def _stop_spark() -> None:
    """Stop the running SparkContext: its cancelled tasks end before the JVM does, and what they
    log as they are killed (stack traces, 'Python worker exited unexpectedly') is not shown."""
    sc = _active_context()
    if sc is not None:
        try:
            sc.setLogLevel("OFF")
            sc.stop()
        except Exception:  # noqa: BLE001 - a JVM already gone: nothing to stop
            pass


def _handle(sig: int) -> None:
    try:
        signal.signal(sig, _on_signal)
    except ValueError:  # not the main thread (main() called from a thread): the default stays
        pass


def _restore(handlers: dict) -> None:
    """The signal handlers as they were before main (main called in a process that goes on)."""
    for sig, h in handlers.items():
        try:
            signal.signal(sig, h)
        except (ValueError, TypeError):  # not the main thread; a handler not set from Python
            pass


def _chain(e: BaseException | None, most: int = 10):
    """`e` and the exceptions it was raised from or while handling (not past `from None`)."""
    while e is not None and most:
        yield e
        e, most = e.__cause__ or (None if e.__suppress_context__ else e.__context__), most - 1


def _interrupt_in(e: BaseException | None) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM (Terminated) `e` is or was raised while handling: an interrupted
    py4j call can fail again as PySpark tidies up after it (a call on a connection the JVM
    closed), and that error is the interrupt's."""
    return next((x for x in _chain(e) if isinstance(x, KeyboardInterrupt)), None)


def _not_an_interrupt_in_py4j(record: logging.LogRecord) -> bool:
    """False for py4j's traceback of the interrupted call (Ctrl-C, SIGTERM), of the call
    PySpark's own SIGINT handler makes on that call's connection ('reentrant call': its handler
    is in place from SparkContext's start until spark_started), and of any call failing while
    the command stops on a signal (a socket py4j shuts down after the interrupted call, the jobs
    cancelled from another thread as the JVM goes): one line says it."""
    if f"{os.sep}py4j{os.sep}" not in record.pathname or not record.exc_info:
        return True
    if report.STOPPING.is_set():
        return False
    return not any(
        isinstance(x, KeyboardInterrupt) or (isinstance(x, RuntimeError) and "reentrant call" in str(x))
        for x in _chain(record.exc_info[1])
    )


# where py4j logs its tracebacks: the root logger itself (logging.exception) and its modules'
# loggers (logger.exception); a logger's filters see only the records logged to it, not those of
# its children, whatever handlers there are then
PY4J_LOGGERS = ("", "py4j.clientserver", "py4j.java_gateway")


def quiet_py4j_interrupts() -> None:
    """Filter py4j's tracebacks of an interrupted call (_not_an_interrupt_in_py4j) out of every
    logger py4j logs them to."""
    for name in PY4J_LOGGERS:
        logging.getLogger(name).addFilter(_not_an_interrupt_in_py4j)


def stopped_by_signals(run: Callable[[], int], prog: str = "brokerscope") -> int:
    """run(), with SIGTERM (and SIGINT, once `spark_started` took it from PySpark) stopping it as
    an exception, so that what is under way cleans up as on any failure: `prog: interrupted
    (SIGINT|SIGTERM)` and EXIT_INTERRUPTED / EXIT_TERMINATED, a session it started stopped, the
    signal handlers left as they were."""
    quiet_py4j_interrupts()
    global _prog
    _prog = prog
    spark_before = _active_context() is not None  # called in a process that has a session
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    _handle(signal.SIGTERM)
    stopped = False
    try:
        return run()
    except BaseException as e:  # Ctrl-C or SIGTERM: what the run staged is removed by now
        stop = _interrupt_in(e)
        if stop is None:
            raise
        _stopping()
        stopped = True
        term = isinstance(stop, Terminated)
        print(f"{prog}: interrupted ({'SIGTERM' if term else 'SIGINT'})", file=sys.stderr)
        if not spark_before:  # a session this command started; not one it was given
            _stop_spark()
        return EXIT_TERMINATED if term else EXIT_INTERRUPTED
    finally:
        # a command stopped by a signal in a process of its own is ending, its clean-up done: one
        # more signal would kill it on its way out (-2, not 130; Python's exit puts the default
        # handlers back, but leaves ignored signals ignored); a caller that goes on gets its own
        if stopped and not spark_before:
            _restore(dict.fromkeys(handlers, signal.SIG_IGN))
        else:
            _restore(handlers)
            report.STOPPING.clear()


def spark_started() -> None:
    """SIGINT to stopped_by_signals' handler once a SparkContext exists (it set PySpark's own)."""
    _handle(signal.SIGINT)


def _run(args) -> int:
    """The command, then the class archive its JVM writes (classcache.finish) waited for, also
    after a failure, but not after Ctrl-C or SIGTERM; one of those while it is waited for stops
    the wait (stopped_by_signals, whose handlers are still in place)."""
    try:
        rc = int(args.func(args) or 0)
    except BaseException as e:
        _finish_class_cache(interrupted=_interrupt_in(e) is not None)
        raise
    _finish_class_cache(interrupted=False)
    return rc


def _finish_class_cache(interrupted: bool) -> None:
    pipeline = sys.modules.get("brokerscope.pipeline")  # imported by the commands that use Spark
    if pipeline and interrupted:
        pipeline.drop_class_cache()  # not waited for: its JVM writes it as it exits, unpublished
    elif pipeline:
        pipeline.finish_class_cache(lambda m: print(f"brokerscope: {m}", file=sys.stderr))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return stopped_by_signals(lambda: _run(args))
    except (FileNotFoundError, ValueError) as e:  # UsageError, bad settings, a bad lake path
        text = str(e)
        if isinstance(e, FileNotFoundError) and os.path.isabs(text) and not os.path.exists(text):
            text = f"no such file: {text}"  # pyarrow's, which names the path alone
        print(f"brokerscope: {text}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `brokerscope sql ... | head` read what it wanted: no traceback
        try:  # the interpreter's last flush of stdout would fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except Exception as e:
        why = no_room(e)
        if why is None:
            raise
        print(
            f"brokerscope: {why}: the command stopped (the lake stays readable: a run cut short "
            "while committing is finished by the next command on it)",
            file=sys.stderr,
        )
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
