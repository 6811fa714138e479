"""Payload handling: every codec, decompression caps, batches, encryption, keys, secrets, bad bytes."""

from __future__ import annotations

import base64
import json
import random
import zlib

import cramjam
import lz4.block
import pytest
import zstandard

from brokerscope.protocols.base import Context
from brokerscope.protocols.pulsar import framing
from brokerscope.protocols.pulsar.gen import pulsar_api_pb2 as pb
from brokerscope.protocols.pulsar.messages import PayloadError, decompress, expand

from . import kit as F
from .kit import run

T = pb.BaseCommand
RAW = F.BATCH_RAW  # two single messages: 'first' (key a), 'second'

CODECS = {
    pb.NONE: lambda b: b,
    pb.LZ4: lambda b: lz4.block.compress(b, store_size=False),
    pb.ZLIB: zlib.compress,
    pb.ZSTD: lambda b: zstandard.ZstdCompressor().compress(b),
    pb.SNAPPY: lambda b: bytes(cramjam.snappy.compress_raw(b)),
}


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_every_codec_roundtrip(codec):
    md = pb.MessageMetadata(
        producer_name="p", sequence_id=1, publish_time=1, compression=codec, num_messages_in_batch=2
    )
    md.uncompressed_size = len(RAW)
    singles = expand(md, CODECS[codec](RAW), cap=1 << 20)
    assert [(s.batch_index, s.value, s.key, s.sequence) for s in singles] == [
        (0, b"first", b"a", 8),
        (1, b"second", None, 9),
    ]


@pytest.mark.parametrize("codec", [pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY])
def test_decompression_is_capped(codec):
    bomb = b"\0" * (4 << 20)
    with pytest.raises(PayloadError) as e:
        decompress(codec, CODECS[codec](bomb), len(bomb) if codec == pb.LZ4 else 0, cap=1 << 20)
    assert e.value.status == "decompression_failed"


def test_corrupt_compressed_payload_is_an_error_row_not_an_exception():
    md = pb.MessageMetadata(
        producer_name="p", sequence_id=3, publish_time=1, compression=pb.ZSTD, uncompressed_size=50
    )
    send = pb.BaseCommand(type=T.SEND)
    send.send.producer_id, send.send.sequence_id = 1, 3
    frame = framing.encode_frame(send, md, b"not zstd at all")
    out = run([("c2s", frame)])
    [m] = out["messages"]
    assert m["decode_status"] == "decompression_failed" and m["value"] is None and "ZSTD" in m["decode_error"]
    assert out["commands"][0]["decode_status"] == "ok"  # the frame itself is fine


def test_batch_count_larger_than_payload_is_truncated():
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, num_messages_in_batch=3)
    with pytest.raises(PayloadError) as e:
        expand(md, RAW, cap=1 << 20)
    assert e.value.status == "truncated"


def _send(md: pb.MessageMetadata, payload: bytes, seq: int = 1) -> bytes:
    c = pb.BaseCommand(type=T.SEND)
    c.send.producer_id, c.send.sequence_id = 1, seq
    return framing.encode_frame(c, md, payload)


def test_encrypted_payload_kept_and_flagged():
    md = pb.MessageMetadata(
        producer_name="p", sequence_id=1, publish_time=1, encryption_algo="RSA", num_messages_in_batch=4
    )
    md.encryption_keys.add(key="mykey", value=b"\x01\x02")
    out = run([("c2s", F.PRODUCER), ("c2s", _send(md, b"\x99ciphertext"))])
    [m] = out["messages"]
    assert m["decode_status"] == "encrypted" and m["value"] == b"\x99ciphertext"
    d = json.loads(m["details"])
    assert d["encryption_keys"] == ["mykey"] and d["num_messages"] == 4


def test_partition_key_base64_and_null_value_and_ordering_key():
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, null_value=True)
    md.partition_key = base64.b64encode(b"\x00\xffbin").decode()
    md.partition_key_b64_encoded = True
    md.ordering_key = b"ok"
    out = run([("c2s", F.PRODUCER), ("c2s", _send(md, b""))])
    [m] = out["messages"]
    assert m["key"] == b"\x00\xffbin" and m["value"] is None and m["value_size"] is None
    d = json.loads(m["details"])
    assert (
        d["null_value"] is True and d["ordering_key"] == "ok" and d["partition_key_b64"] == md.partition_key
    )


def test_payload_policy_applies():
    out = run(
        [("c2s", F.PRODUCER), ("c2s", F.SEND_7)],
        ctx=Context(payload=__import__("brokerscope").protocols.base.PayloadPolicy(mode="hash")),
    )
    [m] = out["messages"]
    assert m["value"] is None and m["value_size"] == 12 and len(m["value_hash"]) == 64


def test_auth_challenge_and_response_redacted():
    ch = pb.BaseCommand(type=T.AUTH_CHALLENGE)
    ch.auth_challenge.challenge.auth_method_name = "sasl"
    ch.auth_challenge.challenge.auth_data = b"server-nonce-SECRET"
    rs = pb.BaseCommand(type=T.AUTH_RESPONSE)
    rs.auth_response.response.auth_method_name = "sasl"
    rs.auth_response.response.auth_data = b"client-proof-SECRET"
    out = run([("c2s", F.CONNECT), ("s2c", framing.encode_frame(ch)), ("c2s", framing.encode_frame(rs))])
    assert [r["decode_status"] for r in out["commands"]] == ["ok"] * 3
    assert b"SECRET" not in repr(out).encode()
    assert b"U0VDUkVU" not in repr(out).encode()  # nor in base64
    d = json.loads(out["commands"][2]["details"])
    assert d["response"]["auth_data"] == "<redacted 19 bytes>"
    lat = {(r["request_command"], r["response_command"]) for r in out["latencies"]}
    assert ("CONNECT", "AUTH_CHALLENGE") in lat and ("AUTH_CHALLENGE", "AUTH_RESPONSE") in lat


def test_broken_connect_keeps_no_raw():
    broken = bytearray(F.CONNECT)
    broken[-6] = 0x7F  # auth_method_name's length now runs past the command
    # as the first frame (no way to resynchronise on it) and after a good frame
    for feeds in (
        [("c2s", bytes(broken))],
        [("c2s", F.PING + bytes(broken) + F.PING)],
        [("c2s", bytes(broken)[:-9])],
    ):
        out = run(feeds)
        bad = [c for c in out["commands"] if c["decode_status"] != "ok"]
        assert bad and all(c["raw"] is None for c in bad)
        assert b"s3cr3t" not in repr(out).encode()


def test_send_error_pairs_and_is_an_ack_row():
    err = pb.BaseCommand(type=T.SEND_ERROR)
    err.send_error.producer_id, err.send_error.sequence_id = 1, 7
    err.send_error.error, err.send_error.message = pb.ChecksumError, "bad"
    out = run([("c2s", F.PRODUCER), ("c2s", F.SEND_7), ("s2c", framing.encode_frame(err))])
    [lat] = [r for r in out["latencies"] if r["request_command"] == "SEND"]
    assert lat["response_command"] == "SEND_ERROR" and lat["error_code"] == pb.ChecksumError
    [a] = out["acks"]
    assert a["ack_type"] == "pulsar_send_error" and a["error_code"] == pb.ChecksumError
    [m] = out["messages"]
    assert m["message_id"] is None and json.loads(m["details"])["send_error"] == pb.ChecksumError


def test_random_bytes_never_raise():
    rnd = random.Random(1234)
    good = [F.CONNECT, F.PRODUCER, F.SEND_7, F.SEND_BATCH, F.PING]
    for _ in range(200):
        stream = bytearray(b"".join(good))
        for _ in range(rnd.randint(1, 8)):  # flip, insert or delete bytes
            i = rnd.randrange(len(stream))
            op = rnd.random()
            if op < 0.4:
                stream[i] = rnd.randrange(256)
            elif op < 0.7:
                stream[i:i] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 20)))
            else:
                del stream[i : i + rnd.randint(1, 10)]
        out = run([("c2s", bytes(stream))], chunk=rnd.randint(1, 64))
        total = sum(r["size"] for r in out["commands"] if r["decode_status"] != "oversize")
        assert total <= len(stream)  # rows never claim more bytes than were fed


def test_a_batch_of_zero_messages_with_a_payload_is_malformed_not_a_decoder_error():
    """Fuzzing found split_batch indexing an empty list (IndexError, the connection's decoder
    retired) when num_messages_in_batch is 0 but bytes follow."""
    md = pb.MessageMetadata(producer_name="p", sequence_id=4, publish_time=1, num_messages_in_batch=0)
    with pytest.raises(PayloadError) as e:
        expand(md, RAW, cap=1 << 20)
    assert e.value.status == "malformed" and "num_messages_in_batch 0" in str(e.value)
    send = pb.BaseCommand(type=T.SEND)
    send.send.producer_id, send.send.sequence_id = 1, 4
    out = run([("c2s", framing.encode_frame(send, md, RAW)), ("c2s", framing.encode_frame(send, md, b""))])
    assert [c["decode_status"] for c in out["commands"]] == ["ok", "ok"]
    assert [m["decode_status"] for m in out["messages"]] == ["malformed"]


@pytest.mark.parametrize("chunk", [None, 7])
def test_a_damaged_total_size_does_not_swallow_the_frames_after_it(chunk):
    """One flipped bit of a SEND's total_size (found by a user trial: 55 -> 4151 took the next
    68 SENDs into its value, one checksum_mismatch row, the rest lost): the frame that fails its
    checksum and holds frame starts is one malformed row, every frame after it is read."""
    sends = []
    for i in range(120):
        md = pb.MessageMetadata(producer_name="prod-A", sequence_id=i, publish_time=1_700_000_000_000)
        sends.append(_send(md, f"value-{i}".encode(), seq=i))
    damaged = bytearray(sends[3])
    damaged[2] ^= 0x10  # total_size + 4096
    feeds = [("c2s", F.PRODUCER)] + [("c2s", bytes(damaged) if i == 3 else s) for i, s in enumerate(sends)]
    out = run(feeds, chunk=chunk)
    sent = [r for r in out["commands"] if r["command"] == "SEND"]
    assert sum(r["decode_status"] == "ok" for r in sent) == 119
    [bad] = [r for r in out["commands"] if r["decode_status"] != "ok"]
    assert bad["decode_status"] == "malformed" and "its size damaged" in bad["decode_error"]
    assert bad["size"] == len(sends[3])
    assert sorted(m["sequence"] for m in out["messages"]) == [i for i in range(120) if i != 3]


def _sends(n: int) -> list[bytes]:
    """`n` SENDs of producer 1, sequence ids 0 .. n-1, each with its checksum."""
    out = []
    for i in range(n):
        md = pb.MessageMetadata(producer_name="prod-A", sequence_id=i, publish_time=1_700_000_000_000)
        out.append(_send(md, f"value-{i}".encode(), seq=i))
    return out


def _damaged(frame: bytes, bit: int = 0x10) -> bytes:
    """`frame` with one bit of its total_size flipped (0x10: + 4096, 0x01: + 256)."""
    out = bytearray(frame)
    out[2] ^= bit
    return bytes(out)


def _receipt(seq: int) -> bytes:
    """A commands-only frame (no magic, no checksum): the SEND_RECEIPT of producer 1's `seq`."""
    c = pb.BaseCommand(type=T.SEND_RECEIPT)
    c.send_receipt.producer_id, c.send_receipt.sequence_id = 1, seq
    c.send_receipt.message_id.ledger_id, c.send_receipt.message_id.entry_id = 9, seq
    return framing.encode_frame(c)


def _accounted(out: dict, direction: str) -> int:
    """Bytes of `direction` its commands rows span (every byte in exactly one row)."""
    return sum(r["size"] for r in out["commands"] if r["direction"] == direction)


@pytest.mark.parametrize("chunk", [None, 7])
def test_a_damaged_total_size_that_runs_past_the_end_of_the_connection_loses_no_frame(chunk):
    """A SEND near the end whose total_size says 4096 bytes more than the connection holds:
    it waited for bytes that never came, and at the close the 9 SENDs after it were one
    `truncated` row. Now it is one malformed row, the frames after it read as they are."""
    sends = _sends(120)
    sends[110] = _damaged(sends[110])
    out = run([("c2s", F.PRODUCER)] + [("c2s", s) for s in sends], chunk=chunk)
    sent = [r for r in out["commands"] if r["command"] == "SEND"]
    assert len(sent) == 119 and all(r["decode_status"] == "ok" for r in sent)
    [bad] = [r for r in out["commands"] if r["decode_status"] != "ok"]
    assert bad["decode_status"] == "malformed" and bad["command"] is None
    assert "runs past the end of the connection" in bad["decode_error"]
    assert "its size damaged" in bad["decode_error"]
    assert bad["size"] == len(sends[110])
    assert sorted(m["sequence"] for m in out["messages"]) == [i for i in range(120) if i != 110]
    assert _accounted(out, "c2s") == len(F.PRODUCER) + sum(map(len, sends))


def test_a_damaged_total_size_that_runs_past_a_capture_gap_loses_no_frame():
    """The same damage followed by a capture gap: the gap was taken to end inside the damaged
    frame, one `gap` row spanning its 4 KiB, the frames in it and after the gap lost. Now the
    frames it holds are read, then the gap is a gap."""
    sends = _sends(120)
    sends[40] = _damaged(sends[40])
    feeds = [("c2s", F.PRODUCER)] + [("c2s", s) for s in sends[:51]] + [("gap", ("c2s", len(sends[51])))]
    out = run(feeds + [("c2s", s) for s in sends[52:]])
    assert sorted(m["sequence"] for m in out["messages"]) == [i for i in range(120) if i not in (40, 51)]
    [bad, gap] = [r for r in out["commands"] if r["decode_status"] != "ok"]
    assert bad["decode_status"] == "malformed" and "runs past a capture gap" in bad["decode_error"]
    assert bad["size"] == len(sends[40])
    assert gap["decode_status"] == "gap" and gap["size"] == len(sends[51])
    assert _accounted(out, "c2s") == len(F.PRODUCER) + sum(map(len, sends))


@pytest.mark.parametrize(
    ("at", "bit", "why"),
    [(3, 0x01, "bytes after its SEND_RECEIPT command"), (115, 0x10, "runs past the end")],
)
def test_a_damaged_total_size_of_a_frame_without_a_checksum_does_not_swallow_the_frames_after_it(
    at, bit, why
):
    """A SEND_RECEIPT has no magic and no CRC, so a damaged total_size (+256: it took the next 11
    receipts into a `payload` that failed as metadata) was found by nothing. A commands-only frame
    is 4 + command_size bytes and its command parses to its end: bytes after it that hold frame
    starts are the frames after it. Near the end (+4096), it runs past the connection's end too."""
    sends = _sends(120)
    receipts = [_receipt(i) for i in range(120)]
    receipts[at] = _damaged(receipts[at], bit)
    feeds = [("c2s", F.PRODUCER), ("s2c", F.PRODUCER_SUCCESS)] + [("c2s", s) for s in sends]
    out = run(feeds + [("s2c", r) for r in receipts])
    got = [r for r in out["commands"] if r["command"] == "SEND_RECEIPT"]
    assert len(got) == 119 and all(r["decode_status"] == "ok" for r in got)
    [bad] = [r for r in out["commands"] if r["decode_status"] != "ok"]
    assert bad["decode_status"] == "malformed" and bad["direction"] == "s2c"
    assert why in bad["decode_error"] and "its size damaged" in bad["decode_error"]
    assert bad["size"] == len(receipts[at])
    assert sorted(a["sequence"] for a in out["acks"]) == [i for i in range(120) if i != at]
    assert _accounted(out, "s2c") == len(F.PRODUCER_SUCCESS) + sum(map(len, receipts))


@pytest.mark.parametrize("bit", [0x01, 0x10])
@pytest.mark.parametrize("n", [12, 120])
def test_two_damaged_frames_in_a_row_near_the_start_lose_only_themselves(n, bit):
    """A connection's PRODUCER (commands-only) and first SEND with their total_size damaged: the
    PRODUCER took the SENDs after it (no checksum said so), and with a few SENDs only, the two ran
    past the connection's end: nothing after the CONNECT was read. Now both are one malformed
    row, every SEND after them decoded."""
    sends = _sends(n)
    feeds = [F.CONNECT, _damaged(F.PRODUCER, bit), _damaged(sends[0], bit)] + sends[1:]
    out = run([("c2s", f) for f in feeds])
    assert [r["command"] for r in out["commands"] if r["decode_status"] == "ok"] == ["CONNECT"] + ["SEND"] * (
        n - 1
    )
    [bad] = [r for r in out["commands"] if r["decode_status"] != "ok"]
    assert bad["decode_status"] == "malformed" and "its size damaged" in bad["decode_error"]
    assert bad["size"] == len(F.PRODUCER) + len(sends[0])
    assert sorted(m["sequence"] for m in out["messages"]) == list(range(1, n))
    assert _accounted(out, "c2s") == sum(map(len, feeds))


def test_sends_read_again_after_a_damaged_total_size_pair_with_the_receipts_that_came_first():
    """SENDs and receipts one after the other, the 11th SEND's total_size damaged (+4096): the
    SENDs after it wait inside it until it is read again, while their receipts arrive. They were
    receipts of no send (80 of 120 latencies unanswered, the produced messages without their
    message ids); now an answer whose request is not pending waits while the client's framer
    holds a frame with frame starts inside it (Framer.holds_frames)."""
    sends = _sends(120)
    sends[10] = _damaged(sends[10])
    feeds = [("c2s", F.PRODUCER), ("s2c", F.PRODUCER_SUCCESS)]
    feeds += [f for i, s in enumerate(sends) for f in (("c2s", s), ("s2c", _receipt(i)))]
    out = run(feeds)
    lat = [r for r in out["latencies"] if r["request_command"] == "SEND"]
    assert sorted(r["correlation_id"] for r in lat) == [i for i in range(120) if i != 10]
    assert all(r["latency_us"] is not None and r["latency_us"] > 0 for r in lat)
    ids = {m["sequence"]: m["message_id"] for m in out["messages"]}
    assert sorted(ids) == [i for i in range(120) if i != 10] and all(ids.values())
    assert len(out["acks"]) == 120  # the damaged SEND's receipt too: an ack of no send


def test_a_held_receipt_keeps_its_frame_numbers(tmp_path, monkeypatch):
    """The same exchanges in a capture, decoded by the driver: a held receipt's rows name the
    packet that carried it, though its direction moved on (the driver prunes a direction's
    packet index below the conversation's low_water every few packets here)."""
    from brokerscope import streams
    from tests.support.synth import write_capture

    monkeypatch.setattr(streams, "PRUNE_AT", 4)
    sends = _sends(120)
    sends[10] = _damaged(sends[10])
    pairs = [(F.PRODUCER, F.PRODUCER_SUCCESS)] + [(s, _receipt(i)) for i, s in enumerate(sends)]
    path = tmp_path / "pulsar.pcap"
    write_capture(
        str(path), n_conns=1, exchanges=len(pairs), server_port=6650, payloads=lambda c, i: pairs[i]
    )
    out = streams.decode_files([str(path)])
    got = [(r["first_frame"], r["last_frame"]) for r in out["commands"] if r["command"] == "SEND_RECEIPT"]
    # handshake frames 1-3, the PRODUCER exchange 4-5, then SEND i at frame 6 + 2 i, its receipt one after
    assert sorted(got) == [(7 + 2 * i,) * 2 for i in range(120)]
    assert sum(r["latency_us"] is not None for r in out["latencies"]) == 120


@pytest.mark.parametrize("value_size", [8, 90_000])
def test_a_total_size_damaged_into_the_oversize_range_takes_no_frame_in(value_size):
    """One flipped bit of a SEND's total_size making it 8 MiB (over Pulsar's 5 MiB limit, under 4x
    it: a credible oversize frame, skipped exactly): the 8 MiB after it went with it, every SEND
    in them lost (one oversize row: 10 of 120 SENDs kept with 8-byte values, where it runs past
    the end of the connection; 25 with 90 KB values, mid-stream, and a malformed row where the
    skip ended inside a frame). Now such a frame is gathered whole first, and one that holds
    frame starts is read again: one malformed row, every SEND after it decoded."""
    sends = []
    for i in range(120):
        md = pb.MessageMetadata(producer_name="prod-A", sequence_id=i, publish_time=1_700_000_000_000)
        sends.append(_send(md, f"value-{i}".encode().ljust(value_size, b"."), seq=i))
    damaged = bytearray(sends[10])
    damaged[1] ^= 0x80  # total_size + 8 MiB
    sends[10] = bytes(damaged)
    ctx = Context(max_frame_bytes=5 << 20)  # Pulsar's own limit ([protocols.pulsar])
    out = run([("c2s", F.PRODUCER)] + [("c2s", s) for s in sends], ctx=ctx, chunk=1448)
    assert sorted(m["sequence"] for m in out["messages"]) == [i for i in range(120) if i != 10]
    [bad] = [r for r in out["commands"] if r["decode_status"] != "ok"]
    assert bad["decode_status"] == "malformed" and "its size damaged" in bad["decode_error"]
    assert bad["size"] == len(sends[10])
    assert _accounted(out, "c2s") == len(F.PRODUCER) + sum(map(len, sends))


def _lat_key(r: dict) -> tuple:
    return (r["request_command"], r["correlation_id"], r["latency_us"])


@pytest.mark.parametrize(
    ("at", "own"),
    [(963, ("PARTITIONED_METADATA", 1)), (786, ("PING", None))],
    ids=["a request", "an answer"],
)
def test_a_damaged_frame_early_in_a_real_capture_costs_its_own_exchange_only(tmp_path, at, own):
    """pulsar_none.pcap with one bit of a frame's total_size flipped (+4096; a user trial's cases:
    the PARTITIONED_METADATA request id 1, the server's first PING). Read again, the frames it
    took in came after the other direction's that answer them or reuse their request ids (the
    client numbers LOOKUPs and PRODUCERs alike 1, 2, ...): 9 latencies lost and 8 paired with
    another command's answer, 12 delivered messages without their topic; the answer's case 14
    lost, 13 mispaired, 5 acks lost. Now the frames of the other direction wait and are read
    in time order with those read again: only the damaged frame's own exchange differs."""
    from brokerscope.streams import decode_files
    from tests.conftest import SAMPLE_DATA

    src = SAMPLE_DATA / "pulsar" / "pulsar_none.pcap"
    data = bytearray(src.read_bytes())
    data[at] ^= 0x10
    cap = tmp_path / "damaged.pcap"
    cap.write_bytes(bytes(data))
    want, got = decode_files([str(src)]), decode_files([str(cap)])
    lost = sorted(map(_lat_key, want["latencies"]))
    for r in map(_lat_key, got["latencies"]):
        lost.remove(r)
    assert [r[:2] for r in lost] == [own]
    strip = (
        "capture_id",
        "stream_offset",
        "details",
        "decode_status",
        "decode_error",
        "raw",
        "first_frame",
        "last_frame",
    )
    for t in ("messages", "acks"):
        norm = [
            sorted(repr({k: v for k, v in r.items() if k not in strip}) for r in rows)
            for rows in (want[t], got[t])
        ]
        assert norm[0] == norm[1], t
    assert len(got["commands"]) == len(want["commands"])
