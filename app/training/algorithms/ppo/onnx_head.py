"""PPO's policy (app/training/policy.py's ActorCritic) as ONNX: Gemm and Tanh layers (after the image
encoder, if any), the observation normaliser folded into the first Gemm, the action mask's term."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import numpy as np
from torch import nn

from app.spaces.models import ActionSpace, BoxSpace, DictSpace, MultiDiscreteSpace
from app.spaces.onnx_names import OUTPUT_NAME
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
        if policy.obs_norm is not None:  # fold (obs - mean) / std into the first layer
            inverse_std, mean = (t.detach().cpu().numpy() for t in policy.obs_norm.scale_and_shift())
            weight, bias = layers[0]
            layers[0] = (weight * inverse_std, bias - (weight * inverse_std) @ mean)
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


def export_onnx(policy: ActorCritic, weights_seq_no: int, input_name: str = "obs", action_masking: bool = False) -> bytes:
    """The policy's ONNX model (onnx_export.export_onnx)."""
    return onnx_export.export_onnx(ActorCriticHead(policy, action_masking), weights_seq_no, input_name)


def policy_state(policy: ActorCritic, weights_seq_no: int, input_name: str, action_masking: bool = False) -> PolicyState:
    """The policy exported and packed for SET_STATE (onnx_export.policy_state)."""
    return onnx_export.policy_state(ActorCriticHead(policy, action_masking), weights_seq_no, input_name)
