/* count_block's histograms on the CPU for rows with few relevant scores, in C.
 *
 * Why C: for each row of a score block and each of its m relevant scores r_j, the ranking needs
 * #{v <= r_j} and #{v < r_j} over the row's items. The sort of every row (kernels._merge_rows)
 * costs more than the product that made the scores; numpy's compare-and-count passes write and
 * read a mask per pass. Here each row is read from the cache a few relevant scores at a time,
 * comparing and counting in registers (loops the compiler vectorizes): 2m compares per item.
 *
 * The results are the histograms _merge_rows adds, bit for bit (tests/ranking/test_count_kernel.py):
 * with at_most = [0, #{v <= r_0}, ..., #{v <= r_(m-1)}, n] and below = [0, #{v < r_0}, ...,
 * #{v < r_(m-1)}, n], hist_lt[j] += at_most[j+1] - at_most[j] and hist_le[j] += (below[j+1] -
 * below[j]) - (at_most[j+1] - at_most[j]). Padding (+inf) after a row's finite relevant scores
 * is counted once per row.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* relevant scores counted per pass over a row (registers: two counters each) */
#define GROUP 4

/* The loops below are compiled twice on x86-64 Linux (glibc's ifunc) with GCC or clang: for
 * AVX2 (8 floats a compare, twice SSE2's 4; the count of a 1,000 x 2,112 block 3x faster on an
 * AMD EPYC) and for any x86-64; the loader picks the first the processor runs. Compares and
 * integer adds only: the counts do not depend on which. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__GLIBC__) && !defined(__INTEL_COMPILER)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

#define DEFINE_COUNTS(NAME, T)                                                                  \
    VECTOR_CLONES                                                                              \
    static void NAME(const T *v, Py_ssize_t n, const T *r, Py_ssize_t j0, Py_ssize_t f,        \
                     Py_ssize_t m, int64_t *at_most, int64_t *below) {                         \
        /* the relevant scores before j0 are not counted: 0 items at or below them */         \
        Py_ssize_t j = 0;                                                                      \
        for (; j < j0; j++) {                                                                  \
            at_most[j] = 0;                                                                    \
            below[j] = 0;                                                                      \
        }                                                                                      \
        for (; j + GROUP <= f; j += GROUP) {                                                   \
            const T r0 = r[j], r1 = r[j + 1], r2 = r[j + 2], r3 = r[j + 3];                    \
            int32_t le0 = 0, le1 = 0, le2 = 0, le3 = 0, lt0 = 0, lt1 = 0, lt2 = 0, lt3 = 0;   \
            for (Py_ssize_t k = 0; k < n; k++) {                                               \
                const T x = v[k];                                                              \
                le0 += x <= r0; lt0 += x < r0;                                                 \
                le1 += x <= r1; lt1 += x < r1;                                                 \
                le2 += x <= r2; lt2 += x < r2;                                                 \
                le3 += x <= r3; lt3 += x < r3;                                                 \
            }                                                                                  \
            at_most[j] = le0; at_most[j + 1] = le1; at_most[j + 2] = le2; at_most[j + 3] = le3; \
            below[j] = lt0; below[j + 1] = lt1; below[j + 2] = lt2; below[j + 3] = lt3;        \
        }                                                                                      \
        /* the rest one at a time, and the padding once: its scores are all +inf */          \
        const Py_ssize_t last = f < m ? f + 1 : f;                                             \
        for (; j < last; j++) {                                                                \
            const T t = r[j];                                                                  \
            int32_t le = 0, lt = 0;                                                            \
            for (Py_ssize_t k = 0; k < n; k++) {                                               \
                le += v[k] <= t;                                                               \
                lt += v[k] < t;                                                                \
            }                                                                                  \
            at_most[j] = le;                                                                   \
            below[j] = lt;                                                                     \
        }                                                                                      \
        for (Py_ssize_t p = last; p < m; p++) {                                                \
            at_most[p] = at_most[f];                                                           \
            below[p] = below[f];                                                               \
        }                                                                                      \
    }

DEFINE_COUNTS(counts_float, float)
DEFINE_COUNTS(counts_double, double)

/* format NULL: float32 or float64; "i8": int64 */
static int get_buffer(PyObject *obj, Py_buffer *view, const char *name, const char *format,
                      int ndim, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    int ok = view->ndim == ndim;
    if (ok && format != NULL && strcmp(format, "i8") == 0)
        ok = (strcmp(view->format, "l") == 0 || strcmp(view->format, "q") == 0) &&
             view->itemsize == 8;
    else if (ok && format != NULL)
        ok = strcmp(view->format, format) == 0;
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "`%s` must be a C-contiguous %d-d array of '%s'", name,
                     ndim, format ? format : "f or d");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(count_rows_doc,
             "count_rows(values, seq, num_finite, hist_lt, hist_le, first=None)\n\n"
             "Add each row of values (rows x n, float32 or float64, C-contiguous) to its row of "
             "the histograms (rows x (m + 1), int64, in place), with seq (rows x m, the values' "
             "dtype) each row's relevant scores ascending, +inf padded after num_finite[row] "
             "(rows x 1, int64) of them. first (rows x 1, int64): a row's relevant scores before "
             "first[row] are passed over (taken as if every item lay above them): the bins after "
             "first[row], and each row's total, are its counts.");

static PyObject *count_rows(PyObject *self, PyObject *args) {
    PyObject *values_obj, *seq_obj, *finite_obj, *lt_obj, *le_obj, *first_obj = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOO|O", &values_obj, &seq_obj, &finite_obj, &lt_obj, &le_obj,
                          &first_obj))
        return NULL;
    Py_buffer values, seq, finite, hist_lt, hist_le, first;
    int got = 0;
    PyObject *result = NULL;
    if (get_buffer(values_obj, &values, "values", NULL, 2, 0) < 0) goto finally;
    got = 1;
    int is_double = strcmp(values.format, "d") == 0;
    if (!is_double && strcmp(values.format, "f") != 0) {
        PyErr_SetString(PyExc_ValueError, "`values` must be float32 or float64");
        goto finally;
    }
    if (get_buffer(seq_obj, &seq, "seq", values.format, 2, 0) < 0) goto finally;
    got = 2;
    if (get_buffer(finite_obj, &finite, "num_finite", "i8", 2, 0) < 0) goto finally;
    got = 3;
    if (get_buffer(lt_obj, &hist_lt, "hist_lt", "i8", 2, 1) < 0) goto finally;
    got = 4;
    if (get_buffer(le_obj, &hist_le, "hist_le", "i8", 2, 1) < 0) goto finally;
    got = 5;
    if (first_obj != Py_None) {
        if (get_buffer(first_obj, &first, "first", "i8", 2, 0) < 0) goto finally;
        got = 6;
    }
    Py_ssize_t rows = values.shape[0], n = values.shape[1], m = seq.shape[1];
    if (seq.shape[0] != rows || finite.shape[0] != rows || finite.shape[1] != 1 ||
        hist_lt.shape[0] != rows || hist_lt.shape[1] != m + 1 || hist_le.shape[0] != rows ||
        hist_le.shape[1] != m + 1 ||
        (got == 6 && (first.shape[0] != rows || first.shape[1] != 1))) {
        PyErr_SetString(PyExc_ValueError, "count_rows: the shapes do not fit");
        goto finally;
    }
    if (n > INT32_MAX) { /* the counters of a pass are 32-bit */
        PyErr_SetString(PyExc_ValueError, "count_rows: rows of 2**31 items or more");
        goto finally;
    }
    int64_t *at_most = (int64_t *)malloc((size_t)(2 * (m + 1)) * sizeof(int64_t));
    if (at_most == NULL) {
        PyErr_NoMemory();
        goto finally;
    }
    int64_t *below = at_most + (m + 1);
    const int64_t *fin = (const int64_t *)finite.buf;
    const int64_t *from = got == 6 ? (const int64_t *)first.buf : NULL;
    int64_t *lt = (int64_t *)hist_lt.buf, *le = (int64_t *)hist_le.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rows; i++) {
        Py_ssize_t f = (Py_ssize_t)fin[i];
        if (f > m) f = m;
        if (f < 0) f = 0;
        Py_ssize_t j0 = from ? (Py_ssize_t)from[i] : 0;
        if (j0 > f) j0 = f;
        if (j0 < 0) j0 = 0;
        if (is_double)
            counts_double((const double *)values.buf + i * n, n, (const double *)seq.buf + i * m,
                          j0, f, m, at_most, below);
        else
            counts_float((const float *)values.buf + i * n, n, (const float *)seq.buf + i * m,
                         j0, f, m, at_most, below);
        at_most[m] = n;
        below[m] = n;
        int64_t prev_le = 0, prev_lt = 0;
        int64_t *lt_row = lt + i * (m + 1), *le_row = le + i * (m + 1);
        for (Py_ssize_t j = 0; j <= m; j++) {
            int64_t in_lt = at_most[j] - prev_le; /* items in (r_(j-1), r_j] */
            int64_t in_le = below[j] - prev_lt;   /* items in [r_(j-1), r_j) */
            lt_row[j] += in_lt;
            le_row[j] += in_le - in_lt;
            prev_le = at_most[j];
            prev_lt = below[j];
        }
    }
    Py_END_ALLOW_THREADS
    free(at_most);
    Py_INCREF(Py_None);
    result = Py_None;
finally:
    if (got >= 6) PyBuffer_Release(&first);
    if (got >= 5) PyBuffer_Release(&hist_le);
    if (got >= 4) PyBuffer_Release(&hist_lt);
    if (got >= 3) PyBuffer_Release(&finite);
    if (got >= 2) PyBuffer_Release(&seq);
    if (got >= 1) PyBuffer_Release(&values);
    return result;
}

static PyMethodDef methods[] = {
    {"count_rows", count_rows, METH_VARARGS, count_rows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_count",
    "count_block's histograms on the CPU for rows with few relevant scores (see kernels.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__count(void) { return PyModule_Create(&module); }
