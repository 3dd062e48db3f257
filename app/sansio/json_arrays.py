"""JSON objects whose number lists come out as numpy arrays, parsed by simdjson.

Episode chunks are most of the bytes the gateway reads: thousands of numbers per
message. orjson makes each one a Python float, which validation then copies into an
array and the collector frees; simdjson writes them into the array's buffer instead
(bench/ingest.py measures what that saves).

`loads_with_arrays(body, keys)` returns what `orjson.loads(body)` returns, except that
a non-empty rectangular list of numbers that is the value of one of `keys` is a numpy
array equal to `np.asarray` of it: int64 when every number is an integer, float64
otherwise. What it cannot decide exactly it declines with None, and the caller takes
orjson's path, whose results and error messages stay the reference: invalid JSON, a
document that is not an object, a byte-order mark (simdjson skips it, orjson refuses
it), integers beyond 64 bits, objects with many keys or a key twice, a list under one
of `keys` that starts like numbers but is not a rectangular list of them, and any '['
that is not a list this module accounted for (inside a string, or a list in place of
a number: `[1, [2]]` flattens like `[1, 2]`).

pysimdjson is optional: without it, `loads_with_arrays` declines every body (orjson
decodes them all, with the same results, more slowly), and says so once in the log.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast, overload

import numpy as np

# A flag, not `simdjson = None`: the module's name then keeps its type for mypy, and every
# use of it comes after a check of the flag.
try:
    import simdjson
except ImportError:  # a platform without a pysimdjson wheel: orjson decodes everything
    _HAVE_SIMDJSON = False
else:
    _HAVE_SIMDJSON = True

log = logging.getLogger("app.sansio.json_arrays")

_BYTE_ORDER_MARK = b"\xef\xbb\xbf"
_OPEN_BRACKET = ord("[")
_MAX_KEYS = 64  # objects with more keys (or a key twice) take orjson's path
_DTYPES = {"i": np.dtype(np.int64), "d": np.dtype(np.float64)}
# Bodies up to this size are parsed by one parser kept per thread, which keeps about
# 3.5x the largest of them; a fresh parser's buffers cost ~40 us of page faults a body.
REUSED_PARSER_MAX_BODY_BYTES = 1 << 20
# What the conversion makes of a JSON value: orjson's types, with arrays for number lists.
Decoded: TypeAlias = "dict[str, Decoded] | list[Decoded] | np.ndarray | int | float | str | bool | None"


class _Declined(Exception):
    """Raised inside the conversion when only orjson's path can say what the body is."""


def loads_with_arrays(body: bytes, keys: frozenset[str]) -> dict[str, Any] | None:
    """The decoded JSON object, the number lists under `keys` as arrays; or None."""
    if not _HAVE_SIMDJSON:
        _say_simdjson_is_missing()
        return None
    if body.startswith(_BYTE_ORDER_MARK):
        return None
    try:
        document = _parser_for(body).parse(body)
    except (ValueError, RuntimeError):  # invalid JSON, big integers, bad strings
        return None
    if type(document) is not simdjson.Object:
        return None
    converter = _Converter(keys)
    try:
        data = converter.convert(document)
    except (_Declined, RecursionError):
        return None
    if np.count_nonzero(np.frombuffer(body, np.uint8) == _OPEN_BRACKET) != converter.arrays:  # 4x bytes.count
        return None
    return data


_missing_said = False


def _say_simdjson_is_missing() -> None:
    global _missing_said
    if not _missing_said:
        _missing_said = True
        log.warning("pysimdjson cannot be imported: large JSON bodies are decoded with orjson (slower ingest)")


class _KeptParser(threading.local):
    """One parser per thread. (A parser refuses to parse while a document of it lives;
    none outlives `loads_with_arrays`.)"""

    parser: simdjson.Parser  # unset without pysimdjson, where nothing parses

    def __init__(self) -> None:
        if _HAVE_SIMDJSON:
            self.parser = simdjson.Parser()


_kept = _KeptParser()


def _parser_for(body: bytes) -> simdjson.Parser:
    """This thread's kept parser, or a fresh one for a large body."""
    return _kept.parser if len(body) <= REUSED_PARSER_MAX_BODY_BYTES else simdjson.Parser()


class _Converter:
    """Turns simdjson's document into dicts, lists and arrays, counting the lists."""

    def __init__(self, keys: frozenset[str]) -> None:
        self.keys = keys  # whose number lists become arrays
        self.arrays = 0  # JSON lists converted: checked against the '[' in the body

    @overload
    def convert(self, node: simdjson.Object, numbers_wanted: bool = False) -> dict[str, Decoded]: ...
    @overload
    def convert(self, node: simdjson.SimValue, numbers_wanted: bool = False) -> Decoded: ...

    def convert(self, node: simdjson.SimValue, numbers_wanted: bool = False) -> Decoded:
        """The node as orjson would decode it, its number lists under `keys` as arrays."""
        # type(node) twice, not once in a variable: as quick (CPython specializes type(x)),
        # and mypy narrows `node` only on the call itself.
        if type(node) is simdjson.Object:
            # Its items() and values() would convert whole subtrees to Python objects, and
            # node[key] finds a key's first value (orjson keeps the last), in a linear scan.
            # A key holding NUL is looked up only up to it (it would find the key "" or
            # another prefix's value), so such objects are left to orjson.
            keys = list(node.keys())
            if len(keys) > _MAX_KEYS or len(set(keys)) != len(keys) or any("\x00" in key for key in keys):
                raise _Declined
            return {key: self.convert(node[key], key in self.keys) for key in keys}
        if type(node) is simdjson.Array:
            if numbers_wanted and (array := self._numbers(node)) is not None:
                return array
            self.arrays += 1
            return [self.convert(item) for item in node]
        # A number, string, boolean or null: the parser makes no subclass of Object or Array.
        # (Said to mypy alone: cast() would cost a call per value, 2% of a body of short chunks.)
        if TYPE_CHECKING:
            assert not isinstance(node, (simdjson.Object, simdjson.Array))
        return node

    def _numbers(self, node: simdjson.Array) -> np.ndarray | None:
        """The array of a list whose first item (or first item's first item...) is a
        number; None for other lists. A list that starts like numbers but is not a
        rectangular list of them is declined: orjson's path says what it is."""
        shape: list[int] = []
        first = node
        while type(first) is simdjson.Array:
            if not len(first):
                if shape:  # [[], ...]
                    raise _Declined
                return None
            shape.append(len(first))
            first = first[0]
        # bool is a type of its own: lists starting with one stay lists. (The ignores: simdjson's
        # stub makes first[0] an Array, where it is any item.)
        codes: tuple[Literal["i", "d"], ...]  # as_buffer's item types
        if type(first) is int:  # type: ignore[comparison-overlap]
            codes = ("i", "d")  # int64, or float64 if a float is among the ints
        elif type(first) is float:  # type: ignore[comparison-overlap]
            codes = ("d",)
        else:
            return None
        if len(shape) > 1 and not _rows_have_lengths(node, shape):
            raise _Declined
        for code in codes:
            try:
                buffer = node.as_buffer(of_type=code)
                break
            except TypeError:  # an item of another type: a float among ints, or not a number
                continue
            except ValueError:  # an integer beyond int64, which numpy would make uint64
                raise _Declined from None
        else:
            raise _Declined
        array = np.frombuffer(buffer, _DTYPES[code])
        if array.size != math.prod(shape):
            raise _Declined  # an array in place of a number, or a row of other rows
        # The rows checked above are arrays; the '[' count of the body says there are no
        # others (`[1, [2]]` flattens like `[1, 2]`).
        lists = rows = 1
        for size in shape[:-1]:
            rows *= size
            lists += rows
        self.arrays += lists
        return array.reshape(shape) if len(shape) > 1 else array


def _rows_have_lengths(node: simdjson.Array, shape: list[int]) -> bool:
    """Every row of `node`, at every depth but the last, is a list of shape[depth] items."""
    # Its items read as the rows they must be: a number among them has no len() (TypeError);
    # a string or object of a row's length fails as_buffer() or the size check after.
    rows = cast("Sequence[simdjson.Array]", node)
    try:
        lengths = list(map(len, rows))
    except TypeError:
        return False
    if lengths != [shape[1]] * shape[0]:
        return False
    return len(shape) == 2 or all(_rows_have_lengths(row, shape[1:]) for row in rows)
