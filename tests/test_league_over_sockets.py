"""A self-play league driven by a client over a real socket: the snapshot rule (a snapshot
as soon as the learner scores `snapshot_score` in its rated games) and the opponent pool
sampled by how the learner fares (prioritised fictitious self-play); the opponent's temperature
in SET_STATE."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from app.settings.config import Settings
from app.training.onnx_export import load_payload

from .helpers import TcpPeer, chunk, frame, gateway_settings, running_gateway

SPACES = {"observation_space": {"type": "box", "shape": [2]}, "action_space": {"type": "discrete", "n": 3}}
MAPPING = {"duel_a": "duel", "duel_b": "duel_opponent"}
REWARDS = {"win": 1.0, "draw": 0.0, "loss": -1.0}


def league(gateway) -> dict:
    """/api/policies' self_play of the learner."""
    (duel,) = [p for p in httpx.get(f"{gateway.base_url}/api/policies").json() if p["module_id"] == "duel"]
    return duel["self_play"]


def play(gateway, games: int, outcome_against: Callable[[dict], str]) -> list[dict]:
    """One game per training step, its outcome chosen from the opponent the version drew
    (as /api/policies shows it); returns those opponents, in order."""
    opponents = []
    with TcpPeer.connect(gateway) as peer:
        peer.send(frame({"type": "GET_STATE"}))
        version = peer.receive()["weights_seq_no"]
        for game in range(games):
            opponent = league(gateway)["opponent"]
            opponents.append(opponent)
            outcome = outcome_against(opponent)
            episode = chunk(2, obs_dim=2, reward=REWARDS[outcome], agent_id="duel_a", module_id="duel", outcome=outcome,
                            episode_id=f"g{version}-{game}", weights_seq_no=version)  # fmt: skip
            peer.send(frame({"type": "EPISODES_AND_GET_STATE", "episodes": [episode]}))
            reply = peer.receive()
            assert reply["type"] == "SET_STATE", reply
            version = reply["weights_seq_no"]
    return opponents


def test_a_snapshot_comes_once_the_learner_scores_snapshot_score_in_its_rated_games(tmp_path):
    self_play = {"snapshot_every": 1000, "snapshot_score": 0.75, "snapshot_games": 4, "play_against_random_ratio": 1.0,
                 "play_against_latest_ratio": 0.0}  # fmt: skip
    settings = gateway_settings(tmp_path, policies={"duel": SPACES | {"self_play": self_play}}, policy_mapping=MAPPING)
    outcomes = iter(["loss", "win", "win", "draw", "win", "win", "win", "win", "win", "win"])
    with running_gateway(settings) as gateway:
        first = [s["weights_seq_no"] for s in league(gateway)["snapshots"]]
        play(gateway, 4, lambda opponent: next(outcomes))  # 2.5 of 4: not yet
        after_four = [s["weights_seq_no"] for s in league(gateway)["snapshots"]]
        play(gateway, 6, lambda opponent: next(outcomes))  # 4.5 of 6 (0.75): met; then 4 of 4 for the new snapshot
        snapshots = league(gateway)["snapshots"]
    assert len(first) == 1 and after_four == first
    versions = [s["weights_seq_no"] for s in snapshots]
    assert versions[0] == first[0] and [b - a for a, b in zip(versions, versions[1:])] == [6, 4], versions
    assert snapshots[1]["against_random"] == {"score": 1.0, "games": 4}  # the games of the versions it stood for


def test_the_pool_draws_the_snapshot_the_learner_loses_to_most(tmp_path):
    # Three snapshots first (one a version), then no more: the learner's own and two older ones to draw from.
    def settings(snapshot_every: int):
        self_play = {"snapshot_every": snapshot_every, "window": 3, "play_against_random_ratio": 0.0,
                     "play_against_latest_ratio": 0.0}  # fmt: skip
        return gateway_settings(tmp_path, policies={"duel": SPACES | {"self_play": self_play}}, policy_mapping=MAPPING)

    with running_gateway(settings(1)) as gateway:
        play(gateway, 3, lambda opponent: "draw")
    with running_gateway(settings(10_000)) as gateway:
        older = [s["weights_seq_no"] for s in league(gateway)["snapshots"]][:-1]
        hard = older[0]  # the learner loses every game to it and wins every other
        opponents = play(gateway, 80, lambda opponent: "loss" if opponent["player"] == hard else "win")
        ratings = {s["weights_seq_no"]: s["elo"] for s in league(gateway)["snapshots"]}
    drawn = Counter(o["player"] for o in opponents[20:])  # once the ratings have told them apart
    assert {o["kind"] for o in opponents} == {"snapshot"} and set(drawn) <= set(older)
    assert ratings[hard] > ratings[older[1]] + 200, ratings
    # Uniform sampling would draw each about 30 of 60 times; PFSP's weight (1 - p)^2 draws the hard one nearly always.
    assert drawn[hard] >= 50, drawn


def test_set_state_carries_the_opponent_at_the_leagues_temperature_and_a_box_learner_is_refused_one(tmp_path):
    # The opponent: the learner's own weights, at temperature 2.
    self_play = {"play_against_latest_ratio": 1.0, "play_against_random_ratio": 0.0, "opponent_temperature": 2}
    settings = gateway_settings(tmp_path, policies={"duel": SPACES | {"self_play": self_play}}, policy_mapping=MAPPING)
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as peer:
        peer.send(frame({"type": "GET_STATE"}))
        state = peer.receive()
        shown = league(gateway)
    learner, opponent = (ort.InferenceSession(load_payload(state["onnx_files"][m]).SerializeToString()) for m in ("duel", "duel_opponent"))
    obs = np.random.default_rng(0).normal(size=(5, 2)).astype(np.float32)
    # The learner's logits halved.
    np.testing.assert_allclose(opponent.run(None, {"obs": obs})[0], learner.run(None, {"obs": obs})[0] / 2, rtol=1e-5, atol=1e-7)
    assert shown["opponent"] == {"kind": "latest", "player": None} and shown["opponent_temperature"] == 2.0
    box = {"observation_space": {"type": "box", "shape": [2]}, "action_space": {"type": "box", "shape": [1]}}
    with pytest.raises(ValueError, match="self_play.opponent_temperature divides logits"):
        Settings(policies={"duel": box | {"self_play": {"opponent_temperature": 3}}}, checkpoint_dir=tmp_path)
    Settings(policies={"duel": box | {"self_play": {"opponent_temperature": 1}}}, checkpoint_dir=tmp_path)  # as trained
