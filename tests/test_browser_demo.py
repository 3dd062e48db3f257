"""The browser side in a real browser (Debian's Chromium, driven by Playwright) against a real gateway.

- The CartPole demo page connects over WebSocket, runs the policy from SET_STATE with
  onnxruntime-web, trains through the gateway, and its episode returns rise. It follows
  SET_CONFIG's evaluation_interval: every Nth episode is played with the mode and every
  chunk of it is sent marked `evaluation`, which the gateway counts apart.
- cartpole_env.js steps exactly like gymnasium's CartPole-v1.
- rllink.js frames and unframes like the gateway, turns ERROR frames into rejected
  Promises while the connection stays usable, and unpacks SET_STATE's model byte for byte.
- The policy run by onnxruntime-web in the page computes what onnxruntime computes in Python,
  and the trained model from GET /api/model.onnx, run on a batch in the page, computes what
  the gateway's torch policy computes.

Skipped when Chromium (/usr/bin/chromium) or the npm packages (`npm ci`) are missing.
Playwright drives the system Chromium; `playwright install` is never needed.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict

import gymnasium as gym
import httpx
import numpy as np
import onnxruntime as ort
import pytest
import torch

from app.settings.hyperparameters import DEFAULT_MODULE_ID
from app.training.algorithms.ppo.config import PPOConfig
from app.training.algorithms.ppo.learner import PPOLearner

from .browser import NEEDS_BROWSER, gateway_policy_acts, module_page, open_page, start_training
from .helpers import gateway_settings, one_version_many_requests_settings, running_gateway

pytestmark = NEEDS_BROWSER


# -- The demo ------------------------------------------------------------------------


def sent_chunks(payloads: list[str | bytes]) -> list[dict]:
    """The episode chunks in the RLlink frames a page sent (WebSocket payloads, each one or more frames)."""
    chunks = []
    for payload in payloads:
        data = payload.encode() if isinstance(payload, str) else payload
        while data:
            size = int(data[:8])
            message = json.loads(data[8 : 8 + size])
            data = data[8 + size :]
            if message["type"] in ("EPISODES", "EPISODES_AND_GET_STATE"):
                chunks.extend(message["episodes"])
    return chunks


@pytest.mark.e2e  # real training to a target
def test_demo_page_trains_cartpole_through_the_gateway_and_returns_rise(browser, tmp_path):
    # With learning_rate 1e-3 the page reaches a mean return of 150 over 20 training episodes
    # in about 10 s here (a random policy gets ~22); every 3rd episode is an evaluation one.
    settings = gateway_settings(tmp_path, ppo=PPOConfig(learning_rate=1e-3), evaluation_interval=3)
    query = "seed=1&target=150&window=20&max_seconds=150"
    payloads: list[str | bytes] = []
    with running_gateway(settings) as gateway:
        with open_page(browser, "about:blank") as demo:
            demo.page.on("websocket", lambda socket: socket.on("framesent", lambda payload: payloads.append(payload)))
            demo.page.goto(f"{gateway.base_url}/static/cartpole.html?{query}")
            result = demo.demo_result(timeout_s=200)
            status = json.loads(demo.page.inner_text("#status"))
        metrics = httpx.get(f"{gateway.base_url}/api/metrics").raise_for_status().json()

    print(f"demo result: {result}")
    assert result["reached_target"], f"returns did not rise to 150: {result}\n{demo.console_text()}"
    assert result["first_mean_return"] < 60 <= 150 <= result["recent_mean_return"]
    assert result["weights_seq_no"] >= 1 and status["phase"] == "done"
    # The gateway saw every step and joined the chunks into the same episodes the page counted:
    # the training ones, and apart, the evaluation ones (the 3rd, 6th, ... of those played).
    played = result["episodes"] + result["evaluation_episodes"]
    assert result["evaluation_interval"] == 3 and result["evaluation_episodes"] == played // 3 >= 5
    assert metrics["num_episodes_lifetime"] == result["episodes"]
    assert metrics["num_evaluation_episodes_lifetime"] == result["evaluation_episodes"]
    assert metrics["num_env_steps_evaluated_lifetime"] > 0
    assert metrics["num_env_steps_sampled_lifetime"] + metrics["num_env_steps_evaluated_lifetime"] == result["env_steps"]
    assert metrics["weights_seq_no"] == result["weights_seq_no"]
    # Every chunk of the 3rd, 6th, ... episode (ids <page>-<n>, n from 0) says `evaluation`, and
    # played the mode: with two actions, the one of probability at least 1/2 (sampling takes the other too).
    chunks = sent_chunks(payloads)
    assert sum(len(chunk["actions"]) for chunk in chunks) == result["env_steps"]
    for chunk in chunks:
        assert chunk.get("evaluation", False) == (int(chunk["episode_id"].rsplit("-", 1)[1]) % 3 == 2), chunk["episode_id"]
    evaluation_logps = [logp for chunk in chunks if chunk.get("evaluation") for logp in chunk["action_logp"]]
    training_logps = [logp for chunk in chunks if not chunk.get("evaluation") for logp in chunk["action_logp"]]
    assert min(evaluation_logps) >= math.log(0.5) - 1e-6 > min(training_logps)
    returns = defaultdict(float)  # of each finished evaluation episode, as the gateway reports their mean
    finished = [chunk["episode_id"] for chunk in chunks if chunk.get("evaluation") and (chunk["is_terminated"] or chunk["is_truncated"])]
    for chunk in chunks:
        returns[chunk["episode_id"]] += sum(chunk["rewards"])
    assert len(finished) == result["evaluation_episodes"]
    assert metrics["evaluation_return_mean"] == pytest.approx(np.mean([returns[i] for i in finished][-100:]))
    assert not demo.errors(), "\n".join(demo.errors())


# -- The environment -----------------------------------------------------------------


def _balancing_action(obs: np.ndarray) -> int:
    """A hand-made controller that keeps the pole up for the whole 500 steps."""
    return int(obs[2] + 0.3 * obs[3] + 0.01 * obs[0] + 0.1 * obs[1] > 0)


def _gymnasium_episode(seed: int, balance: bool) -> dict:
    """One CartPole-v1 episode: its start state, the actions taken, what gymnasium returned."""
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    episode = {"start": env.unwrapped.state.tolist(), "actions": [], "obs": [], "terminated": [], "truncated": []}
    while True:
        action = _balancing_action(obs) if balance else int(rng.integers(2))
        obs, reward, terminated, truncated, _ = env.step(action)
        assert reward == 1.0
        episode["actions"].append(action)
        episode["obs"].append(obs.tolist())
        episode["terminated"].append(terminated)
        episode["truncated"].append(truncated)
        if terminated or truncated:
            return episode


REPLAY_IN_JS = """async (episodes) => {
  const { CartPole } = await import('/static/cartpole_env.js');
  const env = new CartPole();
  return episodes.map(({ start, actions }) => {
    env.reset(start);
    const steps = actions.map((action) => env.step(action));
    return {
      obs: steps.map((s) => s.obs),
      terminated: steps.map((s) => s.terminated),
      truncated: steps.map((s) => s.truncated),
      rewards: steps.map((s) => s.reward),
    };
  });
}"""


def test_the_page_loads_each_model_once_however_many_requests_bring_it(browser, tmp_path):
    """SAC answers every request with its latest version, which outlasts many requests of 50
    env steps (none comes before learning_starts): the page loads only a model it does not run."""
    settings = one_version_many_requests_settings(tmp_path)
    query = "seed=1&target=1e9&max_env_steps=1500"
    with running_gateway(settings) as gateway, open_page(browser, f"{gateway.base_url}/static/cartpole.html?{query}") as demo:
        result = demo.demo_result(timeout_s=120)
        sent = httpx.get(f"{gateway.base_url}/api/metrics").raise_for_status().json()["num_env_steps_sampled_lifetime"]
    requests = sent // 50
    loaded, versions = result["models_loaded"], result["weights_seq_no"] + 1
    assert result["reason"] == "max_env_steps" and requests >= 29, result
    assert 1 <= loaded <= versions < requests, (loaded, versions, requests)


def test_cartpole_in_javascript_steps_like_gymnasium(browser, tmp_path):
    episodes = [_gymnasium_episode(seed, balance=seed == 0) for seed in range(6)]
    assert episodes[0]["truncated"][-1] and len(episodes[0]["actions"]) == 500  # the time limit is covered
    assert all(e["terminated"][-1] for e in episodes[1:])  # and falling over
    with running_gateway(gateway_settings(tmp_path)) as gateway, module_page(browser, gateway) as page:
        replayed = page.page.evaluate(REPLAY_IN_JS, episodes)
    for expected, got in zip(episodes, replayed, strict=True):
        assert got["terminated"] == expected["terminated"] and got["truncated"] == expected["truncated"]
        assert set(got["rewards"]) == {1.0}
        np.testing.assert_allclose(got["obs"], expected["obs"], rtol=1e-6, atol=1e-6)


# -- The RLlink client -----------------------------------------------------------------

FRAMING_IN_JS = """async () => {
  const { FrameDecoder, encodeFrame } = await import('/static/rllink.js');
  const stream = new TextEncoder().encode(encodeFrame({ type: 'PING' }) + encodeFrame({ type: 'X', text: 'é→' }));
  const byteByByte = new FrameDecoder();
  const split = [];
  for (const byte of stream) split.push(...byteByByte.push(new Uint8Array([byte])));
  const coalesced = new FrameDecoder().push(stream.buffer);
  let badHeader = null;
  try { new FrameDecoder().push('0000001x{}'); } catch (e) { badHeader = { name: e.name, code: e.code }; }
  return { header: encodeFrame({ type: 'PING' }), split, coalesced, left: byteByByte.buffered, badHeader };
}"""


def test_rllink_js_frames_like_the_protocol_and_decodes_split_and_coalesced_frames(browser, tmp_path):
    with running_gateway(gateway_settings(tmp_path)) as gateway, module_page(browser, gateway) as page:
        result = page.page.evaluate(FRAMING_IN_JS)
    expected = [{"type": "PING"}, {"type": "X", "text": "é→"}]
    assert result["header"] == '00000015{"type":"PING"}'
    assert result["split"] == expected and result["coalesced"] == expected and result["left"] == 0
    assert result["badHeader"] == {"name": "RLlinkError", "code": "bad_frame"}


CLIENT_IN_JS = """async () => {
  const { RLlinkClient, decodeOnnxFile } = await import('/static/rllink.js');
  const failure = (promise) => promise.then(
    (reply) => ({ resolved: reply.type }),
    (e) => ({ name: e.name, code: e.code, request: e.request, message: e.message }));
  const chunk = (action) => ({ obs: [[0, 0, 0, 0], [0, 0, 0, 0]], actions: [action], rewards: [1],
                               is_terminated: true, is_truncated: false });
  const client = await RLlinkClient.connect();
  const config = await client.handshake();
  const refusedTrade = await failure(client.episodesAndGetState([chunk(7)]));
  const refusedEpisodes = await failure(client.sendEpisodes([chunk(7)]));
  const acceptedEpisodes = await failure(client.sendEpisodes([chunk(1)]));
  const [state, pong] = await Promise.all([client.getState(), client.ping()]);  // pipelined, in order
  const onnx = await decodeOnnxFile(state.onnx_file);
  const sha256 = Array.from(new Uint8Array(await crypto.subtle.digest('SHA-256', onnx)),
                            (b) => b.toString(16).padStart(2, '0')).join('');
  client.close();
  return { config, refusedTrade, refusedEpisodes, acceptedEpisodes, pong: pong.type,
           weights_seq_no: state.weights_seq_no, sha256 };
}"""


def test_rllink_js_rejects_on_error_frames_keeps_the_connection_and_unpacks_the_model(browser, tmp_path):
    settings = gateway_settings(tmp_path, train_batch_size=100_000, barrier_timeout_s=60)  # no training here
    with running_gateway(settings) as gateway, module_page(browser, gateway) as page:
        result = page.page.evaluate(CLIENT_IN_JS)
        # Nothing trained before its GET_STATE (nobody waited, the batch is far from full);
        # its data may train once it has left, so the version it got is read from the kept ones.
        state = gateway.service.kept_state(0)

    assert result["config"]["type"] == "SET_CONFIG"
    assert result["config"]["env_steps_per_sample"] == settings.env_steps_per_sample
    for key, request in (("refusedTrade", "EPISODES_AND_GET_STATE"), ("refusedEpisodes", "EPISODES")):
        refused = result[key]
        assert refused["name"] == "RLlinkError" and refused["code"] == "invalid_message", refused
        assert refused["request"] == request and "actions" in refused["message"], refused
    assert result["acceptedEpisodes"] == {"resolved": "PONG"} and result["pong"] == "PONG"
    assert result["weights_seq_no"] == 0
    assert result["sha256"] == hashlib.sha256(state.default.onnx_bytes).hexdigest()


# -- The policy in the page --------------------------------------------------------------

OBSERVATIONS = np.random.default_rng(0).uniform(-2, 2, size=(32, 4)).astype(np.float32)  # CartPole-shaped


def assert_same_policy_outputs(got, expected) -> None:
    """The page's action_dist_inputs equal the reference's, to float32 precision."""
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), expected, rtol=1e-5, atol=1e-5)


def test_policy_in_the_browser_matches_onnxruntime_in_python(browser, tmp_path):
    with running_gateway(gateway_settings(tmp_path)) as gateway, module_page(browser, gateway) as page:
        result = gateway_policy_acts(page, OBSERVATIONS.tolist())
        state = gateway.service.current_state()
        input_name = gateway.settings.onnx_input_name

    assert result["weights_seq_no"] == state.weights_seq_no
    session = ort.InferenceSession(state.default.onnx_bytes, providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {input_name: OBSERVATIONS})[:1]
    assert_same_policy_outputs([step["distInputs"] for step in result["steps"]], expected)
    log_probs = expected - np.logaddexp.reduce(expected, axis=1, keepdims=True)
    for step, row in zip(result["steps"], log_probs, strict=True):
        assert step["action"] in (0, 1)
        assert step["logp"] == pytest.approx(row[step["action"]], abs=1e-5)


DOWNLOADED_MODEL_IN_JS = """async (observations) => {
  const { loadOrt } = await import('/static/onnx_policy.js');
  const ort = await loadOrt();  // wasm, from /vendor/ort/ as the demo loads it
  const response = await fetch('/api/model.onnx');
  if (!response.ok) throw new Error(`GET /api/model.onnx: HTTP ${response.status}`);
  const session = await ort.InferenceSession.create(new Uint8Array(await response.arrayBuffer()),
                                                    { executionProviders: ['wasm'] });
  const batch = new ort.Tensor('float32', Float32Array.from(observations.flat()),
                               [observations.length, observations[0].length]);
  const output = (await session.run({ [session.inputNames[0]]: batch }))[session.outputNames[0]];
  return { weights_seq_no: Number(response.headers.get('X-Weights-Seq-No')),
           inputNames: session.inputNames, outputNames: session.outputNames,
           dims: output.dims, data: Array.from(output.data) };
}"""


def test_model_downloaded_from_the_rest_api_runs_in_the_browser_like_the_torch_policy(browser, tmp_path):
    settings = gateway_settings(tmp_path)
    with running_gateway(settings) as gateway:
        trained = start_training(gateway, max_env_steps=2 * settings.env_steps_per_sample).join(timeout_s=60)
        with module_page(browser, gateway) as page:
            result = page.page.evaluate(DOWNLOADED_MODEL_IN_JS, OBSERVATIONS.tolist())
        output_names = gateway.service.status().onnx_output_names

    # The gateway's torch policy at that version, as it checkpointed it after training.
    learner = PPOLearner(
        settings.ppo, settings.observation_space, settings.action_space, seed=1,
        checkpoint_dir=settings.checkpoint_dir / DEFAULT_MODULE_ID, onnx_input_name=settings.onnx_input_name,
    )
    assert learner.restore()
    policy, saved_version = learner.policy, learner.weights_seq_no
    with torch.no_grad():
        expected = policy(torch.from_numpy(OBSERVATIONS)).numpy()

    assert result["weights_seq_no"] == saved_version == trained.weights_seq_no >= 2  # trained, not initial
    assert result["inputNames"] == [settings.onnx_input_name] and result["outputNames"] == output_names
    assert result["dims"] == [len(OBSERVATIONS), settings.action_space.n]  # the whole batch in one run
    assert_same_policy_outputs(np.reshape(result["data"], result["dims"]), expected)
