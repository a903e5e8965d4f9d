/* The scores form's grouping of entries by query, in C: a counting sort.
 *
 * Why C: torchmetrics' form delivers (score, target, query index) entries in any order; grouping
 * 10 million of them by query with numpy takes one sort of 64-bit keys (scores._grouping_order),
 * n log n, the largest part of the form's time. The query codes are dense (0 .. num_q - 1), so
 * two linear passes give the same stable permutation: count the entries of each code, then
 * place each entry after the earlier entries of its code. That is the path where this module's
 * second function is not taken (scores far apart, or another dtype).
 *
 * count_by_query does the form's whole count without grouping anything: one pass over the
 * entries as they came, each added to its query's histogram of places among the query's few
 * relevant scores (scores._counted_by_query). Grouping 10 million shuffled entries moved every
 * entry and sorted every query's row; the pass reads each entry once and most of them (those
 * below their query's lowest relevant score) touch nothing else. The entries are cut into a
 * part a thread of torch's OpenMP pool (_parallel.h), each with histograms of its own, added
 * up after (10M shuffled entries on a 2-core VM: 0.29 -> 0.19 s; their reads are random, and
 * each thread waits on its own).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_parallel.h"

PyDoc_STRVAR(stable_order_doc,
             "stable_order(codes, num_groups, out)\n\n"
             "Write into out (int64, n) the stable permutation that groups the entries of codes "
             "(int64, n, each in 0 .. num_groups - 1) by code: out[k] is the position of the k-th "
             "entry once grouped. Raises ValueError for a code out of range.");

static int is_int64(const Py_buffer *view) {
    return view->itemsize == 8 && view->ndim == 1 &&
           (strcmp(view->format, "l") == 0 || strcmp(view->format, "q") == 0);
}

static PyObject *stable_order(PyObject *self, PyObject *args) {
    PyObject *codes_obj, *out_obj;
    Py_ssize_t num_groups;
    if (!PyArg_ParseTuple(args, "OnO", &codes_obj, &num_groups, &out_obj)) return NULL;
    Py_buffer codes, out;
    if (PyObject_GetBuffer(codes_obj, &codes, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) <
        0) {
        PyBuffer_Release(&codes);
        return NULL;
    }
    PyObject *result = NULL;
    int64_t *next = NULL;
    if (!is_int64(&codes) || !is_int64(&out) || codes.shape[0] != out.shape[0] ||
        num_groups < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "stable_order: `codes` and `out` must be int64 vectors of one length");
        goto finally;
    }
    Py_ssize_t n = codes.shape[0];
    const int64_t *c = (const int64_t *)codes.buf;
    int64_t *o = (int64_t *)out.buf;
    next = (int64_t *)calloc((size_t)num_groups + 1, sizeof(int64_t));
    if (next == NULL) {
        PyErr_NoMemory();
        goto finally;
    }
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (c[i] < 0 || c[i] >= num_groups) {
            bad = 1;
            break;
        }
        next[c[i] + 1]++;
    }
    if (!bad) {
        for (Py_ssize_t g = 0; g < num_groups; g++) next[g + 1] += next[g];
        for (Py_ssize_t i = 0; i < n; i++) o[next[c[i]]++] = (int64_t)i;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "stable_order: a code is out of range");
        goto finally;
    }
    Py_INCREF(Py_None);
    result = Py_None;
finally:
    free(next);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&out);
    return result;
}

/* How many of the ascending r[0 .. m) are < x (lt) and <= x (le): a count without branches for
 * a few (the judged entries of a query), a search by halves for many. */
#define DEFINE_PLACE(NAME, T)                                                                      \
    static inline void NAME(const T *r, int64_t m, T x, int64_t *lt, int64_t *le) {               \
        if (m <= 16) {                                                                             \
            int64_t below = 0, upto = 0;                                                           \
            for (int64_t j = 0; j < m; j++) {                                                      \
                below += r[j] < x;                                                                 \
                upto += r[j] <= x;                                                                 \
            }                                                                                      \
            *lt = below;                                                                           \
            *le = upto;                                                                            \
            return;                                                                                \
        }                                                                                          \
        int64_t lo = 0, hi = m;                                                                    \
        while (lo < hi) {                                                                          \
            int64_t mid = lo + (hi - lo) / 2;                                                      \
            if (r[mid] < x) lo = mid + 1; else hi = mid;                                           \
        }                                                                                          \
        *lt = lo;                                                                                  \
        hi = m;                                                                                    \
        while (lo < hi) {                                                                          \
            int64_t mid = lo + (hi - lo) / 2;                                                      \
            if (r[mid] <= x) lo = mid + 1; else hi = mid;                                          \
        }                                                                                          \
        *le = lo;                                                                                  \
    }

DEFINE_PLACE(place_float, float)
DEFINE_PLACE(place_double, double)

PyDoc_STRVAR(count_by_query_doc,
             "count_by_query(indexes, lo, code_of, scores, rel_ptr, rel_sorted, hist, threads=1)\n\n"
             "Add every entry to its query's histograms. indexes (int64, n): each entry's query "
             "index; its query's code is code_of[index - lo] (code_of: int64, a code per index "
             "from lo on), or, where code_of is None, the entries come grouped by query in "
             "ascending index order and the codes count up from 0 as the index changes. scores "
             "(float32 or float64, n). Query q's relevant scores are rel_sorted[rel_ptr[q] : "
             "rel_ptr[q + 1]] (ascending, the scores' dtype; rel_ptr int64, num_groups + 1); its "
             "m + 1 bins, from rel_ptr[q] + q on, are pairs in hist (int64, 2 x (len(rel_sorted) "
             "+ num_groups), in place, side by side: an entry's two increments mostly fall in one "
             "cache line). An entry adds 1 to the first of the bin of how many of its query's "
             "relevant scores are below it, and to the second of the bin of how many are at most "
             "it. Entries below their query's lowest relevant score (bin 0 of both, which no "
             "relevant score reads) are passed over, and so are a query's without relevant "
             "scores. With threads > 1, many entries are cut into a part a thread of torch's "
             "OpenMP pool, each counted into histograms of its own and added up: the same "
             "counts. Raises ValueError for an index or a code out of "
             "range.");

/* entries ahead whose table entries the pass asks for early (16 measured best of 8, 16, 32) */
#define AHEAD 16
#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(address) __builtin_prefetch(address)
#else
#define PREFETCH(address) ((void)(address))
#endif
/* a query's relevant scores (rel_sorted[start : start + m]) and its first bin (start + its code) */
typedef struct {
    int64_t start, m, bins;
} Place;

static int is_float(const Py_buffer *view, int *is_double) {
    if (view->ndim != 1) return 0;
    *is_double = strcmp(view->format, "d") == 0;
    return *is_double || strcmp(view->format, "f") == 0;
}

/* What the pass over the entries reads, and where each part of the entries counts. */
typedef struct {
    const int64_t *index, *code_of;
    const void *scores, *rel;
    int is_double, lookup;
    Py_ssize_t lo, span, groups, n, parts, hist_len;
    const double *lowest;
    const Place *record;
    int64_t *hist, *more; /* part 0's histograms (the caller's), then the others' in turn */
    /* where the codes are not looked up: per part, the code of the entry before it (-1 for
     * the first), from the changes of index in the parts before it */
    int64_t *code_before;
    int bad; /* an index or a code out of range (set by any part) */
} CountJob;

/* Part p's entries [*from, *to): n / parts each, the first n % parts one more. */
static void part_range(const CountJob *job, Py_ssize_t p, Py_ssize_t *from, Py_ssize_t *to) {
    const Py_ssize_t size = job->n / job->parts, extra = job->n % job->parts;
    *from = size * p + (p < extra ? p : extra);
    *to = *from + size + (p < extra ? 1 : 0);
}

/* Entries [from, to) added to `hist`; 1 where an index or a code is out of range. Where the
 * codes are not looked up, they count up from `q` (the code of the entry before `from`, -1 at
 * the first) as the index changes. */
static int count_entries(const CountJob *job, Py_ssize_t from, Py_ssize_t to, int64_t q,
                         int64_t *hist) {
    const int64_t *index = job->index;
    const double *lowest = job->lowest;
    const Place *record = job->record;
    const Py_ssize_t span = job->span;
    const int64_t lo = (int64_t)job->lo;
    for (Py_ssize_t i = from; i < to; i++) {
        const double x = job->is_double ? ((const double *)job->scores)[i]
                                        : (double)((const float *)job->scores)[i];
        int64_t at;
        if (job->lookup) {
            /* the places' entries of the entry AHEAD on, asked for now: each entry's reads
             * are random and mostly a table's, so without this the pass waited on them in turn
             * (0.24 -> 0.20 s over 10 million shuffled entries) */
            if (i + AHEAD < to) {
                const int64_t later = index[i + AHEAD] - lo;
                if (later >= 0 && later < span) {
                    PREFETCH(&lowest[later]);
                    PREFETCH(&record[later]);
                }
            }
            at = index[i] - lo;
            if (at < 0 || at >= span) return 1;
        } else {
            if (i == 0 || index[i] != index[i - 1]) q++;
            if (q >= job->groups) return 1;
            at = q;
        }
        if (x < lowest[at]) continue;
        const Place here = record[at];
        int64_t lt, le;
        if (job->is_double)
            place_double((const double *)job->rel + here.start, here.m, x, &lt, &le);
        else
            place_float((const float *)job->rel + here.start, here.m, (float)x, &lt, &le);
        hist[2 * (here.bins + lt)]++;
        hist[2 * (here.bins + le) + 1]++;
    }
    return 0;
}

/* rows_run's share: parts [start, stop) of the entries, each into its own histograms */
static void count_parts(void *ctx, Py_ssize_t start, Py_ssize_t stop, void *scratch) {
    (void)scratch;
    CountJob *job = (CountJob *)ctx;
    for (Py_ssize_t p = start; p < stop; p++) {
        Py_ssize_t from, to;
        part_range(job, p, &from, &to);
        int64_t *hist = p == 0 ? job->hist : job->more + (p - 1) * job->hist_len;
        const int64_t q = job->code_before != NULL ? job->code_before[p] : -1;
        if (count_entries(job, from, to, q, hist)) SHARED_STORE(&job->bad, 1);
    }
}

/* rows_run's share where the codes count up: per part [start, stop), the changes of index
 * inside it (into code_before, which the caller turns into each part's starting code) */
static void count_changes(void *ctx, Py_ssize_t start, Py_ssize_t stop, void *scratch) {
    (void)scratch;
    CountJob *job = (CountJob *)ctx;
    for (Py_ssize_t p = start; p < stop; p++) {
        Py_ssize_t from, to;
        part_range(job, p, &from, &to);
        int64_t changes = 0;
        for (Py_ssize_t i = from > 0 ? from : 1; i < to; i++)
            changes += job->index[i] != job->index[i - 1];
        job->code_before[p] = changes;
    }
}

/* the fewest entries shared out over threads, and the least of them a histogram entry (each
 * part beyond the first zeroes and adds a copy of the histograms) */
#define SHARED_ENTRIES (1 << 16)
#define ENTRIES_A_BIN 4

static PyObject *count_by_query(PyObject *self, PyObject *args, PyObject *kwargs) {
    PyObject *objs[7];
    Py_ssize_t lo;
    const int threads = threads_keyword(kwargs);
    if (threads < 0) return NULL;
    if (!PyArg_ParseTuple(args, "OnOOOOO", &objs[0], &lo, &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6]))
        return NULL;
    objs[1] = NULL; /* (lo: a number, no buffer) */
    const int lookup = objs[2] != Py_None;
    Py_buffer views[7];
    int held[7] = {0};
    PyObject *result = NULL;
    double *lowest = NULL;
    Place *record = NULL;
    int64_t *more = NULL, *code_before = NULL;
    for (int k = 0; k < 7; k++) {
        if (objs[k] == NULL || objs[k] == Py_None) continue;
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (k == 6 ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[k], &views[k], flags) < 0) goto finally;
        held[k] = 1;
    }
    int is_double = 0, rel_double = 0;
    if (!is_int64(&views[0]) || (lookup && !is_int64(&views[2])) ||
        !is_float(&views[3], &is_double) || !is_int64(&views[4]) ||
        !is_float(&views[5], &rel_double) || rel_double != is_double || !is_int64(&views[6])) {
        PyErr_SetString(PyExc_ValueError, "count_by_query: the arrays' dtypes do not fit");
        goto finally;
    }
    const Py_ssize_t n = views[0].shape[0], total = views[5].shape[0];
    const Py_ssize_t groups = views[4].shape[0] - 1;
    const int64_t *ptr = (const int64_t *)views[4].buf;
    int fits = views[3].shape[0] == n && groups >= 0 && views[6].shape[0] == 2 * (total + groups);
    /* rel_ptr: from 0 to len(rel_sorted), never falling (a query's scores read through it) */
    for (Py_ssize_t q = 0; fits && q <= groups; q++)
        fits = q == 0 ? ptr[0] == 0 : ptr[q] >= ptr[q - 1];
    if (!fits || ptr[groups] != total) {
        PyErr_SetString(PyExc_ValueError,
                        "count_by_query: the arrays' lengths or rel_ptr do not fit");
        goto finally;
    }
    const int64_t *code_of = lookup ? (const int64_t *)views[2].buf : NULL;
    const Py_ssize_t span = lookup ? views[2].shape[0] : 0;
    /* Per place (an index value where the codes are looked up, else a code), its query's
     * lowest relevant score (+inf: none), read for every entry: an entry below it lands in bin
     * 0 of both histograms, whose counts no relevant score reads, so most entries (a query's
     * many that rank below every relevant one) touch nothing else. The few others read their
     * query's code, first relevant score and count from one record (one cache line, not one
     * each from code_of and rel_ptr), then its scores and bins. */
    const Py_ssize_t places = lookup ? span : groups;
    lowest = (double *)malloc(((size_t)places + 1) * sizeof(double));
    record = (Place *)malloc(((size_t)places + 1) * sizeof(Place));
    if (lowest == NULL || record == NULL) {
        PyErr_NoMemory();
        goto finally;
    }
    CountJob job = {views[0].buf, code_of, views[3].buf, views[5].buf, is_double, lookup,
                    lo, span, groups, n, 1, views[6].shape[0], lowest, record,
                    (int64_t *)views[6].buf, NULL, NULL, 0};
    /* The entries are cut into a part a thread, each counted into histograms of its own, then
     * added up: the same sums in any order. Shuffled entries' reads are random, and each
     * thread waits on its own (10M of them: 0.29 s on one thread of a 2-core VM, 0.19 s on
     * two); grouped ones (0.10 s on one) start their codes from the changes of index in the
     * parts before them, counted first, a part a thread (each entry compared once). */
    if (threads > 1 && n >= SHARED_ENTRIES && n >= ENTRIES_A_BIN * job.hist_len) {
        const int team = rows_threads(threads, 1, threads);
        if (team > 1) {
            more = (int64_t *)calloc((size_t)(team - 1) * (size_t)job.hist_len, sizeof(int64_t));
            code_before = lookup ? NULL : (int64_t *)malloc((size_t)team * sizeof(int64_t));
            if (more != NULL && (lookup || code_before != NULL)) {
                job.parts = team;
                job.more = more;
                job.code_before = code_before;
            }
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t at = 0; at < places; at++) {
        const int64_t q = lookup ? code_of[at] : at;
        if (q < 0 || q >= groups) { /* (an index value no entry holds: never read) */
            lowest[at] = INFINITY;
            record[at] = (Place){0, 0, 0};
            continue;
        }
        const int64_t start = ptr[q];
        record[at] = (Place){start, ptr[q + 1] - start, start + q};
        lowest[at] = ptr[q + 1] <= start ? INFINITY
                     : is_double         ? ((const double *)views[5].buf)[start]
                                         : (double)((const float *)views[5].buf)[start];
    }
    char own = 0;
    if (job.code_before != NULL) {
        rows_run(count_changes, &job, job.parts, 1, (int)job.parts, 1, &own);
        int64_t before = 0; /* (the changes in the parts so far) */
        for (Py_ssize_t p = 0; p < job.parts; p++) {
            const int64_t inside = job.code_before[p];
            job.code_before[p] = p == 0 ? -1 : before; /* (entry 0 counts up to code 0) */
            before += inside;
        }
    }
    rows_run(count_parts, &job, job.parts, 1, (int)job.parts, 1, &own);
    for (Py_ssize_t p = 1; p < job.parts && !job.bad; p++) {
        const int64_t *part = more + (p - 1) * job.hist_len;
        for (Py_ssize_t j = 0; j < job.hist_len; j++) job.hist[j] += part[j];
    }
    Py_END_ALLOW_THREADS
    if (job.bad) {
        PyErr_SetString(PyExc_ValueError, "count_by_query: an index or a code is out of range");
        goto finally;
    }
    result = Py_NewRef(Py_None);
finally:
    free(code_before);
    free(more);
    free(record);
    free(lowest);
    for (int k = 6; k >= 0; k--)
        if (held[k]) PyBuffer_Release(&views[k]);
    return result;
}

static PyMethodDef methods[] = {
    {"stable_order", stable_order, METH_VARARGS, stable_order_doc},
    {"count_by_query", (PyCFunction)(void (*)(void))count_by_query, METH_VARARGS | METH_KEYWORDS,
     count_by_query_doc},
    SHARES_ROWS_METHOD,
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_group",
    "The scores form's grouping of entries by query: a counting sort, and the count of each "
    "query's entries against its relevant scores (see scores.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__group(void) { return PyModule_Create(&module); }
