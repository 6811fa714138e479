/* The read stage's per-record loop, compiled: pcap records and pcapng Enhanced Packet Blocks of
 * the common kinds, parsed down to the TCP header, into the columns of a PACKETS batch.
 *
 * `Packets` is the batch being built (capture/decode.py's PacketDecoder keeps one instead of its
 * list of row tuples): typed column buffers, one row per TCP segment. Two writers fill it, in
 * record order:
 *
 *   pcap(buf, p, base, end, records, nbytes, cut, bp) and epb(...) walk records from buf[p] and
 *   take every record this file handles completely: a record header within the data, a caplen
 *   within its bounds and the record within the data (pcap: no longer than its frame but for a
 *   link header, and followed by a credible header in the data: else its caplen may be damaged),
 *   then Ethernet (802.1Q / 802.1ad tags),
 *   Linux SLL / SLL2, BSD null / loopback or raw IP, IPv4 not a fragment or IPv6 without extension
 *   headers, and a whole TCP header. They stop at the first record that is anything else (bad or
 *   cut record headers, fragments, UDP, other transports and link types, malformed IP or TCP
 *   headers: whatever reader.py and decode.py count, report or reassemble) and hand its offset
 *   back untouched; the Python reader then reads that one record exactly as it always does.
 *
 *   append(row), the Python handlers' row tuple (decode.py's order), for the records they read.
 *
 * Both walks mirror reader.py and decode.py value for value (the differential tests in
 * tests/unit/capture/test_capture_compiled.py and the fuzz target capture_compiled hold them to
 * it): record numbers, times, the filter's window and endpoint checks, payload offsets
 * (payload_at, for a plain file's whole payload) or bytes, snap_truncated, and the counters they
 * keep (records, bytes, filtered, snap_truncated, caplen_over_origlen, caplen_over_snaplen,
 * empty_records, the first and last times), which counts() hands over and resets.
 *
 * IPv4 names are written here (dotted quads); IPv6 names come from the Python function given
 * (str(ipaddress.IPv6Address)), kept in a small cache.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../protocols/arrowbuf.h" /* Buf, Col */

/* link types (LINKTYPE_* numbers, decode.py's LT_*) */
#define LT_NULL 0       /* BSD loopback: 4-byte address family, the writer's byte order */
#define LT_EN10MB 1     /* Ethernet */
#define LT_RAW_12 12    /* raw IP (OpenBSD's DLT_RAW number) */
#define LT_RAW_14 14    /* raw IP (BSD/OS DLT_RAW number) */
#define LT_RAW 101      /* raw IP, version from the first nibble */
#define LT_LOOP 108     /* OpenBSD loopback: address family in network byte order */
#define LT_LINUX_SLL 113  /* Linux cooked v1: 16-byte header, protocol at byte 14 */
#define LT_IPV4 228
#define LT_IPV6 229
#define LT_LINUX_SLL2 276 /* Linux cooked v2: 20-byte header, protocol at byte 0 */

#define ETH_HEADER 14     /* destination (6), source (6), EtherType at byte 12 */
#define VLAN_TAG 4        /* TCI (2), then the inner EtherType at byte 2 */
#define SLL_HEADER 16
#define SLL_PROTO_AT 14
#define SLL2_HEADER 20
#define NULL_HEADER 4
#define ET_IPV4 0x0800
#define ET_IPV6 0x86DD
#define AF_INET_VALUE 2   /* AF_INET, the same everywhere */

#define IP4_HEADER 20     /* version/IHL @0 | total length @2 | flags+fragment offset @6 | proto @9 |
                             src @12 | dst @16 */
#define IP4_FRAG_BITS 0x3FFF /* MF and the fragment offset */
#define IP6_HEADER 40     /* version @0 (high nibble) | payload length @4 | next header @6 | src @8 | dst @24 */
#define TCP_HEADER 20     /* sport @0 | dport @2 | seq @4 | ack @8 | data offset @12 (high nibble) |
                             flags @13 | window @14 */
#define IPPROTO_TCP 6

#define PCAP_RECORD 16    /* ts_sec @0 | ts_frac @4 | caplen @8 | origlen @12, the file's byte order */
#define EPB_HEAD 28       /* type @0 | length @4 | interface @8 | ts high @12 | ts low @16 | caplen @20 |
                             origlen @24, then the packet data */
#define EPB_MIN 32        /* EPB_HEAD and the trailing length */
#define EPB_TYPE 6
#define MAX_BLOCK (16 * 1024 * 1024) /* reader.MAX_BLOCK */
#define DAY_S 86400                  /* reader.DAY */
#define MAX_LINK_HEADER 64           /* reader.MAX_LINK_HEADER */
#define NS 1000000000LL

#define V6_CACHE 256      /* IPv6 names kept, by a hash of the address */

static inline uint32_t be16(const unsigned char *p) { return (uint32_t)p[0] << 8 | p[1]; }
static inline uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}
static inline uint64_t be64(const unsigned char *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }

/* One TCP segment as decode.py would append it. */
typedef struct {
    int v6;
    const unsigned char *src, *dst; /* 4 or 16 bytes, network order */
    uint32_t sport, dport, seq, ack, flags, win;
    Py_ssize_t p, ip_end;           /* payload start and the IP datagram's end in buf */
    Py_ssize_t pay_end;             /* the payload bytes taken: buf[p:pay_end] */
    int as_ref;                     /* the payload is given as its offset p (payload_at) */
    int trunc;                      /* snap_truncated */
} Seg;

typedef struct {
    uint64_t net[2], mask[2]; /* an IPv6 network as two big-endian halves */
} Net6;

typedef struct {
    unsigned char key[16];
    int used;
    char name[48];
    int len;
} Name6;

typedef struct {
    PyObject_HEAD
    /* the batch's columns */
    Py_ssize_t n;
    Buf rec, no, ts, seq, ack;                      /* int64 */
    Buf lo_port, hi_port, flags, win, wire, plen;   /* int32 */
    Buf from_lo, trunc, at_valid;                   /* one byte per row, packed by take() */
    Buf pay_at;                                     /* int64, 0 where null */
    Buf lo_offs, lo_data, hi_offs, hi_data;         /* string columns */
    Col payload;
    Py_ssize_t at_nulls;
    /* the ingest filter's endpoint check (filter.PacketFilter.endpoint_spec) */
    int by_endpoint, has_ports, has_nets;
    unsigned char ports[65536 / 8];
    uint32_t *nets4; /* (net, mask) pairs */
    Py_ssize_t n4;
    Net6 *nets6;
    Py_ssize_t n6;
    PyObject *v6name; /* bytes (16) -> str */
    Name6 *names6;
    /* the file: record headers, link type, time window */
    int swapped;      /* pcap: the file's byte order is not this machine's */
    int64_t mult, fmax, seq_lim, snaplen, lo, hi;
    int linktype, refs;
    /* pcapng: the interfaces in force, (linktype, snaplen, mul, shift, div, off_ns) each */
    Py_ssize_t nifaces;
    int64_t *ifaces;
    /* counters handed over by counts() */
    int64_t filtered, snap_truncated, over_orig, over_snap, empty, tmin, tmax;
    int has_ts;
} Packets;

/* ---------------------------------------------------------------------------------------------- */
/* columns */

static int put_i64(Buf *b, int64_t v) { return buf_put(b, &v, 8); }
static int put_i32(Buf *b, int32_t v) { return buf_put(b, &v, 4); }
static int put_u8(Buf *b, int v) {
    unsigned char c = (unsigned char)(v != 0);
    return buf_put(b, &c, 1);
}

static int put_str(Buf *offs, Buf *data, const char *s, Py_ssize_t n) {
    if (data->len + n > INT32_MAX) return -1;
    if (buf_put(data, s, n)) return -1;
    return put_i32(offs, (int32_t)data->len);
}

static int32_t clamp32(int64_t v) { return v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int32_t)v; }

/* One row in the column buffers: payload bytes pay[0:paylen] (paylen < 0: null) and payload_at
 * (at < 0: null). -1 with an error set when memory runs out. */
static int put_row(Packets *s, int64_t rec, int64_t no, int64_t ts, const char *lo, Py_ssize_t lolen, int64_t lo_port,
                   const char *hi, Py_ssize_t hilen, int64_t hi_port, int from_lo, int64_t seq, int64_t ack,
                   int64_t flags, int64_t win, int64_t wire, int64_t plen, int trunc, const unsigned char *pay,
                   int64_t paylen, int64_t at) {
    if (put_i64(&s->rec, rec) || put_i64(&s->no, no) || put_i64(&s->ts, ts) ||
        put_str(&s->lo_offs, &s->lo_data, lo, lolen) || put_i32(&s->lo_port, clamp32(lo_port)) ||
        put_str(&s->hi_offs, &s->hi_data, hi, hilen) || put_i32(&s->hi_port, clamp32(hi_port)) ||
        put_u8(&s->from_lo, from_lo) || put_i64(&s->seq, seq) || put_i64(&s->ack, ack) ||
        put_i32(&s->flags, clamp32(flags)) || put_i32(&s->win, clamp32(win)) || put_i32(&s->wire, clamp32(wire)) ||
        put_i32(&s->plen, clamp32(plen)) || put_u8(&s->trunc, trunc) || put_u8(&s->at_valid, at >= 0) ||
        put_i64(&s->pay_at, at >= 0 ? at : 0) || col_add(&s->payload, pay, paylen)) {
        PyErr_SetString(PyExc_MemoryError, "packet columns");
        return -1;
    }
    if (at < 0) s->at_nulls++;
    s->n++;
    return 0;
}

static int reset(Packets *s) {
    Buf *bufs[] = {&s->rec, &s->no, &s->ts, &s->seq, &s->ack, &s->lo_port, &s->hi_port, &s->flags, &s->win,
                   &s->wire, &s->plen, &s->from_lo, &s->trunc, &s->at_valid, &s->pay_at, &s->lo_offs,
                   &s->lo_data, &s->hi_offs, &s->hi_data};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) bufs[i]->len = 0;
    int32_t zero = 0;
    col_free(&s->payload);
    s->n = 0;
    s->at_nulls = 0;
    if (col_init(&s->payload, 1024) || put_i32(&s->lo_offs, zero) || put_i32(&s->hi_offs, zero)) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* One byte per row -> an Arrow bitmap. */
static PyObject *bitmap(Buf *b, Py_ssize_t n) {
    PyObject *out = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
    if (!out) return NULL;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    memset(o, 0, (size_t)(n + 7) / 8);
    for (Py_ssize_t i = 0; i < n; i++)
        if (b->p[i]) o[i / 8] |= (unsigned char)(1 << (i % 8));
    return out;
}

/* ---------------------------------------------------------------------------------------------- */
/* names and the filter */

/* "0." .. "255.": each byte value's decimal text and a dot, made by PyInit__walk */
static char octets[256][4];
static unsigned char octet_len[256];

static void init_octets(void) {
    for (int v = 0; v < 256; v++) {
        int n = put_u64(octets[v], (uint64_t)v);
        octets[v][n] = '.';
        octet_len[v] = (unsigned char)(n + 1);
    }
}

/* The dotted quad of the 4 bytes at a into out (16 bytes at least); its length. */
static int name4(const unsigned char *a, char *out) {
    int n = 0;
    for (int i = 0; i < 4; i++) {
        memcpy(out + n, octets[a[i]], 4);
        n += octet_len[a[i]];
    }
    return n - 1; /* no dot after the last */
}

/* The IPv6 name of the 16 bytes at a (from the cache, else from v6name): its Name6, or NULL with
 * an error set. */
static Name6 *name6(Packets *s, const unsigned char *a) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < 16; i++) h = (h ^ a[i]) * 16777619u;
    Name6 *e = &s->names6[h % V6_CACHE];
    if (e->used && !memcmp(e->key, a, 16)) return e;
    PyObject *str = PyObject_CallFunction(s->v6name, "y#", (const char *)a, (Py_ssize_t)16);
    if (!str) return NULL;
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(str, &n);
    if (!u || n >= (Py_ssize_t)sizeof e->name) {
        if (u) PyErr_SetString(PyExc_ValueError, "IPv6 name too long");
        Py_DECREF(str);
        return NULL;
    }
    memcpy(e->key, a, 16);
    memcpy(e->name, u, (size_t)n);
    e->len = (int)n;
    e->used = 1;
    Py_DECREF(str);
    return e;
}

/* filter._keep: either port among the filter's (if any), and either address in one of its
 * networks (has_nets false: any address). */
static int keep(Packets *s, const Seg *g) {
    if (s->has_ports && !(s->ports[g->sport >> 3] & (1 << (g->sport & 7))) &&
        !(s->ports[g->dport >> 3] & (1 << (g->dport & 7))))
        return 0;
    if (!s->has_nets) return 1;
    if (!g->v6) {
        uint32_t a = be32(g->src), b = be32(g->dst);
        for (Py_ssize_t i = 0; i < s->n4; i++) {
            uint32_t net = s->nets4[2 * i], mask = s->nets4[2 * i + 1];
            if ((a & mask) == net || (b & mask) == net) return 1;
        }
        return 0;
    }
    uint64_t a0 = be64(g->src), a1 = be64(g->src + 8), b0 = be64(g->dst), b1 = be64(g->dst + 8);
    for (Py_ssize_t i = 0; i < s->n6; i++) {
        const Net6 *t = &s->nets6[i];
        if (((a0 & t->mask[0]) == t->net[0] && (a1 & t->mask[1]) == t->net[1]) ||
            ((b0 & t->mask[0]) == t->net[0] && (b1 & t->mask[1]) == t->net[1]))
            return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* link, IP and TCP headers: 1 when buf[off:end] is a TCP segment this file takes (filled into g),
 * 0 when decode.py must read the record */

/* decode.py's _tcp4 / _tcp6 from the TCP header at l4: the payload up to cap_end (captured) of
 * ip_end (the datagram). */
static int tcp_seg(const unsigned char *buf, Py_ssize_t l4, Py_ssize_t cap_end, Py_ssize_t ip_end, int refs, Seg *g) {
    if (ip_end - l4 < TCP_HEADER || cap_end - l4 < TCP_HEADER) return 0;
    Py_ssize_t doff = (buf[l4 + 12] >> 4) << 2;
    Py_ssize_t p = l4 + doff;
    if (doff < TCP_HEADER || p > ip_end) return 0;
    g->p = p;
    g->ip_end = ip_end;
    if (p < cap_end) {
        g->pay_end = cap_end;
        g->as_ref = refs && cap_end == ip_end;
        g->trunc = cap_end < ip_end;
    } else {
        g->pay_end = p;
        g->as_ref = 0;
        g->trunc = ip_end - p > 0 || p > cap_end;
    }
    return 1;
}

static void tcp_fields(const unsigned char *t, Seg *g) {
    g->sport = be16(t);
    g->dport = be16(t + 2);
    g->seq = be32(t + 4);
    g->ack = be32(t + 8);
    g->flags = t[13];
    g->win = be16(t + 14);
}

/* decode.py's ip4: its one-unpack fast path (IHL 5, TCP, whole headers captured) decides a
 * payload's form as it does (a whole empty payload of a plain file is an offset there, bytes in
 * _tcp4); options, length 0 (segmentation offload) and the rest as ip4 then _tcp4 do. */
static int ip4(const unsigned char *buf, Py_ssize_t off, Py_ssize_t end, int refs, Seg *g) {
    if (end - off < IP4_HEADER) return 0;
    unsigned b0 = buf[off];
    Py_ssize_t ihl = (b0 & 15) << 2;
    if (b0 >> 4 != 4 || ihl < IP4_HEADER || end - off < ihl) return 0;
    Py_ssize_t total = be16(buf + off + 2);
    uint32_t ff = be16(buf + off + 6);
    unsigned proto = buf[off + 9];
    if (ff & IP4_FRAG_BITS || proto != IPPROTO_TCP) return 0;
    g->v6 = 0;
    g->src = buf + off + 12;
    g->dst = buf + off + 16;
    if (end - off >= IP4_HEADER + TCP_HEADER && b0 == 0x45 && total >= IP4_HEADER + TCP_HEADER) {
        Py_ssize_t ip_end = off + total, p = off + IP4_HEADER + ((buf[off + 32] >> 4) << 2);
        if (buf[off + 32] >= 0x50 && p <= ip_end) { /* decode.py's fast path */
            g->p = p;
            g->ip_end = ip_end;
            if (end >= ip_end) {
                g->pay_end = ip_end;
                g->as_ref = refs;
                g->trunc = 0;
            } else {
                g->pay_end = p < end ? end : p;
                g->as_ref = 0;
                g->trunc = 1;
            }
            tcp_fields(buf + off + IP4_HEADER, g);
            return 1;
        }
    }
    if (total == 0)
        total = end - off; /* segmentation offload on the capturing host: length from the capture */
    else if (total < ihl)
        return 0;
    Py_ssize_t ip_end = off + total;
    if (!tcp_seg(buf, off + ihl, end < ip_end ? end : ip_end, ip_end, refs, g)) return 0;
    tcp_fields(buf + off + ihl, g);
    return 1;
}

static int ip6(const unsigned char *buf, Py_ssize_t off, Py_ssize_t end, int refs, Seg *g) {
    if (end - off < IP6_HEADER || buf[off] >> 4 != 6 || buf[off + 6] != IPPROTO_TCP) return 0;
    Py_ssize_t plen = be16(buf + off + 4);
    Py_ssize_t ip_end = plen ? off + IP6_HEADER + plen : end; /* 0: jumbogram or offload */
    if (!tcp_seg(buf, off + IP6_HEADER, end < ip_end ? end : ip_end, ip_end, refs, g)) return 0;
    g->v6 = 1;
    g->src = buf + off + 8;
    g->dst = buf + off + 24;
    tcp_fields(buf + off + IP6_HEADER, g);
    return 1;
}

static int ethertype(const unsigned char *buf, uint32_t et, Py_ssize_t off, Py_ssize_t end, int refs, Seg *g) {
    while (et == 0x8100 || et == 0x88A8 || et == 0x9100) { /* 802.1Q, 802.1ad, legacy QinQ */
        if (end - off < VLAN_TAG) return 0;
        et = be16(buf + off + 2);
        off += VLAN_TAG;
    }
    if (et == ET_IPV4) return ip4(buf, off, end, refs, g);
    if (et == ET_IPV6) return ip6(buf, off, end, refs, g);
    return 0;
}

static int link_seg(const unsigned char *buf, int lt, Py_ssize_t off, Py_ssize_t end, int refs, Seg *g) {
    switch (lt) {
    case LT_EN10MB:
        if (end - off < ETH_HEADER) return 0;
        return ethertype(buf, be16(buf + off + 12), off + ETH_HEADER, end, refs, g);
    case LT_LINUX_SLL:
        if (end - off < SLL_HEADER) return 0;
        return ethertype(buf, be16(buf + off + SLL_PROTO_AT), off + SLL_HEADER, end, refs, g);
    case LT_LINUX_SLL2:
        if (end - off < SLL2_HEADER) return 0;
        return ethertype(buf, be16(buf + off), off + SLL2_HEADER, end, refs, g);
    case LT_NULL:
    case LT_LOOP: {
        if (end - off < NULL_HEADER) return 0;
        uint32_t af = le32(buf + off);
        if (af > 0xFFFF) af = be32(buf + off);
        if (af == AF_INET_VALUE) return ip4(buf, off + NULL_HEADER, end, refs, g);
        if (af == 24 || af == 28 || af == 30 || af == 10) /* AF_INET6: BSDs, FreeBSD, macOS, Linux */
            return ip6(buf, off + NULL_HEADER, end, refs, g);
        return 0;
    }
    case LT_RAW:
    case LT_RAW_12:
    case LT_RAW_14:
        if (end <= off) return 0;
        if (buf[off] >> 4 == 4) return ip4(buf, off, end, refs, g);
        if (buf[off] >> 4 == 6) return ip6(buf, off, end, refs, g);
        return 0;
    case LT_IPV4:
        return ip4(buf, off, end, refs, g);
    case LT_IPV6:
        return ip6(buf, off, end, refs, g);
    default:
        return 0;
    }
}

/* The row of segment g (or the filter's drop), as decode.py appends it. 0, or -1 with an error. */
static int put_seg(Packets *s, const unsigned char *buf, const Seg *g, int64_t rec, int64_t no, int64_t ts,
                   int64_t wire) {
    if (s->by_endpoint && !keep(s, g)) {
        s->filtered++;
        return 0;
    }
    char sn[48], dn[48];
    const char *sp = sn, *dp = dn;
    Py_ssize_t sl, dl;
    int alen = g->v6 ? 16 : 4;
    if (g->v6) {
        Name6 *e = name6(s, g->src);
        if (!e) return -1;
        memcpy(sn, e->name, (size_t)e->len);
        sl = e->len;
        if (!(e = name6(s, g->dst))) return -1;
        dp = e->name;
        dl = e->len;
    } else {
        sl = name4(g->src, sn);
        dl = name4(g->dst, dn);
    }
    if (g->trunc) s->snap_truncated++;
    int c = memcmp(g->src, g->dst, (size_t)alen);
    int from_lo = c < 0 || (c == 0 && g->sport <= g->dport);
    const unsigned char *pay = g->as_ref ? NULL : buf + g->p;
    int64_t paylen = g->as_ref ? -1 : g->pay_end - g->p, at = g->as_ref ? g->p : -1;
    int64_t plen = g->ip_end - g->p;
    if (from_lo)
        return put_row(s, rec, no, ts, sp, sl, g->sport, dp, dl, g->dport, 1, g->seq, g->ack, g->flags, g->win, wire,
                       plen, g->trunc, pay, paylen, at);
    return put_row(s, rec, no, ts, dp, dl, g->dport, sp, sl, g->sport, 0, g->seq, g->ack, g->flags, g->win, wire,
                   plen, g->trunc, pay, paylen, at);
}


/* ---------------------------------------------------------------------------------------------- */
/* the walks */

typedef struct {
    Py_buffer view;
    const unsigned char *buf;
    Py_ssize_t L, p, base, end;
    long long records, nbytes, cut, bp;
    int64_t last; /* the last record's time (pcap: its seconds) */
    int have_last, full;
} Walk;

static int walk_args(PyObject *const *args, Py_ssize_t nargs, Walk *w) {
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "expected (buf, p, base, end, records, nbytes, cut, bp)");
        return -1;
    }
    memset(w, 0, sizeof *w);
    w->p = PyLong_AsSsize_t(args[1]);
    w->base = PyLong_AsSsize_t(args[2]);
    w->end = PyLong_AsSsize_t(args[3]);
    w->records = PyLong_AsLongLong(args[4]);
    w->nbytes = PyLong_AsLongLong(args[5]);
    w->cut = PyLong_AsLongLong(args[6]);
    w->bp = PyLong_AsLongLong(args[7]);
    if (PyErr_Occurred()) return -1;
    if (PyObject_GetBuffer(args[0], &w->view, PyBUF_SIMPLE)) return -1;
    w->buf = w->view.buf;
    w->L = w->view.len;
    if (w->p < 0 || w->p > w->L) w->p = w->L; /* nothing to walk: Python reads on */
    return 0;
}

/* (p, records, nbytes, full, last): where the walk stopped and what it counted; last None when it
 * took no record. */
static PyObject *walk_result(Walk *w, int err) {
    PyBuffer_Release(&w->view);
    if (err) return NULL;
    PyObject *last = w->have_last ? PyLong_FromLongLong(w->last) : Py_NewRef(Py_None);
    return last ? Py_BuildValue("(nLLON)", w->p, w->records, w->nbytes, w->full ? Py_True : Py_False, last) : NULL;
}

/* A record the walk takes, at rec (file offset) and ts, caplen cl, origlen ol, the interface's (the
 * file's) snap length snap: counted (time, number, bytes, the odd lengths reader.py counts), then
 * its row written, or counted as empty or outside the filter's window (fltr). 1 when its segment
 * g went through the handlers (a row or the endpoint filter's drop), 0 when not, -1 on error. */
static int take(Packets *s, Walk *w, int64_t rec, int64_t ts, uint32_t cl, uint32_t ol, int64_t snap, int fltr,
                const Seg *g) {
    if (cl > ol) s->over_orig++;
    if (snap > 0 && cl > snap) s->over_snap++;
    if (!s->has_ts || ts < s->tmin) s->tmin = ts;
    if (!s->has_ts || ts > s->tmax) s->tmax = ts;
    s->has_ts = 1;
    w->records++;
    w->nbytes += cl;
    if (!cl) {
        s->empty++;
        return 0;
    }
    if (fltr) {
        s->filtered++;
        return 0;
    }
    return put_seg(s, w->buf, g, rec, w->records, ts, ol) ? -1 : 1;
}

static int batch_full(const Packets *s, const Walk *w) { return s->n >= w->bp || w->nbytes >= w->cut; }

/* pcap(buf, p, base, end, records, nbytes, cut, bp) -> (p, records, nbytes, full, last_s): the
 * records from buf[p] as reader._read_pcap reads them, up to the first one it must read itself
 * (or the end of the data or of the split); full when the batch reached bp rows or nbytes reached
 * cut after a record the handlers read (the reader flushes it); last_s the last record's
 * seconds. */
static PyObject *Packets_pcap(Packets *s, PyObject *const *args, Py_ssize_t nargs) {
    Walk w;
    if (walk_args(args, nargs, &w)) return NULL;
    const unsigned char *buf = w.buf;
    int r = 0;
    while (w.L - w.p >= PCAP_RECORD && w.base + w.p < w.end) {
        const unsigned char *h = buf + w.p;
        uint32_t sec = le32(h), frac = le32(h + 4), cl = le32(h + 8), ol = le32(h + 12);
        if (s->swapped) {
            sec = __builtin_bswap32(sec);
            frac = __builtin_bswap32(frac);
            cl = __builtin_bswap32(cl);
            ol = __builtin_bswap32(ol);
        }
        if ((int64_t)cl > s->seq_lim || (int64_t)frac >= s->fmax) break; /* resync: reader.py */
        Py_ssize_t q = w.p + PCAP_RECORD + cl;
        if (q > w.L) break; /* more data, or a cut record: reader.py */
        /* no longer than its frame (but for a link header), and the header after it credible:
         * caplen and fraction in bounds, a time within a day (else the record's caplen may be
         * damaged, or the file ends: reader.py judges it) */
        if ((int64_t)cl > (int64_t)ol + MAX_LINK_HEADER || w.L - q < PCAP_RECORD) break;
        uint32_t nsec = le32(buf + q), nfrac = le32(buf + q + 4), ncl = le32(buf + q + 8);
        if (s->swapped) {
            nsec = __builtin_bswap32(nsec);
            nfrac = __builtin_bswap32(nfrac);
            ncl = __builtin_bswap32(ncl);
        }
        if ((int64_t)ncl > s->seq_lim || (int64_t)nfrac >= s->fmax) break;
        if ((int64_t)nsec - sec > DAY_S || (int64_t)sec - nsec > DAY_S) break;
        int64_t ts = (int64_t)sec * NS + (int64_t)frac * s->mult;
        Seg g;
        int fltr = ts < s->lo || ts >= s->hi;
        if (cl && !fltr && !link_seg(buf, s->linktype, w.p + PCAP_RECORD, q, s->refs, &g)) break;
        r = take(s, &w, w.base + w.p, ts, cl, ol, s->snaplen, fltr, &g);
        w.last = sec;
        w.have_last = 1;
        w.p = q;
        if (r < 0) break;
        if (r && batch_full(s, &w)) {
            w.full = 1;
            break;
        }
    }
    return walk_result(&w, r < 0);
}

static uint32_t u32_at(const Packets *s, const unsigned char *p) {
    uint32_t v = le32(p);
    return s->swapped ? __builtin_bswap32(v) : v;
}

/* epb(buf, p, base, end, records, nbytes, cut, bp) -> (p, records, nbytes, full, last_ts): the
 * Enhanced Packet Blocks from buf[p] as reader._read_pcapng's fast path reads them (well framed,
 * of an interface set by ifaces(), a time that fits in int64), up to the first other block; full
 * checked after every block, as there. */
static PyObject *Packets_epb(Packets *s, PyObject *const *args, Py_ssize_t nargs) {
    Walk w;
    if (walk_args(args, nargs, &w)) return NULL;
    const unsigned char *buf = w.buf;
    int r = 0;
    while (w.L - w.p >= 12 && w.base + w.p < w.end) {
        const unsigned char *h = buf + w.p;
        uint32_t n = u32_at(s, h + 4);
        if (u32_at(s, h) != EPB_TYPE || n < EPB_MIN || n > MAX_BLOCK || n & 3 || (Py_ssize_t)n > w.L - w.p) break;
        uint32_t iid = u32_at(s, h + 8), cl = u32_at(s, h + 20), ol = u32_at(s, h + 24);
        if (iid >= s->nifaces || cl > n - EPB_MIN || u32_at(s, h + n - 4) != n) break;
        const int64_t *ifc = s->ifaces + 6 * iid; /* linktype, snaplen, mul, shift, div, off_ns */
        uint64_t units = (uint64_t)u32_at(s, h + 12) << 32 | u32_at(s, h + 16);
        unsigned __int128 scaled = ((unsigned __int128)units * (uint64_t)ifc[2] >> ifc[3]) / (uint64_t)ifc[4];
        __int128 ts128 = (__int128)scaled + ifc[5];
        if (ts128 > INT64_MAX || ts128 < INT64_MIN) break; /* Python's ints take it */
        int64_t ts = (int64_t)ts128;
        Seg g;
        int fltr = ts < s->lo || ts >= s->hi;
        if (cl && !fltr && !link_seg(buf, (int)ifc[0], w.p + EPB_HEAD, w.p + EPB_HEAD + cl, s->refs, &g)) break;
        r = take(s, &w, w.base + w.p, ts, cl, ol, ifc[1], fltr, &g);
        w.last = ts;
        w.have_last = 1;
        w.p += n;
        if (r < 0) break;
        if (batch_full(s, &w)) {
            w.full = 1;
            break;
        }
    }
    return walk_result(&w, r < 0);
}

/* ---------------------------------------------------------------------------------------------- */
/* configuration, the Python handlers' rows, hand-over */

static int64_t clamp64(PyObject *v) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow > 0) return INT64_MAX;
    if (overflow < 0) return INT64_MIN;
    return x;
}

/* pcap_file(swapped, mult, fmax, seq_lim, snaplen, linktype, lo, hi, refs): a pcap file's
 * constants (reader._read_pcap's), the filter's time window [lo, hi) and whether payloads of this
 * buffer are given as offsets. */
static PyObject *Packets_pcap_file(Packets *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "pcap_file takes 9 arguments");
        return NULL;
    }
    s->swapped = PyObject_IsTrue(args[0]);
    s->mult = PyLong_AsLongLong(args[1]);
    s->fmax = PyLong_AsLongLong(args[2]);
    s->seq_lim = PyLong_AsLongLong(args[3]);
    s->snaplen = PyLong_AsLongLong(args[4]);
    s->linktype = (int)(PyLong_AsLong(args[5]) & 0xFFFF); /* pcap's upper bits carry FCS information */
    s->lo = clamp64(args[6]);
    s->hi = clamp64(args[7]);
    s->refs = PyObject_IsTrue(args[8]);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

/* ifaces(swapped, [(linktype, snaplen, mul, shift, div, off_ns)], lo, hi, refs): the pcapng
 * section's byte order and interfaces in force, for epb(). An interface whose numbers do not fit
 * (a time scale of 2^-64 s or finer, an offset past int64) makes every EPB of it Python's. */
static PyObject *Packets_ifaces(Packets *s, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "ifaces takes 5 arguments");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[1], "ifaces: a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), usable = 0;
    int64_t *t = PyMem_Calloc((size_t)(n ? n : 1) * 6, sizeof(int64_t));
    if (!t) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 6) break;
        int ok = 1;
        for (int k = 0; k < 6; k++) {
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(it, k), &overflow);
            if (overflow || (v == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                ok = 0;
            }
            t[6 * i + k] = v;
        }
        /* mul <= 10^9 and div >= 1 (reader._Iface), a shift below 64 */
        if (!ok || t[6 * i + 2] < 1 || t[6 * i + 2] > NS || t[6 * i + 3] < 0 || t[6 * i + 3] > 63 ||
            t[6 * i + 4] < 1)
            break;
        t[6 * i] &= 0xFFFF;
        usable = i + 1;
    }
    Py_DECREF(seq);
    PyMem_Free(s->ifaces);
    s->ifaces = t;
    s->nifaces = usable; /* interfaces from the first unusable one on: Python's */
    s->swapped = PyObject_IsTrue(args[0]);
    s->lo = clamp64(args[2]);
    s->hi = clamp64(args[3]);
    s->refs = PyObject_IsTrue(args[4]);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

/* append(row): a row tuple of decode.py's handlers, (rec, no, ts, lo_ip, lo_port, hi_ip, hi_port,
 * from_lo, seq, ack, flags, window, wire_len, payload_len, snap_truncated, payload), payload bytes
 * or (a whole payload of a plain file) its offset; out-of-range numbers clamped as flush() did. */
static PyObject *Packets_append(Packets *s, PyObject *row) {
    if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 16) {
        PyErr_SetString(PyExc_TypeError, "a packet row is a 16-tuple");
        return NULL;
    }
    PyObject *const *v = &PyTuple_GET_ITEM(row, 0);
    Py_ssize_t lolen, hilen;
    const char *lo = PyUnicode_AsUTF8AndSize(v[3], &lolen);
    const char *hi = lo ? PyUnicode_AsUTF8AndSize(v[5], &hilen) : NULL;
    if (!hi) return NULL;
    int from_lo = PyObject_IsTrue(v[7]), trunc = PyObject_IsTrue(v[14]);
    int64_t nums[16];
    static const int at[] = {0, 1, 2, 4, 6, 8, 9, 10, 11, 12, 13};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) nums[at[i]] = clamp64(v[at[i]]);
    if (PyErr_Occurred()) return NULL;
    int rc;
    if (PyLong_Check(v[15])) {
        int64_t off = clamp64(v[15]);
        rc = put_row(s, nums[0], nums[1], nums[2], lo, lolen, nums[4], hi, hilen, nums[6], from_lo, nums[8], nums[9],
                     nums[10], nums[11], nums[12], nums[13], trunc, NULL, -1, off);
    } else {
        Py_buffer pay;
        if (PyObject_GetBuffer(v[15], &pay, PyBUF_SIMPLE)) return NULL;
        rc = put_row(s, nums[0], nums[1], nums[2], lo, lolen, nums[4], hi, hilen, nums[6], from_lo, nums[8], nums[9],
                     nums[10], nums[11], nums[12], nums[13], trunc, pay.buf, pay.len, -1);
        PyBuffer_Release(&pay);
    }
    if (rc) return NULL;
    Py_RETURN_NONE;
}

/* take() -> the batch's buffers, and an empty batch to fill: (n, rec, record_no, ts_ns, lo_ip
 * (offsets, data), lo_port, hi_ip (offsets, data), hi_port, from_lo bitmap, seq, ack, flags,
 * window, wire_len, payload_len, snap_truncated bitmap, payload (validity, offsets, data, nulls),
 * payload_at (validity, values, nulls)). */
static PyObject *Packets_take(Packets *s, PyObject *unused) {
    Py_ssize_t n = s->n;
    PyObject *res = Py_BuildValue(
        "(nNNN(NN)N(NN)NNNNNNNNNN(NNn))", n, bytes_of(&s->rec), bytes_of(&s->no), bytes_of(&s->ts),
        bytes_of(&s->lo_offs), bytes_of(&s->lo_data), bytes_of(&s->lo_port), bytes_of(&s->hi_offs),
        bytes_of(&s->hi_data), bytes_of(&s->hi_port), bitmap(&s->from_lo, n), bytes_of(&s->seq), bytes_of(&s->ack),
        bytes_of(&s->flags), bytes_of(&s->win), bytes_of(&s->wire), bytes_of(&s->plen), bitmap(&s->trunc, n),
        col_tuple(&s->payload), bitmap(&s->at_valid, n), bytes_of(&s->pay_at), s->at_nulls);
    if (!res) return NULL;
    if (reset(s)) {
        Py_DECREF(res);
        return NULL;
    }
    return res;
}

/* counts() -> (filtered, snap_truncated, caplen_over_origlen, caplen_over_snaplen, empty_records,
 * first ts or None, last ts or None) since the last call, then zero. */
static PyObject *Packets_counts(Packets *s, PyObject *unused) {
    PyObject *res;
    if (s->has_ts)
        res = Py_BuildValue("(LLLLLLL)", (long long)s->filtered, (long long)s->snap_truncated, (long long)s->over_orig,
                            (long long)s->over_snap, (long long)s->empty, (long long)s->tmin, (long long)s->tmax);
    else
        res = Py_BuildValue("(LLLLLOO)", (long long)s->filtered, (long long)s->snap_truncated, (long long)s->over_orig,
                            (long long)s->over_snap, (long long)s->empty, Py_None, Py_None);
    s->filtered = s->snap_truncated = s->over_orig = s->over_snap = s->empty = 0;
    s->has_ts = 0;
    return res;
}

static Py_ssize_t Packets_len(Packets *s) { return s->n; }

static void Packets_dealloc(Packets *s) {
    Buf *bufs[] = {&s->rec, &s->no, &s->ts, &s->seq, &s->ack, &s->lo_port, &s->hi_port, &s->flags, &s->win,
                   &s->wire, &s->plen, &s->from_lo, &s->trunc, &s->at_valid, &s->pay_at, &s->lo_offs,
                   &s->lo_data, &s->hi_offs, &s->hi_data};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]->p);
    col_free(&s->payload);
    PyMem_Free(s->nets4);
    PyMem_Free(s->nets6);
    PyMem_Free(s->names6);
    PyMem_Free(s->ifaces);
    Py_XDECREF(s->v6name);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* Packets(v6name, spec): spec None (no endpoint filter) or filter.PacketFilter.endpoint_spec():
 * (ports, v4 networks or None, v6 networks or None), a v4 network as (net, mask) ints, a v6 one
 * as (net, mask) of 16 bytes each. */
static int Packets_init(Packets *s, PyObject *args, PyObject *kw) {
    PyObject *v6name, *spec;
    if (!PyArg_ParseTuple(args, "OO", &v6name, &spec)) return -1;
    Py_INCREF(v6name);
    Py_XSETREF(s->v6name, v6name);
    if (!s->names6 && !(s->names6 = PyMem_Calloc(V6_CACHE, sizeof(Name6)))) {
        PyErr_NoMemory();
        return -1;
    }
    if (reset(s)) return -1;
    s->by_endpoint = spec != Py_None;
    if (!s->by_endpoint) return 0;
    PyObject *ports, *v4, *v6;
    if (!PyArg_ParseTuple(spec, "OOO", &ports, &v4, &v6)) return -1;
    PyObject *it = PyObject_GetIter(ports), *x;
    if (!it) return -1;
    while ((x = PyIter_Next(it))) {
        long port = PyLong_AsLong(x);
        Py_DECREF(x);
        if (port >= 0 && port < 65536) s->ports[port >> 3] |= (unsigned char)(1 << (port & 7));
        s->has_ports = 1;
    }
    Py_DECREF(it);
    s->has_nets = v4 != Py_None;
    if (!s->has_nets || PyErr_Occurred()) return PyErr_Occurred() ? -1 : 0;
    Py_ssize_t n4 = PySequence_Length(v4), n6 = PySequence_Length(v6);
    if (n4 < 0 || n6 < 0) return -1;
    s->nets4 = PyMem_Calloc((size_t)n4 * 2 + 1, sizeof(uint32_t));
    s->nets6 = PyMem_Calloc((size_t)n6 + 1, sizeof(Net6));
    if (!s->nets4 || !s->nets6) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n4; i++) {
        PyObject *pair = PySequence_GetItem(v4, i);
        unsigned long net, mask;
        int ok = pair && PyArg_ParseTuple(pair, "kk", &net, &mask);
        Py_XDECREF(pair);
        if (!ok) return -1;
        s->nets4[2 * i] = (uint32_t)net;
        s->nets4[2 * i + 1] = (uint32_t)mask;
    }
    for (Py_ssize_t i = 0; i < n6; i++) {
        PyObject *pair = PySequence_GetItem(v6, i);
        const char *nb, *mb;
        Py_ssize_t nl, ml;
        int ok = pair && PyArg_ParseTuple(pair, "y#y#", &nb, &nl, &mb, &ml);
        Py_XDECREF(pair);
        if (!ok) return -1;
        if (nl != 16 || ml != 16) {
            PyErr_SetString(PyExc_ValueError, "a v6 network is (net, mask), 16 bytes each");
            return -1;
        }
        const unsigned char *n16 = (const unsigned char *)nb, *m16 = (const unsigned char *)mb;
        s->nets6[i] = (Net6){{be64(n16), be64(n16 + 8)}, {be64(m16), be64(m16 + 8)}};
    }
    s->n4 = n4;
    s->n6 = n6;
    return 0;
}

static PyMethodDef Packets_methods[] = {
    {"pcap", (PyCFunction)(void (*)(void))Packets_pcap, METH_FASTCALL, "Walk pcap records (see the module)."},
    {"epb", (PyCFunction)(void (*)(void))Packets_epb, METH_FASTCALL, "Walk pcapng EPBs (see the module)."},
    {"pcap_file", (PyCFunction)(void (*)(void))Packets_pcap_file, METH_FASTCALL, "A pcap file's constants."},
    {"ifaces", (PyCFunction)(void (*)(void))Packets_ifaces, METH_FASTCALL, "A pcapng section's interfaces."},
    {"append", (PyCFunction)Packets_append, METH_O, "Append a row tuple of the Python handlers."},
    {"take", (PyCFunction)Packets_take, METH_NOARGS, "The batch's column buffers; the batch is emptied."},
    {"counts", (PyCFunction)Packets_counts, METH_NOARGS, "The walks' counters since the last call."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods Packets_seq = {.sq_length = (lenfunc)Packets_len};

static PyTypeObject PacketsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "brokerscope.capture._walk.Packets",
    .tp_basicsize = sizeof(Packets),
    .tp_dealloc = (destructor)Packets_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A PACKETS batch being built, and the compiled record walks that fill it.",
    .tp_methods = Packets_methods,
    .tp_as_sequence = &Packets_seq,
    .tp_init = (initproc)Packets_init,
    .tp_new = PyType_GenericNew,
};

/* pcapng block framing: type u32 @0 | total length u32 @4 | body | total length again @end-4, in
 * the byte order of the section's SHB (its byte-order magic u32 @8) */
#define SHB_TYPE 0x0A0D0D0A /* the same bytes in either order */
#define IDB_TYPE 1
#define BOM 0x1A2B3C4D
#define IDB_MIN 20

/* ng_section(buf, target): the pcapng section in force at byte `target` of `buf` (a whole file),
 * walking block headers from its head: (its SHB's offset, big-endian?, [the offsets of its IDBs
 * before target]); None where a block's framing fails before target (reader.py walks it then,
 * resyncing). A split's reader learns so which interfaces its packets name: those of the last
 * section begun before it, not the file's first (a `cat` of pcapng files). */
static PyObject *ng_section(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t target;
    if (!PyArg_ParseTuple(args, "y*n", &view, &target)) return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t len = view.len, q = 0, shb = -1;
    int big = 0;
    PyObject *idbs = PyList_New(0);
    if (!idbs) goto fail;
    while (q < target && q + 12 <= len) {
        uint32_t t = big ? be32(b + q) : le32(b + q);
        if (t == SHB_TYPE) {
            if (le32(b + q + 8) == BOM) big = 0;
            else if (be32(b + q + 8) == BOM) big = 1;
            else goto damaged;
            shb = q;
            if (PyList_SetSlice(idbs, 0, PyList_GET_SIZE(idbs), NULL) < 0) goto fail;
        } else if (shb < 0) goto damaged;
        uint32_t n = big ? be32(b + q + 4) : le32(b + q + 4);
        if (n < 12 || n & 3 || n > len - q || (big ? be32(b + q + n - 4) : le32(b + q + n - 4)) != n) goto damaged;
        if (t == IDB_TYPE && n >= IDB_MIN) {
            PyObject *at = PyLong_FromSsize_t(q);
            if (!at || PyList_Append(idbs, at) < 0) {
                Py_XDECREF(at);
                goto fail;
            }
            Py_DECREF(at);
        }
        q += n;
    }
    if (shb < 0) goto damaged;
    PyBuffer_Release(&view);
    return Py_BuildValue("(nON)", shb, big ? Py_True : Py_False, idbs);
damaged:
    PyBuffer_Release(&view);
    Py_XDECREF(idbs);
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(idbs);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"ng_section", ng_section, METH_VARARGS, "The pcapng section in force at an offset (see ng_section)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_walk", "The read stage's record walk, compiled.", -1, module_methods};

PyMODINIT_FUNC PyInit__walk(void) {
    init_octets();
    if (PyType_Ready(&PacketsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&PacketsType);
    if (PyModule_AddObject(m, "Packets", (PyObject *)&PacketsType) < 0) {
        Py_DECREF(&PacketsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
