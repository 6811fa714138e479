"""One TLS connection: ciphertext in as TCP reassembly delivers it, plaintext out.

`TlsSession.feed(direction, data, ts_ns)`, `gap(direction, nbytes, ts_ns)` and `close()` take
what a `protocols.base.Conversation` takes and return events in the shape the conversation is
fed from (the stream driver's loop):

    ("data", direction, plaintext, ts_ns)  application data, in order; each plaintext byte has
                                           the capture time of the segment that carried its
                                           ciphertext byte
    ("gap", direction, nbytes, ts_ns)      application data that cannot be had (a gap in the
                                           capture, a record that fails authentication, a
                                           sequence number lost): its size, exact where the lost
                                           records' lengths are known, else estimated

Events come only for a direction whose keys were found, so a connection without keys gives none
(and only its metadata: `version`, `cipher`, `sni`, `alpn`, `resumed`, `decrypted`).

Keys: TLS 1.2 from the master secret (CLIENT_RANDOM) through the PRF, TLS 1.3 from the traffic
secrets (handshake secrets until each side's Finished, then application secrets, each KeyUpdate
deriving the next). Sequence numbers count records per direction and key epoch. A gap that took
whole records of known length keeps the count; one that put the record stream out of step loses
it: the next records are tried with the few sequence numbers the gap's size allows (TLS 1.2
AES-GCM senders usually put the sequence number in the explicit nonce: tried first), and when
none opens MAX_TRIAL_RECORDS records in a row, decryption of that direction stops (`decrypted`
says why).
"""

from __future__ import annotations

import math

from ..protocols.base import C2S, S2C
from ..tcp.packet import DATA, GAP
from . import handshake as hs
from . import kdf, keylog
from .keylog import KeyLog, Secret
from .protect import Aead13, BadRecord, Opener, opener12
from .record import (
    APPLICATION_DATA,
    CHANGE_CIPHER_SPEC,
    HANDSHAKE,
    HEADER_LEN,
    MAX_BODY,
    Lost,
    Record,
    RecordStream,
)
from .suites import SUITES, Suite, name_of

# `decrypted` values
YES = "yes"
NO_KEY = "no key"
FAILED = "failed"

MAX_TRIALS = 64  # sequence numbers tried on one record when a gap lost the count
MAX_TRIAL_RECORDS = 8  # records tried so in a row before a direction's decryption stops

# key epochs of a direction
CLEAR = "clear"
HANDSHAKE_KEYS = "handshake"
APPLICATION_KEYS = "application"


class _Side:
    """One direction: its record stream, handshake messages, keys and counters."""

    __slots__ = (
        "name",
        "records",
        "messages",
        "protected",
        "epoch",
        "opener",
        "seq",
        "secret",
        "next_secret",
        "trial",
        "trial_from",
        "trial_records",
        "pending",
        "stopped",
        "nonce_is_seq",
        "wire_bytes",
        "wire_records",
        "decrypted",
        "failed",
        "lost",
        "undecrypted",
        "app_bytes",
        "app_records",
        "early",
    )

    def __init__(self, name: str, in_step: bool):
        self.name = name
        self.records = RecordStream(in_step)
        self.messages = hs.Messages()
        self.protected = False  # records from here on are protected
        self.epoch = CLEAR
        self.opener: Opener | None = None
        self.seq: int | None = 0  # None: lost to a gap, being tried (`trial`)
        self.secret: Secret | None = None  # TLS 1.3 current traffic secret
        self.next_secret: Secret | None = None  # TLS 1.3: the application secret, in the handshake epoch
        self.trial: tuple[int, int, int] | None = None  # (lowest, highest, likeliest) sequence number
        self.trial_from = 0  # the sequence number before the records a gap took
        self.trial_records = 0
        self.pending: list | None = None  # [wire bytes, ts] lost since the sequence number was known
        self.stopped = False
        self.nonce_is_seq = True  # TLS 1.2 GCM: every explicit nonce so far was the sequence number
        self.wire_bytes = 0  # protected records seen: bytes on the wire and count (record size guess)
        self.wire_records = 0
        self.decrypted = 0  # records opened
        self.failed = 0  # records that failed authentication
        self.lost = 0  # protected records lost to gaps (or not opened after one)
        self.undecrypted = 0  # protected records without keys
        self.app_bytes = 0  # application data plaintext bytes
        self.app_records = 0
        self.early = 0  # TLS 1.3 0-RTT records (not decrypted)

    def __repr__(self) -> str:
        return f"<{self.name} epoch={self.epoch} seq={self.seq} decrypted={self.decrypted} keys hidden>"

    @property
    def opener_prefix(self) -> int:
        """How far into a record's body its plaintext starts (the explicit nonce or IV)."""
        op = self.opener
        return 0 if op is None or op.tls13 else op.suite.bulk.record_iv_len

    def counters(self) -> dict:
        return {
            "records": self.records.records,
            "decrypted": self.decrypted,
            "failed": self.failed,
            "lost": self.lost,
            "undecrypted": self.undecrypted,
            "early_data": self.early,
            "app_records": self.app_records,
            "app_bytes": self.app_bytes,
            "resyncs": self.records.resyncs,
        }


class TlsSession:
    """One TCP connection's TLS: decrypts what the key log allows, reads the handshake."""

    def __init__(self, keys: KeyLog | None = None, midstream: bool = False):
        """`keys`: the run's key log (None: read the handshake only). `midstream`: the capture
        starts after the connection did, so each direction may start inside a record."""
        self.keys = keys
        self.sides = {C2S: _Side(C2S, not midstream), S2C: _Side(S2C, not midstream)}
        self.client_hello: hs.ClientHello | None = None
        self.server_hello: hs.ServerHello | None = None
        self.suite: Suite | None = None
        self.version: str | None = None
        self.cipher: str | None = None
        self.sni: str | None = None
        self.alpn: str | None = None
        self.alpn_offered: list[str] = []
        self.resumed: bool | None = None
        self.encrypt_then_mac = False
        self.hello_retry = False
        self.keyed = False  # keys were found for at least one direction
        self.failure: str | None = None  # the first failure, with where it happened
        self.handshake_errors = 0
        self._certificate_seen = False
        self._key_block: kdf.KeyBlock | None = None
        self._version: int | None = None  # negotiated, from the ServerHello (or HelloRetryRequest)
        self._last_ts = 0

    def __repr__(self) -> str:
        return (
            f"TlsSession(version={self.version!r}, cipher={self.cipher!r}, sni={self.sni!r}, "
            f"alpn={self.alpn!r}, decrypted={self.status!r})"
        )

    __str__ = __repr__

    # -- metadata ---------------------------------------------------------------------------
    @property
    def decrypted(self) -> str:
        """YES (keys found, nothing failed), NO_KEY or FAILED; `reason` says why not YES."""
        if self.failure or self._nothing_opened():
            return FAILED
        return YES if self.keyed or self._keys_listed() else NO_KEY

    def _nothing_opened(self) -> str | None:
        """Why a connection whose keys were found decrypted none of its application data: a key
        log with its handshake secrets but not its traffic secrets (it read "yes" with nothing
        decrypted); None otherwise."""
        left = sum(s.undecrypted for s in self.sides.values())
        if not left or any(s.app_records for s in self.sides.values()):
            return None
        if not (self.keyed or self._keys_listed()):
            return None
        return f"no application data decrypted ({left} records without their keys)"

    @property
    def reason(self) -> str | None:
        if self.failure:
            return self.failure
        if (why := self._nothing_opened()) is not None:
            return why
        if self.decrypted == YES:
            return None
        if self.client_hello is None:
            return "no ClientHello captured"
        if self.keys is None:
            return "no key log"
        return "the client random is not in the key log"

    @property
    def status(self) -> str:
        """`decrypted` with its reason: "yes", "no key", "failed: <why>"."""
        d = self.decrypted
        return f"failed: {self.reason}" if d == FAILED else d

    def _keys_listed(self) -> bool:
        ch = self.client_hello
        return ch is not None and self.keys is not None and ch.random in self.keys

    def info(self) -> dict:
        """The streams row's tls_* columns."""
        return {
            "tls_version": self.version,
            "tls_cipher": self.cipher,
            "tls_sni": self.sni,
            "tls_alpn": self.alpn,
            "tls_decrypted": self.status,
            "tls_c2s_bytes": self.sides[C2S].app_bytes,
            "tls_s2c_bytes": self.sides[S2C].app_bytes,
        }

    def counters(self) -> dict:
        return {d: s.counters() for d, s in self.sides.items()}

    # -- input ------------------------------------------------------------------------------
    def feed(self, direction: str, data: bytes, ts_ns: int) -> list[tuple]:
        """Bytes that follow what was fed before in `direction` (as reassembly delivers them)."""
        self._last_ts = ts_ns
        side = self.sides[direction]
        return self._items(side, side.records.feed(data, ts_ns))

    def gap(self, direction: str, nbytes: int, ts_ns: int) -> list[tuple]:
        """`nbytes` of `direction` were never captured."""
        self._last_ts = ts_ns
        side = self.sides[direction]
        return self._items(side, side.records.gap(nbytes, ts_ns))

    def _items(self, side: _Side, items: list) -> list[tuple]:
        out: list = []
        for item in items:
            self._item(side, item, out)
        return _events(out)

    def close(self) -> list[tuple]:
        out: list = []
        for side in self.sides.values():
            for item in side.records.close(self._last_ts):
                self._item(side, item, out)
            if side.pending is not None:
                lo, _hi, best = side.trial
                self._flush_pending(side, max(lo, best) - side.trial_from, out)
        return _events(out)

    # -- records ----------------------------------------------------------------------------
    def _item(self, side: _Side, item: Record | Lost, out: list) -> None:
        if isinstance(item, Lost):
            self._lost(side, item, out)
            return
        rec = item
        if not side.protected:
            self._clear(side, rec, out)
            return
        if rec.ctype == CHANGE_CIPHER_SPEC and self._tls13():
            return  # TLS 1.3 middlebox compatibility: sent in clear, ignored
        side.wire_bytes += HEADER_LEN + len(rec.body)
        side.wire_records += 1
        opened = self._open(side, rec, out)
        if opened is None:
            return
        ctype, plain = opened
        if ctype == APPLICATION_DATA:
            side.app_records += 1
            side.app_bytes += len(plain)
            if plain:
                _data(out, side.name, plain, rec, side.opener_prefix)
        elif ctype == HANDSHAKE:
            for t, body, _n in side.messages.feed(plain):
                self._protected_message(side, t, body)
        elif ctype == CHANGE_CIPHER_SPEC:  # a protected CCS: TLS 1.2 renegotiation
            self._fail(side, "renegotiation is not followed", None)
            side.stopped = True

    def _clear(self, side: _Side, rec: Record, out: list) -> None:
        if rec.ctype == HANDSHAKE:
            for t, body, _n in side.messages.feed(rec.body):
                self._clear_message(side, t, body)
        elif rec.ctype == CHANGE_CIPHER_SPEC and self.server_hello is not None and not self._tls13():
            self._start_tls12(side)  # (TLS 1.3's compatibility CCS may come before any ServerHello)
        elif rec.ctype == APPLICATION_DATA:
            if (
                side.name == C2S
                and self.server_hello is None
                and self.client_hello
                and self.client_hello.early_data
            ):
                side.early += 1  # TLS 1.3 0-RTT data before the ServerHello
                return
            if self.server_hello is not None and not self._tls13():
                # TLS 1.2 data with no ChangeCipherSpec seen (a gap took it): keys from here,
                # the sequence number unknown
                self._start_tls12(side)
                self._lose_count(side, 1, MAX_TRIALS, 1, 0, rec.times[0][1] if rec.times else 0)
                self._item(side, rec, out)
                return
            side.undecrypted += 1

    # -- handshake --------------------------------------------------------------------------
    def _clear_message(self, side: _Side, t: int, body: bytes | None) -> None:
        try:
            if t == hs.CLIENT_HELLO and side.name == C2S and body is not None:
                ch = hs.client_hello(body)
                if self.client_hello is None or ch.random == self.client_hello.random:
                    self.client_hello = ch
                    self.sni = ch.sni
                    self.alpn_offered = ch.alpn
            elif t == hs.SERVER_HELLO and side.name == S2C and body is not None:
                self._on_server_hello(hs.server_hello(body))
            elif t == hs.CERTIFICATE and side.name == S2C:
                self._certificate_seen = True
        except hs.HandshakeError:
            self.handshake_errors += 1

    def _on_server_hello(self, sh: hs.ServerHello) -> None:
        self.suite = SUITES.get(sh.cipher_suite)
        self.cipher = name_of(sh.cipher_suite)
        self._version = sh.version
        self.version = hs.version_name(sh.version)
        if sh.retry:  # HelloRetryRequest: the real ServerHello follows the second ClientHello
            self.hello_retry = True
            return
        self.server_hello = sh
        ch = self.client_hello
        if sh.alpn:
            self.alpn = sh.alpn
        self.encrypt_then_mac = sh.encrypt_then_mac
        if sh.version == hs.TLS13:
            self.resumed = sh.psk
            self._start_tls13()
        else:
            self.resumed = bool(ch and sh.session_id and sh.session_id == ch.session_id)
            if sh.version != hs.TLS12:
                self._fail(None, f"{self.version} is not decrypted (TLS 1.2 and 1.3 are)", None)
        if self.suite is None:
            self._fail(None, f"cipher suite {self.cipher} is not supported", None)

    def _protected_message(self, side: _Side, t: int, body: bytes | None) -> None:
        if t == hs.ENCRYPTED_EXTENSIONS and side.name == S2C and body is not None:
            try:
                self.alpn = hs.encrypted_extensions(body)
            except hs.HandshakeError:
                self.handshake_errors += 1
        elif t == hs.FINISHED and self._tls13() and side.epoch == HANDSHAKE_KEYS:
            self._set_epoch(side, APPLICATION_KEYS, side.next_secret)
        elif t == hs.KEY_UPDATE and self._tls13() and side.epoch == APPLICATION_KEYS and side.secret:
            nxt = kdf.next_secret(self.suite, side.secret.reveal())
            self._set_epoch(side, APPLICATION_KEYS, Secret(nxt))

    # -- keys -------------------------------------------------------------------------------
    def _tls13(self) -> bool:
        return self._version == hs.TLS13

    def _secret(self, label: str) -> Secret | None:
        ch = self.client_hello
        if ch is None or self.keys is None:
            return None
        return self.keys.get(ch.random, label)

    def _start_tls13(self) -> None:
        if self.suite is None:
            return
        labels = {
            C2S: (keylog.CLIENT_HANDSHAKE, keylog.CLIENT_TRAFFIC_0),
            S2C: (keylog.SERVER_HANDSHAKE, keylog.SERVER_TRAFFIC_0),
        }
        for d, side in self.sides.items():
            side.protected = True
            side.messages.reset()
            hs_label, app_label = labels[d]
            side.next_secret = self._secret(app_label)
            self._set_epoch(side, HANDSHAKE_KEYS, self._secret(hs_label))

    def _set_epoch(self, side: _Side, epoch: str, secret: Secret | None) -> None:
        """A TLS 1.3 key change: the direction's records from here on are under `secret`."""
        side.epoch = epoch
        side.secret = secret
        side.seq = 0
        side.trial = None
        side.pending = None
        side.messages.reset()
        if secret is None:
            side.opener = None
            return
        key, iv = kdf.traffic_keys(self.suite, secret.reveal())
        side.opener = Aead13(self.suite, key, iv)
        self.keyed = True

    def _start_tls12(self, side: _Side) -> None:
        side.protected = True
        side.epoch = APPLICATION_KEYS
        side.seq = 0
        side.messages.reset()
        if side.name == S2C and self.resumed is False and not self._certificate_seen and self.client_hello:
            self.resumed = True  # abbreviated handshake: the server's CCS came without a certificate
        kb = self._tls12_keys()
        if kb is None:
            side.opener = None
            return
        if side.name == C2S:
            key, iv, mac = kb.client_key, kb.client_iv, kb.client_mac
        else:
            key, iv, mac = kb.server_key, kb.server_iv, kb.server_mac
        side.opener = opener12(self.suite, key, iv, mac, self.encrypt_then_mac)
        self.keyed = True

    def _tls12_keys(self) -> kdf.KeyBlock | None:
        if self._key_block is None:
            sh, ch = self.server_hello, self.client_hello
            master = self._secret(keylog.CLIENT_RANDOM)
            if sh is None or ch is None or master is None or self.suite is None or self.suite.tls13:
                return None
            if sh.version != hs.TLS12:
                return None
            self._key_block = kdf.key_block(self.suite, master.reveal(), ch.random, sh.random)
        return self._key_block

    # -- decryption -------------------------------------------------------------------------
    def _open(self, side: _Side, rec: Record, out: list) -> tuple[int, bytes] | None:
        """The record's (content type, plaintext), or None (with its loss accounted for)."""
        op = side.opener
        if op is None and side.epoch == HANDSHAKE_KEYS and side.next_secret is not None:
            if self._try_next_epoch(side, rec) is None:  # handshake keys missing: wait for the first
                side.undecrypted += 1  # record the application keys open
                return None
            return self._open(side, rec, out)
        if op is None:
            side.undecrypted += 1
            return None
        if side.stopped:
            self._lost_plain(side, len(rec.body), rec, out)
            return None
        if side.seq is None:
            return self._trial(side, rec, out)
        try:
            ctype, plain = op.open(side.seq, rec.ctype, rec.version, rec.body)
        except BadRecord as e:
            if side.epoch == HANDSHAKE_KEYS and side.next_secret is not None:
                # a gap may have taken the record with this side's Finished
                if self._try_next_epoch(side, rec) is not None:
                    return self._open(side, rec, out)
            if side.name == C2S and side.epoch == HANDSHAKE_KEYS and self.client_hello.early_data:
                side.early += 1  # 0-RTT data the server accepted: under early keys, not decrypted
                side.seq += 1
                return None
            side.failed += 1
            self._fail(side, str(e), side.seq)
            side.seq += 1
            self._lost_plain(side, len(rec.body), rec, out)
            return None
        if op.explicit_nonce and side.nonce_is_seq and rec.body[:8] != side.seq.to_bytes(8, "big"):
            side.nonce_is_seq = False
        side.seq += 1
        side.decrypted += 1
        return ctype, plain

    def _try_next_epoch(self, side: _Side, rec: Record) -> int | None:
        """TLS 1.3: does the record open under the application keys (sequence 0)? Switch if so."""
        key, iv = kdf.traffic_keys(self.suite, side.next_secret.reveal())
        probe = Aead13(self.suite, key, iv)
        try:
            probe.open(0, rec.ctype, rec.version, rec.body)
        except BadRecord:
            return None
        self._set_epoch(side, APPLICATION_KEYS, side.next_secret)
        return 0

    def _trial(self, side: _Side, rec: Record, out: list) -> tuple[int, bytes] | None:
        """Open a record whose sequence number a gap made unknown: the explicit nonce first (TLS
        1.2 GCM), then the fewest records the gap can have held and up, then around the likeliest."""
        op = side.opener
        lo, hi, best = side.trial
        best = min(max(best, lo), hi)
        cands: list[int] = []
        if op.explicit_nonce and side.nonce_is_seq and len(rec.body) >= 8:
            cands.append(int.from_bytes(rec.body[:8], "big"))
        cands += range(lo, min(hi, lo + MAX_TRIALS // 2 - 1) + 1)
        for k in range(hi - lo + 1):  # outward from the likeliest
            if len(cands) >= MAX_TRIALS or (best + k > hi and best - k < lo):
                break
            cands += [c for c in ((best + k, best - k) if k else (best,)) if lo <= c <= hi]
        seen = set()
        for c in cands:
            if c in seen or c < side.trial_from:
                continue
            seen.add(c)
            if len(seen) > MAX_TRIALS:
                break
            try:
                ctype, plain = op.open(c, rec.ctype, rec.version, rec.body)
            except BadRecord:
                continue
            self._flush_pending(side, c - side.trial_from, out)
            side.seq = c + 1
            side.trial = None
            side.trial_records = 0
            side.decrypted += 1
            return ctype, plain
        side.trial = (lo + 1, hi + 1, best + 1)
        side.trial_records += 1
        side.pending[0] += HEADER_LEN + len(rec.body)
        if side.trial_records >= MAX_TRIAL_RECORDS:
            side.stopped = True
            self._fail(side, "the record sequence number is unknown after a gap: decryption stopped", None)
            self._flush_pending(side, best + 1 - side.trial_from, out)
        return None

    # -- losses -----------------------------------------------------------------------------
    def _lost(self, side: _Side, lost: Lost, out: list) -> None:
        if not side.protected:
            side.messages.reset()  # the handshake messages of this direction are cut
            return
        if lost.records == 1 and lost.body_len is not None and side.seq is not None:
            side.seq += 1  # in step: exactly one record lost, of known size
            self._lost_plain(side, lost.body_len, lost, out)
            return
        if side.stopped:
            self._lost_plain(side, lost.nbytes, lost, out)
            return
        n = lost.nbytes
        if lost.records == 1:
            fewest = most = likely = 1
        else:
            overhead = side.opener.overhead() if side.opener else 0
            biggest, smallest = HEADER_LEN + MAX_BODY, HEADER_LEN + overhead + 1
            avg = side.wire_bytes / side.wire_records if side.wire_records else biggest
            fewest, most, likely = math.ceil(n / biggest), n // smallest + 1, max(1, round(n / avg))
        self._lose_count(side, fewest, most, likely, n, lost.ts)

    def _lose_count(
        self, side: _Side, fewest: int, most: int, likely: int, nbytes: int = 0, ts: int = 0
    ) -> None:
        """Between `fewest` and `most` records of this direction (`nbytes` on the wire) went
        missing: the sequence number is unknown until a record opens."""
        if side.seq is not None:
            side.trial_from = side.seq
            side.trial = (side.seq + fewest, side.seq + most, side.seq + likely)
            side.pending = [0, ts or self._last_ts]
        else:
            lo, hi, best = side.trial
            side.trial = (lo + fewest, hi + most, best + likely)
        side.seq = None
        side.pending[0] += nbytes

    def _flush_pending(self, side: _Side, records: int, out: list) -> None:
        """The plaintext of the wire bytes lost since the sequence number was: one gap, exact for
        AEAD once the number of records is known (CBC padding aside)."""
        if side.pending is None:
            return
        nbytes, ts = side.pending
        side.pending = None
        side.lost += records
        if side.opener is not None:
            plain = nbytes - records * (HEADER_LEN + side.opener.overhead())
            if plain > 0:
                _gap(out, side.name, plain, ts)

    def _lost_plain(self, side: _Side, body_len: int, at: Record | Lost, out: list) -> None:
        """A record's plaintext that will not be had: a gap of its size."""
        side.lost += 1
        if side.opener is None:
            return
        ts = at.times[0][1] if isinstance(at, Record) and at.times else getattr(at, "ts", self._last_ts)
        _gap(out, side.name, max(0, body_len - side.opener.overhead()), ts)

    def _fail(self, side: _Side | None, why: str, seq: int | None) -> None:
        if self.failure is None:
            where = f" ({side.name} record {seq})" if side is not None and seq is not None else ""
            where = where or (f" ({side.name})" if side is not None else "")
            self.failure = why + where


def _data(out: list, direction: str, plain: bytes, rec: Record, prefix: int) -> None:
    times = rec.times
    if len(times) <= 1:
        _push(out, DATA, direction, plain, times[0][1] if times else 0)
        return
    cuts = []
    for off, ts in times:
        p = min(max(0, off - prefix), len(plain))
        if cuts and p == cuts[-1][0]:
            cuts[-1] = (p, ts)
        else:
            cuts.append((p, ts))
    for i, (p, ts) in enumerate(cuts):
        end = cuts[i + 1][0] if i + 1 < len(cuts) else len(plain)
        if end > p:
            _push(out, DATA, direction, plain[p:end], ts)


def _gap(out: list, direction: str, nbytes: int, ts: int) -> None:
    if nbytes <= 0:  # a record too short to hold plaintext lost nothing: no gap for the conversation
        return
    if out and out[-1][0] == GAP and out[-1][1] == direction:
        out[-1][2] += nbytes
        return
    out.append([GAP, direction, nbytes, ts])


def _push(out: list, kind: str, direction: str, data: bytes, ts: int) -> None:
    last = out[-1] if out else None
    if last is not None and last[0] == DATA and last[1] == direction and last[3] == ts:
        last[2].append(data)
        return
    out.append([DATA, direction, [data], ts])


def _events(out: list) -> list[tuple]:
    return [(k, d, b"".join(v) if k == DATA else v, ts) for k, d, v, ts in out]


def sniff(client_head: bytes, server_head: bytes) -> float:
    """Confidence 0..1 that a connection is TLS, from the first bytes each side sent (the
    protocol sniffers' contract): a handshake record holding a ClientHello / ServerHello."""

    def hello(head: bytes, msg_type: int) -> bool:
        return (
            len(head) >= HEADER_LEN + 1
            and head[0] == HANDSHAKE
            and head[1] == 3
            and head[2] <= 4
            and 0 < int.from_bytes(head[3:5], "big") <= MAX_BODY
            and head[5] == msg_type
        )

    if hello(client_head, hs.CLIENT_HELLO):
        return 0.95 if not server_head or hello(server_head, hs.SERVER_HELLO) else 0.8
    if hello(server_head, hs.SERVER_HELLO):
        return 0.8
    return 0.0
