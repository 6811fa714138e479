"""`journeys.compute` alone on a synthetic lake: CPU seconds per run, alternated with another commit's
(and `lag.compute` on the same lake).

    .venv/bin/python bench/journeys_lake_bench.py [--messages 1000000] [--groups 3] [--runs 3]
        [--no-idempotent] [--compare REF] [--check] [--keep DIR]

Writes `messages`, `acks` and `commands` Delta tables (only the columns journeys reads, plus
`value`) with delta-rs: `--messages` produced to one topic of 4 partitions by a plain producer in
Produce requests of 100 records (each answered), one in ten by an idempotent producer (a few of
its requests retried and written again, some responses lost; not with `--no-idempotent`: then
journeys reads no `value`), then `--groups` groups each with
its own client id fetching every message in fetches of 500 records (the last group only the
first 90 %, one message in fifty delivered twice), committing every 20 fetches, with JoinGroup and
Heartbeat requests naming their group, and each fetch's response with the partition's high
watermark. Then times `journeys.compute` (time.process_time, one thread) in alternation with the
same function of `--compare REF`'s src/brokerscope/journeys.py (git show) and with `lag.compute`
(the lag table of the same lake), medians over `--runs` after one untimed call (imports);
`--check` compares the two journeys results, rows and order. Pin it to one core (`taskset -c 1`): Arrow's threads count in the CPU
time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from deltalake import write_deltalake  # noqa: E402

from brokerscope import journeys, lag, tables  # noqa: E402

S = 1_000_000_000
CAPTURE = "bench-capture"


def _table(name: str, cols: dict) -> pa.Table:
    sch = tables.schema(name)
    n = len(next(iter(cols.values())))
    cols = {"capture_id": [CAPTURE] * n, "protocol": ["kafka"] * n, **cols}
    # the table's every column, as a lake's tables have them (null where the bench gives none)
    return pa.table(
        {f.name: pa.array(cols[f.name], f.type) if f.name in cols else pa.nulls(n, f.type) for f in sch}
    )


def build(root: Path, messages: int, groups: int, idempotent: bool = True) -> None:
    rng = np.random.default_rng(16)
    parts = 4
    m = {k: [] for k in (*journeys.MSG_COLUMNS[1:], "value", "consumer", "topic_id")}  # capture_id: _table
    acks = {k: [] for k in (*journeys.ACK_COLUMNS, "details")}  # ack() gives them in this order
    cmd_columns = ("direction", "command", "client_ip", "client_id", "conn_id", "ts_ns", "details")
    cmds = {k: [] for k in (*cmd_columns, "topic", "topic_id", "partition", "decode_status")}
    next_off = [0] * parts
    stored = [[] for _ in range(parts)]  # per partition: (offset, key, value, pid, seq)
    t = 1 * S
    corr = 0
    seqs = [0] * parts

    def msg(direction, p, off, key, value, ts, conn, corr_id, pid, seq):
        row = {
            "direction": direction,
            "topic": "t",
            "partition": p,
            "offset": off,
            "key": key,
            "ts_ns": ts,
            "conn_id": conn,
            "correlation_id": corr_id,
            "producer_id": pid,
            "producer_epoch": 0 if pid >= 0 else -1,
            "sequence": seq,
            "value_hash": None,
            "value_size": len(value),
            "value": value,
            "consumer": None,
            "topic_id": None,
        }
        for k, v in row.items():
            m[k].append(v)

    def ack(kind, p, off, ts, conn, corr_id, consumer=None):
        for k, v in zip(acks, (kind, "t", p, off, consumer, 0, ts, conn, corr_id, None)):
            acks[k].append(v)

    i = 0
    while i < messages:
        idem = idempotent and (i // 100) % 10 == 9
        conn, pid = ("pi", 7) if idem else ("p", -1)
        p = (i // 100) % parts
        batch = range(i, min(i + 100, messages))
        corr += 1
        t += 1_000_000
        recs = []
        for j in batch:
            key, value = f"key-{j % 1000}".encode(), f"message {j} ".encode() * 6
            seq = seqs[p] if idem else -1
            seqs[p] += idem
            recs.append((key, value, seq))
        lost = idem and rng.random() < 0.2
        retried = idem and rng.random() < 0.3
        base = next_off[p]
        for key, value, seq in recs:
            msg("produce", p, None if lost else base, key, value, t, conn, corr, pid, seq)
        if not lost:
            ack("kafka_produce", p, base, t + 500_000, conn, corr)
        offs = [base + k for k in range(len(recs))]
        for (key, value, seq), off in zip(recs, offs):
            stored[p].append((off, key, value, pid, seq))
        next_off[p] += len(recs)
        if retried or lost:  # the same batch again: written again at new offsets
            corr += 1
            t += 1_000_000
            base = next_off[p]
            for key, value, seq in recs:
                msg("produce", p, base, key, value, t, conn, corr, pid, seq)
            ack("kafka_produce", p, base, t + 500_000, conn, corr)
            for k, (key, value, seq) in enumerate(recs):
                stored[p].append((base + k, key, value, pid, seq))
            next_off[p] += len(recs)
        i += len(recs)
    for g in range(groups):
        fconn, gconn, client = f"f{g}", f"g{g}", f"client-{g}"
        t += S
        start = t
        responses = []  # (connection, time, details) of each fetch's response
        cmds_rows = [("JoinGroup", gconn, t), ("SyncGroup", gconn, t + 1000)]
        for p in range(parts):
            limit = len(stored[p]) * (9 if g == groups - 1 and g else 10) // 10
            committed = 0
            for f, lo in enumerate(range(0, limit, 500)):
                t += 1_000_000
                cmds_rows.append(("Fetch", fconn, t))
                hwm = {
                    "PartitionIndex": p,
                    "HighWatermark": len(stored[p]),
                    "LogStartOffset": 0,
                    "ErrorCode": 0,
                }
                fetched = {"Responses": [{"Topic": "t", "Partitions": [hwm]}]}
                responses.append((fconn, t + 200_000, json.dumps(fetched)))
                for off, key, value, pid, seq in stored[p][lo : min(lo + 500, limit)]:
                    reps = 2 if off % 50 == 7 else 1
                    for r in range(reps):
                        msg("deliver", p, off, key, value, t + 200_000 + r, fconn, 1000 + f, pid, seq)
                committed = min(lo + 500, limit)
                if f % 20 == 19:
                    t += 1_000_000
                    ack("kafka_offset_commit", p, committed, t, gconn, 0, consumer=f"group-{g}")
            t += 1_000_000
            ack("kafka_offset_commit", p, committed, t, gconn, 0, consumer=f"group-{g}")
        for h in range(start, t, 3 * S):
            cmds_rows.append(("Heartbeat", gconn, h))
        for command, conn, ts in cmds_rows:
            details = json.dumps({"GroupId": f"group-{g}"}) if command != "Fetch" else "{}"
            for k, v in zip(cmds, ("c2s", command, "10.0.0.2", client, conn, ts, details)):
                cmds[k].append(v)
        for conn, ts, details in responses:
            for k, v in zip(cmds, ("s2c", "Fetch", "10.0.0.2", None, conn, ts, details)):
                cmds[k].append(v)
    n = len(cmds["ts_ns"])
    cmds.update(topic=[None] * n, topic_id=[None] * n, partition=[None] * n, decode_status=["ok"] * n)
    write_deltalake(str(root / "messages"), _table("messages", m), mode="overwrite")
    write_deltalake(str(root / "acks"), _table("acks", acks), mode="overwrite")
    write_deltalake(str(root / "commands"), _table("commands", cmds), mode="overwrite")
    print(
        f"lake: {len(m['ts_ns']):,} messages rows, {len(acks['ts_ns']):,} acks, {len(cmds['ts_ns']):,} commands",
        flush=True,
    )


def _other(ref: str):
    src = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:src/brokerscope/journeys.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="journeys-ref-")) / "journeys_ref.py"
    # the package's relative imports, made absolute for a module outside it
    path.write_text(
        re.sub(
            r"^from \.(\w*) import",
            lambda m: f"from brokerscope{'.' + m[1] if m[1] else ''} import",
            src,
            flags=re.M,
        )
    )
    spec = importlib.util.spec_from_file_location("journeys_ref", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--compare", help="a commit whose journeys.compute runs in alternation")
    ap.add_argument("--check", action="store_true", help="the two results must be equal")
    ap.add_argument("--no-idempotent", action="store_true", help="the plain producer only")
    ap.add_argument("--keep", help="build (or reuse) the lake in this directory")
    args = ap.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="journeys-lake-"))
    if not (root / "messages").exists():
        t0 = time.perf_counter()
        build(root, args.messages, args.groups, not args.no_idempotent)
        print(f"built in {time.perf_counter() - t0:.1f} s", flush=True)
    fns = {"this": journeys.compute}
    if args.compare:
        fns[args.compare] = _other(args.compare).compute
    fns["lag"] = lag.compute
    journeys.compute(str(root), [CAPTURE])  # untimed: the imports both pay on their first call
    cpu: dict[str, list] = {k: [] for k in fns}
    out = {}
    for _ in range(args.runs):
        for name, fn in fns.items():
            t0 = time.process_time()
            out[name] = fn(str(root), [CAPTURE])
            cpu[name].append(time.process_time() - t0)
            print(f"{name}: {out[name].num_rows:,} rows, {cpu[name][-1]:.2f} CPU s", flush=True)
    for name, xs in cpu.items():
        print(
            f"{name}: median {statistics.median(xs):.2f} CPU s over {len(xs)} ({', '.join(f'{x:.2f}' for x in xs)})"
        )
    if args.check and args.compare:
        a, b = out["this"], out[args.compare]
        assert a.equals(b), "the results differ"
        print("results equal (rows and order)")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
