/**
 * random.js — a small seeded random number generator, so a demo run can be repeated.
 *
 * mulberry32: 32-bit state, period 2^32, plenty for resets and action sampling.
 * Without a seed, one is drawn from Math.random.
 */

/** A function returning uniform floats in [0, 1), seeded with a 32-bit integer. */
export function createRandom(seed = Math.floor(Math.random() * 2 ** 32)) {
  let state = seed >>> 0;
  return function random() {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
}

/** A standard normal draw (Box-Muller) from a uniform generator. */
export function gaussian(random) {
  const u = 1 - random(); // (0, 1]: log(0) is not a number
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
}
