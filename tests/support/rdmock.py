"""librdkafka's mock cluster (the one confluent-kafka makes with `test.mock.num.brokers`), made
through librdkafka's own C API so that its brokers' advertised address can be set: a proxy in
front of the broker (tests/support/tlsproxy.py) is then where every client connection goes,
with nothing on the wire rewritten, as a broker whose advertised listener is a TLS load
balancer. confluent-kafka does not expose the mock's API; ctypes calls it in the librdkafka
that confluent-kafka loads (its wheel's bundled copy, else the system's).

    with MockCluster() as mock:                  # one broker, listening on 127.0.0.1:mock.port
        with TlsProxy(("127.0.0.1", mock.port)) as proxy:
            mock.advertise("127.0.0.1", proxy.port)   # Metadata names the proxy from now on
            ...clients bootstrap from 127.0.0.1:proxy.port...
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import os

RD_KAFKA_PRODUCER = 0
ERRSTR = 512


@functools.cache
def librdkafka() -> ctypes.CDLL:
    import confluent_kafka

    site = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    found = sorted(glob.glob(os.path.join(site, "confluent_kafka.libs", "librdkafka*.so*")))
    path = found[0] if found else ctypes.util.find_library("rdkafka")
    if not path:
        raise RuntimeError("librdkafka not found")
    lib = ctypes.CDLL(path)
    p, s, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    for name, args, res in (
        ("rd_kafka_conf_new", [], p),
        ("rd_kafka_conf_set", [p, s, s, s, ctypes.c_size_t], i),
        ("rd_kafka_new", [i, p, s, ctypes.c_size_t], p),
        ("rd_kafka_destroy", [p], None),
        ("rd_kafka_mock_cluster_new", [p, i], p),
        ("rd_kafka_mock_cluster_destroy", [p], None),
        ("rd_kafka_mock_cluster_bootstraps", [p], s),
        ("rd_kafka_mock_broker_set_host_port", [p, ctypes.c_int32, s, i], i),
    ):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    return lib


class MockCluster:
    """A one-broker mock cluster (broker id 1) owned by a handle of its own."""

    def __init__(self, brokers: int = 1):
        self.brokers = brokers
        self.port = 0
        self._rk: int | None = None
        self._mc: int | None = None

    def __enter__(self) -> MockCluster:
        lib = librdkafka()
        err = ctypes.create_string_buffer(ERRSTR)
        conf = lib.rd_kafka_conf_new()
        lib.rd_kafka_conf_set(conf, b"log_level", b"3", err, ERRSTR)  # no notice of its empty bootstrap
        self._rk = lib.rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, ERRSTR)
        if not self._rk:
            raise RuntimeError(err.value.decode())
        self._mc = lib.rd_kafka_mock_cluster_new(self._rk, self.brokers)
        if not self._mc:
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.port = int(lib.rd_kafka_mock_cluster_bootstraps(self._mc).split(b",")[0].rsplit(b":", 1)[1])
        return self

    def advertise(self, host: str, port: int, broker_id: int = 1) -> None:
        """The host and port the broker names itself by in Metadata (and FindCoordinator)."""
        if librdkafka().rd_kafka_mock_broker_set_host_port(self._mc, broker_id, host.encode(), port):
            raise RuntimeError("rd_kafka_mock_broker_set_host_port failed")

    def __exit__(self, *exc) -> None:
        lib = librdkafka()
        lib.rd_kafka_mock_cluster_destroy(self._mc)
        lib.rd_kafka_destroy(self._rk)
