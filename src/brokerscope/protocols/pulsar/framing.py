"""Pulsar frame layout: split a byte stream into frames (`PulsarRules`, for the shared framer)
and a frame into its parts (`parse_frame`).

Wire layout of one frame (all integers unsigned big-endian):

    offset 0   u32  total_size    bytes that follow this field
    offset 4   u32  command_size  size of the serialized BaseCommand
    offset 8   ...  BaseCommand   (protobuf)
    -- payload commands (SEND, MESSAGE) continue with --
    [optional, broker to consumer]
               u16  0x0e02        broker entry metadata magic
               u32  size          size of BrokerEntryMetadata
               ...  BrokerEntryMetadata (protobuf)
               u16  0x0e01        checksum magic (absent from pre-v6 peers)
               u32  crc32c        CRC-32C of everything after this field up to the frame end
               u32  metadata_size
               ...  MessageMetadata (protobuf)
               ...  payload       the rest of the frame

Nothing here raises on bad bytes: problems are reported in `ParsedFrame.status` / `.error`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from .. import base
from ..framer import Rules
from .gen import pulsar_api_pb2 as pb

MAGIC_CRC = 0x0E01
MAGIC_BROKER_ENTRY = 0x0E02
HEADER = 8  # total_size + command_size
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")

TYPE_NAMES: dict[int, str] = {v.number: v.name for v in pb.BaseCommand.Type.DESCRIPTOR.values}
# The body of type T lives in BaseCommand field number T (our .proto names it lower(T)).
BODY_FIELD: dict[int, str] = {
    f.number: f.name for f in pb.BaseCommand.DESCRIPTOR.fields if f.number in TYPE_NAMES
}
PAYLOAD_TYPES = frozenset({pb.BaseCommand.SEND, pb.BaseCommand.MESSAGE})


def crc32c(data: bytes | memoryview) -> int:
    """CRC-32C by the crc32c package, imported at the first checksum: its import asks
    importlib.metadata for its own version (about 55 ms in every process that loads the protocol
    packages, Kafka-only runs too)."""
    global _CRC32C
    if _CRC32C is None:
        from crc32c import crc32c as _CRC32C
    return _CRC32C(data)


_CRC32C = None


@dataclass
class ParsedFrame:
    """One frame, decoded as far as it would go."""

    cmd: pb.BaseCommand | None = None
    type_code: int | None = None
    broker_entry: pb.BrokerEntryMetadata | None = None
    metadata: pb.MessageMetadata | None = None
    payload: bytes | None = None
    has_payload_section: bool = False
    checksum: int | None = None
    checksum_ok: bool | None = None  # None: no checksum on the wire
    status: str = base.OK
    error: str | None = None
    missing: list[str] = field(default_factory=list)
    cmd_size: int = 0  # the BaseCommand's bytes on the wire

    @property
    def type_name(self) -> str | None:
        if self.type_code is None:
            return None
        return TYPE_NAMES.get(self.type_code, f"UNKNOWN_{self.type_code}")

    def body(self):
        """The sub-command message for this frame's type (None if absent or unknown)."""
        if self.cmd is None or self.type_code is None:
            return None
        name = BODY_FIELD.get(self.type_code)
        if name is None or not self.cmd.HasField(name):
            return None
        return getattr(self.cmd, name)


def _fail(pf: ParsedFrame, status: str, error: str) -> ParsedFrame:
    """Record a problem: the first one wins, except that a structural error outranks a checksum
    mismatch found earlier (the damage explains the mismatch)."""
    if pf.status == base.OK:
        pf.status, pf.error = status, error
    elif pf.status == base.CHECKSUM_MISMATCH and status != base.CHECKSUM_MISMATCH:
        pf.status, pf.error = status, f"{error}; {pf.error}"
    return pf


def peek_type(cmd_bytes: bytes | memoryview) -> int | None:
    """BaseCommand.type read straight from the first field (tag 0x08, varint), without protobuf."""
    if len(cmd_bytes) < 2 or cmd_bytes[0] != 0x08:
        return None
    v = cmd_bytes[1]
    if v < 0x80:
        return v
    if len(cmd_bytes) >= 3 and cmd_bytes[2] < 0x80:
        return (v & 0x7F) | (cmd_bytes[2] << 7)
    return None


def parse_command(cmd_bytes: bytes | memoryview) -> tuple[pb.BaseCommand | None, str | None]:
    """Parse a BaseCommand, partial messages allowed. Returns (command, error)."""
    cmd = pb.BaseCommand()
    try:
        cmd.MergeFromString(bytes(cmd_bytes))
    except (DecodeError, ValueError, RuntimeError) as e:
        return None, f"BaseCommand does not parse: {e}"
    return cmd, None


def parse_frame(frame: bytes | memoryview, sums: bool = True) -> ParsedFrame:
    """Decode one frame given WITHOUT its 4-byte total_size prefix. A checksum that fails is told
    with both CRCs (over the metadata and payload) only where `sums`
    (PayloadPolicy.checksums_kept)."""
    mv = memoryview(frame)
    pf = ParsedFrame()
    n = len(mv)
    if n < 4:
        return _fail(pf, base.TRUNCATED, f"frame of {n} bytes has no command size")
    (cmd_size,) = _U32.unpack_from(mv, 0)
    if cmd_size > n - 4:
        return _fail(pf, base.MALFORMED, f"command size {cmd_size} exceeds frame size {n}")
    cmd_bytes = mv[4 : 4 + cmd_size]
    pf.cmd_size = cmd_size
    pf.type_code = peek_type(cmd_bytes)
    cmd, err = parse_command(cmd_bytes)
    if cmd is None:
        return _fail(pf, base.MALFORMED, err or "bad command")
    pf.cmd = cmd
    if cmd.HasField("type"):
        pf.type_code = cmd.type
    if pf.type_code is None:
        return _fail(pf, base.MALFORMED, "BaseCommand without a type")
    if pf.type_code not in TYPE_NAMES:
        _fail(pf, base.UNKNOWN_COMMAND, f"unknown command type {pf.type_code}")
    elif not cmd.IsInitialized():
        pf.missing = cmd.FindInitializationErrors()
        _fail(pf, base.MALFORMED, "missing required fields: " + ", ".join(pf.missing))
    pos = 4 + cmd_size
    if pos == n:
        return pf
    # ---- payload section
    pf.has_payload_section = True
    if n - pos >= 2 and _U16.unpack_from(mv, pos)[0] == MAGIC_BROKER_ENTRY:
        if n - pos < 6:
            return _fail(pf, base.TRUNCATED, "broker entry metadata header cut short")
        (bem_size,) = _U32.unpack_from(mv, pos + 2)
        if bem_size > n - pos - 6:
            return _fail(pf, base.MALFORMED, f"broker entry metadata size {bem_size} exceeds frame")
        bem = pb.BrokerEntryMetadata()
        try:
            bem.MergeFromString(bytes(mv[pos + 6 : pos + 6 + bem_size]))
        except (DecodeError, ValueError, RuntimeError) as e:
            return _fail(pf, base.MALFORMED, f"broker entry metadata does not parse: {e}")
        pf.broker_entry = bem
        pos += 6 + bem_size
    if n - pos >= 6 and _U16.unpack_from(mv, pos)[0] == MAGIC_CRC:
        (pf.checksum,) = _U32.unpack_from(mv, pos + 2)
        pos += 6
        pf.checksum_ok = crc32c(mv[pos:]) == pf.checksum
        if not pf.checksum_ok:
            why = f"crc32c {crc32c(mv[pos:]):#010x} != {pf.checksum:#010x}" if sums else "crc32c mismatch"
            _fail(pf, base.CHECKSUM_MISMATCH, why)
    if n - pos < 4:
        return _fail(pf, base.TRUNCATED, "message metadata size cut short")
    (meta_size,) = _U32.unpack_from(mv, pos)
    if meta_size > n - pos - 4:
        return _fail(pf, base.MALFORMED, f"metadata size {meta_size} exceeds frame")
    md = pb.MessageMetadata()
    try:
        md.MergeFromString(bytes(mv[pos + 4 : pos + 4 + meta_size]))
    except (DecodeError, ValueError, RuntimeError) as e:
        return _fail(pf, base.MALFORMED, f"message metadata does not parse: {e}")
    pf.metadata = md
    pf.payload = bytes(mv[pos + 4 + meta_size :])
    return pf


def plausible_header(data: bytes | memoryview, pos: int, max_frame: int) -> tuple[bool | None, int, int]:
    """Does a frame plausibly start at `pos`? Returns (verdict, total_size, command_size).

    verdict True: header and command parse; False: not a frame; None: need more bytes to tell.
    A plausible header has command_size <= total_size - 4, a first command byte 0x08 (field 1,
    the type), a known type, and a command that parses. `total_size` may exceed `max_frame`
    (the caller records such a frame as oversize).
    """
    avail = len(data) - pos
    if avail < HEADER + 2:
        return None, 0, 0
    total, cmd_size = struct.unpack_from(">II", data, pos)
    if total < 4 + 2 or cmd_size < 2 or cmd_size > total - 4 or cmd_size > min(max_frame, 1 << 24):
        return False, total, cmd_size
    t = peek_type(bytes(data[pos + HEADER : pos + HEADER + 3]))
    if t is None or t not in TYPE_NAMES:
        return False, total, cmd_size
    if avail < HEADER + cmd_size:
        return None, total, cmd_size
    cmd, err = parse_command(data[pos + HEADER : pos + HEADER + cmd_size])
    if cmd is None or cmd.type != t:
        return False, total, cmd_size
    name = BODY_FIELD.get(t)
    if name is not None and not cmd.HasField(name):
        return False, total, cmd_size
    # payload commands carry something after the command; simple ones usually do not
    return True, total, cmd_size


def sane_header(data: bytes | memoryview, pos: int) -> bool | None:
    """The looser check of a frame that follows a candidate: sizes that fit together and a
    command starting with field 1 (types this version does not know pass). None: too few bytes."""
    if len(data) - pos < HEADER + 1:
        return None
    total, cmd_size = struct.unpack_from(">II", data, pos)
    return total >= 6 and 2 <= cmd_size <= total - 4 and data[pos + HEADER] == 0x08


_SIZES = struct.Struct(">II")  # total_size, command_size


class PulsarRules(Rules):
    """Pulsar's frames for the shared framer: [total_size u32][command_size u32][BaseCommand]
    [payload...], sizes big-endian, total_size counting what follows it; a command starts with
    field 1 (its type)."""

    head_len = hunt_len = HEADER + 2
    prefix_len = 4  # the conversation reads a frame after total_size
    settled_sizes = True  # the sizes are the header's, nothing else

    def __init__(self, max_frame: int):
        self.max_frame = max_frame

    def size(self, buf: base.StreamBuffer) -> int | None:
        total, cmd_size = buf.unpack(_SIZES)
        return None if cmd_size > total - 4 or total < 6 else total + 4

    def credible(self, head: memoryview, size: int) -> bool | None:
        # skip only what really looks like a frame: a damaged size must not swallow the stream
        return plausible_header(head, 0, self.max_frame)[0]

    def judge(self, data: memoryview, i: int) -> int:
        verdict, total, _ = plausible_header(data, i, self.max_frame)
        if verdict is False or total + 4 > base.SKIP_LIMIT_FACTOR * self.max_frame:
            return base.NOT_A_FRAME
        if verdict is None:
            return base.TENTATIVE
        end = i + 4 + total
        if total + 4 > self.max_frame:
            return base.CONFIRMED  # credible and oversize: recorded and skipped exactly
        if end > len(data):
            return base.TENTATIVE
        return base.NOT_A_FRAME if sane_header(data, end) is False else base.CONFIRMED

    def prefix(self, data: bytes) -> bytes:
        return _U32.pack(len(data))  # total_size

    def jump(self, buf: base.StreamBuffer, i: int) -> int:
        j = buf.find(b"\x08", i + HEADER)  # the command's first byte: field 1, the type
        return len(buf) if j < 0 else j - HEADER


def encode_frame(
    cmd: pb.BaseCommand,
    metadata: pb.MessageMetadata | bytes | None = None,
    payload: bytes = b"",
    broker_entry: pb.BrokerEntryMetadata | bytes | None = None,
    checksum: bool = True,
) -> bytes:
    """Build a frame (used by tests and the broker simulator)."""
    cb = cmd.SerializePartialToString()
    out = bytearray()
    out += _U32.pack(len(cb)) + cb
    if metadata is not None:
        if broker_entry is not None:
            be = broker_entry if isinstance(broker_entry, bytes) else broker_entry.SerializeToString()
            out += _U16.pack(MAGIC_BROKER_ENTRY) + _U32.pack(len(be)) + be
        mb = metadata if isinstance(metadata, bytes) else metadata.SerializePartialToString()
        tail = _U32.pack(len(mb)) + mb + payload
        if checksum:
            out += _U16.pack(MAGIC_CRC) + _U32.pack(crc32c(tail))
        out += tail
    return _U32.pack(len(out)) + bytes(out)
