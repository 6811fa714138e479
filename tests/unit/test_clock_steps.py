"""A capture whose clock stepped back while it ran (found by a user trial: the same file with its
records from the middle on 3 ms earlier): the packets sort as the file has them, so every row of
the capture without the step is decoded. Sorted by time alone, the records after the step went
before the last 3 ms of records before it: a Kafka request whose SYN sorted after it was taken
for a retransmission and lost without a row or a gap, 7 of 24 Iggy commands and 20 of 54 Pulsar
commands were lost."""

from __future__ import annotations

import pytest

from brokerscope import tables
from brokerscope.config import Settings
from brokerscope.streams import decode_files
from tests.conftest import SAMPLE_DATA
from tests.support import replay

# row values that are (or are made from) the capture's times or its file's bytes
_TIMED = (
    "ts",
    "ts_ns",
    "ts_end",
    "ts_end_ns",
    "date",
    "capture_id",
    "capture_ids",
    "conn_id",
    "first_frame",
    "last_frame",
)


def _timed(key: str) -> bool:
    return key in _TIMED or key.endswith(("_ts", "_us", "_ns")) or "latency" in key


def _untimed(key: str, value):
    """A request before the step answered after it has a negative latency, a connection across it
    a negative duration: said in anomalies."""
    if key == "anomalies" and value:
        value = [a for a in value if "(negative: the " not in a] or None
    return value


def _rows(paths, split_size: int | None = None) -> dict[str, list[str]]:
    settings = Settings.load(overrides={"capture": {"split_size": split_size}} if split_size else None)
    got = decode_files([str(p) for p in (paths if isinstance(paths, list) else [paths])], settings)
    out = {}
    for t in tables.DECODED_TABLES:
        rows = [{k: _untimed(k, v) for k, v in r.items() if not _timed(k)} for r in got[t]]
        out[t] = sorted(repr(sorted(r.items())) for r in rows)
    return out


# (capture, the record the clock steps back at): the step falls inside a connection's handshake
# (txn: a connection's SYN after its first data), or among its messages
CASES = [
    ("kafka/txn.pcap", 86),
    ("iggy/client_vsr.pcap", 16),
    ("pulsar/pulsar_chunked.pcap", 36),
    ("tubemq/tubemq_default_ports.pcap", 60),
]


@pytest.mark.parametrize("name,first", CASES, ids=[c[0].split("/")[1] for c in CASES])
def test_a_clock_stepped_back_a_little_loses_no_row(tmp_path, name, first):
    src = SAMPLE_DATA / name
    want = _rows(src)
    got = _rows(replay.stepped_back(src, tmp_path / "stepped.pcap", first, 0.003))
    for t in tables.DECODED_TABLES:
        assert got[t] == want[t], t
    assert sum(len(v) for v in want.values()) > 20


@pytest.mark.parametrize("split_size", [1024, 4096])
def test_a_step_read_in_several_splits_loses_no_row(tmp_path, split_size):
    """Splits of 1 or 4 KiB: the records after the step begin other splits than the last ones
    before it (each read alone, its packets' order_ns its own: capture.SplitOrder raises them)."""
    src = SAMPLE_DATA / "kafka" / "txn.pcap"
    want = _rows(src)
    stepped = replay.stepped_back(src, tmp_path / "stepped.pcap", 86, 0.003)
    got = _rows(stepped, split_size)
    for t in tables.DECODED_TABLES:
        assert got[t] == want[t], (split_size, t)


@pytest.mark.parametrize("seconds", [6.0, 3600.0])
@pytest.mark.parametrize("first", [4, 48, 84, 119])
def test_a_file_whose_clock_stepped_back_far_keeps_its_order_alone(tmp_path, seconds, first):
    """A step back past CLOCK_STEP_NS (a clock reset) is a new time base, but no other file's
    time meets it: the file keeps its own order (a user trial: a Pulsar connection cut in two
    around the step, 54 of 55 rows lost without a gap row)."""
    src = SAMPLE_DATA / "kafka" / "none.pcap"
    want = _rows(src)
    stepped = replay.stepped_back(src, tmp_path / "stepped.pcap", first, seconds)
    for split_size in (None, 1024):
        got = _rows(stepped, split_size)
        for t in tables.DECODED_TABLES:
            assert got[t] == want[t], (split_size, t)


def test_steps_back_each_within_the_bound_keep_the_file_order_however_far_they_add_up(tmp_path):
    """Two steps of 3 s, three of 2 s (a user trial: 72 of 105 Pulsar commands, 49 of 52 TubeMQ,
    the rows depending on --split-size): the bound is measured from the packet before."""
    cases = [
        ("pulsar/pulsar_none.pcap", [45, 90], 3.0),
        ("tubemq/tubemq_default_ports.pcap", [30, 60, 90], 2.0),
    ]
    for name, firsts, seconds in cases:
        src = SAMPLE_DATA / name
        want = _rows(src)
        path = src
        for k, first in enumerate(firsts):
            path = replay.stepped_back(path, tmp_path / f"step{k}.pcap", first, seconds)
        for split_size in (None, 1024):
            got = _rows(path, split_size)
            for t in tables.DECODED_TABLES:
                assert got[t] == want[t], (name, split_size, t)


@pytest.mark.parametrize(
    "name,at,seconds",
    [
        ("kafka/none.pcap", 29, 6.0),  # a pure ACK mid-connection, 6 s back
        ("kafka/none.pcap", 119, 6.0),  # the last record
        ("pulsar/pulsar_none.pcap", 66, 86_400.0),  # a day back
        ("pulsar/pulsar_none.pcap", 66, -365 * 86_400.0),  # a year ahead
    ],
)
def test_one_record_out_of_time_keeps_its_place(tmp_path, name, at, seconds):
    """One record whose time is wrong, far from the bound (a user trial: 3 responses lost
    silently, a phantom connection, every produced message counted as a retransmission): the
    packets around it are back on the file's time, so it keeps its place in the file."""
    src = SAMPLE_DATA / name
    want = _rows(src)
    got = _rows(replay.stepped_back(src, tmp_path / "one.pcap", at, seconds, count=1))
    for t in tables.DECODED_TABLES:
        assert got[t] == want[t], t


def test_far_steps_and_records_out_of_time_are_counted_for_the_summary(tmp_path):
    """They are no damage, but the user is told (pipeline.RECORD_ANOMALIES: the summary names the
    file): a step back past the bound, one record a day off; none where the times only go on."""
    src = SAMPLE_DATA / "kafka" / "none.pcap"

    def counts(path) -> tuple:
        (st,) = decode_files([str(path)])["_capture_stats"]
        return st.get("clock_steps_back"), st.get("clock_out_of_time")

    assert counts(src) == (None, None)
    assert counts(replay.stepped_back(src, tmp_path / "a.pcap", 48, 6.0)) == (1, None)
    assert counts(replay.stepped_back(src, tmp_path / "b.pcap", 29, 86_400.0, count=1)) == (None, 1)
    assert counts(replay.stepped_back(src, tmp_path / "c.pcap", 48, 3.0)) == (None, None)
