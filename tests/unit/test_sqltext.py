"""SQL split into statements and the tables they read, without Spark."""

from __future__ import annotations

import re

import pytest

from brokerscope import tables as schemas
from brokerscope.sqltext import SqlTextError, blank, split, tables, unfinished, unknown_tables, writes
from tests.integration.test_readme_queries import readme_queries

LAKE = set(schemas.ALL_TABLES)  # the journeys table too: a lake ingested with --journeys

SCRIPT = """-- a comment; not a statement end
SELECT 'a;b', "c;d", `e;f`, 'it\\'s;' AS x FROM streams; /* one; /* nested; */ two; */
SELECT extract(YEAR FROM ts), trim(BOTH ';' FROM command) FROM commands c, messages m
  LEFT ANTI JOIN acks a ON a.conn_id = m.conn_id
  WHERE c.x IN (SELECT 1 FROM latencies);;
WITH d AS (SELECT * FROM messages), e AS (SELECT * FROM d) SELECT * FROM e, d;
CREATE OR REPLACE TEMP VIEW v AS SELECT * FROM streamz;
SELECT t.from, 1 FROM v, range(3), delta.`/lake/x` JOIN stream s
"""


def test_split_at_semicolons_outside_strings_and_comments():
    stmts, rest = split(SCRIPT)
    assert rest == "" and [s.line for s in stmts] == [2, 3, 6, 7, 8]
    assert stmts[0].text.endswith("""SELECT 'a;b', "c;d", `e;f`, 'it\\'s;' AS x FROM streams""")
    assert stmts[1].text.startswith("/* one; /* nested; */ two; */\nSELECT extract(")
    assert stmts[4].text == "SELECT t.from, 1 FROM v, range(3), delta.`/lake/x` JOIN stream s"


def test_tables_read_and_defined():
    stmts, _ = split(SCRIPT)
    assert [tables(s) for s in stmts] == [
        ({"streams"}, set()),
        ({"commands", "messages", "acks", "latencies"}, set()),  # not ts nor command
        ({"messages", "d", "e"}, {"d", "e"}),
        ({"streamz"}, {"v"}),
        ({"v", "stream"}, set()),  # not range(3), not a path, not `from` after t.
    ]
    assert [(s.line, name) for s, name in unknown_tables(stmts, LAKE)] == [(7, "streamz"), (8, "stream")]


def test_names_only_a_table_list_can_hold():
    stmts, _ = split("SHOW TABLES FROM db; DESCRIBE nothere; SELECT * FROM `Streams`; SELECT 1")
    assert unknown_tables(stmts, LAKE) == []


def test_unfinished_text_is_an_error_or_the_rest():
    for text, why in [
        ("SELECT 'abc", "line 1: a string opened with ' is not closed"),
        ("SELECT 1;\nSELECT `abc", "line 2: a name opened with ` is not closed"),
        ("SELECT 1 /* /* */", "line 1: a /* comment is not closed"),
    ]:
        with pytest.raises(SqlTextError, match=re.escape(why)):
            split(text)
        stmts, rest = split(text, final=False)
        assert rest.strip().startswith("SELECT") or rest.strip().startswith("/*")
    stmts, rest = split("SELECT 1; SELECT 2\n", final=False)
    assert [s.text for s in stmts] == ["SELECT 1"] and rest == " SELECT 2\n"


def test_no_readme_query_reads_a_table_the_lake_lacks():
    stmts = [s for q in readme_queries() for s in split(q)[0]]
    assert len(stmts) >= 10 and unknown_tables(stmts, LAKE) == []


def test_blank_is_no_statement_begun():
    assert blank("") and blank(" -- note\n/* closed */ ;\n")
    assert not blank("/* open\n") and not blank("'open") and not blank("SELECT")


def test_unfinished_names_the_word_a_statement_cannot_end_with():
    def last(text: str) -> str | None:
        return unfinished(split(text)[0][0])

    assert last("SELECT * FROM commands WHERE") == "WHERE"
    assert last("select * from t where a = 1 and") == "and"
    assert last("SELECT a, b,") == ","
    assert last("SELECT * FROM t ORDER BY") == "BY"
    for whole in ("SELECT * FROM t WHERE x", "SELECT 1 AS `where`", "SELECT 'and'", "SHOW TABLES"):
        assert last(whole) is None, whole


def test_no_column_of_the_lake_is_taken_for_a_statement_cut_short():
    import brokerscope.sqltext as st

    names = {f.name.upper() for t in schemas.ALL_TABLES for f in schemas.schema(t)}
    assert not names & st._GO_ON
    assert all(
        unfinished(s) is None for q in readme_queries() for s in split(q if isinstance(q, str) else q[-1])[0]
    )


@pytest.mark.parametrize(
    "sql, word",
    [
        ("DELETE FROM commands WHERE true", "DELETE"),
        ("update messages set value = null", "UPDATE"),
        ("MERGE INTO acks USING x ON true WHEN MATCHED THEN DELETE", "MERGE"),
        ("TRUNCATE TABLE streams", "TRUNCATE"),
        ("DROP TABLE commands", "DROP"),
        ("drop temporary view if exists `Commands`", "DROP"),
        ("DROP VIEW mine", None),  # a view of the session's own
        ("DROP TABLE IF EXISTS other", None),
        ("SELECT * FROM commands WHERE command = 'DELETE'", None),
        ("CREATE TEMP VIEW v AS SELECT * FROM commands", None),
    ],
)
def test_statements_that_would_change_the_lake(sql, word):
    (stmt,), _ = split(sql)
    assert writes(stmt, {"commands", "messages", "acks", "streams"}) == word
