"""A Kafka relay that loses one response: real clients talk to a broker on 127.0.0.1 through it,
and the first response to a request of `drop_api` (Produce by default) never reaches the client,
whose connection is closed instead, so an idempotent producer retries the request on a new one.

The broker's advertised port is rewritten to the relay's in every response (Metadata names the
broker by host and port; the bytes `127.0.0.1` + the port as int32 follow each other in every
version), so the clients' other connections come through the relay too. `upstream_ports` are the
relay's own ports towards the broker, for captures that want only the clients' side.

    with DropRelay(broker_port) as relay:
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{relay.port}", ...})
    relay.dropped  # [(api_key, correlation_id)]
"""

from __future__ import annotations

import select
import socket
import struct

from tests.support.relay import Relay

HOST = b"127.0.0.1"


class DropRelay(Relay):
    def __init__(self, broker_port: int, drop_api: int = 0):
        super().__init__(("127.0.0.1", broker_port))
        self.drop_api = drop_api
        self.dropped: list[tuple[int, int]] = []
        self.upstream_ports: set[int] = set()
        self._advertised = (HOST + struct.pack(">i", broker_port), HOST + struct.pack(">i", self.port))

    def _pump(self, cli: socket.socket, srv: socket.socket, log: list) -> None:
        """Frame by frame, unlike Relay's chunks (`log` stays empty)."""
        self.upstream_ports.add(srv.getsockname()[1])
        bufs = {cli: b"", srv: b""}
        pending: dict[int, int] = {}  # correlation id -> api key of the requests sent on
        old, new = self._advertised
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([cli, srv], [], [], 0.1)
                for s in ready:
                    data = s.recv(1 << 20)
                    if not data:
                        return
                    bufs[s] += data
                    while len(bufs[s]) >= 4 and len(bufs[s]) >= 4 + struct.unpack_from(">i", bufs[s])[0]:
                        n = 4 + struct.unpack_from(">i", bufs[s])[0]
                        frame, bufs[s] = bufs[s][:n], bufs[s][n:]
                        if s is cli:  # request header: size, api key, version, correlation id
                            api, _version, corr = struct.unpack_from(">hhi", frame, 4)
                            pending[corr] = api
                            srv.sendall(frame)
                            continue
                        corr = struct.unpack_from(">i", frame, 4)[0]
                        if pending.pop(corr, None) == self.drop_api and not self.dropped:
                            self.dropped.append((self.drop_api, corr))
                            return  # the response is lost with the connection
                        cli.sendall(frame.replace(old, new))
        except OSError:
            pass
        finally:
            cli.close()
            srv.close()
