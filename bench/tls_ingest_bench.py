"""Decrypted decode throughput next to the same traffic in clear, through the whole Spark-free
decode (`streams.decode_files`: capture reader, TCP reassembly, TLS, Kafka decoder, rows).

    python bench/tls_ingest_bench.py [--messages 600] [--value-kib 8] [--runs tls13 tls12cbc]

Records one real kafka-python run per TLS setup (tests/support/make_tls_kafka.py: loopback
capture, root needed): the client <-> TLS proxy leg and the proxy <-> broker leg carry the same
Kafka bytes, so the clear leg is the same traffic in clear. Each leg is decoded (with the
client's key log for the TLS leg, and again without it), timed in this process's CPU time
(the machine may be shared), the median of --repeat decodes after a warm-up. Prints MB of TCP
payload per CPU second for each.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from brokerscope.config import Settings  # noqa: E402
from brokerscope.streams import decode_files  # noqa: E402
from tests.support import make_tls_kafka  # noqa: E402


def timed(path: Path, keylogs: list[str], repeat: int) -> tuple[float, float, dict]:
    """Median CPU and wall seconds of `repeat` decodes, and the rows of the last."""
    cpus, walls = [], []
    for _ in range(repeat):
        settings = Settings.load(overrides={"tls": {"keylog_files": keylogs}})
        c0, w0 = time.process_time(), time.perf_counter()
        out = decode_files([str(path)], settings)
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
    return statistics.median(cpus), statistics.median(walls), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=600)
    ap.add_argument("--value-kib", type=int, default=8)
    ap.add_argument("--runs", nargs="+", default=list(make_tls_kafka.RUNS))
    ap.add_argument("--repeat", type=int, default=5, help="decodes per leg (the median is printed)")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tls-bench-"))
    try:
        for run in a.runs:
            make_tls_kafka.record(
                run, **make_tls_kafka.RUNS[run], out=tmp, n=a.messages, value_size=a.value_kib * 1024
            )
            keys = tmp / f"kafka_{run}_keys.log"
            os.chmod(keys, 0o600)
            decode_files([str(tmp / f"kafka_{run}_clear.pcap")], Settings.load())  # warm-up: imports, specs
            for leg, keylogs in (("clear", []), ("tls", [str(keys)]), ("tls", [])):
                path = tmp / f"kafka_{run}_{leg}.pcap"
                cpu, wall, out = timed(path, keylogs, a.repeat)
                payload = sum(r["c2s_bytes"] + r["s2c_bytes"] for r in out["streams"])
                label = f"{run} {leg}" + (" (no key)" if leg == "tls" and not keylogs else "")
                print(
                    f"{label:24} {payload / 1e6:7.1f} MB payload  {len(out['messages']):6} messages  "
                    f"cpu {cpu:6.2f} s  {payload / 1e6 / cpu:6.1f} MB/s cpu  (wall {wall:6.2f} s)",
                    flush=True,
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
