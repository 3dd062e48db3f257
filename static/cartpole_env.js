/**
 * cartpole_env.js — gymnasium's CartPole-v1 in JavaScript, step for step.
 *
 * The same constants, Euler integration, termination thresholds and reward (1 per
 * step, the terminal step included) as gymnasium.envs.classic_control.CartPoleEnv,
 * and CartPole-v1's TimeLimit of 500 steps. Products are grouped as gymnasium groups
 * them (np.square(v) is (v * v)): a different rounding grows over a 500-step episode. The state is kept in float64 like
 * gymnasium's; observations are rounded to float32 like the np.float32 array it returns.
 * tests/test_browser_demo.py checks trajectories against gymnasium's.
 */

const GRAVITY = 9.8;
const MASS_CART = 1.0;
const MASS_POLE = 0.1;
const TOTAL_MASS = MASS_POLE + MASS_CART;
const LENGTH = 0.5; // half the pole's length
const POLE_MASS_LENGTH = MASS_POLE * LENGTH;
const FORCE_MAG = 10.0;
const TAU = 0.02; // seconds per step
export const THETA_THRESHOLD = (12 * 2 * Math.PI) / 360;
export const X_THRESHOLD = 2.4;
export const MAX_EPISODE_STEPS = 500;

export class CartPole {
  /** @param {() => number} random  uniform [0, 1) generator for resets (see random.js) */
  constructor(random = Math.random) {
    this.random = random;
    this.state = null; // [x, x_dot, theta, theta_dot], float64
    this.elapsedSteps = 0;
  }

  /** Start an episode from uniform(-0.05, 0.05) in each state variable (or from `state`); return the observation. */
  reset(state = null) {
    this.state = state ? [...state] : Array.from({ length: 4 }, () => -0.05 + 0.1 * this.random());
    this.elapsedSteps = 0;
    return this.observation();
  }

  /** The observation: the state rounded to float32. */
  observation() {
    return this.state.map(Math.fround);
  }

  /** Push left (0) or right (1); return {obs, reward, terminated, truncated}. */
  step(action) {
    if (this.state === null) throw new Error('call reset() before step()');
    let [x, xDot, theta, thetaDot] = this.state;
    const force = action === 1 ? FORCE_MAG : -FORCE_MAG;
    const cosTheta = Math.cos(theta);
    const sinTheta = Math.sin(theta);
    const temp = (force + POLE_MASS_LENGTH * (thetaDot * thetaDot) * sinTheta) / TOTAL_MASS;
    const thetaAcc =
      (GRAVITY * sinTheta - cosTheta * temp) / (LENGTH * (4.0 / 3.0 - (MASS_POLE * (cosTheta * cosTheta)) / TOTAL_MASS));
    const xAcc = temp - (POLE_MASS_LENGTH * thetaAcc * cosTheta) / TOTAL_MASS;
    x += TAU * xDot;
    xDot += TAU * xAcc;
    theta += TAU * thetaDot;
    thetaDot += TAU * thetaAcc;
    this.state = [x, xDot, theta, thetaDot];
    this.elapsedSteps += 1;
    const terminated = x < -X_THRESHOLD || x > X_THRESHOLD || theta < -THETA_THRESHOLD || theta > THETA_THRESHOLD;
    const truncated = this.elapsedSteps >= MAX_EPISODE_STEPS;
    return { obs: this.observation(), reward: 1.0, terminated, truncated };
  }
}
