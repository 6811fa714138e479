"""Golden-byte tests: every command payload layout of the Iggy spec, plus later additions."""

from __future__ import annotations

import json

import pytest

from brokerscope import tables
from tests.support import cuts

from .kit import login, num_id, req, resp, run, s8, s32, str_id, table, u8, u32, u64

STREAM_TOPIC = num_id(1) + str_id("orders")

# (code, name, payload, expected subset of details)
SPEC_CASES = [
    (1, "PING", b"", {}),
    (10, "GET_STATS", b"", {}),
    (20, "GET_ME", b"", {}),
    (21, "GET_CLIENT", u32(42), {"client_id": 42}),
    (22, "GET_CLIENTS", b"", {}),
    (
        100,
        "POLL_MESSAGES",
        b"\x01" + u32(9) + STREAM_TOPIC + u32(2) + b"\x01" + u64(5) + u32(10) + b"\x01",
        {
            "consumer": {"kind": "consumer", "id": 9},
            "partition_id": 2,
            "strategy": {"kind": "offset", "value": 5},
            "count": 10,
            "auto_commit": True,
        },
    ),
    (
        120,
        "GET_CONSUMER_OFFSET",
        b"\x02" + u32(3) + STREAM_TOPIC + u32(1),
        {"consumer": {"kind": "consumer_group", "id": 3}, "partition_id": 1},
    ),
    (
        121,
        "STORE_CONSUMER_OFFSET",
        b"\x01" + u32(9) + STREAM_TOPIC + u32(1) + u64(77),
        {"consumer": {"kind": "consumer", "id": 9}, "partition_id": 1, "offset": 77},
    ),
    (200, "GET_STREAM", str_id("s1"), {"stream_id": {"kind": "string", "length": 2, "value": "s1"}}),
    (201, "GET_STREAMS", b"", {}),
    (202, "CREATE_STREAM", u32(5) + s8("s1"), {"stream_id": 5, "name": "s1"}),
    (203, "DELETE_STREAM", num_id(5), {"stream_id": {"kind": "numeric", "length": 4, "value": 5}}),
    (300, "GET_TOPIC", STREAM_TOPIC, {"topic_id": {"kind": "string", "length": 6, "value": "orders"}}),
    (301, "GET_TOPICS", num_id(1), {"stream_id": {"kind": "numeric", "length": 4, "value": 1}}),
    (
        302,
        "CREATE_TOPIC",
        num_id(1) + u32(2) + u32(3) + s8("t"),
        {"topic_id": 2, "partitions_count": 3, "name": "t", "layout": "spec"},
    ),
    (303, "DELETE_TOPIC", STREAM_TOPIC, {"stream_id": {"kind": "numeric", "length": 4, "value": 1}}),
    (402, "CREATE_PARTITIONS", STREAM_TOPIC + u32(4), {"partitions_count": 4}),
    (403, "DELETE_PARTITIONS", STREAM_TOPIC + u32(2), {"partitions_count": 2}),
    (600, "GET_CONSUMER_GROUP", STREAM_TOPIC + u32(8), {"group_id": 8}),
    (601, "GET_CONSUMER_GROUPS", STREAM_TOPIC, {}),
    (602, "CREATE_CONSUMER_GROUP", STREAM_TOPIC + u32(8), {"group_id": 8}),
    (603, "DELETE_CONSUMER_GROUP", STREAM_TOPIC + u32(8), {"group_id": 8}),
    (604, "JOIN_CONSUMER_GROUP", STREAM_TOPIC + u32(8), {"group_id": 8}),
    (605, "LEAVE_CONSUMER_GROUP", STREAM_TOPIC + u32(8), {"group_id": 8}),
]

# Commands added since the spec (layouts from apache/iggy core/common).
LATER_CASES = [
    (11, "GET_SNAPSHOT_FILE", b"\x02\x01\x03", {"compression": 2, "snapshot_types": [1, 3]}),
    (12, "GET_CLUSTER_METADATA", b"", {}),
    (31, "GET_USER", str_id("bob"), {"user_id": {"kind": "string", "length": 3, "value": "bob"}}),
    (32, "GET_USERS", b"", {}),
    (34, "DELETE_USER", num_id(2), {"user_id": {"kind": "numeric", "length": 4, "value": 2}}),
    (35, "UPDATE_USER", num_id(2) + b"\x01" + s8("al") + b"\x01\x02", {"username": "al", "status": 2}),
    (36, "UPDATE_PERMISSIONS", num_id(2) + b"\x00", {"permissions": None}),
    (39, "LOGOUT_USER", b"", {}),
    (41, "GET_PERSONAL_ACCESS_TOKENS", b"", {}),
    (42, "CREATE_PERSONAL_ACCESS_TOKEN", s8("ci") + u64(3600), {"name": "ci", "expiry": 3600}),
    # its body reads as a LOGIN_WITH_PERSONAL_ACCESS_TOKEN's: the name a token may be is not
    # shown, as no reply confirms it (test_every_damaged_code_keeps_the_secret_out)
    (43, "DELETE_PERSONAL_ACCESS_TOKEN", s8("ci-token"), {"payload_size": 9}),
    (102, "FLUSH_UNSAVED_BUFFER", STREAM_TOPIC + u32(1) + b"\x01", {"partition_id": 1, "fsync": True}),
    (
        100,
        "POLL_MESSAGES",
        b"\x02" + str_id("grp") + STREAM_TOPIC + u32(0) + b"\x05" + u64(0) + u32(100) + b"\x00",
        {
            "consumer": {"kind": "consumer_group", "id": "grp", "id_kind": "string"},
            "partition_id": None,
            "strategy": {"kind": "next", "value": 0},
            "auto_commit": False,
        },
    ),
    (
        121,
        "STORE_CONSUMER_OFFSET",
        b"\x01" + num_id(4) + STREAM_TOPIC + u32(1) + u64(12),
        {"consumer": {"kind": "consumer", "id": 4, "id_kind": "numeric"}, "offset": 12},
    ),
    (122, "DELETE_CONSUMER_OFFSET", b"\x01" + num_id(4) + STREAM_TOPIC + u32(1), {"partition_id": 1}),
    # the same: an empty reply confirms nothing (test_a_reply_echoing_the_name_shows_it)
    (202, "CREATE_STREAM", s8("only-name"), {"payload_size": 10}),
    (204, "UPDATE_STREAM", num_id(1) + s8("renamed"), {"name": "renamed"}),
    (205, "PURGE_STREAM", num_id(1), {}),
    (
        304,
        "UPDATE_TOPIC",
        STREAM_TOPIC + b"\x02" + u64(60) + u64(0) + b"\x01" + s8("t2"),
        {"compression_algorithm": 2, "message_expiry": 60, "name": "t2"},
    ),
    (305, "PURGE_TOPIC", STREAM_TOPIC, {}),
    (503, "DELETE_SEGMENTS", STREAM_TOPIC + u32(1) + u32(3), {"partition_id": 1, "segments_count": 3}),
    (602, "CREATE_CONSUMER_GROUP", STREAM_TOPIC + u32(0) + s8("g"), {"group_id": None, "name": "g"}),
    (604, "JOIN_CONSUMER_GROUP", STREAM_TOPIC + str_id("g"), {"group_id": {"kind": "string"}}),
]


def _subset(expected: dict, actual: dict) -> None:
    for k, v in expected.items():
        if isinstance(v, dict) and isinstance(actual.get(k), dict):
            _subset(v, actual[k])
        else:
            assert actual.get(k) == v, (k, actual)


@pytest.mark.parametrize("code,name,payload,expected", SPEC_CASES + LATER_CASES)
def test_request_layouts(code, name, payload, expected):
    rows = run([("c2s", req(code, payload)), ("s2c", resp())])
    cmds = table(rows, "commands")
    tables.conform("commands", cmds)
    assert [c["decode_status"] for c in cmds] == ["ok", "ok"], cmds
    assert cmds[0]["command"] == name and cmds[0]["command_code"] == code
    assert cmds[1]["command"] == name and cmds[1]["error_code"] == 0
    _subset(expected, json.loads(cmds[0]["details"]))
    assert cmds[0]["size"] == 8 + len(payload)
    lat = table(rows, "latencies")
    assert len(lat) == 1 and lat[0]["request_command"] == name and lat[0]["latency_us"] == 1000.0


@pytest.mark.parametrize("code,name,payload,expected", SPEC_CASES + LATER_CASES)
def test_truncated_payloads_are_error_rows(code, name, payload, expected):
    if not payload or code == 11:
        pytest.skip("empty payload, or a list running to the end: no truncation to detect")
    # one byte short ("\x05\0\0\0\x02s" is also a valid 5-byte name: cut two there)
    cut = 2 if code == 202 else 1
    rows = run([("c2s", req(code, payload[:-cut]))])
    cmds = table(rows, "commands")
    assert len(cmds) == 1
    assert cmds[0]["decode_status"] in ("truncated", "malformed")
    assert cmds[0]["command"] == name


def test_login_user_redacts_password():
    payload = s8("iggy") + s8("hunter2secret") + s32("0.7.0") + s32("ctx")
    rows = run([("c2s", req(38, payload)), ("s2c", resp(u32(1)))])
    cmds = table(rows, "commands")
    d = json.loads(cmds[0]["details"])
    assert d["username"] == "iggy" and d["password"] == "<redacted 13 bytes>"
    assert json.loads(cmds[1]["details"])["user_id"] == 1
    assert b"hunter2secret" not in repr(rows).encode()


@pytest.mark.parametrize(
    "code,payload",
    [
        (38, s8("u") + s8("hunter2secret")),
        (44, s8("hunter2secret")),
        (33, s8("u") + s8("hunter2secret") + b"\x01\x00"),
        (37, num_id(1) + s8("hunter2secret") + s8("hunter2secret")),
    ],
)
def test_secrets_never_in_rows_even_when_malformed(code, payload):
    for p in (payload, payload + b"\x99\x98"):  # valid, then with trailing garbage
        rows = run([("c2s", req(code, p)), ("s2c", resp())])
        assert b"hunter2secret" not in repr(rows).encode()
        assert all(r.get("raw") is None for r in table(rows, "commands"))


def test_pat_token_in_response_is_redacted():
    rows = run([("c2s", req(42, s8("ci") + u64(0))), ("s2c", resp(s8("tok-very-secret")))])
    d = json.loads(table(rows, "commands")[1]["details"])
    assert d["token"] == "<redacted 15 bytes>"
    assert b"tok-very-secret" not in repr(rows).encode()


def test_structured_responses():
    stream = u32(1) + u64(111) + u32(1) + u64(10) + u64(2) + s8("s")
    topic = u32(2) + u64(222) + u32(1) + u64(0) + u8(1) + u64(0) + u8(1) + u64(10) + u64(2) + s8("t")
    part = u32(1) + u64(333) + u32(1) + u64(1) + u64(10) + u64(2)
    client = u32(5) + u32(1) + u8(1) + s32("127.0.0.1:5000") + u32(1) + u32(1) + u32(2) + u32(3)
    rows = run(
        [
            ("c2s", req(200, num_id(1))),
            ("c2s", req(300, STREAM_TOPIC)),
            ("c2s", req(120, b"\x01" + u32(9) + STREAM_TOPIC + u32(1))),
            ("c2s", req(20)),
            ("c2s", req(201)),
            ("s2c", resp(stream + topic)),
            ("s2c", resp(topic + part)),
            ("s2c", resp(u32(1) + u64(9) + u64(4))),
            ("s2c", resp(client)),
            ("s2c", resp(stream + stream)),
        ]
    )
    cmds = [c for c in table(rows, "commands") if c["direction"] == "s2c"]
    assert all(c["decode_status"] == "ok" for c in cmds), cmds
    d = [json.loads(c["details"]) for c in cmds]
    assert d[0]["name"] == "s" and d[0]["topics"][0]["name"] == "t"
    assert d[1]["partitions"][0]["current_offset"] == 1
    assert (d[2]["current_offset"], d[2]["stored_offset"]) == (9, 4)
    assert d[3]["address"] == "127.0.0.1:5000" and d[3]["consumer_groups"][0]["group_id"] == 3
    assert [s["name"] for s in d[4]["streams"]] == ["s", "s"]
    assert [c["correlation_id"] for c in cmds] == [1, 2, 3, 4, 5]


def test_error_status_is_error_code():
    rows = run([("c2s", req(200, num_id(9))), ("s2c", resp(b"", status=1009))])
    cmds = table(rows, "commands")
    assert cmds[1]["error_code"] == 1009 and cmds[1]["decode_status"] == "ok"
    assert table(rows, "latencies")[0]["error_code"] == 1009


def test_unknown_command_keeps_no_raw():
    rows = run(login() + [("c2s", req(777, b"abc")), ("s2c", resp())])
    cmds = table(rows, "commands")[2:]
    assert cmds[0]["decode_status"] == "unknown_command"
    # an unknown command's type is not determined: its bytes are not kept (Context.raw)
    assert cmds[0].get("raw") is None and cmds[0]["command_code"] == 777
    assert cmds[1]["decode_status"] == "ok"  # still paired


def test_client_raw_withheld_before_login():
    # a damaged frame before any login may be the login itself: its bytes are not kept
    rows = run([("c2s", req(777, b"u\x08hunter22")), ("s2c", resp())])
    cmd = table(rows, "commands")[0]
    assert cmd["decode_status"] == "unknown_command" and cmd.get("raw") is None


@pytest.mark.parametrize(
    ("secret_code", "damaged_code", "payload", "secret"),
    [
        (
            33,
            32,
            s8("bob") + s8("IGGYSECRETBOBPASS") + b"\x01\x00",
            b"IGGYSECRETBOBPASS",
        ),  # CREATE_USER -> GET_USERS
        (
            37,
            36,
            b"\x01\x04\x00\x00\x00\x07" + s8("IGGYOLDPW") + s8("IGGYNEWPW"),
            b"IGGYNEWPW",
        ),  # CHANGE_PASSWORD
        (44, 43, s8("IGGYSECRETPATTOKEN-abc"), b"IGGYSECRETPATTOKEN-abc"),  # LOGIN_WITH_PAT -> DELETE_PAT
        (44, 45, s8("IGGYSECRETPATTOKEN-abc"), b"IGGYSECRETPATTOKEN-abc"),
        (
            38,
            39,
            s8("admin") + s8("IGGYLOGINPW") + s32("0.7.0") + s32(""),
            b"IGGYLOGINPW",
        ),  # LOGIN_USER -> LOGOUT
    ],
)
def test_a_damaged_code_never_shows_a_secret(secret_code, damaged_code, payload, secret):
    """After a login, one bit of a secret command's code flipped (or one off) reads its body as
    another command's (found by a user trial: passwords in `raw`, a token in `details`): no column
    holds the secret, in clear or encoded, whether the other command decodes or fails."""
    rows = run([*login(), ("c2s", req(damaged_code, payload)), ("s2c", resp())])
    assert table(rows, "commands")[0]["decode_status"] == "ok"  # logged in: raw may be kept
    out = {t: table(rows, t) for t in ("commands", "messages", "latencies", "acks")}
    assert cuts.leaks(out, {"secret": secret}) == []
