"""Messages, acks, metadata and redaction of TubeMQ calls, on frames built from the protos."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from brokerscope import tables
from brokerscope.protocols.base import C2S, S2C, PayloadPolicy
from brokerscope.protocols.tubemq import PROTOCOL
from brokerscope.protocols.tubemq.content import parse_subscribe_info, split_payload, tube_checksum
from brokerscope.protocols.tubemq.gen import tubemq_broker_pb2 as brk
from brokerscope.protocols.tubemq.gen import tubemq_master_pb2 as mst

from .kit import new_conv, request, response, run


def _attr_data(attr: bytes, payload: bytes) -> bytes:
    return struct.pack(">i", len(attr)) + attr + payload


def test_checksum_is_crc32_without_sign_bit():
    assert tube_checksum(b"123456789") == 0xCBF43926 & 0x7FFFFFFF
    assert tube_checksum(b"") == 0


def test_split_payload():
    assert split_payload(_attr_data(b"a=1", b"xyz"), 1) == ("a=1", b"xyz", None)
    assert split_payload(b"plain", 0) == (None, b"plain", None)
    attr, payload, err = split_payload(b"\x00\x00\x01\x00abc", 1)
    assert attr is None and payload == b"\x00\x00\x01\x00abc" and "attribute length 256" in err


def test_get_messages_deliver_rows_and_confirmation_ack():
    p1 = _attr_data(b"$msgType$=t1,k=v", b"hello")
    p2 = b"world"
    get = brk.GetMessageRequestC2B(
        clientId="c", partitionId=3, groupName="grp", topicName="demo", lastPackConsumed=False
    )
    rsp = brk.GetMessageResponseB2C(
        success=True,
        errCode=200,
        errMsg="OK",
        currOffset=480,
        messages=[
            brk.TransferedMessage(
                messageId=1001,
                checkSum=tube_checksum(p1),
                payLoadData=p1,
                flag=1,
                recvTimeInMs=1_700_000_123_456,
            ),
            brk.TransferedMessage(messageId=1002, checkSum=12345, payLoadData=p2, flag=0),
        ],
    )
    get2 = brk.GetMessageRequestC2B(
        clientId="c", partitionId=3, groupName="grp", topicName="demo", lastPackConsumed=True
    )
    commit = brk.CommitOffsetRequestC2B(clientId="c", topicName="demo", partitionId=3, groupName="grp")
    out = run(
        new_conv(),
        [
            (C2S, request(1, 2, 17, get)),
            (S2C, response(1, 17, rsp)),
            (C2S, request(2, 2, 17, get2)),
            (C2S, request(3, 2, 18, commit)),
            (
                S2C,
                response(
                    3, 18, brk.CommitOffsetResponseB2C(success=True, errCode=200, errMsg="OK", currOffset=480)
                ),
            ),
        ],
        step=1_000_000,
    )
    for t, rows in out.items():
        tables.conform(t, rows)
    m1, m2 = out["messages"]
    assert (m1["direction"], m1["topic"], m1["partition"], m1["message_id"]) == ("deliver", "demo", 3, "1001")
    assert m1["value"] == b"hello" and m1["checksum_ok"] is True
    assert m1["headers"] == [{"key": "$msgType$", "value": b"t1"}, {"key": "k", "value": b"v"}]
    assert m1["message_ts_ns"] == 1_700_000_123_456 * 1_000_000
    assert m2["value"] == b"world" and m2["checksum_ok"] is False and m2["headers"] == []
    assert m1["consumer"] == m2["consumer"] == "grp"  # the group of the getMessagesC2B request
    confirm, commit_ack = out["acks"]
    assert confirm["ack_type"] == commit_ack["ack_type"] == "tubemq_commit"
    assert json.loads(confirm["details"])["via"] == "getMessagesC2B"
    assert (confirm["topic"], confirm["partition"], confirm["offset"], confirm["consumer"]) == (
        "demo",
        3,
        480,
        "grp",
    )
    assert confirm["ack_latency_us"] == 1000.0  # request 2's last byte - response 1's first byte
    assert commit_ack["offset"] == 480 and commit_ack["ack_latency_us"] == 2000.0
    assert len(out["latencies"]) == 3


def _p2b(data: bytes, check_sum: int) -> brk.SendMessageRequestP2B:
    """A producer's sendMessageP2B of `data` (attributes and payload) with `check_sum`."""
    return brk.SendMessageRequestP2B(
        clientId="p", topicName="t", partitionId=0, data=data, flag=1, checkSum=check_sum, sentAddr=1
    )


def test_produce_checksum_and_payload_policy():
    data = _attr_data(b"x=1", b"payload-bytes")
    good = _p2b(data, tube_checksum(data))
    bad = _p2b(data, 7)
    assert zlib.crc32(data) >= 1 << 31  # so the signed full CRC differs from TubeMQ's masked one
    signed = zlib.crc32(data) - (1 << 32)
    full = _p2b(data, signed)
    conv = PROTOCOL.conversation(
        new_conv().conn, new_conv().ctx.__class__(payload=PayloadPolicy(mode="hash"))
    )
    out = run(
        conv, [(C2S, request(1, 3, 13, good)), (C2S, request(2, 3, 13, bad)), (C2S, request(3, 3, 13, full))]
    )
    ok, wrong, full = out["messages"]
    # TubeMQ's CheckSum.crc32 clears the sign bit; a full (signed) CRC32 is not TubeMQ's checksum
    assert ok["checksum_ok"] is True and wrong["checksum_ok"] is False and full["checksum_ok"] is False
    assert all(m.get("consumer") is None for m in out["messages"])  # produce rows have no consumer
    assert ok["value"] is None and ok["value_size"] == len(b"payload-bytes") and len(ok["value_hash"]) == 64


def test_send_failure_response_sets_error_code():
    data = b"m"
    req = brk.SendMessageRequestP2B(
        clientId="p", topicName="t", partitionId=0, data=data, flag=0, checkSum=-1, sentAddr=1
    )
    rsp = brk.SendMessageResponseB2P(success=False, errCode=403, errMsg="no write permission")
    out = run(new_conv(), [(C2S, request(1, 3, 13, req)), (S2C, response(1, 13, rsp))])
    r = out["commands"][1]
    assert r["error_code"] == 403 and json.loads(r["details"])["error"] == "no write permission"
    assert out["latencies"][0]["error_code"] == 403 and out["acks"][0]["error_code"] == 403


def test_registrations_and_heartbeats_keep_metadata():
    reg = mst.RegisterRequestP2M(
        clientId="prod-1", topicList=["demo", "other"], brokerCheckSum=-1, hostName="127.0.0.1"
    )
    reg_rsp = mst.RegisterResponseM2P(
        success=True,
        errCode=200,
        errMsg="OK",
        brokerCheckSum=7,
        brokerInfos=["1:127.0.0.1:8123", "2:10.0.0.2:8123"],
    )
    hb_rsp = mst.HeartResponseM2C(
        success=True,
        errCode=200,
        errMsg="OK",
        event=mst.EventProto(
            rebalanceId=5, opType=1, status=0, subscribeInfo=["cons-1@grp#1:127.0.0.1:8123#demo:0"]
        ),
    )
    hb = mst.HeartRequestC2M(clientId="cons-1", groupName="grp", reportSubscribeInfo=False)
    out = run(
        new_conv(),
        [
            (C2S, request(1, 1, 1, reg)),
            (S2C, response(1, 1, reg_rsp)),
            (C2S, request(2, 1, 5, hb)),
            (S2C, response(2, 5, hb_rsp)),
        ],
    )
    c = out["commands"]
    assert [r["command"] for r in c] == ["producerRegisterP2M"] * 2 + ["consumerHeartbeatC2M"] * 2
    assert c[0]["topics"] == ["demo", "other"] and c[0]["client_id"] == "prod-1"
    brokers = json.loads(c[1]["details"])["brokers"]
    assert brokers[1] == {"info": "2:10.0.0.2:8123", "broker_id": 2, "host": "10.0.0.2", "port": 8123}
    assigned = json.loads(c[3]["details"])["assigned"]
    assert assigned == [
        {
            "info": "cons-1@grp#1:127.0.0.1:8123#demo:0",
            "consumer_id": "cons-1",
            "group": "grp",
            "broker": {"info": "1:127.0.0.1:8123", "broker_id": 1, "host": "127.0.0.1", "port": 8123},
            "topic": "demo",
            "partition": 0,
        }
    ]
    assert out["messages"] == [] and out["acks"] == []


def test_subscribe_info_with_dashes():
    s = parse_subscribe_info("c@g-3:h:8123-topic:2")
    assert (s["consumer_id"], s["group"], s["broker"]["broker_id"], s["topic"], s["partition"]) == (
        "c",
        "g",
        3,
        "topic",
        2,
    )


def test_credentials_never_reach_a_column():
    secret_sig = "S1GNATURE-very-secret"
    secret_tok = "T0KEN-very-secret"
    cert = mst.MasterCertificateInfo(
        authInfo=mst.AuthenticateInfo(
            userName="alice", timestamp=1, nonce=2, othParams="p4ss-other", signature=secret_sig
        ),
        authorizedToken=secret_tok,
    )
    reg = mst.RegisterRequestC2M(clientId="c", groupName="g", hostName="h", topicList=["t"], authInfo=cert)
    rsp = mst.RegisterResponseM2C(
        success=True,
        errCode=200,
        errMsg="OK",
        authorizedInfo=mst.MasterAuthorizedInfo(visitAuthorizedToken=424242, authAuthorizedToken=secret_tok),
    )
    out = run(new_conv(), [(C2S, request(1, 1, 4, reg)), (S2C, response(1, 4, rsp))])
    blob = repr(out)
    for s in (secret_sig, secret_tok, "p4ss-other", "424242"):
        assert s not in blob
    d = json.loads(out["commands"][0]["details"])
    assert d["request"]["authInfo"]["authInfo"]["userName"] == "alice"
    assert d["request"]["authInfo"]["authInfo"]["signature"] == f"<redacted {len(secret_sig)} bytes>"
    assert all(r.get("raw") is None for r in out["commands"])


def test_sniff():
    from .kit import frame

    f = frame(1, b"\x02\x08\x00" + b"\x00" * 10)
    assert PROTOCOL.sniff(f, b"") >= 0.9
    assert PROTOCOL.sniff(f, f) > PROTOCOL.sniff(f, b"")
    assert PROTOCOL.sniff(b"\x00\x00\x00\x10" + b"kafka-ish bytes!", b"") == 0.0
    assert PROTOCOL.sniff(b"", b"") == 0.0
    assert 0.5 <= PROTOCOL.sniff(b"tail-of-frame" + f, b"") < 0.9  # capture started mid-stream
    bad_list = b"\xff\x7f\xf4\xfe\x00\x00\x00\x01\x7f\x00\x00\x00\x00\x00\x00\x10"
    assert PROTOCOL.sniff(bad_list, b"") == 0.0
    assert 8715 in PROTOCOL.default_ports and 8123 in PROTOCOL.default_ports


# producerHeartbeatP2M response (method 2), serial 9, spelled out byte by byte. HeartResponseM2P:
#   08 01                 success = true
#   10 c8 01              errCode = 200
#   1a 02 "OK"            errMsg
#   20 07                 brokerCheckSum = 7
#   2a <len> text         topicInfos (field 5), twice
#   32 <len> text         brokerInfos (field 6), twice
HB_P2M_BODY = (
    b"\x08\x01"
    + b"\x10\xc8\x01"
    + b"\x1a\x02OK"
    + b"\x20\x07"
    + b"\x2a\x17"
    + b"demo#1:3:2,2:4:1#524288"  # topicInfos[0]
    + b"\x2a\x0b"
    + b"other#2:1:1"  # topicInfos[1]: no max message size segment
    + b"\x32\x0f"
    + b"1:127.0.0.1:812"  # brokerInfos[0] (port 812)
    + b"\x32\x0e"
    + b"2:10.0.0.2:900"  # brokerInfos[1]
)
HB_P2M_FRAME = (
    b"\xff\x7f\xf4\xfe"  # begin token
    + b"\x00\x00\x00\x09"  # serialNo 9
    + b"\x00\x00\x00\x01"  # one block
    + (3 + 3 + 1 + 4 + len(HB_P2M_BODY)).to_bytes(4, "big")  # block length
    + b"\x02\x08\x01"  # RpcConnHeader{flag: 1}
    + b"\x02\x08\x00"  # ResponseHeader{status: SUCCESS}
    + bytes([4 + len(HB_P2M_BODY)])  # RspResponseBody length (< 128: a one-byte varint)
    + b"\x08\x02"  # method = 2 (producerHeartbeatP2M)
    + b"\x12"
    + bytes([len(HB_P2M_BODY)])
    + HB_P2M_BODY
)


def test_producer_heartbeat_topic_infos_golden_bytes():
    hb = mst.HeartRequestP2M(clientId="prod-1", brokerCheckSum=-1, hostName="h", topicList=["demo", "other"])
    out = run(new_conv(), [(C2S, request(9, 1, 2, hb)), (S2C, HB_P2M_FRAME)])
    for t, rows in out.items():
        tables.conform(t, rows)
    req, rsp = out["commands"]
    assert (
        rsp["decode_status"] == "ok" and rsp["command"] == "producerHeartbeatP2M" and rsp["error_code"] == 0
    )
    assert rsp["size"] == len(HB_P2M_FRAME)
    d = json.loads(rsp["details"])
    assert d["topic_infos"] == [
        {
            "info": "demo#1:3:2,2:4:1#524288",
            "topic": "demo",
            "brokers": [
                {"broker_id": 1, "partitions": 3, "stores": 2, "host": "127.0.0.1", "port": 812},
                {"broker_id": 2, "partitions": 4, "stores": 1, "host": "10.0.0.2", "port": 900},
            ],
            "partition_count": 10,  # 3 partitions x 2 stores + 4 x 1
            "max_msg_size": 524288,
        },
        {
            "info": "other#2:1:1",
            "topic": "other",
            "brokers": [{"broker_id": 2, "partitions": 1, "stores": 1, "host": "10.0.0.2", "port": 900}],
            "partition_count": 1,
        },
    ]
    assert [b["broker_id"] for b in d["brokers"]] == [1, 2]
    assert out["latencies"][0]["response_command"] == "producerHeartbeatP2M"


def test_topic_info_parser_keeps_odd_entries():
    from brokerscope.protocols.tubemq.content import parse_topic_info

    assert parse_topic_info("no-separator") == {"info": "no-separator"}
    t = parse_topic_info("t#5:x:1,7:2:1#")
    assert t["brokers"] == [{"info": "5:x:1"}, {"broker_id": 7, "partitions": 2, "stores": 1}]
    assert t["partition_count"] == 2 and "max_msg_size" not in t


def _p2b_requests(n: int) -> list[bytes]:
    """`n` sendMessageP2B requests, serials 1 .. n."""
    sends = []
    for i in range(1, n + 1):
        data = _attr_data(b"x=1", f"payload-{i}".encode())
        sends.append(request(i, 3, 13, _p2b(data, tube_checksum(data))))
    return sends


def _damaged(frame: bytes) -> bytes:
    """`frame` with one bit of its first block's length (after the 12-byte header) flipped: + 4096."""
    damaged = bytearray(frame)
    (length,) = struct.unpack_from(">I", damaged, 12)
    struct.pack_into(">I", damaged, 12, length | 0x1000)
    return bytes(damaged)


def test_a_damaged_block_length_does_not_swallow_the_frames_after_it():
    """One flipped bit of a sendMessageP2B's block length (found by a user trial: 78 -> 4174 made
    it an `ok` row with 4096 trailing bytes, and the 44 requests after it were gone): the frame
    whose RPC message leaves bytes that hold frame starts is one malformed row, every frame after
    it is read. Each frame comes in a packet of its own, as clients send them."""
    sends = _p2b_requests(120)
    sends[10] = _damaged(sends[10])
    out = run(new_conv(), [(C2S, s) for s in sends])
    ok = sorted(r["correlation_id"] for r in out["commands"] if r["decode_status"] == "ok")
    assert ok == [i for i in range(1, 121) if i != 11]
    [bad] = [r for r in out["commands"] if r["decode_status"] != "ok"]
    assert bad["decode_status"] == "malformed" and "a block length damaged" in bad["decode_error"]
    assert len(out["messages"]) == 119


@pytest.mark.parametrize("damaged", [(115,), (115, 116)])
def test_a_damaged_block_length_that_runs_past_the_end_of_the_connection_loses_no_frame(damaged):
    """A request near the end whose block length says 4096 bytes more than the connection holds
    (one, or two in a row): it waited for bytes that never came, and at the close it and the
    requests after it were one `truncated` row. Now each damaged frame is one malformed row, the
    frames after it read as they are."""
    sends = _p2b_requests(120)
    for i in damaged:
        sends[i] = _damaged(sends[i])
    out = run(new_conv(), [(C2S, s) for s in sends])
    ok = sorted(r["correlation_id"] for r in out["commands"] if r["decode_status"] == "ok")
    assert ok == [i for i in range(1, 121) if i - 1 not in damaged]
    bad = [r for r in out["commands"] if r["decode_status"] != "ok"]
    assert [r["decode_status"] for r in bad] == ["malformed"] * len(damaged)
    assert all("runs past the end of the connection" in r["decode_error"] for r in bad)
    assert [r["size"] for r in bad] == [len(sends[i]) for i in damaged]
    assert len(out["messages"]) == 120 - len(damaged)
    assert sum(r["size"] for r in out["commands"]) == sum(map(len, sends))


def test_a_damaged_block_length_that_runs_past_a_capture_gap_loses_no_frame():
    """The same damage followed by a capture gap: the gap was taken to end inside the damaged
    frame, one `gap` row spanning its 4 KiB, the frames in it and after the gap lost. Now the
    frames it holds are read, then the gap is a gap."""
    sends = _p2b_requests(120)
    sends[40] = _damaged(sends[40])
    feeds = [(C2S, s) for s in sends[:51]] + [("gap", (C2S, len(sends[51])))] + [(C2S, s) for s in sends[52:]]
    out = run(new_conv(), feeds)
    ok = sorted(r["correlation_id"] for r in out["commands"] if r["decode_status"] == "ok")
    assert ok == [i for i in range(1, 121) if i not in (41, 52)]
    [bad, gap] = [r for r in out["commands"] if r["decode_status"] != "ok"]
    assert bad["decode_status"] == "malformed" and "runs past a capture gap" in bad["decode_error"]
    assert bad["size"] == len(sends[40])
    assert gap["decode_status"] == "gap" and gap["size"] == len(sends[51])
    assert sum(r["size"] for r in out["commands"]) == sum(map(len, sends))


def _send_ok(serial: int) -> bytes:
    return response(
        serial, 13, brk.SendMessageResponseB2P(success=True, errCode=200, errMsg="OK", messageId=serial)
    )


def test_requests_read_again_after_a_damaged_block_length_pair_with_the_responses_that_came_first():
    """Exchanges one after the other, the 11th request's block length damaged (+4096): the
    requests after it wait inside it until it is read again, while their responses arrive. They
    were rows of no request (59 of 119 latencies unanswered, the acks without their request); now
    a response whose request starts inside the client's held bytes waits for it."""
    sends = _p2b_requests(120)
    sends[10] = _damaged(sends[10])
    feeds = [f for i, s in enumerate(sends, 1) for f in ((C2S, s), (S2C, _send_ok(i)))]
    out = run(new_conv(), feeds)
    lat = out["latencies"]
    assert sorted(r["correlation_id"] for r in lat) == [i for i in range(1, 121) if i != 11]
    assert all(r["latency_us"] is not None and r["latency_us"] > 0 for r in lat)
    rsp = {r["correlation_id"]: r for r in out["commands"] if r["direction"] == S2C}
    assert len(rsp) == 120 and all(rsp[i]["topic"] == "t" for i in range(1, 121) if i != 11)
    assert rsp[11]["topic"] is None  # its request is the damaged frame: no request read
    assert len(out["messages"]) == 119


def test_a_held_response_keeps_its_frame_numbers(tmp_path, monkeypatch):
    """The same exchanges in a capture, decoded by the driver: a held response's rows name the
    packet that carried it, though its direction moved on (ConnInfo.frames; the driver prunes a
    direction's packet index below the conversation's low_water every few packets here)."""
    from brokerscope import streams
    from brokerscope.streams import decode_files
    from tests.support.synth import write_capture

    monkeypatch.setattr(streams, "PRUNE_AT", 4)
    sends = _p2b_requests(120)
    sends[10] = _damaged(sends[10])
    path = tmp_path / "tube.pcap"
    write_capture(str(path), n_conns=1, exchanges=120, server_port=8123,
                  payloads=lambda c, i: (sends[i], _send_ok(i + 1)))  # fmt: skip
    out = decode_files([str(path)])
    rsp = {r["correlation_id"]: r for r in out["commands"] if r["direction"] == S2C}
    # handshake frames 1-3, then request i at frame 4 + 2 (i - 1), its response one after
    assert {i: (r["first_frame"], r["last_frame"]) for i, r in rsp.items()} == {
        i: (5 + 2 * (i - 1),) * 2 for i in range(1, 121)
    }
    assert sum(r["latency_us"] is not None for r in out["latencies"]) == 119
