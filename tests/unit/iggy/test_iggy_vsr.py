"""VSR generation (apache-iggy 0.9 clients): message batches and their checksums, result-framed
replies (create stream / topic, store offset, register), send confirmations, and the consumer
named on deliver rows and acks. Bytes are built here by hand from the apache/iggy layouts
(core/binary_protocol/src/batch.rs, consensus/reply_result.rs, responses/...)."""

from __future__ import annotations

import json
import struct

import pytest

from brokerscope import tables
from brokerscope.protocols.iggy.messages import build_batch_v48, parse_batch_v48, parse_polled
from brokerscope.protocols.iggy.wire import DecodeError

from .kit import num_id, run, s8, s32, str_id, table, u8, u32, u64, vsr_batch, vsr_header

ST = str_id("orders") + str_id("eu")
PART3 = b"\x02\x04" + u32(3)  # partitioning: partition id 3
ORIGIN = 1_700_000_000_000_000  # µs
BASE_TS = ORIGIN + 500
HDRS = b"\x02" + u32(3) + b"src" + b"\x02" + u32(3) + b"web"  # typed user header src=web
MSGS = [(1001, b"first", HDRS), (2**100 + 3, b"second!", b"")]


def batch(msgs, pid=0, base=0, base_ts=0, deltas=(0, 7), bad_batch_sum=False) -> bytes:
    return vsr_batch(msgs, pid, base, base_ts, list(deltas), bad_batch_sum, ORIGIN)


def req(size_body: bytes, request: int, operation: int, code: int = 0) -> bytes:
    return vsr_header(5, 256 + len(size_body), request, operation, code=code, session=42) + size_body


def rep(body: bytes, request: int, operation: int, status: int = 0) -> bytes:
    return vsr_header(8, 256 + len(body), request, operation, status=status) + body


LOGIN = u32(44) + s8("rust-sdk") + s8("0.11.0") + s8("iggy") + s8("pw") + u32(0)
REGISTER_OK = u32(0) + u32(1) + u64(42) + u32(1) + s8("0.11.0")  # result section + payload
GROUP = u8(2) + str_id("workers")  # consumer group by name


def conversation(poll_batch: bytes, store_reply: bytes) -> list:
    send_body = u32(len(ST + PART3) + 4) + ST + PART3 + u32(2) + batch(MSGS)
    poll_body = GROUP + ST + b"\x01" + u32(3) + u8(1) + u64(0) + u32(10) + u8(1)
    store_body = GROUP + ST + b"\x01" + u32(3) + u64(1)
    return run(
        [
            ("c2s", req(LOGIN, 0, 1)),
            ("s2c", rep(REGISTER_OK, 0, 1)),
            ("c2s", req(send_body, 1, 160)),
            ("s2c", rep(u32(1) + u32(1) + u32(1) + u32(3) + u64(0), 1, 160)),
            ("c2s", req(poll_body, 1, 2, code=100)),
            ("s2c", rep(u32(3) + u64(1) + u32(2) + poll_batch, 1, 2)),
            ("c2s", req(store_body, 2, 161)),
            ("s2c", rep(store_reply, 2, 161)),
        ]
    )


def test_batch_layout_offsets_times_and_checksums():
    raw = batch(MSGS, pid=3, base=10, base_ts=BASE_TS)
    assert build_batch_v48(MSGS, ORIGIN, 3, 10, BASE_TS, [0, 7]) == raw  # the builder agrees
    b, end = parse_batch_v48(raw, 0, len(raw))
    assert end == len(raw) and b["batch_checksum_ok"] is True
    assert (b["partition_id"], b["base_offset"], b["message_count"]) == (3, 10, 2)
    m0, m1 = b["messages"]
    assert (m0["offset"], m1["offset"]) == (10, 11)
    assert (m0["origin_timestamp"], m1["origin_timestamp"]) == (ORIGIN, ORIGIN + 7)
    assert m0["timestamp"] == BASE_TS and m0["checksum_ok"] is True
    assert m1["id"] == 2**100 + 3 and m1["payload"] == b"second!"
    assert m0["headers"][0]["key"] == "src" and m0["headers"][0]["value"] == b"web"


def test_batch_checksum_binds_header_fields_and_message_checksums():
    raw = bytearray(batch(MSGS, pid=3, base=10, base_ts=BASE_TS))
    struct.pack_into("<Q", raw, 8, 11)  # a different base offset than the one checksummed
    b, _ = parse_batch_v48(bytes(raw), 0, len(raw))
    assert b["batch_checksum_ok"] is False and all(m["checksum_ok"] for m in b["messages"])
    raw = bytearray(batch(MSGS))
    raw[-1] ^= 0xFF  # a body byte: the message checksum fails, the batch checksum still holds
    b, _ = parse_batch_v48(bytes(raw), 0, len(raw))
    assert [m["checksum_ok"] for m in b["messages"]] == [True, False]
    unsent = bytearray(batch(MSGS))
    unsent[40:48] = bytes(8)  # zero batch checksum: not verified
    assert parse_batch_v48(bytes(unsent), 0, len(unsent))[0]["batch_checksum_ok"] is None


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:100],  # header truncated
        lambda b: b[:-1],  # batch length runs past the data
        lambda b: b[:60] + b"\x01" + b[61:],  # reserved header bytes
        lambda b: b[: 256 + 40] + b"\x01" + b[256 + 41 :],  # reserved message bytes
        lambda b: b[:48] + u32(3) + b[52:],  # count says 3
    ],
)
def test_bad_batches_raise(damage):
    raw = damage(batch(MSGS))
    with pytest.raises(DecodeError):
        parse_batch_v48(raw, 0, len(raw))


def test_poll_reply_with_two_batches():
    two = batch(MSGS[:1], pid=1, base=0, base_ts=BASE_TS, deltas=(0,)) + batch(
        MSGS[1:], pid=1, base=1, base_ts=BASE_TS + 9, deltas=(0,)
    )
    out = parse_polled(u32(1) + u64(1) + u32(2) + two)
    assert out["format"] == "v48_batch" and len(out["batches"]) == 2
    assert out["messages"].offsets == [0, 1]
    assert out["batch_checksum_ok"] is True
    with pytest.raises(DecodeError):  # the head's count must match the batches
        parse_polled(u32(1) + u64(1) + u32(3) + two)


def test_vsr_send_poll_store_rows():
    rows = conversation(batch(MSGS, pid=3, base=0, base_ts=BASE_TS), u32(0))
    cmds = table(rows, "commands")
    tables.conform("commands", cmds)
    assert [(c["command"], c["decode_status"]) for c in cmds] == [
        ("LOGIN_REGISTER", "ok"),
        ("LOGIN_REGISTER", "ok"),
        ("SEND_MESSAGES", "ok"),
        ("SEND_MESSAGES", "ok"),
        ("POLL_MESSAGES", "ok"),
        ("POLL_MESSAGES", "ok"),
        ("STORE_CONSUMER_OFFSET", "ok"),
        ("STORE_CONSUMER_OFFSET", "ok"),
    ]
    reg = json.loads(cmds[1]["details"])
    assert (reg["result_count"], reg["user_id"], reg["session"], reg["server_version"]) == (
        0,
        1,
        42,
        "0.11.0",
    )
    send = json.loads(cmds[2]["details"])
    assert send["batch"]["batch_checksum_ok"] is True and send["batch"]["origin_timestamp"] == ORIGIN
    assert cmds[2]["partition"] == 3
    assert json.loads(cmds[3]["details"])["confirmations"] == [
        {"stream_id": 1, "topic_id": 1, "partition_id": 3, "base_offset": 0}
    ]
    msgs = table(rows, "messages")
    tables.conform("messages", msgs)
    produce = [m for m in msgs if m["direction"] == "produce"]
    deliver = [m for m in msgs if m["direction"] == "deliver"]
    assert [m.get("consumer") for m in produce] == [None, None]
    assert [m["consumer"] for m in deliver] == ["group:workers", "group:workers"]
    assert [m["offset"] for m in deliver] == [0, 1] and all(m["checksum_ok"] for m in deliver)
    assert [m["message_ts_ns"] for m in deliver] == [BASE_TS * 1000] * 2  # the server's stamp
    assert [m["message_ts_ns"] for m in produce] == [ORIGIN * 1000, (ORIGIN + 7) * 1000]  # producer clock
    assert [json.loads(m["details"])["origin_timestamp"] for m in deliver] == [ORIGIN, ORIGIN + 7]
    assert [m["message_id"] for m in deliver] == [m["message_id"] for m in produce]
    # the reply's confirmation places the produce rows: base offset 0 + each one's offset delta
    assert [(m["partition"], m["offset"]) for m in produce] == [(3, 0), (3, 1)]
    acks = table(rows, "acks")
    tables.conform("acks", acks)
    assert [
        (a["ack_type"], a.get("consumer"), a["partition"], a["offset"], a["error_code"]) for a in acks
    ] == [
        ("iggy_send", None, 3, 0, 0),  # the SEND_MESSAGES reply: partition 3 written from offset 0
        ("iggy_offset", "group:workers", 3, 1, 0),  # auto-commit poll
        ("iggy_offset", "group:workers", 3, 1, 0),  # STORE_CONSUMER_OFFSET
    ]
    send_ack = acks[0]
    assert send_ack["correlation_id"] == cmds[2]["correlation_id"] and send_ack["ack_latency_us"] >= 0


def test_vsr_result_section_rejection_is_the_error_code():
    rows = conversation(batch(MSGS, pid=3, base_ts=BASE_TS), u32(1) + u32(0) + u32(5000))
    store = [c for c in table(rows, "commands") if c["command"] == "STORE_CONSUMER_OFFSET"][1]
    assert store["error_code"] == 5000 and store["decode_status"] == "ok"
    assert json.loads(store["details"])["results"] == [{"index": 0, "result": 5000}]
    lat = [r for r in table(rows, "latencies") if r["request_command"] == "STORE_CONSUMER_OFFSET"]
    assert lat[0]["error_code"] == 5000
    ack = [a for a in table(rows, "acks") if a["offset"] == 1 and a["error_code"] == 5000]
    assert len(ack) == 1 and ack[0]["consumer"] == "group:workers"


def test_vsr_poll_with_bad_batch_checksum_is_flagged():
    rows = conversation(batch(MSGS, pid=3, base_ts=BASE_TS, bad_batch_sum=True), u32(0))
    poll = [c for c in table(rows, "commands") if c["command"] == "POLL_MESSAGES"][1]
    assert poll["decode_status"] == "checksum_mismatch"
    assert json.loads(poll["details"])["batch_checksum_ok"] is False
    deliver = [m for m in table(rows, "messages") if m["direction"] == "deliver"]
    assert len(deliver) == 2 and all(m["checksum_ok"] for m in deliver)  # messages themselves verify


# GetStreamResponse: id 5, created_at, topics_count 1, size, messages_count, name "s2", options
# block (u32 length 0); then one TopicHeader: id 2, created_at, partitions 1, expiry 0,
# compression 1, max size 0, size 0, messages 4, name "t", options (one string pair), derived ().
OPT = b"\x02" + u32(1) + b"k" + b"\x02" + u32(1) + b"v"
TOPIC_HEADER = (
    u32(2) + u64(1_700_000_000_000_100) + u32(1) + u64(0) + u8(1) + u64(0) + u64(0) + u64(4)
    + s8("t") + u32(len(OPT)) + OPT + u32(0)
)  # fmt: skip
STREAM = u32(5) + u64(1_700_000_000_000_000) + u32(1) + u64(0) + u64(4) + s8("s2") + u32(0) + TOPIC_HEADER
PARTITION = u32(1) + u64(1_700_000_000_000_100) + u32(1) + u64(3) + u64(0) + u64(4)


@pytest.mark.parametrize("context", [b"", bytes(range(24))])
def test_vsr_create_stream_and_topic_replies(context):
    rows = run(
        [
            ("c2s", req(LOGIN, 0, 1)),
            ("s2c", rep(REGISTER_OK, 0, 1)),
            ("c2s", req(s8("s2"), 1, 128)),
            ("s2c", rep(u32(0) + STREAM, 1, 128)),
            ("c2s", req(num_id(5) + u32(1) + s8("t") + OPT, 2, 132)),
            ("s2c", rep(u32(0) + TOPIC_HEADER + PARTITION + context, 2, 132)),
            ("c2s", req(s8("s2"), 3, 128)),
            ("s2c", rep(u32(1) + u32(0) + u32(1012), 3, 128)),  # name taken: committed rejection
        ]
    )
    cmds = table(rows, "commands")
    assert all(c["decode_status"] == "ok" for c in cmds)
    stream = json.loads(cmds[3]["details"])
    assert (stream["id"], stream["name"], stream["layout"], stream["options"]) == (5, "s2", "vsr", {})
    assert stream["topics"][0]["name"] == "t" and stream["topics"][0]["options"] == {"k": "v"}
    topic = json.loads(cmds[5]["details"])
    assert cmds[5]["topic"] == "5/t" and topic["messages_count"] == 4
    assert topic["partitions"][0]["current_offset"] == 3
    assert ("context" in topic["partitions"][0]) == bool(context)
    assert cmds[7]["error_code"] == 1012
    lat = table(rows, "latencies")
    assert [r["error_code"] for r in lat] == [0, 0, 0, 1012]


def test_vsr_sync_consumer_group_request():
    body = ST + str_id("workers")
    rows = run(
        [("c2s", req(LOGIN, 0, 1)), ("s2c", rep(REGISTER_OK, 0, 1)), ("c2s", req(body, 1, 2, code=606))]
    )
    sync = table(rows, "commands")[2]
    assert (sync["command"], sync["decode_status"], sync["topic"]) == (
        "SYNC_CONSUMER_GROUP",
        "ok",
        "orders/eu",
    )
    assert json.loads(sync["details"])["group_id"]["value"] == "workers"


@pytest.mark.parametrize(("ack", "level"), [(b"", None), (b"\x01", "quorum"), (b"\x00", "no_ack")])
def test_vsr_store_offset_with_or_without_ack_level(ack, level):
    store = GROUP + ST + b"\x01" + u32(3) + u64(7) + ack
    rows = run(
        [
            ("c2s", req(LOGIN, 0, 1)),
            ("s2c", rep(REGISTER_OK, 0, 1)),
            ("c2s", req(store, 1, 164)),  # StoreConsumerOffset2
            ("s2c", rep(u32(0), 1, 164)),
        ]
    )
    cmds = table(rows, "commands")
    assert [(c["command"], c["decode_status"]) for c in cmds[2:]] == [("STORE_CONSUMER_OFFSET", "ok")] * 2
    assert json.loads(cmds[2]["details"]).get("ack_level") == level
    assert [(a["consumer"], a["offset"], a["error_code"]) for a in table(rows, "acks")] == [
        ("group:workers", 7, 0)
    ]


def test_cluster_metadata_and_sync_consumer_group_replies():
    """Non-replicated replies (no result section): GET_CLUSTER_METADATA with its four transport
    ports, role and status (responses/system/get_cluster_metadata.rs), and SYNC_CONSUMER_GROUP's
    generation and partitions (responses/consumer_groups/sync_consumer_group.rs); an empty sync
    reply (not a member) has no fields."""
    node = s32("node-1") + s32("10.0.0.7") + struct.pack("<HHHH", 8090, 8080, 3000, 8092) + u8(1) + u8(4)
    metadata = s32("prod") + u32(1) + node
    sync_req = ST + str_id("workers")
    out = run(
        [
            ("c2s", req(LOGIN, 0, 1)),
            ("s2c", rep(REGISTER_OK, 0, 1)),
            ("c2s", req(b"", 1, 2, code=12)),
            ("s2c", rep(metadata, 1, 2)),
            ("c2s", req(sync_req, 2, 2, code=606)),
            ("s2c", rep(u64(7) + u32(2) + u32(0) + u32(3), 2, 2)),
            ("c2s", req(sync_req, 3, 2, code=606)),
            ("s2c", rep(b"", 3, 2)),
        ]
    )
    cmds = table(out, "commands")
    replies = [c for c in cmds if c["direction"] == "s2c"]
    assert all(c["decode_status"] == "ok" for c in cmds)
    meta = json.loads(replies[1]["details"])
    assert meta["name"] == "prod" and meta["nodes"] == [
        {
            "name": "node-1",
            "ip": "10.0.0.7",
            "tcp_port": 8090,
            "quic_port": 8080,
            "http_port": 3000,
            "websocket_port": 8092,
            "role": 1,
            "role_name": "follower",
            "status": 4,
            "status_name": "maintenance",
        }
    ]
    assert [c["command"] for c in replies[2:]] == ["SYNC_CONSUMER_GROUP", "SYNC_CONSUMER_GROUP"]
    sync = json.loads(replies[2]["details"])
    assert sync["generation"] == 7 and sync["partitions"] == [0, 3]
    assert "generation" not in json.loads(replies[3]["details"])


@pytest.mark.parametrize(
    "reason, name, window",
    [(14, "incompatible_protocol", ("0.12.0", "0.11.0")), (9, "invalid_credentials", None)],
)
def test_eviction_reason_and_protocol_window(reason, name, window):
    """An EvictionHeader (command 13) for a client: reason byte @255; incompatible-protocol and
    malformed-login evictions carry the server's max/min protocol versions at @144/@148."""
    h = bytearray(vsr_header(13, 256, 0, 0))
    h[128:144] = (0xC0FFEE).to_bytes(16, "little")
    struct.pack_into("<II", h, 144, (0 << 20) | (12 << 10), 11 << 10)
    h[255] = reason
    cmd = table(run([("c2s", req(LOGIN, 0, 1)), ("s2c", bytes(h))]), "commands")[-1]
    d = json.loads(cmd["details"])
    assert cmd["command"] == "VSR_EVICTION" and cmd["decode_status"] == "ok"
    assert (d["reason"], d["reason_name"], d["client"]) == (reason, name, f"{0xC0FFEE:032x}")
    got = (d["server_protocol_max"], d["server_protocol_min"]) if "server_protocol_max" in d else None
    assert got == window
