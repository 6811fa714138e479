"""A capture and its replay (the same traffic captured again, its times shifted by
`editcap -t`): ingested together as two files, or as one file (mergecap -a), every connection
is two connections, each decoded once. Before, a replay repeated the 4-tuples and the ISNs, its
SYNs were taken for retransmissions of the first copy's, and the copy's rows were lost (one
streams row spanning the decades between them)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from brokerscope import tables
from brokerscope.streams import decode_files
from tests.conftest import CAPTURES, SAMPLE_DATA
from tests.support import replay
from tests.support.replay import YEAR_S

ID_COLUMNS = ("conn_id", "capture_id", "capture_ids", "date")  # date: the partition of the time


def _moved(a: dict, b: dict, seconds: int) -> bool:
    """Whether row `b` is row `a` with its capture times `seconds` later: its ids aside, every
    column the same, or a time (or nanoseconds) moved by exactly that."""
    for k, v in a.items():
        w = b[k]
        if k in ID_COLUMNS or v == w:
            continue
        if isinstance(v, dt.datetime) and w - v == dt.timedelta(seconds=seconds):
            continue
        if k.endswith("_ns") and isinstance(v, int) and w - v == seconds * 10**9:
            continue
        return False
    return True


def _copies(first: list[dict], copy: list[dict], seconds: int) -> bool:
    return len(first) == len(copy) and all(_moved(a, b, seconds) for a, b in zip(first, copy))


CASES = [
    (SAMPLE_DATA / "kafka" / "none.pcap", 76 * YEAR_S),  # handshakes, FINs both ways
    (SAMPLE_DATA / "pulsar" / "pulsar_none.pcap", 76 * YEAR_S),
    (CAPTURES / "deepflow" / "00-produce-v2.pcap", 76 * YEAR_S),  # mid-stream, never closed
]


@pytest.mark.parametrize("capture, seconds", CASES, ids=lambda v: v.name if isinstance(v, Path) else str(v))
def test_a_capture_and_its_shifted_copy_ingested_together(tmp_path, capture, seconds):
    late = replay.shifted(capture, tmp_path / f"late-{capture.name}", seconds)
    alone = decode_files([str(capture)])
    both = decode_files([str(capture), str(late)])
    (cid,) = {r["capture_id"] for r in alone["streams"]}
    (late_cid,) = {r["capture_id"] for r in both["streams"]} - {cid}
    assert alone["streams"] and alone["commands"]
    for t in tables.DECODED_TABLES:
        assert len(both[t]) == 2 * len(alone[t]), t
    for t in tables.DECODED_TABLES:
        first = [r for r in both[t] if r["capture_id"] == cid]
        assert first == alone[t], t
        assert _copies(first, [r for r in both[t] if r["capture_id"] == late_cid], seconds), t
    # each streams row spans its own copy only, nothing taken for a retransmission
    assert len({r["conn_id"] for r in both["streams"]}) == len(both["streams"])
    for r in both["streams"]:
        assert r["retransmitted_bytes"] == 0
        assert r["duration_us"] == next(
            o["duration_us"] for o in alone["streams"] if o["client_port"] == r["client_port"]
        )


@pytest.mark.parametrize("seconds", [60, 3600, 76 * YEAR_S])
def test_a_capture_merged_with_its_shifted_copy_in_one_file(tmp_path, seconds):
    """mergecap -a of the capture and its copy `seconds` later: one capture, each connection
    twice (60 s: within the idle timeout, after the first copy's FINs)."""
    capture = SAMPLE_DATA / "kafka" / "none.pcap"
    alone = decode_files([str(capture)])
    merged = decode_files([str(replay.with_replay(capture, tmp_path / "merged.pcap", seconds))])
    for t in tables.DECODED_TABLES:
        assert len(merged[t]) == 2 * len(alone[t]), t
    end = max(r["last_ts"] for r in alone["streams"])
    later = {r["conn_id"]: r["first_ts"] > end for r in merged["streams"]}
    assert sorted(later.values()) == [False] * len(alone["streams"]) + [True] * len(alone["streams"])
    records = len(replay.records(capture)[1])
    for t in tables.DECODED_TABLES:
        first = [r for r in merged[t] if not later[r["conn_id"]]]
        assert _copies(alone[t], first, 0), t  # frame numbers too: the first copy's records come first
        copy = [r for r in merged[t] if later[r["conn_id"]]]
        assert _copies(first, [{**r, **_frames(r, -records)} for r in copy], seconds), t


def _frames(row: dict, by: int) -> dict:
    """The row's frame numbers moved by `by`."""
    return {k: v + by for k, v in row.items() if k.endswith("_frame") and v is not None}
