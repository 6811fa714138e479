"""Pulsar's journeys identity rule (docs/protocols/pulsar.md "Journeys"): the run's Pulsar rows
as journey steps, which brokerscope.journeys turns into rows.

- a message is (topic, message id): `ledger:entry:batch_index` as the SEND_RECEIPT named it for
  its produce row and as the MESSAGE command names it for a delivery (a partitioned topic's
  partitions are topics of their own, `...-partition-N`);
- acknowledged by the broker: the SEND_RECEIPT (`acks` `pulsar_receipt`) of the same connection,
  topic and message id; a produce row without a message id (no receipt, a SEND_ERROR) has none;
- the consumer is the subscription (`messages.consumer` of the deliveries, `acks.consumer`);
- committed: the subscription's first ACK of the message, individual or cumulative (`acks`
  `pulsar_ack`, `pulsar_ack_cumulative`: one row per message acknowledged);
- a resend: messages of one topic with the same producer name and sequence id (their
  MessageMetadata, which a client's resend repeats, as the broker's deduplication reads them) and
  the same key and value, under two message ids, are one message the broker stored twice; the
  lowest id (ledger, entry, batch index) is the original, the others are `duplicate`; the SENDs of
  that identity, answered or not, are its produce attempts, and an original whose receipt was lost
  was produced by its unanswered SEND.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ...journeys import Steps

IDENTITY = ("topic", "message_id")
RECEIPT = "pulsar_receipt"
CONSUMER_ACKS = ("pulsar_ack", "pulsar_ack_cumulative")
RETRY = ("topic", "producer_name", "sequence")  # the messages columns a resend repeats (metadata)
RANK = ("ledger", "entry", "batch_index")  # the order the broker stored messages in
# message ids as messages.message_id writes them: ledger:entry:batch_index
_MESSAGE_ID = r"^(?P<ledger>-?\d+):(?P<entry>-?\d+):(?P<batch_index>-?\d+)$"


def _ranked(t: pa.Table) -> pa.Table:
    """`t` with its message ids' ledger, entry and batch index as int64 columns (null: another
    form)."""
    parts = pc.extract_regex(pc.fill_null(t["message_id"], ""), _MESSAGE_ID)
    for name in RANK:
        t = t.append_column(name, pc.cast(pc.struct_field(parts, name), pa.int64()))
    return t


def steps(msgs: pa.Table, acks: pa.Table) -> Steps:
    """The journey steps of the Pulsar rows `msgs` (messages) and `acks`."""
    named = _ranked(msgs.filter(msgs["message_id"].is_valid()))
    produced = named.filter(pc.equal(named["direction"], "produce"))
    delivered = named.filter(pc.equal(named["direction"], "deliver"))
    unanswered = msgs.filter(pc.and_(msgs["message_id"].is_null(), pc.equal(msgs["direction"], "produce")))
    on = ["conn_id", "topic", "message_id"]
    receipts = acks.filter(pc.and_(pc.equal(acks["ack_type"], RECEIPT), acks["message_id"].is_valid()))
    first = receipts.group_by(on).aggregate([("ts_ns", "min")]).rename_columns([*on, "acked_ns"])
    produced = produced.join(first, on, join_type="left outer")
    acked = acks.filter(
        pc.and_(
            pc.is_in(acks["ack_type"], pa.array(CONSUMER_ACKS)),
            pc.and_(acks["message_id"].is_valid(), acks["consumer"].is_valid()),
        )
    ).select([*IDENTITY, "consumer", "ts_ns"])
    return Steps(IDENTITY, produced, delivered, acked=acked, retry=RETRY, rank=RANK, attempts=unanswered)
