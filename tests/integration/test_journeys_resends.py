"""Resends in Pulsar and Iggy journeys from real clients' traffic: the broker stores a message,
its answer is lost with the connection, the client sends the message again and the broker,
without deduplication, stores it twice. The journeys must show the second copy as `duplicate` of
the first, and both with the two produce attempts, as the simulators' own records say."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.support.lakecheck import delta_rs_rows, ingest_derived

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(os.geteuid() != 0, reason="live loopback capture needs root (AF_PACKET socket)"),
]

N = 4  # messages produced; the second one's answer is lost


# ---------------------------------------------------------------------------------------------
# Pulsar: the simulator stores the SEND of sequence id 1, closes the connection instead of
# sending its receipt; pulsar-client (C++ core) reconnects and resends its pending SENDs


def _pulsar(tmp: Path) -> dict:
    import pulsar

    from tests.support.loopcap import LoopbackCapture
    from tests.support.pulsar_sim import PulsarSim

    topic = "persistent://public/default/resends"
    pcap = str(tmp / "pulsar.pcap")
    with PulsarSim(lose_receipt_of=(topic, 1)) as sim, LoopbackCapture(pcap, ports={sim.port}):
        client = pulsar.Client(sim.url, operation_timeout_seconds=10)
        producer = client.create_producer(topic, batching_enabled=False)
        ids = []
        for n in range(N):
            m = producer.send(f"resend {n}".encode(), partition_key=f"key-{n}")
            ids.append(f"{m.ledger_id()}:{m.entry_id()}:{m.batch_index()}")
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        got = []
        for _ in range(N + 1):
            m = consumer.receive(timeout_millis=10_000)
            got.append((f"{m.message_id().ledger_id()}:{m.message_id().entry_id()}:-1", m.data()))
            consumer.acknowledge(m)
        time.sleep(0.3)  # the client groups its acks (100 ms)
        consumer.close()
        producer.close()
        client.close()
        time.sleep(0.2)
    return {"pcap": pcap, "topic": topic, "ids": ids, "got": got, "sends": list(sim.log["sends"])}


def test_pulsar_resend_is_a_duplicate(resend_lake):
    lake, runs = resend_lake
    run = runs["pulsar"]
    # the simulator's record: sequence id 1 stored twice (entries 1 and 2); the client was told
    # the second; the subscription received all five entries
    stored = [(s["entry"], s["sequence_id"]) for s in run["sends"]]
    assert stored == [(0, 0), (1, 1), (2, 1), (3, 2), (4, 3)]
    ledger = run["sends"][0]["ledger"]
    mid = [f"{ledger}:{e}:-1" for e in range(N + 1)]
    assert run["ids"] == [mid[0], mid[2], mid[3], mid[4]]
    assert [g[0] for g in run["got"]] == mid and run["got"][1][1] == run["got"][2][1] == b"resend 1"
    rows = [r for r in delta_rs_rows(str(lake / "journeys")) if r["protocol"] == "pulsar"]
    got = {r["message_id"]: r for r in rows}
    assert len(rows) == len(got) == N + 1 and all(r["consumer"] == "sub" for r in rows)
    dup = got[mid[2]]
    assert (dup["status"], dup["duplicate_of"], dup["produce_attempts"]) == ("duplicate", mid[1], 2)
    orig = got[mid[1]]
    assert (orig["status"], orig["duplicate_of"], orig["produce_attempts"]) == ("delivered", None, 2)
    # the original was produced by the SEND whose receipt was lost, on the first connection
    assert orig["produced_ts"] < dup["produced_ts"] and orig["acked_ts"] is None
    assert orig["producer_conn_id"] != dup["producer_conn_id"]
    assert got[mid[0]]["producer_conn_id"] == orig["producer_conn_id"]
    assert dup["acked_ts"] is not None and dup["deliveries"] == 1
    for m in (mid[0], mid[3], mid[4]):
        assert (got[m]["status"], got[m]["produce_attempts"], got[m]["duplicate_of"]) == (
            "delivered",
            1,
            None,
        )


@pytest.fixture(scope="module")
def resend_lake(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("journeys-resends")
    runs = {"pulsar": _pulsar(tmp)}
    ingest_derived(spark, [r["pcap"] for r in runs.values()], str(tmp / "lake"), journeys=True)
    return tmp / "lake", runs
