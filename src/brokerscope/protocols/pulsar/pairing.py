"""What a Pulsar connection waits on, bounded: requests waiting for their response (`Pending`),
SENDs holding their produce rows until the receipt names the message id (`HeldSends`), and
deliveries waiting for their ack (`Deliveries`). Only state: the rows are built in rows.py."""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa

from ...tables import Block
from .messages import NUMBERED_MIN
from .values import bit_set, highest_bit, joined, mid_str, mid_strs

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

    __slots__ = ("id", "entry", "bis", "value", "values", "gone", "left")

    def __init__(self, rid: int, entry: tuple, bis: range | dict, value):
        self.id = rid  # its key in KeyRuns.runs
        self.entry = entry  # the key's prefix: (ledger, entry), or (consumer_id, ledger, entry)
        self.bis = bis  # the batch indexes: a range, or a dict's keys (a run keys are appended to)
        self.value = value  # every key's value ...
        self.values: dict | None = None  # ... but these (batch index -> value), set later
        self.gone: set[int] | None = None  # the indexes no longer here
        self.left = len(bis)


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
        self._open: _Run | None = None  # the last run, if made key by key: keys are appended to it

    def __len__(self) -> int:
        return self.n

    def find(self, entry: tuple, bi: int) -> _Run | None:
        """The run holding key (entry, bi), if it is here."""
        for r in self.by_entry.get(entry, ()):
            if bi in r.bis and (r.gone is None or bi not in r.gone):
                return r
        return None

    @staticmethod
    def value(r: _Run, bi: int):
        return r.value if r.values is None else r.values.get(bi, r.value)

    def add_run(self, entry: tuple, bis: range | dict, value, is_open: bool = False) -> None:
        """Keys (entry, i) for i in `bis`, none of them here, added last with `value`."""
        if not len(bis):
            return
        self._ids += 1
        r = _Run(self._ids, entry, bis, value)
        self.runs[r.id] = r
        runs = self.by_entry.get(entry)
        if runs is None:
            self.by_entry[entry] = [r]
        else:
            runs.append(r)
        self.n += r.left
        self._open = r if is_open else None

    def append(self, entry: tuple, bi: int, value) -> None:
        """Key (entry, bi), not here, added last with `value`."""
        last = self._open
        if last is not None and last.entry == entry and bi not in last.bis:
            if last.bis.__class__ is not range:
                last.bis[bi] = None
            elif bi == last.bis.stop:  # the next index: still a range
                last.bis = range(last.bis.start, bi + 1)
            else:
                last.bis = dict.fromkeys(last.bis)
                last.bis[bi] = None
            if last.value != value:
                if last.values is None:
                    last.values = {}
                last.values[bi] = value
            last.left += 1
            self.n += 1
        else:
            self.add_run(entry, range(bi, bi + 1), value, is_open=True)

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
        if r is self._open:
            self._open = None
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
        indexes (listed twice is once). A run of deliveries, or an entry's indexes, that no key
        by key rule could tell apart from a whole (none seen, none acked before, all waiting with
        one time or none waiting) is taken at once; the rest key by key."""
        e = (ledger, entry)
        dl = self.waiting.get(cid)
        if dl is None:
            dl = KeyRuns()
        if not cumulative:
            return self._take_entry(cid, dl, e, indexes, seen) or self._each(
                cid, dl, [(e, i) for i in indexes], False, e, seen
            )
        parts: list[AckedIds] = []
        if cumulative:  # every earlier delivery waiting, in the order they were delivered
            for r in [r for r in dl.runs.values() if r.entry < e]:
                got = self._take_run(cid, dl, r, seen)
                if got is None:
                    waiting = [(r.entry, bi) for bi in r.bis if r.gone is None or bi not in r.gone]
                    got = self._each(cid, dl, waiting, True, e, seen)
                parts.append(got)
        got = self._take_entry(cid, dl, e, indexes, seen)
        parts.append(got or self._each(cid, dl, [(e, i) for i in indexes], True, e, seen))
        if len(parts) == 1:
            return parts[0]
        return AckedIds(
            sum(p.n for p in parts),
            joined([p.message_id for p in parts]),
            [
                t
                for p in parts
                for t in (p.delivered if p.delivered.__class__ is list else [p.delivered] * p.n)
            ],
            [a for p in parts for a in (p.again if p.again.__class__ is list else [p.again] * p.n)],
        )

    def _acked_add(self, ak: tuple, bis: range | list[int]) -> None:
        """Ids (ak, i) for i in `bis`, none acked yet, remembered as acked (the oldest dropped past
        MAX_PENDING; `bis` no longer than that, so none of its own)."""
        acked = self.acked
        if len(bis) == 1:
            acked.append(ak, bis[0], True)
        else:
            acked.add_run(ak, bis if bis.__class__ is range else dict.fromkeys(bis), True)
        while acked.n > MAX_PENDING:
            acked.pop_oldest()

    def _take_run(self, cid: int, dl: KeyRuns, r: _Run, seen: dict) -> AckedIds | None:
        """A cumulative ACK's earlier run `r` taken whole, if it can be: every key waiting with one
        time, none seen by this ACK, none of its entry acked before."""
        ak = (cid, *r.entry)
        if not (
            r.gone is None
            and r.values is None
            and r.entry not in seen
            and ak not in self.acked.by_entry
            and r.left <= MAX_PENDING
        ):
            return None
        bis = r.bis if r.bis.__class__ is range else list(r.bis)
        seen[r.entry] = set(bis)
        dl.drop(r)
        self.count -= len(bis)
        self._acked_add(ak, bis)
        return AckedIds(len(bis), _ids(r.entry, bis), r.value, False)

    def _take_entry(self, cid: int, dl: KeyRuns, e: tuple, indexes, seen: dict) -> AckedIds | None:
        """The indexes of entry `e` an ACK's message id names taken at once, if they can be: none
        seen by this ACK, none acked before, increasing, and either none of the entry waiting or
        all of them in its only run, with one time."""
        n = len(indexes)
        if not n or n > MAX_PENDING or e in seen:
            return None
        if indexes.__class__ is not range and any(a >= b for a, b in zip(indexes, indexes[1:])):
            return None
        ak = (cid, *e)
        if ak in self.acked.by_entry and (n > 8 or any(self.acked.find(ak, i) for i in indexes)):
            return None
        runs = dl.by_entry.get(e)
        delivered = None
        if runs:
            r = runs[0]
            if (
                len(runs) > 1
                or r.values is not None
                or r.bis.__class__ is not range
                or indexes[0] < r.bis.start
                or indexes[-1] >= r.bis.stop
                or (r.gone is not None and not r.gone.isdisjoint(indexes))
            ):
                return None
            delivered = r.value
            if r.gone is None and n == r.left:
                dl.drop(r)
            else:
                if r.gone is None:
                    r.gone = set()
                r.gone.update(indexes)
                r.left -= n
                dl.n -= n
                if not r.left:
                    dl.drop(r)
            self.count -= n
        seen[e] = set(indexes)
        self._acked_add(ak, indexes)
        return AckedIds(n, _ids(e, indexes), delivered, False)

    def _each(self, cid: int, dl: KeyRuns, targets: list, cumulative: bool, e: tuple, seen: dict) -> AckedIds:
        """acknowledge, key by key, for `targets` ((ledger, entry), batch index)."""
        ids, delivered, again_col = [], [], []
        acked, waited = self.acked, 0
        find, acked_find = dl.find, acked.find
        for k, bi in targets:
            s = seen.get(k)
            if s is None:
                s = seen[k] = set()
            elif bi in s:
                continue
            s.add(bi)
            r = find(k, bi)
            if r is not None:
                ts = r.value if r.values is None else r.values.get(bi, r.value)
                dl.remove(r, bi)
                waited += 1
            elif cumulative and k != e:
                continue
            else:
                ts = None
            ak = (cid, *k)
            again = acked_find(ak, bi) is not None
            if not again:
                acked.append(ak, bi, True)
                while acked.n > MAX_PENDING:
                    acked.pop_oldest()
            ids.append(mid_str(k[0], k[1], bi))
            delivered.append(ts)
            again_col.append(again)
        self.count -= waited
        return AckedIds(len(ids), ids, delivered, again_col)


def _ids(e: tuple, bis: range | list[int]) -> pa.Array | list[str]:
    """The message_id strings of entry e's batch indexes `bis`."""
    if bis.__class__ is range and len(bis) >= NUMBERED_MIN:
        return mid_strs(e[0], e[1], bis)
    return [mid_str(e[0], e[1], bi) for bi in bis]


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
