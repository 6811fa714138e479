"""Resends in Pulsar and Iggy journeys from real clients' traffic: the broker stores a message,
its answer is lost with the connection, the client sends the message again and the broker,
without deduplication, stores it twice. The journeys must show the second copy as `duplicate` of
the first, and both with the two produce attempts, as the simulators' own records say."""

from __future__ import annotations

import asyncio
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


# ---------------------------------------------------------------------------------------------
# Iggy: the simulator stores the second SEND_MESSAGES and closes the connection instead of
# replying; apache-iggy 0.9 reports the disconnection (it does not resend by itself), and the
# application sends the same message (the same id) again on a new connection


def _iggy(tmp: Path) -> dict:
    from apache_iggy import Consumer, IggyClient, PollingStrategy, SendMessage

    from tests.support.iggy_sim import IggySim
    from tests.support.loopcap import LoopbackCapture

    stream, topic = "shop", "resends"

    async def client(port: int) -> IggyClient:
        c = IggyClient(f"127.0.0.1:{port}")
        await c.connect()
        await c.login_user("iggy", "resends-pw")
        return c

    async def session(port: int) -> dict:
        c = await client(port)
        await c.create_stream(stream)
        await c.create_topic(stream, topic, 1)

        def message(n: int) -> list:
            return [SendMessage(f"resend {n}".encode(), None, 100 + n)]

        await c.send_messages(stream, topic, 1, message(0))
        try:
            await asyncio.wait_for(c.send_messages(stream, topic, 1, message(1)), 10)
            lost = None
        except RuntimeError as e:  # the reply lost with the connection
            lost = str(e)
        c = await client(port)
        for n in range(1, N):
            await c.send_messages(stream, topic, 1, message(n))
        got = await c.poll_messages(
            stream,
            topic,
            consumer=Consumer.Single(1),
            partition_id=1,
            polling_strategy=PollingStrategy.Offset(0),
            count=10,
            auto_commit=True,
        )
        return {"lost": lost, "got": [(m.offset(), m.id(), m.payload()) for m in got]}

    pcap = str(tmp / "iggy.pcap")
    with IggySim(lose_reply_of_send=2) as sim:
        with LoopbackCapture(pcap, ports={sim.port}):
            result = asyncio.run(session(sim.port))
            time.sleep(0.2)
    return {"pcap": pcap, "topic": f"{stream}/{topic}", **result}


def test_iggy_resend_is_a_duplicate(resend_lake):
    lake, runs = resend_lake
    run = runs["iggy"]
    # the clients' record: the second send failed, message id 101 stored at offsets 1 and 2
    assert run["lost"] == "Disconnected"
    ids = [100, 101, 101, 102, 103]
    assert run["got"] == [(o, i, f"resend {i - 100}".encode()) for o, i in enumerate(ids)]
    rows = [r for r in delta_rs_rows(str(lake / "journeys")) if r["protocol"] == "iggy"]
    got = {r["offset"]: r for r in rows}
    assert len(rows) == len(got) == N + 1 and all(r["consumer"] == "consumer:1" for r in rows)
    assert [got[o]["message_id"] for o in range(N + 1)] == [str(i) for i in ids]
    dup, orig = got[2], got[1]
    assert (dup["status"], dup["duplicate_of"], dup["produce_attempts"]) == (
        "duplicate",
        f"{run['topic']}-1@1",
        2,
    )
    assert (orig["status"], orig["duplicate_of"], orig["produce_attempts"]) == ("delivered", None, 2)
    # the original was produced by the request whose reply was lost, on the first connection
    assert orig["producer_conn_id"] == got[0]["producer_conn_id"] != dup["producer_conn_id"]
    assert orig["acked_ts"] is None and orig["produced_ts"] < dup["produced_ts"] < dup["acked_ts"]
    for o in (0, 3, 4):
        assert (got[o]["status"], got[o]["produce_attempts"], got[o]["duplicate_of"]) == (
            "delivered",
            1,
            None,
        )


@pytest.fixture(scope="module")
def resend_lake(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("journeys-resends")
    runs = {"pulsar": _pulsar(tmp), "iggy": _iggy(tmp)}
    ingest_derived(spark, [r["pcap"] for r in runs.values()], str(tmp / "lake"), journeys=True)
    return tmp / "lake", runs
