"""The C# kit (clients/csharp/) in its real runtime: built with mono's mcs, the CartPole
example trains against a real gateway over TCP.

- Thin mode (the gateway acts), local inference (the kit's MlpPolicyRuntime runs each
  SET_STATE model in C#), and a batched GET_ACTION for several carts each reach a mean
  return of 200 over 20 episodes, and the gateway trained on what they sent.
- Auth: with the right token it trains; a wrong or missing token reaches the game as the
  kit's RLlinkException with the gateway's code (`unauthorized`), and the example exits 3
  saying so. A gateway limit (`too_many_episodes`) reaches it the same way.
- A connection cut mid-training: the kit reconnects and training goes on.
- TLS with a pinned self-signed certificate.
- MlpPolicyRuntime computes what onnxruntime computes on the gateway's models.

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

from app.spaces import BoxSpace, DiscreteSpace
from app.training.onnx_export import export_onnx
from app.training.policy import ActorCritic

from .helpers import CuttingProxy, RunningGateway, gateway_settings, running_gateway

KIT = Path(__file__).resolve().parent.parent / "clients" / "csharp"
BUILD = KIT / "build"
MISSING = [tool for tool in ("mcs", "mono") if shutil.which(tool) is None]

pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"no {' or '.join(MISSING)}: apt-get install -y mono-mcs mono-runtime"
)

TARGET = 200
MAX_SECONDS = 180  # the example's own budget: it exits 1 when spent
RUN_TIMEOUT_S = 240  # a hung example fails the test here, not at pytest's 300 s


@pytest.fixture(scope="module")
def kit() -> Path:
    """build.sh, once per module; the path of CartPole.exe."""
    result = subprocess.run(["bash", str(KIT / "build.sh")], capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, f"build.sh failed:\n{result.stdout}\n{result.stderr}"
    for name in ("RLlink.dll", "CartPole.exe", "OnnxRun.exe", "RLlinkUnity.check.dll"):
        assert (BUILD / name).is_file(), name
    return BUILD / "CartPole.exe"


def cartpole(exe: Path, port: int, *args: str, target: float = TARGET) -> subprocess.CompletedProcess:
    command = ["mono", str(exe), "--host", "127.0.0.1", "--port", str(port),
               "--target-return", str(target), "--max-seconds", str(MAX_SECONDS), *args]
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


@pytest.mark.e2e
def test_the_csharp_cartpole_trains_in_thin_mode_over_tcp(kit, tmp_path):
    with running_gateway(gateway_settings(tmp_path)) as gateway:
        result = cartpole(kit, gateway.tcp_port)
        after = metrics(gateway)
    run = reached(result)
    assert run["mean"] >= TARGET
    assert "inference: thin" in result.stdout
    # The gateway chose every action and trained on the episodes it built from them.
    assert after["serving"]["actions_served_total"] >= run["env_steps"]
    assert after["num_training_steps"] >= 1 and after["weights_seq_no"] >= 1
    assert after["num_env_steps_trained_lifetime"] > 0
    assert after["serving"]["episodes_ended"]["terminated"] + after["serving"]["episodes_ended"].get("truncated", 0) >= run["episodes"]


@pytest.mark.e2e
def test_the_csharp_cartpole_trains_with_local_inference(kit, tmp_path):
    with running_gateway(gateway_settings(tmp_path)) as gateway:
        result = cartpole(kit, gateway.tcp_port, "--inference", "local")
        after = metrics(gateway)
    run = reached(result)
    assert "inference: local" in result.stdout
    # The policy ran in C#: the gateway served no action, yet trained on the experience.
    assert after["serving"]["actions_served_total"] == 0
    assert after["weights_seq_no"] >= 1
    assert 0 < after["num_env_steps_sampled_lifetime"] <= run["env_steps"]
    assert after["num_env_steps_sampled_lifetime"] % 500 == 0  # whole EPISODES_AND_GET_STATE batches


@pytest.mark.e2e
def test_the_csharp_cartpole_trains_several_carts_with_batched_get_action(kit, tmp_path):
    with running_gateway(gateway_settings(tmp_path)) as gateway:
        result = cartpole(kit, gateway.tcp_port, "--envs", "4")
        after = metrics(gateway)
    reached(result)
    assert after["weights_seq_no"] >= 1
    assert after["serving"]["inference_batch_size_mean"] > 1.5  # four observations per request


# -- Auth and errors ----------------------------------------------------------------------

TOKEN = "kit-secret-7"


@pytest.mark.e2e
def test_with_auth_on_the_right_token_trains_and_a_wrong_or_missing_one_is_a_clear_error(kit, tmp_path):
    with running_gateway(gateway_settings(tmp_path, auth_token=TOKEN)) as gateway:
        wrong = cartpole(kit, gateway.tcp_port, "--token", "not-the-token")
        missing = cartpole(kit, gateway.tcp_port)
        right = cartpole(kit, gateway.tcp_port, "--token", TOKEN)
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
        proxy = CuttingProxy(gateway.tcp_port, cut_after=150_000)  # about 1,000 thin steps in
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
    )
    settings = gateway_settings(tmp_path, tls_certfile=cert, tls_keyfile=key)
    with running_gateway(settings) as gateway:
        result = cartpole(kit, gateway.tcp_port, "--tls-cert", str(cert), target=100)
        plain = cartpole(kit, gateway.tcp_port, target=100)  # no TLS: the bridge does not answer plain RLlink
    reached(result)
    assert plain.returncode == 3 and "[connection_closed]" in plain.stderr


# -- The kit's ONNX runtime ------------------------------------------------------------------


def _models() -> list[tuple[str, bytes, list[int]]]:
    """The gateway's exports: CartPole's (Gemm, Tanh; logits) and a Box policy on 2x3
    observations (Flatten; mean and log std), with random weights."""
    import torch

    torch.manual_seed(0)
    cartpole_policy = ActorCritic(BoxSpace(shape=(4,)), DiscreteSpace(n=2), (64, 64))
    box_policy = ActorCritic(BoxSpace(shape=(2, 3)), BoxSpace(shape=(2,), low=-1.0, high=1.0), (32, 16))
    with torch.no_grad():  # weights far from the initial near-zero outputs, so the comparison says something
        for parameter in [*cartpole_policy.parameters(), *box_policy.parameters()]:
            parameter.uniform_(-0.5, 0.5)
    return [
        ("cartpole", export_onnx(cartpole_policy, 3), [4]),
        ("box", export_onnx(box_policy, 4, input_name="onnx::Gemm_0"), [2, 3]),
    ]


@pytest.mark.parametrize("name", ["cartpole", "box"])
def test_mlp_policy_runtime_computes_what_onnxruntime_computes(kit, tmp_path, name):
    model, shape = next((m, s) for n, m, s in _models() if n == name)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(model)
    rng = np.random.default_rng(1)
    observations = rng.uniform(-3, 3, (64, *shape)).astype(np.float32)
    stdin = "\n".join(json.dumps(o.ravel().tolist()) for o in observations) + "\n"
    result = subprocess.run(["mono", str(BUILD / "OnnxRun.exe"), str(path), "x".join(map(str, shape))],
                            input=stdin, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    metadata, outputs = json.loads(lines[0]), np.array([json.loads(line) for line in lines[1:]])

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    expected = session.run(None, {session.get_inputs()[0].name: observations})[0]
    assert metadata["input_name"] == session.get_inputs()[0].name
    assert outputs.shape == expected.shape
    np.testing.assert_allclose(outputs, expected, rtol=1e-5, atol=1e-5)
