/**
 * widgets.js — numbers for people ("—" for a missing one), stat tiles and tables.
 *
 * Everything is set with textContent: values from the API never become markup.
 */

export const MISSING = '—';

/** `value` with at most `digits` decimals (integers as they are), or "—" if it is not a finite number. */
export function formatNumber(value, digits = 2) {
  if (typeof value !== 'number' || !Number.isFinite(value)) return MISSING;
  if (Number.isInteger(value)) return value.toLocaleString('en-US');
  return value.toLocaleString('en-US', { maximumFractionDigits: digits });
}

/**
 * Fill the stat tiles of `container`: one .stat per [label, text] or [label, text, id],
 * kept in place between calls; `id` becomes the tile's element id.
 */
export function renderStats(container, tiles) {
  for (const [label, text, id] of tiles) {
    let tile = container.querySelector(`[data-label="${CSS.escape(label)}"]`);
    if (!tile) {
      tile = document.createElement('div');
      tile.className = 'stat';
      tile.dataset.label = label;
      if (id) tile.id = id;
      tile.innerHTML = '<div class="label"></div><div class="value"></div>';
      tile.querySelector('.label').textContent = label;
      container.append(tile);
    }
    tile.querySelector('.value').textContent = text;
  }
}

/**
 * Replace the contents of `container` with a table.
 * @param {string[]} columns  header labels
 * @param {Array<Array<string|number|null>>} rows  cells; numbers are formatted, null is "—"
 * @param {string} [empty]  shown instead of a table without rows
 * @param {object} [options]  keys: one name per column, set as each cell's data-key;
 *   rowData: one object per row, set as the row's data attributes
 *   ({moduleId: 'cart'} gives data-module-id="cart")
 */
export function renderTable(container, columns, rows, empty = 'none', { keys = [], rowData = [] } = {}) {
  if (rows.length === 0) {
    container.textContent = empty;
    return;
  }
  const table = document.createElement('table');
  const head = table.createTHead().insertRow();
  for (const label of columns) head.append(Object.assign(document.createElement('th'), { textContent: label }));
  const body = table.createTBody();
  rows.forEach((row, r) => {
    const tr = body.insertRow();
    Object.assign(tr.dataset, rowData[r] ?? {});
    row.forEach((cell, c) => {
      const td = tr.insertCell();
      td.textContent = typeof cell === 'string' ? cell : formatNumber(cell);
      if (keys[c]) td.dataset.key = keys[c];
    });
  });
  container.replaceChildren(table);
}
