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
 * `act(obs, mask, { explore: false })` plays the distribution's mode instead of sampling
 * (an evaluation episode, see rllink.js isEvaluationEpisode): the most likely action (after
 * the mask), the most likely one of each sub-action, or the Gaussian's mean (the game clips
 * it to the box, as it does a sample); from a gSDE model's noise-free output
 * ("action_dist_inputs_noise_free") where it has one.
 */

import { gaussian } from './random.js';

export const ORT_BASE = '/vendor/ort/';
const NOISE_FREE_OUTPUT = 'action_dist_inputs_noise_free'; // a gSDE model's output without its exploration noise
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

/** One policy version: an inference session plus how to sample from its output. */
export class OnnxPolicy {
  /**
   * @param {Uint8Array} onnxBytes  the model (see rllink.js decodeOnnxFile)
   * @param {object} options  inputName (SET_CONFIG.onnx_input_name), actionSpace
   *                          (SET_CONFIG.action_space), weightsSeqNo, random ([0,1) generator);
   *                          optional distribution (SET_CONFIG.action_distribution; by the
   *                          space if not given) and maskInputName
   *                          (SET_CONFIG.onnx_action_mask_input_name; null: no mask input)
   */
  static async create(onnxBytes, { inputName, actionSpace, weightsSeqNo, random, distribution, maskInputName }) {
    const ort = await loadOrt();
    const session = await ort.InferenceSession.create(onnxBytes, { executionProviders: ['wasm'] });
    for (const name of [inputName, maskInputName ?? inputName]) {
      if (!session.inputNames.includes(name)) {
        throw new Error(`the model has inputs ${session.inputNames.join(', ')}, not ${name}`);
      }
    }
    return new OnnxPolicy(ort, session, { inputName, actionSpace, weightsSeqNo, random, distribution, maskInputName });
  }

  constructor(ort, session, { inputName, actionSpace, weightsSeqNo, random, distribution, maskInputName }) {
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
  }

  /**
   * Run the model on one observation; resolve with {action, logp, distInputs}: the action
   * is an int (categorical), one int per sub-action (multi_categorical) or floats (gaussian).
   * `obs` is as on the wire: a flat list, or nested like its space's shape (an image [C][H][W]).
   * `mask` (a masked model only): 1 allowed, 0 forbidden, one per logit; all allowed if not given.
   * `explore` false: the distribution's mode (an evaluation episode), not a sample.
   */
  async act(obs, mask = null, { explore = true } = {}) {
    const feeds = { [this.inputName]: this.obsTensor(obs) };
    if (this.maskInputName) {
      feeds[this.maskInputName] = this.maskTensor(mask);
    } else if (mask != null) {
      throw new Error('this model takes no action mask (SET_CONFIG.onnx_action_mask_input_name is null)');
    }
    const outputs = await this.session.run(feeds);
    const output = !explore && NOISE_FREE_OUTPUT in outputs ? NOISE_FREE_OUTPUT : this.session.outputNames[0];
    const distInputs = Array.from(outputs[output].data);
    const { action, logp } = this.sample(distInputs, explore);
    return { action, logp, distInputs };
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
