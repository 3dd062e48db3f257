"""Discrete SAC's actor (networks.py's CategoricalActor) as ONNX: Gemm and Relu layers, then the logits' Gemm."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from app.spaces.models import BoxSpace, DiscreteSpace
from app.spaces.onnx_names import OUTPUT_NAME
from app.training import onnx_export
from app.training.algorithms.sac.discrete.networks import CategoricalActor
from app.training.onnx_export import OnnxGraph, linear_weights, relu_layers


@dataclass(frozen=True)
class CategoricalHead:
    """The actor as export_onnx writes it (onnx_export.OnnxActor)."""

    actor: CategoricalActor
    action_masking: ClassVar[bool] = False
    state_size: ClassVar[int] = 0  # no memory
    outputs: ClassVar[tuple[str, ...]] = (OUTPUT_NAME,)
    metadata: ClassVar[Mapping[str, str]] = MappingProxyType({})

    @property
    def observation_space(self) -> BoxSpace:
        return self.actor.observation_space

    @property
    def action_space(self) -> DiscreteSpace:
        return self.actor.action_space

    @property
    def width(self) -> int:
        return self.actor.action_space.n

    def output_layout(self) -> str:
        return f"[batch, {self.width}]: logits of a Categorical; sample from softmax(logits)"

    def write(self, graph: OnnxGraph, x: str) -> None:
        graph.gemm(relu_layers(graph, x, self.actor.body), *linear_weights(self.actor.fc_logits), OUTPUT_NAME)


def export_onnx(actor: CategoricalActor, weights_seq_no: int, input_name: str = "obs") -> bytes:
    """The actor's ONNX model (onnx_export.export_onnx)."""
    return onnx_export.export_onnx(CategoricalHead(actor), weights_seq_no, input_name)
