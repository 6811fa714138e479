"""Whether a parsed protobuf message is as its sender wrote it, for Pulsar's and TubeMQ's frames
that may carry credentials.

A protobuf client (protobuf-java, LightProto, the C++ client) writes a message's fields once each,
in field-number order, strings as text. One damaged byte in a capture can make a frame parse still,
with a credential somewhere else: a tag moved to another field, a length that swallows the
credential's field into the string before it, a header length that starts the body inside it, a
method id that reads the body as another message. Each of these leaves a mark parsing alone does
not see: the fields do not encode back to the same bytes (order, a field given twice, an unknown
field in the middle, a varint of more bytes than needed), a string holds tags and lengths (control
characters), or a field comes under another wire type than its own. Found by setting every byte
of the recorded authentication frames to every value (tests/unit/test_secrets_damaged.py).
"""

from __future__ import annotations

import re

from google.protobuf.unknown_fields import UnknownFieldSet

_CONTROL = re.compile("[\x00-\x1f\x7f]")
_CONTROL_IN_PROSE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # tabs and line ends allowed
# the same of a string that is not UTF-8 (proto2 hands it over as bytes: a client's own
# encoding, kept visible, or a damaged length's swallowed bytes, tags and lengths among them)
_CONTROL_BYTES = re.compile(b"[\x00-\x1f\x7f]")
_CONTROL_BYTES_IN_PROSE = re.compile(b"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def odd_values(msg, prose: frozenset[str] = frozenset()) -> str | None:
    """Why a parsed message (nested ones too) holds what no client writes, or None: a string
    with control characters (tabs and line ends allowed in the fields named in `prose`: error
    messages, stack traces), UTF-8 or not, or a field of the message's own under another wire
    type (protobuf keeps it apart, unknown: a damaged tag that moved a field into a message
    field, say a token into a config's id)."""
    stack = [msg]
    while stack:
        m = stack.pop()
        for fd, v in m.ListFields():
            if fd.type == fd.TYPE_MESSAGE:
                stack.extend(v if fd.is_repeated else (v,))
            elif fd.type == fd.TYPE_STRING:
                plain = fd.name not in prose
                for s in v if fd.is_repeated else (v,):
                    if isinstance(s, bytes):
                        control = _CONTROL_BYTES if plain else _CONTROL_BYTES_IN_PROSE
                    else:
                        control = _CONTROL if plain else _CONTROL_IN_PROSE
                    if control.search(s):
                        return f"{fd.name} is not text"
        known = m.DESCRIPTOR.fields_by_number
        for u in UnknownFieldSet(m):
            if u.field_number in known:
                return f"{known[u.field_number].name} under another wire type"
    return None


def reencoded(msg, wire: bytes | memoryview) -> str | None:
    """Why `msg`, parsed from `wire`, does not encode back to those very bytes, or None."""
    if msg.SerializePartialToString() != wire:  # ByteSize raises without required fields
        return "its fields do not encode back to its bytes"
    return None


def damage(msg, wire: bytes | memoryview, prose: frozenset[str] = frozenset()) -> str | None:
    """Why `msg`, parsed from `wire`, is not what a client writes, or None (`prose`: odd_values)."""
    return reencoded(msg, wire) or odd_values(msg, prose)
