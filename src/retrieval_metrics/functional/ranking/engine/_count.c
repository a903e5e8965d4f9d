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
 *
 * count_above and count_above_columns (below) count only the items at or above each row's
 * threshold, which they raise themselves where the ranking stops at a depth: on the CPU they
 * stand in for the segment maxima and the sparse and dense counts of kernels.py.
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

/* A row's "<=" and "<" counts of its m relevant scores (at_most, below: m + 1 places, the last
 * set here to the row's n items) added to its histograms as differences. */
static void add_row(int64_t *at_most, int64_t *below, Py_ssize_t n, Py_ssize_t m,
                    int64_t *lt_row, int64_t *le_row) {
    at_most[m] = n;
    below[m] = n;
    int64_t prev_le = 0, prev_lt = 0;
    for (Py_ssize_t j = 0; j <= m; j++) {
        int64_t in_lt = at_most[j] - prev_le; /* items in (r_(j-1), r_j] */
        int64_t in_le = below[j] - prev_lt;   /* items in [r_(j-1), r_j) */
        lt_row[j] += in_lt;
        le_row[j] += in_le - in_lt;
        prev_le = at_most[j];
        prev_lt = below[j];
    }
}

/* count_above: the items of a row at or above its threshold, and only those (a good model: a
 * few per row), each searched in the row's relevant scores; where a depth bounds the ranking, a
 * heap per row of the depth best scores of distinct items seen so far raises the threshold as
 * the row is read, so that one pass of compares replaces the segment maxima and the candidates.
 *
 * Items below the threshold are not counted: they lie below every relevant score the ranking
 * still lists, whose counts alone are read (QueryBlock.finish). A row where many items pass
 * (a weak model) is counted whole by the loops above instead, which is exact too. */

/* per item passing the threshold: its search and a few scattered writes, in units of the
 * whole-row count's per-item cost of 1 + f / 4 (f relevant scores, 8 compares a vector) */
#define SPARSE_COST 40
/* items tested a vector group at a time before any is looked at one by one */
#define CHUNK 16

#define DEFINE_ABOVE(NAME, T, COUNTS)                                                           \
    /* lt: relevant scores < x among the f finite ones; le: <= x */                            \
    static inline Py_ssize_t NAME##_lower(const T *r, Py_ssize_t f, T x) {                      \
        Py_ssize_t lo = 0, hi = f;                                                             \
        while (lo < hi) {                                                                      \
            Py_ssize_t mid = (lo + hi) / 2;                                                    \
            if (r[mid] < x) lo = mid + 1; else hi = mid;                                        \
        }                                                                                      \
        return lo;                                                                             \
    }                                                                                          \
    /* a min-heap of k values: x replaces the root, which sinks */                             \
    static inline void NAME##_push(T *h, Py_ssize_t k, T x) {                                   \
        Py_ssize_t i = 0;                                                                      \
        for (;;) {                                                                             \
            Py_ssize_t c = 2 * i + 1;                                                          \
            if (c >= k) break;                                                                 \
            if (c + 1 < k && h[c + 1] < h[c]) c++;                                              \
            if (h[c] >= x) break;                                                              \
            h[i] = h[c];                                                                       \
            i = c;                                                                             \
        }                                                                                      \
        h[i] = x;                                                                              \
    }                                                                                          \
    /* one item at or above its row's threshold t: counted (unless the row is counted whole), */\
    /* and into the heap; returns the row's threshold after it */                            \
    static inline T NAME##_item(T x, const T *r, Py_ssize_t f, int64_t *lt_row,               \
                                int64_t *le_row, int count, T *h, Py_ssize_t k, T cap, T t) {  \
        const Py_ssize_t lt = NAME##_lower(r, f, x);                                           \
        const int tie = lt < f && r[lt] == x;                                                  \
        if (count) {                                                                           \
            lt_row[lt] += 1;                                                                   \
            if (tie) {                                                                         \
                Py_ssize_t le = lt + 1;                                                        \
                while (le < f && r[le] == x) le++;                                             \
                le_row[le] += 1;                                                               \
                le_row[lt] -= 1;                                                               \
            }                                                                                  \
        }                                                                                      \
        /* an item tying a relevant score may be that relevant item, which the heap holds */  \
        /* from the start: left out (fewer items, still a lower bound) */                     \
        if (h != NULL && !tie && x > h[0]) {                                                   \
            NAME##_push(h, k, x);                                                              \
            const T raised = h[0] < cap ? h[0] : cap;                                          \
            if (raised > t) t = raised;                                                        \
        }                                                                                      \
        return t;                                                                              \
    }                                                                                          \
    VECTOR_CLONES                                                                              \
    static int NAME##_any_of(const T *v, const T *t) {                                         \
        int any = 0;                                                                           \
        for (int u = 0; u < CHUNK; u++) any |= v[u] >= t[u];                                   \
        return any;                                                                            \
    }                                                                                          \
    VECTOR_CLONES                                                                              \
    static Py_ssize_t NAME##_passing(const T *v, Py_ssize_t n, T t) {                          \
        Py_ssize_t c = 0;                                                                      \
        for (Py_ssize_t k = 0; k < n; k++) c += v[k] >= t;                                     \
        return c;                                                                              \
    }                                                                                          \
    VECTOR_CLONES                                                                              \
    static int NAME##_any(const T *v, T t) {                                                   \
        int any = 0;                                                                           \
        for (int u = 0; u < CHUNK; u++) any |= v[u] >= t;                                      \
        return any;                                                                            \
    }                                                                                          \
    /* one row: returns the row's threshold after it */                                       \
    static T NAME(const T *v, Py_ssize_t n, const T *r, Py_ssize_t f, Py_ssize_t m, T t,       \
                  int64_t *lt_row, int64_t *le_row, T *h, Py_ssize_t k, T cap,                 \
                  int64_t *at_most, int64_t *below) {                                          \
        Py_ssize_t passing = NAME##_passing(v, n, t);                                          \
        if (passing == 0) return t;                                                            \
        int whole = passing * SPARSE_COST > n * (1 + f / 4);                                   \
        if (whole) {                                                                           \
            COUNTS(v, n, r, 0, f, m, at_most, below);                                          \
            add_row(at_most, below, n, m, lt_row, le_row);                                     \
            if (h == NULL) return t;                                                           \
        }                                                                                      \
        /* the heap (and, unless counted whole, the counts) item by item */                   \
        Py_ssize_t k0 = 0;                                                                     \
        for (; k0 < n; k0 += CHUNK) {                                                          \
            Py_ssize_t stop = k0 + CHUNK <= n ? k0 + CHUNK : n;                                \
            if (stop - k0 == CHUNK && !NAME##_any(v + k0, t)) continue;                        \
            for (Py_ssize_t q = k0; q < stop; q++) {                                           \
                const T x = v[q];                                                              \
                if (!(x >= t)) continue;                                                       \
                if (whole && !(x > h[0])) continue;                                            \
                t = NAME##_item(x, r, f, lt_row, le_row, !whole, h, k, cap, t);                \
            }                                                                                  \
        }                                                                                      \
        return t;                                                                              \
    }                                                                                          \
    /* The queries are the first nq columns of v (rows x ld), its rows the items: each row of */\
    /* items is compared with the columns' thresholds a vector at a time. Returns the rows */   \
    /* read: it stops once more than `budget` items passed (a weak model), for the rest to */  \
    /* be counted row by row (NAME above) where rows with many passing are counted whole. */   \
    static Py_ssize_t NAME##_columns(const T *v, Py_ssize_t items, Py_ssize_t ld,             \
                                     Py_ssize_t nq, T *thr, const T *seq, Py_ssize_t m,        \
                                     const int64_t *fin, int64_t *lt, int64_t *le, T *heap,    \
                                     Py_ssize_t w, const int64_t *ks, const T *cap,            \
                                     int64_t budget) {                                         \
        int64_t passed = 0;                                                                    \
        for (Py_ssize_t q = 0; q < items; q++) {                                               \
            if (passed > budget) return q;                                                     \
            const T *row = v + q * ld;                                                         \
            for (Py_ssize_t j0 = 0; j0 < nq; j0 += CHUNK) {                                    \
                Py_ssize_t stop = j0 + CHUNK <= nq ? j0 + CHUNK : nq;                          \
                if (stop - j0 == CHUNK && !NAME##_any_of(row + j0, thr + j0)) continue;        \
                for (Py_ssize_t j = j0; j < stop; j++) {                                       \
                    const T x = row[j];                                                        \
                    if (!(x >= thr[j])) continue;                                              \
                    passed++;                                                                  \
                    Py_ssize_t k = heap != NULL ? clamped(ks[j], w) : 0;                       \
                    thr[j] = NAME##_item(x, seq + j * m, clamped(fin[j], m), lt + j * (m + 1), \
                                         le + j * (m + 1), 1, k > 0 ? heap + j * w : NULL, k,  \
                                         k > 0 ? cap[j] : (T)0, thr[j]);                       \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
        return items;                                                                          \
    }

static inline Py_ssize_t clamped(int64_t x, Py_ssize_t hi) {
    return x < 0 ? 0 : (x > hi ? hi : (Py_ssize_t)x);
}

DEFINE_ABOVE(above_float, float, counts_float)
DEFINE_ABOVE(above_double, double, counts_double)

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
        add_row(at_most, below, n, m, lt + i * (m + 1), le + i * (m + 1));
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

/* the buffers of count_above and count_above_columns */
typedef struct {
    Py_buffer values, thr, seq, finite, hist_lt, hist_le, heap, heap_k, cap;
    int got, with_heap, is_double;
} Above;

static void above_release(Above *a) {
    Py_buffer *views[] = {&a->values, &a->thr,  &a->seq,    &a->finite, &a->hist_lt,
                          &a->hist_le, &a->heap, &a->heap_k, &a->cap};
    for (int i = a->got - 1; i >= 0; i--) PyBuffer_Release(views[i]);
    a->got = 0;
}

/* rows: the queries (the rows of values, or with columns the first rows of its columns) */
static int above_parse(PyObject *args, Above *a, int columns) {
    PyObject *values_obj, *thr_obj, *seq_obj, *finite_obj, *lt_obj, *le_obj;
    PyObject *heap_obj = Py_None, *k_obj = Py_None, *cap_obj = Py_None;
    a->got = 0;
    if (!PyArg_ParseTuple(args, "OOOOOO|OOO", &values_obj, &thr_obj, &seq_obj, &finite_obj,
                          &lt_obj, &le_obj, &heap_obj, &k_obj, &cap_obj))
        return -1;
    if (get_buffer(values_obj, &a->values, "values", NULL, 2, 0) < 0) return -1;
    a->got = 1;
    a->is_double = strcmp(a->values.format, "d") == 0;
    if (!a->is_double && strcmp(a->values.format, "f") != 0) {
        PyErr_SetString(PyExc_ValueError, "`values` must be float32 or float64");
        return -1;
    }
    const char *fmt = a->values.format;
    if (get_buffer(thr_obj, &a->thr, "thr", fmt, 1, 1) < 0) return -1;
    a->got = 2;
    if (get_buffer(seq_obj, &a->seq, "seq", fmt, 2, 0) < 0) return -1;
    a->got = 3;
    if (get_buffer(finite_obj, &a->finite, "num_finite", "i8", 2, 0) < 0) return -1;
    a->got = 4;
    if (get_buffer(lt_obj, &a->hist_lt, "hist_lt", "i8", 2, 1) < 0) return -1;
    a->got = 5;
    if (get_buffer(le_obj, &a->hist_le, "hist_le", "i8", 2, 1) < 0) return -1;
    a->got = 6;
    a->with_heap = heap_obj != Py_None;
    if (a->with_heap) {
        if (get_buffer(heap_obj, &a->heap, "heap", fmt, 2, 1) < 0) return -1;
        a->got = 7;
        if (get_buffer(k_obj, &a->heap_k, "heap_k", "i8", 2, 0) < 0) return -1;
        a->got = 8;
        if (get_buffer(cap_obj, &a->cap, "cap", fmt, 1, 0) < 0) return -1;
        a->got = 9;
    }
    Py_ssize_t rows = a->thr.shape[0], m = a->seq.shape[1];
    Py_ssize_t queries = columns ? a->values.shape[1] : a->values.shape[0];
    if ((columns ? rows > queries : rows != queries) || a->seq.shape[0] != rows ||
        a->finite.shape[0] != rows || a->finite.shape[1] != 1 || a->hist_lt.shape[0] != rows ||
        a->hist_lt.shape[1] != m + 1 || a->hist_le.shape[0] != rows ||
        a->hist_le.shape[1] != m + 1 ||
        (a->with_heap && (a->heap.shape[0] != rows || a->heap_k.shape[0] != rows ||
                          a->heap_k.shape[1] != 1 || a->cap.shape[0] != rows))) {
        PyErr_SetString(PyExc_ValueError, "count_above: the shapes do not fit");
        return -1;
    }
    if ((columns ? a->values.shape[0] : a->values.shape[1]) > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "count_above: rows of 2**31 items or more");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(count_above_doc,
             "count_above(values, thr, seq, num_finite, hist_lt, hist_le, heap=None, heap_k=None, "
             "cap=None)\n\n"
             "Add each row's items at or above thr[row] (rows, the values' dtype, raised in place) "
             "to the row's histograms as count_rows does (rows whose items mostly pass are counted "
             "whole). heap (rows x w, the values' dtype, in place): each row's heap_k[row] best "
             "scores of distinct items so far, a min-heap in its first heap_k[row] places, which "
             "the row's items that pass and tie no relevant score join; thr[row] then rises to "
             "min(cap[row], the heap's least).");

static PyObject *count_above(PyObject *self, PyObject *args) {
    Above a;
    if (above_parse(args, &a, 0) < 0) {
        above_release(&a);
        return NULL;
    }
    Py_ssize_t rows = a.values.shape[0], n = a.values.shape[1], m = a.seq.shape[1];
    int64_t *at_most = (int64_t *)malloc((size_t)(2 * (m + 1)) * sizeof(int64_t));
    if (at_most == NULL) {
        above_release(&a);
        return PyErr_NoMemory();
    }
    int64_t *below = at_most + (m + 1);
    const int64_t *fin = (const int64_t *)a.finite.buf;
    const int64_t *ks = a.with_heap ? (const int64_t *)a.heap_k.buf : NULL;
    Py_ssize_t w = a.with_heap ? a.heap.shape[1] : 0;
    int64_t *lt = (int64_t *)a.hist_lt.buf, *le = (int64_t *)a.hist_le.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < rows; i++) {
        Py_ssize_t f = clamped(fin[i], m);
        Py_ssize_t k = ks != NULL ? clamped(ks[i], w) : 0;
        if (a.is_double) {
            double *t = (double *)a.thr.buf + i;
            *t = above_double((const double *)a.values.buf + i * n, n,
                              (const double *)a.seq.buf + i * m, f, m, *t, lt + i * (m + 1),
                              le + i * (m + 1), k > 0 ? (double *)a.heap.buf + i * w : NULL, k,
                              k > 0 ? ((const double *)a.cap.buf)[i] : 0.0, at_most, below);
        } else {
            float *t = (float *)a.thr.buf + i;
            *t = above_float((const float *)a.values.buf + i * n, n,
                             (const float *)a.seq.buf + i * m, f, m, *t, lt + i * (m + 1),
                             le + i * (m + 1), k > 0 ? (float *)a.heap.buf + i * w : NULL, k,
                             k > 0 ? ((const float *)a.cap.buf)[i] : 0.0f, at_most, below);
        }
    }
    Py_END_ALLOW_THREADS
    free(at_most);
    above_release(&a);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(count_above_columns_doc,
             "count_above_columns(values, thr, seq, num_finite, hist_lt, hist_le, heap=None, "
             "heap_k=None, cap=None) -> rows read\n\n"
             "count_above for the queries that are the first len(thr) columns of values (items x "
             "columns, row-major: the transposed block of the symmetric pass), read a row of "
             "items at a time. Stops once more items passed than a row-by-row count of the rest "
             "would cost (a weak model), and returns the rows of items read: the others are left "
             "to count_above.");

static PyObject *count_above_columns(PyObject *self, PyObject *args) {
    Above a;
    if (above_parse(args, &a, 1) < 0) {
        above_release(&a);
        return NULL;
    }
    Py_ssize_t items = a.values.shape[0], ld = a.values.shape[1];
    Py_ssize_t nq = a.thr.shape[0], m = a.seq.shape[1];
    const int64_t *fin = (const int64_t *)a.finite.buf;
    /* what the whole count of every query would cost, per row of items */
    int64_t cost = 0;
    for (Py_ssize_t j = 0; j < nq; j++) cost += 1 + clamped(fin[j], m) / 4;
    int64_t budget = cost * items / SPARSE_COST;
    Py_ssize_t w = a.with_heap ? a.heap.shape[1] : 0;
    const int64_t *ks = a.with_heap ? (const int64_t *)a.heap_k.buf : NULL;
    int64_t *lt = (int64_t *)a.hist_lt.buf, *le = (int64_t *)a.hist_le.buf;
    Py_ssize_t read;
    Py_BEGIN_ALLOW_THREADS
    if (a.is_double)
        read = above_double_columns((const double *)a.values.buf, items, ld, nq,
                                    (double *)a.thr.buf, (const double *)a.seq.buf, m, fin, lt,
                                    le, a.with_heap ? (double *)a.heap.buf : NULL, w, ks,
                                    a.with_heap ? (const double *)a.cap.buf : NULL, budget);
    else
        read = above_float_columns((const float *)a.values.buf, items, ld, nq,
                                   (float *)a.thr.buf, (const float *)a.seq.buf, m, fin, lt, le,
                                   a.with_heap ? (float *)a.heap.buf : NULL, w, ks,
                                   a.with_heap ? (const float *)a.cap.buf : NULL, budget);
    Py_END_ALLOW_THREADS
    above_release(&a);
    return PyLong_FromSsize_t(read);
}

static PyMethodDef methods[] = {
    {"count_rows", count_rows, METH_VARARGS, count_rows_doc},
    {"count_above", count_above, METH_VARARGS, count_above_doc},
    {"count_above_columns", count_above_columns, METH_VARARGS, count_above_columns_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_count",
    "count_block's histograms on the CPU for rows with few relevant scores (see kernels.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__count(void) { return PyModule_Create(&module); }
