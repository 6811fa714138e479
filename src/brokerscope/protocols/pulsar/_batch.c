/* The messages of a Pulsar batch payload, read column-wise: the decoder's per-message loop.
 *
 * split(data, count, base_sequence) walks `count` entries of an uncompressed batch payload
 *
 *   entry: u32 size (big-endian) | SingleMessageMetadata (size bytes) | payload_size bytes of value
 *
 * reading the SingleMessageMetadata fields brokerscope uses (pulsar_api.proto):
 *
 *   1 properties (KeyValue: 1 key, 2 value; strings) | 2 partition_key (string) |
 *   3 payload_size (int32) | 4 compacted_out (bool) | 5 event_time (uint64) |
 *   6 partition_key_b64_encoded (bool) | 7 ordering_key (bytes) | 8 sequence_id (uint64) |
 *   9 null_value (bool); other fields skipped (varint, 64-bit, length-delimited, 32-bit)
 *
 * and returns the columns as Arrow buffers (arrowbuf.h: a binary column is (validity, offsets,
 * data, null count)), one entry per message:
 *
 *   (n, value, key, header_offsets, header_keys, header_values, sequence, own, end)
 *
 * value: binary, null where null_value; key: the partition key's bytes as on the wire, null when
 * absent (base64 ones are decoded by the caller); headers: per message the properties in wire
 * order, int32 list offsets into header_keys (UTF-8 text) and header_values (binary); sequence:
 * sequence_id, else base_sequence + index, as native int64 bytes, or a list of ints when one is
 * past int64; own: None, or {index: {field: value}} for the messages with fields of their own, in
 * the order their details write them: event_time_ms (when not 0), ordering_key (bytes),
 * null_value, partition_key_b64 (the key's text, when flagged base64), compacted_out; end: where
 * the last entry ended.
 *
 * Anything the plain-Python reader (messages.split_batch) treats differently from a well-formed
 * batch returns None, and the caller runs that reader, which says what is wrong: a count under
 * one, an entry or value running past the data, a negative payload_size, a malformed varint or
 * length, a field number 0, a tag or length of more than five bytes or past 32 bits, a known
 * field with another wire type, a group, a string that is not UTF-8 (protobuf hands those over
 * as bytes), a sequence past 2^64.
 *
 * numbered(prefix, first, n, suffix) writes prefix + str(first + i) + suffix for i < n as an
 * Arrow string column (offsets, data): a block's message ids (ledger:entry:batch_index) and
 * details (the JSON the messages share, then each batch index) without a string per message.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../arrowbuf.h" /* Buf, Col, decimal_column */
#include "../pbwire.h"   /* varint, varint32, skip */

/* A length-delimited field's bytes: 0 with *s, *n set, or -1. */
static int delimited(const unsigned char **p, const unsigned char *end, const unsigned char **s, Py_ssize_t *n) {
    uint64_t v;
    if (varint32(p, end, &v) || v > (uint64_t)(end - *p)) return -1;
    *s = *p;
    *n = (Py_ssize_t)v;
    *p += v;
    return 0;
}

/* Is s[0..n) well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF),
 * what Python's strict decoder takes? */
static int is_utf8(const unsigned char *s, Py_ssize_t n) {
    const unsigned char *end = s + n;
    while (s < end) {
        unsigned char c = *s;
        if (c < 0x80) {
            s++;
            continue;
        }
        int more;
        unsigned char lo = 0x80, hi = 0xBF; /* the range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) {
            more = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            if (c == 0xE0) lo = 0xA0;      /* overlong below */
            else if (c == 0xED) hi = 0x9F; /* surrogates above */
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            if (c == 0xF0) lo = 0x90;      /* overlong below */
            else if (c == 0xF4) hi = 0x8F; /* past U+10FFFF above */
        } else {
            return 0;
        }
        if (end - s <= more || s[1] < lo || s[1] > hi) return 0;
        for (int k = 2; k <= more; k++)
            if ((s[k] & 0xC0) != 0x80) return 0;
        s += more + 1;
    }
    return 1;
}

/* The columns being written, and the per-message fields that are rare (kept as Python values). */
typedef struct {
    Col value, key, hkey, hvalue;
    Buf hoffs, seqs;
    int32_t nh;  /* headers so far */
    int big;     /* a sequence past int64 */
    PyObject *own; /* {index: {field: value}} or NULL */
} Walk;

/* One KeyValue appended to the header columns: 1, 0 (not a plain one), -1 (no memory). */
static int key_value(Walk *w, const unsigned char *p, const unsigned char *end) {
    const unsigned char *k = NULL, *v = NULL;
    Py_ssize_t kn = 0, vn = 0;
    while (p < end) {
        uint64_t tag;
        if (varint32(&p, end, &tag) || tag >> 3 == 0) return 0;
        int field = (int)(tag >> 3), wt = (int)(tag & 7);
        if (field == 1 || field == 2) {
            if (wt != 2) return 0;
            if (field == 1 ? delimited(&p, end, &k, &kn) : delimited(&p, end, &v, &vn)) return 0;
        } else if (skip(&p, end, wt)) {
            return 0;
        }
    }
    if (k && !is_utf8(k, kn)) return 0;
    int r = col_add(&w->hkey, k, k ? kn : 0);
    if (!r) r = col_add(&w->hvalue, v, v ? vn : 0);
    if (r) return r == -2 ? 0 : -1;
    w->nh++;
    return 1;
}

/* own[index][name] = o (a new reference): 0 or -1. */
static int own_field(Walk *w, PyObject **fields, Py_ssize_t index, const char *name, PyObject *o) {
    if (!o) return -1;
    if (!*fields) {
        PyObject *key = PyLong_FromSsize_t(index);
        if (!w->own) w->own = PyDict_New();
        *fields = PyDict_New();
        if (!key || !w->own || !*fields || PyDict_SetItem(w->own, key, *fields)) {
            Py_XDECREF(key);
            Py_CLEAR(*fields);
            Py_DECREF(o);
            return -1;
        }
        Py_DECREF(key);
        Py_DECREF(*fields); /* the dict own holds it */
    }
    int r = PyDict_SetItemString(*fields, name, o);
    Py_DECREF(o);
    return r;
}

/* One entry's metadata and value appended to the columns: 1, 0 (not plain), -1 (error). */
static int entry(Walk *w, const unsigned char *p, const unsigned char *end, const unsigned char **next,
                 const unsigned char *data_end, uint64_t seq_default, Py_ssize_t index) {
    const unsigned char *pk = NULL, *ok = NULL;
    Py_ssize_t pkn = 0, okn = 0;
    int64_t payload_size = 0;
    int compacted = 0, b64 = 0, null_value = 0, has_seq = 0;
    uint64_t event_time = 0, seq = 0, v;
    while (p < end) {
        uint64_t tag;
        if (varint32(&p, end, &tag) || tag >> 3 == 0) return 0;
        int field = (int)(tag >> 3), wt = (int)(tag & 7);
        if (field == 1) {
            const unsigned char *s;
            Py_ssize_t n;
            if (wt != 2 || delimited(&p, end, &s, &n)) return 0;
            int r = key_value(w, s, s + n);
            if (r <= 0) return r;
        } else if (field == 2 || field == 7) {
            if (wt != 2) return 0;
            if (field == 2 ? delimited(&p, end, &pk, &pkn) : delimited(&p, end, &ok, &okn)) return 0;
        } else if (field >= 3 && field <= 9) {
            if (wt != 0 || varint(&p, end, &v)) return 0;
            switch (field) {
            case 3: payload_size = (int32_t)(uint32_t)v; break;
            case 4: compacted = v != 0; break;
            case 5: event_time = v; break; /* 0 and absent alike: details leave it out */
            case 6: b64 = v != 0; break;
            case 8: seq = v; has_seq = 1; break;
            case 9: null_value = v != 0; break;
            }
        } else if (skip(&p, end, wt)) {
            return 0;
        }
    }
    if (payload_size < 0 || payload_size > data_end - end) return 0;
    if (pk && !is_utf8(pk, pkn)) return 0;
    if (!has_seq) {
        if (seq_default + (uint64_t)index < seq_default) return 0;
        seq = seq_default + (uint64_t)index;
    }
    w->big |= seq > (uint64_t)INT64_MAX;
    int r = col_add(&w->value, end, null_value ? -1 : payload_size);
    if (!r) r = col_add(&w->key, pk, pk ? pkn : -1);
    if (r) return r == -2 ? 0 : -1;
    if (buf_put(&w->hoffs, &w->nh, 4) || buf_put(&w->seqs, &seq, 8)) return -1;
    PyObject *fields = NULL; /* borrowed from own once made */
    if ((event_time && own_field(w, &fields, index, "event_time_ms", PyLong_FromUnsignedLongLong(event_time))) ||
        (ok && own_field(w, &fields, index, "ordering_key", PyBytes_FromStringAndSize((const char *)ok, okn))) ||
        (null_value && own_field(w, &fields, index, "null_value", (Py_INCREF(Py_True), Py_True))) ||
        (b64 && pk && own_field(w, &fields, index, "partition_key_b64", PyUnicode_DecodeUTF8((const char *)pk, pkn, "strict"))) ||
        (compacted && own_field(w, &fields, index, "compacted_out", (Py_INCREF(Py_True), Py_True))))
        return -1;
    *next = end + payload_size;
    return 1;
}

/* The sequences as native int64 bytes, or a list of ints when one is past int64. */
static PyObject *sequences(Walk *w, Py_ssize_t n) {
    if (!w->big) return bytes_of(&w->seqs);
    PyObject *l = PyList_New(n);
    const uint64_t *s = (const uint64_t *)w->seqs.p;
    for (Py_ssize_t i = 0; l && i < n; i++) {
        PyObject *o = PyLong_FromUnsignedLongLong(s[i]);
        if (!o) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, o);
    }
    return l;
}

static PyObject *split(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer buf;
    Py_ssize_t count;
    unsigned long long base_sequence;
    if (!PyArg_ParseTuple(args, "y*nK", &buf, &count, &base_sequence)) return NULL;
    Walk w;
    memset(&w, 0, sizeof w);
    PyObject *result = NULL;
    const unsigned char *p = buf.buf, *end = p + buf.len;
    if (count < 1) goto not_plain;
    if (col_init(&w.value, count) || col_init(&w.key, count) || col_init(&w.hkey, 0) || col_init(&w.hvalue, 0) ||
        buf_reserve(&w.hoffs, (count + 1) * 4) || buf_reserve(&w.seqs, count * 8) || buf_put(&w.hoffs, &w.nh, 4)) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (end - p < 4) goto not_plain;
        uint32_t size = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
        p += 4;
        if (size > (uint64_t)(end - p)) goto not_plain;
        int r = entry(&w, p, p + size, &p, end, (uint64_t)base_sequence, i);
        if (r < 0) {
            if (!PyErr_Occurred()) PyErr_NoMemory();
            goto done;
        }
        if (r == 0) goto not_plain;
    }
    result = Py_BuildValue("(nNNNNNNOn)", count, col_tuple(&w.value), col_tuple(&w.key), bytes_of(&w.hoffs),
                           col_tuple(&w.hkey), col_tuple(&w.hvalue), sequences(&w, count), w.own ? w.own : Py_None,
                           (Py_ssize_t)(p - (const unsigned char *)buf.buf));
    goto done;
not_plain:
    result = Py_None;
    Py_INCREF(result);
done:
    col_free(&w.value);
    col_free(&w.key);
    col_free(&w.hkey);
    col_free(&w.hvalue);
    free(w.hoffs.p);
    free(w.seqs.p);
    Py_XDECREF(w.own);
    PyBuffer_Release(&buf);
    return result;
}

static PyObject *numbered(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer prefix, suffix;
    long long first;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*Lny*", &prefix, &first, &n, &suffix)) return NULL;
    PyObject *res = NULL;
    if (n < 0 || (n && first > INT64_MAX - (n - 1)))
        PyErr_SetString(PyExc_ValueError, "numbers past int64");
    else
        res = decimal_column(&prefix, NULL, first, n, &suffix);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&suffix);
    return res;
}

static PyMethodDef methods[] = {
    {"split", split, METH_VARARGS, "The messages of a Pulsar batch payload as columns, or None (see the module)."},
    {"numbered", numbered, METH_VARARGS, "prefix + str(first + i) + suffix for i < n, as an Arrow string column."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_batch", "Pulsar batch payloads, read column-wise.", -1, methods};

PyMODINIT_FUNC PyInit__batch(void) { return PyModule_Create(&module); }
