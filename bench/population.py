"""Population: total env steps until a population of 4 reaches a task's target, against
each of three hand-picked single settings, with the same clients (issue 51).

    python bench/population.py [--env LunarLander-v3] [--target 200] [--clients 4] [--seeds 0]
        [--variants population defaults reward lr]

For each seed and variant, a fresh gateway (`python -m app --seed N` and the variant's
flags) in a subprocess and `--clients` reference clients (`rllink_clients.gym_client.run`),
each in a process of its own with its own env seed. A client stops at its target (the
mean of its last 20 training episodes and its last evaluation episodes at the target:
the reference client's rule); a variant has reached the target when its first client
has, and its figure is the gateway's total env steps sampled then (all clients). With a
population each client plays one member, so the first to reach it is the best member's.

Variants: `population` (the module with `population: {size: 4}` and `--population`'s
settings, everything else the defaults), `defaults`, `lr` (learning rate 1e-3), `gamma`
(0.999). Target: the population in no more total env steps than the best of the three.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from _common import HOST, emit, running_gateway  # noqa: E402

SPACES = {  # declared, so that a population's members are built at start
    "LunarLander-v3": {"observation_space": {"type": "box", "shape": [8]}, "action_space": {"type": "discrete", "n": 4}},
    "CartPole-v1": {"observation_space": {"type": "box", "shape": [4]}, "action_space": {"type": "discrete", "n": 2}},
    "Acrobot-v1": {"observation_space": {"type": "box", "shape": [6]}, "action_space": {"type": "discrete", "n": 3}},
}


VARIANTS = {  # the gateway's flags for (the env, the population's extra settings, --population)
    "population": lambda env, extra: ["--policies", json.dumps({"default_policy": {**SPACES[env], "population": {"size": 4, **extra}}})],
    "defaults": lambda env, extra: [],
    "lr": lambda env, extra: ["--ppo.learning-rate", "1e-3"],
    "gamma": lambda env, extra: ["--ppo.gamma", "0.999"],
}


def client(port: int, env: str, target: float, max_env_steps: int, seed: int, stop, results) -> None:
    """One reference client until its target, the budget or `stop`; its result goes to `results`."""
    from rllink_clients.gym_client import run
    from rllink_clients.rllink_client import RLlinkClient

    with RLlinkClient("tcp", HOST, port, timeout=600) as connection:
        result = run(connection, env, target_return=target, max_env_steps=max_env_steps, seed=seed, stop=stop)
    results.put({"seed": seed, "reached": result.reached_target, "env_steps": result.env_steps, "mean_return": result.mean_return})


def one_run(env: str, target: float, variant: str, seed: int, clients: int, max_env_steps: int, population: dict) -> dict:
    context = mp.get_context("spawn")
    stop, results = context.Event(), context.Queue()
    with running_gateway("--seed", str(seed), *VARIANTS[variant](env, population)) as gateway:
        base = f"http://{HOST}:{gateway.http_port}"
        started = time.monotonic()
        workers = [
            context.Process(target=client, args=(gateway.tcp_port, env, target, max_env_steps, 1000 * seed + i, stop, results))
            for i in range(clients)
        ]
        for worker in workers:
            worker.start()
        reached, finished = None, []
        while len(finished) < clients:
            finished.append(results.get(timeout=3600))
            if finished[-1]["reached"]:
                reached = finished[-1]
                break
        total = httpx.get(f"{base}/api/metrics", timeout=10).json()["num_env_steps_sampled_lifetime"]
        seconds = time.monotonic() - started
        policies = httpx.get(f"{base}/api/policies", timeout=10).json()
        stop.set()
        for worker in workers:
            worker.join(timeout=120)
            if worker.is_alive():
                worker.terminate()
    population = next((p["population"] for p in policies if p.get("population")), None)
    return {
        "variant": variant,
        "seed": seed,
        "reached": reached is not None,
        "total_env_steps": total,
        "seconds": round(seconds, 1),
        "first_client": reached,
        "client_means": [round(r["mean_return"], 1) for r in finished],
        "population": None if population is None else {
            "serves": population["serves"],
            "exploits": population["exploits"],
            "members": {m: {"return": v["episode_return_mean"], **v["hyperparameters"]} for m, v in population["members"].items()},
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="LunarLander-v3", choices=sorted(SPACES))
    parser.add_argument("--target", type=float, default=200.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--max-env-steps", type=int, default=1_000_000, help="per client")
    parser.add_argument("--population", type=json.loads, default={}, help="more settings of the population variant (a JSON object)")
    args = parser.parse_args()
    runs = []
    for seed in args.seeds:
        for variant in args.variants:
            run = one_run(args.env, args.target, variant, seed, args.clients, args.max_env_steps, args.population)
            runs.append(run)
            print(json.dumps(run), flush=True)
    lines = [
        f"{r['variant']} seed {r['seed']}: {'reached' if r['reached'] else 'NOT reached'} {args.target:g} at "
        f"{r['total_env_steps']:,} total env steps, {r['seconds']:.0f} s"
        for r in runs
    ]
    settings = {"env": args.env, "target": args.target, "clients": args.clients, "population": args.population}
    emit("population", lines, {**settings, "runs": runs})


if __name__ == "__main__":
    main()
