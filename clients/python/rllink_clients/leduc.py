"""Fixed Leduc hold'em players for PettingZoo's `leduc_holdem_v4`, to evaluate a self-play
policy against. Its actions: 0 call, 1 raise, 2 fold, 3 check; the mask says which are legal.
"""

from __future__ import annotations

from typing import Any

import numpy as np

CALL, RAISE, FOLD, CHECK = 0, 1, 2, 3


def _first_legal(mask: Any, preferences: tuple[int, ...]) -> int:
    legal = np.asarray(mask)
    return next(action for action in preferences if legal[action])


def always_raise_player(obs: Any, mask: Any, *, rng: np.random.Generator) -> int:
    """Raises whenever it may, else calls (or checks): never folds."""
    return _first_legal(mask, (RAISE, CALL, CHECK))


def always_call_player(obs: Any, mask: Any, *, rng: np.random.Generator) -> int:
    """Calls (or checks) whatever it holds: never raises, never folds."""
    return _first_legal(mask, (CHECK, CALL))
