"""Messages decoded per CPU second and instructions per message, one decode task's work in process.

    sudo .venv/bin/python bench/make_message_captures.py              # once: the captures
    python bench/message_bench.py pulsar --copies 50 --rounds 5          # CPU seconds, medians
    python bench/message_bench.py pulsar --copies 50 --profile           # cProfile: where
    python bench/message_bench.py iggy --copies 5 --callgrind            # instructions per message

Workloads: the message-rich captures bench/make_message_captures.py records (real clients, 100
messages per batch; TubeMQ one message per produce call and packs of 50 delivered), 2,000
message rows each, multiplied `--copies` times with pipeline_bench.multiply (the multiplied file
is kept in --workdir, made once per copies):

- pulsar: pulsar_batched.pcap (LZ4 batches of 100 sent, delivered, acknowledged one by one)
- iggy: iggy_batched.pcap (SendMessages and PollMessages of 100 messages)
- tubemq: tubemq_packs.pcap (sendMessageP2B one by one, getMessagesC2B packs of 50)

The work measured is a decode task's, without Spark and without Parquet: read the splits
(capture.read_split), sort the packets by connection, StreamDriver, and the rows made Arrow in
the pipeline's batches (pipeline._table_batches: tables.conform). CPU seconds are
time.process_time, medians of --rounds runs in this process.

--callgrind runs the workload under `valgrind --tool=callgrind` at --copies and at twice that
and reports (instructions at 2N - instructions at N) / (messages at 2N - messages at N): the cost
of one more message, with the interpreter's start-up and imports taken out.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

WORKLOADS = {"pulsar": "pulsar_batched.pcap", "iggy": "iggy_batched.pcap", "tubemq": "tubemq_packs.pcap"}


def capture(workload: str, copies: int, workdir: Path) -> list[str]:
    """The multiplied capture of `workload` (made once per copies and kept in `workdir`)."""
    from pipeline_bench import multiply

    src = workdir / WORKLOADS[workload]
    if not src.exists():
        raise SystemExit(f"{src}: run `sudo .venv/bin/python bench/make_message_captures.py {workdir}` first")
    dst = workdir / f"{src.stem}_x{copies}.pcap"
    if not dst.exists():
        tmp = dst.with_suffix(".tmp")
        multiply(str(src), str(tmp), copies)
        os.replace(tmp, dst)
    return [str(dst)]


def decode_task(paths: list[str]) -> dict[str, int]:
    """What one decode task does to `paths` (no Spark, no Parquet): rows per table."""
    import pyarrow as pa

    from brokerscope import capture as cap
    from brokerscope import inputs, pipeline, tables
    from brokerscope.config import Settings
    from brokerscope.streams import SORT_COLS, StreamDriver

    settings = Settings.load()
    disc = inputs.discover(paths)
    psplits, _ = inputs.plan(disc.inputs, settings.split_size)
    batches = [b for sp in psplits for b in cap.read_split(sp, settings.batch_packets)]
    packets = pa.Table.from_batches(batches, schema=tables.PACKETS)
    packets = packets.sort_by([(c, "ascending") for c in SORT_COLS])
    drv = StreamDriver(settings)
    counts = dict.fromkeys(tables.DECODED_TABLES, 0)
    for t, rb in pipeline._table_batches(drv.run_batches(packets.to_batches())):
        counts[t] += rb.num_rows
    return counts


def cpu_seconds(paths: list[str], rounds: int) -> tuple[list[float], dict[str, int]]:
    times = []
    counts: dict[str, int] = {}
    decode_task(paths)  # warm: imports, protobuf descriptors, the page cache
    for _ in range(rounds):
        t0 = time.process_time()
        counts = decode_task(paths)
        times.append(time.process_time() - t0)
    return times, counts


def callgrind(workload: str, copies: int, workdir: Path) -> None:
    """Instructions per message at the margin: runs at copies and 2 x copies under callgrind."""
    runs = []
    for n in (copies, 2 * copies):
        capture(workload, n, workdir)  # made outside valgrind
        out = workdir / f"callgrind.{workload}.{n}.out"
        cmd = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            sys.executable, __file__, workload, "--copies", str(n), "--once", "--workdir", str(workdir),
        ]  # fmt: skip
        p = subprocess.run(cmd, capture_output=True, text=True, check=True)
        msgs = int(re.search(r"^messages (\d+)", p.stdout, re.M).group(1))
        instr = int(re.search(r"Collected : (\d+)", p.stderr).group(1))
        runs.append((msgs, instr))
        print(f"x{n}: {msgs:,} messages, {instr:,} instructions (whole process)")
    (m1, i1), (m2, i2) = runs
    print(f"instructions per message (2N - N): {(i2 - i1) / (m2 - m1):,.0f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workload", choices=sorted(WORKLOADS))
    ap.add_argument("--copies", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "message_bench"))
    ap.add_argument("--profile", action="store_true", help="cProfile one run: top functions by own time")
    ap.add_argument("--callgrind", action="store_true", help="instructions per message under callgrind")
    ap.add_argument("--once", action="store_true", help="one run, print the counts (what --callgrind runs)")
    a = ap.parse_args()
    workdir = Path(a.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if a.callgrind:
        callgrind(a.workload, a.copies, workdir)
        return 0
    paths = capture(a.workload, a.copies, workdir)
    if a.once:
        counts = decode_task(paths)
        for t, n in counts.items():
            print(t, n)
        return 0
    if a.profile:
        decode_task(paths)  # warm: imports, protobuf descriptors
        prof = cProfile.Profile(time.process_time)  # CPU time: the machine is shared
        prof.enable()
        counts = decode_task(paths)
        prof.disable()
        print(counts)
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return 0
    times, counts = cpu_seconds(paths, a.rounds)
    med = statistics.median(times)
    msgs = counts["messages"]
    print(f"{a.workload} x{a.copies}: {msgs:,} messages, {counts['commands']:,} frames, rows {counts}")
    print(f"CPU s per run: {', '.join(f'{t:.2f}' for t in times)}; median {med:.2f}")
    print(f"messages/s of CPU (median): {msgs / med:,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
