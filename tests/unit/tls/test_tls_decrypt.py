"""Real TLS connections (OpenSSL through Python's ssl, keys written by the stack) decrypted by
TlsSession: every cipher suite family of TLS 1.2 and 1.3, any cut of the byte streams,
KeyUpdate, resumption, and the handshake metadata with and without keys."""

from __future__ import annotations

import random

import pytest

from brokerscope.tls import NO_KEY, YES, KeyLog, TlsSession, kdf, load, sniff
from brokerscope.tls import keylog as kl
from brokerscope.tls.suites import SUITES as KNOWN
from tests.support import tlspair

from .kit import EXCHANGE, SUITES, connect, decode, needs_hooks


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_suite_decrypts_to_what_was_sent(tmp_path, name):
    conn = connect(tmp_path, name)
    r = decode(conn.transcript, keylog=conn.keylog)
    s = r.session
    assert r.plain("c2s") == conn.sent["c2s"]
    assert r.plain("s2c") == conn.sent["s2c"]
    assert not r.gaps("c2s") and not r.gaps("s2c")
    iana = name.split()[0]
    assert s.cipher == iana and KNOWN[s.server_hello.cipher_suite].name == iana
    assert s.version == ("TLS 1.3" if name.startswith("TLS_A") or name.startswith("TLS_CH") else "TLS 1.2")
    assert (s.sni, s.alpn, s.alpn_offered) == ("broker.test", "kafka", ["h2", "kafka"])
    assert s.status == YES and s.decrypted == YES and s.reason is None
    assert s.resumed is False
    if name.endswith(("etm", "mte")):
        assert s.encrypt_then_mac is name.endswith("etm")
    counters = s.counters()
    assert counters["c2s"]["app_bytes"] == len(conn.sent["c2s"])
    assert counters["s2c"]["app_bytes"] == len(conn.sent["s2c"])
    assert counters["c2s"]["failed"] == counters["s2c"]["failed"] == 0
    assert s.info() == {
        "tls_version": s.version,
        "tls_cipher": iana,
        "tls_sni": "broker.test",
        "tls_alpn": "kafka",
        "tls_decrypted": "yes",
        "tls_c2s_bytes": len(conn.sent["c2s"]),
        "tls_s2c_bytes": len(conn.sent["s2c"]),
    }


@pytest.mark.parametrize(
    "name",
    [
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        "TLS_RSA_WITH_AES_256_CBC_SHA mte",
    ],
)
def test_one_byte_at_a_time(tmp_path, name):
    """Every record cut at every byte: the same plaintext, and each plaintext byte carries the
    time of the piece that carried its ciphertext byte (here each piece has its own time)."""
    conn = connect(tmp_path, name, exchange=EXCHANGE[:4])
    r = decode(conn.transcript, keylog=conn.keylog, step=1)
    assert r.plain("c2s") == conn.sent["c2s"]
    assert r.plain("s2c") == conn.sent["s2c"]
    data = [e for e in r.events if e[0] == "data"]
    assert all(len(e[2]) == 1 for e in data)
    times = [e[3] for e in data]
    assert times == sorted(times) and len(set(times)) == len(times)


def test_plaintext_times_follow_the_ciphertext_segments(tmp_path):
    """A TLS 1.2 GCM record (8-byte explicit nonce before the ciphertext) fed in two pieces: the
    plaintext is cut where the second piece starts, less the nonce."""
    conn = connect(tmp_path, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", exchange=[("c2s", b"A" * 1000)])
    chunks = list(conn.transcript)
    i = max(k for k, (d, b) in enumerate(chunks) if d == "c2s" and len(b) > 1000)
    d, b = chunks[i]
    assert b[0] == 23 and len(b) == 5 + 8 + 1000 + 16  # one application data record
    s = TlsSession(load(conn.keylog, force=True))
    for d2, b2 in chunks[:i]:
        s.feed(d2, b2, 1)
    assert s.feed("c2s", b[:413], 100) == []  # the record is not whole yet
    ev = s.feed("c2s", b[413:], 200)
    assert ev == [("data", "c2s", b"A" * 400, 100), ("data", "c2s", b"A" * 600, 200)]


def test_random_cuts_and_merged_flights(tmp_path):
    """Streams re-cut at random points, several records per piece and records across pieces."""
    conn = connect(tmp_path, "TLS_AES_128_GCM_SHA256")
    rnd = random.Random(15)
    merged: list[tuple[str, bytes]] = []
    for d, b in conn.transcript:
        if merged and merged[-1][0] == d:
            merged[-1] = (d, merged[-1][1] + b)
        else:
            merged.append((d, b))
    pieces = []
    for d, b in merged:
        at = 0
        while at < len(b):
            n = rnd.choice((1, 2, 5, 6, 100, 4000, 20000, 70000))
            pieces.append((d, b[at : at + n]))
            at += n
    r = decode(pieces, keylog=conn.keylog)
    assert r.plain("c2s") == conn.sent["c2s"] and r.plain("s2c") == conn.sent["s2c"]
    assert r.session.status == YES


@pytest.mark.parametrize("suite", ["TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"])
def test_key_update(tmp_path, suite):
    """The client sends KeyUpdate (update_requested): both directions move to the next
    generation of keys; the plaintext before and after is whole."""
    needs_hooks(suite)
    exchange = [
        ("c2s", b"before the update"),
        ("s2c", b"reply before"),
        tlspair.KEY_UPDATE,
        ("c2s", b"after the update"),
        ("s2c", b"reply after"),
        tlspair.KEY_UPDATE,
        ("c2s", b"after the second update"),
    ]
    conn = tlspair.run(tmp_path, version="1.3", suite=suite, exchange=exchange)
    r = decode(conn.transcript, keylog=conn.keylog)
    assert r.plain("c2s") == conn.sent["c2s"] and r.plain("s2c") == conn.sent["s2c"]
    assert r.session.status == YES
    # the derivation agrees with the stack where it logs the next secrets (OpenSSL 3 writes
    # CLIENT_TRAFFIC_SECRET_N / SERVER_TRAFFIC_SECRET_N after each update)
    text = open(conn.keylog).read().split("\n")
    logged = [ln.split()[2] for ln in text if ln.startswith("CLIENT_TRAFFIC_SECRET_N ")]
    keys = load(conn.keylog, force=True)
    secret = keys.get(r.session.client_hello.random, kl.CLIENT_TRAFFIC_0).reveal()
    derived = []
    for _ in logged:
        secret = kdf.next_secret(r.session.suite, secret)
        derived.append(secret.hex())
    assert derived == logged


@pytest.mark.parametrize("version, ciphers", [("1.2", "ECDHE-RSA-AES128-GCM-SHA256"), ("1.3", None)])
def test_resumption(tmp_path, version, ciphers):
    first = tlspair.run(
        tmp_path, version=version, ciphers=ciphers, exchange=[("c2s", b"one"), ("s2c", b"two")]
    )
    second = tlspair.run(
        tmp_path,
        exchange=[("c2s", b"three"), ("s2c", b"four")],
        session=first.session,
        contexts_=first.contexts,
    )
    keys = load(first.keylog, force=True)
    r1, r2 = decode(first.transcript, keys), decode(second.transcript, keys)
    assert r1.session.resumed is False and r2.session.resumed is True
    assert r2.plain("c2s") == b"three" and r2.plain("s2c") == b"four"
    assert r2.session.status == YES


def test_hello_retry_request(tmp_path):
    """A server that takes only P-256 answers the client's X25519 key share with a
    HelloRetryRequest; the client's compatibility ChangeCipherSpec and second ClientHello are in
    clear, the real ServerHello follows, and the connection decrypts."""
    needs_hooks("groups")
    cli, srv = tlspair.contexts("1.3", None, None, True, str(tmp_path / "hrr.log"), ["kafka"])
    tlspair.set_groups(srv, "P-256")
    conn = tlspair.run(tmp_path, exchange=[("c2s", b"hi"), ("s2c", b"there")], contexts_=(cli, srv))
    r = decode(conn.transcript, keylog=conn.keylog)
    assert r.session.hello_retry is True
    assert (r.plain("c2s"), r.plain("s2c")) == (b"hi", b"there")
    assert (r.session.status, r.session.version, r.session.alpn) == ("yes", "TLS 1.3", "kafka")


@pytest.mark.parametrize("name", ["TLS_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256 etm"])
def test_without_keys_the_handshake_metadata_remains(tmp_path, name):
    conn = connect(tmp_path, name)
    other = connect(tmp_path, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", exchange=[])
    for keys in (None, load(other.keylog, force=True), KeyLog()):
        r = decode(conn.transcript, keys)
        s = r.session
        assert r.events == []  # no plaintext, no gaps: nothing for a decoder
        assert s.decrypted == NO_KEY and s.status == "no key"
        assert s.reason in ("no key log", "the client random is not in the key log")
        assert s.sni == "broker.test" and s.cipher == name.split()[0]
        tls13 = conn.version == "TLSv1.3"
        assert s.version == ("TLS 1.3" if tls13 else "TLS 1.2")
        assert s.alpn == (None if tls13 else "kafka")  # TLS 1.3 sends it encrypted
        c = s.counters()
        assert c["c2s"]["undecrypted"] > 0 and c["s2c"]["undecrypted"] > 0


def test_midstream_without_client_hello(tmp_path):
    conn = connect(tmp_path, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256")
    cut = [(d, b) for d, b in conn.transcript[4:]]
    cut[0] = (cut[0][0], cut[0][1][7:])  # starts inside a record
    r = decode(cut, keylog=conn.keylog, midstream=True)
    assert r.events == []
    assert r.session.status == NO_KEY and r.session.reason == "no ClientHello captured"


def test_sniff():
    conn_ch = bytes.fromhex("160301004a01000046")  # handshake record, ClientHello
    sh = bytes.fromhex("1603030050020000")
    assert sniff(conn_ch, sh) >= 0.9
    assert sniff(conn_ch, b"") >= 0.9
    assert sniff(b"", sh) >= 0.5
    assert sniff(b"\x00\x00\x00\x14\x00\x12\x00\x03", b"") == 0.0  # a Kafka request
    assert sniff(b"\x16\x03\x01\x00\x4a\x02", b"") == 0.0  # a ServerHello from the client side
