"""Connect Four players for PettingZoo's `connect_four_v3`, to evaluate against or to put in
a self-play league as a scripted reference (`--scripted lookahead=rllink_clients.connect_four:lookahead_player`).

The observation is the env's board [6, 7, 2] (as the PettingZoo client sends it; its 84
floats in C order are read the same): channel 0 the mover's pieces, channel 1 the other
player's; row 0 is the top.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ROWS, COLUMNS = 6, 7
LINES = ((0, 1), (1, 0), (1, 1), (1, -1))  # the four directions of a line: row, column steps
LINE_KINDS = ("horizontal", "vertical", "diagonal", "diagonal")  # each direction's name in `tactics`' counts
CENTRE_WEIGHTS = np.array([1.0, 2.0, 3.0, 4.0, 3.0, 2.0, 1.0])  # a column's weight in lookahead_centre_player's draw


def landing_rows(board: np.ndarray) -> list[int]:
    """Per column, the row a piece dropped into it lands in (-1: the column is full), for `board` [6, 7, 2]."""
    return (ROWS - 1 - board.any(axis=2).sum(axis=0)).tolist()


def wins_with(pieces: list[list[float]], row: int, column: int, lines: tuple[tuple[int, int], ...] = LINES) -> bool:
    """Whether a piece at (row, column) completes four of `pieces` (6 rows of 7) in a line
    along one of `lines` (row, column steps; all four directions unless given)."""
    for dr, dc in lines:
        count = 1
        for sign in (1, -1):
            r, c = row + sign * dr, column + sign * dc
            while 0 <= r < ROWS and 0 <= c < COLUMNS and pieces[r][c]:
                count, r, c = count + 1, r + sign * dr, c + sign * dc
        if count >= 4:
            return True
    return False


def completed_lines(pieces: list[list[float]], row: int, column: int) -> set[str]:
    """The kinds (LINE_KINDS) of the lines of four of `pieces` that a piece at (row, column) completes."""
    return {kind for line, kind in zip(LINES, LINE_KINDS) if wins_with(pieces, row, column, (line,))}


def lookahead_player(obs: Any, mask: Any, *, rng: np.random.Generator) -> int:
    """One-step lookahead: win now if a legal move does; else block a column where the other
    player would win next; else a uniformly random legal move."""
    legal = np.flatnonzero(np.asarray(mask))
    forced = _winning_or_blocking(obs, legal)
    return int(rng.choice(legal)) if forced is None else forced


def lookahead_centre_player(obs: Any, mask: Any, *, rng: np.random.Generator) -> int:
    """The one-step lookahead player, but for a random move it favours the centre columns
    (weights 1 2 3 4 3 2 1): a little stronger, and a different player to test against."""
    legal = np.flatnonzero(np.asarray(mask))
    forced = _winning_or_blocking(obs, legal)
    if forced is not None:
        return forced
    weights = CENTRE_WEIGHTS[legal]
    return int(rng.choice(legal, p=weights / weights.sum()))


def _winning_or_blocking(obs: Any, legal: np.ndarray) -> int | None:
    """A legal column that wins now, else one where the other player would win next, else None."""
    board = np.asarray(obs).reshape(ROWS, COLUMNS, 2)
    rows = landing_rows(board)
    columns = [column for column in legal.tolist() if rows[column] >= 0]
    for channel in (0, 1):  # 0: a winning move of its own; 1: the other player's, to block
        pieces = board[:, :, channel].tolist()  # lists: indexing them is ~10x cheaper than numpy's
        for column in columns:
            if wins_with(pieces, rows[column], column):
                return column
    return None


def tactics(player: Any, *, games: int = 1000, seed: int = 0) -> dict[str, dict[str, Any]]:
    """How often `player` ((obs, mask) -> column, deterministic) makes the one-move plays the
    lookahead player is made of, on the positions of `games` games in which each move is the
    lookahead player's or, half the time, a uniformly random one (seeded). Per kind: positions,
    and those where `player` chose well: "win" (a move wins now: taken), "block" (no win, and the
    other player has one winning column: blocked), "safe" (neither, and some but not all moves
    put a piece under a cell where the other player would win: one of the others chosen).
    "win" and "block" also count by the kind of line the good move completes or stops
    (`lines`: horizontal, vertical, diagonal; a move on two kinds of line counts in both)."""
    rng = np.random.default_rng(seed)
    counts: dict[str, dict[str, Any]] = {kind: {"positions": 0, "chosen": 0} for kind in ("win", "block", "safe")}
    for kind in ("win", "block"):
        counts[kind]["lines"] = {line: {"positions": 0, "chosen": 0} for line in dict.fromkeys(LINE_KINDS)}
    for _ in range(games):
        board = np.zeros((ROWS, COLUMNS, 2), dtype=np.float32)  # channel 0: the mover's pieces
        while True:
            rows = landing_rows(board)
            legal = [column for column in range(COLUMNS) if rows[column] >= 0]
            if not legal:
                break
            mask = (np.asarray(rows) >= 0).astype(np.float32)
            kind, good = _kind_of_position(board, rows, legal)
            if kind is not None:
                chosen = int(player(board, mask)) in good
                counts[kind]["positions"] += 1
                counts[kind]["chosen"] += chosen
                if kind != "safe":
                    target = min(good)  # the column that wins or blocks (of two winning ones, the first)
                    side = board[:, :, 0 if kind == "win" else 1].tolist()  # whose line it completes
                    for line in completed_lines(side, rows[target], target):
                        counts[kind]["lines"][line]["positions"] += 1
                        counts[kind]["lines"][line]["chosen"] += chosen
            if rng.random() < 0.5:
                column = lookahead_player(board, mask, rng=rng)
            else:
                column = int(rng.choice(legal))
            if wins_with(board[:, :, 0].tolist(), rows[column], column):
                break
            board[rows[column], column, 0] = 1
            board = board[:, :, ::-1].copy()  # the other player moves next
    return counts


def _kind_of_position(board: np.ndarray, rows: list[int], legal: list[int]) -> tuple[str | None, set[int]]:
    """The tactics' kind of this position for the mover (None: none applies), and its good moves."""
    mine, theirs = board[:, :, 0].tolist(), board[:, :, 1].tolist()
    wins = {column for column in legal if wins_with(mine, rows[column], column)}
    if wins:
        return "win", wins
    threats = {column for column in legal if wins_with(theirs, rows[column], column)}
    if len(threats) == 1:
        return "block", threats
    if threats:
        return None, set()  # two threats: lost whatever is played
    safe = {column for column in legal if rows[column] == 0 or not wins_with(theirs, rows[column] - 1, column)}
    return ("safe", safe) if safe and len(safe) < len(legal) else (None, set())
