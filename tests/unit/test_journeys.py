"""The journeys rules on hand-made rows (no Spark, no lake): group attribution, commits,
redeliveries, statuses; and a real share consumer's capture (sample_data/kafka/share.pcap,
decoded by decode_files into a delta-rs lake) against its manifest. The real clients' live
traffic is in tests/integration/test_journeys.py."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from brokerscope import journeys, tables
from brokerscope.streams import decode_files
from tests.support.lakecheck import write_decoded

S = 1_000_000_000  # ns
SHARE = Path(__file__).resolve().parents[2] / "sample_data/kafka/share"


def _msg(direction, offset, ts, conn, partition=0, topic="t", key=b"k", correlation_id=1, pid=-1, seq=None):
    return {
        "producer_id": pid,
        "producer_epoch": 0 if pid >= 0 else -1,
        "sequence": seq,
        "value": b"value of " + (key or b"none"),
        "value_hash": None,
        "value_size": 9 + len(key or b"none"),
        "capture_id": "c1",
        "direction": direction,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "key": key,
        "ts_ns": ts,
        "conn_id": conn,
        "correlation_id": correlation_id,
    }


def _ack(
    ack_type, offset, ts, conn, consumer=None, error_code=0, partition=0, correlation_id=1, details=None
):
    return {
        "details": json.dumps(details) if details is not None else None,
        "ack_type": ack_type,
        "topic": "t",
        "partition": partition,
        "offset": offset,
        "consumer": consumer,
        "error_code": error_code,
        "ts_ns": ts,
        "conn_id": conn,
        "correlation_id": correlation_id,
    }


def _cmd(command, conn, ts, client_id, group=None, client_ip="10.0.0.2", details=None):
    details = json.dumps(details if details is not None else {"GroupId": group} if group else {})
    return {
        "command": command,
        "client_ip": client_ip,
        "client_id": client_id,
        "conn_id": conn,
        "ts_ns": ts,
        "details": details,
    }


def _rows(msgs, acks, cmds):
    rows = journeys._journeys(msgs, acks, cmds)
    tables.conform("journeys", rows)  # every row fits the schema
    return {(r["offset"], r["consumer"]): r for r in rows}


def test_groups_commits_redeliveries_and_statuses():
    msgs = [
        _msg("produce", 0, 1 * S, "p"),
        _msg("produce", 1, 1 * S, "p", key=None, correlation_id=2),  # its response not captured
        _msg("deliver", 0, 3 * S, "fa"),
        _msg("deliver", 1, 3 * S, "fa"),
        _msg("deliver", 0, 5 * S, "fa2"),  # group a again, on another connection: a redelivery
        _msg("deliver", 0, 4 * S, "fb"),
    ]
    acks = [
        _ack("kafka_produce", 0, 2 * S, "p"),
        _ack("kafka_offset_commit", 2, 6 * S, "ga", consumer="a", error_code=25),  # failed: ignored
        _ack("kafka_offset_commit", 1, 7 * S, "ga", consumer="a"),  # beyond offset 0 only
        _ack("kafka_offset_commit", 2, 8 * S, "ga", consumer="a"),
        _ack("kafka_offset_commit", 0, 9 * S, "gb", consumer="b"),  # beyond nothing
    ]
    cmds = [
        _cmd("JoinGroup", "ga", 2 * S, "client-a", "a"),
        _cmd("Fetch", "fa", 3 * S, "client-a"),
        _cmd("Fetch", "fa2", 5 * S, "client-a"),
        _cmd("OffsetCommit", "ga", 8 * S, "client-a", "a"),
        _cmd("Heartbeat", "gb", 3 * S, "client-b", "b"),
        _cmd("Fetch", "fb", 4 * S, "client-b"),
        _cmd("Heartbeat", "gb", 6 * S, "client-b", "b"),
    ]
    got = _rows(msgs, acks, cmds)
    assert set(got) == {(0, "a"), (1, "a"), (0, "b"), (1, "b")}
    a0 = got[(0, "a")]
    assert (a0["deliveries"], a0["redeliveries"], a0["status"]) == (2, 1, "delivered")
    assert (a0["delivered_ts_ns"], a0["committed_ts_ns"], a0["acked_ts_ns"]) == (3 * S, 7 * S, 2 * S)
    assert (a0["produce_to_ack_us"], a0["ack_to_deliver_us"], a0["deliver_to_commit_us"]) == (1e6, 1e6, 4e6)
    a1 = got[(1, "a")]
    assert (a1["status"], a1["committed_ts_ns"], a1["key_hash"]) == ("delivered", 8 * S, None)
    assert a1["acked_ts_ns"] is None and a1["produce_to_ack_us"] is None  # its ack was not seen
    assert got[(0, "b")]["status"] == "delivered-not-committed"
    b1 = got[(1, "b")]  # b follows the topic and never got offset 1
    assert (b1["status"], b1["deliveries"], b1["delivered_ts_ns"], b1["ts_ns"]) == (
        "not-delivered",
        0,
        None,
        1 * S,
    )


def test_a_client_in_two_groups_at_once_names_no_group():
    msgs = [_msg("deliver", 7, 3 * S, "f")]  # seen only delivered: the producer is not in the capture
    cmds = [
        _cmd("JoinGroup", "g1", 1 * S, "rdkafka", "one"),
        _cmd("JoinGroup", "g2", 1 * S, "rdkafka", "two"),
        _cmd("Fetch", "f", 3 * S, "rdkafka"),
        _cmd("Heartbeat", "g1", 4 * S, "rdkafka", "one"),
        _cmd("Heartbeat", "g2", 4 * S, "rdkafka", "two"),
    ]
    got = _rows(msgs, [], cmds)
    assert set(got) == {(7, None)}
    r = got[(7, None)]
    assert (r["status"], r["produced_ts_ns"], r["ts_ns"], r["producer_conn_id"]) == (
        "delivered-not-committed",
        None,
        3 * S,
        None,
    )


def test_a_fetch_connection_is_the_group_its_own_find_coordinator_names():
    """Two consumers of one host and client id (kafka-python's default) in two groups at once:
    each asked for its group's coordinator on the connection it fetches on."""
    msgs = [_msg("deliver", 0, 4 * S, "f1"), _msg("deliver", 0, 4 * S, "f2"), _msg("deliver", 1, 5 * S, "f3")]
    kpy = "kafka-python-3.0.12"
    cmds = [
        _cmd("FindCoordinator", "f1", 1 * S, kpy, details={"Key": "one", "KeyType": 0}),
        _cmd("FindCoordinator", "f2", 1 * S, kpy, details={"CoordinatorKeys": ["two"], "KeyType": 0}),  # v4+
        # a transactional id's coordinator names no group
        _cmd("FindCoordinator", "f3", 1 * S, kpy, details={"Key": "txn", "KeyType": 1}),
        _cmd("JoinGroup", "g1", 2 * S, kpy, "one"),
        _cmd("JoinGroup", "g2", 2 * S, kpy, "two"),
        _cmd("Fetch", "f1", 4 * S, kpy),
        _cmd("Fetch", "f2", 4 * S, kpy),
        _cmd("Fetch", "f3", 5 * S, kpy),
        _cmd("Heartbeat", "g1", 6 * S, kpy, "one"),
        _cmd("Heartbeat", "g2", 6 * S, kpy, "two"),
    ]
    got = _rows(msgs, [], cmds)
    # f3 named no group itself, and its client two at once: consumer null, offset 1 only
    assert set(got) == {(0, "one"), (0, "two"), (1, "one"), (1, "two"), (1, None)}
    assert got[(0, "one")]["consumer_conn_id"] == "f1" and got[(0, "two")]["consumer_conn_id"] == "f2"
    assert got[(1, "one")]["status"] == got[(1, "two")]["status"] == "not-delivered"
    assert got[(1, None)]["consumer_conn_id"] == "f3"
    # a FindCoordinator of several groups at once (v4+ batches, admin clients) names none
    cmds[1] = _cmd("FindCoordinator", "f2", 1 * S, kpy, details={"CoordinatorKeys": ["two", "one"]})
    assert set(_rows(msgs, [], cmds)) == {(0, "one"), (1, "one"), (0, None), (1, None)}


def test_a_group_of_the_same_client_id_at_another_time_is_not_taken():
    msgs = [_msg("deliver", 0, 10 * S, "f")]
    cmds = [
        _cmd("JoinGroup", "old", 1 * S, "rdkafka", "earlier-group"),
        _cmd("LeaveGroup", "old", 2 * S, "rdkafka", "earlier-group"),
        _cmd("JoinGroup", "new", 9 * S, "rdkafka", "current"),
        _cmd("Fetch", "f", 10 * S, "rdkafka"),
        _cmd("Heartbeat", "new", 11 * S, "rdkafka", "current"),
        _cmd("JoinGroup", "other-host", 9 * S, "rdkafka", "elsewhere", client_ip="10.0.0.9"),
    ]
    got = _rows(msgs, [], cmds)
    assert set(got) == {(0, "current")}


def test_a_retried_produce_the_broker_wrote_twice_is_a_duplicate():
    """An idempotent producer's request whose response was lost, retried: seen from the client
    (the first attempt unanswered) and delivered at both offsets to one group."""
    idem = {"pid": 42, "seq": 0}
    msgs = [
        _msg("produce", None, 1 * S, "p1", correlation_id=4, **idem),  # response lost, connection closed
        _msg("produce", 1, 2 * S, "p2", correlation_id=1, **idem),  # the retry, acked at offset 1
        _msg("produce", 2, 2 * S, "p2", key=b"other", correlation_id=2, pid=42, seq=1),
        _msg("deliver", 0, 3 * S, "f", **idem),
        _msg("deliver", 1, 3 * S, "f", **idem),
        _msg("deliver", 2, 3 * S, "f", key=b"other", pid=42, seq=1),
    ]
    acks = [
        _ack("kafka_produce", 1, int(2.5 * S), "p2", correlation_id=1),
        _ack("kafka_produce", 2, int(2.5 * S), "p2", correlation_id=2),
    ]
    cmds = [
        _cmd("JoinGroup", "g", 1 * S, "c", "grp"),
        _cmd("Fetch", "f", 3 * S, "c"),
        _cmd("Heartbeat", "g", 4 * S, "c", "grp"),
    ]
    got = _rows(msgs, acks, cmds)
    assert set(got) == {(0, "grp"), (1, "grp"), (2, "grp")}
    first, again, other = got[(0, "grp")], got[(1, "grp")], got[(2, "grp")]
    assert (first["status"], first["duplicate_of"], first["produce_attempts"]) == (
        "delivered-not-committed",
        None,
        2,
    )
    # the original was written by the unanswered attempt
    assert (first["produced_ts_ns"], first["acked_ts_ns"], first["producer_conn_id"]) == (1 * S, None, "p1")
    assert (again["status"], again["duplicate_of"], again["produce_attempts"]) == ("duplicate", "t-0@0", 2)
    assert (again["produced_ts_ns"], again["acked_ts_ns"]) == (2 * S, int(2.5 * S))
    assert (other["status"], other["duplicate_of"], other["produce_attempts"]) == (
        "delivered-not-committed",
        None,
        1,
    )


def test_a_retry_the_broker_deduplicated_is_one_message_produced_twice():
    idem = {"pid": 7, "seq": 3}
    msgs = [
        _msg("produce", 5, 1 * S, "p", correlation_id=1, **idem),
        _msg("produce", 5, 2 * S, "p", correlation_id=2, **idem),  # same offset: not stored again
    ]
    got = _rows(msgs, [_ack("kafka_produce", 5, 3 * S, "p", correlation_id=2)], [])
    assert set(got) == set()  # no group follows the topic: no rows
    rows = journeys._journeys(msgs, [], [_cmd("JoinGroup", "g", 1 * S, "c", "grp")])
    assert rows == []
    commit = _ack("kafka_offset_commit", 0, 4 * S, "g", consumer="grp")
    got = _rows(msgs, [commit], [])
    (r,) = got.values()
    assert (r["offset"], r["status"], r["produce_attempts"], r["duplicate_of"]) == (
        5,
        "not-delivered",
        2,
        None,
    )
    assert r["produced_ts_ns"] == 1 * S


def test_a_real_share_group_against_its_manifest(tmp_path):
    """librdkafka's KIP-932 share consumer (share.json): a message produced before it joined, then
    12 fetched in one ShareFetch; all accepted but one rejected and one released, which came
    back in the next ShareFetch response and was accepted by ShareAcknowledge."""
    m = json.loads(SHARE.with_suffix(".json").read_text())
    out = decode_files([str(SHARE.with_suffix(".pcap"))])
    write_decoded(str(tmp_path), out)
    ids = sorted({r["capture_id"] for r in out["messages"]})
    rows = journeys.compute(str(tmp_path), ids).to_pylist()
    got = {(r["partition"], r["offset"]): r for r in rows}
    produced = {(p["partition"], p["offset"]) for p in m["produced"]}
    assert len(rows) == len(got) == len(produced) and set(got) == produced  # one row per message
    assert {(r["protocol"], r["topic"], r["consumer"]) for r in rows} == {
        ("kafka", m["topic"], "bs-share-group")
    }
    consumed = [(c["partition"], c["offset"]) for c in m["consumed"]]
    acked = {}
    for a in m["share_acks"]:
        acked.setdefault((a["partition"], a["offset"]), []).append(a["type"])
    for k, r in got.items():
        assert r["deliveries"] == consumed.count(k) and r["redeliveries"] == max(consumed.count(k) - 1, 0)
        if "accept" in acked.get(k, []):
            status = "delivered"
        elif k in consumed:
            status = "delivered-not-committed"
        else:
            status = "not-delivered"
        assert r["status"] == status, k
        assert r["produced_ts"] < r["acked_ts"] and r["produce_attempts"] == 1
        if r["deliveries"]:
            assert r["produced_ts"] < r["delivered_ts"] and r["consumer_conn_id"] != r["producer_conn_id"]
        if status == "delivered":
            assert r["delivered_ts"] < r["committed_ts"] and r["deliver_to_commit_us"] > 0
        else:
            assert r["committed_ts"] is None and r["deliver_to_commit_us"] is None
    # the warm-up message, produced before the share consumer joined (it starts at the latest
    # offset), was never delivered to the group that fetched its partition past it
    (warm,) = [p for p in m["produced"] if base64.b64decode(p["key"]) == b"warm-up"]
    assert got[(warm["partition"], warm["offset"])]["status"] == "not-delivered"
    # rejected: delivered, never committed; released then redelivered, then accepted later than
    # the others (by the ShareAcknowledge after the redelivery)
    assert acked[(1, 1)] == ["reject"] and got[(1, 1)]["deliveries"] == 1
    assert acked[(1, 2)] == ["release", "accept"]
    again, first = got[(1, 2)], got[(1, 3)]
    assert (again["deliveries"], again["redeliveries"]) == (2, 1)
    assert again["delivered_ts"] == first["delivered_ts"] and again["committed_ts"] > first["committed_ts"]


def test_share_acks_that_do_not_commit_and_ranges():
    """A failed or renewed accept is no commit; an acknowledgement row standing for a range
    (details.last_offset) accepts each offset of it."""
    msgs = [_msg("produce", o, 1 * S, "p", correlation_id=1) for o in range(5)]
    msgs += [{**_msg("deliver", o, 2 * S, "s"), "consumer": "sg"} for o in range(5)]
    ack = {"api": "ShareAcknowledge", "type": "accept"}
    acks = [
        _ack("kafka_share_ack", 0, 3 * S, "s", "sg", details=ack),
        _ack("kafka_share_ack", 1, 3 * S, "s", "sg", error_code=74, details=ack),  # failed
        _ack("kafka_share_ack", 2, 3 * S, "s", "sg", details={**ack, "type": "renew"}),
        _ack("kafka_share_ack", 3, 4 * S, "s", "sg", details={**ack, "last_offset": 4}),
        _ack("kafka_share_ack", 0, 5 * S, "s", "sg", details=ack),  # later: the first counts
        _ack("kafka_share_ack", 1, 3 * S, "s", "other", details=ack),  # another share group's
    ]
    got = _rows(msgs, acks, [])
    assert {k: (r["status"], r["committed_ts_ns"]) for k, r in got.items() if k[1] == "sg"} == {
        (0, "sg"): ("delivered", 3 * S),
        (1, "sg"): ("delivered-not-committed", None),
        (2, "sg"): ("delivered-not-committed", None),
        (3, "sg"): ("delivered", 4 * S),
        (4, "sg"): ("delivered", 4 * S),
    }
    # the other group accepted offset 1 without a delivery seen: it follows the topic
    assert got[(1, "other")]["status"] == "not-delivered" and got[(1, "other")]["committed_ts_ns"] == 3 * S
