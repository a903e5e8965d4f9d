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
    if (PyObject_GetBuffer(codes_obj, &codes, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) <
        0)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(values);
    PyObject *left = NULL;
    if (codes.ndim != 1 || codes.itemsize != 8 || codes.shape[0] != n ||
        (strcmp(codes.format, "l") != 0 && strcmp(codes.format, "q") != 0)) {
        PyErr_SetString(PyExc_ValueError, "`codes` must be a C-contiguous int64 array of one "
                                          "entry a string");
        goto done;
    }
    left = PyList_New(0);
    if (left == NULL) goto done;
    int64_t *out = (int64_t *)codes.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *v = PyList_GET_ITEM(values, k);
        if (!PyUnicode_CheckExact(v)) {
            PyErr_SetString(PyExc_TypeError, "str_codes takes exact str only");
            Py_CLEAR(left);
            goto done;
        }
        int kind = PyUnicode_KIND(v);
        const void *data = PyUnicode_DATA(v);
        Py_ssize_t len = PyUnicode_GET_LENGTH(v);
        Py_UCS4 first = len ? PyUnicode_READ(kind, data, 0) : 0;
        if (len >= 1 && len <= 18 && first >= '0' && first <= '9' && (len == 1 || first != '0')) {
            int64_t value = 0;
            Py_ssize_t i = 0;
            for (; i < len; i++) {
                Py_UCS4 c = PyUnicode_READ(kind, data, i);
                if (c < '0' || c > '9') break;
                value = value * 10 + (int64_t)(c - '0');
            }
            if (i == len) {
                out[k] = value;
                continue;
            }
        }
        out[k] = (int64_t)text_hash(kind, data, len);
        if (len && ((first >= '0' && first <= '9') || first == '-')) {
            PyObject *index = PyLong_FromSsize_t(k);
            if (index == NULL || PyList_Append(left, index) < 0) {
                Py_XDECREF(index);
                Py_CLEAR(left);
                goto done;
            }
            Py_DECREF(index);
        }
    }
done:
    PyBuffer_Release(&codes);
    return left;
}

static PyMethodDef methods[] = {
    {"str_codes", str_codes, METH_VARARGS, str_codes_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_labels",
    "label_codes of a list of str ids (see labels.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__labels(void) { return PyModule_Create(&module); }
