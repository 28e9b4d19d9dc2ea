// DOM construction without HTML parsing: every string becomes a text node or
// an attribute value, so nothing a model or a client sends can become markup.
// h('div', {class: 'x', onclick: fn}, 'text', child, [more, children])

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'value') el.value = value;
    else if (key === 'checked') el.checked = !!value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

// Replaces el's children.
export function mount(el, ...children) {
  return append(clear(el), children);
}

export function formatBytes(mb) {
  if (mb === null || mb === undefined) return '-';
  return mb >= 1024 ? (mb / 1024).toFixed(1) + ' GiB' : Math.round(mb) + ' MiB';
}
