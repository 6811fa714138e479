"""The Pulsar, Iggy and TubeMQ journeys rules on hand-made rows (no Spark, no lake): identities,
acknowledgements, offset commits (Iggy's cover the message at the offset, TubeMQ's only those
below), consumers, statuses, and rows that make no journey. Real clients' traffic:
tests/integration/test_journeys_protocols.py."""

from __future__ import annotations

import pyarrow as pa

from brokerscope import journeys, tables

MS = 1_000_000  # ns


def _table(name: str, columns, rows: list[dict]) -> pa.Table:
    sch = tables.schema(name)
    return pa.Table.from_pylist(
        [{c: r.get(c) for c in columns} for r in rows], pa.schema([sch.field(c) for c in columns])
    )


def _journeys(msgs: list[dict], acks: list[dict]) -> list[dict]:
    blocks = journeys.compute_others(
        _table("messages", journeys.STEP_MSG_COLUMNS, msgs), _table("acks", journeys.STEP_ACK_COLUMNS, acks)
    )
    return tables.conform("journeys", blocks).to_pylist()


def _m(protocol, direction, ts, **kw) -> dict:
    return {"protocol": protocol, "direction": direction, "ts_ns": ts, "capture_id": "c1", **kw}


def _a(protocol, ack_type, ts, **kw) -> dict:
    return {"protocol": protocol, "ack_type": ack_type, "ts_ns": ts, **kw}


def _by(rows: list[dict], *key) -> dict:
    out = {tuple(r[k] for k in key): r for r in rows}
    assert len(out) == len(rows)
    return out


def test_pulsar_identity_receipts_and_consumer_acks():
    t = "persistent://public/default/t"
    p = {"protocol": "pulsar", "topic": t}
    msgs = [
        _m(**p, direction="produce", ts=1 * MS, message_id="7:0:-1", key=b"a", conn_id="P"),
        _m(**p, direction="produce", ts=2 * MS, message_id="7:1:-1", key=b"b", conn_id="P"),
        _m(**p, direction="produce", ts=3 * MS, message_id=None, conn_id="P"),  # no receipt: no journey
        _m(**p, direction="deliver", ts=5 * MS, message_id="7:0:-1", key=b"a", consumer="s1", conn_id="C"),
        _m(**p, direction="deliver", ts=6 * MS, message_id="7:1:-1", key=b"b", consumer="s1", conn_id="C"),
        _m(**p, direction="deliver", ts=9 * MS, message_id="7:1:-1", key=b"b", consumer="s1", conn_id="C"),
        _m(**p, direction="deliver", ts=7 * MS, message_id="7:0:-1", key=b"a", consumer="s2", conn_id="D"),
    ]
    acks = [
        _a(**p, ack_type="pulsar_receipt", ts=1 * MS + 500, message_id="7:0:-1", conn_id="P"),
        # a receipt of the same id on another connection is not this send's
        _a(**p, ack_type="pulsar_receipt", ts=1 * MS + 100, message_id="7:1:-1", conn_id="X"),
        _a(**p, ack_type="pulsar_ack_cumulative", ts=10 * MS, message_id="7:0:-1", consumer="s1"),
        _a(**p, ack_type="pulsar_ack", ts=8 * MS, message_id="7:0:-1", consumer="s1"),  # the first ack
        _a(**p, ack_type="pulsar_ack", ts=8 * MS, message_id="9:9:-1", consumer="s1"),  # unknown message
    ]
    rows = _journeys(msgs, acks)
    got = _by(rows, "message_id", "consumer")
    assert set(got) == {(m, s) for m in ("7:0:-1", "7:1:-1") for s in ("s1", "s2")}
    r = got[("7:0:-1", "s1")]
    assert (r["status"], r["deliveries"], r["produce_to_ack_us"], r["deliver_to_commit_us"]) == (
        "delivered",
        1,
        0.5,
        3000.0,
    )
    r = got[("7:1:-1", "s1")]
    assert (r["status"], r["deliveries"], r["redeliveries"], r["acked_ts"]) == (
        "delivered-not-committed",
        2,
        1,
        None,
    )
    assert got[("7:1:-1", "s2")]["status"] == "not-delivered"
    assert got[("7:0:-1", "s2")]["consumer_conn_id"] == "D"
    assert all(
        r["protocol"] == "pulsar" and r["offset"] is None and r["producer_conn_id"] == "P" for r in rows
    )
    # rows in the order of their first step, then by consumer
    assert [(r["message_id"], r["consumer"]) for r in rows] == [
        ("7:0:-1", "s1"),
        ("7:0:-1", "s2"),
        ("7:1:-1", "s1"),
        ("7:1:-1", "s2"),
    ]


def _iggy(offset_commit_at: int) -> list[dict]:
    p = {"protocol": "iggy", "topic": "s/t", "partition": 1}
    msgs = [
        _m(**p, direction="produce", ts=1 * MS, offset=o, message_id=str(o), conn_id="P", correlation_id=5)
        for o in range(3)
    ]
    msgs += [
        _m(**p, direction="produce", ts=1 * MS, offset=None, message_id="99", conn_id="P", correlation_id=6)
    ]
    msgs += [
        _m(
            **p,
            direction="deliver",
            ts=4 * MS,
            offset=o,
            message_id=str(o),
            consumer="consumer:1",
            conn_id="C",
        )
        for o in range(3)
    ]
    msgs += [_m(**p, direction="deliver", ts=4 * MS, offset=None, message_id="x", consumer="consumer:1")]
    acks = [
        _a(**p, ack_type="iggy_send", ts=2 * MS, offset=0, error_code=0, conn_id="P", correlation_id=5),
        _a(
            **p,
            ack_type="iggy_offset",
            ts=6 * MS,
            offset=offset_commit_at,
            error_code=0,
            consumer="consumer:1",
        ),
        # a rejected store, and one without a response: not commits
        _a(**p, ack_type="iggy_offset", ts=5 * MS, offset=2, error_code=5000, consumer="consumer:1"),
        _a(**p, ack_type="iggy_offset", ts=5 * MS, offset=2, error_code=None, consumer="consumer:1"),
        # a consumer that only stored an offset follows the topic
        _a(**p, ack_type="iggy_offset", ts=7 * MS, offset=0, error_code=0, consumer="consumer:9"),
    ]
    return _journeys(msgs, acks)


def test_iggy_stored_offsets_cover_the_message_at_them():
    got = _by(_iggy(1), "offset", "consumer")
    assert set(got) == {(o, c) for o in range(3) for c in ("consumer:1", "consumer:9")}
    assert [got[(o, "consumer:1")]["status"] for o in range(3)] == [
        "delivered",
        "delivered",
        "delivered-not-committed",
    ]
    assert got[(1, "consumer:1")]["committed_ts"] == got[(0, "consumer:1")]["committed_ts"]
    assert got[(0, "consumer:1")]["produce_to_ack_us"] == 1000.0
    nine = got[(0, "consumer:9")]
    assert (nine["status"], nine["deliveries"], nine["delivered_ts"]) == ("not-delivered", 0, None)
    assert nine["committed_ts"] is not None and got[(1, "consumer:9")]["committed_ts"] is None
    assert all(r["message_id"] == str(r["offset"]) for r in got.values())


def test_tubemq_commits_cover_the_messages_below_the_offset_and_pair_sends_by_serial():
    p = {"protocol": "tubemq", "topic": "t", "partition": 0}
    msgs = [
        _m(**p, direction="produce", ts=i * MS, key=None, conn_id="P", correlation_id=i + 1) for i in range(3)
    ]
    # serial 1 again, unanswered (its serial's answer came before it)
    msgs += [_m(**p, direction="produce", ts=10 * MS, conn_id="P", correlation_id=1)]
    msgs += [
        _m(**p, direction="deliver", ts=20 * MS, message_id=str(500 + i), consumer="g", conn_id="C")
        for i in range(3)
    ]
    msgs += [_m(**p, direction="deliver", ts=21 * MS, message_id="777", consumer=None, conn_id="C")]
    acks = [
        _a(**p, ack_type="tubemq_produce", ts=i * MS + 10, offset=20 * i, message_id=str(500 + i), error_code=0,
           conn_id="P", correlation_id=i + 1)
        for i in range(3)
    ]  # fmt: skip
    acks += [
        _a(**p, ack_type="tubemq_commit", ts=30 * MS, offset=20, consumer="g"),  # a confirm: no error code
        _a(**p, ack_type="tubemq_commit", ts=31 * MS, offset=60, error_code=500, consumer="g"),  # refused
    ]
    rows = _journeys(msgs, acks)
    got = _by(rows, "message_id", "consumer")
    # g follows the topic: a row for each of its messages, 777 (delivered to no known group) too
    assert set(got) == {(m, "g") for m in ("500", "501", "502", "777")} | {("777", None)}
    assert got[("777", "g")]["status"] == "not-delivered"
    assert [got[(str(500 + i), "g")]["offset"] for i in range(3)] == [0, 20, 40]
    assert [got[(str(500 + i), "g")]["status"] for i in range(3)] == [
        "delivered",
        "delivered-not-committed",
        "delivered-not-committed",
    ]
    assert all(got[(str(500 + i), "g")]["produce_to_ack_us"] == 0.01 for i in range(3))
    assert got[("500", "g")]["produce_attempts"] == 1  # the later request of serial 1 had no answer
    stray = got[("777", None)]  # delivered, its group unknown and its producer not seen
    assert (stray["status"], stray["produced_ts"], stray["offset"]) == ("delivered-not-committed", None, None)
    assert stray["ts"] == stray["delivered_ts"]


def test_no_rows_make_no_journeys():
    assert _journeys([], []) == []
    only_acks = [
        _a("iggy", "iggy_offset", MS, topic="s/t", partition=1, offset=3, error_code=0, consumer="c")
    ]
    assert _journeys([], only_acks) == []
