"""Whole-pipeline throughput on real client traffic, multiplied.

    python bench/pipeline_bench.py sample_data/pulsar/pulsar_lz4_batch.pcap --copies 200

Takes a capture of real traffic (e.g. the sample captures), writes N copies of every connection
into one pcap (client port shifted per copy, times shifted so copies follow each other), then
measures on that file:

- Spark-free: `streams.decode_files` (capture reading, reassembly, decoding, conforming rows);
- Spark pipeline: `pipeline.ingest` into a temporary lake (JVM and Python worker start-up excluded);
- the floor: a plain struct walk over the file's record headers.

Prints messages/s and frames/s for each, with the ratio to the floor.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from read_bench import floor_scan, pipeline_run  # noqa: E402


def multiply(src: str, dst: str, copies: int) -> int:
    """Write `copies` copies of every TCP packet of `src` into a nanosecond pcap `dst`; each copy
    moves the non-broker port (the higher one) by copy index and follows the previous copy in time."""
    from scapy.all import Ether, rdpcap
    from scapy.layers.inet import IP, TCP

    pkts = [p for p in rdpcap(src) if p.haslayer(TCP) and p.haslayer(IP)]
    t0 = float(pkts[0].time)
    span = float(pkts[-1].time) - t0 + 1.0
    n = 0
    with open(dst, "wb") as fh:
        fh.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1))
        for k in range(copies):
            for p in pkts:
                q = Ether(bytes(p)) if p.haslayer(Ether) else Ether() / p[IP]
                tcp = q[TCP]
                if tcp.sport > tcp.dport:
                    tcp.sport = (tcp.sport + k) % 65536 or 1
                else:
                    tcp.dport = (tcp.dport + k) % 65536 or 1
                del tcp.chksum
                raw = bytes(q)
                ts = int((float(p.time) + k * span) * 1e9)
                fh.write(struct.pack("<IIII", ts // 10**9, ts % 10**9, len(raw), len(raw)))
                fh.write(raw)
                n += 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture")
    ap.add_argument("--copies", type=int, default=100)
    ap.add_argument("--master", default="local[*]")
    a = ap.parse_args()
    fd, path = tempfile.mkstemp(suffix=".pcap", prefix="pipeline_bench_")
    os.close(fd)
    try:
        packets = multiply(a.capture, path, a.copies)
        size_mb = os.path.getsize(path) / 1e6
        print(f"capture: {a.capture} x{a.copies}: {packets:,} packets, {size_mb:.1f} MB")
        n_floor, t_floor = floor_scan(path)
        from brokerscope.streams import decode_files

        t = time.perf_counter()
        out = decode_files([path])
        t_local = time.perf_counter() - t
        msgs, frames = len(out["messages"]), len(out["commands"])
        print(
            f"{'Spark-free decode_files':<26} {t_local:8.2f} s {msgs / t_local:10,.0f} msg/s "
            f"{frames / t_local:10,.0f} frames/s   x{t_local / t_floor:7.1f} floor"
        )
        res, t_pipe = pipeline_run(path, a.master)
        assert res["rows"]["messages"] == msgs, (res["rows"], msgs)
        print(
            f"{'Spark pipeline ' + a.master:<26} {t_pipe:8.2f} s {msgs / t_pipe:10,.0f} msg/s "
            f"{frames / t_pipe:10,.0f} frames/s   x{t_pipe / t_floor:7.1f} floor"
        )
        print(f"{'floor (struct header walk)':<26} {t_floor:8.2f} s ({n_floor:,} records)")
    finally:
        os.unlink(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
