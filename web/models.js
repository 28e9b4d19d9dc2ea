// The models view: GET /models as a table (state, devices, memory, KV,
// queue, download and load progress), POST /models/load with the ModelSpec
// fields (wait: false, then polled), POST /models/unload.
import { h, mount, formatBytes } from './dom.js';
import { getJson, postJson } from './api.js';

export function modelsView(root) {
  const table = h('tbody', { id: 'models-body' });
  const message = h('div', { class: 'status-line', id: 'models-status' });
  const inputs = {
    model_id: h('input', { id: 'load-model-id', required: true, placeholder: 'directory, .gguf file or Hugging Face id' }),
    device: h('input', { id: 'load-device', placeholder: 'cpu, cuda, cuda:1' }),
    tensor_parallel: h('input', { id: 'load-tp', type: 'number', min: '1', step: '1', placeholder: '1' }),
    quant: h('input', { id: 'load-quant', placeholder: 'q8_0, q4_k, fp8, Q4_K_M' }),
    max_context: h('input', { id: 'load-max-context', type: 'number', min: '1', step: '1', placeholder: 'model default' }),
    keep_alive: h('input', { id: 'load-keep-alive', placeholder: '5m, 30s, -1' }),
    served_model_name: h('input', { id: 'load-name', placeholder: 'alias' }),
  };
  const form = h('form', { class: 'load-form', id: 'load-form', onsubmit: (e) => { e.preventDefault(); load(); } },
    Object.entries(inputs).map(([k, el]) => h('label', { class: k === 'model_id' ? 'wide' : '' }, k, el)),
    h('button', { type: 'submit', class: 'primary', id: 'load-submit' }, 'Load'));
  mount(root, h('div', { class: 'page' },
    h('h2', {}, 'Models'),
    h('div', { class: 'table-wrap' }, h('table', { class: 'models' },
      h('thead', {}, h('tr', {}, ['model', 'state', 'devices', 'memory', 'KV cache', 'queue', 'progress', ''].map((t) => h('th', {}, t)))),
      table)),
    message,
    h('h2', {}, 'Load a model'), form));

  let timer = null;
  let stopped = false;
  let pending = false;  // a load was started from the form

  async function load() {
    const body = { wait: false };
    for (const [k, el] of Object.entries(inputs)) {
      const v = el.value.trim();
      if (!v) continue;
      body[k] = ['tensor_parallel', 'max_context'].includes(k) ? parseInt(v, 10) : v;
    }
    message.textContent = 'loading ' + body.model_id + '\u2026';
    try {
      await postJson('/models/load', body);
      inputs.model_id.value = '';
      pending = true;  // the message goes once no model is loading
    } catch (e) {
      message.textContent = 'load failed: ' + e.message;
    }
    refresh();
  }

  async function unload(id) {
    message.textContent = 'unloading ' + id + '\u2026';
    try {
      await postJson('/models/unload', { model_id: id });
      message.textContent = 'unloaded ' + id;
    } catch (e) {
      message.textContent = 'unload failed: ' + e.message;
    }
    refresh();
  }

  function progress(m) {
    const d = m.download;
    if (d && d.bytes_total > 0 && m.state === 'loading') {
      return h('div', {}, h('progress', { max: d.bytes_total, value: d.bytes_done }),
        ' ' + formatBytes(d.bytes_done / 1048576) + ' / ' + formatBytes(d.bytes_total / 1048576) + ' (' + d.files_done + '/' + d.files_total + ' files)');
    }
    if (m.state === 'loading') return h('div', {}, h('progress', {}), ' loading');
    if (m.reload) return 'reload attempt ' + m.reload.attempt;
    return m.error ? h('span', { class: 'error' }, m.error.kind + ': ' + m.error.message) : '';
  }

  function kv(m) {
    const c = m.kv_cache;
    if (!c || !c.blocks_total) return '-';
    return Math.round((100 * (c.blocks_used || 0)) / c.blocks_total) + '% of ' + c.blocks_total + ' blocks';
  }

  function queue(m) {
    if (m.running === undefined) return '-';
    return m.running + ' running, ' + m.queue_depth + ' waiting';
  }

  async function refresh() {
    clearTimeout(timer);
    let list = [];
    try {
      list = await getJson('/models');
    } catch (e) {
      message.textContent = 'cannot list models: ' + e.message;
    }
    if (stopped) return;
    mount(table, list.map((m) => h('tr', { 'data-model': m.id },
      h('td', { class: 'model-id' }, m.id),
      h('td', { class: 'state state-' + (m.state || m.status) }, m.state || m.status),
      h('td', {}, (m.device_names || m.devices || []).join(', ')),
      h('td', {}, m.memory ? formatBytes((m.memory.weight_bytes + m.memory.kv_cache_bytes) / 1048576) : '-'),
      h('td', {}, kv(m)),
      h('td', {}, queue(m)),
      h('td', {}, progress(m)),
      h('td', {}, h('button', { class: 'unload', onclick: () => unload(m.id) }, 'Unload')))));
    if (list.length === 0) table.appendChild(h('tr', {}, h('td', { colspan: 8, class: 'empty' }, 'No model loaded.')));
    const busy = list.some((m) => m.state === 'loading' || m.state === 'reloading');
    if (pending && !busy) { pending = false; message.textContent = ''; }
    timer = setTimeout(refresh, busy ? 500 : 3000);
  }

  refresh();
  return () => { stopped = true; clearTimeout(timer); };
}
