"""Pulsar, Iggy and TubeMQ message journeys from real traffic: the real pulsar-client and
apache-iggy clients against the project's simulators (tests/support), and TubeMQ's simulated
clients (no TubeMQ client library exists for Python), captured on loopback (root needed) and
ingested in one run with journeys on. In each, two consumers (subscriptions, Iggy consumers,
consumer groups) read one topic: one stops early, the other reads everything, is sent part of it
again and leaves its last messages unacknowledged. The journeys table must hold exactly what the
clients' own records show: a row per message and consumer, its status, its deliveries, and its
steps in the order they happened."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import os
import struct
import time
from pathlib import Path

import pytest

from tests.support.lakecheck import delta_rs_rows, ingest_derived

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(os.geteuid() != 0, reason="live loopback capture needs root (AF_PACKET socket)"),
]

PER_BATCH = 3  # messages produced before the early consumer reads, and again after


def _key(n: int) -> bytes:
    return f"key-{n}".encode()


# ---------------------------------------------------------------------------------------------
# Pulsar: subscriptions `early` (reads and acks the first batch, leaves) and `late` (reads all,
# acks the first four, asks for the rest again, acks the fifth): pulsar-client 3.13 (C++ core)


def _pulsar(tmp: Path) -> dict:
    import pulsar

    from tests.support.loopcap import LoopbackCapture
    from tests.support.pulsar_sim import PulsarSim

    topic = "persistent://public/default/journeys"
    with PulsarSim() as sim, LoopbackCapture(str(tmp / "pulsar.pcap"), ports={sim.port}):
        client = pulsar.Client(sim.url, operation_timeout_seconds=10)
        producer = client.create_producer(topic, batching_enabled=False)
        ids: list[str] = []

        def produce(batch: int) -> None:
            for i in range(PER_BATCH):
                n = batch * PER_BATCH + i
                m = producer.send(f"journey {n}".encode(), partition_key=_key(n).decode())
                ids.append(f"{m.ledger_id()}:{m.entry_id()}:{m.batch_index()}")  # as _pulsar_id

        def read(consumer, n: int) -> list:
            return [consumer.receive(timeout_millis=10_000) for _ in range(n)]

        produce(0)
        early = client.subscribe(topic, "early")
        early_got = read(early, PER_BATCH)
        for m in early_got:
            early.acknowledge(m)
        time.sleep(0.3)  # the client groups its acks (100 ms)
        early.close()
        produce(1)
        late = client.subscribe(topic, "late")
        got = read(late, 2 * PER_BATCH)
        for m in got[:4]:
            late.acknowledge(m)
        time.sleep(0.3)
        late.redeliver_unacknowledged_messages()
        again = read(late, 2)
        late.acknowledge(again[0])
        time.sleep(0.3)
        late.close()
        producer.close()
        client.close()
        time.sleep(0.2)
    return {
        "pcap": str(tmp / "pulsar.pcap"),
        "topic": topic,
        "ids": ids,
        "delivered": {"early": [_pulsar_id(m) for m in early_got], "late": [_pulsar_id(m) for m in got]},
        "again": [(_pulsar_id(m), m.redelivery_count()) for m in again],
    }


def _pulsar_id(msg) -> str:
    """A received message's id as messages.message_id writes it: ledger:entry:batch_index."""
    m = msg.message_id()
    return f"{m.ledger_id()}:{m.entry_id()}:{m.batch_index()}"


def test_pulsar_journeys(protocol_lake):
    lake, runs = protocol_lake
    run = runs["pulsar"]
    ids = run["ids"]
    # the clients' records: the producer's ids; late got every message, then the last two again
    assert run["delivered"] == {"early": ids[:PER_BATCH], "late": ids}
    assert run["again"] == [(ids[4], 1), (ids[5], 1)]
    rows = [r for r in _journeys(lake) if r["protocol"] == "pulsar"]
    got = {(r["message_id"], r["consumer"]): r for r in rows}
    assert len(rows) == len(got) == 2 * len(ids)  # one row per message and subscription
    assert set(got) == {(m, s) for m in ids for s in ("early", "late")}
    for n, m in enumerate(ids):
        for sub in ("early", "late"):
            r = got[(m, sub)]
            assert (r["topic"], r["partition"], r["offset"]) == (run["topic"], None, None)
            assert r["key_hash"] == hashlib.sha256(_key(n)).hexdigest()
            assert r["produce_attempts"] == 1 and r["duplicate_of"] is None
        early, late = got[(m, "early")], got[(m, "late")]
        if n < PER_BATCH:
            assert (early["status"], early["deliveries"]) == ("delivered", 1)
        else:
            assert (early["status"], early["deliveries"], early["delivered_ts"]) == ("not-delivered", 0, None)
        want = ("delivered", 1) if n < 4 else ("delivered", 2) if n == 4 else ("delivered-not-committed", 2)
        assert (late["status"], late["deliveries"]) == want, (n, late["status"], late["deliveries"])
        assert late["redeliveries"] == late["deliveries"] - 1
    _steps_in_order(rows)
    # the early subscription acked before the second batch was produced
    early_acks = max(r["committed_ts"] for r in rows if r["consumer"] == "early" and r["committed_ts"])
    assert early_acks < min(r["produced_ts"] for r in rows if r["message_id"] in ids[PER_BATCH:])


# ---------------------------------------------------------------------------------------------
# Iggy: consumer 1 polls the first batch with auto-commit and stops; consumer 2 polls everything,
# polls the second batch again, and stores the offset of the fifth message: apache-iggy 0.9


def _store_offset(consumer: int, stream: str, topic: str, partition: int, offset: int) -> bytes:
    """STORE_CONSUMER_OFFSET's body in the 0.9-era layout (the Python client has no store method;
    as sample_data/iggy/make_iggy_samples.py): consumer kind 1 + u32 id, stream and topic names,
    partition flag + u32, offset u64, ack level quorum."""
    name = lambda s: b"\x02" + bytes([len(s)]) + s.encode()  # noqa: E731
    return (
        b"\x01\x01\x04"
        + struct.pack("<I", consumer)
        + name(stream)
        + name(topic)
        + b"\x01"
        + struct.pack("<I", partition)
        + struct.pack("<Q", offset)
        + b"\x01"
    )


def _iggy(tmp: Path) -> dict:
    from apache_iggy import Consumer, IggyClient, PollingStrategy, SendMessage

    from tests.support.iggy_sim import IggySim
    from tests.support.loopcap import LoopbackCapture

    stream, topic = "shop", "orders"

    async def session(port: int) -> dict:
        c = IggyClient(f"127.0.0.1:{port}")
        await c.connect()
        await c.login_user("iggy", "journeys-pw")
        await c.create_stream(stream)
        await c.create_topic(stream, topic, 1)

        async def send(batch: int) -> None:
            n0 = batch * PER_BATCH
            msgs = [SendMessage(f"journey {n}".encode(), None, 100 + n) for n in range(n0, n0 + PER_BATCH)]
            await c.send_messages(stream, topic, 1, msgs)

        async def poll(consumer: int, start: int, auto_commit: bool) -> list[tuple[int, int]]:
            got = await c.poll_messages(
                stream,
                topic,
                consumer=Consumer.Single(consumer),
                partition_id=1,
                polling_strategy=PollingStrategy.Offset(start),
                count=10,
                auto_commit=auto_commit,
            )
            return [(m.offset(), m.id()) for m in got]

        await send(0)
        early = await poll(1, 0, True)
        await send(1)
        late = await poll(2, 0, False)
        again = await poll(2, PER_BATCH, False)
        await c.send_binary_request(121, _store_offset(2, stream, topic, 1, 4))
        return {"early": early, "late": late, "again": again}

    with IggySim() as sim:
        with LoopbackCapture(str(tmp / "iggy.pcap"), ports={sim.port}):
            result = asyncio.run(session(sim.port))
            time.sleep(0.2)
        # the first batch as the server persisted it (the simulator stamps it as the server
        # does: base offset, its clock's base timestamp), in a segment of the server's layout
        first = sim.batches[(stream, topic)][0]
    part = tmp / "iggy-log" / "streams" / stream / "topics" / topic / "partitions" / "1"
    part.mkdir(parents=True)
    (part / f"{0:020d}.log").write_bytes(first)
    stored_us = struct.unpack_from("<Q", first, 16)[0]  # base_timestamp u64 at 16
    return {
        "pcap": str(tmp / "iggy.pcap"),
        "segment": str(part / f"{0:020d}.log"),
        "stored_us": stored_us,
        "topic": f"{stream}/{topic}",
        **result,
    }


def test_iggy_journeys(protocol_lake):
    lake, runs = protocol_lake
    run = runs["iggy"]
    n = 2 * PER_BATCH
    # the clients' records: offsets 0..5 carry ids 100..105
    assert run["early"] == [(o, 100 + o) for o in range(PER_BATCH)]
    assert run["late"] == [(o, 100 + o) for o in range(n)]
    assert run["again"] == [(o, 100 + o) for o in range(PER_BATCH, n)]
    rows = [r for r in _journeys(lake) if r["protocol"] == "iggy"]
    got = {(r["offset"], r["consumer"]): r for r in rows}
    assert len(rows) == len(got) == 2 * n
    assert set(got) == {(o, c) for o in range(n) for c in ("consumer:1", "consumer:2")}
    for o in range(n):
        for c in ("consumer:1", "consumer:2"):
            r = got[(o, c)]
            assert (r["topic"], r["partition"], r["message_id"]) == (run["topic"], 1, str(100 + o))
            assert r["key_hash"] is None and r["produce_attempts"] == 1
        early, late = got[(o, "consumer:1")], got[(o, "consumer:2")]
        if o < PER_BATCH:
            assert (early["status"], early["deliveries"]) == ("delivered", 1)
            # auto-commit: the server stores the offset as it answers the poll
            assert early["committed_ts"] == early["delivered_ts"] and early["deliver_to_commit_us"] == 0
        else:
            assert (early["status"], early["deliveries"]) == ("not-delivered", 0)
        want = (
            ("delivered", 1)
            if o < PER_BATCH
            else ("delivered", 2)
            if o <= 4
            else ("delivered-not-committed", 2)
        )
        assert (late["status"], late["deliveries"]) == want, o
        assert late["redeliveries"] == late["deliveries"] - 1
    _steps_in_order(rows)
    # stored: the first batch's messages from the segment, at the server's base timestamp; the
    # second batch is in no segment read
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    for (o, _c), r in got.items():
        us = r["stored_ts"] and (r["stored_ts"] - epoch) // dt.timedelta(microseconds=1)
        want_stored = (run["stored_us"], "log_append") if o < PER_BATCH else (None, None)
        assert (us, r["stored_ts_type"]) == want_stored, o
    # one SEND_MESSAGES per batch: the messages of a batch share their produce and ack times
    assert len({got[(o, "consumer:1")]["acked_ts"] for o in range(n)}) == 2


# ---------------------------------------------------------------------------------------------
# TubeMQ: groups `early` (one pack, committed, stops) and `late` (a pack, the next one confirming
# it, registered again: the second pack again, then the third confirming the second; the third
# never confirmed), against tests/support/tubemq_sim.py's broker, two messages a pack


def _tubemq(tmp: Path) -> dict:
    from brokerscope.protocols.tubemq.gen import tubemq_broker_pb2 as brk
    from tests.support.loopcap import LoopbackCapture
    from tests.support.tubemq_sim import SERVICE_BROKER_READ, SERVICE_BROKER_WRITE, BrokerSim, RpcClient

    topic = "journeys"
    sent: list[int] = []  # message ids, in produce order
    got: dict[str, list[int]] = {"early": [], "late": []}
    broker = BrokerSim(pack_size=2).start()
    try:
        with LoopbackCapture(str(tmp / "tubemq.pcap"), ports={broker.port}):
            prod = RpcClient(broker.port, SERVICE_BROKER_WRITE)
            cons = RpcClient(broker.port, SERVICE_BROKER_READ)

            def produce(batch: int) -> None:
                for n in range(batch * PER_BATCH, (batch + 1) * PER_BATCH):
                    req = brk.SendMessageRequestP2B(
                        clientId="prod", topicName=topic, partitionId=0, data=f"journey {n}".encode(),
                        flag=0, checkSum=-1, sentAddr=0x7F000001, msgTime="202401020304",
                    )  # fmt: skip
                    r = prod.call(13, req, brk.SendMessageResponseB2P)
                    assert r.success
                    sent.append(r.messageId)

            def register(group: str, op: int = 31) -> None:
                req = brk.RegisterRequestC2B(
                    opType=op,
                    clientId=f"{group}-1",
                    groupName=group,
                    topicName=topic,
                    partitionId=0,
                    readStatus=0,
                )
                cons.call(15, req, brk.RegisterResponseB2C)

            def pack(group: str, confirm: bool) -> None:
                req = brk.GetMessageRequestC2B(
                    clientId=f"{group}-1",
                    partitionId=0,
                    groupName=group,
                    topicName=topic,
                    lastPackConsumed=confirm,
                )
                g = cons.call(17, req, brk.GetMessageResponseB2C)
                assert g.success
                got[group] += [m.messageId for m in g.messages]

            produce(0)
            register("early")
            pack("early", False)
            req = brk.CommitOffsetRequestC2B(
                clientId="early-1", topicName=topic, partitionId=0, groupName="early", lastPackConsumed=True
            )
            cons.call(18, req, brk.CommitOffsetResponseB2C)
            register("early", 32)
            produce(1)
            register("late")
            pack("late", False)
            pack("late", True)  # confirms the first pack
            register("late", 32)
            register("late")  # reads on from the committed offset: the second pack again
            pack("late", False)
            pack("late", True)  # the third pack, confirming the second
            prod.close()
            cons.close()
            time.sleep(0.1)
    finally:
        broker.stop()
    return {"pcap": str(tmp / "tubemq.pcap"), "topic": topic, "sent": sent, "got": got}


def test_tubemq_journeys(protocol_lake):
    lake, runs = protocol_lake
    run = runs["tubemq"]
    sent = run["sent"]
    n = len(sent)
    assert run["got"] == {"early": sent[:2], "late": sent[:4] + sent[2:4] + sent[4:]}
    rows = [r for r in _journeys(lake) if r["protocol"] == "tubemq"]
    got = {(r["message_id"], r["consumer"]): r for r in rows}
    assert len(rows) == len(got) == 2 * n
    assert set(got) == {(str(m), g) for m in sent for g in ("early", "late")}
    for i, m in enumerate(sent):
        early, late = got[(str(m), "early")], got[(str(m), "late")]
        for r in (early, late):
            # the broker's append offsets: one index entry (20 bytes) per message
            assert (r["topic"], r["partition"], r["offset"]) == (run["topic"], 0, 20 * i)
            assert r["produce_attempts"] == 1
        assert (early["status"], early["deliveries"]) == (("delivered", 1) if i < 2 else ("not-delivered", 0))
        want = ("delivered", 1) if i < 2 else ("delivered", 2) if i < 4 else ("delivered-not-committed", 1)
        assert (late["status"], late["deliveries"]) == want, i
    _steps_in_order(rows)


# ---------------------------------------------------------------------------------------------


def _steps_in_order(rows: list[dict]) -> None:
    """Every row's steps in the order they happened, its latencies their differences."""
    for r in rows:
        assert r["ts"] == r["produced_ts"] is not None
        assert r["produced_ts"] < r["acked_ts"] and r["produce_to_ack_us"] > 0
        if r["status"] == "not-delivered":
            assert r["delivered_ts"] is None and r["committed_ts"] is None and r["consumer_conn_id"] is None
            continue
        assert r["acked_ts"] < r["delivered_ts"] and r["consumer_conn_id"]
        assert r["produce_to_deliver_us"] == pytest.approx(r["produce_to_ack_us"] + r["ack_to_deliver_us"])
        if r["status"] == "delivered":
            assert r["delivered_ts"] <= r["committed_ts"] and r["deliver_to_commit_us"] >= 0
        else:
            assert r["committed_ts"] is None and r["deliver_to_commit_us"] is None


def _journeys(lake: Path) -> list[dict]:
    return delta_rs_rows(str(lake / "journeys"))


@pytest.fixture(scope="module")
def protocol_lake(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("journeys-protocols")
    runs = {"pulsar": _pulsar(tmp), "iggy": _iggy(tmp), "tubemq": _tubemq(tmp)}
    inputs = [r["pcap"] for r in runs.values()] + [r["segment"] for r in runs.values() if "segment" in r]
    summary = ingest_derived(spark, inputs, str(tmp / "lake"), journeys=True)
    assert summary.rows["journeys"] == len(_journeys(tmp / "lake")) == 2 * (3 * 2 * PER_BATCH)
    return tmp / "lake", runs
