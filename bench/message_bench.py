"""Messages decoded per CPU second and instructions per message, one decode task's work in process.

    sudo .venv/bin/python bench/make_message_captures.py              # once: the captures
    python bench/message_bench.py pulsar --copies 50 --rounds 5          # CPU seconds, medians
    python bench/message_bench.py pulsar --copies 50 --profile           # cProfile: where
    python bench/message_bench.py iggy --copies 5 --callgrind            # instructions per message
    sudo .venv/bin/python bench/versus_tshark.py --mb 20 --rounds 1      # once: the kafka workload
    python bench/message_bench.py kafka --copies 1 --callgrind

Workloads: the message-rich captures bench/make_message_captures.py records (real clients, 100
messages per batch; TubeMQ one message per produce call and packs of 50 delivered), 2,000
message rows each, multiplied `--copies` times with pipeline_bench.multiply (the multiplied file
is kept in --workdir, made once per copies):

- pulsar: pulsar_batched.pcap (LZ4 batches of 100 sent, delivered, acknowledged one by one)
- iggy: iggy_batched.pcap (SendMessages and PollMessages of 100 messages)
- tubemq: tubemq_packs.pcap (sendMessageP2B one by one, getMessagesC2B packs of 50)
- kafka: versus_tshark.py's base capture (kafka-python producers, lz4 and uncompressed, and a
  consumer group against librdkafka's mock cluster: 20,000 records produced and 20,000 fetched,
  about 44 records per batch), grown with versus_tshark.grow (server port 9092)

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

WORKLOADS = {
    "pulsar": "pulsar_batched.pcap",
    "iggy": "iggy_batched.pcap",
    "tubemq": "tubemq_packs.pcap",
    "kafka": "kafka_clients.pcap",
}
# versus_tshark.py records the kafka workload's base capture (root, once) and keeps it here
VERSUS_TSHARK_DIR = Path(tempfile.gettempdir()) / "brokerscope-versus-tshark"


def capture(workload: str, copies: int, workdir: Path) -> list[str]:
    """The multiplied capture of `workload` (made once per copies and kept in `workdir`)."""
    from pipeline_bench import multiply

    if workload == "kafka":
        return [str(kafka_capture(copies, workdir))]
    src = workdir / WORKLOADS[workload]
    if not src.exists():
        raise SystemExit(f"{src}: run `sudo .venv/bin/python bench/make_message_captures.py {workdir}` first")
    dst = workdir / f"{src.stem}_x{copies}.pcap"
    if not dst.exists():
        tmp = dst.with_suffix(".tmp")
        multiply(str(src), str(tmp), copies)
        os.replace(tmp, dst)
    return [str(dst)]


def kafka_capture(copies: int, workdir: Path) -> Path:
    """versus_tshark.py's base capture, `copies` copies of every connection (versus_tshark.grow)."""
    import json

    import versus_tshark as vt

    base = VERSUS_TSHARK_DIR / "base.pcap"
    if not base.exists():
        raise SystemExit(
            f"{base}: run `sudo .venv/bin/python bench/versus_tshark.py --mb 20 --rounds 1` first"
        )
    dst = workdir / f"kafka_clients_x{copies}.pcap"
    if not dst.exists():
        frames = vt.read_pcap(base)
        per_copy = sum(vt.PCAP_RECORD.size + len(f) for _ts, f in frames)
        port = json.loads((VERSUS_TSHARK_DIR / "base.json").read_text())["broker_port"]
        tmp = dst.with_suffix(".tmp")
        # grow writes whole copies until the file holds the target: one byte past copies - 1
        vt.grow(frames, port, tmp, vt.PCAP_HEADER.size + (copies - 1) * per_copy + 1)
        os.replace(tmp, dst)
    return dst


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
    pipeline.settle_collector()  # as a decode task does, once per worker
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


def under_callgrind(args: list[str], out: Path | str, what: str) -> tuple[int, int]:
    """`python args` run under callgrind: the count it prints after `what`, and the
    instructions of the whole process."""
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    n = int(re.search(rf"^{what} (\d+)", p.stdout, re.M).group(1))
    return n, int(re.search(r"Collected : (\d+)", p.stderr).group(1))


def callgrind(workload: str, copies: int, workdir: Path) -> None:
    """Instructions per message at the margin: runs at copies and 2 x copies under callgrind."""
    runs = []
    for n in (copies, 2 * copies):
        capture(workload, n, workdir)  # made outside valgrind
        out = workdir / f"callgrind.{workload}.{n}.out"
        args = [__file__, workload, "--copies", str(n), "--once", "--workdir", str(workdir)]
        msgs, instr = under_callgrind(args, out, "messages")
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
