/* The rows of a block shared out over the threads of torch's OpenMP pool, for the compiled
 * passes whose rows are independent (each row's own counts, thresholds and heap, or its own
 * unit row; or a part of the scores form's entries, counted into histograms of its own).
 *
 * Why: on the CPU a block's product runs on all of torch's threads, and the passes after it
 * (the count, the unit rows) ran on one: on 2 cores, 0.7 s of the 0.9 s a dense qrels
 * evaluation (1,000,000 x 384, 1,000 queries) spent besides its 2.3 s of products. Their rows
 * write disjoint state, so any split gives the same values, bit for bit; threads take `grain`
 * rows at a time from a shared counter (a row counted whole costs many times a row whose items
 * mostly fall below its threshold).
 *
 * Why torch's pool and not threads of our own: after a product, torch's OpenMP threads spin a
 * while waiting for the next one, on the very cores a thread of ours would need, and a thread
 * started per block costs about 40 us; the pool's threads are awake already (a team of 2 began
 * a 1,000 x 2,112 block's count within 1 to 18 us of the call, on a 2-core VM, and counted it
 * in 0.3 ms against 0.5 ms on one thread). The pool is reached through GOMP_parallel, the entry
 * point `#pragma omp parallel` compiles to in GCC's libgomp, which LLVM's and Intel's runtimes
 * provide too, looked up in the symbols the process has loaded (torch loads its runtime
 * globally), so this file needs no OpenMP of its own to build. Where none is loaded (or on
 * Windows), the calling thread does every row. */
#ifndef RETRIEVAL_METRICS_PARALLEL_H
#define RETRIEVAL_METRICS_PARALLEL_H

#include <Python.h>
#include <stdlib.h>
#include <string.h>

#if defined(_WIN32) || !defined(__GNUC__)
/* one thread: plain loads and stores */
#define PARALLEL_OPENMP 0
#define SHARED_ADD(at, value) ((*(at) += (value)) - (value))
#define SHARED_LOAD(at) (*(at))
#define SHARED_STORE(at, value) (*(at) = (value))
#else
#include <dlfcn.h>
#define PARALLEL_OPENMP 1
/* what the threads of a team share: counters and flags, read and written whole */
#define SHARED_ADD(at, value) __atomic_fetch_add((at), (value), __ATOMIC_RELAXED)
#define SHARED_LOAD(at) __atomic_load_n((at), __ATOMIC_RELAXED)
#define SHARED_STORE(at, value) __atomic_store_n((at), (value), __ATOMIC_RELAXED)
#endif

/* the most threads a pass is given */
#define PARALLEL_MAX_THREADS 256

/* rows [start, stop) of `ctx`'s block, with a thread's own scratch */
typedef void (*rows_fn)(void *ctx, Py_ssize_t start, Py_ssize_t stop, void *scratch);

typedef struct {
    rows_fn fn;
    void *ctx;
    Py_ssize_t rows, grain, next; /* next: the first row no thread took yet */
    size_t scratch;
} RowsJob;

/* One thread's share: `grain` rows at a time until none are left. A thread without its
 * scratch takes no rows; the others take them, and after the team the calling thread, with
 * its own (`own`, never NULL there: rows_run), any left. */
static void rows_take(RowsJob *job, void *own) {
    void *scratch = own != NULL ? own : malloc(job->scratch > 0 ? job->scratch : 1);
    if (scratch == NULL) return;
    for (;;) {
        const Py_ssize_t start = SHARED_ADD(&job->next, job->grain);
        if (start >= job->rows) break;
        const Py_ssize_t stop = start + job->grain < job->rows ? start + job->grain : job->rows;
        job->fn(job->ctx, start, stop, scratch);
    }
    if (own == NULL) free(scratch);
}

typedef void (*gomp_parallel_fn)(void (*)(void *), void *, unsigned, unsigned);

/* the process's GOMP_parallel, or NULL */
static gomp_parallel_fn openmp_parallel(void) {
#if PARALLEL_OPENMP
    static gomp_parallel_fn found = NULL;
    static int looked = 0;
    if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
        gomp_parallel_fn f;
        void *symbol = dlsym(RTLD_DEFAULT, "GOMP_parallel");
        memcpy(&f, &symbol, sizeof f); /* (a data pointer to a function pointer, as POSIX allows) */
        __atomic_store_n(&found, f, __ATOMIC_RELAXED);
        __atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
    }
    return __atomic_load_n(&found, __ATOMIC_RELAXED);
#else
    return NULL;
#endif
}

/* The rows a thread takes at a time: `least`, or more where rows are short, so that each take
 * holds TAKE_VALUES values at least (threads taking a few short rows each wrote the same cache
 * lines, neighbouring rows' thresholds and histograms, take after take). */
#define TAKE_VALUES (1 << 14)
static inline Py_ssize_t rows_grain(Py_ssize_t least, Py_ssize_t row_length) {
    const Py_ssize_t by_values = TAKE_VALUES / (row_length > 0 ? row_length : 1);
    return by_values > least ? by_values : least;
}

/* a thread of the team: its own scratch */
static void rows_team(void *job) { rows_take((RowsJob *)job, NULL); }

/* The threads a block of `rows` rows is given, of `wanted` (the caller's, who weighs the
 * block's size against a team's start: kernels.pass_threads): at most a grain of rows each. */
static int rows_threads(Py_ssize_t rows, Py_ssize_t grain, int wanted) {
    if (wanted <= 1 || rows <= grain || openmp_parallel() == NULL) return 1;
    const Py_ssize_t by_rows = (rows + grain - 1) / grain;
    return wanted < by_rows ? wanted : (int)by_rows;
}

/* fn over rows [0, rows) in `grain`-row steps, on `threads` threads of the OpenMP pool (from
 * rows_threads; 1: the calling thread alone, with `own`, its scratch; each other thread
 * mallocs `scratch` bytes of its own). Call it without the GIL. */
static void rows_run(rows_fn fn, void *ctx, Py_ssize_t rows, Py_ssize_t grain, int threads,
                     size_t scratch, void *own) {
    RowsJob job = {fn, ctx, rows, grain > 0 ? grain : 1, 0, scratch};
    gomp_parallel_fn parallel = threads > 1 ? openmp_parallel() : NULL;
    if (parallel == NULL) {
        rows_take(&job, own);
        return;
    }
    /* (every member of the team, the calling thread too, takes rows with scratch of its own:
     * the team's numbering is not asked of the runtime) */
    parallel(rows_team, &job, (unsigned)threads, 0);
    /* rows no member took (none had its scratch) are the calling thread's, with its own */
    rows_take(&job, own);
}

/* the `threads` keyword of a call (1 where it is not given), or -1 with an exception set */
static int threads_keyword(PyObject *kwargs) {
    if (kwargs == NULL) return 1;
    PyObject *value = PyDict_GetItemString(kwargs, "threads");
    Py_ssize_t given = PyDict_Size(kwargs);
    if (given != (value != NULL ? 1 : 0)) {
        PyErr_SetString(PyExc_TypeError, "the only keyword taken is `threads`");
        return -1;
    }
    if (value == NULL) return 1;
    long threads = PyLong_AsLong(value);
    if (threads == -1 && PyErr_Occurred()) return -1;
    if (threads < 1) {
        PyErr_SetString(PyExc_ValueError, "`threads` must be a positive int");
        return -1;
    }
    return threads > PARALLEL_MAX_THREADS ? PARALLEL_MAX_THREADS : (int)threads;
}

/* shares_rows(): whether a pass's threads= can share its rows out (the pool was found) */
static PyObject *parallel_shares_rows(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    return PyBool_FromLong(openmp_parallel() != NULL);
}

/* the module `module` with TAKE_VALUES and `least` (the rows a thread takes at a time at
 * least) as attributes, what a test needs to give threads blocks they split; NULL on error */
static inline PyObject *with_take_sizes(PyObject *module, long least) {
    if (module != NULL && (PyModule_AddIntConstant(module, "TAKE_VALUES", TAKE_VALUES) < 0 ||
                           PyModule_AddIntConstant(module, "ROW_GRAIN", least) < 0)) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}

#define SHARES_ROWS_METHOD                                                                     \
    {"shares_rows", parallel_shares_rows, METH_NOARGS,                                             \
     "shares_rows() -> whether threads= shares a pass's rows out over torch's OpenMP threads"}

#endif
