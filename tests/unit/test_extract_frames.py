"""extract by frame number, without a lake: the records numbered N (Wireshark's frame.number) of a
capture, written to pcapng or pcap, are the packets scapy reads at those positions of the
original, byte for byte; pcapng of two interfaces, pcap, and gzip."""

from __future__ import annotations

import gzip
import os

import pytest
from scapy.utils import PcapNgReader, PcapReader

from brokerscope.extract import Source, frame_offsets, parse_frames, write
from tests.conftest import CAPTURES, SAMPLE_DATA
from tests.support.frames import FRAMES_DATA


def _packets(path: str) -> list[tuple[float, bytes]]:
    with open(path, "rb") as fh:
        ng = fh.read(4) == b"\x0a\x0d\x0d\x0a"
    with PcapNgReader(path) if ng else PcapReader(path) as r:
        return [(round(float(p.time), 6), bytes(p)) for p in r]


def _source(path, kind: str) -> Source:
    return Source("cid", str(path), kind, os.path.getsize(path))


@pytest.mark.parametrize(
    "path,kind,suffix",
    [
        (FRAMES_DATA / "two_interfaces.pcapng", "pcapng", ".pcapng"),
        (CAPTURES / "ndpi" / "kafka.pcapng", "pcapng", ".pcapng"),
        (SAMPLE_DATA / "kafka" / "txn.pcap", "pcap", ".pcapng"),
        (SAMPLE_DATA / "kafka" / "txn.pcap", "pcap", ".pcap"),
    ],
    ids=lambda v: getattr(v, "name", v),
)
def test_frames_come_out_as_numbered(tmp_path, path, kind, suffix):
    every = _packets(str(path))
    frames = parse_frames(["1", "3-5", f"{len(every) - 1}-{len(every)}", "10,12"])
    src = _source(path, kind)
    out = str(tmp_path / f"x{suffix}")
    n = write([src], [frame_offsets(src, frames)], out)
    assert n == len(frames)
    assert _packets(out) == [every[f - 1] for f in sorted(frames)]


def test_frames_of_a_gzip_capture(tmp_path):
    path = SAMPLE_DATA / "pulsar" / "pulsar_lz4.pcap"
    gz = tmp_path / "c.pcap.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    src = _source(gz, "pcap.gz")
    out = str(tmp_path / "x.pcapng")
    assert write([src], [frame_offsets(src, {2, 40, 80})], out) == 3
    every = _packets(str(path))
    assert _packets(out) == [every[1], every[39], every[79]]
    assert frame_offsets(src, {81}) == []  # 80 packets


def test_frame_lists_parse():
    assert parse_frames(["120-122", "7", "9,11-12"]) == {120, 121, 122, 7, 9, 11, 12}
    # a row whose last byte was captured before its first: first_frame > last_frame (found by a
    # user trial: extract refused the row's own range)
    assert parse_frames(["29-28"]) == {28, 29}
    for bad in ("0", "3-0", "x", "1-"):
        with pytest.raises(ValueError, match="frames"):
            parse_frames([bad])


def test_frames_that_hold_no_packet_are_numbered_not_written(tmp_path):
    """Wireshark numbers a pcapng's journal and custom blocks as frames (every 8th frame of
    other_frames.pcapng, after each 7 packets): the packets keep Wireshark's numbers, and asking
    for one of those frames writes nothing (the numbering counted packets only before)."""
    path = FRAMES_DATA / "other_frames.pcapng"
    every = _packets(str(path))  # the packets only: 173, and 24 such blocks, 197 frames
    assert len(every) == 173
    src = _source(path, "pcapng")
    frames = {7, 8, 9, 24, 25, 197}
    out = str(tmp_path / "x.pcapng")
    assert write([src], [frame_offsets(src, frames)], out) == 4
    assert _packets(out) == [every[f - f // 8 - 1] for f in (7, 9, 25, 197)]


def test_a_pcapng_named_pcap_is_named_when_a_pcap_is_asked_for(tmp_path):
    """One source, a pcapng named .pcap (editcap's default output): the error said 'these
    captures differ in format or link type' (found by a user trial); it names the file."""
    src = tmp_path / "c.pcap"
    src.write_bytes((FRAMES_DATA / "two_interfaces.pcapng").read_bytes())
    s = _source(src, "pcapng")
    with pytest.raises(
        ValueError, match=f"x.pcap: {src} is a pcapng capture .whatever its name.: write a .pcapng"
    ):
        write([s], [frame_offsets(s, {1})], str(tmp_path / "x.pcap"))


def test_the_frame_walk_keeps_9_bytes_a_record(tmp_path):
    """extract's walk of a capture's records (reader.frame_records) kept a tuple per record (the
    log, and a list of its frames): about 100 bytes a record, 700 MB for a capture of 7 million.
    Now an offset and a code: 9 bytes, the same entries."""
    from brokerscope.capture import reader
    from tests.support.synth import write_capture

    path = tmp_path / "many.pcap"
    info = write_capture(str(path), n_conns=40, exchanges=200)
    log = reader.frame_records(str(path), "pcap")
    assert len(log) == info["packets"] and log.nbytes == 9 * info["packets"]
    entries = list(log)
    assert entries[0] == (24, reader.PACKET) and len({what for _, what in entries}) == 1
    assert [off for off, _ in entries] == sorted(off for off, _ in entries)
