"""The scripted Connect Four players (clients/python/rllink_clients/connect_four.py) on positions
from real `connect_four_v3` games, against an independent rule: every 4-cell window of the board."""

from __future__ import annotations

import numpy as np
from pettingzoo.classic import connect_four_v3

from rllink_clients.connect_four import COLUMNS, ROWS, completed_lines, lookahead_centre_player, lookahead_player, tactics
from rllink_clients.pettingzoo import random_legal

# Every line of four cells on the board: (row, column) steps right, down, down-right, down-left.
WINDOWS = [
    [(r + i * dr, c + i * dc) for i in range(4)]
    for r in range(ROWS)
    for c in range(COLUMNS)
    for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1))
    if 0 <= r + 3 * dr < ROWS and 0 <= c + 3 * dc < COLUMNS
]


def completes_four(board: np.ndarray, channel: int, column: int) -> bool:
    """Whether channel `channel` of `board` [6, 7, 2] holds four in a window once its piece drops into `column`."""
    row = max(r for r in range(ROWS) if not board[r, column].any())
    after = board[:, :, channel].copy()
    after[row, column] = 1
    return any(all(after[r, c] for r, c in window) for window in WINDOWS)


def positions(games: int, seed: int):
    """(observation, mask) of every position the mover faces in `games` random games."""
    env, rng = connect_four_v3.env(), np.random.default_rng(seed)
    for game in range(games):
        env.reset(seed=seed + game)
        for _agent in env.agent_iter():
            obs, _, terminated, truncated, _ = env.last()
            if terminated or truncated:
                env.step(None)
                continue
            yield obs["observation"].astype(np.float32).ravel(), obs["action_mask"]
            env.step(random_legal(obs["observation"], obs["action_mask"], rng=rng, n=COLUMNS))


def test_lookahead_players_win_when_they_can_block_when_they_must() -> None:
    rng = np.random.default_rng(0)
    seen = {"win": 0, "block": 0, "free": 0}
    for obs, mask in positions(games=150, seed=0):
        board = obs.reshape(ROWS, COLUMNS, 2)
        legal = [int(c) for c in np.flatnonzero(mask)]
        wins = {c for c in legal if completes_four(board, 0, c)}
        blocks = {c for c in legal if completes_four(board, 1, c)}
        for player in (lookahead_player, lookahead_centre_player):
            move = player(obs, mask, rng=rng)
            assert move in legal
            if wins:
                assert move in wins, (board.tolist(), move, wins)
            elif blocks:
                assert move in blocks, (board.tolist(), move, blocks)
        seen["win" if wins else "block" if blocks else "free"] += 1
    assert min(seen.values()) > 100, seen  # every case came up often


def test_completed_lines_names_the_line() -> None:
    pieces = np.zeros((ROWS, COLUMNS))
    pieces[5, 0:3] = 1  # the bottom row, columns 0-2
    pieces[3:6, 6] = 1  # column 6, rows 3-5
    pieces[[4, 3, 2], [4, 3, 2]] = 1  # a diagonal rising to the left, (5, 5) free
    board = pieces.tolist()
    assert completed_lines(board, 5, 3) == {"horizontal"}
    assert completed_lines(board, 2, 6) == {"vertical"}
    assert completed_lines(board, 5, 5) == {"diagonal"}
    assert completed_lines(board, 0, 0) == set()


def test_tactics_counts_what_a_player_takes_and_blocks() -> None:
    rng = np.random.default_rng(1)
    lookahead = tactics(lambda obs, mask: lookahead_player(obs, mask, rng=rng), games=100, seed=0)
    random = tactics(lambda obs, mask: random_legal(obs, mask, rng=rng, n=COLUMNS), games=100, seed=0)
    assert lookahead["win"]["positions"] == lookahead["win"]["chosen"] == random["win"]["positions"]  # same positions
    assert lookahead["block"]["chosen"] == lookahead["block"]["positions"] > 50
    for kind in ("win", "block"):
        assert random[kind]["chosen"] < 0.4 * random[kind]["positions"], (kind, random)
        # By the kind of line the good move completes (the threat's, for a block): every
        # position on at least one, and each kind comes up.
        lines = random[kind]["lines"]
        assert list(lines) == ["horizontal", "vertical", "diagonal"]
        assert random[kind]["positions"] <= sum(n["positions"] for n in lines.values()) < 1.1 * random[kind]["positions"]
        assert sum(n["chosen"] for n in lines.values()) >= random[kind]["chosen"]
        for line, n in lookahead[kind]["lines"].items():
            assert n["chosen"] == n["positions"] >= 10, (kind, line, lookahead)
            assert random[kind]["lines"][line]["chosen"] < 0.5 * random[kind]["lines"][line]["positions"], (kind, line, random)
    assert 50 < random["safe"]["positions"] and random["safe"]["chosen"] < random["safe"]["positions"]
