"""Query results in every output format, byte for byte, from Arrow tables of the types Spark
hands back (binary, Kafka headers, UTC timestamps, doubles, decimals, nulls)."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
import os
import stat

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from brokerscope import export

VALUE = bytes(range(256)) + b"\xff" * 58  # 314 bytes, as the value
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def result() -> pa.Table:
    """Two rows: every column set, then every column null; the types are those of Spark's toArrow()."""
    return pa.table(
        {
            "value": pa.array([VALUE, None], pa.binary()),
            "headers": pa.array(
                [[{"key": "trace", "value": b"t0"}, {"key": "idx", "value": b"0"}], None], HEADERS
            ),
            "ts": pa.array([dt.datetime(2026, 11, 20, 10, 0, 0, 123456), None], pa.timestamp("us", tz="UTC")),
            "latency_ms": pa.array([78.507 / 1000, None]),  # Spark's double: 0.07850700000000001
            "ratio": pa.array([0.078507, None]),
            "amount": pa.array([decimal.Decimal("12345678901234567890.10"), None], pa.decimal128(22, 2)),
            "note": pa.array(['a,"b"\nc', None]),
        }
    )


B64 = base64.b64encode(VALUE).decode()
HEADERS_JSON = '[{"key":"trace","value":"dDA="},{"key":"idx","value":"MA=="}]'


def render(fmt: str, table: pa.Table, binary: str = "base64") -> str:
    out = io.StringIO()
    export.write(table, fmt, out, binary)
    return out.getvalue()


def test_csv_keeps_every_value_whole():
    assert render("csv", result()) == (
        "value,headers,ts,latency_ms,ratio,amount,note\n"
        f'{B64},"{HEADERS_JSON.replace(chr(34), chr(34) * 2)}",2026-11-20T10:00:00.123456Z,'
        '0.07850700000000001,0.078507,12345678901234567890.10,"a,""b""\nc"\n'
        ",,,,,,\n"
    )
    assert len(base64.b64decode(B64)) == 314


def test_csv_tells_null_from_empty_and_reads_back_as_it_was(tmp_path):
    """Found by a user trial: null, an empty string and an empty binary value were all an empty
    cell. Null stays an empty cell; an empty value is `""` (as PostgreSQL's COPY CSV writes them),
    and DuckDB's CSV reader, told that a quoted value is never null, gives each back as it was."""
    import duckdb

    t = pa.table(
        {
            "s": pa.array(["", None, "x", 'say "hi"'], pa.string()),
            "b": pa.array([b"", None, b"\x00", b"q"], pa.binary()),
            "n": pa.array([0, None, 1, 2], pa.int64()),
        }
    )
    text = render("csv", t)
    assert text == 's,b,n\n"","",0\n,,\nx,AA==,1\n"say ""hi""",cQ==,2\n'
    path = tmp_path / "t.csv"
    path.write_text(text)
    got = duckdb.sql(
        f"SELECT s, b, n FROM read_csv('{path}', header = true, allow_quoted_nulls = false, "
        "columns = {'s': 'VARCHAR', 'b': 'VARCHAR', 'n': 'BIGINT'})"
    ).fetchall()
    assert got == [("", "", 0), (None, None, None), ("x", "AA==", 1), ('say "hi"', "cQ==", 2)]


def test_jsonl_is_an_object_per_line_and_json_one_array():
    obj = (
        f'{{"value":"{B64}","headers":{HEADERS_JSON},"ts":"2026-11-20T10:00:00.123456Z",'
        '"latency_ms":0.07850700000000001,"ratio":0.078507,"amount":12345678901234567890.10,'
        '"note":"a,\\"b\\"\\nc"}'
    )
    nulls = '{"value":null,"headers":null,"ts":null,"latency_ms":null,"ratio":null,"amount":null,"note":null}'
    assert render("jsonl", result()) == f"{obj}\n{nulls}\n"
    assert render("json", result()) == f"[\n{obj},\n{nulls}\n]\n"
    doc = json.loads(render("json", result()), parse_float=decimal.Decimal)
    assert base64.b64decode(doc[0]["value"]) == VALUE
    assert doc[0]["headers"][0] == {"key": "trace", "value": "dDA="}
    assert doc[0]["amount"] == decimal.Decimal("12345678901234567890.10")
    assert float(doc[0]["latency_ms"]) == 78.507 / 1000
    assert render("json", result().slice(0, 0)) == "[]\n"


def test_binary_as_hex_on_request():
    out = render("jsonl", result().select(["value", "headers"]).slice(0, 1), binary="hex")
    assert json.loads(out) == {
        "value": VALUE.hex(),
        "headers": [{"key": "trace", "value": "7430"}, {"key": "idx", "value": "30"}],
    }


def test_the_table_says_what_it_shortened():
    assert render("table", result().select(["value", "ts", "latency_ms", "note"])) == (
        "value                                                        | ts                          | latency_ms | note\n"
        "-------------------------------------------------------------+-----------------------------+------------+---------\n"
        f'{B64[:59]}… | 2026-11-20T10:00:00.123456Z | 0.078507   | a,"b"\\nc\n'
        "NULL                                                         | NULL                        | NULL       | NULL\n"
        "(2 rows; 2 cells shortened (to 60 characters or 15 digits): --format csv, json or jsonl shows them whole)\n"
    )
    assert render("table", result().select(["ratio"]).slice(0, 1)) == "ratio\n--------\n0.078507\n(1 row)\n"


@pytest.mark.parametrize(
    "arrow_type, value, text",
    [
        (pa.timestamp("us"), dt.datetime(2026, 1, 2, 3, 4, 5), "2026-01-02T03:04:05.000000"),  # no zone: no Z
        (pa.timestamp("ms", tz="UTC"), dt.datetime(2026, 1, 2, 3, 4, 5, 6000), "2026-01-02T03:04:05.006Z"),
        (pa.timestamp("s", tz="Europe/Paris"), dt.datetime(2026, 1, 2, 3, 4, 5), "2026-01-02T03:04:05Z"),
        (pa.date32(), dt.date(2026, 1, 2), "2026-01-02"),
        (pa.duration("us"), dt.timedelta(days=1, microseconds=-1), "PT86399.999999S"),
        (pa.float32(), 0.1, "0.1"),
        (pa.float64(), float("nan"), "NaN"),
        (pa.float64(), float("-inf"), "-Infinity"),
        (pa.map_(pa.string(), pa.int32()), [("a", 1)], '{"a":1}'),
        (pa.map_(pa.int32(), pa.string()), [(1, "x")], '[[1,"x"]]'),
        (
            pa.struct([("b", pa.bool_()), ("l", pa.list_(pa.int64()))]),
            {"b": True, "l": [1, None]},
            '{"b":true,"l":[1,null]}',
        ),
    ],
)
def test_a_cell_of_each_type(arrow_type, value, text):
    csv_text = render("csv", pa.table({"c": pa.array([value], arrow_type)}))
    assert csv_text.splitlines()[1].strip('"').replace('""', '"') == text


def test_parquet_keeps_the_arrow_types(tmp_path):
    path = tmp_path / "r.parquet"
    export.write_parquet(result(), str(path))
    back = pq.read_table(path)
    assert back.schema.equals(result().schema) and back.equals(result())


def test_the_cli_listings_convert():
    t = export.from_rows(["table", "rows"], [("streams", 3)])
    assert render("csv", t) == "table,rows\nstreams,3\n"
    assert render("jsonl", export.from_rows(["table", "rows"], [])) == ""


def test_whole_file_writes_a_pipe_as_it_is(tmp_path):
    """`--out /dev/stdout`, `-o fifo` (e.g. extract into Wireshark): a device or pipe is written
    where it is; the old code wrote a part file beside it and renamed it over the pipe (as root,
    over /dev/stdout itself)."""
    fifo = tmp_path / "to-wireshark"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader, so opening to write does not wait
    try:
        with export.whole_file(fifo) as f:
            export.write_parquet(result(), f)
        data = b""
        while chunk := os.read(reader, 1 << 16):
            data += chunk
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == [fifo.name]
    assert pq.read_table(io.BytesIO(data)).equals(result())


def test_whole_file_through_a_link_replaces_the_file_it_names(tmp_path):
    (tmp_path / "runs").mkdir()
    real = tmp_path / "runs" / "today.csv"
    real.write_text("old\n")
    link = tmp_path / "latest.csv"
    link.symlink_to(real)
    # a string column whose second value is the lone byte C3 (as Spark's CAST of binary makes)
    torn = pa.table({"s": pa.array([b"ok", b"\xc3"], pa.binary()).view(pa.string())})
    with (
        pytest.raises(ValueError, match="^column s: text that is not UTF-8"),
        export.whole_file(link, "w") as f,
    ):
        f.write("s\n")
        export.write(torn, "csv", f)
    assert real.read_text() == "old\n" and sorted(p.name for p in real.parent.iterdir()) == ["today.csv"]
    with export.whole_file(link, "w") as f:
        export.write(result().select(["ratio"]), "csv", f)
    assert link.is_symlink() and real.read_text() == 'ratio\n0.078507\n""\n'


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "jsonl"])
def test_text_that_is_not_utf8_is_an_error_naming_its_columns(fmt):
    """Spark's CAST(binary AS STRING) leaves bytes that are not UTF-8 in a string column: every
    text format refuses the result before writing a byte, naming each such column, nested ones
    too; the same bytes as a binary column are written (--binary)."""
    bad = pa.array([b"ok", b"\xc3"], pa.binary()).view(pa.string())
    table = pa.table(
        {
            "n": [1, 2],
            "s": bad,
            "ok": ["a", "b"],
            "nested": pa.StructArray.from_arrays([bad], ["t"]),
        }
    )
    out = io.StringIO()
    with pytest.raises(ValueError, match="^columns s, nested: text that is not UTF-8 .*--format parquet$"):
        export.write(table, fmt, out)
    assert out.getvalue() == ""
    export.write(table.select(["n", "ok"]).append_column("b", bad.view(pa.binary())), fmt, out, "hex")
    assert "c3" in out.getvalue()


def test_check_out_looks_where_whole_file_writes(tmp_path):
    """A link's file is replaced in the link's target directory: one that is missing is named
    before the work (it was found at the write, after the query); a pipe needs no directory."""
    link = tmp_path / "latest.csv"
    link.symlink_to(tmp_path / "gone" / "today.csv")
    with pytest.raises(ValueError, match=f"cannot write {link}: no directory {tmp_path / 'gone'}$"):
        export.check_out(link, "the file")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    export.check_out(fifo, "the file")


def test_the_table_format_escapes_what_a_terminal_would_act_on():
    """A client id is whatever a client sent: a user trial's Kafka client_id
    "\\x1b[2J\\x1b[31mEVIL\\x1b]0;title\\x07" cleared the screen, turned it red and set the window
    title when a `sql` result was printed as a table. Every control character is escaped, in
    cells and in column names; printable text (accents included) is left as it is."""
    evil = "\x1b[2J\x1b[31mEVIL\x1b]0;title\x07"
    t = pa.table({"client_id": [evil, "café\x7f\x9b\x00"], "x\x1b[0m": [1, 2]})
    out = io.StringIO()
    export.write_table(t, out)
    text = out.getvalue()
    assert not any(ord(c) < 0x20 and c != "\n" or 0x7F <= ord(c) < 0xA0 for c in text), repr(text)
    assert "\\x1b[2J\\x1b[31mEVIL\\x1b]0;title\\x07" in text and "café\\x7f\\x9b\\x00" in text
    assert text.splitlines()[0].split() == ["client_id", "|", "x\\x1b[0m"]


def test_json_refuses_two_columns_of_one_name():
    """`SELECT c.*, l.* FROM commands c JOIN latencies l ...` gives two `ts` columns: JSON
    objects held both, and a JSON reader kept the last (found by a user trial). Refused, naming
    them, before anything is written; the other formats keep both."""
    t = pa.Table.from_arrays([pa.array([1]), pa.array([2]), pa.array(["x"])], names=["ts", "ts", "a"])
    for fmt in ("json", "jsonl"):
        out = io.StringIO()
        with pytest.raises(ValueError, match="^column name ts given twice: a JSON object keeps one"):
            export.write(t, fmt, out)
        assert out.getvalue() == ""
    out = io.StringIO()
    export.write(t, "csv", out)
    assert out.getvalue() == "ts,ts,a\n1,2,x\n"
