"""Launcher: env steps/s trained when the gateway launches N Python simulators itself.

    python bench/launcher.py [--num-envs 1 2 4] [--max-env-steps 40000] [--repeats 1]

Per N, a fresh gateway run as a user runs one (`python -m app`, what `rllink-gateway` runs):
`--env-path "<python> -m rllink_clients.cartpole" --num-envs N --headless --time-scale 20`
and the budget `--max-env-steps`; the gateway starts the N CartPole reference clients (each
connects with the `--rllink-*` arguments, docs/training.md "Launching games and budgets"),
trains until the budget is spent, stops them and exits 0 with its one-line summary. Two
rates: from that summary (env steps trained / seconds since the gateway started serving, so
the games' start-up counts), and from /api/metrics polled every 0.5 s (from the first
training step to the last one seen: training alone). `train_batch_size` 2,000, one decode
path (`--decode-workers 0`), as tests/test_launcher.py's set-up. `--headless-args []`: the
reference client refuses the default `--headless` it would otherwise be given (a Python
simulator has no window), so `--headless` adds nothing here. A game that stays down (the
launcher gave up restarting it) ends the benchmark with its log.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from _common import ROOT, emit, gateway_process  # noqa: E402

CARTPOLE = f"{shlex.quote(sys.executable)} -m rllink_clients.cartpole"
SUMMARY = re.compile(r"run ended \((?P<reason>[^)]*)\): env steps trained default_policy (?P<steps>\d+) .* in (?P<seconds>[\d.]+) s;")
RUN_TIMEOUT_S = 600.0


def one_run(num_envs: int, budget: int, tmp: Path) -> dict:
    """One launched run to its budget: the summary's rate and the polled training rate."""
    tmp.mkdir(parents=True, exist_ok=True)
    log_path = tmp / f"gateway-{num_envs}.log"
    flags = [
        "--runs-dir", str(tmp / "runs"), "--run-id", f"launch-{num_envs}", "--decode-workers", "0",
        "--env-path", CARTPOLE, "--num-envs", str(num_envs), "--headless", "--headless-args", "[]", "--time-scale", "20",
        "--max-env-steps", str(budget), "--train-batch-size", "2000",
    ]  # fmt: skip
    load = os.getloadavg()[0]
    first = last = None  # (monotonic time, env steps trained) at the first and last poll that saw training
    with gateway_process(tmp / f"checkpoints-{num_envs}", log_path, *flags, root=ROOT) as gateway:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while gateway.proc.poll() is None and time.monotonic() < deadline:
            if "it stays down" in log_path.read_text(errors="replace"):
                raise RuntimeError(f"N={num_envs}: a game stays down:\n{gateway.log_tail()}")
            try:
                trained = httpx.get(f"{gateway.base_url}/api/metrics", timeout=5).json()["num_env_steps_trained_lifetime"]
            except httpx.HTTPError:  # it stops serving at the budget
                trained = 0
            if trained > 0:
                last = (time.monotonic(), trained)
                first = first or last
            time.sleep(0.5)
        exit_code = gateway.proc.wait(timeout=60)
    summary = SUMMARY.search(log_path.read_text())
    if exit_code != 0 or summary is None:
        raise RuntimeError(f"N={num_envs}: the gateway exited with {exit_code}, summary {summary}:\n{gateway.log_tail()}")
    steps, seconds = int(summary["steps"]), float(summary["seconds"])
    polled = (last[1] - first[1]) / (last[0] - first[0]) if first and last and last[0] > first[0] else None
    return {
        "num_envs": num_envs,
        "env_steps_trained": steps,
        "seconds": seconds,
        "env_steps_per_s": round(steps / seconds),
        "training_env_steps_per_s": None if polled is None else round(polled),
        "games_started": len(re.findall(r"game \d+ started", log_path.read_text())),
        "load_1min": round(load, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--max-env-steps", type=int, default=40_000)
    parser.add_argument("--repeats", type=int, default=1, help="runs per N, interleaved (N=1, 2, 4, 1, 2, 4, ...)")
    args = parser.parse_args()

    runs = []
    with tempfile.TemporaryDirectory(prefix="rllink-launcher-") as tmp:
        for repeat in range(args.repeats):
            for num_envs in args.num_envs:
                r = one_run(num_envs, args.max_env_steps, Path(tmp) / f"r{repeat}")
                runs.append(r)
                print(
                    f"N={num_envs}: {r['env_steps_trained']:,} env steps trained in {r['seconds']} s = "
                    f"{r['env_steps_per_s']:,} env steps/s (training alone {r['training_env_steps_per_s']}); "
                    f"{r['games_started']} games started; load {r['load_1min']}",
                    flush=True,
                )

    lines = [f"N launched CartPole reference clients, {args.max_env_steps:,} env steps each run, {os.cpu_count()} cores"]
    for num_envs in args.num_envs:
        mine = [r for r in runs if r["num_envs"] == num_envs]
        lines.append(
            f"N={num_envs}: env steps/s (summary) median {statistics.median(r['env_steps_per_s'] for r in mine):,.0f} "
            f"({', '.join(format(r['env_steps_per_s'], ',') for r in mine)}); training alone "
            f"{', '.join(str(r['training_env_steps_per_s']) for r in mine)}; load {', '.join(str(r['load_1min']) for r in mine)}"
        )
    emit("launcher", lines, {"max_env_steps": args.max_env_steps, "cpu_count": os.cpu_count(), "runs": runs})


if __name__ == "__main__":
    main()
