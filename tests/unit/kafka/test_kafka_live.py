"""A live capture: confluent-kafka (librdkafka) producing to its mock cluster on loopback,
recorded with tests/support/loopcap.py and decoded end to end. Needs root (AF_PACKET)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="live loopback capture needs root (AF_PACKET socket)"
)


def test_live_idempotent_producer(tmp_path):
    from confluent_kafka import Producer

    from brokerscope.streams import decode_files
    from tests.support.loopcap import LoopbackCapture, _tcp_ports, write_pcap

    sent, acked = [], []
    with LoopbackCapture(str(tmp_path / "all.pcap"), ports=None, settle_s=0.1) as cap:
        p = Producer(
            {
                "test.mock.num.brokers": 1,
                "enable.idempotence": True,
                "compression.type": "zstd",
                "linger.ms": 5,
                "enable.metrics.push": False,
                "client.id": "live-test",
            }
        )
        port = next(iter(p.list_topics(timeout=10).brokers.values())).port
        for i in range(7):
            kv = (f"k{i}".encode(), f"live value {i} ".encode() * 8)
            sent.append(kv)
            p.produce(
                "live",
                key=kv[0],
                value=kv[1],
                partition=i % 2,
                on_delivery=lambda e, m: (
                    acked.append((m.partition(), m.offset(), m.key())) if e is None else None
                ),
            )
        assert p.flush(10) == 0
        del p
    frames = [(ts, f) for ts, f in cap.frames if (pp := _tcp_ports(f)) and port in pp]
    write_pcap(str(tmp_path / "live.pcap"), frames)
    out = decode_files([str(tmp_path / "live.pcap")])
    assert all(c["decode_status"] == "ok" for c in out["commands"])
    produced = sorted(
        (m["partition"], m["offset"], m["key"]) for m in out["messages"] if m["direction"] == "produce"
    )
    assert produced == sorted(acked) and len(produced) == 7
    by_key = {m["key"]: m for m in out["messages"]}
    for k, v in sent:
        assert by_key[k]["value"] == v and by_key[k]["compression"] == "zstd"
        assert by_key[k]["producer_id"] >= 0 and by_key[k]["sequence"] >= 0  # idempotent producer state
    cmds = {c["command"] for c in out["commands"]}
    assert {"ApiVersions", "Metadata", "InitProducerId", "Produce"} <= cmds
