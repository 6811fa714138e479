"""Queries per minute: ten README queries through one `brokerscope sql -f FILE.sql` against ten
separate `brokerscope sql "..."` calls.

    python bench/sql_bench.py                       # a lake of sample_data/, local[2], 3 rounds
    python bench/sql_bench.py --lake lake --rounds 5 --master 'local[*]'

The queries are the README's ```sql blocks, read as tests/integration/test_readme_queries.py
reads them (tests/support/readme.py: statements split at `;`, `--` comment lines dropped); the first --queries of them
are taken. Without --lake, a lake is made in a temporary directory by `brokerscope ingest` of the
capture and segment files under sample_data/ (not timed).

Each round runs both variants as a user would, in subprocesses of the `brokerscope` command of
this interpreter's installation: the queries in one SQL file (one JVM, one Spark session, the
statements in turn) and each query as its own command (a JVM each). The order of the two
alternates from round to round so that load from elsewhere falls on both. Every result is
written with `--format csv --out` (numbered files for the -f run) and the two variants' results
are compared: the same header and the same rows (as a multiset: a query without a total ORDER
BY may list rows in another order). A warm-up call before the first round makes sure the JVM's
class archive (classcache.py) exists, so no round pays for writing it.

Prints the wall time of each variant per round, the medians, queries per minute from the
medians, their ratio, the load average before and after, and whether the results agreed.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SAMPLE_DATA = ROOT / "sample_data"

from tests.support.readme import readme_queries  # noqa: E402  (the README's queries, as the tests read them)


def brokerscope_cmd() -> list[str]:
    """The `brokerscope` command of this interpreter's installation."""
    script = Path(sys.prefix) / "bin" / "brokerscope"
    return [str(script)] if script.exists() else [sys.executable, "-m", "brokerscope.cli"]


def run(cmd: list[str], what: str, ok=(0,)) -> float:
    """Run cmd, fail loudly unless its exit code is in `ok`; wall seconds."""
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    dt = time.perf_counter() - t
    if p.returncode not in ok:
        sys.exit(f"{what} failed (exit {p.returncode}): {shlex.join(cmd)[:300]}\n{p.stderr[-3000:]}")
    return dt


def make_lake(lake: Path, master: str) -> None:
    """The capture and segment files of sample_data/ ingested into `lake` (their notes and
    scripts beside them are not inputs), with --journeys: the README queries read that table too."""
    from brokerscope import inputs

    paths = [i.path for i in inputs.discover([str(SAMPLE_DATA)]).inputs]
    secs = run(
        brokerscope_cmd() + ["ingest", *paths, "--lake", str(lake), "--master", master, "--journeys", "-q"],
        "ingest of sample_data/",
        ok=(0, 3),
    )
    print(f"lake: {len(paths)} sample inputs ingested into {lake} in {secs:.1f} s")


def one_file(queries: list[str], lake: Path, master: str, out: Path) -> float:
    """The queries in one SQL file, one `brokerscope sql -f`; results in out/r-<i>.csv."""
    out.mkdir()
    sql = out / "queries.sql"
    sql.write_text(";\n\n".join(queries) + ";\n")
    cmd = brokerscope_cmd() + ["sql", "-f", str(sql), "--lake", str(lake), "--master", master]
    return run(cmd + ["--format", "csv", "--out", str(out / "r.csv")], "sql -f")


def separate(queries: list[str], lake: Path, master: str, out: Path) -> float:
    """Each query as its own `brokerscope sql "..."`; results in out/r-<i>.csv."""
    out.mkdir()
    total = 0.0
    for i, q in enumerate(queries, 1):
        cmd = brokerscope_cmd() + ["sql", q, "--lake", str(lake), "--master", master]
        total += run(cmd + ["--format", "csv", "--out", str(out / f"r-{i}.csv")], f"query {i}")
    return total


def results(out: Path, n: int) -> list[tuple[str, list[str]]]:
    """Each result's header and its other lines, sorted (the same multiset of CSV rows)."""
    got = []
    for i in range(1, n + 1):
        lines = (out / f"r-{i}.csv").read_text().splitlines()
        got.append((lines[0] if lines else "", sorted(lines[1:])))
    return got


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lake", help="an existing lake (default: sample_data/ ingested into a temporary one)")
    ap.add_argument("--queries", type=int, default=10, help="how many README queries (default 10)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    a = ap.parse_args()

    queries = readme_queries()[: a.queries]
    if len(queries) < a.queries:
        sys.exit(f"the README has {len(queries)} queries, fewer than --queries {a.queries}")
    tmp = Path(tempfile.mkdtemp(prefix="sql_bench_"))
    try:
        lake = Path(a.lake) if a.lake else tmp / "lake"
        if not a.lake:
            make_lake(lake, a.master)
        java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
        print(
            f"machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"{java[0] if java else 'java ?'}, master {a.master}"
        )
        print(f"{len(queries)} README queries:")
        for i, q in enumerate(queries, 1):
            print(f"  {i:2}. {' '.join(q.split())[:96]}")
        # the class archive is written by the first local JVM on a machine: not in any round
        warm = run(
            brokerscope_cmd() + ["sql", "SELECT 1", "--lake", str(lake), "--master", a.master], "warm-up"
        )
        print(f"warm-up call: {warm:.1f} s")

        times: dict[str, list[float]] = {"file": [], "separate": []}
        agree = True
        for r in range(a.rounds):
            order = ("file", "separate") if r % 2 == 0 else ("separate", "file")
            before = load()
            got = {}
            for variant in order:
                out = tmp / f"round{r}-{variant}"
                fn = one_file if variant == "file" else separate
                times[variant].append(fn(queries, lake, a.master, out))
                got[variant] = results(out, len(queries))
            same = got["file"] == got["separate"]
            agree &= same
            if not same:
                bad = [i + 1 for i, (x, y) in enumerate(zip(got["file"], got["separate"])) if x != y]
                print(f"  round {r + 1}: results differ in queries {bad}")
            print(
                f"round {r + 1} ({order[0]} first): sql -f {times['file'][-1]:6.1f} s, "
                f"{len(queries)} x sql {times['separate'][-1]:6.1f} s   load {before} -> {load()}"
            )
            for variant in order:
                shutil.rmtree(tmp / f"round{r}-{variant}")

        n = len(queries)
        mf, ms = statistics.median(times["file"]), statistics.median(times["separate"])
        qf, qs = n * 60 / mf, n * 60 / ms
        rows = sum(len(rows) for _, rows in got["file"])
        print(f"\nmedians of {a.rounds} rounds, {n} queries ({rows:,} result rows):")
        print(f"  sql -f FILE.sql (one JVM)   {mf:7.1f} s  {qf:6.1f} queries/min")
        print(f"  {n} separate sql calls      {ms:7.1f} s  {qs:6.1f} queries/min  ({ms / n:.1f} s a call)")
        print(f"  ratio: sql -f runs {qf / qs:.1f}x the queries per minute")
        print(f"  results: {'the same in every round' if agree else 'DIFFERENT (see above)'}")
        return 0 if agree else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
