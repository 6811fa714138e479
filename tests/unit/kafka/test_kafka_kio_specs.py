"""APIs kafka-python lacks, decoded from specs rebuilt out of kio's schema classes (kio_specs.py).

- the rebuild is checked against every (API, version, request|response) both packages describe:
  same fields, order, types, nullability, tags and topic-name markers as the official JSON;
- real librdkafka traffic (KIP-848 consumer, KIP-714 telemetry) from sample_data/kafka/kip848.pcap;
- golden bytes, written out by hand, for ConsumerGroupHeartbeat, PushTelemetry, a delegation
  token (its HMAC redacted) and an Envelope (its forwarded request redacted).
"""

from __future__ import annotations

import json
import struct
import uuid
from pathlib import Path

import pytest

from brokerscope.protocols.kafka import kio_specs, schema
from brokerscope.protocols.kafka.schema import Versions
from brokerscope.streams import decode_files

from .kit import Driver

SAMPLES = Path(__file__).resolve().parents[3] / "sample_data" / "kafka"


def _project(fields: list[dict], v: int, structs: dict, flexible: bool) -> list[tuple]:
    """The wire layout of a spec's fields at version `v`."""
    out = []
    for f in fields:
        if v not in Versions.parse(f["versions"]):
            continue
        t = f["type"]
        base_t = t[2:] if t.startswith("[]") else t
        sub = f.get("fields") or structs.get(base_t)
        tagged = flexible and "tag" in f and v in Versions.parse(f.get("taggedVersions", f["versions"]))
        nullable = v in Versions.parse(f.get("nullableVersions")) and t not in schema._PRIMITIVES
        out.append(
            (
                f["name"].lower(),  # two official specs spell a field in lower camel case
                t,
                nullable,
                f.get("tag") if tagged else None,
                f.get("entityType") == "topicName",
                tuple(_project(sub, v, structs, flexible)) if sub else None,
            )
        )
    return out


def test_rebuilt_specs_equal_the_official_ones_where_both_exist():
    rebuilt = kio_specs.all_specs()
    official = {k: s for k, s in schema.specs().items() if s.source == "kafka-python"}
    assert len(official) >= 50
    compared, diffs = 0, []
    for key, s in official.items():
        kreq, kresp = rebuilt[key]
        kflex = Versions.parse(kreq["flexibleVersions"])
        for kind, js, ks, structs in (
            ("request", s.request, kreq, s.request_structs),
            ("response", s.response, kresp, s.response_structs),
        ):
            assert Versions.parse(ks["validVersions"]) == s.valid, (s.name, kind)
            for v in range(s.valid.lo, s.valid.hi + 1):
                compared += 1
                a = _project(js.get("fields", []), v, structs, v in s.flexible)
                b = _project(ks["fields"], v, {}, v in kflex)
                if a != b:
                    diffs.append((s.name, kind, v))
    assert compared >= 470
    assert diffs == []


def test_kio_fills_the_api_keys_kafka_python_lacks():
    specs = schema.specs()
    added = {k for k, s in specs.items() if s.source == "kio"}
    assert {38, 39, 40, 41, 52, 56, 58, 62, 63, 67, 68, 69, 71, 72, 76, 78, 79, 88} <= added
    assert specs[68].name == "ConsumerGroupHeartbeat" and specs[71].name == "GetTelemetrySubscriptions"
    # the ZooKeeper-era inter-broker APIs are in neither package (test_kafka_interbroker.py)
    assert all(specs[k].source == "interbroker" for k in (4, 5, 6, 7))


def test_kip848_and_telemetry_from_a_real_client():
    out = decode_files([str(SAMPLES / "kip848.pcap")])
    cmds = out["commands"]
    assert all(c["decode_status"] == "ok" for c in cmds)
    hb = [c for c in cmds if c["command"] == "ConsumerGroupHeartbeat"]
    reqs = [json.loads(c["details"]) for c in hb if c["direction"] == "c2s"]
    rsps = [json.loads(c["details"]) for c in hb if c["direction"] == "s2c"]
    assert len(reqs) == len(rsps) >= 2
    # joins with epoch 0 and its subscription, leaves with epoch -1
    assert reqs[0]["GroupId"] == "bs-group-kip848" and reqs[0]["MemberEpoch"] == 0
    assert reqs[0]["SubscribedTopicNames"] == ["bs-kip848"]
    assert reqs[-1]["MemberEpoch"] == -1
    assert all(r["ErrorCode"] == 0 for r in rsps)
    # the assignment names topics by id; the row gets the name learned from Metadata
    assigned = [c for c, d in zip([c for c in hb if c["direction"] == "s2c"], rsps) if d["Assignment"]]
    assert assigned and all(c["topic"] == "bs-kip848" for c in assigned)
    tid = json.loads(assigned[0]["details"])["Assignment"]["TopicPartitions"][0]["TopicId"]
    assert uuid.UUID(tid).int != 0
    telemetry = [c for c in cmds if c["command"] == "GetTelemetrySubscriptions" and c["direction"] == "s2c"]
    assert telemetry and all(json.loads(c["details"])["PushIntervalMs"] > 0 for c in telemetry)
    lat = {r["request_command"] for r in out["latencies"] if r["response_ts"] is not None}
    assert {"ConsumerGroupHeartbeat", "GetTelemetrySubscriptions"} <= lat


# -- golden bytes -----------------------------------------------------------------------------


def _uv(n: int) -> bytes:
    """unsigned varint (LEB128)"""
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _cstr(s: str | None) -> bytes:
    """compact (nullable) string: uvarint length + 1, 0 = null"""
    if s is None:
        return b"\x00"
    b = s.encode()
    return _uv(len(b) + 1) + b


def _cbytes(b: bytes) -> bytes:
    """compact bytes: uvarint length + 1"""
    return _uv(len(b) + 1) + b


def _carr(items: list[bytes]) -> bytes:
    """compact array: uvarint count + 1, then the elements"""
    return _uv(len(items) + 1) + b"".join(items)


def _req(key: int, version: int, corr: int, body: bytes) -> bytes:
    # request header v2: api_key, api_version, correlation_id, client_id (int16 string), no tags
    head = struct.pack(">hhih", key, version, corr, 3) + b"cli" + b"\x00"
    return struct.pack(">i", len(head) + len(body)) + head + body


def _rsp(corr: int, body: bytes) -> bytes:
    head = struct.pack(">i", corr) + b"\x00"  # response header v1: correlation id, no tags
    return struct.pack(">i", len(head) + len(body)) + head + body


def _details(rows: dict, direction: str) -> dict:
    return json.loads(next(c for c in rows["commands"] if c["direction"] == direction)["details"])


def test_golden_consumer_group_heartbeat_v0():
    tid = uuid.UUID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0")
    body = (
        _cstr("grp")  # GroupId
        + _cstr("member-1")  # MemberId
        + struct.pack(">i", 0)  # MemberEpoch
        + _cstr(None)  # InstanceId
        + _cstr("rack-a")  # RackId
        + struct.pack(">i", 45000)  # RebalanceTimeoutMs
        + _carr([_cstr("orders")])  # SubscribedTopicNames
        + _cstr(None)  # ServerAssignor (v0 has no SubscribedTopicRegex)
        + _carr([tid.bytes + _carr([struct.pack(">i", 0), struct.pack(">i", 1)]) + b"\x00"])
        + b"\x00"  # no tagged fields
    )
    rsp = (
        struct.pack(">ih", 0, 0)  # ThrottleTimeMs, ErrorCode
        + _cstr(None)  # ErrorMessage
        + _cstr("member-1")
        + struct.pack(">ii", 5, 3000)  # MemberEpoch, HeartbeatIntervalMs
        + b"\xff"  # Assignment: null
        + b"\x00"
    )
    rows = Driver().c2s(_req(68, 0, 7, body)).s2c(_rsp(7, rsp)).close()
    assert [c["decode_status"] for c in rows["commands"]] == ["ok", "ok"]
    d = _details(rows, "c2s")
    d.pop("_header")
    assert d == {
        "GroupId": "grp",
        "MemberId": "member-1",
        "MemberEpoch": 0,
        "InstanceId": None,
        "RackId": "rack-a",
        "RebalanceTimeoutMs": 45000,
        "SubscribedTopicNames": ["orders"],
        "ServerAssignor": None,
        "TopicPartitions": [{"TopicId": str(tid), "Partitions": [0, 1]}],
    }
    assert rows["commands"][0]["topics"] == ["orders"]
    r = _details(rows, "s2c")
    assert r["MemberEpoch"] == 5 and r["HeartbeatIntervalMs"] == 3000 and r["Assignment"] is None
    assert rows["latencies"][0]["request_command"] == "ConsumerGroupHeartbeat"


def test_golden_push_telemetry_v0():
    metrics = b"\x0a\x05hello"  # opaque to Kafka: an OTLP payload
    body = (
        uuid.UUID(int=7).bytes  # ClientInstanceId
        + struct.pack(">i", 11)  # SubscriptionId
        + b"\x00"  # Terminating: false
        + b"\x04"  # CompressionType: zstd
        + _cbytes(metrics)  # Metrics
        + b"\x00"
    )
    rows = Driver().c2s(_req(72, 0, 3, body)).close()
    cmd = rows["commands"][0]
    assert cmd["command"] == "PushTelemetry" and cmd["decode_status"] == "ok"
    d = _details(rows, "c2s")
    assert d["SubscriptionId"] == 11 and d["Terminating"] is False and d["CompressionType"] == 4


def test_golden_delegation_token_hmac_is_redacted():
    hmac = bytes(range(32))
    rsp = (
        struct.pack(">h", 0)  # ErrorCode
        + _cstr("User")
        + _cstr("alice")  # PrincipalType, PrincipalName
        + _cstr("User")
        + _cstr("alice")  # TokenRequesterPrincipalType/Name (v3)
        + struct.pack(">qqq", 1, 2, 3)  # IssueTimestampMs, ExpiryTimestampMs, MaxTimestampMs
        + _cstr("token-id-1")  # TokenId
        + _cbytes(hmac)  # Hmac
        + struct.pack(">i", 0)  # ThrottleTimeMs
        + b"\x00"
    )
    req = (
        _cstr("User")
        + _cstr("alice")  # OwnerPrincipalType/Name (v3)
        + _carr([])  # Renewers
        + struct.pack(">q", -1)  # MaxLifetimeMs
        + b"\x00"
    )
    rows = Driver().c2s(_req(38, 3, 9, req)).s2c(_rsp(9, rsp)).close()
    assert [c["decode_status"] for c in rows["commands"]] == ["ok", "ok"]
    d = _details(rows, "s2c")
    assert d["TokenId"] == "token-id-1" and d["Hmac"] == "<redacted 32 bytes>"
    assert hmac.hex() not in rows["commands"][1]["details"]


def test_golden_envelope_forwarded_request_is_redacted():
    inner = b"\x00\x33\x00\x00secret-scram-bytes"
    body = (
        _cbytes(inner)  # RequestData
        + _cbytes(b"user")  # RequestPrincipal
        + _cbytes(bytes([127, 0, 0, 1]))  # ClientHostAddress
        + b"\x00"
    )
    rows = Driver().c2s(_req(58, 0, 2, body)).close()
    d = _details(rows, "c2s")
    assert rows["commands"][0]["command"] == "Envelope" and rows["commands"][0]["decode_status"] == "ok"
    assert d["RequestData"] == f"<redacted {len(inner)} bytes>"
    assert "secret-scram" not in rows["commands"][0]["details"]


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_truncated_new_api_body_is_an_error_row(cut):
    body = _cstr("grp") + _cstr("member-1") + struct.pack(">i", 0) + b"\x00" * 4
    frame = _req(68, 0, 1, body)
    bad = struct.pack(">i", len(frame) - 4 - cut) + frame[4 : len(frame) - cut]
    rows = Driver().c2s(bad).close()
    cmd = rows["commands"][0]
    assert cmd["command"] == "ConsumerGroupHeartbeat" and cmd["decode_status"] in ("truncated", "malformed")


def test_share_fetch_records_are_summarized_not_copied():
    """ShareFetch (key 78) responses carry record sets: details get their batch headers only, so
    payloads never reach `details`; only the acquired records become deliver rows."""
    from .kit import records

    recs = records([(b"k1", b"secret-payload-1", []), (b"k2", b"secret-payload-2", [])])
    tid = uuid.UUID(int=0xABC).bytes
    no_tags = b"\x00"
    fetch_partition = struct.pack(">i", 0) + _carr([]) + no_tags  # PartitionIndex, AcknowledgementBatches
    req = (
        _cstr("grp")  # GroupId
        + _cstr("m1")  # MemberId
        + struct.pack(">iiiiii", 0, 500, 1, 1 << 20, 100, 100)  # epoch, waits, sizes, counts
        + _carr([tid + _carr([fetch_partition]) + no_tags])  # Topics
        + _carr([])  # ForgottenTopicsData
        + no_tags
    )
    part = (
        struct.pack(">ih", 0, 0)  # PartitionIndex, ErrorCode
        + _cstr(None)  # ErrorMessage
        + struct.pack(">h", 0)  # AcknowledgeErrorCode
        + _cstr(None)  # AcknowledgeErrorMessage
        + struct.pack(">ii", 1, 0)
        + no_tags  # CurrentLeader: LeaderId, LeaderEpoch
        + _cbytes(recs)  # Records
        + _carr([struct.pack(">qqh", 1, 1, 1) + no_tags])  # AcquiredRecords: offset 1 only
        + no_tags
    )
    rsp = (
        struct.pack(">ih", 0, 0)  # ThrottleTimeMs, ErrorCode
        + _cstr(None)  # ErrorMessage
        + struct.pack(">i", 15000)  # AcquisitionLockTimeoutMs
        + _carr([tid + _carr([part]) + no_tags])  # Responses
        + _carr([])  # NodeEndpoints
        + no_tags
    )
    rows = Driver().c2s(_req(78, 1, 4, req)).s2c(_rsp(4, rsp)).close()
    assert [c["decode_status"] for c in rows["commands"]] == ["ok", "ok"]
    details = rows["commands"][1]["details"]
    assert "secret-payload" not in details and '"base64"' not in details  # not as text, not as bytes
    batch = json.loads(details)["Responses"][0]["Partitions"][0]["Records"]["batches"][0]
    assert batch["record_count"] == 2 and batch["crc_ok"] is True
    delivered = [(m["offset"], m["value"], m["consumer"], m["topic_id"]) for m in rows["messages"]]
    assert delivered == [(1, b"secret-payload-2", "grp", str(uuid.UUID(int=0xABC)))]


def test_random_bodies_of_every_new_api_never_raise():
    """Garbage after a valid header, for every version of every API rebuilt from kio, in both
    directions: each frame becomes rows (ok or an error status), the conversation survives, and a
    good frame after it still decodes."""
    import random

    rnd = random.Random(848)
    good = _req(68, 0, 99, _cstr("g") + _cstr("m") + struct.pack(">ii", 0, 1) + b"\x00" * 4 + b"\x00")
    for key, s in schema.specs().items():
        if s.source != "kio":
            continue
        for v in range(s.valid.lo, s.valid.hi + 1):
            body = rnd.randbytes(rnd.choice((0, 3, 17, 64, 300)))
            d = Driver().c2s(_req(key, v, 1, body)).s2c(_rsp(1, body)).c2s(good).close()
            assert len(d["commands"]) == 3, (key, v)
            assert d["commands"][-1]["command"] == "ConsumerGroupHeartbeat"


def test_share_acknowledge_per_offset_types_and_gaps():
    """ShareAcknowledge v1 (hand-built): one batch with a type per offset, a gap among them, and a
    partition error in the response; the topic is known by id only."""
    tid = uuid.UUID(int=0x5EED)
    no_tags = b"\x00"
    batch = struct.pack(">qq", 10, 13) + _carr([b"\x01", b"\x00", b"\x03", b"\x02"]) + no_tags
    req = (
        _cstr("grp")  # GroupId
        + _cstr("m1")  # MemberId
        + struct.pack(">i", 3)  # ShareSessionEpoch
        + _carr([tid.bytes + _carr([struct.pack(">i", 2) + _carr([batch]) + no_tags]) + no_tags])
        + no_tags
    )
    part = struct.pack(">ih", 2, 87) + _cstr(None) + struct.pack(">ii", 1, 0) + no_tags + no_tags
    rsp = (
        struct.pack(">ih", 0, 0)  # ThrottleTimeMs, ErrorCode
        + _cstr(None)  # ErrorMessage
        + _carr([tid.bytes + _carr([part]) + no_tags])  # Responses
        + _carr([])  # NodeEndpoints
        + no_tags
    )
    rows = Driver().c2s(_req(79, 1, 5, req)).s2c(_rsp(5, rsp)).close()
    assert [c["decode_status"] for c in rows["commands"]] == ["ok", "ok"]
    acks = [(a["offset"], json.loads(a["details"])["type"], a["error_code"]) for a in rows["acks"]]
    assert acks == [(10, "accept", 87), (12, "reject", 87), (13, "release", 87)]
    assert all(a["ack_type"] == "kafka_share_ack" and a["consumer"] == "grp" for a in rows["acks"])
    assert all(a["topic"] is None and a["topic_id"] == str(tid) and a["partition"] == 2 for a in rows["acks"])


def test_the_api_key_enum_is_the_specs():
    """names.ApiKey, the table the decoder names api keys by, equals every spec it reads."""
    from brokerscope.protocols.kafka.names import ApiKey

    assert {k.value: k.name for k in ApiKey} == {key: s.name for key, s in schema.specs().items()}
