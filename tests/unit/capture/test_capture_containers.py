"""pcap / pcapng / gzip containers, identification and capture ids."""

from __future__ import annotations

import gzip
import os
import struct

import pytest
from capture_kit import (
    custom,
    epb,
    idb,
    isb,
    nrb,
    pb,
    pcap_bytes,
    read_path,
    shb,
    spb,
    total,
    write,
)
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import CookedLinux, Ether
from scapy.packet import Raw
from scapy.utils import PcapNgWriter, rdpcap, wrpcap

from brokerscope.capture import capture_id, identify, plan_splits
from brokerscope.capture.files import ID_CHUNK, chunk_digests, combine_id

TS = 1_700_000_000_000_000_000


def frame(i: int, payload: bytes = b"") -> bytes:
    pkt = (
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / IP(src="10.0.0.1", dst="10.0.0.2")
        / TCP(sport=40000, dport=9092, seq=i, flags="PA")
        / Raw(payload or f"msg-{i}".encode())
    )
    return bytes(pkt)


def raw4(i: int) -> bytes:
    return bytes(
        IP(src="192.168.0.1", dst="192.168.0.9") / TCP(sport=1, dport=2, seq=i) / Raw(f"raw-{i}".encode())
    )


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("nano", [False, True])
def test_pcap_magics_and_byte_orders(tmp_path, order, nano):
    recs = [(TS + i * 1_000_123_457, frame(i)) for i in range(5)]
    path = write(tmp_path, "x.pcap", pcap_bytes(recs, order=order, nano=nano))
    assert identify(path) == "pcap"
    rows, (st,) = read_path(path)
    assert [r["payload"] for r in rows] == [f"msg-{i}".encode() for i in range(5)]
    want = [t if nano else t // 1000 * 1000 for t, _ in recs]
    assert [r["ts_ns"] for r in rows] == want
    assert st["first_ts_ns"] == want[0] and st["last_ts_ns"] == want[-1]
    offs = [24]
    for _, f in recs[:-1]:
        offs.append(offs[-1] + 16 + len(f))
    assert [r["rec_offset"] for r in rows] == offs


def test_pcap_snaplen_and_caplen_below_origlen(tmp_path):
    big = frame(1, b"B" * 500)
    path = write(tmp_path, "s.pcap", pcap_bytes([(TS, big), (TS + 1000, frame(2))], snaplen=100))
    rows, (st,) = read_path(path)
    assert rows[0]["wire_len"] == len(big) and rows[0]["payload_len"] == 500
    assert rows[0]["payload"] == b"B" * 46 and rows[0]["snap_truncated"]
    assert rows[1]["payload"] == b"msg-2" and not rows[1]["snap_truncated"]
    assert st["snap_truncated"] == 1 and st["bytes"] == 100 + len(frame(2))


def test_pcap_records_larger_than_header_snaplen_are_read(tmp_path):
    # some writers put a snaplen in the header that their records exceed: read them anyway
    recs = [(TS + i, frame(i, b"L" * 400)) for i in range(3)]
    data = bytearray(pcap_bytes(recs, snaplen=65535))
    struct.pack_into("<I", data, 16, 128)
    rows, (st,) = read_path(write(tmp_path, "lying.pcap", bytes(data)))
    assert [r["payload"] for r in rows] == [b"L" * 400] * 3 and st["errors"] == []


def test_scapy_written_pcap_and_pcapng(tmp_path):
    pkts = [Ether(frame(i)) for i in range(20)]
    for i, p in enumerate(pkts):
        p.time = 1_600_000_000 + i / 8
    wrpcap(str(tmp_path / "scapy.pcap"), pkts)
    wrpcap(str(tmp_path / "scapy_ns.pcap"), pkts, nano=True)
    with PcapNgWriter(str(tmp_path / "scapy.pcapng")) as w:
        for p in pkts:
            w.write(p)
    want = [f"msg-{i}".encode() for i in range(20)]
    for name in ("scapy.pcap", "scapy_ns.pcap", "scapy.pcapng"):
        rows, _ = read_path(str(tmp_path / name))
        assert [r["payload"] for r in rows] == want, name
        assert [r["ts_ns"] for r in rows] == [
            1_600_000_000_000_000_000 + i * 125_000_000 for i in range(20)
        ], name


@pytest.mark.parametrize("order", ["<", ">"])
def test_pcapng_blocks_interfaces_and_resolutions(tmp_path, order):
    data = b"".join(
        [
            shb(order),
            idb(order, 1),  # 0: Ethernet, default microseconds
            idb(order, 101, tsresol=9),  # 1: raw IP, nanoseconds
            idb(order, 113, tsresol=0x80 | 20, tsoffset=1000),  # 2: SLL, 2^-20 s, +1000 s
            nrb(order),
            epb(order, 0, TS // 1000, frame(0)),
            epb(order, 1, TS + 7, raw4(1)),
            custom(order),
            epb(order, 2, (5 << 20) + (1 << 19), bytes(CookedLinux(proto=0x0800) / IP(raw4(2)))),
            isb(order),
            pb(order, 1, TS + 9, raw4(3)),
            spb(order, frame(4)),
            epb(order, 0, TS // 1000 + 1, frame(5, b"C" * 300), snaplen=80),
        ]
    )
    path = write(tmp_path, "x.pcapng", data)
    assert identify(path) == "pcapng"
    rows, (st,) = read_path(path)
    assert [r["payload"][:6] for r in rows] == [b"msg-0", b"raw-1", b"raw-2", b"raw-3", b"msg-4", b"C" * 6]
    ts = [r["ts_ns"] for r in rows]
    assert ts[0] == TS and ts[1] == TS + 7
    assert ts[2] == (1000 + 5) * 10**9 + 500_000_000  # 5.5 s in 2^-20 units, plus the offset
    assert ts[3] == TS + 9
    assert ts[4] == ts[3]  # a simple packet block has no time: the last one seen
    assert rows[5]["snap_truncated"] and rows[5]["payload_len"] == 300
    # the custom block is a frame of its own (Wireshark's numbering), no packet
    assert st["records"] == 7 and st["other_frames"] == 1 and st["tcp"] == 6
    assert st["errors"] == [] and st["malformed"] == 0


def test_pcapng_sections_reset_interfaces(tmp_path):
    data = b"".join(
        [
            shb("<"),
            idb("<", 1),
            epb("<", 0, TS // 1000, frame(0)),
            shb(">"),  # a second section, other byte order: interface 0 is now raw IP in ns
            idb(">", 101, tsresol=9),
            epb(">", 0, TS + 5, raw4(1)),
            shb("<"),
            epb("<", 0, TS, frame(2)),  # no IDB in this section: an error, not a crash
            idb("<", 228),
            epb("<", 0, TS // 1000, raw4(3)),
        ]
    )
    rows, (st,) = read_path(write(tmp_path, "m.pcapng", data))
    assert [r["payload"] for r in rows] == [b"msg-0", b"raw-1", b"raw-3"]
    assert rows[1]["ts_ns"] == TS + 5
    assert st["malformed"] == 1 and any("unknown interface" in e for e in st["errors"])


def test_a_packet_time_past_int64_nanoseconds_is_an_error_not_a_clamped_time(tmp_path):
    """Found by a user trial: a pcapng whose packets hold nanoseconds under the default microsecond
    resolution (no if_tsresol) has times past 2262; they were clamped to int64's maximum, every
    row at 2262-04-11 and latencies 0, with 'every input read cleanly'. Such a block is a frame
    (numbered) that is not decoded, counted malformed, its error naming it; the others decode."""
    data = b"".join(
        [
            shb("<"),
            idb("<", 1),  # microseconds: TS (ns) read as microseconds is in the year 55,800
            epb("<", 0, TS // 1000, frame(0)),
            epb("<", 0, TS, frame(1)),
            epb("<", 0, TS // 1000 + 2, frame(2)),
        ]
    )
    rows, (st,) = read_path(write(tmp_path, "far.pcapng", data))
    assert [(r["payload"], r["ts_ns"], r["frame"]) for r in rows] == [
        (b"msg-0", TS // 1000 * 1000, 1),
        (b"msg-2", (TS // 1000 + 2) * 1000, 3),
    ]
    assert st["records"] == 3 and st["malformed"] == 1 and st["last_ts_ns"] == (TS // 1000 + 2) * 1000
    (err,) = st["errors"]
    assert err.startswith("packet block at offset ") and "is outside 1677-2262 (int64 nanoseconds)" in err


@pytest.mark.parametrize("kind", ["pcap", "pcapng"])
def test_gzip_streams(tmp_path, kind):
    if kind == "pcap":
        raw = pcap_bytes([(TS + i, frame(i)) for i in range(300)], nano=True)
    else:
        raw = shb() + idb("<", 1, tsresol=9) + b"".join(epb("<", 0, TS + i, frame(i)) for i in range(300))
    plain = write(tmp_path, f"x.{kind}", raw)
    gz = str(tmp_path / f"x.{kind}.gz")
    with gzip.open(gz, "wb") as fh:
        fh.write(raw)
    assert identify(gz) == f"{kind}.gz"
    cid = capture_id(gz)
    assert plan_splits(gz, 0, cid, f"{kind}.gz", 64) == plan_splits(gz, 0, cid, f"{kind}.gz", 1 << 30)
    assert len(plan_splits(gz, 0, cid, f"{kind}.gz", 64)) == 1
    rows_plain, _ = read_path(plain)
    rows_gz, (st,) = read_path(gz, split_size=64)
    assert rows_gz == rows_plain and len(rows_gz) == 300
    # a gzip stream cut short: the records before the cut are kept, the damage is reported
    cut = write(tmp_path, f"cut.{kind}.gz", open(gz, "rb").read()[: os.path.getsize(gz) // 2])
    rows_cut, (st,) = read_path(cut)
    assert 0 < len(rows_cut) < 300 and rows_cut == rows_plain[: len(rows_cut)]
    assert st["errors"]


def test_gzip_multi_member_stream(tmp_path):
    raw = pcap_bytes([(TS + i, frame(i)) for i in range(50)])
    cut = 24 + 16 * 20 + sum(len(frame(i)) for i in range(20))
    gz = write(
        tmp_path,
        "mm.pcap.gz",
        gzip.compress(raw[:100]) + gzip.compress(raw[100:cut]) + gzip.compress(raw[cut:]),
    )
    rows, (st,) = read_path(gz)
    assert [r["seq"] for r in rows] == list(range(50)) and st["errors"] == []
    # trailing junk after the last member: the packets are kept, the junk is reported
    rows, (st,) = read_path(write(tmp_path, "junk.pcap.gz", gzip.compress(raw) + b"\0" * 100))
    assert len(rows) == 50 and st["errors"]


def test_gzip_window_slides_over_large_stream(tmp_path, monkeypatch):
    import brokerscope.capture.reader as reader

    monkeypatch.setattr(reader, "_CHUNK", 1000)  # force many window slides and records across them
    recs = [(TS + i * 1000, frame(i, bytes([i % 256]) * (i % 700))) for i in range(400)]
    raw = pcap_bytes(recs)
    cut = 24 + sum(16 + len(f) for _, f in recs[:60])  # a record boundary
    gz = str(tmp_path / "w.pcap.gz")
    with gzip.open(gz, "wb") as fh:
        fh.write(raw[:cut] + b"\xff" * 333 + raw[cut:])  # and garbage to resync over
    rows, (st,) = read_path(gz, batch_packets=50)
    plain_rows, _ = read_path(write(tmp_path, "w.pcap", raw))
    for r in rows[60:]:
        r["rec_offset"] -= 333
    assert rows == plain_rows and len(rows) == 400
    assert any(f"resynced at offset {cut + 333}" in e for e in st["errors"]), st["errors"]


def test_identify_kinds(tmp_path):
    assert identify(write(tmp_path, "e", b"")) == "empty"
    assert identify(write(tmp_path, "u", b"hello world, not a capture at all")) == "unknown"
    assert identify(write(tmp_path, "short", b"\xd4\xc3\xb2\xa1\x02\x00")) == "unknown"
    assert identify(write(tmp_path, "ng", shb(">"))) == "pcapng"
    assert identify(write(tmp_path, "ngbad", b"\x0a\x0d\x0d\x0a" + b"\0" * 24)) == "unknown"
    assert identify(write(tmp_path, "gzjunk", gzip.compress(b"junk" * 10))) == "unknown"
    assert identify(write(tmp_path, "gzempty", gzip.compress(b""))) == "empty"
    assert identify(write(tmp_path, "ns", pcap_bytes([], nano=True, order=">"))) == "pcap"


def test_unknown_kind_reads_to_an_error_not_an_exception(tmp_path):
    path = write(tmp_path, "u", b"not a capture")
    rows, (st,) = read_path(path)
    assert rows == [] and st["errors"] and st["records"] == 0


def test_capture_id_is_a_hash_of_every_byte(tmp_path):
    a = write(tmp_path, "a.pcap", pcap_bytes([(TS, frame(1))]))
    b = write(tmp_path, "b.pcap", pcap_bytes([(TS, frame(1))]))
    c = write(tmp_path, "c.pcap", pcap_bytes([(TS, frame(2))]))
    assert capture_id(a) == capture_id(b) != capture_id(c)
    assert len(capture_id(a)) == 32
    # two 4 MB captures that differ in one byte in the middle are two inputs (the old id, size +
    # first MiB + last MiB, gave them one); and a prefix of a file is not the file
    body = pcap_bytes([(TS + i, frame(i % 7, payload=bytes(range(256)) * 4)) for i in range(3800)])
    assert len(body) > 4_000_000
    x = write(tmp_path, "x.pcap", body)
    mid = len(body) // 2
    y = write(tmp_path, "y.pcap", body[:mid] + bytes([body[mid] ^ 1]) + body[mid + 1 :])
    head = write(tmp_path, "head.pcap", body[:9000])
    assert len({capture_id(x), capture_id(y), capture_id(head)}) == 3


@pytest.mark.parametrize("split", [300, 1000, 1 << 20, ID_CHUNK - 1, ID_CHUNK + 5])
def test_capture_id_does_not_depend_on_the_split_size(tmp_path, split):
    """Each split hashes the identity chunks that start in its range; combined in order they
    give the id of the whole file, however the file was cut (here 2.2 chunks long)."""
    path = tmp_path / "f.bin"
    data = os.urandom(ID_CHUNK * 2 + ID_CHUNK // 5)
    path.write_bytes(data)
    size = len(data)
    digests: dict = {}
    for start in range(0, size, split):
        part = chunk_digests(path, start, min(size, start + split), size)
        assert not set(part) & set(digests)  # every chunk is owned by exactly one split
        digests.update(part)
    assert combine_id(size, digests) == capture_id(path)
    with pytest.raises(ValueError, match="never hashed"):
        combine_id(size, {k: v for k, v in digests.items() if k != 1})
    # the planned size is what counts: bytes appended after planning are not part of the id
    with open(path, "ab") as fh:
        fh.write(b"grown")
    assert capture_id(path, size) == combine_id(size, digests) != capture_id(path)


def test_plan_splits_cover_file(tmp_path):
    path = write(tmp_path, "p.pcap", pcap_bytes([(TS + i, frame(i)) for i in range(50)]))
    size = os.path.getsize(path)
    sp = plan_splits(path, 3, "cid", "pcap", 1000)
    assert sp[0].start == 0 and sp[-1].end == size and len(sp) == -(-size // 1000)
    assert all(a.end == b.start for a, b in zip(sp, sp[1:], strict=False))
    assert {(s.file_index, s.capture_id, s.kind) for s in sp} == {(3, "cid", "pcap")}
    assert plan_splits(path, 0, "cid", "pcap", size) == [sp[0].__class__(path, "cid", 0, "pcap", 0, size)]


def test_stats_counts_add_up_over_ipv6(tmp_path):
    v6 = bytes(Ether() / IPv6(src="2001:db8::1", dst="2001:db8::2") / TCP() / Raw(b"six"))
    path = write(tmp_path, "6.pcap", pcap_bytes([(TS, v6)] * 3))
    rows, stats = read_path(path)
    assert total(stats, "tcp") == 3 and [r["lo_ip"] for r in rows] == ["2001:db8::1"] * 3
    assert struct.unpack_from("<I", open(path, "rb").read(), 20)[0] == 1


@pytest.mark.parametrize("split", [0, 300, 1000])
def test_records_longer_than_on_the_wire_are_read_as_captured(tmp_path, split):
    """A Linux cooked capture whose writer counted the 16-byte SLL header in caplen only (caplen =
    origlen + 16): tshark and scapy read every packet, so does the reader, counting them, however
    the file is split."""
    frames = [
        bytes(
            CookedLinux(pkttype=0, lladdrtype=1, lladdrlen=6, src=b"\x02\x00\x00\x00\x00\x01\x00\x00")
            / IP(src="10.0.0.1", dst="10.0.0.2")
            / TCP(sport=40000, dport=9092, seq=1 + 10 * i, flags="PA")
            / Raw(b"record %02d" % i)
        )
        for i in range(20)
    ]
    path = write(
        tmp_path,
        "sll.pcap",
        pcap_bytes([(TS + i * 1000, f, len(f) - 16) for i, f in enumerate(frames)], linktype=113),
    )
    assert len(rdpcap(path)) == 20  # scapy's own reader takes them all
    rows, stats = read_path(path, split_size=split)
    assert len(rows) == 20 and [r["payload"] for r in rows] == [b"record %02d" % i for i in range(20)]
    assert (
        total(stats, "caplen_over_origlen") == 20
        and total(stats, "malformed") == total(stats, "damaged") == 0
    )
    assert all(not s["errors"] for s in stats)


def test_records_beyond_the_snap_length_and_empty_records(tmp_path):
    """A pcap whose header says snaplen 64 but whose records are longer, with empty records
    (caplen 0) among them: tshark and scapy read every record (the empty ones as empty frames);
    so does the reader, counting both kinds per input, none of it malformed."""
    frames = [frame(i, b"payload %02d " % i * 4) for i in range(6)]
    assert all(len(f) > 64 for f in frames)
    head = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 64, 1)
    recs = []
    for i, f in enumerate(frames):
        recs.append(struct.pack("<IIII", 1_700_000_000 + i, 0, len(f), len(f)) + f)
        if i in (1, 4):
            recs.append(struct.pack("<IIII", 1_700_000_000 + i, 1, 0, 60 * (i == 4)))
    path = write(tmp_path, "snap.pcap", head + b"".join(recs))
    assert len(rdpcap(path)) == 8
    rows, stats = read_path(path)
    assert [r["payload"] for r in rows] == [b"payload %02d " % i * 4 for i in range(6)]
    got = {
        k: total(stats, k)
        for k in ("records", "caplen_over_snaplen", "empty_records", "malformed", "damaged")
    }
    assert got == {"records": 8, "caplen_over_snaplen": 6, "empty_records": 2, "malformed": 0, "damaged": 0}


@pytest.mark.parametrize("order", ["<", ">"])
def test_pcapng_records_beyond_the_interface_snap_length_and_empty_ones(tmp_path, order):
    frames = [frame(i, b"pcapng payload %02d" % i * 3) for i in range(4)]
    blocks = [shb(order), idb(order, 1, snaplen=48)]
    for i, f in enumerate(frames):
        blocks.append(epb(order, 0, (TS // 1000) + i, f))  # not cut: longer than the IDB's snaplen
        if i == 2:
            blocks.append(epb(order, 0, (TS // 1000) + i, b""))  # caplen 0, origlen 0
    blocks.append(spb(order, b"", 0))  # an empty simple packet block
    path = write(tmp_path, "snap.pcapng", b"".join(blocks))
    rows, stats = read_path(path)
    assert [r["payload"] for r in rows] == [b"pcapng payload %02d" % i * 3 for i in range(4)]
    got = {k: total(stats, k) for k in ("records", "caplen_over_snaplen", "empty_records", "malformed")}
    assert got == {"records": 6, "caplen_over_snaplen": 4, "empty_records": 2, "malformed": 0}
