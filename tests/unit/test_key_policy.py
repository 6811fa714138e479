"""[payload] apply_to_keys: a message key the policy truncates, hashes or drops appears nowhere
else in the tables, in clear or base64 (found by a user trial: Pulsar's partition and ordering
keys stayed in commands.details and messages.details with policy = "drop")."""

from __future__ import annotations

import base64
import json

import pytest

from brokerscope.config import Settings
from brokerscope.streams import decode_files
from tests.conftest import SAMPLE_DATA

TRUNCATE = 4
SHORTEST = 6  # shorter keys ("k1", "0") occur in other values by chance


def _decode(policy: str) -> dict[str, list[dict]]:
    over = {"payload": {"policy": policy, "truncate_bytes": TRUNCATE, "apply_to_keys": policy != "keep"}}
    return decode_files([str(SAMPLE_DATA)], Settings.load(None, over))


def _texts(v, out: list[str]) -> None:
    """Every string and bytes value in `v` (nested lists and dicts, JSON text parsed too)."""
    if isinstance(v, bytes | bytearray):
        out.append(bytes(v).decode("latin-1"))
    elif isinstance(v, str):
        out.append(v)
        if v[:1] in "{[":
            try:
                _texts(json.loads(v), out)
            except ValueError:
                pass
    elif isinstance(v, dict):
        for k, x in v.items():
            _texts(k, out)
            _texts(x, out)
    elif isinstance(v, list | tuple):
        for x in v:
            _texts(x, out)


@pytest.fixture(scope="module")
def keys() -> set[bytes]:
    """The message keys of the sample data, as the keep policy stores them."""
    got = {r["key"] for r in _decode("keep")["messages"] if r["key"] and len(r["key"]) >= SHORTEST}
    assert len(got) >= 10 and {r[:3] for r in got} >= {b"key"}  # Pulsar's partition keys among them
    return got


@pytest.mark.parametrize("policy", ["truncate", "hash", "drop"])
def test_keys_under_the_policy_are_nowhere_else(keys, policy):
    rows = _decode(policy)
    forms = set()
    for k in keys:
        forms.add(k.decode("latin-1"))
        forms.add(base64.b64encode(k).decode())
    found: dict[str, set[str]] = {}
    for table, trows in rows.items():
        if table.startswith("_"):
            continue
        for r in trows:
            texts: list[str] = []
            for col, v in r.items():
                # the messages' own headers are not their keys; message_id is topic-partition@offset
                # (Kafka's sample keys "none-0" read like topic bs-none's partition 0)
                if col not in ("headers", "message_id"):
                    _texts(v, texts)
            for t in texts:
                for f in forms:
                    if f in t:
                        found.setdefault(table, set()).add(f)
    assert not found, found
