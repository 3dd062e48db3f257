"""The self-play league alone: snapshots, fixed references, opponents, anchored ratings, records."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from app.settings.hyperparameters import SelfPlayConfig
from app.spaces.models import BoxSpace, DiscreteSpace
from app.training.algorithms.ppo.onnx_head import export_onnx
from app.training.policy import ActorCritic
from app.training.policy_state import PolicyState, set_state_payload
from app.training.self_play import RANDOM, SNAPSHOT, Game, League, Opponent, expected_score

ONNX = export_onnx(ActorCritic(BoxSpace(shape=(4,)), DiscreteSpace(n=3), (8,)), 0, "obs", action_masking=True)


def state(version: int) -> PolicyState:
    """A learner export of `version` (the same weights: the league reads only the interface)."""
    return PolicyState(version, ONNX, set_state_payload(ONNX))


def config(**fields) -> SelfPlayConfig:
    return SelfPlayConfig(
        **{"snapshot_every": 1, "window": 5, "play_against_latest_ratio": 0.0, "play_against_random_ratio": 0.0, **fields}
    )


def play(league: League, version: int, outcome: str, games: int = 1, seat: str = "player_0") -> None:
    """`games` games of the learner at `version` (each its own episode), all ending in `outcome`."""
    league.record_games([Game(f"v{version}-{seat}-{i}-{outcome}", seat, outcome, version) for i in range(games)])


def test_snapshots_every_n_changes_of_the_learner_within_a_window():
    league = League(config(snapshot_every=2, window=3))
    for version in range(10):
        league.on_new_version(version, state(version))
    assert [s.weights_seq_no for s in league.snapshots] == [4, 6, 8]  # 0, 2, 4, 6, 8 taken; the window keeps 3
    # A version in which the learner was not trained (its export is older) takes no snapshot.
    league.on_new_version(10, state(8))
    assert [s.weights_seq_no for s in league.snapshots] == [4, 6, 8]


def test_with_snapshot_score_a_snapshot_comes_as_soon_as_the_learner_scores_that_much_in_its_rated_games():
    league = League(config(snapshot_every=100, snapshot_score=0.75, snapshot_games=10, play_against_random_ratio=1.0))
    league.on_new_version(0, state(0))  # the first snapshot
    play(league, 0, "win", 5)
    play(league, 0, "draw", 4)  # 9 games: too few to decide
    league.on_new_version(1, state(1))
    assert [s.weights_seq_no for s in league.snapshots] == [0]
    play(league, 1, "loss", 3)  # 12 games, score 7 / 12 < 0.75
    league.on_new_version(2, state(2))
    assert [s.weights_seq_no for s in league.snapshots] == [0]
    play(league, 2, "win", 6)  # 18 games, score 13 / 18 = 0.72
    league.on_new_version(3, state(3))
    assert [s.weights_seq_no for s in league.snapshots] == [0]
    play(league, 3, "win", 2)  # 20 games, 15 / 20: met
    league.on_new_version(4, state(4))
    assert [s.weights_seq_no for s in league.snapshots] == [0, 4]
    league.on_new_version(5, state(5))  # the new snapshot's games start from none
    assert [s.weights_seq_no for s in league.snapshots] == [0, 4]


def test_the_random_reference_plays_uniformly_among_the_legal_moves_with_the_learners_interface():
    league = League(config(play_against_random_ratio=1.0))
    served = league.on_new_version(0, state(0))
    assert league.opponent.kind == "reference" and league.opponent.player == RANDOM and served.weights_seq_no == 0
    session = ort.InferenceSession(served.onnx_bytes)
    assert [i.name for i in session.get_inputs()] == ["obs", "action_mask"]
    mask = np.array([[1, 0, 1], [0, 1, 0]], np.float32)
    (logits,) = session.run(None, {"obs": np.random.default_rng(0).normal(size=(2, 4)).astype(np.float32), "action_mask": mask})
    probabilities = np.exp(logits - logits.max(1, keepdims=True))
    probabilities /= probabilities.sum(1, keepdims=True)
    assert np.allclose(probabilities, mask / mask.sum(1, keepdims=True))


def logits(onnx_bytes: bytes) -> np.ndarray:
    """The model's action_dist_inputs on two fixed observations, the middle action masked in one."""
    session = ort.InferenceSession(onnx_bytes)
    obs = np.random.default_rng(1).normal(size=(2, 4)).astype(np.float32)
    (out,) = session.run(None, {"obs": obs, "action_mask": np.array([[1, 0, 1], [1, 1, 1]], np.float32)})
    return out


def test_snapshots_and_the_latest_weights_play_the_opponent_tempered_and_the_references_as_they_are():
    league = League(config(play_against_latest_ratio=1.0), temperature=2.0)
    latest = league.on_new_version(0, state(0))
    assert league.opponent.kind == "latest" and latest.weights_seq_no == 0
    np.testing.assert_allclose(logits(latest.onnx_bytes), logits(ONNX) / 2, rtol=1e-6)  # the same most likely move, flatter
    metadata = {p.key: p.value for p in onnx.load_from_string(latest.onnx_bytes).metadata_props}
    assert metadata["opponent_temperature"] == "2.0" and metadata["weights_seq_no"] == "0"
    assert league.summary()["opponent_temperature"] == 2.0
    league.cfg = config(play_against_latest_ratio=0.0)  # from now on, an older snapshot
    league.on_new_version(1, state(1))
    drawn = league.on_new_version(2, state(2))
    assert league.opponent.kind == "snapshot" and drawn.weights_seq_no == league.opponent.player
    np.testing.assert_allclose(logits(drawn.onnx_bytes), logits(ONNX) / 2, rtol=1e-6)
    assert set(league.snapshot_files().values()) == {ONNX}  # kept and saved as trained
    league.cfg = config(play_against_random_ratio=1.0)
    uniform = league.on_new_version(3, state(3))
    assert league.opponent.kind == "reference" and "opponent_temperature" not in uniform.onnx_bytes.decode("latin-1")
    # At temperature 1 the opponent is the learner's own model.
    assert League(config(play_against_latest_ratio=1.0)).on_new_version(0, state(0)).onnx_bytes == ONNX


def test_opponents_follow_the_schedule():
    league = League(config(play_against_latest_ratio=0.3, play_against_random_ratio=0.2), seed=1)
    kinds = []
    for version in range(2000):
        league.on_new_version(version, state(version))
        kinds.append(league.opponent.kind)
    assert 0.25 < kinds.count("latest") / 2000 < 0.35
    assert 0.15 < kinds.count("reference") / 2000 < 0.25
    assert 0.45 < kinds.count("snapshot") / 2000 < 0.55
    # A snapshot opponent is an older snapshot than the learner's own (the newest), within the window.
    league.on_new_version(3000, state(3000))
    while league.opponent.kind != "snapshot":
        league.on_new_version(3000, state(3000))
    assert league.opponent.player in [s.weights_seq_no for s in list(league.snapshots)[:-1]]


def test_pfsp_picks_the_snapshots_the_learner_does_not_beat_yet_more_often():
    league = League(config(window=3), seed=2)
    for version in range(3):  # snapshots 0, 1, 2: the learner (2) beats 0 every game, 1 half of them
        league.on_new_version(version, state(version))
    league._versions[100] = (2, Opponent(SNAPSHOT, 0))  # versions that played snapshot 0, and 1
    league._versions[101] = (2, Opponent(SNAPSHOT, 1))
    play(league, 100, "win", 30)
    play(league, 101, "win", 15)
    play(league, 101, "loss", 15)
    picked = [league._draw().player for _ in range(400)]
    assert picked.count(1) > 3 * picked.count(0), (picked.count(0), picked.count(1))
    uniform = League(config(window=3, snapshot_sampling="uniform"), seed=2)
    for version in range(3):
        uniform.on_new_version(version, state(version))
    picked = [uniform._draw().player for _ in range(400)]
    assert 150 < picked.count(0) < 250


def test_references_never_move_and_a_snapshot_is_rated_from_its_own_games():
    losing, winning = League(config(play_against_random_ratio=1.0)), League(config(play_against_random_ratio=1.0))
    for league, outcome in ((losing, "loss"), (winning, "win")):
        league.on_new_version(0, state(0))
        play(league, 0, outcome, 50)
        assert league.references == {RANDOM: 1000.0} and league.rated_games == 50
    assert losing.elo < 1000 - 200 and winning.elo > 1000 + 200
    # Ratings are not inherited: a new snapshot whose games are even with random comes back to it.
    for league in (losing, winning):
        before = league.elo
        league.on_new_version(1, state(1))
        assert league.elo == pytest.approx(before)  # a snapshot with no games yet leaves the learner's rating
        play(league, 1, "win", 100)
        play(league, 1, "loss", 100)
        assert abs(league.elo - 1000) < 60, league.summary()["snapshots"]
        assert league.references == {RANDOM: 1000.0}


def even_against_random_beating_every_snapshot(league: League, versions: int) -> list[float]:
    """`versions` versions of a learner that draws even with random play (5 wins, 5 losses) and
    wins all 10 of its games against any older snapshot; its rating after each."""
    elo = []
    for version in range(versions):
        league.on_new_version(version, state(version))
        if league.opponent.kind == "reference":
            play(league, version, "win", 5)
            play(league, version, "loss", 5)
        else:
            play(league, version, "win", 10)
        elo.append(league.elo)
    return elo


def test_a_learner_that_beats_its_snapshots_without_getting_stronger_does_not_inflate():
    """The issue's failure: every snapshot beaten by the next, yet even against random;
    each snapshot inheriting the learner's rating, ELO rose without bound."""
    league = League(config(window=10, play_against_random_ratio=0.5), seed=0)
    elo = even_against_random_beating_every_snapshot(league, 600)
    means = [np.mean(elo[start : start + 100]) for start in range(100, 600, 100)]
    assert max(means) < 1000 + 400 and max(means) - min(means) < 150, means  # flat, not rising
    assert max(elo) < 1000 + 1500  # a newest snapshot that beat many older ones, no more
    assert league.references == {RANDOM: 1000.0}


def test_at_a_temperature_a_snapshot_as_the_opponent_is_a_player_of_its_own_and_ratings_do_not_inflate():
    """Even against random, the learner beats every tempered (weakened) snapshot: those wins rate
    the tempered players, not the snapshots as trained (one rating for both rose to 2,043 here)."""
    league = League(config(window=10, play_against_random_ratio=0.5), seed=0, temperature=2.0)
    elo = even_against_random_beating_every_snapshot(league, 300)
    assert max(elo) < 1000 + 400, max(elo)
    snapshots = league.summary()["snapshots"]
    assert np.mean([s["tempered_elo"] for s in snapshots]) < np.mean([s["elo"] for s in snapshots]) - 150, snapshots
    restored = League(config(window=10, play_against_random_ratio=0.5), temperature=2.0)
    restored.restore(league.ratings(), league.snapshot_files())
    assert restored.summary()["snapshots"] == snapshots  # both ratings of each snapshot, as saved
    plain = League(config())  # at temperature 1 a snapshot is one player
    plain.on_new_version(0, state(0))
    assert plain.summary()["snapshots"][0]["tempered_elo"] is None


def test_a_learner_that_gets_stronger_rises_and_ratings_stay_finite_when_it_always_wins():
    league = League(config(window=10, play_against_random_ratio=0.3), seed=0)
    for version in range(200):
        league.on_new_version(version, state(version))
        if league.opponent.kind == "reference":
            strength = min(version / 100, 0.99)  # wins more of its games against random as it trains
            play(league, version, "win", round(20 * strength))
            play(league, version, "loss", 20 - round(20 * strength))
        else:
            play(league, version, "win", 6)
            play(league, version, "loss", 4)
    assert league.elo > 1000 + 400 and np.isfinite(league.elo)
    assert league.elo < 1000 + 2000


def test_playing_only_itself_is_counted_but_moves_no_rating():
    league = League(config(play_against_latest_ratio=1.0))
    for version in range(50):
        league.on_new_version(version, state(version))
        play(league, version, "win", 3)
    assert league.opponent.kind == "latest" and league.rated_games == 0 and league.games == 150
    assert league.elo == pytest.approx(1000.0)


def test_each_game_is_counted_once_and_by_seat():
    league = League(config(play_against_random_ratio=1.0))
    league.on_new_version(0, state(0))
    league.record_games([Game("g1", "player_0", "win", 0), Game("g2", "player_1", "draw", 0)])
    league.record_games([Game("g1", "player_0", "win", 0)])  # sent again: already counted
    # Both seats of one game played by the learner (one shared policy): one game, against itself.
    league.record_games([Game("g3", "player_0", "win", 0), Game("g3", "player_1", "loss", 0)])
    summary = league.summary()
    assert summary["games"] == 3 and summary["rated_games"] == 2
    rows = {(r["opponent"], r["seat"]): (r["win"], r["draw"], r["loss"]) for r in summary["records"]}
    assert rows == {
        ("random", "player_0"): (1, 0, 0),
        ("random", "player_1"): (0, 1, 0),
        ("latest", "player_0"): (1, 0, 0),
        ("latest", "player_1"): (0, 0, 1),
    }


def test_records_keep_the_last_window_of_games():
    league = League(config(play_against_random_ratio=1.0, record_window=10))
    league.on_new_version(0, state(0))
    play(league, 0, "loss", 20)
    play(league, 0, "win", 7)
    (row,) = league.summary()["records"]
    assert (row["win"], row["draw"], row["loss"]) == (7, 0, 3)


def test_the_league_survives_a_restart_through_its_ratings_and_files():
    league = League(config(window=3, play_against_random_ratio=0.5), seed=4)
    for version in range(8):
        league.on_new_version(version, state(version))
        play(league, version, "win", 4)
        league.record_evaluations([Game(f"e{version}", "player_1", "draw", version)])
    restored = League(config(window=3, play_against_random_ratio=0.5))
    restored.restore(league.ratings(), league.snapshot_files())
    before, after = league.summary(), restored.summary()
    assert after["snapshots"] == [{**s, "elo": pytest.approx(s["elo"])} for s in before["snapshots"]]
    assert after["records"] == before["records"] and after["elo"] == pytest.approx(before["elo"])
    assert after["evaluation_records"] == before["evaluation_records"] and sum(r["draw"] for r in after["evaluation_records"]) == 8
    assert (restored.rated_games, restored.games) == (league.rated_games, league.games)


def test_expected_score_is_elos():
    assert expected_score(1000, 1000) == 0.5 and expected_score(1400, 1000) == pytest.approx(10 / 11)


def test_the_schedule_refuses_shares_above_one():
    with pytest.raises(ValueError, match="must not exceed 1"):
        SelfPlayConfig(play_against_latest_ratio=0.9, play_against_random_ratio=0.2)
    with pytest.raises(ValueError, match="must not exceed 1"):
        SelfPlayConfig(
            play_against_latest_ratio=0.5,
            scripted_references={"a": {"elo": 1500, "play_ratio": 0.3}, "b": {"elo": 1, "play_ratio": 0.3}},
        )


@pytest.mark.parametrize("name", ["random", "", "a b", "x" * 65])
def test_a_scripted_reference_needs_a_name_of_its_own(name):
    with pytest.raises(ValueError, match="scripted reference name"):
        SelfPlayConfig(scripted_references={name: {"elo": 1500}})


def test_a_scripted_reference_is_drawn_by_its_share_named_in_its_model_and_rated_at_its_fixed_rating():
    league = League(
        config(play_against_random_ratio=0.2, scripted_references={"lookahead": {"elo": 1600, "play_ratio": 0.5}}), seed=3
    )
    drawn, served = [], {}
    for version in range(2000):
        opponent_state = league.on_new_version(version, state(version))
        drawn.append(league.opponent.player if league.opponent.kind == "reference" else league.opponent.kind)
        served[drawn[-1]] = opponent_state
    assert 0.45 < drawn.count("lookahead") / 2000 < 0.55 and 0.15 < drawn.count(RANDOM) / 2000 < 0.25
    # Its model is the random one, naming the scripted player a client plays instead; random's names none.
    metadata = ort.InferenceSession(served["lookahead"].onnx_bytes).get_modelmeta().custom_metadata_map
    assert metadata["scripted_reference"] == "lookahead" and served["lookahead"].weights_seq_no == 0
    assert "scripted_reference" not in ort.InferenceSession(served[RANDOM].onnx_bytes).get_modelmeta().custom_metadata_map
    # Games against it are rated at its fixed rating (never moved), recorded by its name and seat.
    version = next(v for v in range(1999, 0, -1) if drawn[v] == "lookahead")
    play(league, version, "win", 40, seat="player_0")
    play(league, version, "loss", 40, seat="player_1")
    assert league.references == {RANDOM: 1000.0, "lookahead": 1600.0}
    assert abs(league.elo - 1600) < 60  # even against a player rated 1600
    summary = league.summary()
    assert {"name": "lookahead", "elo": 1600.0, "scripted": True} in summary["references"]
    rows = {(r["opponent"], r["seat"]): (r["win"], r["loss"]) for r in summary["records"]}
    assert rows[("lookahead", "player_0")] == (40, 0) and rows[("lookahead", "player_1")] == (0, 40)
