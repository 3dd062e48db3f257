/**
 * cartpole.js — the CartPole demo page: simulate, act, and train through the gateway.
 *
 * Reads URL options (see cartpole.html), draws the cart, and charts the episode returns.
 * Two ways to act:
 *   - local (default): runs the RLlink loop from rllink.js with a Sampler over CartPole
 *     and the OnnxPolicy (onnxruntime-web) from each SET_STATE; with a recurrent module
 *     (the gateway's `model.use_lstm`, SET_CONFIG.state_size > 0) the Sampler carries the
 *     policy's state from step to step and sends each chunk's `state_in`;
 *   - `?inference=server`: a thin client (rllink.js runThinLoop): the gateway chooses
 *     every action (GET_ACTION) and builds the episodes. onnx_policy.js and
 *     onnxruntime-web are never loaded then: nothing of them is fetched.
 *
 * Every evaluation_interval-th episode (SET_CONFIG) is an evaluation episode: played with
 * the policy's mode (locally, or by the gateway in server mode), never trained on; its
 * return counts apart from the training episodes' (the chart, the target).
 *
 * For tests and scripts the page reports in the DOM:
 *   #status  (always)        JSON: phase, weights_seq_no, env_steps (evaluation steps too),
 *                            episodes (training ones), first_mean_return, recent_mean_return,
 *                            best_return, evaluation_episodes, evaluation_mean_return, state_size,
 *                            evaluation_episode (the one playing now is), models_loaded, seconds, ...
 *   #result  (once, at end)  JSON: the final status plus `reason` ('target', 'max_env_steps',
 *                            'max_seconds', 'stopped') and `reached_target`
 *   #error   (once, on failure) the error's message
 */

import { Sampler } from './sampler.js';
import { CartPole } from './cartpole_env.js';
import { drawCartPole } from './cartpole_view.js';
import { LineChart, loadUPlot } from './charts.js';
import { formatNumber, renderStats } from './widgets.js';
import { createRandom } from './random.js';
import { RLlinkClient, decodeOnnxFile, defaultUrl, runThinLoop, runTrainingLoop, tokenFromPage } from './rllink.js';

const STEP_SECONDS = 0.02; // CartPole's tau: real time is 50 steps per second
const YIELD_EVERY_STEPS = 100; // let the page draw while training at full speed
const INFERENCE_MODES = ['local', 'server'];

function readOptions(search) {
  const params = new URLSearchParams(search);
  const number = (name, fallback) => (params.get(name) ? Number(params.get(name)) : fallback);
  return {
    url: params.get('url') || defaultUrl(),
    token: tokenFromPage(), // #token=... when the gateway's auth is on
    seed: number('seed', undefined),
    target: number('target', 450), // mean return of the last `window` episodes that ends the run
    window: number('window', 20),
    maxEnvSteps: number('max_env_steps', Infinity),
    maxSeconds: number('max_seconds', Infinity),
    realtime: params.get('realtime') === '1',
    inference: params.get('inference') || 'local', // 'server': thin client, no model in the page
  };
}

const mean = (values) => (values.length ? values.reduce((a, b) => a + b, 0) / values.length : null);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Everything the page knows about the run, as shown in #status. */
class Progress {
  constructor(options) {
    this.options = options;
    this.startedAt = performance.now();
    this.returns = []; // every finished training episode's return, in order
    this.evaluationReturns = []; // every finished evaluation episode's
    this.status = {
      phase: 'starting',
      inference: options.inference,
      url: options.url,
      target: options.target,
      window: options.window,
      weights_seq_no: null,
      env_steps_per_sample: null,
      env_steps: 0,
      episodes: 0,
      first_mean_return: null, // of the first `window` episodes
      recent_mean_return: null, // of the last `window` episodes
      best_return: null,
      evaluation_interval: null, // SET_CONFIG's: every Nth episode is an evaluation one
      evaluation_episode: false, // the episode playing now is an evaluation one
      evaluation_episodes: 0,
      evaluation_mean_return: null, // of the last `window` evaluation episodes
      state_size: null, // SET_CONFIG's (local inference): > 0, a recurrent policy whose state the page carries
      models_loaded: 0, // SET_STATE models loaded (local inference): one the page already runs is not loaded again
      seconds: 0,
    };
  }

  episodeEnded(episodeReturn, evaluation) {
    const { status, options } = this;
    if (evaluation) {
      this.evaluationReturns.push(episodeReturn);
      status.evaluation_episodes = this.evaluationReturns.length;
      status.evaluation_mean_return = mean(this.evaluationReturns.slice(-options.window));
      return;
    }
    this.returns.push(episodeReturn);
    status.episodes = this.returns.length;
    status.best_return = Math.max(status.best_return ?? -Infinity, episodeReturn);
    status.recent_mean_return = mean(this.returns.slice(-options.window));
    if (this.returns.length === options.window) status.first_mean_return = status.recent_mean_return;
  }

  /** Why the run should end now, or null. */
  finishReason() {
    const { status, options } = this;
    if (this.returns.length >= options.window && status.recent_mean_return >= options.target) return 'target';
    if (status.env_steps >= options.maxEnvSteps) return 'max_env_steps';
    if (status.seconds >= options.maxSeconds) return 'max_seconds';
    return null;
  }

  tick() {
    this.status.seconds = Math.round(performance.now() - this.startedAt) / 1000;
  }
}

class DemoPage {
  constructor(options) {
    this.options = options;
    this.progress = new Progress(options);
    this.random = createRandom(options.seed);
    this.env = new CartPole(this.random);
    this.policy = null;
    this.loadedOnnxFile = null; // SET_STATE's onnx_file of the policy the page runs
    this.chart = null;
    this.stopper = new AbortController();
    this.stopReason = null;
    this.stepsSinceYield = 0;
    this.el = Object.fromEntries(
      ['banner', 'status', 'stats', 'cart', 'returns-chart', 'realtime', 'stop'].map((id) => [id, document.getElementById(id)]),
    );
    this.el.realtime.checked = options.realtime;
    this.el.stop.addEventListener('click', () => this.stop('stopped'));
  }

  async run() {
    try {
      const { inference } = this.options;
      if (!INFERENCE_MODES.includes(inference)) {
        throw new Error(`unknown inference=${inference}: use ${INFERENCE_MODES.join(' or ')}`);
      }
      let onnxPolicy = null;
      if (inference === 'local') {
        this.showBanner('info', 'Loading onnxruntime-web…');
        onnxPolicy = await import('./onnx_policy.js'); // only here: server mode loads no model runtime
        await onnxPolicy.loadOrt();
      }
      await this.loadChart();
      this.setPhase('connecting');
      const client = await RLlinkClient.connect(this.options.url, { token: this.options.token });
      this.client = client;
      this.setPhase('training');
      this.showBanner('info', `Connected to ${this.options.url} (inference: ${inference})`);
      this.drawLoop();
      if (inference === 'server') await this.trainThin(client);
      else await this.trainLocal(client, onnxPolicy);
      client.close();
      this.finish();
    } catch (error) {
      this.fail(error);
    }
  }

  /**
   * Local inference: collect chunks with the ONNX policy, trade them for new weights; the
   * Sampler plays every evaluation_interval-th episode with the mode, marked `evaluation`.
   */
  async trainLocal(client, { OnnxPolicy }) {
    const { status } = this.progress;
    let sampler = null; // made with the first collect, once SET_CONFIG is known
    const newSampler = (config) =>
      new Sampler(this.env, {
        evaluationInterval: config.evaluation_interval ?? 0,
        onStep: () => {
          status.evaluation_episode = sampler.isEvaluationEpisode;
          return this.pace();
        },
        onEpisodeEnd: ({ episodeReturn, evaluation }) => this.episodeEnded(episodeReturn, evaluation),
      });
    await runTrainingLoop(client, {
      signal: this.stopper.signal,
      onState: (state, config) => this.loadPolicy(OnnxPolicy, state, config),
      collect: async (numSteps, config) => {
        sampler ??= newSampler(config);
        const chunks = await sampler.collect(this.policy, numSteps);
        this.progress.status.env_steps += numSteps;
        return chunks;
      },
    });
  }

  /** Server-side inference: the gateway acts on every observation and builds the episodes. */
  async trainThin(client) {
    const { status } = this.progress;
    await runThinLoop(client, {
      env: this.env,
      signal: this.stopper.signal,
      onConfig: (config) => {
        status.env_steps_per_sample = config.env_steps_per_sample;
        status.evaluation_interval = config.evaluation_interval ?? 0;
      },
      onStep: ({ weightsSeqNo, evaluation }) => {
        status.env_steps += 1;
        status.evaluation_episode = evaluation; // the gateway plays it with the mode
        if (weightsSeqNo !== status.weights_seq_no) {
          status.weights_seq_no = weightsSeqNo;
          this.logProgress();
        }
        return this.pace();
      },
      onEpisodeEnd: ({ episodeReturn, evaluation }) => {
        this.episodeEnded(episodeReturn, evaluation);
        const reason = this.progress.finishReason();
        if (reason) this.stop(reason);
      },
    });
  }

  async loadChart() {
    try {
      const uPlot = await loadUPlot();
      this.chart = new LineChart(uPlot, this.el['returns-chart'], {
        title: 'Episode return',
        xLabel: 'episode',
        series: ['return', `mean of last ${this.options.window}`],
        height: 240,
      });
    } catch (error) {
      this.el['returns-chart'].textContent = error.message; // the demo trains without its chart
    }
  }

  async loadPolicy(OnnxPolicy, state, config) {
    const { status } = this.progress;
    if (state.onnx_file !== this.loadedOnnxFile) { // an off-policy learner's version outlasts many requests
      const onnxBytes = await decodeOnnxFile(state.onnx_file);
      const policy = await OnnxPolicy.create(onnxBytes, {
        inputName: config.onnx_input_name ?? 'onnx::Gemm_0', // RLlib's name when the config gives none
        actionSpace: config.action_space ?? { type: 'discrete' },
        weightsSeqNo: state.weights_seq_no,
        random: this.random,
        stateSize: config.state_size ?? 0, // > 0: a recurrent module (model.use_lstm); the Sampler carries its state
      });
      this.policy?.release();
      this.policy = policy;
      this.loadedOnnxFile = state.onnx_file;
      status.models_loaded += 1;
    }
    status.weights_seq_no = state.weights_seq_no;
    status.env_steps_per_sample = config.env_steps_per_sample;
    status.evaluation_interval = config.evaluation_interval ?? 0;
    status.state_size = this.policy.stateSize;
    this.logProgress();
    this.render();
    const reason = this.progress.finishReason();
    if (reason) this.stop(reason);
  }

  /** One console line per policy version. */
  logProgress() {
    const { status } = this.progress;
    this.progress.tick();
    console.log(
      `weights_seq_no ${status.weights_seq_no}: ${status.env_steps} env steps, ${status.episodes} episodes, ` +
        `recent mean return ${formatNumber(status.recent_mean_return, 1)}, ${status.seconds}s`,
    );
  }

  episodeEnded(episodeReturn, evaluation = false) {
    this.progress.episodeEnded(episodeReturn, evaluation);
    const returns = this.progress.returns;
    const window = this.options.window;
    if (this.chart) {
      const xs = returns.map((_, i) => i + 1);
      const means = returns.map((_, i) => mean(returns.slice(Math.max(0, i + 1 - window), i + 1)));
      this.chart.setData([xs, returns, means]);
    }
    this.render();
  }

  /** Between steps: wait in real-time mode; otherwise yield now and then so the page stays live. */
  async pace() {
    if (this.el.realtime.checked) {
      await sleep(STEP_SECONDS * 1000);
    } else if (++this.stepsSinceYield >= YIELD_EVERY_STEPS) {
      this.stepsSinceYield = 0;
      await sleep(0);
    }
  }

  drawLoop() {
    const frame = () => {
      drawCartPole(this.el.cart, this.env.state);
      if (!this.stopper.signal.aborted) requestAnimationFrame(frame);
    };
    requestAnimationFrame(frame);
  }

  stop(reason) {
    if (this.stopper.signal.aborted) return;
    this.stopReason = reason;
    this.stopper.abort();
  }

  setPhase(phase) {
    this.progress.status.phase = phase;
    this.render();
  }

  render() {
    const { status } = this.progress;
    this.progress.tick();
    this.el.status.textContent = JSON.stringify(status, null, 1);
    renderStats(this.el.stats, [
      ['weights_seq_no', formatNumber(status.weights_seq_no)],
      ['env steps', formatNumber(status.env_steps)],
      ['episodes', formatNumber(status.episodes)],
      [`mean return (last ${this.options.window})`, formatNumber(status.recent_mean_return, 1)],
      [`mean return (first ${this.options.window})`, formatNumber(status.first_mean_return, 1)],
      ['best return', formatNumber(status.best_return)],
      ['evaluation episodes', formatNumber(status.evaluation_episodes)],
      [`evaluation mean return (mode, last ${this.options.window})`, formatNumber(status.evaluation_mean_return, 1)],
      ['now playing', status.evaluation_episode ? 'evaluation episode' : 'training episode'],
      ['seconds', formatNumber(status.seconds, 1)],
    ]);
  }

  showBanner(kind, text) {
    this.el.banner.className = `banner ${kind}`;
    this.el.banner.textContent = text;
  }

  /** Write #result: the run ended by a target, a bound or the Stop button. */
  finish() {
    const reason = this.stopReason ?? 'stopped';
    this.setPhase('done');
    const result = { ...this.progress.status, reason, reached_target: reason === 'target' };
    this.showBanner('ok', `Done (${reason}): mean return ${formatNumber(result.recent_mean_return, 1)} after ${result.episodes} episodes`);
    appendPre('result', JSON.stringify(result));
    console.log(`result ${JSON.stringify(result)}`);
  }

  /** Write #error: the run could not go on. */
  fail(error) {
    this.stopper.abort();
    this.client?.close();
    this.setPhase('failed');
    this.progress.status.error = error.message;
    this.render();
    this.showBanner('error', error.message);
    appendPre('error', error.message);
    console.error(error);
  }
}

function appendPre(id, text) {
  const pre = document.createElement('pre');
  pre.id = id;
  pre.textContent = text;
  document.body.append(pre);
}

new DemoPage(readOptions(location.search)).run();
