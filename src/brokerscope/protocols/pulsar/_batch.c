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
 * and returns the columns as lists, one entry per message:
 *
 *   (value, key_raw, key, b64, headers, sequence, event_time, ordering_key, null_value,
 *    compacted_out, end)
 *
 * value: bytes, None where null_value; key_raw: the partition key as text, None when absent;
 * key: its UTF-8 bytes; b64: the indexes whose key is base64 (the caller decodes those);
 * headers: per message a list of {"key": str, "value": bytes} from the properties, in wire order;
 * sequence: sequence_id, else base_sequence + index; event_time: None when absent; ordering_key:
 * bytes or None; null_value, compacted_out: bools; end: where the last entry ended.
 *
 * Anything the plain-Python reader (messages.split_batch) treats differently from a well-formed
 * batch returns None, and the caller runs that reader, which says what is wrong: a count under
 * one, an entry or value running past the data, a negative payload_size, a malformed varint or
 * length, a field number 0, a tag or length of more than five bytes or past 32 bits, a known
 * field with another wire type, a group, a string that is not UTF-8 (protobuf hands those over
 * as bytes), a sequence past 2^64.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../pbwire.h" /* varint, varint32, skip */

/* A length-delimited field's bytes: 0 with *s, *n set, or -1. */
static int delimited(const unsigned char **p, const unsigned char *end, const unsigned char **s, Py_ssize_t *n) {
    uint64_t v;
    if (varint32(p, end, &v) || v > (uint64_t)(end - *p)) return -1;
    *s = *p;
    *n = (Py_ssize_t)v;
    *p += v;
    return 0;
}

/* Text from UTF-8, or NULL with no error set when it is not UTF-8 (a MemoryError stays set). */
static PyObject *utf8(const unsigned char *s, Py_ssize_t n) {
    PyObject *o = PyUnicode_DecodeUTF8((const char *)s, n, "strict");
    if (!o && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear();
    return o;
}

static PyObject *KEY_NAME, *VALUE_NAME; /* the header dicts' keys, "key" and "value", made once */

/* One KeyValue as {"key": str, "value": bytes}: 1 new dict, 0 (not a plain one), -1 (error). */
static int key_value(const unsigned char *p, const unsigned char *end, PyObject **out) {
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
    PyObject *key = utf8(k ? k : (const unsigned char *)"", kn);
    if (!key) return PyErr_Occurred() ? -1 : 0;
    PyObject *value = PyBytes_FromStringAndSize(v ? (const char *)v : "", vn);
    PyObject *d = value ? PyDict_New() : NULL;
    if (!d || PyDict_SetItem(d, KEY_NAME, key) || PyDict_SetItem(d, VALUE_NAME, value)) {
        Py_XDECREF(d);
        Py_DECREF(key);
        Py_XDECREF(value);
        return -1;
    }
    Py_DECREF(key);
    Py_DECREF(value);
    *out = d;
    return 1;
}

enum { VALUE, KEY_RAW, KEY, B64, HEADERS, SEQUENCE, EVENT_TIME, ORDERING_KEY, NULL_VALUE, COMPACTED, NCOLS };

/* Append `o` (a new reference, NULL on error) to list `l`: 0 or -1. */
static int put(PyObject *l, PyObject *o) {
    if (!o) return -1;
    int r = PyList_Append(l, o);
    Py_DECREF(o);
    return r;
}

/* One entry's metadata and value appended to the columns: 1, 0 (not plain), -1 (error). */
static int entry(const unsigned char *p, const unsigned char *end, const unsigned char **next,
                 const unsigned char *data_end, uint64_t seq_default, Py_ssize_t index, PyObject **cols) {
    const unsigned char *pk = NULL, *ok = NULL;
    Py_ssize_t pkn = 0, okn = 0;
    int64_t payload_size = 0;
    int compacted = 0, b64 = 0, null_value = 0, has_event = 0, has_seq = 0;
    uint64_t event_time = 0, seq = 0, v;
    PyObject *headers = PyList_New(0);
    if (!headers) return -1;
    while (p < end) {
        uint64_t tag;
        if (varint32(&p, end, &tag) || tag >> 3 == 0) goto not_plain;
        int field = (int)(tag >> 3), wt = (int)(tag & 7);
        if (field == 1) {
            const unsigned char *s;
            Py_ssize_t n;
            PyObject *kv = NULL;
            if (wt != 2 || delimited(&p, end, &s, &n)) goto not_plain;
            int r = key_value(s, s + n, &kv);
            if (r < 0) goto error;
            if (r == 0) goto not_plain;
            if (put(headers, kv)) goto error;
        } else if (field == 2 || field == 7) {
            if (wt != 2) goto not_plain;
            if (field == 2 ? delimited(&p, end, &pk, &pkn) : delimited(&p, end, &ok, &okn)) goto not_plain;
        } else if (field >= 3 && field <= 9) {
            if (wt != 0 || varint(&p, end, &v)) goto not_plain;
            switch (field) {
            case 3: payload_size = (int32_t)(uint32_t)v; break;
            case 4: compacted = v != 0; break;
            case 5: event_time = v; has_event = 1; break;
            case 6: b64 = v != 0; break;
            case 8: seq = v; has_seq = 1; break;
            case 9: null_value = v != 0; break;
            }
        } else if (skip(&p, end, wt)) {
            goto not_plain;
        }
    }
    if (payload_size < 0 || payload_size > data_end - end) goto not_plain;
    PyObject *key_raw = Py_None, *key = Py_None;
    Py_INCREF(Py_None);
    Py_INCREF(Py_None);
    if (pk) {
        Py_DECREF(Py_None);
        Py_DECREF(Py_None);
        key_raw = utf8(pk, pkn);
        if (!key_raw) {
            if (PyErr_Occurred()) goto error;
            goto not_plain;
        }
        key = PyBytes_FromStringAndSize((const char *)pk, pkn);
        if (!key) {
            Py_DECREF(key_raw);
            goto error;
        }
    }
    if (!has_seq) {
        if (seq_default + (uint64_t)index < seq_default) {
            Py_DECREF(key_raw);
            Py_DECREF(key);
            goto not_plain;
        }
        seq = seq_default + (uint64_t)index;
    }
    PyObject *value = null_value ? (Py_INCREF(Py_None), Py_None)
                                 : PyBytes_FromStringAndSize((const char *)end, (Py_ssize_t)payload_size);
    if (put(cols[VALUE], value) || put(cols[KEY_RAW], key_raw) || put(cols[KEY], key) ||
        (b64 && pk && put(cols[B64], PyLong_FromSsize_t(index))) || put(cols[HEADERS], headers) ||
        put(cols[SEQUENCE], PyLong_FromUnsignedLongLong(seq)) ||
        put(cols[EVENT_TIME], has_event ? PyLong_FromUnsignedLongLong(event_time) : (Py_INCREF(Py_None), Py_None)) ||
        put(cols[ORDERING_KEY], ok ? PyBytes_FromStringAndSize((const char *)ok, okn) : (Py_INCREF(Py_None), Py_None)) ||
        put(cols[NULL_VALUE], PyBool_FromLong(null_value)) || put(cols[COMPACTED], PyBool_FromLong(compacted)))
        return -1; /* put consumed every reference it was given up to the failure; the rest leak on MemoryError only */
    *next = end + payload_size;
    return 1;
not_plain:
    Py_DECREF(headers);
    return 0;
error:
    Py_DECREF(headers);
    return -1;
}

static PyObject *split(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t count;
    unsigned long long base_sequence;
    if (!PyArg_ParseTuple(args, "y*nK", &buf, &count, &base_sequence)) return NULL;
    PyObject *cols[NCOLS] = {0};
    PyObject *result = NULL;
    const unsigned char *p = buf.buf, *end = p + buf.len;
    if (count < 1) goto not_plain;
    for (int c = 0; c < NCOLS; c++)
        if (!(cols[c] = PyList_New(0))) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (end - p < 4) goto not_plain;
        uint32_t size = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
        p += 4;
        if (size > (uint64_t)(end - p)) goto not_plain;
        int r = entry(p, p + size, &p, end, (uint64_t)base_sequence, i, cols);
        if (r < 0) goto done;
        if (r == 0) goto not_plain;
    }
    result = Py_BuildValue("(OOOOOOOOOOn)", cols[VALUE], cols[KEY_RAW], cols[KEY], cols[B64], cols[HEADERS],
                           cols[SEQUENCE], cols[EVENT_TIME], cols[ORDERING_KEY], cols[NULL_VALUE], cols[COMPACTED],
                           (Py_ssize_t)(p - (const unsigned char *)buf.buf));
    goto done;
not_plain:
    result = Py_None;
    Py_INCREF(result);
done:
    for (int c = 0; c < NCOLS; c++) Py_XDECREF(cols[c]);
    PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef methods[] = {
    {"split", split, METH_VARARGS, "The messages of a Pulsar batch payload as columns, or None (see the module)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_batch", "Pulsar batch payloads, read column-wise.", -1, methods};

PyMODINIT_FUNC PyInit__batch(void) {
    if (!KEY_NAME && !(KEY_NAME = PyUnicode_InternFromString("key"))) return NULL;
    if (!VALUE_NAME && !(VALUE_NAME = PyUnicode_InternFromString("value"))) return NULL;
    return PyModule_Create(&module);
}
