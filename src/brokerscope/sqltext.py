"""SQL text without Spark: statements split at `;`, and the table names a statement reads.

Both read Spark SQL's lexical rules: '...' and "..." strings with backslash escapes, `...`
identifiers with `` doubled, -- line comments and /* */ comments, which nest. So a typo in a
table name, or a quote left open, is found before a JVM starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class SqlTextError(ValueError):
    """SQL that cannot be split (an unterminated string or comment): one line, no Spark."""


@dataclass(frozen=True)
class Token:
    kind: str  # word, quoted (a `name`), string, punct
    text: str  # for word: as written; for quoted: the name without backticks
    line: int


@dataclass(frozen=True)
class Statement:
    text: str  # without the `;`, comments kept
    line: int  # where its first token is, 1-based
    tokens: tuple[Token, ...]


_WORD = re.compile(r"[A-Za-z0-9_$]+")


def _scan(text: str, final: bool):
    """Yield (token, end offset) over `text`; a `;` is a punct token. An unterminated string,
    identifier or comment raises SqlTextError when `final`, else ends the scan (more input may
    close it: the shell)."""
    i, line, n = 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line, i = line + 1, i + 1
        elif c.isspace():
            i += 1
        elif text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while depth and j < n:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            if depth:
                if final:
                    raise SqlTextError(f"line {line}: a /* comment is not closed")
                return
            line += text.count("\n", i, j)
            i = j
        elif c in "'\"`":
            j = i + 1
            while j < n:
                if text[j] == "\\" and c != "`":  # strings: a backslash escapes the next character
                    j += 2
                elif text[j] == c and c == "`" and text.startswith("``", j):  # `` in a name
                    j += 2
                elif text[j] == c:
                    break
                else:
                    j += 1
            if j >= n:
                if final:
                    what = "name" if c == "`" else "string"
                    raise SqlTextError(f"line {line}: a {what} opened with {c} is not closed")
                return
            body = text[i + 1 : j]
            kind = "quoted" if c == "`" else "string"
            yield Token(kind, body.replace("``", "`") if kind == "quoted" else body, line), j + 1
            line += body.count("\n")
            i = j + 1
        else:
            m = _WORD.match(text, i)
            if m:
                yield Token("word", m.group(), line), m.end()
                i = m.end()
            else:
                yield Token("punct", c, line), i + 1
                i += 1


def split(text: str, final: bool = True) -> tuple[list[Statement], str]:
    """The complete statements of `text` (ended by `;`, or by the end of the text when `final`)
    and the rest (text after the last `;` when not `final`). Empty statements are dropped."""
    out: list[Statement] = []
    start, toks = 0, []
    end = 0
    for tok, end in _scan(text, final):
        if tok.kind == "punct" and tok.text == ";":
            if toks:
                out.append(Statement(text[start : end - 1].strip(), toks[0].line, tuple(toks)))
            start, toks = end, []
        else:
            toks.append(tok)
    rest = text[start:]
    if final:
        if toks:
            out.append(Statement(rest.strip(), toks[0].line, tuple(toks)))
        return out, ""
    return out, rest


def blank(text: str) -> bool:
    """Only whitespace and closed comments: no statement begun, no string or comment open."""
    try:
        return not split(text)[0]
    except SqlTextError:
        return False


# a word before "(" that is no function call: the paren opens a subquery or a list
_NOT_CALLS = {
    "AS", "FROM", "JOIN", "IN", "EXISTS", "ON", "WHERE", "AND", "OR", "NOT", "SELECT", "UNION",
    "INTERSECT", "EXCEPT", "ALL", "ANY", "SOME", "HAVING", "WHEN", "THEN", "ELSE", "LATERAL",
    "USING", "BY", "WITH", "VALUES", "DISTINCT", "RETURN", "TABLE", "IF", "CASE",
}  # fmt: skip
# words that end the table list of a FROM: a following comma is no longer a table
_CLAUSE = {
    "WHERE", "GROUP", "ORDER", "HAVING", "LIMIT", "UNION", "INTERSECT", "EXCEPT", "WINDOW",
    "LATERAL", "JOIN", "ON", "USING", "SORT", "CLUSTER", "DISTRIBUTE", "PIVOT", "UNPIVOT",
    "TABLESAMPLE", "OFFSET", "QUALIFY", "INNER", "LEFT", "RIGHT", "FULL", "CROSS", "NATURAL",
    "ANTI", "SEMI", "SELECT",
}  # fmt: skip


def _name(tokens: tuple[Token, ...], i: int) -> tuple[str | None, int]:
    """The table name starting at tokens[i] (None when it is no plain name: a subquery, a
    function such as range(5), VALUES, a qualified or path name), and the index after it."""
    if i >= len(tokens) or tokens[i].kind not in ("word", "quoted"):
        return None, i + 1
    t = tokens[i]
    after = tokens[i + 1] if i + 1 < len(tokens) else None
    if after and after.kind == "punct" and after.text in ".(":
        return None, i + 1
    if t.kind == "word" and t.text.upper() in ("VALUES", "LATERAL", "SELECT"):
        return None, i + 1
    return t.text.lower(), i + 1


def tables(stmt: Statement) -> tuple[set[str], set[str]]:
    """(names the statement reads after FROM and JOIN, outside function calls such as
    extract(YEAR FROM ts); names it defines: its CTEs and the view or table it creates)."""
    toks = stmt.tokens
    reads: set[str] = set()
    defines: set[str] = set()
    calls: list[bool] = []  # per open paren: is it a function call's
    in_from = False  # inside a FROM's comma-separated list, at depth len(calls)
    from_depth = -1
    words = [t.text.upper() if t.kind == "word" else "" for t in toks]
    if words[:1] == ["CREATE"] or words[:1] == ["CACHE"]:
        for j, w in enumerate(words):
            if w in ("VIEW", "TABLE"):
                k = j + 1
                while k < len(words) and words[k] in ("IF", "NOT", "EXISTS"):
                    k += 1
                name, _ = _name(toks, k)
                if name:
                    defines.add(name)
                break
    for i, t in enumerate(toks):
        w = words[i]
        if t.kind == "punct" and t.text == "(":
            prev = toks[i - 1] if i else None
            calls.append(bool(prev and prev.kind in ("word", "quoted") and words[i - 1] not in _NOT_CALLS))
            continue
        if t.kind == "punct" and t.text == ")":
            if calls:
                calls.pop()
            if len(calls) < from_depth:
                in_from = False
            continue
        if calls and calls[-1]:
            continue
        # a CTE: WITH name AS ( / , name AS (
        if (
            t.kind in ("word", "quoted")
            and i + 2 < len(toks)
            and words[i + 1] == "AS"
            and toks[i + 2].text == "("
            and i > 0
            and (words[i - 1] in ("WITH", "RECURSIVE") or toks[i - 1].text == ",")
        ):
            defines.add(t.text.lower())
        if w in ("FROM", "JOIN") and not (i and toks[i - 1].text == "."):
            name, _ = _name(toks, i + 1)
            if name:
                reads.add(name)
            in_from, from_depth = w == "FROM", len(calls)
        elif in_from and w in _CLAUSE:
            in_from = False
        elif in_from and t.kind == "punct" and t.text == "," and len(calls) == from_depth:
            name, _ = _name(toks, i + 1)
            if name:
                reads.add(name)
    return reads, defines


# statements whose FROM names tables (SHOW TABLES FROM db names a database)
_QUERIES = {"SELECT", "WITH", "FROM", "VALUES", "TABLE", "(", "CREATE", "CACHE", "EXPLAIN", "INSERT"}


def unknown_tables(statements: list[Statement], known: set[str]) -> list[tuple[Statement, str]]:
    """(statement, name) for each name read that neither `known` (lower case) nor an earlier
    statement or the statement's own CTEs define, in order of appearance."""
    have = {k.lower() for k in known}
    out = []
    for s in statements:
        reads, defines = tables(s)
        have |= defines
        first = s.tokens[0].text.upper()
        if first not in _QUERIES:
            continue
        out.extend((s, n) for n in sorted(reads - have))
    return out


# words after which a statement cannot end: Spark reads some of them at the end as a table alias
# (`SELECT * FROM t WHERE` gives every row of t, t named `WHERE`), the rest fail in its parser.
# None is a column name of the lake's tables (OFFSET is: messages.offset; a test holds to it).
_GO_ON = {
    "SELECT", "FROM", "WHERE", "AND", "OR", "NOT", "ON", "JOIN", "BY", "HAVING", "LIMIT", "AS",
    "IN", "LIKE", "BETWEEN", "IS", "CASE", "WHEN", "THEN", "ELSE", "UNION", "INTERSECT", "EXCEPT",
    "GROUP", "ORDER", "DISTINCT",
}  # fmt: skip


def unfinished(stmt: Statement) -> str | None:
    """The word or `,` a statement ends with that something must follow (a query cut short), or
    None."""
    last = stmt.tokens[-1] if stmt.tokens else None
    if last is None:
        return None
    if last.kind == "word" and last.text.upper() in _GO_ON:
        return last.text
    if last.kind == "punct" and last.text == ",":
        return ","
    return None


# statements that change a table: `sql` and the shell read the lake (ingest, optimize, vacuum
# write it); Spark's own answer to them is a py4j line, or for DROP TABLE of a lake table's view,
# nothing (found by a user trial)
_WRITES = {
    "DELETE",
    "UPDATE",
    "MERGE",
    "INSERT",
    "TRUNCATE",
    "ALTER",
    "OPTIMIZE",
    "VACUUM",
    "RESTORE",
    "REPLACE",
}


def writes(stmt: Statement, lake_tables: set[str]) -> str | None:
    """The word of a statement that would change the lake (DROP only of one of `lake_tables`:
    a user's own view may go), or None."""
    toks = stmt.tokens
    first = toks[0].text.upper() if toks and toks[0].kind == "word" else None
    if first in _WRITES:
        return first
    if first != "DROP":
        return None
    # DROP [TEMPORARY] TABLE|VIEW [IF EXISTS] name
    i = 1
    while (
        i < len(toks) and toks[i].kind == "word" and toks[i].text.upper() in ("TEMPORARY", "TEMP", "GLOBAL")
    ):
        i += 1
    if i >= len(toks) or toks[i].text.upper() not in ("TABLE", "VIEW"):
        return None
    i += 1
    if i + 1 < len(toks) and toks[i].text.upper() == "IF" and toks[i + 1].text.upper() == "EXISTS":
        i += 2
    name, _ = _name(toks, i)
    return "DROP" if name is not None and name in {t.lower() for t in lake_tables} else None
