"""rllink_clients.tictactoe's exact figures against random play, checked by playing them out:
the most a player can win against a uniformly random legal player, per seat."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from rllink_clients.tictactoe import _win_chance, _won, most_wins_against_random, played

GAMES = 4000


def play_out(seat: str, rng: np.random.Generator) -> float:
    """The share of GAMES the player that picks the move of most win chance wins against random play."""
    wins = 0
    for _ in range(GAMES):
        cells, ours = (0,) * 9, seat == "first"
        while not _won(cells, 2) and 0 in cells:
            legal = [i for i, c in enumerate(cells) if c == 0]
            move = max(legal, key=lambda m: _win_chance(played(cells, m), False, False)) if ours else int(rng.choice(legal))
            cells, ours = played(cells, move), not ours
        wins += _won(cells, 2) and not ours  # we made the last, winning move
    return wins / GAMES


def test_the_most_wins_against_random_play_are_what_playing_them_out_wins() -> None:
    assert Fraction(most_wins_against_random("first")).limit_denominator(1000) == Fraction(191, 192)
    second = most_wins_against_random("second")
    assert Fraction(second).limit_denominator(1000) == Fraction(887, 945)
    assert most_wins_against_random("second", never_losing=True) < second  # safety costs wins moving second
    assert most_wins_against_random("first", never_losing=True) == most_wins_against_random("first")
    rng = np.random.default_rng(0)
    for seat in ("first", "second"):
        exact = most_wins_against_random(seat)
        assert abs(play_out(seat, rng) - exact) < 4 * np.sqrt(exact * (1 - exact) / GAMES) + 1e-3, seat
