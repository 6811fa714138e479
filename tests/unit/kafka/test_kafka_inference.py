"""Responses whose request is not in the capture: decoded under an inferred api only where that is
certain (the neighbouring correlation ids are requests of one api, and of every api requested on
the connection exactly that one decodes the body exactly), else left undecoded with the reason.
Byte-literal frames, every field annotated."""

from __future__ import annotations

import json

import pytest

from brokerscope.protocols.kafka import inference

from .kit import Driver, fetch_request, fetch_response, records, v2_batch_header_crc_offset


def h(s: str) -> bytes:
    return bytes.fromhex("".join(s.split()))


def metadata_v2_response(corr: int) -> bytes:
    """Metadata v2 response (header v0): one broker, cluster id, controller, one topic."""
    return h(
        "0000004d"  # size 77
        f"{corr:08x}"  # correlation id
        "00000001"  # Brokers: 1
        "00000001 0009 3132372e302e302e31 00002384 ffff"  # NodeId 1, Host 127.0.0.1, Port 9092, Rack null
        "0002 6331"  # ClusterId "c1"
        "00000001"  # ControllerId 1
        "00000001"  # Topics: 1
        "0000 0001 74 00"  # ErrorCode 0, Name "t", IsInternal false
        "00000001"  # Partitions: 1
        "0000 00000000 00000001"  # ErrorCode 0, PartitionIndex 0, LeaderId 1
        "00000001 00000001"  # ReplicaNodes [1]
        "00000001 00000001"  # IsrNodes [1]
    )


def metadata_v2_request(corr: int) -> bytes:
    return h(
        "00000014"  # size 20
        f"0003 0002 {corr:08x} 0003 6b6974"  # api key 3 (Metadata), v2, correlation id, client "kit"
        "00000001 0001 74"  # Topics: ["t"]
    )


def heartbeat_v1_request(corr: int) -> bytes:
    return h(
        "00000017"  # size 23
        f"000c 0001 {corr:08x} 0003 6b6974"  # api key 12 (Heartbeat), v1, correlation id, client "kit"
        "0001 67 00000001 0001 6d"  # GroupId "g", GenerationId 1, MemberId "m"
    )


def leave_group_v1_request(corr: int) -> bytes:
    return h(
        "00000013"  # size 19
        f"000d 0001 {corr:08x} 0003 6b6974"  # api key 13 (LeaveGroup), v1, correlation id, client "kit"
        "0001 67 0001 6d"  # GroupId "g", MemberId "m"
    )


def throttle_error_response(corr: int) -> bytes:
    """Heartbeat v1 and LeaveGroup v1 responses have the same layout: ThrottleTimeMs, ErrorCode."""
    return h(f"0000000a {corr:08x} 00000000 0000")


def by_corr(out) -> dict[int, dict]:
    return {r["correlation_id"]: r for r in out["commands"] if r["direction"] == "s2c"}


@pytest.mark.parametrize("pipelined", [False, True])
def test_midstream_first_response_inferred_when_certain(pipelined):
    """The capture starts after the client sent Metadata request 7: its response is the first
    frame. Request 8 is Metadata v2 too, and of Metadata v2 and Heartbeat v1 (the apis requested on
    this connection) only Metadata v2 decodes response 7 exactly."""
    d = Driver()
    if pipelined:  # request 8 already sent when response 7 arrives
        d.c2s(metadata_v2_request(8)).s2c(metadata_v2_response(7))
    else:
        d.s2c(metadata_v2_response(7)).c2s(metadata_v2_request(8))
    out = d.s2c(metadata_v2_response(8)).c2s(heartbeat_v1_request(9)).s2c(throttle_error_response(9)).close()
    resp = by_corr(out)
    r7, r8 = resp[7], resp[8]
    assert (r7["decode_status"], r7["command"], r7["command_code"], r7["api_version"]) == (
        "request_missing",
        "Metadata",
        3,
        2,
    )
    assert (r7["topic"], r7["partition"], r7["error_code"], r7["size"], r7["stream_offset"]) == (
        "t",
        0,
        0,
        81,
        0,
    )
    det = json.loads(r7["details"])
    assert det.pop("inferred") is True
    reason = det.pop("inferred_reason")
    assert "correlation id 8" in reason and "only Metadata v2 decodes" in reason and "Heartbeat v1" in reason
    # the same bytes as response 8, whose request was captured: the same decoded fields
    assert det == json.loads(r8["details"])
    assert det["Brokers"] == [{"NodeId": 1, "Host": "127.0.0.1", "Port": 9092, "Rack": None}]
    assert r7["raw"] is None  # an inferred type was not read from the wire: no bytes
    # no request, so no latency row for it
    assert sorted(lat["correlation_id"] for lat in out["latencies"]) == [8, 9]


def test_ambiguous_stays_undecoded():
    """Response 20 (request not captured) is 6 bytes that read exactly as a Heartbeat v1 and as a
    LeaveGroup v1 response, both requested on this connection: no guess."""
    out = (
        Driver()
        .s2c(throttle_error_response(20))
        .c2s(heartbeat_v1_request(21))
        .s2c(throttle_error_response(21))
        .c2s(leave_group_v1_request(22))
        .s2c(throttle_error_response(22))
        .close()
    )
    resp = by_corr(out)
    r = resp[20]
    assert (r["decode_status"], r["command"], r["api_version"], r["error_code"]) == (
        "request_missing",
        None,
        None,
        None,
    )
    assert r["raw"] is None
    det = json.loads(r["details"])
    assert det == {
        "inferred": False,
        "inferred_reason": "ambiguous: the body decodes exactly as Heartbeat v1 and as LeaveGroup v1",
    }
    assert (resp[21]["command"], resp[22]["command"]) == ("Heartbeat", "LeaveGroup")


def test_neighbours_of_different_apis_stay_undecoded():
    """Requests 19 and 21 are captured, 20 is not (a lost segment): 19 is a Heartbeat, 21 a
    Metadata request, so 20 could be either (or something else)."""
    out = (
        Driver()
        .c2s(heartbeat_v1_request(19))
        .s2c(throttle_error_response(19))
        .s2c(metadata_v2_response(20))
        .c2s(metadata_v2_request(21))
        .s2c(metadata_v2_response(21))
        .close()
    )
    r = by_corr(out)[20]
    assert (r["decode_status"], r["command"]) == ("request_missing", None)
    reason = json.loads(r["details"])["inferred_reason"]
    assert reason == "the neighbouring requests (19 and 21) are of different apis: Metadata v2, Heartbeat v1"


def test_body_not_of_the_neighbours_api_stays_undecoded():
    """The neighbour is a Heartbeat v1 request, but the body is not a Heartbeat v1 response."""
    out = Driver().s2c(metadata_v2_response(30)).c2s(heartbeat_v1_request(31)).close()
    r = by_corr(out)[30]
    assert (r["decode_status"], r["command"]) == ("request_missing", None)
    reason = json.loads(r["details"])["inferred_reason"]
    assert reason.endswith("(Heartbeat v1) the body decodes exactly under none of them")


def test_no_neighbour_stays_undecoded():
    out = Driver().s2c(metadata_v2_response(40)).c2s(metadata_v2_request(42)).close()
    r = by_corr(out)[40]
    assert (r["decode_status"], r["command"]) == ("request_missing", None)
    assert (
        json.loads(r["details"])["inferred_reason"]
        == "no request with correlation id 39 or 41 in the capture"
    )


def test_undecodable_api_on_the_connection_blocks_inference():
    """An api version no spec decodes (LeaderAndIsr v8: the specs stop at v7) was requested on the
    connection: it cannot be ruled out, so nothing is inferred."""
    leader_and_isr = h(
        "00000013 0004 0008 0000000a 0003 6b6974 00 0000000000"
    )  # key 4 v8, corr 10, client "kit", header tags none, 5 body bytes
    out = (
        Driver()
        .s2c(metadata_v2_response(7))
        .c2s(metadata_v2_request(8))
        .s2c(metadata_v2_response(8))
        .c2s(leader_and_isr)
        .close()
    )
    r = by_corr(out)[7]
    assert (r["decode_status"], r["command"]) == ("request_missing", None)
    assert "LeaderAndIsr v8" in json.loads(r["details"])["inferred_reason"]


@pytest.mark.parametrize(
    "at, was, now",
    [
        (27, "00002384", "00100000"),  # Port 9092 -> 1048576
        (45, "0000", "7fff"),  # the topic's ErrorCode 0 -> 32767
        (18, "3132", "3101"),  # Host "127.0.0.1" -> "1\x01 7.0.0.1"
    ],
)
def test_implausible_values_are_not_a_fit(at, was, now):
    """A Metadata v2 response that consumes every byte but holds a value no broker sends is not a
    fit, so nothing is inferred even with a Metadata v2 neighbour."""
    bad = bytearray(metadata_v2_response(7))
    assert bad[at : at + len(was) // 2] == bytes.fromhex(was)
    bad[at : at + len(was) // 2] = bytes.fromhex(now)
    out = Driver().s2c(bytes(bad)).c2s(metadata_v2_request(8)).close()
    r = by_corr(out)[7]
    assert (r["decode_status"], r["command"]) == ("request_missing", None)
    assert "decodes exactly under none of them" in json.loads(r["details"])["inferred_reason"]
    # unchanged bytes are inferred
    out = Driver().s2c(metadata_v2_response(7)).c2s(metadata_v2_request(8)).close()
    assert by_corr(out)[7]["command"] == "Metadata"


def test_held_responses_are_bounded(monkeypatch):
    monkeypatch.setattr(inference, "MAX_HELD_MISSING", 2)
    d = Driver()
    d.s2c(metadata_v2_response(50) + metadata_v2_response(51) + metadata_v2_response(52))
    # the oldest is released at once, undecoded, while the connection is still open
    early = [r for t, r in d.rows if t == "commands"]
    assert [(r["correlation_id"], r["decode_status"]) for r in early] == [(50, "request_missing")]
    assert json.loads(early[0]["details"])["inferred_reason"].startswith("not held for inference")
    out = d.c2s(metadata_v2_request(53)).close()
    resp = by_corr(out)
    assert (resp[51]["command"], resp[52]["command"]) == (None, "Metadata")  # 52's neighbour is 53


def test_fetch_response_inferred_with_its_record_batches_checked():
    """A consumer's fetch loop captured mid-stream (frames encoded by kafka-python): response 5 is
    decoded as Fetch v11; its record batch is summarised (CRC verified), no deliver rows are made
    from it (no request: no fetch offset). A flipped CRC bit makes it implausible: undecoded."""
    recs = records([(b"k", b"v", [])])
    out = (
        Driver()
        .s2c(fetch_response(11, "t", 0, recs, corr=5))
        .c2s(fetch_request(11, "t", 0, 41, corr=6))
        .s2c(fetch_response(11, "t", 0, b"", corr=6))
        .close()
    )
    r = by_corr(out)[5]
    assert (r["command"], r["api_version"], r["decode_status"], r["topic"]) == (
        "Fetch",
        11,
        "request_missing",
        "t",
    )
    det = json.loads(r["details"])
    assert det["inferred"] is True
    [batch] = det["Responses"][0]["Partitions"][0]["Records"]["batches"]
    assert batch["record_count"] == 1 and batch.get("status", "ok") == "ok"
    assert out["messages"] == []

    bad = bytearray(fetch_response(11, "t", 0, recs, corr=5))
    crc_at = bad.index(recs) + v2_batch_header_crc_offset()
    bad[crc_at] ^= 0x01
    out = Driver().s2c(bytes(bad)).c2s(fetch_request(11, "t", 0, 41, corr=6)).close()
    r = by_corr(out)[5]
    assert (r["command"], r["decode_status"]) == (None, "request_missing")
    assert "decodes exactly under none of them" in json.loads(r["details"])["inferred_reason"]
