"""The compiled TubeMQ readers (tubemq/_rpc.c) against the Python ones: a frame's blocks joined as
framing.join_blocks joins them, and an RPC envelope read as protobuf reads it (rpc.read_envelope),
or left to it, so its error is the one the frame gets."""

from __future__ import annotations

import json
import random
import struct
import zlib

import pytest

from brokerscope.protocols import pbcheck
from brokerscope.protocols.tubemq import framing, rpc
from brokerscope.protocols.tubemq.gen import tubemq_broker_pb2 as brk
from brokerscope.protocols.tubemq.gen import tubemq_rpc_pb2 as pb
from tests.fuzz.targets import (
    tubemq_body_both,
    tubemq_body_json_both,
    tubemq_columns_both,
    tubemq_envelope_both,
    tubemq_message_both,
    tubemq_read_all_both,
    tubemq_read_json_both,
)
from tests.support.damage import damage

from .kit import delimited, frame

INT32 = [0, 1, -1, 2**31 - 1, -(2**31), 13, 17]
INT64 = [0, -1, 2**63 - 1, -(2**63), 10_000]
UNKNOWN = [b"\x28\x05", b"\x32\x02ab", b"\x39" + bytes(8), b"\x45" + bytes(4)]  # fields 5 and 6, 7, 8


def _with(msg, fields: dict, rng: random.Random, required: tuple = (), odd: list | None = None) -> bytes:
    """`msg` with a random subset of `fields` (and every one of `required`) set, and at times an
    unknown field after them (as a newer client writes one) or the fields sent twice (the last
    values win: no client writes that), each noted in `odd` (name, "unknown" or "twice")."""
    for name, choices in fields.items():
        if name in required or rng.random() < 0.7:
            setattr(msg, name, rng.choice(choices))
    out = delimited(msg)
    if rng.random() < 0.3:
        twice = rng.random() < 0.5
        extra = msg.SerializeToString() if twice else rng.choice(UNKNOWN)
        raw = msg.SerializeToString() + extra
        if len(raw) < 128:
            out = bytes([len(raw)]) + raw
            if extra and odd is not None:
                odd.append((type(msg).__name__, "twice" if twice else "unknown"))
    return out


def random_envelope(rng: random.Random, odd: list | None = None) -> bytes:
    """A request, a response or an error response, with random fields; the messages written
    otherwise than a client writes them (an unknown field, a field given twice) noted in `odd`."""
    kind = rng.choice(["request", "response", "error"])
    flag = {"request": [0, 2, -5], "response": [1], "error": [1]}[kind]
    ids = {"flag": flag, "traceId": INT64, "spanId": INT64, "parentId": INT64}
    out = _with(pb.RpcConnHeader(), ids, rng, () if kind == "request" else ("flag",), odd)
    if kind == "request" and rng.random() < 0.1:
        out = delimited(pb.RpcConnHeader())  # no flag: a request
        if odd:
            odd.clear()  # the header noted above is not the one written
    body = rng.randbytes(rng.randrange(0, 40))
    if kind == "request":
        out += _with(pb.RequestHeader(), {"serviceType": INT32, "protocolVer": INT32}, rng, (), odd)
        out += _with(
            pb.RequestBody(), {"method": INT32, "timeout": INT64, "request": [body, b""]}, rng, (), odd
        )
    elif kind == "response":
        out += _with(pb.ResponseHeader(status=0), {"serviceType": INT32, "protocolVer": INT32}, rng, (), odd)
        out += _with(pb.RspResponseBody(), {"method": INT32, "data": [body, b""]}, rng, (), odd)
    else:
        out += delimited(pb.ResponseHeader(status=rng.choice([1, 2])))
        out += delimited(pb.RspExceptionBody(exceptionName="E", stackTrace="at x\n\tat y"))
    return out + (rng.randbytes(rng.randrange(1, 4)) if rng.random() < 0.2 else b"")


@pytest.mark.parametrize("seed", range(200))
def test_envelopes_read_as_protobuf_reads_them(seed):
    """Both readers agree; a message of the envelope written otherwise than a client writes it
    (an unknown field, a field given twice: what one damaged byte makes of a tag) is damage to
    both, named: the body it frames may not be where it says."""
    rng = random.Random(seed)
    odd: list = []
    body = random_envelope(rng, odd)
    got, want, walked = tubemq_envelope_both(body)
    assert got == want
    twice = [name for name, how in odd if how == "twice"]
    if twice:
        assert (
            want == f"{twice[0]} seems damaged (its fields do not encode back to its bytes)"
            and walked is None
        )
    else:  # error responses and unknown fields are left to protobuf
        assert (walked is None) == (bool(want.status) or bool(odd))


@pytest.mark.parametrize("seed", range(300))
def test_damaged_envelopes_give_what_protobuf_gives(seed):
    rng = random.Random(5000 + seed)
    got, want, walked = tubemq_envelope_both(damage(rng, random_envelope(rng)))
    assert got == want
    if isinstance(want, str):
        assert walked is None


@pytest.mark.parametrize(
    "body",
    [
        b"\x02\x08\x01" + b"\x02\x08\x05",  # a status outside the enum: an unknown field to protobuf
        b"\x02\x08\x00\x02\x0d\x00",  # a known field (serviceType) as fixed32
        b"\x06\x08\xff\xff\xff\xff\x0f" + b"\x00\x00",  # flag 2^32 - 1: past int32
        b"\x03\x0b\x0c\x00\x00\x00",  # a group
        b"\x01\x00\x00\x00",  # field number 0
        b"\x0b\x08" + b"\xff" * 9 + b"\x7f",  # a varint past 2^64
    ],
)
def test_what_the_compiled_reader_leaves_to_protobuf(body):
    got, want, walked = tubemq_envelope_both(body)
    assert walked is None and got == want


@pytest.mark.parametrize("seed", range(100))
def test_frames_joined_as_join_blocks_joins_them(seed):
    rng = random.Random(seed)
    data = frame(rng.randrange(2**32), rng.randbytes(rng.randrange(0, 300)), rng.choice([1, 7, 64, 8192]))
    if seed % 3 == 0:
        data = damage(rng, data)
    got = framing._rpc.frame(data)
    if got is not None:
        assert got == framing.join_blocks(data)
    else:  # shorter than a header, or a negative block length (which the rules never pass)
        assert len(data) < framing.HEADER_LEN or negative_length(data)


def negative_length(data: bytes) -> bool:
    pos = framing.HEADER_LEN
    for _ in range(struct.unpack_from(">i", data, 8)[0]):
        if pos + 4 > len(data):
            return False
        (n,) = struct.unpack_from(">i", data, pos)
        if n < 0:
            return True
        pos += 4 + n
    return False


def test_a_tag_of_six_bytes_is_left_to_protobuf():
    """Found by the fuzzer: protobuf refuses a tag longer than five bytes, even of a small value."""
    body = bytes.fromhex("0608413202616200") + bytes.fromhex("0b088006f880ff808000ff01")
    got, want, walked = tubemq_envelope_both(body)
    assert walked is None and got == want and "RequestBody" in want


# ---------------------------------------------------------------------------------------------
# method bodies: the compiled reader (_rpc.body) against protobuf (rpc.plain)

BODY_NAMES = sorted(rpc.BUILTIN.index)
# JSON's escapes among them: a quote, a backslash, control bytes, text past the BMP
TEXTS = ["", "demo", "prod-1", "héllo", "a,b=c", 'q"b\\s', "\n\t\x01\x1f\x7f", "\U0001f600\u2028"]


def _fill(msg, rng: random.Random, depth: int = 0) -> None:
    """Random values in a random subset of `msg`'s fields (nested messages and lists too)."""
    for fd in msg.DESCRIPTOR.fields:
        if rng.random() < 0.4:
            continue
        n = rng.randrange(0, 4) if fd.is_repeated else 1
        for _ in range(n):
            if fd.message_type is not None:
                if depth > 2:
                    break
                sub = getattr(msg, fd.name).add() if fd.is_repeated else getattr(msg, fd.name)
                sub.SetInParent()
                _fill(sub, rng, depth + 1)
                continue
            v = {
                fd.TYPE_INT32: lambda: rng.choice(INT32),
                fd.TYPE_INT64: lambda: rng.choice(INT64),
                fd.TYPE_BOOL: lambda: rng.random() < 0.5,
                fd.TYPE_STRING: lambda: rng.choice(TEXTS),
                fd.TYPE_BYTES: lambda: rng.randbytes(rng.randrange(0, 30)),
            }[fd.type]()
            if fd.is_repeated:
                getattr(msg, fd.name).append(v)
            else:
                setattr(msg, fd.name, v)


def random_body(rng: random.Random) -> tuple[int, bytes, bool]:
    """(entry for tubemq_body_both, bytes, whether they were made irregular) of a random built-in
    message, at times with a field of another wire type, the fields sent twice or a string that
    is not UTF-8."""
    entry = rng.randrange(len(BODY_NAMES))
    cls = next(
        c
        for m in rpc.METHODS.values()
        for c in (m.request, m.response)
        if c is not None and c.DESCRIPTOR.full_name == BODY_NAMES[entry]
    )
    msg = cls()
    _fill(msg, rng)
    out = msg.SerializeToString()
    irregular = False
    if rng.random() < 0.3:
        out += rng.choice(UNKNOWN) if rng.random() < 0.5 else out
        irregular = True
    if rng.random() < 0.2:  # a string field of the message that is not UTF-8
        strings = [fd.number for fd in cls.DESCRIPTOR.fields if fd.type == fd.TYPE_STRING]
        if strings:
            out += bytes([rng.choice(strings) << 3 | 2, 2]) + b"\xc3\x28"
            irregular = True
    # control characters in a string: a damaged length's mark, left to protobuf (pbcheck.odd_values)
    return entry, out, irregular or pbcheck.odd_values(msg) is not None


@pytest.mark.parametrize("seed", range(300))
def test_bodies_read_as_protobuf_reads_them(seed):
    rng = random.Random(9000 + seed)
    entry, body, irregular = random_body(rng)
    got, want = tubemq_body_both(entry, body)
    if got is None:  # left to protobuf: only bytes made irregular
        assert irregular, body.hex()
    else:
        assert repr(got) == repr(want)


@pytest.mark.parametrize("seed", range(300))
def test_damaged_bodies_give_what_protobuf_gives_or_are_left_to_it(seed):
    rng = random.Random(12000 + seed)
    entry, body, _ = random_body(rng)
    got, want = tubemq_body_both(entry, damage(rng, body))
    assert got is None or repr(got) == repr(want)


@pytest.mark.parametrize("seed", range(300))
def test_body_json_as_to_json_writes_the_sized_body(seed):
    """The details JSON the compiled reader writes of a body is to_json's text of rpc.sized of it:
    payloads by their size, secrets redacted, nested and repeated messages, escaped strings."""
    rng = random.Random(21000 + seed)
    entry, body, _ = random_body(rng)
    got, _want = tubemq_body_both(entry, body)
    if got is not None:
        text, want = tubemq_body_json_both(entry, got)
        assert text == want
        assert json.loads(text) == json.loads(want)


def test_body_json_of_a_send_with_escapes_and_secrets():
    body = brk.SendMessageRequestP2B(
        clientId='p"\\é', data=b"\x00\x01payload", authInfo=brk.AuthorizedInfo(visitAuthorizedToken=7)
    ).SerializeToString()
    entry = BODY_NAMES.index("brokerscope.tubemq.broker.SendMessageRequestP2B")
    got, _want = tubemq_body_both(entry, body)
    text, want = tubemq_body_json_both(entry, got)
    assert text == want
    assert (
        text
        == '{"clientId":"p\\"\\\\é","data":{"size":9},"authInfo":{"visitAuthorizedToken":"<redacted 1 bytes>"}}'
    )
    # control characters: the compiled reader leaves such a body to protobuf (a damaged length's
    # mark); its JSON writer escapes them as to_json does
    assert (
        tubemq_body_both(entry, brk.SendMessageRequestP2B(clientId="a\n\x00").SerializeToString())[0] is None
    )
    assert tubemq_body_json_both(entry, {"clientId": "a\n\x00"}) == ('{"clientId":"a\\n\\u0000"}',) * 2


def test_body_json_leaves_a_value_it_does_not_write_to_to_json():
    """Bytes that are not a payload (none of the built-in messages has such a field): None."""
    entry = BODY_NAMES.index("brokerscope.tubemq.broker.SendMessageRequestP2B")
    i = rpc.BUILTIN.index[BODY_NAMES[entry]]
    assert rpc._rpc.body_json({"clientId": b"raw"}, rpc.BUILTIN.table, i) is None
    assert rpc._rpc.body_json({"clientId": "a"}, rpc.BUILTIN.table, i) == '{"clientId":"a"}'


@pytest.mark.parametrize("seed", range(200))
def test_read_writes_the_details_json_to_json_writes(seed):
    """_rpc.read's head (serial, blocks, flag, rpc_header) and body JSON against to_json of what it
    read, over random envelopes around random bodies, cut into blocks, at times damaged."""
    rng = random.Random(24000 + seed)
    entry, body, _ = random_body(rng)
    cls = next(
        c
        for m in rpc.METHODS.values()
        for c in (m.request, m.response)
        if c is not None and c.DESCRIPTOR.full_name == BODY_NAMES[entry]
    )
    mid, is_request = next(
        (m.id, c is m.request) for m in rpc.METHODS.values() for c in (m.request, m.response) if c is cls
    )
    ids = {"traceId": INT64, "spanId": INT64, "parentId": INT64}
    if is_request:
        env = _with(pb.RpcConnHeader(flag=0), ids, rng) + delimited(pb.RequestHeader(serviceType=2))
        env += delimited(pb.RequestBody(method=mid, timeout=5, request=body))
    else:
        env = _with(pb.RpcConnHeader(flag=1), ids, rng) + delimited(pb.ResponseHeader(status=0))
        env += delimited(pb.RspResponseBody(method=mid, data=body))
    data = frame(rng.randrange(2**32), env, rng.choice([1, 7, 64, 8192]))
    if seed % 4 == 0:
        data = damage(rng, data)
    both = tubemq_read_json_both(data)
    if both is not None:
        assert both[0] == both[1]


@pytest.mark.parametrize("seed", range(100))
def test_read_all_reads_a_chunks_frames_as_split_and_read_do(seed):
    """Several frames back to back (random envelopes around random bodies), at times cut short or
    damaged, at times under a smaller frame limit: the frames read_all takes are split's, each
    read as read reads it."""
    rng = random.Random(27000 + seed)
    chunk, n = b"", rng.randrange(1, 5)
    for i in range(n):
        entry, body, _ = random_body(rng)
        env = delimited(pb.RpcConnHeader(flag=0)) + delimited(pb.RequestHeader(serviceType=3))
        env += delimited(pb.RequestBody(method=rng.choice([13, 17, 5, 99]), request=body))
        chunk += frame(i, env if rng.random() < 0.8 else random_envelope(rng), rng.choice([7, 8192]))
    if seed % 3 == 0:
        chunk = damage(rng, chunk)
    if seed % 4 == 0:
        chunk = chunk[: rng.randrange(len(chunk) + 1)]
    limits = rng.choice([(1 << 20, 4096), (64, 4096), (1 << 20, 1)])
    got, want = tubemq_read_all_both(chunk, limits)
    assert repr(got) == repr(want)
    if seed % 3 and seed % 4 and limits == (1 << 20, 4096):  # whole and in limits: every frame
        assert len(got[0]) == len(got[1]) == n and sum(got[0]) == len(chunk)


def test_a_body_keeps_payloads_whole_and_redacts_secrets():
    body = brk.SendMessageRequestP2B(
        clientId="p", data=b"\x00\x01payload", authInfo=brk.AuthorizedInfo(visitAuthorizedToken=123456789)
    ).SerializeToString()
    got, want = tubemq_body_both(BODY_NAMES.index("brokerscope.tubemq.broker.SendMessageRequestP2B"), body)
    assert (
        got
        == want
        == {
            "clientId": "p",
            "data": b"\x00\x01payload",
            "authInfo": {"visitAuthorizedToken": "<redacted 9 bytes>"},
        }
    )
    assert rpc.decode_body(13, True, body)[1]["data"] == {"size": 9}


@pytest.mark.parametrize(
    "body",
    [
        b"\x52\x00\x52\x00",  # authInfo (a message) sent twice: protobuf merges the two
        b"\x18\x80\x80\x80\x80\x10",  # partitionId 2^32: past int32
        b"\x0a\x02\xc3\x28",  # clientId not UTF-8: protobuf hands it over as bytes
        b"\x1a\x01\x61",  # partitionId (int32) as a length-delimited field
    ],
)
def test_what_the_body_reader_leaves_to_protobuf(body):
    got, _want = tubemq_body_both(BODY_NAMES.index("brokerscope.tubemq.broker.SendMessageRequestP2B"), body)
    assert got is None


# ---------------------------------------------------------------------------------------------
# a message's data: the compiled content.message_parts against split_payload + parse_attributes


@pytest.mark.parametrize(
    ("data", "flag"),
    [
        (b"", None),
        (b"abc", 0),
        (b"ab", 1),
        (b"\x00\x00\x00\x05k=v,xpayload", 1),
        (b"\x00\x00\x00\x0ek=v,,a=b=c,x\xffpay", 1),  # empty item, `=` in a value, bad UTF-8
        (b"\xff\xff\xff\xffab", 1),  # a negative attribute length
        (b"\x00\x00\x00\x09abc", 3),  # past the data
        (b"\x00\x00\x00\x00pl", -1),  # every flag bit set
    ],
)
def test_message_parts_as_split_payload_and_parse_attributes(data, flag):
    got, want = tubemq_message_both(data, flag)
    assert got == want


@pytest.mark.parametrize("seed", range(100))
def test_damaged_message_data_split_as_python_splits_it(seed):
    rng = random.Random(15000 + seed)
    attr = ",".join(f"k{i}={rng.choice(['', 'v', 'é', 'a=b'])}" for i in range(rng.randrange(5))).encode()
    data = damage(rng, len(attr).to_bytes(4, "big") + attr + rng.randbytes(rng.randrange(20)))
    got, want = tubemq_message_both(data, rng.choice([1, 3, None, 0]))
    assert got == want


# ---------------------------------------------------------------------------------------------
# many messages' columns: the compiled rows.message_columns against the Python readers


def _data(rng: random.Random) -> tuple[bytes, int | None]:
    """A message's data and flag: attributes first (flag bit 0) or not, at times damaged."""
    payload = rng.randbytes(rng.randrange(0, 40))
    attr = ",".join(f"k{i}={rng.choice(['', 'v', 'é', '$msgTime$'])}" for i in range(rng.randrange(4)))
    if rng.random() < 0.3:
        attr += ",$msgTime$=202401020304"
    raw = attr.encode()
    data = len(raw).to_bytes(4, "big") + raw + payload if rng.random() < 0.7 else payload
    if rng.random() < 0.1:
        data = damage(rng, data)
    return data, rng.choice([1, 1, 0, 3, None, -1])


def random_pack(rng: random.Random) -> bytes:
    """A getMessagesC2B response of random messages (checksums right, wrong, -1 or absent)."""
    rsp = brk.GetMessageResponseB2C(success=True, errCode=200, currOffset=rng.choice(INT64))
    for _ in range(rng.randrange(0, 6)):
        tm = rsp.messages.add()
        data, flag = _data(rng)
        tm.payLoadData = data
        if flag is not None:
            tm.flag = flag
        cs = rng.choice([None, -1, zlib.crc32(data) & 0x7FFFFFFF, 12345])
        if cs is not None:
            tm.checkSum = cs
        for name, choices in (("messageId", INT64), ("partitionId", INT32), ("reportAddr", INT32)):
            if rng.random() < 0.7:
                setattr(tm, name, rng.choice(choices))
        if rng.random() < 0.7:
            tm.recvTimeInMs = rng.choice([0, 1_700_000_000_000])
    return rsp.SerializeToString()


def random_send(rng: random.Random) -> bytes:
    data, flag = _data(rng)
    req = brk.SendMessageRequestP2B(clientId="p", topicName="t", data=data, sentAddr=rng.choice(INT32))
    if flag is not None:
        req.flag = flag
    if rng.random() < 0.5:
        req.checkSum = rng.choice([-1, zlib.crc32(data) & 0x7FFFFFFF, 7])
    if rng.random() < 0.5:
        req.msgTime = rng.choice(["202401020304", "", "x"])
    return req.SerializeToString()


@pytest.mark.parametrize("seed", range(200))
def test_message_columns_as_the_python_readers_give_them(seed):
    rng = random.Random(18000 + seed)
    deliver = seed % 2 == 0
    body = random_pack(rng) if deliver else random_send(rng)
    got, want = tubemq_columns_both(body, deliver)
    assert repr(got) == repr(want)
