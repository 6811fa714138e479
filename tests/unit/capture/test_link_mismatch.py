"""A capture whose header declares the wrong link type: its records read as no IP packet, and
decode.link_mismatch names the link type they do read as (the input's status then says so)."""

from __future__ import annotations

import struct

import pytest
from capture_kit import epb, idb, pcap_bytes, read_path, shb, spb, write
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, CookedLinux, CookedLinuxV2, Ether
from scapy.packet import Raw

from brokerscope import pipeline
from brokerscope.capture.decode import link_mismatch
from brokerscope.inputs import Input

TS = 1_700_000_000_000_000_000


def _ip(i: int) -> bytes:
    return bytes(IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=40000 + i, dport=9092) / Raw(b"x" * i))


def _frames(linktype: int, n: int = 40) -> list[bytes]:
    """`n` TCP packets framed as `linktype` frames them."""
    ips = [_ip(i) for i in range(n)]
    if linktype == 1:
        return [bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(p)) for p in ips]
    if linktype == 113:
        return [bytes(CookedLinux(proto=0x0800) / IP(p)) for p in ips]
    if linktype == 276:
        return [bytes(CookedLinuxV2(proto=0x0800) / IP(p)) for p in ips]
    if linktype == 0:
        return [struct.pack("<I", 2) + p for p in ips]
    return ips  # 101, raw IP


def _pcap(tmp_path, frames: list[bytes], linktype: int, name: str = "t.pcap") -> str:
    return write(tmp_path, name, pcap_bytes([(TS + i, f) for i, f in enumerate(frames)], linktype=linktype))


def _read(path: str) -> tuple[list[dict], dict]:
    rows, stats = read_path(path)
    return rows, stats[0]


NAMES = {1: "ether", 101: "rawip", 113: "linux-sll", 276: "linux-sll2", 0: "null"}


@pytest.mark.parametrize(
    "true,declared", [(t, d) for t in (1, 101, 113, 276, 0) for d in (1, 101, 113, 147) if t != d]
)
def test_a_wrong_link_type_names_the_one_the_records_read_as(tmp_path, true, declared):
    path = _pcap(tmp_path, _frames(true), declared)
    rows, st = _read(path)
    assert rows == [] and st["tcp"] == 0  # what the read gets from the declared link type
    why = link_mismatch(path, "pcap")
    assert why.startswith(f"declares link type {declared} but its records read as link type {true} ")
    assert "(32 of the first 32 are IP packets then" in why and why.endswith(
        f"editcap -T {NAMES[true]} IN OUT"
    )


@pytest.mark.parametrize("true", [1, 101, 113, 276, 0])
def test_the_right_link_type_raises_no_doubt(tmp_path, true):
    path = _pcap(tmp_path, _frames(true), true)
    assert _read(path)[1]["tcp"] == 40
    assert link_mismatch(path, "pcap") is None


def test_frames_that_are_ip_under_no_link_type_raise_no_doubt(tmp_path):
    """A capture of ARP only is not IP under any link type: read cleanly, no guess."""
    arp = [
        bytes(Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(psrc=f"10.0.0.{i}", pdst="10.0.0.1")) for i in range(20)
    ]
    assert link_mismatch(_pcap(tmp_path, arp, 1), "pcap") is None


def test_pcapng_interfaces_are_judged_each_by_its_own_records(tmp_path):
    """Interface 0 (Ethernet, right) and interface 1 (declared raw IP, holding SLL frames):
    the doubt names the second; EPBs and SPBs both count."""
    eth, sll = _frames(1, 10), _frames(113, 10)
    blocks = [shb(), idb("<", 1), idb("<", 101)]
    blocks += [epb("<", 0, i, f) for i, f in enumerate(eth)]
    blocks += [epb("<", 1, 100 + i, f) for i, f in enumerate(sll)]
    path = write(tmp_path, "two.pcapng", b"".join(blocks))
    assert link_mismatch(path, "pcapng").startswith(
        "declares link type 101 but its records read as link type 113 "
    )
    only_spb = write(tmp_path, "spb.pcapng", shb() + idb("<", 113) + b"".join(spb("<", f) for f in eth))
    assert "(10 of the first 10 are IP packets then" in link_mismatch(only_spb, "pcapng")
    v6 = bytes(Ether(type=0x86DD) / IPv6(src="2001:db8::1", dst="2001:db8::2") / TCP() / Raw(b"6"))
    right = write(tmp_path, "ok.pcapng", shb() + idb("<", 1) + epb("<", 0, 1, v6))
    assert link_mismatch(right, "pcapng") is None


def test_status_of_a_capture_read_under_the_wrong_link_type_is_an_error_naming_the_fix(tmp_path):
    path = _pcap(tmp_path, _frames(1), 101)
    st = _read(path)[1]
    i = Input(path=path, kind="pcap", size=1, mtime_ns=0, capture_id="c", file_index=0)
    status, why, packets, _ = pipeline._status(i, st, pipeline._link_doubt(i, st))
    assert (status, packets) == ("error", 40)
    assert why.startswith("nothing readable: declares link type 101 but its records read as link type 1 ")
    good = _pcap(tmp_path, _frames(1), 1, "good.pcap")
    st = _read(good)[1]
    i = Input(path=good, kind="pcap", size=1, mtime_ns=0, capture_id="g", file_index=0)
    assert pipeline._link_doubt(i, st) is None and pipeline._status(i, st)[:2] == ("ok", None)


def test_every_record_of_an_unsupported_link_type_is_an_error_not_partial(tmp_path):
    """Records no supported link type reads either: nothing readable (was 'partial')."""
    path = _pcap(tmp_path, [b"\x00" * 60] * 3, 147)
    st = _read(path)[1]
    i = Input(path=path, kind="pcap", size=1, mtime_ns=0, capture_id="c", file_index=0)
    assert pipeline._link_doubt(i, st) is None
    status, why, packets, _ = pipeline._status(i, st)
    assert (status, packets) == (
        "error",
        3,
    ) and why == "nothing readable: unsupported link type 147 (first at offset 24)"
