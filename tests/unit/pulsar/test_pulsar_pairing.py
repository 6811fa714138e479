"""Deliveries (pairing.py) held as runs against a plain model of what they mean: an ordered map per
consumer of (ledger, entry, batch_index) -> delivery time and one of the ids acked, each bounded
(the oldest go first), as OrderedDicts keep them. Random deliveries, redeliveries, chunks and
ACKs (whole batches, single indexes, index lists, cumulative, ids listed twice) with a small
bound: the same acks, delivery times, repeats, and the same state after every step."""

from __future__ import annotations

import random
from collections import OrderedDict

import pytest

from brokerscope.protocols.pulsar import pairing
from brokerscope.protocols.pulsar.pairing import Deliveries, KeyRuns


class Model:
    """Deliveries as a map per key (the meaning the runs must keep)."""

    def __init__(self, bound: int):
        self.bound = bound
        self.waiting: dict[int, OrderedDict] = {}
        self.count = 0
        self.acked: OrderedDict = OrderedDict()

    def add_all(self, cid: int, ledger: int, entry: int, bis: range, ts: int) -> None:
        dl = self.waiting.setdefault(cid, OrderedDict())
        before = len(dl)
        dl.update({(ledger, entry, bi): ts for bi in bis})
        self.count += len(dl) - before

    def add_chunk(self, cid: int, ledger: int, entry: int, ts: int) -> None:
        self.waiting.setdefault(cid, OrderedDict())[(ledger, entry, -1)] = ts
        self.count += 1

    def trim(self) -> None:
        while self.count > self.bound:
            oldest = next((c for c in self.waiting if self.waiting[c]), None)
            if oldest is None:
                break
            self.waiting[oldest].popitem(last=False)
            self.count -= 1

    def acknowledge(self, cid, ledger, entry, indexes, cumulative, seen: set) -> list:
        dl = self.waiting.get(cid, OrderedDict())
        targets = [(ledger, entry, i) for i in indexes]
        if cumulative:
            targets = [k for k in dl if k[:2] < (ledger, entry)] + targets
        out = []
        for k in targets:
            if k in seen:
                continue
            seen.add(k)
            ts = dl.pop(k, None)
            if ts is not None:
                self.count -= 1
            elif cumulative and k[:2] != (ledger, entry):
                continue
            ak = (cid, *k)
            again = ak in self.acked
            self.acked[ak] = True
            while len(self.acked) > self.bound:
                self.acked.popitem(last=False)
            out.append((f"{k[0]}:{k[1]}:{k[2]}", ts, again))
        return out


def held(runs: KeyRuns) -> list:
    return [(*r.entry, bi, KeyRuns.value(r, bi)) for r, bi in runs.keys()]


def rows(a: pairing.AckedIds) -> list:
    ids = a.message_id if isinstance(a.message_id, list) else a.message_id.to_pylist()
    ts = a.delivered if isinstance(a.delivered, list) else [a.delivered] * a.n
    again = a.again if isinstance(a.again, list) else [a.again] * a.n
    assert len(ids) == len(ts) == len(again) == a.n
    return list(zip(ids, ts, again, strict=True))


@pytest.mark.parametrize("seed", range(60))
def test_runs_keep_what_a_map_per_key_keeps(seed, monkeypatch):
    rnd = random.Random(seed)
    bound = rnd.choice([5, 12, 40, 1000])
    monkeypatch.setattr(pairing, "MAX_PENDING", bound)
    got, want = Deliveries(), Model(bound)
    entries = [(7, e) for e in range(6)]
    sizes = {e: rnd.randrange(1, 9) for e in entries}
    ts = 0
    for _step in range(120):
        ts += 1
        cid = rnd.randrange(2)
        (L, E) = rnd.choice(entries)
        op = rnd.random()
        if op < 0.4:  # a delivery, or a redelivery, of a batch (or of a message not in one)
            bis = range(sizes[(L, E)]) if rnd.random() < 0.8 else range(-1, 0)
            got.add_all(got.of(cid), L, E, bis, ts)
            want.add_all(cid, L, E, bis, ts)
            if rnd.random() < 0.2:
                got.add_chunk(got.of(cid), L, E, ts)
                want.add_chunk(cid, L, E, ts)
            got.trim()
            want.trim()
        else:  # an ACK of one to three message ids
            seen_got: dict = {}
            seen_want: set = set()
            cumulative = rnd.random() < 0.2
            for _ in range(rnd.randrange(1, 4)):
                (L, E) = rnd.choice(entries)
                n = sizes[(L, E)]
                indexes = rnd.choice(
                    [
                        range(n),
                        range(-1, 0),
                        range(b := rnd.randrange(n), b + 1),
                        sorted(rnd.sample(range(n), rnd.randrange(1, n + 1))),
                    ]
                )
                a = got.acknowledge(cid, L, E, indexes, cumulative, seen_got)
                assert rows(a) == want.acknowledge(cid, L, E, indexes, cumulative, seen_want)
        assert got.count == want.count
        for c in (0, 1):
            mine = held(got.waiting[c]) if c in got.waiting else []
            assert mine == [(*k, t) for k, t in want.waiting.get(c, {}).items()]
        assert [(*r.entry, bi) for r, bi in got.acked.keys()] == list(want.acked)
        assert len(got.acked) == len(want.acked)


def test_a_batch_delivered_and_acknowledged_whole_is_one_run():
    d = Deliveries()
    d.add_all(d.of(0), 3, 4, range(100), 1_000)
    assert len(d.of(0).runs) == 1 and d.count == 100
    a = d.acknowledge(0, 3, 4, range(100), False, {})
    assert (a.n, a.delivered, a.again) == (100, 1_000, False)
    assert a.message_id.to_pylist() == [f"3:4:{i}" for i in range(100)]
    assert d.count == 0 and not d.of(0).runs and len(d.acked.runs) == 1
    again = d.acknowledge(0, 3, 4, range(100), False, {})
    assert again.again == [True] * 100 and again.delivered == [None] * 100
