"""The ONNX policy built from the weights computes what the torch policy computes."""

from __future__ import annotations

import json
import time

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from app.spaces.models import BoxSpace, DiscreteSpace
from app.training.algorithms.ppo.onnx_head import export_onnx, policy_state
from app.training.onnx_export import OUTPUT_NAME, load_payload
from app.training.policy import OBS_MIN_STD, ActorCritic
from app.training.policy_state import set_state_payload

SPACES = {
    "discrete": (BoxSpace(shape=(4,)), DiscreteSpace(n=2)),
    "box": (BoxSpace(shape=(3,)), BoxSpace(shape=(1,), low=-2, high=2)),
    "image-like obs, 2-d box actions": (BoxSpace(shape=(2, 3)), BoxSpace(shape=(2,))),
    "4-d obs (flattened: not a grid), discrete": (BoxSpace(shape=(2, 1, 2, 2)), DiscreteSpace(n=5)),
}
ENGINE_OPS = {"Gemm", "Tanh", "Flatten"}  # all in Unity Sentis' and onnxruntime-web's lists


def trained_looking_policy(observation_space, action_space, hidden_sizes=(64, 64), normalize_obs=False) -> ActorCritic:
    """A policy whose weights are not the near-zero output layer of a fresh one (and whose
    observation statistics, if it normalises, are far from 0 and 1)."""
    torch.manual_seed(0)
    policy = ActorCritic(observation_space, action_space, hidden_sizes, normalize_obs)
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    if normalize_obs:
        dim = observation_space.flat_dim
        policy.obs_norm.update(torch.randn(500, dim) * torch.linspace(0.1, 20, dim) + torch.linspace(-5, 5, dim))
    return policy


def run_onnx(onnx_bytes: bytes, input_name: str, obs: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    (output,) = session.run([OUTPUT_NAME], {input_name: obs})
    return output


@pytest.mark.parametrize("input_name", ["obs", "onnx::Gemm_0", "gemm0", "tanh0"])  # the last two: internal names once
@pytest.mark.parametrize("spaces", SPACES.values(), ids=SPACES.keys())
@pytest.mark.parametrize("batch", [1, 32])
@pytest.mark.parametrize("normalize_obs", [False, True], ids=["raw", "normalised"])
def test_onnx_matches_torch(spaces, input_name, batch, normalize_obs):
    policy = trained_looking_policy(*spaces, normalize_obs=normalize_obs)
    obs = np.random.default_rng(batch).standard_normal((batch, *spaces[0].shape)).astype(np.float32) * 10
    expected = policy(torch.from_numpy(obs)).detach().numpy()
    actual = run_onnx(export_onnx(policy, 7, input_name), input_name, obs)
    assert actual.shape == (batch, policy.num_dist_inputs)
    np.testing.assert_allclose(actual, expected, atol=1e-5, rtol=0)


def test_a_feature_constant_in_training_is_divided_by_at_least_the_floor_in_torch_and_onnx():
    # A flag never set while training (std 0): when it first changes by 1, the normalised
    # input moves by at most 1 / OBS_MIN_STD, not by 1 / sqrt(epsilon) = 10,000.
    policy = ActorCritic(*SPACES["discrete"], (64, 64), normalize_obs=True)
    seen = torch.randn(2000, 4)
    seen[:, 0] = 0.0
    policy.obs_norm.update(seen)
    changed = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    normalised = policy.obs_norm(changed) - policy.obs_norm(torch.zeros(1, 4))
    assert normalised[0, 0].item() == pytest.approx(1 / OBS_MIN_STD, rel=1e-4)
    assert normalised[0, 1:].abs().max().item() == 0.0
    # The export folds the same scale into its first layer.
    obs = changed.numpy()
    np.testing.assert_allclose(run_onnx(export_onnx(policy, 1, "obs"), "obs", obs), policy(changed).detach().numpy(), atol=1e-5)


def test_box_output_is_mean_then_the_learned_log_std():
    policy = trained_looking_policy(BoxSpace(shape=(3,)), BoxSpace(shape=(2,)))
    obs = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    output = run_onnx(export_onnx(policy, 0), "obs", obs)
    mean, log_std = output[:, :2], output[:, 2:]
    np.testing.assert_array_equal(log_std, np.broadcast_to(policy.log_std.detach().numpy(), (5, 2)))
    np.testing.assert_allclose(mean, policy.actor(torch.from_numpy(obs)).detach().numpy(), atol=1e-5)


@pytest.mark.parametrize("spaces", SPACES.values(), ids=SPACES.keys())
def test_model_is_valid_small_opset_with_named_dynamic_batch(spaces):
    model = onnx.load_from_string(export_onnx(trained_looking_policy(*spaces), 3, "onnx::Gemm_0"))
    onnx.checker.check_model(model, full_check=True)
    assert all(opset.version <= 15 for opset in model.opset_import if opset.domain in ("", "ai.onnx"))
    assert {node.op_type for node in model.graph.node} <= ENGINE_OPS
    (graph_input,) = model.graph.input
    (graph_output,) = model.graph.output
    assert graph_input.name == "onnx::Gemm_0" and graph_output.name == OUTPUT_NAME
    input_dims = graph_input.type.tensor_type.shape.dim
    assert input_dims[0].dim_param == "batch"
    assert [d.dim_value for d in input_dims[1:]] == list(spaces[0].shape)
    output_dims = graph_output.type.tensor_type.shape.dim
    assert output_dims[0].dim_param == "batch" and output_dims[1].dim_value > 0


def test_metadata_carries_version_spaces_and_layout():
    observation_space, action_space = SPACES["box"]
    model = onnx.load_from_string(export_onnx(trained_looking_policy(observation_space, action_space), 42))
    props = {p.key: p.value for p in model.metadata_props}
    assert props["weights_seq_no"] == "42"
    assert BoxSpace.model_validate_json(props["observation_space"]) == observation_space
    assert BoxSpace.model_validate_json(props["action_space"]) == action_space
    assert json.loads(props["output_names"]) == [OUTPUT_NAME]
    assert "mean" in props["output_layout"] and "log std" in props["output_layout"]
    discrete = onnx.load_from_string(export_onnx(trained_looking_policy(*SPACES["discrete"]), 0))
    assert "logits" in {p.key: p.value for p in discrete.metadata_props}["output_layout"]


def test_set_state_payload_round_trips():
    policy = trained_looking_policy(*SPACES["discrete"])
    state = policy_state(policy, 5, "obs")
    assert state.onnx_gzip_b64 == set_state_payload(state.onnx_bytes)
    assert load_payload(state.onnx_gzip_b64).SerializeToString() == state.onnx_bytes
    assert state.onnx_gzip_b64.isascii() and len(state.onnx_gzip_b64) < 2 * len(state.onnx_bytes)


def test_export_of_the_default_policy_takes_milliseconds():
    policy = ActorCritic(*SPACES["discrete"], hidden_sizes=(64, 64))
    timings = []
    for _ in range(20):
        started = time.perf_counter()
        set_state_payload(export_onnx(policy, 1))
        timings.append(time.perf_counter() - started)
    assert sorted(timings)[len(timings) // 2] < 0.02  # measured ~1 ms with the payload
