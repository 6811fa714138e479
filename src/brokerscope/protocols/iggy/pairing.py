"""Requests waiting for their responses on one Iggy connection."""

from __future__ import annotations

from collections import OrderedDict, deque

MAX_PENDING = 100_000


def new_request(code: int | None, name: str | None, corr: int, ts_end: int) -> dict:
    """A request as it waits for its response: its command, correlation_id and last byte's time;
    `topic`, `partition` and `details` (the decoded fields) are filled in once it decodes."""
    return {
        "code": code,
        "name": name,
        "corr": corr,
        "ts_end": ts_end,
        "topic": None,
        "partition": None,
        "details": None,
    }


class Pending:
    """The connection's pending requests, at most MAX_PENDING (the oldest are forgotten).

    The request-id framing pairs a response with the request of the same id, whatever the order
    (`keyed`); the classic and VSR framings pair in order, as responses come in request order.
    A request's correlation_id is its request id, else its 1-based ordinal on the connection."""

    def __init__(self) -> None:
        self.keyed = False  # set once the connection's framing is known to be request-id
        self.ordinal = 0
        self.fifo: deque[dict] = deque()  # classic / VSR
        self.by_id: OrderedDict[int, dict] = OrderedDict()  # request-id framing
        self.forgotten: list[dict] = []  # requests dropped past MAX_PENDING that hold rows

    def next_corr(self, req_id: int | None) -> int:
        """The correlation_id of the next request (counting it)."""
        self.ordinal += 1
        return self.ordinal if req_id is None else req_id

    def add(self, req: dict) -> None:
        if self.keyed:
            self.by_id[req["corr"]] = req
            while len(self.by_id) > MAX_PENDING:
                self._forget(self.by_id.popitem(last=False)[1])
        else:
            self.fifo.append(req)
            while len(self.fifo) > MAX_PENDING:
                self._forget(self.fifo.popleft())

    def _forget(self, req: dict) -> None:
        if "produce" in req or "held" in req:  # produce rows (SEND_MESSAGES) or its row (_hold) to emit
            self.forgotten.append(req)

    def pop(self, req_id: int | None = None) -> dict | None:
        """The request a response answers (by `req_id` when keyed, else the oldest), or None."""
        if self.keyed:
            return self.by_id.pop(req_id, None) if req_id is not None else None
        return self.fifo.popleft() if self.fifo else None

    def oldest(self) -> dict | None:
        """The request the next in-order response answers, left pending."""
        return self.fifo[0] if self.fifo else None

    def has_id(self, req_id: int) -> bool:
        return req_id in self.by_id

    def take_all(self) -> list[dict]:
        """Every pending request, oldest first; none is pending afterwards."""
        reqs = list(self.fifo) + list(self.by_id.values())
        self.fifo.clear()
        self.by_id.clear()
        return reqs
