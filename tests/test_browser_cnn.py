"""Camera-image, grid and dict observations in onnx_policy.js, in a real browser against a real gateway.

For an image space (3x10x10 uint8, the small CNN), the Nature-CNN size (1x48x40 uint8,
MultiDiscrete actions), a grid (a 6x7x2 board, channels last: Reshape and Transpose before
its CNN) and a dict of an image and a vector, the page gets SET_CONFIG and
the model (SET_STATE) over the gateway's WebSocket as the demo does, and runs it with
onnxruntime-web (Conv, Relu, Mul, Flatten, Gemm, Tanh; Slice, Reshape, Concat for the
dict). On a few fixed random observations (integers 0..255 for the image parts, sent as
on the wire: an image nested [C][H][W], a dict flat) its action_dist_inputs equal
onnxruntime's in Python on the same model, and the actions it samples are valid.

Skipped when Chromium (/usr/bin/chromium) or the npm packages (`npm ci`) are missing.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from app.settings.config import Settings
from app.spaces.models import observation_parts
from app.training.onnx_export import load_payload
from rllink.action_dists import actions_logp

from .browser import NEEDS_BROWSER, gateway_policy_acts, module_page
from .helpers import gateway_settings, running_gateway

pytestmark = NEEDS_BROWSER

NUM_OBS = 6
CNN_OPS = {"Conv", "Relu", "Mul", "Flatten", "Gemm", "Tanh"}
DICT_OPS = {"Slice", "Reshape", "Concat"}
GRID_OPS = {"Conv", "Relu", "Flatten", "Gemm", "Tanh", "Reshape", "Transpose"}

IMAGE_SMALL = {"type": "box", "shape": [3, 10, 10], "dtype": "uint8"}
IMAGE_NATURE = {"type": "box", "shape": [1, 48, 40], "dtype": "uint8"}
GRID = {"type": "box", "shape": [6, 7, 2]}
DICT = {
    "type": "dict",
    "spaces": {"cam": {"type": "box", "shape": [2, 7, 9], "dtype": "uint8"}, "pos": {"type": "box", "shape": [3]}},
}


def _observations(settings: Settings, rng: np.random.Generator) -> tuple[np.ndarray, list]:
    """NUM_OBS observations as the ONNX takes them ([N, *shape] float32) and as the page gets
    them (on the wire: nested [C][H][W] for an image, one flat list for a dict)."""
    space = settings.observation_space
    obs = np.empty((NUM_OBS, *space.shape), np.float32)
    flat = obs.reshape(NUM_OBS, -1)
    for part in observation_parts(space):
        size = part.end - part.offset
        if part.space.is_image:
            flat[:, part.offset : part.end] = rng.integers(0, 256, (NUM_OBS, size))
        else:
            flat[:, part.offset : part.end] = rng.uniform(-2, 2, (NUM_OBS, size))
    return obs, obs.tolist()


@pytest.mark.parametrize(
    ("observation_space", "action_space", "ops"),
    [
        (IMAGE_SMALL, {"type": "discrete", "n": 4}, CNN_OPS),
        (IMAGE_NATURE, {"type": "multi_discrete", "nvec": [3, 2]}, CNN_OPS),
        (DICT, {"type": "discrete", "n": 3}, CNN_OPS | DICT_OPS),
        (GRID, {"type": "discrete", "n": 7}, GRID_OPS),
    ],
    ids=["small-image", "nature-image", "dict", "grid"],
)
def test_page_runs_the_cnn_policy_like_onnxruntime(browser, tmp_path, observation_space, action_space, ops):
    settings = gateway_settings(tmp_path, observation_space=observation_space, action_space=action_space)
    obs, wire_obs = _observations(settings, np.random.default_rng(0))
    with running_gateway(settings) as gateway, module_page(browser, gateway) as page:
        result = gateway_policy_acts(page, wire_obs)  # raises on an error in the page

    # The model the page ran, run in Python on the same observations.
    config, steps = result["config"], result["steps"]
    model = load_payload(result["onnxFile"])
    assert ops <= {node.op_type for node in model.graph.node}  # the CNN (and dict) operators are there
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {config["onnx_input_name"]: obs})
    dist_inputs = np.array([step["distInputs"] for step in steps], np.float64)
    np.testing.assert_allclose(dist_inputs, expected, rtol=1e-4, atol=1e-5)

    # Its actions are valid ones, with their log-probs.
    if action_space["type"] == "discrete":
        assert config["action_distribution"] == "categorical"
        actions = [step["action"] for step in steps]
        assert all(isinstance(a, int) and 0 <= a < action_space["n"] for a in actions), actions
        nvec = None
    else:
        assert config["action_distribution"] == "multi_categorical"
        nvec = tuple(action_space["nvec"])
        actions = [step["action"] for step in steps]
        assert all(
            isinstance(a, list) and len(a) == len(nvec) and all(isinstance(i, int) and 0 <= i < n for i, n in zip(a, nvec))
            for a in actions
        ), actions
    expected_logp = actions_logp(config["action_distribution"], expected.astype(np.float64), np.asarray(actions), nvec=nvec)
    np.testing.assert_allclose([step["logp"] for step in steps], expected_logp, rtol=1e-4, atol=1e-5)
