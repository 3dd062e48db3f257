/**
 * charts.js — line charts for the dashboard and the demo, drawn with uPlot.
 *
 * uPlot comes from this gateway (/vendor/uplot/, installed by `npm ci`). Charts take
 * columns as uPlot does: [xs, ys1, ys2, ...], with null for a missing value (a gap).
 */

export const UPLOT_BASE = '/vendor/uplot/';
const Y_AXIS_PX = 64; // room for tick labels like -0.0125 (uPlot's default of 50 cuts them)
const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2'];
let uPlotModule = null;

/** Import uPlot and its stylesheet once; resolve with the uPlot constructor. */
export function loadUPlot(base = UPLOT_BASE) {
  uPlotModule ??= import(`${base}uPlot.esm.js`).then(
    (module) => {
      const link = document.createElement('link');
      link.rel = 'stylesheet';
      link.href = `${base}uPlot.min.css`;
      document.head.append(link);
      return module.default;
    },
    (err) => {
      uPlotModule = null;
      throw new Error(`uPlot could not be loaded from ${base} (${err.message}); run \`npm ci\` on the gateway`);
    },
  );
  return uPlotModule;
}

/** One chart in `container`, as wide as the container, redrawn by setData. */
export class LineChart {
  /**
   * @param {Function} uPlot  from loadUPlot()
   * @param {HTMLElement} container
   * @param {object} options  title, xLabel, height, points (a dot per value, for sparse
   *   series), series: the y columns, each a label or {label, color, dash} (color: an index
   *   into the palette, by default the series' own; dash: e.g. [6, 4] for a dashed line);
   *   a label listed in `rightAxis` gets its own scale on the right (for a series of
   *   another magnitude, e.g. vf_loss beside policy_loss)
   */
  constructor(uPlot, container, { title, xLabel, series, rightAxis = [], height = 220, points = false }) {
    series = series.map((s, i) => (typeof s === 'string' ? { label: s, color: i } : { color: i, ...s }));
    const hasRight = series.some(({ label }) => rightAxis.includes(label));
    const options = {
      title,
      width: Math.max(container.clientWidth, 200),
      height,
      scales: { x: { time: false } },
      axes: [
        { label: xLabel },
        { scale: 'y', size: Y_AXIS_PX },
        ...(hasRight ? [{ scale: 'right', side: 1, size: Y_AXIS_PX, grid: { show: false } }] : []),
      ],
      series: [
        { label: xLabel },
        ...series.map(({ label, color, dash }) => ({
          label: rightAxis.includes(label) ? `${label} (right)` : label,
          scale: rightAxis.includes(label) ? 'right' : 'y',
          stroke: COLORS[color % COLORS.length],
          width: 1.5,
          ...(dash ? { dash } : {}),
          spanGaps: true,
          points: { show: points },
        })),
      ],
    };
    this.plot = new uPlot(options, [[], ...series.map(() => [])], container);
    this.resizeObserver = new ResizeObserver(() =>
      this.plot.setSize({ width: Math.max(container.clientWidth, 200), height }),
    );
    this.resizeObserver.observe(container);
  }

  setData(columns) {
    this.plot.setData(columns);
  }

  /** Remove the chart from its container (to draw another there, e.g. with more series). */
  destroy() {
    this.resizeObserver.disconnect();
    this.plot.destroy();
  }
}
