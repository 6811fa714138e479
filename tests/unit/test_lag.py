"""The lag table without Spark: real clients' captures (decoded by decode_files, written to a
delta-rs lake) checked against the clients' own records, and the carry-over rules on hand-made
rows in a real lake. The live mock-cluster run is in tests/integration/test_lag.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from brokerscope import lag, tables
from brokerscope.streams import decode_files
from tests.support.lakecheck import write_decoded

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"
S = 1_000_000_000
MIN = 60 * S
T0 = 1_800_000_000 * S  # a minute boundary (1800000000 = 30000000 minutes)


def _lag(tmp_path: Path, out: dict) -> list[dict]:
    write_decoded(str(tmp_path), out)
    ids = sorted({r["capture_id"] for t in out.values() for r in t if r.get("capture_id")})
    batch = lag.compute(str(tmp_path), ids)
    assert batch.schema == tables.schema("lag")
    return batch.to_pylist()


def test_iggy_client_against_its_own_records(tmp_path):
    manifest = json.loads((SAMPLES / "iggy/manifest.json").read_text())
    (row,) = _lag(tmp_path, decode_files([str(SAMPLES / "iggy/client_vsr.pcap")]))
    (stored,) = manifest["stored_offsets"]
    polled = manifest["client_polled"]
    assert (row["protocol"], row["consumer"], row["topic"], row["partition"]) == (
        "iggy",
        stored["consumer"],
        manifest["topic"],
        stored["partition"],
    )
    # the poll reply's current offset is the last message's: the watermark is one past it
    assert row["high_watermark"] == len(manifest["messages"]) == len(polled)
    assert row["delivered_offset"] == max(m["offset"] for m in polled) + 1
    # the poll auto-committed its last offset (3), then the client stored 2: the latest wins
    assert manifest["auto_commit_poll"]["last_offset"] == 3
    assert row["committed_offset"] == stored["offset"] + 1
    assert (row["lag_committed"], row["lag_delivered"]) == (len(polled) - stored["offset"] - 1, 0)
    assert (row["hwm_samples"], row["commits"], row["deliveries"]) == (1, 2, len(polled))
    assert row["log_start_offset"] is None
    assert row["minute"].timestamp() % 60 == 0 and row["minute"] <= row["ts"]
    assert row["committed_ts"] == row["ts"] and row["delivered_ts"] < row["committed_ts"]


@pytest.mark.parametrize("run", ["none", "gzip", "lz4", "snappy", "zstd", "kip848"])
def test_kafka_samples_against_the_clients_records(tmp_path, run):
    """Each sample: a producer, then a group reading everything and committing (kip848: the
    KIP-848 consumer protocol). Watermarks and delivered offsets per partition as the clients saw
    them; the group committed what it read."""
    manifest = json.loads((SAMPLES / f"kafka/{run}.json").read_text())
    rows = _lag(tmp_path, decode_files([str(SAMPLES / f"kafka/{run}.pcap")]))
    produced, consumed = {}, {}
    for m in manifest["produced"]:
        produced[m["partition"]] = max(produced.get(m["partition"], -1), m["offset"])
    for m in manifest["consumed"]:
        consumed[m["partition"]] = max(consumed.get(m["partition"], -1), m["offset"])
    assert sorted(r["partition"] for r in rows) == sorted(consumed)
    for r in rows:
        assert (r["protocol"], r["topic"]) == ("kafka", manifest["topic"])
        assert r["high_watermark"] == produced[r["partition"]] + 1
        assert r["delivered_offset"] == consumed[r["partition"]] + 1
        assert r["committed_offset"] == r["delivered_offset"]
        assert r["lag_committed"] == r["lag_delivered"] == 0
        assert r["log_start_offset"] == 0 and r["hwm_samples"] >= 1 and r["commits"] >= 1
    assert sum(r["deliveries"] for r in rows) >= len(manifest["consumed"])
    assert len({r["consumer"] for r in rows}) == 1 and rows[0]["consumer"]


# -- the rules, on hand-made rows -----------------------------------------------------------------
def _fetch_response(ts, partitions, topic="t", conn="f1", topic_id=None, version=12):
    """A Kafka Fetch response's commands row: `partitions` is [(index, high watermark, error)]."""
    head = {"TopicId": topic_id} if topic_id else {"Topic": topic}
    body = {
        "Responses": [
            {
                **head,
                "Partitions": [
                    {"PartitionIndex": p, "HighWatermark": hw, "LogStartOffset": 0, "ErrorCode": ec}
                    for p, hw, ec in partitions
                ],
            }
        ]
    }
    return _cmd("s2c", "Fetch", conn, ts, details=json.dumps(body), api_version=version)


def _cmd(direction, command, conn, ts, client_id=None, details="{}", protocol="kafka", **more):
    return {
        "capture_id": "c1",
        "protocol": protocol,
        "direction": direction,
        "command": command,
        "client_ip": "10.0.0.2",
        "client_id": client_id,
        "conn_id": conn,
        "ts_ns": ts,
        "details": details,
        "decode_status": "ok",
        **more,
    }


def _joined(group, client, fconn, gconn, ts):
    """A client of `group` (its JoinGroup) fetching on `fconn`."""
    return [
        _cmd("c2s", "JoinGroup", gconn, ts, client, json.dumps({"GroupId": group})),
        _cmd("c2s", "Fetch", fconn, ts, client),
    ]


def _deliver(offset, ts, conn, partition=0, topic="t"):
    return {
        "capture_id": "c1",
        "protocol": "kafka",
        "direction": "deliver",
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "ts_ns": ts,
        "conn_id": conn,
    }


def _commit(group, offset, ts, partition=0, error_code=0, topic="t"):
    return {
        "capture_id": "c1",
        "protocol": "kafka",
        "ack_type": "kafka_offset_commit",
        "consumer": group,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "error_code": error_code,
        "ts_ns": ts,
    }


def test_a_stopped_group_keeps_rows_with_growing_lag(tmp_path):
    cmds = [
        *_joined("early", "c-early", "fe", "ge", T0),
        *_joined("keep", "c-keep", "fk", "gk", T0),
        _fetch_response(T0 + 1 * S, [(0, 3, 0)], conn="fe"),
        _fetch_response(T0 + 1 * S, [(0, 3, 0)], conn="fk"),
        # minute 1: only the keeping group fetches; the watermark moves on
        _fetch_response(T0 + MIN + 1 * S, [(0, 6, 0)], conn="fk"),
        _fetch_response(T0 + 2 * MIN + 1 * S, [(0, 9, 0), (1, 4, 6)], conn="fk"),  # partition 1: an error
    ]
    msgs = [_deliver(o, T0 + 1 * S, c) for o in range(3) for c in ("fe", "fk")]
    msgs += [_deliver(o, T0 + MIN + 1 * S, "fk") for o in range(3, 6)]
    msgs += [_deliver(o, T0 + 2 * MIN + 1 * S, "fk") for o in range(6, 9)]
    acks = [
        _commit("early", 3, T0 + 2 * S),
        _commit("keep", 3, T0 + 2 * S),
        _commit("keep", 6, T0 + MIN + 2 * S),
        _commit("keep", 9, T0 + 2 * MIN + 2 * S, error_code=25),  # failed: not committed
    ]
    rows = _lag(tmp_path, {"commands": cmds, "messages": msgs, "acks": acks})
    got = {
        (r["consumer"], r["partition"], int(r["minute"].timestamp() * S - T0) // MIN): (
            r["high_watermark"],
            r["committed_offset"],
            r["delivered_offset"],
            r["lag_committed"],
            r["lag_delivered"],
            r["hwm_samples"],
            r["commits"],
            r["deliveries"],
        )
        for r in rows
    }
    assert got == {
        ("early", 0, 0): (3, 3, 3, 0, 0, 1 + 1, 1, 3),
        ("early", 0, 1): (6, 3, 3, 3, 3, 1, 0, 0),  # stopped: carried over, the lag grows
        ("early", 0, 2): (9, 3, 3, 6, 6, 1, 0, 0),
        ("keep", 0, 0): (3, 3, 3, 0, 0, 2, 1, 3),
        ("keep", 0, 1): (6, 6, 6, 0, 0, 1, 1, 3),
        ("keep", 0, 2): (9, 6, 9, 3, 0, 1, 0, 3),  # the failed commit left 6
    }
    early = [r for r in rows if r["consumer"] == "early"]
    assert [r["committed_ts"] for r in early] == [early[0]["committed_ts"]] * 3
    assert [r["delivered_ts"] for r in early] == [early[0]["delivered_ts"]] * 3


def test_watermarks_before_a_consumer_began_and_topics_by_id(tmp_path):
    tid = "d7853b95-4303-4974-82c6-66ed9adf9eef"
    meta = {"Topics": [{"Name": "named", "TopicId": tid, "Partitions": []}]}
    cmds = [
        _cmd("s2c", "Metadata", "m", T0, details=json.dumps(meta)),
        _fetch_response(T0 + 1 * S, [(0, 5, 0)], topic_id=tid, version=13),  # before the group: no row
        *_joined("g", "c-g", "f1", "g1", T0 + 2 * MIN),
        _fetch_response(T0 + 2 * MIN + 1 * S, [(0, 7, 0)], topic_id=tid, version=13),
        _cmd("s2c", "Fetch", "f1", T0 + 2 * MIN + 2 * S, details="not json"),  # bad details: no sample
        _fetch_response(T0 + 2 * MIN + 3 * S, [(0, 8, 0)], topic="other"),  # another topic
    ]
    msgs = [_deliver(6, T0 + 2 * MIN + 1 * S, "f1", topic="named")]
    rows = _lag(tmp_path, {"commands": cmds, "messages": msgs, "acks": []})
    assert [
        (r["topic"], r["high_watermark"], r["delivered_offset"], r["lag_delivered"], r["committed_offset"])
        for r in rows
    ] == [("named", 7, 7, 0, None)]
    assert rows[0]["lag_committed"] is None and rows[0]["hwm_samples"] == 1


def test_no_consumer_no_rows(tmp_path):
    """Watermarks alone (nobody committed or was delivered anything) and deliveries to a
    connection no group names give no rows."""
    cmds = [_fetch_response(T0, [(0, 5, 0)]), _cmd("c2s", "Fetch", "f1", T0, "anon")]
    rows = _lag(tmp_path, {"commands": cmds, "messages": [_deliver(4, T0, "f1")], "acks": []})
    assert rows == []


def _offset_fetch(direction, conn, corr, ts, body, version):
    return _cmd(direction, "OffsetFetch", conn, ts, details=json.dumps(body), correlation_id=corr,
                api_version=version)  # fmt: skip


def _fetched(partitions):
    """OffsetFetch response partitions: [(index, committed offset, error)]."""
    return [
        {
            "PartitionIndex": p,
            "CommittedOffset": o,
            "CommittedLeaderEpoch": 0,
            "Metadata": None,
            "ErrorCode": e,
        }
        for p, o, e in partitions
    ]


def test_committed_offsets_read_back_until_the_groups_own_commit(tmp_path):
    """OffsetFetch v6 (the group in the request of the same connection and correlation id) and
    v8 (each group in the response) give a group's committed offset until its own first commit;
    -1 (nothing committed), a partition's or a group's error, a response whose request was not
    captured give none, and none counts in `commits`."""
    tid = "d7853b95-4303-4974-82c6-66ed9adf9eef"
    v6_req = {"GroupId": "a", "Topics": [{"Name": "t", "PartitionIndexes": [0, 1]}]}
    v6 = {"ErrorCode": 0, "Topics": [{"Name": "t", "Partitions": _fetched([(0, 4, 0), (1, -1, 0)])}]}
    v10 = {
        "Groups": [
            {
                "GroupId": "b",
                "ErrorCode": 0,
                "Topics": [{"TopicId": tid, "Partitions": _fetched([(0, 2, 0)])}],
            },
            {
                "GroupId": "c",
                "ErrorCode": 16,
                "Topics": [{"TopicId": tid, "Partitions": _fetched([(0, 1, 0)])}],
            },
            {
                "GroupId": "d",
                "ErrorCode": 0,
                "Topics": [{"TopicId": tid, "Partitions": _fetched([(0, 1, 3)])}],
            },
        ]
    }
    cmds = [
        _cmd("s2c", "Metadata", "m", T0, details=json.dumps({"Topics": [{"Name": "t", "TopicId": tid}]})),
        _offset_fetch("c2s", "ga", 7, T0, v6_req, 6),
        _offset_fetch("s2c", "ga", 7, T0 + S, v6, 6),
        _offset_fetch("s2c", "gz", 7, T0 + S, v6, 6),  # its request not captured: no group
        _offset_fetch("s2c", "gb", 3, T0 + 2 * S, v10, 10),
        _fetch_response(T0 + 3 * S, [(0, 9, 0), (1, 5, 0)]),
        # minute 1: group a commits partition 0; read back again, the offset no longer counts
        _offset_fetch("c2s", "ga", 8, T0 + MIN + 2 * S, v6_req, 6),
        _offset_fetch("s2c", "ga", 8, T0 + MIN + 2 * S, v6, 6),
    ]
    acks = [_commit("a", 6, T0 + MIN + S)]
    rows = _lag(tmp_path, {"commands": cmds, "messages": [], "acks": acks})
    got = {
        (r["consumer"], r["partition"], int(r["minute"].timestamp() * S - T0) // MIN): (
            r["high_watermark"],
            r["committed_offset"],
            round(r["committed_ts"].timestamp() * 1e6) * 1000 - T0,  # µs, as TS keeps it
            r["lag_committed"],
            r["commits"],
        )
        for r in rows
    }
    assert got == {
        ("a", 0, 0): (9, 4, S, 5, 0),  # read back; the watermark from the same minute on
        ("a", 0, 1): (9, 6, MIN + S, 3, 1),  # its own commit, then a read back it no longer takes
        ("b", 0, 0): (9, 2, 2 * S, 7, 0),  # v10: the group in the response, the topic by id
    }
