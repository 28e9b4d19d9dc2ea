// The chat view: conversations kept in localStorage, answers streamed from
// /v1/chat/completions, rendered as Markdown (no raw HTML), Qwen3's reasoning
// in a collapsible block, tool calls shown as name + arguments. Stop aborts
// the request; the daemon cancels a generation whose client went away.
import { h, mount, clear } from './dom.js';
import { getJson, postStream } from './api.js';
import { renderMarkdown } from './markdown.js';

const STORE = 'neuron.conversations';
const SETTINGS = 'neuron.chatSettings';
const DEFAULTS = { model: '', temperature: '', top_p: '', top_k: '', max_tokens: '512', thinking: true, tools: '' };

function load(key, fallback) {
  try { return JSON.parse(localStorage.getItem(key)) ?? fallback; } catch (_) { return fallback; }
}
function save(key, value) { localStorage.setItem(key, JSON.stringify(value)); }

function newConversation() {
  return { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: 'New chat', system: '', messages: [] };
}

export function chatView(root) {
  let conversations = load(STORE, []);
  if (!Array.isArray(conversations) || conversations.length === 0) conversations = [newConversation()];
  const settings = { ...DEFAULTS, ...load(SETTINGS, {}) };
  let current = conversations[0];
  let controller = null;  // the running request's AbortController
  let models = [];

  const list = h('ul', { class: 'conv-list' });
  const messagesEl = h('div', { class: 'messages', id: 'messages' });
  const modelSelect = h('select', { id: 'model-select', onchange: () => { settings.model = modelSelect.value; persist(); } });
  const input = h('textarea', { id: 'prompt', rows: 3, placeholder: 'Message (Enter sends, Shift+Enter for a new line)' });
  const sendButton = h('button', { id: 'send', class: 'primary', onclick: () => (controller ? stop() : send()) }, 'Send');
  const systemInput = h('textarea', { id: 'system-prompt', rows: 3, placeholder: 'System prompt', oninput: () => { current.system = systemInput.value; persist(); } });
  const field = (name, label, attrs) => {
    const el = h('input', { id: 'setting-' + name, name, value: settings[name], ...attrs, oninput: () => { settings[name] = el.value; persist(); } });
    return h('label', {}, label, el);
  };
  const tools = h('textarea', { id: 'setting-tools', rows: 3, value: settings.tools, spellcheck: 'false',
                                placeholder: '[{"type": "function", "function": {"name": "...", "parameters": {...}}}]',
                                oninput: () => { settings.tools = tools.value; persist(); } });
  const thinking = h('input', { type: 'checkbox', id: 'setting-thinking', checked: settings.thinking, onchange: () => { settings.thinking = thinking.checked; persist(); } });
  const status = h('div', { class: 'status-line', id: 'chat-status' });

  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); if (!controller) send(); }
  });

  const view = h('div', { class: 'chat' },
    h('aside', { class: 'sidebar' },
      h('button', { id: 'new-chat', onclick: () => { if (controller) return; current = newConversation(); conversations.unshift(current); persist(); render(); } }, '+ New chat'),
      list),
    h('section', { class: 'chat-main' },
      h('div', { class: 'chat-toolbar' }, h('label', {}, 'Model ', modelSelect),
        h('details', { class: 'settings' }, h('summary', {}, 'Settings'),
          h('div', { class: 'settings-grid' },
            h('label', { class: 'wide' }, 'System prompt', systemInput),
            field('temperature', 'temperature', { type: 'number', step: '0.05', min: '0', placeholder: 'model default' }),
            field('top_p', 'top_p', { type: 'number', step: '0.05', min: '0', max: '1', placeholder: 'model default' }),
            field('top_k', 'top_k', { type: 'number', step: '1', min: '0', placeholder: 'model default' }),
            field('max_tokens', 'max_tokens', { type: 'number', step: '1', min: '1', placeholder: 'rest of the context' }),
            h('label', { class: 'check' }, thinking, ' thinking (Qwen3 enable_thinking)'),
            h('label', { class: 'wide' }, 'Tools (OpenAI "tools" JSON; the model\'s calls are shown, not run)', tools)))),
      messagesEl,
      status,
      h('div', { class: 'composer' }, input, sendButton)));
  mount(root, view);

  function persist() {
    save(STORE, conversations);
    save(SETTINGS, settings);
  }

  function renderList() {
    clear(list);
    for (const c of conversations) {
      list.appendChild(h('li', { class: c === current ? 'active' : '' },
        h('button', { class: 'conv-title', title: c.title, onclick: () => { if (controller) return; current = c; render(); } }, c.title),
        h('button', { class: 'conv-delete', title: 'Delete', 'aria-label': 'Delete conversation', onclick: () => remove(c) }, '\u00d7')));
    }
  }

  function remove(c) {
    if (controller && c === current) return;
    conversations = conversations.filter((x) => x !== c);
    if (conversations.length === 0) conversations.push(newConversation());
    if (c === current) current = conversations[0];
    persist();
    render();
  }

  function messageNode(m) {
    const el = h('div', { class: 'msg ' + m.role });
    fillMessage(el, m);
    return el;
  }

  function fillMessage(el, m) {
    clear(el);
    el.appendChild(h('div', { class: 'role' }, m.role === 'user' ? 'You' : (m.model || 'assistant')));
    if (m.reasoning) {
      const streaming = m.streaming && !m.content;
      el.appendChild(h('details', { class: 'reasoning', open: streaming || m.reasoningOpen },
        h('summary', {}, streaming ? 'Reasoning\u2026' : 'Reasoning'),
        h('div', { class: 'reasoning-text' }, m.reasoning)));
      el.lastChild.addEventListener('toggle', (e) => { m.reasoningOpen = e.target.open; });
    }
    if (m.role === 'user') el.appendChild(h('div', { class: 'content plain' }, m.content));
    else if (m.content) el.appendChild(h('div', { class: 'content markdown' }, renderMarkdown(m.content)));
    for (const call of m.tool_calls || []) {
      let args = call.function?.arguments ?? '';
      try { args = JSON.stringify(JSON.parse(args), null, 2); } catch (_) { /* partial or not JSON: as written */ }
      el.appendChild(h('div', { class: 'tool-call' },
        h('div', { class: 'tool-name' }, 'Tool call: ', h('code', {}, call.function?.name ?? '?')),
        h('pre', {}, args)));
    }
    const notes = [];
    if (m.stopped) notes.push('stopped');
    if (m.finish_reason && m.finish_reason !== 'stop') notes.push('finish: ' + m.finish_reason);
    if (m.usage) notes.push(m.usage.completion_tokens + ' tokens');
    if (notes.length) el.appendChild(h('div', { class: 'meta' }, notes.join(' \u00b7 ')));
    if (m.error) el.appendChild(h('div', { class: 'error' }, m.error));
  }

  function render() {
    renderList();
    systemInput.value = current.system || '';
    mount(messagesEl, current.messages.map(messageNode));
    if (current.messages.length === 0) messagesEl.appendChild(h('div', { class: 'empty' }, 'Start a conversation with a loaded model.'));
    messagesEl.scrollTop = messagesEl.scrollHeight;
  }

  async function refreshModels() {
    try {
      // /models names a model as clients may call it (its served name when it has one).
      const list = await getJson('/models');
      // /models: `capabilities` are the gateway's modality words ("text"); neuron's own list is `features`.
      models = list.filter((m) => m.state === 'loaded' && (m.features || []).includes('chat')).map((m) => m.id);
    } catch (e) {
      models = [];
      status.textContent = 'cannot list models: ' + e.message;
    }
    if (!models.includes(settings.model)) settings.model = models[0] || '';
    mount(modelSelect, models.length ? models.map((id) => h('option', { value: id }, id)) : h('option', { value: '' }, '(no model loaded)'));
    modelSelect.value = settings.model;
  }

  function requestBody() {
    const messages = [];
    if (current.system) messages.push({ role: 'system', content: current.system });
    for (const m of current.messages) {
      if (m.streaming) continue;
      if (m.role === 'assistant' && m.error && !m.content && !(m.tool_calls || []).length) continue;
      const out = { role: m.role, content: m.content || '' };
      if (m.tool_calls?.length) out.tool_calls = m.tool_calls;
      messages.push(out);
    }
    const body = { model: settings.model, messages, stream: true, stream_options: { include_usage: true },
                   chat_template_kwargs: { enable_thinking: !!settings.thinking } };
    for (const k of ['temperature', 'top_p']) if (settings[k] !== '') body[k] = parseFloat(settings[k]);
    for (const k of ['top_k', 'max_tokens']) if (settings[k] !== '') body[k] = parseInt(settings[k], 10);
    if (settings.tools.trim()) body.tools = JSON.parse(settings.tools);  // a SyntaxError is shown by send()
    return body;
  }

  async function send() {
    const text = input.value.trim();
    if (!text) return;
    if (!settings.model) { status.textContent = 'no model loaded: load one under Models'; return; }
    current.messages.push({ role: 'user', content: text });
    let body;
    try {
      body = requestBody();
    } catch (e) {
      current.messages.pop();
      status.textContent = 'the tools are not valid JSON: ' + e.message;
      return;
    }
    if (current.title === 'New chat') current.title = text.slice(0, 40);
    input.value = '';
    const answer = { role: 'assistant', model: settings.model, content: '', reasoning: '', tool_calls: [], streaming: true };
    current.messages.push(answer);
    persist();
    render();
    const el = messagesEl.lastChild;
    controller = new AbortController();
    sendButton.textContent = 'Stop';
    sendButton.classList.add('stop');
    status.textContent = 'generating\u2026';
    let frame = 0;
    const update = () => {
      if (frame) return;
      frame = requestAnimationFrame(() => { frame = 0; fillMessage(el, answer); messagesEl.scrollTop = messagesEl.scrollHeight; });
    };
    try {
      await postStream('/v1/chat/completions', body, controller.signal, (event) => {
        if (event.error) throw new Error(event.error.message || 'generation failed');
        if (event.usage) answer.usage = event.usage;
        for (const choice of event.choices || []) {
          const d = choice.delta || {};
          if (d.reasoning_content) answer.reasoning += d.reasoning_content;
          if (d.content) answer.content += d.content;
          for (const t of d.tool_calls || []) {
            const call = (answer.tool_calls[t.index ?? 0] ??= { id: t.id, type: 'function', function: { name: '', arguments: '' } });
            if (t.id) call.id = t.id;
            if (t.function?.name) call.function.name += t.function.name;
            if (t.function?.arguments) call.function.arguments += t.function.arguments;
          }
          if (choice.finish_reason) answer.finish_reason = choice.finish_reason;
        }
        update();
      });
    } catch (e) {
      if (e.name === 'AbortError') answer.stopped = true;
      else answer.error = e.message;
    }
    if (frame) cancelAnimationFrame(frame);
    frame = 0;
    delete answer.streaming;
    controller = null;
    sendButton.textContent = 'Send';
    sendButton.classList.remove('stop');
    status.textContent = '';
    persist();
    fillMessage(el, answer);
    renderList();
  }

  function stop() {
    if (controller) controller.abort();
  }

  render();
  refreshModels();
  return () => stop();
}
