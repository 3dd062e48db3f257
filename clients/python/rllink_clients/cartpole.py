"""`python -m rllink_clients.cartpole`: train a gymnasium env (CartPole-v1 by default) through a running gateway.

The reference client's command line, for any gymnasium env whose spaces fit the gateway's
module (--env; `module:EnvId-vN` imports the module that registers it first). The same
command line runs as `python -m rllink_clients.gym_client`, and as `python -m
rllink_clients.thin_client` with --inference server by default.

    python -m rllink_clients.cartpole --transport tcp --port 5555 --target-return 450
    python -m rllink_clients.gym_client --env Acrobot-v1 --port 5555                 # to Acrobot's -100
    python -m rllink_clients.cartpole --transport ws --port 8000 --env Pendulum-v1 --max-seconds 60
    python -m rllink_clients.cartpole --inference server      # a thin client: the gateway acts
    python -m rllink_clients.cartpole --inference server --num-envs 8   # 8 envs, one batched GET_ACTION per step
    python -m rllink_clients.cartpole --record-demos played.jsonl      # also keep what it plays as demonstrations
    python -m rllink_clients.cartpole --evaluation-interval 5          # every 5th episode greedy (default: the gateway's)

It stops when the mean return of the last 20 training episodes (and of the last two
evaluation episodes, every 10th by default: greedy, never trained on) reaches the target: --target-return,
else 450 for CartPole-v1, else the env's registered reward_threshold (Acrobot-v1 -100,
MountainCar-v0 -110, LunarLander-v3 200), else none (Pendulum-v1): then it trains until
--max-env-steps or --max-seconds. Its last line is a JSON summary; it exits 0 at the target
or, with no target, at its budget; 1 at its budget short of a target; 2, with one line
saying why, when it cannot train (an unknown env, no gateway there, spaces that do not fit).

Launched by a gateway (`rllink-gateway --env-path "python -m rllink_clients.cartpole"`), it reads
the `--rllink-*` arguments (launch_args.py): it connects over TCP to the host and port given,
with the token given, seeds its env with --seed plus its env index, and trains until the
gateway stops it (no target unless --target-return is given). The time scale is ignored: the
env is stepped as fast as it goes.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

import gymnasium as gym

from rllink_clients.demos import DemoWriter
from rllink_clients.gym_client import TARGET_RETURNS, GetConfigRefused, RunResult, UnknownEnv, default_target_return, run
from rllink_clients.launch_args import parse_launch_args
from rllink_clients.rllink_client import GatewayUnreachable, RLlinkClient
from rllink_clients.thin_client import run_thin, run_thin_envs

log = logging.getLogger("rllink_clients")

PROG = "python -m rllink_clients.cartpole"


def parse_args(argv: list[str] | None = None, *, prog: str = PROG, inference: str = "local") -> argparse.Namespace:
    """The command line; `args.launched`: a gateway started this process (`--rllink-*` arguments)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0].replace(PROG, prog))
    parser.add_argument("--transport", choices=["tcp", "ws"], default="tcp")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, help="default: 5555 for tcp, 8000 for ws")
    parser.add_argument(
        "--env", default="CartPole-v1",
        help="gymnasium env id matching the gateway's spaces, or module:EnvId-vN to import the module that registers it "
        "(default CartPole-v1)",
    )
    cartpole = ", ".join(f"{env_id} {target:g}" for env_id, target in TARGET_RETURNS.items())
    parser.add_argument(
        "--target-return", type=float,
        help=f"stop at this mean return of 20 episodes (default: {cartpole}; else the env's registered reward_threshold, "
        "e.g. Acrobot-v1 -100, MountainCar-v0 -110; else none: train until --max-env-steps/--max-seconds and exit 0 "
        "there; none when launched by a gateway)",
    )
    parser.add_argument("--max-env-steps", type=int, help="stop after this many env steps")
    parser.add_argument("--max-seconds", type=float, help="stop after this long")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--num-envs", type=int, default=1,
        help="with --inference server: step this many envs together, one batched GET_ACTION per step",
    )
    parser.add_argument("--plain", action="store_true", help="send only the fields RLlib's reference client sends")
    parser.add_argument(
        "--inference", choices=["local", "server"], default=inference,
        help="local: act with the downloaded ONNX policy; server: a thin client, the gateway acts (GET_ACTION)",
    )
    parser.add_argument(
        "--record-demos", metavar="FILE",
        help="with --inference local: also write every chunk sent to FILE as demonstrations (docs/training.md)",
    )
    parser.add_argument(
        "--evaluation-interval", type=int, metavar="N",
        help="with --inference local: play every Nth episode greedily as an evaluation episode (reported apart, never "
        "trained on; 0: none); default: the gateway's SET_CONFIG evaluation_interval (a thin client's the gateway chooses)",
    )
    parser.add_argument("--headless", action="store_true", help="accepted and ignored: this simulator draws nothing")
    launch, rest = parse_launch_args(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(rest)
    args.token = launch.token
    args.launched = launch.launched
    if launch.launched:  # a gateway started it: its TCP port, a seed of its own, no target
        args.transport = "tcp"
        args.host = launch.host or args.host
        args.port = launch.port or args.port
        args.seed += launch.env_index or 0
    return args


def main(argv: list[str] | None = None, *, prog: str = PROG, inference: str = "local") -> int:
    """Run the command line (`prog` names it in --help and errors; `inference`: --inference's
    default); the exit status."""
    args = parse_args(argv, prog=prog, inference=inference)
    if args.record_demos and args.inference != "local":
        print("--record-demos records what the client itself plays: use it with --inference local", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        env_target = default_target_return(args.env)  # also: the env exists, before connecting
    except UnknownEnv as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.target_return is None and not args.launched:
        args.target_return = env_target
    _log_target(args)
    try:
        client = RLlinkClient.open(args.transport, args.host, args.port, token=args.token)
    except GatewayUnreachable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with client:
        try:
            result = _train(client, args)
        except GetConfigRefused as exc:
            print(f"cannot train {args.env} through this gateway: {exc}", file=sys.stderr)
            return 2
        except gym.error.Error as exc:  # the env is registered but cannot be made here (e.g. a missing package)
            print(" ".join(f"error: cannot make {args.env}: {exc}".split()), file=sys.stderr)
            return 2
        except ConnectionError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    summary = {
        "reached_target": result.reached_target, "target_return": args.target_return, "env_steps": result.env_steps,
        "episodes": result.episodes, "seconds": round(result.seconds, 2), "mean_return_last_20": round(result.mean_return, 1),
        "weights_seq_no": result.weights_seq_no,
        **({"evaluation_return_mean": round(result.evaluation_return_mean, 1)} if result.evaluations else {}),
    }
    print(json.dumps(summary))
    return 0 if result.reached_target or args.target_return is None else 1


def _log_target(args: argparse.Namespace) -> None:
    limits = " or ".join(f"--{name.replace('_', '-')} {value:g}" for name in ("max_env_steps", "max_seconds")
                         if (value := getattr(args, name)) is not None)
    if args.target_return is not None:
        log.info("%s: training to a mean return of %g over 20 episodes%s", args.env, args.target_return,
                 f" (or until {limits})" if limits else "")
    elif args.launched:
        log.info("%s: no target; training until the gateway stops it", args.env)
    else:
        log.info("%s: no target (none given, none registered); training until %s", args.env,
                 limits or "stopped: give --max-env-steps or --max-seconds to end it")


def _train(client: RLlinkClient, args: argparse.Namespace) -> RunResult:
    if args.inference == "server" and args.num_envs > 1:
        return run_thin_envs(
            client, args.env, args.num_envs, target_return=args.target_return, max_env_steps=args.max_env_steps,
            max_seconds=args.max_seconds, seed=args.seed,
        )
    if args.inference == "server":
        return run_thin(
            client, args.env, target_return=args.target_return, max_env_steps=args.max_env_steps,
            max_seconds=args.max_seconds, seed=args.seed,
        )
    if args.record_demos is None:
        return _run_local(client, args, None)
    with DemoWriter(args.record_demos) as demos:
        return _run_local(client, args, demos)


def _run_local(client: RLlinkClient, args: argparse.Namespace, demos: DemoWriter | None) -> RunResult:
    return run(
        client, args.env, target_return=args.target_return, max_env_steps=args.max_env_steps,
        max_seconds=args.max_seconds, seed=args.seed, plain=args.plain, record_demos=demos,
        evaluation_interval=args.evaluation_interval,
    )


if __name__ == "__main__":
    sys.exit(main())
