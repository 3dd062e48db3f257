"""Build the actor's ONNX model directly from its weights, and pack it for SET_STATE.

The graph is Gemm and Tanh nodes (plus Flatten for multi-dimensional observations),
opset 13, IR version 7: onnxruntime(-web) and Unity's Inference Engine (Sentis) run
it. Building it by hand is exact, takes about a millisecond and needs no exporter.
"""

from __future__ import annotations

import base64
import gzip
import json
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from app.training.policy import ActorCritic

OPSET = 13
IR_VERSION = 7
OUTPUT_NAME = "action_dist_inputs"
BATCH_AXIS = "batch"
GZIP_LEVEL = 1  # float weights barely compress: level 9 saves <0.5 % and is slower


def output_layout(policy: ActorCritic) -> str:
    """What the columns of `action_dist_inputs` mean, for the metadata and the docs."""
    k = policy.num_dist_inputs
    if policy.is_discrete:
        return f"[batch, {k}]: logits of a Categorical; sample from softmax(logits)"
    half = k // 2
    return (
        f"[batch, {k}]: columns 0..{half - 1} the mean, columns {half}..{k - 1} the log std "
        "of a diagonal Gaussian; sample mean + exp(log_std) * N(0, 1)"
    )


def _actor_layers(policy: ActorCritic) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight [out, in], bias [out]) of each actor layer; for a Box the last layer also
    emits log_std: zero weight rows whose bias is log_std."""
    linears = [m for m in policy.actor if isinstance(m, nn.Linear)]
    layers = [(m.weight.detach().numpy(), m.bias.detach().numpy()) for m in linears]
    if policy.log_std is not None:
        weight, bias = layers[-1]
        log_std = policy.log_std.detach().numpy()
        weight = np.concatenate([weight, np.zeros_like(weight)])
        bias = np.concatenate([bias, log_std])
        layers[-1] = (weight, bias)
    return layers


def export_onnx(policy: ActorCritic, weights_seq_no: int, input_name: str = "obs") -> bytes:
    """The serialized ONNX model: input `input_name` [batch, *obs_shape] float32,
    output `action_dist_inputs` [batch, k] float32."""
    obs_shape = list(policy.observation_space.shape)
    graph_input = helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [BATCH_AXIS, *obs_shape])
    graph_output = helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [BATCH_AXIS, policy.num_dist_inputs])

    nodes, initializers = [], []
    x = input_name
    if len(obs_shape) > 1:
        nodes.append(helper.make_node("Flatten", [x], ["obs_flat"], axis=1))
        x = "obs_flat"
    layers = _actor_layers(policy)
    for i, (weight, bias) in enumerate(layers):
        last = i == len(layers) - 1
        initializers += [numpy_helper.from_array(weight, f"W{i}"), numpy_helper.from_array(bias, f"b{i}")]
        gemm_out = OUTPUT_NAME if last else f"gemm{i}"
        nodes.append(helper.make_node("Gemm", [x, f"W{i}", f"b{i}"], [gemm_out], transB=1))
        if not last:
            nodes.append(helper.make_node("Tanh", [gemm_out], [f"tanh{i}"]))
            x = f"tanh{i}"

    graph = helper.make_graph(
        nodes,
        "rllink_policy",
        [graph_input],
        [graph_output],
        initializer=initializers,
        doc_string=f"Input {input_name}; output {OUTPUT_NAME} {output_layout(policy)}",
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="rllink-gateway",
        ir_version=IR_VERSION,
    )
    helper.set_model_props(
        model,
        {
            "weights_seq_no": str(weights_seq_no),
            "observation_space": policy.observation_space.model_dump_json(),
            "action_space": policy.action_space.model_dump_json(),
            "input_name": input_name,
            "output_names": json.dumps([OUTPUT_NAME]),
            "output_layout": output_layout(policy),
        },
    )
    return model.SerializeToString()


@dataclass(frozen=True)
class PolicyState:
    """One published policy version, exported once and served to every client as is."""

    weights_seq_no: int
    onnx_bytes: bytes
    onnx_gzip_b64: str  # SET_STATE's `onnx_file`


def policy_state(policy: ActorCritic, weights_seq_no: int, input_name: str) -> PolicyState:
    """Export the policy and pack it for SET_STATE."""
    onnx_bytes = export_onnx(policy, weights_seq_no, input_name)
    return PolicyState(weights_seq_no, onnx_bytes, set_state_payload(onnx_bytes))


def set_state_payload(onnx_bytes: bytes) -> str:
    """SET_STATE's `onnx_file`: base64 of the gzip-compressed ONNX bytes."""
    return base64.b64encode(gzip.compress(onnx_bytes, compresslevel=GZIP_LEVEL)).decode("ascii")


def load_payload(onnx_file: str) -> onnx.ModelProto:
    """Inverse of `set_state_payload`, for tests and clients written in Python."""
    return onnx.load_from_string(gzip.decompress(base64.b64decode(onnx_file)))
