"""The C# kit in its real runtime: the Unity package clients/unity/ (its sources, one copy)
built with mono's mcs by clients/csharp/build.sh, the console CartPole example trains
against a real gateway over TCP.

- Thin mode (the gateway acts), local inference (the kit's MlpPolicyRuntime runs each
  SET_STATE model in C#), and a batched GET_ACTION for several carts each reach a mean
  return of 150 over 20 episodes, and the gateway trained on what they sent.
- Evaluation episodes (the gateway's evaluation_interval N): with local inference the kit
  plays every Nth episode with the mode and marks its chunks `evaluation`; /api/metrics
  counts exactly those episodes and their steps apart (the sent steps to the step); in thin
  mode the game hears the gateway's choice from EPISODE_STARTED (IsEvaluationEpisode).
- Environment parameters: a gateway with a constant and a curriculum whose first lesson
  CartPole completes fast; the example, thin and local, shows at each episode's start what
  GetEnvParam reads: the constant throughout, the first lesson's value, then the second's
  for good, as /api/metrics says (thin: the kit asks for a SET_STATE between episodes once
  the version changed; local: the SET_STATEs it gets anyway carry them).
- Auth: with the right token it trains; a wrong or missing token reaches the game as the
  kit's RLlinkException with the gateway's code (`unauthorized`), and the example exits 3
  saying so. A gateway limit (`too_many_episodes`) reaches it the same way.
- A connection cut mid-training: the kit reconnects and training goes on.
- TLS with a pinned self-signed certificate.
- MultiDiscrete actions and action masks (the example's ChoiceEnvs.cs, whose masked
  envs abort on a forbidden action, and the gateway refuses a chunk whose mask forbids
  its action): learned in thin mode (GET_ACTION's action_mask, also batched) and with
  local inference (the mask into the model's second input, and into each chunk: with a
  learning rate of ~0 PPO's ratio is exactly 1 only if the chunks carry the masks the
  kit sampled under).
- MlpPolicyRuntime computes what onnxruntime computes on the gateway's models (a masked
  MultiDiscrete one too), and refuses an image policy's Conv, pointing to Sentis or thin mode.
- Memory (a module with `model: {use_lstm: true}`): MlpPolicyRuntime runs the gateway's
  recurrent export (its LSTM step written out in Slice, Gemm, Add, Sigmoid, Tanh, Mul,
  Concat; inputs obs and state_in, outputs action_dist_inputs and state_out) as onnxruntime
  does, step by step with the state carried and reset; the console example with local
  inference carries each agent's state and puts state_in on every chunk (those continuing
  an episode after an EPISODES_AND_GET_STATE too: the gateway refuses one without it), and
  the gateway trains on what it sent.
- A model bundled with a game, with no gateway: the gateway's GET /api/model.onnx written
  to a file, loaded by MlpPolicyRuntime.FromFile (names and shape from the model itself)
  and played by OnnxPolicy, gives onnxruntime's outputs and their most likely actions.
- The Unity package: package.json, the two asmdefs (the Sentis versionDefines), a .meta
  file for every asset (a Git-installed package needs them), no stand-in inside it;
  Runtime, Editor and the CartPole sample compile as Unity's assemblies against the
  stand-ins in clients/csharp/stubs/ (SentisPolicyRuntime with RLLINK_SENTIS, under both
  of Sentis' namespaces). The sample's agent, an RLlinkAgent stepped by hand as Unity's
  player loop steps it, trains CartPole in thin and local mode, then plays the gateway's
  export with no gateway; the inspector's settings checks and its Test connection answer
  as they should. Unity itself never runs here.
- The agent's other hooks and settings: inference Heuristic (the sample's scripted
  controller plays; with a gateway each action reaches it as LOG_ACTION and is trained on,
  with none the game plays alone); the spaces it declares (observationSize,
  discreteActions), refused by a gateway of other spaces with both named; the launch
  arguments a gateway gives the builds it starts (--rllink-port over the inspector's port,
  --rllink-time-scale into Time.timeScale, --rllink-env-index into the seed; a malformed
  one stops the agent saying which); the ray-cast sensor's fan against a wall.
- Demonstrations: a heuristic agent with recordDemosPath (and the console example's
  --record-demos, masks included) writes the episodes it plays, with no gateway, to a file
  the gateway's own loader (app.training.demos.load_demos) takes, steps and returns as the
  game reported them; a real gateway started with `--demos` on the agent's file pre-trains a
  policy that the agent then plays from the export, balancing with no RL step; a file that
  cannot be written stops the agent (or the example) saying which.

Skipped when mono's `mcs` or `mono` is missing (Debian: apt-get install -y mono-mcs mono-runtime).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from app.settings.policies import Module, PolicySet
from app.spaces.models import BoxSpace, DiscreteSpace, MultiDiscreteSpace
from app.training.algorithms.ppo.config import PPOConfig
from app.training.algorithms.ppo.onnx_head import export_onnx
from app.training.demos import DemoFileError, load_demos
from app.training.onnx_export import tempered_policy
from app.training.policy import ActorCritic

from .gateway_process import gateway_process
from .helpers import (
    CARTPOLE,
    RunningGateway,
    TcpProxy,
    gateway_settings,
    load_script,
    models_loaded_line,
    one_version_many_requests_settings,
    running_gateway,
    wait_until,
)

KIT = Path(__file__).resolve().parent.parent / "clients" / "csharp"
PACKAGE = KIT.parent / "unity"
BUILD = KIT / "build"
UNITY_BUILD = BUILD / "unity"
BUILT = [
    "RLlink.dll", "CartPole.exe", "OnnxRun.exe", "PlayOnnx.exe",
    "unity/RLlink.Runtime.dll", "unity/RLlink.Runtime.Sentis.check.dll", "unity/RLlink.Runtime.InferenceEngine.check.dll",
    "unity/RLlink.Editor.dll", "unity/CartPoleSample.dll", "unity/AgentLoop.exe",
]  # fmt: skip
MISSING = [tool for tool in ("mcs", "mono") if shutil.which(tool) is None]

pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"no {' or '.join(MISSING)}: apt-get install -y mono-mcs mono-runtime"
)  # fmt: skip

TARGET = 150  # random play: 22
MAX_SECONDS = 180  # the example's own budget: it exits 1 when spent
RUN_TIMEOUT_S = 240  # a hung example fails the test here, not at pytest's 300 s


@pytest.fixture(scope="module")
def kit() -> Path:
    """build.sh, once per module; the path of CartPole.exe."""
    result = subprocess.run(["bash", str(KIT / "build.sh")], capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, f"build.sh failed:\n{result.stdout}\n{result.stderr}"
    for name in BUILT:
        assert (BUILD / name).is_file(), name
    return BUILD / "CartPole.exe"


def cartpole(exe: Path, port: int, *args: str, target: float = TARGET) -> subprocess.CompletedProcess:
    command = ["mono", str(exe), "--host", "127.0.0.1", "--port", str(port),
               "--target-return", str(target), "--max-seconds", str(MAX_SECONDS), *args]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    print(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}")
    return result


def metrics(gateway: RunningGateway, token: str | None = None) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{gateway.base_url}/api/metrics", headers=headers, timeout=30).raise_for_status().json()


def reached(result: subprocess.CompletedProcess) -> dict:
    """The example's last line: reached the target: mean return M >= T after E episodes, S env steps."""
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    line = [line for line in result.stdout.splitlines() if line.startswith("reached the target")][-1]
    words = line.replace(",", "").split()
    return {"mean": float(words[5]), "episodes": int(words[9]), "env_steps": int(words[11])}


# -- Training -------------------------------------------------------------------------


def shown_episodes(stdout: str) -> list[dict]:
    """The example's --show-episodes lines: one per episode, as it ended."""
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith('{"episode"')]
    return [row for row in rows if "evaluation" in row]


@pytest.mark.e2e
def test_the_csharp_cartpole_trains_in_thin_mode_over_tcp(kit, tmp_path):
    # As a gateway launches it (--env-path): its --rllink-port wins over the example's own --port 1.
    with running_gateway(gateway_settings(tmp_path, evaluation_interval=5)) as gateway:
        result = cartpole(kit, 1, "--rllink-port", str(gateway.tcp_port), "--rllink-env-index", "1", "--show-episodes")
        run = reached(result)
        # Every 5th episode the gateway played as an evaluation one (the mode, never trained on),
        # and the game heard so from EPISODE_STARTED (AgentSession.IsEvaluationEpisode).
        episodes = shown_episodes(result.stdout)
        assert [episode["episode"] for episode in episodes] == list(range(1, run["episodes"] + 1))
        assert [episode["evaluation"] for episode in episodes] == [i % 5 == 4 for i in range(run["episodes"])]
        # The last END_EPISODE may still be on its way: wait for every step to be counted.
        after = wait_until(lambda: (m := metrics(gateway))["num_env_steps_sampled_lifetime"]
                           + m["num_env_steps_evaluated_lifetime"] == run["env_steps"] and m, 30, "the example's steps")  # fmt: skip
    assert run["mean"] >= TARGET
    assert "inference: thin" in result.stdout
    # The gateway chose every action and trained on the episodes it built from them.
    assert after["serving"]["actions_served_total"] >= run["env_steps"]
    assert after["num_training_steps"] >= 1 and after["weights_seq_no"] >= 1
    assert after["num_env_steps_trained_lifetime"] > 0
    assert after["serving"]["episodes_ended"]["terminated"] + after["serving"]["episodes_ended"].get("truncated", 0) >= run["episodes"]
    assert after["num_evaluation_episodes_lifetime"] == run["episodes"] // 5 and after["num_env_steps_evaluated_lifetime"] > 0


@pytest.mark.e2e
def test_the_csharp_cartpole_trains_with_local_inference(kit, tmp_path):
    # SET_CONFIG's evaluation_interval 3: the kit plays every 3rd episode with the mode and marks its chunks.
    with running_gateway(gateway_settings(tmp_path, evaluation_interval=3)) as gateway:
        result = cartpole(kit, gateway.tcp_port, "--inference", "local", "--show-episodes")
        after = metrics(gateway)
    run = reached(result)
    assert "inference: local" in result.stdout
    # The policy ran in C#: the gateway served no action, yet trained on the experience.
    assert after["serving"]["actions_served_total"] == 0
    assert after["weights_seq_no"] >= 1 and after["num_env_steps_trained_lifetime"] > 0

    episodes = shown_episodes(result.stdout)
    assert [episode["episode"] for episode in episodes] == list(range(1, run["episodes"] + 1))
    assert [episode["evaluation"] for episode in episodes] == [i % 3 == 2 for i in range(run["episodes"])]
    assert sum(episode["steps"] for episode in episodes) == run["env_steps"]
    # Whole EPISODES_AND_GET_STATE batches of 500 went out, each when the step after it was
    # asked for; the last steps are still in the game. What went out is counted to the step:
    # the evaluation episodes' steps apart, the ended ones among them as evaluation episodes.
    sent = 500 * ((run["env_steps"] - 1) // 500)
    assert after["num_env_steps_sampled_lifetime"] + after["num_env_steps_evaluated_lifetime"] == sent
    ends = np.cumsum([episode["steps"] for episode in episodes])
    starts = ends - [episode["steps"] for episode in episodes]
    evaluated = [(episode, start, end) for episode, start, end in zip(episodes, starts, ends, strict=True) if episode["evaluation"]]
    assert after["num_env_steps_evaluated_lifetime"] == sum(min(end, sent) - start for _, start, end in evaluated if start < sent) > 0
    returns = [episode["return"] for episode, _, end in evaluated if end <= sent]
    assert after["num_evaluation_episodes_lifetime"] == len(returns) == sum(ends <= sent) // 3
    assert after["evaluation_return_mean"] == pytest.approx(np.mean(returns[-100:]), abs=1e-3)


@pytest.mark.e2e
def test_local_inference_loads_each_model_once_however_many_requests_bring_it(kit, tmp_path):
    """SAC answers every request with its latest version, which outlasts many requests of 50
    env steps (none comes before learning_starts): the kit loads only a model it does not run."""
    settings = one_version_many_requests_settings(tmp_path)
    with running_gateway(settings) as gateway:
        result = cartpole(kit, gateway.tcp_port, "--inference", "local", "--max-env-steps", "1500", target=1e9)
        sent = metrics(gateway)["num_env_steps_sampled_lifetime"]
    loaded, last_version = models_loaded_line(result.stdout)
    requests = sent // 50
    assert requests >= 29 and 1 <= loaded <= last_version + 1 < requests, (loaded, last_version, requests)


def test_the_csharp_cartpole_trains_several_carts_with_batched_get_action(kit, tmp_path):
    with running_gateway(gateway_settings(tmp_path)) as gateway:
        result = cartpole(kit, gateway.tcp_port, "--envs", "4")
        after = metrics(gateway)
    reached(result)
    assert after["weights_seq_no"] >= 1
    assert after["serving"]["inference_batch_size_mean"] > 1.5  # four observations per request


CURRICULUM_PARAMS = {
    "arena": "line",
    "pole_length": {
        "curriculum": [
            {
                "name": "short",
                "value": 0.5,
                "completion_criteria": {
                    "threshold": 20, "min_episodes": 10, "measure": "episode_return_mean", "module_id": "default_policy",
                },
            },
            {"name": "long", "value": 1.5},
        ]
    },
}  # fmt: skip


def shown_env_params(stdout: str) -> list[dict]:
    """The example's --show-env-params lines: one per episode, as it started."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith('{"episode"')]


@pytest.mark.e2e
@pytest.mark.parametrize("inference", ["thin", "local", "heuristic"])
def test_the_kit_follows_the_gateways_env_params_as_a_curriculum_lesson_advances(kit, tmp_path, inference):
    settings = gateway_settings(tmp_path, env_params=CURRICULUM_PARAMS, train_batch_size=1000, decode_workers=0)
    with running_gateway(settings) as gateway:
        result = cartpole(kit, gateway.tcp_port, "--inference", inference, "--show-env-params", "arena,pole_length,missing", target=100)
        after = metrics(gateway)
    run = reached(result)
    shown = shown_env_params(result.stdout)
    assert [line["episode"] for line in shown] == list(range(1, run["episodes"] + 1))
    # The constant throughout; a parameter the gateway does not set reads as the default (null).
    assert all(line["env_params"]["arena"] == "line" and line["env_params"]["missing"] is None for line in shown)
    lengths = [float(line["env_params"]["pole_length"]) for line in shown]
    assert 1.5 in lengths, f"the second lesson never reached the game in {run['episodes']} episodes: {lengths}"
    changed = lengths.index(1.5)
    # The first lesson's value, for at least its min_episodes, then the second's for good.
    assert changed >= 10 and set(lengths[:changed]) == {0.5} and set(lengths[changed:]) == {1.5}, lengths
    assert shown[changed]["weights_seq_no"] >= 1  # it came with a policy version published after the change
    assert after["env_params"] == {"arena": "line", "pole_length": 1.5}
    assert after["curriculum"]["pole_length"]["lesson_name"] == "long"


# -- Auth and errors ----------------------------------------------------------------------

TOKEN = "kit-secret-7"


@pytest.mark.e2e
def test_with_auth_on_the_right_token_trains_and_a_wrong_or_missing_one_is_a_clear_error(kit, tmp_path):
    with running_gateway(gateway_settings(tmp_path, auth_token=TOKEN)) as gateway:
        wrong = cartpole(kit, gateway.tcp_port, "--token", "not-the-token")
        missing = cartpole(kit, gateway.tcp_port)
        right = cartpole(kit, gateway.tcp_port, "--token", TOKEN, target=50)  # past random play (22): it trains
        after = metrics(gateway, TOKEN)
    for refused in (wrong, missing):
        # The gateway's ERROR frame reached the game as RLlinkException, code and message.
        assert refused.returncode == 3, refused
        assert "error: the gateway refused us: [unauthorized]" in refused.stderr
        assert "token" in refused.stderr  # the gateway's message says what is missing
        assert "reached the target" not in refused.stdout
    assert TOKEN not in wrong.stdout + wrong.stderr + missing.stderr
    reached(right)
    assert after["weights_seq_no"] >= 1 and after["serving"]["actions_served_total"] > 0


@pytest.mark.e2e
def test_a_gateway_limit_reaches_the_game_as_a_typed_error(kit, tmp_path):
    settings = gateway_settings(tmp_path, max_open_episodes_per_connection=2)
    with running_gateway(settings) as gateway:
        result = cartpole(kit, gateway.tcp_port, "--envs", "3")
    assert result.returncode == 3, result
    assert "[too_many_episodes]" in result.stderr and "(request START_EPISODE)" in result.stderr
    assert "max_open_episodes_per_connection" in result.stderr


# -- Reconnection ----------------------------------------------------------------------------


@pytest.mark.e2e
def test_a_connection_cut_mid_training_is_reconnected_and_training_goes_on(kit, tmp_path):
    with running_gateway(gateway_settings(tmp_path)) as gateway:
        proxy = TcpProxy(gateway.tcp_port, cut_after=150_000)  # about 1,000 thin steps in
        try:
            result = cartpole(kit, proxy.port)
        finally:
            proxy.close()
        after = metrics(gateway)
    reached(result)
    assert proxy.cut.is_set() and proxy.connections >= 2
    assert "rllink: reconnected to" in result.stdout
    # The gateway ended the episode open on the cut connection as truncated by the disconnect.
    assert after["serving"]["episodes_ended"].get("disconnect", 0) >= 1
    assert after["weights_seq_no"] >= 1


# -- TLS -------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_tls_with_a_pinned_self_signed_certificate(kit, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    settings = gateway_settings(tmp_path, tls_certfile=cert, tls_keyfile=key)
    with running_gateway(settings) as gateway:
        # A mean of 35 (random play: about 22, its mean of 20 episodes within 3 of that) shows
        # versions coming back over TLS; TLS in mono is slow, and how well the policy learns is
        # the other tests' to show.
        result = cartpole(kit, gateway.tcp_port, "--tls-cert", str(cert), target=35)
        # No TLS: the bridge does not answer plain RLlink (the client gives up retrying after 2 s).
        plain = cartpole(kit, gateway.tcp_port, "--reconnect-timeout-s", "2", target=35)
    reached(result)
    assert plain.returncode == 3 and "[connection_closed]" in plain.stderr


# -- MultiDiscrete actions and action masks ----------------------------------------------------

# The gateway's spaces for the example's envs (clients/csharp/example/ChoiceEnvs.cs).
TWO_TARGETS = dict(observation_space={"type": "box", "shape": [6]}, action_space={"type": "multi_discrete", "nvec": [3, 3]})
CHOICE_GATEWAYS = {
    "two-targets": TWO_TARGETS,  # random 5.33, best 16
    "masked-targets": dict(TWO_TARGETS, action_masking=True),  # random allowed 8, best 16
    "masked-pick": dict(  # random allowed 5.0, best allowed 7.5
        observation_space={"type": "box", "shape": [12]}, action_space={"type": "discrete", "n": 6}, action_masking=True
    ),
}
CHOICE_TARGETS = {"two-targets": 14, "masked-targets": 12, "masked-pick": 6.5}  # at least half-way from random to best


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("env", "inference"),
    [("masked-pick", "thin"), ("masked-pick", "thin-batched"), ("masked-pick", "local"),
     ("masked-targets", "thin"), ("masked-targets", "local"), ("two-targets", "local")],
)  # fmt: skip
def test_multi_discrete_and_masked_tasks_are_learned_and_no_forbidden_action_is_ever_taken(kit, tmp_path, env, inference):
    # A masked env throws on a forbidden action (the example exits 4), and in local mode the
    # gateway refuses a chunk whose action its mask forbids (exit 3): reaching the target
    # proves that no policy version ever took one.
    args = {"thin": [], "thin-batched": ["--envs", "4"], "local": ["--inference", "local"]}[inference]
    with running_gateway(gateway_settings(tmp_path, **CHOICE_GATEWAYS[env])) as gateway:
        result = cartpole(kit, gateway.tcp_port, "--env", env, *args, target=CHOICE_TARGETS[env])
        after = metrics(gateway)
    run = reached(result)
    assert ("(masked)" in result.stdout) == ("masked" in env)
    assert after["weights_seq_no"] >= 1
    if inference == "local":
        assert after["serving"]["actions_served_total"] == 0
        assert 0 < after["num_env_steps_sampled_lifetime"] <= run["env_steps"]
    else:
        assert after["serving"]["actions_served_total"] >= run["env_steps"]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("env", "max_entropy"), [("masked-pick", np.log(3)), ("masked-targets", 2 * np.log(2))], ids=["masked-pick", "masked-targets"]
)
def test_local_inference_puts_each_steps_mask_in_its_chunk_and_samples_the_masked_distribution(kit, tmp_path, env, max_entropy):
    # A learning rate of ~0 keeps the policy the one that chose the actions: PPO's ratio is
    # exactly 1 (approx_kl 0) only if the kit's log-probs are the masked distribution's and
    # the chunks carry the masks they were sampled under; the entropy is the masked one's
    # (3 of 6 allowed; 2 of 3 per sub-action).
    ppo = PPOConfig(learning_rate=1e-12, normalize_obs=False, normalize_reward=False)
    with running_gateway(gateway_settings(tmp_path, ppo=ppo, **CHOICE_GATEWAYS[env])) as gateway:
        result = cartpole(kit, gateway.tcp_port, "--env", env, "--inference", "local", "--max-env-steps", "2000", target=99)
        after = metrics(gateway)
    assert result.returncode == 1 and "budget spent before the target" in result.stdout, result
    assert after["num_training_steps"] >= 3
    learner = after["learner"]
    assert abs(learner["approx_kl"]) < 1e-6 and learner["clip_frac"] == 0, learner
    assert learner["entropy"] <= max_entropy + 1e-4, learner


# -- The kit's ONNX runtime ------------------------------------------------------------------


MASKED_NVEC = (4, 3, 2)


def _models() -> list[tuple[str, bytes, list[int]]]:
    """The gateway's exports: CartPole's (Gemm, Tanh; logits), a Box policy on 2x3
    observations (Flatten; mean and log std), and a MultiDiscrete one with an action mask
    (its second input; Sub, Mul, Add), with random weights."""
    import torch

    torch.manual_seed(0)
    cartpole_policy = ActorCritic(BoxSpace(shape=(4,)), DiscreteSpace(n=2), (64, 64))
    box_policy = ActorCritic(BoxSpace(shape=(2, 3)), BoxSpace(shape=(2,), low=-1.0, high=1.0), (32, 16))
    masked_policy = ActorCritic(BoxSpace(shape=(5,)), MultiDiscreteSpace(nvec=MASKED_NVEC), (32, 32), normalize_obs=True)
    masked_policy.obs_norm.update(torch.randn(50, 5) * 3 + 1)
    with torch.no_grad():  # weights far from the initial near-zero outputs, so the comparison says something
        for parameter in [*cartpole_policy.parameters(), *box_policy.parameters(), *masked_policy.parameters()]:
            parameter.uniform_(-0.5, 0.5)
    return [
        ("cartpole", export_onnx(cartpole_policy, 3), [4]),
        ("box", export_onnx(box_policy, 4, input_name="onnx::Gemm_0"), [2, 3]),
        ("masked_multi_discrete", export_onnx(masked_policy, 5, action_masking=True), [5]),
        # A self-play opponent at temperature 2 (SelfPlayConfig.opponent_temperature): one Mul after the masked output.
        ("tempered_masked_multi_discrete", tempered_policy(export_onnx(masked_policy, 5, action_masking=True), 2.0), [5]),
    ]


def onnx_run(model: Path, shape: list[int], lines: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(["mono", str(BUILD / "OnnxRun.exe"), str(model), "x".join(map(str, shape))],
                          input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize("name", ["cartpole", "box", "masked_multi_discrete", "tempered_masked_multi_discrete"])
def test_mlp_policy_runtime_computes_what_onnxruntime_computes(kit, tmp_path, name):
    model, shape = next((m, s) for n, m, s in _models() if n == name)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model)
    rng = np.random.default_rng(1)
    observations = rng.uniform(-3, 3, (64, *shape)).astype(np.float32)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    inputs = {session.get_inputs()[0].name: observations}
    if name.endswith("masked_multi_discrete"):
        assert [i.name for i in session.get_inputs()] == ["obs", "action_mask"]
        masks = (rng.random((64, sum(MASKED_NVEC))) < 0.5).astype(np.float32)
        starts = np.cumsum((0, *MASKED_NVEC[:-1]))
        masks[np.arange(64)[:, None], starts + rng.integers(0, MASKED_NVEC, (64, len(MASKED_NVEC)))] = 1
        masks[:4] = 1  # nothing forbidden
        inputs["action_mask"] = masks
        lines = [json.dumps({"obs": o.tolist(), "action_mask": m.tolist()}) for o, m in zip(observations, masks)]
    else:
        lines = [json.dumps(o.ravel().tolist()) for o in observations]
    result = onnx_run(path, shape, lines)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    metadata, outputs = json.loads(lines[0]), np.array([json.loads(line) for line in lines[1:]])

    expected = session.run(None, inputs)[0]
    assert metadata["input_name"] == session.get_inputs()[0].name
    assert outputs.shape == expected.shape
    np.testing.assert_allclose(outputs, expected, rtol=1e-5, atol=1e-5)
    if name.endswith("masked_multi_discrete"):  # forbidden logits pushed down by 1e8 (halved when tempered), the allowed ones untouched
        assert (outputs[masks == 0] < -4e7).all() and (outputs[masks == 1] > -1e3).all()


def test_mlp_policy_runtime_plays_a_gsde_models_noise_free_output_when_asked(kit, tmp_path):
    """SAC's gSDE exploring model (`sac.exploration: gsde`): output 0 carries this version's
    noise, action_dist_inputs_noise_free not; an evaluation episode plays the latter's mode
    (AgentSession sets PlayNoiseFree), every other step output 0, as onnxruntime computes them."""
    import torch

    from app.training.algorithms.sac.networks import SquashedGaussianActor
    from app.training.algorithms.sac.onnx_head import export_onnx as export_sac_onnx

    torch.manual_seed(0)
    actor = SquashedGaussianActor(BoxSpace(shape=(3,)), BoxSpace(shape=(2,), low=-1, high=3), (32, 16), gsde_log_std_init=-0.5)
    model = export_sac_onnx(actor, 7, exploration_noise=actor.exploration_noise(np.random.default_rng(1)))
    path = tmp_path / "gsde.onnx"
    path.write_bytes(model)
    observations = np.random.default_rng(2).uniform(-3, 3, (16, 3)).astype(np.float32)
    played, noise_free = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"obs": observations})
    assert np.abs(played[:, :2] - noise_free[:, :2]).mean() > 0.05  # the noise moves the means

    lines = [json.dumps({"obs": o.tolist(), "noise_free": i % 2 == 1}) for i, o in enumerate(observations)]
    result = onnx_run(path, [3], lines)
    assert result.returncode == 0, result.stderr
    outputs = np.array([json.loads(line) for line in result.stdout.splitlines()[1:]])
    expected = np.where((np.arange(16) % 2 == 1)[:, None], noise_free, played)
    np.testing.assert_allclose(outputs, expected, rtol=1e-5, atol=1e-5)


def test_mlp_policy_runtime_refuses_an_image_policy_pointing_to_sentis_or_thin_mode(kit, tmp_path):
    policy = ActorCritic(BoxSpace(shape=(3, 10, 10), dtype="uint8"), DiscreteSpace(n=4), (16,))
    path = tmp_path / "image.onnx"
    path.write_bytes(export_onnx(policy, 1))
    result = onnx_run(path, [3, 10, 10], [json.dumps([0.0] * 300)])
    assert result.returncode == 3, result
    assert "has a Conv node" in result.stderr and "Sentis" in result.stderr and "thin mode" in result.stderr, result.stderr


# -- Memory: recurrent modules ------------------------------------------------------------------

LSTM_MODEL = {"use_lstm": True, "lstm_cell_size": 8}


def test_mlp_policy_runtime_carries_a_recurrent_models_state_as_onnxruntime_does(kit, tmp_path):
    import torch

    torch.manual_seed(0)
    policy = ActorCritic(BoxSpace(shape=(4,)), DiscreteSpace(n=3), (16,), normalize_obs=True, lstm_cell_size=8)
    policy.obs_norm.update(torch.randn(50, 4) * 2 + 1)  # folded into the LSTM's input weights
    with torch.no_grad():  # weights far from the initial ones, so the comparison says something
        for parameter in policy.parameters():
            parameter.uniform_(-0.6, 0.6)
    model = export_onnx(policy, 5)
    path = tmp_path / "lstm.onnx"
    path.write_bytes(model)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["obs", "state_in"]
    assert [o.name for o in session.get_outputs()] == ["action_dist_inputs", "state_out"]

    steps, reset = 40, 25  # an episode of 25 steps, then another from zeros
    observations = np.random.default_rng(3).uniform(-3, 3, (steps, 4)).astype(np.float32)
    lines = [json.dumps({"obs": o.tolist(), **({"state_in": [0.0] * 16} if i == reset else {})}) for i, o in enumerate(observations)]
    result = onnx_run(path, [4], lines)  # OnnxRun feeds each step's state_out back itself
    assert result.returncode == 0, result.stderr
    header, *rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert header["state_size"] == "16" and len(rows) == steps

    state = np.zeros((1, 16), np.float32)
    for step, (observation, row) in enumerate(zip(observations, rows, strict=True)):
        if step == reset:
            state = np.zeros((1, 16), np.float32)
        outputs, state = session.run(None, {"obs": observation[None], "state_in": state})
        np.testing.assert_allclose(row["outputs"], outputs[0], rtol=1e-5, atol=1e-5, err_msg=f"step {step}")
        np.testing.assert_allclose(row["state_out"], state[0], rtol=1e-5, atol=1e-5, err_msg=f"step {step}")
    assert np.abs(state).max() > 0.1  # the state moved: the comparison says something


@pytest.mark.e2e
def test_local_inference_carries_a_recurrent_modules_state_and_the_gateway_trains_on_its_chunks(kit, tmp_path):
    # A few thousand steps, never the target: every chunk after the first EPISODES_AND_GET_STATE
    # that continues an episode needs its state_in, or the gateway answers ERROR and the example fails.
    with running_gateway(gateway_settings(tmp_path, model=LSTM_MODEL, train_batch_size=1000)) as gateway:
        with gateway.client("tcp") as client:
            assert client.request({"type": "GET_CONFIG"})["state_size"] == 16  # what AgentSession reads
        result = cartpole(kit, gateway.tcp_port, "--inference", "local", "--max-env-steps", "3000", target=1e9)
        after = wait_until(lambda: (m := metrics(gateway))["num_training_steps"] > 0 and m, 60, "a training step")
    assert result.returncode == 1, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"  # the budget, not an error
    assert "budget spent before the target" in result.stdout and "ERROR" not in result.stdout + result.stderr
    assert "inference: local" in result.stdout
    assert after["serving"]["actions_served_total"] == 0  # the LSTM ran in C#
    assert after["num_env_steps_sampled_lifetime"] > 0 and after["num_training_steps"] > 0
    # It played on through new model versions, the state kept (the versions it printed went up).
    assert after["weights_seq_no"] >= 2 and "v2 " in result.stdout


# -- A model bundled with the game: no gateway ---------------------------------------------


def play_onnx(model: Path, lines: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(["mono", str(BUILD / "PlayOnnx.exe"), str(model)],
                          input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120)  # fmt: skip


@pytest.mark.parametrize("gateway", ["cartpole", "masked-pick"])
def test_the_gateways_exported_model_plays_from_a_file_as_onnxruntime_computes_it(kit, tmp_path, gateway):
    # The gateway's plain ONNX file, as a game would bundle it; the C# side is given the
    # file's path only: input names, observation shape and action space come from the model.
    spaces = {} if gateway == "cartpole" else CHOICE_GATEWAYS["masked-pick"]
    with running_gateway(gateway_settings(tmp_path, **spaces)) as running:
        model = httpx.get(f"{running.base_url}/api/model.onnx", timeout=30).raise_for_status().content
    path = tmp_path / "policy.onnx"
    path.write_bytes(model)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    obs_size = 4 if gateway == "cartpole" else 12
    rng = np.random.default_rng(7)
    observations = rng.uniform(-3, 3, (32, obs_size)).astype(np.float32)
    inputs = {"obs": observations}
    if gateway == "cartpole":
        lines = [json.dumps(o.tolist()) for o in observations]
    else:
        masks = (rng.random((32, 6)) < 0.5).astype(np.float32)
        masks[np.arange(32), rng.integers(0, 6, 32)] = 1  # at least one allowed
        masks[:4] = 1
        inputs["action_mask"] = masks
        lines = [json.dumps({"obs": o.tolist(), "action_mask": m.tolist()}) for o, m in zip(observations, masks)]

    result = play_onnx(path, lines)
    assert result.returncode == 0, result.stderr
    header, *rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert header["input_name"] == "obs" and header["observation_shape"] == [obs_size]
    assert header["action_mask_input_name"] == (None if gateway == "cartpole" else "action_mask")
    assert header["action_space"] == ("Discrete(2)" if gateway == "cartpole" else "Discrete(6)")
    outputs = np.array([row["outputs"] for row in rows], dtype=np.float32)
    expected = session.run(None, inputs)[0]
    assert outputs.shape == expected.shape == (32, 2 if gateway == "cartpole" else 6)
    np.testing.assert_allclose(outputs, expected, rtol=1e-5, atol=1e-6)
    # OnnxPolicy plays the most likely action, never a forbidden one.
    actions = np.array([row["action"] for row in rows])
    np.testing.assert_array_equal(actions, expected.argmax(axis=1))
    if gateway != "cartpole":
        assert (masks[np.arange(32), actions] == 1).all()


# -- The Unity package ------------------------------------------------------------------------


def _meta_tool():
    return load_script(KIT / "tools" / "unity_meta.py", "unity_meta")


def test_the_unity_package_has_its_manifest_assemblies_and_sample():
    manifest = json.loads((PACKAGE / "package.json").read_text())
    assert manifest["name"] == "com.rllink.gateway-client"
    assert manifest["unity"] == "2021.3" and manifest["displayName"] and manifest["description"]
    assert [int(part) for part in manifest["version"].split(".")] and len(manifest["version"].split(".")) == 3
    [sample] = manifest["samples"]
    assert sample["path"] == "Samples~/CartPole" and (PACKAGE / sample["path"] / "CartPoleAgent.cs").is_file()

    runtime = json.loads((PACKAGE / "Runtime" / "RLlink.Runtime.asmdef").read_text())
    editor = json.loads((PACKAGE / "Editor" / "RLlink.Editor.asmdef").read_text())
    assert runtime["name"] == "RLlink.Runtime" and runtime["includePlatforms"] == []
    assert editor["name"] == "RLlink.Editor" and editor["includePlatforms"] == ["Editor"]
    assert editor["references"] == ["RLlink.Runtime"]  # by name: no GUIDs to keep in step
    defines = {(d["name"], d["define"]) for d in runtime["versionDefines"]}
    assert {("com.unity.sentis", "RLLINK_SENTIS"), ("com.unity.ai.inference", "RLLINK_SENTIS")} <= defines
    assert {"Unity.Sentis", "Unity.InferenceEngine"} <= set(runtime["references"])
    sentis = (PACKAGE / "Runtime" / "Unity" / "SentisPolicyRuntime.cs").read_text()
    assert sentis.count("#if RLLINK_SENTIS") == 1 and sentis.rstrip().endswith("#endif")
    assert sentis.index("#if RLLINK_SENTIS") < sentis.index("using Unity.Sentis;")

    # The stand-ins stay out of the package (a Unity project would get two UnityEngines).
    for source in PACKAGE.rglob("*.cs"):
        text = source.read_text()
        for stand_in in ("namespace UnityEngine", "namespace UnityEditor", "namespace Unity.Sentis", "RLLINK_STUBS"):
            assert stand_in not in text, f"{source.relative_to(PACKAGE)}: {stand_in}"
    assert not (KIT / "src").exists() and not (KIT / "unity").exists()  # one copy of the sources: the package's
    # The agent's pointer to its README leads somewhere.
    assert "clients/unity/README.md" in (PACKAGE / "Runtime" / "Unity" / "RLlinkAgent.cs").read_text()
    assert (PACKAGE / "README.md").is_file() and (PACKAGE / "CHANGELOG.md").is_file()


def test_every_asset_of_the_unity_package_has_its_meta_file():
    # Unity ignores an asset without its .meta in an immutable (Git-installed) package.
    tool = _meta_tool()
    assert tool.problems() == [], "run .venv/bin/python clients/csharp/tools/unity_meta.py"
    guids = {}
    for asset in tool.assets():
        meta = asset.with_name(asset.name + ".meta").read_text()
        assert meta == tool.meta_text(asset), f"{asset.relative_to(PACKAGE)}.meta differs from what unity_meta.py writes"
        guids[meta.split("guid: ")[1][:32]] = asset
    assert len(guids) == len(tool.assets())
    assert not list((PACKAGE / "Samples~").rglob("*.meta"))  # Unity writes those when a sample is imported
    jslib = (PACKAGE / "Runtime" / "Plugins" / "WebGL" / "RLlink.jslib.meta").read_text()
    assert "WebGL: WebGL\n    second:\n      enabled: 1" in jslib and "Any:\n    second:\n      enabled: 0" in jslib


def test_sentis_policy_runtime_compiles_only_with_rllink_sentis_under_both_namespaces(kit):
    # A type's name is in an assembly's metadata as UTF-8, NUL-terminated.
    plain = (UNITY_BUILD / "RLlink.Runtime.dll").read_bytes()
    assert b"SentisPolicyRuntime\x00" not in plain
    for variant, stand_in in (("Sentis", "Sentis.stub"), ("InferenceEngine", "InferenceEngine.stub")):
        checked = (UNITY_BUILD / f"RLlink.Runtime.{variant}.check.dll").read_bytes()
        assert b"SentisPolicyRuntime\x00" in checked and stand_in.encode() + b"\x00" in checked, variant


def agent_loop(*args: str, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    command = ["mono", str(UNITY_BUILD / "AgentLoop.exe"), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    print(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}")
    return result


@pytest.mark.e2e
@pytest.mark.parametrize("inference", ["thin", "local"])
def test_the_samples_rllinkagent_trains_cartpole_then_plays_the_export_without_a_gateway(kit, tmp_path, inference):
    with running_gateway(gateway_settings(tmp_path)) as gateway:
        result = agent_loop("train", "--host", "127.0.0.1", "--port", str(gateway.tcp_port), "--inference", inference,
                            "--target-return", str(TARGET), "--max-seconds", str(MAX_SECONDS))  # fmt: skip
        after = metrics(gateway)
        model = httpx.get(f"{gateway.base_url}/api/model.onnx", timeout=30).raise_for_status().content
    run = reached(result)
    assert run["mean"] >= TARGET and f"inference: {inference}" in result.stdout
    assert after["weights_seq_no"] >= 1
    if inference == "thin":
        assert after["serving"]["actions_served_total"] >= run["env_steps"]
    else:
        assert after["serving"]["actions_served_total"] == 0 and after["num_env_steps_sampled_lifetime"] > 0

    # The gateway is gone: the agent plays the exported policy from its bundledModel.
    path = tmp_path / "cartpole.onnx.bytes"
    path.write_bytes(model)
    played = agent_loop("play", "--model", str(path), "--episodes", "20")
    assert played.returncode == 0, played.stderr
    mean = float(played.stdout.split("mean return ")[1].split()[0])
    assert mean >= 100, played.stdout  # a random policy averages about 22


@pytest.mark.e2e
def test_the_inspectors_test_connection_shows_the_gateways_spaces_or_why_not(kit, tmp_path):
    with running_gateway(gateway_settings(tmp_path, auth_token=TOKEN)) as gateway:
        port = str(gateway.tcp_port)
        right = agent_loop("test-connection", "--port", port, "--token", TOKEN, timeout=60)
        via_url = agent_loop("test-connection", "--host", "ws://127.0.0.1:8000/rllink", "--port", port, "--token", TOKEN, timeout=60)
        wrong = agent_loop("test-connection", "--port", port, "--token", "nope", timeout=60)
        module = agent_loop("test-connection", "--port", port, "--token", TOKEN, "--module", "no_such_module", timeout=60)
    gone = agent_loop("test-connection", "--port", port, timeout=60)
    for ok in (right, via_url):
        assert ok.returncode == 0, ok
        assert f"ok: Connected to 127.0.0.1:{port}" in ok.stdout
        assert "Module 'default_policy': observations Box(shape [4]), actions Discrete(2)" in ok.stdout
    assert wrong.returncode == 1 and "[unauthorized]" in wrong.stdout and "Check the token" in wrong.stdout
    assert "nope" not in wrong.stdout and TOKEN not in right.stdout
    # The sample declares its spaces for the module it names: the gateway refuses a module it lacks.
    assert module.returncode == 1 and "module 'no_such_module', which the gateway does not have" in module.stdout
    assert gone.returncode == 1 and "[connection_closed]" in gone.stdout and "Is the gateway running" in gone.stdout


def test_the_inspectors_settings_checks(kit, tmp_path):
    mlp, image = tmp_path / "mlp.onnx", tmp_path / "image.onnx"
    mlp.write_bytes(next(m for n, m, _ in _models() if n == "cartpole"))
    image.write_bytes(export_onnx(ActorCritic(BoxSpace(shape=(3, 10, 10), dtype="uint8"), DiscreteSpace(n=4), (16,)), 1))
    result = agent_loop("settings", "--model", str(mlp), "--bad-model", str(image), timeout=60)
    assert result.returncode == 0, result.stderr
    cases = {row["case"]: row["issues"] for row in map(json.loads, result.stdout.splitlines())}

    def levels(case: str) -> list[str]:
        return [issue.split(":")[0] for issue in cases[case]]

    assert cases["defaults"] == [] and cases["webgl-url"] == []
    assert levels("empty-host") == ["Error"] and "host is empty" in cases["empty-host"][0]
    assert levels("bad-port") == ["Error"] and "70000" in cases["bad-port"][0]
    assert levels("decision-period-0") == ["Warning"]
    assert levels("webgl-tcp-host") == ["Error"] and "ws://HOST:8000/rllink" in cases["webgl-tcp-host"][0]
    assert levels("webgl-local") == ["Warning"] and "thin mode" in cases["webgl-local"][0]
    assert levels("url-in-editor") == ["Info"] and "TCP to 10.0.0.7:5555" in cases["url-in-editor"][0]
    assert levels("heuristic-alone") == ["Info"] and "no gateway" in cases["heuristic-alone"][0]
    assert levels("webgl-heuristic") == ["Warning"] and "without sending" in cases["webgl-heuristic"][0]
    assert levels("recording") == ["Info"] and "records each episode Heuristic() plays to demos.jsonl" in cases["recording"][0]
    assert levels("recording-thin") == ["Warning"] and "for inference Heuristic" in cases["recording-thin"][0]
    assert levels("webgl-recording")[0] == "Warning" and "no file system" in cases["webgl-recording"][0]
    assert levels("bundled") == ["Info"] and "policy version 3, action space Discrete(2)" in cases["bundled"][0]
    assert levels("bundled-unplayable") == ["Error"] and "Conv" in cases["bundled-unplayable"][0]
    assert cases["tcp-host"] == ["10.0.0.7", "127.0.0.1"]


@pytest.mark.e2e
def test_a_heuristic_agent_plays_itself_and_the_gateway_trains_on_its_logged_actions(kit, tmp_path):
    """The sample's Heuristic() (push the way the pole falls) plays; each action reaches the
    gateway as LOG_ACTION. The launch arguments win over the agent's own settings: port 1
    would fail, --rllink-port is the gateway's."""
    with running_gateway(gateway_settings(tmp_path)) as gateway:
        port = gateway.tcp_port
        result = agent_loop("train", "--port", "1", "--inference", "heuristic", "--target-return", "450",
                            "--rllink-port", str(port), "--rllink-time-scale", "8", "--rllink-env-index", "2")  # fmt: skip
        after = metrics(gateway)
    run = reached(result)
    assert f"inference: heuristic, connecting to 127.0.0.1:{port}, time scale 8, seed 2000" in result.stdout
    assert run["mean"] >= 450
    assert after["serving"]["actions_served_total"] == 0  # the game chose every action
    assert after["num_evaluation_episodes_lifetime"] == 0  # the game's own play is never an evaluation episode
    assert after["num_env_steps_sampled_lifetime"] == run["episodes"] * 500  # every episode balanced to the limit
    assert after["weights_seq_no"] >= 1 and after["num_env_steps_trained_lifetime"] > 0

    alone = agent_loop("play", "--heuristic", "--episodes", "3", timeout=60)  # host empty: no gateway at all
    assert alone.returncode == 0 and "played: mean return 500.0 over 3 episodes" in alone.stdout, alone

    bad = agent_loop("play", "--heuristic", "--rllink-time-scale", "fast", timeout=60)
    assert bad.returncode == 3 and "bad launch argument: --rllink-time-scale must be a number above 0, got 'fast'" in bad.stderr


@pytest.mark.e2e
def test_the_agents_declared_spaces_are_checked_by_the_gateway_at_connect(kit, tmp_path):
    other = {"type": "box", "shape": [3]}
    with running_gateway(gateway_settings(tmp_path, observation_space=other)) as gateway:
        refused = agent_loop("test-connection", "--port", str(gateway.tcp_port), timeout=60)
    assert refused.returncode == 1 and "[invalid_message]" in refused.stdout, refused
    assert 'declares observation_space {"type": "box", "shape": [4]}' in refused.stdout
    assert '"shape": [3]' in refused.stdout  # the gateway's side, named too


def test_the_ray_sensor_sees_a_wall_through_its_fan(kit):
    """Three rays over 90 degrees, 10 units long, a wall 5 ahead: the side rays meet it at
    5 / cos 45 = 7.07 (0.707 of their length), the middle one at 5; a wall beyond reach reads 1."""
    near = agent_loop("sensor", "--rays", "3", "--fov", "90", "--length", "10", "--wall", "5", timeout=60)
    far = agent_loop("sensor", "--rays", "4", "--fov", "90", "--length", "10", "--wall", "20", timeout=60)
    assert near.returncode == 0 and near.stdout.split() == ["0.7071", "0.5000", "0.7071"], near
    assert far.returncode == 0 and far.stdout.split() == ["1.0000"] * 4, far


# -- Demonstrations ------------------------------------------------------------------------------


def played_episodes(stdout: str) -> list[tuple[float, int]]:
    """AgentLoop play's lines `episode I: return R, steps S`, as (R, S)."""
    rows = [line.replace(",", "").split() for line in stdout.splitlines() if line.startswith("episode ")]
    return [(float(words[3]), int(words[5])) for words in rows]


@pytest.mark.e2e
def test_a_heuristic_agent_records_demonstrations_that_pre_train_a_gateway_its_export_then_balances(kit, tmp_path):
    demos = tmp_path / "cartpole_demos.jsonl"
    args = ("--record-demos", str(demos), "--agent-id", "cart_0", "--module", "default_policy")
    first = agent_loop("play", "--heuristic", "--episodes", "3", *args, timeout=120)
    again = agent_loop("play", "--heuristic", "--episodes", "2", *args, timeout=120)  # a second session appends
    assert first.returncode == 0 and again.returncode == 0, (first, again)
    played = played_episodes(first.stdout) + played_episodes(again.stdout)
    assert len(played) == 5

    lines = demos.read_text().splitlines()
    assert lines[0].startswith("# rllink demonstrations") and sum(line.startswith("#") for line in lines) == 1
    chunks = load_demos(demos, CARTPOLE)  # the gateway's own loader and checks
    assert [(sum(c.rewards), len(c.actions)) for c in chunks] == played
    for c in chunks:
        assert len(c.obs) == len(c.actions) + 1 and c.agent_id == "cart_0" and c.module_id == "default_policy"
        assert c.is_truncated and not c.is_terminated  # the heuristic balances to the 500-step limit
        assert set(np.unique(c.actions)) == {0, 1}
    assert len({c.episode_id for c in chunks}) == 5

    # A real gateway pre-trains on the file; the agent plays its export with no gateway and no RL step.
    log = tmp_path / "gateway.log"
    with gateway_process(tmp_path / "checkpoints", log, "--demos", str(demos)) as gateway:
        model = httpx.get(f"{gateway.base_url}/api/model.onnx", timeout=30).raise_for_status().content
    assert "pre-trained by behavioural cloning on 2500 steps of" in log.read_text(), log.read_text()
    path = tmp_path / "pretrained.onnx.bytes"
    path.write_bytes(model)
    result = agent_loop("play", "--model", str(path), "--episodes", "5", timeout=120)
    assert result.returncode == 0, result
    assert np.mean([r for r, _ in played_episodes(result.stdout)]) >= 150, result.stdout  # random play: about 22

    unwritable = agent_loop("play", "--heuristic", "--record-demos", str(tmp_path / "no_such_dir" / "d.jsonl"), timeout=60)
    assert unwritable.returncode == 3 and f"cannot record demonstrations to {tmp_path / 'no_such_dir' / 'd.jsonl'}" in unwritable.stderr


def test_the_console_example_records_masked_demonstrations_the_gateways_loader_takes(kit, tmp_path):
    demos = tmp_path / "masked_pick.jsonl"
    command = ["mono", str(kit), "--env", "masked-pick", "--record-demos", str(demos), "--episodes", "6", "--seed", "3"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result
    reported = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert f"recorded: 6 episodes, 60 steps to {demos}" in result.stdout

    masked = PolicySet([Module("default_policy", BoxSpace(shape=(12,)), DiscreteSpace(n=6), PPOConfig(), action_masking=True)])
    chunks = load_demos(demos, masked)  # checks each mask allows its step's action
    assert len(chunks) == 6
    for chunk, row in zip(chunks, reported, strict=True):
        assert len(chunk.actions) == row["steps"] == 10 and chunk.is_truncated
        assert sum(chunk.rewards) == pytest.approx(row["return"], abs=1e-4)
        mask = np.asarray(chunk.action_mask)
        obs = np.asarray(chunk.obs)
        assert mask.shape == (10, 6) and (mask.sum(axis=1) == 3).all()
        np.testing.assert_array_equal(mask, obs[:-1, 6:])  # the env shows its mask in the observation
        # The scripted controller picks the most valuable allowed item, and that is what was recorded.
        np.testing.assert_array_equal(chunk.actions, np.where(mask == 1, obs[:-1, :6], -1).argmax(axis=1))
        np.testing.assert_allclose(chunk.rewards, obs[np.arange(10), chunk.actions], rtol=0, atol=0)
    # A gateway without action_masking refuses the file's masks, naming the line.
    with pytest.raises(DemoFileError, match=r"line 2: action_mask: action_mask given, but module 'default_policy' takes no action masks"):
        load_demos(demos, PolicySet.single(BoxSpace(shape=(12,)), DiscreteSpace(n=6)))

    unwritable = subprocess.run(["mono", str(kit), "--record-demos", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert unwritable.returncode == 2 and f"error: cannot record demonstrations to {tmp_path}" in unwritable.stderr
