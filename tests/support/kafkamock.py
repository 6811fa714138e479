"""librdkafka's mock cluster through confluent-kafka: the real Kafka client of the tests and
benchmarks that capture journeys and lag on loopback."""

from __future__ import annotations

import time


def mock_producer(client_id: str, linger_ms: int = 5) -> tuple[object, int]:
    """A producer that starts its own one-broker mock cluster: the producer and the broker's port."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "test.mock.num.brokers": 1,
            "client.id": client_id,
            "linger.ms": linger_ms,
            "enable.metrics.push": False,
        }
    )
    return p, next(iter(p.list_topics(timeout=10).brokers.values())).port


def read(consumer, n: int, timeout_s: float = 30) -> list:
    """The next `n` messages `consumer` polls (errors skipped); an AssertionError when fewer came
    within `timeout_s`."""
    got: list = []
    end = time.time() + timeout_s
    while len(got) < n and time.time() < end:
        m = consumer.poll(0.2)
        if m is not None and not m.error():
            got.append(m)
    assert len(got) == n, f"got {len(got)} of {n} messages"
    return got


def produce_batch(p, topic: str, batch: int, size: int, word: str, reports: list[tuple]) -> None:
    """Produce messages `batch * size` to `batch * size + size - 1` of `topic` (key `key-<n>`,
    value `<word> <n> ` four times, partition n % 2) and flush; each delivery report appends
    (partition, offset, key, value) to `reports`."""
    for n in range(batch * size, (batch + 1) * size):
        p.produce(
            topic,
            key=f"key-{n}".encode(),
            value=f"{word} {n} ".encode() * 4,
            partition=n % 2,
            on_delivery=lambda e, m: (
                reports.append((m.partition(), m.offset(), m.key(), m.value())) if e is None else None
            ),
        )
    assert p.flush(10) == 0
