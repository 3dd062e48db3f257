/* Decoded episode chunks (orjson's dicts and lists) as columns, at C speed.
 *
 * The compiled half of app.rllink.chunk_columns.pack for a message whose chunks all have
 * one shape (the same number fields, rows of the same width): a scene of one kind of
 * agent. Python's pack spends microseconds per chunk on calls (frozensets of keys, a
 * list per field, struct's argument tuples); this walks the lists once and writes each
 * field's numbers into one buffer.
 *
 * A fast path with a reference: it takes a strict subset of what pack takes (exact ints
 * and floats only, no booleans anywhere) and returns None for anything else, so that
 * pack decides; what it returns pack turns into exactly the columns its own path makes
 * (tests/test_chunk_columns.py compares both). Checks that need numpy (the magnitude test
 * of app.schemas.fast_floats) stay in pack.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* The fields, in app.rllink.chunk_columns' order: number fields first, then scalars. */
enum { OBS, ACTIONS, REWARDS, ACTION_LOGP, ACTION_DIST_INPUTS, NUM_ARRAYS };
#define NUM_FIELDS 13
static const char *FIELD_NAMES[NUM_FIELDS] = {
    "obs", "actions", "rewards", "action_logp", "action_dist_inputs",
    "agent_id", "module_id", "episode_id", "weights_seq_no", "outcome", "is_terminated", "is_truncated", "evaluation",
};
#define REQUIRED ((1u << OBS) | (1u << ACTIONS) | (1u << REWARDS) | (1u << 10) | (1u << 11))
#define ARRAY_BITS ((1u << NUM_ARRAYS) - 1)
static const int ROW_FIELD[NUM_ARRAYS] = {1, 0, 0, 0, 1}; /* a row of numbers per step */

static PyObject *field_index; /* dict: field name -> its index */

/* A number as pack's struct.pack_into("f") would take it, or -1: not an exact float or
 * int (a boolean, say), or beyond float32. */
static int to_float32(PyObject *item, float *out)
{
    double value;
    if (PyFloat_CheckExact(item)) {
        value = PyFloat_AS_DOUBLE(item);
    } else if (PyLong_CheckExact(item)) {
        value = PyLong_AsDouble(item);
        if (value == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
    } else {
        return -1;
    }
    float single = (float)value;
    if (!isfinite(value) || !isfinite(single))
        return -1;
    *out = single;
    return 0;
}

/* One chunk's field (a non-empty list) appended to `buffer` at `*used` (bytes): single
 * numbers (width 0) or rows of `width`; int64 for `ints`. -1: not of that form. */
static int append_field(PyObject *list, Py_ssize_t width, int ints, char *buffer, Py_ssize_t *used)
{
    Py_ssize_t steps = PyList_GET_SIZE(list);
    if (width == 0) {
        for (Py_ssize_t i = 0; i < steps; i++) {
            PyObject *item = PyList_GET_ITEM(list, i);
            if (ints) {
                if (!PyLong_CheckExact(item))
                    return -1;
                int overflow = 0;
                long long value = PyLong_AsLongLongAndOverflow(item, &overflow);
                if (overflow || (value == -1 && PyErr_Occurred())) {
                    PyErr_Clear();
                    return -1;
                }
                int64_t exact = (int64_t)value;
                memcpy(buffer + *used, &exact, sizeof exact);
                *used += sizeof exact;
            } else {
                float value;
                if (to_float32(item, &value) < 0)
                    return -1;
                memcpy(buffer + *used, &value, sizeof value);
                *used += sizeof value;
            }
        }
        return 0;
    }
    for (Py_ssize_t i = 0; i < steps; i++) {
        PyObject *row = PyList_GET_ITEM(list, i);
        if (!PyList_CheckExact(row) || PyList_GET_SIZE(row) != width)
            return -1;
        for (Py_ssize_t j = 0; j < width; j++) {
            float value;
            if (to_float32(PyList_GET_ITEM(row, j), &value) < 0)
                return -1;
            memcpy(buffer + *used, &value, sizeof value);
            *used += sizeof value;
        }
    }
    return 0;
}

/* columns(episodes, defaults) -> (arrays, scalars) or None.
 *
 * episodes: a list of at least two dicts; defaults: each scalar field's default, in
 * FIELD_NAMES' order. arrays: {name: (bytearray, "f" or "q", row width or 0, [steps per chunk])}
 * for the number fields the chunks have; scalars: {name: [a value per chunk]}, the
 * default where a chunk lacks the field, for the scalar fields any chunk has. */
static PyObject *columns(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *episodes, *defaults;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &episodes, &PyTuple_Type, &defaults))
        return NULL;
    if (PyTuple_GET_SIZE(defaults) != NUM_FIELDS - NUM_ARRAYS) {
        PyErr_SetString(PyExc_ValueError, "columns: a default per scalar field");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(episodes);
    if (count < 2)
        Py_RETURN_NONE;

    PyObject **values = PyMem_Calloc((size_t)count * NUM_FIELDS, sizeof(PyObject *)); /* borrowed */
    PyObject *result = NULL, *arrays = NULL, *scalars = NULL;
    if (values == NULL)
        return PyErr_NoMemory();

    /* The chunks' fields: known names only, the required ones, the same number fields in all. */
    unsigned given = 0, array_fields = 0;
    for (Py_ssize_t c = 0; c < count; c++) {
        PyObject *chunk = PyList_GET_ITEM(episodes, c), *key, *value;
        if (!PyDict_CheckExact(chunk))
            goto decline;
        unsigned fields = 0;
        Py_ssize_t position = 0;
        while (PyDict_Next(chunk, &position, &key, &value)) {
            PyObject *index = PyUnicode_CheckExact(key) ? PyDict_GetItemWithError(field_index, key) : NULL;
            if (index == NULL) {
                if (PyErr_Occurred())
                    goto fail;
                goto decline;
            }
            long i = PyLong_AsLong(index);
            fields |= 1u << i;
            values[c * NUM_FIELDS + i] = value;
        }
        if ((fields & REQUIRED) != REQUIRED || (c > 0 && (fields & ARRAY_BITS) != array_fields))
            goto decline;
        array_fields = fields & ARRAY_BITS;
        given |= fields;
    }

    if ((arrays = PyDict_New()) == NULL || (scalars = PyDict_New()) == NULL)
        goto fail;
    for (int f = 0; f < NUM_ARRAYS; f++) {
        if (!(array_fields & (1u << f)))
            continue;
        /* Its shape: every chunk's a non-empty list, of single numbers or of rows of one width. */
        Py_ssize_t width = 0, numbers = 0;
        for (Py_ssize_t c = 0; c < count; c++) {
            PyObject *list = values[c * NUM_FIELDS + f];
            if (!PyList_CheckExact(list) || PyList_GET_SIZE(list) == 0)
                goto decline;
            PyObject *first = PyList_GET_ITEM(list, 0);
            Py_ssize_t first_width = PyList_CheckExact(first) ? PyList_GET_SIZE(first) : 0;
            if (PyList_CheckExact(first) && first_width == 0)
                goto decline;
            if (c == 0)
                width = first_width;
            else if (first_width != width)
                goto decline;
            numbers += PyList_GET_SIZE(list) * (width ? width : 1);
        }
        if (f != ACTIONS && (width > 0) != ROW_FIELD[f])
            goto decline; /* rows where pack wants numbers, or the other way round */
        /* Discrete actions: ints (int64); Box actions: rows starting with a float (pack
         * takes rows of ints as MultiDiscrete's, which the columns do not take). */
        int ints = 0;
        if (f == ACTIONS) {
            PyObject *first = PyList_GET_ITEM(values[f], 0);
            if (width == 0)
                ints = 1;
            else if (!PyFloat_CheckExact(PyList_GET_ITEM(first, 0)))
                goto decline;
        }
        size_t item_size = ints ? sizeof(int64_t) : sizeof(float);
        PyObject *buffer = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(numbers * item_size));
        PyObject *lengths = PyList_New(count);
        if (buffer == NULL || lengths == NULL) {
            Py_XDECREF(buffer);
            Py_XDECREF(lengths);
            goto fail;
        }
        Py_ssize_t used = 0;
        for (Py_ssize_t c = 0; c < count; c++) {
            PyObject *list = values[c * NUM_FIELDS + f];
            PyObject *steps = PyLong_FromSsize_t(PyList_GET_SIZE(list));
            if (steps == NULL) {
                Py_DECREF(buffer);
                Py_DECREF(lengths);
                goto fail;
            }
            PyList_SET_ITEM(lengths, c, steps);
            /* (append_field checks each row's width: the buffer holds exactly `numbers` items.) */
            if (append_field(list, width, ints, PyByteArray_AS_STRING(buffer), &used) < 0) {
                Py_DECREF(buffer);
                Py_DECREF(lengths);
                goto decline;
            }
        }
        PyObject *column = Py_BuildValue("(NsnN)", buffer, ints ? "q" : "f", width, lengths);
        if (column == NULL || PyDict_SetItemString(arrays, FIELD_NAMES[f], column) < 0) {
            Py_XDECREF(column);
            goto fail;
        }
        Py_DECREF(column);
    }

    for (int f = NUM_ARRAYS; f < NUM_FIELDS; f++) {
        if (!(given & (1u << f)))
            continue;
        PyObject *column = PyList_New(count), *fallback = PyTuple_GET_ITEM(defaults, f - NUM_ARRAYS);
        if (column == NULL)
            goto fail;
        for (Py_ssize_t c = 0; c < count; c++) {
            PyObject *value = values[c * NUM_FIELDS + f];
            value = value ? value : fallback;
            Py_INCREF(value);
            PyList_SET_ITEM(column, c, value);
        }
        if (PyDict_SetItemString(scalars, FIELD_NAMES[f], column) < 0) {
            Py_DECREF(column);
            goto fail;
        }
        Py_DECREF(column);
    }
    result = Py_BuildValue("(OO)", arrays, scalars);
    goto done;

decline:
    result = Py_NewRef(Py_None);
    goto done;
fail:
    result = NULL;
done:
    Py_XDECREF(arrays);
    Py_XDECREF(scalars);
    PyMem_Free(values);
    return result;
}

static PyMethodDef methods[] = {
    {"columns", columns, METH_VARARGS, "An EPISODES message's chunks of one shape as columns, or None (pack decides)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "app.rllink._columns", "Episode chunks as columns at C speed (app.rllink.chunk_columns).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__columns(void)
{
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    field_index = PyDict_New();
    if (field_index == NULL)
        goto fail;
    for (long i = 0; i < NUM_FIELDS; i++) {
        PyObject *index = PyLong_FromLong(i);
        if (index == NULL || PyDict_SetItemString(field_index, FIELD_NAMES[i], index) < 0) {
            Py_XDECREF(index);
            goto fail;
        }
        Py_DECREF(index);
    }
    PyObject *names = PyTuple_New(NUM_FIELDS);
    if (names == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < NUM_FIELDS; i++) {
        PyObject *name = PyUnicode_FromString(FIELD_NAMES[i]);
        if (name == NULL) {
            Py_DECREF(names);
            goto fail;
        }
        PyTuple_SET_ITEM(names, i, name);
    }
    if (PyModule_AddObject(module, "FIELDS", names) < 0) { /* the fields' order, as `columns` reads its defaults */
        Py_DECREF(names);
        goto fail;
    }
    return module;
fail:
    Py_DECREF(module);
    return NULL;
}
