"""Credentials and payloads where a decoder keeps bytes no spec names: valid frames a user trial
wrote (a Kafka SaslAuthenticate with an unknown tagged field or trailing bytes, a header's tagged
field, a cut AlterUserScramCredentials; TubeMQ authentication and message bodies under method ids
without a message definition). None of their bytes may reach a table, in any form."""

from __future__ import annotations

import json
import struct

import pytest

from brokerscope.config import Settings
from brokerscope.protocols.tubemq.gen import tubemq_broker_pb2 as brk
from brokerscope.protocols.tubemq.gen import tubemq_master_pb2 as mst
from brokerscope.protocols.tubemq.gen import tubemq_rpc_pb2 as rpc
from brokerscope.streams import decode_files
from tests.support import cuts
from tests.support.tubemq_sim import _delim, pack_frame

PW1, PW2, PW3, PW4 = (
    b"Qk7pLm2xZr9tKw4nB8sd",
    b"Hs8NqM5tVb3zPx7cW2hY",
    b"Yk2wHs8NqM5tVb3zQ3Pw",
    b"Ts4vB9nXq2Lm7Rc5Wz8K",
)
SIG, TOKEN = "SIGq7XvK2mLp9RtZ4wN8bHc3sYf6Dg=", "TOKAx6Jq9Wm3Tz7Kr2Vn5LsEu4Y"
PAYLOAD = b"BINARYPAYLOAD_SECRET_VALUE_0123456789"


def _i16(v: int) -> bytes:
    return struct.pack(">h", v)


def _i32(v: int) -> bytes:
    return struct.pack(">i", v)


def _uvar(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def _request(key: int, ver: int, corr: int, body: bytes, header_tags: bytes | None = None) -> bytes:
    """A Kafka request frame: header v1 (client id), or v2 when `header_tags` (its tagged fields)."""
    head = _i16(key) + _i16(ver) + _i32(corr) + _i16(6) + b"trial1"
    if header_tags is not None:
        head += header_tags
    return _i32(len(head) + len(body)) + head + body


def _response(corr: int, body: bytes, flexible: bool = False) -> bytes:
    f = _i32(corr) + (b"\x00" if flexible else b"") + body
    return _i32(len(f)) + f


def _kafka_conn() -> list[tuple[str, bytes]]:
    tagged = b"\x00bob\x00" + PW2  # a second credential in tagged field 7 of the body
    carol = b"\x00carol\x00" + PW3
    salted = PW4 + b"\x01" * 12
    ok_v2 = _i16(0) + _uvar(0) + _uvar(1) + struct.pack(">q", 0) + b"\x00"
    return [
        ("c2s", _request(18, 0, 1, b"")),
        ("s2c", _response(1, _i16(0) + _i32(0))),
        ("c2s", _request(17, 1, 2, _i16(5) + b"PLAIN")),
        ("s2c", _response(2, _i16(0) + _i32(1) + _i16(5) + b"PLAIN")),
        # SaslAuthenticate v2: AuthBytes, then a tagged field no spec names
        (
            "c2s",
            _request(
                36,
                2,
                3,
                _uvar(len(b"\x00alice\x00" + PW1) + 1) + b"\x00alice\x00" + PW1 + _uvar(1) + _uvar(7)
                + _uvar(len(tagged)) + tagged,
                header_tags=b"\x00",
            ),
        ),
        ("s2c", _response(3, ok_v2, flexible=True)),
        # SaslAuthenticate v1 whose AuthBytes length leaves the password as trailing bytes
        ("c2s", _request(36, 1, 4, _i32(len(carol) - len(PW3)) + carol)),
        ("s2c", _response(4, _i16(0) + _i16(-1) + _i32(0) + struct.pack(">q", 0))),
        # SaslAuthenticate v2 with the credential in a tagged field of the request header
        ("c2s", _request(36, 2, 5, _uvar(1) + b"\x00", header_tags=_uvar(1) + _uvar(3) + _uvar(20) + PW1)),
        ("s2c", _response(5, ok_v2, flexible=True)),
        # AlterUserScramCredentials v0 cut inside its SaltedPassword: truncated, and no `raw`
        (
            "c2s",
            _request(
                51,
                0,
                6,
                _uvar(1) + _uvar(2) + _uvar(6) + b"alice" + b"\x01" + _i32(4096) + _uvar(5) + b"salt"
                + _uvar(64) + salted,
                header_tags=b"\x00",
            ),
        ),
    ]  # fmt: skip


def _tubemq_request(serial: int, method: int, body: bytes) -> bytes:
    content = (
        _delim(rpc.RpcConnHeader(flag=0))
        + _delim(rpc.RequestHeader(serviceType=1, protocolVer=2))
        + _delim(rpc.RequestBody(method=method, timeout=10000, request=body))
    )
    return pack_frame(serial, content)


def _tubemq_conn() -> list[tuple[str, bytes]]:
    auth = mst.MasterCertificateInfo(
        authInfo=mst.AuthenticateInfo(userName="tubeadmin", timestamp=1, nonce=7, signature=SIG),
        authorizedToken=TOKEN,
    )
    heartbeat = mst.HeartRequestP2M(
        clientId="p1", brokerCheckSum=1, hostName="h", topicList=["t"], authInfo=auth
    )
    send = brk.SendMessageRequestP2B(clientId="p1", topicName="t", partitionId=0, data=PAYLOAD, flag=0)
    hb, msg = heartbeat.SerializeToString(), send.SerializeToString()
    # 11, 12, 14, 19: ids TubeMQ reserves without a message; 40: no such id
    reqs = [_tubemq_request(i + 1, m, hb) for i, m in enumerate((11, 12, 14, 19, 40))]
    reqs += [_tubemq_request(9, 14, msg), _tubemq_request(10, 40, msg)]
    return [("c2s", r) for r in reqs]


SECRETS = {
    "PW1": PW1,
    "PW2": PW2,
    "PW3": PW3,
    "PW4": PW4,
    "signature": SIG.encode(),
    "token": TOKEN.encode(),
}


@pytest.mark.parametrize("payload", ["keep", "drop"])
def test_bytes_no_spec_names_keep_no_credential_and_follow_the_payload_policy(tmp_path, payload):
    pcap = tmp_path / "odd.pcap"
    conns = [
        (cuts.packets(_kafka_conn(), 1448), True, True),
        (cuts.packets(_tubemq_conn(), 1448), True, True),
    ]
    cuts.write(str(pcap), conns, [9092, 8715])
    out = decode_files([str(pcap)], Settings.load(overrides={"payload": {"policy": payload}}))
    kafka = [r for r in out["commands"] if r["protocol"] == "kafka" and r["direction"] == "c2s"]
    assert [(r["command"], r["decode_status"]) for r in kafka] == [
        ("ApiVersions", "ok"),
        ("SaslHandshake", "ok"),
        ("SaslAuthenticate", "ok"),
        ("SaslAuthenticate", "ok"),
        ("SaslAuthenticate", "ok"),
        ("AlterUserScramCredentials", "truncated"),
    ]
    auth = [json.loads(r["details"]) for r in kafka[2:5]]
    assert auth[0]["_unknown_tagged_fields"] == {"7": {"size": 25}}  # sizes, where base64 was
    assert auth[1]["_trailing_bytes"] == {"size": 20}
    assert auth[2]["_header"]["tagged"] == {"_unknown_tagged_fields": {"3": {"size": 20}}}
    assert kafka[5]["raw"] is None
    tubemq = [r for r in out["commands"] if r["protocol"] == "tubemq"]
    assert len(tubemq) == 7 and all(r["raw"] is None for r in tubemq)
    fields = json.loads(tubemq[1]["details"])["request"]["fields"]
    assert fields["5"] == [{"size": len(mst.MasterCertificateInfo(authInfo=mst.AuthenticateInfo(
        userName="tubeadmin", timestamp=1, nonce=7, signature=SIG), authorizedToken=TOKEN).SerializeToString())}]  # fmt: skip
    secrets = SECRETS if payload == "keep" else {**SECRETS, "payload": PAYLOAD}
    tabs = {t: out[t] for t in ("commands", "messages", "latencies", "acks", "streams")}
    assert cuts.leaks(tabs, secrets) == []
