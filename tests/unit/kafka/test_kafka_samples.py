"""Real-client captures (librdkafka mock cluster via confluent-kafka, sample_data/kafka) decoded end
to end without Spark, checked against the manifest the generating script wrote from the clients'
own delivery reports and consumed messages."""

from __future__ import annotations

import base64
import collections
import json
from pathlib import Path

import pytest

from brokerscope import tables
from brokerscope.streams import decode_files

SAMPLES = Path(__file__).resolve().parents[3] / "sample_data" / "kafka"
RUNS = ("none", "gzip", "snappy", "lz4", "zstd", "txn", "kip848", "share")


def _b(s):
    return None if s is None else base64.b64decode(s)


def _key(m: dict) -> tuple:
    headers = tuple((k, _b(v)) for k, v in m["headers"])
    return (m["topic"], m["partition"], m["offset"], _b(m["key"]), _b(m["value"]), headers)


def _row_key(r: dict) -> tuple:
    headers = tuple((h["key"], h["value"]) for h in r["headers"] or ())
    return (r["topic"], r["partition"], r["offset"], r["key"], r["value"], headers)


@pytest.fixture(scope="module", params=RUNS)
def run(request):
    name = request.param
    manifest = json.loads((SAMPLES / f"{name}.json").read_text())
    out = decode_files([str(SAMPLES / f"{name}.pcap")])
    return name, manifest, out


def test_all_frames_decode(run):
    name, _m, out = run
    assert out["_errors"] == []
    cmds = [r for r in out["commands"] if r["protocol"] == "kafka"]
    assert len(cmds) > 20
    bad = [r for r in cmds if r["decode_status"] != "ok"]
    if name == "txn":
        # the mock cluster writes transaction markers with CRC 0: the only frames allowed to
        # fail are Fetch responses whose failing batches are all control batches stored with CRC 0
        for r in bad:
            assert r["command"] == "Fetch" and r["decode_status"] == "checksum_mismatch", r
            d = json.loads(r["details"])
            failing = [
                b
                for t in d["Responses"]
                for p in t["Partitions"]
                for b in p["Records"]["batches"]
                if not b["crc_ok"]
            ]
            assert failing and all(b["control"] for b in failing)
            assert "stored 0x00000000" in r["decode_error"]
    else:
        assert bad == []
    for s in out["streams"]:
        assert s["detected_by"] == "content"  # the mock broker listens on an ephemeral port
        assert s["protocol"] == "kafka"


def test_produced_messages_exactly_once_with_offsets(run):
    name, m, out = run
    produced = [r for r in out["messages"] if r["direction"] == "produce"]
    want = [_key(x) for x in m["produced"] + m.get("aborted", [])]
    got = [_row_key(r) for r in produced]
    assert collections.Counter(got) == collections.Counter(want)
    for r in produced:
        assert r["message_id"] == f"{r['topic']}-{r['partition']}@{r['offset']}"
        assert r["compression"] == m["codec"]
        assert r["checksum_ok"] is True
        assert r["source"] == "capture"
        assert r["message_ts"] is not None


def test_consumed_messages_delivered(run):
    name, m, out = run
    delivered = [_row_key(r) for r in out["messages"] if r["direction"] == "deliver"]
    want = [_key(x) for x in m["consumed"]]
    assert collections.Counter(delivered) == collections.Counter(want)


def test_every_request_answered(run):
    name, _m, out = run
    lat = out["latencies"]
    requests = [r for r in out["commands"] if r["direction"] == "c2s"]
    assert len(lat) == len(requests)
    unanswered = [r for r in lat if r["response_ts"] is None]
    # only requests in flight when the client closed (its long-poll Fetch, a metadata refresh)
    # may lack a response: they are the last requests of their connection, none answered after
    answered_last = collections.defaultdict(int)
    for r in lat:
        if r["response_ts"] is not None:
            answered_last[r["conn_id"]] = max(answered_last[r["conn_id"]], r["ts_ns"])
    for r in unanswered:
        assert r["ts_ns"] > answered_last[r["conn_id"]], r
    assert len(unanswered) <= 3
    for r in lat:
        if r["response_ts"] is not None:
            assert r["latency_us"] >= 0
            assert r["response_command"] == r["request_command"]


def test_acks(run):
    name, m, out = run
    acks = out["acks"]
    produce_acks = [a for a in acks if a["ack_type"] == "kafka_produce"]
    assert produce_acks and all(a["error_code"] == 0 for a in produce_acks)
    # every produced message's offset is covered by a produce ack of its partition
    first = {(a["topic"], a["partition"], a["offset"]) for a in produce_acks}
    for x in m["produced"]:
        assert any((x["topic"], x["partition"], o) in first for o in range(0, x["offset"] + 1))
    commits = [a for a in acks if a["ack_type"] == "kafka_offset_commit"]
    if name == "share":
        # a share group commits no offsets: each delivery is acknowledged (KIP-932)
        assert commits == []
        share = [a for a in acks if a["ack_type"] == "kafka_share_ack"]
        got = sorted((a["partition"], a["offset"], json.loads(a["details"])["type"]) for a in share)
        assert got == sorted((x["partition"], x["offset"], x["type"]) for x in m["share_acks"])
        assert all(a["error_code"] == 0 and a["consumer"] == "bs-share-group" for a in share)
        assert all(a["message_id"] == f"bs-share-{a['partition']}@{a['offset']}" for a in share)
        return
    assert commits and all(a["error_code"] == 0 for a in commits)
    if name == "txn":
        assert {a["consumer"] for a in commits} == {"bs-txn-group"}
        want = {(t, p, o) for t, p, o in m["committed_positions"] if o >= 0}
        assert {(a["topic"], a["partition"], a["offset"]) for a in commits} == want
        ends = [json.loads(a["details"])["committed"] for a in acks if a["ack_type"] == "kafka_end_txn"]
        assert ends == [True, False, True]
        markers = [
            json.loads(a["details"])["control_type"] for a in acks if a["ack_type"] == "kafka_txn_marker"
        ]
        assert "COMMIT" in markers and "ABORT" in markers
    else:
        assert {a["consumer"] for a in commits} == {f"bs-group-{name}"}


def test_share_group_deliveries_carry_group_and_delivery_count():
    m = json.loads((SAMPLES / "share.json").read_text())
    out = decode_files([str(SAMPLES / "share.pcap")])
    delivered = [r for r in out["messages"] if r["direction"] == "deliver"]
    assert {r["consumer"] for r in delivered} == {"bs-share-group"}
    counts = collections.Counter((r["partition"], r["offset"]) for r in delivered)
    released = [(a["partition"], a["offset"]) for a in m["share_acks"] if a["type"] == "release"]
    assert released and all(counts[k] == 2 for k in released)  # released, then redelivered
    by_count = {(r["partition"], r["offset"], json.loads(r["details"])["delivery_count"]) for r in delivered}
    assert all((p, o, 2) in by_count and (p, o, 1) in by_count for p, o in released)
    assert sum(counts.values()) == len(m["consumed"])
    # a share group starts at the latest offset: the message produced before it joined stays unread
    assert b"warm-up" in {_b(x["key"]) for x in m["produced"]}
    assert b"warm-up" not in {r["key"] for r in delivered}


def test_rows_conform(run):
    _n, _m, out = run
    for t in ("commands", "messages", "latencies", "acks"):
        tables.conform(t, out[t])  # decode_files already conformed; this keeps the contract visible
