"""The multi-agent games, the gymnasium scene and the multi-agent client: its chunk
building and sampling exactly (fixed ONNX models with constant outputs), and its loop
against a real gateway (what it sends, what the gateway trains on).
"""

from __future__ import annotations

import base64
import functools
import gzip
from collections import defaultdict
from typing import Any

import httpx
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from rllink_clients.games import (
    CoordinationGame,
    CountdownGame,
    counter_of,
    optimal_action,
    random_opponent,
    scripted_opponent,
)
from rllink_clients.multi_agent import (
    Casting,
    GatewayConfig,
    ModulePolicies,
    ModuleSpec,
    PlayedAction,
    SceneCollector,
    UnmappedAgent,
    make_scene,
    parse_target,
    run_scene,
    swapped_seatings,
)
from rllink_clients.multi_agent_env import ALL, MultiAgentEnv, gymnasium_scene

from .helpers import gateway_settings, recording_client, running_gateway

# --- CoordinationGame ----------------------------------------------------------------------


def test_an_observation_goes_out_in_its_module_s_shape_when_its_values_are_as_many() -> None:
    board = np.arange(84, dtype=np.float32).reshape(6, 7, 2)
    grid, flat = (ModuleSpec("c4", {"type": "box", "shape": shape}, {"type": "discrete", "n": 7}, "obs") for shape in ([6, 7, 2], [84]))
    assert grid.observed(board) is board  # already its shape: untouched
    assert flat.observed(board).shape == (84,) and flat.observed(board).tolist() == board.ravel().tolist()  # C order
    assert grid.observed(board.ravel()).shape == (6, 7, 2) and grid.observed(board.ravel()).tolist() == board.tolist()
    assert flat.observed(np.zeros(83)).shape == (83,)  # another size: left for the shape check to name
    spaces = {"type": "dict", "spaces": {"a": {"type": "box", "shape": [2]}}}
    assert ModuleSpec("d", spaces, {"type": "discrete", "n": 2}, "obs").observed([1.0, 2.0]) == [1.0, 2.0]


def test_coordination_observations_rewards_and_end() -> None:
    game = CoordinationGame()
    obs, _ = game.reset(seed=0)
    assert set(obs) == {"agent_0", "agent_1"} and obs["agent_0"].shape == (12,)
    assert obs["agent_0"].tolist() == [1] + [0] * 9 + [1, 0]
    assert obs["agent_1"].tolist() == [1] + [0] * 9 + [0, 1]
    for step in range(1, 11):
        same = step % 2 == 0
        obs, rewards, terminateds, truncateds, _ = game.step({"agent_0": 2, "agent_1": 2 if same else 3})
        assert rewards == {"agent_0": float(same), "agent_1": float(same)}
        assert terminateds[ALL] is (step == 10) and truncateds[ALL] is False
        assert set(obs) == {"agent_0", "agent_1"}  # both act every step, and both get the final observation
    assert obs["agent_0"].tolist() == [0] * 10 + [1, 0]  # no step index after the last step
    with pytest.raises(ValueError, match="both agents"):
        CoordinationGame().step({"agent_0": 0})


def test_random_coordination_scores_2_5_and_agreeing_scores_10() -> None:
    rng = np.random.default_rng(0)
    game, returns = CoordinationGame(), []
    for _ in range(4000):
        game.reset()
        total, done = 0.0, False
        while not done:
            _, rewards, terminateds, _, _ = game.step({agent: int(rng.integers(4)) for agent in game.possible_agents})
            total, done = total + rewards["agent_0"], terminateds[ALL]
        returns.append(total)
    assert abs(np.mean(returns) - 2.5) < 0.1  # standard error ~0.02
    game.reset()
    assert sum(game.step({"agent_0": t % 4, "agent_1": t % 4})[1]["agent_1"] for t in range(10)) == 10.0


# --- CountdownGame ---------------------------------------------------------------------------


def test_countdown_turns_alternate_and_the_player_reaching_21_wins() -> None:
    game = CountdownGame()
    starters = set()
    for seed in range(20):
        obs, _ = game.reset(seed=seed)
        (mover,) = obs
        starters.add(mover)
        assert counter_of(obs[mover]) == 0 and obs[mover].shape == (22,)
        moves = 0
        while True:
            other = "player_1" if mover == "player_0" else "player_0"
            with pytest.raises(ValueError, match="turn"):
                game.step({other: 0})
            before = game.counter
            obs, rewards, terminateds, truncateds, infos = game.step({mover: 2})  # +3
            moves += 1
            assert game.counter == before + 3
            if terminateds[ALL]:
                break
            assert list(obs) == [other] and counter_of(obs[other]) == game.counter
            assert not truncateds[ALL] and rewards.get(other, 0.0) == 0.0
            mover = other
        assert moves == 7 and game.counter == 21  # 7 moves of +3: the 7th mover wins
        assert set(obs) == {"player_0", "player_1"}
        assert all(counter_of(o) == 21 for o in obs.values())  # index 21: the game is over
        assert rewards == {mover: 1.0, other: -1.0}
        assert infos[mover]["outcome"] == "win" and infos[other]["outcome"] == "loss"
        assert terminateds == {"player_0": True, "player_1": True, ALL: True}
    assert starters == {"player_0", "player_1"}


def test_optimal_action_leaves_a_multiple_of_four() -> None:
    for counter in range(21):
        move = optimal_action(counter) + 1
        if (21 - counter) % 4 == 0:
            assert move == 1  # lost against perfect play: prolong the game
        else:
            assert counter + move == 21 or (21 - counter - move) % 4 == 0
    assert scripted_opponent(CountdownGame().observe()) == optimal_action(0) == 0  # 21 - 1 = 20


@pytest.mark.parametrize("optimal_starts", [True, False])
def test_optimal_play_beats_random_play_from_either_side(optimal_starts: bool) -> None:
    game, rng = CountdownGame(), np.random.default_rng(1)
    play_random = functools.partial(random_opponent, rng=rng)
    wins = games = 0
    for seed in range(4000):
        obs, _ = game.reset(seed=seed)
        optimal = next(iter(obs)) if optimal_starts else ("player_1" if "player_0" in obs else "player_0")
        games += 1
        while True:
            (mover,) = obs
            play = scripted_opponent if mover == optimal else play_random
            obs, rewards, terminateds, _, infos = game.step({mover: play(obs[mover])})
            if terminateds[ALL]:
                wins += infos[optimal]["outcome"] == "win"
                break
    assert wins / games > 0.95  # exact: 100% when the optimal player starts, 99.86% otherwise


# --- GymnasiumScene ----------------------------------------------------------------------------


def test_gymnasium_scene_restarts_each_agent_on_its_own() -> None:
    scene = gymnasium_scene({f"cart_{i}": "CartPole-v1" for i in range(3)} | {"pend_0": "Pendulum-v1"}, seed=3)
    assert isinstance(scene, MultiAgentEnv)
    obs, _ = scene.reset()
    rng, ended_at, just_ended = np.random.default_rng(0), defaultdict(list), set()
    for step in range(250):
        actions = {a: int(rng.integers(2)) if a.startswith("cart") else np.array([0.5], np.float32) for a in obs}
        obs, rewards, terminateds, truncateds, _ = scene.step(actions)
        assert terminateds[ALL] is False and truncateds[ALL] is False
        assert set(obs) - set(rewards) == just_ended  # back with a reset observation, after sitting out a step
        just_ended = {a for a in obs if terminateds.get(a) or truncateds.get(a)}
        for agent in just_ended:
            ended_at[agent].append((step, "truncated" if truncateds[agent] else "terminated"))
        obs = {a: o for a, o in obs.items() if a not in just_ended}
    assert all(len(ended_at[f"cart_{i}"]) >= 2 for i in range(3))  # random CartPoles fall within ~50 steps
    assert ended_at["pend_0"] == [(199, "truncated")]  # Pendulum's time limit: 200 steps


def test_gymnasium_scene_refuses_an_action_from_an_agent_sitting_out() -> None:
    scene = gymnasium_scene({"cart_0": "CartPole-v1", "pend_0": "Pendulum-v1"}, seed=0)
    scene.reset()
    terminateds: dict = {}
    while not terminateds.get("cart_0"):  # always pushing left: it falls within ~10 steps
        _, _, terminateds, _, _ = scene.step({"cart_0": 0, "pend_0": np.zeros(1, np.float32)})
    with pytest.raises(ValueError, match=r"expected actions for \['pend_0'\]"):
        scene.step({"cart_0": 0, "pend_0": np.zeros(1, np.float32)})
    obs, rewards, _, _, _ = scene.step({"pend_0": np.zeros(1, np.float32)})
    assert set(obs) == {"cart_0", "pend_0"} and set(rewards) == {"pend_0"}


# --- Chunk building ------------------------------------------------------------------------------


def played(action: Any, version: int = 0, logp: float = -1.0) -> PlayedAction:
    return PlayedAction(action, action, logp, version)


def test_turn_based_chunks_credit_each_players_last_action_and_carry_moves_in_flight() -> None:
    game = CountdownGame()
    collector = SceneCollector(game, sends=lambda agent: True, seed=5)
    (first,) = collector.acting
    second = "player_1" if first == "player_0" else "player_0"
    all_chunks = []
    for turn in range(7):  # +3 each: the first mover's 4th move (turn 6) reaches 21
        (mover,) = collector.acting
        assert mover == (first if turn % 2 == 0 else second)
        ended = collector.step({mover: played(2, version=turn)})  # as if each turn came with new weights
        if turn in (0, 3):  # cut mid-game: the player who just moved has a move in flight
            ready = collector.ready_steps
            chunks = collector.take_chunks()
            assert sum(len(c["actions"]) for c in chunks) == ready
            all_chunks += chunks
        if turn == 0:
            assert chunks == []  # the first mover's move is in flight, the second has not acted: T = 0 both
    assert {t.agent_id for t in ended} == {first, second}
    all_chunks += collector.take_chunks()
    by_agent = {a: [c for c in all_chunks if c["agent_id"] == a] for a in (first, second)}

    assert len({c["episode_id"] for c in all_chunks}) == 1  # one game, one episode id for both players
    for chunks in by_agent.values():
        for chunk in chunks:
            assert len(chunk["obs"]) == len(chunk["actions"]) + 1 >= 2
            assert len(chunk["rewards"]) == len(chunk["action_logp"]) == len(chunk["actions"])
        for previous, chunk in zip(chunks, chunks[1:]):
            assert chunk["obs"][0] == previous["obs"][-1]
            assert previous["is_terminated"] is False and previous["is_truncated"] is False
            assert "outcome" not in previous
        assert chunks[-1]["is_terminated"] is True and chunks[-1]["is_truncated"] is False
        observed = [counter_of(o) for c in chunks for o in c["obs"][1:]]
        assert observed[-1] == 21
    winner = [r for c in by_agent[first] for r in c["rewards"]]
    loser = [r for c in by_agent[second] for r in c["rewards"]]
    assert winner == [0.0, 0.0, 0.0, 1.0] and loser == [0.0, 0.0, -1.0]  # each on its own last move
    assert by_agent[first][-1]["outcome"] == "win" and by_agent[second][-1]["outcome"] == "loss"
    # The second player's move of turn 3 was in flight at the cut after it: the chunk that
    # carries it (with the move of turn 5) names the older version.
    assert [len(c["actions"]) for c in by_agent[second]] == [1, 2] and by_agent[second][-1]["weights_seq_no"] == 3
    assert [len(c["actions"]) for c in by_agent[first]] == [2, 2] and by_agent[first][-1]["weights_seq_no"] == 4


def test_only_agents_that_are_sent_count_and_appear() -> None:
    game = CoordinationGame()
    collector = SceneCollector(game, sends=lambda agent: agent == "agent_0", seed=0)
    for _ in range(4):
        collector.step({a: played(1) for a in collector.acting})
    assert collector.ready_steps == 4
    chunks = collector.take_chunks()
    assert [c["agent_id"] for c in chunks] == ["agent_0"] and chunks[0]["rewards"] == [1.0] * 4
    assert collector.ready_steps == 0 and collector.take_chunks() == []  # nothing complete: nothing sent
    for _ in range(6):
        ended = collector.step({a: played(1) for a in collector.acting})
    assert sorted(t.agent_id for t in ended) == ["agent_0", "agent_1"] and ended[0].episode_return == 10.0
    assert collector.scene_episodes == 1 and set(collector.acting) == {"agent_0", "agent_1"}  # reset
    (chunk,) = collector.take_chunks()
    assert len(chunk["actions"]) == 6 and chunk["is_terminated"] is True and chunk["obs"][0] == chunks[0]["obs"][-1]


def test_every_third_episode_of_a_scene_and_of_an_agent_restarting_alone_is_an_evaluation_one() -> None:
    collector = SceneCollector(CoordinationGame(), sends=lambda agent: True, seed=0, evaluation_interval=3)
    flags = []
    for _ in range(7):  # scene episodes of 10 steps: the 3rd and the 6th are evaluation ones
        flags.append(collector.evaluating)
        for _ in range(10):
            assert collector.evaluating == flags[-1]
            collector.step({a: played(1) for a in collector.acting})
    both = {"agent_0", "agent_1"}
    assert flags == [set(), set(), both, set(), set(), both, set()]
    assert collector.scene_episodes == 7 and collector.evaluation_scene_episodes == 2
    chunks = collector.take_chunks()
    assert [c["agent_id"] for c in chunks if c.get("evaluation")] == ["agent_0", "agent_1"] * 2
    assert all(c["evaluation"] is True for c in chunks if "evaluation" in c)

    scene = gymnasium_scene({"cart_0": "CartPole-v1", "cart_1": "CartPole-v1"}, seed=0)
    collector = SceneCollector(scene, sends=lambda agent: True, seed=0, evaluation_interval=2)
    ended: list = []
    while sum(t.agent_id == "cart_0" for t in ended) < 5:
        ended += collector.step({a: played(0) for a in collector.acting})  # always left: falls in ~10 steps
    assert [t.evaluation for t in ended if t.agent_id == "cart_0"] == [False, True, False, True, False]  # its own 2nd, 4th
    chunks = [c for c in collector.take_chunks() if c["agent_id"] == "cart_0"]
    assert [c.get("evaluation", False) for c in chunks if c["is_terminated"]] == [False, True, False, True, False]


def test_each_sub_episode_of_a_scene_agent_has_its_own_episode_id() -> None:
    scene = gymnasium_scene({"cart_0": "CartPole-v1", "cart_1": "CartPole-v1"}, seed=0)
    collector = SceneCollector(scene, sends=lambda agent: True, seed=0)
    ended = []
    while sum(t.agent_id == "cart_0" for t in ended) < 3:
        ended += collector.step({a: played(0) for a in collector.acting})  # always left: falls in ~10 steps
    chunks = [c for c in collector.take_chunks() if c["agent_id"] == "cart_0"]
    finished = [c for c in chunks if c["is_terminated"]]
    assert len(finished) == 3 and len({c["episode_id"] for c in chunks}) == len(chunks)
    assert [sum(c["rewards"]) for c in finished] == [t.episode_return for t in ended if t.agent_id == "cart_0"]
    assert collector.scene_episodes == 0  # the scene itself never ends


class ScriptedEnv:
    """Replays fixed step results (observations are the step number), to try edge cases."""

    possible_agents = ["a", "b"]

    def __init__(self, first_obs: list[str], steps: list[tuple[list[str], dict, dict]]) -> None:
        self.first_obs, self.steps, self.t = first_obs, steps, 0

    def reset(self, seed: int | None = None) -> tuple[dict, dict]:
        self.t = 0
        return {agent: np.zeros(1) for agent in self.first_obs}, {}

    def step(self, action_dict: dict) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        obs_agents, rewards, terminateds = self.steps[self.t - 1]
        return {agent: np.full(1, self.t) for agent in obs_agents}, rewards, terminateds, {ALL: False}, {}


def test_rewards_go_to_the_last_action_and_are_dropped_without_one() -> None:
    env = ScriptedEnv(
        ["a"],
        [
            (["a", "b"], {"a": 1.0, "b": 7.0}, {ALL: False}),  # b has not acted: its 7 has no step
            (["a", "b"], {"a": 2.0, "b": 3.0}, {"a": True, ALL: False}),  # a is done early
            (["b"], {"a": 100.0, "b": 4.0}, {ALL: True}),  # a is done: its 100 has no step
        ],
    )
    collector = SceneCollector(env, sends=lambda agent: True)
    for _ in range(3):
        collector.step({agent: played(0) for agent in collector.acting})
    a, b = collector.take_chunks()
    assert (a["agent_id"], a["rewards"], a["obs"]) == ("a", [1.0, 2.0], [[0.0], [1.0], [2.0]])
    assert (b["agent_id"], b["rewards"], b["obs"]) == ("b", [3.0, 4.0], [[1.0], [2.0], [3.0]])
    assert a["is_terminated"] and b["is_terminated"] and a["episode_id"] == b["episode_id"]


def test_an_episode_that_drops_an_acting_agent_is_refused() -> None:
    env = ScriptedEnv(["a", "b"], [(["a"], {"b": 5.0}, {ALL: True})])  # b acted but gets no final observation
    collector = SceneCollector(env, sends=lambda agent: True)
    with pytest.raises(ValueError, match=r"without a final observation for \['b'\]"):
        collector.step({"a": played(0), "b": played(0)})


# --- The client loop against a real gateway ----------------------------------------------


def constant_model(
    input_name: str, obs_dim: int, outputs: list[float], mask_input: str | None = None, noise_free: list[float] | None = None
) -> str:
    """A base64 gzipped ONNX model whose output 0 is `outputs` for every observation; with
    `mask_input`, masked as the gateway's masked models are: `logits + (mask - 1) * 1e8`;
    with `noise_free`, a second output of it, as a gSDE model's `action_dist_inputs_noise_free`."""
    width = len(outputs)
    weights = numpy_helper.from_array(np.zeros((obs_dim, width), np.float32), "W")
    bias = numpy_helper.from_array(np.asarray(outputs, np.float32), "b")
    inputs = [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["batch", obs_dim])]
    nodes = [helper.make_node("Gemm", [input_name, "W", "b"], ["logits" if mask_input else "dist_inputs"])]
    initializers = [weights, bias]
    if mask_input:
        inputs.append(helper.make_tensor_value_info(mask_input, TensorProto.FLOAT, ["batch", width]))
        initializers += [numpy_helper.from_array(np.float32(1.0), "one"), numpy_helper.from_array(np.float32(1e8), "penalty")]
        nodes += [
            helper.make_node("Sub", [mask_input, "one"], ["shifted"]),
            helper.make_node("Mul", ["shifted", "penalty"], ["masked_off"]),
            helper.make_node("Add", ["logits", "masked_off"], ["dist_inputs"]),
        ]
    graph_outputs = [helper.make_tensor_value_info("dist_inputs", TensorProto.FLOAT, ["batch", width])]
    if noise_free is not None:
        initializers.append(numpy_helper.from_array(np.asarray(noise_free, np.float32), "b_noise_free"))
        nodes.append(helper.make_node("Gemm", [input_name, "W", "b_noise_free"], ["action_dist_inputs_noise_free"]))
        graph_outputs.append(helper.make_tensor_value_info("action_dist_inputs_noise_free", TensorProto.FLOAT, ["batch", width]))
    graph = helper.make_graph(nodes, "policy", inputs, graph_outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    return base64.b64encode(gzip.compress(model.SerializeToString())).decode()


def policy(obs_space: dict, action_space: dict, *, trainable: bool = True, distribution: str | None = None) -> dict:
    distribution = distribution or ("categorical" if action_space["type"] == "discrete" else "gaussian")
    return {
        "observation_space": obs_space,
        "action_space": action_space,
        "onnx_input_name": "obs",
        "onnx_output_names": ["dist_inputs"],
        "action_distribution": distribution,
        "trainable": trainable,
    }


def set_config(policies: dict, mapping: dict | None = None) -> dict:
    """A SET_CONFIG as the gateway words it, for the sampling tests' fixed models."""
    return {
        "type": "SET_CONFIG",
        "env_steps_per_sample": 10,
        "force_on_policy": True,
        "policies": policies,
        "policy_mapping": mapping or {},
        "default_module_id": next(iter(policies)),
    }


def set_state(models: dict[str, str]) -> dict:
    return {"type": "SET_STATE", "weights_seq_no": 0, "onnx_files": models, "onnx_file": next(iter(models.values()))}


BOX2, BOX3, BOX4, BOARD = ({"type": "box", "shape": [n]} for n in (2, 3, 4, 22))
PEND_ACTIONS = {"type": "box", "shape": [1], "low": -2.0, "high": 2.0}
REACH_ACTIONS = {"type": "box", "shape": [1], "low": -1.0, "high": 1.0}
MOVES = {"type": "discrete", "n": 3}


def test_run_scene_plays_two_modules_in_batches_and_sends_their_chunks_every_third_episode_evaluated(tmp_path) -> None:
    policies = {
        "cart": {"observation_space": BOX4, "action_space": {"type": "discrete", "n": 2}},
        "reach": {"observation_space": BOX2, "action_space": REACH_ACTIONS},
    }
    settings = gateway_settings(
        tmp_path, policies=policies, policy_mapping={"cart_*": "cart", "reach_*": "reach"}, env_steps_per_sample=200, evaluation_interval=3
    )
    with running_gateway(settings) as gateway, recording_client(gateway, "ws") as client:
        result = run_scene(client, make_scene("cartpole:8,reach:1"), max_env_steps=400, seed=0)
        trained = {p["module_id"]: p["num_env_steps_trained_lifetime"] for p in httpx.get(f"{gateway.base_url}/api/policies").json()}
        metrics = httpx.get(f"{gateway.base_url}/api/metrics").json()
    assert result.env_steps >= 400
    # Every agent acts on every step but the one after each of its episodes ends.
    ended = result.episodes + result.evaluation_episodes
    assert 0 <= result.agent_steps - (9 * result.env_steps - ended) <= 9  # (the last step's ends: not yet)
    assert len(client.sent) == result.weights_seq_no and result.sent_steps == sum(m["timesteps"] for m in client.sent)
    # Every training step sent is trained, or waits for its module's next batch (reach's share of
    # a message is ~1/9 of 200: it trains once it holds 200, or when it holds the most).
    assert sum(trained.values()) + metrics["pending_env_steps"] == result.sent_steps - result.evaluated_steps and trained["reach"] > 0
    for message in client.sent:
        assert message["timesteps"] == sum(len(c["actions"]) for c in message["episodes"]) >= 200
    chunks = [c for m in client.sent for c in m["episodes"]]
    reach = [a[0] for c in chunks if c["agent_id"] == "reach_0" and not c.get("evaluation") for a in c["actions"]]
    assert trained["reach"] <= len(reach) and max(abs(a) for a in reach) > 1.0  # unclipped samples go into the chunk
    assert result.mean_return("reach") < 0 and len(result.module_returns["cart"]) == 20
    by_agent_episode: dict[tuple, list] = {}
    for chunk in chunks:
        by_agent_episode.setdefault((chunk["agent_id"], chunk["episode_id"]), []).append(chunk)
    for pieces in by_agent_episode.values():
        for previous, chunk in zip(pieces, pieces[1:]):
            assert chunk["obs"][0] == previous["obs"][-1] and not previous["is_terminated"]

    # Evaluation episodes: each agent's 3rd, 6th, ... episode (each agent's env its own), every chunk of it marked.
    for agent_id in make_scene("cartpole:8,reach:1").possible_agents:
        episodes = [pieces for (agent, _), pieces in by_agent_episode.items() if agent == agent_id]  # in the order played
        assert all(len({bool(c.get("evaluation")) for c in pieces}) == 1 for pieces in episodes)
        assert [bool(pieces[0].get("evaluation")) for pieces in episodes] == [i % 3 == 2 for i in range(len(episodes))]
    assert metrics["num_evaluation_episodes_lifetime"] == result.evaluation_episodes > 8
    assert metrics["num_episodes_lifetime"] == result.episodes  # every episode that ended was sent
    for module_id in ("cart", "reach"):  # the gateway counts each module's evaluation episodes and steps as the client played them
        seen, evaluations = metrics["policies"][module_id], result.evaluations[module_id]
        sent = [c for c in chunks if c["module_id"] == module_id]
        evaluated = [c for c in sent if c.get("evaluation")]
        ended = sum(c["is_terminated"] or c["is_truncated"] for c in evaluated)
        assert seen["num_evaluation_episodes_lifetime"] == len(evaluations) == ended
        assert seen["num_env_steps_evaluated_lifetime"] == sum(len(c["actions"]) for c in evaluated) > 0
        assert seen["num_env_steps_sampled_lifetime"] + seen["num_env_steps_evaluated_lifetime"] == sum(len(c["actions"]) for c in sent)
        assert sorted(client.evaluation_returns(module_id)) == pytest.approx(sorted(r for _, r in evaluations))
        assert seen["evaluation_return_mean"] == pytest.approx(np.mean(client.evaluation_returns(module_id)[-100:]))
        # Evaluation episodes play the mode (a Box module's: its mean), training ones sample.
        assert all(client.played_the_mode(c) for c in evaluated)
        training_modes = [mode for c in sent if not c.get("evaluation") for mode in client.mode_steps(c)]
        assert np.mean(training_modes) < (0.9 if module_id == "cart" else 0.01)  # (a sampled Box action is never its mean)
    assert len(result.evaluations["reach"]) >= 4 and all(-20 <= r <= 0 for _, r in result.evaluations["reach"])
    evaluated_steps = sum(len(c["actions"]) for c in chunks if c.get("evaluation"))
    assert evaluated_steps == result.evaluated_steps == metrics["num_env_steps_evaluated_lifetime"]


def test_run_scene_plays_a_frozen_opponent_and_a_local_one_without_sending_them(tmp_path) -> None:
    policies = {"learner": {"observation_space": BOARD, "action_space": MOVES, "self_play": {}}}
    settings = gateway_settings(  # no evaluation games (test_pettingzoo_client plays them with a frozen opponent)
        tmp_path, policies=policies, env_steps_per_sample=100, policy_mapping={"player_0": "learner", "player_1": "learner_opponent"},
        evaluation_interval=0,
    )
    with running_gateway(settings) as gateway, recording_client(gateway) as client:
        result = run_scene(client, CountdownGame(), max_env_steps=1000, seed=0)
        chunks = [c for m in client.sent for c in m["episodes"]]
        assert {c["agent_id"] for c in chunks} == {"player_0"}
        outcomes = result.outcome_counts("learner")
        assert sum(outcomes.values()) == len(result.outcomes["learner"]) > 0 and outcomes["draw"] == 0
        assert all(c["outcome"] in ("win", "loss") for c in chunks if c["is_terminated"])
        (learner,) = [p for p in httpx.get(f"{gateway.base_url}/api/policies").json() if p["module_id"] == "learner"]
        assert learner["games"]["win"] + learner["games"]["loss"] == sum(c["is_terminated"] for c in chunks)

        client.sent.clear()  # now player_1 is played by a perfect local script
        result = run_scene(client, CountdownGame(), max_env_steps=1000, seed=1, opponents={"player_1": scripted_opponent})
        assert {c["agent_id"] for m in client.sent for c in m["episodes"]} == {"player_0"}
        assert result.outcome_counts("learner")["win"] < 0.2 * len(result.outcomes["learner"])  # untrained vs perfect


def test_the_first_matching_glob_decides_and_an_unmapped_agent_cannot_be_played(tmp_path) -> None:
    config = GatewayConfig.from_set_config(
        set_config({m: policy(BOARD, MOVES) for m in ("a", "b")}, {"player_*": "a", "player_0": "b", "*": "b"})
    )
    assert config.module_for("player_0").module_id == "a" and config.module_for("cart_3").module_id == "b"
    settings = gateway_settings(
        tmp_path,
        policies={"a": {"observation_space": BOARD, "action_space": MOVES}},
        policy_mapping={"player_0": "a"},
        env_steps_per_sample=10,
    )
    with running_gateway(settings) as gateway, recording_client(gateway) as client:
        with pytest.raises(UnmappedAgent, match="'player_1' maps to no module"):
            run_scene(client, CountdownGame(), max_env_steps=10)
        run_scene(client, CountdownGame(), max_env_steps=10, opponents={"player_1": scripted_opponent})  # played locally


def test_a_module_acts_on_a_batch_and_the_env_gets_clipped_actions() -> None:
    action_space = {"type": "box", "shape": [1], "low": -2.0, "high": 2.0}
    config = GatewayConfig.from_set_config(set_config({"pend": policy(BOX3, action_space)}))
    policies = ModulePolicies(config, np.random.default_rng(0))
    policies.load(set_state({"pend": constant_model("obs", 3, [2.0, 0.0])}))
    actions = policies.act("pend", [np.zeros(3)] * 64)
    sampled = np.array([a.chunk_action for a in actions])
    assert sampled.shape == (64, 1) and sampled.min() < 2.0 < sampled.max() and abs(sampled.mean() - 2.0) < 0.4
    assert all(a.env_action.dtype == np.float32 and -2.0 <= a.env_action[0] <= 2.0 for a in actions)
    assert all(a.env_action[0] == np.float32(min(a.chunk_action[0], 2.0)) for a in actions)
    mean, std = 2.0, 1.0  # log-prob of the unclipped sample
    expected = -0.5 * ((sampled[:, 0] - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose([a.logp for a in actions], expected, rtol=1e-6)
    assert config.module_for("anyone").module_id == "pend"  # no mapping, one module: every agent plays it
    with pytest.raises(ValueError, match="observes shape \\[3\\], the env gave \\[4\\]: declare the module's observation_space in"):
        policies.act("pend", [np.zeros(4)])


def test_greedy_play_of_a_box_module_takes_the_mode_row_by_row() -> None:
    """explore False (one flag, or one per row, as an evaluation episode's agents mixed with
    others in one batch): a Gaussian's mean (the env gets it clipped), a squashed Gaussian's
    tanh(mean) in the bounds, a gSDE model's from its noise-free output; the rest sample."""
    box = {"type": "box", "shape": [2], "low": -2.0, "high": 2.0}
    modules = {
        "gauss": policy(BOX3, box),
        "squashed": policy(BOX3, box, distribution="squashed_gaussian"),
        "gsde": policy(BOX3, box, distribution="squashed_gaussian"),
    }
    policies = ModulePolicies(GatewayConfig.from_set_config(set_config(modules)), np.random.default_rng(0))
    policies.load(set_state({
        "gauss": constant_model("obs", 3, [3.0, -0.5, 0.0, 0.0]),
        "squashed": constant_model("obs", 3, [0.5, -1.0, 0.0, 0.0]),
        "gsde": constant_model("obs", 3, [3.0, 3.0, -5.0, -5.0], noise_free=[0.5, -1.0, -5.0, -5.0]),  # the noise: +2.5, +4
    }))
    explore = [False, True] * 4
    gauss = policies.act("gauss", [np.zeros(3)] * 8, explore=explore)
    assert all(a.chunk_action == [3.0, -0.5] and a.env_action.tolist() == [2.0, -0.5] for a in gauss[0::2])
    assert all(a.chunk_action != [3.0, -0.5] for a in gauss[1::2])  # sampled
    expected = -0.5 * np.log(2 * np.pi) * 2  # the mean's log-prob under the unit Gaussians
    assert all(a.logp == pytest.approx(expected) for a in gauss[0::2])
    mode = 2.0 * np.tanh([0.5, -1.0])  # the box [-2, 2]: tanh scaled by 2
    for module_id in ("squashed", "gsde"):
        played = policies.act(module_id, [np.zeros(3)] * 8, explore=explore)
        np.testing.assert_allclose([a.env_action for a in played[0::2]], [mode] * 4, rtol=1e-6)
        assert all(np.all(np.abs(a.env_action) <= 2.0) and not np.allclose(a.env_action, mode) for a in played[1::2])
    greedy = policies.act("gsde", [np.zeros(3)] * 2, explore=False)
    np.testing.assert_allclose([a.env_action for a in greedy], [mode] * 2, rtol=1e-6)
    sampled = np.array([a.env_action for a in policies.act("gsde", [np.zeros(3)] * 2)])  # exploring: the noise's mean, std e^-5
    np.testing.assert_allclose(sampled, [2.0 * np.tanh([3.0, 3.0])] * 2, rtol=1e-3)


def test_a_categorical_module_samples_its_softmax() -> None:
    config = GatewayConfig.from_set_config(set_config({"m": policy({"type": "box", "shape": [2]}, MOVES)}))
    policies = ModulePolicies(config, np.random.default_rng(0))
    policies.load(set_state({"m": constant_model("obs", 2, [0.0, np.log(3.0), -50.0])}))
    actions = policies.act("m", [np.zeros(2)] * 4000)
    chosen = np.array([a.env_action for a in actions])
    assert abs(np.mean(chosen == 1) - 0.75) < 0.03 and not np.any(chosen == 2)  # softmax: 1/4, 3/4, ~0
    assert {a.chunk_action: round(a.logp, 5) for a in actions} == {0: round(np.log(0.25), 5), 1: round(np.log(0.75), 5)}


def test_target_parsing() -> None:
    assert parse_target(None) is None and parse_target("450") == 450.0
    assert parse_target("cart=450, pend=-300") == {"cart": 450.0, "pend": -300.0}


def test_a_masked_module_samples_allowed_actions_only_and_greedy_play_takes_the_mode() -> None:
    board = {"type": "box", "shape": [2]}
    config = GatewayConfig.from_set_config(set_config({"m": policy(board, MOVES) | {"onnx_action_mask_input_name": "action_mask"}}))
    policies = ModulePolicies(config, np.random.default_rng(0))
    policies.load(set_state({"m": constant_model("obs", 2, [2.0, 0.0, 0.0], mask_input="action_mask")}))
    masks = [np.array([0, 1, 1], np.int8)] * 2000 + [None] * 2000
    actions = policies.act("m", [np.zeros(2)] * 4000, masks)
    masked, free = np.array([a.env_action for a in actions[:2000]]), np.array([a.env_action for a in actions[2000:]])
    assert not np.any(masked == 0) and abs(np.mean(masked == 1) - 0.5) < 0.05  # action 0 forbidden: 1 and 2 equally likely
    assert abs(np.mean(free == 0) - np.exp(2) / (np.exp(2) + 2)) < 0.05  # no mask: the plain softmax
    assert {round(a.logp, 5) for a in actions[:2000]} == {round(np.log(0.5), 5)}
    assert actions[0].action_mask is masks[0] and actions[-1].action_mask is None  # each step keeps its mask for its chunk
    greedy = policies.act("m", [np.zeros(2)] * 3, [[1, 1, 1], [0, 1, 1], [0, 0, 1]], explore=False)
    assert [a.env_action for a in greedy] == [0, 1, 2]  # the mode among the allowed actions

    unmasked = GatewayConfig.from_set_config(set_config({"m": policy(board, MOVES)}))
    plain = ModulePolicies(unmasked, np.random.default_rng(0))
    plain.load(set_state({"m": constant_model("obs", 2, [0.0, 0.0, 0.0])}))
    with pytest.raises(ValueError, match="the env masks actions, but module 'm' takes no action mask"):
        plain.act("m", [np.zeros(2)], [[1, 0, 1]])


def test_a_chunk_carries_each_steps_mask_and_the_module_that_played_it() -> None:
    collector = SceneCollector(CountdownGame(), sends=lambda agent: True, seed=5, module_of=lambda agent: f"m_{agent}")
    for turn in range(7):
        (mover,) = collector.acting
        collector.step({mover: PlayedAction(2, 2, -1.0, 0, [1, 1, turn % 2])})
    chunks = collector.take_chunks()
    assert {c["module_id"] for c in chunks} == {"m_player_0", "m_player_1"}
    assert all(c["module_id"] == f"m_{c['agent_id']}" for c in chunks)
    first = next(c for c in chunks if len(c["actions"]) == 4)  # the first mover moved on turns 0, 2, 4, 6
    assert first["action_mask"] == [[1, 1, 0]] * 4


def test_swapped_seatings_alternate_the_learner_and_its_opponent_between_seats() -> None:
    modules = {"learner": policy(BOARD, MOVES), "learner_opponent": policy(BOARD, MOVES, trainable=False)}
    config = GatewayConfig.from_set_config(set_config(modules, {"player_*": "learner"}))
    casting = Casting(config, seatings=swapped_seatings(config, ["player_0", "player_1"]))
    seated = []
    for game in range(4):
        casting.start_game(game)
        seated.append((casting.module_id("player_0"), casting.sends("player_0"), casting.module_id("player_1")))
    assert seated == [("learner", True, "learner_opponent"), ("learner_opponent", False, "learner")] * 2
    assert casting.trained(["player_0", "player_1"]) == ["learner"]

    casting = Casting(config, seatings=swapped_seatings(config, ["player_0", "player_1"], scripted_opponent))
    casting.start_game(1)
    assert casting.opponent("player_0") is scripted_opponent and casting.module_id("player_1") == "learner"
    with pytest.raises(ValueError, match="one self-play module and its frozen opponent"):
        swapped_seatings(GatewayConfig.from_set_config(set_config({"a": policy(BOARD, MOVES)})), ["player_0", "player_1"])
    two = GatewayConfig.from_set_config(set_config({"a": policy(BOARD, MOVES), "b": policy(BOARD, MOVES)}))
    with pytest.raises(ValueError, match="the gateway has 2 trainable modules"):
        swapped_seatings(two, ["player_0", "player_1"], scripted_opponent)
