"""The model a game ships: best.onnx played greedily against the latest version, sampled and greedy.

    python bench/shipped_model.py [--tasks Acrobot-v1 CartPole-v1] [--seeds 0 1 2]
                                  [--episodes 20] [--max-env-steps 300000]
                                  [--evaluation-interval 10] [--past-target 0]
                                  [--algorithm ppo|sac]

Per task and seed: a fresh gateway on its defaults (`--seed N`, models in a folder of its
own; `--algorithm sac` for the continuous tasks, as the docs' "Which settings" says), one
reference client (`rllink_clients.gym_client.run`, what `python -m
rllink_clients.gym_client` runs) until the env's target (the client's default: CartPole-v1
450, else the registered reward_threshold: Acrobot-v1 -100, LunarLander-v3 200) or
`--max-env-steps`; with `--past-target N`, N env steps more after it. The client plays
every `--evaluation-interval`-th episode greedily as an evaluation episode (the gateway's
setting, passed as `--evaluation-interval`), and the gateway keeps best.onnx by them.

Then three players, `--episodes` fresh episodes each (episode i reset with seed 20,000 +
1,000 x seed + i): best.onnx greedily (the most likely action, as a game ships it), the
latest version (GET /api/model.onnx) greedily, and the latest version sampling (as
training played). Printed per task and seed, then the means over the seeds.

Targets (issue 51): the shipped model (best.onnx) played greedily scores at least what
sampling from the latest version scores, on every task; Acrobot-v1's at least -100 on
seeds 0-2.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gymnasium as gym  # noqa: E402
import httpx  # noqa: E402
import numpy as np  # noqa: E402
from _common import HOST, emit, running_gateway  # noqa: E402
from learn_suite import deterministic_action, gateway_config, wait_until_settled  # noqa: E402

from rllink.action_dists import sample_actions  # noqa: E402

EVAL_SEED_BASE = 20_000
ACROBOT_TARGET = -100.0


def play(model: bytes, config: dict[str, Any], env_id: str, episodes: int, seed: int, greedy: bool) -> list[float]:
    """Returns of `episodes` episodes of the ONNX policy in onnxruntime: its mode, or sampled."""
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    distribution, space = config["action_distribution"], config["action_space"]
    env = gym.make(env_id)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=EVAL_SEED_BASE + 1000 * seed + i)
        done, total = False, 0.0
        while not done:
            (outputs,) = session.run(None, {config["onnx_input_name"]: np.asarray(obs, np.float32)[None]})[:1]
            if greedy:
                action = deterministic_action(distribution, outputs[0].astype(np.float64), space)
            else:
                actions, _ = sample_actions(distribution, outputs, rng, True, space.get("low"), space.get("high"))
                action = int(actions[0]) if distribution == "categorical" else actions[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def run_seed(env_id: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    from rllink_clients.gym_client import run
    from rllink_clients.rllink_client import RLlinkClient

    with tempfile.TemporaryDirectory(prefix="rllink-shipped-") as models:
        flags = ["--seed", str(seed), "--models-dir", models, "--evaluation-interval", str(args.evaluation_interval),
                 "--algorithm", args.algorithm]
        with running_gateway(*flags) as gateway:
            started = time.monotonic()
            with RLlinkClient("tcp", HOST, gateway.tcp_port, timeout=600) as client:
                result = run(client, env_id, max_env_steps=args.max_env_steps, seed=seed)
                reached_at = result.env_steps
                if args.past_target and result.reached_target:
                    more = run(client, env_id, target_return=None, max_env_steps=args.past_target, seed=seed + 1)
                    result.env_steps += more.env_steps
                    result.evaluations += more.evaluations
                client.request({"type": "PING"})
            seconds = time.monotonic() - started
            wait_until_settled(gateway.base_url)  # the last evaluation episodes counted (SAC trains for seconds a version)
            time.sleep(1.0)  # best.onnx is written off the event loop
            config = gateway_config(gateway.base_url)  # the spaces the client declared (the gateway adopts them)
            latest = httpx.get(f"{gateway.base_url}/api/model.onnx", timeout=30).content
            module_dir = Path(models) / "default_policy"
            best_info = json.loads((module_dir / "best.json").read_text()) if (module_dir / "best.json").exists() else None
            best = (module_dir / "best.onnx").read_bytes() if best_info else None
            weights_seq_no = int(httpx.get(f"{gateway.base_url}/api/metrics", timeout=10).json()["weights_seq_no"])
    scores = {
        "latest_sampled": play(latest, config, env_id, args.episodes, seed, greedy=False),
        "latest_greedy": play(latest, config, env_id, args.episodes, seed, greedy=True),
        **({"best_greedy": play(best, config, env_id, args.episodes, seed, greedy=True)} if best else {}),
    }
    return {
        "seed": seed,
        "reached_target": result.reached_target,
        "env_steps_to_target": reached_at if result.reached_target else None,
        "env_steps": result.env_steps,
        "seconds": round(seconds, 1),
        "weights_seq_no": weights_seq_no,
        "client_evaluation_episodes": len(result.evaluations),
        "best": best_info,
        **{name: round(float(np.mean(returns)), 2) for name, returns in scores.items()},
        "at_step_limit": {name: sum(r <= -500 for r in returns) for name, returns in scores.items()} if "Acrobot" in env_id else None,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["Acrobot-v1", "CartPole-v1"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=20, help="episodes each player plays (default 20)")
    parser.add_argument("--max-env-steps", type=int, default=300_000, help="the client's budget if it misses the target")
    parser.add_argument("--evaluation-interval", type=int, default=10, help="the gateway's evaluation_interval (default 10)")
    parser.add_argument("--past-target", type=int, default=0, help="env steps trained after the target (default 0)")
    parser.add_argument("--algorithm", choices=["ppo", "sac"], default="ppo", help="the gateway's algorithm (default ppo)")
    args = parser.parse_args(argv)
    lines, results, targets = [], {}, {}
    for env_id in args.tasks:
        runs = []
        for seed in args.seeds:
            print(f"{env_id} seed {seed} ...", flush=True)
            runs.append(run_seed(env_id, seed, args))
            r = runs[-1]
            lines.append(
                f"{env_id} seed {seed}: target {'reached at ' + str(r['env_steps_to_target']) if r['reached_target'] else 'MISSED'} "
                f"env steps ({r['env_steps']} in all, v{r['weights_seq_no']}, {r['seconds']} s); best.onnx "
                f"{'v' + str(r['best']['weights_seq_no']) if r['best'] else 'none'}: greedy {r.get('best_greedy', 'n/a')}; "
                f"latest: greedy {r['latest_greedy']}, sampled {r['latest_sampled']}"
                + (f"; episodes at the 500-step limit {r['at_step_limit']}" if r["at_step_limit"] else "")
            )
            print(lines[-1], flush=True)
        results[env_id] = runs
        shipped_ok = all("best_greedy" in r and r["best_greedy"] >= r["latest_sampled"] for r in runs)
        targets[f"{env_id}: best.onnx greedy >= latest sampled, every seed"] = shipped_ok
        if env_id == "Acrobot-v1":
            targets["Acrobot-v1: best.onnx greedy >= -100, every seed"] = all(r.get("best_greedy", -1e9) >= ACROBOT_TARGET for r in runs)
    lines += [f"target {name}: {'met' if ok else 'MISSED'}" for name, ok in targets.items()]
    emit("shipped_model", lines, {"args": vars(args), "runs": results, "targets": targets})


if __name__ == "__main__":
    main()
