"""The README's Pulsar example queries run and answer what they claim, on decoded sample traffic.

There is no Spark in unit tests: the queries run in DuckDB over the rows of decode_files (Arrow
tables with the lake's schemas). The Spark SQL is converted by two faithful rewrites only:
- `LEFT ANTI JOIN` is DuckDB's `ANTI JOIN` (same semantics: left rows with no match);
- `percentile_approx(x, p)` is a macro computing Spark's definition exactly (the smallest value v
  such that at least p of the values are <= v; Spark's default accuracy of 10 000 makes it exact
  for inputs this small).
Everything else is the README's text as it stands.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pytest

from brokerscope import tables

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "sample_data" / "pulsar"


def pulsar_queries() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n### Pulsar", 1)[1].split("\n### ", 1)[0]
    return re.findall(r"```sql\n(.*?)```", section, re.S)


def to_duckdb(sql: str) -> str:
    return sql.replace("LEFT ANTI JOIN", "ANTI JOIN")


@pytest.fixture(scope="module")
def decoded() -> dict[str, list[dict]]:
    from brokerscope.streams import decode_files

    return decode_files([str(SAMPLES / "pulsar_none.pcap"), str(SAMPLES / "pulsar_chunked.pcap")])


def connect(out: dict[str, list[dict]]):
    import duckdb

    con = duckdb.connect()
    for t in ("commands", "messages", "latencies", "acks"):
        con.register(t, pa.Table.from_pylist(out[t], schema=tables.schema(t)))
    # Spark's percentile_approx, exact: sorted non-null values, 1-based rank ceil(p * n)
    con.execute(
        "CREATE MACRO percentile_approx(x, p) AS list_sort(list(x))[greatest(1, ceil(p * count(x))::BIGINT)]"
    )
    return con


def test_the_section_has_the_two_queries():
    qs = pulsar_queries()
    assert len(qs) == 2
    assert "m.consumer" in qs[1] and "get_json_object" not in qs[1]


def _spark_percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[max(1, math.ceil(p * len(s))) - 1]


def test_publish_latency_per_topic(decoded):
    rows = connect(decoded).sql(to_duckdb(pulsar_queries()[0])).fetchall()
    by_topic = defaultdict(list)
    for r in decoded["latencies"]:
        if r["request_command"] == "SEND" and r["response_command"] == "SEND_RECEIPT":
            by_topic[r["topic"]].append(r["latency_us"])
    assert len(by_topic) >= 5
    assert {t: n for t, n, _, _ in rows} == {t: len(v) for t, v in by_topic.items()}
    for topic, _n, p50, p99 in rows:
        assert p50 == pytest.approx(_spark_percentile(by_topic[topic], 0.5) / 1000)
        assert p99 == pytest.approx(_spark_percentile(by_topic[topic], 0.99) / 1000)
    assert [r[3] for r in rows] == sorted((r[3] for r in rows), reverse=True)


def test_unacked_deliveries_per_subscription(decoded):
    query = to_duckdb(pulsar_queries()[1])
    # the sample clients acknowledge everything they receive
    assert connect(decoded).sql(query).fetchall() == []

    # drop the acks of some deliveries: exactly those must be reported, per subscription and topic
    deliver = [m for m in decoded["messages"] if m["direction"] == "deliver"]
    per_sub: dict[str, list[dict]] = defaultdict(list)
    for m in deliver:
        per_sub[m["consumer"]].append(m)
    assert len(per_sub) >= 4 and None not in per_sub
    dropped = {(m["conn_id"], m["consumer"], m["message_id"]): m for ms in per_sub.values() for m in ms[:2]}
    acks = [
        a
        for a in decoded["acks"]
        if not (
            a["ack_type"] in ("pulsar_ack", "pulsar_ack_cumulative")
            and (a["conn_id"], a["consumer"], a["message_id"]) in dropped
        )
    ]
    assert len(acks) < len(decoded["acks"])
    rows = connect({**decoded, "acks": acks}).sql(query).fetchall()
    expected = Counter((m["consumer"], m["topic"]) for m in dropped.values())
    assert {(s, t): n for s, t, n in rows} == dict(expected)
    assert [r[2] for r in rows] == sorted((r[2] for r in rows), reverse=True)
