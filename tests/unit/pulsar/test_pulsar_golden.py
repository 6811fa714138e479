"""Golden tests on byte-literal frames: every framing variant, and bad input that must become error
rows without losing any good frame."""

from __future__ import annotations

import json

import pytest

from brokerscope.protocols import base
from brokerscope.protocols.base import Context
from brokerscope.protocols.pulsar import PROTOCOL, framing

from . import kit as F
from .kit import T0, run


def ok_commands(out) -> list[str]:
    return [r["command"] for r in out["commands"] if r["decode_status"] == "ok"]


def test_simple_frames_connect_producer_and_redaction():
    out = run([("c2s", F.CONNECT), ("s2c", F.CONNECTED), ("c2s", F.PRODUCER), ("s2c", F.PRODUCER_SUCCESS)])
    cmds = out["commands"]
    assert [(r["direction"], r["command"], r["decode_status"]) for r in cmds] == [
        ("c2s", "CONNECT", "ok"),
        ("s2c", "CONNECTED", "ok"),
        ("c2s", "PRODUCER", "ok"),
        ("s2c", "PRODUCER_SUCCESS", "ok"),
    ]
    assert (
        cmds[0]["api_version"] == 20 and cmds[0]["size"] == len(F.CONNECT) and cmds[0]["stream_offset"] == 0
    )
    assert cmds[2]["stream_offset"] == len(F.CONNECT)
    assert cmds[2]["topic"] == cmds[3]["topic"] == "persistent://public/default/t"
    assert cmds[2]["correlation_id"] == cmds[3]["correlation_id"] == 1
    det = json.loads(cmds[0]["details"])
    assert det["auth_data"] == "<redacted 12 bytes>" and det["auth_method_name"] == "token"
    # the secret is nowhere, in any form
    blob = repr(out).encode()
    assert b"s3cr3t" not in blob and b"czNjcjN0" not in blob
    lat = {(r["request_command"], r["response_command"]): r for r in out["latencies"]}
    assert lat[("CONNECT", "CONNECTED")]["latency_us"] == 1000.0
    assert lat[("PRODUCER", "PRODUCER_SUCCESS")]["topic"] == "persistent://public/default/t"


def test_payload_frame_send_and_receipt():
    out = run([("c2s", F.PRODUCER), ("s2c", F.PRODUCER_SUCCESS), ("c2s", F.SEND_7), ("s2c", F.RECEIPT_7)])
    send = out["commands"][2]
    assert send["command"] == "SEND" and send["decode_status"] == "ok" and send["size"] == len(F.SEND_7)
    det = json.loads(send["details"])
    assert det["payload"]["checksum_ok"] is True and det["payload"]["payload_size"] == 12
    [m] = out["messages"]
    assert m["direction"] == "produce" and m["topic"] == "persistent://public/default/t"
    assert m["value"] == b"hello pulsar" and m["value_size"] == 12 and m["key"] == b"k1"
    assert m["headers"] == [{"key": "h", "value": b"v"}]
    assert m["message_id"] == "5:9:-1" and m["sequence"] == 7 and m["producer_id"] == 1
    assert m["producer_name"] == "p1" and m["message_ts_ns"] == 1_700_000_000_123_000_000
    assert m["checksum_ok"] is True and m["compression"] == "NONE"
    assert json.loads(m["details"])["event_time_ms"] == 1_700_000_000_100
    [a] = out["acks"]
    assert (a["ack_type"], a["message_id"], a["sequence"], a["producer_id"]) == (
        "pulsar_receipt",
        "5:9:-1",
        7,
        1,
    )
    assert a["ack_latency_us"] == 1000.0 and a["topic"] == "persistent://public/default/t"
    sends = [r for r in out["latencies"] if r["request_command"] == "SEND"]
    assert [(r["response_command"], r["correlation_id"], r["latency_us"]) for r in sends] == [
        ("SEND_RECEIPT", 7, 1000.0)
    ]


def test_batch_split_zlib_and_per_message_receipts():
    out = run([("c2s", F.PRODUCER), ("c2s", F.SEND_BATCH), ("s2c", F.RECEIPT_8)])
    msgs = out["messages"]
    assert [(m["message_id"], m["value"], m["key"], m["sequence"]) for m in msgs] == [
        ("5:10:0", b"first", b"a", 8),
        ("5:10:1", b"second", None, 9),
    ]
    assert [m["headers"] for m in msgs] == [[{"key": "i", "value": b"0"}], [{"key": "i", "value": b"1"}]]
    assert {m["compression"] for m in msgs} == {"ZLIB"}
    assert [json.loads(m["details"])["num_messages_in_batch"] for m in msgs] == [2, 2]
    assert [(a["message_id"], a["sequence"]) for a in out["acks"]] == [("5:10:0", 8), ("5:10:1", 9)]
    assert json.loads(out["acks"][0]["details"])["highest_sequence_id"] == 9


def test_broker_entry_metadata_lz4_batch_delivery_and_acks():
    out = run(
        [
            ("c2s", F.SUBSCRIBE),
            ("s2c", F.SUCCESS_2),
            ("s2c", F.MESSAGE_BEM),
            ("c2s", F.ACK_IND),
            ("c2s", F.ACK_CUM),
            ("s2c", F.ACK_RESPONSE_3),
        ]
    )
    assert all(r["decode_status"] == "ok" for r in out["commands"])
    msgs = out["messages"]
    assert [(m["direction"], m["message_id"], m["value"], m["compression"]) for m in msgs] == [
        ("deliver", "5:10:0", b"first", "LZ4"),
        ("deliver", "5:10:1", b"second", "LZ4"),
    ]
    d = json.loads(msgs[0]["details"])
    assert d["broker_entry"] == {"broker_timestamp": 1_700_000_000_300, "index": 41}
    assert d["subscription"] == "s1" and msgs[0]["topic"] == "persistent://public/default/t"
    assert [m["consumer"] for m in msgs] == ["s1", "s1"]  # the subscription the message went to
    acks = out["acks"]
    ind = [a for a in acks if a["ack_type"] == "pulsar_ack"]
    assert [(a["message_id"], a["consumer"], a["ack_latency_us"]) for a in ind] == [("5:10:1", "s1", 1000.0)]
    cum = [a for a in acks if a["ack_type"] == "pulsar_ack_cumulative"]
    assert [a["message_id"] for a in cum] == ["5:10:0", "5:10:1"]
    assert cum[0]["ack_latency_us"] == 2000.0 and cum[0]["correlation_id"] == 3
    assert json.loads(cum[1]["details"]).get("already_acked") is True
    [resp] = [a for a in acks if a["ack_type"] == "pulsar_ack_response"]
    assert resp["correlation_id"] == 3 and resp["ack_latency_us"] == 1000.0
    assert ("ACK", "ACK_RESPONSE") in {
        (r["request_command"], r["response_command"]) for r in out["latencies"]
    }


def test_deliver_consumer_without_subscribe_is_the_consumer_id_as_acks_use_it():
    """Mid-stream: the SUBSCRIBE was not captured; deliver rows and acks both name the consumer id."""
    out = run([("s2c", F.MESSAGE_BEM), ("c2s", F.ACK_IND)])
    msgs = out["messages"]
    assert len(msgs) == 2 and all(m["direction"] == "deliver" for m in msgs)
    cid = json.loads(msgs[0]["details"])["consumer_id"]
    assert "subscription" not in json.loads(msgs[0]["details"])
    assert {m["consumer"] for m in msgs} == {str(cid)}
    [ack] = [a for a in out["acks"] if a["ack_type"] == "pulsar_ack"]
    assert ack["consumer"] == str(cid) and ack["message_id"] == "5:10:1"


def test_chunked_message_reassembled():
    out = run(
        [
            ("c2s", F.PRODUCER),
            ("c2s", F.SEND_CHUNK0),
            ("s2c", F.RECEIPT_10_0),
            ("c2s", F.SEND_CHUNK1),
            ("s2c", F.RECEIPT_10_1),
        ]
    )
    [m] = out["messages"]
    assert m["value"] == b"chunked-message-body!" and m["message_id"] == "5:12:-1" and m["sequence"] == 10
    assert json.loads(m["details"])["chunks"]["num_chunks"] == 2
    assert [a["message_id"] for a in out["acks"]] == ["5:11:-1", "5:12:-1"]
    assert [json.loads(a["details"])["chunk"]["chunk_id"] for a in out["acks"]] == [0, 1]


def test_chunked_message_incomplete_is_flagged():
    out = run([("c2s", F.PRODUCER), ("c2s", F.SEND_CHUNK1)])
    [m] = out["messages"]
    assert m["decode_status"] == "chunk_incomplete" and m["value"] is None
    assert m["consumer"] is None  # produce rows name no consumer
    assert json.loads(m["details"])["chunks_seen"] == [1]


def test_incomplete_delivered_chunk_names_its_subscription():
    from brokerscope.protocols.pulsar.gen import pulsar_api_pb2 as pb

    c = pb.BaseCommand(type=pb.BaseCommand.MESSAGE)
    c.message.consumer_id = 2  # F.SUBSCRIBE: consumer 2, subscription s1
    c.message.message_id.ledger_id, c.message.message_id.entry_id = 7, 3
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1_700_000_000_000)
    md.uuid, md.chunk_id, md.num_chunks_from_msg, md.total_chunk_msg_size = "p-1", 0, 2, 8
    out = run([("c2s", F.SUBSCRIBE), ("s2c", F.SUCCESS_2), ("s2c", framing.encode_frame(c, md, b"half"))])
    [m] = out["messages"]
    assert (m["direction"], m["decode_status"], m["consumer"]) == ("deliver", "chunk_incomplete", "s1")


def test_checksum_mismatch_still_decoded_and_neighbours_intact():
    out = run([("c2s", F.PRODUCER), ("c2s", F.SEND_7_BADCRC), ("c2s", F.SEND_7), ("s2c", F.PING)])
    st = [(r["command"], r["decode_status"]) for r in out["commands"]]
    assert st == [("PRODUCER", "ok"), ("SEND", "checksum_mismatch"), ("SEND", "ok"), ("PING", "ok")]
    bad = out["commands"][1]
    assert "crc32c" in bad["decode_error"] and bad.get("raw") is None  # decoded: no raw needed
    assert [(m["value"], m["checksum_ok"], m["decode_status"]) for m in out["messages"]] == [
        (b"hello pulsar", False, "checksum_mismatch"),
        (b"hello pulsar", True, "ok"),
    ]


def test_truncated_frame_at_end_of_capture():
    out = run([("c2s", F.CONNECT), ("c2s", F.PRODUCER), ("c2s", F.SEND_7[:-5])])
    assert ok_commands(out) == ["CONNECT", "PRODUCER"]
    [t] = [r for r in out["commands"] if r["decode_status"] == "truncated"]
    assert t["size"] == len(F.SEND_7) - 5 and t["stream_offset"] == len(F.CONNECT) + len(F.PRODUCER)
    assert t["raw"] == F.SEND_7[:-5]


def test_inner_sizes_wrong_is_malformed_and_next_frame_kept():
    # metadata size field (bytes 22..25 of SEND_7: after total 4, cmd size 4, cmd 8, magic 2, crc 4) claims more than the frame holds
    bad = bytearray(F.SEND_7)
    bad[22:26] = (0xFFFF).to_bytes(4, "big")
    out = run([("c2s", F.PRODUCER), ("c2s", bytes(bad)), ("c2s", F.SEND_7), ("s2c", F.RECEIPT_7)])
    st = [(r["command"], r["decode_status"]) for r in out["commands"]]
    assert st[1] == ("SEND", "malformed") and out["commands"][1]["raw"] == bytes(bad)
    assert st[2:] == [("SEND", "ok"), ("SEND_RECEIPT", "ok")]
    assert [m["value"] for m in out["messages"]] == [b"hello pulsar"]


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00garbage\xff" * 5,
        b"\xff\xff\xff\xff\xff\xff\xff\xff\x08\x02",
        b"\x00\x00\x00\x05\x00\x00\x00\x09\x08\x13junk",
    ],
)
def test_garbage_between_frames_becomes_one_error_row(garbage):
    out = run(
        [("c2s", F.CONNECT), ("c2s", garbage), ("c2s", F.PRODUCER), ("c2s", F.SEND_7), ("s2c", F.CONNECTED)]
    )
    assert ok_commands(out) == ["CONNECT", "CONNECTED", "PRODUCER", "SEND"] or ok_commands(out) == [
        "CONNECT",
        "PRODUCER",
        "SEND",
        "CONNECTED",
    ]
    bad = [r for r in out["commands"] if r["decode_status"] != "ok"]
    assert [(r["decode_status"], r["size"], r["stream_offset"], r.get("raw")) for r in bad] == [
        ("malformed", len(garbage), len(F.CONNECT), None)  # bytes of no frame type: not kept
    ]
    assert [m["value"] for m in out["messages"]] == [b"hello pulsar"]


def test_midstream_start_resyncs_on_first_plausible_frame():
    out = run([("c2s", F.SEND_7[20:] + F.PRODUCER + F.SEND_7)])
    assert ok_commands(out) == ["PRODUCER", "SEND"]
    assert [r["decode_status"] for r in out["commands"]][0] == "malformed"


STREAM_C2S = [F.CONNECT, F.PRODUCER, F.SEND_7, F.SEND_BATCH, F.SEND_CHUNK0, F.SEND_CHUNK1, F.PING]
STREAM_S2C = [
    F.CONNECTED,
    F.PRODUCER_SUCCESS,
    F.RECEIPT_7,
    F.RECEIPT_8,
    F.RECEIPT_10_0,
    F.RECEIPT_10_1,
    F.PONG,
]


def _strip(out):
    keep = ("direction", "command", "decode_status", "size", "stream_offset", "details")
    cmds = [tuple(r.get(k) for k in keep) for r in out["commands"]]
    msgs = [(m["message_id"], m["value"], m["key"]) for m in out["messages"]]
    acks = [(a["ack_type"], a["message_id"]) for a in out["acks"]]
    return cmds, msgs, acks


def _interleaved():
    feeds = []
    for a, b in zip(STREAM_C2S, STREAM_S2C, strict=True):
        feeds += [("c2s", a), ("s2c", b)]
    return feeds


def test_every_split_point_gives_the_same_rows():
    whole = run(_interleaved())
    ref = _strip(whole)
    assert len(ref[1]) == 4 and all(s == "ok" for _, _, s, *_ in ref[0])
    c2s = b"".join(STREAM_C2S)
    for cut in range(1, len(c2s)):
        feeds = [("c2s", c2s[:cut]), ("c2s", c2s[cut:])] + [("s2c", b) for b in STREAM_S2C]
        got = _strip(run(feeds))
        assert sorted(got[0], key=repr) == sorted(ref[0], key=repr), cut
        assert got[1] == ref[1] and sorted(got[2]) == sorted(ref[2]), cut


def test_one_byte_at_a_time():
    assert _strip(run(_interleaved(), chunk=1)) == _strip(run(_interleaved()))


def test_oversize_frame_recorded_and_skipped():
    ctx = Context(max_frame_bytes=80)
    assert len(F.SEND_BATCH) > 80 >= len(F.SEND_7)
    out = run(
        [("c2s", F.PRODUCER), ("c2s", F.SEND_BATCH), ("c2s", F.SEND_7), ("c2s", F.PING)], ctx=ctx, chunk=7
    )
    st = [(r["command"], r["decode_status"]) for r in out["commands"]]
    assert st == [("PRODUCER", "ok"), ("SEND", "oversize"), ("SEND", "ok"), ("PING", "ok")]
    assert out["commands"][1]["size"] == len(F.SEND_BATCH) and out["commands"][1].get("raw") is None
    assert [m["value"] for m in out["messages"]] == [b"hello pulsar"]


def test_a_gap_past_the_frame_end_is_one_record_up_to_the_next_frame():
    out = run(
        [
            ("c2s", F.PRODUCER),
            ("c2s", F.SEND_7[:30]),
            ("gap", ("c2s", 100)),
            ("c2s", b"xx" + F.PING + F.SEND_7),
        ]
    )
    st = [(r["command"], r["decode_status"]) for r in out["commands"]]
    assert st[0] == ("PRODUCER", "ok") and st[1] == (None, "gap")
    # the partial frame, the missing bytes and the stray bytes before the next frame
    assert out["commands"][1]["size"] == 30 + 100 + 2 and len(st) == 4
    assert st[-2:] == [("PING", "ok"), ("SEND", "ok")]
    assert out["commands"][-1]["stream_offset"] == len(F.PRODUCER) + 30 + 100 + 2 + len(F.PING)


def test_unanswered_requests_become_latency_rows_at_close():
    out = run([("c2s", F.CONNECT), ("c2s", F.PRODUCER), ("c2s", F.SEND_7), ("c2s", F.PING)])
    lat = {(r["request_command"], r["response_command"]) for r in out["latencies"]}
    assert lat == {("CONNECT", None), ("PRODUCER", None), ("SEND", None), ("PING", None)}
    [m] = out["messages"]
    assert m["value"] == b"hello pulsar" and m["message_id"] is None  # no receipt: no id, still a row


def test_frame_encoder_reproduces_the_literal():
    pf = framing.parse_frame(F.SEND_7[4:])
    assert pf.status == "ok" and pf.checksum_ok
    assert framing.encode_frame(pf.cmd, pf.metadata, pf.payload) == F.SEND_7
    pf = framing.parse_frame(F.MESSAGE_BEM[4:])
    assert pf.broker_entry.index == 41
    assert framing.encode_frame(pf.cmd, pf.metadata, pf.payload, pf.broker_entry) == F.MESSAGE_BEM


def test_sniff():
    assert PROTOCOL.sniff(F.CONNECT, F.CONNECTED) >= 0.95
    assert PROTOCOL.sniff(F.CONNECT[:20], b"") == 0.6
    assert PROTOCOL.sniff(b"", F.CONNECTED) == 0.8
    assert PROTOCOL.sniff(F.PRODUCER, b"") == 0.0  # not a session start
    kafka_api_versions = bytes.fromhex("0000001c00120003000000010009636f6e73756d657200")
    assert PROTOCOL.sniff(kafka_api_versions, b"") == 0.0
    assert PROTOCOL.sniff(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 200 OK\r\n") == 0.0
    assert PROTOCOL.default_ports == (6650,)
    assert base.get("pulsar") is PROTOCOL


def _cmd(t: int, **fields) -> bytes:
    from brokerscope.protocols.pulsar.gen import pulsar_api_pb2 as pb

    c = pb.BaseCommand(type=t)
    body = getattr(c, framing.BODY_FIELD[t])
    body.SetInParent()
    for k, v in fields.items():
        setattr(body, k, v)
    return framing.encode_frame(c)


def test_request_pairing_topics_and_errors():
    from brokerscope.protocols.pulsar.gen import pulsar_api_pb2 as pb

    T = pb.BaseCommand
    topic = "persistent://public/default/orders-partition-3"
    out = run(
        [
            ("c2s", F.CONNECT),
            ("s2c", F.CONNECTED),
            ("c2s", _cmd(T.LOOKUP, topic=topic, request_id=5)),
            (
                "s2c",
                _cmd(T.LOOKUP_RESPONSE, request_id=5, response=2, error=pb.TopicNotFound, message="nope"),
            ),
            (
                "c2s",
                _cmd(T.SUBSCRIBE, topic=topic, subscription="audit", sub_type=1, consumer_id=4, request_id=6),
            ),
            ("s2c", _cmd(T.SUCCESS, request_id=6)),
            ("c2s", _cmd(T.FLOW, consumer_id=4, message_permits=1000)),
            ("c2s", _cmd(T.GET_LAST_MESSAGE_ID, consumer_id=4, request_id=7)),
            ("s2c", F.PING),  # the broker pings, the client answers
            ("c2s", F.PONG),
            ("c2s", _cmd(T.PRODUCER, topic=topic, producer_id=9, request_id=8, producer_access_mode=2)),
            ("s2c", _cmd(T.PRODUCER_SUCCESS, request_id=8, producer_name="ex", producer_ready=False)),
            ("s2c", _cmd(T.PRODUCER_SUCCESS, request_id=8, producer_name="ex", producer_ready=True)),
            ("c2s", _cmd(T.CLOSE_CONSUMER, consumer_id=4, request_id=10)),
            ("s2c", _cmd(T.ERROR, request_id=10, error=pb.ConsumerNotFound, message="gone")),
        ]
    )
    assert {r["decode_status"] for r in out["commands"]} == {"ok"}
    by = {r["command"]: r for r in out["commands"]}
    assert by["LOOKUP_RESPONSE"]["error_code"] == pb.TopicNotFound and by["LOOKUP_RESPONSE"]["topic"] == topic
    assert by["FLOW"]["topic"] == topic and by["FLOW"]["partition"] == 3
    assert by["CLOSE_CONSUMER"]["topic"] == topic and by["ERROR"]["correlation_id"] == 10
    lat = [
        (r["request_command"], r["response_command"], r["correlation_id"], r["error_code"])
        for r in out["latencies"]
    ]
    assert ("LOOKUP", "LOOKUP_RESPONSE", 5, pb.TopicNotFound) in lat
    assert ("SUBSCRIBE", "SUCCESS", 6, None) in lat
    assert ("PING", "PONG", None, None) in lat
    assert ("CLOSE_CONSUMER", "ERROR", 10, pb.ConsumerNotFound) in lat
    # the producer waited for exclusive access: one latency, to the PRODUCER_SUCCESS that made it ready
    prod = [r for r in out["latencies"] if r["request_command"] == "PRODUCER"]
    assert len(prod) == 1 and prod[0]["response_ts_ns"] == T0 + 13_000_000
    # never answered
    assert ("GET_LAST_MESSAGE_ID", None, 7, None) in lat


def test_unknown_command_type_is_skipped_cleanly():
    from brokerscope.protocols.pulsar.gen import pulsar_api_pb2 as pb

    future = framing.encode_frame(pb.BaseCommand(type=pb.BaseCommand.PING))
    future = future[:8] + b"\x08\x63" + future[10:]  # type 99: not in this protocol version
    out = run([("c2s", F.CONNECT + future + F.PRODUCER)])
    st = [(r["command"], r["decode_status"], r["command_code"]) for r in out["commands"]]
    assert st == [("CONNECT", "ok", 2), ("UNKNOWN_99", "unknown_command", 99), ("PRODUCER", "ok", 5)]


def test_roles_follow_connect_when_the_driver_swapped_them():
    """The side that sends CONNECT is the client even if it arrives as s2c."""
    out = run([("s2c", F.CONNECT), ("c2s", F.CONNECTED), ("s2c", F.PRODUCER), ("c2s", F.PRODUCER_SUCCESS)])
    lat = {(r["request_command"], r["response_command"]) for r in out["latencies"]}
    assert lat == {("CONNECT", "CONNECTED"), ("PRODUCER", "PRODUCER_SUCCESS")}


def test_produce_rows_not_held_forever(monkeypatch):
    from brokerscope.protocols.pulsar import pairing

    monkeypatch.setattr(pairing, "HOLD_BYTES", 20)  # one 12-byte value fits, two do not
    conv_rows = run(
        [("c2s", F.PRODUCER), ("c2s", F.SEND_7), ("c2s", F.SEND_BATCH), ("s2c", F.RECEIPT_8)], close=False
    )
    msgs = conv_rows["messages"]
    # SEND_7 gave up waiting (no id); the batch got its receipt
    assert [(m["value"], m["message_id"]) for m in msgs] == [
        (b"hello pulsar", None),
        (b"first", "5:10:0"),
        (b"second", "5:10:1"),
    ]
    assert [(r["request_command"], r["response_command"]) for r in conv_rows["latencies"]] == [
        ("SEND", None),
        ("SEND", "SEND_RECEIPT"),
    ]


def test_topic_lists_fill_the_topics_column():
    from brokerscope.protocols.pulsar.gen import pulsar_api_pb2 as pb

    c = pb.BaseCommand(type=pb.BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE)
    c.get_topics_of_namespace_response.request_id = 4
    c.get_topics_of_namespace_response.topics.extend(["persistent://t/ns/a", "persistent://t/ns/b"])
    q = _cmd(pb.BaseCommand.GET_TOPICS_OF_NAMESPACE, request_id=4, namespace="t/ns")
    out = run([("c2s", F.CONNECT), ("c2s", q), ("s2c", framing.encode_frame(c))])
    assert out["commands"][-1]["topics"] == ["persistent://t/ns/a", "persistent://t/ns/b"]
    assert ("GET_TOPICS_OF_NAMESPACE", "GET_TOPICS_OF_NAMESPACE_RESPONSE") in {
        (r["request_command"], r["response_command"]) for r in out["latencies"]
    }


def test_batch_index_ack_set():
    """ack_set bits: set = still unacknowledged, clear = acknowledged."""
    from brokerscope.protocols.pulsar.gen import pulsar_api_pb2 as pb

    def ack(ack_set, batch_size=None):
        c = pb.BaseCommand(type=pb.BaseCommand.ACK)
        c.ack.consumer_id, c.ack.ack_type = 2, 0
        m = c.ack.message_id.add(ledger_id=5, entry_id=10)
        m.ack_set.extend(ack_set)
        if batch_size:
            m.batch_size = batch_size
        return framing.encode_frame(c)

    # delivered batch of 2 (MESSAGE_BEM): 0b10 -> index 0 acked, index 1 not
    out = run([("c2s", F.SUBSCRIBE), ("s2c", F.MESSAGE_BEM), ("c2s", ack([0b10]))])
    assert [(a["message_id"], a["ack_latency_us"]) for a in out["acks"]] == [("5:10:0", 1000.0)]
    # no delivery captured, batch size on the wire
    out = run([("c2s", F.SUBSCRIBE), ("c2s", ack([0b1010], batch_size=5))])
    assert [a["message_id"] for a in out["acks"]] == ["5:10:0", "5:10:2", "5:10:4"]
    # neither: only indexes below the highest unacked one
    out = run([("c2s", F.SUBSCRIBE), ("c2s", ack([0b1010]))])
    assert [a["message_id"] for a in out["acks"]] == ["5:10:0", "5:10:2"]
    assert json.loads(out["acks"][0]["details"])["batch_size_unknown"] is True


@pytest.mark.parametrize("chunk", [5, 64, None])
def test_resync_after_an_absurd_size_finds_the_real_frames(chunk):
    """A SEND whose size field claims 2^31-1 bytes is recorded as oversize and not skipped; the
    damaged frame's tail holds a PING header claiming 1 MiB (a frame inside a payload), which can
    never be confirmed; the three SENDs and the PING after it are decoded."""
    from brokerscope.protocols.pulsar.gen import pulsar_api_pb2 as pb

    bad = bytearray(F.SEND_7)
    bad[0:4] = (2**31 - 1).to_bytes(4, "big")
    false_ping = bytearray(framing.encode_frame(pb.BaseCommand(type=pb.BaseCommand.PING)))
    false_ping[0:4] = (1 << 20).to_bytes(4, "big")
    c2s = bytes(bad) + bytes(false_ping) + F.SEND_7 + F.SEND_7 + F.SEND_7 + F.PING
    out = run([("c2s", F.PRODUCER), ("s2c", F.PRODUCER_SUCCESS), ("c2s", c2s)], chunk=chunk)
    st = [(r["direction"], r["command"], r["decode_status"]) for r in out["commands"]]
    assert st == [
        ("c2s", "PRODUCER", "ok"),
        ("s2c", "PRODUCER_SUCCESS", "ok"),
        ("c2s", "SEND", "oversize"),
        *[("c2s", "SEND", "ok")] * 3,
        ("c2s", "PING", "ok"),
    ]
    # the damaged frame and the false header after it are one row: every byte in exactly one row
    assert out["commands"][2]["size"] == len(bad) + len(false_ping) and out["commands"][2].get("raw") is None
    assert sum(r["size"] for r in out["commands"] if r["direction"] == "c2s") == len(F.PRODUCER) + len(c2s)
    assert [m["value"] for m in out["messages"]] == [b"hello pulsar"] * 3


def test_consumer_stats_answer_names_the_consumer_and_its_subscription():
    """CONSUMER_STATS names a consumer id only; its answer (msg_backlog: the subscription's) gains
    the consumer id and subscription of its request, which lag.py reads. A request for a consumer
    never subscribed on the connection gets the id alone; an error answer has no backlog."""
    out = run(
        [
            ("c2s", F.CONNECT),
            ("s2c", F.CONNECTED),
            ("c2s", F.SUBSCRIBE),
            ("s2c", F.SUCCESS_2),
            ("c2s", F.CONSUMER_STATS_4),
            ("s2c", F.CONSUMER_STATS_RESPONSE_4),
            ("c2s", F.CONSUMER_STATS_5),
            ("s2c", F.CONSUMER_STATS_ERROR_5),
        ]
    )
    assert {r["decode_status"] for r in out["commands"]} == {"ok"}
    stats = [r for r in out["commands"] if r["command"].startswith("CONSUMER_STATS")]
    assert [(r["command"], r["direction"], r["correlation_id"]) for r in stats] == [
        ("CONSUMER_STATS", "c2s", 4),
        ("CONSUMER_STATS_RESPONSE", "s2c", 4),
        ("CONSUMER_STATS", "c2s", 5),
        ("CONSUMER_STATS_RESPONSE", "s2c", 5),
    ]
    req, resp, req9, err = stats
    topic = "persistent://public/default/t"
    assert (req["topic"], resp["topic"], resp["partition"]) == (topic, topic, None)
    assert json.loads(req["details"]) == {"request_id": 4, "consumer_id": 2}
    assert json.loads(resp["details"]) == {
        "request_id": 4,
        "consumer_name": "c2",
        "available_permits": 1000,
        "unacked_messages": 3,
        "msg_backlog": 7,
        "consumer_id": 2,
        "subscription": "s1",
    }
    assert req9["topic"] is None and err["error_code"] == 13
    assert json.loads(err["details"]) == {
        "request_id": 5,
        "error_code": "ConsumerNotFound",
        "error_message": "no consumer",
        "consumer_id": 9,
    }
    lat = [(r["request_command"], r["response_command"], r["correlation_id"]) for r in out["latencies"]]
    assert ("CONSUMER_STATS", "CONSUMER_STATS_RESPONSE", 4) in lat
    assert ("CONSUMER_STATS", "CONSUMER_STATS_RESPONSE", 5) in lat
