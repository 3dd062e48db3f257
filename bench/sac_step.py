"""SAC's gradient step alone: milliseconds per step at HalfCheetah's sizes, per device and threads.

    python bench/sac_step.py [cpu:1:300 cpu:2:300 cuda:1:2000 ...]   (device:threads:steps)

The gateway's SAC learner (app/training/algorithms/sac/learner.py) with 17 observations, 6 bounded
actions, 256x256 networks and batches of 256 (bench/learn_suite.py's HalfCheetah-v5
settings), its replay buffer holding 1,000 random transitions: after 20 warm-up steps,
the wall time of `steps` calls of its update (sampling the batch included), synchronised
with the GPU at both ends. It says whether a learner on a GPU (`device: cuda`) trains SAC
faster than one on the CPU, apart from everything else a training run does.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from app.experience import ChunkBlock
from app.schemas import EpisodeChunk
from app.spaces.models import BoxSpace
from app.training.algorithms.sac.config import SACConfig
from app.training.algorithms.sac.learner import SACLearner

TRANSITIONS = 1000
WARM_UP = 20


def ms_per_step(device: str, threads: int, steps: int) -> float:
    torch.set_num_threads(threads)
    cfg = SACConfig(learning_starts=1, batch_size=256, hidden_sizes=[256, 256], utd_ratio=1.0)
    learner = SACLearner(
        cfg, BoxSpace(shape=(17,)), BoxSpace(shape=(6,), low=-1.0, high=1.0),
        seed=0, checkpoint_dir=Path(tempfile.mkdtemp()), onnx_input_name="obs", device=torch.device(device),
    )  # fmt: skip
    rng = np.random.default_rng(0)
    chunk = EpisodeChunk.model_validate(
        dict(
            obs=rng.standard_normal((TRANSITIONS + 1, 17)).astype(np.float32),
            actions=rng.uniform(-1, 1, (TRANSITIONS, 6)).astype(np.float32),
            rewards=rng.standard_normal(TRANSITIONS),
            is_terminated=False,
            is_truncated=True,
        )
    )
    learner.buffer.add(ChunkBlock.of([chunk], "x"))
    step = lambda: learner.sac.update(cfg, learner.buffer.sample(cfg.batch_size, learner.rng, learner.device))  # noqa: E731
    for _ in range(WARM_UP):
        step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - started) / steps


def main() -> None:
    for spec in sys.argv[1:] or ["cpu:1:300", "cpu:2:300"]:
        device, threads, steps = spec.split(":")
        print(f"{device} threads {threads}: {ms_per_step(device, int(threads), int(steps)):.2f} ms per gradient step ({steps} steps)")


if __name__ == "__main__":
    main()
