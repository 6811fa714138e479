"""A TLS-terminating TCP proxy: real TLS clients connect to it, and it forwards the plaintext to a
clear server (a broker, a simulator), as a TLS load balancer in front of a broker does.

    with TlsProxy(("127.0.0.1", broker_port)) as proxy:
        ...a TLS client connects to 127.0.0.1:proxy.port...
    proxy.upstream_ports   # the local ports of its connections to the server: the clear leg

Captured on loopback, one client run gives both legs: client <-> proxy.port in TLS, proxy <->
server in clear, the same application bytes (tests/support/make_tls_kafka.py). The server side of
TLS is Python's ssl (OpenSSL) with the throwaway certificate of tests/support/tlspair.py;
`server_context` takes the version and cipher limits of a test.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading

from tests.support import tlspair
from tests.support.loopcap import _tcp_ports


def server_context(max_version: ssl.TLSVersion | None = None, ciphers: str | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tlspair.certificate())
    if max_version is not None:
        ctx.maximum_version = max_version
    if ciphers:
        ctx.set_ciphers(ciphers)
    return ctx


def client_context(keylog: str, max_version: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    """A client context that trusts the throwaway certificate and writes its key log."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.keylog_filename = keylog
    if max_version is not None:
        ctx.maximum_version = max_version
    return ctx


class TlsProxy:
    def __init__(self, upstream: tuple[str, int], context: ssl.SSLContext | None = None):
        self.upstream = upstream
        self.context = context or server_context()
        self.port = 0
        self.upstream_ports: list[int] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task] = set()

    def __enter__(self) -> TlsProxy:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def leg(self, frame: bytes) -> str | None:
        """Which of the proxy's legs a captured frame is on: "tls" (client <-> proxy), "clear"
        (the proxy's own upstream connections to the server), or None."""
        pp = _tcp_ports(frame) or ()
        if self.port in pp:
            return "tls"
        if self.upstream[1] in pp and set(self.upstream_ports) & set(pp):
            return "clear"
        return None

    async def _start(self) -> asyncio.AbstractServer:
        return await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context)

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        self._tasks.add(asyncio.current_task())
        sr, sw = await asyncio.open_connection(*self.upstream)
        self.upstream_ports.append(sw.get_extra_info("sockname")[1])

        async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            except (ConnectionError, ssl.SSLError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    w.close()

        try:
            await asyncio.gather(pump(cr, sw), pump(sr, cw))
        finally:
            self._tasks.discard(asyncio.current_task())
