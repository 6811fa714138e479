"""Cross-check against Wireshark: files re-written by editcap/mergecap (pcapng with several
interfaces, nanosecond pcap) read to the same segments, and every segment matches what tshark
dissects. Skipped where the Wireshark command-line tools are not installed."""

from __future__ import annotations

import random
import shutil
import subprocess
from decimal import Decimal

import pytest
from capture_kit import pcap_bytes, read_path, write
from scapy.layers.inet import IP, TCP, UDP, IPOption_Router_Alert, fragment
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from scapy.packet import Raw

TOOLS = all(shutil.which(t) for t in ("tshark", "editcap", "mergecap"))
pytestmark = pytest.mark.skipif(not TOOLS, reason="tshark/editcap/mergecap not installed")
TS = 1_700_000_000_000_000_000
E = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def _eth_frames() -> list[bytes]:
    rnd = random.Random(9)
    out = []
    for i in range(60):
        tcp = TCP(
            sport=30000 + i,
            dport=9092,
            seq=rnd.getrandbits(32),
            ack=rnd.getrandbits(32),
            flags=rnd.choice(["S", "SA", "A", "PA", "FA", "R"]),
            window=rnd.randrange(65536),
        )
        data = Raw(rnd.randbytes(rnd.randrange(0, 200)))
        kind = i % 6
        if kind == 0:
            f = Ether(**E) / IP(src="10.0.0.1", dst="10.0.0.2") / tcp / data
        elif kind == 1:
            f = (
                Ether(**E)
                / Dot1Q(vlan=5)
                / IP(src="10.0.0.3", dst="10.0.0.2", options=[IPOption_Router_Alert()])
                / tcp
                / data
            )
        elif kind == 2:
            f = (
                Ether(**E)
                / Dot1AD(vlan=1)
                / Dot1Q(vlan=2)
                / IPv6(src="2001:db8::1", dst="2001:db8::2")
                / tcp
                / data
            )
        elif kind == 3:
            f = (
                Ether(**E)
                / IPv6(src="fe80::1", dst="fe80::2")
                / IPv6ExtHdrHopByHop()
                / IPv6ExtHdrDestOpt()
                / tcp
                / data
            )
        elif kind == 4:
            f = Ether(**E) / IP(src="10.0.0.9", dst="10.0.0.2") / UDP() / data
        else:
            f = (
                Ether(**E)
                / IP(src="10.0.0.4", dst="10.0.0.2")
                / TCP(sport=1, dport=2, options=[("MSS", 1460), ("SAckOK", b"")])
                / data
            )
        out.append(bytes(f) + (b"\0" * max(0, 60 - len(f))))  # pad short frames like a NIC
    whole = (
        IP(src="10.7.7.7", dst="10.0.0.2", id=4242)
        / TCP(sport=5555, dport=9092, flags="PA")
        / Raw(b"F" * 900)
    )
    out += [bytes(Ether(**E) / f) for f in fragment(whole, fragsize=300)]
    return out


def _raw_frames() -> list[bytes]:
    return [
        bytes(
            IP(src="192.168.1.1", dst="192.168.1.2") / TCP(sport=7000 + i, dport=9092, seq=i) / Raw(b"r" * i)
        )
        for i in range(20)
    ]


def _tshark(path: str) -> list[tuple]:
    fields = [
        "tcp.srcport",
        "tcp.dstport",
        "tcp.seq_raw",
        "tcp.ack_raw",
        "tcp.flags",
        "tcp.window_size_value",
        "tcp.len",
        "frame.time_epoch",
    ]
    cmd = [
        "tshark",
        "-n",
        "-r",
        path,
        "-Y",
        "tcp",
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-o",
        "tcp.desegment_tcp_streams:FALSE",
        "-o",
        "tcp.analyze_sequence_numbers:FALSE",
    ]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    rows = []
    for line in out.splitlines():
        sp, dp, seq, ack, flags, win, ln, t = line.split("\t")
        rows.append(
            (
                int(sp),
                int(dp),
                int(seq),
                int(ack),
                int(flags, 16),
                int(win),
                int(ln),
                int(Decimal(t) * 1_000_000_000),
            )
        )
    return rows


def _mine(rows) -> list[tuple]:
    out = []
    for r in rows:
        sp, dp = (r["lo_port"], r["hi_port"]) if r["from_lo"] else (r["hi_port"], r["lo_port"])
        out.append((sp, dp, r["seq"], r["ack"], r["flags"], r["window"], r["payload_len"], r["ts_ns"]))
    return out


def test_matches_tshark_across_editcap_and_mergecap_rewrites(tmp_path):
    eth = write(
        tmp_path, "eth.pcap", pcap_bytes([(TS + i * 1_000_017_000, f) for i, f in enumerate(_eth_frames())])
    )
    raw = write(
        tmp_path,
        "raw.pcap",
        pcap_bytes(
            [(TS + 500 + i * 777_000, f) for i, f in enumerate(_raw_frames())], nano=True, linktype=101
        ),
    )
    ng = str(tmp_path / "eth.pcapng")
    ns = str(tmp_path / "eth.ns.pcap")
    merged = str(tmp_path / "merged.pcapng")
    subprocess.run(["editcap", "-F", "pcapng", eth, ng], check=True, capture_output=True, timeout=60)
    subprocess.run(["editcap", "-F", "nsecpcap", eth, ns], check=True, capture_output=True, timeout=60)
    subprocess.run(
        ["mergecap", "-F", "pcapng", "-w", merged, eth, raw], check=True, capture_output=True, timeout=60
    )

    base, (st,) = read_path(eth)
    assert st["fragments_reassembled"] == 1 and st["udp"] == 10
    for path in (eth, ng, ns, merged):
        rows, _ = read_path(path)
        assert _mine(rows) == _tshark(path), path
        # fragments are reassembled within a split only: leave the fragmented datagram out here
        unfragmented = [r for r in rows if 5555 not in (r["lo_port"], r["hi_port"])]
        for size in (200, 1000):
            split_rows = read_path(path, split_size=size)[0]
            assert [r for r in split_rows if 5555 not in (r["lo_port"], r["hi_port"])] == unfragmented
    strip = lambda rows: [{k: v for k, v in r.items() if k != "rec_offset"} for r in rows]  # noqa: E731
    assert strip(read_path(ng)[0]) == strip(base) == strip(read_path(ns)[0])
    # mergecap interleaves both inputs by time over two interfaces with their own link types
    merged_rows, (mst,) = read_path(merged)
    assert len(merged_rows) == len(base) + 20 and mst["errors"] == []
