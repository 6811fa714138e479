/* TubeMQ's per-frame work: the blocks of a frame joined, the RPC envelope around the method's
 * message, the message itself (body, by a table of its fields), the sizes of the whole frames a
 * chunk starts with (split), all three of a frame in one call (read), split and read of a chunk's
 * whole frames together (read_all), and what the rows take of
 * produced and delivered messages (message, columns). Each is described above its function.
 *
 * frame(data): a whole frame (framing.py, big-endian)
 *
 *   msgToken u32 | serialNo u32 | listSize i32 | listSize x [length i32 | length bytes]
 *
 * -> (serial, [block lengths], joined block data); None where a block length is negative (the
 * rules that sized the frame never pass one; framing.read_frame reads what is left).
 *
 * envelope(body): the joined data, protobuf messages each prefixed with its length as a varint
 * (rpc.py):
 *
 *   request  (RpcConnHeader.flag != 1): RpcConnHeader | RequestHeader | RequestBody
 *   response (RpcConnHeader.flag == 1): RpcConnHeader | ResponseHeader | RspResponseBody
 *
 *   RpcConnHeader: 1 flag int32, 2 traceId int64, 3 spanId int64, 4 parentId int64
 *   RequestHeader: 1 serviceType int32, 2 protocolVer int32
 *   RequestBody: 1 method int32, 2 timeout int64, 3 request bytes
 *   ResponseHeader: 1 status (enum 0..2), 2 serviceType int32, 3 protocolVer int32
 *   RspResponseBody: 1 method int32, 2 data bytes
 *
 * -> (flag, conn_header, service_type, protocol_ver, method_id, timeout, status, body, trailing):
 * None for each field not on the wire (a response's status: 0; a request has none), conn_header {name: value} of the
 * RpcConnHeader fields present in field-number order (rpc.message_to_dict), body the method's
 * message bytes, trailing the bytes after the envelope.
 *
 * Anything rpc.decode_envelope reads another way returns None, and the caller runs it, which
 * says what is wrong: a length or varint cut short or malformed, a known field with another
 * wire type, a group, an int32 value beyond 32 bits, a status outside the enum, a message field
 * number 0, a tag or length of more than five bytes or past 32 bits, and an error response
 * (RspExceptionBody: its strings).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../arrowbuf.h" /* Buf, put_decimal */
#include "../jsontext.h" /* json_put_str */
#include "../pbwire.h"   /* varint, varint32, skip */

#define HEADER_LEN 12 /* msgToken, serialNo, listSize */
#define FLAG_RESPONSE 1
#define MAX_STATUS 2 /* ResponseHeader.Status: SUCCESS 0, ERROR 1, FATAL 2 */

static uint32_t u32be(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* The fields of one message: their kinds by field number, what was read of each. */
enum { ABSENT, INT32, INT64, ENUM, BYTES };
#define MAX_FIELDS 5

typedef struct {
    int kind[MAX_FIELDS];             /* by field number (index 0 unused) */
    int seen[MAX_FIELDS];
    int64_t value[MAX_FIELDS];        /* INT32, INT64, ENUM */
    const unsigned char *s[MAX_FIELDS]; /* BYTES */
    Py_ssize_t n[MAX_FIELDS];
} Msg;

/* The message of `len` bytes at [p, end): 0, or -1 where it is not read as rpc.py reads it, or
 * is not as a client writes it (rpc.read_envelope says why: pbcheck.py): a field out of
 * field-number order or given twice, an unknown field, a varint longer than its value needs. */
static int message(const unsigned char *p, const unsigned char *end, Msg *m) {
    uint64_t prev = 0;
    while (p < end) {
        uint64_t tag, v;
        const unsigned char *at = p;
        if (varint32(&p, end, &tag) || tag >> 3 == 0 || !minimal(at, p)) return -1;
        uint64_t field = tag >> 3;
        int wt = (int)(tag & 7);
        int kind = field < MAX_FIELDS ? m->kind[field] : ABSENT;
        if (kind == ABSENT || field <= prev) return -1;
        prev = field;
        at = p;
        if (kind == BYTES) {
            if (wt != 2 || varint32(&p, end, &v) || v > (uint64_t)(end - p) || !minimal(at, p)) return -1;
            m->s[field] = p;
            m->n[field] = (Py_ssize_t)v;
            p += v;
        } else {
            if (wt != 0 || varint(&p, end, &v) || !minimal(at, p)) return -1;
            if (kind == INT64) {
                m->value[field] = (int64_t)v;
            } else {
                int64_t x = (int64_t)v;
                if (x < INT32_MIN || x > INT32_MAX) return -1; /* as int32, truncated: left to protobuf */
                if (kind == ENUM && (x < 0 || x > MAX_STATUS)) return -1;
                m->value[field] = x;
            }
        }
        m->seen[field] = 1;
    }
    return 0;
}

/* One varint-length-prefixed message at *pos of [b, b + n): 0 and *pos past it, or -1. */
static int delimited(const unsigned char *b, Py_ssize_t n, Py_ssize_t *pos, Msg *m) {
    const unsigned char *p = b + *pos, *end = b + n;
    uint64_t len;
    if (varint32(&p, end, &len) || len > (uint64_t)(end - p) || !minimal(b + *pos, p)) return -1;
    if (message(p, p + len, m)) return -1;
    *pos = (p - b) + (Py_ssize_t)len;
    return 0;
}

/* RpcConnHeader's field names by number, interned once (PyInit__rpc) */
static PyObject *conn_names[5];

static PyObject *int_or_none(const Msg *m, int field) {
    if (!m->seen[field]) Py_RETURN_NONE;
    return PyLong_FromLongLong(m->value[field]);
}

static PyObject *bytes_or_none(const Msg *m, int field) {
    if (!m->seen[field]) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)m->s[field], m->n[field]);
}

/* envelope() of the n bytes at b. */
static PyObject *envelope_at(const unsigned char *b, Py_ssize_t n) {
    Py_ssize_t pos = 0;
    PyObject *result = NULL, *conn = NULL;
    Msg head = {.kind = {ABSENT, INT32, INT64, INT64, INT64}};
    Msg rh = {0}, rb = {0};
    if (delimited(b, n, &pos, &head)) goto not_plain;
    int is_request = !(head.seen[1] && head.value[1] == FLAG_RESPONSE);
    if (is_request) {
        rh = (Msg){.kind = {ABSENT, INT32, INT32}};
        rb = (Msg){.kind = {ABSENT, INT32, INT64, BYTES}};
    } else {
        rh = (Msg){.kind = {ABSENT, ENUM, INT32, INT32}};
        rb = (Msg){.kind = {ABSENT, INT32, BYTES}};
    }
    if (delimited(b, n, &pos, &rh)) goto not_plain;
    int status = is_request || !rh.seen[1] ? 0 : (int)rh.value[1];
    if (status != 0) goto not_plain; /* an exception body: rpc.decode_envelope reads its strings */
    if (delimited(b, n, &pos, &rb)) goto not_plain;
    if (!(conn = PyDict_New())) goto done;
    for (int f = 1; f <= 4; f++) {
        if (!head.seen[f]) continue;
        PyObject *v = PyLong_FromLongLong(head.value[f]);
        if (!v || PyDict_SetItem(conn, conn_names[f], v)) {
            Py_XDECREF(v);
            goto done;
        }
        Py_DECREF(v);
    }
    /* request: serviceType @1, protocolVer @2; timeout @2, body @3. response: @2, @3; body @2 */
    int st = is_request ? 1 : 2, pv = is_request ? 2 : 3, body = is_request ? 3 : 2;
    /* a request has no status (None); a response's is 0 here */
    PyObject *items[9] = {int_or_none(&head, 1), Py_NewRef(conn), int_or_none(&rh, st), int_or_none(&rh, pv),
                          int_or_none(&rb, 1), is_request ? int_or_none(&rb, 2) : Py_NewRef(Py_None),
                          is_request ? Py_NewRef(Py_None) : PyLong_FromLong(status), bytes_or_none(&rb, body),
                          PyLong_FromSsize_t(n - pos)};
    int ok = 1;
    for (int i = 0; i < 9; i++) ok &= items[i] != NULL;
    if (ok && (result = PyTuple_New(9)))
        for (int i = 0; i < 9; i++) PyTuple_SET_ITEM(result, i, items[i]);
    else
        for (int i = 0; i < 9; i++) Py_XDECREF(items[i]);
    goto done;
not_plain:
    result = Py_None;
    Py_INCREF(result);
done:
    Py_XDECREF(conn);
    return result;
}

static PyObject *envelope(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    PyObject *result = envelope_at(buf.buf, buf.len);
    PyBuffer_Release(&buf);
    return result;
}

/* frame() of the n bytes at b. */
static PyObject *frame_at(const unsigned char *b, Py_ssize_t n) {
    Py_ssize_t pos = HEADER_LEN, total = 0, count = 0;
    PyObject *result = NULL, *sizes = NULL, *body = NULL;
    if (n < HEADER_LEN) goto not_plain;
    int32_t list_size = (int32_t)u32be(b + 8);
    /* framing.blocks: the whole blocks, up to listSize of them */
    while (count < list_size && n - pos >= 4) {
        int32_t len = (int32_t)u32be(b + pos);
        if (len < 0) goto not_plain;
        if (len > n - pos - 4) break;
        total += len;
        pos += 4 + len;
        count++;
    }
    if (!(sizes = PyList_New(count)) || !(body = PyBytes_FromStringAndSize(NULL, total))) goto done;
    char *out = PyBytes_AS_STRING(body);
    pos = HEADER_LEN;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t len = (Py_ssize_t)u32be(b + pos);
        PyObject *v = PyLong_FromSsize_t(len);
        if (!v) goto done;
        PyList_SET_ITEM(sizes, i, v);
        memcpy(out, b + pos + 4, len);
        out += len;
        pos += 4 + len;
    }
    result = Py_BuildValue("(kOO)", (unsigned long)u32be(b + 4), sizes, body);
    goto done;
not_plain:
    result = Py_None;
    Py_INCREF(result);
done:
    Py_XDECREF(sizes);
    Py_XDECREF(body);
    return result;
}

static PyObject *frame(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    PyObject *result = frame_at(buf.buf, buf.len);
    PyBuffer_Release(&buf);
    return result;
}

/* ---------------------------------------------------------------------------------------------
 * body(data, schema, index): a method's message read by a table of its fields (schema(spec), made
 * once by rpc.py from the generated descriptors of protos/tubemq, the declaration of every field).
 *
 * spec: a list of messages, each a list of (field number, name, kind) sorted by field number;
 * kind = K_INT32 | K_INT64 | K_BOOL | K_STRING | K_BYTES | K_MESSAGE + 8 x (nested message's
 * index), plus F_REPEATED (strings and messages only), F_SECRET (a credential: its value
 * becomes "<redacted N bytes>", N the length of its text, as rpc._secret writes it) and F_SIZED
 * (a payload: kept whole here, shown by its size in `details`: json_body).
 *
 * -> {name: value} of the fields set, in field-number order, as rpc.message_to_dict gives them but
 * with bytes kept whole (rpc.py turns payload fields into their size for `details`): int32 and
 * int64 as int, bool, string as str, bytes, a nested message as such a dict, repeated fields as
 * lists. None wherever protobuf would read the bytes another way, or fail, and then reads them:
 * a cut or malformed tag, varint or length, a group, a known field with another wire type, an
 * int32 beyond 32 bits, a string that is not UTF-8, field number 0, messages nested deeper than
 * MAX_DEPTH; and wherever the message is not as a client writes it (rpc.damaged then keeps none
 * of it: pbcheck.py): an unknown field, a field out of field-number order or a singular one
 * given twice, a varint longer than its value needs, a bool above 1, a string with control
 * characters. */

enum { K_INT32, K_INT64, K_BOOL, K_STRING, K_BYTES, K_MESSAGE };
#define K_MASK 7
#define F_REPEATED 0x10000
#define F_SECRET 0x20000
#define F_SIZED 0x40000 /* a payload field (rpc.PAYLOAD_FIELDS): `details` shows its size (rpc.sized) */
#define K_SUB(kind) (((kind) & 0xFFFF) >> 3)
#define MAX_DEPTH 16
#define NOT_PLAIN (-1) /* left to protobuf */
#define PY_ERROR (-2)  /* a Python exception is set */

typedef struct {
    uint32_t number;
    int kind;
    PyObject *name;
    char *key; /* `"name":`, the field's key in `details` JSON (json_body) */
    Py_ssize_t key_len;
} FieldSpec;

typedef struct {
    Py_ssize_t n;
    FieldSpec *fields;
} MsgSpec;

typedef struct {
    Py_ssize_t n;
    MsgSpec *msgs;
} Schema;

static void schema_free(PyObject *capsule) {
    Schema *s = PyCapsule_GetPointer(capsule, "tubemq.schema");
    if (!s) return;
    for (Py_ssize_t i = 0; i < s->n; i++) {
        for (Py_ssize_t j = 0; j < s->msgs[i].n; j++) {
            Py_XDECREF(s->msgs[i].fields[j].name);
            PyMem_Free(s->msgs[i].fields[j].key);
        }
        PyMem_Free(s->msgs[i].fields);
    }
    PyMem_Free(s->msgs);
    PyMem_Free(s);
}

/* A capsule named `name` owning `size` zeroed bytes (*out), freed by `destructor`; NULL on error. */
static PyObject *owned_capsule(size_t size, const char *name, PyCapsule_Destructor destructor, void **out) {
    void *p = *out = PyMem_Calloc(1, size);
    if (!p) return PyErr_NoMemory();
    PyObject *capsule = PyCapsule_New(p, name, destructor);
    if (!capsule) PyMem_Free(p);
    return capsule;
}

static PyObject *schema(PyObject *self, PyObject *spec) {
    if (!PyList_Check(spec)) return PyErr_Format(PyExc_TypeError, "schema: a list of messages");
    Schema *s = NULL;
    PyObject *capsule = owned_capsule(sizeof(Schema), "tubemq.schema", schema_free, (void **)&s);
    if (!capsule) return NULL;
    Py_ssize_t nm = PyList_GET_SIZE(spec);
    if (!(s->msgs = PyMem_Calloc(nm ? nm : 1, sizeof(MsgSpec)))) goto nomem;
    s->n = nm;
    for (Py_ssize_t i = 0; i < nm; i++) {
        PyObject *fields = PyList_GET_ITEM(spec, i);
        if (!PyList_Check(fields)) goto bad;
        Py_ssize_t nf = PyList_GET_SIZE(fields);
        if (!(s->msgs[i].fields = PyMem_Calloc(nf ? nf : 1, sizeof(FieldSpec)))) goto nomem;
        s->msgs[i].n = nf;
        for (Py_ssize_t j = 0; j < nf; j++) {
            FieldSpec *f = &s->msgs[i].fields[j];
            unsigned long number;
            int kind;
            PyObject *name;
            if (!PyArg_ParseTuple(PyList_GET_ITEM(fields, j), "kUi", &number, &name, &kind)) goto fail;
            if ((kind & K_MASK) == K_MESSAGE && K_SUB(kind) >= nm) goto bad;
            f->number = (uint32_t)number;
            f->kind = kind;
            Py_INCREF(name);
            f->name = name;
            Py_ssize_t n;
            const char *u = PyUnicode_AsUTF8AndSize(name, &n);
            if (!u) goto fail;
            for (Py_ssize_t c = 0; c < n; c++) /* a protobuf field name: letters, digits, '_' */
                if (!(u[c] == '_' || (u[c] >= '0' && u[c] <= '9') || ((u[c] | 0x20) >= 'a' && (u[c] | 0x20) <= 'z')))
                    goto bad;
            if (!(f->key = PyMem_Malloc(n + 3))) goto nomem;
            f->key[0] = '"';
            memcpy(f->key + 1, u, n);
            f->key[n + 1] = '"';
            f->key[n + 2] = ':';
            f->key_len = n + 3;
        }
    }
    return capsule;
nomem:
    PyErr_NoMemory();
    goto fail;
bad:
    PyErr_SetString(PyExc_ValueError, "schema: a message entry is not a list of (number, name, kind) with a protobuf field name");
fail:
    Py_DECREF(capsule);
    return NULL;
}

/* A secret's replacement: the length of its text (characters of a string, digits of a number). */
/* What a secret's value becomes: "<redacted N bytes>" (base.redacted); the texts of the sizes
 * tokens have (under REDACTED_KEPT) made once and shared. */
#define REDACTED_KEPT 256
static PyObject *redacted_texts[REDACTED_KEPT];

static PyObject *redacted(Py_ssize_t n) {
    if (n < 0 || n >= REDACTED_KEPT) return PyUnicode_FromFormat("<redacted %zd bytes>", n);
    if (!redacted_texts[n] && !(redacted_texts[n] = PyUnicode_FromFormat("<redacted %zd bytes>", n))) return NULL;
    return Py_NewRef(redacted_texts[n]);
}

static int read_message(const Schema *s, Py_ssize_t index, const unsigned char *p, const unsigned char *end,
                        int depth, PyObject **out);

/* One field's value at *p (its tag read): a new reference in *v, or NOT_PLAIN / PY_ERROR. */
static int field_value(const Schema *s, const FieldSpec *f, int wt, const unsigned char **p,
                       const unsigned char *end, int depth, PyObject **v) {
    int kind = f->kind & K_MASK;
    uint64_t x;
    *v = NULL;
    const unsigned char *start = *p;
    if (kind == K_INT32 || kind == K_INT64 || kind == K_BOOL) {
        if (wt != 0 || varint(p, end, &x) || !minimal(start, *p)) return NOT_PLAIN;
        int64_t i = (int64_t)x;
        if (kind == K_INT32 && (i < INT32_MIN || i > INT32_MAX)) return NOT_PLAIN;
        if (kind == K_BOOL && x > 1) return NOT_PLAIN; /* protobuf writes it back as 1 */
        if (kind == K_BOOL) {
            *v = PyBool_FromLong(x != 0);
        } else if (f->kind & F_SECRET) {
            char digits[24];
            *v = redacted(snprintf(digits, sizeof digits, "%lld", (long long)i));
        } else {
            *v = PyLong_FromLongLong(i);
        }
        return *v ? 0 : PY_ERROR;
    }
    if (wt != 2 || varint32(p, end, &x) || x > (uint64_t)(end - *p) || !minimal(start, *p)) return NOT_PLAIN;
    const unsigned char *at = *p;
    *p += x;
    if (kind == K_MESSAGE) return read_message(s, K_SUB(f->kind), at, at + x, depth + 1, v);
    if (kind == K_BYTES) {
        *v = (f->kind & F_SECRET) ? redacted((Py_ssize_t)x) : PyBytes_FromStringAndSize((const char *)at, x);
        return *v ? 0 : PY_ERROR;
    }
    for (uint64_t k = 0; k < x; k++)
        if (at[k] < 0x20 || at[k] == 0x7f) return NOT_PLAIN; /* tags and lengths in it: pbcheck.odd_values */
    PyObject *str = PyUnicode_DecodeUTF8((const char *)at, (Py_ssize_t)x, NULL);
    if (!str) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return PY_ERROR;
        PyErr_Clear();
        return NOT_PLAIN; /* protobuf hands it over as bytes */
    }
    if (f->kind & F_SECRET) {
        *v = redacted(PyUnicode_GET_LENGTH(str));
        Py_DECREF(str);
        return *v ? 0 : PY_ERROR;
    }
    *v = str;
    return 0;
}

#define MAX_MSG_FIELDS 64

/* The message of schema entry `index` at [p, end) as a dict in *out, or NOT_PLAIN / PY_ERROR. */
static int read_message(const Schema *s, Py_ssize_t index, const unsigned char *p, const unsigned char *end,
                        int depth, PyObject **out) {
    const MsgSpec *m = &s->msgs[index];
    PyObject *slot[MAX_MSG_FIELDS] = {0};
    int rc = 0;
    *out = NULL;
    if (depth > MAX_DEPTH || m->n > MAX_MSG_FIELDS) return NOT_PLAIN;
    uint32_t prev = 0;
    while (p < end) {
        uint64_t tag;
        const unsigned char *at = p;
        if (varint32(&p, end, &tag) || tag >> 3 == 0 || !minimal(at, p)) {
            rc = NOT_PLAIN;
            goto done;
        }
        uint32_t number = (uint32_t)(tag >> 3);
        int wt = (int)(tag & 7);
        Py_ssize_t j = 0;
        while (j < m->n && m->fields[j].number != number) j++;
        /* not as a client writes it (pbcheck.damage decides): an unknown field, one out of
         * field-number order, a singular one given twice */
        if (j == m->n || number < prev || (number == prev && !(m->fields[j].kind & F_REPEATED))) {
            rc = NOT_PLAIN;
            goto done;
        }
        prev = number;
        const FieldSpec *f = &m->fields[j];
        PyObject *v;
        if ((rc = field_value(s, f, wt, &p, end, depth, &v))) goto done;
        if (f->kind & F_REPEATED) {
            if (!slot[j] && !(slot[j] = PyList_New(0))) {
                Py_DECREF(v);
                rc = PY_ERROR;
                goto done;
            }
            rc = PyList_Append(slot[j], v) ? PY_ERROR : 0;
            Py_DECREF(v);
            if (rc) goto done;
        } else {
            Py_XSETREF(slot[j], v); /* given once: the order check above */
        }
    }
    if (!(*out = PyDict_New())) {
        rc = PY_ERROR;
        goto done;
    }
    for (Py_ssize_t j = 0; j < m->n; j++) {
        if (slot[j] && PyDict_SetItem(*out, m->fields[j].name, slot[j])) {
            Py_CLEAR(*out);
            rc = PY_ERROR;
            goto done;
        }
    }
done:
    for (Py_ssize_t j = 0; j < m->n && j < MAX_MSG_FIELDS; j++) Py_XDECREF(slot[j]);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * `details` JSON as base.to_json writes it (json's C encoder: ensure_ascii off, separators "," and
 * ":"), for read(): a frame's head and its body written here once, not a dict per frame encoded in
 * Python.
 *
 *   head: {"serial":S,"blocks":[n,...],"flag":F,"rpc_header":{"flag":..,"traceId":..}   (left open)
 *   body: the body's dict (read_message) as rpc.sized shows it: payload bytes (F_SIZED) as
 *         {"size":N}, nested messages as objects, repeated fields as arrays
 *
 * Strings are escaped as json.encoder.encode_basestring escapes them (jsontext.h). A value of
 * another type (bytes that are not a payload) gives NOT_PLAIN: to_json writes that body. */

#define JSON_NOMEM (-3) /* no memory: the caller raises MemoryError */

static int put_text(Buf *b, const char *s) { return buf_put(b, s, (Py_ssize_t)strlen(s)) ? JSON_NOMEM : 0; }

static int json_str(Buf *b, PyObject *s) {
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (!u) {
        PyErr_Clear(); /* a lone surrogate: not from read_message's strict UTF-8, left to to_json */
        return NOT_PLAIN;
    }
    return json_put_str(b, u, n) ? JSON_NOMEM : 0;
}

static int json_long(Buf *b, PyObject *v) {
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) return PY_ERROR;
    if (overflow) return NOT_PLAIN; /* not an int64: none of read_message's */
    if (buf_reserve(b, 21)) return JSON_NOMEM;
    b->len += put_decimal(b->p + b->len, x);
    return 0;
}

static int json_body(const Schema *s, Py_ssize_t index, PyObject *dict, Buf *b, int depth);

/* One value of field `f` as read_message gave it. */
static int json_field(const Schema *s, const FieldSpec *f, PyObject *v, Buf *b, int depth) {
    if (PyUnicode_CheckExact(v)) return json_str(b, v);
    if (PyBool_Check(v)) return put_text(b, v == Py_True ? "true" : "false");
    if (PyLong_CheckExact(v)) return json_long(b, v);
    if (PyDict_CheckExact(v) && (f->kind & K_MASK) == K_MESSAGE) return json_body(s, K_SUB(f->kind), v, b, depth + 1);
    if (PyBytes_CheckExact(v) && (f->kind & F_SIZED)) {
        int rc = put_text(b, "{\"size\":");
        if (rc || buf_reserve(b, 22)) return JSON_NOMEM;
        b->len += put_decimal(b->p + b->len, PyBytes_GET_SIZE(v));
        b->p[b->len++] = '}';
        return 0;
    }
    return NOT_PLAIN;
}

/* The dict of schema entry `index` (read_message's: its keys in field-number order). */
static int json_body(const Schema *s, Py_ssize_t index, PyObject *dict, Buf *b, int depth) {
    const MsgSpec *m = &s->msgs[index];
    int rc, first = 1;
    if (depth > MAX_DEPTH) return NOT_PLAIN;
    if ((rc = put_text(b, "{"))) return rc;
    for (Py_ssize_t j = 0; j < m->n; j++) {
        const FieldSpec *f = &m->fields[j];
        PyObject *v = PyDict_GetItemWithError(dict, f->name);
        if (!v) {
            if (PyErr_Occurred()) return PY_ERROR;
            continue;
        }
        if (!first && (rc = put_text(b, ","))) return rc;
        if (buf_put(b, f->key, f->key_len)) return JSON_NOMEM;
        first = 0;
        if (!(f->kind & F_REPEATED)) {
            if ((rc = json_field(s, f, v, b, depth))) return rc;
            continue;
        }
        if (!PyList_CheckExact(v)) return NOT_PLAIN;
        if ((rc = put_text(b, "["))) return rc;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++)
            if ((i && (rc = put_text(b, ","))) || (rc = json_field(s, f, PyList_GET_ITEM(v, i), b, depth))) return rc;
        if ((rc = put_text(b, "]"))) return rc;
    }
    return put_text(b, "}");
}

/* The head: the frame's serial and block lengths, the RpcConnHeader's flag and fields (ints). */
static int json_head(Buf *b, PyObject *serial, PyObject *sizes, PyObject *flag, PyObject *conn) {
    int rc;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    if ((rc = put_text(b, "{\"serial\":")) || (rc = json_long(b, serial)) || (rc = put_text(b, ",\"blocks\":[")))
        return rc;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(sizes); i++)
        if ((i && (rc = put_text(b, ","))) || (rc = json_long(b, PyList_GET_ITEM(sizes, i)))) return rc;
    if ((rc = put_text(b, "],\"flag\":")) || (rc = flag == Py_None ? put_text(b, "null") : json_long(b, flag)) ||
        (rc = put_text(b, ",\"rpc_header\":{")))
        return rc;
    for (int first = 1; PyDict_Next(conn, &pos, &k, &v); first = 0)
        if ((!first && (rc = put_text(b, ","))) || (rc = json_str(b, k)) || (rc = put_text(b, ":")) ||
            (rc = json_long(b, v)))
            return rc;
    return put_text(b, "}");
}

/* The text of what a writer wrote (rc 0), None (NOT_PLAIN) or NULL with an exception set. */
static PyObject *json_text(Buf *b, int rc) {
    PyObject *out = NULL;
    if (rc == 0) out = PyUnicode_DecodeUTF8(b->p, b->len, NULL);
    else if (rc == NOT_PLAIN) out = Py_NewRef(Py_None);
    else if (rc == JSON_NOMEM) PyErr_NoMemory();
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
    return out;
}

static PyObject *body(PyObject *self, PyObject *args) {
    Py_buffer buf;
    PyObject *capsule, *out = NULL;
    Py_ssize_t index;
    if (!PyArg_ParseTuple(args, "y*On", &buf, &capsule, &index)) return NULL;
    Schema *s = PyCapsule_GetPointer(capsule, "tubemq.schema");
    if (!s) goto error;
    if (index < 0 || index >= s->n) {
        PyErr_SetString(PyExc_IndexError, "body: no such message in the schema");
        goto error;
    }
    const unsigned char *b = buf.buf;
    int rc = read_message(s, index, b, b + buf.len, 0, &out);
    PyBuffer_Release(&buf);
    if (rc == PY_ERROR) return NULL;
    if (rc == NOT_PLAIN) Py_RETURN_NONE;
    return out;
error:
    PyBuffer_Release(&buf);
    return NULL;
}

/* body_json(values, schema, index): the `details` JSON of a body's dict as body() gives it (what
 * read() writes; to_json(rpc.sized(values, ...)) gives the same text), or None (see json_body). */
static PyObject *body_json(PyObject *self, PyObject *args) {
    PyObject *dict, *capsule;
    Py_ssize_t index;
    if (!PyArg_ParseTuple(args, "O!On", &PyDict_Type, &dict, &capsule, &index)) return NULL;
    Schema *s = PyCapsule_GetPointer(capsule, "tubemq.schema");
    if (!s) return NULL;
    if (index < 0 || index >= s->n) return PyErr_Format(PyExc_IndexError, "body_json: no such message in the schema");
    Buf b = {0};
    return json_text(&b, json_body(s, index, dict, &b, 0));
}

/* ---------------------------------------------------------------------------------------------
 * message(data, flag): a message's data (SendMessageRequestP2B.data, TransferedMessage.payLoadData)
 * split as content.split_payload splits it and its attributes read as content.parse_attributes
 * reads them. When flag bit 0 (FLAG_HAS_ATTRIBUTE) is set the data is
 *
 *   attribute length i32 (big-endian) | attribute text (UTF-8, `k1=v1,k2=v2`) | payload
 *
 * -> (attribute text or None, payload, error or None, [{"key": k, "value": v as UTF-8 bytes}]):
 * the text decoded with bad bytes escaped (backslashreplace), empty items skipped, an item
 * without `=` a key with an empty value. */

#define FLAG_HAS_ATTRIBUTE 0x01

static PyObject *header_key, *header_value, *comma; /* "key", "value", "," */

static PyObject *headers_of(PyObject *attr) {
    PyObject *items = PyUnicode_Split(attr, comma, -1), *out = NULL;
    if (!items || !(out = PyList_New(0))) goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i), *k = NULL, *v = NULL, *h = NULL;
        Py_ssize_t n = PyUnicode_GET_LENGTH(item);
        if (!n) continue;
        Py_ssize_t eq = PyUnicode_FindChar(item, '=', 0, n, 1);
        if (eq == -2) goto fail;
        if (eq < 0) {
            k = Py_NewRef(item);
            v = PyBytes_FromStringAndSize("", 0);
        } else {
            PyObject *rest = PyUnicode_Substring(item, eq + 1, n);
            k = PyUnicode_Substring(item, 0, eq);
            v = rest ? PyUnicode_AsUTF8String(rest) : NULL;
            Py_XDECREF(rest);
        }
        int bad = !k || !v || !(h = PyDict_New()) || PyDict_SetItem(h, header_key, k) ||
                  PyDict_SetItem(h, header_value, v) || PyList_Append(out, h);
        Py_XDECREF(k);
        Py_XDECREF(v);
        Py_XDECREF(h);
        if (bad) goto fail;
    }
    Py_DECREF(items);
    return out;
fail:
    Py_XDECREF(items);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *parts_of(PyObject *data, PyObject *flag) {
    Py_buffer buf;
    if (flag == Py_None) return Py_BuildValue("(OOO[])", Py_None, data, Py_None);
    unsigned long long f = PyLong_AsUnsignedLongLongMask(flag); /* the low bits, as `flag & 1` reads them */
    if (f == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    if (!(f & FLAG_HAS_ATTRIBUTE)) return Py_BuildValue("(OOO[])", Py_None, data, Py_None);
    if (PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE)) return NULL;
    const unsigned char *b = buf.buf;
    Py_ssize_t len = buf.len;
    PyObject *result = NULL;
    if (len < 4) {
        result = Py_BuildValue("(OON[])", Py_None, data,
                               PyUnicode_FromFormat("flag says attributes follow but data is only %zd bytes", len));
    } else {
        int32_t n = (int32_t)u32be(b);
        if (n < 0 || n > len - 4) {
            result = Py_BuildValue("(OON[])", Py_None, data,
                                   PyUnicode_FromFormat("attribute length %d outside 0..%zd", (int)n, len - 4));
        } else {
            PyObject *attr = PyUnicode_DecodeUTF8((const char *)b + 4, n, "backslashreplace");
            PyObject *headers = attr ? headers_of(attr) : NULL;
            PyObject *payload = PyBytes_FromStringAndSize((const char *)b + 4 + n, len - 4 - n);
            if (attr && headers && payload) result = Py_BuildValue("(NNON)", attr, payload, Py_None, headers);
            else {
                Py_XDECREF(attr);
                Py_XDECREF(headers);
                Py_XDECREF(payload);
            }
        }
    }
    PyBuffer_Release(&buf);
    return result;
}

static PyObject *message_parts(PyObject *self, PyObject *args) {
    PyObject *data, *flag;
    if (!PyArg_ParseTuple(args, "OO", &data, &flag)) return NULL;
    return parts_of(data, flag);
}

/* ---------------------------------------------------------------------------------------------
 * columns(messages, payload, flag, checksum, spec, tail, crc32, json_value): the columns of many
 * messages (dicts of rpc.decode_body: SendMessageRequestP2B, TransferedMessage) that rows.py
 * takes alike: each one's data (field `payload`, b"" when unset) split by message(), its
 * checksum_ok (content.checksum_ok: None for no checksum or -1, else whether it equals
 * crc32(data) & 0x7FFFFFFF) and its `details` JSON text: for each (key text, field, kind) of
 * `spec` (a tuple of them, read once by details_spec) the key text then the value, then `tail`
 * (the keys hold the JSON around the values: the
 * first `{"name":`, the next `,"name":`, the tail the closing `}`), a value as base.json_value writes it
 * (None, bool, an int64 and str here: json_any, anything else by `json_value`), of kind J_VALUE the
 * field's value, J_IPV4 the field's low 32 bits as a dotted IPv4 address (TubeMQ's sentAddr,
 * reportAddr), J_ATTRIBUTES the attribute text, J_SIZE the data's size; one message's text is
 * written into one buffer and made a str once.
 * -> (payloads, errors, headers, checksum_ok, details, sizes) lists. */

enum { J_VALUE, J_IPV4, J_ATTRIBUTES, J_SIZE };

/* A value as base.json_value writes it: None, bool, an int64, str here, anything else by calling
 * `json_value`. */
static int json_any(Buf *b, PyObject *v, PyObject *json_value) {
    if (v == Py_None) return put_text(b, "null");
    if (v == Py_True) return put_text(b, "true");
    if (v == Py_False) return put_text(b, "false");
    if (PyUnicode_CheckExact(v)) {
        int rc = json_str(b, v);
        if (rc != NOT_PLAIN) return rc;
    } else if (PyLong_CheckExact(v)) {
        int rc = json_long(b, v);
        if (rc != NOT_PLAIN) return rc;
    }
    PyObject *text = PyObject_CallOneArg(json_value, v), *raw;
    if (!text || !(raw = PyUnicode_AsEncodedString(text, "utf-8", "surrogatepass"))) {
        Py_XDECREF(text);
        return PY_ERROR;
    }
    int rc = buf_put(b, PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw)) ? JSON_NOMEM : 0;
    Py_DECREF(text);
    Py_DECREF(raw);
    return rc;
}

/* A field's low 32 bits as a dotted IPv4 address in quotes (None: null). */
static int ipv4_json(Buf *b, PyObject *v) {
    if (v == Py_None) return put_text(b, "null");
    unsigned long long x = PyLong_AsUnsignedLongLongMask(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) return PY_ERROR;
    if (buf_reserve(b, 17)) return JSON_NOMEM;
    b->p[b->len++] = '"';
    for (int shift = 24; shift >= 0; shift -= 8) {
        b->len += put_u64(b->p + b->len, (x >> shift) & 255);
        b->p[b->len++] = shift ? '.' : '"';
    }
    return 0;
}

typedef struct {
    char *key; /* the JSON before the value, UTF-8 */
    Py_ssize_t key_len;
    PyObject *field; /* the field's name, or None */
    int kind;
} DetailSpec;

#define MAX_SPEC 32

typedef struct {
    Py_ssize_t n;
    DetailSpec e[MAX_SPEC];
} Details;

static void details_free(PyObject *capsule) {
    Details *d = PyCapsule_GetPointer(capsule, "tubemq.details");
    if (!d) return;
    for (Py_ssize_t j = 0; j < d->n; j++) {
        PyMem_Free(d->e[j].key);
        Py_XDECREF(d->e[j].field);
    }
    PyMem_Free(d);
}

/* details_spec(spec): a details spec of columns() (a tuple of (key text, field, kind)) read once,
 * as columns() takes it. */
static PyObject *details_spec(PyObject *self, PyObject *spec) {
    if (!PyTuple_Check(spec)) return PyErr_Format(PyExc_TypeError, "details_spec: a tuple of entries");
    Py_ssize_t ns = PyTuple_GET_SIZE(spec);
    if (ns > MAX_SPEC) return PyErr_Format(PyExc_ValueError, "details_spec: more than %d entries", MAX_SPEC);
    Details *d = NULL;
    PyObject *capsule = owned_capsule(sizeof(Details), "tubemq.details", details_free, (void **)&d);
    if (!capsule) return NULL;
    for (Py_ssize_t j = 0; j < ns; j++) {
        PyObject *key, *field;
        int kind;
        Py_ssize_t n;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(spec, j), "UOi", &key, &field, &kind)) goto fail;
        const char *u = PyUnicode_AsUTF8AndSize(key, &n);
        if (!u) goto fail;
        if (!(d->e[j].key = PyMem_Malloc(n ? n : 1))) {
            PyErr_NoMemory();
            goto fail;
        }
        memcpy(d->e[j].key, u, n);
        d->e[j].key_len = n;
        d->e[j].field = Py_NewRef(field);
        d->e[j].kind = kind;
        d->n = j + 1;
    }
    return capsule;
fail:
    Py_DECREF(capsule);
    return NULL;
}

/* What columns() needs besides the messages: the field names, the spec, the tail, the callables
 * and the constants its checks compare with. */
typedef struct {
    PyObject *payload_name, *flag_name, *checksum_name, *crc32, *json_value;
    const DetailSpec *ds;
    Py_ssize_t ns, tail_len;
    const char *tail_text;
    PyObject *empty, *minus_one, *mask; /* b"", -1, 0x7FFFFFFF */
} RowSpec;

/* One message's six values (columns() describes them) into out[6], new references; 0 or -1 with
 * an exception set. `text` is the caller's scratch buffer. */
static int message_row(const RowSpec *r, PyObject *m, Buf *text, PyObject *out[6]) {
    PyObject *parts = NULL, *ok = NULL, *sz = NULL, *details = NULL;
    if (!PyDict_Check(m)) {
        PyErr_SetString(PyExc_TypeError, "columns: a message is not a dict");
        return -1;
    }
    PyObject *data = PyDict_GetItemWithError(m, r->payload_name);
    if (!data && PyErr_Occurred()) return -1;
    int truth = data ? PyObject_IsTrue(data) : 0;
    if (truth < 0) return -1;
    if (!truth) data = r->empty;
    PyObject *flag = PyDict_GetItemWithError(m, r->flag_name);
    if (!flag && PyErr_Occurred()) return -1;
    parts = parts_of(data, flag ? flag : Py_None); /* (attr, payload, error, headers) */
    if (!parts) return -1;
    PyObject *attr = PyTuple_GET_ITEM(parts, 0);
    Py_ssize_t size = PyObject_Length(data), psize;
    if (size < 0 || (psize = PyObject_Length(PyTuple_GET_ITEM(parts, 1))) < 0 || !(sz = PyLong_FromSsize_t(psize)))
        goto fail;
    /* checksum_ok */
    PyObject *cs = PyDict_GetItemWithError(m, r->checksum_name);
    if (!cs && PyErr_Occurred()) goto fail;
    int none = !cs || cs == Py_None;
    if (!none && (none = PyObject_RichCompareBool(cs, r->minus_one, Py_EQ)) < 0) goto fail;
    if (none) {
        ok = Py_NewRef(Py_None);
    } else {
        PyObject *crc = PyObject_CallOneArg(r->crc32, data), *masked = NULL;
        if (crc) masked = PyNumber_And(crc, r->mask);
        Py_XDECREF(crc);
        if (masked) ok = PyObject_RichCompare(cs, masked, Py_EQ);
        Py_XDECREF(masked);
        if (!ok) goto fail;
    }
    /* details: key text, value, ..., tail */
    int rc = 0;
    text->len = 0;
    for (Py_ssize_t j = 0; j < r->ns && !rc; j++) {
        const DetailSpec *d = &r->ds[j];
        if (buf_put(text, d->key, d->key_len)) {
            rc = JSON_NOMEM;
            break;
        }
        PyObject *fv = Py_None;
        if (d->kind == J_VALUE || d->kind == J_IPV4) {
            fv = PyDict_GetItemWithError(m, d->field);
            if (!fv && PyErr_Occurred()) {
                rc = PY_ERROR;
                break;
            }
            if (!fv) fv = Py_None;
        }
        if (d->kind == J_VALUE) rc = json_any(text, fv, r->json_value);
        else if (d->kind == J_IPV4) rc = ipv4_json(text, fv);
        else if (d->kind == J_ATTRIBUTES) rc = json_any(text, attr, r->json_value);
        else if (buf_reserve(text, 21)) rc = JSON_NOMEM;
        else text->len += put_decimal(text->p + text->len, size);
    }
    if (!rc && buf_put(text, r->tail_text, r->tail_len)) rc = JSON_NOMEM;
    if (rc == JSON_NOMEM) PyErr_NoMemory();
    if (rc) goto fail;
    details = PyUnicode_DecodeUTF8(text->p, text->len, "surrogatepass"); /* as json_value wrote it */
    if (!details) goto fail;
    out[0] = Py_NewRef(PyTuple_GET_ITEM(parts, 1));
    out[1] = Py_NewRef(PyTuple_GET_ITEM(parts, 2));
    out[2] = Py_NewRef(PyTuple_GET_ITEM(parts, 3));
    out[3] = ok;
    out[4] = details;
    out[5] = sz;
    Py_DECREF(parts);
    return 0;
fail:
    Py_XDECREF(parts);
    Py_XDECREF(ok);
    Py_XDECREF(sz);
    return -1;
}

/* A RowSpec of the names, spec capsule, tail and callables (borrowed), its constants made here;
 * 0 or -1. row_spec_clear drops the constants. */
static int row_spec(RowSpec *r, PyObject *payload_name, PyObject *flag_name, PyObject *checksum_name, PyObject *spec,
                    PyObject *tail, PyObject *crc32, PyObject *json_value) {
    memset(r, 0, sizeof *r);
    const Details *dspec = PyCapsule_GetPointer(spec, "tubemq.details");
    if (!dspec) return -1;
    r->payload_name = payload_name, r->flag_name = flag_name, r->checksum_name = checksum_name;
    r->crc32 = crc32, r->json_value = json_value, r->ds = dspec->e, r->ns = dspec->n;
    if (!(r->tail_text = PyUnicode_AsUTF8AndSize(tail, &r->tail_len))) return -1;
    r->empty = PyBytes_FromStringAndSize("", 0);
    r->minus_one = PyLong_FromLong(-1);
    r->mask = PyLong_FromLong(0x7FFFFFFF);
    return r->empty && r->minus_one && r->mask ? 0 : -1;
}

static void row_spec_clear(RowSpec *r) {
    Py_CLEAR(r->empty);
    Py_CLEAR(r->minus_one);
    Py_CLEAR(r->mask);
}

static PyObject *columns(PyObject *self, PyObject *args) {
    PyObject *msgs, *payload_name, *flag_name, *checksum_name, *spec, *tail, *crc32, *json_value;
    if (!PyArg_ParseTuple(args, "O!UUUOUOO", &PyList_Type, &msgs, &payload_name, &flag_name, &checksum_name, &spec,
                          &tail, &crc32, &json_value))
        return NULL;
    RowSpec r;
    PyObject *cols[6] = {0}, *result = NULL;
    Buf text = {0};
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    if (row_spec(&r, payload_name, flag_name, checksum_name, spec, tail, crc32, json_value)) goto done;
    for (int c = 0; c < 6; c++)
        if (!(cols[c] = PyList_New(n))) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *vals[6];
        if (message_row(&r, PyList_GET_ITEM(msgs, i), &text, vals)) goto done;
        for (int c = 0; c < 6; c++) PyList_SET_ITEM(cols[c], i, vals[c]);
    }
    result = PyTuple_New(6);
    if (result)
        for (int c = 0; c < 6; c++) {
            PyTuple_SET_ITEM(result, c, cols[c]);
            cols[c] = NULL;
        }
done:
    for (int c = 0; c < 6; c++) Py_XDECREF(cols[c]);
    free(text.p);
    row_spec_clear(&r);
    return result;
}

/* ---------------------------------------------------------------------------------------------
 * split(data, max_frame, max_list): the sizes of the whole frames `data` starts with, as
 * framing.TubeRules.size sizes them (header above), stopping before the first frame that is
 * not whole or that the rules would not pass as it is: another token, a list size outside
 * 1..max_list, a block length outside 0..MAX_BLOCK, a frame past max_frame bytes. The framer
 * reads what is left. */

#define TOKEN 0xFF7FF4FEu
#define MAX_BLOCK 8192

/* The size of the whole frame at b[at..n) split() would pass, or 0. */
static Py_ssize_t whole_frame(const unsigned char *b, Py_ssize_t n, Py_ssize_t at, Py_ssize_t max_frame,
                              Py_ssize_t max_list) {
    if (n - at < HEADER_LEN || u32be(b + at) != TOKEN) return 0;
    int32_t list_size = (int32_t)u32be(b + at + 8);
    if (list_size <= 0 || list_size > max_list) return 0;
    Py_ssize_t pos = HEADER_LEN;
    for (int32_t left = list_size; left > 0; left--) {
        if (n - at - pos < 4) return 0;
        int32_t len = (int32_t)u32be(b + at + pos);
        if (len < 0 || len > MAX_BLOCK || pos + 4 + len > max_frame || n - at - pos - 4 < len) return 0;
        pos += 4 + len;
    }
    return pos;
}

static PyObject *split(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t max_frame, max_list, at = 0, size;
    if (!PyArg_ParseTuple(args, "y*nn", &buf, &max_frame, &max_list)) return NULL;
    PyObject *out = PyList_New(0);
    while (out && (size = whole_frame(buf.buf, buf.len, at, max_frame, max_list))) {
        PyObject *v = PyLong_FromSsize_t(size);
        if (!v || PyList_Append(out, v)) Py_CLEAR(out);
        Py_XDECREF(v);
        at += size;
    }
    PyBuffer_Release(&buf);
    return out;
}

/* ---------------------------------------------------------------------------------------------
 * read(data, schema, requests, responses): frame(), envelope() and body() of one whole frame in
 * one call, and the `details` JSON of what they read. `requests` and `responses` map a method id to
 * the schema entry of its message.
 * -> None where frame() gives None; else (serial, block lengths, joined data, envelope() or None,
 * the body's dict or None, head JSON or None, body JSON or None): the body's dict None where
 * envelope() or body() leave the bytes to protobuf, where the method has no entry, and for an
 * error response or an envelope without a body; the head (json_head, left open) wherever the
 * envelope was read, the body JSON (json_body) wherever its dict was and the writer takes it. */

/* read() of the n bytes at b. */
static PyObject *read_at(const unsigned char *data, Py_ssize_t n, const Schema *s, PyObject *requests,
                         PyObject *responses) {
    PyObject *fr, *env = NULL, *fields = Py_None, *head = NULL, *text = NULL;
    Py_ssize_t index = -1;
    fr = frame_at(data, n);
    if (!fr || fr == Py_None) return fr;
    PyObject *joined = PyTuple_GET_ITEM(fr, 2);
    env = envelope_at((const unsigned char *)PyBytes_AS_STRING(joined), PyBytes_GET_SIZE(joined));
    if (!env) goto fail;
    if (env != Py_None) {
        PyObject *flag = PyTuple_GET_ITEM(env, 0), *mid = PyTuple_GET_ITEM(env, 4);
        PyObject *status = PyTuple_GET_ITEM(env, 6), *body = PyTuple_GET_ITEM(env, 7);
        int is_request = !(PyLong_CheckExact(flag) && PyLong_AsLong(flag) == FLAG_RESPONSE);
        int ok = status == Py_None || (PyLong_CheckExact(status) && PyLong_AsLong(status) == 0);
        if (ok && body != Py_None && mid != Py_None) {
            PyObject *entry = PyDict_GetItemWithError(is_request ? requests : responses, mid);
            if (!entry && PyErr_Occurred()) goto fail;
            index = entry ? PyLong_AsSsize_t(entry) : -1;
            if (index == -1 && PyErr_Occurred()) goto fail;
            if (index >= 0 && index < s->n) {
                const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(body);
                PyObject *got;
                int rc = read_message(s, index, b, b + PyBytes_GET_SIZE(body), 0, &got);
                if (rc == PY_ERROR) goto fail;
                if (rc == 0) fields = got;
            }
        }
    }
    if (env != Py_None) {
        Buf b = {0};
        int rc = json_head(&b, PyTuple_GET_ITEM(fr, 0), PyTuple_GET_ITEM(fr, 1), PyTuple_GET_ITEM(env, 0),
                           PyTuple_GET_ITEM(env, 1));
        if (!(head = json_text(&b, rc))) goto fail;
    }
    if (fields != Py_None) {
        Buf b = {0};
        if (!(text = json_text(&b, json_body(s, index, fields, &b, 0)))) goto fail;
    }
    PyObject *result = PyTuple_Pack(7, PyTuple_GET_ITEM(fr, 0), PyTuple_GET_ITEM(fr, 1), joined, env, fields,
                                    head ? head : Py_None, text ? text : Py_None);
    Py_DECREF(fr);
    Py_DECREF(env);
    Py_XDECREF(head);
    Py_XDECREF(text);
    if (fields != Py_None) Py_DECREF(fields);
    return result;
fail:
    Py_XDECREF(fr);
    Py_XDECREF(env);
    Py_XDECREF(head);
    Py_XDECREF(text);
    if (fields != Py_None) Py_DECREF(fields);
    return NULL;
}

static PyObject *read_frame(PyObject *self, PyObject *args) {
    Py_buffer buf;
    PyObject *capsule, *requests, *responses;
    if (!PyArg_ParseTuple(args, "y*OO!O!", &buf, &capsule, &PyDict_Type, &requests, &PyDict_Type, &responses))
        return NULL;
    Schema *s = PyCapsule_GetPointer(capsule, "tubemq.schema");
    PyObject *result = s ? read_at(buf.buf, buf.len, s, requests, responses) : NULL;
    PyBuffer_Release(&buf);
    return result;
}

/* ---------------------------------------------------------------------------------------------
 * read_all(data, max_frame, max_list, schema, requests, responses): split() and read() of the
 * whole frames `data` starts with, in one call: (sizes, [read() of each]). */

static PyObject *read_all(PyObject *self, PyObject *args) {
    Py_buffer buf;
    PyObject *capsule, *requests, *responses, *sizes = NULL, *frames = NULL, *result = NULL;
    Py_ssize_t max_frame, max_list, at = 0, size;
    if (!PyArg_ParseTuple(args, "y*nnOO!O!", &buf, &max_frame, &max_list, &capsule, &PyDict_Type, &requests,
                          &PyDict_Type, &responses))
        return NULL;
    const unsigned char *b = buf.buf;
    Schema *s = PyCapsule_GetPointer(capsule, "tubemq.schema");
    if (!s || !(sizes = PyList_New(0)) || !(frames = PyList_New(0))) goto done;
    while ((size = whole_frame(b, buf.len, at, max_frame, max_list))) {
        PyObject *v = PyLong_FromSsize_t(size), *got = v ? read_at(b + at, size, s, requests, responses) : NULL;
        int bad = !got || PyList_Append(sizes, v) || PyList_Append(frames, got);
        Py_XDECREF(v);
        Py_XDECREF(got);
        if (bad) goto done;
        at += size;
    }
    result = PyTuple_Pack(2, sizes, frames);
done:
    Py_XDECREF(sizes);
    Py_XDECREF(frames);
    PyBuffer_Release(&buf);
    return result;
}

/* ---------------------------------------------------------------------------------------------
 * exchanges(state, data, offset, ts_ns, direction): the rows of the whole sendMessageP2B frames a
 * chunk starts with, written straight into the conversation's gathered rows, as
 * conversation.TubeMQConversation's Python path (the reference: tests hold the two to equal
 * rows) makes them; `state` (fast_state, one per conversation) holds what that path reads:
 *
 *   request  (c2s, method 13): a commands row, the Pending of its serial, the produced message
 *   response (status SUCCESS, its Pending a sendMessageP2B): a commands row, the latencies row,
 *            the tubemq_produce acks row; the Pending removed
 *
 * Each frame is read by read_at; it stops before the first frame that is anything else or that
 * the Python path would treat another way (no envelope or body read, another method, an error
 * response, a serial already pending or none pending, pending at its bound, a service the
 * method does not take or not known, a body field that adds details keys (subscribeInfo,
 * event, brokerInfos, topicInfos), a value of an unexpected type) and on any error (cleared:
 * the Python path reads that frame and says what is wrong). A frame's rows are added only
 * once all of them are made.
 * -> the number of bytes taken (whole frames). */

#define M_SEND 13

typedef struct {
    PyObject *schema_cap, *requests, *responses, *pending, *pending_cls, *frames, *commands, *latencies, *acks,
        *messages, *service_json, *services, *status_ok, *details_cap, *crc32, *json_value, *msg_times, *msg_time,
        *c2s, *name, *ok, *malformed, *ack_type, *index, *thousand;
    Py_ssize_t max_frame, max_list, max_pending;
    Schema *schema;
    RowSpec row;
} Fast;

#define FAST_REFS 25 /* the PyObject pointers Fast starts with */

enum {
    N_TOPIC, N_PARTITION, N_CLIENT, N_BROKER, N_GROUP, N_TOPICS, N_SUBSCRIBE, N_EVENT, N_SUCCESS, N_ERRCODE,
    N_ERRMSG, N_BROKERS, N_TOPICINFOS, N_MESSAGE_ID, N_APPEND_TIME, N_APPEND_OFFSET, N_MSG_TIME, N_DATA, N_FLAG,
    N_CHECKSUM, N_P_METHOD, N_P_NAME, N_P_TS_END, N_P_TOPIC, N_P_PARTITION, N_P_CLIENT, N_P_VERSION, N_STARTS,
    N_FRAMES, N_FLOOR, N_NAMES
};
static const char *fast_names[N_NAMES] = {
    "topicName", "partitionId", "clientId", "brokerId", "groupName", "topicList", "subscribeInfo", "event",
    "success", "errCode", "errMsg", "brokerInfos", "topicInfos", "messageId", "appendTime", "appendOffset",
    "msgTime", "data", "flag", "checkSum", "method_id", "name", "ts_end", "topic", "partition", "client_id",
    "api_version", "starts", "frames", "floor",
};
static PyObject *names[N_NAMES], *close_brace;

static void fast_free(PyObject *capsule) {
    Fast *f = PyCapsule_GetPointer(capsule, "tubemq.fast");
    if (!f) return;
    PyObject **refs = (PyObject **)f;
    for (int i = 0; i < FAST_REFS; i++) Py_XDECREF(refs[i]);
    row_spec_clear(&f->row);
    PyMem_Free(f);
}

/* fast_state(schema, requests, responses, max_frame, max_list, max_pending, pending, Pending,
 * frames, commands, latencies, acks, messages, service_json, services, status_ok, details spec,
 * crc32, json_value, msg_times, msg_time, c2s, name, ok, malformed, ack_type, frame index):
 * exchanges()'s state, one per conversation (conversation.py names each). */
static PyObject *fast_state(PyObject *self, PyObject *args) {
    Fast *f = NULL;
    PyObject *capsule = owned_capsule(sizeof(Fast), "tubemq.fast", fast_free, (void **)&f);
    if (!capsule) return NULL;
    if (!PyArg_ParseTuple(args, "OO!O!nnnO!OOO!O!O!O!O!OUOOOO!OUUUUUO", &f->schema_cap, &PyDict_Type, &f->requests,
                          &PyDict_Type, &f->responses, &f->max_frame, &f->max_list, &f->max_pending, &PyDict_Type,
                          &f->pending, &f->pending_cls, &f->frames, &PyList_Type, &f->commands, &PyList_Type,
                          &f->latencies, &PyList_Type, &f->acks, &PyList_Type, &f->messages, &PyDict_Type,
                          &f->service_json, &f->services, &f->status_ok, &f->details_cap, &f->crc32, &f->json_value,
                          &PyDict_Type, &f->msg_times, &f->msg_time, &f->c2s, &f->name, &f->ok, &f->malformed,
                          &f->ack_type, &f->index)) {
        memset(f, 0, sizeof *f); /* borrowed: nothing to drop */
        Py_DECREF(capsule);
        return NULL;
    }
    PyObject **refs = (PyObject **)f;
    for (int i = 0; i < FAST_REFS - 1; i++) Py_INCREF(refs[i]);
    if (f->index != Py_None && !(PyTuple_CheckExact(f->index) && PyTuple_GET_SIZE(f->index) == 2)) {
        PyErr_SetString(PyExc_TypeError, "fast_state: the frame index a (c2s, s2c) pair or None");
        Py_DECREF(capsule);
        return NULL;
    }
    if (!(f->thousand = PyFloat_FromDouble(1000.0)) || !(f->schema = PyCapsule_GetPointer(f->schema_cap, "tubemq.schema")) ||
        row_spec(&f->row, names[N_DATA], names[N_FLAG], names[N_CHECKSUM], f->details_cap, close_brace,
                 f->crc32, f->json_value)) {
        Py_DECREF(capsule);
        return NULL;
    }
    return capsule;
}

/* v is an int equal to x. */
static int long_is(PyObject *v, long x) {
    if (!PyLong_CheckExact(v)) return 0;
    int overflow;
    long got = PyLong_AsLongAndOverflow(v, &overflow);
    return !overflow && got == x;
}

/* fields[name] or None (borrowed); NULL with an exception set. */
static PyObject *field_of(PyObject *fields, int name) {
    PyObject *v = PyDict_GetItemWithError(fields, names[name]);
    return v ? v : PyErr_Occurred() ? NULL : Py_None;
}

/* streams._Frames.span of one direction's index (`starts`, `frames`: int64 arrays, `floor`): the
 * frame numbers of the packets holding bytes `first` and `last`, a new (first, last) tuple: the
 * packet whose bytes begin at or before the offset (the first packet for an offset before them
 * all), None for an offset below `floor` (pruned) or a frame number 0, (None, None) for an empty
 * index. */
static PyObject *index_span(PyObject *index, long long first, long long last) {
    PyObject *starts = PyObject_GetAttr(index, names[N_STARTS]), *frames = NULL, *floor = NULL, *out = NULL;
    Py_buffer s = {0}, f = {0};
    if (!starts || !(frames = PyObject_GetAttr(index, names[N_FRAMES])) || !(floor = PyObject_GetAttr(index, names[N_FLOOR])))
        goto done;
    long long low = PyLong_AsLongLong(floor);
    if ((low == -1 && PyErr_Occurred()) || PyObject_GetBuffer(starts, &s, PyBUF_FORMAT) ||
        PyObject_GetBuffer(frames, &f, PyBUF_FORMAT))
        goto done;
    if (s.itemsize != 8 || f.itemsize != 8 || strcmp(s.format, "q") || strcmp(f.format, "q") || s.len != f.len) {
        PyErr_SetString(PyExc_TypeError, "frame index: int64 arrays of one length");
        goto done;
    }
    Py_ssize_t n = s.len / 8;
    const long long *st = s.buf, *fr = f.buf;
    if (!n) {
        out = Py_BuildValue("(OO)", Py_None, Py_None);
        goto done;
    }
    long long at[2] = {first, last};
    PyObject *got[2] = {0};
    for (int k = 0; k < 2; k++) {
        Py_ssize_t lo = 0, hi = n; /* bisect_right(starts, at[k]) */
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (at[k] < st[mid]) hi = mid;
            else lo = mid + 1;
        }
        Py_ssize_t i = lo - 1 > 0 ? lo - 1 : 0;
        got[k] = at[k] < low || !fr[i] ? Py_NewRef(Py_None) : PyLong_FromLongLong(fr[i]);
    }
    if (got[0] && got[1]) out = PyTuple_Pack(2, got[0], got[1]);
    Py_XDECREF(got[0]);
    Py_XDECREF(got[1]);
done:
    if (s.obj) PyBuffer_Release(&s);
    if (f.obj) PyBuffer_Release(&f);
    Py_XDECREF(starts);
    Py_XDECREF(frames);
    Py_XDECREF(floor);
    return out;
}

/* frame_span(index, offset, size): ConnInfo.frames of a frame at `offset` of `size` bytes, read from
 * the direction's index (index_span; tests hold it to streams._Frames.span). */
static PyObject *frame_span(PyObject *self, PyObject *args) {
    PyObject *index;
    long long offset, size;
    if (!PyArg_ParseTuple(args, "OLL", &index, &offset, &size)) return NULL;
    return index_span(index, offset, size ? offset + size - 1 : offset);
}

/* v[name] = fields[name] or None (borrowed) for the n names of `used`; 0 or -1. */
static int fields_of(PyObject *fields, const int *used, size_t n, PyObject **v) {
    for (size_t i = 0; i < n; i++)
        if (!(v[used[i]] = field_of(fields, used[i]))) return -1;
    return 0;
}

/* The (first, last) frame numbers of the frame's packets, a new reference: from the driver's index
 * where the conversation has it, else by asking `frames`, else (None, None). */
static PyObject *frame_numbers(Fast *f, PyObject *direction, int c2s, Py_ssize_t offset, Py_ssize_t size) {
    if (f->index != Py_None)
        return index_span(PyTuple_GET_ITEM(f->index, c2s ? 0 : 1), offset, size ? offset + size - 1 : offset);
    if (f->frames == Py_None) return Py_BuildValue("(OO)", Py_None, Py_None);
    PyObject *off = PyLong_FromSsize_t(offset), *n = PyLong_FromSsize_t(size), *got = NULL;
    if (off && n) got = PyObject_CallFunctionObjArgs(f->frames, direction, off, n, NULL);
    Py_XDECREF(off);
    Py_XDECREF(n);
    if (got && !(PyTuple_CheckExact(got) && PyTuple_GET_SIZE(got) == 2)) {
        Py_DECREF(got);
        PyErr_SetString(PyExc_TypeError, "frames: not a pair");
        return NULL;
    }
    return got;
}

/* The details keys every frame has after the head: service, protocol_ver, trailing_bytes. */
static int envelope_json(Fast *f, Buf *b, PyObject *stype, PyObject *pver, PyObject *trailing) {
    int rc;
    if (stype != Py_None) {
        PyObject *svc = PyDict_GetItemWithError(f->service_json, stype);
        if (!svc) return PyErr_Occurred() ? PY_ERROR : NOT_PLAIN;
        Py_ssize_t n;
        const char *u = PyUnicode_AsUTF8AndSize(svc, &n);
        if (!u) return PY_ERROR;
        if (buf_put(b, u, n)) return JSON_NOMEM;
    }
    if (pver != Py_None && ((rc = put_text(b, ",\"protocol_ver\":")) || (rc = json_long(b, pver)))) return rc;
    int some = PyObject_IsTrue(trailing);
    if (some < 0) return PY_ERROR;
    if (some && ((rc = put_text(b, ",\"trailing_bytes\":")) || (rc = json_long(b, trailing)))) return rc;
    return 0;
}

static int put_str(Buf *b, PyObject *s) {
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (!u) return PY_ERROR;
    return buf_put(b, u, n) ? JSON_NOMEM : 0;
}

/* A row's tuple of n borrowed references, untracked by the cyclic GC: nothing in a row refers
 * back to it (its values are numbers, strings, bytes and the headers list), and rows wait by the
 * thousand in the gathered lists, where each collection would walk them again for nothing. */
static PyObject *tuple_of(PyObject **items, Py_ssize_t n) {
    PyObject *t = PyTuple_New(n);
    if (t) {
        for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(t, i, Py_NewRef(items[i]));
        PyObject_GC_UnTrack(t);
    }
    return t;
}

/* PyList_Append of each of n new references (stolen); -1 on error. */
static int append_rows(PyObject **lists, PyObject **rows, int n) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (!bad && PyList_Append(lists[i], rows[i])) bad = -1;
        Py_DECREF(rows[i]);
    }
    return bad;
}

/* A request frame: 1 done, 0 not taken, -1 error. */
static int fast_request(Fast *f, PyObject *got, PyObject *env, Py_ssize_t offset, Py_ssize_t size, PyObject *ts,
                        PyObject *direction) {
    PyObject *serial = PyTuple_GET_ITEM(got, 0), *fields = PyTuple_GET_ITEM(got, 4);
    PyObject *stype = PyTuple_GET_ITEM(env, 2), *pver = PyTuple_GET_ITEM(env, 3), *mid = PyTuple_GET_ITEM(env, 4);
    PyObject *timeout = PyTuple_GET_ITEM(env, 5), *trailing = PyTuple_GET_ITEM(env, 8);
    if (!long_is(mid, M_SEND) || PyDict_GET_SIZE(f->pending) >= f->max_pending) return 0;
    int known = PyDict_Contains(f->pending, serial);
    if (known) return known < 0 ? -1 : 0;
    if (stype != Py_None) {
        int ok = PySequence_Contains(f->services, stype);
        if (ok <= 0) return ok;
    }
    static const int used[] = {N_TOPIC, N_PARTITION, N_CLIENT, N_BROKER, N_GROUP, N_TOPICS, N_SUBSCRIBE, N_EVENT,
                               N_MSG_TIME};
    PyObject *v[N_CHECKSUM];
    if (fields_of(fields, used, sizeof used / sizeof *used, v)) return -1;
    if (v[N_EVENT] != Py_None) return 0;
    int subs = PyObject_IsTrue(v[N_SUBSCRIBE]);
    if (subs) return subs < 0 ? -1 : 0;
    Buf b = {0};
    int rc = put_str(&b, PyTuple_GET_ITEM(got, 5));
    if (!rc) rc = envelope_json(f, &b, stype, pver, trailing);
    if (!rc && timeout != Py_None && !(rc = put_text(&b, ",\"timeout_ms\":"))) rc = json_long(&b, timeout);
    if (!rc && !(rc = put_text(&b, ",\"request\":")) && !(rc = put_str(&b, PyTuple_GET_ITEM(got, 6))))
        rc = put_text(&b, "}");
    PyObject *details = json_text(&b, rc);
    if (!details || details == Py_None) {
        Py_XDECREF(details);
        return details ? 0 : -1;
    }
    PyObject *client = v[N_CLIENT], *topics = v[N_TOPICS], *frames = NULL, *pend = NULL, *rows[2] = {0};
    PyObject *msg[6] = {0}, *msg_ts = NULL;
    int truth;
    if ((truth = PyObject_IsTrue(client)) < 0) goto fail;
    if (!truth) client = v[N_BROKER];
    if ((truth = PyObject_IsTrue(topics)) < 0) goto fail;
    if (!truth) topics = Py_None;
    if (!(frames = frame_numbers(f, direction, 1, offset, size))) goto fail;
    PyObject *f0 = PyTuple_GET_ITEM(frames, 0), *f1 = PyTuple_GET_ITEM(frames, 1);
    PyObject *pargs[] = {mid, f->name, ts, v[N_TOPIC], v[N_PARTITION], client, v[N_GROUP], pver};
    if (!(pend = PyObject_Vectorcall(f->pending_cls, pargs, 8, NULL))) goto fail;
    /* the produced message (rows.produce) */
    if (message_row(&f->row, fields, &b, msg)) goto fail;
    if (!PyBytes_CheckExact(msg[0])) { /* the payload policy's bytes() would copy it */
        rc = 0;
        goto done;
    }
    PyObject *when = v[N_MSG_TIME];
    if (PyUnicode_CheckExact(when) && PyUnicode_GET_LENGTH(when)) {
        msg_ts = PyDict_GetItemWithError(f->msg_times, when); /* content.parse_msg_time's memo */
        if (msg_ts) Py_INCREF(msg_ts);
        else if (PyErr_Occurred()) goto fail;
    }
    if (!msg_ts && !(msg_ts = PyObject_CallFunctionObjArgs(f->msg_time, when, msg[2], NULL))) goto fail;
    PyObject *psize = PyLong_FromSsize_t(PyBytes_GET_SIZE(msg[0]));
    if (!psize) goto fail;
    PyObject *sz = PyLong_FromSsize_t(size), *off = PyLong_FromSsize_t(offset);
    if (sz && off) {
        PyObject *cmd[] = {ts, ts, direction, serial, sz, off, f->ok, Py_None, pver, f->name, mid, v[N_TOPIC],
                           v[N_PARTITION], client, topics, Py_None, details, Py_None, f0, f1};
        PyObject *row[] = {ts, v[N_TOPIC], v[N_PARTITION], msg[2], v[N_CLIENT], msg[3], serial, msg_ts,
                           msg[1] == Py_None ? f->ok : f->malformed, msg[1], msg[4], msg[0], psize, Py_None, f0, f1};
        rows[0] = tuple_of(cmd, 20);
        rows[1] = tuple_of(row, 16);
    }
    Py_XDECREF(sz);
    Py_XDECREF(off);
    Py_DECREF(psize);
    if (!rows[0] || !rows[1]) goto fail;
    if (PyDict_SetItem(f->pending, serial, pend)) goto fail;
    PyObject *lists[] = {f->commands, f->messages};
    rc = append_rows(lists, rows, 2);
    rows[0] = rows[1] = NULL;
    if (rc) goto fail;
    rc = 1;
    goto done;
fail:
    rc = -1;
done:
    free(b.p);
    Py_XDECREF(rows[0]);
    Py_XDECREF(rows[1]);
    for (int i = 0; i < 6; i++) Py_XDECREF(msg[i]);
    Py_XDECREF(msg_ts);
    Py_XDECREF(pend);
    Py_XDECREF(frames);
    Py_DECREF(details);
    return rc;
}

/* A response frame: 1 done, 0 not taken, -1 error. */
static int fast_response(Fast *f, PyObject *got, PyObject *env, Py_ssize_t offset, Py_ssize_t size, PyObject *ts,
                         PyObject *direction, int c2s) {
    PyObject *serial = PyTuple_GET_ITEM(got, 0), *fields = PyTuple_GET_ITEM(got, 4);
    PyObject *stype = PyTuple_GET_ITEM(env, 2), *pver = PyTuple_GET_ITEM(env, 3), *mid = PyTuple_GET_ITEM(env, 4);
    PyObject *trailing = PyTuple_GET_ITEM(env, 8);
    if (!long_is(PyTuple_GET_ITEM(env, 6), 0) || (mid != Py_None && !long_is(mid, M_SEND))) return 0;
    PyObject *pend = PyDict_GetItemWithError(f->pending, serial);
    if (!pend) return PyErr_Occurred() ? -1 : 0;
    PyObject *p[N_STARTS - N_P_METHOD] = {0}, *frames = NULL, *error_code = NULL, *details = NULL, *lat = NULL;
    PyObject *ack = NULL, *mid_text = NULL, *rows[3] = {0};
    Buf b = {0};
    int rc = -1;
    Py_INCREF(pend);
    for (int i = 0; i < N_STARTS - N_P_METHOD; i++)
        if (!(p[i] = PyObject_GetAttr(pend, names[N_P_METHOD + i]))) goto done;
    if (!long_is(p[0], M_SEND)) {
        rc = 0;
        goto done;
    }
    if (mid == Py_None) mid = p[0];
    static const int used[] = {N_EVENT, N_SUCCESS, N_ERRCODE, N_ERRMSG, N_BROKERS, N_TOPICINFOS, N_MESSAGE_ID,
                               N_APPEND_TIME, N_APPEND_OFFSET};
    PyObject *v[N_CHECKSUM];
    if (fields_of(fields, used, sizeof used / sizeof *used, v)) goto done;
    int brokers = PyObject_IsTrue(v[N_BROKERS]), infos = brokers < 0 ? -1 : PyObject_IsTrue(v[N_TOPICINFOS]);
    if (brokers < 0 || infos < 0) goto done;
    PyObject *success = v[N_SUCCESS], *code = v[N_ERRCODE];
    if (brokers || infos || v[N_EVENT] != Py_None || !(success == Py_None || PyBool_Check(success))) {
        rc = 0;
        goto done;
    }
    int failed = success == Py_False;
    if (!failed && success == Py_None && code != Py_None) {
        PyObject *good = PyLong_FromLong(200); /* rpc.ERR_SUCCESS */
        failed = good ? PyObject_RichCompareBool(code, good, Py_NE) : -1;
        Py_XDECREF(good);
        if (failed < 0) goto done;
    }
    if (failed) error_code = code != Py_None ? Py_NewRef(code) : PyLong_FromLong(-1);
    else if (success == Py_True || code != Py_None) error_code = PyLong_FromLong(0);
    else error_code = Py_NewRef(Py_None);
    if (!error_code) goto done;
    int jr = put_str(&b, PyTuple_GET_ITEM(got, 5));
    if (!jr) jr = envelope_json(f, &b, stype, pver, trailing);
    if (!jr && !(jr = put_str(&b, f->status_ok)) && !(jr = put_text(&b, ",\"response\":")))
        jr = put_str(&b, PyTuple_GET_ITEM(got, 6));
    if (!jr && failed && !(jr = put_text(&b, ",\"error\":"))) jr = json_any(&b, v[N_ERRMSG], f->json_value);
    if (!jr) jr = put_text(&b, "}");
    if (!(details = json_text(&b, jr))) goto done;
    if (details == Py_None) {
        rc = 0;
        goto done;
    }
    /* the ack's details: {"append_time_ms":..} */
    if ((jr = put_text(&b, "{\"append_time_ms\":")) || (jr = json_any(&b, v[N_APPEND_TIME], f->json_value)) ||
        (jr = put_text(&b, "}"))) {
        if (jr == JSON_NOMEM) PyErr_NoMemory();
        goto done;
    }
    if (!(ack = PyUnicode_DecodeUTF8(b.p, b.len, "surrogatepass"))) goto done;
    PyObject *since = PyNumber_Subtract(ts, p[2]);
    lat = since ? PyNumber_TrueDivide(since, f->thousand) : NULL;
    Py_XDECREF(since);
    if (!lat || !(frames = frame_numbers(f, direction, c2s, offset, size))) goto done;
    if (v[N_MESSAGE_ID] != Py_None) {
        if (!(mid_text = PyObject_Str(v[N_MESSAGE_ID]))) goto done;
    } else {
        mid_text = Py_NewRef(Py_None);
    }
    PyObject *topic = p[3], *part = p[4];
    PyObject *sz = PyLong_FromSsize_t(size), *off = PyLong_FromSsize_t(offset);
    if (sz && off) {
        PyObject *cmd[] = {ts, ts, direction, serial, sz, off, f->ok, Py_None, pver, f->name, mid, topic, part, p[5],
                           Py_None, error_code, details, Py_None, PyTuple_GET_ITEM(frames, 0),
                           PyTuple_GET_ITEM(frames, 1)};
        PyObject *latency[] = {p[2], p[1], f->name, p[6], serial, p[2], ts, lat, error_code, topic, part};
        PyObject *acked[] = {ts, f->ack_type, topic, part, v[N_APPEND_OFFSET], Py_None, mid_text, error_code, lat,
                             serial, ack};
        rows[0] = tuple_of(cmd, 20);
        rows[1] = tuple_of(latency, 11);
        rows[2] = tuple_of(acked, 11);
    }
    Py_XDECREF(sz);
    Py_XDECREF(off);
    if (!rows[0] || !rows[1] || !rows[2] || PyDict_DelItem(f->pending, serial)) goto done;
    PyObject *lists[] = {f->commands, f->latencies, f->acks};
    int bad = append_rows(lists, rows, 3);
    rows[0] = rows[1] = rows[2] = NULL;
    rc = bad ? -1 : 1;
done:
    free(b.p);
    for (int i = 0; i < 3; i++) Py_XDECREF(rows[i]);
    for (int i = 0; i < N_STARTS - N_P_METHOD; i++) Py_XDECREF(p[i]);
    Py_XDECREF(frames);
    Py_XDECREF(error_code);
    Py_XDECREF(details);
    Py_XDECREF(lat);
    Py_XDECREF(ack);
    Py_XDECREF(mid_text);
    Py_DECREF(pend);
    return rc;
}

static PyObject *exchanges(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) return PyErr_Format(PyExc_TypeError, "exchanges: 5 arguments");
    Fast *f = PyCapsule_GetPointer(args[0], "tubemq.fast");
    Py_ssize_t offset = PyLong_AsSsize_t(args[2]);
    if (!f || (offset == -1 && PyErr_Occurred())) return NULL;
    PyObject *ts = args[3], *direction = args[4];
    if (!PyLong_CheckExact(ts) || !PyUnicode_Check(direction))
        return PyErr_Format(PyExc_TypeError, "exchanges: ts_ns an int, direction a str");
    int c2s = PyUnicode_Compare(direction, f->c2s) == 0;
    if (PyErr_Occurred()) return NULL;
    Py_buffer buf;
    if (PyObject_GetBuffer(args[1], &buf, PyBUF_SIMPLE)) return NULL;
    const unsigned char *b = buf.buf;
    Py_ssize_t at = 0, size;
    while ((size = whole_frame(b, buf.len, at, f->max_frame, f->max_list))) {
        PyObject *got = read_at(b + at, size, f->schema, f->requests, f->responses);
        int rc = 0;
        if (got && got != Py_None) {
            PyObject *env = PyTuple_GET_ITEM(got, 3);
            if (env != Py_None && PyTuple_GET_ITEM(got, 4) != Py_None && PyTuple_GET_ITEM(got, 5) != Py_None &&
                PyTuple_GET_ITEM(got, 6) != Py_None) {
                PyObject *flag = PyTuple_GET_ITEM(env, 0);
                if (long_is(flag, FLAG_RESPONSE)) rc = fast_response(f, got, env, offset + at, size, ts, direction, c2s);
                else if (c2s) rc = fast_request(f, got, env, offset + at, size, ts, direction);
            }
        }
        Py_XDECREF(got);
        if (rc <= 0) {
            PyErr_Clear(); /* the Python path reads the frame again and says what is wrong */
            break;
        }
        at += size;
    }
    PyBuffer_Release(&buf);
    return PyLong_FromSsize_t(at);
}

/* ---------------------------------------------------------------------------------------------
 * transpose(rows, kinds): gathered rows (a list of tuples of len(kinds) values: rows.Gathered's)
 * as columns, each by its kind (a byte of `kinds`):
 *
 *   'i' int64, 'n' int32, 'f' float64, -> (validity, values, null count): Arrow's buffers (bool
 *   '?' bool                              values bit-packed)
 *   's' string, 'b' binary           -> (validity, int32 offsets, data, null count)
 *   'h' headers                      -> (int32 list offsets, keys, values): lists of {"key": str,
 *                                        "value": bytes} dicts (the messages table's headers, no
 *                                        null list), keys and values as 's' and 'b' give them
 *   'o'                              -> the column's values as a list
 *
 * None is null. A column holding anything else (another type, an int past its width, a str that is
 * not UTF-8, more than 2 GiB of data) is given as the list of its values, for tables.conform to
 * convert and note as it does the others: the rows' values are the same either way. */

/* A fixed-width column (kind 'i', 'n', 'f', '?') of column c, or NULL (no exception: the list). */
static PyObject *fixed_column(PyObject *rows, Py_ssize_t c, char kind, Py_ssize_t n) {
    Py_ssize_t bits = (n + 7) / 8, nulls = 0;
    PyObject *valid = PyBytes_FromStringAndSize(NULL, bits), *vals = NULL;
    if (!valid || !(vals = PyBytes_FromStringAndSize(NULL, kind == '?' ? bits : kind == 'n' ? 4 * n : 8 * n)))
        goto fail;
    unsigned char *vb = (unsigned char *)PyBytes_AS_STRING(valid), *xb = (unsigned char *)PyBytes_AS_STRING(vals);
    memset(vb, 0, bits);
    memset(xb, 0, PyBytes_GET_SIZE(vals));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(PyList_GET_ITEM(rows, i), c);
        if (v == Py_None) {
            nulls++;
            continue;
        }
        vb[i / 8] |= (unsigned char)(1 << (i % 8));
        if (kind == 'i' || kind == 'n') {
            int overflow;
            long long x = PyLong_CheckExact(v) ? PyLong_AsLongLongAndOverflow(v, &overflow) : (overflow = 1, 0);
            if (overflow || (x == -1 && PyErr_Occurred())) goto list;
            if (kind == 'i') {
                memcpy(xb + 8 * i, &x, 8);
                continue;
            }
            if (x < INT32_MIN || x > INT32_MAX) goto list;
            int32_t y = (int32_t)x;
            memcpy(xb + 4 * i, &y, 4);
        } else if (kind == 'f') {
            if (!PyFloat_CheckExact(v)) goto list;
            double x = PyFloat_AS_DOUBLE(v);
            memcpy(xb + 8 * i, &x, 8);
        } else if (v == Py_True) {
            xb[i / 8] |= (unsigned char)(1 << (i % 8));
        } else if (v != Py_False) {
            goto list;
        }
    }
    return Py_BuildValue("(NNn)", valid, vals, nulls);
list:
    PyErr_Clear();
fail:
    Py_XDECREF(valid);
    Py_XDECREF(vals);
    return NULL;
}

/* A string or binary column (kind 's', 'b') of column c, or NULL (no exception: the list). */
static PyObject *var_column(PyObject *rows, Py_ssize_t c, char kind, Py_ssize_t n) {
    Col col;
    if (col_init(&col, n)) {
        col_free(&col);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(PyList_GET_ITEM(rows, i), c);
        const char *p = NULL;
        Py_ssize_t len = -1;
        if (v != Py_None) {
            if (kind == 's' && PyUnicode_CheckExact(v)) p = PyUnicode_AsUTF8AndSize(v, &len);
            else if (kind == 'b' && PyBytes_CheckExact(v)) p = PyBytes_AS_STRING(v), len = PyBytes_GET_SIZE(v);
            if (!p) {
                PyErr_Clear();
                col_free(&col);
                return NULL;
            }
        }
        int rc = col_add(&col, (const unsigned char *)p, len);
        if (rc) {
            col_free(&col);
            return rc == -1 ? PyErr_NoMemory() : NULL;
        }
    }
    PyObject *out = col_tuple(&col);
    col_free(&col);
    return out;
}

/* A headers column (kind 'h') of column c, or NULL (no exception: the list). */
static PyObject *headers_column(PyObject *rows, Py_ssize_t c, Py_ssize_t n) {
    Buf offs = {0};
    Col keys, vals;
    int32_t at = 0;
    PyObject *out = NULL;
    int keys_bad = col_init(&keys, 0), vals_bad = col_init(&vals, 0); /* both: col_free frees both */
    int ok = !keys_bad && !vals_bad && !buf_put(&offs, &at, 4);
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(PyList_GET_ITEM(rows, i), c);
        if (!PyList_CheckExact(v)) {
            ok = 0;
            break;
        }
        for (Py_ssize_t j = 0; ok && j < PyList_GET_SIZE(v); j++) {
            PyObject *h = PyList_GET_ITEM(v, j), *k = NULL, *val = NULL;
            if (PyDict_CheckExact(h) && PyDict_GET_SIZE(h) == 2) {
                k = PyDict_GetItemWithError(h, header_key);
                val = k ? PyDict_GetItemWithError(h, header_value) : NULL;
            }
            Py_ssize_t klen;
            const char *kp = k && val && PyUnicode_CheckExact(k) && PyBytes_CheckExact(val)
                                 ? PyUnicode_AsUTF8AndSize(k, &klen)
                                 : NULL;
            ok = kp && at < INT32_MAX && !col_add(&keys, (const unsigned char *)kp, klen) &&
                 !col_add(&vals, (const unsigned char *)PyBytes_AS_STRING(val), PyBytes_GET_SIZE(val));
            at++;
        }
        if (ok) ok = !buf_put(&offs, &at, 4);
    }
    if (ok) out = Py_BuildValue("(NNN)", bytes_of(&offs), col_tuple(&keys), col_tuple(&vals));
    else PyErr_Clear(); /* the list: conform converts it and says what does not fit */
    free(offs.p);
    col_free(&keys);
    col_free(&vals);
    return out;
}

static PyObject *transpose(PyObject *self, PyObject *args) {
    PyObject *rows, *out = NULL;
    Py_buffer kinds;
    if (!PyArg_ParseTuple(args, "O!y*", &PyList_Type, &rows, &kinds)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(rows), m = kinds.len;
    const char *k = kinds.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(rows, i);
        if (!PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != m) {
            PyErr_SetString(PyExc_TypeError, "transpose: rows are tuples of len(kinds) values");
            goto done;
        }
    }
    if (!(out = PyList_New(m))) goto done;
    for (Py_ssize_t c = 0; c < m; c++) {
        PyObject *col = NULL;
        if (k[c] == 'i' || k[c] == 'n' || k[c] == 'f' || k[c] == '?') col = fixed_column(rows, c, k[c], n);
        else if (k[c] == 's' || k[c] == 'b') col = var_column(rows, c, k[c], n);
        else if (k[c] == 'h') col = headers_column(rows, c, n);
        else if (k[c] != 'o') {
            PyErr_Format(PyExc_ValueError, "transpose: unknown kind %c", k[c]);
            Py_CLEAR(out);
            goto done;
        }
        if (!col && PyErr_Occurred()) {
            Py_CLEAR(out);
            goto done;
        }
        if (!col && (col = PyList_New(n)))
            for (Py_ssize_t i = 0; i < n; i++)
                PyList_SET_ITEM(col, i, Py_NewRef(PyTuple_GET_ITEM(PyList_GET_ITEM(rows, i), c)));
        if (!col) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, c, col);
    }
done:
    PyBuffer_Release(&kinds);
    return out;
}

static PyMethodDef methods[] = {
    {"frame", frame, METH_VARARGS, "A TubeMQ frame's serial, block lengths and joined data, or None (see the module)."},
    {"envelope", envelope, METH_VARARGS, "The RPC envelope of a frame's joined data, or None (see the module)."},
    {"schema", schema, METH_O, "A table of messages' fields for body(), made once (see body)."},
    {"body", body, METH_VARARGS, "A method's message as a dict by a schema() table, or None (see the module)."},
    {"body_json", body_json, METH_VARARGS, "The details JSON of a body() dict, or None (see the module)."},
    {"read", read_frame, METH_VARARGS, "frame(), envelope() and body() of one frame (see the module)."},
    {"read_all", read_all, METH_VARARGS, "split() and read() of a chunk's whole frames in one call (see the module)."},
    {"transpose", transpose, METH_VARARGS, "Gathered rows as Arrow buffers or lists, column by column (see the module)."},
    {"frame_span", frame_span, METH_VARARGS, "A frame's (first, last) frame numbers from a frame index (see the module)."},
    {"fast_state", fast_state, METH_VARARGS, "exchanges()'s state, one per conversation (see exchanges)."},
    {"exchanges", (PyCFunction)(void (*)(void))exchanges, METH_FASTCALL,
     "The rows of the whole sendMessageP2B frames a chunk starts with (see the module)."},
    {"split", split, METH_VARARGS, "The sizes of the whole frames data starts with (see the module)."},
    {"details_spec", details_spec, METH_O, "A details spec of columns() read once (see columns)."},
    {"columns", columns, METH_VARARGS, "Many messages' payloads, errors, headers, checksums and details (see the module)."},
    {"message", message_parts, METH_VARARGS, "A message's attributes, payload, error and headers (see the module)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rpc", "TubeMQ frames, RPC envelopes, method bodies and messages.", -1, methods};

PyMODINIT_FUNC PyInit__rpc(void) {
    if (!(header_key = PyUnicode_InternFromString("key")) || !(header_value = PyUnicode_InternFromString("value")) ||
        !(comma = PyUnicode_InternFromString(",")))
        return NULL;
    static const char *conn_texts[] = {NULL, "flag", "traceId", "spanId", "parentId"};
    for (int f = 1; f <= 4; f++)
        if (!(conn_names[f] = PyUnicode_InternFromString(conn_texts[f]))) return NULL;
    if (!(close_brace = PyUnicode_InternFromString("}"))) return NULL;
    for (int i = 0; i < N_NAMES; i++)
        if (!(names[i] = PyUnicode_InternFromString(fast_names[i]))) return NULL;
    return PyModule_Create(&module);
}
