"""The multi-policy example's mixed scene: eight CartPoles and one Pendulum arm in one scene,
two modules ("cart", "arm"). Agent steps the arm needs to a mean return of -400 there,
against the steps it needs alone, per seed; and whether CartPole still reaches 450.

    .venv/bin/python bench/mixed_scene.py [--seeds 0 1 2] [--max-seconds 900]

Target (issue #34): the arm reaches -400 within 1.5x the agent steps it needs alone,
while CartPole reaches 450.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, rounded, running_gateway  # noqa: E402

from rllink_clients.multi_agent import make_scene, run_scene  # noqa: E402
from rllink_clients.rllink_client import RLlinkClient  # noqa: E402

POLICIES = {  # the docs' multi-policy example (docs/multi-agent.md)
    "cart": {"observation_space": {"type": "box", "shape": [4]}, "action_space": {"type": "discrete", "n": 2}},
    "arm": {
        "observation_space": {"type": "box", "shape": [3]},
        "action_space": {"type": "box", "shape": [1], "low": -2, "high": 2},
        "ppo": {"learning_rate": 0.001},
    },
}
MAPPING = {"cart_*": "cart", "pend_*": "arm"}
ARM_TARGET, CART_TARGET = -400.0, 450.0


def play(scene: str, targets: dict[str, float], seed: int, max_seconds: float) -> dict:
    """One fresh gateway, one scene played to the targets: what each module reached and sampled."""
    flags = ("--policies", json.dumps(POLICIES), "--policy-mapping", json.dumps(MAPPING), "--seed", str(seed))
    with running_gateway(*flags) as gateway:
        with RLlinkClient("tcp", "127.0.0.1", gateway.tcp_port) as client:
            result = run_scene(client, make_scene(scene), target_return=targets, max_seconds=max_seconds, seed=seed)
        policies = httpx.get(f"{gateway.base_url}/api/metrics", timeout=30).json()["policies"]
    return {
        "reached": result.reached_target,
        "seconds": round(result.seconds, 1),
        "arm_steps": policies["arm"]["num_env_steps_sampled_lifetime"],
        "arm_return": rounded(result.mean_return("arm"), 1),
        "cart_return": rounded(result.mean_return("cart"), 1) if "cart" in result.module_returns else None,
        "arm_max_batch": policies["arm"]["max_batch_env_steps"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-seconds", type=float, default=900.0, help="per run")
    args = parser.parse_args()
    lines, runs = [], []
    for seed in args.seeds:
        alone = play("pendulum:1", {"arm": ARM_TARGET}, seed, args.max_seconds)
        mixed = play("cartpole:8,pendulum:1", {"arm": ARM_TARGET, "cart": CART_TARGET}, seed, args.max_seconds)
        ratio = mixed["arm_steps"] / alone["arm_steps"] if alone["reached"] and mixed["reached"] else float("nan")
        runs.append({"seed": seed, "alone": alone, "mixed": mixed, "ratio": rounded(ratio)})
        lines.append(
            f"seed {seed}: arm alone {'reached' if alone['reached'] else 'NOT'} -400 in {alone['arm_steps']:,} agent steps "
            f"({alone['seconds']} s); in the mixed scene {'both reached' if mixed['reached'] else 'NOT both'} in "
            f"{mixed['arm_steps']:,} arm steps ({mixed['seconds']} s; cart {mixed['cart_return']}, arm {mixed['arm_return']}, "
            f"arm's largest batch {mixed['arm_max_batch']}): {ratio:.2f}x"
        )
    ratios = [run["ratio"] for run in runs if run["ratio"] is not None]
    if ratios:
        lines.append(f"arm steps, mixed / alone: median {statistics.median(ratios):.2f}x, worst {max(ratios):.2f}x "
                     "(target <= 1.5x, with CartPole at 450)")
    emit("mixed_scene", lines, {"runs": runs, "median_ratio": rounded(statistics.median(ratios)) if ratios else None})


if __name__ == "__main__":
    main()
