/* Kafka record sets read column-wise: the decoder's hot loop.
 *
 * record_sets(buffers, cap, decompress) walks every batch of each buffer (a `records` field: a
 * record set) and returns the records of all their v2 batches as one set of columns, little-endian
 * buffers ready for Arrow (records.py builds the arrays once per call, not once per batch).
 *
 *   batch framing: baseOffset int64, batchLength int32 (bytes after it), ..., magic int8 at 16;
 *     fewer than 17 bytes left, or a batch longer than what is left: the partial tail; a length
 *     below the magic's minimum (v2: 49, v0/v1: 14) or a magic above 2 stops the walk (malformed)
 *   v2 header (61 bytes, big-endian): baseOffset int64 @0, batchLength int32 @8,
 *     partitionLeaderEpoch int32 @12, magic int8 @16, crc uint32 @17 (CRC-32C of bytes 21..end),
 *     attributes int16 @21 (bits 0-2 codec), lastOffsetDelta int32 @23, baseTimestamp int64 @27,
 *     maxTimestamp int64 @35, producerId int64 @43, producerEpoch int16 @51,
 *     baseSequence int32 @53, recordCount int32 @57, then the records (compressed unless codec 0)
 *   record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
 *           keyLength varint (-1 = null), key, valueLength varint (-1 = null), value,
 *           headerCount varint, headers (keyLength varint, key, valueLength varint, value)
 *   every varint zigzag encoded, at most 10 bytes and 64 bits
 *
 * A compressed body is handed to `decompress(codec, body, cap)` (Python: the codec libraries),
 * which returns the records' bytes or (error, status). An LZ4 body (codec 3) is first decoded
 * here, by the LZ4 library python-lz4 carries (its exported LZ4F_ functions, handed over once by
 * lz4_functions): taken only when it is one whole frame, nothing after it, verified, and shorter
 * than the first limit (records._first_limit); anything else (an error, a frame cut short, bytes
 * after it, output as long as the limit) goes to `decompress`, whose answer and error text stay
 * the reference.
 *
 * Result: a dict. `sets`: per buffer (partial tail bytes, error, status, batches), a batch being
 * (pos, size, magic) for a v0/v1 message, which records.py reads, or for v2 (stored crc, chunk,
 * first, n, min delta, overflow, error, status, then records.Batch's fields in its order from
 * base_offset to record_count, the codec as its number): its records are rows first ..
 * first + n - 1 of columns `chunk`
 * (n = -1: the body was not walked: decompression failed or the count is impossible), `error`
 * and `status` say why its walk stopped early or what else is wrong with its body (None when
 * nothing is), `min delta` is its smallest offsetDelta, `overflow` true when one of its derived
 * values did not fit int64 (the caller then computes them with Python ints).
 * `chunks`: the columns, a new chunk only where one more batch could pass 2 GiB of a binary
 * column's int32 offsets. Numeric columns are n int64: `delta` (offsetDelta), `ts_delta`
 * (timestampDelta), `offset` (baseOffset + delta), `timestamp` (baseTimestamp + timestampDelta,
 * ms), `ts_ns` (the same in ns, null where negative: no timestamp), `sequence` (baseSequence +
 * delta, wrapped past INT32_MAX to 0 as producers number them; null where the batch's
 * baseSequence is negative), `value_size` (null where the value
 * is). `key`, `value`, `header_keys`, `header_values` are binary columns as (validity bitmap,
 * int32 offsets, data, null count); `header_offsets` the n + 1 int32 list offsets of each
 * record's headers; `header_keys_utf8` whether every header key is UTF-8. The error messages
 * and statuses are the ones the plain-Python reader had. The CRC and the walks run without the
 * GIL.
 *
 * decimals(prefix, values, offset, n, suffix) writes the strings prefix + str(v) + suffix for n
 * int64 values of `values` (a buffer of native int64, from element `offset`) as an Arrow string
 * column (int32 offsets, data): `details` (the batch-level JSON, then each record's offset delta)
 * and `message_id` (topic-partition@offset) without a Python string per record. `prefix` is
 * bytes, or (list of bytes, int32 run lengths): a prefix per run of values.
 *
 * gather(kind, parts) builds one Arrow column from slices of many walks' buffers (the messages
 * blocks of a conform batch, records.Parts), as joining the blocks' own arrays would give it,
 * without those arrays; a part is rows start .. start + n - 1 of its buffers:
 *   kind 0, int64:  (validity or None, int64 values or an int `first`: first + i, start, n)
 *                   -> (validity or None where no value is null, values, null count)
 *   kind 1, binary: (validity or None, int32 offsets, data, start, n)
 *                   -> (validity or None, offsets, data, null count); None past 2 GiB of data
 *   kind 2, text:   (prefix, suffix, int64 values or an int `first`, start, n)
 *                   -> (offsets, data): prefix + str(v) + suffix, no nulls
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../arrowbuf.h" /* Buf, Col, decimal_runs (owned_of, owned_col: handed over without a copy) */

/* a producer's sequence numbers run 0 .. INT32_MAX, then from 0 again */
#define SEQUENCE_MAX 2147483647LL

/* A buffer handed to Python without a copy: it owns the memory a Buf grew (Arrow wraps it with
 * pa.py_buffer; memoryview reads it) and frees it when the last reference goes. */
typedef struct {
    PyObject_HEAD char *p;
    Py_ssize_t len;
} Owned;

static void owned_dealloc(Owned *o) {
    free(o->p);
    PyObject_Free(o);
}

static int owned_getbuffer(Owned *o, Py_buffer *view, int flags) {
    static char empty[1];
    return PyBuffer_FillInfo(view, (PyObject *)o, o->p ? o->p : empty, o->len, 1, flags);
}

static Py_ssize_t owned_length(Owned *o) { return o->len; }

static PyBufferProcs owned_as_buffer = {(getbufferproc)owned_getbuffer, NULL};
static PySequenceMethods owned_as_sequence = {.sq_length = (lenfunc)owned_length};

static PyTypeObject OwnedType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_records.Owned",
    .tp_basicsize = sizeof(Owned),
    .tp_dealloc = (destructor)owned_dealloc,
    .tp_as_sequence = &owned_as_sequence,
    .tp_as_buffer = &owned_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes the walk wrote, read through the buffer protocol.",
};

enum { SHRINK_ABOVE = 1 << 20 }; /* unused capacity worth giving back when a buffer is handed over */

/* The Buf's bytes as an Owned (the Buf is left empty): arrowbuf.h's bytes_of without the copy. */
static PyObject *owned_of(Buf *b) {
    Owned *o = PyObject_New(Owned, &OwnedType);
    if (!o) return NULL;
    if (b->cap - b->len > SHRINK_ABOVE) {
        char *p = realloc(b->p, (size_t)(b->len ? b->len : 1));
        if (p) b->p = p;
    }
    o->p = b->p;
    o->len = b->len;
    b->p = NULL;
    b->len = b->cap = 0;
    return (PyObject *)o;
}

static PyObject *owned_col(Col *c) {
    return Py_BuildValue("(NNNn)", owned_of(&c->valid), owned_of(&c->offs), owned_of(&c->data), c->nulls);
}

enum { OK = 0, E_PAST_BATCH, E_VARINT_PAST, E_VARINT_LONG, E_VARINT_WIDE, E_FIELDS_PAST, E_HEADER_COUNT, E_FIELD_PAST,
       E_LENGTH, E_MEMORY, E_TOO_BIG };

/* Zigzag varint at *p; on error returns the error code. */
static int varint(const unsigned char *b, Py_ssize_t n, Py_ssize_t *p, int64_t *out) {
    if (*p >= n) return E_PAST_BATCH; /* the first byte is missing: the record ran out */
    uint64_t v = 0;
    int shift = 0;
    for (;;) {
        if (*p >= n) return E_VARINT_PAST;
        unsigned char c = b[(*p)++];
        if (shift == 63 && (c & 0x7E)) return E_VARINT_WIDE; /* bits beyond 64 */
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) break;
        shift += 7;
        if (shift > 63) return E_VARINT_LONG;
    }
    *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
    return OK;
}

typedef struct {
    Py_ssize_t end, n; /* where the last walk stopped (in its body); records in the chunk */
    int64_t err_value; /* the value an error message names */
    int header_keys_utf8;
    Buf deltas, ts_deltas, hdr_offs, offsets, timestamps, ts_ns, ts_valid, sequences, seq_valid, value_sizes;
    Col key, value, hkey, hvalue;
    Py_ssize_t ts_nulls, seq_nulls;
} Walk;

static int utf8_ok(const unsigned char *s, int64_t n) {
    int64_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        int k;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07; }
        else return 0;
        if (i + k >= n) return 0; /* the sequence is cut by the end */
        for (int j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* One header field (key or value): zigzag length, then the bytes; bounded by the body. */
static int header_field(Walk *w, const unsigned char *b, Py_ssize_t n, Py_ssize_t *p, Col *c, int is_key) {
    int64_t len;
    int e = varint(b, n, p, &len);
    if (e == E_PAST_BATCH) e = E_VARINT_PAST;
    if (e) return e;
    if (len < 0) return col_add(c, NULL, is_key ? 0 : -1) ? E_MEMORY : OK; /* a null key is "" */
    if (len > n - *p) {
        w->err_value = len;
        return E_FIELD_PAST;
    }
    if (is_key && w->header_keys_utf8 && !utf8_ok(b + *p, len)) w->header_keys_utf8 = 0;
    int r = col_add(c, b + *p, len);
    if (r) return r == -2 ? E_TOO_BIG : E_MEMORY;
    *p += len;
    return OK;
}

static int walk_init(Walk *w) {
    int32_t zero = 0;
    memset(w, 0, sizeof *w);
    w->header_keys_utf8 = 1;
    if (buf_put(&w->hdr_offs, &zero, 4) || col_init(&w->key, 0) || col_init(&w->value, 0) || col_init(&w->hkey, 0) ||
        col_init(&w->hvalue, 0))
        return E_MEMORY;
    return OK;
}

static void walk_free(Walk *w) {
    Buf *bufs[] = {&w->deltas,     &w->ts_deltas, &w->hdr_offs,  &w->offsets,   &w->timestamps,
                   &w->ts_ns,      &w->ts_valid,  &w->sequences, &w->seq_valid, &w->value_sizes};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]->p);
    col_free(&w->key);
    col_free(&w->value);
    col_free(&w->hkey);
    col_free(&w->hvalue);
    memset(w, 0, sizeof *w);
}

/* Append up to `count` records of a batch body to the columns; w->n counts the whole records. */
static int walk(Walk *w, const unsigned char *b, Py_ssize_t n, Py_ssize_t count) {
    Py_ssize_t p = 0;
    int32_t nh_total = ((int32_t *)w->hdr_offs.p)[w->n];
    int e;
    if (buf_reserve(&w->deltas, count * 8) || buf_reserve(&w->ts_deltas, count * 8) ||
        buf_reserve(&w->hdr_offs, count * 4))
        return E_MEMORY;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t rlen, ts_delta, off_delta, klen, vlen, nh;
        Py_ssize_t kpos, vpos;
        w->end = p;
        if ((e = varint(b, n, &p, &rlen))) return e;
        if (rlen < 0 || rlen > n - p) return E_PAST_BATCH;
        Py_ssize_t rend = p + rlen;
        p += 1; /* record attributes, unused */
        if ((e = varint(b, n, &p, &ts_delta)) || (e = varint(b, n, &p, &off_delta))) return e;
        if ((e = varint(b, n, &p, &klen))) return e;
        kpos = p;
        if (klen >= 0) {
            if (klen > n - p) return E_PAST_BATCH; /* the next read would be past the body */
            p += klen;
        }
        if ((e = varint(b, n, &p, &vlen))) return e;
        vpos = p;
        if (vlen >= 0) {
            if (vlen > n - p) return E_FIELDS_PAST;
            p += vlen;
        }
        if (p > rend) return E_FIELDS_PAST;
        if ((e = varint(b, n, &p, &nh))) return e;
        if (nh) {
            if (nh < 0 || nh > rend - p) {
                w->err_value = nh;
                return E_HEADER_COUNT;
            }
            for (int64_t h = 0; h < nh; h++) {
                if ((e = header_field(w, b, n, &p, &w->hkey, 1))) return e;
                if ((e = header_field(w, b, n, &p, &w->hvalue, 0))) return e;
            }
            nh_total += (int32_t)nh;
        }
        if (p != rend) {
            w->err_value = rlen;
            return E_LENGTH;
        }
        int r1 = col_add(&w->key, b + kpos, klen < 0 ? -1 : klen);
        int r2 = r1 ? r1 : col_add(&w->value, b + vpos, vlen < 0 ? -1 : vlen);
        if (r1 || r2) return (r1 == -2 || r2 == -2) ? E_TOO_BIG : E_MEMORY;
        if (buf_put(&w->deltas, &off_delta, 8) || buf_put(&w->ts_deltas, &ts_delta, 8) ||
            buf_put(&w->hdr_offs, &nh_total, 4))
            return E_MEMORY;
        w->n++;
    }
    w->end = p;
    return OK;
}

/* A header that failed mid-record leaves entries of that record in the header columns (and a
 * value that failed, its key): cut them back to the last whole record. */
static void trim(Walk *w) {
    int32_t keep_h = ((int32_t *)w->hdr_offs.p)[w->n];
    struct {
        Col *c;
        Py_ssize_t keep;
    } cs[4] = {{&w->hkey, keep_h}, {&w->hvalue, keep_h}, {&w->key, w->n}, {&w->value, w->n}};
    for (int k = 0; k < 4; k++) {
        Col *c = cs[k].c;
        Py_ssize_t keep = cs[k].keep;
        if (c->n <= keep) continue;
        for (Py_ssize_t i = keep; i < c->n; i++)
            if (!(c->valid.p[i / 8] & (1 << (i % 8)))) c->nulls--;
        if (keep % 8) c->valid.p[keep / 8] &= (char)((1 << (keep % 8)) - 1); /* the next add sets its own bit */
        c->n = keep;
        c->valid.len = (keep + 7) / 8;
        c->offs.len = (keep + 1) * 4;
        c->data.len = ((int32_t *)c->offs.p)[keep];
    }
}

static PyObject *error_of(Walk *w, int e, PyObject **status) {
    const char *truncated = "truncated", *malformed = "malformed";
    switch (e) {
    case E_PAST_BATCH:
        *status = PyUnicode_FromString(truncated);
        return PyUnicode_FromString("record runs past the end of the batch");
    case E_VARINT_PAST:
        *status = PyUnicode_FromString(truncated);
        return PyUnicode_FromString("varint runs past the end of the batch");
    case E_VARINT_LONG:
        *status = PyUnicode_FromString(malformed);
        return PyUnicode_FromString("varint longer than 10 bytes");
    case E_VARINT_WIDE:
        *status = PyUnicode_FromString(malformed);
        return PyUnicode_FromString("varint wider than 64 bits");
    case E_FIELDS_PAST:
        *status = PyUnicode_FromString(truncated);
        return PyUnicode_FromString("record fields run past the record");
    case E_HEADER_COUNT:
        *status = PyUnicode_FromString(malformed);
        return PyUnicode_FromFormat("header count %lld impossible", (long long)w->err_value);
    case E_FIELD_PAST:
        *status = PyUnicode_FromString(truncated);
        return PyUnicode_FromFormat("field of %lld bytes runs past the end of the batch", (long long)w->err_value);
    case E_LENGTH:
        *status = PyUnicode_FromString(malformed);
        return PyUnicode_FromFormat("record length %lld does not match its fields", (long long)w->err_value);
    case E_TOO_BIG:
        *status = PyUnicode_FromString(malformed);
        return PyUnicode_FromString("records hold more than 2 GiB");
    default:
        *status = Py_None;
        Py_INCREF(Py_None);
        Py_INCREF(Py_None);
        return Py_None;
    }
}

/* Grow a validity bitmap to cover `bits` bits, the new bytes zero. */
static int bits_cover(Buf *b, Py_ssize_t bits) {
    Py_ssize_t want = (bits + 7) / 8;
    if (want <= b->len) return OK;
    if (buf_reserve(b, want - b->len)) return E_MEMORY;
    memset(b->p + b->len, 0, (size_t)(want - b->len));
    b->len = want;
    return OK;
}

/* The columns computed from the deltas, for the records `first` .. w->n - 1 of one batch. */
static int derive(Walk *w, Py_ssize_t first, int64_t base_offset, int64_t base_ts, int64_t base_seq, int *overflow,
                  int64_t *min_delta) {
    Py_ssize_t n = w->n, k = n - first;
    if (buf_reserve(&w->offsets, k * 8) || buf_reserve(&w->timestamps, k * 8) || buf_reserve(&w->ts_ns, k * 8) ||
        buf_reserve(&w->sequences, k * 8) || buf_reserve(&w->value_sizes, k * 8) || bits_cover(&w->ts_valid, n) ||
        bits_cover(&w->seq_valid, n))
        return E_MEMORY;
    const int64_t *d = (const int64_t *)w->deltas.p, *td = (const int64_t *)w->ts_deltas.p;
    const int32_t *vo = (const int32_t *)w->value.offs.p;
    int64_t *off = (int64_t *)w->offsets.p, *ts = (int64_t *)w->timestamps.p, *ns = (int64_t *)w->ts_ns.p;
    int64_t *seq = (int64_t *)w->sequences.p, *vs = (int64_t *)w->value_sizes.p;
    unsigned char *valid = (unsigned char *)w->ts_valid.p, *svalid = (unsigned char *)w->seq_valid.p;
    int over = 0;
    *min_delta = k ? d[first] : 0;
    for (Py_ssize_t i = first; i < n; i++) {
        if (d[i] < *min_delta) *min_delta = d[i];
        over |= __builtin_add_overflow(base_offset, d[i], &off[i]);
        over |= __builtin_add_overflow(base_ts, td[i], &ts[i]);
        if (ts[i] >= 0) {
            over |= __builtin_mul_overflow(ts[i], (int64_t)1000000, &ns[i]);
            valid[i / 8] |= (unsigned char)(1 << (i % 8));
        } else {
            ns[i] = 0;
            w->ts_nulls++;
        }
        if (base_seq >= 0) {
            over |= __builtin_add_overflow(base_seq, d[i], &seq[i]);
            /* wraps to 0 as Kafka's does; a delta out of range is damage, kept as summed */
            if (seq[i] > SEQUENCE_MAX && d[i] >= 0 && d[i] <= SEQUENCE_MAX) seq[i] -= SEQUENCE_MAX + 1;
            svalid[i / 8] |= (unsigned char)(1 << (i % 8));
        } else {
            seq[i] = 0;
            w->seq_nulls++;
        }
        vs[i] = vo[i + 1] - vo[i];
    }
    w->offsets.len = w->timestamps.len = w->ts_ns.len = w->sequences.len = w->value_sizes.len = n * 8;
    *overflow = over;
    return OK;
}

/* CRC-32C (Castagnoli, reflected 0x82F63B78): the SSE4.2 instruction where the CPU has it. */
static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32c_sw(uint32_t c, const unsigned char *p, size_t n) {
    while (n--) c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t c, const unsigned char *p, size_t n) {
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
static int crc_hw;
#endif

static uint32_t crc32c(const unsigned char *p, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (crc_hw) return ~crc32c_hw(0xFFFFFFFFu, p, n);
#endif
    return ~crc32c_sw(0xFFFFFFFFu, p, n);
}

static int64_t be64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static int16_t be16(const unsigned char *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

enum {
    BATCH_MIN_HEAD = 17,  /* baseOffset, batchLength, partitionLeaderEpoch, magic: enough to frame a batch */
    LENGTH_AT = 8,        /* batchLength, bytes after this field */
    LENGTH_END = 12,      /* a batch is 12 + batchLength bytes */
    MAGIC_AT = 16,
    V2_MIN_LENGTH = 49,   /* a v2 header after batchLength */
    LEGACY_MIN_LENGTH = 14,
    V2_CRC_AT = 17,
    V2_CRC_FROM = 21,     /* the CRC covers attributes .. end */
    V2_HEADER = 61,
    TIMESTAMP_TYPE_BIT = 0x08, /* attributes: LogAppendTime */
    TRANSACTIONAL_BIT = 0x10,
    CONTROL_BIT = 0x20,
    LZ4_CODEC = 3, /* attributes bits 0-2 */
};

static PyObject *chunk_dict(Walk *w) {
    return Py_BuildValue(
        "{s:n,s:N,s:N,s:N,s:N,s:(NNn),s:(NNn),s:N,s:N,s:N,s:N,s:N,s:N,s:O}", "n", w->n, "delta",
        owned_of(&w->deltas), "ts_delta", owned_of(&w->ts_deltas), "offset", owned_of(&w->offsets), "timestamp",
        owned_of(&w->timestamps), "ts_ns", owned_of(&w->ts_valid), owned_of(&w->ts_ns), w->ts_nulls, "sequence",
        owned_of(&w->seq_valid), owned_of(&w->sequences), w->seq_nulls, "value_size", owned_of(&w->value_sizes),
        "key", owned_col(&w->key), "value", owned_col(&w->value), "header_offsets", owned_of(&w->hdr_offs),
        "header_keys", owned_col(&w->hkey), "header_values", owned_col(&w->hvalue), "header_keys_utf8",
        w->header_keys_utf8 ? Py_True : Py_False);
}

/* The LZ4 frame API (lz4frame.h) as python-lz4's module exports it; no options (NULL): the
 * library's defaults, block and content checksums verified. */
#define LZ4F_API_VERSION 100 /* LZ4F_VERSION */
typedef struct {
    size_t (*create)(void **dctx, unsigned version);
    size_t (*free)(void *dctx);
    size_t (*decompress)(void *dctx, void *dst, size_t *dst_size, const void *src, size_t *src_size,
                         const void *options);
    unsigned (*is_error)(size_t code);
    void (*reset)(void *dctx);
} Lz4f;

static Lz4f LZ4F; /* set by lz4_functions; each record_sets call works with its own copy */

/* An LZ4 context and output buffer a call left for the next (taken and given back with the GIL
 * held): a frame's record sets are one call, so each call made both anew, and the output's
 * megabytes were fresh pages to fault in every time. */
#define LZ4_KEEP_MAX (16 << 20) /* a larger output buffer is not kept */
static void *lz4_spare;
static Buf lz4out_spare;

typedef struct {
    Walk w;
    PyObject *chunks; /* list of the sealed chunks' dicts */
    PyObject *decompress;
    Py_ssize_t cap;
    Lz4f lz4f; /* LZ4F as the call began */
    void *lz4; /* an LZ4F decompression context, made at the call's first LZ4 body */
    Buf lz4out; /* that body's records, reused by the next */
} Sets;

/* An LZ4 body decoded into s->lz4out: its length, or -1 where `decompress` is to say. */
static Py_ssize_t lz4_here(Sets *s, const unsigned char *src, Py_ssize_t n) {
    const Lz4f *f = &s->lz4f;
    if (!f->decompress) return -1;
    if (!s->lz4) {
        if (f->is_error(f->create(&s->lz4, LZ4F_API_VERSION))) {
            s->lz4 = NULL;
            return -1;
        }
    } else {
        f->reset(s->lz4);
    }
    Py_ssize_t limit = 256 * n + 65536; /* records._first_limit */
    if (limit > s->cap + 1) limit = s->cap + 1;
    s->lz4out.len = 0;
    if (s->lz4out.cap < limit) { /* nothing in it to keep: no realloc copying it over */
        free(s->lz4out.p);
        s->lz4out.p = NULL;
        s->lz4out.cap = 0;
    }
    if (buf_reserve(&s->lz4out, limit)) return -1;
    size_t out = (size_t)limit, in = (size_t)n, r;
    Py_BEGIN_ALLOW_THREADS
    r = f->decompress(s->lz4, s->lz4out.p, &out, src, &in, NULL);
    Py_END_ALLOW_THREADS
    if (f->is_error(r) || r != 0 || in != (size_t)n || out >= (size_t)limit) return -1;
    return (Py_ssize_t)out;
}

/* Seal the current chunk when one more body of `len` bytes could pass 2 GiB in a binary column. */
static int maybe_seal(Sets *s, Py_ssize_t len) {
    Walk *w = &s->w;
    Py_ssize_t most = w->key.data.len;
    if (w->value.data.len > most) most = w->value.data.len;
    if (w->hkey.data.len > most) most = w->hkey.data.len;
    if (w->hvalue.data.len > most) most = w->hvalue.data.len;
    if (!w->n || most + len <= INT32_MAX) return 0;
    PyObject *d = chunk_dict(w);
    if (!d || PyList_Append(s->chunks, d)) {
        Py_XDECREF(d);
        return -1;
    }
    Py_DECREF(d);
    walk_free(w);
    if (walk_init(w)) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* One v2 batch at buf[pos:pos+size]: its tuple, or NULL with an exception set. */
static PyObject *v2_batch(Sets *s, const unsigned char *buf, Py_ssize_t pos, Py_ssize_t size) {
    const unsigned char *h = buf + pos;
    int64_t base_offset = be64(h), base_ts = be64(h + 27), max_ts = be64(h + 35), pid = be64(h + 43);
    int32_t leader_epoch = be32(h + 12), last_delta = be32(h + 23), base_seq = be32(h + 53), count = be32(h + 57);
    uint32_t crc = (uint32_t)be32(h + V2_CRC_AT);
    int attributes = be16(h + 21), epoch = be16(h + 51), codec = attributes & 0x07;
    const unsigned char *body = h + V2_HEADER;
    Py_ssize_t blen = size - V2_HEADER;
    PyObject *raw = NULL; /* the decompressed body */
    PyObject *err = NULL, *status = NULL;
    uint32_t crc_now;
    Py_BEGIN_ALLOW_THREADS
    crc_now = crc32c(h + V2_CRC_FROM, (size_t)(size - V2_CRC_FROM));
    Py_END_ALLOW_THREADS
    Py_ssize_t here = codec == LZ4_CODEC ? lz4_here(s, body, blen) : -1;
    if (here >= 0) {
        body = (const unsigned char *)s->lz4out.p;
        blen = here;
    } else if (codec) {
        /* the compressed body as a read-only view of the caller's buffer, not a copy */
        PyObject *view = PyMemoryView_FromMemory((char *)body, blen, PyBUF_READ);
        if (!view) return NULL;
        PyObject *r = PyObject_CallFunction(s->decompress, "iOn", codec, view, s->cap);
        if (Py_REFCNT(view) > 1) { /* kept somewhere (a traceback): released, never left dangling */
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            PyObject *rel = PyObject_CallMethod(view, "release", NULL);
            if (rel) Py_DECREF(rel);
            PyErr_Clear();
            PyErr_Restore(et, ev, tb);
        }
        Py_DECREF(view);
        if (!r) return NULL;
        if (PyBytes_Check(r)) {
            raw = r;
            body = (const unsigned char *)PyBytes_AS_STRING(r);
            blen = PyBytes_GET_SIZE(r);
        } else if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
            err = PyTuple_GET_ITEM(r, 0);
            status = PyTuple_GET_ITEM(r, 1);
            Py_INCREF(err);
            Py_INCREF(status);
            Py_DECREF(r);
        } else {
            Py_DECREF(r);
            return PyErr_Format(PyExc_TypeError, "decompress returned neither bytes nor (error, status)");
        }
    }
    Py_ssize_t first = 0, n = -1;
    int64_t min_delta = 0;
    int overflow = 0;
    if (!err && (count < 0 || count > blen)) {
        err = PyUnicode_FromFormat("record count %d impossible for %zd bytes", (int)count, blen);
        status = PyUnicode_FromString("malformed");
    } else if (!err) {
        if (maybe_seal(s, blen)) {
            Py_XDECREF(raw);
            return NULL;
        }
        Walk *w = &s->w;
        first = w->n;
        int e, d = OK;
        Py_BEGIN_ALLOW_THREADS
        e = walk(w, body, blen, count);
        if (e != E_MEMORY) {
            if (e) trim(w);
            d = derive(w, first, base_offset, base_ts, base_seq, &overflow, &min_delta);
        }
        Py_END_ALLOW_THREADS
        if (e == E_MEMORY || d == E_MEMORY) {
            Py_XDECREF(raw);
            return PyErr_NoMemory();
        }
        n = w->n - first;
        if (e) {
            err = error_of(w, e, &status);
        } else if (w->end != blen) {
            err = PyUnicode_FromFormat("%zd bytes after the last record", blen - w->end);
            status = PyUnicode_FromString("malformed");
        } else {
            err = Py_None;
            status = Py_None;
            Py_INCREF(err);
            Py_INCREF(status);
        }
    }
    Py_XDECREF(raw);
    if (!err || !status) {
        Py_XDECREF(err);
        Py_XDECREF(status);
        return NULL;
    }
    /* the walk's part, then Batch's fields in its order (records.py names the codec) */
    return Py_BuildValue("(knnnLONN" "LinnOisiiLLLiiOOi)", (unsigned long)crc, PyList_GET_SIZE(s->chunks), first, n,
                         (long long)min_delta, overflow ? Py_True : Py_False, err, status, (long long)base_offset, 2,
                         size, (Py_ssize_t)codec, crc_now == crc ? Py_True : Py_False, attributes,
                         attributes & TIMESTAMP_TYPE_BIT ? "log_append" : "create", (int)leader_epoch,
                         (int)last_delta, (long long)base_ts, (long long)max_ts, (long long)pid, epoch, (int)base_seq,
                         attributes & TRANSACTIONAL_BIT ? Py_True : Py_False,
                         attributes & CONTROL_BIT ? Py_True : Py_False, (int)count);
}

/* The batches of one record set: (partial tail, error, status, batches). */
static PyObject *one_set(Sets *s, const unsigned char *buf, Py_ssize_t len) {
    PyObject *batches = PyList_New(0);
    if (!batches) return NULL;
    Py_ssize_t pos = 0, tail = 0;
    PyObject *err = Py_None, *status = Py_None;
    Py_INCREF(err);
    Py_INCREF(status);
    while (pos < len) {
        if (len - pos < BATCH_MIN_HEAD) {
            tail = len - pos;
            break;
        }
        int32_t length = be32(buf + pos + LENGTH_AT);
        int magic = buf[pos + MAGIC_AT];
        if (length < (magic >= 2 ? V2_MIN_LENGTH : LEGACY_MIN_LENGTH) || magic > 2) {
            Py_DECREF(err);
            Py_DECREF(status);
            err = PyUnicode_FromFormat("bad batch header at byte %zd: length %d, magic %d", pos, (int)length, magic);
            status = PyUnicode_FromString("malformed");
            if (!err || !status) goto fail;
            break;
        }
        Py_ssize_t size = LENGTH_END + (Py_ssize_t)length;
        if (size > len - pos) {
            tail = len - pos;
            break;
        }
        PyObject *b = magic == 2 ? v2_batch(s, buf, pos, size) : Py_BuildValue("(nni)", pos, size, magic);
        if (!b || PyList_Append(batches, b)) {
            Py_XDECREF(b);
            goto fail;
        }
        Py_DECREF(b);
        pos += size;
    }
    return Py_BuildValue("(nNNN)", tail, err, status, batches);
fail:
    Py_XDECREF(err);
    Py_XDECREF(status);
    Py_DECREF(batches);
    return NULL;
}

static PyObject *record_sets(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *bufs, *decompress;
    Py_ssize_t cap;
    if (!PyArg_ParseTuple(args, "OnO", &bufs, &cap, &decompress)) return NULL;
    PyObject *seq = PySequence_Fast(bufs, "buffers must be a sequence");
    if (!seq) return NULL;
    Sets s = {0};
    s.lz4f = LZ4F;
    if (s.lz4f.decompress) {
        s.lz4 = lz4_spare;
        s.lz4out = lz4out_spare;
        lz4_spare = NULL;
        memset(&lz4out_spare, 0, sizeof lz4out_spare);
    }
    s.decompress = decompress;
    s.cap = cap;
    s.chunks = PyList_New(0);
    PyObject *sets = PyList_New(0), *res = NULL;
    if (walk_init(&s.w)) {
        PyErr_NoMemory();
        goto done;
    }
    if (!s.chunks || !sets) goto done;
    /* room for the values up front, as much as the record sets hold (more only where a body
     * decompresses larger): the column grows without copying itself over as it fills */
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        Py_buffer view;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, i), &view, PyBUF_SIMPLE)) goto done;
        total += view.len;
        PyBuffer_Release(&view);
    }
    if (total > INT32_MAX) total = INT32_MAX;
    if (buf_reserve(&s.w.value.data, total)) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        Py_buffer view;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, i), &view, PyBUF_SIMPLE)) goto done;
        PyObject *one = one_set(&s, (const unsigned char *)view.buf, view.len);
        PyBuffer_Release(&view);
        if (!one || PyList_Append(sets, one)) {
            Py_XDECREF(one);
            goto done;
        }
        Py_DECREF(one);
    }
    PyObject *last = chunk_dict(&s.w);
    if (!last || PyList_Append(s.chunks, last)) {
        Py_XDECREF(last);
        goto done;
    }
    Py_DECREF(last);
    res = Py_BuildValue("{s:O,s:O}", "sets", sets, "chunks", s.chunks);
done:
    walk_free(&s.w);
    if (s.lz4 && !lz4_spare && s.lz4f.free == LZ4F.free) /* not where the functions changed meanwhile */
        lz4_spare = s.lz4;
    else if (s.lz4)
        s.lz4f.free(s.lz4);
    if (s.lz4out.cap <= LZ4_KEEP_MAX && !lz4out_spare.p)
        lz4out_spare = s.lz4out;
    else
        free(s.lz4out.p);
    Py_XDECREF(s.chunks);
    Py_XDECREF(sets);
    Py_DECREF(seq);
    return res;
}

static PyObject *decimals(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *prefix_arg;
    Py_buffer values, suffix, runs = {0};
    Py_ssize_t offset, n;
    if (!PyArg_ParseTuple(args, "Oy*nny*", &prefix_arg, &values, &offset, &n, &suffix)) return NULL;
    PyObject *res = NULL, *prefixes = NULL;
    Buf offs = {0}, data = {0};
    Prefix *pre = NULL;
    int32_t one_run[1];
    const int32_t *counts = one_run;
    Py_ssize_t nruns = 1;
    if (PyTuple_Check(prefix_arg)) { /* (list of bytes, int32 run lengths): a prefix per run */
        PyObject *list;
        if (!PyArg_ParseTuple(prefix_arg, "Oy*", &list, &runs)) goto done;
        if (!(prefixes = PySequence_Fast(list, "prefixes must be a sequence"))) goto done;
        nruns = PySequence_Fast_GET_SIZE(prefixes);
        counts = (const int32_t *)runs.buf;
        if (runs.len != nruns * 4) {
            PyErr_SetString(PyExc_ValueError, "one run length per prefix");
            goto done;
        }
    } else {
        if (!(prefixes = PyTuple_Pack(1, prefix_arg))) goto done;
        one_run[0] = (int32_t)n;
        if (n > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "strings of more than 2 GiB");
            goto done;
        }
    }
    if (!(pre = malloc(sizeof(Prefix) * (size_t)(nruns ? nruns : 1)))) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t r = 0; r < nruns; r++) {
        PyObject *p = PySequence_Fast_GET_ITEM(prefixes, r);
        if (!PyBytes_Check(p) || counts[r] < 0) {
            PyErr_SetString(PyExc_TypeError, "prefixes are bytes, run lengths non-negative");
            goto done;
        }
        pre[r] = (Prefix){PyBytes_AS_STRING(p), PyBytes_GET_SIZE(p), counts[r]};
        total += counts[r];
    }
    if (offset < 0 || n < 0 || total != n || (offset + n) > values.len / 8) {
        PyErr_SetString(PyExc_ValueError, "values shorter than offset + n, or runs that do not add up to n");
        goto done;
    }
    if (!decimal_runs(&offs, &data, pre, nruns, (const int64_t *)values.buf + offset, 0, n, suffix.buf, suffix.len))
        res = Py_BuildValue("(NN)", owned_of(&offs), owned_of(&data));
done:
    free(pre);
    free(offs.p);
    free(data.p);
    Py_XDECREF(prefixes);
    if (runs.obj) PyBuffer_Release(&runs);
    PyBuffer_Release(&values);
    PyBuffer_Release(&suffix);
    return res;
}

/* The bit of row i of a validity bitmap (NULL: every row valid). */
static inline int valid_bit(const unsigned char *valid, Py_ssize_t i) {
    return !valid || (valid[i >> 3] >> (i & 7)) & 1;
}

/* An output validity bitmap, made at the first null (rows before it all valid): none while
 * every row is valid. */
typedef struct {
    Buf b;
    Py_ssize_t nulls;
} Bits;

/* Output rows at .. at + n - 1 take the validity of rows from .. from + n - 1 of `src` (NULL:
 * every one valid). 0, or -1 out of memory. */
static int bits_run(Bits *v, Py_ssize_t at, const unsigned char *src, Py_ssize_t from, Py_ssize_t n) {
    if (!src && !v->b.p) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t row = at + i;
        int bit = valid_bit(src, from + i);
        if (!bit && !v->b.p) { /* the first null: rows 0 .. row - 1 valid */
            if (buf_reserve(&v->b, row / 8 + 1)) return -1;
            memset(v->b.p, 0xff, (size_t)(row / 8));
            v->b.p[row / 8] = (char)((1 << (row % 8)) - 1);
            v->b.len = row / 8 + 1;
        }
        if (!v->b.p) continue;
        if (row / 8 >= v->b.len) {
            if (buf_reserve(&v->b, 1)) return -1;
            v->b.p[v->b.len++] = 0;
        }
        if (bit)
            v->b.p[row / 8] |= (char)(1 << (row % 8));
        else
            v->nulls++;
    }
    return 0;
}

/* (validity or None, ...): the bitmap where some row is null. */
static PyObject *bits_obj(Bits *v) {
    if (!v->nulls) Py_RETURN_NONE;
    return owned_of(&v->b);
}

typedef struct {
    PyObject *obj; /* the part's buffer object, or an int `first` (values only) */
    Py_buffer view; /* view.obj NULL where none was taken */
    int64_t first;
} Source;

/* A part's field: a buffer (`need` bytes at the least), None (allowed where `none_ok`), or an int
 * (allowed where `int_ok`: a range's first value). */
static int source_of(PyObject *o, Source *s, int none_ok, int int_ok, Py_ssize_t need) {
    memset(s, 0, sizeof *s);
    if (o == Py_None && none_ok) return 0;
    if (PyLong_Check(o)) {
        if (!int_ok) return PyErr_SetString(PyExc_TypeError, "a buffer, not an int"), -1;
        s->first = PyLong_AsLongLong(o);
        if (s->first == -1 && PyErr_Occurred()) return -1;
        s->obj = o;
        return 0;
    }
    if (PyObject_GetBuffer(o, &s->view, PyBUF_SIMPLE)) return -1;
    s->obj = o;
    if (s->view.len < need) {
        PyErr_SetString(PyExc_ValueError, "a part's rows run past its buffer");
        return -1;
    }
    return 0;
}

static void source_free(Source *s) {
    if (s->view.obj) PyBuffer_Release(&s->view);
}

/* Part fields at `at` (start, n): non-negative. */
static int span_of(PyObject *part, Py_ssize_t at, Py_ssize_t *start, Py_ssize_t *n) {
    *start = PyLong_AsSsize_t(PyTuple_GET_ITEM(part, at));
    *n = PyLong_AsSsize_t(PyTuple_GET_ITEM(part, at + 1));
    if ((*start == -1 || *n == -1) && PyErr_Occurred()) return -1;
    if (*start < 0 || *n < 0) return PyErr_SetString(PyExc_ValueError, "negative start or count"), -1;
    return 0;
}

static inline int64_t value_at(const Source *v, Py_ssize_t i) {
    return v->view.obj ? ((const int64_t *)v->view.buf)[i] : v->first + (int64_t)i;
}

static PyObject *gather_int64(PyObject *parts) {
    Py_ssize_t nparts = PySequence_Fast_GET_SIZE(parts), rows = 0;
    Bits valid = {{0}, 0};
    Buf values = {0};
    PyObject *res = NULL;
    for (Py_ssize_t k = 0; k < nparts; k++) {
        PyObject *part = PySequence_Fast_GET_ITEM(parts, k);
        Py_ssize_t start, n;
        Source va, vs;
        if (!PyTuple_Check(part) || PyTuple_GET_SIZE(part) != 4) {
            PyErr_SetString(PyExc_TypeError, "an int64 part is (validity, values, start, n)");
            goto done;
        }
        if (span_of(part, 2, &start, &n)) goto done;
        if (source_of(PyTuple_GET_ITEM(part, 0), &va, 1, 0, (start + n + 7) / 8)) goto done;
        if (source_of(PyTuple_GET_ITEM(part, 1), &vs, 0, 1, (start + n) * 8)) {
            source_free(&va);
            goto done;
        }
        int bad = buf_reserve(&values, n * 8);
        if (!bad && n) {
            int64_t *out = (int64_t *)(values.p + values.len);
            if (vs.view.obj)
                memcpy(out, (const int64_t *)vs.view.buf + start, (size_t)n * 8);
            else
                for (Py_ssize_t i = 0; i < n; i++) out[i] = vs.first + (int64_t)(start + i);
            bad = bits_run(&valid, rows, va.view.obj ? va.view.buf : NULL, start, n);
        }
        values.len += n * 8;
        rows += n;
        source_free(&va);
        source_free(&vs);
        if (bad) {
            PyErr_NoMemory();
            goto done;
        }
    }
    res = Py_BuildValue("(NNn)", bits_obj(&valid), owned_of(&values), valid.nulls);
done:
    free(valid.b.p);
    free(values.p);
    return res;
}

static PyObject *gather_binary(PyObject *parts) {
    Py_ssize_t nparts = PySequence_Fast_GET_SIZE(parts), rows = 0;
    Bits valid = {{0}, 0};
    Buf offs = {0}, data = {0};
    PyObject *res = NULL;
    int32_t zero = 0;
    if (buf_put(&offs, &zero, 4)) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < nparts; k++) {
        PyObject *part = PySequence_Fast_GET_ITEM(parts, k);
        Py_ssize_t start, n;
        Source va, os, ds;
        if (!PyTuple_Check(part) || PyTuple_GET_SIZE(part) != 5) {
            PyErr_SetString(PyExc_TypeError, "a binary part is (validity, offsets, data, start, n)");
            goto done;
        }
        if (span_of(part, 3, &start, &n)) goto done;
        if (source_of(PyTuple_GET_ITEM(part, 0), &va, 1, 0, (start + n + 7) / 8)) goto done;
        if (source_of(PyTuple_GET_ITEM(part, 1), &os, 0, 0, (start + n + 1) * 4)) {
            source_free(&va);
            goto done;
        }
        if (source_of(PyTuple_GET_ITEM(part, 2), &ds, 0, 0, 0)) {
            source_free(&va);
            source_free(&os);
            goto done;
        }
        const int32_t *o = (const int32_t *)os.view.buf + start;
        const unsigned char *vb = va.view.obj ? va.view.buf : NULL;
        int err = 0; /* 1: offsets out of order or past the data, 2: past 2 GiB, 3: memory */
        if (o[0] < 0 || o[n] < o[0] || o[n] > ds.view.len)
            err = 1;
        else if (data.len + (o[n] - o[0]) > INT32_MAX)
            err = 2;
        else if (buf_put(&data, (const char *)ds.view.buf + o[0], o[n] - o[0]) || buf_reserve(&offs, n * 4))
            err = 3;
        int32_t *out = err ? NULL : (int32_t *)(offs.p + offs.len);
        int32_t base = (int32_t)(data.len - (o[n] - o[0])) - o[0];
        for (Py_ssize_t i = 0; !err && i < n; i++) {
            if (o[i + 1] < o[i]) err = 1;
            out[i] = o[i + 1] + base;
        }
        if (!err && bits_run(&valid, rows, vb, start, n)) err = 3;
        if (!err) offs.len += n * 4;
        rows += n;
        source_free(&va);
        source_free(&os);
        source_free(&ds);
        if (err == 1) PyErr_SetString(PyExc_ValueError, "a part's offsets are out of order or past its data");
        if (err == 3) PyErr_NoMemory();
        if (err == 2) { /* the caller joins the blocks' own arrays instead */
            res = Py_None;
            Py_INCREF(res);
        }
        if (err) goto done;
    }
    res = Py_BuildValue("(NNNn)", bits_obj(&valid), owned_of(&offs), owned_of(&data), valid.nulls);
done:
    free(valid.b.p);
    free(offs.p);
    free(data.p);
    return res;
}

static PyObject *gather_text(PyObject *parts) {
    Py_ssize_t nparts = PySequence_Fast_GET_SIZE(parts);
    Buf offs = {0}, data = {0};
    PyObject *res = NULL;
    for (Py_ssize_t k = 0; k < nparts; k++) {
        PyObject *part = PySequence_Fast_GET_ITEM(parts, k);
        Py_ssize_t start, n;
        Source vs;
        if (!PyTuple_Check(part) || PyTuple_GET_SIZE(part) != 5 || !PyBytes_Check(PyTuple_GET_ITEM(part, 0)) ||
            !PyBytes_Check(PyTuple_GET_ITEM(part, 1))) {
            PyErr_SetString(PyExc_TypeError, "a text part is (prefix bytes, suffix bytes, values, start, n)");
            goto done;
        }
        if (span_of(part, 3, &start, &n)) goto done;
        if (source_of(PyTuple_GET_ITEM(part, 2), &vs, 0, 1, (start + n) * 8)) goto done;
        PyObject *pre = PyTuple_GET_ITEM(part, 0), *suf = PyTuple_GET_ITEM(part, 1);
        Prefix run = {PyBytes_AS_STRING(pre), PyBytes_GET_SIZE(pre), (int32_t)n};
        const int64_t *values = vs.view.obj ? (const int64_t *)vs.view.buf + start : NULL;
        int bad = n > INT32_MAX ? (PyErr_SetString(PyExc_ValueError, "strings of more than 2 GiB"), -1)
                                : decimal_runs(&offs, &data, &run, 1, values, vs.first + (int64_t)start, n,
                                               PyBytes_AS_STRING(suf), PyBytes_GET_SIZE(suf));
        source_free(&vs);
        if (bad) goto done;
    }
    if (!offs.len && decimal_runs(&offs, &data, NULL, 0, NULL, 0, 0, "", 0)) goto done; /* no part: 1 offset */
    res = Py_BuildValue("(NN)", owned_of(&offs), owned_of(&data));
done:
    free(offs.p);
    free(data.p);
    return res;
}

static PyObject *gather(PyObject *self, PyObject *args) {
    (void)self;
    int kind;
    PyObject *list;
    if (!PyArg_ParseTuple(args, "iO", &kind, &list)) return NULL;
    PyObject *parts = PySequence_Fast(list, "parts must be a sequence");
    if (!parts) return NULL;
    PyObject *res = NULL;
    if (kind == 0)
        res = gather_int64(parts);
    else if (kind == 1)
        res = gather_binary(parts);
    else if (kind == 2)
        res = gather_text(parts);
    else
        PyErr_SetString(PyExc_ValueError, "kind 0 (int64), 1 (binary) or 2 (text)");
    Py_DECREF(parts);
    return res;
}

/* lz4_functions(create, free, decompress, is_error, reset): the addresses of LZ4F_
 * createDecompressionContext, freeDecompressionContext, decompress, isError and
 * resetDecompressionContext for the walk to decode LZ4 bodies with; lz4_functions(None): every
 * body to `decompress` again. */
static PyObject *lz4_functions(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *a[5] = {NULL};
    if (!PyArg_ParseTuple(args, "O|OOOO", &a[0], &a[1], &a[2], &a[3], &a[4])) return NULL;
    if (lz4_spare) { /* made by the functions being replaced */
        LZ4F.free(lz4_spare);
        lz4_spare = NULL;
    }
    if (a[0] == Py_None) {
        LZ4F.decompress = NULL; /* first: a call that copies LZ4F meanwhile takes no LZ4 body */
        memset(&LZ4F, 0, sizeof LZ4F);
        Py_RETURN_NONE;
    }
    void *f[5];
    for (int i = 0; i < 5; i++) {
        if (!a[i] || !PyLong_Check(a[i])) return PyErr_Format(PyExc_TypeError, "five function addresses, or None");
        if (!(f[i] = PyLong_AsVoidPtr(a[i]))) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "a null address");
    }
    LZ4F.create = (size_t(*)(void **, unsigned))f[0];
    LZ4F.free = (size_t(*)(void *))f[1];
    LZ4F.is_error = (unsigned (*)(size_t))f[3];
    LZ4F.reset = (void (*)(void *))f[4];
    LZ4F.decompress = (size_t(*)(void *, void *, size_t *, const void *, size_t *, const void *))f[2];
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"record_sets", record_sets, METH_VARARGS, "Read the batches of record sets, their records column-wise."},
    {"lz4_functions", lz4_functions, METH_VARARGS, "The LZ4F functions the walk decodes LZ4 bodies with, or None."},
    {"decimals", decimals, METH_VARARGS, "prefix + str(v) + suffix for int64 values, as an Arrow string column."},
    {"gather", gather, METH_VARARGS, "One Arrow column's buffers from slices of many walks' buffers."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records", NULL, -1, methods};

PyMODINIT_FUNC PyInit__records(void) {
    if (PyType_Ready(&OwnedType) < 0) return NULL;
    crc_init();
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
    return PyModule_Create(&module);
}
