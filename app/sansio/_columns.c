/* An EPISODES message's JSON body parsed straight into columns, at C speed.
 *
 * The compiled half of app.sansio.chunk_columns for a message whose chunks all have one
 * shape (the same number fields, rows of the same width): a scene of one kind of agent.
 * Decoding such a body with orjson makes a Python float per number and a dict per chunk,
 * which pack then walks; here the bytes are read once and each field's numbers go into
 * one buffer: no Python object per number, none per chunk but its ids.
 *
 * A fast path with a reference: it takes a strict subset of what orjson and pack take
 * (no escapes in strings, no booleans among numbers, integers of at most 18 digits, ...)
 * and returns None for anything else, so that the message takes the Python path, whose
 * results and error messages stay the reference (tests/test_chunk_columns.py compares
 * both). The message's other fields are handed back as byte spans, for orjson.
 *
 * Numbers are converted as orjson and struct do (correctly rounded to a double, then
 * rounded to float32): Clinger's fast path for short mantissas, else Eisel and Lemire's
 * (one 64 x 64-bit product with a power of five, app/sansio/_powers_of_five.h), else, in
 * the rare cases that leaves undecided, CPython's own correctly rounded conversion.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_powers_of_five.h"

#define DECLINE (-1) /* not for this path: the Python path decides */
#define FAILED (-2)  /* a Python exception is set (out of memory) */

/* -- Numbers ------------------------------------------------------------------------- */

enum { INTEGER, REAL };
typedef struct {
    int kind;
    int64_t integer; /* INTEGER: as Python's int (orjson gives one for a number without . or e) */
    double real;     /* REAL: as Python's float */
} Number;

static const double EXACT_POWERS_OF_TEN[] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* w * 10**q as the nearest double, or DECLINE when this cannot be sure (the caller then
 * asks CPython). w has at most 19 digits. */
static int eisel_lemire(uint64_t w, int64_t q, double *out)
{
    if (w == 0) {
        *out = 0.0;
        return 0;
    }
    if (w <= (UINT64_C(1) << 53) && q >= -22 && q <= 22) { /* Clinger: both exact, one rounding */
        double value = (double)w;
        *out = q < 0 ? value / EXACT_POWERS_OF_TEN[-q] : value * EXACT_POWERS_OF_TEN[q];
        return 0;
    }
    if (q < POWERS_SMALLEST || q > POWERS_LARGEST)
        return DECLINE;
    int leading_zeros = __builtin_clzll(w);
    w <<= leading_zeros;
    __uint128_t product = (__uint128_t)w * POWERS_OF_FIVE[q - POWERS_SMALLEST];
    uint64_t high = (uint64_t)(product >> 64), low = (uint64_t)product;
    /* The 9 bits below the 55 kept all ones: the truncated power may carry into them. A
     * low word of 0 or 1: perhaps exactly halfway between two doubles. Both rare. */
    if ((high & 0x1FF) == 0x1FF || low <= 1)
        return DECLINE;
    int upper_bit = (int)(high >> 63);
    uint64_t mantissa = high >> (upper_bit + 9);
    int64_t power2 = ((((152170 + 65536) * q) >> 16) + 63) + upper_bit - leading_zeros + 1023;
    if (power2 <= 0) /* subnormal */
        return DECLINE;
    mantissa += mantissa & 1; /* round half up: halfway cases were declined above */
    mantissa >>= 1;
    if (mantissa >= (UINT64_C(1) << 53)) {
        mantissa = UINT64_C(1) << 52;
        power2++;
    }
    if (power2 >= 0x7FF) /* infinite */
        return DECLINE;
    uint64_t bits = (mantissa & ~(UINT64_C(1) << 52)) | ((uint64_t)power2 << 52);
    memcpy(out, &bits, sizeof bits);
    return 0;
}

/* Whether the 8 bytes (little-endian) are all ASCII digits. */
static inline int eight_digits(uint64_t bytes)
{
    return !(((bytes + UINT64_C(0x4646464646464646)) | (bytes - UINT64_C(0x3030303030303030))) & UINT64_C(0x8080808080808080));
}

/* The value of 8 ASCII digits (little-endian bytes), in three multiplications: pairs of
 * digits, then pairs of pairs, then the two halves. */
static inline uint64_t eight_digits_value(uint64_t bytes)
{
    bytes -= UINT64_C(0x3030303030303030);
    bytes = bytes * 10 + (bytes >> 8); /* each even byte: two digits' value */
    uint64_t low = bytes & UINT64_C(0x000000FF000000FF), high = (bytes >> 16) & UINT64_C(0x000000FF000000FF);
    return (low * (100 + (UINT64_C(1000000) << 32)) + high * (1 + (UINT64_C(10000) << 32))) >> 32;
}

/* A JSON number at *p (strict grammar), as orjson reads it; *p moves past it. DECLINE:
 * not a number, an integer of more than 18 digits, or a real CPython cannot convert. */
static int parse_number(const char **p, const char *end, Number *out)
{
    const char *start = *p, *c = *p;
    int negative = 0, digits = 0, truncated = 0;
    uint64_t w = 0;
    int64_t q = 0;
    if (c < end && *c == '-') {
        negative = 1;
        c++;
    }
    if (c >= end || *c < '0' || *c > '9')
        return DECLINE;
    if (*c == '0') {
        c++;
        if (c < end && *c >= '0' && *c <= '9')
            return DECLINE; /* a leading zero */
    } else {
        for (; c < end && *c >= '0' && *c <= '9'; c++) {
            if (digits < 19) {
                w = w * 10 + (uint64_t)(*c - '0');
                digits++;
            } else {
                truncated = 1;
                q++;
            }
        }
    }
    int real = 0;
    if (c < end && *c == '.') {
        real = 1;
        c++;
        if (c >= end || *c < '0' || *c > '9')
            return DECLINE;
        if (w == 0) /* leading zeros of a fraction are not significant */
            for (; c < end && *c == '0'; c++)
                q--;
        uint64_t bytes;
        while (digits <= 11 && end - c >= 8 && (memcpy(&bytes, c, 8), eight_digits(bytes))) {
            w = w * 100000000 + eight_digits_value(bytes);
            digits += 8;
            q -= 8;
            c += 8;
        }
        for (; c < end && *c >= '0' && *c <= '9'; c++) {
            if (digits < 19) {
                w = w * 10 + (uint64_t)(*c - '0');
                digits++;
                q--;
            } else {
                truncated = 1;
            }
        }
    }
    if (c < end && (*c == 'e' || *c == 'E')) {
        real = 1;
        c++;
        int exponent_negative = 0;
        if (c < end && (*c == '+' || *c == '-'))
            exponent_negative = *c++ == '-';
        if (c >= end || *c < '0' || *c > '9')
            return DECLINE;
        int64_t exponent = 0;
        for (; c < end && *c >= '0' && *c <= '9'; c++)
            if (exponent < 100000)
                exponent = exponent * 10 + (*c - '0');
        q += exponent_negative ? -exponent : exponent;
    }
    *p = c;
    if (!real) {
        if (truncated || digits > 18)
            return DECLINE;
        out->kind = INTEGER;
        out->integer = negative ? -(int64_t)w : (int64_t)w; /* "-0" is the int 0, as in Python */
        return 0;
    }
    out->kind = REAL;
    if (truncated || eisel_lemire(w, q, &out->real) < 0) {
        char text[64];
        size_t length = (size_t)(c - start);
        if (length >= sizeof text)
            return DECLINE;
        memcpy(text, start, length);
        text[length] = '\0';
        out->real = PyOS_string_to_double(text, NULL, NULL); /* correctly rounded; +-inf on overflow */
        if (out->real == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return DECLINE;
        }
        return 0;
    }
    if (negative)
        out->real = -out->real;
    return 0;
}

/* -- The message ------------------------------------------------------------------------ */

/* The fields, in app.sansio.chunk_columns' order: number fields first, then scalars. */
enum { OBS, ACTIONS, REWARDS, ACTION_LOGP, ACTION_DIST_INPUTS, NUM_ARRAYS };
#define NUM_FIELDS 13
#define NUM_SCALARS (NUM_FIELDS - NUM_ARRAYS)
static const char *FIELD_NAMES[NUM_FIELDS] = {
    "obs", "actions", "rewards", "action_logp", "action_dist_inputs",
    "agent_id", "module_id", "episode_id", "weights_seq_no", "outcome", "is_terminated", "is_truncated", "evaluation",
};
#define REQUIRED ((1u << OBS) | (1u << ACTIONS) | (1u << REWARDS) | (1u << 10) | (1u << 11))
#define ARRAY_BITS ((1u << NUM_ARRAYS) - 1)
static const int ROW_FIELD[NUM_ARRAYS] = {1, 0, 0, 0, 1}; /* a row of numbers per step */

typedef struct {
    char *data;
    Py_ssize_t used, capacity;
} Buffer;

static int reserve(Buffer *buffer, Py_ssize_t more)
{
    if (buffer->used + more <= buffer->capacity)
        return 0;
    Py_ssize_t capacity = buffer->capacity ? buffer->capacity : 4096;
    while (capacity < buffer->used + more)
        capacity *= 2;
    char *data = PyMem_Realloc(buffer->data, (size_t)capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return FAILED;
    }
    buffer->data = data;
    buffer->capacity = capacity;
    return 0;
}

static int append(Buffer *buffer, const void *data, Py_ssize_t size)
{
    if (reserve(buffer, size) < 0)
        return FAILED;
    memcpy(buffer->data + buffer->used, data, (size_t)size);
    buffer->used += size;
    return 0;
}

/* One number field of all the chunks: its numbers one after the other, each chunk's steps. */
typedef struct {
    Buffer numbers; /* float32, or int64 for Discrete actions */
    Buffer steps;   /* Py_ssize_t per chunk */
    Py_ssize_t width; /* numbers per row; 0: one number per step */
    int integers;
} Column;

typedef struct {
    const char *start, *p, *end;
    Column columns[NUM_ARRAYS];
    unsigned array_fields; /* the number fields of the first chunk: every chunk's */
    Py_ssize_t chunks;
    PyObject *scalars[NUM_SCALARS]; /* a list per scalar field */
    PyObject *defaults;             /* a tuple: each scalar field's default */
} Parser;

static inline void skip_space(Parser *parser)
{
    while (parser->p < parser->end && (*parser->p == ' ' || *parser->p == '\n' || *parser->p == '\r' || *parser->p == '\t'))
        parser->p++;
}

static inline int next(Parser *parser)
{
    skip_space(parser);
    return parser->p < parser->end ? (unsigned char)*parser->p : -1;
}

static inline int take(Parser *parser, char expected)
{
    if (next(parser) != expected)
        return DECLINE;
    parser->p++;
    return 0;
}

/* A string without escapes or control characters: its bytes, between the quotes. */
static int string_span(Parser *parser, const char **start, Py_ssize_t *length)
{
    if (take(parser, '"') < 0)
        return DECLINE;
    const char *c = parser->p;
    while (c < parser->end && *c != '"') {
        if (*c == '\\' || (unsigned char)*c < 0x20)
            return DECLINE;
        c++;
    }
    if (c >= parser->end)
        return DECLINE;
    *start = parser->p;
    *length = c - parser->p;
    parser->p = c + 1;
    return 0;
}

/* Past any JSON value, loosely: orjson reads its span afterwards and refuses what is not JSON. */
static int skip_value(Parser *parser)
{
    int depth = 0;
    skip_space(parser);
    do {
        if (parser->p >= parser->end)
            return DECLINE;
        char c = *parser->p++;
        if (c == '"') {
            while (parser->p < parser->end && *parser->p != '"')
                parser->p += *parser->p == '\\' ? 2 : 1;
            if (parser->p >= parser->end)
                return DECLINE;
            parser->p++;
        } else if (c == '[' || c == '{') {
            depth++;
        } else if (c == ']' || c == '}') {
            if (--depth < 0)
                return DECLINE;
        } else if (depth == 0) { /* a number or a literal: up to what ends it */
            while (parser->p < parser->end && !strchr(",}] \n\r\t", *parser->p))
                parser->p++;
        }
    } while (depth > 0);
    return 0;
}

/* After an item of a list or an object: 0 if a comma follows (more items), 1 if `closing`
 * does (it is past it), DECLINE otherwise. */
static int after_item(Parser *parser, char closing)
{
    int c = next(parser);
    if (c != ',' && c != closing)
        return DECLINE;
    parser->p++;
    return c == closing;
}

static int append_float(Buffer *buffer, const Number *number)
{
    double value = number->kind == INTEGER ? (double)number->integer : number->real;
    float single = (float)value; /* as struct.pack_into("f"): the double rounded to nearest */
    if (!isfinite(value) || !isfinite(single))
        return DECLINE;
    return append(buffer, &single, sizeof single);
}

/* A chunk's number field: a non-empty list of numbers (Discrete actions: integers), or of
 * rows of the field's width; the first chunk sets the kind and the width. */
static int parse_column(Parser *parser, int field)
{
    Column *column = &parser->columns[field];
    int first_chunk = parser->chunks == 0, status;
    if (take(parser, '[') < 0 || next(parser) == ']')
        return DECLINE;
    int rows = next(parser) == '[';
    if (first_chunk) {
        if (field != ACTIONS && rows != ROW_FIELD[field])
            return DECLINE; /* rows where pack wants numbers, or the other way round */
        column->integers = field == ACTIONS && !rows;
    } else if (rows != (column->width > 0)) {
        return DECLINE;
    }
    Py_ssize_t steps = 0;
    for (;;) {
        Number number;
        if (rows) {
            Py_ssize_t width = 0;
            if (take(parser, '[') < 0)
                return DECLINE;
            for (;;) {
                skip_space(parser);
                if (parse_number(&parser->p, parser->end, &number) < 0)
                    return DECLINE;
                /* Box actions start with a real (pack takes rows of integers as MultiDiscrete's, which the columns do not take). */
                if (field == ACTIONS && first_chunk && steps == 0 && width == 0 && number.kind != REAL)
                    return DECLINE;
                if ((status = append_float(&column->numbers, &number)) < 0)
                    return status;
                width++;
                if ((status = after_item(parser, ']')) != 0) {
                    if (status < 0)
                        return DECLINE;
                    break;
                }
            }
            if (first_chunk && steps == 0)
                column->width = width;
            else if (width != column->width)
                return DECLINE;
        } else {
            skip_space(parser);
            if (parse_number(&parser->p, parser->end, &number) < 0)
                return DECLINE;
            if (column->integers) {
                if (number.kind != INTEGER)
                    return DECLINE;
                if (append(&column->numbers, &number.integer, sizeof number.integer) < 0)
                    return FAILED;
            } else if ((status = append_float(&column->numbers, &number)) < 0) {
                return status;
            }
        }
        steps++;
        if ((status = after_item(parser, ']')) != 0) {
            if (status < 0)
                return DECLINE;
            break;
        }
    }
    return append(&column->steps, &steps, sizeof steps);
}

/* A chunk's scalar field: a string, an integer, true, false or null (anything else: pack's
 * checks or EpisodeChunk's would refuse it, or it needs orjson). A new reference; a string
 * equal to the previous chunk's value of the field is that object (a scene's episode id:
 * pickled back once, not once per chunk). */
static int parse_scalar(Parser *parser, PyObject *previous, PyObject **out)
{
    int c = next(parser);
    if (c == '"') {
        const char *start, *before;
        Py_ssize_t length, before_length;
        if (string_span(parser, &start, &length) < 0)
            return DECLINE;
        if (previous != NULL && PyUnicode_CheckExact(previous) && (before = PyUnicode_AsUTF8AndSize(previous, &before_length)) != NULL
            && before_length == length && memcmp(before, start, (size_t)length) == 0) {
            *out = Py_NewRef(previous);
            return 0;
        }
        if ((*out = PyUnicode_DecodeUTF8(start, length, NULL)) == NULL) {
            PyErr_Clear(); /* not UTF-8: orjson words the error */
            return DECLINE;
        }
        return 0;
    }
    static const struct { const char *text; PyObject *value; } literals[] = {{"true", Py_True}, {"false", Py_False}, {"null", Py_None}};
    for (size_t i = 0; i < sizeof literals / sizeof literals[0]; i++) {
        size_t length = strlen(literals[i].text);
        if ((size_t)(parser->end - parser->p) >= length && memcmp(parser->p, literals[i].text, length) == 0) {
            parser->p += length;
            *out = Py_NewRef(literals[i].value);
            return 0;
        }
    }
    Number number;
    if (parse_number(&parser->p, parser->end, &number) < 0 || number.kind != INTEGER)
        return DECLINE;
    return (*out = PyLong_FromLongLong(number.integer)) == NULL ? FAILED : 0;
}

/* The value of scalar field `i` in the chunk before (borrowed), or NULL. */
static PyObject *previous_value(Parser *parser, int i)
{
    Py_ssize_t count = PyList_GET_SIZE(parser->scalars[i]);
    return count ? PyList_GET_ITEM(parser->scalars[i], count - 1) : NULL;
}

static int field_of(const char *name, Py_ssize_t length)
{
    for (int i = 0; i < NUM_FIELDS; i++)
        if ((Py_ssize_t)strlen(FIELD_NAMES[i]) == length && memcmp(FIELD_NAMES[i], name, (size_t)length) == 0)
            return i;
    return DECLINE;
}

/* One chunk: an object of known fields, each at most once, the required ones, the same
 * number fields as the first chunk. Its scalars (or their defaults) join their lists. */
static int parse_chunk(Parser *parser)
{
    PyObject *values[NUM_SCALARS] = {NULL};
    unsigned fields = 0;
    int status = DECLINE;
    if (take(parser, '{') < 0)
        goto done;
    for (;;) {
        const char *name;
        Py_ssize_t length;
        int field;
        if (string_span(parser, &name, &length) < 0 || (field = field_of(name, length)) < 0 || (fields & (1u << field))
            || take(parser, ':') < 0)
            goto decline;
        fields |= 1u << field;
        if (field < NUM_ARRAYS)
            status = parse_column(parser, field);
        else
            status = parse_scalar(parser, previous_value(parser, field - NUM_ARRAYS), &values[field - NUM_ARRAYS]);
        if (status < 0)
            goto done;
        if ((status = after_item(parser, '}')) != 0) {
            if (status < 0)
                goto decline;
            break;
        }
    }
    if ((fields & REQUIRED) != REQUIRED || (parser->chunks > 0 && (fields & ARRAY_BITS) != parser->array_fields))
        goto decline;
    parser->array_fields = fields & ARRAY_BITS;
    for (int i = 0; i < NUM_SCALARS; i++) {
        PyObject *value = values[i] ? values[i] : PyTuple_GET_ITEM(parser->defaults, i);
        if (PyList_Append(parser->scalars[i], value) < 0) {
            status = FAILED;
            goto done;
        }
    }
    parser->chunks++;
    status = 0;
    goto done;
decline:
    status = DECLINE;
done:
    for (int i = 0; i < NUM_SCALARS; i++)
        Py_XDECREF(values[i]);
    return status;
}

/* Another field of the message (each at most once): its value's span in the body. */
static int add_span(Parser *parser, PyObject *spans, const char *name, Py_ssize_t length)
{
    PyObject *key = PyUnicode_DecodeUTF8(name, length, NULL), *span = NULL;
    if (key == NULL) {
        PyErr_Clear(); /* not UTF-8: orjson words the error */
        return DECLINE;
    }
    int status = PyDict_Contains(spans, key);
    if (status == 0) {
        skip_space(parser);
        Py_ssize_t start = parser->p - parser->start;
        if ((status = skip_value(parser)) == 0) {
            span = Py_BuildValue("(nn)", start, (Py_ssize_t)(parser->p - parser->start));
            status = span == NULL || PyDict_SetItem(spans, key, span) < 0 ? FAILED : 0;
        }
    } else {
        status = status < 0 ? FAILED : DECLINE; /* a field twice: orjson keeps the last, this path declines */
    }
    Py_DECREF(key);
    Py_XDECREF(span);
    return status;
}

/* The top-level object: "episodes" parsed, every other field's value as a byte span. */
static int parse_message(Parser *parser, PyObject *spans)
{
    int status, episodes = 0;
    if (take(parser, '{') < 0)
        return DECLINE;
    for (;;) {
        const char *name;
        Py_ssize_t length;
        if (string_span(parser, &name, &length) < 0 || take(parser, ':') < 0)
            return DECLINE;
        if (length == 8 && memcmp(name, "episodes", 8) == 0) {
            if (episodes++ || take(parser, '[') < 0)
                return DECLINE;
            for (;;) {
                if ((status = parse_chunk(parser)) < 0)
                    return status;
                if ((status = after_item(parser, ']')) != 0) {
                    if (status < 0)
                        return DECLINE;
                    break;
                }
            }
        } else {
            if ((status = add_span(parser, spans, name, length)) < 0)
                return status;
        }
        if ((status = after_item(parser, '}')) != 0) {
            if (status < 0)
                return DECLINE;
            break;
        }
    }
    skip_space(parser);
    return parser->p == parser->end && episodes ? 0 : DECLINE;
}

/* parse(body, defaults) -> (spans, arrays, scalars) or None.
 *
 * body: an EPISODES message's JSON; defaults: each scalar field's default, in FIELDS'
 * order (after the number fields). spans: {field: (start, end)} of the message's other
 * fields' values in the body; arrays: {name: (bytearray, "f" or "q",
 * row width or 0, [steps per chunk])} for the chunks' number fields; scalars: {name: [a
 * value per chunk]}, the default where a chunk lacks the field. None: the chunks are
 * fewer than two, of several shapes, or anything this path does not take. */
static PyObject *parse(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer body;
    PyObject *defaults, *result = NULL, *spans = NULL, *arrays = NULL, *scalars = NULL;
    if (!PyArg_ParseTuple(args, "y*O!", &body, &PyTuple_Type, &defaults))
        return NULL;
    Parser parser = {.start = body.buf, .p = body.buf, .end = (const char *)body.buf + body.len, .defaults = defaults};
    if (PyTuple_GET_SIZE(defaults) != NUM_SCALARS) {
        PyErr_SetString(PyExc_ValueError, "parse: a default per scalar field");
        goto done;
    }
    for (int i = 0; i < NUM_SCALARS; i++)
        if ((parser.scalars[i] = PyList_New(0)) == NULL)
            goto done;
    if ((spans = PyDict_New()) == NULL)
        goto done;
    int status = parse_message(&parser, spans);
    if (status == FAILED)
        goto done;
    if (status == DECLINE || parser.chunks < 2) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if ((arrays = PyDict_New()) == NULL || (scalars = PyDict_New()) == NULL)
        goto done;
    for (int f = 0; f < NUM_ARRAYS; f++) {
        if (!(parser.array_fields & (1u << f)))
            continue;
        Column *column = &parser.columns[f];
        PyObject *steps = PyList_New(parser.chunks);
        if (steps == NULL)
            goto done;
        for (Py_ssize_t c = 0; c < parser.chunks; c++) {
            PyObject *count = PyLong_FromSsize_t(((Py_ssize_t *)column->steps.data)[c]);
            if (count == NULL) {
                Py_DECREF(steps);
                goto done;
            }
            PyList_SET_ITEM(steps, c, count);
        }
        PyObject *entry = Py_BuildValue("(NsnN)", PyByteArray_FromStringAndSize(column->numbers.data, column->numbers.used),
                                        column->integers ? "q" : "f", column->width, steps);
        if (entry == NULL || PyDict_SetItemString(arrays, FIELD_NAMES[f], entry) < 0) {
            Py_XDECREF(entry);
            goto done;
        }
        Py_DECREF(entry);
    }
    for (int i = 0; i < NUM_SCALARS; i++)
        if (PyDict_SetItemString(scalars, FIELD_NAMES[NUM_ARRAYS + i], parser.scalars[i]) < 0)
            goto done;
    result = Py_BuildValue("(OOO)", spans, arrays, scalars);
done:
    for (int f = 0; f < NUM_ARRAYS; f++) {
        PyMem_Free(parser.columns[f].numbers.data);
        PyMem_Free(parser.columns[f].steps.data);
    }
    for (int i = 0; i < NUM_SCALARS; i++)
        Py_XDECREF(parser.scalars[i]);
    Py_XDECREF(spans);
    Py_XDECREF(arrays);
    Py_XDECREF(scalars);
    PyBuffer_Release(&body);
    return result;
}

/* number(text) -> int, float or None: a JSON number as parse reads it (for the tests). */
static PyObject *number(PyObject *module, PyObject *args)
{
    (void)module;
    const char *text;
    Py_ssize_t length;
    if (!PyArg_ParseTuple(args, "y#", &text, &length))
        return NULL;
    const char *p = text;
    Number value;
    if (parse_number(&p, text + length, &value) < 0 || p != text + length)
        Py_RETURN_NONE;
    return value.kind == INTEGER ? PyLong_FromLongLong(value.integer) : PyFloat_FromDouble(value.real);
}

static PyMethodDef methods[] = {
    {"parse", parse, METH_VARARGS, "An EPISODES message's chunks of one shape as columns, or None (the Python path decides)."},
    {"number", number, METH_VARARGS, "A JSON number as parse reads it, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "app.sansio._columns", "EPISODES bodies parsed into columns at C speed (app.sansio.chunk_columns).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__columns(void)
{
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
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
    if (PyModule_AddObject(module, "FIELDS", names) < 0) { /* the fields' order, as parse reads its defaults */
        Py_DECREF(names);
        goto fail;
    }
    return module;
fail:
    Py_DECREF(module);
    return NULL;
}
