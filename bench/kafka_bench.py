"""Kafka decoding throughput: records decoded per second.

    python bench/kafka_bench.py [--conns 8] [--exchanges 100] [--records 200] [--codec lz4] [--keep]

Writes a synthetic capture (tests/support/synth.py framing: Ethernet/IPv4/TCP, handshakes, MSS
segments) whose connections alternate Produce v9 requests/responses and Fetch v12
requests/responses; every Produce carries one v2 batch of `--records` records and every Fetch
response delivers one, built with kafka-python's record builder and protocol classes. Then it
measures, on the same bytes:

- decoder alone: each connection's TCP payload fed straight into KafkaConversation (no capture
  parsing, no reassembly): the schema-driven decoder, record batches and row building;
- Spark-free pipeline: `brokerscope.streams.decode_files` (capture reading, TCP reassembly,
  detection, decoding, conforming rows to the table schemas);
- tshark, when installed: `tshark -r CAPTURE -d tcp.port==9092,kafka -V` (full dissection of
  every field, printed to /dev/null), the closest equivalent of decoding every field.

- Spark pipeline: `pipeline.ingest` into a temporary lake (JVM and Python worker start-up
  excluded), unless --no-spark.
"""

from __future__ import annotations

import argparse
import os
import shutil
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
    """Seconds and message rows for feeding every connection's payload to the decoder."""
    streams = []
    for c in range(conns):
        pairs = [payloads(c, i) for i in range(exchanges)]
        streams.append(pairs)
    rows = 0
    t0 = time.perf_counter()
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
    return time.perf_counter() - t0, rows


def _messages(table: str, row) -> int:
    """Messages rows in one decoder output (a tables.Block holds a batch's records)."""
    return tables.size(row) if table == "messages" else 0


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
    a = ap.parse_args()

    payloads = make_payloads(a.records, a.codec, a.versions)
    fd, path = tempfile.mkstemp(suffix=".pcap", prefix="kafka_bench_")
    os.close(fd)
    info = synth.write_capture(
        path, n_conns=a.conns, exchanges=a.exchanges, payloads=payloads, server_port=9092, mss=16384
    )
    expected = a.conns * a.exchanges * a.records  # produced + delivered records
    size_mb = os.path.getsize(path) / 1e6
    print(
        f"capture: {path if a.keep else '(temporary)'} {size_mb:.1f} MB, {info['packets']:,} packets, "
        f"{a.conns} connections, {expected:,} records ({a.codec}, Produce v{VERSIONS[a.versions][0]}, "
        f"Fetch v{VERSIONS[a.versions][1]})"
    )

    secs, rows = decoder_alone(payloads, a.conns, a.exchanges)
    assert rows == expected, (rows, expected)
    print(f"decoder alone:        {rows / secs:>12,.0f} records/s  ({secs:.2f} s)")

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
