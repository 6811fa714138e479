"""Byte-literal Pulsar frames for the golden tests (made once with protobuf; every field annotated),
and `run`, the Pulsar form of tests.support.drive."""

from __future__ import annotations

from brokerscope.protocols.base import ConnInfo, Context
from brokerscope.protocols.pulsar import PROTOCOL
from tests.support.drive import Drive

# CONNECT client_version=Pulsar-CPP-v3.8 auth_method_name=token auth_data=s3cr3t-t0ken protocol_version=20
CONNECT = bytes.fromhex(
    "00000030"  # total size
    "0000002c"  # command size
    "080212280a0f50756c7361722d4350502d76332e381a0c7333637233742d74306b656e20142a05746f6b656e"  # BaseCommand CONNECT
)

# CONNECTED server_version=sim protocol_version=20
CONNECTED = bytes.fromhex(
    "0000000f"  # total size
    "0000000b"  # command size
    "08031a070a0373696d1014"  # BaseCommand CONNECTED
)

# PRODUCER topic=persistent://public/default/t producer_id=1 request_id=1
PRODUCER = bytes.fromhex(
    "0000002b"  # total size
    "00000027"  # command size
    "08052a230a1d70657273697374656e743a2f2f7075626c69632f64656661756c742f7410011801"  # BaseCommand PRODUCER
)

# PRODUCER_SUCCESS request_id=1 producer_name=p1
PRODUCER_SUCCESS = bytes.fromhex(
    "0000000f"  # total size
    "0000000b"  # command size
    "08118a0106080112027031"  # BaseCommand PRODUCER_SUCCESS
)

# SUBSCRIBE topic=persistent://public/default/t subscription=s1 Exclusive consumer_id=2 request_id=2
SUBSCRIBE = bytes.fromhex(
    "00000031"  # total size
    "0000002d"  # command size
    "080422290a1d70657273697374656e743a2f2f7075626c69632f64656661756c742f7412027331180020022802"  # BaseCommand SUBSCRIBE
)

# SUCCESS request_id=2
SUCCESS_2 = bytes.fromhex(
    "0000000a"  # total size
    "00000006"  # command size
    "080d6a020802"  # BaseCommand SUCCESS
)

# PING (empty body)
PING = bytes.fromhex(
    "00000009"  # total size
    "00000005"  # command size
    "0812920100"  # BaseCommand PING
)

# PONG (empty body)
PONG = bytes.fromhex(
    "00000009"  # total size
    "00000005"  # command size
    "08139a0100"  # BaseCommand PONG
)

# SEND producer_id=1 sequence_id=7; metadata producer p1, seq 7, key k1, property h=v; payload 'hello pulsar'
SEND_7 = bytes.fromhex(
    "00000042"  # total size
    "00000008"  # command size
    "0806320408011007"  # BaseCommand SEND
    "0e01"  # magic 0x0e01: checksum
    "771a5599"  # crc32c of what follows
    "00000020"  # metadata size
    "0a027031100718fbd095ffbc3122060a016812017632026b3160e4d095ffbc31"  # MessageMetadata
    "68656c6c6f2070756c736172"  # payload
)

# the same SEND with a wrong checksum
SEND_7_BADCRC = bytes.fromhex(
    "00000042"  # total size
    "00000008"  # command size
    "0806320408011007"  # BaseCommand SEND
    "0e01"  # magic 0x0e01: checksum
    "a9b7eb76"  # crc32c of what follows (WRONG)
    "00000020"  # metadata size
    "0a027031100718fbd095ffbc3122060a016812017632026b3160e4d095ffbc31"  # MessageMetadata
    "68656c6c6f2070756c736172"  # payload
)

# SEND_RECEIPT producer_id=1 sequence_id=7 message_id 5:9
RECEIPT_7 = bytes.fromhex(
    "00000012"  # total size
    "0000000e"  # command size
    "08073a0a080110071a0408051009"  # BaseCommand SEND_RECEIPT
)

# uncompressed batch payload: [u32 size][SingleMessageMetadata{i=0, key a, payload_size 5, seq 8}]'first' [u32 size][SingleMessageMetadata{i=1, payload_size 6, seq 9}]'second'
BATCH_RAW = bytes.fromhex(
    "0000000f0a060a01691201301201611805400866697273740000000c0a060a0169120131180640097365636f6e64"
)

# SEND producer_id=1 sequence_id=8 num_messages=2 highest_sequence_id=9; ZLIB batch of 2 (zlib.compress(BATCH_RAW))
SEND_BATCH = bytes.fromhex(
    "00000061"  # total size
    "0000000c"  # command size
    "080632080801100818023009"  # BaseCommand SEND
    "0e01"  # magic 0x0e01: checksum
    "8c48f336"  # crc32c of what follows
    "00000016"  # metadata size
    "0a027031100818c8d195ffbc314002482e5802c00109"  # MessageMetadata
    "789c636060e0e762e362cc14623410624c946075e048cb2c2a2e616060e0818a1b4ab0397016a726e7e7a500008792078f"  # payload
)

# SEND_RECEIPT producer_id=1 sequence_id=8 highest_sequence_id=9 message_id 5:10
RECEIPT_8 = bytes.fromhex(
    "00000014"  # total size
    "00000010"  # command size
    "08073a0c080110081a040805100a2009"  # BaseCommand SEND_RECEIPT
)

# MESSAGE consumer_id=2 message_id 5:10 with broker entry metadata (broker_timestamp=1700000000300, index=41); LZ4 raw block of BATCH_RAW
MESSAGE_BEM = bytes.fromhex(
    "00000068"  # total size
    "0000000c"  # command size
    "08094a08080212040805100a"  # BaseCommand MESSAGE
    "0e02"  # magic 0x0e02: broker entry metadata
    "00000009"  # broker entry metadata size
    "08acd295ffbc311029"  # BrokerEntryMetadata
    "0e01"  # magic 0x0e01: checksum
    "2faa40cd"  # crc32c of what follows
    "00000013"  # metadata size
    "0a027031100818c8d195ffbc314001482e5802"  # MessageMetadata
    "f30d0000000f0a060a01691201301201611805400866697273740000000c1800b031180640097365636f6e64"  # payload
)

# SEND producer_id=1 sequence_id=10 is_chunk; chunk 0 of 2 of uuid p1-10: b'chunked-mes'
SEND_CHUNK0 = bytes.fromhex(
    "00000041"  # total size
    "0000000a"  # command size
    "080632060801100a3801"  # BaseCommand SEND
    "0e01"  # magic 0x0e01: checksum
    "3d4383d9"  # crc32c of what follows
    "0000001e"  # metadata size
    "0a027031100a1890d395ffbc31d2010570312d3130d80102e00115e80100"  # MessageMetadata
    "6368756e6b65642d6d6573"  # payload
)

# SEND producer_id=1 sequence_id=10 is_chunk; chunk 1 of 2 of uuid p1-10: b'sage-body!'
SEND_CHUNK1 = bytes.fromhex(
    "00000040"  # total size
    "0000000a"  # command size
    "080632060801100a3801"  # BaseCommand SEND
    "0e01"  # magic 0x0e01: checksum
    "8b500b16"  # crc32c of what follows
    "0000001e"  # metadata size
    "0a027031100a1890d395ffbc31d2010570312d3130d80102e00115e80101"  # MessageMetadata
    "736167652d626f647921"  # payload
)

# SEND_RECEIPT producer_id=1 sequence_id=10 message_id 5:11 (chunk 0)
RECEIPT_10_0 = bytes.fromhex(
    "00000012"  # total size
    "0000000e"  # command size
    "08073a0a0801100a1a040805100b"  # BaseCommand SEND_RECEIPT
)

# SEND_RECEIPT producer_id=1 sequence_id=10 message_id 5:12 (chunk 1)
RECEIPT_10_1 = bytes.fromhex(
    "00000012"  # total size
    "0000000e"  # command size
    "08073a0a0801100a1a040805100c"  # BaseCommand SEND_RECEIPT
)

# ACK consumer_id=2 Individual message_id 5:10 batch_index 1
ACK_IND = bytes.fromhex(
    "00000014"  # total size
    "00000010"  # command size
    "080a520c080210001a060805100a2001"  # BaseCommand ACK
)

# ACK consumer_id=2 Cumulative message_id 5:10 request_id=3
ACK_CUM = bytes.fromhex(
    "00000014"  # total size
    "00000010"  # command size
    "080a520c080210011a040805100a4003"  # BaseCommand ACK
)

# ACK_RESPONSE consumer_id=2 request_id=3
ACK_RESPONSE_3 = bytes.fromhex(
    "0000000d"  # total size
    "00000009"  # command size
    "0826b2020408023003"  # BaseCommand ACK_RESPONSE
)

# CONSUMER_STATS request_id=4 consumer_id=2
CONSUMER_STATS_4 = bytes.fromhex(
    "0000000d"  # total size
    "00000009"  # command size
    "0819"  # BaseCommand.type = 25 CONSUMER_STATS
    "ca0104"  # field 25 consumer_stats, 4 bytes
    "0804"  # request_id = 4
    "2002"  # consumer_id (field 4) = 2
)

# CONSUMER_STATS_RESPONSE request_id=4 consumer_name=c2 available_permits=1000 unacked_messages=3 msg_backlog=7
CONSUMER_STATS_RESPONSE_4 = bytes.fromhex(
    "00000016"  # total size
    "00000012"  # command size
    "081a"  # BaseCommand.type = 26 CONSUMER_STATS_RESPONSE
    "d2010d"  # field 26 consumer_stats_response, 13 bytes
    "0804"  # request_id = 4
    "3a026332"  # consumer_name (field 7) = "c2"
    "40e807"  # available_permits (field 8) = 1000
    "4803"  # unacked_messages (field 9) = 3
    "7807"  # msg_backlog (field 15) = 7
)

# CONSUMER_STATS request_id=5 consumer_id=9 (a consumer never subscribed on the connection)
CONSUMER_STATS_5 = bytes.fromhex(
    "0000000d"  # total size
    "00000009"  # command size
    "0819ca010408052009"  # BaseCommand CONSUMER_STATS
)

# CONSUMER_STATS_RESPONSE request_id=5 error_code=ConsumerNotFound (13) error_message="no consumer"
CONSUMER_STATS_ERROR_5 = bytes.fromhex(
    "0000001a"  # total size
    "00000016"  # command size
    "081ad20111"  # BaseCommand CONSUMER_STATS_RESPONSE, 17 bytes
    "0805"  # request_id = 5
    "100d"  # error_code (field 2) = 13 ConsumerNotFound
    "1a0b6e6f20636f6e73756d6572"  # error_message (field 3) = "no consumer"
)


CONN = ConnInfo("c1", "10.0.0.1", 40000, "10.0.0.2", 6650)
T0 = 1_700_000_000_000_000_000


def run(
    feeds, ctx: Context | None = None, close: bool = True, chunk: int | None = None
) -> dict[str, list[dict]]:
    """Feed (direction, bytes) pairs 1 ms apart (optionally in `chunk`-byte pieces); rows by table,
    checked against the table schemas (tests.support.drive)."""
    d = Drive(PROTOCOL.conversation(CONN, ctx or Context()))
    ts = T0
    for direction, data in feeds:
        ts += 1_000_000
        if direction == "gap":
            d.gap(data[0], data[1], ts=ts)
        else:
            d.feed(direction, data, chunk=chunk, ts=ts)
    if close:
        d.close()
    return d.tables()
