"""A user-supplied schema (`[protocols.tubemq] schema_file`): its messages replace brokerscope's
built-in ones of the same name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from brokerscope.config import Settings
from brokerscope.protocols.base import C2S, S2C, Context
from brokerscope.protocols.schema import MessagePool, SchemaError, load_descriptor_set
from brokerscope.protocols.tubemq import PROTOCOL

from .kit import CONN, request, response, run

pytest.importorskip("grpc_tools")

STANDIN = Path(__file__).parent / "data" / "v2_standin.proto"


@pytest.fixture(scope="module")
def fds() -> bytes:
    return load_descriptor_set(STANDIN)


@pytest.fixture(scope="module")
def standin(fds):
    """The stand-in's message classes, built independently of the decoder's pool."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    for f in descriptor_pb2.FileDescriptorSet.FromString(fds).file:
        pool.Add(f)
    return lambda name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"standin.{name}"))


def _v2_conversation(standin, schemas: dict) -> dict:
    """Register (20), heartbeat (21) and get-part-meta (22) against the master, decoded."""
    reg = standin("RegisterRequestC2MV2")(
        clientId="cb-consumer-1",
        groupName="grp-balance",
        topicList=["orders", "audit"],
        sourceCount=2,
        authInfo=standin("Credential")(userName="alice", signature="c2VjcmV0LXNpZ25hdHVyZQ=="),
    )
    reg_rsp = standin("RegisterResponseM2CV2")(errCode=200, errMsg="OK", brokerInfos=["1:10.0.0.9:8123"])
    hb = standin("HeartRequestC2MV2")(clientId="cb-consumer-1", groupName="grp-balance")
    hb_rsp = standin("HeartResponseM2CV2")(errCode=200, errMsg="OK")
    meta = standin("GetPartMetaRequestC2M")(clientId="cb-consumer-1", groupName="grp-balance")
    meta_rsp = standin("GetPartMetaResponseM2C")(errCode=404, errMsg="no such group")
    conv = PROTOCOL.conversation(CONN, Context(schemas=schemas))
    return run(
        conv,
        [
            (C2S, request(1, 1, 20, reg)),
            (S2C, response(1, 20, reg_rsp)),
            (C2S, request(2, 1, 21, hb)),
            (S2C, response(2, 21, hb_rsp)),
            (C2S, request(3, 1, 22, meta)),
            (S2C, response(3, 22, meta_rsp)),
        ],
    )


def test_v2_calls_without_schema_use_the_builtin_messages(standin):
    """No schema: the stand-in's bytes are read with brokerscope's own V2 messages (TubeMQ's
    layout), so the fields whose numbers differ from the stand-in's come out differently."""
    out = _v2_conversation(standin, {})
    cmds = out["commands"]
    assert [c["command"] for c in cmds] == [
        "consumerRegisterC2MV2",
        "consumerRegisterC2MV2",
        "consumerHeartbeatC2MV2",
        "consumerHeartbeatC2MV2",
        "consumerGetPartMetaInfoC2M",
        "consumerGetPartMetaInfoC2M",
    ]
    assert all(c["decode_status"] == "ok" for c in cmds[2:])
    # the stand-in's brokerConfigId is a string where TubeMQ's field of that number is a number:
    # a field under another wire type, damage to the built-in message; the error names the remedy
    assert cmds[1]["decode_status"] == "malformed" and cmds[1]["error_code"] is None
    assert cmds[1]["decode_error"].startswith(
        "RegisterResponseM2CV2 seems damaged (brokerConfigId under another wire type; or another version"
    )
    assert "[protocols.tubemq] schema_file" in cmds[1]["decode_error"]
    # the stand-in's topicList (3, two topics) is TubeMQ's hostName (singular): a field given twice
    # in a message that carries credentials, as a damaged tag would make it: none of its fields
    # kept (a user trial moved a credential into another field that way)
    assert cmds[0]["decode_status"] == "malformed" and cmds[0]["client_id"] is None
    assert cmds[0]["decode_error"].startswith(
        "RegisterRequestC2MV2 seems damaged (its fields do not encode back to its bytes; or another version"
    )
    assert json.loads(cmds[0]["details"])["request"] == {}
    assert "c2VjcmV0" not in cmds[0]["details"]
    heartbeat = json.loads(cmds[2]["details"])["request"]
    assert "schema" not in heartbeat and "fields" not in heartbeat
    assert [c["error_code"] for c in cmds[1::2]] == [None, 0, 404]
    assert len(out["latencies"]) == 3


def test_v2_calls_with_schema_get_field_names(standin, fds):
    out = _v2_conversation(standin, {"tubemq": fds})
    cmds = out["commands"]
    reg = json.loads(cmds[0]["details"])["request"]
    assert reg["schema"] == "v2_standin.proto"
    assert reg["clientId"] == "cb-consumer-1" and reg["sourceCount"] == 2
    assert reg["authInfo"] == {"userName": "alice", "signature": "<redacted 24 bytes>"}
    assert "c2VjcmV0" not in cmds[0]["details"]
    assert cmds[0]["client_id"] == "cb-consumer-1" and cmds[0]["topics"] == ["orders", "audit"]
    reg_rsp = json.loads(cmds[1]["details"])
    assert reg_rsp["brokers"] == [
        {"info": "1:10.0.0.9:8123", "broker_id": 1, "host": "10.0.0.9", "port": 8123}
    ]
    assert cmds[1]["error_code"] == 0 and cmds[3]["error_code"] == 0
    # errCode other than 200 is an error of the call, with its message
    assert cmds[5]["error_code"] == 404
    assert json.loads(cmds[5]["details"])["error"] == "no such group"
    lat = out["latencies"]
    assert [(x["request_command"], x["correlation_id"], x["error_code"]) for x in lat] == [
        ("consumerRegisterC2MV2", 1, 0),
        ("consumerHeartbeatC2MV2", 2, 0),
        ("consumerGetPartMetaInfoC2M", 3, 404),
    ]


def test_schema_message_replaces_a_builtin_one(standin, fds):
    close = standin("CloseRequestC2M")(clientId="c9", groupName="g", closeReason="rebalance")
    for schemas, expect in (({}, None), ({"tubemq": fds}, "rebalance")):
        conv = PROTOCOL.conversation(CONN, Context(schemas=schemas))
        cmd = run(conv, [(C2S, request(7, 1, 6, close))])["commands"][0]
        req = json.loads(cmd["details"])["request"]
        assert cmd["command"] == "consumerCloseClientC2M" and cmd["client_id"] == "c9"
        assert req.get("closeReason") == expect


class _Raw:
    """Stands in for a message: serializes to the given bytes."""

    def __init__(self, data: bytes):
        self.data = data

    def SerializeToString(self) -> bytes:  # noqa: N802 (protobuf's name)
        return self.data


def test_schema_body_that_does_not_parse_is_malformed_without_raw(fds):
    conv = PROTOCOL.conversation(CONN, Context(schemas={"tubemq": fds}))
    cut = _Raw(b"\x0a\x10abc")  # field 1, length 16, 3 bytes follow
    cmd = run(conv, [(C2S, request(4, 1, 21, cut))])["commands"][0]
    assert cmd["command"] == "consumerHeartbeatC2MV2"
    assert cmd["decode_status"] == "malformed" and cmd["decode_error"].startswith("HeartRequestC2MV2:")
    assert cmd.get("raw") is None  # a V2 master call may carry credentials


def test_descriptor_set_file_and_proto_file_load_the_same(tmp_path, fds):
    desc = tmp_path / "v2.desc"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{STANDIN.parent}",
            "--include_imports",
            f"--descriptor_set_out={desc}",
            str(STANDIN),
        ],
        check=True,
        capture_output=True,
    )
    assert load_descriptor_set(desc) == desc.read_bytes()
    a, b = MessagePool.from_bytes(desc.read_bytes()), MessagePool.from_bytes(fds)
    assert a.names() == b.names()
    assert "RegisterRequestC2MV2" in a.names() and "Credential" in a.names()


def test_settings_load_the_schema_file_and_hand_it_to_the_decoder(tmp_path, fds):
    conf = tmp_path / "b.toml"
    conf.write_text(f'[protocols.tubemq]\nschema_file = "{STANDIN}"\n')
    s = Settings.load(conf)
    assert s.schemas == {"tubemq": fds}
    assert s.context("tubemq").schemas["tubemq"] == fds
    assert Settings.load().schemas == {}


@pytest.mark.parametrize(
    "content, suffix, expect",
    [
        (None, ".proto", "schema file not found"),
        (b'syntax = "proto2";\nmessage X { optional strin a = 1; }\n', ".proto", "cannot compile"),
        (b"\xff\xfe not a descriptor set", ".desc", "not a protobuf FileDescriptorSet"),
        (b"", ".desc", "defines no files"),
    ],
)
def test_bad_schema_files_are_clear_errors(tmp_path, content, suffix, expect):
    p = tmp_path / f"schema{suffix}"
    if content is not None:
        p.write_bytes(content)
    conf = tmp_path / "b.toml"
    conf.write_text(f'[protocols.tubemq]\nschema_file = "{p}"\n')
    with pytest.raises(SchemaError, match=expect):
        Settings.load(conf)


def test_cli_schema_flag(fds):
    """`brokerscope ingest --schema tubemq=FILE` sets [protocols.tubemq] schema_file."""
    from brokerscope.cli import UsageError, _settings, build_parser

    args = build_parser().parse_args(["ingest", "x.pcap", "--schema", f"tubemq={STANDIN}"])
    assert _settings(args).schemas == {"tubemq": fds}
    for bad in ("kafka=x.proto", "tubemq", "tubemq="):
        with pytest.raises(UsageError, match="--schema wants PROTO=FILE"):
            _settings(build_parser().parse_args(["ingest", "x.pcap", "--schema", bad]))
