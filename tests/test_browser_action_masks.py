"""Action masks and MultiDiscrete actions in onnx_policy.js, in a real browser against a real gateway.

The page gets SET_CONFIG and the model (SET_STATE) over the gateway's WebSocket as the
demo does, and samples with onnxruntime-web:

- with random masks (at least one allowed action per sub-action), it never returns a
  forbidden action, over thousands of samples;
- under a few fixed masks, every allowed action does occur (so no constant answer passes);
- its action_dist_inputs equal onnxruntime's in Python on the same obs and mask, and its
  log-probs rllink.action_dists's; so do its modes (`explore: false`, an evaluation
  episode's actions: the most likely allowed action of each sub-action) and theirs;
- without a mask (a masked model fed all ones, or an unmasked one), multi_categorical
  actions are lists of len(nvec) ints, each in range.

Skipped when Chromium (/usr/bin/chromium) or the npm packages (`npm ci`) are missing.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from rllink.action_dists import actions_logp, sample_actions

from .browser import NEEDS_BROWSER, gateway_policy_acts, module_page
from .helpers import OBS_DIM, gateway_settings, running_gateway

pytestmark = NEEDS_BROWSER

NUM_RANDOM = 2000  # samples under random masks
REPEATS = 300  # samples under each fixed mask: a 1-in-4 action is missed with probability ~1e-37

def _sub_actions(space: dict) -> list[int]:
    """The size of each sub-action: nvec, or [n] for a discrete space."""
    return list(space["nvec"]) if space["type"] == "multi_discrete" else [space["n"]]


def _random_masks(sizes: list[int], count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` random masks [count, sum(sizes)] leaving at least one allowed action per sub-action."""
    parts = []
    for n in sizes:
        part = rng.integers(0, 2, size=(count, n)).astype(np.float32)
        part[np.arange(count), rng.integers(0, n, size=count)] = 1
        parts.append(part)
    return np.concatenate(parts, axis=1)


def _as_rows(actions: list, sizes: list[int]) -> np.ndarray:
    """The page's actions as ints [N, len(sizes)], checking each has the space's form."""
    if len(sizes) == 1:
        assert all(isinstance(a, int) for a in actions), actions[:5]
        return np.asarray(actions)[:, None]
    assert all(isinstance(a, list) and len(a) == len(sizes) and all(isinstance(i, int) for i in a) for a in actions)
    return np.asarray(actions)


MODES_IN_JS = """async ({ distribution, nvec, rows }) => {
  const { sampleCategorical, sampleMultiCategorical } = await import('/static/onnx_policy.js');
  const random = () => { throw new Error('the mode draws no random number'); };
  return rows.map((row) => distribution === 'multi_categorical'
    ? sampleMultiCategorical(row, nvec, random, false) : sampleCategorical(row, random, false));
}"""


def _sample_in_page(browser, tmp_path, action_space: dict, masking: bool, obs: np.ndarray, masks: np.ndarray | None):
    """Act in the page once per row of `obs` (with that row's mask, or none); return the
    page's steps (each with `mode`: the page's mode of its action_dist_inputs), the
    distribution it was told, and onnxruntime's (Python) outputs on the same inputs."""
    settings = gateway_settings(tmp_path, action_space=action_space, action_masking=masking)
    with running_gateway(settings) as gateway, module_page(browser, gateway) as page:
        result = gateway_policy_acts(page, obs.tolist(), None if masks is None else masks.tolist())
        modes = page.page.evaluate(MODES_IN_JS, {
            "distribution": result["config"]["action_distribution"], "nvec": action_space.get("nvec"),
            "rows": [step["distInputs"] for step in result["steps"]],
        })
        onnx_bytes = gateway.service.current_state().default.onnx_bytes
    for step, mode in zip(result["steps"], modes, strict=True):
        step["mode"] = mode

    config = result["config"]
    feed = {config["onnx_input_name"]: obs}
    if masking:
        assert config["onnx_action_mask_input_name"] == "action_mask"
        all_allowed = np.ones((len(obs), sum(_sub_actions(action_space))), np.float32)
        feed["action_mask"] = all_allowed if masks is None else masks
    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, feed)[:1]
    return result["steps"], config["action_distribution"], expected.astype(np.float64)


def _assert_like_onnxruntime(
    steps: list[dict], distribution: str, expected: np.ndarray, actions: np.ndarray, sizes: list[int]
) -> None:
    """The page's action_dist_inputs are onnxruntime's, its log-probs rllink.action_dists's, and
    so are its modes (the actions of an evaluation episode) and their log-probs."""
    page_dist_inputs = np.array([s["distInputs"] for s in steps], np.float64)
    np.testing.assert_allclose(page_dist_inputs, expected, rtol=1e-5, atol=1e-5)
    reference_actions = actions if distribution == "multi_categorical" else actions[:, 0]
    expected_logp = actions_logp(distribution, expected, reference_actions, nvec=tuple(sizes))
    np.testing.assert_allclose([s["logp"] for s in steps], expected_logp, rtol=1e-5, atol=1e-5)
    rng = np.random.default_rng(0)  # the mode draws none; on the page's own inputs, so no near tie flips
    expected_modes, expected_mode_logp = sample_actions(distribution, page_dist_inputs, rng, explore=False, nvec=tuple(sizes))
    assert [s["mode"]["action"] for s in steps] == expected_modes.tolist()
    np.testing.assert_allclose([s["mode"]["logp"] for s in steps], expected_mode_logp, rtol=1e-5, atol=1e-5)


FIXED_MASKS = {  # by space: a few masks, each with at least one allowed action per sub-action
    "multi_discrete": [[1, 0, 1, 1, 0, 1, 1], [0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1]],
    "discrete": [[1, 0, 1, 0, 1], [0, 0, 0, 1, 0], [1, 1, 1, 1, 1], [0, 1, 1, 0, 0]],
}


@pytest.mark.parametrize(
    "action_space",
    [{"type": "multi_discrete", "nvec": [4, 3]}, {"type": "discrete", "n": 5}],
    ids=["multi_discrete", "discrete"],
)
def test_page_never_samples_a_masked_action_and_samples_every_allowed_one(browser, tmp_path, action_space):
    sizes = _sub_actions(action_space)
    rng = np.random.default_rng(0)
    fixed = np.repeat(np.asarray(FIXED_MASKS[action_space["type"]], np.float32), REPEATS, axis=0)
    masks = np.concatenate([_random_masks(sizes, NUM_RANDOM, rng), fixed])
    obs = rng.uniform(-2, 2, size=(len(masks), OBS_DIM)).astype(np.float32)

    steps, distribution, expected = _sample_in_page(browser, tmp_path, action_space, True, obs, masks)

    assert distribution == {"discrete": "categorical", "multi_discrete": "multi_categorical"}[action_space["type"]]
    actions = _as_rows([s["action"] for s in steps], sizes)
    offsets = np.cumsum([0, *sizes[:-1]])
    chosen = masks[np.arange(len(masks))[:, None], offsets + actions]  # the mask entry of each sub-action taken
    forbidden = int((chosen != 1).any(axis=1).sum())
    assert forbidden == 0, f"{forbidden} of {len(masks)} samples took a forbidden action"
    for k, mask in enumerate(FIXED_MASKS[action_space["type"]]):
        rows = actions[NUM_RANDOM + k * REPEATS : NUM_RANDOM + (k + 1) * REPEATS]
        for j, (offset, n) in enumerate(zip(offsets, sizes, strict=True)):
            allowed = {i for i in range(n) if mask[offset + i] == 1}
            sampled = set(rows[:, j].tolist())
            assert sampled == allowed, f"mask {mask}, sub-action {j}: sampled {sorted(sampled)}"
    _assert_like_onnxruntime(steps, distribution, expected, actions, sizes)


@pytest.mark.parametrize("masking", [True, False], ids=["masked-model-no-mask", "unmasked-model"])
def test_multi_categorical_without_a_mask_returns_one_int_per_sub_action(browser, tmp_path, masking):
    action_space = {"type": "multi_discrete", "nvec": [4, 3]}
    sizes = _sub_actions(action_space)
    obs = np.random.default_rng(1).uniform(-2, 2, size=(600, OBS_DIM)).astype(np.float32)

    steps, distribution, expected = _sample_in_page(browser, tmp_path, action_space, masking, obs, None)

    assert distribution == "multi_categorical"
    actions = _as_rows([s["action"] for s in steps], sizes)
    for j, n in enumerate(sizes):
        assert set(actions[:, j].tolist()) == set(range(n))  # each in range, and all allowed when unmasked
    _assert_like_onnxruntime(steps, distribution, expected, actions, sizes)
