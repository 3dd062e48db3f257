/**
 * rllink.js — an RLlink client for browsers (and Unity WebGL through a .jslib bridge).
 *
 * RLlink is RLlib's protocol between a training server and an external simulator.
 * Every frame is 8 ASCII digits giving the body's length in bytes, then the body: a
 * JSON object with a "type". This module speaks it over the gateway's WebSocket
 * endpoint (ws(s)://host/rllink), sending JSON frames as text messages.
 *
 * Local inference (the page runs the policy, see onnx_policy.js):
 *
 *   import { RLlinkClient, decodeOnnxFile, runTrainingLoop } from '/static/rllink.js';
 *
 *   const client = await RLlinkClient.connect();        // ws(s)://<this page's host>/rllink
 *   await runTrainingLoop(client, {                      // PING, GET_CONFIG, GET_STATE, then loop
 *     async onState(state, config) { policy = await load(await decodeOnnxFile(state.onnx_file)); },
 *     async collect(numSteps, config) { return episodeChunks; }, // numSteps = env_steps_per_sample
 *   });
 *
 * A recurrent module (SET_CONFIG.state_size > 0, the gateway's `model.use_lstm`): the model
 * takes and gives the episode's state (onnx_policy.js), and every chunk carries `state_in`,
 * the state fed with its first observation; Sampler (sampler.js) does both.
 *
 * or step by step: `await client.handshake()` (PING, then GET_CONFIG -> SET_CONFIG),
 * `await client.getState()`, `await client.episodesAndGetState(chunks)`.
 *
 * Server-side inference (a thin client: the gateway acts and builds the episodes; no
 * model, no onnxruntime-web in the page):
 *
 *   await client.handshake();
 *   const { episode_id } = await client.startEpisode();            // EPISODE_STARTED
 *   const { action } = await client.getAction(episode_id, obs);    // ACTION
 *   client.logReturns(episode_id, reward);                          // no reply
 *   client.endEpisode(episode_id, lastObs, { terminated: true });   // no reply
 *
 * or `runThinLoop(client, { env })`, which plays episodes that way until stopped.
 *
 * Evaluation episodes (SET_CONFIG.evaluation_interval N, 0 for none): every Nth episode of
 * each env is played with the distribution's mode and never trained on. With local
 * inference the game plays them: `isEvaluationEpisode(played, N)` says which (Sampler in
 * sampler.js follows it and marks every chunk of them `evaluation: true`). A thin client's
 * the gateway plays itself: EPISODE_STARTED then says `evaluation: true`.
 *
 * Requests are answered strictly in the order they were sent, and only requests get
 * answers, so replies are matched to a FIFO of pending requests. The gateway answers a
 * request it refuses with an ERROR frame (`code`, `message`, `details`); the pending
 * Promise then rejects with an `RLlinkError` carrying them.
 *
 * Requests with no reply (EPISODES, LOG_ACTION, LOG_RETURNS, END_EPISODE) still get an
 * ERROR, in their turn, when refused; nothing when accepted. An ERROR alone cannot say
 * which of several such requests it refuses, nor whether it refuses the next request
 * instead, so each of them goes out followed by a PING (in the same WebSocket message):
 * an ERROR before that PING's PONG is the request's, a PONG alone says it was accepted.
 * - `sendEpisodes` (and the `{ack: true}` form of the thin calls) resolves with that
 *   PONG or rejects with the ERROR.
 * - `logAction`, `logReturns`, `endEpisode` resolve once written, so a simulator never
 *   waits a round trip for them. An ERROR that comes later for one of them (an
 *   `RLlinkError` whose `request` and `episodeId` name it) is reported exactly once:
 *   to `client.onerror(error)` if set; otherwise the next call on this client rejects
 *   with it (sending nothing), or a `flush()` already under way does. `flush()` resolves
 *   once the gateway has handled everything sent before it.
 *
 * A Unity WebGL build reaches this module through clients/unity/Runtime/Plugins/WebGL/
 * RLlink.jslib (C#: RLlinkWebGL.cs), which imports it, keeps the clients, and hands C#
 * tickets to poll for each request's result.
 */

const HEADER_SIZE = 8;
const MAX_BODY_SIZE = 99_999_999; // what 8 digits can announce
const REPLY_TYPES = {
  PING: 'PONG',
  GET_CONFIG: 'SET_CONFIG',
  GET_STATE: 'SET_STATE',
  EPISODES_AND_GET_STATE: 'SET_STATE',
  START_EPISODE: 'EPISODE_STARTED',
  GET_ACTION: 'ACTION',
  // No reply of their own: the PONG of the PING that follows each (see the header).
  EPISODES: 'PONG',
  LOG_ACTION: 'PONG',
  LOG_RETURNS: 'PONG',
  END_EPISODE: 'PONG',
};
const NO_REPLY_TYPES = new Set(['EPISODES', 'LOG_ACTION', 'LOG_RETURNS', 'END_EPISODE']);
const WEBSOCKET_OPEN = 1;
const textEncoder = new TextEncoder();
const textDecoder = new TextDecoder();

/** An ERROR frame from the gateway, or a broken connection, as an Error. */
export class RLlinkError extends Error {
  /**
   * @param {string} message  what went wrong, for people
   * @param {object} [info]   `code` (the gateway's error code, or 'connection_closed' /
   *                          'bad_frame' / 'unexpected_reply' for failures seen here),
   *                          `details`, `request` (the type of the refused request) and
   *                          `episodeId` (the thin-client episode it named, if any)
   */
  constructor(message, { code = 'error', details = undefined, request = undefined, episodeId = undefined } = {}) {
    super(message);
    this.name = 'RLlinkError';
    this.code = code;
    this.details = details;
    this.request = request;
    this.episodeId = episodeId;
  }
}

/** One whole frame for a message: the 8-digit byte length of the JSON body, then the body. */
export function encodeFrame(message) {
  const body = JSON.stringify(message);
  const size = textEncoder.encode(body).length; // the header counts UTF-8 bytes, not characters
  if (size > MAX_BODY_SIZE) throw new RangeError(`frame body of ${size} bytes does not fit an 8-digit header`);
  return String(size).padStart(HEADER_SIZE, '0') + body;
}

/**
 * Cuts a byte stream into frame bodies. WebSocket messages are treated as slices of
 * one stream, so a frame split over several messages, or several frames in one
 * message, decode the same.
 */
export class FrameDecoder {
  constructor() {
    this._buffer = new Uint8Array(0);
  }

  /** Bytes held of a frame not yet complete. */
  get buffered() {
    return this._buffer.length;
  }

  /**
   * Append received bytes (Uint8Array, ArrayBuffer or string) and return the parsed
   * body of every frame now complete. Throws RLlinkError('bad_frame') on a header that
   * is not 8 ASCII digits; the stream is unusable after that.
   */
  push(data) {
    const bytes = typeof data === 'string' ? textEncoder.encode(data) : new Uint8Array(data);
    const buffer = new Uint8Array(this._buffer.length + bytes.length);
    buffer.set(this._buffer);
    buffer.set(bytes, this._buffer.length);
    const messages = [];
    let pos = 0;
    while (buffer.length - pos >= HEADER_SIZE) {
      const size = parseHeader(buffer.subarray(pos, pos + HEADER_SIZE));
      if (buffer.length - pos - HEADER_SIZE < size) break;
      const body = buffer.subarray(pos + HEADER_SIZE, pos + HEADER_SIZE + size);
      messages.push(parseBody(body));
      pos += HEADER_SIZE + size;
    }
    this._buffer = buffer.slice(pos);
    return messages;
  }
}

function parseHeader(header) {
  let size = 0;
  for (const byte of header) {
    if (byte < 0x30 || byte > 0x39) {
      throw new RLlinkError(`bad frame header ${JSON.stringify(textDecoder.decode(header))}: expected 8 ASCII digits`, {
        code: 'bad_frame',
      });
    }
    size = size * 10 + (byte - 0x30);
  }
  return size;
}

function parseBody(body) {
  let message;
  try {
    message = JSON.parse(textDecoder.decode(body));
  } catch (err) {
    throw new RLlinkError(`frame body is not JSON (${err.message}); this client speaks JSON only`, { code: 'bad_frame' });
  }
  if (message === null || typeof message !== 'object' || typeof message.type !== 'string') {
    throw new RLlinkError('frame body is not a JSON object with a "type"', { code: 'bad_frame' });
  }
  return message;
}

/** ws(s)://<host of the page>/rllink, the gateway's WebSocket endpoint for a page it served. */
export function defaultUrl(location = globalThis.location) {
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${scheme}//${location.host}/rllink`;
}

/**
 * The gateway token given in the page's URL fragment (`page.html#token=...`), or null.
 * A fragment never leaves the browser, so the token stays out of server logs.
 */
export function tokenFromPage(location = globalThis.location) {
  return new URLSearchParams(location.hash.slice(1)).get('token');
}

/**
 * SET_STATE's `onnx_file` (base64 of the gzip-compressed ONNX model) as the ONNX bytes,
 * unpacked with the browser's own DecompressionStream.
 */
export async function decodeOnnxFile(onnxFile) {
  const binary = atob(onnxFile);
  const gzipped = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) gzipped[i] = binary.charCodeAt(i);
  const stream = new Blob([gzipped]).stream().pipeThrough(new DecompressionStream('gzip'));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

/** A connection to the gateway; one per simulator. */
export class RLlinkClient {
  /**
   * Open a WebSocket to the gateway and resolve once it is open.
   * @param {string} [url]  ws(s)://host:port/rllink; defaults to the page's own gateway
   * @param {object} [options]
   * @param {string} [options.token]  the gateway's shared token when its auth is on; it
   *                                  goes in the handshake's PING, not in the URL (URLs get logged)
   */
  static connect(url = defaultUrl(), { token = null } = {}) {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(url);
      socket.binaryType = 'arraybuffer';
      const failed = () => reject(new RLlinkError(`could not connect to ${url}`, { code: 'connection_closed' }));
      socket.addEventListener('error', failed, { once: true });
      socket.addEventListener(
        'open',
        () => {
          socket.removeEventListener('error', failed);
          resolve(new RLlinkClient(socket, { token }));
        },
        { once: true },
      );
    });
  }

  /** Wrap a WebSocket that is already open (use `connect` to open one). */
  constructor(socket, { token = null } = {}) {
    this.socket = socket;
    this.token = token;
    this.closed = false;
    this.onclose = null; // optional callback(RLlinkError) when the connection ends
    this.onerror = null; // optional callback(RLlinkError) for a refused logAction/logReturns/endEpisode
    this._decoder = new FrameDecoder();
    this._pending = []; // requests awaiting replies, oldest first: {type, episodeId, fenced, settle, error}
    this._lateErrors = []; // refused no-reply requests not yet reported (no onerror set)
    socket.addEventListener('message', (event) => this._received(event.data));
    socket.addEventListener('close', (event) =>
      this._fail(
        new RLlinkError(`connection closed (code ${event.code}${event.reason ? `, ${event.reason}` : ''})`, {
          code: 'connection_closed',
        }),
      ),
    );
  }

  /**
   * Send any request; resolve with its reply message, reject on ERROR. A request with no
   * reply of its own (EPISODES, LOG_*, END_EPISODE) resolves with the PONG of the PING
   * sent after it, as `sendEpisodes` does.
   */
  request(message) {
    if (NO_REPLY_TYPES.has(message.type)) return this._sendFenced(message, { ack: true });
    return this._send(message);
  }

  /** PING -> PONG; carries the token, if any (the gateway's auth wants it in the first message). */
  ping() {
    return this.request(this._ping());
  }

  /** GET_CONFIG -> SET_CONFIG: env_steps_per_sample, force_on_policy, spaces, ONNX names. */
  getConfig() {
    return this.request({ type: 'GET_CONFIG' });
  }

  /** GET_STATE -> SET_STATE: the current policy (onnx_file) and its weights_seq_no. */
  getState() {
    return this.request({ type: 'GET_STATE' });
  }

  /** The RLlink handshake, PING then GET_CONFIG; resolves with SET_CONFIG. */
  async handshake() {
    await this.ping();
    return this.getConfig();
  }

  /**
   * EPISODES_AND_GET_STATE -> SET_STATE. With force_on_policy the gateway answers once
   * the policy has trained on these episodes, so this may take a training step.
   * @param {object[]} episodes  chunks: obs (T+1), actions, rewards (T), is_terminated,
   *                             is_truncated, optional action_logp, episode_id, weights_seq_no,
   *                             evaluation (true on every chunk of an evaluation episode),
   *                             state_in (a recurrent module's, SET_CONFIG.state_size > 0: the
   *                             state fed with obs[0]; required on a chunk that goes on with an
   *                             episode, see sampler.js)
   */
  episodesAndGetState(episodes, envSteps = countSteps(episodes)) {
    return this.request({ type: 'EPISODES_AND_GET_STATE', episodes, env_steps: envSteps });
  }

  /** EPISODES (no reply of its own), acknowledged by a following PING; resolves with the PONG. */
  sendEpisodes(episodes, envSteps = countSteps(episodes)) {
    return this._sendFenced({ type: 'EPISODES', episodes, env_steps: envSteps }, { ack: true });
  }

  // -- Server-side inference (thin clients) --------------------------------------------

  /**
   * START_EPISODE -> EPISODE_STARTED `{episode_id}`: open an episode the gateway builds from
   * this connection's GET_ACTION / LOG_* requests. Give your own `episodeId` to send
   * GET_ACTION for it at once, without waiting for this reply (requests stay in order).
   * @param {object} [options]
   * @param {string} [options.episodeId]  default: the gateway picks a new id
   * @param {string} [options.agentId]    its module is the gateway's policy_mapping's for it
   * @param {string} [options.moduleId]   the module that acts (wins over agentId)
   * @param {boolean} [options.trainingEnabled=true]  false: served, never trained on
   * @param {boolean} [options.evaluation=false]  true: an evaluation episode (the mode, never
   *        trained on, its return reported apart); the gateway also makes every
   *        evaluation_interval-th episode of a connection one itself, and says so in the reply
   */
  startEpisode({ episodeId, agentId, moduleId, trainingEnabled = true, evaluation = false } = {}) {
    const message = { type: 'START_EPISODE', training_enabled: trainingEnabled };
    if (evaluation) message.evaluation = true;
    if (episodeId != null) message.episode_id = episodeId;
    if (agentId != null) message.agent_id = agentId;
    if (moduleId != null) message.module_id = moduleId;
    return this._send(message);
  }

  /**
   * GET_ACTION -> ACTION `{episode_id, action, weights_seq_no}`: the gateway's policy acts
   * on the observation (an int for a Discrete space, a list of floats for a Box).
   * @param {string} episodeId
   * @param {number[]|Float32Array} obs  the episode's current observation
   * @param {object} [options]
   * @param {boolean} [options.explore=true]  false: the most likely action (or the mean)
   */
  getAction(episodeId, obs, { explore = true } = {}) {
    return this._send({ type: 'GET_ACTION', episode_id: episodeId, obs: plainObs(obs), explore }, episodeId);
  }

  /**
   * GET_ACTION for many episodes in one request -> ACTION `{actions, weights_seq_no}`, the
   * actions in the batch's order (one forward pass on the gateway).
   * @param {{episode_id: string, obs: number[]|Float32Array, explore?: boolean}[]} batch
   *        at most one item per episode
   */
  getActions(batch) {
    const items = batch.map((item) => ({ ...item, obs: plainObs(item.obs) }));
    return this._send({ type: 'GET_ACTION', batch: items });
  }

  /**
   * LOG_ACTION (no reply): an action the client chose itself (a human, a script) on `obs`;
   * one step of the episode, like a GET_ACTION. Resolves once written (see the header
   * for its ERROR; `{ack: true}` waits for the gateway instead).
   */
  logAction(episodeId, obs, action, { ack = false } = {}) {
    return this._sendFenced({ type: 'LOG_ACTION', episode_id: episodeId, obs: plainObs(obs), action }, { ack });
  }

  /**
   * LOG_RETURNS (no reply): reward for the episode's last action (added up if sent twice).
   * Resolves once written (see the header for its ERROR; `{ack: true}` waits for the gateway).
   */
  logReturns(episodeId, reward, { ack = false } = {}) {
    return this._sendFenced({ type: 'LOG_RETURNS', episode_id: episodeId, reward }, { ack });
  }

  /**
   * END_EPISODE (no reply): the final observation and how the episode ended; at least one
   * flag must be true. Resolves once written (see the header for its ERROR; `{ack: true}`
   * waits for the gateway).
   * @param {object} [options]
   * @param {boolean} [options.terminated=true]  it reached a terminal state
   * @param {boolean} [options.truncated=false]  it was cut (a time limit)
   */
  endEpisode(episodeId, obs, { terminated = true, truncated = false, ack = false } = {}) {
    const message = { type: 'END_EPISODE', episode_id: episodeId, obs: plainObs(obs) };
    return this._sendFenced({ ...message, is_terminated: terminated, is_truncated: truncated }, { ack });
  }

  /**
   * A PING that resolves once the gateway has handled everything sent before it, and
   * rejects with the ERROR of a refused logAction/logReturns/endEpisode not yet reported.
   */
  flush() {
    return this._send(this._ping(), undefined, { takesLateErrors: true });
  }

  /** Close the connection; pending requests reject. */
  close() {
    this.socket.close(1000, 'client done');
  }

  _ping() {
    return this.token ? { type: 'PING', token: this.token } : { type: 'PING' };
  }

  /** A request that gets a reply; its Promise settles with that reply. */
  _send(message, episodeId = undefined, { takesLateErrors = false } = {}) {
    return new Promise((resolve, reject) => {
      const refused = this._refuseCall(message.type);
      if (refused) return reject(refused);
      const settle = (error, reply) => {
        error ??= takesLateErrors ? this._lateErrors.shift() : undefined;
        return error ? reject(error) : resolve(reply);
      };
      this._write([message], { type: message.type, episodeId, fenced: false, settle });
    });
  }

  /**
   * A request with no reply, and a PING after it: an ERROR before the PONG is this
   * request's. With `ack` its Promise settles on that PONG (or the ERROR); without, it
   * resolves once written and a later ERROR is reported as the header says.
   */
  _sendFenced(message, { ack }) {
    return new Promise((resolve, reject) => {
      const refused = this._refuseCall(message.type);
      if (refused) return reject(refused);
      const settle = ack
        ? (error, reply) => (error ? reject(error) : resolve(reply))
        : (error) => error && this._reportLate(error);
      // Not the token again: only the first message of a connection needs it.
      const entry = { type: message.type, episodeId: message.episode_id, fenced: true, late: !ack, settle };
      this._write([message, { type: 'PING' }], entry);
      if (!ack) resolve();
    });
  }

  /** Why a call must not be sent now (a closed connection, an unreported late ERROR), or null. */
  _refuseCall(requestType) {
    if (this.closed || this.socket.readyState !== WEBSOCKET_OPEN) {
      return new RLlinkError('connection is closed', { code: 'connection_closed', request: requestType });
    }
    return this._lateErrors.shift() ?? null;
  }

  _write(messages, pending) {
    pending.error = null;
    this._pending.push(pending);
    this.socket.send(messages.map(encodeFrame).join(''));
  }

  _reportLate(error) {
    if (this.onerror) this.onerror(error);
    else this._lateErrors.push(error);
  }

  _received(data) {
    let messages;
    try {
      messages = this._decoder.push(data);
    } catch (err) {
      this._fail(err);
      this.socket.close(4000, 'bad frame'); // browsers may only send 1000 or 3000-4999
      return;
    }
    for (const message of messages) this._dispatch(message);
  }

  _dispatch(message) {
    const pending = this._pending[0];
    if (!pending) {
      this._fail(new RLlinkError(`unexpected ${message.type} with no request pending`, { code: 'unexpected_reply' }));
      return;
    }
    if (message.type === 'ERROR') {
      const about = pending.episodeId === undefined ? '' : ` (episode ${JSON.stringify(pending.episodeId)})`;
      const error = new RLlinkError(`${pending.type}${about} refused by the gateway: [${message.code}] ${message.message}`, {
        code: message.code,
        details: message.details,
        request: pending.type,
        episodeId: pending.episodeId,
      });
      if (pending.fenced && !pending.error) {
        pending.error = error; // it answers the request; the PONG of the PING after it is still to come
        return;
      }
      pending.error ??= error;
    } else if (message.type !== REPLY_TYPES[pending.type]) {
      pending.error ??= new RLlinkError(`${pending.type} was answered by ${message.type}`, {
        code: 'unexpected_reply',
        request: pending.type,
      });
    }
    this._pending.shift();
    pending.settle(pending.error, message);
  }

  _fail(error) {
    if (this.closed) return;
    this.closed = true;
    // A request refused just before the connection ended (unauthorized...) says why; a
    // no-reply request resolved already and not refused is covered by onclose.
    for (const pending of this._pending.splice(0)) {
      if (pending.error || !pending.late) pending.settle(pending.error ?? error);
    }
    this.onclose?.(error);
  }
}

/** An observation as JSON wants it: typed arrays (Float32Array...) become plain arrays. */
function plainObs(obs) {
  return ArrayBuffer.isView(obs) ? Array.from(obs) : obs;
}

/** Env steps in a list of chunks (the optional env_steps field of EPISODES). */
export function countSteps(episodes) {
  return episodes.reduce((sum, chunk) => sum + chunk.actions.length, 0);
}

/**
 * Whether an env's next episode, after `episodesPlayed` of its own finished, is an evaluation
 * episode: the Nth, 2Nth, ... of every N = SET_CONFIG.evaluation_interval (0 or none: never).
 * Play it with the mode (OnnxPolicy.act's `explore: false`) and send each of its chunks with
 * `evaluation: true`.
 */
export function isEvaluationEpisode(episodesPlayed, interval) {
  return interval > 0 && episodesPlayed % interval === interval - 1;
}

/**
 * The RLlink sampling loop: the handshake (PING, GET_CONFIG), GET_STATE, then until
 * stopped: collect env_steps_per_sample steps and trade them for new weights with
 * EPISODES_AND_GET_STATE.
 *
 * @param {RLlinkClient} client
 * @param {object} hooks
 * @param {(state: object, config: object) => Promise<void>|void} hooks.onState
 *        load the policy from a SET_STATE (called before any collecting, then after every trade)
 * @param {(numSteps: number, config: object) => Promise<object[]>} hooks.collect
 *        run the simulator for numSteps steps with the current policy; resolve with the chunks
 * @param {AbortSignal} [hooks.signal]  stops the loop before the next collect or trade
 * @returns {Promise<object>} the last SET_STATE
 */
export async function runTrainingLoop(client, { onState, collect, signal }) {
  const config = await client.handshake();
  let state = await client.getState();
  await onState(state, config);
  while (!signal?.aborted) {
    const episodes = await collect(config.env_steps_per_sample, config);
    if (signal?.aborted) break;
    state = await client.episodesAndGetState(episodes);
    await onState(state, config);
  }
  return state;
}

/**
 * The thin-client loop (server-side inference): the handshake (PING, GET_CONFIG), then
 * episodes until stopped, the gateway choosing every action. Per episode START_EPISODE
 * (its EPISODE_STARTED says `evaluation: true` when the gateway plays the mode there);
 * per step GET_ACTION, the env steps, LOG_RETURNS (not waited for: one round trip per
 * step); END_EPISODE with the final observation and flags. A stop mid-episode ends the
 * episode as truncated. Before it returns, `flush()` waits until the gateway has handled
 * everything sent, so its metrics count every step, and reports a refused LOG_RETURNS or
 * END_EPISODE (unless `client.onerror` takes those).
 *
 * @param {RLlinkClient} client
 * @param {object} options
 * @param {object} options.env  the simulator: reset() -> obs, step(action) -> {obs, reward,
 *        terminated, truncated} (either may return a Promise)
 * @param {boolean} [options.explore=true]  false: the most likely actions (evaluation)
 * @param {boolean} [options.trainingEnabled=true]  false: the gateway serves but does not train on these episodes
 * @param {(config: object) => Promise<void>|void} [options.onConfig]  with SET_CONFIG, before the first episode
 * @param {(step: object) => Promise<void>|void} [options.onStep]  after every step (render,
 *        pace), with {episodeId, action, obs, reward, weightsSeqNo, evaluation}
 * @param {(episode: object) => Promise<void>|void} [options.onEpisodeEnd]  after each episode
 *        that ended in the env, with {episodeId, episodeReturn, length, weightsSeqNo, evaluation}
 *        (`evaluation`: the gateway played it as an evaluation episode, never trained on)
 * @param {AbortSignal} [options.signal]  checked before every step
 * @returns {Promise<{episodes: number, evaluationEpisodes: number, envSteps: number, weightsSeqNo: number|null}>}
 *          what was played (`episodes` counts the evaluation ones too)
 */
export async function runThinLoop(client, options) {
  const { env, explore = true, trainingEnabled = true, onConfig, onStep, onEpisodeEnd, signal } = options;
  await onConfig?.(await client.handshake());
  const totals = { episodes: 0, evaluationEpisodes: 0, envSteps: 0, weightsSeqNo: null };
  while (!signal?.aborted) {
    const started = await client.startEpisode({ trainingEnabled });
    const { episode_id: episodeId } = started;
    const evaluation = started.evaluation === true;
    let obs = await env.reset();
    let episodeReturn = 0;
    let length = 0;
    for (;;) {
      if (signal?.aborted) {
        await client.endEpisode(episodeId, obs, { terminated: false, truncated: true });
        break;
      }
      const { action, weights_seq_no: weightsSeqNo } = await client.getAction(episodeId, obs, { explore });
      totals.weightsSeqNo = weightsSeqNo;
      const step = await env.step(action);
      obs = step.obs;
      episodeReturn += step.reward;
      length += 1;
      totals.envSteps += 1;
      await client.logReturns(episodeId, step.reward);
      await onStep?.({ episodeId, action, obs, reward: step.reward, weightsSeqNo, evaluation });
      if (step.terminated || step.truncated) {
        await client.endEpisode(episodeId, obs, { terminated: step.terminated, truncated: step.truncated });
        totals.episodes += 1;
        if (evaluation) totals.evaluationEpisodes += 1;
        await onEpisodeEnd?.({ episodeId, episodeReturn, length, weightsSeqNo, evaluation });
        break;
      }
    }
  }
  await client.flush();
  return totals;
}
