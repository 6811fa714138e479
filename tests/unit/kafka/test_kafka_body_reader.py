"""The compiled Kafka body reader (kafka/_body.c, `Plan.read`) against the Python one
(`Plan.read_py`, the closures of schema.py): every request and response of the real Kafka
captures, the same bodies cut short and damaged, and crafted bytes for each error the readers
raise (truncations, absurd lengths and counts, null in a non-nullable field, unknown and known
tagged fields, varints past 64 bits)."""

from __future__ import annotations

import base64
import random
import struct
from pathlib import Path

import pytest

from brokerscope.protocols.base import DecodeError, Truncated
from brokerscope.protocols.kafka import schema
from tests.fuzz.targets import kafka_body_both
from tests.support.damage import damage

from .kit import capture_bodies

ROOT = Path(__file__).resolve().parents[3]
CAPTURES = sorted(
    [
        *ROOT.glob("sample_data/kafka/*.pcap"),
        *ROOT.glob("sample_data/public/*.pcap"),
        *ROOT.glob("tests/data/captures/deepflow/*.pcap"),
        ROOT / "tests/data/captures/ndpi/kafka.pcapng",
        ROOT / "tests/data/frames/two_interfaces.pcapng",
        *ROOT.glob("tests/data/tls/kafka_*_clear.pcap"),
    ]
)


@pytest.fixture(scope="module")
def bodies() -> dict[str, list]:
    return {p.relative_to(ROOT).as_posix(): capture_bodies(p) for p in CAPTURES}


def test_every_capture_has_bodies(bodies):
    for path, got in bodies.items():
        assert got, f"{path}: no Kafka request or response found"


def test_real_bodies_read_alike(bodies):
    """Every frame of every Kafka capture: the same fields, in the same order, with the same
    types, and the same end; nearly all of them decode."""
    decoded = 0
    for path, got in bodies.items():
        for p, frame, pos in got:
            c, py = kafka_body_both(p, frame, pos)
            assert c == py, f"{path}: {p.name} v{p.version} {p.kind}"
            decoded += not c.startswith("('")
    assert decoded >= 0.95 * sum(map(len, bodies.values()))


def test_real_bodies_read_from_memoryview(bodies):
    """The stream buffer's frames are memoryviews at times: the compiled reader takes any buffer."""
    for p, frame, pos in bodies["sample_data/kafka/lz4.pcap"]:
        assert repr(p.read(memoryview(frame), pos)) == repr(p.read_py(frame, pos))


def test_real_bodies_cut_and_damaged_read_alike(bodies):
    """Each body cut at random places (the Truncated errors) and damaged at random bytes (any
    error, or a different decode) gives the same outcome from both readers."""
    rng = random.Random(13)
    n = 0
    for got in bodies.values():
        for p, frame, pos in got:
            for _ in range(4):
                cut = frame[: rng.randrange(pos, len(frame) + 1)]
                c, py = kafka_body_both(p, cut, pos)
                assert c == py, f"{p.name} v{p.version} {p.kind} cut"
                bad = damage(rng, frame)
                c, py = kafka_body_both(p, bad, min(pos, len(bad)))
                assert c == py, f"{p.name} v{p.version} {p.kind}"
                n += 1
    assert n > 1000


# -- crafted bytes --------------------------------------------------------------------------------
def _outcome(read, buf: bytes, pos: int = 0):
    try:
        return read(buf, pos)
    except DecodeError as e:
        return type(e), e.status, str(e)


def _both(p: schema.Plan, buf: bytes, pos: int = 0):
    """The compiled reader's outcome, after checking it is the Python reader's."""
    c, py = kafka_body_both(p, buf, pos)
    assert c == py
    return _outcome(p.read, buf, pos)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def compact(s: bytes | None) -> bytes:
    return b"\x00" if s is None else uvarint(len(s) + 1) + s


METADATA_V1 = schema.plan(3, 1, "request")  # Topics: nullable []MetadataRequestTopic (Name string)
METADATA_V9 = schema.plan(3, 9, "request")  # flexible: compact, tagged fields; Name not nullable
METADATA_V12 = schema.plan(3, 12, "request")  # topics by TopicId (uuid), Name nullable
DESCRIBE_GROUPS_V5 = schema.plan(15, 5, "request")  # Groups: a compact []string, not nullable


def test_classic_request_and_nullable_array():
    body = struct.pack(">i", 2) + struct.pack(">h", 1) + b"a" + struct.pack(">h", 2) + b"bc"
    assert _both(METADATA_V1, body) == ({"Topics": [{"Name": "a"}, {"Name": "bc"}]}, len(body))
    assert _both(METADATA_V1, struct.pack(">i", -1)) == ({"Topics": None}, 4)


def test_flexible_request_with_tagged_fields():
    topic = bytes(16) + compact(b"t\xff") + b"\x00"  # TopicId, Name (not UTF-8), no tags
    tags = b"\x02" + uvarint(7) + uvarint(3) + b"xyz" + uvarint(300) + uvarint(0)  # unknown 7 and 300
    body = uvarint(2) + topic + b"\x01\x01" + tags  # 1 topic; AllowAuto..., IncludeTopic...
    d, end = _both(METADATA_V12, body)
    assert end == len(body)
    assert d["Topics"] == [{"TopicId": "00000000-0000-0000-0000-000000000000", "Name": "t\\xff"}]
    assert d["IncludeTopicAuthorizedOperations"] is True
    assert d["_unknown_tagged_fields"] == {
        "7": {"base64": base64.b64encode(b"xyz").decode()},
        "300": {"base64": ""},
    }
    assert list(d)[-1] == "_unknown_tagged_fields"


def test_uuid_text():
    tid = bytes(range(16))
    body = uvarint(2) + tid + compact(None) + b"\x00" + b"\x00\x00\x00"
    d, _ = _both(METADATA_V12, body)
    assert d["Topics"][0] == {"TopicId": "00010203-0405-0607-0809-0a0b0c0d0e0f", "Name": None}


def test_known_tagged_field_read_from_its_own_bytes():
    """Fetch v12 request's ClusterId (tag 0, a nullable compact string): read from exactly the
    size its tag gives, else an error."""
    fetch = schema.plan(1, 12, "request")
    head = struct.pack(">iiiib", -1, 500, 1, 1 << 20, 0) + struct.pack(">ii", 0, -1)
    rest = uvarint(1) + uvarint(1) + compact(b"")  # no topics, no forgotten, empty RackId
    cluster = compact(b"abc")
    ok = head + rest + b"\x01" + uvarint(0) + uvarint(len(cluster)) + cluster
    d, end = _both(fetch, ok)
    assert d["ClusterId"] == "abc" and end == len(ok)
    long = head + rest + b"\x01" + uvarint(0) + uvarint(len(cluster) + 1) + cluster + b"!"
    assert _both(fetch, long) == (DecodeError, "malformed", "tagged field ClusterId size 5 but value used 4")
    short = head + rest + b"\x01" + uvarint(0) + uvarint(2) + cluster
    assert _both(fetch, short)[:2] == (Truncated, "truncated")


@pytest.mark.parametrize(
    "body, error",
    [
        (b"", (Truncated, "truncated", "message ends inside a field")),
        (b"\x00\x00", (Truncated, "truncated", "message ends inside a field")),
        (struct.pack(">ih", 1, 5) + b"ab", (Truncated, "truncated", "length 5 runs past the end")),
        (struct.pack(">ih", 1, -1), (DecodeError, "malformed", "null in a non-nullable field")),
        (struct.pack(">ih", 1, -7), (DecodeError, "malformed", "negative length -7")),
        (struct.pack(">i", -2), (DecodeError, "malformed", "negative array length -2")),
        (struct.pack(">i", 2**31 - 1), (DecodeError, "malformed", "array length 2147483647 exceeds the remaining 0 bytes")),
        (struct.pack(">i", 3) + bytes(3), (Truncated, "truncated", "message ends inside a field")),
    ],
)  # fmt: skip
def test_classic_errors(body, error):
    assert _both(METADATA_V1, body) == error


@pytest.mark.parametrize(
    "p, body, error",
    [
        (METADATA_V12, b"\x80", (Truncated, "truncated", "varint runs past the end of the data")),
        (METADATA_V12, b"\xff" * 9 + b"\x81\x01", (DecodeError, "malformed", "varint longer than 64 bits")),
        (DESCRIBE_GROUPS_V5, b"\x00", (DecodeError, "malformed", "null array in a non-nullable field")),
        (DESCRIBE_GROUPS_V5, uvarint(2) + b"\x00", (DecodeError, "malformed", "null in a non-nullable field")),
        (METADATA_V9, uvarint(2) + b"\x00", (DecodeError, "malformed", "null in a non-nullable field")),
        (METADATA_V12, uvarint(2**40), (DecodeError, "malformed", f"array length {2**40 - 1} exceeds the remaining 0 bytes")),
        (METADATA_V12, uvarint(2**64 - 1), (DecodeError, "malformed", f"array length {2**64 - 2} exceeds the remaining 0 bytes")),
        (METADATA_V12, uvarint(2) + bytes(16) + uvarint(2**63 + 5), (Truncated, "truncated", f"length {2**63 + 4} runs past the end")),
        (METADATA_V12, uvarint(1) + b"\x01\x01" + uvarint(2**62), (DecodeError, "malformed", f"tagged field count {2**62} exceeds the message")),
        (METADATA_V12, uvarint(1) + b"\x01\x01\x01\x05\x09" + b"abc", (Truncated, "truncated", "tagged field runs past the end")),
        (METADATA_V12, uvarint(51) + bytes(100), (Truncated, "truncated", "message ends inside a field")),
    ],
)  # fmt: skip
def test_compact_errors(p, body, error):
    assert _both(p, body) == error


def test_varint_past_64_bits_goes_to_python():
    """A 10-byte varint whose last group passes bit 63: Python's int holds it, so the compiled
    reader hands the body over, and the error prints the whole value."""
    big = b"\xff" * 9 + b"\x7f"  # 2**70 - 1
    assert schema._body.read(schema._body_table(_shape(3, 9)), big, 0) is None
    assert _both(METADATA_V9, big) == (
        DecodeError,
        "malformed",
        f"array length {2**70 - 2} exceeds the remaining 0 bytes",
    )
    tag = uvarint(1) + b"\x01\x00\x01" + b"\x01" + big + b"\x00"  # an unknown tag past 64 bits
    d, _ = _both(METADATA_V9, tag)
    assert d["_unknown_tagged_fields"] == {str(2**70 - 1): {"base64": ""}}


def _shape(key: int, version: int) -> schema.StructShape:
    s = schema.spec(key)
    return schema._shape_struct(s.request["fields"], version, version in s.flexible, s.request_structs, set())


def test_nullable_struct_marker():
    """A nullable struct (not in an array) is preceded by an int8 marker: negative is null, any
    other value is present (ConsumerGroupHeartbeat v0 response's Assignment)."""
    p = schema.plan(68, 0, "response")
    head = struct.pack(">ih", 0, 0) + compact(None) + compact(b"m") + struct.pack(">ii", 1, 5000)
    assert _both(p, head + b"\xff\x00")[0]["Assignment"] is None
    got = _both(p, head + b"\x01" + uvarint(1) + b"\x00" + b"\x00")
    assert got[0]["Assignment"] == {"TopicPartitions": []}
    assert _both(p, head) == (Truncated, "truncated", "message ends inside a field")


def test_counts_past_what_the_elements_can_fill():
    """A count within the bytes left but past what its elements' least size fits: the list is
    grown as read, not made whole, and fails where the Python reader does (50 topics of at least
    18 bytes in 100: test_compact_errors; 4 LeaveGroup members of at least 4 bytes in 8); a count
    that fits is read."""
    p = schema.plan(13, 3, "request")  # GroupId, Members: [MemberId, GroupInstanceId (nullable)]
    group = struct.pack(">h", 1) + b"g"
    cut = (Truncated, "truncated", "message ends inside a field")
    assert _both(p, group + struct.pack(">i", 4) + bytes(8)) == cut
    two = [{"MemberId": "", "GroupInstanceId": ""}] * 2
    assert _both(p, group + struct.pack(">i", 2) + bytes(8)) == ({"GroupId": "g", "Members": two}, 15)


def test_trailing_bytes_rule_unchanged():
    body = struct.pack(">i", 0)
    assert schema.decode_body(METADATA_V1, body + b"\x00\x01", 0)["_trailing_bytes"] == {"base64": "AAE="}
    with pytest.raises(DecodeError, match="65 bytes left after the Metadata v1 request"):
        schema.decode_body(METADATA_V1, body + bytes(65), 0)


def test_every_plan_builds_a_table():
    """Every api, version and kind the specs describe gets a compiled reader that reads an empty
    body as the Python reader does."""
    n = 0
    for key, s in schema.specs().items():
        for v in range(s.valid.lo, s.valid.hi + 1):
            for kind in ("request", "response"):
                p = schema.plan(key, v, kind)
                for body in (b"", bytes(64), b"\xff" * 64):
                    c, py = kafka_body_both(p, body, 0)
                    assert c == py, f"{p.name} v{v} {kind}"
                n += 1
    assert n > 500


def _decoded(bodies: dict[str, list]):
    """(plan, decoded body) of each body of the captures that decodes."""
    for got in bodies.values():
        for p, frame, pos in got:
            try:
                yield p, p.read(frame, pos)[0]
            except DecodeError:
                continue


# -- the details copy (rows.clean) ----------------------------------------------------------------
def _clean_both(body, records=frozenset(), cap=1 << 20) -> tuple[str, str]:
    from brokerscope.protocols.kafka import rows

    got, want = rows.clean(body, records, cap), rows.clean_py(body, records, cap)
    assert got is not body
    return repr(got), repr(want)


def test_clean_real_bodies_alike(bodies):
    """The details copy of every decoded body of the captures, record sets (still bytes here:
    no api handler ran) summarized, is clean_py's; the body is left as it was."""
    n = 0
    for p, body in _decoded(bodies):
        before = repr(body)
        c, py = _clean_both(body, frozenset(p.records_fields))
        assert c == py, f"{p.name} v{p.version} {p.kind}"
        assert repr(body) == before
        n += "'batches'" in c
    assert n > 100  # record sets summarized


def test_clean_redacts_secrets_and_sensitive_configs():
    from brokerscope.protocols.kafka import rows

    summary = rows.Summary(batches=[])
    body = {
        "AuthBytes": b"secret!",
        "Password": "pw",
        "Salt": 5,  # not bytes or text: kept
        "Configs": [
            {"Name": "ssl.key.password", "Value": "x" * 9},
            {"Name": "retention.ms", "Value": "100", "IsSensitive": True},
            {"Name": "retention.ms", "Value": "100", "IsSensitive": False},
            {"Name": "sasl.jaas.config", "Value": None},
            {"Name": 3, "Value": "token"},
        ],
        "Records": b"\x00" * 3,
        "Other": b"\x01",  # bytes, not a record set
        "Done": summary,
        "Nested": [[1, {"Password": b"abc"}], 2.5, None, True],
    }
    c, py = _clean_both(body, frozenset({"Records"}))
    assert c == py
    got = rows.clean(body, frozenset({"Records"}), 1 << 20)
    assert got["AuthBytes"] == "<redacted 7 bytes>" and got["Password"] == "<redacted 2 bytes>"
    assert got["Salt"] == 5
    assert [e["Value"] for e in got["Configs"]] == [
        "<redacted 9 bytes>",
        "<redacted 3 bytes>",
        "100",
        None,
        "token",
    ]
    assert got["Records"] == {"batches": [], "partial_tail_bytes": 3} and got["Other"] == b"\x01"
    assert got["Done"] is summary
    assert got["Nested"][0][1] == {"Password": "<redacted 3 bytes>"}
    assert body["AuthBytes"] == b"secret!" and body["Configs"][0]["Value"] == "x" * 9
    assert body["Nested"][0][1] == {"Password": b"abc"}  # the path to a change is copied
    assert got["Configs"][2] is body["Configs"][2]  # what does not change is the body's own


def test_clean_copies_the_top_level():
    """The caller adds `_header` to the copy: its top level is never the body's."""
    from brokerscope.protocols.kafka import rows

    body = {"A": [{"B": 1}], "C": "x"}
    got = rows.clean(body)
    got["_header"] = {"version": 2}
    assert body == {"A": [{"B": 1}], "C": "x"} and got["A"] is body["A"]


# -- what the commands row names (Plan.summarize) ---------------------------------------------------
def test_summary_of_real_bodies_alike(bodies):
    """Topics, topic ids, partition and error codes of every decoded body of the captures: the
    compiled walk (_body.summary) gives what the Python walk gives."""
    named = 0
    for p, body in _decoded(bodies):
        c, py = p.summarize(body), p.summarize_py(body)
        assert repr(c) == repr(py), f"{p.name} v{p.version} {p.kind}"
        named += bool(c["topics"])
    assert named > 100


def test_summary_rules():
    """The first partition of a struct that names a topic, topic names once each in order, empty
    ones left out, and the error codes: top-level, else the first non-zero nested, else 0."""
    p = schema.plan(0, 9, "response")  # Responses: [Name, PartitionResponses: [Index, ErrorCode..]]
    parts = [{"Index": 7, "ErrorCode": 0}, {"Index": 8, "ErrorCode": 6}, {"Index": 9, "ErrorCode": 3}]
    body = {
        "Responses": [{"Name": "a", "PartitionResponses": parts}, {"Name": ""}, {"Name": "a"}, {"Name": "b"}]
    }
    for summarize in (p.summarize, p.summarize_py):
        got = summarize(body)
        assert (got["topics"], got["partition"], got["error_code"]) == (["a", "b"], 7, 6)
    body = {"Responses": [{"Name": "a", "PartitionResponses": parts[:1]}], "ThrottleTimeMs": 0}
    assert p.summarize(body)["error_code"] == p.summarize_py(body)["error_code"] == 0
    top = schema.plan(10, 1, "response")  # FindCoordinator v1: a top-level ErrorCode
    for body in ({"ErrorCode": 15}, {"ErrorCode": None}, {}):
        assert repr(top.summarize(body)) == repr(top.summarize_py(body))
    topic_ids = schema.plan(1, 13, "response")  # Fetch v13: topics by id
    body = {"Responses": [{"TopicId": "x", "Partitions": [{"PartitionIndex": 2, "ErrorCode": 0}]}]}
    got = topic_ids.summarize(body)
    assert (got["topic_ids"], got["partition"]) == (["x"], 2)
    assert repr(got) == repr(topic_ids.summarize_py(body))


def test_error_codes_named_otherwise_count(bodies):
    """Found checking against tshark: AddPartitionsToTxn's partition results name theirs
    PartitionErrorCode, and its commands and latencies rows had error_code null, a failed add
    (INVALID_TXN_STATE, 48) included. A struct's error code is ErrorCode, else the int16 field
    named ...ErrorCode."""
    p = schema.plan(24, 0, "response")
    parts = [{"PartitionIndex": 1, "PartitionErrorCode": 0}, {"PartitionIndex": 3, "PartitionErrorCode": 48}]
    body = {"ThrottleTimeMs": 0, "ResultsByTopicV3AndBelow": [{"Name": "t", "ResultsByPartition": parts}]}
    for summarize in (p.summarize, p.summarize_py):
        got = summarize(body)
        assert (got["topics"], got["partition"], got["error_code"]) == (["t"], 1, 48)
    body["ResultsByTopicV3AndBelow"][0]["ResultsByPartition"] = parts[:1]
    assert p.summarize(body)["error_code"] == p.summarize_py(body)["error_code"] == 0
    create = schema.plan(19, 5, "response")  # CreateTopics: ErrorCode beside TopicConfigErrorCode
    body = {"Topics": [{"Name": "t", "ErrorCode": 36, "TopicConfigErrorCode": 0}]}
    assert create.summarize(body)["error_code"] == create.summarize_py(body)["error_code"] == 36


def test_a_topic_named_and_given_by_a_known_id_is_listed_once():
    """Found checking against tshark: a Metadata v13 response names its topic and gives its id,
    known on the connection from an earlier response: `topics` listed the name twice."""
    from brokerscope.protocols.kafka import rows

    summ = {"topics": ["bs-lz4"], "topic_ids": ["id1", "id2"], "partition": None, "error_code": 0}
    got = rows.summary_columns(summ, {}, {"id1": "bs-lz4", "id2": "other"})
    assert got["topics"] == ["bs-lz4", "other"] and got["topic"] == "bs-lz4"
