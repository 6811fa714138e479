"""Iggy's journeys identity rule (docs/protocols/iggy.md "Journeys"): the run's Iggy rows as
journey steps, which brokerscope.journeys turns into rows.

- a message is (topic, partition, offset): a poll's deliveries carry their offsets, and a
  produce row its offset from the SEND_MESSAGES reply (the partition's base offset + the
  message's place in the batch); a produce row without one (no reply, or a reply without the
  confirmation) has no journey;
- acknowledged by the broker: that reply (`acks` `iggy_send` of the same connection,
  correlation id and partition);
- the consumer is who polled (`consumer:<id>` or `group:<id>`, messages.consumer);
- committed: the consumer's first stored offset (`acks` `iggy_offset`: STORE_CONSUMER_OFFSET
  answered with status 0, or an auto-commit poll) for the partition at or beyond the message's
  (Iggy stores the offset of the last message consumed).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ...journeys import Steps

IDENTITY = ("topic", "partition", "offset")


def steps(msgs: pa.Table, acks: pa.Table) -> Steps:
    """The journey steps of the Iggy rows `msgs` (messages) and `acks`."""
    placed = msgs.filter(msgs["offset"].is_valid())
    produced = placed.filter(pc.equal(placed["direction"], "produce"))
    delivered = placed.filter(pc.equal(placed["direction"], "deliver"))
    ok = pc.equal(acks["error_code"], 0)
    on = ["conn_id", "correlation_id", "partition"]
    sends = acks.filter(pc.and_(pc.equal(acks["ack_type"], "iggy_send"), ok))
    first = sends.group_by(on).aggregate([("ts_ns", "min")]).rename_columns([*on, "acked_ns"])
    produced = produced.join(first, on, join_type="left outer")
    commits = acks.filter(pc.and_(pc.equal(acks["ack_type"], "iggy_offset"), ok))
    commits = commits.select(["topic", "partition", "offset", "consumer", "ts_ns"])
    return Steps(IDENTITY, produced, delivered, commits=commits, inclusive=True)
