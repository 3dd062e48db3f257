"""The command line as a person meets it: a `--help` that explains every flag in one
line with a readable default, and logs that never show the auth token, at any level.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from pydantic_settings import SettingsError
from websockets.sync.client import connect

from app.settings.config import Settings
from app.settings.logs import redact
from app.startup.cli import parse_command_line
from app.training.algorithms.ppo.config import PPOConfig

from .gateway_process import PING, PONG, ROOT, gateway_process
from .helpers import frame, wait_until

SECRET = "S3CRET-XYZ"
CONSOLE_SCRIPT = Path(sys.executable).parent / "rllink-gateway"


# --- --help ---


def run_help(*command: str) -> str:
    done = subprocess.run(
        [*command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def help_entries(help_text: str) -> dict[str, str]:
    """Each option of an argparse help text (`--host str`) and its description, unwrapped."""
    entries: dict[str, str] = {}
    current = None
    for line in help_text.splitlines():
        if line.startswith("  -"):
            invocation, *description = re.split(r"\s{2,}", line.strip(), maxsplit=1)
            current = invocation
            entries[current] = "".join(description)
        elif current is not None and line.startswith("   ") and line.strip():
            entries[current] = f"{entries[current]} {line.strip()}".strip()
        else:
            current = None
    return entries


def kebab(name: str) -> str:
    return name.replace("_", "-")


@pytest.fixture(scope="module")
def module_help() -> str:
    return run_help(sys.executable, "-m", "app")


def test_help_names_the_command_that_was_run(module_help):
    assert module_help.startswith("usage: python -m app [-h]")
    if not CONSOLE_SCRIPT.is_file():
        pytest.skip(f"the console script is not installed at {CONSOLE_SCRIPT}")
    assert run_help(str(CONSOLE_SCRIPT)).startswith("usage: rllink-gateway [-h]")


def test_every_option_has_a_one_line_description_and_a_readable_default(module_help):
    entries = help_entries(module_help)
    flags = {flag.split()[0].rstrip(",") for flag in entries}
    # Every setting has its flag (so the parsing below saw them all), PPO ones in kebab case after `ppo.`.
    expected = {f"--{kebab(name)}" for name in Settings.model_fields} | {f"--ppo.{kebab(name)}" for name in PPOConfig.model_fields}
    assert expected <= flags, sorted(expected - flags)
    assert "--decode-timeout-s" in flags

    for invocation, description in entries.items():
        if invocation == "-h, --help":
            assert description == "Show this help and exit."
            continue
        what, _, default = description.partition(" (default: ")
        assert what and default, f"{invocation}: no description or no default: {description!r}"
        assert what.endswith("."), f"{invocation}: {what!r}"
        assert not re.search(r"\.\s+[A-Z]", what), f"{invocation}: more than one sentence: {what!r}"
        assert default.endswith(")") and default[:-1].strip(), f"{invocation}: {description!r}"
    assert "(default: CPU cores - 1, at most 4)" in entries["--decode-workers int"]
    assert entries["--auth-token str"].endswith("(default: off)")
    assert entries["--ppo.target-kl float"].endswith("(default: off)")


def test_the_flags_the_help_shows_are_the_ones_read():
    settings = parse_command_line(
        ["--ppo.learning-rate", "0.01", "--no-ppo.norm-adv", "--decode-timeout-s", "3.5", "--tcp-port", "0"]
    )
    assert (settings.ppo.learning_rate, settings.ppo.norm_adv, settings.decode_timeout_s, settings.tcp_port) == (0.01, False, 3.5, 0)
    assert Settings().decode_timeout_s == 2.0
    with pytest.raises(SettingsError, match="unrecognized arguments: --ppo.learning_rate"):  # snake case is not a flag
        parse_command_line(["--ppo.learning_rate", "0.01"], cli_exit_on_error=False)


def test_help_has_no_machine_talk(module_help):
    for leftover in ("default factory", "ifdef", "<lambda>", "SecretStr"):
        assert leftover not in module_help
    assert not re.search(r"\b(None|null)\b", module_help), re.findall(r".*\b(?:None|null)\b.*", module_help)


# --- the token in the logs ---


def test_redact_hides_every_form_of_the_token_and_keeps_the_rest():
    assert redact('1.2.3.4:5 - "GET /api/metrics?limit=3&token=abc-123&x=1 HTTP/1.1" 200') == (
        '1.2.3.4:5 - "GET /api/metrics?limit=3&token=***&x=1 HTTP/1.1" 200'
    )
    assert redact("< authorization: Bearer abc.def") == "< authorization: Bearer ***"
    assert redact("'00000040{\"type\": \"PING\", \"token\": \"abc\"}'") == "'00000040{\"type\": \"PING\", \"token\": \"***\"}'"
    assert redact("{'token': 'abc', 'n': 2}") == "{'token': '***', 'n': 2}"
    assert redact('"WebSocket /rllink" [accepted]') == '"WebSocket /rllink" [accepted]'


def test_installing_the_redaction_twice_installs_it_once():
    script = (
        "import logging; from app.settings.logs import install_redaction\n"
        "install_redaction(); factory = logging.getLogRecordFactory(); install_redaction()\n"
        "assert logging.getLogRecordFactory() is factory\n"
        "assert factory is not logging.LogRecord\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def read_frame(sock: socket.socket) -> bytes:
    data = b""
    while len(data) < 8 or len(data) < 8 + int(data[:8]):
        chunk = sock.recv(4096)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    return data


def test_the_token_never_reaches_the_log_while_the_requests_do(tmp_path):
    with gateway_process(
        tmp_path / "checkpoints", tmp_path / "gateway.log", "--decode-workers", "0", log_level="debug", auth_token=SECRET
    ) as gateway:
        http, ws_url = f"http://127.0.0.1:{gateway.http_port}", f"ws://127.0.0.1:{gateway.http_port}/rllink"
        assert httpx.get(f"{http}/api/metrics", params={"token": SECRET}, timeout=30).status_code == 200
        assert httpx.get(f"{http}/api/metrics", headers={"Authorization": f"Bearer {SECRET}"}, timeout=30).status_code == 200
        with connect(f"{ws_url}?token={SECRET}") as ws:  # in the query: the access line and the debug handshake
            ws.send(PING)
            assert ws.recv(timeout=30) == PONG
        with connect(ws_url, additional_headers={"Authorization": f"Bearer {SECRET}"}) as ws:  # debug: the headers
            ws.send(PING)
            assert ws.recv(timeout=30) == PONG
        with connect(ws_url) as ws:  # debug: the frames
            ws.send(frame({"type": "PING", "token": SECRET}))
            assert ws.recv(timeout=30) == PONG
        with socket.create_connection(("127.0.0.1", gateway.tcp_port), timeout=30) as sock:
            sock.sendall(frame({"type": "PING", "token": SECRET}))
            assert read_frame(sock) == PONG

        # The lines of every request are out (so the log does hold them, redacted) ...
        wanted = (
            '"GET /api/metrics?token=*** HTTP/1.1" 200',
            '"WebSocket /rllink?token=***" [accepted]',
            "< GET /rllink?token=*** HTTP/1.1",
            "< authorization: Bearer ***",
            '"token": "***"',
        )
        def all_logged() -> bool:
            output = gateway.log_path.read_text(errors="replace")
            leaked = [line for line in output.splitlines() if SECRET in line]
            assert not leaked, leaked
            return all(line in output for line in wanted) and output.count(" disconnected (") >= 4

        wait_until(all_logged, timeout_s=60, what=f"the log lines {wanted} and four disconnections")
    # ... and, with the process stopped and its output complete, the token is nowhere.
    output = gateway.log_path.read_text(errors="replace")
    assert gateway.proc.returncode is not None
    assert SECRET not in output, [line for line in output.splitlines() if SECRET in line]
    assert output.count("token=***") >= 3


def test_help_ends_with_a_complete_game_config_that_the_gateway_reads(module_help, tmp_path):
    example = module_help[module_help.index("A complete config for a game build"):]
    config = tmp_path / "train.yaml"
    config.write_text(example.split("\n", 2)[2])  # the YAML after its title line
    settings = parse_command_line(["--config", str(config)])
    assert settings.num_envs == 8 and settings.max_env_steps == 2_000_000 and settings.bc_strength == 0.5
    assert settings.demos == Path("runner_demos.jsonl") and settings.env_path is not None
    assert [lesson.name for lesson in settings.env_params["goal_distance"].curriculum] == ["near", "far"]
