"""Content detection: Kafka is recognised from its first request on any port."""

from __future__ import annotations

import struct

from brokerscope.protocols import base

from .test_kafka_conversation import APIVERSIONS_V0_RDKAFKA, PRODUCE_V2_REQ, PRODUCE_V9_REQ, PRODUCE_V9_RESP

KAFKA = base.get("kafka")


def test_full_request_scores_high():
    for req in (PRODUCE_V9_REQ, PRODUCE_V2_REQ, APIVERSIONS_V0_RDKAFKA):
        assert KAFKA.sniff(req, b"") >= 0.9


def test_header_only_scores_medium():
    assert 0.5 <= KAFKA.sniff(PRODUCE_V9_REQ[:30], b"") < 0.9


def test_rejects_other_protocols():
    for head in (
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40,  # TLS client hello
        b"\x00\x00\x00\x10\x00\x00\x00\x0c\x08\x02\x12\x08pulsar!!",  # a Pulsar-like frame
        b"SSH-2.0-OpenSSH_9.6\r\n",
        b"",
    ):
        assert KAFKA.sniff(head, b"") < 0.5, head


def test_unknown_api_key_in_client_head():
    body = struct.pack(">hhih", 4242, 0, 1, 2) + b"id"
    assert KAFKA.sniff(struct.pack(">i", len(body)) + body, b"") == 0.0


def test_binary_client_id_rejected():
    body = struct.pack(">hhih", 0, 9, 1, 4) + b"\x01\x02\x03\x04" + b"\x00" * 10
    assert KAFKA.sniff(struct.pack(">i", len(body)) + body, b"") == 0.0


def test_response_first_head_scores_low():
    assert 0 < KAFKA.sniff(b"", PRODUCE_V9_RESP) <= 0.3
    assert KAFKA.sniff(b"", PRODUCE_V9_RESP[:-3]) == 0.0  # sizes must chain to the end
    assert KAFKA.sniff(b"", b"HTTP/1.1 200 OK\r\n\r\n") == 0.0


def test_answered_but_incomplete_first_request_is_not_kafka():
    """rs.pcapng's unrelated 52127<->49363 connection: a 66-byte client head whose 'size' says
    2054 bytes, answered by the server. A broker never answers a partial request."""
    from brokerscope.streams import decode_files
    from tests.conftest import CAPTURES

    out = decode_files([str(CAPTURES / "iggy" / "rs.pcapng")])
    by_port = {r["client_port"]: r for r in out["streams"]}
    other = [r for r in out["streams"] if r["server_port"] != 8090]
    assert len(by_port) == 3 and len(other) == 2
    assert all(r["protocol"] == "unknown" and r["detected_by"] == "none" for r in other)
    assert not [r for r in out["commands"] if r["protocol"] == "kafka"]
