"""The compiled batch walk (_batch.c) against the plain-Python reader (messages.split_batch): the
same columns for every batch it takes, and the same error for every batch it leaves to it."""

from __future__ import annotations

import hashlib
import json
import random
import struct

import pyarrow as pa
import pytest

from brokerscope.protocols.base import PayloadPolicy, to_json
from brokerscope.protocols.pulsar import messages
from brokerscope.protocols.pulsar import rows as prows
from brokerscope.protocols.pulsar.gen import pulsar_api_pb2 as pb
from brokerscope.protocols.pulsar.messages import PayloadError, columns, split_batch
from tests.support.damage import damage


def entry(smm: pb.SingleMessageMetadata, value: bytes, raw_meta: bytes | None = None) -> bytes:
    meta = smm.SerializeToString() if raw_meta is None else raw_meta
    return struct.pack(">I", len(meta)) + meta + value


def random_batch(rnd: random.Random, n: int) -> bytes:
    out = b""
    for i in range(n):
        value = rnd.randbytes(rnd.randrange(0, 40))
        smm = pb.SingleMessageMetadata(payload_size=len(value))
        for _ in range(rnd.randrange(0, 4)):
            smm.properties.add(key=rnd.choice(["idx", "tag", "é", ""]), value=rnd.choice(["1", "v", "ü", ""]))
        if rnd.random() < 0.7:
            smm.partition_key = rnd.choice([f"key-{i}", "", "a2V5", "not base64!", "ключ"])
            smm.partition_key_b64_encoded = rnd.random() < 0.3
        if rnd.random() < 0.5:
            smm.event_time = rnd.choice([0, 1_700_000_000_000 + i, 2**64 - 1])
        if rnd.random() < 0.5:
            smm.sequence_id = rnd.choice([0, i, 2**64 - 1])
        if rnd.random() < 0.2:
            smm.ordering_key = rnd.randbytes(rnd.randrange(0, 5))
        smm.null_value = rnd.random() < 0.1
        smm.compacted_out = rnd.random() < 0.1
        out += entry(smm, value)
    return out


def both(md: pb.MessageMetadata, data: bytes):
    """(what the compiled walk gives, or None; what split_batch gives, as lists or its error)."""
    got = messages._batch.split(data, md.num_messages_in_batch, md.sequence_id)
    try:
        want = columns(split_batch(md, data)).pylists()
    except PayloadError as e:
        want = e
    return got, want


def walk_columns(md, data):
    """The columns the walk makes (split_batch's where it leaves the batch to it), as lists."""
    return (messages.walk(md, data) or columns(split_batch(md, data))).pylists()


def test_small_batches_and_single_messages_are_lists_for_conform_large_ones_arrow():
    """A batch under WALK_MIN messages goes the Python way (lists: conform converts them with
    the rest of the rows), from WALK_MIN on the compiled walk gives Arrow columns."""
    for n, arrow in ((messages.WALK_MIN - 1, False), (messages.WALK_MIN, True)):
        data = b"".join(
            entry(pb.SingleMessageMetadata(payload_size=1, partition_key="k"), b"v") for _ in range(n)
        )
        md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, num_messages_in_batch=n)
        cols = messages.expand_columns(md, data, cap=1 << 20)
        assert isinstance(cols.value, pa.Array) is arrow and isinstance(cols.headers, pa.Array) is arrow
        assert cols.pylists() == columns(split_batch(md, data)).pylists()


@pytest.mark.parametrize("seed", range(40))
def test_walk_gives_split_batch_columns(seed):
    rnd = random.Random(seed)
    n = rnd.randrange(1, 30)
    data = random_batch(rnd, n)
    if seed % 4 == 0:
        data += rnd.randbytes(rnd.randrange(1, 9))  # trailing bytes: the last message says so
    md = pb.MessageMetadata(producer_name="p", sequence_id=rnd.choice([0, 5, 2**64 - 1]), publish_time=1)
    md.num_messages_in_batch = n
    got, want = both(md, data)
    if md.sequence_id + n - 1 >= 2**64 and got is None:
        return  # a default sequence past 2^64: left to split_batch
    assert got is not None
    assert walk_columns(md, data) == want


@pytest.mark.parametrize("seed", range(300))
def test_damaged_batches_give_what_split_batch_gives(seed):
    """Bytes changed, inserted or cut anywhere: the walk either gives split_batch's columns or
    leaves the batch to it (so its error is the one split_batch raises)."""
    rnd = random.Random(1000 + seed)
    n = rnd.randrange(1, 8)
    data = damage(rnd, random_batch(rnd, n))
    md = pb.MessageMetadata(producer_name="p", sequence_id=3, publish_time=1)
    md.num_messages_in_batch = rnd.choice([n, n, n - 1, n + 1, 0])
    got, want = both(md, bytes(data))
    if isinstance(want, PayloadError):
        assert got is None
        with pytest.raises(PayloadError) as e:
            walk_columns(md, bytes(data))
        assert (e.value.status, str(e.value)) == (want.status, str(want))
    else:
        assert walk_columns(md, bytes(data)) == want


@pytest.mark.parametrize(
    "raw_meta",
    [
        b"\x12\x02\xff\xfe\x18\x01",  # partition_key not UTF-8: protobuf gives bytes
        b"\x0a\x06\x0a\x02\xff\xfe\x12\x00\x18\x01",  # a property key not UTF-8
        b"\x1d\x01\x00\x00\x00\x18\x01",  # payload_size (a varint) sent as fixed32: an unknown field
        b"\x18\x01\x03\x04",  # a group
        b"\x00\x01\x18\x01",  # field number 0
    ],
)
def test_what_the_walk_leaves_to_split_batch(raw_meta):
    data = entry(pb.SingleMessageMetadata(), b"v", raw_meta)
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, num_messages_in_batch=1)
    got, want = both(md, data)
    assert got is None
    if isinstance(want, PayloadError):
        with pytest.raises(PayloadError):
            walk_columns(md, data)
    else:
        assert walk_columns(md, data) == want


def test_properties_unknown_fields_and_last_value_wins():
    smm = pb.SingleMessageMetadata(payload_size=2, partition_key="first")
    meta = smm.SerializeToString() + b"\x12\x06second" + b"\xa0\x06\x07" + b"\x0a\x05\x0a\x01k\x12\x00"
    md = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1, num_messages_in_batch=1)
    data = entry(smm, b"ab", meta)
    got, want = both(md, data)
    assert got is not None
    cols = walk_columns(md, data)
    assert cols == want
    assert cols.key == [b"second"] and cols.headers == [[{"key": "k", "value": b""}]] and cols.sequence == [7]


@pytest.mark.parametrize("seed", range(40))
def test_details_say_what_each_message_has(seed):
    """Each message's details: the payload's common fields, its batch index, then the fields it
    has of its own, as to_json writes that dict (messages with none of their own included)."""
    rnd = random.Random(3000 + seed)
    n = rnd.randrange(1, 20)
    if seed % 2:  # only what every message has: a value, properties, a key
        out = b""
        for i in range(n):
            smm = pb.SingleMessageMetadata(payload_size=1, partition_key=f"k{i}")
            smm.properties.add(key="idx", value=str(i))
            out += entry(smm, b"v")
        data = out
    else:
        data = random_batch(rnd, n)
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, num_messages_in_batch=n)
    cols = messages.walk(md, data) or columns(split_batch(md, data))
    common = {"producer_name": "p", "num_messages_in_batch": n}
    got = prows._details(cols, common)
    got = got.to_pylist() if isinstance(got, pa.Array) else got
    for i, s in enumerate(split_batch(md, data)):  # what protobuf reads, message by message
        want = {**common, "batch_index": i}
        if s.event_time:
            want["event_time_ms"] = s.event_time
        if s.ordering_key is not None:
            want["ordering_key"] = s.ordering_key
        if s.null_value:
            want["null_value"] = True
        if isinstance(s.key_raw, str) and s.key is not None and s.key_raw.encode() != s.key:
            want["partition_key_b64"] = s.key_raw
        want.update(s.extra)
        assert got[i] == to_json(want)
    # under a key policy, the ordering key as the policy leaves it, the base64 text of a key never
    hashed = prows._details(cols, common, PayloadPolicy("hash", 4, apply_to_keys=True))
    dropped = prows._details(cols, common, PayloadPolicy("drop", 4, apply_to_keys=True))
    for i, s in enumerate(split_batch(md, data)):
        h, d = (
            json.loads(hashed[i] if isinstance(hashed, list) else hashed[i].as_py()),
            json.loads(dropped[i] if isinstance(dropped, list) else dropped[i].as_py()),
        )
        assert "partition_key_b64" not in h and "partition_key_b64" not in d and "ordering_key" not in d
        if s.ordering_key is not None:
            assert h["ordering_key"] == hashlib.sha256(s.ordering_key).hexdigest()
