"""What an ingest run reports: its summary, and the exit codes a scheduler acts on."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # terminal colour codes (delta-rs colours its errors)


# what a terminal would act on, escaped where the tool prints captured text (table cells, file
# names in the run summary): the C0 controls, DEL and the C1 controls (ESC sequences from a
# captured client id cleared the screen or set the title; a line break in a file name split the
# summary's one line per verdict)
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_ESCAPES.update({ord("\\"): "\\\\", ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


def shown(text: str) -> str:
    """`text` with backslashes, line breaks, tabs and every other control character escaped."""
    return text.translate(_ESCAPES)


def one_line(e: BaseException) -> str:
    """An exception (Spark's AnalysisException, delta-rs's errors and friends) as one line: its
    text's first, without terminal colour codes, or its type's name."""
    text = _ANSI.sub("", str(e)).strip()
    return text.splitlines()[0] if text else type(e).__name__


# what a full or read-only disk says, wherever it was raised (here, in a Python worker, in the
# JVM or in delta-rs): errno and the strerror text that reaches us through Spark's and py4j's
# errors
_NO_ROOM = {errno.ENOSPC: "No space left on device", errno.EDQUOT: "Disk quota exceeded", errno.EROFS: "Read-only file system"}  # fmt: skip


def no_room(e: BaseException) -> str | None:
    """One line for an error the disk caused (full, over quota, read-only), found anywhere in
    `e`'s chain or text; None for any other error (a bug: its traceback is worth having)."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _NO_ROOM:
            where = f" ({e.filename})" if e.filename else ""
            return f"{_NO_ROOM[e.errno].lower()}{where}"
        text = _text_of(e)
        for what in _NO_ROOM.values():
            if what in text:
                return what.lower()
        e = e.__cause__ or e.__context__
    return None


def _text_of(e: BaseException) -> str:
    """An exception's text, without the JVM: a PySpark exception's str() asks the JVM, which may
    be gone by then (the first run on a machine stops it to save the class archive), and fails
    again (found on a full disk: a py4j traceback instead of the one line); it keeps its message
    and the JVM's stack trace as text."""
    desc = getattr(e, "_desc", None)
    if isinstance(desc, str):
        trace = getattr(e, "_stackTrace", None)
        return f"{desc}\n{trace}" if isinstance(trace, str) else desc
    try:
        return str(e)
    except Exception:  # noqa: BLE001 - another exception type whose str() fails
        return ""


# the report Rust's default panic hook writes to fd 2: an empty line, "thread 'NAME' (TID) panicked
# at FILE:L:C:", the message's lines, "stack backtrace:" and its frames, a "note: ...
# RUST_BACKTRACE ..." line
_PANIC_START = re.compile(rb"^thread '[^']*'( \(\d+\))? panicked at ")
_PANIC_TAIL = re.compile(rb"^(stack backtrace:|note: .*RUST_BACKTRACE|\s+\d+: |\s+at )")


def without_panics(text: bytes) -> bytes:
    """`text` less the Rust panic reports in it: each from the empty line before its `thread ...
    panicked at` line to the end of its message (the next line) and backtrace."""
    out, lines, i = [], text.splitlines(keepends=True), 0
    while i < len(lines):
        if _PANIC_START.match(lines[i]):
            if out and out[-1] in (b"\n", b"\r\n"):
                out.pop()  # the empty line the report begins with
            i += 2  # the report's first line and its message
            while i < len(lines) and _PANIC_TAIL.match(lines[i]):
                i += 1
            continue
        out.append(lines[i])
        i += 1
    return b"".join(out)


@contextlib.contextmanager
def panics_held_back() -> Iterator[None]:
    """Hold back what is written to fd 2 while the block runs, and write it out after it, but
    for Rust panic reports when the block raised a disk error (no_room): delta-rs's runtime
    prints one before Python gets the error on a full disk ("panicked at ...: Already shut
    down"), and the command's one line says what happened. Read through a pipe by a thread (a
    full disk has no room for a temporary file; a full pipe would block the writer)."""
    if not _HOLDING.acquire(blocking=False):  # another thread holds fd 2 back: leave it be
        yield
        return
    try:
        with _held():
            yield
    finally:
        _HOLDING.release()


_HOLDING = threading.Lock()


@contextlib.contextmanager
def _held() -> Iterator[None]:
    sys.stderr.flush()
    r, w = os.pipe()
    saved = os.dup(2)
    chunks: list[bytes] = []

    def drain() -> None:
        while data := os.read(r, 65536):
            chunks.append(data)

    reader = threading.Thread(target=drain, name="brokerscope-stderr", daemon=True)
    reader.start()
    os.dup2(w, 2)
    os.close(w)
    raised: BaseException | None = None
    try:
        yield
    except BaseException as e:
        raised = e
        raise
    finally:
        os.dup2(saved, 2)  # the pipe's last writer closed: the reader sees its end
        os.close(saved)
        reader.join(5.0)  # a process started meanwhile may hold the pipe: not waited for long
        if not reader.is_alive():
            os.close(r)
        text = b"".join(chunks)
        if raised is not None and no_room(raised):
            text = without_panics(text)
        view = memoryview(text)
        while view:
            view = view[os.write(2, view) :]


# Exit codes of `brokerscope ingest` and jobs/nightly_ingest.py (README, "Exit codes").
EXIT_OK = 0  # every input was read cleanly
EXIT_FAILED = 1  # the run failed; nothing of it was committed
EXIT_USAGE = 2  # bad arguments, configuration or lake path (found before Spark starts)
EXIT_PARTIAL = 3  # ingested, but some inputs were partial (damaged) or rejected
EXIT_NOTHING = 4  # no input could be ingested
EXIT_INTERRUPTED = 130  # stopped by SIGINT (Ctrl-C), as a shell reports a process it killed
EXIT_TERMINATED = 143  # stopped by SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread runs (cli): a command stops and cleans up as on
    Ctrl-C. A KeyboardInterrupt, so py4j closes the call it interrupts as for Ctrl-C (its next
    call would read that call's answer); whatever goes on after a Ctrl-C re-raises it."""


# Set from the first Ctrl-C or SIGTERM a command stops on (cli._on_signal) until it has cleaned
# up: another signal then waits for the clean-up instead of breaking into it. A command that goes
# on after Ctrl-C (the SQL shell) clears it.
STOPPING = threading.Event()

SHOWN = 5  # files named per kind of problem in the summary; the rest are counted


@dataclass
class Summary:
    run_id: str
    files: int = 0
    # of `files`, those the run found gone or changed while it read them (RunDir.unread, a decode
    # that could not read their payloads back): named as unreadable, not ingested; the first
    # line's counts leave them out
    not_ingested: int = 0
    # (path, why) rejected: named paths, or files in directories named as captures, that are no input
    errors: list[tuple[str, str]] = field(default_factory=list)
    # files inside directories that are no input by their bytes nor their name (sidecars): listed
    # and recorded, but no failure: they do not make the exit code
    skipped: list[tuple[str, str]] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)  # paths an exclude glob left out
    skipped_already_ingested: list[str] = field(default_factory=list)
    skipped_unreadable: int = 0  # of them, files that gave nothing when read (inputs.status error)
    # --skip-ingested: a run that finds nothing new (no file at all, say) is a quiet night, not a failure
    only_new: bool = False
    partial: list[tuple[str, str]] = field(default_factory=list)  # (path, why) read with damage
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (path, why) nothing readable
    packets: int = 0
    tcp_segments: int = 0
    filter: str | None = None  # the ingest filter's text (capture/filter.py), None when none
    payload: str = "keep"  # the payload policy the run decodes under (PayloadPolicy.text)
    filtered: int = 0  # packets the filter dropped
    connections: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    tls: dict[str, int] = field(default_factory=dict)  # TLS connections by tls_decrypted outcome
    # per capture id: connections with data no decoder recognised, their first bytes not
    # captured ("unrecognised": a broker the sniffer may have missed), packets cut
    # by the capture's snap length ("snap_truncated"), connections with one endpoint's packets
    # only ("one_direction"): warnings naming the files (`paths`, by capture id), no failure
    # (the streams table holds them)
    seen: dict[str, dict[str, int]] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    keylogs: bool = False  # the run was given key logs ([tls] keylog_files, --tls-keylog)
    writer: str = ""
    seconds: float = 0.0
    capture_errors: list[str] = field(default_factory=list)  # warnings, each naming its file
    recovered: list[str] = field(default_factory=list)  # interrupted runs this one finished first
    no_lake: bool = False  # nothing to ingest and no lake at the path: none was made
    dates: list[str] = field(default_factory=list)  # partitions (UTC dates) the run wrote

    def exit_code(self) -> int:
        bad = self.errors or self.partial or self.unreadable  # a skipped sidecar is no failure
        if self.files - len(self.unreadable) <= 0 and (
            bad or not (self.skipped_already_ingested or self.only_new)
        ):
            return EXIT_NOTHING if bad or not self.files else EXIT_OK
        return EXIT_PARTIAL if bad else EXIT_OK

    def lines(self) -> list[str]:
        out = [
            f"run {self.run_id}: {self.files - self.not_ingested} file(s)"
            + (f" (and {self.not_ingested} read but not ingested)" if self.not_ingested else "")
            + f", {self.packets:,} packets "
            f"({self.tcp_segments:,} TCP segments), {_count(self.connections, 'connection')}, "
            f"{self.seconds:.1f} s, writer={self.writer or '-'}",
        ]
        if self.rows:  # none when there was nothing to ingest
            out.append("rows: " + ", ".join(f"{t}={n:,}" for t, n in self.rows.items()))
        if self.filter:
            out.append(
                f"filter {self.filter}: {self.filtered:,} of {self.packets:,} packets dropped, "
                f"{self.tcp_segments:,} TCP segments kept"
            )
        if self.tls:
            n, yes = sum(self.tls.values()), self.tls.get("yes", 0)
            parts = [f"{yes:,} decrypted"] + [f"{k:,} {w}" for w, k in self.tls.items() if w != "yes"]
            out.append(f"TLS: {_count(n, 'connection')}: {', '.join(parts)} (streams.tls_decrypted says why)")
            if self.keylogs and not yes:  # a key log of other sessions, or of handshakes only
                out.append(f"warning: the key logs given decrypted none of the {n:,} TLS connection(s)")
        cut, unknown = self.seen.get("snap_truncated", {}), self.seen.get("unrecognised", {})
        for cid, n in list(cut.items())[:SHOWN]:
            out.append(
                f"warning: {self.paths.get(cid, cid)}: {n:,} packet(s) cut short by the capture's snap "
                "length (tcpdump -s): the bytes past it were never captured (streams.snap_truncated_packets)"
            )
        for cid, n in list(unknown.items())[:SHOWN]:
            out.append(
                f"warning: {self.paths.get(cid, cid)}: {_count(n, 'connection')} whose first bytes the "
                "capture missed or cut carried data no decoder recognised (streams.protocol unknown): "
                "a broker's? name its port with --port PROTO=PORT or [ports]"
            )
        one = self.seen.get("one_direction", {})
        for cid, n in list(one.items())[:SHOWN]:
            out.append(
                f"warning: {self.paths.get(cid, cid)}: {_count(n, 'connection')} with one endpoint's "
                "packets only (the other's in another capture not in this run, or it never answered): "
                "requests without their responses, or responses without requests; a capture per "
                "direction is ingested with the other direction's file in the same run, and a broker "
                "on a port not in [ports] named with --port PROTO=PORT (streams.c2s_packets, "
                "streams.s2c_packets, streams.protocol)"
            )
        if len(cut) > SHOWN or len(unknown) > SHOWN or len(one) > SHOWN:
            out.append("warning: ... and more captures (streams.snap_truncated_packets, streams.protocol)")
        if self.excluded:
            out.append(f"excluded: {len(self.excluded)} path(s) matching inputs.exclude or --exclude")
        if self.skipped_already_ingested:
            n, bad = len(self.skipped_already_ingested), self.skipped_unreadable
            why = (
                "the lake holds their rows"
                if not bad
                else f"{bad} of them gave nothing then: inputs.status error"
            )
            out.append(f"already ingested: {n} file(s) skipped ({why})")
        out.extend(f"recovered: {line}" for line in self.recovered)
        for e in self.capture_errors[:20]:
            out.append(f"warning: {e}")
        if len(self.capture_errors) > 20:
            out.append(f"warning: ... {len(self.capture_errors) - 20} more warnings")
        # (label, files, the reason the label gives: not repeated per file)
        for what, items, said in (
            ("rejected", self.errors, None),
            ("skipped, not a capture", self.skipped, "not a capture"),
            ("unreadable", self.unreadable, None),
            ("partial", self.partial, None),
        ):
            if items:
                listed = "; ".join(
                    p if said and why.startswith(said) else f"{p} ({why})" for p, why in items[:SHOWN]
                )
                more = f"; and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
                out.append(f"{what}: {len(items)} file(s): {listed}{more}")
        code = self.exit_code()
        verdict = {
            EXIT_OK: ("every input read cleanly" + (" (see the warnings)" if cut or unknown else ""))
            if self.files
            else "nothing new to ingest",
            EXIT_PARTIAL: "some inputs were partial or rejected (see inputs.status)",
            EXIT_NOTHING: "no input could be ingested",
        }[code]
        out.append(f"exit {code}: {verdict}")
        return [shown(line) for line in out]


def _count(n: int, noun: str) -> str:
    """`n noun`, plural unless n is 1."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")
