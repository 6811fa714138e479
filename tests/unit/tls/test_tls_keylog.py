"""NSS key log files: the lines used, counted and refused, and the file's permissions."""

from __future__ import annotations

import os
import pickle

import pytest

from brokerscope.tls import KeyLog, KeyLogError, KeyLogPermissionError, Secret, load
from brokerscope.tls import keylog as kl

R1, R2 = "11" * 32, "22" * 32
MASTER = "ab" * 48
S32 = "cd" * 32

TEXT = f"""# TLS secrets log file
CLIENT_RANDOM {R1} {MASTER}

   # an indented comment
CLIENT_HANDSHAKE_TRAFFIC_SECRET {R2} {S32}
SERVER_HANDSHAKE_TRAFFIC_SECRET {R2} {S32.upper()}
CLIENT_TRAFFIC_SECRET_0 {R2} {S32}
SERVER_TRAFFIC_SECRET_0 {R2} {S32}
EXPORTER_SECRET {R2} {S32}
CLIENT_TRAFFIC_SECRET_N {R2} {S32}
CLIENT_RANDOM {R1}
CLIENT_RANDOM {R1} {MASTER} extra
MYSTERY_SECRET {R1} {MASTER}
CLIENT_RANDOM {R1[:-2]} {MASTER}
CLIENT_RANDOM {R1} zz{MASTER[2:]}
CLIENT_RANDOM {R1} {MASTER[:-2]}
"""


def test_lines_used_ignored_and_bad():
    k = KeyLog()
    k.add_text(TEXT, "keys.log")
    assert (k.keys, k.ignored, k.bad, k.lines) == (5, 2, 6, 13)
    assert len(k) == 2 and bytes.fromhex(R1) in k
    assert k.get(bytes.fromhex(R1), kl.CLIENT_RANDOM).reveal() == bytes.fromhex(MASTER)
    assert k.get(bytes.fromhex(R2), kl.SERVER_HANDSHAKE).reveal() == bytes.fromhex(S32)
    assert k.get(bytes.fromhex(R2), "EXPORTER_SECRET") is None
    assert k.get(b"\x33" * 32, kl.CLIENT_RANDOM) is None
    assert k.bad_lines == [
        "keys.log:11: 2 fields, not 3",
        "keys.log:12: 4 fields, not 3",
        "keys.log:13: unknown label",
        "keys.log:14: client random of 31 bytes, not 32",
        "keys.log:15: not hex",
        "keys.log:16: secret of 47 bytes",
    ]
    # nothing of a line's text is quoted
    assert not any(MASTER[:16] in b or R1[:16] in b for b in k.bad_lines)


def test_secret_hides_its_bytes():
    s = Secret(bytes.fromhex(MASTER))
    assert repr(s) == str(s) == "<secret, 48 bytes>" and f"{s}" == "<secret, 48 bytes>"
    assert len(s) == 48 and s == Secret(bytes.fromhex(MASTER)) and s != Secret(b"x")
    assert pickle.loads(pickle.dumps(s)) == s  # shipped to tasks with the settings


def write(path, text: str, mode: int) -> str:
    with open(path, "w") as fh:
        fh.write(text)
    os.chmod(path, mode)
    return str(path)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o606])
def test_readable_by_others_is_refused_unless_forced(tmp_path, mode):
    path = write(tmp_path / "sslkeys.log", TEXT, mode)
    with pytest.raises(KeyLogPermissionError) as e:
        load(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: key log is readable by group or others (mode {mode:04o})")
    assert "chmod 600" in msg
    assert load(path, force=True).keys == 5


def test_private_files_merge(tmp_path):
    a = write(tmp_path / "a.log", f"CLIENT_RANDOM {R1} {MASTER}\n", 0o600)
    b = write(tmp_path / "b.log", f"CLIENT_TRAFFIC_SECRET_0 {R2} {S32}\nnonsense\n", 0o400)
    k = load([a, b])
    assert (len(k), k.keys, k.bad, k.files) == (2, 2, 1, [a, b])
    assert k.bad_lines == [f"{b}:2: 1 fields, not 3"]
    assert repr(k) == "KeyLog(connections=2, keys=2, ignored=0, bad=1)"


def test_unreadable_paths_are_named(tmp_path):
    with pytest.raises(KeyLogError, match=f"^{tmp_path}/missing.log: cannot read the key log"):
        load(tmp_path / "missing.log")
    os.chmod(tmp_path, 0o700)
    with pytest.raises(KeyLogError, match="not a regular file"):
        load(tmp_path)
