"""A damaged pcap caplen or pcapng block length, on real captures: ingest and extract number the
frames alike, as the undamaged file does (the damaged record or packet block takes its number, a
frame with no packet), at every split size; extract --frames past the damage writes those exact
packets, a range straddling it every packet it holds, and never copies the damaged block.

Found by a user trial (damage.py there): extract walked the frames on its own and stopped at the
first damaged record ("no packet matched ... the capture has 8,999 frames" for any frame past it,
a straddling range cut short, exit 0), copied a pcapng block whose trailing length differs from
its leading one (a file tshark cannot read), and the reader skipped the damaged record without a
number, so every frame past the damage was one less than in the undamaged file.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from scapy.utils import PcapNgReader, PcapReader

from brokerscope.extract import Source, damaged_frames, frame_count, frame_offsets, write
from tests.conftest import CAPTURES, SAMPLE_DATA

sys.path.insert(0, str(Path(__file__).parent / "capture"))
from capture_kit import read_path  # noqa: E402

PCAP = SAMPLE_DATA / "kafka" / "txn.pcap"
PCAPNG = CAPTURES / "ndpi" / "kafka.pcapng"


def _packets(path: str) -> list[tuple[float, bytes]]:
    with open(path, "rb") as fh:
        ng = fh.read(4) == b"\x0a\x0d\x0d\x0a"
    with PcapNgReader(path) if ng else PcapReader(path) as r:
        return [(round(float(p.time), 6), bytes(p)) for p in r]


def _pcap_records(buf: bytes) -> list[tuple[int, int]]:
    """(offset, caplen) of each record of a little-endian pcap."""
    out, off = [], 24
    while off + 16 <= len(buf):
        cl = struct.unpack_from("<I", buf, off + 8)[0]
        out.append((off, cl))
        off += 16 + cl
    return out


def _pcapng_packet_blocks(buf: bytes) -> list[tuple[int, int]]:
    """(offset, total length) of each packet block of a little-endian pcapng (every frame is one
    in these files)."""
    out, off = [], 0
    while off + 12 <= len(buf):
        bt, bl = struct.unpack_from("<II", buf, off)
        if bt in (2, 3, 6):
            out.append((off, bl))
        off += bl
    return out


def _damaged(tmp_path, how: str) -> tuple[str, str, str, int]:
    """(undamaged path, damaged copy, kind, the damaged frame's number) as the trial's damage.py
    makes them: a pcap record's caplen grown by 100 bytes (swallowing the next record's header) or
    to 0x7fff0000, a pcapng packet block's total length grown by 8 (its trailing one differs)."""
    src = PCAPNG if how == "pcapng length" else PCAP
    buf = bytearray(src.read_bytes())
    if how == "pcapng length":
        blocks = _pcapng_packet_blocks(bytes(buf))
        n = len(blocks) // 2
        off, bl = blocks[n - 1]
        struct.pack_into("<I", buf, off + 4, bl + 8)
    else:
        recs = _pcap_records(bytes(buf))
        n = len(recs) // 2
        off, cl = recs[n - 1]
        struct.pack_into("<I", buf, off + 8, 0x7FFF0000 if how == "pcap huge caplen" else cl + 100)
    kind = "pcapng" if how == "pcapng length" else "pcap"
    path = tmp_path / f"d.{kind}"
    path.write_bytes(bytes(buf))
    return str(src), str(path), kind, n


def _source(path: str, kind: str) -> Source:
    return Source("cid", path, kind, os.path.getsize(path))


HOWS = ["pcap caplen", "pcap huge caplen", "pcapng length"]


@pytest.mark.parametrize("how", HOWS)
def test_frame_numbers_past_the_damage_are_the_undamaged_files(tmp_path, how):
    orig, path, _kind, n = _damaged(tmp_path, how)
    clean, _ = read_path(orig)
    key = lambda r: (r["ts_ns"], r["seq"], r["ack"])  # noqa: E731
    lost = [r for r in clean if r["frame"] == n]
    assert lost and [r for r in clean if r["frame"] > n]
    want = [r["frame"] for r in clean if r["frame"] != n]
    for size in (0, 2000, 5000):
        rows, stats = read_path(path, split_size=size)
        assert len(stats) > 1 or size == 0
        assert [key(r) for r in rows] == [key(r) for r in clean if r["frame"] != n], size
        assert [r["frame"] for r in rows] == want, size


@pytest.mark.parametrize("suffix", [".pcapng", ".pcap"])
@pytest.mark.parametrize("how", HOWS)
def test_extract_frames_past_and_across_the_damage(tmp_path, how, suffix):
    orig, path, kind, n = _damaged(tmp_path, how)
    if suffix == ".pcap" and kind == "pcapng":
        pytest.skip("a pcapng source writes pcapng only")
    every = _packets(orig)
    src = _source(path, kind)
    assert frame_count(src) == len(every)  # as many frames as the undamaged file
    assert damaged_frames(src, {n - 1, n, n + 1}) == [n]
    # a frame past the damage: that exact packet
    past = {n + 2, len(every)}
    out = str(tmp_path / f"past{suffix}")
    assert write([src], [frame_offsets(src, past)], out) == 2
    assert _packets(out) == [every[f - 1] for f in sorted(past)]
    # a range across it: every frame it holds but the damaged one (no packet in it)
    across = set(range(n - 3, n + 4))
    out = str(tmp_path / f"across{suffix}")
    assert write([src], [frame_offsets(src, across)], out) == len(across) - 1
    assert _packets(out) == [every[f - 1] for f in sorted(across - {n})]
    # the damaged frame alone: nothing
    assert frame_offsets(src, {n}) == []


@pytest.mark.skipif(shutil.which("tshark") is None, reason="no tshark")
def test_the_damaged_pcapng_block_is_never_copied(tmp_path):
    """tshark reads the whole output (a block whose trailing length differs would end its read
    with an error)."""
    orig, path, kind, n = _damaged(tmp_path, "pcapng length")
    src = _source(path, kind)
    out = str(tmp_path / "x.pcapng")
    frames = set(range(1, frame_count(src) + 1))
    assert write([src], [frame_offsets(src, frames)], out) == len(frames) - 1
    r = subprocess.run(
        ["tshark", "-r", out, "-T", "fields", "-e", "frame.number"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.split()) == len(frames) - 1
    data = Path(out).read_bytes()
    off = 0
    while off < len(data):  # every block's trailing length is its leading one
        bl = struct.unpack_from("<I", data, off + 4)[0]
        assert struct.unpack_from("<I", data, off + bl - 4)[0] == bl, off
        off += bl
    assert off == len(data)
