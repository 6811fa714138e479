"""Nightly ingest for spark-submit: decode every capture/segment file under an input directory
that the lake has not ingested yet (same path, size and mtime), as one capture set.

    . .venv/bin/activate   # or PYSPARK_PYTHON=<venv>/bin/python: see README, "Running on a cluster"
    spark-submit --master spark://host:7077 --properties-file conf/spark-defaults.conf \
        --driver-java-options -Dlog4j2.configurationFile=conf/log4j2.properties \
        jobs/nightly_ingest.py --input /data/captures/2026-11-20 --lake /data/lake [--conf conf/brokerscope.toml] \
        [--exclude GLOB ...]

Exits as `brokerscope ingest` does (README, "Exit codes"): 0 every input read cleanly, 1 the run
failed, 2 bad arguments or lake path, 3 some inputs partial or rejected, 4 nothing ingested. The
files beside the captures (README, checksums, tool output) are skipped as `ingest` skips them,
not failures.
All logic lives in the brokerscope package; this file only parses arguments.
"""

from __future__ import annotations

import argparse
import sys

from brokerscope.cli import exclude_flag, spark_started, stopped_by_signals
from brokerscope.config import Settings
from brokerscope.lake import Lake
from brokerscope.pipeline import ingest, make_spark
from brokerscope.report import EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", required=True, action="append", help="input directory or glob (repeatable)")
    ap.add_argument("--lake", help="lake directory (default: lake.path from the config)")
    ap.add_argument("--conf", help="brokerscope TOML config")
    ap.add_argument("--reingest", action="store_true", help="decode inputs again even if already ingested")
    exclude_flag(ap)
    a = ap.parse_args(argv)
    try:
        settings = Settings.load(a.conf, {"lake": {"path": a.lake}} if a.lake else None)
        settings.raw["inputs"]["exclude"] += a.exclude or []
        Lake(settings.lake_path).check_writable()
        settings.load_tls_keys()  # [tls] keylog_files, read here on the driver
    except (ValueError, FileNotFoundError) as e:
        print(f"nightly_ingest: {e}", file=sys.stderr)
        return EXIT_USAGE

    def session():
        spark = make_spark(settings, app_name="brokerscope-nightly", quiet_progress=True)
        spark_started()
        return spark

    def run() -> int:
        summary = ingest(
            a.input,
            settings,
            progress=lambda m: print(m, flush=True),
            skip_ingested=not a.reingest,
            make_session=session,
        )
        for line in summary.lines():
            print(line)
        return summary.exit_code()

    # Ctrl-C and SIGTERM: exit 130 / 143 with one line, the run's staged files removed
    return stopped_by_signals(run, "nightly_ingest")


if __name__ == "__main__":
    from pyspark.sql import SparkSession

    rc = main()
    if SparkSession.getActiveSession() is not None:
        SparkSession.getActiveSession().stop()
    sys.exit(rc)
