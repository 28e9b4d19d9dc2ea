// The node dashboard: /health (devices, models, activation) and /metrics
// (token counters, in-flight, queue, KV blocks, HTTP errors) polled every
// second; rates and gauges kept for the last ten minutes and drawn as small
// time-series plots on canvases.
import { h, mount, formatBytes } from './dom.js';
import { getJson, getText, parseMetrics } from './api.js';

const PERIOD_MS = 1000;
const KEEP = 600;  // samples: ten minutes at one a second

const SERIES = [
  { key: 'decode', title: 'generated tokens/s' },
  { key: 'prefill', title: 'prompt tokens/s' },
  { key: 'in_flight', title: 'requests in flight' },
  { key: 'queue', title: 'queued requests' },
  { key: 'kv', title: 'KV cache used (%)' },
  { key: 'errors', title: 'HTTP 5xx per second' },
];

// Survives switching views, so the plots keep their history.
const history = { t: [], ...Object.fromEntries(SERIES.map((s) => [s.key, []])) };
let previous = null;  // the last sample's counters, for rates

function sum(metrics, name, filter = () => true) {
  return metrics.filter((m) => m.name === name && filter(m.labels)).reduce((a, m) => a + m.value, 0);
}

function record(metrics) {
  const now = performance.now();
  const counters = {
    prompt: sum(metrics, 'neuron_prompt_tokens_total'),
    generated: sum(metrics, 'neuron_generated_tokens_total'),
    errors: sum(metrics, 'neuron_http_requests_total', (l) => Number(l.status) >= 500),
  };
  const rate = (k) => (previous ? Math.max(0, counters[k] - previous[k]) / ((now - previous.t) / 1000) : 0);
  const total = sum(metrics, 'neuron_kv_blocks_total');
  const sample = {
    decode: rate('generated'),
    prefill: rate('prompt'),
    in_flight: sum(metrics, 'neuron_requests_in_flight'),
    queue: sum(metrics, 'neuron_queue_depth'),
    kv: total > 0 ? (100 * sum(metrics, 'neuron_kv_blocks_used')) / total : 0,
    errors: rate('errors'),
  };
  previous = { ...counters, t: now };
  history.t.push(Date.now());
  for (const s of SERIES) history[s.key].push(sample[s.key]);
  if (history.t.length > KEEP) for (const k of Object.keys(history)) history[k].shift();
  return { counters, sample };
}

function plot(canvas, values, title) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 280, height = canvas.clientHeight || 80;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  const g = canvas.getContext('2d');
  g.scale(ratio, ratio);
  g.clearRect(0, 0, width, height);
  const max = Math.max(1e-9, ...values);
  const top = max > 0 ? max * 1.1 : 1;
  g.strokeStyle = '#d0d7de';
  g.lineWidth = 1;
  g.beginPath();
  g.moveTo(0, height - 0.5);
  g.lineTo(width, height - 0.5);
  g.stroke();
  if (values.length > 1) {
    const step = width / (KEEP - 1);
    const x0 = width - (values.length - 1) * step;
    g.beginPath();
    values.forEach((v, i) => {
      const x = x0 + i * step, y = height - 2 - (v / top) * (height - 18);
      if (i === 0) g.moveTo(x, y); else g.lineTo(x, y);
    });
    g.strokeStyle = '#0969da';
    g.lineWidth = 1.5;
    g.stroke();
  }
  g.fillStyle = '#57606a';
  g.font = '11px sans-serif';
  g.fillText('max ' + format(Math.max(0, ...values)), 4, 12);
  canvas.setAttribute('aria-label', title + ': now ' + format(values[values.length - 1] ?? 0) + ', max ' + format(Math.max(0, ...values)));
}

function format(v) {
  return v >= 100 ? Math.round(v).toString() : v >= 10 ? v.toFixed(1) : v.toFixed(2).replace(/\.?0+$/, '') || '0';
}

export function dashboardView(root) {
  const summary = h('div', { class: 'cards', id: 'node-summary' });
  const devices = h('tbody', {});
  const models = h('tbody', { id: 'dashboard-models' });
  const errors = h('ul', { class: 'errors', id: 'node-errors' });
  const plots = SERIES.map((s) => {
    const value = h('span', { class: 'plot-value', id: 'plot-' + s.key }, '-');
    const canvas = h('canvas', { class: 'plot', role: 'img' });
    return { ...s, value, canvas, el: h('div', { class: 'plot-card' }, h('div', { class: 'plot-title' }, s.title, value), canvas) };
  });
  mount(root, h('div', { class: 'page' },
    h('h2', {}, 'Node'), summary,
    h('div', { class: 'plots' }, plots.map((p) => p.el)),
    h('h2', {}, 'Models'),
    h('div', { class: 'table-wrap' }, h('table', {},
      h('thead', {}, h('tr', {}, ['model', 'state', 'in flight', 'queued', 'KV free', 'prefill tok/s', 'decode tok/s', 'rejected'].map((t) => h('th', {}, t)))),
      models)),
    h('h2', {}, 'Devices'),
    h('div', { class: 'table-wrap' }, h('table', {},
      h('thead', {}, h('tr', {}, ['GPU', 'memory used', 'free', 'total'].map((t) => h('th', {}, t)))), devices)),
    h('h2', {}, 'Errors'), errors));

  let timer = null;
  let stopped = false;

  async function tick() {
    let health = null, metrics = null, problem = null;
    try { health = await getJson('/health'); } catch (e) { problem = '/health: ' + e.message; }
    try { metrics = parseMetrics(await getText('/metrics')); } catch (e) { problem = problem || '/metrics: ' + e.message; }
    if (stopped) return;
    const counters = metrics ? record(metrics).counters : null;
    if (health) {
      const act = health.activation || {};
      mount(summary,
        card('status', health.status, 'node-status'), card('version', health.version), card('uptime', duration(health.uptime_secs)),
        card('startup models', act.state || '-'),
        card('models loaded', health.models.filter((m) => m.state === 'loaded').length, 'models-loaded'),
        card('requests', counters ? Math.round(sum(metrics, 'neuron_http_requests_total')) : '-', 'requests-total'),
        card('tokens generated', counters ? Math.round(counters.generated) : '-', 'tokens-generated'));
      mount(models, health.models.map((m) => h('tr', {},
        h('td', {}, m.id), h('td', {}, m.state), h('td', {}, m.in_flight + ' / ' + m.max_in_flight),
        h('td', {}, m.queue_depth + ' / ' + m.max_queue_depth),
        h('td', {}, m.kv_budget_mb ? formatBytes(m.kv_available_mb) + ' of ' + formatBytes(m.kv_budget_mb) : '-'),
        h('td', {}, format(m.tok_s_prefill)), h('td', {}, format(m.tok_s_decode)), h('td', {}, m.rejected_queue_full))));
      mount(devices, health.devices.length ? health.devices.map((d) => h('tr', {},
        h('td', {}, 'cuda:' + d.index), h('td', {}, formatBytes(d.vram_used_mb)), h('td', {}, formatBytes(d.vram_free_mb)), h('td', {}, formatBytes(d.vram_total_mb))))
        : h('tr', {}, h('td', { colspan: 4, class: 'empty' }, 'No GPU: models run on the CPU.')));
      const list = [];
      for (const f of act.failed || []) list.push('startup load of ' + f.model_id + ' failed: ' + f.error);
      for (const m of health.models) if (m.reload) list.push(m.id + ': reload attempt ' + m.reload.attempt);
      for (const m of health.models) if (m.state === 'failed') list.push(m.id + ' failed');
      if (counters && counters.errors) list.push(Math.round(counters.errors) + ' HTTP responses with status 5xx since start');
      if (problem) list.push(problem);
      mount(errors, list.length ? list.map((t) => h('li', {}, t)) : h('li', { class: 'empty' }, 'none'));
    } else {
      mount(errors, h('li', {}, problem));
    }
    for (const p of plots) {
      const values = history[p.key];
      p.value.textContent = values.length ? format(values[values.length - 1]) : '-';
      plot(p.canvas, values, p.title);
    }
    timer = setTimeout(tick, PERIOD_MS);
  }

  tick();
  return () => { stopped = true; clearTimeout(timer); };
}

function card(label, value, id) {
  return h('div', { class: 'card' }, h('div', { class: 'card-label' }, label), h('div', { class: 'card-value', id }, String(value)));
}

function duration(s) {
  if (s < 120) return s + ' s';
  if (s < 7200) return Math.round(s / 60) + ' min';
  return (s / 3600).toFixed(1) + ' h';
}
