"""The connection shuffle by size (spark.balance_connections): connections go to decode tasks of
about the same payload bytes, whole, and the tables do not depend on which task took which."""

from __future__ import annotations

import random

import pytest

from brokerscope import pipeline, tables
from brokerscope.config import Settings
from tests.support.lakecheck import delta_rs_rows, normalized
from tests.support.synth import write_capture

pytestmark = pytest.mark.spark


def test_spark_hash_and_partition_keys_agree_with_spark(spark):
    """The driver's copy of Spark's hash gives what Spark's `hash()` gives, and each partition
    key lands in its partition when Spark repartitions by it."""
    from pyspark.sql import functions as F

    rnd = random.Random(13)
    values = [0, 1, -1, 42, 2**31 - 1, -(2**31)] + [rnd.randrange(-(2**31), 2**31) for _ in range(200)]
    got = spark.createDataFrame([(v,) for v in values], "v int").select("v", F.hash("v").alias("h")).collect()
    assert {r["v"]: r["h"] for r in got} == {v: pipeline.spark_hash_int(v) for v in values}
    for n in (2, 3, 4, 7, 16):
        keys = pipeline.partition_keys(n)
        df = spark.createDataFrame([(p, k) for p, k in enumerate(keys)], "p int, k int").repartition(n, "k")
        placed = df.select("p", F.spark_partition_id().alias("at")).collect()
        assert sorted((r["p"], r["at"]) for r in placed) == [(p, p) for p in range(n)], n


def test_assign_partitions_is_largest_first_into_the_least_loaded():
    costs = {("10.0.0.1", 1000 + i, "10.0.0.2", 9092): c for i, c in enumerate([1, 2, 3, 4, 5, 6, 7, 8])}
    where = pipeline.assign_partitions(costs, 4)
    loads = [sum(c for k, c in costs.items() if where[k] == p) for p in range(4)]
    assert loads == [9, 9, 9, 9]
    assert pipeline.assign_partitions(dict(reversed(costs.items())), 4) == where  # order-free
    # one connection larger than all the others together: alone in its partition
    costs[("10.0.0.1", 999, "10.0.0.2", 9092)] = 100
    where = pipeline.assign_partitions(costs, 2)
    assert [k for k in costs if where[k] == where[("10.0.0.1", 999, "10.0.0.2", 9092)]] == [
        ("10.0.0.1", 999, "10.0.0.2", 9092)
    ]


def test_balanced_shuffle_keeps_connections_whole_and_tasks_even(spark):
    """Packets of 8 connections of 1 to 8 units of payload: 4 tasks of 9 units each, every
    connection's packets in one task, the counter row (null 4-tuple) kept."""
    from pyspark.sql import functions as F

    rows = []
    for i in range(8):
        for _ in range(i + 1):
            rows += [
                ("10.0.0.1", 1000 + i, "10.0.0.2", 9092, 500),
                ("10.0.0.1", 1000 + i, "10.0.0.2", 9092, 500),
            ]
    rows.append((None, None, None, None, 0))
    df = spark.createDataFrame(rows, "lo_ip string, lo_port int, hi_ip string, hi_port int, payload_len int")
    cached: list = []
    try:
        out = pipeline._balanced(spark, df, 4, cached)
        assert out.columns == df.columns
        got = out.select("lo_port", "payload_len", F.spark_partition_id().alias("at")).collect()
    finally:
        for c in cached:
            c.unpersist()
    assert len(got) == len(rows)
    at = {}
    for r in got:
        if r["lo_port"] is not None:
            at.setdefault(r["lo_port"], set()).add(r["at"])
    assert all(len(parts) == 1 for parts in at.values())
    loads = [
        sum(r["payload_len"] for r in got if r["at"] == p and r["lo_port"] is not None) for p in range(4)
    ]
    assert loads == [9000] * 4


def test_tables_do_not_depend_on_the_balance(spark, tmp_path):
    """The same capture through the shuffle, connections by size and by hash: the same rows
    (connection ids and identity digests included)."""
    cap = tmp_path / "syn.pcap"
    write_capture(str(cap), n_conns=30, exchanges=6)
    got = {}
    for balance in (True, False):
        lake = tmp_path / f"lake-{balance}"
        over = {
            "lake": {"path": str(lake)},
            "spark": {"shuffle_partitions": 4, "balance_connections": balance},
            "capture": {"split_size": 900},
        }
        s = pipeline.ingest([str(cap)], Settings.load(overrides=over), spark=spark)
        assert s.partial == [] and s.unreadable == []
        got[balance] = {t: delta_rs_rows(str(lake / t)) for t in tables.DECODED_TABLES}
    assert len(got[True]["streams"]) == 30
    for t in tables.DECODED_TABLES:
        assert normalized(got[True][t]) == normalized(got[False][t]), t
