"""Credentials stay out of every column whatever a damaged capture makes of a command code.

A user trial damaged the code of a login frame (1,024 values) and found the password or token in
`raw` or `details` for dozens of them: the body of a credential command also reads as another
command's (a token's layout, a length and a string, is every name's). The decoder now goes by
the content: a body that reads as a secret command's keeps no `raw`, and its fields wait for a
reply that confirms the command (commands.secret_reading, conversation._hold)."""

from __future__ import annotations

import json

import pytest

from brokerscope import tables
from brokerscope.protocols.base import Context
from brokerscope.protocols.iggy import PROTOCOL
from tests.support import cuts

from .kit import CONN, login, num_id, req, resp, run, s8, s32, table, u8, u32, u64, vsr_header

TOKEN = b"IggyPatToken0123456789abcdefghijklmnopqrstuvwxyzAB"  # 50 characters, as Iggy makes them
PASSWORD = b"IggySecretPassw0rd"
REGISTER_HEAD = b"\x00\x2c\x00\x00" + s8("rust-sdk") + s8("0.11.0")

# (secret command, its body, the secret in it)
CREDENTIAL_FRAMES = [
    (38, s8("admin") + s8(PASSWORD) + s32("0.7.0") + s32(""), PASSWORD),  # LOGIN_USER
    (38, s8("admin") + s8(PASSWORD), PASSWORD),  # LOGIN_USER, the spec's layout
    (40, REGISTER_HEAD + s8("admin") + s8(PASSWORD) + s32(""), PASSWORD),  # LOGIN_REGISTER
    (40, REGISTER_HEAD + s8(TOKEN) + s32(""), TOKEN),  # LOGIN_REGISTER with a token
    (44, s8(TOKEN), TOKEN),  # LOGIN_WITH_PERSONAL_ACCESS_TOKEN
    (45, s8(TOKEN), TOKEN),  # LOGIN_REGISTER_WITH_PERSONAL_ACCESS_TOKEN
    (33, s8("bob") + s8(PASSWORD) + b"\x01\x00", PASSWORD),  # CREATE_USER
    (33, s8("bob") + s8(PASSWORD) + b"\x01\x01" + u32(3) + b"\x01\x00\x00", PASSWORD),
    (37, num_id(7) + s8(b"IggyOldPassword1") + s8(PASSWORD), PASSWORD),  # CHANGE_PASSWORD
]


def damaged_codes(code: int) -> list[int]:
    """What the trial tried: every flip of the code's low 10 bits (all of 0..1023, where every
    Iggy code lies), and every flip of one or two of its 32 bits."""
    out = set(range(1024))
    for i in range(32):
        out.add(code ^ (1 << i))
        out.update(code ^ (1 << i) ^ (1 << j) for j in range(i))
    return sorted(out)


def decode(chunks: list[tuple[str, bytes]]) -> dict[str, list[dict]]:
    """The rows of one connection per table (the conversation fed directly: thousands of runs)."""
    conv = PROTOCOL.conversation(CONN, Context())
    got: list = []
    for i, (direction, data) in enumerate(chunks):
        got.extend(conv.feed(direction, data, 1_000_000_000 + i * 1_000_000))
    got.extend(conv.close())
    out: dict[str, list[dict]] = {}
    for t, r in got:
        out.setdefault(t, []).extend(r.rows() if isinstance(r, tables.Block) else [r])
    return out


def leaking_codes(chunks_for) -> list[int]:
    bad = []
    for code, secret, chunks in chunks_for:
        if cuts.leaks(decode(chunks), {"secret": secret}):
            bad.append(code)
    return bad


@pytest.mark.parametrize("after_login", [False, True], ids=["first", "after_a_login"])
@pytest.mark.parametrize(("secret_code", "body", "secret"), CREDENTIAL_FRAMES)
def test_every_damaged_code_keeps_the_secret_out(secret_code, body, secret, after_login):
    """Each damaged code of a credential frame, answered as a login is (a user id), before and
    after a login on the connection: no column holds the secret, in clear, hex, UTF-16 or
    base64 (cuts.leaks)."""
    pre = login() if after_login else []
    runs = (
        (code, secret, [*pre, ("c2s", req(code, body)), ("s2c", resp(u32(1)))])
        for code in damaged_codes(secret_code)
    )
    assert leaking_codes(runs) == []


@pytest.mark.parametrize("after_login", [False, True], ids=["first", "after_a_login"])
def test_a_token_reply_under_every_damaged_request_code_stays_out(after_login):
    """CREATE_PERSONAL_ACCESS_TOKEN's reply is the token: its request's code damaged, the reply
    is read for another command (a failed decode kept it in `raw`, a decoded one in fields)."""
    pre = login() if after_login else []
    runs = (
        (code, TOKEN, [*pre, ("c2s", req(code, s8("ci") + u64(0))), ("s2c", resp(s8(TOKEN)))])
        for code in damaged_codes(42)
    )
    assert leaking_codes(runs) == []


def _vsr(op: int, body: bytes, code: int = 0, reply: bytes = b"") -> list[tuple[str, bytes]]:
    return [
        ("c2s", vsr_header(5, 256 + len(body), request=0, operation=op, code=code) + body),
        ("s2c", vsr_header(8, 256 + len(reply), request=0, operation=op) + reply),
    ]


@pytest.mark.parametrize(
    ("body", "secret"),
    [
        (REGISTER_HEAD + s8("admin") + s8(PASSWORD) + s32(""), PASSWORD),
        (REGISTER_HEAD + s8(TOKEN) + s32(""), TOKEN),
        (s8(TOKEN), TOKEN),
        (s8("bob") + s8(PASSWORD) + b"\x01\x00", PASSWORD),
        (num_id(7) + s8(b"IggyOldPassword1") + s8(PASSWORD), PASSWORD),
    ],
)
def test_vsr_every_operation_and_code_keeps_the_secret_out(body, secret):
    """The VSR generation names the command by the operation byte (a non-replicated one by the
    code @196): every operation, and under NON_REPLICATED every code of 0..1023."""
    reply = u32(0) + u32(1) + u64(42) + u32(0) + s8("0.0.0")  # a register reply
    runs = [(op, secret, _vsr(op, body, reply=reply)) for op in range(256)]
    runs += [(2000 + c, secret, _vsr(2, body, code=c, reply=reply)) for c in range(1024)]
    assert leaking_codes(runs) == []


def test_the_rule_would_have_caught_the_trial():
    """The check itself finds a leak when there is one: a stream really named like a token,
    confirmed by its reply, is shown (the name is a name, not a credential)."""
    reply = u32(1) + u64(0) + u32(0) + u64(0) + u64(0) + s8(TOKEN)
    out = decode([*login(), ("c2s", req(202, s8(TOKEN))), ("s2c", resp(reply))])
    assert cuts.leaks(out, {"secret": TOKEN})


def test_a_reply_echoing_the_name_shows_it():
    """CREATE_STREAM by name alone reads as a token login: its row waits for the reply, and the
    created stream's name in it confirms the command: the request is shown as decoded."""
    reply = u32(3) + u64(0) + u32(0) + u64(0) + u64(0) + s8("orders")
    rows = run([*login(), ("c2s", req(202, s8("orders"))), ("s2c", resp(reply))])
    cmds = table(rows, "commands")
    assert [(c["direction"], c["command"]) for c in cmds[2:]] == [
        ("c2s", "CREATE_STREAM"),
        ("s2c", "CREATE_STREAM"),
    ]
    assert json.loads(cmds[2]["details"])["name"] == "orders"


@pytest.mark.parametrize(
    "reply",
    [
        None,  # the connection ends first
        resp(),  # an empty reply confirms nothing
        resp(u32(1)),  # a login's reply (the user id)
        resp(status=1012),  # refused
        resp(u32(3) + u64(0) + u32(0) + u64(0) + u64(0) + s8("other")),  # another name
    ],
    ids=["none", "empty", "user_id", "refused", "other_name"],
)
def test_a_name_no_reply_confirms_is_not_shown(reply):
    rows = run([*login(), ("c2s", req(202, s8("orders-or-token")))] + ([("s2c", reply)] if reply else []))
    cmd = [c for c in table(rows, "commands") if c["direction"] == "c2s"][1]
    d = json.loads(cmd["details"])
    assert cmd["command"] == "CREATE_STREAM" and cmd.get("raw") is None
    assert "name" not in d and d["payload_size"] == 16 and "LOGIN_WITH_PERSONAL_ACCESS_TOKEN" in d["_note"]
    assert b"orders-or-token" not in repr(rows).encode()


def test_numeric_ids_are_not_taken_for_secrets():
    """01 04 01 00 00 00 (stream 1) reads as a CREATE_USER with a one-byte password: readings
    whose secrets are that short do not count (commands.SECRET_MIN)."""
    rows = run([*login(), ("c2s", req(200, num_id(1))), ("s2c", resp())])
    d = json.loads(table(rows, "commands")[2]["details"])
    assert d["stream_id"]["value"] == 1


def test_a_reply_that_reads_as_a_token_keeps_no_bytes():
    """Under a request of another command (a damaged CREATE_PERSONAL_ACCESS_TOKEN code), a
    reply that reads as a token keeps no `raw` when that command's reply fails to decode, and
    shows its size only when it has no layout to decode."""
    for code, shown in (
        (200, None),
        (203, {"payload_size": 51, "_note": "not shown: its bytes read as a personal access token"}),
    ):
        rows = run([*login(), ("c2s", req(code, num_id(5))), ("s2c", resp(u8(len(TOKEN)) + TOKEN))])
        cmd = table(rows, "commands")[3]
        assert cmd.get("raw") is None and TOKEN not in repr(rows).encode()
        if shown:
            assert {k: v for k, v in json.loads(cmd["details"]).items() if k in shown} == shown
