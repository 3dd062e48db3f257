"""Demonstrations: env steps until MountainCar-v0 reaches a mean return of -130, by RL alone,
after behavioural-cloning pre-training, and with a BC loss during RL on top of it.

    python bench/demos.py [--seeds 0 1 2] [--max-env-steps 60000] [--bc-strength 0.5] [--bc-steps 50000]

The demonstrations: 20 episodes of the reference client's scripted MountainCar policy
(`python -m rllink_clients.demos record --env MountainCar-v0 --policy scripted`), recorded
once. Per variant and seed, a fresh gateway (`python -m app --seed N`, MountainCar's spaces):
`rl` (no demos), `pretrain` (`--demos`: behavioural cloning before the first version),
`pretrain+bc` (also `--bc-strength`, `--bc-steps`: a BC loss in every PPO update, its weight
falling to 0). The reference client (`rllink_clients.gym_client.run`) over TCP trains for the
whole budget; after each request it logs the mean return of its last 20 episodes (sampled
actions, as it trains), from which come: env steps until that mean is first at least -130,
its lowest value after that (how much RL unlearned) and its value at the end. Random play
scores -200 (it never reaches the flag in MountainCar's 200 steps); the demonstrator about -120.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import HOST, emit, record_demos, running_gateway, variant_runs_parser  # noqa: E402

from rllink_clients.gym_client import run  # noqa: E402
from rllink_clients.rllink_client import RLlinkClient  # noqa: E402

TARGET_RETURN = -130.0
SPACES = ("--observation-space", '{"type": "box", "shape": [2]}', "--action-space", '{"type": "discrete", "n": 3}')
VARIANTS = ("rl", "pretrain", "pretrain+bc")


def variant_flags(variant: str, demos: Path, args: argparse.Namespace) -> list[str]:
    if variant == "rl":
        return []
    flags = ["--demos", str(demos)]
    if variant == "pretrain+bc":
        flags += ["--bc-strength", str(args.bc_strength), "--bc-steps", str(args.bc_steps)]
    return flags


class Progress(logging.Handler):
    """The client's progress lines (`RunResult.log_progress`): (env steps, mean of the last 20
    returns) after each request, once 20 episodes have ended."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.curve: list[tuple[int, float]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("v%d  env steps") and record.args and record.args[3] == 20:  # type: ignore[index]
            self.curve.append((int(record.args[1]), float(record.args[4])))  # type: ignore[index]


def one_run(variant: str, seed: int, demos: Path, args: argparse.Namespace) -> dict:
    with running_gateway("--seed", str(seed), *SPACES, *variant_flags(variant, demos, args)) as gateway:
        progress, client_log = Progress(), logging.getLogger("rllink_clients")
        client_log.setLevel(logging.INFO)
        client_log.addHandler(progress)
        try:
            with RLlinkClient("tcp", HOST, gateway.tcp_port, timeout=300) as client:
                result = run(client, "MountainCar-v0", target_return=None, max_env_steps=args.max_env_steps, seed=seed)
        finally:
            client_log.removeHandler(progress)
    reached = next((steps for steps, mean in progress.curve if mean >= TARGET_RETURN), None)
    return {
        "variant": variant,
        "seed": seed,
        "reached": reached is not None,
        "env_steps": reached if reached is not None else result.env_steps,
        "lowest_after": None if reached is None else min(mean for steps, mean in progress.curve if steps >= reached),
        "first_20_mean": round(statistics.mean(result.first_returns), 1),
        "last_20_mean": round(result.mean_return, 1),
        "seconds": round(result.seconds, 1),
    }


def main() -> None:
    parser = variant_runs_parser(__doc__.splitlines()[0], VARIANTS)
    parser.add_argument("--bc-strength", type=float, default=0.5)
    parser.add_argument("--bc-steps", type=int, default=50_000)
    args = parser.parse_args()

    runs = []
    with tempfile.TemporaryDirectory(prefix="rllink-demos-") as tmp:
        demos = Path(tmp) / "mountain_car.jsonl"
        recorded = record_demos(demos, "MountainCar-v0", "scripted", args.demo_episodes)
        print(f"demonstrations: {recorded}", flush=True)
        for seed in args.seeds:
            for variant in args.variants:
                runs.append(one_run(variant, seed, demos, args))
                r = runs[-1]
                print(
                    f"{variant:12s} seed {seed}: {'reached' if r['reached'] else 'NOT reached'} {TARGET_RETURN:g} after "
                    f"{r['env_steps']:,} env steps (lowest after {r['lowest_after']}); first 20 episodes "
                    f"{r['first_20_mean']}, last 20 {r['last_20_mean']} after {args.max_env_steps:,}; {r['seconds']} s",
                    flush=True,
                )

    lines = [f"MountainCar-v0 to a mean return of {TARGET_RETURN:g} (last 20 episodes), {args.max_env_steps:,} env steps a run"]
    for variant in args.variants:
        mine = [r for r in runs if r["variant"] == variant]
        # A run that never reached the target counts as its whole budget: the median stays honest.
        steps = statistics.median(r["env_steps"] for r in mine)
        lines.append(
            f"{variant:12s} {sum(r['reached'] for r in mine)}/{len(mine)} reached; env steps median {steps:,.0f} "
            f"({', '.join(format(r['env_steps'], ',') for r in mine)}); lowest after "
            f"{', '.join(str(r['lowest_after']) for r in mine)}; last 20 at the end {', '.join(str(r['last_20_mean']) for r in mine)}"
        )
    emit(
        "demos",
        lines,
        {
            "target_return": TARGET_RETURN,
            "max_env_steps": args.max_env_steps,
            "bc_strength": args.bc_strength,
            "bc_steps": args.bc_steps,
            "demonstrations": recorded,
            "runs": runs,
        },
    )


if __name__ == "__main__":
    main()
