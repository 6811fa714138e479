"""The public captures under tests/data/captures: read them whole and in tiny splits, and check
every segment against scapy's own reading of the same file."""

from __future__ import annotations

import pytest
from capture_kit import read_path
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.utils import rdpcap

from tests.conftest import CAPTURES  # noqa: E402

FILES = sorted(p for p in CAPTURES.glob("*/*") if p.suffix in (".pcap", ".pcapng"))

pytestmark = pytest.mark.skipif(not FILES, reason="public captures not present")


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_public_capture_matches_scapy_and_splits(path):
    rows, (st,) = read_path(str(path))
    assert st["errors"] == [] and st["malformed"] == 0
    want = []
    for pkt in rdpcap(str(path)):
        if TCP not in pkt:
            continue
        ip = pkt[IP] if IP in pkt else pkt[IPv6]
        t = pkt[TCP]
        plen = (ip.len - ip.ihl * 4 if IP in pkt else ip.plen) - t.dataofs * 4
        want.append(
            (t.sport, t.dport, t.seq, t.ack, int(t.flags), bytes(t.payload)[:plen], int(pkt.time * 1e6))
        )
    got = [
        (
            r["lo_port"] if r["from_lo"] else r["hi_port"],
            r["hi_port"] if r["from_lo"] else r["lo_port"],
            r["seq"],
            r["ack"],
            r["flags"],
            r["payload"],
            r["ts_ns"] // 1000,
        )
        for r in rows
    ]
    assert len(got) == len(want) == st["tcp"] > 0
    for g, w in zip(got, want, strict=True):
        assert g[:6] == w[:6]
        assert abs(g[6] - w[6]) <= 1  # scapy's float time rounds
    for size in (64, 300, 1000):
        assert read_path(str(path), split_size=size)[0] == rows, size
