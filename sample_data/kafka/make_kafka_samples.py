#!/usr/bin/env python3
"""Record real Kafka client traffic against librdkafka's mock cluster, for tests and demos.

The mock cluster (`test.mock.num.brokers`, built into librdkafka, which confluent-kafka bundles)
serves the real Kafka protocol on 127.0.0.1 at an ephemeral port. Each run:
- a producer (which owns the mock cluster) produces keyed messages with headers, compressed with
  one codec; its delivery reports give the offsets;
- a consumer in a consumer group reads them from the earliest offset and commits synchronously;
- all TCP traffic on `lo` is captured (tests/support/loopcap.py, root needed) and then filtered
  to the mock broker's port, so unrelated loopback traffic never lands in the file.
Writes `<run>.pcap` and `<run>.json` (a manifest of what was produced and consumed, the truth the
tests compare the decoded tables with). Re-running regenerates every file.

Usage (as root): .venv/bin/python sample_data/kafka/make_kafka_samples.py [outdir]
"""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, KafkaException, Producer  # noqa: E402
from confluent_kafka import libversion as _libversion  # noqa: E402
from confluent_kafka import version as _version  # noqa: E402

from tests.support.loopcap import LoopbackCapture, _tcp_ports, write_pcap  # noqa: E402

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
N_MESSAGES = 12
# KIP-714 client telemetry (GetTelemetrySubscriptions, api key 71) is not in the message specs
# kafka-python ships, so it would be an `unknown_command` frame; the samples leave it off.
NO_TELEMETRY = {"enable.metrics.push": False}


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


def _msg(topic, partition, offset, key, value, headers) -> dict:
    return {
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "key": _b64(key),
        "value": _b64(value),
        "headers": [[k, _b64(v)] for k, v in (headers or [])],
    }


def _broker(p: Producer) -> tuple[str, int]:
    md = p.list_topics(timeout=10)
    b = next(iter(md.brokers.values()))
    return b.host, b.port


def _consume(
    bootstrap: str, topic: str, group: str, n: int, read_committed: bool = False, timeout_s: float = 30.0
) -> tuple[Consumer, list[dict]]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "fetch.wait.max.ms": 100,
            **NO_TELEMETRY,
        }
    )
    c.subscribe([topic])
    got: list[dict] = []
    end = time.time() + timeout_s
    while len(got) < n and time.time() < end:
        m = c.poll(0.2)
        if m is None or m.error():
            continue
        got.append(_msg(m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.headers()))
    return c, got


def _write(frames, port: int, pcap: Path) -> int:
    keep = [(ts, f) for ts, f in frames if (pp := _tcp_ports(f)) is not None and port in pp]
    write_pcap(str(pcap), keep)
    return len(keep)


def codec_run(codec: str, outdir: Path) -> dict:
    topic = f"bs-{codec}"
    tmp = tempfile.NamedTemporaryFile(suffix=".pcap", delete=False).name
    produced: list[dict] = []
    with LoopbackCapture(tmp, ports=None) as cap:
        p = Producer(
            {
                "test.mock.num.brokers": 1,
                "compression.type": codec,
                "linger.ms": 20,
                "client.id": f"bs-producer-{codec}",
                **NO_TELEMETRY,
            }
        )
        host, port = _broker(p)
        for i in range(N_MESSAGES):
            key = None if i % 5 == 4 else f"key-{i % 3}".encode()
            value = (f"{codec} message {i} " + "payload " * (16 + i % 4)).encode()  # compressible
            headers = [("trace", f"t{i}".encode()), ("trace", b"dup"), ("n", None)] if i % 2 == 0 else None
            # delivery reports do not carry headers: record the ones that were sent
            p.produce(
                topic,
                key=key,
                value=value,
                headers=headers,
                on_delivery=lambda err, m, h=headers: (
                    produced.append(_msg(m.topic(), m.partition(), m.offset(), m.key(), m.value(), h))
                    if err is None
                    else None
                ),
            )
        p.flush(15)
        c, consumed = _consume(f"{host}:{port}", topic, f"bs-group-{codec}", len(produced))
        c.commit(asynchronous=False)
        c.close()
        p.flush(5)
        del p
    n = _write(cap.frames, port, outdir / f"{codec}.pcap")
    os.unlink(tmp)
    return {
        "run": codec,
        "codec": codec,
        "topic": topic,
        "broker_port": port,
        "packets": n,
        "produced": produced,
        "consumed": consumed,
    }


def txn_run(outdir: Path) -> dict:
    """Transactions: a committed and an aborted transaction, then a read_committed consumer whose
    offsets are committed inside a third transaction (TxnOffsetCommit). Quirks of the mock cluster
    visible in this capture: control batches (transaction markers) carry a CRC of 0, and Fetch
    responses list no aborted transactions."""
    topic = "bs-txn"
    tmp = tempfile.NamedTemporaryFile(suffix=".pcap", delete=False).name
    produced: list[dict] = []
    aborted: list[dict] = []
    with LoopbackCapture(tmp, ports=None) as cap:
        p = Producer(
            {
                "test.mock.num.brokers": 1,
                "transactional.id": "bs-txn-1",
                "linger.ms": 10,
                "client.id": "bs-txn-producer",
                **NO_TELEMETRY,
            }
        )
        host, port = _broker(p)
        p.init_transactions(15)
        for txn, sink in ((0, produced), (1, aborted)):
            p.begin_transaction()
            for i in range(5 if txn == 0 else 3):
                key = f"txn{txn}-{i}".encode()
                value = f"transaction {txn} message {i}".encode()
                headers = [("txn", str(txn).encode())]
                p.produce(
                    topic,
                    key=key,
                    value=value,
                    headers=headers,
                    on_delivery=lambda err, m, sink=sink, h=headers: (
                        sink.append(_msg(m.topic(), m.partition(), m.offset(), m.key(), m.value(), h))
                        if err is None
                        else None
                    ),
                )
            p.flush(15)
            if txn == 0:
                p.commit_transaction(15)
            else:
                p.abort_transaction(15)
        # librdkafka's mock cluster sends no AbortedTransactions in Fetch responses, so even a
        # read_committed consumer receives the aborted messages: wait for all of them
        c, consumed = _consume(
            f"{host}:{port}", topic, "bs-txn-group", len(produced) + len(aborted), read_committed=True
        )
        # read-process-write: commit the consumer's positions inside a transaction
        p.begin_transaction()
        positions = c.position(c.assignment())
        p.send_offsets_to_transaction(positions, c.consumer_group_metadata(), 15)
        p.commit_transaction(15)
        c.close()
        del p
    n = _write(cap.frames, port, outdir / "txn.pcap")
    os.unlink(tmp)
    return {
        "run": "txn",
        "codec": "none",
        "topic": topic,
        "broker_port": port,
        "packets": n,
        "produced": produced,
        "aborted": aborted,
        "consumed": consumed,
        "committed_positions": [[tp.topic, tp.partition, tp.offset] for tp in positions],
    }


def main() -> None:
    outdir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    if os.geteuid() != 0:
        raise SystemExit("capturing on lo needs root")
    runs = [codec_run(c, outdir) for c in CODECS] + [txn_run(outdir)]
    for r in runs:
        r["client"] = {"confluent_kafka": _version()[0], "librdkafka": _libversion()[0]}
        (outdir / f"{r['run']}.json").write_text(json.dumps(r, indent=1) + "\n")
        print(
            f"{r['run']}: {len(r['produced'])} produced, {len(r['consumed'])} consumed, {r['packets']} packets"
        )


if __name__ == "__main__":
    try:
        main()
    except KafkaException as e:
        raise SystemExit(f"kafka error: {e}") from None
