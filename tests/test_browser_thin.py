"""Server-side inference from a real browser (Debian's Chromium, driven by Playwright) against a real gateway.

- rllink.js's thin-client calls (startEpisode, an evaluation one included, getAction,
  getActions, logAction, logReturns, endEpisode, flush) do what the gateway's counters say they did; an ERROR
  reaches the caller as an RLlinkError with its code, for a request with a reply and for
  one without (through each of the three ways the header of rllink.js gives), and the
  connection goes on.
- The CartPole demo page with `?inference=server` trains through the gateway's actions
  alone: it never fetches onnxruntime-web, a .wasm, or onnx_policy.js. The episodes the
  gateway plays as evaluation ones (every evaluation_interval-th: EPISODE_STARTED says
  `evaluation`) the page counts apart, as the gateway does.

Skipped when Chromium (/usr/bin/chromium) or the npm packages (`npm ci`) are missing.
"""

from __future__ import annotations

import json

import httpx
import pytest

from .browser import NEEDS_BROWSER, module_page, open_page
from .helpers import gateway_settings, running_gateway

pytestmark = NEEDS_BROWSER

OBS = [0.01, -0.02, 0.03, 0.04]

THIN_CALLS_IN_JS = """(obs) => Promise.race([
  new Promise((_, reject) => setTimeout(() => reject(new Error('not done within 60 s')), 60_000)),  // never hang
  (async () => {
    const { RLlinkClient } = await import('/static/rllink.js');
    const outcome = (promise) => promise.then(
      (reply) => ({ resolved: reply === undefined ? 'written' : reply.type }),
      (e) => ({ name: e.name, code: e.code, request: e.request, episodeId: e.episodeId, message: e.message }));
    const client = await RLlinkClient.connect();
    const config = await client.handshake();
    const log = {};

    // Two episodes: A with the gateway's id, B with the page's own, its first action
    // pipelined behind its START_EPISODE.
    const a = (await client.startEpisode()).episode_id;
    const [startedB, firstB] = await Promise.all([
      client.startEpisode({ episodeId: 'page-b' }), client.getAction('page-b', obs, { explore: false })]);
    log.startedB = startedB;
    log.firstB = firstB;
    log.single = await client.getAction(a, Float32Array.from(obs));      // a typed array goes as a list
    log.reward = await outcome(client.logReturns(a, 1));                  // resolves once written
    log.batch = await client.getActions([{ episode_id: a, obs }, { episode_id: 'page-b', obs, explore: false }]);
    await client.logReturns(a, 0.5);
    await client.logReturns('page-b', 2);
    log.logged = await outcome(client.logAction('page-b', obs, 1, { ack: true }));  // waits for the gateway
    await client.logReturns('page-b', 3);

    // Refused requests; the connection goes on after each.
    log.unknownAction = await outcome(client.getAction('nope', obs));
    log.refusedEnd = await outcome(client.endEpisode(a, obs, { terminated: false, truncated: false, ack: true }));
    log.lateWritten = await outcome(client.logReturns('nope', 1));
    log.lateAtFlush = await outcome(client.flush());                      // the LOG_RETURNS's ERROR
    log.flushAfter = await outcome(client.flush());
    const seen = [];
    client.onerror = (e) => seen.push({ code: e.code, request: e.request, episodeId: e.episodeId });
    await client.logAction('nope', obs, 0);
    log.flushWithHandler = await outcome(client.flush());                 // onerror took it
    log.seenByHandler = seen;
    client.onerror = null;
    await client.endEpisode('gone', obs);
    log.pingBeforeError = await outcome(client.ping());                   // sent before the ERROR came
    log.lateAtNextCall = await outcome(client.getConfig());               // rejects, sends nothing
    log.nextCall = await outcome(client.getConfig());

    // An evaluation episode the page asks for: one step of the mode, counted apart.
    log.startedE = await client.startEpisode({ episodeId: 'page-e', evaluation: true });
    log.actionE = await client.getAction('page-e', obs);
    await client.logReturns('page-e', 7);
    await client.endEpisode('page-e', obs, { terminated: true });

    await client.endEpisode(a, obs, { terminated: true });
    await client.endEpisode('page-b', obs, { terminated: false, truncated: true });
    log.endFlush = await outcome(client.flush());
    log.endedTwice = await outcome(client.getAction(a, obs));
    client.close();
    return { config, a, ...log };
  })(),
])"""


def test_rllink_js_thin_calls_are_served_counted_and_refused_with_their_error_code(browser, tmp_path):
    settings = gateway_settings(tmp_path, train_batch_size=100_000, barrier_timeout_s=60)  # nothing trains
    with running_gateway(settings) as gateway, module_page(browser, gateway) as page:
        result = page.page.evaluate(THIN_CALLS_IN_JS, OBS)
        metrics = httpx.get(f"{gateway.base_url}/api/metrics").raise_for_status().json()
    print(json.dumps(result, indent=1))

    assert result["config"]["type"] == "SET_CONFIG"
    assert result["startedB"] == {"type": "EPISODE_STARTED", "episode_id": "page-b"} and len(result["a"]) >= 8
    assert result["firstB"]["type"] == "ACTION" and result["firstB"]["episode_id"] == "page-b"
    assert result["single"]["episode_id"] == result["a"] and result["single"]["action"] in (0, 1)
    assert result["single"]["weights_seq_no"] == 0
    assert result["reward"] == {"resolved": "written"}
    batch = result["batch"]
    assert batch["type"] == "ACTION" and len(batch["actions"]) == 2 and set(batch["actions"]) <= {0, 1}
    assert batch["actions"][1] == result["firstB"]["action"]  # explore false: the same action on the same obs
    assert result["logged"] == {"resolved": "PONG"}

    def refused(key, code, request, episode_id, text):
        error = result[key]
        assert error["name"] == "RLlinkError" and error["code"] == code, error
        assert error["request"] == request and error["episodeId"] == episode_id and text in error["message"], error

    refused("unknownAction", "unknown_episode", "GET_ACTION", "nope", "never started")
    refused("refusedEnd", "invalid_message", "END_EPISODE", result["a"], "needs is_terminated")
    assert result["lateWritten"] == {"resolved": "written"}
    refused("lateAtFlush", "unknown_episode", "LOG_RETURNS", "nope", "not open on this connection")
    assert result["flushAfter"] == {"resolved": "PONG"} and result["flushWithHandler"] == {"resolved": "PONG"}
    assert result["seenByHandler"] == [{"code": "unknown_episode", "request": "LOG_ACTION", "episodeId": "nope"}]
    assert result["pingBeforeError"] == {"resolved": "PONG"}
    refused("lateAtNextCall", "unknown_episode", "END_EPISODE", "gone", "not open on this connection")
    assert result["nextCall"] == {"resolved": "SET_CONFIG"}
    assert result["endFlush"] == {"resolved": "PONG"}
    refused("endedTwice", "unknown_episode", "GET_ACTION", result["a"], "ended")

    assert result["startedE"] == {"type": "EPISODE_STARTED", "episode_id": "page-e", "evaluation": True}
    assert result["actionE"]["action"] == result["firstB"]["action"]  # the mode, on the same obs

    # A: two served steps (rewards 1 + 0.5), terminated. B: one served step and one logged
    # (rewards 2 + 3), truncated. E: one served step (reward 7), evaluation, counted apart.
    # The refused requests changed nothing.
    serving = metrics["serving"]
    assert serving["actions_served_total"] == 5  # B's first, A's single, the batch of two, E's
    assert serving["actions_logged_total"] == 1
    assert serving["episodes_started_total"] == 3 and serving["open_episodes"] == 0
    assert serving["episodes_ended"] == {"terminated": 2, "truncated": 1}
    assert metrics["num_env_steps_sampled_lifetime"] == 5 and metrics["num_episodes_lifetime"] == 2
    assert metrics["num_evaluation_episodes_lifetime"] == 1 and metrics["num_env_steps_evaluated_lifetime"] == 1
    assert metrics["evaluation_return_mean"] == 7
    assert metrics["episode_return_min"] == 1.5 and metrics["episode_return_max"] == 5
    errors = [line for line in page.errors() if "favicon.ico" not in line]  # the module page has no icon
    assert not errors, "\n".join(errors)


@pytest.mark.e2e  # real training to a target
def test_demo_page_in_server_inference_mode_trains_cartpole_without_onnxruntime(browser, tmp_path):
    # Measured here (2 cores, nothing else running): a mean return of 150 over 20 episodes in 49 s,
    # 13,257 env steps, 5 versions (a random policy gets ~22): about 270 steps a second, each a
    # round trip. 100, over four times random play, costs CI less. The bounds (240 s in the page,
    # 300 s here) leave room for a slow machine.
    settings = gateway_settings(tmp_path)
    query = "inference=server&seed=1&target=100&window=20&max_seconds=240"
    requested: list[str] = []
    with running_gateway(settings) as gateway, open_page(browser, "about:blank") as demo:
        demo.page.on("request", lambda request: requested.append(request.url))
        demo.page.goto(f"{gateway.base_url}/static/cartpole.html?{query}")
        result = demo.demo_result(timeout_s=300)
        metrics = httpx.get(f"{gateway.base_url}/api/metrics").raise_for_status().json()

    print(f"demo result (server inference): {result}")
    assert result["inference"] == "server" and result["phase"] == "done"
    assert result["reached_target"], f"returns did not rise to 100: {result}\n{demo.console_text()}"
    assert result["first_mean_return"] < 60 <= 100 <= result["recent_mean_return"]
    # Nothing of a model runtime was fetched; the page's modules and uPlot were.
    assert not [url for url in requested if "/vendor/ort/" in url or url.endswith((".wasm", "onnx_policy.js"))], requested
    assert any(url.endswith("/static/rllink.js") for url in requested)
    # Every action came from the gateway, which built the same episodes the page counted
    # (runThinLoop flushes before the page reports, so all of them were handled): the
    # training ones, and apart, the evaluation ones (the 10th, 20th, ...: the default interval).
    serving = metrics["serving"]
    played = result["episodes"] + result["evaluation_episodes"]
    assert result["evaluation_interval"] == 10 and result["evaluation_episodes"] == played // 10 >= 1
    assert serving["actions_served_total"] == result["env_steps"]
    assert metrics["num_env_steps_sampled_lifetime"] + metrics["num_env_steps_evaluated_lifetime"] == result["env_steps"]
    assert serving["episodes_started_total"] == played and sum(serving["episodes_ended"].values()) == played
    assert metrics["num_episodes_lifetime"] == result["episodes"] and serving["open_episodes"] == 0
    assert metrics["num_evaluation_episodes_lifetime"] == result["evaluation_episodes"]
    assert metrics["weights_seq_no"] >= result["weights_seq_no"] >= 1  # it trained, and acted with the new versions
    assert not demo.errors(), "\n".join(demo.errors())
