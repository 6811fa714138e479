"""Pulsar's lag rows from real traffic: the real pulsar-client produces and two subscriptions read
(`fast` acknowledges everything, `slow` its first two messages), against the project's simulator,
captured on loopback (root needed). pulsar-client cannot ask for a consumer's broker stats, so the
simulator's own client (tests/support/pulsar_sim.StatsClient) subscribes to both subscriptions on
a connection of its own and sends CONSUMER_STATS; the simulator answers with the backlog it
computes (the topic's messages no consumer of the subscription acknowledged). Two phases, moved
to consecutive minutes as in tests/integration/test_lag.py; decoded and written to a delta-rs
lake, then lag.compute: the rows must be the simulator's own backlog numbers."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from brokerscope import lag, tables
from brokerscope.streams import decode_files
from tests.integration.test_lag import MIN, S, _shifted
from tests.support.lakecheck import write_decoded

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="live loopback capture needs root (AF_PACKET socket)"
)

TOPIC = "persistent://public/default/lag"
PARTITIONED = "persistent://public/default/lag-parts"  # 2 partitions
FIRST, MORE = 6, 4  # messages produced in phase 0, then in phase 1
SLOW_ACKS = 2  # the slow subscription acknowledges its first two messages only


def _record(tmp: Path) -> dict:
    import pulsar

    from tests.support.loopcap import LoopbackCapture, write_pcap
    from tests.support.pulsar_sim import PulsarSim, StatsClient

    marks: list[int] = []
    stats: list[tuple] = []  # (phase, subscription, topic, backlog) as the simulator answered
    parts = PARTITIONED.split("://")[1]
    with (
        PulsarSim(partitions={parts: 2}) as sim,
        LoopbackCapture(str(tmp / "all.pcap"), ports={sim.port}) as cap,
    ):
        client = pulsar.Client(sim.url, operation_timeout_seconds=10)
        producer = client.create_producer(TOPIC, batching_enabled=False)
        fast = client.subscribe(TOPIC, "fast", consumer_type=pulsar.ConsumerType.Shared)
        slow = client.subscribe(TOPIC, "slow", consumer_type=pulsar.ConsumerType.Shared)
        sc = StatsClient(sim.port)
        on = {sub: sc.subscribe(TOPIC, sub) for sub in ("fast", "slow")}
        for phase, n in enumerate((FIRST, MORE)):
            marks.append(time.time_ns())
            for i in range(n):
                producer.send(f"lag {phase}.{i}".encode())
            for m in [fast.receive(timeout_millis=10_000) for _ in range(n)]:
                fast.acknowledge(m)
            if phase == 0:
                for m in [slow.receive(timeout_millis=10_000) for _ in range(SLOW_ACKS)]:
                    slow.acknowledge(m)
                # the partitioned topic: a producer, no consumer; the slow subscription asks
                # about its partition 1
                by_part = client.create_producer(PARTITIONED, batching_enabled=False)
                sent = [by_part.send(f"p{i}".encode(), partition_key=f"k{i}") for i in range(8)]
                on_part = sc.subscribe(f"{PARTITIONED}-partition-1", "slow")
            time.sleep(0.3)  # the client groups its acks (100 ms)
            for sub, cid in on.items():
                stats.append((phase, sub, TOPIC, sc.stats(cid).msg_backlog))
            if phase == 0:
                answer = sc.stats(on_part)
                stats.append((0, "slow", f"{PARTITIONED}-partition-1", answer.msg_backlog))
                assert not sc.stats(9999).HasField("msg_backlog")  # ConsumerNotFound: no row
        sc.close()
        client.close()
    assert [s["backlog"] for s in sim.log["stats"]] == [b for *_x, b in stats]
    frames, base = _shifted(cap.frames, marks)
    write_pcap(str(tmp / "lag.pcap"), frames)
    in_part1 = sum(1 for m in sent if m.partition() == 1)
    return {"pcap": str(tmp / "lag.pcap"), "base": base, "stats": stats, "in_part1": in_part1}


def test_pulsar_lag_rows_are_the_brokers_backlogs(tmp_path):
    run = _record(tmp_path)
    out = decode_files([run["pcap"]])
    write_decoded(str(tmp_path / "lake"), out)
    ids = sorted({r["capture_id"] for r in out["commands"]})
    batch = lag.compute(str(tmp_path / "lake"), ids)
    assert batch.schema == tables.schema("lag")
    rows = [r for r in batch.to_pylist() if r["protocol"] == "pulsar"]
    assert len(rows) == batch.num_rows  # nothing of any other protocol
    got = {
        (r["consumer"], r["topic"], (int(r["minute"].timestamp()) * S - run["base"]) // MIN): r for r in rows
    }
    want = {(sub, topic, phase): backlog for phase, sub, topic, backlog in run["stats"]}
    assert {k: r["lag_committed"] for k, r in got.items()} == want
    # the simulator's numbers are what the clients did: slow acknowledged two messages, fast all
    assert want[("slow", TOPIC, 0)] == FIRST - SLOW_ACKS
    assert want[("slow", TOPIC, 1)] == FIRST + MORE - SLOW_ACKS
    assert want[("fast", TOPIC, 0)] == want[("fast", TOPIC, 1)] == 0
    assert want[("slow", f"{PARTITIONED}-partition-1", 0)] == run["in_part1"] > 0
    for (_sub, topic, _phase), r in got.items():
        assert r["partition"] == (1 if topic.startswith(PARTITIONED) else None)
        assert r["hwm_samples"] == 1 and r["commits"] is None and r["deliveries"] is None
        assert all(
            r[c] is None
            for c in ("high_watermark", "log_start_offset", "committed_offset", "committed_ts")
            + ("delivered_offset", "delivered_ts", "lag_delivered")
        )
        assert r["minute"] <= r["ts"] < r["minute"].replace(second=59, microsecond=999999)
