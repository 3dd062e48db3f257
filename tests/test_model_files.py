"""A trained model lands on disk as .onnx, and `rllink-gateway export` writes one from a
run without a server: both give the outputs of the model the gateway sent in SET_STATE."""

from __future__ import annotations

import base64
import gzip
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from app.settings.config import Settings
from app.training.model_files import LATEST_FILE

from .helpers import chunk, gateway_settings, running_gateway, wait_until

OBS = np.random.default_rng(0).uniform(-1, 1, (16, 4)).astype(np.float32)


def outputs(model: bytes) -> np.ndarray:
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: OBS})[0]


def set_state_model(reply: dict) -> bytes:
    return gzip.decompress(base64.b64decode(reply["onnx_file"]))


def train_versions(gateway, count: int) -> dict[int, bytes]:
    """`count` training steps over TCP: each version's model as SET_STATE carried it."""
    sent = {}
    with gateway.client("tcp") as client:
        client.request({"type": "GET_CONFIG"})
        for i in range(count):
            reply = client.request({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(20, seed=i)]})
            sent[reply["weights_seq_no"]] = set_state_model(reply)
    return sent


def export(runs: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", "export", "--runs-dir", str(runs), "--out", str(out), *args],
        capture_output=True, text=True, timeout=120,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, dict[int, bytes]]:
    """A run of 6 versions, 3 kept as files; stopped (its checkpoint saved)."""
    tmp = tmp_path_factory.mktemp("run")
    settings = Settings(http_port=0, tcp_port=0, run_id="r1", runs_dir=tmp / "runs", models_kept=3, train_batch_size=20)
    with running_gateway(settings) as gateway:
        sent = train_versions(gateway, 6)
        models = tmp / "runs" / "r1" / "models" / "default_policy"
        newest = max(sent)
        wait_until(lambda: (models / f"v{newest}.onnx").exists(), 30, "the newest version's file")
    return tmp / "runs", sent


def test_every_version_is_written_and_the_last_few_kept(run):
    runs, sent = run
    models = runs / "r1" / "models" / "default_policy"
    newest = max(sent)
    assert (models / LATEST_FILE).read_bytes() == sent[newest]
    kept = sorted(int(p.stem[1:]) for p in models.glob("v*.onnx"))
    assert kept == sorted(sent)[-3:]
    for version in kept:
        assert (models / f"v{version}.onnx").read_bytes() == sent[version]
    assert not list(models.glob("*.tmp"))


def test_export_from_the_checkpoint_gives_the_outputs_of_the_last_set_state(run, tmp_path):
    runs, sent = run
    out = tmp_path / "model.onnx"
    done = export(runs, out, "--run-id", "r1")
    assert done.returncode == 0, done.stderr
    newest = max(sent)
    assert f"version {newest} (from the checkpoint)" in done.stdout
    np.testing.assert_allclose(outputs(out.read_bytes()), outputs(sent[newest]), rtol=1e-5, atol=1e-6)


def test_export_of_a_kept_version_is_that_version(run, tmp_path):
    runs, sent = run
    older = sorted(sent)[-2]
    out = tmp_path / "sub" / "older.onnx"
    done = export(runs, out, "--run-id", "r1", "--module", "default_policy", "--version", str(older))
    assert done.returncode == 0, done.stderr
    assert out.read_bytes() == sent[older]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--run-id", "nope"], "no run 'nope'"),
        (["--run-id", "r1", "--module", "nobody"], "has no module 'nobody'; its modules: default_policy"),
        (["--run-id", "r1", "--version", "1"], "version 1 of 'default_policy' is not kept"),
    ],
)
def test_what_cannot_be_exported_is_one_line_and_exit_2(run, tmp_path, args, says):
    runs, _ = run
    done = export(runs, tmp_path / "x.onnx", *args)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "x.onnx").exists()


def test_models_go_beside_the_checkpoints_without_a_run(tmp_path):
    with running_gateway(gateway_settings(tmp_path, models_kept=0, train_batch_size=20)) as gateway:
        sent = train_versions(gateway, 2)
        latest = tmp_path / "models" / "default_policy" / LATEST_FILE
        wait_until(lambda: latest.exists() and latest.read_bytes() == sent[max(sent)], 30, "latest.onnx of the last version")
    assert [p.name for p in latest.parent.iterdir()] == [LATEST_FILE]  # models_kept 0: no v<N>.onnx
