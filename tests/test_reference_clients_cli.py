"""The reference clients' command lines: every module the docs run with `python -m` runs
(or says in one line why it cannot, exiting non-zero), and a run stops at its env's own
target, or at its budget when the env has none.

Each client runs as a user runs it, `python -m rllink_clients.<module>` in a process of
its own; the gateway runs in this process (tests/helpers.py).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rllink_clients.choice_envs import MASKED_PICK_ENV_ID
from rllink_clients.gym_client import UnknownEnv, default_target_return, resolve_target

from .helpers import gateway_settings, running_gateway

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "clients" / "python" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
DASH_M = re.compile(r"-m rllink_clients\.(\w+)")
# README.md names these two as what runs "any gymnasium environment".
NAMED_AS_CLIENTS = {"gym_client", "thin_client"}
STEPS = 64  # env steps: a few short sample rounds (env_steps_per_sample below)


def client(module: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", f"rllink_clients.{module}", *args],
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def summary(done: subprocess.CompletedProcess) -> dict:
    assert done.stdout.strip(), f"no summary; exit {done.returncode}:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_module_the_docs_run_with_dash_m_has_a_command_line():
    modules = {name for page in PAGES for name in DASH_M.findall(page.read_text())} | NAMED_AS_CLIENTS
    assert {"cartpole", "gym_client", "thin_client", "pettingzoo", "multi_agent"} <= modules
    runs = {name: subprocess.Popen([sys.executable, "-m", f"rllink_clients.{name}", "--help"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for name in sorted(modules)}  # fmt: skip
    for name, process in runs.items():
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0 and f"usage: python -m rllink_clients.{name}" in out, (name, out, err)


def test_the_target_is_the_envs_own():
    assert default_target_return("CartPole-v1") == 450  # the reference client's (gymnasium registers 475)
    assert default_target_return("Acrobot-v1") == -100  # registered reward_threshold
    assert default_target_return("MountainCar-v0") == -110
    assert default_target_return("LunarLander-v3") == 200  # the spec only: box2d need not be installed
    assert default_target_return("Pendulum-v1") is None  # none registered: no target
    assert default_target_return(f"rllink_clients.choice_envs:{MASKED_PICK_ENV_ID}") is None
    assert resolve_target(-50.0, "Acrobot-v1") == -50 and resolve_target(None, "CartPole-v1") is None
    assert resolve_target("env", "Acrobot-v1") == -100
    for unknown in ("Nope-v0", "CartPole-v9", "no_such_module:Nope-v0"):
        with pytest.raises(UnknownEnv, match="unknown gymnasium env") as raised:
            default_target_return(unknown)
        assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--env", "Nope-v0"], "error: unknown gymnasium env 'Nope-v0'"),
        (["--env", "Acrobot-v1", "--port", "CLOSED"], "error: cannot reach a gateway at tcp://127.0.0.1:"),
    ],
    ids=["unknown-env", "no-gateway"],
)
def test_a_client_that_cannot_train_says_why_in_one_line(args, says):
    done = client("gym_client", *[str(closed_port()) if arg == "CLOSED" else arg for arg in args])
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert len(errors) == 1 and errors[0].startswith(says) and "Traceback" not in done.stderr, done.stderr


def test_a_wrong_token_is_one_line_and_exit_2(tmp_path):
    """A gateway with auth on refuses the token the client presents (as a launched game's
    `--rllink-token`): one line saying so, nothing trained."""
    with running_gateway(gateway_settings(tmp_path, auth_token="the-gateways-secret")) as gateway:
        done = client("gym_client", "--env", "CartPole-v1", "--rllink-port", str(gateway.tcp_port), "--rllink-token", "wrong")
        sampled = gateway.service.metrics.num_env_steps_sampled_lifetime
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr[-3000:]
    assert errors[0].startswith("error: the gateway refused the token: ") and "Traceback" not in done.stderr
    assert "wrong" not in done.stderr and sampled == 0


def test_gym_client_trains_an_env_without_a_target_to_its_budget_and_exits_0(tmp_path):
    with running_gateway(gateway_settings(tmp_path, env_steps_per_sample=32)) as gateway:  # no spaces: adopts Pendulum's
        done = client("gym_client", "--env", "Pendulum-v1", "--port", str(gateway.tcp_port), "--max-env-steps", str(STEPS))
    result = summary(done)
    assert done.returncode == 0, done.stderr[-3000:]
    assert result["target_return"] is None and not result["reached_target"] and result["env_steps"] >= STEPS


def test_thin_client_stops_at_its_budget_short_of_acrobots_registered_target_and_exits_1(tmp_path):
    with running_gateway(gateway_settings(tmp_path, env_steps_per_sample=32)) as gateway:
        done = client("thin_client", "--env", "Acrobot-v1", "--port", str(gateway.tcp_port), "--max-env-steps", str(STEPS))
    result = summary(done)
    assert done.returncode == 1, done.stderr[-3000:]  # a random policy scores about -500: far from -100
    assert result["target_return"] == -100 and not result["reached_target"] and result["env_steps"] >= STEPS


def test_the_games_set_up_installs_the_test_locks_pettingzoo_and_pygame_and_the_pettingzoo_page_names_it():
    games = [line.split("#")[0].strip() for line in (ROOT / "requirements" / "games.txt").read_text().splitlines()]
    packages = [line for line in games if line and not line.startswith("-")]
    assert "-c test.txt" in games and set(packages) == {"pettingzoo", "pygame-ce"}
    test_lock = (ROOT / "requirements" / "test.txt").read_text()
    assert all(re.search(rf"^{name}==\S+$", test_lock, re.M) for name in packages)  # the versions come from there
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert re.search(r"^\s*games\).*requirements/games\.txt", setup, re.M)
    assert "bash scripts/setup.sh games" in (ROOT / "docs" / "pettingzoo.md").read_text()


# The games' packages out of reach (a None in sys.modules makes `import` raise), then the
# PettingZoo client runs as `python -m rllink_clients.pettingzoo` would.
WITHOUT = """
import runpy, sys
sys.modules[sys.argv.pop(1)] = None
sys.argv[0] = "rllink_clients.pettingzoo"
runpy.run_module("rllink_clients.pettingzoo", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("missing", ["pettingzoo", "pygame"])
def test_the_pettingzoo_client_without_the_games_packages_says_how_to_install_them(missing):
    done = subprocess.run([sys.executable, "-c", WITHOUT, missing, "--env", "pettingzoo.classic.tictactoe_v3", "--print-spaces"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "bash scripts/setup.sh games" in done.stderr, done.stderr
