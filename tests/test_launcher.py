"""The gateway launches its simulators (`--env-path`): real `python -m app` processes start
real CartPole reference clients that connect with the `--rllink-*` arguments and train; a
game killed is started again, its output kept under the run folder; at the budget every
game is stopped, the models are on disk and the gateway exits 0. A build that cannot run,
or no game at all, is refused at start in one line.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.startup.cli import parse_command_line
from app.startup.launcher import LaunchError, build_command, game_arguments, restart_delay, shown
from rllink_clients.launch_args import LaunchArgs, parse_launch_args

from .gateway_process import ROOT, free_port, gateway_process
from .helpers import wait_until

SECRET = "L4UNCH-S3CRET"
CARTPOLE = f"{shlex.quote(sys.executable)} -m rllink_clients.cartpole"
BUDGET = 40_000  # env steps: room to kill a game and see it come back before the run ends


def started_pids(log: str, index: int) -> list[int]:
    """The process ids game `index` was started with, in order, from the gateway's log."""
    return [int(pid) for pid in re.findall(rf"game {index} started \(pid (\d+)\)", log)]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.e2e
@pytest.mark.slow  # ~35 s: two simulators train 40,000 env steps
def test_launched_cartpoles_train_a_killed_one_comes_back_and_the_budget_ends_the_run(tmp_path):
    run_dir = tmp_path / "runs" / "launch"
    log_path = tmp_path / "gateway.log"
    flags = (
        "--runs-dir",
        str(tmp_path / "runs"),
        "--run-id",
        "launch",
        "--decode-workers",
        "0",
        "--env-path",
        CARTPOLE,
        "--num-envs",
        "2",
        "--time-scale",
        "20",
        "--max-env-steps",
        str(BUDGET),
        "--train-batch-size",
        "1000",
        "--env-args",
        '["--seed", "7"]',
    )
    with gateway_process(run_dir / "checkpoints", log_path, *flags, auth_token=SECRET) as gateway:
        games = run_dir / "games"
        # Both connect (with the token: auth is on) and train: their progress lines show versions.
        wait_until(
            lambda: (
                all(" env steps 500 " in (games / f"{i}.log").read_text() for i in range(2) if (games / f"{i}.log").exists())
                and len(list(games.glob("*.log"))) == 2
            ),
            timeout_s=120,
            what="both games to train",
        )
        first = started_pids(log_path.read_text(), 0)[0]
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: len(started_pids(log_path.read_text(), 0)) == 2, timeout_s=60, what="game 0 to start again")
        assert gateway.proc.wait(timeout=600) == 0, gateway.log_tail()
    log = log_path.read_text()
    assert re.search(r"game 0 exited with code -9 after [\d.]+ s: restart 1 of 5 in 1 s; its output: .*games/0\.log", log), log[-3000:]
    # The restarted game trained too: its log holds both starts, the second one's progress after it.
    game0 = (games / "0.log").read_text()
    assert "start 2: " in game0 and " env steps 500 " in game0.split("start 2: ")[1], game0[-2000:]
    assert "--rllink-env-index 1" in (games / "1.log").read_text()
    # The budget ended the run: one summary line, the models on disk, no game left running.
    assert f"budget spent (max_env_steps {BUDGET} reached): stopping" in log
    summary = re.search(
        r"run ended \(max_env_steps \d+ reached\): env steps trained default_policy (\d+) "
        r"\(weights_seq_no (\d+)\) in [\d.]+ s; models in (\S+)/<module>/latest\.onnx",
        log,
    )
    assert summary is not None, log[-3000:]
    assert int(summary[1]) >= BUDGET and int(summary[2]) >= BUDGET // 1000
    assert Path(summary[3]) == (run_dir / "models").resolve()
    assert (run_dir / "models" / "default_policy" / "latest.onnx").stat().st_size > 0
    assert "games stopped in" in log
    pids = started_pids(log, 0) + started_pids(log, 1)
    assert len(pids) == 3
    wait_until(lambda: all(gone(pid) for pid in pids), timeout_s=30, what="every game process to be gone")
    # The token went to the games, never to a log.
    assert SECRET not in log and "--rllink-token ***" in log
    assert all(SECRET not in (games / f"{i}.log").read_text() for i in range(2))


def run_gateway(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    """`python -m app` with these flags, on free ports, to its end."""
    command = [sys.executable, "-m", "app", "--http-port", str(free_port()), "--tcp-port", str(free_port())]
    command += ["--runs-dir", str(tmp_path / "runs"), "--run-id", "r", "--decode-workers", "0", *flags]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def start_fails(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    """`python -m app` with these flags, expected to refuse to start."""
    done = run_gateway(tmp_path, *flags)
    assert done.returncode == 2, done.stdout + done.stderr
    return done


SHELL_GAME = """#!/bin/sh
# A game that ignores SIGTERM, as does the child it starts: only SIGKILL ends them.
echo "$@" > "$(dirname "$0")/args.txt"
trap '' TERM
sleep 1000 &
echo $! > "$(dirname "$0")/child.pid"
wait
"""


@pytest.mark.e2e
@pytest.mark.slow  # a gateway serving for 3 s
def test_a_script_gets_its_arguments_in_order_and_is_killed_with_its_child_when_it_ignores_sigterm(tmp_path):
    game = tmp_path / "game.sh"
    game.write_text(SHELL_GAME)
    game.chmod(0o755)
    done = run_gateway(
        tmp_path,
        "--env-path",
        str(game),
        "--headless",
        "--time-scale",
        "2.5",
        "--max-seconds",
        "3",
        "--env-stop-grace-s",
        "1",
        "--",
        "--level",
        "2",
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    port = re.search(r"TCP\s+127\.0\.0\.1:(\d+)", output)[1]
    expected = f"--headless --rllink-host 127.0.0.1 --rllink-port {port} --rllink-time-scale 2.5 --rllink-env-index 0 --level 2"
    assert (tmp_path / "args.txt").read_text().strip() == expected
    assert re.search(r"games stopped in [\d.]+ s \(1 killed after 1 s\)", output), output[-3000:]
    child = int((tmp_path / "child.pid").read_text())
    wait_until(lambda: gone(child), timeout_s=30, what="the game's child to be gone")
    assert (tmp_path / "runs" / "r" / "games" / "0.log").read_text().startswith("--- ")


@pytest.mark.e2e
@pytest.mark.slow  # three gateway processes that refuse to start
def test_a_build_that_does_not_exist_or_cannot_run_is_refused_at_start_in_one_line(tmp_path):
    missing = tmp_path / "build" / "game.x86_64"
    done = start_fails(tmp_path, "--env-path", str(missing))
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "cannot start" in line]
    assert len(lines) == 1 and f"{missing} does not exist" in lines[0], done.stderr
    assert "Traceback" not in done.stderr

    not_executable = tmp_path / "game.sh"
    not_executable.write_text("#!/bin/sh\n")
    done = start_fails(tmp_path, "--env-path", f"{not_executable} --level 2")
    assert f"{not_executable} is not executable (chmod +x {not_executable})" in done.stderr, done.stderr

    done = start_fails(tmp_path, "--env-path", "no-such-game-program-xyz")
    assert "'no-such-game-program-xyz' is not a program on PATH" in done.stderr, done.stderr


@pytest.mark.e2e
def test_num_envs_0_is_refused_by_the_settings(tmp_path):
    done = start_fails(tmp_path, "--env-path", CARTPOLE, "--num-envs", "0")
    assert "cannot start: invalid settings: num_envs: Input should be greater than or equal to 1" in done.stderr, done.stderr


# --- the pieces, without processes ---


def test_one_yaml_file_holds_the_launch_and_the_budget_and_a_lone_double_dash_adds_game_args(tmp_path):
    config = tmp_path / "train.yaml"
    config.write_text(
        "run_id: game\nenv_path: builds/game.x86_64\nnum_envs: 8\ntime_scale: 20\nheadless: true\n"
        "headless_args: [-batchmode, -nographics]\nenv_args: [--level, '2']\nmax_env_steps: 500000\nmax_seconds: 3600\n"
    )
    settings = parse_command_line(["--config", str(config), "--", "--difficulty", "hard"])
    assert (settings.env_path, settings.num_envs, settings.time_scale, settings.headless) == ("builds/game.x86_64", 8, 20, True)
    assert settings.headless_args == ["-batchmode", "-nographics"]
    assert settings.env_args == ["--difficulty", "hard"]  # a flag: it overrides the file's
    assert parse_command_line(["--config", str(config)]).env_args == ["--level", "2"]
    assert (settings.max_env_steps, settings.max_seconds) == (500_000, 3600)
    per_module = parse_command_line(["--max-env-steps", '{"default_policy": 3000}'])
    assert per_module.max_env_steps == {"default_policy": 3000}
    with pytest.raises(ValueError, match="max_env_steps names nope: not a trained module; modules: default_policy"):
        parse_command_line(["--max-env-steps", '{"nope": 3000}'])
    with pytest.raises(ValueError, match="env_path needs the TCP bridge"):
        parse_command_line(["--env-path", "game", "--no-tcp-enabled"])


def test_the_launch_arguments_round_trip_and_the_token_is_never_shown():
    argv = ["game", "--headless", *game_arguments("127.0.0.1", 5555, 3, 20.0, SECRET), "--level", "2"]
    launch, rest = parse_launch_args(argv[1:])
    assert launch == LaunchArgs(host="127.0.0.1", port=5555, token=SECRET, time_scale=20.0, env_index=3)
    assert launch.launched and not parse_launch_args(["--level", "2"])[0].launched
    assert rest == ["--headless", "--level", "2"]
    assert parse_launch_args(["--rllink-port=6000", "--rllink-env-index=0"])[0] == LaunchArgs(port=6000, env_index=0)
    assert "--rllink-token" not in game_arguments("h", 1, 0, 1.0)
    assert SECRET not in shown(argv) and "--rllink-token *** --rllink-time-scale 20" in shown(argv)
    with pytest.raises(SystemExit):
        parse_launch_args(["--rllink-port", "0"])


def test_a_command_with_arguments_is_split_and_its_program_checked(tmp_path):
    assert build_command(f"{sys.executable} -m rllink_clients.cartpole --env 'CartPole-v1'") == [
        sys.executable,
        "-m",
        "rllink_clients.cartpole",
        "--env",
        "CartPole-v1",
    ]
    with pytest.raises(LaunchError, match="is a folder"):
        build_command(str(tmp_path))
    assert [restart_delay(n) for n in (1, 2, 3, 6, 7, 50)] == [1, 2, 4, 30, 30, 30]
