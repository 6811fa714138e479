"""Typed settings: embedded defaults < a TOML file (conf/brokerscope.toml, --conf) < CLI flags."""

from __future__ import annotations

import copy
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .capture.filter import PacketFilter
from .protocols.base import Context, PayloadPolicy, known_names, protocols

# the embedded defaults; `[ports]` and `[protocols.*]` come from each protocol's registry entry
_CORE: dict = {
    "lake": {
        "path": "lake",
        "writer": "auto",
        "optimize_after_run": True,
        "target_file_size": 128 * 1024**2,
        "vacuum_retain_hours": 168,
    },
    "spark": {
        "master": "local[*]",
        "app_name": "brokerscope",
        "shuffle_partitions": 0,
        "packet_runs": True,
        "class_cache": True,
        "ml_jars": False,
        "conf": {},
    },
    # globs of file and directory names (or paths below a directory given) that are no input
    "inputs": {"exclude": []},
    "capture": {
        "split_size": 128 * 1024**2,
        "max_pending_fragments": 4096,
        "batch_packets": 8192,
        "batch_bytes": 16 * 1024**2,
    },
    "tcp": {
        "idle_timeout_s": 600,
        "max_reorder_bytes": 8 * 1024**2,
        "reorder_timeout_s": 5.0,
        "sniff_bytes": 4096,
    },
    "limits": {
        "max_frame_bytes": 100 * 1024**2,
        "max_decompressed_bytes": 64 * 1024**2,
        "max_raw_bytes": 4096,
    },
    "payload": {"policy": "keep", "truncate_bytes": 256, "apply_to_keys": False},
    "filter": {"since": "", "until": "", "hosts": [], "ports": []},
    "tls": {"keylog_files": [], "keylog_insecure_ok": False},
    # every protocol with an identity rule; off by default (it reads the run's rows back again)
    "journeys": {"enabled": False},
    # Kafka and Iggy offsets, Pulsar's backlogs where a consumer-stats answer was captured: off
    # like the journeys
    "lag": {"enabled": False},
}


def defaults() -> dict:
    """The embedded defaults: the core settings above, plus each protocol's ports and options."""
    raw = copy.deepcopy(_CORE)
    raw["ports"] = {name: list(p.default_ports) for name, p in protocols().items()}
    raw["protocols"] = {name: copy.deepcopy(p.options) for name, p in protocols().items() if p.options}
    return raw


def _check_booleans(default: dict, raw: dict, where: str = "") -> None:
    """Every setting whose default is true or false is true or false: a quoted "false" is a
    non-empty string, so true (keylog_insecure_ok = "false" let any process's key log in)."""
    for key, d in default.items():
        if key not in raw:
            continue
        if isinstance(d, dict) and isinstance(raw[key], dict):
            _check_booleans(d, raw[key], f"{where}{key}.")
        elif isinstance(d, bool) and not isinstance(raw[key], bool):
            raise ValueError(f"{where}{key} must be true or false, not {raw[key]!r}")


def schema_options() -> dict[str, str]:
    """Protocol -> its `[protocols.<name>]` key naming a protobuf schema file (protocols/schema.py)."""
    return {name: p.schema_option for name, p in protocols().items() if p.schema_option}


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.I)
_UNITS = {
    "b": 1,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
}


def parse_size(v) -> int:
    """`"128MiB"` -> 134217728; ints pass through (not booleans: `true` is no size)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    m = _SIZE.match(str(v))
    if not m:
        raise ValueError(f"not a size: {v!r} (use bytes or a KiB/MiB/GiB suffix)")
    return int(float(m.group(1)) * _UNITS[(m.group(2) or "B").lower()])


def _merge(base: dict, over: dict, where: str = "") -> dict:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v, f"{where}{k}.")
        elif (
            k not in base
            and where not in ("ports.", "protocols.", "spark.conf.")
            and not where.startswith("protocols.")
        ):
            raise ValueError(f"unknown setting {where}{k}")
        else:
            base[k] = v
    return base


@dataclass
class Settings:
    raw: dict = field(default_factory=defaults)
    # protocol -> serialized FileDescriptorSet of its schema_file, read once on the driver
    schemas: dict[str, bytes] = field(default_factory=dict)
    # the TLS keys of [tls] keylog_files (and of the captures' Decryption Secrets Blocks), read on
    # the driver by load_tls_keys and shipped to the tasks with the settings; never logged
    tls_keys: object = field(default=None, repr=False, compare=False)  # tls.KeyLog | None

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def load(cls, conf_file: str | Path | None = None, overrides: dict | None = None) -> Settings:
        raw = defaults()
        if conf_file is not None:
            p = Path(conf_file)
            if not p.is_file():
                raise FileNotFoundError(f"config file not found: {p}")
            with p.open("rb") as fh:
                _merge(raw, tomllib.load(fh))
        if overrides:
            _merge(raw, overrides)
        s = cls(raw)
        s.validate()
        s.load_schemas()
        return s

    def load_schemas(self) -> None:
        """Read the schema files named in [protocols.*] (relative paths: from the working dir)."""
        from .protocols.schema import load_descriptor_set

        self.schemas = {}
        for proto, key in schema_options().items():
            path = self.raw.get("protocols", {}).get(proto, {}).get(key)
            if path:
                self.schemas[proto] = load_descriptor_set(path)

    def load_tls_keys(self) -> None:
        """Read the key logs of [tls] keylog_files once, on the driver (tls.load: a file its
        group or others may read raises tls.KeyLogPermissionError, a ValueError naming the file,
        unless keylog_insecure_ok). Commands that decode call it; others never read key logs."""
        from . import tls

        t = self.raw["tls"]
        if t["keylog_files"] and self.tls_keys is None:
            try:
                self.tls_keys = tls.load(t["keylog_files"], force=bool(t["keylog_insecure_ok"]))
            except tls.KeyLogPermissionError as e:  # say how to force it here
                raise tls.KeyLogPermissionError(
                    f"{e} (--tls-keylog-insecure-ok, or [tls] keylog_insecure_ok = true)"
                ) from None

    def validate(self) -> None:
        pol = self.raw["payload"]["policy"]
        if pol not in ("keep", "truncate", "hash", "drop"):
            raise ValueError(f"payload.policy must be keep|truncate|hash|drop, not {pol!r}")
        for name, ports in self.raw["ports"].items():
            if name not in known_names():
                raise ValueError(f"ports.{name}: unknown protocol (one of {', '.join(known_names())})")
            if not isinstance(ports, list) or not all(isinstance(p, int) and 0 < p < 65536 for p in ports):
                raise ValueError(f"ports.{name} must be a list of TCP ports, not {ports!r}")
        if self.split_size < 64 * 1024:
            # small splits are allowed for tests, but never below a few records
            if self.split_size < 256:
                raise ValueError("capture.split_size must be at least 256 bytes")
        if not 64 * 1024 <= self.batch_bytes <= 1024**3:
            raise ValueError(f"capture.batch_bytes must be from 64KiB to 1GiB, not {self.batch_bytes}")
        _check_booleans(defaults(), self.raw)
        for key in ("hosts", "ports"):
            if not isinstance(self.raw["filter"][key], list):
                raise ValueError(f"filter.{key} must be a list, not {self.raw['filter'][key]!r}")
        ex = self.raw["inputs"]["exclude"]
        if not isinstance(ex, list) or not all(isinstance(g, str) and g for g in ex):
            raise ValueError(f"inputs.exclude must be a list of globs, not {ex!r}")
        files = self.raw["tls"]["keylog_files"]
        if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
            raise ValueError(f"tls.keylog_files must be a list of paths, not {files!r}")
        self.packet_filter  # noqa: B018 - parsed for its errors (each names the value)

    # -- typed accessors ----------------------------------------------------------------------
    @property
    def lake_path(self) -> str:
        return str(self.raw["lake"]["path"])

    @property
    def writer(self) -> str:
        return str(self.raw["lake"]["writer"])

    @property
    def journeys(self) -> bool:
        """Compute the journeys table after each run (journeys.py)."""
        return bool(self.raw["journeys"]["enabled"])

    @property
    def lag(self) -> bool:
        """Compute the lag table after each run (lag.py)."""
        return bool(self.raw["lag"]["enabled"])

    @property
    def derived_tables(self) -> tuple[str, ...]:
        """The derived tables (tables.DERIVED_TABLES) each run computes."""
        return tuple(t for t, on in (("journeys", self.journeys), ("lag", self.lag)) if on)

    @property
    def optimize_after_run(self) -> bool:
        return bool(self.raw["lake"]["optimize_after_run"])

    def _size(self, section: str, key: str) -> int:
        """A size setting, or a ValueError naming it."""
        try:
            return parse_size(self.raw[section][key])
        except ValueError as e:
            raise ValueError(f"{section}.{key}: {e}") from None

    @property
    def target_file_size(self) -> int:
        return self._size("lake", "target_file_size")

    @property
    def vacuum_retain_hours(self) -> float:
        return float(self.raw["lake"]["vacuum_retain_hours"])

    @property
    def exclude(self) -> list[str]:
        """Globs of names (or paths below a directory given) that are no input (inputs.discover)."""
        return list(self.raw["inputs"]["exclude"])

    @property
    def master(self) -> str:
        return str(self.raw["spark"]["master"])

    @property
    def split_size(self) -> int:
        return self._size("capture", "split_size")

    @property
    def batch_packets(self) -> int:
        return int(self.raw["capture"]["batch_packets"])

    @property
    def batch_bytes(self) -> int:
        return self._size("capture", "batch_bytes")

    @property
    def max_pending_fragments(self) -> int:
        return int(self.raw["capture"]["max_pending_fragments"])

    @property
    def idle_timeout_ns(self) -> int:
        return int(float(self.raw["tcp"]["idle_timeout_s"]) * 1e9)

    @property
    def reorder_timeout_ns(self) -> int:
        return int(float(self.raw["tcp"]["reorder_timeout_s"]) * 1e9)

    @property
    def max_reorder_bytes(self) -> int:
        return self._size("tcp", "max_reorder_bytes")

    @property
    def sniff_bytes(self) -> int:
        return self._size("tcp", "sniff_bytes")

    @property
    def packet_filter(self) -> PacketFilter | None:
        """The ingest filter of [filter] (capture/filter.py), None when nothing is filtered."""
        f = self.raw["filter"]
        names = ("filter.since", "filter.until", "filter.hosts", "filter.ports")
        return PacketFilter.parse(f["since"], f["until"], f["hosts"], f["ports"], names)

    @property
    def ports(self) -> dict[int, str]:
        """server port -> protocol name"""
        out: dict[int, str] = {}
        for name, plist in self.raw["ports"].items():
            for p in plist:
                out[int(p)] = name
        return out

    def add_port(self, proto: str, port: int) -> None:
        self.raw["ports"].setdefault(proto, [])
        if port not in self.raw["ports"][proto]:
            self.raw["ports"][proto].append(port)
        self.validate()

    def context(self, protocol: str | None = None) -> Context:
        """The decoder context, with [protocols.<name>] limits applied for `protocol`."""
        lim = dict(self.raw["limits"])
        popts = self.raw.get("protocols", {})
        if protocol and protocol in popts:
            for k in ("max_frame_bytes", "max_decompressed_bytes", "max_raw_bytes"):
                if k in popts[protocol]:
                    lim[k] = popts[protocol][k]
        pay = self.raw["payload"]
        return Context(
            max_frame_bytes=parse_size(lim["max_frame_bytes"]),
            max_decompressed_bytes=parse_size(lim["max_decompressed_bytes"]),
            max_raw_bytes=parse_size(lim["max_raw_bytes"]),
            payload=PayloadPolicy(
                mode=pay["policy"],
                truncate_bytes=parse_size(pay["truncate_bytes"]),
                apply_to_keys=bool(pay["apply_to_keys"]),
            ),
            protocol_options=popts,
            schemas=self.schemas,
        )
