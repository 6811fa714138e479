"""Make the Pulsar sample captures: the real pulsar-client library against tests/support/pulsar_sim.py.

Each capture is one client session on 127.0.0.1, recorded with tests/support/loopcap.py (root needed):
two producers (one with batching, one without) on two topics with one compression codec, then one
consumer per topic that receives everything and acknowledges it (individually, cumulatively, or
with batch-index acks). `chunked` uses chunking (a 4 KiB max message size advertised by the
simulator) instead. A JSON manifest per capture lists every message sent (topic, key, properties,
payload, the message id the client got back) and every message the consumers received.

    sudo .venv/bin/python sample_data/pulsar/make_pulsar_samples.py [OUT_DIR] [SCENARIO ...]

Defaults: OUT_DIR = this directory, every scenario. Rerunnable: files are overwritten.
"""

from __future__ import annotations

import base64
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

import pulsar  # noqa: E402

from tests.support.loopcap import LoopbackCapture  # noqa: E402
from tests.support.pulsar_sim import PulsarSim  # noqa: E402

CODECS = {
    "none": pulsar.CompressionType.NONE,
    "lz4": pulsar.CompressionType.LZ4,
    "zlib": pulsar.CompressionType.ZLib,
    "zstd": pulsar.CompressionType.ZSTD,
    "snappy": pulsar.CompressionType.SNAPPY,
}
# how each scenario's batched topic is acknowledged
ACK_MODE = {
    "none": "individual",
    "lz4": "cumulative",
    "zlib": "batch_index",
    "zstd": "individual",
    "snappy": "cumulative",
}
SCENARIOS = [*CODECS, "chunked", "encrypted"]
N_MESSAGES = 6


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


def _mid(m) -> dict:
    return {
        "ledger": m.ledger_id(),
        "entry": m.entry_id(),
        "batch_index": m.batch_index(),
        "partition": m.partition(),
    }


def _payload(tag: str, i: int, size: int = 0) -> bytes:
    head = f"{tag} message {i}: ".encode()
    if size:  # big messages are incompressible (seeded noise), so they stay big after compression
        return head + random.Random(f"{tag}{i}").randbytes(size - len(head))
    return head + b"pulsar payload compresses well " * 3


def _produce(
    client,
    topic: str,
    tag: str,
    batching: bool,
    codec,
    n: int,
    size: int = 0,
    chunking: bool = False,
    crypto=None,
) -> list[dict]:
    kw = {"batching_enabled": batching, "compression_type": codec, "send_timeout_millis": 5000}
    if crypto is not None:
        kw.update(encryption_key="brokerscope-test-key", crypto_key_reader=crypto)
    if batching:
        kw.update(batching_max_messages=n, batching_max_publish_delay_ms=50)
    if chunking:
        kw.update(chunking_enabled=True, batching_enabled=False)
    producer = client.create_producer(topic, producer_name=f"{tag}-producer", **kw)
    sent: list[dict] = []
    done = threading.Event()
    lock = threading.Lock()

    def callback(i):
        def cb(res, msg_id):
            with lock:
                sent[i]["result"] = str(res)
                sent[i]["message_id"] = _mid(msg_id)
                if all("result" in s for s in sent):
                    done.set()

        return cb

    for i in range(n):
        value = _payload(tag, i, size)
        props = {"idx": str(i), "tag": tag}
        key = f"key-{tag}-{i}" if i % 3 != 2 else None  # every third message has no key
        sent.append(
            {
                "topic": topic,
                "key": key,
                "properties": props,
                "value_b64": _b64(value),
                "producer": f"{tag}-producer",
            }
        )
        extra = {"event_timestamp": 1_700_000_000_000 + i} if i % 2 == 0 else {}
        producer.send_async(value, callback(i), properties=props, partition_key=key, **extra)
    producer.flush()
    done.wait(10)
    producer.close()
    return sent


def _consume(client, topic: str, sub: str, n: int, mode: str, crypto=None) -> list[dict]:
    extra = {"crypto_key_reader": crypto} if crypto is not None else {}
    consumer = client.subscribe(
        topic,
        sub,
        consumer_type=pulsar.ConsumerType.Shared if mode == "batch_index" else pulsar.ConsumerType.Exclusive,
        initial_position=pulsar.InitialPosition.Earliest,
        batch_index_ack_enabled=(mode == "batch_index"),
        receiver_queue_size=100,
        **extra,
    )
    got: list[dict] = []
    msgs = []
    for _ in range(n):
        m = consumer.receive(timeout_millis=5000)
        msgs.append(m)
        got.append(
            {
                "topic": m.topic_name(),
                "key": m.partition_key() or None,
                "properties": m.properties(),
                "value_b64": _b64(m.data()),
                "message_id": _mid(m.message_id()),
                "event_timestamp": m.event_timestamp(),
            }
        )
    if mode == "cumulative":
        consumer.acknowledge_cumulative(msgs[-1])
    elif mode == "batch_index":
        # half of each batch first, so a flush carries partial batch-index ack sets
        for m in msgs[: n // 2]:
            consumer.acknowledge(m)
        time.sleep(0.3)
        for m in msgs[n // 2 :]:
            consumer.acknowledge(m)
    else:
        for m in msgs:
            consumer.acknowledge(m)
    time.sleep(0.3)  # let the grouped acks go out before closing
    consumer.close()
    return got


def _rsa_keys(out_dir: Path) -> tuple[str, str]:
    """A throw-away RSA key pair (PEM) in a temporary directory; returns (public, private) paths."""
    d = Path(tempfile.mkdtemp(prefix="pulsar-keys-"))
    priv, pub = d / "private.pem", d / "public.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(priv), "2048"], check=True, capture_output=True)
    subprocess.run(
        ["openssl", "rsa", "-in", str(priv), "-pubout", "-out", str(pub)], check=True, capture_output=True
    )
    return str(pub), str(priv)


def run_scenario(name: str, out_dir: Path) -> dict:
    """Run one scenario under capture; write <out_dir>/pulsar_<name>.pcap and .json."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pcap = out_dir / f"pulsar_{name}.pcap"
    chunked = name == "chunked"
    sim = PulsarSim(
        max_message_size=4096 if chunked else 5 * 1024 * 1024,
        partitions={"public/default/none-partitioned": 2} if name == "none" else None,
    )
    manifest: dict = {
        "scenario": name,
        "client": f"pulsar-client {pulsar.__version__}",
        "sent": [],
        "received": [],
    }
    with sim, LoopbackCapture(str(pcap), ports={sim.port}):
        client = pulsar.Client(
            sim.url,
            operation_timeout_seconds=5,
            connection_timeout_ms=3000,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        try:
            if name == "encrypted":
                # end-to-end encryption: RSA key pair made for this run only (not kept)
                crypto = pulsar.CryptoKeyReader(*_rsa_keys(out_dir))
                topic = "persistent://public/default/encrypted"
                manifest["sent"] += _produce(
                    client, topic, "enc-plain", False, pulsar.CompressionType.LZ4, 2, crypto=crypto
                )
                manifest["sent"] += _produce(
                    client, topic, "enc-batched", True, pulsar.CompressionType.NONE, 4, crypto=crypto
                )
                manifest["received"] += _consume(client, topic, "enc-sub", 6, "individual", crypto=crypto)
            elif chunked:
                topic = "persistent://public/default/chunked"
                manifest["sent"] += _produce(
                    client,
                    topic,
                    "chunked",
                    False,
                    pulsar.CompressionType.ZSTD,
                    2,
                    size=10_000,
                    chunking=True,
                )
                manifest["sent"] += _produce(client, topic, "small", False, pulsar.CompressionType.LZ4, 2)
                manifest["received"] += _consume(client, topic, "chunk-sub", 4, "individual")
            else:
                codec = CODECS[name]
                t_plain = f"persistent://public/default/{name}-plain"
                t_batch = f"persistent://public/default/{name}-batched"
                manifest["sent"] += _produce(client, t_plain, f"{name}-plain", False, codec, N_MESSAGES)
                manifest["sent"] += _produce(client, t_batch, f"{name}-batched", True, codec, N_MESSAGES)
                manifest["received"] += _consume(
                    client, t_plain, f"{name}-plain-sub", N_MESSAGES, "individual"
                )
                manifest["received"] += _consume(
                    client, t_batch, f"{name}-batched-sub", N_MESSAGES, ACK_MODE[name]
                )
                manifest["ack_mode"] = {t_plain: "individual", t_batch: ACK_MODE[name]}
                if name == "none":
                    # a topic with two partitions: the client opens one producer / consumer per partition
                    t_part = "persistent://public/default/none-partitioned"
                    manifest["sent"] += _produce(client, t_part, "none-partitioned", False, codec, 4)
                    manifest["received"] += _consume(client, t_part, "none-partitioned-sub", 4, "individual")
        finally:
            client.close()
    manifest["simulator"] = {
        "sends": sim.log["sends"],
        "acks": sim.log["acks"],
        "commands": sorted(set(sim.log["commands"])),
    }
    (out_dir / f"pulsar_{name}.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main(argv: list[str]) -> None:
    out = Path(argv[0]) if argv else HERE
    names = argv[1:] or SCENARIOS
    for n in names:
        m = run_scenario(n, out)
        print(f"{n}: {len(m['sent'])} sent, {len(m['received'])} received -> {out / f'pulsar_{n}.pcap'}")


if __name__ == "__main__":
    main(sys.argv[1:])
