"""Decrypted ingest throughput next to the same traffic in clear, in one run.

    sudo .venv/bin/python bench/tls_ingest_bench.py [--messages 6000] [--value-kib 8]
        [--runs tls13 tls12cbc] [--repeat 3] [--master 'local[2]'] [--no-spark] [--no-decode]

Records one real kafka-python run per TLS setup (tests/support/make_tls_kafka.py: loopback
capture, root needed): the client <-> TLS proxy leg and the proxy <-> broker leg carry the same
Kafka bytes, so the clear leg is the same traffic in clear. Then, for each setup, the legs are
measured in turn, alternating (clear, TLS with the client's key log, TLS without it) `--repeat`
times after a warm-up, at two levels:

- spark: `pipeline.ingest` (what `brokerscope ingest` runs, with `--tls-keylog` for the TLS leg)
  on one Spark session (its start-up not counted), each ingest into a new lake: CPU seconds of
  this process and every process under it (the JVM, PySpark's workers: /proc sampled every
  0.1 s, so a worker that ends counts up to its last sample);
- decode: `streams.decode_files` in this process (capture reader, reassembly, TLS, Kafka
  decoder, rows; no Spark), its CPU time.

Prints, per leg, MB of TCP payload per CPU second (MB/s per core), the medians, and the ratio
TLS / clear of each level. CPU time, not wall time: the machine may be shared. Checks that each
level gave the TLS leg with keys the clear leg's messages rows (produced and delivered), and
the TLS leg without keys none.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from brokerscope.config import Settings  # noqa: E402
from brokerscope.streams import decode_files  # noqa: E402
from tests.support import make_tls_kafka  # noqa: E402

LEGS = (("clear", False), ("tls", True), ("tls", False))  # (capture leg, with its key log)


class TreeCpu:
    """CPU seconds used by this process and its descendants while open: every descendant's
    utime + stime sampled every 0.1 s (the last sample of one that ends stands for it; PySpark's
    daemon reaps its workers without adding their time to anyone's children's time)."""

    def __init__(self) -> None:
        self.seen: dict[int, float] = {}
        self.start: dict[int, float] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._own = 0.0
        self._sampling = 0.0  # the sampler's own CPU time, not counted
        self.cpu = 0.0

    @staticmethod
    def descendants() -> dict[int, float]:
        """pid -> CPU seconds of every process under this one (not this one)."""
        hz, procs = os.sysconf("SC_CLK_TCK"), {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as fh:
                        f = fh.read().rsplit(")", 1)[1].split()
                    procs[int(d)] = (int(f[1]), (int(f[11]) + int(f[12])) / hz)  # ppid, utime + stime
                except (OSError, IndexError, ValueError):
                    continue
        kids: dict[int, list[int]] = {}
        for pid, (ppid, _cpu) in procs.items():
            kids.setdefault(ppid, []).append(pid)
        out, todo = {}, list(kids.get(os.getpid(), []))
        while todo:
            pid = todo.pop()
            out[pid] = procs[pid][1]
            todo += kids.get(pid, [])
        return out

    def _run(self) -> None:
        t0 = time.thread_time()
        while not self._stop.wait(0.1):
            self.seen.update(self.descendants())
        self._sampling = time.thread_time() - t0

    def __enter__(self) -> TreeCpu:
        self.start = self.descendants()
        self.seen = dict(self.start)
        self._own = time.process_time()
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()
        self.seen.update(self.descendants())
        own = time.process_time() - self._own - self._sampling
        self.cpu = own + sum(c - self.start.get(pid, 0.0) for pid, c in self.seen.items())


def payload_mb(path: Path) -> float:
    """MB of TCP payload in the capture (both directions, every connection)."""
    out = decode_files([str(path)], Settings.load())
    return sum(r["c2s_bytes"] + r["s2c_bytes"] for r in out["streams"]) / 1e6


def decode_cpu(path: Path, keylogs: list[str]) -> tuple[float, int]:
    """CPU seconds of one decode_files in this process, and the messages it decoded."""
    settings = Settings.load(overrides={"tls": {"keylog_files": keylogs}})
    c0 = time.process_time()
    out = decode_files([str(path)], settings)
    return time.process_time() - c0, len(out["messages"])


def spark_cpu(spark, master: str, path: Path, keylogs: list[str], lake: Path) -> tuple[float, float, int]:
    """Tree CPU seconds and wall seconds of one `pipeline.ingest` into a new lake, and the
    messages rows it committed."""
    from deltalake import DeltaTable

    from brokerscope import pipeline, report

    settings = Settings.load(
        overrides={
            "lake": {"path": str(lake)},
            "spark": {"master": master},
            "tls": {"keylog_files": keylogs},
        }
    )
    w0 = time.perf_counter()
    with TreeCpu() as tree:
        summary = pipeline.ingest([str(path)], settings, spark=spark, progress=lambda m: None)
    wall = time.perf_counter() - w0
    assert summary.exit_code() == report.EXIT_OK, summary
    return tree.cpu, wall, DeltaTable(str(lake / "messages")).to_pyarrow_dataset().count_rows()


def label(leg: str, keyed: bool) -> str:
    return leg if leg == "clear" else ("tls" if keyed else "tls (no key)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=6000)
    ap.add_argument("--value-kib", type=int, default=8)
    ap.add_argument("--runs", nargs="+", default=list(make_tls_kafka.RUNS))
    ap.add_argument("--repeat", type=int, default=3, help="rounds of the alternation (medians printed)")
    ap.add_argument("--master", default="local[2]", help="Spark master of the spark level")
    ap.add_argument("--no-spark", action="store_true", help="the decode level only")
    ap.add_argument("--no-decode", action="store_true", help="the spark level only")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tls-bench-"))
    spark = None
    try:
        if not a.no_spark:
            from brokerscope import pipeline

            spark = pipeline.make_spark(
                Settings.load(overrides={"spark": {"master": a.master}}), quiet_progress=True
            )
        for run in a.runs:
            make_tls_kafka.record(
                run, **make_tls_kafka.RUNS[run], out=tmp, n=a.messages, value_size=a.value_kib * 1024
            )
            keys = tmp / f"kafka_{run}_keys.log"
            os.chmod(keys, 0o600)
            legs = [
                (leg, keyed, tmp / f"kafka_{run}_{leg}.pcap", [str(keys)] if keyed else [])
                for leg, keyed in LEGS
            ]
            mb = {label(leg, k): payload_mb(p) for leg, k, p, _ in legs}
            levels = [lv for lv, off in (("spark", a.no_spark), ("decode", a.no_decode)) if not off]
            cpu: dict[tuple[str, str], list[float]] = {}
            wall: dict[str, list[float]] = {}
            rows: dict[tuple[str, str], set[int]] = {}  # messages rows: the TLS leg's must be the clear's
            for rnd in range(a.repeat + 1):  # round 0: warm-up (imports, specs, JIT, workers)
                for leg, keyed, path, keylogs in legs:
                    name = label(leg, keyed)
                    if "spark" in levels:
                        lake = tmp / f"lake-{run}-{rnd}-{name}"
                        c, w, n = spark_cpu(spark, a.master, path, keylogs, lake)
                        shutil.rmtree(lake)
                        rows.setdefault(("spark", name), set()).add(n)
                        if rnd:
                            cpu.setdefault(("spark", name), []).append(c)
                            wall.setdefault(name, []).append(w)
                    if "decode" in levels:
                        c, n = decode_cpu(path, keylogs)
                        rows.setdefault(("decode", name), set()).add(n)
                        if rnd:
                            cpu.setdefault(("decode", name), []).append(c)
            for level in levels:  # the TLS leg with keys gave the clear leg's messages, without none
                want = {2 * a.messages}  # produced and delivered
                assert rows[level, "clear"] == rows[level, "tls"] == want, rows
                assert rows[level, "tls (no key)"] == {0}, rows
            print(
                f"\n{run}: {a.messages} messages of {a.value_kib} KiB, TCP payload MB: "
                + ", ".join(f"{k} {v:.1f}" for k, v in mb.items())
            )
            for level in levels:
                med = {name: statistics.median(cpu[level, name]) for name in mb}
                for name in mb:
                    extra = f"  wall {statistics.median(wall[name]):6.2f} s" if level == "spark" else ""
                    print(
                        f"  {level:6} {name:13} cpu {med[name]:7.2f} s  {mb[name] / med[name]:6.1f} MB/s per core"
                        f"  (runs: {', '.join(f'{c:.2f}' for c in cpu[level, name])}){extra}",
                        flush=True,
                    )
                ratio = (mb["tls"] / med["tls"]) / (mb["clear"] / med["clear"])
                print(f"  {level:6} TLS / clear throughput per core: {ratio:.2f}")
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
