"""A perfect tic-tac-toe player for PettingZoo's `tictactoe_v3`, to evaluate a self-play
policy against: minimax over the whole game tree, drawing at random among the moves
whose value is the best (so that it plays every optimal line, not one).

The observation is the env's board [3, 3, 2] (as the PettingZoo client sends it; its 18
floats in C order are read the same): channel 0 the mover's marks, channel 1 the other
player's; cell (r, c) is action 3r + c.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


def _won(cells: tuple[int, ...], player: int) -> bool:
    return any(all(cells[i] == player for i in line) for line in LINES)


def played(cells: tuple[int, ...], move: int) -> tuple[int, ...]:
    """The board after the mover plays `move`, as the next mover sees it (the marks swapped:
    1 its own, 2 the player who just moved)."""
    return tuple((3 - cell) if cell else 0 for cell in cells[:move] + (1,) + cells[move + 1 :])


@functools.cache
def move_values(cells: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """Each legal move's value for the mover (1 wins, 0 draws, -1 loses with best play on
    both sides), for `cells`: 9 of 0 (empty), 1 (the mover's), 2 (the other player's)."""
    values = []
    for move in (i for i, cell in enumerate(cells) if cell == 0):
        after = played(cells, move)
        if _won(after, 2):
            values.append((move, 1))
        elif 0 not in after:
            values.append((move, 0))
        else:  # the other player moves next: its best is our worst
            values.append((move, -max(value for _, value in move_values(after))))
    return tuple(values)


def minimax_player(obs: Any, mask: Any = None, *, rng: np.random.Generator) -> int:
    """A best move for the mover (wins when it can, else draws), at random among the best."""
    board = np.asarray(obs, dtype=np.float32).reshape(9, 2)
    cells = tuple(int(1 if mine else 2 if theirs else 0) for mine, theirs in board)
    values = move_values(cells)
    best = max(value for _, value in values)
    return int(rng.choice([move for move, value in values if value == best]))


def observation(cells: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The mover's observation (the board [3, 3, 2], as the PettingZoo client sends it) and legal-move mask of `cells`."""
    board = np.array([[cell == 1, cell == 2] for cell in cells], dtype=np.float32).reshape(3, 3, 2)
    return board, np.array([cell == 0 for cell in cells], dtype=np.int8)


def blunders(player: Any, *, opponent_moves: str = "best") -> dict[str, dict[str, int]]:
    """Where `player` ((obs, mask) -> move, deterministic) gives away value, in every game it
    can reach moving first and moving second: the other player plays every one of its best
    moves (`opponent_moves="best"`: the lines a minimax player plays) or every legal move
    ("all"). Per seat ("first", "second"): positions the player moved in, moves that lowered
    the game's value for it, and those that turned a draw or a win into a loss (with best play
    after: a minimax opponent wins from there).
    """
    counts = {seat: {"positions": 0, "blunders": 0, "losing": 0} for seat in ("first", "second")}
    seen: set[tuple[tuple[int, ...], bool]] = set()

    def visit(cells: tuple[int, ...], ours: bool, seat: str) -> None:
        if (cells, ours) in seen or _won(cells, 2) or 0 not in cells:  # the mover's opponent has just won, or a full board
            return
        seen.add((cells, ours))
        values = dict(move_values(cells))
        best = max(values.values())
        if ours:
            move = int(player(*observation(cells)))
            counts[seat]["positions"] += 1
            counts[seat]["blunders"] += values[move] < best
            counts[seat]["losing"] += values[move] < 0 <= best
            moves = [move]
        else:
            moves = [m for m, value in values.items() if opponent_moves == "all" or value == best]
        for move in moves:
            visit(played(cells, move), not ours, seat)

    empty = (0,) * 9
    visit(empty, True, "first")
    seen.clear()
    visit(empty, False, "second")
    return counts


def most_wins_against_random(seat: str, *, never_losing: bool = False) -> float:
    """The largest share of games any player wins against a uniformly random legal player,
    moving first or second (`seat`), exactly, over the whole game tree; `never_losing`: among
    players that never lose to perfect play (only moves that keep the game's value). A
    target for the win rate against random play is only reachable up to this."""
    return _win_chance((0,) * 9, seat == "first", never_losing)


@functools.cache
def _win_chance(cells: tuple[int, ...], ours: bool, never_losing: bool) -> float:
    """The chance we win from `cells` (the mover's view: 1 the mover's marks), we to move
    (`ours`) with our best choice, or the other player at random."""
    if _won(cells, 2):  # the player who just moved has won
        return 0.0 if ours else 1.0
    if 0 not in cells:
        return 0.0
    values = dict(move_values(cells))
    best = max(values.values())
    moves = [m for m, value in values.items() if value == best] if ours and never_losing else list(values)
    chances = [_win_chance(played(cells, m), not ours, never_losing) for m in moves]
    return max(chances) if ours else sum(chances) / len(chances)
