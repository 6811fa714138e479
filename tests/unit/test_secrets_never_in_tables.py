"""Captures hold secrets: the credentials the sample traffic carries never reach a table, in any
column, in clear or base64 (the `details` JSON encodes bytes as base64)."""

from __future__ import annotations

import base64
import json

from brokerscope.streams import decode_files
from tests.conftest import SAMPLE_DATA

# what the sample generators send (sample_data/iggy/make_iggy_samples.py,
# tests/support/tubemq_sim.py)
SECRETS = [b"s3cret-sample-pw", b"987654321"]


def _strings(v):
    """Every str/bytes inside a value, JSON and base64 opened up."""
    if v is None:
        return
    if isinstance(v, bytes | bytearray):
        yield bytes(v)
    elif isinstance(v, str):
        yield v.encode()
        if v[:1] in "{[":
            try:
                yield from _strings(json.loads(v))
            except ValueError:
                pass
    elif isinstance(v, dict):
        for k, x in v.items():
            if k == "base64" and isinstance(x, str):
                yield base64.b64decode(x)
            else:
                yield from _strings(x)
    elif isinstance(v, list | tuple):
        for x in v:
            yield from _strings(x)


def test_sample_credentials_are_redacted_everywhere():
    out = decode_files([str(SAMPLE_DATA / "iggy"), str(SAMPLE_DATA / "tubemq")])
    logins = [
        r
        for r in out["commands"]
        if r["command"] in ("LOGIN_USER", "LOGIN_REGISTER") and r["direction"] == "c2s"
    ]
    assert logins and all("redacted" in r["details"] for r in logins)  # the login was decoded
    leaks = []
    for table in ("commands", "messages", "latencies", "acks", "streams"):
        for row in out[table]:
            for col, v in row.items():
                for s in _strings(v):
                    leaks += [(table, col, sec) for sec in SECRETS if sec in s]
    assert leaks == []
