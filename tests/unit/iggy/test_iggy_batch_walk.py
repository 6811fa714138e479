"""The compiled batch-record walk (iggy/_batch.c) against the plain-Python reader
(messages.parse_batch_v48): the same batch fields and message columns, texts included, for every
record it takes, and the same error for every record it leaves to that reader."""

from __future__ import annotations

import json
import random
import struct

import pytest
import xxhash

from brokerscope.protocols.iggy import messages as im
from tests.fuzz.targets import iggy_batch_both
from tests.support.damage import damage

from .kit import VSR_ORIGIN


def headers_blob(rng: random.Random, typed_keys: bool) -> bytes:
    """User headers in either layout: [key kind u8, typed only][key len u32][key][kind u8][len u32][value]."""
    out = b""
    for _ in range(rng.randrange(1, 4)):
        key = rng.choice([b"source", b"n", "ключ".encode(), b"\xff\xfe", b""])
        kind, value = rng.choice(
            [
                (2, b"bench"),
                (2, b"\xff"),  # a string kind that is not UTF-8: kept as bytes
                (3, b"\x01"),
                (6, struct.pack("<i", -7)),
                (12, struct.pack("<Q", 2**64 - 1)),
                (14, struct.pack("<f", 1.5)),
                (15, struct.pack("<d", -0.1)),
                (1, rng.randbytes(rng.randrange(0, 5))),
            ]
        )
        if typed_keys:
            out += bytes([rng.choice([2, 1, 11])])
        out += struct.pack("<I", len(key)) + key + bytes([kind]) + struct.pack("<I", len(value)) + value
    return out


def random_batch(rng: random.Random, n: int, **kw) -> bytes:
    """One batch record of `n` messages: user headers on some (either layout), checksums or
    not, server and origin timestamps or not."""
    msgs = []
    for i in range(n):
        hdrs = headers_blob(rng, rng.random() < 0.5) if rng.random() < 0.4 else b""
        msgs.append((rng.choice([i, 2**128 - 1, 10**20 + i]), rng.randbytes(rng.randrange(0, 30)), hdrs))
    fields = {
        "origin_timestamp": rng.choice([0, VSR_ORIGIN]),
        "partition_id": rng.choice([0, 3]),
        "base_offset": rng.choice([0, 100, 2**63 - 5]),
        "base_timestamp": rng.choice([0, 0, VSR_ORIGIN + 7]),
        "timestamp_deltas": [rng.randrange(0, 1000) for _ in range(n)],
        "with_checksums": rng.random() < 0.8,
    }
    fields.update(kw)
    return im.build_batch_v48(msgs, **fields)


@pytest.mark.parametrize("seed", range(60))
def test_walk_gives_the_reader_s_columns(seed):
    rng = random.Random(seed)
    n = rng.randrange(1, 20)
    data = rng.randbytes(seed % 3) + random_batch(rng, n) + rng.randbytes(seed % 5)
    got, want, walked = iggy_batch_both(data, seed % 3, n if seed % 2 else None)
    assert walked is not None and got == want
    batch, msgs, _ = got
    assert len(msgs) == n and batch["message_count"] == n
    plain = msgs.plain()
    for text in plain["details"]:
        json.loads(text)
    assert len(json.loads(f"[{plain['summaries']}]")) == n


@pytest.mark.parametrize("seed", range(300))
def test_damaged_records_give_what_the_reader_gives(seed):
    """Bytes changed, inserted or cut anywhere: the walk either gives the reader's columns or
    leaves the record to it (so the error is the one the reader raises)."""
    rng = random.Random(2000 + seed)
    n = rng.randrange(1, 6)
    data = damage(rng, random_batch(rng, n))
    got, want, walked = iggy_batch_both(data, 0, rng.choice([None, n, n + 1]))
    assert got == want
    if len(want) == 2:
        assert walked is None


@pytest.mark.parametrize(
    "kw",
    [
        {"base_offset": 2**64 - 1},  # base_offset + delta past 2^64
        {"origin_timestamp": 2**64 - 1},  # origin + timestamp delta past 2^64
        {"base_timestamp": 2**63},  # a time past 2^64 ns
    ],
)
def test_values_past_64_bits_are_left_to_the_reader(kw):
    data = random_batch(random.Random(5), 3, timestamp_deltas=[0, 1, 2], **kw)
    got, want, walked = iggy_batch_both(data, 0, None)
    assert walked is None and got == want
    assert len(got[1]) == 3


def test_checksums_that_do_not_match():
    data = bytearray(random_batch(random.Random(1), 3, with_checksums=True))
    first = im.BATCH_HEADER_V48 + im.V48  # the first message's payload
    data[first] ^= 0xFF  # its bytes changed: its checksum and the batch's (of the checksum fields) hold
    data[im.BATCH_HEADER_V48] ^= 0x01  # ... then its checksum field: the batch checksum fails too
    got, want, walked = iggy_batch_both(bytes(data), 0, 3)
    assert walked is not None and got == want
    batch, msgs, _ = got
    assert msgs.checksum_ok == [False, True, True] and batch["batch_checksum_ok"] is False
    assert [s["checksum_ok"] for s in json.loads(f"[{msgs.plain()['summaries']}]")] == [False, True, True]


def test_texts_and_columns_of_one_message():
    blob = im.build_headers([("source", 2, b"bench"), ("n", 6, struct.pack("<i", 3))])
    data = im.build_batch_v48(
        [(7, b"hello", blob)], VSR_ORIGIN, base_offset=40, base_timestamp=0, timestamp_deltas=[5]
    )
    batch, msgs, nxt = im.read_batch_v48(data, 0, len(data))
    checksum = xxhash.xxh3_64_intdigest(data[im.BATCH_HEADER_V48 + 8 :])
    assert nxt == len(data) and batch["batch_checksum_ok"] is True
    plain = msgs.plain()
    assert (plain["ids"], plain["payloads"], plain["offsets"], plain["ts_ns"]) == (
        ["7"],
        [b"hello"],
        [40],
        [(VSR_ORIGIN + 5) * 1000],
    )
    assert msgs.headers == [
        [{"key": "source", "value": b"bench"}, {"key": "n", "value": struct.pack("<i", 3)}]
    ]
    assert json.loads(plain["details"][0]) == {
        "headers": [
            {"key": "source", "kind": "string", "value": "bench"},
            {"key": "n", "kind": "int32", "value": 3},
        ],
        "origin_timestamp": VSR_ORIGIN + 5,
        "checksum": checksum,
        "header_size": 48,
    }
    assert json.loads(plain["summaries"]) == {
        "id": "7",
        "payload_size": 5,
        "headers": 2,
        "offset": 40,
        "checksum": checksum,
        "checksum_ok": True,
    }


def test_texts_without_checksums():
    """Under a payload policy other than keep the walk and the Python reader leave the message and
    batch checksums out (payload-derived), the verdicts in."""
    data = bytearray(random_batch(random.Random(3), 4, with_checksums=True))
    data[im.BATCH_HEADER_V48 + im.V48] ^= 0xFF  # the first message's payload: its checksum fails
    kept, _, _ = iggy_batch_both(bytes(data), 0, None)
    got, want, walked = iggy_batch_both(bytes(data), 0, None, sums=False)
    assert walked is not None and got == want
    batch, msgs, _ = got
    assert batch == {k: v for k, v in kept[0].items() if k != "batch_checksum"}
    assert msgs.checksum_ok == kept[1].checksum_ok == [False, True, True, True]
    plain, kept_plain = msgs.plain(), kept[1].plain()
    assert all("checksum" in json.loads(d) for d in kept_plain["details"])
    assert [json.loads(d) for d in plain["details"]] == [
        {k: v for k, v in json.loads(d).items() if k != "checksum"} for d in kept_plain["details"]
    ]
    assert json.loads(f"[{plain['summaries']}]") == [
        {k: v for k, v in e.items() if k != "checksum"} for e in json.loads(f"[{kept_plain['summaries']}]")
    ]
    cut = bytes(data[:-1])  # left to the Python reader, which rejects it the same way
    assert iggy_batch_both(cut, 0, None, sums=False)[:2] == iggy_batch_both(cut, 0, None)[:2]


def test_ids_in_decimal_across_the_parts_of_the_u128():
    """Ids written in base-10^19 parts: every edge between parts, with its leading zeros."""
    ids = [0, 9, 10, 10**19 - 1, 10**19, 10**19 + 1, 2**64 - 1, 2**64, 10**38 - 1, 10**38, 2**128 - 1]
    data = im.build_batch_v48([(i, b"v", b"") for i in ids], VSR_ORIGIN)
    _batch, msgs, _ = im.read_batch_v48(data, 0, len(data))
    assert msgs.plain()["ids"] == [str(i) for i in ids]


def test_checksums_by_the_library_function_and_by_the_python_one():
    """The walk calls xxhash's XXH3_64bits itself where the module exports it (so this
    environment checks that path); the Python function it falls back to gives the same verdicts."""
    assert isinstance(im._XXH3, int)
    rng = random.Random(11)
    for _ in range(40):
        data = bytearray(random_batch(rng, rng.randrange(1, 8), with_checksums=True))
        if rng.random() < 0.5:
            data[rng.randrange(im.BATCH_HEADER_V48, len(data))] ^= 0x10
        by_address = im._batch.walk(bytes(data), 0, len(data), -1, im._XXH3)
        assert by_address == im._batch.walk(bytes(data), 0, len(data), -1, im.xxh3_64)
