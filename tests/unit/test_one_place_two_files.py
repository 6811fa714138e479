"""One place's capture written as two files, one per direction (tcpdump -Q out and -Q in, two
interfaces of an asymmetric route), ingested together: one vantage point, each connection one
connection of both files' packets (found by a user trial: the files' times overlap, so they were
taken for two places' captures: the broker side's connections `unknown`, 33 responses lost,
exit 0 without a word). Two places' captures, each holding both directions, stay two."""

from __future__ import annotations

import struct

from brokerscope import tables, vantage
from brokerscope.capture.decode import FROM_HI, FROM_LO
from brokerscope.streams import decode_files
from tests.conftest import SAMPLE_DATA
from tests.support import replay

# what names a file: its capture id and the frame numbers in it
_PER_FILE = ("capture_id", "capture_ids", "first_frame", "last_frame")


def _rows(paths) -> dict[str, list]:
    got = decode_files([str(p) for p in paths])
    return {
        t: sorted(repr(sorted((k, v) for k, v in r.items() if k not in _PER_FILE)) for r in got[t])
        for t in tables.DECODED_TABLES
    }


def test_a_capture_split_by_direction_decodes_as_the_capture(tmp_path):
    src = SAMPLE_DATA / "kafka" / "none.pcap"
    halves = replay.by_direction(src, tmp_path / "out.pcap", tmp_path / "in.pcap", 36525)
    want = _rows([src])
    got = _rows(halves)
    for t in tables.DECODED_TABLES:
        assert got[t] == want[t], t
    assert len(want["commands"]) > 50 and len(want["streams"]) == 5


def test_a_capture_split_by_direction_and_rotated_decodes_as_the_capture(tmp_path):
    """Each direction's file rotated by time (tcpdump -Q in / -Q out with -G: a user trial found
    the rotations chained across, in with out: two places, rows lost and doubled)."""
    src = SAMPLE_DATA / "kafka" / "none.pcap"
    halves = replay.by_direction(src, tmp_path / "out.pcap", tmp_path / "in.pcap", 36525)
    head, recs = replay.records(src)
    cut = sorted(struct.unpack_from("<I", r, 0)[0] * 10**9 + struct.unpack_from("<I", r, 4)[0] for r in recs)
    # rotated at the times of records 1/6, 2/6, ... of the capture: connections run across
    ats = [cut[len(cut) * k // 6] for k in range(1, 6)] + [1 << 62]
    files = []
    for half in halves:
        h, rs = replay.records(half)
        t = [struct.unpack_from("<I", r, 0)[0] * 10**9 + struct.unpack_from("<I", r, 4)[0] for r in rs]
        lo = 0
        for k, at in enumerate(ats):
            part = [r for r, x in zip(rs, t) if lo <= x < at]
            lo = at
            if part:
                files.append(tmp_path / f"{half.stem}.{k}.pcap")
                files[-1].write_bytes(h + b"".join(part))
    got = _rows(files)
    want = _rows([src])
    for t in tables.DECODED_TABLES:
        assert got[t] == want[t], t


def test_files_of_two_places_holding_both_directions_stay_two_vantage_points():
    spans = {0: (0, 100), 1: (10, 110), 2: (5, 90)}
    both = {0: {7: FROM_LO | FROM_HI, 8: FROM_LO}, 1: {7: FROM_LO | FROM_HI}, 2: {9: FROM_HI}}
    assert vantage.groups(spans, directions=both) == {0: 0, 1: 1, 2: 2}
    halves = {0: {7: FROM_LO, 8: FROM_LO}, 1: {7: FROM_HI, 8: FROM_HI, 9: FROM_HI}, 2: {9: FROM_LO | FROM_HI}}
    assert vantage.groups(spans, directions=halves) == {0: 0, 1: 0, 2: 2}
