"""base.to_json's compiled writer (protocols/_details.c) against json's encoder (to_json_py).

The decoded rows of the baseline captures hold the writer to json's text on real details; the
`details_json` fuzz target on random values. Here: each kind of value the writer writes itself,
and those it leaves to json's encoder."""

from __future__ import annotations

import json
import math

import pytest

from brokerscope.protocols import base
from brokerscope.protocols.kafka.rows import Summary


class IntLike(int):
    def __repr__(self) -> str:  # json writes int.__repr__, not this
        return "IntLike"


class StrLike(str):
    pass


PLAIN = [
    None,
    True,
    False,
    0,
    -1,
    (1 << 63) - 1,
    -(1 << 63),
    1 << 64,  # past int64: int.__repr__
    -(10**40),
    IntLike(7),
    0.1,
    -0.0,
    1e300,
    5e-324,
    math.nan,
    math.inf,
    -math.inf,
    "",
    "plain",
    'quote " backslash \\ slash /',
    "\b\f\n\r\t\x00\x01\x1f\x7f",
    "é€😀 \u2028\u2029",
    StrLike("sub"),
    [],
    (),
    {},
    [1, [2, [3, []]], {}],
    (1, "two", None),
    {"a": 1, "b": [True, False, None], "c": {"d": "e"}},
    {1: "int key", -5: 0, 2.5: "float key", False: "bool key", None: "none key"},
    {math.nan: 1, math.inf: 2},
    Summary(batches=[{"base_offset": 0, "codec": "lz4"}]),
    {"bytes": b"text", "binary": b"\xff\x00\x80", "empty": b"", "view": memoryview(b"ab")},
    {"set": {3}, "frozen": frozenset(), "ba": bytearray(b"x")},
    {"obj": object},  # repr() by base._jsonable
]


@pytest.mark.parametrize("value", PLAIN, ids=range(len(PLAIN)))
def test_writer_writes_what_json_writes(value) -> None:
    text = base._details.dumps(value, base._jsonable)
    assert text is not None
    assert text == base.to_json_py(value)
    assert base.to_json(value) == text


def test_order_of_keys_is_the_dicts() -> None:
    d = {"z": 1, "a": 2}
    d["m"] = 3
    assert base.to_json(d) == '{"z":1,"a":2,"m":3}'


@pytest.mark.parametrize(
    "value",
    [
        "lone \ud800 surrogate",
        {"k\udfff": 1},
        [1, {"deep": "\udc80"}],
        {"fine": 1, "bad": ["\ud83d"]},
    ],
)
def test_lone_surrogates_are_left_to_json(value) -> None:
    """A str with a lone surrogate has no UTF-8: json writes it into the text as it is."""
    assert base._details.dumps(value, base._jsonable) is None
    assert base.to_json(value) == base.to_json_py(value)


def test_nesting_past_the_writers_depth_is_left_to_json() -> None:
    v: object = "leaf"
    for _ in range(300):
        v = [v]
    assert base._details.dumps(v, base._jsonable) is None
    assert base.to_json(v) == base.to_json_py(v) == "[" * 300 + '"leaf"' + "]" * 300


def test_a_key_json_refuses_fails_as_json_does() -> None:
    with pytest.raises(TypeError):
        base.to_json_py({(1, 2): "tuple key"})
    with pytest.raises(TypeError):
        base.to_json({(1, 2): "tuple key"})


def test_a_default_that_raises_raises() -> None:
    def boom(o):
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        base._details.dumps({"x": object()}, boom)


def test_a_str_is_json_encoded() -> None:
    assert base.to_json('a"b') == base.to_json_py('a"b') == '"a\\"b"'


def test_text_reads_back() -> None:
    v = {"n": [1, 2.5, None], "s": "é\n", "b": b"\xff"}
    assert json.loads(base.to_json(v)) == {"n": [1, 2.5, None], "s": "é\n", "b": {"base64": "/w=="}}
