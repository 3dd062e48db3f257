/**
 * sampler.js — runs a simulator with a policy and packs what happened as RLlink episode chunks.
 *
 * Works with any env that has reset() -> obs and step(action) -> {obs, reward,
 * terminated, truncated}, and any policy with act(obs, mask, {explore}) -> {action, logp}
 * and a weightsSeqNo (OnnxPolicy), recurrent or not (its stateSize). An episode that is still running when `numSteps` is reached goes on in
 * the next call, as a new chunk with the same episode_id (which lets the gateway join
 * the pieces). Each chunk records the weights_seq_no of the policy that collected it.
 *
 * Evaluation episodes (rllink.js isEvaluationEpisode): with `evaluationInterval` N > 0
 * (SET_CONFIG.evaluation_interval), every Nth episode is played with the policy's mode
 * (`act(obs, null, { explore: false })`) and every chunk of it carries `evaluation: true`;
 * `isEvaluationEpisode` says whether the episode now playing is one.
 *
 * A recurrent policy (its `stateSize` > 0: SET_CONFIG.state_size, OnnxPolicy): the Sampler
 * keeps the env's episode state, zeros at each episode's start, feeds it with every
 * observation (`act(obs, mask, { state })`) and keeps the `state` that comes back for the
 * next one, across calls and so across model versions too (a new version goes on from the
 * state the episode has). Every chunk carries `state_in`: the state fed with its first
 * observation (zeros for a chunk that starts its episode; the state reached so far for a
 * chunk that goes on with one, which the gateway needs to train on it).
 */

import { isEvaluationEpisode } from './rllink.js';

export class Sampler {
  /**
   * @param {object} env
   * @param {object} [options]
   * @param {string} [options.idPrefix]  makes episode ids unique across pages
   * @param {(env: object) => Promise<void>|void} [options.onStep]  after every step (render, pace)
   * @param {(episode: {episodeReturn: number, length: number, evaluation: boolean}) => void} [options.onEpisodeEnd]
   * @param {number} [options.evaluationInterval]  SET_CONFIG.evaluation_interval (0: no evaluation episodes)
   */
  constructor(
    env,
    { idPrefix = Math.random().toString(36).slice(2, 10), onStep = null, onEpisodeEnd = null, evaluationInterval = 0 } = {},
  ) {
    this.env = env;
    this.idPrefix = idPrefix;
    this.onStep = onStep;
    this.onEpisodeEnd = onEpisodeEnd;
    this.evaluationInterval = evaluationInterval;
    this.episodeCount = 0; // episodes started
    this.episodesPlayed = 0; // episodes finished
    this._startEpisode();
  }

  _startEpisode() {
    this.obs = this.env.reset();
    this.isEvaluationEpisode = isEvaluationEpisode(this.episodesPlayed, this.evaluationInterval);
    this.episodeId = `${this.idPrefix}-${this.episodeCount++}`;
    this.episodeReturn = 0;
    this.episodeLength = 0;
    this.state = null; // a recurrent policy's state: none yet (zeros) at an episode's start
  }

  /** The recurrent state to feed with the current observation (zeros at an episode's start). */
  _currentState(policy) {
    this.state ??= new Float32Array(policy.stateSize);
    if (this.state.length !== policy.stateSize) {
      throw new Error(`the episode's state has ${this.state.length} values, the policy's state_size is ${policy.stateSize}`);
    }
    return this.state;
  }

  _newChunk(policy) {
    const chunk = {
      episode_id: this.episodeId,
      weights_seq_no: policy.weightsSeqNo,
      obs: [this.obs],
      actions: [],
      rewards: [],
      action_logp: [],
      is_terminated: false,
      is_truncated: false,
    };
    if (this.isEvaluationEpisode) chunk.evaluation = true;
    if (policy.stateSize > 0) chunk.state_in = Array.from(this._currentState(policy)); // at obs[0]
    return chunk;
  }

  /** Run `numSteps` steps with `policy`; resolve with the chunks (the last may be unfinished). */
  async collect(policy, numSteps) {
    const chunks = [];
    let chunk = this._newChunk(policy);
    for (let t = 0; t < numSteps; t++) {
      const recurrent = policy.stateSize > 0;
      const state = recurrent ? this._currentState(policy) : null;
      const step = await policy.act(this.obs, null, { explore: !this.isEvaluationEpisode, state });
      const { action, logp } = step;
      if (recurrent) this.state = step.state; // fed with the next observation
      const { obs, reward, terminated, truncated } = this.env.step(action);
      chunk.actions.push(action);
      chunk.rewards.push(reward);
      chunk.action_logp.push(logp);
      chunk.obs.push(obs);
      this.obs = obs;
      this.episodeReturn += reward;
      this.episodeLength += 1;
      if (this.onStep) await this.onStep(this.env);
      if (terminated || truncated) {
        chunk.is_terminated = terminated;
        chunk.is_truncated = truncated;
        chunks.push(chunk);
        this.onEpisodeEnd?.({ episodeReturn: this.episodeReturn, length: this.episodeLength, evaluation: this.isEvaluationEpisode });
        this.episodesPlayed += 1;
        this._startEpisode();
        chunk = this._newChunk(policy);
      }
    }
    if (chunk.actions.length > 0) chunks.push(chunk); // cut by numSteps: the episode goes on
    return chunks;
  }
}
