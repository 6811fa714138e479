"""TLS wired into the stream driver, through `streams.decode_files` (the Spark-free decode):

- tests/data/tls/tls.pcap (five real OpenSSL connections, four in keys.log): one streams row per
  connection with its version, cipher, SNI, ALPN and `tls_decrypted`, yes or no key;
- tests/data/tls/kafka_<run>_*.pcap (tests/support/make_tls_kafka.py): real kafka-python runs
  and a confluent-kafka (librdkafka) run over TLS through a TLS-terminating proxy in front of
  librdkafka's mock broker, and
  pulsar_tls13_*.pcap and iggy_tls13_*.pcap (make_tls_sims.py): the real pulsar-client over
  `pulsar+ssl://` and apache-iggy over TLS through the same proxy in front of the project's
  simulators, each captured on both legs: with the key log (kafka-python's own, the proxy's for
  librdkafka, Pulsar and Iggy) the TLS leg gives exactly the clear leg's
  commands, messages, latencies and acks (apart from ports and times); without keys, a streams
  row per connection and nothing else;
- the key logs' secrets in no row and no log line.
"""

from __future__ import annotations

import logging
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from scapy.layers.inet import TCP
from scapy.utils import rdpcap

from brokerscope import tables
from brokerscope.config import Settings
from brokerscope.streams import decode_files
from brokerscope.tls import load
from tests.unit.tls.legs import (
    COMPARED,
    DATA,
    NO_KEY_PORT,
    RUNS,
    SENT,
    assert_same_exchange,
    decode,
    keys_without,
    private_copy,
    without_leg,
)
from tests.unit.tls.test_tls_secrets import forms


def test_tls_capture_streams_rows(tmp_path):
    out = decode("tls.pcap", [private_copy(tmp_path, "keys.log")])
    rows = {r["client_port"]: r for r in out["streams"]}
    assert sorted(rows) == sorted(SENT)
    for port, (version, cipher, c2s, s2c) in SENT.items():
        r = rows[port]
        assert (r["tls_version"], r["tls_cipher"], r["tls_sni"]) == (version, cipher, "broker.test")
        assert r["tls_decrypted"] == ("no key" if port == NO_KEY_PORT else "yes")
        # TLS 1.3 chooses ALPN in EncryptedExtensions: known only when decrypted
        assert r["tls_alpn"] == (None if port == NO_KEY_PORT else "kafka")
        sent = (0, 0) if port == NO_KEY_PORT else (c2s, s2c)
        assert (r["tls_c2s_bytes"], r["tls_s2c_bytes"]) == sent
        assert r["server_port"] == 9093 and r["roles_by"] == "syn"
    # the plaintext is random bytes: no protocol, no rows of ciphertext or plaintext
    assert {r["protocol"] for r in out["streams"]} == {"unknown"}
    assert all(not out[t] for t in COMPARED)


def test_tls_capture_without_keys(tmp_path):
    out = decode("tls.pcap", [])
    assert [r["tls_decrypted"] for r in out["streams"]] == ["no key"] * 5
    assert {(r["tls_c2s_bytes"], r["tls_s2c_bytes"]) for r in out["streams"]} == {(0, 0)}
    assert all(r["tls_sni"] == "broker.test" and r["tls_version"] for r in out["streams"])
    assert all(not out[t] for t in COMPARED)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_over_tls_equals_clear(tmp_path, run):
    keys = private_copy(tmp_path, f"{run}_keys.log")
    clear = decode(f"{run}_clear.pcap", [])
    tls = decode(f"{run}_tls.pcap", [keys])
    assert clear["messages"] and clear["acks"]
    assert_same_exchange(tls, clear)  # also: the frames counted are the plaintext's, as in clear
    protocol, version, cipher, n = RUNS[run]
    assert len(tls["streams"]) == len(clear["streams"]) == n
    for r in tls["streams"]:
        assert (r["protocol"], r["detected_by"]) == (protocol, "content")  # sniffed on the plaintext
        assert (r["tls_version"], r["tls_cipher"], r["tls_decrypted"]) == (version, cipher, "yes")
    # a decrypted row names the packets of its own connection and direction that carried its
    # records (plaintext comes out with the packet that completes a record)
    pkts = rdpcap(str(DATA / f"{run}_tls.pcap"))
    for r in tls["commands"] + tls["messages"]:
        assert 1 <= r["first_frame"] <= r["last_frame"] <= len(pkts), r
        sender = r["client_port"] if r["direction"] in ("c2s", "produce") else r["server_port"]
        for f in (r["first_frame"], r["last_frame"]):
            seg = pkts[f - 1][TCP]
            assert {seg.sport, seg.dport} == {r["client_port"], r["server_port"]} and len(seg.payload), r
            assert seg.sport == sender, r


@pytest.mark.parametrize("run", sorted(RUNS))
def test_over_tls_without_keys(run):
    protocol, version, cipher, n = RUNS[run]
    out = decode(f"{run}_tls.pcap", [])
    assert len(out["streams"]) == n
    assert {(r["protocol"], r["tls_decrypted"]) for r in out["streams"]} == {("unknown", "no key")}
    assert {(r["tls_version"], r["tls_cipher"]) for r in out["streams"]} == {(version, cipher)}
    assert all(not out[t] for t in COMPARED)
    # a TLS connection to a broker port is that protocol inside: the port map still applies, and
    # without keys the conversation gets nothing, so still no rows
    ports = sorted({r["server_port"] for r in out["streams"]})
    out = decode(f"{run}_tls.pcap", [], ports={protocol: ports})
    assert {(r["protocol"], r["detected_by"]) for r in out["streams"]} == {(protocol, "port")}
    assert all(not out[t] for t in COMPARED)


def test_a_key_log_that_misses_some_connections(tmp_path):
    """librdkafka's run with the keys of its producer's broker connection and of its commit's
    connection taken out: those two are streams rows with no key and nothing else, the other
    three decode to the clear leg's rows of the same connections (their Metadata still names
    the topic of the consumer's Fetch, which asks by topic id)."""
    keylog, dropped, kept = keys_without(tmp_path, "kafka_librdkafka", {1, 4})
    tls = decode("kafka_librdkafka_tls.pcap", [keylog])
    clear = decode("kafka_librdkafka_clear.pcap", [])
    rows = {r["client_port"]: r for r in tls["streams"]}
    assert {p for p, r in rows.items() if r["tls_decrypted"] != "yes"} == dropped
    for p in dropped:
        r = rows[p]
        assert (r["tls_decrypted"], r["protocol"], r["tls_c2s_bytes"], r["tls_s2c_bytes"]) == (
            "no key",
            "unknown",
            0,
            0,
        )
        assert r["tls_version"] == "TLS 1.3" and r["c2s_bytes"] > 0
    assert all(r["client_port"] not in dropped for t in COMPARED for r in tls[t])
    for t in COMPARED:
        assert without_leg(tls[t]) == without_leg([r for r in clear[t] if r["client_port"] in kept]), t
    # the produced messages and every ack were on the connections without keys
    assert {(r["direction"], r["topic"]) for r in tls["messages"]} == {("deliver", "tls-orders")}
    assert clear["acks"] and not tls["acks"]


def test_a_key_log_with_handshake_secrets_only_is_no_yes(tmp_path):
    """TLS 1.3 keys without the application traffic secrets (a key log cut or filtered): the
    handshake opens, the application data does not; tls_decrypted said "yes" with nothing
    decrypted (found by a user trial). It says why it failed, and the full log still says yes."""
    full = Path(private_copy(tmp_path, "kafka_tls13_keys.log"))
    part = tmp_path / "handshake_only.log"
    part.write_text("".join(ln for ln in full.read_text().splitlines(True) if "TRAFFIC_SECRET_0" not in ln))
    part.chmod(0o600)
    got = decode("kafka_tls13_tls.pcap", [str(part)])["streams"]
    assert got and all(
        r["tls_decrypted"].startswith("failed: no application data decrypted (")
        and r["tls_decrypted"].endswith(" records without their keys)")
        and r["tls_c2s_bytes"] == r["tls_s2c_bytes"] == 0
        for r in got
    ), [r["tls_decrypted"] for r in got]
    assert {r["tls_decrypted"] for r in decode("kafka_tls13_tls.pcap", [str(full)])["streams"]} == {"yes"}


def test_decrypted_logins_are_redacted_as_in_clear(tmp_path):
    """The Iggy session logs in with a password: decrypted, its frame is redacted as in clear."""
    out = decode("iggy_tls13_tls.pcap", [private_copy(tmp_path, "iggy_tls13_keys.log")])
    login = [r for r in out["commands"] if r["command"] == "LOGIN_REGISTER"]
    assert login and all(r["decode_status"] == "ok" for r in login)
    assert any('"password":"<redacted 16 bytes>"' in (r["details"] or "") for r in login)
    rows = "\n".join(repr(r) for t in tables.DECODED_TABLES for r in out[t])
    for form in (b"s3cret-sample-pw", b"s3cret-sample-pw".hex().encode()):
        assert form.decode() not in rows


def test_kafka_over_tls_on_a_kafka_port(tmp_path):
    """With keys and the port in the map: detected by port, the same rows as the clear leg."""
    keys = private_copy(tmp_path, "kafka_tls13_keys.log")
    port = decode("kafka_tls13_tls.pcap", [])["streams"][0]["server_port"]
    tls = decode("kafka_tls13_tls.pcap", [keys], ports={"kafka": [port]})
    assert {r["detected_by"] for r in tls["streams"]} == {"port"}
    clear = decode("kafka_tls13_clear.pcap", [])
    for t in COMPARED:
        assert without_leg(tls[t]) == without_leg(clear[t]), t


def leaks(texts: list[str], secrets: list[bytes]) -> list[str]:
    """test_tls_secrets.leaks's forms of every secret (raw, hex, UTF-16, base64, bytes repr
    pieces), looked up all at once: per form length, every window of the text in a set."""
    by_len: dict[int, set[bytes]] = {}
    for sec in secrets:
        for f in forms(sec):
            by_len.setdefault(len(f), set()).add(f)
    found = []
    for text in texts:
        for blob in {text.encode("utf-8", "surrogateescape"), text.encode("latin-1", "replace")}:
            for n, pats in by_len.items():
                hit = next(
                    (blob[i : i + n] for i in range(len(blob) - n + 1) if blob[i : i + n] in pats), None
                )
                if hit is not None:
                    found.append(f"key material in {text[:80]!r}")
    return found


def test_the_scan_finds_a_key():
    sec = bytes(range(40, 88))
    assert leaks([f"x {sec.hex()} y", "nothing here"], [sec]) and leaks([repr(sec)], [sec])
    assert not leaks(["nothing here"], [sec])


def test_no_key_in_any_row_or_log_line(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    files = [private_copy(tmp_path, n) for n in ("keys.log", *(f"{run}_keys.log" for run in RUNS))]
    secrets = load(files).secrets()
    assert len(secrets) > 20
    texts = [repr(Settings.load(overrides={"tls": {"keylog_files": files}}))]
    for pcap in ("tls.pcap", *(f"{run}_tls.pcap" for run in RUNS)):
        out = decode(pcap, files)
        assert any(r["tls_decrypted"] == "yes" for r in out["streams"])
        for t in tables.DECODED_TABLES:
            texts += [repr(r) for r in out[t]]
        texts += [repr(out["_capture_stats"]), repr(out["_errors"])]
    texts += [r.getMessage() for r in caplog.records] + [caplog.text]
    texts = ["\n".join(texts)]  # one scan
    assert leaks(texts, secrets) == []


def dsb(text: bytes) -> bytes:
    """A little-endian pcapng Decryption Secrets Block holding NSS key log text (TLSK)."""
    body = struct.pack("<II", 0x544C534B, len(text)) + text + b"\0" * (-len(text) % 4)
    n = 12 + len(body)
    return struct.pack("<II", 10, n) + body + struct.pack("<I", n)


def with_secrets_at_end(tmp_path: Path) -> Path:
    """tls.pcap as pcapng (editcap) with the key log in a Decryption Secrets Block after the
    packets it decrypts (editcap --inject-secrets puts it first)."""
    ng = tmp_path / "tls.pcapng"
    subprocess.run(["editcap", "-F", "pcapng", str(DATA / "tls.pcap"), str(ng)], check=True)
    with open(ng, "ab") as fh:
        fh.write(dsb((DATA / "keys.log").read_bytes()))
    return ng


needs_editcap = pytest.mark.skipif(
    shutil.which("editcap") is None, reason="editcap (wireshark-common) not installed"
)


@needs_editcap
def test_keys_from_decryption_secrets_blocks(tmp_path):
    first = tmp_path / "injected.pcapng"
    subprocess.run(
        ["editcap", "--inject-secrets", f"tls,{DATA / 'keys.log'}", str(DATA / "tls.pcap"), str(first)],
        check=True,
    )
    for ng in (first, with_secrets_at_end(tmp_path)):
        out = decode_files([str(ng)], Settings.load())
        got = sorted((r["client_port"], r["tls_decrypted"]) for r in out["streams"])
        assert got == [(p, "no key" if p == NO_KEY_PORT else "yes") for p in sorted(SENT)], ng.name
        assert all(not out[t] for t in COMPARED)
        assert leaks(["\n".join(repr(r) for t in tables.DECODED_TABLES for r in out[t])], load_text()) == []


def load_text() -> list[bytes]:
    from brokerscope.tls import KeyLog

    k = KeyLog()
    k.add_text((DATA / "keys.log").read_bytes())
    return k.secrets()


def frames(src: Path, dst: Path, first: int, last: int = 1 << 30) -> Path:
    """Copy records `first`..`last` (1-based, as editcap -r counts) of a pcap."""
    data = src.read_bytes()
    out, at, no = [data[:24]], 24, 0
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    while at + 16 <= len(data):
        n = struct.unpack_from(endian + "I", data, at + 8)[0]
        no += 1
        if first <= no <= last:
            out.append(data[at : at + 16 + n])
        at += 16 + n
    dst.write_bytes(b"".join(out))
    return dst


@pytest.mark.parametrize("first", [40, 90, 120, 140])
def test_kafka_over_tls_captured_after_the_handshake(tmp_path, first):
    """Long-lived broker connections start before the capture: their records are recognised
    (no ClientHello, so no key), and their ciphertext is not decoded as Kafka, even on a Kafka port."""
    port = decode("kafka_tls13_tls.pcap", [])["streams"][0]["server_port"]
    cut = frames(DATA / "kafka_tls13_tls.pcap", tmp_path / "cut.pcap", first)
    for ports in ({}, {"kafka": [port]}):
        out = decode_files([str(cut)], Settings.load(overrides={"ports": ports}))
        assert all(not out[t] for t in COMPARED), ports
        midstream = [r for r in out["streams"] if r["midstream"] and r["c2s_bytes"] + r["s2c_bytes"]]
        assert midstream and all(r["tls_decrypted"] == "no key" for r in midstream)
        assert all(r["protocol"] == ("kafka" if ports else "unknown") for r in out["streams"])


def test_a_client_hello_without_answer(tmp_path):
    """Detection at the connection's end (the server never answered): TLS, its SNI, no key."""
    cut = frames(DATA / "tls.pcap", tmp_path / "hello.pcap", 1, 5)
    out = decode_files([str(cut)], Settings.load())
    [row] = out["streams"]
    assert (row["protocol"], row["tls_sni"], row["tls_version"], row["tls_decrypted"]) == (
        "unknown",
        "broker.test",
        None,
        "no key",
    )
