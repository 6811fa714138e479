/* The stream driver's lane, compiled: TcpConnection.take over a run of packets.
 *
 * run(cols, k, end, tcp, key, cid) walks the packets cols[..][k:end] (the column lists
 * StreamDriver._columns gives, in its order) while each one is a packet `take` would accept for
 * the connection `tcp` (a TcpConnection) of 4-tuple `key` in capture `cid`: the same 4-tuple and
 * capture, its payload all there (bytes of payload_len, not snap-truncated), and take's own
 * tests (within the idle timeout, no packets of the connection held for bytes they acknowledge
 * (_held, None when none), no SYN/FIN/RST, at its direction's next sequence number with nothing held, nothing left to record
 * in the direction's state or history, an ACK that declares no gap and a window that is not
 * zero). It updates `tcp` as `take` would for each
 * packet taken, and stops at the first packet take would refuse, without touching it.
 *
 * Returns (j, groups): the packets k..j-1 were taken; groups, in order, the packets among them
 * that carry payload, as (from_lo, [index, ...]) per run of one direction: what the driver feeds
 * the decoder as one run of bytes each (pure ACKs between them change nothing a decoder sees).
 *
 * take (tcp/connection.py) stays the reference: tests/unit/test_driver_lane.py holds the two to
 * the same connections and rows.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* StreamDriver._columns' order */
enum { C_LO_IP, C_LO_P, C_HI_IP, C_HI_P, C_TS, C_FROM_LO, C_SEQ, C_ACK, C_FLAGS, C_WIN,
       C_PL, C_PLEN, C_WL, C_ST, C_FI, C_CID, C_AT, C_NO, N_COLS };

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10
#define MASK32 0xFFFFFFFFLL
#define MAX_ACK_AHEAD (1LL << 30) /* reassembly.MAX_ACK_AHEAD */
/* Direction.watch bits (connection.py) */
#define W_INACTIVE 1
#define W_ACK 2
#define W_DATA 4
#define WATCH_EMPTY (W_INACTIVE | W_ACK)
#define WATCH_DATA (W_INACTIVE | W_DATA)

/* attribute names, interned once */
static PyObject *s_lo, *s_hi, *s_reasm, *s_nseq, *s_blocked, *s_watch, *s_pwz, *s_last_ts, *s_held,
    *s_idle, *s_packets, *s_payload_bytes, *s_frame_bytes, *s_next_off, *s_delivered, *s_probes;

/* One direction: what take reads, and what it adds. */
typedef struct {
    PyObject *dir, *reasm; /* owned */
    long long nseq;
    int blocked;
    long watch;
    int pwz, pwz0; /* peer_window_zero now, and as it was */
    long long packets, payload, frame_bytes, probes; /* added by the packets taken */
} Side;

static int get_ll(PyObject *o, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int get_bool(PyObject *o, PyObject *name, int *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL)
        return -1;
    *out = PyObject_IsTrue(v);
    Py_DECREF(v);
    return *out < 0 ? -1 : 0;
}

static int add_ll(PyObject *o, PyObject *name, long long n) {
    long long v;
    if (!n)
        return 0;
    if (get_ll(o, name, &v) < 0)
        return -1;
    PyObject *w = PyLong_FromLongLong(v + n);
    if (w == NULL)
        return -1;
    int rc = PyObject_SetAttr(o, name, w);
    Py_DECREF(w);
    return rc;
}

static int side_load(Side *s, PyObject *tcp, PyObject *name) {
    long long watch;
    memset(s, 0, sizeof *s);
    s->dir = PyObject_GetAttr(tcp, name);
    if (s->dir == NULL)
        return -1;
    s->reasm = PyObject_GetAttr(s->dir, s_reasm);
    if (s->reasm == NULL)
        return -1;
    if (get_ll(s->reasm, s_nseq, &s->nseq) < 0 || get_bool(s->reasm, s_blocked, &s->blocked) < 0 ||
        get_ll(s->dir, s_watch, &watch) < 0 || get_bool(s->reasm, s_pwz, &s->pwz) < 0)
        return -1;
    s->watch = (long)watch;
    s->pwz0 = s->pwz;
    return 0;
}

static int side_store(Side *s) {
    if (s->packets) {
        PyObject *nseq = PyLong_FromLongLong(s->nseq);
        if (nseq == NULL)
            return -1;
        int rc = PyObject_SetAttr(s->reasm, s_nseq, nseq);
        Py_DECREF(nseq);
        if (rc < 0 || add_ll(s->dir, s_packets, s->packets) < 0 ||
            add_ll(s->dir, s_payload_bytes, s->payload) < 0 ||
            add_ll(s->dir, s_frame_bytes, s->frame_bytes) < 0 ||
            add_ll(s->reasm, s_next_off, s->payload) < 0 ||
            add_ll(s->reasm, s_delivered, s->payload) < 0 ||
            add_ll(s->reasm, s_probes, s->probes) < 0)
            return -1;
    }
    if (s->pwz != s->pwz0 && PyObject_SetAttr(s->reasm, s_pwz, s->pwz ? Py_True : Py_False) < 0)
        return -1;
    return 0;
}

static void side_free(Side *s) {
    Py_XDECREF(s->dir);
    Py_XDECREF(s->reasm);
}

static inline int same(PyObject *a, PyObject *b) {
    return a == b || PyObject_RichCompareBool(a, b, Py_EQ) == 1;
}

static inline int as_ll(PyObject *o, long long *out) {
    *out = PyLong_AsLongLong(o);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *lane_run(PyObject *self, PyObject *args) {
    PyObject *cols, *tcp, *key, *cid;
    Py_ssize_t k, end;
    if (!PyArg_ParseTuple(args, "O!nnOO!O", &PyTuple_Type, &cols, &k, &end, &tcp, &PyTuple_Type, &key,
                          &cid))
        return NULL;
    if (PyTuple_GET_SIZE(cols) != N_COLS || PyTuple_GET_SIZE(key) != 4) {
        PyErr_SetString(PyExc_ValueError, "run: cols of StreamDriver._columns and a 4-tuple key");
        return NULL;
    }
    PyObject *col[N_COLS];
    for (int c = 0; c < N_COLS; c++) {
        col[c] = PyTuple_GET_ITEM(cols, c);
        if (c != C_AT && !PyList_Check(col[c])) {
            PyErr_Format(PyExc_TypeError, "run: column %d is not a list", c);
            return NULL;
        }
        if (c != C_AT && PyList_GET_SIZE(col[c]) < end) {
            PyErr_SetString(PyExc_ValueError, "run: end beyond the columns");
            return NULL;
        }
    }
    PyObject *k_lo_ip = PyTuple_GET_ITEM(key, 0), *k_lo_p = PyTuple_GET_ITEM(key, 1);
    PyObject *k_hi_ip = PyTuple_GET_ITEM(key, 2), *k_hi_p = PyTuple_GET_ITEM(key, 3);

    Side lo, hi;
    long long last_ts, idle;
    PyObject *groups = NULL, *cur = NULL, *result = NULL;
    int cur_dir = -1;
    Py_ssize_t j = k;
    memset(&hi, 0, sizeof hi);
    if (side_load(&lo, tcp, s_lo) < 0 || side_load(&hi, tcp, s_hi) < 0 ||
        get_ll(tcp, s_last_ts, &last_ts) < 0 || get_ll(tcp, s_idle, &idle) < 0)
        goto done;
    PyObject *held = PyObject_GetAttr(tcp, s_held);
    if (held == NULL)
        goto done;
    Py_DECREF(held);
    if (held != Py_None)
        end = k; /* packets held for bytes they acknowledge (TcpConnection.add): take nothing */
    groups = PyList_New(0);
    if (groups == NULL)
        goto done;

#define ITEM(c) PyList_GET_ITEM(col[c], j)
    for (; j < end; j++) {
        PyObject *lo_ip = ITEM(C_LO_IP);
        if (lo_ip == Py_None) /* a reader's stats row */
            break;
        if (!same(ITEM(C_LO_P), k_lo_p) || !same(ITEM(C_HI_P), k_hi_p) || !same(lo_ip, k_lo_ip) ||
            !same(ITEM(C_HI_IP), k_hi_ip) || !same(ITEM(C_CID), cid))
            break;
        PyObject *pl = ITEM(C_PL), *fl = ITEM(C_FROM_LO);
        /* anything but plain values (snap-truncated, no payload bytes, a null) is the Python
           path's to judge */
        if (ITEM(C_ST) != Py_False || !PyBytes_Check(pl) || (fl != Py_True && fl != Py_False))
            break;
        long long ts, seq, ack, flags, win, plen, wl;
        if (as_ll(ITEM(C_TS), &ts) < 0 || as_ll(ITEM(C_SEQ), &seq) < 0 || as_ll(ITEM(C_ACK), &ack) < 0 ||
            as_ll(ITEM(C_FLAGS), &flags) < 0 || as_ll(ITEM(C_WIN), &win) < 0 ||
            as_ll(ITEM(C_PLEN), &plen) < 0 || as_ll(ITEM(C_WL), &wl) < 0) {
            PyErr_Clear();
            break;
        }
        if (PyBytes_GET_SIZE(pl) != plen)
            break;
        int from_lo = fl == Py_True;
        /* TcpConnection.take */
        if (ts - last_ts > idle)
            break; /* maybe a new connection (starts_new) */
        Side *d = from_lo ? &lo : &hi, *o = from_lo ? &hi : &lo;
        if (seq != d->nseq || d->blocked || (flags & (TCP_SYN | TCP_FIN | TCP_RST)) ||
            (d->watch & (plen ? WATCH_DATA : WATCH_EMPTY)))
            break;
        if (flags & TCP_ACK) {
            if (!win)
                break; /* a zero window to count */
            if (o->nseq >= 0) {
                long long ahead = (ack - o->nseq) & MASK32;
                if (o->blocked || (0 < ahead && ahead <= MAX_ACK_AHEAD))
                    break; /* an ACK that may declare a gap */
            }
            o->pwz = 0;
        }
        d->packets++;
        d->payload += plen;
        d->frame_bytes += wl;
        last_ts = ts;
        d->nseq = (seq + plen) & MASK32;
        if (plen == 1 && d->pwz)
            d->probes++;
        if (!plen)
            continue; /* a pure ACK: counted, nothing to decode */
        if (from_lo != cur_dir) {
            cur = PyList_New(0);
            if (cur == NULL)
                goto done;
            PyObject *g = Py_BuildValue("(ON)", from_lo ? Py_True : Py_False, cur);
            if (g == NULL || PyList_Append(groups, g) < 0) {
                Py_XDECREF(g);
                goto done;
            }
            Py_DECREF(g);
            cur_dir = from_lo;
        }
        PyObject *idx = PyLong_FromSsize_t(j);
        if (idx == NULL || PyList_Append(cur, idx) < 0) {
            Py_XDECREF(idx);
            goto done;
        }
        Py_DECREF(idx);
    }
#undef ITEM
    if (j > k) {
        PyObject *lt = PyLong_FromLongLong(last_ts);
        if (lt == NULL)
            goto done;
        int rc = PyObject_SetAttr(tcp, s_last_ts, lt);
        Py_DECREF(lt);
        if (rc < 0)
            goto done;
    }
    if (side_store(&lo) < 0 || side_store(&hi) < 0)
        goto done;
    result = Py_BuildValue("(nO)", j, groups);
done:
    Py_XDECREF(groups);
    side_free(&lo);
    side_free(&hi);
    return result;
}

static PyMethodDef methods[] = {
    {"run", lane_run, METH_VARARGS, "TcpConnection.take over a run of packets (see the module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lane", NULL, -1, methods};

PyMODINIT_FUNC PyInit__lane(void) {
#define INTERN(var, text)                                                                          \
    if ((var = PyUnicode_InternFromString(text)) == NULL)                                          \
        return NULL;
    INTERN(s_lo, "lo")
    INTERN(s_hi, "hi")
    INTERN(s_reasm, "reasm")
    INTERN(s_nseq, "_nseq")
    INTERN(s_blocked, "_blocked")
    INTERN(s_watch, "watch")
    INTERN(s_pwz, "peer_window_zero")
    INTERN(s_last_ts, "last_ts")
    INTERN(s_held, "_held")
    INTERN(s_idle, "idle_timeout_ns")
    INTERN(s_packets, "packets")
    INTERN(s_payload_bytes, "payload_bytes")
    INTERN(s_frame_bytes, "frame_bytes")
    INTERN(s_next_off, "next_off")
    INTERN(s_delivered, "delivered_bytes")
    INTERN(s_probes, "zero_window_probes")
#undef INTERN
    return PyModule_Create(&module);
}
