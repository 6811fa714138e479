"""Zeek-style connection health in `streams` (duration_us, conn_state, history), end to end:
scapy-built packets -> pcap file -> capture reader -> TCP tracking -> the streams row.

The expected values are Zeek's documented meanings (conn.log's conn_state and history): history
letters upper case for the originator (the client), lower case for the responder, each at its
first occurrence per side."""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from brokerscope.config import Settings
from brokerscope.streams import decode_files
from tests.unit.test_tcp_pathologies_pcap import c, handshake, recording_protocol, run, s, write_pcap

__all__ = ["recording_protocol"]  # its autouse fixture registers the recording decoder here too


def test_full_handshake_and_fin_both_ways_is_sf(tmp_path):
    pkts = handshake() + [
        c(1, payload=b"req"),
        s(1000, payload=b"resp", ack=4),
        c(4, "FA", ack=1004),
        s(1004, "FA", ack=5),
        c(5, "A", ack=1005),
    ]
    row, _ = run(tmp_path, pkts)
    assert row["conn_state"] == "SF"
    assert row["history"] == "ShADdFf"  # the server sent no pure ACK: no a
    # write_pcap stamps packet i at i ms: 8 packets, first to last = 7 ms
    assert row["duration_us"] == 7000.0


def test_syn_without_answer_is_s0(tmp_path):
    row, _ = run(tmp_path, [c(0, "S", ack=0), c(0, "S", ack=0)])  # the SYN and its retransmission
    assert (row["conn_state"], row["history"]) == ("S0", "S")
    assert row["duration_us"] == 1000.0


def test_midstream_start_is_oth_without_s(tmp_path):
    pkts = [c(5000, payload=b"tail-of-request"), s(7000, payload=b"reply", ack=5015), c(5015, "A", ack=7005)]
    row, _ = run(tmp_path, pkts)
    assert row["midstream"] and row["roles_by"] == "port"
    assert (row["conn_state"], row["history"]) == ("OTH", "DdA")


CASES = {
    # name: (packets, conn_state, history)
    "syn answered by rst": ([c(0, "S", ack=0), s(0, "RA", ack=1)], "REJ", "Sr"),
    "client reset after establishment": (
        handshake() + [c(1, payload=b"req"), s(1000, payload=b"resp", ack=4), c(4, "RA", ack=1004)],
        "RSTO",
        "ShADdR",
    ),
    "server reset": (handshake() + [c(1, payload=b"req"), s(1000, "RA", ack=4)], "RSTR", "ShADr"),
    "syn then rst from the client": ([c(0, "S", ack=0), c(1, "R", ack=0)], "RSTOS0", "SR"),
    # Zeek: a partial connection later closed normally is SF; the history shows no S
    "midstream closed both ways": (
        [c(5000, payload=b"x"), s(7000, "FA", ack=5001), c(5001, "FA", ack=7001), s(7001, "A", ack=5002)],
        "SF",
        "DfFa",
    ),
    "client closed, no fin back": (
        handshake() + [c(1, payload=b"req"), c(4, "FA"), s(1000, "A", ack=5)],
        "S2",
        "ShADFa",
    ),
    "server closed, no fin back": (handshake() + [s(1000, "FA", ack=1), c(1, "A", ack=1001)], "S3", "ShAf"),
    "syn then fin, no syn-ack": ([c(0, "S", ack=0), c(1, "F", ack=0)], "SH", "SF"),
    "established, not closed": (handshake() + [c(1, payload=b"req")], "S1", "ShAD"),
    # Zeek: a FIN then a RST from one side, then the other side's FIN, is a normal close
    "fin, rst, then the peer's fin": (
        handshake() + [c(1, "FA"), c(2, "RA"), s(1000, "FA", ack=2)],
        "SF",
        "ShAFRf",
    ),
    # the server's ACK past the 6 missing client bytes declares the gap: G, after its d
    "gap": (
        handshake() + [c(1, payload=b"AAAA"), c(11, payload=b"CCCC"), s(1000, payload=b"k", ack=15)],
        "S1",
        "ShADdG",
    ),
    # T, t, G, g and W, w repeat at the 1st, 10th, 100th, ... occurrence
    "ten retransmissions": (handshake() + [c(1, payload=b"abc")] * 11, "S1", "ShADTT"),
    "nine retransmissions": (handshake() + [c(1, payload=b"abc")] * 10, "S1", "ShADT"),
    "zero window from the server": (
        handshake() + [c(1, payload=b"data"), s(1000, "A", ack=5, window=0)],
        "S1",
        "ShADaw",
    ),
    # SYN+FIN is Q; FIN+RST is I (neither is an S, F or R)
    "multi-flag packets": ([c(0, "SF", ack=0), s(0, "RFA", ack=1)], "RSTR", "Qi"),
}


@pytest.mark.parametrize(("pkts", "state", "history"), CASES.values(), ids=CASES.keys())
def test_conn_state_and_history(tmp_path, pkts, state, history):
    row, _ = run(tmp_path, pkts)
    assert (row["conn_state"], row["history"]) == (state, history)


def test_history_is_cased_by_role_when_the_server_is_the_lower_endpoint(tmp_path):
    # the client 10.0.0.9 is the higher endpoint of the 4-tuple: its letters, recorded as the hi
    # side's, come out upper case all the same
    def seg(src, dst, sport, dport, seq, flags, ack):
        return Ether() / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags)

    def cli(seq, flags="PA", payload=b"", ack=1000):
        return seg("10.0.0.9", "10.0.0.2", 40001, 5555, seq, flags, ack) / payload

    def srv(seq, flags="PA", ack=1):
        return seg("10.0.0.2", "10.0.0.9", 5555, 40001, seq, flags, ack)

    pkts = [
        cli(0, "S", ack=0),
        srv(999, "SA", ack=1),
        cli(1, "A"),
        cli(1, payload=b"hi"),
        srv(1000, "RA", ack=3),
    ]
    path = tmp_path / "t.pcap"
    write_pcap(path, pkts)
    out = decode_files([str(path)], Settings.load(overrides={"ports": {"rec": [5555]}}))
    (row,) = out["streams"]
    assert row["client_ip"] == "10.0.0.9" and row["roles_by"] == "syn"
    assert (row["conn_state"], row["history"]) == ("RSTR", "ShADr")


REPO = Path(__file__).resolve().parents[2]


def _streams(path: str) -> dict[int, dict]:
    out = decode_files([str(REPO / path)], Settings.load())
    return {r["client_port"]: r for r in out["streams"]}


def test_real_loopback_kafka_capture_clean_closes_and_a_client_reset():
    # sample_data/kafka/kip848.pcap (recorded by its generator script): four connections close
    # with FIN both ways; the client of port 42472 resets after its last request (tshark shows
    # S, SA, A, data both ways, then the client's RST+ACK 1021.366 us after its SYN)
    # (frame 31, the server's 51 bytes on 42488, is the one retransmission tshark finds: its t)
    rows = _streams("sample_data/kafka/kip848.pcap")
    assert rows[42472]["duration_us"] == 1021.366
    assert {p: (r["conn_state"], r["history"]) for p, r in rows.items()} == {
        42472: ("RSTO", "ShADadR"),
        42488: ("SF", "ShADadtFf"),
        42492: ("SF", "ShADadFf"),
        42502: ("SF", "ShADadFf"),
        42516: ("SF", "ShADadFf"),
    }


def test_real_public_capture_starting_mid_stream():
    # sample_data/public/iggy-rs.pcapng: two connections are caught mid-stream (no SYN), one whole
    rows = _streams("sample_data/public/iggy-rs.pcapng")
    assert {p: (r["conn_state"], r["history"], r["midstream"]) for p, r in rows.items()} == {
        63342: ("OTH", "Da", True),
        52127: ("OTH", "DadA", True),
        52100: ("SF", "ShAaDdFf", False),
    }
