"""Helpers of the TLS tests: real connections (tests/support/tlspair.py), fed to a TlsSession
in any cut, with the plaintext and the events collected per direction."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest

from brokerscope.tls import TlsSession, load
from tests.support import tlspair

# one exchange for every suite: small and large messages, a message of several records
BIG = bytes(range(256)) * 160  # 40,960 bytes: three records
EXCHANGE = [
    ("c2s", b"produce request 1"),
    ("s2c", b"produce response 1"),
    ("c2s", BIG),
    ("s2c", b"fetch response " + BIG[:5000]),
    ("c2s", b"x"),
    ("s2c", b"last"),
]

# name -> (version, OpenSSL TLS 1.2 cipher list, TLS 1.3 suite, encrypt-then-MAC)
SUITES = {
    "TLS_AES_128_GCM_SHA256": ("1.3", None, "TLS_AES_128_GCM_SHA256", True),
    "TLS_AES_256_GCM_SHA384": ("1.3", None, "TLS_AES_256_GCM_SHA384", True),
    "TLS_CHACHA20_POLY1305_SHA256": ("1.3", None, "TLS_CHACHA20_POLY1305_SHA256", True),
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": ("1.2", "ECDHE-RSA-AES128-GCM-SHA256", None, True),
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": ("1.2", "ECDHE-RSA-AES256-GCM-SHA384", None, True),
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": ("1.2", "ECDHE-RSA-CHACHA20-POLY1305", None, True),
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256 etm": ("1.2", "ECDHE-RSA-AES128-SHA256", None, True),
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256 mte": ("1.2", "ECDHE-RSA-AES128-SHA256", None, False),
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384 etm": ("1.2", "ECDHE-RSA-AES256-SHA384", None, True),
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384 mte": ("1.2", "ECDHE-RSA-AES256-SHA384", None, False),
    "TLS_RSA_WITH_AES_256_CBC_SHA etm": ("1.2", "AES256-SHA", None, True),
    "TLS_RSA_WITH_AES_256_CBC_SHA mte": ("1.2", "AES256-SHA", None, False),
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA mte": ("1.2", "ECDHE-RSA-AES128-SHA", None, False),
}


def needs_hooks(suite: str | None) -> None:
    why = tlspair.openssl_hooks()
    if suite and why:
        pytest.skip(f"TLS 1.3 suites cannot be chosen from Python here: {why}")


def connect(tmp_path, name: str, exchange=EXCHANGE, **kw) -> tlspair.Conn:
    version, ciphers, suite, etm = SUITES[name]
    needs_hooks(suite)
    log = os.path.join(tmp_path, name.replace(" ", "_") + ".log")
    return tlspair.run(
        tmp_path, version=version, ciphers=ciphers, suite=suite, etm=etm, exchange=exchange, keylog=log, **kw
    )


@dataclass
class Result:
    session: TlsSession
    events: list = field(default_factory=list)

    def plain(self, direction: str) -> bytes:
        return b"".join(e[2] for e in self.events if e[0] == "data" and e[1] == direction)

    def gaps(self, direction: str) -> list[int]:
        return [e[2] for e in self.events if e[0] == "gap" and e[1] == direction]


def decode(
    chunks, keys=None, *, keylog: str | None = None, step: int | None = None, midstream=False
) -> Result:
    """Feed (direction, bytes) chunks to a TlsSession (each cut into `step`-byte pieces); the
    pieces' timestamps count up from 1. A chunk of ("gap", direction, n) is a gap."""
    if keys is None and keylog is not None:
        keys = load(keylog, force=True)
    s = TlsSession(keys, midstream=midstream)
    out = Result(s)
    ts = 0
    for item in chunks:
        if item[0] == "gap":
            ts += 1
            out.events += s.gap(item[1], item[2], ts)
            continue
        d, data = item
        pieces = [data[i : i + step] for i in range(0, len(data), step)] if step else [data]
        for p in pieces:
            ts += 1
            out.events += s.feed(d, p, ts)
    out.events += s.close()
    return out
