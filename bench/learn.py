"""Learn: env steps and wall seconds until CartPole-v1 reaches a mean return of 450.

    python bench/learn.py [--seeds 0 1 2 3 4] [--transport tcp|ws]

For each seed, a fresh gateway (`python -m app --seed N`, its embedded defaults) in a
subprocess and the reference client (`rllink_clients.gym_client.run`, what
`python -m rllink_clients.cartpole` runs) in this process: GET_CONFIG, GET_STATE, then
EPISODES_AND_GET_STATE every `env_steps_per_sample` steps, until the mean return of
its last 20 episodes is at least 450 (or the step budget is spent). Seconds run from
the client's GET_CONFIG to the reply that completes the run (gateway start excluded).

Target (median over the seeds): fewer than 50,000 env steps and under 30 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from _common import HOST, emit, running_gateway  # noqa: E402

from rllink_clients.gym_client import run  # noqa: E402
from rllink_clients.rllink_client import RLlinkClient  # noqa: E402

TARGET_RETURN = 450.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--transport", choices=["tcp", "ws"], default="tcp")
    parser.add_argument("--max-env-steps", type=int, default=150_000, help="give up on a seed after this many")
    args = parser.parse_args()

    runs = []
    for seed in args.seeds:
        with running_gateway("--seed", str(seed)) as gateway:
            port = gateway.tcp_port if args.transport == "tcp" else gateway.http_port
            with RLlinkClient(args.transport, HOST, port, timeout=120) as client:
                result = run(client, "CartPole-v1", target_return=TARGET_RETURN, max_env_steps=args.max_env_steps, seed=seed)
            metrics = httpx.get(f"http://{HOST}:{gateway.http_port}/api/metrics", timeout=10).json()
        runs.append(
            {
                "seed": seed,
                "reached": result.reached_target,
                "env_steps": result.env_steps,
                "seconds": round(result.seconds, 2),
                "episodes": result.episodes,
                "training_steps": metrics["num_training_steps"],
                "mean_return_last_20": round(result.mean_return, 1),
            }
        )
        print(
            f"seed {seed}: {'reached' if result.reached_target else 'NOT reached'} {TARGET_RETURN:g} after "
            f"{result.env_steps:,} env steps, {result.seconds:.1f} s, {metrics['num_training_steps']} training steps",
            flush=True,
        )

    reached = [r for r in runs if r["reached"]]
    # A seed that never reached the target counts as its whole budget: the median stays honest.
    steps = statistics.median(r["env_steps"] for r in runs)
    seconds = statistics.median(r["seconds"] for r in runs)
    steps_ok, seconds_ok = len(reached) == len(runs) and steps < 50_000, len(reached) == len(runs) and seconds < 30
    lines = [
        f"CartPole-v1 to a mean return of {TARGET_RETURN:g} (last 20 episodes), one client over {args.transport}, "
        f"{len(reached)}/{len(runs)} seeds reached",
        f"env steps: median {steps:,.0f}, min {min(r['env_steps'] for r in runs):,}, max {max(r['env_steps'] for r in runs):,}",
        f"seconds:   median {seconds:.1f}, min {min(r['seconds'] for r in runs):.1f}, max {max(r['seconds'] for r in runs):.1f}",
        f"target < 50,000 env steps: {'met' if steps_ok else 'MISSED'}; target < 30 s: {'met' if seconds_ok else 'MISSED'}",
    ]
    emit(
        "learn",
        lines,
        {
            "transport": args.transport,
            "runs": runs,
            "median_env_steps": steps,
            "median_seconds": seconds,
            "targets": {"env steps < 50,000": steps_ok, "seconds < 30": seconds_ok},
        },
    )


if __name__ == "__main__":
    main()
