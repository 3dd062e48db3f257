"""Server-side inference over real sockets: thin clients that run no model get actions from
the gateway, which builds their episodes and trains on them like any other client's."""

from __future__ import annotations

import threading

import httpx
import numpy as np
import pytest

from rllink_clients.gym_client import run
from rllink_clients.thin_client import run_thin

from .helpers import TcpPeer, WsPeer, frame, gateway_settings, running_gateway, wait_until

OBS = [0.01, -0.02, 0.03, 0.04]
TARGET = 200  # a mean return of CartPole far past random play (22); 450 doubled these tests' time


def start(peer, **fields) -> str:
    peer.send(frame({"type": "START_EPISODE", **fields}))
    reply = peer.receive()
    assert reply["type"] == "EPISODE_STARTED", reply
    return reply["episode_id"]


def accounting(gateway) -> dict:
    """The training counters once idle: every env step sampled is trained, dropped or pending."""
    service = gateway.service
    wait_until(lambda: not service.status().training_in_progress, 60, "the training step to end")
    metrics = service.metrics
    return {
        "sampled": metrics.num_env_steps_sampled_lifetime,
        "accounted": metrics.num_env_steps_trained_lifetime + sum(metrics.dropped_env_steps.values())
        + service.status().pending_env_steps + service.status().training_env_steps,
    }


@pytest.mark.e2e
@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_a_thin_client_that_runs_no_model_trains_cartpole(tmp_path, transport):
    with running_gateway(gateway_settings(tmp_path)) as gateway, gateway.client(transport) as client:
        result = run_thin(client, "CartPole-v1", target_return=TARGET, max_env_steps=200_000, seed=0)
        serving = httpx.get(f"{gateway.base_url}/api/metrics").json()["serving"]
        counts = accounting(gateway)
    assert result.reached_target, (result.env_steps, result.mean_return)
    assert np.mean(result.first_returns) < 60  # it started from scratch
    assert serving["actions_served_total"] == result.env_steps and serving["open_episodes"] == 0
    played = result.episodes + len(result.evaluations)  # every 10th the gateway played as an evaluation episode
    assert serving["episodes_ended"]["terminated"] + serving["episodes_ended"].get("truncated", 0) == played
    assert len(result.evaluations) == played // 10
    evaluated = gateway.service.metrics.num_env_steps_evaluated_lifetime
    assert counts["sampled"] == counts["accounted"] == result.env_steps - evaluated  # every step of every ended episode


def test_batched_and_single_requests_give_the_same_deterministic_actions(tmp_path):
    rng = np.random.default_rng(0)
    observations = rng.uniform(-1, 1, (32, 4)).tolist()
    with running_gateway(gateway_settings(tmp_path)) as gateway, TcpPeer.connect(gateway) as peer:
        ids = [start(peer) for _ in observations]
        singles = []
        for episode_id, obs in zip(ids, observations):
            peer.send(frame({"type": "GET_ACTION", "episode_id": episode_id, "obs": obs, "explore": False}))
            reply = peer.receive()
            assert reply["type"] == "ACTION" and reply["episode_id"] == episode_id, reply
            singles.append(reply["action"])
        batch = [{"episode_id": i, "obs": obs, "explore": False} for i, obs in zip(ids, observations)]
        peer.send(frame({"type": "GET_ACTION", "batch": batch}))
        batched = peer.receive()
    assert batched["type"] == "ACTION" and batched["actions"] == singles
    assert len(set(singles)) == 2  # both actions occur: the comparison says something


def test_a_thin_client_and_an_onnx_client_train_one_policy_together(tmp_path):
    stop = threading.Event()
    results = {}

    def play(kind):
        with gateway.client("tcp") as client:
            play_fn = run_thin if kind == "thin" else run
            results[kind] = play_fn(client, "CartPole-v1", target_return=TARGET, max_env_steps=200_000, seed=1, stop=stop)
        stop.set()

    with running_gateway(gateway_settings(tmp_path)) as gateway:
        threads = [threading.Thread(target=play, args=(kind,)) for kind in ("thin", "onnx")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        counts = accounting(gateway)
    assert any(result.reached_target for result in results.values()), {k: r.mean_return for k, r in results.items()}
    assert results["thin"].env_steps > 1000 and results["onnx"].env_steps > 1000
    assert counts["sampled"] == counts["accounted"]


def test_clients_killed_mid_episode_leave_their_steps_trained_and_counted(tmp_path):
    settings = gateway_settings(tmp_path, train_batch_size=100_000)
    with running_gateway(settings) as gateway:
        for transport_peer in (TcpPeer.connect(gateway), WsPeer(gateway)):
            with transport_peer as peer:
                episode_id = start(peer)
                for _ in range(7):  # 7 actions, 6 of them with their next observation
                    peer.send(frame({"type": "GET_ACTION", "episode_id": episode_id, "obs": OBS}))
                    assert peer.receive()["type"] == "ACTION"
                    peer.send(frame({"type": "LOG_RETURNS", "episode_id": episode_id, "reward": 1.0}))
            # gone without END_EPISODE
        serving = gateway.serving.metrics
        wait_until(lambda: serving.open_episodes == 0, 10, "the episodes to end")
        assert serving.episodes_ended["disconnect"] == 2
        assert gateway.service.status().pending_env_steps == 12  # two episodes of 6 complete steps, truncated
        counts = accounting(gateway)
        assert counts["sampled"] == counts["accounted"] == 12


def test_an_idle_episode_ends_as_truncated_and_its_steps_train(tmp_path):
    settings = gateway_settings(tmp_path, episode_timeout_s=0.2, train_batch_size=100_000)
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as peer:
        episode_id = start(peer)
        for _ in range(3):
            peer.send(frame({"type": "GET_ACTION", "episode_id": episode_id, "obs": OBS}))
            assert peer.receive()["type"] == "ACTION"
        wait_until(lambda: gateway.serving.metrics.episodes_ended["timeout"] == 1, 10, "the episode to time out")
        assert gateway.service.status().pending_env_steps == 2
        peer.send(frame({"type": "GET_ACTION", "episode_id": episode_id, "obs": OBS}))
        assert peer.receive()["code"] == "unknown_episode"


def test_evaluation_episodes_are_served_but_not_trained_and_logged_actions_are(tmp_path):
    settings = gateway_settings(tmp_path, train_batch_size=100_000)
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as peer:
        evaluation = start(peer, training_enabled=False)
        scripted = start(peer)
        for _ in range(4):
            peer.send(frame({"type": "GET_ACTION", "episode_id": evaluation, "obs": OBS, "explore": False}))
            assert peer.receive()["type"] == "ACTION"
            peer.send(frame({"type": "LOG_ACTION", "episode_id": scripted, "obs": OBS, "action": 1}))
        for episode_id in (evaluation, scripted):
            peer.send(frame({"type": "END_EPISODE", "episode_id": episode_id, "obs": OBS}))
        peer.send(frame({"type": "PING"}))
        assert peer.receive()["type"] == "PONG"
        assert gateway.service.metrics.num_env_steps_sampled_lifetime == 4  # the logged episode only
        assert gateway.serving.metrics.actions_logged_total == 4
        assert gateway.service.metrics.num_episodes_lifetime == 1


BAD_REQUESTS = [
    ({"type": "GET_ACTION", "episode_id": "never-started", "obs": OBS}, "unknown_episode", "never started"),
    ({"type": "GET_ACTION", "episode_id": "{open}", "obs": [1.0, 2.0]}, "invalid_message", "obs must have shape [4]"),
    ({"type": "LOG_RETURNS", "episode_id": "{fresh}", "reward": 1.0}, "invalid_message", "no action yet"),
    ({"type": "LOG_RETURNS", "episode_id": "{open}", "reward": "much"}, "invalid_message", "reward must be a number"),
    ({"type": "LOG_RETURNS", "episode_id": "{open}", "reward": 1e39}, "invalid_message", "leave float32's range"),
    ({"type": "GET_ACTION", "batch": [{"episode_id": "{open}", "obs": OBS}] * 2}, "invalid_message", "more than once"),
    ({"type": "GET_ACTION", "batch": [{"episode_id": "{open}", "obs": OBS}, {"episode_id": "{fresh}", "obs": [1.0]}]},
     "invalid_message", "batch[1].obs must have shape [4]"),
    ({"type": "GET_ACTION", "batch": [{"episode_id": "{open}", "obs": [1.0]}, {"episode_id": "{fresh}", "obs": [2.0]}]},
     "invalid_message", "batch[0].obs must have shape [4]"),
    ({"type": "GET_ACTION", "batch": [{"episode_id": "{open}", "obs": OBS}, {"episode_id": "{fresh}", "obs": OBS, "explore": 1}]},
     "invalid_message", "batch item 1: explore must be true or false"),
    ({"type": "GET_ACTION", "batch": [{"episode_id": "{open}", "obs": OBS}] * 9}, "invalid_message", "the limit is 8"),
    ({"type": "GET_ACTION", "episode_id": "{open}"}, "invalid_message", "give episode_id and obs"),
    ({"type": "LOG_ACTION", "episode_id": "{open}", "obs": OBS, "action": 5}, "invalid_message", "integer in 0..1"),
    ({"type": "END_EPISODE", "episode_id": "{open}", "obs": OBS, "is_terminated": False}, "invalid_message", "needs is_terminated"),
    ({"type": "START_EPISODE", "agent_id": "x", "module_id": "ghost"}, "invalid_message", "not a module"),
    ({"type": "START_EPISODE", "episode_id": "{open}"}, "invalid_message", "already open"),
    ({"type": "START_EPISODE"}, "too_many_episodes", "max_open_episodes_per_connection"),
]


NAMES_ITS_EPISODE = {
    "never started", "obs must have shape [4]", "no action yet", "leave float32's range", "integer in 0..1", "needs is_terminated",
    "already open",
}


@pytest.mark.parametrize(("request_", "code", "problem"), BAD_REQUESTS, ids=[p for _, _, p in BAD_REQUESTS])
def test_bad_thin_client_input_gets_a_clear_error_and_the_connection_stays_usable(tmp_path, request_, code, problem):
    settings = gateway_settings(tmp_path, max_actions_per_message=8, max_open_episodes_per_connection=2)
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as peer:
        ids = {"open": start(peer), "fresh": start(peer)}
        peer.send(frame({"type": "GET_ACTION", "episode_id": ids["open"], "obs": OBS}))
        assert peer.receive()["type"] == "ACTION"
        message = {key: (value.format(**ids) if isinstance(value, str) else value) for key, value in request_.items()}
        if "batch" in message:
            message["batch"] = [{**item, "episode_id": item["episode_id"].format(**ids)} for item in message["batch"]]
        peer.send(frame(message) + frame({"type": "PING"}))
        error, pong = peer.receive_many(2)
        assert error["type"] == "ERROR" and error["code"] == code and problem in error["message"], error
        if problem in NAMES_ITS_EPISODE:  # refused by the serving, not by the message's schema
            assert error["details"] == {"episode_id": message["episode_id"]}, error
        assert pong["type"] == "PONG"
        peer.send(frame({"type": "GET_ACTION", "episode_id": ids["open"], "obs": OBS}))
        assert peer.receive()["type"] == "ACTION"  # the open episode goes on


def test_steps_refused_for_numbers_beyond_float32_leave_the_episode_whole(tmp_path):
    """A reward or a logged action a chunk could not hold (float32) is refused when it comes,
    and the episode's steps, cut into chunks later, all train."""
    arm = {"observation_space": {"type": "box", "shape": [3]}, "action_space": {"type": "box", "shape": [1], "low": -2.0, "high": 2.0}}
    settings = gateway_settings(tmp_path, policies={"arm": arm}, env_steps_per_sample=3, train_batch_size=100_000)
    obs = [0.0, 1.0, 2.0]
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as peer:
        episode = start(peer)
        for _ in range(3):
            peer.send(frame({"type": "GET_ACTION", "episode_id": episode, "obs": obs}))
            assert peer.receive()["type"] == "ACTION"
        peer.send(frame({"type": "LOG_RETURNS", "episode_id": episode, "reward": 3e38}))
        peer.send(frame({"type": "LOG_RETURNS", "episode_id": episode, "reward": 3e38}) + frame({"type": "PING"}))
        error, pong = peer.receive_many(2)  # the first fits a float32, the sum would not
        assert error["type"] == "ERROR" and "leave float32's range" in error["message"] and pong["type"] == "PONG", error
        peer.send(frame({"type": "LOG_ACTION", "episode_id": episode, "obs": obs, "action": [1e30]}) + frame({"type": "PING"}))
        error, pong = peer.receive_many(2)
        assert error["type"] == "ERROR" and "log-prob" in error["message"] and pong["type"] == "PONG", error
        for _ in range(2):  # the first of these completes the 3rd step, and its chunk goes to training
            peer.send(frame({"type": "GET_ACTION", "episode_id": episode, "obs": obs}))
            assert peer.receive()["type"] == "ACTION"
        peer.send(frame({"type": "END_EPISODE", "episode_id": episode, "obs": obs}) + frame({"type": "PING"}))
        assert peer.receive()["type"] == "PONG"
        metrics = gateway.service.metrics.snapshot()["policies"]["arm"]
        assert gateway.service.metrics.num_env_steps_sampled_lifetime == 5
        assert metrics["episode_return_mean"] == pytest.approx(3e38, rel=1e-6)
        totals = accounting(gateway)
    assert totals["sampled"] == totals["accounted"] == 5


def test_thin_clients_play_any_module_and_an_opponent_is_served_but_not_trained(tmp_path):
    policies = {
        "cart": {"observation_space": {"type": "box", "shape": [4]}, "action_space": {"type": "discrete", "n": 2}},
        "arm": {"observation_space": {"type": "box", "shape": [3]},
                "action_space": {"type": "box", "shape": [1], "low": -2.0, "high": 2.0}, "self_play": {}},
    }
    settings = gateway_settings(tmp_path, policies=policies, policy_mapping={"arm_b": "arm_opponent", "arm*": "arm"},
                                train_batch_size=100_000)
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as peer:
        cart, arm, opponent = start(peer), start(peer, agent_id="arm_a"), start(peer, agent_id="arm_b")
        batch = [{"episode_id": cart, "obs": OBS}, {"episode_id": arm, "obs": [0.0, 1.0, 2.0]},
                 {"episode_id": opponent, "obs": [0.0, 1.0, 2.0]}]
        for _ in range(50):
            peer.send(frame({"type": "GET_ACTION", "batch": batch}))
            reply = peer.receive()
            assert reply["type"] == "ACTION", reply
            cart_action, arm_action, opponent_action = reply["actions"]
            assert cart_action in (0, 1) and -2.0 <= arm_action[0] <= 2.0 and -2.0 <= opponent_action[0] <= 2.0
        for episode_id in (cart, arm, opponent):
            peer.send(frame({"type": "END_EPISODE", "episode_id": episode_id, "obs": OBS if episode_id == cart else [0.0, 1.0, 2.0]}))
        peer.send(frame({"type": "PING"}))
        assert peer.receive()["type"] == "PONG"
        policies_now = {m: p.num_env_steps_sampled_lifetime for m, p in gateway.service.metrics.modules.items()}
    assert policies_now == {"cart": 50, "arm": 50, "arm_opponent": 0}


@pytest.mark.parametrize("play_ratio", [0.5, 0.0])
def test_a_thin_client_cannot_play_an_opponent_whose_league_draws_a_scripted_reference(tmp_path, play_ratio):
    # The gateway has only a stand-in (uniformly random) for a scripted reference: serving it
    # would count random play as the scripted player's games. Never drawn (play_ratio 0): served.
    self_play = {"play_against_random_ratio": 0.1, "scripted_references": {"lookahead": {"elo": 1560, "play_ratio": play_ratio}}}
    policies = {"c4": {"observation_space": {"type": "box", "shape": [3]}, "action_space": {"type": "discrete", "n": 2},
                       "self_play": self_play}}
    settings = gateway_settings(tmp_path, policies=policies, policy_mapping={"p0": "c4", "p1": "c4_opponent"})
    with running_gateway(settings) as gateway, TcpPeer.connect(gateway) as peer:
        learner = start(peer, agent_id="p0")  # the learner's seat is served either way
        peer.send(frame({"type": "START_EPISODE", "agent_id": "p1"}))
        reply = peer.receive()
        if play_ratio:
            assert reply["type"] == "ERROR" and reply["code"] == "invalid_message", reply
            assert "'c4_opponent' is the self-play opponent of 'c4'" in reply["message"] and "'lookahead'" in reply["message"]
        else:
            assert reply["type"] == "EPISODE_STARTED", reply
        peer.send(frame({"type": "GET_ACTION", "episode_id": learner, "obs": [0.0, 1.0, 2.0]}))  # the connection goes on
        assert peer.receive()["type"] == "ACTION"
