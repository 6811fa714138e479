"""Real-client traffic: pulsar-client (C++ core) against tests/support/pulsar_sim.py, captured to
pcap and decoded end to end (capture reader, TCP reassembly, detection, this decoder) without Spark.

The committed captures in sample_data/pulsar/ come with a manifest of what the client sent and
received; the decoded tables must account for every message exactly once per direction, every
receipt and every acknowledgement.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "sample_data" / "pulsar"
SCENARIOS = ["none", "lz4", "zlib", "zstd", "snappy", "chunked"]
_PART = re.compile(r"-partition-\d+$")


def decode(pcap: Path) -> dict[str, list[dict]]:
    from brokerscope.streams import decode_files

    return decode_files([str(pcap)])


def _ident(topic: str, key, props: dict, value: bytes) -> tuple:
    return (_PART.sub("", topic), key, tuple(sorted(props.items())), value)


def _row_ident(m: dict) -> tuple:
    props = {h["key"]: h["value"].decode() for h in m["headers"] or []}
    key = m["key"].decode() if m["key"] is not None else None
    return _ident(m["topic"], key, props, m["value"])


def _man_ident(s: dict) -> tuple:
    return _ident(s["topic"], s["key"], s["properties"], base64.b64decode(s["value_b64"]))


def _mid(d: dict) -> str:
    return f"{d['ledger']}:{d['entry']}:{d['batch_index']}"


def check(out: dict[str, list[dict]], manifest: dict) -> None:
    """Everything the client did is in the tables, once."""
    assert not out.get("_errors")
    [stream] = out["streams"]
    assert stream["protocol"] == "pulsar" and stream["detected_by"] == "content"  # simulator port is not 6650
    assert stream["frames_failed"] == 0 and stream["gap_count"] == 0
    cmds = out["commands"]
    assert {r["decode_status"] for r in cmds} == {"ok"}, Counter(
        (r["command"], r["decode_status"]) for r in cmds
    )

    sent = manifest["sent"]
    produce = [m for m in out["messages"] if m["direction"] == "produce"]
    deliver = [m for m in out["messages"] if m["direction"] == "deliver"]
    assert {m["decode_status"] for m in out["messages"]} == {"ok"}
    # every message once as produce and once as deliver, identical key, properties, payload
    assert Counter(_row_ident(m) for m in produce) == Counter(_man_ident(s) for s in sent)
    assert Counter(_row_ident(m) for m in deliver) == Counter(_man_ident(s) for s in manifest["received"])
    assert Counter(_row_ident(m) for m in deliver) == Counter(_row_ident(m) for m in produce)
    # the ids the client library reported are the ids in the tables
    by_value = {base64.b64decode(s["value_b64"]): s for s in sent}
    for m in produce:
        s = by_value[m["value"]]
        assert m["message_id"] == _mid(s["message_id"]) and m["producer_name"] == s["producer"]
        assert m["checksum_ok"] is True
    rec_by_value = {base64.b64decode(r["value_b64"]): r for r in manifest["received"]}
    for m in deliver:
        r = rec_by_value[m["value"]]
        assert m["message_id"] == _mid(r["message_id"])
        if r["message_id"]["partition"] >= 0:
            assert m["partition"] == r["message_id"]["partition"]
            assert m["topic"].endswith(f"-partition-{m['partition']}")
        if r["event_timestamp"]:
            assert json.loads(m["details"])["event_time_ms"] == r["event_timestamp"]

    # every SEND has its receipt in latencies and in acks
    n_send = sum(1 for r in cmds if r["command"] == "SEND")
    send_lat = [r for r in out["latencies"] if r["request_command"] == "SEND"]
    assert len(send_lat) == n_send and {r["response_command"] for r in send_lat} == {"SEND_RECEIPT"}
    assert all(r["latency_us"] >= 0 and r["topic"] for r in send_lat)
    receipts = [a for a in out["acks"] if a["ack_type"] == "pulsar_receipt"]
    receipt_ids = {a["message_id"] for a in receipts}
    assert {m["message_id"] for m in produce} <= receipt_ids
    assert all(a["ack_latency_us"] is not None and a["ack_latency_us"] >= 0 for a in receipts)
    # every request has its answer
    assert all(r["response_command"] is not None for r in out["latencies"])

    # every delivered message is acknowledged by its subscription, and every ACK lists what it acked
    acked = [a for a in out["acks"] if a["ack_type"] in ("pulsar_ack", "pulsar_ack_cumulative")]
    acked_ids = {(a["consumer"], a["message_id"]) for a in acked}
    # messages.consumer names the subscription the message went to: the SUBSCRIBE of its consumer id,
    # the same value details.subscription and acks.consumer carry
    subscribed = {}
    for r in cmds:
        if r["command"] == "SUBSCRIBE":
            det = json.loads(r["details"])
            subscribed[det["consumer_id"]] = det["subscription"]
    for m in deliver:
        det = json.loads(m["details"])
        assert m["consumer"] == det["subscription"] == subscribed[det["consumer_id"]]
        assert (m["consumer"], m["message_id"]) in acked_ids
    assert all(m["consumer"] is None for m in produce)
    subs = {m["consumer"] for m in deliver}
    assert {a["consumer"] for a in acked} == subs
    assert any(a["ack_latency_us"] is not None for a in acked)
    for r in cmds:
        if r["command"] != "ACK":
            continue
        det = json.loads(r["details"])
        rows_here = [a for a in acked if a["ts_ns"] == r["ts_ns"]]
        for mid in det["message_id"]:
            prefix = f"{mid['ledger_id']}:{mid['entry_id']}:"
            bi = mid.get("batch_index", -1)
            if bi >= 0:
                assert any(a["message_id"] == prefix + str(bi) for a in rows_here)
            else:
                assert any(a["message_id"].startswith(prefix) for a in rows_here)
    kinds = {a["ack_type"] for a in acked}
    modes = set((manifest.get("ack_mode") or {}).values())
    if "cumulative" in modes:
        assert "pulsar_ack_cumulative" in kinds
    if "batch_index" in modes:
        ack_sets = [json.loads(a["details"]).get("ack_set") for a in acked]
        assert any(ack_sets), "batch-index acks carry ack sets"


@pytest.mark.parametrize("name", SCENARIOS)
def test_committed_capture(name):
    pcap = SAMPLES / f"pulsar_{name}.pcap"
    manifest = json.loads((SAMPLES / f"pulsar_{name}.json").read_text())
    out = decode(pcap)
    check(out, manifest)
    # the subscription names make_pulsar_samples.py gave each consumer
    for m in out["messages"]:
        if m["direction"] == "deliver":
            short = _PART.sub("", m["topic"]).rsplit("/", 1)[-1]
            assert m["consumer"] == ("chunk-sub" if name == "chunked" else f"{short}-sub")
    compressions = {m["compression"] for m in out["messages"]}
    if name == "chunked":
        big = [m for m in out["messages"] if m["value_size"] == 10_000]
        assert len(big) == 4 and all(json.loads(m["details"])["chunks"]["num_chunks"] == 3 for m in big)
    else:
        assert compressions == {name.upper()}
        batched = [m for m in out["messages"] if "num_messages_in_batch" in json.loads(m["details"])]
        assert len(batched) == 12  # the batched topic: 6 produced + 6 delivered
    if name != "chunked":
        # the C++ client advertises broker entry metadata support; the simulator then sends it
        deliver = [m for m in out["messages"] if m["direction"] == "deliver"]
        assert all("broker_entry" in json.loads(m["details"]) for m in deliver)


@pytest.mark.skipif(os.geteuid() != 0, reason="live loopback capture needs root (AF_PACKET)")
def test_live_client_run(tmp_path):
    """The generator still works: a fresh real-client run, captured and checked the same way."""
    script = SAMPLES / "make_pulsar_samples.py"
    res = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "lz4"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr[-2000:]
    manifest = json.loads((tmp_path / "pulsar_lz4.json").read_text())
    check(decode(tmp_path / "pulsar_lz4.pcap"), manifest)


def test_committed_encrypted_capture():
    """End-to-end encrypted messages (RSA data key, AES payload): kept as they are and flagged."""
    manifest = json.loads((SAMPLES / "pulsar_encrypted.json").read_text())
    out = decode(SAMPLES / "pulsar_encrypted.pcap")
    assert {r["decode_status"] for r in out["commands"]} == {"ok"}
    produce = [m for m in out["messages"] if m["direction"] == "produce"]
    deliver = [m for m in out["messages"] if m["direction"] == "deliver"]
    n_send = sum(1 for r in out["commands"] if r["command"] == "SEND")
    assert len(produce) == n_send == 3  # 2 single messages + 1 batch of 4, not splittable
    assert {m["decode_status"] for m in out["messages"]} == {"encrypted"}
    assert {m["consumer"] for m in deliver} == {"enc-sub"}
    assert all(
        json.loads(m["details"])["encryption_keys"] == ["brokerscope-test-key"] for m in out["messages"]
    )
    plain = [base64.b64decode(s["value_b64"]) for s in manifest["sent"]]
    for m in out["messages"]:
        assert m["value"] and not any(p in m["value"] for p in plain)
    # the broker passes the ciphertext through unchanged
    assert {(m["message_id"], m["value"]) for m in produce} == {
        (m["message_id"], m["value"]) for m in deliver
    }
    assert [json.loads(m["details"])["num_messages"] for m in produce] == [1, 1, 4]
    receipts = {a["message_id"] for a in out["acks"] if a["ack_type"] == "pulsar_receipt"}
    acked = {a["message_id"] for a in out["acks"] if a["ack_type"] == "pulsar_ack"}
    assert {m["message_id"] for m in produce} == receipts == acked
