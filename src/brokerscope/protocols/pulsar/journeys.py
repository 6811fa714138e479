"""Pulsar's journeys identity rule (docs/protocols/pulsar.md "Journeys"): the run's Pulsar rows
as journey steps, which brokerscope.journeys turns into rows.

- a message is (topic, message id): `ledger:entry:batch_index` as the SEND_RECEIPT named it for
  its produce row and as the MESSAGE command names it for a delivery (a partitioned topic's
  partitions are topics of their own, `...-partition-N`);
- acknowledged by the broker: the SEND_RECEIPT (`acks` `pulsar_receipt`) of the same connection,
  topic and message id; a produce row without a message id (no receipt, a SEND_ERROR) has none;
- the consumer is the subscription (`messages.consumer` of the deliveries, `acks.consumer`);
- committed: the subscription's first ACK of the message, individual or cumulative (`acks`
  `pulsar_ack`, `pulsar_ack_cumulative`: one row per message acknowledged).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ...journeys import Steps

IDENTITY = ("topic", "message_id")
RECEIPT = "pulsar_receipt"
CONSUMER_ACKS = ("pulsar_ack", "pulsar_ack_cumulative")


def steps(msgs: pa.Table, acks: pa.Table) -> Steps:
    """The journey steps of the Pulsar rows `msgs` (messages) and `acks`."""
    named = msgs.filter(msgs["message_id"].is_valid())
    produced = named.filter(pc.equal(named["direction"], "produce"))
    delivered = named.filter(pc.equal(named["direction"], "deliver"))
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
    return Steps(IDENTITY, produced, delivered, acked=acked)
