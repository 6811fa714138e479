"""TLS decryption throughput of brokerscope.tls.TlsSession, one core, per cipher suite.

    python bench/tls_bench.py [--mb 16] [--suite NAME ...]

Each suite's connection is a real one (OpenSSL through Python's ssl, in memory,
tests/support/tlspair.py) carrying --mb MB from the server in 64 KiB writes (full 16 KiB
records) and as much again from the client in 512-byte writes (one small record each, as
requests are). Only the decryption is timed: the recorded byte streams fed to a TlsSession in
1,448-byte pieces (TCP segments), plaintext collected. Prints MB of plaintext per second of
this process's CPU time (the machine may be shared: wall time would count other processes' turns)
and, beside it, per second of wall time.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from brokerscope.tls import TlsSession, load  # noqa: E402
from tests.support import tlspair  # noqa: E402

SUITES = {
    "TLS_AES_128_GCM_SHA256": dict(version="1.3", suite="TLS_AES_128_GCM_SHA256"),
    "TLS_CHACHA20_POLY1305_SHA256": dict(version="1.3", suite="TLS_CHACHA20_POLY1305_SHA256"),
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": dict(version="1.2", ciphers="ECDHE-RSA-AES256-GCM-SHA384"),
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256 (MtE)": dict(
        version="1.2", ciphers="ECDHE-RSA-AES128-SHA256", etm=False
    ),
}
SEGMENT = 1448


def run(name: str, mb: int, tmp: str) -> None:
    big = os.urandom(1 << 16)
    small = os.urandom(512)
    n_big = mb * (1 << 20) // len(big)
    exchange = [("s2c", big)] * n_big + [("c2s", small)] * (mb * (1 << 20) // len(small) // 16)
    conn = tlspair.run(
        tmp, exchange=exchange, keylog=os.path.join(tmp, f"{abs(hash(name))}.log"), **SUITES[name]
    )
    keys = load(conn.keylog, force=True)
    pieces = [(d, b[i : i + SEGMENT]) for d, b in conn.transcript for i in range(0, len(b), SEGMENT)]
    s = TlsSession(keys)
    got = {"c2s": 0, "s2c": 0}
    spent = {"c2s": 0.0, "s2c": 0.0}
    wall = {"c2s": 0.0, "s2c": 0.0}
    cpu, clock = time.process_time, time.perf_counter
    for d, b in pieces:
        t0, w0 = cpu(), clock()
        events = s.feed(d, b, 0)
        spent[d] += cpu() - t0
        wall[d] += clock() - w0
        for e in events:
            got[e[1]] += len(e[2])
    assert got == {k: len(v) for k, v in conn.sent.items()}, (got, s.status)
    for d, what in (("s2c", "16 KiB records"), ("c2s", "512-byte records")):
        print(
            f"{name:45s} {d} {what:17s} {got[d] / 1e6 / spent[d]:8.1f} MB/s CPU "
            f"{got[d] / 1e6 / wall[d]:8.1f} MB/s wall ({got[d] / 1e6:.1f} MB)"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=16)
    ap.add_argument("--suite", action="append", choices=sorted(SUITES))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.suite or SUITES:
            run(name, args.mb, tmp)


if __name__ == "__main__":
    main()
