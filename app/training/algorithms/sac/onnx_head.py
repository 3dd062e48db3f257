"""SAC's actor (networks.py's SquashedGaussianActor) as ONNX: Gemm, Relu, Tanh, Mul, Add and Concat
(Gemm, Relu, Mul, Log and Concat with gSDE, whose SET_STATE model has the version's drawn noise in its mean Gemm)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from app.spaces.models import BoxSpace
from app.spaces.onnx_names import NOISE_FREE_OUTPUT, OUTPUT_NAME
from app.training import onnx_export
from app.training.algorithms.sac.networks import GSDE_VARIANCE_EPS, LOG_STD_MAX, LOG_STD_MIN, SquashedGaussianActor
from app.training.onnx_export import OnnxGraph, linear_weights, relu_layers
from app.training.policy_state import PolicyState

GSDE_EXPLORING_NOTE = (
    "gsde: this version's exploration noise features(s) @ theta is in the mean and the log std is small; "
    f"output {NOISE_FREE_OUTPUT} is the same without the noise (evaluation episodes play its mode); "
    "the noise-free policy is GET /api/model.onnx"
)


@dataclass(frozen=True, eq=False)  # eq=False: an array field
class SquashedGaussianHead:
    """The actor as export_onnx writes it (onnx_export.OnnxActor); with `exploration_noise` (gSDE's drawn
    theta) the exploring model clients play, and a second output without the noise."""

    actor: SquashedGaussianActor
    exploration_noise: np.ndarray | None = None
    action_masking: ClassVar[bool] = False
    state_size: ClassVar[int] = 0  # no memory

    @property
    def observation_space(self) -> BoxSpace:
        return self.actor.observation_space

    @property
    def action_space(self) -> BoxSpace:
        return self.actor.action_space

    @property
    def width(self) -> int:
        return 2 * self.actor.action_space.flat_dim

    @property
    def outputs(self) -> tuple[str, ...]:
        return (OUTPUT_NAME,) if self.exploration_noise is None else (OUTPUT_NAME, NOISE_FREE_OUTPUT)

    @property
    def metadata(self) -> Mapping[str, str]:
        return MappingProxyType({} if self.exploration_noise is None else {"exploration": GSDE_EXPLORING_NOTE})

    def output_layout(self) -> str:
        k = 2 * self.action_space.flat_dim
        half = k // 2
        columns = f"[batch, {k}]: columns 0..{half - 1} the mean, columns {half}..{k - 1} the log std of a diagonal Gaussian"
        space = self.action_space
        return f"{columns} over u; the action is tanh(u) scaled to [{space.low}, {space.high}] (squashed_gaussian)"

    def write(self, graph: OnnxGraph, x: str) -> None:
        """Gemm-Relu layers, a mean head, and a log std head squashed into [LOG_STD_MIN, LOG_STD_MAX];
        with gSDE, the log std of features @ theta (Mul, Gemm, Log), or with a drawn theta
        (`exploration_noise`) the mean of features @ (W + theta) and a constant log std (LOG_STD_MIN),
        and a second output, NOISE_FREE_OUTPUT, with the mean of features @ W."""
        actor, noise = self.actor, self.exploration_noise
        x = relu_layers(graph, x, actor.body)
        weight, bias = linear_weights(actor.fc_mean)
        mean = graph.gemm(x, weight if noise is None else weight + noise.T, bias, "mean")
        if noise is not None:
            zeros = np.zeros_like(weight), np.full_like(bias, LOG_STD_MIN)
            log_std = graph.gemm(x, *zeros, "log_std")
            graph.node("Concat", [graph.gemm(x, weight, bias, "mean_noise_free"), log_std], NOISE_FREE_OUTPUT, axis=1)
        elif actor.gsde:
            variance_weight = (2 * actor.gsde_log_std.detach().cpu().numpy()).T.copy()
            squared = graph.node("Mul", [x, x], "features_squared")
            variance = graph.gemm(squared, np.exp(variance_weight), np.full_like(bias, GSDE_VARIANCE_EPS), "variance")
            log_variance = graph.node("Log", [variance], "log_variance")
            log_std = graph.node("Mul", [log_variance, graph.constant(np.array(0.5), "half")], "log_std")
        else:
            squashed = graph.node("Tanh", [graph.gemm(x, *linear_weights(actor.fc_logstd), "log_std_raw")], "log_std_tanh")
            half_range = graph.constant(np.array(0.5 * (LOG_STD_MAX - LOG_STD_MIN)), "log_std_half_range")
            middle = graph.constant(np.array(LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN)), "log_std_middle")
            log_std = graph.node("Add", [graph.node("Mul", [squashed, half_range], "log_std_scaled"), middle], "log_std")
        graph.node("Concat", [mean, log_std], OUTPUT_NAME, axis=1)


def export_onnx(
    actor: SquashedGaussianActor, weights_seq_no: int, input_name: str = "obs", exploration_noise: np.ndarray | None = None
) -> bytes:
    """The actor's ONNX model (onnx_export.export_onnx); with `exploration_noise`, the exploring one."""
    return onnx_export.export_onnx(SquashedGaussianHead(actor, exploration_noise), weights_seq_no, input_name)


def policy_state(
    actor: SquashedGaussianActor, weights_seq_no: int, input_name: str, exploration_noise: np.ndarray | None = None
) -> PolicyState:
    """The actor packed for SET_STATE: with `exploration_noise`, SET_STATE plays the exploring model
    and `onnx_bytes` stays the noise-free policy (onnx_export.policy_state)."""
    played = None if exploration_noise is None else SquashedGaussianHead(actor, exploration_noise)
    return onnx_export.policy_state(SquashedGaussianHead(actor), weights_seq_no, input_name, played)
