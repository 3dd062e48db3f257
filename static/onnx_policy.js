/**
 * onnx_policy.js — the gateway's ONNX policy, run in the page with onnxruntime-web.
 *
 * onnxruntime-web comes from this gateway (/vendor/ort/, installed by `npm ci`), with
 * its wasm backend on one thread: more threads need a cross-origin-isolated page, and
 * a policy this small gains nothing from them.
 *
 * The model's contract (SET_CONFIG and the model's metadata say the same): one input,
 * named by SET_CONFIG.onnx_input_name, of shape [batch, obs_dim]; output 0,
 * "action_dist_inputs", holds per row the logits of a Categorical (Discrete actions)
 * or the mean then the log std of a diagonal Gaussian (Box actions).
 */

import { gaussian } from './random.js';

export const ORT_BASE = '/vendor/ort/';
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

/** Sample from a Categorical given by logits; return {action, logp}. */
export function sampleCategorical(logits, random) {
  const logp = logSoftmax(logits);
  let u = random();
  let action = logp.length - 1; // if rounding leaves u above the sum, the last action
  for (let i = 0; i < logp.length; i++) {
    u -= Math.exp(logp[i]);
    if (u < 0) {
      action = i;
      break;
    }
  }
  return { action, logp: logp[action] };
}

/** Sample from a diagonal Gaussian given [mean..., logStd...]; return {action, logp}. */
export function sampleGaussian(distInputs, random) {
  const half = distInputs.length / 2;
  const action = [];
  let logp = 0;
  for (let i = 0; i < half; i++) {
    const mean = distInputs[i];
    const logStd = distInputs[half + i];
    const z = gaussian(random);
    action.push(mean + Math.exp(logStd) * z);
    logp += -0.5 * z * z - logStd - 0.5 * Math.log(2 * Math.PI);
  }
  return { action, logp };
}

/** One policy version: an inference session plus how to sample from its output. */
export class OnnxPolicy {
  /**
   * @param {Uint8Array} onnxBytes  the model (see rllink.js decodeOnnxFile)
   * @param {object} options  inputName (SET_CONFIG.onnx_input_name), actionSpace
   *                          (SET_CONFIG.action_space), weightsSeqNo, random ([0,1) generator)
   */
  static async create(onnxBytes, { inputName, actionSpace, weightsSeqNo, random }) {
    const ort = await loadOrt();
    const session = await ort.InferenceSession.create(onnxBytes, { executionProviders: ['wasm'] });
    if (!session.inputNames.includes(inputName)) {
      throw new Error(`the model has inputs ${session.inputNames.join(', ')}, not ${inputName}`);
    }
    return new OnnxPolicy(ort, session, { inputName, actionSpace, weightsSeqNo, random });
  }

  constructor(ort, session, { inputName, actionSpace, weightsSeqNo, random }) {
    this.ort = ort;
    this.session = session;
    this.inputName = inputName;
    this.discrete = actionSpace.type === 'discrete';
    this.weightsSeqNo = weightsSeqNo;
    this.random = random;
  }

  /** Run the model on one observation; resolve with {action, logp, distInputs}. */
  async act(obs) {
    const input = new this.ort.Tensor('float32', Float32Array.from(obs), [1, obs.length]);
    const outputs = await this.session.run({ [this.inputName]: input });
    const distInputs = Array.from(outputs[this.session.outputNames[0]].data);
    const { action, logp } = this.discrete
      ? sampleCategorical(distInputs, this.random)
      : sampleGaussian(distInputs, this.random);
    return { action, logp, distInputs };
  }

  /** Free the session's wasm memory (call when a newer version replaces this one). */
  release() {
    return this.session.release();
  }
}
