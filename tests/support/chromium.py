"""Headless Chromium driven over the DevTools protocol (CDP) on a pipe: no WebDriver, no
websocket, no Python package beyond the standard library.

Chromium started with `--remote-debugging-pipe` reads CDP commands from its file descriptor 3 and
writes replies and events to descriptor 4, each message one JSON object ended by a NUL byte. A
`Browser` opens one page target, and records every network request the page attempts, console
messages, log entries and uncaught exceptions, so a test can assert on all of them.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"

# Quiet in a closed network: no background requests of the browser's own, no first-run pages.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
    "--remote-debugging-pipe",
)


def chromium_missing() -> str | None:
    """None when a Chromium can be started, else why not (a skip reason)."""
    exe = os.environ.get("BROKERSCOPE_CHROMIUM") or CHROMIUM
    if not (Path(exe).is_file() and os.access(exe, os.X_OK)) and not shutil.which(exe):
        return (
            f"Chromium not installed at {exe} (Debian: apt-get install chromium; `make test` does it as root)"
        )
    return None


class CDPError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page. Use as a context manager; `close()` ends the process."""

    def __init__(self, width: int = 1400, height: int = 900, timeout: float = 30.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="brokerscope-chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        exe = os.environ.get("BROKERSCOPE_CHROMIUM") or CHROMIUM

        def fds():  # the child's descriptors 3 (commands in) and 4 (replies out), inherited
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_chrome_r, from_chrome_w)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.proc = subprocess.Popen(
            [
                exe,
                *FLAGS,
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=fds,
            close_fds=False,  # descriptors 3 and 4 stay open; Python's own are close-on-exec
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict] = []
        self.session: str | None = None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    # -- the protocol -------------------------------------------------------------------------
    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise CDPError("no reply from Chromium in time")
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                raise CDPError(f"Chromium closed the pipe (exit {self.proc.poll()})")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def call(self, method: str, **params) -> dict:
        """Send one command (to the page once attached) and wait for its reply; events that
        arrive meanwhile are kept in `events`."""
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise CDPError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_for(self, method: str) -> dict:
        """The first event named `method` (already received, or the next to come)."""
        deadline = time.monotonic() + self.timeout
        while True:
            for e in self.events:
                if e["method"] == method:
                    return e
            self.events.append(self._read(deadline))

    # -- what tests use -----------------------------------------------------------------------
    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (awaited when it is a promise)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise CDPError(f"{expression[:60]}...: {r['exceptionDetails'].get('text')}")
        return r["result"].get("value")

    def requests(self) -> list[str]:
        """The URL of every request the page attempted (loaded, failed or blocked)."""
        return [
            e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"
        ]

    def errors(self) -> list[str]:
        """Console errors and warnings, browser log errors and uncaught exceptions, as text."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p["type"] in ("error", "warning", "assert"):
                out.append(
                    f"console.{p['type']}: "
                    + " ".join(str(a.get("value", a.get("description"))) for a in p["args"])
                )
            elif e["method"] == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
            elif e["method"] == "Log.entryAdded" and p["entry"]["level"] in ("error", "warning"):
                out.append(f"log.{p['entry']['level']}: {p['entry']['text']} {p['entry'].get('url', '')}")
        return out

    def screenshot(self, path: str | Path, full_page: bool = True) -> tuple[int, int]:
        """A PNG of the page (the whole page's height when `full_page`), its (width, height)."""
        params: dict = {"format": "png", "optimizeForSpeed": True}  # filter Up only: quick to check
        if full_page:
            m = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params.update(
                captureBeyondViewport=True,
                clip={"x": 0, "y": 0, "width": m["width"], "height": m["height"], "scale": 1},
            )
        data = base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])
        Path(path).write_bytes(data)
        return png_size(data)

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (CDPError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
