"""Memory: a recurrent policy (PPO with an LSTM) against the feed-forward one on a task that needs it.

    python bench/memory.py [--seeds 0 1 2] [--max-env-steps 500000] [--target 400]
                           [--sides lstm ff] [--lstm-cell-size 64] [--max-seq-len 20]
                           [--ppo '{"learning_rate": 0.001}']

StatelessCartPole-v1 (rllink_clients/memory_envs.py): CartPole-v1 observing only the cart's
position and the pole's angle, so the velocities must be remembered. Per seed and side, a
fresh gateway (`--seed N`; lstm: `--model.use-lstm` with the cell size and sequence
length given; ff: the defaults) and one reference client (`rllink_clients.gym_client.run`,
local inference: it feeds each step's state_out back as the next state_in and sends each
chunk's state_in) until the mean return of its last 20 training episodes (and its last
evaluation episodes: the client's rule) reaches `--target`, or `--max-env-steps`.

Printed per seed: env steps to the target (or missed, with the last mean), wall time,
policy versions; then the median over the seeds per side. Targets (issue 53): with the
LSTM, a mean of 400 within 500,000 env steps, median of 3 seeds (RLlib's tuned example
asks 350 within 2,000,000). Thin clients (the gateway keeping each episode's state) are
not measured yet: the gateway's server-side inference has no recurrent state yet.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import HOST, emit, running_gateway  # noqa: E402

ENV_ID = "rllink_clients.memory_envs:StatelessCartPole-v1"


def run_side(side: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    from rllink_clients.gym_client import run
    from rllink_clients.rllink_client import RLlinkClient

    flags = ["--seed", str(seed)]
    if side == "lstm":
        flags += ["--model.use-lstm", "--model.lstm-cell-size", str(args.lstm_cell_size), "--model.max-seq-len", str(args.max_seq_len)]
    if args.ppo:
        flags += ["--ppo", args.ppo]
    with running_gateway(*flags) as gateway, RLlinkClient("tcp", HOST, gateway.tcp_port, timeout=600) as client:
        started = time.monotonic()
        result = run(client, ENV_ID, target_return=args.target, max_env_steps=args.max_env_steps, seed=seed)
        seconds = time.monotonic() - started
    return {
        "seed": seed,
        "reached_target": result.reached_target,
        "env_steps": result.env_steps,
        "mean_return_last_20": round(result.mean_return, 1),
        "evaluation_return_mean": round(result.evaluation_return_mean, 1),
        "seconds": round(seconds, 1),
        "weights_seq_no": result.weights_seq_no,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--max-env-steps", type=int, default=500_000)
    parser.add_argument("--target", type=float, default=400.0)
    parser.add_argument("--sides", nargs="+", choices=["lstm", "ff"], default=["lstm", "ff"])
    parser.add_argument("--lstm-cell-size", type=int, default=64)
    parser.add_argument("--max-seq-len", type=int, default=20)
    parser.add_argument("--ppo", help="PPO hyperparameters for both sides as one JSON object (the gateway's --ppo)")
    args = parser.parse_args(argv)
    lines, results = [], {}
    for side in args.sides:
        runs = []
        for seed in args.seeds:
            print(f"{side} seed {seed} ...", flush=True)
            r = run_side(side, seed, args)
            runs.append(r)
            lines.append(
                f"{side} seed {seed}: {'reached ' + str(args.target) if r['reached_target'] else 'MISSED'} at {r['env_steps']} env "
                f"steps (last 20 training episodes {r['mean_return_last_20']}, evaluation {r['evaluation_return_mean']}), "
                f"{r['seconds']} s, v{r['weights_seq_no']}"
            )
            print(lines[-1], flush=True)
        steps = [r["env_steps"] if r["reached_target"] else float("inf") for r in runs]
        median = statistics.median(steps)
        results[side] = {"runs": runs, "median_env_steps_to_target": None if median == float("inf") else median}
        lines.append(f"{side}: median env steps to {args.target:g}: {'missed' if median == float('inf') else f'{median:,.0f}'}")
    targets = {}
    if "lstm" in results:
        median = results["lstm"]["median_env_steps_to_target"]
        targets[f"lstm: {args.target:g} within 500,000 env steps, median of the seeds"] = median is not None and median <= 500_000
    lines += [f"target {name}: {'met' if ok else 'MISSED'}" for name, ok in targets.items()]
    emit("memory", lines, {"args": vars(args), "results": results, "targets": targets, "env": ENV_ID, "ppo": json.loads(args.ppo or "{}")})


if __name__ == "__main__":
    main()
