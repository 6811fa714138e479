"""A lake whose path has a space, a non-ASCII letter or a symlink in it: every command reads it
(found by a user trial: delta-rs names data files percent-encoded and under the symlink's
target, and `sql`, `tables`, `report` and the second nightly run failed on such a lake)."""

from __future__ import annotations

import json
import os

import pytest

from brokerscope.lake import Lake
from tests.conftest import SAMPLE_DATA
from tests.integration.test_cli import run

pytestmark = pytest.mark.spark

CAPTURE = SAMPLE_DATA / "kafka" / "zstd.pcap"


@pytest.mark.parametrize("where", ["sp dir/lake ü", "link/lake"])
def test_a_lake_at_an_odd_path_reads_and_takes_a_second_run(spark, tmp_path, capsys, where):
    if where.startswith("link"):
        (tmp_path / "target").mkdir()
        os.symlink(tmp_path / "target", tmp_path / "link")
    lake = str(tmp_path / where)
    rc, _, err = run(capsys, "ingest", str(CAPTURE), "--lake", lake)
    assert rc == 0, err
    # the nightly job's second run over the same directory: nothing new, exit 0
    rc, out, err = run(capsys, "ingest", "--skip-ingested", str(CAPTURE), "--lake", lake)
    assert rc == 0, err
    assert not Lake(lake).unreadable and Lake(lake).info()
    rc, out, err = run(capsys, "tables", "--lake", lake)
    assert rc == 0 and "gone" not in out + err, out + err
    rc, out, err = run(
        capsys, "sql", "SELECT count(*) AS n FROM messages", "--lake", lake, "--format", "jsonl"
    )
    assert rc == 0, err
    assert json.loads(out)["n"] > 0
    report = tmp_path / "r.html"
    rc, _, err = run(capsys, "report", "--lake", lake, "-o", str(report))
    assert rc == 0 and report.stat().st_size > 0, err
