/* The ranked-lists form's inner loop for lists of str ids, in C.
 *
 * Why C: ranking 100,000 lists of 100 str ids is bounded by reading each id once (its cached hash
 * and type), and every Python-level pass over a list (str.join, a set, dict_keys & list) costs
 * that read again plus the interpreter's per-call work. Here one pass per list reads each id once,
 * looks it up in a small open-addressing table of the query's relevant ids and notes the first
 * position of each; the distinct ids are counted in a second table only when asked.
 *
 * Only exact str ids in a list and relevant ids given as a set, frozenset, list or tuple of
 * exact str are handled here (ids of one type compare as they are, so no canonical form is
 * needed); any other query is marked for the Python loop of lists.py (status 1), which handles
 * every case. lists.py's tests run both and compare them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Py_hash_t hash;
    PyObject *key;  /* borrowed */
    Py_ssize_t pos; /* first position in the list, -1 before it is found */
    uint32_t stamp; /* the slot is empty unless this is the table's stamp */
} slot_t;

/* A table kept across queries: each query takes a new stamp instead of clearing the slots
 * (clearing a list's table cost as much as filling it). */
typedef struct {
    slot_t *slots;
    Py_ssize_t cap, mask;
    uint32_t stamp;
} table_t;

typedef struct {
    int64_t *data;
    Py_ssize_t size, cap;
} buffer_t;

static int buffer_push(buffer_t *b, int64_t value) {
    if (b->size == b->cap) {
        Py_ssize_t cap = b->cap ? 2 * b->cap : 1024;
        int64_t *data = (int64_t *)realloc(b->data, (size_t)cap * sizeof(int64_t));
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->data = data;
        b->cap = cap;
    }
    b->data[b->size++] = value;
    return 0;
}

/* Empty the table for n keys (a load of at most one half). 0, or -1 on error. */
static int table_reset(table_t *t, Py_ssize_t n) {
    Py_ssize_t cap = 8;
    while (cap < 2 * n) cap <<= 1;
    if (cap > t->cap) {
        free(t->slots);
        t->slots = (slot_t *)calloc((size_t)cap, sizeof(slot_t));
        if (t->slots == NULL) {
            t->cap = 0;
            PyErr_NoMemory();
            return -1;
        }
        t->cap = cap;
        t->stamp = 0;
    }
    if (++t->stamp == 0) { /* wrapped: clear once, every 4 billion queries */
        memset(t->slots, 0, (size_t)t->cap * sizeof(slot_t));
        t->stamp = 1;
    }
    t->mask = cap - 1; /* the first cap slots: a small table for a short list */
    return 0;
}

/* 1: equal, 0: not, -1: error (both exact str) */
static int str_equal(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    if (PyUnicode_GET_LENGTH(a) != PyUnicode_GET_LENGTH(b)) return 0;
    int cmp = PyUnicode_Compare(a, b);
    if (cmp == -1 && PyErr_Occurred()) return -1;
    return cmp == 0;
}

/* The key's slot; with insert, a new slot for a new key (*inserted = 1). -1: error, -2: absent. */
static Py_ssize_t table_find(table_t *t, PyObject *key, Py_hash_t hash, int insert,
                             int *inserted) {
    Py_ssize_t i = (Py_ssize_t)((size_t)hash & (size_t)t->mask);
    *inserted = 0;
    while (t->slots[i].stamp == t->stamp) {
        if (t->slots[i].hash == hash) {
            int eq = str_equal(t->slots[i].key, key);
            if (eq < 0) return -1;
            if (eq) return i;
        }
        i = (i + 1) & t->mask;
    }
    if (!insert) return -2;
    t->slots[i].stamp = t->stamp;
    t->slots[i].hash = hash;
    t->slots[i].key = key;
    t->slots[i].pos = -1;
    *inserted = 1;
    return i;
}

/* ids read ahead of the table lookups */
#define CHUNK 64

/* status bits of a query */
#define LEFT 1            /* left to the Python loop */
#define RELEVANT_TWICE 2  /* (warn) its relevant ids list an id twice */
#define RETURNED_TWICE 4  /* (warn) its list returns a relevant id twice */

typedef struct {
    int distinct, warn;
    table_t relevant, seen;
    buffer_t hit_query, hit_pos;
} matcher_t;

/* One query: its status bits, or -1 on error. */
static int match_query(matcher_t *m, Py_ssize_t q, PyObject *ranked, PyObject *relevant,
                       int64_t *num_rel, int64_t *count, int64_t *size) {
    if (!PyList_CheckExact(ranked)) return LEFT;
    PyObject *rel;
    if (PyList_CheckExact(relevant) || PyTuple_CheckExact(relevant)) {
        rel = relevant;
        Py_INCREF(rel);
    } else if (PyAnySet_CheckExact(relevant)) {
        rel = PySequence_List(relevant);
        if (rel == NULL) return -1;
    } else {
        return LEFT;
    }
    int status = 0, inserted;
    Py_ssize_t n_given = PySequence_Fast_GET_SIZE(rel);
    PyObject **rel_items = PySequence_Fast_ITEMS(rel);
    Py_ssize_t n_rel = 0, n_found = 0, n_distinct = 0, n = PyList_GET_SIZE(ranked);
    /* the early stop once every relevant id is found: not where every id is counted or read */
    int read_all = m->distinct || m->warn;
    Py_ssize_t hits_before = m->hit_query.size;
    if (table_reset(&m->relevant, n_given) < 0) goto error;
    for (Py_ssize_t j = 0; j < n_given; j++) {
        PyObject *item = rel_items[j];
        if (!PyUnicode_CheckExact(item)) {
            status = LEFT;
            goto done;
        }
        Py_hash_t hash = PyObject_Hash(item);
        if (hash == -1) goto error;
        if (table_find(&m->relevant, item, hash, 1, &inserted) == -1) goto error;
        n_rel += inserted;
    }
    if (m->warn && n_rel != n_given) status |= RELEVANT_TWICE;
    if (m->distinct && table_reset(&m->seen, n) < 0) goto error;
    /* In chunks: first every id's type and hash (each id is a separate object, most of them
     * not in the cache: a loop of loads alone keeps many of those reads in flight), then the
     * table lookups on the chunk's hashes (whose branches, taken on the hash, would otherwise
     * stop the reads ahead at every misprediction). */
    Py_hash_t hashes[CHUNK];
    for (Py_ssize_t start = 0; start < n; start += CHUNK) {
        if (!read_all && n_found == n_rel) {
            /* Every relevant id is found: the rest changes no first position (nor would a later
             * id that is not a str: distinct str ids keep distinct canonical forms, so comparing
             * the query's ids as text finds the same ids at the same places). */
            break;
        }
        Py_ssize_t stop = start + CHUNK < n ? start + CHUNK : n;
        for (Py_ssize_t i = start; i < stop; i++) {
            PyObject *item = PyList_GET_ITEM(ranked, i);
            if (!PyUnicode_CheckExact(item)) {
                status = LEFT;
                goto done;
            }
            hashes[i - start] = PyObject_Hash(item);
            if (hashes[i - start] == -1) goto error;
        }
        for (Py_ssize_t i = start; i < stop; i++) {
            PyObject *item = PyList_GET_ITEM(ranked, i);
            Py_hash_t hash = hashes[i - start];
            if (m->distinct) {
                if (table_find(&m->seen, item, hash, 1, &inserted) == -1) goto error;
                n_distinct += inserted;
                if (!inserted && !m->warn) continue; /* a repeat: its first position is taken */
            }
            if (!read_all && n_found == n_rel) break;
            Py_ssize_t s = table_find(&m->relevant, item, hash, 0, &inserted);
            if (s == -1) goto error;
            if (s < 0) continue;
            if (m->relevant.slots[s].pos >= 0) {
                if (m->warn) status |= RETURNED_TWICE;
                continue;
            }
            m->relevant.slots[s].pos = i;
            n_found++;
            if (buffer_push(&m->hit_query, (int64_t)q) < 0 ||
                buffer_push(&m->hit_pos, (int64_t)i) < 0)
                goto error;
        }
    }
    *num_rel = (int64_t)n_rel;
    *count = (int64_t)n_distinct;
    *size = (int64_t)n;
    goto done;
error:
    status = -1;
done:
    if (status == LEFT) { /* its hits are taken back: Python ranks it whole */
        m->hit_query.size = hits_before;
        m->hit_pos.size = hits_before;
    }
    Py_DECREF(rel);
    return status;
}

static PyObject *as_bytes(const void *data, Py_ssize_t n_bytes) {
    return PyBytes_FromStringAndSize(n_bytes ? (const char *)data : "", n_bytes);
}

PyDoc_STRVAR(match_doc,
             "match(ranked_ids, relevant_ids, distinct, warn) -> (status, num_relevant, "
             "num_distinct, list_size, hit_query, hit_position)\n\n"
             "Per query: status (uint8 bits: 1 left to the Python loop; with warn, 2 its relevant "
             "ids repeat an id, 4 its list returns a relevant id twice), the number of distinct "
             "relevant ids, of distinct listed ids (only with distinct) and of listed ids (int64, "
             "0 where left); and the (query, first position) of each relevant id found, queries "
             "ascending (int64 bytes).");

static PyObject *match(PyObject *self, PyObject *args) {
    PyObject *ranked_ids, *relevant_ids;
    matcher_t m;
    memset(&m, 0, sizeof(m));
    if (!PyArg_ParseTuple(args, "OOpp", &ranked_ids, &relevant_ids, &m.distinct, &m.warn))
        return NULL;
    PyObject *ranked_fast = PySequence_Fast(ranked_ids, "`ranked_ids` must be a sequence");
    if (ranked_fast == NULL) return NULL;
    PyObject *relevant_fast = PySequence_Fast(relevant_ids, "`relevant_ids` must be a sequence");
    if (relevant_fast == NULL) {
        Py_DECREF(ranked_fast);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n_q = PySequence_Fast_GET_SIZE(ranked_fast);
    size_t rows = (size_t)(n_q ? n_q : 1);
    uint8_t *status = (uint8_t *)calloc(rows, 1);
    int64_t *num_rel = (int64_t *)calloc(rows, sizeof(int64_t));
    int64_t *counts = (int64_t *)calloc(rows, sizeof(int64_t));
    int64_t *sizes = (int64_t *)calloc(rows, sizeof(int64_t));
    if (PySequence_Fast_GET_SIZE(relevant_fast) != n_q) {
        PyErr_SetString(PyExc_ValueError, "`ranked_ids` and `relevant_ids` differ in length");
        goto finally;
    }
    if (status == NULL || num_rel == NULL || counts == NULL || sizes == NULL) {
        PyErr_NoMemory();
        goto finally;
    }
    PyObject **ranked_items = PySequence_Fast_ITEMS(ranked_fast);
    PyObject **relevant_items = PySequence_Fast_ITEMS(relevant_fast);
    for (Py_ssize_t q = 0; q < n_q; q++) {
        int s = match_query(&m, q, ranked_items[q], relevant_items[q], &num_rel[q], &counts[q],
                            &sizes[q]);
        if (s < 0) goto finally;
        status[q] = (uint8_t)s;
    }
    Py_ssize_t n_hits = m.hit_query.size * (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t per_query = n_q * (Py_ssize_t)sizeof(int64_t);
    result = Py_BuildValue("(NNNNNN)", as_bytes(status, n_q), as_bytes(num_rel, per_query),
                           as_bytes(counts, per_query), as_bytes(sizes, per_query),
                           as_bytes(m.hit_query.data, n_hits), as_bytes(m.hit_pos.data, n_hits));
finally:
    free(status);
    free(num_rel);
    free(counts);
    free(sizes);
    free(m.hit_query.data);
    free(m.hit_pos.data);
    free(m.relevant.slots);
    free(m.seen.slots);
    Py_DECREF(ranked_fast);
    Py_DECREF(relevant_fast);
    return result;
}

static PyMethodDef methods[] = {
    {"match", match, METH_VARARGS, match_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_str_lists",
    "The ranked-lists form's inner loop for lists of str ids (see lists.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__str_lists(void) { return PyModule_Create(&module); }
