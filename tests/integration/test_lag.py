"""Consumer lag from real clients: confluent-kafka (librdkafka) against its mock cluster, a group
that stops after the first of three batches and a group that keeps up, captured on loopback (root
needed). The capture's three phases (a batch produced, then consumed and committed) are moved
whole to three consecutive minutes: the bytes are as captured and in their order, only each
phase's capture times are shifted by one amount, as if the clients had paused between phases, so
the test need not wait minutes. Ingested with journeys and lag on; the lag table must hold what
the clients' own delivery reports, messages and commits show, and the README's journeys and lag
queries run on the lake with results checked against the tables read back by delta-rs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from brokerscope import cli, lag, pipeline
from brokerscope.cli import run_sql
from brokerscope.config import Settings
from brokerscope.lake import Lake
from brokerscope.streams import decode_files
from tests.integration.test_journeys import _consume
from tests.support import kafkamock
from tests.support.lakecheck import delta_rs_rows, derived_settings, write_decoded
from tests.support.readme import readme_query

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(os.geteuid() != 0, reason="live loopback capture needs root (AF_PACKET socket)"),
]

TOPIC = "lag"
EARLY, KEEP = "bs-lag-early", "bs-lag-keep"  # the group that stops after phase 0, the one that keeps up
PER_BATCH = 6  # messages per phase, over partitions 0 and 1
PHASES = 3
S = 1_000_000_000
MIN = 60 * S


def _commit(c, read: list[tuple]) -> dict[int, int]:
    """Commit, per partition, the offset after the last message read: {partition: offset}."""
    from confluent_kafka import TopicPartition

    offsets = {p: max(o for q, o, *_k in read if q == p) + 1 for p in (0, 1)}
    c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False)
    return offsets


def _shifted(frames: list[tuple[int, bytes]], marks: list[int]) -> tuple[list, int]:
    """The frames with each phase (from its mark to the next) moved to start 1 s into minute
    `base + phase`, `base` a whole minute ten minutes before the capture; and `base`."""
    base = (marks[0] // MIN - 10) * MIN
    assert all(b - a < 50 * S for a, b in zip(marks, marks[1:])), "a phase took too long for its minute"
    out = []
    for ts, f in frames:
        k = max(i for i, m in enumerate(marks) if m <= ts) if ts >= marks[0] else 0
        out.append((ts + base + k * MIN + S - marks[k], f))
    assert all(a[0] <= b[0] for a, b in zip(out, out[1:]))
    assert out[-1][0] < base + PHASES * MIN
    return out, base


def _record(tmp: Path) -> dict:
    from tests.support.loopcap import LoopbackCapture, _tcp_ports, write_pcap

    produced: list[tuple] = []  # (partition, offset, key, value) from the delivery reports
    hwm: list[dict[int, int]] = []  # per phase: the partitions' offsets after their last message
    committed: dict[str, list[dict[int, int]]] = {EARLY: [], KEEP: []}  # per phase, as committed
    delivered: dict[str, list[dict[int, int]]] = {EARLY: [], KEEP: []}  # per phase: last read + 1
    marks: list[int] = []
    with LoopbackCapture(str(tmp / "all.pcap"), ports=None, settle_s=0.2) as cap:
        marks.append(time.time_ns())
        p, port = kafkamock.mock_producer("bs-lag-producer")
        bootstrap = f"127.0.0.1:{port}"
        keep = None
        for phase in range(PHASES):
            if phase:
                marks.append(time.time_ns())
            kafkamock.produce_batch(p, TOPIC, phase, PER_BATCH, "lag", produced)
            hwm.append({q: max(o for pp, o, _k, _v in produced if pp == q) + 1 for q in (0, 1)})
            if phase == 0:
                early, got = _consume(bootstrap, EARLY, PER_BATCH, TOPIC)
                read = [(q, o) for q, o, _k in got]
                committed[EARLY].append(_commit(early, read))
                delivered[EARLY].append(committed[EARLY][-1])
                early.close()
                keep, got = _consume(bootstrap, KEEP, PER_BATCH, TOPIC)
                read = [(q, o) for q, o, _k in got]
            else:
                read += [(m.partition(), m.offset()) for m in kafkamock.read(keep, PER_BATCH)]
            committed[KEEP].append(_commit(keep, read))
            delivered[KEEP].append(committed[KEEP][-1])
            time.sleep(0.3)  # a fetch or two after the commit
        keep.close()
        del p
    frames = [(ts, f) for ts, f in cap.frames if (pp := _tcp_ports(f)) and port in pp]
    frames, base = _shifted(frames, marks)
    write_pcap(str(tmp / "lag.pcap"), frames)
    return {
        "pcap": str(tmp / "lag.pcap"),
        "base": base,
        "produced": produced,
        "hwm": hwm,
        "committed": committed,
        "delivered": delivered,
    }


@pytest.fixture(scope="module")
def lag_lake(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lag")
    run = _record(tmp)
    settings = derived_settings(tmp / "lake", journeys=True, lag=True)
    summary = pipeline.ingest([run["pcap"]], settings, spark=spark)
    assert summary.errors == []
    return tmp / "lake", run, settings, summary


def _phase(run: dict, r: dict) -> int:
    return (int(r["minute"].timestamp()) * S - run["base"]) // MIN


def test_lag_per_minute_against_the_clients_records(lag_lake):
    lake, run, _settings, summary = lag_lake
    rows = delta_rs_rows(str(lake / "lag"))
    assert summary.rows["lag"] == len(rows)
    got = {(r["consumer"], r["partition"], _phase(run, r)): r for r in rows}
    assert set(got) == {(g, q, k) for g in (EARLY, KEEP) for q in (0, 1) for k in range(PHASES)}
    for (group, q, k), r in got.items():
        assert (r["protocol"], r["topic"]) == ("kafka", TOPIC)
        last = min(k, len(run["committed"][group]) - 1)  # the early group's offsets stay where it left
        want = (run["hwm"][k][q], run["committed"][group][last][q], run["delivered"][group][last][q])
        assert (r["high_watermark"], r["committed_offset"], r["delivered_offset"]) == want, (group, q, k)
        assert r["lag_committed"] == want[0] - want[1] and r["lag_delivered"] == want[0] - want[2]
        assert r["log_start_offset"] == 0 and r["hwm_samples"] >= 1
        assert r["minute"] <= r["ts"] < r["minute"].replace(second=59, microsecond=999999)
    # the early group: 0, then 3 more each minute per partition, committed and delivered alike
    early = [got[(EARLY, 0, k)] for k in range(PHASES)]
    assert [r["lag_committed"] for r in early] == [0, PER_BATCH // 2, PER_BATCH]
    assert [(r["commits"], r["deliveries"]) for r in early] == [(1, PER_BATCH // 2), (0, 0), (0, 0)]
    assert len({r["committed_ts"] for r in early}) == 1  # carried over from its one commit
    # the group that keeps up: no lag at the end of any minute, one commit and a batch each minute
    for k in range(PHASES):
        for q in (0, 1):
            r = got[(KEEP, q, k)]
            assert (r["lag_committed"], r["lag_delivered"]) == (0, 0)
            assert (r["commits"], r["deliveries"]) == (1, PER_BATCH // 2)
            assert r["delivered_ts"] < r["committed_ts"] <= r["ts"]


def test_lag_is_recomputed_when_the_capture_is_ingested_again(lag_lake, spark):
    lake, run, settings, _summary = lag_lake
    key = ("consumer", "partition", "minute", "high_watermark", "committed_offset", "delivered_offset")
    before = sorted(tuple(r[k] for k in key) for r in delta_rs_rows(str(lake / "lag")))
    summary = pipeline.ingest([run["pcap"]], settings, spark=spark)
    after = sorted(tuple(r[k] for k in key) for r in delta_rs_rows(str(lake / "lag")))
    assert after == before and summary.rows["lag"] == len(after)


# -- the README's four journey queries, on this lake ---------------------------------------------
def _sql(spark, lake: Path, *needles: str) -> list[dict]:
    cols, rows = run_sql(spark, str(lake), readme_query(*needles))
    return [dict(zip(cols, r)) for r in rows]


def test_readme_messages_never_delivered_to_a_group(lag_lake, spark):
    lake, run, _s, _summary = lag_lake
    got = _sql(spark, lake, "FROM journeys", "status = 'not-delivered'")
    # the early group left after phase 0: every later message, and nothing else
    later = sorted((q, o) for q, o, _k, _v in run["produced"] if o >= run["hwm"][0][q])
    assert [(r["consumer"], r["partition"], r["offset"]) for r in got] == [(EARLY, q, o) for q, o in later]
    assert all(r["topic"] == TOPIC and r["produced_ts"] is not None for r in got)


def test_readme_slowest_journeys_of_the_last_hour(lag_lake, spark):
    lake, _run, _s, _summary = lag_lake
    got = _sql(spark, lake, "FROM journeys", "INTERVAL 1 HOUR")
    rows = [r for r in delta_rs_rows(str(lake / "journeys")) if r["produce_to_deliver_us"] is not None]
    assert len(rows) == PER_BATCH + PHASES * PER_BATCH  # the early group's first batch, all for the other
    want = sorted(rows, key=lambda r: (-r["produce_to_deliver_us"], r["message_id"], r["consumer"]))[:20]
    assert [(r["group_id"], r["message_id"]) for r in got] == [(r["consumer"], r["message_id"]) for r in want]
    assert [r["produce_to_deliver_ms"] for r in got] == pytest.approx(
        [r["produce_to_deliver_us"] / 1000 for r in want]
    )


def test_readme_p99_produce_to_deliver_per_topic(lag_lake, spark):
    lake, _run, _s, _summary = lag_lake
    (got,) = _sql(spark, lake, "FROM journeys", "percentile_approx(produce_to_deliver_us")
    us = sorted(
        r["produce_to_deliver_us"]
        for r in delta_rs_rows(str(lake / "journeys"))
        if r["produce_to_deliver_us"] is not None
    )
    assert (got["topic"], got["deliveries"]) == (TOPIC, len(us))
    assert got["max_ms"] == pytest.approx(us[-1] / 1000)
    p99 = got["p99_ms"] * 1000
    assert any(abs(p99 - u) < 1e-3 for u in us) and p99 >= us[len(us) // 2]


def test_readme_consumers_with_growing_lag(lag_lake, spark):
    lake, _run, _s, _summary = lag_lake
    got = _sql(spark, lake, "FROM lag", "regr_slope")
    # the early group on both partitions, 3 messages more each minute; the other group not at all
    assert [(r["consumer"], r["partition"]) for r in got] == [(EARLY, 0), (EARLY, 1)]
    for r in got:
        assert (r["protocol"], r["topic"], r["minutes"]) == ("kafka", TOPIC, PHASES)
        assert (r["first_lag"], r["last_lag"]) == (0, PER_BATCH)
        assert r["lag_per_minute"] == pytest.approx(PER_BATCH / 2)


def test_a_run_killed_before_its_lag_computes_it_when_rolled_forward(spark, lag_lake, tmp_path, monkeypatch):
    expected, run, settings, _summary = lag_lake
    lake = tmp_path / "lake"
    over = {"lake": {"path": str(lake)}, "spark": {"shuffle_partitions": 4}, "lag": {"enabled": True}}
    real = Lake.commit_derived

    def fail(self, table, *a, **k):
        if table == "lag":
            raise RuntimeError("killed before the lag")
        return real(self, table, *a, **k)

    with monkeypatch.context() as m:
        m.setattr(Lake, "commit_derived", fail)
        with pytest.raises(RuntimeError, match="killed before the lag"):
            pipeline.ingest([run["pcap"]], Settings.load(overrides=over), spark=spark)
    assert not delta_rs_rows(str(lake / "lag")) and not delta_rs_rows(str(lake / "inputs"))
    (line,) = Lake(str(lake)).recover()
    assert line.startswith("finished run")
    key = ("consumer", "partition", "minute", "high_watermark", "committed_offset", "delivered_offset")
    assert sorted(tuple(r[k] for k in key) for r in delta_rs_rows(str(lake / "lag"))) == sorted(
        tuple(r[k] for k in key) for r in delta_rs_rows(str(expected / "lag"))
    )


def test_ingest_lag_flag_off_by_default(spark, lag_lake, tmp_path, capsys):
    _lake, run, _s, _summary = lag_lake
    plain = str(tmp_path / "plain")
    assert cli.main(["ingest", run["pcap"], "--lake", plain, "-q"]) == 0
    assert not (tmp_path / "plain" / "lag").exists()
    lake = str(tmp_path / "lake")
    assert cli.main(["ingest", run["pcap"], "--lake", lake, "--lag", "-q"]) == 0
    assert f"lag={2 * 2 * PHASES}" in capsys.readouterr().out
    assert not (tmp_path / "lake" / "journeys").exists()  # its own flag
    assert cli.main(["tables", "--lake", lake, "--format", "csv"]) == 0
    assert "lag" in {line.split(",")[0] for line in capsys.readouterr().out.splitlines()}


# -- a committed offset read back (OffsetFetch) before the group's own first commit ---------------
RESTART = "bs-lag-restart"


def _record_restart(tmp: Path) -> dict:
    """Group RESTART reads a first batch and commits before the capture starts; with the capture
    running, a second batch is produced and the group's consumer starts again: it reads its
    committed offsets back (OffsetFetch), reads the second batch, and (a minute later) commits."""
    from confluent_kafka import Consumer, TopicPartition

    from tests.support.loopcap import LoopbackCapture, _tcp_ports, write_pcap

    produced: list[tuple] = []
    p, port = kafkamock.mock_producer("bs-lag-restart-producer")
    bootstrap = f"127.0.0.1:{port}"
    kafkamock.produce_batch(p, TOPIC, 0, PER_BATCH, "before", produced)
    # the partitions assigned, not subscribed: the group has no member left to wait for
    first = Consumer({"bootstrap.servers": bootstrap, "group.id": RESTART, "enable.auto.commit": False,
                      "enable.metrics.push": False})  # fmt: skip
    first.assign([TopicPartition(TOPIC, q, 0) for q in (0, 1)])
    before = _commit(first, [(m.partition(), m.offset()) for m in kafkamock.read(first, PER_BATCH)])
    first.close()
    marks: list[int] = []
    with LoopbackCapture(str(tmp / "all.pcap"), ports=None, settle_s=0.2) as cap:
        marks.append(time.time_ns())
        kafkamock.produce_batch(p, TOPIC, 1, PER_BATCH, "during", produced)
        again, got = _consume(bootstrap, RESTART, PER_BATCH, TOPIC)
        time.sleep(0.3)  # a fetch or two more, no commit
        marks.append(time.time_ns())
        after = _commit(again, got)
        time.sleep(0.3)
        again.close()
        del p
    frames = [(ts, f) for ts, f in cap.frames if (pp := _tcp_ports(f)) and port in pp]
    frames, base = _shifted(frames, marks)
    write_pcap(str(tmp / "restart.pcap"), frames)
    hwm = {q: max(o for pp, o, _k, _v in produced if pp == q) + 1 for q in (0, 1)}
    return {"pcap": str(tmp / "restart.pcap"), "base": base, "before": before, "after": after, "hwm": hwm}


def test_committed_offset_read_back_stands_until_the_groups_own_commit(tmp_path):
    run = _record_restart(tmp_path)
    out = decode_files([run["pcap"]])
    # the restarted consumer asked for its committed offsets: OffsetFetch v0-7 names the group in
    # the request only
    fetched = [r for r in out["commands"] if r["command"] == "OffsetFetch" and r["direction"] == "s2c"]
    assert fetched and all(r["api_version"] < 8 for r in fetched)
    write_decoded(str(tmp_path / "lake"), out)
    batch = lag.compute(str(tmp_path / "lake"), sorted({r["capture_id"] for r in out["commands"]}))
    got = {(r["consumer"], r["partition"], _phase(run, r)): r for r in batch.to_pylist()}
    assert set(got) == {(RESTART, q, k) for q in (0, 1) for k in (0, 1)}
    for q in (0, 1):
        early, late = got[(RESTART, q, 0)], got[(RESTART, q, 1)]
        # the first minute: the offset committed before the capture, read back; no commit seen
        assert early["committed_offset"] == run["before"][q] == PER_BATCH // 2
        assert early["commits"] == 0 and early["deliveries"] == PER_BATCH // 2
        assert early["high_watermark"] == early["delivered_offset"] == run["hwm"][q]
        assert early["lag_committed"] == run["hwm"][q] - run["before"][q] == PER_BATCH // 2
        assert early["committed_ts"] < early["delivered_ts"]  # read back before the first fetch
        # the next minute: the group's own commit replaces it
        assert (late["committed_offset"], late["commits"]) == (run["after"][q], 1)
        assert late["committed_offset"] == run["hwm"][q] and late["lag_committed"] == 0
        assert late["committed_ts"] > early["ts"]
