"""Every cipher suite family through the whole decode (`decode_files`: capture reader, TCP
reassembly, TLS, the protocol's decoder, rows), for both TLS versions: one client run per
protocol captured in clear (the clear legs of tests/data/tls/), its application bytes sent again
over TLS under each family by a real OpenSSL client and server (tests/support/tlsreplay.py),
written as a capture with the clear leg's addresses; decoded with the key log OpenSSL wrote, it
gives the clear leg's commands, messages, latencies and acks apart from ports and times, and
tshark decrypts as many bytes per connection. Each family is run on one protocol, in turn, so
each protocol sees both versions and each kind of protection; the clear legs are decoded once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import tlsreplay
from tests.unit.tls.kit import decode as session_of
from tests.unit.tls.kit import needs_hooks
from tests.unit.tls.legs import DATA, assert_same_exchange, decode
from tests.unit.tls.test_tls_tshark import tshark_app_bytes

CLEAR = {  # protocol -> its real client run's clear leg
    "kafka": "kafka_tls13_clear.pcap",
    "pulsar": "pulsar_tls13_clear.pcap",
    "iggy": "iggy_tls13_clear.pcap",
    "tubemq": "tubemq_tls12_clear.pcap",
}
# IANA name [+ how CBC records are protected] -> (version, OpenSSL TLS 1.2 cipher list or TLS 1.3
# suite, encrypt-then-MAC offered, server certificate, protocol carried)
FAMILIES = {
    "TLS_AES_128_GCM_SHA256": ("1.3", "TLS_AES_128_GCM_SHA256", True, "rsa", "kafka"),
    "TLS_AES_256_GCM_SHA384": ("1.3", "TLS_AES_256_GCM_SHA384", True, "rsa", "tubemq"),
    "TLS_CHACHA20_POLY1305_SHA256": ("1.3", "TLS_CHACHA20_POLY1305_SHA256", True, "rsa", "pulsar"),
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": ("1.2", "ECDHE-RSA-AES128-GCM-SHA256", True, "rsa", "iggy"),
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": ("1.2", "ECDHE-ECDSA-AES256-GCM-SHA384", True, "ec", "kafka"),
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": (
        "1.2",
        "ECDHE-RSA-CHACHA20-POLY1305",
        True,
        "rsa",
        "iggy",
    ),
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": (
        "1.2",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        True,
        "ec",
        "pulsar",
    ),
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA mte": ("1.2", "ECDHE-RSA-AES128-SHA", False, "rsa", "pulsar"),
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA etm": ("1.2", "ECDHE-ECDSA-AES256-SHA", True, "ec", "tubemq"),
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256 mte": ("1.2", "ECDHE-RSA-AES128-SHA256", False, "rsa", "kafka"),
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256 etm": ("1.2", "ECDHE-ECDSA-AES128-SHA256", True, "ec", "pulsar"),
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384 mte": ("1.2", "ECDHE-RSA-AES256-SHA384", False, "rsa", "tubemq"),
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384 etm": ("1.2", "ECDHE-RSA-AES256-SHA384", True, "rsa", "kafka"),
}


@pytest.fixture(scope="module")
def clear_legs() -> dict:
    """protocol -> (its clear leg's connections, its rows), read once, as asked."""
    cache: dict = {}

    def get(protocol: str) -> tuple[list[tlsreplay.Connection], dict]:
        if protocol not in cache:
            pcap = DATA / CLEAR[protocol]
            cache[protocol] = (tlsreplay.connections(pcap), decode(pcap, []))
        return cache[protocol]

    return get


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, clear_legs, tmp_path_factory) -> tuple[str, Path, str, list, dict, dict]:
    """(family, its TLS capture, key log, the TLS connections, its rows, the clear leg's rows)."""
    name = request.param
    version, ciphers, etm, cert, protocol = FAMILIES[name]
    needs_hooks(ciphers if version == "1.3" else None)
    conns, clear = clear_legs(protocol)
    tmp = tmp_path_factory.mktemp("family")
    pcap, keylog = tmp / "tls.pcap", tmp / "keys.log"
    spec = dict(suite=ciphers) if version == "1.3" else dict(ciphers=ciphers)
    tls = tlsreplay.encrypt(conns, pcap, keylog, version=version, etm=etm, cert=cert, **spec)
    keylog.chmod(0o600)
    return name, pcap, str(keylog), tls, decode(pcap, [str(keylog)]), clear


def test_each_family_over_tls_equals_clear(family):
    name, _pcap, keylog, conns, tls, clear = family
    version, _c, etm, _cert, protocol = FAMILIES[name]
    iana = name.split()[0]
    # the family asked for is the one negotiated (CBC: with encrypt-then-MAC or without)
    s = session_of(conns[0].transcript, keylog=keylog).session
    assert (s.cipher, s.version, s.decrypted) == (iana, f"TLS {version}", "yes")
    if name.endswith(("etm", "mte")):
        assert s.encrypt_then_mac is etm
    assert_same_exchange(tls, clear)
    for r in tls["streams"]:
        assert (r["protocol"], r["tls_version"], r["tls_cipher"], r["tls_decrypted"]) == (
            protocol,
            f"TLS {version}",
            iana,
            "yes",
        )


@pytest.mark.slow  # a tshark run per family
@pytest.mark.skipif(not shutil.which("tshark"), reason="tshark is not installed")
def test_each_family_decrypts_as_many_bytes_as_tshark(family):
    _name, pcap, keylog, _conns, tls, _clear = family
    theirs = tshark_app_bytes(pcap, keylog)
    assert theirs
    for r in tls["streams"]:
        c, s = r["client_port"], r["server_port"]
        assert (r["tls_c2s_bytes"], r["tls_s2c_bytes"]) == (theirs.get((c, s), 0), theirs.get((s, c), 0))
