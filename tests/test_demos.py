"""Demonstrations: recorded by the reference client, loaded and checked by the gateway,
and behavioural-cloning pre-training that makes the first published policy play like the
demonstrator before any RL step (real gateway processes, real ONNX, real gymnasium)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import gymnasium as gym
import numpy as np
import onnxruntime as ort
import pytest
from pydantic import ValidationError

from app.settings.config import Settings
from tests.gateway_process import ROOT, gateway_process

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
    policy's most likely action at every step."""
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    env = gym.make(env_id)
    results = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=10_000 + episode)  # starts the demonstrations never saw
        total, terminated, truncated = 0.0, False, False
        while not (terminated or truncated):
            logits = session.run(None, {"obs": np.asarray(obs, np.float32)[None]})[0][0]
            obs, reward, terminated, truncated, _ = env.step(int(np.argmax(logits)))
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


def bad_line(demos: Path, tmp_path: Path, line_3: str) -> Path:
    """The recorded file with its third line (its second chunk, after the header) replaced."""
    lines = demos.read_text().splitlines()
    lines[2] = line_3
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    return bad


def a_chunk(demos: Path, **changes: object) -> str:
    return json.dumps({**json.loads(demos.read_text().splitlines()[1]), **changes})


@pytest.mark.parametrize(
    ("line_3", "problem"),
    [
        ('{"obs": [[0.1, 0.2], [0.3', "not JSON"),
        ("three observations", "obs: each observation must have shape [2], got [3]"),
        ("an unknown module", "no_such_module"),
    ],
)
def test_a_bad_demo_file_refuses_the_start_in_one_line(tmp_path: Path, mountain_car_demos: Path, line_3: str, problem: str) -> None:
    if line_3 == "three observations":
        line_3 = a_chunk(mountain_car_demos, obs=[[0.0, 0.0, 0.0]] * (len(json.loads(a_chunk(mountain_car_demos))["obs"])))
    elif line_3 == "an unknown module":
        line_3 = a_chunk(mountain_car_demos, module_id="no_such_module")
    bad = bad_line(mountain_car_demos, tmp_path, line_3)
    done = subprocess.run(
        [sys.executable, "-m", "app", "--http-port", "0", "--tcp-port", "0", "--checkpoint-dir", str(tmp_path / "ck"),
         *MOUNTAIN_CAR, "--demos", str(bad)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "cannot start" in line]
    assert len(errors) == 1, done.stderr
    assert f"demos file {bad}, line 3: " in errors[0] and problem in errors[0], errors[0]
    assert not (tmp_path / "ck").exists()  # nothing saved: the next start pre-trains on the fixed file


def test_demos_settings_name_trained_ppo_modules(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="demos names nope: not a trained module"):
        Settings(demos={"nope": str(tmp_path / "d.jsonl")})
    with pytest.raises(ValidationError, match="learn with SAC, which has no behavioural-cloning"):
        Settings(demos=str(tmp_path / "d.jsonl"), algorithm="sac", action_space={"type": "discrete", "n": 2})
    assert Settings(demos={"default_policy": str(tmp_path / "d.jsonl")}).demos == {"default_policy": tmp_path / "d.jsonl"}
