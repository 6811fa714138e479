"""A small Iggy server simulator speaking the VSR framing of apache-iggy 0.9 clients.

Enough of the server for the real client (PyPI `apache-iggy` 0.9.0, Rust SDK 0.11) to log in,
ping, fetch cluster metadata, send, poll and store offsets. Wire facts (apache/iggy
core/binary_protocol consensus headers, client-wire offsets): every frame is a 256-byte header
then a body; size u32 @48, command u8 @60 (5 request, 8 reply).
Request: client u128 @128, request u64 @168, operation u8 @176 (1 register, 2 non-replicated,
128+ replicated), session u64 @184, command code u32 @196 for non-replicated requests.
Reply: client u128 @160, request u64 @200, operation u8 @208, status u32 @216.
Reply bodies this simulator invents where the format is not published are marked below.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time

HEADER = 256
SESSION = 42
USER_ID = 1


def reply(req: bytes, body: bytes = b"", status: int = 0) -> bytes:
    h = bytearray(HEADER)
    struct.pack_into("<IIIBB", h, 48, HEADER + len(body), 0, 0, 8, 0)
    h[160:176] = req[128:144]
    struct.pack_into("<Q", h, 200, struct.unpack_from("<Q", req, 168)[0])
    h[208] = req[176]
    struct.pack_into("<I", h, 216, status)
    return bytes(h) + body


def register_body(version: bytes = b"0.0.0-sim") -> bytes:
    """Register reply: u32 0, user id u32, session u64, u32 0, server version (u8 length)."""
    return struct.pack("<IIQIB", 0, USER_ID, SESSION, 0, len(version)) + version


def metadata_body(port: int) -> bytes:
    """Cluster metadata: name (u32 len), node count u32, per node name (u32 len), ip (u32 len),
    port u16 + 6 bytes, role u8, status u8."""
    name, node, ip = b"sim", b"sim-node", b"127.0.0.1"
    out = struct.pack("<I", len(name)) + name + struct.pack("<I", 1)
    out += struct.pack("<I", len(node)) + node + struct.pack("<I", len(ip)) + ip
    out += struct.pack("<H", port) + b"\0" * 6 + b"\0\0"
    return out


def _ident(buf: bytes, pos: int) -> tuple[str, int]:
    kind, length = buf[pos], buf[pos + 1]
    raw = buf[pos + 2 : pos + 2 + length]
    val = str(struct.unpack("<I", raw)[0]) if kind == 1 else raw.decode()
    return val, pos + 2 + length


class IggySim:
    """Run with `with IggySim() as sim: ... sim.port`; state is kept per (stream, topic)."""

    def __init__(self, port: int = 0, poll_format: str = "v48_batch"):
        self.port = port
        self.poll_format = poll_format
        self.messages: dict[tuple[str, str], list[tuple[int, int, bytes]]] = {}
        self.offsets: dict[tuple, int] = {}
        self.requests: list[tuple[int, int]] = []  # (operation, code) seen
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None

    # ------------------------------------------------------------------ server plumbing

    def __enter__(self) -> IggySim:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(5):
            raise RuntimeError("simulator did not start")
        return self

    def __exit__(self, *exc) -> None:
        if self._loop and self._stop:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread:
            self._thread.join(5)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()

    async def _handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                hdr = await r.readexactly(HEADER)
                size = struct.unpack_from("<I", hdr, 48)[0]
                body = await r.readexactly(size - HEADER) if size > HEADER else b""
                w.write(self.answer(hdr, body))
                await w.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            w.close()

    # ------------------------------------------------------------------ behaviour

    def answer(self, hdr: bytes, body: bytes) -> bytes:
        op = hdr[176]
        code = struct.unpack_from("<I", hdr, 196)[0] if op == 2 else 0
        self.requests.append((op, code))
        if op == 1:  # register = login
            return reply(hdr, register_body())
        if op == 2:
            if code == 12:
                return reply(hdr, metadata_body(self.port))
            if code == 100:
                return reply(hdr, self._poll(body))
            if code == 120:
                return reply(hdr, self._get_offset(body))
            return reply(hdr)  # ping and the rest: ok, empty
        if op == 160:
            self._store_messages(body)
            return reply(hdr)
        if op == 161:
            self._store_offset(body)
            return reply(hdr)
        return reply(hdr)  # create stream/topic etc.: ok, empty (result body unpublished)

    def _store_messages(self, body: bytes) -> None:
        pos = 4
        stream, pos = _ident(body, pos)
        topic, pos = _ident(body, pos)
        pos += 2 + body[pos + 1]  # partitioning
        count = struct.unpack_from("<I", body, pos)[0]
        pos += 4 + HEADER  # the batch header
        stored = self.messages.setdefault((stream, topic), [])
        ts = int(time.time() * 1_000_000)
        for _ in range(count):
            hlen, plen = struct.unpack_from("<II", body, pos + 32)
            size = 48 + plen + hlen
            stored.append((len(stored), ts, body[pos : pos + size]))
            pos += size

    def _poll_request(self, body: bytes) -> tuple[str, str, int, int, int]:
        pos = 1
        _, pos = _ident(body, pos)  # consumer id
        stream, pos = _ident(body, pos)
        topic, pos = _ident(body, pos)
        present, pid = body[pos], struct.unpack_from("<I", body, pos + 1)[0]
        pos += 5
        kind, value = body[pos], struct.unpack_from("<Q", body, pos + 1)[0]
        count = struct.unpack_from("<I", body, pos + 9)[0]
        start = value if kind == 1 else 0
        return stream, topic, pid if present else 1, start, count

    def _poll(self, body: bytes) -> bytes:
        """Polled messages (format invented to match what the client accepts: see poll_format)."""
        stream, topic, pid, start, count = self._poll_request(body)
        msgs = self.messages.get((stream, topic), [])[start : start + count]
        current = len(self.messages.get((stream, topic), [])) - 1
        if self.poll_format == "v48_batch":
            payload = b""
            for i, (_, _, raw) in enumerate(msgs):
                m = bytearray(raw)
                struct.pack_into("<I", m, 24, i)
                payload += bytes(m)
            base = msgs[0][0] if msgs else 0
            bh = bytearray(HEADER)
            struct.pack_into(
                "<QQQQQ", bh, 16, base, msgs[0][1] if msgs else 0, HEADER + len(payload), 0, len(msgs)
            )
            return struct.pack("<IQI", pid, max(current, 0), len(msgs)) + bytes(bh) + payload
        raise ValueError(self.poll_format)

    def _get_offset(self, body: bytes) -> bytes:
        return struct.pack("<IQQ", 1, 0, self.offsets.get("last", 0))

    def _store_offset(self, body: bytes) -> None:
        self.offsets["last"] = struct.unpack_from("<Q", body, len(body) - 8)[0]
