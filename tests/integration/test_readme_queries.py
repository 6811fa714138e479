"""Every SQL query in the README runs on a lake made from the bundled sample data."""

from __future__ import annotations

import re

import pytest

from brokerscope import pipeline
from brokerscope.cli import EXAMPLE_QUERY, run_sql
from brokerscope.config import Settings
from tests.conftest import ROOT, SAMPLE_DATA

pytestmark = pytest.mark.spark


def readme_queries() -> list[str]:
    text = (ROOT / "README.md").read_text()
    out = []
    for block in re.findall(r"```sql\n(.*?)```", text, re.S):
        for stmt in block.split(";"):
            lines = [ln for ln in stmt.strip().splitlines() if not ln.strip().startswith("--")]
            if lines:
                out.append("\n".join(lines))
    return out


@pytest.fixture(scope="module")
def sample_lake(spark, tmp_path_factory):
    lake = tmp_path_factory.mktemp("readme") / "lake"
    settings = Settings.load(overrides={"lake": {"path": str(lake)}, "spark": {"shuffle_partitions": 4}})
    pipeline.ingest([str(SAMPLE_DATA)], settings, spark=spark)
    return str(lake)


def test_readme_has_queries():
    assert len(readme_queries()) >= 10


@pytest.mark.parametrize("query", readme_queries(), ids=lambda q: " ".join(q.split())[:60])
def test_readme_query_runs(spark, sample_lake, query):
    cols, rows = run_sql(spark, sample_lake, query)
    assert cols


def test_demo_query_has_a_row_per_protocol(spark, sample_lake):
    cols, rows = run_sql(spark, sample_lake, EXAMPLE_QUERY)
    assert {r[0] for r in rows} >= {"kafka", "pulsar", "iggy", "tubemq"}
