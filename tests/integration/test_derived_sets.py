"""The derived tables (journeys, lag) of captures ingested again: a producer's and a consumer's
capture ingested together, then each again on its own, grown, with and without the derived
tables asked for, must leave the lake's journeys and lag as one run over the final files makes
them (Lake.finish_derived: the capture set comes in again). The two captures are the sample
Kafka capture (librdkafka producer, consumer group, commit) split by connection."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest

from brokerscope import pipeline
from tests.support import replay
from tests.support.lakecheck import delta_rs_rows, derived_settings, normalized

pytestmark = pytest.mark.spark

SAMPLE = Path(__file__).parents[2] / "sample_data" / "kafka" / "none.pcap"
PRODUCER_PORTS = {40764, 40772}  # the producer's bootstrap and Produce connections
COMMIT_FRAME = 107  # the consumer's OffsetCommit request: a capture cut before it has no commit
ETH_IPV4, IP_TCP = 0x0800, 6


def _records(path: Path) -> tuple[bytes, list[tuple[int, bytes]]]:
    """A classic Ethernet pcap's global header and (port, record bytes) of its records: the
    client's port for the producer's connections."""
    data = path.read_bytes()
    out, off = [], 24
    while off < len(data):
        caplen = struct.unpack_from("<I", data, off + 8)[0]
        rec = data[off : off + 16 + caplen]
        frame = rec[16:]
        assert struct.unpack_from("!H", frame, 12)[0] == ETH_IPV4 and frame[23] == IP_TCP
        ihl = (frame[14] & 0x0F) * 4
        sport, dport = struct.unpack_from("!HH", frame, 14 + ihl)
        out.append((sport if sport in PRODUCER_PORTS else dport, rec))
        off += 16 + caplen
    return data[:24], out


def _split(tmp: Path, cut: int = COMMIT_FRAME) -> tuple[Path, Path, bytes]:
    """producer.pcap (the producer's connections), consumer.pcap cut before frame `cut` (the
    consumer's commit); the consumer capture's full bytes (what it grows to)."""
    head, recs = _records(SAMPLE)
    prod = [r for port, r in recs if port in PRODUCER_PORTS]
    cons = [(n, r) for n, (port, r) in enumerate(recs, 1) if port not in PRODUCER_PORTS]
    assert prod and cons
    (tmp / "producer.pcap").write_bytes(head + b"".join(prod))
    full = head + b"".join(r for _n, r in cons)
    (tmp / "consumer.pcap").write_bytes(head + b"".join(r for n, r in cons if n < cut))
    return tmp / "producer.pcap", tmp / "consumer.pcap", full


def _derived(lake: Path) -> dict[str, list[tuple]]:
    return {t: normalized(delta_rs_rows(str(lake / t))) for t in ("journeys", "lag")}


def _run(spark, paths: list[Path], lake: Path, **derived: bool):
    summary = pipeline.ingest([str(p) for p in paths], derived_settings(lake, **derived), spark=spark)
    assert summary.errors == []
    return summary


def test_a_capture_set_ingested_again_in_parts_keeps_its_journeys_and_lag(spark, tmp_path):
    prod, cons, full = _split(tmp_path)
    lake = tmp_path / "lake"
    _run(spark, [prod, cons], lake, journeys=True, lag=True)
    statuses = {r["status"] for r in delta_rs_rows(str(lake / "journeys"))}
    assert statuses == {"delivered-not-committed"}  # the commit is not captured yet

    cons.write_bytes(full)  # the consumer's capture grew: its commit is in it now
    rows = _run(spark, [cons], lake).rows  # a nightly run without the derived tables asked for
    assert rows["journeys"] == 12 and rows["lag"] > 0  # computed again, over both captures
    expected_lake = tmp_path / "expected"
    _run(spark, [prod, cons], expected_lake, journeys=True, lag=True)
    expected = _derived(expected_lake)
    assert len(expected["journeys"]) == 12
    assert {r["status"] for r in delta_rs_rows(str(expected_lake / "journeys"))} == {"delivered"}
    assert _derived(lake) == expected

    _run(spark, [cons], lake, journeys=True, lag=True)  # the consumer's capture alone: no second row
    assert _derived(lake) == expected
    last = _run(spark, [prod], lake, journeys=True, lag=True)  # the producer's alone: still delivered
    assert _derived(lake) == expected

    inputs = {r["path"]: r for r in delta_rs_rows(str(lake / "inputs")) if r["status"] == "ok"}
    assert {r["derived_run"] for r in inputs.values()} == {last.run_id}  # the set's rows name the last run


def test_journeys_asked_for_later_cover_the_captures_ingested_together(spark, tmp_path):
    """Both captures ingested in one run without journeys; the producer's ingested again with
    them: its journeys are computed with the consumer's capture (was: over its own alone, 0 rows;
    then the consumer's alone: 12 rows without a produce time)."""
    prod, cons, full = _split(tmp_path)
    cons.write_bytes(full)
    lake, expected_lake = tmp_path / "lake", tmp_path / "expected"
    _run(spark, [prod, cons], expected_lake, journeys=True, lag=True)
    _run(spark, [prod, cons], lake)
    _run(spark, [prod], lake, journeys=True, lag=True)
    assert _derived(lake) == _derived(expected_lake)
    assert all(r["produced_ts"] for r in delta_rs_rows(str(lake / "journeys")))


def test_a_rotation_across_a_quiet_spell_longer_than_the_idle_timeout(spark, tmp_path):
    """The sample capture rotated into two files at packet 81, its second part 11 minutes later
    (its connections quiet across the rotation longer than the idle timeout, their sequence
    numbers going on): one file a night with --skip-ingested must end as one run over both (was:
    the second night's connections mid-stream copies beside the first's, every journey without
    its produce)."""
    head, recs = replay.records(SAMPLE)
    _head, later = replay.records(SAMPLE, 660)
    rot = tmp_path / "rot"
    rot.mkdir()
    (tmp_path / "G-0.pcap").write_bytes(head + b"".join(recs[:81]))
    (tmp_path / "G-1.pcap").write_bytes(head + b"".join(later[81:]))
    expected_lake, lake = tmp_path / "expected", tmp_path / "lake"
    _run(spark, [tmp_path / "G-0.pcap", tmp_path / "G-1.pcap"], expected_lake, journeys=True, lag=True)
    for name in ("G-0.pcap", "G-1.pcap"):  # a night each
        shutil.copy2(tmp_path / name, rot / name)
        s = pipeline.ingest(
            [str(rot)], derived_settings(lake, journeys=True, lag=True), spark=spark, skip_ingested=True
        )
        assert s.errors == []
    streams = delta_rs_rows(str(lake / "streams"))
    assert len(streams) == len(delta_rs_rows(str(expected_lake / "streams"))) == 5
    assert not any(r["midstream"] for r in streams)
    assert _derived(lake) == _derived(expected_lake)
    assert all(r["produced_ts"] for r in delta_rs_rows(str(lake / "journeys")))


def test_a_grown_capture_whose_journeys_were_none_yet_has_them_computed(spark, tmp_path):
    """The consumer's capture cut before any delivery: its set's journeys, computed, are no rows;
    grown, and ingested again without --journeys, they are computed again (found by a user trial:
    0 rows stayed, the table holding none of the set's to tell it was computed)."""
    prod, cons, full = _split(tmp_path, cut=60)
    lake = tmp_path / "lake"
    assert _run(spark, [prod, cons], lake, journeys=True, lag=True).rows["journeys"] == 0
    cons.write_bytes(full)
    rows = _run(spark, [cons], lake).rows
    assert rows["journeys"] == 12 and rows["lag"] > 0
