"""Traffic of the real Iggy client (PyPI apache-iggy 0.9.0) against tests/support/iggy_sim.py:
the committed sample capture, and (as root) a fresh live capture."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from brokerscope import tables
from brokerscope.config import Settings
from brokerscope.streams import STATS_TABLE, decode_files

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = os.path.join(HERE, "../../../sample_data/iggy")
PCAP = os.path.join(SAMPLES, "client_vsr.pcap")
MANIFEST = os.path.join(SAMPLES, "manifest.json")


def _check(out: dict, manifest: dict) -> None:
    for name in ("commands", "messages", "acks", "latencies"):
        rows = [{k: v for k, v in r.items() if k in tables.schema(name).names} for r in out[name]]
        tables.conform(name, rows)
    iggy = [s for s in out["streams"] if s["protocol"] == "iggy"]
    assert len(iggy) == 1 and iggy[0]["frames_failed"] == 0
    cmds = [c for c in out["commands"] if c["protocol"] == "iggy"]
    assert cmds and all(c["decode_status"] == "ok" for c in cmds), [
        (c["command"], c["decode_status"], c["decode_error"]) for c in cmds if c["decode_status"] != "ok"
    ]
    names = {c["command"] for c in cmds}
    assert {
        "LOGIN_REGISTER",
        "PING",
        "CREATE_STREAM",
        "CREATE_TOPIC",
        "SEND_MESSAGES",
        "POLL_MESSAGES",
        "STORE_CONSUMER_OFFSET",
    } <= names
    # the real client completed every step against the simulator's replies
    assert all(step["ok"] for step in manifest["client_steps"]), manifest["client_steps"]
    replies = {c["command"]: json.loads(c["details"]) for c in cmds if c["direction"] == "s2c"}
    # metadata replies: result section (count 0) then the new stream / topic
    created = replies["CREATE_STREAM"]
    assert (created["result_count"], created["name"], created["layout"]) == (0, manifest["stream"], "vsr")
    topic = replies["CREATE_TOPIC"]
    assert topic["result_count"] == 0 and f"{manifest['stream']}/{topic['name']}" == manifest["topic"]
    assert [p["id"] for p in topic["partitions"]] == [1]
    assert replies["STORE_CONSUMER_OFFSET"]["result_count"] == 0
    assert replies["LOGIN_REGISTER"]["session"] > 0
    if manifest.get("client_topic"):  # GET_TOPIC as the client decoded it
        got = replies["GET_TOPIC"]
        want = manifest["client_topic"]
        assert (got["id"], got["name"], got["messages_count"]) == (want["id"], want["name"], want["messages"])
    # batch checksums: the client's (send) and the server's restamped one (poll) both verify
    send = next(
        json.loads(c["details"]) for c in cmds if c["command"] == "SEND_MESSAGES" and c["direction"] == "c2s"
    )
    assert send["batch"]["batch_checksum_ok"] is True
    assert replies["POLL_MESSAGES"]["batch_checksum_ok"] is True
    assert replies["SEND_MESSAGES"]["confirmations"][0]["base_offset"] == 0
    # the password never lands anywhere
    assert "s3cret-sample-pw" not in repr(out)
    login = next(c for c in cmds if c["command"] == "LOGIN_REGISTER" and c["direction"] == "c2s")
    assert json.loads(login["details"])["password"].startswith("<redacted")

    msgs = [m for m in out["messages"] if m["protocol"] == "iggy"]
    sent = manifest["messages"]
    for direction in ("produce", "deliver"):
        got = [m for m in msgs if m["direction"] == direction]
        assert sorted(m["message_id"] for m in got) == sorted(s["id"] for s in sent), direction
        for s in sent:
            (m,) = [m for m in got if m["message_id"] == s["id"]]  # exactly once
            assert m["value"] == bytes.fromhex(s["payload"])
            assert sorted(h["key"] for h in m["headers"]) == s["header_keys"]
            assert m["topic"] == manifest["topic"] and m["checksum_ok"] is True
    produce = {m["message_id"]: m for m in msgs if m["direction"] == "produce"}
    for m in (m for m in msgs if m["direction"] == "deliver"):
        assert m["headers"] == produce[m["message_id"]]["headers"]
    assert sorted(m["offset"] for m in msgs if m["direction"] == "deliver") == list(range(len(sent)))
    # deliver rows name the consumer of the poll; produce rows have none
    assert {m["consumer"] for m in msgs if m["direction"] == "deliver"} == {manifest["deliver_consumer"]}
    assert {m["consumer"] for m in msgs if m["direction"] == "produce"} == {None}
    # per-message times: producer clock = batch origin + timestamp delta, in order
    origins = [json.loads(m["details"])["origin_timestamp"] for m in msgs if m["direction"] == "produce"]
    assert origins == sorted(origins) and all(origins)

    acks = [
        (a["consumer"], a["partition"], a["offset"])
        for a in out["acks"]
        if a["protocol"] == "iggy" and a["ack_type"] == "iggy_offset"
    ]
    for s in manifest["stored_offsets"]:
        assert (s["consumer"], s["partition"], s["offset"]) in acks
    # the store request in the 0.9-era layout: partition flag, offset, then the ack level
    stores = [
        json.loads(c["details"])
        for c in out["commands"]
        if c["command"] == "STORE_CONSUMER_OFFSET" and c["direction"] == "c2s"
    ]
    assert [(d["partition_id"], d["offset"], d["ack_level"]) for d in stores] == [
        (s["partition"], s["offset"], s["ack_level"]) for s in manifest["stored_offsets"]
    ]
    auto = manifest["auto_commit_poll"]
    assert (auto["consumer"], 1, auto["last_offset"]) in acks
    lat = [r for r in out["latencies"] if r["protocol"] == "iggy"]
    assert lat and all(r["latency_us"] is not None and r["latency_us"] >= 0 for r in lat)


@pytest.mark.skipif(not os.path.exists(PCAP), reason="sample capture not generated")
def test_committed_sample_capture():
    with open(MANIFEST) as f:
        manifest = json.load(f)
    _check(decode_files([PCAP]), manifest)


@pytest.mark.skipif(os.geteuid() != 0, reason="live loopback capture needs root")
def test_live_client_against_simulator(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "make_iggy_samples", os.path.join(SAMPLES, "make_iggy_samples.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "OUT", str(tmp_path))
    monkeypatch.setattr(mod, "free_port", lambda preferred=8090: 0)
    mod.main()
    with open(tmp_path / "manifest.json") as f:
        manifest = json.load(f)
    _check(decode_files([str(tmp_path / "client_vsr.pcap")]), manifest)


@pytest.mark.skipif(not os.path.exists(PCAP), reason="sample capture not generated")
def test_splits_starting_inside_vsr_headers_lose_nothing():
    """Splits of 2297 bytes start inside four VSR frames of the capture (256-byte consensus
    headers, mostly zeros): the decode is the same as the unsplit one. The capture reader used to
    take the zeros for records there and lose the rest of the split."""
    whole = decode_files([PCAP])
    split = decode_files([PCAP], Settings.load(overrides={"capture": {"split_size": 2297}}))
    assert len(whole["messages"]) == 8
    assert len(split["messages"]) == 8
    for t in ("messages", "commands", "acks", "latencies", "streams"):
        assert split[t] == whole[t], t
    assert len(split[STATS_TABLE]) == 5
    assert all(s["damaged"] == 0 and s["errors"] == [] for s in split[STATS_TABLE])
