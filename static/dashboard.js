/**
 * dashboard.js — the live dashboard at `/`: polls the REST API and redraws in place.
 *
 * GET /api/metrics every second, /api/clients and /api/policies every other second. Every
 * field is optional here: a missing one shows as "—" and leaves a gap in its chart, so
 * the page works with older or newer gateways alike (one without /api/policies shows "—"
 * for the policies). On opening, the charts are drawn from GET /api/metrics/history (a
 * snapshot per training step since the run began; absent on older gateways), then grow
 * with every poll; when a counter goes backwards (the gateway restarted) that chart
 * starts over.
 *
 * Several policies (modules): the policies table has a row per module; the per-module
 * charts (return mean, losses, version, and ELO for self-play: anchored, the random reference
 * is fixed at 1000 by default) draw one line per module
 * (a trainable one; ELO: a self-play learner), a module's line starting when it shows
 * up. They are hidden while the gateway has a single module (the page then looks as it
 * did before modules), and the ELO chart while no module plays itself.
 *
 * With the gateway's auth on, open `/#token=...`: the token goes in an Authorization
 * header and, being in the URL fragment, never reaches a server log.
 *
 * For tests: #updated carries data-polls, the number of successful metric polls, and
 * data-history-points, the number of /api/metrics/history points drawn on opening, and
 * each stat tile has the id stat-<metric> (#stat-weights_seq_no,
 * #stat-num_env_steps_sampled_lifetime, #stat-clients, ...; see STATS) with its text
 * in .value. #policies carries data-polls, the number of /api/policies answers shown, and
 * holds the policies table: one body row per module with
 * data-module-id, each cell with data-key, its column's field (see POLICY_COLUMNS:
 * module_id, observation_space, action_space, role, weights_seq_no,
 * num_env_steps_trained_lifetime, episode_return_mean, evaluation_return_mean, best_model (best.onnx: "v41 (498.7)"),
 * games, win_rate, elo, vs_references: a
 * self-play learner's recent wins / draws / losses against each fixed reference per seat,
 * "random: player_0 12 / 1 / 3, player_1 ...; lookahead: ..."). Each chart's
 * element (#chart-return, ... and the per-module #chart-policy-return,
 * #chart-policy-loss, #chart-policy-version, #chart-elo) carries data-points (x values
 * kept), data-series (JSON: series label -> values kept that are not gaps) and
 * data-last (JSON: series label -> its latest value that is not a gap, or null); the
 * per-module charts' series are labelled by module_id ("<module_id> policy_loss" and
 * "<module_id> vf_loss" in #chart-policy-loss), and their .card is `hidden` when not shown.
 * #env-params holds the environment parameters (/api/metrics env_params, and curriculum for
 * those that follow lessons): one body row per parameter with data-param, each cell with
 * data-key (param, value, lesson: "2/3 far", episodes, progress: "measure 0.85 / 0.9").
 */

import { LineChart, loadUPlot } from './charts.js';
import { tokenFromPage } from './rllink.js';
import { MISSING, formatNumber, renderStats, renderTable } from './widgets.js';

const POLL_MS = 1000;
const CLIENTS_EVERY_POLLS = 2; // and /api/policies
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
    title: 'Episode return (last 100 episodes; evaluation: greedy, never trained)',
    xLabel: 'env steps sampled',
    x: (m) => num(m, 'num_env_steps_sampled_lifetime'),
    ys: {
      mean: 'episode_return_mean',
      min: 'episode_return_min',
      max: 'episode_return_max',
      evaluation: 'evaluation_return_mean',
    },
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
    ys: {
      policy_loss: 'learner.policy_loss',
      vf_loss: 'learner.vf_loss',
      actor_loss: 'learner.actor_loss', // SAC
      qf_loss: 'learner.qf_loss', // SAC
    },
    rightAxis: ['vf_loss', 'qf_loss'],
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
  ['evaluation_return_mean', 'evaluation return mean (greedy, never trained)', 1],
  ['env_steps_per_s', 'env steps / s', 0],
  ['clients', 'clients tcp / ws', (m) => `${formatNumber(num(m, 'clients.tcp'))} / ${formatNumber(num(m, 'clients.ws'))}`],
  ['pending_env_steps', 'pending env steps'],
  ['training_in_progress', 'learner', (m) => ({ true: 'training', false: 'idle' })[get(m, 'training_in_progress')] ?? MISSING],
  ['last_training_step_s', 'last training step (s)', 2],
  ['uptime_s', 'uptime (s)', 0],
];

/** Was the module trained in the gateway's latest version (so its learner stats are of that step)? */
const trainedNow = (p, m) => num(p, 'weights_seq_no') !== null && num(p, 'weights_seq_no') === num(m, 'weights_seq_no');

/** A module that trains (not a frozen self-play opponent); unknown modules count as trainable. */
const trainable = (p, info) => info == null || (get(info, 'trainable') !== false && get(info, 'opponent_of') === null);

/** A self-play learner. */
const selfPlay = (p, info) => get(info, 'self_play') !== null || num(p, 'elo') !== null;

/**
 * The per-module charts: x from the metrics; for each module of metrics.policies that
 * `include` takes (module metrics, its /api/policies entry or null), one series per `ys`
 * entry, labelled module_id + suffix, y from (module metrics, metrics). Every module
 * keeps one colour on every chart.
 */
const POLICY_CHARTS = [
  {
    id: 'chart-policy-return',
    title: 'Episode return mean per policy',
    xLabel: 'env steps sampled (all policies)',
    x: (m) => num(m, 'num_env_steps_sampled_lifetime'),
    include: trainable,
    ys: [{ suffix: '', y: (p) => num(p, 'episode_return_mean') }],
  },
  {
    id: 'chart-policy-loss',
    title: 'Losses per policy (vf_loss dashed)',
    xLabel: 'training step',
    x: (m) => num(m, 'num_training_steps'),
    include: trainable,
    ys: [
      { suffix: ' policy_loss', y: (p, m) => (trainedNow(p, m) ? num(p, 'learner.policy_loss') : null) },
      { suffix: ' vf_loss', y: (p, m) => (trainedNow(p, m) ? num(p, 'learner.vf_loss') : null), right: true, dash: [6, 4] },
    ],
  },
  {
    id: 'chart-policy-version',
    title: 'Version per policy (weights_seq_no)',
    xLabel: 'uptime (s)',
    x: uptime,
    include: trainable,
    ys: [{ suffix: '', y: (p) => num(p, 'weights_seq_no') }],
  },
  {
    id: 'chart-elo',
    title: 'ELO rating (self-play)',
    xLabel: 'env steps sampled (all policies)',
    x: (m) => num(m, 'num_env_steps_sampled_lifetime'),
    include: selfPlay,
    selfPlayOnly: true,
    ys: [{ suffix: '', y: (p) => num(p, 'elo') }],
  },
];

/** A space in short form: Box(4), Box(2×2) [-2, 2], Discrete(3); "—" if unknown. */
function spaceText(space) {
  const type = get(space, 'type');
  if (type === 'discrete') return `Discrete(${formatNumber(num(space, 'n'))})`;
  if (type !== 'box') return MISSING;
  const shape = Array.isArray(space.shape) ? space.shape.map((d) => formatNumber(d)).join('×') : MISSING;
  const [low, high] = [num(space, 'low'), num(space, 'high')];
  const bounds = low === null && high === null ? '' : ` [${low ?? '-∞'}, ${high ?? '∞'}]`;
  return `Box(${shape})${bounds}`;
}

/** How a module trains: trainable (self-play vs the snapshot it plays), opponent of another, frozen, a population or its member. */
function roleText(policy, policies) {
  const opponentOf = get(policy, 'opponent_of');
  if (opponentOf !== null) {
    const learner = policies.find((p) => get(p, 'module_id') === opponentOf);
    const league = get(learner, 'self_play');
    if (league === null) return `opponent of ${opponentOf}`;
    return `opponent of ${opponentOf}: ${opponentText(league)}`;
  }
  const memberOf = get(policy, 'member_of');
  const exploiter = get(policies.find((p) => get(p, 'module_id') === memberOf), 'self_play.exploiter');
  if (memberOf !== null && get(exploiter, 'module_id') === get(policy, 'module_id')) {
    return `exploiter of ${memberOf}: ${exploiterText(exploiter)}`;
  }
  if (memberOf !== null) return `member of ${memberOf}: ${memberText(policy, policies, memberOf)}`;
  const population = get(policy, 'population');
  if (population !== null) {
    return `population of ${Object.keys(get(population, 'members') ?? {}).length}, serves ${get(population, 'serves') ?? MISSING} `
      + `(${formatNumber(num(population, 'exploits'))} copies)`;
  }
  const trains = get(policy, 'trainable');
  if (trains === false) return 'frozen';
  if (trains !== true) return MISSING;
  return get(policy, 'self_play') === null ? 'trainable' : 'trainable, self-play';
}

/** A self-play learner's exploiter now: its score against the learner and its frozen copies that joined the league. */
function exploiterText(exploiter) {
  const rate = num(exploiter, 'win_rate');
  return `score ${rate === null ? MISSING : formatNumber(rate, 2)} over ${formatNumber(num(exploiter, 'games'))} games, `
    + `${formatNumber(num(exploiter, 'joined'))} joined the league, ${formatNumber(num(exploiter, 'restarts'))} restarts`;
}

/** A population member's hyperparameters now, as its population's entry in /api/policies has them. */
function memberText(policy, policies, memberOf) {
  const module = policies.find((p) => get(p, 'module_id') === memberOf);
  const members = get(module, 'population.members');
  const values = members === null ? null : members[get(policy, 'module_id')]?.hyperparameters;
  if (!values) return MISSING;
  return Object.entries(values).map(([name, value]) => `${name} ${formatNumber(value, 4)}`).join(', ');
}

/** Whom a self-play learner's current version plays: a reference, a snapshot or its latest weights. */
function opponentText(league) {
  const kind = get(league, 'opponent.kind');
  if (kind === 'reference') return `${get(league, 'opponent.player') ?? MISSING} reference`;
  const version = num(league, 'opponent.player') ?? num(league, 'opponent_weights_seq_no');
  return kind === 'snapshot' || version !== null ? `v${formatNumber(version)}` : 'latest weights';
}

/** A self-play learner's recent W / D / L against each fixed reference (random, scripted ones), per seat ("—" for others),
 * in training games (`records`) or in evaluation games, where it plays its most likely move (`evaluation_records`). */
function versusReferencesText(policy, key = 'records') {
  const records = get(policy, `self_play.${key}`);
  const references = get(policy, 'self_play.references');
  if (!Array.isArray(records) || !Array.isArray(references)) return MISSING;
  const parts = references.map((reference) => {
    const name = get(reference, 'name');
    const rows = records.filter((r) => get(r, 'opponent') === name);
    if (rows.length === 0) return null;
    const seats = rows
      .map((r) => `${get(r, 'seat') ?? MISSING} ${['win', 'draw', 'loss'].map((o) => formatNumber(num(r, o))).join(' / ')}`)
      .join(', ');
    return `${name}: ${seats}`;
  });
  const shown = parts.filter((part) => part !== null);
  return shown.length === 0 ? MISSING : shown.join('; ');
}

/** The policies table: [field (the cells' data-key), header, (policy, all policies) => text or number]. */
const POLICY_COLUMNS = [
  ['module_id', 'module', (p) => get(p, 'module_id') ?? MISSING],
  ['observation_space', 'observation', (p) => spaceText(get(p, 'observation_space'))],
  ['action_space', 'action', (p) => spaceText(get(p, 'action_space'))],
  ['role', 'trains', roleText],
  ['weights_seq_no', 'version', (p) => num(p, 'weights_seq_no')],
  ['num_env_steps_trained_lifetime', 'env steps trained', (p) => num(p, 'num_env_steps_trained_lifetime')],
  ['episode_return_mean', 'return mean', (p) => formatNumber(num(p, 'episode_return_mean'))],
  ['evaluation_return_mean', 'evaluation return', (p) => formatNumber(num(p, 'evaluation_return_mean'))],
  ['best_model', 'best.onnx (evaluation mean)', (p) => (get(p, 'best_model') === null
    ? MISSING : `v${num(p, 'best_model.weights_seq_no')} (${formatNumber(num(p, 'best_model.evaluation_return_mean'), 1)})`)],
  ['games', 'games W / L / D', (p) =>
    get(p, 'games') === null ? MISSING : ['win', 'loss', 'draw'].map((o) => formatNumber(num(p, `games.${o}`))).join(' / ')],
  ['win_rate', 'win rate', (p) => (num(p, 'win_rate') === null ? MISSING : `${formatNumber(100 * p.win_rate, 1)}%`)],
  ['elo', 'ELO', (p) => formatNumber(num(p, 'elo') ?? num(p, 'self_play.elo'), 0)],
  ['vs_references', 'vs references W / D / L', (p) => versusReferencesText(p)],
  ['greedy_vs_references', 'greedy vs references W / D / L', (p) => versusReferencesText(p, 'evaluation_records')],
];

/** Publish a chart's data on its element for tests: data-points, data-series, data-last (see the header). */
function describeChart(element, labels, xs, ys) {
  if (!element) return;
  element.dataset.points = String(xs.length);
  const kept = (values) => values.filter((v) => v !== null);
  element.dataset.series = JSON.stringify(Object.fromEntries(labels.map((label, i) => [label, kept(ys[i]).length])));
  element.dataset.last = JSON.stringify(Object.fromEntries(labels.map((label, i) => [label, kept(ys[i]).at(-1) ?? null])));
}

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

  /** Add a point if x moved on; redraw unless `draw` is false (many points at once: draw() once after). */
  add(metrics, draw = true) {
    const x = this.spec.x(metrics);
    if (x === null) return;
    const xs = this.columns[0];
    const last = xs.at(-1);
    if (last !== undefined && x < last) this.columns = [[], ...this.paths.map(() => [])]; // gateway restarted
    else if (x === last) return;
    this.columns[0].push(x);
    this.paths.forEach((path, i) => this.columns[i + 1].push(num(metrics, path)));
    if (this.columns[0].length > MAX_POINTS) this.columns.forEach((column) => column.shift());
    if (draw) this.draw();
  }

  draw() {
    this.chart?.setData(this.columns);
    describeChart(document.getElementById(this.spec.id), Object.keys(this.spec.ys), this.columns[0], this.columns.slice(1));
  }
}

/**
 * A per-module chart and its history: a series per module (and ys entry) that `include`s,
 * added as modules show up (gaps before), dropped when they go. Drawn only while shown;
 * redrawn from scratch when its series change.
 */
class PolicyChartHistory {
  constructor(spec) {
    this.spec = spec;
    this.element = document.getElementById(spec.id);
    this.xs = [];
    this.series = new Map(); // label -> {label, color, dash, right, values}
    this.chart = null;
    this.drawnLabels = null;
  }

  /** @param modules [{moduleId, metrics, info, color}] in the gateway's order */
  add(metrics, modules) {
    const x = this.spec.x(metrics);
    if (x === null) return;
    const last = this.xs.at(-1);
    if (last !== undefined && x < last) {
      this.xs = []; // gateway restarted
      this.series.clear();
    } else if (x === last) return;
    const series = new Map();
    for (const { moduleId, metrics: p, info, color } of modules) {
      if (!this.spec.include(p, info)) continue;
      for (const { suffix, y, dash, right } of this.spec.ys) {
        const label = moduleId + suffix;
        const values = this.series.get(label)?.values ?? this.xs.map(() => null);
        values.push(y(p, metrics));
        series.set(label, { label, color, dash, right, values });
      }
    }
    this.xs.push(x);
    this.series = series;
    if (this.xs.length > MAX_POINTS) [this.xs, ...[...series.values()].map((s) => s.values)].forEach((c) => c.shift());
    const all = [...series.values()];
    describeChart(this.element, all.map((s) => s.label), this.xs, all.map((s) => s.values));
  }

  /** Show or hide the chart's card; draw it if shown (and uPlot is there). */
  render(uPlot, shown) {
    const card = this.element?.closest('.card');
    if (card) card.hidden = !shown;
    if (!uPlot || !shown || !this.element) return;
    const all = [...this.series.values()];
    const labels = all.map((s) => s.label).join('\n');
    if (this.chart === null || labels !== this.drawnLabels) {
      this.chart?.destroy();
      this.chart = new LineChart(uPlot, this.element, {
        title: this.spec.title,
        xLabel: this.spec.xLabel,
        series: all.map(({ label, color, dash }) => ({ label, color, dash })),
        rightAxis: all.filter((s) => s.right).map((s) => s.label),
      });
      this.drawnLabels = labels;
    }
    this.chart.setData([this.xs, ...all.map((s) => s.values)]);
  }
}

const ENV_PARAM_COLUMNS = [
  ['param', 'parameter'],
  ['value', 'value'],
  ['lesson', 'lesson'],
  ['episodes', 'episodes in lesson'],
  ['progress', 'measured / threshold'],
];

/** The environment parameters and their lessons as a table ("none" without any; "—" if absent). */
function renderEnvParams(container, metrics) {
  const values = get(metrics, 'env_params');
  if (values === null || typeof values !== 'object') {
    container.textContent = MISSING;
    return;
  }
  const lessons = get(metrics, 'curriculum') ?? {};
  const names = Object.keys(values).sort((a, b) => a.localeCompare(b));
  const rows = names.map((name) => {
    const status = lessons[name] ?? null;
    const lesson = status === null ? 'constant' : `${num(status, 'lesson') + 1}/${num(status, 'lessons')} ${get(status, 'lesson_name')}`;
    const threshold = num(status, 'threshold');
    const progress =
      status === null || threshold === null
        ? MISSING
        : `${get(status, 'measure')} ${formatNumber(num(status, 'measured'))} / ${formatNumber(threshold)}`;
    return [name, String(values[name]), lesson, status === null ? MISSING : num(status, 'episodes'), progress];
  });
  renderTable(container, ENV_PARAM_COLUMNS.map(([, header]) => header), rows, 'none', {
    keys: ENV_PARAM_COLUMNS.map(([key]) => key),
    rowData: names.map((name) => ({ param: name })),
  });
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
    this.uPlot = null;
    this.charts = [];
    this.policyCharts = [];
    this.policies = null; // the latest /api/policies answer (null: none, or the gateway has no such route)
    this.policiesPolls = 0;
    this.moduleColors = new Map(); // module_id -> colour index, in order of appearance
    this.el = Object.fromEntries(
      ['banner', 'updated', 'stats', 'policies', 'clients', 'frames', 'errors', 'dropped', 'env-params'].map((id) => [
        id,
        document.getElementById(id),
      ]),
    );
  }

  async start() {
    try {
      this.uPlot = await loadUPlot();
    } catch (error) {
      this.showBanner(`${error.message}. Numbers only, no charts.`);
    }
    this.charts = CHARTS.map((spec) => new ChartHistory(this.uPlot, spec));
    this.policyCharts = POLICY_CHARTS.map((spec) => new PolicyChartHistory(spec));
    for (const chart of this.policyCharts) chart.render(this.uPlot, false); // hidden until there are several modules
    this.renderMetrics({}); // every tile "—" until the first answer
    this.el.clients.textContent = MISSING;
    this.el.policies.textContent = MISSING;
    await this.drawHistory();
    this.poll();
  }

  /** The run so far, from /api/metrics/history, through the same charts as the polls. */
  async drawHistory() {
    let history = null;
    try {
      history = await this.fetchOptionalJson('/api/metrics/history');
    } catch (error) {
      this.showBanner(`${error.message}: the charts start from now`);
    }
    const points = Array.isArray(get(history, 'points')) ? history.points : [];
    for (const metrics of points) {
      for (const chart of this.charts) chart.add(metrics, false);
      this.addPolicyCharts(metrics);
    }
    for (const chart of this.charts) chart.draw();
    this.el.updated.dataset.historyPoints = String(points.length);
  }

  async fetchJson(path) {
    const headers = this.token ? { Authorization: `Bearer ${this.token}` } : {};
    const response = await fetch(path, { headers, cache: 'no-store' });
    if (!response.ok) throw new Error(`GET ${path}: HTTP ${response.status}`);
    return response.json();
  }

  /** As fetchJson, but null when the gateway has no such route (404: an older gateway). */
  async fetchOptionalJson(path) {
    try {
      return await this.fetchJson(path);
    } catch (error) {
      if (error.message.endsWith('HTTP 404')) return null;
      throw error;
    }
  }

  async poll() {
    try {
      const due = this.polls % CLIENTS_EVERY_POLLS === 0; // the first poll, then every other one
      const [metrics, clients, policies] = await Promise.all([
        this.fetchJson('/api/metrics'),
        due ? this.fetchJson('/api/clients') : undefined,
        due ? this.fetchOptionalJson('/api/policies') : undefined,
      ]);
      this.polls += 1;
      this.renderMetrics(metrics);
      for (const chart of this.charts) chart.add(metrics);
      if (due) {
        renderTable(
          this.el.clients,
          ['id', 'transport', 'peer', 'connected (s)', 'env steps sent', 'waiting', 'weights sent'],
          clientRows(clients),
        );
        this.policies = Array.isArray(policies) ? policies : null;
        this.renderPolicies();
      }
      this.addPolicyCharts(metrics);
      this.el.updated.textContent = `updated ${new Date().toLocaleTimeString()}`;
      this.el.updated.dataset.polls = String(this.polls);
      this.showBanner(null);
    } catch (error) {
      this.showBanner(`${error.message}; retrying every ${POLL_MS / 1000} s`);
    }
    setTimeout(() => this.poll(), POLL_MS);
  }

  /** The policies table, from the latest /api/policies ("—" without one). */
  renderPolicies() {
    this.policiesPolls += 1;
    this.el.policies.dataset.polls = String(this.policiesPolls);
    if (this.policies === null) {
      this.el.policies.textContent = MISSING;
      return;
    }
    renderTable(
      this.el.policies,
      POLICY_COLUMNS.map(([, header]) => header),
      this.policies.map((policy) => POLICY_COLUMNS.map(([, , cell]) => cell(policy, this.policies))),
      'none',
      {
        keys: POLICY_COLUMNS.map(([key]) => key),
        rowData: this.policies.map((policy) => ({ moduleId: String(get(policy, 'module_id') ?? '') })),
      },
    );
  }

  /** Grow the per-module charts from metrics.policies; show them only with several modules (ELO: with self-play). */
  addPolicyCharts(metrics) {
    const perModule = get(metrics, 'policies');
    const info = new Map((this.policies ?? []).map((policy) => [get(policy, 'module_id'), policy]));
    const modules = Object.entries(perModule !== null && typeof perModule === 'object' ? perModule : {}).map(
      ([moduleId, p]) => {
        if (!this.moduleColors.has(moduleId)) this.moduleColors.set(moduleId, this.moduleColors.size);
        return { moduleId, metrics: p, info: info.get(moduleId) ?? null, color: this.moduleColors.get(moduleId) };
      },
    );
    const several = Math.max(modules.length, info.size) > 1;
    const anySelfPlay = modules.some(({ metrics: p, info: i }) => selfPlay(p, i));
    for (const chart of this.policyCharts) {
      chart.add(metrics, modules);
      chart.render(this.uPlot, several && (anySelfPlay || !chart.spec.selfPlayOnly));
    }
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
    renderEnvParams(this.el['env-params'], metrics);
  }

  showBanner(text) {
    this.el.banner.className = text ? 'banner error' : '';
    this.el.banner.textContent = text ?? '';
  }
}

new Dashboard().start();
