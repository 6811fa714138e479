"""What a Pulsar connection waits on, bounded: requests waiting for their response (`Pending`),
SENDs holding their produce rows until the receipt names the message id (`HeldSends`), and
deliveries waiting for their ack (`Deliveries`). Only state: the rows are built in rows.py."""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from itertools import repeat

import pyarrow as pa

from ...tables import Block
from .values import bit_set, highest_bit

MAX_PENDING = 100_000  # entries per pairing map
HOLD_BYTES = 16 * 1024 * 1024  # produce rows held until their receipt names the message id

SendKey = tuple[int, int]  # (producer_id, sequence_id)
DeliveryKey = tuple[int, int, int]  # (ledger, entry, batch_index)


def remember(table: OrderedDict, key, value) -> list[tuple]:
    """table[key] = value; then the oldest entries, while more than MAX_PENDING, dropped and returned."""
    table[key] = value
    dropped = []
    while len(table) > MAX_PENDING:
        dropped.append(table.popitem(last=False))
    return dropped


@dataclass
class Pending:
    """A request waiting for its response."""

    command: str
    ts_ns: int  # last byte of the request
    topic: str | None = None
    partition: int | None = None
    extra: dict = field(default_factory=dict)


@dataclass
class PendingSend:
    """A SEND waiting for its receipt."""

    ts_ns: int
    topic: str | None
    rows: list[Block]  # produce rows waiting for the message id (message_rows' blocks)
    held: int  # payload bytes held by `rows`
    # per block of `rows`: its batch indexes and its sequence column (int64, or ints past it)
    sequences: list[tuple[range, pa.Array | list[int]]]
    chunk: dict | None = None


class HeldSends:
    """SENDs waiting for their receipt, by (producer_id, sequence_id), oldest first; bounded by
    MAX_PENDING sends and HOLD_BYTES of values held (`over`)."""

    def __init__(self) -> None:
        self.waiting: OrderedDict[SendKey, deque[PendingSend]] = OrderedDict()
        self.count = 0
        self.held_bytes = 0

    def add(self, key: SendKey, ps: PendingSend) -> None:
        self.waiting.setdefault(key, deque()).append(ps)
        self.waiting.move_to_end(key)
        self.count += 1
        self.held_bytes += ps.held

    def over(self) -> bool:
        return self.count > MAX_PENDING or self.held_bytes > HOLD_BYTES

    def take(self, key: SendKey) -> PendingSend | None:
        """The oldest send waiting under `key`, removed (None if there is none)."""
        q = self.waiting.get(key)
        return self._pop(key, q) if q else None

    def take_oldest(self) -> tuple[SendKey, PendingSend] | None:
        """The send waiting longest, removed (None if there is none)."""
        if not self.waiting:
            return None
        key, q = next(iter(self.waiting.items()))
        return key, self._pop(key, q)

    def _pop(self, key: SendKey, q: deque[PendingSend]) -> PendingSend:
        ps = q.popleft()
        if not q:
            del self.waiting[key]
        self.count -= 1
        self.held_bytes -= ps.held
        return ps

    def drain(self) -> list[tuple[SendKey, PendingSend]]:
        """Every send still waiting, oldest key first; none are left."""
        out = [(key, ps) for key, q in self.waiting.items() for ps in q]
        self.waiting.clear()
        return out


class Deliveries:
    """Message ids delivered to each consumer and not acked yet, with their delivery time (bounded
    over all consumers: the oldest of the first consumer goes first); the batch sizes delivered;
    the ids acked already."""

    def __init__(self) -> None:
        # consumer_id -> {(ledger, entry, batch_index): delivery ts (last byte)}
        self.waiting: dict[int, OrderedDict[DeliveryKey, int]] = {}
        self.count = 0
        self.batch_sizes: OrderedDict[tuple[int, int, int], int] = OrderedDict()  # (cid, L, E) -> n
        self.acked: OrderedDict[tuple[int, int, int, int], bool] = OrderedDict()  # (cid, L, E, bi)

    def of(self, cid: int) -> OrderedDict[DeliveryKey, int]:
        """Consumer `cid`'s deliveries (its table is created, empty, if it has none)."""
        return self.waiting.setdefault(cid, OrderedDict())

    def add_all(self, dl: OrderedDict[DeliveryKey, int], keys: list[DeliveryKey], ts: int) -> None:
        """Deliveries of `keys` (distinct) at `ts`; a key delivered before is counted once."""
        before = len(dl)
        dl.update(zip(keys, repeat(ts)))
        self.count += len(dl) - before

    def add_chunk(self, dl: OrderedDict[DeliveryKey, int], key: DeliveryKey, ts: int) -> None:
        """A chunk's delivery: counted as new even when redelivered (the count then errs high)."""
        dl[key] = ts
        self.count += 1

    def trim(self) -> None:
        """Forget the oldest deliveries while there are more than MAX_PENDING."""
        while self.count > MAX_PENDING:
            oldest = next((c for c in self.waiting if self.waiting[c]), None)
            if oldest is None:
                break
            self.waiting[oldest].popitem(last=False)
            self.count -= 1

    def batch_size(self, cid: int, ledger: int, entry: int) -> int | None:
        """The number of messages in the batch delivered as (ledger, entry), if seen."""
        return self.batch_sizes.get((cid, ledger, entry))

    def set_batch_size(self, cid: int, ledger: int, entry: int, n: int) -> None:
        remember(self.batch_sizes, (cid, ledger, entry), n)

    def acknowledge(
        self, cid: int, ledger: int, entry: int, indexes: list[int], cumulative: bool, seen: set
    ) -> list[tuple[DeliveryKey, int | None, bool]]:
        """The ids one message id of an ACK by `cid` acknowledges: (ledger, entry, i) for each batch
        index i in `indexes` and, `cumulative`, every earlier delivery waiting. Each comes with its
        delivery time (None if not captured) and whether it was acked before; their deliveries are
        no longer waiting. `seen`: the ids this ACK acknowledged already (listed twice is once)."""
        dl = self.waiting.get(cid, OrderedDict())
        targets = [(ledger, entry, i) for i in indexes]
        if cumulative:
            targets = [k for k in dl if (k[0], k[1]) < (ledger, entry)] + targets
        out = []
        acked, pop, waited = self.acked, dl.pop, 0
        for k in targets:
            if k in seen:
                continue
            seen.add(k)
            ts = pop(k, None)
            if ts is not None:
                waited += 1
            elif cumulative and k[:2] != (ledger, entry):
                continue
            ak = (cid, *k)
            again = ak in acked
            acked[ak] = True  # remember(acked, ak, True), inline
            while len(acked) > MAX_PENDING:
                acked.popitem(last=False)
            out.append((k, ts, again))
        self.count -= waited
        return out


def acked_indexes(mid, ack_set: list[int], cumulative: bool, n_batch: int | None) -> tuple[list[int], bool]:
    """The batch indexes of entry (mid.ledger_id, mid.entry_id) an ACK's message id acknowledges
    ([-1]: the entry as a whole), and whether the batch size is known. `ack_set`: the id's ack
    set as a list; `n_batch`: the size of the batch delivered, if captured."""
    if ack_set:
        # batch-index ack: a set bit is a message still unacknowledged, a clear bit an acked one
        size_known = True
        if mid.HasField("batch_size") and mid.batch_size > 0:
            size = mid.batch_size
        elif n_batch:
            size = n_batch
        else:  # delivery not captured: only indexes below the highest unacked one are certain
            size_known = False
            size = highest_bit(ack_set)
        return [i for i in range(min(size, 1 << 16)) if not bit_set(ack_set, i)] or [-1], size_known
    B = mid.batch_index
    if B >= 0:
        return (list(range(B + 1)) if cumulative else [B]), True
    if n_batch:
        return list(range(n_batch)), True
    return [-1], True
