"""The Unity WebGL bridge (clients/unity/Runtime/Plugins/WebGL/RLlink.jslib) in a real browser
against a real gateway, called the way a Unity WebGL build calls it.

No Unity here: a harness page stands in for what Emscripten and IL2CPP provide. It
evaluates the real .jslib with `mergeInto` / `LibraryManager` / `autoAddDeps`, then links
it as Emscripten's jsifier does: each library function and the `$RLlinkBridge` object are
turned back into source text and evaluated where only the runtime's pieces are in scope
(UTF8ToString, lengthBytesUTF8, stringToUTF8, _malloc, _free, HEAPF32), so code that
leans on anything else of the .jslib file fails here as it would in a build. The "C#"
side marshals as IL2CPP does: strings as UTF-8 pointers and float[] as float* into
HEAPF32, both freed (and scribbled over) once the call returns, bool as 0/1; returned
strings are read and freed. Then:

- CartPole (static/cartpole_env.js), four carts at once as four agents of one game,
  trains to a modest target in thin mode through RLlink_StartEpisode / RLlink_GetAction /
  RLlink_LogReturns / RLlink_EndEpisode tickets, polled with RLlink_Poll / RLlink_TakeResult
  once per "frame", as RLlinkWebGL.cs's WebGLAgentLink does; every string the bridge
  returned was freed (no leak), and the gateway's counters match the game's.
- A wrong token: the connection fails (RLlink_Status -1, RLlink_Error says unauthorized) and
  a request's ticket fails (RLlink_Poll 2) with code unauthorized. With the right token, a
  refused no-reply request (LOG_RETURNS for an unknown episode) fails its own ticket with
  unknown_episode, and the connection goes on.

The harness is written to the test's tmp_path and served from there on its own origin, as a
Unity build is often served apart from the gateway: it imports the gateway's modules (and
the bridge imports rllink.js) cross-origin, allowed by the gateway's `cors_origins`.
"""

from __future__ import annotations

import functools
import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from .browser import NEEDS_BROWSER, open_page
from .helpers import gateway_settings, running_gateway

pytestmark = NEEDS_BROWSER

JSLIB = Path(__file__).resolve().parents[1] / "clients" / "unity" / "Runtime" / "Plugins" / "WebGL" / "RLlink.jslib"
TOKEN = "webgl-bridge-token"

HARNESS_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>RLlink.jslib harness</title></head>
<body><pre id="status">loading</pre>
<script type="module">
// Served from its own origin, as a Unity build often is: the gateway's modules come
// cross-origin (the gateway lists this origin in cors_origins).
const gateway = new URLSearchParams(location.search).get('gateway');
const { CartPole } = await import(`${gateway}/static/cartpole_env.js`);
const { createRandom } = await import(`${gateway}/static/random.js`);

// -- What Emscripten's runtime gives a .jslib ------------------------------------------
const memory = new ArrayBuffer(16 << 20);
const HEAPU8 = new Uint8Array(memory);
const HEAPF32 = new Float32Array(memory);
const live = new Map(); // pointer -> size
let top = 16;
function _malloc(size) {            // a bump allocator that starts over when all is freed
  const ptr = (top + 7) & ~7;
  top = ptr + size;
  if (top > memory.byteLength) throw new Error('harness heap exhausted: something is not freed');
  live.set(ptr, size);
  return ptr;
}
function _free(ptr) {
  if (!live.has(ptr)) throw new Error(`free of ${ptr}, which is not allocated`);
  HEAPU8.fill(0xff, ptr, ptr + live.get(ptr)); // scribble: a pointer read after the call sees garbage
  live.delete(ptr);
  if (live.size === 0) top = 16;
}
const encoder = new TextEncoder();
const decoder = new TextDecoder();
function lengthBytesUTF8(text) { return encoder.encode(text).length; }
function stringToUTF8(text, ptr, maxBytes) {
  const bytes = encoder.encode(text).subarray(0, maxBytes - 1);
  HEAPU8.set(bytes, ptr);
  HEAPU8[ptr + bytes.length] = 0;
}
function UTF8ToString(ptr) {
  let end = ptr;
  while (HEAPU8[end] !== 0) end++;
  return decoder.decode(HEAPU8.subarray(ptr, end));
}

// -- Building and linking the library as Emscripten does ----------------------------------
function stringifyWithFunctions(value) {
  if (typeof value === 'function') return value.toString();
  if (Array.isArray(value)) return '[' + value.map(stringifyWithFunctions).join(', ') + ']';
  if (value && typeof value === 'object') {
    return '{' + Object.entries(value).map(([k, v]) => JSON.stringify(k) + ': ' + stringifyWithFunctions(v)).join(', ') + '}';
  }
  return JSON.stringify(value);
}
function link(source) {
  const LibraryManager = { library: {} };
  const mergeInto = (target, library) => Object.assign(target, library);
  const autoAddDeps = (library, name) => {
    for (const key of Object.keys(library)) {
      if (typeof library[key] === 'function' && !key.startsWith('$')) (library[key + '__deps'] ??= []).push(name);
    }
  };
  new Function('mergeInto', 'LibraryManager', 'autoAddDeps', source)(mergeInto, LibraryManager, autoAddDeps);
  let code = '';
  const exported = [];
  for (const [key, value] of Object.entries(LibraryManager.library)) {
    if (key.includes('__')) continue;
    if (key.startsWith('$')) code += `var ${key.slice(1)} = ${stringifyWithFunctions(value)};\\n`;
    else {
      code += `var _${key} = ${value.toString()};\\n`;
      exported.push(key);
    }
  }
  code += `return { ${exported.map((name) => `${name}: _${name}`).join(', ')} };`;
  const runtime = { UTF8ToString, lengthBytesUTF8, stringToUTF8, _malloc, _free, HEAPF32, HEAPU8 };
  return new Function(...Object.keys(runtime), code)(...Object.values(runtime));
}

// -- The C# side: IL2CPP's marshalling around every call -----------------------------------
function marshal(native) {
  const call = (name, ...args) => {
    const temporaries = [];
    const converted = args.map((arg) => {
      if (typeof arg === 'string') {
        const size = lengthBytesUTF8(arg) + 1;
        const ptr = _malloc(size);
        stringToUTF8(arg, ptr, size);
        temporaries.push(ptr);
        return ptr;
      }
      if (arg instanceof Float32Array) {
        const ptr = _malloc(arg.length * 4);
        HEAPF32.set(arg, ptr >> 2);
        temporaries.push(ptr);
        return ptr;
      }
      if (typeof arg === 'boolean') return arg ? 1 : 0;
      if (arg === null) return 0;
      return arg;
    });
    try {
      return native[name](...converted);
    } finally {
      temporaries.forEach(_free);
    }
  };
  const callString = (name, ...args) => {  // a `string` return: read, then freed by the marshaller
    const ptr = call(name, ...args);
    const text = UTF8ToString(ptr);
    _free(ptr);
    return text;
  };
  return { call, callString };
}

// The next frame of the game loop. A timer (clamped to about 4 ms by the browser), not a
// busy loop: the gateway shares the machine's cores with this page.
const nextFrame = () => new Promise((resolve) => setTimeout(resolve, 0));

/** Poll a ticket once per frame until it is done; resolve with [state, result JSON]. */
async function settle({ call, callString }, ticket, deadline) {
  for (;;) {
    const state = call('RLlink_Poll', ticket);
    if (state !== 0) return [state, state > 0 ? JSON.parse(callString('RLlink_TakeResult', ticket)) : null];
    if (performance.now() > deadline) throw new Error(`ticket ${ticket} still pending at the deadline`);
    await nextFrame();
  }
}

async function connect(bridge, url, token, deadline) {
  const connection = bridge.call('RLlink_Connect', url, token, '');
  while (bridge.call('RLlink_Status', connection) === 0) {
    if (performance.now() > deadline) throw new Error('RLlink_Connect: no handshake by the deadline');
    await nextFrame();
  }
  return connection;
}

/**
 * CartPole with `agents` carts, each an agent of WebGLAgentLink's kind: its own episode
 * id, START_EPISODE and GET_ACTION sent together, LOG_RETURNS before the next GET_ACTION,
 * END_EPISODE when done; no-reply tickets checked for errors every frame.
 */
async function trainCartPole(bridge, connection, { agents, target, window, seconds }) {
  const started = performance.now();
  const deadline = started + seconds * 1000;
  const random = createRandom(1);
  const returns = [];
  let envSteps = 0;
  let weightsSeqNo = null;
  let frames = 0;
  const unanswered = [];
  const starts = new Set(); // START_EPISODE tickets: their EPISODE_STARTED may say `evaluation`
  let evaluationStarts = 0;
  const taken = (ticket, result) => {
    if (starts.delete(ticket) && result.evaluation === true) evaluationStarts += 1;
  };
  const getAction = (agent) => bridge.call('RLlink_GetAction', connection, agent.episodeId, Float32Array.from(agent.obs),
                                           agent.obs.length, true);
  const endEpisode = (agent, terminated, truncated) => bridge.call(
    'RLlink_EndEpisode', connection, agent.episodeId, Float32Array.from(agent.obs), agent.obs.length, terminated, truncated);
  const begin = (agent) => {
    agent.episodeId = `webgl-${agent.index}-${agent.episodes++}`;
    agent.obs = agent.env.reset();
    agent.episodeReturn = 0;
    const start = bridge.call('RLlink_StartEpisode', connection, JSON.stringify({ episode_id: agent.episodeId }));
    starts.add(start);
    unanswered.push(start);
    agent.ticket = getAction(agent);  // pipelined behind its START_EPISODE
  };
  const carts = Array.from({ length: agents }, (_, index) => ({ index, env: new CartPole(random), episodes: 0 }));
  carts.forEach(begin);
  const mean = () => returns.slice(-window).reduce((a, b) => a + b, 0) / Math.min(returns.length, window);
  while (!(returns.length >= window && mean() >= target)) {
    if (performance.now() > deadline) break;
    for (const agent of carts) {
      const state = bridge.call('RLlink_Poll', agent.ticket);
      if (state === 0) continue;
      const result = JSON.parse(bridge.callString('RLlink_TakeResult', agent.ticket));
      if (state !== 1) throw new Error(`GET_ACTION failed: ${JSON.stringify(result)}`);
      weightsSeqNo = result.weights_seq_no;
      const step = agent.env.step(result.action);
      envSteps += 1;
      agent.episodeReturn += step.reward;
      agent.obs = step.obs;
      unanswered.push(bridge.call('RLlink_LogReturns', connection, agent.episodeId, step.reward));
      if (step.terminated || step.truncated) {
        unanswered.push(endEpisode(agent, step.terminated, step.truncated));
        returns.push(agent.episodeReturn);
        begin(agent);
      } else {
        agent.ticket = getAction(agent);
      }
    }
    for (let i = unanswered.length - 1; i >= 0; i--) {
      const state = bridge.call('RLlink_Poll', unanswered[i]);
      if (state === 0) continue;
      const result = JSON.parse(bridge.callString('RLlink_TakeResult', unanswered[i]));
      if (state !== 1) throw new Error(`a no-reply request failed: ${JSON.stringify(result)}`);
      taken(unanswered[i], result);
      unanswered.splice(i, 1);
    }
    frames += 1;
    await nextFrame();
  }
  // Stop as a game would: play each cart's last action, end its episode (cut: truncated
  // unless it just fell), and wait for every ticket.
  const open = [];
  for (const agent of carts) {
    const [state, result] = await settle(bridge, agent.ticket, deadline + 60_000);
    if (state !== 1) throw new Error(`the last GET_ACTION failed: ${JSON.stringify(result)}`);
    const step = agent.env.step(result.action);
    envSteps += 1;
    agent.obs = step.obs;
    open.push(bridge.call('RLlink_LogReturns', connection, agent.episodeId, step.reward));
    open.push(endEpisode(agent, step.terminated, !step.terminated));
  }
  for (const ticket of [...unanswered, ...open]) {
    const [state, result] = await settle(bridge, ticket, deadline + 60_000);
    if (state !== 1) throw new Error(`a no-reply request failed: ${JSON.stringify(result)}`);
    taken(ticket, result);
  }
  return {
    reached: returns.length >= window && mean() >= target, episodes: returns.length, envSteps, frames,
    weightsSeqNo, firstMean: returns.slice(0, window).reduce((a, b) => a + b, 0) / window, recentMean: mean(),
    startedEpisodes: carts.reduce((sum, agent) => sum + agent.episodes, 0), evaluationStarts,
    seconds: Math.round(performance.now() - started) / 1000,
  };
}

window.harness = {
  async load() {
    const source = await (await fetch('RLlink.jslib')).text();
    this.bridge = marshal(link(source));
    return Object.keys(this.bridge);
  },
  liveAllocations: () => live.size,
  connect: (url, token, seconds = 60) => connect(window.harness.bridge, url, token, performance.now() + seconds * 1000),
  settle: (ticket, seconds = 60) => settle(window.harness.bridge, ticket, performance.now() + seconds * 1000),
  trainCartPole: (connection, options) => trainCartPole(window.harness.bridge, connection, options),
  /** Run `work` and report in the DOM: #result (JSON) or #error, as the demo page does. */
  report(work) {
    const append = (id, text) => {
      const pre = document.createElement('pre');
      pre.id = id;
      pre.textContent = text;
      document.body.append(pre);
    };
    work.then((value) => append('result', JSON.stringify(value)), (error) => append('error', String(error?.stack ?? error)));
  },
};
document.getElementById('status').textContent = 'ready';
</script></body></html>
"""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 -- the base class's signature
        pass


@contextmanager
def harness_server(tmp_path: Path) -> Iterator[str]:
    """Serve the harness page and the real RLlink.jslib from tmp_path; yield the page's origin."""
    root = tmp_path / "harness"
    root.mkdir()
    (root / "index.html").write_text(HARNESS_HTML)
    (root / "RLlink.jslib").write_text(JSLIB.read_text())
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, name="harness-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextmanager
def harness_and_gateway(tmp_path: Path, **overrides) -> Iterator[tuple[str, object]]:
    """The harness's origin and a gateway that allows it (cors_origins)."""
    with harness_server(tmp_path) as origin, running_gateway(
        gateway_settings(tmp_path, cors_origins=[origin], **overrides)
    ) as gateway:
        yield origin, gateway


def open_harness(browser, origin: str, gateway):
    return open_page(browser, f"{origin}/index.html?gateway={gateway.base_url}")


def run_in_harness(page, script: str, arg, timeout_s: float) -> dict:
    """Start `script` (a JS function of (harness, arg) returning a Promise) and wait for its #result."""
    page.wait_until("window.harness && document.getElementById('status').textContent === 'ready'", 30, "the harness")
    start = f"async (arg) => {{ await window.harness.load(); window.harness.report(({script})(window.harness, arg)); }}"
    page.page.evaluate(start, arg)
    page.wait_for("#result, #error", timeout_s=timeout_s)
    if page.page.query_selector("#error"):
        pytest.fail(f"the harness failed: {page.page.inner_text('#error')}\n{page.console_text()}")
    return json.loads(page.page.inner_text("#result"))


TRAIN = """async (harness, { url, target, seconds }) => {
  const { call, callString } = harness.bridge;
  const connection = await harness.connect(url, '');
  if (call('RLlink_Status', connection) !== 1) throw new Error(`not connected: ${callString('RLlink_Error', connection)}`);
  const config = JSON.parse(callString('RLlink_Config', connection));
  const run = await harness.trainCartPole(connection, { agents: 4, target, window: 20, seconds });
  // A request with a reply through RLlink_Request, and a batch through RLlink_GetActions.
  const [stateKind, state] = await harness.settle(call('RLlink_Request', connection, JSON.stringify({ type: 'GET_STATE' })));
  const ids = ['batch-a', 'batch-b'];
  const starts = ids.map((id) => call('RLlink_StartEpisode', connection,
                                      JSON.stringify({ episode_id: id, training_enabled: false })));
  const items = ids.map((id) => ({ episode_id: id, obs: [0, 0, 0.01, 0] }));
  const batch = call('RLlink_GetActions', connection, JSON.stringify(items));
  const [batchKind, actions] = await harness.settle(batch);
  for (const ticket of starts) await harness.settle(ticket);
  const ends = ids.map((id) => call('RLlink_EndEpisode', connection, id, Float32Array.from([0, 0, 0, 0]), 4, true, false));
  for (const ticket of ends) await harness.settle(ticket);
  call('RLlink_Close', connection);
  return { ...run, config: { type: config.type, action_space: config.action_space },
           state: { kind: stateKind, type: state.type, weights_seq_no: state.weights_seq_no },
           batch: { kind: batchKind, type: actions.type, actions: actions.actions },
           pollTaken: call('RLlink_Poll', batch), takeTaken: callString('RLlink_TakeResult', batch),
           liveAllocations: harness.liveAllocations() };
}"""


@pytest.mark.e2e  # real training to a target
def test_the_webgl_bridge_trains_cartpole_in_thin_mode_as_a_unity_build_calls_it(browser, tmp_path):
    # Measured here (2 shared cores, load 5-6): 4 carts reach a mean return of 150 over 20 episodes
    # in 13-21 s, 9,800-12,000 env steps, 4-5 versions (a random policy gets ~22). The bounds
    # (240 s in the page, 330 s here) leave room for a slow machine.
    with harness_and_gateway(tmp_path) as (origin, gateway):
        with open_harness(browser, origin, gateway) as page:
            result = run_in_harness(page, TRAIN, {"url": gateway.ws_url, "target": 150, "seconds": 240}, timeout_s=330)
            console_errors = page.errors()
        metrics = httpx.get(f"{gateway.base_url}/api/metrics").raise_for_status().json()

    print(f"webgl bridge result: {result}")
    assert result["config"] == {"type": "SET_CONFIG", "action_space": {"type": "discrete", "n": 2}}
    assert result["reached"], f"returns did not rise to 150: {result}"
    assert result["firstMean"] < 60 <= 150 <= result["recentMean"]
    assert result["state"]["kind"] == 1 and result["state"]["type"] == "SET_STATE"
    assert 1 <= result["weightsSeqNo"] <= result["state"]["weights_seq_no"] <= metrics["weights_seq_no"]  # it trained
    assert result["batch"]["kind"] == 1 and result["batch"]["type"] == "ACTION" and len(result["batch"]["actions"]) == 2
    assert result["pollTaken"] == -1 and result["takeTaken"] == ""  # a ticket is taken once
    assert result["liveAllocations"] == 0  # C# freed every string the bridge returned
    # Every step of the game's episodes (the ones cut at the end included) reached the
    # gateway: the last ticket of each request settled before the page reported.
    serving = metrics["serving"]
    assert serving["actions_served_total"] == result["envSteps"] + 2  # + the batch (training_enabled false)
    assert serving["episodes_started_total"] == result["startedEpisodes"] + 2 and serving["open_episodes"] == 0
    assert sum(serving["episodes_ended"].values()) == result["startedEpisodes"] + 2
    # The gateway played every 10th episode (its default evaluation_interval) as an evaluation
    # one; the bridge handed EPISODE_STARTED's `evaluation` to the game; they did not train.
    assert result["evaluationStarts"] == result["startedEpisodes"] // 10 >= 1
    assert metrics["num_evaluation_episodes_lifetime"] == result["evaluationStarts"]
    assert metrics["num_env_steps_sampled_lifetime"] + metrics["num_env_steps_evaluated_lifetime"] == result["envSteps"]
    assert not console_errors, "\n".join(console_errors)


ERRORS = """async (harness, { url, token }) => {
  const { call, callString } = harness.bridge;
  const zeros = Float32Array.from([0, 0, 0, 0]);
  // Wrong token: the handshake's PING is refused and the connection ends.
  const wrong = call('RLlink_Connect', url, 'not-the-token', '');
  const early = call('RLlink_StartEpisode', wrong, '');   // sent before the failure is known
  const [earlyKind, earlyResult] = await harness.settle(early);
  while (call('RLlink_Status', wrong) === 0) await new Promise((r) => setTimeout(r, 5));
  const wrongStatus = call('RLlink_Status', wrong);
  const wrongError = JSON.parse(callString('RLlink_Error', wrong));
  const [laterKind, laterResult] = await harness.settle(call('RLlink_GetAction', wrong, 'x', zeros, 4, true));
  // Right token: a refused no-reply request fails its own ticket; the connection goes on.
  const right = await harness.connect(url, token);
  const rightStatus = call('RLlink_Status', right);
  const [refusedKind, refused] = await harness.settle(call('RLlink_LogReturns', right, 'never-started', 1));
  const start = call('RLlink_StartEpisode', right, JSON.stringify({ episode_id: 'e1' }));
  const act = call('RLlink_GetAction', right, 'e1', Float32Array.from([0.01, 0.02, 0.03, 0.04]), 4, false);
  const [startKind, started] = await harness.settle(start);
  const [actKind, action] = await harness.settle(act);
  const [rewardKind] = await harness.settle(call('RLlink_LogReturns', right, 'e1', 1));
  const [endKind, ended] = await harness.settle(call('RLlink_EndEpisode', right, 'e1', zeros, 4, true, false));
  const stillStatus = call('RLlink_Status', right);
  call('RLlink_Close', right);
  const [closedKind, closed] = await harness.settle(call('RLlink_GetAction', right, 'e1', zeros, 4, true));
  return { earlyKind, earlyResult, wrongStatus, wrongError, laterKind, laterResult, rightStatus, refusedKind, refused,
           startKind, started, actKind, action, rewardKind, endKind, ended, stillStatus, closedKind, closed,
           liveAllocations: harness.liveAllocations() };
}"""


def test_the_webgl_bridge_reports_a_wrong_token_and_refused_requests_on_their_tickets(browser, tmp_path):
    with harness_and_gateway(tmp_path, auth_token=TOKEN) as (origin, gateway):
        with open_harness(browser, origin, gateway) as page:
            result = run_in_harness(page, ERRORS, {"url": gateway.ws_url, "token": TOKEN}, timeout_s=120)
    print(json.dumps(result, indent=1))

    assert result["wrongStatus"] == -1 and result["wrongError"]["code"] == "unauthorized"
    for kind, error in ((result["earlyKind"], result["earlyResult"]), (result["laterKind"], result["laterResult"])):
        assert kind == 2 and error["type"] == "ERROR" and error["code"] == "unauthorized", error
        assert "token" in error["message"]
    assert result["rightStatus"] == 1 and result["stillStatus"] == 1
    assert result["refusedKind"] == 2, result["refused"]
    assert result["refused"]["code"] == "unknown_episode" and result["refused"]["request"] == "LOG_RETURNS"
    assert result["refused"]["episode_id"] == "never-started"
    assert (result["startKind"], result["actKind"], result["rewardKind"], result["endKind"]) == (1, 1, 1, 1)
    assert result["started"] == {"type": "EPISODE_STARTED", "episode_id": "e1"}
    assert result["action"]["episode_id"] == "e1" and result["action"]["action"] in (0, 1)
    assert result["ended"] == {"type": "PONG"}  # END_EPISODE has no reply: its ticket ends with the PING's
    assert result["closedKind"] == 2 and result["closed"]["code"] == "connection_closed"
    assert result["liveAllocations"] == 0
