"""The V2 client-balance consumer calls (methods 20, 21, 22) decode by field name with no schema.

The bodies are built here independently of brokerscope's own .proto: from a descriptor written
in this test with TubeMQ's field numbers and labels (MasterService.proto of apache/inlong,
commit a6c7a6a6, `required` where TubeMQ says so), or as literal bytes. The decoded values are
then asserted by name.
"""

from __future__ import annotations

import json

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from brokerscope.protocols.base import C2S, S2C

from .kit import new_conv, request, response, run

F = descriptor_pb2.FieldDescriptorProto
STR, I32, I64, BOOL, MSG = F.TYPE_STRING, F.TYPE_INT32, F.TYPE_INT64, F.TYPE_BOOL, F.TYPE_MESSAGE
REQ, OPT, REP = F.LABEL_REQUIRED, F.LABEL_OPTIONAL, F.LABEL_REPEATED

# message -> (name, number, label, type[, message type]) as a TubeMQ client sends them
C2M = [("clientId", 1, REQ, STR), ("groupName", 2, REQ, STR)]  # first fields of each V2 request
M2C = [("errCode", 1, REQ, I32), ("errMsg", 2, REQ, STR)]  # and of each V2 response
LAYOUT: dict[str, list[tuple]] = {
    "AuthenticateInfo": [
        ("userName", 1, REQ, STR),
        ("timestamp", 2, REQ, I64),
        ("nonce", 3, REQ, I32),
        ("othParams", 4, REQ, STR),
        ("signature", 5, REQ, STR),
    ],
    "MasterCertificateInfo": [
        ("authInfo", 1, OPT, MSG, "AuthenticateInfo"),
        ("authorizedToken", 2, OPT, STR),
    ],
    "MasterAuthorizedInfo": [("visitAuthorizedToken", 1, REQ, I64), ("authAuthorizedToken", 2, OPT, STR)],
    "ClientSubRepInfo": [
        ("brokerConfigId", 1, REQ, I64),
        ("topicMetaInfoId", 2, REQ, I64),
        ("lstAssignedTime", 3, OPT, I64),
        ("reportSubInfo", 4, OPT, BOOL),
        ("partSubInfo", 5, REP, STR),
    ],
    "OpsTaskInfo": [
        ("groupFlowCheckId", 1, OPT, I64),
        ("defFlowCheckId", 2, OPT, I64),
        ("qryPriorityId", 3, OPT, I32),
        ("csmFrmMaxOffsetCtrlId", 4, OPT, I64),
        ("requireAuth", 5, OPT, BOOL),
        ("defFlowControlInfo", 6, OPT, STR),
        ("groupFlowControlInfo", 7, OPT, STR),
    ],
    "RegisterRequestC2MV2": [
        *C2M,
        ("hostName", 3, REQ, STR),
        ("sourceCount", 4, REQ, I32),
        ("nodeId", 5, REQ, I32),
        ("topicList", 6, REP, STR),
        ("topicCondition", 7, REP, STR),
        ("subRepInfo", 8, OPT, MSG, "ClientSubRepInfo"),
        ("opsTaskInfo", 9, OPT, MSG, "OpsTaskInfo"),
        ("authInfo", 10, OPT, MSG, "MasterCertificateInfo"),
        ("jdkVersion", 11, OPT, STR),
    ],
    "RegisterResponseM2CV2": [
        *M2C,
        ("brokerConfigId", 3, OPT, I64),
        ("brokerConfigList", 4, REP, STR),
        ("opsTaskInfo", 5, OPT, MSG, "OpsTaskInfo"),
        ("authorizedInfo", 6, OPT, MSG, "MasterAuthorizedInfo"),
    ],
    "HeartRequestC2MV2": [
        *C2M,
        ("subRepInfo", 3, OPT, MSG, "ClientSubRepInfo"),
        ("opsTaskInfo", 4, OPT, MSG, "OpsTaskInfo"),
        ("authInfo", 5, OPT, MSG, "MasterCertificateInfo"),
    ],
    "HeartResponseM2CV2": [
        *M2C,
        ("brokerConfigId", 3, OPT, I64),
        ("brokerConfigList", 4, REP, STR),
        ("topicMetaInfoId", 5, OPT, I64),
        ("topicMetaInfoList", 6, REP, STR),
        ("opsTaskInfo", 7, OPT, MSG, "OpsTaskInfo"),
        ("authorizedInfo", 8, OPT, MSG, "MasterAuthorizedInfo"),
    ],
    "GetPartMetaRequestC2M": [
        *C2M,
        ("brokerConfigId", 3, REQ, I64),
        ("topicMetaInfoId", 4, REQ, I64),
        ("authInfo", 5, OPT, MSG, "MasterCertificateInfo"),
    ],
    "GetPartMetaResponseM2C": [
        *M2C,
        ("brokerConfigId", 3, OPT, I64),
        ("topicMetaInfoId", 4, OPT, I64),
        ("topicMetaInfoList", 5, REP, STR),
        ("brokerConfigList", 6, REP, STR),
    ],
}


@pytest.fixture(scope="module")
def tube():
    """name -> message class of a TubeMQ client's layout (a pool of its own, package `tube`)."""
    fdp = descriptor_pb2.FileDescriptorProto(name="tube_v2_test.proto", package="tube", syntax="proto2")
    for name, fields in LAYOUT.items():
        m = fdp.message_type.add(name=name)
        for fname, number, label, ftype, *ref in fields:
            f = m.field.add(name=fname, number=number, label=label, type=ftype)
            if ref:
                f.type_name = f".tube.{ref[0]}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return lambda name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tube.{name}"))


class Raw:
    """Literal body bytes, for the frame helpers (they call SerializeToString)."""

    def __init__(self, data: bytes):
        self.data = data

    def SerializeToString(self) -> bytes:  # noqa: N802 (protobuf's name)
        return self.data


BROKER_CONF_ID = 1_700_000_000_123  # beyond 32 bits: int64 kept exact
TOPIC_META_ID = 1_700_000_000_456
SIGNATURE = "c2lnbmF0dXJlLW9mLWFsaWNl"  # base64 text that must never reach a row
TOKEN_TEXT = "tok-abcdef-0123456789"

# GetPartMetaRequestC2M as bytes: clientId (1), groupName (2), brokerConfigId (3),
# topicMetaInfoId (4)
GET_PART_META_REQ = (
    b"\x0a\x0bcb-client-1"
    + b"\x12\x0bgrp-balance"
    + b"\x18\xfb\xd0\x95\xff\xbc\x31"  # varint 1_700_000_000_123
    + b"\x20\xc8\xd3\x95\xff\xbc\x31"  # varint 1_700_000_000_456
)


def _credential(tube):
    auth = tube("AuthenticateInfo")(
        userName="alice", timestamp=1_700_000_000_000, nonce=7, othParams="k=v", signature=SIGNATURE
    )
    return tube("MasterCertificateInfo")(authInfo=auth, authorizedToken=TOKEN_TEXT)


def _conversation(tube) -> dict:
    ops = tube("OpsTaskInfo")(groupFlowCheckId=11, defFlowCheckId=12, qryPriorityId=301, requireAuth=False)
    reg = tube("RegisterRequestC2MV2")(
        clientId="cb-client-1",
        groupName="grp-balance",
        hostName="10.0.0.1",
        sourceCount=2,
        nodeId=1,
        topicList=["orders", "audit"],
        topicCondition=["orders#eu,us"],
        subRepInfo=tube("ClientSubRepInfo")(brokerConfigId=-2, topicMetaInfoId=-2, reportSubInfo=False),
        opsTaskInfo=ops,
        authInfo=_credential(tube),
        jdkVersion="17.0.8",
    )
    reg_rsp = tube("RegisterResponseM2CV2")(
        errCode=200,
        errMsg="OK",
        brokerConfigId=BROKER_CONF_ID,
        brokerConfigList=["1:10.0.0.9:8123", "2:10.0.0.10:8123"],
        opsTaskInfo=ops,
        authorizedInfo=tube("MasterAuthorizedInfo")(visitAuthorizedToken=99887766, authAuthorizedToken="xyz"),
    )
    hb = tube("HeartRequestC2MV2")(
        clientId="cb-client-1",
        groupName="grp-balance",
        subRepInfo=tube("ClientSubRepInfo")(
            brokerConfigId=BROKER_CONF_ID,
            topicMetaInfoId=-2,
            lstAssignedTime=1_700_000_001_000,
            reportSubInfo=True,
            partSubInfo=["1:orders:0", "2:orders:1"],
        ),
    )
    hb_rsp = tube("HeartResponseM2CV2")(
        errCode=200,
        errMsg="OK",
        brokerConfigId=BROKER_CONF_ID,
        topicMetaInfoId=TOPIC_META_ID,
        topicMetaInfoList=["orders#1:2:1,2:2:1", "audit#1:1:1"],
        opsTaskInfo=tube("OpsTaskInfo")(csmFrmMaxOffsetCtrlId=5, defFlowControlInfo="[]"),
    )
    meta_rsp = tube("GetPartMetaResponseM2C")(
        errCode=200,
        errMsg="OK",
        brokerConfigId=BROKER_CONF_ID,
        topicMetaInfoId=TOPIC_META_ID,
        topicMetaInfoList=["orders#1:2:1,2:2:1"],
        brokerConfigList=["1:10.0.0.9:8123"],
    )
    return run(
        new_conv(),
        [
            (C2S, request(1, 1, 20, reg)),
            (S2C, response(1, 20, reg_rsp)),
            (C2S, request(2, 1, 21, hb)),
            (S2C, response(2, 21, hb_rsp)),
            (C2S, request(3, 1, 22, Raw(GET_PART_META_REQ))),
            (S2C, response(3, 22, meta_rsp)),
        ],
    )


@pytest.fixture(scope="module")
def out(tube) -> dict:
    return _conversation(tube)


def _details(row: dict) -> dict:
    return json.loads(row["details"])


def test_commands_are_named_and_decode_ok(out):
    cmds = out["commands"]
    assert [(c["command"], c["command_code"], c["direction"]) for c in cmds] == [
        ("consumerRegisterC2MV2", 20, "c2s"),
        ("consumerRegisterC2MV2", 20, "s2c"),
        ("consumerHeartbeatC2MV2", 21, "c2s"),
        ("consumerHeartbeatC2MV2", 21, "s2c"),
        ("consumerGetPartMetaInfoC2M", 22, "c2s"),
        ("consumerGetPartMetaInfoC2M", 22, "s2c"),
    ]
    assert all(c["decode_status"] == "ok" and c.get("decode_error") is None for c in cmds)
    for c in cmds:
        body = _details(c)["request" if c["direction"] == "c2s" else "response"]
        assert "fields" not in body and "schema" not in body  # the built-in messages, by name
    assert [c["client_id"] for c in cmds] == ["cb-client-1"] * 6
    assert [c["error_code"] for c in cmds[1::2]] == [0, 0, 0]
    lat = out["latencies"]
    assert [(x["request_command"], x["correlation_id"], x["error_code"]) for x in lat] == [
        ("consumerRegisterC2MV2", 1, 0),
        ("consumerHeartbeatC2MV2", 2, 0),
        ("consumerGetPartMetaInfoC2M", 3, 0),
    ]


def test_register_request_and_response(out):
    req_row, rsp_row = out["commands"][:2]
    assert req_row["topics"] == ["orders", "audit"]
    req = _details(req_row)["request"]
    assert req["clientId"] == "cb-client-1" and req["groupName"] == "grp-balance"
    assert req["hostName"] == "10.0.0.1" and req["sourceCount"] == 2 and req["nodeId"] == 1
    assert req["topicList"] == ["orders", "audit"] and req["topicCondition"] == ["orders#eu,us"]
    assert req["subRepInfo"] == {"brokerConfigId": -2, "topicMetaInfoId": -2, "reportSubInfo": False}
    assert req["opsTaskInfo"] == {
        "groupFlowCheckId": 11,
        "defFlowCheckId": 12,
        "qryPriorityId": 301,
        "requireAuth": False,
    }
    assert req["jdkVersion"] == "17.0.8"
    # credentials: names kept, secrets only by size
    cred = req["authInfo"]
    assert cred["authInfo"]["userName"] == "alice" and cred["authInfo"]["nonce"] == 7
    assert cred["authInfo"]["signature"] == f"<redacted {len(SIGNATURE)} bytes>"
    assert cred["authInfo"]["othParams"] == "<redacted 3 bytes>"
    assert cred["authorizedToken"] == f"<redacted {len(TOKEN_TEXT)} bytes>"
    assert SIGNATURE not in req_row["details"] and TOKEN_TEXT not in req_row["details"]
    assert req_row.get("raw") is None

    rsp = _details(rsp_row)["response"]
    assert rsp["errCode"] == 200 and rsp["errMsg"] == "OK"
    assert rsp["brokerConfigId"] == BROKER_CONF_ID
    assert rsp["brokerConfigList"] == ["1:10.0.0.9:8123", "2:10.0.0.10:8123"]
    assert rsp["opsTaskInfo"]["qryPriorityId"] == 301
    assert rsp["authorizedInfo"] == {
        "visitAuthorizedToken": "<redacted 8 bytes>",
        "authAuthorizedToken": "<redacted 3 bytes>",
    }
    assert "99887766" not in rsp_row["details"]


def test_heartbeat_request_and_response(out):
    req_row, rsp_row = out["commands"][2:4]
    req = _details(req_row)["request"]
    assert req == {
        "clientId": "cb-client-1",
        "groupName": "grp-balance",
        "subRepInfo": {
            "brokerConfigId": BROKER_CONF_ID,
            "topicMetaInfoId": -2,
            "lstAssignedTime": 1_700_000_001_000,
            "reportSubInfo": True,
            "partSubInfo": ["1:orders:0", "2:orders:1"],
        },
    }
    rsp = _details(rsp_row)["response"]
    assert rsp == {
        "errCode": 200,
        "errMsg": "OK",
        "brokerConfigId": BROKER_CONF_ID,
        "topicMetaInfoId": TOPIC_META_ID,
        "topicMetaInfoList": ["orders#1:2:1,2:2:1", "audit#1:1:1"],
        "opsTaskInfo": {"csmFrmMaxOffsetCtrlId": 5, "defFlowControlInfo": "[]"},
    }


def test_get_part_meta_request_and_response(out):
    req_row, rsp_row = out["commands"][4:6]
    assert _details(req_row)["request"] == {
        "clientId": "cb-client-1",
        "groupName": "grp-balance",
        "brokerConfigId": BROKER_CONF_ID,
        "topicMetaInfoId": TOPIC_META_ID,
    }
    assert _details(rsp_row)["response"] == {
        "errCode": 200,
        "errMsg": "OK",
        "brokerConfigId": BROKER_CONF_ID,
        "topicMetaInfoId": TOPIC_META_ID,
        "topicMetaInfoList": ["orders#1:2:1,2:2:1"],
        "brokerConfigList": ["1:10.0.0.9:8123"],
    }


def test_literal_request_bytes_match_the_test_layout(tube):
    """The literal GetPartMeta body is what a TubeMQ client's layout makes of the same values."""
    msg = tube("GetPartMetaRequestC2M")(
        clientId="cb-client-1",
        groupName="grp-balance",
        brokerConfigId=BROKER_CONF_ID,
        topicMetaInfoId=TOPIC_META_ID,
    )
    assert msg.SerializeToString() == GET_PART_META_REQ


def test_error_reply_is_the_call_error(tube):
    """V2 replies have no success flag: an errCode other than 200 is the call's error."""
    rsp = tube("GetPartMetaResponseM2C")(errCode=404, errMsg="no such group")
    out = run(
        new_conv(),
        [(C2S, request(9, 1, 22, Raw(GET_PART_META_REQ))), (S2C, response(9, 22, rsp))],
    )
    row = out["commands"][1]
    assert row["decode_status"] == "ok" and row["error_code"] == 404
    assert _details(row)["error"] == "no such group"
    assert out["latencies"][0]["error_code"] == 404


def test_cut_body_is_malformed_without_raw():
    """A V2 body that does not parse is malformed, and its bytes (credentials) are not kept."""
    out = run(new_conv(), [(C2S, request(4, 1, 20, Raw(b"\x0a\x10abc")))])
    row = out["commands"][0]
    assert row["command"] == "consumerRegisterC2MV2" and row["decode_status"] == "malformed"
    assert row["decode_error"].startswith("RegisterRequestC2MV2:")
    assert row.get("raw") is None
