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


def test_a_value_that_does_not_fit_costs_that_value_not_the_batch():
    """Each kind of value the fuzzing found killing a run: it becomes null, its row says why, and
    every other value of the batch is kept."""
    good = {"ts_ns": 1_700_000_000_000_000_000, "direction": "produce", "topic": "t", "offset": 5}
    rows = [
        good,
        # a Kafka CreateTime written in microseconds, taken as milliseconds: ns beyond int64
        {**good, "message_ts_ns": 1_700_000_000_000_000 * 1_000_000},
        {**good, "topic": b"caf\xe9-latin1", "producer_name": b"\xff\xfe"},  # not UTF-8
        {**good, "partition": 2**32 - 1, "offset": 2**64 - 1},  # unsigned values of the wire
        {**good, "message_ts": 2**62},  # microseconds: year 146 million
    ]
    b = tables.conform("messages", rows).to_pylist()
    assert [r["topic"] for r in b] == ["t", "t", None, "t", "t"]
    assert [r["offset"] for r in b] == [5, 5, 5, None, 5]
    assert b[0]["anomalies"] is None and b[0]["message_ts"] is None
    assert b[1]["message_ts"] is None and b[1]["anomalies"] == [
        "message_ts_ns: 1700000000000000000000 (out of range for int64)"
    ]
    assert b[2]["producer_name"] is None and b[2]["anomalies"] == [
        "topic: b'caf\\xe9-latin1' (not UTF-8)",
        "producer_name: b'\\xff\\xfe' (not UTF-8)",
    ]
    assert b[3]["partition"] is None and b[3]["anomalies"] == [
        "partition: 4294967295 (out of range for int32)",
        "offset: 18446744073709551615 (out of range for int64)",
    ]
    assert b[4]["message_ts"] is None and b[4]["anomalies"] == [
        "message_ts: 4611686018427387904 (µs since 1970 outside years 1-9999)"
    ]
    assert all(r["ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC) for r in b)


def test_no_negative_latency_is_written():
    b = tables.conform(
        "latencies",
        [
            {"ts_ns": 1, "latency_us": 12.5, "request_command": "Produce"},
            {"ts_ns": 1, "latency_us": -3.0, "request_command": "Produce"},
        ],
    ).to_pylist()
    assert [r["latency_us"] for r in b] == [12.5, None]
    assert b[1]["anomalies"] == ["latency_us: -3.0 (negative: the response was captured first)"]
    acks = tables.conform(
        "acks", [{"ts_ns": 1, "ack_latency_us": -1.0, "anomalies": ["decoder: x"]}]
    ).to_pylist()
    assert acks[0]["ack_latency_us"] is None
    assert acks[0]["anomalies"] == [
        "decoder: x",
        "ack_latency_us: -1.0 (negative: the response was captured first)",
    ]
