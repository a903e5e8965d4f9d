/* count_block's histograms on the CPU, in C: rows with few relevant scores by compares, rows
 * with many by a radix sort of the row (below).
 *
 * Why C: for each row of a score block and each of its m relevant scores r_j, the ranking needs
 * #{v <= r_j} and #{v < r_j} over the row's items. The sort of every row (kernels._merge_rows)
 * costs more than the product that made the scores; numpy's compare-and-count passes write and
 * read a mask per pass. Here each row is read from the cache a few relevant scores at a time,
 * comparing and counting in registers (loops the compiler vectorizes): 2m compares per item.
 *
 * The results are the histograms _merge_rows adds, bit for bit (tests/ranking/test_counting.py):
 * with at_most = [0, #{v <= r_0}, ..., #{v <= r_(m-1)}, n] and below = [0, #{v < r_0}, ...,
 * #{v < r_(m-1)}, n], hist_lt[j] += at_most[j+1] - at_most[j] and hist_le[j] += (below[j+1] -
 * below[j]) - (at_most[j+1] - at_most[j]). Padding (+inf) after a row's finite relevant scores
 * is counted once per row.
 *
 * count_above and count_above_columns (below) count only the items at or above each row's
 * threshold, which they raise themselves where the ranking stops at a depth: on the CPU they
 * stand in for the segment maxima and the sparse and dense counts of kernels.py. Where most
 * items pass (a weak model), a row is counted whole by the loops above, and queries that are
 * the columns of a block count the rest of it whole in place, a vector of columns at a time.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../_parallel.h"

/* relevant scores counted per pass over a row (registers: two counters each) */
#define GROUP 4

/* rows a thread takes at a time at least (_parallel.h's rows_grain) */
#define ROW_GRAIN 8

/* The loops below are compiled twice on x86-64 Linux (glibc's ifunc) with GCC or clang: for
 * AVX2 (8 floats a compare, twice SSE2's 4; the count of a 1,000 x 2,112 block 3x faster on an
 * AMD EPYC) and for any x86-64; the loader picks the first the processor runs. Compares and
 * integer adds only: the counts do not depend on which. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__GLIBC__) && !defined(__INTEL_COMPILER)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

#define DEFINE_COUNTS(NAME, T)                                                                     \
    VECTOR_CLONES                                                                                  \
    static void NAME(const T *v, Py_ssize_t n, const T *r, Py_ssize_t j0, Py_ssize_t f,            \
                     Py_ssize_t m, int64_t *at_most, int64_t *below) {                             \
        /* the relevant scores before j0 are not counted: 0 items at or below them */              \
        Py_ssize_t j = 0;                                                                          \
        for (; j < j0; j++) {                                                                      \
            at_most[j] = 0;                                                                        \
            below[j] = 0;                                                                          \
        }                                                                                          \
        /* the padding counted once, with the last relevant scores: its scores are all +inf */     \
        const Py_ssize_t last = f < m ? f + 1 : f;                                                 \
        for (; j + GROUP <= last; j += GROUP) {                                                    \
            const T r0 = r[j], r1 = r[j + 1], r2 = r[j + 2], r3 = r[j + 3];                        \
            int32_t le0 = 0, le1 = 0, le2 = 0, le3 = 0, lt0 = 0, lt1 = 0, lt2 = 0, lt3 = 0;        \
            for (Py_ssize_t k = 0; k < n; k++) {                                                   \
                const T x = v[k];                                                                  \
                le0 += x <= r0; lt0 += x < r0;                                                     \
                le1 += x <= r1; lt1 += x < r1;                                                     \
                le2 += x <= r2; lt2 += x < r2;                                                     \
                le3 += x <= r3; lt3 += x < r3;                                                     \
            }                                                                                      \
            at_most[j] = le0; at_most[j + 1] = le1; at_most[j + 2] = le2; at_most[j + 3] = le3;    \
            below[j] = lt0; below[j + 1] = lt1; below[j + 2] = lt2; below[j + 3] = lt3;            \
        }                                                                                          \
        /* the rest two at a time (a pass over the row each, not one per relevant score) */        \
        for (; j + 2 <= last; j += 2) {                                                            \
            const T r0 = r[j], r1 = r[j + 1];                                                      \
            int32_t le0 = 0, le1 = 0, lt0 = 0, lt1 = 0;                                            \
            for (Py_ssize_t k = 0; k < n; k++) {                                                   \
                const T x = v[k];                                                                  \
                le0 += x <= r0; lt0 += x < r0;                                                     \
                le1 += x <= r1; lt1 += x < r1;                                                     \
            }                                                                                      \
            at_most[j] = le0; at_most[j + 1] = le1;                                                \
            below[j] = lt0; below[j + 1] = lt1;                                                    \
        }                                                                                          \
        for (; j < last; j++) {                                                                    \
            const T t = r[j];                                                                      \
            int32_t le = 0, lt = 0;                                                                \
            for (Py_ssize_t k = 0; k < n; k++) {                                                   \
                le += v[k] <= t;                                                                   \
                lt += v[k] < t;                                                                    \
            }                                                                                      \
            at_most[j] = le;                                                                       \
            below[j] = lt;                                                                         \
        }                                                                                          \
        for (Py_ssize_t p = last; p < m; p++) {                                                    \
            at_most[p] = at_most[f];                                                               \
            below[p] = below[f];                                                                   \
        }                                                                                          \
    }

DEFINE_COUNTS(counts_float, float)
DEFINE_COUNTS(counts_double, double)

/* Rows with many relevant scores (classes of thousands: hashing benchmarks) are counted by
 * sorting the row's items and walking the relevant scores along them: a few passes over each
 * item instead of 2m compares. The sort is a radix sort of keys whose unsigned order is the
 * scores' order (-0.0 made +0.0 first, so that it ties 0.0 as the compares do; no NaN here),
 * a byte a pass, skipping the bytes that every key shares (the high bytes of tied scores). */
#define SORT_ABOVE 128 /* a row with more finite relevant scores than this is sorted
                          * (kernels.COMPILED_MAX_RELEVANT) */

static inline uint32_t key_float(float x) {
    x += 0.0f;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static inline uint64_t key_double(double x) {
    x += 0.0;
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return (u >> 63) ? ~u : (u | 0x8000000000000000ull);
}

#define DEFINE_SORTED_COUNTS(NAME, T, K, KEY)                                                      \
    static void NAME(const T *v, Py_ssize_t n, const T *r, Py_ssize_t j0, Py_ssize_t m, K *keys,   \
                     K *spare, int64_t *at_most, int64_t *below) {                                 \
        enum { BYTES = sizeof(K) };                                                                \
        K low = (K)-1, high = 0;                                                                   \
        for (Py_ssize_t k = 0; k < n; k++) {                                                       \
            const K u = KEY(v[k]);                                                                 \
            keys[k] = u;                                                                           \
            low = u < low ? u : low;                                                               \
            high = u > high ? u : high;                                                            \
        }                                                                                          \
        /* every key lies between the lowest and the highest: the bytes above the highest one     \
         * where those two differ are every key's (all of them where all scores tie) */            \
        int top = 0;                                                                               \
        for (int b = 0; b < BYTES && n > 0; b++)                                                   \
            if (((low ^ high) >> (8 * b)) & 255) top = b + 1;                                      \
        Py_ssize_t counts[BYTES][256];                                                             \
        memset(counts, 0, sizeof counts);                                                          \
        for (Py_ssize_t k = 0; k < n && top > 0; k++)                                              \
            for (int b = 0; b < top; b++) counts[b][(keys[k] >> (8 * b)) & 255]++;                 \
        K *from = keys, *to = spare;                                                               \
        for (int b = 0; b < top; b++) {                                                            \
            if (counts[b][(from[0] >> (8 * b)) & 255] == n) continue; /* one byte for all */      \
            Py_ssize_t at = 0;                                                                     \
            for (int d = 0; d < 256; d++) {                                                        \
                const Py_ssize_t c = counts[b][d];                                                 \
                counts[b][d] = at;                                                                 \
                at += c;                                                                           \
            }                                                                                      \
            for (Py_ssize_t k = 0; k < n; k++)                                                     \
                to[counts[b][(from[k] >> (8 * b)) & 255]++] = from[k];                             \
            K *swap = from;                                                                        \
            from = to;                                                                             \
            to = swap;                                                                             \
        }                                                                                          \
        /* the relevant scores ascend (+inf padding last): both positions only move on */          \
        Py_ssize_t lt = 0, le = 0, j = 0;                                                          \
        for (; j < j0; j++) {                                                                      \
            at_most[j] = 0;                                                                        \
            below[j] = 0;                                                                          \
        }                                                                                          \
        for (; j < m; j++) {                                                                       \
            const K t = KEY(r[j]);                                                                 \
            while (lt < n && from[lt] < t) lt++;                                                   \
            if (le < lt) le = lt;                                                                  \
            while (le < n && from[le] <= t) le++;                                                  \
            below[j] = lt;                                                                         \
            at_most[j] = le;                                                                       \
        }                                                                                          \
    }

DEFINE_SORTED_COUNTS(sorted_counts_float, float, uint32_t, key_float)
DEFINE_SORTED_COUNTS(sorted_counts_double, double, uint64_t, key_double)

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

static inline Py_ssize_t clamped(int64_t x, Py_ssize_t hi) {
    return x < 0 ? 0 : (x > hi ? hi : (Py_ssize_t)x);
}

/* One side of a block's count: its queries' thresholds, relevant scores (m a row, the first
 * fin[i] finite), histograms (m + 1 a row) and, where the ranking stops at a depth, heaps (w a
 * row, the first ks[i] used) and caps; thr, seq, heap and cap in the scores' dtype. */
typedef struct {
    Py_ssize_t n, m, w;
    void *thr;
    const void *seq;
    const int64_t *fin;
    int64_t *lt, *le;
    void *heap;
    const int64_t *ks;
    const void *cap;
} Side;

/* 32-byte vectors of scores and of the masks their compares give */
typedef float floats __attribute__((vector_size(32)));
typedef int32_t ints __attribute__((vector_size(32)));
typedef double doubles __attribute__((vector_size(32)));
typedef int64_t longs __attribute__((vector_size(32)));

/* whether any lane of a mask is set: its 32 bytes or'ed as four words, not lane by lane */
static inline int any_set(const void *mask) {
    uint64_t words[4];
    memcpy(words, mask, sizeof words);
    return (words[0] | words[1] | words[2] | words[3]) != 0;
}

/* The cost of an item passing the threshold, in units of the whole-row count's per-item cost of
 * 1 + f / 4 (f relevant scores, 8 compares a vector): a search, a few writes and mispredicted
 * branches. A row's own state sits in the cache (SPARSE_COST); a column's is one of many read
 * in turn (COLUMN_COST). Set on an AMD EPYC (2 cores) where a passing item cost 30 to 100 ns
 * and a unit about 0.3 ns: a weak model (classes of 60, most items passing) as fast as the
 * whole count, a good one (SOP-sized, a few items a row) searched item by item. */
#define SPARSE_COST 100
#define COLUMN_COST 300
/* items compared a chunk at a time (8 vectors of floats, 16 of doubles) before the vector that
 * holds a passing item, then its items, are looked at: the fewer steps a row, the faster the
 * pass over a block where few pass (64: 2.5x faster than 16) */
#define CHUNK 64

#define DEFINE_ABOVE(NAME, T, V, M, COUNTS)                                                        \
    enum { NAME##_LANES = (int)(sizeof(V) / sizeof(T)) };                                          \
    /* lt: relevant scores < x among the f finite ones; le: <= x */                                \
    static inline Py_ssize_t NAME##_lower(const T *r, Py_ssize_t f, T x) {                         \
        if (f <= 16) { /* a count without branches beats the search's mispredicted ones */         \
            Py_ssize_t below = 0;                                                                  \
            for (Py_ssize_t j = 0; j < f; j++) below += r[j] < x;                                  \
            return below;                                                                          \
        }                                                                                          \
        Py_ssize_t lo = 0, hi = f;                                                                 \
        while (lo < hi) {                                                                          \
            Py_ssize_t mid = (lo + hi) / 2;                                                        \
            if (r[mid] < x) lo = mid + 1; else hi = mid;                                           \
        }                                                                                          \
        return lo;                                                                                 \
    }                                                                                              \
    /* a min-heap of k values: x replaces the root, which sinks */                                 \
    static inline void NAME##_push(T *h, Py_ssize_t k, T x) {                                      \
        Py_ssize_t i = 0;                                                                          \
        for (;;) {                                                                                 \
            Py_ssize_t c = 2 * i + 1;                                                              \
            if (c >= k) break;                                                                     \
            if (c + 1 < k && h[c + 1] < h[c]) c++;                                                 \
            if (h[c] >= x) break;                                                                  \
            h[i] = h[c];                                                                           \
            i = c;                                                                                 \
        }                                                                                          \
        h[i] = x;                                                                                  \
    }                                                                                              \
    /* the threshold t raised by the heap h (NULL: none) as an item pushed into it raises it */   \
    static inline T NAME##_raised(const T *h, T cap, T t) {                                        \
        if (h == NULL) return t;                                                                   \
        const T raised = h[0] < cap ? h[0] : cap;                                                  \
        return raised > t ? raised : t;                                                            \
    }                                                                                              \
    /* what an item must reach to feed the heap h past the threshold t: above the heap's */      \
    /* least, and at least t; +inf where there is no heap or its least reached the cap */          \
    static inline T NAME##_feed_at(const T *h, T cap, T t) {                                       \
        if (h == NULL || !(h[0] < cap)) return (T)INFINITY;                                        \
        return h[0] > t ? h[0] : t;                                                                \
    }                                                                                              \
    /* one item at or above its row's threshold t: counted (unless the row is counted whole), */   \
    /* and into the heap; returns the row's threshold after it */                                  \
    static inline T NAME##_item(T x, const T *r, Py_ssize_t f, int64_t *lt_row,                    \
                                int64_t *le_row, int count, T *h, Py_ssize_t k, T cap, T t) {      \
        const Py_ssize_t lt = NAME##_lower(r, f, x);                                               \
        const int tie = lt < f && r[lt] == x;                                                      \
        if (count) {                                                                               \
            lt_row[lt] += 1;                                                                       \
            if (tie) {                                                                             \
                Py_ssize_t le = lt + 1;                                                            \
                while (le < f && r[le] == x) le++;                                                 \
                le_row[le] += 1;                                                                   \
                le_row[lt] -= 1;                                                                   \
            }                                                                                      \
        }                                                                                          \
        /* an item tying a relevant score may be that relevant item, which the heap holds */       \
        /* from the start: left out (fewer items, still a lower bound); a heap whose least */      \
        /* reached the cap can raise nothing further, and is left as it is */                      \
        if (h != NULL && !tie && x > h[0] && h[0] < cap) {                                         \
            NAME##_push(h, k, x);                                                                  \
            t = NAME##_raised(h, cap, t);                                                          \
        }                                                                                          \
        return t;                                                                                  \
    }                                                                                              \
    /* whether an item of a vector is at or above its threshold (t: one for all, or each's): */    \
    /* compares of whole vectors (GCC's vector types: AVX2 registers in the avx2 clone), */        \
    /* which the compiler does not make of a loop of scalar compares or'ed together */             \
    static inline int NAME##_any_lanes(const T *v, T t) {                                          \
        V x;                                                                                       \
        memcpy(&x, v, sizeof x);                                                                   \
        M mask = x >= t;                                                                           \
        return any_set(&mask);                                                                     \
    }                                                                                              \
    static inline int NAME##_any_lanes_of(const T *v, const T *t) {                                \
        V x, y;                                                                                    \
        memcpy(&x, v, sizeof x);                                                                   \
        memcpy(&y, t, sizeof y);                                                                   \
        M mask = x >= y;                                                                           \
        return any_set(&mask);                                                                     \
    }                                                                                              \
    static inline int NAME##_any_of(const T *v, const T *t) {                                      \
        M acc = {0};                                                                               \
        for (int u = 0; u < CHUNK; u += NAME##_LANES) {                                            \
            V x, y;                                                                                \
            memcpy(&x, v + u, sizeof x);                                                           \
            memcpy(&y, t + u, sizeof y);                                                           \
            acc |= x >= y;                                                                         \
        }                                                                                          \
        return any_set(&acc);                                                                      \
    }                                                                                              \
    /* the starts of the chunks of a row with an item at or above t, in `found`: how many; */      \
    /* `passing`: how many items are at or above t (counted in the same compares, a lane's */      \
    /* count a vector of counts: a true compare is -1 in each lane) */                             \
    VECTOR_CLONES                                                                                  \
    static Py_ssize_t NAME##_chunks(const T *v, Py_ssize_t n, T t, int32_t *found,                 \
                                    Py_ssize_t *passing) {                                         \
        Py_ssize_t c = 0, k0 = 0;                                                                  \
        M total = {0};                                                                             \
        for (; k0 + CHUNK <= n; k0 += CHUNK) {                                                     \
            M acc = {0};                                                                           \
            for (int u = 0; u < CHUNK; u += NAME##_LANES) {                                        \
                V x;                                                                               \
                memcpy(&x, v + k0 + u, sizeof x);                                                  \
                acc -= x >= t;                                                                     \
            }                                                                                      \
            if (any_set(&acc)) {                                                                   \
                found[c++] = (int32_t)k0;                                                          \
                total += acc;                                                                      \
            }                                                                                      \
        }                                                                                          \
        Py_ssize_t tail = 0;                                                                       \
        for (Py_ssize_t q = k0; q < n; q++) tail += v[q] >= t;                                     \
        if (tail) found[c++] = (int32_t)k0;                                                        \
        for (int l = 0; l < NAME##_LANES; l++) tail += total[l];                                   \
        *passing = tail;                                                                           \
        return c;                                                                                  \
    }                                                                                              \
    /* One row: returns the row's threshold after it. `found`: room for a chunk start per */       \
    /* CHUNK items (and the tail). The chunks holding an item at or above the threshold are */     \
    /* found in one pass; their items are then looked at one by one, or, where so many pass */     \
    /* (counted in those chunks) that the search of each would cost more, the row is counted */    \
    /* whole (COUNTS). */                                                                          \
    VECTOR_CLONES                                                                                  \
    static T NAME(const T *v, Py_ssize_t n, const T *r, Py_ssize_t f, Py_ssize_t m, T t,           \
                  int64_t *lt_row, int64_t *le_row, T *h, Py_ssize_t k, T cap,                     \
                  int64_t *at_most, int64_t *below, int32_t *found) {                              \
        /* (a heap no longer fed, its least at the cap, raises nothing as items pass: the */       \
        /* threshold is raised from it once, here) */                                              \
        t = NAME##_raised(h, cap, t);                                                              \
        Py_ssize_t passing;                                                                        \
        const Py_ssize_t chunks = NAME##_chunks(v, n, t, found, &passing);                         \
        if (chunks == 0) return t;                                                                 \
        const int whole = passing * SPARSE_COST > n * (1 + f / 4);                                 \
        if (whole) {                                                                               \
            COUNTS(v, n, r, 0, f, m, at_most, below);                                              \
            add_row(at_most, below, n, m, lt_row, le_row);                                         \
            /* the heap only raises the threshold, to its least score but never past the cap: */   \
            /* once its least reaches the cap (at once where the row's one relevant score is */    \
            /* its cap: text-to-image), no item can raise it further, and none is looked at */     \
            if (h == NULL || !(h[0] < cap)) return NAME##_raised(h, cap, t);                       \
        }                                                                                          \
        /* the heap (and, unless counted whole, the counts) item by item; counted whole, only */   \
        /* the items above the heap's least do anything: vectors without one are passed over */   \
        for (Py_ssize_t c = 0; c < chunks; c++) {                                                  \
            const Py_ssize_t k0 = found[c], stop = k0 + CHUNK <= n ? k0 + CHUNK : n;               \
            for (Py_ssize_t q0 = k0; q0 < stop; q0 += NAME##_LANES) {                              \
                const Py_ssize_t end = q0 + NAME##_LANES <= stop ? q0 + NAME##_LANES : stop;       \
                if (whole && !(h[0] < cap)) return t;                                              \
                const T u = whole ? NAME##_feed_at(h, cap, t) : t;                                 \
                if (end - q0 == NAME##_LANES && !NAME##_any_lanes(v + q0, u)) continue;            \
                for (Py_ssize_t q = q0; q < end; q++) {                                            \
                    const T x = v[q];                                                              \
                    if (!(x >= t)) continue;                                                       \
                    if (whole && !(x > h[0])) continue;                                            \
                    t = NAME##_item(x, r, f, lt_row, le_row, !whole, h, k, cap, t);                \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        return t;                                                                                  \
    }                                                                                              \
    /* query i of a side (see Side): its relevant scores, histogram rows, heap and cap */          \
    typedef struct {                                                                               \
        const T *r;                                                                                \
        Py_ssize_t f, k;                                                                           \
        int64_t *lt, *le;                                                                          \
        T *h, cap;                                                                                 \
    } NAME##_Query;                                                                                \
    static inline NAME##_Query NAME##_at(const Side *side, Py_ssize_t i) {                         \
        const Py_ssize_t m = side->m, k = side->heap != NULL ? clamped(side->ks[i], side->w) : 0;  \
        NAME##_Query q = {(const T *)side->seq + i * m, clamped(side->fin[i], m), k,               \
                          side->lt + i * (m + 1), side->le + i * (m + 1),                          \
                          k > 0 ? (T *)side->heap + i * side->w : NULL,                            \
                          k > 0 ? ((const T *)side->cap)[i] : (T)0};                               \
        return q;                                                                                  \
    }                                                                                              \
    /* query i of a side counted on its row of items v, its threshold raised in place */           \
    static void NAME##_query(const Side *side, Py_ssize_t i, const T *v, Py_ssize_t n,             \
                             int64_t *at_most, int64_t *below, int32_t *found) {                   \
        const NAME##_Query q = NAME##_at(side, i);                                                 \
        T *t = (T *)side->thr + i;                                                                 \
        *t = NAME(v, n, q.r, q.f, side->m, *t, q.lt, q.le, q.h, q.k, q.cap, at_most, below,        \
                  found);                                                                          \
    }                                                                                              \
    /* One pass over the rows of v (items x ld, row-major) for two sides at once. `cols`: the */   \
    /* queries that are the first cols->n columns (the items are v's rows), each row of items */   \
    /* compared with their thresholds a vector at a time; it stops once more than `budget` */      \
    /* items passed (a weak model), for the rest to be counted by rows, where rows with many */    \
    /* passing are counted whole. `rows` (or NULL): the queries that are the first rows->n */      \
    /* rows, each counted by NAME while it is in the cache. Returns the rows of items read */      \
    /* for `cols`. */                                                                              \
    VECTOR_CLONES                                                                                  \
    static Py_ssize_t NAME##_both(const T *v, Py_ssize_t items, Py_ssize_t ld,                     \
                                  const Side *cols, int64_t budget, const Side *rows,              \
                                  int64_t *at_most, int64_t *below, int32_t *found) {              \
        int64_t passed = 0;                                                                        \
        Py_ssize_t read = items;                                                                   \
        const Py_ssize_t nq = cols->n;                                                             \
        T *thr = (T *)cols->thr;                                                                   \
        for (Py_ssize_t j = 0; j < nq; j++) { /* (as NAME raises a row's) */                       \
            const NAME##_Query c = NAME##_at(cols, j);                                             \
            thr[j] = NAME##_raised(c.h, c.cap, thr[j]);                                            \
        }                                                                                          \
        for (Py_ssize_t q = 0; q < items; q++) {                                                   \
            const T *row = v + q * ld;                                                             \
            /* stop at the budget, or once the rows read so far say the block will pass it */      \
            if (read == items && (passed > budget || (q >= 8 && passed * items > 2 * budget * q))) \
                read = q;                                                                          \
            if (read == items) {                                                                   \
                for (Py_ssize_t j0 = 0; j0 < nq; j0 += CHUNK) {                                    \
                    const Py_ssize_t stop = j0 + CHUNK <= nq ? j0 + CHUNK : nq;                    \
                    if (stop - j0 == CHUNK && !NAME##_any_of(row + j0, thr + j0)) continue;        \
                    for (Py_ssize_t j1 = j0; j1 < stop; j1 += NAME##_LANES) {                      \
                        const Py_ssize_t end =                                                     \
                            j1 + NAME##_LANES <= stop ? j1 + NAME##_LANES : stop;                  \
                        if (end - j1 == NAME##_LANES && !NAME##_any_lanes_of(row + j1, thr + j1))  \
                            continue;                                                              \
                        for (Py_ssize_t j = j1; j < end; j++) {                                    \
                            if (!(row[j] >= thr[j])) continue;                                     \
                            passed++;                                                              \
                            const NAME##_Query c = NAME##_at(cols, j);                             \
                            thr[j] = NAME##_item(row[j], c.r, c.f, c.lt, c.le, 1, c.h, c.k, c.cap, \
                                                 thr[j]);                                          \
                        }                                                                          \
                    }                                                                              \
                }                                                                                  \
            } else if (rows == NULL) {                                                             \
                break;                                                                             \
            }                                                                                      \
            if (rows != NULL && q < rows->n)                                                       \
                NAME##_query(rows, q, row, ld, at_most, below, found);                             \
        }                                                                                          \
        return read;                                                                               \
    }                                                                                              \
    /* The columns' counts over rows from..items of v, counted whole (the columns' side gave */    \
    /* up its pass there: a weak model), in place: per column j and relevant score k, the items */ \
    /* <= and < it, added to le_t and lt_t (m x nq, a relevant score's row of columns; */         \
    /* r_t the same layout). A vector of columns at a time, a group of relevant scores kept in */  \
    /* registers down the rows, as counts_float keeps a row's; the padding (+inf) is compared */   \
    /* as any relevant score, which counts what counts_float copies for it. */                    \
    VECTOR_CLONES                                                                                  \
    static void NAME##_column_counts(const T *v, Py_ssize_t from, Py_ssize_t items,               \
                                     Py_ssize_t ld, Py_ssize_t nq, Py_ssize_t m, const T *r_t,     \
                                     int64_t *le_t, int64_t *lt_t) {                               \
        Py_ssize_t j0 = 0;                                                                         \
        for (; j0 + NAME##_LANES <= nq; j0 += NAME##_LANES) {                                      \
            Py_ssize_t k0 = 0;                                                                     \
            for (; k0 + GROUP <= m; k0 += GROUP) {                                                 \
                V r[GROUP];                                                                        \
                M le[GROUP], lt[GROUP];                                                            \
                for (int a = 0; a < GROUP; a++) {                                                  \
                    memcpy(&r[a], r_t + (k0 + a) * nq + j0, sizeof r[a]);                          \
                    le[a] = (M){0};                                                                \
                    lt[a] = (M){0};                                                                \
                }                                                                                  \
                for (Py_ssize_t q = from; q < items; q++) {                                        \
                    V x;                                                                           \
                    memcpy(&x, v + q * ld + j0, sizeof x);                                         \
                    for (int a = 0; a < GROUP; a++) {                                              \
                        le[a] -= x <= r[a]; /* (a true compare is -1 in each lane) */              \
                        lt[a] -= x < r[a];                                                         \
                    }                                                                              \
                }                                                                                  \
                for (int a = 0; a < GROUP; a++)                                                    \
                    for (int l = 0; l < NAME##_LANES; l++) {                                       \
                        le_t[(k0 + a) * nq + j0 + l] += le[a][l];                                  \
                        lt_t[(k0 + a) * nq + j0 + l] += lt[a][l];                                  \
                    }                                                                              \
            }                                                                                      \
            for (; k0 < m; k0++) {                                                                 \
                V r;                                                                               \
                M le = {0}, lt = {0};                                                              \
                memcpy(&r, r_t + k0 * nq + j0, sizeof r);                                         \
                for (Py_ssize_t q = from; q < items; q++) {                                        \
                    V x;                                                                           \
                    memcpy(&x, v + q * ld + j0, sizeof x);                                         \
                    le -= x <= r;                                                                  \
                    lt -= x < r;                                                                   \
                }                                                                                  \
                for (int l = 0; l < NAME##_LANES; l++) {                                           \
                    le_t[k0 * nq + j0 + l] += le[l];                                               \
                    lt_t[k0 * nq + j0 + l] += lt[l];                                               \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (; j0 < nq; j0++) /* the last columns, fewer than a vector */                          \
            for (Py_ssize_t k = 0; k < m; k++) {                                                   \
                const T t = r_t[k * nq + j0];                                                      \
                int64_t le = 0, lt = 0;                                                            \
                for (Py_ssize_t q = from; q < items; q++) {                                        \
                    le += v[q * ld + j0] <= t;                                                     \
                    lt += v[q * ld + j0] < t;                                                      \
                }                                                                                  \
                le_t[k * nq + j0] += le;                                                           \
                lt_t[k * nq + j0] += lt;                                                           \
            }                                                                                      \
    }                                                                                              \
    /* The columns' side over rows from..items, each column counted whole (NAME##_column_counts, */ \
    /* added to its histograms as a row counted whole is), and its heap fed as a row counted */    \
    /* whole feeds it (NAME): the items above the heap's least, until it reaches the cap. The */    \
    /* scratch: r_t, le_t, lt_t (m x nq), u (nq: what an item must reach to feed a heap), */       \
    /* at_most and below (m + 1). */                                                               \
    VECTOR_CLONES                                                                                  \
    static void NAME##_columns_whole(const T *v, Py_ssize_t from, Py_ssize_t items,               \
                                     Py_ssize_t ld, const Side *cols, T *r_t, int64_t *le_t,       \
                                     int64_t *lt_t, T *u, int64_t *at_most, int64_t *below) {      \
        const Py_ssize_t nq = cols->n, m = cols->m;                                                \
        T *thr = (T *)cols->thr;                                                                   \
        for (Py_ssize_t j = 0; j < nq; j++)                                                        \
            for (Py_ssize_t k = 0; k < m; k++) {                                                   \
                r_t[k * nq + j] = ((const T *)cols->seq)[j * m + k];                               \
                le_t[k * nq + j] = 0;                                                              \
                lt_t[k * nq + j] = 0;                                                              \
            }                                                                                      \
        NAME##_column_counts(v, from, items, ld, nq, m, r_t, le_t, lt_t);                          \
        int feeding = 0;                                                                           \
        for (Py_ssize_t j = 0; j < nq; j++) {                                                      \
            const NAME##_Query c = NAME##_at(cols, j);                                             \
            for (Py_ssize_t k = 0; k < m; k++) {                                                   \
                at_most[k] = le_t[k * nq + j];                                                     \
                below[k] = lt_t[k * nq + j];                                                       \
            }                                                                                      \
            add_row(at_most, below, items - from, m, c.lt, c.le);                                 \
            thr[j] = NAME##_raised(c.h, c.cap, thr[j]);                                            \
            u[j] = NAME##_feed_at(c.h, c.cap, thr[j]);                                             \
            feeding |= u[j] < (T)INFINITY;                                                         \
        }                                                                                          \
        for (Py_ssize_t q = from; q < items && feeding; q++) {                                     \
            const T *row = v + q * ld;                                                             \
            for (Py_ssize_t j0 = 0; j0 < nq; j0 += NAME##_LANES) {                                 \
                const Py_ssize_t end = j0 + NAME##_LANES <= nq ? j0 + NAME##_LANES : nq;           \
                if (end - j0 == NAME##_LANES && !NAME##_any_lanes_of(row + j0, u + j0)) continue;  \
                for (Py_ssize_t j = j0; j < end; j++) {                                            \
                    const T x = row[j];                                                            \
                    if (!(x >= u[j])) continue;                                                    \
                    const NAME##_Query c = NAME##_at(cols, j);                                     \
                    /* (a score of +inf reaches a u of +inf: a column no longer fed) */            \
                    if (c.h == NULL || !(c.h[0] < c.cap) || !(x > c.h[0]) || !(x >= thr[j]))       \
                        continue;                                                                  \
                    thr[j] = NAME##_item(x, c.r, c.f, c.lt, c.le, 0, c.h, c.k, c.cap, thr[j]);     \
                    u[j] = NAME##_feed_at(c.h, c.cap, thr[j]);                                     \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* The columns' side (and the rows', or NULL) over the rows of v: NAME##_both, then, where */  \
    /* the columns gave up, the rest of their items counted whole; `scratch`: see above_call. */   \
    /* Returns the rows read item by item for the columns. */                                      \
    static Py_ssize_t NAME##_columns(const T *v, Py_ssize_t items, Py_ssize_t ld,                 \
                                     const Side *cols, int64_t budget, const Side *rows,           \
                                     int64_t *at_most, int64_t *below, int32_t *found,             \
                                     void *scratch) {                                              \
        const Py_ssize_t read =                                                                    \
            NAME##_both(v, items, ld, cols, budget, rows, at_most, below, found);                  \
        if (read < items) {                                                                        \
            const Py_ssize_t mn = cols->m * cols->n;                                               \
            int64_t *le_t = (int64_t *)scratch, *lt_t = le_t + mn;                                 \
            int64_t *c_at_most = lt_t + mn, *c_below = c_at_most + (cols->m + 1);                  \
            T *r_t = (T *)(c_below + (cols->m + 1)), *u = r_t + mn;                                \
            NAME##_columns_whole(v, read, items, ld, cols, r_t, le_t, lt_t, u, c_at_most,          \
                                 c_below);                                                         \
        }                                                                                          \
        return read;                                                                               \
    }

DEFINE_ABOVE(above_float, float, floats, ints, counts_float)
DEFINE_ABOVE(above_double, double, doubles, longs, counts_double)

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

/* values: a C-contiguous 2-d array of scores; 1 for float64, 0 for float32, -1 (an exception set,
 * nothing held) for anything else */
static int get_scores(PyObject *obj, Py_buffer *view) {
    if (get_buffer(obj, view, "values", NULL, 2, 0) < 0) return -1;
    if (strcmp(view->format, "d") == 0) return 1;
    if (strcmp(view->format, "f") == 0) return 0;
    PyErr_SetString(PyExc_ValueError, "`values` must be float32 or float64");
    PyBuffer_Release(view);
    return -1;
}

/* count_rows' rows, split over threads: each row's own histograms, a thread's own scratch
 * (count_scratch) */
typedef struct {
    const void *values, *seq;
    const int64_t *fin, *from;
    int64_t *lt, *le;
    Py_ssize_t n, m;
    int is_double, sorts;
} CountRows;

/* a thread's scratch of count_rows: at_most and below (m + 1 each), then, where a row is sorted,
 * its keys and their sorting buffer (2n) */
static size_t count_scratch(const CountRows *job) {
    return (size_t)(2 * (job->m + 1)) * sizeof(int64_t) +
           (job->sorts ? (size_t)(2 * job->n) * sizeof(uint64_t) : 0);
}

static void count_rows_of(void *ctx, Py_ssize_t start, Py_ssize_t stop, void *scratch) {
    const CountRows *job = (const CountRows *)ctx;
    const Py_ssize_t n = job->n, m = job->m;
    int64_t *at_most = (int64_t *)scratch, *below = at_most + (m + 1);
    uint64_t *keys = job->sorts ? (uint64_t *)(below + (m + 1)) : NULL;
    for (Py_ssize_t i = start; i < stop; i++) {
        Py_ssize_t f = (Py_ssize_t)job->fin[i];
        if (f > m) f = m;
        if (f < 0) f = 0;
        Py_ssize_t j0 = job->from ? (Py_ssize_t)job->from[i] : 0;
        if (j0 > f) j0 = f;
        if (j0 < 0) j0 = 0;
        if (f > SORT_ABOVE && job->is_double)
            sorted_counts_double((const double *)job->values + i * n, n,
                                 (const double *)job->seq + i * m, j0, m, keys, keys + n,
                                 at_most, below);
        else if (f > SORT_ABOVE)
            sorted_counts_float((const float *)job->values + i * n, n,
                                (const float *)job->seq + i * m, j0, m, (uint32_t *)keys,
                                (uint32_t *)keys + n, at_most, below);
        else if (job->is_double)
            counts_double((const double *)job->values + i * n, n,
                          (const double *)job->seq + i * m, j0, f, m, at_most, below);
        else
            counts_float((const float *)job->values + i * n, n, (const float *)job->seq + i * m,
                         j0, f, m, at_most, below);
        add_row(at_most, below, n, m, job->lt + i * (m + 1), job->le + i * (m + 1));
    }
}

PyDoc_STRVAR(count_rows_doc,
             "count_rows(values, seq, num_finite, hist_lt, hist_le, first=None)\n\n"
             "Add each row of values (rows x n, float32 or float64, C-contiguous) to its row of "
             "the histograms (rows x (m + 1), int64, in place), with seq (rows x m, the values' "
             "dtype) each row's relevant scores ascending, +inf padded after num_finite[row] "
             "(rows x 1, int64) of them. first (rows x 1, int64): a row's relevant scores before "
             "first[row] are passed over (taken as if every item lay above them): the bins after "
             "first[row], and each row's total, are its counts.");

static PyObject *count_rows(PyObject *self, PyObject *args, PyObject *kwargs) {
    const int threads = threads_keyword(kwargs);
    if (threads < 0) return NULL;
    PyObject *values_obj, *seq_obj, *finite_obj, *lt_obj, *le_obj, *first_obj = Py_None;
    if (!PyArg_ParseTuple(args, "OOOOO|O", &values_obj, &seq_obj, &finite_obj, &lt_obj, &le_obj,
                          &first_obj))
        return NULL;
    Py_buffer values, seq, finite, hist_lt, hist_le, first;
    int got = 0;
    PyObject *result = NULL;
    int is_double = get_scores(values_obj, &values);
    if (is_double < 0) goto finally;
    got = 1;
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
    const int64_t *fin = (const int64_t *)finite.buf;
    /* keys and their sorting buffer, for rows sorted (SORT_ABOVE) */
    int64_t longest = 0;
    for (Py_ssize_t i = 0; i < rows; i++)
        if (fin[i] > longest) longest = fin[i];
    const int64_t *from = got == 6 ? (const int64_t *)first.buf : NULL;
    CountRows job = {values.buf, seq.buf, fin, from, (int64_t *)hist_lt.buf,
                     (int64_t *)hist_le.buf, n, m, is_double, longest > SORT_ABOVE && n > 0};
    int64_t *at_most = (int64_t *)malloc(count_scratch(&job));
    if (at_most == NULL) {
        PyErr_NoMemory();
        goto finally;
    }
    const Py_ssize_t grain = rows_grain(ROW_GRAIN, n);
    const int team = rows_threads(rows, grain, threads);
    Py_BEGIN_ALLOW_THREADS
    rows_run(count_rows_of, &job, rows, grain, team, count_scratch(&job), at_most);
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

/* the buffers of one side (see Side) */
typedef struct {
    Py_buffer views[8]; /* thr, seq, num_finite, hist_lt, hist_le, heap, heap_k, cap */
    int got;
} SideBuffers;

static void side_release(SideBuffers *b) {
    for (int i = b->got - 1; i >= 0; i--) PyBuffer_Release(&b->views[i]);
    b->got = 0;
}

/* A side from `args` (thr, seq, num_finite, hist_lt, hist_le[, heap, heap_k, cap]) for
 * `queries` queries at most, in the scores' format `fmt`. */
static int side_parse(PyObject *args, const char *fmt, Py_ssize_t queries, SideBuffers *b,
                      Side *side) {
    static const char *names[8] = {"thr",     "seq",  "num_finite", "hist_lt",
                                   "hist_le", "heap", "heap_k",     "cap"};
    const char *formats[8] = {fmt, fmt, "i8", "i8", "i8", fmt, "i8", fmt};
    static const int ndims[8] = {1, 2, 2, 2, 2, 2, 2, 1};
    static const int writable[8] = {1, 0, 0, 1, 1, 1, 0, 0};
    b->got = 0;
    Py_ssize_t given = PyTuple_Size(args);
    if (given != 5 && given != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "a side is (thr, seq, num_finite, hist_lt, hist_le[, heap, heap_k, cap])");
        return -1;
    }
    for (Py_ssize_t i = 0; i < given; i++) {
        if (get_buffer(PyTuple_GET_ITEM(args, i), &b->views[i], names[i], formats[i], ndims[i],
                       writable[i]) < 0)
            return -1;
        b->got = (int)i + 1;
    }
    Py_buffer *v = b->views;
    Py_ssize_t n = v[0].shape[0], m = v[1].shape[1];
    int ok = n <= queries && v[1].shape[0] == n && v[2].shape[0] == n && v[2].shape[1] == 1;
    for (int i = 3; i < 5; i++) ok = ok && v[i].shape[0] == n && v[i].shape[1] == m + 1;
    if (given == 8)
        ok = ok && v[5].shape[0] == n && v[6].shape[0] == n && v[6].shape[1] == 1 &&
             v[7].shape[0] == n;
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "count_above: the shapes do not fit");
        return -1;
    }
    side->n = n;
    side->m = m;
    side->thr = v[0].buf;
    side->seq = v[1].buf;
    side->fin = (const int64_t *)v[2].buf;
    side->lt = (int64_t *)v[3].buf;
    side->le = (int64_t *)v[4].buf;
    side->heap = given == 8 ? v[5].buf : NULL;
    side->w = given == 8 ? v[5].shape[1] : 0;
    side->ks = given == 8 ? (const int64_t *)v[6].buf : NULL;
    side->cap = given == 8 ? v[7].buf : NULL;
    return 0;
}

/* the scores (items of 32-bit counts at most) */
static int values_parse(PyObject *obj, Py_buffer *values) {
    if (get_buffer(obj, values, "values", NULL, 2, 0) < 0) return -1;
    if ((strcmp(values->format, "d") != 0 && strcmp(values->format, "f") != 0) ||
        values->shape[0] > INT32_MAX || values->shape[1] > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "`values` must be float32 or float64, under 2**31 a side");
        PyBuffer_Release(values);
        return -1;
    }
    return 0;
}

/* what counting every query of `side` whole would cost per item, in the units of COLUMN_COST */
static int64_t whole_cost(const Side *side) {
    int64_t cost = 0;
    for (Py_ssize_t j = 0; j < side->n; j++) cost += 1 + clamped(side->fin[j], side->m) / 4;
    return cost;
}

/* the rows' side of count_above, split over threads: each row's own state, a thread's own
 * scratch (above_scratch) */
typedef struct {
    const Side *rows;
    const void *values;
    Py_ssize_t ld;
    int is_double;
} AboveRows;

/* a thread's scratch of the rows' count: the whole count of a row's relevant scores (at_most,
 * below: m + 1 each), and a row's chunks holding an item above its threshold (ld / CHUNK and
 * the tail) */
static size_t above_scratch(Py_ssize_t m, Py_ssize_t ld) {
    return (size_t)(2 * (m + 1)) * sizeof(int64_t) + (size_t)(ld / CHUNK + 1) * sizeof(int32_t);
}

static void above_rows(void *ctx, Py_ssize_t start, Py_ssize_t stop, void *scratch) {
    const AboveRows *job = (const AboveRows *)ctx;
    const Py_ssize_t m = job->rows->m, ld = job->ld;
    int64_t *at_most = (int64_t *)scratch, *below = at_most + (m + 1);
    int32_t *found = (int32_t *)(below + (m + 1));
    for (Py_ssize_t i = start; i < stop; i++) {
        if (job->is_double)
            above_double_query(job->rows, i, (const double *)job->values + i * ld, ld, at_most,
                               below, found);
        else
            above_float_query(job->rows, i, (const float *)job->values + i * ld, ld, at_most,
                              below, found);
    }
}

/* count_above(values, *rows), count_above_columns(values, *cols) and count_above_both(values,
 * cols, rows): one pass over values' rows; returns the rows read for the columns' side. The
 * rows of count_above alone are shared over `threads` (a columns' side is one thread's: its
 * state changes row after row of items). */
static PyObject *above_call(PyObject *args, int threads, int with_cols, int with_rows) {
    Py_ssize_t given = PyTuple_Size(args);
    if (given < 2) {
        PyErr_SetString(PyExc_TypeError, "count_above: values and a side are needed");
        return NULL;
    }
    Py_buffer values;
    if (values_parse(PyTuple_GET_ITEM(args, 0), &values) < 0) return NULL;
    const int is_double = strcmp(values.format, "d") == 0;
    Py_ssize_t items = values.shape[0], ld = values.shape[1];
    SideBuffers bufs[2] = {{.got = 0}, {.got = 0}};
    Side sides[2];
    PyObject *result = NULL;
    int64_t *at_most = NULL;
    void *col_scratch = NULL;
    int both = with_cols && with_rows;
    for (int s = 0; s < (both ? 2 : 1); s++) {
        PyObject *tuple = both ? PyTuple_GET_ITEM(args, 1 + s) : PyTuple_GetSlice(args, 1, given);
        if (tuple == NULL) goto finally;
        int bad = !PyTuple_Check(tuple);
        if (bad) PyErr_SetString(PyExc_TypeError, "count_above_both: each side is a tuple");
        int is_cols = both ? s == 0 : with_cols;
        if (!bad)
            bad = side_parse(tuple, values.format, is_cols ? ld : items, &bufs[s], &sides[s]);
        if (!both) Py_DECREF(tuple);
        if (bad) goto finally;
    }
    if (both && given != 3) {
        PyErr_SetString(PyExc_TypeError, "count_above_both(values, cols, rows)");
        goto finally;
    }
    const Side *cols = with_cols ? &sides[0] : NULL;
    const Side *rows = with_rows ? &sides[both ? 1 : 0] : NULL;
    /* the calling thread's scratch of the rows' counts (above_scratch) */
    Py_ssize_t m = rows != NULL ? rows->m : 0;
    const size_t row_scratch = above_scratch(m, ld);
    at_most = (int64_t *)malloc(row_scratch);
    if (at_most == NULL) {
        PyErr_NoMemory();
        goto finally;
    }
    int64_t *below = at_most + (m + 1);
    int32_t *found = (int32_t *)(below + (m + 1));
    /* scratch of the columns' whole count (NAME##_columns), where they give up: their two
     * counts (m x nq int64 each), a column's counts (m + 1 int64 each), then the relevant
     * scores by column (m x nq) and each column's u (nq), in the scores' dtype */
    Py_ssize_t mc = cols != NULL ? cols->m : 0, nc = cols != NULL ? cols->n : 0;
    size_t t_size = is_double ? sizeof(double) : sizeof(float);
    col_scratch = cols != NULL ? malloc((size_t)(mc * nc) * (t_size + 2 * sizeof(int64_t)) +
                                        (size_t)(2 * (mc + 1)) * sizeof(int64_t) +
                                        (size_t)nc * t_size + 16)
                               : NULL;
    if (cols != NULL && col_scratch == NULL) {
        PyErr_NoMemory();
        goto finally;
    }
    Py_ssize_t read = items;
    Py_BEGIN_ALLOW_THREADS
    if (cols != NULL) {
        int64_t budget = whole_cost(cols) * items / COLUMN_COST;
        read = is_double ? above_double_columns((const double *)values.buf, items, ld, cols,
                                                budget, rows, at_most, below, found, col_scratch)
                         : above_float_columns((const float *)values.buf, items, ld, cols, budget,
                                               rows, at_most, below, found, col_scratch);
    } else {
        AboveRows job = {rows, values.buf, ld, is_double};
        const Py_ssize_t grain = rows_grain(ROW_GRAIN, ld);
        rows_run(above_rows, &job, rows->n, grain, rows_threads(rows->n, grain, threads),
                 row_scratch, at_most);
    }
    Py_END_ALLOW_THREADS
    if (with_cols)
        result = PyLong_FromSsize_t(read);
    else
        result = Py_NewRef(Py_None);
finally:
    free(col_scratch);
    free(at_most);
    side_release(&bufs[1]);
    side_release(&bufs[0]);
    PyBuffer_Release(&values);
    return result;
}

PyDoc_STRVAR(count_above_doc,
             "count_above(values, thr, seq, num_finite, hist_lt, hist_le, heap=None, heap_k=None, "
             "cap=None)\n\n"
             "Add each row's items at or above thr[row] (rows, the values' dtype, raised in place) "
             "to the row's histograms as count_rows does (rows whose items mostly pass are counted "
             "whole). heap (rows x w, the values' dtype, in place): each row's heap_k[row] best "
             "scores of distinct items so far, a min-heap in its first heap_k[row] places, which "
             "the row's items that pass and tie no relevant score join; thr[row] then rises to "
             "min(cap[row], the heap's least). The queries may be the first len(thr) rows of "
             "values.");

static PyObject *count_above(PyObject *self, PyObject *args, PyObject *kwargs) {
    const int threads = threads_keyword(kwargs);
    return threads < 0 ? NULL : above_call(args, threads, 0, 1);
}

PyDoc_STRVAR(count_above_columns_doc,
             "count_above_columns(values, thr, seq, num_finite, hist_lt, hist_le, heap=None, "
             "heap_k=None, cap=None) -> rows read\n\n"
             "count_above for the queries that are the first len(thr) columns of values (items x "
             "columns, row-major: the transposed block of the symmetric pass), read a row of "
             "items at a time. Once more items passed than a whole count of the rest would cost "
             "(a weak model), the rest is counted whole, a vector of columns at a time; returns "
             "the rows of items read item by item before that.");

static PyObject *count_above_columns(PyObject *self, PyObject *args) {
    return above_call(args, 1, 1, 0);
}

PyDoc_STRVAR(count_above_both_doc,
             "count_above_both(values, cols, rows) -> rows read for cols\n\n"
             "count_above_columns of the side cols and count_above of the side rows (each a tuple "
             "of their arguments after values) in one pass over values: the block of a pair of "
             "the symmetric pass read once for the queries on both of its sides. cols gives up "
             "as count_above_columns does, and returns what it returns.");

static PyObject *count_above_both(PyObject *self, PyObject *args) {
    return above_call(args, 1, 1, 1);
}

/* The items of a row above its threshold t (strictly), in column order: their columns written to
 * cols (room for `width`), how many returned, or -1 as soon as there are more than `width`. The
 * row is compared a chunk at a time (whole vectors, as NAME##_any), its items looked at only in
 * the chunks that hold one: a top-k list's later blocks, where few items enter. */
#define DEFINE_ENTERING(NAME, T, V, M)                                                             \
    enum { NAME##_LANES = (int)(sizeof(V) / sizeof(T)) };                                          \
    static inline int NAME##_any(const T *v, T t) {                                                \
        M acc = {0};                                                                               \
        for (int u = 0; u < CHUNK; u += NAME##_LANES) {                                            \
            V x;                                                                                   \
            memcpy(&x, v + u, sizeof x);                                                           \
            acc |= x > t;                                                                          \
        }                                                                                          \
        return any_set(&acc);                                                                      \
    }                                                                                              \
    VECTOR_CLONES                                                                                  \
    static Py_ssize_t NAME(const T *v, Py_ssize_t n, T t, Py_ssize_t width, int64_t *cols) {       \
        Py_ssize_t c = 0, k0 = 0;                                                                  \
        for (; k0 + CHUNK <= n; k0 += CHUNK) {                                                     \
            if (!NAME##_any(v + k0, t)) continue;                                                  \
            for (Py_ssize_t q = k0; q < k0 + CHUNK; q++)                                           \
                if (v[q] > t) {                                                                    \
                    if (c == width) return -1;                                                     \
                    cols[c++] = q;                                                                 \
                }                                                                                  \
        }                                                                                          \
        for (Py_ssize_t q = k0; q < n; q++)                                                        \
            if (v[q] > t) {                                                                        \
                if (c == width) return -1;                                                         \
                cols[c++] = q;                                                                     \
            }                                                                                      \
        return c;                                                                                  \
    }

DEFINE_ENTERING(entering_float, float, floats, ints)
DEFINE_ENTERING(entering_double, double, doubles, longs)

/* entering's rows, split over threads: each row's own list; the total and whether a row had
 * more than `width` added up across them */
typedef struct {
    const void *values, *thr;
    int64_t *counts, *out;
    Py_ssize_t ld, n, width;
    int is_double, over;
    Py_ssize_t total;
} EnteringRows;

static void entering_rows(void *ctx, Py_ssize_t start, Py_ssize_t stop, void *scratch) {
    EnteringRows *job = (EnteringRows *)ctx;
    (void)scratch;
    const Py_ssize_t ld = job->ld, width = job->width;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = start; i < stop && !SHARED_LOAD(&job->over); i++) {
        const Py_ssize_t here =
            job->is_double
                ? entering_double((const double *)job->values + i * ld, job->n,
                                  ((const double *)job->thr)[i], width, job->out + i * width)
                : entering_float((const float *)job->values + i * ld, job->n,
                                 ((const float *)job->thr)[i], width, job->out + i * width);
        if (here < 0) {
            /* (the caller sorts every row instead: the rest need not be looked at) */
            SHARED_STORE(&job->over, 1);
            return;
        }
        job->counts[i] = here;
        total += here;
    }
    SHARED_ADD(&job->total, total);
}

PyDoc_STRVAR(entering_doc,
             "entering(values, thr, n, width, per_row, cols) -> found, or -1\n\n"
             "The items of each row of values (rows x m, float32 or float64, C-contiguous; its "
             "first n columns) scoring above the row's thr (rows x 1, the values' dtype), in "
             "column order: each row's count written to per_row (rows, int64) and their columns "
             "to cols (rows x width, int64), row i's from cols[i, 0]. Returns how many in all, or "
             "-1 as soon as a row has more than width (the rest then unread).");

static PyObject *entering(PyObject *self, PyObject *args, PyObject *kwargs) {
    const int threads = threads_keyword(kwargs);
    if (threads < 0) return NULL;
    PyObject *values_obj, *thr_obj, *per_row_obj, *cols_obj;
    Py_ssize_t n, width;
    if (!PyArg_ParseTuple(args, "OOnnOO", &values_obj, &thr_obj, &n, &width, &per_row_obj,
                          &cols_obj))
        return NULL;
    Py_buffer values, thr, per_row, cols;
    int got = 0;
    PyObject *result = NULL;
    int is_double = get_scores(values_obj, &values);
    if (is_double < 0) goto finally;
    got = 1;
    if (get_buffer(thr_obj, &thr, "thr", values.format, 2, 0) < 0) goto finally;
    got = 2;
    if (get_buffer(per_row_obj, &per_row, "per_row", "i8", 1, 1) < 0) goto finally;
    got = 3;
    if (get_buffer(cols_obj, &cols, "cols", "i8", 2, 1) < 0) goto finally;
    got = 4;
    Py_ssize_t rows = values.shape[0], ld = values.shape[1];
    if (n < 0 || n > ld || width < 0 || thr.shape[0] != rows || thr.shape[1] != 1 ||
        per_row.shape[0] != rows || cols.shape[0] != rows || cols.shape[1] != width) {
        PyErr_SetString(PyExc_ValueError, "entering: the shapes do not fit");
        goto finally;
    }
    EnteringRows job = {values.buf, thr.buf, (int64_t *)per_row.buf, (int64_t *)cols.buf,
                        ld, n, width, is_double, 0, 0};
    const Py_ssize_t grain = rows_grain(ROW_GRAIN, n);
    const int team = rows_threads(rows, grain, threads);
    Py_BEGIN_ALLOW_THREADS
    rows_run(entering_rows, &job, rows, grain, team, 1, &job);
    Py_END_ALLOW_THREADS
    result = PyLong_FromSsize_t(job.over ? -1 : job.total);
finally:
    if (got >= 4) PyBuffer_Release(&cols);
    if (got >= 3) PyBuffer_Release(&per_row);
    if (got >= 2) PyBuffer_Release(&thr);
    if (got >= 1) PyBuffer_Release(&values);
    return result;
}

static PyMethodDef methods[] = {
    SHARES_ROWS_METHOD,
    {"count_rows", (PyCFunction)(void (*)(void))count_rows, METH_VARARGS | METH_KEYWORDS,
     count_rows_doc},
    {"count_above", (PyCFunction)(void (*)(void))count_above, METH_VARARGS | METH_KEYWORDS,
     count_above_doc},
    {"count_above_columns", count_above_columns, METH_VARARGS, count_above_columns_doc},
    {"count_above_both", count_above_both, METH_VARARGS, count_above_both_doc},
    {"entering", (PyCFunction)(void (*)(void))entering, METH_VARARGS | METH_KEYWORDS,
     entering_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_count",
    "count_block's histograms on the CPU for rows with few relevant scores (see kernels.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__count(void) {
    return with_take_sizes(PyModule_Create(&module), ROW_GRAIN);
}
