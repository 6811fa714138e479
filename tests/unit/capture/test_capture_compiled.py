"""The compiled record walk (capture/_walk.c) against the Python reader it stands in for.

Every batch of `read_split` with the compiled walks must equal the batch the Python handlers
produce alone (`compiled=False`, the reference), counters batch included: on every capture the
repository and the shared capture set hold, from whole splits and mid-file split starts, with and
without an ingest filter and payload offsets; and on crafted records the walk must hand back
(truncated or absurd headers, fragments, options, other link types and transports).
"""

from __future__ import annotations

import gzip
import ipaddress
import os
import struct
from pathlib import Path

import pyarrow as pa
import pytest
from capture_kit import epb, idb, pcap_bytes, shb, spb, write
from scapy.layers.inet import IP, TCP, UDP, IPOption_Router_Alert, fragment
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt
from scapy.layers.l2 import CookedLinux, CookedLinuxV2, Dot1AD, Dot1Q, Ether
from scapy.packet import Raw

from brokerscope.capture import capture_id, identify, parse_stats, plan_splits, read_split
from brokerscope.capture.decode import READ_PYTHON_ENV, PacketDecoder, compiled_default, ip6_name
from brokerscope.capture.files import KINDS
from brokerscope.capture.filter import PacketFilter

ROOT = Path(__file__).resolve().parents[3]
CAPTURE_DIRS = (ROOT / "sample_data", ROOT / "tests" / "data", Path("/work/shared/captures"))
BENCH = Path("/tmp/brokerscope-bench-60MB.pcap")  # bench/read_bench.py's synthetic capture
TS = 1_700_000_000_123_456_000


def captures() -> list[str]:
    out = []
    for root in CAPTURE_DIRS:
        for d, _, files in os.walk(root):
            for f in sorted(files):
                p = os.path.join(d, f)
                if identify(p) in KINDS:
                    out.append(p)
    return sorted(out)


def both(sp, **kw) -> tuple[list[pa.RecordBatch], list[pa.RecordBatch]]:
    return list(read_split(sp, compiled=True, **kw)), list(read_split(sp, compiled=False, **kw))


def assert_same(got: list[pa.RecordBatch], want: list[pa.RecordBatch], what: str) -> None:
    assert len(got) == len(want), f"{what}: {len(got)} batches, Python {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if parse_stats(w) is not None:
            assert parse_stats(g) == parse_stats(w), what
        assert g.schema.equals(w.schema), what
        for name in w.schema.names:
            assert g.column(name).equals(w.column(name)), f"{what}: batch {i} column {name} differs"


def filters(path: str) -> list[PacketFilter | None]:
    """No filter, and filters that cut the capture: its median time, one of its hosts (and
    that host's network with a port and an end time), one of its ports."""
    sp = plan_splits(path, 0, capture_id(path), identify(path), 0)[0]
    batches = list(read_split(sp, compiled=False))[:-1]
    rows = pa.Table.from_batches(batches) if batches else None
    if rows is None or not rows.num_rows:
        return [None, PacketFilter.parse(ports=[9092])]
    ts = sorted(rows.column("ts_ns").to_pylist())
    mid = f"{ts[len(ts) // 2] / 1e9:.6f}"
    ip = rows.column("lo_ip")[0].as_py()
    port = rows.column("hi_port")[0].as_py()
    net = ip + ("/64" if ":" in ip else "/16")
    return [
        None,
        PacketFilter.parse(since=mid),
        PacketFilter.parse(hosts=[ip]),
        PacketFilter.parse(ports=[port]),
        PacketFilter.parse(hosts=[net], ports=[port], until=mid),
    ]


@pytest.mark.parametrize("path", captures(), ids=lambda p: os.path.relpath(p, ROOT))
def test_every_capture_reads_the_same(path):
    kind = identify(path)
    cid = capture_id(path)
    for flt in filters(path):
        for split_size in (0, 4096, 50_000):  # whole files, and splits starting mid-file
            for refs in (False, True):
                for sp in plan_splits(path, 0, cid, kind, split_size):
                    got, want = both(sp, batch_packets=64, payload_refs=refs, flt=flt)
                    assert_same(got, want, f"{path} split {sp.start} refs {refs} filter {flt}")


@pytest.mark.skipif(not BENCH.exists(), reason=f"{BENCH} not generated (bench/read_bench.py --generate)")
def test_bench_capture_reads_the_same():
    path = str(BENCH)
    splits = plan_splits(path, 0, capture_id(path), "pcap", 8 << 20)
    first = next(read_split(splits[0], batch_packets=10, compiled=False))
    flt = PacketFilter.parse(ports=[first.column("hi_port")[0].as_py()])
    for sp in (splits[0], splits[len(splits) // 2], splits[-1]):
        for kw in ({"payload_refs": True}, {"flt": flt, "batch_packets": 1000}):
            got, want = both(sp, **kw)
            assert_same(got, want, f"bench split {sp.start} {kw}")
            assert sum(b.num_rows for b in got[:-1]) > 1000  # the walk took real traffic


# ------------------------------------------------------------------------------------------------
# crafted records


def ETH(**kw):  # noqa: N802 - reads like the scapy layer it builds
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", **kw)


def tcp4(src="10.0.0.1", dst="10.0.0.2", sport=40000, dport=9092, payload=b"hello", **kw):
    return IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, **kw) / Raw(payload)


def tcp6(src="fd00::1", dst="fd00::2", sport=40000, dport=9092, payload=b"hello6"):
    return IPv6(src=src, dst=dst) / TCP(sport=sport, dport=dport) / Raw(payload)


def patch(frame: bytes, at: int, value: bytes) -> bytes:
    return frame[:at] + value + frame[at + len(value) :]


GOOD = bytes(ETH() / tcp4())
GOOD_BACK = bytes(ETH() / tcp4(src="10.0.0.2", dst="10.0.0.1", sport=9092, dport=40000, payload=b"reply"))


# IPv4 options (4 bytes) and TCP options (12 bytes), no payload
OPTS = bytes(
    ETH()
    / IP(src="10.0.0.1", dst="10.0.0.2", options=[IPOption_Router_Alert()])
    / TCP(
        sport=1,
        dport=9092,
        options=[("MSS", 1460), ("NOP", None), ("WScale", 7), ("SAckOK", b""), ("NOP", None), ("NOP", None)],
    )
)


def odd_frames() -> list[tuple[str, bytes, int | None]]:
    """(what, Ethernet frame, origlen or None) of every kind the walk must hand back or get
    right, between good ones."""
    eth_ip = 14  # the IPv4 header's offset in an untagged frame
    ip_tcp = eth_ip + 20
    frames = [
        ("truncated IP header", GOOD[: eth_ip + 12], None),
        ("truncated TCP header", GOOD[: ip_tcp + 10], len(GOOD)),
        ("IP total length 0 (offload)", patch(GOOD, eth_ip + 2, b"\0\0"), None),
        ("IP total length below its header", patch(GOOD, eth_ip + 2, struct.pack(">H", 12)), None),
        ("IP total length below IP + TCP", patch(GOOD, eth_ip + 2, struct.pack(">H", 30)), None),
        ("IP total length past the frame", patch(GOOD, eth_ip + 2, struct.pack(">H", 60000)), None),
        ("IP total length ends at the TCP header", patch(GOOD, eth_ip + 2, struct.pack(">H", 40)), None),
        ("IHL below 5", patch(GOOD, eth_ip, b"\x44"), None),
        ("IP version 7", patch(GOOD, eth_ip, b"\x75"), None),
        ("TCP data offset below 5", patch(GOOD, ip_tcp + 12, b"\x30"), None),
        ("TCP data offset past the datagram", patch(GOOD, ip_tcp + 12, b"\xf0"), None),
        (
            "IP options",
            bytes(
                ETH()
                / IP(src="10.0.0.1", dst="10.0.0.2", options=[IPOption_Router_Alert()])
                / TCP(sport=1, dport=9092)
                / Raw(b"opt")
            ),
            None,
        ),
        ("IP options, TCP options cut by the snap length", OPTS[: eth_ip + 24 + 24], len(OPTS)),
        ("IP options, TCP header cut", OPTS[: eth_ip + 24 + 12], len(OPTS)),
        ("UDP", bytes(ETH() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=5, dport=53) / Raw(b"q")), None),
        ("ARP-like EtherType", patch(GOOD, 12, b"\x08\x06"), None),
        ("802.1Q", bytes(ETH() / Dot1Q(vlan=7) / tcp4(payload=b"vlan")), None),
        ("802.1ad + 802.1Q", bytes(ETH() / Dot1AD(vlan=3) / Dot1Q(vlan=7) / tcp4(payload=b"qinq")), None),
        ("VLAN tag cut", bytes(ETH() / Dot1Q(vlan=7) / tcp4())[:16], None),
        ("IPv6", bytes(ETH() / tcp6()), None),
        ("IPv6 payload length 0", patch(bytes(ETH() / tcp6()), eth_ip + 4, b"\0\0"), None),
        (
            "IPv6 extension header",
            bytes(
                ETH()
                / IPv6(src="fd00::1", dst="fd00::2")
                / IPv6ExtHdrDestOpt()
                / TCP(sport=1, dport=9092)
                / Raw(b"ext")
            ),
            None,
        ),
        ("IPv6 cut", bytes(ETH() / tcp6())[:50], None),
        ("snap-truncated payload", GOOD[:-2], len(GOOD)),
        ("caplen over origlen", GOOD, len(GOOD) - 3),
        ("empty frame", b"", 60),
        ("huge origlen", GOOD, 0xFFFFFFFF),
        ("Ethernet header cut", GOOD[:10], None),
        ("TCP header only, empty payload", bytes(ETH() / tcp4(payload=b"")), None),
        ("same endpoints", bytes(ETH() / tcp4(src="10.0.0.9", dst="10.0.0.9", sport=7, dport=5)), None),
    ]
    for i, part in enumerate(fragment(tcp4(payload=b"F" * 64), fragsize=24)):
        frames.append((f"IPv4 fragment {i}", bytes(ETH() / part), None))
    return frames


def records(frames, step: int = 1000) -> list[tuple]:
    out = []
    for i, (_, frame, orig) in enumerate(frames):
        rec = (TS + i * step, frame) if orig is None else (TS + i * step, frame, orig)
        out.append(rec)
        out.append((TS + i * step + 1, GOOD if i % 2 else GOOD_BACK))
    return out


def check_file(tmp_path, name: str, data: bytes, *, split_sizes=(0, 97, 400)) -> None:
    path = write(tmp_path, name, data)
    kind = identify(path)
    if kind.endswith(".gz"):
        split_sizes = (0,)
    flts = [
        None,
        PacketFilter.parse(ports=[40000]),
        PacketFilter.parse(hosts=["10.0.0.2", "fd00::2"]),
        PacketFilter.parse(since=str((TS + 5000) / 1e9), until=str((TS + 20000) / 1e9)),
    ]
    for split_size in split_sizes:
        for sp in plan_splits(path, 0, capture_id(path), kind, split_size):
            for flt in flts:
                for bp in (1, 3, 8192):
                    for refs in (False, True):
                        got, want = both(sp, batch_packets=bp, payload_refs=refs, flt=flt)
                        assert_same(got, want, f"{name} split {sp.start} bp {bp} refs {refs} filter {flt}")


def test_crafted_records_ethernet(tmp_path):
    frames = odd_frames()
    check_file(tmp_path, "odd.pcap", pcap_bytes(records(frames), snaplen=0))
    check_file(tmp_path, "odd-be-ns.pcap", pcap_bytes(records(frames), order=">", nano=True, snaplen=200))
    check_file(tmp_path, "odd.pcap.gz", gzip.compress(pcap_bytes(records(frames))))


def test_crafted_record_headers(tmp_path):
    """Absurd caplens and fractions (resync), a cut last record, a snaplen smaller than records."""
    recs = records(odd_frames()[:6]) + [(TS + 10**6 + i, GOOD) for i in range(20)]
    base = pcap_bytes(recs)
    third = 24 + sum(16 + len(r[1]) for r in recs[:2])  # the third record's header
    bad_caplen = base[: third + 8] + struct.pack("<I", 50_000_000) + base[third + 12 :]
    bad_frac = base[: third + 4] + struct.pack("<I", 2_000_000) + base[third + 8 :]
    # records longer than the header's snap length (read as captured, counted)
    small_snap = base[:16] + struct.pack("<I", 50) + base[20:]
    for name, data in (
        ("snaplen.pcap", small_snap),
        ("caplen.pcap", bad_caplen),
        ("frac.pcap", bad_frac),
        ("cut.pcap", base[:-7]),
        ("garbage.pcap", base[:200] + b"\xff" * 333 + base[200:]),
    ):
        check_file(tmp_path, name, data)


@pytest.mark.parametrize(
    ("linktype", "frame"),
    [
        (113, CookedLinux(proto=0x0800) / tcp4()),
        (113, CookedLinux(proto=0x86DD) / tcp6()),
        (276, CookedLinuxV2(proto=0x0800) / tcp4()),
        (0, struct.pack("<I", 2) + bytes(tcp4())),
        (0, struct.pack(">I", 30) + bytes(tcp6())),
        (0, struct.pack("<I", 99) + bytes(tcp4())),
        (108, struct.pack(">I", 2) + bytes(tcp4())),
        (101, tcp4()),
        (101, tcp6()),
        (101, b"\x50" + bytes(tcp4())[1:]),
        (12, tcp4()),
        (14, tcp6()),
        (228, tcp4()),
        (229, tcp6()),
        (147, tcp4()),  # a user link type: unknown
        (1 | 0x10000000, ETH() / tcp4()),  # FCS bits above the link type
    ],
)
def test_crafted_link_types(tmp_path, linktype, frame):
    frame = bytes(frame)
    recs = [(TS + i, frame[: len(frame) - (i % 3)], len(frame)) for i in range(6)]
    check_file(tmp_path, "lt.pcap", pcap_bytes(recs, linktype=linktype), split_sizes=(0, 60))


def test_crafted_pcapng(tmp_path):
    """EPBs of several interfaces (link types, snap lengths, time resolutions and offsets), with
    the blocks the walk leaves to Python between them: SPB, an IDB in mid-section, a second
    section in the other byte order, an EPB of an unknown interface, a bad trailer."""
    frames = [f for _, f, _ in odd_frames()]
    six = bytes(CookedLinux(proto=0x86DD) / tcp6())
    for order in ("<", ">"):
        out = [
            shb(order),
            idb(order, 1),
            idb(order, 113, snaplen=64, tsresol=9),
            idb(order, 1, tsresol=0x83, tsoffset=-5),
        ]
        for i, f in enumerate(frames):
            out.append(epb(order, i % 3 if i % 3 != 1 else 0, 1_700_000_000_000_000 + i, f))
            out.append(epb(order, 1, 1_700_000_000_000_000_000 + i, six, snaplen=50 if i % 4 == 0 else 0))
            out.append(epb(order, 2, 800_000_000 + i, GOOD))
        out += [
            epb(order, 0, 1 << 62, GOOD),
            spb(order, GOOD),
            idb(order, 101),
            epb(order, 3, 5, bytes(tcp4())),
            epb(order, 9, 5, GOOD),
        ]
        broken = epb(order, 0, 7, GOOD)
        out.append(broken[:-4] + struct.pack(order + "I", len(broken) + 4))
        out += [epb(order, 0, 8, GOOD)] * 3
        other = ">" if order == "<" else "<"
        out += [
            shb(other),
            idb(other, 1, tsresol=0xFF),
            epb(other, 0, 1, GOOD),
            idb(other, 1, tsresol=100),
            epb(other, 1, 1, GOOD),
            epb(other, 0, 1 << 63, GOOD),
        ]
        check_file(tmp_path, f"odd{order == '>'}.pcapng", b"".join(out), split_sizes=(0, 300, 1000))


# ------------------------------------------------------------------------------------------------
# the walk itself


def test_walk_takes_the_common_records_and_stops_at_the_first_other():
    """Packets.pcap on real bytes: it takes the TCP records, counts and numbers them, and returns
    at the UDP record, untouched, for the Python reader."""
    good = [(TS + i, GOOD if i % 2 else GOOD_BACK) for i in range(5)]
    udp = bytes(ETH() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=5, dport=53) / Raw(b"q"))
    data = pcap_bytes(good + [(TS + 9, udp)] + good)
    dec = PacketDecoder("cid", 0, compiled=True)
    dec.native.pcap_file(False, 1000, 1_000_000, 1 << 20, 65535, 1, -(1 << 80), 1 << 80, False)
    p, records, nbytes, full, last_s = dec.native.pcap(data, 24, 0, len(data), 0, 0, 1 << 40, 8192)
    assert (records, full, last_s) == (5, False, TS // 10**9)
    assert data[p + 16 + 14 + 9] == 17  # stopped at the UDP record
    assert nbytes == 3 * len(GOOD_BACK) + 2 * len(GOOD)
    batch = dec.flush()
    assert batch.column("record_no").to_pylist() == [1, 2, 3, 4, 5]
    assert batch.column("payload").to_pylist() == [b"reply", b"hello"] * 2 + [b"reply"]
    assert batch.column("lo_ip").to_pylist() == ["10.0.0.1"] * 5
    assert batch.column("from_lo").to_pylist() == [False, True, False, True, False]
    # a batch limit of 2 rows: the walk stops after the second row and says so
    p2, records, _, full, _ = dec.native.pcap(data, 24, 0, len(data), 0, 0, 1 << 40, 2)
    assert (records, full) == (2, True)
    assert dec.flush().num_rows == 2


def test_ipv6_names_are_pythons():
    """IPv6 names in compressed form exactly as ipaddress writes them (zero runs, mapped IPv4)."""
    addrs = ("fd00::1", "1:0:0:1:0:0:0:1", "::", "fe80::", "::ffff:1.2.3.4", "2001:db8:0:0:1:0:0:0")
    # and one more record: the walk leaves the last one of the data to reader.py (no header after it
    # tells that its caplen is sound)
    data = pcap_bytes([(TS, bytes(tcp6(src=s, dst="::2"))) for s in (*addrs, "::")], linktype=229)
    dec = PacketDecoder("cid", 0, compiled=True)
    dec.native.pcap_file(False, 1000, 1_000_000, 1 << 20, 65535, 229, -(1 << 80), 1 << 80, False)
    dec.native.pcap(data, 24, 0, len(data), 0, 0, 1 << 40, 8192)
    batch = dec.flush()
    names = set(batch.column("lo_ip").to_pylist() + batch.column("hi_ip").to_pylist())
    assert names == {ip6_name(ipaddress.IPv6Address(a).packed) for a in (*addrs, "::2")}


def test_python_reader_forced_by_environment(monkeypatch):
    monkeypatch.setenv(READ_PYTHON_ENV, "1")
    assert compiled_default() is False
    monkeypatch.delenv(READ_PYTHON_ENV)
    assert compiled_default() is True
