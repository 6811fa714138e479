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


WRITERS = ("auto", "spark", "embedded")  # lake.writer (lake.py)
POLICIES = ("keep", "truncate", "hash", "drop")  # payload.policy (protocols/base.PayloadPolicy)
KiB, MiB, GiB = 1024, 1024**2, 1024**3

# What each number or word setting must be, where its default alone does not say: sizes (bytes,
# or a KiB/MiB/GiB string), whole numbers, numbers, or one of some words, and the range a value
# must fall in (inclusive; None: no bound). The workers read these settings: a wrong one is an
# error here, on the driver, naming it, not a traceback from every task or a run that decodes
# nothing (sniff_bytes = 0 left every stream unknown; max_frame_bytes = -1 made every frame
# oversize).
_FRAME_LIMITS = {
    "max_frame_bytes": ("size", 1 * KiB, 2 * GiB),
    "max_decompressed_bytes": ("size", 1 * KiB, None),
    "max_raw_bytes": ("size", 0, None),
}
_RULES: dict[str, tuple] = {
    "lake.path": ("name",),
    "lake.writer": ("word", WRITERS),
    "lake.target_file_size": ("size", 1 * MiB, None),
    "lake.vacuum_retain_hours": ("number", 0, None),
    "spark.master": ("name",),
    "spark.app_name": ("name",),
    "spark.shuffle_partitions": ("int", 0, 100_000),
    "inputs.exclude": ("strings", "globs"),
    "capture.split_size": ("size", 256, None),  # below 64KiB only for tests: a few records
    "capture.max_pending_fragments": ("int", 0, None),
    "capture.batch_packets": ("int", 1, None),
    "capture.batch_bytes": ("size", 64 * KiB, 1 * GiB),
    "tcp.idle_timeout_s": ("number", 1, None),
    "tcp.max_reorder_bytes": ("size", 0, None),
    "tcp.reorder_timeout_s": ("number", 0, None),
    "tcp.sniff_bytes": ("size", 64, 16 * MiB),  # the sniffers read a frame header or two
    **{f"limits.{k}": rule for k, rule in _FRAME_LIMITS.items()},
    "payload.policy": ("word", POLICIES),
    # a string, epoch seconds or a TOML date-time: PacketFilter.parse checks them, naming them
    "filter.since": ("any",),
    "filter.until": ("any",),
    "payload.truncate_bytes": ("size", 0, None),
    "tls.keylog_files": ("strings", "paths"),
}


def _rule(name: str, default) -> tuple:
    """The rule of setting `name`: from _RULES, else what its default's type says."""
    if name in _RULES:
        return _RULES[name]
    for kind, types in (("bool", bool), ("text", str), ("list", list)):
        if isinstance(default, types):
            return (kind,)
    return ("any",)


def _check_value(name: str, value, rule: tuple) -> None:
    """`value` of setting `name` is what `rule` says, or a ValueError naming the setting. A quoted
    "false" is no boolean: bool() read it as true (keylog_insecure_ok = "false" let in a key log
    any process may read)."""
    kind = rule[0]
    if kind == "bool" and not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, not {value!r}")
    if kind == "text" and not isinstance(value, str):
        raise ValueError(f"{name} must be a string, not {value!r}")
    if kind == "name" and not (isinstance(value, str) and value.strip()):
        raise ValueError(f"{name} must be a non-empty string, not {value!r}")
    if kind == "list" and not isinstance(value, list):
        raise ValueError(f"{name} must be a list, not {value!r}")
    if kind == "strings" and not (isinstance(value, list) and all(isinstance(v, str) and v for v in value)):
        raise ValueError(f"{name} must be a list of {rule[1]}, not {value!r}")
    if kind == "word" and value not in rule[1]:
        raise ValueError(f"{name} must be {'|'.join(rule[1])}, not {value!r}")
    if kind not in ("size", "int", "number"):
        return
    if kind == "size":
        try:
            number = parse_size(value)
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None
    else:
        number = _number(value, kind == "int")
        if number is None:
            what = "a whole number" if kind == "int" else "a number"
            raise ValueError(f"{name} must be {what}, not {value!r}")
    low, high = rule[1], rule[2]
    if number < low or (high is not None and number > high):
        unit = " bytes" if kind == "size" else ""
        span = f"from {low:,}{unit} to {high:,}{unit}" if high is not None else f"at least {low:,}{unit}"
        raise ValueError(f"{name} must be {span}, not {value!r}")


def _number(value, whole: bool) -> int | float | None:
    """A number setting's value (a quoted one too, as the accessors read it), or None: not a
    boolean, not NaN or infinite, and for `whole` an integer."""
    if isinstance(value, str):
        try:
            value = int(value) if whole else float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)):
        return None
    return value if value == value and abs(value) != float("inf") else None


def check_setting(name: str, value, setting: str) -> None:
    """`value` for `setting` (a _RULES key) as a flag or option `name` gives it, checked as the
    setting is, the error naming `name`."""
    _check_value(name, value, _RULES[setting])


def _check_all(default: dict, raw: dict, where: str = "") -> None:
    """Every setting of `raw` that has a default, against its rule ([spark.conf], [ports] and
    [protocols.*] have their own checks)."""
    for key, d in default.items():
        if key not in raw:
            continue
        if not isinstance(d, dict):
            _check_value(f"{where}{key}", raw[key], _rule(f"{where}{key}", d))
        elif key not in ("conf", "ports", "protocols"):
            _check_all(d, raw[key], f"{where}{key}.")


def _check_protocol_options(raw: dict, default: dict) -> None:
    """`[protocols.<name>]`: a known protocol; its own options, and the frame limits of [limits]."""
    for name, opts in raw.items():
        if name not in known_names():
            raise ValueError(f"protocols.{name}: unknown protocol (one of {', '.join(known_names())})")
        own = default.get(name, {})
        for key, value in opts.items():
            where = f"protocols.{name}.{key}"
            if key in _FRAME_LIMITS:
                _check_value(where, value, _FRAME_LIMITS[key])
            elif key in own:
                _check_value(where, value, _rule(where, own[key]))
            else:
                raise ValueError(f"unknown setting {where}")


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
        elif isinstance(base.get(k), dict) or (k in base and isinstance(v, dict)):
            # `lake = "x"` (a value where a [lake] table is) was a KeyError traceback later
            what = "a table" if isinstance(base[k], dict) else "a setting, not a table"
            raise ValueError(f"{where}{k} must be {what}, not {v!r}")
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
            try:
                with p.open("rb") as fh:
                    _merge(raw, tomllib.load(fh))
            except tomllib.TOMLDecodeError as e:
                raise ValueError(f"{p}: not valid TOML: {e}") from None
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
        base = defaults()
        _check_all(base, self.raw)
        _check_protocol_options(self.raw["protocols"], base["protocols"])
        for name, ports in self.raw["ports"].items():
            if name not in known_names():
                raise ValueError(f"ports.{name}: unknown protocol (one of {', '.join(known_names())})")
            if not isinstance(ports, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536 for p in ports
            ):
                raise ValueError(f"ports.{name} must be a list of TCP ports, not {ports!r}")
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

    @property
    def payload_policy(self) -> PayloadPolicy:
        pay = self.raw["payload"]
        return PayloadPolicy(
            mode=pay["policy"],
            truncate_bytes=parse_size(pay["truncate_bytes"]),
            apply_to_keys=bool(pay["apply_to_keys"]),
        )

    def context(self, protocol: str | None = None) -> Context:
        """The decoder context, with [protocols.<name>] limits applied for `protocol`."""
        lim = dict(self.raw["limits"])
        popts = self.raw.get("protocols", {})
        if protocol and protocol in popts:
            for k in ("max_frame_bytes", "max_decompressed_bytes", "max_raw_bytes"):
                if k in popts[protocol]:
                    lim[k] = popts[protocol][k]
        return Context(
            max_frame_bytes=parse_size(lim["max_frame_bytes"]),
            max_decompressed_bytes=parse_size(lim["max_decompressed_bytes"]),
            max_raw_bytes=parse_size(lim["max_raw_bytes"]),
            payload=self.payload_policy,
            protocol_options=popts,
            schemas=self.schemas,
        )
