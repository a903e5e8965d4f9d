/* The tie groups of a binary rank table under expected ties, in C: one pass over the items.
 *
 * Why C: every measure of a call reads the table through its groups (ties.tie_groups), and in
 * torch that is some 40 passes over the items and the groups, each a few microseconds a
 * thousand entries: 0.5 ms of the 1.8 of image-text's text-to-image measures at 25,000
 * queries, 3 ms of the 9 of SOP's at 60,000. The groups come out of one loop here.
 *
 * The groups are those of ties._binary_runs followed by ties._merge_full_runs (the readable
 * reference, which this must equal; tests/measures/test_tie_groups_compiled.py): a group is a
 * tie group holding relevant items, or a run of relevant items alone at their scores on
 * consecutive positions; consecutive groups of one query whose every position is relevant are
 * merged.
 *
 * precision_sums gives each group's expected sum of precisions at its relevant positions within
 * a cut-off (ties._precision_sum_of, whose torch path is the reference it must equal bit for
 * bit: the same float64 operations in the same order, and no multiply-add fused, which setup.py
 * turns off). In torch, MAP@R's and AP's sums were some 25 passes over the groups and a loop of
 * 16 over the short ones: most of SOP's MAP@R on the host. The long sums (more than
 * DIRECT_TERMS positions) take a closed form with digamma; their groups are handed back to the
 * torch path, which computes them.
 *
 * reciprocal_sums gives each group's E[1 / (above + X)], X the position of its first (or last)
 * relevant item (ties._reciprocal_sums_in_torch, the reference it must equal bit for bit): a
 * term a position, each probability the last times a ratio. Collapsed or half-collapsed
 * embeddings put thousands of positions in one group of each query: in torch (four lgamma a
 * term) half of 10,000 items collapsed took 2.3 s of MRR's and mINP's measures.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

PyDoc_STRVAR(binary_groups_doc,
             "binary_groups(ptr, above, tied, query, g_above, size, relevant, before, first,"
             " last, first_index) -> (groups, firsts)\n\n"
             "The merged expected-tie groups of a binary rank table (ptr: int64, Q + 1; above,"
             " tied: int64, n), written into the first `groups` entries of query, g_above, size,"
             " relevant, before (int64, n each: the relevant items of the query in earlier"
             " groups), first and last (uint8, n: the query's first / last group) and the first"
             " `firsts` entries of first_index (int64, Q: the positions of the first groups).");

static int is_vector(const Py_buffer *view, Py_ssize_t itemsize) {
    if (view->ndim != 1 || view->itemsize != itemsize) return 0;
    if (itemsize == 8) return strcmp(view->format, "l") == 0 || strcmp(view->format, "q") == 0;
    return strcmp(view->format, "B") == 0 || strcmp(view->format, "?") == 0;
}

/* The buffers of objs[0 .. count - 1], C-contiguous, those from first_output on writable: how
 * many were taken (count, or fewer with a Python error set); the caller releases those. */
static int take_buffers(PyObject **objs, Py_buffer *views, int count, int first_output) {
    for (int taken = 0; taken < count; taken++) {
        int writable = taken >= first_output ? PyBUF_WRITABLE : 0;
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | writable;
        if (PyObject_GetBuffer(objs[taken], &views[taken], flags) < 0) return taken;
    }
    return count;
}

/* Whether views[0 .. count - 1] are vectors of n 8-byte entries: int64, but float64 at
 * `double_at` (the sums' output). */
static int vectors_of_one_length(const Py_buffer *views, int count, int double_at, Py_ssize_t n) {
    for (int b = 0; b < count; b++) {
        const Py_buffer *view = &views[b];
        int kind = b == double_at ? strcmp(view->format, "d") == 0 : is_vector(view, 8);
        if (!(view->ndim == 1 && view->shape[0] == n && view->itemsize == 8 && kind)) return 0;
    }
    return 1;
}

/* The sums' buffers (int64 inputs, the float64 output at 5, int64 after it; `taken` of
 * `count` taken by take_buffers): their one length, or -1 with a Python error set, `what`
 * naming them where they are not such vectors. */
static Py_ssize_t sum_vectors_length(const Py_buffer *views, int taken, int count,
                                     const char *what) {
    if (taken < count) return -1;
    Py_ssize_t n = views[0].shape[0];
    if (!vectors_of_one_length(views, count, 5, n)) {
        PyErr_SetString(PyExc_ValueError, what);
        return -1;
    }
    return n;
}

#define NUM_BUFFERS 11

static PyObject *binary_groups(PyObject *self, PyObject *args) {
    PyObject *objs[NUM_BUFFERS];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6], &objs[7], &objs[8], &objs[9], &objs[10]))
        return NULL;
    /* inputs: ptr, above, tied; outputs: the rest */
    Py_buffer views[NUM_BUFFERS];
    PyObject *result = NULL;
    int taken = take_buffers(objs, views, NUM_BUFFERS, 3);
    if (taken < NUM_BUFFERS) goto finally;
    Py_ssize_t num_q = views[0].shape[0] - 1, n = views[1].shape[0];
    int ok = num_q >= 0 && views[2].shape[0] == n && views[10].shape[0] >= num_q;
    for (int b = 0; b < NUM_BUFFERS && ok; b++) {
        int flags8 = b == 8 || b == 9;
        ok = is_vector(&views[b], flags8 ? 1 : 8) && (b < 3 || b == 10 || views[b].shape[0] >= n);
    }
    if (!ok) {
        PyErr_SetString(PyExc_ValueError,
                        "binary_groups: int64 ptr (Q + 1), above and tied (n), outputs of n "
                        "entries (first_index: Q)");
        goto finally;
    }
    const int64_t *ptr = (const int64_t *)views[0].buf;
    const int64_t *above = (const int64_t *)views[1].buf;
    const int64_t *tied = (const int64_t *)views[2].buf;
    int64_t *g_query = (int64_t *)views[3].buf, *g_above = (int64_t *)views[4].buf;
    int64_t *g_size = (int64_t *)views[5].buf, *g_rel = (int64_t *)views[6].buf;
    int64_t *g_before = (int64_t *)views[7].buf, *first_index = (int64_t *)views[10].buf;
    uint8_t *g_first = (uint8_t *)views[8].buf, *g_last = (uint8_t *)views[9].buf;
    Py_ssize_t groups = 0, firsts = 0;
    int bad = ptr[0] != 0 || ptr[num_q] != n;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t q = 0; q < num_q && !bad; q++) {
        int64_t lo = ptr[q], hi = ptr[q + 1];
        if (lo > hi || hi > n) {
            bad = 1;
            break;
        }
        Py_ssize_t query_first = groups; /* this query's first group, once it has one */
        int64_t before = 0;
        int64_t i = lo;
        while (i < hi) {
            /* one group of ties._binary_runs: items i .. j - 1 */
            int64_t j = i + 1;
            while (j < hi) {
                int64_t step = above[j] - above[j - 1];
                if (!(step == 0 || (step == 1 && tied[j] == 1))) break;
                j++;
            }
            int64_t relevant = j - i;
            int64_t size = tied[i] == 1 ? relevant : tied[i];
            Py_ssize_t prev = groups - 1;
            if (groups > query_first && g_rel[prev] == g_size[prev] && relevant == size &&
                above[i] == g_above[prev] + g_size[prev]) {
                /* ties._merge_full_runs: both groups wholly relevant, on consecutive positions */
                g_size[prev] += size;
                g_rel[prev] += relevant;
            } else {
                g_query[groups] = q;
                g_above[groups] = above[i];
                g_size[groups] = size;
                g_rel[groups] = relevant;
                g_before[groups] = before;
                g_first[groups] = groups == query_first;
                g_last[groups] = 0;
                if (groups == query_first) first_index[firsts++] = groups;
                groups++;
            }
            before += relevant;
            i = j;
        }
        if (groups > query_first) g_last[groups - 1] = 1;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "binary_groups: `ptr` is not a valid CSR pointer");
        goto finally;
    }
    result = Py_BuildValue("nn", groups, firsts);
finally:
    for (int b = 0; b < taken; b++) PyBuffer_Release(&views[b]);
    return result;
}

PyDoc_STRVAR(precision_sums_doc,
             "precision_sums(above, size, relevant, before, cutoff, out, long_index, direct)"
             " -> num_long\n\n"
             "Per group (int64 inputs of n entries each), rate * sum_{i=1..u} (alpha + beta"
             " (i - 1)) / (above + i) with u = clip(cutoff - above, 0, size), alpha = before + 1,"
             " beta = (relevant - 1) / (size - 1) (0 for one item), rate = relevant / size:"
             " written into out (float64, n), except where u > direct: those groups' positions"
             " are written into the first `num_long` entries of long_index (int64, n) instead.");

#define NUM_SUM_BUFFERS 7

static PyObject *precision_sums(PyObject *self, PyObject *args) {
    PyObject *objs[NUM_SUM_BUFFERS];
    long long direct;
    if (!PyArg_ParseTuple(args, "OOOOOOOL", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6], &direct))
        return NULL;
    /* inputs: above, size, relevant, before, cutoff; outputs: out, long_index */
    Py_buffer views[NUM_SUM_BUFFERS];
    PyObject *result = NULL;
    int taken = take_buffers(objs, views, NUM_SUM_BUFFERS, 5);
    Py_ssize_t n = sum_vectors_length(views, taken, NUM_SUM_BUFFERS,
                                      "precision_sums: int64 above, size, relevant, before,"
                                      " cutoff and long_index, float64 out, all of one length");
    if (n < 0) goto finally;
    const int64_t *above = (const int64_t *)views[0].buf, *size = (const int64_t *)views[1].buf;
    const int64_t *relevant = (const int64_t *)views[2].buf;
    const int64_t *before = (const int64_t *)views[3].buf;
    const int64_t *cutoff = (const int64_t *)views[4].buf;
    double *out = (double *)views[5].buf;
    int64_t *long_index = (int64_t *)views[6].buf;
    Py_ssize_t num_long = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t g = 0; g < n; g++) {
        /* ties.positions_in_cutoff (cutoff >= 0 and above >= 0: no overflow) */
        int64_t u = cutoff[g] - above[g];
        if (u < 0) u = 0;
        if (u > size[g]) u = size[g];
        if (u > direct) {
            long_index[num_long++] = g;
            continue;
        }
        if (relevant[g] == size[g] && before[g] == above[g]) {
            /* every position down to this group's last relevant (a strong model's top): each
             * term is (before + i) / (above + i) = 1 exactly, their sum u */
            out[g] = (double)u;
            continue;
        }
        double t = (double)size[g], r = (double)relevant[g], a = (double)above[g];
        double beta = size[g] > 1 ? (r - 1) / (t - 1) : 0.0; /* ties.pair_rate */
        double alpha = (double)before[g] + 1;
        /* ties.position_sum: the first term, then the rest added term by term from 0 */
        double sum = u >= 1 ? alpha / (a + 1) : 0.0;
        if (u > 1) {
            double rest = 0.0;
            for (int64_t i = 2; i <= u; i++)
                rest += (alpha + beta * (double)(i - 1)) / (a + (double)i);
            sum = sum + rest;
        }
        out[g] = r / t * sum;
    }
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(num_long);
finally:
    for (int b = 0; b < taken; b++) PyBuffer_Release(&views[b]);
    return result;
}

PyDoc_STRVAR(reciprocal_sums_doc,
             "reciprocal_sums(size, relevant, above, limit, terms, from_end, out)\n\n"
             "Per group (int64 inputs of n entries each, 1 < relevant < size), the sum over"
             " x = 1..terms of p_x / (above + pos) for above + pos <= limit, pos = x (from_end:"
             " size - x + 1), where p_1 = relevant / size and p_x = p_{x-1} (size - x - relevant"
             " + 2) / (size - x + 1): the chance that the first relevant item of the group is at"
             " its position x. Written into out (float64, n).");

#define NUM_RECIPROCAL_BUFFERS 6

static PyObject *reciprocal_sums(PyObject *self, PyObject *args) {
    PyObject *objs[NUM_RECIPROCAL_BUFFERS];
    int from_end;
    if (!PyArg_ParseTuple(args, "OOOOOpO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &from_end, &objs[5]))
        return NULL;
    /* inputs: size, relevant, above, limit, terms; output: out */
    Py_buffer views[NUM_RECIPROCAL_BUFFERS];
    PyObject *result = NULL;
    int taken = take_buffers(objs, views, NUM_RECIPROCAL_BUFFERS, 5);
    Py_ssize_t n = sum_vectors_length(views, taken, NUM_RECIPROCAL_BUFFERS,
                                      "reciprocal_sums: int64 size, relevant, above, limit and"
                                      " terms, float64 out, all of one length");
    if (n < 0) goto finally;
    const int64_t *size = (const int64_t *)views[0].buf;
    const int64_t *relevant = (const int64_t *)views[1].buf;
    const int64_t *above = (const int64_t *)views[2].buf;
    const int64_t *limit = (const int64_t *)views[3].buf;
    const int64_t *terms = (const int64_t *)views[4].buf;
    double *out = (double *)views[5].buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t g = 0; g < n; g++) {
        /* ties._reciprocal_sums_in_torch, term for term: the same float64 operations in the
         * same order (no multiply-add fused: setup.py) */
        double t = (double)size[g], r = (double)relevant[g], a = (double)above[g];
        double p = r / t, sum = 0.0;
        for (int64_t x = 1; x <= terms[g]; x++) {
            if (x > 1) p = p * ((t - (double)x - r + 2.0) / (t - (double)x + 1.0));
            int64_t pos = from_end ? size[g] - x + 1 : x;
            if (above[g] + pos <= limit[g]) sum = sum + p / (a + (double)pos);
        }
        out[g] = sum;
    }
    Py_END_ALLOW_THREADS
    Py_INCREF(Py_None);
    result = Py_None;
finally:
    for (int b = 0; b < taken; b++) PyBuffer_Release(&views[b]);
    return result;
}

static PyMethodDef methods[] = {
    {"binary_groups", binary_groups, METH_VARARGS, binary_groups_doc},
    {"precision_sums", precision_sums, METH_VARARGS, precision_sums_doc},
    {"reciprocal_sums", reciprocal_sums, METH_VARARGS, reciprocal_sums_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ties",
    "The expected-tie groups of a binary rank table, their precision sums and reciprocal sums"
    " (ties.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__ties(void) { return PyModule_Create(&module); }
