"""Lists of numbers to numpy arrays, and the checks on them that the message models make.

The numbers of a message (app.schemas) become arrays here: finite floats, integer actions
in their range, image values 0..255, action masks that leave each sub-action a choice.
Errors are ValueErrors whose message names the field (pydantic reports them as such).

Episode chunks are most of what the gateway reads, and turning their decoded lists
into arrays is most of the cost of validating them. `np.asarray` on a list of lists
spends most of its time discovering the nesting and the dtype; the fast paths below
have `struct` write the numbers straight into the array's memory instead, three times
faster, converting them as numpy does (C casts). They decline (None) whatever numpy's
general path might treat otherwise; that path, with its results and error messages,
stays the reference, and a declined list simply takes it:
- struct refuses strings, nulls, lists, dicts, bytes: numpy would refuse them too;
- struct takes booleans as 0 and 1, as numpy does in a list that also holds numbers,
  but numpy refuses a list of booleans only: a list whose first number is a boolean
  is declined;
- magnitudes of 2**53 and more (where ints round differently), NaN and infinities
  (including float32 overflow) are declined.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from app.spaces.models import (
    IMAGE_MAX,
    BoxSpace,
    DictSpace,
    DiscreteSpace,
    MultiDiscreteSpace,
    dist_inputs_layout,
    num_logits,
    observation_parts,
    sub_action_sizes,
)

if TYPE_CHECKING:
    from app.settings.policies import Module

EXACT_LIMIT_SQUARED = 2.0**106  # magnitudes of 2**53 and more are declined
FLOAT32_MAX = float(np.finfo(np.float32).max)  # beyond it a chunk's float32 fields hold inf: refused
_FLOAT_CODES = {np.dtype(np.float32): "f", np.dtype(np.float64): "d"}
_PACK_ERRORS = (struct.error, TypeError, ValueError, OverflowError)


def fast_floats(value: list, dtype: type, row_size: int | None, from_json: bool = False) -> np.ndarray | None:
    """A finite float array from a list of numbers, or (with `row_size`) of lists of
    `row_size` numbers; None where the general path must decide.

    `from_json` skips checking that the rows are lists: in decoded JSON the only other
    rows with a length are strings and objects, whose items (characters, keys) struct
    refuses; msgpack also has bytes and maps with number keys, which it would take.
    """
    rows = len(value)
    if not rows or row_size == 0:
        return None
    code = _FLOAT_CODES[np.dtype(dtype)]
    try:
        if row_size is None:
            flat = value
            array = np.empty(rows, dtype)
        else:
            if list(map(len, value)) != [row_size] * rows:
                return None
            if not from_json and list(map(type, value)) != [list] * rows:
                return None
            flat = []
            deque(map(flat.extend, value), 0)  # 2.5x faster than itertools.chain
            array = np.empty((rows, row_size), dtype)
        struct.pack_into(f"{len(flat)}{code}", array, 0, *flat)
    except _PACK_ERRORS:
        return None
    # vdot is one BLAS call: NaN, inf, float32 overflow or any |x| >= 2**53 make it fail
    # the test (so may a few values just below, which merely take the general path).
    if type(flat[0]) is bool or not np.vdot(array, array) < EXACT_LIMIT_SQUARED:
        return None
    return array


def fast_indices(value: list | np.ndarray, n: int) -> np.ndarray | None:
    """An int64 array from a list (or int64 array) of ints in 0..n-1; None where the
    general path must decide (floats, booleans first, ints out of range: it words the
    error)."""
    rows = len(value)
    if not rows:
        return None
    if type(value) is np.ndarray:
        if value.dtype != np.int64 or value.ndim != 1:
            return None
        array = value
    else:
        if type(value[0]) is bool:
            return None
        array = np.empty(rows, np.int64)
        try:
            struct.pack_into(f"{rows}q", array, 0, *value)  # refuses floats and ints beyond int64
        except _PACK_ERRORS:
            return None
    if array.view(np.uint64).max() >= n:  # negatives wrap around to huge
        return None
    return array


def first_row_size(value: Any) -> int | None:
    """The length of the first row of a list of lists, as the fast path's guess."""
    return len(value[0]) if type(value) is list and value and type(value[0]) is list else None


def as_array(
    value: Any, dtype: type, what: str, row_size: int | None = None, from_json: bool = False
) -> np.ndarray:
    """Turn nested lists into a numpy array, or explain why they are not numbers.

    `row_size` announces rows of that many numbers and `from_json` where the data come
    from, for the fast path only: the result is the same without them (the caller
    checks the shape).
    """
    if type(value) is list and (array := fast_floats(value, dtype, row_size, from_json)) is not None:
        return array
    if isinstance(value, np.ndarray):  # e.g. from app.sansio.json_arrays
        array = value
    elif not isinstance(value, (list, tuple)):
        raise ValueError(f"{what} must be a list, got {type(value).__name__}")
    else:
        try:
            array = np.asarray(value)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{what} must be a rectangular list of numbers ({exc})") from None
    kind = array.dtype.kind
    if kind not in "iuf" and array.size:  # strings, bools, nulls, objects
        raise ValueError(f"{what} must be a rectangular list of numbers (found {_kind_name(array)})")
    if kind in "iu" or (kind == "f" and np.vdot(array, array) < EXACT_LIMIT_SQUARED):
        return array.astype(dtype, copy=False)  # moderate numbers: finite, and no overflow
    with np.errstate(over="ignore"):  # a float32 overflow becomes inf, refused just below
        array = array.astype(dtype, copy=False)
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise ValueError(f"{what} must be finite (found NaN or Infinity)")
    return array


def _kind_name(array: np.ndarray) -> str:
    if array.dtype.kind == "O":
        return "null or a nested object"
    return {"U": "strings", "b": "booleans"}.get(array.dtype.kind, str(array.dtype))


def check_image_values(obs: np.ndarray, space: BoxSpace | DictSpace, what: str, of: str = "") -> None:
    """The image parts of observations [N, *shape] hold integers 0..255 (uint8 values)."""
    for part in observation_parts(space):
        if not part.space.is_image:
            continue
        values = obs.reshape(len(obs), -1)[:, part.offset : part.end]
        bad = (values < 0) | (values > IMAGE_MAX) | (values != np.floor(values))
        if bad.any():
            row, column = (int(x) for x in np.argwhere(bad)[0])
            name = "the image" if part.key is None else f"image {part.key!r}"
            raise ValueError(
                f"{what}[{row}]: {name} must hold integers 0..{IMAGE_MAX} (uint8){of}, got {values[row, column]:g} "
                f"at flat index {part.offset + column}"
            )


def action_mask_array(value: Any, what: str) -> np.ndarray:
    """Action masks as float32 0/1 [T, k], from lists of 0 and 1 or of true and false."""
    if type(value) is list and all(type(row) is list and all(type(x) is bool for x in row) for row in value):
        value = [[float(x) for x in row] for row in value]
    array = as_array(value, np.float32, what, first_row_size(value))
    if array.ndim != 2:
        raise ValueError(f"{what} must be a list of masks, each a list of 0/1 (or false/true) per logit")
    if array.size and not np.isin(array, (0.0, 1.0)).all():
        raise ValueError(f"{what} must hold 0/1 (or false/true) values only")
    return array


def mask_allows(mask: np.ndarray, actions: np.ndarray, space: DiscreteSpace | MultiDiscreteSpace) -> np.ndarray:
    """Per step, whether the mask [T, k] allows the action taken (ints [T] or [T, len(nvec)])."""
    nvec = sub_action_sizes(space)
    columns = actions.reshape(len(actions), -1) + np.concatenate([[0], np.cumsum(nvec)[:-1]])
    return np.take_along_axis(mask, columns, axis=1).all(axis=1) > 0


def check_action_mask(mask: np.ndarray, module: Module, what: str, per_step: bool = True) -> np.ndarray:
    """The mask [T, k] fits the module's logits and leaves each sub-action a choice; errors
    name the step (`what`[t]) when `per_step`, else `what` alone (one request's mask)."""
    if not module.action_masking:
        raise ValueError(f"{what} given, but module {module.module_id!r} takes no action masks (set action_masking)")
    space = module.action_space
    if mask.shape[1] != (width := num_logits(space)):
        raise ValueError(f"each {what} must hold {width} values, one per logit ({dist_inputs_layout(space)}), got {mask.shape[1]}")
    nvec = sub_action_sizes(space)
    for i, part in enumerate(np.split(mask, np.cumsum(nvec)[:-1], axis=1)):
        if not part.any(axis=1).all():
            step = int(np.argmin(part.any(axis=1)))
            where = "" if len(nvec) == 1 else f" for sub-action {i}"
            name = f"{what} at step {step}" if per_step else what
            raise ValueError(f"{name} allows no action{where}: at least one must be allowed")
    return mask


def multi_discrete_actions(value: Any, space: MultiDiscreteSpace, of: str) -> np.ndarray:
    """Actions [T, len(nvec)] of ints, each in its sub-action's range."""
    expected = f"actions must be a list of T lists of {len(space.nvec)} integers for MultiDiscrete({list(space.nvec)}){of}"
    try:
        array = as_array(value, np.float64, "actions", first_row_size(value))
    except ValueError as exc:
        raise ValueError(f"{expected} ({exc})") from None
    if array.ndim != 2 or array.shape[1] != len(space.nvec) or not np.all(array == np.floor(array)):
        raise ValueError(expected)
    bad = (array < 0) | (array >= np.asarray(space.nvec))
    if bad.any():
        step, i = (int(x) for x in np.argwhere(bad)[0])
        raise ValueError(f"actions[{step}][{i}] must lie in 0..{space.nvec[i] - 1}{of}, got {array[step, i]:g}")
    return array.astype(np.int64)
