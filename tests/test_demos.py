"""Demonstrations: recorded by the reference client, loaded and checked by the gateway,
behavioural-cloning pre-training that makes the first published policy play like the
demonstrator before any RL step, and a BC loss during RL whose weight decays over the env
steps trained, across a restart (real gateway processes, real ONNX, real gymnasium)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import gymnasium as gym
import httpx
import numpy as np
import onnxruntime as ort
import pytest
import torch
from pydantic import ValidationError

from app.experience import blocks_of
from app.schemas import EpisodeChunk
from app.settings.config import Settings
from app.settings.hyperparameters import ModelConfig
from app.settings.policies import PolicySet
from app.spaces.models import BoxSpace, DiscreteSpace
from app.training.algorithms.ppo.config import PPOConfig
from app.training.algorithms.ppo.learner import PPOLearner
from app.training.behavior_cloning import demo_nll
from app.training.demos import DemoFileError, load_demos
from rllink_clients.gym_client import RunResult, run
from rllink_clients.rllink_client import RLlinkClient
from tests.gateway_process import ROOT, GatewayProcess, gateway_process

MOUNTAIN_CAR = ["--observation-space", '{"type": "box", "shape": [2]}', "--action-space", '{"type": "discrete", "n": 3}']


def record(env_id: str, episodes: int, out: Path) -> dict:
    """The reference client's `record` command, as a user runs it (no gateway)."""
    done = subprocess.run(
        [sys.executable, "-m", "rllink_clients.demos", "record", "--env", env_id, "--policy", "scripted",
         "--episodes", str(episodes), "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def mountain_car_demos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demos") / "mountain_car.jsonl"
    summary = record("MountainCar-v0", 20, out)
    assert summary["episodes"] == 20 and summary["max_return"] > -200  # the scripted demonstrator reaches the flag
    return out


def fetch_model(base_url: str) -> bytes:
    with urllib.request.urlopen(base_url + "/api/model.onnx", timeout=30) as reply:
        return reply.read()


def play_greedily(model: bytes, env_id: str, episodes: int) -> list[tuple[float, bool]]:
    """Each episode's return and whether it terminated (MountainCar: reached the flag), the
    policy's most likely action at every step; a recurrent model's state carried step to step
    from zeros at each episode's start."""
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    inputs = {i.name: i.shape for i in session.get_inputs()}
    env = gym.make(env_id)
    results = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=10_000 + episode)  # starts the demonstrations never saw
        state = {"state_in": np.zeros((1, inputs["state_in"][1]), np.float32)} if "state_in" in inputs else {}
        total, terminated, truncated = 0.0, False, False
        while not (terminated or truncated):
            logits, *state_out = session.run(None, {"obs": np.asarray(obs, np.float32)[None], **state})
            state = {"state_in": state_out[0]} if state_out else {}
            obs, reward, terminated, truncated, _ = env.step(int(np.argmax(logits[0])))
            total += float(reward)
        results.append((total, terminated))
    return results


def test_pretrained_policy_reaches_the_flag_before_any_rl_step_and_a_restart_keeps_it(tmp_path: Path, mountain_car_demos: Path) -> None:
    checkpoints, log = tmp_path / "checkpoints", tmp_path / "gateway.log"
    with gateway_process(checkpoints, log, *MOUNTAIN_CAR, "--demos", str(mountain_car_demos)) as gateway:
        model = fetch_model(gateway.base_url)
    text = log.read_text()
    assert "pre-trained by behavioural cloning on" in text, text
    results = play_greedily(model, "MountainCar-v0", 10)
    reached = sum(terminated for _, terminated in results)
    # Random play never reaches the flag within MountainCar's 200 steps; the demonstrator always does.
    assert reached >= 7, f"greedy play of the pre-trained version reached the flag in {reached}/10: {results}"

    with gateway_process(checkpoints, log, *MOUNTAIN_CAR, "--demos", str(mountain_car_demos)) as gateway:
        restored = fetch_model(gateway.base_url)
    text = log.read_text()
    assert text.count("pre-trained by behavioural cloning on") == 1, text
    assert "restored from its checkpoint, no behavioural-cloning pre-training" in text, text
    assert restored == model


def test_cartpole_demos_pretrain_a_policy_that_balances(tmp_path: Path) -> None:
    demos = tmp_path / "cartpole.jsonl"
    record("CartPole-v1", 5, demos)  # 2500 steps, every episode the full 500
    with gateway_process(tmp_path / "checkpoints", tmp_path / "gateway.log", "--demos", str(demos)) as gateway:
        model = fetch_model(gateway.base_url)
    returns = [total for total, _ in play_greedily(model, "CartPole-v1", 5)]
    assert np.mean(returns) >= 300, returns  # random play: about 22


STATELESS_CARTPOLE = "rllink_clients.memory_envs:StatelessCartPole-v1"
STATELESS_SPACES = ["--observation-space", '{"type": "box", "shape": [2]}', "--action-space", '{"type": "discrete", "n": 2}']


def test_a_recurrent_policy_clones_a_demonstrator_with_memory_where_a_feed_forward_one_cannot(tmp_path: Path) -> None:
    """CartPole seeing only the position and the angle: the reference client's scripted
    demonstrator remembers the last observation (the velocities are the differences). Cloned
    episode by episode through the LSTM, the pre-trained policy balances as it does; a
    feed-forward policy cloned from the same file cannot know the velocities."""
    demos = tmp_path / "stateless.jsonl"
    summary = record(STATELESS_CARTPOLE, 5, demos)
    assert summary["min_return"] == 500.0, summary
    returns = {}
    for name, model in (("lstm", '{"use_lstm": true, "lstm_cell_size": 32}'), ("feed_forward", "{}")):
        log = tmp_path / f"{name}.log"
        with gateway_process(tmp_path / name, log, *STATELESS_SPACES, "--model", model, "--demos", str(demos)) as gateway:
            returns[name] = [total for total, _ in play_greedily(fetch_model(gateway.base_url), STATELESS_CARTPOLE, 5)]
        assert "pre-trained by behavioural cloning on 2500 steps" in log.read_text(), log.read_text()
    assert np.mean(returns["lstm"]) >= 400 and np.mean(returns["feed_forward"]) < 150, returns


def bad_line(demos: Path, tmp_path: Path, line_3: str) -> Path:
    """The recorded file with its third line (its second chunk, after the header) replaced."""
    lines = demos.read_text().splitlines()
    lines[2] = line_3
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    return bad


def a_chunk(demos: Path, **changes: object) -> str:
    return json.dumps({**json.loads(demos.read_text().splitlines()[1]), **changes})


def test_a_bad_demo_file_refuses_the_start_in_one_line(tmp_path: Path, mountain_car_demos: Path) -> None:
    """Through the command line: one line, exit 2, nothing saved (the next start pre-trains on the fixed file)."""
    bad = bad_line(mountain_car_demos, tmp_path, '{"obs": [[0.1, 0.2], [0.3')
    done = subprocess.run(
        [sys.executable, "-m", "app", "--http-port", "0", "--tcp-port", "0", "--checkpoint-dir", str(tmp_path / "ck"),
         *MOUNTAIN_CAR, "--demos", str(bad)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "cannot start" in line]
    assert len(errors) == 1, done.stderr
    assert f"demos file {bad}, line 3: not JSON" in errors[0], errors[0]
    assert not (tmp_path / "ck").exists()


@pytest.mark.parametrize(
    ("line_3", "problem"),
    [
        ("three observations", "obs: each observation must have shape [2], got [3]"),
        ("an unknown module", "no_such_module"),
    ],
)
def test_a_bad_demo_chunk_is_named_by_line_and_problem(tmp_path: Path, mountain_car_demos: Path, line_3: str, problem: str) -> None:
    """What the start-up above says for a chunk that does not fit the modules (load_demos, which it calls)."""
    if line_3 == "three observations":
        line_3 = a_chunk(mountain_car_demos, obs=[[0.0, 0.0, 0.0]] * (len(json.loads(a_chunk(mountain_car_demos))["obs"])))
    else:
        line_3 = a_chunk(mountain_car_demos, module_id="no_such_module")
    bad = bad_line(mountain_car_demos, tmp_path, line_3)
    policies = PolicySet.from_settings(Settings(observation_space={"type": "box", "shape": [2]}, action_space={"type": "discrete", "n": 3}))
    with pytest.raises(DemoFileError) as refused:
        load_demos(bad, policies)
    assert str(refused.value).startswith(f"demos file {bad}, line 3: ") and problem in str(refused.value), refused.value
    assert "\n" not in str(refused.value)


def test_demos_settings_name_trained_ppo_modules(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="demos names nope: not a trained module"):
        Settings(demos={"nope": str(tmp_path / "d.jsonl")})
    with pytest.raises(ValidationError, match="learn with SAC, which has no behavioural-cloning"):
        Settings(demos=str(tmp_path / "d.jsonl"), algorithm="sac", action_space={"type": "discrete", "n": 2})
    assert Settings(demos={"default_policy": str(tmp_path / "d.jsonl")}).demos == {"default_policy": tmp_path / "d.jsonl"}


BC_STRENGTH, BC_STEPS = 0.8, 6_000
# A training step's log line: "  default_policy: 500 steps (reason) | ... | policy_loss ... bc_loss 0.31 bc_weight 0.8"
TRAINING_STEP = re.compile(r" default_policy: (\d+) steps .*\| (policy_loss .*)$", re.MULTILINE)


def train_mountain_car(gateway: GatewayProcess, env_steps: int) -> RunResult:
    """The reference client trains through the gateway for `env_steps` (no target)."""
    with RLlinkClient("tcp", "127.0.0.1", gateway.tcp_port, timeout=120) as client:
        return run(client, "MountainCar-v0", target_return=None, max_env_steps=env_steps, seed=0)


def training_steps(log_text: str) -> list[tuple[int, dict[str, float]]]:
    """Each training step's env steps and learner stats, from the gateway's log, in order."""
    steps = []
    for match in TRAINING_STEP.finditer(log_text):
        words = match.group(2).split()
        steps.append((int(match.group(1)), {name: float(value) for name, value in zip(words[::2], words[1::2], strict=True)}))
    return steps


def test_bc_loss_during_rl_decays_over_env_steps_trained_across_a_restart_and_the_policy_still_plays(
    tmp_path: Path, mountain_car_demos: Path
) -> None:
    checkpoints, log = tmp_path / "checkpoints", tmp_path / "gateway.log"
    flags = (*MOUNTAIN_CAR, "--demos", str(mountain_car_demos), "--bc-strength", str(BC_STRENGTH), "--bc-steps", str(BC_STEPS))
    with gateway_process(checkpoints, log, *flags) as gateway:
        first = train_mountain_car(gateway, 4_000)
    before_restart = len(training_steps(log.read_text()))
    with gateway_process(checkpoints, log, *flags) as gateway:
        second = train_mountain_car(gateway, 4_000)
        model = fetch_model(gateway.base_url)
        learner = httpx.get(f"{gateway.base_url}/api/metrics", timeout=30).json()["learner"]
    text = log.read_text()
    steps = training_steps(text)
    assert 0 < before_restart < len(steps), text

    # Every PPO update reported its BC weight: bc_strength falling linearly with the env steps
    # trained before it, counted on across the restart (the checkpoint keeps them), down to 0.
    trained = 0
    for index, (batch_steps, stats) in enumerate(steps):
        expected = BC_STRENGTH * max(0.0, 1 - trained / BC_STEPS)
        assert stats["bc_weight"] == pytest.approx(expected, abs=1e-3), (index, trained, stats)
        assert ("bc_loss" in stats) == (expected > 0), stats  # no BC term once the weight is 0
        trained += batch_steps
    assert trained > BC_STEPS and steps[-1][1]["bc_weight"] == 0.0 == learner["bc_weight"]  # /api/metrics shows it too
    assert "(0 trained so far)" in text and f"({sum(n for n, _ in steps[:before_restart])} trained so far)" in text, text
    assert text.count("pre-trained by behavioural cloning on") == 1, text

    # It still plays: the client's episodes reach the flag (random play: -200, never), and so
    # does the final version played greedily from unseen starts.
    for result in (first, second):
        assert result.mean_return > -170, (first.mean_return, second.mean_return)
    reached = sum(terminated for _, terminated in play_greedily(model, "MountainCar-v0", 10))
    assert reached >= 7, f"greedy play of the final version reached the flag in {reached}/10"


def random_play_chunk(policies: PolicySet, steps: int) -> EpisodeChunk:
    """MountainCar-v0 played uniformly at random (never the flag: every reward -1), as a client sends it."""
    env, rng = gym.make("MountainCar-v0"), np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    chunk: dict = {"obs": [obs.tolist()], "actions": [], "rewards": [], "is_terminated": False, "is_truncated": True}
    for _ in range(steps):
        action = int(rng.integers(3))
        obs, reward, _, _, _ = env.step(action)
        chunk["obs"].append(obs.tolist())
        chunk["actions"].append(action)
        chunk["rewards"].append(float(reward))
    chunk["action_logp"] = [float(np.log(1 / 3))] * steps
    return EpisodeChunk.model_validate(chunk, context={"policies": policies, "from_json": True})


@pytest.mark.parametrize("memory", [{}, {"use_lstm": True, "lstm_cell_size": 16}], ids=["feed_forward", "lstm"])
def test_the_bc_loss_pulls_a_ppo_update_towards_the_demonstrated_actions(tmp_path: Path, mountain_car_demos: Path, memory: dict) -> None:
    """A recurrent learner draws whole demonstrated episodes (run through its LSTM) for the BC term."""
    model = ModelConfig(**memory)
    spaces = {"observation_space": BoxSpace(shape=(2,)), "action_space": DiscreteSpace(n=3)}
    policies = PolicySet.from_settings(Settings(**spaces, model=model))
    batch = [random_play_chunk(policies, 200)]
    learners = [
        PPOLearner(PPOConfig(), *spaces.values(), seed=0, checkpoint_dir=tmp_path / name, onnx_input_name="obs", model=model)
        for name in ("with_bc", "without")
    ]
    demos = learners[0].demonstrations(load_demos(mountain_car_demos, policies))
    learners[0].clone_during_rl(demos, 1.0, 1_000_000)
    nll = []
    for learner in learners:  # the same start (seed), the same batch of random play, one PPO update each
        learner.train(blocks_of(batch, "x"), 1)
        with torch.no_grad():
            nll.append(float(demo_nll(learner.policy, demos, torch.arange(demos.num_units))))
    assert demos.num_units == (demos.num_steps if not memory else 20)  # steps, or the 20 episodes
    # Untrained, the policy is uniform: log(3) = 1.099. Measured: 0.89 with the BC term, 1.05 without.
    assert nll[0] < nll[1] - 0.05, nll


def test_bc_strength_without_demos_is_ignored_with_a_log_line(tmp_path: Path) -> None:
    log = tmp_path / "gateway.log"
    with gateway_process(tmp_path / "checkpoints", log, *MOUNTAIN_CAR, "--bc-strength", "0.5") as gateway:
        fetch_model(gateway.base_url)
    assert "bc_strength 0.5 is ignored: no demos are set" in log.read_text(), log.read_text()
