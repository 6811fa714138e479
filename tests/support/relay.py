"""A recording TCP relay: real clients talk to a real (or simulated) server through it, and it
keeps every chunk each side sent, in order. The transcript is the application bytes of the
exchange, which tests/support/cuts.py turns into captures cut at any packet boundary.

    with Relay(("127.0.0.1", server_port)) as relay:
        run_client(f"127.0.0.1:{relay.port}")
    relay.transcript  # [("c2s" | "s2c", bytes), ...] over every connection, in arrival order

Transcript files (tests/data/auth/*.json) hold {"connections": [[["c2s", hex], ...], ...]}.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time


class Relay:
    def __init__(self, upstream: tuple[str, int], port: int = 0):
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", port))
        self.port = self.listener.getsockname()[1]
        self.connections: list[list[tuple[str, bytes]]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> Relay:
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
        for t in self._threads:
            t.join(5)

    def _accept(self) -> None:
        self.listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                cli, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            srv = socket.create_connection(self.upstream)
            for s in (cli, srv):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            log: list[tuple[str, bytes]] = []
            with self._lock:
                self.connections.append(log)
            t = threading.Thread(target=self._pump, args=(cli, srv, log), daemon=True)
            t.start()
            self._threads.append(t)

    def _pump(self, cli: socket.socket, srv: socket.socket, log: list) -> None:
        peers = {cli: (srv, "c2s"), srv: (cli, "s2c")}
        open_ = {cli, srv}
        try:
            while open_ and not self._stop.is_set():
                r, _, _ = select.select(list(open_), [], [], 0.1)
                for s in r:
                    data = s.recv(1 << 20)
                    other, d = peers[s]
                    if not data:
                        open_.discard(s)
                        try:
                            other.shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
                        continue
                    log.append((d, data))
                    other.sendall(data)
        except OSError:
            pass
        finally:
            time.sleep(0.05)
            cli.close()
            srv.close()


def save(path: str, connections: list[list[tuple[str, bytes]]], **meta) -> None:
    doc = {**meta, "connections": [[[d, b.hex()] for d, b in conn] for conn in connections if conn]}
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")


def load(path: str) -> dict:
    with open(path) as fh:
        doc = json.load(fh)
    doc["connections"] = [[(d, bytes.fromhex(h)) for d, h in conn] for conn in doc["connections"]]
    return doc
