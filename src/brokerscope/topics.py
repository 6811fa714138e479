"""Topic names learned across connections, applied to rows that carry only a topic id.

Kafka's newer Fetch and Produce versions name topics by id; the Metadata responses that map ids
to names may be on another connection or in another capture of the set. Decoders emit the
mappings as side rows (`base.TOPIC_NAMES`); once the whole set is decoded, rows whose `topic` is
null and whose `topic_id` is known get the name, and Kafka rows named this way get their
`message_id` (`<topic>-<partition>@<offset>`) too. One Arrow implementation serves both writers:
the embedded writer applies it to staged files, delta-spark's writer through `mapInArrow`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc


def needs_topic_names(batch: pa.RecordBatch | pa.Table) -> bool:
    """True when some row names its topic only by id."""
    if "topic_id" not in batch.schema.names:
        return False
    return bool(
        pc.any(pc.and_(pc.is_null(batch.column("topic")), pc.is_valid(batch.column("topic_id")))).as_py()
    )


def resolve_topic_ids(t: pa.Table, names: dict[str, str]) -> pa.Table:
    """Name the topics of rows that carry only a topic id (and their Kafka message ids). Ids
    without a known name stay as they are (topic null, topic_id set)."""
    if not names or not needs_topic_names(t):
        return t
    ids = t.column("topic_id").to_pylist()
    topics = [
        tp if tp is not None or i is None else names.get(i)
        for tp, i in zip(t.column("topic").to_pylist(), ids)
    ]
    t = t.set_column(t.schema.get_field_index("topic"), "topic", pa.array(topics, pa.string()))
    if "message_id" in t.schema.names and "offset" in t.schema.names:
        mids = t.column("message_id").to_pylist()
        parts, offs = t.column("partition").to_pylist(), t.column("offset").to_pylist()
        protos = t.column("protocol").to_pylist()
        mids = [
            f"{tp}-{p}@{o}"
            if m is None and i is not None and tp is not None and o is not None and pr == "kafka"
            else m
            for m, i, tp, p, o, pr in zip(mids, ids, topics, parts, offs, protos)
        ]
        t = t.set_column(t.schema.get_field_index("message_id"), "message_id", pa.array(mids, pa.string()))
    return t


def name_topics_df(df, names: dict[str, str]):
    """The same naming on a Spark DataFrame (delta-spark's writer), batch by batch in the tasks."""
    names = dict(names)

    def named(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            yield from resolve_topic_ids(pa.Table.from_batches([b]), names).to_batches()

    return df.mapInArrow(named, df.schema)
