"""Every SQL query in the README runs on a lake made from the bundled sample data."""

from __future__ import annotations

import pytest

from brokerscope.cli import EXAMPLE_QUERY, run_sql
from tests.support.readme import readme_queries

pytestmark = pytest.mark.spark


def test_readme_has_queries():
    assert len(readme_queries()) >= 10


@pytest.mark.parametrize("query", readme_queries(), ids=lambda q: " ".join(q.split())[:60])
def test_readme_query_runs(spark, sample_lake, query):
    cols, rows = run_sql(spark, sample_lake, query)
    assert cols


def test_demo_query_has_a_row_per_protocol(spark, sample_lake):
    cols, rows = run_sql(spark, sample_lake, EXAMPLE_QUERY)
    assert {r[0] for r in rows} >= {"kafka", "pulsar", "iggy", "tubemq"}
