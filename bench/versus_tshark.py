"""brokerscope against tshark on the same Kafka capture: throughput per core and records found.

    sudo .venv/bin/python bench/versus_tshark.py                    # 200 MB, 3 rounds
    sudo .venv/bin/python bench/versus_tshark.py --mb 20 --rounds 1 --profile --profile-mb 5

Root is needed once, to record the base capture on `lo` (tests/support/loopcap.py); later runs
reuse the captures cached in --workdir (default: $TMPDIR/brokerscope-versus-tshark).

1. The capture. kafka-python clients against librdkafka's mock cluster (the broker the sample
   captures use) on 127.0.0.1: a consumer in a consumer group joins, then two producers send
   --records records of 100-300 bytes, one with lz4 batches and one uncompressed, while the
   consumer keeps fetching (and auto-commits). kafka-python is pinned to api_version (2, 3):
   Produce v7 and Fetch v11 (record batch v2), the newest versions whose records tshark 4.0
   dissects (it supports Produce up to v8 and Fetch up to v11, not the flexible versions of
   Kafka 2.4+), and with (2, 3) every other API kafka-python uses is pre-flexible too. tshark 4.0
   decompresses lz4 record batches (built with LZ4); it flags the JoinGroup v5 and SyncGroup v3
   frames malformed (it misreads their well-formed metadata and assignment bytes), which carry no
   records. Only connections of the kafka-python
   clients are kept (the mock cluster's own librdkafka client is filtered out by client id). That
   base capture (a few MB) is then grown to --mb MB: every connection is written again per copy,
   with its client port moved to a port no other connection uses, its server port set to 9092,
   and its times moved past the previous copy's. Loopback TCP segments reach 64 KiB (the capture
   sees them before segmentation, as host captures with TSO/GRO do); --mss 1448 cuts them into the
   segments an Ethernet network carries, with the receiver's pure ACK after every second segment
   of a cut one (a delayed ACK; --ack-every), for the per-packet costs of both tools.
2. The runs, --rounds times, alternating: tshark's full field decode (the reference command of
   issue 13, output to a file), `brokerscope ingest --master local[1]` and `local[2]`, each into
   a fresh lake. Each run is pinned to as many CPUs as it is meant to use (--no-pin to turn off).
   Measured: wall time, the CPU time of the whole process tree, the peak RSS of the tree
   (sampled), and the CPU time the rest of the machine used meanwhile ("others": on a shared
   machine, a run with much of it lost CPU to other work). Tree CPU time: this script is a child
   subreaper, so the Spark JVM, which outlives the brokerscope process, is reaped here and counted
   by getrusage(RUSAGE_CHILDREN); PySpark's daemon ignores SIGCHLD, so its Python workers (the
   decoding) are counted by sampling /proc instead (see Tree). Each decode task's CPU seconds
   (its Python worker's, pipeline.TASK_LOG_ENV) and their max / mean: how even the tasks are,
   a measure the rest of the machine's load does not move as it moves wall times.
3. Records. tshark: occurrences of `kafka.message_value` (one per record with a value: every
   record here has one), split by the API of the frame (Produce requests, Fetch responses).
   Values are FT_BYTES, printed as hex, so the aggregator ',' never occurs inside a value.
   `kafka.offset` is no record count: it also holds batch base offsets, Fetch request offsets and
   Produce response offsets. brokerscope: rows of the lake's `messages` table by direction
   (produce / deliver), read with delta-rs.
4. Medians over rounds: MB/s, MB/s per core, MB per CPU second, and brokerscope / tshark.

--profile also runs what one pipeline task does (read splits, sort by connection, decode, conform,
stage Parquet: pipeline._read_splits_fn and pipeline._decode_fn) on the first --profile-mb MB of
the capture in this process under cProfile, and prints the top functions and a coarse split.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import dataclasses
import json
import os
import pstats
import random
import resource
import shutil
import statistics
import string
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from read_bench import floor_scan  # noqa: E402

from brokerscope.pipeline import TASK_LOG_ENV  # noqa: E402

API_VERSION = (2, 3)  # kafka-python's broker version: Produce v7, Fetch v11 (see the docstring)
SERVER_PORT = 9092  # the grown capture's broker port (tshark's and brokerscope's default for Kafka)
TOPIC = "bench"
TSHARK_FIELDS = [
    "kafka.api_key",
    "kafka.correlation_id",
    "kafka.topic_name",
    "kafka.offset",
    "kafka.message_key",
    "kafka.message_value",
]
PCAP_HEADER = struct.Struct("<IHHiIII")
PCAP_RECORD = struct.Struct("<IIII")
# the profile table: sorted by own time (2; 3 is cumulative), its first TOP functions
SORT_KEY = 2
TOP = 25


# -- the capture ------------------------------------------------------------------------------


def _values(n: int, seed: int = 13) -> list[bytes]:
    """n JSON-ish values of 100-300 bytes, made of words from a small vocabulary (so that lz4
    compresses them about as much as it compresses real application payloads)."""
    rnd = random.Random(seed)
    words = ["".join(rnd.choices(string.ascii_lowercase, k=rnd.randint(3, 9))) for _ in range(500)]
    out = []
    for i in range(n):
        size = rnd.randint(100, 300)
        v = f'{{"seq":{i},"user":"u{rnd.randint(0, 9999)}","amount":{rnd.random() * 1000:.2f},"text":"'
        while len(v) < size:
            v += rnd.choice(words) + " "
        out.append((v[: size - 2] + '"}').encode())
    return out


def record_base(path: Path, n_records: int) -> dict:
    """Record kafka-python traffic against librdkafka's mock cluster into `path` (root needed)."""
    if os.geteuid() != 0:
        raise SystemExit("recording the base capture on lo needs root (it is cached in --workdir after)")
    import kafka
    from confluent_kafka import Producer as MockOwner
    from kafka import KafkaConsumer, KafkaProducer

    from tests.support.loopcap import LoopbackCapture, write_pcap

    owner = MockOwner({"test.mock.num.brokers": 1, "enable.metrics.push": False})
    # asking for the topic's metadata creates it (4 partitions, the mock cluster's default)
    broker = next(iter(owner.list_topics(topic=TOPIC, timeout=10).brokers.values()))
    bootstrap = f"{broker.host}:{broker.port}"
    values = _values(n_records)
    common = {"bootstrap_servers": bootstrap, "api_version": API_VERSION}
    tmp = str(path) + ".all"
    with LoopbackCapture(tmp, ports={broker.port}) as cap:
        consumer = KafkaConsumer(
            TOPIC,
            group_id="bench-group",
            client_id="bench-consumer",
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
            **common,
        )
        end = time.time() + 30
        while not consumer.assignment() and time.time() < end:  # join the group first
            consumer.poll(200)
        producers = [
            KafkaProducer(client_id=f"bench-{codec or 'none'}", compression_type=codec, linger_ms=5, **common)
            for codec in ("lz4", None)
        ]
        consumed = 0
        for i, value in enumerate(values):
            producers[i % 2].send(TOPIC, key=f"user-{i % 97}".encode(), value=value)
            if i % 500 == 499:  # a live consumer: it fetches while the producers send
                consumed += sum(len(m) for m in consumer.poll(20).values())
        for p in producers:
            p.flush()
            p.close()
        end = time.time() + 60
        while consumed < n_records and time.time() < end:
            consumed += sum(len(m) for m in consumer.poll(200).values())
        consumer.close()  # commits the positions (OffsetCommit), leaves the group
    del owner
    os.unlink(tmp)
    # keep the kafka-python connections only: the mock cluster's own client (librdkafka) speaks
    # APIs and versions tshark 4.0 does not know
    conns: dict[int, list] = {}
    for ts, frame in cap.frames:
        sport, dport, payload = _tcp_of(frame)
        conns.setdefault(dport if sport == broker.port else sport, []).append((ts, frame, payload))
    keep = [p for p, pkts in conns.items() if _client_id(pkts, broker.port).startswith("bench-")]
    frames = sorted((ts, f) for p in keep for ts, f, _ in conns[p])
    write_pcap(str(path), frames)
    return {
        "broker_port": broker.port,
        "records_produced": n_records,
        "records_consumed": consumed,
        "connections": len(keep),
        "packets": len(frames),
        "dropped_connections": len(conns) - len(keep),
        "kafka_python": kafka.__version__,
        "api_version": list(API_VERSION),
        "made": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def _tcp_of(frame: bytes) -> tuple[int, int, bytes]:
    """(sport, dport, payload) of an Ethernet/IPv4/TCP frame."""
    ihl = (frame[14] & 0x0F) * 4
    total = struct.unpack_from("!H", frame, 16)[0]
    l4 = 14 + ihl
    sport, dport = struct.unpack_from("!HH", frame, l4)
    doff = (frame[l4 + 12] >> 4) * 4
    return sport, dport, frame[l4 + doff : 14 + total]


def _client_id(pkts: list, broker_port: int) -> str:
    """The client id of the first request the client sent on this connection ('' if none)."""
    for _ts, frame, payload in pkts:
        sport = struct.unpack_from("!H", frame, 14 + (frame[14] & 0x0F) * 4)[0]
        if sport != broker_port and len(payload) >= 14:
            n = struct.unpack_from("!h", payload, 12)[0]
            return payload[14 : 14 + max(n, 0)].decode("utf-8", "replace")
    return ""


def read_pcap(path: Path) -> list[tuple[int, bytes]]:
    """(ts_ns, frame) of a nanosecond pcap as loopcap.write_pcap writes it."""
    data = path.read_bytes()
    out, off = [], PCAP_HEADER.size
    while off + 16 <= len(data):
        sec, nsec, caplen, _ = PCAP_RECORD.unpack_from(data, off)
        out.append((sec * 1_000_000_000 + nsec, data[off + 16 : off + 16 + caplen]))
        off += 16 + caplen
    return out


def _fix_csum(csum: int, old: int, new: int) -> int:
    """Incremental update of an Internet checksum for one 16-bit word changed (RFC 1624)."""
    s = (~csum & 0xFFFF) + (~old & 0xFFFF) + new
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _csum(data: bytes) -> int:
    """The Internet checksum of `data`."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def resegment(base: list[tuple[int, bytes]], mss: int, ack_every: int = 0) -> list[tuple[int, bytes]]:
    """Cut every TCP segment of more than `mss` payload bytes into segments of `mss` bytes, as a
    network with that MSS carries them (loopback frames reach 64 KiB): sequence numbers, IP
    lengths and both checksums made right, PSH and FIN on the last piece only. `ack_every` k > 0:
    after every k-th piece but the last, the receiver's pure ACK of the bytes so far (a delayed
    ACK, as receivers send during a bulk transfer)."""
    out = []
    for ts, f in base:
        ihl = (f[14] & 0x0F) * 4
        l4 = 14 + ihl
        hlen = l4 + (f[l4 + 12] >> 4) * 4
        payload = f[hlen : 14 + struct.unpack_from("!H", f, 16)[0]]
        if len(payload) <= mss:
            out.append((ts, f))
            continue
        seq = struct.unpack_from("!I", f, l4 + 4)[0]
        for off in range(0, len(payload), mss):
            piece = payload[off : off + mss]
            q = bytearray(f[:hlen] + piece)
            struct.pack_into("!H", q, 16, ihl + hlen - l4 + len(piece))
            struct.pack_into("!I", q, l4 + 4, (seq + off) % 2**32)
            if off + mss < len(payload):
                q[l4 + 13] &= ~0x09 & 0xFF  # PSH and FIN
            _checksums(q, l4)
            out.append((ts, bytes(q)))
            if ack_every and off + mss < len(payload) and (off // mss + 1) % ack_every == 0:
                out.append((ts, _ack_of(q, l4, hlen)))
    return out


def _ack_of(f: bytes | bytearray, l4: int, hlen: int) -> bytes:
    """The receiver's pure ACK of data frame `f` (Ethernet, IPv4, TCP at `l4`, payload at
    `hlen`): addresses and ports swapped, its sequence number the data's acknowledgement number,
    acknowledging the data's last byte; TCP options kept, checksums made right."""
    q = bytearray(f[:hlen])
    q[0:6], q[6:12] = f[6:12], f[0:6]  # MAC addresses
    q[26:30], q[30:34] = f[30:34], f[26:30]  # IPv4 source, destination
    q[l4 : l4 + 2], q[l4 + 2 : l4 + 4] = f[l4 + 2 : l4 + 4], f[l4 : l4 + 2]  # ports
    seq, ack = struct.unpack_from("!II", f, l4 + 4)
    struct.pack_into("!II", q, l4 + 4, ack, (seq + len(f) - hlen) % 2**32)
    q[l4 + 13] = 0x10  # ACK
    struct.pack_into("!H", q, 16, hlen - 14)
    _checksums(q, l4)
    return bytes(q)


def _checksums(q: bytearray, l4: int) -> None:
    """Make frame `q`'s IPv4 header checksum and TCP checksum (TCP at `l4`) right."""
    struct.pack_into("!H", q, 24, 0)
    struct.pack_into("!H", q, 24, _csum(bytes(q[14:l4])))
    struct.pack_into("!H", q, l4 + 16, 0)
    pseudo = bytes(q[26:34]) + struct.pack("!BBH", 0, 6, len(q) - l4)
    struct.pack_into("!H", q, l4 + 16, _csum(pseudo + bytes(q[l4:])))


def grow(base: list[tuple[int, bytes]], broker_port: int, dst: Path, target_bytes: int) -> dict:
    """Write copies of every connection of `base` into `dst` until it holds `target_bytes`.

    Copy k of connection j gets client port 1024 + (k * connections + j) % 64000, the server port
    becomes SERVER_PORT, times move by k * (the base's span + 1 s). Ports and the TCP checksum are
    patched in place with struct (the checksum incrementally, so a valid one stays valid; loopback
    captures carry partial checksums, which neither tool checks)."""
    clients = sorted({sp if dp == broker_port else dp for sp, dp, _ in (_tcp_of(f) for _, f in base)})
    slot = {p: j for j, p in enumerate(clients)}
    t0 = base[0][0]
    span = base[-1][0] - t0 + 1_000_000_000
    # per frame: offset of the client port field, of the server port field, of the checksum
    layout = []
    for ts, f in base:
        l4 = 14 + (f[14] & 0x0F) * 4
        sport, dport = struct.unpack_from("!HH", f, l4)
        c_off, s_off = (l4 + 2, l4) if sport == broker_port else (l4, l4 + 2)
        client = dport if sport == broker_port else sport
        layout.append((ts - t0, f, slot[client], client, c_off, s_off, l4 + 16))
    written, copies, packets = PCAP_HEADER.size, 0, 0
    with open(dst, "wb", buffering=1 << 22) as fh:
        fh.write(PCAP_HEADER.pack(0xA1B23C4D, 2, 4, 0, 0, 262144, 1))
        while written < target_bytes:
            for dt, f, j, client, c_off, s_off, ck_off in layout:
                port = 1024 + (copies * len(clients) + j) % 64000
                q = bytearray(f)
                csum = struct.unpack_from("!H", q, ck_off)[0]
                csum = _fix_csum(_fix_csum(csum, client, port), broker_port, SERVER_PORT)
                struct.pack_into("!H", q, c_off, port)
                struct.pack_into("!H", q, s_off, SERVER_PORT)
                struct.pack_into("!H", q, ck_off, csum)
                ts = t0 + copies * span + dt
                fh.write(PCAP_RECORD.pack(ts // 1_000_000_000, ts % 1_000_000_000, len(q), len(q)))
                fh.write(q)
                written += 16 + len(q)
            copies += 1
            packets += len(layout)
    return {"copies": copies, "packets": packets, "connections": copies * len(clients)}


def tshark_check(path: Path, port: int) -> dict:
    """What tshark makes of the base capture: API versions seen, values and records per API,
    malformed frames and warnings (the ones about versions the broker advertises are left out)."""
    out = subprocess.run(
        ["tshark", "-r", str(path), "-d", f"tcp.port=={port},kafka", "-T", "fields"]
        + ["-E", "occurrence=a", "-E", "aggregator=|"]
        + ["-e", "kafka.api_key", "-e", "kafka.api_version", "-e", "kafka.record_attributes"]
        + ["-e", "kafka.message_value", "-e", "kafka.batch_codec", "-e", "_ws.malformed"]
        + ["-e", "_ws.expert.message"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    versions: dict[str, int] = {}
    values = {"produce": 0, "fetch": 0, "other": 0}
    records = 0
    codecs: dict[str, int] = {}
    malformed = 0
    warnings: dict[str, int] = {}
    for line in out.splitlines():
        keys, vers, attrs, vals, codec, bad, expert = line.split("\t")
        for k, v in zip(keys.split("|"), vers.split("|")):
            if k and v:
                name = f"{_api_name(int(k))} v{v}"
                versions[name] = versions.get(name, 0) + 1
        records += _occurrences(attrs, "|")
        values[_api_of(keys, "|")] += _occurrences(vals, "|")
        for c in filter(None, codec.split("|")):
            name = {"0": "none", "3": "lz4"}.get(c, c)
            codecs[name] = codecs.get(name, 0) + 1
        malformed += bool(bad)
        apis = "/".join(_api_name(int(k)) for k in dict.fromkeys(keys.split("|")) if k)
        if apis == "ApiVersions":  # the broker's list of APIs and versions, some unknown to tshark
            continue
        for m in filter(None, expert.split("|")):
            if not m.startswith(("Connection ", "This frame ")):
                warnings[f"{apis}: {m}"] = warnings.get(f"{apis}: {m}", 0) + 1
    return {
        "requests": versions,
        "values": values,
        "record_attributes": records,
        "batches": codecs,
        "malformed_frames": malformed,
        "warnings": warnings,
    }


def _api_name(key: int) -> str:
    from kafka.protocol.api_key import ApiKey

    try:
        return ApiKey(key).name
    except ValueError:
        return f"api{key}"


def _occurrences(field: str, sep: str = ",") -> int:
    """Occurrences of a field printed with -E occurrence=a -E aggregator=<sep> (empty: none)."""
    return field.count(sep) + 1 if field else 0


def _api_of(keys: str, sep: str = ",") -> str:
    """Which side a frame's message values belong to, from its kafka.api_key occurrences."""
    ks = set(keys.split(sep))
    if ks == {"0"}:
        return "produce"
    if ks == {"1"}:
        return "fetch"
    return "other"


def prepare(workdir: Path, mb: int, n_records: int, mss: int, ack_every: int = 0) -> tuple[Path, dict]:
    """The base capture (recorded once) and the grown capture of `mb` MB, both cached."""
    workdir.mkdir(parents=True, exist_ok=True)
    base, meta_path = workdir / "base.pcap", workdir / "base.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() and base.exists() else None
    if meta is None or meta["records_produced"] != n_records:
        print(f"recording the base capture: {n_records:,} records, kafka-python api_version {API_VERSION}")
        meta = record_base(base, n_records)
        meta["tshark"] = tshark_check(base, meta["broker_port"])
        meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    name = f"kafka-{mb}MB" + (f"-mss{mss}" if mss else "") + (f"-ack{ack_every}" if mss and ack_every else "")
    big, grown_path = workdir / f"{name}.pcap", workdir / f"{name}.json"
    grown = json.loads(grown_path.read_text()) if grown_path.exists() and big.exists() else {}
    if grown.get("base_made") != meta["made"]:
        t = time.perf_counter()
        frames = read_pcap(base)
        cut = resegment(frames, mss, ack_every) if mss else frames
        grown = grow(cut, meta["broker_port"], big, mb * 1_000_000)
        grown["base_made"] = meta["made"]
        grown_path.write_text(json.dumps(grown) + "\n")
        print(f"wrote {big} in {time.perf_counter() - t:.1f} s")
    meta["grown"] = grown
    return big, meta


# -- measuring a process tree -----------------------------------------------------------------


class Tree:
    """Samples this process's descendants every 0.1 s: the peak of their summed RSS, and the CPU
    time of those whose parent ignores SIGCHLD. The kernel reaps such children itself and adds
    their CPU time to nobody's RUSAGE_CHILDREN: PySpark's daemon does that to its Python workers,
    the processes that decode. Their last sample stands for their CPU time (at most 0.1 s short)."""

    def __init__(self) -> None:
        self.peak_rss = 0
        self.unreaped_cpu: dict[int, float] = {}  # pid -> CPU s, of children of a SIGCHLD ignorer
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        me, page, hz = os.getpid(), os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_CLK_TCK")
        procs = {}  # pid -> (ppid, rss bytes, CPU s)
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as fh:
                        f = fh.read().rsplit(")", 1)[1].split()
                    procs[int(d)] = (int(f[1]), int(f[21]) * page, (int(f[11]) + int(f[12])) / hz)
                except (OSError, IndexError, ValueError):
                    continue
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        rss, todo = 0, [me]
        while todo:
            parent = todo.pop()
            kids = children.get(parent, [])
            ignores = parent != me and kids and _ignores_sigchld(parent)
            for pid in kids:
                rss += procs[pid][1]
                if ignores:
                    self.unreaped_cpu[pid] = procs[pid][2]
                todo.append(pid)
        self.peak_rss = max(self.peak_rss, rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            time.sleep(0.1)

    def __enter__(self) -> Tree:
        self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._t.join()


def _ignores_sigchld(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("SigIgn:"):
                    return bool(int(line.split()[1], 16) >> 16 & 1)  # bit 16: SIGCHLD (17)
    except OSError:
        pass
    return False


def become_subreaper() -> None:
    """Orphaned descendants (the Spark JVM outlives `brokerscope`) are re-parented to this
    process, so reaping them adds their CPU time to RUSAGE_CHILDREN."""
    PR_SET_CHILD_SUBREAPER = 36
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print("warning: prctl(PR_SET_CHILD_SUBREAPER) failed: the JVM's CPU time is not counted")


def _reap_all(timeout_s: float = 120.0) -> None:
    end = time.time() + timeout_s
    while time.time() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)
    print("warning: descendants still running after the measured command; their CPU is not counted")


def _busy_cpu() -> float:
    """CPU seconds the whole machine has been busy since boot (/proc/stat)."""
    with open("/proc/stat") as fh:
        ticks = [int(x) for x in fh.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # minus idle, iowait


@dataclasses.dataclass
class Run:
    tool: str
    cores: int
    wall: float
    cpu: float
    others: float  # CPU seconds the rest of the machine used meanwhile (shared machines)
    rss: int
    records: dict
    phases: dict = dataclasses.field(default_factory=dict)
    tasks: list = dataclasses.field(default_factory=list)  # decode tasks' lines (pipeline.TASK_LOG_ENV)


def measure(
    cmd: list[str], cpus: set[int] | None, stdout, stderr_lines: list | None = None, env: dict | None = None
) -> tuple:
    """Run `cmd` to the end of its whole process tree: (rc, wall s, tree CPU s, CPU s of everything
    else on the machine meanwhile, peak tree RSS). `stderr_lines` collects (seconds since start,
    line) as they arrive."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy = _busy_cpu()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with Tree() as tree:
        t0 = time.perf_counter()
        p = subprocess.Popen(
            cmd,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )

        def drain() -> None:
            for line in p.stderr:
                if stderr_lines is not None:
                    stderr_lines.append((time.perf_counter() - t0, line.rstrip("\n")))

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        rc = p.wait()
        wall = time.perf_counter() - t0
        reader.join()
        _reap_all()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    cpu += sum(tree.unreaped_cpu.values())
    return rc, wall, cpu, max(0.0, _busy_cpu() - busy - cpu), tree.peak_rss


def run_tshark(cap: Path, out: Path, cpus: set[int] | None) -> Run:
    cmd = ["tshark", "-r", str(cap), "-d", f"tcp.port=={SERVER_PORT},kafka", "-T", "fields"]
    cmd += ["-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=,"]
    for f in TSHARK_FIELDS:
        cmd += ["-e", f]
    errs: list = []
    with open(out, "w") as fh:
        rc, wall, cpu, others, rss = measure(cmd, cpus, fh, errs)
    if rc != 0:
        raise SystemExit(f"tshark failed ({rc}): " + "\n".join(line for _, line in errs[-10:]))
    records = count_tshark(out)
    out.unlink()  # about twice the capture's size
    return Run("tshark", 1, wall, cpu, others, rss, records)


def count_tshark(out: Path) -> dict:
    """Message values per side in the output of run_tshark."""
    iv = TSHARK_FIELDS.index("kafka.message_value")
    counts = {"produce": 0, "fetch": 0, "other": 0}
    with open(out) as fh:
        for line in fh:
            cols = line.rstrip("\n").split("\t")
            if cols[iv]:
                counts[_api_of(cols[0])] += _occurrences(cols[iv])
    return counts


def run_brokerscope(cap: Path, master: str, cores: int, workdir: Path, cpus: set[int] | None) -> Run:
    """One `brokerscope ingest` into a new lake; its decode tasks' lines (pipeline.TASK_LOG_ENV)."""
    exe = Path(sys.executable).with_name("brokerscope")
    cmd = [str(exe) if exe.exists() else "brokerscope", "ingest", str(cap), "--master", master, "-q"]
    lake = Path(tempfile.mkdtemp(prefix="lake-", dir=workdir))
    task_log = lake.with_suffix(".tasks")
    lines: list = []
    try:
        with tempfile.TemporaryFile("w+") as out:
            env = {TASK_LOG_ENV: str(task_log)}
            rc, wall, cpu, others, rss = measure(cmd + ["--lake", str(lake)], cpus, out, lines, env)
            out.seek(0)
            summary = out.read()
        if rc not in (0, 3):
            tail = "\n".join(line for _, line in lines[-15:])
            raise SystemExit(f"brokerscope ingest failed ({rc}):\n{summary}\n{tail}")
        records = count_lake(lake)
        tasks = [json.loads(line) for line in task_log.read_text().splitlines()] if task_log.exists() else []
    finally:
        shutil.rmtree(lake, ignore_errors=True)
        task_log.unlink(missing_ok=True)
    return Run(f"brokerscope {master}", cores, wall, cpu, others, rss, records, _phases(lines, wall), tasks)


def imbalance(tasks: list[dict]) -> str:
    """The decode tasks' CPU seconds (wall) and their max / mean (1.00: even), '' without them."""
    if not tasks:
        return ""
    each = " ".join(f"{t['cpu_s']:.2f} ({t['wall_s']:.2f})" for t in tasks)
    mb = " ".join(f"{t['payload_bytes'] / 1e6:.0f}" for t in tasks)
    return f"decode tasks CPU (wall) s {each}, CPU max/mean {_ratio(tasks):.2f}; payload MB {mb}"


def _phases(lines: list, wall: float) -> dict:
    """Seconds of start-up (JVM, session, planning), decode (the Spark job), commit and compaction,
    and exit, from the times brokerscope's progress lines arrived."""
    marks = {"planned": None, "committing": None, "compacting": None, "end": None}
    for t, line in lines:
        msg = line.split("] ", 1)[-1]
        for m in ("planned", "committing", "compacting"):
            if msg.startswith(m) and marks[m] is None:
                marks[m] = t
    marks["end"] = wall
    order = [("start-up", None, "planned"), ("decode", "planned", "committing")]
    order += [("commit", "committing", "compacting"), ("compact+exit", "compacting", "end")]
    out = {}
    for name, a, b in order:
        ta = 0.0 if a is None else marks[a]
        if ta is not None and marks[b] is not None:
            out[name] = marks[b] - ta
    return out


def count_lake(lake: Path) -> dict:
    """Rows of the messages table by direction, read with delta-rs."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    t = DeltaTable(str(lake / "messages")).to_pyarrow_dataset().to_table(columns=["direction"])
    counts = pc.value_counts(t.column("direction")).to_pylist()
    by = {c["values"]: c["counts"] for c in counts}
    return {"produce": by.pop("produce", 0), "fetch": by.pop("deliver", 0), "other": sum(by.values())}


# -- the profile ------------------------------------------------------------------------------

# where a function's own time goes, by the file it is in (first match)
BUCKETS = [
    ("/brokerscope/capture/", "reading packets"),
    ("/brokerscope/runs.py", "reading packets"),
    ("/brokerscope/tcp/", "TCP reassembly"),
    ("/brokerscope/protocols/", "protocol decoding"),
    ("/site-packages/kafka/", "protocol decoding"),
    ("/site-packages/kio/", "protocol decoding"),
    ("/brokerscope/streams.py", "stream driver (batches to packets, connections)"),
    ("/brokerscope/tables.py", "tables.conform"),
    ("/brokerscope/lake.py", "parquet staging"),
    ("/pyarrow/parquet/", "parquet staging"),
    ("/brokerscope/pipeline.py", "pipeline task glue"),
]
# the profile's own stages (functions of this file): what their direct callees do
STAGES = {"read_packets": "reading packets", "sort_packets": "sorting", "decode_task": "pipeline task glue"}


def _bucket_of(func: tuple) -> str | None:
    filename, _line, name = func
    if filename == __file__ or filename.endswith("versus_tshark.py"):
        return STAGES.get(name, "other")
    for part, bucket in BUCKETS:
        if part in filename:
            return bucket
    return None  # built-ins, the standard library, pyarrow: charged to their callers


def coarse_split(stats: dict) -> dict[str, float]:
    """Every function's own time, charged to a bucket by its file, or else (built-ins, the
    standard library, other libraries) to its callers' buckets in proportion to the time it
    spent when called from each."""
    memo: dict = {}

    def shares(func: tuple, depth: int = 0) -> dict[str, float]:
        b = _bucket_of(func)
        if b is not None:
            return {b: 1.0}
        if func in memo:
            return memo[func]
        memo[func] = {"other": 1.0}  # while computing: a recursive call counts as other
        callers = stats[func][4] if func in stats else {}
        total = sum(c[2] for c in callers.values())
        if not callers or total <= 0 or depth > 30:
            return memo[func]
        out: dict[str, float] = {}
        for caller, c in callers.items():
            for b, f in shares(caller, depth + 1).items():
                out[b] = out.get(b, 0.0) + f * c[2] / total
        memo[func] = out
        return out

    split: dict[str, float] = {}
    for func, (_cc, _nc, tt, _ct, _callers) in stats.items():
        for b, f in shares(func).items():
            split[b] = split.get(b, 0.0) + tt * f
    return split


def _short(func: tuple) -> str:
    filename, line, name = func
    for cut in ("/site-packages/", "/src/", "/bench/"):
        if cut in filename:
            filename = filename.split(cut, 1)[1]
            break
    return f"{filename}:{line}({name})" if filename != "~" else name


def profile(cap: Path, mb: float, workdir: Path) -> None:
    """One pipeline task's work on the first `mb` MB of `cap`, in this process, under cProfile."""
    import pyarrow as pa

    from brokerscope import capture, pipeline, tables
    from brokerscope.config import Settings
    from brokerscope.runs import RunDir
    from brokerscope.streams import SORT_COLS

    part = workdir / f"profile-{mb:g}MB.pcap"
    with open(cap, "rb") as src, open(part, "wb") as dst:  # whole records only
        dst.write(src.read(PCAP_HEADER.size))
        while dst.tell() < mb * 1e6:
            head = src.read(16)
            if len(head) < 16:
                break
            dst.write(head + src.read(PCAP_RECORD.unpack(head)[2]))
    lake = Path(tempfile.mkdtemp(prefix="profile-lake-", dir=workdir))
    try:
        settings = Settings.load(overrides={"lake": {"path": str(lake)}})
        size = part.stat().st_size
        splits = capture.plan_splits(str(part), 0, "", capture.identify(str(part)), settings.split_size)
        run = RunDir(lake, "profile")
        sizes = {0: size}
        packs = [[dataclasses.asdict(sp) for sp in splits]]
        read = pipeline._read_splits_fn(settings, run, sizes, packs)
        decode = pipeline._decode_fn(settings, pipeline.Staged(str(lake), "profile", ()), run, sizes)
        task_rows = pa.RecordBatch.from_pylist([{"id": 0}])

        def read_packets():
            return pa.Table.from_batches(list(read(iter([task_rows]))), schema=tables.PACKETS)

        def sort_packets(t):  # Spark's shuffle and sortWithinPartitions, done here by Arrow
            return t.drop_columns(["capture_id"]).sort_by([(c, "ascending") for c in SORT_COLS])

        def decode_task(t):  # Spark hands a task Arrow batches of 10,000 rows
            return list(decode(iter(t.to_batches(max_chunksize=10_000))))

        # first without the profiler: the stages' own times (the decode stage includes conforming
        # rows and staging Parquet: Spark runs those in the same task, interleaved)
        t0 = time.perf_counter()
        packets = read_packets()
        t1 = time.perf_counter()
        ordered = sort_packets(packets)
        t2 = time.perf_counter()
        files = decode_task(ordered)
        t3 = time.perf_counter()
        del packets, ordered
        prof = cProfile.Profile()
        prof.enable()
        decode_task(sort_packets(read_packets()))
        prof.disable()
        t4 = time.perf_counter()
    finally:
        shutil.rmtree(lake, ignore_errors=True)
        part.unlink()
    rows = {}
    for b in files:
        for r in b.to_pylist():
            if r["table"]:
                rows[r["table"]] = rows.get(r["table"], 0) + r["rows"]
    mb_part = size / 1e6
    print(
        f"\nprofile: one task's work on the first {mb_part:.1f} MB, in this process (no Spark): "
        + ", ".join(f"{t}={n:,}" for t, n in rows.items())
    )
    print(
        f"  without the profiler {t3 - t0:.2f} s, {mb_part / (t3 - t0):.2f} MB/s: read {t1 - t0:.2f} s, "
        f"sort {t2 - t1:.2f} s, decode + conform + stage {t3 - t2:.2f} s"
    )
    print(f"  under cProfile {t4 - t3:.2f} s, {mb_part / (t4 - t3):.2f} MB/s")
    st = pstats.Stats(prof)
    stats = st.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in stats.values())
    print(f"\n{'tottime':>8} {'%':>5} {'cumtime':>8} {'ncalls':>10}  function (top 25 by own time)")
    for func, (_cc, nc, tt, ct, _callers) in sorted(stats.items(), key=lambda kv: -kv[1][SORT_KEY])[:TOP]:
        print(f"{tt:8.2f} {100 * tt / total:5.1f} {ct:8.2f} {nc:10,}  {_short(func)}")
    print("\ncoarse split (own time by file; built-ins and libraries charged to their callers):")
    for b, t in sorted(coarse_split(stats).items(), key=lambda kv: -kv[1]):
        print(f"  {b:<50} {t:7.2f} s {100 * t / total:5.1f} %")


# -- the report -------------------------------------------------------------------------------


def _ratio(tasks: list[dict]) -> float:
    cpu = [t["cpu_s"] for t in tasks]
    return round(max(cpu) / (sum(cpu) / len(cpu)), 2)


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def report(runs: list[Run], size_mb: float, expected: dict) -> None:
    tools = list(dict.fromkeys(r.tool for r in runs))
    print(f"\nmedians over {len(runs) // len(tools)} round(s), {size_mb:.1f} MB:")
    print(
        f"{'':<24} {'wall s':>8} {'MB/s':>7} {'MB/s/core':>9} {'CPU s':>8} {'MB/CPU-s':>8} {'others':>7}"
        f" {'peak RSS':>9}"
    )
    med: dict[str, dict] = {}
    for tool in tools:
        rs = [r for r in runs if r.tool == tool]
        wall, cpu = _med([r.wall for r in rs]), _med([r.cpu for r in rs])
        cores = rs[0].cores
        m = med[tool] = {
            "wall": wall,
            "mbps": size_mb / wall,
            "per_core": size_mb / wall / cores,
            "per_cpu": size_mb / cpu,
        }
        rss = max(r.rss for r in rs) / 2**20
        others = _med([r.others for r in rs])
        print(
            f"{tool:<24} {wall:8.1f} {m['mbps']:7.2f} {m['per_core']:9.2f} {cpu:8.1f} {m['per_cpu']:8.2f}"
            f" {others:7.1f} {rss:7,.0f} MiB"
        )
        phases = [r.phases for r in rs if r.phases]
        if phases:
            p = {n: _med([ph[n] for ph in phases if n in ph]) for n in phases[0]}
            decode = f" (decode alone {size_mb / p['decode']:.2f} MB/s)" if p.get("decode") else ""
            print(f"{'':<24}   phases: " + ", ".join(f"{n} {t:.1f} s" for n, t in p.items()) + decode)
        ratios = [_ratio(r.tasks) for r in rs if len(r.tasks) > 1]
        if ratios:
            print(f"{'':<24}   decode tasks' CPU max/mean: median {_med(ratios):.2f}, rounds {ratios}")
    ts = med.get("tshark")
    if ts:
        print("\nbrokerscope / tshark (> 1: brokerscope faster):")
        for tool in tools:
            if tool == "tshark":
                continue
            m = med[tool]
            print(
                f"  {tool:<22} per core {m['per_core'] / ts['per_core']:6.3f}   per CPU second "
                f"{m['per_cpu'] / ts['per_cpu']:6.3f}   wall {ts['wall'] / m['wall']:6.3f}"
            )
    one, two = med.get("brokerscope local[1]"), med.get("brokerscope local[2]")
    if one and two:
        print(f"  2 cores / 1 core (brokerscope wall time): x{one['wall'] / two['wall']:.2f}")
    print("\nrecords (produced, fetched):")
    print(f"  {'clients (sent, received)':<24} {expected['produce']:>10,} {expected['fetch']:>10,}")
    for tool in tools:
        seen = {
            (r.records["produce"], r.records["fetch"], r.records["other"]) for r in runs if r.tool == tool
        }
        for p, f, o in sorted(seen):
            extra = f"  (+{o:,} other)" if o else ""
            print(f"  {tool:<24} {p:>10,} {f:>10,}{extra}")
    b = [r.records for r in runs if r.tool != "tshark"]
    t = [r.records for r in runs if r.tool == "tshark"]
    if b and t:
        same = all(x == t[0] for x in t + b)
        if same:
            print("  same number of records: yes")
        else:
            d = {k: b[0][k] - t[0][k] for k in ("produce", "fetch", "other")}
            print(f"  same number of records: NO (brokerscope - tshark: {d})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "brokerscope-versus-tshark")
    ap.add_argument("--mb", type=int, default=200, help="size of the grown capture (default 200)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=20_000, help="records the base capture's producers send")
    ap.add_argument(
        "--mss",
        type=int,
        default=0,
        help="cut TCP segments to this payload size when growing the capture (default: keep the "
        "loopback's segments of up to 64 KiB; 1448 is what an Ethernet network with timestamps carries)",
    )
    ap.add_argument(
        "--ack-every",
        type=int,
        default=2,
        help="with --mss: the receiver's pure ACK after every this many segments of a cut one "
        "(default 2, a delayed ACK; 0: none)",
    )
    ap.add_argument("--no-pin", action="store_true", help="do not pin runs to 1 (tshark, local[1]) or 2 CPUs")
    ap.add_argument("--profile", action="store_true", help="also profile one task's work in-process")
    ap.add_argument("--profile-mb", type=float, default=20.0)
    a = ap.parse_args()
    if not shutil.which("tshark"):
        raise SystemExit("tshark is not installed (apt-get install tshark)")
    tshark_version = subprocess.run(["tshark", "--version"], capture_output=True, text=True).stdout
    cap, meta = prepare(a.workdir, a.mb, a.records, a.mss, a.ack_every)
    size_mb = cap.stat().st_size / 1e6
    grown, check = meta["grown"], meta["tshark"]
    print(tshark_version.splitlines()[0])
    print(
        f"base: {meta['records_produced']:,} records produced, {meta['records_consumed']:,} consumed by "
        f"kafka-python {meta['kafka_python']} (api_version {tuple(meta['api_version'])}), "
        f"{meta['connections']} connections, {meta['packets']:,} packets"
    )
    print("  requests: " + ", ".join(f"{k} x{n}" for k, n in sorted(check["requests"].items())))
    print(
        f"  tshark on the base: values in Produce {check['values']['produce']:,}, in Fetch "
        f"{check['values']['fetch']:,}, other {check['values']['other']:,}; record attributes "
        f"{check['record_attributes']:,}; batches by codec {check['batches']}; "
        f"{check['malformed_frames']} malformed frame(s)"
    )
    for m, n in check["warnings"].items():
        print(f"  tshark warning x{n}: {m}")
    print(
        f"capture: {cap} {size_mb:.1f} MB, {grown['copies']} copies of the base, {grown['packets']:,} "
        f"packets, {grown['connections']:,} connections"
    )
    n_floor, t_floor = floor_scan(str(cap))
    print(
        f"floor (struct walk over {n_floor:,} record headers): {t_floor:.2f} s, {size_mb / t_floor:,.0f} MB/s"
    )
    copies = grown["copies"]
    expected = {"produce": meta["records_produced"] * copies, "fetch": meta["records_consumed"] * copies}
    if check["values"]["produce"] != meta["records_produced"] or not check["values"]["fetch"]:
        print("  WARNING: tshark does not show every produced and fetched record of the base capture")

    become_subreaper()
    cpus = sorted(os.sched_getaffinity(0))
    one = None if a.no_pin else set(cpus[:1])
    two = None if a.no_pin else set(cpus[:2])
    if one:
        print(f"pinned: tshark and local[1] to CPU {sorted(one)}, local[2] to CPUs {sorted(two)}")
    runs: list[Run] = []
    print(
        f"\n{'round':<6} {'tool':<24} {'wall s':>8} {'MB/s':>7} {'CPU s':>8} {'others':>7} {'peak RSS':>9}"
        "  records (produced + fetched)"
    )
    for rnd in range(1, a.rounds + 1):
        for step in ("tshark", "local[1]", "local[2]"):
            if step == "tshark":
                r = run_tshark(cap, a.workdir / "tshark-fields.tsv", one)
            else:
                cores = 1 if step == "local[1]" else 2
                r = run_brokerscope(cap, step, cores, a.workdir, one if cores == 1 else two)
            runs.append(r)
            rec = f"{r.records['produce']:,} + {r.records['fetch']:,}"
            print(
                f"{rnd:<6} {r.tool:<24} {r.wall:8.1f} {size_mb / r.wall:7.2f} {r.cpu:8.1f} {r.others:7.1f} "
                f"{r.rss / 2**20:7,.0f} MiB  {rec}",
                flush=True,
            )
            if r.tasks:
                print(f"{'':<6} {'':<24} {imbalance(r.tasks)}", flush=True)
    if runs:
        report(runs, size_mb, expected)
    if a.profile:
        profile(cap, a.profile_mb, a.workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
