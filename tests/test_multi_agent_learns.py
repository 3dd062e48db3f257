"""Multi-agent training that really learns: the reference multi-agent client
(clients/python/rllink_clients/multi_agent.py) against a real gateway over real sockets.

Each test stops at its goal or at a generous limit of env steps, never of seconds, so a
slow machine takes longer but does not fail; a test fails only if learning does.
"""

from __future__ import annotations

import functools
import threading

import httpx
import numpy as np
import pytest

from rllink_clients.games import CoordinationGame, CountdownGame, random_opponent
from rllink_clients.multi_agent import SceneResult, make_scene, run_scene
from rllink_clients.rllink_client import RLlinkClient

from .helpers import RunningGateway, gateway_settings, running_gateway

pytestmark = pytest.mark.e2e

CARTPOLE = {"observation_space": {"type": "box", "shape": [4]}, "action_space": {"type": "discrete", "n": 2}}
REACH = {
    "observation_space": {"type": "box", "shape": [2], "low": -1.0, "high": 1.0},
    "action_space": {"type": "box", "shape": [1], "low": -1.0, "high": 1.0},
}
COUNTDOWN = CountdownGame()
BOARD = {"observation_space": COUNTDOWN.observation_space, "action_space": COUNTDOWN.action_space}


def connect(gateway: RunningGateway, transport: str) -> RLlinkClient:
    port = gateway.tcp_port if transport == "tcp" else gateway.http_port
    return RLlinkClient(transport, "127.0.0.1", port)


def win_rate_against_random(gateway: RunningGateway, module_id: str, seed: int) -> float:
    """The module's share of wins over its last 100 games as player_0 of countdown against
    a uniformly random local player_1 (it trains meanwhile, as any client does)."""
    random_player = functools.partial(random_opponent, rng=np.random.default_rng(seed))
    with connect(gateway, "tcp") as client:  # ~10 moves a game: over 150 games
        result = run_scene(client, CountdownGame(), max_env_steps=1_500, seed=seed, opponents={"player_1": random_player})
    outcomes = result.outcome_counts(module_id)
    assert sum(outcomes.values()) == 100, outcomes  # the window is full
    return outcomes["win"] / 100


def test_two_policies_with_other_spaces_learn_in_one_scene_over_tcp_and_websocket_at_once(tmp_path):
    settings = gateway_settings(
        tmp_path, policies={"cart": CARTPOLE, "reach": REACH}, policy_mapping={"cart_*": "cart", "reach_*": "reach"}
    )
    results: dict[str, SceneResult] = {}
    stop = threading.Event()

    def play(transport: str, seed: int) -> None:
        with connect(gateway, transport) as client:
            results[transport] = run_scene(
                client, make_scene("cartpole:4,reach:1"), target_return={"cart": 450.0},
                max_env_steps=60_000, seed=seed, stop=stop,
            )
        stop.set()  # the first to finish stops the other

    with running_gateway(settings) as gateway:
        threads = [threading.Thread(target=play, args=(t, s)) for t, s in (("tcp", 1), ("ws", 2))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        policies = {p["module_id"]: p for p in httpx.get(f"{gateway.base_url}/api/policies").json()}

    assert any(result.reached_target for result in results.values()), {t: r.summary() for t, r in results.items()}
    for result in results.values():  # both clients played, and both modules trained on both transports' data
        assert result.sent_steps > 0
    first = np.mean([r for result in results.values() for r in result.first_returns["reach"]])
    last = np.mean([result.mean_return("reach") for result in results.values()])
    assert first < -8 and last > first + 5, (first, last)  # random: -12.7; heading for the target: -1.2
    assert policies["cart"]["num_env_steps_trained_lifetime"] > 0 and policies["reach"]["num_env_steps_trained_lifetime"] > 0


def test_a_cooperative_task_learns_to_coordinate_far_beyond_random_play(tmp_path):
    game = CoordinationGame()
    team = {"observation_space": game.observation_space, "action_space": game.action_space}
    settings = gateway_settings(tmp_path, policies={"team": team}, policy_mapping={"agent_*": "team"})
    with running_gateway(settings) as gateway, connect(gateway, "ws") as client:
        result = run_scene(client, game, target_return=9.0, max_env_steps=50_000, seed=0)
    assert np.mean(result.first_returns["team"]) < 4  # random play: 2.5 of 10
    assert result.reached_target, result.summary()


def test_a_turn_based_two_player_game_trains_one_shared_policy(tmp_path):
    settings = gateway_settings(tmp_path, policies={"player": BOARD}, policy_mapping={"player_*": "player"})
    with running_gateway(settings) as gateway:
        before = win_rate_against_random(gateway, "player", seed=1)
        with connect(gateway, "tcp") as client:  # both players are the one policy: it plays itself, turn by turn
            trained = run_scene(client, CountdownGame(), max_env_steps=40_000, seed=2)
        after = win_rate_against_random(gateway, "player", seed=3)
    assert trained.outcome_counts("player")["draw"] == 0 and sum(trained.outcome_counts("player").values()) > 0
    assert before < 0.75 and after > 0.85, (before, after)


def self_play_status(gateway: RunningGateway, module_id: str) -> dict:
    (policy,) = [p for p in httpx.get(f"{gateway.base_url}/api/policies").json() if p["module_id"] == module_id]
    return policy["self_play"]


def test_self_play_beats_a_random_player_and_its_rating_against_the_random_reference_rises(tmp_path):
    # The default schedule (0.3 latest weights, 0.2 the random reference, the rest snapshots by PFSP)
    # and the default entropy floor of a self-play learner.
    self_play = {"snapshot_every": 2, "window": 5}
    settings = gateway_settings(
        tmp_path,
        policies={"learner": {**BOARD, "self_play": self_play}},
        policy_mapping={"player_0": "learner", "player_1": "learner_opponent"},
        evaluation_interval=0,  # the early rating's bound was measured on training games alone (with them: 1,474 once)
    )
    with running_gateway(settings) as gateway:
        with connect(gateway, "tcp") as client:
            run_scene(client, CountdownGame(), max_env_steps=4_000, seed=0)
        early = self_play_status(gateway, "learner")
        with connect(gateway, "tcp") as client:
            run_scene(client, CountdownGame(), max_env_steps=40_000, seed=1)
        late = self_play_status(gateway, "learner")
        league_records = httpx.get(f"{gateway.base_url}/api/metrics").json()["policies"]["learner"]["league_records"]
        prometheus = httpx.get(f"{gateway.base_url}/metrics").text
        win_rate = win_rate_against_random(gateway, "learner", seed=4)
        learner_stats = httpx.get(f"{gateway.base_url}/api/metrics").json()["policies"]["learner"]["learner"]
    assert late["references"] == early["references"] == [{"name": "random", "elo": 1000.0, "scripted": False}]  # fixed: never moves
    assert late["rated_games"] > 500 and late["games"] > late["rated_games"]  # games against itself: not rated
    assert early["elo"] < 1000 + 300 < late["elo"] < 1000 + 1500, (early["elo"], late["elo"])
    (versus_random,) = [r for r in late["records"] if r["opponent"] == "random"]
    assert versus_random["seat"] == "player_0" and versus_random["win"] > 4 * versus_random["loss"], late["records"]
    assert league_records == late["records"]  # /api/metrics and Prometheus show them too
    labels = 'module_id="learner",opponent="random",outcome="win",seat="player_0"'
    assert f"rllink_policy_league_recent_games{{{labels}}} {float(versus_random['win'])}" in prometheus
    assert win_rate > 0.9, win_rate
    assert learner_stats["entropy_share"] > 0.05, learner_stats  # the floor (0.1 of the largest) held it up


def test_a_module_with_a_small_share_of_the_scene_trains_on_batches_of_its_own_size_and_learns(tmp_path):
    settings = gateway_settings(
        tmp_path, policies={"cart": CARTPOLE, "reach": REACH}, policy_mapping={"cart_*": "cart", "reach_*": "reach"}
    )
    with running_gateway(settings) as gateway, connect(gateway, "tcp") as client:
        # reach gets one agent step in nine: alone in each 500-step message it would train on ~55
        result = run_scene(client, make_scene("cartpole:8,reach:1"), target_return={"cart": 450.0, "reach": -3.0},
                           max_env_steps=60_000, seed=0)
        policies = httpx.get(f"{gateway.base_url}/api/metrics").json()["policies"]
    assert result.reached_target, result.summary()
    assert np.mean(result.first_returns["reach"]) < -8  # random: -12.7
    reach = policies["reach"]  # its batches: about env_steps_per_sample (500) or more, never its ~55 of a message
    assert 400 <= reach["max_batch_env_steps"] <= 2000 and reach["last_batch_env_steps"] >= 100, reach
