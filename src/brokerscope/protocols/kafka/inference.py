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
"""

from __future__ import annotations

from .. import base
from . import records as rec
from . import schema
from .names import EXTRA_API_NAMES

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


def decode_exact(frame: bytes, api_key: int, version: int, cap: int, summarize) -> dict:
    """The response body under (api_key, version), decoded exactly and plausibly; raises
    schema.DecodeError or Implausible otherwise."""
    p = schema.plan(api_key, version, "response")
    if p is None:
        raise schema.DecodeError("no decode plan")
    _corr, tagged, pos = schema.read_response_header(frame, api_key, version)
    if tagged:
        raise Implausible("tagged fields in the response header")
    body, end = p.read(frame, pos)
    if end != len(frame):
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
