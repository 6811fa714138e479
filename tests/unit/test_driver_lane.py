"""The stream driver's lane (TcpConnection.take): packets that continue their connection in order
reach the decoder without reassembly events. Rows must be exactly those of the event path."""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.utils import rdpcap, wrpcap

from brokerscope import streams
from brokerscope.config import Settings
from brokerscope.streams import decode_files
from brokerscope.tcp import TcpConnection
from tests.conftest import CAPTURES, ROOT
from tests.unit.tls.legs import private_copy

SAMPLES = ROOT / "sample_data"


def resegmented(src: Path, dst: Path, mss: int) -> Path:
    """`src` with every TCP payload longer than `mss` sent as mss-sized segments (as a real
    network would carry a loopback capture's 64 KB segments), each its own frame."""
    out = []
    for p in rdpcap(str(src)):
        data = bytes(p[TCP].payload) if TCP in p else b""
        if len(data) <= mss:
            out.append(p)
            continue
        for at in range(0, len(data), mss):
            q = p.copy()
            q[TCP].remove_payload()
            q[TCP].seq = (p[TCP].seq + at) & 0xFFFFFFFF
            q[TCP].add_payload(data[at : at + mss])
            if IP in q:
                del q[IP].len, q[IP].chksum
            if IPv6 in q:
                del q[IPv6].plen
            del q[TCP].chksum
            q.time, q.wirelen = p.time, None
            out.append(q)
    wrpcap(str(dst), out)
    return dst


def _rows(paths: list[str], settings: Settings) -> dict:
    out = decode_files(paths, settings)
    return {t: sorted(map(repr, rows)) for t, rows in out.items()}


def take_run(cols, k: int, end: int, tcp: TcpConnection, key: tuple, cid: str) -> tuple[int, list]:
    """tcp/_lane.c's run written with TcpConnection.take, packet by packet: the reference."""
    lo_ips, lo_ps, hi_ips, hi_ps, tss, fls, seqs, acks, fgs, wins, pls, plens, wls, sts, _, cids, _, _ = cols
    runs: list = []
    j = k
    while j < end:
        if lo_ips[j] is None or (lo_ips[j], lo_ps[j], hi_ips[j], hi_ps[j]) != key or cids[j] != cid:
            break
        pl, plen = pls[j], plens[j]
        if sts[j] is not False or not isinstance(pl, bytes) or len(pl) != plen:
            break
        if not tcp.take(fls[j], seqs[j], acks[j], fgs[j], wins[j], plen, wls[j], tss[j]):
            break
        if plen:
            if not runs or runs[-1][0] != fls[j]:
                runs.append((fls[j], []))
            runs[-1][1].append(j)
        j += 1
    return j, runs


def _both(monkeypatch, paths: list[str], settings: Settings | None = None) -> tuple[dict, dict, int]:
    """Rows with the compiled lane, and how many packets it took; the rows with the lane
    written with TcpConnection.take and without a lane (every packet through
    TcpConnection.add) must be the same (asserted here)."""
    settings = settings or Settings.load()
    taken = 0
    real = streams._lane_run

    def counting(cols, k, *a):
        nonlocal taken
        j, runs = real(cols, k, *a)
        taken += j - k
        return j, runs

    monkeypatch.setattr(streams, "_lane_run", counting)
    lane = _rows(paths, settings)
    monkeypatch.setattr(streams, "_lane_run", take_run)
    assert _rows(paths, settings) == lane
    monkeypatch.setattr(streams, "_lane_run", lambda cols, k, *a: (k, []))
    events = _rows(paths, settings)
    return lane, events, taken


@pytest.mark.parametrize(
    "name",
    ["kafka/lz4.pcap", "kafka/txn.pcap", "pulsar/pulsar_chunked.pcap", "tubemq/tubemq_default_ports.pcap"],
)
def test_lane_rows_are_the_event_path_rows_on_mss_sized_segments(tmp_path, monkeypatch, name):
    path = resegmented(SAMPLES / name, tmp_path / "mss.pcap", 1448)
    lane, events, taken = _both(monkeypatch, [str(path)])
    assert lane == events
    assert taken > 20
    assert len(lane["messages"]) > 0


def test_lane_rows_are_the_event_path_rows_on_real_captures(tmp_path, monkeypatch):
    # retransmissions and a gap (ndpi), iggy, TLS (decrypted with its key log: never the lane)
    paths = [
        str(CAPTURES / "ndpi" / "kafka.pcapng"),
        str(CAPTURES / "iggy" / "rs.pcapng"),
        str(ROOT / "tests" / "data" / "tls" / "kafka_tls13_tls.pcap"),
    ]
    keys = private_copy(tmp_path, "kafka_tls13_keys.log")
    settings = Settings.load(overrides={"tls": {"keylog_files": [keys]}})
    lane, events, taken = _both(monkeypatch, paths, settings)
    assert lane == events
    assert taken > 0
    for proto in ("kafka", "iggy"):
        assert any(f"'protocol': '{proto}'" in r for r in lane["commands"])
    assert any("'tls_decrypted': 'yes'" in r for r in lane["streams"])


def test_lane_rows_are_the_event_path_rows_when_segments_were_never_captured(tmp_path, monkeypatch):
    """Every 40th data segment of the MSS-sized capture missing: the peer's ACKs past the hole
    declare the gap (the lane must leave those packets to TcpConnection.add), the segments after
    it are held, and the rows are the event path's."""
    full = rdpcap(str(resegmented(SAMPLES / "kafka" / "lz4.pcap", tmp_path / "mss.pcap", 1448)))
    data = [i for i, p in enumerate(full) if TCP in p and len(p[TCP].payload)]
    dropped = set(data[20::40])
    path = tmp_path / "holes.pcap"
    wrpcap(str(path), [p for i, p in enumerate(full) if i not in dropped])
    lane, events, taken = _both(monkeypatch, [str(path)])
    assert lane == events
    assert taken > 20 and any("'gap_count': 0" not in r for r in lane["streams"])
