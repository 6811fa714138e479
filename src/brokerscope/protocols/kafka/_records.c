/* The records of a Kafka v2 record batch, read column-wise: the decoder's hot loop.
 *
 * v2_records(body, count, base_offset, base_timestamp, base_sequence) walks `count` records of a
 * (decompressed) batch body and returns their columns as little-endian buffers ready for Arrow
 * (records.py builds the arrays):
 *
 *   record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
 *           keyLength varint (-1 = null), key, valueLength varint (-1 = null), value,
 *           headerCount varint, headers (keyLength varint, key, valueLength varint, value)
 *   every varint zigzag encoded, at most 10 bytes and 64 bits
 *
 * Result: a dict. `n` records were read whole; `end` is where reading stopped and `error`,
 * `status` say why it stopped early (None when it did not). Numeric columns are n int64:
 * `delta` (offsetDelta), `ts_delta` (timestampDelta), `offset` (base_offset + delta), `timestamp` (base_timestamp +
 * timestampDelta, ms), `ts_ns` (the same in ns, null where negative: no timestamp),
 * `sequence` (base_sequence + delta; None when base_sequence is negative), `value_size`
 * (null where the value is). `overflow` is true when one of them did not fit int64 (the caller
 * then computes them with Python ints). `key`, `value`, `header_keys`, `header_values` are
 * binary columns as (validity bitmap, int32 offsets, data, null count); `header_offsets` the
 * n + 1 int32 list offsets of each record's headers; `header_keys_utf8` whether every header key
 * is UTF-8; `min_delta` the smallest offsetDelta. The error messages and statuses are the ones the
 * plain-Python reader had.
 * The walk runs without the GIL.
 *
 * decimals(prefix, values, offset, n, suffix) writes the strings prefix + str(v) + suffix for n
 * int64 values of `values` (a buffer of native int64, from element `offset`) as an Arrow string
 * column (int32 offsets, data): a batch's `details` (the batch-level JSON, then each record's
 * offset delta) and `message_id` (topic-partition@offset) without a Python string per record.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../arrowbuf.h" /* Buf, Col, decimal_column */

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
    Py_ssize_t end, n;
    int err;
    int64_t err_value; /* the value an error message names */
    int header_keys_utf8;
    Buf deltas, ts_deltas, hdr_offs, offsets, timestamps, ts_ns, ts_valid, sequences, value_sizes;
    int overflow;
    int64_t min_delta;
    Col key, value, hkey, hvalue;
    Py_ssize_t ts_nulls;
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

static int walk(Walk *w, const unsigned char *b, Py_ssize_t n, Py_ssize_t count) {
    Py_ssize_t p = 0;
    int32_t nh_total = 0;
    int e;
    if (buf_reserve(&w->deltas, count * 8) || buf_reserve(&w->ts_deltas, count * 8) ||
        buf_reserve(&w->hdr_offs, (count + 1) * 4) || buf_put(&w->hdr_offs, &nh_total, 4) ||
        col_init(&w->key, count) || col_init(&w->value, count) || col_init(&w->hkey, 0) ||
        col_init(&w->hvalue, 0))
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

/* A header that failed mid-record leaves entries of that record in the header columns: cut
 * them back to the last whole record. */
static void trim_headers(Walk *w) {
    int32_t keep = ((int32_t *)w->hdr_offs.p)[w->n];
    Col *cs[2] = {&w->hkey, &w->hvalue};
    for (int k = 0; k < 2; k++) {
        Col *c = cs[k];
        if (c->n <= keep) continue;
        Py_ssize_t nulls = 0;
        for (Py_ssize_t i = 0; i < keep; i++)
            if (!(c->valid.p[i / 8] & (1 << (i % 8)))) nulls++;
        c->n = keep;
        c->nulls = nulls;
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

/* The columns computed from the deltas, for the n records read. */
static int derive(Walk *w, int64_t base_offset, int64_t base_ts, int64_t base_seq) {
    Py_ssize_t n = w->n;
    if (buf_reserve(&w->offsets, n * 8) || buf_reserve(&w->timestamps, n * 8) || buf_reserve(&w->ts_ns, n * 8) ||
        buf_reserve(&w->ts_valid, n / 8 + 1) || buf_reserve(&w->sequences, n * 8) ||
        buf_reserve(&w->value_sizes, n * 8))
        return E_MEMORY;
    const int64_t *d = (const int64_t *)w->deltas.p, *td = (const int64_t *)w->ts_deltas.p;
    const int32_t *vo = (const int32_t *)w->value.offs.p;
    int64_t *off = (int64_t *)w->offsets.p, *ts = (int64_t *)w->timestamps.p, *ns = (int64_t *)w->ts_ns.p;
    int64_t *seq = (int64_t *)w->sequences.p, *vs = (int64_t *)w->value_sizes.p;
    unsigned char *valid = (unsigned char *)w->ts_valid.p;
    memset(valid, 0, (size_t)(n / 8 + 1));
    w->min_delta = n ? d[0] : 0;
    w->ts_nulls = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (d[i] < w->min_delta) w->min_delta = d[i];
        w->overflow |= __builtin_add_overflow(base_offset, d[i], &off[i]);
        w->overflow |= __builtin_add_overflow(base_ts, td[i], &ts[i]);
        if (ts[i] >= 0) {
            w->overflow |= __builtin_mul_overflow(ts[i], (int64_t)1000000, &ns[i]);
            valid[i / 8] |= (unsigned char)(1 << (i % 8));
        } else {
            ns[i] = 0;
            w->ts_nulls++;
        }
        if (base_seq >= 0) w->overflow |= __builtin_add_overflow(base_seq, d[i], &seq[i]);
        vs[i] = vo[i + 1] - vo[i];
    }
    w->offsets.len = w->timestamps.len = w->ts_ns.len = w->sequences.len = w->value_sizes.len = n * 8;
    w->ts_valid.len = (n + 7) / 8;
    return OK;
}

static PyObject *v2_records(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer body;
    Py_ssize_t count;
    long long base_offset, base_ts, base_seq;
    if (!PyArg_ParseTuple(args, "y*nLLL", &body, &count, &base_offset, &base_ts, &base_seq)) return NULL;
    if (count < 0 || count > body.len) {
        PyBuffer_Release(&body);
        return PyErr_Format(PyExc_ValueError, "record count %zd impossible for %zd bytes", count, body.len);
    }
    Walk w;
    memset(&w, 0, sizeof w);
    w.header_keys_utf8 = 1;
    int e, d = OK;
    Py_BEGIN_ALLOW_THREADS
    e = walk(&w, (const unsigned char *)body.buf, body.len, count);
    if (e != E_MEMORY) d = derive(&w, base_offset, base_ts, base_seq);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&body);
    PyObject *res = NULL;
    if (e == E_MEMORY || d == E_MEMORY) {
        PyErr_NoMemory();
    } else {
        if (e) trim_headers(&w);
        PyObject *status;
        PyObject *err = error_of(&w, e, &status);
        PyObject *seq = base_seq >= 0 ? bytes_of(&w.sequences) : (Py_INCREF(Py_None), Py_None);
        res = Py_BuildValue(
            "{s:n,s:n,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:(NNn),s:N,s:N,s:N,s:N,s:N,s:N,s:O,s:O,s:L}",
            "end", w.end, "n", w.n, "error", err, "status", status,
            "delta", bytes_of(&w.deltas), "ts_delta", bytes_of(&w.ts_deltas), "offset", bytes_of(&w.offsets),
            "timestamp", bytes_of(&w.timestamps), "sequence", seq,
            "ts_ns", bytes_of(&w.ts_valid), bytes_of(&w.ts_ns), w.ts_nulls,
            "value_size", bytes_of(&w.value_sizes),
            "key", col_tuple(&w.key), "value", col_tuple(&w.value),
            "header_offsets", bytes_of(&w.hdr_offs), "header_keys", col_tuple(&w.hkey),
            "header_values", col_tuple(&w.hvalue),
            "header_keys_utf8", w.header_keys_utf8 ? Py_True : Py_False,
            "overflow", w.overflow ? Py_True : Py_False, "min_delta", (long long)w.min_delta);
    }
    Buf *bufs[] = {&w.deltas, &w.ts_deltas, &w.hdr_offs, &w.offsets, &w.timestamps, &w.ts_ns, &w.ts_valid,
                   &w.sequences, &w.value_sizes};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]->p);
    col_free(&w.key);
    col_free(&w.value);
    col_free(&w.hkey);
    col_free(&w.hvalue);
    return res;
}

static PyObject *decimals(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer prefix, values, suffix;
    Py_ssize_t offset, n;
    if (!PyArg_ParseTuple(args, "y*y*nny*", &prefix, &values, &offset, &n, &suffix)) return NULL;
    PyObject *res = NULL;
    if (offset < 0 || n < 0 || (offset + n) > values.len / 8) {
        PyErr_SetString(PyExc_ValueError, "values shorter than offset + n");
        goto done;
    }
    res = decimal_column(&prefix, (const int64_t *)values.buf + offset, 0, n, &suffix);
done:
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&values);
    PyBuffer_Release(&suffix);
    return res;
}

static PyMethodDef methods[] = {
    {"v2_records", v2_records, METH_VARARGS, "Read the records of a v2 batch body column-wise."},
    {"decimals", decimals, METH_VARARGS, "prefix + str(v) + suffix for int64 values, as an Arrow string column."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records", NULL, -1, methods};

PyMODINIT_FUNC PyInit__records(void) { return PyModule_Create(&module); }
