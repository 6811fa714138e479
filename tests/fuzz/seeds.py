"""Seed corpora for the fuzz targets, built at run time from sample_data/ (nothing binary is
committed): `python -m tests.fuzz.seeds DIR [--target NAME]` writes DIR/<target>/seed-*.

- decoders: each TCP connection of the sample captures, read by the project's capture reader and
  reassembled by its TcpConnection, as data/gap events in the decoder encoding (tubemq_exchanges
  too: the tubemq ones);
- kafka_segment: sample_data/kafka/segments with and without its index files;
- iggy_segment: the segments the Iggy segment tests write (three layouts; a VSR one damaged);
- capture: the small sample captures (one also gzip-compressed);
- capture_compiled: the small sample captures under each config (split size, payload offsets,
  batch size, filter), as they are and with bytes of their records' link, IP and TCP headers
  changed (lengths, offsets, versions, protocols: the cases the compiled walk hands back);
- tcp: the sample captures' connections with absolute sequence numbers, and a few scenarios.
- tls: each TLS connection of tests/data/tls/ (real OpenSSL, kafka-python, pulsar-client and
  apache-iggy connections whose keys are in the key logs there) as the session's byte streams:
  as captured, cut at random places, with gaps inside and across records, midstream (the
  handshake left out), and without keys;
- tls_capture: the TLS captures of tests/data/tls/ (tls.pcap cut at MAX_SEED).
- iggy_batch: random Iggy batch records (user headers of both
  layouts, checksums, timestamps, several records back to back).
- tubemq_rpc: random TubeMQ RPC envelopes (requests, responses, error responses, unknown fields),
  the frames holding them, and random method bodies.
- kafka_body: the request and response bodies of the Kafka sample captures, each after the api
  key, version and kind that name its plan.
- pulsar_batch: random Pulsar batch payloads (properties, keys plain and base64, event times,
  sequences, ordering keys, null values, compacted messages, trailing bytes).
- details_json: the `details` values of the sample captures' rows (every protocol), encoded as
  details_value reads them.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from brokerscope import tables
from brokerscope.protocols import base

from . import targets as T

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_data"
MAX_SEED = 1 << 16  # matches run.py's default -max_len


def _protocol_of(path: Path) -> str | None:
    top = path.relative_to(SAMPLES).parts[0]
    if top in ("kafka", "pulsar", "iggy", "tubemq"):
        return top
    if top == "public":
        return "iggy" if "iggy" in path.name else "kafka"
    return None


def captures() -> list[Path]:
    return sorted(p for ext in ("pcap", "pcapng") for p in SAMPLES.rglob(f"*.{ext}"))


def connections(path: Path) -> Iterator[tuple[tuple, tuple, list]]:
    """(lo, hi, packets in capture order) per 4-tuple of a capture, via the project's reader."""
    from brokerscope.capture import capture_id, identify, parse_stats, plan_splits, read_split
    from brokerscope.tcp import Packet

    kind = identify(path)
    conns: dict[tuple, list] = defaultdict(list)
    for sp in plan_splits(path, 0, capture_id(path), kind, 0):
        for b in read_split(sp):
            if parse_stats(b) is not None:
                continue
            for r in b.to_pylist():
                pkt = Packet(
                    r["ts_ns"],
                    r["from_lo"],
                    r["seq"],
                    r["ack"],
                    r["flags"],
                    r["window"],
                    r["payload"] or b"",
                    r["payload_len"],
                    r["wire_len"],
                    r["snap_truncated"],
                )
                conns[(r["lo_ip"], r["lo_port"], r["hi_ip"], r["hi_port"])].append(pkt)
    for (lo_ip, lo_p, hi_ip, hi_p), pkts in conns.items():
        pkts.sort(key=lambda p: p.ts_ns)
        yield (lo_ip, lo_p), (hi_ip, hi_p), pkts


def decoder_seeds(protocol: str) -> Iterator[bytes]:
    """Each connection of the protocol's sample captures as decoder input (cut at MAX_SEED)."""
    from brokerscope.tcp import TcpConnection

    ports = set(base.get(protocol).default_ports)
    for path in captures():
        if _protocol_of(path) != protocol:
            continue
        for lo, hi, pkts in connections(path):
            tcp = TcpConnection(pkts[0])
            events = [ev for p in pkts for ev in tcp.add(p)] + tcp.finish()
            client_is_lo = tcp.client_is_lo
            if client_is_lo is None:
                client_is_lo = hi[1] in ports or (lo[1] not in ports and lo[1] > hi[1])
            out = []
            for kind, from_lo, val, *_ in events:
                direction = base.C2S if from_lo == client_is_lo else base.S2C
                out.append((kind, direction, val))
            seed = T.encode_stream(out, cfg=1 if tcp.midstream else 0)
            if len(seed) > 1:
                yield seed[:MAX_SEED]


def kafka_segment_seeds() -> Iterator[bytes]:
    for log in sorted((SAMPLES / "kafka" / "segments").rglob("*.log")):
        stem = str(log)[:-4]
        data = log.read_bytes()
        index = Path(stem + ".index").read_bytes() if Path(stem + ".index").exists() else None
        tindex = Path(stem + ".timeindex").read_bytes() if Path(stem + ".timeindex").exists() else None
        yield T.encode_segment(data, [index, tindex])
        yield T.encode_segment(data, [None, None], cfg=2 << 3)  # split every 100 bytes, no indexes
        yield T.encode_segment(data[: len(data) * 2 // 3], [index, tindex], cfg=1)  # torn tail


def iggy_segment_seeds() -> Iterator[bytes]:
    """The three layouts, written by the Iggy segment tests' own writers (and a VSR one damaged)."""
    from tests.unit.iggy import test_iggy_segments as its

    def damaged_batches(d: Path) -> tuple[Path, bytes]:
        """Nine VSR batches, one length damaged: the resync past it."""
        path, log = its.write_batches(d, its.NINE, per_batch=2)
        log = its.VSR_DAMAGE["length short"][0](log)
        path.write_bytes(log)
        return path, log

    with tempfile.TemporaryDirectory() as tmp:
        for i, write in enumerate(
            (
                lambda d: its.write_new(d, its.MSGS, 64),
                lambda d: its.write_new(d, its.MSGS, 56, index="start"),
                lambda d: its.write_legacy(d, its.MSGS),
                lambda d: its.write_batches(d, its.VSR_MSGS),
                damaged_batches,
            )
        ):
            d = Path(tmp) / str(i)
            path, log = write(its.part_dir(d))
            idx = path.with_suffix(".index")
            index = idx.read_bytes() if idx.exists() else None
            cfg = 0 if i == 2 else 1  # BASE_OFFSETS[1] = 100, BASE_OFFSETS[0] = 0: as written
            yield T.encode_segment(log, [index], cfg=cfg)


def capture_seeds() -> Iterator[bytes]:
    small = [p for p in captures() if p.stat().st_size <= 24 * 1024]
    for p in small:
        yield b"\x00" + p.read_bytes()
    if small:
        yield b"\x01" + small[0].read_bytes()  # gzip-compressed by the target
        yield bytes([3 << 1]) + small[-1].read_bytes()  # split every 500 bytes


def capture_compiled_seeds() -> Iterator[bytes]:
    import random

    rng = random.Random(13)
    small = [p for p in captures() if p.stat().st_size <= 24 * 1024]
    for i, p in enumerate(small):
        data = p.read_bytes()
        yield bytes([(i % 4) << 5 | (i % 2) << 3 | (i % 3) << 1]) + data
        yield bytes([rng.randrange(256) & ~1]) + _mutate_headers(data, rng)


def _mutate_headers(data: bytes, rng) -> bytes:
    """The capture with a few bytes changed where link, IP and TCP headers lie: the 64 bytes
    after a pcap record header (or into a pcapng block), so the fuzzer starts at the edges."""
    out = bytearray(data)
    for _ in range(rng.randrange(1, 12)):
        at = 24 + rng.randrange(max(1, len(out) - 24))
        at = min(len(out) - 1, at - at % 64 + rng.choice((16, 28, 30, 32, 34, 36, 38, 40, 46, 56, 62)))
        if at > 24:
            out[at] = rng.choice((0, 0x45, 0x46, 0x60, 6, 17, 0xFF, out[at] ^ 0xF0, 0x50))
    return bytes(out)


def tcp_seeds() -> Iterator[bytes]:
    from brokerscope.tcp import ACK, FIN, PSH, SYN

    # a handshake, in-order data both ways, a hole filled later, a retransmission, FINs
    yield T.encode_tcp(
        [
            (SYN, True, 0, 0, 0, 0, 0, None, 1, False),
            (SYN | ACK, False, 0, 0, 0, 0, 0, None, 1, False),
            (ACK, True, 0, 0, 0, 0, 0, None, 1, False),
            (PSH | ACK, True, 0, 0, 0, 0, 100, None, 1, False),
            (PSH | ACK, False, 0, 0, 0, 0, 300, None, 1, False),
            (PSH | ACK, True, 1, 50, 0, 0, 40, None, 1, False),
            (PSH | ACK, True, 2, 90, 0, 0, 50, None, 1, False),
            (PSH | ACK, True, 0, 0, 0, 0, 10, 128, 1, False),
            (ACK, False, 0, 0, 1, 20, 0, None, 1, True),
            (FIN | ACK, True, 0, 0, 0, 0, 0, None, 1, False),
            (FIN | ACK, False, 0, 0, 0, 0, 0, None, 1, False),
        ]
    )
    n = 0
    for path in captures():
        if path.stat().st_size > 24 * 1024:
            continue
        for _lo, _hi, pkts in connections(path):
            recs = [
                (p.flags, p.from_lo, 3, p.seq, 3, p.ack, p.payload_len % 3000, None, 1, p.window == 0)
                for p in pkts[: MAX_SEED // 13]
            ]
            yield T.encode_tcp(recs)
            n += 1
            if n >= 12:
                return


TLS_DATA = ROOT / "tests" / "data" / "tls"


def _tls_streams() -> Iterator[list]:
    """Each TLS connection of tests/data/tls/*_tls.pcap and tls.pcap as (kind, direction, bytes
    or gap size) events, the ClientHello's sender as the client."""
    from brokerscope.tcp import TcpConnection
    from brokerscope.tls import sniff

    for path in sorted(TLS_DATA.glob("*.pcap")):
        if path.name.endswith("_clear.pcap"):
            continue
        for _lo, _hi, pkts in connections(path):
            tcp = TcpConnection(pkts[0])
            events = [ev for p in pkts for ev in tcp.add(p)] + tcp.finish()
            heads = {True: b"", False: b""}
            for kind, from_lo, val, *_ in events:
                if kind == "data" and not heads[from_lo]:
                    heads[from_lo] = bytes(val[:16])
            client_is_lo = sniff(heads[True], heads[False]) >= sniff(heads[False], heads[True])
            yield [
                (kind, base.C2S if from_lo == client_is_lo else base.S2C, val)
                for kind, from_lo, val, *_ in events
            ]


def _recut(events: list, rng) -> list:
    """The same bytes, each piece cut again at random places."""
    out = []
    for kind, d, val in events:
        if kind != "data":
            out.append((kind, d, val))
            continue
        at = 0
        while at < len(val):
            n = rng.choice((1, 5, 17, 300, 2000, 1 << 16))
            out.append((kind, d, val[at : at + n]))
            at += n
    return out


def _with_gap(events: list, rng) -> list:
    """One piece of one direction (after the handshake's first pieces) replaced by a gap, or cut
    inside: the rest of it a gap."""
    data = [i for i, (k, _d, v) in enumerate(events) if k == "data" and len(v) > 1]
    if len(data) < 4:
        return events
    i = rng.choice(data[3:])
    kind, d, val = events[i]
    keep = rng.randrange(0, len(val))
    repl = [("data", d, val[:keep])] if keep else []
    return events[:i] + repl + [("gap", d, len(val) - keep)] + events[i + 1 :]


def tls_seeds() -> Iterator[bytes]:
    import random

    rng = random.Random(15)
    for events in _tls_streams():
        yield T.encode_stream(events)[:MAX_SEED]
        yield T.encode_stream(events, cfg=1)[:MAX_SEED]  # no key log
        yield T.encode_stream(_recut(events, rng))[:MAX_SEED]
        yield T.encode_stream(_with_gap(events, rng))[:MAX_SEED]
        yield T.encode_stream(_with_gap(_recut(events, rng), rng))[:MAX_SEED]
        skip = 3 if len(events) > 4 else 0  # the handshake's first flights left out
        yield T.encode_stream(events[skip:], cfg=2)[:MAX_SEED]


def tls_capture_seeds() -> Iterator[bytes]:
    for path in sorted(TLS_DATA.glob("*.pcap")):
        if not path.name.endswith("_clear.pcap"):
            yield b"\x00" + path.read_bytes()[: MAX_SEED - 1]
    yield b"\x01" + (TLS_DATA / "pulsar_tls13_tls.pcap").read_bytes()  # no key log
    yield bytes([3 << 1]) + (TLS_DATA / "iggy_tls13_tls.pcap").read_bytes()  # split every 500 bytes


def iggy_batch_seeds() -> Iterator[bytes]:
    import random

    from tests.unit.iggy import test_iggy_batch_walk as ibw

    rng = random.Random(13)
    for i in range(40):
        n = rng.randrange(1, 12)
        record = ibw.random_batch(rng, n)
        cfg = (n << 4) if n < 16 and i % 2 else 8
        yield bytes([cfg]) + record
    two = ibw.random_batch(rng, 2) + ibw.random_batch(rng, 3)
    yield bytes([8]) + two  # a poll reply's records back to back: the first one read
    yield bytes([8 | 3]) + b"\0\0\0" + two


def tubemq_rpc_seeds() -> Iterator[bytes]:
    import random

    from tests.unit.tubemq import test_tubemq_rpc_walk as trw

    rng = random.Random(13)
    for _ in range(40):
        body = trw.random_envelope(rng)
        yield b"\0" + body
        yield b"\1" + trw.frame(rng.randrange(2**32), body, rng.choice([3, 64, 8192]))
        entry, body, _ = trw.random_body(rng)
        yield bytes([2 | (entry << 3) & 0xFF]) + body
        attr = ",".join(f"k{i}={rng.randrange(99)}" for i in range(rng.randrange(4))).encode()
        yield bytes([2 | 4 | 1 << 3]) + len(attr).to_bytes(4, "big") + attr + rng.randbytes(rng.randrange(9))
        yield bytes([4 | 8]) + trw.random_pack(rng)


def pulsar_batch_seeds() -> Iterator[bytes]:
    import random

    from tests.unit.pulsar import test_pulsar_batch_walk as pbw

    rng = random.Random(13)
    for i in range(40):
        n = rng.randrange(1, 40)
        payload = pbw.random_batch(rng, n)
        if i % 5 == 0:
            payload += rng.randbytes(rng.randrange(1, 9))  # trailing bytes
        yield bytes([(i % 4) << 6 | n]) + payload


def kafka_body_seeds() -> Iterator[bytes]:
    from tests.unit.kafka.kit import capture_bodies

    for path in captures():
        if _protocol_of(path) != "kafka":
            continue
        for p, frame, pos in capture_bodies(path):
            head = p.api_key.to_bytes(2, "big") + bytes([p.version, p.kind == "response"])
            yield (head + frame[pos:])[:MAX_SEED]


def details_json_seeds() -> Iterator[bytes]:
    import json

    from brokerscope.config import Settings
    from brokerscope.streams import decode_files

    for path in captures():
        out = decode_files([str(path)], Settings.load())
        for table in tables.DECODED_TABLES:
            for row in out.get(table, []):
                if row.get("details"):
                    yield T.encode_details(json.loads(row["details"]))[:MAX_SEED]


SEEDS = {
    "kafka": lambda: decoder_seeds("kafka"),
    "pulsar": lambda: decoder_seeds("pulsar"),
    "iggy": lambda: decoder_seeds("iggy"),
    "tubemq": lambda: decoder_seeds("tubemq"),
    "kafka_segment": kafka_segment_seeds,
    "iggy_segment": iggy_segment_seeds,
    "capture": capture_seeds,
    "capture_compiled": capture_compiled_seeds,
    "tcp": tcp_seeds,
    "tls": tls_seeds,
    "tls_capture": tls_capture_seeds,
    "iggy_batch": iggy_batch_seeds,
    "tubemq_rpc": tubemq_rpc_seeds,
    "tubemq_exchanges": lambda: decoder_seeds("tubemq"),
    "pulsar_batch": pulsar_batch_seeds,
    "kafka_body": kafka_body_seeds,
    "details_json": details_json_seeds,
}


def write_seeds(target: str, directory: str | os.PathLike, limit: int = 200) -> int:
    """Write up to `limit` distinct seeds of `target` into `directory`; return how many."""
    os.makedirs(directory, exist_ok=True)
    seen: set[str] = set()
    for seed in SEEDS[target]():
        h = hashlib.sha1(seed).hexdigest()
        if h in seen:
            continue
        seen.add(h)
        with open(os.path.join(directory, f"seed-{h[:16]}"), "wb") as f:
            f.write(seed)
        if len(seen) >= limit:
            break
    return len(seen)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--target", default="all", choices=["all", *SEEDS])
    a = ap.parse_args(argv)
    for t in SEEDS if a.target == "all" else [a.target]:
        n = write_seeds(t, os.path.join(a.dir, t))
        size = sum(os.path.getsize(p) for p in glob.glob(os.path.join(a.dir, t, "*")))
        print(f"{t}: {n} seeds, {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
