"""Learn suite: the gateway vs Stable-Baselines3 on six tasks, same seeds, same env-step budgets.

Install the extra packages first (Stable-Baselines3, box2d, mujoco; nothing locked changes,
torch stays 2.13.0+cpu):

    .venv/bin/pip install -r requirements/bench.txt -c requirements/test.txt

    python bench/learn_suite.py [--tasks CartPole-v1 ...] [--seeds 0 1 2] [--long]
                                [--sides gateway sb3] [--eval-episodes 10] [--clients N]
                                [--learner-threads N] [--device cpu|cuda|auto]
                                [--gateway-settings task|defaults] [--gateway-env NAME=VALUE ...]

| task           | algorithm | budget (env steps) | --long    | rl-zoo entry (rl_zoo3 2.9.2)                                      |
|----------------|-----------|--------------------|-----------|-------------------------------------------------------------------|
| CartPole-v1    | PPO       | 50,000             | 100,000   | hyperparams/ppo.yml CartPole-v1 (n_timesteps 1e5) |
| Pendulum-v1    | SAC       | 15,000             | 20,000    | hyperparams/sac.yml Pendulum-v1 (n_timesteps 2e4) |
| LunarLander-v3 | PPO       | 196,608            | 983,040   | hyperparams/ppo.yml LunarLander-v3 (n_timesteps 1e6) |
| HalfCheetah-v5 | SAC       | 30,000             | 300,000   | hyperparams/sac.yml HalfCheetah-v4 (n_timesteps 1e6; no v5 entry) |
| MountainCarContinuous-v0 | SAC | 50,000           | 50,000    | hyperparams/sac.yml MountainCarContinuous-v0 (gSDE both sides) |
| Acrobot-v1     | PPO       | 100,000            | 1,000,000 | hyperparams/ppo.yml Acrobot-v1 (without its VecNormalize) |

Why these budgets: each is where the task is visibly learnt but not finished, so the
returns still separate a better learner from a worse one, and all four sides together
run in 15-30 minutes on a 2-core machine (one seed; SAC's gradient steps are most of
it): CartPole (both tuned PPOs reach 450 in 20k-50k steps: bench/learn.py's target, so
this checks the gateway is not behind once it is solved), Pendulum (SAC swings up in
5k-10k steps and balances by 15k), LunarLander (12 of rl-zoo's 16,384-step rollouts:
landing is learnt, far from 200 for rl-zoo's PPO), and HalfCheetah (rl-zoo's SAC acts
at random for 10k steps; 30k gives 20,000 gradient steps, running gait begins).
`--long` uses rl-zoo's own n_timesteps, except HalfCheetah: 300k, not 1M (1M SAC
updates take hours per side on 2 cores).

Per task and seed, one side after the other:

- **gateway**: a fresh gateway process (`python -m app --seed N`) with the task's settings
  as `RLLINK_*` environment variables (each task declares them below; other `RLLINK_*`
  variables of this shell are not passed on), and `clients` reference clients
  (`rllink_clients.gym_client.run`, what `python -m rllink_clients.cartpole` runs) over TCP,
  each with its share of the budget (one in this process, several in processes), playing
  no evaluation episodes (every env step of the budget is trained on, as SB3's; rl-zoo
  evaluates on an env of its own, outside its n_timesteps). Wall
  time: the longest client's run (from its GET_CONFIG to its last reply, gateway start
  excluded, as bench/learn.py), plus, for an off-policy learner, the wait until the
  gateway has done every gradient step its data asks for (so the final policy has had
  them all, as SB3's has). The final policy: GET /api/model.onnx, run in onnxruntime here.
  The learner trains on as many threads as SB3's torch does, one per core
  (`learner_threads`; `--learner-threads 1` for the gateway's default). `--device` sets
  the gateway's `device` (RLLINK_DEVICE: cpu, cuda, ...; left out, its own default,
  auto), to train the learner on a GPU; the gateway's /api/config says which it used.
- **SB3**: in this process, rl-zoo's tuned hyperparameters for the task (written out
  below), `make_vec_env(n_envs)` (DummyVecEnv + Monitor, as rl-zoo), `learn(budget)`.
  Wall time: building the envs and the model, and `learn`.

`--gateway-settings defaults` runs the gateway side on its embedded defaults for the
task's algorithm (only RLLINK_ALGORITHM and the spaces kept): what a user who tunes
nothing gets, against rl-zoo's tuned SB3 (issue 51's first target). `--gateway-env
RLLINK_SAC__POLICY_LR=0.001 ...` sets variables on top of either (one change to the
defaults, measured on the suite before it becomes one).

Beside wall time, each side's CPU seconds (the gateway: its process tree, start-up
included, plus its clients'; SB3: this process while it builds and learns) and the
1-minute load average before and after it: on a machine that runs other work at the same
time, wall times are not comparable and CPU seconds less disturbed.

The same evaluation for both: the mean return of `--eval-episodes` deterministic episodes
of the final policy on a fresh env (episode i reset with seed 10,000 + 1,000 x seed + i):
argmax of the logits, the Gaussian's mean clipped to the box, or for `squashed_gaussian`
tanh(mean) scaled to [low, high] (RLLINK.md "Action distributions"); SB3's
`predict(deterministic=True)` does the same for its policies. Also the mean return of the
last 20 training episodes (exploring, as trained): SB3's Monitor buffer; the gateway's
clients' (each client's last 20 / clients, pooled).

Printed per task: each side's mean over the seeds of both returns, wall time and env steps;
the ratios gateway / SB3 (for negative returns, as Pendulum's, a ratio above 1 means the
gateway is worse: read the difference too); targets met or missed: the gateway's
evaluation return >= SB3's, the gateway's wall time <= SB3's. A side that fails (the
gateway refuses its settings, trains another algorithm than the task's, a client gets an
ERROR, a package is missing) is marked failed with its error and the suite goes on; a
task whose env cannot be made (box2d or mujoco missing) is skipped with the reason. Last,
one JSON line with everything.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gymnasium as gym  # noqa: E402
import httpx  # noqa: E402
import numpy as np  # noqa: E402
from _common import HOST, emit, proc_cpu_seconds, rounded, running_gateway  # noqa: E402

INSTALL_HINT = ".venv/bin/pip install -r requirements/bench.txt -c requirements/test.txt"
LAST_EPISODES = 20
EVAL_SEED_BASE = 10_000
DEFAULTS_KEPT = ("RLLINK_ALGORITHM", "RLLINK_OBSERVATION_SPACE", "RLLINK_ACTION_SPACE")  # --gateway-settings defaults
SETTLE_TIMEOUT_S = 900.0  # longest wait for an off-policy gateway to finish its owed gradient steps


# -- The tasks -----------------------------------------------------------------------------


class ZooLinearSchedule:
    """rl-zoo's `lin_<value>`: from `initial` at the start to 0 at the end of `learn`
    (rl_zoo3.utils.SimpleLinearSchedule; SB3 calls it with the progress remaining, 1 -> 0)."""

    def __init__(self, initial: float) -> None:
        self.initial = initial

    def __call__(self, progress_remaining: float) -> float:
        return progress_remaining * self.initial

    def __repr__(self) -> str:
        return f"lin_{self.initial}"


def space_json(space: dict) -> str:
    return json.dumps(space)


@dataclass(frozen=True)
class Task:
    """One benchmark task: the env, both sides' settings, the budgets and why."""

    env_id: str
    algorithm: str  # "ppo" or "sac": SB3's class, and what the gateway must run
    budget: int
    long_budget: int
    zoo_entry: str  # where SB3's hyperparameters come from
    n_envs: int  # SB3's vectorised envs (rl-zoo's n_envs; 1 where it sets none)
    sb3: dict[str, Any]  # SB3 constructor arguments, rl-zoo's entry written out
    gateway_env: dict[str, str]  # the gateway's settings, as RLLINK_* environment variables
    clients: int = 1  # reference clients sharing the budget
    notes: str = ""  # how the gateway's settings were chosen


def _sac_env(obs_shape: int, action_shape: int, low: float, high: float, lr: float, learning_starts: int) -> dict[str, str]:
    """Gateway settings for SAC equal to SB3's SAC defaults (what rl-zoo leaves unset) with
    rl-zoo's learning rate and learning_starts: one learning rate for actor, critics and
    alpha, batch 256, tau 0.005, gamma 0.99, 1M buffer, one gradient step per env step, the
    actor and the targets updated every step (SB3 has no delayed actor), autotuned alpha
    starting at 1.0 (SB3's "auto", as the gateway's autotune starts by default),
    256x256 networks. 50 env steps per client request, so that the client fetches new
    versions often (SB3 acts with a policy never older than one step; the gateway's client
    may run up to `max_training_backlog` env steps ahead of training). At 200, Pendulum's
    mean over seeds 0-4 was -175.6; at 50, -153.2 (alpha from 0.2), -151.3 (from 1.0; SB3 -150.8)."""
    return {
        "RLLINK_ALGORITHM": "sac",
        "RLLINK_OBSERVATION_SPACE": space_json({"type": "box", "shape": [obs_shape]}),
        "RLLINK_ACTION_SPACE": space_json({"type": "box", "shape": [action_shape], "low": low, "high": high}),
        "RLLINK_ENV_STEPS_PER_SAMPLE": "50",
        "RLLINK_SAC__Q_LR": str(lr),
        "RLLINK_SAC__POLICY_LR": str(lr),
        "RLLINK_SAC__GAMMA": "0.99",
        "RLLINK_SAC__TAU": "0.005",
        "RLLINK_SAC__BUFFER_SIZE": "1000000",
        "RLLINK_SAC__BATCH_SIZE": "256",
        "RLLINK_SAC__LEARNING_STARTS": str(learning_starts),
        "RLLINK_SAC__UTD_RATIO": "1",
        "RLLINK_SAC__POLICY_FREQUENCY": "1",
        "RLLINK_SAC__TARGET_NETWORK_FREQUENCY": "1",
        "RLLINK_SAC__AUTOTUNE": "true",
        "RLLINK_SAC__ALPHA": "1.0",
        "RLLINK_SAC__HIDDEN_SIZES": "[256, 256]",
    }


TASKS: dict[str, Task] = {
    task.env_id: task
    for task in (
        Task(
            env_id="CartPole-v1",
            algorithm="ppo",
            budget=50_000,
            long_budget=100_000,
            # rl-zoo hyperparams/ppo.yml, CartPole-v1 ("Tuned").
            zoo_entry="rl_zoo3 2.9.2 hyperparams/ppo.yml: CartPole-v1",
            n_envs=8,
            sb3=dict(
                policy="MlpPolicy",
                n_steps=32,
                batch_size=256,
                gae_lambda=0.8,
                gamma=0.98,
                n_epochs=20,
                ent_coef=0.0,
                learning_rate=ZooLinearSchedule(0.001),
                clip_range=ZooLinearSchedule(0.2),
            ),
            gateway_env={
                "RLLINK_ALGORITHM": "ppo",
                "RLLINK_OBSERVATION_SPACE": space_json({"type": "box", "shape": [4]}),
                "RLLINK_ACTION_SPACE": space_json({"type": "discrete", "n": 2}),
            },
            notes="the gateway's embedded PPO defaults, which are tuned on CartPole-v1 (bench/learn.py)",
        ),
        Task(
            env_id="Pendulum-v1",
            algorithm="sac",
            budget=15_000,
            long_budget=20_000,
            # rl-zoo hyperparams/sac.yml, Pendulum-v1: learning_rate 1e-3, SB3's defaults otherwise.
            zoo_entry="rl_zoo3 2.9.2 hyperparams/sac.yml: Pendulum-v1",
            n_envs=1,
            sb3=dict(policy="MlpPolicy", learning_rate=1e-3),
            gateway_env=_sac_env(3, 1, -2.0, 2.0, lr=1e-3, learning_starts=100),
            notes="SAC with the SB3/rl-zoo hyperparameters translated (see _sac_env)",
        ),
        Task(
            env_id="LunarLander-v3",
            algorithm="ppo",
            budget=196_608,  # 12 of rl-zoo's 16 x 1,024-step rollouts = 96 of the gateway's 2,048-step samples
            long_budget=983_040,  # rl-zoo's 1e6, rounded down to whole rollouts (60) for both sides
            # rl-zoo hyperparams/ppo.yml, LunarLander-v3 (learning_rate 3e-4, clip 0.2: SB3's defaults).
            zoo_entry="rl_zoo3 2.9.2 hyperparams/ppo.yml: LunarLander-v3",
            n_envs=16,
            sb3=dict(
                policy="MlpPolicy",
                n_steps=1024,
                batch_size=64,
                gae_lambda=0.98,
                gamma=0.999,
                n_epochs=4,
                ent_coef=0.01,
            ),
            gateway_env={
                "RLLINK_ALGORITHM": "ppo",
                "RLLINK_OBSERVATION_SPACE": space_json({"type": "box", "shape": [8]}),
                "RLLINK_ACTION_SPACE": space_json({"type": "discrete", "n": 4}),
                "RLLINK_ENV_STEPS_PER_SAMPLE": "2048",
                "RLLINK_PPO__LEARNING_RATE": "3e-4",
                "RLLINK_PPO__GAMMA": "0.999",
                "RLLINK_PPO__GAE_LAMBDA": "0.98",
                "RLLINK_PPO__ENT_COEF": "0.01",
                "RLLINK_PPO__UPDATE_EPOCHS": "4",
                "RLLINK_PPO__MINIBATCH_SIZE": "64",
            },
            notes="rl-zoo's PPO hyperparameters translated; one client, 2,048 env steps per training step "
            "(rl-zoo's rollout is 16 x 1,024 = 16,384: one client would wait 16,384 steps per version)",
        ),
        Task(
            env_id="HalfCheetah-v5",
            algorithm="sac",
            budget=30_000,
            long_budget=300_000,
            # rl-zoo hyperparams/sac.yml, HalfCheetah-v4 (&mujoco-defaults): learning_starts 10000, SB3's defaults otherwise.
            zoo_entry="rl_zoo3 2.9.2 hyperparams/sac.yml: HalfCheetah-v4 (no v5 entry; v5 is the same task)",
            n_envs=1,
            sb3=dict(policy="MlpPolicy", learning_starts=10_000),
            gateway_env=_sac_env(17, 6, -1.0, 1.0, lr=3e-4, learning_starts=10_000),
            notes="SAC with the SB3/rl-zoo hyperparameters translated (see _sac_env)",
        ),
        Task(
            env_id="MountainCarContinuous-v0",
            algorithm="sac",
            budget=50_000,
            long_budget=50_000,
            # rl-zoo hyperparams/sac.yml, MountainCarContinuous-v0 (gSDE, a fixed entropy coefficient).
            zoo_entry="rl_zoo3 2.9.2 hyperparams/sac.yml: MountainCarContinuous-v0",
            n_envs=1,
            sb3=dict(
                policy="MlpPolicy",
                learning_rate=3e-4,
                buffer_size=50_000,
                batch_size=512,
                ent_coef=0.1,
                train_freq=32,
                gradient_steps=32,
                gamma=0.9999,
                tau=0.01,
                learning_starts=0,
                use_sde=True,
                policy_kwargs=dict(log_std_init=-3.67, net_arch=[64, 64]),
            ),
            gateway_env=_sac_env(2, 1, -1.0, 1.0, lr=3e-4, learning_starts=1)
            | {
                "RLLINK_SAC__BUFFER_SIZE": "50000",
                "RLLINK_SAC__BATCH_SIZE": "512",
                "RLLINK_SAC__GAMMA": "0.9999",
                "RLLINK_SAC__TAU": "0.01",
                "RLLINK_SAC__AUTOTUNE": "false",
                "RLLINK_SAC__ALPHA": "0.1",
                "RLLINK_SAC__HIDDEN_SIZES": "[64, 64]",
                "RLLINK_SAC__UTD_RATIO": "0.25",
                "RLLINK_SAC__EXPLORATION": "gsde",
                "RLLINK_SAC__GSDE_LOG_STD_INIT": "-0.5",
                "RLLINK_ENV_STEPS_PER_SAMPLE": "32",
                "RLLINK_MAX_TRAINING_BACKLOG": "0",
            },
            notes="rl-zoo's SAC settings translated, with gSDE: the client fetches a version every 32 env steps "
            "and waits for it (max_training_backlog 0), so theta is drawn every 32 env steps as rl-zoo's SAC "
            "does (a rollout of train_freq 32); gsde_log_std_init -0.5, not rl-zoo's -3.67, and 0.25 gradient "
            "steps per env step, not 1: at -3.67 and 0.25 the noise grew too slowly to reach the flag in 11k "
            "env steps (one seed), at -2.0 the flag came at 18k; 1 gradient step per env step ran at about 9 a "
            "second on the loaded 2-core machine (over 1.5 hours a seed)",
        ),
        Task(
            env_id="Acrobot-v1",
            algorithm="ppo",
            budget=100_000,
            long_budget=1_000_000,
            # rl-zoo hyperparams/ppo.yml, Acrobot-v1 (normalize: true, n_envs 16).
            zoo_entry="rl_zoo3 2.9.2 hyperparams/ppo.yml: Acrobot-v1 (without its VecNormalize)",
            n_envs=16,
            sb3=dict(policy="MlpPolicy", n_steps=256, gae_lambda=0.94, gamma=0.99, n_epochs=4, ent_coef=0.0),
            gateway_env={
                "RLLINK_ALGORITHM": "ppo",
                "RLLINK_OBSERVATION_SPACE": space_json({"type": "box", "shape": [6]}),
                "RLLINK_ACTION_SPACE": space_json({"type": "discrete", "n": 3}),
            },
            notes="the gateway's embedded PPO defaults; evaluated greedily (the most likely action), as a game ships it",
        ),
    )
}


# -- Evaluation (the same for both sides) --------------------------------------------------


def evaluate(act: Callable[[np.ndarray], Any], env_id: str, episodes: int, seed: int) -> list[float]:
    """Returns of `episodes` whole episodes on a fresh env, acting with `act` (deterministic)."""
    env = gym.make(env_id)
    returns = []
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=EVAL_SEED_BASE + 1000 * seed + i)
            done, total = False, 0.0
            while not done:
                obs, reward, terminated, truncated, _ = env.step(act(obs))
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
    finally:
        env.close()
    return returns


def deterministic_action(distribution: str, dist_inputs: np.ndarray, action_space: dict) -> Any:
    """The action a policy's outputs (one row) stand for without exploring: the most likely
    index (`categorical`), the mean clipped to the box (`gaussian`), or the tanh of the mean
    scaled to [low, high] (`squashed_gaussian`), as RLLINK.md's Action distributions say."""
    if distribution == "categorical":
        return int(np.argmax(dist_inputs))
    mean = dist_inputs[: len(dist_inputs) // 2]
    low, high = action_space.get("low"), action_space.get("high")
    if distribution == "gaussian":
        action = mean if low is None and high is None else np.clip(mean, low, high)
    elif distribution == "squashed_gaussian":
        action = low + (np.tanh(mean) + 1.0) / 2.0 * (np.asarray(high) - low)
    else:
        raise ValueError(f"the suite cannot evaluate action distribution {distribution!r}")
    return np.asarray(action, dtype=np.float32).reshape(action_space.get("shape") or (-1,))


def onnx_actor(model: bytes, input_name: str, distribution: str, action_space: dict) -> Callable[[np.ndarray], Any]:
    """act(obs) with a gateway's ONNX policy in onnxruntime, deterministically."""
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])

    def act(obs: np.ndarray) -> Any:
        (outputs,) = session.run(None, {input_name: np.asarray(obs, dtype=np.float32)[None]})[:1]
        return deterministic_action(distribution, outputs[0].astype(np.float64), action_space)

    return act


# -- The gateway side --------------------------------------------------------------------


@contextmanager
def gateway_environment(values: dict[str, str]) -> Iterator[None]:
    """os.environ with exactly these RLLINK_* variables (for the gateway process started
    inside; it copies the environment when it starts), restored after."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("RLLINK_")}
    for name in saved:
        del os.environ[name]
    os.environ.update(values)
    try:
        yield
    finally:
        for name in values:
            os.environ.pop(name, None)
        os.environ.update(saved)


def client_run(port: int, env_id: str, max_env_steps: int, seed: int) -> dict[str, Any]:
    """One reference client over TCP until its share of the budget is spent (no target)."""
    from rllink_clients.gym_client import run
    from rllink_clients.rllink_client import RLlinkClient

    cpu_started = time.process_time()
    with RLlinkClient("tcp", HOST, port, timeout=600) as client:
        # No evaluation episodes: every env step of the budget is trained on, as SB3's are (rl-zoo
        # evaluates on an env of its own, outside n_timesteps); the suite evaluates the final policy.
        result = run(client, env_id, target_return=None, max_env_steps=max_env_steps, seed=seed, evaluation_interval=0)
    return {
        "cpu_s": time.process_time() - cpu_started,
        "env_steps": result.env_steps,
        "episodes": result.episodes,
        "seconds": result.seconds,
        "recent_returns": list(result.recent_returns),
        "weights_seq_no": result.weights_seq_no,
    }


def run_clients(port: int, task: Task, budget: int, seed: int, clients: int) -> list[dict[str, Any]]:
    """`clients` reference clients sharing the budget: in this process if one, else each in
    its own process (seeds seed*100 + i)."""
    share = math.ceil(budget / clients)
    if clients == 1:
        return [client_run(port, task.env_id, share, seed)]
    with ProcessPoolExecutor(clients, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(client_run, port, task.env_id, share, seed * 100 + i) for i in range(clients)]
        return [f.result() for f in futures]


def gateway_config(base_url: str) -> dict[str, Any]:
    """What the running gateway says it is: algorithm, ONNX input name, the default module's
    action distribution and action space."""
    config = httpx.get(f"{base_url}/api/config", timeout=10).json()
    policies = httpx.get(f"{base_url}/api/policies", timeout=10).json()
    default_id = config.get("default_module_id", "default_policy")
    module = next((p for p in policies if p.get("module_id") == default_id), policies[0])
    return {
        "algorithm": config.get("algorithm", "ppo"),
        "onnx_input_name": config.get("onnx_input_name", "obs"),
        "device": config.get("device"),
        "action_distribution": module.get("action_distribution")
        or ("categorical" if module["action_space"]["type"] == "discrete" else "gaussian"),
        "action_space": module["action_space"],
    }


def settled(metrics: dict[str, Any]) -> bool:
    """Every env step received is trained and no gradient step is owed."""
    owed = (metrics.get("learner") or {}).get("owed_updates") or 0
    return (
        not metrics.get("pending_env_steps")
        and not metrics.get("training_env_steps")
        and not metrics.get("training_in_progress")
        and owed < 1
    )


def wait_until_settled(base_url: str, timeout_s: float = SETTLE_TIMEOUT_S) -> dict[str, Any]:
    """Poll /api/metrics until the gateway has trained on everything; its last reading."""
    deadline = time.monotonic() + timeout_s
    while True:
        metrics = httpx.get(f"{base_url}/api/metrics", timeout=10).json()
        if settled(metrics):
            return metrics
        if time.monotonic() > deadline:
            raise TimeoutError(f"the gateway still had training to do after {timeout_s:g} s: {metrics.get('learner')}")
        time.sleep(0.1)


def pooled_last_returns(clients: list[dict[str, Any]]) -> list[float]:
    """The last 20 training episodes, split evenly over the clients (each client's last 20 / n)."""
    per_client = math.ceil(LAST_EPISODES / len(clients))
    return [r for c in clients for r in c["recent_returns"][-per_client:]]


def run_gateway_side(task: Task, seed: int, budget: int, eval_episodes: int, clients: int) -> dict[str, Any]:
    """Train through a fresh gateway with the task's settings; evaluate its final ONNX policy."""
    with ExitStack() as stack:
        started = time.monotonic()
        with gateway_environment(task.gateway_env):
            gateway = stack.enter_context(running_gateway("--seed", str(seed)))
        startup_s = time.monotonic() - started
        config = gateway_config(gateway.base_url)
        if config["algorithm"] != task.algorithm:
            raise RuntimeError(
                f"the gateway runs {config['algorithm']!r}, this task needs {task.algorithm!r} "
                f"(RLLINK_ALGORITHM={task.gateway_env.get('RLLINK_ALGORITHM')} was ignored or refused)"
            )
        print(f"    gateway: {config['algorithm']} on device {config['device']}", flush=True)
        runs = run_clients(gateway.tcp_port, task, budget, seed, clients)
        settle_started = time.monotonic()
        metrics = wait_until_settled(gateway.base_url)
        settle_s = time.monotonic() - settle_started
        gateway_cpu_s = proc_cpu_seconds(gateway.pid)  # its decode workers too; start-up included
        model = httpx.get(f"{gateway.base_url}/api/model.onnx", timeout=30)
        model.raise_for_status()
    act = onnx_actor(model.content, config["onnx_input_name"], config["action_distribution"], config["action_space"])
    eval_returns = evaluate(act, task.env_id, eval_episodes, seed)
    return {
        "seed": seed,
        "eval_returns": [round(r, 2) for r in eval_returns],
        "eval_return": float(np.mean(eval_returns)),
        "last_20_return": float(np.mean(pooled_last_returns(runs))),
        "wall_s": max(r["seconds"] for r in runs) + settle_s,
        "cpu_s": gateway_cpu_s + sum(r["cpu_s"] for r in runs),
        "settle_s": settle_s,
        "startup_s": startup_s,
        "env_steps": sum(r["env_steps"] for r in runs),
        "episodes": sum(r["episodes"] for r in runs),
        "clients": clients,
        "weights_seq_no": int(model.headers.get("X-Weights-Seq-No", metrics.get("weights_seq_no", 0))),
        "training_steps": metrics.get("num_training_steps"),
        "env_steps_trained": metrics.get("num_env_steps_trained_lifetime"),
        "gradient_steps_last_version": (metrics.get("learner") or {}).get("gradient_steps"),  # SAC
        "dropped_env_steps": metrics.get("dropped_env_steps"),
        "action_distribution": config["action_distribution"],
        "device": config["device"],
    }


# -- The Stable-Baselines3 side -----------------------------------------------------------


def run_sb3_side(task: Task, seed: int, budget: int, eval_episodes: int) -> dict[str, Any]:
    """rl-zoo's hyperparameters in SB3, in this process; evaluate its final policy."""
    try:
        import stable_baselines3
        from stable_baselines3.common.env_util import make_vec_env
    except ImportError as exc:
        raise RuntimeError(f"stable-baselines3 is not installed ({exc}): {INSTALL_HINT}") from exc
    algorithm_class = {"ppo": stable_baselines3.PPO, "sac": stable_baselines3.SAC}[task.algorithm]
    started, cpu_started = time.monotonic(), time.process_time()
    env = make_vec_env(task.env_id, n_envs=task.n_envs, seed=seed)
    model = algorithm_class(env=env, seed=seed, device="cpu", verbose=0, **task.sb3)
    model.learn(total_timesteps=budget)
    wall_s, cpu_s = time.monotonic() - started, time.process_time() - cpu_started
    last = [float(info["r"]) for info in list(model.ep_info_buffer)[-LAST_EPISODES:]]
    env.close()

    def act(obs: np.ndarray) -> Any:
        action, _ = model.predict(obs, deterministic=True)
        return action

    eval_returns = evaluate(act, task.env_id, eval_episodes, seed)
    return {
        "seed": seed,
        "eval_returns": [round(r, 2) for r in eval_returns],
        "eval_return": float(np.mean(eval_returns)),
        "last_20_return": float(np.mean(last)) if last else float("nan"),
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        "env_steps": int(model.num_timesteps),
        "episodes": None,
        "sb3_version": stable_baselines3.__version__,
    }


# -- Running and reporting -----------------------------------------------------------------


def env_problem(env_id: str) -> str | None:
    """Why the task's env cannot be made here (box2d or mujoco missing), or None."""
    try:
        gym.make(env_id).close()
    except Exception as exc:  # noqa: BLE001 - DependencyNotInstalled, ImportError, ...
        return f"{env_id} cannot be made here: {type(exc).__name__}: {exc} (install: {INSTALL_HINT})"
    return None


def run_side(name: str, fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """One side of one seed; a failure becomes {"ok": False, "error": ...} and the suite goes on."""
    load_before = os.getloadavg()[0]
    try:
        result = fn(*args)
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the other sides still run
        error = f"{type(exc).__name__}: {exc}".strip()
        print(f"    {name}: FAILED: {error}", flush=True)
        return {"ok": False, "error": error, "traceback": traceback.format_exc(limit=5)}
    result["load_average_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]  # before, after
    print(
        f"    {name}: eval {result['eval_return']:.1f}, last 20 episodes {result['last_20_return']:.1f}, "
        f"{result['wall_s']:.1f} s ({result['cpu_s']:.0f} CPU-s), {result['env_steps']:,} env steps, "
        f"load average {result['load_average_1m'][0]:.1f} -> {result['load_average_1m'][1]:.1f}",
        flush=True,
    )
    return {"ok": True, **result}


def summarize_side(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over the seeds that ran; failed if any seed failed (its first error kept)."""
    failed = [r for r in runs if not r["ok"]]
    good = [r for r in runs if r["ok"]]
    mean = lambda key: rounded(statistics.fmean(r[key] for r in good), 2) if good else None  # noqa: E731
    return {
        "ok": not failed,
        "error": failed[0]["error"] if failed else None,
        "eval_return": mean("eval_return"),
        "eval_return_std_over_seeds": rounded(statistics.pstdev(r["eval_return"] for r in good), 2) if good else None,
        "last_20_return": mean("last_20_return"),
        "wall_s": mean("wall_s"),
        "cpu_s": mean("cpu_s"),
        "env_steps": mean("env_steps"),
        "runs": [{k: (rounded(v, 3) if isinstance(v, float) else v) for k, v in r.items()} for r in runs],
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return rounded(a / b, 3) if a is not None and b not in (None, 0) else None


def compare(gateway: dict[str, Any], sb3: dict[str, Any]) -> tuple[dict[str, Any], dict[str, bool]]:
    """Ratios gateway / SB3 and the two targets (missed if either side failed)."""
    both = gateway["ok"] and sb3["ok"]
    ratios = {
        "eval_return": ratio(gateway["eval_return"], sb3["eval_return"]),
        "eval_return_difference": rounded(gateway["eval_return"] - sb3["eval_return"], 2) if both else None,
        "last_20_return": ratio(gateway["last_20_return"], sb3["last_20_return"]),
        "wall_s": ratio(gateway["wall_s"], sb3["wall_s"]),
        "cpu_s": ratio(gateway["cpu_s"], sb3["cpu_s"]),
    }
    targets = {
        "return >= SB3": bool(both and gateway["eval_return"] >= sb3["eval_return"]),
        "wall time <= SB3": bool(both and gateway["wall_s"] <= sb3["wall_s"]),
    }
    return ratios, targets


def side_line(name: str, side: dict[str, Any] | None) -> str:
    if side is None:
        return f"  {name:8s} not run (--sides)"
    if not side["ok"]:
        return f"  {name:8s} FAILED: {side['error']}"
    return (
        f"  {name:8s} eval return {side['eval_return']:9.1f} (std over seeds {side['eval_return_std_over_seeds']:.1f}), "
        f"last 20 training episodes {side['last_20_return']:9.1f}, wall {side['wall_s']:7.1f} s "
        f"({side['cpu_s']:,.0f} CPU-s), "
        f"{side['env_steps']:,.0f} env steps"
    )


def task_lines(task: Task, budget: int, result: dict[str, Any]) -> list[str]:
    """The human summary of one task."""
    head = f"{task.env_id} ({task.algorithm.upper()}, budget {budget:,} env steps, seeds {result['seeds']})"
    if result.get("skipped"):
        return [f"{head}: SKIPPED: {result['skipped']}"]
    lines = [head, side_line("gateway", result.get("gateway")), side_line("SB3", result.get("sb3"))]
    if "ratios" in result:
        r, t = result["ratios"], result["targets"]
        fmt = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
        lines.append(
            f"  gateway/SB3: eval return {fmt(r['eval_return'])} (difference {fmt(r['eval_return_difference'])}), "
            f"last-20 return {fmt(r['last_20_return'])}, wall time {fmt(r['wall_s'])} (CPU time {fmt(r['cpu_s'])})"
        )
        lines.append("  " + "; ".join(f"target {name}: {'met' if ok else 'MISSED'}" for name, ok in t.items()))
    return lines


def run_task(task: Task, args: argparse.Namespace) -> dict[str, Any]:
    """Every seed of one task, the gateway then SB3 for each; the summary of both sides."""
    budget = task.long_budget if args.long else task.budget
    if args.gateway_settings == "defaults":
        kept = {k: v for k, v in task.gateway_env.items() if k in DEFAULTS_KEPT}
        task = replace(task, gateway_env=kept, notes="the gateway's embedded defaults (--gateway-settings defaults)")
    if args.gateway_env:
        task = replace(task, gateway_env={**task.gateway_env, **args.gateway_env}, notes=f"{task.notes}; set: {args.gateway_env}")
    result: dict[str, Any] = {
        "algorithm": task.algorithm,
        "budget": budget,
        "seeds": args.seeds,
        "zoo_entry": task.zoo_entry,
        "sb3_hyperparams": {k: repr(v) if isinstance(v, ZooLinearSchedule) else v for k, v in task.sb3.items()},
        "sb3_n_envs": task.n_envs,
        "gateway_settings": task.gateway_env,
        "gateway_notes": task.notes,
    }
    print(f"{task.env_id}: {task.algorithm.upper()}, {budget:,} env steps, seeds {args.seeds}", flush=True)
    problem = env_problem(task.env_id)
    if problem:
        print(f"  SKIPPED: {problem}", flush=True)
        return {**result, "skipped": problem}
    clients = args.clients or task.clients
    device = {"RLLINK_DEVICE": args.device} if args.device else {}
    task = replace(task, gateway_env={**task.gateway_env, "RLLINK_LEARNER_THREADS": str(args.learner_threads), **device})
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in args.sides}
    for seed in args.seeds:
        print(f"  seed {seed}", flush=True)
        if "gateway" in runs:
            runs["gateway"].append(run_side("gateway", run_gateway_side, task, seed, budget, args.eval_episodes, clients))
        if "sb3" in runs:
            runs["sb3"].append(run_side("SB3", run_sb3_side, task, seed, budget, args.eval_episodes))
    sides = {side: summarize_side(side_runs) for side, side_runs in runs.items()}
    result.update(sides)
    if len(sides) == 2:
        result["ratios"], result["targets"] = compare(sides["gateway"], sides["sb3"])
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--long", action="store_true", help="rl-zoo's budgets (HalfCheetah: 300k)")
    parser.add_argument("--sides", nargs="+", choices=["gateway", "sb3"], default=["gateway", "sb3"])
    parser.add_argument("--eval-episodes", type=int, default=10, help="deterministic episodes of the final policy")
    parser.add_argument("--clients", type=int, help="reference clients per gateway run (default: the task's, 1)")
    parser.add_argument(
        "--learner-threads",
        type=int,
        default=os.cpu_count(),
        help="the gateway's learner_threads (default: the cores, as SB3's torch uses; the gateway's own default is 1)",
    )
    parser.add_argument(
        "--gateway-settings",
        choices=["task", "defaults"],
        default="task",
        help="the gateway's settings: the task's (rl-zoo's translated where the task has them) or its embedded defaults",
    )
    parser.add_argument(
        "--gateway-env",
        nargs="+",
        default=[],
        metavar="NAME=VALUE",
        help="RLLINK_* variables set on top of the chosen settings (RLLINK_SAC__POLICY_LR=0.001)",
    )
    parser.add_argument(
        "--device",
        help="the gateway's device (RLLINK_DEVICE): cpu, cuda, cuda:N, auto (default: the gateway's own, auto)",
    )
    args = parser.parse_args(argv)
    pairs = [item.partition("=") for item in args.gateway_env]
    if bad := [name for name, sep, _ in pairs if not (sep and name.startswith("RLLINK_"))]:
        parser.error(f"--gateway-env takes RLLINK_NAME=VALUE, got {bad[0]!r}")
    args.gateway_env = {name: value for name, _, value in pairs}
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    results, lines, targets = {}, [], {}
    for env_id in args.tasks:
        task = TASKS[env_id]
        results[env_id] = run_task(task, args)
        lines.extend(task_lines(task, results[env_id]["budget"], results[env_id]))
        for name, ok in results[env_id].get("targets", {}).items():
            targets[f"{env_id} {name}"] = ok
    met = sum(targets.values())
    missed = [name for name, reached in targets.items() if not reached]
    lines.append(f"targets met: {met}/{len(targets)}" + (f" (missed: {', '.join(missed)})" if missed else ""))
    emit(
        "learn_suite",
        lines,
        {
            "long": args.long,
            "seeds": args.seeds,
            "eval_episodes": args.eval_episodes,
            "sides": args.sides,
            "tasks": results,
            "targets": targets,
        },
    )


if __name__ == "__main__":
    main()
