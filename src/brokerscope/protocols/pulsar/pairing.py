"""What a Pulsar connection waits on, bounded: requests waiting for their response (`Pending`),
SENDs holding their produce rows until the receipt names the message id (`HeldSends`), and
deliveries waiting for their ack (`Deliveries`). Only state: the rows are built in rows.py."""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa

from ...tables import Block
from .values import bit_set, highest_bit, mid_str, mid_strs

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


class _Run:
    """Batch indexes of one entry added to `KeyRuns` together, in their order."""

    __slots__ = ("id", "entry", "bis", "value", "values", "gone", "left", "open")

    def __init__(self, rid: int, entry: tuple, bis: range | dict, value, is_open: bool):
        self.id = rid  # its key in KeyRuns.runs
        self.entry = entry  # the key's prefix: (ledger, entry), or (consumer_id, ledger, entry)
        self.bis = bis  # the batch indexes: a range, or a dict's keys (a run keys are appended to)
        self.value = value  # every key's value ...
        self.values: dict | None = None  # ... but these (batch index -> value), set later
        self.gone: set[int] | None = None  # the indexes no longer here
        self.left = len(bis)
        self.open = is_open  # keys may be appended (the last run, made key by key)


class KeyRuns:
    """An ordered map of keys (entry, batch_index) -> value, as OrderedDict would keep them
    (a key added again keeps its place; a removed one added again goes last), held as runs: the
    indexes of one entry added at once are one run with one value, so a batch delivered and then
    acknowledged whole costs a few operations, not one per message. Keys added one by one
    extend the last run while it is theirs."""

    def __init__(self) -> None:
        self.runs: OrderedDict[int, _Run] = OrderedDict()  # oldest first
        self.by_entry: dict[tuple, list[_Run]] = {}
        self.n = 0  # keys held
        self._ids = 0

    def __len__(self) -> int:
        return self.n

    def find(self, entry: tuple, bi: int) -> _Run | None:
        """The run holding key (entry, bi), if it is here."""
        for r in self.by_entry.get(entry, ()):
            if bi in r.bis and (r.gone is None or bi not in r.gone):
                return r
        return None

    def only(self, entry: tuple, bis: range) -> _Run | None:
        """The run of `entry` if it is its only one and holds exactly `bis`, each with its value."""
        runs = self.by_entry.get(entry)
        if runs and len(runs) == 1:
            r = runs[0]
            if r.bis == bis and r.gone is None and r.values is None and r.bis.__class__ is range:
                return r
        return None

    @staticmethod
    def value(r: _Run, bi: int):
        return r.value if r.values is None else r.values.get(bi, r.value)

    def add_run(self, entry: tuple, bis: range | dict, value, is_open: bool = False) -> None:
        """Keys (entry, i) for i in `bis`, none of them here, added last with `value`."""
        if not len(bis):
            return
        last = next(reversed(self.runs.values()), None)
        if last is not None:
            last.open = False
        self._ids += 1
        r = _Run(self._ids, entry, bis, value, is_open)
        self.runs[r.id] = r
        self.by_entry.setdefault(entry, []).append(r)
        self.n += r.left

    def append(self, entry: tuple, bi: int, value) -> None:
        """Key (entry, bi), not here, added last with `value`."""
        last = next(reversed(self.runs.values()), None)
        if last is not None and last.open and last.entry == entry and bi not in last.bis:
            last.bis[bi] = None
            if last.value != value:
                if last.values is None:
                    last.values = {}
                last.values[bi] = value
            last.left += 1
            self.n += 1
        else:
            self.add_run(entry, {bi: None}, value, is_open=True)

    def set_value(self, r: _Run, bi: int, value) -> None:
        """The value of key (r.entry, bi), which `r` holds; its place is kept."""
        if value != self.value(r, bi):
            if r.values is None:
                r.values = {}
            r.values[bi] = value

    def remove(self, r: _Run, bi: int) -> None:
        """Key (r.entry, bi), which `r` holds, removed."""
        if r.gone is None:
            r.gone = set()
        r.gone.add(bi)
        r.left -= 1
        self.n -= 1
        if not r.left:
            self.drop(r)

    def drop(self, r: _Run) -> None:
        """Every key run `r` still holds, removed."""
        self.n -= r.left
        r.left = 0
        del self.runs[r.id]
        runs = self.by_entry[r.entry]
        runs.remove(r)
        if not runs:
            del self.by_entry[r.entry]

    def keys(self) -> list[tuple[_Run, int]]:
        """Every key held, oldest first, with its run."""
        return [(r, bi) for r in self.runs.values() for bi in r.bis if r.gone is None or bi not in r.gone]

    def pop_oldest(self) -> None:
        """The key held longest, removed."""
        r = next(iter(self.runs.values()))
        for bi in r.bis:
            if r.gone is None or bi not in r.gone:
                self.remove(r, bi)
                return


class AckedIds(NamedTuple):
    """The ids one message id of an ACK acknowledges, as columns: their message_id strings,
    their delivery times (one for all, or one each; None: delivery not captured) and whether
    each was acked before (one for all, or one each)."""

    n: int
    message_id: pa.Array | list[str]
    delivered: int | None | list[int | None]
    again: bool | list[bool]


class Deliveries:
    """Message ids delivered to each consumer and not acked yet, with their delivery time (bounded
    over all consumers: the oldest of the first consumer goes first); the batch sizes delivered;
    the ids acked already. Both kept as KeyRuns: a batch delivered and acknowledged whole is a
    run, not a key per message."""

    def __init__(self) -> None:
        # consumer_id -> keys ((ledger, entry), batch_index) -> delivery ts (last byte)
        self.waiting: dict[int, KeyRuns] = {}
        self.count = 0
        self.batch_sizes: OrderedDict[tuple[int, int, int], int] = OrderedDict()  # (cid, L, E) -> n
        self.acked = KeyRuns()  # keys ((cid, L, E), batch_index), oldest first

    def of(self, cid: int) -> KeyRuns:
        """Consumer `cid`'s deliveries (its table is created, empty, if it has none)."""
        dl = self.waiting.get(cid)
        if dl is None:
            dl = self.waiting[cid] = KeyRuns()
        return dl

    def add_all(self, dl: KeyRuns, ledger: int, entry: int, bis: range, ts: int) -> None:
        """Deliveries of (ledger, entry, i) for i in `bis` at `ts`; one delivered before and
        still waiting is counted once (its time is the new one, its place the old one)."""
        e = (ledger, entry)
        if e not in dl.by_entry:
            dl.add_run(e, bis, ts)
            self.count += len(bis)
            return
        new = []
        for bi in bis:
            r = dl.find(e, bi)
            if r is None:
                new.append(bi)
            else:
                dl.set_value(r, bi, ts)
        dl.add_run(e, dict.fromkeys(new), ts)
        self.count += len(new)

    def add_chunk(self, dl: KeyRuns, ledger: int, entry: int, ts: int) -> None:
        """A chunk's delivery (ledger, entry, -1): counted as new even when redelivered (the count
        then errs high)."""
        e = (ledger, entry)
        r = dl.find(e, -1)
        if r is None:
            dl.append(e, -1, ts)
        else:
            dl.set_value(r, -1, ts)
        self.count += 1

    def trim(self) -> None:
        """Forget the oldest deliveries while there are more than MAX_PENDING."""
        while self.count > MAX_PENDING:
            oldest = next((c for c in self.waiting if self.waiting[c].n), None)
            if oldest is None:
                break
            self.waiting[oldest].pop_oldest()
            self.count -= 1

    def batch_size(self, cid: int, ledger: int, entry: int) -> int | None:
        """The number of messages in the batch delivered as (ledger, entry), if seen."""
        return self.batch_sizes.get((cid, ledger, entry))

    def set_batch_size(self, cid: int, ledger: int, entry: int, n: int) -> None:
        remember(self.batch_sizes, (cid, ledger, entry), n)

    def acknowledge(
        self, cid: int, ledger: int, entry: int, indexes: range | list[int], cumulative: bool, seen: dict
    ) -> AckedIds:
        """The ids one message id of an ACK by `cid` acknowledges: (ledger, entry, i) for each batch
        index i in `indexes` and, `cumulative`, every earlier delivery waiting. Each comes with its
        delivery time (None if not captured) and whether it was acked before; their deliveries are
        no longer waiting. `seen`: the ids this ACK acknowledged already, (ledger, entry) -> batch
        indexes (listed twice is once)."""
        e = (ledger, entry)
        dl = self.waiting.get(cid) or KeyRuns()
        acked = self.acked
        ak = (cid, ledger, entry)
        if (
            not cumulative
            and indexes.__class__ is range
            and e not in seen
            and ak not in acked.by_entry
            and len(indexes) <= MAX_PENDING
        ):  # a batch acknowledged whole, the common case: its run taken at once
            r = dl.only(e, indexes)
            if r is not None or e not in dl.by_entry:
                seen[e] = set(indexes)
                if r is not None:
                    dl.drop(r)
                    self.count -= len(indexes)
                acked.add_run(ak, indexes, True)
                while acked.n > MAX_PENDING:
                    acked.pop_oldest()
                ids = mid_strs(ledger, entry, indexes)
                return AckedIds(len(indexes), ids, None if r is None else r.value, False)
        return self._acknowledge_each(cid, dl, e, indexes, cumulative, seen)

    def _acknowledge_each(
        self, cid: int, dl: KeyRuns, e: tuple, indexes, cumulative: bool, seen: dict
    ) -> AckedIds:
        """acknowledge, key by key."""
        targets = [(e, i) for i in indexes]
        if cumulative:
            targets = [(r.entry, bi) for r, bi in dl.keys() if r.entry < e] + targets
        ids, delivered, again_col = [], [], []
        acked, waited = self.acked, 0
        for k, bi in targets:
            s = seen.setdefault(k, set())
            if bi in s:
                continue
            s.add(bi)
            r = dl.find(k, bi)
            ts = None
            if r is not None:
                ts = dl.value(r, bi)
                dl.remove(r, bi)
                waited += 1
            elif cumulative and k != e:
                continue
            ak = (cid, *k)
            again = acked.find(ak, bi) is not None
            if not again:
                acked.append(ak, bi, True)
                while acked.n > MAX_PENDING:
                    acked.pop_oldest()
            ids.append(mid_str(k[0], k[1], bi))
            delivered.append(ts)
            again_col.append(again)
        self.count -= waited
        return AckedIds(len(ids), ids, delivered, again_col)


def acked_indexes(
    mid, ack_set: list[int], cumulative: bool, n_batch: int | None
) -> tuple[range | list[int], bool]:
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
        return [i for i in range(min(size, 1 << 16)) if not bit_set(ack_set, i)] or range(-1, 0), size_known
    B = mid.batch_index
    if B >= 0:
        return (range(B + 1) if cumulative else range(B, B + 1)), True
    if n_batch:
        return range(n_batch), True
    return range(-1, 0), True
