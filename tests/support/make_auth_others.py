"""Record Pulsar, Iggy and TubeMQ authentication traffic, as transcripts in tests/data/auth/.

    .venv/bin/python -m tests.support.make_auth_others [NAME ...]

Each recording runs a client against a simulator through the recording relay of
tests/support/relay.py; the transcript keeps the application bytes of every connection:

- pulsar_token / pulsar_basic: the real pulsar-client (C++ core) with token or basic
  authentication against tests/support/pulsar_sim.py: CONNECT carries auth_method_name "token" /
  "basic" and auth_data (the token, or "user:password"); one producer sends two messages.
- iggy_login / iggy_pat: the real apache-iggy client against tests/support/iggy_sim.py: login with
  a password (login_user), or with a personal access token (TcpConfig auto_login), then ping and
  create a stream. Both logins are a VSR REGISTER request.
- tubemq_auth: tests/support/tubemq_sim.py's RPC client against its master and broker (one relay
  each). The producer and the consumer authenticate to the master with an AuthenticateInfo
  (userName, timestamp, nonce, signature) in MasterCertificateInfo, then use the
  authAuthorizedToken the master hands out; the master also hands out the int64
  visitAuthorizedToken, which every broker request carries in AuthorizedInfo.

Every transcript lists its `secrets` (hex of the bytes as they appear on the wire, or of another
form a decoder might print them in): tests check that none of them reaches the decoder's output,
whatever packet a capture is cut at. `port` is the port the client connected to (the relay's),
`default_port` the protocol's, which the tests put in the captures instead.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time

from google.protobuf.internal.encoder import _VarintBytes

from tests.support.relay import Relay, save

OUT = os.path.join(os.path.dirname(__file__), "..", "data", "auth")

PULSAR_TOKEN = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.Qm7Xv2LkT9pWz4Rn8Hc3Ys6Df1Ga5Jb0"
PULSAR_USER, PULSAR_PASSWORD = "alice", "Nw5tRk8ZqB3mVx7LpH2c"
IGGY_USER, IGGY_PASSWORD = "iggy", "Kd8vQz3Lm6TxWp2Rj9Fb"
IGGY_PAT = "Zq4Wn7Rb2Xk9Lv5TyH3mGc8Sd1Pf6Ja0"
TUBEMQ_VISIT_TOKEN = 7396218845572019311
TUBEMQ_SIGNATURE = "q7XvK2mLp9RtZ4wN8bHc3sYf6Dg="  # looks like the Base64 HMAC-SHA1 the Java client sends
TUBEMQ_AUTH_TOKEN = "Ax6Jq9Wm3Tz7Kr2Vn5LsEu4Y"  # the master's authAuthorizedToken
TUBEMQ_USER = "tubeadmin"


def _secret(label: str, value: str | bytes) -> dict:
    return {"label": label, "hex": (value.encode() if isinstance(value, str) else value).hex()}


def _check_on_wire(name: str, connections, secrets: list[dict], off_wire: tuple[str, ...] = ()) -> None:
    wire = b"".join(b for c in connections for _, b in c)
    for s in secrets:
        on = bytes.fromhex(s["hex"]) in wire
        assert on or s["label"] in off_wire, f"{name}: {s['label']} is not on the wire"


# ------------------------------------------------------------------------------------- pulsar


def record_pulsar(name: str, method: str) -> tuple[str, dict]:
    import pulsar

    from tests.support.pulsar_sim import PulsarSim

    if method == "token":
        auth = pulsar.AuthenticationToken(PULSAR_TOKEN)
        secrets = [_secret("token", PULSAR_TOKEN)]
        auth_data = PULSAR_TOKEN
    else:
        auth = pulsar.AuthenticationBasic(PULSAR_USER, PULSAR_PASSWORD)
        auth_data = f"{PULSAR_USER}:{PULSAR_PASSWORD}"
        secrets = [_secret("password", PULSAR_PASSWORD), _secret("auth data", auth_data)]
    with PulsarSim() as sim, Relay(("127.0.0.1", sim.port)) as relay:
        sim.url = f"pulsar://127.0.0.1:{relay.port}"  # LOOKUP answers the relay: one connection
        client = pulsar.Client(
            sim.url,
            authentication=auth,
            operation_timeout_seconds=5,
            connection_timeout_ms=3000,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        try:
            producer = client.create_producer(
                "persistent://public/default/auth-demo",
                producer_name="auth-producer",
                batching_enabled=False,
                send_timeout_millis=5000,
            )
            ids = [producer.send(f"authenticated message {i}".encode()) for i in range(2)]
            producer.close()
        finally:
            client.close()
        time.sleep(0.3)
    connections = [c for c in relay.connections if c]
    assert len(ids) == 2 and len(sim.log["sends"]) == 2, f"{name}: {sim.log}"
    connect = connections[0][0][1]
    assert connect.find(method.encode()) > 0 and auth_data.encode() in connect, f"{name}: CONNECT"
    _check_on_wire(name, connections, secrets)
    meta = {
        "protocol": "pulsar",
        "port": relay.port,
        "default_port": 6650,
        "client": f"pulsar-client {pulsar.__version__} (C++ core) with pulsar.Authentication"
        + ("Token" if method == "token" else f"Basic({PULSAR_USER!r}, ...)"),
        "server": "tests/support/pulsar_sim.py (answers CONNECT with CONNECTED, no AUTH_CHALLENGE)",
        "note": f'CONNECT carries auth_method_name "{method}" and auth_data '
        + ("= the token" if method == "token" else '= "user:password"')
        + "; one producer sends two messages, then closes",
    }
    return save_recording(name, connections, meta, secrets), meta


# --------------------------------------------------------------------------------------- iggy


async def _iggy_session(port: int, pat: bool) -> list[str]:
    from apache_iggy import AutoLogin, IggyClient, TcpConfig

    done = []
    if pat:
        client = IggyClient(
            TcpConfig(
                server_address=f"127.0.0.1:{port}", auto_login=AutoLogin.personal_access_token(IGGY_PAT)
            )
        )
        await asyncio.wait_for(client.connect(), 5)  # logs in with the token
        done.append("connect+login_pat")
    else:
        client = IggyClient(f"127.0.0.1:{port}")
        await asyncio.wait_for(client.connect(), 5)
        await asyncio.wait_for(client.login_user(IGGY_USER, IGGY_PASSWORD), 5)
        done += ["connect", "login_user"]
    await asyncio.wait_for(client.ping(), 5)
    await asyncio.wait_for(client.create_stream("auth-demo"), 5)
    done += ["ping", "create_stream"]
    del client
    gc.collect()  # dropping the client closes its connection
    return done


def record_iggy(name: str, pat: bool) -> tuple[str, dict]:
    from tests.support.iggy_sim import IggySim

    with IggySim() as sim, Relay(("127.0.0.1", sim.port)) as relay:
        done = asyncio.run(_iggy_session(relay.port, pat))
        time.sleep(0.3)
    connections = [c for c in relay.connections if c]
    ops = [op for op, _ in sim.requests]
    assert 1 in ops and 128 in ops, f"{name}: {sim.requests}"  # REGISTER (the login), CREATE_STREAM
    secrets = [_secret("personal access token", IGGY_PAT) if pat else _secret("password", IGGY_PASSWORD)]
    _check_on_wire(name, connections, secrets)
    meta = {
        "protocol": "iggy",
        "port": relay.port,
        "default_port": 8090,
        "client": "apache-iggy 0.9.0 (PyPI, Rust SDK 0.11, VSR framing) "
        + (
            "TcpConfig(auto_login=AutoLogin.personal_access_token(...))"
            if pat
            else f"login_user({IGGY_USER!r}, ...)"
        ),
        "server": "tests/support/iggy_sim.py",
        "steps": done,
        "note": "the login is a VSR REGISTER (operation 1): ClientVersionInfo, then "
        + (
            "the token (u8 length), then context (u32 length); its header is the same as a password login's"
            if pat
            else "username and password (u8 lengths), then context (u32 length)"
        ),
    }
    return save_recording(name, connections, meta, secrets), meta


# ------------------------------------------------------------------------------------- tubemq


def record_tubemq(name: str) -> tuple[str, dict]:
    from brokerscope.protocols.tubemq.gen import tubemq_broker_pb2 as brk
    from brokerscope.protocols.tubemq.gen import tubemq_master_pb2 as mst
    from tests.support import tubemq_sim as ts

    topic, group = "auth-demo", "auth-grp"
    issued = mst.MasterAuthorizedInfo(
        visitAuthorizedToken=TUBEMQ_VISIT_TOKEN, authAuthorizedToken=TUBEMQ_AUTH_TOKEN
    )
    seen: list[tuple[int, str]] = []  # (method, which credential the master got)

    class AuthMaster(ts.MasterSim):
        """The sim's master, handing out this recording's tokens to authenticated clients."""

        def handle(self, method, req):
            if req.HasField("authInfo"):
                a = req.authInfo
                seen.append((method, "signature" if a.HasField("authInfo") else "token"))
            rsp = super().handle(method, req)
            if method in (1, 2, 4, 5):
                rsp.authorizedInfo.CopyFrom(issued)
            return rsp

    def certificate(first: bool) -> mst.MasterCertificateInfo:
        """What the Java client sends: a signed AuthenticateInfo first, the master's token after."""
        if first:
            return mst.MasterCertificateInfo(
                authInfo=mst.AuthenticateInfo(
                    userName=TUBEMQ_USER,
                    timestamp=1_700_000_123_456,
                    nonce=482913,
                    signature=TUBEMQ_SIGNATURE,
                )
            )
        return mst.MasterCertificateInfo(authorizedToken=token_from_master)

    broker = ts.BrokerSim().start()
    broker_relay = Relay(("127.0.0.1", broker.port)).__enter__()
    master = AuthMaster(broker_relay.port, topic, partitions=1, standby_first=False).start()
    master_relay = Relay(("127.0.0.1", master.port)).__enter__()
    mport, bport = master_relay.port, broker_relay.port
    clients: list = []
    received: list[bytes] = []
    try:
        # ---- producer: master register / heartbeat, two messages to the broker, master close
        pm = ts.RpcClient(mport, ts.SERVICE_MASTER)
        clients.append(pm)
        reg = pm.call(
            1,
            mst.RegisterRequestP2M(
                clientId="auth-prod",
                topicList=[topic],
                brokerCheckSum=-1,
                hostName="127.0.0.1",
                jdkVersion="sim",
                authInfo=certificate(True),
            ),
            mst.RegisterResponseM2P,
        )
        token_from_master = reg.authorizedInfo.authAuthorizedToken
        visit = reg.authorizedInfo.visitAuthorizedToken
        assert visit == TUBEMQ_VISIT_TOKEN and token_from_master == TUBEMQ_AUTH_TOKEN
        pm.call(
            2,
            mst.HeartRequestP2M(
                clientId="auth-prod",
                brokerCheckSum=11,
                hostName="127.0.0.1",
                topicList=[topic],
                authInfo=certificate(False),
            ),
            mst.HeartResponseM2P,
        )
        authorized = brk.AuthorizedInfo(visitAuthorizedToken=visit, authAuthorizedToken=token_from_master)
        pb = ts.RpcClient(bport, ts.SERVICE_BROKER_WRITE)
        clients.append(pb)
        for i in range(2):
            data = f"authenticated message {i}".encode()
            r = pb.call(
                13,
                brk.SendMessageRequestP2B(
                    clientId="auth-prod",
                    topicName=topic,
                    partitionId=0,
                    data=data,
                    flag=0,
                    checkSum=ts.crc(data),
                    sentAddr=0x7F000001,
                    msgTime="202401020304",
                    authInfo=authorized,
                ),
                brk.SendMessageResponseB2P,
            )
            assert r.success, r.errMsg
        pm.call(
            3, mst.CloseRequestP2M(clientId="auth-prod", authInfo=certificate(False)), mst.CloseResponseM2P
        )
        # ---- consumer: master register / heartbeat, broker register, heartbeat, fetch, commit, close
        cm = ts.RpcClient(mport, ts.SERVICE_MASTER)
        clients.append(cm)
        cm.call(
            4,
            mst.RegisterRequestC2M(
                clientId="auth-cons",
                groupName=group,
                hostName="127.0.0.1",
                topicList=[topic],
                requireBound=False,
                jdkVersion="sim",
                authInfo=certificate(True),
            ),
            mst.RegisterResponseM2C,
        )
        hb = cm.call(
            5,
            mst.HeartRequestC2M(
                clientId="auth-cons", groupName=group, reportSubscribeInfo=False, authInfo=certificate(False)
            ),
            mst.HeartResponseM2C,
        )
        assert hb.authorizedInfo.visitAuthorizedToken == TUBEMQ_VISIT_TOKEN
        cb = ts.RpcClient(bport, ts.SERVICE_BROKER_READ)
        clients.append(cb)

        def c2b_register(op: int) -> None:
            cb.call(
                15,
                brk.RegisterRequestC2B(
                    opType=op,
                    clientId="auth-cons",
                    groupName=group,
                    topicName=topic,
                    partitionId=0,
                    readStatus=0,
                    authInfo=authorized,
                ),
                brk.RegisterResponseB2C,
            )

        c2b_register(31)
        cb.call(
            16,
            brk.HeartBeatRequestC2B(
                clientId="auth-cons",
                groupName=group,
                readStatus=0,
                partitionInfo=[f"1:127.0.0.1:{bport}:{topic}:0:0"],
                authInfo=authorized,
            ),
            brk.HeartBeatResponseB2C,
        )
        g = cb.call(
            17,
            brk.GetMessageRequestC2B(clientId="auth-cons", partitionId=0, groupName=group, topicName=topic),
            brk.GetMessageResponseB2C,
        )
        received = [m.payLoadData for m in g.messages]
        cb.call(
            18,
            brk.CommitOffsetRequestC2B(
                clientId="auth-cons", topicName=topic, partitionId=0, groupName=group, lastPackConsumed=True
            ),
            brk.CommitOffsetResponseB2C,
        )
        c2b_register(32)
        cm.call(
            6,
            mst.CloseRequestC2M(clientId="auth-cons", groupName=group, authInfo=certificate(False)),
            mst.CloseResponseM2C,
        )
    finally:
        for c in clients:
            c.close()
        time.sleep(0.3)
        master_relay.close()
        broker_relay.close()
        master.stop()
        broker.stop()
    assert len(received) == 2, received
    assert [k for _, k in seen] == ["signature", "token", "token", "signature", "token", "token"], seen
    m, b = [c for c in master_relay.connections if c], [c for c in broker_relay.connections if c]
    assert len(m) == 2 and len(b) == 2, (len(m), len(b))
    # in the order the client opened them: producer's master, producer's broker, consumer's ...
    connections = [m[0], b[0], m[1], b[1]]
    secrets = [
        _secret("visitAuthorizedToken (protobuf varint)", _VarintBytes(TUBEMQ_VISIT_TOKEN)),
        _secret("visitAuthorizedToken (decimal)", str(TUBEMQ_VISIT_TOKEN)),
        _secret("AuthenticateInfo signature", TUBEMQ_SIGNATURE),
        _secret("authAuthorizedToken", TUBEMQ_AUTH_TOKEN),
    ]
    _check_on_wire(name, connections, secrets, off_wire=("visitAuthorizedToken (decimal)",))
    meta = {
        "protocol": "tubemq",
        "port": mport,
        "default_port": 8715,
        "ports": [mport, bport, mport, bport],
        "default_ports": [8715, 8123, 8715, 8123],
        "roles": ["producer-master", "producer-broker", "consumer-master", "consumer-broker"],
        "client": "tests/support/tubemq_sim.py RpcClient (no real TubeMQ Python client exists), "
        "requests shaped like the Java client's with authentication on",
        "server": "tests/support/tubemq_sim.py MasterSim (issuing this recording's tokens) and BrokerSim",
        "note": "master register requests carry MasterCertificateInfo.authInfo (AuthenticateInfo "
        "userName, timestamp, nonce, signature), later master requests its authorizedToken (the "
        "authAuthorizedToken the master answered); the master's answers carry MasterAuthorizedInfo "
        "(visitAuthorizedToken int64, authAuthorizedToken); every broker request carries "
        "AuthorizedInfo with both",
    }
    return save_recording(name, connections, meta, secrets), meta


# -------------------------------------------------------------------------------------- main


def save_recording(name: str, connections, meta: dict, secrets: list[dict]) -> str:
    path = os.path.join(OUT, name + ".json")
    save(path, connections, **meta, secrets=secrets)
    return path


RECORDINGS = {
    "pulsar_token": lambda: record_pulsar("pulsar_token", "token"),
    "pulsar_basic": lambda: record_pulsar("pulsar_basic", "basic"),
    "iggy_login": lambda: record_iggy("iggy_login", pat=False),
    "iggy_pat": lambda: record_iggy("iggy_pat", pat=True),
    "tubemq_auth": lambda: record_tubemq("tubemq_auth"),
}


def main(argv: list[str]) -> None:
    os.makedirs(OUT, exist_ok=True)
    for name, run in RECORDINGS.items():
        if argv and name not in argv:
            continue
        path, meta = run()
        print(f"{os.path.relpath(path)}: {meta['client']}")


if __name__ == "__main__":
    main(sys.argv[1:])
