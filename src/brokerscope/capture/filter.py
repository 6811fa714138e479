"""Ingest filters: a capture-time window, hosts and TCP ports, applied while packets are read.

A packet passes when its record time is in [since, until) AND (no host is given, or either of its
addresses lies in one of the hosts' networks) AND (no port is given, or either of its TCP ports is
one of them). The time is checked on the record header, before the packet is parsed; hosts and
ports on the IP and TCP headers, before the payload is copied. A dropped packet is counted
(`filtered` in the split's counters) and never reaches the shuffle.

Times: ISO 8601 (`2026-11-20T14:05:00+01:00`, `2026-11-20 13:05:00.25Z`; without a zone: UTC) or
seconds since the epoch (`1763643900`, `1763643900.5`). Hosts: an IPv4 or IPv6 address, or a
network in CIDR notation (`10.1.2.0/24`). Ports: 1-65535.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import re
from dataclasses import dataclass, field

NEVER_BEFORE = -(1 << 80)  # the window's bounds when no --since / --until is given
NEVER_AFTER = 1 << 80

_EPOCH = re.compile(r"^\s*(\d{1,12})(?:\.(\d{1,9}))?\s*$")
_FRACTION = re.compile(r"^(.*T?\d{2}:\d{2}:\d{2})\.(\d+)(.*)$")


def parse_time(value: str, what: str = "time") -> int:
    """Nanoseconds since the epoch of an ISO 8601 time (naive: UTC) or of epoch seconds."""
    text = str(value).strip()
    m = _EPOCH.match(text)
    if m:
        return int(m.group(1)) * 1_000_000_000 + int((m.group(2) or "0").ljust(9, "0"))
    frac_ns = 0
    f = _FRACTION.match(text.replace(" ", "T", 1))
    base = text
    if f:  # datetime takes at most microseconds: the fraction is kept to the nanosecond here
        base = f.group(1) + f.group(3)
        digits = f.group(2)
        if len(digits) > 9:
            raise ValueError(f"{what}: more than nanosecond precision in {value!r}")
        frac_ns = int(digits.ljust(9, "0"))
    try:
        t = _dt.datetime.fromisoformat(base.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{what}: not a time: {value!r} (ISO 8601, e.g. 2026-11-20T14:05:00Z, naive = UTC; "
            "or epoch seconds)"
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.UTC)
    whole = t.replace(microsecond=0) - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
    return (whole.days * 86400 + whole.seconds) * 1_000_000_000 + (frac_ns or t.microsecond * 1000)


def format_time(ns: int) -> str:
    """ISO 8601 UTC with the fraction the time has (none, or up to nine digits)."""
    s, frac = divmod(ns, 1_000_000_000)
    text = (_dt.datetime(1970, 1, 1, tzinfo=_dt.UTC) + _dt.timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text + "Z"


def parse_host(value: str, what: str = "host") -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(str(value).strip(), strict=False)
    except ValueError:
        raise ValueError(
            f"{what}: not an IP address or network: {value!r} (e.g. 10.0.0.5, 10.0.0.0/24, fd00::/64)"
        ) from None


def parse_port(value, what: str = "port") -> int:
    text = str(value).strip()
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{what}: not a TCP port: {value!r} (1-65535)")
    return int(text)


@dataclass(frozen=True)
class PacketFilter:
    """What to keep. Picklable (it travels to the read tasks inside the settings)."""

    since_ns: int | None = None
    until_ns: int | None = None
    hosts: tuple[str, ...] = ()  # canonical networks, as text
    ports: tuple[int, ...] = ()
    _v4: tuple[tuple[int, int], ...] | None = field(default=None, repr=False, compare=False)
    _v6: tuple[tuple[int, int], ...] | None = field(default=None, repr=False, compare=False)
    _portset: frozenset[int] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def parse(
        cls,
        since: str | None = None,
        until: str | None = None,
        hosts: list[str] | tuple[str, ...] = (),
        ports: list | tuple = (),
        names: tuple[str, str, str, str] = ("since", "until", "host", "port"),
    ) -> PacketFilter | None:
        """A filter from its text values (flags or config), or None when nothing is filtered.
        Raises ValueError naming the value that does not parse (as `names` call them)."""
        lo = parse_time(since, names[0]) if since not in (None, "") else None
        hi = parse_time(until, names[1]) if until not in (None, "") else None
        if lo is not None and hi is not None and hi <= lo:
            raise ValueError(f"{names[1]} ({until}) must be later than {names[0]} ({since})")
        nets = sorted(
            {parse_host(h, names[2]) for h in hosts},
            key=lambda n: (n.version, n.network_address, n.prefixlen),
        )
        portlist = tuple(sorted({parse_port(p, names[3]) for p in ports}))
        if lo is None and hi is None and not nets and not portlist:
            return None
        v4 = tuple((int(n.network_address), int(n.netmask)) for n in nets if n.version == 4)
        v6 = tuple((int(n.network_address), int(n.netmask)) for n in nets if n.version == 6)
        return cls(
            lo,
            hi,
            tuple(str(n) for n in nets),
            portlist,
            v4 if nets else None,
            v6 if nets else None,
            frozenset(portlist),
        )

    # -- what the reader calls ------------------------------------------------------------------
    def window(self) -> tuple[int, int]:
        """[lo, hi) in ns: a record passes when lo <= ts < hi."""
        lo = NEVER_BEFORE if self.since_ns is None else self.since_ns
        hi = NEVER_AFTER if self.until_ns is None else self.until_ns
        return lo, hi

    @property
    def by_endpoint(self) -> bool:
        """Are hosts or ports filtered (checked per TCP segment)?"""
        return self._v4 is not None or bool(self._portset)

    def keep4(self, src: int, dst: int, sport: int, dport: int) -> bool:
        """IPv4 addresses as integers."""
        return _keep(self._v4, self._portset, src, dst, sport, dport)

    def keep6(self, src: bytes, dst: bytes, sport: int, dport: int) -> bool:
        """IPv6 addresses as their 16 bytes."""
        return _keep(
            self._v6, self._portset, int.from_bytes(src, "big"), int.from_bytes(dst, "big"), sport, dport
        )

    def endpoint_spec(self) -> tuple[tuple[int, ...], tuple | None, tuple | None]:
        """The hosts and ports as the compiled walk (capture/_walk.c) checks them, as _keep does:
        (ports, IPv4 (net, mask) ints or None, IPv6 (net, mask) as 16 bytes each or None)."""
        v6 = (
            None
            if self._v6 is None
            else tuple((n.to_bytes(16, "big"), m.to_bytes(16, "big")) for n, m in self._v6)
        )
        return tuple(sorted(self._portset)), self._v4, v6

    # -- what is recorded -----------------------------------------------------------------------
    def text(self) -> str:
        """The canonical text recorded in `inputs.filter`: `since=...;until=...;host=...;port=...`,
        the parts given only, times ISO 8601 UTC, hosts as networks, both sorted."""
        parts = []
        if self.since_ns is not None:
            parts.append(f"since={format_time(self.since_ns)}")
        if self.until_ns is not None:
            parts.append(f"until={format_time(self.until_ns)}")
        if self.hosts:
            parts.append("host=" + ",".join(self.hosts))
        if self.ports:
            parts.append("port=" + ",".join(map(str, self.ports)))
        return ";".join(parts)


def _keep(nets, ports: frozenset[int], s: int, d: int, sport: int, dport: int) -> bool:
    """Either port in `ports` (if any) and either address in one of `nets` (None: any address)."""
    if ports and sport not in ports and dport not in ports:
        return False
    if nets is None:
        return True
    for net, mask in nets:
        if s & mask == net or d & mask == net:
            return True
    return False
