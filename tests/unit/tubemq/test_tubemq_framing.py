"""Golden-byte tests of TubeMQ framing and the RPC envelope: good frames kept, errors are rows."""

from __future__ import annotations

import json
import random
import struct

import pytest

from brokerscope import tables
from brokerscope.protocols.base import C2S, S2C
from brokerscope.protocols.framer import Framer
from brokerscope.protocols.tubemq.framing import TubeRules
from brokerscope.protocols.tubemq.gen import tubemq_broker_pb2 as brk
from tests.support.damage import damage

from .kit import flat, frame, new_conv, request, response, run

# consumerCommitC2B request, serial 7, written out byte by byte:
#   ff7ff4fe            begin token
#   00000007            serialNo 7
#   00000001            listSize 1
#   0000001c            block 0: 28 bytes
#   02 0800             RpcConnHeader{flag=0}
#   04 0803 1002        RequestHeader{serviceType=3 (broker write), protocolVer=2}
#   13 0812 10904e 1a0c RequestBody{method=18, timeout=10000, request=<12 bytes>}
#      0a026331 120174 1800 220167   CommitOffsetRequestC2B{clientId="c1", topicName="t",
#                                                           partitionId=0, groupName="g"}
COMMIT_REQ = bytes.fromhex(
    "ff7ff4fe00000007000000010000001c020800040803100213081210904e1a0c0a0263311201741800220167"
)
# its response: RpcConnHeader{flag=1}, ResponseHeader{status=SUCCESS},
# RspResponseBody{method=18, data=CommitOffsetResponseB2C{success, errCode=200, errMsg="OK", currOffset=40}}
COMMIT_RSP = bytes.fromhex("ff7ff4fe0000000700000001000000160208010208000f0812120b080110c8011a024f4b2028")


def _varint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def _conform(out):
    for t, rows in out.items():
        tables.conform(t, rows)


def test_golden_request_and_response():
    assert len(COMMIT_REQ) == 12 + 4 + 28
    out = run(new_conv(), [(C2S, COMMIT_REQ), (S2C, COMMIT_RSP)])
    _conform(out)
    req, rsp = out["commands"]
    assert req["command"] == "consumerCommitC2B" and req["command_code"] == 18
    assert req["correlation_id"] == 7 and req["size"] == len(COMMIT_REQ) and req["stream_offset"] == 0
    assert (req["topic"], req["partition"], req["client_id"], req["api_version"]) == ("t", 0, "c1", 2)
    d = json.loads(req["details"])
    assert d["service"] == "broker_write" and d["timeout_ms"] == 10000 and d["blocks"] == [28]
    assert d["request"]["groupName"] == "g"
    assert rsp["decode_status"] == "ok" and rsp["error_code"] == 0 and rsp["direction"] == "s2c"
    assert json.loads(rsp["details"])["response"]["currOffset"] == 40
    (lat,) = out["latencies"]
    assert lat["request_command"] == lat["response_command"] == "consumerCommitC2B"
    assert lat["correlation_id"] == 7 and lat["latency_us"] == 1.0
    (ack,) = out["acks"]
    assert (ack["ack_type"], ack["topic"], ack["partition"], ack["offset"], ack["consumer"]) == (
        "tubemq_commit",
        "t",
        0,
        40,
        "g",
    )


def test_every_split_point_gives_the_same_rows():
    whole = run(new_conv(), [(C2S, COMMIT_REQ), (S2C, COMMIT_RSP)])
    for cut in range(1, len(COMMIT_REQ)):
        out = run(new_conv(), [(C2S, COMMIT_REQ[:cut]), (C2S, COMMIT_REQ[cut:]), (S2C, COMMIT_RSP)], step=0)
        assert [r["decode_status"] for r in out["commands"]] == ["ok", "ok"], cut
        assert out["commands"][0]["details"] == whole["commands"][0]["details"]
        assert len(out["acks"]) == 1
    # one byte per TCP segment, with a distinct time each: first/last byte times follow
    out = run(new_conv(), [(C2S, COMMIT_REQ[i : i + 1]) for i in range(len(COMMIT_REQ))], step=10)
    (req,) = out["commands"]
    assert req["decode_status"] == "ok"
    assert req["ts_end_ns"] - req["ts_ns"] == 10 * (len(COMMIT_REQ) - 1)


def test_multi_block_payload():
    # a 20,000-byte message needs three blocks: 8192 + 8192 + the rest
    payload = bytes(range(256)) * 78 + b"tail"
    attr = b"src=golden"
    data = struct.pack(">i", len(attr)) + attr + payload
    msg = brk.SendMessageRequestP2B(
        clientId="p",
        topicName="big",
        partitionId=1,
        data=data,
        flag=1,
        checkSum=-1,
        sentAddr=0x0A000001,
        msgTime="202401020304",
    )
    wire = request(3, 3, 13, msg)
    (_, _, nblocks) = struct.unpack_from(">III", wire)
    assert nblocks == 3
    first = struct.unpack_from(">I", wire, 12)[0]
    assert first == 8192
    out = run(new_conv(), [(C2S, wire[:9000]), (C2S, wire[9000:])])
    _conform(out)
    (cmd,) = out["commands"]
    assert cmd["decode_status"] == "ok" and cmd["size"] == len(wire)
    blocks = json.loads(cmd["details"])["blocks"]
    assert blocks[:2] == [8192, 8192] and sum(blocks) == len(wire) - 12 - 12
    (m,) = out["messages"]
    assert m["direction"] == "produce" and m["value"] == payload and m["value_size"] == len(payload)
    assert m["headers"] == [{"key": "src", "value": b"golden"}]
    assert m["topic"] == "big" and m["partition"] == 1
    assert m["message_ts_ns"] == 1704164640 * 10**9
    # the same frame with 1000-byte blocks decodes to the same message
    body = wire[16 : 16 + 8192] + wire[16 + 8192 + 4 : 16 + 8192 + 4 + 8192] + wire[12 + 2 * 8196 + 4 :]
    out2 = run(new_conv(), [(C2S, frame(3, body, block=1000))])
    assert out2["messages"][0]["value"] == payload
    assert len(json.loads(out2["commands"][0]["details"])["blocks"]) == (len(body) + 999) // 1000


def test_exception_response():
    name = b"org.apache.inlong.tubemq.corerpc.exception.StandbyException"
    trace = b"Please send your request to the active master!\n\tat Master.check(Master.java:1)"
    exc = b"\x0a" + bytes([len(name)]) + name + b"\x12" + bytes([len(trace)]) + trace
    body = b"\x02\x08\x01" + b"\x02\x08\x01" + _varint(len(exc)) + exc  # status=ERROR
    assert _varint(len(exc)) == b"\x8d\x01"  # 141 as a two-byte varint
    rsp = struct.pack(">IIII", 0xFF7FF4FE, 7, 1, len(body)) + body
    out = run(new_conv(), [(C2S, COMMIT_REQ), (S2C, rsp)])
    _conform(out)
    r = out["commands"][1]
    assert r["decode_status"] == "ok" and r["command"] == "consumerCommitC2B"
    assert r["error_code"] == 1
    assert r["decode_error"] == (
        "org.apache.inlong.tubemq.corerpc.exception.StandbyException: Please send your request to the active master!"
    )
    d = json.loads(r["details"])
    assert d["status"] == "ERROR" and d["stack_trace"].endswith("Master.java:1)")
    assert out["latencies"][0]["error_code"] == 1
    assert out["acks"][0]["error_code"] == 1 and out["acks"][0].get("offset") is None
    # without its request the exception is still a row, flagged request_missing
    alone = run(new_conv(), [(S2C, rsp)])
    assert alone["commands"][0]["decode_status"] == "request_missing"
    assert alone["commands"][0]["command"] == "exception" and alone["latencies"] == []


def test_garbage_between_frames_is_one_row_and_frames_survive():
    junk = b"GET / HTTP/1.1\r\n\xff\x7f"  # ends with a partial token
    out = run(
        new_conv(),
        [(C2S, COMMIT_REQ + junk), (C2S, COMMIT_REQ.replace(b"\x00\x00\x00\x07", b"\x00\x00\x00\x08", 1))],
    )
    _conform(out)
    st = [(r["decode_status"], r["size"]) for r in out["commands"]]
    assert st == [("ok", len(COMMIT_REQ)), ("malformed", len(junk)), ("ok", len(COMMIT_REQ))]
    bad = out["commands"][1]
    assert bad.get("raw") is None and bad["stream_offset"] == len(COMMIT_REQ)
    assert bad["decode_error"].startswith("bytes that do not start with the TubeMQ begin token")
    assert out["commands"][2]["correlation_id"] == 8


def test_garbage_first_then_frame_in_many_chunks():
    junk = b"\x00" * 50
    data = junk + COMMIT_REQ
    out = run(new_conv(), [(C2S, data[i : i + 7]) for i in range(0, len(data), 7)])
    assert [(r["decode_status"], r["size"]) for r in out["commands"]] == [
        ("malformed", 50),
        ("ok", len(COMMIT_REQ)),
    ]


def test_truncated_tail():
    out = run(new_conv(), [(C2S, COMMIT_REQ + COMMIT_REQ[:20])])
    _conform(out)
    ok, tail = out["commands"]
    assert ok["decode_status"] == "ok"
    assert (
        tail["decode_status"] == "truncated"
        and tail["size"] == 20
        and tail["stream_offset"] == len(COMMIT_REQ)
    )
    assert tail.get("raw") is None  # no readable type: no bytes
    assert json.loads(tail["details"])["list_size"] == 1
    # the request that got no response is still a latency row, with null response columns
    (lat,) = out["latencies"]
    assert lat.get("response_ts_ns") is None and lat.get("latency_us") is None
    # and its commit is still an ack row, marked as having no response
    (ack,) = out["acks"]
    assert json.loads(ack["details"])["response"] == "missing"


def test_absurd_list_size_and_block_length_resync():
    bad_list = struct.pack(">III", 0xFF7FF4FE, 1, 0x7FFFFFFF) + b"\x00" * 30
    bad_block = struct.pack(">IIII", 0xFF7FF4FE, 2, 1, 9000) + b"\x01" * 40
    zero_list = struct.pack(">III", 0xFF7FF4FE, 3, 0)
    out = run(new_conv(), [(C2S, bad_list + COMMIT_REQ + bad_block + zero_list + COMMIT_REQ)])
    _conform(out)
    rows = out["commands"]
    assert [r["decode_status"] for r in rows] == ["malformed", "ok", "malformed", "malformed", "ok"]
    assert rows[0]["size"] == len(bad_list) and "list size 2147483647" in rows[0]["decode_error"]
    assert rows[2]["size"] == len(bad_block) and "length 9000" in rows[2]["decode_error"]
    assert rows[0].get("raw") is None
    assert rows[2].get("raw") is None
    assert rows[3]["size"] == len(zero_list)


def test_oversize_frame_is_recorded_and_skipped():
    msg = brk.SendMessageRequestP2B(
        clientId="p", topicName="t", partitionId=0, data=b"z" * 30000, flag=0, checkSum=-1, sentAddr=1
    )
    big = request(9, 3, 13, msg)
    out = run(new_conv(max_frame_bytes=16384), [(C2S, big[:5000]), (C2S, big[5000:] + COMMIT_REQ)])
    _conform(out)
    rows = out["commands"]
    assert [r["decode_status"] for r in rows] == ["oversize", "ok"]
    assert rows[0]["size"] == len(big) and rows[0]["correlation_id"] == 9 and rows[0].get("raw") is None
    assert out["messages"] == []


def test_gap_inside_a_frame_of_known_size_is_one_row_and_the_next_frame_follows():
    # 20 bytes hold the header and the only block's length: the frame's 44 bytes are known, and
    # the gap ends where it ends
    conv = new_conv()
    rows = list(conv.feed(C2S, COMMIT_REQ[:20], 1))
    rows += conv.gap(C2S, 24, 2)
    rows += conv.feed(C2S, COMMIT_REQ, 3)
    rows += conv.close()
    cmds = [r for t, r in flat(rows) if t == "commands"]
    assert [(r["decode_status"], r["size"], r["stream_offset"]) for r in cmds] == [
        ("gap", 44, 0),
        ("ok", len(COMMIT_REQ), 44),
    ]


def test_gap_inside_a_frame_and_bytes_before_the_next_token_join_the_gap_row():
    conv = new_conv()
    rows = list(conv.feed(C2S, COMMIT_REQ[:10], 1))
    rows += conv.gap(C2S, 10, 2)
    rows += conv.feed(C2S, COMMIT_REQ[20:] + COMMIT_REQ, 3)
    rows += conv.close()  # the rows of whole frames are handed over in blocks, at the latest here
    cmds = [r for t, r in flat(rows) if t == "commands"]
    assert [(r["decode_status"], r["size"]) for r in cmds] == [
        ("gap", len(COMMIT_REQ)),
        ("ok", len(COMMIT_REQ)),
    ]


def test_bad_envelope_and_bad_body_are_rows():
    # envelope: the RpcConnHeader length runs past the frame
    out = run(new_conv(), [(C2S, frame(4, b"\x40\x08\x00"))])
    (r,) = out["commands"]
    assert r["decode_status"] == "malformed" and r["decode_error"].startswith("RPC envelope")
    assert r.get("raw") is None  # the envelope did not parse: the method is unknown
    # body: a getMessagesC2B request whose message is not protobuf
    from brokerscope.protocols.tubemq.gen import tubemq_rpc_pb2 as rpc

    from .kit import delimited

    body = (
        delimited(rpc.RpcConnHeader(flag=0))
        + delimited(rpc.RequestHeader(serviceType=2))
        + delimited(rpc.RequestBody(method=17, request=b"\x0a\xff\xff"))
    )
    out = run(new_conv(), [(C2S, frame(5, body))])
    (r,) = out["commands"]
    assert r["command"] == "getMessagesC2B" and r["decode_status"] == "malformed"
    # getMessagesC2B carries no credentials, but one damaged bit of a method id (16 -> 17) reads a
    # heartbeat's, which does, as one: no raw bytes
    assert r["raw"] is None
    # a producer registration (may carry credentials) that does not parse keeps no raw bytes
    body = (
        delimited(rpc.RpcConnHeader(flag=0))
        + delimited(rpc.RequestHeader(serviceType=1))
        + delimited(rpc.RequestBody(method=1, request=b"\x0a\xff\xff"))
    )
    out = run(new_conv(), [(C2S, frame(6, body))])
    assert out["commands"][0]["decode_status"] == "malformed" and out["commands"][0].get("raw") is None


def test_unknown_method_v2_call_and_reserved_method():
    from brokerscope.protocols.tubemq.gen import tubemq_rpc_pb2 as rpc

    from .kit import delimited

    def call(serial: int, method: int, body: bytes) -> dict:
        frame_body = (
            delimited(rpc.RpcConnHeader(flag=0))
            + delimited(rpc.RequestHeader(serviceType=1))
            + delimited(rpc.RequestBody(method=method, request=body))
        )
        return run(new_conv(), [(C2S, frame(serial, frame_body))])["commands"][0]

    r = call(1, 99, b"\x08\x01")
    assert r["decode_status"] == "unknown_command" and r["command"] == "method_99"
    # consumerRegisterC2MV2: clientId (1), groupName (2), sourceCount (4), decoded by name
    r = call(2, 20, b"\x0a\x03cid\x12\x03grp\x20\x05")
    assert r["command"] == "consumerRegisterC2MV2" and r["decode_status"] == "ok"
    assert json.loads(r["details"])["request"] == {"clientId": "cid", "groupName": "grp", "sourceCount": 5}
    # consumerCloseC2B: a reserved id with no message defined by TubeMQ, decoded field by field:
    # numbers, and the size of every other field (its bytes may be a credential or a payload)
    r = call(3, 19, b"\x0a\x03cid\x12\x03grp\x18\x05")
    assert r["command"] == "consumerCloseC2B" and r["decode_status"] == "ok"
    fields = {"1": [{"size": 3}], "2": [{"size": 3}], "3": [5]}
    assert json.loads(r["details"])["request"]["fields"] == fields


def test_response_without_request_decodes_by_its_method():
    rsp = response(
        77,
        17,
        brk.GetMessageResponseB2C(
            success=True,
            errCode=200,
            messages=[brk.TransferedMessage(messageId=5, checkSum=0, payLoadData=b"v", flag=0)],
        ),
    )
    out = run(new_conv(), [(S2C, rsp)])
    assert out["commands"][0]["command"] == "getMessagesC2B" and out["commands"][0]["decode_status"] == "ok"
    assert out["latencies"] == [] and len(out["messages"]) == 1


def test_duplicate_serial_closes_the_older_request():
    out = run(new_conv(), [(C2S, COMMIT_REQ), (C2S, COMMIT_REQ), (S2C, COMMIT_RSP)])
    lats = out["latencies"]
    assert len(lats) == 2
    assert lats[0].get("response_ts_ns") is None and lats[1]["response_ts_ns"] is not None


def _items(fr: Framer, chunks, whole: bool) -> list:
    """Every Frame and Junk of `chunks` ((data, ts) or (None, gap size)) through `fr`, its fast
    path (feed_whole) or push and next alone."""
    out = []
    for data, ts in chunks:
        if data is None:
            out += fr.gap(ts, 0)[0]
        elif whole:
            out += fr.feed_whole(data, ts)
        else:
            fr.push(data, ts)
        while (item := fr.next()) is not None:
            out.append(item)
    return out + fr.close()


@pytest.mark.parametrize("seed", range(150))
def test_whole_frames_taken_at_once_are_the_frames_next_gives(seed):
    """Framer.feed_whole (the compiled _rpc.split) gives the frames, junk, offsets and times that
    push and next give, over frames, damage, garbage, oversize frames and gaps in any cuts."""
    rng = random.Random(seed)
    stream = b""
    for _ in range(rng.randrange(1, 12)):
        f = frame(rng.randrange(2**32), rng.randbytes(rng.randrange(0, 200)), rng.choice([7, 64, 8192]))
        stream += damage(rng, f) if rng.random() < 0.2 else f
        if rng.random() < 0.1:
            stream += rng.randbytes(rng.randrange(1, 9))
    chunks, at, ts = [], 0, 0
    while at < len(stream):
        n = rng.choice([1, 5, 40, 300, len(stream), len(stream), len(stream)])
        chunks.append((stream[at : at + n], ts))
        at += n
        ts += rng.choice([0, 1000])
        if rng.random() < 0.05:
            chunks.append((None, rng.randrange(1, 30)))
    max_frame = rng.choice([100, 1000, 1 << 20])
    fast = _items(Framer(TubeRules(max_frame), max_frame), chunks, True)
    slow = _items(Framer(TubeRules(max_frame), max_frame), chunks, False)
    assert fast == slow
