"""A reference external simulator: a gymnasium env that acts with the gateway's ONNX policy.

It does over the wire what RLlib's reference client does: GET_CONFIG, GET_STATE, then
collect `env_steps_per_sample` steps with the downloaded policy, send them with
EPISODES_AND_GET_STATE, load the new policy from SET_STATE, repeat. It adds the
gateway's optional `episode_id`/`weights_seq_no` fields unless `plain` is set.

`python -m rllink_clients.gym_client --env Acrobot-v1` runs it from the command line (the
reference client's, cartpole.py: `--help`); a run stops at the env's target unless given
one (`default_target_return`).
"""

from __future__ import annotations

import base64
import gzip
import importlib
import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import onnxruntime as ort

from rllink.action_dists import PinkNoise, sample_actions
from rllink_clients.demos import DemoWriter
from rllink_clients.rllink_client import RLlinkClient

log = logging.getLogger("rllink_clients")

NOISE_FREE_OUTPUT = "action_dist_inputs_noise_free"  # a gSDE exploring model's output without its noise (docs/protocol.md)
STATE_INPUT, STATE_OUTPUT = "state_in", "state_out"  # a recurrent model's state, fed back step to step (RLLINK.md)
RLLIB_REFERENCE_INPUT_NAME = "onnx::Gemm_0"  # what RLlib's client feeds when the config names nothing
_DEFAULT_DISTRIBUTIONS = {"discrete": "categorical", "multi_discrete": "multi_categorical", "box": "gaussian"}

# The mean return (last 20 episodes) a run stops at by default: the reference client's own
# target where it has one (CartPole-v1: 450; gymnasium registers 475), else the env's
# registered `reward_threshold` (Acrobot-v1 -100, MountainCar-v0 -110, LunarLander-v3 200),
# else none: the run goes on until its limits. `target_return=ENV_TARGET` asks for it.
TARGET_RETURNS = {"CartPole-v1": 450.0}
ENV_TARGET = "env"
EVALUATION_WINDOW = 2  # the last evaluation episodes a target needs too (at evaluation_interval 10: those of the last 20 episodes)


class UnknownEnv(ValueError):
    """No gymnasium env is registered under the id given (its message is one line)."""


def env_spec(env_id: str | gym.envs.registration.EnvSpec) -> gym.envs.registration.EnvSpec:
    """The registered spec of `env_id` (`module:EnvId-vN` imports the module first, as
    `gym.make` does; a spec is itself); UnknownEnv, one line, when there is none."""
    if isinstance(env_id, gym.envs.registration.EnvSpec):
        return env_id
    module, _, name = env_id.rpartition(":")
    try:
        if module:
            importlib.import_module(module)
        return gym.spec(name)
    except (ImportError, gym.error.Error) as exc:
        raise UnknownEnv(" ".join(f"unknown gymnasium env {env_id!r}: {exc}".split())) from None


def default_target_return(env_id: str | gym.envs.registration.EnvSpec) -> float | None:
    """The target a run on `env_id` stops at unless given one (TARGET_RETURNS, else the env's
    registered reward_threshold, else None: no target); UnknownEnv for an unregistered id."""
    spec = env_spec(env_id)
    if spec.id in TARGET_RETURNS:
        return TARGET_RETURNS[spec.id]
    return None if spec.reward_threshold is None else float(spec.reward_threshold)


def resolve_target(target_return: float | str | None, env_id: str | gym.envs.registration.EnvSpec) -> float | None:
    """`target_return` as given, or ENV_TARGET: `default_target_return(env_id)`."""
    return default_target_return(env_id) if target_return == ENV_TARGET else target_return


@dataclass
class RunResult:
    """What a run achieved, for callers (tests, benchmarks) and the final log line."""

    env_steps: int = 0
    episodes: int = 0
    seconds: float = 0.0
    weights_seq_no: int = 0
    first_returns: list[float] = field(default_factory=list)  # the first 20 episodes, to compare with
    recent_returns: deque[float] = field(default_factory=lambda: deque(maxlen=20))
    reached_target: bool = False
    evaluations: list[tuple[int, float]] = field(default_factory=list)  # (policy version, return) of each evaluation episode
    evaluation_interval: int = 0  # every Nth episode is an evaluation one (0: none)
    models_loaded: int = 0  # SET_STATE models loaded: each new one once, none that it already runs

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.recent_returns)) if self.recent_returns else float("nan")

    def record_episode(self, episode_return: float) -> None:
        self.episodes += 1
        self.recent_returns.append(episode_return)
        if len(self.first_returns) < self.recent_returns.maxlen:
            self.first_returns.append(episode_return)

    def record_evaluation(self, weights_seq_no: int, episode_return: float) -> None:
        """An evaluation episode (the mode, never trained on) ended: apart from the training returns."""
        self.evaluations.append((weights_seq_no, episode_return))

    @property
    def evaluation_return_mean(self) -> float:
        """The mean return of the last 20 evaluation episodes (nan before any)."""
        recent = [episode_return for _, episode_return in self.evaluations[-20:]]
        return float(np.mean(recent)) if recent else float("nan")

    def reached(self, target_return: float | None) -> bool:
        """The last 20 training episodes (a full window) average at least the target and, where
        it plays evaluation episodes, so do its last EVALUATION_WINDOW of them: the model a game
        ships, played greedily, is there too (the gateway's best.onnx has a window at least as good)."""
        full_window = len(self.recent_returns) == self.recent_returns.maxlen
        if target_return is None or not full_window or self.mean_return < target_return:
            return False
        if not self.evaluation_interval:
            return True
        recent = [episode_return for _, episode_return in self.evaluations[-EVALUATION_WINDOW:]]
        return len(recent) == EVALUATION_WINDOW and float(np.mean(recent)) >= target_return

    def log_progress(self) -> None:
        log.info(
            "v%d  env steps %d  episodes %d  mean return (last %d) %.1f  %.1fs",
            self.weights_seq_no, self.env_steps, self.episodes, len(self.recent_returns), self.mean_return, self.seconds,
        )

    def done(
        self, target_return: float | None, max_env_steps: int | None, max_seconds: float | None, stop: threading.Event | None
    ) -> bool:
        """The run ends now: it reached the target (then `reached_target` is set) or spent a limit."""
        if self.reached(target_return):
            self.reached_target = True
            return True
        return budget_spent(self.env_steps, self.seconds, max_env_steps, max_seconds, stop)


class OnnxPolicy:
    """The policy from a SET_STATE message, sampling actions like RLlib's client."""

    def __init__(
        self,
        set_state: dict[str, Any],
        input_name: str,
        action_space: dict,
        rng: np.random.Generator,
        distribution: str | None = None,
        mask_input: str | None = None,
    ):
        self.onnx_file = set_state["onnx_file"]  # as sent: a SET_STATE with the same one needs no reload
        model = gzip.decompress(base64.b64decode(self.onnx_file))
        self.session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        outputs = [output.name for output in self.session.get_outputs()]
        # A gSDE actor's exploring model: the mode (explore False) is played from its noise-free output.
        self.outputs = {True: outputs[0], False: NOISE_FREE_OUTPUT if NOISE_FREE_OUTPUT in outputs else outputs[0]}
        # Floats of a recurrent model's state (its `state_in` input); 0 for a feed-forward model.
        self.state_size = next((int(i.shape[1]) for i in self.session.get_inputs() if i.name == STATE_INPUT), 0)
        self.weights_seq_no = int(set_state["weights_seq_no"])
        self.input_name = input_name
        self.mask_input = mask_input  # SET_CONFIG's onnx_action_mask_input_name
        self.action_space = action_space
        # SET_CONFIG's action_distribution; RLlib's own server sends none: by the space.
        self.distribution = distribution or _DEFAULT_DISTRIBUTIONS[action_space["type"]]
        self.rng = rng

    @property
    def metadata(self) -> dict[str, str]:
        """The model's metadata properties (weights_seq_no, spaces, output_layout, ...)."""
        return dict(self.session.get_modelmeta().custom_metadata_map)

    @classmethod
    def from_base64(
        cls,
        onnx_file: str,
        weights_seq_no: int,
        input_name: str,
        action_space: dict,
        rng: np.random.Generator,
        distribution: str | None = None,
        mask_input: str | None = None,
    ) -> OnnxPolicy:
        """One module's model from SET_STATE's `onnx_files` (base64 of the gzipped ONNX)."""
        state = {"onnx_file": onnx_file, "weights_seq_no": weights_seq_no}
        return cls(state, input_name, action_space, rng, distribution, mask_input)

    def act(
        self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = True, noise: np.ndarray | None = None
    ) -> tuple[Any, float, list[float]]:
        """Sample one action (among those `mask` allows; `explore` False: the mode; `noise`: a
        Box's N(0, 1) draws [1, d], pink ones, instead of white); return it, its log-prob and
        the raw policy outputs."""
        dist_inputs = self.dist_inputs(np.asarray(obs)[None], None if mask is None else np.asarray(mask)[None], explore)
        actions, logps = self.sample(dist_inputs, explore, noise=noise)
        action = int(actions[0]) if self.action_space["type"] == "discrete" else actions[0].ravel().tolist()
        return action, float(logps[0]), dist_inputs[0].tolist()

    def step(
        self, obs: np.ndarray, state: np.ndarray, mask: np.ndarray | None = None, explore: bool = True, noise: np.ndarray | None = None
    ) -> tuple[Any, float, np.ndarray]:
        """`act` for a recurrent model: `state` goes in as its state_in; the action, its
        log-prob and the state_out to feed with the next observation."""
        mask_batch = None if mask is None else np.asarray(mask)[None]
        dist_inputs, state_out = self.dist_inputs_and_state(np.asarray(obs)[None], np.asarray(state)[None], mask_batch, explore)
        actions, logps = self.sample(dist_inputs, explore, noise=noise)
        action = int(actions[0]) if self.action_space["type"] == "discrete" else actions[0].ravel().tolist()
        return action, float(logps[0]), state_out[0]

    def dist_inputs_and_state(
        self, obs: np.ndarray, state: np.ndarray, mask: np.ndarray | None = None, explore: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """`dist_inputs` for a recurrent model, `state` [N, state_size] fed as its state_in;
        also its state_out [N, state_size], to feed with each row's next observation."""
        feed = self._feed(obs, mask)
        feed[STATE_INPUT] = np.asarray(state, np.float32)
        dist_inputs, state_out = self.session.run([self.outputs[explore], STATE_OUTPUT], feed)
        return dist_inputs.astype(np.float64), state_out

    def act_batch(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sample an action for each row of `obs` [N, *obs_shape] with one model call."""
        return self.sample(self.dist_inputs(obs))

    def dist_inputs(self, obs: np.ndarray, mask: np.ndarray | None = None, explore: bool = True) -> np.ndarray:
        """The model's output 0 for a batch of observations (and action masks [N, k], all
        allowed if None, for a model that takes them), as float64 [N, width]; `explore`
        False: a gSDE model's noise-free output instead, where it has one."""
        (outputs,) = self.session.run([self.outputs[explore]], self._feed(obs, mask))
        return outputs.astype(np.float64)

    def _feed(self, obs: np.ndarray, mask: np.ndarray | None) -> dict[str, np.ndarray]:
        """The observations, and the action masks for a model that takes them (all allowed if None)."""
        feed = {self.input_name: obs.astype(np.float32)}
        if self.mask_input is not None:
            width = self.session.get_inputs()[1].shape[1]
            feed[self.mask_input] = np.ones((len(obs), width), np.float32) if mask is None else mask.astype(np.float32)
        return feed

    def sample(
        self, dist_inputs: np.ndarray, explore: bool = True, mask: np.ndarray | None = None, noise: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Actions and their log-probs: ints [N] (or [N, len(nvec)]) from logits, or floats
        [N, *shape] from a mean and log std (unclipped for `gaussian`, in the box for
        `squashed_gaussian`); `explore` False: the distribution's mode (greedy play); `noise`:
        a Box's N(0, 1) draws, pink ones, instead of white."""
        space = self.action_space
        actions, logps = sample_actions(
            self.distribution, dist_inputs, self.rng, explore, space.get("low"), space.get("high"), space.get("nvec"), mask, noise
        )
        if space["type"] in ("discrete", "multi_discrete"):
            return actions, logps
        shape = tuple(space.get("shape") or (actions.shape[1],))
        return actions.reshape(len(actions), *shape), logps


def flat_observation(obs: Any) -> np.ndarray:
    """An observation as the gateway takes it: a dict observation's values flattened one
    key after the other (in the env's order, which must be the space's), anything else as is."""
    if isinstance(obs, dict):
        return np.concatenate([np.asarray(value, np.float32).ravel() for value in obs.values()])
    return np.asarray(obs)


def env_action(action: Any, space: dict) -> Any:
    if space["type"] == "box":  # the policy's sample is unbounded; the env wants it in range
        return np.clip(np.asarray(action, dtype=np.float32), space.get("low"), space.get("high"))
    return action


def declared_spaces(env: gym.Env) -> dict[str, Any]:
    """The env's spaces as GET_CONFIG may declare them (RLLINK.md, "Spaces the game
    declares"), so a gateway set up for another env says so at once, and one given no spaces
    adopts them: a vector observation's shape, and a Discrete's n, a MultiDiscrete's nvec or
    a vector action's shape with its bounds where they are one finite number each (as the
    gateway's box spaces hold them). Other kinds of space are left out (not checked)."""
    declared: dict[str, Any] = {}
    observations, actions = env.observation_space, env.action_space
    if isinstance(observations, gym.spaces.Box) and len(observations.shape) == 1:
        declared["observation_space"] = {"type": "box", "shape": list(observations.shape)}
    if isinstance(actions, gym.spaces.Discrete):
        declared["action_space"] = {"type": "discrete", "n": int(actions.n)}
    elif isinstance(actions, gym.spaces.MultiDiscrete):
        declared["action_space"] = {"type": "multi_discrete", "nvec": [int(n) for n in actions.nvec]}
    elif isinstance(actions, gym.spaces.Box) and len(actions.shape) == 1:
        declared["action_space"] = {"type": "box", "shape": list(actions.shape)}
        for bound, values in (("low", actions.low), ("high", actions.high)):
            if np.all(np.isfinite(values)) and np.all(values == values.flat[0]):
                declared["action_space"][bound] = float(values.flat[0])
    return declared


class GetConfigRefused(RuntimeError):
    """The gateway answered GET_CONFIG with an ERROR (the env's spaces do not fit its module)."""


def get_config(client: RLlinkClient, env: gym.Env, plain: bool = False) -> dict[str, Any]:
    """SET_CONFIG, having declared the env's spaces (unless `plain`: as RLlib's client, nothing);
    GetConfigRefused with the gateway's words if they do not fit its module."""
    config = client.request({"type": "GET_CONFIG", **({} if plain else declared_spaces(env))})
    if config.get("type") != "SET_CONFIG":
        raise GetConfigRefused(str(config.get("message", config)))
    return config


def run(
    client: RLlinkClient,
    env_id: str = "CartPole-v1",
    *,
    target_return: float | str | None = ENV_TARGET,
    max_env_steps: int | None = None,
    max_seconds: float | None = None,
    seed: int = 0,
    plain: bool = False,
    stop: threading.Event | None = None,
    record_demos: DemoWriter | None = None,
    evaluation_interval: int | None = None,
) -> RunResult:
    """Train through the gateway until the target mean return (`RunResult.reached`: the last 20
    training episodes, and the last evaluation ones; by default the env's target,
    `default_target_return`; None: no target), a limit, or `stop` is
    set (checked after each SET_STATE); `record_demos`: every chunk sent is also written
    there as a demonstration. Every Nth episode is an evaluation episode (RLLINK.md,
    "Evaluation episodes": played with the mode, sent with `evaluation`, never trained on),
    N SET_CONFIG's `evaluation_interval` unless `evaluation_interval` is given (0: none)."""
    result, started = RunResult(), time.monotonic()
    target_return = resolve_target(target_return, env_id)
    rng = np.random.default_rng(seed)
    env = gym.make(env_id)
    config = get_config(client, env, plain)
    steps_per_sample = int(config["env_steps_per_sample"])
    input_name = config.get("onnx_input_name", RLLIB_REFERENCE_INPUT_NAME)
    action_space = config.get("action_space", {"type": "discrete"})
    distribution = config.get("action_distribution")
    # A masked module: the env's info["action_mask"] (gymnasium's convention) goes to the model and the chunk.
    mask_input = config.get("onnx_action_mask_input_name")
    policy_of = lambda state: OnnxPolicy(state, input_name, action_space, rng, distribution, mask_input)  # noqa: E731
    policy = policy_of(client.request({"type": "GET_STATE"}))
    result.models_loaded = 1
    interval = 0 if plain else int(config.get("evaluation_interval", 0) if evaluation_interval is None else evaluation_interval)
    result.evaluation_interval = interval

    state_size = int(config.get("state_size", 0))  # a recurrent module's: its state goes from step to step
    state = np.zeros(state_size, np.float32)
    # SET_CONFIG's action_noise "pink" (a SAC module's default): each episode's noise drifts, new at its start.
    pink = config.get("action_noise") == "pink" and action_space["type"] == "box"
    action_dim = int(np.prod(action_space.get("shape") or [1])) if pink else 0
    noise = PinkNoise.start(rng, 1, action_dim) if pink else None

    obs, info = env.reset(seed=seed)
    episode_id, episode_return, episodes_played = uuid.uuid4().hex, 0.0, 0
    evaluating = is_evaluation_episode(episodes_played, interval)
    while True:
        chunks, chunk = [], _new_chunk(obs, evaluating, state if state_size else None)
        for _ in range(steps_per_sample):
            mask = np.asarray(info["action_mask"], np.float32) if mask_input is not None else None
            draws = None if noise is None else PinkNoise.step(noise, rng)
            if state_size:
                action, logp, state = policy.step(flat_observation(obs), state, mask, not evaluating, draws)
            else:
                action, logp, _dist = policy.act(flat_observation(obs), mask, not evaluating, draws)
            obs, reward, terminated, truncated, info = env.step(env_action(action, action_space))
            _add_step(chunk, action, float(reward), logp, obs, mask)
            episode_return += float(reward)
            if terminated or truncated:
                chunk.update(is_terminated=bool(terminated), is_truncated=bool(truncated))
                chunks.append(_finish(chunk, episode_id, policy, plain))
                if evaluating:
                    result.record_evaluation(policy.weights_seq_no, episode_return)
                else:
                    result.record_episode(episode_return)
                obs, info = env.reset()
                episodes_played += 1
                evaluating = is_evaluation_episode(episodes_played, interval)
                state = np.zeros(state_size, np.float32)  # a new episode starts with no memory
                noise = PinkNoise.start(rng, 1, action_dim) if pink else None
                episode_id, episode_return = uuid.uuid4().hex, 0.0
                chunk = _new_chunk(obs, evaluating, state if state_size else None)
        if chunk["actions"]:
            chunks.append(_finish(chunk, episode_id, policy, plain))  # the episode goes on
        result.env_steps += steps_per_sample
        for sent in chunks if record_demos is not None else ():
            record_demos.write(sent)

        reply = client.request({"type": "EPISODES_AND_GET_STATE", "episodes": chunks, "timesteps": steps_per_sample})
        if reply.get("type") != "SET_STATE":
            raise RuntimeError(f"the gateway answered {reply}")
        if reply["onnx_file"] != policy.onnx_file:  # an off-policy learner's version outlasts many requests
            policy = policy_of(reply)
            result.models_loaded += 1
        result.weights_seq_no = policy.weights_seq_no
        result.seconds = time.monotonic() - started
        result.log_progress()
        if result.done(target_return, max_env_steps, max_seconds, stop):
            return result


def is_evaluation_episode(episodes_played: int, interval: int) -> bool:
    """Whether an env's next episode, after `episodes_played` of its own, is an evaluation
    one: the Nth, 2Nth, ... of every N = evaluation_interval (0: none)."""
    return interval > 0 and episodes_played % interval == interval - 1


def budget_spent(
    env_steps: int, seconds: float, max_env_steps: int | None, max_seconds: float | None, stop: threading.Event | None
) -> bool:
    """A run's limits: its env steps or seconds are spent, or it was told to stop."""
    return bool(
        (max_env_steps and env_steps >= max_env_steps)
        or (max_seconds and seconds >= max_seconds)
        or (stop is not None and stop.is_set())
    )


def _new_chunk(obs: Any, evaluation: bool = False, state: np.ndarray | None = None) -> dict[str, Any]:
    """An empty chunk from `obs`; every chunk of an evaluation episode says so, and a recurrent
    module's carries the state fed with `obs` (`state_in`)."""
    chunk: dict[str, Any] = {"obs": [flat_observation(obs).tolist()], "actions": [], "rewards": [], "action_logp": [],
                             "is_terminated": False, "is_truncated": False}
    if evaluation:
        chunk["evaluation"] = True
    if state is not None:
        chunk["state_in"] = state.tolist()
    return chunk


def _add_step(chunk: dict[str, Any], action: Any, reward: float, logp: float, next_obs: Any, mask: np.ndarray | None) -> None:
    """One step into the chunk: the action (and the mask it was chosen under), its reward and log-prob, the observation after it."""
    chunk["actions"].append(action)
    chunk["rewards"].append(reward)
    chunk["action_logp"].append(logp)
    chunk["obs"].append(flat_observation(next_obs).tolist())
    if mask is not None:
        chunk.setdefault("action_mask", []).append(mask.tolist())


def _finish(chunk: dict[str, Any], episode_id: str, policy: OnnxPolicy, plain: bool) -> dict[str, Any]:
    if not plain:
        chunk.update(episode_id=episode_id, weights_seq_no=policy.weights_seq_no)
    return chunk


if __name__ == "__main__":  # `python -m rllink_clients.gym_client`: the reference client's command line
    import sys

    # Imported here, by name: the command line (cartpole.py) imports this module.
    sys.exit(importlib.import_module("rllink_clients.cartpole").main(prog="python -m rllink_clients.gym_client"))
