"""tables.conform: column names are checked, timestamps derived from nanoseconds, dates from ts."""

import datetime as dt

import pytest

from brokerscope import tables


def test_nanoseconds_become_timestamps_and_date():
    b = tables.conform(
        "latencies",
        [
            {
                "ts_ns": 1_700_000_000_123_456_789,
                "request_ts_ns": 1_700_000_000_123_456_789,
                "response_ts_ns": 1_700_000_000_223_456_789,
                "latency_us": 100000.0,
            },
            {"ts_ns": None},
        ],
    )
    a, b2 = b.to_pylist()
    assert a["ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.UTC)
    assert a["response_ts"] - a["request_ts"] == dt.timedelta(microseconds=100000)
    assert a["date"] == dt.date(2023, 11, 14) and a["ts_ns"] == 1_700_000_000_123_456_789
    assert b2["ts"] is None and b2["date"] == dt.date(1970, 1, 1)


def test_explicit_values_win_and_every_column_is_present():
    rows = [
        {"ts": dt.datetime(2024, 5, 1, tzinfo=dt.UTC), "ts_ns": 1, "date": dt.date(2024, 5, 2), "topic": "t"}
    ]
    r = tables.conform("acks", rows).to_pylist()[0]
    assert r["ts"].year == 2024 and r["date"] == dt.date(2024, 5, 2) and r["topic"] == "t"
    assert set(r) == set(tables.schema("acks").names)


def test_unknown_column_is_an_error():
    with pytest.raises(KeyError, match="topik"):
        tables.conform("messages", [{"topik": "x"}])
