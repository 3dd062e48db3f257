/**
 * cartpole_view.js — draws a CartPole state on a canvas (the track is ±X_THRESHOLD wide).
 */

import { X_THRESHOLD } from './cartpole_env.js';

/** Draw [x, x_dot, theta, theta_dot] on the canvas, scaled to its width. */
export function drawCartPole(canvas, state) {
  const ctx = canvas.getContext('2d');
  const { width, height } = canvas;
  const scale = width / (2 * X_THRESHOLD * 1.1); // pixels per metre, with a margin
  const trackY = height * 0.75;
  const cartW = 0.5 * scale;
  const cartH = 0.3 * scale;
  const poleLen = 2 * 0.5 * scale; // the env's length is half the pole
  ctx.clearRect(0, 0, width, height);

  ctx.strokeStyle = '#888';
  ctx.lineWidth = 2;
  ctx.beginPath();
  ctx.moveTo(width / 2 - X_THRESHOLD * scale, trackY);
  ctx.lineTo(width / 2 + X_THRESHOLD * scale, trackY);
  ctx.stroke();
  if (!state) return;

  const [x, , theta] = state;
  const cartX = width / 2 + x * scale;
  ctx.fillStyle = '#1f2937';
  ctx.fillRect(cartX - cartW / 2, trackY - cartH, cartW, cartH);
  ctx.strokeStyle = '#c2410c';
  ctx.lineWidth = Math.max(4, scale * 0.08);
  ctx.lineCap = 'round';
  ctx.beginPath();
  const pivotY = trackY - cartH;
  ctx.moveTo(cartX, pivotY);
  ctx.lineTo(cartX + poleLen * Math.sin(theta), pivotY - poleLen * Math.cos(theta));
  ctx.stroke();
}
