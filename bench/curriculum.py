"""Curriculum: env steps until the navigation env at full difficulty is solved, by RL alone,
after behavioural-cloning pre-training on demonstrations, and with a curriculum of lessons.

    python bench/curriculum.py [--seeds 0 1 2] [--max-env-steps 60000]

The task (`rllink/Navigation-v0`, clients/python/rllink_clients/navigation.py): walk from 0 to
a goal `goal_distance` steps away, left or right, within 40 steps, reward 1 at the goal only;
at full difficulty the goal is 30 away, which random play reaches about once in 10^5 episodes
(a policy leaning 60/40 to one side: once in 10^4). Solved:
the last 50 episodes at full difficulty reached the goal at least 90% of the time (sampled
actions, as the client trains). Per variant and seed, a fresh gateway (`python -m app --seed N`,
the env's spaces) and one reference client over TCP (`navigation.play`, the ONNX policy):
`rl` (the goal 30 away from the start), `demos` (`--demos`: 20 episodes of the scripted
demonstrator, `rllink_clients.navigation:scripted`, recorded once), `curriculum`
(`--env-params`: the goal 2, then 10, then 30 away, each lesson done at a mean return of 0.8
over 50 episodes). A run that is not solved within `--max-env-steps` counts as its budget.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import HOST, emit, record_demos, running_gateway, variant_runs_parser  # noqa: E402

from rllink_clients.navigation import (  # noqa: E402
    NAVIGATION_ENV_ID,
    SUCCESS_WINDOW,
    FullDifficultyTarget,
    NavigationEnv,
    play,
)
from rllink_clients.rllink_client import RLlinkClient  # noqa: E402

TARGET_SUCCESS = 0.9
SPACES = ("--observation-space", '{"type": "box", "shape": [2], "low": -1, "high": 1}', "--action-space", '{"type": "discrete", "n": 2}')
CURRICULUM = {
    "goal_distance": {
        "curriculum": [
            {"name": "near", "value": 2, "completion_criteria": {"threshold": 0.8, "min_episodes": 50}},
            {"name": "middle", "value": 10, "completion_criteria": {"threshold": 0.8, "min_episodes": 50}},
            {"name": "far", "value": NavigationEnv.MAX_DISTANCE},
        ]
    }
}
VARIANTS = ("rl", "demos", "curriculum")


def variant_flags(variant: str, demos: Path) -> list[str]:
    return {"rl": [], "demos": ["--demos", str(demos)], "curriculum": ["--env-params", json.dumps(CURRICULUM)]}[variant]


def one_run(variant: str, seed: int, demos: Path, max_env_steps: int) -> dict:
    with running_gateway("--seed", str(seed), *SPACES, *variant_flags(variant, demos)) as gateway:
        with RLlinkClient("tcp", HOST, gateway.tcp_port, timeout=300) as client:
            target = FullDifficultyTarget(TARGET_SUCCESS)
            result = play(client, target, seed=seed, max_env_steps=max_env_steps)
    return {
        "variant": variant,
        "seed": seed,
        "solved": target.stop.is_set(),
        "env_steps": result.env_steps,
        "full_difficulty_success_rate": target.success_rate,
        "seconds": round(result.seconds, 1),
    }


def main() -> None:
    args = variant_runs_parser(__doc__.splitlines()[0], VARIANTS).parse_args()

    runs = []
    with tempfile.TemporaryDirectory(prefix="rllink-curriculum-") as tmp:
        demos = Path(tmp) / "navigation.jsonl"
        recorded = record_demos(demos, NAVIGATION_ENV_ID, "rllink_clients.navigation:scripted", args.demo_episodes)
        print(f"demonstrations: {recorded}", flush=True)
        for seed in args.seeds:
            for variant in args.variants:
                runs.append(r := one_run(variant, seed, demos, args.max_env_steps))
                rate = "n/a" if r["full_difficulty_success_rate"] is None else f"{r['full_difficulty_success_rate']:.2f}"
                print(
                    f"{variant:10s} seed {seed}: {'solved' if r['solved'] else 'NOT solved'} after {r['env_steps']:,} env steps "
                    f"(success at full difficulty, last {SUCCESS_WINDOW}: {rate}); {r['seconds']} s",
                    flush=True,
                )

    lines = [
        f"{NAVIGATION_ENV_ID}, goal {NavigationEnv.MAX_DISTANCE} away: env steps until {TARGET_SUCCESS:.0%} of the last {SUCCESS_WINDOW} "
        f"episodes reach it; budget {args.max_env_steps:,} env steps a run (not solved: counted as the budget)",
        f"{'variant':10s} | solved | median env steps | per seed",
    ]
    for variant in args.variants:
        mine = [r for r in runs if r["variant"] == variant]
        steps = statistics.median(r["env_steps"] for r in mine)
        per_seed = ", ".join(f"{r['env_steps']:,}{'' if r['solved'] else ' (not solved)'}" for r in mine)
        lines.append(f"{variant:10s} | {sum(r['solved'] for r in mine)}/{len(mine)} | {steps:,.0f} | {per_seed}")
    emit(
        "curriculum",
        lines,
        {"target_success": TARGET_SUCCESS, "max_env_steps": args.max_env_steps, "demonstrations": recorded, "runs": runs},
    )


if __name__ == "__main__":
    main()
