"""A thin reference client: a gymnasium env that runs no model, the gateway acts for it.

Per episode START_EPISODE; per step GET_ACTION with the observation (the gateway's
policy answers), the env steps, LOG_RETURNS with the reward (sent together with the
next GET_ACTION: one round trip per step); END_EPISODE with the final observation and
flags. The gateway builds the episodes and trains on them like any other client's.
A thin client gets no SET_STATE unasked: when the gateway sets environment parameters,
`run_thin` asks for one (GET_STATE) between episodes after the policy version changed, so
`client.get_env_param` follows the curriculum's lessons.

`python -m rllink_clients.thin_client --env Acrobot-v1` runs it from the command line (the
reference client's, cartpole.py, with --inference server by default: `--help`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np

from rllink_clients.gym_client import ENV_TARGET, RunResult, env_action, flat_observation, get_config, resolve_target
from rllink_clients.rllink_client import RLlinkClient

log = logging.getLogger("rllink_clients")

PROGRESS_EVERY_EPISODES = 20


def _reply(client: RLlinkClient, expected: str) -> dict[str, Any]:
    reply = client.receive()
    if reply.get("type") != expected:
        raise RuntimeError(f"the gateway answered {reply}")
    return reply


def run_thin(
    client: RLlinkClient,
    env_id: str = "CartPole-v1",
    *,
    target_return: float | str | None = ENV_TARGET,
    max_env_steps: int | None = None,
    max_seconds: float | None = None,
    seed: int = 0,
    explore: bool = True,
    training_enabled: bool = True,
    stop: threading.Event | None = None,
) -> RunResult:
    """Play episodes with the gateway's actions until the target mean return (last 20
    training episodes; by default the env's, `default_target_return`; None: no target), a
    limit, or `stop` (checked after each episode). The episodes the gateway plays as
    evaluation ones (its evaluation_interval: EPISODE_STARTED says `evaluation`) count apart."""
    result, started = RunResult(), time.monotonic()
    target_return = resolve_target(target_return, env_id)
    env = gym.make(env_id)
    config = get_config(client, env)
    action_space = config.get("action_space", {"type": "discrete"})
    masked = config.get("onnx_action_mask_input_name") is not None  # the env's info["action_mask"] goes along
    result.evaluation_interval = int(config.get("evaluation_interval", 0)) if training_enabled else 0  # the gateway's choice
    play = functools.partial(_play_episode, client, action_space=action_space, masked=masked)
    obs, info = env.reset(seed=seed)
    params_version = 0  # the version whose env_params the client holds
    while True:
        if config.get("env_params") and result.weights_seq_no > params_version:
            params_version = refresh_env_params(client)
            obs, info = env.reset()  # the next episode with the new values
        played = play(env, obs, info, {"training_enabled": training_enabled}, explore)
        result.weights_seq_no = played.weights_seq_no
        result.env_steps += played.steps
        if played.evaluation:
            result.record_evaluation(played.weights_seq_no, played.episode_return)
        else:
            result.record_episode(played.episode_return)
        obs, info = env.reset()
        result.seconds = time.monotonic() - started
        if result.episodes % PROGRESS_EVERY_EPISODES == 0:
            result.log_progress()
        if result.done(target_return, max_env_steps, max_seconds, stop):
            return result


class PlayedEpisode(NamedTuple):
    episode_return: float
    steps: int
    weights_seq_no: int  # the version that chose its last action
    evaluation: bool  # the gateway played it as an evaluation episode


def _play_episode(
    client: RLlinkClient, env: gym.Env, obs: Any, info: dict, start: dict[str, Any], explore: bool, *,
    action_space: dict, masked: bool,
) -> PlayedEpisode:
    """One whole episode from `obs` with the gateway's actions (START_EPISODE with `start`'s
    fields). Each step's reward goes with the next GET_ACTION: one round trip per step."""
    client.send({"type": "START_EPISODE", **start})
    started = _reply(client, "EPISODE_STARTED")
    episode_id, evaluation = started["episode_id"], bool(started.get("evaluation", False))
    episode_return, steps, pending = 0.0, 0, []
    while True:
        obs_list = flat_observation(obs).astype(np.float32).tolist()
        request = {"type": "GET_ACTION", "episode_id": episode_id, "obs": obs_list, "explore": explore}
        if masked:
            request["action_mask"] = np.asarray(info["action_mask"]).astype(int).tolist()
        pending.append(request)
        client.send_raw(b"".join(client.encode(message) for message in pending))
        reply = _reply(client, "ACTION")
        obs, reward, terminated, truncated, info = env.step(env_action(reply["action"], action_space))
        steps += 1
        episode_return += float(reward)
        pending = [{"type": "LOG_RETURNS", "episode_id": episode_id, "reward": float(reward)}]
        if terminated or truncated:
            pending.append({"type": "END_EPISODE", "episode_id": episode_id, "obs": flat_observation(obs).astype(np.float32).tolist(),
                            "is_terminated": bool(terminated), "is_truncated": bool(truncated)})
            client.send_raw(b"".join(client.encode(message) for message in pending))
            return PlayedEpisode(episode_return, steps, int(reply["weights_seq_no"]), evaluation)


def run_thin_envs(
    client: RLlinkClient,
    env_id: str = "CartPole-v1",
    num_envs: int = 8,
    *,
    target_return: float | str | None = ENV_TARGET,
    max_env_steps: int | None = None,
    max_seconds: float | None = None,
    seed: int = 0,
    stop: threading.Event | None = None,
) -> RunResult:
    """`num_envs` envs stepped together, one batched GET_ACTION per step for all of them (the
    design a game with many agents uses): each step's rewards, the episodes that ended and
    the next GET_ACTION go in one write. Stops as `run_thin` does (checked every step). With
    environment parameters, a GET_STATE after the version changed, before the envs whose
    episodes ended reset, gives them the new values."""
    result, started = RunResult(), time.monotonic()
    target_return = resolve_target(target_return, env_id)
    envs = [gym.make(env_id) for _ in range(num_envs)]
    config = get_config(client, envs[0])
    if config.get("onnx_action_mask_input_name") is not None:
        raise ValueError("run_thin_envs sends no action masks; play a masked module with run_thin")
    action_space = config.get("action_space", {"type": "discrete"})
    result.evaluation_interval = int(config.get("evaluation_interval", 0))  # the gateway's choice
    observations = [env.reset(seed=seed + i)[0] for i, env in enumerate(envs)]
    returns = [0.0] * num_envs
    episode_ids, evaluating = map(list, zip(*_start_episodes(client, [], num_envs)))
    next_report = PROGRESS_EVERY_EPISODES
    params_version = 0  # the version whose env_params the client holds
    while True:
        batch = [{"episode_id": episode_id, "obs": flat_observation(obs).astype(np.float32).tolist()}
                 for episode_id, obs in zip(episode_ids, observations)]
        client.send({"type": "GET_ACTION", "batch": batch})
        reply = _reply(client, "ACTION")
        result.weights_seq_no = int(reply["weights_seq_no"])
        messages, ended = [], []
        for i, (env, action) in enumerate(zip(envs, reply["actions"])):
            observations[i], reward, terminated, truncated, _ = env.step(env_action(action, action_space))
            result.env_steps += 1
            returns[i] += float(reward)
            messages.append({"type": "LOG_RETURNS", "episode_id": episode_ids[i], "reward": float(reward)})
            if terminated or truncated:
                messages.append({"type": "END_EPISODE", "episode_id": episode_ids[i],
                                 "obs": flat_observation(observations[i]).astype(np.float32).tolist(),
                                 "is_terminated": bool(terminated), "is_truncated": bool(truncated)})
                if evaluating[i]:
                    result.record_evaluation(result.weights_seq_no, returns[i])
                else:
                    result.record_episode(returns[i])
                returns[i] = 0.0
                ended.append(i)
        if ended and config.get("env_params") and result.weights_seq_no > params_version:
            client.send_raw(b"".join(client.encode(message) for message in messages))
            messages, params_version = [], refresh_env_params(client)
        for i in ended:  # the next episodes, with the latest values
            observations[i] = envs[i].reset()[0]
        for i, (episode_id, evaluation) in zip(ended, _start_episodes(client, messages, len(ended))):
            episode_ids[i], evaluating[i] = episode_id, evaluation
        if not ended:
            client.send_raw(b"".join(client.encode(message) for message in messages))
        result.seconds = time.monotonic() - started
        if result.episodes >= next_report:
            next_report += PROGRESS_EVERY_EPISODES
            result.log_progress()
        if result.done(target_return, max_env_steps, max_seconds, stop):
            return result


def refresh_env_params(client: RLlinkClient) -> int:
    """GET_STATE, for the environment parameters its SET_STATE carries (kept by the client);
    returns its version."""
    client.send({"type": "GET_STATE"})
    return int(_reply(client, "SET_STATE")["weights_seq_no"])


def _start_episodes(client: RLlinkClient, before: list[dict[str, Any]], count: int) -> list[tuple[str, bool]]:
    """Send `before` and `count` START_EPISODEs in one write; the new episodes' ids, and
    whether the gateway plays each as an evaluation episode."""
    if not count:
        return []
    starts = [{"type": "START_EPISODE"}] * count
    client.send_raw(b"".join(client.encode(message) for message in before + starts))
    replies = [_reply(client, "EPISODE_STARTED") for _ in range(count)]
    return [(reply["episode_id"], bool(reply.get("evaluation", False))) for reply in replies]


if __name__ == "__main__":  # `python -m rllink_clients.thin_client`: the reference client's command line, the gateway acting
    import importlib
    import sys

    # Imported here, by name: the command line (cartpole.py) imports this module.
    cli = importlib.import_module("rllink_clients.cartpole")
    sys.exit(cli.main(prog="python -m rllink_clients.thin_client", inference="server"))
