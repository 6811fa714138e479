"""What an API's requests and responses mean beyond their commands row, per API key.

The tables at the end, `REQUESTS` and `RESPONSES`, are keyed by `names.ApiKey`; the conversation
calls the handler of a decoded body's api, if there is one:

- a request handler `(conv, body, header, pending, first-byte time)` notes in the request's
  `Pending` what its response needs (produced messages, offsets committed or fetched, ...);
- a response handler `(conv, body, pending, correlation id, first-byte time, latency, extra)`
  appends the rows the response yields (messages delivered, acks, topic names) to `extra`.

A handler may return (status, error) for the frame's commands row (the first error in its
records); None leaves it ok. `conv` is the KafkaConversation: the handlers read its context,
resolve and learn topic ids through it, and the SASL ones switch its raw-token mode.
`decode_response` decodes a response body (with ApiVersions' answer in v0).
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from .. import base
from . import records as rec
from . import rows as R
from . import schema
from .names import ApiKey

if TYPE_CHECKING:
    from ..base import Row
    from .conversation import KafkaConversation, Pending
    from .schema import RequestHeader


# -- decoding -------------------------------------------------------------------------------------
def decode_response(frame: bytes, p: Pending, plan: schema.Plan):
    """(body, tagged header fields, None) or (None, None, DecodeError)."""
    if p.api_key == ApiKey.ApiVersions and p.version > 0 and frame[4:6] == b"\x00\x23":
        # ApiVersions error 35 (UNSUPPORTED_VERSION): brokers answer in v0 so that any client
        # can read the versions they do support. Clients read only the error code here, and
        # some servers (librdkafka's mock) send a body no version describes: keep it raw.
        try:
            body = schema.decode_body(schema.plan(ApiKey.ApiVersions, 0, "response"), frame, 4)
        except schema.DecodeError:
            body = {
                "ErrorCode": 35,
                "_undecoded": {"base64": base64.b64encode(frame[6:]).decode("ascii")},
            }
        body["_answered_in_v0"] = True
        return body, None, None
    try:
        _c, tagged, pos = schema.read_response_header(frame, p.api_key, plan.version)
        return schema.decode_body(plan, frame, pos), tagged, None
    except schema.DecodeError as e:
        # without its traceback: the traceback's frames reach _frames(), whose view of the
        # stream buffer would then stay exported (a reference cycle until the next garbage
        # collection) and the next append to the buffer would fail with BufferError
        return None, None, e.with_traceback(None)


# -- requests -------------------------------------------------------------------------------------
def produce_request(conv: KafkaConversation, body, h: RequestHeader, pend: Pending, ts0: int):
    """The produced messages, held in the pending request until the response gives their offsets."""
    status, err = base.OK, None
    parts = [
        (conv.resolve_topic(t.get("Name"), t.get("TopicId")), part)
        for t in body.get("TopicData") or ()
        for part in t.get("PartitionData") or ()
        if part.get("Records") is not None
    ]
    sets = rec.read_record_sets(
        [part["Records"] for _t, part in parts],
        conv.ctx.max_decompressed_bytes,
        sums=conv.ctx.payload.checksums_kept,
    )
    picks: list[R.Pick] = []
    for (tname, part), rs in zip(parts, sets):
        pidx = part.get("Index")
        part["Records"] = R.records_summary(rs)
        if rs.error and status == base.OK:
            status, err = rs.status, f"{tname}-{pidx}: {rs.error}"
        if rs.partial_tail and status == base.OK:
            status, err = base.TRUNCATED, f"{tname}-{pidx}: incomplete batch in a produce request"
        for b in rs.batches:
            if b.status != base.OK and status == base.OK:
                status, err = b.status, f"{tname}-{pidx} batch at {b.base_offset}: {b.error}"
            pend.held_bytes += b.payload_bytes
            pend.produce.append((tname, pidx, b))
            picks.append((b, tname, pidx, None, None))
    pend.produced = R.message_blocks(
        picks, conv.ctx.payload, "produce", h.correlation_id, ts0, False, pend.frames
    )
    return status, err


def fetch_request(conv: KafkaConversation, body, h: RequestHeader, pend: Pending, ts0: int) -> None:
    """Remember the offsets asked for and the isolation level."""
    pend.read_committed = body.get("IsolationLevel") == 1
    for t in body.get("Topics") or ():
        tk = t.get("Topic") or t.get("TopicId")
        for part in t.get("Partitions") or ():
            pend.fetch_offsets[(tk, part.get("Partition"))] = part.get("FetchOffset")


def commit_request(conv: KafkaConversation, body, h: RequestHeader, pend: Pending, ts0: int) -> None:
    """OffsetCommit, TxnOffsetCommit: the offsets committed, for their acks."""
    pend.group = body.get("GroupId")
    pend.producer_id = body.get("ProducerId")
    for t in body.get("Topics") or ():
        tname = conv.resolve_topic(t.get("Name"), t.get("TopicId"))
        for part in t.get("Partitions") or ():
            pend.commits.append((tname, part.get("PartitionIndex"), part.get("CommittedOffset")))


def share_ack_request(conv: KafkaConversation, body, h: RequestHeader, pend: Pending, ts0: int) -> None:
    """ShareFetch, ShareAcknowledge (KIP-932 share groups): the acknowledgement batches."""
    pend.group = body.get("GroupId")
    for t in body.get("Topics") or ():
        tid = t.get("TopicId")
        for part in t.get("Partitions") or ():
            for a in part.get("AcknowledgementBatches") or ():
                pend.share_acks.append(
                    (
                        conv.resolve_topic(None, tid),
                        tid,
                        part.get("PartitionIndex"),
                        a.get("FirstOffset"),
                        a.get("LastOffset"),
                        a.get("AcknowledgeTypes") or [],
                    )
                )


def end_txn_request(conv: KafkaConversation, body, h: RequestHeader, pend: Pending, ts0: int) -> None:
    pend.txn = {
        "transactional_id": body.get("TransactionalId"),
        "producer_id": body.get("ProducerId"),
        "producer_epoch": body.get("ProducerEpoch"),
        "committed": body.get("Committed"),
    }


def sasl_handshake_request(conv: KafkaConversation, body, h: RequestHeader, pend: Pending, ts0: int) -> None:
    if h.api_version == 0:  # raw SASL tokens follow a successful v0 handshake
        pend.txn = {"sasl_v0": True}


# -- responses ------------------------------------------------------------------------------------
def metadata_response(conv: KafkaConversation, body, p: Pending, corr, ts0, latency_us, extra) -> None:
    conv.learn_topic_ids(body, extra)


def produce_response(conv: KafkaConversation, body, p: Pending, corr, ts0, latency_us, extra) -> None:
    """An ack per partition, and the produced messages with their offsets: base offset +
    position within the request."""
    acked: dict[tuple, tuple[int, int]] = {}
    for t in body.get("Responses") or ():
        tname = conv.resolve_topic(t.get("Name"), t.get("TopicId"))
        for part in t.get("PartitionResponses") or ():
            pidx = part.get("Index")
            ec = part.get("ErrorCode")
            bo = part.get("BaseOffset")
            acked[(tname, pidx)] = (ec, bo)
            pid = seq = None
            for tt, pp, b in p.produce:
                if tt == tname and pp == pidx and b.magic >= 2:
                    pid, seq = b.producer_id, b.base_sequence
                    break
            extra.append(R.produce_ack(ts0, tname, pidx, part, ec, bo, pid, seq, corr, latency_us))
    pos_in_part: dict[tuple, int] = {}
    for _tbl, blk in p.produced:
        R.with_offsets(blk, acked, pos_in_part)
        extra.append(("messages", blk))


def fetch_response(conv: KafkaConversation, body, p: Pending, corr, ts0, latency_us, extra):
    """The records delivered (from the offset asked for; under read_committed, without those of
    aborted transactions) and the transaction markers among them."""
    status, err = base.OK, None
    parts = []
    for t in body.get("Responses") or ():
        tk = t.get("Topic") or t.get("TopicId")
        tname = conv.resolve_topic(t.get("Topic"), t.get("TopicId"))
        for part in t.get("Partitions") or ():
            raw = part.get("Records")
            if raw:
                parts.append((t, tk, tname, part))
            elif raw is not None:
                part["Records"] = R.records_summary(rec.RecordSet([]))
    sets = rec.read_record_sets(
        [part["Records"] for *_x, part in parts],
        conv.ctx.max_decompressed_bytes,
        sums=conv.ctx.payload.checksums_kept,
    )
    picks: list[R.Pick] = []
    for (t, tk, tname, part), rs in zip(parts, sets):
        pidx = part.get("PartitionIndex")
        part["Records"] = R.records_summary(rs)
        if status == base.OK:
            status, err = R.first_error(rs, f"{tname}-{pidx}")
        min_off = p.fetch_offsets.get((tk, pidx))
        # read_committed: records of aborted transactions are dropped by the consumer
        # (AbortedTransactions lists producer id and first offset; the ABORT marker ends it)
        aborted = {a.get("ProducerId"): a.get("FirstOffset") for a in part.get("AbortedTransactions") or ()}
        aborting: set = set()
        for b in rs.batches:
            if p.read_committed and b.transactional and b.producer_id in aborted:
                if b.control:
                    aborting.discard(b.producer_id)
                    aborted.pop(b.producer_id, None)
                elif b.base_offset >= aborted[b.producer_id]:
                    aborting.add(b.producer_id)
            if b.control:
                extra.append(R.txn_marker_ack(ts0, tname, t.get("TopicId"), pidx, b, corr))
                continue
            if b.producer_id in aborting:
                continue
            picks.append((b, tname, pidx, t.get("TopicId"), min_off))
    extra.extend(R.message_blocks(picks, conv.ctx.payload, "deliver", corr, ts0, True, p.frames))
    return status, err


def share_fetch_response(conv: KafkaConversation, body, p: Pending, corr, ts0, latency_us, extra):
    """ShareFetch (KIP-932): the records delivered, then the acknowledgements the request sent."""
    status = share_deliveries(conv, body, p, corr, ts0, extra)
    share_ack_response(conv, body, p, corr, ts0, latency_us, extra)
    return status


def share_deliveries(conv: KafkaConversation, body, p: Pending, corr, ts0, extra: list[Row]):
    """The records of a batch that lie in the partition's AcquiredRecords ranges are what the
    share consumer receives: `deliver` rows with the group as consumer and the range's delivery
    count in details (above 1: a redelivery)."""
    status, err = base.OK, None
    cap = conv.ctx.max_decompressed_bytes
    pol = conv.ctx.payload
    for t in body.get("Responses") or ():
        tid = t.get("TopicId")
        tname = conv.resolve_topic(None, tid)
        for part in t.get("Partitions") or ():
            pidx = part.get("PartitionIndex")
            raw = part.get("Records")
            if not raw:
                continue
            rs = rec.read_record_set(raw, cap, sums=pol.checksums_kept)
            part["Records"] = R.records_summary(rs)
            if status == base.OK:
                status, err = R.first_error(rs, f"{tname or tid}-{pidx}")
            acquired = [
                (a.get("FirstOffset"), a.get("LastOffset"), a.get("DeliveryCount"))
                for a in part.get("AcquiredRecords") or ()
            ]
            for b in rs.batches:
                for tab, blk in R.message_rows(
                    b, pol, "deliver", tname, pidx, corr, ts0, True, topic_id=tid, frames=p.frames
                ):
                    # records returned in the batch but not acquired by this consumer are not its
                    counts = [
                        next((n for lo, hi, n in acquired if lo <= off <= hi), None)
                        for off in blk.column("offset")
                    ]
                    mine = blk.take([i for i, n in enumerate(counts) if n is not None])
                    mine.const["consumer"] = p.group
                    mine.cols["details"] = [
                        f'{d[:-1]},"delivery_count":{n}}}'
                        for d, n in zip(mine.column("details"), (n for n in counts if n is not None))
                    ]
                    extra.append((tab, mine))
    return status, err


def share_ack_response(conv: KafkaConversation, body, p: Pending, corr, ts0, latency_us, extra) -> None:
    """ShareAcknowledge, and the acknowledgements in a ShareFetch: their acks (rows.share_acks)."""
    if not p.share_acks:
        return
    errs: dict[tuple, int | None] = {}
    for t in body.get("Responses") or ():
        for part in t.get("Partitions") or ():
            code = part.get("AcknowledgeErrorCode", part.get("ErrorCode"))
            errs[(t.get("TopicId"), part.get("PartitionIndex"))] = code
    extra.extend(R.share_acks(p, errs, corr, ts0, latency_us))


def commit_response(conv: KafkaConversation, body, p: Pending, corr, ts0, latency_us, extra) -> None:
    errs: dict[tuple, int] = {}
    for t in body.get("Topics") or ():
        tname = conv.resolve_topic(t.get("Name"), t.get("TopicId"))
        for part in t.get("Partitions") or ():
            errs[(tname, part.get("PartitionIndex"))] = part.get("ErrorCode")
    extra.extend(R.offset_commit_acks(p, errs, corr, ts0, latency_us))


def end_txn_response(conv: KafkaConversation, body, p: Pending, corr, ts0, latency_us, extra) -> None:
    if p.txn:
        extra.append(R.end_txn_ack(p.txn, body.get("ErrorCode"), corr, ts0, latency_us))


def sasl_handshake_response(conv: KafkaConversation, body, p: Pending, corr, ts0, latency_us, extra) -> None:
    if p.version == 0 and body.get("ErrorCode") == 0:
        conv.sasl_raw = True


def sasl_authenticate_response(
    conv: KafkaConversation, body, p: Pending, corr, ts0, latency_us, extra
) -> None:
    if body.get("ErrorCode") == 0:
        conv.sasl_raw = False


REQUESTS = {
    ApiKey.Produce: produce_request,
    ApiKey.Fetch: fetch_request,
    ApiKey.OffsetCommit: commit_request,
    ApiKey.TxnOffsetCommit: commit_request,
    ApiKey.ShareFetch: share_ack_request,
    ApiKey.ShareAcknowledge: share_ack_request,
    ApiKey.EndTxn: end_txn_request,
    ApiKey.SaslHandshake: sasl_handshake_request,
}
RESPONSES = {
    ApiKey.Metadata: metadata_response,
    ApiKey.Produce: produce_response,
    ApiKey.Fetch: fetch_response,
    ApiKey.OffsetCommit: commit_response,
    ApiKey.TxnOffsetCommit: commit_response,
    ApiKey.ShareFetch: share_fetch_response,
    ApiKey.ShareAcknowledge: share_ack_response,
    ApiKey.EndTxn: end_txn_response,
    ApiKey.SaslHandshake: sasl_handshake_response,
    ApiKey.SaslAuthenticate: sasl_authenticate_response,
}
