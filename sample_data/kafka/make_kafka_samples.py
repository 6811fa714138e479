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

Also writes `segments/bs-segment-0/`: a partition's log as the broker stores it (batches of
every codec, fetched back raw) with its `.index` and `.timeindex`, and `segment.json`.

Usage (as root): .venv/bin/python sample_data/kafka/make_kafka_samples.py [outdir [run ...]]
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
# The codec runs leave KIP-714 client telemetry off, so that they hold the classic APIs only; the
# "kip848" run turns it on and uses the KIP-848 consumer protocol (ConsumerGroupHeartbeat).
NO_TELEMETRY = {"enable.metrics.push": False}
KIP848 = {"enable.metrics.push": True, "group.protocol": "consumer"}


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
    bootstrap: str,
    topic: str,
    group: str,
    n: int,
    read_committed: bool = False,
    timeout_s: float = 30.0,
    conf: dict | None = None,
) -> tuple[Consumer, list[dict]]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if read_committed else "read_uncommitted",
            "fetch.wait.max.ms": 100,
            **(conf or NO_TELEMETRY),
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


def _finish(cap, tmp: str, port: int, outdir: Path, run: str, codec: str, topic: str, **rest) -> dict:
    """Write `<run>.pcap` (the mock broker's traffic only) and return the run's manifest."""
    n = _write(cap.frames, port, outdir / f"{run}.pcap")
    os.unlink(tmp)
    return {"run": run, "codec": codec, "topic": topic, "broker_port": port, "packets": n, **rest}


def codec_run(codec: str, outdir: Path, run: str | None = None, conf: dict | None = None) -> dict:
    """One producer and one consumer group; `conf` (default NO_TELEMETRY) goes to both clients."""
    run = run or codec
    conf = conf or NO_TELEMETRY
    topic = f"bs-{run}"
    tmp = tempfile.NamedTemporaryFile(suffix=".pcap", delete=False).name
    produced: list[dict] = []
    with LoopbackCapture(tmp, ports=None) as cap:
        p = Producer(
            {
                "test.mock.num.brokers": 1,
                "compression.type": codec,
                "linger.ms": 20,
                "client.id": f"bs-producer-{run}",
                "enable.metrics.push": conf.get("enable.metrics.push", False),
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
        c, consumed = _consume(f"{host}:{port}", topic, f"bs-group-{run}", len(produced), conf=conf)
        c.commit(asynchronous=False)
        c.close()
        p.flush(5)
        del p
    return _finish(cap, tmp, port, outdir, run, codec, topic, produced=produced, consumed=consumed)


def share_run(outdir: Path) -> dict:
    """A KIP-932 share group: a share consumer (explicit acknowledgement) joins group
    `bs-share-group`, then 12 messages are produced; it accepts them, except one it rejects and
    one it releases once (redelivered, then accepted). A share group starts at the latest offset,
    so the warm-up message produced before the consumer joined is not delivered."""
    from confluent_kafka import AcknowledgeType, ShareConsumer

    topic = "bs-share"
    tmp = tempfile.NamedTemporaryFile(suffix=".pcap", delete=False).name
    produced: list[dict] = []
    consumed: list[dict] = []
    acks: list[dict] = []
    report = lambda err, m: (  # noqa: E731
        produced.append(_msg(m.topic(), m.partition(), m.offset(), m.key(), m.value(), None))
        if err is None
        else None
    )
    with LoopbackCapture(tmp, ports=None) as cap:
        p = Producer({"test.mock.num.brokers": 1, "client.id": "bs-share-producer", **NO_TELEMETRY})
        host, port = _broker(p)
        p.produce(
            topic, key=b"warm-up", value=b"before the share consumer joined", partition=0, on_delivery=report
        )
        p.flush(10)
        c = ShareConsumer(
            {
                "bootstrap.servers": f"{host}:{port}",
                "group.id": "bs-share-group",
                "share.acknowledgement.mode": "explicit",
                **NO_TELEMETRY,
            }
        )
        c.subscribe([topic])
        for _ in range(6):  # join the group and get the assignment
            list(c.poll(0.5))
        for i in range(N_MESSAGES):
            p.produce(
                topic, key=f"q{i}".encode(), value=f"queued {i}".encode(), partition=i % 2, on_delivery=report
            )
        p.flush(10)
        released = False
        end = time.time() + 30
        while len({(a["partition"], a["offset"]) for a in acks if a["type"] != "release"}) < N_MESSAGES:
            if time.time() > end:
                raise SystemExit("share run: not every message was acknowledged in 30 s")
            for m in c.poll(0.5):
                if m.error():
                    continue
                consumed.append(_msg(m.topic(), m.partition(), m.offset(), m.key(), m.value(), None))
                if m.key() == b"q3":
                    kind = "reject"
                elif m.key() == b"q5" and not released:
                    kind, released = "release", True
                else:
                    kind = "accept"
                c.acknowledge(m, getattr(AcknowledgeType, kind.upper()))
                acks.append({"partition": m.partition(), "offset": m.offset(), "type": kind})
        c.commit_sync()
        c.close()
        del p
    return _finish(
        cap, tmp, port, outdir, "share", "none", topic, produced=produced, consumed=consumed, share_acks=acks
    )


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
    return _finish(
        cap,
        tmp,
        port,
        outdir,
        "txn",
        "none",
        topic,
        produced=produced,
        aborted=aborted,
        consumed=consumed,
        committed_positions=[[tp.topic, tp.partition, tp.offset] for tp in positions],
    )


def _fetch_log(host: str, port: int, topic: str, partition: int) -> bytes:
    """The partition's stored batches, fetched from the broker with plain Fetch v4 requests
    (built and parsed by kafka-python's protocol classes) over a raw socket, from offset 0 until
    the broker has nothing more (the mock broker returns one batch per Fetch)."""
    import socket
    import struct

    from kafka.protocol.consumer import FetchRequest, FetchResponse

    F = FetchRequest
    log = b""
    offset = 0
    with socket.create_connection((host, port), timeout=10) as s:
        for corr in range(1, 1000):
            req = F(
                version=4,
                replica_id=-1,
                max_wait_ms=100,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                topics=[
                    F.FetchTopic(
                        version=4,
                        topic=topic,
                        partitions=[
                            F.FetchTopic.FetchPartition(
                                version=4,
                                partition=partition,
                                fetch_offset=offset,
                                partition_max_bytes=1 << 20,
                            )
                        ],
                    )
                ],
            )
            req.with_header(correlation_id=corr, client_id="bs-segment-dumper")
            s.sendall(bytes(req.encode(header=True, framed=True)))
            size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
            data = s.recv(size, socket.MSG_WAITALL)
            recs = bytes(FetchResponse.decode(data[4:], version=4).responses[0].partitions[0].records or b"")
            pos = 0
            while pos + 61 <= len(recs):  # whole batches only; each at or after `offset`
                base_offset, length = struct.unpack_from(">qi", recs, pos)
                if pos + 12 + length > len(recs):
                    break
                last = base_offset + struct.unpack_from(">i", recs, pos + 23)[0]
                if last >= offset:
                    log += recs[pos : pos + 12 + length]
                    offset = last + 1
                pos += 12 + length
            if pos == 0:
                return log
    return log


def _write_segment(log: bytes, d: Path, base: int = 0, interval: int = 512) -> None:
    """Write `log` as a broker segment: an offset index entry (last offset of a batch, its
    position) whenever `interval` bytes were appended since the last entry, and a time index
    entry whenever the largest timestamp so far grows, as Kafka's LogSegment does."""
    import struct

    d.mkdir(parents=True, exist_ok=True)
    idx, tidx = b"", b""
    pos, since, top = 0, interval, -1
    while pos + 61 <= len(log):
        base_offset, length = struct.unpack_from(">qi", log, pos)
        last_delta, _bt, max_ts = struct.unpack_from(">iqq", log, pos + 23)
        last = base_offset + last_delta
        if since >= interval:
            idx += struct.pack(">ii", last - base, pos)
            since = 0
        if max_ts > top:
            tidx += struct.pack(">qi", max_ts, last - base)
            top = max_ts
        since += 12 + length
        pos += 12 + length
    stem = d / f"{base:020d}"
    stem.with_suffix(".log").write_bytes(log[:pos])
    stem.with_suffix(".index").write_bytes(idx)
    stem.with_suffix(".timeindex").write_bytes(tidx)


def segment_run(outdir: Path) -> dict:
    """A partition log as the (mock) broker stores it: batches from producers using every codec,
    fetched back raw and written as a segment directory `segments/bs-segment-0/`."""
    topic = "bs-segment"
    produced: list[dict] = []
    owner = Producer({"test.mock.num.brokers": 1, "linger.ms": 5, **NO_TELEMETRY})
    host, port = _broker(owner)
    for codec in CODECS:
        p = (
            owner
            if codec == "none"
            else Producer(
                {
                    "bootstrap.servers": f"{host}:{port}",
                    "linger.ms": 5,
                    "compression.type": codec,
                    **NO_TELEMETRY,
                }
            )
        )
        for i in range(4):
            key = f"{codec}-{i}".encode()
            value = (f"{codec} stored message {i} " + "data " * 20).encode()
            headers = [("codec", codec.encode())]
            p.produce(
                topic,
                key=key,
                value=value,
                headers=headers,
                partition=0,
                on_delivery=lambda err, m, h=headers: (
                    produced.append(_msg(m.topic(), m.partition(), m.offset(), m.key(), m.value(), h))
                    if err is None
                    else None
                ),
            )
        p.flush(15)
    log = _fetch_log(host, port, topic, 0)
    _write_segment(log, outdir / "segments" / f"{topic}-0")
    return {
        "run": "segment",
        "codec": "mixed",
        "topic": topic,
        "broker_port": port,
        "packets": 0,
        "produced": produced,
        "consumed": [],
        "log_bytes": len(log),
    }


def main() -> None:
    outdir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    if os.geteuid() != 0:
        raise SystemExit("capturing on lo needs root")
    only = set(sys.argv[2:])  # optional run names, e.g. "segment"
    runs = [codec_run(c, outdir) for c in CODECS if not only or c in only]
    if not only or "kip848" in only:
        runs.append(codec_run("lz4", outdir, run="kip848", conf=KIP848))
    if not only or "txn" in only:
        runs.append(txn_run(outdir))
    if not only or "share" in only:
        runs.append(share_run(outdir))
    if not only or "segment" in only:
        runs.append(segment_run(outdir))
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
