/**
 * onnx_policy.js — the gateway's ONNX policy, run in the page with onnxruntime-web.
 *
 * onnxruntime-web comes from this gateway (/vendor/ort/, installed by `npm ci`), with
 * its wasm backend on one thread: more threads need a cross-origin-isolated page, and
 * a policy this small gains nothing from them.
 *
 * The model's contract (SET_CONFIG and the model's metadata say the same): one input,
 * named by SET_CONFIG.onnx_input_name, of shape [batch, ...observation shape] ([batch, C, H, W]
 * for a camera image, [batch, flat] for a dict); output 0,
 * "action_dist_inputs", holds per row the logits of a Categorical (Discrete actions),
 * the logits of each sub-action one after the other (MultiDiscrete `nvec`,
 * "multi_categorical"), or the mean then the log std of a diagonal Gaussian (Box actions).
 *
 * A masked module's model (SET_CONFIG.onnx_action_mask_input_name set) takes a second
 * input, the action mask [batch, k] float32 (1 allowed, 0 forbidden, one per logit), and
 * outputs logits + (mask - 1) * 1e8: a forbidden action's probability is exactly 0.
 *
 * A recurrent module's model (SET_CONFIG.state_size > 0: `model.use_lstm` on the gateway) takes
 * a further input "state_in" [batch, state_size] (float32) and gives a further output
 * "state_out" of the same shape, the state after the step. `act(obs, mask, { state })` feeds
 * `state` (zeros when not given: an episode's start) and resolves with `state` too, the
 * state_out to feed with the episode's next observation; `stateSize` says its length (0 for a
 * feed-forward model). The caller keeps it per episode (Sampler in sampler.js does), across
 * model versions too.
 *
 * `act(obs, mask, { explore: false })` plays the distribution's mode instead of sampling
 * (an evaluation episode, see rllink.js isEvaluationEpisode): the most likely action (after
 * the mask), the most likely one of each sub-action, or the Gaussian's mean (the game clips
 * it to the box, as it does a sample); from a gSDE model's noise-free output
 * ("action_dist_inputs_noise_free") where it has one.
 */

import { gaussian } from './random.js';

export const ORT_BASE = '/vendor/ort/';
const NOISE_FREE_OUTPUT = 'action_dist_inputs_noise_free'; // a gSDE model's output without its exploration noise
export const STATE_INPUT = 'state_in'; // a recurrent model's state, fed back step to step (RLLINK.md)
export const STATE_OUTPUT = 'state_out';
let ortModule = null;

/** Import onnxruntime-web once and set it up for wasm on one thread. */
export function loadOrt(base = ORT_BASE) {
  ortModule ??= import(`${base}ort.wasm.min.mjs`).then(
    (ort) => {
      ort.env.wasm.wasmPaths = base;
      ort.env.wasm.numThreads = 1;
      return ort;
    },
    (err) => {
      ortModule = null;
      throw new Error(`onnxruntime-web could not be loaded from ${base} (${err.message}); run \`npm ci\` on the gateway`);
    },
  );
  return ortModule;
}

/** log(softmax(logits)), computed stably. */
export function logSoftmax(logits) {
  const max = Math.max(...logits);
  const logSum = max + Math.log(logits.reduce((sum, v) => sum + Math.exp(v - max), 0));
  return logits.map((v) => v - logSum);
}

/**
 * Sample from a Categorical given by logits; return {action, logp}. An action of
 * probability 0 (a masked one, logit about -1e8) is never drawn, even when rounding
 * leaves the uniform draw above the sum of the probabilities. `explore` false: the most
 * likely action (the first of equals).
 */
export function sampleCategorical(logits, random, explore = true) {
  const logp = logSoftmax(logits);
  if (!explore) {
    const action = logp.indexOf(Math.max(...logp));
    return { action, logp: logp[action] };
  }
  let u = random();
  let action = -1;
  for (let i = 0; i < logp.length; i++) {
    const p = Math.exp(logp[i]);
    if (p === 0) continue;
    action = i; // the last possible action so far, in case u stays above the sum
    u -= p;
    if (u < 0) break;
  }
  return { action, logp: logp[action] };
}

/**
 * Sample each sub-action of a MultiDiscrete from the softmax of its own nvec[i] logits
 * (one slice after the other; `explore` false: the most likely of each); return
 * {action: one int per sub-action, logp: their sum}.
 */
export function sampleMultiCategorical(logits, nvec, random, explore = true) {
  const action = [];
  let logp = 0;
  let start = 0;
  for (const n of nvec) {
    const part = sampleCategorical(logits.slice(start, start + n), random, explore);
    action.push(part.action);
    logp += part.logp;
    start += n;
  }
  return { action, logp };
}

/** Sample from a diagonal Gaussian given [mean..., logStd...] (`explore` false: the mean); return {action, logp}. */
export function sampleGaussian(distInputs, random, explore = true) {
  const half = distInputs.length / 2;
  const action = [];
  let logp = 0;
  for (let i = 0; i < half; i++) {
    const mean = distInputs[i];
    const logStd = distInputs[half + i];
    const z = explore ? gaussian(random) : 0;
    action.push(mean + Math.exp(logStd) * z);
    logp += -0.5 * z * z - logStd - 0.5 * Math.log(2 * Math.PI);
  }
  return { action, logp };
}

/** SET_CONFIG.action_distribution by action space, for servers that send none (RLlib's). */
const DEFAULT_DISTRIBUTIONS = { discrete: 'categorical', multi_discrete: 'multi_categorical', box: 'gaussian' };

/**
 * The shape of one observation as the model declares its input (all but the batch axis),
 * e.g. [3, 64, 64] for an image; null when the model does not say (then: a flat vector).
 */
function observationShape(session, inputName) {
  const meta = session.inputMetadata?.find?.((m) => m.name === inputName);
  const dims = meta?.isTensor ? meta.shape.slice(1) : [];
  return dims.length > 0 && dims.every((n) => Number.isInteger(n) && n > 0) ? dims : null;
}

/**
 * The length of a recurrent model's state (its state_in input [batch, state_size]); 0 for a
 * feed-forward model. `expected` (SET_CONFIG.state_size, if given) must agree with the model.
 */
function recurrentStateSize(session, expected) {
  if (!session.inputNames.includes(STATE_INPUT)) {
    if (expected > 0) throw new Error(`SET_CONFIG says state_size ${expected}, but the model has no ${STATE_INPUT} input`);
    return 0;
  }
  if (!session.outputNames.includes(STATE_OUTPUT)) throw new Error(`the model has ${STATE_INPUT} but no ${STATE_OUTPUT} output`);
  const meta = session.inputMetadata?.find?.((m) => m.name === STATE_INPUT);
  const declared = meta?.isTensor ? meta.shape[1] : undefined;
  const size = Number.isInteger(declared) && declared > 0 ? declared : expected;
  if (!(Number.isInteger(size) && size > 0)) {
    throw new Error(`the model's ${STATE_INPUT} has no fixed size: give stateSize (SET_CONFIG.state_size)`);
  }
  if (expected > 0 && expected !== size) throw new Error(`SET_CONFIG says state_size ${expected}, the model's ${STATE_INPUT} has ${size}`);
  return size;
}

/** One policy version: an inference session plus how to sample from its output. */
export class OnnxPolicy {
  /**
   * @param {Uint8Array} onnxBytes  the model (see rllink.js decodeOnnxFile)
   * @param {object} options  inputName (SET_CONFIG.onnx_input_name), actionSpace
   *                          (SET_CONFIG.action_space), weightsSeqNo, random ([0,1) generator);
   *                          optional distribution (SET_CONFIG.action_distribution; by the
   *                          space if not given) and maskInputName
   *                          (SET_CONFIG.onnx_action_mask_input_name; null: no mask input);
   *                          optional stateSize (SET_CONFIG.state_size: checked against the
   *                          model's state_in, which says whether the model is recurrent)
   */
  static async create(onnxBytes, { inputName, actionSpace, weightsSeqNo, random, distribution, maskInputName, stateSize }) {
    const ort = await loadOrt();
    const session = await ort.InferenceSession.create(onnxBytes, { executionProviders: ['wasm'] });
    for (const name of [inputName, maskInputName ?? inputName]) {
      if (!session.inputNames.includes(name)) {
        throw new Error(`the model has inputs ${session.inputNames.join(', ')}, not ${name}`);
      }
    }
    return new OnnxPolicy(ort, session, { inputName, actionSpace, weightsSeqNo, random, distribution, maskInputName, stateSize });
  }

  constructor(ort, session, { inputName, actionSpace, weightsSeqNo, random, distribution, maskInputName, stateSize = 0 }) {
    this.ort = ort;
    this.session = session;
    this.inputName = inputName;
    this.obsShape = observationShape(session, inputName);
    this.distribution = distribution ?? DEFAULT_DISTRIBUTIONS[actionSpace.type];
    if (!['categorical', 'multi_categorical', 'gaussian'].includes(this.distribution)) {
      throw new Error(`action distribution ${this.distribution} is not supported in the browser`);
    }
    this.nvec = actionSpace.nvec ?? null; // multi_categorical: the size of each sub-action
    this.maskInputName = maskInputName ?? null;
    // The mask has one column per logit: n (categorical) or sum(nvec) (multi_categorical).
    this.maskWidth = this.nvec ? this.nvec.reduce((sum, n) => sum + n, 0) : actionSpace.n;
    this.weightsSeqNo = weightsSeqNo;
    this.random = random;
    this.stateSize = recurrentStateSize(session, stateSize ?? 0); // 0: feed-forward, no state_in
  }

  /** A recurrent model's state at an episode's start: stateSize zeros. */
  initialState() {
    return new Float32Array(this.stateSize);
  }

  /**
   * Run the model on one observation; resolve with {action, logp, distInputs, state}: the action
   * is an int (categorical), one int per sub-action (multi_categorical) or floats (gaussian).
   * `obs` is as on the wire: a flat list, or nested like its space's shape (an image [C][H][W]).
   * `mask` (a masked model only): 1 allowed, 0 forbidden, one per logit; all allowed if not given.
   * `explore` false: the distribution's mode (an evaluation episode), not a sample.
   * `state` (a recurrent model only): the episode's state to feed as state_in (stateSize
   * floats; zeros if not given: an episode's start); the result's `state` is the state_out
   * (a Float32Array) to feed with the next observation. A feed-forward model's: null.
   */
  async act(obs, mask = null, { explore = true, state = null } = {}) {
    const feeds = { [this.inputName]: this.obsTensor(obs) };
    if (this.stateSize > 0) {
      feeds[STATE_INPUT] = this.stateTensor(state);
    } else if (state != null && state.length > 0) {
      throw new Error('this model takes no state (it has no state_in input: SET_CONFIG.state_size is 0)');
    }
    if (this.maskInputName) {
      feeds[this.maskInputName] = this.maskTensor(mask);
    } else if (mask != null) {
      throw new Error('this model takes no action mask (SET_CONFIG.onnx_action_mask_input_name is null)');
    }
    const outputs = await this.session.run(feeds);
    const output = !explore && NOISE_FREE_OUTPUT in outputs ? NOISE_FREE_OUTPUT : this.session.outputNames[0];
    const distInputs = Array.from(outputs[output].data);
    const { action, logp } = this.sample(distInputs, explore);
    const nextState = this.stateSize > 0 ? Float32Array.from(outputs[STATE_OUTPUT].data) : null;
    return { action, logp, distInputs, state: nextState };
  }

  /** The state input [1, stateSize] for `state` (or zeros: an episode's start). */
  stateTensor(state) {
    if (state != null && state.length !== this.stateSize) {
      throw new Error(`the state has ${state.length} values, the model's ${STATE_INPUT} takes ${this.stateSize}`);
    }
    const values = state == null ? this.initialState() : Float32Array.from(state);
    return new this.ort.Tensor('float32', values, [1, this.stateSize]);
  }

  /** The observation input [1, ...the model's observation shape] for one observation, flat or nested. */
  obsTensor(obs) {
    const values = Float32Array.from(Array.isArray(obs) ? obs.flat(Infinity) : obs);
    const shape = this.obsShape ?? [values.length];
    const size = shape.reduce((product, n) => product * n, 1);
    if (values.length !== size) {
      throw new Error(`the observation has ${values.length} values, the model takes [${shape.join(', ')}] (${size})`);
    }
    return new this.ort.Tensor('float32', values, [1, ...shape]);
  }

  /** The mask input [1, k] for `mask` (or all ones): the model, not the sampler, applies it. */
  maskTensor(mask) {
    if (mask != null && mask.length !== this.maskWidth) {
      throw new Error(`the action mask has ${mask.length} entries, the model takes ${this.maskWidth}`);
    }
    const values = mask == null ? new Float32Array(this.maskWidth).fill(1) : Float32Array.from(mask, Number);
    return new this.ort.Tensor('float32', values, [1, this.maskWidth]);
  }

  /** An action and its log-prob from the model's output, by the action distribution (`explore` false: its mode). */
  sample(distInputs, explore = true) {
    switch (this.distribution) {
      case 'categorical':
        return sampleCategorical(distInputs, this.random, explore);
      case 'multi_categorical':
        return sampleMultiCategorical(distInputs, this.nvec, this.random, explore);
      default:
        return sampleGaussian(distInputs, this.random, explore);
    }
  }

  /** Free the session's wasm memory (call when a newer version replaces this one). */
  release() {
    return this.session.release();
  }
}
