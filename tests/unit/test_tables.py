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


@pytest.mark.parametrize(
    "stamps",
    [
        [1_700_000_000_000_000_000] * 3,  # one day: the date filled
        [86_400_000_000_000 - 1, 86_400_000_000_000, 2 * 86_400_000_000_000 + 5],  # across midnights
        [-1, 0, 86_399_999_999_999],  # before 1970: the date of 1970-01-01, as truncated
        [None, 1_700_000_000_000_000_000, 1_700_000_000_000_000_000],  # no time: 1970-01-01
        [-(2**63), 2**63 - 1, 0],  # int64's ends: years 1677 and 2262, in range
    ],
)
def test_dates_and_timestamps_from_nanoseconds_row_by_row(stamps):
    """ts and date from ts_ns as each row's own value gives them, whichever way conform builds the
    column (one day filled, or row by row); every int64 is a timestamp in range, no anomaly."""
    got = tables.conform("messages", [{"ts_ns": v, "topic": "t"} for v in stamps]).to_pylist()
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

    def toward_zero(a: int, b: int) -> int:
        return -(-a // b) if a < 0 else a // b

    for row, v in zip(got, stamps):
        want_ts = None if v is None else epoch + dt.timedelta(microseconds=toward_zero(v, 1000))
        days = 0 if v is None else toward_zero(v, 86_400_000_000_000)
        assert row["ts"] == want_ts
        assert row["date"] == dt.date(1970, 1, 1) + dt.timedelta(days=days)
        assert row["anomalies"] is None


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
        "message_ts: 1700000000000000000000 ns since 1970 (out of range for int64)"
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
    assert b[1]["anomalies"] == ["latency_us: -3.0 (negative: the response is timed before the request)"]
    acks = tables.conform(
        "acks", [{"ts_ns": 1, "ack_latency_us": -1.0, "anomalies": ["decoder: x"]}]
    ).to_pylist()
    assert acks[0]["ack_latency_us"] is None
    assert acks[0]["anomalies"] == [
        "decoder: x",
        "ack_latency_us: -1.0 (negative: the response is timed before the request)",
    ]
    # a connection whose last packet is timed before its first (a user trial: -1.2 s averages)
    st = tables.conform("streams", [{"ts_ns": 1, "duration_us": -1873.5}, {"ts_ns": 1, "duration_us": 5.0}])
    assert [r["duration_us"] for r in st.to_pylist()] == [None, 5.0]
    assert st.to_pylist()[0]["anomalies"] == [
        "duration_us: -1873.5 (negative: the last packet is timed before the first (a clock stepped back))"
    ]


def test_blocks_and_dict_rows_keep_their_order_and_their_anomalies_their_rows():
    """A block (columns, constants, Arrow arrays) among dict rows: the batch holds the rows in
    the order given, and a value that does not fit is null with its anomaly on its own row."""
    import pyarrow as pa

    first = {"ts_ns": 1_700_000_000_000_000_000, "direction": "produce", "topic": "a", "offset": 1}
    block = tables.Block(
        3,
        {"offset": pa.array([10, 11, 12], pa.int64()), "partition": [0, 2**40, 2], "key": [b"x", None, b"z"]},
        {"ts_ns": 1_700_000_000_000_000_000, "direction": "deliver", "topic": "b", "headers": []},
    )
    last = {**first, "offset": 99, "partition": 7}
    got = tables.conform("messages", [first, block, last]).to_pylist()
    assert [(r["direction"], r["topic"], r["offset"]) for r in got] == [
        ("produce", "a", 1),
        ("deliver", "b", 10),
        ("deliver", "b", 11),
        ("deliver", "b", 12),
        ("produce", "a", 99),
    ]
    assert [r["partition"] for r in got] == [None, 0, None, 2, 7]
    assert [r["anomalies"] for r in got] == [
        None,
        None,
        ["partition: 1099511627776 (out of range for int32)"],
        None,
        None,
    ]
    assert [r["headers"] for r in got] == [None, [], [], [], None]
    assert got[2]["key"] is None and got[3]["key"] == b"z"
    assert all(r["date"] == dt.date(2023, 11, 14) for r in got)


def test_constants_of_many_blocks_are_repeated_per_row_and_a_bad_one_is_its_rows_anomaly():
    """Columns every block gives as a constant (a batch's topic, partition, producer id) become
    one value per block, repeated; one that does not fit is null on that block's rows only."""
    import pyarrow as pa

    def block(n: int, partition, producer_id) -> tables.Block:
        cols = {"offset": pa.array(range(n), pa.int64())}
        const = {"ts_ns": 1_700_000_000_000_000_000, "topic": f"t{n}", "partition": partition}
        return tables.Block(n, cols, {**const, "producer_id": producer_id, "headers": []})

    blocks = [block(2, 0, 7), block(0, 1, 8), block(3, 2**40, None), block(1, 3, 9)]
    got = tables.conform("messages", blocks).to_pylist()
    assert [r["topic"] for r in got] == ["t2", "t2", "t3", "t3", "t3", "t1"]
    assert [r["partition"] for r in got] == [0, 0, None, None, None, 3]
    assert [r["producer_id"] for r in got] == [7, 7, None, None, None, 9]
    bad = ["partition: 1099511627776 (out of range for int32)"]
    assert [r["anomalies"] for r in got] == [None, None, bad, bad, bad, None]
    assert [r["headers"] for r in got] == [[]] * 6
    assert {r["date"] for r in got} == {dt.date(2023, 11, 14)}


def test_per_run_constants_are_the_rows_of_blocks_one_per_run():
    """A block whose batch-level field changes from run to run (tables.PerRun: a Kafka block of
    several partitions' batches) conforms to what a block per run gives, a value that does not
    fit noted on its run's rows only, alone and among other blocks; take and rows expand it."""
    import pyarrow as pa

    per_run = {
        "partition": tables.PerRun([0, 2**40, 5], [2, 1, 3]),
        "compression": tables.PerRun(["lz4", None, "lz4"], [2, 1, 3]),
    }
    joined = tables.Block(6, {"offset": pa.array(range(6), pa.int64())}, {"topic": "t", **per_run})
    split = [
        tables.Block(
            k,
            {"offset": pa.array(range(a, a + k), pa.int64())},
            {"topic": "t", "partition": p, "compression": c},
        )
        for a, k, p, c in ((0, 2, 0, "lz4"), (2, 1, 2**40, None), (3, 3, 5, "lz4"))
    ]
    other = tables.Block(1, {"offset": pa.array([9], pa.int64())}, {"topic": "u", "partition": 1})
    for given in ([joined], [other, joined, other]):
        want = [other, *split, other] if len(given) == 3 else split
        assert tables.conform("messages", given).to_pylist() == tables.conform("messages", want).to_pylist()
    got = tables.conform("messages", [joined]).to_pylist()
    assert [r["partition"] for r in got] == [0, 0, None, 5, 5, 5]
    assert [bool(r["anomalies"]) for r in got] == [False, False, True, False, False, False]
    assert joined.column("partition") == [0, 0, 2**40, 5, 5, 5]
    assert joined.take([5, 0]).rows() == [
        {"offset": 5, "topic": "t", "partition": 5, "compression": "lz4"},
        {"offset": 0, "topic": "t", "partition": 0, "compression": "lz4"},
    ]


@pytest.mark.parametrize(
    "shared",
    [
        {"topic": "orders", "source": "", "headers": [], "producer_id": 7, "checksum_ok": True},
        {"topic": None, "headers": None, "partition": 0, "producer_epoch": -1, "checksum_ok": False},
        {"topic": "caf\udce9", "partition": 2**40, "producer_id": 2**70, "headers": [("k", b"v")]},
        {"topic": b"caf\xe9", "partition": "0", "checksum_ok": 1, "correlation_id": 2.5},
    ],
)
def test_a_constant_every_block_shares_is_what_the_rows_as_dicts_give(shared):
    """A value every block of the call gives for a column (a connection's, a frame's fields) is
    built for all their rows at once: the same rows, nulls and anomalies as the dict rows."""
    import pyarrow as pa

    blocks = [
        tables.Block(
            k, {"offset": pa.array(range(k), pa.int64())}, {"ts_ns": 1_700_000_000_000_000_000, **shared}
        )
        for k in (2, 0, 3, 1)
    ]
    got = tables.conform("messages", blocks)
    got.validate(full=True)
    want = tables.conform("messages", [r for b in blocks for r in b.rows()])
    assert got.to_pylist() == want.to_pylist()


def test_block_rows_and_take():
    import pyarrow as pa

    b = tables.Block(3, {"offset": pa.array([5, 6, 7]), "key": [b"a", b"b", b"c"]}, {"topic": "t"})
    assert b.rows() == [
        {"offset": 5, "key": b"a", "topic": "t"},
        {"offset": 6, "key": b"b", "topic": "t"},
        {"offset": 7, "key": b"c", "topic": "t"},
    ]
    two = b.take([2, 0])
    assert len(two) == 2 and two.rows() == [
        {"offset": 7, "key": b"c", "topic": "t"},
        {"offset": 5, "key": b"a", "topic": "t"},
    ]
    with pytest.raises(KeyError, match="topik"):
        tables.conform("messages", [tables.Block(1, {}, {"topik": "x"})])
