// The page shell: a header with the node's status, three views (Chat,
// Models, Node) chosen by the URL's hash, and the API key prompt shown when
// the daemon answers 401 (--api-key).
import { h, mount } from './dom.js';
import { apiKey, getJson, onUnauthorized, setApiKey } from './api.js';
import { chatView } from './chat.js';
import { modelsView } from './models.js';
import { dashboardView } from './dashboard.js';

const VIEWS = { chat: ['Chat', chatView], models: ['Models', modelsView], node: ['Node', dashboardView] };

const app = document.getElementById('app');
const main = h('main', { id: 'view' });
const nav = h('nav', {});
const dot = h('span', { class: 'dot', id: 'health-dot', title: 'node status' });
const version = h('span', { class: 'version' });
const keyButton = h('button', { class: 'link', id: 'key-button', onclick: () => askKey('') }, '');
mount(app, h('header', {}, h('span', { class: 'brand' }, dot, 'neuron', version), nav, keyButton), main);

let unmount = () => {};
let asking = false;

function route() {
  const name = VIEWS[location.hash.slice(1)] ? location.hash.slice(1) : 'chat';
  mount(nav, Object.entries(VIEWS).map(([key, [label]]) =>
    h('a', { href: '#' + key, class: key === name ? 'active' : '', id: 'nav-' + key }, label)));
  unmount();
  unmount = VIEWS[name][1](main) || (() => {});
  keyButton.textContent = apiKey() ? 'API key \u2713' : 'API key';
}

function askKey(reason) {
  if (asking) return;
  asking = true;
  const input = h('input', { type: 'password', id: 'api-key-input', autocomplete: 'off', placeholder: 'API key' });
  const dialog = h('div', { class: 'overlay', id: 'api-key-dialog' },
    h('form', { class: 'dialog', onsubmit: (e) => {
      e.preventDefault();
      setApiKey(input.value.trim());
      dialog.remove();
      asking = false;
      route();
    } },
      h('h2', {}, 'API key'),
      h('p', {}, 'This node was started with --api-key. The key is kept for this browser session only.'),
      reason ? h('p', { class: 'error' }, reason) : null,
      input,
      h('div', { class: 'dialog-buttons' },
        h('button', { type: 'button', onclick: () => { dialog.remove(); asking = false; } }, 'Cancel'),
        h('button', { type: 'submit', class: 'primary', id: 'api-key-submit' }, 'Save'))));
  document.body.appendChild(dialog);
  input.focus();
}

onUnauthorized((message) => askKey(message));
window.addEventListener('hashchange', route);
route();

async function heartbeat() {
  try {
    const health = await getJson('/health');
    dot.className = 'dot ' + (health.status === 'ok' ? 'ok' : 'warn');
    version.textContent = ' ' + health.version;
  } catch (_) {
    dot.className = 'dot down';
  }
  setTimeout(heartbeat, 5000);
}
heartbeat();
