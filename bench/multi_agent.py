"""Multi-agent: ingest of multi-agent messages vs single-agent ones, and learning with 1, 8, 64 agents.

    python bench/multi_agent.py [--seconds 3] [--seeds 0 1 2] [--scenes 1 8 64] [--defaults] [--quick] [--profile]

Every gateway runs with two flags only the multi-agent path needs (the rest is its
embedded defaults, but for the learning runs' settings below): one module, `cart` (CartPole's spaces), which every agent `cart_*`
plays (parameter sharing):

    --policies '{"cart": {"observation_space": {"type": "box", "shape": [4]},
                          "action_space": {"type": "discrete", "n": 2}}}'
    --policy-mapping '{"cart_*": "cart"}'

1. Ingest: agent steps/s accepted, in one run against one such gateway, with training
   paused as bench/ingest.py pauses it (huge train batch size and barrier timeout, an
   idle client that has sent experience) and measured as it measures (pre-encoded
   frames, client processes sending batches + PING as fast as they can, a batch counted
   when its PONG comes back; `ingest.run_clients`). The messages are what the reference
   multi-agent client (clients/python/rllink_clients/multi_agent.py) sends with the gateway's default
   `env_steps_per_sample` of 500: after each scene step it checks whether 500 agent steps
   are complete, so a scene of 64 CartPoles sends 64 chunks of 8 steps (512 agent steps),
   one of 8 sends 8 chunks of 63 (504); each chunk with its `agent_id` (cart_i), the
   scene's shared `episode_id`, `weights_seq_no`, `action_logp`, a few ending their
   episode. Configurations:
     single x1 / x8   one chunk of 500 steps per message, no agent_id (bench/ingest.py's)
     64x8 x1          one scene of 64 agents over one connection: 64 chunks of 8 steps
     64x48 x1         the same with the README's settings for many agents
                      (env_steps_per_sample 3,072: 64 chunks of 48 steps); no target
     64x500 x1        the same with long chunks, 64 x 500 steps (a client that counts
                      scene steps): the per-chunk overhead, amortized
     8x63 x8          8 scenes of 8 agents over 8 connections: 8 chunks of 63 steps each
   "Per env step cost, multi-agent vs single-agent" = single-agent rate / multi-agent rate
   (same number of connections); the same per gateway CPU-second, which other load on the
   machine disturbs less. The sans-I/O core (app.sansio.protocol.Session: framing, JSON
   decoding, validation; no decode worker) is measured in-process on the same frames, one
   core. `--profile` adds a cProfile of the core on the 64x8 message.

2. Learning: CartPole-v1 to a mean return of 450 over the last 20 episodes of the shared
   module, with scenes cartpole:1, cartpole:8 and cartpole:64 (agents cart_0..cart_N-1,
   each on its own CartPole-v1, rllink_clients.multi_agent.make_scene), the reference
   multi-agent client (`run_scene`) over TCP in this process, a fresh gateway
   (`--seed N`) per run, with the README's settings for many agents sharing a policy
   (`scene_flags`: about 48 steps per agent per request; from 2,048 steps a request, 4
   epochs of minibatches of 512 at a learning rate of 5e-3; `--defaults` runs every scene on the embedded defaults instead). Seconds from
   the client's GET_CONFIG to the reply that completes
   the run (gateway start excluded), agent steps, scene steps, training steps; the median
   over the seeds (a seed that misses counts as its whole budget).

Targets: multi-agent ingest within 1.5x of single-agent per env step (single-agent rate
/ multi-agent rate <= 1.5), 8x63 within 1.2x (issue 34); 64 agents reach 450 in under
a third of the wall time of 1 agent (median seconds, 64 / 1 < 0.333).

`--quick` is a smoke run (< 1 min): short ingest windows, one seed, a target return of
100 and 10 s per learning run; its figures are not the benchmark's.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import pstats
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
import ingest  # noqa: E402  (bench/ingest.py: its client processes, runner and idle holder)
from _common import (  # noqa: E402
    HOST,
    best_rate,
    cartpole_chunk,
    emit,
    episodes_bodies,
    proc_peak_rss_bytes,
    raise_fd_limit,
    rounded,
    running_gateway,
)

from app.sansio.protocol import RequestReceived, Session
from rllink.framing import encode_frame  # noqa: E402

MODULE_ID = "cart"
CARTPOLE_SPACES = {"observation_space": {"type": "box", "shape": [4]}, "action_space": {"type": "discrete", "n": 2}}
POLICY_FLAGS = ("--policies", json.dumps({MODULE_ID: CARTPOLE_SPACES}), "--policy-mapping", json.dumps({"cart_*": MODULE_ID}))
PAUSED_FLAGS = ("--train-batch-size", str(10**12), "--barrier-timeout-s", str(10**9))
ENV_STEPS_PER_SAMPLE = 500  # the gateway's default, what the client sends per message
STEPS_PER_AGENT = 48  # per request, in the README's settings for many agents sharing a policy
DISTINCT_MESSAGES = 8
STEPS_PER_BATCH = 8_000  # agent steps per PING: bench/ingest.py's 16 x 500
TARGET_INGEST_RATIO = 1.5
TARGET_LEARN_RATIO = 1 / 3
MEAN_EPISODE_STEPS = 200  # a chunk of T steps ends its episode with probability T / this


# -- Messages ---------------------------------------------------------------------------


def scene_body(rng: random.Random, agents: int, steps_per_chunk: int) -> bytes:
    """An EPISODES body as the multi-agent client sends a scene's sample: one chunk per
    agent (cart_0..), under the scene's episode id; some chunks end their episode."""
    episode_id = f"{rng.getrandbits(128):032x}"
    chunks = []
    for i in range(agents):
        ended = rng.random() < steps_per_chunk / MEAN_EPISODE_STEPS
        chunk = cartpole_chunk(rng, steps_per_chunk, terminated=ended)
        chunk.update(episode_id=episode_id, agent_id=f"cart_{i}", weights_seq_no=3)
        chunks.append(chunk)
    message = {"type": "EPISODES", "episodes": chunks, "timesteps": agents * steps_per_chunk}
    return json.dumps(message).encode()


def configurations() -> list[dict]:
    """name, connections, agents per message, steps per chunk, the single-agent reference."""
    short = lambda agents: math.ceil(ENV_STEPS_PER_SAMPLE / agents)  # noqa: E731 - steps per chunk
    return [
        {"name": "single", "clients": 1, "agents": 1, "chunk_steps": ENV_STEPS_PER_SAMPLE, "vs": None},
        {"name": "single", "clients": 8, "agents": 1, "chunk_steps": ENV_STEPS_PER_SAMPLE, "vs": None},
        {"name": f"64x{short(64)}", "clients": 1, "agents": 64, "chunk_steps": short(64), "vs": ("single", 1)},
        # the README's settings for many agents (env_steps_per_sample 3,072): measured, no target
        {"name": f"64x{STEPS_PER_AGENT}", "clients": 1, "agents": 64, "chunk_steps": STEPS_PER_AGENT, "vs": ("single", 1),
         "target": False},
        {"name": "64x500", "clients": 1, "agents": 64, "chunk_steps": 500, "vs": ("single", 1)},
        {"name": f"8x{short(8)}", "clients": 8, "agents": 8, "chunk_steps": short(8), "vs": ("single", 8), "target": 1.2},
    ]


def bodies_for(config: dict, seed: int) -> list[bytes]:
    if config["agents"] == 1:  # bench/ingest.py's messages: no agent_id, the default module
        return episodes_bodies(DISTINCT_MESSAGES, config["chunk_steps"], seed=seed)
    rng = random.Random(seed)
    return [scene_body(rng, config["agents"], config["chunk_steps"]) for _ in range(DISTINCT_MESSAGES)]


# -- Ingest -----------------------------------------------------------------------------


def run_ingest(gateway, config: dict, frames: list[bytes], seconds: float) -> dict:
    """ingest.run_clients, whose figures assume ingest.STEPS steps per frame, rescaled to
    the agent steps of these frames (all frames of one configuration have as many)."""
    steps = config["agents"] * config["chunk_steps"]
    per_batch = max(1, STEPS_PER_BATCH // steps)
    batch = [frames[i % len(frames)] for i in range(per_batch)]
    run = ingest.run_clients(gateway, "tcp", config["clients"], batch, seconds)
    scale = steps / ingest.STEPS
    for key in ("env_steps", "env_steps_per_s", "env_steps_per_gateway_cpu_s"):
        run[key] = rounded(run[key] * scale, 0)
    return {
        "config": config["name"], "agents": config["agents"], "chunk_steps": config["chunk_steps"],
        "steps_per_message": steps, "bytes_per_message": len(frames[0]), "messages_per_ping": per_batch, **run,
    }


def core_policies():
    """The gateway's module set for the in-process core: `cart`, agents `cart_*`."""
    from app.settings.policies import Module, PolicySet
    from app.spaces.models import CARTPOLE_ACTION_SPACE, CARTPOLE_OBSERVATION_SPACE
    from app.training.algorithms.ppo.config import PPOConfig

    return PolicySet([Module(MODULE_ID, CARTPOLE_OBSERVATION_SPACE, CARTPOLE_ACTION_SPACE, PPOConfig())], {"cart_*": MODULE_ID})


def core_rate(frames: list[bytes], steps_per_frame: int, seconds: float) -> float:
    """Agent steps/s of app.sansio.protocol.Session (frame, decode, validate) on these frames, one core."""
    session = Session(core_policies(), 64 << 20)
    cycle = iter(range(10**12))

    def parse() -> None:
        (event,) = session.receive_data(frames[next(cycle) % len(frames)])
        if not isinstance(event, RequestReceived):
            raise RuntimeError(f"the core refused the benchmark message: {event}")

    return best_rate(parse, steps_per_frame, seconds=seconds)


def profile_core(frame: bytes, calls: int = 200, top: int = 15) -> str:
    """The top costs (cumulative and own) of the core on one frame, cProfile."""
    session = Session(core_policies(), 64 << 20)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        session.receive_data(frame)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def measure_ingest(args) -> tuple[list[str], dict]:
    configs = configurations()
    frames = {id(c): [encode_frame(b) for b in bodies_for(c, seed=i)] for i, c in enumerate(configs)}
    core = {}
    for config in configs:
        key = (config["name"], config["chunk_steps"])
        if key not in core:
            core[key] = core_rate(frames[id(config)], config["agents"] * config["chunk_steps"], args.core_seconds)
    runs = []
    holder_frame = frames[id(configs[0])][0]
    with running_gateway(*POLICY_FLAGS, *PAUSED_FLAGS) as gateway, ingest._holder(gateway, holder_frame):
        for config in configs:
            run = run_ingest(gateway, config, frames[id(config)], args.seconds)
            run["core_steps_per_s"] = rounded(core[(config["name"], config["chunk_steps"])], 0)
            runs.append(run)
            print(
                f"  {run['config']:>7s} x{run['clients']}: {run['env_steps_per_s']:>12,.0f} agent steps/s, "
                f"{run['env_steps_per_gateway_cpu_s']:>12,.0f} per gateway CPU-s (gateway CPU {run['gateway_cpu_pct']}%, "
                f"errors {run['errors']})",
                flush=True,
            )
        metrics = httpx.get(f"http://{HOST}:{gateway.http_port}/api/metrics", timeout=10).json()
        rss = proc_peak_rss_bytes(gateway.pid)
    counted = metrics["policies"][MODULE_ID]["num_env_steps_sampled_lifetime"]
    acked = int(sum(r["env_steps"] for r in runs)) + ENV_STEPS_PER_SAMPLE  # + the holder's message

    by_key = {(r["config"], r["clients"]): r for r in runs}
    lines = [
        f"one gateway ({MODULE_ID}: agents cart_*), training paused, {args.seconds:g} s per configuration, TCP; "
        f"agent steps counted by PONGs: {acked:,}, by the gateway (/api/metrics {MODULE_ID}): {counted:,}",
    ]
    targets, ratios = {}, {}
    for run in runs:
        line = (
            f"{run['config']:>7s} x{run['clients']}: {run['env_steps_per_s']:>12,.0f} agent steps/s, "
            f"{run['env_steps_per_gateway_cpu_s']:>12,.0f} per gateway CPU-s; core {run['core_steps_per_s']:>12,.0f}/s; "
            f"{run['agents']} chunk(s) of {run['chunk_steps']} steps, {run['bytes_per_message']:,} bytes/message; "
            f"gateway CPU {run['gateway_cpu_pct']}% (decode workers {run['decode_workers_cpu_pct']}%); "
            f"errors {run['errors']}" + (f" ({run['first_error']})" if run["first_error"] else "")
        )
        lines.append(line)
    for config in configs:
        if config["vs"] is None:
            continue
        run, ref = by_key[(config["name"], config["clients"])], by_key[config["vs"]]
        core_ref = core[("single", ENV_STEPS_PER_SAMPLE)]
        ratio = _ratio(ref["env_steps_per_s"], run["env_steps_per_s"])
        cpu_ratio = _ratio(ref["env_steps_per_gateway_cpu_s"], run["env_steps_per_gateway_cpu_s"])
        core_ratio = _ratio(core_ref, run["core_steps_per_s"])
        name = f"{config['name']} x{config['clients']}"
        ratios[name] = {"wall": rounded(ratio), "gateway_cpu": rounded(cpu_ratio), "core": rounded(core_ratio)}
        target = config.get("target", TARGET_INGEST_RATIO)
        ok = not math.isnan(ratio) and ratio <= target and run["errors"] == 0
        verdict = "(no target: the README's settings for 64 agents)"
        if target:
            targets[f"ingest {name} <= {target}x single-agent cost per step"] = ok
            verdict = f"target <= {target}x {'met' if ok else 'MISSED'}"
        lines.append(
            f"per env step cost, multi-agent {name} vs single-agent x{ref['clients']}: {ratio:.2f}x "
            f"(per gateway CPU-s {cpu_ratio:.2f}x, sans-I/O core {core_ratio:.2f}x): {verdict}"
        )
    lines.append(f"gateway peak RSS {rss / 2**20:,.0f} MiB (everything received is kept: training paused)")
    if args.profile:
        frame = frames[id(configs[2])][0]
        lines.append(f"cProfile of app.sansio.protocol.Session on one {configs[2]['name']} message (200 calls):")
        lines.extend(profile_core(frame).rstrip().splitlines())
    result = {
        "runs": runs,
        "ratios_single_over_multi": ratios,
        "steps_acked": acked,
        "steps_counted_by_gateway": counted,
        "gateway_peak_rss_bytes": rss,
        "errors": sum(r["errors"] for r in runs),
    }
    return lines, {"ingest": result, "targets": targets}


def _ratio(a: float, b: float) -> float:
    return a / b if a and b else float("nan")


# -- Learning ---------------------------------------------------------------------------


def scene_flags(agents: int) -> tuple[str, ...]:
    """The README's settings for `agents` sharing a policy in one scene: a request of about
    48 steps per agent (the barrier trains on every request of a lone client) and, from
    2,048 steps a request on, fewer passes over larger minibatches at a higher learning
    rate; one agent: the defaults."""
    steps = STEPS_PER_AGENT * agents
    if steps <= ENV_STEPS_PER_SAMPLE:
        return ()
    large = ("--ppo.update-epochs", "4", "--ppo.minibatch-size", "512", "--ppo.learning-rate", "0.005")
    return ("--env-steps-per-sample", str(steps), *(large if steps >= 2048 else ()))


def learn_once(agents: int, seed: int, args) -> dict:
    from rllink_clients.multi_agent import make_scene, run_scene
    from rllink_clients.rllink_client import RLlinkClient

    flags = () if args.defaults else scene_flags(agents)
    with running_gateway(*POLICY_FLAGS, "--seed", str(seed), *flags) as gateway:
        with RLlinkClient("tcp", HOST, gateway.tcp_port, timeout=120) as client:
            result = run_scene(
                client, make_scene(f"cartpole:{agents}"), target_return=args.target_return,
                max_env_steps=math.ceil(args.max_agent_steps / agents), max_seconds=args.max_seconds, seed=seed,
            )
        metrics = httpx.get(f"http://{HOST}:{gateway.http_port}/api/metrics", timeout=10).json()
    return {
        "agents": agents,
        "seed": seed,
        "flags": list(flags),
        "reached": result.reached_target,
        "seconds": round(result.seconds, 2),
        "agent_steps": result.agent_steps,
        "scene_steps": result.env_steps,
        "sent_steps": result.sent_steps,
        "episodes": result.episodes,
        "training_steps": metrics["num_training_steps"],
        "mean_return_last_20": rounded(result.mean_return(MODULE_ID), 1),
    }


def measure_learning(args) -> tuple[list[str], dict]:
    runs = []
    for agents in args.scenes:
        for seed in args.seeds:
            run = learn_once(agents, seed, args)
            runs.append(run)
            print(
                f"  cartpole:{agents} seed {seed}: {'reached' if run['reached'] else 'NOT reached'} "
                f"{args.target_return:g} in {run['seconds']:.1f} s, {run['agent_steps']:,} agent steps "
                f"({run['scene_steps']:,} scene steps), {run['training_steps']} training steps, "
                f"mean return {run['mean_return_last_20']}",
                flush=True,
            )
    lines = [
        f"CartPole-v1 to a mean return of {args.target_return:g} (last 20 episodes of {MODULE_ID}), "
        f"reference multi-agent client over TCP, fresh gateway per run, seeds {args.seeds}; medians "
        f"(a run that misses counts as its budget: {args.max_agent_steps:,} agent steps or {args.max_seconds:g} s)"
    ]
    medians = {}
    for agents in args.scenes:
        mine = [r for r in runs if r["agents"] == agents]
        medians[agents] = {
            key: statistics.median(r[key] for r in mine) for key in ("seconds", "agent_steps", "scene_steps", "training_steps")
        }
        medians[agents]["reached"] = sum(r["reached"] for r in mine)
        m = medians[agents]
        lines.append(
            f"{agents:>3d} agent(s): {m['reached']}/{len(mine)} reached; {m['seconds']:.1f} s "
            f"(min {min(r['seconds'] for r in mine):.1f}, max {max(r['seconds'] for r in mine):.1f}), "
            f"{m['agent_steps']:,.0f} agent steps, {m['scene_steps']:,.0f} scene steps, {m['training_steps']:.0f} training steps"
        )
    targets = {}
    many, one = max(args.scenes), min(args.scenes)
    ratio = float("nan")
    if many != one:
        ratio = medians[many]["seconds"] / medians[one]["seconds"] if medians[one]["seconds"] else float("nan")
        all_reached = all(r["reached"] for r in runs if r["agents"] in (one, many))
        ok = all_reached and ratio < TARGET_LEARN_RATIO
        targets[f"learn {many} agents < 1/3 of the wall time of {one}"] = ok
        lines.append(
            f"wall time to {args.target_return:g}, {many} agents / {one}: {ratio:.2f} "
            f"(speed-up {1 / ratio if ratio else float('nan'):.1f}x): target < {TARGET_LEARN_RATIO:.3f} "
            f"{'met' if ok else 'MISSED'}"
        )
    result = {
        "target_return": args.target_return,
        "runs": runs,
        "medians": {str(k): v for k, v in medians.items()},
        f"seconds_{many}_over_{one}": rounded(ratio),
    }
    return lines, {"learn": result, "targets": targets}


# -- Main -------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="ingest: sending window per configuration")
    parser.add_argument("--core-seconds", type=float, default=1.0, help="ingest: in-process core, per message kind")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--scenes", type=int, nargs="+", default=[1, 8, 64], help="agents per learning run")
    parser.add_argument("--target-return", type=float, default=450.0)
    parser.add_argument("--defaults", action="store_true", help="learning: every scene on the embedded defaults")
    parser.add_argument("--max-agent-steps", type=int, default=400_000, help="learning: give up on a run after this many")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="learning: give up on a run after this long")
    parser.add_argument("--parts", nargs="+", choices=["ingest", "learn"], default=["ingest", "learn"])
    parser.add_argument("--profile", action="store_true", help="ingest: cProfile the core on the 64-agent message")
    parser.add_argument("--quick", action="store_true", help="a smoke run (< 1 min); not the benchmark's figures")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.core_seconds, args.seeds = 0.5, 0.2, args.seeds[:1]
        args.target_return, args.max_seconds = min(args.target_return, 100.0), min(args.max_seconds, 10.0)
    raise_fd_limit(4096)

    lines = []
    if args.quick:
        lines.append(f"--quick smoke run: short windows, target {args.target_return:g}; NOT the benchmark's figures")
    result: dict = {"quick": args.quick, "targets": {}}
    for part, measure in (("ingest", measure_ingest), ("learn", measure_learning)):
        if part in args.parts:
            part_lines, part_result = measure(args)
            lines.extend(part_lines)
            result["targets"].update(part_result.pop("targets"))
            result.update(part_result)
    for name, ok in result["targets"].items():
        lines.append(f"target {name}: {'met' if ok else 'MISSED'}")
    emit("multi_agent", lines, result)


if __name__ == "__main__":
    main()
