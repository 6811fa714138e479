"""CPU time of the journeys of the protocols with a package rule (journeys.compute_others and
tables.conform: Pulsar's rule and steps_block) on synthetic rows in memory, no lake read:
N Pulsar messages, each produced with its receipt, delivered to two subscriptions, acked by one
and by half of the other's.

    taskset -c 1 .venv/bin/python bench/journeys_steps_bench.py --messages 1000000
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

from brokerscope import journeys, tables

TOPIC = "persistent://public/default/t"


def _table(name: str, columns, data: dict) -> pa.Table:
    sch = tables.schema(name)
    n = len(next(iter(data.values())))
    return pa.table({c: pa.array(data.get(c, [None] * n), sch.field(c).type) for c in columns})


def rows(n: int) -> tuple[pa.Table, pa.Table]:
    """The messages and acks rows of `n` messages (times in µs steps, one connection each)."""
    ids = [f"100:{i}:-1" for i in range(n)]
    ts = np.arange(n, dtype=np.int64) * 1000
    msgs = {
        "capture_id": ["c"] * 3 * n,
        "protocol": ["pulsar"] * 3 * n,
        "direction": ["produce"] * n + ["deliver"] * 2 * n,
        "topic": [TOPIC] * 3 * n,
        "message_id": ids * 3,
        "key": [b"k%d" % (i % 1000) for i in range(n)] * 3,
        "ts_ns": np.concatenate([ts, ts + 5000, ts + 7000]),
        "conn_id": ["P"] * n + ["C"] * n + ["D"] * n,
        "consumer": [None] * n + ["s1"] * n + ["s2"] * n,
    }
    acks = {
        "protocol": ["pulsar"] * 3 * n,
        "ack_type": ["pulsar_receipt"] * n + ["pulsar_ack"] * 2 * n,
        "topic": [TOPIC] * 3 * n,
        "message_id": ids * 3,
        "ts_ns": np.concatenate([ts + 100, ts + 9000, ts + 9000]),
        "conn_id": ["P"] * n + ["C"] * n + ["D"] * n,
        "consumer": [None] * n + ["s1"] * n + ["s2"] * (n // 2) + [None] * (n - n // 2),
    }
    return (
        _table("messages", journeys.STEP_MSG_COLUMNS, msgs),
        _table("acks", journeys.STEP_ACK_COLUMNS, acks),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    msgs, acks = rows(args.messages)
    for _ in range(args.runs):
        t0 = time.process_time()
        out = tables.conform("journeys", journeys.compute_others(msgs, acks))
        cpu = time.process_time() - t0
        print(f"{args.messages} messages x 2 subscriptions -> {out.num_rows} journeys rows: {cpu:.2f} CPU s")


if __name__ == "__main__":
    main()
