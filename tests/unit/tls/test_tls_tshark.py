"""A capture of real TLS connections (tests/data/tls/, made by tests/support/make_tls_capture.py)
read by brokerscope's own capture reader and TCP reassembly, decrypted by TlsSession: the
decrypted application-data bytes per connection equal tshark's with the same key log.

tshark's answer (TShark 4.0, `-o tls.keylog_file:keys.log -q -z follow,tls,raw,N`) is recorded
here, so the test runs without tshark; where tshark is installed it is asked again. tshark's
follow names its nodes by which side's decrypted data comes first, so each connection's pair of
byte counts is compared as a pair, unordered; the counts per direction are the generator's.
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

DATA = Path(__file__).resolve().parents[2] / "data" / "tls"
PCAP = DATA / "tls.pcap"
SERVER_PORT = 9093

# tcp.stream -> (node 0 bytes, node 1 bytes) of `tshark -z follow,tls,raw`
TSHARK_FOLLOW = {0: (27717, 2054), 1: (3588, 23731), 2: (3978, 26326), 3: (3484, 27279), 4: (0, 0)}
# client port -> (version, cipher, application bytes sent c2s, s2c), as make_tls_capture ran them
SENT = {
    20000: ("TLS 1.3", "TLS_CHACHA20_POLY1305_SHA256", 2054, 27717),
    20001: ("TLS 1.2", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", 3588, 23731),
    20002: ("TLS 1.2", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", 3978, 26326),
    20003: ("TLS 1.2", "TLS_RSA_WITH_AES_256_CBC_SHA", 3484, 27279),
    20004: ("TLS 1.3", "TLS_AES_128_GCM_SHA256", 2340, 29515),  # not in the key log
}


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
    for kind, from_lo, value, ts, _frame in events:
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
        if port == 20004:
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


@pytest.mark.skipif(not shutil.which("tshark"), reason="tshark is not installed")
def test_tshark_still_says_so():
    for stream, counts in TSHARK_FOLLOW.items():
        assert follow(stream, DATA / "keys.log") == counts
