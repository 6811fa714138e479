"""Kafka decoding throughput: records decoded per second.

    python bench/kafka_bench.py [--conns 8] [--exchanges 100] [--records 200] [--codec lz4] [--keep]
    python bench/kafka_bench.py --records 40 --rounds 5 --cpu-only      # CPU seconds, medians
    python bench/kafka_bench.py --records 40 --exchanges 50 --callgrind  # instructions per record

Writes a synthetic capture (tests/support/synth.py framing: Ethernet/IPv4/TCP, handshakes, MSS
segments) whose connections alternate Produce v9 requests/responses and Fetch v12
requests/responses; every Produce carries one v2 batch of `--records` records and every Fetch
response delivers one, built with kafka-python's record builder and protocol classes. Then it
measures, on the same bytes:

- decoder alone: each connection's TCP payload fed straight into KafkaConversation (no capture
  parsing, no reassembly): the schema-driven decoder, record batches and row building; CPU
  seconds (time.process_time), the median of --rounds runs in this process;
- decode task: what one pipeline decode task does in process (bench/message_bench.py's
  decode_task: read the splits, sort the packets, StreamDriver, rows conformed to Arrow batches;
  no Spark, no Parquet), CPU seconds, median of --rounds;
- Spark-free pipeline: `brokerscope.streams.decode_files` (capture reading, TCP reassembly,
  detection, decoding, conforming rows to the table schemas);
- tshark, when installed: `tshark -r CAPTURE -d tcp.port==9092,kafka -V` (full dissection of
  every field, printed to /dev/null), the closest equivalent of decoding every field.

- Spark pipeline: `pipeline.ingest` into a temporary lake (JVM and Python worker start-up
  excluded), unless --no-spark.

--callgrind runs the decoder alone and the decode task under `valgrind --tool=callgrind`, each at
--exchanges and at twice that, and reports (instructions at 2N - at N) / (records at 2N - at N):
the cost of one more record, start-up and imports taken out (as message_bench.py --callgrind).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from brokerscope import tables  # noqa: E402
from brokerscope.protocols import base  # noqa: E402
from brokerscope.protocols.kafka import KafkaConversation  # noqa: E402
from tests.support import synth  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from tests.unit.kafka import kit as kafka_kit  # noqa: E402

CODECS = {"none": 0, "gzip": 1, "lz4": 3, "zstd": 4}


VERSIONS = {"current": (9, 12), "tshark": (7, 11)}  # (Produce, Fetch): tshark 4.0 decodes only the older


def make_payloads(n_records: int, codec: str, versions: str = "current"):
    """(request, response) for exchange i: even i Produce, odd i Fetch; cached per parity."""
    pv, fv = VERSIONS[versions]
    msgs = [
        (f"key-{j % 17}".encode(), (f"value {j} " + "x" * (40 + j % 60)).encode(), [("h", b"v")])
        for j in range(n_records)
    ]
    recs = kafka_kit.records(msgs, 2, CODECS[codec])
    produce = (
        kafka_kit.produce_request(pv, "bench", 0, recs, corr=1),
        kafka_kit.produce_response(pv, "bench", 0, 1000),
    )
    fetch = (
        kafka_kit.fetch_request(fv, "bench", 0, 0, corr=2),
        kafka_kit.fetch_response(fv, "bench", 0, recs, corr=2),
    )

    def payloads(conn: int, i: int) -> tuple[bytes, bytes]:
        req, resp = produce if i % 2 == 0 else fetch
        corr = (i + 1).to_bytes(4, "big")
        # correlation id at bytes 8..12 of a request frame, 4..8 of a response frame
        return req[:8] + corr + req[12:], resp[:4] + corr + resp[8:]

    return payloads


def decoder_alone(payloads, conns: int, exchanges: int) -> tuple[float, int]:
    """CPU seconds and message rows for feeding every connection's payload to the decoder."""
    streams = []
    for c in range(conns):
        pairs = [payloads(c, i) for i in range(exchanges)]
        streams.append(pairs)
    rows = 0
    t0 = time.process_time()
    for c, pairs in enumerate(streams):
        conv = KafkaConversation(
            base.ConnInfo(f"c{c}", "10.0.0.1", 1000 + c, "10.0.0.2", 9092), base.Context()
        )
        ts = 1_700_000_000_000_000_000
        for req, resp in pairs:
            ts += 1000
            for t, r in conv.feed(base.C2S, req, ts):
                rows += _messages(t, r)
            ts += 1000
            for t, r in conv.feed(base.S2C, resp, ts):
                rows += _messages(t, r)
        for t, r in conv.close():
            rows += _messages(t, r)
    return time.process_time() - t0, rows


def _messages(table: str, row) -> int:
    """Messages rows in one decoder output (a tables.Block holds a batch's records)."""
    return tables.size(row) if table == "messages" else 0


def decode_task(path: str) -> tuple[float, int]:
    """CPU seconds and message rows of one decode task's work on `path`, in process."""
    from message_bench import decode_task as task

    t0 = time.process_time()
    counts = task([path])
    return time.process_time() - t0, counts["messages"]


def median_rate(run, rounds: int) -> tuple[float, int, list[float]]:
    """Records per CPU second (median of `rounds` runs of `run`, after one to warm up), records,
    CPU seconds of each run."""
    run()
    times, n = [], 0
    for _ in range(rounds):
        secs, n = run()
        times.append(secs)
    return n / statistics.median(times), n, times


def write_capture(path: str, payloads, conns: int, exchanges: int) -> dict:
    """The synthetic capture of `exchanges` exchanges on each of `conns` connections."""
    return synth.write_capture(
        path, n_conns=conns, exchanges=exchanges, payloads=payloads, server_port=9092, mss=16384
    )


def callgrind(a: argparse.Namespace) -> None:
    """Instructions per record at the margin of the decoder alone and of the decode task: each run
    under callgrind at --exchanges and twice that (the captures written outside valgrind)."""
    from message_bench import under_callgrind

    out_dir = tempfile.mkdtemp(prefix="kafka_bench_cg_")
    payloads = make_payloads(a.records, a.codec, a.versions)
    shape = [
        "--conns",
        str(a.conns),
        "--records",
        str(a.records),
        "--codec",
        a.codec,
        "--versions",
        a.versions,
    ]
    for part in ("decoder", "task"):
        runs = []
        for n in (a.exchanges, 2 * a.exchanges):
            cap = os.path.join(out_dir, f"capture.{n}.pcap")
            if part == "task" and not os.path.exists(cap):
                write_capture(cap, payloads, a.conns, n)
            out = os.path.join(out_dir, f"callgrind.{part}.{n}.out")
            args = [__file__, *shape, "--exchanges", str(n), "--once", part, "--capture", cap]
            recs, instr = under_callgrind(args, out, "records")
            runs.append((recs, instr))
            print(f"{part} x{n} exchanges: {recs:,} records, {instr:,} instructions (whole process)")
        (r1, i1), (r2, i2) = runs
        print(f"{part}: instructions per record (2N - N): {(i2 - i1) / (r2 - r1):,.0f}")
    shutil.rmtree(out_dir, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conns", type=int, default=8)
    ap.add_argument("--exchanges", type=int, default=100)
    ap.add_argument("--records", type=int, default=200)
    ap.add_argument("--codec", choices=sorted(CODECS), default="lz4")
    ap.add_argument(
        "--versions",
        choices=sorted(VERSIONS),
        default="current",
        help="current: Produce v9 / Fetch v12 (flexible, as today's clients send; tshark 4.0 cannot "
        "decode them); tshark: Produce v7 / Fetch v11, which tshark 4.0 dissects fully",
    )
    ap.add_argument("--keep", action="store_true", help="keep the capture and print its path")
    ap.add_argument("--no-spark", action="store_true", help="skip the Spark pipeline run")
    ap.add_argument("--master", default="local[*]", help="Spark master for the pipeline run")
    ap.add_argument(
        "--rounds", type=int, default=1, help="CPU-time runs of the decoder and the task (median)"
    )
    ap.add_argument("--callgrind", action="store_true", help="instructions per record under callgrind")
    ap.add_argument(
        "--once", choices=("decoder", "task"), help="one run, print its records (what --callgrind runs)"
    )
    ap.add_argument("--capture", help="with --once task: a capture this script wrote")
    ap.add_argument(
        "--cpu-only", action="store_true", help="only the CPU-time runs (no decode_files, Spark, tshark)"
    )
    a = ap.parse_args()
    if a.callgrind:
        callgrind(a)
        return
    payloads = make_payloads(a.records, a.codec, a.versions)
    if a.once == "decoder":
        print(f"records {decoder_alone(payloads, a.conns, a.exchanges)[1]}")
        return
    if a.once == "task":
        print(f"records {decode_task(a.capture)[1]}")
        return

    fd, path = tempfile.mkstemp(suffix=".pcap", prefix="kafka_bench_")
    os.close(fd)
    info = write_capture(path, payloads, a.conns, a.exchanges)
    expected = a.conns * a.exchanges * a.records  # produced + delivered records
    size_mb = os.path.getsize(path) / 1e6
    print(
        f"capture: {path if a.keep else '(temporary)'} {size_mb:.1f} MB, {info['packets']:,} packets, "
        f"{a.conns} connections, {expected:,} records ({a.codec}, Produce v{VERSIONS[a.versions][0]}, "
        f"Fetch v{VERSIONS[a.versions][1]})"
    )

    rate, rows, times = median_rate(lambda: decoder_alone(payloads, a.conns, a.exchanges), a.rounds)
    assert rows == expected, (rows, expected)
    cpu = ", ".join(f"{t:.2f}" for t in times)
    print(f"decoder alone:        {rate:>12,.0f} records per CPU s  (CPU s: {cpu})")
    rate, rows, times = median_rate(lambda: decode_task(path), a.rounds)
    assert rows == expected, (rows, expected)
    cpu = ", ".join(f"{t:.2f}" for t in times)
    print(
        f"decode task:          {rate:>12,.0f} records per CPU s  (CPU s: {cpu}; read, sort, decode, conform)"
    )
    if a.cpu_only:
        os.unlink(path)
        return

    from brokerscope.streams import decode_files

    t0 = time.perf_counter()
    out = decode_files([path])
    secs_p = time.perf_counter() - t0
    n = len(out["messages"])
    assert n == expected, (n, expected)
    bad = sum(r["decode_status"] != "ok" for r in out["commands"])
    print(f"Spark-free pipeline:  {n / secs_p:>12,.0f} records/s  ({secs_p:.2f} s, {bad} frames not ok)")

    if not a.no_spark:
        from read_bench import pipeline_run

        res, secs_s = pipeline_run(path, a.master)
        n = res["rows"]["messages"]
        assert n == expected, (n, expected)
        print(
            f"Spark pipeline:       {n / secs_s:>12,.0f} records/s  ({secs_s:.2f} s, {a.master}, ingest into Delta)"
        )

    tshark = shutil.which("tshark")
    if tshark:
        t0 = time.perf_counter()
        subprocess.run(
            [tshark, "-r", path, "-d", "tcp.port==9092,kafka", "-V"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        secs_t = time.perf_counter() - t0
        note = "" if a.versions == "tshark" else "; tshark 4.0 cannot decode these versions: no record read"
        print(
            f"tshark -V:            {expected / secs_t:>12,.0f} records/s  ({secs_t:.2f} s, same capture{note})"
        )
    else:
        print("tshark: not installed (apt-get install tshark for the comparison)")
    if not a.keep:
        os.unlink(path)


if __name__ == "__main__":
    main()
