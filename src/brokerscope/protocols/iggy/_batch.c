/* The messages of an Iggy batch record (the VSR generation, apache-iggy 0.9), read column-wise:
 * the decoder's per-message loop.
 *
 * walk(buf, pos, end, count, xxh3, sums) reads the batch record at `pos` (within `end`), checking
 * its XXH3-64 checksums with `xxh3`: the address of the xxhash library's XXH3_64bits (an int, called
 * directly), or a Python callable taking a buffer, or None (not checked); `sums` (optional, true)
 * false leaves each message's checksum out of its details and summary (payload-derived: a payload
 * policy other than keep),
 *
 *   batch header (256 bytes, little-endian): partition_id u64 @0 | base_offset u64 @8 |
 *     base_timestamp u64 @16 | origin_timestamp u64 @24 | batch_length u64 @32 (header included) |
 *     batch_checksum u64 @40 | message_count u32 @48 | reserved, zero, @52..256
 *   message frame: checksum u64 @0 | id u128 @8 | offset_delta u32 @24 | timestamp_delta u32 @28 |
 *     user_headers_length u32 @32 | payload_length u32 @36 | reserved u64 @40 (zero) |
 *     payload | user headers
 *
 * and returns
 *
 *   (partition_id, base_offset, base_timestamp, origin_timestamp, batch_length, batch_checksum,
 *    message_count, batch_checksum_ok, next, ids, payloads, offsets, checksum_ok, ts_ns, details,
 *    summaries, header_index, header_blobs)
 *
 * with one entry per message in each column: ids (decimal text of the u128), payloads and details
 * as the (offsets, data) buffers of an Arrow string / binary array; offsets (base_offset + delta),
 * checksum_ok and ts_ns as lists: checksum_ok None where the checksum is 0 (or `xxh3` is None),
 * else whether XXH3-64 of the frame after its checksum field matches; ts_ns the message time in ns
 * (the server's base_timestamp, else origin_timestamp + delta, in µs x 1000; None without either).
 * details and summaries are the texts messages.Messages documents (the messages row's details,
 * the message's entry in its frame's commands row); summaries come as one string, the entries
 * joined by commas. A message with user headers: its index in header_index, its blob in
 * header_blobs, and its details start after the headers list (`]...`): the caller writes the
 * headers' JSON before it. batch_checksum_ok: None where the batch checksum is 0, else XXH3-64 of
 * the header fields (u64 x 5, count u32) and each message's checksum field in order.
 *
 * Anything messages.parse_batch_v48 would reject, or read into values this walk does not write
 * (a sum past 2^64, a time past 2^64 ns), returns None, and the caller runs that reader, which
 * says what is wrong: a header or message cut short, a batch length outside the data, reserved
 * bytes not zero, a count other than `count` (-1: any) or than the messages found, user headers
 * that fit neither layout (wire.user_headers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../arrowbuf.h" /* Buf, Col, put_u64 */

#define BATCH_HEADER 256
#define FRAME_HEADER 48
#define COUNT_AT 48
#define RESERVED_AT 52
#define MIN_HEADER_KIND 1 /* user header kinds: codes.HEADER_KINDS, 1 (raw) .. 15 (float64) */
#define MAX_HEADER_KIND 15

static uint64_t u64le(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t u32le(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static void put64le(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* `lit` (a string literal) at out; its length. */
#define PUT_LIT(out, lit) (memcpy((out), (lit), sizeof(lit) - 1), (int)(sizeof(lit) - 1))

#define E19 10000000000000000000ULL /* the largest power of ten below 2^64 */

/* v (below E19) as exactly 19 digits at out, leading zeros included. */
static void put_u64_19(char *out, uint64_t v) {
    for (int i = 18; i >= 0; i--) {
        out[i] = (char)('0' + v % 10);
        v /= 10;
    }
}

/* The u128 at p (little-endian) in decimal into out (at least 40 bytes, NUL-terminated); its
 * length. Cut into base-10^19 parts: the top one (2^128 / 10^38 is below 4) and the middle one
 * plainly where nothing comes before them, the others with their leading zeros. */
static int u128_text(const unsigned char *p, char *out) {
    unsigned __int128 v = ((unsigned __int128)u64le(p + 8) << 64) | u64le(p);
    uint64_t low = (uint64_t)(v % E19);
    v /= E19;
    uint64_t mid = (uint64_t)(v % E19), top = (uint64_t)(v / E19);
    int n = 0;
    if (top) {
        n = put_u64(out, top);
        put_u64_19(out + n, mid);
        n += 19;
    } else if (mid) {
        n = put_u64(out, mid);
    }
    if (n) {
        put_u64_19(out + n, low);
        n += 19;
    } else {
        n = put_u64(out, low);
    }
    out[n] = 0;
    return n;
}

/* Entries of a user-headers blob in one layout (wire.user_headers: [key kind u8, if typed]
 * [key length u32][key][value kind u8][value length u32][value], repeated), or -1 where the blob
 * does not fit it. */
static Py_ssize_t header_count(const unsigned char *p, Py_ssize_t n, int typed) {
    Py_ssize_t pos = 0, count = 0;
    while (pos < n) {
        if (typed) {
            unsigned char kk = p[pos++];
            if (kk < MIN_HEADER_KIND || kk > MAX_HEADER_KIND) return -1;
        }
        if (n - pos < 4) return -1;
        uint32_t len = u32le(p + pos);
        pos += 4;
        if ((uint64_t)len > (uint64_t)(n - pos)) return -1;
        pos += len;
        if (n - pos < 5) return -1;
        unsigned char kind = p[pos];
        len = u32le(p + pos + 1);
        pos += 5;
        if (kind < MIN_HEADER_KIND || kind > MAX_HEADER_KIND || (uint64_t)len > (uint64_t)(n - pos)) return -1;
        pos += len;
        count++;
    }
    return count;
}

/* XXH3_64bits(data, length) of the xxhash library, where the caller gives its address. */
typedef uint64_t (*xxh3_fn)(const void *, size_t);

/* The XXH3-64 of the bytes at p (n) == want: 1, 0, or -1 (an error set). `direct`, when set,
 * is the library's function, called here; else `xxh3` is a Python callable taking a buffer. */
static int xxh3_matches(xxh3_fn direct, PyObject *xxh3, const unsigned char *p, Py_ssize_t n, uint64_t want) {
    if (direct) return direct(p, (size_t)n) == want;
    PyObject *view = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ);
    if (!view) return -1;
    PyObject *got = PyObject_CallOneArg(xxh3, view);
    Py_DECREF(view);
    if (!got) return -1;
    unsigned long long v = PyLong_AsUnsignedLongLong(got);
    Py_DECREF(got);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    return v == want;
}

/* Append `o` (a new reference, NULL on error) to list `l`: 0 or -1. */
static int put(PyObject *l, PyObject *o) {
    if (!o) return -1;
    int r = PyList_Append(l, o);
    Py_DECREF(o);
    return r;
}

static PyObject *bool_or_none(int v) {
    PyObject *o = v < 0 ? Py_None : v ? Py_True : Py_False;
    Py_INCREF(o);
    return o;
}

enum { OFFSETS, OKS, TS_NS, HINDEX, HBLOBS, NCOLS };
enum { IDS, PAYLOADS, DETAILS, NTEXT };

static PyObject *walk(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t pos, end;
    long long count;
    PyObject *xxh3;
    int with_sums = 1;
    if (!PyArg_ParseTuple(args, "y*nnLO|p", &buf, &pos, &end, &count, &xxh3, &with_sums)) return NULL;
    PyObject *cols[NCOLS] = {0};
    Col text_cols[NTEXT] = {{{0}}};
    Buf sums_text = {0}; /* the summaries joined by commas */
    PyObject *result = NULL;
    unsigned char *sums = NULL;
    const unsigned char *b = buf.buf;
    xxh3_fn direct = NULL;
    if (xxh3 == Py_None) {
        xxh3 = NULL;
    } else if (PyLong_Check(xxh3)) {
        direct = (xxh3_fn)PyLong_AsVoidPtr(xxh3);
        if (!direct) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a null XXH3 function address");
            PyBuffer_Release(&buf);
            return NULL;
        }
    }
    if (pos < 0 || end > buf.len || pos > end || end - pos < BATCH_HEADER) goto not_plain;
    const unsigned char *h = b + pos;
    uint64_t pid = u64le(h), base_offset = u64le(h + 8), base_ts = u64le(h + 16), origin_ts = u64le(h + 24);
    uint64_t length = u64le(h + 32), checksum = u64le(h + 40);
    uint32_t n = u32le(h + COUNT_AT);
    if (length < BATCH_HEADER || length > (uint64_t)(end - pos)) goto not_plain;
    /* the text columns' int32 offsets: a record's texts are under 4 x its bytes (a 48-byte frame
     * header per message), so larger records (past 256 MiB) go to the Python reader */
    if (length > INT32_MAX / 8) goto not_plain;
    for (int i = RESERVED_AT; i < BATCH_HEADER; i++)
        if (h[i]) goto not_plain;
    if (count >= 0 && (uint64_t)count != n) goto not_plain;
    Py_ssize_t stop = pos + (Py_ssize_t)length;
    /* the batch checksum's input: the header fields, then each message's checksum field */
    sums = PyMem_Malloc(44 + 8 * (size_t)((length - BATCH_HEADER) / FRAME_HEADER + 1));
    if (!sums) {
        PyErr_NoMemory();
        goto done;
    }
    put64le(sums, pid);
    put64le(sums + 8, base_offset);
    put64le(sums + 16, base_ts);
    put64le(sums + 24, origin_ts);
    put64le(sums + 32, length);
    memcpy(sums + 40, h + COUNT_AT, 4);
    for (int c = 0; c < NCOLS; c++)
        if (!(cols[c] = PyList_New(0))) goto done;
    for (int c = 0; c < NTEXT; c++)
        /* room for as many messages as the record's bytes can hold, whatever its count says */
        if (col_init(&text_cols[c], (Py_ssize_t)((length - BATCH_HEADER) / FRAME_HEADER))) goto no_memory;
    Py_ssize_t p = pos + BATCH_HEADER, found = 0;
    char text[512], id[41];
    while (p < stop) {
        if ((uint64_t)found >= n || stop - p < FRAME_HEADER) goto not_plain;
        const unsigned char *m = b + p;
        uint64_t msum = u64le(m);
        uint32_t delta = u32le(m + 24), ts_delta = u32le(m + 28), hlen = u32le(m + 32), plen = u32le(m + 36);
        if (u64le(m + 40)) goto not_plain;
        Py_ssize_t body = p + FRAME_HEADER;
        if ((uint64_t)plen + hlen > (uint64_t)(stop - body)) goto not_plain;
        Py_ssize_t mstop = body + plen + hlen;
        Py_ssize_t headers = 0;
        if (hlen) {
            headers = header_count(b + body + plen, hlen, 0);
            if (headers < 0) headers = header_count(b + body + plen, hlen, 1);
            if (headers < 0) goto not_plain;
        }
        uint64_t offset = base_offset + delta;
        if (offset < base_offset) goto not_plain;
        uint64_t origin = origin_ts + ts_delta; /* only where origin_ts is set */
        if (origin_ts && origin < origin_ts) goto not_plain;
        uint64_t t = base_ts ? base_ts : origin_ts ? origin : 0;
        if (t > UINT64_MAX / 1000) goto not_plain;
        int ok = -1;
        if (msum && xxh3 && (ok = xxh3_matches(direct, xxh3, m + 8, mstop - p - 8, msum)) < 0) goto done;
        memcpy(sums + 44 + 8 * found, m, 8);
        int id_len = u128_text(m + 8, id);
        /* details: {"headers":[...],"origin_timestamp":..,"timestamp":..,"checksum":..,"header_size":48} */
        int k = hlen ? PUT_LIT(text, "]") : PUT_LIT(text, "{\"headers\":[]");
        if (origin_ts) {
            k += PUT_LIT(text + k, ",\"origin_timestamp\":");
            k += put_u64(text + k, origin);
        }
        if (base_ts) {
            k += PUT_LIT(text + k, ",\"timestamp\":");
            k += put_u64(text + k, base_ts);
        }
        if (with_sums) {
            k += PUT_LIT(text + k, ",\"checksum\":");
            k += put_u64(text + k, msum);
        }
        k += PUT_LIT(text + k, ",\"header_size\":");
        k += put_u64(text + k, FRAME_HEADER);
        text[k++] = '}';
        if (col_add(&text_cols[DETAILS], (const unsigned char *)text, k)) goto no_memory;
        /* summary: {"id":"..","payload_size":..,"headers":..,"offset":..,"checksum":..[,"checksum_ok":..]} */
        k = PUT_LIT(text, "{\"id\":\"");
        memcpy(text + k, id, id_len);
        k += id_len;
        k += PUT_LIT(text + k, "\",\"payload_size\":");
        k += put_u64(text + k, plen);
        k += PUT_LIT(text + k, ",\"headers\":");
        k += put_u64(text + k, (uint64_t)headers);
        k += PUT_LIT(text + k, ",\"offset\":");
        k += put_u64(text + k, offset);
        if (with_sums) {
            k += PUT_LIT(text + k, ",\"checksum\":");
            k += put_u64(text + k, msum);
        }
        if (ok >= 0) k += ok ? PUT_LIT(text + k, ",\"checksum_ok\":true") : PUT_LIT(text + k, ",\"checksum_ok\":false");
        text[k++] = '}';
        if ((found && buf_put(&sums_text, ",", 1)) || buf_put(&sums_text, text, k) ||
            col_add(&text_cols[IDS], (const unsigned char *)id, id_len) || col_add(&text_cols[PAYLOADS], b + body, plen))
            goto no_memory;
        if (put(cols[OFFSETS], PyLong_FromUnsignedLongLong(offset)) || put(cols[OKS], bool_or_none(ok)) ||
            put(cols[TS_NS], t ? PyLong_FromUnsignedLongLong(t * 1000) : (Py_INCREF(Py_None), Py_None)))
            goto done;
        if (hlen && (put(cols[HINDEX], PyLong_FromSsize_t(found)) ||
                     put(cols[HBLOBS], PyBytes_FromStringAndSize((const char *)b + body + plen, hlen))))
            goto done;
        found++;
        p = mstop;
    }
    if ((uint64_t)found != n) goto not_plain;
    int batch_ok = -1;
    if (checksum && xxh3 && (batch_ok = xxh3_matches(direct, xxh3, sums, 44 + 8 * found, checksum)) < 0) goto done;
    PyObject *ids = col_tuple(&text_cols[IDS]), *payloads = col_tuple(&text_cols[PAYLOADS]);
    PyObject *details = col_tuple(&text_cols[DETAILS]);
    PyObject *summaries = PyUnicode_DecodeASCII(sums_text.p ? sums_text.p : "", sums_text.len, NULL);
    if (ids && payloads && details && summaries)
        result = Py_BuildValue("(KKKKKKIOnOOOOOOOOO)", (unsigned long long)pid, (unsigned long long)base_offset,
                               (unsigned long long)base_ts, (unsigned long long)origin_ts, (unsigned long long)length,
                               (unsigned long long)checksum, (unsigned int)n,
                               batch_ok < 0 ? Py_None : batch_ok ? Py_True : Py_False, stop, ids, payloads,
                               cols[OFFSETS], cols[OKS], cols[TS_NS], details, summaries, cols[HINDEX], cols[HBLOBS]);
    Py_XDECREF(ids);
    Py_XDECREF(payloads);
    Py_XDECREF(details);
    Py_XDECREF(summaries);
    goto done;
no_memory:
    PyErr_NoMemory();
    goto done;
not_plain:
    result = Py_None;
    Py_INCREF(result);
done:
    for (int c = 0; c < NCOLS; c++) Py_XDECREF(cols[c]);
    for (int c = 0; c < NTEXT; c++) col_free(&text_cols[c]);
    free(sums_text.p);
    PyMem_Free(sums);
    PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "The messages of an Iggy batch record as columns, or None (see the module)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_batch", "Iggy batch records, read column-wise.", -1, methods};

PyMODINIT_FUNC PyInit__batch(void) { return PyModule_Create(&module); }
