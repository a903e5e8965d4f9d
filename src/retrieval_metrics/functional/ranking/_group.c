/* The scores form's grouping of entries by query, in C: a counting sort.
 *
 * Why C: torchmetrics' form delivers (score, target, query index) entries in any order; grouping
 * 10 million of them by query with numpy takes one sort of 64-bit keys (scores._grouping_order),
 * n log n, the largest part of the form's time. The query codes are dense (0 .. num_q - 1), so
 * two linear passes give the same stable permutation: count the entries of each code, then
 * place each entry after the earlier entries of its code.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

static PyMethodDef methods[] = {
    {"stable_order", stable_order, METH_VARARGS, stable_order_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_group",
    "The scores form's grouping of entries by query: a counting sort (see scores.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__group(void) { return PyModule_Create(&module); }
