"""Gaps in a TLS stream and records that fail authentication: statuses and gap events, never
an exception, and decryption resuming wherever the record sequence number can be had."""

from __future__ import annotations

import struct

import pytest

from brokerscope.tls import FAILED, YES, load
from brokerscope.tls.record import HEADER_LEN

from .kit import BIG, SUITES, connect, decode

# one suite per way of protecting records
KINDS = [
    "TLS_AES_128_GCM_SHA256",  # TLS 1.3: trial of the sequence numbers the gap allows
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",  # TLS 1.2 GCM: the explicit nonce is the sequence number
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",  # TLS 1.2 ChaCha20: trial
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256 mte",  # CBC: trial of the MAC's sequence number
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256 etm",
]
EXCHANGE = [("c2s", b"hello"), ("s2c", b"welcome"), ("c2s", BIG), ("s2c", b"done"), ("c2s", b"tail")]


def records(stream: bytes) -> list[tuple[int, int, int]]:
    """(offset, type, body length) of every record of a direction's stream."""
    out, at = [], 0
    while at + HEADER_LEN <= len(stream):
        t, _v, n = struct.unpack_from("!BHH", stream, at)
        out.append((at, t, n))
        at += HEADER_LEN + n
    return out


def big_records(conn) -> list[tuple[int, int, int]]:
    """The three records of BIG in the client's stream (16,384 + 16,384 + 8,192 bytes of it)."""
    recs = [r for r in records(conn.stream("c2s")) if r[1] == 23 and r[2] > 8000]
    assert len(recs) == 3
    return recs


def split(conn, cut: list[tuple[int, int]]) -> list:
    """The transcript with the client's stream bytes [a, b) of each cut replaced by a gap."""
    out, at = [], 0
    for d, b in conn.transcript:
        if d != "c2s":
            out.append((d, b))
            continue
        start, end = at, at + len(b)
        at = end
        pos = start
        for a, z in cut:
            if a >= end or z <= pos:
                continue
            if a > pos:
                out.append(("c2s", b[pos - start : a - start]))
            out.append(("gap", "c2s", min(z, end) - max(a, pos)))
            pos = min(z, end)
        if pos < end:
            out.append(("c2s", b[pos - start :]))
    return out


@pytest.mark.parametrize("name", KINDS)
def test_gap_inside_one_record_keeps_step(tmp_path, name):
    """A gap that ends inside the record whose header was read: that record's plaintext is one
    gap event of its size; the sequence number is kept, and the rest decrypts."""
    conn = connect(tmp_path, name, exchange=EXCHANGE)
    (o1, _t, n1), _r2, _r3 = big_records(conn)
    r = decode(split(conn, [(o1 + 100, o1 + 300)]), keylog=conn.keylog)
    sent = conn.sent["c2s"]
    head = sent.index(BIG)
    assert r.plain("c2s") == sent[:head] + sent[head + 16384 :]
    gap = r.gaps("c2s")
    assert len(gap) == 1 and 16384 <= gap[0] <= 16384 + 15  # exact but for CBC padding
    if SUITES[name][1] is None or "GCM" in name or "CHACHA" in name:
        assert gap[0] == 16384
    assert r.plain("s2c") == conn.sent["s2c"]
    assert r.session.status == YES
    assert r.session.counters()["c2s"]["lost"] == 1


@pytest.mark.parametrize("name", KINDS)
def test_gap_across_records_resyncs_and_resumes(tmp_path, name):
    """A gap from inside BIG's first record to inside its second: the stream is out of step, the
    hunt finds the third record, and decryption resumes there with the sequence number found."""
    conn = connect(tmp_path, name, exchange=EXCHANGE)
    (o1, _t, _n1), (o2, _t2, _n2), _r3 = big_records(conn)
    r = decode(split(conn, [(o1 + 50, o2 + 70)]), keylog=conn.keylog)
    sent = conn.sent["c2s"]
    head = sent.index(BIG)
    assert r.plain("c2s") == sent[:head] + sent[head + 2 * 16384 :]
    assert r.session.status == YES, r.session.status
    c = r.session.counters()["c2s"]
    assert c["resyncs"] == 1 and c["failed"] == 0 and c["lost"] == 2
    gap = r.gaps("c2s")
    assert len(gap) == 1 and 2 * 16384 <= gap[0] <= 2 * (16384 + 15)
    if "CBC" not in name:  # exact: the number of records lost is known once one opens
        assert gap[0] == 2 * 16384


def test_gap_of_unbelievable_size_stops_decryption_with_a_status(tmp_path):
    """A gap whose size rules out the true sequence number: no record opens, and after
    MAX_TRIAL_RECORDS of them the direction stops, said in `decrypted`; gaps stand in for the
    plaintext, nothing raises."""
    exchange = [("c2s", b"start")] + [("c2s", b"message %d" % i) for i in range(12)]
    conn = connect(tmp_path, "TLS_CHACHA20_POLY1305_SHA256", exchange=exchange)
    chunks = list(conn.transcript)
    i = next(k for k, (d, b) in enumerate(chunks) if d == "c2s" and b"" != b and k > 3 and b[0] == 23)
    chunks.insert(i + 2, ("gap", "c2s", 50_000_000))  # a gap that did not happen: nothing removed
    r = decode(chunks, keylog=conn.keylog)
    s = r.session
    assert s.decrypted == FAILED
    assert "sequence number is unknown after a gap" in s.status and "(c2s)" in s.status
    assert r.plain("s2c") == conn.sent["s2c"]
    assert r.gaps("c2s")


@pytest.mark.parametrize("name", KINDS)
def test_tampered_record_fails_with_a_reason(tmp_path, name):
    """One byte of BIG's second record changed on the wire: that record is a gap, the session says
    failed and why, and the records after it still decrypt."""
    conn = connect(tmp_path, name, exchange=EXCHANGE)
    _r1, (o2, _t, n2), _r3 = big_records(conn)
    at = o2 + HEADER_LEN + n2 // 2
    out, pos = [], 0
    for d, b in conn.transcript:
        if d == "c2s" and pos <= at < pos + len(b):
            b = b[: at - pos] + bytes([b[at - pos] ^ 0x40]) + b[at - pos + 1 :]
        if d == "c2s":
            pos += len(b)
        out.append((d, b))
    r = decode(out, keylog=conn.keylog)
    s = r.session
    assert s.decrypted == FAILED
    assert s.status.startswith("failed: ") and "(c2s record " in s.status
    assert any(w in s.status for w in ("authentication failed", "bad CBC padding"))
    sent = conn.sent["c2s"]
    head = sent.index(BIG)
    assert r.plain("c2s") == sent[: head + 16384] + sent[head + 2 * 16384 :]
    assert r.plain("s2c") == conn.sent["s2c"]
    assert s.counters()["c2s"]["failed"] == 1
    assert 16384 <= r.gaps("c2s")[0] <= 16384 + 15


@pytest.mark.parametrize("name", KINDS)
def test_record_too_short_for_plaintext_is_no_gap(tmp_path, name):
    """The client's last record ("tail") replaced on the wire by one whose 5-byte body cannot
    hold a protected record of the suite: failed, and no gap event (it lost no plaintext; a gap
    of 0 bytes inside a frame makes a decoder give the frame up)."""
    conn = connect(tmp_path, name, exchange=EXCHANGE)
    recs = records(conn.stream("c2s"))
    o, _t, n = recs[recs.index(big_records(conn)[-1]) + 1]
    out, pos = [], 0
    for d, b in conn.transcript:
        if d == "c2s":
            k, pos = o - pos, pos + len(b)
            if 0 <= k < len(b):
                b = b[:k] + b"\x17\x03\x03\x00\x05" + b"\x00" * 5 + b[k + HEADER_LEN + n :]
        out.append((d, b))
    r = decode(out, keylog=conn.keylog)
    assert r.session.decrypted == FAILED, r.session.status
    assert r.gaps("c2s") == []
    assert r.plain("c2s") == conn.sent["c2s"][: -len(b"tail")]
    assert r.plain("s2c") == conn.sent["s2c"]


def test_gap_in_the_handshake_loses_the_keys_not_the_session(tmp_path):
    """The ClientHello is not captured: the session cannot name its keys (no key), and says so."""
    conn = connect(tmp_path, "TLS_AES_128_GCM_SHA256", exchange=EXCHANGE)
    first = conn.transcript[0]
    assert first[0] == "c2s"
    chunks = [("gap", "c2s", len(first[1]))] + list(conn.transcript[1:])
    r = decode(chunks, keylog=conn.keylog)
    assert r.events == []
    assert r.session.status == "no key" and r.session.reason == "no ClientHello captured"
    assert r.session.cipher == "TLS_AES_128_GCM_SHA256"  # the ServerHello still names it


def test_garbage_is_not_tls(tmp_path):
    """Bytes that are no record stream: no events, no exception."""
    r = decode([("c2s", bytes(range(256)) * 50), ("s2c", b"\x00" * 3000), ("gap", "c2s", 10)], keylog=None)
    assert r.events == []
    assert r.session.version is None and r.session.status == "no key"
    load  # noqa: B018 - imported for the fixtures' key logs


@pytest.mark.parametrize("cut, events", [(3, []), (100, [16384]), (20000, [16384, 16384])])
def test_capture_ending_inside_a_record(tmp_path, cut, events):
    """The capture ends `cut` bytes into BIG's records: a whole record decrypts, the record the
    end cuts is a gap of its plaintext size at close, a cut header is nothing."""
    conn = connect(tmp_path, "TLS_AES_128_GCM_SHA256", exchange=[("c2s", b"a"), ("c2s", BIG)])
    t = list(conn.transcript)
    i = max(k for k, (d, b) in enumerate(t) if d == "c2s" and len(b) > 30000)
    r = decode(t[:i] + [("c2s", t[i][1][:cut])], keylog=conn.keylog)
    sizes = [len(e[2]) if e[0] == "data" else e[2] for e in r.events if e[1] == "c2s"][1:]
    kinds = [e[0] for e in r.events if e[1] == "c2s"][1:]
    assert sizes == events and kinds == ["data"] * (len(events) - 1) + ["gap"] * (len(events) > 0)
    assert r.session.status == YES
