/**
 * format.js — numbers for people, and "—" for a value that is missing.
 */

export const MISSING = '—';

/** `value` with at most `digits` decimals (integers as they are), or "—" if it is not a finite number. */
export function formatNumber(value, digits = 2) {
  if (typeof value !== 'number' || !Number.isFinite(value)) return MISSING;
  if (Number.isInteger(value)) return value.toLocaleString('en-US');
  return value.toLocaleString('en-US', { maximumFractionDigits: digits });
}

/** Fill the stat tiles of `container`: one .stat per [label, text] pair, kept in place between calls. */
export function renderStats(container, pairs) {
  for (const [label, text] of pairs) {
    let tile = container.querySelector(`[data-label="${CSS.escape(label)}"]`);
    if (!tile) {
      tile = document.createElement('div');
      tile.className = 'stat';
      tile.dataset.label = label;
      tile.innerHTML = '<div class="label"></div><div class="value"></div>';
      tile.querySelector('.label').textContent = label;
      container.append(tile);
    }
    tile.querySelector('.value').textContent = text;
  }
}
