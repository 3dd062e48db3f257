"""A game may declare its spaces in GET_CONFIG (RLLINK.md, "Spaces the game declares"):
what fits gets SET_CONFIG, a mismatch an ERROR naming both spaces, before any step; a
gateway given no spaces adopts the first game's."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np
import onnxruntime as ort
import pytest
import requests

from rllink_clients.gym_client import OnnxPolicy
from rllink_clients.rllink_client import RLlinkClient

from .gateway_process import gateway_process
from .helpers import gateway_settings, running_gateway

PENDULUM = {"observation_space": {"type": "box", "shape": [3]}, "action_space": {"type": "box", "shape": [1], "low": -2, "high": 2}}
MULTI = {
    "policies": {
        "cart": {"observation_space": {"type": "box", "shape": [4]}, "action_space": {"type": "discrete", "n": 2}},
        "arm": PENDULUM,
    },
    "policy_mapping": {"cart_*": "cart", "arm_*": "arm"},
}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    with running_gateway(gateway_settings(tmp_path_factory.mktemp("declared"), **MULTI)) as gateway:
        yield gateway


def get_config(gateway, **declared):
    """GET_CONFIG over TCP to a gateway in a thread or a process (either has `tcp_port`)."""
    with RLlinkClient("tcp", "127.0.0.1", gateway.tcp_port) as client:
        return client.request({"type": "GET_CONFIG", **declared})


@pytest.mark.parametrize(
    "declared",
    [
        {},  # declaring nothing: today's behaviour
        {"observation_space": {"type": "box", "shape": [4]}, "action_space": {"type": "discrete", "n": 2}},  # the default module
        {"observation_space": {"shape": [4]}},  # a box need not say so; a field left out is not checked
        {"policies": {"arm": PENDULUM}},
        {"policies": {"cart": {"action_space": {"type": "discrete", "n": 2}}, "arm": {"observation_space": {"shape": [3]}}}},
    ],
)
def test_spaces_that_fit_get_set_config(gateway, declared):
    assert get_config(gateway, **declared)["type"] == "SET_CONFIG"


@pytest.mark.parametrize(
    ("declared", "says"),
    [
        ({"observation_space": {"type": "box", "shape": [5]}}, '[5]'),
        ({"action_space": {"type": "discrete", "n": 3}}, '"n": 3'),
        ({"policies": {"arm": {"action_space": {"type": "box", "shape": [1], "low": -1, "high": 1}}}}, '"low": -1.0'),
        ({"policies": {"arm": {"action_space": {"type": "discrete", "n": 2}}}}, '"type": "discrete"'),
        ({"policies": {"arm": {"observation_space": {"type": "box", "shape": [3], "dtype": "uint8"}}}}, None),  # invalid itself
        ({"policies": {"leg": PENDULUM}}, "does not have; its modules: cart, arm"),
    ],
)
def test_a_mismatch_gets_an_error_naming_both_spaces(gateway, declared, says):
    reply = get_config(gateway, **declared)
    assert reply["type"] == "ERROR" and reply["code"] == "invalid_message", reply
    if says is not None:
        assert says in reply["message"], reply["message"]
    if "does not have" not in (says or "") and says is not None:
        assert "the gateway's is" in reply["message"] and reply["details"]["gateway"] != reply["details"]["declared"]


def test_the_connection_stays_open_after_a_mismatch(gateway):
    with gateway.client("tcp") as client:
        refused = client.request({"type": "GET_CONFIG", "action_space": {"type": "discrete", "n": 9}})
        fitting = client.request({"type": "GET_CONFIG"})
    assert refused["type"] == "ERROR" and fitting["type"] == "SET_CONFIG"


def test_the_reference_client_names_the_mismatch_and_stops(tmp_path):
    """Pendulum's client against a CartPole gateway: one line with both spaces, exit 2, no traceback."""
    cartpole_spaces = {"observation_space": {"type": "box", "shape": [4]}, "action_space": {"type": "discrete", "n": 2}}
    with running_gateway(gateway_settings(tmp_path, **cartpole_spaces)) as cartpole:  # given: never adopted
        done = subprocess.run(
            [sys.executable, "-m", "rllink_clients.cartpole", "--env", "Pendulum-v1", "--port", str(cartpole.tcp_port)],
            capture_output=True, text=True, timeout=120,
        )
    assert done.returncode == 2, done.stderr
    assert "cannot train Pendulum-v1 through this gateway" in done.stderr and '"shape": [3]' in done.stderr
    assert "Traceback" not in done.stderr


# -- Adoption: a gateway given no spaces takes the first game's ---------------------------------


def pendulum_client(port: int, steps: int) -> dict:
    """Pendulum-v1's reference client for `steps` env steps: its summary (the last line)."""
    done = subprocess.run(
        [sys.executable, "-m", "rllink_clients.cartpole", "--env", "Pendulum-v1", "--port", str(port),
         "--max-env-steps", str(steps), "--target-return", "0"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr  # 1: the target not reached
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_gateway_given_no_spaces_adopts_the_first_games_and_keeps_them_across_a_restart(tmp_path):
    """`python -m app` with no flags (CartPole's spaces by default) and Pendulum's reference
    client: the module takes Pendulum's spaces, trains on them, refuses CartPole's after,
    and starts with them again."""
    checkpoints, log = tmp_path / "checkpoints", tmp_path / "gateway.log"
    run = ("--run-id", "adopted", "--runs-dir", str(tmp_path / "runs"))
    with gateway_process(checkpoints, log, *run) as gateway:
        trained = pendulum_client(gateway.tcp_port, 1500)
        config = requests.get(f"{gateway.base_url}/api/config", timeout=30).json()
        metrics = requests.get(f"{gateway.base_url}/api/metrics", timeout=30).json()
        with_cartpoles = get_config(gateway, observation_space={"type": "box", "shape": [4]})
        with RLlinkClient("tcp", "127.0.0.1", gateway.tcp_port) as client:
            state = client.request({"type": "GET_STATE"})
    assert trained["env_steps"] == 1500
    assert config["observation_space"] == {"type": "box", "shape": [3], "low": None, "high": None, "dtype": "float32"}
    assert config["action_space"] == {"type": "box", "shape": [1], "low": -2.0, "high": 2.0, "dtype": "float32"}
    assert config["policies"]["default_policy"]["action_space"] == config["action_space"]
    assert metrics["num_env_steps_trained_lifetime"] >= 1000
    assert with_cartpoles["type"] == "ERROR" and '"shape": [4]' in with_cartpoles["message"] and '"shape": [3]' in with_cartpoles["message"]
    policy = OnnxPolicy(state, "obs", config["action_space"], np.random.default_rng(0), "gaussian")
    action, _, outputs = policy.act(np.zeros(3, np.float32))  # the model takes Pendulum's 3 floats
    assert len(action) == 1 and len(outputs) == 2  # one torque: its mean and log std
    logged = log.read_text()
    assert "default_policy adopts the spaces the first game declared" in logged
    assert json.loads((checkpoints / "adopted_spaces.json").read_text())["observation_space"]["shape"] == [3]

    # The run's model as a file, without a server: built for the adopted spaces (its snapshot has CartPole's).
    out = tmp_path / "pendulum.onnx"
    exported = subprocess.run(
        [sys.executable, "-m", "app", "export", "--run-id", "adopted", "--runs-dir", str(tmp_path / "runs"), "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    (model_input,) = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).get_inputs()
    assert model_input.shape[1:] == [3]

    with gateway_process(checkpoints, log, *run, "--resume") as again:
        restarted = get_config(again)  # declares nothing: the spaces it has
        resumed = pendulum_client(again.tcp_port, 500)
    assert restarted["observation_space"]["shape"] == [3] and restarted["action_space"]["high"] == 2.0
    assert resumed["env_steps"] == 500 and resumed["weights_seq_no"] > trained["weights_seq_no"]
    assert "keeps the spaces a game declared in an earlier start" in log.read_text()



def test_only_the_first_game_is_adopted_and_never_after_experience(tmp_path):
    with running_gateway(gateway_settings(tmp_path)) as gateway:
        with gateway.client("tcp") as first:
            first.request({"type": "GET_CONFIG"})  # declares nothing: CartPole's defaults, still adoptable
            obs = np.zeros((3, 4)).tolist()
            chunk = {"obs": obs, "actions": [0, 1], "rewards": [1.0, 1.0], "is_terminated": True, "is_truncated": False}
            first.send({"type": "EPISODES", "episodes": [chunk]})
            first.request({"type": "PING"})  # the chunk is in once its PONG is back
        late = get_config(gateway, **PENDULUM)
        version = gateway.service.current_state().weights_seq_no
    assert late["type"] == "ERROR" and "the gateway's is" in late["message"]  # experience came: checked, not adopted
    assert version == 0


def test_games_that_connect_at_once_to_a_fresh_gateway_all_get_the_adopted_spaces_model(tmp_path):
    """Eight games declare Pendulum's spaces at the same moment: one adopts them, and every
    one's SET_CONFIG comes after that version is out, so its GET_STATE has the model for them
    (a GET_CONFIG answered while the first game's adoption was under way got the new spaces
    with the old model)."""
    barrier, shapes, errors = threading.Barrier(8), [], []

    def game() -> None:
        try:
            with gateway.client("tcp", timeout=60) as client:
                barrier.wait()
                config = client.request({"type": "GET_CONFIG", **PENDULUM})
                state = client.request({"type": "GET_STATE"})
            (model_input,) = OnnxPolicy(state, "obs", config["action_space"], np.random.default_rng(0), "gaussian").session.get_inputs()
            shapes.append((config["observation_space"]["shape"], model_input.shape[1:]))
        except Exception as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    with running_gateway(gateway_settings(tmp_path, learner_process=True)) as gateway:  # a slower adoption: a wider window
        games = [threading.Thread(target=game) for _ in range(8)]
        for thread in games:
            thread.start()
        for thread in games:
            thread.join(timeout=60)
        version = gateway.service.current_state().weights_seq_no
    assert not errors, errors
    assert shapes == [([3], [3])] * 8 and version == 1


@pytest.mark.parametrize("learner_process", [False, True])
def test_a_thin_client_plays_the_adopted_spaces_with_the_learner_in_a_thread_or_a_process(tmp_path, learner_process):
    with running_gateway(gateway_settings(tmp_path, learner_process=learner_process)) as gateway:
        adopted = get_config(gateway, **PENDULUM)
        with gateway.client("tcp") as client:
            client.request({"type": "GET_CONFIG", **PENDULUM})  # the same again: fits, nothing more changes
            client.request({"type": "START_EPISODE", "episode_id": "e"})
            action = client.request({"type": "GET_ACTION", "episode_id": "e", "obs": [0.1, 0.2, 0.3]})
        version = gateway.service.current_state().weights_seq_no
    assert adopted["type"] == "SET_CONFIG" and adopted["observation_space"]["shape"] == [3], adopted
    assert adopted["action_distribution"] == "gaussian"
    assert action["type"] == "ACTION" and len(action["action"]) == 1, action
    assert version == 1  # one new version for the adopted spaces, not one per GET_CONFIG


def test_spaces_the_module_cannot_take_are_refused_and_nothing_changes(tmp_path):
    """SAC needs a bounded box: a declared box without bounds cannot be adopted."""
    with running_gateway(gateway_settings(tmp_path, algorithm="sac")) as gateway:
        refused = get_config(gateway, action_space={"type": "box", "shape": [2]})
        config = get_config(gateway)
    assert refused["type"] == "ERROR" and "cannot adopt the spaces the game declares" in refused["message"], refused
    assert "finite low and high" in refused["message"]
    assert config["action_space"] == {"type": "discrete", "n": 2}  # CartPole's, as before
