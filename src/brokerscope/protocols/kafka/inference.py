"""Inferring the api of a response whose request is not in the capture, only where it is certain.

A Kafka response carries no api key: its correlation id names a request, and when that request
was not captured (the capture started mid-stream, or a gap swallowed it) nothing on the wire says
which message the body is. Kafka clients (librdkafka, the Java client per connection) number
their requests 1, 2, 3, ... so the requests with the neighbouring correlation ids N-1 and N+1 are
the best witnesses of what request N was. The rule (all must hold, else the row stays undecoded):

1. at least one of the requests N-1 / N+1 is in the capture, and every captured one is of the
   same (api key, version);
2. every (api key, version) requested on the connection has a decode plan (an api the specs lack
   could be the answer, and could not be ruled out);
3. decoding the response under each (api key, version) requested on the connection, exactly one
   decodes exactly: header and body consume every byte (no trailing bytes, no unknown tagged
   fields), every value is plausible (error codes in Kafka's range, throttle times and partition
   indexes not negative, ports in range, strings valid printable UTF-8, record sets that parse
   with good checksums), and that one is the neighbours' api.

`MissingRequests` is one connection's side of this: what was requested on it, and the responses
held until it ends, when every api requested on it is known.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import base
from ..base import S2C, Context, Row
from . import records as rec
from . import rows, schema
from .names import EXTRA_API_NAMES

if TYPE_CHECKING:
    from .conversation import Pending

MAX_HELD_MISSING = 1_000  # responses held per connection
MAX_HELD_MISSING_BYTES = 16 * 1024 * 1024
RECENT_REQUESTS = 1_024  # correlation id -> (api key, version) of the latest requests
MAX_REQUESTED_APIS = 4_096  # distinct (api key, version) pairs remembered per connection
MAX_ERROR_CODE = 200  # Kafka's error codes run from -1 (UNKNOWN_SERVER_ERROR) to ~130 today
_PARTITION_KEYS = frozenset(("PartitionIndex", "Partition", "Index", "PartitionId"))


class Implausible(base.DecodeError):
    """A decoded value no broker sends."""


def _check_text(s: str, where: str) -> None:
    if "\ufffd" in s:
        raise Implausible(f"{where}: not valid UTF-8")
    for ch in s:
        if ord(ch) < 32 and ch not in "\t\r\n":
            raise Implausible(f"{where}: control character {ord(ch):#04x}")


def _walk(d: dict, records_fields: tuple[str, ...], cap: int, summarize) -> None:
    """Check every value of a decoded struct; replace record sets by their summary in place."""
    for k, v in list(d.items()):
        if k == "_unknown_tagged_fields":
            raise Implausible("unknown tagged fields")
        if isinstance(v, dict):
            _walk(v, records_fields, cap, summarize)
        elif isinstance(v, list):
            for item in v:
                if isinstance(item, dict):
                    _walk(item, records_fields, cap, summarize)
                elif isinstance(item, str):
                    _check_text(item, k)
        elif isinstance(v, bool) or v is None:
            continue
        elif isinstance(v, int):
            if k.endswith("ErrorCode") and not -1 <= v <= MAX_ERROR_CODE:
                raise Implausible(f"{k} = {v}")
            if (k == "ThrottleTimeMs" or k in _PARTITION_KEYS) and v < 0:
                raise Implausible(f"{k} = {v}")
            if k == "Port" and not 0 <= v <= 65535:
                raise Implausible(f"{k} = {v}")
        elif isinstance(v, str):
            _check_text(v, k)
        elif isinstance(v, bytes) and k in records_fields:
            if v:
                rs = rec.read_record_set(v, cap)
                if rs.error or any(b.status != base.OK for b in rs.batches):
                    raise Implausible(f"{k}: {rs.error or 'a batch does not decode cleanly'}")
                d[k] = summarize(rs)
            else:
                d[k] = summarize(rec.RecordSet([]))


def decode_exact(frame: bytes, api_key: int, version: int, cap: int, summarize, trailing: int = 0) -> dict:
    """The response body under (api_key, version), decoded exactly (but for up to `trailing`
    bytes after it, as schema.decode_body keeps them) and plausibly; raises schema.DecodeError
    or Implausible otherwise."""
    p = schema.plan(api_key, version, "response")
    if p is None:
        raise schema.DecodeError("no decode plan")
    _corr, tagged, pos = schema.read_response_header(frame, api_key, version)
    if tagged:
        raise Implausible("tagged fields in the response header")
    body, end = p.read(frame, pos)
    if not 0 <= len(frame) - end <= trailing:
        raise schema.DecodeError(f"{len(frame) - end} bytes left over")
    _walk(body, p.records_fields, cap, summarize)
    return body


def label(kv: tuple[int, int]) -> str:
    name = schema.api_name(kv[0]) or EXTRA_API_NAMES.get(kv[0]) or f"api {kv[0]}"
    return f"{name} v{kv[1]}"


def infer(
    frame: bytes,
    corr: int,
    neighbours: dict[int, tuple[int, int]],
    requested: dict[tuple[int, int], bool],
    cap: int,
    summarize,
) -> tuple[tuple[int, int] | None, dict | None, str]:
    """((api key, version), body, reason) when certain, else (None, None, why not)."""
    if not neighbours:
        return None, None, f"no request with correlation id {corr - 1} or {corr + 1} in the capture"
    kinds = set(neighbours.values())
    ids = " and ".join(str(c) for c in sorted(neighbours))
    if len(kinds) > 1:
        return (
            None,
            None,
            f"the neighbouring requests ({ids}) are of different apis: "
            + ", ".join(label(k) for k in sorted(kinds)),
        )
    (kv,) = kinds
    undecodable = sorted(k for k, ok in requested.items() if not ok)
    if undecodable:
        return (
            None,
            None,
            (
                "the connection carries requests the specs cannot decode ("
                + ", ".join(label(k) for k in undecodable)
                + "): they cannot be ruled out"
            ),
        )
    fits: dict[tuple[int, int], dict] = {}
    for cand in sorted(requested):
        try:
            fits[cand] = decode_exact(frame, cand[0], cand[1], cap, summarize)
        except Exception:  # noqa: BLE001 - any failure means: not a fit (never a guess)
            continue
    tried = ", ".join(label(k) for k in sorted(requested))
    if len(fits) > 1:
        return (
            None,
            None,
            "ambiguous: the body decodes exactly as " + " and as ".join(label(k) for k in sorted(fits)),
        )
    if kv not in fits:
        what = f"as {label(next(iter(fits)))} only" if fits else "under none of them"
        return (
            None,
            None,
            (
                f"the neighbouring requests ({ids}) are {label(kv)}, but of the apis requested on this "
                f"connection ({tried}) the body decodes exactly {what}"
            ),
        )
    which = (
        f"requests with correlation ids {ids} are"
        if len(neighbours) > 1
        else f"request with correlation id {ids} is"
    )
    return (
        kv,
        fits[kv],
        (
            f"request not captured; the {which} {label(kv)}, and of the apis requested on this "
            f"connection ({tried}) only {label(kv)} decodes this response exactly (every byte consumed, "
            "plausible values)"
        ),
    )


@dataclass
class HeldResponse:
    """A response whose request is not in the capture, waiting for the end of the connection."""

    corr: int
    frame: bytes
    offset: int
    ts0: int
    ts1: int
    neighbours: dict = field(default_factory=dict)  # correlation id N-1 / N+1 -> (api key, version)


class MissingRequests:
    """One connection's requests as inference needs them (the (api key, version) pairs requested,
    the latest requests by correlation id) and its held responses whose request is missing."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.recent: OrderedDict[int, tuple[int, int]] = OrderedDict()
        self.requested: dict[tuple[int, int], bool] = {}  # (api key, version) -> decodable
        self.requested_overflow = False
        self.held: OrderedDict[int, HeldResponse] = OrderedDict()  # by arrival
        self.held_by_corr: dict[int, list[HeldResponse]] = {}
        self.held_bytes = 0
        self._seq = 0

    def note(self, corr: int, key: int, ver: int) -> None:
        """Remember what was requested: the candidates and neighbours for inference."""
        kv = (key, ver)
        if kv not in self.requested:
            if len(self.requested) < MAX_REQUESTED_APIS:
                self.requested[kv] = schema.plan(key, ver, "response") is not None
            else:
                self.requested_overflow = True
        self.recent[corr] = kv
        self.recent.move_to_end(corr)
        if len(self.recent) > RECENT_REQUESTS:
            self.recent.popitem(last=False)
        for c in (corr - 1, corr + 1):
            for h in self.held_by_corr.get(c, ()):
                h.neighbours[corr] = kv

    def hold(
        self, corr: int, frame: bytes, offset: int, ts0: int, ts1: int, pending: dict[int, Pending]
    ) -> list[Row]:
        """Hold a response whose request is missing (`pending`: the requests still waiting, also
        witnesses); returns the rows of the oldest held ones, released uninferred past the limits."""
        h = HeldResponse(corr, frame, offset, ts0, ts1)
        for c in (corr - 1, corr + 1):
            kv = self.recent.get(c)
            if kv is None and c in pending:
                kv = (pending[c].api_key, pending[c].version)
            if kv is not None:
                h.neighbours[c] = kv
        self._seq += 1
        self.held[self._seq] = h
        self.held_by_corr.setdefault(corr, []).append(h)
        self.held_bytes += len(frame)
        out: list[Row] = []
        while len(self.held) > MAX_HELD_MISSING or (
            self.held_bytes > MAX_HELD_MISSING_BYTES and len(self.held) > 1
        ):
            out.append(self._release(None))
        return out

    def take_pending(self, pending: dict) -> list[tuple[bytes, int, int, int]]:
        """The held responses whose request is pending after all (read late: Framer.reread_if_cut),
        taken out, oldest first: (frame, offset, first and last ts)."""
        out = []
        for seq, h in list(self.held.items()):
            if h.corr not in pending:
                continue
            del self.held[seq]
            self._forget(h)
            out.append((h.frame, h.offset, h.ts0, h.ts1))
        return out

    def take(self, corr: int) -> tuple[bytes, int, int, int] | None:
        """The oldest held response of `corr`, taken out (its request read after it: the capture
        has the response first), as take_pending gives them; None if none is held."""
        same = self.held_by_corr.get(corr)
        if not same:
            return None
        h = same[0]
        for seq, x in self.held.items():
            if x is h:
                del self.held[seq]
                break
        self._forget(h)
        return h.frame, h.offset, h.ts0, h.ts1

    def _forget(self, h) -> None:
        """A held response taken out of `held`: out of the bytes held and of `held_by_corr`."""
        self.held_bytes -= len(h.frame)
        same = self.held_by_corr.get(h.corr, [])
        if h in same:
            same.remove(h)
        if not same:
            self.held_by_corr.pop(h.corr, None)

    def release_all(self, topic_ids: dict[str, str]) -> list[Row]:
        """At the end of the connection: the commands row of every held response, oldest first."""
        out: list[Row] = []
        while self.held:
            out.append(self._release(topic_ids))
        return out

    def _release(self, topic_ids: dict[str, str] | None) -> Row:
        """The commands row of the oldest held response: decoded under the inferred api when that
        is certain (decode_status stays request_missing), else undecoded with the reason. Without
        `topic_ids` (the topic names learned on the connection) it is not inferred at all."""
        _seq, h = self.held.popitem(last=False)
        self._forget(h)
        kv = body = None
        if topic_ids is None:
            why = "not held for inference: too many responses without their request on this connection"
        elif self.requested_overflow:
            why = f"more than {MAX_REQUESTED_APIS} (api, version) pairs requested on this connection"
        else:
            try:
                cap = self.ctx.max_decompressed_bytes
                kv, body, why = infer(
                    h.frame, h.corr, h.neighbours, self.requested, cap, rows.records_summary
                )
            except Exception as e:  # never raise out of the decoder (close() has no other guard)
                kv, body, why = None, None, f"inference failed: {type(e).__name__}: {e}"
        if kv is None or body is None:
            return rows.error_row(
                self.ctx,
                S2C,
                h.offset,
                base.REQUEST_MISSING,
                "response whose request is not in the capture (api key and version unknown)",
                None,
                len(h.frame) + 4,
                h.ts0,
                h.ts1,
                correlation_id=h.corr,
                details=base.to_json({"inferred": False, "inferred_reason": why}),
            )
        return _inferred_row(h, kv, body, why, topic_ids)


def _inferred_row(h: HeldResponse, kv: tuple[int, int], body: dict, why: str, topic_ids: dict) -> Row:
    """The commands row of a held response decoded under its inferred api."""
    key, ver = kv
    columns = rows.summary_columns(schema.plan(key, ver, "response").summarize(body), body, topic_ids)
    details = {"inferred": True, "inferred_reason": why, **rows.clean(body)}
    return (
        "commands",
        {
            "direction": S2C,
            "command": rows.api_name(key),
            "command_code": key,
            "api_version": ver,
            "correlation_id": h.corr,
            **columns,
            "size": len(h.frame) + 4,
            "stream_offset": h.offset,
            "ts_ns": h.ts0,
            "ts_end_ns": h.ts1,
            "decode_status": base.REQUEST_MISSING,
            "decode_error": f"response whose request is not in the capture; decoded as "
            f"{label(kv)}, inferred from the neighbouring requests (details.inferred_reason)",
            "details": base.to_json(details),
            # an inferred type was not read from the wire: no bytes (Context.raw)
            "raw": None,
        },
    )
