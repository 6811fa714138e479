"""Random damage to bytes, for the tests that hold a compiled walk to its Python reader."""

from __future__ import annotations

import random


def damage(rng: random.Random, data: bytes) -> bytes:
    """`data` with one to three random edits: a byte changed, bytes inserted, or bytes cut."""
    out = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        i = rng.randrange(len(out) + 1)
        op = rng.random()
        if op < 0.5 and i < len(out):
            out[i] = rng.randrange(256)
        elif op < 0.8:
            out[i:i] = rng.randbytes(rng.randrange(1, 4))
        else:
            del out[i : i + rng.randrange(1, 6)]
    return bytes(out)
