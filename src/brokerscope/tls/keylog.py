"""NSS key log files (SSLKEYLOGFILE): the secrets TLS stacks write for debuggers.

Each line is `<LABEL> <client_random hex> <secret hex>`; `#` starts a comment line. The client
random (32 bytes, from the ClientHello) names the connection. Labels used here:

    CLIENT_RANDOM                     TLS 1.2 (and earlier): the 48-byte master secret
    CLIENT_HANDSHAKE_TRAFFIC_SECRET   TLS 1.3 handshake traffic secrets, one per direction
    SERVER_HANDSHAKE_TRAFFIC_SECRET
    CLIENT_TRAFFIC_SECRET_0           TLS 1.3 first application traffic secrets (KeyUpdate
    SERVER_TRAFFIC_SECRET_0           derives the next ones from these)

Other labels (EXPORTER_SECRET, CLIENT_EARLY_TRAFFIC_SECRET, the `_N` secrets some stacks log
after a KeyUpdate, RSA) are counted and not used. A line that does not parse is counted, by
line number only: its text may hold a secret, so no message ever quotes it.

A key log is a secret: `load` refuses a file that its group or others may read unless forced,
and secrets are `Secret` objects whose repr and str never show the bytes.
"""

from __future__ import annotations

import os
import stat

CLIENT_RANDOM = "CLIENT_RANDOM"
CLIENT_HANDSHAKE = "CLIENT_HANDSHAKE_TRAFFIC_SECRET"
SERVER_HANDSHAKE = "SERVER_HANDSHAKE_TRAFFIC_SECRET"
CLIENT_TRAFFIC_0 = "CLIENT_TRAFFIC_SECRET_0"
SERVER_TRAFFIC_0 = "SERVER_TRAFFIC_SECRET_0"
LABELS = frozenset({CLIENT_RANDOM, CLIENT_HANDSHAKE, SERVER_HANDSHAKE, CLIENT_TRAFFIC_0, SERVER_TRAFFIC_0})
# labels of the format that are known and not used (counted as `ignored`, not `bad`)
KNOWN_UNUSED = frozenset(
    {
        "EXPORTER_SECRET",
        "CLIENT_EARLY_TRAFFIC_SECRET",
        "EARLY_EXPORTER_SECRET",
        "CLIENT_TRAFFIC_SECRET_N",
        "SERVER_TRAFFIC_SECRET_N",
        "RSA",
    }
)
RANDOM_LEN = 32  # ClientHello.random
SECRET_LENS = frozenset({32, 48, 64})  # master secret 48; TLS 1.3 secrets are a hash long
MAX_BAD_LINES_LISTED = 10


class KeyLogError(ValueError):
    """A key log that cannot be used (its path is named, its content never). A ValueError: the
    commands report it as a usage error (exit 2) before Spark starts."""


class KeyLogPermissionError(KeyLogError):
    """A key log readable by its group or by others, read without force."""


class Secret:
    """Key material. Its repr and str say only its length; `reveal()` gives the bytes."""

    __slots__ = ("_b",)

    def __init__(self, data: bytes):
        self._b = bytes(data)

    def reveal(self) -> bytes:
        return self._b

    def __len__(self) -> int:
        return len(self._b)

    def __eq__(self, other) -> bool:
        return isinstance(other, Secret) and other._b == self._b

    def __hash__(self) -> int:
        return hash(self._b)

    def __repr__(self) -> str:
        return f"<secret, {len(self._b)} bytes>"

    __str__ = __repr__

    def __reduce__(self):  # pickled with the settings shipped to tasks
        return (Secret, (self._b,))


class KeyLog:
    """The secrets of many connections, by client random: `get(client_random, label)`.

    Counters: `lines` (non-blank, non-comment), `keys`, `ignored` (known labels not used),
    `bad` (lines that do not parse) and `bad_lines` (the first of their line numbers, with the
    file they are in).
    """

    __slots__ = ("_keys", "lines", "keys", "ignored", "bad", "bad_lines", "files")

    def __init__(self) -> None:
        self._keys: dict[bytes, dict[str, Secret]] = {}
        self.lines = 0
        self.keys = 0
        self.ignored = 0
        self.bad = 0
        self.bad_lines: list[str] = []
        self.files: list[str] = []

    def __repr__(self) -> str:
        return (
            f"KeyLog(connections={len(self._keys)}, keys={self.keys}, ignored={self.ignored}, bad={self.bad})"
        )

    __str__ = __repr__

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, client_random: bytes) -> bool:
        return bytes(client_random) in self._keys

    def get(self, client_random: bytes, label: str) -> Secret | None:
        return self._keys.get(bytes(client_random), {}).get(label)

    def add(self, client_random: bytes, label: str, secret: bytes | Secret) -> None:
        if not isinstance(secret, Secret):
            secret = Secret(secret)
        self._keys.setdefault(bytes(client_random), {})[label] = secret
        self.keys += 1

    def add_text(self, text: str | bytes, source: str = "<key log>") -> None:
        """Parse key log text (a file's, or a pcapng Decryption Secrets Block's) into this log."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        for no, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            self.lines += 1
            why = self._parse(line)
            if why:
                self.bad += 1
                if len(self.bad_lines) < MAX_BAD_LINES_LISTED:
                    self.bad_lines.append(f"{source}:{no}: {why}")

    def _parse(self, line: str) -> str | None:
        """Add one line; a reason (never quoting the line) when it does not parse."""
        parts = line.split()
        if len(parts) != 3:
            return f"{len(parts)} fields, not 3"
        label, rnd, sec = parts
        if label not in LABELS:
            if label in KNOWN_UNUSED:
                self.ignored += 1
                return None
            return "unknown label"
        try:
            r, s = bytes.fromhex(rnd), bytes.fromhex(sec)
        except ValueError:
            return "not hex"
        if len(r) != RANDOM_LEN:
            return f"client random of {len(r)} bytes, not {RANDOM_LEN}"
        if len(s) not in SECRET_LENS:
            return f"secret of {len(s)} bytes"
        self.add(r, label, s)
        return None

    def merge(self, other: KeyLog) -> None:
        for r, labels in other._keys.items():
            self._keys.setdefault(r, {}).update(labels)
        self.lines += other.lines
        self.keys += other.keys
        self.ignored += other.ignored
        self.bad += other.bad
        self.bad_lines += other.bad_lines[: MAX_BAD_LINES_LISTED - len(self.bad_lines)]
        self.files += other.files

    def secrets(self) -> list[bytes]:
        """Every secret's bytes (for tests that look for leaks)."""
        return [s.reveal() for labels in self._keys.values() for s in labels.values()]


def with_texts(keys: KeyLog | None, texts: list, source: str = "a Decryption Secrets Block") -> KeyLog | None:
    """`keys` plus the keys of key log texts (pcapng Decryption Secrets Blocks): a new KeyLog, or
    `keys` itself when there are no texts."""
    if not texts:
        return keys
    out = KeyLog()
    if keys is not None:
        out.merge(keys)
    for text in texts:
        out.add_text(text, source=source)
    return out


def check_permissions(path: str, mode: int) -> None:
    """Refuse a key log its group or others may read (or write)."""
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise KeyLogPermissionError(
            f"{path}: key log is readable by group or others (mode {stat.S_IMODE(mode):04o}); "
            "it holds the connections' secrets: chmod 600 it, or force reading it"
        )


def load(paths: str | os.PathLike | list, force: bool = False) -> KeyLog:
    """Read key log files into one KeyLog. A missing or unreadable file, or one whose permissions
    let its group or others read it (unless `force`), raises KeyLogError naming it."""
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    out = KeyLog()
    for p in paths:
        path = os.fspath(p)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as e:
            raise KeyLogError(f"{path}: cannot read the key log: {e.strerror}") from None
        try:
            st = os.fstat(fd)  # the file opened, not the name: no race with a chmod
            if not stat.S_ISREG(st.st_mode):
                raise KeyLogError(f"{path}: not a regular file")
            if not force:
                check_permissions(path, st.st_mode)
            with os.fdopen(fd, "rb", closefd=False) as fh:
                data = fh.read()
        finally:
            os.close(fd)
        one = KeyLog()
        one.add_text(data, source=path)
        one.files.append(path)
        out.merge(one)
    return out
