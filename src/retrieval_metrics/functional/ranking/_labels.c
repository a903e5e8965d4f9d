/* labels.label_codes of a list of Python str ids, in C.
 *
 * Why C: a corpus comes with a million string ids, and numpy's way (a fixed-width UTF-32 copy of
 * every chunk of ids, then a pass per column) cost about a quarter of a second, a few percent of
 * the whole ranking of a million documents. Here each id's code points are read where Python
 * holds them.
 *
 * The codes are labels.py's, bit for bit (tests/ranking/test_label_codes_compiled.py):
 * - the decimal text of a non-negative integer below 10**18 (digits only, no leading zero but in
 *   "0") is that integer;
 * - any other string is its text hash (labels._text_hashes): FNV-1a over its UTF-32 code points
 *   taken two to a 64-bit word (the first in the low half, a zero after an odd last one), seeded
 *   by the length times splitmix64's first multiplier, then splitmix64's finaliser;
 * - a string that starts like a number ('0'-'9' or '-') but is not plain decimal text keeps its
 *   hash and is listed for Python, whose canonical_id decides whether it is an integer.
 *
 * undecided_ids answers labels.key_kind by the same rule: 8.8M decimal ids (MS MARCO's passage
 * ids) were read by a Python loop of canonical_id, 4.6 s.
 *
 * ucs4_codes and ucs4_undecided do the same for numpy's text arrays (dtype "U", a corpus's ids
 * from a .npy file), read where numpy holds them: fixed-width UTF-32 rows, a string's trailing
 * NULs not part of it (numpy's own rule). Made Python str first (tolist), 2M ids took 0.10-0.16
 * s to code, and 0.02-0.06 s read here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define FNV_OFFSET 0xCBF29CE484222325ULL
#define FNV_PRIME 0x100000001B3ULL
#define MIX1 0xBF58476D1CE4E5B9ULL
#define MIX2 0x94D049BB133111EBULL

static uint64_t text_hash(int kind, const void *data, Py_ssize_t n) {
    uint64_t h = FNV_OFFSET ^ ((uint64_t)n * MIX1);
    for (Py_ssize_t i = 0; i < n; i += 2) {
        uint64_t low = (uint64_t)PyUnicode_READ(kind, data, i);
        uint64_t high = i + 1 < n ? (uint64_t)PyUnicode_READ(kind, data, i + 1) : 0;
        h = (h ^ (low | (high << 32))) * FNV_PRIME;
    }
    h ^= h >> 30;
    h *= MIX1;
    h ^= h >> 27;
    h *= MIX2;
    h ^= h >> 31;
    return h;
}

/* Whether the string (kind, data, len) is the plain decimal text of a non-negative integer
 * below 10**18 (digits only, no leading zero but in "0"); if so, that integer in *value. */
static int plain_decimal(int kind, const void *data, Py_ssize_t len, int64_t *value) {
    Py_UCS4 first = len ? PyUnicode_READ(kind, data, 0) : 0;
    if (len < 1 || len > 18 || first < '0' || first > '9' || (len > 1 && first == '0')) return 0;
    int64_t v = 0;
    for (Py_ssize_t i = 0; i < len; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < '0' || c > '9') return 0;
        v = v * 10 + (int64_t)(c - '0');
    }
    *value = v;
    return 1;
}

/* Whether a string that is not plain decimal text starts like a number ('0'-'9' or '-'): only
 * Python's canonical_id can say whether it is an integer's text ("-5", 19 digits). */
static int number_like(int kind, const void *data, Py_ssize_t len) {
    Py_UCS4 first = len ? PyUnicode_READ(kind, data, 0) : 0;
    return len && ((first >= '0' && first <= '9') || first == '-');
}

/* index k appended to the list `left`; 0 on success */
static int append_index(PyObject *left, Py_ssize_t k) {
    PyObject *index = PyLong_FromSsize_t(k);
    int failed = index == NULL || PyList_Append(left, index) < 0;
    Py_XDECREF(index);
    return failed ? -1 : 0;
}

/* The code of one string into *out; 1 where Python must decide it (it starts like a number but
 * is not plain decimal text), else 0. */
static int code_one(int kind, const void *data, Py_ssize_t len, int64_t *out) {
    int64_t value;
    if (plain_decimal(kind, data, len, &value)) {
        *out = value;
        return 0;
    }
    *out = (int64_t)text_hash(kind, data, len);
    return number_like(kind, data, len);
}

/* How key_kind reads one string: 0 plain decimal text, 1 for Python to decide, 2 text. */
static int kind_of_one(int kind, const void *data, Py_ssize_t len) {
    int64_t value;
    if (plain_decimal(kind, data, len, &value)) return 0;
    return number_like(kind, data, len) ? 1 : 2;
}

/* `obj` as `codes`, the writable C-contiguous int64 buffer of `n` entries that str_codes and
 * ucs4_codes write (0); else released, a ValueError naming what an entry is (`entry`), -1. */
static int codes_buffer(PyObject *obj, Py_ssize_t n, const char *entry, Py_buffer *codes) {
    if (PyObject_GetBuffer(obj, codes, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        return -1;
    if (codes->ndim != 1 || codes->itemsize != 8 || codes->shape[0] != n ||
        (strcmp(codes->format, "l") != 0 && strcmp(codes->format, "q") != 0)) {
        PyBuffer_Release(codes);
        PyErr_Format(PyExc_ValueError,
                     "`codes` must be a C-contiguous int64 array of one entry a %s", entry);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(str_codes_doc,
             "str_codes(values, codes) -> list\n\n"
             "Write label_codes of the list ``values`` (exact str only, else TypeError) into the "
             "writable int64 buffer ``codes`` (one entry each); return the indices of the "
             "strings that start like a number but are not plain decimal text (the caller "
             "reads them with canonical_id).");

static PyObject *str_codes(PyObject *self, PyObject *args) {
    PyObject *values, *codes_obj;
    if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &values, &codes_obj)) return NULL;
    Py_buffer codes;
    const Py_ssize_t n = PyList_GET_SIZE(values);
    if (codes_buffer(codes_obj, n, "string", &codes) < 0) return NULL;
    PyObject *left = PyList_New(0);
    if (left == NULL) goto done;
    int64_t *out = (int64_t *)codes.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *v = PyList_GET_ITEM(values, k);
        if (!PyUnicode_CheckExact(v)) {
            PyErr_SetString(PyExc_TypeError, "str_codes takes exact str only");
            Py_CLEAR(left);
            goto done;
        }
        if (code_one(PyUnicode_KIND(v), PyUnicode_DATA(v), PyUnicode_GET_LENGTH(v), &out[k]) &&
            append_index(left, k) < 0) {
            Py_CLEAR(left);
            goto done;
        }
    }
done:
    PyBuffer_Release(&codes);
    return left;
}

PyDoc_STRVAR(undecided_ids_doc,
             "undecided_ids(values) -> list or None\n\n"
             "Of the list ``values`` (exact str only, else TypeError): None as soon as one is "
             "certainly text (neither plain decimal text nor starting like a number: labels."
             "key_kind's \"str\"), else the indices of those that start like a number but are "
             "not plain decimal text (the caller reads them with canonical_id).");

static PyObject *undecided_ids(PyObject *self, PyObject *values) {
    if (!PyList_Check(values)) {
        PyErr_SetString(PyExc_TypeError, "undecided_ids takes a list");
        return NULL;
    }
    PyObject *left = PyList_New(0);
    if (left == NULL) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(values);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *v = PyList_GET_ITEM(values, k);
        if (!PyUnicode_CheckExact(v)) {
            PyErr_SetString(PyExc_TypeError, "undecided_ids takes exact str only");
            Py_DECREF(left);
            return NULL;
        }
        int found = kind_of_one(PyUnicode_KIND(v), PyUnicode_DATA(v), PyUnicode_GET_LENGTH(v));
        if (found == 0) continue;
        if (found == 2) {
            Py_DECREF(left);
            Py_RETURN_NONE;
        }
        if (append_index(left, k) < 0) {
            Py_DECREF(left);
            return NULL;
        }
    }
    return left;
}

/* A numpy text array as the C-contiguous uint32 matrix (ids, code points an id) `rows`. */
static int ucs4_rows(PyObject *obj, Py_buffer *rows) {
    if (PyObject_GetBuffer(obj, rows, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (rows->ndim != 2 || rows->itemsize != 4 ||
        (strcmp(rows->format, "I") != 0 && strcmp(rows->format, "=I") != 0 &&
         strcmp(rows->format, "<I") != 0 && strcmp(rows->format, "L") != 0)) {
        PyBuffer_Release(rows);
        PyErr_SetString(PyExc_ValueError, "`rows` must be a C-contiguous uint32 matrix of one "
                                          "row an id (a numpy text array's code points)");
        return -1;
    }
    return 0;
}

/* The length of the id in a row of `width` code points: numpy's strings end before their
 * trailing NULs. */
static Py_ssize_t ucs4_length(const uint32_t *row, Py_ssize_t width) {
    while (width > 0 && row[width - 1] == 0) width--;
    return width;
}

PyDoc_STRVAR(ucs4_codes_doc,
             "ucs4_codes(rows, codes) -> list\n\n"
             "str_codes of the ids of a numpy text array, given as ``rows``: its code points "
             "as a C-contiguous uint32 matrix, one row an id (trailing NULs are not part of "
             "it), into the int64 buffer ``codes``; returns the indices Python decides.");

static PyObject *ucs4_codes(PyObject *self, PyObject *args) {
    PyObject *rows_obj, *codes_obj;
    if (!PyArg_ParseTuple(args, "OO", &rows_obj, &codes_obj)) return NULL;
    Py_buffer rows, codes;
    if (ucs4_rows(rows_obj, &rows) < 0) return NULL;
    const Py_ssize_t n = rows.shape[0], width = rows.shape[1];
    if (codes_buffer(codes_obj, n, "row", &codes) < 0) {
        PyBuffer_Release(&rows);
        return NULL;
    }
    PyObject *left = PyList_New(0);
    if (left == NULL) goto done;
    const uint32_t *at = (const uint32_t *)rows.buf;
    int64_t *out = (int64_t *)codes.buf;
    for (Py_ssize_t k = 0; k < n; k++, at += width) {
        if (code_one(PyUnicode_4BYTE_KIND, at, ucs4_length(at, width), &out[k]) &&
            append_index(left, k) < 0) {
            Py_CLEAR(left);
            goto done;
        }
    }
done:
    PyBuffer_Release(&codes);
    PyBuffer_Release(&rows);
    return left;
}

PyDoc_STRVAR(ucs4_undecided_doc,
             "ucs4_undecided(rows) -> list or None\n\n"
             "undecided_ids of the ids of a numpy text array, given as ``rows`` (see "
             "ucs4_codes).");

static PyObject *ucs4_undecided(PyObject *self, PyObject *rows_obj) {
    Py_buffer rows;
    if (ucs4_rows(rows_obj, &rows) < 0) return NULL;
    PyObject *left = PyList_New(0);
    Py_ssize_t n = rows.shape[0], width = rows.shape[1];
    const uint32_t *at = (const uint32_t *)rows.buf;
    for (Py_ssize_t k = 0; left != NULL && k < n; k++, at += width) {
        int found = kind_of_one(PyUnicode_4BYTE_KIND, at, ucs4_length(at, width));
        if (found == 2) {
            Py_CLEAR(left);
            PyBuffer_Release(&rows);
            Py_RETURN_NONE;
        }
        if (found == 1 && append_index(left, k) < 0) Py_CLEAR(left);
    }
    PyBuffer_Release(&rows);
    return left;
}

static PyMethodDef methods[] = {
    {"str_codes", str_codes, METH_VARARGS, str_codes_doc},
    {"undecided_ids", undecided_ids, METH_O, undecided_ids_doc},
    {"ucs4_codes", ucs4_codes, METH_VARARGS, ucs4_codes_doc},
    {"ucs4_undecided", ucs4_undecided, METH_O, ucs4_undecided_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_labels",
    "label_codes of str ids: a list of str, or a numpy text array (see labels.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__labels(void) { return PyModule_Create(&module); }
