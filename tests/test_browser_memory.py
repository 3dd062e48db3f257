"""A recurrent policy (`model.use_lstm`) in a real browser (Debian's Chromium, Playwright) against a real gateway.

- The CartPole demo page, local inference, trains a recurrent module through the gateway:
  no ERROR, training steps taken. Every chunk it sends carries `state_in`: zeros where the
  chunk starts its episode, and where it goes on with one (across a new model version too),
  the state the page's policy reached at the previous chunk's end.
- The page's log-probs are onnxruntime's in Python: each chunk is recomputed step by step
  from its `state_in` with the model of its weights_seq_no (taken from the SET_STATE frames
  the page received), feeding each step's state_out to the next step.

Skipped when Chromium (/usr/bin/chromium) or the npm packages (`npm ci`) are missing.
"""

from __future__ import annotations

import base64
import gzip
import json
import time

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from .browser import NEEDS_BROWSER, open_page
from .helpers import gateway_settings, running_gateway

pytestmark = NEEDS_BROWSER

CELL = 8
STATE_SIZE = 2 * CELL  # the LSTM's hidden and cell states
STEPS_PER_SAMPLE = 250
MAX_ENV_STEPS = 2500


def frames(payloads: list[str | bytes]) -> list[dict]:
    """The RLlink messages in WebSocket payloads (each one or more frames)."""
    messages = []
    for payload in payloads:
        data = payload.encode() if isinstance(payload, str) else payload
        while data:
            size = int(data[:8])
            messages.append(json.loads(data[8 : 8 + size]))
            data = data[8 + size :]
    return messages


def replay_chunk(session: ort.InferenceSession, input_name: str, chunk: dict) -> tuple[np.ndarray, np.ndarray]:
    """The chunk's log-probs of its actions as onnxruntime computes them from its state_in,
    carrying state_out step to step; and the state after its last step."""
    state = np.asarray(chunk["state_in"], np.float32)[None]
    logps = []
    for obs, action in zip(chunk["obs"], chunk["actions"], strict=False):  # obs has one more (the last)
        logits, state = session.run(["action_dist_inputs", "state_out"], {input_name: np.asarray(obs, np.float32)[None],
                                                                          "state_in": state})
        logits = logits[0].astype(np.float64)
        logps.append(logits[action] - np.logaddexp.reduce(logits))
    return np.asarray(logps), state[0]


@pytest.mark.slow
def test_demo_page_carries_a_recurrent_policys_state_and_trains_through_the_gateway(browser, tmp_path):
    settings = gateway_settings(
        tmp_path, model={"use_lstm": True, "lstm_cell_size": CELL}, env_steps_per_sample=STEPS_PER_SAMPLE,
        train_batch_size=2 * STEPS_PER_SAMPLE,
    )
    sent: list[str | bytes] = []
    received: list[str | bytes] = []

    def record(socket) -> None:
        socket.on("framesent", lambda payload: sent.append(payload))
        socket.on("framereceived", lambda payload: received.append(payload))

    started = time.monotonic()
    with running_gateway(settings) as gateway:
        with open_page(browser, "about:blank") as demo:
            demo.page.on("websocket", record)
            demo.page.goto(f"{gateway.base_url}/static/cartpole.html?seed=3&max_env_steps={MAX_ENV_STEPS}")
            result = demo.demo_result(timeout_s=120)
        metrics = httpx.get(f"{gateway.base_url}/api/metrics").raise_for_status().json()
        input_name = settings.onnx_input_name
    print(f"demo result after {time.monotonic() - started:.1f} s: {result}")

    replies = frames(received)
    assert not [m for m in replies if m["type"] == "ERROR"], [m for m in replies if m["type"] == "ERROR"]
    (config,) = [m for m in replies if m["type"] == "SET_CONFIG"]
    assert config["state_size"] == STATE_SIZE and result["state_size"] == STATE_SIZE
    assert result["reason"] == "max_env_steps" and result["env_steps"] >= MAX_ENV_STEPS
    assert metrics["num_training_steps"] > 0 and result["weights_seq_no"] >= 1
    assert metrics["num_env_steps_sampled_lifetime"] + metrics.get("num_env_steps_evaluated_lifetime", 0) == result["env_steps"]
    assert not demo.errors(), "\n".join(demo.errors())

    # Every version the page ran, as it got it, and every chunk it sent, in order.
    sessions = {
        m["weights_seq_no"]: ort.InferenceSession(gzip.decompress(base64.b64decode(m["onnx_file"])),
                                                  providers=["CPUExecutionProvider"])
        for m in replies if m["type"] == "SET_STATE"
    }
    chunks = [chunk for m in frames(sent) if m["type"] in ("EPISODES", "EPISODES_AND_GET_STATE") for chunk in m["episodes"]]
    assert sum(len(chunk["actions"]) for chunk in chunks) == result["env_steps"]

    state_after: dict[str, np.ndarray] = {}  # each episode's state at the end of its last chunk so far
    version_of: dict[str, int] = {}
    continued = continued_across_versions = 0
    for chunk in chunks:
        episode = chunk["episode_id"]
        state_in = np.asarray(chunk["state_in"], np.float32)
        assert state_in.shape == (STATE_SIZE,), chunk["state_in"]
        if episode in state_after:  # goes on with an episode: the state the page had reached
            continued += 1
            continued_across_versions += chunk["weights_seq_no"] != version_of[episode]
            np.testing.assert_allclose(state_in, state_after[episode], rtol=1e-4, atol=1e-5, err_msg=episode)
        else:  # starts one: no memory yet
            assert not state_in.any(), f"{episode} starts with state_in {chunk['state_in']}"
        logps, state_after[episode] = replay_chunk(sessions[chunk["weights_seq_no"]], input_name, chunk)
        version_of[episode] = chunk["weights_seq_no"]
        np.testing.assert_allclose(chunk["action_logp"], logps, rtol=1e-4, atol=1e-5, err_msg=episode)
    # Cut by the sample's end, episodes went on, with a newer version too.
    assert continued >= 3 and continued_across_versions >= 1, (continued, continued_across_versions)
