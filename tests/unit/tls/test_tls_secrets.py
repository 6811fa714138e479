"""No key material, in any form (raw, hex in either case, UTF-16, base64), in the repr or str of
any TLS object, in exceptions and their tracebacks, in statuses, or in log output."""

from __future__ import annotations

import logging
import os
import re
import traceback

import pytest

from brokerscope.tls import KeyLogError, TlsSession, kdf, load
from brokerscope.tls.protect import BadRecord
from brokerscope.tls.record import RecordStream
from tests.support import cuts, tlspair

from .kit import BIG, connect, decode, needs_hooks


def derived(session: TlsSession, keys) -> list[bytes]:
    """Every key the session could have derived from the key log: the TLS 1.2 key block, the
    TLS 1.3 traffic keys and IVs of each secret and of the next three generations."""
    out = []
    if session._key_block is not None:
        kb = session._key_block
        out += [kb.client_mac, kb.server_mac, kb.client_key, kb.server_key, kb.client_iv, kb.server_iv]
    if session.suite is not None and session.suite.tls13:
        for secret in keys.secrets():
            for _ in range(4):
                out += list(kdf.traffic_keys(session.suite, secret))
                secret = kdf.next_secret(session.suite, secret)
                out.append(secret)
    return [k for k in out if len(k) >= 8]


def texts(session: TlsSession, keys) -> list[str]:
    out = [repr(session), str(session), session.status, str(session.reason), repr(session.info())]
    out += [repr(session.counters()), repr(session.client_hello), repr(session.server_hello)]
    out += [repr(keys), str(keys)] + [
        repr(s) + str(s) for labels in keys._keys.values() for s in labels.values()
    ]
    for side in session.sides.values():
        out += [
            repr(side),
            str(side),
            repr(side.opener),
            str(side.opener),
            repr(side.records),
            repr(side.secret),
        ]
        out += [repr(side.next_secret), repr(side.messages)]
    out += [repr(session._key_block), str(session._key_block)]
    return out


def forms(secret: bytes) -> set[bytes]:
    """cuts.forms (raw, hex, UTF-16, base64 pieces) and pieces of Python's bytes repr."""
    shown = repr(secret)[2:-1].encode()
    return cuts.forms(secret) | {shown[i : i + 24] for i in range(max(1, len(shown) - 23))}


def leaks(strings: list[str], secrets: list[bytes]) -> list[str]:
    patterns = [re.compile(b"|".join(re.escape(p) for p in forms(s))) for s in secrets]
    found = []
    for text in strings:
        for form in (text.encode("utf-8", "surrogateescape"), text.encode("latin-1", "replace")):
            for s, rx in zip(secrets, patterns):
                if rx.search(form):
                    found.append(f"{len(s)}-byte key in {text[:80]!r}")
    return found


@pytest.mark.parametrize(
    "name",
    [
        "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256 mte",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
    ],
)
def test_no_key_material_in_any_output(tmp_path, caplog, name):
    caplog.set_level(logging.DEBUG)
    exchange = [("c2s", b"hello"), ("s2c", BIG), tlspair.KEY_UPDATE, ("c2s", b"after")]
    if not name.startswith("TLS_CHACHA"):
        exchange.remove(tlspair.KEY_UPDATE)
    else:
        needs_hooks(name)
    conn = connect(tmp_path, name, exchange=exchange)
    keys = load(conn.keylog, force=True)
    strings: list[str] = []
    # a clean run, a run with a tampered record, a run cut by gaps
    r = decode(conn.transcript, keys)
    secrets = keys.secrets() + derived(r.session, keys)
    assert len(secrets) >= 3
    strings += texts(r.session, keys)
    tampered = [
        (d, b[:-3] + bytes([b[-3] ^ 1]) + b[-2:] if d == "s2c" and len(b) > 9000 else b)
        for d, b in conn.transcript
    ]
    r2 = decode(tampered, keys)
    assert r2.session.status.startswith("failed")
    strings += texts(r2.session, keys)
    gapped = [("gap", d, len(b)) if d == "s2c" and len(b) > 9000 else (d, b) for d, b in conn.transcript]
    strings += texts(decode(gapped, keys).session, keys)
    # exceptions: a record that does not open, with its traceback; key logs refused
    op = r.session.sides["s2c"].opener
    try:
        op.open(0, 23, 0x0303, b"\x00" * 64)
    except BadRecord as e:
        strings += [str(e), repr(e), "".join(traceback.format_exception(e))]
    os.chmod(conn.keylog, 0o644)
    try:
        load(conn.keylog)
    except KeyLogError as e:
        strings += [str(e), "".join(traceback.format_exception(e))]
    strings.append(caplog.text)
    assert not leaks(strings, secrets)


def test_the_scan_finds_what_it_looks_for(tmp_path):
    """The scan is not blind: a key written in any of the forms it checks is found."""
    conn = connect(tmp_path, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", exchange=[])
    keys = load(conn.keylog, force=True)
    master = keys.secrets()[0]
    import base64

    for shown in (master.hex(), master.hex().upper(), base64.b64encode(master).decode(), repr(master)):
        assert leaks([f"x {shown} y"], [master])
    assert not leaks([repr(RecordStream()), "nothing"], [master])
