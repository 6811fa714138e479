"""Kafka share-group journeys through a real Spark ingest: the real KIP-932 share consumer's
capture (sample_data/kafka/share.pcap) ingested with journeys on gives the rows the driver-side
computation gives on the same capture decoded without Spark (tests/unit/test_journeys.py checks
those against the manifest)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from brokerscope import journeys
from brokerscope.streams import decode_files
from tests.support.lakecheck import delta_rs_rows, ingest_derived, write_decoded

pytestmark = pytest.mark.spark

SHARE = Path(__file__).resolve().parents[2] / "sample_data/kafka/share.pcap"


def test_share_group_journeys_through_spark(spark, tmp_path):
    ingest_derived(spark, [str(SHARE)], str(tmp_path / "lake"), journeys=True)
    got = delta_rs_rows(str(tmp_path / "lake/journeys"))
    out = decode_files([str(SHARE)])
    write_decoded(str(tmp_path / "plain"), out)
    want = journeys.compute(str(tmp_path / "plain"), sorted({r["capture_id"] for r in out["messages"]}))

    def key(r: dict) -> tuple:
        return (r["message_id"], r["consumer"])

    assert sorted(got, key=key) == sorted(want.to_pylist(), key=key)
    assert Counter((r["consumer"], r["status"], r["redeliveries"]) for r in got) == {
        ("bs-share-group", "delivered", 0): 10,
        ("bs-share-group", "delivered", 1): 1,  # released, delivered again, accepted
        ("bs-share-group", "delivered-not-committed", 0): 1,  # rejected
        ("bs-share-group", "not-delivered", 0): 1,  # produced before the share consumer joined
    }
