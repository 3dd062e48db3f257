"""Pixel grid: env steps and wall seconds until PPO with a CNN learns rllink/PixelGrid-v0, per device.

    python bench/pixel_grid.py [--device cpu|cuda|auto] [--seeds 0 1] [--target 0.6]
                               [--max-env-steps 60000] [--learner-threads 1]

For each seed, a fresh gateway (`python -m app --seed N --device D`, PPO, the image
observation [3, 10, 10] uint8 that the gateway trains through its CNN, 4 discrete
actions: the settings tests/test_image_observations.py trains it with) in a subprocess,
and the reference client (`rllink_clients.gym_client.run`) in this process over TCP until
the mean return of its last 20 episodes is at least `--target` (random moves return
-0.43, walking straight to the goal 0.84) or `--max-env-steps` are spent. Seconds run
from the client's GET_CONFIG to the reply that completes the run (gateway start
excluded, as bench/learn.py). The gateway's /api/config says which device it trained on.

What it measures: whether training the CNN on a GPU (`--device cuda`) makes a small
image task faster end to end than the CPU, or whether the round trips dominate.
Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from _common import HOST, emit, running_gateway  # noqa: E402

from rllink_clients.gym_client import run  # noqa: E402
from rllink_clients.pixel_envs import PIXEL_GRID_ENV_ID  # noqa: E402 (registers the env)
from rllink_clients.rllink_client import RLlinkClient  # noqa: E402

OBSERVATION_SPACE = {"type": "box", "shape": [3, 10, 10], "dtype": "uint8"}
ACTION_SPACE = {"type": "discrete", "n": 4}


def gateway_flags(seed: int, device: str, learner_threads: int) -> list[str]:
    """The gateway's command line for the image task on `device`."""
    return [
        "--seed", str(seed),
        "--device", device,
        "--learner-threads", str(learner_threads),
        "--observation-space", json.dumps(OBSERVATION_SPACE),
        "--action-space", json.dumps(ACTION_SPACE),
    ]  # fmt: skip


def run_seed(seed: int, args: argparse.Namespace) -> dict:
    """One fresh gateway and one client until the target or the budget."""
    with running_gateway(*gateway_flags(seed, args.device, args.learner_threads)) as gateway:
        device = httpx.get(f"http://{HOST}:{gateway.http_port}/api/config", timeout=10).json().get("device")
        print(f"seed {seed}: gateway trains on {device}", flush=True)
        with RLlinkClient("tcp", HOST, gateway.tcp_port, timeout=300) as client:
            result = run(client, PIXEL_GRID_ENV_ID, target_return=args.target, max_env_steps=args.max_env_steps, seed=seed)
        metrics = httpx.get(f"http://{HOST}:{gateway.http_port}/api/metrics", timeout=10).json()
    return {
        "seed": seed,
        "device": device,
        "reached": result.reached_target,
        "env_steps": result.env_steps,
        "seconds": round(result.seconds, 2),
        "episodes": result.episodes,
        "training_steps": metrics.get("num_training_steps"),
        "mean_return_last_20": round(result.mean_return, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="the gateway's device: cpu, cuda, cuda:N, auto")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--target", type=float, default=0.6, help="mean return of the last 20 episodes")
    parser.add_argument("--max-env-steps", type=int, default=60_000, help="give up on a seed after this many")
    parser.add_argument("--learner-threads", type=int, default=1, help="the gateway's learner_threads (CPU training)")
    args = parser.parse_args()

    runs = []
    for seed in args.seeds:
        r = run_seed(seed, args)
        runs.append(r)
        print(
            f"seed {seed}: {'reached' if r['reached'] else 'NOT reached'} {args.target:g} after {r['env_steps']:,} env "
            f"steps, {r['seconds']:.1f} s, {r['training_steps']} training steps, last 20 {r['mean_return_last_20']:.2f}",
            flush=True,
        )

    reached = sum(r["reached"] for r in runs)
    steps = statistics.median(r["env_steps"] for r in runs)  # a seed that missed counts as its whole budget
    seconds = statistics.median(r["seconds"] for r in runs)
    lines = [
        f"{PIXEL_GRID_ENV_ID} to a mean return of {args.target:g} (last 20 episodes) on device {runs[0]['device']}, "
        f"{reached}/{len(runs)} seeds reached",
        f"env steps: median {steps:,.0f}; seconds: median {seconds:.1f} ({steps / max(seconds, 1e-9):,.0f} env steps/s)",
    ]
    emit(
        "pixel_grid",
        lines,
        {
            "device": runs[0]["device"],
            "requested_device": args.device,
            "target": args.target,
            "max_env_steps": args.max_env_steps,
            "runs": runs,
            "median_env_steps": steps,
            "median_seconds": seconds,
        },
    )


if __name__ == "__main__":
    main()
