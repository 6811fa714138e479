"""TubeMQ's journeys identity rule (docs/protocols/tubemq.md "Journeys"): the run's TubeMQ rows
as journey steps, which brokerscope.journeys turns into rows.

- a message is (topic, partition, message id): the broker's messageId, which the
  sendMessageP2B response gives the producer (`acks` `tubemq_produce`) and every delivery of the
  message carries (`getMessagesC2B` responses' TransferedMessage);
- a produce row (one message per sendMessageP2B request) takes its message id, offset
  (appendOffset) and acknowledgement from the successful response of the same connection and
  serialNo (correlation_id) that followed it; a request without one has no journey;
- the consumer is the consumer group (`groupName`);
- committed: the group's first commit for the partition at an offset beyond the message's
  (`acks` `tubemq_commit`: a consumerCommitC2B response, or a getMessagesC2B confirming the
  previous pack; the offset is the next one to read), which needs the message's offset, known
  from its produce response only.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ...journeys import Steps

IDENTITY = ("topic", "partition", "message_id")


def steps(msgs: pa.Table, acks: pa.Table) -> Steps:
    """The journey steps of the TubeMQ rows `msgs` (messages) and `acks`."""
    ok = pc.fill_null(pc.equal(acks["error_code"], 0), True)
    on = ["conn_id", "correlation_id"]
    answers = acks.filter(
        pc.and_(pc.and_(pc.equal(acks["ack_type"], "tubemq_produce"), acks["message_id"].is_valid()), ok)
    )
    answers = answers.select([*on, "ts_ns", "message_id", "offset"]).rename_columns(
        [*on, "acked_ns", "message_id", "offset"]
    )
    produce = msgs.filter(pc.equal(msgs["direction"], "produce")).drop_columns(["message_id", "offset"])
    # the response after the request of its serialNo (a serialNo may come again on a connection)
    paired = produce.join(answers, on, join_type="inner")
    paired = paired.filter(pc.greater_equal(paired["acked_ns"], paired["ts_ns"]))
    first = paired.group_by(["conn_id", "correlation_id", "ts_ns"]).aggregate([("acked_ns", "min")])
    produced = paired.join(
        first.rename_columns(["conn_id", "correlation_id", "ts_ns", "acked_ns"]),
        ["conn_id", "correlation_id", "ts_ns", "acked_ns"],
        join_type="inner",
    )
    delivered = msgs.filter(pc.and_(pc.equal(msgs["direction"], "deliver"), msgs["message_id"].is_valid()))
    commits = acks.filter(pc.and_(pc.equal(acks["ack_type"], "tubemq_commit"), ok))
    commits = commits.select(["topic", "partition", "offset", "consumer", "ts_ns"])
    return Steps(IDENTITY, produced, delivered, commits=commits)
