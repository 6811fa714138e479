"""The producers and consumers a Pulsar client opens on a connection (PRODUCER, SUBSCRIBE), by
id: what the commands that name only an id (SEND, MESSAGE, ACK, FLOW, ...) refer to."""

from __future__ import annotations

from collections import OrderedDict

from .pairing import remember


class Clients:
    """Producers and consumers by id, the oldest forgotten past MAX_PENDING of each."""

    def __init__(self) -> None:
        self.producers: OrderedDict[int, dict] = OrderedDict()  # id -> topic, name
        self.consumers: OrderedDict[int, dict] = OrderedDict()  # id -> topic, subscription, name

    def add_producer(self, pid: int, topic, name) -> None:
        remember(self.producers, pid, {"topic": topic, "name": name})

    def add_consumer(self, cid: int, topic, subscription, name=None) -> None:
        info = {"topic": topic, "subscription": subscription}
        if name is not None:
            info["name"] = name
        remember(self.consumers, cid, info)

    def name_producer(self, pid: int | None, name) -> None:
        """The name the broker gave a producer (PRODUCER_SUCCESS)."""
        if pid in self.producers:
            self.producers[pid]["name"] = name

    def producer(self, pid: int) -> dict:
        return self.producers.get(pid, {})

    def consumer(self, cid: int) -> dict:
        return self.consumers.get(cid, {})

    def producer_topic(self, pid: int):
        return self.producers.get(pid, {}).get("topic")

    def consumer_topic(self, cid: int):
        return self.consumers.get(cid, {}).get("topic")

    def consumer_name(self, cid: int) -> str:
        """The consumer column: the consumer's subscription, else its id."""
        c = self.consumers.get(cid)
        if c and c.get("subscription"):
            return c["subscription"]
        return str(cid)
