/* Unit rows as a ranking reads them (row_norms.NormsAsRead), in one pass over each row: the row
 * upcast to float32 (float16, bfloat16) or read as float32, its Euclidean norm, the row divided
 * by it, and zeroed where the norm is not finite.
 *
 * Why C: torch takes three passes over a block for it (copy_, linalg.vector_norm, div_), each a
 * read of the block from memory, plus a handful of small operations a chunk (the divisor, the
 * check for rows to zero). Here each row is read once and the later steps find it in L1: for a
 * 2M x 768 float16 corpus on disk, 0.56 s against torch's 0.77 s on 2 cores, and about 0.5 s
 * less in all once the small operations go too.
 *
 * The values are torch's, bit for bit. The upcast and the division are exact IEEE operations,
 * the same whatever computes them. The norm is summed in torch's order for a contiguous last
 * dimension (ATen's norm kernel, its vectorized path): `lanes` running sums, lane l adding the
 * squares of elements l, l + lanes, l + 2 lanes, ... (each square rounded, then each sum: no
 * fused multiply-add, this file is built with -ffp-contract=off), folded from lane 0 to the
 * last, then a float square root. torch's `lanes` is the width of its Vectorized<float> (8
 * under AVX2, 16 under AVX-512), fixed when torch starts: row_norms.py finds it by comparing
 * this kernel with torch on rows of the corpus's width before using it, and keeps torch's
 * passes where no lane count agrees (or the width is not a multiple of it: torch adds the rest
 * one by one, in an order its compiler chooses).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_parallel.h"

/* rows a thread takes at a time at least (_parallel.h's rows_grain) */
#define ROW_GRAIN 16

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__INTEL_COMPILER)
#include <immintrin.h>
#define HAVE_AVX2 1
#endif

/* the stored dtypes read (unit_rows' `kind`) */
enum { KIND_FLOAT32 = 0, KIND_FLOAT16 = 1, KIND_BFLOAT16 = 2 };

typedef struct {
    const char *src;   /* rows of `d` stored values */
    float *dst;        /* rows of `d` float32 (may be `src` itself, for float32) */
    float *norms;      /* one a row */
    Py_ssize_t rows, d;
    int kind, lanes, known, divide, simd;
    int zeroed;        /* out: a row had a norm that is not finite (and was zeroed) */
} Job;

/* float16 to float32, exactly (subnormals, infinities, NaN payloads) without F16C */
static inline float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else { /* a subnormal half is a normal float: shift its leading 1 into the hidden bit */
        uint32_t shift = 0;
        while (!(man & 0x400u)) {
            man <<= 1;
            shift++;
        }
        bits = sign | ((113 - shift) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline float stored_value(const char *row, Py_ssize_t j, int kind) {
    if (kind == KIND_FLOAT32) {
        float f;
        memcpy(&f, row + 4 * j, sizeof f);
        return f;
    }
    uint16_t h;
    memcpy(&h, row + 2 * j, sizeof h);
    if (kind == KIND_FLOAT16) return half_to_float(h);
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* the row's norm from its lane sums, or the known one; the row divided, or zeroed where the
 * norm is not finite (NormsAsRead.zero_unfinished); returns 1 where it zeroed the row */
static inline int finish_row(float *t, Py_ssize_t d, const float *acc, int lanes, float *norm,
                             int known, int divide) {
    if (!known) {
        float sum = acc[0];
        for (int l = 1; l < lanes; l++) sum = sum + acc[l];
        *norm = sqrtf(sum);
    }
    const float n = *norm;
    if (!isfinite(n)) {
        memset(t, 0, (size_t)d * sizeof(float));
        return 1;
    }
    if (divide) {
        const float q = n > 0.0f ? n : 1.0f; /* (row_norms.unit_divisor: a zero row stays 0) */
        for (Py_ssize_t j = 0; j < d; j++) t[j] = t[j] / q;
    }
    return 0;
}

/* any processor: one element at a time, in the lanes' order */
static void rows_portable(Job *job) {
    const size_t stored = job->kind == KIND_FLOAT32 ? 4 : 2;
    for (Py_ssize_t i = 0; i < job->rows; i++) {
        const char *s = job->src + (size_t)(i * job->d) * stored;
        float *t = job->dst + i * job->d;
        float acc[16] = {0};
        for (Py_ssize_t j = 0; j < job->d; j += job->lanes)
            for (int l = 0; l < job->lanes; l++) {
                const float v = stored_value(s, j + l, job->kind);
                t[j + l] = v;
                acc[l] = acc[l] + v * v;
            }
        job->zeroed |= finish_row(t, job->d, acc, job->lanes, job->norms + i, job->known,
                                  job->divide);
    }
}

#ifdef HAVE_AVX2
__attribute__((target("avx2,f16c"))) static inline __m256 load8(const char *s, Py_ssize_t j,
                                                                 int kind) {
    if (kind == KIND_FLOAT32) return _mm256_loadu_ps((const float *)s + j);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)s + j));
    if (kind == KIND_FLOAT16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* eight elements a step: with 8 lanes every step adds to one vector of sums, with 16 the steps
 * alternate between two (lanes 0-7, then 8-15) */
__attribute__((target("avx2,f16c"))) static void rows_avx2(Job *job) {
    const size_t stored = job->kind == KIND_FLOAT32 ? 4 : 2;
    const Py_ssize_t d = job->d;
    for (Py_ssize_t i = 0; i < job->rows; i++) {
        const char *s = job->src + (size_t)(i * d) * stored;
        float *t = job->dst + i * d;
        __m256 low = _mm256_setzero_ps(), high = _mm256_setzero_ps();
        if (job->lanes == 8) {
            for (Py_ssize_t j = 0; j < d; j += 8) {
                const __m256 v = load8(s, j, job->kind);
                _mm256_storeu_ps(t + j, v);
                low = _mm256_add_ps(low, _mm256_mul_ps(v, v));
            }
        } else {
            for (Py_ssize_t j = 0; j < d; j += 16) {
                const __m256 v = load8(s, j, job->kind), w = load8(s, j + 8, job->kind);
                _mm256_storeu_ps(t + j, v);
                _mm256_storeu_ps(t + j + 8, w);
                low = _mm256_add_ps(low, _mm256_mul_ps(v, v));
                high = _mm256_add_ps(high, _mm256_mul_ps(w, w));
            }
        }
        float acc[16];
        _mm256_storeu_ps(acc, low);
        _mm256_storeu_ps(acc + 8, high);
        job->zeroed |= finish_row(t, d, acc, job->lanes, job->norms + i, job->known, job->divide);
    }
}
#endif

static void run_job(Job *job) {
#ifdef HAVE_AVX2
    if (job->simd && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
        rows_avx2(job);
        return;
    }
#endif
    rows_portable(job);
}

/* rows [start, stop) of the whole job, as a job of their own (each row is read and written
 * alone: any split gives the same values) */
static void job_rows(void *ctx, Py_ssize_t start, Py_ssize_t stop, void *scratch) {
    Job *whole = (Job *)ctx;
    (void)scratch;
    const size_t stored = whole->kind == KIND_FLOAT32 ? 4 : 2;
    Job part = *whole;
    part.src = whole->src + (size_t)(start * whole->d) * stored;
    part.dst = whole->dst + start * whole->d;
    part.norms = whole->norms + start;
    part.rows = stop - start;
    part.zeroed = 0;
    run_job(&part);
    if (part.zeroed) SHARED_STORE(&whole->zeroed, 1);
}

PyDoc_STRVAR(unit_rows_doc,
             "unit_rows(src, kind, dst, norms, lanes, known, divide, simd=True)\n\n"
             "Each row of src (rows x d, C-contiguous: float32 for kind 0, float16 or bfloat16 "
             "viewed as 2-byte integers for kinds 1 and 2) written into dst (rows x d float32, "
             "C-contiguous; dst may be src itself for float32) as float32, with its norm in "
             "norms (rows float32 values, contiguous) summed in `lanes` (8 or 16; d a multiple "
             "of it) running sums, or read from norms where `known`; each row divided by its "
             "norm (1 for a zero row) where `divide`, and zeroed where its norm is not finite. "
             "simd=False: the portable loop, the same values. threads (a keyword, 1 by default): "
             "the rows shared out over that many of the OpenMP pool's threads, the same values. "
             "Returns whether a row was zeroed.");

static PyObject *unit_rows(PyObject *self, PyObject *args, PyObject *kwargs) {
    const int threads = threads_keyword(kwargs);
    if (threads < 0) return NULL;
    PyObject *src_obj, *dst_obj, *norms_obj;
    int kind, lanes, known, divide, simd = 1;
    if (!PyArg_ParseTuple(args, "OiOOipp|p", &src_obj, &kind, &dst_obj, &norms_obj, &lanes,
                          &known, &divide, &simd))
        return NULL;
    if (kind < KIND_FLOAT32 || kind > KIND_BFLOAT16) {
        PyErr_SetString(PyExc_ValueError, "`kind` must be 0 (float32), 1 (float16) or 2 (bfloat16)");
        return NULL;
    }
    if (lanes != 8 && lanes != 16) {
        PyErr_SetString(PyExc_ValueError, "`lanes` must be 8 or 16");
        return NULL;
    }
    Py_buffer src, dst, norms;
    const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
    if (PyObject_GetBuffer(src_obj, &src, flags) < 0) return NULL;
    if (PyObject_GetBuffer(dst_obj, &dst, flags | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    if (PyObject_GetBuffer(norms_obj, &norms, flags | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&src);
        PyBuffer_Release(&dst);
        return NULL;
    }
    PyObject *result = NULL;
    const Py_ssize_t stored = kind == KIND_FLOAT32 ? 4 : 2;
    if (src.ndim != 2 || src.itemsize != stored) {
        PyErr_Format(PyExc_ValueError, "`src` must be a C-contiguous 2-d array of %zd-byte values",
                     stored);
        goto finally;
    }
    if (dst.ndim != 2 || strcmp(dst.format, "f") != 0 || dst.shape[0] != src.shape[0] ||
        dst.shape[1] != src.shape[1]) {
        PyErr_SetString(PyExc_ValueError, "`dst` must be a C-contiguous float32 array of src's shape");
        goto finally;
    }
    if (strcmp(norms.format, "f") != 0 || norms.len != src.shape[0] * 4) {
        PyErr_SetString(PyExc_ValueError, "`norms` must hold one float32 value a row");
        goto finally;
    }
    if (src.shape[1] % lanes != 0) {
        PyErr_SetString(PyExc_ValueError, "the rows' width must be a multiple of `lanes`");
        goto finally;
    }
    if (kind != KIND_FLOAT32 && (const char *)src.buf < (const char *)dst.buf + dst.len &&
        (const char *)dst.buf < (const char *)src.buf + src.len) {
        PyErr_SetString(PyExc_ValueError, "half rows cannot be upcast in place");
        goto finally;
    }
    Job whole = {(const char *)src.buf, (float *)dst.buf, (float *)norms.buf, src.shape[0],
                 src.shape[1], kind, lanes, known, divide, simd, 0};
    const Py_ssize_t grain = rows_grain(ROW_GRAIN, whole.d);
    const int team = rows_threads(whole.rows, grain, threads);
    Py_BEGIN_ALLOW_THREADS
    rows_run(job_rows, &whole, whole.rows, grain, team, 1, &whole);
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(whole.zeroed);
finally:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    PyBuffer_Release(&norms);
    return result;
}

static PyMethodDef methods[] = {
    SHARES_ROWS_METHOD,
    {"unit_rows", (PyCFunction)(void (*)(void))unit_rows, METH_VARARGS | METH_KEYWORDS,
     unit_rows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rows",
    "Unit rows in one pass over each row: upcast, norm in torch's order, division (row_norms.py).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__rows(void) { return with_take_sizes(PyModule_Create(&module), ROW_GRAIN); }
