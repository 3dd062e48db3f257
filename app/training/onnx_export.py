"""Build an actor's ONNX model directly from its weights, and pack it for SET_STATE.

What every algorithm shares: the graph's inputs (Flatten for multi-dimensional observations,
the optional second input `action_mask`), outputs and metadata, the image encoder's nodes
(Slice, Reshape, Mul, Conv, Relu, Flatten, Gemm and Concat), the uniform reference player,
the tempered opponent.
The actor's own nodes are its algorithm's ONNX head (app/training/algorithms/*/onnx_head.py:
Gemm and Tanh for PPO's policy, Gemm, Relu, Tanh, Mul, Add and Concat for SAC's actor).
Opset 13, IR version 7: onnxruntime(-web) and Unity's Inference Engine (Sentis) run it.
Building it by hand is exact, takes about a millisecond and needs no exporter.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Mapping
from typing import Protocol

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from app.spaces.models import IMAGE_MAX, ActionSpace, BoxSpace, DictSpace
from app.spaces.onnx_names import ACTION_MASK_INPUT, INTERNAL_PREFIX, NOISE_FREE_OUTPUT, OUTPUT_NAME, STATE_INPUT, STATE_OUTPUT
from app.training.encoders import ConvEncoder, ObservationEncoder
from app.training.policy_state import PolicyState, set_state_payload
from rllink.action_dists import MASK_PENALTY

OPSET = 13
IR_VERSION = 7
BATCH_AXIS = "batch"


class OnnxActor(Protocol):
    """An actor as its algorithm's ONNX head (algorithms/*/onnx_head.py) wraps it for export_onnx."""

    @property
    def observation_space(self) -> BoxSpace | DictSpace: ...
    @property
    def action_space(self) -> ActionSpace: ...
    @property
    def width(self) -> int: ...  # columns of action_dist_inputs
    @property
    def action_masking(self) -> bool: ...  # takes the input action_mask
    @property
    def state_size(self) -> int: ...  # with memory: takes state_in and gives state_out of this width (0: none)
    @property
    def outputs(self) -> tuple[str, ...]: ...  # OUTPUT_NAME, and NOISE_FREE_OUTPUT where it explores
    @property
    def metadata(self) -> Mapping[str, str]: ...  # its own metadata_props, after the others
    def output_layout(self) -> str: ...  # what the columns of action_dist_inputs mean (metadata, docs)
    def write(self, graph: OnnxGraph, x: str) -> None: ...  # its nodes, from the flat observation to its outputs


def linear_weights(layer: nn.Linear) -> tuple[np.ndarray, np.ndarray]:
    """(weight [out, in], bias [out]) as numpy copies (from the CPU, whatever the device)."""
    return layer.weight.detach().cpu().numpy(), layer.bias.detach().cpu().numpy()


class OnnxGraph:
    """Nodes and initializers of one ONNX graph, added in order; every name but the
    output's gets INTERNAL_PREFIX (the input's name is the user's)."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def node(self, op: str, inputs: list[str], output: str, **attributes) -> str:
        output = output if output in (OUTPUT_NAME, NOISE_FREE_OUTPUT, STATE_OUTPUT) else INTERNAL_PREFIX + output
        self.nodes.append(helper.make_node(op, inputs, [output], **attributes))
        return output

    def constant(self, value: np.ndarray, name: str) -> str:
        name = INTERNAL_PREFIX + name
        self.initializers.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def ints(self, value: list[int], name: str) -> str:
        name = INTERNAL_PREFIX + name
        self.initializers.append(numpy_helper.from_array(np.asarray(value, np.int64), name))
        return name

    def gemm(self, x: str, weight: np.ndarray, bias: np.ndarray, output: str) -> str:
        """x @ weight.T + bias."""
        w, b = self.constant(weight, f"{output}_W"), self.constant(bias, f"{output}_b")
        return self.node("Gemm", [x, w, b], output, transB=1)


def _convolutions(graph: OnnxGraph, x: str, encoder: ConvEncoder, name: str) -> str:
    """Conv-Relu layers, Flatten, Gemm-Relu: a CNN's features of x [batch, C, H, W]."""
    for i, conv in enumerate(m for m in encoder.convs if isinstance(m, nn.Conv2d)):
        weight, bias = (graph.constant(t.detach().cpu().numpy(), f"{name}_conv{i}_{k}") for t, k in ((conv.weight, "W"), (conv.bias, "b")))
        pad = conv.padding[0]
        x = graph.node(
            "Conv",
            [x, weight, bias],
            f"{name}_conv{i}",
            kernel_shape=list(conv.kernel_size),
            strides=list(conv.stride),
            pads=[pad] * 4,
        )
        x = graph.node("Relu", [x], f"{name}_conv{i}_relu")
    x = graph.node("Flatten", [x], f"{name}_flat", axis=1)
    return graph.node("Relu", [graph.gemm(x, *linear_weights(encoder.linear), f"{name}_linear")], f"{name}_features")


def encoder_features(graph: OnnxGraph, flat: str, encoder: ObservationEncoder) -> str:
    """The encoder's features from the flat observation: each part sliced out, images
    reshaped to [batch, C, H, W] and scaled to 0..1, grids reshaped to [batch, H, W, C] and
    transposed to [batch, C, H, W], each through its CNN, all concatenated in order."""
    features = []
    for i, part in enumerate(encoder.parts):
        x = flat
        if len(encoder.parts) > 1:
            x = graph.node(
                "Slice",
                [
                    flat,
                    graph.ints([part.offset], f"part{i}_start"),
                    graph.ints([part.end], f"part{i}_end"),
                    graph.ints([1], f"part{i}_axis"),
                ],
                f"part{i}",
            )
        if part.space.is_image:
            x = graph.node("Reshape", [x, graph.ints([-1, *part.space.shape], f"part{i}_shape")], f"part{i}_image")
            x = graph.node("Mul", [x, graph.constant(np.array(1 / IMAGE_MAX), f"image{i}_scale")], f"image{i}_scaled")
            x = _convolutions(graph, x, encoder.images[str(i)], f"image{i}")
        elif part.space.is_grid:
            x = graph.node("Reshape", [x, graph.ints([-1, *part.space.shape], f"part{i}_shape")], f"part{i}_grid")
            x = graph.node("Transpose", [x], f"part{i}_channels_first", perm=[0, 3, 1, 2])
            x = _convolutions(graph, x, encoder.images[str(i)], f"grid{i}")
        features.append(x)
    return features[0] if len(features) == 1 else graph.node("Concat", features, "features", axis=1)


def masked_output(graph: OnnxGraph, logits: str) -> None:
    """The output: logits + (action_mask - 1) * MASK_PENALTY (a masked action's logit far below the others)."""
    forbidden = graph.node("Sub", [ACTION_MASK_INPUT, graph.constant(np.array(1.0), "one")], "mask_minus_one")
    penalty = graph.node("Mul", [forbidden, graph.constant(np.array(MASK_PENALTY), "mask_penalty")], "mask_penalty_term")
    graph.node("Add", [logits, penalty], OUTPUT_NAME)


def relu_layers(graph: OnnxGraph, x: str, body: nn.Sequential) -> str:
    """The Gemm-Relu layers of an MLP's body; returns the last one's output."""
    for i, layer in enumerate(m for m in body if isinstance(m, nn.Linear)):
        x = graph.node("Relu", [graph.gemm(x, *linear_weights(layer), f"gemm{i}")], f"relu{i}")
    return x


def export_onnx(actor: OnnxActor, weights_seq_no: int, input_name: str = "obs") -> bytes:
    """The serialized ONNX model: input `input_name` [batch, *obs_shape] float32 (and, with
    `action_masking`, `action_mask` [batch, k] float32; with memory, `state_in` [batch,
    state_size]), output `action_dist_inputs` [batch, k] float32 (and a gSDE actor's
    noise-free one; with memory, `state_out` [batch, state_size], last). Each algorithm's
    onnx_head.py exports its actor through this."""
    obs_shape = list(actor.observation_space.shape)
    width, state_size = actor.width, actor.state_size
    graph_inputs = [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [BATCH_AXIS, *obs_shape])]
    if actor.action_masking:
        graph_inputs.append(helper.make_tensor_value_info(ACTION_MASK_INPUT, TensorProto.FLOAT, [BATCH_AXIS, width]))
    if state_size:
        graph_inputs.append(helper.make_tensor_value_info(STATE_INPUT, TensorProto.FLOAT, [BATCH_AXIS, state_size]))
    graph_outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [BATCH_AXIS, width]) for name in actor.outputs]
    if state_size:
        graph_outputs.append(helper.make_tensor_value_info(STATE_OUTPUT, TensorProto.FLOAT, [BATCH_AXIS, state_size]))

    graph = OnnxGraph()
    x = input_name
    if len(obs_shape) > 1:
        x = graph.node("Flatten", [x], "obs_flat", axis=1)
    actor.write(graph, x)

    layout = actor.output_layout()
    more_inputs = f", {ACTION_MASK_INPUT} [batch, {width}] (1 allowed, 0 not)" if actor.action_masking else ""
    if state_size:
        more_inputs += f", {STATE_INPUT} [batch, {state_size}] (zeros at an episode's start; then the last {STATE_OUTPUT})"
    onnx_graph = helper.make_graph(
        graph.nodes,
        "rllink_policy",
        graph_inputs,
        graph_outputs,
        initializer=graph.initializers,
        doc_string=f"Input {input_name}{more_inputs}; output {OUTPUT_NAME} {layout}",
    )
    model = helper.make_model(
        onnx_graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="rllink-gateway",
        ir_version=IR_VERSION,
    )
    helper.set_model_props(
        model,
        {
            "weights_seq_no": str(weights_seq_no),
            "observation_space": actor.observation_space.model_dump_json(),
            "action_space": actor.action_space.model_dump_json(),
            "input_name": input_name,
            "input_names": json.dumps([i.name for i in graph_inputs]),
            "output_names": json.dumps([o.name for o in graph_outputs]),
            "output_layout": layout,
            "state_size": str(state_size),
            **actor.metadata,
        },
    )
    return model.SerializeToString()


def uniform_policy(onnx_bytes: bytes, scripted_reference: str | None = None) -> bytes:
    """A model with the interface of `onnx_bytes` (its inputs, output and metadata) whose
    `action_dist_inputs` are all 0, plus the action mask term if it takes one: equal logits,
    so a client plays uniformly among the legal actions (each sub-action of a MultiDiscrete);
    for a Box, mean 0 and log std 0. Self-play's random reference player, or with
    `scripted_reference` the stand-in of that scripted player (metadata `scripted_reference`)."""
    model = onnx.load_from_string(onnx_bytes)
    inputs, (output,) = list(model.graph.input), list(model.graph.output)
    width = output.type.tensor_type.shape.dim[1].dim_value
    graph = OnnxGraph()
    x = inputs[0].name
    if len(inputs[0].type.tensor_type.shape.dim) > 2:
        x = graph.node("Flatten", [x], "obs_flat", axis=1)
    first = graph.node("Slice", [x, graph.ints([0], "start"), graph.ints([1], "end"), graph.ints([1], "axis")], "first")
    zeros = np.zeros((width, 1), np.float32), np.zeros(width, np.float32)
    if not any(i.name == ACTION_MASK_INPUT for i in inputs):
        graph.gemm(first, *zeros, OUTPUT_NAME)  # 0 * obs[:, :1] + 0: [batch, width] zeros
    else:
        masked_output(graph, graph.gemm(first, *zeros, "logits"))
    uniform = helper.make_graph(
        graph.nodes,
        "rllink_uniform_policy",
        inputs,
        [output],
        initializer=graph.initializers,
        doc_string="Uniformly random reference: " + model.graph.doc_string,
    )
    result = helper.make_model(
        uniform, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="rllink-gateway", ir_version=IR_VERSION
    )
    props = {prop.key: prop.value for prop in model.metadata_props}
    named = (
        {"reference": "uniform_random"}
        if scripted_reference is None
        else {"reference": scripted_reference, "scripted_reference": scripted_reference}
    )
    helper.set_model_props(result, {**props, "weights_seq_no": "0", **named})
    return result.SerializeToString()


def tempered_policy(onnx_bytes: bytes, temperature: float) -> bytes:
    """The model of `onnx_bytes` with its `action_dist_inputs` (logits) divided by `temperature`:
    the same most likely action, the others more often (one Mul node, which every kit's runtime
    runs); metadata `opponent_temperature`. Self-play's snapshots and latest weights as the
    learner's opponent."""
    model = onnx.load_from_string(onnx_bytes)
    untempered = INTERNAL_PREFIX + "untempered"
    for node in model.graph.node:
        node.output[:] = [untempered if name == OUTPUT_NAME else name for name in node.output]
    graph = OnnxGraph()
    graph.node("Mul", [untempered, graph.constant(np.array(1.0 / temperature), "inverse_temperature")], OUTPUT_NAME)
    model.graph.node.extend(graph.nodes)
    model.graph.initializer.extend(graph.initializers)
    props = {prop.key: prop.value for prop in model.metadata_props}
    del model.metadata_props[:]
    helper.set_model_props(model, {**props, "opponent_temperature": repr(float(temperature))})
    return model.SerializeToString()


def policy_state(actor: OnnxActor, weights_seq_no: int, input_name: str, played: OnnxActor | None = None) -> PolicyState:
    """Export the actor and pack it for SET_STATE; with `played` (a gSDE actor with its drawn
    noise), SET_STATE carries that exploring model and `onnx_bytes` stays the noise-free policy."""
    onnx_bytes = export_onnx(actor, weights_seq_no, input_name)
    if played is None:
        return PolicyState(weights_seq_no, onnx_bytes, set_state_payload(onnx_bytes))
    exploring = export_onnx(played, weights_seq_no, input_name)
    return PolicyState(weights_seq_no, onnx_bytes, set_state_payload(exploring), exploring)


def load_payload(onnx_file: str) -> onnx.ModelProto:
    """Inverse of `set_state_payload` (app/training/policy_state.py), for tests and clients written in Python."""
    return onnx.load_from_string(gzip.decompress(base64.b64decode(onnx_file)))
