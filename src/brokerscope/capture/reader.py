"""Reading one split of a pcap / pcapng file (optionally gzip-compressed) into PACKETS batches.

Plain files are memory-mapped (the OS reads ahead; slicing a payload is one copy). gzip files are
streamed through a sliding window of decompressed bytes, never held whole. Both give the record
loops the same view: a buffer, the file offset of its first byte (`base`) and whether the end of
the data is in it (`eof`).

A split owns the records whose first byte lies in [start, end). When `start` is not the head of the
file the reader resyncs: it learns byte order, link type and time resolution from the file's head,
then takes the first offset at or after `start` where a chain of consecutive record headers
validates. The same resync recovers from garbage in the middle of a file, and from a damaged
pcapng block length or pcap caplen (a block or record that runs past the end of the file, or a pcap
record that swallows a credible one): the whole read and a split starting inside the damage land
on the same block or record, so the rows do not depend on the split size.

The final batch of every split is a stats row (lo_ip null, payload = JSON counters); see
`decode.PacketDecoder.stats`.

The record loops below hand the common records to the compiled walks (capture/_walk.c: pcap
records and well-framed pcapng EPBs down to a whole TCP header) when the decoder has them
(`compiled`); a walk returns at the first record it does not take, which the loop then reads
here, as it reads every record without them.
"""

from __future__ import annotations

import array
import gc
import mmap
import os
import struct
import zlib
from collections.abc import Generator, Iterator

import pyarrow as pa

from .decode import PacketDecoder, _walk_module, compiled_default
from .files import PCAP_MAGICS, PCAPNG_BOM, Split
from .filter import NEVER_AFTER, NEVER_BEFORE, PacketFilter

MAX_CAPLEN = 256 * 1024  # largest plausible captured record (pcap resync and sanity bound)
MAX_BLOCK = 16 * 1024 * 1024  # largest pcapng block accepted
BATCH_BYTES = 16 * 1024 * 1024  # default bound on the record bytes behind one packets batch
CHAIN = 4  # consecutive record headers that must validate at a resync point
MAX_LINK_HEADER = 64  # the largest caplen - origlen excess a file's writer may show consistently
DAY = 86400
# a chain cut by the end of the file must start within this span of the file's first record time
CUT_SPAN = 366 * DAY
# a resync that wants a time near the last record's gives up on it after this many bytes past the
# first chain that ignores it (the last record may itself have been a false start)
REF_REACH = 1 << 20
_CHUNK = 4 * 1024 * 1024  # gzip: decompressed bytes read at a time
_NEED = -2  # chain check: more data needed to decide
# gzip: the decompressed bytes past a pcap record whose next header is not credible that must be at
# hand to tell whether a credible record starts inside it (a resync that may prefer a chain up to
# REF_REACH past the first one, and its chain of records)
_AHEAD = REF_REACH + 2 * CHAIN * (16 + MAX_CAPLEN)


# ------------------------------------------------------------------------------------------------
# byte windows


class _MapWindow:
    """The whole plain file, memory-mapped: `more` never adds anything (eof is always true)."""

    def __init__(self, path: str) -> None:
        self._fh = open(path, "rb")  # noqa: SIM115 - closed in close()
        size = os.fstat(self._fh.fileno()).st_size
        self._mm = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        self.buf = self._mm if self._mm is not None else b""
        self.base = 0
        self.eof = True
        self.random_access = True

    def more(self, p: int, need: int) -> int:
        return p

    def close(self) -> None:
        self.buf = b""
        if self._mm is not None:
            self._mm.close()
        self._fh.close()


class _Gunzip:
    """Incremental gzip decompression (multi-member) that keeps every byte decoded before damage.

    `gzip.GzipFile.read(n)` drops the partial output of a read that hits a truncated or corrupt
    stream; here each call returns what decompressed, and the damage surfaces on the next call.
    """

    def __init__(self, fh) -> None:
        self._fh = fh
        self._d = zlib.decompressobj(wbits=31)
        self._in = b""  # compressed bytes not yet given to the decompressor
        self._started = False  # the current member has consumed input
        self._err: Exception | None = None  # damage found after some data was decoded
        self.done = False

    def read(self, n: int) -> bytes:
        if self._err is not None:
            e, self._err = self._err, None
            raise e
        out: list[bytes] = []
        have = 0
        while have < n and not self.done:
            d = self._d
            if d.unconsumed_tail:
                data = d.unconsumed_tail
            elif self._in:
                data, self._in = self._in, b""
            else:
                data = self._fh.read(1 << 20)
                if not data:
                    self.done = True
                    if self._started and not d.eof:
                        if out:
                            break  # report the truncation on the next call, after this data
                        raise EOFError("compressed stream ends before its end marker")
                    break
            self._started = True
            try:
                chunk = d.decompress(data, n - have)
            except zlib.error as e:
                self.done = True
                if out:  # hand out what decoded first; the damage surfaces on the next call
                    self._err = e
                    break
                raise
            if chunk:
                out.append(chunk)
                have += len(chunk)
            if d.eof:  # end of a member: another may follow
                self._in = d.unused_data + self._in
                self._d = zlib.decompressobj(wbits=31)
                self._started = False
        if not out and self.done and self._started and not self._d.eof:
            self._started = False
            raise EOFError("compressed stream ends before its end marker")
        return b"".join(out)

    def close(self) -> None:
        self._fh.close()


class _StreamWindow:
    """A sliding window over a decompressed gzip stream."""

    def __init__(self, path: str, dec: PacketDecoder) -> None:
        self._fh = _Gunzip(open(path, "rb"))  # noqa: SIM115 - closed in close()
        self._dec = dec
        self.buf = b""
        self.base = 0
        self.eof = False
        self.random_access = False
        self.more(0, 64 * 1024)

    def more(self, p: int, need: int) -> int:
        """Drop buf[:p], then read until `need` bytes follow the new start or the stream ends."""
        tail = self.buf[p:]
        self.base += p
        parts = [tail]
        have = len(tail)
        while have < need and not self.eof:
            try:
                chunk = self._fh.read(max(_CHUNK, need - have))
            except (OSError, EOFError, zlib.error) as e:
                self._dec.error(f"gzip stream ends badly after {self.base + have} bytes: {type(e).__name__}")
                chunk = b""
            if not chunk:
                self.eof = True
                break
            parts.append(chunk)
            have += len(chunk)
        self.buf = parts[0] if len(parts) == 1 else b"".join(parts)
        return 0

    def close(self) -> None:
        self.buf = b""
        self._fh.close()


# ------------------------------------------------------------------------------------------------
# entry point


def read_split(
    split: Split,
    batch_packets: int = 8192,
    max_pending_fragments: int = 4096,
    batch_bytes: int = BATCH_BYTES,
    payload_refs: bool = False,
    flt: PacketFilter | None = None,
    tls_key_logs: list[bytes] | None = None,
    compiled: bool | None = None,
) -> Iterator[pa.RecordBatch]:
    """PACKETS batches for the records of `split`, then exactly one stats batch. A batch holds
    at most `batch_packets` rows and ends once `batch_bytes` of records were read for it (the
    memory of a task holding one batch stays flat however large its packets are). With
    `payload_refs`, a whole payload of a plain (not gzip) file is given as its offset in the file
    (payload null, payload_at set) for a later stage to read: see streams.PayloadFiles.
    `flt` (capture/filter.py): records outside its time window are dropped on their header, TCP
    segments of other hosts or ports on theirs (PacketDecoder), and both counted (`filtered`).
    `tls_key_logs`: the key log text of each pcapng Decryption Secrets Block (TLSK) of the split is
    appended to it, for the caller to keep apart from every row (they are secrets).
    `compiled`: the compiled walks take the common records (None: decode.compiled_default());
    False reads every record in Python (the reference the tests compare them with).

    Bad bytes inside the file never raise: they are counted, noted in `errors`, and the reader
    resyncs or stops. Only an unreadable file raises (OSError).
    """
    if compiled is None:
        compiled = compiled_default()
    dec = PacketDecoder(split.capture_id, split.file_index, max_pending_fragments, flt, compiled)
    window = flt.window() if flt is not None else (NEVER_BEFORE, NEVER_AFTER)
    bp = max(1, int(batch_packets))
    bb = max(1, int(batch_bytes))
    kind = split.kind
    gz = kind.endswith(".gz")
    if kind not in ("pcap", "pcapng", "pcap.gz", "pcapng.gz"):
        dec.error(f"not a capture file (kind {kind!r})")
    else:
        win = _StreamWindow(split.path, dec) if gz else _MapWindow(split.path)
        if payload_refs and not gz and len(win.buf):
            dec.ref_buf = win.buf
        try:
            # a gzip file is one split: offsets are in the decompressed stream, which has no end bound
            start, end = (0, 1 << 62) if gz else (split.start, split.end)
            if kind.startswith("pcapng"):
                yield from _read_pcapng(win, start, end, dec, bp, bb, window)
            else:
                yield from _read_pcap(win, start, end, dec, bp, bb, window)
        finally:
            win.close()
    dec.finish()
    if tls_key_logs is not None:
        tls_key_logs += dec.tls_key_logs
    if dec.rows:
        yield dec.flush()
    yield dec.stats_batch()


def _gc_pause() -> bool:
    """Pause the cyclic GC while a record loop runs (it allocates many small acyclic tuples, which
    would trigger collections for nothing). Re-enabled around every yield and at the end."""
    on = gc.isenabled()
    if on:
        gc.disable()
    return on


def _gc_resume(was_on: bool) -> bool:
    if was_on:
        gc.enable()
    return was_on


def _hand_out(dec: PacketDecoder, gc_on: bool) -> Generator[pa.RecordBatch, None, bool]:
    """Yield the batch being built, the cyclic GC resumed while the consumer runs (`gc_on`: what
    _gc_pause returned); paused again after, returning what _gc_pause returns then."""
    batch = dec.flush()
    _gc_resume(gc_on)
    yield batch
    return _gc_pause()


def _unsynced(dec: PacketDecoder, rec: int, stop: int) -> None:
    """No valid record header chain from `rec` to the end of the data: all of it is skipped.

    Damage is counted by the split whose record precedes it, up to where the resync lands or the
    data ends, past the split's own end if need be; a split's initial resync counts nothing (those
    bytes belong to the previous split's last record, or to its damage)."""
    if stop > rec:
        dec.damaged += stop - rec
        dec.error(f"no valid record from offset {rec} on ({stop - rec} bytes skipped)")


def _loop_done(dec: PacketDecoder, records: int, nbytes: int, filtered: int, tmin, tmax) -> None:
    """A record loop's counters (and the compiled walks') into the decoder."""
    dec.records += records
    dec.bytes += nbytes
    dec.filtered += filtered
    _note_ts(dec, tmin, tmax)
    if dec.native is not None:
        _note_ts(dec, *dec.take_counts())


def _note_ts(dec: PacketDecoder, tmin: int | None, tmax: int | None) -> None:
    if tmin is not None and (dec.first_ts_ns is None or tmin < dec.first_ts_ns):
        dec.first_ts_ns = tmin
    if tmax is not None and (dec.last_ts_ns is None or tmax > dec.last_ts_ns):
        dec.last_ts_ns = tmax


# ------------------------------------------------------------------------------------------------
# pcap


def _pcap_chain(
    buf, q: int, L: int, eof: bool, hdr, lim: int, fmax: int, t0: int | None, slack: int = 0
) -> int:
    """Do CHAIN non-empty record headers validate from q on? 1 yes, 0 no, _NEED more data needed.

    A header is valid when caplen <= lim, caplen <= origlen + slack (the excess the file's first
    record shows: some writers count a link header in caplen only), origlen > 0 (no frame is
    empty on the wire) and the fraction is below one second;
    consecutive timestamps lie within a day of each other. Empty records
    (caplen 0, a 16-byte header and nothing after it) may sit in the chain, at most CHAIN of them,
    but do not count towards it: a few 16-byte strides of plausible numbers inside a payload (a
    run of zeros is one with origlen 0; arrays of small structs are others) would otherwise pass
    for a chain, and after such a false start the real records, days away from its timestamps,
    never validate again. A chain cut by the end of the file counts as valid once it holds at
    least one complete non-empty record and, when `t0` (the time of the file's first record) is
    given, its first time lies in [t0 - DAY, t0 + CUT_SPAN]: a truly truncated last record keeps
    its place, while two payload strides that read as headers (often at time 0, or decades away)
    and whose second "record" runs past the end no longer pass.
    """
    k = 0
    empty = 0
    prev = None
    q0 = q
    while k < CHAIN:
        if q + 16 > L:
            if not eof:
                return _NEED
            return 1 if k > 0 and _near(hdr(buf, q0)[0], t0) else 0
        s, f, cl, ol = hdr(buf, q)
        if cl > lim or cl > ol + slack or f >= fmax or not ol:
            return 0
        if prev is not None and (s - prev > DAY or prev - s > DAY):
            return 0
        prev = s
        q += 16 + cl
        if q > L:  # a record cut by the end of the data: fine after a complete one
            if not eof:
                return _NEED
            return 1 if k > 0 and _near(hdr(buf, q0)[0], t0) else 0
        if cl:
            k += 1
        else:
            empty += 1
            if empty > CHAIN:
                return 0
    return 1


def _near(s: int, t0: int | None) -> bool:
    return t0 is None or -DAY <= s - t0 <= CUT_SPAN


def _pcap_resync(
    win, p: int, hdr, lim: int, fmax: int, ref: int | None, slack: int = 0, t0: int | None = None
) -> int:
    """The first offset (relative to win.buf, after win.more) >= p where a header chain validates,
    or -1 when none is found before the end of the data. May slide the window.

    With `ref` (the time of the last record read) the chain's first time must also lie within a
    day of it, but only as a preference: when a chain ignoring `ref` validates at q0 and none
    meeting it does within REF_REACH bytes after q0, the resync lands at q0. The last record may
    itself come from a false start (a split's first resync, with nothing to compare to, now and
    then takes payload bytes for records); real records, days from its time, would otherwise never
    validate again and the rest of the split would be lost as damage.
    """
    first = -1  # the first offset where a chain validates regardless of ref
    while True:
        buf, L, eof = win.buf, len(win.buf), win.eof
        q = p
        stop = L - 15
        if first >= 0 and first + REF_REACH < stop:
            stop = first + REF_REACH
        while q < stop:
            # cheap pre-check on the lengths before the full chain
            s, f, cl, ol = hdr(buf, q)
            if cl <= lim and cl <= ol + slack and f < fmax and ol:
                r = _pcap_chain(buf, q, L, eof, hdr, lim, fmax, t0, slack)
                if r == 1:
                    if ref is None or -DAY <= s - ref <= DAY:
                        return q
                    if first < 0:
                        first = q
                        if first + REF_REACH < stop:
                            stop = first + REF_REACH
                elif r == _NEED:
                    break
            q += 1
        if first >= 0 and q >= first + REF_REACH:
            return first
        if eof:
            return first
        keep = first if first >= 0 else q
        n = win.more(keep, (L - keep) + _CHUNK)
        p = n + (q - keep)
        if first >= 0:
            first = n


def _pcap_damaged_record(
    s: int, f: int, ol: int, span: int, last_s: int | None, fmax: int, seq_lim: int
) -> bool:
    """Is a pcap record header whose caplen is damaged (resynced over: `span` bytes from it to
    where the resync landed) a record, numbered as a frame with no packet, as Wireshark numbers
    it? Yes when the rest of its header is a record's (its fraction in bounds, its time within a
    day of the record before, an origlen a frame has) and the next credible record lies past its
    header but no further than its frame on the wire (a damaged caplen swallows the records after
    it, the resync lands on the next one); bytes inserted between records, or a record's own bytes
    read as a header after a caplen damaged smaller, are none."""
    return (
        f < fmax
        and (last_s is None or -DAY <= s - last_s <= DAY)
        and 0 < ol <= seq_lim
        and 16 <= span <= 16 + ol + MAX_LINK_HEADER
    )


# what frame_records says a record or block is
PACKET, OTHER, DAMAGED, SECTION, INTERFACE = "packet", "other", "damaged", "section", "interface"
_WHATS = (PACKET, OTHER, DAMAGED, SECTION, INTERFACE)
_WHAT_CODE = {w: i for i, w in enumerate(_WHATS)}


class FrameLog:
    """frame_records' (offset, what) entries, 9 bytes each (an offset and a code), not a tuple
    (about 100 bytes with its list slot and int): 63 MB for a capture of 7 million records."""

    def __init__(self) -> None:
        self.offsets = array.array("q")
        self.whats = bytearray()

    def append(self, entry: tuple[int, str]) -> None:
        self.offsets.append(entry[0])
        self.whats.append(_WHAT_CODE[entry[1]])

    def __len__(self) -> int:
        return len(self.whats)

    def __iter__(self) -> Iterator[tuple[int, str]]:
        whats = _WHATS
        return ((off, whats[w]) for off, w in zip(self.offsets, self.whats))

    def without(self, *left_out: str) -> FrameLog:
        """The entries but those that are one of `left_out`, in order."""
        out = FrameLog()
        codes = {_WHAT_CODE[w] for w in left_out}
        for off, w in zip(self.offsets, self.whats):
            if w not in codes:
                out.offsets.append(off)
                out.whats.append(w)
        return out

    @property
    def nbytes(self) -> int:
        return self.offsets.itemsize * len(self.offsets) + len(self.whats)


def frame_records(path: str, kind: str) -> FrameLog:
    """Every record of a whole capture file the reader numbers as a frame (its frame number: its
    1-based index in this list once SECTION and INTERFACE entries are left out), in file order, as
    (offset in the decompressed file, what): PACKET (a pcap record, a pcapng EPB, SPB or PB),
    OTHER (a pcapng block Wireshark shows as a frame, no packet: OTHER_FRAMES) or DAMAGED (a
    record or packet block whose length is damaged, resynced over: a frame with no packet); and
    the pcapng section and interface blocks (SECTION, INTERFACE), each well framed. The record
    loops of ingest walk it, damage and resync included (Python's, every record: `extract`
    copies records of these offsets only, never a damaged one); nothing is decoded."""
    dec = PacketDecoder("", 0, 0, None, False)
    dec.frame_log = log = FrameLog()
    gz = kind.endswith(".gz")
    win = _StreamWindow(path, dec) if gz else _MapWindow(path)
    nothing = (0, 0)  # a time window no record is in: every record dropped on its header
    try:
        read = _read_pcapng if kind.startswith("pcapng") else _read_pcap
        for _ in read(win, 0, 1 << 62, dec, 1 << 30, 1 << 62, nothing):
            pass
    finally:
        win.close()
    return log


def _read_pcap(
    win, start: int, end: int, dec: PacketDecoder, bp: int, bb: int, window: tuple[int, int]
) -> Iterator[pa.RecordBatch]:
    # one function on purpose: the record walk runs per packet (bench/read_bench.py), and every
    # call or attribute lookup it saved is per packet too; issue 13 moves it to compiled code
    buf = win.buf
    if len(buf) < 24:
        dec.error("file shorter than the pcap global header")
        return
    magic = bytes(buf[:4])
    if magic not in PCAP_MAGICS:
        dec.error("bad pcap magic")
        return
    order, mult = PCAP_MAGICS[magic]
    # global header: magic, version major/minor, thiszone, sigfigs, snaplen (16), linktype (20)
    snaplen, linktype = struct.unpack_from(order + "II", buf, 16)
    # resync chains trust only caplen <= min(snaplen, 256 KiB); reading in sequence is lenient
    # like Wireshark (some writers put a snaplen smaller than their records in the header)
    lim = snaplen if 0 < snaplen <= MAX_CAPLEN else MAX_CAPLEN
    seq_lim = max(MAX_CAPLEN, min(snaplen, MAX_BLOCK * 4))
    fmax = 1_000_000 if mult == 1000 else 1_000_000_000
    hdr = struct.Struct(order + "IIII").unpack_from  # ts_sec, ts_frac, caplen, origlen
    # a writer that counts a link header in caplen only (caplen = origlen + 16 for Linux cooked
    # captures) does so in every record: the first record's excess is tolerated in resync chains
    slack = 0
    t0 = None  # the first record's time: a resync chain cut by the end of the file must be near it
    if len(buf) >= 40:
        s0, f0, cl0, ol0 = hdr(buf, 24)
        slack = cl0 - ol0 if 0 < cl0 - ol0 <= MAX_LINK_HEADER else 0
        if cl0 <= lim and f0 < fmax:
            t0 = s0
    handle = dec.handler(linktype)
    eth = linktype & 0xFFFF == 1
    ip4 = dec.ip4
    rows = dec.rows
    walk = None  # the compiled walk of this file's records
    if dec.native is not None:
        walk = dec.native.pcap
        refs = dec.ref_buf is not None  # buf is the file's own bytes: whole payloads as offsets
        dec.native.pcap_file(order == ">", mult, fmax, seq_lim, snaplen, linktype, *window, refs)

    records = 0
    nbytes = 0
    filtered = 0
    lo, hi = window  # records outside [lo, hi) are counted and dropped before they are parsed
    cut = bb  # the batch ends at bp rows or once nbytes reaches cut, whichever comes first
    flog = dec.frame_log  # frame_records: every numbered record's offset and what it is
    tmin: int | None = None
    tmax: int | None = None
    last_s: int | None = None
    read_on = False  # reading past `end`, to where the next split's first resync lands
    p = 24
    if start > 24:
        p = _pcap_resync(win, start - win.base, hdr, lim, fmax, None, slack, t0)
        if p < 0:
            return
    buf, base, L, eof = win.buf, win.base, len(win.buf), win.eof
    dec.first_at = base + p
    gc_on = _gc_pause()
    try:
        while True:
            if walk is not None and L - p >= 16:
                p, records, nbytes, full, s = walk(buf, p, base, end, records, nbytes, cut, bp)
                if s is not None:
                    last_s = s
                if full:
                    cut = nbytes + bb
                    gc_on = yield from _hand_out(dec, gc_on)
                    continue
            # the record at p: the walk's first record it does not take, or every record
            if L - p < 16:
                if not eof:
                    p = win.more(p, 16)
                    buf, base, L, eof = win.buf, win.base, len(win.buf), win.eof
                    continue
                if L - p > 0:  # past this split's end too: the next one's resync cannot land there
                    dec.error(f"truncated record header at offset {base + p}")
                    dec.damaged += L - p
                break
            rec = base + p
            if rec >= end:
                if not read_on:
                    # the next split starts where its first resync lands: this one reads on to
                    # there (records whose chain does not validate, damage, a cut last record:
                    # as a read of the whole file reads them), once
                    read_on = True
                    q = _pcap_resync(win, end - base, hdr, lim, fmax, None, slack, t0)
                    buf, base, L, eof = win.buf, win.base, len(win.buf), win.eof
                    p = rec - base
                    if q < 0 or base + q > rec:
                        end = base + q if q >= 0 else 1 << 62
                        continue
                break
            s, f, cl, ol = hdr(buf, p)
            if cl > seq_lim or f >= fmax:
                dec.error(f"bad record header at offset {rec} (caplen {cl}, origlen {ol})")
                dec.malformed += 1
                q = _pcap_resync(win, p + 1, hdr, lim, fmax, last_s, slack, t0)
                buf, base, L, eof = win.buf, win.base, len(win.buf), win.eof
                if q < 0:
                    _unsynced(dec, rec, base + L)
                    break
                dec.damaged += base + q - rec
                dec.error(f"resynced at offset {base + q} (skipped {base + q - rec} bytes)")
                if _pcap_damaged_record(s, f, ol, base + q - rec, last_s, fmax, seq_lim):
                    records += 1  # a record whose caplen is damaged: a frame, no packet
                    if flog is not None:
                        flog.append((rec, DAMAGED))
                p = q
                continue
            q = p + 16 + cl
            if q + 16 > L and not eof:  # the record and the header after it
                p = win.more(p, 32 + cl)
                buf, base, L, eof = win.buf, win.base, len(win.buf), win.eof
                continue
            if q != L and (
                q + 16 > L
                or cl > ol + MAX_LINK_HEADER
                or (nx := hdr(buf, q))[2] > seq_lim
                or nx[1] >= fmax
                or nx[0] - s > DAY
                or s - nx[0] > DAY
            ):
                # the record is longer than its frame on the wire, or does not end where a
                # credible header (its caplen and fraction in bounds, its time within a day) or
                # the end of the file does: its caplen is damaged where a credible record starts
                # inside it (the resync rule a split's start applies), which is skipped to there;
                # else a cut last record, or a sound one with damage or a jump in time after it
                # (the next header says which)
                if not eof and L - p < 16 + cl + _AHEAD:  # a gzip window: the bytes to judge by
                    p = win.more(p, 16 + cl + _AHEAD)
                    buf, base, L, eof = win.buf, win.base, len(win.buf), win.eof
                    continue
                r = _pcap_resync(win if eof else _FixedWindow(buf), p + 1, hdr, lim, fmax, last_s, slack, t0)
                if 0 <= r < q:
                    dec.error(f"bad record header at offset {rec} (caplen {cl}, origlen {ol})")
                    dec.malformed += 1
                    dec.damaged += r - p
                    dec.error(f"resynced at offset {base + r} (skipped {r - p} bytes)")
                    if _pcap_damaged_record(s, f, ol, r - p, last_s, fmax, seq_lim):
                        records += 1  # a record whose caplen is damaged: a frame, no packet
                        if flog is not None:
                            flog.append((rec, DAMAGED))
                    p = r
                    continue
                if r > q and cl < ol and not 0 < snaplen <= cl and r - p - 16 in (ol, ol + slack):
                    # shorter than its frame with no snap length to cut it, and a credible record
                    # starts where its frame would end: its caplen is damaged smaller; read whole
                    dec.error(
                        f"bad record header at offset {rec} (caplen {cl}, origlen {ol}): read as "
                        f"{r - p - 16} bytes, where the next record starts"
                    )
                    dec.malformed += 1
                    cl, q = r - p - 16, r
                elif q > L:
                    dec.error(f"truncated record at offset {rec} (needs {16 + cl} bytes, {L - p} left)")
                    dec.damaged += L - p
                    break
            if cl > ol:  # read as captured, like tshark and scapy; counted per input
                dec.caplen_over_origlen += 1
            if cl > snaplen > 0:  # likewise
                dec.caplen_over_snaplen += 1
            ts = s * 1_000_000_000 + f * mult
            if tmin is None or ts < tmin:
                tmin = ts
            if tmax is None or ts > tmax:
                tmax = ts
            last_s = s
            records += 1
            if flog is not None:
                flog.append((rec, PACKET))
            nbytes += cl
            if not cl:  # an empty frame: nothing to decode
                dec.empty_records += 1
                p = q
                continue
            if ts < lo or ts >= hi:
                filtered += 1
                p = q
                continue
            try:
                # Ethernet + IPv4 (the common case) goes straight to the IPv4 parser
                if eth and cl >= 34 and buf[p + 28] == 8 and buf[p + 29] == 0:
                    ip4(buf, p + 30, q, ol, ts, rec, records)
                else:
                    handle(buf, p + 16, q, ol, ts, rec, records)
            except (struct.error, IndexError, ValueError) as e:  # a parser bug must not end the split
                dec.malformed += 1
                dec.error(f"undecodable record at offset {rec}: {e}")
            p = q
            if len(rows) >= bp or nbytes >= cut:
                cut = nbytes + bb
                gc_on = yield from _hand_out(dec, gc_on)
                rows = dec.rows
    finally:
        _gc_resume(gc_on)
        _loop_done(dec, records, nbytes, filtered, tmin, tmax)


# ------------------------------------------------------------------------------------------------
# pcapng


def _odd_record(dec: PacketDecoder, cl: int, ol: int, snaplen: int) -> bool:
    """Count a packet record other readers take as it is (longer than its original length or the
    interface's snap length, or empty); True when it is empty, so there is nothing to decode."""
    if cl > ol:
        dec.caplen_over_origlen += 1
    if cl > snaplen > 0:
        dec.caplen_over_snaplen += 1
    if not cl:
        dec.empty_records += 1
    return not cl


SHB = 0x0A0D0D0A
IDB = 1
# the packet times a ts_ns column holds: int64 nanoseconds since 1970 (1677-09-21 to 2262-04-11); a
# pcapng's 64-bit units can say more (a pcap's 32-bit seconds end in 2106)
TS_MIN, TS_MAX = -(1 << 63), (1 << 63) - 1
PB = 2  # obsolete Packet Block
SPB = 3
NRB = 4
ISB = 5
EPB = 6
JOURNAL = 9  # systemd Journal Export Block
DSB = 10  # Decryption Secrets Block
CUSTOM = (0x00000BAD, 0x40000BAD)  # Custom Blocks (copied, not copied by an editor)
TLS_KEY_LOG = 0x544C534B  # its secrets type "TLSK": NSS key log text
_KNOWN_BLOCKS = frozenset((SHB, IDB, PB, SPB, NRB, ISB, EPB, 7, 8, JOURNAL, DSB, *CUSTOM))
# blocks Wireshark shows as frames of their own, numbered with the packets: they take frame numbers
# (the tables' first_frame / last_frame, extract --frames) but hold no packet
OTHER_FRAMES = frozenset((JOURNAL, *CUSTOM))
PACKET_FRAMES = frozenset((EPB, SPB, PB))
_KNOWN_PATTERNS = frozenset(struct.pack(o + "I", t) for t in _KNOWN_BLOCKS for o in "<>")
_BOM_LE = struct.pack("<I", PCAPNG_BOM)
_BOM_BE = struct.pack(">I", PCAPNG_BOM)


class _Order:
    """Precompiled structs of one byte order."""

    def __init__(self, o: str) -> None:
        self.o = o
        self.u32 = struct.Struct(o + "I").unpack_from
        self.bh = struct.Struct(o + "II").unpack_from  # block type, total length
        self.epb = struct.Struct(o + "IIIII").unpack_from  # iface, ts hi, ts lo, caplen, origlen
        self.pb = struct.Struct(o + "HHIIII").unpack_from  # iface, drops, ts hi, ts lo, caplen, origlen
        self.idb = struct.Struct(o + "HHI").unpack_from  # linktype, reserved, snaplen
        self.opt = struct.Struct(o + "HH").unpack_from  # option code, length
        self.u64 = struct.Struct(o + "Q").unpack_from
        self.i64 = struct.Struct(o + "q").unpack_from


_LE = _Order("<")
_BE = _Order(">")


def _shb_order(buf, q: int, L: int) -> _Order | None:
    if q + 12 > L:
        return None
    bom = buf[q + 8 : q + 12]
    if bom == _BOM_LE:
        return _LE
    if bom == _BOM_BE:
        return _BE
    return None


def _ng_chain(buf, q: int, L: int, eof: bool, od: _Order, strict: bool = False) -> tuple[int, _Order]:
    """Does a chain of CHAIN blocks validate from q on (1 / 0 / _NEED)? Also the byte order of
    the first block (an SHB fixes its own).

    Each block: a standard (or local-use) type, total length a multiple of 4 and >= 12, trailing
    length equal to the leading one; an EPB's caplen fits its block and its interface id is small.
    A chain cut by the end of the data is valid once it holds one complete block; `strict` (a
    byte order other than the section's) also wants its last block to end where the data does:
    the last bytes of a file can pass for one block in the other order, with a few left over.
    """
    k = 0
    first = od
    while k < CHAIN:
        if q + 12 > L:
            if not eof:
                return _NEED, first
            return (1 if k > 0 and not (strict and q < L) else 0), first
        t, n = od.bh(buf, q)
        if t == SHB:
            o2 = _shb_order(buf, q, L)
            if o2 is None:
                return 0, first
            od = o2
            if k == 0:
                first = o2
            n = od.u32(buf, q + 4)[0]
            if n < 28:
                return 0, first
        elif t not in _KNOWN_BLOCKS and (k == 0 or not t & 0x80000000):
            return 0, first  # the first block of a standard type, later ones may be local-use
        if n < 12 or n & 3 or n > MAX_BLOCK:
            return 0, first
        if q + n > L:
            if not eof:
                return _NEED, first
            return (1 if k > 0 and not strict else 0), first
        if od.u32(buf, q + n - 4)[0] != n:
            return 0, first
        if t == EPB and (n < 32 or od.u32(buf, q + 20)[0] > n - 32 or od.u32(buf, q + 8)[0] >= 65536):
            return 0, first
        q += n
        k += 1
    return 1, first


def _ng_resync(win, p: int, od: _Order) -> tuple[int, _Order]:
    """First offset >= p (relative to win.buf after any slide) where a block chain validates in
    the current byte order or, failing that, the other one; -1 when none."""
    while True:
        buf, L, eof = win.buf, len(win.buf), win.eof
        q = p
        stop = L - 11
        other = _BE if od is _LE else _LE
        need = False
        while q < stop:  # noqa: B007
            if buf[q : q + 4] not in _KNOWN_PATTERNS:  # cheap pre-check of the block type
                q += 1
                continue
            for o in (od, other):
                r, o2 = _ng_chain(buf, q, L, eof, o, strict=o is other)
                if r == 1:
                    return q, o2
                if r == _NEED:
                    need = True
                    break
            if need:
                break
            q += 1
        if eof:
            return -1, od
        p = win.more(q, (L - q) + _CHUNK)


class _Iface:
    __slots__ = ("linktype", "snaplen", "mul", "shift", "div", "off_ns", "handle", "simple", "eth")

    def __init__(self, linktype: int, snaplen: int, tsresol: int, tsoffset: int, dec: PacketDecoder) -> None:
        self.linktype = linktype
        self.snaplen = snaplen
        # ts_ns = ((units * mul) >> shift) // div + off_ns
        if tsresol & 0x80:  # 2^-e seconds per unit
            self.mul, self.shift, self.div = 1_000_000_000, tsresol & 0x7F, 1
        else:  # 10^-e seconds per unit
            e = tsresol
            self.mul, self.shift, self.div = (10 ** (9 - e), 0, 1) if e <= 9 else (1, 0, 10 ** (e - 9))
        self.off_ns = tsoffset * 1_000_000_000
        self.simple = self.shift == 0 and self.div == 1  # ts_ns = units * mul + off_ns
        self.handle = dec.handler(linktype)
        self.eth = linktype & 0xFFFF == 1

    def time(self, th: int, tl: int) -> int:
        """A packet block's time in ns from its timestamp's high and low words (any size: see
        TS_MIN, TS_MAX)."""
        if self.simple:
            return (th << 32 | tl) * self.mul + self.off_ns
        return (((th << 32 | tl) * self.mul) >> self.shift) // self.div + self.off_ns


def _parse_idb(buf, q: int, n: int, od: _Order, dec: PacketDecoder) -> _Iface:
    """IDB body at q+8: linktype(2) reserved(2) snaplen(4), then options up to the trailer."""
    linktype, _res, snaplen = od.idb(buf, q + 8)
    tsresol, tsoffset = 6, 0
    o = q + 16
    stop = q + n - 4
    while o + 4 <= stop:
        code, ln = od.opt(buf, o)
        if code == 0:  # opt_endofopt
            break
        v = o + 4
        if v + ln > stop:
            break
        if code == 9 and ln >= 1:  # if_tsresol
            tsresol = buf[v]
        elif code == 14 and ln >= 8:  # if_tsoffset, seconds
            tsoffset = od.i64(buf, v)[0]
        o = v + ((ln + 3) & ~3)
    return _Iface(linktype, snaplen, tsresol, tsoffset, dec)


def _ng_walk(buf, target: int, dec: PacketDecoder) -> tuple[_Order, list[_Iface]]:
    """Walk block headers from the file head to `target`: the byte order and the interfaces in
    force there (only IDBs are parsed; every other block is skipped by its length)."""
    L = len(buf)
    q = 0
    od = _LE
    ifaces: list[_Iface] = []
    while q < target and q + 12 <= L:
        t, n = od.bh(buf, q)
        if t == SHB:
            o2 = _shb_order(buf, q, L)
            if o2 is not None:
                od = o2
                n = od.u32(buf, q + 4)[0]
                ifaces = []
        if n < 12 or n & 3 or q + n > L or od.u32(buf, q + n - 4)[0] != n:
            # damaged framing: continue from the next place a chain validates
            win = _FixedWindow(buf)
            q2, od = _ng_resync(win, q + 1, od)
            if q2 < 0:
                break
            q = q2
            continue
        if t == IDB and n >= 20:
            ifaces.append(_parse_idb(buf, q, n, od, dec))
        q += n
    return od, ifaces


def _section_at(buf, target: int, dec: PacketDecoder) -> tuple[_Order, list[_Iface]]:
    """The byte order and interfaces in force at `target` of `buf`, a whole pcapng file: the
    compiled walk of its block headers (_walk.ng_section), or, where that meets damaged framing
    or is not there, _ng_walk (which resyncs)."""
    walk = _walk_module() if dec.native is not None else None
    got = walk.ng_section(buf, target) if walk is not None else None
    if got is None:
        return _ng_walk(buf, target, dec)
    _shb, big, idbs = got
    od = _BE if big else _LE
    return od, [_parse_idb(buf, q, od.u32(buf, q + 4)[0], od, dec) for q in idbs]


class _FixedWindow:
    def __init__(self, buf) -> None:
        self.buf = buf
        self.base = 0
        self.eof = True

    def more(self, p: int, need: int) -> int:
        return p


def _read_pcapng(
    win, start: int, end: int, dec: PacketDecoder, bp: int, bb: int, window: tuple[int, int]
) -> Iterator[pa.RecordBatch]:
    # one function on purpose: the record walk runs per packet (bench/read_bench.py), and every
    # call or attribute lookup it saved is per packet too; issue 13 moves it to compiled code
    buf = win.buf
    L = len(buf)
    od = _shb_order(buf, 0, L)
    if od is None or bytes(buf[:4]) != b"\x0a\x0d\x0d\x0a":
        dec.error("bad pcapng section header")
        return
    head_order = od  # what a split's first resync starts with
    ifaces: list[_Iface] = []
    complete = True  # do we know every IDB in force at the current position?
    p = 0
    if start > 0:  # a plain file (a gzip one is one split): the whole of it is at hand
        p, od = _ng_resync(win, start - win.base, od)
        if p < 0:
            return
        # the section in force where the first block begins, whose interfaces its packets name:
        # the file's first, or one begun later (pcapng files joined by `cat`)
        od, ifaces = _section_at(win.buf, win.base + p, dec)

    records = 0
    nbytes = 0
    filtered = 0
    lo, hi = window  # records outside [lo, hi) are counted and dropped before they are parsed
    cut = bb
    tmin: int | None = None
    tmax: int | None = None
    last_ts = 0
    read_on = False  # reading past `end`, to where the next split's first resync lands
    flog = dec.frame_log  # frame_records: every numbered block's offset and what it is
    rows = dec.rows
    buf, base, L, eof = win.buf, win.base, len(win.buf), win.eof
    dec.first_at = base + p
    bh, epbu, u32 = od.bh, od.epb, od.u32
    ip4 = dec.ip4
    walk = dec.native.epb if dec.native is not None else None  # the compiled walk of EPBs
    told: tuple = (None, None)  # the byte order and interfaces the walk was given last
    gc_on = _gc_pause()
    try:
        while True:
            if walk is not None and L - p >= 12:
                if told[0] is not od or told[1] != tuple(ifaces):
                    told = (od, tuple(ifaces))
                    specs = [(f.linktype, f.snaplen, f.mul, f.shift, f.div, f.off_ns) for f in ifaces]
                    dec.native.ifaces(od is _BE, specs, lo, hi, dec.ref_buf is not None)
                p, records, nbytes, full, t = walk(buf, p, base, end, records, nbytes, cut, bp)
                if t is not None:
                    last_ts = t
                if full:
                    cut = nbytes + bb
                    gc_on = yield from _hand_out(dec, gc_on)
                    continue
            # the block at p: the walk's first block it does not take, or every block
            if L - p < 12:
                if not eof:
                    p = win.more(p, 12)
                    buf, base, L, eof = win.buf, win.base, len(win.buf), win.eof
                    continue
                if L - p > 0:  # past this split's end too: the next one's resync cannot land there
                    dec.error(f"truncated block header at offset {base + p}")
                    dec.damaged += L - p
                break
            rec = base + p
            if rec >= end:
                if not read_on:  # to where the next split's first resync lands (as for pcap)
                    read_on = True
                    q, _ = _ng_resync(win, end - base, head_order)
                    buf, base, L, eof = win.buf, win.base, len(win.buf), win.eof
                    p = rec - base
                    if q < 0 or base + q > rec:
                        end = base + q if q >= 0 else 1 << 62
                        continue
                break
            t, n = bh(buf, p)
            # fast path: a well-framed EPB of a known interface
            if t == EPB and 32 <= n <= MAX_BLOCK and not n & 3 and p + n <= L:
                iid, th, tl, cl, ol = epbu(buf, p + 8)
                if (
                    iid < len(ifaces)
                    and cl <= n - 32
                    and u32(buf, p + n - 4)[0] == n
                    and TS_MIN <= (ts := ifaces[iid].time(th, tl)) <= TS_MAX  # else: said below
                ):
                    ifc = ifaces[iid]
                    last_ts = ts
                    if tmin is None or ts < tmin:
                        tmin = ts
                    if tmax is None or ts > tmax:
                        tmax = ts
                    records += 1
                    if flog is not None:
                        flog.append((rec, PACKET))
                    nbytes += cl
                    if (not 0 < cl <= ol or cl > ifc.snaplen > 0) and _odd_record(dec, cl, ol, ifc.snaplen):
                        pass  # empty: nothing to decode
                    elif ts < lo or ts >= hi:
                        filtered += 1
                    else:
                        try:
                            if ifc.eth and cl >= 34 and buf[p + 40] == 8 and buf[p + 41] == 0:
                                ip4(buf, p + 42, p + 28 + cl, ol, ts, rec, records)  # Ethernet + IPv4
                            else:
                                ifc.handle(buf, p + 28, p + 28 + cl, ol, ts, rec, records)
                        except (struct.error, IndexError, ValueError) as e:
                            dec.malformed += 1
                            dec.error(f"undecodable record at offset {rec}: {e}")
                    p += n
                    if len(rows) >= bp or nbytes >= cut:
                        cut = nbytes + bb
                        gc_on = yield from _hand_out(dec, gc_on)
                        rows = dec.rows
                    continue
            bad = None
            found = None  # where a resync already landed
            if t == SHB:
                o2 = _shb_order(buf, p, L)
                if o2 is None:
                    bad = "bad section header byte-order magic"
                else:
                    od = o2
                    bh, epbu, u32 = od.bh, od.epb, od.u32
                    n = od.u32(buf, p + 4)[0]
            if bad is None and (n < 12 or n & 3 or n > MAX_BLOCK):
                bad = f"bad block length {n}"
            if bad is None:
                if p + n > L:
                    if not eof:
                        p = win.more(p, n)
                        buf, base, L, eof = win.buf, win.base, len(win.buf), win.eof
                        continue
                    # a cut last block, or a damaged length: where a credible block follows
                    # (the resync rule a split's start applies), the block is damage skipped
                    # to there, else the file was cut
                    found = _ng_resync(win, p + 1, od)  # at the end of the data: no slide
                    if found[0] < 0:
                        dec.error(f"truncated block at offset {rec} (needs {n} bytes, {L - p} left)")
                        dec.damaged += L - p
                        break
                    bad = f"bad block length {n}"
                elif od.u32(buf, p + n - 4)[0] != n:
                    bad = "trailing block length differs"
            if bad is not None:
                # a packet block (or a block Wireshark numbers) whose length is damaged is a frame
                # with no packet, where the next credible block lies no nearer than its fields say
                # (a few bytes inserted between blocks, however they read, are none): its header
                # read before a resync may slide a gzip window
                least = 0
                if t in PACKET_FRAMES or t in OTHER_FRAMES:
                    least = 12 if t in OTHER_FRAMES else 16
                    if t in (EPB, PB) and p + 24 <= L:
                        least = 32 + od.u32(buf, p + 20)[0]
                if found is None:
                    dec.error(f"{bad} at offset {rec}")
                    q, od2 = _ng_resync(win, p + 1, od)
                else:
                    dec.error(f"{bad} at offset {rec} (past the end of the file: {L - p} bytes left)")
                    q, od2 = found
                dec.malformed += 1
                buf, base, L, eof = win.buf, win.base, len(win.buf), win.eof
                if q < 0:
                    _unsynced(dec, rec, base + L)
                    break
                if od2 is not od:
                    od = od2
                    bh, epbu, u32 = od.bh, od.epb, od.u32
                    ifaces, complete = [], False
                dec.damaged += base + q - rec
                dec.error(f"resynced at offset {base + q} (skipped {base + q - rec} bytes)")
                if least and base + q - rec >= least:
                    records += 1  # a frame, no packet
                    if flog is not None:
                        flog.append((rec, DAMAGED))
                p = q
                continue

            if t == EPB or t == PB:
                if t == EPB:
                    iid, th, tl, cl, ol = od.epb(buf, p + 8)
                    room = n - 32
                else:
                    iid, _drops, th, tl, cl, ol = od.pb(buf, p + 8)
                    room = n - 32
                if iid >= len(ifaces) and not complete and win.random_access:
                    od, ifaces = _ng_walk(buf, rec, dec)
                    bh, epbu, u32 = od.bh, od.epb, od.u32
                    complete = True
                if iid >= len(ifaces):
                    dec.malformed += 1
                    dec.error(f"packet block names unknown interface {iid} at offset {rec}")
                elif cl > room:
                    dec.malformed += 1
                    dec.error(f"packet block caplen {cl} exceeds its block at offset {rec}")
                else:
                    ifc = ifaces[iid]
                    ts = ifc.time(th, tl)
                    records += 1
                    if flog is not None:
                        flog.append((rec, PACKET))
                    nbytes += cl
                    if not TS_MIN <= ts <= TS_MAX:  # a frame, with no time a column holds
                        dec.malformed += 1
                        dec.error(
                            f"packet block at offset {rec}: its time, {th << 32 | tl} units of interface "
                            f"{iid}'s resolution, is outside 1677-2262 (int64 nanoseconds): not decoded "
                            "(an if_tsresol its writer left out?)"
                        )
                    else:
                        last_ts = ts
                        if tmin is None or ts < tmin:
                            tmin = ts
                        if tmax is None or ts > tmax:
                            tmax = ts
                        if (not 0 < cl <= ol or cl > ifc.snaplen > 0) and _odd_record(
                            dec, cl, ol, ifc.snaplen
                        ):
                            pass  # empty: nothing to decode
                        elif ts < lo or ts >= hi:
                            filtered += 1
                        else:
                            try:
                                ifc.handle(buf, p + 28, p + 28 + cl, ol, ts, rec, records)
                            except (struct.error, IndexError, ValueError) as e:
                                dec.malformed += 1
                                dec.error(f"undecodable record at offset {rec}: {e}")
                    if len(rows) >= bp or nbytes >= cut:
                        cut = nbytes + bb
                        gc_on = yield from _hand_out(dec, gc_on)
                        rows = dec.rows
            elif t == SPB:
                if not ifaces and not complete and win.random_access:
                    od, ifaces = _ng_walk(buf, rec, dec)
                    bh, epbu, u32 = od.bh, od.epb, od.u32
                    complete = True
                if n < 16:
                    dec.malformed += 1
                    dec.error(f"simple packet block too short at offset {rec}")
                elif not ifaces:
                    dec.malformed += 1
                    dec.error(f"simple packet block without an interface at offset {rec}")
                else:
                    ifc = ifaces[0]
                    ol = od.u32(buf, p + 8)[0]
                    cl = min(ol, n - 16)
                    if ifc.snaplen:
                        cl = min(cl, ifc.snaplen)
                    records += 1
                    if flog is not None:
                        flog.append((rec, PACKET))
                    nbytes += cl
                    if not cl:
                        dec.empty_records += 1
                    elif last_ts < lo or last_ts >= hi:  # an SPB has no time: the last record's
                        filtered += 1
                    else:
                        try:
                            ifc.handle(buf, p + 12, p + 12 + cl, ol, last_ts, rec, records)
                        except (struct.error, IndexError, ValueError) as e:
                            dec.malformed += 1
                            dec.error(f"undecodable record at offset {rec}: {e}")
                    if len(rows) >= bp or nbytes >= cut:
                        cut = nbytes + bb
                        gc_on = yield from _hand_out(dec, gc_on)
                        rows = dec.rows
            elif t == IDB:
                if not complete and win.random_access:
                    # IDBs before this one may be unknown to this split: collect them first
                    od, ifaces = _ng_walk(buf, rec, dec)
                    bh, epbu, u32 = od.bh, od.epb, od.u32
                    complete = True
                if n < 20:
                    dec.malformed += 1
                    dec.error(f"interface description block too short at offset {rec}")
                else:
                    ifaces.append(_parse_idb(buf, p, n, od, dec))
                if flog is not None:
                    flog.append((rec, INTERFACE))
            elif t == SHB:
                ifaces = []
                complete = True
                if flog is not None:
                    flog.append((rec, SECTION))
            elif t == DSB and n >= 20:  # secrets type, length, data (padded to 4), options
                stype, slen = od.u32(buf, p + 8)[0], od.u32(buf, p + 12)[0]
                if stype == TLS_KEY_LOG and 16 + slen + 4 <= n:
                    dec.tls_key_logs.append(bytes(buf[p + 16 : p + 16 + slen]))
            elif t in OTHER_FRAMES:  # a journal entry or custom block: a frame, no packet
                records += 1
                dec.other_frames += 1
                if flog is not None:
                    flog.append((rec, OTHER))
            # NRB, ISB, other secrets and unknown blocks: skipped by their length
            p += n
    finally:
        _gc_resume(gc_on)
        _loop_done(dec, records, nbytes, filtered, tmin, tmax)
