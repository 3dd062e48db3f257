"""The self-play league alone: snapshots, the opponent of each version, ELO ratings."""

from __future__ import annotations

import pytest

from app.settings.hyperparameters import SelfPlayConfig
from app.training.onnx_export import PolicyState
from app.training.self_play import League


def state(version: int) -> PolicyState:
    return PolicyState(version, b"onnx-%d" % version, f"b64-{version}")


def test_snapshots_every_n_changes_of_the_learner_within_a_window():
    league = League(SelfPlayConfig(snapshot_every=2, window=3, play_against_latest_ratio=0.0))
    for version in range(10):
        league.on_new_version(version, state(version))
    assert [s.weights_seq_no for s in league.snapshots] == [4, 6, 8]  # 0, 2, 4, 6, 8 taken; the window keeps 3
    # A version in which the learner was not trained (its export is older) takes no snapshot.
    league.on_new_version(10, state(8))
    assert [s.weights_seq_no for s in league.snapshots] == [4, 6, 8]


@pytest.mark.parametrize("ratio", [0.0, 1.0])
def test_the_opponent_is_a_snapshot_or_the_latest_weights_as_the_ratio_says(ratio):
    league = League(SelfPlayConfig(snapshot_every=1, window=5, play_against_latest_ratio=ratio), seed=3)
    served = [league.on_new_version(v, state(v)) for v in range(20)]
    if ratio == 1.0:
        assert [s.weights_seq_no for s in served] == list(range(20)) and league.opponent is None
    else:
        assert all(s.weights_seq_no <= v and v - s.weights_seq_no < 5 for v, s in enumerate(served))
        assert any(s.weights_seq_no < v for v, s in enumerate(served))  # older snapshots are played


def test_a_mix_of_opponents_follows_the_ratio():
    league = League(SelfPlayConfig(snapshot_every=1, window=5, play_against_latest_ratio=0.3), seed=1)
    latest = 0
    for version in range(1000):
        league.on_new_version(version, state(version))
        latest += league.opponent is None
    assert 250 < latest < 350


def test_elo_moves_both_ratings_by_k_times_surprise():
    league = League(SelfPlayConfig(snapshot_every=1, window=5, play_against_latest_ratio=0.0, elo_k=16, initial_elo=1200))
    league.on_new_version(0, state(0))  # the only snapshot, rated 1200 like the learner
    assert league.record_game("win", 0)
    assert league.elo == pytest.approx(1208) and league.snapshots[0].elo == pytest.approx(1192)
    assert league.record_game("loss", 0)  # expected score now above one half: it loses more than 8
    assert league.elo < 1200 and league.elo + league.snapshots[0].elo == pytest.approx(2400)
    assert league.record_game("draw", 0) and league.rated_games == 3


def test_games_against_itself_or_an_unknown_version_are_not_rated():
    league = League(SelfPlayConfig(play_against_latest_ratio=1.0))
    league.on_new_version(0, state(0))
    assert not league.record_game("win", 0)  # against the latest weights: itself
    assert not league.record_game("win", 99) and not league.record_game("win", None)
    assert league.elo == 1200 and league.rated_games == 0


def test_a_learner_that_keeps_winning_rises():
    league = League(SelfPlayConfig(snapshot_every=1, window=3, play_against_latest_ratio=0.0))
    for version in range(50):
        league.on_new_version(version, state(version))
        league.record_game("win", version)
    assert league.elo > 1400
    summary = league.summary()
    assert summary["elo"] == league.elo and summary["rated_games"] == 50
    assert [s["weights_seq_no"] for s in summary["snapshots"]] == [47, 48, 49]
