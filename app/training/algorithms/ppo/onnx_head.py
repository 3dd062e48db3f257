"""PPO's policy (app/training/policy.py's ActorCritic) as ONNX: Gemm and Tanh layers (after the image
encoder, if any), the observation normaliser folded into the first Gemm, the action mask's term;
with memory, one step of the LSTM before them, written out (Slice, Gemm, Add, Sigmoid, Tanh, Mul,
Concat: no LSTM operator, so that the kits' own small runtimes can run it too)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import numpy as np
from torch import nn

from app.spaces.models import ActionSpace, BoxSpace, DictSpace, MultiDiscreteSpace
from app.spaces.onnx_names import OUTPUT_NAME, STATE_INPUT, STATE_OUTPUT
from app.training import onnx_export
from app.training.onnx_export import OnnxGraph, encoder_features, linear_weights, masked_output
from app.training.policy import ActorCritic
from app.training.policy_state import PolicyState


@dataclass(frozen=True)
class ActorCriticHead:
    """The policy's actor as export_onnx writes it (onnx_export.OnnxActor), with an action_mask input if `action_masking`."""

    policy: ActorCritic
    action_masking: bool = False
    outputs: ClassVar[tuple[str, ...]] = (OUTPUT_NAME,)
    metadata: ClassVar[Mapping[str, str]] = MappingProxyType({})

    @property
    def observation_space(self) -> BoxSpace | DictSpace:
        return self.policy.observation_space

    @property
    def action_space(self) -> ActionSpace:
        return self.policy.action_space

    @property
    def width(self) -> int:
        return self.policy.num_dist_inputs

    @property
    def state_size(self) -> int:
        return self.policy.state_size

    def output_layout(self) -> str:
        policy = self.policy
        if isinstance(policy.action_space, MultiDiscreteSpace):
            nvec = list(policy.action_space.nvec)
            return (
                f"[batch, {policy.num_dist_inputs}]: the logits of each sub-action of MultiDiscrete({nvec}) one after the "
                "other (multi_categorical); sample each from the softmax of its own logits"
            )
        if policy.is_discrete:
            return f"[batch, {self.width}]: logits of a Categorical; sample from softmax(logits)"
        k = 2 * policy.action_space.flat_dim
        half = k // 2
        columns = f"[batch, {k}]: columns 0..{half - 1} the mean, columns {half}..{k - 1} the log std of a diagonal Gaussian"
        return f"{columns}; sample mean + exp(log_std) * N(0, 1)"

    def write(self, graph: OnnxGraph, x: str) -> None:
        """The image encoder's features, if any; Gemm-Tanh layers; the observation normaliser, if any,
        folded into the first Gemm (W / std, b - W @ mean / std); for a Box the last Gemm also emits
        log_std (zero weight rows whose bias is log_std). Masked: logits + (action_mask - 1) * MASK_PENALTY."""
        policy = self.policy
        if policy.encoder is not None:
            x = encoder_features(graph, x, policy.encoder)
        layers = [linear_weights(m) for m in policy.actor if isinstance(m, nn.Linear)]
        if policy.lstm is not None:
            x = lstm_step(graph, x, policy)  # the normaliser, if any, folded into its input weights
        elif policy.obs_norm is not None:  # fold (obs - mean) / std into the first layer
            layers[0] = folded(*layers[0], policy)
        if policy.log_std is not None:
            weight, bias = layers[-1]
            log_std = policy.log_std.detach().cpu().numpy()
            layers[-1] = (np.concatenate([weight, np.zeros_like(weight)]), np.concatenate([bias, log_std]))
        for i, (weight, bias) in enumerate(layers[:-1]):
            x = graph.node("Tanh", [graph.gemm(x, weight, bias, f"gemm{i}")], f"tanh{i}")
        if not self.action_masking:
            graph.gemm(x, *layers[-1], OUTPUT_NAME)
            return
        masked_output(graph, graph.gemm(x, *layers[-1], "logits"))


def folded(weight: np.ndarray, bias: np.ndarray, policy: ActorCritic) -> tuple[np.ndarray, np.ndarray]:
    """A layer on the normalised observation as one on the raw one: W / std, b - W @ mean / std."""
    assert policy.obs_norm is not None
    inverse_std, mean = (t.detach().cpu().numpy() for t in policy.obs_norm.scale_and_shift())
    return weight * inverse_std, bias - (weight * inverse_std) @ mean


def lstm_step(graph: OnnxGraph, x: str, policy: ActorCritic) -> str:
    """One step of the policy's LSTM from `state_in` ([h, c]); writes `state_out` ([h', c'])
    and returns h', the heads' input. PyTorch's gates, i, f, g, o in that order:
    gates = x W_ih^T + b_ih + h W_hh^T + b_hh; c' = sigmoid(f) c + sigmoid(i) tanh(g);
    h' = sigmoid(o) tanh(c')."""
    lstm = policy.lstm
    assert lstm is not None
    hidden = lstm.hidden_size
    w_ih, w_hh = lstm.weight_ih_l0.detach().cpu().numpy(), lstm.weight_hh_l0.detach().cpu().numpy()
    b_ih, b_hh = lstm.bias_ih_l0.detach().cpu().numpy(), lstm.bias_hh_l0.detach().cpu().numpy()
    if policy.obs_norm is not None:
        w_ih, b_ih = folded(w_ih, b_ih, policy)

    def part(tensor: str, index: int, name: str) -> str:
        start, end = graph.ints([index * hidden], f"{name}_start"), graph.ints([(index + 1) * hidden], f"{name}_end")
        return graph.node("Slice", [tensor, start, end, graph.ints([1], f"{name}_axis")], name)

    h, c = part(STATE_INPUT, 0, "h"), part(STATE_INPUT, 1, "c")
    gates = graph.node("Add", [graph.gemm(x, w_ih, b_ih + b_hh, "gates_x"), graph.gemm(h, w_hh, np.zeros_like(b_hh), "gates_h")], "gates")
    i, f, o = (graph.node("Sigmoid", [part(gates, k, f"gate_{k}")], f"gate_{name}") for k, name in ((0, "i"), (1, "f"), (3, "o")))
    g = graph.node("Tanh", [part(gates, 2, "gate_2")], "gate_g")
    c_next = graph.node("Add", [graph.node("Mul", [f, c], "f_c"), graph.node("Mul", [i, g], "i_g")], "c_next")
    h_next = graph.node("Mul", [o, graph.node("Tanh", [c_next], "tanh_c")], "h_next")
    graph.node("Concat", [h_next, c_next], STATE_OUTPUT, axis=1)
    return h_next


def export_onnx(policy: ActorCritic, weights_seq_no: int, input_name: str = "obs", action_masking: bool = False) -> bytes:
    """The policy's ONNX model (onnx_export.export_onnx)."""
    return onnx_export.export_onnx(ActorCriticHead(policy, action_masking), weights_seq_no, input_name)


def policy_state(policy: ActorCritic, weights_seq_no: int, input_name: str, action_masking: bool = False) -> PolicyState:
    """The policy exported and packed for SET_STATE (onnx_export.policy_state)."""
    return onnx_export.policy_state(ActorCriticHead(policy, action_masking), weights_seq_no, input_name)
