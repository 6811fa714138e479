/* Kafka message bodies read by a table of their fields: the compiled twin of schema.py's readers;
 * their details copy (cleaner, clean: rows.clean) and what their commands row names (meta, summary:
 * schema.Plan.summarize), each described above its functions.
 *
 * table(structs, DecodeError, Truncated): the field table of one plan (schema._body_table), made
 * once per plan. `structs` is a list of (flexible, [(name, type)], [(tag, name, type)]), the
 * plan's own struct first; a type is an int: kind (bits 0-4, KIND_*), TYPE_COMPACT, TYPE_NULLABLE,
 * TYPE_ARRAY, and for a struct kind its entry from bit 8.
 *
 * read(table, buf, pos) -> (dict, end): the body at `pos` of `buf` (any buffer) read as the
 * Python reader reads it (schema._struct_reader): the same dicts in the same key order, lists,
 * ints, floats, bools, str (UTF-8 with bad bytes escaped, backslashreplace), bytes (records too),
 * uuid as its text; the same exceptions with the same messages (base.Truncated where the data
 * ends inside a field, base.DecodeError otherwise). None where the Python reader must run: a
 * varint whose value passes 64 bits (Python's ints hold it, and its errors print it).
 *
 * Wire rules (Kafka protocol guide; KIP-482 for flexible versions), all big-endian:
 *   int8/int16/int32/int64/uint16/uint32/float64, bool one byte (non-zero = true), uuid 16 bytes
 *   classic string: int16 length, -1 = null; classic bytes: int32 length; classic array: int32
 *   count; compact string/bytes/array: unsigned varint length + 1, 0 = null
 *   a nullable struct (not in an array): int8 marker, negative = null
 *   flexible struct: its fields, then uvarint count and per tagged field uvarint tag, uvarint
 *   size and the value (a known tag read from exactly those bytes; an unknown one kept as
 *   {"base64": ...} under `_unknown_tagged_fields`, by its tag's decimal text)
 *   varints: LEB128, low group first, at most 10 bytes (64 bits)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { KIND_INT8, KIND_INT16, KIND_INT32, KIND_INT64, KIND_UINT16, KIND_UINT32, KIND_FLOAT64,
       KIND_BOOL, KIND_UUID, KIND_STRING, KIND_BYTES, KIND_STRUCT, N_KINDS };
#define KIND_MASK 0x1f
#define TYPE_COMPACT 0x20
#define TYPE_NULLABLE 0x40
#define TYPE_ARRAY 0x80
#define TYPE_STRUCT_SHIFT 8

#define UUID_LEN 16
#define MAX_VARINT_BITS 64
#define MAX_DEPTH 64 /* structs in structs: the specs nest a handful */

#define OK 0
#define PY_ERROR (-1) /* a Python exception is set */
#define FALLBACK (-2) /* the Python reader must read this body */

/* The fixed sizes of the primitive kinds (0: not fixed). */
static const int FIXED_SIZE[N_KINDS] = {1, 2, 4, 8, 2, 4, 8, 1, UUID_LEN, 0, 0, 0};

typedef struct {
    PyObject *name; /* interned */
    int type;
    uint64_t tag; /* tagged fields */
} Field;

typedef struct {
    int flexible;
    Py_ssize_t n_regular, n_tagged;
    Field *regular, *tagged;
    Py_ssize_t least; /* its fewest bytes on the wire (-1: not yet known) */
} Struct;

typedef struct {
    Py_ssize_t n;
    Struct *structs;
    PyObject *decode_error, *truncated;
} Table;

static PyObject *S_BASE64, *S_UNKNOWN; /* "base64", "_unknown_tagged_fields" */

static void table_free(PyObject *capsule) {
    Table *t = PyCapsule_GetPointer(capsule, "kafka.body_table");
    if (!t) return;
    for (Py_ssize_t i = 0; i < t->n; i++) {
        Struct *s = &t->structs[i];
        for (Py_ssize_t j = 0; j < s->n_regular; j++) Py_XDECREF(s->regular[j].name);
        for (Py_ssize_t j = 0; j < s->n_tagged; j++) Py_XDECREF(s->tagged[j].name);
        PyMem_Free(s->regular);
        PyMem_Free(s->tagged);
    }
    PyMem_Free(t->structs);
    Py_XDECREF(t->decode_error);
    Py_XDECREF(t->truncated);
    PyMem_Free(t);
}

/* One (name, type) or (tag, name, type) entry into *f: 0, or -1 with an exception set. */
static int field_of(PyObject *item, int tagged, Py_ssize_t n_structs, Field *f) {
    unsigned long long tag = 0;
    PyObject *name;
    int type;
    if (tagged ? !PyArg_ParseTuple(item, "KUi", &tag, &name, &type) : !PyArg_ParseTuple(item, "Ui", &name, &type))
        return -1;
    if ((type & KIND_MASK) >= N_KINDS ||
        ((type & KIND_MASK) == KIND_STRUCT && (type >> TYPE_STRUCT_SHIFT) >= n_structs)) {
        PyErr_SetString(PyExc_ValueError, "table: a field type out of range");
        return -1;
    }
    Py_INCREF(name);
    PyUnicode_InternInPlace(&name);
    f->name = name;
    f->type = type;
    f->tag = tag;
    return 0;
}

static int fields_of(PyObject *list, int tagged, Py_ssize_t n_structs, Field **out, Py_ssize_t *n) {
    if (!PyList_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "table: fields are a list");
        return -1;
    }
    *n = PyList_GET_SIZE(list);
    if (!(*out = PyMem_Calloc(*n ? *n : 1, sizeof(Field)))) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t j = 0; j < *n; j++)
        if (field_of(PyList_GET_ITEM(list, j), tagged, n_structs, &(*out)[j])) return -1;
    return 0;
}

static Py_ssize_t struct_least(Table *t, Py_ssize_t i, int depth);

/* The fewest bytes a value of `type` takes (an array's element: `type` without TYPE_ARRAY). */
static Py_ssize_t type_least(Table *t, int type, int depth) {
    int kind = type & KIND_MASK, compact = type & TYPE_COMPACT;
    if (type & TYPE_ARRAY) return compact ? 1 : 4;
    if (kind == KIND_STRING) return compact ? 1 : 2;
    if (kind == KIND_BYTES) return compact ? 1 : 4;
    if (kind != KIND_STRUCT) return FIXED_SIZE[kind];
    if (type & TYPE_NULLABLE) return 1; /* its marker */
    return struct_least(t, type >> TYPE_STRUCT_SHIFT, depth + 1);
}

/* A struct's fewest bytes, or -1 for structs nested deeper than MAX_DEPTH. */
static Py_ssize_t struct_least(Table *t, Py_ssize_t i, int depth) {
    Struct *s = &t->structs[i];
    if (s->least >= 0) return s->least;
    if (depth > MAX_DEPTH) return -1;
    Py_ssize_t n = s->flexible ? 1 : 0; /* the tagged-field count */
    for (Py_ssize_t j = 0; j < s->n_regular; j++) {
        Py_ssize_t f = type_least(t, s->regular[j].type, depth);
        if (f < 0) return -1;
        n += f;
    }
    return s->least = n;
}

static PyObject *table(PyObject *self, PyObject *args) {
    PyObject *structs, *decode_error, *truncated;
    if (!PyArg_ParseTuple(args, "O!OO", &PyList_Type, &structs, &decode_error, &truncated)) return NULL;
    Table *t = PyMem_Calloc(1, sizeof(Table));
    if (!t) return PyErr_NoMemory();
    PyObject *capsule = PyCapsule_New(t, "kafka.body_table", table_free);
    if (!capsule) {
        PyMem_Free(t);
        return NULL;
    }
    Py_INCREF(decode_error);
    t->decode_error = decode_error;
    Py_INCREF(truncated);
    t->truncated = truncated;
    Py_ssize_t n = PyList_GET_SIZE(structs);
    if (!(t->structs = PyMem_Calloc(n ? n : 1, sizeof(Struct)))) {
        PyErr_NoMemory();
        goto fail;
    }
    t->n = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *regular, *tagged;
        int flexible;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(structs, i), "pOO", &flexible, &regular, &tagged)) goto fail;
        Struct *s = &t->structs[i];
        s->flexible = flexible;
        if (fields_of(regular, 0, n, &s->regular, &s->n_regular)) goto fail;
        if (fields_of(tagged, 1, n, &s->tagged, &s->n_tagged)) goto fail;
    }
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "table: no struct");
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) t->structs[i].least = -1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (struct_least(t, i, 0) < 0) {
            PyErr_SetString(PyExc_ValueError, "table: structs nested too deep");
            goto fail;
        }
    return capsule;
fail:
    Py_DECREF(capsule);
    return NULL;
}

/* The reading state: the buffer's end and the table (its exceptions). */
typedef struct {
    const unsigned char *end;
    const Table *t;
} Reader;

/* Raise `cls(message)`, or `cls()` for a NULL format: PY_ERROR. */
static int fail(PyObject *cls, const char *fmt, ...) {
    PyObject *exc;
    if (fmt) {
        va_list va;
        va_start(va, fmt);
        PyObject *msg = PyUnicode_FromFormatV(fmt, va);
        va_end(va);
        if (!msg) return PY_ERROR;
        exc = PyObject_CallOneArg(cls, msg);
        Py_DECREF(msg);
    } else {
        exc = PyObject_CallNoArgs(cls);
    }
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return PY_ERROR;
}

#define TRUNCATED(r, ...) fail((r)->t->truncated, __VA_ARGS__)
#define MALFORMED(r, ...) fail((r)->t->decode_error, __VA_ARGS__)

/* An unsigned varint at *p (schema.read_uvarint): OK, PY_ERROR, or FALLBACK past 64 bits. */
static int uvarint(const Reader *r, const unsigned char **p, uint64_t *out) {
    uint64_t v = 0;
    int shift = 0;
    const unsigned char *q = *p;
    for (;;) {
        if (q >= r->end) return TRUNCATED(r, "varint runs past the end of the data");
        unsigned char b = *q++;
        if (shift == 63 && (b & 0x7f) > 1) return FALLBACK; /* the value passes 64 bits */
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) break;
        shift += 7;
        if (shift >= MAX_VARINT_BITS) return MALFORMED(r, "varint longer than %d bits", MAX_VARINT_BITS);
    }
    *p = q;
    *out = v;
    return OK;
}

/* A length or count (type's encoding; int16 for a classic string): in *n, -1 = null. A compact
 * length past INT64_MAX stays unsigned in *big (then *n = INT64_MAX, never null nor negative). */
static int length_of(const Reader *r, const unsigned char **p, int classic16, int compact, int64_t *n, uint64_t *big) {
    const unsigned char *q = *p;
    if (compact) {
        uint64_t v;
        int rc = uvarint(r, p, &v);
        if (rc) return rc;
        *big = v - 1;
        *n = v == 0 ? -1 : (v - 1 > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)(v - 1));
        return OK;
    }
    if (classic16) {
        if (r->end - q < 2) return TRUNCATED(r, NULL);
        *n = (int16_t)((q[0] << 8) | q[1]);
        *p = q + 2;
    } else {
        if (r->end - q < 4) return TRUNCATED(r, NULL);
        *n = (int32_t)(((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) | ((uint32_t)q[2] << 8) | q[3]);
        *p = q + 4;
    }
    *big = (uint64_t)*n;
    return OK;
}

static uint64_t be(const unsigned char *q, int size) {
    uint64_t v = 0;
    for (int i = 0; i < size; i++) v = (v << 8) | q[i];
    return v;
}

static PyObject *uuid_text(const unsigned char *q) {
    static const char hex[] = "0123456789abcdef";
    char s[36];
    int o = 0;
    for (int i = 0; i < UUID_LEN; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) s[o++] = '-';
        s[o++] = hex[q[i] >> 4];
        s[o++] = hex[q[i] & 15];
    }
    return PyUnicode_FromStringAndSize(s, sizeof s);
}

/* A fixed-size primitive at *p. */
static int primitive(const Reader *r, int kind, const unsigned char **p, PyObject **v) {
    int size = FIXED_SIZE[kind];
    const unsigned char *q = *p;
    if (r->end - q < size) return TRUNCATED(r, NULL);
    uint64_t x = be(q, size);
    switch (kind) {
    case KIND_INT8: *v = PyLong_FromLong((int8_t)x); break;
    case KIND_INT16: *v = PyLong_FromLong((int16_t)x); break;
    case KIND_INT32: *v = PyLong_FromLong((int32_t)x); break;
    case KIND_INT64: *v = PyLong_FromLongLong((int64_t)x); break;
    case KIND_UINT16:
    case KIND_UINT32: *v = PyLong_FromUnsignedLongLong(x); break;
    case KIND_FLOAT64: {
        double d;
        memcpy(&d, &x, sizeof d);
        *v = PyFloat_FromDouble(d);
        break;
    }
    case KIND_BOOL: *v = PyBool_FromLong(q[0] != 0); break;
    default: *v = uuid_text(q); break; /* KIND_UUID */
    }
    *p = q + size;
    return *v ? OK : PY_ERROR;
}

static int read_struct(const Reader *r, Py_ssize_t index, const unsigned char **p, int depth, PyObject **out);

/* A string or bytes value (type's encoding and nullability). */
static int blob(const Reader *r, int type, const unsigned char **p, PyObject **v) {
    int64_t n;
    uint64_t big;
    int kind = type & KIND_MASK, rc;
    if ((rc = length_of(r, p, kind == KIND_STRING, type & TYPE_COMPACT, &n, &big))) return rc;
    if (n < 0) {
        if (n == -1 && (type & TYPE_NULLABLE)) {
            *v = Py_NewRef(Py_None);
            return OK;
        }
        if (n == -1) return MALFORMED(r, "null in a non-nullable field");
        return MALFORMED(r, "negative length %lld", (long long)n);
    }
    if (big > (uint64_t)(r->end - *p)) return TRUNCATED(r, "length %llu runs past the end", (unsigned long long)big);
    const char *at = (const char *)*p;
    *v = kind == KIND_STRING ? PyUnicode_DecodeUTF8(at, (Py_ssize_t)n, "backslashreplace")
                             : PyBytes_FromStringAndSize(at, (Py_ssize_t)n);
    *p += n;
    return *v ? OK : PY_ERROR;
}

/* One value of `type` that is not an array (an array's element: not nullable). */
static int scalar(const Reader *r, int type, const unsigned char **p, int depth, PyObject **v) {
    int kind = type & KIND_MASK;
    if (kind == KIND_STRING || kind == KIND_BYTES) return blob(r, type, p, v);
    if (kind != KIND_STRUCT) return primitive(r, kind, p, v);
    Py_ssize_t sub = type >> TYPE_STRUCT_SHIFT;
    if (type & TYPE_NULLABLE) {
        if (*p >= r->end) return TRUNCATED(r, NULL);
        if ((int8_t)**p < 0) {
            *p += 1;
            *v = Py_NewRef(Py_None);
            return OK;
        }
        *p += 1;
    }
    return read_struct(r, sub, p, depth + 1, v);
}

/* A value of `type`, array or not. */
static int value(const Reader *r, int type, const unsigned char **p, int depth, PyObject **v) {
    *v = NULL;
    if (!(type & TYPE_ARRAY)) return scalar(r, type, p, depth, v);
    int64_t n;
    uint64_t big;
    int rc;
    if ((rc = length_of(r, p, 0, type & TYPE_COMPACT, &n, &big))) return rc;
    if (n < 0) {
        if (n == -1 && (type & TYPE_NULLABLE)) {
            *v = Py_NewRef(Py_None);
            return OK;
        }
        if (n == -1) return MALFORMED(r, "null array in a non-nullable field");
        return MALFORMED(r, "negative array length %lld", (long long)n);
    }
    Py_ssize_t left = r->end - *p;
    if (big > (uint64_t)left)
        return MALFORMED(r, "array length %llu exceeds the remaining %zd bytes", (unsigned long long)big, left);
    /* n <= the bytes left; the list is made whole only when that many elements of their least
     * size fit, else grown as they are read (a count the data cannot hold fails before) */
    int elem = type & ~(TYPE_ARRAY | TYPE_NULLABLE);
    Py_ssize_t least = type_least((Table *)r->t, elem, 0);
    int whole = least > 0 && n <= left / least;
    PyObject *list = PyList_New(whole ? (Py_ssize_t)n : 0);
    if (!list) return PY_ERROR;
    for (int64_t i = 0; i < n; i++) {
        PyObject *x;
        if ((rc = scalar(r, elem, p, depth, &x))) {
            Py_DECREF(list);
            return rc;
        }
        if (whole) {
            PyList_SET_ITEM(list, (Py_ssize_t)i, x);
        } else {
            rc = PyList_Append(list, x);
            Py_DECREF(x);
            if (rc) {
                Py_DECREF(list);
                return PY_ERROR;
            }
        }
    }
    *v = list;
    return OK;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* {"base64": the standard base64 text of n bytes at q}. */
static PyObject *base64_of(const unsigned char *q, Py_ssize_t n) {
    PyObject *s = PyUnicode_New((n + 2) / 3 * 4, 127);
    if (!s) return NULL;
    Py_UCS1 *o = PyUnicode_1BYTE_DATA(s);
    Py_ssize_t i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t x = ((uint32_t)q[i] << 16) | ((uint32_t)q[i + 1] << 8) | q[i + 2];
        *o++ = B64[x >> 18];
        *o++ = B64[(x >> 12) & 63];
        *o++ = B64[(x >> 6) & 63];
        *o++ = B64[x & 63];
    }
    if (i < n) {
        uint32_t x = (uint32_t)q[i] << 16 | (i + 1 < n ? (uint32_t)q[i + 1] << 8 : 0);
        *o++ = B64[x >> 18];
        *o++ = B64[(x >> 12) & 63];
        *o++ = i + 1 < n ? B64[(x >> 6) & 63] : '=';
        *o++ = '=';
    }
    PyObject *d = PyDict_New();
    if (d && PyDict_SetItem(d, S_BASE64, s)) Py_CLEAR(d);
    Py_DECREF(s);
    return d;
}

/* The tagged-field section of a flexible struct at *p, into d. */
static int tagged_fields(const Reader *r, const Struct *s, const unsigned char **p, int depth, PyObject *d) {
    uint64_t count, tag, size;
    int rc;
    if ((rc = uvarint(r, p, &count))) return rc;
    if (count > (uint64_t)(r->end - *p))
        return MALFORMED(r, "tagged field count %llu exceeds the message", (unsigned long long)count);
    PyObject *unknown = NULL;
    for (uint64_t i = 0; i < count; i++) {
        if ((rc = uvarint(r, p, &tag)) || (rc = uvarint(r, p, &size))) goto done;
        if (size > (uint64_t)(r->end - *p)) {
            rc = TRUNCATED(r, "tagged field runs past the end");
            goto done;
        }
        const unsigned char *at = *p, *stop = at + size;
        const Field *known = NULL;
        for (Py_ssize_t j = 0; j < s->n_tagged; j++)
            if (s->tagged[j].tag == tag) {
                known = &s->tagged[j];
                break;
            }
        PyObject *v;
        if (known) { /* read from exactly its bytes, as from a buffer of its own */
            Reader sub = {stop, r->t};
            const unsigned char *q = at;
            if ((rc = value(&sub, known->type, &q, depth, &v))) goto done;
            if (q != stop) {
                Py_DECREF(v);
                rc = MALFORMED(r, "tagged field %U size %llu but value used %zd", known->name,
                               (unsigned long long)size, (Py_ssize_t)(q - at));
                goto done;
            }
            rc = PyDict_SetItem(d, known->name, v) ? PY_ERROR : OK;
            Py_DECREF(v);
        } else {
            PyObject *key = NULL;
            if ((!unknown && !(unknown = PyDict_New())) || !(v = base64_of(at, (Py_ssize_t)size))) {
                rc = PY_ERROR;
                goto done;
            }
            key = PyUnicode_FromFormat("%llu", (unsigned long long)tag);
            rc = !key || PyDict_SetItem(unknown, key, v) ? PY_ERROR : OK;
            Py_XDECREF(key);
            Py_DECREF(v);
        }
        if (rc) goto done;
        *p = stop;
    }
    if (unknown && PyDict_SetItem(d, S_UNKNOWN, unknown)) rc = PY_ERROR;
done:
    Py_XDECREF(unknown);
    return rc;
}

static int read_struct(const Reader *r, Py_ssize_t index, const unsigned char **p, int depth, PyObject **out) {
    const Struct *s = &r->t->structs[index];
    int rc;
    *out = NULL;
    if (depth > MAX_DEPTH) return FALLBACK;
    PyObject *d = _PyDict_NewPresized(s->n_regular);
    if (!d) return PY_ERROR;
    for (Py_ssize_t j = 0; j < s->n_regular; j++) {
        PyObject *v;
        if ((rc = value(r, s->regular[j].type, p, depth, &v))) goto fail;
        rc = PyDict_SetItem(d, s->regular[j].name, v) ? PY_ERROR : OK;
        Py_DECREF(v);
        if (rc) goto fail;
    }
    if (s->flexible && (rc = tagged_fields(r, s, p, depth, d))) goto fail;
    *out = d;
    return OK;
fail:
    Py_DECREF(d);
    return rc;
}

static PyObject *read_body(PyObject *self, PyObject *args) {
    PyObject *capsule, *out = NULL, *d;
    Py_buffer buf;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "Oy*n", &capsule, &buf, &pos)) return NULL;
    Table *t = PyCapsule_GetPointer(capsule, "kafka.body_table");
    if (!t) goto done;
    if (pos < 0 || pos > buf.len) {
        PyErr_SetString(PyExc_ValueError, "read: position outside the buffer");
        goto done;
    }
    const unsigned char *b = buf.buf, *p = b + pos;
    Reader r = {b + buf.len, t};
    int rc = read_struct(&r, 0, &p, 0, &d);
    if (rc == FALLBACK) {
        out = Py_NewRef(Py_None);
    } else if (rc == OK) {
        out = Py_BuildValue("(Nn)", d, (Py_ssize_t)(p - b));
    }
done:
    PyBuffer_Release(&buf);
    return out;
}

/* ---------------------------------------------------------------------------------------------
 * The details copy of a decoded body (rows.clean): the body's top-level dict copied, and below
 * it a dict or list copied only where a value in it changes (the rest is the body's own, which
 * the caller serializes at once and never changes), scalars passed on,
 * a secret field's bytes or text (`secret_fields`) replaced by redacted(value), a record set (a
 * field of `records` holding bytes) by summarize(value, cap), a record set summary (`summary`,
 * a dict subclass) kept as it is, and a config entry's Value replaced by redacted(Value) where
 * IsSensitive is true or sensitive(Name) matches. The callbacks are Python's (base.redacted,
 * records.read_record_set, the config pattern's search): rare, and their rules stay there.
 */
typedef struct {
    PyObject *secret_fields, *summary, *redacted, *summarize, *sensitive;
} Cleaner;

static void cleaner_free(PyObject *capsule) {
    Cleaner *c = PyCapsule_GetPointer(capsule, "kafka.cleaner");
    if (!c) return;
    Py_XDECREF(c->secret_fields);
    Py_XDECREF(c->summary);
    Py_XDECREF(c->redacted);
    Py_XDECREF(c->summarize);
    Py_XDECREF(c->sensitive);
    PyMem_Free(c);
}

static PyObject *cleaner(PyObject *self, PyObject *args) {
    Cleaner got;
    if (!PyArg_ParseTuple(args, "O!O!OOO", &PyFrozenSet_Type, &got.secret_fields, &PyType_Type, &got.summary,
                          &got.redacted, &got.summarize, &got.sensitive))
        return NULL;
    Cleaner *c = PyMem_Malloc(sizeof(Cleaner));
    if (!c) return PyErr_NoMemory();
    *c = got;
    Py_INCREF(c->secret_fields);
    Py_INCREF(c->summary);
    Py_INCREF(c->redacted);
    Py_INCREF(c->summarize);
    Py_INCREF(c->sensitive);
    PyObject *capsule = PyCapsule_New(c, "kafka.cleaner", cleaner_free);
    if (!capsule) { /* the destructor is not set: free by hand */
        Py_DECREF(c->secret_fields);
        Py_DECREF(c->summary);
        Py_DECREF(c->redacted);
        Py_DECREF(c->summarize);
        Py_DECREF(c->sensitive);
        PyMem_Free(c);
    }
    return capsule;
}

/* The values rows.clean passes on as they are: exactly int, str, bool, float, None. */
static int plain_scalar(PyObject *v) {
    return PyLong_CheckExact(v) || PyUnicode_CheckExact(v) || PyBool_Check(v) || PyFloat_CheckExact(v) ||
           v == Py_None;
}

static PyObject *S_VALUE, *S_NAME, *S_IS_SENSITIVE; /* "Value", "Name", "IsSensitive" */

static PyObject *clean_value(const Cleaner *c, PyObject *o, PyObject *records, PyObject *cap);

/* A config entry ({"Name": str, "Value": str, ...}) whose value is a credential: its Value
 * redacted, in *out (made a copy of `o` first where it is still NULL). */
static int redact_config(const Cleaner *c, PyObject *o, PyObject **out) {
    PyObject *d = *out ? *out : o;
    PyObject *value = PyDict_GetItemWithError(d, S_VALUE), *name;
    if (!value) return PyErr_Occurred() ? -1 : 0;
    if (!PyUnicode_Check(value)) return 0;
    if (!(name = PyDict_GetItemWithError(d, S_NAME))) return PyErr_Occurred() ? -1 : 0;
    if (!PyUnicode_Check(name)) return 0;
    int hide = PyDict_GetItemWithError(d, S_IS_SENSITIVE) == Py_True;
    if (!hide) {
        if (PyErr_Occurred()) return -1;
        PyObject *m = PyObject_CallOneArg(c->sensitive, name);
        if (!m) return -1;
        hide = PyObject_IsTrue(m);
        Py_DECREF(m);
        if (hide < 0) return -1;
    }
    if (!hide) return 0;
    PyObject *r = PyObject_CallOneArg(c->redacted, value);
    if (!r) return -1;
    if (!*out && !(*out = PyDict_Copy(o))) {
        Py_DECREF(r);
        return -1;
    }
    int rc = PyDict_SetItem(*out, S_VALUE, r);
    Py_DECREF(r);
    return rc;
}

/* Copy on write: a dict or list none of whose values changes is returned as it is (a new
 * reference); the first change copies it. */
static PyObject *clean_dict(const Cleaner *c, PyObject *o, PyObject *records, PyObject *cap) {
    PyObject *out = NULL, *k, *v;
    Py_ssize_t i = 0;
    while (PyDict_Next(o, &i, &k, &v)) {
        PyObject *x;
        int secret = PySet_Contains(c->secret_fields, k), rec = 0;
        if (secret < 0) goto fail;
        if (secret && (PyBytes_Check(v) || PyUnicode_Check(v))) {
            x = PyObject_CallOneArg(c->redacted, v);
        } else if (plain_scalar(v)) {
            continue;
        } else if (PyBytes_Check(v) && (rec = PySet_Contains(records, k))) {
            x = rec < 0 ? NULL : PyObject_CallFunctionObjArgs(c->summarize, v, cap, NULL);
        } else {
            x = clean_value(c, v, records, cap);
        }
        if (!x) goto fail;
        if (x == v) {
            Py_DECREF(x);
            continue;
        }
        if (!out && !(out = PyDict_Copy(o))) {
            Py_DECREF(x);
            goto fail;
        }
        int rc = PyDict_SetItem(out, k, x);
        Py_DECREF(x);
        if (rc) goto fail;
    }
    if (redact_config(c, o, &out)) goto fail;
    return out ? out : Py_NewRef(o);
fail:
    Py_XDECREF(out);
    return NULL;
}

static PyObject *clean_list(const Cleaner *c, PyObject *o, PyObject *records, PyObject *cap) {
    PyObject *out = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(o); i++) {
        PyObject *v = PyList_GET_ITEM(o, i);
        if (plain_scalar(v)) continue;
        PyObject *x = clean_value(c, v, records, cap);
        if (!x) goto fail;
        if (x == v) {
            Py_DECREF(x);
            continue;
        }
        if (!out && !(out = PyList_GetSlice(o, 0, PyList_GET_SIZE(o)))) {
            Py_DECREF(x);
            goto fail;
        }
        PyList_SetItem(out, i, x); /* steals x */
    }
    return out ? out : Py_NewRef(o);
fail:
    Py_XDECREF(out);
    return NULL;
}

static PyObject *clean_value(const Cleaner *c, PyObject *o, PyObject *records, PyObject *cap) {
    if (PyObject_TypeCheck(o, (PyTypeObject *)c->summary)) return Py_NewRef(o);
    if (!PyDict_Check(o) && !PyList_Check(o)) return Py_NewRef(o);
    if (Py_EnterRecursiveCall(" in clean")) return NULL;
    PyObject *out = PyDict_Check(o) ? clean_dict(c, o, records, cap) : clean_list(c, o, records, cap);
    Py_LeaveRecursiveCall();
    return out;
}

static PyObject *clean(PyObject *self, PyObject *args) {
    PyObject *capsule, *o, *records, *cap;
    if (!PyArg_ParseTuple(args, "OOO!O", &capsule, &o, &PyFrozenSet_Type, &records, &cap)) return NULL;
    Cleaner *c = PyCapsule_GetPointer(capsule, "kafka.cleaner");
    PyObject *out = c ? clean_value(c, o, records, cap) : NULL;
    if (out == o && !PyObject_TypeCheck(o, (PyTypeObject *)c->summary) && (PyDict_Check(o) || PyList_Check(o))) {
        /* the copy's own top level: the caller adds to it */
        Py_SETREF(out, PyDict_Check(o) ? PyDict_Copy(o) : PyList_GetSlice(o, 0, PyList_GET_SIZE(o)));
    }
    return out;
}

/* ---------------------------------------------------------------------------------------------
 * What a decoded body's commands row names (schema.Plan.summarize, the walk schema._meta_walker
 * is the reference of): meta(entries) makes the table of a plan's structs (schema._meta_table:
 * per struct the names of its topic, topics, topic id, partition and error code fields or None,
 * and the structs it holds as (name, entry, is an array)), the plan's own
 * struct first; summary(table, body) walks a body by it and returns (topics, topic ids,
 * partition, top-level error, first non-zero nested error, any nested error):
 *   topic names and ids in order of appearance, once each, empty ones left out;
 *   the partition of the first struct that names a topic or topic id, or is nested two deep,
 *   and has a partition field that is not None;
 *   the body's own error code, and of the nested ones whether any is there and the first non-zero.
 */
typedef struct {
    PyObject *name;
    Py_ssize_t entry;
    int is_array;
} MetaChild;

typedef struct {
    PyObject *topic, *topics, *topic_id, *partition, *error; /* field names, or NULL */
    Py_ssize_t n_children;
    MetaChild *children;
} MetaStruct;

typedef struct {
    Py_ssize_t n;
    MetaStruct *structs;
} MetaTable;

static void meta_free(PyObject *capsule) {
    MetaTable *t = PyCapsule_GetPointer(capsule, "kafka.meta_table");
    if (!t) return;
    for (Py_ssize_t i = 0; i < t->n; i++) {
        MetaStruct *m = &t->structs[i];
        Py_XDECREF(m->topic);
        Py_XDECREF(m->topics);
        Py_XDECREF(m->topic_id);
        Py_XDECREF(m->partition);
        Py_XDECREF(m->error);
        for (Py_ssize_t j = 0; j < m->n_children; j++) Py_XDECREF(m->children[j].name);
        PyMem_Free(m->children);
    }
    PyMem_Free(t->structs);
    PyMem_Free(t);
}

/* A field name or None as a new interned reference or NULL (for None). */
static PyObject *name_or_null(PyObject *v) {
    if (v == Py_None) return NULL;
    Py_INCREF(v);
    PyUnicode_InternInPlace(&v);
    return v;
}

static PyObject *meta(PyObject *self, PyObject *entries) {
    if (!PyList_Check(entries) || PyList_GET_SIZE(entries) == 0)
        return PyErr_Format(PyExc_TypeError, "meta: a non-empty list of structs");
    MetaTable *t = PyMem_Calloc(1, sizeof(MetaTable));
    if (!t) return PyErr_NoMemory();
    PyObject *capsule = PyCapsule_New(t, "kafka.meta_table", meta_free);
    if (!capsule) {
        PyMem_Free(t);
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(entries);
    if (!(t->structs = PyMem_Calloc(n, sizeof(MetaStruct)))) {
        PyErr_NoMemory();
        goto fail;
    }
    t->n = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *topic, *topics, *topic_id, *partition, *error, *kids;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(entries, i), "OOOOOO!", &topic, &topics, &topic_id, &partition, &error,
                              &PyList_Type, &kids))
            goto fail;
        MetaStruct *m = &t->structs[i];
        if ((topic != Py_None && !PyUnicode_Check(topic)) || (topics != Py_None && !PyUnicode_Check(topics)) ||
            (topic_id != Py_None && !PyUnicode_Check(topic_id)) ||
            (partition != Py_None && !PyUnicode_Check(partition)) || (error != Py_None && !PyUnicode_Check(error))) {
            PyErr_SetString(PyExc_TypeError, "meta: field names are str or None");
            goto fail;
        }
        m->topic = name_or_null(topic);
        m->topics = name_or_null(topics);
        m->topic_id = name_or_null(topic_id);
        m->partition = name_or_null(partition);
        m->error = name_or_null(error);
        m->n_children = PyList_GET_SIZE(kids);
        if (!(m->children = PyMem_Calloc(m->n_children ? m->n_children : 1, sizeof(MetaChild)))) {
            PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t j = 0; j < m->n_children; j++) {
            MetaChild *c = &m->children[j];
            PyObject *name;
            if (!PyArg_ParseTuple(PyList_GET_ITEM(kids, j), "Unp", &name, &c->entry, &c->is_array)) goto fail;
            if (c->entry < 0 || c->entry >= n) {
                PyErr_SetString(PyExc_ValueError, "meta: a child entry out of range");
                goto fail;
            }
            c->name = name_or_null(name);
        }
    }
    return capsule;
fail:
    Py_DECREF(capsule);
    return NULL;
}

typedef struct {
    PyObject *topics, *topic_ids, *partition, *top_error, *nested_error; /* partition..: borrowed */
    int any_error;
} Summary;

/* v appended to `list` when v is true and not in it yet. */
static int add_new(PyObject *list, PyObject *v) {
    int t = PyObject_IsTrue(v);
    if (t <= 0) return t;
    int in = PySequence_Contains(list, v);
    if (in) return in < 0 ? -1 : 0;
    return PyList_Append(list, v);
}

/* d.get(name) as a borrowed reference, NULL when absent (or an error: check PyErr_Occurred). */
static PyObject *get(PyObject *d, PyObject *name) { return name ? PyDict_GetItemWithError(d, name) : NULL; }

static int walk(const MetaTable *t, Py_ssize_t index, PyObject *d, Summary *out, int depth) {
    const MetaStruct *m = &t->structs[index];
    PyObject *v;
    if (!PyDict_Check(d)) {
        PyErr_Format(PyExc_TypeError, "summary: a struct that is not a dict (%.50s)", Py_TYPE(d)->tp_name);
        return -1;
    }
    if (m->topic && (v = get(d, m->topic)) && add_new(out->topics, v)) return -1;
    if (m->topics && (v = get(d, m->topics))) {
        int truth = PyObject_IsTrue(v);
        if (truth < 0) return -1;
        if (truth) {
            PyObject *seq = PySequence_Fast(v, "summary: topic names are not a list");
            if (!seq) return -1;
            for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++)
                if (add_new(out->topics, PySequence_Fast_GET_ITEM(seq, i))) {
                    Py_DECREF(seq);
                    return -1;
                }
            Py_DECREF(seq);
        }
    }
    if (m->topic_id && (v = get(d, m->topic_id)) && add_new(out->topic_ids, v)) return -1;
    if (m->partition && out->partition == Py_None && (m->topic || m->topic_id || depth > 1) &&
        (v = get(d, m->partition)))
        out->partition = v;
    if (m->error && (v = get(d, m->error)) && v != Py_None) {
        if (depth == 0) {
            out->top_error = v;
        } else {
            out->any_error = 1;
            if (out->nested_error == Py_None) {
                PyObject *zero = PyLong_FromLong(0);
                int nz = zero ? PyObject_RichCompareBool(v, zero, Py_NE) : -1;
                Py_XDECREF(zero);
                if (nz < 0) return -1;
                if (nz) out->nested_error = v;
            }
        }
    }
    if (PyErr_Occurred()) return -1;
    for (Py_ssize_t j = 0; j < m->n_children; j++) {
        const MetaChild *c = &m->children[j];
        if (!(v = get(d, c->name))) {
            if (PyErr_Occurred()) return -1;
            continue;
        }
        int truth = PyObject_IsTrue(v);
        if (truth <= 0) {
            if (truth < 0) return -1;
            continue;
        }
        if (!c->is_array) {
            if (walk(t, c->entry, v, out, depth + 1)) return -1;
            continue;
        }
        PyObject *seq = PySequence_Fast(v, "summary: an array that is not a list");
        if (!seq) return -1;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++)
            if (walk(t, c->entry, PySequence_Fast_GET_ITEM(seq, i), out, depth + 1)) {
                Py_DECREF(seq);
                return -1;
            }
        Py_DECREF(seq);
    }
    return 0;
}

static PyObject *summary(PyObject *self, PyObject *args) {
    PyObject *capsule, *d;
    if (!PyArg_ParseTuple(args, "OO", &capsule, &d)) return NULL;
    MetaTable *t = PyCapsule_GetPointer(capsule, "kafka.meta_table");
    if (!t) return NULL;
    Summary out = {PyList_New(0), PyList_New(0), Py_None, Py_None, Py_None, 0};
    PyObject *r = NULL;
    if (out.topics && out.topic_ids && !walk(t, 0, d, &out, 0))
        /* partition and the errors are borrowed from d, which outlives this call */
        r = Py_BuildValue("(OOOOOO)", out.topics, out.topic_ids, out.partition, out.top_error, out.nested_error,
                          out.any_error ? Py_True : Py_False);
    Py_XDECREF(out.topics);
    Py_XDECREF(out.topic_ids);
    return r;
}

static PyMethodDef methods[] = {
    {"table", table, METH_VARARGS, "The field table of one plan's structs (see the module)."},
    {"read", read_body, METH_VARARGS, "A body read by a table: (dict, end), or None for the Python reader."},
    {"cleaner", cleaner, METH_VARARGS, "What clean() redacts and summarizes, and how (see clean)."},
    {"clean", clean, METH_VARARGS, "The details copy of a decoded body (rows.clean)."},
    {"meta", meta, METH_O, "What summary() collects of a plan's structs (see summary)."},
    {"summary", summary, METH_VARARGS, "A decoded body's topics, partition and error codes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_body", NULL, -1, methods};

PyMODINIT_FUNC PyInit__body(void) {
    S_BASE64 = PyUnicode_InternFromString("base64");
    S_UNKNOWN = PyUnicode_InternFromString("_unknown_tagged_fields");
    S_VALUE = PyUnicode_InternFromString("Value");
    S_NAME = PyUnicode_InternFromString("Name");
    S_IS_SENSITIVE = PyUnicode_InternFromString("IsSensitive");
    if (!S_BASE64 || !S_UNKNOWN || !S_VALUE || !S_NAME || !S_IS_SENSITIVE) return NULL;
    return PyModule_Create(&module);
}
