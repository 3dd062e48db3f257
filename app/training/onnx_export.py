"""Build the actor's ONNX model directly from its weights, and pack it for SET_STATE.

The graph is Gemm and Tanh nodes for PPO's policy, Gemm, Relu, Tanh, Mul, Add and Concat
for SAC's actor (Gemm, Relu, Mul, Log and Concat with gSDE, whose SET_STATE model has the
version's drawn noise in its mean Gemm; Gemm and Relu for discrete SAC's) (plus Flatten for
multi-dimensional observations; Slice, Reshape, Mul, Conv, Relu, Flatten, Gemm and Concat for
camera images; Sub, Mul and Add for an action mask, the optional second input `action_mask`),
opset 13, IR version 7: onnxruntime(-web) and Unity's Inference Engine (Sentis) run
it. Building it by hand is exact, takes about a millisecond and needs no exporter.
"""

from __future__ import annotations

import base64
import gzip
import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from torch import nn

from app.spaces.models import IMAGE_MAX, MultiDiscreteSpace
from app.spaces.onnx_names import ACTION_MASK_INPUT, INTERNAL_PREFIX, NOISE_FREE_OUTPUT, OUTPUT_NAME
from app.training.encoders import ImageEncoder, ObservationEncoder
from app.training.policy import ActorCritic
from app.training.policy_state import PolicyState, set_state_payload
from app.training.sac import GSDE_VARIANCE_EPS, LOG_STD_MAX, LOG_STD_MIN, SquashedGaussianActor
from app.training.sac_discrete import CategoricalActor
from rllink.action_dists import MASK_PENALTY

OPSET = 13
IR_VERSION = 7
BATCH_AXIS = "batch"
GSDE_EXPLORING_NOTE = (
    "gsde: this version's exploration noise features(s) @ theta is in the mean and the log std is small; "
    f"output {NOISE_FREE_OUTPUT} is the same without the noise (evaluation episodes play its mode); "
    "the noise-free policy is GET /api/model.onnx"
)


Actor = ActorCritic | SquashedGaussianActor | CategoricalActor  # PPO's policy, or SAC's actor


def output_layout(policy: Actor) -> str:
    """What the columns of `action_dist_inputs` mean, for the metadata and the docs."""
    if isinstance(policy, ActorCritic) and isinstance(policy.action_space, MultiDiscreteSpace):
        nvec = list(policy.action_space.nvec)
        return (
            f"[batch, {policy.num_dist_inputs}]: the logits of each sub-action of MultiDiscrete({nvec}) one after the "
            "other (multi_categorical); sample each from the softmax of its own logits"
        )
    if isinstance(policy, CategoricalActor) or (isinstance(policy, ActorCritic) and policy.is_discrete):
        return f"[batch, {_width(policy)}]: logits of a Categorical; sample from softmax(logits)"
    k = 2 * policy.action_space.flat_dim
    half = k // 2
    columns = f"[batch, {k}]: columns 0..{half - 1} the mean, columns {half}..{k - 1} the log std of a diagonal Gaussian"
    if isinstance(policy, SquashedGaussianActor):
        space = policy.action_space
        return f"{columns} over u; the action is tanh(u) scaled to [{space.low}, {space.high}] (squashed_gaussian)"
    return f"{columns}; sample mean + exp(log_std) * N(0, 1)"


def _weights(layer: nn.Linear) -> tuple[np.ndarray, np.ndarray]:
    """(weight [out, in], bias [out]) as numpy copies (from the CPU, whatever the device)."""
    return layer.weight.detach().cpu().numpy(), layer.bias.detach().cpu().numpy()


class _Graph:
    """Nodes and initializers of one ONNX graph, added in order; every name but the
    output's gets INTERNAL_PREFIX (the input's name is the user's)."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def node(self, op: str, inputs: list[str], output: str, **attributes) -> str:
        output = output if output in (OUTPUT_NAME, NOISE_FREE_OUTPUT) else INTERNAL_PREFIX + output
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


def _image(graph: _Graph, x: str, encoder: ImageEncoder, name: str) -> str:
    """Scale to 0..1, Conv-Relu layers, Flatten, Gemm-Relu: the image's features."""
    x = graph.node("Mul", [x, graph.constant(np.array(1 / IMAGE_MAX), f"{name}_scale")], f"{name}_scaled")
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
    return graph.node("Relu", [graph.gemm(x, *_weights(encoder.linear), f"{name}_linear")], f"{name}_features")


def _encoder(graph: _Graph, flat: str, encoder: ObservationEncoder) -> str:
    """The encoder's features from the flat observation: each part sliced out, images
    reshaped to [batch, C, H, W] and through their CNN, all concatenated in order."""
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
            x = _image(graph, x, encoder.images[str(i)], f"image{i}")
        features.append(x)
    return features[0] if len(features) == 1 else graph.node("Concat", features, "features", axis=1)


def _ppo_actor(graph: _Graph, x: str, policy: ActorCritic, masked: bool) -> None:
    """Gemm-Tanh layers; the observation normaliser, if any, folded into the first Gemm
    (W / std, b - W @ mean / std); for a Box the last Gemm also emits log_std (zero weight
    rows whose bias is log_std). `masked`: logits + (action_mask - 1) * MASK_PENALTY."""
    layers = [_weights(m) for m in policy.actor if isinstance(m, nn.Linear)]
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
    if not masked:
        graph.gemm(x, *layers[-1], OUTPUT_NAME)
        return
    logits = graph.gemm(x, *layers[-1], "logits")
    forbidden = graph.node("Sub", [ACTION_MASK_INPUT, graph.constant(np.array(1.0), "one")], "mask_minus_one")
    penalty = graph.node("Mul", [forbidden, graph.constant(np.array(MASK_PENALTY), "mask_penalty")], "mask_penalty_term")
    graph.node("Add", [logits, penalty], OUTPUT_NAME)


def _width(policy: Actor) -> int:
    """Columns of `action_dist_inputs`."""
    if isinstance(policy, ActorCritic):
        return policy.num_dist_inputs
    if isinstance(policy, CategoricalActor):
        return policy.action_space.n
    return 2 * policy.action_space.flat_dim


def _relu_layers(graph: _Graph, x: str, body: nn.Sequential) -> str:
    """The Gemm-Relu layers of a SAC actor's body; returns the last one's output."""
    for i, layer in enumerate(m for m in body if isinstance(m, nn.Linear)):
        x = graph.node("Relu", [graph.gemm(x, *_weights(layer), f"gemm{i}")], f"relu{i}")
    return x


def _sac_actor(graph: _Graph, x: str, actor: SquashedGaussianActor, noise: np.ndarray | None) -> None:
    """Gemm-Relu layers, a mean head, and a log std head squashed into [LOG_STD_MIN, LOG_STD_MAX];
    with gSDE, the log std of features @ theta (Mul, Gemm, Log), or with a drawn theta
    (`noise`) the mean of features @ (W + theta) and a constant log std (LOG_STD_MIN), and
    a second output, NOISE_FREE_OUTPUT, with the mean of features @ W."""
    x = _relu_layers(graph, x, actor.body)
    weight, bias = _weights(actor.fc_mean)
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
        squashed = graph.node("Tanh", [graph.gemm(x, *_weights(actor.fc_logstd), "log_std_raw")], "log_std_tanh")
        half_range = graph.constant(np.array(0.5 * (LOG_STD_MAX - LOG_STD_MIN)), "log_std_half_range")
        middle = graph.constant(np.array(LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN)), "log_std_middle")
        log_std = graph.node("Add", [graph.node("Mul", [squashed, half_range], "log_std_scaled"), middle], "log_std")
    graph.node("Concat", [mean, log_std], OUTPUT_NAME, axis=1)


def export_onnx(
    policy: Actor,
    weights_seq_no: int,
    input_name: str = "obs",
    action_masking: bool = False,
    exploration_noise: np.ndarray | None = None,
) -> bytes:
    """The serialized ONNX model: input `input_name` [batch, *obs_shape] float32 (and, with
    `action_masking`, `action_mask` [batch, k] float32), output `action_dist_inputs` [batch, k] float32.
    `exploration_noise`: a gSDE actor's drawn theta, played as its mean (SquashedGaussianActor)."""
    obs_shape = list(policy.observation_space.shape)
    width = _width(policy)
    graph_inputs = [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [BATCH_AXIS, *obs_shape])]
    if action_masking:
        graph_inputs.append(helper.make_tensor_value_info(ACTION_MASK_INPUT, TensorProto.FLOAT, [BATCH_AXIS, width]))
    graph_outputs = [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [BATCH_AXIS, width])]
    if exploration_noise is not None:
        graph_outputs.append(helper.make_tensor_value_info(NOISE_FREE_OUTPUT, TensorProto.FLOAT, [BATCH_AXIS, width]))

    graph = _Graph()
    x = input_name
    if len(obs_shape) > 1:
        x = graph.node("Flatten", [x], "obs_flat", axis=1)
    if isinstance(policy, ActorCritic) and policy.encoder is not None:
        x = _encoder(graph, x, policy.encoder)
    if isinstance(policy, SquashedGaussianActor):
        _sac_actor(graph, x, policy, exploration_noise)
    elif isinstance(policy, CategoricalActor):
        graph.gemm(_relu_layers(graph, x, policy.body), *_weights(policy.fc_logits), OUTPUT_NAME)
    else:
        _ppo_actor(graph, x, policy, action_masking)

    mask_doc = f", {ACTION_MASK_INPUT} [batch, {width}] (1 allowed, 0 not)" if action_masking else ""
    onnx_graph = helper.make_graph(
        graph.nodes,
        "rllink_policy",
        graph_inputs,
        graph_outputs,
        initializer=graph.initializers,
        doc_string=f"Input {input_name}{mask_doc}; output {OUTPUT_NAME} {output_layout(policy)}",
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
            "observation_space": policy.observation_space.model_dump_json(),
            "action_space": policy.action_space.model_dump_json(),
            "input_name": input_name,
            "input_names": json.dumps([i.name for i in graph_inputs]),
            "output_names": json.dumps([o.name for o in graph_outputs]),
            "output_layout": output_layout(policy),
            **({} if exploration_noise is None else {"exploration": GSDE_EXPLORING_NOTE}),
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
    graph = _Graph()
    x = inputs[0].name
    if len(inputs[0].type.tensor_type.shape.dim) > 2:
        x = graph.node("Flatten", [x], "obs_flat", axis=1)
    first = graph.node("Slice", [x, graph.ints([0], "start"), graph.ints([1], "end"), graph.ints([1], "axis")], "first")
    zeros = np.zeros((width, 1), np.float32), np.zeros(width, np.float32)
    if not any(i.name == ACTION_MASK_INPUT for i in inputs):
        graph.gemm(first, *zeros, OUTPUT_NAME)  # 0 * obs[:, :1] + 0: [batch, width] zeros
    else:
        logits = graph.gemm(first, *zeros, "logits")
        forbidden = graph.node("Sub", [ACTION_MASK_INPUT, graph.constant(np.array(1.0), "one")], "mask_minus_one")
        penalty = graph.node("Mul", [forbidden, graph.constant(np.array(MASK_PENALTY), "mask_penalty")], "mask_penalty_term")
        graph.node("Add", [logits, penalty], OUTPUT_NAME)
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
    named = {"reference": "uniform_random"} if scripted_reference is None else {
        "reference": scripted_reference, "scripted_reference": scripted_reference
    }
    helper.set_model_props(result, {**props, "weights_seq_no": "0", **named})
    return result.SerializeToString()


def policy_state(
    policy: Actor,
    weights_seq_no: int,
    input_name: str,
    action_masking: bool = False,
    exploration_noise: np.ndarray | None = None,
) -> PolicyState:
    """Export the policy and pack it for SET_STATE; with `exploration_noise` (gSDE's theta),
    SET_STATE carries the exploring model and `onnx_bytes` stays the noise-free policy."""
    onnx_bytes = export_onnx(policy, weights_seq_no, input_name, action_masking)
    played = onnx_bytes
    if exploration_noise is not None:
        played = export_onnx(policy, weights_seq_no, input_name, action_masking, exploration_noise)
    return PolicyState(weights_seq_no, onnx_bytes, set_state_payload(played))


def load_payload(onnx_file: str) -> onnx.ModelProto:
    """Inverse of `set_state_payload` (app/training/policy_state.py), for tests and clients written in Python."""
    return onnx.load_from_string(gzip.decompress(base64.b64decode(onnx_file)))
