"""The Godot kit (clients/godot/) in its real runtime: Debian's headless Godot 3.2
(`godot3-server`) runs the CartPole example project against a real gateway.

- Thin mode over TCP (the gateway acts), local inference (the addon's GDScript MLP runs
  each SET_STATE model) and non-blocking agents (several carts, as an HTML5 export runs
  them) each reach a mean return of 150 over 20 episodes, and the gateway's metrics
  show it served and trained on exactly what the game sent.
- Evaluation episodes (SET_CONFIG's evaluation_interval): local inference plays every Nth
  episode with the mode and marks its chunks `evaluation`, which the gateway counts apart
  (a third of the episodes at N = 3); in thin mode the agent sees the gateway's own choice
  (EPISODE_STARTED's `evaluation`) as RLlinkAgent.is_evaluation_episode.
- The WebSocket transport speaks the same messages.
- Auth: the right token trains; a wrong or missing one reaches the game as an error
  with the gateway's code (`unauthorized`), and the example exits 3 saying so. A gateway
  limit (`too_many_episodes`) reaches it the same way; bad arguments exit 2, a spent
  budget 1, an unreachable gateway 3.
- A connection cut mid-training: the addon reconnects and training goes on.
- TLS with a pinned self-signed certificate; a certificate not trusted is a clear error.
- The addon's GDScript ONNX runtime computes what onnxruntime computes on the
  gateway's exported models (PPO's Gemm/Tanh, Flatten, SAC's actor, and a masked
  model's Sub/Mul/Add, forbidden logits included), and refuses an image model's CNN
  pointing to thin mode.
- Memory (a module with model.use_lstm): the runtime runs a recurrent model's LSTM step
  (Slice, Gemm, Add, Sigmoid, Tanh, Mul, Concat; state_in in, state_out out) as
  onnxruntime does over an episode's steps, the state fed back; local inference trains
  CartPole with it, every chunk carrying state_in (zeros at an episode's start, the state
  carried on across samples and model versions).
- Exploration noise (SET_CONFIG's action_noise; tools/noise_run.gd plays the local session
  against a canned gateway, a Box model whose samples are their N(0, 1) draws): "pink"
  draws stay N(0, 1) but drift over an episode (lag-1 correlation above 0.75, still
  related 100 steps on), are drawn anew at each episode's start, and go on through steps
  played with the mode; "white" draws are new each step and, as before, none is drawn for
  a step played with the mode; the chunks' log-probs are the samples' (gaussian and
  squashed_gaussian).
- Action masks (RLlinkAgent.get_action_mask()): the example's masked-pick game, where
  half the items are forbidden each step and taking one ends the run, learns in thin
  and local mode with no forbidden action taken; the masks travel in GET_ACTION (thin)
  and in the chunks (local), each the one its step's action was chosen under; a mask
  for a module without action_masking is a clear error in both modes.
- Heuristic play and demonstrations (RLlinkAgent's inference "heuristic" and
  record_demos_path): the example's scripted controllers play; with a gateway each
  decision reaches it as LOG_ACTION (the gateway serves no action and counts every step),
  and every episode is also appended to the demonstrations file, with or without a
  gateway, which the gateway's own loader (app.training.demos.load_demos) takes with the
  steps and returns the game printed, masks included; a file that cannot be written stops
  the example (exit 3) naming it.

Each run works on a copy of the example project in tmp_path (Godot writes .import/ into
a project and user data under XDG_DATA_HOME, both kept out of the repository and $HOME).
Skipped when godot3-server is missing (Debian: apt-get install -y godot3-server).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from app.schemas import SetConfig
from app.settings.policies import Module, PolicySet
from app.spaces.models import BoxSpace, DictSpace, DiscreteSpace, MultiDiscreteSpace
from app.training.algorithms.ppo.config import PPOConfig
from app.training.algorithms.ppo.onnx_head import export_onnx
from app.training.demos import load_demos
from app.training.onnx_export import tempered_policy
from app.training.policy import ActorCritic
from app.training.policy_state import set_state_payload

from .helpers import (
    CARTPOLE,
    RunningGateway,
    TcpProxy,
    gateway_settings,
    models_loaded_line,
    one_version_many_requests_settings,
    running_gateway,
    wait_until,
)

KIT = Path(__file__).resolve().parent.parent / "clients" / "godot"
GODOT = shutil.which("godot3-server")

pytestmark = pytest.mark.skipif(GODOT is None, reason="no godot3-server: apt-get install -y godot3-server")

TARGET = 150  # random play: 22
MAX_SECONDS = 180  # the example's own budget: it exits 1 when spent
RUN_TIMEOUT_S = 240  # a hung Godot (a script that does not parse runs an empty scene forever) fails here


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A fresh copy of the example project with the addon in it, as a game would hold it."""
    root = tmp_path_factory.mktemp("godot")
    copy = root / "example"
    shutil.copytree(KIT / "example", copy, ignore=shutil.ignore_patterns("addons", ".import", "*.import"))
    shutil.copytree(KIT / "addons" / "rllink", copy / "addons" / "rllink")
    return copy


def godot_env(project: Path) -> dict[str, str]:
    """Godot's user data and settings under the copy, not in $HOME; a locale name Godot
    knows (it prints an error for "C")."""
    home = project.parent / "userdata"
    return {**os.environ, "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_CACHE_HOME": str(home / "cache"), "LANG": "en_US.UTF-8", "LC_ALL": "en_US.UTF-8"}


def cartpole(
    project: Path, port: int, *args: str, target: float = TARGET, max_seconds: float = MAX_SECONDS
) -> subprocess.CompletedProcess:
    command = [GODOT, "--path", str(project), "--", "--host", "127.0.0.1", "--port", str(port),
               "--target-return", str(target), "--max-seconds", str(max_seconds), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=godot_env(project))
    print(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}")
    return result


def metrics(gateway: RunningGateway, token: str | None = None) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{gateway.base_url}/api/metrics", headers=headers, timeout=30).raise_for_status().json()


def settled_metrics(gateway: RunningGateway, steps: int, token: str | None = None) -> dict:
    """/api/metrics once the gateway has taken in the game's last messages and its
    disconnect (the game exits right after writing its last END_EPISODE)."""

    def settled() -> dict | None:
        m = metrics(gateway, token)
        received = m["num_env_steps_sampled_lifetime"] + m["num_env_steps_evaluated_lifetime"]
        return m if received >= steps and m["serving"]["open_episodes"] == 0 else None

    return wait_until(settled, 30, f"the gateway to count {steps} env steps and no open episode")


def reached(result: subprocess.CompletedProcess) -> dict:
    """The example's last line: reached the target: mean return M >= T after E episodes, S env steps."""
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "SCRIPT ERROR" not in result.stderr, result.stderr
    line = [line for line in result.stdout.splitlines() if line.startswith("reached the target")][-1]
    words = line.replace(",", "").split()
    return {"mean": float(words[5]), "episodes": int(words[9]), "env_steps": int(words[11])}


def evaluated(result: subprocess.CompletedProcess) -> dict:
    """The example's evaluation line (the episodes its agents flagged is_evaluation_episode):
    evaluation: E episodes, S env steps, mean return R; zeros where none was played."""
    lines = [line for line in result.stdout.splitlines() if line.startswith("evaluation: ")]
    if not lines:
        return {"episodes": 0, "env_steps": 0}
    words = lines[-1].replace(",", "").split()
    return {"episodes": int(words[1]), "env_steps": int(words[3])}


# -- Training -------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.slow
def test_the_godot_cartpole_trains_in_thin_mode_over_tcp(project, tmp_path):
    with running_gateway(gateway_settings(tmp_path, evaluation_interval=10)) as gateway:
        result = cartpole(project, gateway.tcp_port)
        run = reached(result)
        after = settled_metrics(gateway, run["env_steps"])
    assert run["mean"] >= TARGET
    assert "inference: thin, transport: tcp" in result.stdout
    # The gateway played every 10th episode as an evaluation one and said so in
    # EPISODE_STARTED: the agent's is_evaluation_episode flagged exactly those.
    evaluation = evaluated(result)
    assert evaluation["episodes"] == run["episodes"] // 10 == after["num_evaluation_episodes_lifetime"] >= 1
    assert evaluation["env_steps"] == after["num_env_steps_evaluated_lifetime"] > 0
    # The gateway chose every action, built the episodes from what the game sent, and
    # trained on them (all but the evaluation ones): the counts match the game's exactly.
    serving = after["serving"]
    assert serving["actions_served_total"] == run["env_steps"]
    assert after["num_env_steps_sampled_lifetime"] == run["env_steps"] - evaluation["env_steps"]
    assert after["num_episodes_lifetime"] == run["episodes"] - evaluation["episodes"]
    assert serving["episodes_started_total"] == run["episodes"]
    ended = serving["episodes_ended"]
    assert ended.get("terminated", 0) + ended.get("truncated", 0) == run["episodes"] and "disconnect" not in ended
    assert after["frames_received"]["GET_ACTION"] == run["env_steps"]
    assert after["frames_received"]["END_EPISODE"] == run["episodes"]
    assert after["num_training_steps"] >= 1 and after["weights_seq_no"] >= 1
    assert after["num_env_steps_trained_lifetime"] > 0
    assert after["errors"] == {} and after["connections_total"] == {"tcp": 1}


def test_local_inference_loads_each_model_once_however_many_requests_bring_it(project, tmp_path):
    """SAC answers every request with its latest version, which outlasts many requests of 50
    env steps (none comes before learning_starts): the addon loads only a model it does not run
    (a 256x256 SAC model takes it 18 ms to load)."""
    settings = one_version_many_requests_settings(tmp_path)
    with running_gateway(settings) as gateway:
        result = cartpole(project, gateway.tcp_port, "--inference", "local", "--max-env-steps", "1500", target=1e9)
        sent = metrics(gateway)["num_env_steps_sampled_lifetime"]
    assert "SCRIPT ERROR" not in result.stderr, result.stderr
    loaded, last_version = models_loaded_line(result.stdout)
    requests = sent // 50
    assert requests >= 29 and 1 <= loaded <= last_version + 1 < requests, (loaded, last_version, requests)


@pytest.mark.e2e
@pytest.mark.slow
def test_the_godot_cartpole_trains_with_local_inference(project, tmp_path):
    with running_gateway(gateway_settings(tmp_path, evaluation_interval=3)) as gateway:
        result = cartpole(project, gateway.tcp_port, "--inference", "local")
        run = reached(result)
        after = metrics(gateway)
    assert "inference: local" in result.stdout
    # The policy ran in GDScript: the gateway served no action, yet trained on the
    # experience, which came in whole EPISODES_AND_GET_STATE batches of 500 steps.
    assert after["serving"]["actions_served_total"] == 0
    sampled, evaluated_steps = after["num_env_steps_sampled_lifetime"], after["num_env_steps_evaluated_lifetime"]
    received = sampled + evaluated_steps
    assert 0 < received <= run["env_steps"] and received % 500 == 0
    assert after["frames_received"]["EPISODES_AND_GET_STATE"] == received // 500
    # evaluation_interval 3: the game played its 3rd, 6th, ... episode with the mode, and
    # each chunk of those said evaluation, which the gateway counted apart and never
    # trained on. It received the episodes of every batch sent (the game's first ones):
    # a third of those that ended are evaluation ones.
    evaluation = evaluated(result)
    assert evaluation["episodes"] == run["episodes"] // 3 >= 1
    assert 0 < evaluated_steps <= evaluation["env_steps"] and sampled > 0
    received_episodes = after["num_episodes_lifetime"] + after["num_evaluation_episodes_lifetime"]
    assert after["num_evaluation_episodes_lifetime"] == received_episodes // 3 >= 1
    assert after["weights_seq_no"] >= 1 and after["num_env_steps_trained_lifetime"] > 0
    assert after["errors"] == {}


@pytest.mark.e2e
@pytest.mark.slow
def test_several_non_blocking_agents_train_as_an_html5_export_runs_them(project, tmp_path):
    """--async: no agent waits inside a tick for its action (a browser cannot block):
    each asks, the game goes on, and the action is applied when it has come."""
    with running_gateway(gateway_settings(tmp_path)) as gateway:
        result = cartpole(project, gateway.tcp_port, "--envs", "3", "--async")
        run = reached(result)
        after = settled_metrics(gateway, run["env_steps"])
    assert "envs: 3, async" in result.stdout
    # Every episode the game finished ended so at the gateway (the client closes
    # gracefully: nothing in flight is lost); the two carts still playing at the end had
    # theirs ended by the disconnect, at most 500 steps each.
    serving = after["serving"]
    ended = serving["episodes_ended"]
    assert ended.get("terminated", 0) + ended.get("truncated", 0) == run["episodes"]
    assert ended.get("disconnect", 0) == 2
    assert run["env_steps"] <= serving["actions_served_total"] <= run["env_steps"] + 2 * 500
    assert after["connections_total"] == {"tcp": 1}  # three carts, one connection
    assert after["weights_seq_no"] >= 1 and after["errors"] == {}


@pytest.mark.e2e
def test_the_websocket_transport_speaks_the_same_messages(project, tmp_path):
    """Over the gateway's WebSocket (the transport of HTML5 exports). Godot 3.2's desktop
    WebSocketClient writes a frame's header and payload apart without TCP_NODELAY, so a
    round trip costs a delayed ACK (~40 ms): a short run, to the step budget (exit 1)."""
    with running_gateway(gateway_settings(tmp_path, auth_token="ws-secret")) as gateway:
        result = cartpole(project, gateway.http_port, "--transport", "ws", "--async", "--token", "ws-secret",
                          "--max-env-steps", "30")
        after = metrics(gateway, "ws-secret")
    assert result.returncode == 1, result  # the budget, not an error
    assert "budget spent before the target" in result.stdout and "transport: ws" in result.stdout
    assert after["connections_total"] == {"ws": 1}
    assert after["serving"]["actions_served_total"] >= 30
    assert after["serving"]["episodes_ended"].get("terminated", 0) >= 1
    assert after["errors"] == {}


# -- Auth and errors ----------------------------------------------------------------------

TOKEN = "godot-secret-7"


@pytest.mark.e2e
def test_with_auth_on_the_right_token_trains_and_a_wrong_or_missing_one_is_a_clear_error(project, tmp_path):
    with running_gateway(gateway_settings(tmp_path, auth_token=TOKEN)) as gateway:
        wrong = cartpole(project, gateway.tcp_port, "--token", "not-the-token")
        missing = cartpole(project, gateway.tcp_port)
        right = cartpole(project, gateway.tcp_port, "--token", TOKEN, target=50)  # past random play (22): it trains
        after = metrics(gateway, TOKEN)
    for refused in (wrong, missing):
        # The gateway's ERROR frame reached the game as gateway_error(code, message).
        assert refused.returncode == 3, refused
        assert "error: the gateway refused us: [unauthorized]" in refused.stderr
        assert "token" in refused.stderr and "(request PING)" in refused.stderr
        assert "reached the target" not in refused.stdout
    assert "not-the-token" not in wrong.stdout + wrong.stderr  # never echoed
    reached(right)
    assert after["weights_seq_no"] >= 1 and after["serving"]["actions_served_total"] > 0
    assert after["errors"] == {"unauthorized": 2}


@pytest.mark.e2e
def test_a_gateway_limit_reaches_the_game_as_an_error_it_handles(project, tmp_path):
    """Three carts on one connection, two open episodes allowed per connection."""
    with running_gateway(gateway_settings(tmp_path, max_open_episodes_per_connection=2)) as gateway:
        result = cartpole(project, gateway.tcp_port, "--envs", "3")
        after = metrics(gateway)
    assert result.returncode == 3, result
    assert "error: the gateway refused us: [too_many_episodes]" in result.stderr
    assert "(request START_EPISODE)" in result.stderr and "max_open_episodes_per_connection" in result.stderr
    assert after["errors"].get("too_many_episodes", 0) >= 1


def test_exit_codes_say_bad_arguments_and_an_unreachable_gateway_apart(project):
    bad = cartpole(project, 5555, "--inference", "remote")
    assert bad.returncode == 2, bad
    assert "--inference is thin, local or heuristic" in bad.stderr and "usage:" in bad.stderr
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        free_port = placeholder.getsockname()[1]  # closed again below: nothing listens there
    unreachable = cartpole(project, free_port, max_seconds=2)
    assert unreachable.returncode == 3, unreachable
    assert "error: cannot talk to the gateway: [connection_closed] cannot connect to" in unreachable.stderr
    assert "retrying in" in unreachable.stdout  # it did try again before giving up


# -- Reconnection ----------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.slow
def test_a_connection_cut_mid_training_is_reconnected_and_training_goes_on(project, tmp_path):
    with running_gateway(gateway_settings(tmp_path)) as gateway:
        proxy = TcpProxy(gateway.tcp_port, cut_after=100_000)  # about 450 thin steps in
        try:
            result = cartpole(project, proxy.port)
        finally:
            proxy.close()
        after = metrics(gateway)
    run = reached(result)
    assert proxy.cut.is_set() and proxy.connections >= 2
    assert "rllink: the connection to 127.0.0.1" in result.stdout and "rllink: reconnected to" in result.stdout
    assert "reconnects 1" in result.stdout  # the progress lines count it
    # The gateway ended the episode open on the cut connection as truncated by the
    # disconnect; the game went on with a new one, and the gateway trained.
    assert after["serving"]["episodes_ended"].get("disconnect", 0) == 1
    assert after["weights_seq_no"] >= 1
    assert after["serving"]["actions_served_total"] >= run["env_steps"] - 1


# -- TLS -------------------------------------------------------------------------------------


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


@pytest.mark.e2e
@pytest.mark.slow
def test_tls_with_a_pinned_self_signed_certificate(project, tmp_path):
    cert, key = self_signed(tmp_path, "gateway")
    other, _ = self_signed(tmp_path, "other")
    settings = gateway_settings(tmp_path, tls_certfile=cert, tls_keyfile=key)
    with running_gateway(settings) as gateway:
        # Godot 3's mbedtls checks DNS names only: the certificate's "localhost", not the IP.
        # A mean of 50 (random play: about 22) shows versions coming back over TLS; how well the
        # policy learns is the other tests' to show.
        pinned = cartpole(project, gateway.tcp_port, "--tls-cert", str(cert), "--tls-hostname", "localhost", target=50)
        untrusted = cartpole(project, gateway.tcp_port, "--tls-cert", str(other), "--tls-hostname", "localhost",
                             max_seconds=20)
        plain = cartpole(project, gateway.tcp_port, max_seconds=2)  # no TLS: the bridge does not answer plain RLlink
    reached(pinned)
    assert untrusted.returncode == 3 and "[tls_error]" in untrusted.stderr and "not trusted" in untrusted.stderr
    assert "retrying" not in untrusted.stdout  # a certificate problem is not worth another try
    assert plain.returncode == 3 and "[connection_closed]" in plain.stderr


# -- The addon's ONNX runtime ------------------------------------------------------------------


def _models() -> dict[str, tuple[bytes, list[int]]]:
    """The gateway's exports with random weights: CartPole's (Gemm, Tanh; logits), a Box
    policy on 2x3 observations (Flatten; mean and log std), SAC's squashed-Gaussian
    actor (Relu, Mul, Add, Concat), and a gSDE actor's exploring SET_STATE model (its mean
    with a drawn noise, and a second output without it)."""
    import torch

    from app.training.algorithms.sac.networks import SquashedGaussianActor
    from app.training.algorithms.sac.onnx_head import export_onnx as export_sac_onnx

    torch.manual_seed(0)
    cartpole_policy = ActorCritic(BoxSpace(shape=(4,)), DiscreteSpace(n=2), (64, 64))
    box_policy = ActorCritic(BoxSpace(shape=(2, 3)), BoxSpace(shape=(2,), low=-1.0, high=1.0), (32, 16))
    sac_actor = SquashedGaussianActor(BoxSpace(shape=(3,)), BoxSpace(shape=(1,), low=-2.0, high=2.0), (16, 16))
    gsde_actor = SquashedGaussianActor(BoxSpace(shape=(3,)), BoxSpace(shape=(2,), low=-1.0, high=1.0), (16,), gsde_log_std_init=-0.5)
    with torch.no_grad():  # weights far from the initial near-zero outputs, so the comparison says something
        for parameter in [*cartpole_policy.parameters(), *box_policy.parameters(), *sac_actor.parameters(), *gsde_actor.parameters()]:
            parameter.uniform_(-0.5, 0.5)
    theta = gsde_actor.exploration_noise(np.random.default_rng(2))
    return {
        "cartpole": (export_onnx(cartpole_policy, 3), [4]),
        "box": (export_onnx(box_policy, 4, input_name="onnx::Gemm_0"), [2, 3]),
        "sac": (export_sac_onnx(sac_actor, 5), [3]),
        "gsde_exploring": (export_sac_onnx(gsde_actor, 5, exploration_noise=theta), [3]),
    }


@pytest.mark.parametrize("name", ["cartpole", "box", "sac", "gsde_exploring"])
def test_the_gdscript_mlp_runtime_computes_what_onnxruntime_computes(project, tmp_path, name):
    model, shape = _models()[name]
    observations = np.random.default_rng(1).uniform(-3, 3, (32, *shape)).astype(np.float32)
    result = run_onnx(project, tmp_path, model, observations, "x".join(map(str, shape)))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    meta = tagged(lines, "META")[0]
    outputs = np.array(tagged(lines, "OUT"))

    noise_free = np.array(tagged(lines, "NOISE_FREE"))

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    expected = session.run(None, {session.get_inputs()[0].name: observations})
    assert meta["input_name"] == session.get_inputs()[0].name
    assert meta["output_name"] == session.get_outputs()[0].name
    assert meta["metadata"]["weights_seq_no"] in {"3", "4", "5"}
    assert outputs.shape == expected[0].shape
    np.testing.assert_allclose(outputs, expected[0], rtol=1e-5, atol=1e-5)
    # Explore off (run(obs, mask, true)): a gSDE exploring model's noise-free output, as onnxruntime
    # computes it; models without one have none.
    assert meta["noise_free_output"] == ("action_dist_inputs_noise_free" if len(expected) == 2 else "")
    if len(expected) == 2:
        np.testing.assert_allclose(noise_free, expected[1], rtol=1e-5, atol=1e-5)
        assert np.abs(noise_free - outputs).max() > 1e-3  # the noise is there in output 0
    else:
        assert len(noise_free) == 0


def run_onnx(project: Path, tmp_path: Path, model: bytes, observations: np.ndarray, *extra: str) -> subprocess.CompletedProcess:
    """tools/onnx_run.gd on the model and observations (extra: a shape, masks.json)."""
    model_path, obs_path = tmp_path / "model.onnx", tmp_path / "obs.json"
    model_path.write_bytes(model)
    obs_path.write_text(json.dumps([o.ravel().tolist() for o in observations]))
    command = [GODOT, "--path", str(project), "-s", "res://tools/onnx_run.gd", "--", str(model_path), str(obs_path), *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=godot_env(project))


def tagged(lines: list[str], tag: str) -> list:
    """The JSON after `tag` on each of tools/onnx_run.gd's lines that begin with it (META, OUT, STATE, NOISE_FREE)."""
    return [json.loads(line[len(tag) + 1 :]) for line in lines if line.startswith(f"{tag} ")]


@pytest.mark.parametrize(
    ("action_space", "temperature"),
    [(DiscreteSpace(n=6), 1.0), (MultiDiscreteSpace(nvec=[3, 4]), 1.0), (DiscreteSpace(n=6), 2.0)],
    ids=["discrete", "multi_discrete", "discrete_tempered"],
)
def test_the_gdscript_runtime_computes_masked_logits_as_onnxruntime_does(project, tmp_path, action_space, temperature):
    """A masked model (second input action_mask; Sub, Mul, Add): every logit matches, the
    forbidden ones (about -1e8, a multiple of 8 in float32) too; also as a self-play opponent
    at temperature 2 (one Mul more: SelfPlayConfig.opponent_temperature)."""
    import torch

    torch.manual_seed(0)
    policy = ActorCritic(BoxSpace(shape=(5,)), action_space, (32, 16))
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.uniform_(-0.5, 0.5)
    model = export_onnx(policy, 6, action_masking=True)
    model = model if temperature == 1.0 else tempered_policy(model, temperature)
    rng = np.random.default_rng(2)
    observations = rng.uniform(-3, 3, (32, 5)).astype(np.float32)
    width = policy.num_dist_inputs
    masks = (rng.random((32, width)) < 0.5).astype(np.float32)
    starts = np.concatenate([[0], np.cumsum(getattr(action_space, "nvec", [width]))[:-1]])
    masks[np.arange(32)[:, None], starts[None, :]] = 1.0  # each sub-action keeps a choice
    masks[0] = 1.0  # nothing forbidden
    masks_path = tmp_path / "masks.json"
    masks_path.write_text(json.dumps(masks.astype(int).tolist()[:-1] + [[]]))  # [] (the last): all allowed

    result = run_onnx(project, tmp_path, model, observations, str(masks_path))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    meta = tagged(lines, "META")[0]
    outputs = np.array(tagged(lines, "OUT"))
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    masks[-1] = 1.0
    expected = session.run(None, {"obs": observations, "action_mask": masks})[0]
    assert meta["mask_input_name"] == "action_mask" and meta["mask_width"] == width
    assert outputs.shape == expected.shape
    assert (expected[masks == 0] < -9e7 / temperature).all() and (masks == 0).sum() > 50
    np.testing.assert_allclose(outputs, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("image", ["image", "dict"])
def test_the_gdscript_runtime_refuses_an_image_model_and_points_to_thin_mode(project, tmp_path, image):
    pixels = BoxSpace(shape=(3, 10, 10), low=0, high=255, dtype="uint8")
    space = pixels if image == "image" else DictSpace(spaces={"camera": pixels, "position": BoxSpace(shape=(2,))})
    model = export_onnx(ActorCritic(space, DiscreteSpace(n=4), (16, 16)), 1)
    result = run_onnx(project, tmp_path, model, np.zeros((1, space.flat_dim), np.float32))
    assert result.returncode == 1, result.stdout + result.stderr
    error = next(line for line in result.stdout.splitlines() if line.startswith("ERROR "))
    assert "Conv" in error and "image or grid observations" in error and "use thin mode" in error


# -- Memory (recurrent modules) ------------------------------------------------------------


@pytest.mark.parametrize("masked", [False, True], ids=["cartpole", "masked"])
def test_the_gdscript_runtime_runs_a_recurrent_model_as_onnxruntime_does(project, tmp_path, masked):
    """The gateway's LSTM export (state_in [batch, 2H] -> Slice into h and c, the gates'
    Gemms, Sigmoid/Tanh, Mul/Add; state_out = Concat(h', c')), the observation normaliser
    folded into W_ih: over 24 steps of one episode, from zeros, each step's state_out fed
    back, every output and state_out matches onnxruntime's chain of the same steps."""
    import torch

    torch.manual_seed(0)
    action_space = MultiDiscreteSpace(nvec=[3, 2]) if masked else DiscreteSpace(n=2)
    policy = ActorCritic(BoxSpace(shape=(4,)), action_space, (16, 16), normalize_obs=True, lstm_cell_size=8)
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.uniform_(-0.5, 0.5)
        assert policy.obs_norm is not None
        policy.obs_norm.update(torch.randn(64, 4, dtype=torch.float64) * 2 + 1)  # a normaliser that does something
    model = export_onnx(policy, 7, action_masking=masked)
    rng = np.random.default_rng(3)
    observations = rng.uniform(-3, 3, (24, 4)).astype(np.float32)
    width = policy.num_dist_inputs
    masks = np.ones((24, width), np.float32)
    extra = []
    if masked:
        masks[rng.random((24, width)) < 0.4] = 0.0
        masks[:, [0, 3]] = 1.0  # each sub-action keeps a choice
        masks_path = tmp_path / "masks.json"
        masks_path.write_text(json.dumps(masks.astype(int).tolist()))
        extra.append(str(masks_path))

    result = run_onnx(project, tmp_path, model, observations, *extra)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    meta = tagged(lines, "META")[0]
    outputs = np.array(tagged(lines, "OUT"))
    states = np.array(tagged(lines, "STATE"))

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs", *(["action_mask"] if masked else []), "state_in"]
    assert [o.name for o in session.get_outputs()] == ["action_dist_inputs", "state_out"]
    assert meta["state_size"] == 16 == int(meta["metadata"]["state_size"]) and meta["input_name"] == "obs"
    assert meta["mask_input_name"] == ("action_mask" if masked else "")  # state_in is not taken for the mask
    state = np.zeros((1, 16), np.float32)
    expected_outputs, expected_states = [], []
    for obs, mask in zip(observations, masks):
        feed = {"obs": obs[None], "state_in": state}
        if masked:
            feed["action_mask"] = mask[None]
        output, state = session.run(None, feed)
        expected_outputs.append(output[0])
        expected_states.append(state[0])
    assert outputs.shape == (24, width) and states.shape == (24, 16)
    np.testing.assert_allclose(states, np.array(expected_states), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outputs, np.array(expected_outputs), rtol=1e-5, atol=1e-5)
    assert np.abs(np.diff(states, axis=0)).max() > 0.05  # the memory moves: the comparison says something


@pytest.mark.e2e
def test_local_inference_trains_a_recurrent_cartpole_carrying_the_state(project, tmp_path):
    """model.use_lstm: the game runs the LSTM policy in GDScript, feeds each step's
    state_out back, and every chunk says its state_in: zeros where the episode starts, the
    carried state where a chunk goes on with an episode after an EPISODES_AND_GET_STATE
    (and a new model version). The gateway takes every sample and trains."""
    settings = gateway_settings(tmp_path, model={"use_lstm": True, "lstm_cell_size": 8}, train_batch_size=1000)
    with running_gateway(settings) as gateway:
        proxy = TcpProxy(gateway.tcp_port)
        try:
            result = cartpole(project, proxy.port, "--inference", "local", "--max-env-steps", "2600", max_seconds=120)
        finally:
            proxy.close()
        chunks = [c for m in proxy.messages() if m["type"] == "EPISODES_AND_GET_STATE" for c in m["episodes"]]
        sent = sum(len(c["actions"]) for c in chunks)

        def settled() -> dict | None:
            m = metrics(gateway)
            received = m["num_env_steps_sampled_lifetime"] + m["num_env_steps_evaluated_lifetime"]
            return m if received == sent else None

        after = wait_until(settled, 30, f"the gateway to take in the {sent} env steps sent")
    assert result.returncode == 1 and "budget spent before the target" in result.stdout, result  # the step budget
    assert "SCRIPT ERROR" not in result.stderr and "inference: local" in result.stdout
    assert sent >= 2500  # every sample of 500 steps was taken: no chunk refused (state_in there, of the right size)
    assert after["errors"] == {} and after["serving"]["actions_served_total"] == 0
    assert after["num_training_steps"] > 0 and after["weights_seq_no"] >= 1
    first_chunks = {}
    for chunk in chunks:
        first_chunks.setdefault(chunk["episode_id"], chunk)
        assert len(chunk["state_in"]) == 16
    starting = [c for c in chunks if first_chunks[c["episode_id"]] is c]
    continuing = [c for c in chunks if first_chunks[c["episode_id"]] is not c]
    assert all(c["state_in"] == [0.0] * 16 for c in starting)
    # An episode open at a sample's end goes on in a chunk that starts from its carried state.
    assert continuing and all(np.abs(c["state_in"]).max() > 0 for c in continuing)


# -- Exploration noise (SET_CONFIG's action_noise) ------------------------------------------------

LOG_SQRT_2PI = 0.5 * np.log(2 * np.pi)
NOISE_DIM = 4  # a Box of 4 values: 4 series of draws per episode


def noise_gateway(tmp_path: Path, distribution: str, action_noise: str) -> Path:
    """A canned gateway for tools/noise_run.gd (SET_CONFIG and the SET_STATE every GET_STATE
    gets): one Box module, whose model gives mean 0 and log std 0 on any observation, so
    that every sample is its step's N(0, 1) draw (gaussian, PPO's) or that draw's tanh
    times 2 (squashed_gaussian in [-2, 2], SAC's)."""
    import torch

    from app.training.algorithms.sac.networks import LOG_STD_MAX, LOG_STD_MIN, SquashedGaussianActor
    from app.training.algorithms.sac.onnx_head import export_onnx as export_sac_onnx

    observations, box = BoxSpace(shape=(3,)), BoxSpace(shape=(NOISE_DIM,), low=-2.0, high=2.0)
    if distribution == "gaussian":
        policy = ActorCritic(observations, box, (8,))
        with torch.no_grad():
            for parameter in policy.parameters():
                parameter.zero_()
        model = export_onnx(policy, 1)
    else:
        actor = SquashedGaussianActor(observations, box, (8,))
        with torch.no_grad():
            for parameter in actor.parameters():
                parameter.zero_()
            actor.fc_logstd.bias.fill_(float(np.arctanh(-2 * LOG_STD_MIN / (LOG_STD_MAX - LOG_STD_MIN) - 1)))  # log std 0
        model = export_sac_onnx(actor, 1)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    dist_inputs = session.run(None, {"obs": np.zeros((1, 3), np.float32)})[0]
    np.testing.assert_allclose(dist_inputs, np.zeros((1, 2 * NOISE_DIM)), atol=1e-6)
    module = {
        "observation_space": {"type": "box", "shape": [3]},
        "action_space": {"type": "box", "shape": [NOISE_DIM], "low": -2.0, "high": 2.0},
        "onnx_input_name": "obs",
        "onnx_output_names": [o.name for o in session.get_outputs()],
        "action_distribution": distribution,
        "action_noise": action_noise,
        "state_size": 0,
    }
    set_config = {"type": "SET_CONFIG", "env_steps_per_sample": 500, "force_on_policy": True, **module,
                  "policies": {"default_policy": {**module, "trainable": True}}, "policy_mapping": {},
                  "default_module_id": "default_policy"}
    SetConfig.model_validate(set_config)  # the gateway's message, as it sends it
    set_state = {"type": "SET_STATE", "onnx_file": set_state_payload(model), "weights_seq_no": 1}
    path = tmp_path / f"{distribution}_{action_noise}.json"
    path.write_text(json.dumps({"set_config": set_config, "set_state": set_state}))
    return path


def play_noise(project: Path, gateway: Path, episodes: int, steps: int, *greedy: int) -> tuple[np.ndarray, np.ndarray]:
    """tools/noise_run.gd: the actions as sampled [episodes, steps, NOISE_DIM] and their log-probs [episodes, steps]."""
    command = [GODOT, "--path", str(project), "-s", "res://tools/noise_run.gd", "--", str(gateway), str(episodes), str(steps),
               *map(str, greedy)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=godot_env(project))
    assert result.returncode == 0 and "SCRIPT ERROR" not in result.stderr, result.stdout[-2000:] + result.stderr
    rows = [line.split(" ", 3)[1:] for line in result.stdout.splitlines() if line.startswith("STEP ")]
    assert [(int(e), int(t)) for e, t, _ in rows] == [(e, t) for e in range(episodes) for t in range(steps)]
    sampled = [rest.rsplit(" ", 1) for _, _, rest in rows]
    actions = np.array([json.loads(action) for action, _ in sampled]).reshape(episodes, steps, NOISE_DIM)
    return actions, np.array([float(logp) for _, logp in sampled]).reshape(episodes, steps)


def unit_draws(distribution: str, actions: np.ndarray, logps: np.ndarray) -> np.ndarray:
    """Each sample's N(0, 1) draws (mean 0, log std 0: the sample itself, before the squash),
    checked against the log-prob the chunk carries (the formula white noise has)."""
    squashed = distribution == "squashed_gaussian"
    draws = np.arctanh(actions / 2) if squashed else actions
    logp = np.sum(-0.5 * draws**2 - LOG_SQRT_2PI, axis=-1)
    if squashed:
        logp -= np.sum(np.log(2 * (1 - (actions / 2) ** 2) + 1e-6), axis=-1)
    np.testing.assert_allclose(logps, logp, rtol=1e-5, atol=1e-4)
    return draws


def lag_correlation(series: np.ndarray, lag: int) -> float:
    """The correlation of the draws [episodes, steps, d] with those `lag` steps later in the same episode (about mean 0)."""
    return float(np.sum(series[:, lag:] * series[:, :-lag]) / np.sqrt(np.sum(series[:, lag:] ** 2) * np.sum(series[:, :-lag] ** 2)))


@pytest.mark.parametrize("distribution", ["gaussian", "squashed_gaussian"])
def test_pink_noise_drifts_over_an_episode_and_white_noise_does_not(project, tmp_path, distribution):
    """action_noise "pink" (the docs' "Exploration noise"; Eberhard et al. 2023): over
    2,000-step episodes of the local session, each draw is still N(0, 1) (mean square 1),
    but a draw is close to the step before's (lag-1 correlation 0.84 for the six processes)
    and still related 100 steps on (0.30); "white": each step's is new (0)."""
    pink = unit_draws(distribution, *play_noise(project, noise_gateway(tmp_path, distribution, "pink"), 3, 2000))
    white = unit_draws(distribution, *play_noise(project, noise_gateway(tmp_path, distribution, "white"), 1, 2000))
    assert 0.7 < np.mean(pink**2) < 1.3 and 0.9 < np.mean(white**2) < 1.1 and abs(np.mean(white)) < 0.05
    assert lag_correlation(pink, 1) > 0.75 and lag_correlation(pink, 100) > 0.1
    assert abs(lag_correlation(white, 1)) < 0.05 and abs(lag_correlation(white, 100)) < 0.05


def test_each_episode_draws_its_pink_noise_anew(project, tmp_path):
    """At an episode's start every process is drawn N(0, 1) again: over 400 episodes of 4
    steps, the first draws are N(0, 1) (not the smaller ones of processes started at 0) and
    unrelated to the last draws of the episode before (not the same processes going on),
    while within an episode they drift as ever."""
    draws = unit_draws("gaussian", *play_noise(project, noise_gateway(tmp_path, "gaussian", "pink"), 400, 4))
    first, last = draws[1:, 0], draws[:-1, -1]
    assert 0.85 < np.mean(draws[:, 0] ** 2) < 1.15
    assert abs(np.sum(first * last) / np.sqrt(np.sum(first**2) * np.sum(last**2))) < 0.1
    assert lag_correlation(draws, 1) > 0.75


@pytest.mark.parametrize("action_noise", ["pink", "white"])
def test_pink_noise_goes_on_through_steps_that_do_not_explore(project, tmp_path, action_noise):
    """Steps 100-149 played with explore off take the mean (0) in both; pink noise still
    advances through them, so the steps after are the very ones of a run that explored
    throughout (same seed); white noise draws nothing there, as before pink noise existed,
    so the steps after are that run's from step 100 on."""
    gateway = noise_gateway(tmp_path, "gaussian", action_noise)
    explored, _ = play_noise(project, gateway, 1, 300)
    paused, logps = play_noise(project, gateway, 1, 300, 100, 150)
    assert (paused[0, 100:150] == 0).all() and np.allclose(logps[0, 100:150], -NOISE_DIM * LOG_SQRT_2PI)
    np.testing.assert_array_equal(paused[0, :100], explored[0, :100])
    after = explored[0, 150:] if action_noise == "pink" else explored[0, 100:250]
    np.testing.assert_array_equal(paused[0, 150:], after)


# -- Action masks ---------------------------------------------------------------------------

MASKED_PICK = dict(observation_space={"type": "box", "shape": [12]}, action_space={"type": "discrete", "n": 6})
MASKED_PICK_TARGET = 6.0  # picking among the allowed at random: 5.0 (sd of a 20-episode mean ~0.2); the best: 7.5


def masked_pick(project: Path, port: int, *args: str, target: float = MASKED_PICK_TARGET) -> subprocess.CompletedProcess:
    return cartpole(project, port, "--env", "masked-pick", *args, target=target, max_seconds=90)


@pytest.mark.e2e
@pytest.mark.parametrize("inference", ["thin", "local"])
def test_a_masked_game_learns_and_never_takes_a_forbidden_action(project, tmp_path, inference):
    """The example's masked-pick: half the items are forbidden each step; the game's
    get_action_mask() says which, and a forbidden pick ends the run (exit 4), as the
    gateway refuses a chunk whose action its mask forbids. Random picks would break a
    rule at the first steps; masked ones learn to beat picking among the allowed at random."""
    with running_gateway(gateway_settings(tmp_path, **MASKED_PICK, action_masking=True)) as gateway:
        proxy = TcpProxy(gateway.tcp_port)
        try:
            result = masked_pick(project, proxy.port, "--inference", inference)
            run = reached(result)
            after = settled_metrics(gateway, 1)
        finally:
            proxy.close()
    assert f"inference: {inference}" in result.stdout
    assert f"masked-pick: {run['env_steps']} decisions, 0 forbidden actions taken" in result.stdout
    assert after["errors"] == {} and proxy.connections == 1
    messages = proxy.messages()
    if inference == "thin":
        # Every GET_ACTION carried its step's mask (the game shows it in obs[6:] too).
        requests = [m for m in messages if m["type"] == "GET_ACTION"]
        assert len(requests) == run["env_steps"] == after["serving"]["actions_served_total"]
        for request in requests:
            assert request["action_mask"] == [int(x) for x in request["obs"][6:]]
            assert sum(request["action_mask"]) == 3
    else:
        # The policy ran in GDScript; each chunk holds a mask per step, the one its
        # action was chosen under, and the action is allowed by it.
        assert after["serving"]["actions_served_total"] == 0
        chunks = [c for m in messages if m["type"] == "EPISODES_AND_GET_STATE" for c in m["episodes"]]
        received = after["num_env_steps_sampled_lifetime"] + after["num_env_steps_evaluated_lifetime"]
        assert chunks and sum(len(c["actions"]) for c in chunks) == received >= 500
        for chunk in chunks:
            assert len(chunk["action_mask"]) == len(chunk["actions"]) == len(chunk["obs"]) - 1
            for obs, mask, action in zip(chunk["obs"], chunk["action_mask"], chunk["actions"]):
                assert mask == [int(x) for x in obs[6:]] and sum(mask) == 3
                assert mask[action] == 1
    assert after["weights_seq_no"] >= 1


@pytest.mark.e2e
def test_a_mask_for_a_module_without_action_masking_is_a_clear_error_in_both_modes(project, tmp_path):
    with running_gateway(gateway_settings(tmp_path, **MASKED_PICK)) as gateway:
        thin = masked_pick(project, gateway.tcp_port)
        local = masked_pick(project, gateway.tcp_port, "--inference", "local")
    assert thin.returncode == 3, thin
    assert "error: the gateway refused us: [invalid_message]" in thin.stderr
    assert "takes no action masks (set action_masking)" in thin.stderr and "(request GET_ACTION)" in thin.stderr
    assert local.returncode == 3, local  # found in the game, before a sample the gateway would refuse
    assert "[invalid_message] get_action_mask() gave a mask, but module 'default_policy' takes no action masks" in local.stderr


# -- Heuristic play and demonstrations -----------------------------------------------------------


def recorded(result: subprocess.CompletedProcess) -> list[dict]:
    """The example's line per recorded episode: {"episode", "return", "steps"}."""
    assert result.returncode == 0 and "SCRIPT ERROR" not in result.stderr, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.mark.e2e
def test_heuristic_play_is_logged_to_the_gateway_and_recorded_as_demonstrations_it_loads(project, tmp_path):
    demos = tmp_path / "cartpole.jsonl"
    with running_gateway(gateway_settings(tmp_path)) as gateway:
        result = cartpole(project, gateway.tcp_port, "--inference", "heuristic", "--record-demos", str(demos), "--episodes", "3")
        episodes = recorded(result)

        def settled() -> dict | None:
            m = metrics(gateway)
            return m if m["frames_received"].get("END_EPISODE") == 3 and m["serving"]["open_episodes"] == 0 else None

        after = wait_until(settled, 30, "the gateway to end the 3 logged episodes")
    assert [(row["return"], row["steps"]) for row in episodes] == [(500, 500)] * 3  # the scripted controller balances
    # Every decision once connected is logged (heuristic play waits for no handshake: the
    # first episode's first steps may go unlogged) and trained on; no action was served.
    logged = after["frames_received"]["LOG_ACTION"]
    assert 1000 < logged <= 1500 and after["num_env_steps_sampled_lifetime"] == logged
    assert after["serving"]["actions_served_total"] == 0 and after["errors"] == {}

    chunks = load_demos(demos, CARTPOLE)  # the gateway's own loader and checks
    assert [(float(sum(c.rewards)), len(c.actions)) for c in chunks] == [(500.0, 500)] * 3
    for c in chunks:
        assert len(c.obs) == 501 and c.is_truncated and not c.is_terminated and c.action_mask is None
        assert set(np.unique(c.actions)) == {0, 1}
    lines = demos.read_text().splitlines()
    assert lines[0].startswith("# rllink demonstrations") and len(lines) == 4

    unwritable = cartpole(project, 1, "--host", "", "--inference", "heuristic", "--record-demos", str(tmp_path / "no" / "d.jsonl"))
    assert unwritable.returncode == 3, unwritable
    assert f"error: cannot record: [file_error] cannot record demonstrations to {tmp_path / 'no' / 'd.jsonl'}" in unwritable.stderr


def test_masked_heuristic_play_is_recorded_with_no_gateway_masks_included(project, tmp_path):
    demos = tmp_path / "masked_pick.jsonl"
    args = ("--host", "", "--inference", "heuristic", "--record-demos", str(demos), "--episodes", "4")
    first = recorded(masked_pick(project, 1, *args, "--seed", "5"))
    again = recorded(masked_pick(project, 1, *args, "--seed", "6"))  # a second session appends
    episodes = first + again
    assert len(episodes) == 8

    masked = PolicySet([Module("default_policy", BoxSpace(shape=(12,)), DiscreteSpace(n=6), PPOConfig(), action_masking=True)])
    chunks = load_demos(demos, masked)  # checks each mask allows its step's action
    assert sum(line.startswith("#") for line in demos.read_text().splitlines()) == 1
    assert len({c.episode_id for c in chunks}) == 8
    for chunk, row in zip(chunks, episodes, strict=True):
        assert len(chunk.actions) == row["steps"] == 10 and chunk.is_truncated
        assert float(sum(chunk.rewards)) == pytest.approx(row["return"], abs=1e-5)
        mask, obs = np.asarray(chunk.action_mask), np.asarray(chunk.obs)
        assert mask.shape == (10, 6) and (mask.sum(axis=1) == 3).all()
        np.testing.assert_array_equal(mask, obs[:-1, 6:])  # the env shows its mask in the observation
        # The scripted picker took the most valuable allowed item, and that is what was recorded.
        np.testing.assert_array_equal(chunk.actions, np.where(mask == 1, obs[:-1, :6], -1).argmax(axis=1))
        np.testing.assert_array_equal(chunk.rewards, obs[np.arange(10), chunk.actions])
