"""Populations (a module's `population`): members with their own weights and hyperparameters,
the clients spread over them, the worst copying the best.

The decisions are checked as plain data; then a real gateway over real sockets: two clients
each play their own member, the one that scores worse copies the other's weights (the two
members' models are then the same) and takes perturbed hyperparameters; thin clients are
spread too; bad settings are refused in a line.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from app.settings.config import Settings
from app.settings.hyperparameters import PopulationConfig
from app.startup.export import export_model
from app.telemetry.tensorboard import read_scalars
from app.training.population import Population
from rllink_clients.gym_client import OnnxPolicy
from rllink_clients.rllink_client import RLlinkClient

from .helpers import gateway_settings, running_gateway

MODULE = "p"
SPACES = {"observation_space": {"type": "box", "shape": [2]}, "action_space": {"type": "discrete", "n": 2}}
OBS = [1.0, 0.0]
PROBES = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, -2.0]], np.float32)


def population(**config: object) -> dict:
    return {MODULE: {**SPACES, "population": config}}


# -- The decisions --------------------------------------------------------------------


def test_a_ready_member_among_the_worst_copies_one_of_the_best_and_perturbs_in_range() -> None:
    config = PopulationConfig(size=4, ready_env_steps=100, perturb_factors=(0.5, 2.0), resample_probability=0.0)
    pop = Population(MODULE, [f"p.{k}" for k in range(4)], config, seed=0)
    values = pop.initial_values({"learning_rate": 3e-3, "ent_coef": 0.0, "clip_coef": 0.2, "gamma": 0.99})
    assert values["p.0"] == {"learning_rate": 3e-3, "ent_coef": 0.0, "clip_coef": 0.2, "gamma": 0.99}
    for member in ("p.1", "p.2", "p.3"):  # drawn in the default ranges
        assert 1e-4 <= values[member]["learning_rate"] <= 1e-2 and 0.95 <= values[member]["gamma"] <= 0.999
    returns: dict[str, float | None] = {"p.0": 5.0, "p.1": 9.0, "p.2": -3.0, "p.3": None}  # p.3: too few episodes
    for member in pop.members:
        pop.trained(member, 60)
    assert pop.exploits_due(returns, values) == []  # nobody ready yet
    for member in pop.members:
        pop.trained(member, 60)
    (exploit,) = pop.exploits_due(returns, values)
    assert (exploit.member, exploit.source) == ("p.2", "p.1")  # the worst of three compared copies the best
    assert pop.best == "p.1"
    assert pop.trained_since == {"p.0": 0, "p.1": 0, "p.2": 0, "p.3": 120}  # p.3 waits to be compared
    for name, (old, new) in exploit.changes.items():
        assert old == values["p.2"][name]
        source = values["p.1"][name]
        bounds = config.hyperparameters[name]
        moved = [1 - (1 - source) * f if name == "gamma" else source * f for f in (0.5, 2.0)]
        assert new in [min(max(m, bounds.low), bounds.high) for m in moved], name


# -- Over real sockets ----------------------------------------------------------------


def play(connect: Callable[[], RLlinkClient], reward: float, versions: int, seen: dict, connected: threading.Event, errors: list) -> None:
    """A client (`connect()`) of the bandit that is paid `reward` a step whatever it does; the
    model of "p" it gets with each version, by version (in `seen`; what went wrong in `errors`)."""
    try:
        _play(connect, reward, versions, seen, connected)
    except Exception as exc:  # noqa: BLE001 -- reported by the test's thread
        errors.append(exc)
        connected.set()


def _play(connect: Callable[[], RLlinkClient], reward: float, versions: int, seen: dict, connected: threading.Event) -> None:
    rng = np.random.default_rng(0)
    with connect() as client:
        connected.set()
        config = client.request({"type": "GET_CONFIG"})
        assert list(config["policies"]) == [MODULE]  # clients see the module, not its members
        state = client.request({"type": "GET_STATE"})
        assert list(state["onnx_files"]) == [MODULE]
        seen[state["weights_seq_no"]] = OnnxPolicy(state, config["onnx_input_name"], config["action_space"], rng).dist_inputs(PROBES)
        for _ in range(versions):
            policy = OnnxPolicy(state, config["onnx_input_name"], config["action_space"], rng)
            actions, logps = policy.act_batch(np.array([OBS] * 100, np.float32))
            chunks = [
                {"obs": [OBS, OBS], "actions": [int(a)], "rewards": [reward], "action_logp": [float(lp)],
                 "is_terminated": True, "is_truncated": False}
                for a, lp in zip(actions, logps)
            ]  # fmt: skip
            state = client.request({"type": "EPISODES_AND_GET_STATE", "episodes": chunks, "timesteps": len(chunks)})
            assert state["type"] == "SET_STATE", state
            seen[state["weights_seq_no"]] = OnnxPolicy(state, config["onnx_input_name"], config["action_space"], rng).dist_inputs(PROBES)


def member_model(base_url: str, member: str, version: int | None, obs: np.ndarray = PROBES) -> np.ndarray:
    """A member's model of a kept version (None: the current one), downloaded over REST from the
    gateway (or front-end) at `base_url`: its outputs on `obs`."""
    params = {} if version is None else {"version": version}
    reply = httpx.get(f"{base_url}/api/policies/{member}/model.onnx", params=params)
    assert reply.status_code == 200, reply.text
    session = ort.InferenceSession(reply.content, providers=["CPUExecutionProvider"])
    return session.run(None, {"obs": obs})[0]


def test_the_worse_member_copies_the_better_ones_weights_and_perturbs_its_hyperparameters(tmp_path: Path) -> None:
    settings = gateway_settings(
        tmp_path,
        policies=population(size=2, ready_env_steps=200, min_episodes=20, resample_probability=0.0),
        train_batch_size=100,
        env_steps_per_sample=100,
        tensorboard_dir=tmp_path / "tb",
    )
    with running_gateway(settings) as gateway:
        seen: list[dict[int, np.ndarray]] = [{}, {}]
        errors: list[Exception] = []
        clients = []
        for slot, reward in enumerate((1.0, 0.0)):  # slot 0 plays p.0 and is paid, slot 1 plays p.1 and is not
            connected = threading.Event()
            connect = functools.partial(gateway.client, "tcp", timeout=60)
            clients.append(threading.Thread(target=play, args=(connect, reward, 6, seen[slot], connected, errors)))
            clients[-1].start()
            assert connected.wait(30)  # the first connects first: slot 0
        for thread in clients:
            thread.join(timeout=120)
            assert not thread.is_alive()
        assert not errors, errors
        policies = {p["module_id"]: p for p in httpx.get(f"{gateway.base_url}/api/policies").json()}
        status = policies[MODULE]["population"]
        assert status["exploits"] >= 1, status
        version = status["recent_exploits"][0]["weights_seq_no"]
        models = {member: member_model(gateway.base_url, member, version) for member in ("p.0", "p.1")}
        final_models = {member: member_model(gateway.base_url, member, None) for member in ("p.0", "p.1")}
    assert status["exploits"] >= 1, status
    exploit = status["recent_exploits"][0]
    assert (exploit["member"], exploit["source"]) == ("p.1", "p.0")
    assert exploit["member_return"] == 0.0 and exploit["source_return"] == 1.0
    assert status["serves"] == "p.0"
    assert policies["p.1"]["member_of"] == MODULE and policies["p.0"]["num_env_steps_trained_lifetime"] > 0
    # TensorBoard has each member's hyperparameters at each of its training steps (and the log's lines).
    scalars = read_scalars(tmp_path / "tb")
    for member in ("p.0", "p.1"):
        for name, value in status["members"][member]["hyperparameters"].items():
            assert scalars[f"{member}/{name}"][-1][1] == pytest.approx(value, rel=1e-6), (member, name)
    # The members started apart; at the copy's version p.1 is p.0, and its client got that model.
    assert not np.allclose(seen[0][0], seen[1][0]), "the members started with the same weights"
    version = exploit["weights_seq_no"]
    np.testing.assert_allclose(models["p.1"], models["p.0"], atol=1e-6)
    np.testing.assert_allclose(seen[1][version], models["p.1"], atol=1e-6)
    # The copy took p.0's hyperparameters, perturbed by 0.8 or 1.2 (gamma: its 1 - gamma).
    for name, (old, new) in exploit["changes"].items():
        assert status["members"]["p.1"]["hyperparameters"][name] == pytest.approx(new) or status["exploits"] > 1
        assert new != pytest.approx(old), name
    # Exported, the module's model is its newest file: that of the member it serves.
    assert "version" in export_model(settings, MODULE, None, tmp_path / "p.onnx")
    session = ort.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"obs": PROBES})[0], final_models[status["serves"]], atol=1e-6)
    # A restart resumes every member where it was, hyperparameters included.
    with running_gateway(settings) as gateway:
        restarted = {p["module_id"]: p for p in httpx.get(f"{gateway.base_url}/api/policies").json()}
        restarted_models = {member: member_model(gateway.base_url, member, None) for member in ("p.0", "p.1")}
    assert restarted[MODULE]["population"]["exploits"] == status["exploits"]
    for member in ("p.0", "p.1"):
        assert restarted[MODULE]["population"]["members"][member]["hyperparameters"] == status["members"][member]["hyperparameters"]
        np.testing.assert_allclose(restarted_models[member], final_models[member], atol=1e-6)


def test_thin_clients_are_spread_over_the_members_and_served_by_them(tmp_path: Path) -> None:
    settings = gateway_settings(tmp_path, policies=population(size=2), evaluation_interval=0)
    with running_gateway(settings) as gateway:
        probes = np.random.default_rng(0).normal(0, 3, (200, 2)).astype(np.float32)
        greedy = {member: member_model(gateway.base_url, member, 0, probes).argmax(axis=1) for member in ("p.0", "p.1")}
        telling = probes[greedy["p.0"] != greedy["p.1"]]  # where the members' greedy actions differ
        assert len(telling) >= 5
        with gateway.client("tcp", timeout=60) as first, gateway.client("tcp", timeout=60) as second:
            for member, client in (("p.0", first), ("p.1", second)):
                expected = member_model(gateway.base_url, member, 0, telling).argmax(axis=1)
                for _ in range(3):
                    episode = client.request({"type": "START_EPISODE"})["episode_id"]
                    for obs, action in zip(telling, expected):
                        reply = client.request({"type": "GET_ACTION", "episode_id": episode, "obs": obs.tolist(), "explore": False})
                        assert reply["action"] == action, (member, obs)
                        client.send({"type": "LOG_RETURNS", "episode_id": episode, "reward": 1.0})
                    client.send({"type": "END_EPISODE", "episode_id": episode, "obs": OBS})
                assert client.request({"type": "PING"})["type"] == "PONG"
        metrics = httpx.get(f"{gateway.base_url}/api/metrics").json()["policies"]
    assert metrics["p.0"]["num_episodes_lifetime"] == 3 and metrics["p.1"]["num_episodes_lifetime"] == 3
    assert metrics[MODULE]["num_episodes_lifetime"] == 0


@pytest.mark.parametrize(
    ("policy", "extra", "message"),
    [
        ({"population": {"size": 2}, "algorithm": "sac", "action_space": {"type": "box", "shape": [1], "low": -1, "high": 1}},
         {}, "population trains with ppo only"),
        ({"population": {"size": 1}}, {}, "greater than or equal to 2"),
        ({"population": {"hyperparameters": {"learning_rate": {"low": 1e-3, "high": 1e-3}}}}, {}, "must have low < high"),
        ({"population": {"hyperparameters": {}}}, {}, "at least one hyperparameter"),
        ({"population": {"hyperparameters": {"hidden_sizes": {"low": 1, "high": 2}}}}, {}, "cannot vary 'hidden_sizes'"),
        ({"population": {"hyperparameters": {"gamma": {"low": 0.9, "high": 1.5}}}}, {}, "1.5 is not a valid gamma"),
        ({"population": {"size": 2}, "self_play": {}}, {}, "population and self_play do not go together"),
        ({"population": {"size": 3}}, {"env_path": "game", "num_envs": 2}, "3 members but 2 launched game"),
    ],
)
def test_bad_populations_are_refused_in_a_line(tmp_path: Path, policy: dict, extra: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Settings(policies={MODULE: {**SPACES, **policy}}, checkpoint_dir=tmp_path, **extra)
