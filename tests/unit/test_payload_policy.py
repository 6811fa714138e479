"""The payload policy applies to every message a decoder emits, end to end on a real capture."""

from __future__ import annotations

import hashlib

import pytest

from brokerscope.config import Settings
from brokerscope.streams import decode_files
from tests.conftest import SAMPLE_DATA

CAPTURE = str(SAMPLE_DATA / "tubemq" / "tubemq_default_ports.pcap")


@pytest.fixture(scope="module")
def kept() -> list[dict]:
    rows = decode_files([CAPTURE])["messages"]
    assert rows and all(r["value"] is not None for r in rows)
    return rows


def _decode(policy: str, **extra) -> list[dict]:
    return decode_files([CAPTURE], Settings.load(overrides={"payload": {"policy": policy, **extra}}))[
        "messages"
    ]


def test_hash(kept):
    rows = _decode("hash")
    assert len(rows) == len(kept)
    for r, k in zip(rows, kept):
        assert r["value"] is None and r["value_size"] == len(k["value"])
        assert r["value_hash"] == hashlib.sha256(k["value"]).hexdigest()


def test_truncate(kept):
    rows = _decode("truncate", truncate_bytes=10)
    assert [r["value"] for r in rows] == [k["value"][:10] for k in kept]
    assert [r["value_size"] for r in rows] == [len(k["value"]) for k in kept]


def test_drop(kept):
    rows = _decode("drop")
    assert all(r["value"] is None and r["value_hash"] is None for r in rows)
    assert [r["value_size"] for r in rows] == [len(k["value"]) for k in kept]
