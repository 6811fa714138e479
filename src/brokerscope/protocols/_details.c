/* The `details` column's JSON text (base.to_json) written in one C pass.
 *
 * base.to_json serialises decoded fields with json's C encoder (separators "," and ":", non-ASCII
 * kept, NaN allowed, `default` base._jsonable for bytes, sets and the rest): a new str object for
 * every key, number and string it writes, joined at the end. dumps writes the same text into one
 * buffer. Written as json writes them:
 *
 *   None, True, False       null, true, false
 *   str (and subclasses)    escaped as encode_basestring escapes it (jsontext.h)
 *   int (not bool)          int.__repr__
 *   float                   float.__repr__; NaN, Infinity, -Infinity
 *   list, tuple             [a,b]
 *   dict                    {"k":v} in the dict's order; keys str, int, float, True/False/None
 *   anything else           default(value), then that
 *
 * What this does not write as json would (a str holding a lone surrogate, which has no UTF-8; a
 * key of another type, which json refuses; nesting deeper than MAX_DEPTH) gives None: the caller
 * runs json's encoder, which gives its own text or error. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>

#include "arrowbuf.h" /* Buf, put_decimal */
#include "jsontext.h" /* json_put_str */

enum { OK = 0, NOT_PLAIN = 1, PY_ERROR = -1, NOMEM = -3 };
#define MAX_DEPTH 200 /* json's own limit is the interpreter's recursion limit */

static int put_text(Buf *b, const char *s, Py_ssize_t n) { return buf_put(b, s, n) ? NOMEM : OK; }

static int put_str(Buf *b, PyObject *s) {
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (!u) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return PY_ERROR;
        PyErr_Clear(); /* a lone surrogate: json writes it as it is into the str */
        return NOT_PLAIN;
    }
    return json_put_str(b, u, n) ? NOMEM : OK;
}

/* The text of `repr` (int.__repr__ or float.__repr__) of v. */
static int put_repr(Buf *b, reprfunc repr, PyObject *v) {
    PyObject *r = repr(v);
    if (!r) return PY_ERROR;
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(r, &n);
    int rc = u ? put_text(b, u, n) : PY_ERROR;
    Py_DECREF(r);
    return rc;
}

static int put_int(Buf *b, PyObject *v) {
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) return PY_ERROR;
    if (overflow) return put_repr(b, PyLong_Type.tp_repr, v);
    if (buf_reserve(b, 21)) return NOMEM;
    b->len += put_decimal(b->p + b->len, x);
    return OK;
}

static int put_float(Buf *b, PyObject *v) {
    double x = PyFloat_AS_DOUBLE(v);
    if (isnan(x)) return put_text(b, "NaN", 3);
    if (isinf(x)) return x > 0 ? put_text(b, "Infinity", 8) : put_text(b, "-Infinity", 9);
    return put_repr(b, PyFloat_Type.tp_repr, v);
}

static int put_value(Buf *b, PyObject *v, PyObject *dflt, int depth);

/* A key as json writes it: a str escaped, the scalars it turns into text first. */
static int put_key(Buf *b, PyObject *k) {
    if (PyUnicode_Check(k)) return put_str(b, k);
    int rc;
    Buf t = {0};
    if (k == Py_True || k == Py_False || k == Py_None) {
        const char *s = k == Py_True ? "true" : k == Py_False ? "false" : "null";
        rc = put_text(&t, s, (Py_ssize_t)strlen(s));
    } else if (PyFloat_Check(k)) {
        rc = put_float(&t, k);
    } else if (PyLong_Check(k)) {
        rc = put_int(&t, k);
    } else {
        return NOT_PLAIN; /* json raises TypeError: let it */
    }
    if (rc == OK) rc = json_put_str(b, t.p, t.len) ? NOMEM : OK;
    free(t.p);
    return rc;
}

static int put_dict(Buf *b, PyObject *d, PyObject *dflt, int depth) {
    PyObject *items = NULL, *k, *v;
    Py_ssize_t pos = 0, i = 0, n;
    int rc = put_text(b, "{", 1);
    if (rc) return rc;
    if (!PyDict_CheckExact(d)) { /* a subclass: its items(), as json asks for them */
        if (!(items = PyMapping_Items(d))) return PY_ERROR;
        n = PyList_GET_SIZE(items);
    } else {
        n = PyDict_GET_SIZE(d);
    }
    for (Py_ssize_t at = 0; at < n; at++) {
        if (items) {
            PyObject *kv = PyList_GET_ITEM(items, at);
            if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2) {
                rc = NOT_PLAIN;
                break;
            }
            k = PyTuple_GET_ITEM(kv, 0);
            v = PyTuple_GET_ITEM(kv, 1);
        } else if (!PyDict_Next(d, &pos, &k, &v)) {
            break;
        }
        Py_INCREF(k);
        Py_INCREF(v); /* default() runs Python code: keep both alive */
        if (i++) rc = put_text(b, ",", 1);
        if (rc == OK) rc = put_key(b, k);
        if (rc == OK) rc = put_text(b, ":", 1);
        if (rc == OK) rc = put_value(b, v, dflt, depth + 1);
        Py_DECREF(k);
        Py_DECREF(v);
        if (rc) break;
    }
    Py_XDECREF(items);
    return rc ? rc : put_text(b, "}", 1);
}

static int put_seq(Buf *b, PyObject *s, PyObject *dflt, int depth) {
    /* a list or tuple (or subclass): its items, held while written (default() may run) */
    PyObject *fast = PySequence_Fast(s, "not a sequence");
    if (!fast) return PY_ERROR;
    int rc = put_text(b, "[", 1);
    for (Py_ssize_t i = 0; rc == OK && i < PySequence_Fast_GET_SIZE(fast); i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(fast, i);
        Py_INCREF(v);
        if (i) rc = put_text(b, ",", 1);
        if (rc == OK) rc = put_value(b, v, dflt, depth + 1);
        Py_DECREF(v);
    }
    Py_DECREF(fast);
    return rc ? rc : put_text(b, "]", 1);
}

static int put_value(Buf *b, PyObject *v, PyObject *dflt, int depth) {
    if (depth > MAX_DEPTH) return NOT_PLAIN;
    if (v == Py_None) return put_text(b, "null", 4);
    if (v == Py_True) return put_text(b, "true", 4);
    if (v == Py_False) return put_text(b, "false", 5);
    if (PyUnicode_Check(v)) return put_str(b, v);
    if (PyLong_Check(v)) return put_int(b, v);
    if (PyFloat_Check(v)) return put_float(b, v);
    if (PyList_Check(v) || PyTuple_Check(v)) return put_seq(b, v, dflt, depth);
    if (PyDict_Check(v)) return put_dict(b, v, dflt, depth);
    PyObject *nv = PyObject_CallOneArg(dflt, v);
    if (!nv) return PY_ERROR;
    int rc = put_value(b, nv, dflt, depth + 1);
    Py_DECREF(nv);
    return rc;
}

/* dumps(value, default): the JSON text of value as base.to_json writes it, or None where json's
 * encoder must say (see the top of this file). */
static PyObject *dumps(PyObject *self, PyObject *args) {
    PyObject *v, *dflt, *out = NULL;
    if (!PyArg_ParseTuple(args, "OO:dumps", &v, &dflt)) return NULL;
    Buf b = {0};
    int rc = put_value(&b, v, dflt, 0);
    if (rc == OK) out = PyUnicode_DecodeUTF8(b.p ? b.p : "", b.len, NULL);
    else if (rc == NOT_PLAIN) out = Py_NewRef(Py_None);
    else if (rc == NOMEM) PyErr_NoMemory();
    free(b.p);
    return out;
}

static PyMethodDef METHODS[] = {
    {"dumps", dumps, METH_VARARGS, "dumps(value, default): base.to_json's text, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_details", "The details column's JSON text.", -1, METHODS};

PyMODINIT_FUNC PyInit__details(void) { return PyModule_Create(&MODULE); }
