"""Credentials never land in a table however a capture cuts the authentication exchange.

Real clients authenticated through tests/support/relay.py (tests/support/make_auth_kafka.py,
make_auth_others.py wrote tests/data/auth/). Each recorded connection is cut into small packets and
every cut is decoded: the capture starting at every packet (mid-stream, no handshake) and ending at
every packet, with both directions, the client's only and the server's only. Every column of every
table is scanned for each secret in clear, hex, UTF-16 and base64, JSON opened up, and the `raw`
pieces of each connection joined in stream order (tests/support/cuts.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from brokerscope import tables
from brokerscope.streams import decode_files
from tests.support import cuts, relay

AUTH = Path(__file__).resolve().parents[1] / "data" / "auth"
TRANSCRIPTS = sorted(AUTH.glob("*.json"))
DEFAULT_PORTS = {"kafka": 9092, "pulsar": 6650, "iggy": 8090, "tubemq": 8123}
SEG, FINE = 40, 7  # packet sizes: every frame header is cut somewhere, every credential often


def _port(doc: dict, i: int) -> int:
    ports = doc.get("ports")
    if ports:
        return ports[i]
    return doc.get("default_port") or DEFAULT_PORTS[doc["protocol"]]


def _secrets(doc: dict) -> dict[str, bytes]:
    return {f"{s['label']} #{i}": bytes.fromhex(s["hex"]) for i, s in enumerate(doc["secrets"])}


def test_transcripts_are_there():
    protocols = {relay.load(str(p))["protocol"] for p in TRANSCRIPTS}
    assert {"kafka"} <= protocols, protocols


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
def test_whole_exchange_decodes_and_redacts(path, tmp_path):
    """Uncut, the authentication frames decode (so the cuts below cut real auth traffic)."""
    doc = relay.load(str(path))
    for i, conn in enumerate(doc["connections"]):
        pcap = tmp_path / f"whole{i}.pcap"
        cuts.write(str(pcap), [(conn, True, True)], _port(doc, i))
        out = decode_files([str(pcap)])
        cmds = [r for r in out["commands"] if r["protocol"] == doc["protocol"]]
        assert cmds, f"{path.name} connection {i}: nothing decoded"
        bad = [(r["command"], r["decode_status"]) for r in cmds if r["decode_status"] != "ok"]
        assert not bad, bad
        assert cuts.leaks(out, _secrets(doc)) == []


@pytest.mark.parametrize("sides", ["both", "c2s", "s2c"])
@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
def test_no_secret_under_any_cut(path, sides, tmp_path):
    doc = relay.load(str(path))
    secrets = _secrets(doc)
    problems = 0
    for i, conn in enumerate(doc["connections"]):
        pcap = tmp_path / f"cuts{i}.pcap"
        labels = cuts.cut_pcap(str(pcap), conn, _port(doc, i), sides, SEG, FINE, secrets.values())
        out = decode_files([str(pcap)])
        for name in ("commands", "messages", "latencies", "acks"):
            rows = [{k: v for k, v in r.items() if k in tables.schema(name).names} for r in out[name]]
            tables.conform(name, rows)  # every row fits the table schemas
        ports = {r["conn_id"]: r["client_port"] for r in out["streams"]}
        found = [(labels[ports[c]], t, col, s) for t, col, s, c in cuts.leaks(out, secrets)]
        assert found == [], found[:10]
        problems += sum(r["decode_status"] != "ok" for r in out["commands"])
    assert problems, "no cut produced an undecodable piece: the test would not see a leak"


def test_the_scan_sees_a_planted_secret():
    """The scanner finds a piece of a secret in raw bytes, in base64 inside JSON and in hex."""
    import base64

    secret = b"Vq7pLm2xZr9tKw4nB8sd"
    rows = [
        {"conn_id": "c1", "direction": "c2s", "stream_offset": 0, "raw": b"..." + secret[:10]},
        {"conn_id": "c1", "direction": "c2s", "stream_offset": 13, "raw": secret[10:] + b"..."},
        {"conn_id": "c2", "details": json.dumps({"x": base64.b64encode(b"ab" + secret).decode()})},
        {"conn_id": "c3", "decode_error": f"bad {secret[4:14].hex()}"},
        {"conn_id": "c4", "details": '{"x": "Vq7pLm2"}'},  # 7 bytes: below the window
    ]
    found = {(col, conn) for _t, col, _s, conn in cuts.leaks({"commands": rows}, {"pw": secret})}
    assert found == {
        ("raw", "c1"),
        ("raw joined (c2s)", "c1"),
        ("details", "c2"),
        ("decode_error", "c3"),
    }


def test_iggy_token_login_is_told_from_a_password_login(tmp_path):
    doc = relay.load(str(AUTH / "iggy_pat.json"))
    pcap = tmp_path / "pat.pcap"
    cuts.write(str(pcap), [(doc["connections"][0], True, True)], _port(doc, 0))
    out = decode_files([str(pcap)])
    (login,) = [r for r in out["commands"] if r["command"] == "LOGIN_REGISTER" and r["direction"] == "c2s"]
    details = json.loads(login["details"])
    assert details["login"] == "personal_access_token" and details["token"].startswith("<redacted")


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.stem)
def test_no_secret_when_one_byte_of_an_auth_request_head_is_damaged(path, tmp_path):
    """A user trial flipped single bytes of the authentication frames: a damaged api key made a
    SaslAuthenticate a truncated CreatePartitions whose `raw` held the password; a damaged client
    id length ran the client id into it. While a connection authenticates (SaslHandshake read, no
    request of another API decoded since) a request that does not decode keeps none of its bytes.
    Every byte of each credential-carrying request's first 40 bytes and of the 4 bytes before each
    secret (a length), XORed with 0x01 and 0x20, each variant its own connection."""
    doc = relay.load(str(path))
    secrets = _secrets(doc)
    for i, conn in enumerate(doc["connections"]):
        variants = []
        for c, (d, data) in enumerate(conn):
            starts = [data.find(s) for s in secrets.values() if d == "c2s" and s in data]
            if not starts:
                continue
            spots = set(range(min(40, len(data)))) | {
                at - k for at in starts for k in range(1, 5) if at - k >= 0
            }
            for spot in sorted(spots):
                for mask in (0x01, 0x20):
                    damaged = data[:spot] + bytes([data[spot] ^ mask]) + data[spot + 1 :]
                    variants.append(
                        (cuts.packets([*conn[:c], (d, damaged), *conn[c + 1 :]], 1448), True, True)
                    )
        if not variants:
            continue
        pcap = tmp_path / f"flips{i}.pcap"
        cuts.write(str(pcap), variants, _port(doc, i))
        out = decode_files([str(pcap)])
        assert cuts.leaks(out, secrets) == []


@pytest.mark.parametrize(
    "path", [p for p in TRANSCRIPTS if p.stem.startswith(("kafka", "librdkafka"))], ids=lambda p: p.stem
)
def test_no_secret_when_the_size_of_the_frame_before_a_credential_is_damaged(path, tmp_path):
    """The size of the client frame before each credential-carrying one made larger (+256, +4096,
    +1 MiB): it runs past the end of the connection holding the credential frames, and at the
    close frames starting inside it are read again (Framer.reread_if_cut). Neither the damaged
    frame's row nor those read after it keep credential bytes, in any column."""
    doc = relay.load(str(path))
    secrets = _secrets(doc)
    for i, conn in enumerate(doc["connections"]):
        c2s = [c for c, (d, _data) in enumerate(conn) if d == "c2s"]
        variants = []
        for before, c in zip(c2s, c2s[1:]):
            if not any(s in conn[c][1] for s in secrets.values()):
                continue
            data = conn[before][1]
            for add in (256, 4096, 1 << 20):
                size = int.from_bytes(data[:4], "big") + add
                damaged = size.to_bytes(4, "big") + data[4:]
                variants.append(
                    (cuts.packets([*conn[:before], ("c2s", damaged), *conn[before + 1 :]], 1448), True, True)
                )
        if not variants:
            continue
        pcap = tmp_path / f"sizes{i}.pcap"
        cuts.write(str(pcap), variants, _port(doc, i))
        out = decode_files([str(pcap)])
        assert cuts.leaks(out, secrets) == []
        assert any(r["decode_status"] == "malformed" for r in out["commands"])
