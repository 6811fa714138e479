"""Kafka message journeys from real clients: confluent-kafka (librdkafka), and kafka-python with
its default client ids, producing known messages to librdkafka's mock cluster and two consumer
groups reading them (one stops early, one commits late), captured on loopback (root needed),
ingested with journeys on; the journeys table must hold what the clients' own records show."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import time
from pathlib import Path

import pytest

from brokerscope import cli, journeys, pipeline
from brokerscope.config import Settings
from brokerscope.lake import Lake
from tests.support.kafkamock import mock_producer, produce_batch, read
from tests.support.lakecheck import delta_rs_rows, derived_settings, ingest_derived

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(os.geteuid() != 0, reason="live loopback capture needs root (AF_PACKET socket)"),
]

TOPIC = "journeys"
EARLY, LATE = "bs-early", "bs-late"  # the group that stops early, the group that commits late
PER_BATCH = 6  # messages per batch, over partitions 0 and 1


def _consume(bootstrap: str, group: str, n: int, topic: str = TOPIC) -> tuple[object, list[tuple]]:
    """A consumer of `group` reading `n` messages of `topic`: it and their (partition, offset, key)."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": f"{group}-client",  # the group's connections are told apart by client id
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "enable.metrics.push": False,
        }
    )
    c.subscribe([topic])
    return c, [(m.partition(), m.offset(), m.key()) for m in read(c, n)]


def _record(tmp: Path) -> dict:
    """Batch 1 produced; the early group reads it, commits and leaves; batch 2 produced; the late
    group reads everything and, a while later, commits all but each partition's last message."""
    from confluent_kafka import TopicPartition

    from tests.support.loopcap import LoopbackCapture

    produced: list[tuple[int, int, bytes, bytes]] = []
    commits: dict[str, dict[int, int]] = {}
    with LoopbackCapture(str(tmp / "all.pcap"), ports=None, settle_s=0.2) as cap:
        p, port = mock_producer("bs-journeys-producer")
        bootstrap = f"127.0.0.1:{port}"

        produce_batch(p, TOPIC, 0, PER_BATCH, "journey", produced)
        early, early_got = _consume(bootstrap, EARLY, PER_BATCH)
        early.commit(asynchronous=False)
        commits[EARLY] = {part: max(o for q, o, _k in early_got if q == part) + 1 for part in (0, 1)}
        early.close()
        produce_batch(p, TOPIC, 1, PER_BATCH, "journey", produced)
        late, late_got = _consume(bootstrap, LATE, 2 * PER_BATCH)
        time.sleep(0.5)
        # the next offset to read = each partition's last message: that message stays uncommitted
        commits[LATE] = {part: max(o for q, o, _k in late_got if q == part) for part in (0, 1)}
        late.commit(
            offsets=[TopicPartition(TOPIC, q, o) for q, o in commits[LATE].items()], asynchronous=False
        )
        late.close()
        del p
    return {
        "pcap": _port_pcap(cap, port, tmp / "journeys.pcap"),
        "produced": produced,
        "consumed": {EARLY: {(q, o) for q, o, _k in early_got}, LATE: {(q, o) for q, o, _k in late_got}},
        "commits": commits,
    }


def _port_pcap(cap, port: int, path: Path) -> str:
    """Write the frames of `cap` to or from `port` (the mock broker's) to `path`; its name."""
    from tests.support.loopcap import _tcp_ports, write_pcap

    write_pcap(str(path), [(ts, f) for ts, f in cap.frames if (pp := _tcp_ports(f)) and port in pp])
    return str(path)


@pytest.fixture(scope="module")
def journey_lake(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("journeys")
    run = _record(tmp)
    settings = derived_settings(tmp / "lake", journeys=True)
    summary = pipeline.ingest([run["pcap"]], settings, spark=spark)
    assert summary.errors == []
    return tmp / "lake", run, settings, summary


def _journeys(lake: Path) -> list[dict]:
    return delta_rs_rows(str(lake / "journeys"))


def _check_rows(rows: list[dict], run: dict, topic: str, groups: tuple[str, str]) -> None:
    """One row per produced message and group, each with the status the clients' records give
    (delivered to the group or not, its offset below the group's commit or not)."""
    produced = {(part, off): (key, value) for part, off, key, value in run["produced"]}
    assert len(produced) == 2 * PER_BATCH
    got = {(r["partition"], r["offset"], r["consumer"]): r for r in rows}
    assert len(got) == len(rows) == 2 * len(produced)
    assert set(got) == {(part, off, g) for part, off in produced for g in groups}
    for (part, off, group), r in got.items():
        key, _value = produced[(part, off)]
        assert r["topic"] == topic and r["protocol"] == "kafka"
        assert r["message_id"] == f"{topic}-{part}@{off}"
        assert r["key_hash"] == hashlib.sha256(key).hexdigest()
        assert r["redeliveries"] == 0
        delivered = (part, off) in run["consumed"][group]
        committed = off < run["commits"][group][part]
        want = (
            "delivered"
            if delivered and committed
            else "delivered-not-committed"
            if delivered
            else "not-delivered"
        )
        assert r["status"] == want, (part, off, group)
        assert r["deliveries"] == (1 if delivered else 0)
    # the early group never saw the second batch; the late one left each partition's last uncommitted
    statuses = [r["status"] for r in rows]
    assert statuses.count("not-delivered") == PER_BATCH
    assert statuses.count("delivered-not-committed") == 2


def _check_order(rows: list[dict], early: str, late: str) -> None:
    """Each row's steps in the order they happened: produced, acknowledged, delivered, committed
    (the consumers started after the producer's flush); one commit of each group, the early
    group's before the late group's first delivery of the second batch."""
    for r in rows:
        assert r["produced_ts"] < r["acked_ts"]
        assert r["ts"] == r["produced_ts"]
        assert r["produce_to_ack_us"] > 0
        if r["status"] == "not-delivered":
            assert r["delivered_ts"] is None and r["committed_ts"] is None and r["consumer_conn_id"] is None
            continue
        assert r["acked_ts"] < r["delivered_ts"]
        assert r["produce_to_deliver_us"] == pytest.approx(r["produce_to_ack_us"] + r["ack_to_deliver_us"])
        if r["status"] == "delivered":
            assert r["delivered_ts"] < r["committed_ts"] and r["deliver_to_commit_us"] > 0
        else:
            assert r["committed_ts"] is None
    late_commit = {r["committed_ts"] for r in rows if r["consumer"] == late and r["committed_ts"]}
    early_commit = {r["committed_ts"] for r in rows if r["consumer"] == early and r["committed_ts"]}
    assert len(late_commit) == len(early_commit) == 1  # one OffsetCommit each
    not_early = {
        (r["partition"], r["offset"]) for r in rows if r["consumer"] == early and not r["delivered_ts"]
    }
    second = [
        r["delivered_ts"]
        for r in rows
        if r["consumer"] == late and (r["partition"], r["offset"]) in not_early
    ]
    assert len(second) == PER_BATCH and max(early_commit) < min(second)


def test_one_row_per_message_and_group_with_the_clients_statuses(journey_lake):
    lake, run, _s, summary = journey_lake
    rows = _journeys(lake)
    assert summary.rows["journeys"] == len(rows)
    _check_rows(rows, run, TOPIC, (EARLY, LATE))


def test_steps_in_the_order_they_happened(journey_lake):
    lake, _run, _s, _summary = journey_lake
    rows = _journeys(lake)
    _check_order(rows, EARLY, LATE)
    # the late group started after the early one had left
    early_commit = max(r["committed_ts"] for r in rows if r["consumer"] == EARLY and r["committed_ts"])
    assert early_commit < min(r["delivered_ts"] for r in rows if r["consumer"] == LATE)


def test_journeys_are_recomputed_when_the_capture_is_ingested_again(journey_lake, spark):
    lake, run, settings, _summary = journey_lake
    before = sorted((r["partition"], r["offset"], r["consumer"], r["status"]) for r in _journeys(lake))
    t0 = time.perf_counter()
    summary = pipeline.ingest([run["pcap"]], settings, spark=spark)
    ingest_s = time.perf_counter() - t0
    after = sorted((r["partition"], r["offset"], r["consumer"], r["status"]) for r in _journeys(lake))
    assert after == before and summary.rows["journeys"] == len(after)
    ids = sorted({r["capture_id"] for r in _journeys(lake)})
    t0 = time.perf_counter()
    batch = journeys.compute(str(lake), ids)
    compute_s = time.perf_counter() - t0
    assert batch.num_rows == len(after)
    print(
        f"journeys: {batch.num_rows} rows computed in {compute_s:.3f} s; the whole ingest took {ingest_s:.1f} s"
    )


def test_journeys_stay_off_by_default(spark, journey_lake, tmp_path):
    _lake, run, _s, _summary = journey_lake
    settings = Settings.load(
        overrides={"lake": {"path": str(tmp_path / "lake")}, "spark": {"shuffle_partitions": 4}}
    )
    assert not settings.journeys
    summary = pipeline.ingest([run["pcap"]], settings, spark=spark)
    assert "journeys" not in summary.rows
    assert not (tmp_path / "lake" / "journeys").exists()


# the segment's record times: CreateTime (partition 0) from this instant, one ms apart; the
# LogAppendTime batch (partition 1) says the broker appended it at APPEND_MS
CREATE_MS, APPEND_MS = 1_700_000_000_000, 1_700_000_123_456


def _log_batch(records: list[tuple], log_append: bool) -> bytes:
    """One v2 record batch (kafka-python's writer) of `records` (partition, offset, key, value,
    consecutive offsets), each with its CreateTime; `log_append`: attributes bit 3 set, MaxTimestamp
    APPEND_MS and the CRC-32C (attributes to the end) made again, as a LogAppendTime broker writes."""
    import struct

    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.util import calc_crc32c

    b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i, (_p, _o, key, value) in enumerate(records):
        b.append(i, CREATE_MS + records[0][1] + i, key, value, [])
    data = bytearray(b.build())
    struct.pack_into(">q", data, 0, records[0][1])  # baseOffset (outside the CRC)
    if log_append:
        # baseOffset 8, batchLength 4, partitionLeaderEpoch 4, magic 1, crc 4, attributes 2 (at 21),
        # lastOffsetDelta 4, baseTimestamp 8, maxTimestamp 8 (at 35)
        struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | 0x08)
        struct.pack_into(">q", data, 35, APPEND_MS)
        struct.pack_into(">I", data, 17, calc_crc32c(bytes(data[21:])))
    return bytes(data)


def test_stored_times_from_segment_files_of_the_same_run(journey_lake, spark, tmp_path):
    """The capture and a log segment per partition holding its records (partition 0 CreateTime,
    all but its last message; partition 1 LogAppendTime) ingested together: each row's
    stored_ts is its record's time in the segment, null for the record no segment holds."""
    from tests.support.kafka_segment import write_segment

    _lake, run, _s, _summary = journey_lake
    by_part = {q: sorted(r for r in run["produced"] if r[0] == q) for q in (0, 1)}
    left_out = by_part[0][-1][:2]
    want = {}
    logs = []
    for q, recs in by_part.items():
        # partition 1's segment also holds a record the capture never saw (no journey)
        recs = recs[:-1] if q == 0 else [*recs, (1, recs[-1][1] + 1, b"key-unseen", b"unseen")]
        logs.append(write_segment(tmp_path / "log" / f"{TOPIC}-{q}", [_log_batch(recs, q == 1)], recs[0][1]))
        for i, (_p, o, _k, _v) in enumerate(recs):
            ms = APPEND_MS if q == 1 else CREATE_MS + recs[0][1] + i
            want[(q, o)] = (ms * 1000, "log_append" if q == 1 else "create")
    summary = pipeline.ingest(
        [run["pcap"], *logs], derived_settings(tmp_path / "lake", journeys=True), spark=spark
    )
    assert summary.errors == []
    rows = _journeys(tmp_path / "lake")
    assert {r["consumer"] for r in rows} == {EARLY, LATE} and len(rows) == 2 * len(run["produced"])
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    for r in rows:
        got = r["stored_ts"] and (r["stored_ts"] - epoch) // dt.timedelta(microseconds=1)
        if (r["partition"], r["offset"]) == left_out:
            assert (got, r["stored_ts_type"]) == (None, None)
        else:
            assert (got, r["stored_ts_type"]) == want[(r["partition"], r["offset"])]
    # the segment's records have no journeys of their own: the same rows as the capture alone
    assert sorted((r["partition"], r["offset"], r["consumer"], r["status"]) for r in rows) == sorted(
        (r["partition"], r["offset"], r["consumer"], r["status"]) for r in _journeys(_lake)
    )


RETRY_TOPIC = "journeys-retry"
RETRY_GROUP = "bs-retry"


def _record_retry(tmp: Path) -> dict:
    """An idempotent producer talks to the mock broker through tests/support/droprelay.py, which
    loses the response to its first Produce request with the connection: the producer sends the
    same batch again (same producer id, epoch and sequence) on a new connection. A group then
    reads the partition. Captured from the clients' side (the relay's upstream leg left out)."""
    from confluent_kafka import Producer

    from tests.support.droprelay import DropRelay
    from tests.support.loopcap import LoopbackCapture, _tcp_ports, write_pcap

    reports: list[tuple[int, bytes]] = []
    owner = Producer({"test.mock.num.brokers": 1, "enable.metrics.push": False})
    bport = next(iter(owner.list_topics(timeout=10).brokers.values())).port
    with LoopbackCapture(str(tmp / "all.pcap"), ports=None, settle_s=0.2) as cap, DropRelay(bport) as relay:
        p = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{relay.port}",
                "client.id": "bs-journeys-idempotent",
                "enable.idempotence": True,
                "linger.ms": 5,
                "enable.metrics.push": False,
            }
        )
        for i in range(3):
            p.produce(
                RETRY_TOPIC,
                key=f"key-{i}".encode(),
                value=f"retried {i} ".encode() * 4,
                partition=0,
                on_delivery=lambda e, m: reports.append((m.offset(), m.key())) if e is None else None,
            )
            assert p.flush(15) == 0
        del p
        assert len(relay.dropped) == 1
        c, got = _consume(f"127.0.0.1:{bport}", RETRY_GROUP, 4, RETRY_TOPIC)
        consumed = [(offset, key) for _p, offset, key in got]
        c.commit(asynchronous=False)
        c.close()
        upstream = set(relay.upstream_ports)
    del owner
    frames = [
        (ts, f)
        for ts, f in cap.frames
        if (pp := _tcp_ports(f)) and (relay.port in pp or (bport in pp and not upstream & set(pp)))
    ]
    write_pcap(str(tmp / "retry.pcap"), frames)
    return {"pcap": str(tmp / "retry.pcap"), "reports": reports, "consumed": consumed}


@pytest.fixture(scope="module")
def retry_lake(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("retry")
    run = _record_retry(tmp)
    ingest_derived(spark, [run["pcap"]], str(tmp / "lake"), journeys=True)
    return tmp / "lake", run


def test_a_retried_produce_written_twice_is_a_duplicate(retry_lake):
    lake, run = retry_lake
    # the clients' records: the mock broker wrote the retried batch again, the consumer read both
    # copies, and the producer's report names the second (the response it got)
    assert [k for _o, k in sorted(run["consumed"])] == [b"key-0", b"key-0", b"key-1", b"key-2"]
    assert sorted(run["reports"]) == [(1, b"key-0"), (2, b"key-1"), (3, b"key-2")]
    rows = {r["offset"]: r for r in _journeys(lake)}
    assert sorted(rows) == [0, 1, 2, 3]
    assert {r["consumer"] for r in rows.values()} == {RETRY_GROUP}
    first, again = rows[0], rows[1]
    assert again["status"] == "duplicate" and again["duplicate_of"] == f"{RETRY_TOPIC}-0@0"
    assert first["status"] == "delivered" and first["duplicate_of"] is None
    assert first["produce_attempts"] == again["produce_attempts"] == 2
    assert first["key_hash"] == again["key_hash"] == hashlib.sha256(b"key-0").hexdigest()
    # the original was written by the attempt whose response was lost: produced, never acknowledged
    assert first["acked_ts"] is None and first["produced_ts"] < again["produced_ts"] < again["acked_ts"]
    assert first["producer_conn_id"] != again["producer_conn_id"]  # the retry came on a new connection
    for off in (2, 3):
        r = rows[off]
        assert (r["status"], r["produce_attempts"], r["duplicate_of"]) == ("delivered", 1, None)
        assert r["produced_ts"] < r["acked_ts"] < r["delivered_ts"] < r["committed_ts"]


def test_a_run_that_fails_before_its_journeys_computes_them_when_rolled_forward(
    spark, journey_lake, tmp_path, monkeypatch
):
    expected, run, _s, _summary = journey_lake
    lake = tmp_path / "lake"
    settings = derived_settings(lake, journeys=True)

    def fail(self, table, *a, **k):
        raise RuntimeError(f"killed before the {table}")

    with monkeypatch.context() as m:
        m.setattr(Lake, "commit_derived", fail)
        with pytest.raises(RuntimeError, match="killed before the journeys"):
            pipeline.ingest([run["pcap"]], settings, spark=spark)
    assert delta_rs_rows(str(lake / "messages")) and not _journeys(lake)
    assert not delta_rs_rows(str(lake / "inputs"))  # inputs come after the journeys
    (line,) = Lake(str(lake)).recover()
    assert line.startswith("finished run")
    key = ("partition", "offset", "consumer", "status", "produced_ts", "delivered_ts", "committed_ts")
    assert sorted(tuple(r[k] for k in key) for r in _journeys(lake)) == sorted(
        tuple(r[k] for k in key) for r in _journeys(expected)
    )
    assert delta_rs_rows(str(lake / "inputs"))


def test_ingest_journeys_flag_and_the_tables_listing(spark, journey_lake, tmp_path, capsys):
    _lake, run, _s, _summary = journey_lake
    lake = str(tmp_path / "lake")
    assert cli.main(["ingest", run["pcap"], "--lake", lake, "--journeys", "-q"]) == 0
    out = capsys.readouterr().out
    assert "journeys=24" in out
    assert cli.main(["tables", "--lake", lake, "--format", "csv"]) == 0
    listed = {line.split(",")[0] for line in capsys.readouterr().out.splitlines()}
    assert "journeys" in listed


KPY_TOPIC = "journeys-kpy"
KPY_EARLY, KPY_LATE = "kpy-early", "kpy-late"
# kafka-python 3.0.12 probes the broker with ApiVersions v4; librdkafka's mock cluster answers
# error 35 (UNSUPPORTED_VERSION) in a form kafka-python fails to decode, and it never bootstraps.
# (2, 3) is the newest api_version whose ApiVersions request is v2, which the mock accepts.
KPY_API = (2, 3)


def _kpy_poll(consumers: dict, got: dict, want: dict, timeout_s: float = 30) -> None:
    """Poll every open consumer of `consumers` in turn (their records into `got[group]` as
    (partition, offset) pairs) until each group of `want` has `want[group]` records; an
    AssertionError when fewer came within `timeout_s`. The consumers awaited poll for up to 5 s:
    the mock cluster holds a first JoinGroup 3 s, and a kafka-python 3.0.12 consumer whose poll
    timed out during its join may join again after its SyncGroup, and then wait for good."""
    end = time.time() + timeout_s
    while any(len(got[g]) < n for g, n in want.items()) and time.time() < end:
        for g, c in consumers.items():
            for recs in c.poll(timeout_ms=5000 if g in want else 100).values():
                got[g] += [(r.partition, r.offset) for r in recs]
    assert {g: len(got[g]) for g in want} == want


def _record_kafka_python(tmp: Path) -> dict:
    """kafka-python with its default client ids (every consumer `kafka-python-<version>`), against
    librdkafka's mock cluster: batch 1 produced; both groups read it; the early group
    commits and leaves; batch 2 produced; the late group reads it and, a while later, commits all
    but each partition's last message. The records: the producer's futures (partition, offset),
    the consumers' records, the offsets each group committed."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    from tests.support.loopcap import LoopbackCapture

    produced: list[tuple[int, int, bytes, bytes]] = []
    got: dict[str, list[tuple[int, int]]] = {KPY_EARLY: [], KPY_LATE: []}
    commits: dict[str, dict[int, int]] = {}
    with LoopbackCapture(str(tmp / "all.pcap"), ports=None, settle_s=0.2) as cap:
        owner, port = mock_producer("bs-journeys-mock")  # keeps the mock cluster up
        bootstrap = f"127.0.0.1:{port}"
        p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, api_version=KPY_API)

        def produce(batch: int) -> None:
            sent = []
            for n in range(batch * PER_BATCH, (batch + 1) * PER_BATCH):
                key, value = f"key-{n}".encode(), f"kpy {n} ".encode() * 4
                sent.append((key, value, p.send(KPY_TOPIC, key=key, value=value, partition=n % 2)))
            p.flush(10)
            for key, value, future in sent:
                md = future.get(10)
                produced.append((md.partition, md.offset, key, value))

        def commit(group: str, offsets: dict[int, int]) -> None:
            consumers[group].commit(
                {TopicPartition(KPY_TOPIC, q): OffsetAndMetadata(o) for q, o in offsets.items()}
            )
            commits[group] = offsets

        produce(0)
        consumers: dict = {}
        client_ids = set()
        # one consumer after the other, both fetching while the late one joins and reads
        for g in (KPY_EARLY, KPY_LATE):
            consumers[g] = KafkaConsumer(
                bootstrap_servers=bootstrap,
                group_id=g,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                fetch_max_wait_ms=100,
                api_version=KPY_API,
            )
            # the topic's partitions known before the group forms: a leader that assigns without
            # them ("No partition metadata") gives its member nothing until a metadata refresh,
            # minutes later (seen on a loaded machine)
            assert {0, 1} <= consumers[g].partitions_for_topic(KPY_TOPIC)
            consumers[g].subscribe([KPY_TOPIC])
            client_ids.add(consumers[g].config["client_id"])
            _kpy_poll(consumers, got, {g: PER_BATCH})
        commit(KPY_EARLY, {q: max(o for pp, o in got[KPY_EARLY] if pp == q) + 1 for q in (0, 1)})
        consumers.pop(KPY_EARLY).close()
        produce(1)
        _kpy_poll(consumers, got, {KPY_LATE: 2 * PER_BATCH})
        time.sleep(0.5)
        # the next offset to read = each partition's last message: that message stays uncommitted
        commit(KPY_LATE, {q: max(o for pp, o in got[KPY_LATE] if pp == q) for q in (0, 1)})
        consumers.pop(KPY_LATE).close()
        p.close()
        del owner
    return {
        "pcap": _port_pcap(cap, port, tmp / "kpy.pcap"),
        "produced": produced,
        "consumed": {g: set(v) for g, v in got.items()},
        "commits": commits,
        "client_ids": client_ids,
    }


@pytest.fixture(scope="module")
def kpy_lake(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kpy")
    run = _record_kafka_python(tmp)
    summary = ingest_derived(spark, [run["pcap"]], str(tmp / "lake"), journeys=True, lag=True)
    return tmp / "lake", run, summary


def test_kafka_python_groups_of_one_client_id_have_their_own_rows(kpy_lake):
    """Both consumers have kafka-python's default client id and run at the same time: each Fetch
    connection's group is the one its own FindCoordinator named."""
    lake, run, summary = kpy_lake
    assert len(run["client_ids"]) == 1 and next(iter(run["client_ids"])).startswith("kafka-python-")
    rows = _journeys(lake)
    assert summary.rows["journeys"] == len(rows)
    _check_rows(rows, run, KPY_TOPIC, (KPY_EARLY, KPY_LATE))
    _check_order(rows, KPY_EARLY, KPY_LATE)


def test_kafka_python_lag_names_the_groups(kpy_lake):
    """The lag table attributes deliveries as the journeys do: each group's last row per
    partition has the offsets its consumer delivered and committed."""
    lake, run, summary = kpy_lake
    rows = sorted(delta_rs_rows(str(lake / "lag")), key=lambda r: r["minute"])
    assert summary.rows["lag"] == len(rows)
    last = {(r["consumer"], r["partition"]): r for r in rows}
    assert set(last) == {(g, q) for g in (KPY_EARLY, KPY_LATE) for q in (0, 1)}
    for (g, q), r in last.items():
        delivered = max(o for pp, o in run["consumed"][g] if pp == q) + 1
        assert (r["delivered_offset"], r["committed_offset"]) == (delivered, run["commits"][g][q]), (g, q)
        assert r["high_watermark"] == PER_BATCH
