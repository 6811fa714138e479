"""SQL over the lake: the checks made before a JVM starts, results fetched as Arrow, and the
interactive shell (`brokerscope shell`), all on one Spark session."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO

import pyarrow as pa

from . import export, sqltext
from .lake import Lake
from .report import EXIT_USAGE, STOPPING, Terminated, one_line

HISTORY_LENGTH = 1000


def check_tables(statements: list[sqltext.Statement], lake: Lake) -> None:
    """Raise ValueError (one line naming it) for the first statement `refusal` refuses: no JVM is
    started for a typo."""
    known, defined = set(lake.table_names()), set()
    for stmt in statements:
        why = refusal(stmt, lake.root, known, defined)
        if why is not None:
            raise ValueError(f"line {stmt.line}: {why}")


def refusal(stmt: sqltext.Statement, root, known: set[str], defined: set[str]) -> str | None:
    """Why a statement is not run, or None: cut short (`unfinished`), it would change the lake at
    `root` (sqltext.writes), or it reads a table that neither the lake (`known`) holds nor an
    earlier statement defined (`defined`, to which this one's views are added)."""
    word = sqltext.unfinished(stmt)
    if word is not None:
        return f"the statement ends with {word}: something must follow it"
    word = sqltext.writes(stmt, known)
    if word is not None:
        return f"{word} would change the lake: `sql` and the shell only read it (ingest, optimize and vacuum write it)"
    for _, name in sqltext.unknown_tables([stmt], known | defined):
        return f"no table `{name}` in the lake at {root} (its tables: {', '.join(sorted(known)) or 'none'})"
    defined |= sqltext.tables(stmt)[1]
    return None


def fetch(spark, sql: str, limit: int | None = None) -> pa.Table | None:
    """Run one statement; its result as Arrow (types kept: binary, nested, UTC timestamps), or
    None for a statement with no result columns (CREATE VIEW, ...)."""
    df = spark.sql(sql)
    if not df.columns:
        return None
    return (df if limit is None else df.limit(limit)).toArrow()


def history_path() -> Path:
    """The shell's history file: $BROKERSCOPE_CACHE (else ~/.cache/brokerscope)/sql_history."""
    from .classcache import cache_root

    return cache_root() / "sql_history"


HELP = """\
statements end at ; and may span lines. Commands:
  \\tables           the lake's tables: rows, Delta version, files, size
  \\d TABLE          its columns and types
  \\format FMT       table, csv, json or jsonl (now: {fmt})
  \\binary ENC       binary values as base64 or hex (now: {binary})
  \\q                quit (so does end of input, Ctrl-D)"""


class Shell:
    """An SQL prompt on one Spark session: reads statements from `stdin` (a prompt and readline
    history when it is a terminal), prints each result, one line per error, and goes on."""

    def __init__(
        self,
        spark,
        lake: Lake,
        fmt: str = "table",
        binary: str = "base64",
        stdin: IO[str] | None = None,
        out: IO[str] | None = None,
        err: IO[str] | None = None,
    ):
        self.spark, self.lake, self.fmt, self.binary = spark, lake, fmt, binary
        self.stdin = stdin or sys.stdin
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.interactive = self.stdin.isatty() and self.out.isatty()
        self.failed = 0
        self.defined: set[str] = set()  # the views the session's statements made (query.refusal)

    def error(self, msg: str, line: int | None = None) -> None:
        self.failed += 1
        where = f" (line {line})" if line and not self.interactive else ""
        print(f"error{where}: {msg}", file=self.err, flush=True)

    def run_statement(self, stmt: sqltext.Statement, line0: int) -> None:
        why = refusal(stmt, self.lake.root, set(self.lake.table_names()), self.defined)
        if why is not None:
            self.error(why, line0 + stmt.line - 1)
            return
        try:
            table = fetch(self.spark, stmt.text)
        except KeyboardInterrupt as e:
            if isinstance(e, Terminated):
                raise
            STOPPING.clear()  # the shell goes on: the next Ctrl-C stops the next query
            self.spark.sparkContext.cancelAllJobs()
            self.error("cancelled")
            return
        except Exception as e:  # noqa: BLE001 - Spark's errors: one line, the session goes on
            self.error(one_line(e), line0 + stmt.line - 1)
            return
        if table is not None:
            try:
                export.write(table, self.fmt, self.out, self.binary)
            except ValueError as e:  # a result no text format can hold: said, and the session goes on
                self.error(str(e), line0 + stmt.line - 1)
                return
            self.out.flush()

    def command(self, text: str, line: int | None = None) -> bool:
        """Run a backslash command (`line`: where it is in the input); False for \\q."""
        name, _, arg = text.strip().partition(" ")
        arg = arg.strip()
        if name == "\\q":
            return False
        if name == "\\tables" or (name == "\\d" and not arg):
            info = self.lake.info()
            rows = [(i.name, i.rows, i.version, i.files, i.size_bytes) for i in info]
            table = export.from_rows(["table", "rows", "delta_version", "files", "size_bytes"], rows)
            export.write(table, self.fmt, self.out, self.binary)
            for why in self.lake.unreadable.values():
                self.error(why)
        elif name == "\\d":
            try:
                fields = self.spark.table(arg).schema.fields
            except Exception as e:  # noqa: BLE001
                known = sorted(t.name for t in self.spark.catalog.listTables())
                if arg in known:
                    self.error(one_line(e), line)
                else:  # as `sql` says it, not Spark's TABLE_OR_VIEW_NOT_FOUND
                    self.error(
                        f"no table `{arg}` in the lake at {self.lake.root} (its tables: {', '.join(known)})",
                        line,
                    )
                return True
            rows = [(f.name, f.dataType.simpleString(), f.nullable) for f in fields]
            export.write(export.from_rows(["column", "type", "nullable"], rows), self.fmt, self.out)
        elif name == "\\format" and arg in export.TEXT_FORMATS:
            self.fmt = arg
        elif name == "\\binary" and arg in export.BINARY:
            self.binary = arg
        elif name in ("\\format", "\\binary"):
            choices = export.TEXT_FORMATS if name == "\\format" else export.BINARY
            self.error(f"{name} wants one of {', '.join(choices)}, not {arg!r}", line)
        elif name in ("\\?", "\\h", "\\help"):
            print(HELP.format(fmt=self.fmt, binary=self.binary), file=self.out)
        else:
            self.error(f"unknown command {name} (\\? lists them)", line)
        self.out.flush()
        return True

    def _read(self, prompt: str) -> str | None:
        if self.interactive:
            try:
                return input(prompt)
            except EOFError:
                print(file=self.out)
                return None
        line = self.stdin.readline()
        return None if line == "" else line.rstrip("\n")

    def _history(self) -> None:
        try:
            import atexit
            import readline
        except ImportError:  # no readline on this Python: a prompt without history
            return
        path = history_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists():
                readline.read_history_file(path)
        except OSError:
            return
        readline.set_history_length(HISTORY_LENGTH)

        def save() -> None:
            try:
                readline.write_history_file(path)
            except OSError:
                pass

        atexit.register(save)

    def loop(self) -> int:
        """Until \\q or the end of input. Returns 0, or 2 when the input was no terminal and a
        statement or command failed (so a script sees it)."""
        if self.interactive:
            self._history()
            print("brokerscope SQL on " + str(self.lake.root) + ": \\? for help, \\q to quit", file=self.out)
        buf, start, lineno = "", 1, 0
        while True:
            try:
                line = self._read("brokerscope> " if sqltext.blank(buf) else "         ...> ")
            except KeyboardInterrupt as e:
                if isinstance(e, Terminated):
                    raise
                STOPPING.clear()
                print(file=self.out)
                buf = ""
                continue
            if line is None:
                break
            lineno += 1
            if sqltext.blank(buf):  # a backslash command starts a line outside a statement
                if line.strip().startswith("\\"):
                    if not self.command(line, lineno):
                        break
                    continue
                buf, start = "", lineno
            buf += line + "\n"
            stmts, rest = sqltext.split(buf, final=False)
            for s in stmts:
                self.run_statement(s, start)
            if stmts:
                start += buf[: len(buf) - len(rest)].count("\n")
                buf = rest
        if not sqltext.blank(buf):  # the last statement may lack its ;
            try:
                stmts, _ = sqltext.split(buf)
            except sqltext.SqlTextError as e:
                self.error(str(e))
                stmts = []
            for s in stmts:
                self.run_statement(s, start)
        return EXIT_USAGE if self.failed and not self.interactive else 0
