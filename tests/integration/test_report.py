"""`brokerscope report` on the sample-data lake, opened in headless Chromium (tests/support/chromium.py,
the DevTools protocol on a pipe): every chart is drawn with data, nothing is logged as an error,
no request leaves the file, and a screenshot of the whole page is an image of the right size
with charts in it."""

from __future__ import annotations

import zlib
from contextlib import contextmanager
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.integration.test_cli import run
from tests.support.chromium import Browser, chromium_missing

WIDTH = 1400

# per chart div: drawn (plotly's SVG root), and the number of traces with at least one point
CHARTS_JS = """
(() => [...document.querySelectorAll('.bs-chart')].map(gd => ({
  key: gd.dataset.chart,
  svg: gd.querySelectorAll('svg.main-svg').length,
  marks: gd.querySelectorAll('.scatterlayer .trace path, .barlayer .point path').length,
  traces: (gd.data || []).filter(t => (t.y || []).some(v => v !== null && v !== 0)
                                     || (t.x || []).some(v => typeof v === 'number' && v > 0)).length,
})))()
"""


@contextmanager
def _drawn(page: Path):
    """The report `page` open in headless Chromium with its charts drawn (the test skipped
    where there is no Chromium)."""
    why = chromium_missing()
    if why:
        pytest.skip(why)
    with Browser(width=WIDTH, height=900) as b:
        b.open(page.as_uri())
        b.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        yield b


@pytest.mark.spark
@pytest.mark.slow
def test_report_renders_every_chart_offline(sample_lake, tmp_path, capsys):
    out = tmp_path / "report.html"
    rc, stdout, stderr = run(capsys, "report", "--lake", sample_lake, "--out", str(out))
    assert rc == 0, stderr
    assert f"wrote {out}" in stdout
    page = out.read_text()
    expected = int(page.split('name="brokerscope-charts" content="')[1].split('"')[0])
    # the sample data has latencies, messages, error codes, undecodable frames and connections
    assert expected == 9, stderr
    assert 'class="bs-empty"' not in page
    # the header counts the inputs by status as the inputs table has them
    inputs = DeltaTable(f"{sample_lake}/inputs").to_pyarrow_table().to_pylist()
    ok = len({r["capture_id"] for r in inputs if r["status"] == "ok"})
    assert ok > 10 and f"{ok:,} ok" in page
    # the worst connection is named with the command that extracts it, for this lake
    assert f"brokerscope extract --lake {sample_lake} --conn-id " in page
    with _drawn(out) as b:
        charts = b.evaluate(CHARTS_JS)
        assert len(charts) == expected
        for c in charts:
            assert c["svg"] >= 1, c  # plotly drew it
            assert c["traces"] >= 1 and c["marks"] >= 1, c  # with data in it
        assert b.errors() == []
        assert b.requests() == [out.as_uri()]  # the page itself, nothing else: no CDN, no fonts
        shot = tmp_path / "report.png"
        w, h = b.screenshot(shot)
    assert w == WIDTH and h > 2500  # the whole page, nine charts tall
    colours = png_colours(shot.read_bytes())
    assert len(colours) > 50  # not blank: lines, bars, text


def png_colours(data: bytes, sample: int = 7) -> set[tuple[int, ...]]:
    """The distinct colours of every `sample`-th pixel of an 8-bit RGB(A) PNG, enough to tell a
    drawn page from a blank one without an imaging library. Scanline filters None and Up (what
    Chromium writes when asked to optimize for speed) are undone row by row with numpy; Sub,
    Average and Paeth are not needed here and are refused."""
    import numpy as np

    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w, h, bpp = 8, b"", 0, 0, 0
    while pos < len(data):
        n = int.from_bytes(data[pos : pos + 4], "big")
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            w, h = int.from_bytes(body[:4], "big"), int.from_bytes(body[4:8], "big")
            assert body[8] == 8 and body[9] in (2, 6), "8-bit RGB or RGBA"
            bpp = 3 if body[9] == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, w * bpp + 1)
    assert set(np.unique(rows[:, 0]).tolist()) <= {0, 2}, "scanline filters other than None and Up"
    pixels = np.empty((h, w * bpp), np.uint8)
    prev = np.zeros(w * bpp, np.uint8)
    for y in range(h):
        prev = pixels[y] = rows[y, 1:] + prev if rows[y, 0] == 2 else rows[y, 1:]
    picked = pixels[::sample].reshape(-1, w, bpp)[:, ::sample, :3].reshape(-1, 3)
    return {tuple(c) for c in np.unique(picked, axis=0).tolist()}


def test_png_colours_tells_blank_from_drawn():
    """The screenshot check can fail: a one-colour PNG has one colour."""
    import struct

    def png(rows: list[bytes], w: int) -> bytes:
        def chunk(kind, body):
            return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

        ihdr = struct.pack(">IIBBBBB", w, len(rows), 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(b"".join(b"\0" + r for r in rows)))
            + chunk(b"IEND", b"")
        )

    blank = png([b"\xff\xff\xff" * 70] * 70, 70)
    assert png_colours(blank) == {(255, 255, 255)}
    drawn = png([bytes((x * 3 + y) % 256 for x in range(210)) for y in range(70)], 70)
    assert len(png_colours(drawn, sample=1)) > 50


# what plotly drew of the captured text: links in the charts, and every label's text
LABELS_JS = """
(() => ({
  links: document.querySelectorAll('.bs-chart a').length,
  bold: document.querySelectorAll('.bs-chart tspan[style*="font-weight"]').length,
  text: [...document.querySelectorAll('.bs-chart svg text')].map(t => t.textContent).join('\\n'),
}))()
"""


def test_captured_text_in_the_charts_is_shown_as_it_was_captured(tmp_path, capsys):
    """A client id `<a href=...>pwn</a>` became a working link in the clients chart, and a topic
    `<b>...` bold text (found by a user trial): plotly reads tags in the text it draws. The
    labels show the captured text as it was, with no link and no markup."""
    from brokerscope.streams import decode_files
    from tests.conftest import SAMPLE_DATA
    from tests.support.lakecheck import write_decoded

    evil_id, evil_topic = '<a href="https://evil.example/x">pwn</a>', "<b>'\"&x"
    out = decode_files([str(SAMPLE_DATA / "kafka" / "none.pcap")])
    for t, rows in out.items():
        for r in rows if not t.startswith("_") else ():
            if r.get("client_id"):
                r["client_id"] = evil_id
            if r.get("topic"):
                r["topic"] = evil_topic
    lake = tmp_path / "lake"
    write_decoded(str(lake), out)
    page = tmp_path / "report.html"
    rc, _, err = run(capsys, "report", "--lake", str(lake), "--out", str(page))
    assert rc == 0, err
    with _drawn(page) as b:
        got = b.evaluate(LABELS_JS)
        assert b.errors() == []
    assert got["links"] == 0 and got["bold"] == 0, got
    assert evil_id in got["text"] and evil_topic in got["text"], got["text"][:2000]
