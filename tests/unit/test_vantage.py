"""Vantage points and clock offsets on real captures rewritten by editcap: a capture cut in two
(a rotated capture: one place), a copy of it with its clock shifted (a second place)."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from brokerscope import clocks, tables, vantage
from brokerscope.capture import capture_id
from brokerscope.streams import decode_files
from tests.support.loopcap import _tcp_ports, read_pcap, write_pcap

pytestmark = pytest.mark.skipif(
    shutil.which("editcap") is None, reason="editcap (wireshark-common) not installed"
)

SAMPLE = Path(__file__).resolve().parents[2] / "sample_data" / "kafka" / "none.pcap"


def _editcap(tmp: Path, name: str, *args: str) -> list[str]:
    out = tmp / name
    subprocess.run(["editcap", *args, str(SAMPLE), str(out)], check=True, capture_output=True, timeout=60)
    return sorted(str(p) for p in tmp.glob(f"{out.stem}*"))


def _content(rows: list[dict]) -> list[tuple]:
    """What a connection's rows say, less where and when they were seen."""
    skip = {"capture_id", "capture_ids", "conn_id", "first_frame", "last_frame", "date"}
    skip |= {"ts", "ts_ns", "ts_end", "ts_end_ns", "first_ts", "last_ts", "request_ts", "response_ts"}
    return sorted(repr(sorted((k, v) for k, v in r.items() if k not in skip)) for r in rows)


def _clocks(out: dict, places: dict[str, str]) -> clocks.Clocks:
    return clocks.from_commands(pa.Table.from_pylist(out["commands"], tables.schema("commands")), places)


def test_a_rotated_capture_is_one_vantage_point(tmp_path):
    """Cut in two files of 60 packets (as tcpdump -C would): the connections crossing the cut are
    one connection each, spanning both files, with the whole capture's rows."""
    parts = _editcap(tmp_path, "part.pcap", "-F", "nsecpcap", "-c", "60")
    assert len(parts) == 2
    whole, cut = decode_files([str(SAMPLE)]), decode_files(parts)
    assert len(cut["streams"]) == len(whole["streams"]) == 5
    assert any(len(r["capture_ids"]) == 2 for r in cut["streams"])
    # by time, as README says (the file a connection ends in, last): they were sorted as text
    first, second = (capture_id(p) for p in sorted(parts))
    spanning = [r["capture_ids"] for r in cut["streams"] if len(r["capture_ids"]) == 2]
    assert spanning and all(ids == [first, second] for ids in spanning), (first, second, spanning)
    for t in ("commands", "messages", "acks"):
        assert _content(cut[t]) == _content(whole[t]), t
    assert all(r["retransmitted_bytes"] == 0 for r in cut["streams"])


def test_a_shifted_copy_is_a_second_vantage_point(tmp_path):
    """The capture and a copy 0.25 s later: each file's connections are its own, decoded as
    captured (before, the copy's segments were retransmissions of the first's)."""
    (shifted,) = _editcap(tmp_path, "late.pcap", "-F", "nsecpcap", "-t", "0.25")
    whole, two = decode_files([str(SAMPLE)]), decode_files([str(SAMPLE), shifted])
    ids = sorted({r["capture_id"] for r in two["streams"]})
    assert len(ids) == 2 and len(two["streams"]) == 10
    for cid in ids:
        for t in ("streams", "commands", "messages", "acks", "latencies"):
            mine = [r for r in two[t] if r["capture_id"] == cid]
            assert _content(mine) == _content(whole[t]), (t, cid)
    assert all(r["capture_ids"] == [r["capture_id"]] for r in two["streams"])
    # two copies with the same first packet time still get two conn ids
    assert len({r["conn_id"] for r in two["streams"]}) == 10


@pytest.mark.parametrize("shift", ["0.25", "-1.5"])
def test_the_clock_offset_of_a_shifted_copy_is_the_shift(tmp_path, shift):
    (moved,) = _editcap(tmp_path, "moved.pcap", "-F", "nsecpcap", "-t", shift)
    orig, sh = capture_id(str(SAMPLE)), capture_id(moved)
    out = decode_files([str(SAMPLE), moved])
    clk = _clocks(out, {orig: orig, sh: sh})
    gap_us = (clk.offsets[sh].offset_ns - clk.offsets[orig].offset_ns) / 1000
    assert abs(gap_us - float(shift) * 1e6) < 1_000
    ref = min(orig, sh)  # equal evidence both ways: the lowest name
    assert {o.ref for o in clk.offsets.values()} == {ref} and clk.offsets[ref].offset_ns == 0
    assert all(o.pairs == 33 and o.bound_ns == 0 for o in clk.offsets.values())
    # every connection seen twice: one copy stands for both (equal round trips: the reference's)
    ref_conns = {r["conn_id"] for r in out["streams"] if r["capture_id"] == ref}
    assert len(ref_conns) == 5 and clk.copies == {r["conn_id"] for r in out["streams"]} - ref_conns


def test_a_rotated_host_and_a_shifted_copy(tmp_path):
    """Host A's capture in two files, host B's in one with its clock 0.25 s ahead: two vantage
    points, A's files one, and both files of A get A's offset."""
    a1, a2 = _editcap(tmp_path, "a.pcap", "-F", "nsecpcap", "-c", "60")
    (b,) = _editcap(tmp_path, "b.pcap", "-F", "nsecpcap", "-t", "0.25")
    out = decode_files([a1, a2, b])
    assert len(out["streams"]) == 10
    spans = vantage.spans_of(out["_capture_stats"])
    assert len(spans) == 3 and len(set(vantage.groups(spans).values())) == 2
    ids = {p: capture_id(p) for p in (a1, a2, b)}
    place_a = ids[a1]
    clk = _clocks(out, {ids[a1]: place_a, ids[a2]: place_a, ids[b]: ids[b]})
    assert clk.offsets[ids[a1]] == clk.offsets[ids[a2]]
    assert abs((clk.offsets[ids[b]].offset_ns - clk.offsets[ids[a1]].offset_ns) / 1000 - 250_000) < 1_000


def test_groups_chain_each_hosts_rotated_files():
    """Three hosts, each rotating its capture: every file joins the chain that ended last before
    it starts; files whose times overlap are never one place."""
    s = 1_000_000_000
    spans = {
        0: (0, 10 * s),  # host P, file 1
        1: (10 * s, 20 * s),  # P, file 2: starts where file 1 ended
        2: (s // 10, 9 * s),  # host B
        3: (9 * s, 21 * s),
        4: (5 * s, 30 * s),  # host C, one file overlapping all
    }
    assert vantage.groups(spans) == {0: 0, 1: 0, 2: 2, 3: 2, 4: 4}
    assert vantage.groups({0: (0, 5), 1: (6, 9)}) == {0: 0, 1: 0}  # a rotation
    assert vantage.groups({}) == {}


def test_groups_continue_the_chains_of_earlier_runs():
    """The same three hosts, their first files ingested one night and the rest the next: the
    files of the second night join the first night's chains (named as they were), as one run
    over all five would chain them."""
    s = 1_000_000_000
    before = {"P": 10 * s, "B": 9 * s}  # host P's and host B's chains, where their files ended
    spans = {1: (10 * s, 20 * s), 3: (9 * s, 21 * s), 4: (5 * s, 30 * s)}
    assert vantage.groups(spans, before) == {1: "P", 3: "B", 4: 4}
    assert vantage.groups({7: (3, 4)}, {"P": 5}) == {7: 7}  # overlaps the earlier files: another place
    assert vantage.groups({7: (6, 8), 8: (8, 9)}, {"P": 5, "Q": 6}) == {7: "Q", 8: "Q"}  # the latest end
    assert vantage.groups({7: (6, 8)}, {}) == {7: 7}


def _new_isns(frame: bytes, client_port: int, d_client: int = 7_000_000, d_server: int = 9_000_000) -> bytes:
    """The Ethernet/IPv4 frame of a TCP connection as if its endpoints had drawn other initial
    sequence numbers (seq and ack moved; the TCP checksum is not checked on decode)."""
    f = bytearray(frame)
    tcp = 14 + (f[14] & 0x0F) * 4
    src, _dst, seq, ack = struct.unpack_from("!HHII", f, tcp)
    mine, peer = (d_client, d_server) if src == client_port else (d_server, d_client)
    flags = f[tcp + 13]
    ack = (ack + peer) % 2**32 if flags & 0x10 else ack  # the ACK flag
    struct.pack_into("!II", f, tcp + 4, (seq + mine) % 2**32, ack)
    return bytes(f)


def test_a_four_tuple_used_again_is_not_a_copy(tmp_path):
    """B holds the capture 0.25 s late and, a minute later, one of its connections again (the
    same 4-tuple, correlation ids and frame sizes, other initial sequence numbers: a client that
    reconnected from the same port).
    Its exchanges match A's with an offset of a minute: the estimate keeps to the others, and
    that connection is no copy of A's."""
    frames = read_pcap(str(SAMPLE))
    port = 40764

    def ours(f: bytes) -> bool:
        return port in _tcp_ports(f)

    second = 250_000_000
    again = [(t + 60_000_000_000, _new_isns(f, port)) for t, f in frames if ours(f)]
    b = tmp_path / "b.pcap"
    write_pcap(str(b), sorted([(t + second, f) for t, f in frames] + again, key=lambda x: x[0]))
    a_id, b_id = capture_id(str(SAMPLE)), capture_id(str(b))
    out = decode_files([str(SAMPLE), str(b)])
    streams = [r for r in out["streams"] if r["client_port"] == port]
    assert len(streams) == 3  # A's, B's copy of it, B's later one
    clk = _clocks(out, {a_id: a_id, b_id: b_id})
    gap_us = (clk.offsets[b_id].offset_ns - clk.offsets[a_id].offset_ns) / 1000
    assert abs(gap_us - 250_000) < 1_000
    later = max(streams, key=lambda r: r["ts_ns"])
    assert later["capture_id"] == b_id and later["conn_id"] not in clk.copies
    copies_of_port = {r["conn_id"] for r in streams} & clk.copies
    assert len(copies_of_port) == 1 and later["conn_id"] not in copies_of_port
