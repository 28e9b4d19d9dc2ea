// The daemon's HTTP API, same origin only. The API key (--api-key) lives in
// sessionStorage: it is asked for once per browser session, never written to
// localStorage. A 401 calls the handler set with onUnauthorized().

const KEY_STORAGE = 'neuron.apiKey';
let unauthorized = () => {};

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function apiKey() { return sessionStorage.getItem(KEY_STORAGE) || ''; }
export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
}
export function onUnauthorized(fn) { unauthorized = fn; }

function headers(json) {
  const out = {};
  if (json) out['content-type'] = 'application/json';
  const key = apiKey();
  if (key) out.authorization = 'Bearer ' + key;
  return out;
}

async function check(res) {
  if (res.ok) return res;
  let message = res.status + ' ' + res.statusText;
  try {
    const body = await res.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch (_) { /* not JSON */ }
  if (res.status === 401) unauthorized(message);
  throw new ApiError(res.status, message);
}

export async function getJson(path) {
  const res = await check(await fetch(path, { headers: headers(false), cache: 'no-store' }));
  return res.json();
}

export async function getText(path) {
  const res = await check(await fetch(path, { headers: headers(false), cache: 'no-store' }));
  return res.text();
}

export async function postJson(path, body, signal) {
  const res = await check(await fetch(path, { method: 'POST', headers: headers(true), body: JSON.stringify(body), signal }));
  return res.json();
}

// POSTs a streaming request and calls onEvent(json) for each server-sent
// `data:` event until [DONE]. Aborting `signal` closes the connection, which
// makes the daemon cancel the generation.
export async function postStream(path, body, signal, onEvent) {
  const res = await check(await fetch(path, { method: 'POST', headers: headers(true), body: JSON.stringify(body), signal }));
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;  // comments (heartbeats), event names
        const data = line.slice(5).trim();
        if (data === '[DONE]') return;
        onEvent(JSON.parse(data));
      }
    }
  }
}

// Prometheus text -> [{name, labels: {..}, value}]
export function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}
