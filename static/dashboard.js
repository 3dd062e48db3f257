/**
 * dashboard.js — the live dashboard at `/`: polls the REST API and redraws in place.
 *
 * GET /api/metrics every second and /api/clients every other second. Every field is
 * optional here: a missing one shows as "—" and leaves a gap in its chart, so the page
 * works with older or newer gateways alike. Charts keep their history in the page
 * (from when it was opened); when a counter goes backwards (the gateway restarted)
 * that chart starts over.
 *
 * With the gateway's auth on, open `/#token=...`: the token goes in an Authorization
 * header and, being in the URL fragment, never reaches a server log.
 *
 * For tests: #updated carries data-polls, the number of successful metric polls, and
 * each stat tile has the id stat-<metric> (#stat-weights_seq_no,
 * #stat-num_env_steps_sampled_lifetime, #stat-clients, ...; see STATS) with its text
 * in .value.
 */

import { LineChart, loadUPlot } from './charts.js';
import { tokenFromPage } from './rllink.js';
import { MISSING, formatNumber, renderStats, renderTable } from './widgets.js';

const POLL_MS = 1000;
const CLIENTS_EVERY_POLLS = 2;
const MAX_POINTS = 3600; // per chart; the oldest points go first

const openedAt = performance.now();

/** The value at a dotted path ('learner.entropy'), or null when any part is missing. */
function get(object, path) {
  const value = path.split('.').reduce((v, key) => (v == null ? undefined : v[key]), object);
  return value ?? null;
}

/** The number at a path, or null if it is missing or not a number. */
function num(object, path) {
  const value = get(object, path);
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

/** Seconds the gateway has been up, or since this page opened if the API does not say. */
const uptime = (m) => num(m, 'uptime_s') ?? (performance.now() - openedAt) / 1000;

/** The charts: x from the metrics, one y per path (labelled by its key); a point is added whenever x moves on. */
const CHARTS = [
  {
    id: 'chart-return',
    title: 'Episode return (last 100 episodes)',
    xLabel: 'env steps sampled',
    x: (m) => num(m, 'num_env_steps_sampled_lifetime'),
    ys: { mean: 'episode_return_mean', min: 'episode_return_min', max: 'episode_return_max' },
  },
  {
    id: 'chart-length',
    title: 'Episode length (mean)',
    xLabel: 'env steps sampled',
    x: (m) => num(m, 'num_env_steps_sampled_lifetime'),
    ys: { mean: 'episode_len_mean' },
  },
  {
    id: 'chart-throughput',
    title: 'Env steps received per second',
    xLabel: 'uptime (s)',
    x: uptime,
    ys: { 'env steps/s': 'env_steps_per_s' },
  },
  {
    id: 'chart-clients',
    title: 'Connected clients',
    xLabel: 'uptime (s)',
    x: uptime,
    ys: { tcp: 'clients.tcp', ws: 'clients.ws' },
  },
  {
    id: 'chart-losses',
    title: 'Losses',
    xLabel: 'training step',
    x: (m) => num(m, 'num_training_steps'),
    ys: { policy_loss: 'learner.policy_loss', vf_loss: 'learner.vf_loss' },
    rightAxis: ['vf_loss'],
  },
  {
    id: 'chart-entropy-kl',
    title: 'Entropy and approx KL',
    xLabel: 'training step',
    x: (m) => num(m, 'num_training_steps'),
    ys: { entropy: 'learner.entropy', approx_kl: 'learner.approx_kl' },
    rightAxis: ['approx_kl'],
  },
];

/**
 * The stat tiles: [metric, label, decimals] (the metric's name in /api/metrics) or
 * [key, label, (metrics) => text]. Each tile's element id is `stat-<metric or key>`.
 */
const STATS = [
  ['weights_seq_no', 'policy version (weights_seq_no)'],
  ['num_training_steps', 'training steps'],
  ['num_env_steps_sampled_lifetime', 'env steps sampled'],
  ['num_env_steps_trained_lifetime', 'env steps trained'],
  ['num_episodes_lifetime', 'episodes'],
  ['episode_return_mean', 'return mean', 1],
  ['episode_return_min_max', 'return min / max', (m) => `${formatNumber(num(m, 'episode_return_min'), 1)} / ${formatNumber(num(m, 'episode_return_max'), 1)}`],
  ['episode_len_mean', 'episode length mean', 1],
  ['env_steps_per_s', 'env steps / s', 0],
  ['clients', 'clients tcp / ws', (m) => `${formatNumber(num(m, 'clients.tcp'))} / ${formatNumber(num(m, 'clients.ws'))}`],
  ['pending_env_steps', 'pending env steps'],
  ['training_in_progress', 'learner', (m) => ({ true: 'training', false: 'idle' })[get(m, 'training_in_progress')] ?? MISSING],
  ['last_training_step_s', 'last training step (s)', 2],
  ['uptime_s', 'uptime (s)', 0],
];

/** A chart and the history behind it. */
class ChartHistory {
  constructor(uPlot, spec) {
    this.spec = spec;
    this.paths = Object.values(spec.ys);
    this.columns = [[], ...this.paths.map(() => [])];
    this.chart = uPlot
      ? new LineChart(uPlot, document.getElementById(spec.id), {
          title: spec.title,
          xLabel: spec.xLabel,
          series: Object.keys(spec.ys),
          rightAxis: spec.rightAxis,
        })
      : null;
  }

  add(metrics) {
    const x = this.spec.x(metrics);
    if (x === null) return;
    const xs = this.columns[0];
    const last = xs.at(-1);
    if (last !== undefined && x < last) this.columns = [[], ...this.paths.map(() => [])]; // gateway restarted
    else if (x === last) return;
    this.columns[0].push(x);
    this.paths.forEach((path, i) => this.columns[i + 1].push(num(metrics, path)));
    if (this.columns[0].length > MAX_POINTS) this.columns.forEach((column) => column.shift());
    this.chart?.setData(this.columns);
  }
}

/** A key -> count object (frames by type, errors by code) as a sorted table; "—" if absent. */
function renderCounts(container, columns, counts) {
  if (counts === null || typeof counts !== 'object') {
    container.textContent = MISSING;
    return;
  }
  renderTable(container, columns, Object.entries(counts).sort(([a], [b]) => a.localeCompare(b)));
}

/** /api/clients as table rows. */
function clientRows(clients) {
  if (!Array.isArray(clients)) return [];
  const now = Date.now() / 1000;
  return clients.map((c) => [
    get(c, 'id'),
    get(c, 'transport') ?? MISSING,
    get(c, 'peer') ?? MISSING,
    num(c, 'connected_at') === null ? null : Math.round(now - c.connected_at),
    get(c, 'env_steps_sent'),
    { true: 'yes', false: 'no' }[get(c, 'waiting')] ?? MISSING,
    get(c, 'last_weights_seq_no_sent'),
  ]);
}

class Dashboard {
  constructor() {
    this.token = tokenFromPage();
    this.polls = 0;
    this.charts = [];
    this.el = Object.fromEntries(
      ['banner', 'updated', 'stats', 'clients', 'frames', 'errors', 'dropped'].map((id) => [id, document.getElementById(id)]),
    );
  }

  async start() {
    let uPlot = null;
    try {
      uPlot = await loadUPlot();
    } catch (error) {
      this.showBanner(`${error.message}. Numbers only, no charts.`);
    }
    this.charts = CHARTS.map((spec) => new ChartHistory(uPlot, spec));
    this.renderMetrics({}); // every tile "—" until the first answer
    this.el.clients.textContent = MISSING;
    this.poll();
  }

  async fetchJson(path) {
    const headers = this.token ? { Authorization: `Bearer ${this.token}` } : {};
    const response = await fetch(path, { headers, cache: 'no-store' });
    if (!response.ok) throw new Error(`GET ${path}: HTTP ${response.status}`);
    return response.json();
  }

  async poll() {
    try {
      const metrics = await this.fetchJson('/api/metrics');
      this.polls += 1;
      this.renderMetrics(metrics);
      for (const chart of this.charts) chart.add(metrics);
      if (this.polls % CLIENTS_EVERY_POLLS === 1) {
        renderTable(
          this.el.clients,
          ['id', 'transport', 'peer', 'connected (s)', 'env steps sent', 'waiting', 'weights sent'],
          clientRows(await this.fetchJson('/api/clients')),
        );
      }
      this.el.updated.textContent = `updated ${new Date().toLocaleTimeString()}`;
      this.el.updated.dataset.polls = String(this.polls);
      this.showBanner(null);
    } catch (error) {
      this.showBanner(`${error.message}; retrying every ${POLL_MS / 1000} s`);
    }
    setTimeout(() => this.poll(), POLL_MS);
  }

  /** The tiles and count tables (the charts grow in poll). */
  renderMetrics(metrics) {
    renderStats(
      this.el.stats,
      STATS.map(([key, label, format]) => [
        label,
        typeof format === 'function' ? format(metrics) : formatNumber(num(metrics, key), format),
        `stat-${key}`,
      ]),
    );
    renderCounts(this.el.frames, ['type', 'count'], get(metrics, 'frames_received'));
    renderCounts(this.el.errors, ['code', 'count'], get(metrics, 'errors'));
    renderCounts(this.el.dropped, ['reason', 'env steps'], get(metrics, 'dropped_env_steps'));
  }

  showBanner(text) {
    this.el.banner.className = text ? 'banner error' : '';
    this.el.banner.textContent = text ?? '';
  }
}

new Dashboard().start();
