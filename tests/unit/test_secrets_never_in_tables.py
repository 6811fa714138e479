"""Captures hold secrets: the credentials the sample traffic carries never reach a table, in any
column, in clear or encoded (tests/support/cuts.py `leaks`: hex, base64, UTF-16, JSON opened)."""

from __future__ import annotations

from brokerscope.streams import decode_files
from tests.conftest import SAMPLE_DATA
from tests.support import cuts

# what the sample generators send (sample_data/iggy/make_iggy_samples.py,
# tests/support/tubemq_sim.py)
SECRETS = [b"s3cret-sample-pw", b"987654321"]


def test_sample_credentials_are_redacted_everywhere():
    out = decode_files([str(SAMPLE_DATA / "iggy"), str(SAMPLE_DATA / "tubemq")])
    logins = [
        r
        for r in out["commands"]
        if r["command"] in ("LOGIN_USER", "LOGIN_REGISTER") and r["direction"] == "c2s"
    ]
    assert logins and all("redacted" in r["details"] for r in logins)  # the login was decoded
    tabs = {t: out[t] for t in ("commands", "messages", "latencies", "acks", "streams")}
    assert cuts.leaks(tabs, {s.decode(): s for s in SECRETS}) == []
