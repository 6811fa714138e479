"""The ZooKeeper-era inter-broker APIs 4-7 (LeaderAndIsr, StopReplica, UpdateMetadata,
ControlledShutdown), decoded from interbroker_specs.py.

- golden bytes written out by hand and annotated, for classic and flexible versions (header v0 of
  ControlledShutdown v0, compact arrays and strings, UpdateMetadata v8's tagged `Type`);
- every valid version of every request and response, encoded by the small encoder below (written
  from the Kafka protocol guide, sharing no code with brokerscope's decoder; it reproduces the
  hand-written bytes), decoded field by field and through a conversation;
- every cut body gives an error status, never an exception.
"""

from __future__ import annotations

import json
import random
import struct
import uuid

import pytest

from brokerscope.protocols.kafka import schema
from brokerscope.protocols.kafka.names import EXTRA_API_NAMES
from tests.support.sasl_broker import uvarint as _uv  # the test broker's own wire writer

from .kit import Driver

NAMES = {4: "LeaderAndIsr", 5: "StopReplica", 6: "UpdateMetadata", 7: "ControlledShutdown"}
LAST = {4: 7, 5: 4, 6: 8, 7: 3}  # newest valid version
FLEX = {4: 4, 5: 2, 6: 6, 7: 3}  # first flexible version
CASES = [(k, v) for k in NAMES for v in range(LAST[k] + 1)]
IDS = [f"{NAMES[k]}-v{v}" for k, v in CASES]


def h(s: str) -> bytes:
    return bytes.fromhex("".join(s.split()))


# -- a minimal Kafka encoder: every helper gives (wire bytes, the value a decoder should return) --


def i8(n):
    return struct.pack(">b", n), n


def i16(n):
    return struct.pack(">h", n), n


def i32(n):
    return struct.pack(">i", n), n


def i64(n):
    return struct.pack(">q", n), n


def boolean(b):
    return (b"\x01" if b else b"\x00"), b


def uid(u: uuid.UUID):
    return u.bytes, str(u)


def string(s, flex):
    if s is None:
        return (b"\x00" if flex else b"\xff\xff"), None
    e = s.encode()
    return (_uv(len(e) + 1) if flex else struct.pack(">h", len(e))) + e, s


def array(items, flex):
    count = _uv(len(items) + 1) if flex else struct.pack(">i", len(items))
    return count + b"".join(w for w, _ in items), [v for _, v in items]


def ints(ns, flex):
    return array([i32(n) for n in ns], flex)


def fields(flex, *present, tags=()):
    """A struct: `present` = (name, (wire, value)) in wire order, None for a field this version
    lacks; `tags` = (tag, name, (wire, value)), sent in the tagged section of flexible versions."""
    present = [f for f in present if f is not None]
    wire = b"".join(w for _, (w, _) in present)
    value = {n: v for n, (_, v) in present}
    if flex:
        wire += _uv(len(tags)) + b"".join(_uv(t) + _uv(len(w)) + w for t, _, (w, _) in tags)
        value.update({n: v for _, n, (_, v) in tags})
    return wire, value


def request_frame(key: int, v: int, corr: int, body: bytes, client: str = "controller-1") -> bytes:
    head = struct.pack(">hhi", key, v, corr)
    if (key, v) != (7, 0):  # ControlledShutdown v0: request header v0, no client id
        head += struct.pack(">h", len(client)) + client.encode()
    if v >= FLEX[key]:
        head += b"\x00"  # request header v2: no tagged fields
    return struct.pack(">i", len(head) + len(body)) + head + body


def response_frame(key: int, v: int, corr: int, body: bytes) -> bytes:
    head = struct.pack(">i", corr) + (b"\x00" if v >= FLEX[key] else b"")
    return struct.pack(">i", len(head) + len(body)) + head + body


# -- realistic messages, per API and version ----------------------------------------------------

TOPIC_IDS = {
    "orders": uuid.UUID("5f1c9a4e-2b7d-4c11-9e0a-6d3f8b2a7c10"),
    "payments": uuid.UUID("a3d2e1f0-8c7b-4a69-b5e4-13c2d0f9e8a7"),
}
# (topic, partition, leader, isr, replicas)
PARTITIONS = [
    ("orders", 0, 1, [1, 2, 3], [1, 2, 3]),
    ("orders", 1, 2, [2, 3], [2, 3, 1]),
    ("payments", 0, 3, [3, 1], [3, 1, 2]),
]
BROKER_EPOCH = 4294967337  # a ZooKeeper czxid: above 2^32


def controller(flex, v, kraft_since, epoch_since, kraft=False, controller_id=1):
    """The fields a controller's request opens with."""
    return (
        ("ControllerId", i32(controller_id)),
        ("isKRaftController", boolean(kraft)) if v >= kraft_since else None,
        ("ControllerEpoch", i32(3)),
        ("BrokerEpoch", i64(BROKER_EPOCH)) if v >= epoch_since else None,
    )


def partition_state(flex, p, named, epoch_field, *later):
    """One partition's leadership as a controller sends it (LeaderAndIsr, UpdateMetadata)."""
    topic, idx, leader, isr, replicas = p
    return fields(
        flex,
        ("TopicName", string(topic, flex)) if named else None,
        ("PartitionIndex", i32(idx)),
        ("ControllerEpoch", i32(3)),
        ("Leader", i32(leader)),
        ("LeaderEpoch", i32(5 + idx)),
        ("Isr", ints(isr, flex)),
        (epoch_field, i32(17)),
        ("Replicas", ints(replicas, flex)),
        *later,
    )


def _by_topic(flex, v, with_id_from, partition_states, name_key="TopicName"):
    """The v2+/v5+ grouping: one struct per topic holding its partitions' structs."""
    out = []
    for topic in ("orders", "payments"):
        parts = [partition_states(p) for p in PARTITIONS if p[0] == topic]
        out.append(
            fields(
                flex,
                (name_key, string(topic, flex)),
                ("TopicId", uid(TOPIC_IDS[topic]))
                if with_id_from is not None and v >= with_id_from
                else None,
                ("PartitionStates", array(parts, flex)),
            )
        )
    return array(out, flex)


def leader_and_isr(v: int):
    flex = v >= 4

    def state(p):
        return partition_state(
            flex,
            p,
            v <= 1,
            "PartitionEpoch",
            ("AddingReplicas", ints([4] if p[1] == 1 else [], flex)) if v >= 3 else None,
            ("RemovingReplicas", ints([], flex)) if v >= 3 else None,
            ("IsNew", boolean(p[0] == "payments")) if v >= 1 else None,
            ("LeaderRecoveryState", i8(0)) if v >= 6 else None,
        )

    leaders = [
        fields(
            flex, ("BrokerId", i32(b)), ("HostName", string(f"kafka-{b}.internal", flex)), ("Port", i32(9092))
        )
        for b in (1, 2, 3)
    ]
    request = fields(
        flex,
        *controller(flex, v, 7, 2),
        ("Type", i8(1)) if v >= 5 else None,
        ("UngroupedPartitionStates", array([state(p) for p in PARTITIONS], flex)) if v <= 1 else None,
        ("TopicStates", _by_topic(flex, v, 5, state)) if v >= 2 else None,
        ("LiveLeaders", array(leaders, flex)),
    )

    def error(p):  # payments-0 failed: KAFKA_STORAGE_ERROR (56)
        return fields(
            flex,
            ("TopicName", string(p[0], flex)) if v <= 4 else None,
            ("PartitionIndex", i32(p[1])),
            ("ErrorCode", i16(56 if p[0] == "payments" else 0)),
        )

    if v <= 4:
        errors = ("PartitionErrors", array([error(p) for p in PARTITIONS], flex))
    else:
        topics = [
            fields(
                flex,
                ("TopicId", uid(TOPIC_IDS[t])),
                ("PartitionErrors", array([error(p) for p in PARTITIONS if p[0] == t], flex)),
            )
            for t in ("orders", "payments")
        ]
        errors = ("Topics", array(topics, flex))
    return request, fields(flex, ("ErrorCode", i16(0)), errors)


def stop_replica(v: int):
    flex = v >= 2
    stopped = [("orders", 1), ("payments", 0)]
    if v == 0:
        grouped = (
            "UngroupedPartitions",
            array(
                [
                    fields(flex, ("TopicName", string(t, flex)), ("PartitionIndex", i32(p)))
                    for t, p in stopped
                ],
                flex,
            ),
        )
    elif v <= 2:
        grouped = (
            "Topics",
            array(
                [
                    fields(
                        flex,
                        ("Name", string(t, flex)),
                        ("PartitionIndexes", ints([p for tt, p in stopped if tt == t], flex)),
                    )
                    for t in ("orders", "payments")
                ],
                flex,
            ),
        )
    else:

        def state(p):
            return fields(
                flex,
                ("PartitionIndex", i32(p[1])),
                ("LeaderEpoch", i32(9)),
                ("DeletePartition", boolean(p[0] == "payments")),
            )

        grouped = ("TopicStates", _by_topic(flex, v, None, state))
    request = fields(
        flex,
        *controller(flex, v, 4, 1, kraft=True),
        ("DeletePartitions", boolean(True)) if v <= 2 else None,
        grouped,
    )
    errors = [
        fields(
            flex,
            ("TopicName", string(t, flex)),
            ("PartitionIndex", i32(p)),
            ("ErrorCode", i16(0 if t == "orders" else 3)),
        )
        for t, p in stopped
    ]  # payments-0: UNKNOWN_TOPIC_OR_PARTITION (3)
    return request, fields(flex, ("ErrorCode", i16(0)), ("PartitionErrors", array(errors, flex)))


def update_metadata(v: int, migration_type: int | None = 2):
    flex = v >= 6

    def state(p):
        offline = ("OfflineReplicas", ints([2] if p[1] == 1 else [], flex)) if v >= 4 else None
        return partition_state(flex, p, v <= 4, "ZkVersion", offline)

    def broker(b):
        endpoints = [
            fields(
                flex,
                ("Port", i32(port)),
                ("Host", string(f"kafka-{b}.internal", flex)),
                ("Listener", string(listener, flex)) if v >= 3 else None,
                ("SecurityProtocol", i16(proto)),
            )
            for port, listener, proto in ((9092, "PLAINTEXT", 0), (9093, "SSL", 1))
        ]
        return fields(
            flex,
            ("Id", i32(b)),
            ("V0Host", string(f"kafka-{b}.internal", flex)) if v == 0 else None,
            ("V0Port", i32(9092)) if v == 0 else None,
            ("Endpoints", array(endpoints, flex)) if v >= 1 else None,
            ("Rack", string(None if b == 3 else f"rack-{b}", flex)) if v >= 2 else None,
        )

    tags = [(0, "Type", i8(migration_type))] if v >= 8 and migration_type is not None else []
    request = fields(
        flex,
        *controller(flex, v, 8, 5, kraft=True, controller_id=3000),
        ("UngroupedPartitionStates", array([state(p) for p in PARTITIONS], flex)) if v <= 4 else None,
        ("TopicStates", _by_topic(flex, v, 7, state)) if v >= 5 else None,
        ("LiveBrokers", array([broker(b) for b in (1, 2, 3)], flex)),
        tags=tags,
    )
    return request, fields(flex, ("ErrorCode", i16(0)))


def controlled_shutdown(v: int):
    flex = v >= 3
    request = fields(flex, ("BrokerId", i32(2)), ("BrokerEpoch", i64(BROKER_EPOCH)) if v >= 2 else None)
    remaining = [fields(flex, ("TopicName", string("orders", flex)), ("PartitionIndex", i32(1)))]
    return request, fields(flex, ("ErrorCode", i16(0)), ("RemainingPartitions", array(remaining, flex)))


BUILD = {4: leader_and_isr, 5: stop_replica, 6: update_metadata, 7: controlled_shutdown}


# -- the specs --------------------------------------------------------------------------------


def test_specs_cover_keys_4_to_7_in_every_version():
    specs = schema.specs()
    for key, name in NAMES.items():
        s = specs[key]
        assert (s.name, s.source, (s.valid.lo, s.valid.hi), s.flexible.lo) == (
            name,
            "interbroker",
            (0, LAST[key]),
            FLEX[key],
        )
        assert schema.api_name(key) == name and key not in EXTRA_API_NAMES
        for v in range(LAST[key] + 1):
            assert schema.is_flexible(key, v) == (v >= FLEX[key])
            for kind in ("request", "response"):
                p = schema.plan(key, v, kind)
                assert p is not None and not p.below_baseline, (key, v, kind)
        assert schema.plan(key, LAST[key] + 1, "request") is None  # newer than the specs
    assert schema.request_header_version(7, 0) == 0 and schema.request_header_version(7, 1) == 1


# -- golden bytes, by hand --------------------------------------------------------------------

CS_V0_REQ = h(
    "0000000c"  # size 12
    "0007 0000 00000005"  # api key 7 (ControlledShutdown), v0, correlation id 5; header v0: no client id
    "00000002"  # BrokerId 2
)
CS_V0_RESP = h(
    "00000016"  # size 22
    "00000005"  # correlation id 5
    "0000"  # ErrorCode 0
    "00000001"  # RemainingPartitions: 1
    "0006 6f7264657273 00000001"  # TopicName "orders", PartitionIndex 1
)
CS_V3_REQ = h(
    "00000020"  # size 32
    "0007 0003 00000006"  # ControlledShutdown v3, correlation id 6
    "0008 62726f6b65722d32 00"  # client id "broker-2" (never compact), no tagged fields
    "00000002 0000000100000029 00"  # BrokerId 2, BrokerEpoch 4294967337, no tagged fields
)
CS_V3_RESP = h(
    "00000015"  # size 21
    "00000006 00"  # correlation id 6, header tagged fields: none
    "0000"  # ErrorCode 0
    "02"  # RemainingPartitions: compact array, 1 element
    "07 6f7264657273 00000001 00"  # TopicName "orders" (compact), PartitionIndex 1, no tags
    "00"  # no tagged fields
)
UM_V8_REQ = h(
    "00000095"  # size 149
    "0006 0008 00000009"  # api key 6 (UpdateMetadata), v8, correlation id 9
    "000c 636f6e74726f6c6c65722d31 00"  # client id "controller-1", no tagged fields
    "00000bb8"  # ControllerId 3000 (a KRaft controller during a migration)
    "01"  # isKRaftController true
    "00000003"  # ControllerEpoch 3
    "0000000100000029"  # BrokerEpoch 4294967337
    "02"  # TopicStates: 1
    "07 6f7264657273"  # TopicName "orders"
    "5f1c9a4e2b7d4c119e0a6d3f8b2a7c10"  # TopicId
    "02"  # PartitionStates: 1
    "00000000 00000003 00000001 00000005"  # PartitionIndex 0, ControllerEpoch 3, Leader 1, LeaderEpoch 5
    "03 00000001 00000002"  # Isr [1, 2]
    "00000011"  # ZkVersion 17
    "03 00000001 00000002"  # Replicas [1, 2]
    "01"  # OfflineReplicas []
    "00 00"  # partition, topic: no tagged fields
    "02"  # LiveBrokers: 1
    "00000001"  # Id 1
    "02"  # Endpoints: 1
    "00002384 08 6b61666b612d31 0a 504c41494e54455854 0000 00"  # 9092, "kafka-1", "PLAINTEXT", 0
    "07 7261636b2d61"  # Rack "rack-a"
    "00"  # broker: no tagged fields
    "01 00 01 02"  # tagged fields: 1, tag 0 (Type), size 1, value 2 (full snapshot)
)
UM_V8_RESP = h("00000008 00000009 00 0000 00")  # size 8, correlation id 9, no tags, ErrorCode 0, no tags


def test_golden_controlled_shutdown_v0_header_v0():
    out = Driver().c2s(CS_V0_REQ).s2c(CS_V0_RESP).close()
    req, resp = out["commands"]
    assert (req["command"], req["decode_status"], req["client_id"], req["correlation_id"]) == (
        "ControlledShutdown",
        "ok",
        None,
        5,
    )
    assert json.loads(req["details"]) == {"BrokerId": 2, "_header": {"version": 0}}
    assert (resp["command"], resp["decode_status"], resp["topic"], resp["partition"], resp["error_code"]) == (
        "ControlledShutdown",
        "ok",
        "orders",
        1,
        0,
    )
    assert json.loads(resp["details"]) == {
        "ErrorCode": 0,
        "RemainingPartitions": [{"TopicName": "orders", "PartitionIndex": 1}],
    }
    assert out["latencies"][0]["request_command"] == "ControlledShutdown"


def test_golden_controlled_shutdown_v3_flexible():
    out = Driver().c2s(CS_V3_REQ).s2c(CS_V3_RESP).close()
    req, resp = out["commands"]
    assert (req["decode_status"], req["client_id"]) == ("ok", "broker-2")
    assert json.loads(req["details"]) == {
        "BrokerId": 2,
        "BrokerEpoch": BROKER_EPOCH,
        "_header": {"version": 2},
    }
    assert resp["decode_status"] == "ok"
    assert json.loads(resp["details"]) == {
        "ErrorCode": 0,
        "RemainingPartitions": [{"TopicName": "orders", "PartitionIndex": 1}],
    }


def test_golden_update_metadata_v8_with_its_tagged_type():
    out = Driver().c2s(UM_V8_REQ).s2c(UM_V8_RESP).close()
    req, resp = out["commands"]
    assert (req["command"], req["decode_status"], req["topic"], req["topics"], req["partition"]) == (
        "UpdateMetadata",
        "ok",
        "orders",
        ["orders"],
        0,
    )
    d = json.loads(req["details"])
    assert (d["ControllerId"], d["isKRaftController"], d["Type"], d["BrokerEpoch"]) == (
        3000,
        True,
        2,
        4294967337,
    )
    (topic,) = d["TopicStates"]
    assert (topic["TopicName"], topic["TopicId"]) == ("orders", str(TOPIC_IDS["orders"]))
    assert topic["PartitionStates"] == [
        {
            "PartitionIndex": 0,
            "ControllerEpoch": 3,
            "Leader": 1,
            "LeaderEpoch": 5,
            "Isr": [1, 2],
            "ZkVersion": 17,
            "Replicas": [1, 2],
            "OfflineReplicas": [],
        }
    ]
    assert d["LiveBrokers"] == [
        {
            "Id": 1,
            "Endpoints": [{"Port": 9092, "Host": "kafka-1", "Listener": "PLAINTEXT", "SecurityProtocol": 0}],
            "Rack": "rack-a",
        }
    ]
    assert (resp["command"], resp["decode_status"], resp["error_code"]) == ("UpdateMetadata", "ok", 0)
    assert json.loads(resp["details"]) == {"ErrorCode": 0}


def test_the_test_encoder_reproduces_the_hand_written_bytes():
    """The encoder used for every version below writes exactly the annotated golden bytes."""
    for v, corr, req, resp in ((0, 5, CS_V0_REQ, CS_V0_RESP), (3, 6, CS_V3_REQ, CS_V3_RESP)):
        (rq, _), (rs, _) = controlled_shutdown(v)
        assert request_frame(7, v, corr, rq, "broker-2") == req
        assert response_frame(7, v, corr, rs) == resp
    flex = True
    endpoint = fields(
        flex,
        ("Port", i32(9092)),
        ("Host", string("kafka-1", flex)),
        ("Listener", string("PLAINTEXT", flex)),
        ("SecurityProtocol", i16(0)),
    )
    offline = ("OfflineReplicas", ints([], flex))
    partition = partition_state(flex, ("orders", 0, 1, [1, 2], [1, 2]), False, "ZkVersion", offline)
    body, _ = fields(
        flex,
        *controller(flex, 8, 8, 5, kraft=True, controller_id=3000),
        (
            "TopicStates",
            array(
                [
                    fields(
                        flex,
                        ("TopicName", string("orders", flex)),
                        ("TopicId", uid(TOPIC_IDS["orders"])),
                        ("PartitionStates", array([partition], flex)),
                    )
                ],
                flex,
            ),
        ),
        (
            "LiveBrokers",
            array(
                [
                    fields(
                        flex,
                        ("Id", i32(1)),
                        ("Endpoints", array([endpoint], flex)),
                        ("Rack", string("rack-a", flex)),
                    )
                ],
                flex,
            ),
        ),
        tags=[(0, "Type", i8(2))],
    )
    assert request_frame(6, 8, 9, body) == UM_V8_REQ
    assert response_frame(6, 8, 9, update_metadata(8)[1][0]) == UM_V8_RESP


# -- every version ----------------------------------------------------------------------------


@pytest.mark.parametrize("key, v", CASES, ids=IDS)
@pytest.mark.parametrize("kind", ["request", "response"])
def test_every_version_decodes_field_by_field(key, v, kind):
    wire, expected = BUILD[key](v)[kind == "response"]
    assert schema.decode_body(schema.plan(key, v, kind), wire, 0) == expected


@pytest.mark.parametrize("key, v", CASES, ids=IDS)
def test_every_version_through_a_conversation(key, v):
    (rq, rq_value), (rs, rs_value) = BUILD[key](v)
    out = Driver().c2s(request_frame(key, v, 40, rq)).s2c(response_frame(key, v, 40, rs)).close()
    req, resp = out["commands"]
    for row, value in ((req, rq_value), (resp, rs_value)):
        assert (row["command"], row["command_code"], row["api_version"], row["decode_status"]) == (
            NAMES[key],
            key,
            v,
            "ok",
        )
        assert row["correlation_id"] == 40 and row["decode_error"] is None and row["raw"] is None
        d = json.loads(row["details"])
        d.pop("_header", None)
        assert d == value
    assert req["client_id"] == (None if (key, v) == (7, 0) else "controller-1")
    assert out["latencies"][0]["response_command"] == NAMES[key]
    # the commands row names what the body names
    if key in (4, 6):  # partition states: topics, first partition
        assert (req["topics"], req["topic"], req["partition"]) == (["orders", "payments"], "orders", 0)
    if key == 4:  # one partition failed; v5+ responses name topics by id only: the request's topic
        assert resp["error_code"] == 56  # and topics (found by a check against tshark: topics was null)
        if v >= 5:
            assert (resp["topic"], resp["topics"], resp["topic_id"]) == (
                "orders",
                ["orders", "payments"],
                None,
            )
        else:
            assert resp["topics"] == ["orders", "payments"]
    if key == 5:
        assert (req["topics"], resp["topics"], resp["error_code"]) == (["orders", "payments"],) * 2 + (3,)
    if key == 7:
        assert (resp["topic"], resp["partition"]) == ("orders", 1)


def test_update_metadata_v8_without_its_tag_and_with_an_unknown_one():
    (body, value), _ = update_metadata(8, migration_type=None)
    assert "Type" not in value
    assert schema.decode_body(schema.plan(6, 8, "request"), body, 0) == value
    unknown = body[:-1] + h("02 00 01 01 05 02 abcd")  # Type 1, and a tag 5 this spec does not know
    d = schema.decode_body(schema.plan(6, 8, "request"), unknown, 0)
    assert d["Type"] == 1 and d["_unknown_tagged_fields"] == {"5": {"base64": "q80="}}


# -- cut and broken bodies --------------------------------------------------------------------


@pytest.mark.parametrize("key, v", CASES, ids=IDS)
def test_every_cut_body_is_an_error_status(key, v):
    for kind, (wire, _) in zip(("request", "response"), BUILD[key](v), strict=True):
        p = schema.plan(key, v, kind)
        for cut in range(len(wire)):
            with pytest.raises(schema.DecodeError) as e:
                schema.decode_body(p, wire[:cut], 0)
            assert e.value.status in ("truncated", "malformed"), (kind, cut)


def started() -> Driver:
    """A conversation past its first exchange (a stream's first frame has its header checked
    before it is believed)."""
    return Driver().c2s(CS_V0_REQ).s2c(CS_V0_RESP)


@pytest.mark.parametrize("key, v", CASES, ids=IDS)
def test_truncated_bodies_in_a_conversation(key, v):
    """Frames whose bodies lack their last two bytes: each row says truncated, with its raw bytes,
    and the next frame of the connection still decodes."""
    (rq, _), (rs, _) = BUILD[key](v)
    (rq2, _), (rs2, _) = BUILD[key](v)
    out = (
        started()
        .c2s(request_frame(key, v, 1, rq[:-2]))
        .s2c(response_frame(key, v, 1, rs[:-2]))
        .c2s(request_frame(key, v, 2, rq2))
        .s2c(response_frame(key, v, 2, rs2))
        .close()
    )
    rows = out["commands"][2:]
    assert [(r["command"], r["correlation_id"], r["decode_status"]) for r in rows] == [
        (NAMES[key], 1, "truncated"),
        (NAMES[key], 1, "truncated"),
        (NAMES[key], 2, "ok"),
        (NAMES[key], 2, "ok"),
    ]
    assert all(r["decode_error"] and r["raw"] for r in rows[:2])


def test_connection_ending_inside_a_frame():
    (rq, _), _ = leader_and_isr(7)
    frame = request_frame(4, 7, 1, rq)
    out = Driver().c2s(CS_V3_REQ).c2s(frame[:-10]).close()
    assert [(r["command"], r["decode_status"]) for r in out["commands"]] == [
        ("ControlledShutdown", "ok"),
        (None, "truncated"),
    ]
    assert "connection ended inside a frame" in out["commands"][1]["decode_error"]


def test_a_version_newer_than_the_specs_is_unsupported():
    out = started().c2s(request_frame(4, 8, 6, b"\x00" * 12)).close()
    row = out["commands"][2]
    assert (row["command"], row["decode_status"]) == ("LeaderAndIsr", "unsupported_version")
    assert row["decode_error"] == "LeaderAndIsr v8 is newer than the specs (v0-v7)"


def test_random_bodies_never_raise():
    rnd = random.Random(4567)
    for key, v in CASES:
        for _ in range(3):
            body = rnd.randbytes(rnd.choice((0, 5, 31, 120)))
            out = (
                started()
                .c2s(request_frame(key, v, 1, body))
                .s2c(response_frame(key, v, 1, body))
                .c2s(CS_V3_REQ)
                .s2c(CS_V3_RESP)
                .close()
            )
            rows = out["commands"]
            assert len(rows) == 6 and [r["decode_status"] for r in rows[-2:]] == ["ok", "ok"], (key, v)


def test_a_response_whose_request_is_missing_is_inferred():
    """Decodable now, these APIs no longer block inference: a ControlledShutdown response (corr 7)
    whose request was not captured decodes under its neighbour's api, as in inference.py."""
    (rq, _), (rs, rs_value) = controlled_shutdown(3)
    out = (
        Driver()
        .s2c(response_frame(7, 3, 7, rs))
        .c2s(request_frame(7, 3, 8, rq))
        .s2c(response_frame(7, 3, 8, rs))
        .close()
    )
    (r,) = [c for c in out["commands"] if c["correlation_id"] == 7]
    d = json.loads(r["details"])
    assert (r["command"], r["decode_status"], d.pop("inferred")) == (
        "ControlledShutdown",
        "request_missing",
        True,
    )
    assert "only ControlledShutdown v3 decodes this response exactly" in d.pop("inferred_reason")
    assert d == rs_value
