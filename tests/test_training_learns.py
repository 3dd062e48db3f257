"""SLOW: real training, end to end in one process (each test ~10-30 s; deselect the
module with `-k "not learns"`).

Gymnasium simulators act like RLlib's reference client: they sample actions from the
softmax (or Gaussian) of the ONNX policy they downloaded, send EPISODES_AND_GET_STATE
every env_steps_per_sample steps and wait for SET_STATE, against a TrainingService
driven in-process. Run as a module to measure over several seeds:

    python -m tests.test_training_learns --seeds 0 1 2 3 4 --clients 2
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gzip
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np
import onnxruntime as ort

from app.config import PPOConfig, Settings
from app.schemas import EpisodeChunk, SpacesContext
from app.spaces import BoxSpace
from app.training import PolicyState, TrainingService

PENDULUM_OBSERVATION_SPACE = BoxSpace(shape=(3,))
PENDULUM_ACTION_SPACE = BoxSpace(shape=(1,), low=-2.0, high=2.0)


def onnx_session(state: PolicyState) -> ort.InferenceSession:
    """Open the model exactly as a client does: from SET_STATE's base64 gzip payload."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(gzip.decompress(base64.b64decode(state.onnx_gzip_b64)), options)


@dataclass
class SimClient:
    """One simulator: a gymnasium env, the current ONNX policy and the chunk being filled."""

    env: gym.Env
    rng: np.random.Generator
    input_name: str
    session: ort.InferenceSession | None = None
    obs: np.ndarray | None = None
    returns: list[float] = field(default_factory=list)
    _episode_return: float = 0.0

    def collect(self, num_steps: int, spaces: SpacesContext) -> list[EpisodeChunk]:
        """Step the env num_steps times; one chunk per episode piece, like RLlib's client."""
        chunks, obs, actions, rewards, logps, dist_inputs = [], [self.obs], [], [], [], []
        for t in range(num_steps):
            logits = self.session.run(None, {self.input_name: self.obs[None]})[0][0]
            action, logp, env_action = self.sample(logits)
            self.obs, reward, terminated, truncated, _ = self.env.step(env_action)
            self._episode_return += float(reward)
            obs.append(self.obs)
            actions.append(action)
            rewards.append(float(reward))
            logps.append(logp)
            dist_inputs.append(logits)
            if terminated or truncated or t == num_steps - 1:
                chunks.append(
                    EpisodeChunk.model_validate(
                        {
                            "obs": np.asarray(obs, np.float32),
                            "actions": np.asarray(actions),
                            "rewards": rewards,
                            "action_logp": logps,
                            "action_dist_inputs": np.asarray(dist_inputs, np.float32),
                            "is_terminated": terminated,
                            "is_truncated": truncated,
                        },
                        context={"spaces": spaces},
                    )
                )
                if terminated or truncated:
                    self.returns.append(self._episode_return)
                    self._episode_return = 0.0
                    self.obs, _ = self.env.reset(seed=int(self.rng.integers(2**31)))
                obs, actions, rewards, logps, dist_inputs = [self.obs], [], [], [], []
        return chunks

    def sample(self, dist_inputs: np.ndarray) -> tuple[object, float, object]:
        """(action to send, its log-prob, action for the env)."""
        if isinstance(self.env.action_space, gym.spaces.Discrete):
            probs = np.exp(dist_inputs - dist_inputs.max())
            probs /= probs.sum()
            action = int(min(np.searchsorted(np.cumsum(probs), self.rng.random()), len(probs) - 1))
            return action, float(np.log(probs[action])), action
        mean, log_std = np.split(dist_inputs, 2)
        noise = self.rng.standard_normal(mean.shape).astype(np.float32)
        action = mean + np.exp(log_std) * noise
        logp = float(np.sum(-0.5 * noise**2 - log_std - 0.5 * np.log(2 * np.pi)))
        env_action = np.clip(action, self.env.action_space.low, self.env.action_space.high)
        return action.tolist(), logp, env_action


@dataclass
class RunResult:
    env_steps: int
    seconds: float  # from the first step collected to the end (the service's start excluded)
    returns: list[float]  # every finished episode, in the order the clients sent them
    reached: bool
    weights_seq_no: int

    def mean_return(self, episodes: slice) -> float:
        return float(np.mean(self.returns[episodes]))


async def train_in_process(
    settings: Settings,
    env_id: str,
    num_clients: int,
    max_env_steps: int,
    target_return: float | None = None,
    last_n: int = 20,
    max_seconds: float = 120.0,
) -> RunResult:
    """Run clients against a fresh TrainingService until the mean of the last `last_n`
    episode returns reaches `target_return`, or the step or time budget is spent."""
    service = TrainingService(settings)
    await service.start()
    spaces = SpacesContext(settings.observation_space, settings.action_space)
    started = time.perf_counter()
    done = asyncio.Event()
    returns: list[float] = []

    def reached() -> bool:
        recent = returns[-last_n:]
        return target_return is not None and len(recent) == last_n and np.mean(recent) >= target_return

    async def run_client(index: int) -> None:
        rng = np.random.default_rng(settings.seed * 1000 + index)
        sim = SimClient(gym.make(env_id), rng, settings.onnx_input_name)
        sim.obs, _ = sim.env.reset(seed=int(rng.integers(2**31)))
        client = service.connect("in-process", f"sim-{index}")
        state = service.current_state()
        try:
            while not done.is_set():
                service.note_state_sent(client, state)
                sim.session = onnx_session(state)
                finished_before = len(sim.returns)
                # In a thread, as if in another process: the event loop keeps serving.
                chunks = await asyncio.to_thread(sim.collect, settings.env_steps_per_sample, spaces)
                returns.extend(sim.returns[finished_before:])
                service.ingest(client, chunks)
                if (
                    reached()
                    or service.metrics.num_env_steps_sampled_lifetime >= max_env_steps
                    or time.perf_counter() - started > max_seconds
                ):
                    done.set()
                    break
                state = await service.wait_for_training(client)
        finally:
            service.disconnect(client)

    await asyncio.gather(*(run_client(i) for i in range(num_clients)))
    result = RunResult(
        env_steps=service.metrics.num_env_steps_sampled_lifetime,
        seconds=time.perf_counter() - started,
        returns=returns,
        reached=reached(),
        weights_seq_no=service.current_state().weights_seq_no,
    )
    await service.stop()
    return result


def cartpole_settings(tmp_path: Path, seed: int) -> Settings:
    """The defaults: they are tuned for CartPole-v1."""
    return Settings(seed=seed, checkpoint_dir=tmp_path / "checkpoints")


def pendulum_settings(tmp_path: Path, seed: int) -> Settings:
    """Pendulum-v1: continuous actions in [-2, 2], episodes of 200 steps."""
    return Settings(
        seed=seed,
        checkpoint_dir=tmp_path / "checkpoints",
        observation_space=PENDULUM_OBSERVATION_SPACE,
        action_space=PENDULUM_ACTION_SPACE,
        env_steps_per_sample=1000,
        ppo=PPOConfig(gamma=0.9),
    )


async def test_cartpole_reaches_450_within_50k_steps(tmp_path: Path) -> None:
    # Measured: median ~20k steps and ~8 s with two clients; the budget is 2.5x that.
    result = await train_in_process(
        cartpole_settings(tmp_path, seed=0),
        "CartPole-v1",
        num_clients=2,
        max_env_steps=50_000,
        target_return=450.0,
        max_seconds=60,
    )
    print(
        f"CartPole: {result.env_steps} steps, {result.seconds:.1f} s, last 20 mean {result.mean_return(slice(-20, None)):.1f}"
    )
    assert result.reached, f"mean of the last 20 returns {result.mean_return(slice(-20, None)):.1f} < 450"
    assert result.env_steps < 50_000 and result.weights_seq_no >= 1


async def test_pendulum_improves_clearly_over_the_initial_random_policy(tmp_path: Path) -> None:
    # The initial policy is a N(0, 1) random one: about -1200 per episode (std ~300).
    # Measured after 30k steps: -250 to -640 over the last 20 episodes, in ~15 s.
    result = await train_in_process(
        pendulum_settings(tmp_path, seed=0),
        "Pendulum-v1",
        num_clients=1,
        max_env_steps=30_000,
        max_seconds=60,
    )
    first, last = result.mean_return(slice(0, 20)), result.mean_return(slice(-20, None))
    print(f"Pendulum: {result.env_steps} steps, {result.seconds:.1f} s, first 20 mean {first:.1f}, last 20 {last:.1f}")
    assert len(result.returns) >= 100
    assert last > first + 300, f"no clear improvement: first 20 episodes {first:.1f}, last 20 {last:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1", choices=["CartPole-v1", "Pendulum-v1"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--max-env-steps", type=int, default=100_000)
    parser.add_argument("--target", type=float, default=450.0)
    args = parser.parse_args()
    results = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            make = cartpole_settings if args.env == "CartPole-v1" else pendulum_settings
            target = args.target if args.env == "CartPole-v1" else None
            result = asyncio.run(
                train_in_process(make(Path(tmp), seed), args.env, args.clients, args.max_env_steps, target)
            )
        results.append(result)
        print(
            f"seed {seed}: {'' if target is None else 'reached' if result.reached else 'NOT reached'} "
            f"after {result.env_steps} steps, "
            f"{result.seconds:.1f} s, version {result.weights_seq_no}, "
            f"first-20 mean {result.mean_return(slice(0, 20)):.1f}, last-20 mean {result.mean_return(slice(-20, None)):.1f}",
            flush=True,
        )
    steps = [r.env_steps for r in results]
    secs = [r.seconds for r in results]
    print(
        f"{sum(r.reached for r in results)}/{len(results)} reached; steps median {statistics.median(steps):.0f} "
        f"worst {max(steps)}; seconds median {statistics.median(secs):.1f} worst {max(secs):.1f}"
    )


if __name__ == "__main__":
    main()
