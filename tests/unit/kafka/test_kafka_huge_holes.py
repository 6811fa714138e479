"""Holes of any size in a capture of Kafka traffic: a client whose sequence numbers jump by 1 GiB
or 3 GiB (bytes the capture never saw) between two Metadata requests. The hole is measured
exactly from the broker's ACK, is one `gap` row in commands, and every request after it still
pairs with its response."""

from __future__ import annotations

import pytest

from brokerscope.streams import decode_files
from tests.support.synth import ACK, FIN, PSH, SYN, PcapWriter, frame

from .test_kafka_inference import metadata_v2_request, metadata_v2_response

CLI, SRV, PORT = "10.0.0.1", "10.0.0.2", 9092
GIB = 1 << 30


def _capture(path, hole: int, n: int = 12) -> None:
    c, s = 1000, 900_000
    pkts = [(CLI, 40000, SRV, PORT, c - 1, 0, SYN), (SRV, PORT, CLI, 40000, s - 1, c, SYN | ACK)]
    for corr in range(1, n + 1):
        if corr == 2:
            c += hole  # the capture lost `hole` bytes the client sent
        req, resp = metadata_v2_request(corr), metadata_v2_response(corr)
        pkts.append((CLI, 40000, SRV, PORT, c, s, PSH | ACK, req))
        c += len(req)
        pkts.append((SRV, PORT, CLI, 40000, s, c, PSH | ACK, resp))  # acknowledges the request
        s += len(resp)
    pkts += [(CLI, 40000, SRV, PORT, c, s, FIN | ACK), (SRV, PORT, CLI, 40000, s, c + 1, FIN | ACK)]
    w = PcapWriter(str(path))
    for i, p in enumerate(pkts):
        w.write(1_700_000_000_000_000_000 + i * 1_000_000, frame(*p))
    w.close()


@pytest.mark.parametrize("hole", [GIB, 3 * GIB, (65535 << 14) + 1])
def test_requests_after_a_huge_hole_still_pair(tmp_path, hole):
    _capture(tmp_path / "hole.pcap", hole)
    out = decode_files([str(tmp_path / "hole.pcap")])
    (st,) = out["streams"]
    assert (st["gap_count"], st["gap_bytes"], st["retransmitted_bytes"]) == (1, hole, 0)
    assert sorted(lat["correlation_id"] for lat in out["latencies"]) == list(range(1, 13))
    assert all(lat["latency_us"] >= 0 for lat in out["latencies"])
    bad = [(r["decode_status"], r["size"]) for r in out["commands"] if r["decode_status"] != "ok"]
    assert bad == [("gap", hole)]  # one row says where the bytes are missing, and how many


def test_resync_after_an_absurd_size_finds_the_real_frames():
    """A request whose size field claims 2^31-1 bytes (flagged oversize) followed by 12 valid
    Metadata requests: the resync must not lock onto a frame start read out of the client id
    bytes (its size far beyond the buffer, its correlation id out of sequence); every request
    after it pairs with its response."""
    from .kit import Driver

    bad = bytearray(metadata_v2_request(1))
    bad[0:4] = (2**31 - 1).to_bytes(4, "big")
    reqs = bytes(bad) + b"".join(metadata_v2_request(c) for c in range(2, 14))
    d = Driver().c2s(metadata_v2_request(0)).s2c(metadata_v2_response(0)).c2s(reqs, chunk=97)
    out = d.s2c(b"".join(metadata_v2_response(c) for c in range(2, 14))).close()
    assert sorted(lat["correlation_id"] for lat in out["latencies"]) == [0, *range(2, 14)]
    statuses = [(r["direction"], r["correlation_id"], r["decode_status"]) for r in out["commands"]]
    assert [s for s in statuses if s[2] != "ok"][:1] == [("c2s", 1, "oversize")]
    assert sum(s[2] == "ok" for s in statuses) == 26
