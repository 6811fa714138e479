/* Growable byte buffers and Arrow binary / string columns (validity bitmap, int32 offsets, data)
 * written by the compiled walks (kafka/_records.c, pulsar/_batch.c, iggy/_batch.c) and handed to
 * Python as bytes, which pyarrow wraps with Array.from_buffers; decimal text (two digits per
 * division) and the text column prefix + decimal + suffix. tubemq/_rpc.c writes its JSON text
 * into a Buf with put_decimal.
 * Static inline: each module gets its own copy. */
#ifndef BROKERSCOPE_ARROWBUF_H
#define BROKERSCOPE_ARROWBUF_H

#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static inline int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    char *p = realloc(b->p, (size_t)cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static inline PyObject *bytes_of(Buf *b) { return PyBytes_FromStringAndSize(b->p ? b->p : "", b->len); }

/* A binary column: validity bitmap, int32 offsets, data. */
typedef struct {
    Buf valid, offs, data;
    Py_ssize_t n, nulls;
} Col;

static inline int col_init(Col *c, Py_ssize_t rows) {
    memset(c, 0, sizeof *c);
    int32_t zero = 0;
    if (buf_reserve(&c->valid, rows / 8 + 1) || buf_reserve(&c->offs, (rows + 1) * 4)) return -1;
    return buf_put(&c->offs, &zero, 4);
}

/* One value of n bytes at src (n < 0: null): 0, -1 (no memory) or -2 (past 2 GiB of data). */
static inline int col_add(Col *c, const unsigned char *src, int64_t n) {
    Py_ssize_t i = c->n;
    if (buf_reserve(&c->valid, i / 8 + 1)) return -1;
    if (i % 8 == 0) c->valid.p[i / 8] = 0;
    if (n >= 0) {
        c->valid.p[i / 8] |= (char)(1 << (i % 8));
        if (c->data.len + n > INT32_MAX) return -2;
        if (buf_put(&c->data, src, (Py_ssize_t)n)) return -1;
    } else {
        c->nulls++;
    }
    c->valid.len = i / 8 + 1;
    int32_t end = (int32_t)c->data.len;
    c->n++;
    return buf_put(&c->offs, &end, 4);
}

static inline void col_free(Col *c) {
    free(c->valid.p);
    free(c->offs.p);
    free(c->data.p);
}

/* (validity, offsets, data, null count): what Python's from_buffers wrappers take. */
static inline PyObject *col_tuple(Col *c) {
    return Py_BuildValue("(NNNn)", bytes_of(&c->valid), bytes_of(&c->offs), bytes_of(&c->data), c->nulls);
}

/* "00" .. "99": two decimal digits per division */
static const char DIGIT_PAIRS[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* The decimal digits of v at out (at least 20 bytes); their number. */
static inline int put_u64(char *out, uint64_t v) {
    char digits[20];
    int at = 20;
    while (v >= 100) {
        unsigned pair = (unsigned)(v % 100) * 2;
        v /= 100;
        digits[--at] = DIGIT_PAIRS[pair + 1];
        digits[--at] = DIGIT_PAIRS[pair];
    }
    if (v >= 10) {
        digits[--at] = DIGIT_PAIRS[v * 2 + 1];
        digits[--at] = DIGIT_PAIRS[v * 2];
    } else {
        digits[--at] = (char)('0' + v);
    }
    memcpy(out, digits + at, 20 - at);
    return 20 - at;
}

/* The decimal digits of v at out (at least 20 bytes, a sign and 19 digits); their number. */
static inline Py_ssize_t put_decimal(char *out, int64_t v) {
    if (v >= 0) return put_u64(out, (uint64_t)v);
    out[0] = '-';
    return 1 + put_u64(out + 1, (uint64_t)0 - (uint64_t)v);
}

/* A prefix of the text column `decimal_runs` writes: `len` bytes at `p`, for the next `count` values. */
typedef struct {
    const char *p;
    Py_ssize_t len;
    int32_t count;
} Prefix;

/* The strings prefix + str(v) + suffix for n values appended to the buffers offs (int32 offsets:
 * the first 0 written where offs is empty, then one per value) and data of an Arrow string
 * column, each run of values with its own prefix (the runs' counts add up to n): v = values[i],
 * or first + i when values is NULL (the caller keeps first + n in int64). 0, or -1 with an error
 * set (the buffers then hold nothing more to use). */
static inline int decimal_runs(Buf *offs, Buf *data, const Prefix *runs, Py_ssize_t nruns, const int64_t *values,
                               int64_t first, Py_ssize_t n, const char *suffix, Py_ssize_t suffix_len) {
    Py_ssize_t longest = 0;
    for (Py_ssize_t r = 0; r < nruns; r++)
        if (runs[r].len > longest) longest = runs[r].len;
    Py_ssize_t each = longest + 21 + suffix_len; /* 21: sign and 20 digits at the most */
    if (n < 0 || (n && each > (INT32_MAX - 1 - data->len) / n)) {
        PyErr_SetString(PyExc_ValueError, "strings of more than 2 GiB");
        return -1;
    }
    Py_ssize_t had = offs->len ? offs->len / 4 - 1 : 0; /* strings already in the column */
    if (buf_reserve(offs, (had + n + 1) * 4 - offs->len) || buf_reserve(data, n * each)) {
        PyErr_NoMemory();
        return -1;
    }
    int32_t *o = (int32_t *)offs->p + had;
    char *d = data->p;
    Py_ssize_t at = data->len, i = 0;
    o[0] = (int32_t)at;
    for (Py_ssize_t r = 0; r < nruns; r++) {
        for (int32_t k = 0; k < runs[r].count; k++, i++) {
            memcpy(d + at, runs[r].p, (size_t)runs[r].len);
            at += runs[r].len;
            at += put_decimal(d + at, values ? values[i] : first + (int64_t)i);
            memcpy(d + at, suffix, (size_t)suffix_len);
            at += suffix_len;
            o[i + 1] = (int32_t)at;
        }
    }
    offs->len = (had + n + 1) * 4;
    data->len = at;
    return 0;
}

/* decimal_runs with one prefix for all n values, as (offsets, data) bytes. */
static inline PyObject *decimal_column(const Py_buffer *prefix, const int64_t *values, int64_t first, Py_ssize_t n,
                                       const Py_buffer *suffix) {
    Buf offs = {0}, data = {0};
    PyObject *res = NULL;
    Prefix run = {prefix->buf, prefix->len, (int32_t)n};
    if (n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "strings of more than 2 GiB");
        return NULL;
    }
    if (!decimal_runs(&offs, &data, &run, 1, values, first, n, suffix->buf, suffix->len))
        res = Py_BuildValue("(NN)", bytes_of(&offs), bytes_of(&data));
    free(offs.p);
    free(data.p);
    return res;
}

#endif
