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

#define NUM_BUFFERS 11

static PyObject *binary_groups(PyObject *self, PyObject *args) {
    PyObject *objs[NUM_BUFFERS];
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6], &objs[7], &objs[8], &objs[9], &objs[10]))
        return NULL;
    /* inputs: ptr, above, tied; outputs: the rest */
    Py_buffer views[NUM_BUFFERS];
    int taken = 0;
    PyObject *result = NULL;
    for (; taken < NUM_BUFFERS; taken++) {
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (taken >= 3 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[taken], &views[taken], flags) < 0) goto finally;
    }
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

static PyMethodDef methods[] = {
    {"binary_groups", binary_groups, METH_VARARGS, binary_groups_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ties",
    "The merged expected-tie groups of a binary rank table in one pass (see ties.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__ties(void) { return PyModule_Create(&module); }
