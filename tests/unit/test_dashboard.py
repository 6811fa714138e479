"""The report's aggregates (dashboard.py) on small real Delta tables written with delta-rs, checked
against the same numbers computed here in plain Python (numpy for percentiles); the time axis; the
scope flags; partial, empty and missing lakes. No Spark."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from brokerscope import dashboard, tables
from brokerscope.cli import main
from brokerscope.dashboard import MS, Scope, Source, make_timeline
from brokerscope.lake import Lake
from tests.conftest import SAMPLE_DATA

SEC = 1000 * MS
T0 = 1_763_640_000 * SEC  # 2025-11-20T12:00:00Z


def lake_with(root, rows: dict[str, list[dict]], only: tuple[str, ...] | None = None) -> Lake:
    """A real lake (every table, or `only` these) holding these rows, conformed as the pipeline
    conforms them."""
    lake = Lake(root)
    lake.ensure_tables()
    if only is not None:
        import shutil

        for t in tables.TABLES:
            if t not in only:
                shutil.rmtree(lake.path(t))
    for t, rs in rows.items():
        write_deltalake(lake.path(t), pa.Table.from_batches([tables.conform(t, rs)]), mode="append")
    return lake


def base(i: int, ts_ns: int, capture: str = "c0ffee01", conn: str | None = None) -> dict:
    return {
        "capture_id": capture,
        "protocol": "kafka",
        "conn_id": conn or f"conn{i % 3}",
        "client_ip": f"10.0.0.{i % 3 + 1}",
        "client_port": 40000 + i % 3,
        "server_ip": "10.0.1.1",
        "server_port": 9092,
        "ts_ns": ts_ns,
    }


# -- the time axis ------------------------------------------------------------------------------


@pytest.mark.parametrize("covered_s", [0.001, 0.05, 1, 7.5, 60, 119, 121, 3600, 86_400, 40 * 86_400])
def test_bucket_width_is_the_first_ladder_step_within_the_target(covered_s):
    covered = int(covered_s * SEC)
    w = dashboard.bucket_width(covered)
    assert covered <= w * dashboard.TARGET_BUCKETS
    i = dashboard.BUCKETS.index(w)
    assert i == 0 or covered > dashboard.BUCKETS[i - 1] * dashboard.TARGET_BUCKETS


def test_captures_years_apart_are_two_stretches_with_one_separator():
    a = (T0, T0 + 59 * SEC)  # a minute, then another minute three years later
    b = (T0 + 3 * 365 * 86_400 * SEC, T0 + 3 * 365 * 86_400 * SEC + 59 * SEC)
    tl = make_timeline([b, a])
    assert tl.width_ns == 1 * SEC  # 2 minutes covered: 1 s buckets, not days
    assert tl.stretches == [(a[0], a[1]), (b[0], b[1])]
    cats = tl.categories()
    assert len(cats) == 60 + 1 + 60
    assert (
        cats[0] == "2025-11-20 12:00:00"
        and cats[60].startswith("(+1,095 d)")
        and cats[61].startswith("2028-11-")
    )
    assert tl.separators() == [60]
    assert (
        len(tl.align({T0: 5})) == len(cats) and tl.align({T0: 5})[:2] == [5, 0] and tl.align({})[60] is None
    )
    vals, text = tl.ticks()
    assert vals[0] == cats[0] and "2025-11-20" in text[0] and set(vals) <= set(cats)
    assert any("2028-11-" in t for t in text)  # the second stretch's first tick is dated


def test_a_short_silence_stays_on_the_axis_and_many_stretches_are_capped():
    tl = make_timeline([(T0, T0 + 100 * SEC), (T0 + 110 * SEC, T0 + 200 * SEC)])
    assert len(tl.stretches) == 1 and tl.width_ns == 2 * SEC
    # 30 captures of a second, an hour apart: at most MAX_STRETCHES stretches, a bounded axis
    many = [(T0 + i * 3600 * SEC, T0 + i * 3600 * SEC + SEC) for i in range(30)]
    tl = make_timeline(many)
    assert len(tl.stretches) <= dashboard.MAX_STRETCHES
    assert len(tl.categories()) <= dashboard.MAX_AXIS
    assert make_timeline([]) is None


# -- aggregates against plain Python -------------------------------------------------------------


@pytest.fixture
def kafka_lake(tmp_path):
    """Latencies of three commands over 25 s with known values; messages with keys and sizes;
    commands with error codes and decode statuses; streams with gaps and a reset."""
    rng = random.Random(14)
    lat, msgs, cmds = [], [], []
    for i in range(600):
        ts = T0 + rng.randrange(0, 25 * SEC)
        cmd = ("Produce", "Fetch", "Metadata")[i % 3]
        lat.append(
            {
                **base(i, ts),
                "request_command": cmd,
                "response_command": cmd,
                "latency_us": round(rng.lognormvariate(6 + i % 3, 1), 3),
                "topic": "orders" if i % 2 else "o'brien",
            }
        )
        key = None if i % 4 == 0 else b"k" * (i % 7)
        msgs.append(
            {
                **base(i, ts),
                "direction": ("produce", "deliver", "stored")[i % 3],
                "topic": ("orders", "payments", "o'brien")[i % 5 % 3],
                "key": key,
                "value": b"v" * 10,
                "value_size": None if i % 6 == 0 else 100 + i,
            }
        )
        cmds.append(
            {
                **base(i, ts),
                "direction": "s2c",
                "command": cmd,
                "error_code": (0, 0, 3, None, 6)[i % 5],
                "decode_status": "ok" if i % 7 else "truncated",
                "topic": "orders",
            }
        )
    streams = [
        {**base(0, T0, conn="conn0"), "gap_count": 2, "gap_bytes": 900, "retransmitted_bytes": 0, "rst_seen": False,
         "duration_us": 1e6, "conn_state": "SF"},
        {**base(1, T0 + 3 * SEC, conn="conn1"), "gap_count": 0, "gap_bytes": 0, "retransmitted_bytes": 50,
         "rst_seen": True, "duration_us": 2e6, "conn_state": "RSTO"},
        {**base(2, T0 + 9 * SEC, conn="conn2"), "gap_count": 0, "gap_bytes": 0, "retransmitted_bytes": 0,
         "rst_seen": False, "duration_us": 4e6, "conn_state": "SF"},
        # started 40 s before T0 + 20 s and lasts past it: in a window starting there
        {**base(2, T0 - 20 * SEC, conn="long"), "gap_count": 0, "gap_bytes": 0, "retransmitted_bytes": 0,
         "rst_seen": False, "duration_us": 60e6, "conn_state": "S1"},
    ]  # fmt: skip
    lake = lake_with(
        tmp_path / "lake", {"latencies": lat, "messages": msgs, "commands": cmds, "streams": streams}
    )
    return lake, lat, msgs, cmds


def _bucket(ts: int, w: int) -> int:
    return ts // w * w


def assert_percentile(got: float, vals: list[float], q: float) -> None:
    """numpy's linear interpolation between the closest ranks; DataFusion's weight of the upper
    rank is good to about 1e-6 (0.99 * 199 = 197.01 weighs it 0.009999), so the tolerance is a
    millionth of the step between the two ranks."""
    s = sorted(vals)
    h = q * (len(s) - 1)
    lo, hi = s[int(h)], s[min(int(h) + 1, len(s) - 1)]
    want = np.percentile(vals, q * 100)
    assert lo <= got <= hi
    assert abs(got - want) <= 1e-5 * (hi - lo) + 1e-9 * abs(want), (got, want)


def test_request_rate_and_percentiles_match_numpy(kafka_lake):
    lake, lat, _, _ = kafka_lake
    src = Source(lake)
    tl = make_timeline(dashboard.covered_intervals(src, Scope()))
    assert tl.width_ns == 500 * MS  # 25 s (streams reach back 20 s more: 45 s) -> 500 ms buckets
    got = dashboard.request_latency(src, Scope(), tl, exact=True).to_pylist()
    want: dict[tuple[str, int], list[float]] = {}
    for r in lat:
        want.setdefault((f"kafka {r['request_command']}", _bucket(r["ts_ns"], tl.width_ns)), []).append(
            r["latency_us"]
        )
    assert {(g["series"], g["bucket_ns"]) for g in got} == set(want)
    for g in got:
        vals = want[(g["series"], g["bucket_ns"])]
        assert g["requests"] == len(vals)
        assert_percentile(g["p50_us"], vals, 0.5)
        assert_percentile(g["p99_us"], vals, 0.99)
    # the t-digest estimates lie within the values of their bucket, near the exact ones
    approx = dashboard.request_latency(src, Scope(), tl, exact=False).to_pylist()
    for g in approx:
        vals = want[(g["series"], g["bucket_ns"])]
        assert min(vals) <= g["p50_us"] <= max(vals) and min(vals) <= g["p99_us"] <= max(vals)


def test_percentiles_over_one_wide_bucket_match_numpy(kafka_lake):
    """One scope-wide check with many values per group: the exact percentile is numpy's linear
    interpolation, not a nearest rank."""
    lake, lat, _, _ = kafka_lake
    tl = dashboard.Timeline(dashboard.BUCKETS[-1], [(0, 0)])
    got = {
        g["series"]: g for g in dashboard.request_latency(Source(lake), Scope(), tl, exact=True).to_pylist()
    }
    for cmd in ("Produce", "Fetch", "Metadata"):
        vals = [r["latency_us"] for r in lat if r["request_command"] == cmd]
        assert got[f"kafka {cmd}"]["requests"] == len(vals) == 200
        assert_percentile(got[f"kafka {cmd}"]["p99_us"], vals, 0.99)
        assert_percentile(got[f"kafka {cmd}"]["p50_us"], vals, 0.5)


def test_latency_summary_per_command_over_the_scope(kafka_lake):
    lake, lat, _, _ = kafka_lake
    got = dashboard.latency_summary(Source(lake), Scope(), exact=True).to_pylist()
    assert [g["requests"] for g in got] == [200, 200, 200]
    for g in got:
        vals = [r["latency_us"] for r in lat if r["request_command"] == g["request_command"]]
        assert_percentile(g["p99_us"], vals, 0.99)
        assert g["max_us"] == max(vals) and g["errors"] == 0


def test_throughput_counts_messages_and_key_plus_value_bytes(kafka_lake):
    lake, _, msgs, _ = kafka_lake
    src = Source(lake)
    tl = dashboard.Timeline(5 * SEC, [(T0, T0 + 25 * SEC)])
    got = {
        (g["direction"], g["topic"], g["bucket_ns"]): (g["messages"], g["bytes"])
        for g in dashboard.throughput(src, Scope(), tl).to_pylist()
    }
    want: dict = {}
    for m in msgs:
        if m["direction"] == "stored":
            continue
        k = (m["direction"], m["topic"], _bucket(m["ts_ns"], 5 * SEC))
        n, b = want.get(k, (0, 0))
        size = m["value_size"] if m["value_size"] is not None else len(m["value"])
        want[k] = (n + 1, b + size + len(m["key"] or b""))
    assert got == want


def test_error_codes_and_decode_statuses_per_bucket(kafka_lake):
    lake, _, _, cmds = kafka_lake
    src = Source(lake)
    tl = dashboard.Timeline(10 * SEC, [(T0, T0 + 20 * SEC)])
    got = {
        (g["command"], g["error_code"], g["bucket_ns"]): g["frames"]
        for g in dashboard.error_codes(src, Scope(), tl).to_pylist()
    }
    want: dict = {}
    for c in cmds:
        if c["error_code"]:
            k = (c["command"], c["error_code"], _bucket(c["ts_ns"], 10 * SEC))
            want[k] = want.get(k, 0) + 1
    assert got == want and {k[1] for k in got} == {3, 6}
    statuses = dashboard.decode_statuses(src, Scope(), tl).to_pylist()
    assert {s["series"] for s in statuses} == {"kafka: truncated"}
    assert sum(s["frames"] for s in statuses) == sum(1 for c in cmds if c["decode_status"] != "ok")


def test_connections_troubled_first_and_top_lists(kafka_lake):
    lake, _, msgs, _ = kafka_lake
    src = Source(lake)
    tl = make_timeline(dashboard.covered_intervals(src, Scope()))
    per = dashboard.connections_over_time(src, Scope(), tl).to_pylist()
    assert sum(r["opened"] for r in per) == 4
    assert sum(r["with_gaps"] for r in per) == 1 and sum(r["reset"] for r in per) == 1
    assert sum(r["with_retransmissions"] for r in per) == 1
    assert [r["conn_id"] for r in dashboard.troubled_connections(src, Scope()).to_pylist()] == [
        "conn0",
        "conn1",
    ]
    states = {
        (r["conn_state"]): r["connections"] for r in dashboard.connection_states(src, Scope()).to_pylist()
    }
    assert states == {"SF": 2, "RSTO": 1, "S1": 1}
    topics = {
        (r["topic"], r["direction"]): r["messages"] for r in dashboard.top_topics(src, Scope()).to_pylist()
    }
    want: dict = {}
    for m in msgs:
        want[(m["topic"], m["direction"])] = want.get((m["topic"], m["direction"]), 0) + 1
    assert topics == want


# -- the scope ----------------------------------------------------------------------------------


def test_a_topic_with_a_quote_is_a_value_not_sql(kafka_lake):
    lake, lat, _, _ = kafka_lake
    src = Source(lake)
    scope = Scope.parse(topics=["o'brien"])
    counts = dashboard.row_counts(src, scope)
    assert counts["latencies"] == sum(1 for r in lat if r["topic"] == "o'brien")
    assert dashboard.row_counts(src, Scope.parse(topics=["x' OR '1'='1"]))["latencies"] == 0
    # streams: the connections that carried the topic in commands
    assert counts["streams"] == 0
    assert dashboard.row_counts(src, Scope.parse(topics=["orders"]))["streams"] == 3


def test_a_topic_no_row_names_is_an_error_not_an_empty_report(kafka_lake, tmp_path):
    lake, _, _, _ = kafka_lake
    with pytest.raises(ValueError, match=f"no topic orderz in the lake at {lake.root}"):
        dashboard.build(lake.root, tmp_path / "r.html", Scope.parse(topics=["orders", "orderz"]))
    assert not (tmp_path / "r.html").exists()
    r = dashboard.build(lake.root, tmp_path / "r.html", Scope.parse(topics=["orders"]))
    assert r.charts > 0


def test_a_time_window_keeps_rows_in_it_and_connections_overlapping_it(kafka_lake):
    lake, lat, _, _ = kafka_lake
    src = Source(lake)
    scope = Scope.parse(since=str((T0 + 20 * SEC) / 1e9), until="2025-11-20T12:00:22Z")
    counts = dashboard.row_counts(src, scope)
    assert counts["latencies"] == sum(1 for r in lat if T0 + 20 * SEC <= r["ts_ns"] < T0 + 22 * SEC) > 0
    # "long" started at T0 - 20 s and lasted 60 s; conn2 ran from T0 + 9 s to T0 + 13 s
    ids = {
        r["conn_id"]
        for r in src.query(f"SELECT conn_id FROM streams WHERE {scope.where('streams')}").to_pylist()
    }
    assert ids == {"long"}
    # on the time axes it starts with the window, not 40 s before it
    tl = make_timeline(dashboard.covered_intervals(src, scope))
    assert tl.stretches[0][0] >= T0 + 20 * SEC
    per = dashboard.connections_over_time(src, scope, tl).to_pylist()
    assert [(r["bucket_ns"], r["opened"]) for r in per] == [(T0 + 20 * SEC, 1)]


def test_a_time_window_scopes_the_journeys_and_lag_tables_by_their_ts(tmp_path):
    """journeys and lag have no ts_ns, only `ts` (µs): `report --since/--until` on a lake ingested
    with --journeys or --lag asked them for ts_ns and failed, naming an empty column (found by a
    user trial). Their rows count by `ts`, the window's bounds in ns against it."""
    rows = {
        "journeys": [
            {"capture_id": "c0ffee01", "protocol": "kafka", "topic": "orders", "ts_ns": T0 + i * SEC}
            for i in range(6)
        ],
        "lag": [
            {"capture_id": "c0ffee01", "protocol": "kafka", "topic": "orders", "ts_ns": T0 + i * 60 * SEC}
            for i in range(3)
        ],
        "commands": [{**base(i, T0 + i * SEC), "command": "Produce"} for i in range(6)],
    }
    lake = lake_with(tmp_path / "lake", rows)
    assert all("ts_ns" not in tables.schema(t).names for t in ("journeys", "lag"))
    src = Source(lake)
    # [T0 + 2 s + 1 ns, T0 + 60 s + 1 ns): journeys at 3, 4, 5 s; the lag row at 60 s
    counts = dashboard.row_counts(src, Scope(since_ns=T0 + 2 * SEC + 1, until_ns=T0 + 60 * SEC + 1))
    assert (counts["journeys"], counts["lag"], counts["commands"]) == (3, 1, 3)
    r = dashboard.build(lake.root, tmp_path / "r.html", Scope.parse(since="2025-11-20T12:00:02Z"))
    assert not [e for e in r.empty if "Could not compute" in e]
    # and the error that named an empty column: DataFusion's sentence ends with a full stop
    for text, name in (
        ("No field named ts_ns.", "ts_ns"),
        ('No field named "journeys.ts_ns".', "journeys.ts_ns"),
    ):
        assert dashboard._NO_FIELD.search(f"Schema error: {text}").group(1) == name


def test_scope_flags_are_checked():
    with pytest.raises(ValueError, match="--capture-id"):
        Scope.parse(capture_ids=["x'; DROP"])
    with pytest.raises(ValueError, match="--since"):
        Scope.parse(since="yesterday")
    with pytest.raises(ValueError, match="not after --since"):
        Scope.parse(since="2026-01-02", until="2026-01-01")
    assert Scope.parse(capture_ids=["ABCDEF01", "abcdef01"]).capture_ids == ("abcdef01",)
    assert Scope().where("commands") == "TRUE"


# -- whole pages, the command -------------------------------------------------------------------


def test_the_page_names_what_a_partial_lake_lacks(tmp_path):
    lake = lake_with(
        tmp_path / "lake",
        {
            "commands": [
                {**base(i, T0 + i * SEC), "command": "Produce", "error_code": i % 2, "decode_status": "ok"}
                for i in range(5)
            ]
        },
        only=("commands", "inputs"),
    )
    r = dashboard.build(lake.root, tmp_path / "r.html", Scope())
    page = (tmp_path / "r.html").read_text()
    assert "The lake has no <code>latencies</code> table." in page
    assert "has no <code>streams</code> table" in page
    assert r.charts == 1  # the error codes; decode statuses: every frame decoded
    assert 'class="plotly-graph-div bs-chart" data-chart="errors"' in page
    assert '<div class="bs-empty" data-chart="decode">Every frame in scope decoded' in page
    assert "<script" in page and "http://" not in page.split("<body>")[1].split("<script")[0]


def test_an_empty_lake_gives_a_page_that_says_so(tmp_path):
    lake = lake_with(tmp_path / "lake", {})
    r = dashboard.build(lake.root, tmp_path / "r.html", Scope())
    page = (tmp_path / "r.html").read_text()
    assert r.charts == 0 and len(r.empty) == 9
    assert f"No rows in scope (the whole lake) in the lake at {lake.root}" in page


def test_the_command_exit_codes(tmp_path, capsys):
    missing = tmp_path / "nolake"
    assert main(["report", "--lake", str(missing), "--out", str(tmp_path / "r.html")]) == 2
    assert f"no brokerscope lake at {missing}" in capsys.readouterr().err
    lake = lake_with(tmp_path / "lake", {})
    assert (
        main(["report", "--lake", str(lake.root), "--capture-id", "deadbeef", "-o", str(tmp_path / "r.html")])
        == 2
    )
    assert f"no capture deadbeef in the lake at {lake.root}" in capsys.readouterr().err
    assert main(["report", "--lake", str(lake.root), "--since", "soon"]) == 2
    assert "--since" in capsys.readouterr().err
    assert main(["report", "--lake", str(lake.root), "-o", str(tmp_path / "no" / "r.html")]) == 2
    assert f"cannot write {tmp_path / 'no' / 'r.html'}: no directory" in capsys.readouterr().err
    assert main(["report", "--lake", str(lake.root), "-o", str(tmp_path / "r.html")]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'r.html'}" in out and (tmp_path / "r.html").stat().st_size > 1_000_000


def test_a_column_an_older_lake_lacks_is_a_note_not_a_crash(tmp_path):
    """A `streams` table written before conn_state and history existed (ingest adds them, the
    report does not write): the states chart says which column is missing, the rest is drawn."""
    import shutil

    from deltalake import DeltaTable

    lake = lake_with(tmp_path / "lake", {})
    shutil.rmtree(lake.path("streams"))
    old = pa.schema([f for f in tables.schema("streams") if f.name not in ("conn_state", "history")])
    DeltaTable.create(lake.path("streams"), old, partition_by=["date"])
    rows = tables.conform("streams", [{**base(i, T0 + i * SEC), "gap_count": i % 2} for i in range(4)])
    write_deltalake(lake.path("streams"), pa.Table.from_batches([rows]).select(old.names), mode="append")
    r = dashboard.build(lake.root, tmp_path / "r.html", Scope())
    page = (tmp_path / "r.html").read_text()
    assert "Could not compute this chart: the <code>streams</code> table of this lake has no column" in page
    assert {e.split(":")[0] for e in r.empty if "Could not compute" in e} == {"connections", "states"}
    assert 'data-chart="clients"' in page and r.charts == 1  # clients need neither column


def test_a_lake_of_segment_files_names_their_record_times_not_no_rows(spark, tmp_path):
    """Only broker segment files ingested (found by a user trial: the header said `time: no rows`
    beside `messages 20`, and the throughput chart that `messages` had none): the header gives the
    stored records' times, the time charts say why they leave them out."""
    from brokerscope import pipeline
    from brokerscope.config import Settings

    lake = tmp_path / "lake"
    settings = Settings.load(overrides={"lake": {"path": str(lake)}})
    pipeline.ingest([str(SAMPLE_DATA / "kafka" / "segments")], settings, spark=spark)
    r = dashboard.build(lake, tmp_path / "r.html", Scope())
    page = (tmp_path / "r.html").read_text()
    stored = DeltaTable(str(lake / "messages")).to_pyarrow_table(columns=["direction", "ts_ns"])
    assert set(stored["direction"].to_pylist()) == {"stored"} and stored.num_rows == 20
    lo, hi = min(stored["ts_ns"].to_pylist()), max(stored["ts_ns"].to_pylist())
    assert "no rows" not in page.split("<dl")[1].split("</dl>")[0]
    want = f"20 messages from broker segment files, record times {dashboard.utc_text(lo)} to {dashboard.utc_text(hi)} UTC"
    assert want in page
    assert "the 20 in <code>messages</code> are records of broker segment files" in page
    assert "(<code>messages</code> has none)" not in page
    assert "throughput: No captured messages in scope" in " ".join(r.empty)


def test_a_damaged_segments_problem_rows_are_not_on_the_time_axis(spark, tmp_path):
    """A segment with a damaged batch (found by a user trial): its LogSegment row, dated by the
    file's mtime, made the header's time span run to today and drew 'frames that did not
    decode'; segment rows are on no capture's clock, as its records are."""
    import shutil

    from brokerscope import pipeline
    from brokerscope.config import Settings

    src = SAMPLE_DATA / "kafka" / "segments"
    seg_dir = tmp_path / "in"
    shutil.copytree(src, seg_dir)
    (log,) = seg_dir.rglob("*.log")
    data = bytearray(log.read_bytes())
    data[700] ^= 0x10  # inside the second batch: a checksum_mismatch row
    log.write_bytes(bytes(data))
    lake = tmp_path / "lake"
    pipeline.ingest([str(seg_dir)], Settings.load(overrides={"lake": {"path": str(lake)}}), spark=spark)
    bad = DeltaTable(str(lake / "commands")).to_pyarrow_table(columns=["command", "decode_status"])
    assert "checksum_mismatch" in bad["decode_status"].to_pylist()
    dashboard.build(lake, tmp_path / "r.html", Scope())
    page = (tmp_path / "r.html").read_text()
    assert "no capture in scope; 20 messages from broker segment files" in page
    assert 'data-chart="decode">No rows in scope to place on a time axis' in page
