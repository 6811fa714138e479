"""Credentials never land in a table when a byte of the frame carrying them is damaged.

Pulsar and TubeMQ frames are protobuf without a checksum over their commands: one byte set to
another value can still parse, with the credential read as another field (a tag moved), swallowed
into the string before it (a length grown), or the body read from inside itself (an envelope
length) or as another method's message (a method id). Each transcript of tests/data/auth/ has
each bit of every byte of each chunk that carries a secret, in both directions, flipped, each
variant a connection of its own, every column scanned (tests/support/cuts.py). Setting every byte
to every value (about 260,000 variants, minutes) found one case more, kept below as bytes: a
CONNECT whose client_version swallowed auth_data (the C++ client sends no auth_method_name after
it). The bit flips found TubeMQ heartbeats whose token became a topic, a host name or a group name,
under their own method id and under others', and a register reply whose token became a config id.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from brokerscope.streams import decode_files
from tests.support import cuts, relay
from tests.unit.test_secrets_under_cuts import _port, _secrets

AUTH = Path(__file__).resolve().parents[1] / "data" / "auth"
PROTOBUF = sorted(p for p in AUTH.glob("*.json") if p.stem.split("_")[0] in ("pulsar", "tubemq"))
BITS = tuple(1 << k for k in range(8))


def _variants(data: bytes) -> list[tuple[int, int]]:
    """(position, value) of each damaged byte to try in a chunk: each bit of every byte."""
    return [(i, data[i] ^ b) for i in range(len(data)) for b in BITS]


@pytest.mark.slow
@pytest.mark.parametrize("path", PROTOBUF, ids=lambda p: p.stem)
def test_no_secret_when_a_byte_of_a_credential_frame_is_damaged(path, tmp_path):
    doc = relay.load(str(path))
    secrets = _secrets(doc)
    tried = 0
    for i, conn in enumerate(doc["connections"]):
        variants = []
        for c, (d, data) in enumerate(conn):
            if not any(s in data for s in secrets.values()):
                continue
            for at, v in _variants(data):
                damaged = data[:at] + bytes([v]) + data[at + 1 :]
                variants.append((cuts.packets([*conn[:c], (d, damaged), *conn[c + 1 :]], 1448), True, True))
        for start in range(0, len(variants), 40000):  # client ports from 20000 up
            pcap = tmp_path / f"damaged{i}-{start}.pcap"
            cuts.write(str(pcap), variants[start : start + 40000], _port(doc, i))
            out = decode_files([str(pcap)])
            assert cuts.leaks(out, secrets) == []
        tried += len(variants)
    assert tried > 500


def test_no_secret_when_a_pulsar_client_version_swallows_the_auth_data(tmp_path):
    """The C++ client's CONNECT: client_version (17 bytes, its length at byte 13) then auth_data
    (field 3, 26 bytes), protocol_version, auth_method_name "basic"; the length set to 54 makes
    client_version run over auth_data and the auth method's name, the frame still parsing."""
    doc = relay.load(str(AUTH / "pulsar_basic.json"))
    conn = doc["connections"][0]
    (c,) = [c for c, (d, data) in enumerate(conn) if d == "c2s" and b"Pulsar-CPP" in data]
    data = conn[c][1]
    assert data[13:14] == b"\x11" and data[14:31] == b"Pulsar-CPP-v4.2.0" and data[31] == 0x1A
    damaged = data[:13] + bytes([54]) + data[14:]
    pcap = tmp_path / "swallow.pcap"
    cuts.write(
        str(pcap), [(cuts.packets([*conn[:c], ("c2s", damaged), *conn[c + 1 :]], 1448), True, True)], 6650
    )
    out = decode_files([str(pcap)])
    assert cuts.leaks(out, _secrets(doc)) == []
    (connect,) = [r for r in out["commands"] if r["command"] == "CONNECT"]
    assert connect["decode_status"] == "malformed" and connect["client_id"] is None
    assert (
        connect["decode_error"]
        == "CONNECT seems damaged (client_version is not text): none of its fields kept"
    )
