"""The payload policy across runs (inputs.payload): a nightly --skip-ingested run under a
tightened policy decodes the files again, so the payloads kept before are replaced; the journeys'
key_hash stays the sha256 of the key the producer sent, whatever the policy did to the key column.
The sample Kafka capture (librdkafka; its manifest names every key)."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from brokerscope import pipeline
from brokerscope.config import Settings
from tests.conftest import SAMPLE_DATA
from tests.support.lakecheck import delta_rs_rows

pytestmark = pytest.mark.spark

KAFKA = Path(SAMPLE_DATA) / "kafka"


def _settings(lake: Path, policy: str, keys: bool = False, **derived: bool) -> Settings:
    over = {
        "lake": {"path": str(lake)},
        "spark": {"shuffle_partitions": 4},
        "payload": {"policy": policy, "truncate_bytes": 4, "apply_to_keys": keys},
    }
    over |= {name: {"enabled": on} for name, on in derived.items()}
    return Settings.load(overrides=over)


def test_a_tightened_policy_replaces_the_payloads_kept_before(spark, tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy2(KAFKA / "none.pcap", d / "none.pcap")
    lake = tmp_path / "lake"
    first = pipeline.ingest([str(d)], _settings(lake, "keep"), spark=spark, skip_ingested=True)
    assert first.files == 1 and any(r["value"] for r in delta_rs_rows(str(lake / "messages")))
    again = pipeline.ingest([str(d)], _settings(lake, "keep"), spark=spark, skip_ingested=True)
    assert again.files == 0  # the same policy: nothing to do
    drop = pipeline.ingest([str(d)], _settings(lake, "drop", keys=True), spark=spark, skip_ingested=True)
    assert drop.files == 1  # was: skipped as ingested, every value kept in clear
    msgs = delta_rs_rows(str(lake / "messages"))
    assert msgs and not any(r["value"] or r["key"] for r in msgs)
    assert {r["payload"] for r in delta_rs_rows(str(lake / "inputs"))} == {"drop keys"}
    last = pipeline.ingest([str(d)], _settings(lake, "drop", keys=True), spark=spark, skip_ingested=True)
    assert last.files == 0


@pytest.mark.parametrize(("policy", "keys_hashed"), [("keep", True), ("hash", True), ("truncate", False)])
def test_key_hash_is_the_hash_of_the_key_sent(spark, tmp_path, policy, keys_hashed):
    produced = json.loads((KAFKA / "none.json").read_text())["produced"]
    sent = {base64.b64decode(m["key"]) for m in produced if m["key"] is not None}
    nulls = {None} if any(m["key"] is None for m in produced) else set()
    lake = tmp_path / "lake"
    s = pipeline.ingest([str(KAFKA / "none.pcap")], _settings(lake, policy, True, journeys=True), spark=spark)
    assert s.rows["journeys"] == 12
    got = {r["key_hash"] for r in delta_rs_rows(str(lake / "journeys"))}
    if keys_hashed:  # was, under hash: sha256 of the stored hex digest
        assert got == {hashlib.sha256(k).hexdigest() for k in sent} | nulls
    else:  # a truncated key's hash would name another key
        assert got == {None}
