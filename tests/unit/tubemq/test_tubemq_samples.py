"""The simulator's real TCP conversation, captured to pcap, decodes completely.

- the committed captures in sample_data/tubemq, through brokerscope.streams.decode_files;
- the same captures fed straight to the conversation from scapy (independent of the TCP stage);
- a fresh live capture (root only), through decode_files.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path

import pytest

from brokerscope.protocols.base import C2S, S2C, ConnInfo, Context
from brokerscope.protocols.tubemq import PROTOCOL

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "sample_data/tubemq"
MANIFEST = json.loads((SAMPLES / "manifest.json").read_text())


def _decode_files():
    streams = pytest.importorskip("brokerscope.streams")
    if not hasattr(streams, "decode_files"):
        pytest.skip("brokerscope.streams.decode_files not available")
    return streams.decode_files


def check_capture(rows: dict[str, list[dict]], expected: dict) -> None:
    """Every message sent appears once as produce and once as deliver, every request is paired
    with its response, every commit and confirmation is an ack, nothing failed to decode."""
    cmds = rows["commands"]
    bad = [(r["command"], r["decode_status"], r["decode_error"]) for r in cmds if r["decode_status"] != "ok"]
    assert bad == []
    requests = [r for r in cmds if r["direction"] == "c2s"]
    assert len(requests) == expected["requests"]
    # messages: compare payload digests, per direction
    want = Counter((m["topic"], m["partition"], m["sha256"]) for m in expected["messages"])
    for direction in ("produce", "deliver"):
        got = Counter(
            (r["topic"], r["partition"], hashlib.sha256(r["value"]).hexdigest())
            for r in rows["messages"]
            if r["direction"] == direction
        )
        assert got == want, direction
    assert all(r["decode_status"] == "ok" for r in rows["messages"])
    delivered = [r for r in rows["messages"] if r["direction"] == "deliver"]
    assert all(r["checksum_ok"] is True and r["message_id"] for r in delivered)
    assert {r["consumer"] for r in delivered} == {"grp"}  # the group that fetched them
    produced = [r for r in rows["messages"] if r["direction"] == "produce"]
    assert Counter(r["checksum_ok"] for r in produced) == Counter({None: 4, True: 3})  # odd sends carry a CRC
    attrs = {m["attribute"] for m in expected["messages"]}
    assert {",".join(f"{h['key']}={h['value'].decode()}" for h in r["headers"]) for r in produced} == attrs
    # every request paired by serial number
    lats = rows["latencies"]
    assert len(lats) == expected["requests"]
    assert all(r["response_ts"] is not None and r["latency_us"] >= 0 for r in lats)
    assert Counter(r["request_command"] == r["response_command"] for r in lats) == Counter({True: len(lats)})
    # acks
    acks = rows["acks"]
    via = Counter(json.loads(a["details"]).get("via") for a in acks if a["ack_type"] == "tubemq_commit")
    assert via == Counter({"consumerCommitC2B": expected["commits"], "getMessagesC2B": expected["confirms"]})
    assert all(a["consumer"] == "grp" for a in acks if a["ack_type"] == "tubemq_commit")
    assert sum(a["ack_type"] == "tubemq_produce" for a in acks) == len(expected["messages"])
    # the standby exception the master answered first
    exc = [r for r in cmds if r["error_code"] == 1]
    assert len(exc) == expected["exceptions"] == 1
    assert exc[0]["decode_error"].startswith("org.apache.inlong.tubemq.corerpc.exception.StandbyException")
    # metadata kept in details: broker list and partition assignment
    hb = [r for r in cmds if r["command"] == "consumerHeartbeatC2M" and r["direction"] == "s2c"]
    assert [a["partition"] for a in json.loads(hb[0]["details"])["assigned"]] == [0, 1]
    phb = [r for r in cmds if r["command"] == "producerHeartbeatP2M" and r["direction"] == "s2c"]
    assert phb
    for r in phb:  # the simulator's master publishes one topic on broker 1 with two partitions
        (ti,) = json.loads(r["details"])["topic_infos"]
        assert ti["partition_count"] == 2 and ti["brokers"][0]["broker_id"] == 1
        assert ti["brokers"][0]["host"] == "127.0.0.1"
    # frames that needed several 8192-byte blocks
    multi = [r for r in cmds if len(json.loads(r["details"])["blocks"]) > 1]
    assert len(multi) >= 3  # two big sends + the delivery that carried both
    # tokens never in clear
    assert "987654321" not in repr(rows)


@pytest.mark.parametrize("name", sorted(MANIFEST["files"]))
def test_committed_sample_decodes(name):
    decode_files = _decode_files()
    rows = decode_files([str(SAMPLES / name)])
    assert rows["_errors"] == []
    check_capture(rows, MANIFEST["files"][name])
    streams = rows["streams"]
    assert {s["protocol"] for s in streams} == {"tubemq"}
    expect = "port" if name == "tubemq_default_ports.pcap" else "content"
    assert {s["detected_by"] for s in streams} == {expect}
    assert all(s["frames_failed"] == 0 and s["gap_count"] == 0 for s in streams)


def _scapy_rows(path: Path) -> dict[str, list[dict]]:
    """Reassemble each TCP connection's payload in order with scapy and feed the conversation."""
    from scapy.all import IP, TCP, rdpcap

    ports = set()
    conns: dict[tuple, list] = {}
    for pkt in rdpcap(str(path)):
        if IP not in pkt or TCP not in pkt:
            continue
        ip, tcp = pkt[IP], pkt[TCP]
        if tcp.flags & 0x02 and not tcp.flags & 0x10:  # SYN: the destination is the server
            ports.add(tcp.dport)
        a, b = (ip.src, tcp.sport), (ip.dst, tcp.dport)
        key = tuple(sorted([a, b]))
        conns.setdefault(key, []).append((a, b, int(tcp.seq), bytes(tcp.payload), int(pkt.time * 10**9)))
    out: dict[str, list[dict]] = {"commands": [], "messages": [], "latencies": [], "acks": []}
    for key, pkts in conns.items():
        server = key[0] if key[0][1] in ports else key[1]
        client = key[1] if server == key[0] else key[0]
        conv = PROTOCOL.conversation(ConnInfo("x", client[0], client[1], server[0], server[1]), Context())
        seen: dict[str, set] = {C2S: set(), S2C: set()}
        for src, _dst, seq, payload, ts in sorted(pkts, key=lambda p: p[4]):
            if not payload:
                continue
            d = C2S if src == client else S2C
            if seq in seen[d]:
                continue  # retransmission
            seen[d].add(seq)
            for t, r in conv.feed(d, payload, ts):
                out[t].append(r)
        for t, r in conv.close():
            out[t].append(r)
    # the table shape decode_files gives (timestamps as values, every column present)
    from brokerscope import tables

    return {t: tables.conform(t, rows).to_pylist() for t, rows in out.items()}


@pytest.mark.parametrize("name", sorted(MANIFEST["files"]))
def test_committed_sample_decodes_from_scapy_payloads(name):
    check_capture(_scapy_rows(SAMPLES / name), MANIFEST["files"][name])


@pytest.mark.skipif(os.geteuid() != 0, reason="live loopback capture needs root (AF_PACKET)")
def test_live_capture_of_the_simulator(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_tubemq_samples", SAMPLES / "make_tubemq_samples.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    pcap = tmp_path / "live.pcap"
    expected = mod.record(pcap, 0, 0)
    check_capture(_scapy_rows(pcap), expected)
    streams = pytest.importorskip("brokerscope.streams")
    if hasattr(streams, "decode_files"):
        check_capture(streams.decode_files([str(pcap)]), expected)
