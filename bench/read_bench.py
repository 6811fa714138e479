"""Packet-stage and whole-pipeline throughput, printed against references measured in the same run.

    python bench/read_bench.py CAPTURE [--no-spark] [--master local[2]]
    python bench/read_bench.py --generate 120          # a 120 MB synthetic capture in /tmp

References: the floor (a plain `struct` walk over the same file's record headers, no parsing) and,
where installed, `tshark -q -z conv,tcp` on the same file. Reports packets/s, MB/s, the ratio of
each stage to the floor, and the peak resident memory (this process plus every descendant: the
Spark JVM and its Python workers), sampled every 0.2 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class PeakRss:
    """Peak of the summed RSS of this process and all its descendants."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _tree_rss(root: int) -> int:
        children: dict[int, list[int]] = {}
        rss: dict[int, int] = {}
        page = os.sysconf("SC_PAGE_SIZE")
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as fh:
                    parts = fh.read().rsplit(")", 1)[1].split()
                children.setdefault(int(parts[1]), []).append(int(d))
                rss[int(d)] = int(parts[21]) * page
            except (OSError, IndexError, ValueError):
                continue
        total, todo = 0, [root]
        while todo:
            p = todo.pop()
            total += rss.get(p, 0)
            todo.extend(children.get(p, []))
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._tree_rss(os.getpid()))
            time.sleep(0.2)

    def __enter__(self) -> PeakRss:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self._tree_rss(os.getpid()))


def floor_scan(path: str) -> tuple[int, float]:
    """Count records by walking headers only (pcap records or pcapng blocks): the I/O floor."""
    t0 = time.perf_counter()
    n = 0
    with open(path, "rb") as fh:
        data = fh.read()
    magic = data[:4]
    if magic == b"\x0a\x0d\x0d\x0a":
        bo = "<" if data[8:12] == b"\x4d\x3c\x2b\x1a" else ">"
        blk = struct.Struct(bo + "II")
        off = 0
        while off + 8 <= len(data):
            btype, blen = blk.unpack_from(data, off)
            if blen < 12:
                break
            n += btype in (6, 3, 2)
            off += blen
    else:
        bo = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        rec = struct.Struct(bo + "IIII")
        off = 24
        size = len(data)
        while off + 16 <= size:
            caplen = rec.unpack_from(data, off)[2]
            off += 16 + caplen
            n += 1
    return n, time.perf_counter() - t0


def packet_stage(path: str, split_size: int) -> tuple[int, float]:
    from brokerscope import capture

    t0 = time.perf_counter()
    kind = capture.identify(path)
    cid = capture.capture_id(path)
    n = 0
    for sp in capture.plan_splits(path, 0, cid, kind, split_size):
        for b in capture.read_split(sp):
            n += b.num_rows
    return n - len(capture.plan_splits(path, 0, cid, kind, split_size)), time.perf_counter() - t0


def pipeline_run(path: str, master: str) -> tuple[dict, float]:
    from brokerscope.config import Settings
    from brokerscope.pipeline import ingest, make_spark

    lake = tempfile.mkdtemp(prefix="bench-lake-")
    settings = Settings.load(overrides={"lake": {"path": lake}, "spark": {"master": master}})
    spark = make_spark(settings, quiet_progress=True)
    # start-up is not part of the measurement: the JVM, and a Python worker on every core
    n = spark.sparkContext.defaultParallelism
    spark.range(0, n, 1, n).mapInArrow(lambda it: it, "id long").collect()
    t0 = time.perf_counter()
    summary = ingest([path], settings, spark=spark)
    dt = time.perf_counter() - t0
    spark.stop()
    shutil.rmtree(lake, ignore_errors=True)
    return {"packets": summary.packets, "rows": summary.rows}, dt


def tshark_time(path: str) -> float | None:
    if not shutil.which("tshark"):
        return None
    t0 = time.perf_counter()
    subprocess.run(["tshark", "-r", path, "-q", "-z", "conv,tcp"], capture_output=True, check=False)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", nargs="?")
    ap.add_argument("--generate", type=int, metavar="MB", help="write a synthetic capture of this size first")
    ap.add_argument("--no-spark", action="store_true", help="skip the whole-pipeline run")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--split-size", default="128MiB")
    a = ap.parse_args()
    from brokerscope.config import parse_size

    if a.generate:
        from tests.support.synth import write_capture

        path = os.path.join(tempfile.gettempdir(), f"brokerscope-bench-{a.generate}MB.pcap")
        if not os.path.exists(path) or os.path.getsize(path) < a.generate * 1e6:
            write_capture(path, exchanges=40, target_bytes=a.generate * 1_000_000)
    elif a.capture:
        path = a.capture
    else:
        ap.error("give a CAPTURE or --generate MB")
    size_mb = os.path.getsize(path) / 1e6
    print(f"capture: {path} ({size_mb:.1f} MB)")
    with PeakRss() as mem:
        n_floor, t_floor = floor_scan(path)
        n_pk, t_pk = packet_stage(path, parse_size(a.split_size))
        res = None
        if not a.no_spark:
            res, t_pipe = pipeline_run(path, a.master)
    t_ts = tshark_time(path)

    def line(name: str, n: int, t: float) -> str:
        return (
            f"{name:<28} {t:8.2f} s {n / t:12,.0f} pkt/s {size_mb / t:8.1f} MB/s   x{t / t_floor:7.1f} floor"
        )

    print(line("floor (struct header walk)", n_floor, t_floor))
    print(line("packet stage (1 core)", n_pk, t_pk))
    if res is not None:
        print(line(f"whole pipeline ({a.master})", res["packets"], t_pipe))
        print("  rows: " + ", ".join(f"{k}={v:,}" for k, v in res["rows"].items()))
    if t_ts is not None:
        print(
            f"{'tshark -z conv,tcp':<28} {t_ts:8.2f} s {n_floor / t_ts:12,.0f} pkt/s {size_mb / t_ts:8.1f} MB/s"
            f"   x{t_ts / t_floor:7.1f} floor"
        )
        if res is not None:
            print(f"whole pipeline / tshark: {t_pipe / t_ts:.2f}")
    print(f"peak RSS (this process + Spark JVM + Python workers): {mem.peak / 2**20:,.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
