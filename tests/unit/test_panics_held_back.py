"""report.panics_held_back: what is written to fd 2 during a delta-rs call comes out after it,
less the Rust panic reports when the call failed for a full disk (the command's line says it)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from brokerscope.report import without_panics

# as delta-rs 1.6's runtime printed it on a full tmpfs (brokerscope optimize)
PANIC = (
    b"\n"
    b"thread 'tokio-rt-worker' (23745) panicked at /home/runner/.cargo/registry/src/"
    b"index.crates.io-1949cf8c6b5b557f/object_store-0.13.2/src/buffered.rs:369:41:\n"
    b"Already shut down\n"
    b"stack backtrace:\n"
    b"note: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace.\n"
)
FRAMES = b"   0: rust_begin_unwind\n             at /rustc/library/std/src/panicking.rs:652:5\n"


def test_panic_reports_are_cut_and_other_lines_kept():
    text = b"before\n" + PANIC + b"between\n" + PANIC.replace(b"note", b"xnote")[:-1] + b"\n" + b"after\n"
    assert (
        without_panics(text)
        == b"before\nbetween\nxnote: Some details are omitted, run with `RUST_BACKTRACE=full` for a verbose backtrace.\nafter\n"
    )
    assert without_panics(b"x\n" + PANIC[: PANIC.index(b"stack")] + FRAMES + b"y") == b"x\ny"
    assert without_panics(b"thread 'main' is fine\n") == b"thread 'main' is fine\n"


def _child(raise_what: str) -> str:
    code = textwrap.dedent(
        f"""
        import errno, os
        from brokerscope.report import panics_held_back
        with panics_held_back():
            os.write(2, b"a warning\\n" + {PANIC!r} + b"more\\n" * 20000)
            {raise_what}
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True)
    return r.stderr.decode()


def test_held_back_and_written_after_the_call():
    err = _child("pass")  # no error: everything comes out (a pipe's worth and more)
    assert err.startswith("a warning\n\nthread 'tokio-rt-worker'") and err.count("more\n") == 20000
    err = _child("raise OSError(errno.ENOSPC, 'No space left on device')")
    assert "panicked" not in err and "RUST_BACKTRACE" not in err
    assert err.startswith("a warning\nmore\n") and err.count("more\n") == 20000
    assert "OSError: [Errno 28] No space left on device" in err  # the error itself is not held
    err = _child("raise ValueError('a bug')")  # another error: the panic report stays
    assert "panicked at" in err and "ValueError: a bug" in err
