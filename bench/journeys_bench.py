"""Journeys computation time against the whole ingest, on real client traffic (root: loopback capture).

    sudo .venv/bin/python bench/journeys_bench.py [--messages 50000] [--groups 3]
        [--master 'local[2]'] [--keep DIR]

confluent-kafka produces `--messages` keyed messages to librdkafka's mock cluster (a topic it
creates with its default 4 partitions), then `--groups`
consumer groups (each with its own client id) read all of them and commit; the traffic is
captured on loopback (tests/support/loopcap.py). The capture is ingested with journeys on
(`pipeline.ingest`, Spark start-up excluded), and the journeys step is timed inside that run
(`Lake.commit_derived`: reading the run's rows back, computing, committing), and so is the lag
step, next to the whole ingest. Then `journeys.compute` alone is timed again on the committed lake.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from brokerscope import journeys, pipeline  # noqa: E402
from brokerscope.config import Settings  # noqa: E402
from brokerscope.lake import Lake  # noqa: E402
from tests.support.kafkamock import mock_producer  # noqa: E402
from tests.support.loopcap import LoopbackCapture, _tcp_ports, write_pcap  # noqa: E402

TOPIC = "bench-journeys"


def record(out: Path, messages: int, groups: int) -> Path:
    from confluent_kafka import Consumer

    with LoopbackCapture(str(out / "all.pcap"), ports=None, settle_s=0.3) as cap:
        p, port = mock_producer("bench-producer", linger_ms=20)
        for i in range(messages):
            while True:
                try:
                    p.produce(TOPIC, key=f"key-{i % 1000}".encode(), value=f"message {i} ".encode() * 6)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
        assert p.flush(60) == 0
        for g in range(groups):
            c = Consumer(
                {
                    "bootstrap.servers": f"127.0.0.1:{port}",
                    "group.id": f"bench-group-{g}",
                    "client.id": f"bench-consumer-{g}",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "enable.metrics.push": False,
                }
            )
            c.subscribe([TOPIC])
            got, end = 0, time.time() + 120
            while got < messages and time.time() < end:
                batch = c.consume(1000, 0.5)
                got += sum(1 for m in batch if not m.error())
            c.commit(asynchronous=False)
            c.close()
            print(f"group {g}: {got:,} messages", flush=True)
        del p
    frames = [(ts, f) for ts, f in cap.frames if (pp := _tcp_ports(f)) and port in pp]
    pcap = out / "journeys.pcap"
    write_pcap(str(pcap), frames)
    return pcap


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--keep", help="keep the capture and lake in this directory")
    args = ap.parse_args()
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="journeys-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    pcap = record(tmp, args.messages, args.groups)
    print(f"capture: {pcap.stat().st_size / 1e6:.1f} MB", flush=True)

    settings = Settings.load(
        overrides={
            "lake": {"path": str(tmp / "lake")},
            "spark": {"master": args.master},
            "journeys": {"enabled": True},
            "lag": {"enabled": True},
        }
    )
    spent: dict[str, float] = {}
    real = Lake.commit_derived

    def timed(self, table, *a, **k):
        t0 = time.perf_counter()
        try:
            return real(self, table, *a, **k)
        finally:
            spent[table] = time.perf_counter() - t0

    Lake.commit_derived = timed
    spark = pipeline.make_spark(settings, quiet_progress=True)
    summary = pipeline.ingest([str(pcap)], settings, spark=spark)
    Lake.commit_derived = real
    rows = summary.rows
    print(f"rows: messages={rows['messages']:,} journeys={rows['journeys']:,} lag={rows['lag']:,}")
    print(
        f"whole ingest: {summary.seconds:.2f} s; inside it, journeys step: {spent['journeys']:.2f} s, "
        f"lag step: {spent['lag']:.2f} s"
    )
    ids = sorted(
        {r["capture_id"] for r in Lake(settings.lake_path).read_arrow("inputs").to_pylist()} - {None}
    )
    t0 = time.perf_counter()
    n = journeys.compute(settings.lake_path, ids).num_rows
    print(f"journeys.compute alone: {time.perf_counter() - t0:.2f} s for {n:,} rows")
    spark.stop()
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
