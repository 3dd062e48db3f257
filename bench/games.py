"""Games: a board or card game trained by self-play through the gateway, then evaluated against fixed players.

    python bench/games.py [--game connect_four|tictactoe|leduc] [--minutes 20] [--num-envs 8] [--clients 2] [--games 400]
                          [--rating-every 30] [--seed 0] [--transport tcp|ws]
                          [--lookahead-ratio 0.8 | --no-scripted-reference] [--no-mirror] [--board own|flat]
                          [--self-play JSON] [--ppo JSON] [--out-dir DIR]
                          [--gateway-args "--env-steps-per-sample 2000 ..."]

`--game tictactoe` and `--game leduc` (Leduc hold'em: needs `pip install rlcard`) train with
the plain league (`"self_play": {}`: no scripted player exists for them) and are evaluated
against their own fixed players: tic-tac-toe against the uniformly random legal player and
a perfect (minimax) one (rllink_clients.tictactoe; its target is the share of games not
lost), with the greedy policy's blunders counted over every line of the game; Leduc
against random play, an always-raise and an always-call bot (rllink_clients.leduc),
scored by the mean return a hand (the env's reward: chips won over the big blind).
`--no-mirror` leaves out the board's symmetries (Connect Four's mirror, tic-tac-toe's
rotations and reflections; Leduc has none). `--board flat` declares the board flat (`[84]`: read
by the MLPs alone), `--board own` in its own shape (`[6, 7, 2]`: a grid, read with a CNN);
by default the plain league's board is its own shape and the scripted league's flat, as
each measured best (bench/RESULTS.md, session 43). The model played is kept as
`<out-dir>/<module>.onnx`. What follows describes the default, Connect Four.

First the one-step-lookahead player (wins when it can, blocks when it must, else random;
rllink_clients.connect_four) plays 1,000 games against the uniformly random legal player,
seats alternating, and its score p gives its fixed rating, 1000 + 400 log10(p / (1 - p)).
Then a fresh gateway (`python -m app`, its embedded defaults but for one module) in a
subprocess:

    --policies '{"c4": {"observation_space": {"type": "box", "shape": [84]},
                        "action_space": {"type": "discrete", "n": 7},
                        "action_masking": true,
                        "ppo": {"entropy_floor": 0, "gamma": 0.9, "learning_rate": 0.001},
                        "self_play": {"play_against_random_ratio": 0.2, "play_against_latest_ratio": 0.0,
                                      "scripted_references": {"lookahead": {"elo": <that rating>, "play_ratio": 0.8}}},
                        "symmetries": [<the board mirrored left to right>]}}'
    --policy-mapping '{"player_*": "c4"}'

(the league: the lookahead player in 80% of the versions, the random reference in 20%; no
entropy floor: the scripted player keeps the games varied; each move is trained on as
played and mirrored (`--no-mirror`: as played only); measured best of the leagues tried,
bench/RESULTS.md) or, with `--no-scripted-reference`, `"self_play": {}` (snapshots and latest weights,
played at temperature 2, and the random reference, an entropy floor of 0.1: the defaults) and the
board in its own shape, `[6, 7, 2]` (a grid, read with a CNN), and the PettingZoo reference
client (`rllink_clients.pettingzoo`, what
`python -m rllink_clients.pettingzoo --env pettingzoo.classic.connect_four_v3 --num-envs 8
--scripted lookahead=rllink_clients.connect_four:lookahead_player` runs) in this process,
playing `connect_four_v3` (the board in the module's shape, the legal-move mask sent)
with seats swapped each game against the opponent the league draws for each version, for
`--minutes`, and by default one more such client beside it (`--clients 2`): `--clients N`
runs N-1 of them, each a process of its own (`python -m rllink_clients.pettingzoo ...
--max-seconds`, its log in `<out-dir>/client<i>.log`), each with `--num-envs` boards. One
client keeps about one core busy and waits while the learner trains on its message; two
use this machine's second core and play while the other waits.
Every `--rating-every` seconds the module's self-play rating (and what else /api/policies
says of its league) is sampled into `<out-dir>/games_rating.csv`, plotted to `games_rating.png`
when matplotlib is installed (it is not locked: the plot is skipped with a message otherwise).

Then the final policy plays `--games` games against each of three fixed players, seats
alternating (the learner moves first in even games), nothing sent to the gateway: the
uniformly random legal player, the one-step-lookahead player, and one the league never
plays (lookahead_centre: the same, but its random moves favour the centre columns). Each
evaluation is run greedily (the distribution's mode) and sampled. Win/draw/loss are
reported per seat, each win rate with its standard error (sqrt(p (1 - p) / n): 1.5 points
at 95% over 200 games a seat, 2.2 over 100).
Last, the greedy policy's one-move tactics (rllink_clients.connect_four.tactics): on the
positions of 1,000 games of lookahead and random moves, the share of wins on the board it
takes, of single threats it blocks (each also by the kind of line: horizontal, vertical,
diagonal), and of moves it keeps from under the other player's winning cell.

Targets (issue 35, 20 minutes): at least 95% wins against random and 70% against the
lookahead player, in both seats (greedy). The lookahead player is in the training league
(a scripted reference) unless `--no-scripted-reference`.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import csv
import functools
import gzip
import importlib
import json
import math
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
from _common import HOST, emit, running_gateway  # noqa: E402

from rllink_clients.connect_four import COLUMNS, ROWS, lookahead_centre_player, lookahead_player, tactics  # noqa: E402
from rllink_clients.leduc import always_call_player, always_raise_player  # noqa: E402
from rllink_clients.multi_agent import GatewayConfig, ModulePolicies, Opponent, SceneResult, run_scene  # noqa: E402
from rllink_clients.pettingzoo import AECScene, evaluate, load_env, random_legal, seatings_for  # noqa: E402
from rllink_clients.rllink_client import RLlinkClient  # noqa: E402
from rllink_clients.tictactoe import blunders, minimax_player, most_wins_against_random  # noqa: E402


@dataclass(frozen=True)
class GameSpec:
    """One board game of the benchmark: its env, module, fixed players and targets."""

    title: str
    env: str
    module: str
    observation_shape: tuple[int, ...]  # the env's own: a board is a grid [H, W, C]
    actions: int
    players: dict[str, Callable[..., int]]  # the fixed players the final policy is evaluated against (each takes rng=)
    targets: dict[str, float]  # greedy win rate (or no-loss rate, for the names in `no_loss`) per player, both seats
    symmetries: list[dict[str, list[int]]]  # the board's symmetries, given with --mirror (the default)
    no_loss: tuple[str, ...] = ()  # players whose target is the share of games not lost
    scripted: str | None = None  # "module:function" of the scripted reference the league may play
    analysis: Callable[[Callable[[Any, Any], int]], dict[str, Any]] | None = None  # greedy player -> figures
    analysis_lines: Callable[[dict[str, Any]], list[str]] | None = None  # figures -> what is printed of them
    chips: bool = False  # a card game: scored by the mean return a hand, its targets the mean to beat


def _mirror_c4() -> dict[str, list[int]]:
    """The Connect Four board mirrored left to right (docs/training.md, "Symmetries"): image element
    (r, c, k) is the observation's (r, 6 - c, k), image action c is column 6 - c."""
    return {
        "observation": np.arange(ROWS * COLUMNS * 2).reshape(ROWS, COLUMNS, 2)[:, ::-1].ravel().tolist(),
        "action": list(range(COLUMNS))[::-1],
    }


def _square_symmetries() -> list[dict[str, list[int]]]:
    """The 7 rotations and reflections of the tic-tac-toe board but the identity: cell (r, c) is action 3r + c."""
    cells = np.arange(9).reshape(3, 3)
    images = [np.rot90(cells, k) for k in range(4)] + [np.rot90(cells.T, k) for k in range(4)]
    symmetries = []
    for image in images[1:]:
        action = image.ravel().tolist()  # image action i is the original's action[i]
        observation = [2 * cell + k for cell in action for k in range(2)]
        symmetries.append({"observation": observation, "action": action})
    return symmetries


def blunders_both_ways(greedy: Callable[[Any, Any], int]) -> dict[str, Any]:
    """Tic-tac-toe's exhaustive analysis of the greedy policy: against a minimax player's lines and against any line."""
    return {lines: blunders(greedy, opponent_moves=lines) for lines in ("best", "all")}


def blunders_lines(analysis: dict[str, Any]) -> list[str]:
    """blunders_both_ways' figures, a line for each kind of opponent line; and the most any
    player wins against random play (the win-rate target is reachable up to it)."""
    first, second = most_wins_against_random("first"), most_wins_against_random("second")
    safe = most_wins_against_random("second", never_losing=True)
    ceiling = (
        f"the most any player wins against random play: moving first {first:.1%}, moving second {second:.1%} "
        f"({safe:.1%} never losing to perfect play)"
    )
    return [ceiling] + [
        f"greedy policy against {'a minimax player' if lines == 'best' else 'any player'}, every line: "
        + "  ".join(
            f"moving {seat} {c['blunders']} of {c['positions']} positions lose value, {c['losing']} to a loss" for seat, c in counts.items()
        )
        for lines, counts in analysis.items()
    ]


def tactics_lines(counts: dict[str, dict[str, Any]]) -> list[str]:
    """Connect Four's one-move tactics of the greedy policy (rllink_clients.connect_four.tactics),
    the wins and blocks also by the kind of line."""

    def share(c: dict[str, Any]) -> str:
        return f"{c['chosen'] / max(1, c['positions']):.1%}"

    def by_line(c: dict[str, Any]) -> str:
        lines = c.get("lines", {})
        return "; " + ", ".join(f"{line} {share(n)} of {n['positions']}" for line, n in lines.items()) if lines else ""

    shares = "  ".join(f"{kind} {c['chosen']} of {c['positions']} ({share(c)}{by_line(c)})" for kind, c in counts.items())
    return [f"greedy policy's one-move tactics (positions of lookahead and random play): {shares}"]


# The envs without PettingZoo's checking wrappers (order, bounds, illegal moves): every player here
# moves among the legal moves, and the wrappers took about a quarter of a client's time
# (1.25x the moves in 2 minutes without them; docs/pettingzoo.md).
GAMES = {
    "connect_four": GameSpec(
        "Connect Four", "pettingzoo.classic.connect_four_v3:raw_env", "c4", (ROWS, COLUMNS, 2), COLUMNS,
        {"random": functools.partial(random_legal, n=COLUMNS), "lookahead": lookahead_player, "lookahead_centre": lookahead_centre_player},
        {"random": 0.95, "lookahead": 0.70}, [_mirror_c4()], scripted="rllink_clients.connect_four:lookahead_player",
        analysis=tactics, analysis_lines=tactics_lines,
    ),
    "tictactoe": GameSpec(
        "Tic-tac-toe", "pettingzoo.classic.tictactoe_v3:raw_env", "ttt", (3, 3, 2), 9,
        {"random": functools.partial(random_legal, n=9), "minimax": minimax_player}, {"random": 0.95, "minimax": 1.0}, _square_symmetries(),
        no_loss=("minimax",), analysis=blunders_both_ways, analysis_lines=blunders_lines,
    ),
    "leduc": GameSpec(
        "Leduc hold'em", "pettingzoo.classic.leduc_holdem_v4:raw_env", "leduc", (36,), 4,
        {"random": functools.partial(random_legal, n=4), "always_raise": always_raise_player, "always_call": always_call_player},
        {"always_raise": 0.0, "always_call": 0.0}, [], chips=True,
    ),
}
SCRIPTED = "lookahead"  # the scripted reference's name in the league
SCRIPTED_LEAGUE = {"play_against_random_ratio": 0.2, "play_against_latest_ratio": 0.0}  # and the lookahead player's share
RATING_GAMES = 1_000  # games of the lookahead player against random that fix its rating


# -- Training, sampled ratings, evaluation ------------------------------------------------


def league_row(base_url: str, module: str, started: float) -> dict:
    """The module's rating and league as /api/policies shows them now, flattened for the CSV."""
    (policy,) = [p for p in httpx.get(f"{base_url}/api/policies", timeout=30).json() if p["module_id"] == module]
    league = policy.get("self_play") or {}
    row = {
        "seconds": round(time.monotonic() - started, 1),
        "weights_seq_no": policy.get("weights_seq_no"),
        "env_steps_trained": policy.get("num_env_steps_trained_lifetime"),
        "elo": None if league.get("elo") is None else round(league["elo"], 1),
        "rated_games": league.get("rated_games"),
    }
    for record in league.get("records") or []:  # per opponent and seat, where the gateway reports them
        name = f"{record.get('opponent')}@{record.get('seat')}"
        row[f"{name} W/D/L"] = f"{record.get('win')}/{record.get('draw')}/{record.get('loss')}"
    return row


def score_against_random(game_spec: GameSpec, player: Opponent, games: int, seed: int) -> float:
    """`player`'s score (wins + draws / 2) / games against the uniformly random legal player, seats alternating."""
    env, rng, score = load_env(game_spec.env), np.random.default_rng(seed), 0.0
    for game in range(games):
        env.reset(seed=seed + game)
        ours = env.possible_agents[game % 2]
        for agent in env.agent_iter():
            obs, reward, terminated, truncated, _ = env.last()
            if terminated or truncated:
                action = None
                if agent == ours:  # its final reward: 1 won, 0 drew, -1 lost
                    score += (np.sign(reward) + 1) / 2
            elif agent == ours:
                action = player(obs["observation"], obs["action_mask"])
            else:
                action = random_legal(obs["observation"], obs["action_mask"], rng=rng, n=game_spec.actions)
            env.step(action)
    return score / games


def elo_against_random(score: float) -> float:
    """The rating a score against the random reference (rated 1000) gives, clipped to 1%..99%."""
    p = min(max(score, 0.01), 0.99)
    return 1000.0 + 400.0 * float(np.log10(p / (1 - p)))


def train(
    game: GameSpec,
    client: RLlinkClient,
    base_url: str,
    minutes: float,
    every_s: float,
    seed: int,
    num_envs: int,
    scripted: dict[str, Opponent],
    extra_clients: list[list[str]],
    out_dir: Path,
) -> tuple[SceneResult, list[dict], list[dict]]:
    """Self-play for `minutes` on `num_envs` boards side by side, sampling the league every
    `every_s` seconds; `extra_clients` (PettingZoo CLI command lines) play beside it, their
    logs in `out_dir`/client<i>.log. Returns this client's result, the league samples and
    the extra clients' summaries."""
    scenes = [AECScene(load_env(game.env)) for _ in range(num_envs)]
    result: dict[str, SceneResult] = {}
    failure: list[BaseException] = []

    def play() -> None:
        try:
            result["scene"] = run_scene(
                client, scenes, max_seconds=minutes * 60, seed=seed,
                seatings=seatings_for(None, scenes[0].possible_agents), scripted=scripted,
            )
        except BaseException as exc:  # noqa: BLE001 -- reported by the main thread
            failure.append(exc)

    started, rows, summaries = time.monotonic(), [], []
    out_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        logs = [stack.enter_context(open(out_dir / f"client{i + 1}.log", "w")) for i in range(len(extra_clients))]
        others = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True) for command, log in zip(extra_clients, logs)]
        player = threading.Thread(target=play, name="self-play", daemon=True)
        player.start()
        while player.is_alive():
            player.join(timeout=every_s)
            rows.append(league_row(base_url, game.module, started))
            print("  " + "  ".join(f"{k} {v}" for k, v in rows[-1].items()), flush=True)
        if failure:  # this client stopped early: the others need not play out their --max-seconds
            for process in others:
                process.terminate()
                process.wait(timeout=30)
            raise failure[0]
        for process in others:
            out, _ = process.communicate(timeout=300)
            if process.returncode != 0:
                raise RuntimeError(f"a PettingZoo client exited with {process.returncode}: {shlex.join(process.args)}")
            summaries.append(json.loads(out.strip().splitlines()[-1]))
    return result["scene"], rows, summaries


def client_commands(
    game: GameSpec, count: int, port: int, transport: str, minutes: float, seed: int, num_envs: int, scripted: bool
) -> list[list[str]]:
    """Command lines of `count` PettingZoo reference clients (separate processes) playing beside this one."""
    spec = ["--scripted", f"{SCRIPTED}={game.scripted}"] if scripted else []
    return [
        [
            sys.executable, "-m", "rllink_clients.pettingzoo", "--env", game.env, "--num-envs", str(num_envs),
            "--transport", transport, "--host", HOST, "--port", str(port), "--max-seconds", str(minutes * 60),
            "--seed", str(seed + 1000 * (i + 1)), *spec,
        ]
        for i in range(count)
    ]


def evaluations(
    game: GameSpec, client: RLlinkClient, games: int, seed: int, scripted: dict[str, Opponent], out_dir: Path
) -> tuple[dict[str, dict[str, dict[str, Any]]], dict[str, Any] | None]:
    """The final policy against each fixed player, greedy and sampled: W/D/L and the mean return per seat; and
    the game's exhaustive analysis of the greedy policy, where it has one. The policy's model
    goes to `out_dir`/<module>.onnx."""
    config = GatewayConfig.from_set_config(client.request({"type": "GET_CONFIG"}))
    policies = ModulePolicies(config, np.random.default_rng(seed), scripted)  # the opponent module may be scripted now
    state = client.request({"type": "GET_STATE"})
    policies.load(state)
    (out_dir / f"{game.module}.onnx").write_bytes(gzip.decompress(base64.b64decode(state["onnx_files"][game.module])))
    players = {
        name: functools.partial(player, rng=np.random.default_rng(seed + 1 + i)) for i, (name, player) in enumerate(game.players.items())
    }
    results: dict = {}
    for name, player in players.items():
        for mode, explore in (("greedy", False), ("sampled", True)):
            scene = AECScene(load_env(game.env))
            returns: dict[str, list[float]] = {}
            counts = evaluate(scene, policies, player, games, explore=explore, seed=seed, returns=returns)
            mean_return = {seat: round(float(np.mean(values)), 3) for seat, values in returns.items()}
            results.setdefault(name, {})[mode] = {"by_seat": counts, "mean_return": mean_return}
    if game.analysis is None:
        return results, None

    def greedy(obs: Any, mask: Any) -> int:
        return int(policies.act(game.module, [obs], [mask], explore=False)[0].env_action)

    return results, game.analysis(greedy)


def win_rate(counts: dict[str, int]) -> float:
    return counts["win"] / max(1, sum(counts.values()))


def standard_error(rate: float, counts: dict[str, int]) -> float:
    """Of a rate over these games (binomial)."""
    return math.sqrt(rate * (1 - rate) / max(1, sum(counts.values())))


def write_ratings(game: GameSpec, rows: list[dict], out_dir: Path) -> list[str]:
    """The CSV, and the plot if matplotlib is installed; lines saying where they went."""
    out_dir.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    with open(out_dir / "games_rating.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    lines = [f"rating over time: {out_dir / 'games_rating.csv'}"]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [*lines, "plot skipped: matplotlib is not installed (pip install matplotlib)"]
    points = [(row["seconds"] / 60, row["elo"]) for row in rows if row.get("elo") is not None]
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.plot([m for m, _ in points], [e for _, e in points], marker=".")
    axes.set_xlabel("minutes of self-play")
    axes.set_ylabel(f"{game.module} self-play rating (/api/policies)")
    axes.set_title(f"{game.title} by self-play")
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(out_dir / "games_rating.png", dpi=100)
    return [*lines, f"plot: {out_dir / 'games_rating.png'}"]


def load_player(spec: str) -> Callable[..., int]:
    """The function a "module:function" names."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def target_rate(game: GameSpec, name: str, counts: dict[str, int]) -> float:
    """What `name`'s target counts: the win rate, or for a player in `no_loss` the share of games not lost."""
    if name in game.no_loss:
        return 1.0 - counts["loss"] / max(1, sum(counts.values()))
    return win_rate(counts)


def chips_line(game: GameSpec, name: str, mode: str, mean_return: dict[str, float]) -> str:
    """A card game's line: the learner's mean return a hand (Leduc: big blinds, the env's reward) per seat and over
    both, and the target (more than it)."""
    overall = float(np.mean(list(mean_return.values())))
    line = f"  vs {name:12} {mode:7} " + "  ".join(f"{seat} {chips:+.3f}" for seat, chips in mean_return.items())
    line += f"  both seats {overall:+.3f} a hand"
    if mode == "greedy" and name in game.targets:
        line += f"  target above {game.targets[name]:+g}: {'met' if overall > game.targets[name] else 'MISSED'}"
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", choices=sorted(GAMES), default="connect_four")
    parser.add_argument("--minutes", type=float, default=20.0, help="self-play training time")
    parser.add_argument("--num-envs", type=int, default=8, help="boards played side by side (one model call per move of all), per client")
    parser.add_argument(
        "--clients", type=int, default=2, help="client processes at once (this one, clients-1 PettingZoo CLIs), each --num-envs boards"
    )
    parser.add_argument("--gateway-args", default="", help="more flags for the gateway (settings for board games), one string")
    parser.add_argument("--games", type=int, default=400, help="evaluation games against each fixed player (half in each seat)")
    parser.add_argument("--rating-every", type=float, default=30.0, help="seconds between two samples of the rating")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--transport", choices=["tcp", "ws"], default="tcp")
    parser.add_argument(
        "--lookahead-ratio", type=float, default=0.8, help="share of versions the scripted lookahead player is the opponent"
    )
    parser.add_argument(
        "--self-play", type=json.loads, default={}, help="more self_play settings of the module (a JSON object), e.g. the ratios"
    )
    parser.add_argument("--ppo", type=json.loads, default={}, help="more ppo settings of the module (a JSON object)")
    parser.add_argument(
        "--no-scripted-reference", action="store_true", help="train with the plain league (`self_play: {}`): no scripted lookahead player"
    )
    parser.add_argument(
        "--no-mirror", dest="mirror", action="store_false", help="train on the moves as played only (default: the board's symmetries too)"
    )
    parser.add_argument(
        "--board", choices=["own", "flat"],
        help="declare the board in its own shape (a grid where 4 or more a side: a CNN) or flat (the MLPs alone); "
        "default: own for the plain league, flat with the scripted player",
    )
    parser.add_argument("--out-dir", type=Path, help="where the CSV and PNG go (default: a new temporary directory)")
    args = parser.parse_args()
    game = GAMES[args.game]
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="rllink-games-"))

    module = game.module
    scripted_league = game.scripted is not None and not args.no_scripted_reference
    board = args.board or ("flat" if scripted_league else "own")
    shape = [math.prod(game.observation_shape)] if board == "flat" else list(game.observation_shape)
    policy = {
        module: {
            "observation_space": {"type": "box", "shape": shape},
            "action_space": {"type": "discrete", "n": game.actions},
            "action_masking": True,
            "self_play": {},
        }
    }
    scripted, league_line = {}, "the plain league (no scripted reference)"
    if scripted_league:
        player = load_player(game.scripted)
        score = score_against_random(game, functools.partial(player, rng=np.random.default_rng(args.seed + 4)), RATING_GAMES, args.seed)
        elo = round(elo_against_random(score), 1)
        policy[module]["self_play"] = {
            **SCRIPTED_LEAGUE, "scripted_references": {SCRIPTED: {"elo": elo, "play_ratio": args.lookahead_ratio}}
        }
        # No entropy floor: the scripted player keeps the games varied; gamma 0.9: a win now is worth clearly more than
        # one later; learning rate 1e-3: 3e-3 moved the policy by a KL of 0.1-0.2 an update (docs/pettingzoo.md).
        policy[module]["ppo"] = {"entropy_floor": 0, "gamma": 0.9, "learning_rate": 0.001}
        scripted = {SCRIPTED: functools.partial(player, rng=np.random.default_rng(args.seed + 5))}
        league_line = (
            f"league with the scripted {SCRIPTED} player (play_ratio {args.lookahead_ratio:g}; it scored {score:.3f} "
            f"against random in {RATING_GAMES} games: rated {elo})"
        )
        print(league_line, flush=True)
    if args.mirror and game.symmetries:
        policy[module]["symmetries"] = game.symmetries
    policy[module]["self_play"].update(args.self_play)
    policy[module]["ppo"] = {**policy[module].get("ppo", {}), **args.ppo}
    flags = (
        "--seed", str(args.seed), "--policies", json.dumps(policy), "--policy-mapping", json.dumps({"player_*": module}),
        *shlex.split(args.gateway_args),
    )
    with running_gateway(*flags) as gateway:
        base_url = f"http://{HOST}:{gateway.http_port}"
        port = gateway.tcp_port if args.transport == "tcp" else gateway.http_port
        with RLlinkClient(args.transport, HOST, port, timeout=300) as client:
            extra = client_commands(
                game, args.clients - 1, port, args.transport, args.minutes, args.seed, args.num_envs, bool(scripted)
            )
            scene, rows, others = train(
                game, client, base_url, args.minutes, args.rating_every, args.seed, args.num_envs, scripted, extra, out_dir
            )
        with RLlinkClient(args.transport, HOST, port, timeout=300) as client:
            results, analysis = evaluations(game, client, args.games, args.seed, scripted, out_dir)
    file_lines = write_ratings(game, rows, out_dir)
    if analysis is not None:
        file_lines = [*game.analysis_lines(analysis), *file_lines]

    moves = scene.agent_steps + sum(other["agent_steps"] for other in others)
    games = scene.scene_episodes + sum(other["scene_episodes"] for other in others)
    lines = [
        f"{game.title} by self-play for {args.minutes:g} min over {args.transport}, {args.clients} x {args.num_envs} boards"
        f"{' ' + args.gateway_args if args.gateway_args else ''}"
        f"{', with its symmetries' if args.mirror and game.symmetries else ''}, the board {shape}: {moves:,} moves, "
        f"{games:,} games, {scene.weights_seq_no} versions, rating {rows[-1]['elo']}; {league_line}",
        f"evaluation: {args.games} games per line, seats alternating (the first seat moves first); the learner's W/D/L",
    ]
    summary = {}
    for name, modes in results.items():
        for mode, result in modes.items():
            summary[f"{name}_{mode}"] = result
            if game.chips:
                lines.append(chips_line(game, name, mode, result["mean_return"]))
                continue
            by_seat = result["by_seat"]
            rates = {seat: round(target_rate(game, name, counts), 3) for seat, counts in by_seat.items()}
            kind = "no loss" if name in game.no_loss else "wins"
            met = all(rate >= game.targets.get(name, 2) for rate in rates.values())
            target = ""
            if mode == "greedy" and name in game.targets:
                target = f"  target {kind} {game.targets[name]:.0%}: {'met' if met else 'MISSED'}"
            scores = (
                f"{seat} {c['win']}/{c['draw']}/{c['loss']} ({kind} {rates[seat]:.1%} ±{standard_error(rates[seat], c):.1%})"
                for seat, c in by_seat.items()
            )
            lines.append(f"  vs {name:9} {mode:7} " + "  ".join(scores) + target)
            result["target_rate"] = rates
    emit(
        "games",
        [*lines, *file_lines],
        {
            "game": args.game,
            "minutes": args.minutes,
            "num_envs": args.num_envs,
            "clients": args.clients,
            "gateway_args": args.gateway_args,
            "league": policy[module]["self_play"],
            "ppo": policy[module]["ppo"],
            "mirror": args.mirror,
            "observation_shape": policy[module]["observation_space"]["shape"],
            "transport": args.transport,
            "moves": moves,
            "games_played": games,
            "versions": scene.weights_seq_no,
            "rating": rows[-1]["elo"],
            "ratings": [[row["seconds"], row["elo"]] for row in rows],
            "evaluation": summary,
            "analysis": analysis,
            "out_dir": str(out_dir),
        },
    )


if __name__ == "__main__":
    main()
