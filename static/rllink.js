/**
 * rllink.js — an RLlink client for browsers (and Unity WebGL through a .jslib bridge).
 *
 * RLlink is RLlib's protocol between a training server and an external simulator.
 * Every frame is 8 ASCII digits giving the body's length in bytes, then the body: a
 * JSON object with a "type". This module speaks it over the gateway's WebSocket
 * endpoint (ws(s)://host/rllink), sending JSON frames as text messages.
 *
 *   import { RLlinkClient, decodeOnnxFile, runTrainingLoop } from '/static/rllink.js';
 *
 *   const client = await RLlinkClient.connect();        // ws(s)://<this page's host>/rllink
 *   await runTrainingLoop(client, {                      // PING, GET_CONFIG, GET_STATE, then loop
 *     async onState(state, config) { policy = await load(await decodeOnnxFile(state.onnx_file)); },
 *     async collect(numSteps, config) { return episodeChunks; }, // numSteps = env_steps_per_sample
 *   });
 *
 * or step by step: `await client.handshake()` (PING, then GET_CONFIG -> SET_CONFIG),
 * `await client.getState()`, `await client.episodesAndGetState(chunks)`.
 *
 * From a Unity WebGL .jslib, import the module once, keep the client on `window`, and
 * pass messages as JSON strings; replies go back to C# with SendMessage:
 *
 *   mergeInto(LibraryManager.library, {
 *     RLlinkConnect: function (url) {
 *       import('/static/rllink.js')
 *         .then((rllink) => rllink.RLlinkClient.connect(UTF8ToString(url)))
 *         .then((client) => { window.rllinkClient = client; SendMessage('RLlink', 'OnConnected', ''); });
 *     },
 *     RLlinkRequest: function (json) {   // e.g. '{"type":"GET_CONFIG"}'
 *       window.rllinkClient.request(JSON.parse(UTF8ToString(json))).then(
 *         (reply) => SendMessage('RLlink', 'OnReply', JSON.stringify(reply)),
 *         (error) => SendMessage('RLlink', 'OnError', JSON.stringify({ code: error.code, message: error.message })));
 *     },
 *   });
 *
 * (onnxruntime-web runs the policy on the same page: see onnx_policy.js.)
 *
 * Requests are answered strictly in the order they were sent, and only requests get
 * answers, so replies are matched to a FIFO of pending requests. The gateway answers a
 * request it refuses with an ERROR frame (`code`, `message`, `details`); the pending
 * Promise then rejects with an `RLlinkError` carrying them. EPISODES has no reply of
 * its own, so `sendEpisodes` follows it with a PING: the PONG says it was accepted,
 * an ERROR before the PONG says why not.
 */

const HEADER_SIZE = 8;
const MAX_BODY_SIZE = 99_999_999; // what 8 digits can announce
const REPLY_TYPES = {
  PING: 'PONG',
  GET_CONFIG: 'SET_CONFIG',
  GET_STATE: 'SET_STATE',
  EPISODES_AND_GET_STATE: 'SET_STATE',
  EPISODES: 'PONG', // of the PING that follows it (see sendEpisodes)
};
const textEncoder = new TextEncoder();
const textDecoder = new TextDecoder();

/** An ERROR frame from the gateway, or a broken connection, as an Error. */
export class RLlinkError extends Error {
  /**
   * @param {string} message  what went wrong, for people
   * @param {object} [info]   `code` (the gateway's error code, or 'connection_closed' /
   *                          'bad_frame' / 'unexpected_reply' for failures seen here),
   *                          `details`, and `request` (the type of the refused request)
   */
  constructor(message, { code = 'error', details = undefined, request = undefined } = {}) {
    super(message);
    this.name = 'RLlinkError';
    this.code = code;
    this.details = details;
    this.request = request;
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
    this._decoder = new FrameDecoder();
    this._pending = []; // requests awaiting replies, oldest first: {type, resolve, reject, error}
    socket.addEventListener('message', (event) => this._received(event.data));
    socket.addEventListener('close', (event) =>
      this._fail(
        new RLlinkError(`connection closed (code ${event.code}${event.reason ? `, ${event.reason}` : ''})`, {
          code: 'connection_closed',
        }),
      ),
    );
  }

  /** Send a request that gets a reply; resolve with the reply message, reject on ERROR. */
  request(message) {
    if (message.type === 'EPISODES') return this.sendEpisodes(message.episodes, message.env_steps);
    return this._send([message], message.type);
  }

  /** PING -> PONG; carries the token, if any (the gateway's auth wants it in the first message). */
  ping() {
    return this.request(this.token ? { type: 'PING', token: this.token } : { type: 'PING' });
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
   *                             is_truncated, optional action_logp, episode_id, weights_seq_no
   */
  episodesAndGetState(episodes, envSteps = countSteps(episodes)) {
    return this.request({ type: 'EPISODES_AND_GET_STATE', episodes, env_steps: envSteps });
  }

  /** EPISODES (no reply of its own), acknowledged by a following PING; resolves with the PONG. */
  sendEpisodes(episodes, envSteps = countSteps(episodes)) {
    return this._send([{ type: 'EPISODES', episodes, env_steps: envSteps }, { type: 'PING' }], 'EPISODES');
  }

  /** Close the connection; pending requests reject. */
  close() {
    this.socket.close(1000, 'client done');
  }

  _send(messages, requestType) {
    if (this.closed) return Promise.reject(new RLlinkError('connection is closed', { code: 'connection_closed', request: requestType }));
    return new Promise((resolve, reject) => {
      // One pending entry per reply expected: the last message's. An ERROR that comes
      // before it (for a preceding EPISODES) is kept and reported when that reply comes.
      this._pending.push({ type: requestType, resolve, reject, error: null });
      this.socket.send(messages.map(encodeFrame).join(''));
    });
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
      const error = new RLlinkError(`${pending.type} refused by the gateway: [${message.code}] ${message.message}`, {
        code: message.code,
        details: message.details,
        request: pending.type,
      });
      if (pending.type === 'EPISODES' && !pending.error) {
        pending.error = error; // it answers the EPISODES; the PONG of the following PING is still to come
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
    if (pending.error) pending.reject(pending.error);
    else pending.resolve(message);
  }

  _fail(error) {
    if (this.closed) return;
    this.closed = true;
    for (const pending of this._pending.splice(0)) pending.reject(error);
    this.onclose?.(error);
  }
}

/** Env steps in a list of chunks (the optional env_steps field of EPISODES). */
export function countSteps(episodes) {
  return episodes.reduce((sum, chunk) => sum + chunk.actions.length, 0);
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
