"""SEND_MESSAGES -> produce rows, POLL_MESSAGES responses -> deliver rows, checksums, acks."""

from __future__ import annotations

import json
import random
import struct
import zlib

import pytest
import xxhash

from brokerscope import tables
from brokerscope.protocols.base import Context, DecodeError, PayloadPolicy
from brokerscope.protocols.iggy import PROTOCOL, wire
from brokerscope.protocols.iggy.messages import build_headers, build_message
from tests.support.drive import Drive

from .kit import CONN, login, num_id, req, resp, run, str_id, table, u8, u32, u64

ST = str_id("orders") + str_id("eu")
HDRS = build_headers([("trace", 2, b"abc"), ("n", 11, struct.pack("<I", 7)), ("ok", 3, b"\x01")])
MSGS = [(0x0102030405060708090A0B0C0D0E0F10, b"hello", HDRS), (2, b"world!", b"")]


PART3 = b"\x02\x04" + u32(3)


def send_new(msgs, header_size=64, partitioning=PART3) -> bytes:
    """0.5+ SEND_MESSAGES: metadata_length, ids, partitioning, count, 16-byte index, messages."""
    meta = ST + partitioning + u32(len(msgs))
    body = b""
    index = b""
    for mid, payload, hdrs in msgs:
        m = build_message(
            mid,
            payload,
            hdrs,
            origin_timestamp=1_700_000_000_000_000,
            header_size=header_size,
            with_checksum=False,
        )
        body += m
        index += u32(0) + u32(len(body)) + u64(0)
    return u32(len(meta)) + meta + index + body


def send_legacy(msgs) -> bytes:
    """Spec SEND_MESSAGES: ids, partitioning, then id u128, headers len, headers, len, payload."""
    out = ST + b"\x01\x00"
    for mid, payload, hdrs in msgs:
        out += mid.to_bytes(16, "little") + u32(len(hdrs)) + hdrs + u32(len(payload)) + payload
    return out


def polled_new(msgs, header_size=64, first_offset=10, corrupt=None) -> bytes:
    out = b""
    for i, (mid, payload, hdrs) in enumerate(msgs):
        m = bytearray(
            build_message(
                mid,
                payload,
                hdrs,
                offset=first_offset + i,
                timestamp=1_700_000_000_000_000 + i,
                header_size=header_size,
            )
        )
        if corrupt == i:
            m[-1] ^= 0xFF
        out += m
    return u32(3) + u64(first_offset + len(msgs) - 1) + u32(len(msgs)) + out


def polled_legacy(msgs, first_offset=10) -> bytes:
    out = u32(3) + u64(first_offset + len(msgs) - 1) + u32(len(msgs))
    for i, (mid, payload, hdrs) in enumerate(msgs):
        out += u64(first_offset + i) + u8(1) + u64(1_700_000_000_000_000) + mid.to_bytes(16, "little")
        out += u32(zlib.crc32(payload)) + u32(len(hdrs)) + hdrs + u32(len(payload)) + payload
    return out


POLL = b"\x01" + num_id(5) + ST + u32(3) + b"\x01" + u64(10) + u32(10) + b"\x01"


def _check_messages(rows, direction):
    msgs = [r for r in table(rows, "messages") if r["direction"] == direction]
    tables.conform("messages", msgs)
    assert [m["message_id"] for m in msgs] == [str(MSGS[0][0]), "2"]
    assert [m["value"] for m in msgs] == [b"hello", b"world!"]
    assert msgs[0]["headers"] == [
        {"key": "trace", "value": b"abc"},
        {"key": "n", "value": struct.pack("<I", 7)},
        {"key": "ok", "value": b"\x01"},
    ]
    d = json.loads(msgs[0]["details"])
    assert d["headers"] == [
        {"key": "trace", "kind": "string", "value": "abc"},
        {"key": "n", "kind": "uint32", "value": 7},
        {"key": "ok", "kind": "bool", "value": True},
    ]
    assert all(m["topic"] == "orders/eu" and m["partition"] == 3 for m in msgs)
    assert all(m["source"] == "capture" for m in msgs)
    return msgs


@pytest.mark.parametrize("header_size", [64, 56])
def test_send_new_layout_produces(header_size):
    rows = run([("c2s", req(101, send_new(MSGS, header_size))), ("s2c", resp())])
    msgs = _check_messages(rows, "produce")
    assert msgs[0]["message_ts_ns"] == 1_700_000_000_000_000_000
    assert msgs[0]["checksum_ok"] is None  # clients send 0: nothing to verify
    cmd = table(rows, "commands")[0]
    d = json.loads(cmd["details"])
    assert d["format"] == f"v{header_size}" and d["messages_count"] == 2
    assert d["partitioning"] == {"kind": "partition_id", "length": 4, "value": 3}
    assert cmd["topic"] == "orders/eu" and cmd["partition"] == 3


def test_send_legacy_layout_produces():
    rows = run([("c2s", req(101, send_legacy(MSGS))), ("s2c", resp())])
    msgs = [r for r in table(rows, "messages")]
    assert [m["value"] for m in msgs] == [b"hello", b"world!"]
    assert msgs[0]["headers"][0] == {"key": "trace", "value": b"abc"}
    assert json.loads(table(rows, "commands")[0]["details"])["format"] == "legacy"


def test_messages_key_partitioning_sets_key():
    rows = run([("c2s", req(101, send_new(MSGS, partitioning=b"\x03\x04user"))), ("s2c", resp())])
    assert {m["key"] for m in table(rows, "messages")} == {b"user"}
    assert {m["partition"] for m in table(rows, "messages")} == {None}


@pytest.mark.parametrize(
    ("mode", "shown"),
    [
        ("truncate", "us"),
        ("hash", "04f8996da763b7a969b1028ee3007569eaf3a635486ddab211d512c85b9df8fb"),
        ("drop", None),
    ],
)
def test_messages_key_partitioning_follows_the_key_policy(mode, shown):
    """The partitioning key is the messages' key: under apply_to_keys, details show it as the key
    column does (found by a review: it stayed in clear in commands.details)."""
    pol = PayloadPolicy(mode=mode, truncate_bytes=2, apply_to_keys=True)
    frames = [("c2s", req(101, send_new(MSGS, partitioning=b"\x03\x04user"))), ("s2c", resp())]
    rows = run(frames, ctx=Context(payload=pol))
    keys = {m["key"] for m in table(rows, "messages")}
    assert keys == {None if shown is None else shown.encode()}
    part = json.loads(table(rows, "commands")[0]["details"])["partitioning"]
    assert part == {"kind": "messages_key", "length": 4, **({} if shown is None else {"value": shown})}
    assert b"user" not in json.dumps(table(rows, "commands")[0]["details"]).encode()


@pytest.mark.parametrize("header_size", [64, 56])
def test_poll_new_layout_delivers_with_checksums_and_auto_commit_ack(header_size):
    rows = run([("c2s", req(100, POLL)), ("s2c", resp(polled_new(MSGS, header_size)))])
    msgs = _check_messages(rows, "deliver")
    assert [m["offset"] for m in msgs] == [10, 11]
    assert all(m["checksum_ok"] is True and m["decode_status"] == "ok" for m in msgs)
    assert [m["consumer"] for m in msgs] == ["consumer:5", "consumer:5"]  # as in acks.consumer
    assert msgs[1]["message_ts_ns"] == (1_700_000_000_000_000 + 1) * 1000
    acks = table(rows, "acks")
    tables.conform("acks", acks)
    assert [(a["offset"], a["consumer"], a["topic"], a["partition"]) for a in acks] == [
        (11, "consumer:5", "orders/eu", 3)
    ]
    assert json.loads(acks[0]["details"])["auto_commit"] is True


def test_checksum_is_xxh3_of_everything_after_the_checksum_field():
    m = build_message(5, b"p", b"", offset=1, timestamp=2, header_size=64)
    assert struct.unpack_from("<Q", m)[0] == xxhash.xxh3_64_intdigest(m[8:])
    assert len(m) == 64 + 1


def test_bad_checksum_is_flagged_rest_kept():
    rows = run([("c2s", req(100, POLL)), ("s2c", resp(polled_new(MSGS, corrupt=0)))])
    msgs = table(rows, "messages")
    assert [m["checksum_ok"] for m in msgs] == [False, True]
    assert msgs[0]["decode_status"] == "checksum_mismatch"
    assert msgs[1]["value"] == b"world!"  # the intact message is kept


def test_poll_legacy_layout_delivers_with_crc32():
    rows = run([("c2s", req(100, POLL)), ("s2c", resp(polled_legacy(MSGS)))])
    msgs = table(rows, "messages")
    assert [m["offset"] for m in msgs] == [10, 11]
    assert all(m["checksum_ok"] for m in msgs)
    assert json.loads(msgs[0]["details"])["state"] == "available"


def test_store_offset_ack_latency_from_delivery():
    store = b"\x01" + num_id(5) + ST + u32(3) + u64(11)
    rows = run(
        [
            ("c2s", req(100, POLL[:-1] + b"\x00")),
            ("s2c", resp(polled_new(MSGS))),
            ("c2s", req(121, store)),
            ("s2c", resp()),
        ]
    )
    acks = table(rows, "acks")
    assert len(acks) == 1
    assert acks[0]["offset"] == 11 and acks[0]["ack_latency_us"] == 1000.0


def test_legacy_u32_consumer_group_names_deliveries_and_acks():
    """The spec's Consumer (kind u8, id u32): a group 9 poll and store."""
    poll = b"\x02" + u32(9) + ST + u32(3) + b"\x01" + u64(10) + u32(10) + b"\x00"
    store = b"\x02" + u32(9) + ST + u32(3) + u64(11)
    rows = run(
        [
            ("c2s", req(100, poll)),
            ("s2c", resp(polled_legacy(MSGS))),
            ("c2s", req(121, store)),
            ("s2c", resp()),
        ]
    )
    assert [m["consumer"] for m in table(rows, "messages")] == ["group:9", "group:9"]
    assert [a["consumer"] for a in table(rows, "acks")] == ["group:9"]


def test_payload_policy_applies():
    ctx = Context(payload=PayloadPolicy(mode="hash"))
    rows = run([("c2s", req(101, send_new(MSGS)))], ctx=ctx)
    m = table(rows, "messages")[0]
    assert m["value"] is None and m["value_size"] == 5 and len(m["value_hash"]) == 64


def test_corrupt_message_list_is_an_error_row():
    bad = send_new(MSGS)[:-3]
    rows = run(login() + [("c2s", req(101, bad)), ("s2c", resp())])
    cmd = table(rows, "commands")[2]
    assert cmd["decode_status"] in ("malformed", "truncated") and cmd["raw"]
    assert table(rows, "messages") == []


def _headers_by_reader(blob: bytes):
    """user_headers as it was before its plain-indexing path: Reader in each layout."""
    try:
        return wire._headers_read(blob, typed_keys=False)
    except DecodeError as e:
        try:
            return wire._headers_read(blob, typed_keys=True)
        except DecodeError:
            raise e from None


@pytest.mark.parametrize("seed", range(200))
def test_user_headers_read_as_the_reader_reads_them(seed):
    """Random and damaged header blobs, both layouts: the same entries, or the same error."""
    rnd = random.Random(seed)
    items = [
        (
            rnd.choice(["k", "source", "é", ""]),
            rnd.randrange(1, 16),
            rnd.randbytes(rnd.choice([0, 1, 2, 4, 8, 16, 3])),
        )
        for _ in range(rnd.randrange(1, 4))
    ]
    blob = bytearray(build_headers(items))
    if seed % 2:  # typed keys (apache-iggy 0.9): a kind byte before every key
        blob = bytearray()
        for key, kind, value in items:
            k = key.encode()
            blob += (
                bytes([2])
                + struct.pack("<I", len(k))
                + k
                + bytes([kind])
                + struct.pack("<I", len(value))
                + value
            )
    if seed % 3 == 0 and blob:
        blob[rnd.randrange(len(blob))] = rnd.randrange(256)
    if seed % 5 == 0:
        del blob[rnd.randrange(len(blob) + 1) :]
    blob = bytes(blob) + b"\x00" * (seed % 7 == 0)
    wire._SEEN.clear()
    try:
        want = _headers_by_reader(blob)
    except DecodeError as e:
        with pytest.raises(DecodeError) as got:
            wire.user_headers(blob)
        assert str(got.value) == str(e)
        return
    assert wire.user_headers(blob) == want
    assert wire.user_headers(blob) is wire.user_headers(blob)  # a blob seen before: its list again


def _sends(n: int) -> list[bytes]:
    """`n` SEND_MESSAGES requests, one message each: id i, payload value-i."""
    return [req(101, send_new([(i + 1, b"value-%d" % i, b"")])) for i in range(n)]


def _damaged(frame: bytes, add: int = 4096) -> bytes:
    """`frame` with its length field `add` larger (one bit flipped for 4096)."""
    return u32(struct.unpack_from("<I", frame)[0] + add) + frame[4:]


def _produced(rows) -> list[bytes]:
    return sorted(m.get("value") for m in table(rows, "messages") if m.get("direction") == "produce")


def _c2s_accounted(rows) -> int:
    return sum(r.get("size") for r in table(rows, "commands") if r.get("direction") == "c2s")


def test_a_damaged_length_that_runs_past_the_end_of_the_connection_loses_no_send():
    """SEND_MESSAGES 25 of 30 says 4096 bytes more than the connection holds: at the close it and
    the 4 after it were one truncated row, their messages lost. Now it alone is malformed."""
    sends = _sends(30)
    sends[25] = _damaged(sends[25])
    rows = run(login() + [c for s in sends for c in (("c2s", s), ("s2c", resp()))])
    cmds = [r for r in table(rows, "commands") if r.get("direction") == "c2s"]
    ok = [r for r in cmds if r.get("command") == "SEND_MESSAGES" and r.get("decode_status") == "ok"]
    assert len(ok) == 29
    [bad] = [r for r in cmds if r.get("decode_status") != "ok"]
    assert bad.get("decode_status") == "malformed" and bad.get("raw") is None
    assert "runs past the end of the connection" in bad.get("decode_error")
    assert bad.get("size") == len(sends[25])
    assert _produced(rows) == sorted(b"value-%d" % i for i in range(30) if i != 25)
    assert _c2s_accounted(rows) == len(login()[0][1]) + sum(map(len, sends))


def test_a_damaged_length_that_runs_into_a_capture_gap_loses_no_send():
    """The same damage (SEND 12) before a capture gap that took SEND 20: the gap was one row
    spanning the damaged frame's 4 KiB, SENDs 13..19 lost. Now they are read, then the gap."""
    sends = _sends(30)
    sends[12] = _damaged(sends[12])
    chunks = login() + [c for s in sends[:20] for c in (("c2s", s), ("s2c", resp()))]
    d = Drive(PROTOCOL.conversation(CONN, Context()))
    for i, (direction, data) in enumerate(chunks):
        d.feed(direction, data, ts=1_000_000_000 + i * 1_000_000)
    d.gap("c2s", len(sends[20]))
    for s in sends[21:]:
        d.feed("c2s", s).feed("s2c", resp())
    d.close().tables()
    rows = [(t, x) for t, r in d.rows for x in (r.rows() if isinstance(r, tables.Block) else [r])]
    cmds = [r for r in table(rows, "commands") if r.get("direction") == "c2s"]
    [bad, gap] = [r for r in cmds if r.get("decode_status") != "ok"]
    assert bad.get("decode_status") == "malformed" and "runs past a capture gap" in bad.get("decode_error")
    assert bad.get("size") == len(sends[12])
    assert gap.get("decode_status") == "gap" and gap.get("size") == len(sends[20])
    assert _produced(rows) == sorted(b"value-%d" % i for i in range(30) if i not in (12, 20))
    assert _c2s_accounted(rows) == len(login()[0][1]) + sum(map(len, sends))
