"""Record the real Iggy Python client (PyPI apache-iggy 0.9.0) against tests/support/iggy_sim.py.

Run from the project root as root (the loopback capture needs a raw socket):
    .venv/bin/python sample_data/iggy/make_iggy_samples.py
Writes sample_data/iggy/client_vsr.pcap and manifest.json (what was sent, what offsets were
stored), which the tests compare with what brokerscope decodes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import struct
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from apache_iggy import Consumer, IggyClient, PollingStrategy, SendMessage  # noqa: E402

from tests.support.iggy_sim import IggySim  # noqa: E402
from tests.support.loopcap import LoopbackCapture  # noqa: E402

OUT = os.path.dirname(os.path.abspath(__file__))
PASSWORD = "s3cret-sample-pw"
STREAM, TOPIC = "orders", "eu"
MESSAGES = [
    {"id": 1001, "payload": b"first order", "headers": {"source": "web", "retries": 0}},
    {"id": 1002, "payload": b"second order", "headers": {"source": "app", "vip": True}},
    {"id": 2**100 + 3, "payload": bytes(range(40)), "headers": None},
    {"id": 1004, "payload": "fourth \u00e9".encode(), "headers": {"amount": 12.5}},
]


def free_port(preferred: int = 8090) -> int:
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", preferred))
        return preferred
    except OSError:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


async def step(log: list, name: str, coro) -> object:
    try:
        r = await asyncio.wait_for(coro, 5)
        log.append({"step": name, "ok": True})
        return r
    except Exception as e:  # noqa: BLE001 - record what the client did, keep going
        log.append({"step": name, "ok": False, "error": repr(e)})
        return None


async def session(port: int, log: list) -> dict:
    c = IggyClient(f"127.0.0.1:{port}")
    await step(log, "connect", c.connect())
    await step(log, "login_user", c.login_user("iggy", PASSWORD))
    await step(log, "ping", c.ping())
    await step(log, "create_stream", c.create_stream(STREAM))
    await step(log, "create_topic", c.create_topic(STREAM, TOPIC, 1))
    msgs = [SendMessage(m["payload"], m["headers"], m["id"]) for m in MESSAGES]
    await step(log, "send_messages", c.send_messages(STREAM, TOPIC, 1, msgs))
    polled = await step(
        log,
        "poll_messages",
        c.poll_messages(
            STREAM,
            TOPIC,
            consumer=Consumer.Single(7),
            partition_id=1,
            polling_strategy=PollingStrategy.Offset(0),
            count=10,
            auto_commit=True,
        ),
    )
    # STORE_CONSUMER_OFFSET (121) in the 0.9-era layout: consumer 7, stream, topic, partition
    # flag + 1, offset 2, ack level quorum (the Python client has no store method)
    store = (
        b"\x01\x01\x04"
        + struct.pack("<I", 7)
        + b"\x02"
        + bytes([len(STREAM)])
        + STREAM.encode()
        + b"\x02"
        + bytes([len(TOPIC)])
        + TOPIC.encode()
        + b"\x01"
        + struct.pack("<I", 1)
        + struct.pack("<Q", 2)
        + b"\x01"
    )
    await step(log, "store_consumer_offset", c.send_binary_request(121, store))
    stream = await step(log, "get_stream", c.get_stream(STREAM))
    topic = await step(log, "get_topic", c.get_topic(STREAM, TOPIC))
    return {
        "polled": [
            {"id": m.id(), "offset": m.offset(), "payload": m.payload().hex()} for m in (polled or [])
        ],
        "stream": None
        if stream is None
        else {"id": stream.id, "name": stream.name, "topics": stream.topics_count},
        "topic": None
        if topic is None
        else {
            "id": topic.id,
            "name": topic.name,
            "partitions": topic.partitions_count,
            "messages": topic.messages_count,
            "options": {str(k): str(v) for k, v in topic.options.items()},
        },
    }


def main() -> None:
    port = free_port()
    path = os.path.join(OUT, "client_vsr.pcap")
    log: list = []
    with IggySim(port=port) as sim:
        with LoopbackCapture(path, ports={sim.port}):
            result = asyncio.run(session(sim.port, log))
            time.sleep(0.3)
        port = sim.port
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    manifest = {
        "client": "apache-iggy 0.9.0 (PyPI), Rust SDK 0.11.0 inside, VSR framing",
        "server": "tests/support/iggy_sim.py",
        "port": port,
        "files": {"client_vsr.pcap": {"sha256": digest, "bytes": os.path.getsize(path)}},
        "stream": STREAM,
        "topic": f"{STREAM}/{TOPIC}",
        "messages": [
            {
                "id": str(m["id"]),
                "payload": m["payload"].hex(),
                "header_keys": sorted((m["headers"] or {}).keys()),
            }
            for m in MESSAGES
        ],
        "stored_offsets": [{"consumer": "consumer:7", "partition": 1, "offset": 2, "ack_level": "quorum"}],
        "auto_commit_poll": {"consumer": "consumer:7", "last_offset": len(MESSAGES) - 1},
        "deliver_consumer": "consumer:7",
        "client_steps": log,
        "client_polled": result["polled"],
        "client_stream": result["stream"],
        "client_topic": result["topic"],
    }
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    print(json.dumps(log, indent=1))


if __name__ == "__main__":
    main()
