"""A thin reference client: a gymnasium env that runs no model, the gateway acts for it.

Per episode START_EPISODE; per step GET_ACTION with the observation (the gateway's
policy answers), the env steps, LOG_RETURNS with the reward (sent together with the
next GET_ACTION: one round trip per step); END_EPISODE with the final observation and
flags. The gateway builds the episodes and trains on them like any other client's.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np

from rllink_clients.gym_client import RunResult, budget_spent, env_action, flat_observation, get_config
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
    target_return: float | None = 450.0,
    max_env_steps: int | None = None,
    max_seconds: float | None = None,
    seed: int = 0,
    explore: bool = True,
    training_enabled: bool = True,
    stop: threading.Event | None = None,
) -> RunResult:
    """Play episodes with the gateway's actions until the target mean return (last 20
    episodes), a limit, or `stop` (checked after each episode)."""
    result, started = RunResult(), time.monotonic()
    env = gym.make(env_id)
    config = get_config(client, env)
    action_space = config.get("action_space", {"type": "discrete"})
    masked = config.get("onnx_action_mask_input_name") is not None  # the env's info["action_mask"] goes along
    obs, info = env.reset(seed=seed)
    while True:
        client.send({"type": "START_EPISODE", "training_enabled": training_enabled})
        episode_id = _reply(client, "EPISODE_STARTED")["episode_id"]
        episode_return, pending = 0.0, []
        while True:
            obs_list = flat_observation(obs).astype(np.float32).tolist()
            request = {"type": "GET_ACTION", "episode_id": episode_id, "obs": obs_list, "explore": explore}
            if masked:
                request["action_mask"] = np.asarray(info["action_mask"]).astype(int).tolist()
            pending.append(request)
            client.send_raw(b"".join(client.encode(message) for message in pending))
            reply = _reply(client, "ACTION")
            result.weights_seq_no = int(reply["weights_seq_no"])
            obs, reward, terminated, truncated, info = env.step(env_action(reply["action"], action_space))
            result.env_steps += 1
            episode_return += float(reward)
            pending = [{"type": "LOG_RETURNS", "episode_id": episode_id, "reward": float(reward)}]
            if terminated or truncated:
                pending.append({"type": "END_EPISODE", "episode_id": episode_id, "obs": flat_observation(obs).astype(np.float32).tolist(),
                                "is_terminated": bool(terminated), "is_truncated": bool(truncated)})
                client.send_raw(b"".join(client.encode(message) for message in pending))
                break
        result.record_episode(episode_return)
        obs, info = env.reset()
        result.seconds = time.monotonic() - started
        if result.episodes % PROGRESS_EVERY_EPISODES == 0:
            log.info(
                "v%d  env steps %d  episodes %d  mean return (last %d) %.1f  %.1fs",
                result.weights_seq_no, result.env_steps, result.episodes, len(result.recent_returns),
                result.mean_return, result.seconds,
            )
        if result.reached(target_return):
            result.reached_target = True
            return result
        if budget_spent(result.env_steps, result.seconds, max_env_steps, max_seconds, stop):
            return result
