"""What TubeMQ's message bodies and metadata strings hold: the checksum, the attribute prefix of a
message's data, attributes as headers, msgTime, and the broker, topic and subscription strings of
the master's responses. Pure functions of their inputs."""

from __future__ import annotations

import datetime as _dt
import zlib

from ... import native
from ..base import text

_rpc = native.load(__package__, "_rpc")  # compiled from _rpc.c

FLAG_HAS_ATTRIBUTE = 0x01  # TransferedMessage / SendMessageRequestP2B flag bit: data starts with attributes


def tube_checksum(data: bytes) -> int:
    """TubeMQ's message checksum: CRC32 (zlib polynomial) with the sign bit cleared."""
    return zlib.crc32(data) & 0x7FFFFFFF


def checksum_ok(expected: int | None, data: bytes) -> bool | None:
    """None when no checksum was sent (TubeMQ's Java producer always sends -1), else whether it
    equals TubeMQ's checksum (CheckSum.crc32: CRC32 & 0x7FFFFFFF, the only form TubeMQ computes
    and the only one its consumer accepts)."""
    if expected is None or expected == -1:
        return None
    return expected == tube_checksum(data)


def split_payload(data: bytes, flag: int | None) -> tuple[str | None, bytes, str | None]:
    """(attribute text, payload, error) of an attribute-prefixed message body.

    Layout when flag bit 0 is set: int32 attribute length (big-endian) | attribute (UTF-8) | payload.
    """
    if flag is None or not flag & FLAG_HAS_ATTRIBUTE:
        return None, data, None
    if len(data) < 4:
        return None, data, f"flag says attributes follow but data is only {len(data)} bytes"
    n = int.from_bytes(data[:4], "big", signed=True)
    if n < 0 or n > len(data) - 4:
        return None, data, f"attribute length {n} outside 0..{len(data) - 4}"
    attr = data[4 : 4 + n].decode("utf-8", errors="backslashreplace")
    return attr, data[4 + n :], None


def parse_attributes(attr: str | None) -> list[dict]:
    """TubeMQ attributes `k1=v1,k2=v2` as header dicts (keys may repeat)."""
    if not attr:
        return []
    out = []
    for item in attr.split(","):
        if not item:
            continue
        k, sep, v = item.partition("=")
        out.append({"key": k, "value": v.encode("utf-8") if sep else b""})
    return out


# message_parts(data, flag) -> (attribute text, payload, error, headers): split_payload and
# parse_attributes of a message's data in one compiled step (_rpc.message), which the tests and
# the tubemq_rpc fuzz target hold to those two
message_parts = _rpc.message


def parse_msg_time(s: str | bytes | None) -> int | None:
    """TubeMQ msgTime `yyyyMMddHHmm` (producer's clock, taken as UTC) -> ns since the epoch
    (the last texts read are remembered: a producer's messages of one minute share theirs)."""
    if not s:
        return None
    s = text(s)
    got = MSG_TIMES.get(s, MSG_TIMES)
    if got is not MSG_TIMES:
        return got
    if len(MSG_TIMES) >= 1024:
        MSG_TIMES.clear()
    got = MSG_TIMES[s] = _parse_msg_time(s)
    return got


MSG_TIMES: dict = {}  # parse_msg_time's memo; _rpc.exchanges looks in it too (conversation.py)


def _parse_msg_time(s: str) -> int | None:
    for fmt in ("%Y%m%d%H%M", "%Y%m%d%H%M%S"):
        try:
            t = _dt.datetime.strptime(s.strip(), fmt).replace(tzinfo=_dt.UTC)
            return int(t.timestamp()) * 1_000_000_000
        except ValueError:
            continue
    return None


def attr_value(headers: list[dict], key: str) -> str | None:
    for h in headers:
        if h["key"] == key:
            return h["value"].decode("utf-8", errors="backslashreplace")
    return None


def parse_broker_info(s: str | bytes) -> dict:
    """`brokerId:host:port` -> dict (unparsable parts kept as text)."""
    s = text(s)
    parts = s.split(":")
    out: dict = {"info": s}
    if parts and parts[0].lstrip("-").isdigit():
        out["broker_id"] = int(parts[0])
    if len(parts) > 1:
        out["host"] = parts[1]
    if len(parts) > 2 and parts[2].isdigit():
        out["port"] = int(parts[2])
    return out


def parse_topic_info(s: str | bytes, brokers: dict[int, dict] | None = None) -> dict:
    """A producer heartbeat's topicInfos entry -> dict.

    Layout (TubeMQ's DataConverterUtil.convertTopicInfo, separators from TokenConstants):
    `topic#brokerId:partitionNum:storeNum[,brokerId:partitionNum:storeNum...][#maxMsgSizeInB]`.
    `brokers` (broker id -> parse_broker_info of the same response's brokerInfos) adds host/port.
    """
    s = text(s)
    out: dict = {"info": s}
    seg = s.strip().split("#")
    if len(seg) < 2:
        return out
    out["topic"] = seg[0]
    parts: list[dict] = []
    for item in seg[1].split(","):
        f = item.split(":")
        if len(f) < 3 or not all(x.strip().lstrip("-").isdigit() for x in f[:3]):
            if item:
                parts.append({"info": item})
            continue
        bid, num, stores = (int(x) for x in f[:3])
        p: dict = {"broker_id": bid, "partitions": num, "stores": stores}
        b = (brokers or {}).get(bid)
        if b is not None:
            p.update({k: b[k] for k in ("host", "port") if k in b})
        parts.append(p)
    out["brokers"] = parts
    out["partition_count"] = sum(p.get("partitions", 0) * p.get("stores", 1) for p in parts)
    if len(seg) > 2 and seg[2].strip().isdigit():
        out["max_msg_size"] = int(seg[2])
    return out


def parse_subscribe_info(s: str | bytes) -> dict:
    """`consumerId@group#brokerId:host:port#topic:partitionId` (TubeMQ writes `#` or `-` between
    the three parts) -> dict."""
    s = text(s)
    out: dict = {"info": s}
    sep = "#" if "#" in s else "-"
    parts = s.rsplit(sep, 2)
    if len(parts) == 3:
        consumer, broker, tp = parts
        cid, _, group = consumer.partition("@")
        out["consumer_id"] = cid
        out["group"] = group
        out["broker"] = parse_broker_info(broker)
        topic, _, part = tp.rpartition(":")
        out["topic"] = topic
        if part.lstrip("-").isdigit():
            out["partition"] = int(part)
    return out
