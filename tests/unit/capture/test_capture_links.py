"""Link layers, IPv4/IPv6 and TCP header parsing on scapy-built frames."""

from __future__ import annotations

import ipaddress
import random
import struct

import pytest
from capture_kit import pcap_bytes, read_path, write
from scapy.layers.inet import IP, TCP, UDP, IPOption_Router_Alert, fragment
from scapy.layers.inet6 import (
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    fragment6,
)
from scapy.layers.l2 import ARP, CookedLinux, CookedLinuxV2, Dot1AD, Dot1Q, Ether
from scapy.packet import Raw

TS = 1_700_000_000_123_456_000


def ETH(**kw):  # noqa: N802 - reads like the scapy layer it builds
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", **kw)


def read_frames(tmp_path, frames, linktype=1, snaplen=65535, **kw):
    recs = [(TS + i * 1000, bytes(f)) for i, f in enumerate(frames)]
    path = write(tmp_path, "t.pcap", pcap_bytes(recs, linktype=linktype, snaplen=snaplen))
    rows, stats = read_path(path, **kw)
    assert len(stats) == 1
    return rows, stats[0]


def tcp4(src="10.0.0.1", dst="10.0.0.2", sport=40000, dport=9092, payload=b"hello", **tcpkw):
    return IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, **tcpkw) / Raw(payload)


def test_ethernet_ipv4_tcp_all_fields(tmp_path):
    pkt = (
        ETH()
        / IP(src="10.0.0.2", dst="10.0.0.1")
        / TCP(sport=9092, dport=40000, seq=0xFFFFFFF0, ack=12345, flags="PA", window=512)
        / Raw(b"kafka-bytes")
    )
    rows, st = read_frames(tmp_path, [pkt])
    assert rows == [
        {
            "rec_offset": 24,
            "ts_ns": TS,
            "lo_ip": "10.0.0.1",
            "lo_port": 40000,
            "hi_ip": "10.0.0.2",
            "hi_port": 9092,
            "from_lo": False,
            "seq": 0xFFFFFFF0,
            "ack": 12345,
            "flags": 0x18,
            "window": 512,
            "wire_len": len(pkt),
            "payload_len": 11,
            "snap_truncated": False,
            "payload": b"kafka-bytes",
            "frame": 1,
        }
    ]
    assert st["records"] == 1 and st["tcp"] == 1 and st["bytes"] == len(pkt)
    assert st["first_ts_ns"] == st["last_ts_ns"] == TS
    assert st["errors"] == []


def test_canonical_order_compares_packed_ip_then_port(tmp_path):
    frames = [
        ETH() / tcp4("9.0.0.1", "10.0.0.1", 5000, 80),  # 9 < 10 numerically (not as strings)
        ETH() / tcp4("10.0.0.1", "9.0.0.1", 80, 5000),
        ETH() / tcp4("127.0.0.1", "127.0.0.1", 9092, 50000),  # same ip: the port decides
        ETH() / tcp4("127.0.0.1", "127.0.0.1", 50000, 9092),
    ]
    rows, _ = read_frames(tmp_path, frames)
    ends = [(r["lo_ip"], r["lo_port"], r["hi_ip"], r["hi_port"], r["from_lo"]) for r in rows]
    assert ends == [
        ("9.0.0.1", 5000, "10.0.0.1", 80, True),
        ("9.0.0.1", 5000, "10.0.0.1", 80, False),
        ("127.0.0.1", 9092, "127.0.0.1", 50000, True),
        ("127.0.0.1", 9092, "127.0.0.1", 50000, False),
    ]


def test_vlan_tags_single_qinq_and_legacy(tmp_path):
    frames = [
        ETH() / Dot1Q(vlan=10) / tcp4(payload=b"q"),
        ETH() / Dot1AD(vlan=100) / Dot1Q(vlan=200) / tcp4(payload=b"ad"),
        ETH(type=0x9100) / Dot1Q(vlan=7) / Dot1Q(vlan=8) / tcp4(payload=b"91"),
        ETH() / Dot1Q(vlan=10) / IPv6(src="2001:db8::1", dst="2001:db8::2") / TCP() / Raw(b"v6"),
    ]
    rows, st = read_frames(tmp_path, frames)
    assert [r["payload"] for r in rows] == [b"q", b"ad", b"91", b"v6"]
    assert st["tcp"] == 4 and st["malformed"] == 0


def test_linux_cooked_v1_and_v2(tmp_path):
    rows1, _ = read_frames(tmp_path, [CookedLinux(proto=0x0800) / tcp4(payload=b"sll")], linktype=113)
    assert rows1[0]["payload"] == b"sll" and rows1[0]["lo_ip"] == "10.0.0.1"
    v6 = IPv6(src="fe80::1", dst="fe80::2") / TCP(sport=1, dport=2) / Raw(b"sll2")
    rows2, _ = read_frames(tmp_path, [CookedLinuxV2(proto=0x86DD) / v6], linktype=276)
    assert rows2[0]["payload"] == b"sll2" and rows2[0]["lo_ip"] == "fe80::1"


@pytest.mark.parametrize(
    "linktype,header",
    [
        (0, struct.pack("<I", 2)),  # NULL written on a little-endian host
        (0, struct.pack(">I", 2)),  # NULL written on a big-endian host
        (108, struct.pack(">I", 2)),  # LOOP: network order
    ],
)
def test_bsd_null_loop_ipv4(tmp_path, linktype, header):
    rows, st = read_frames(tmp_path, [header + bytes(tcp4(payload=b"null4"))], linktype=linktype)
    assert [r["payload"] for r in rows] == [b"null4"] and st["tcp"] == 1


@pytest.mark.parametrize("af", [24, 28, 30])
@pytest.mark.parametrize("linktype,order", [(0, "<"), (0, ">"), (108, ">")])
def test_bsd_null_loop_ipv6(tmp_path, af, linktype, order):
    pkt = IPv6(src="::1", dst="::1") / TCP(sport=9092, dport=1234) / Raw(b"null6")
    rows, _ = read_frames(tmp_path, [struct.pack(order + "I", af) + bytes(pkt)], linktype=linktype)
    assert rows[0]["payload"] == b"null6"
    assert (rows[0]["lo_port"], rows[0]["from_lo"]) == (1234, False)


@pytest.mark.parametrize("linktype", [101, 12, 14])
def test_raw_ip_link_types(tmp_path, linktype):
    v6 = IPv6(src="2001:db8::a", dst="2001:db8::b") / TCP() / Raw(b"r6")
    rows, _ = read_frames(tmp_path, [tcp4(payload=b"r4"), v6], linktype=linktype)
    assert [r["payload"] for r in rows] == [b"r4", b"r6"]


def test_ipv4_and_ipv6_link_types(tmp_path):
    rows, _ = read_frames(tmp_path, [tcp4(payload=b"lt228")], linktype=228)
    assert rows[0]["payload"] == b"lt228"
    v6 = IPv6(src="2001:db8::a", dst="2001:db8::b") / TCP() / Raw(b"lt229")
    rows, _ = read_frames(tmp_path, [v6], linktype=229)
    assert rows[0]["payload"] == b"lt229"


def test_unknown_link_type_is_counted(tmp_path):
    rows, st = read_frames(tmp_path, [bytes(tcp4()), bytes(tcp4())], linktype=147)
    assert rows == []
    assert st["unknown_linktype"] == 2 and st["records"] == 2
    assert any("147" in e for e in st["errors"])


def test_ipv4_options_and_tcp_options(tmp_path):
    pkt = (
        ETH()
        / IP(src="10.0.0.1", dst="10.0.0.2", options=[IPOption_Router_Alert()])
        / TCP(
            sport=1, dport=2, options=[("MSS", 1460), ("SAckOK", b""), ("Timestamp", (1, 2)), ("WScale", 7)]
        )
        / Raw(b"after-options")
    )
    raw = bytes(pkt)
    assert raw[14] & 15 > 5 and raw[14 + (raw[14] & 15) * 4 + 12] >> 4 > 5
    rows, st = read_frames(tmp_path, [pkt])
    assert rows[0]["payload"] == b"after-options" and rows[0]["payload_len"] == 13


def test_ipv6_extension_headers_walked(tmp_path):
    # AH: next header, payload len ((24 / 4) - 2 = 4), reserved, SPI, sequence, 12-byte ICV
    ah = bytes([6, 4, 0, 0]) + struct.pack(">II", 0x100, 1) + b"\xaa" * 12
    pkt = (
        IPv6(src="2001:db8::1", dst="2001:db8::2", nh=0)
        / IPv6ExtHdrHopByHop(nh=43)
        / IPv6ExtHdrRouting(nh=60, addresses=["2001:db8::99"])
        / IPv6ExtHdrDestOpt(nh=51)
        / Raw(ah + bytes(TCP(sport=5555, dport=9092, flags="S", seq=7)))
    )
    rows, st = read_frames(tmp_path, [pkt], linktype=101)
    assert len(rows) == 1
    r = rows[0]
    assert (r["lo_ip"], r["lo_port"], r["seq"], r["flags"], r["payload_len"]) == (
        "2001:db8::1",
        5555,
        7,
        2,
        0,
    )


def test_ethernet_padding_is_not_payload(tmp_path):
    pkt = ETH() / tcp4(payload=b"", flags="A")
    frame = bytes(pkt) + b"\xee" * 6  # a 60-byte minimum frame with non-zero padding
    rows, _ = read_frames(tmp_path, [frame])
    assert rows[0]["payload"] == b"" and rows[0]["payload_len"] == 0 and not rows[0]["snap_truncated"]
    assert rows[0]["wire_len"] == 60


def test_snap_truncation(tmp_path):
    big = ETH() / tcp4(payload=b"x" * 200)
    opts = ETH() / IP() / TCP(options=[("Timestamp", (1, 2)), ("NOP", None), ("NOP", None)]) / Raw(b"y" * 10)
    rows, st = read_frames(tmp_path, [big, opts], snaplen=60)
    assert rows[0]["payload_len"] == 200 and rows[0]["payload"] == b"x" * 6 and rows[0]["snap_truncated"]
    assert rows[0]["wire_len"] == len(big)
    # cut inside the TCP options: still a row (ports, seq, flags), with no payload
    assert rows[1]["payload_len"] == 10 and rows[1]["payload"] == b"" and rows[1]["snap_truncated"]
    assert st["snap_truncated"] == 2
    # cut inside the TCP base header: no row, a truncated header counts as malformed
    rows, st = read_frames(tmp_path, [big], snaplen=44)
    assert rows == [] and st["malformed"] == 1 and st["snap_truncated"] == 0


def test_malformed_and_other_traffic_counted(tmp_path):
    bad_doff = bytearray(bytes(ETH() / tcp4(payload=b"abc")))
    bad_doff[14 + 20 + 12] = 0x30  # data offset 3 words
    big_doff = bytearray(bytes(ETH() / tcp4(payload=b"")))
    big_doff[14 + 20 + 12] = 0xF0  # 60 bytes of header, but the IP datagram holds only 20
    short_ip = bytes(ETH() / tcp4())[: 14 + 12]
    bad_ihl = bytearray(bytes(ETH() / tcp4()))
    bad_ihl[14] = 0x43
    frames = [
        bytes(bad_doff),
        bytes(big_doff),
        short_ip,
        bytes(bad_ihl),
        ETH() / IP() / UDP() / Raw(b"dns?"),
        ETH() / ARP(),
        ETH() / IP(proto=1) / Raw(b"icmp"),
        b"\x00" * 5,
        ETH() / tcp4(payload=b"ok"),
    ]
    rows, st = read_frames(tmp_path, frames)
    assert [r["payload"] for r in rows] == [b"ok"]
    assert st["malformed"] == 5 and st["udp"] == 1 and st["other"] == 2 and st["tcp"] == 1
    assert st["records"] == len(frames)


def test_ipv4_fragments_reassembled_in_any_order(tmp_path):
    payload = bytes(range(256)) * 8
    whole = IP(src="10.1.1.1", dst="10.2.2.2", id=777) / TCP(sport=1111, dport=9092, seq=99) / Raw(payload)
    frags = fragment(whole, fragsize=400)
    assert len(frags) > 3
    order = [frags[2], frags[0], frags[-1], *frags[3:-1], frags[1]]
    rows, st = read_frames(tmp_path, [ETH() / f for f in order])
    assert len(rows) == 1
    r = rows[0]
    assert r["payload"] == payload and r["payload_len"] == len(payload) and r["seq"] == 99
    assert r["rec_offset"] > 24  # the record that completed the datagram
    assert st["ip_fragments"] == len(frags) and st["fragments_reassembled"] == 1
    assert st["fragments_unreassembled"] == 0 and st["tcp"] == 1


def test_non_first_fragment_never_parsed_as_tcp(tmp_path):
    # the second fragment's data is itself a valid-looking TCP header: it must not become a row
    fake_tcp = bytes(TCP(sport=4444, dport=9092, flags="S")) + b"data"
    frag2 = IP(src="10.0.0.1", dst="10.0.0.2", id=5, proto=6, frag=3, flags=0) / Raw(fake_tcp)
    first_only = IP(src="10.0.0.1", dst="10.0.0.2", id=6, proto=6, flags="MF") / Raw(fake_tcp)
    rows, st = read_frames(tmp_path, [ETH() / frag2, ETH() / first_only])
    assert rows == []
    assert st["ip_fragments"] == 2 and st["fragments_unreassembled"] == 2 and st["tcp"] == 0


def test_fragment_table_bounded(tmp_path):
    frames = []
    for ident in range(5):  # five datagrams, each missing its last fragment
        frames.append(
            ETH() / IP(src="10.0.0.1", dst="10.0.0.2", id=ident, proto=6, flags="MF") / Raw(b"a" * 32)
        )
    whole = fragment(IP(src="10.0.0.1", dst="10.0.0.2", id=99) / TCP() / Raw(b"z" * 100), fragsize=48)
    frames += [ETH() / f for f in whole]
    rows, st = read_frames(tmp_path, frames, max_pending_fragments=2)
    assert [r["payload"] for r in rows] == [b"z" * 100]
    assert st["fragments_reassembled"] == 1 and st["fragments_unreassembled"] == 5


def test_ipv6_fragments_reassembled(tmp_path):
    payload = b"p" * 3000
    pkt = (
        IPv6(src="2001:db8::1", dst="2001:db8::2")
        / IPv6ExtHdrFragment(id=42)
        / TCP(sport=7, dport=9092)
        / Raw(payload)
    )
    frags = fragment6(pkt, 1280)
    assert len(frags) == 3
    rows, st = read_frames(tmp_path, [ETH() / f for f in reversed(frags)])
    assert len(rows) == 1 and rows[0]["payload"] == payload and rows[0]["lo_port"] == 7
    assert st["ip_fragments"] == 3 and st["fragments_reassembled"] == 1
    # an atomic fragment header (offset 0, M=0) is not a fragment
    atomic = IPv6(src="::1", dst="::2") / IPv6ExtHdrFragment(id=1, m=0, offset=0) / TCP() / Raw(b"atom")
    rows, st = read_frames(tmp_path, [ETH() / atomic])
    assert rows[0]["payload"] == b"atom" and st["ip_fragments"] == 0


def test_random_mix_matches_scapy_dissection(tmp_path):
    rnd = random.Random(7)
    frames = []
    for _ in range(200):
        if rnd.random() < 0.5:
            ip = IP(
                src=str(ipaddress.IPv4Address(rnd.getrandbits(32))),
                dst=str(ipaddress.IPv4Address(rnd.getrandbits(32))),
            )
        else:
            ip = IPv6(
                src=str(ipaddress.IPv6Address(rnd.getrandbits(128) & ~(0xFFFF << 80))),
                dst=str(ipaddress.IPv6Address(rnd.getrandbits(128))),
            )
        tcp = TCP(
            sport=rnd.randrange(65536),
            dport=rnd.randrange(65536),
            seq=rnd.getrandbits(32),
            ack=rnd.getrandbits(32),
            flags=rnd.randrange(256),
            window=rnd.randrange(65536),
        )
        frames.append(ETH() / ip / tcp / Raw(rnd.randbytes(rnd.randrange(0, 300))))
    rows, st = read_frames(tmp_path, frames)
    assert len(rows) == 200 and st["tcp"] == 200
    for row, frame in zip(rows, frames, strict=True):
        pkt = Ether(bytes(frame))
        ipl = pkt[IP] if IP in pkt else pkt[IPv6]
        t = pkt[TCP]
        src = (str(ipaddress.ip_address(ipl.src)), t.sport)
        dst = (str(ipaddress.ip_address(ipl.dst)), t.dport)
        key = lambda e: (ipaddress.ip_address(e[0]).packed, e[1])  # noqa: E731
        lo, hi = sorted([src, dst], key=key)
        assert (row["lo_ip"], row["lo_port"], row["hi_ip"], row["hi_port"]) == (*lo, *hi)
        assert row["from_lo"] == (src == lo)
        assert (row["seq"], row["ack"], row["flags"], row["window"]) == (t.seq, t.ack, int(t.flags), t.window)
        assert row["payload"] == bytes(t.payload)
