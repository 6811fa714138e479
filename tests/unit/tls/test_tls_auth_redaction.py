"""Decrypted authentication follows the clear rules: the recorded real-client authentication
exchanges (tests/data/auth/: Kafka SASL PLAIN and SCRAM from kafka-python and librdkafka, Pulsar
basic and token, Iggy password and personal access token, TubeMQ), sent again over TLS 1.3 by a
real OpenSSL client and server (tests/support/tlsreplay.py) and decoded with the key log, give the
clear exchange's rows, and no credential lands in any column, in clear or encoded, `raw` included
(tests/support/cuts.py `leaks`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import cuts, relay, tlsreplay
from tests.unit.test_secrets_under_cuts import TRANSCRIPTS, _port, _secrets
from tests.unit.tls.legs import COMPARED, decode, without_leg

CLIENT = "10.1.0.1"


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
def test_decrypted_authentication_is_redacted(path: Path, tmp_path):
    doc = relay.load(str(path))
    conns = [
        tlsreplay.Connection(CLIENT, 20000 + i, cuts.SERVER, _port(doc, i), cuts.START_NS, list(exchange))
        for i, exchange in enumerate(doc["connections"])
    ]
    clear = tmp_path / "clear.pcap"
    cuts.write(
        str(clear),
        [(exchange, True, True) for exchange in doc["connections"]],
        [c.server_port for c in conns],
        client=CLIENT,
    )
    tls, keys = tmp_path / "tls.pcap", tmp_path / "keys.log"
    tlsreplay.encrypt(conns, tls, keys, version="1.3")
    keys.chmod(0o600)
    got, want = decode(tls, [str(keys)]), decode(clear, [])
    assert {r["tls_decrypted"] for r in got["streams"]} == {"yes"}
    assert any(r["protocol"] == doc["protocol"] for r in got["commands"])
    for t in COMPARED:
        assert without_leg(got[t]) == without_leg(want[t]), t
    assert cuts.leaks(got, _secrets(doc)) == []
