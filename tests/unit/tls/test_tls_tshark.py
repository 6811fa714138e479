"""tshark with the same key log agrees on the decrypted application-data bytes of every TLS
connection of tests/data/tls/:

- tls.pcap (tests/support/make_tls_capture.py), read by brokerscope's own capture reader and
  TCP reassembly and decrypted by TlsSession: tshark's answer (TShark 4.0,
  `-o tls.keylog_file:keys.log -q -z follow,tls,raw,N`) is recorded here, so the test runs
  without tshark; where tshark is installed it is asked again. tshark's follow names its nodes
  by which side's decrypted data comes first, so each connection's pair of byte counts is
  compared as a pair, unordered; the counts per direction are the generator's.
- tls.pcap and every real client run over TLS (tests/unit/tls/legs.py RUNS), through
  `decode_files`: each streams row's `tls_c2s_bytes` / `tls_s2c_bytes` equal, per connection and
  direction, the sum of tshark's decrypted record lengths (`data.len` of each decrypted
  application-data record, with the one broker dissector tshark has, Kafka, disabled so that
  the plaintext reaches the data dissector), and the clear leg's TCP payload per connection.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pytest

from brokerscope import capture, inputs
from brokerscope.config import Settings
from brokerscope.protocols.base import C2S, S2C
from brokerscope.streams import SORT_COLS, StreamDriver
from brokerscope.tables import PACKETS
from brokerscope.tcp import TcpConnection
from brokerscope.tls import TlsSession, load
from tests.unit.tls.legs import DATA, NO_KEY_PORT, RUNS, SENT, decode, private_copy

PCAP = DATA / "tls.pcap"
SERVER_PORT = 9093

# tcp.stream -> (node 0 bytes, node 1 bytes) of `tshark -z follow,tls,raw`
TSHARK_FOLLOW = {0: (27717, 2054), 1: (3588, 23731), 2: (3978, 26326), 3: (3484, 27279), 4: (0, 0)}


def sessions(path: Path, keys) -> dict[int, tuple[TlsSession, dict[str, bytearray]]]:
    """client port -> (session, plaintext per direction), through the capture reader and TCP."""
    settings = Settings.load()
    disc = inputs.discover([str(path)])
    ids = [dataclasses.replace(i, capture_id=i.capture_id or "c") for i in disc.inputs]
    splits, _ = inputs.plan(ids, settings.split_size)
    batches = [b for sp in splits for b in capture.read_split(sp)]
    table = pa.Table.from_batches(batches, schema=PACKETS).sort_by([(c, "ascending") for c in SORT_COLS])
    out: dict[int, list] = {}  # client port -> [session, plaintext, tcp]
    for lo, hi, pkt in StreamDriver(settings)._packets(table.to_batches()):
        port = hi[1] if lo[1] == SERVER_PORT else lo[1]
        if port not in out:
            out[port] = [
                TlsSession(keys),
                defaultdict(bytearray),
                TcpConnection(pkt, 1 << 20, 10**10, 10**12),
            ]
        _feed(out[port], out[port][2].add(pkt))
    for item in out.values():
        _feed(item, item[2].finish())
        for _k, d, data, _ts in item[0].close():
            item[1][d] += data
    return {p: (s, plain) for p, (s, plain, _t) in out.items()}


def _feed(item, events) -> None:
    session, plain, tcp = item
    for kind, from_lo, value, ts, *_frame in events:  # a data event also names its packet's frame
        d = C2S if from_lo == tcp.client_is_lo else S2C
        fn = session.feed if kind == "data" else session.gap
        for k, d2, data, _ts in fn(d, value, ts):
            assert k == "data"
            plain[d2] += data


def test_decrypted_bytes_equal_tsharks(tmp_path):
    key_file = tmp_path / "keys.log"  # git keeps no file modes: a private copy, read unforced
    key_file.write_bytes((DATA / "keys.log").read_bytes())
    os.chmod(key_file, 0o600)
    keys = load(key_file)
    got = sessions(PCAP, keys)
    assert sorted(got) == sorted(SENT)
    for i, port in enumerate(sorted(got)):
        s, plain = got[port]
        version, cipher, c2s, s2c = SENT[port]
        assert (s.version, s.cipher, s.sni) == (version, cipher, "broker.test")
        mine = (len(plain[C2S]), len(plain[S2C]))
        if port == NO_KEY_PORT:
            assert s.status == "no key" and mine == (0, 0)
        else:
            assert s.status == "yes" and mine == (c2s, s2c)
            counters = s.counters()
            assert (counters[C2S]["app_bytes"], counters[S2C]["app_bytes"]) == mine
        assert sorted(mine) == sorted(TSHARK_FOLLOW[i])


def follow(stream: int, keylog: Path) -> tuple[int, int]:
    """(node 0, node 1) decrypted bytes of one TCP stream, from tshark's follow,tls,raw."""
    out = subprocess.run(
        [
            "tshark",
            "-r",
            str(PCAP),
            "-o",
            f"tls.keylog_file:{keylog}",
            "-q",
            "-z",
            f"follow,tls,raw,{stream}",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    n0 = n1 = 0
    for line in out.splitlines():
        if not line.strip() or line.startswith(("=", "Follow:", "Filter:", "Node ")):
            continue
        if line.startswith("\t"):
            n1 += len(line.strip()) // 2
        else:
            n0 += len(line.strip()) // 2
    return n0, n1


needs_tshark = pytest.mark.skipif(not shutil.which("tshark"), reason="tshark is not installed")


@needs_tshark
def test_tshark_still_says_so():
    for stream, counts in TSHARK_FOLLOW.items():
        assert follow(stream, DATA / "keys.log") == counts


def tshark_app_bytes(pcap: Path, keylog: str) -> dict[tuple[int, int], int]:
    """(source port, destination port) -> the application-data bytes tshark decrypted: the sum
    of `data.len` over the decrypted records (one per record, comma-separated in a packet)."""
    out = subprocess.run(
        [
            "tshark",
            "-r",
            str(pcap),
            "-o",
            f"tls.keylog_file:{keylog}",
            "--disable-protocol",
            "kafka",  # else a Kafka port's plaintext is Kafka's, not data's
            "-T",
            "fields",
            "-e",
            "tcp.srcport",
            "-e",
            "tcp.dstport",
            "-e",
            "data.len",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    got: dict[tuple[int, int], int] = defaultdict(int)
    for line in out.splitlines():
        sport, dport, lens = line.split("\t")
        if lens:
            got[int(sport), int(dport)] += sum(int(n) for n in lens.split(","))
    return dict(got)


@pytest.fixture(scope="module", params=["tls", *sorted(RUNS)])
def decrypted(request, tmp_path_factory) -> tuple[str, Path, str, dict[tuple[int, int], tuple]]:
    """(run, TLS capture, key log, (client port, server port) -> its streams row's decrypted
    bytes c2s and s2c), decoded with decode_files once per run."""
    run = request.param
    keylog = private_copy(tmp_path_factory.mktemp(run), "keys.log" if run == "tls" else f"{run}_keys.log")
    pcap = DATA / ("tls.pcap" if run == "tls" else f"{run}_tls.pcap")
    rows = sorted(decode(pcap, [keylog])["streams"], key=lambda r: r["first_ts"])
    mine = {(r["client_port"], r["server_port"]): (r["tls_c2s_bytes"], r["tls_s2c_bytes"]) for r in rows}
    assert len(mine) == len(rows)
    return run, pcap, keylog, mine


def test_decrypted_bytes_per_connection_are_the_clear_legs(decrypted):
    """Each streams row's decrypted bytes per direction: what the generator sent (tls.pcap), the
    TCP payload of the same connection on the clear leg (the proxy's upstream connections, in
    the same order)."""
    run, _pcap, _keylog, mine = decrypted
    if run == "tls":
        assert {c: mine[c, SERVER_PORT] for c, _s in mine} == {
            p: (0, 0) if p == NO_KEY_PORT else (c2s, s2c) for p, (_v, _c, c2s, s2c) in SENT.items()
        }
    else:
        clear = sorted(decode(f"{run}_clear.pcap", [])["streams"], key=lambda r: r["first_ts"])
        assert list(mine.values()) == [(r["c2s_bytes"], r["s2c_bytes"]) for r in clear]


@needs_tshark
def test_decrypted_bytes_per_connection_are_tsharks(decrypted):
    _run, pcap, keylog, mine = decrypted
    theirs = tshark_app_bytes(pcap, keylog)
    assert set(theirs) <= {k for c, s in mine for k in ((c, s), (s, c))}
    assert mine == {(c, s): (theirs.get((c, s), 0), theirs.get((s, c), 0)) for c, s in mine}
