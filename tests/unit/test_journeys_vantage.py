"""Journeys of Pulsar and Iggy traffic seen from two vantage points (a real client's capture and a
copy of it with its clock moved by editcap): the same rows as the one capture gives, once each,
their times on the reference's clock, and `clock_corrected` where a moved time was used."""

from __future__ import annotations

import datetime
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from brokerscope import clocks, journeys, tables
from brokerscope.capture import capture_id
from brokerscope.streams import decode_files
from tests.support.lakecheck import write_decoded

pytestmark = pytest.mark.skipif(
    shutil.which("editcap") is None, reason="editcap (wireshark-common) not installed"
)

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"
SHIFT_S = 0.002  # less than the captures last: they overlap in time, so they are two places
COMPARED = ("protocol", "topic", "partition", "offset", "message_id", "consumer", "status", "deliveries")
TIMES = ("produced_ts", "acked_ts", "delivered_ts", "committed_ts")


def _journeys(tmp: Path, files: list[str]) -> tuple[list[dict], clocks.Clocks]:
    """The journeys of `files`, each file its own vantage point, and their clocks."""
    out = decode_files(files)
    write_decoded(str(tmp), out)
    ids = [capture_id(f) for f in files]
    clk = clocks.from_commands(
        pa.Table.from_pylist(out["commands"], tables.schema("commands")), {i: i for i in ids}
    )
    rows = journeys.compute(str(tmp), ids, clk).to_pylist()
    return sorted(rows, key=lambda r: [str(r[k]) for k in COMPARED]), clk


@pytest.mark.parametrize("sample", ["pulsar/pulsar_none.pcap", "iggy/client_vsr.pcap"])
def test_two_vantage_points_give_the_one_captures_journeys(tmp_path, sample):
    src = str(SAMPLES / sample)
    late = tmp_path / "late.pcap"
    subprocess.run(
        ["editcap", "-F", "nsecpcap", "-t", str(SHIFT_S), src, str(late)], check=True, capture_output=True
    )
    one, _ = _journeys(tmp_path / "one", [src])
    two, clk = _journeys(tmp_path / "two", [src, str(late)])
    orig, moved = clk.offsets[capture_id(src)], clk.offsets[capture_id(str(late))]
    assert abs(moved.offset_ns - orig.offset_ns - SHIFT_S * 1e9) < 1e6
    ahead = datetime.timedelta(microseconds=round(-orig.offset_ns / 1000))  # onto the reference's clock
    assert one and len(two) == len(one)  # each connection once: its other copy left out
    for a, b in zip(one, two):
        assert [a[k] for k in COMPARED] == [b[k] for k in COMPARED]
        assert [a[k] and a[k] + ahead for k in TIMES] == [b[k] for k in TIMES]
        # equal round trips: the reference's copy stands for each connection, no time moved
        assert a["clock_corrected"] is False and b["clock_corrected"] is False
